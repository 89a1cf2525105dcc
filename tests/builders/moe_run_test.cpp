// `baton train --config configs/debug_moe.yaml` end to end: it trains and
// logs its routing; full activation checkpointing recomputes the same
// routing; FSDP over two ranks and a two-stage pipeline follow one process
// on the same global batch (float32, the auxiliary loss on).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::read_metrics;
using testing::run_command;
using testing::source_path;

const std::string kRun =
    " --training.mixed_precision_param=float32 --training.steps=6"
    " --training.seq_len=64 --lr_scheduler.warmup_steps=2"
    " --metrics.log_freq=1 --metrics.peak_tflops=1 --moe.aux_loss_coeff=0.01";

struct MoeRunResult {
  std::string output;
  std::vector<double> losses;
};

MoeRunResult train(const std::string& name, const std::string& args) {
  const auto dump = fresh_dir(name);
  const auto r = run_command(
      baton_bin() + " train --config " + source_path("configs/debug_moe.yaml") +
      " --job.dump_folder=" + dump.string() + kRun + " " + args);
  EXPECT_EQ(r.code, 0) << r.output;
  return {r.output, read_losses(dump)};
}

void expect_follows(
    const std::vector<double>& got,
    const std::vector<double>& want,
    double rtol) {
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(want.size(), 6u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rtol * want[i]) << "step " << i + 1;
  }
}

TEST(MoeRun, TrainsAndLogsItsRouting) {
  const auto dump = fresh_dir("moe_run_metrics");
  const auto r = run_command(
      baton_bin() + " train --config " + source_path("configs/debug_moe.yaml") +
      " --job.dump_folder=" + dump.string() + kRun +
      " --training.local_batch_size=4");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto metrics = read_metrics(dump);
  ASSERT_EQ(metrics.size(), 6u);
  for (const char* key :
       {"moe_aux_loss",
        "moe_load_min",
        "moe_load_max",
        "moe_load_cv",
        "moe_load_cv_max",
        "moe_dropped_tokens"}) {
    EXPECT_TRUE(metrics.back().contains(key)) << key;
  }
  // Top 2 of 8: the loss is about k = 2 near balance.
  const double aux = metrics.back()["moe_aux_loss"].get<double>();
  EXPECT_GT(aux, 1.5);
  EXPECT_LT(aux, 8.0);
  EXPECT_LE(metrics.back()["moe_load_min"].get<double>(), 1.0);
  EXPECT_GE(metrics.back()["moe_load_max"].get<double>(), 1.0);
  EXPECT_EQ(metrics.back()["moe_dropped_tokens"].get<double>(), 0.0);
  EXPECT_LT(
      metrics.back()["loss"].get<double>(),
      metrics.front()["loss"].get<double>() - 1.0);
}

TEST(MoeRun, FullActivationCheckpointingRecomputesTheSameRouting) {
  const MoeRunResult plain =
      train("moe_run_plain", "--training.local_batch_size=4");
  const MoeRunResult ac = train(
      "moe_run_ac",
      "--training.local_batch_size=4 --activation_checkpoint.mode=full");
  expect_follows(ac.losses, plain.losses, 1e-6);
}

TEST(MoeRun, FsdpAndAPipelineFollowOneProcess) {
  const MoeRunResult one =
      train("moe_run_one", "--training.local_batch_size=8");
  // The shard degree takes both ranks; each reads half the global batch.
  const MoeRunResult sharded =
      train("moe_run_fsdp", "--nproc 2 --training.local_batch_size=4");
  expect_follows(sharded.losses, one.losses, 1e-4);
  // Two stages (1F1B), the MoE blocks and their auxiliary loss in both.
  const MoeRunResult piped = train(
      "moe_run_pp",
      "--nproc 2 --training.local_batch_size=8"
      " --parallelism.pipeline_parallel_degree=2"
      " --parallelism.data_parallel_shard_degree=1"
      " --parallelism.pipeline_parallel_microbatch_size=2");
  expect_follows(piped.losses, one.losses, 1e-4);
}

TEST(MoeRun, TensorParallelRefusesTheExpertsNamingTheKey) {
  const auto r = run_command(
      baton_bin() + " train --nproc 2 --config " +
      source_path("configs/debug_moe.yaml") +
      " --parallelism.tensor_parallel_degree=2 --training.steps=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("parallelism.tensor_parallel_degree"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton
