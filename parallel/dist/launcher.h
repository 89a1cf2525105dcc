#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace baton::dist {

/// Where launch_local's ranks may run.
enum class CpuBind {
  /// Wherever the kernel's scheduler puts them (torchrun's default).
  kNone,
  /// Each on its own share of the launcher's cores (cores_per_rank): a
  /// rank's threads stay on its cores' caches and no two ranks meet on one
  /// core. On a 2-core AMD EPYC Zen 5 (OpenBLAS's Haswell kernels),
  /// data-parallel runs took 15 % less time and varied less from run to run;
  /// pipelines ran about as fast as unbound (bench/notes.md).
  kCores,
};

/// "none" or "cores" as CpuBind; anything else throws std::invalid_argument
/// naming `flag` and the allowed values.
CpuBind parse_cpu_bind(const std::string& flag, const std::string& value);

/// How `baton train --nproc N` starts its local ranks.
struct LocalLaunchOptions {
  /// Ranks to start.
  int64_t nproc = 1;
  /// The children's arguments after the program name (`--nproc` removed).
  std::vector<std::string> args;
  /// The executable; empty: this process's own (/proc/self/exe).
  std::string program;
  /// After the first rank fails, how long the others get to notice and exit
  /// with their own message before they are sent SIGTERM (and SIGKILL 5 s
  /// later).
  std::chrono::milliseconds grace{std::chrono::seconds(10)};
  /// After a rank fails, every rank is started again, at most this often.
  int64_t max_restarts = 0;
  /// Before each restart: what the ranks will resume from, for the log.
  std::function<std::string()> resume_note;
  /// At the end: where the job's outputs are (metrics, TensorBoard files,
  /// checkpoints), for the last line, which says how the job ended.
  std::function<std::string()> outputs_note;
  /// The ranks' flight-recorder folder (<job.dump_folder>/flight_recorder):
  /// after a failed run the launcher names, from the files written there,
  /// the rank the others waited on and its last action. Empty: none.
  std::string flight_recorder_dir;
  /// kCores: rank r is started bound to cores_per_rank(nproc,
  /// allowed_cores())[r], with OMP_NUM_THREADS (when unset) the number of
  /// its CPUs.
  CpuBind cpu_bind = CpuBind::kNone;
};

/// A private folder (mode 0700, under TMPDIR or /tmp) for a c10d
/// FileStore that ranks on one machine meet in: c10d's stores have no
/// authentication, and nothing need listen on a port. Removed with it.
/// launch_local's ranks meet in one, and so do the tests' rank threads.
class RendezvousFolder {
 public:
  RendezvousFolder();
  ~RendezvousFolder();
  RendezvousFolder(const RendezvousFolder&) = delete;
  RendezvousFolder& operator=(const RendezvousFolder&) = delete;
  /// The store's file, inside the folder.
  std::string store_file() const;

 private:
  std::string folder_;
};

/// Makes a private (0700) folder for the ranks' rendezvous store (a c10d
/// FileStore: nothing listens on a port), starts `nproc` children with
/// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and BATON_AGENT_STORE
/// (the store's file) set (and OMP_NUM_THREADS, see threads_per_rank),
/// each bound to its cores under CpuBind::kCores
/// (the binding logged first), and copies their stdout and stderr line by line
/// with a "[rankN]: " prefix. SIGINT, SIGTERM and SIGUSR1 are forwarded to
/// every child. When a child fails, the others get `grace` to exit, then
/// are stopped. Returns 0 when every rank succeeded, else the exit code of
/// the first rank that failed (128 + signal for a rank killed by a signal);
/// kPreemptedExitCode (common/exit_codes.h) when ranks stopped on a
/// preemption signal and none failed. With max_restarts, a failure (not
/// one after a signal the launcher forwarded) stops every rank and starts
/// them all again, in a fresh rendezvous, with BATON_RESTART_COUNT set to
/// the attempt; each restart is logged with its cause and resume_note().
int launch_local(const LocalLaunchOptions& options);

/// OMP_NUM_THREADS that launch_local gives each of `nproc` children when
/// the user has not set it: cores / nproc, at least 1.
int64_t threads_per_rank(int64_t nproc);

/// The cores this process may run on (its affinity mask, as taskset, a
/// cgroup cpuset or a batch scheduler leave it), each as its logical CPUs
/// in ascending order: hardware threads of one core (Linux's
/// topology/thread_siblings_list) together, the cores ordered by their
/// first CPU. A CPU whose topology cannot be read is a core of its own.
std::vector<std::vector<int>> allowed_cores();

/// The CPUs of each of `nproc` ranks bound to `cores` (as allowed_cores
/// returns them): consecutive runs of whole cores, as even as they divide
/// (the first cores % nproc ranks one more), so that no two ranks share a
/// core; with more ranks than cores, rank r gets core r % cores (and
/// shares it). Throws std::invalid_argument when `cores` is empty.
std::vector<std::vector<int>> cores_per_rank(
    int64_t nproc, const std::vector<std::vector<int>>& cores);

/// "0-3,8,10-11": a CPU list as Linux writes one (sorted, runs joined).
std::string format_cpu_list(std::vector<int> cpus);

/// A Linux CPU list ("0-3,8") as its CPUs; throws std::invalid_argument on
/// anything else.
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace baton::dist
