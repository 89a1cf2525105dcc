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
  // The user's setting, unset here and restored after.
  const char* policy = std::getenv(kOmpWaitPolicyVar);
  const std::string saved_policy = policy == nullptr ? "" : policy;
  const bool had_policy = policy != nullptr;
  ::unsetenv(kOmpWaitPolicyVar);

  // Two ATen threads: PASSIVE. One: nothing spins beside it.
  EXPECT_TRUE(load_time_settings(2).passive_openmp);
  EXPECT_FALSE(load_time_settings(1).passive_openmp);
  // The user's value stands.
  ::setenv(kOmpWaitPolicyVar, "ACTIVE", 1);
  EXPECT_FALSE(load_time_settings(2).passive_openmp);
  // Nothing asked: no restart, the process goes on.
  restart_for_load_time_settings(nullptr, LoadTimeSettings{});

  if (had_policy) {
    ::setenv(kOmpWaitPolicyVar, saved_policy.c_str(), 1);
  } else {
    ::unsetenv(kOmpWaitPolicyVar);
  }
}

}  // namespace
}  // namespace baton
