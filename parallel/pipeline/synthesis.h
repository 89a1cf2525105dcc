#pragma once

// A schedule made for given costs rather than taken from a generator: a
// greedy list scheduler in the spirit of Zero Bubble's automatic scheduling
// (Qi et al., 2024). Time advances as in the simulator; whenever a rank is
// free it runs the backward that is ready (the critical path) or a ready
// forward its activation budget allows, by the rules' order, else a
// deferred W (filling what would be a bubble), and otherwise waits for the
// first input to arrive.
// Several rule sets are tried and the simulator, fed the same costs, keeps
// the fastest. The result is ordinary schedule data: it lowers, validates,
// simulates, runs and round-trips through CSV like the built-in schedules.

#include <torch/arg.h>

#include <cstdint>
#include <vector>

#include "parallel/pipeline/action.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/simulator.h"

namespace baton::pipeline {

/// How the greedy picks among what is ready.
struct SynthesisRules {
  /// Split each backward into I and W, I as soon as it is ready and W only
  /// when nothing else is (Zero Bubble); false: whole B actions.
  TORCH_ARG(bool, split_backward) = true;
  /// Among a rank's ready forwards, the later stage first (a microbatch
  /// goes on through the rank's stages, depth first) rather than the
  /// earlier (a new microbatch comes in, breadth first).
  TORCH_ARG(bool, later_stage_first) = true;
  /// A ready forward before a ready backward while the budget allows (the
  /// budget then sets the warm-up, as in 1F1B), rather than the backward
  /// first (the critical path).
  TORCH_ARG(bool, forward_first) = false;
  /// Per rank, the most (stage, microbatch) activations it may hold: each
  /// counts from its F until its B, or until its W when the backward is
  /// split (the simulator's peak_activations counts them so). A rank
  /// reserves one unit per stage it holds when a microbatch enters it, so
  /// that every microbatch it starts can finish (no deadlock). Each entry
  /// must be at least the rank's number of stages; empty: no limit.
  TORCH_ARG(std::vector<int64_t>, max_in_flight) = {};
};

/// The compute-only schedule the greedy builds for `microbatches`
/// microbatches over the stages of `stage_to_rank` (loop, V or any other
/// placement; a microbatch enters a rank at its lowest stage), timed with
/// `costs` (per-stage and per-kind costs, the P2P latency
/// between ranks, the posting of sends and receives). Its name is
/// "Synthesized". Throws ScheduleError for a budget below a rank's stage
/// count or an empty placement.
Schedule synthesize_schedule(
    const std::vector<int64_t>& stage_to_rank,
    int64_t microbatches,
    const SimulationCosts& costs,
    const SynthesisRules& rules = SynthesisRules());

/// The fastest synthesised schedule and what made it.
struct SynthesisResult {
  /// The schedule lowered, in its posting order, and simulated with the
  /// costs it was made for.
  PlannedSchedule planned;
  /// The rules that made it.
  SynthesisRules rules;
  /// Rule sets tried (each lowered and simulated).
  int64_t tried = 0;
};

/// Tries split and whole backwards, later- and earlier-stage-first
/// forwards, backward- and forward-first, and each budget in `budgets` (per
/// rank; an empty one is no limit), lowers each, puts it in the order the
/// executor posts it on CUDA or CPU tensors (`posting_order`), simulates it
/// with `costs`, and returns the one with the shortest makespan (ties: the
/// earlier tried, in that order): the rules are chosen by the timing the
/// schedule will run with.
SynthesisResult synthesize_best(
    const std::vector<int64_t>& stage_to_rank,
    int64_t microbatches,
    const SimulationCosts& costs,
    const std::vector<std::vector<int64_t>>& budgets,
    bool cuda);

}  // namespace baton::pipeline
