#include "planner/plan.h"

#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/error.h"
#include "models/model_spec.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/synthesis.h"
#include "planner/dry_run.h"
#include "planner/plan_text.h"

namespace baton {

namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

using plan_detail::describe_ac;
using plan_detail::describe_layout;
using plan_detail::describe_split;
using plan_detail::gib;
using plan_detail::on_cuda;
using plan_detail::schedule_label;

/// The vocabulary is the tokenizer's, or the flavor's when its file is
/// absent.
llama::ModelArgs plan_model_args(const JobConfig& base) {
  const auto& spec =
      model_registry().get(base.model.name, base.origin("model.name"));
  llama::ModelArgs args =
      model_flavor(spec, base.model.flavor, base.origin("model.flavor"));
  // One rank: every registered axis at 1.
  register_builtin_parallelisms();
  JobConfig one = base;
  for (const auto& p : registered_parallelisms()) {
    if (p.axis) {
      one.set_integer(p.axis->degree_key, 1);
    }
  }
  args.vocab_size = dry_run(one, 1).vocab_size;
  return args;
}

namespace {

/// The bytes of an activation element: the cost file's measured dtype, else
/// the config's as the dry run takes it (auto is bfloat16 on CUDA, and a
/// plan is for accelerators).
int64_t compute_dtype_bytes(const JobConfig& config, const PlanCosts* costs) {
  if (costs != nullptr && !costs->compute_dtype.empty()) {
    return costs->compute_dtype == "float32" ? 4 : 2;
  }
  return config.training.mixed_precision_param == "float32" ? 4 : 2;
}

}  // namespace

PlanCosts plan_costs_from_flops(
    const JobConfig& config, const FlopsCostOptions& options) {
  const llama::ModelArgs args = plan_model_args(config);
  const int64_t seq = config.training.seq_len;
  const double rate = options.peak_tflops() * 1e12 * options.efficiency();
  const double block_params = static_cast<double>(args.params_per_layer());
  const double q = static_cast<double>(args.n_heads * args.head_dim());
  const double block_flops =
      2.0 * block_params + 4.0 * static_cast<double>(seq) * q;
  const double output_flops =
      2.0 * static_cast<double>(args.vocab_size * args.dim);
  PlanCosts costs;
  char text[512];
  std::snprintf(
      text,
      sizeof(text),
      "FLOPs at %.0f%% of %.0f TFLOP/s: per token a block's forward is 2 x "
      "%.0f parameters + 4 x seq_len %lld x %lld (attention) = %.4g FLOPs, "
      "the output's 2 x vocab %lld x dim %lld = %.4g, the embedding's 0; "
      "B = 2 F, I = W = F. Links: H100 machines of 8 (NVLink: 450 GB/s "
      "p2p, 360 GB/s bus for collectives, 5 us), 400 Gb/s InfiniBand per "
      "GPU across (45 GB/s, 15 us); memory 80 GiB",
      options.efficiency() * 100.0,
      options.peak_tflops(),
      block_params,
      static_cast<long long>(seq),
      static_cast<long long>(q),
      block_flops,
      static_cast<long long>(args.vocab_size),
      static_cast<long long>(args.dim),
      output_flops);
  costs.description = config.model.name + " " + config.model.flavor +
                      ", seq_len " + std::to_string(seq) + ", costs from FLOPs";
  costs.obtained = text;
  for (const int64_t rows : options.rows()) {
    const double tokens = static_cast<double>(rows * seq);
    const auto passes = [&](double flops) {
      const double f = flops * tokens / rate;
      return PassCosts{f, 2.0 * f, f, f};
    };
    MicrobatchCosts m;
    m.rows = rows;
    m.block = passes(block_flops);
    m.output = passes(output_flops);
    costs.microbatches.push_back(m);
  }
  costs.ranks_per_node = 8;
  const LinkCosts ib{15e-6, 45e9};
  costs.p2p = {ib, LinkCosts{5e-6, 450e9}};
  costs.all_reduce = {ib, LinkCosts{5e-6, 360e9}};
  costs.all_gather = costs.all_reduce;
  costs.reduce_scatter = costs.all_reduce;
  costs.memory_per_rank_gib = 80.0;
  costs.device = "cuda";
  return costs;
}

namespace {

// ------------------------------------------------------------- the model

/// The costs at `rows`: the nearest listed size's, scaled by rows.
MicrobatchCosts costs_at(
    const std::vector<MicrobatchCosts>& list, int64_t rows) {
  const MicrobatchCosts* best = &list.front();
  for (const auto& m : list) {
    if (std::abs(std::log(static_cast<double>(m.rows) / rows)) <
        std::abs(std::log(static_cast<double>(best->rows) / rows))) {
      best = &m;
    }
  }
  const double s = static_cast<double>(rows) / best->rows;
  const auto scale = [s](PassCosts c) {
    return PassCosts{c.f * s, c.b * s, c.i * s, c.w * s};
  };
  return {
      rows,
      scale(best->block),
      scale(best->embedding),
      scale(best->output),
      best->send_s * s,
      best->recv_s * s,
      scale(best->spread)};
}

/// A group of `size` ranks `stride` apart lies on one machine when the
/// machine holds its whole span.
const LinkCosts& link_for(
    const CommCosts& comm,
    const PlanCosts& costs,
    int64_t size,
    int64_t stride) {
  const bool intra =
      costs.ranks_per_node == 0 || stride * size <= costs.ranks_per_node;
  return intra && comm.intra_node ? *comm.intra_node : comm.inter_node;
}

/// Ring collectives: all_gather / reduce_scatter move (n-1)/n of the whole
/// buffer per rank, all_reduce twice that.
double collective_s(
    const CommCosts& comm,
    const PlanCosts& costs,
    int64_t n,
    int64_t stride,
    double whole_bytes,
    double factor) {
  if (n <= 1) {
    return 0.0;
  }
  const LinkCosts& link = link_for(comm, costs, n, stride);
  return link.latency_s + factor * (n - 1) / n * whole_bytes / link.bandwidth;
}

/// `units` collectives of one kind that together move `whole_bytes` (each
/// fully_shard unit its own): the bytes' time once, a latency per unit.
double unit_collectives_s(
    const CommCosts& comm,
    const PlanCosts& costs,
    int64_t n,
    int64_t stride,
    double whole_bytes,
    double factor,
    int64_t units) {
  const double once = collective_s(comm, costs, n, stride, whole_bytes, factor);
  return once == 0.0 ? 0.0
                     : once + static_cast<double>(units - 1) *
                                  link_for(comm, costs, n, stride).latency_s;
}

/// The compute and tensor-parallel time of one pass over the pieces a
/// stage holds.
struct StageTimes {
  double f = 0.0;
  double b = 0.0;
  double i = 0.0;
  double w = 0.0;
  /// The standard deviation of each pass (the cost file's `spread` of one
  /// block; a stage's blocks vary independently, so sqrt(layers) x that).
  PassCosts sd;
};

struct CostModel {
  const PlanCosts& costs;
  int64_t seq_len = 0;
  int64_t dim = 0;
  int64_t dtype_bytes = 2;
  int64_t reduce_bytes = 4;
  /// The parallelisms whose axes split the blocks, innermost last.
  std::vector<const Parallelism*> searched = searched_parallelisms();
  /// The dry runs' stage figures, shared by every candidate of the search.
  std::shared_ptr<DryRunStageCache> stage_cache =
      std::make_shared<DryRunStageCache>();

