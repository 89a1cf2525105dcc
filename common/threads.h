#pragma once

#include <cstdint>
#include <string>

namespace baton {

/// Intra-op threads for `training.num_threads`: the configured count, or with
/// 0 the cores shared among the ranks on this machine (at least one).
int64_t resolve_intra_op_threads(int64_t configured, int64_t local_ranks);

/// The OpenMP wait policy Baton runs under unless the user chose one.
///
/// libtorch runs its intra-op threads on libgomp, whose idle threads, with
/// OMP_WAIT_POLICY unset, spin for 300,000 rounds after every parallel
/// region. libtorch's BLAS here (OpenBLAS) runs its own pthreads, so the
/// spinning takes the cores the matrix products need: one step of the debug
/// model with 2 ATen threads on 2 cores took 1,376 ms unset against 675 ms
/// with PASSIVE (bench/notes.md). libgomp reads the variable once, when it is
/// loaded, before main runs; setting it afterwards does nothing, so the
/// process has to start again with it.
inline constexpr const char* kOmpWaitPolicyVar = "OMP_WAIT_POLICY";
inline constexpr const char* kBatonOmpWaitPolicy = "PASSIVE";

/// True when OMP_WAIT_POLICY is unset, so libgomp spins (see above).
bool openmp_wait_policy_unset();

/// How long OpenBLAS's idle threads spin before they sleep, unless the user
/// chose.
///
/// After each product OpenBLAS's worker threads wait for the next one
/// calling sched_yield in a loop for 2^N cycles, N from
/// OPENBLAS_THREAD_TIMEOUT (4..30, read when the library loads; unset 28,
/// about 0.1 s at 2-3 GHz). The work between products (attention, norms,
/// the optimizer) then runs on ATen's intra-op threads on the same cores as
/// a spinning worker. With 2^12 cycles (a few microseconds: back-to-back
/// products still find the worker awake) the small flavor's step with 2
/// ATen threads on an AMD EPYC Zen 5 took 1,107-1,196 ms against
/// 1,208-1,441 ms unset, the debug model's 308-360 against 362-406
/// (bench/notes.md).
inline constexpr const char* kBlasThreadTimeoutVar = "OPENBLAS_THREAD_TIMEOUT";
inline constexpr const char* kBatonBlasThreadTimeout = "12";

/// True when OPENBLAS_THREAD_TIMEOUT is unset (see above).
bool blas_thread_timeout_unset();

/// What the one restart is for; each is read by a library when it loads.
struct LoadTimeSettings {
  /// OpenBLAS's kernels are to change (OPENBLAS_CORETYPE, common/blas.h,
  /// already set in the environment).
  bool kernels = false;
  /// OMP_WAIT_POLICY is to become PASSIVE (set here).
  bool passive_openmp = false;
  /// OPENBLAS_THREAD_TIMEOUT is to become kBatonBlasThreadTimeout (set
  /// here).
  bool blas_thread_timeout = false;
};

/// The settings a process with `intra_op_threads` ATen threads beside
/// OpenBLAS's own (common/blas.h: blas_threads) starts again for: PASSIVE
/// and the short OpenBLAS timeout where several threads share the cores
/// with OpenBLAS's and the user set neither; `kernels` as given.
LoadTimeSettings load_time_settings(
    bool kernels, int64_t intra_op_threads, int blas_threads);

/// The one restart for what the libraries read when they load: when
/// `settings` asks for anything, sets what it names and replaces this
/// process with a fresh run of the same executable (/proc/self/exe) and
/// arguments. Returns only if nothing asked or the exec failed (a warning
/// says what the restart was for).
void restart_for_load_time_settings(
    char** argv, const LoadTimeSettings& settings);

}  // namespace baton
