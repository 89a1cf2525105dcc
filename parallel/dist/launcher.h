#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace baton::dist {

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
  /// The ranks' flight-recorder folder (<job.dump_folder>/flight_recorder):
  /// after a failed run the launcher names, from the files written there,
  /// the rank the others waited on and its last action. Empty: none.
  std::string flight_recorder_dir;
};

/// Makes a private (0700) folder for the ranks' rendezvous store (a c10d
/// FileStore: nothing listens on a port), starts `nproc` children with
/// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and BATON_AGENT_STORE
/// (the store's file) set (and OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, see
/// blas_threads_per_rank), and copies their stdout and stderr line by line
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

/// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS that launch_local gives each of
/// `nproc` children when the user has not set them: cores / nproc, at least 1.
int64_t blas_threads_per_rank(int64_t nproc);

}  // namespace baton::dist
