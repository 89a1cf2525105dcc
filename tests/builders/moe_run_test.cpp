// `baton train --config configs/debug_moe.yaml` end to end: it trains and
// logs its routing; full activation checkpointing recomputes the same
// routing; FSDP over two ranks, expert parallel over them, tensor parallel
// and a two-stage pipeline follow one process on the same global batch
// (float32, the auxiliary loss on); expert parallel degrees that cannot
// split exit 2.

#include <gtest/gtest.h>

#include <string>
#include <utility>
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

TEST(MoeRun, FsdpExpertTensorAndPipelineParallelFollowOneProcess) {
  const MoeRunResult one =
      train("moe_run_one", "--training.local_batch_size=8");
  // The shard degree takes both ranks; each reads half the global batch.
  const MoeRunResult sharded =
      train("moe_run_fsdp", "--nproc 2 --training.local_batch_size=4");
  expect_follows(sharded.losses, one.losses, 1e-4);
  // Expert parallel: dp_shard 2 (inferred), its two ranks the ep group;
  // each holds 4 of the 8 experts and dispatches its half of the batch by
  // all-to-all.
  const MoeRunResult ep = train(
      "moe_run_ep",
      "--nproc 2 --training.local_batch_size=4"
      " --parallelism.expert_parallel_degree=2");
  EXPECT_NE(ep.output.find("ep=2 (of dp_shard x cp)"), std::string::npos)
      << ep.output;
  EXPECT_NE(ep.output.find("this rank holds experts [0, 4)"), std::string::npos)
      << ep.output;
  expect_follows(ep.losses, one.losses, 1e-4);
  // Tensor parallel: the attention cut, the experts whole, each rank
  // routing its half of every sequence.
  const MoeRunResult tp = train(
      "moe_run_tp",
      "--nproc 2 --training.local_batch_size=8"
      " --parallelism.tensor_parallel_degree=2"
      " --parallelism.data_parallel_shard_degree=1");
  expect_follows(tp.losses, one.losses, 1e-4);
  // Two stages (1F1B), the MoE blocks and their auxiliary loss in both.
  const MoeRunResult piped = train(
      "moe_run_pp",
      "--nproc 2 --training.local_batch_size=8"
      " --parallelism.pipeline_parallel_degree=2"
      " --parallelism.data_parallel_shard_degree=1"
      " --parallelism.pipeline_parallel_microbatch_size=2");
  expect_follows(piped.losses, one.losses, 1e-4);
}

TEST(MoeRun, TheDeepSeekStyleFamilyTrainsWithExpertParallel) {
  // Sigmoid scores in groups, a shared expert, a dense first block and the
  // routing bias moved each step (1e-3: the default).
  const std::string family =
      " --model.name=deepseek_moe --checkpoint.export_format=baton";
  const MoeRunResult one =
      train("moe_run_ds_one", "--training.local_batch_size=8" + family);
  const MoeRunResult ep = train(
      "moe_run_ds_ep",
      "--nproc 2 --training.local_batch_size=4"
      " --parallelism.expert_parallel_degree=2" +
          family);
  expect_follows(ep.losses, one.losses, 1e-4);
  EXPECT_LT(one.losses.back(), one.losses.front() - 1.0);
  // Its attention is not DeepSeek's: no Hugging Face layout to export to,
  // said before the first step.
  const auto r = run_command(
      baton_bin() + " train --config " + source_path("configs/debug_moe.yaml") +
      " --model.name=deepseek_moe --training.steps=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint.export_format"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 1/1"), std::string::npos) << r.output;
}

TEST(MoeRun, ACapacityDropsPairsAndTheLoopTrainsAsTheGroupedMatmul) {
  // One product per expert against the grouped matmul (auto): the same
  // sums in another order.
  const MoeRunResult grouped =
      train("moe_run_grouped", "--training.local_batch_size=4");
  const MoeRunResult loop = train(
      "moe_run_loop",
      "--training.local_batch_size=4 --moe.expert_products=loop");
  expect_follows(loop.losses, grouped.losses, 1e-5);
  // Capacity factor 1 at ep 2: each expert takes at most 4 x 64 x 2 / 8 =
  // 64 of a rank's pairs per forward; the router's imbalance drops some
  // every step, counted over both ranks, and the model still learns.
  const auto dump = fresh_dir("moe_run_capacity");
  const auto r = run_command(
      baton_bin() + " train --config " + source_path("configs/debug_moe.yaml") +
      " --job.dump_folder=" + dump.string() + kRun +
      " --nproc 2 --training.local_batch_size=4"
      " --parallelism.expert_parallel_degree=2 --moe.capacity_factor=1.0");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto metrics = read_metrics(dump);
  ASSERT_EQ(metrics.size(), 6u);
  for (const auto& m : metrics) {
    EXPECT_GT(m["moe_dropped_tokens"].get<double>(), 0.0) << m.dump();
    // Fewer than the pairs past balance can be: 6 layers x 512 tokens x 2.
    EXPECT_LT(m["moe_dropped_tokens"].get<double>(), 6 * 512 * 2);
  }
  EXPECT_LT(
      metrics.back()["loss"].get<double>(),
      metrics.front()["loss"].get<double>() - 1.0);
  // Bad values exit 2 naming the key.
  for (const std::string& bad :
       {std::string("--moe.capacity_factor=-1"),
        std::string("--moe.expert_products=bmm")}) {
    const auto refused = run_command(
        baton_bin() + " train --config " +
        source_path("configs/debug_moe.yaml") + " " + bad +
        " --training.steps=1");
    EXPECT_EQ(refused.code, 2) << bad << "\n" << refused.output;
    EXPECT_NE(
        refused.output.find(bad.substr(2, bad.find('=') - 2)),
        std::string::npos)
        << refused.output;
  }
}

TEST(MoeRun, ExpertParallelRefusesWhatCannotSplitNamingTheKey) {
  const std::string moe = source_path("configs/debug_moe.yaml");
  const std::string dense = source_path("configs/debug_model.yaml");
  for (const auto& [config, args] :
       std::vector<std::pair<std::string, std::string>>{
           // 8 experts do not split 3 ways.
           {moe, "--nproc 3 --parallelism.expert_parallel_degree=3"},
           // ep borrows dp_shard's ranks: 4 of 2.
           {moe, "--nproc 2 --parallelism.expert_parallel_degree=4"},
           // A model without experts.
           {dense, "--nproc 2 --parallelism.expert_parallel_degree=2"},
           {moe, "--parallelism.expert_parallel_degree=0"}}) {
    const auto r = run_command(
        baton_bin() + " train --config " + config + " " + args +
        " --training.steps=1");
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(
        r.output.find("parallelism.expert_parallel_degree"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace baton
