// The console's format (common/logging.h): wrapping, tags and levels. What
// the binary prints with it is tests/app/console_test.cpp's.

#include "common/logging.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace baton {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0, end; begin < text.size(); begin = end + 1) {
    end = text.find('\n', begin);
    out.push_back(text.substr(begin, end - begin));
  }
  return out;
}

TEST(Logging, AShortLineIsTimeTagAndMessage) {
  EXPECT_EQ(
      format_console_line("21:34:50", "", "trainer", "step 1/3", 120),
      "21:34:50 trainer  step 1/3\n");
  EXPECT_EQ(
      format_console_line("21:34:50", "r1", "app", "blas: MKL", 120),
      "21:34:50 r1 app      blas: MKL\n");
  // A tag longer than the column keeps one space after it.
  EXPECT_EQ(
      format_console_line("00:00:01", "", "checkpoint", "saved", 120),
      "00:00:01 checkpoint saved\n");
}

TEST(Logging, LongMessagesWrapAtTheWidthUnderTheirColumn) {
  std::string message;
  for (int i = 0; i < 60; ++i) {
    message += "word" + std::to_string(i) + " ";
  }
  message += std::string(150, 'x');  // One word longer than a line.
  message += "\nsecond paragraph";
  const std::string text =
      format_console_line("12:00:00", "", "builders", message, 120);
  const auto lines = lines_of(text);
  ASSERT_GE(lines.size(), 5u);
  const size_t indent = std::string("12:00:00 builders ").size();
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LE(lines[i].size(), 120u) << lines[i];
    if (i > 0) {
      EXPECT_EQ(lines[i].substr(0, indent), std::string(indent, ' '))
          << lines[i];
      EXPECT_NE(lines[i][indent], ' ') << lines[i];
    }
  }
  // Words stay whole and in order; the message's own line break stays.
  std::string joined;
  for (const auto& line : lines) {
    joined += line.substr(indent) + "|";
  }
  EXPECT_NE(joined.find("word0 word1 word2"), std::string::npos) << joined;
  EXPECT_EQ(lines.back().substr(indent), "second paragraph");
  // Narrower under a launcher's prefix.
  for (const auto& line : lines_of(
           format_console_line("12:00:00", "", "builders", message, 110))) {
    EXPECT_LE(line.size(), 110u) << line;
  }
}

TEST(Logging, TheTagIsTheSourceFilesFolder) {
  EXPECT_EQ(log_tag("/src/baton/trainer/metrics.cpp"), "trainer");
  EXPECT_EQ(log_tag("parallel/fsdp/fully_shard.cpp"), "fsdp");
  EXPECT_EQ(log_tag("app/run.cpp"), "app");
  EXPECT_EQ(log_tag("main.cpp"), "baton");
}

TEST(Logging, LevelsParseByNameAndRefuseOthers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("progress"), LogLevel::kProgress);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarning);
  for (int i = 0; i < kLogLevelCount; ++i) {
    EXPECT_EQ(static_cast<int>(parse_log_level(log_level_names()[i])), i);
  }
  try {
    parse_log_level("loud");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("allowed: debug, info, progress, warning"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
