#pragma once

// What the dist facade's two source files share and nothing else uses: the
// runtime state groups and works hold (Core) and a group's implementation,
// which the runtime creates. The groups' operations are in process_group.cpp,
// the runtime (rendezvous, heartbeats, diagnosis) in
// process_group_runtime.cpp. This header and those two files are the only
// ones that include c10d: any difference between the libtorch versions Baton
// supports in c10d stays here, naming the version.
#ifndef USE_C10D_GLOO
// Debian's libtorch is built with Gloo, but its CMake target does not say so.
#define USE_C10D_GLOO
#endif

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/process_group.h"

namespace baton::dist {

// The backends derive from c10d::Backend; c10d::ProcessGroup is a
// dispatching front end we never construct.
using BackendBase = c10d::Backend;

using Millis = std::chrono::milliseconds;

/// The first line of an exception message (Gloo's carry a source path).
std::string first_line(const std::string& s);

/// The first line of `e`'s message, without c10's backtrace.
std::string error_text(const std::exception& e);

std::string seconds_text(Millis ms);

/// Where the ranks meet, for messages: the store file or host:port.
std::string store_address(const LaunchEnv& env);

/// What groups and works share with their runtime: the store, the
/// heartbeat, the timeout. Groups hold it (not the Runtime, which holds
/// the world group), so a Runtime and its groups go away together.
struct Core {
  LaunchEnv env;
  RuntimeOptions options;
  /// Rendezvous and group creation; diagnosis once operations fail.
  c10::intrusive_ptr<c10d::Store> store;
  /// A second connection, so a blocking store call elsewhere never delays
  /// a heartbeat.
  c10::intrusive_ptr<c10d::Store> heartbeat_store;
  std::atomic<int64_t> timeout_ms{0};

  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  std::thread heartbeat;
  /// This rank has dumped its flight recorder for a failure (its own or a
  /// peer's request): a request seen later changes nothing.
  std::atomic<bool> flight_dumped{false};
  /// kFlightRequestsKey when this runtime began.
  int64_t flight_requests_before = 0;

  ~Core();

  Millis timeout() const {
    return Millis(timeout_ms.load());
  }

  void heartbeat_loop();

  /// Blocks while the store does not answer: diagnose_within bounds it.
  std::string diagnose();

  bool records_flight() const {
    return !options.flight_recorder_dir.empty() &&
           FlightRecorder::process().enabled();
  }

  /// Writes this rank's flight-recorder file, counting it in the store;
  /// returns its path, or "" when it could not be written.
  /// Writes this rank's file; then counts it in `via`'s dump counter unless
  /// `via` is null (the caller counts it, bounded).
  std::string dump_flight(const std::string& reason, c10d::Store* via);

  /// On the heartbeat thread: dumps once a peer has asked.
  void dump_flight_if_asked();

  /// An operation of this rank failed (`what`): dumps this rank's flight
  /// recorder, asks every other rank to dump theirs and waits a little for
  /// them. Returns the sentence naming the file for the error, or "".
  std::string flight_failure(const std::string& what);
};

/// core->diagnose(), or what an unanswering store means after a bounded
/// wait.
std::string diagnose_within(const std::shared_ptr<Core>& core);

struct ProcessGroup::Impl {
  std::string name;
  int64_t rank = 0;
  std::vector<int64_t> global_ranks;
  std::string backend = "local";
  c10::intrusive_ptr<BackendBase> pg;  // null for a group of one
  std::shared_ptr<Core> runtime;       // null for a group of one
  /// This group's own timeout (0: the runtime's current one).
  Millis timeout{0};
  /// Collectives started on this group, and P2P operations with each
  /// member, for the flight recorder.
  mutable int64_t collectives = 0;
  mutable std::vector<int64_t> p2p;

  ~Impl() {
#ifdef USE_C10D_NCCL
    // An NCCL group destroyed without shutdown() warns that pending
    // operations may be cut off; this is its only owner.
    if (pg && backend == "nccl") {
      static_cast<c10d::ProcessGroupNCCL&>(*pg).shutdown();
    }
#endif
  }

  bool local() const {
    return !pg;
  }
  int64_t size() const {
    return static_cast<int64_t>(global_ranks.size());
  }
  std::string describe(const std::string& op) const {
    return op + " on group '" + name + "' (" + std::to_string(size()) +
           " ranks, this is global rank " + std::to_string(global_ranks[rank]) +
           ")";
  }
  void check_peer(int64_t peer, const char* what) const {
    if (peer < 0 || peer >= size() || peer == rank) {
      throw std::invalid_argument(
          "[ProcessGroup " + name + "] " + what + " " + std::to_string(peer) +
          " is not another rank of a group of " + std::to_string(size()));
    }
  }
  /// An operation started, and its entry in the flight recorder.
  struct Started {
    c10::intrusive_ptr<c10d::Work> work;
    uint64_t flight_id = 0;
  };
  Work make_work(
      const std::string& op,
      Started started,
      std::function<void()> then = nullptr) const;
  /// Records `op` in the flight recorder: what moves (`tensor`), to or from
  /// which group rank (`peer`, -1 for a collective).
  uint64_t record(
      const char* op,
      const at::Tensor& tensor,
      int64_t peer = -1,
      int64_t tag = -1) const {
    int64_t seq = 0;
    if (peer < 0) {
      seq = ++collectives;
    } else {
      seq = ++p2p[peer];
    }
    auto& recorder = FlightRecorder::process();
    if (!recorder.enabled()) {
      return 0;
    }
    FlightEntry e;
    e.kind = peer >= 0 ? FlightKind::kP2P : FlightKind::kCollective;
    e.name = op;
    std::strncpy(e.group, name.c_str(), sizeof(e.group) - 1);
    e.group_seq = seq;
    e.peer = peer >= 0 ? global_ranks[peer] : -1;
    e.tag = tag;
    if (tensor.defined()) {
      e.bytes = static_cast<int64_t>(tensor.nbytes());
      e.dtype = c10::toString(tensor.scalar_type());
    }
    return recorder.record(e);
  }
  /// Records, then calls `start` and turns a c10d exception into a
  /// CommError.
  template <class F>
  Started start(const std::string& op, uint64_t flight_id, F&& f) const {
    try {
      return {f(), flight_id};
    } catch (const std::exception& e) {
      FlightRecorder::process().finish(flight_id, FlightState::kFailed);
      const std::string what = describe(op) + " could not start";
      throw CommError(
          "[dist] " + what + ": " + error_text(e) + "; " +
          diagnose_within(runtime) + runtime->flight_failure(what));
    }
  }
};

}  // namespace baton::dist
