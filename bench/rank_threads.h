#pragma once

// Ranks as threads over real Gloo on loopback, for the benchmarks (the
// tests' tests/parallel/multi_rank.h reports through GoogleTest instead).

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel/dist/process_group.h"

namespace baton::bench {

/// Calls `body(rank, runtime)` on `world` threads, each with its own
/// dist::Runtime over a store this function hosts; rethrows the first
/// rank's error, naming the rank.
inline void run_rank_threads(
    int64_t world, const std::function<void(int64_t, dist::Runtime&)>& body) {
  const auto timeout = std::chrono::seconds(120);
  dist::StoreServer store(0, world, timeout);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::LaunchEnv env;
        env.rank = r;
        env.world_size = world;
        env.local_rank = r;
        env.local_world_size = world;
        env.master_addr = "127.0.0.1";
        env.master_port = store.port();
        env.store_hosted = true;
        env.source = "bench";
        dist::RuntimeOptions options;
        options.init_timeout = timeout;
        body(r, *dist::Runtime::init(env, options));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (int64_t r = 0; r < world; ++r) {
    if (!errors[r].empty()) {
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
    }
  }
}

}  // namespace baton::bench
