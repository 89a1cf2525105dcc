#include "parallel/dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/threads.h"
#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/launch_env.h"

extern char** environ;

namespace baton::dist {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t pending_signal = 0;

void on_signal(int sig) {
  pending_signal = sig;
}

struct Child {
  int64_t rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  // Output pipes (stdout, stderr) and what is left of an unfinished line.
  int fds[2] = {-1, -1};
  std::string partial[2];
};

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" +
           strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/// Writes `text` to fd, whole.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    done += static_cast<size_t>(n);
  }
}

/// Whether a rank's status line (common/logging.h's log_status) is on the
/// terminal now: the next line written replaces it.
bool g_status_on_screen = false;

/// Takes a status line off the terminal before the launcher writes.
void end_status() {
  if (g_status_on_screen) {
    write_all(STDERR_FILENO, "\r\033[K");
    g_status_on_screen = false;
  }
}

/// Copies what is readable on child.fds[k] to our fd 1 or 2, prefixing
/// each line. A line that starts with '\r' is a status line, redrawn in
/// place on a terminal. Returns false at end of file.
bool pump(Child& child, int k, bool flush_partial) {
  char buffer[65536];
  const ssize_t n = ::read(child.fds[k], buffer, sizeof(buffer));
  const bool eof = n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
  const std::string prefix = "[rank" + std::to_string(child.rank) + "]: ";
  std::string& partial = child.partial[k];
  if (n > 0) {
    partial.append(buffer, static_cast<size_t>(n));
  }
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    if (k == 1 && partial[start] == '\r') {
      // Sent only where the launcher's stderr is a terminal.
      out += "\r\033[K" + prefix + partial.substr(start + 1, nl - start - 1);
      g_status_on_screen = true;
      continue;
    }
    if (g_status_on_screen) {
      out += "\r\033[K";
      g_status_on_screen = false;
    }
    out += prefix + partial.substr(start, nl + 1 - start);
  }
  partial.erase(0, start);
  if ((eof || flush_partial) && !partial.empty()) {
    out += prefix + partial + "\n";
    partial.clear();
  }
  if (k == 0) {
    end_status();
  }
  write_all(k == 0 ? STDOUT_FILENO : STDERR_FILENO, out);
  return !eof;
}

}  // namespace

int64_t threads_per_rank(int64_t nproc) {
  return resolve_intra_op_threads(0, nproc);
}

CpuBind parse_cpu_bind(const std::string& flag, const std::string& value) {
  if (value == "none") {
    return CpuBind::kNone;
  }
  if (value == "cores") {
    return CpuBind::kCores;
  }
  throw std::invalid_argument(
      flag + " " + value + ": unknown binding; allowed: none, cores");
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  const auto number = [&](const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos ||
        s.size() > 6) {
      throw std::invalid_argument(
          "cpu list '" + text + "': '" + s + "' is not a CPU number");
    }
    return std::stoi(s);
  };
  while (std::getline(in, part, ',')) {
    while (!part.empty() &&
           std::isspace(static_cast<unsigned char>(part.back()))) {
      part.pop_back();
    }
    const size_t dash = part.find('-');
    const int first = number(part.substr(0, dash));
    const int last =
        dash == std::string::npos ? first : number(part.substr(dash + 1));
    if (last < first) {
      throw std::invalid_argument(
          "cpu list '" + text + "': the range " + part + " runs backwards");
    }
    for (int c = first; c <= last; ++c) {
      cpus.push_back(c);
    }
  }
  return cpus;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::ostringstream out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) {
      ++j;
    }
    out << (i > 0 ? "," : "") << cpus[i];
    if (j > i) {
      out << "-" << cpus[j];
    }
    i = j + 1;
  }
  return out.str();
}

