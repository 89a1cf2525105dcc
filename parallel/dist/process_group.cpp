// The one file that includes c10d: any difference between the libtorch
// versions Baton supports in c10d stays here, naming the version.
#ifndef USE_C10D_GLOO
// Debian's libtorch is built with Gloo, but its CMake target does not say so.
#define USE_C10D_GLOO
#endif

#include "parallel/dist/process_group.h"

#include <ATen/ATen.h>
#include <glog/logging.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <csignal>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "common/text.h"
#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/listen_socket.h"

namespace baton::dist {

namespace {

// The backends derive from c10d::Backend; c10d::ProcessGroup is a
// dispatching front end we never construct.
using BackendBase = c10d::Backend;

using Millis = std::chrono::milliseconds;

/// The first line of an exception message (Gloo's carry a source path).
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

/// The first line of `e`'s message, without c10's backtrace.
std::string error_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return first_line(c10_error ? c10_error->what_without_backtrace() : e.what());
}

std::string seconds_text(Millis ms) {
  const auto s = static_cast<double>(ms.count()) / 1000.0;
  std::string text = std::to_string(s);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') {
    text.pop_back();
  }
  return text + " s";
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // summed, then divided here
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

std::vector<uint8_t> to_bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string from_bytes(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}

std::string heartbeat_key(int64_t rank) {
  return "baton/heartbeat/" + std::to_string(rank);
}

std::string failure_key(int64_t rank) {
  return "baton/failed/" + std::to_string(rank);
}

/// Counts the requests of ranks whose operation failed: every rank's
/// heartbeat thread watches it and dumps its flight recorder, so that a rank
/// stuck in compute, which never reaches a timeout of its own, dumps too. A
/// counter, not a flag: a runtime heeds only requests made after it began
/// (a restarted job may find an earlier attempt's in the store).
constexpr const char* kFlightRequestsKey = "baton/flight_recorder/requests";
/// Why the last request was made ("rank 0: all_reduce ... failed ...").
constexpr const char* kFlightReasonKey = "baton/flight_recorder/reason";
/// Counts the dumps written, so the rank that asked can wait for them.
constexpr const char* kFlightDumpedKey = "baton/flight_recorder/dumped";

/// TCPStore options: the classic server (libuv's, the default, takes the
/// listening socket over the same way; the classic one is what Baton's
/// tests and runs have used throughout) on a socket of `host`'s when
/// serving.
c10d::TCPStoreOptions store_options(
    bool is_server, const std::string& host, int64_t port) {
  c10d::TCPStoreOptions opts;
  opts.useLibUV = false;
  opts.isServer = is_server;
  opts.port = static_cast<uint16_t>(port);
  if (is_server) {
    const int fd = listen_socket(host, port);
    opts.masterListenFd = fd;
    opts.port = static_cast<uint16_t>(bound_port(fd));
  }
  return opts;
}

c10::intrusive_ptr<c10d::Store> connect_store(
    const LaunchEnv& env, bool is_server, Millis timeout) {
  if (!env.store_file.empty()) {
    // baton --nproc's private folder; numWorkers -1: the launcher, not
    // the last rank out, removes the file.
    auto store = c10::make_intrusive<c10d::FileStore>(env.store_file, -1);
    store->setTimeout(timeout);
    return store;
  }
  c10d::TCPStoreOptions opts =
      store_options(is_server, env.master_addr, env.master_port);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
}

c10::intrusive_ptr<c10d::Store> with_prefix(
    c10::intrusive_ptr<c10d::Store> store, const std::string& prefix) {
  if (prefix.empty()) {
    return store;
  }
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

}  // namespace

// ---------------------------------------------------------------- Runtime

/// Where the ranks meet, for messages: the store file or host:port.
std::string store_address(const LaunchEnv& env) {
  return env.store_file.empty()
             ? env.master_addr + ":" + std::to_string(env.master_port)
             : env.store_file;
}

/// What groups and works share with their runtime: the store, the
/// heartbeat, the timeout. Groups hold it (not the Runtime, which holds
/// the world group), so a Runtime and its groups go away together.
/// How long a failing rank tries to tell the others before it exits.
constexpr std::chrono::seconds kReportFailureWait{2};
/// How long a diagnosis waits for the store beyond its heartbeat wait.
constexpr std::chrono::seconds kStoreAnswerWait{5};

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