  /// The costs measured at `c`'s split of the blocks: where a single
  /// searched axis splits them and the cost file has its degree; else
  /// null.
  const std::vector<MicrobatchCosts>* measured_split(
      const PlanCandidate& c) const {
    if (c.splits.size() != 1) {
      return nullptr;
    }
    const auto& [axis, degree] = *c.splits.begin();
    for (const Parallelism* p : searched) {
      if (p->axis->name != axis) {
        continue;
      }
      const auto by_name = costs.split_costs.find(p->name);
      if (by_name == costs.split_costs.end()) {
        return nullptr;
      }
      const auto at = by_name->second.find(degree);
      return at == by_name->second.end() ? nullptr : &at->second;
    }
    return nullptr;
  }

  /// The collectives the searched axes add to one pass of a block of
  /// `act` activation bytes, as their PlanSearch models them; each axis's
  /// ranks lie the product of the inner axes' degrees apart.
  double split_collectives_s(const PlanCandidate& c, double act) const {
    double seconds = 0.0;
    int64_t stride = 1;
    for (auto p = searched.rbegin(); p != searched.rend(); ++p) {
      const int64_t n = c.split((*p)->axis->name);
      const PlanSearch& search = *(*p)->plan;
      seconds +=
          static_cast<double>(search.block_all_gathers) *
              collective_s(costs.all_gather, costs, n, stride, act, 1.0) +
          static_cast<double>(search.block_reduce_scatters) *
              collective_s(costs.reduce_scatter, costs, n, stride, act, 1.0);
      stride *= n;
    }
    return seconds;
  }

  /// The ways `c`'s split cuts the activations between pipeline stages
  /// (Parallelism::sequence_shards).
  int64_t sequence_shards(const PlanCandidate& c) const {
    int64_t shards = 1;
    for (const Parallelism* p : searched) {
      const int64_t n = c.split(p->axis->name);
      if (n > 1 && p->sequence_shards) {
        shards *= p->sequence_shards(ParallelDims::of({{p->axis->name, n}}, n));
      }
    }
    return shards;
  }

  /// Seconds of one stage's passes at `rows`, with `layers` blocks; `index`
  /// is its global stage index (whether it checkpoints).
  StageTimes stage(
      const PlanCandidate& c,
      int64_t rows,
      int64_t layers,
      bool embedding,
      bool output,
      int64_t index = 0) const {
    // Measured at this split of the blocks (the collectives inside), or
    // the whole pieces' costs over the ranks sharing a block plus the
    // collectives their axes model (each block's forward, as many again
    // in its backward).
    const auto* measured = measured_split(c);
    const MicrobatchCosts m =
        costs_at(measured ? *measured : costs.microbatches, rows);
    const double t = measured ? 1.0 : static_cast<double>(c.split_ranks());
    const double act = static_cast<double>(rows * seq_len * dim * dtype_bytes);
    const double split_comm = measured ? 0.0 : split_collectives_s(c, act);
    const double block_f = m.block.f / t + split_comm;
    const double recompute = c.checkpoints_stage(index) ? block_f : 0.0;
    const double L = static_cast<double>(layers);
    StageTimes s;
    s.f = L * block_f;
    s.b = L * (m.block.b / t + split_comm + recompute);
    s.i = L * (m.block.i / t + split_comm + recompute);
    s.w = L * m.block.w / t;
    const PassCosts& v = m.spread;
    const double root_l = std::sqrt(L);
    const double redo = c.checkpoints_stage(index) ? v.f * v.f : 0.0;
    s.sd.f = root_l * v.f / t;
    s.sd.b = root_l * std::sqrt(v.b * v.b + redo) / t;
    s.sd.i = root_l * std::sqrt(v.i * v.i + redo) / t;
    s.sd.w = root_l * v.w / t;
    for (const auto& [held, piece] :
         {std::pair{embedding, m.embedding}, std::pair{output, m.output}}) {
      if (held) {
        s.f += piece.f / t;
        s.b += piece.b / t;
        s.i += piece.i / t;
        s.w += piece.w / t;
      }
    }
    return s;
  }

  /// From a SEND to its data usable on the next pipeline rank: this
  /// rank's slice of the (rows, T, dim) activation (sequence_shards).
  double p2p_s(const PlanCandidate& c, int64_t rows) const {
    const int64_t stride = c.dp_replicate * c.dp_shard * c.split_ranks();
    const LinkCosts& link = link_for(costs.p2p, costs, 2, stride);
    const double bytes =
        static_cast<double>(rows * seq_len * dim * dtype_bytes) /
        static_cast<double>(sequence_shards(c));
    return link.latency_s + bytes / link.bandwidth;
  }

  /// Data-parallel gradient reduction of a rank storing `stored` parameter
  /// elements in `units` fully_shard units (root and blocks over its
  /// stages), after the pipeline (not overlapped): replicate all-reduces
  /// the gradients (stride: the ranks sharing a block, k); fully_shard
  /// reduce-scatters the whole gradients over its shard group (size
  /// dp_shard, stride k) and, with HSDP, all-reduces the 1/dp_shard it
  /// keeps over the replicas (size dp_replicate, stride k x dp_shard), as
  /// Unit::to_sharded does: each unit its own collectives, so one latency
  /// per unit.
  double dp_sync_s(
      const PlanCandidate& c, int64_t stored, int64_t units) const {
    const double n = static_cast<double>(stored);
    const int64_t k = c.split_ranks();
    if (c.dp_shard == 1) {
      return collective_s(
          costs.all_reduce, costs, c.dp_replicate, k, n * reduce_bytes, 2.0);
    }
    return unit_collectives_s(
               costs.reduce_scatter,
               costs,
               c.dp_shard,
               k,
               n * c.dp_shard * reduce_bytes,
               1.0,
               units) +
           unit_collectives_s(
               costs.all_reduce,
               costs,
               c.dp_replicate,
               k * c.dp_shard,
               n * reduce_bytes,
               2.0,
               units);
  }

