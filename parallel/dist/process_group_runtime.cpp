// The dist facade's runtime: the rendezvous store, the heartbeats, the
// groups it creates, the diagnosis of a failed operation (who failed first,
// who stopped answering), the flight-recorder dumps a failure asks every
// rank for, and the store server of `baton --nproc`
// (process_group_detail.h).

#include "parallel/dist/process_group.h"

#include "parallel/dist/process_group_detail.h"

#include <glog/logging.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "common/logging.h"
#include "common/text.h"
#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/listen_socket.h"

namespace baton::dist {

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

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

namespace {

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

std::string store_address(const LaunchEnv& env) {
  return env.store_file.empty()
             ? env.master_addr + ":" + std::to_string(env.master_port)
             : env.store_file;
}

/// How long a failing rank tries to tell the others before it exits.
constexpr std::chrono::seconds kReportFailureWait{2};
/// How long a diagnosis waits for the store beyond its heartbeat wait.
constexpr std::chrono::seconds kStoreAnswerWait{5};

Core::~Core() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  stop_cv.notify_all();
  if (heartbeat.joinable()) {
    heartbeat.join();
  }
}

void Core::heartbeat_loop() {
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

std::string Core::dump_flight(const std::string& reason, c10d::Store* via) {
  const auto path = flight_recorder_file(options.flight_recorder_dir, env.rank);
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

void Core::dump_flight_if_asked() {
  if (!records_flight() || flight_dumped.load() ||
      heartbeat_store->add(kFlightRequestsKey, 0) <= flight_requests_before) {
    return;
  }
  flight_dumped = true;
  const std::string asked = from_bytes(heartbeat_store->get(kFlightReasonKey));
  dump_flight("asked by " + asked, heartbeat_store.get());
}

std::string Core::flight_failure(const std::string& what) {
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
  set_log_rank(env.rank, env.world_size);
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
      // Gloo's connectFullMesh can return on one member while another still
      // reads its handshake; a member that then drops the group (a rank
      // thread that is done) closes the socket under it. A barrier makes
      // the creation end together.
      impl->pg->barrier()->wait();
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
