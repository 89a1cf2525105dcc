#pragma once

// Runs the `baton` executable (env BATON_BIN) as a user would.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace baton::testing {

struct BinaryResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

/// The console's messages joined back where it wrapped them at 120 columns
/// (common/logging.h: a continuation line is the message column's 18
/// spaces, 21 after a rank, then text; under the launcher after its
/// "[rankN]: "): tests search what a line says, not where it broke.
inline std::string unwrap_console(const std::string& text) {
  static const std::regex continuation(
      R"(\n(\[rank\d+\]: )?( {18}| {21})(?=\S))");
  return std::regex_replace(text, continuation, " ");
}

/// Runs a shell command line, capturing both streams, as they were written.
inline BinaryResult run_command_raw(const std::string& command) {
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

/// As run_command_raw, the console's wrapped messages joined back.
inline BinaryResult run_command(const std::string& command) {
  BinaryResult r = run_command_raw(command);
  r.output = unwrap_console(r.output);
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

/// A command line (`exec`ed by /bin/sh: prefix variables with `env`)
/// running in the background, its output (both
/// streams) going to a file, so that a test can watch it and signal it.
class BackgroundRun {
 public:
  BackgroundRun(const std::string& command, std::filesystem::path log)
      : log_(std::move(log)) {
    const std::string line =
        "exec " + command + " > " + log_.string() + " 2>&1";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~BackgroundRun() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait(std::chrono::seconds(10));
    }
  }
  pid_t pid() const {
    return pid_;
  }
  bool running() const {
    return pid_ > 0 && code_ == kRunning;
  }
  void signal(int sig) const {
    ::kill(pid_, sig);
  }
  /// The exit code (128 + N when killed by signal N); after `timeout` the
  /// process is killed (SIGKILL) and -1 returned.
  int wait(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (code_ == kRunning) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        code_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return code_;
  }
  /// What it has written so far.
  std::string output() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  /// Waits until `done()` holds (true) or `timeout` passes or the process
  /// ends (false).
  template <class F>
  bool wait_until(F&& done, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      if (done()) {
        return true;
      }
      int status = 0;
      if (code_ == kRunning && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (code_ != kRunning) {
        return done();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  static constexpr int kRunning = -1000;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int code_ = kRunning;
};

}  // namespace baton::testing