  /// fully_shard's all-gathers of one stage in a step (size dp_shard,
  /// stride: the ranks sharing a block; the compute dtype): each of its
  /// `block_units` blocks `block_gathers` times, its root (embedding, norm,
  /// output: never freed after its forward) once; each unit gathers alone (one
  /// latency each). `blocks` and `root` are the shard elements this rank
  /// stores.
  double fsdp_gather_s(
      const PlanCandidate& c,
      int64_t blocks,
      int64_t block_units,
      int64_t root,
      int64_t block_gathers) const {
    const auto gather = [&](int64_t elements, int64_t units) {
      return elements == 0
                 ? 0.0
                 : unit_collectives_s(
                       costs.all_gather,
                       costs,
                       c.dp_shard,
                       c.split_ranks(),
                       static_cast<double>(elements) * c.dp_shard * dtype_bytes,
                       1.0,
                       units);
    };
    return static_cast<double>(block_gathers) * gather(blocks, block_units) +
           gather(root, 1);
  }
};

// ------------------------------------------------------------ the search

/// The stages per rank the registered schedule `name` is searched at (its
/// ScheduleSpec's range, capped at `max_v`).
std::vector<int64_t> stages_per_rank_values(
    const std::string& name, int64_t max_v) {
  const pipeline::ScheduleSpec& spec = pipeline::schedule_registry().get(name);
  const int64_t last = spec.max_stages_per_rank == 0
                           ? max_v
                           : std::min(max_v, spec.max_stages_per_rank);
  std::vector<int64_t> v;
  for (int64_t k = spec.min_stages_per_rank; k <= last; ++k) {
    v.push_back(k);
  }
  // A schedule of a fixed count runs it whatever the cap.
  if (v.empty() && spec.min_stages_per_rank == spec.max_stages_per_rank) {
    v.push_back(spec.min_stages_per_rank);
  }
  return v;
}

std::vector<int64_t> even_split(int64_t n_layers, int64_t stages) {
  std::vector<int64_t> layers(stages, n_layers / stages);
  for (int64_t s = 0; s < n_layers % stages; ++s) {
    ++layers[s];
  }
  return layers;
}

/// The first stage `e` block units lighter (the embedding) and the last
/// `o` (the output) than an equal share of layers + e + o; the layers left
/// spread evenly over the middle stages, the extra ones to the earliest.
std::vector<int64_t> balanced_split(
    int64_t n_layers, int64_t stages, double e, double o) {
  const double share = (n_layers + e + o) / stages;
  const int64_t middle_stages = stages - 2;
  const auto edge = [&](double lighter) {
    return std::clamp<int64_t>(
        std::llround(share - lighter), 1, n_layers - middle_stages - 1);
  };
  std::vector<int64_t> layers(stages, 0);
  layers.front() = edge(e);
  layers.back() = stages == 2 ? n_layers - layers.front() : edge(o);
  if (middle_stages > 0) {
    int64_t left = n_layers - layers.front() - layers.back();
    if (left < middle_stages) {
      return even_split(n_layers, stages);
    }
    for (int64_t s = 1; s <= middle_stages; ++s) {
      layers[s] = left / middle_stages + (s <= left % middle_stages ? 1 : 0);
    }
  }
  if (layers.back() < 1) {
    return even_split(n_layers, stages);
  }
  return layers;
}

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
std::vector<int64_t> freed_block_gathers(const pipeline::Schedule& lowered) {
  using pipeline::ActionKind;
  std::vector<int64_t> gathers(lowered.num_stages, 0);
  std::vector<bool> whole(lowered.num_stages, false);
  const auto run = [&](const pipeline::Action& a) {
    if (a.kind == ActionKind::kReduceGrad) {
      whole.at(a.stage) = false;
    }
    if (a.kind != ActionKind::kF && a.kind != ActionKind::kB &&
        a.kind != ActionKind::kI) {
      return;
    }
    if (!whole.at(a.stage)) {
      ++gathers[a.stage];
    }
    whole[a.stage] = a.kind != ActionKind::kF;
  };
  for (const auto& rank : lowered.ranks) {
    for (const auto& slot : rank) {
      if (!slot) {
        continue;
      }
      if (slot->kind == ActionKind::kOverlapFB) {
        run(slot->forward_part());
        run(slot->backward_part());
      } else {
        run(*slot);
      }
    }
  }
  return gathers;
}

using ScheduleKey = std::tuple<std::string, int64_t, int64_t, int64_t>;

void parallel_for(
    int64_t n, int64_t threads, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  const int64_t count = std::max<int64_t>(1, std::min(threads, n));
  for (int64_t t = 0; t < count; ++t) {
    pool.emplace_back([&] {
      for (int64_t k = next++; k < n; k = next++) {
        try {
          fn(k);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) {
            error = std::current_exception();
          }
        }
      }
    });
  }
  for (auto& t : pool) {
    t.join();
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

JobConfig candidate_config(const JobConfig& base, const PlanCandidate& c) {
  JobConfig config = base;
  auto& p = config.parallelism;
  p.data_parallel_replicate_degree = c.dp_replicate;
  p.data_parallel_shard_degree = c.dp_shard;
  for (const Parallelism* searched : searched_parallelisms()) {
    config.set_integer(
        searched->axis->degree_key, c.split(searched->axis->name));
  }
  p.pipeline_parallel_degree = c.pp;
  p.pipeline_parallel_schedule = c.schedule.empty() ? "1F1B" : c.schedule;
  p.pipeline_parallel_stages_per_rank = c.stages_per_rank;
  p.pipeline_parallel_microbatch_size = c.microbatch_size;
  p.pipeline_parallel_layers_per_stage = 0;
  p.pipeline_parallel_schedule_csv.clear();
  p.pipeline_parallel_module_fqns_per_stage =
      c.balanced ? split_fqns(c.layers_per_stage)
                 : std::vector<std::vector<std::string>>{};
  p.fsdp_reshard_after_forward = c.fsdp_reshard;
  config.training.local_batch_size = c.local_batch;
  config.activation_checkpoint.mode = c.activation_checkpoint;
  config.activation_checkpoint.stages = c.checkpoint_stages;
  return config;
}

pipeline::SimulationCosts simulation_costs(
    const CostModel& model,
    const PlanCandidate& c,
    std::vector<PassCosts>* deviations = nullptr) {
  const MicrobatchCosts post =
      costs_at(model.costs.microbatches, c.microbatch_size);
  const auto shards = static_cast<double>(model.sequence_shards(c));
  auto costs = pipeline::SimulationCosts()
                   .p2p_latency(model.p2p_s(c, c.microbatch_size))
                   .send_post(post.send_s / shards)
                   .recv_post(post.recv_s / shards);
  pipeline::StageCosts per_stage;
  const int64_t stages = static_cast<int64_t>(c.layers_per_stage.size());
  for (int64_t s = 0; s < stages; ++s) {
    const StageTimes t = model.stage(
        c,
        c.microbatch_size,
        c.layers_per_stage[s],
        s == 0,
        s == stages - 1,
        s);
    per_stage[{s, pipeline::ActionKind::kF}] = t.f;
    per_stage[{s, pipeline::ActionKind::kB}] = t.b;
    per_stage[{s, pipeline::ActionKind::kI}] = t.i;
    per_stage[{s, pipeline::ActionKind::kW}] = t.w;
    if (deviations != nullptr) {
      deviations->push_back(t.sd);
    }
  }
  return costs.per_stage(std::move(per_stage));
}

/// A standard normal draw fixed by (action, sample): the same action of
/// the same sample always varies alike, so a prediction is reproducible.
double normal_draw(const pipeline::Action& a, int64_t sample) {
  uint64_t x = std::hash<std::string>{}(a.str()) ^
               (static_cast<uint64_t>(sample + 1) * 0x9E3779B97F4A7C15ULL);
  const auto next = [&x] {  // splitmix64
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const double u1 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

double expected_max_of_normals(int64_t n) {
  if (n <= 1) {
    return 0.0;
  }
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule.
  constexpr double kLo = -10.0;
  constexpr double kHi = 10.0;
  constexpr int kSteps = 4000;
  const double h = (kHi - kLo) / kSteps;
  double sum = 0.0;
  for (int k = 0; k < kSteps; ++k) {
    const double x = kLo + (k + 0.5) * h;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * static_cast<double>(n) * phi *
           std::pow(cdf, static_cast<double>(n - 1));
  }
  return sum * h;
}

namespace {

/// The expected makespan of `lowered` when each compute action varies by
/// its stage's deviation (normal, independent), over `replicas` pipelines
/// that meet at the step's end (data parallel): the mean of
/// kVariationSamples simulations, plus their standard deviation times the
/// expected maximum of `replicas` standard normals. The samples come in
/// antithetic pairs (draws z and -z), so the mean never falls below the
/// makespan of the mean costs (a makespan is a max of sums: convex in the
/// costs) and a pair's linear parts cancel.
double expected_makespan(
    const pipeline::Schedule& lowered,
    pipeline::SimulationCosts costs,
    const std::vector<PassCosts>& sd,
    int64_t replicas) {
  constexpr int64_t kVariationSamples = 16;
  using pipeline::ActionKind;
  const auto deviation = [&sd](const pipeline::Action& a) {
    const PassCosts& v = sd.at(static_cast<size_t>(a.stage));
    switch (a.kind) {
      case ActionKind::kF:
        return v.f;
      case ActionKind::kB:
        return v.b;
      case ActionKind::kI:
        return v.i;
      case ActionKind::kW:
        return v.w;
      case ActionKind::kOverlapFB: {
        const double b = sd.at(static_cast<size_t>(a.backward_stage)).b;
        return std::sqrt(v.f * v.f + b * b);
      }
      default:
        return 0.0;
    }
  };
  std::vector<double> makespans;
  for (int64_t k = 0; k < kVariationSamples; ++k) {
    const int64_t pair = k / 2;
    const double sign = k % 2 == 0 ? 1.0 : -1.0;
    costs.variation([&deviation, pair, sign](const pipeline::Action& a) {
      return sign * deviation(a) * normal_draw(a, pair);
    });
    makespans.push_back(pipeline::simulate(lowered, costs).makespan);
  }
  const double n = static_cast<double>(makespans.size());
  const double mean =
      std::accumulate(makespans.begin(), makespans.end(), 0.0) / n;
  double var = 0.0;
  for (const double m : makespans) {
    var += (m - mean) * (m - mean);
  }
  const double sd_makespan = std::sqrt(var / (n - 1.0));
  return mean + sd_makespan * expected_max_of_normals(replicas);
}

/// Memory and time of one candidate; false when over `cap`.
bool score(
    const JobConfig& base,
    int64_t world,
    const CostModel& model,
    const CachedSchedule* schedule,
    int64_t cap,
    PlanCandidate& c) {
  auto options = DryRunOptions()
                     .first_rank_per_pipeline_rank(true)
                     .stage_cache(model.stage_cache)
                     .device(model.costs.device);
  if (schedule != nullptr) {
    options.peak_microbatches(schedule->peaks).schedule(&schedule->lowered);
  }
  const DryRunReport report =
      dry_run(candidate_config(base, c), world, options);
  for (const auto& r : report.ranks) {
    c.peak_bytes = std::max(c.peak_bytes, r.total_bytes);
  }
  if (cap > 0 && c.peak_bytes > cap) {
    return false;
  }
  int64_t most_stored = 0;
  c.dp_sync_s = 0.0;
  for (const auto& r : report.ranks) {
    most_stored = std::max(most_stored, r.parameters);
    // fully_shard's units on this rank: each stage's blocks, and its root
    // where it holds any of the embedding, norm or output.
    const auto stage_blocks = [&](int64_t stage) {
      return c.layers_per_stage.at(static_cast<size_t>(stage));
    };
    int64_t units = 0;
    for (const auto& stage : r.stages) {
      units += stage_blocks(stage.stage) + (stage.root_parameters > 0 ? 1 : 0);
    }
    double sync = model.dp_sync_s(c, r.parameters, std::max<int64_t>(units, 1));
    if (c.dp_shard > 1) {
      for (const auto& stage : r.stages) {
        const int64_t block_gathers =
            c.fsdp_reshard == "never" ? 1
            : schedule == nullptr     ? 2
                                      : schedule->freed_gathers.at(stage.stage);
        sync += model.fsdp_gather_s(
            c,
            stage.parameters - stage.root_parameters,
            stage_blocks(stage.stage),
            stage.root_parameters,
            block_gathers);
      }
    }
    c.dp_sync_s = std::max(c.dp_sync_s, sync);
  }
  c.optimizer_s =
      static_cast<double>(most_stored) * model.costs.optimizer_s_per_parameter;
  // Data-parallel replicas meet every step: it lasts as long as the
  // slowest one's passes.
  const int64_t replicas = c.dp_replicate * c.dp_shard;
  if (schedule == nullptr) {
    const StageTimes t =
        model.stage(c, c.local_batch, c.layers_per_stage.at(0), true, true);
    c.compute_s = t.f + t.b +
                  std::sqrt(t.sd.f * t.sd.f + t.sd.b * t.sd.b) *
                      expected_max_of_normals(replicas);
  } else {
    std::vector<PassCosts> sd;
    const pipeline::SimulationCosts costs = simulation_costs(model, c, &sd);
    const auto sim = pipeline::simulate(schedule->lowered, costs);
    c.compute_s = sim.makespan;
    c.bubble = sim.max_bubble_fraction();
    if (std::any_of(sd.begin(), sd.end(), [](const PassCosts& v) {
          return v.f > 0.0 || v.b > 0.0 || v.i > 0.0 || v.w > 0.0;
        })) {
      c.compute_s = expected_makespan(schedule->lowered, costs, sd, replicas);
    }
  }
  c.step_s = c.compute_s + c.dp_sync_s + c.optimizer_s;
  return true;
}

/// The base config's local batch times its data-parallel ranks: the world
/// over its pp and its searched axes' degrees.
int64_t default_global_batch(const JobConfig& base, int64_t world) {
  int64_t model_ranks =
      std::max<int64_t>(1, base.parallelism.pipeline_parallel_degree);
  for (const Parallelism* p : searched_parallelisms()) {
    model_ranks *=
        std::max<int64_t>(1, base.integer(p->axis->degree_key).value_or(1));
  }
  return base.training.local_batch_size *
         std::max<int64_t>(1, world / model_ranks);
}

/// A split of the blocks, pp and dp that the world and the model allow.
struct Layout {
  std::map<std::string, int64_t> splits;  // degrees above 1, by axis
  int64_t pp = 1;
  int64_t dp = 1;

  int64_t split_ranks() const {
    int64_t k = 1;
    for (const auto& [axis, degree] : splits) {
      k *= degree;
    }
    return k;
  }
};

/// Every split of the blocks over the searched parallelisms' axes whose
/// ranks divide `world`: each axis at 1, or at a degree up to its
/// PlanSearch::max_degree that its check accepts for the model.
std::vector<std::map<std::string, int64_t>> block_splits(
    const JobConfig& base, const llama::ModelArgs& args, int64_t world) {
  std::vector<std::map<std::string, int64_t>> out{{}};
  for (const Parallelism* p : searched_parallelisms()) {
    const std::string& axis = p->axis->name;
    std::vector<std::map<std::string, int64_t>> grown;
    for (const auto& split : out) {
      grown.push_back(split);
      int64_t k = 1;
      for (const auto& [name, degree] : split) {
        k *= degree;
      }
      for (int64_t d = 2; d <= std::min(p->plan->max_degree, world / k); ++d) {
        if ((world / k) % d != 0) {
          continue;
        }
        if (p->check) {
          JobConfig config = base;
          config.set_integer(p->axis->degree_key, d);
          if (p->check(config, ParallelDims::of({{axis, d}}, d), args)) {
            continue;
          }
        }
        auto wider = split;
        wider[axis] = d;
        grown.push_back(std::move(wider));
      }
    }
    out = std::move(grown);
  }
  return out;
}

std::vector<Layout> layouts(
    const JobConfig& base,
    const llama::ModelArgs& args,
    int64_t world,
    int64_t global_batch,
    const PlanOptions& options) {
  std::vector<Layout> out;
  for (auto& split : block_splits(base, args, world)) {
    Layout layout{std::move(split)};
    const int64_t k = layout.split_ranks();
    for (int64_t pp = 1; pp <= std::min(options.max_pp(), world / k); ++pp) {
      if ((world / k) % pp != 0 || pp > args.n_layers) {
        continue;
      }
      layout.pp = pp;
      layout.dp = world / (k * pp);
      if (global_batch % layout.dp == 0) {
        out.push_back(layout);
      }
    }
  }
  return out;
}

/// The candidates of one layout, before memory and time.
void add_candidates(
    const Layout& layout,
    int64_t global_batch,
    const llama::ModelArgs& args,
    const MicrobatchCosts& unit,
    const PlanOptions& options,
    std::vector<PlanCandidate>& out) {
  const int64_t local = global_batch / layout.dp;
  // Replicate, shard, and HSDP's replicas of shard groups: dp = r x s.
  std::vector<std::pair<int64_t, int64_t>> dp_modes{{layout.dp, 1}};
  for (int64_t shard = 2; shard <= layout.dp; ++shard) {
    if (layout.dp % shard == 0) {
      dp_modes.push_back({layout.dp / shard, shard});
    }
  }
  // fully_shard's default is one of always (unpipelined) and never
  // (pipelined): both are searched, by name.
  const auto push = [&out](PlanCandidate c) {
    if (c.dp_shard == 1) {
      out.push_back(std::move(c));
      return;
    }
    for (const char* reshard : {"always", "never"}) {
      c.fsdp_reshard = reshard;
      out.push_back(c);
    }
  };
  const double block = unit.block.f + unit.block.b;
  const double e = (unit.embedding.f + unit.embedding.b) / block;
  const double o = (unit.output.f + unit.output.b) / block;
  for (const auto& [replicate, shard] : dp_modes) {
    PlanCandidate c;
    c.pp = layout.pp;
    c.splits = layout.splits;
    c.dp_replicate = replicate;
    c.dp_shard = shard;
    c.local_batch = local;
    if (layout.pp == 1) {
      c.microbatch_size = local;
      c.layers_per_stage = {args.n_layers};
      push(c);
      continue;
    }
    for (const std::string& name : pipeline::schedule_registry().names()) {
      for (const int64_t v :
           stages_per_rank_values(name, options.max_stages_per_rank())) {
        const int64_t stages = layout.pp * v;
        if (stages > args.n_layers) {
          continue;
        }
        for (int64_t mb = 1; mb <= local; ++mb) {
          if (local % mb != 0 || local / mb > options.max_microbatches()) {
            continue;
          }
          c.schedule = name;
          c.stages_per_rank = v;
          c.microbatch_size = mb;
          c.microbatches = local / mb;
          c.balanced = false;
          c.layers_per_stage = even_split(args.n_layers, stages);
          push(c);
          const auto balanced = balanced_split(args.n_layers, stages, e, o);
          if (balanced != c.layers_per_stage) {
            c.balanced = true;
            c.layers_per_stage = balanced;
            push(c);
          }
        }
      }
    }
  }
}

/// Each (schedule, pp, v, m) of `candidates` lowered once, in the order the
/// executor posts it on the costs' device (pipeline::posting_order).
std::map<ScheduleKey, CachedSchedule> lower_schedules(
    const std::vector<PlanCandidate>& candidates, bool cuda, int64_t threads) {
  std::map<ScheduleKey, CachedSchedule> cache;
  for (const auto& c : candidates) {
    if (c.pp > 1) {
      cache[{c.schedule, c.pp, c.stages_per_rank, c.microbatches}];
    }
  }
  std::vector<std::pair<const ScheduleKey, CachedSchedule>*> entries;
  for (auto& entry : cache) {
    entries.push_back(&entry);
  }
  parallel_for(static_cast<int64_t>(entries.size()), threads, [&](int64_t k) {
    const auto& [name, pp, v, m] = entries[k]->first;
    CachedSchedule& s = entries[k]->second;
    try {
      const auto planned = pipeline::plan_schedule(
          pipeline::make_schedule(name, pp, v, m), pipeline::SimulationCosts());
      s.lowered = pipeline::posting_order(planned.lowered, cuda);
      s.peaks = planned.simulation.peak_activations;
      s.freed_gathers = freed_block_gathers(s.lowered);
    } catch (const ConfigError& e) {
      s.error = e.what();  // a layout the schedule cannot run
    }
  });
  return cache;
}

}  // namespace

int64_t PlanCandidate::split(const std::string& axis) const {
  const auto it = splits.find(axis);
  return it == splits.end() ? 1 : it->second;
}

int64_t PlanCandidate::split_ranks() const {
  int64_t k = 1;
  for (const auto& [axis, degree] : splits) {
    k *= degree;
  }
  return k;
}

bool PlanCandidate::checkpoints_stage(int64_t stage) const {
  return activation_checkpoint == "full" &&
         (checkpoint_stages.empty() ||
          std::find(
              checkpoint_stages.begin(), checkpoint_stages.end(), stage) !=
              checkpoint_stages.end());
}

std::vector<std::vector<std::string>> split_fqns(
    const std::vector<int64_t>& layers_per_stage) {
  std::vector<std::vector<std::string>> fqns;
  int64_t layer = 0;
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    std::vector<std::string> stage;
    if (s == 0) {
      stage.push_back("tok_embeddings");
    }
    for (int64_t k = 0; k < layers_per_stage[s]; ++k) {
      stage.push_back("layers." + std::to_string(layer++));
    }
    if (s + 1 == layers_per_stage.size()) {
      stage.push_back("norm");
      stage.push_back("output");
    }
    fqns.push_back(std::move(stage));
  }
  return fqns;
}

namespace {

/// The searched axes' names ("tp"), for messages.
std::string split_names() {
  std::string names;
  for (const Parallelism* p : searched_parallelisms()) {
    names += (names.empty() ? "" : " x ") + p->axis->name;
  }
  return names.empty() ? "1" : names;
}

/// What each searched axis's degree must be ("tp up to 8 where
/// tensor_parallel accepts it for the model, "), for messages.
std::string split_rules() {
  std::string rules;
  for (const Parallelism* p : searched_parallelisms()) {
    rules += p->axis->name + " up to " + std::to_string(p->plan->max_degree) +
             " where " + p->name + " accepts it for the model, ";
  }
  return rules;
}

[[noreturn]] void throw_no_layout(
    const JobConfig& base,
    const llama::ModelArgs& args,
    int64_t world,
    int64_t global_batch,
    const PlanOptions& options) {
  throw_config_error(
      "--nproc " + std::to_string(world),
      "no layout pp x dp x " + split_names() + " divides " +
          std::to_string(world) + " ranks for " + base.model.name + " " +
          base.model.flavor + " (" + std::to_string(args.n_layers) +
          " layers, " + std::to_string(args.n_heads) +
          " heads) with a global batch of " + std::to_string(global_batch) +
          " sequences; allowed: pp <= the layers and max " +
          std::to_string(options.max_pp()) + ", " + split_rules() +
          "dp dividing the global batch; try another --nproc or "
          "--global-batch");
}

/// The candidates every schedule accepts, and their schedules lowered.
struct Candidates {
  std::vector<PlanCandidate> list;
  std::map<ScheduleKey, CachedSchedule> schedules;

  const CachedSchedule* schedule_of(const PlanCandidate& c) const {
    if (c.pp == 1) {
      return nullptr;
    }
    return &schedules.at({c.schedule, c.pp, c.stages_per_rank, c.microbatches});
  }
};

Candidates valid_candidates(
    const std::vector<Layout>& found,
    int64_t global_batch,
    const llama::ModelArgs& args,
    const PlanCosts& costs,
    const PlanOptions& options,
    int64_t threads) {
  const MicrobatchCosts unit = costs_at(costs.microbatches, 1);
  std::vector<PlanCandidate> all;
  for (const Layout& layout : found) {
    add_candidates(layout, global_batch, args, unit, options, all);
  }
  Candidates out;
  out.schedules = lower_schedules(all, on_cuda(costs), threads);
  // Drop the layouts a schedule refuses (1F1B with m < pp, ...).
  for (auto& c : all) {
    const CachedSchedule* schedule = out.schedule_of(c);
    if (schedule == nullptr || schedule->error.empty()) {
      out.list.push_back(std::move(c));
    }
  }
  return out;
}

/// A candidate's checkpointing choices, cheapest first: none; without
/// pipelining full; pipelined full on the first k stages, k = 1 .. stages
/// (the last: every stage, written as an empty list). Each adds compute
/// to the one before, so the first that fits is the one to rank.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_choices(
    const PlanCandidate& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> choices{
      {"none", {}}};
  const auto stages =
      c.pp > 1 ? static_cast<int64_t>(c.layers_per_stage.size()) : 1;
  std::vector<int64_t> prefix;
  for (int64_t k = 1; k < stages; ++k) {
    prefix.push_back(k - 1);
    choices.push_back({"full", prefix});
  }
  choices.push_back({"full", {}});
  return choices;
}

/// Scores each candidate's checkpointing choices up to the first that fits
/// the cap; the later ones only add compute (counted as dominated, not
/// scored). Memory falls as more stages checkpoint (but for one block's
/// recompute transient on a rank's first checkpointed stage), so where full
/// on every stage does not fit no prefix is scored (all counted over the
/// cap), and otherwise the first prefix that fits is found by bisection
/// (those below it counted over the cap). Fills `result`'s ranked list (in
/// candidate order) and counts. Returns the candidate of the smallest peak.
PlanCandidate score_all(
    const JobConfig& base,
    const Candidates& candidates,
    const CostModel& model,
    int64_t threads,
    PlanResult& result) {
  const auto& valid = candidates.list;
  std::vector<std::vector<PlanCandidate>> scored(valid.size());
  std::vector<PlanCandidate> smallest(valid.size());
  std::atomic<int64_t> considered{0}, pruned{0}, dominated{0};
  const double tokens =
      static_cast<double>(result.global_batch * base.training.seq_len);
  parallel_for(static_cast<int64_t>(valid.size()), threads, [&](int64_t k) {
    smallest[k].peak_bytes = INT64_MAX;
    const auto choices = checkpoint_choices(valid[k]);
    const auto n = static_cast<int64_t>(choices.size());
    considered += n;
    const auto attempt = [&](int64_t j, PlanCandidate& c) {
      c = valid[k];
      std::tie(c.activation_checkpoint, c.checkpoint_stages) = choices[j];
      const bool fits = score(
          base,
          result.world_size,
          model,
          candidates.schedule_of(c),
          result.memory_cap,
          c);
      if (c.peak_bytes < smallest[k].peak_bytes) {
        smallest[k] = c;
      }
      return fits;
    };
    const auto rank = [&](PlanCandidate c, int64_t j) {
      c.tokens_per_s = tokens / c.step_s;
      c.tokens_per_s_per_rank = c.tokens_per_s / result.world_size;
      scored[k].push_back(std::move(c));
      pruned += j;  // the cheaper choices before it
      dominated += n - 1 - j;
    };
    PlanCandidate c;
    if (attempt(0, c)) {
      return rank(c, 0);
    }
    PlanCandidate best;
    if (!attempt(n - 1, best)) {
      pruned += n;
      return;
    }
    // Choice lo does not fit, hi does.
    int64_t lo = 0;
    int64_t hi = n - 1;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (attempt(mid, c)) {
        hi = mid;
        best = c;
      } else {
        lo = mid;
      }
    }
    rank(best, hi);
  });
  result.considered = considered;
  result.pruned = pruned;
  result.dominated = dominated;
  for (auto& list : scored) {
    for (auto& c : list) {
      result.ranked.push_back(std::move(c));
    }
  }
  return *std::min_element(
      smallest.begin(),
      smallest.end(),
      [](const PlanCandidate& a, const PlanCandidate& b) {
        return a.peak_bytes < b.peak_bytes;
      });
}

/// A pipelined candidate's layout but for its schedule: what a synthesised
/// schedule replaces the schedule of.
std::string layout_key(
    const PlanCandidate& c, const std::vector<int64_t>& stage_to_rank) {
  std::ostringstream out;
  const auto list = [&out](const std::vector<int64_t>& values) {
    for (const int64_t v : values) {
      out << v << ',';
    }
    out << '|';
  };
  out << c.pp << '|' << c.dp_replicate << '|' << c.dp_shard << '|';
  for (const auto& [axis, degree] : c.splits) {
    out << axis << degree << ',';
  }
  out << '|' << c.fsdp_reshard << '|' << c.microbatch_size << '|'
      << c.activation_checkpoint << '|';
  list(c.checkpoint_stages);
  list(c.layers_per_stage);
  list(stage_to_rank);
  return out.str();
}

/// What a synthesised schedule must save to replace a built-in one at
/// least, whatever the tolerance: a custom CSV is worth it only for a gain.
constexpr double kSynthesisMargin = 0.005;

/// For the `count` fastest pipelined layouts of `result.ranked` (sorted),
/// a schedule synthesised for each one's costs within three budgets (the
/// activations its built-in schedule holds, one more microbatch per rank,
/// none), each scored like any candidate (dry run, cap, simulation); the
/// fastest that fits joins the ranking when it is faster than the built-in
/// one by more than `margin` (a fraction). The synthesis picks the
/// fastest of many rule sets by the cost model, so its pick also gains
/// from the model's errors (on a two-core EPYC synthesised schedules ran
/// 4-9 % behind their predictions where the built-in one they beat ran
/// 1.5 % ahead of its own, bench/notes.md): plan_layouts passes its
/// tolerance, the model's accuracy.
void synthesize_for_fastest(
    const JobConfig& base,
    const Candidates& candidates,
    const CostModel& model,
    int64_t threads,
    int64_t count,
    double margin,
    PlanResult& result) {
  std::vector<const PlanCandidate*> picked;
  std::set<std::string> seen;
  for (const auto& c : result.ranked) {
    if (static_cast<int64_t>(picked.size()) >= count) {
      break;
    }
    if (c.pp > 1 &&
        seen.insert(
                layout_key(c, candidates.schedule_of(c)->lowered.stage_to_rank))
            .second) {
      picked.push_back(&c);
    }
  }
  std::vector<std::optional<PlanCandidate>> won(picked.size());
  parallel_for(static_cast<int64_t>(picked.size()), threads, [&](int64_t k) {
    const PlanCandidate& built_in = *picked[k];
    const CachedSchedule& cached = *candidates.schedule_of(built_in);
    const pipeline::Schedule& lowered = cached.lowered;
    const auto costs = simulation_costs(model, built_in);
    std::vector<int64_t> held = cached.peaks;
    std::vector<int64_t> more = held;
    for (int64_t r = 0; r < lowered.pp; ++r) {
      const auto stages = static_cast<int64_t>(
          pipeline::stages_of_rank(lowered.stage_to_rank, r).size());
      held[r] = std::max(held[r], stages);
      more[r] = held[r] + stages;
    }
    for (const auto& budget : {held, more, std::vector<int64_t>{}}) {
      const auto made = pipeline::synthesize_best(
          lowered.stage_to_rank,
          built_in.microbatches,
          costs,
          {budget},
          on_cuda(model.costs));
      CachedSchedule schedule;
      schedule.lowered = made.planned.lowered;
      schedule.peaks = made.planned.simulation.peak_activations;
      schedule.freed_gathers = freed_block_gathers(schedule.lowered);
      PlanCandidate c = built_in;
      c.schedule = "Synthesized";
      c.synthesized =
          std::make_shared<const pipeline::Schedule>(made.planned.compute);
      c.synthesized_over = built_in.schedule;
      c.synthesized_over_step_s = built_in.step_s;
      c.peak_bytes = 0;
      c.bubble = 0.0;
      if (score(
              base,
              result.world_size,
              model,
              &schedule,
              result.memory_cap,
              c) &&
          c.step_s < (1.0 - margin) * built_in.step_s &&
          (!won[k] || c.step_s < won[k]->step_s)) {
        won[k] = std::move(c);
      }
    }
  });
  const double tokens =
      static_cast<double>(result.global_batch * base.training.seq_len);
  result.synthesis_layouts = static_cast<int64_t>(picked.size());
  for (auto& c : won) {
    if (c) {
      c->tokens_per_s = tokens / c->step_s;
      c->tokens_per_s_per_rank = c->tokens_per_s / result.world_size;
      result.ranked.push_back(std::move(*c));
      ++result.synthesis_wins;
    }
  }
}

/// The cost model of `base`'s run shaped `args`, from `costs`.
CostModel cost_model(
    const JobConfig& base,
    const llama::ModelArgs& args,
    const PlanCosts& costs) {
  return CostModel{
      costs,
      base.training.seq_len,
      args.dim,
      compute_dtype_bytes(base, &costs),
      base.training.mixed_precision_reduce == "bfloat16" ? 2 : 4};
}

/// Stages that recompute their blocks in backward.
int64_t checkpointed_stages(const PlanCandidate& c) {
  if (c.activation_checkpoint != "full") {
    return 0;
  }
  return c.checkpoint_stages.empty()
             ? c.pp * c.stages_per_rank
             : static_cast<int64_t>(c.checkpoint_stages.size());
}

/// `result.ranked` sorted by prediction: those within `tolerance` of the
/// fastest move to the front, simplest first, then by prediction.
void rank_ties_simplest_first(double tolerance, PlanResult& result) {
  result.tolerance = tolerance;
  auto& ranked = result.ranked;
  if (ranked.empty()) {
    return;
  }
  result.fastest_step_s = ranked.front().step_s;
  const double limit = result.fastest_step_s * (1.0 + tolerance);
  const auto end =
      std::find_if(ranked.begin(), ranked.end(), [&](const PlanCandidate& c) {
        return c.step_s > limit;
      });
  // Sorted by prediction already: a stable sort by simplicity keeps that
  // order among the equally simple.
  std::stable_sort(ranked.begin(), end, plan_simplicity_less);
  result.tied = end - ranked.begin();
}

}  // namespace

bool plan_simplicity_less(const PlanCandidate& a, const PlanCandidate& b) {
  const auto key = [](const PlanCandidate& c) {
    return std::make_tuple(
        c.pp * c.stages_per_rank,
        c.synthesized != nullptr,
        c.split_ranks(),
        c.microbatches,
        checkpointed_stages(c));
  };
  return key(a) < key(b);
}

namespace {

/// The microbatch sizes of `found`'s layouts (those splitting the blocks
/// as `splits` only, when given).
std::vector<int64_t> microbatch_rows(
    const std::vector<Layout>& found,
    int64_t global_batch,
    const PlanOptions& options,
    const std::map<std::string, int64_t>* splits = nullptr) {
  std::vector<int64_t> rows;
  for (const Layout& layout : found) {
    if (splits != nullptr && layout.splits != *splits) {
      continue;
    }
    const int64_t local = global_batch / layout.dp;
    for (int64_t mb = 1; mb <= local; ++mb) {
      const bool pipelined_size = layout.pp > 1 && local % mb == 0 &&
                                  local / mb <= options.max_microbatches();
      if (pipelined_size || (layout.pp == 1 && mb == local)) {
        rows.push_back(mb);
      }
    }
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

/// The layouts the search of `world` ranks covers, and its global batch.
std::pair<std::vector<Layout>, int64_t> searched_layouts(
    const JobConfig& base,
    const llama::ModelArgs& args,
    int64_t world,
    const PlanOptions& options) {
  const int64_t global_batch = options.global_batch() > 0
                                   ? options.global_batch()
                                   : default_global_batch(base, world);
  auto found = layouts(base, args, world, global_batch, options);
  if (found.empty()) {
    throw_no_layout(base, args, world, global_batch, options);
  }
  return {std::move(found), global_batch};
}

}  // namespace

PlanResult plan_layouts(
    const JobConfig& base,
    int64_t world,
    const PlanCosts& costs,
    const PlanOptions& options) {
  pipeline::register_builtin_schedules();
  const llama::ModelArgs args = plan_model_args(base);
  PlanResult result;
  result.world_size = world;
  const auto [found, global_batch] =
      searched_layouts(base, args, world, options);
  result.global_batch = global_batch;
  result.memory_cap = options.memory_per_rank() > 0
                          ? options.memory_per_rank()
                          : static_cast<int64_t>(
                                costs.memory_per_rank_gib.value_or(0.0) * kGiB);
  const int64_t threads =
      options.threads() > 0
          ? options.threads()
          : std::max<unsigned>(1, std::thread::hardware_concurrency());
  const Candidates candidates = valid_candidates(
      found, result.global_batch, args, costs, options, threads);
  const CostModel model = cost_model(base, args, costs);
  const PlanCandidate smallest =
      score_all(base, candidates, model, threads, result);
  if (result.ranked.empty()) {
    throw_config_error(
        options.memory_per_rank() > 0
            ? "--memory-per-rank " + gib(result.memory_cap) + " GiB"
            : costs.path + ": memory_per_rank_gib " + gib(result.memory_cap),
        "no plan fits: the smallest peak of the " +
            std::to_string(result.considered) + " candidates is " +
            gib(smallest.peak_bytes) + " GiB (" + describe_layout(smallest) +
            "); allowed: a cap of at least that; try more ranks or a "
            "smaller batch");
  }
  const auto by_step = [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.step_s < b.step_s;
  };
  std::stable_sort(result.ranked.begin(), result.ranked.end(), by_step);
  if (options.synthesize() > 0) {
    synthesize_for_fastest(
        base,
        candidates,
        model,
        threads,
        options.synthesize(),
        std::max(kSynthesisMargin, options.tolerance()),
        result);
    std::stable_sort(result.ranked.begin(), result.ranked.end(), by_step);
  }
  rank_ties_simplest_first(options.tolerance(), result);
  return result;
}

std::vector<int64_t> plan_microbatch_rows(
    const JobConfig& base, int64_t world, const PlanOptions& options) {
  const auto [found, global_batch] =
      searched_layouts(base, plan_model_args(base), world, options);
  return microbatch_rows(found, global_batch, options);
}

SplitRows plan_split_rows(
    const JobConfig& base, int64_t world, const PlanOptions& options) {
  const auto [found, global_batch] =
      searched_layouts(base, plan_model_args(base), world, options);
  SplitRows rows;
  for (const Layout& layout : found) {
    if (layout.splits.size() != 1) {
      continue;
    }
    const auto& [axis, degree] = *layout.splits.begin();
    for (const Parallelism* p : searched_parallelisms()) {
      if (p->axis->name == axis && rows[p->name].count(degree) == 0) {
        rows[p->name][degree] =
            microbatch_rows(found, global_batch, options, &layout.splits);
      }
    }
  }
  return rows;
}

std::string plan_schedule_svg(
    const JobConfig& base, const PlanCandidate& c, const PlanCosts& costs) {
  pipeline::register_builtin_schedules();
  const llama::ModelArgs args = plan_model_args(base);
  const CostModel model = cost_model(base, args, costs);
  const auto costs_of_c = simulation_costs(model, c);
  const auto planned = pipeline::plan_schedule(
      c.synthesized ? *c.synthesized
                    : pipeline::make_schedule(
                          c.schedule, c.pp, c.stages_per_rank, c.microbatches),
      costs_of_c);
  // Timed as it was scored: in the executor's posting order.
  const auto simulation = pipeline::simulate(
      pipeline::posting_order(planned.lowered, on_cuda(costs)), costs_of_c);
  return pipeline::format_schedule(planned.compute, simulation, "svg");
}

}  // namespace baton