  ~Core() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    stop_cv.notify_all();
    if (heartbeat.joinable()) {
      heartbeat.join();
    }
  }

  Millis timeout() const {
    return Millis(timeout_ms.load());
  }

  void heartbeat_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      lock.unlock();
      try {
        heartbeat_store->add(heartbeat_key(env.rank), 1);
        dump_flight_if_asked();
      } catch (const std::exception&) {
        // The store is gone; diagnose() reports it when an operation fails.
      }
      lock.lock();
      stop_cv.wait_for(lock, options.heartbeat_interval, [&] { return stop; });
    }
  }

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
  std::string dump_flight(const std::string& reason, c10d::Store* via) {
    const auto path =
        flight_recorder_file(options.flight_recorder_dir, env.rank);
    try {
      FlightRecorder::process().dump(path, env.rank, env.world_size, reason);
    } catch (const std::exception& e) {
      LOG(WARNING) << "flight recorder: " << e.what();
      return "";
    }
    try {
      if (via != nullptr) {
        via->add(kFlightDumpedKey, 1);
      }
    } catch (const std::exception&) {
    }
    return path.string();
  }

  /// On the heartbeat thread: dumps once a peer has asked.
  void dump_flight_if_asked() {
    if (!records_flight() || flight_dumped.load() ||
        heartbeat_store->add(kFlightRequestsKey, 0) <= flight_requests_before) {
      return;
    }
    flight_dumped = true;
    const std::string asked =
        from_bytes(heartbeat_store->get(kFlightReasonKey));
    dump_flight("asked by " + asked, heartbeat_store.get());
  }

  /// An operation of this rank failed (`what`): dumps this rank's flight
  /// recorder, asks every other rank to dump theirs and waits a little for
  /// them. Returns the sentence naming the file for the error, or "".
  std::string flight_failure(const std::string& what) {
    if (!records_flight()) {
      return "";
    }
    flight_dumped = true;
    const std::string path = dump_flight(what, nullptr);
    if (path.empty()) {
      return "";
    }
    // Count this file, ask the others for theirs and wait a little for
    // them (before this rank exits and, when it hosts the store, takes it
    // along): on a thread of its own, bounded, since a store this rank can
    // no longer reach blocks every call for the rendezvous timeout.
    const Millis wait =
        std::max<Millis>(Millis(2000), 4 * options.heartbeat_interval);
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> asked = done->get_future();
    std::thread([store = store,
                 reason = "rank " + std::to_string(env.rank) + ": " + what,
                 world = env.world_size,
                 wait,
                 done] {
      try {
        const int64_t dumped_before = store->add(kFlightDumpedKey, 0);
        store->add(kFlightDumpedKey, 1);
        store->set(kFlightReasonKey, to_bytes(reason));
        store->add(kFlightRequestsKey, 1);
        const auto deadline = std::chrono::steady_clock::now() + wait;
        while (store->add(kFlightDumpedKey, 0) < dumped_before + world &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(Millis(50));
        }
      } catch (const std::exception&) {
      }
      done->set_value();
    }).detach();
    asked.wait_for(wait + kStoreAnswerWait);
    return "; flight recorder: " + path +
           " (every rank writes rank<N>.json there)";
  }
};

/// core->diagnose(), or what an unanswering store means after a bounded
/// wait.
std::string diagnose_within(const std::shared_ptr<Core>& core);

