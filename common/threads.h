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

/// What the one restart is for; each is read by a library when it loads.
struct LoadTimeSettings {
  /// OMP_WAIT_POLICY is to become PASSIVE (set here).
  bool passive_openmp = false;
};

/// The settings a process with `intra_op_threads` ATen threads starts
/// again for: PASSIVE where several threads share the cores and the user
/// did not set the policy.
LoadTimeSettings load_time_settings(int64_t intra_op_threads);

/// The one restart for what the libraries read when they load: when
/// `settings` asks for anything, sets what it names and replaces this
/// process with a fresh run of the same executable (/proc/self/exe) and
/// arguments. Returns only if nothing asked or the exec failed (a warning
/// says what the restart was for).
void restart_for_load_time_settings(
    char** argv, const LoadTimeSettings& settings);

}  // namespace baton
