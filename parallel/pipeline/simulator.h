#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/pipeline/action.h"

namespace baton::pipeline {

/// Cost of one kind of compute action on one stage: (stage, kind) -> time.
using StageCosts = std::map<std::pair<int64_t, ActionKind>, double>;

/// Cost of one action instance, by its string form (Action::str(), e.g.
/// `1F3`, `(0F7;7B3)OVERLAP_F_B`) -> time.
using ActionCosts = std::map<std::string, double>;

/// Time each kind of action takes in the simulator, in arbitrary units.
struct SimulationCosts {
  /// A forward.
  TORCH_ARG(double, forward) = 1.0;
  /// A full backward (input and weight gradients).
  TORCH_ARG(double, backward) = 1.0;
  /// A backward for the input gradient only.
  TORCH_ARG(double, backward_input) = 1.0;
  /// A backward for the weight gradient only.
  TORCH_ARG(double, backward_weight) = 1.0;
  /// An OVERLAP_F_B; negative means its forward's + its backward's cost
  /// (each by its stage and microbatch: no overlap gain).
  TORCH_ARG(double, overlap_f_b) = -1.0;
  /// From a SEND and its RECV both being posted (the later of the two) to
  /// the data being usable on the peer (and, for a compute-only schedule,
  /// from the producing action's end, between stages on different ranks).
  TORCH_ARG(double, p2p_latency) = 0.0;
  /// A REDUCE_GRAD.
  TORCH_ARG(double, reduce_grad) = 0.0;
  /// The time a rank takes to post a SEND (SEND_F, SEND_B) and a RECV
  /// (RECV_F, RECV_B) of a lowered schedule; not busy time. An action's
  /// own per_action entry replaces it.
  TORCH_ARG(double, send_post) = 0.0;
  TORCH_ARG(double, recv_post) = 0.0;
  /// Per-stage costs (e.g. measured: the stages holding the embedding or
  /// the loss cost more than the others); an entry replaces the per-kind
  /// cost above for that stage's actions of that kind.
  TORCH_ARG(StageCosts, per_stage) = {};
  /// Per-action costs (e.g. each action's own measured time: on shared cores
  /// an action costs more while another rank computes than alone in the
  /// ramp-up); an entry replaces the per-stage and per-kind cost of that one
  /// action. A SEND's or RECV's entry is the time its rank takes to post it.
  TORCH_ARG(ActionCosts, per_action) = {};
  /// Added to each compute action's cost above (the result kept at 0 or
  /// more): a draw of the action's variation, for the expected makespan of
  /// a schedule whose actions vary (the plan's, planner/plan.h). Called
  /// once per action; null: none.
  TORCH_ARG(std::function<double(const Action&)>, variation) = nullptr;
};

/// One executed action with its simulated start and end.
struct TimedAction {
  /// The action.
  Action action;
  /// Its index in the rank's list (idle slots included).
  int64_t index = 0;
  /// The lockstep step it ran in.
  int64_t step = 0;
  /// Start time.
  double start = 0.0;
  /// End time (== start for communication).
  double end = 0.0;
};

/// An action that could not run when the simulation stopped.
struct StuckAction {
  /// Its rank.
  int64_t rank = 0;
  /// Its index in the rank's list (idle slots included).
  int64_t index = 0;
  /// The action.
  Action action;
  /// What it waits for, e.g. "1SEND_B0 on rank 1".
  std::string waiting_for;
};

/// No rank could make progress in a step.
struct Deadlock {
  /// The lockstep step (0-based) in which nothing could run.
  int64_t step = 0;
  /// Each unfinished rank's next action.
  std::vector<StuckAction> stuck;

  /// "[schedule] deadlock at step S: rank R step I (ACTION) waits for ...".
  std::string message() const;
};

/// What a simulation predicts.
struct SimulationResult {
  /// Time at which the last action ends.
  double makespan = 0.0;
  /// Lockstep steps taken (one action per rank per step at most).
  int64_t steps = 0;
  /// Compute time of each rank.
  std::vector<double> busy;
  /// (makespan - busy) / makespan of each rank.
  std::vector<double> bubble_fraction;
  /// Most activations each rank holds at once, in microbatches of one stage:
  /// an F adds one, its B or its W releases it (W still reads them; I does
  /// not free them).
  std::vector<int64_t> peak_activations;
  /// Executed actions per rank, in order.
  std::vector<std::vector<TimedAction>> timeline;
  /// Set when the schedule deadlocks; the other fields then cover what ran.
  std::optional<Deadlock> deadlock;

  /// The largest bubble fraction over ranks.
  double max_bubble_fraction() const;
};

/// What one compute action (F, B, I, W, OVERLAP_F_B, REDUCE_GRAD) costs:
/// its own `per_action` entry, else its stage's `per_stage` entry for its
/// kind, else its kind's cost (an overlap without its own cost: its
/// forward's + its backward's). A SEND or RECV without its own entry: 0
/// (the simulator charges send_post / recv_post for posting them).
double action_cost(const SimulationCosts& costs, const Action& a);

/// Runs `schedule` (lowered or compute-only) with ranks advancing in
/// lockstep: in each step each rank runs its next action if it is ready (a
/// SEND once its data exists; a RECV at once, as a receive can be posted
/// before its send; a compute once its inputs exist); a step in which no rank
/// can run is a deadlock, reported in `deadlock` with the step and the stuck
/// actions. Times follow `costs`: each action starts when its rank is free and
/// its inputs have arrived; posting a SEND or RECV takes its `per_action` cost,
/// if it has one, and otherwise send_post / recv_post; that time is not busy
/// (the compute that needs the data waits for it: the later of the SEND and the
/// RECV posted, + p2p_latency, as the transports move data only once both sides
/// posted). A compute-only schedule communicates implicitly (p2p_latency
/// between ranks). Expects a schedule that passes validate_schedule.
SimulationResult simulate(
    const Schedule& schedule, const SimulationCosts& costs = SimulationCosts());

}  // namespace baton::pipeline