struct Runtime::State {
  std::shared_ptr<Core> core;
  /// Made by the first Gloo group.
  std::shared_ptr<::gloo::transport::Device> gloo_device;
  std::shared_ptr<ProcessGroup> world;
  std::set<std::string> group_names;

  const std::shared_ptr<::gloo::transport::Device>& gloo() {
    if (!gloo_device) {
      const LaunchEnv& env = core->env;
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (!env.store_file.empty()) {
        // baton --nproc: every rank is on this machine, and its pair
        // sockets listen on loopback only, whatever the environment says.
        if (ifname != nullptr && env.rank == 0) {
          LOG(INFO) << "dist: GLOO_SOCKET_IFNAME=" << ifname
                    << " is not used by a --nproc job: its ranks talk over "
                       "loopback (127.0.0.1)";
        }
        gloo_device =
            c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
      } else if (ifname != nullptr) {
        LOG(INFO) << "dist: Gloo talks over interface " << ifname
                  << " (GLOO_SOCKET_IFNAME)";
        gloo_device = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
      } else if (env.world_size == env.local_world_size) {
        // Every rank on this machine: loopback needs no name resolution.
        gloo_device =
            c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
      } else {
        gloo_device = c10d::ProcessGroupGloo::createDefaultDevice();
      }
    }
    return gloo_device;
  }
};

namespace {
std::mutex current_mutex;
std::weak_ptr<Runtime> current_runtime;
}  // namespace

// ----------------------------------------------------------- ProcessGroup

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

struct Work::Impl {
  std::string what;
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> then;
  std::shared_ptr<Core> runtime;
  /// The group's own timeout (0: the runtime's current one).
  Millis timeout{0};
  uint64_t flight_id = 0;
  bool done = false;
};

Work::Work() = default;
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

void Work::wait() {
  if (!impl_ || impl_->done) {
    return;
  }
  if (impl_->work) {
    const Millis timeout =
        impl_->timeout.count() > 0 ? impl_->timeout : impl_->runtime->timeout();
    std::string error;
    try {
      impl_->work->wait(timeout);
    } catch (const std::exception& e) {
      error = error_text(e);
    }
    if (!error.empty()) {
      impl_->done = true;
      FlightRecorder::process().finish(impl_->flight_id, FlightState::kFailed);
      const std::string what = impl_->what + " failed (timeout " +
                               seconds_text(timeout) + "): " + error;
      throw CommError(
          "[dist] " + what + "; " + diagnose_within(impl_->runtime) +
          impl_->runtime->flight_failure(what));
    }
    FlightRecorder::process().finish(impl_->flight_id, FlightState::kCompleted);
  }
  impl_->done = true;
  if (impl_->then) {
    impl_->then();
  }
}

bool Work::completed() const {
  return !impl_ || impl_->done || !impl_->work || impl_->work->isCompleted();
}

Work ProcessGroup::Impl::make_work(
    const std::string& op, Started started, std::function<void()> then) const {
  auto impl = std::make_unique<Work::Impl>();
  impl->what = describe(op);
  impl->work = std::move(started.work);
  impl->flight_id = started.flight_id;
  impl->then = std::move(then);
  impl->runtime = runtime;
  impl->timeout = timeout;
  return Work(std::move(impl));
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::single(
    const std::string& name, int64_t global_rank) {
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->global_ranks = {global_rank};
  return std::make_shared<ProcessGroup>(std::move(impl));
}

int64_t ProcessGroup::rank() const {
  return impl_->rank;
}
int64_t ProcessGroup::size() const {
  return impl_->size();
}
const std::string& ProcessGroup::name() const {
  return impl_->name;
}
const std::vector<int64_t>& ProcessGroup::global_ranks() const {
  return impl_->global_ranks;
}
std::string ProcessGroup::backend() const {
  return impl_->backend;
}

Work ProcessGroup::all_reduce_async(at::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument(
        "[ProcessGroup] all_reduce AVG: a " +
        std::string(c10::toString(tensor.scalar_type())) +
        " tensor; allowed: floating-point tensors (or SUM, MIN, MAX)");
  }
  if (impl_->local()) {
    return Work();
  }
  // bf16 and fp16 are reduced in their own dtype (half the bytes of a
  // float32 copy), on Gloo as on NCCL.
  at::Tensor buffer = tensor;
  const int64_t size = impl_->size();
  std::function<void()> then;
  if (op == ReduceOp::kAvg) {
    then = [buffer, size]() mutable { buffer.div_(static_cast<double>(size)); };
  }
  const uint64_t id = impl_->record("all_reduce", buffer);
  auto work = impl_->start("all_reduce", id, [&] {
    std::vector<at::Tensor> tensors{buffer};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    return impl_->pg->allreduce(tensors, opts);
  });
  return impl_->make_work("all_reduce", std::move(work), std::move(then));
}

void ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}

void ProcessGroup::broadcast(at::Tensor& tensor, int64_t root) {
  if (root < 0 || root >= size()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() + "] broadcast root " + std::to_string(root) +
        " outside a group of " + std::to_string(size()));
  }
  if (impl_->local()) {
    return;
  }
  const uint64_t id = impl_->record("broadcast", tensor);
  auto work = impl_->start("broadcast", id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return impl_->pg->broadcast(tensors, opts);
  });
  impl_->make_work("broadcast", std::move(work)).wait();
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& tensor) {
  std::vector<int64_t> shape{size()};
  for (const auto s : tensor.sizes()) {
    shape.push_back(s);
  }
  at::Tensor out = at::empty(shape, tensor.options());
  if (impl_->local()) {
    out[0].copy_(tensor);
    return out;
  }
  at::Tensor in = tensor.contiguous().view({-1});
  const uint64_t id = impl_->record("all_gather", in);
  auto work = impl_->start("all_gather", id, [&] {
    at::Tensor flat = out.view({-1});
    return impl_->pg->_allgather_base(flat, in);
  });
  impl_->make_work("all_gather", std::move(work)).wait();
  return out;
}

Work ProcessGroup::all_gather_into_async(
    at::Tensor& output, const at::Tensor& input) {
  const int64_t n = input.numel();
  if (output.numel() != n * size() || !output.is_contiguous()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() +
        "] all_gather_into output: " + std::to_string(output.numel()) +
        " elements" + (output.is_contiguous() ? "" : ", not contiguous") +
        "; allowed: contiguous, size (" + std::to_string(size()) +
        ") x input (" + std::to_string(n) + ")");
  }
  const at::Tensor flat_out = output.view({-1});
  if (impl_->local()) {
    flat_out.copy_(input.reshape({-1}));
    return Work();
  }
  at::Tensor in = input.contiguous().view({-1});
  const uint64_t id = impl_->record("all_gather_into", in);
  auto work = impl_->start("all_gather_into", id, [&] {
    at::Tensor out = flat_out;
    return impl_->pg->_allgather_base(out, in);
  });
  return impl_->make_work("all_gather_into", std::move(work), [keep = in] {});
}

