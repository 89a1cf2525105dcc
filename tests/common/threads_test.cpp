// Intra-op threads: the count Baton resolves, and that at::parallel_for in
// code built here really runs on several threads. It is a header template,
// so a target built without OpenMP gets its serial fallback without a
// warning (CMakeLists.txt); Baton's own kernels were serial that way.

#include "common/threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace baton {
namespace {

TEST(Threads, ResolvesTheConfiguredCountOrSharesTheCores) {
  EXPECT_EQ(resolve_intra_op_threads(3, 1), 3);
  EXPECT_EQ(resolve_intra_op_threads(3, 8), 3);
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  EXPECT_EQ(resolve_intra_op_threads(0, 1), cores);
  EXPECT_EQ(resolve_intra_op_threads(0, cores * 2), 1);
  EXPECT_EQ(resolve_intra_op_threads(0, 0), cores);
}

TEST(Threads, ParallelForInBatonCodeUsesSeveralThreads) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  at::parallel_for(0, 8, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  at::set_num_threads(before);
  EXPECT_EQ(seen.size(), 2u)
      << "at::parallel_for ran serially: is the target built with OpenMP?";
}

TEST(Threads, WaitPolicyUnsetIsEmptyOrMissing) {
  const char* before = std::getenv(kOmpWaitPolicyVar);
  const std::string saved = before == nullptr ? "" : before;
  ::unsetenv(kOmpWaitPolicyVar);
  EXPECT_TRUE(openmp_wait_policy_unset());
  ::setenv(kOmpWaitPolicyVar, "", 1);
  EXPECT_TRUE(openmp_wait_policy_unset());
  ::setenv(kOmpWaitPolicyVar, "ACTIVE", 1);
  EXPECT_FALSE(openmp_wait_policy_unset());
  if (before == nullptr) {
    ::unsetenv(kOmpWaitPolicyVar);
  } else {
    ::setenv(kOmpWaitPolicyVar, saved.c_str(), 1);
  }
}

TEST(Threads, RestartsForTheWaitsOnlyWhereThreadsShareTheCores) {
  // The user's settings, unset here and restored after.
  const char* policy = std::getenv(kOmpWaitPolicyVar);
  const char* timeout = std::getenv(kBlasThreadTimeoutVar);
  const std::string saved_policy = policy == nullptr ? "" : policy;
  const std::string saved_timeout = timeout == nullptr ? "" : timeout;
  const bool had_policy = policy != nullptr;
  const bool had_timeout = timeout != nullptr;
  ::unsetenv(kOmpWaitPolicyVar);
  ::unsetenv(kBlasThreadTimeoutVar);
  EXPECT_TRUE(blas_thread_timeout_unset());

  // Two ATen threads beside two of OpenBLAS's: both.
  LoadTimeSettings s = load_time_settings(false, 2, 2);
  EXPECT_FALSE(s.kernels);
  EXPECT_TRUE(s.passive_openmp);
  EXPECT_TRUE(s.blas_thread_timeout);
  // One ATen thread: nothing spins beside it; the kernels as given.
  s = load_time_settings(true, 1, 2);
  EXPECT_TRUE(s.kernels);
  EXPECT_FALSE(s.passive_openmp);
  EXPECT_FALSE(s.blas_thread_timeout);
  // OpenBLAS on one thread (a rank's share), or not OpenBLAS (0): no
  // idle BLAS thread.
  EXPECT_FALSE(load_time_settings(false, 2, 1).blas_thread_timeout);
  EXPECT_FALSE(load_time_settings(false, 2, 0).blas_thread_timeout);
  EXPECT_TRUE(load_time_settings(false, 2, 0).passive_openmp);
  // The user's values stand.
  ::setenv(kBlasThreadTimeoutVar, "20", 1);
  ::setenv(kOmpWaitPolicyVar, "ACTIVE", 1);
  s = load_time_settings(false, 2, 2);
  EXPECT_FALSE(s.passive_openmp);
  EXPECT_FALSE(s.blas_thread_timeout);
  // Nothing asked: no restart, the process goes on.
  restart_for_load_time_settings(nullptr, LoadTimeSettings{});

  if (had_policy) {
    ::setenv(kOmpWaitPolicyVar, saved_policy.c_str(), 1);
  } else {
    ::unsetenv(kOmpWaitPolicyVar);
  }
  if (had_timeout) {
    ::setenv(kBlasThreadTimeoutVar, saved_timeout.c_str(), 1);
  } else {
    ::unsetenv(kBlasThreadTimeoutVar);
  }
}

}  // namespace
}  // namespace baton