std::vector<std::vector<int>> allowed_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    throw std::runtime_error(
        std::string(
            "[launcher] --cpu-bind: cannot read this process's CPUs: ") +
        std::strerror(errno));
  }
  // Each allowed CPU under the first CPU of its core.
  std::map<int, std::vector<int>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) {
      continue;
    }
    int first = cpu;
    std::ifstream siblings(
        "/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
        "/topology/thread_siblings_list");
    std::string line;
    if (siblings && std::getline(siblings, line)) {
      try {
        const auto list = parse_cpu_list(line);
        if (!list.empty()) {
          first = *std::min_element(list.begin(), list.end());
        }
      } catch (const std::invalid_argument&) {
      }
    }
    cores[first].push_back(cpu);
  }
  std::vector<std::vector<int>> out;
  for (auto& [first, cpus] : cores) {
    out.push_back(std::move(cpus));
  }
  return out;
}

std::vector<std::vector<int>> cores_per_rank(
    int64_t nproc, const std::vector<std::vector<int>>& cores) {
  if (cores.empty()) {
    throw std::invalid_argument("[launcher] --cpu-bind: no cores to bind to");
  }
  const int64_t n = static_cast<int64_t>(cores.size());
  std::vector<std::vector<int>> out(nproc);
  if (nproc > n) {
    for (int64_t r = 0; r < nproc; ++r) {
      out[r] = cores[r % n];
    }
    return out;
  }
  int64_t next = 0;
  for (int64_t r = 0; r < nproc; ++r) {
    const int64_t take = n / nproc + (r < n % nproc ? 1 : 0);
    for (int64_t k = 0; k < take; ++k, ++next) {
      out[r].insert(out[r].end(), cores[next].begin(), cores[next].end());
    }
  }
  return out;
}

namespace {

std::vector<std::string> child_environment(
    int64_t rank,
    int64_t nproc,
    const std::string& store_file,
    int64_t attempt,
    int64_t threads) {
  std::vector<std::string> env;
  std::vector<std::string> ours = {
      "RANK",
      "LOCAL_RANK",
      "WORLD_SIZE",
      "LOCAL_WORLD_SIZE",
      "MASTER_ADDR",
      "MASTER_PORT",
      "GROUP_RANK",
      kBatonAgentStoreEnv,
      kBatonRestartCountEnv,
      "TORCHELASTIC_USE_AGENT_STORE",
      kLauncherConsoleEnv};
  if (openmp_wait_policy_unset()) {
    ours.push_back(kOmpWaitPolicyVar);  // an empty one is replaced below
  }
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (std::find(ours.begin(), ours.end(), key) == ours.end()) {
      env.push_back(kv);
    }
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(nproc));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
  env.push_back("GROUP_RANK=0");
  // The ranks' console: the launcher prefixes their lines and redraws
  // their status lines where its stderr is a terminal.
  env.push_back(
      std::string(kLauncherConsoleEnv) + "=" +
      (::isatty(STDERR_FILENO) == 1 ? "tty" : "pipe"));
  // No MASTER_ADDR / MASTER_PORT: the ranks meet in a file only this user
  // can reach, not at a port anyone on the network could.
  env.push_back(std::string(kBatonAgentStoreEnv) + "=" + store_file);
  env.push_back(
      std::string(kBatonRestartCountEnv) + "=" + std::to_string(attempt));
  // OpenMP pools (ATen's, and MKL's products on them) sized for one
  // process would oversubscribe the cores N times over (measured with
  // OpenBLAS's pool: DP 2 on 2 cores went from 2011 to 3512 tokens/s with
  // one thread per rank); as torchrun does, give each rank its share (a
  // bound rank: its CPUs) unless the user chose.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  }
  // So that a rank with several intra-op threads need not restart itself
  // to get them (common/threads.h).
  if (openmp_wait_policy_unset()) {
    env.push_back(std::string(kOmpWaitPolicyVar) + "=" + kBatonOmpWaitPolicy);
  }
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (auto& s : strings) {
    p.push_back(s.data());
  }
  p.push_back(nullptr);
  return p;
}

