#pragma once

// Schedule generators: pure functions (pp, stages per rank, microbatches) ->
// compute-only IR per rank, looked up by name in a registry.

#include <cstdint>
#include <functional>
#include <string>

#include "common/registry.h"
#include "parallel/pipeline/action.h"
#include "parallel/pipeline/placement.h"

namespace baton::pipeline {

/// A registered schedule: its generator, its placement and its default
/// number of stages per rank.
struct ScheduleSpec {
  /// (pp, stages_per_rank, microbatches) -> one compute-only action list per
  /// rank. Throws ConfigError for a layout it cannot run.
  std::function<std::vector<ActionList>(int64_t, int64_t, int64_t)> generate;
  /// How its stages map to ranks.
  PlacementStyle placement = PlacementStyle::kLoop;
  /// Stages per rank when the caller passes 0.
  int64_t default_stages_per_rank = 1;
  /// The stages per rank the planner searches it at: from min to max (0:
  /// as many as the model's layers allow).
  int64_t min_stages_per_rank = 1;
  int64_t max_stages_per_rank = 0;
};

/// The schedule registry (names match case-insensitively).
Registry<ScheduleSpec>& schedule_registry();

/// Registers GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
/// ZBVZeroBubble and DualPipeV; safe to call more than once.
void register_builtin_schedules();

/// The compute-only schedule `name` for `pp` ranks, `stages_per_rank` stages
/// per rank (0 = the schedule's default) and `microbatches` microbatches.
/// Throws ConfigError for an unknown name (listing the known ones) or a
/// layout the schedule cannot run (1F1B with fewer microbatches than ranks,
/// ZBV / DualPipeV without exactly 2 stages per rank, DualPipeV with
/// m < 2p, Interleaved with m not a multiple of its rounds).
Schedule make_schedule(
    const std::string& name,
    int64_t pp,
    int64_t stages_per_rank,
    int64_t microbatches);

}  // namespace baton::pipeline
