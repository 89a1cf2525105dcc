#include "planner/dry_run.h"

#include <torch/cuda.h>

#include <algorithm>
#include <map>
#include <optional>

#include "builders/job_check.h"
#include "builders/pipeline_trainer_builder.h"
#include "common/error.h"
#include "models/common/fused_ops.h"
#include "models/model_spec.h"
#include "models/moe.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/split.h"

namespace baton {

namespace {

/// AdamW keeps exp_avg and exp_avg_sq, float32, per element.
constexpr int64_t kOptimizerBytesPerElement = 8;
constexpr int64_t kMasterBytes = 4;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) {
    n *= d;
  }
  return n;
}

/// The elements per token block `layer`'s feed-forward leaves saved for
/// backward beyond its input, split `t` ways as tensor and sequence
/// parallel split it: a dense one's w1 and w3 outputs (swiglu's) and their
/// product (w2's input; this rank's hidden rows). A mixture of experts
/// routes T / t positions on each rank with whole experts: each token's
/// top_k rows as the experts' products read them (on the rank computing
/// them: under expert parallel the rows received, as many at balance) and
/// their outputs before the router's weighting, the experts' w1, w3 and
/// their product per row, and the shared experts' as a dense one's.
int64_t ffn_elements(const ModelArgs& a, int64_t t, int64_t layer) {
  if (!a.moe.is_moe_layer(layer)) {
    return 3 * a.ffn_hidden_dim() / t;
  }
  const MoeArgs& m = a.moe;
  return (2 * m.top_k * a.dim + 3 * m.top_k * m.expert_hidden +
          3 * m.shared_experts * m.expert_hidden) /
         t;
}

/// Bytes per token a mixture of experts' routing keeps for backward, not
/// in the compute dtype: the router's float32 scores (softmax's or
/// sigmoid's output), the chosen weights, their normalisation and their
/// copy per row (float32), and the int64 indices its gathers and scatters
/// read (the choices, the rows' tokens, their order); 0 for a dense block.
int64_t routing_bytes(const ModelArgs& a, int64_t t, int64_t layer) {
  if (!a.moe.is_moe_layer(layer)) {
    return 0;
  }
  const int64_t k = a.moe.top_k;
  return (a.moe.num_experts * 4 + 3 * k * 4 + 3 * k * 8) / t;
}

/// The elements per token one transformer block leaves saved for backward,
/// without checkpointing, split `t` ways as tensor and sequence parallel
/// split it (parallel_hidden_shards): the two norms' inputs (T / t positions),
/// their outputs gathered for the projections (whole T), q, k and v after RoPE
/// (k and v expanded to the query heads when grouped), attention's output and
/// its copy laid out for wo, and the feed-forward's (ffn_elements); with
/// per-head q/k norms, their inputs too. `kv_expanded`: attention takes k
/// and v expanded to the query heads (context parallel's takes them
/// grouped).
int64_t block_elements(
    const ModelArgs& a, int64_t t, bool kv_expanded, int64_t layer) {
  const int64_t q = a.n_heads * a.head_dim();
  const int64_t kv = a.kv_heads() * a.head_dim();
  const int64_t kv_saved = kv_expanded && a.kv_heads() < a.n_heads ? q : kv;
  const int64_t qk_norm_inputs = a.qk_norm ? (q + kv) / t : 0;
  return 2 * a.dim / t + 2 * a.dim + (q + 2 * kv_saved) / t + 2 * q / t +
         ffn_elements(a, t, layer) + qk_norm_inputs;
}

