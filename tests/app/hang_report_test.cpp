// A hung rank of a `baton train --nproc 2` pipelined run: every rank writes
// its flight recorder, the waiting rank's error names its file, and the
// launcher names the hung rank and the action it hung in.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

/// The latest entry of `file` still in flight.
json last_started(const json& file) {
  const auto& entries = file["entries"];
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if ((*it)["state"] == "started") {
      return *it;
    }
  }
  return json();
}

TEST(HangReport, AHungRankYieldsFlightRecorderFilesOnEveryRank) {
  const fs::path dump = testing::fresh_dir("hang_report_pp");
  // Rank 1 (the last stage) hangs inside its REDUCE_GRAD action of step 3;
  // rank 0 waits for it in the loss all-reduce of the pipeline group.
  // `timeout` bounds the test should the run itself hang.
  const std::string command =
      "BATON_INJECT_FAULT=hangaction:1:3 timeout -k 5 150 " +
      testing::baton_bin() + " train --nproc 2 --config " +
      testing::source_path("configs/debug_pp_1f1b.yaml") +
      " --job.dump_folder=" + dump.string() +
      " --training.seq_len=32 --training.local_batch_size=4"
      " --training.num_threads=1 --training.steps=8"
      " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
      " --metrics.peak_tflops=1 --comm.train_timeout_seconds=3";
  const auto start = std::chrono::steady_clock::now();
  const auto r = testing::run_command(command);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_LT(seconds, 120.0) << r.output;

  const fs::path folder = dump / "flight_recorder";
  ASSERT_TRUE(fs::exists(folder / "rank0.json")) << r.output;
  ASSERT_TRUE(fs::exists(folder / "rank1.json")) << r.output;
  const json waiting = read_json(folder / "rank0.json");
  const json hung = read_json(folder / "rank1.json");
  EXPECT_EQ(waiting["rank"], 0);
  EXPECT_EQ(hung["rank"], 1);
  EXPECT_EQ(waiting["world_size"], 2);

  // Rank 0's last entry: the collective it timed out in, on the pipeline
  // group whose other member is rank 1, which never reached it.
  ASSERT_FALSE(waiting["entries"].empty());
  const json last = waiting["entries"].back();
  EXPECT_EQ(last["state"], "failed") << last.dump();
  EXPECT_EQ(last["kind"], "collective") << last.dump();
  EXPECT_EQ(last["name"], "all_reduce") << last.dump();
  EXPECT_TRUE(last["end_us"].is_number());
  const std::string group = last["group"];
  EXPECT_EQ(waiting["groups"][group], json::array({0, 1})) << group;
  int64_t hung_seq = 0;
  for (const auto& e : hung["entries"]) {
    if (e["kind"] == "collective" && e["group"] == group) {
      hung_seq = std::max(hung_seq, e["group_seq"].get<int64_t>());
    }
  }
  EXPECT_LT(hung_seq, last["group_seq"].get<int64_t>());
  EXPECT_NE(
      waiting["reason"].get<std::string>().find("timeout 3 s"),
      std::string::npos)
      << waiting["reason"];

  // Rank 1, stuck in compute, dumped when rank 0 asked through the store:
  // its action in flight is the one it hung in.
  EXPECT_NE(
      hung["reason"].get<std::string>().find("asked by rank 0"),
      std::string::npos)
      << hung["reason"];
  const json in_flight = last_started(hung);
  EXPECT_EQ(in_flight["kind"], "action") << hung.dump(1);
  EXPECT_EQ(in_flight["label"], "1REDUCE_GRAD") << hung.dump(1);
  EXPECT_TRUE(in_flight["end_us"].is_null());

  // The error names the file; the launcher names the hung rank and action.
  EXPECT_NE(
      r.output.find("flight recorder: " + (folder / "rank0.json").string()),
      std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("baton: hang report: rank 1 stopped answering first"),
      std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("its last action: pipeline action 1REDUCE_GRAD, started"),
      std::string::npos)
      << r.output;
}

TEST(HangReport, ZeroEntriesWritesNoFile) {
  const fs::path dump = testing::fresh_dir("hang_report_off");
  const std::string command =
      "BATON_INJECT_FAULT=hangaction:1:2 timeout -k 5 150 " +
      testing::baton_bin() + " train --nproc 2 --config " +
      testing::source_path("configs/debug_pp_1f1b.yaml") +
      " --job.dump_folder=" + dump.string() +
      " --training.seq_len=32 --training.local_batch_size=4"
      " --training.num_threads=1 --training.steps=4"
      " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
      " --metrics.peak_tflops=1 --comm.train_timeout_seconds=2"
      " --comm.flight_recorder_entries=0";
  const auto r = testing::run_command(command);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dump / "flight_recorder")) << r.output;
  EXPECT_EQ(r.output.find("hang report"), std::string::npos) << r.output;
  // The hung rank is stopped comm.train_timeout_seconds + 2 s after rank
  // 0 failed, not the launcher's 10 s: a rank blocked on the failed one
  // would have failed on its own by then.
  EXPECT_NE(
      r.output.find("the other ranks get 4 s to stop on their own"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton
