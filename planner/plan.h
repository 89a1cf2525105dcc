#pragma once

// `baton plan`: the layouts a world size allows, each one's memory from the
// dry run and its step time from the pipeline simulator fed with measured
// (or FLOP-derived) costs, ranked.

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "models/model_args.h"
#include "parallel/pipeline/action.h"

namespace baton {

/// Seconds of one forward (F), full backward (B), input-gradient backward
/// (I) and weight-gradient backward (W) of one piece of the model.
struct PassCosts {
  double f = 0.0;
  double b = 0.0;
  double i = 0.0;
  double w = 0.0;
};

/// The compute costs at one microbatch size, on one rank without tensor
/// parallelism.
struct MicrobatchCosts {
  /// Sequences of seq_len tokens per microbatch.
  int64_t rows = 1;
  /// One transformer block.
  PassCosts block;
  /// The token embedding.
  PassCosts embedding;
  /// The final norm, the output projection and the loss.
  PassCosts output;
  /// Seconds a rank takes to post a SEND and a RECV of this microbatch's
  /// activations (or their gradients) between pipeline stages, beside the
  /// passes: the executor's own cost of its P2P. Optional in the file (0).
  double send_s = 0.0;
  double recv_s = 0.0;
  /// The standard deviation of one block's F, B, I and W (seconds) over
  /// the profile's runs: how much a pass varies from one run to the next
  /// (the other ranks' work, the machine). Optional in the file (0: passes
  /// take exactly their cost). With it the plan predicts the expected step
  /// of varying passes: a pipeline's ranks wait for each other, and
  /// data-parallel replicas for the slowest (docs/plan.md).
  PassCosts spread;
};

/// A link: time = latency + bytes moved / bandwidth.
struct LinkCosts {
  double latency_s = 0.0;
  /// Bytes per second (the file says GB/s, 1e9 bytes).
  double bandwidth = 1.0;
};

/// A communication's costs across machines, and within one where the file
/// gives them (a group whose ranks all lie on one node uses intra_node).
struct CommCosts {
  LinkCosts inter_node;
  std::optional<LinkCosts> intra_node;
};

/// What data parallelism adds to an unpipelined step, measured on the
/// profile's ranks: per mode ("replicate", "fully_shard always",
/// "fully_shard never"), the seconds a micro-step of a chunk of blocks
/// takes beyond the same chunk alone, per block, its gradient
/// synchronisation (or its gathers, frees and reduce-scatters) included and
/// overlapped with the compute as the run overlaps them; at `degree` ranks
/// of `rows` sequences each.
struct DataParallelCosts {
  int64_t degree = 0;
  int64_t rows = 0;
  std::map<std::string, double> block_s;
};

/// A cost file (docs/plan.md): what each piece of work takes.
struct PlanCosts {
  /// Where the file came from (for messages).
  std::string path;
  std::string description;
  /// How the figures were obtained ("FLOPs at 40% of 989 TFLOP/s bf16").
  std::string obtained;
  /// By increasing rows.
  std::vector<MicrobatchCosts> microbatches;
  /// Consecutive ranks per machine; 0 = every rank on one machine.
  int64_t ranks_per_node = 0;
  CommCosts p2p;
  CommCosts all_reduce;
  CommCosts all_gather;
  CommCosts reduce_scatter;
  /// Optional in the file: absent, all_gather's links (a rank sends (n-1)/n
  /// of its buffer as a ring all-gather does).
  std::optional<CommCosts> all_to_all;
  /// The memory cap per rank, when the file states one.
  std::optional<double> memory_per_rank_gib;
  /// The optimizer step with gradient clipping, seconds per parameter a
  /// rank stores; 0 when the file leaves it out (then so does the model).
  double optimizer_s_per_parameter = 0.0;
  /// Measured under a parallelism that splits the blocks
  /// (Parallelism::plan), by its name (the file's key) and degree: per
  /// microbatch size, the pieces one of its ranks runs, their collectives
  /// included (the profile's). A degree absent here takes `microbatches`
  /// over the degree plus the collectives its PlanSearch models.
  std::map<std::string, std::map<int64_t, std::vector<MicrobatchCosts>>>
      split_costs;
  /// Measured data parallelism (the profile's, optional in the file):
  /// where a candidate without pipelining or split blocks runs at its
  /// degree and rows, the plan takes its blocks' share from here instead of
  /// modelling their synchronisation and gathers.
  std::optional<DataParallelCosts> data_parallel;
  /// The dtype the compute costs were measured in ("float32",
  /// "bfloat16"); empty: the config's, as the dry run takes it. Sizes the
  /// activations the links move.
  std::string compute_dtype;
  /// The device the costs are for ("cpu", "cuda"); empty: this machine's.
  /// Decides what the dry run counts for attention's backward (the
  /// probabilities on a CPU, a log-sum-exp per row on CUDA).
  std::string device;
};

/// Reads a cost file. Throws ConfigError naming the file and the field for
/// a malformed or incomplete one.
PlanCosts load_plan_costs(const std::string& path);

/// The costs as a cost file's JSON.
std::string plan_costs_to_json(const PlanCosts& costs);

/// The expected maximum of `n` independent standard normal draws (0 for n
/// <= 1; 0.564 for 2, 1.029 for 4): in standard deviations above the mean,
/// how long `n` data-parallel replicas whose steps vary wait for the
/// slowest of them.
double expected_max_of_normals(int64_t n);

/// How to derive costs from the model's FLOPs.
struct FlopsCostOptions {
  /// The accelerator's peak in the compute dtype (989 for an H100's bf16).
  TORCH_ARG(double, peak_tflops) = 989.0;
  /// The fraction of the peak a pass reaches.
  TORCH_ARG(double, efficiency) = 0.4;
  /// Microbatch sizes (rows) to write.
  TORCH_ARG(std::vector<int64_t>, rows) = std::vector<int64_t>{1, 2, 4, 8};
};

/// A cost file for `config`'s model from its FLOPs: per token, a block's
/// forward is 2 x its parameters + 4 x seq_len x the query width
/// (attention's two matmuls), the output's 2 x vocab x dim, the embedding's
/// none; B = 2 F, I = W = F; seconds = FLOPs / (peak x efficiency). The
/// links are an H100 cluster's (NVLink within 8-GPU machines, 400 Gb/s
/// InfiniBand per GPU across them), stated in the file.
PlanCosts plan_costs_from_flops(
    const JobConfig& config, const FlopsCostOptions& options);

/// The model's shapes for `config` with the vocabulary its dry run uses
/// (the tokenizer's).
ModelArgs plan_model_args(const JobConfig& config);

/// What the search covers.
struct PlanOptions {
  /// The cap per rank in bytes; 0 = the cost file's, else none.
  TORCH_ARG(int64_t, memory_per_rank) = 0;
  /// Sequences per step over all data-parallel ranks; 0 = the base
  /// config's local_batch_size x its data-parallel ranks (world over its
  /// pp and the degrees of the axes that split the blocks).
  TORCH_ARG(int64_t, global_batch) = 0;
  TORCH_ARG(int64_t, max_pp) = 16;
  TORCH_ARG(int64_t, max_stages_per_rank) = 8;
  TORCH_ARG(int64_t, max_microbatches) = 64;
  /// Threads scoring candidates; 0 = the hardware's.
  TORCH_ARG(int64_t, threads) = 0;
  /// The fastest pipelined layouts (distinct but for their schedule) a
  /// schedule is synthesised for (parallel/pipeline/synthesis.h); 0: none.
  TORCH_ARG(int64_t, synthesize) = 8;
  /// Predictions within this fraction of the fastest count as equal: the
  /// cost model is not more accurate than that (real runs differ from its
  /// predictions by a few percent and more, docs/PERFORMANCE.md and
  /// bench/notes.md). Those candidates rank
  /// simplest first (plan_simplicity_less), then by prediction; 0 = by
  /// prediction alone.
  TORCH_ARG(double, tolerance) = 0.02;
};

/// One layout, its memory and its predicted time.
struct PlanCandidate {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  /// The degrees above 1 of the axes that split every block (the searched
  /// parallelisms', Parallelism::plan: tensor parallel's "tp"), by axis.
  std::map<std::string, int64_t> splits;
  /// The degrees above 1 of the derived axes searched (the borrowing
  /// parallelisms', Parallelism::borrow_plan: expert parallel's "ep" of
  /// dp_shard x cp), by axis.
  std::map<std::string, int64_t> borrowed;
  /// "" without pipelining; "Synthesized" for a schedule made for these
  /// costs (`synthesized`).
  std::string schedule;
  int64_t stages_per_rank = 1;
  /// Sequences per data-parallel rank per step.
  int64_t local_batch = 1;
  int64_t microbatch_size = 1;
  int64_t microbatches = 1;
  /// Layers of each stage (empty without pipelining).
  std::vector<int64_t> layers_per_stage;
  /// True when the split gives the first and last stages fewer layers for
  /// the embedding and the output; it is then written as module FQNs.
  bool balanced = false;
  /// "none" or "full".
  std::string activation_checkpoint = "none";
  /// With full: the pipeline stages that checkpoint, a prefix 0 .. k-1
  /// (activation_checkpoint.stages); empty = every stage.
  std::vector<int64_t> checkpoint_stages;
  /// parallelism.fsdp_reshard_after_forward: "always" or "never" with
  /// dp_shard > 1 (both are searched), else "default".
  std::string fsdp_reshard = "default";
  /// The simulated pipeline (or the one micro-step), seconds.
  double compute_s = 0.0;
  /// Data-parallel gradient synchronisation after it, seconds.
  double dp_sync_s = 0.0;
  /// The optimizer step with clipping on the most loaded rank, seconds.
  double optimizer_s = 0.0;
  double step_s = 0.0;
  double tokens_per_s = 0.0;
  double tokens_per_s_per_rank = 0.0;
  /// The simulation's largest bubble fraction over pipeline ranks.
  double bubble = 0.0;
  /// The most loaded rank's total (dry run).
  int64_t peak_bytes = 0;
  /// A synthesised schedule (compute-only), else null.
  std::shared_ptr<const pipeline::Schedule> synthesized;
  /// With `synthesized`: the built-in schedule it beat at this layout and
  /// that schedule's predicted step, seconds.
  std::string synthesized_over;
  double synthesized_over_step_s = 0.0;
  /// With `synthesized`: where its CSV was written (the overlay's
  /// pipeline_parallel_schedule_csv); set by whoever writes it.
  std::string schedule_csv;

  /// Whether pipeline stage `stage`'s blocks recompute in backward.
  bool checkpoints_stage(int64_t stage) const;
  /// Its degree along the splitting axis `axis` (1 where it has none).
  int64_t split(const std::string& axis) const;
  /// The product of `splits`: the ranks that share each block.
  int64_t split_ranks() const;
  /// fully_shard's ranks: dp_shard x cp (the dp_shard_cp group: cp's ranks
  /// hold the same weights, so their gradients are reduce-scattered there
  /// too); fully_shard is on where it is above 1.
  int64_t shard_ranks() const;
  /// The distance between those ranks: the split axes inside cp (tp).
  int64_t shard_stride() const;
  /// Its degree along the derived axis `axis` (1 where it has none).
  int64_t borrowed_degree(const std::string& axis) const;
  /// The product of `borrowed`: how many ways the parameters a borrowing
  /// parallelism splits (the routed experts) are split before fully_shard
  /// shards each rank's over the other shard_ranks() / borrowed_ranks().
  int64_t borrowed_ranks() const;
};

/// The search's outcome.
struct PlanResult {
  /// Best first.
  std::vector<PlanCandidate> ranked;
  /// Candidates generated: each schedule-valid layout with each of its
  /// checkpointing choices (none; without pipelining full; pipelined full
  /// on the first k stages, k = 1 .. stages, the last being every stage),
  /// synthesised schedules aside: considered + synthesis_wins = pruned +
  /// dominated + ranked.
  int64_t considered = 0;
  /// Of those, scored and over the memory cap.
  int64_t pruned = 0;
  /// Not scored because a cheaper choice of the same layout fits (one that
  /// checkpoints fewer stages adds less compute).
  int64_t dominated = 0;
  int64_t global_batch = 0;
  int64_t world_size = 0;
  /// The cap applied (0: none).
  int64_t memory_cap = 0;
  /// Layouts a schedule was synthesised for (the fastest pipelined ones),
  /// and how many of those synthesised schedules beat the layout's best
  /// built-in schedule (those are in `ranked`).
  int64_t synthesis_layouts = 0;
  int64_t synthesis_wins = 0;
  /// The tolerance applied, and how many candidates it put level with the
  /// fastest prediction (the first `tied` of `ranked`, simplest first; 1
  /// when none came within it).
  double tolerance = 0.0;
  int64_t tied = 0;
  /// The fastest prediction (the step of the tied ones' fastest), seconds.
  double fastest_step_s = 0.0;
  /// How the profile's ranks ran, as the plan's runs should ("cores": each
  /// bound to its own cores, "none"); empty when the costs were not
  /// measured here. Set by whoever profiled.
  std::string cpu_bind;
};

/// The order among candidates whose predictions count as equal: fewer
/// pipeline stages in all (pp x stages per rank: fewer point-to-point
/// transfers and per-stage overheads the model has to get right), a
/// built-in schedule before a synthesised one, fewer ranks sharing each
/// block (fewer collectives per layer), replicated before sharded data
/// parallelism (fully_shard gathers, frees and reduce-scatters every unit:
/// more collectives a step, each a chance for a run to differ from the
/// profile), fewer ranks splitting the experts (fewer all-to-alls),
/// fewer microbatches (fewer passes, each
/// with a fixed cost), fewer checkpointing stages. False when neither is
/// simpler.
bool plan_simplicity_less(const PlanCandidate& a, const PlanCandidate& b);

/// Searches the layouts of `world_size` ranks for `base`'s model: pp x
/// dp x the searched parallelisms' degrees (searched_parallelisms: tensor
/// parallel's), with dp as dp_replicate, dp_shard or both (HSDP, r x s), FSDP
/// resharding after forward always / never, the seven schedules with their
/// stages per rank, microbatch sizes, even and balanced layer splits,
/// activation checkpointing none / full on the first k stages, with the
/// global batch kept. Then, for the `options.synthesize()` fastest
/// pipelined layouts, a schedule synthesised for their costs (within the
/// activations the layout's best built-in schedule holds, one more
/// microbatch per rank, or any, each under the cap) joins the ranking
/// when it is faster than that built-in schedule by more than
/// `options.tolerance()` (0.5 % at least). Ranked
/// by prediction, except that those within `options.tolerance()` of the
/// fastest come first, simplest first (plan_simplicity_less). Throws
/// ConfigError when no layout divides the world for the model, or when
/// none fits the cap (naming the smallest peak found).
PlanResult plan_layouts(
    const JobConfig& base,
    int64_t world_size,
    const PlanCosts& costs,
    const PlanOptions& options = PlanOptions());

/// The microbatch sizes (sequences) the search of `world_size` ranks can
/// give a candidate: the divisors of each data-parallel degree's local
/// batch, at most options.max_microbatches() microbatches, and the local
/// batches themselves (one micro-step without pipelining). What the
/// profile times. Throws ConfigError, as plan_layouts, when no layout
/// divides the world.
std::vector<int64_t> plan_microbatch_rows(
    const JobConfig& base,
    int64_t world_size,
    const PlanOptions& options = PlanOptions());

/// The sequences per rank of the layouts of `world_size` ranks that are
/// all data parallel (no pipeline, no split of the blocks), 0 where the
/// global batch does not divide: what the profile's data-parallel probe
/// runs (ProfileOptions::data_parallel_rows).
int64_t plan_data_parallel_rows(
    const JobConfig& base,
    int64_t world_size,
    const PlanOptions& options = PlanOptions());

/// Microbatch sizes per degree of each searched parallelism, by its name.
using SplitRows =
    std::map<std::string, std::map<int64_t, std::vector<int64_t>>>;

/// Per searched parallelism (by name), each degree above 1 the search of
/// `world_size` ranks can give a candidate with no other axis splitting
/// the blocks, with the microbatch sizes of those layouts: what the
/// profile measures (ProfileOptions::splits, PlanCosts::split_costs).
SplitRows plan_split_rows(
    const JobConfig& base,
    int64_t world_size,
    const PlanOptions& options = PlanOptions());

/// The ranked table, top `top`, with the counts.
std::string format_plan_table(
    const PlanResult& result, const PlanCosts& costs, int64_t top);

/// The whole result as JSON: the counts, the costs' description, and every
/// ranked candidate with its figures and its overlay (what bench scripts
/// read).
std::string plan_result_json(const PlanResult& result, const PlanCosts& costs);

/// `candidate` as a YAML overlay for `baton train --config base.yaml
/// --config plan.yaml`; a synthesised schedule is named by its
/// `schedule_csv` (throws std::invalid_argument when that is empty).
std::string plan_overlay_yaml(
    const PlanCandidate& candidate, const std::string& why);

/// Writes each synthesised schedule of `result.ranked` as a CSV into `dir`
/// (`schedule-rankK.csv`, K its rank) and sets its `schedule_csv` to that
/// absolute path (what its overlay names). Throws std::runtime_error when
/// a file cannot be written.
void write_synthesized_schedules(PlanResult& result, const std::string& dir);

/// The module FQNs per stage of a split.
std::vector<std::vector<std::string>> split_fqns(
    const std::vector<int64_t>& layers_per_stage);

/// `candidate`'s schedule simulated with its costs, as an SVG.
std::string plan_schedule_svg(
    const JobConfig& base,
    const PlanCandidate& candidate,
    const PlanCosts& costs);

}  // namespace baton