/// Under the op-selective policy: the block's input and the outputs of the
/// seven matmuls and attention (wo's and w2's whole-sequence partial sums
/// before their reduce-scatter). A mixture of experts' Linear layers are
/// its router's gate (E logits a token) and its shared experts' (their w1
/// and w3 outputs; w2's as a dense block's); its routed experts' products
/// are recomputed.
int64_t block_elements_op(const ModelArgs& a, int64_t t, int64_t layer) {
  const int64_t q = a.n_heads * a.head_dim();
  const int64_t kv = a.kv_heads() * a.head_dim();
  const int64_t ffn = a.moe.is_moe_layer(layer)
                          ? (a.moe.num_experts +
                             2 * a.moe.shared_experts * a.moe.expert_hidden) /
                                t
                          : 2 * a.ffn_hidden_dim() / t;
  return a.dim / t + (2 * q + 2 * kv) / t + 2 * a.dim + ffn;
}

/// Activations of one microbatch of `tokens` in a chunk: what it leaves
/// saved for backward, and the most a checkpointed block's recomputation
/// holds at once in backward (one block at a time).
struct StageActivations {
  int64_t saved = 0;
  int64_t recompute = 0;
};

/// What attention keeps for backward per sequence of `seq_len` and block
/// beyond q, k, v and its output, split `t` ways (parallel_hidden_shards: a
/// slice of the heads each): on the CPU the probabilities of the unmasked half
/// (causal_attention's, in the compute dtype); on CUDA
/// scaled_dot_product_attention's float32 log-sum-exp per row. Where
/// context parallel splits the sequence `context_shards` ways, its gathered
/// attention's: the whole sequence's keys and values (this rank's slice of
/// the key/value heads) and a float32 log-sum-exp per row of its shard.
/// Under document masking in one process (`documents`), the block engine's
/// float32 log-sum-exp per row.
int64_t attention_bytes(
    const ModelArgs& a,
    int64_t seq_len,
    int64_t t,
    bool cuda,
    int64_t dtype_bytes,
    int64_t context_shards,
    bool documents) {
  const int64_t heads = a.n_heads / t;
  if (context_shards > 1) {
    const int64_t kv_heads = std::max<int64_t>(a.kv_heads() / t, 1);
    return 2 * kv_heads * a.head_dim() * seq_len * dtype_bytes +
           heads * (seq_len / context_shards) * 4;
  }
  if (cuda || documents) {
    return heads * seq_len * 4;
  }
  const bool kernel = dtype_bytes == 4;
  return heads * models::causal_attention_saved_elements(seq_len, kernel) *
         dtype_bytes;
}

/// `ac`: the section as it applies to this stage (mode none where
/// activation_checkpoint.stages leaves it out). `attention`: attention's
/// bytes per block for the microbatch (attention_bytes x its sequences),
/// kept by a block that saves everything and by the one recomputing; the
/// op-selective policy keeps attention's output only and its backward
/// recomputes the rest.
StageActivations stage_activations(
    const ModelArgs& args,
    const ChunkSpec& chunk,
    const ActivationCheckpointConfig& ac,
    int64_t tokens,
    int64_t attention,
    int64_t t,
    int64_t dtype_bytes,
    bool kv_expanded) {
  const int64_t input = args.dim / t;
  const int64_t end = chunk.end_layer < 0 ? args.n_layers : chunk.end_layer;
  // Per token: elements in the compute dtype, and bytes besides.
  int64_t kept = 0;
  int64_t kept_bytes = 0;
  int64_t kept_attention = 0;  // blocks keeping attention's saved tensors
  int64_t recompute_most = 0;  // the most one block recomputes at once
  for (int64_t i = chunk.first_layer; i < end; ++i) {
    const int64_t full = block_elements(args, t, kv_expanded, i);
    const int64_t routing = routing_bytes(args, t, i);
    const auto recomputing = [&](int64_t elements, int64_t extra) {
      recompute_most = std::max(
          recompute_most, (elements * dtype_bytes + routing) * tokens + extra);
    };
    if (ac.mode == "full" ||
        (ac.mode == "selective" && ac.selective == "layer" &&
         (i + 1) % ac.selective_every == 0)) {
      kept += input;
      recomputing(full, attention);
    } else if (ac.mode == "selective" && ac.selective == "op") {
      const int64_t op = block_elements_op(args, t, i);
      kept += op;
      recomputing(full - op, 0);
    } else {
      kept += full;
      kept_bytes += routing;
      kept_attention += attention;
    }
  }
  StageActivations a;
  a.saved = (kept * dtype_bytes + kept_bytes) * tokens + kept_attention;
  a.recompute = recompute_most;
  if (chunk.embedding) {
    a.saved += tokens * 8;  // the ids the lookup's backward reads
  }
  if (chunk.output) {
    // The final norm's input and output (gathered), and the loss's float32
    // logits and log-softmax over this rank's vocabulary columns.
    a.saved += (args.dim / t + args.dim) * tokens * dtype_bytes;
    a.saved += 2 * tokens * ((args.vocab_size + t - 1) / t) * 4;
  }
  return a;
}

