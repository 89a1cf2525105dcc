#pragma once

// Runs a function on N ranks, one thread each, over real Gloo on loopback
// (tests/parallel/rank_threads.h), failing the test for a rank that throws.

#include <gtest/gtest.h>

#include "tests/parallel/rank_threads.h"

namespace baton::testing {

/// Calls `body(rank, runtime)` on `world` threads. An exception on a rank
/// fails the test with the rank and its message. `timeout` is the init
/// timeout (and the operations' timeout until set_timeout).
inline void run_ranks(
    int64_t world,
    const std::function<void(int64_t, dist::Runtime&)>& body,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto errors = run_rank_threads(world, body, timeout);
  for (int64_t r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

/// As run_ranks, except that one rank runs on the calling thread without a
/// runtime (`body` gets null): the one-process reference of a layout.
inline void run_ranks_or_one(
    int64_t world, const std::function<void(int64_t, dist::Runtime*)>& body) {
  if (world == 1) {
    body(0, nullptr);
    return;
  }
  run_ranks(world, [&](int64_t rank, dist::Runtime& rt) { body(rank, &rt); });
}

}  // namespace baton::testing
