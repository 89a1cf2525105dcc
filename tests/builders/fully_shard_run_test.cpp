// `baton train --nproc 2 --config configs/debug_model.yaml` end to end, as
// a user runs it: the unset shard degree takes both ranks (FSDP), on the
// same global batch the losses are the one-process run's, and the logs say
// which layout it chose and why, and what each rank holds.

#include <gtest/gtest.h>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::run_command;
using testing::source_path;

// float32 compute, whatever `auto` picks on this machine: the chain the
// log names is the data-parallel one alone.
const std::string kRun =
    " --training.mixed_precision_param=float32 --training.steps=20 "
    "--training.seq_len=64 --lr_scheduler.warmup_steps=4"
    " --metrics.log_freq=1 --metrics.peak_tflops=1";

TEST(FullyShardRun, AnUnsetDegreeShardsOverTheRanksAndFollowsOneProcess) {
  const std::string config = source_path("configs/debug_model.yaml");
  const auto one = fresh_dir("fsdp_run_one");
  const auto r1 = run_command(
      baton_bin() + " train --config " + config +
      " --training.local_batch_size=8 --job.dump_folder=" + one.string() +
      kRun);
  ASSERT_EQ(r1.code, 0) << r1.output;
  // Half the local batch on each of two ranks: the same global batch, so
  // the same tokens (the ranks split one global stream).
  const auto sharded = fresh_dir("fsdp_run_sharded");
  const auto r2 = run_command(
      baton_bin() + " train --nproc 2 --config " + config +
      " --training.local_batch_size=4 --job.dump_folder=" + sharded.string() +
      kRun);
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(
      r2.output.find(
          "dp_shard=2 cp=1 tp=1 (world 2), "
          "parallelism.data_parallel_shard_degree "
          "unset: 2, what the other degrees leave of the world of 2"),
      std::string::npos)
      << r2.output;
  EXPECT_NE(
      r2.output.find("parallelize: to_device -> check_replicas -> fully_shard"),
      std::string::npos)
      << r2.output;
  EXPECT_NE(
      r2.output.find("fully_shard: stage 0: 7 units over dp_shard 2"),
      std::string::npos)
      << r2.output;
  EXPECT_NE(r2.output.find("MiB of optimizer state"), std::string::npos);
  const auto a = read_losses(one);
  const auto b = read_losses(sharded);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  // Only the order of float sums differs.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 1e-4 * a[i]) << "step " << i + 1;
  }
  EXPECT_LT(b.back(), b.front() - 3.0);
}

}  // namespace
}  // namespace baton