/// What fully_shard holds of one rank's units beyond their shards.
struct FsdpHeld {
  /// Gathered parameters kept after forward (reshard never, or default
  /// pipelined).
  bool kept = false;
  /// Whole gradients outlive a backward (passes accumulate before the
  /// reduction).
  bool whole_grads_held = false;
  bool pipelined = false;
  /// Elements, whole after tensor parallel: the units gathered all step
  /// (every unit when kept, else the root), the largest block, every unit.
  int64_t gathered = 0;
  int64_t largest_block = 0;
  int64_t all = 0;
  /// Bytes of one microbatch's activations in one of the rank's stages.
  int64_t one_microbatch = 0;
};

/// The gathered parameters and the whole gradients accumulated into them,
/// in the compute dtype.
int64_t fsdp_buffer_bytes(const FsdpHeld& h, int64_t dtype_bytes) {
  if (h.kept) {
    return 2 * h.gathered * dtype_bytes;  // every unit and its gradient
  }
  // Freed after forward: the root and two blocks (the one computing and
  // the one prefetched), and their gradients.
  const int64_t freed = (h.gathered + 2 * h.largest_block) * dtype_bytes;
  if (!h.whole_grads_held) {
    return 2 * freed;
  }
  // Every unit's whole gradient stays until the reduction. Pipelined, a
  // backward gathers a unit again and nothing frees it until the next
  // forward: after a backward the stage holds every unit whole, with one
  // microbatch fewer in flight than after a forward.
  const int64_t all = h.all * dtype_bytes;
  return all + (h.pipelined ? std::max(freed, all - h.one_microbatch) : freed);
}

std::pair<int64_t, std::string> compute_dtype(
    const JobConfig& config, bool cuda) {
  const std::string& p = config.training.mixed_precision_param;
  if (p == "bfloat16") {
    return {2, "bfloat16"};
  }
  if (p == "auto") {
    if (cuda) {
      return {2, "bfloat16 (auto, on CUDA)"};
    }
    return {
        4,
        "float32 (auto on this CPU, before its start-up probe; a run may "
        "choose bfloat16)"};
  }
  return {4, "float32"};
}

std::string describe_ac(const ActivationCheckpointConfig& ac) {
  std::string stages;
  for (const int64_t s : ac.stages) {
    stages += (stages.empty() ? " on stages " : ", ") + std::to_string(s);
  }
  if (ac.mode == "none") {
    return ac.mode;
  }
  if (ac.mode != "selective") {
    return ac.mode + stages;
  }
  if (ac.selective == "op") {
    return "selective op" + stages;
  }
  return "selective layer, every " + std::to_string(ac.selective_every) +
         stages;
}

}  // namespace

size_t DryRunStageCache::KeyHash::operator()(const Key& key) const {
  // FNV-1a over the values.
  uint64_t h = 1469598103934665603ull;
  for (const int64_t v : key) {
    h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  }
  return static_cast<size_t>(h);
}

DryRunStageCache::Entry DryRunStageCache::get(
    const Key& key, const std::function<Entry()>& make) {
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (const auto it = entries_.find(key); it != entries_.end()) {
      return it->second;
    }
  }
  const Entry entry = make();
  std::unique_lock<std::shared_mutex> lock(mutex_);
  entries_.emplace(key, entry);
  return entry;
}

namespace {

/// Whether `rank` sits at position 0 of every axis within its stage (the
/// axes whose ranks hold the same parameters): the rank that holds the most
/// of each ceil split. From the rank's digits, without its coordinates (a
/// plan asks this of every rank of every candidate).
bool first_in_stage(const ParallelDims& dims, int64_t rank) {
  for (size_t i = dims.axes.size(); i-- > 0;) {
    const auto& axis = dims.axes[i];
    if (!axis.splits_model && rank % axis.degree != 0) {
      return false;
    }
    rank /= axis.degree;
  }
  return true;
}

/// What every rank's figures follow from: the model, the compute dtype,
/// the stages and where they live, and the memory rules' switches.
struct DryRunSetup {
  const ModelSpec* spec = nullptr;
  ModelArgs args;
  bool cuda = false;
  int64_t dtype_bytes = 4;
  /// The ways the enabled parallelisms split each block's activations.
  int64_t hidden_shards = 1;
  /// The ways context parallel splits each sequence (every rank holds
  /// seq_len / context_shards positions).
  int64_t context_shards = 1;
  int64_t pp_degree = 1;
  int64_t shard_degree = 1;
  /// Sequences per microbatch (the local batch without pipelining).
  int64_t rows = 1;
  std::vector<ChunkSpec> chunks;
  std::vector<int64_t> stage_to_rank{0};
  /// Per pipeline rank, the most microbatches whose activations it holds.
  std::vector<int64_t> peak;
  RecomputePlan recompute;
  /// fully_shard keeps each unit gathered after its forward.
  bool keep_gathered = false;
  /// The whole gradients outlive a backward.
  bool whole_grads_held = false;
};

/// The model, the dtype and the device into `report`, and the setup.
DryRunSetup describe_model(
    const JobConfig& config,
    const DryRunOptions& options,
    DryRunReport& report) {
  DryRunSetup setup;
  const ParallelDims& dims = report.dims;
  setup.spec =
      &model_registry().get(config.model.name, config.origin("model.name"));
  setup.args = model_flavor(
      *setup.spec, config.model.flavor, config.origin("model.flavor"));
  std::tie(setup.args.vocab_size, report.vocab_source) =
      job_vocabulary(config, setup.args);
  report.model = config.model.name;
  report.flavor = config.model.flavor;
  report.vocab_size = setup.args.vocab_size;
  report.model_parameters = setup.spec->num_params(setup.args);
  report.active_parameters =
      report.model_parameters -
      (setup.args.num_params() - setup.args.active_params());
  if (const auto problem = parallelism_problem(config, dims, setup.args)) {
    throw_config_error(config.origin(problem->key), problem->message);
  }
  setup.cuda = options.device().empty() ? torch::cuda::is_available()
                                        : options.device() == "cuda";
  std::string dtype;
  std::tie(setup.dtype_bytes, dtype) = compute_dtype(config, setup.cuda);
  report.compute_dtype = dtype;
  report.device = setup.cuda ? "cuda" : "cpu";
  setup.context_shards =
      parallel_sequence_split(config, dims, dist::mesh_coord(dims, 0)).shards;
  report.attention_saved =
      setup.context_shards > 1
          ? "the whole sequence's keys and values and a float32 log-sum-exp "
            "per row (context parallel's gathered attention)"
      : config.training.document_mask
          ? "its float32 log-sum-exp per row (document masking's tiles)"
      : setup.cuda
          ? "its float32 log-sum-exp per row (scaled_dot_product_attention)"
      : setup.dtype_bytes == 4
          ? "the probabilities of the unmasked half (the CPU kernel's layout)"
          : "the probabilities of the unmasked half (blocks of " +
                std::to_string(models::kAttentionBlockRows) + " rows)";
  report.activation_checkpoint = describe_ac(config.activation_checkpoint);
  setup.hidden_shards = parallel_hidden_shards(config, dims);
  setup.pp_degree = dims.degree(kPipelineAxis);
  setup.shard_degree = dims.degree(kShardContextGroup);
  return setup;
}

/// The stages and where they live, as PipelineTrainerBuilder makes them
/// (its own schedule and split), into `setup` and `report`; the rules
/// that follow from them.
void place_stages(
    const JobConfig& config,
    const DryRunOptions& options,
    DryRunSetup& setup,
    DryRunReport& report) {
  const auto& p = config.parallelism;
  setup.chunks = {ChunkSpec{0, setup.args.n_layers, true, true}};
  setup.peak.assign(setup.pp_degree, 1);
  setup.rows = config.training.local_batch_size;
  if (setup.pp_degree > 1) {
    std::optional<pipeline::Schedule> made;
    if (options.schedule() == nullptr) {
      made = pipeline_schedule(config, setup.pp_degree);
    }
    setup.rows = p.pipeline_parallel_microbatch_size;
    const pipeline::Schedule& schedule = made ? *made : *options.schedule();
    setup.chunks = pipeline_stages(config, schedule, setup.args.n_layers);
    setup.stage_to_rank = schedule.stage_to_rank;
    setup.peak =
        options.peak_microbatches().empty()
            ? pipeline::plan_schedule(schedule, pipeline::SimulationCosts())
                  .simulation.peak_activations
            : options.peak_microbatches();
    report.schedule = schedule.name;
    report.num_stages = schedule.num_stages;
    report.microbatches = schedule.microbatches;
  } else if (
      const auto problem = config.activation_checkpoint.stages_problem(1)) {
    throw_config_error(config.origin(problem->key), problem->message);
  }
  report.microbatch_tokens =
      setup.rows * config.training.seq_len / setup.context_shards;
  if (setup.context_shards > 1) {
    // Each rank sends its keys and values to the cp - 1 others (the
    // all-gather) and as many gradient bytes back (the reduce-scatter).
    const int64_t cp = setup.context_shards;
    const int64_t t = setup.hidden_shards;
    const int64_t kv_heads = std::max<int64_t>(setup.args.kv_heads() / t, 1);
    DryRunReport::Context c;
    c.cp = cp;
    c.chunk_len = config.training.seq_len / (2 * cp);
    c.bytes_per_layer = 2 * (cp - 1) * 2 * report.microbatch_tokens * kv_heads *
                        setup.args.head_dim() * setup.dtype_bytes;
    report.context = c;
  }
  if (setup.args.moe.enabled()) {
    const auto& moe = setup.args.moe;
    DryRunReport::Experts e;
    e.experts = moe.num_experts;
    e.top_k = moe.top_k;
    e.moe_layers = std::max<int64_t>(
        0,
        setup.args.n_layers -
            std::min(setup.args.n_layers, moe.first_dense_layers));
    e.ep = report.dims.degree(kExpertAxis);
    if (e.ep > 1) {
      const int64_t rows = report.microbatch_tokens * moe.top_k;
      e.all_to_all_bytes_per_layer =
          4 * (e.ep - 1) * rows / e.ep * setup.args.dim * setup.dtype_bytes +
          (e.ep - 1) * (moe.num_experts / e.ep) * 8;
    }
    report.experts = e;
  }
  setup.recompute = RecomputePlan::from(config.activation_checkpoint);
  // fully_shard frees a unit's gathered parameters after its forward unless
  // it keeps them (pipeline stages by default).
  setup.keep_gathered = !fsdp::frees_after_forward(
      fsdp::parse_reshard_after_forward(p.fsdp_reshard_after_forward),
      setup.pp_degree > 1);
  // The whole gradients outlive a backward when more passes accumulate
  // into them before the reduction: a stage's microbatches (reduced at
  // REDUCE_GRAD) or micro-steps without sync.
  setup.whole_grads_held =
      setup.pp_degree > 1 || config.training.gradient_accumulation_steps > 1;
}

/// What a rank at `coord` stores of stage `s`'s parameters and what the
/// model steps leave it computing with (which a data step such as
/// fully_shard gathers), by unit.
DryRunStageCache::Entry count_stage(
    const JobConfig& config,
    const ParallelDims& dims,
    const DryRunSetup& setup,
    const dist::MeshCoord& coord,
    size_t s) {
  DryRunStageCache::Entry e;
  std::map<std::string, int64_t> unit;  // "layers.4" or "" (the root)
  const auto enabled = enabled_parallelisms(config, dims);
  for (const auto& [fqn, shape] :
       setup.spec->parameter_shapes(setup.args, setup.chunks[s])) {
    const ParallelShapes held = parallel_stored_shapes(
        enabled, config, dims, setup.args, fqn, shape, coord);
    const int64_t stored = numel(held.stored);
    e.parameters += stored;
    const int64_t slice = numel(held.model);
    e.sliced_elements += slice;
    const bool block = fqn.rfind("layers.", 0) == 0;
    unit[block ? fqn.substr(0, fqn.find('.', 7)) : ""] += slice;
    if (!block) {
      e.root_parameters += stored;
    }
    if (models::is_routed_expert(fqn)) {
      e.expert_parameters += stored;
    }
  }
  for (const auto& [name, elements] : unit) {
    if (!name.empty()) {
      e.largest_block = std::max(e.largest_block, elements);
    } else {
      e.root_unit = elements;
    }
    e.all_units += elements;
  }
  return e;
}

/// Keyed by stage `s`'s chunk, the rank's place on every axis within the
/// stage and the derived axes' degrees: what it stores follows from them
/// alone.
DryRunStageCache::Key stage_key(
    const ParallelDims& dims,
    const DryRunSetup& setup,
    const dist::MeshCoord& coord,
    size_t s) {
  const ChunkSpec& chunk = setup.chunks[s];
  DryRunStageCache::Key key{
      chunk.first_layer,
      chunk.end_layer,
      chunk.embedding ? 1 : 0,
      chunk.output ? 1 : 0};
  for (const auto& axis : dims.axes) {
    if (!axis.splits_model) {
      key.push_back(axis.degree);
      key.push_back(coord.at(axis.name));
    }
  }
  // The derived axes re-slice those (expert parallel's ep: how many
  // experts each rank stores).
  for (const auto& axis : dims.derived) {
    key.push_back(axis.degree);
    key.push_back(axis.stride);
  }
  return key;
}

/// Elements of a rank's units as the model steps leave them (whole after
/// tensor parallel's cut, before fully_shard's).
struct UnitElements {
  int64_t largest_block = 0;
  /// Gathered all step: every unit's when kept, else the root's.
  int64_t gathered = 0;
  /// Every unit's.
  int64_t sliced = 0;
};

/// `r`'s weights, gradients, optimizer state, buffers, activation peak and
/// total, from its stages' figures and its `units`.
void add_totals(
    const DryRunSetup& setup, const UnitElements& units, DryRunRank& r) {
  r.weight_bytes = r.parameters * kMasterBytes;
  r.gradient_bytes = r.parameters * kMasterBytes;
  r.optimizer_bytes = r.parameters * kOptimizerBytesPerElement;
  r.peak_microbatches = setup.peak.at(r.pp);
  if (setup.shard_degree > 1) {
    FsdpHeld held;
    held.kept = setup.keep_gathered;
    held.whole_grads_held = setup.whole_grads_held;
    held.pipelined = setup.pp_degree > 1;
    held.gathered = units.gathered;
    held.largest_block = units.largest_block;
    held.all = units.sliced;
    held.one_microbatch = r.activation_bytes_per_microbatch /
                          static_cast<int64_t>(r.stages.size());
    r.buffer_bytes = fsdp_buffer_bytes(held, setup.dtype_bytes);
  } else if (setup.dtype_bytes < kMasterBytes) {
    r.buffer_bytes = units.sliced * setup.dtype_bytes;  // the step's casts
  }
  // The simulator counts microbatches of one stage: the rank's stages'
  // mean at that count, and one block recomputing.
  r.activation_peak_bytes = r.activation_bytes_per_microbatch *
                                r.peak_microbatches /
                                static_cast<int64_t>(r.stages.size()) +
                            r.recompute_bytes;
  r.total_bytes = r.weight_bytes + r.gradient_bytes + r.optimizer_bytes +
                  r.buffer_bytes + r.activation_peak_bytes;
}

/// The figures of `rank` (at `coord`): its stages' parameters and
/// activations, then its weights, gradients, optimizer state, buffers and
/// activation peak.
DryRunRank rank_figures(
    const JobConfig& config,
    const DryRunOptions& options,
    const DryRunSetup& setup,
    const DryRunReport& report,
    int64_t rank,
    const dist::MeshCoord& coord) {
  const ParallelDims& dims = report.dims;
  DryRunRank r;
  r.rank = rank;
  r.pp = coord.at(kPipelineAxis);
  for (const auto& axis : dims.axes) {
    r.coordinates[axis.name] = coord.at(axis.name);
  }
  UnitElements units;
  const int64_t attention = setup.rows * attention_bytes(
                                             setup.args,
                                             config.training.seq_len,
                                             setup.hidden_shards,
                                             setup.cuda,
                                             setup.dtype_bytes,
                                             setup.context_shards,
                                             config.training.document_mask);
  for (size_t s = 0; s < setup.chunks.size(); ++s) {
    if (setup.stage_to_rank[s] != r.pp) {
      continue;
    }
    DryRunStage stage;
    stage.stage = static_cast<int64_t>(s);
    stage.holds = pipeline::describe_chunk(setup.chunks[s]);
    const auto count = [&] {
      return count_stage(config, dims, setup, coord, s);
    };
    const DryRunStageCache::Entry e =
        options.stage_cache() ? options.stage_cache()->get(
                                    stage_key(dims, setup, coord, s), count)
                              : count();
    stage.parameters = e.parameters;
    stage.root_parameters = e.root_parameters;
    stage.expert_parameters = e.expert_parameters;
    units.sliced += e.sliced_elements;
    units.largest_block = std::max(units.largest_block, e.largest_block);
    units.gathered += setup.keep_gathered ? e.all_units : e.root_unit;
    ActivationCheckpointConfig ac = config.activation_checkpoint;
    if (!setup.recompute.checkpoints_stage(stage.stage)) {
      ac.mode = "none";
    }
    const StageActivations activations = stage_activations(
        setup.args,
        setup.chunks[s],
        ac,
        report.microbatch_tokens,
        attention,
        setup.hidden_shards,
        setup.dtype_bytes,
        /*kv_expanded=*/setup.context_shards == 1 &&
            !config.training.document_mask);
    stage.activation_bytes = activations.saved;
    stage.recompute_bytes = activations.recompute;
    r.recompute_bytes = std::max(r.recompute_bytes, activations.recompute);
    r.parameters += stage.parameters;
    r.activation_bytes_per_microbatch += stage.activation_bytes;
    r.stages.push_back(std::move(stage));
  }
  add_totals(setup, units, r);
  return r;
}

}  // namespace

DryRunReport dry_run(
    const JobConfig& config, int64_t world_size, const DryRunOptions& options) {
  register_builtin_parallelisms();
  DryRunReport report;
  report.dims = ParallelDims::from_config(config, world_size);
  const ParallelDims& dims = report.dims;
  DryRunSetup setup = describe_model(config, options, report);
  place_stages(config, options, setup, report);
  for (int64_t rank = 0; rank < dims.world_size; ++rank) {
    if (options.first_rank_per_pipeline_rank() && !first_in_stage(dims, rank)) {
      continue;
    }
    const dist::MeshCoord coord = dist::mesh_coord(dims, rank);
    report.ranks.push_back(
        rank_figures(config, options, setup, report, rank, coord));
  }
  return report;
}

}  // namespace baton
