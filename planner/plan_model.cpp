#include "planner/plan_model.h"

// The planner's cost model (plan_model.h) and the costs derived from FLOPs.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "models/model_spec.h"
#include "parallel/dist/mesh.h"
#include "parallel/pipeline/lowering.h"

namespace baton {

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
  const ModelArgs args = plan_model_args(config);
  const int64_t seq = config.training.seq_len;
  const double rate = options.peak_tflops() * 1e12 * options.efficiency();
  // A mixture of experts' block multiplies each token by its router, its
  // top_k routed experts and its shared ones: the blocks' active
  // parameters, averaged over the blocks (DeepSeek's first dense ones
  // among them).
  int64_t active = 0;
  for (int64_t layer = 0; layer < args.n_layers; ++layer) {
    active += args.active_params_of_layer(layer);
  }
  const double block_params =
      static_cast<double>(active) / static_cast<double>(args.n_layers);
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
      "%.0f (active) parameters + 4 x seq_len %lld x %lld (attention) = "
      "%.4g FLOPs, "
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

namespace plan_detail {

namespace {

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

}  // namespace

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

const std::vector<MicrobatchCosts>* CostModel::measured_split(
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

double CostModel::split_collectives_s(
    const PlanCandidate& c, double act) const {
  const ParallelDims dims = ParallelDims::of(c.splits, c.split_ranks());
  const auto positions = static_cast<double>(
      parallel_sequence_split(base, dims, dist::mesh_coord(dims, 0)).shards);
  double seconds = 0.0;
  int64_t stride = 1;
  for (auto p = searched.rbegin(); p != searched.rend(); ++p) {
    const int64_t n = c.split((*p)->axis->name);
    const PlanSearch& search = *(*p)->plan;
    const double bytes =
        act * (search.collective_share ? search.collective_share(args, c.splits)
                                       : 1.0 / positions);
    seconds +=
        static_cast<double>(search.block_all_gathers) *
            collective_s(costs.all_gather, costs, n, stride, bytes, 1.0) +
        static_cast<double>(search.block_reduce_scatters) *
            collective_s(costs.reduce_scatter, costs, n, stride, bytes, 1.0);
    stride *= n;
  }
  return seconds;
}

double CostModel::borrowed_collectives_s(
    const PlanCandidate& c, double act) const {
  const double rank_act = act / static_cast<double>(sequence_shards(c));
  const CommCosts& link = costs.all_to_all.value_or(costs.all_gather);
  double seconds = 0.0;
  for (const Parallelism* p : borrowing) {
    const int64_t n = c.borrowed_degree(p->derived_axis->name);
    const PlanBorrowSearch& search = *p->borrow_plan;
    if (n <= 1 || search.block_all_to_alls == 0) {
      continue;
    }
    // A rank keeps 1 / n of its rows and sends the rest: as a ring
    // collective of its own buffer moves.
    seconds += static_cast<double>(search.block_all_to_alls) *
               collective_s(
                   link,
                   costs,
                   n,
                   c.shard_stride(),
                   rank_act * search.all_to_all_share(args),
                   1.0);
  }
  return seconds;
}

int64_t CostModel::sequence_shards(const PlanCandidate& c) const {
  const ParallelDims dims = ParallelDims::of(c.splits, c.split_ranks());
  return parallel_sequence_shards(base, dims) *
         parallel_sequence_split(base, dims, dist::mesh_coord(dims, 0)).shards;
}

StageTimes CostModel::stage(
    const PlanCandidate& c,
    int64_t rows,
    int64_t layers,
    bool embedding,
    bool output,
    int64_t index) const {
  // Measured at this split of the blocks (the collectives inside), or
  // the whole pieces' costs over the ranks sharing a block plus the
  // collectives their axes model (each block's forward, as many again
  // in its backward).
  const auto* measured = measured_split(c);
  const MicrobatchCosts m =
      costs_at(measured ? *measured : costs.microbatches, rows);
  const double t = measured ? 1.0 : static_cast<double>(c.split_ranks());
  const double act = static_cast<double>(rows * seq_len * dim * dtype_bytes);
  // The borrowed axes' all-to-alls move rows between ranks that the
  // measured splits never ran.
  const double split_comm = (measured ? 0.0 : split_collectives_s(c, act)) +
                            borrowed_collectives_s(c, act);
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

double CostModel::p2p_s(const PlanCandidate& c, int64_t rows) const {
  const int64_t stride = c.dp_replicate * c.dp_shard * c.split_ranks();
  const LinkCosts& link = link_for(costs.p2p, costs, 2, stride);
  const double bytes = static_cast<double>(rows * seq_len * dim * dtype_bytes) /
                       static_cast<double>(sequence_shards(c));
  return link.latency_s + bytes / link.bandwidth;
}

const double* CostModel::measured_data_parallel(const PlanCandidate& c) const {
  const auto& dp = costs.data_parallel;
  if (!dp || c.pp != 1 || c.split_ranks() != 1 || !c.borrowed.empty() ||
      c.dp_replicate * c.dp_shard != dp->degree || c.local_batch != dp->rows ||
      (c.dp_replicate > 1 && c.dp_shard > 1)) {
    return nullptr;
  }
  const std::string mode = c.dp_shard > 1 ? "fully_shard " + c.fsdp_reshard
                                          : std::string("replicate");
  const auto it = dp->block_s.find(mode);
  return it == dp->block_s.end() ? nullptr : &it->second;
}

double CostModel::dp_sync_s(
    const PlanCandidate& c,
    int64_t stored,
    int64_t units,
    int64_t experts,
    int64_t expert_units) const {
  const double n = static_cast<double>(stored);
  const int64_t k = c.split_ranks();
  const int64_t shard = c.shard_ranks();
  if (shard == 1) {
    return collective_s(
        costs.all_reduce, costs, c.dp_replicate, k, n * reduce_bytes, 2.0);
  }
  const int64_t b = c.borrowed_ranks();
  const int64_t own = b > 1 ? experts : 0;  // reduced over their own ranks
  const double experts_s =
      own == 0 ? 0.0
               : unit_collectives_s(
                     costs.reduce_scatter,
                     costs,
                     shard / b,
                     c.shard_stride() * b,
                     static_cast<double>(own) * (shard / b) * reduce_bytes,
                     1.0,
                     std::max<int64_t>(expert_units, 1));
  return unit_collectives_s(
             costs.reduce_scatter,
             costs,
             shard,
             c.shard_stride(),
             static_cast<double>(stored - own) * shard * reduce_bytes,
             1.0,
             units) +
         experts_s +
         unit_collectives_s(
             costs.all_reduce,
             costs,
             c.dp_replicate,
             k * c.dp_shard,
             n * reduce_bytes,
             2.0,
             units);
}

double CostModel::fsdp_gather_s(
    const PlanCandidate& c,
    int64_t blocks,
    int64_t block_units,
    int64_t root,
    int64_t block_gathers,
    int64_t experts) const {
  const int64_t b = c.borrowed_ranks();
  const auto gather = [&](int64_t elements, int64_t units, int64_t group) {
    return elements == 0 ? 0.0
                         : unit_collectives_s(
                               costs.all_gather,
                               costs,
                               c.shard_ranks() / group,
                               c.shard_stride() * group,
                               static_cast<double>(elements) *
                                   (c.shard_ranks() / group) * dtype_bytes,
                               1.0,
                               units);
  };
  // Under a borrowed axis the experts are gathered over their own ranks.
  const int64_t own = b > 1 ? experts : 0;
  return static_cast<double>(block_gathers) *
             (gather(blocks - own, block_units, 1) +
              gather(own, block_units, b)) +
         gather(root, 1, 1);
}

CostModel cost_model(
    const JobConfig& base, const ModelArgs& args, const PlanCosts& costs) {
  return CostModel{
      costs,
      base,
      base.training.seq_len,
      args.dim,
      compute_dtype_bytes(base, &costs),
      base.training.mixed_precision_reduce == "bfloat16" ? 2 : 4,
      args};
}

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

JobConfig candidate_config(const JobConfig& base, const PlanCandidate& c) {
  JobConfig config = base;
  auto& p = config.parallelism;
  p.data_parallel_replicate_degree = c.dp_replicate;
  p.data_parallel_shard_degree = c.dp_shard;
  for (const Parallelism* searched : searched_parallelisms()) {
    config.set_integer(
        searched->axis->degree_key, c.split(searched->axis->name));
  }
  for (const Parallelism* borrowing : borrowing_parallelisms()) {
    config.set_integer(
        borrowing->derived_axis->degree_key,
        c.borrowed_degree(borrowing->derived_axis->name));
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
    std::vector<PassCosts>* deviations) {
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

namespace {

/// Rank `r`'s data-parallel work after the pipeline: its gradients'
/// reduction and fully_shard's gathers (CostModel::dp_sync_s and
/// fsdp_gather_s), or, where the profile measured `c`'s mode, the blocks'
/// share measured and the root's modelled.
double rank_sync_s(
    const CostModel& model,
    const CachedSchedule* schedule,
    const PlanCandidate& c,
    const DryRunRank& r) {
  if (const double* measured = model.measured_data_parallel(c)) {
    // The root: one unit, gathered once.
    const int64_t root = r.stages.front().root_parameters;
    double sync = std::max(0.0, *measured) *
                      static_cast<double>(c.layers_per_stage.at(0)) +
                  model.dp_sync_s(c, root, 1);
    if (c.shard_ranks() > 1) {
      sync += model.fsdp_gather_s(c, 0, 0, root, 0);
    }
    return sync;
  }
  // fully_shard's units on this rank: each stage's blocks, and its root
  // where it holds any of the embedding, norm or output.
  const auto stage_blocks = [&](int64_t stage) {
    return c.layers_per_stage.at(static_cast<size_t>(stage));
  };
  int64_t units = 0;
  int64_t experts = 0;
  int64_t expert_units = 0;  // the blocks of stages with experts
  for (const auto& stage : r.stages) {
    units += stage_blocks(stage.stage) + (stage.root_parameters > 0 ? 1 : 0);
    experts += stage.expert_parameters;
    expert_units += stage.expert_parameters > 0 ? stage_blocks(stage.stage) : 0;
  }
  double sync = model.dp_sync_s(
      c, r.parameters, std::max<int64_t>(units, 1), experts, expert_units);
  if (c.shard_ranks() > 1) {
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
          block_gathers,
          stage.expert_parameters);
    }
  }
  return sync;
}

}  // namespace

DryRunReport measure_memory(
    const JobConfig& base,
    int64_t world,
    const CostModel& model,
    const CachedSchedule* schedule,
    PlanCandidate& c) {
  auto options = DryRunOptions()
                     .first_rank_per_pipeline_rank(true)
                     .stage_cache(model.stage_cache)
                     .device(model.costs.device);
  if (schedule != nullptr) {
    options.peak_microbatches(schedule->peaks).schedule(&schedule->lowered);
  }
  DryRunReport report = dry_run(candidate_config(base, c), world, options);
  for (const auto& r : report.ranks) {
    c.peak_bytes = std::max(c.peak_bytes, r.total_bytes);
  }
  return report;
}

int64_t stored_bytes(const DryRunReport& report) {
  int64_t most = 0;
  for (const auto& r : report.ranks) {
    most =
        std::max(most, r.weight_bytes + r.gradient_bytes + r.optimizer_bytes);
  }
  return most;
}

void measure_time(
    const CostModel& model,
    const CachedSchedule* schedule,
    const DryRunReport& report,
    PlanCandidate& c) {
  int64_t most_stored = 0;
  c.dp_sync_s = 0.0;
  for (const auto& r : report.ranks) {
    most_stored = std::max(most_stored, r.parameters);
    c.dp_sync_s = std::max(c.dp_sync_s, rank_sync_s(model, schedule, c, r));
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
}

bool score(
    const JobConfig& base,
    int64_t world,
    const CostModel& model,
    const CachedSchedule* schedule,
    int64_t cap,
    PlanCandidate& c) {
  const DryRunReport report = measure_memory(base, world, model, schedule, c);
  if (cap > 0 && c.peak_bytes > cap) {
    return false;
  }
  measure_time(model, schedule, report, c);
  return true;
}

}  // namespace plan_detail

}  // namespace baton
