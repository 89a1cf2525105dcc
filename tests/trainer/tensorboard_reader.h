#pragma once

// An independent reader of TensorBoard event files, for the tests: it parses
// the TFRecord framing itself, checks both CRCs with a bitwise CRC-32C of its
// own, and decodes each payload with Debian's protoc against the published
// .proto files (tests/trainer/tensorboard_proto, from tensorflow/tensorboard).
// Nothing here comes from trainer/tensorboard.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/baton_binary.h"

namespace baton::testing {

/// CRC-32C (Castagnoli), bit by bit: the reflected polynomial 0x82F63B78.
inline uint32_t reference_crc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char ch : data) {
    crc ^= static_cast<uint8_t>(ch);
    for (int k = 0; k < 8; ++k) {
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
  }
  return ~crc;
}

/// TFRecord's mask: rotate right by 15, add 0xa282ead8.
inline uint32_t reference_masked_crc32c(const std::string& data) {
  const uint32_t crc = reference_crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// One Event as protoc printed it, and the fields the tests check.
struct DecodedEvent {
  /// protoc's text format of the whole message.
  std::string text;
  double wall_time = 0.0;
  int64_t step = 0;
  std::string file_version;
  /// A session_log with status START.
  bool session_start = false;
  /// summary.value's (tag, simple_value), in order.
  std::vector<std::pair<std::string, float>> scalars;
};

inline uint64_t read_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  }
  return v;
}

/// The payloads of a TFRecord file; a failure names the first bad record.
inline ::testing::AssertionResult read_tfrecords(
    const std::filesystem::path& path, std::vector<std::string>* records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return ::testing::AssertionFailure() << "cannot open " << path;
  }
  const std::string bytes(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t index = records->size();
    if (bytes.size() - at < 12) {
      return ::testing::AssertionFailure()
             << path << ": record " << index << ": " << bytes.size() - at
             << " bytes left, short of a header";
    }
    const std::string length_bytes = bytes.substr(at, 8);
    const uint64_t length = read_le(bytes, at, 8);
    if (read_le(bytes, at + 8, 4) != reference_masked_crc32c(length_bytes)) {
      return ::testing::AssertionFailure()
             << path << ": record " << index << ": bad length CRC";
    }
    at += 12;
    if (bytes.size() - at < length + 4) {
      return ::testing::AssertionFailure()
             << path << ": record " << index << ": length " << length
             << " runs past the end";
    }
    std::string payload = bytes.substr(at, length);
    if (read_le(bytes, at + length, 4) != reference_masked_crc32c(payload)) {
      return ::testing::AssertionFailure()
             << path << ": record " << index << ": bad payload CRC";
    }
    at += length + 4;
    records->push_back(std::move(payload));
  }
  return ::testing::AssertionSuccess();
}

/// `line` without its leading spaces.
inline std::string trim_left(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  return first == std::string::npos ? "" : line.substr(first);
}

/// The string of a text-format value `"..."` (tags and versions need no
/// escapes).
inline std::string unquote(const std::string& value) {
  return value.size() >= 2 ? value.substr(1, value.size() - 2) : value;
}

/// Decodes one Event payload with `protoc --decode=tensorboard.Event`. Fails
/// (never skips) when protoc is missing: scripts/setup.sh installs it.
inline ::testing::AssertionResult decode_event(
    const std::string& payload, const std::string& name, DecodedEvent* out) {
  if (run_command("command -v protoc").code != 0) {
    return ::testing::AssertionFailure()
           << "protoc not found: install protobuf-compiler (scripts/setup.sh)";
  }
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tb_payloads";
  std::filesystem::create_directories(dir);
  const auto file = dir / (name + ".bin");
  std::ofstream(file, std::ios::binary) << payload;
  const auto r = run_command(
      "cd " + source_path("tests/trainer/tensorboard_proto") +
      " && protoc -I . --decode=tensorboard.Event "
      "tensorboard/compat/proto/event.proto < " +
      file.string());
  if (r.code != 0) {
    return ::testing::AssertionFailure()
           << "protoc could not decode " << name << ": " << r.output;
  }
  out->text = r.output;
  std::istringstream lines(r.output);
  std::optional<std::string> tag;
  for (std::string raw; std::getline(lines, raw);) {
    const std::string line = trim_left(raw);
    const size_t colon = line.find(": ");
    const std::string key = line.substr(0, colon);
    const std::string value =
        colon == std::string::npos ? "" : line.substr(colon + 2);
    if (key == "wall_time") {
      out->wall_time = std::strtod(value.c_str(), nullptr);
    } else if (key == "step") {
      out->step = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "file_version") {
      out->file_version = unquote(value);
    } else if (key == "status") {
      out->session_start = value == "START";
    } else if (key == "tag") {
      tag = unquote(value);
    } else if (key == "simple_value" && tag) {
      out->scalars.emplace_back(*tag, std::strtof(value.c_str(), nullptr));
      tag.reset();
    } else if (
        line != "summary {" && line != "value {" && line != "session_log {" &&
        line != "}" && !line.empty()) {
      return ::testing::AssertionFailure()
             << name << ": unexpected line '" << line << "' in\n"
             << r.output;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Every Event of an event file, in order.
inline ::testing::AssertionResult read_event_file(
    const std::filesystem::path& path, std::vector<DecodedEvent>* events) {
  std::vector<std::string> records;
  if (auto ok = read_tfrecords(path, &records); !ok) {
    return ok;
  }
  for (size_t i = 0; i < records.size(); ++i) {
    DecodedEvent e;
    const std::string name =
        path.filename().string() + ".record" + std::to_string(i);
    if (auto ok = decode_event(records[i], name, &e); !ok) {
      return ok;
    }
    events->push_back(std::move(e));
  }
  return ::testing::AssertionSuccess();
}

/// The event files of `folder`, by name (TensorBoard's order).
inline std::vector<std::filesystem::path> event_files(
    const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(folder)) {
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.path().filename().string().rfind("events.out.tfevents.", 0) ==
          0) {
        files.push_back(entry.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace baton::testing