void spawn(
    Child& child,
    const std::string& program,
    std::vector<std::string> argv,
    std::vector<std::string> env,
    const std::vector<int>& cpus) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(
        std::string("[launcher] --nproc: cannot create a pipe: ") +
        std::strerror(errno));
  }
  // Everything exec needs is built before fork: a forked child of a
  // threaded process may only call async-signal-safe functions.
  auto argv_p = pointers(argv);
  auto env_p = pointers(env);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (const int cpu : cpus) {
    CPU_SET(cpu, &mask);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw std::runtime_error(
        std::string("[launcher] --nproc: fork failed: ") +
        std::strerror(errno));
  }
  if (pid == 0) {
    // Its own process group, so that signals reach whatever it starts;
    // and die with the launcher, whatever kills it.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) {
      ::_exit(1);
    }
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    // Bound before exec, so that every thread the rank starts inherits it.
    if (!cpus.empty() && ::sched_setaffinity(0, sizeof(mask), &mask) != 0) {
      const char msg[] = "error: --cpu-bind: cannot bind a rank to its CPUs\n";
      (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::execve(program.c_str(), argv_p.data(), env_p.data());
    const char msg[] = "error: --nproc: cannot execute the baton binary\n";
    (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first wins the race
  ::close(out[1]);
  ::close(err[1]);
  // Our ends never block: the loop polls them.
  ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, ::fcntl(err[0], F_GETFL) | O_NONBLOCK);
  child.pid = pid;
  child.running = true;
  child.fds[0] = out[0];
  child.fds[1] = err[0];
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (c.running) {
      ::kill(-c.pid, sig);
    }
  }
}

/// How the ranks are doing, as the launcher's loop watches them.
struct Supervision {
  int64_t running = 0;
  /// The rank that failed first (-1: none yet), and when.
  int64_t first_failed = -1;
  Clock::time_point failed_at;
  bool termed = false;
  bool killed = false;
  /// A rank stopped at a step boundary after a preemption signal: not a
  /// failure, and the others, stopping at the same step, are left to save.
  bool preempted = false;
};

/// Copies what the ranks wrote to our stdout / stderr, waiting up to 100 ms
/// for output. Returns false once every rank has exited and its pipes are
/// drained: a stray grandchild holding a pipe open must not keep us.
bool copy_output(std::vector<Child>& children, const Supervision& s) {
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, int>> owners;
  for (size_t i = 0; i < children.size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      if (children[i].fds[k] >= 0) {
        fds.push_back({children[i].fds[k], POLLIN, 0});
        owners.emplace_back(i, k);
      }
    }
  }
  const bool draining = s.running == 0;
  if (fds.empty() && draining) {
    return false;
  }
  int ready = 0;
  if (!fds.empty()) {
    ready = ::poll(fds.data(), fds.size(), draining ? 0 : 100);
  } else {
    ::usleep(100 * 1000);
  }
  for (size_t j = 0; j < fds.size(); ++j) {
    if ((fds[j].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      auto& [i, k] = owners[j];
      if (!pump(children[i], k, false)) {
        ::close(children[i].fds[k]);
        children[i].fds[k] = -1;
      }
    }
  }
  if (draining && ready <= 0) {
    for (auto& c : children) {
      for (int k = 0; k < 2; ++k) {
        if (c.fds[k] >= 0) {
          pump(c, k, /*flush_partial=*/true);
          ::close(c.fds[k]);
          c.fds[k] = -1;
        }
      }
    }
    return false;
  }
  return true;
}

