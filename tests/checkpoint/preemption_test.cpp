// Preemption through the `baton` binary as a scheduler does it: SIGTERM at
// a random step of a pipelined run saves there and exits 75, and the
// relaunch continues the straight run's losses bit for bit; a second
// SIGTERM, or the grace running out, in the middle of a save exits at once
// and leaves the earlier checkpoint whole.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "checkpoint/checkpoint.h"
#include "common/exit_codes.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundRun;
using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::run_command;
using testing::source_path;

/// Small shapes, a metrics line per step, float32 so that the losses do
/// not depend on the start-up probe.
const std::string kRun =
    " --training.mixed_precision_param=float32"
    " --training.seq_len=32 --training.local_batch_size=4"
    " --parallelism.pipeline_parallel_microbatch_size=1"
    " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
    " --metrics.peak_tflops=1 --checkpoint.enable=true";

std::string train_command(
    const std::string& config,
    const fs::path& dump,
    const std::string& extra,
    int nproc) {
  return baton_bin() + " train" +
         (nproc > 1 ? " --nproc " + std::to_string(nproc) : "") + " --config " +
         source_path("configs/" + config + ".yaml") +
         " --job.dump_folder=" + dump.string() + kRun + extra;
}

/// Lines of the metrics file so far (a line being written is not one).
size_t logged_steps(const fs::path& dump) {
  std::ifstream in(dump / "metrics.jsonl");
  size_t lines = 0;
  for (std::string line; std::getline(in, line) && !in.eof();) {
    ++lines;
  }
  return lines;
}

/// The step of "preemption: stopping after step N" in `output`, or -1.
int64_t stopped_after(const std::string& output) {
  const std::string mark = "preemption: stopping after step ";
  const auto at = output.find(mark);
  return at == std::string::npos ? -1
                                 : std::stoll(output.substr(at + mark.size()));
}

