// `baton train --metrics.tensorboard=true` as a user runs it: the event files
// under <dump_folder>/tensorboard, read by the tests' own reader
// (tests/trainer/tensorboard_reader.h), hold what metrics.jsonl holds, step
// by step and value by value, through a pipelined run of two ranks and its
// resumption from a checkpoint; a dump folder that cannot be made exits 1.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/baton_binary.h"
#include "tests/trainer/tensorboard_reader.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::DecodedEvent;

// Two pipeline ranks, so that the bubble is logged and one rank of two
// writes; a checkpoint at step 4 to resume from.
const std::string kRun =
    " train --nproc 2 --parallelism.pipeline_parallel_degree=2"
    " --training.mixed_precision_param=float32 --training.steps=6"
    " --training.seq_len=32 --training.local_batch_size=4"
    " --lr_scheduler.warmup_steps=1 --metrics.log_freq=2"
    " --metrics.peak_tflops=1 --metrics.tensorboard=true"
    " --checkpoint.enable=true --checkpoint.interval=4";

testing::BinaryResult train(const fs::path& dump) {
  return testing::run_command(
      testing::baton_bin() + kRun + " --config " +
      testing::source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string());
}

/// The events TensorBoard shows for a folder: its files in name order, a
/// SessionLog START dropping the earlier files' events at its step and
/// after; file_version and session events left out.
std::vector<DecodedEvent> shown_events(const fs::path& folder) {
  std::vector<DecodedEvent> shown;
  for (const auto& file : testing::event_files(folder)) {
    std::vector<DecodedEvent> events;
    EXPECT_TRUE(testing::read_event_file(file, &events));
    EXPECT_FALSE(events.empty()) << file;
    if (!events.empty()) {
      EXPECT_EQ(events[0].file_version, "brain.Event:2") << file;
    }
    for (size_t i = 1; i < events.size(); ++i) {
      if (events[i].session_start) {
        std::erase_if(shown, [&](const DecodedEvent& e) {
          return e.step >= events[i].step;
        });
      } else {
        shown.push_back(events[i]);
      }
    }
  }
  return shown;
}

/// Every event equals its metrics.jsonl line: the step, and each number
/// under its key (pipeline_bubble_pct's as pipeline_bubble_pct/<rank>), as
/// the float TensorBoard stores; no tag more.
void expect_events_match_jsonl(
    const std::vector<DecodedEvent>& events,
    const std::vector<nlohmann::json>& lines) {
  ASSERT_EQ(events.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i) + ": " + lines[i].dump());
    EXPECT_EQ(events[i].step, lines[i]["step"].get<int64_t>());
    std::map<std::string, float> expected;
    for (const auto& [key, value] : lines[i].items()) {
      if (key == "pipeline_bubble_pct") {
        for (size_t r = 0; r < value.size(); ++r) {
          expected["pipeline_bubble_pct/" + std::to_string(r)] =
              static_cast<float>(value[r].get<double>());
        }
      } else if (key != "step") {
        expected[key] = static_cast<float>(value.get<double>());
      }
    }
    const std::map<std::string, float> got(
        events[i].scalars.begin(), events[i].scalars.end());
    EXPECT_EQ(got.size(), events[i].scalars.size()) << events[i].text;
    EXPECT_EQ(got, expected) << events[i].text;
  }
}

TEST(TensorboardRun, EventFilesHoldTheMetricsOfARunAndItsResumption) {
  const fs::path dump = testing::fresh_dir("tb_run");
  auto r = train(dump);
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path folder = dump / "tensorboard";
  ASSERT_EQ(testing::event_files(folder).size(), 1u)
      << "only global rank 0 writes";
  auto lines = testing::read_metrics(dump);
  ASSERT_EQ(lines.size(), 4u);  // steps 1, 2, 4, 6
  ASSERT_TRUE(lines[0].contains("pipeline_bubble_pct"));
  EXPECT_EQ(lines[0]["pipeline_bubble_pct"].size(), 2u);
  expect_events_match_jsonl(shown_events(folder), lines);

  // Stopped after the save at step 4, started again: metrics.jsonl keeps
  // steps 1, 2, 4 and appends 6; TensorBoard drops the first run's 6.
  fs::remove_all(dump / "checkpoint" / "step-6");
  r = train(dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step 4"), std::string::npos)
      << r.output;
  ASSERT_EQ(testing::event_files(folder).size(), 2u);
  std::vector<DecodedEvent> second;
  ASSERT_TRUE(
      testing::read_event_file(testing::event_files(folder)[1], &second));
  ASSERT_GE(second.size(), 2u);
  EXPECT_TRUE(second[1].session_start) << second[1].text;
  EXPECT_EQ(second[1].step, 5);
  lines = testing::read_metrics(dump);
  ASSERT_EQ(lines.size(), 4u);
  expect_events_match_jsonl(shown_events(folder), lines);
}

TEST(TensorboardRun, ADumpFolderThatCannotBeMadeExitsOne) {
  const fs::path root = testing::fresh_dir("tb_run_bad");
  fs::create_directories(root);
  std::ofstream(root / "file") << "not a folder";
  const std::string dump = (root / "file" / "dump").string();
  const auto r = testing::run_command(
      testing::baton_bin() + " train --config " +
      testing::source_path("configs/debug_model.yaml") +
      " --training.steps=2 --lr_scheduler.warmup_steps=1"
      " --metrics.peak_tflops=1 --metrics.jsonl=false"
      " --metrics.tensorboard=true --job.dump_folder=" +
      dump);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find(
          "error: [tensorboard] cannot create the folder " + dump +
          "/tensorboard: Not a directory"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton
