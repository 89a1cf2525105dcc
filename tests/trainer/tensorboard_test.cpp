// The TensorBoard event files, read back by the tests' own reader
// (tests/trainer/tensorboard_reader.h: its own framing and CRC-32C, protoc
// against the published .proto files).

#include "trainer/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/baton_binary.h"
#include "tests/trainer/tensorboard_reader.h"
#include "trainer/metrics.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::DecodedEvent;

double now_seconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<DecodedEvent> read_events(const fs::path& file) {
  std::vector<DecodedEvent> events;
  EXPECT_TRUE(testing::read_event_file(file, &events));
  return events;
}

/// The one event file of `folder`.
fs::path only_event_file(const fs::path& folder) {
  const auto files = testing::event_files(folder);
  EXPECT_EQ(files.size(), 1u) << folder;
  return files.empty() ? fs::path() : files.front();
}

void expect_file_version(const DecodedEvent& e) {
  EXPECT_EQ(e.file_version, "brain.Event:2") << e.text;
  EXPECT_EQ(e.step, 0) << e.text;
  EXPECT_TRUE(e.scalars.empty()) << e.text;
}

StepMetrics sample_metrics(int64_t step, double scale) {
  StepMetrics m;
  m.step = step;
  m.loss = 5.5451774444795623 * scale;
  m.grad_norm = 1.0 / 3.0 * scale;
  m.lr = 3.0e-4 * scale;
  m.tokens_per_sec = 12345.678 * scale;
  m.tflops = 0.0123 * scale;
  m.mfu_pct = 41.7 * scale;
  m.step_time_s = 0.3 * scale;
  m.data_time_s = 1.3e-5 * scale;
  m.peak_rss_mib = 812.25 * scale;
  m.tensor_peak_mib = 96.5 * scale;
  m.activation_peak_mib = 48.125 * scale;
  return m;
}