void ProcessGroup::reduce_scatter(
    at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

Work ProcessGroup::reduce_scatter_async(
    at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  const int64_t n = output.numel();
  if (input.numel() != n * size()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() + "] reduce_scatter input: " +
        std::to_string(input.numel()) + " elements; allowed: size (" +
        std::to_string(size()) + ") x output (" + std::to_string(n) + ")");
  }
  if (op == ReduceOp::kAvg && !at::isFloatingType(input.scalar_type())) {
    throw std::invalid_argument(
        "[ProcessGroup] reduce_scatter AVG: a " +
        std::string(c10::toString(input.scalar_type())) +
        " tensor; allowed: floating-point tensors (or SUM, MIN, MAX)");
  }
  if (impl_->local()) {
    output.copy_(input.reshape(output.sizes()));
    return Work();
  }
  const int64_t ranks = size();
#ifdef USE_C10D_NCCL
  if (impl_->backend == "nccl") {
    at::Tensor out = output.is_contiguous() ? output : output.contiguous();
    at::Tensor in = input.contiguous().view({-1});
    const uint64_t id = impl_->record("reduce_scatter", in);
    auto work = impl_->start("reduce_scatter", id, [&] {
      at::Tensor flat = out.view({-1});
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = to_c10d(op == ReduceOp::kAvg ? ReduceOp::kSum : op);
      return impl_->pg->_reduce_scatter_base(flat, in, opts);
    });
    return impl_->make_work(
        "reduce_scatter",
        std::move(work),
        [output, out, in, op, ranks]() mutable {
          if (op == ReduceOp::kAvg) {
            out.div_(static_cast<double>(ranks));
          }
          if (out.data_ptr() != output.data_ptr()) {
            output.copy_(out);
          }
        });
  }
#endif
  // Gloo: chunk r of every rank to rank r (all-to-all), then a local
  // reduction of the size() chunks received, in float32 for bf16 and fp16.
  // Not c10d's Gloo reduce-scatter, which is an all-reduce of the whole
  // input and a chunk of it: about twice the bytes a rank sends.
  at::Tensor send = input.contiguous().view({-1});
  at::Tensor received = at::empty_like(send);
  const uint64_t id = impl_->record("reduce_scatter", send);
  auto work = impl_->start("reduce_scatter", id, [&] {
    std::vector<int64_t> equal_splits;
    c10d::AllToAllOptions opts;
    return impl_->pg->alltoall_base(
        received, send, equal_splits, equal_splits, opts);
  });
  return impl_->make_work(
      "reduce_scatter",
      std::move(work),
      [output, send, received, op, ranks, n]() mutable {
        const bool low = received.scalar_type() == at::kBFloat16 ||
                         received.scalar_type() == at::kHalf;
        const at::Tensor chunks =
            (low ? received.to(at::kFloat) : received).view({ranks, n});
        at::Tensor reduced;
        switch (op) {
          case ReduceOp::kSum:
            reduced = chunks.sum(0);
            break;
          case ReduceOp::kAvg:
            reduced = chunks.mean(0);
            break;
          case ReduceOp::kMax:
            reduced = std::get<0>(chunks.max(0));
            break;
          case ReduceOp::kMin:
            reduced = std::get<0>(chunks.min(0));
            break;
        }
        output.copy_(reduced.view(output.sizes()));
      });
}

Work ProcessGroup::isend(const at::Tensor& tensor, int64_t dst, int64_t tag) {
  impl_->check_peer(dst, "send destination");
  TORCH_CHECK(
      tensor.is_contiguous(), "[ProcessGroup] send needs a contiguous tensor");
  const uint64_t id = impl_->record("send", tensor, dst, tag);
  auto work = impl_->start("send to rank " + std::to_string(dst), id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    return impl_->pg->send(
        tensors, static_cast<int>(dst), static_cast<int>(tag));
  });
  // Keep the tensor alive until the send is done.
  return impl_->make_work(
      "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) +
          ")",
      std::move(work),
      [keep = tensor] {});
}

Work ProcessGroup::irecv(at::Tensor& tensor, int64_t src, int64_t tag) {
  impl_->check_peer(src, "receive source");
  TORCH_CHECK(
      tensor.is_contiguous(), "[ProcessGroup] recv needs a contiguous tensor");
  const uint64_t id = impl_->record("recv", tensor, src, tag);
  auto work = impl_->start("recv from rank " + std::to_string(src), id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    return impl_->pg->recv(
        tensors, static_cast<int>(src), static_cast<int>(tag));
  });
  return impl_->make_work(
      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) +
          ")",
      std::move(work));
}

void ProcessGroup::send(const at::Tensor& tensor, int64_t dst, int64_t tag) {
  isend(tensor, dst, tag).wait();
}

