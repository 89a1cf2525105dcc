#pragma once

// The bad-input sweep's tools: deterministic mutations of a good file
// (truncations, seeded bit flips), the count of cases tried, and a watchdog
// that turns a case that hangs into a failure naming it.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace baton::testing {

/// The bytes of `path`.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Writes `bytes` to `path`, replacing it. The old file is removed first:
/// ext4 flushes a file truncated and rewritten (auto_da_alloc), some ms a
/// case.
inline void write_bytes(
    const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out) << "cannot write " << path;
}

/// Lengths to truncate a file of `size` bytes to: every length below
/// `size` when there are at most `max_cases`, else every length of the
/// first `max_cases / 2` bytes (headers live there) and the rest spread
/// evenly, each distinct and below `size`.
inline std::vector<size_t> truncation_lengths(size_t size, size_t max_cases) {
  std::set<size_t> lengths;
  if (size <= max_cases) {
    for (size_t n = 0; n < size; ++n) {
      lengths.insert(n);
    }
  } else {
    const size_t head = max_cases / 2;
    for (size_t n = 0; n < head; ++n) {
      lengths.insert(n);
    }
    const size_t rest = max_cases - head;
    for (size_t i = 0; i < rest; ++i) {
      lengths.insert(head + (size - head) * i / rest);
    }
  }
  return {lengths.begin(), lengths.end()};
}

/// One mutation of a good file: what was done (for messages) and the bytes.
struct Mutation {
  std::string what;
  std::string bytes;
};

/// The lines of `text` (without their '\n'), and back.
inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

inline std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) {
    out += line + '\n';
  }
  return out;
}

/// Appends `lines` with line `i` removed and with it repeated, described
/// as `at` removed / repeated.
inline void remove_and_repeat_line(
    const std::vector<std::string>& lines,
    size_t i,
    const std::string& at,
    std::vector<Mutation>& out) {
  auto removed = lines;
  removed.erase(removed.begin() + static_cast<std::ptrdiff_t>(i));
  out.push_back({at + " removed", join_lines(removed)});
  auto repeated = lines;
  repeated.insert(repeated.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
  out.push_back({at + " repeated", join_lines(repeated)});
}

/// `count` copies of `good`, each with one to three bits flipped at
/// positions drawn from `seed` within [begin, end) (end 0: the whole file).
inline std::vector<Mutation> bit_flips(
    const std::string& good,
    uint64_t seed,
    size_t count,
    size_t begin = 0,
    size_t end = 0) {
  std::mt19937_64 rng(seed);
  end = end == 0 ? good.size() : std::min(end, good.size());
  std::vector<Mutation> out;
  if (end <= begin) {
    return out;
  }
  std::uniform_int_distribution<size_t> position(begin, end - 1);
  std::uniform_int_distribution<int> bit(0, 7);
  std::uniform_int_distribution<int> flips(1, 3);
  for (size_t i = 0; i < count; ++i) {
    Mutation m{
        "bit flips (seed " + std::to_string(seed) + ", case " +
            std::to_string(i) + ") at byte",
        good};
    for (int f = flips(rng); f > 0; --f) {
      const size_t at = position(rng);
      m.bytes[at] = static_cast<char>(m.bytes[at] ^ (1 << bit(rng)));
      m.what += " " + std::to_string(at);
    }
    out.push_back(std::move(m));
  }
  return out;
}

/// Counts a sweep's cases and reports them (stdout and the test's
/// properties, `[sweep] config: 1834 cases, 0 failures`). While a case runs
/// a watchdog waits: a case running past `case_timeout` is a hang, reported
/// by name before the process exits 1.
class Sweep {
 public:
  explicit Sweep(
      std::string kind,
      std::chrono::seconds case_timeout = std::chrono::seconds(20))
      : kind_(std::move(kind)),
        timeout_(case_timeout),
        watchdog_([this] { watch(); }) {}

  ~Sweep() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    std::ostringstream line;
    line << "[sweep] " << kind_ << ": " << cases_ << " cases, " << failures_
         << " failures";
    std::cout << line.str() << std::endl;
    ::testing::Test::RecordProperty("sweep_" + kind_ + "_cases", cases_);
    ::testing::Test::RecordProperty("sweep_" + kind_ + "_failures", failures_);
  }

  Sweep(const Sweep&) = delete;
  Sweep& operator=(const Sweep&) = delete;

  /// Runs one case named `what` under the watchdog; `check` returns "" when
  /// the input was handled as the contract says, else the problem.
  template <class F>
  void run(const std::string& what, F&& check) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = what;
      started_ = std::chrono::steady_clock::now();
      running_ = true;
    }
    wake_.notify_all();
    const std::string problem = check();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    ++cases_;
    if (!problem.empty()) {
      ++failures_;
      ADD_FAILURE() << "[sweep] " << kind_ << ": " << what << ": " << problem;
    }
  }

  int64_t cases() const {
    return cases_;
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      if (running_ && std::chrono::steady_clock::now() - started_ > timeout_) {
        std::cerr << "[sweep] " << kind_ << ": case hangs (over "
                  << timeout_.count() << " s): " << current_ << std::endl;
        std::_Exit(1);
      }
      wake_.wait_for(lock, std::chrono::milliseconds(200));
    }
  }

  std::string kind_;
  std::chrono::seconds timeout_;
  int64_t cases_ = 0;
  int64_t failures_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  bool running_ = false;
  std::string current_;
  std::chrono::steady_clock::time_point started_;
  std::thread watchdog_;
};

/// "" when `message` contains every one of `parts`, else what is missing.
inline std::string missing_from(
    const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    if (message.find(part) == std::string::npos) {
      return "message lacks '" + part + "': " + message;
    }
  }
  return "";
}

}  // namespace baton::testing
