// `baton train --parallelism.context_parallel_degree=2` end to end on the
// debug model: two ranks that each hold half of every sequence follow one
// process on the same global batch (float32); the dry run says what each
// rank holds and moves; a seq_len or degree that cannot split exits 2
// naming the key.

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
using testing::run_command;
using testing::source_path;

const std::string kRun =
    " --training.mixed_precision_param=float32 --training.steps=6"
    " --training.seq_len=64 --training.local_batch_size=4"
    " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
    " --metrics.peak_tflops=1";

std::vector<double> train(const std::string& name, const std::string& args) {
  const auto dump = fresh_dir(name);
  const auto r = run_command(
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() + kRun + " " + args);
  EXPECT_EQ(r.code, 0) << r.output;
  return read_losses(dump);
}

TEST(ContextParallelRun, TwoRanksHoldingHalfOfEverySequenceFollowOneProcess) {
  const auto one = train("cp_run_one", "");
  const auto cp =
      train("cp_run_cp2", "--nproc 2 --parallelism.context_parallel_degree=2");
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(cp.size(), 6u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(cp[i], one[i], 1e-4 * one[i]) << "step " << i + 1;
  }
  EXPECT_LT(one.back(), one.front() - 0.5);
}

TEST(ContextParallelRun, TheDryRunShowsEachRanksShareAndTraffic) {
  const auto r = run_command(
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --nproc 2 --parallelism.context_parallel_degree=2"
      " --training.seq_len=8192 --training.local_batch_size=1 --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find(
          "context: cp 2: each rank holds 2 chunks of 2048 positions"),
      std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("micro-step: 4096 tokens per rank"), std::string::npos)
      << r.output;
}

TEST(ContextParallelRun, RefusesWhatCannotSplitNamingTheKey) {
  for (const auto& [args, key] :
       std::vector<std::pair<std::string, std::string>>{
           // 2 x cp 2 does not divide 30 positions.
           {"--nproc 2 --parallelism.context_parallel_degree=2"
            " --training.seq_len=30",
            "training.seq_len"},
           // cp 2 x tp 2 needs a multiple of 8.
           {"--nproc 4 --parallelism.context_parallel_degree=2"
            " --parallelism.tensor_parallel_degree=2 --training.seq_len=36",
            "training.seq_len"},
           // cp 3 on two ranks.
           {"--nproc 2 --parallelism.context_parallel_degree=3",
            "parallelism.context_parallel_degree"}}) {
    const auto r = run_command(
        baton_bin() + " train --config " +
        source_path("configs/debug_model.yaml") + " " + args +
        " --training.steps=1");
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(key), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 1/1"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace baton
