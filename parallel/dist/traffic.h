#pragma once

// What a parallelism's own collectives (tensor parallel's regions, expert
// parallel's all-to-alls, context parallel's key/value exchange) sent, and
// the name each runs under, so that a profiler trace, the flight recorder
// and an error say which layer and exchange it was.

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/process_group.h"

namespace baton::dist {

/// Calls and the bytes a rank sent to others; for a collective posted
/// before other work, the time the rank then still waited for it.
struct Traffic {
  int64_t calls = 0;
  int64_t bytes = 0;
  int64_t wait_ns = 0;
};

/// A thread-safe table of Traffic by key ("layers.0.attention enter
/// forward"), one per parallelism; ranks run as threads of one process add
/// up. For the benchmarks that check the bytes against their formulas.
class TrafficLog {
 public:
  void count(const std::string& key, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& t = table_[key];
    t.calls += 1;
    t.bytes += bytes;
  }
  void waited(const std::string& key, int64_t ns) {
    std::lock_guard<std::mutex> lock(mutex_);
    table_[key].wait_ns += ns;
  }
  std::map<std::string, Traffic> snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return table_;
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    table_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Traffic> table_;
};

/// Runs `op` as "<owner> <name> <what>" ("expert_parallel layers.1.moe
/// dispatch forward"): a profiler range, the flight recorder's label, and a
/// CommError that starts "[owner] name: what: ". Returns what `op` returns.
template <class Op>
auto run_labelled(
    const std::string& owner,
    const std::string& name,
    const std::string& what,
    const Op& op) -> decltype(op()) {
  const std::string label = owner + " " + name + " " + what;
  RECORD_FUNCTION(label, std::vector<c10::IValue>());
  const FlightLabel flight_label(label);
  try {
    return op();
  } catch (const CommError& e) {
    throw CommError("[" + owner + "] " + name + ": " + what + ": " + e.what());
  }
}

}  // namespace baton::dist