void ProcessGroup::recv(at::Tensor& tensor, int64_t src, int64_t tag) {
  irecv(tensor, src, tag).wait();
}

void ProcessGroup::barrier() {
  if (impl_->local()) {
    return;
  }
  const uint64_t id = impl_->record("barrier", at::Tensor());
  auto work = impl_->start("barrier", id, [&] { return impl_->pg->barrier(); });
  impl_->make_work("barrier", std::move(work)).wait();
}

// ---------------------------------------------------------------- Runtime

Runtime::Runtime(std::unique_ptr<State> state) : state_(std::move(state)) {}

Runtime::~Runtime() = default;

namespace {

/// A peer that is gone makes Gloo's next write to it raise SIGPIPE, whose
/// default action ends the process silently (exit status 141) before the
/// failure can be diagnosed and named. Ignored, the write fails with EPIPE
/// and Gloo throws, as under Python (which ignores SIGPIPE). A handler the
/// program installed itself is kept.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

std::shared_ptr<Runtime> Runtime::init(
    const LaunchEnv& env, const RuntimeOptions& options) {
  ignore_sigpipe();
  auto state = std::make_unique<State>();
  state->core = std::make_shared<Core>();
  auto& core = *state->core;
  core.env = env;
  core.options = options;
  core.timeout_ms = options.init_timeout.count();
  FlightRecorder::process().set_capacity(options.flight_recorder_entries);
  if (options.backend != "gloo" && options.backend != "nccl") {
    throw std::invalid_argument("[Runtime] unknown backend " + options.backend);
  }
#ifndef USE_C10D_NCCL
  if (options.backend == "nccl") {
    throw std::invalid_argument(
        "[Runtime] backend nccl needs a libtorch built with CUDA and NCCL; "
        "this one has Gloo only");
  }
#endif
  const std::string where = store_address(env);
  const bool is_server = env.rank == 0 && !env.store_hosted;
  try {
    core.store = with_prefix(
        connect_store(env, is_server, options.init_timeout), env.store_prefix);
    core.heartbeat_store = with_prefix(
        connect_store(env, /*is_server=*/false, options.init_timeout),
        env.store_prefix);
    core.flight_requests_before = core.store->add(kFlightRequestsKey, 0);
  } catch (const std::exception& e) {
    throw CommError(
        "[dist] rendezvous: " + env.to_string() + " could not " +
        (is_server ? "host" : "reach") + " the store at " + where + " within " +
        seconds_text(options.init_timeout) + ": " + error_text(e));
  }
  auto* raw = state.get();
  Core* core_ptr = raw->core.get();
  core.heartbeat = std::thread([core_ptr] { core_ptr->heartbeat_loop(); });
  std::shared_ptr<Runtime> runtime(new Runtime(std::move(state)));
  {
    std::lock_guard<std::mutex> lock(current_mutex);
    current_runtime = runtime;
  }
  std::vector<int64_t> all(env.world_size);
  for (int64_t r = 0; r < env.world_size; ++r) {
    all[r] = r;
  }
  raw->world = runtime->new_group(all, "world");
  return runtime;
}

std::shared_ptr<Runtime> Runtime::current() {
  std::lock_guard<std::mutex> lock(current_mutex);
  return current_runtime.lock();
}

const LaunchEnv& Runtime::env() const {
  return state_->core->env;
}

const std::shared_ptr<ProcessGroup>& Runtime::world() const {
  return state_->world;
}

std::shared_ptr<ProcessGroup> Runtime::new_group(
    const std::vector<int64_t>& ranks,
    const std::string& name,
    const GroupOptions& options) {
  const Core& core = *state_->core;
  const std::string backend =
      options.backend.empty() ? core.options.backend : options.backend;
  if (backend != "gloo" && backend != "nccl") {
    throw std::invalid_argument(
        "[Runtime] group '" + name + "': unknown backend " + backend);
  }
  const Millis create_timeout =
      std::max(core.options.init_timeout, options.timeout);
  const auto me = std::find(ranks.begin(), ranks.end(), core.env.rank);
  if (ranks.empty() || !std::is_sorted(ranks.begin(), ranks.end()) ||
      me == ranks.end() || ranks.front() < 0 ||
      ranks.back() >= core.env.world_size) {
    throw std::invalid_argument(
        "[Runtime] group '" + name +
        "': ranks must be ascending global ranks "
        "that include this one (" +
        std::to_string(core.env.rank) + ")");
  }
  if (!state_->group_names.insert(name).second) {
    throw std::invalid_argument(
        "[Runtime] group '" + name + "' exists already");
  }
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->name = name;
  impl->global_ranks = ranks;
  impl->rank = me - ranks.begin();
  impl->runtime = state_->core;
  impl->timeout = options.timeout;
  impl->p2p.assign(ranks.size(), 0);
  FlightRecorder::process().add_group(name, ranks);
  if (ranks.size() == 1) {
    return std::make_shared<ProcessGroup>(std::move(impl));
  }
  auto store =
      c10::make_intrusive<c10d::PrefixStore>("baton/group/" + name, core.store);
  const int rank = static_cast<int>(impl->rank);
  const int size = static_cast<int>(ranks.size());
  try {
    if (backend == "gloo") {
      // Gloo's own per-operation timeout must not cut ours short.
      auto opts = c10d::ProcessGroupGloo::Options::create(create_timeout);
      opts->devices.push_back(state_->gloo());
      impl->pg =
          c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
      impl->backend = "gloo";
    } else {
#ifdef USE_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = create_timeout;
      impl->pg =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
      impl->backend = "nccl";
#endif
    }
  } catch (const std::exception& e) {
    throw CommError(
        "[dist] creating group '" + name + "' of " + std::to_string(size) +
        " ranks (this is global rank " + std::to_string(core.env.rank) +
        ") failed within " + seconds_text(create_timeout) + ": " +
        error_text(e) + "; " + diagnose_within(state_->core));
  }
  return std::make_shared<ProcessGroup>(std::move(impl));
}

void Runtime::set_timeout(std::chrono::milliseconds timeout) {
  state_->core->timeout_ms = timeout.count();
}

std::chrono::milliseconds Runtime::timeout() const {
  return state_->core->timeout();
}

std::string Runtime::diagnose() {
  return diagnose_within(state_->core);
}

std::string diagnose_within(const std::shared_ptr<Core>& core) {
  // A store this rank can no longer reach (its machine gone, a cut link)
  // blocks each call for the store's own timeout, the rendezvous one:
  // minutes. The diagnosis runs on a thread of its own, which keeps the
  // store alive and is left behind if it does not answer in time.
  const auto wait =
      std::max<Millis>(Millis(2000), 4 * core->options.heartbeat_interval) +
      kStoreAnswerWait;
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> text = result->get_future();
  std::thread([core, result] { result->set_value(core->diagnose()); }).detach();
  if (text.wait_for(wait) == std::future_status::ready) {
    return text.get();
  }
  return "the rendezvous store at " + store_address(core->env) +
         " does not answer within " + seconds_text(wait) + ", so its host (" +
         (core->env.store_hosted ? std::string("the launcher")
                                 : std::string("rank 0")) +
         ") is gone or cannot be reached";
}

std::string Core::diagnose() {
  const int64_t world = env.world_size;
  // Reports are "<order>|<message>"; the lowest order failed first.
  auto failures = [&] {
    std::vector<std::pair<int64_t, std::string>> found;
    for (int64_t r = 0; r < world; ++r) {
      if (r != env.rank && store->check({failure_key(r)})) {
        const std::string v = from_bytes(store->get(failure_key(r)));
        const auto bar = v.find('|');
        found.emplace_back(
            std::atoll(v.substr(0, bar).c_str()),
            "rank " + std::to_string(r) + " failed: " + v.substr(bar + 1));
      }
    }
    std::sort(found.begin(), found.end());
    std::string text;
    for (size_t i = 0; i < found.size(); ++i) {
      text += (i == 0 ? "" : "; then ") + found[i].second;
    }
    return text;
  };
  try {
    if (auto text = failures(); !text.empty()) {
      return text;
    }
    std::vector<int64_t> before(world);
    for (int64_t r = 0; r < world; ++r) {
      before[r] = store->add(heartbeat_key(r), 0);
    }
    const Millis wait =
        std::max<Millis>(Millis(2000), 4 * options.heartbeat_interval);
    std::this_thread::sleep_for(wait);
    if (auto text = failures(); !text.empty()) {
      return text;
    }
    std::vector<std::string> lost;
    std::vector<std::string> absent;
    for (int64_t r = 0; r < world; ++r) {
      if (r != env.rank && store->add(heartbeat_key(r), 0) == before[r]) {
        (before[r] == 0 ? absent : lost).push_back(std::to_string(r));
      }
    }
    auto ranks = [](const std::vector<std::string>& v) {
      return std::string(v.size() == 1 ? "rank " : "ranks ") + join(v, ", ");
    };
    std::vector<std::string> found;
    if (!lost.empty()) {
      found.push_back(
          ranks(lost) + " stopped answering (no heartbeat for " +
          seconds_text(wait) + ": killed, crashed or frozen)");
    }
    if (!absent.empty()) {
      found.push_back(ranks(absent) + " never joined");
    }
    if (!found.empty()) {
      return join(found, "; ");
    }
    return "every rank still sends heartbeats: the operation timed out, or "
           "the ranks disagree on the order of operations";
  } catch (const std::exception& e) {
    return "the rendezvous store at " + store_address(env) +
           " does not answer (" + error_text(e) + "), so its host (" +
           (env.store_hosted ? std::string("the launcher")
                             : std::string("rank 0")) +
           ") is gone";
  }
}

void Runtime::report_failure(const std::string& message) noexcept {
  auto& core = *state_->core;
  bool flight_file = false;
  if (core.records_flight() && !core.flight_dumped.exchange(true)) {
    // A rank that fails on its own (not in an operation) writes its file
    // too: the hang report shows what it did last.
    flight_file = !core.dump_flight(first_line(message), nullptr).empty();
  }
  // Bounded: the store's host may be a machine this rank can no longer
  // reach (a cut link), where a store call blocks far longer than a failing
  // rank may take to exit. The call runs on a thread of its own, which
  // keeps the store alive and is left behind if it does not return in time.
  try {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> reported = done->get_future();
    std::thread([core = state_->core,
                 line = first_line(message),
                 flight_file,
                 done] {
      try {
        auto& store = *core->heartbeat_store;
        if (flight_file) {
          store.add(kFlightDumpedKey, 1);
        }
        const int64_t order = store.add("baton/failure_order", 1);
        store.set(
            failure_key(core->env.rank),
            to_bytes(std::to_string(order) + "|" + line));
      } catch (const std::exception&) {
      }
      done->set_value();
    }).detach();
    if (reported.wait_for(kReportFailureWait) != std::future_status::ready) {
      LOG(WARNING) << "dist: could not tell the other ranks of this failure "
                      "through the store within "
                   << kReportFailureWait.count() << " s; exiting without";
    }
  } catch (const std::exception&) {
  }
}

// ------------------------------------------------------------ StoreServer

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreServer::StoreServer(
    int64_t port, int64_t world_size, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions opts = store_options(true, "127.0.0.1", port);
  opts.waitWorkers = false;
  opts.numWorkers = world_size;
  opts.timeout = timeout;
  impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}

StoreServer::~StoreServer() = default;

int64_t StoreServer::port() const {
  return impl_->store->getPort();
}

}  // namespace baton::dist
