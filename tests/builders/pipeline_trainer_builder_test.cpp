// The pipelined debug configs end to end with `--nproc`: loss curves equal
// the one-stage run's, only the first stage's rank loads data, V placement.

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::read_metrics;
using testing::run_command;
using testing::source_path;

const std::string kShort =
    " --training.steps=6 --training.seq_len=32 --lr_scheduler.warmup_steps=2"
    " --metrics.log_freq=1 --metrics.peak_tflops=1";

/// The one-stage run of the same steps. ctest runs each test in its own
/// process, several at once: each gets its own folder.
std::vector<double> one_stage_losses(const std::string& name) {
  const auto dump = fresh_dir("pp_reference_" + name);
  const auto r = run_command(
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() + kShort);
  EXPECT_EQ(r.code, 0) << r.output;
  return read_losses(dump);
}

/// Runs `config` with --nproc 2 and checks it against the one-stage run;
/// returns the output. Folders are named after the test too: two tests of
/// one config run at once under ctest -j.
std::string expect_matches_one_stage(
    const std::string& config, const std::string& extra = "") {
  const std::string tag =
      config + "_" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const auto dump = fresh_dir("pp_" + tag);
  const auto r = run_command(
      baton_bin() + " train --nproc 2 --config " +
      source_path("configs/" + config + ".yaml") +
      " --job.dump_folder=" + dump.string() + kShort + extra);
  EXPECT_EQ(r.code, 0) << r.output;
  const auto piped = read_losses(dump);
  const auto reference = one_stage_losses(tag);
  EXPECT_EQ(piped.size(), reference.size());
  for (size_t i = 0; i < std::min(piped.size(), reference.size()); ++i) {
    EXPECT_NEAR(piped[i], reference[i], 2e-3 * reference[i])
        << "step " << i + 1;
  }
  // Only the rank holding stage 0 builds a loader.
  EXPECT_NE(r.output.find("[rank0]: "), std::string::npos);
  EXPECT_EQ(r.output.find("data: kjv"), r.output.rfind("data: kjv"))
      << r.output;
  const auto data_line = r.output.rfind('\n', r.output.find("data: kjv"));
  EXPECT_EQ(r.output.compare(data_line + 1, 9, "[rank0]: "), 0) << r.output;
  // Bubbles of both ranks reach the metrics.
  const auto metrics = read_metrics(dump);
  EXPECT_FALSE(metrics.empty());
  if (!metrics.empty()) {
    EXPECT_EQ(metrics.back()["pipeline_bubble_pct"].size(), 2u);
  }
  return r.output;
}

TEST(PipelineTrainerBuilder, OneF1BMatchesTheOneStageRun) {
  expect_matches_one_stage("debug_pp_1f1b");
}

TEST(PipelineTrainerBuilder, InterleavedTwoChunksPerRankMatches) {
  expect_matches_one_stage("debug_pp_interleaved");
}

TEST(PipelineTrainerBuilder, ZeroBubbleVMatchesAndPlacesAV) {
  // Six layers over four stages: 2, 2, 1, 1; the V puts the first and the
  // last stage on rank 0.
  const auto out = expect_matches_one_stage("debug_pp_zbv");
  EXPECT_NE(
      out.find("pipeline rank 0 holds stage 0: tok_embeddings, layers.0-1"),
      std::string::npos)
      << out;
  EXPECT_NE(
      out.find("pipeline rank 0 holds stage 3: layers.5, norm, output"),
      std::string::npos)
      << out;
  EXPECT_NE(
      out.find("pipeline rank 1 holds stage 1: layers.2-3"), std::string::npos);
  EXPECT_NE(
      out.find("pipeline rank 1 holds stage 2: layers.4"), std::string::npos);
}

TEST(PipelineTrainerBuilder, MiddleAndLastRanksNeverBuildALoader) {
  // pp 3: ranks 1 and 2 hold no stage 0.
  const auto dump = fresh_dir("pp3");
  const auto r = run_command(
      baton_bin() + " train --nproc 3 --config " +
      source_path("configs/debug_pp_1f1b.yaml") + " --job.dump_folder=" +
      dump.string() + kShort + " --parallelism.pipeline_parallel_degree=3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: "), std::string::npos);
  const auto first = r.output.find("data: kjv");
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(first, r.output.rfind("data: kjv")) << "more than one loader";
  EXPECT_EQ(
      r.output.compare(r.output.rfind('\n', first) + 1, 9, "[rank0]: "), 0);
  EXPECT_NE(
      r.output.find("pipeline rank 1 holds stage 1: layers.2-3"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(read_metrics(dump).back()["pipeline_bubble_pct"].size(), 3u);
}

TEST(PipelineTrainerBuilder, ACsvScheduleRunsAndMatches) {
  // The 1F1B schedule written out by `baton schedule`, read back as a
  // custom schedule.
  const auto dir = fresh_dir("pp_csv");
  std::filesystem::create_directories(dir);
  const auto csv = (dir / "1f1b.csv").string();
  const auto w = run_command(
      baton_bin() +
      " schedule --schedule 1F1B --pp 2 --microbatches 4 "
      "--format csv --out " +
      csv);
  ASSERT_EQ(w.code, 0) << w.output;
  expect_matches_one_stage(
      "debug_pp_1f1b", " --parallelism.pipeline_parallel_schedule_csv=" + csv);
  // A CSV for another layout is a config error.
  const auto r = run_command(
      baton_bin() + " train --nproc 2 --config " +
      source_path("configs/debug_pp_1f1b.yaml") +
      " --job.dump_folder=" + (dir / "bad").string() + kShort +
      " --parallelism.pipeline_parallel_microbatch_size=1"
      " --parallelism.pipeline_parallel_schedule_csv=" +
      csv);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("is for pp 2 and 4 microbatches, but this run has "
                    "pp 2 and 8"),
      std::string::npos)
      << r.output;
}

TEST(PipelineTrainerBuilder, MicrobatchSizeMustDivideTheBatch) {
  const auto r = run_command(
      baton_bin() + " train --nproc 2 --config " +
      source_path("configs/debug_pp_1f1b.yaml") +
      " --job.dump_folder=" + fresh_dir("pp_bad_mb").string() + kShort +
      " --parallelism.pipeline_parallel_microbatch_size=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("pipeline_parallel_microbatch_size: 3 does not divide"),
      std::string::npos)
      << r.output;
}

TEST(PipelineTrainerBuilder, PipelineWithDataParallel) {
  // pp 2 x dp 2 on 4 ranks; rank order pp outermost: ranks 0, 1 hold stage 0.
  const auto dump = fresh_dir("pp_dp");
  const auto r = run_command(
      baton_bin() + " train --nproc 4 --config " +
      source_path("configs/debug_pp_1f1b.yaml") +
      " --job.dump_folder=" + dump.string() + kShort +
      " --parallelism.data_parallel_replicate_degree=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: "), std::string::npos);
  EXPECT_NE(
      r.output.find("data: kjv, a shard for each of the 2 data-parallel ranks"),
      std::string::npos)
      << r.output;
  const auto l = read_losses(dump);
  ASSERT_EQ(l.size(), 6u);
  EXPECT_LT(l.back(), l.front());
}

}  // namespace
}  // namespace baton
