#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace baton::dist {

/// What an entry of the flight recorder is.
enum class FlightKind : uint8_t { kCollective, kP2P, kAction };

/// started: posted or entered, not finished (its end is null); completed:
/// waited for, or left; failed: its wait threw (timed out or lost a peer).
enum class FlightState : uint8_t { kStarted, kCompleted, kFailed };

/// One collective, P2P operation or pipeline action. Fixed size, no heap:
/// recording one copies a few short strings into the ring, nothing else.
struct FlightEntry {
  /// 1, 2, ... in the order recorded; 0: an empty slot.
  uint64_t id = 0;
  FlightKind kind = FlightKind::kCollective;
  FlightState state = FlightState::kStarted;
  /// "all_reduce", "send", "recv", ... or the action ("1SEND_F3"). A static
  /// string for operations; actions are copied into `label`.
  const char* name = "";
  /// What the operation was for: the tensor-parallel region
  /// ("tensor_parallel layers.0.attention ..."), the FSDP unit, the pipeline
  /// action that posted a P2P; for an action its own name.
  char label[64] = {0};
  char group[24] = {0};
  /// The n-th collective on `group` (1, 2, ...), the same on every member
  /// when they agree on the order: a member whose last is lower is behind.
  /// For a P2P operation, the n-th with `peer` on `group`; 0 for actions.
  int64_t group_seq = 0;
  /// Global rank of the other side of a P2P operation; -1 otherwise.
  int64_t peer = -1;
  int64_t tag = -1;
  int64_t bytes = 0;
  /// c10's name of the dtype ("Float"); "" when none.
  const char* dtype = "";
  /// Microseconds since the Unix epoch (comparable across the ranks of
  /// one machine); end 0 while in flight.
  int64_t start_us = 0;
  int64_t end_us = 0;
};

/// A ring of the last `capacity` entries of this process: every collective
/// and P2P operation of the dist facade (parallel/dist/process_group.h) and
/// every action of the pipeline executor. Dumped as JSON to
/// `<job.dump_folder>/flight_recorder/rank<N>.json` when an operation
/// times out, on every rank (docs/launching.md, "Hang reports"). Thread
/// safe; one uncontended lock per record and finish.
class FlightRecorder {
 public:
  /// 0 disables it: record() returns 0 and keeps nothing.
  explicit FlightRecorder(int64_t capacity);

  /// The recorder of this process, which the facade and the executor use
  /// (capacity: comm.flight_recorder_entries, set by Runtime::init).
  static FlightRecorder& process();

  /// Empties the ring and resizes it.
  void set_capacity(int64_t capacity);
  int64_t capacity() const;
  bool enabled() const {
    return capacity_ > 0;
  }

  /// Records `entry` as started now; returns its id for finish(), 0 when
  /// disabled. `label`, when not null, replaces entry.label; null keeps it,
  /// or takes the thread's FlightLabel when entry.label is empty.
  uint64_t record(FlightEntry entry, const char* label = nullptr);
  /// Marks entry `id` completed or failed now; a no-op when it has left
  /// the ring or `id` is 0.
  void finish(uint64_t id, FlightState state);
  /// Remembers the global ranks of a group, for the dump.
  void add_group(const std::string& name, const std::vector<int64_t>& ranks);

  /// The entries in the ring, oldest first.
  std::vector<FlightEntry> entries() const;
  /// Entries recorded since the last set_capacity (also those that left).
  uint64_t recorded() const;

  /// The dump as JSON: rank, world_size, reason, dumped_at_us, capacity,
  /// recorded, groups, entries (see docs/launching.md).
  std::string to_json(
      int64_t rank, int64_t world_size, const std::string& reason) const;
  /// Writes to_json to `path` (its folder is created; written to a
  /// temporary file and renamed, so a reader never sees half a file).
  /// Throws std::runtime_error when it cannot.
  void dump(
      const std::filesystem::path& path,
      int64_t rank,
      int64_t world_size,
      const std::string& reason) const;

 private:
  mutable std::mutex mutex_;
  std::atomic<int64_t> capacity_{0};
  uint64_t next_id_ = 1;
  std::vector<FlightEntry> ring_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> groups_;
};

/// Labels the operations this thread records while it lives ("what is
/// this all-gather for"). Nests; the innermost wins. `label` must outlive
/// the scope.
class FlightLabel {
 public:
  explicit FlightLabel(const std::string& label);
  ~FlightLabel();
  FlightLabel(const FlightLabel&) = delete;
  FlightLabel& operator=(const FlightLabel&) = delete;

  /// The innermost label of this thread, or null.
  static const char* current();

 private:
  const char* previous_;
};

/// `<folder>/rank<rank>.json`; `folder` is
/// `<job.dump_folder>/flight_recorder`.
std::filesystem::path flight_recorder_file(
    const std::filesystem::path& folder, int64_t rank);

/// What `baton --nproc` prints after a failed run from the flight-recorder
/// files in `folder` written since `since`: the rank the others waited on
/// ("rank 1 stopped answering first") and its last action from its file.
/// Empty when no file names a failed operation.
std::string hang_report(
    const std::filesystem::path& folder,
    int64_t world_size,
    std::filesystem::file_time_type since);

}  // namespace baton::dist
