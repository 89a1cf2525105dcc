#pragma once

// Builds a config on several ranks at once, one thread each over a store
// this hosts (real Gloo over loopback), as `baton train --nproc` would.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "builders/builder_registry.h"
#include "parallel/dist/process_group.h"
#include "tests/parallel/rank_threads.h"

namespace baton::testing {

/// Runs `body(rank, builder)` on each of `world` ranks with that rank's
/// builder for `config`, and expects no rank to throw.
inline void on_each_rank(
    const JobConfig& config,
    int64_t world,
    const std::function<void(int64_t, TrainerBuilder&)>& body) {
  const dist::RendezvousFolder store;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto builder = make_trainer_builder(config);
        builder->use_launch_env(rank_env(r, world, store));
        body(r, *builder);
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
