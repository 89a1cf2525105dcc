#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/job_config.h"
#include "config/parallel_dims.h"

namespace baton {

namespace pipeline {
struct Schedule;
}

/// One pipeline stage a rank holds, as a dry run counts it.
struct DryRunStage {
  int64_t stage = 0;
  /// "tok_embeddings, layers.0-3".
  std::string holds;
  /// Elements of the stage's parameters this rank stores (its tensor
  /// parallel slice, and its rows of that under fully_shard).
  int64_t parameters = 0;
  /// Of those, the root unit's (embedding, norm, output): fully_shard
  /// never frees it after its forward.
  int64_t root_parameters = 0;
  /// Of those, the routed experts' (models::is_routed_expert): under
  /// expert parallel, fully_shard shards each rank's experts over the
  /// ranks of dp_shard x cp that hold the same ones (dp_shard_mod_ep).
  int64_t expert_parameters = 0;
  /// Activations one microbatch leaves saved for backward in this stage.
  int64_t activation_bytes = 0;
  /// What one checkpointed block of this stage holds while it recomputes
  /// in backward (0 when the stage checkpoints none:
  /// activation_checkpoint.stages).
  int64_t recompute_bytes = 0;
};

/// What one rank would hold, computed from the config alone.
struct DryRunRank {
  int64_t rank = 0;
  /// Its pipeline rank, and its index along every axis by name (pp,
  /// dp_replicate, dp_shard, tp and any registered one).
  int64_t pp = 0;
  std::map<std::string, int64_t> coordinates;
  std::vector<DryRunStage> stages;
  /// Elements of every stage's stored parameters.
  int64_t parameters = 0;
  /// The float32 master weights, their float32 gradients, AdamW's two
  /// float32 states per element.
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  /// Parameters held whole or cast during a step beyond the stored ones:
  /// fully_shard's gathered units and the whole gradients accumulated into
  /// them (compute dtype), or mixed precision's compute-dtype copies
  /// without it.
  int64_t buffer_bytes = 0;
  /// Activations one microbatch leaves saved for backward in all of this
  /// rank's stages.
  int64_t activation_bytes_per_microbatch = 0;
  /// What a checkpointed block's recomputation holds in backward, one block
  /// at a time: the most of the rank's stages (0 without activation
  /// checkpointing).
  int64_t recompute_bytes = 0;
  /// Most microbatches of one stage whose activations the rank holds at
  /// once (the pipeline simulator's count; 1 without pipelining).
  int64_t peak_microbatches = 1;
  /// The activation estimate at that peak, the recomputation included.
  int64_t activation_peak_bytes = 0;
  /// weights + gradients + optimizer + buffers + activation peak.
  int64_t total_bytes = 0;
};

/// The whole dry run: the layout resolved and every rank's footprint.
struct DryRunReport {
  std::string model;
  std::string flavor;
  /// Parameters of the whole model, and of them those one token uses (all
  /// but the experts it is not routed to; the same without experts).
  int64_t model_parameters = 0;
  int64_t active_parameters = 0;
  /// A model with experts: each MoE layer's experts, how many a token uses,
  /// the MoE layers, the ep degree, and the bytes each ep rank hands to the
  /// all-to-alls per MoE layer and microbatch at perfect balance: 4 (ep -
  /// 1) / ep x tokens x top_k x dim x the compute dtype's bytes (dispatch
  /// and combine, forward and backward), plus the counts' exchange.
  struct Experts {
    int64_t experts = 0;
    int64_t top_k = 0;
    int64_t moe_layers = 0;
    int64_t ep = 1;
    int64_t all_to_all_bytes_per_layer = 0;
  };
  std::optional<Experts> experts;
  /// Context parallel: its degree, the positions of each chunk (every rank
  /// holds two), and the bytes each rank sends per attention layer and
  /// microbatch: its keys and values to the cp - 1 others forward and their
  /// gradients backward, 2 x 2 (cp - 1) x tokens x kv width x the compute
  /// dtype's bytes, tokens this rank's.
  struct Context {
    int64_t cp = 1;
    int64_t chunk_len = 0;
    int64_t bytes_per_layer = 0;
  };
  std::optional<Context> context;
  int64_t vocab_size = 0;
  /// Where the vocabulary size came from ("tokenizer bytes", "the flavor's:
  /// ...").
  std::string vocab_source;
  ParallelDims dims;
  /// "" without pipelining.
  std::string schedule;
  int64_t num_stages = 1;
  int64_t microbatches = 1;
  /// This rank's tokens of one microbatch (batch rows x seq_len / cp).
  int64_t microbatch_tokens = 0;
  /// "float32" or "bfloat16", and why when auto chose it.
  std::string compute_dtype;
  /// "cpu" or "cuda": where the run computes, which decides what attention
  /// keeps for backward.
  std::string device;
  /// What attention keeps per block for backward beyond its inputs and
  /// output ("probabilities of the unmasked half (CPU kernel)", ...).
  std::string attention_saved;
  std::string activation_checkpoint;
  std::vector<DryRunRank> ranks;
};

/// What a dry run computes; the defaults give every rank.
/// What one stage's parameters come to on one rank: memoised by a planner
/// across its dry runs (thread-safe), since they depend only on the chunk,
/// the tensor-parallel and fully_shard degrees and the rank's coordinates
/// on them, never on the schedule or checkpointing. One cache per model.
class DryRunStageCache {
 public:
  struct Entry {
    int64_t parameters = 0;         // stored on the rank
    int64_t root_parameters = 0;    // of those, outside every block
    int64_t expert_parameters = 0;  // of those, the routed experts'
    int64_t sliced_elements = 0;    // after tensor parallel, before sharding
    int64_t largest_block = 0;      // a block's elements after tensor parallel
    int64_t all_units = 0;  // every unit's elements after the model steps
    int64_t root_unit = 0;  // the root's
  };
  /// The chunk (first and end layer, embedding, output), then the degree
  /// and the rank's position of every axis within the stage.
  using Key = std::vector<int64_t>;