/// Collects the ranks that exited; the first to fail starts the grace
/// period of the others.
void reap(
    std::vector<Child>& children,
    Supervision& s,
    const LocalLaunchOptions& options) {
  for (auto& c : children) {
    if (!c.running) {
      continue;
    }
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) {
      continue;
    }
    c.running = false;
    c.status = status;
    --s.running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool preempted =
        WIFEXITED(status) && WEXITSTATUS(status) == kPreemptedExitCode;
    s.preempted = s.preempted || preempted;
    if (ok || preempted || s.first_failed >= 0) {
      continue;
    }
    s.first_failed = c.rank;
    s.failed_at = Clock::now();
    end_status();
    std::cerr << "baton: rank " << c.rank << " " << describe_status(status);
    if (s.running > 0) {
      std::cerr << "; the other ranks get " << options.grace.count() / 1000
                << " s to stop on their own";
    }
    std::cerr << std::endl;
  }
}

/// After a failure and the grace period: SIGTERM to the ranks still
/// running, SIGKILL 5 s later.
void stop_stragglers(
    std::vector<Child>& children,
    Supervision& s,
    const LocalLaunchOptions& options) {
  if (s.first_failed < 0 || s.running == 0) {
    return;
  }
  const auto since = Clock::now() - s.failed_at;
  if (!s.termed && since > options.grace) {
    end_status();
    std::cerr << "baton: stopping the " << s.running
              << " rank(s) still running (SIGTERM)" << std::endl;
    signal_all(children, SIGTERM);
    s.termed = true;
  } else if (!s.killed && since > options.grace + std::chrono::seconds(5)) {
    signal_all(children, SIGKILL);
    s.killed = true;
  }
}

}  // namespace

namespace {

/// How one attempt of the job ended.
struct Attempt {
  /// As launch_local returns it.
  int code = 0;
  /// The rank that failed first (-1: none) and how.
  int64_t failed_rank = -1;
  std::string failure;
  /// A signal reached the launcher (and was forwarded) meanwhile.
  bool signalled = false;
};

/// How the job ended, for the launcher's last line: "finished: ...",
/// "stopped ...", "failed: rank 1 exited with code 1 (exit code 1)".
std::string job_end(const Attempt& last, int64_t nproc) {
  if (last.code == 0) {
    return "finished: all " + std::to_string(nproc) + " ranks exited 0";
  }
  if (last.code == kPreemptedExitCode) {
    return "stopped at a step boundary by SIGTERM or SIGUSR1 (exit code " +
           std::to_string(kPreemptedExitCode) +
           "): the same command resumes it";
  }
  if (last.failed_rank >= 0) {
    return "failed: rank " + std::to_string(last.failed_rank) + " " +
           last.failure + (last.signalled ? " after a signal" : "") +
           " (exit code " + std::to_string(last.code) + ")";
  }
  return "ended with exit code " + std::to_string(last.code) +
         (last.signalled ? " after a signal" : "");
}

/// After a failed attempt: the rank the others waited on and its last
/// action, from the ranks' flight-recorder files written since `since`.
void report_hang(
    const LocalLaunchOptions& options, std::filesystem::file_time_type since) {
  if (options.flight_recorder_dir.empty()) {
    return;
  }
  const std::string report =
      hang_report(options.flight_recorder_dir, options.nproc, since);
  if (!report.empty()) {
    end_status();
    std::cerr << "baton: " << report << std::endl;
  }
}

/// Starts every rank in a fresh rendezvous and supervises them to the end.
Attempt run_attempt(
    const LocalLaunchOptions& options,
    const std::string& program,
    int64_t attempt,
    const std::vector<std::vector<int>>& bound) {
  const RendezvousFolder rendezvous;
  // Flight-recorder files older than this attempt are not its own.
  const auto started = std::filesystem::file_time_type::clock::now();
  std::vector<Child> children(options.nproc);
  for (int64_t r = 0; r < options.nproc; ++r) {
    std::vector<std::string> argv{"baton"};
    argv.insert(argv.end(), options.args.begin(), options.args.end());
    children[r].rank = r;
    const std::vector<int> cpus = bound.empty() ? std::vector<int>() : bound[r];
    spawn(
        children[r],
        program,
        argv,
        child_environment(
            r,
            options.nproc,
            rendezvous.store_file(),
            attempt,
            cpus.empty() ? threads_per_rank(options.nproc)
                         : static_cast<int64_t>(cpus.size())),
        cpus);
  }
  Attempt result;
  Supervision s;
  s.running = options.nproc;
  while (true) {
    if (pending_signal != 0) {
      const int sig = pending_signal;
      pending_signal = 0;
      result.signalled = true;
      signal_all(children, sig);
    }
    if (!copy_output(children, s)) {
      break;
    }
    reap(children, s, options);
    stop_stragglers(children, s, options);
  }
  if (s.first_failed >= 0) {
    result.failed_rank = s.first_failed;
    result.failure = describe_status(children[s.first_failed].status);
    result.code = exit_code(children[s.first_failed].status);
    report_hang(options, started);
  } else {
    result.code = s.preempted ? kPreemptedExitCode : 0;
  }
  return result;
}

}  // namespace

