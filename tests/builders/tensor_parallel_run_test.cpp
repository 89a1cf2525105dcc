// `baton train --nproc N --parallelism.tensor_parallel_degree=2` end to end,
// as a user runs it: tp 2 alone and tp 2 x dp_shard 2 (4 processes) train on
// the one process's global batches and follow its losses closely; the logs
// say what each rank holds.

#include <gtest/gtest.h>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::run_command;
using testing::source_path;

// float32 compute, whatever `auto` picks on this machine.
const std::string kRun =
    " --training.mixed_precision_param=float32 --training.steps=20 "
    "--training.seq_len=64 --lr_scheduler.warmup_steps=4 --metrics.log_freq=1 "
    "--metrics.peak_tflops=1";

std::vector<double> train(const std::string& name, const std::string& args) {
  const auto dump = fresh_dir(name);
  const auto r = run_command(
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() + kRun + args);
  EXPECT_EQ(r.code, 0) << r.output;
  if (args.find("tensor_parallel_degree=2") != std::string::npos) {
    EXPECT_NE(
        r.output.find("tensor_parallel: stage 0: tp rank 0 of 2 holds 8 of 16 "
                      "query heads"),
        std::string::npos)
        << r.output;
  }
  return read_losses(dump);
}

TEST(TensorParallelRun, TwoRanksFollowTheOneProcessRun) {
  const auto one = train("tp_run_one", " --training.local_batch_size=4");
  const auto tp = train(
      "tp_run_tp2",
      " --nproc 2 --training.local_batch_size=4 "
      "--parallelism.tensor_parallel_degree=2");
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(tp.size(), 20u);
  // The same batches: only the order of float sums differs.
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(tp[i], one[i], 1e-3 * one[i]) << "step " << i + 1;
  }
}

TEST(TensorParallelRun, InsideShardedDataParallelFollowsTheOneProcessRun) {
  // Twice the local batch in one process: the global batch of dp_shard 2.
  const auto one = train("tp_dp_run_one", " --training.local_batch_size=8");
  const auto dims = train(
      "tp_dp_run_4",
      " --nproc 4 --training.local_batch_size=4 "
      "--parallelism.tensor_parallel_degree=2 "
      "--parallelism.data_parallel_shard_degree=2");
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(dims.size(), 20u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(dims[i], one[i], 1e-3 * one[i]) << "step " << i + 1;
  }
  EXPECT_LT(dims.back(), dims.front() - 3.0);
}

}  // namespace
}  // namespace baton