  /// The entry for `key`, made by `make` the first time. A planner's
  /// threads ask millions of times, nearly always for one made already:
  /// they look up together, hashed.
  Entry get(const Key& key, const std::function<Entry()>& make);

 private:
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  std::shared_mutex mutex_;
  std::unordered_map<Key, Entry, KeyHash> entries_;
};

using SchedulePointer = const pipeline::Schedule*;

struct DryRunOptions {
  /// Only the ranks at data-parallel and tensor-parallel coordinate 0, one
  /// per pipeline rank: fully_shard's and tensor parallel's ceil splits give
  /// coordinate 0 the largest shard, so these hold the most loaded rank of
  /// each pipeline rank (what a planner needs, fast).
  TORCH_ARG(bool, first_rank_per_pipeline_rank) = false;
  /// The most in-flight microbatches of each pipeline rank, when the caller
  /// has simulated the schedule already (empty: the dry run simulates it).
  TORCH_ARG(std::vector<int64_t>, peak_microbatches) = {};
  /// Memoises the stages' parameter figures across dry runs; null: none.
  TORCH_ARG(std::shared_ptr<DryRunStageCache>, stage_cache) = nullptr;
  /// The schedule of the config when the caller has made it already (its
  /// stages and their ranks are read from it); null: the dry run makes it.
  TORCH_ARG(SchedulePointer, schedule) = nullptr;
  /// "cpu" or "cuda": the device the run computes on (a planner's cost
  /// file's); "": this machine's, CUDA when it has one.
  TORCH_ARG(std::string, device) = "";
};

/// Builds the layout of `config` for `world_size` ranks on every rank's
/// behalf without allocating a weight: the degrees resolved, the schedule
/// and its placement, the stage split, each parameter's tensor-parallel
/// slice and fully_shard rows (the appliers' own rules), and the bytes each
/// rank would hold. The activation figures are estimates (the tensors the
/// blocks save for backward: docs/ARCHITECTURE.md, section 4). Throws
/// ConfigError for a layout the run itself would refuse.
DryRunReport dry_run(
    const JobConfig& config,
    int64_t world_size,
    const DryRunOptions& options = DryRunOptions());

/// The report as a table (`format` "text": ranks with equal figures in one
/// row) or JSON (every rank).
std::string format_dry_run(
    const DryRunReport& report, const std::string& format);

}  // namespace baton