RendezvousFolder::RendezvousFolder() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
      "/baton-rendezvous-XXXXXX";
  if (::mkdtemp(path.data()) == nullptr) {
    throw std::runtime_error(
        "[launcher] cannot create the rendezvous folder " + path + ": " +
        std::strerror(errno) + "; set TMPDIR to a writable folder");
  }
  folder_ = path;
}

RendezvousFolder::~RendezvousFolder() {
  std::error_code ec;
  std::filesystem::remove_all(folder_, ec);
}

std::string RendezvousFolder::store_file() const {
  return (std::filesystem::path(folder_) / "store").string();
}

int launch_local(const LocalLaunchOptions& options) {
  if (options.nproc < 1) {
    throw std::invalid_argument(
        "[launcher] --nproc: " + std::to_string(options.nproc) +
        "; allowed: an integer >= 1");
  }
  const std::string program =
      options.program.empty() ? "/proc/self/exe" : options.program;

  // Before the handlers are installed: a failure here leaves none behind.
  std::vector<std::vector<int>> bound;
  if (options.cpu_bind == CpuBind::kCores) {
    const auto cores = allowed_cores();
    bound = cores_per_rank(options.nproc, cores);
    std::cerr << "baton: --cpu-bind cores:";
    for (int64_t r = 0; r < options.nproc; ++r) {
      std::cerr << (r > 0 ? "," : "") << " rank " << r << " on CPU(s) "
                << format_cpu_list(bound[r]);
    }
    if (options.nproc > static_cast<int64_t>(cores.size())) {
      std::cerr << " (" << options.nproc << " ranks on " << cores.size()
                << " cores: some share one)";
    }
    std::cerr << std::endl;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  struct sigaction old_usr1 {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);

  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    std::cerr << "baton: " << options.nproc << " ranks: OMP_NUM_THREADS "
              << "defaults to ";
    if (bound.empty()) {
      std::cerr << threads_per_rank(options.nproc)
                << " per rank (cores / ranks)";
    } else {
      std::cerr << "each rank's CPUs";
    }
    std::cerr << "; set them to choose" << std::endl;
  }
  Attempt last;
  for (int64_t attempt = 0;; ++attempt) {
    last = run_attempt(options, program, attempt, bound);
    // A stop the user (or the scheduler) asked for is not restarted.
    if (last.failed_rank < 0 || last.signalled ||
        attempt >= options.max_restarts) {
      break;
    }
    end_status();
    std::cerr << "baton: restart " << attempt + 1 << " of "
              << options.max_restarts << ": rank " << last.failed_rank << " "
              << last.failure << "; every rank starts again"
              << (options.resume_note ? ", " + options.resume_note() : "")
              << std::endl;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  end_status();
  std::cerr << "baton: the job " << job_end(last, options.nproc)
            << (options.outputs_note ? "; " + options.outputs_note() : "")
            << std::endl;
  return last.code;
}

}  // namespace baton::dist
