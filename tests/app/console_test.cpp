// What a person reads on the console of `baton train` (common/logging.h):
// one format, lines within 120 columns, each start-up fact once per job,
// the verbosity switch, the status line a terminal redraws, and where MFU's
// peak comes from.

#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::run_command;
using testing::run_command_raw;
using testing::source_path;

// Short steps of the debug model: what the console says, not what it
// learns.
const std::string kShort =
    " --training.seq_len=64 --training.local_batch_size=2"
    " --lr_scheduler.warmup_steps=1 --checkpoint.enable=false";

std::string train(const std::string& name, const std::string& args) {
  return baton_bin() + " train --config " +
         source_path("configs/debug_model.yaml") + kShort +
         " --job.dump_folder=" + fresh_dir(name).string() + " " + args;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0, end; begin < text.size(); begin = end + 1) {
    end = text.find('\n', begin);
    out.push_back(text.substr(begin, end - begin));
  }
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(Console, OneFormatWithinAHundredAndTwentyColumns) {
  const auto r = run_command_raw(
      train("console_format", "--training.steps=3 --metrics.log_freq=1"));
  ASSERT_EQ(r.code, 0) << r.output;
  // "HH:MM:SS tag  message", continuation lines indented under it; no
  // glog prefix ("I20261206 21:34:50.083103 25894 file.cpp:103]").
  const std::regex first(R"(^\d\d:\d\d:\d\d [a-z_]+ +\S.*)");
  const std::regex glog(R"(^[IWEF]\d{8} )");
  for (const auto& line : lines_of(r.output)) {
    EXPECT_LE(line.size(), 120u) << line;
    EXPECT_FALSE(std::regex_search(line, glog)) << line;
    EXPECT_TRUE(std::regex_match(line, first) || line.rfind("        ", 0) == 0)
        << line;
  }
  for (const std::string& step : {"step 1/3  loss", "step 3/3  loss"}) {
    EXPECT_NE(r.output.find(step), std::string::npos) << r.output;
  }
  // On the CPU, MFU is against the probe, and it says so.
  const std::regex probe("mfu: against a [a-z0-9]+ matmul probe on the CPU");
  EXPECT_TRUE(std::regex_search(r.output, probe)) << r.output;
}

TEST(Console, TheLevelChoosesHowMuchIsShown) {
  // progress: the step lines (and warnings) without the start-up facts.
  auto r = run_command(
      train("console_progress", "--training.steps=2 --log-level=progress"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step 2/2  loss"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("mixed precision:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("blas:"), std::string::npos) << r.output;
  // warning, through the config key: nothing on a clean run.
  r = run_command(train(
      "console_warning", "--training.steps=1 --metrics.log_level=warning"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "") << r.output;
  // A level Baton does not have: exit 2 naming the key, before training.
  r = run_command(train("console_bad", "--log-level=loud"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("metrics.log_level: 'loud' is not allowed; allowed: one "
                    "of debug, info, progress, warning"),
      std::string::npos)
      << r.output;
}

TEST(Console, EachStartUpFactOncePerJobAndTheStatusLineOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no script(1) to give the run a terminal";
  }
  // Two ranks under a terminal (script(1)): the launcher redraws rank 0's
  // status line between the logged steps.
  const auto r = run_command_raw(
      "script -qfec '" +
      train(
          "console_tty", "--nproc 2 --training.steps=4 --metrics.log_freq=3") +
      "' /dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const std::string& fact :
       {"blas: ",
        "mixed precision: ",
        "runtime: 2 ranks",
        "data: kjv",
        "mfu: ",
        "fully_shard: stage 0",
        "memory: this rank holds",
        "training "}) {
    EXPECT_EQ(count(r.output, fact), 1u) << fact << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("[rank1]: "), std::string::npos) << r.output;
  // Step 2 is not logged (log_freq 3) but drawn in place; 1, 3 and the
  // last are lines.
  EXPECT_NE(r.output.find("\r\033[K[rank0]: step 2/4  loss"), std::string::npos)
      << r.output;
  for (const std::string& step :
       {"step 1/4  loss", "step 3/4  loss", "step 4/4  loss"}) {
    EXPECT_NE(r.output.find("trainer  " + step), std::string::npos)
        << step << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find("baton: the job finished"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton
