#pragma once

// Runs a function on N ranks, one thread each, over real Gloo on loopback:
// a store on a free port, one dist::Runtime per thread.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parallel/dist/process_group.h"

namespace baton::testing {

inline dist::LaunchEnv rank_env(int64_t rank, int64_t world, int64_t port) {
  dist::LaunchEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.store_hosted = true;
  env.source = "test";
  return env;
}

/// Calls `body(rank, runtime)` on `world` threads. An exception on a rank
/// fails the test with the rank and its message. `timeout` is the init
/// timeout (and the operations' timeout until set_timeout).
inline void run_ranks(
    int64_t world,
    const std::function<void(int64_t, dist::Runtime&)>& body,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  dist::StoreServer store(0, world, timeout);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::RuntimeOptions options;
        options.init_timeout = timeout;
        auto runtime =
            dist::Runtime::init(rank_env(r, world, store.port()), options);
        body(r, *runtime);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (int64_t r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

}  // namespace baton::testing