TEST(Preemption, SigtermAtARandomStepSavesAndTheRelaunchContinuesExactly) {
  const std::string extra =
      " --training.steps=40 --checkpoint.interval=10 --checkpoint.async=true";
  const auto straight = fresh_dir("preempt_straight");
  const auto r = run_command(
      "timeout 300 " + train_command("debug_pp_1f1b", straight, extra, 2) +
      " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto reference = read_losses(straight);
  ASSERT_EQ(reference.size(), 40u);

  std::random_device seed;
  const size_t at = std::uniform_int_distribution<size_t>(2, 12)(seed);
  SCOPED_TRACE("SIGTERM once " + std::to_string(at) + " steps are logged");
  const auto dump = fresh_dir("preempt_pp2");
  fs::create_directories(dump);
  {
    BackgroundRun job(
        train_command("debug_pp_1f1b", dump, extra, 2), dump / "output.txt");
    ASSERT_TRUE(job.wait_until(
        [&] { return logged_steps(dump) >= at; }, std::chrono::seconds(240)))
        << job.output();
    job.signal(SIGTERM);
    EXPECT_EQ(job.wait(std::chrono::seconds(120)), kPreemptedExitCode)
        << job.output();
    const std::string out = job.output();
    const int64_t step = stopped_after(out);
    ASSERT_GE(step, static_cast<int64_t>(at)) << out;
    ASSERT_LT(step, 40) << out;
    // Both ranks stopped after the same step, and it was saved.
    EXPECT_NE(
        out.find("[rank1]: " + std::string("baton: SIGTERM received")),
        std::string::npos)
        << out;
    EXPECT_NE(
        out.find("saved step " + std::to_string(step) + " "), std::string::npos)
        << out;
    EXPECT_EQ(CheckpointManager::list_steps(dump / "checkpoint").back(), step);
    EXPECT_EQ(logged_steps(dump), static_cast<size_t>(step));
  }
  const auto again = run_command(
      "timeout 300 " + train_command("debug_pp_1f1b", dump, extra, 2) +
      " 2>&1");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from step"), std::string::npos);
  const auto both = read_losses(dump);
  ASSERT_EQ(both.size(), reference.size());
  for (size_t i = 0; i < both.size(); ++i) {
    EXPECT_EQ(both[i], reference[i]) << "step " << i + 1;
  }
}

/// A run whose save of step 6 stalls half-way (saves every 3 steps: step 3
/// is complete), watched until the stall.
struct StalledSave {
  fs::path dump;
  std::unique_ptr<BackgroundRun> job;

  StalledSave(const std::string& name, const std::string& extra)
      : dump(fresh_dir(name)) {
    fs::create_directories(dump);
    job = std::make_unique<BackgroundRun>(
        "env BATON_INJECT_FAULT=stallsave:0:6 " +
            train_command(
                "debug_model",
                dump,
                " --training.steps=20 --checkpoint.interval=3" + extra,
                1),
        dump / "output.txt");
    EXPECT_TRUE(job->wait_until(
        [&] {
          return job->output().find("injecting fault 'stallsave'") !=
                 std::string::npos;
        },
        std::chrono::seconds(120)))
        << job->output();
  }

  /// Only step 3 is complete, step 6 is a leftover, and a relaunch
  /// resumes from step 3 and finishes.
  void expect_previous_checkpoint_whole() const {
    EXPECT_EQ(
        CheckpointManager::list_steps(dump / "checkpoint"),
        std::vector<int64_t>{3});
    EXPECT_TRUE(fs::exists(dump / "checkpoint" / "step-6.partial"));
    const auto again = run_command(
        "timeout 300 " +
        train_command(
            "debug_model",
            dump,
            " --training.steps=8 --checkpoint.interval=3",
            1) +
        " 2>&1");
    EXPECT_EQ(again.code, 0) << again.output;
    EXPECT_NE(again.output.find("resumed from step 3"), std::string::npos)
        << again.output;
  }
};

TEST(Preemption, ASecondSigtermDuringTheSaveExitsAtOnce) {
  StalledSave run("preempt_second_sigterm", "");
  run.job->signal(SIGTERM);
  // The first one waits for the step boundary, behind the stalled save.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(run.job->running()) << run.job->output();
  run.job->signal(SIGTERM);
  EXPECT_EQ(run.job->wait(std::chrono::seconds(30)), 128 + SIGTERM)
      << run.job->output();
  EXPECT_NE(
      run.job->output().find("a second signal: exiting at once"),
      std::string::npos)
      << run.job->output();
  run.expect_previous_checkpoint_whole();
}

TEST(Preemption, ASaveThatOverrunsTheGraceExitsAtOnce) {
  StalledSave run("preempt_grace", " --checkpoint.preemption_grace_seconds=1");
  run.job->signal(SIGUSR1);
  EXPECT_EQ(run.job->wait(std::chrono::seconds(30)), 128 + SIGTERM)
      << run.job->output();
  EXPECT_NE(
      run.job->output().find("preemption_grace_seconds ran out"),
      std::string::npos)
      << run.job->output();
  run.expect_previous_checkpoint_whole();
}

TEST(Preemption, WithoutCheckpointsTheRunStopsAndSaysSo) {
  const auto dump = fresh_dir("preempt_no_checkpoint");
  fs::create_directories(dump);
  BackgroundRun job(
      train_command(
          "debug_model",
          dump,
          " --training.steps=100000 --checkpoint.enable=false",
          1),
      dump / "output.txt");
  ASSERT_TRUE(job.wait_until(
      [&] { return logged_steps(dump) >= 2; }, std::chrono::seconds(120)))
      << job.output();
  job.signal(SIGUSR1);
  EXPECT_EQ(job.wait(std::chrono::seconds(60)), kPreemptedExitCode)
      << job.output();
  EXPECT_NE(
      job.output().find("preemption: stopping after step"), std::string::npos)
      << job.output();
  EXPECT_FALSE(fs::exists(dump / "checkpoint"));
}

}  // namespace
}  // namespace baton
