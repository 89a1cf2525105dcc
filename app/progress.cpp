#include "app/progress.h"

#include <cstdio>

#include "trainer/metrics.h"

namespace baton {

namespace {

// Redraws of a terminal bar at most this often.
constexpr double kTerminalInterval_s = 0.1;

std::string millions(double n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  return buf;
}

}  // namespace

std::string format_progress(const ProgressSnapshot& p) {
  const double fraction = p.total_documents > 0
                              ? static_cast<double>(p.documents) /
                                    static_cast<double>(p.total_documents)
                              : 1.0;
  char percent[16];
  std::snprintf(percent, sizeof(percent), "%.1f%%", 100.0 * fraction);
  std::string line = std::to_string(p.documents) + "/" +
                     std::to_string(p.total_documents) + " documents (" +
                     percent + "), " + millions(static_cast<double>(p.tokens)) +
                     " tokens";
  if (p.seconds > 0.0) {
    line += ", " + millions(static_cast<double>(p.tokens) / p.seconds) +
            " tokens/s";
  }
  if (p.documents > 0 && p.documents < p.total_documents) {
    line += ", ETA " + format_duration(p.seconds * (1.0 - fraction) / fraction);
  } else if (p.documents >= p.total_documents) {
    line += ", done in " + format_duration(p.seconds);
  }
  return line;
}

ProgressReporter::ProgressReporter(
    std::ostream& out,
    bool terminal,
    int64_t total_documents,
    double plain_interval_s)
    : out_(out),
      terminal_(terminal),
      interval_s_(terminal ? kTerminalInterval_s : plain_interval_s),
      start_(std::chrono::steady_clock::now()) {
  progress_.total_documents = total_documents;
}

void ProgressReporter::add(int64_t tokens) {
  ++progress_.documents;
  progress_.tokens += tokens;
  progress_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  if (progress_.seconds - last_print_s_ >= interval_s_) {
    last_print_s_ = progress_.seconds;
    print(false);
  }
}

void ProgressReporter::finish() {
  progress_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  print(true);
}

void ProgressReporter::print(bool last) {
  const std::string line = format_progress(progress_);
  if (terminal_) {
    // \033[K clears what a longer previous line left.
    out_ << "\r" << line << "\033[K" << (last ? "\n" : "") << std::flush;
  } else {
    out_ << line << "\n" << std::flush;
  }
}

}  // namespace baton
