#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace baton {

/// What a long data job has done so far.
struct ProgressSnapshot {
  int64_t documents = 0;
  int64_t total_documents = 0;
  int64_t tokens = 0;
  double seconds = 0.0;
};

/// "1200/4000 documents (30.0%), 1.52M tokens, 0.41M tokens/s, ETA 7s":
/// the rate is tokens per second so far, the ETA assumes the remaining
/// documents go at the same pace.
std::string format_progress(const ProgressSnapshot& progress);

/// Reports progress to `out`: on a terminal, one bar redrawn in place a few
/// times a second; otherwise (a log file, CI) a plain line every
/// `plain_interval_s` seconds. finish() prints the last line.
class ProgressReporter {
 public:
  ProgressReporter(
      std::ostream& out,
      bool terminal,
      int64_t total_documents,
      double plain_interval_s = 5.0);
  /// Counts one more document of `tokens` tokens; redraws when it is time.
  void add(int64_t tokens);
  /// Prints the final line.
  void finish();

 private:
  void print(bool last);

  std::ostream& out_;
  bool terminal_;
  double interval_s_;
  ProgressSnapshot progress_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = 0.0;
};

}  // namespace baton
