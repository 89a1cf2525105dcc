#pragma once

// Runs the `baton` executable (env BATON_BIN) as a user would.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace baton::testing {

struct BinaryResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs a shell command line, capturing both streams.
inline BinaryResult run_command(const std::string& command) {
  BinaryResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) {
    r.output.append(buf, n);
  }
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// The baton executable.
inline std::string baton_bin() {
  const char* bin = std::getenv("BATON_BIN");
  EXPECT_NE(bin, nullptr) << "BATON_BIN must point at the baton executable";
  return bin == nullptr ? "baton" : bin;
}

/// A file of the source tree ("configs/debug_model.yaml").
inline std::string source_path(const std::string& relative) {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() /
          relative)
      .string();
}

/// An empty folder under the test temp dir.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

/// The objects of a metrics.jsonl file.
inline std::vector<nlohmann::json> read_metrics(
    const std::filesystem::path& dump) {
  std::ifstream in(dump / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

/// The `loss` of every line of a metrics.jsonl file, in order.
inline std::vector<double> read_losses(const std::filesystem::path& dump) {
  std::vector<double> out;
  for (const auto& j : read_metrics(dump)) {
    out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace baton::testing