TEST(Tensorboard, TheReadersCrcIsCrc32c) {
  // The check value of CRC-32C (RFC 3720's iSCSI CRC), and the empty input.
  EXPECT_EQ(testing::reference_crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(testing::reference_crc32c(""), 0u);
}

TEST(Tensorboard, TheReaderRefusesDamagedRecords) {
  // So that a file the reader accepts is one whose framing and CRCs hold.
  const fs::path folder = testing::fresh_dir("tb_damaged");
  std::string bytes;
  {
    TensorBoardWriter writer(folder.string());
    writer.add_scalars(1, {{"loss", 2.0}});
    std::ifstream in(writer.path(), std::ios::binary);
    bytes.assign(
        (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const fs::path damaged = folder / "damaged";
  const auto refused = [&](const std::string& content,
                           const std::string& problem) {
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << content;
    std::vector<std::string> records;
    const auto result = testing::read_tfrecords(damaged, &records);
    EXPECT_FALSE(result) << problem;
    EXPECT_NE(std::string(result.message()).find(problem), std::string::npos)
        << result.message();
  };
  std::vector<std::string> records;
  ASSERT_TRUE(
      testing::read_tfrecords(testing::event_files(folder).front(), &records));
  ASSERT_EQ(records.size(), 2u);
  const size_t second = 12 + records[0].size() + 4;
  std::string flipped = bytes;
  flipped[second + 12 + 3] ^= 0x01;
  refused(flipped, "record 1: bad payload CRC");
  std::string bad_length = bytes;
  bad_length[second] ^= 0x01;
  refused(bad_length, "record 1: bad length CRC");
  refused(bytes.substr(0, bytes.size() - 2), "record 1: length");
  refused(bytes + "x", "record 2:");
}

TEST(Tensorboard, WriterFramesAndEncodesEveryRecord) {
  const fs::path folder = testing::fresh_dir("tb_writer") / "tensorboard";
  const double before = now_seconds();
  std::string path;
  {
    TensorBoardWriter writer(folder.string());
    path = writer.path();
    // Multi-byte varints (a step past 2^32, a tag past 127 bytes), a
    // fixed32 that needs all its bits, a negative value and a zero.
    const std::string long_tag(200, 'x');
    writer.add_scalars(
        7, {{"loss", 2.5}, {"lr", 3.0e-4}, {"group/neg", -1.0e-10}});
    writer.add_session_start(11);
    writer.add_scalars(
        (int64_t{1} << 40) + 3, {{long_tag, 1.0 / 3.0}, {"zero", 0.0}});
  }
  const double after = now_seconds();
  EXPECT_EQ(fs::path(path).parent_path(), folder);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_TRUE(std::regex_match(
      fs::path(path).filename().string(),
      std::regex(
          "events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host) + "\\." +
          std::to_string(getpid()) + "\\.[0-9]+")))
      << path;
  EXPECT_EQ(only_event_file(folder), fs::path(path));

  const auto events = read_events(path);
  ASSERT_EQ(events.size(), 4u);
  expect_file_version(events[0]);
  for (const auto& e : events) {
    EXPECT_GE(e.wall_time, before - 1.0) << e.text;
    EXPECT_LE(e.wall_time, after + 1.0) << e.text;
  }
  EXPECT_EQ(events[1].step, 7);
  using Scalars = std::vector<std::pair<std::string, float>>;
  EXPECT_EQ(
      events[1].scalars,
      (Scalars{
          {"loss", 2.5f},
          {"lr", static_cast<float>(3.0e-4)},
          {"group/neg", static_cast<float>(-1.0e-10)}}));
  EXPECT_FALSE(events[1].session_start);
  EXPECT_EQ(events[2].step, 11);
  EXPECT_TRUE(events[2].session_start) << events[2].text;
  EXPECT_TRUE(events[2].scalars.empty());
  EXPECT_EQ(events[3].step, (int64_t{1} << 40) + 3);
  EXPECT_EQ(
      events[3].scalars,
      (Scalars{
          {std::string(200, 'x'), static_cast<float>(1.0 / 3.0)},
          {"zero", 0.0f}}));
}

TEST(Tensorboard, WritersOfOneFolderGetFilesOfTheirOwn) {
  const fs::path folder = testing::fresh_dir("tb_two_writers");
  TensorBoardWriter a(folder.string());
  TensorBoardWriter b(folder.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(testing::event_files(folder).size(), 2u);
}

TEST(Tensorboard, MetricsLoggerWritesTheScalarsOfMetricsJsonl) {
  const fs::path dump = testing::fresh_dir("tb_metrics");
  MetricsConfig config;
  config.log_freq = 1;
  config.tensorboard = true;
  {
    MetricsLogger logger(config, dump.string());
    logger.start(0);
    logger.log(sample_metrics(1, 1.0));
    StepMetrics piped = sample_metrics(10, 0.5);
    piped.pipeline_bubble_pct = {12.5, 33.3};
    logger.log(piped);
    StepMetrics validated = sample_metrics(20, 0.4);
    validated.validation_loss = 2.5;
    validated.validation_tokens = 1024;
    validated.validation_time_s = 0.25;
    logger.log(validated);
  }
  const auto lines = testing::read_metrics(dump);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[1].contains("validation_loss"));
  EXPECT_EQ(lines[2]["validation_loss"].get<double>(), 2.5);
  EXPECT_TRUE(lines[2]["validation_tokens"].is_number_integer());
  const auto events = read_events(only_event_file(dump / "tensorboard"));
  ASSERT_EQ(events.size(), 1 + lines.size());
  expect_file_version(events[0]);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i));
    const auto& line = lines[i];
    const auto& e = events[i + 1];
    EXPECT_EQ(e.step, line["step"].get<int64_t>());
    // Every number of the line, under its key, as a float; nothing else.
    std::map<std::string, float> expected;
    for (const auto& [key, value] : line.items()) {
      if (key == "pipeline_bubble_pct") {
        for (size_t r = 0; r < value.size(); ++r) {
          expected["pipeline_bubble_pct/" + std::to_string(r)] =
              static_cast<float>(value[r].get<double>());
        }
      } else if (key != "step") {
        expected[key] = static_cast<float>(value.get<double>());
      }
    }
    std::map<std::string, float> got(e.scalars.begin(), e.scalars.end());
    EXPECT_EQ(got.size(), e.scalars.size()) << "a tag repeats: " << e.text;
    EXPECT_EQ(got, expected) << e.text;
  }
  EXPECT_EQ(events[2].scalars.size(), 13u);  // 11 numbers, 2 pipeline ranks
  EXPECT_EQ(events[3].scalars.size(), 14u);  // 11 numbers, 3 validation's
}

TEST(Tensorboard, MetricsLoggerWritesEventsWithoutJsonl) {
  const fs::path dump = testing::fresh_dir("tb_no_jsonl");
  MetricsConfig config;
  config.jsonl = false;
  config.tensorboard = true;
  {
    MetricsLogger logger(config, dump.string());
    logger.log(sample_metrics(1, 2.0));
  }
  EXPECT_FALSE(fs::exists(dump / "metrics.jsonl"));
  const auto events = read_events(only_event_file(dump / "tensorboard"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 1);
  ASSERT_FALSE(events[1].scalars.empty());
  EXPECT_EQ(events[1].scalars[0].first, "loss");
  EXPECT_EQ(
      events[1].scalars[0].second,
      static_cast<float>(sample_metrics(1, 2.0).loss));
}

TEST(Tensorboard, OnlyTheLoggingRankWrites) {
  const fs::path dump = testing::fresh_dir("tb_other_rank");
  MetricsConfig config;
  config.tensorboard = true;
  MetricsLogger logger(config, dump.string(), /*is_logging_rank=*/false);
  logger.start(0);
  logger.log(sample_metrics(1, 1.0));
  EXPECT_FALSE(fs::exists(dump / "tensorboard"));
}

TEST(Tensorboard, AResumedRunStartsASessionAfterItsStep) {
  const fs::path dump = testing::fresh_dir("tb_resume");
  MetricsConfig config;
  config.log_freq = 1;
  config.tensorboard = true;
  {
    MetricsLogger logger(config, dump.string());
    logger.start(5);
    logger.log(sample_metrics(6, 1.0));
  }
  const auto events = read_events(only_event_file(dump / "tensorboard"));
  ASSERT_EQ(events.size(), 3u);
  expect_file_version(events[0]);
  // TensorBoard drops what earlier files hold from step 6 on.
  EXPECT_TRUE(events[1].session_start) << events[1].text;
  EXPECT_EQ(events[1].step, 6);
  EXPECT_EQ(events[2].step, 6);
  EXPECT_FALSE(events[2].scalars.empty());
}

TEST(Tensorboard, AFolderThatCannotBeMadeFailsNamingIt) {
  const fs::path root = testing::fresh_dir("tb_bad_folder");
  fs::create_directories(root);
  std::ofstream(root / "file") << "not a folder";
  const std::string dump = (root / "file" / "dump").string();
  MetricsConfig config;
  config.jsonl = false;
  config.tensorboard = true;
  try {
    MetricsLogger logger(config, dump);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "[tensorboard] cannot create the folder " + dump +
            "/tensorboard: Not a directory; metrics.tensorboard writes under "
            "job.dump_folder");
  }
}

TEST(Tensorboard, AFailedWriteNamesTheFileAndTheReason) {
  // A file size limit makes the disk refuse the writes past it (EFBIG), as a
  // full disk would; the signal it sends is ignored, as it is in a shell.
  const fs::path folder = testing::fresh_dir("tb_write_error");
  TensorBoardWriter writer(folder.string());
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limited = saved;
  limited.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    for (int step = 1; step < 100; ++step) {
      writer.add_scalars(step, {{"loss", 1.0}, {"grad_norm", 2.0}});
    }
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(
      message,
      "[tensorboard] cannot write " + writer.path() + ": File too large");
}

}  // namespace
}  // namespace baton
