#pragma once

// Ranks as threads over real Gloo on loopback: a store on a free port, one
// dist::Runtime per thread. Free of GoogleTest, so the benchmarks use it
// too; tests/parallel/multi_rank.h reports its errors through GoogleTest.

#include <chrono>
#include <functional>
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

/// Calls `body(rank, runtime)` on `world` threads and returns each rank's
/// error message ("" for a rank that returned). `timeout` is the init
/// timeout (and the operations' timeout until set_timeout).
inline std::vector<std::string> run_rank_threads(
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
  return errors;
}

}  // namespace baton::testing
