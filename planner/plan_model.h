#pragma once

// The planner's cost model (planner/ only): a candidate's stage times, its
// links and collectives, its data-parallel synchronisation, and its score
// (the dry run's memory, the simulated step), which plan.cpp's search
// runs on every candidate.

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "config/job_config.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/simulator.h"
#include "planner/dry_run.h"
#include "planner/plan.h"

namespace baton::plan_detail {

/// The costs at `rows`: the nearest listed size's, scaled by rows.
MicrobatchCosts costs_at(
    const std::vector<MicrobatchCosts>& list, int64_t rows);

/// The compute time of one pass over the pieces a stage holds, the
/// collectives of the axes splitting its blocks included.
struct StageTimes {
  double f = 0.0;
  double b = 0.0;
  double i = 0.0;
  double w = 0.0;
  /// The standard deviation of each pass (the cost file's `spread` of one
  /// block; a stage's blocks vary independently, so sqrt(layers) x that).
  PassCosts sd;
};

/// What a candidate's times come from: the cost file, the model's shapes
/// and dtypes, and the searched parallelisms.
struct CostModel {
  const PlanCosts& costs;
  /// The config the candidates vary.
  const JobConfig& base;
  int64_t seq_len = 0;
  int64_t dim = 0;
  int64_t dtype_bytes = 2;
  int64_t reduce_bytes = 4;
  /// The model's shape (PlanSearch::collective_share reads it).
  ModelArgs args;
  /// The parallelisms whose axes split the blocks, innermost last.
  std::vector<const Parallelism*> searched = searched_parallelisms();
  /// The parallelisms whose derived axes the search borrows (ep).
  std::vector<const Parallelism*> borrowing = borrowing_parallelisms();
  /// The dry runs' stage figures, shared by every candidate of the search.
  std::shared_ptr<DryRunStageCache> stage_cache =
      std::make_shared<DryRunStageCache>();

  /// The costs measured at `c`'s split of the blocks: where a single
  /// searched axis splits them and the cost file has its degree; else
  /// null.
  const std::vector<MicrobatchCosts>* measured_split(
      const PlanCandidate& c) const;

  /// The collectives the searched axes add to one pass of a block of
  /// `act` activation bytes, as their PlanSearch models them; each axis's
  /// ranks lie the product of the inner axes' degrees apart.
  double split_collectives_s(const PlanCandidate& c, double act) const;

  /// The all-to-alls the borrowed axes add to one pass of a block of `act`
  /// activation bytes (the whole sequences'), as their PlanBorrowSearch
  /// models them: each moves its share of the rank's positions
  /// (sequence_shards) among the axis's ranks, which lie fully_shard's
  /// shard_stride() apart (the innermost of dp_shard x cp).
  double borrowed_collectives_s(const PlanCandidate& c, double act) const;

  /// The ways `c`'s split cuts the activations between pipeline stages
  /// (parallel_sequence_shards over its split axes, times the sequence
  /// split's shards where context parallel holds seq_len / cp positions).
  int64_t sequence_shards(const PlanCandidate& c) const;

  /// Seconds of one stage's passes at `rows`, with `layers` blocks; `index`
  /// is its global stage index (whether it checkpoints).
  StageTimes stage(
      const PlanCandidate& c,
      int64_t rows,
      int64_t layers,
      bool embedding,
      bool output,
      int64_t index = 0) const;

  /// From a SEND to its data usable on the next pipeline rank: this
  /// rank's slice of the (rows, T, dim) activation (sequence_shards).
  double p2p_s(const PlanCandidate& c, int64_t rows) const;

  /// The seconds per block the profile measured data parallelism to add
  /// to `c` (PlanCosts::data_parallel: `c` unpipelined, unsplit, at the
  /// measured degree and rows, replicate or fully_shard alone), else null.
  const double* measured_data_parallel(const PlanCandidate& c) const;

  /// Data-parallel gradient reduction of a rank storing `stored` parameter
  /// elements in `units` fully_shard units (root and blocks over its
  /// stages), after the pipeline (not overlapped): replicate all-reduces
  /// the gradients (stride: the ranks sharing a block, k); fully_shard
  /// reduce-scatters the whole gradients over its shard group (size
  /// dp_shard, stride k) and, with HSDP, all-reduces the 1/dp_shard it
  /// keeps over the replicas (size dp_replicate, stride k x dp_shard), as
  /// Unit::to_sharded does: each unit its own collectives, so one latency
  /// per unit. `experts` of the stored elements are routed experts: under
  /// a borrowed axis (ep) their reduce-scatter is over the ranks holding
  /// the same experts (shard_ranks() / borrowed_ranks(), the borrowed
  /// ranks apart), each of the `expert_units` units holding some its own
  /// collective.
  double dp_sync_s(
      const PlanCandidate& c,
      int64_t stored,
      int64_t units,
      int64_t experts = 0,
      int64_t expert_units = 0) const;

  /// fully_shard's all-gathers of one stage in a step (size dp_shard,
  /// stride: the ranks sharing a block; the compute dtype): each of its
  /// `block_units` blocks `block_gathers` times, its root (embedding, norm,
  /// output: never freed after its forward) once; each unit gathers alone (one
  /// latency each). `blocks` and `root` are the shard elements this rank
  /// stores.
  /// `experts` of the blocks' elements are routed experts, gathered
  /// (under a borrowed axis) over their own ranks as dp_sync_s reduces
  /// them.
  double fsdp_gather_s(
      const PlanCandidate& c,
      int64_t blocks,
      int64_t block_units,
      int64_t root,
      int64_t block_gathers,
      int64_t experts = 0) const;
};

/// The cost model of `base`'s run shaped `args`, from `costs`.
CostModel cost_model(
    const JobConfig& base, const ModelArgs& args, const PlanCosts& costs);

/// A schedule lowered once, its in-flight peaks (cost-free) and how often
/// each stage's blocks are gathered when freed after every forward.
struct CachedSchedule {
  pipeline::Schedule lowered;
  std::vector<int64_t> peaks;
  std::vector<int64_t> freed_gathers;
  std::string error;
};

/// Per stage, fully_shard's gathers of its blocks in one step of `lowered`
/// under reshard_after_forward always (parallel/fsdp/fully_shard.cpp): a
/// forward frees them, so the next forward or backward of the stage
/// gathers them again; a backward leaves them whole (pipelined, nothing
/// frees them before the next forward); W reads no parameters; REDUCE_GRAD
/// returns them to their shards. 1F1B and GPipe: m + 1.
std::vector<int64_t> freed_block_gathers(const pipeline::Schedule& lowered);

/// (schedule, pp, stages per rank, microbatches): a lowered schedule's key.
using ScheduleKey = std::tuple<std::string, int64_t, int64_t, int64_t>;

JobConfig candidate_config(const JobConfig& base, const PlanCandidate& c);

pipeline::SimulationCosts simulation_costs(
    const CostModel& model,
    const PlanCandidate& c,
    std::vector<PassCosts>* deviations = nullptr);

/// The dry run of `c` on `schedule` (the lowered one it runs; null without
/// pipelining), its peak_bytes set from it.
DryRunReport measure_memory(
    const JobConfig& base,
    int64_t world,
    const CostModel& model,
    const CachedSchedule* schedule,
    PlanCandidate& c);

/// The most any rank of `report` stores between steps: its float32
/// weights, gradients and AdamW's states. The schedule, the microbatches,
/// checkpointing and resharding leave it as it is, and every peak is above
/// it.
int64_t stored_bytes(const DryRunReport& report);

/// The step time of `c` from its dry run `report`: dp_sync_s, optimizer_s,
/// compute_s, bubble and step_s.
void measure_time(
    const CostModel& model,
    const CachedSchedule* schedule,
    const DryRunReport& report,
    PlanCandidate& c);

/// Memory and time of one candidate; false when over `cap` (0: none), its
/// time then left unmeasured.
bool score(
    const JobConfig& base,
    int64_t world,
    const CostModel& model,
    const CachedSchedule* schedule,
    int64_t cap,
    PlanCandidate& c);

}  // namespace baton::plan_detail
