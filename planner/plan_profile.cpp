#include "planner/plan_profile.h"

// The profile (plan_profile.h): the statistics and the chunks it shares
// with the pipeline probe (plan_profile_detail.h), each chunk's passes
// timed alone, the optimizer, P2P and the collectives, and
// profile_plan_costs, which runs them all and writes down how.

#include <torch/autograd.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <sstream>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/logging.h"
#include "models/linear.h"
#include "models/loss.h"
#include "models/model_spec.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/axes.h"
#include "parallel/dist/launcher.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/grad_norm.h"
#include "parallel/mixed_precision.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "planner/plan_profile_detail.h"

namespace baton {

namespace plan_detail {

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0
                   : std::accumulate(v.begin(), v.end(), 0.0) /
                         static_cast<double>(v.size());
}

double deviation(const std::vector<double>& v) {
  if (v.size() < 2) {
    return 0.0;
  }
  const double m = mean(v);
  double sum = 0.0;
  for (const double x : v) {
    sum += (x - m) * (x - m);
  }
  return std::sqrt(sum / static_cast<double>(v.size() - 1));
}

void apply_placed(
    const JobConfig& config,
    const ParallelContext& context,
    ChainPlace place,
    ModelPart& part) {
  const ParallelDims& dims = context.mesh.dims();
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->place != place || !p->appliers) {
      continue;
    }
    for (const std::string& step : p->appliers(config, dims)) {
      applier_registry().get(step)()->apply(part, context);
    }
  }
}

Chunk make_chunk(
    const JobConfig& config,
    const ModelArgs& args,
    const ChunkSpec& spec,
    const ParallelContext& context) {
  const auto& model = model_registry().get(config.model.name);
  Chunk chunk;
  chunk.part = std::make_shared<ModelPart>(
      model.build(args, spec, config.training.seed), /*stage=*/0);
  apply_placed(config, context, ChainPlace::kModel, *chunk.part);
  chunk.loss = parallel_loss(config, context.mesh, args);
  chunk.positions_shards = parallel_sequence_split(config, context.mesh).shards;
  chunk.sequence_shards = parallel_sequence_shards(config, context.mesh.dims());
  MixedPrecisionApplier().apply(*chunk.part, context);
  chunk.takes_ids = spec.embedding;
  chunk.ends_in_loss = spec.output;
  return chunk;
}

void drop_grads(const Chunk& chunk) {
  for (auto& p : chunk.part->module().parameters()) {
    p.mutable_grad() = at::Tensor();
  }
}

}  // namespace plan_detail

namespace {

using plan_detail::Chunk;
using plan_detail::Clock;
using plan_detail::deviation;
using plan_detail::drop_grads;
using plan_detail::make_chunk;
using plan_detail::mean;
using plan_detail::median;
using plan_detail::PipelinedBlock;
using plan_detail::Ranks;
using plan_detail::since;
using plan_detail::time_blocks_in_pipeline;

/// The searched parallelism named `name` (a key of ProfileOptions::splits).
const Parallelism* searched_parallelism(const std::string& name) {
  for (const Parallelism* p : searched_parallelisms()) {
    if (p->name == name) {
      return p;
    }
  }
  throw std::invalid_argument(
      "[plan] profile: '" + name +
      "' is not a parallelism the planner searches (Parallelism::plan)");
}

/// Random inputs of a chunk's passes at `rows`: token ids for a chunk
/// that takes them, else hidden states of its sequence shard; the labels
/// of a loss and its scale, as a step's.
struct ChunkInputs {
  at::Tensor ids;     // (rows, T / positions_shards)
  at::Tensor hidden;  // (rows, T / (positions_shards x sequence_shards), dim)
  at::Tensor labels;  // (rows, T / positions_shards)
  double loss_scale = 1.0;
};

ChunkInputs chunk_inputs(
    const Chunk& chunk, const ModelArgs& args, int64_t rows, int64_t seq_len) {
  ChunkInputs in;
  const int64_t T = seq_len / chunk.positions_shards;
  in.ids = at::randint(args.vocab_size, {rows, T}, at::kLong);
  in.hidden = at::randn({rows, T / chunk.sequence_shards, args.dim}) * 0.5;
  in.labels = at::randint(args.vocab_size, {rows, T}, at::kLong);
  in.loss_scale = 1.0 / static_cast<double>(rows * seq_len);
  return in;
}

/// The passes of copy `c` of one chunk as the pipeline executor runs them:
/// F under a weight-gradient slot, B a full backward, I a backward that
/// defers the weight gradients, W the deferred work.
class CopyPasses {
 public:
  CopyPasses(const std::vector<Chunk*>& copies, ChunkInputs inputs)
      : copies_(copies),
        in_(std::move(inputs)),
        slots_(copies.size()),
        outs_(copies.size()) {}

  int64_t size() const {
    return static_cast<int64_t>(copies_.size());
  }

  void forward(int64_t c) {
    const Chunk& chunk = *copies_[c];
    const at::Tensor input =
        chunk.takes_ids ? in_.ids : in_.hidden.detach().requires_grad_(true);
    WeightGradSlotGuard guard(&slots_[c]);
    at::Tensor out = chunk.part->module().forward(input);
    if (chunk.ends_in_loss) {
      out = chunk.loss(out, in_.labels) * in_.loss_scale;
    } else if (!grad_out_.defined()) {
      grad_out_ = at::randn_like(out) * 1e-3;
    }
    outs_[c] = out;
  }

  void backward(int64_t c) {
    if (copies_.front()->ends_in_loss) {
      torch::autograd::backward({outs_[c]});
    } else {
      torch::autograd::backward({outs_[c]}, {grad_out_});
    }
  }

  void backward_deferring(int64_t c) {
    slots_[c].defer = true;
    backward(c);
    slots_[c].defer = false;
    outs_[c] = at::Tensor();
  }

  void run_deferred(int64_t c) {
    slots_[c].run();
  }

  /// Ends the step: the copies' gradient syncs finish, their gradients go.
  void finish() {
    for (Chunk* chunk : copies_) {
      chunk->part->grad_sync().finish();
      drop_grads(*chunk);
    }
  }

 private:
  std::vector<Chunk*> copies_;
  ChunkInputs in_;
  std::vector<WeightGradSlot> slots_;
  std::vector<at::Tensor> outs_;
  at::Tensor grad_out_;
};

/// The means of F, B, I and W at `rows` of the chunks `copies` (one
/// piece of the model, each copy with weights of its own), timed as the
/// pipeline executor runs them (CopyPasses). Each run passes through every
/// copy in turn, as a stage runs its layers or a rank its stages, so that
/// a pass finds its weights no warmer in the caches than in a run; a
/// pass's cost is the mean over the copies. The ranks line up before each
/// kind of pass. Also the passes' standard deviations: over the runs of
/// the copies' mean, times sqrt(copies) (one pass's).
std::pair<PassCosts, PassCosts> time_chunk(
    const std::vector<Chunk*>& copies,
    const ModelArgs& args,
    int64_t rows,
    int64_t seq_len,
    const Ranks& ranks,
    bool runs,
    const ProfileOptions& options) {
  CopyPasses passes(copies, chunk_inputs(*copies.front(), args, rows, seq_len));
  const int64_t n = passes.size();
  // Seconds per copy of `pass` over every copy, the ranks lined up first
  // (a rank that does not run meets the same barriers).
  const auto timed = [&](const std::function<void(int64_t)>& pass) {
    ranks.line_up();
    if (!runs) {
      return 0.0;
    }
    const auto start = Clock::now();
    for (int64_t c = 0; c < n; ++c) {
      pass(c);
    }
    return since(start) / static_cast<double>(n);
  };
  std::vector<double> f, b, i, w;
  for (int64_t k = 0; k < options.warmup() + options.repeats(); ++k) {
    const double tf = timed([&](int64_t c) { passes.forward(c); });
    const double tb = timed([&](int64_t c) { passes.backward(c); });
    for (int64_t c = 0; runs && c < n; ++c) {
      passes.forward(c);
    }
    const double ti = timed([&](int64_t c) { passes.backward_deferring(c); });
    const double tw = timed([&](int64_t c) { passes.run_deferred(c); });
    if (runs) {
      passes.finish();
    }
    if (k >= options.warmup()) {
      f.push_back(tf);
      b.push_back(tb);
      i.push_back(ti);
      w.push_back(tw);
    }
  }
  const double root_n = std::sqrt(static_cast<double>(n));
  return {
      PassCosts{mean(f), mean(b), mean(i), mean(w)},
      PassCosts{
          root_n * deviation(f),
          root_n * deviation(b),
          root_n * deviation(i),
          root_n * deviation(w)}};
}

/// Seconds per parameter of the optimizer step with gradient clipping, on
/// a block's parameters.
double time_optimizer(
    const JobConfig& config,
    Chunk& chunk,
    const dist::ParallelMesh& mesh,
    const Ranks& ranks,
    bool runs,
    const ProfileOptions& options) {
  std::vector<at::Tensor> params = chunk.part->module().parameters();
  int64_t count = 0;
  for (auto& p : params) {
    p.mutable_grad() = at::randn_like(p) * 1e-3;
    count += p.numel();
  }
  auto optimizer =
      optimizer_registry().get(config.optimizer.name)(params, config);
  ModelParts parts;
  parts.push_back(chunk.part);
  std::vector<double> times;
  for (int64_t k = 0; k < options.warmup() + options.repeats(); ++k) {
    ranks.line_up();
    const auto start = Clock::now();
    if (runs) {
      clip_grad_norm(parts, mesh, config.training.max_norm);
      optimizer->step();
    }
    if (k >= options.warmup()) {
      times.push_back(since(start));
    }
  }
  return mean(times) / static_cast<double>(count);
}

/// Half a round trip between ranks 0 and 1 at each size.
LinkCosts time_p2p(const Ranks& ranks, const ProfileOptions& options) {
  std::vector<std::pair<double, double>> points;
  dist::ProcessGroup& world = *ranks.world();
  for (const int64_t bytes : options.comm_bytes()) {
    at::Tensor buffer = at::zeros({bytes / 4}, at::kFloat);
    std::vector<double> times;
    for (int64_t k = 0; k < options.warmup() + options.repeats(); ++k) {
      ranks.line_up();
      const auto start = Clock::now();
      if (ranks.rank() == 0) {
        world.send(buffer, 1);
        world.recv(buffer, 1);
      } else if (ranks.rank() == 1) {
        world.recv(buffer, 0);
        world.send(buffer, 0);
      }
      if (k >= options.warmup()) {
        times.push_back(since(start) / 2.0);
      }
    }
    points.push_back(
        {static_cast<double>(bytes),
         ranks.mean_over({median(times)}, 1).front()});
  }
  return fit_link_costs(points);
}

/// The world's collective `kind` at each size (the buffer the cost model
/// names: the all-reduced one, the all-gather's output, the reduce-scatter's
/// input), fitted against factor x (n - 1) / n x bytes.
LinkCosts time_collective(
    const std::string& kind,
    const Ranks& ranks,
    const ProfileOptions& options) {
  dist::ProcessGroup& world = *ranks.world();
  const int64_t n = ranks.size();
  const double factor = kind == "all_reduce" ? 2.0 : 1.0;
  std::vector<std::pair<double, double>> points;
  for (const int64_t bytes : options.comm_bytes()) {
    const int64_t whole = std::max<int64_t>(n, bytes / 4 / n * n);
    at::Tensor big = at::ones({whole}, at::kFloat);
    at::Tensor part = at::ones({whole / n}, at::kFloat);
    std::vector<double> times;
    for (int64_t k = 0; k < options.warmup() + options.repeats(); ++k) {
      ranks.line_up();
      const auto start = Clock::now();
      if (kind == "all_reduce") {
        world.all_reduce(big);
      } else if (kind == "all_gather") {
        world.all_gather_into_async(big, part).wait();
      } else {
        world.reduce_scatter(part, big);
      }
      if (k >= options.warmup()) {
        times.push_back(since(start));
      }
    }
    // The slowest rank's view is the collective's time.
    double t = median(times);
    at::Tensor slowest = at::tensor({t}, at::kDouble);
    world.all_reduce(slowest, dist::ReduceOp::kMax);
    t = slowest.item<double>();
    points.push_back(
        {factor * static_cast<double>(n - 1) / static_cast<double>(n) *
             static_cast<double>(whole * 4),
         t});
  }
  return fit_link_costs(points);
}

std::string describe_rows(const std::vector<int64_t>& rows) {
  std::string out;
  for (const int64_t r : rows) {
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

/// ", bound to CPU(s) 0 of 2 on rank 0" when this rank may not run on every
/// online CPU (the launcher's --cpu-bind cores, or taskset): how the ranks
/// ran belongs with what they measured.
std::string binding() {
  const auto cores = dist::allowed_cores();
  std::vector<int> cpus;
  for (const auto& core : cores) {
    cpus.insert(cpus.end(), core.begin(), core.end());
  }
  const size_t online = std::thread::hardware_concurrency();
  if (online == 0 || cpus.size() >= online) {
    return "";
  }
  return ", bound to CPU(s) " + dist::format_cpu_list(cpus) + " of " +
         std::to_string(online) + " on rank 0";
}

/// What every measurement of one profile shares: the run, its model's
/// shapes, the ranks and how many of them time compute, the block copies a
/// run passes through, and the device and dtypes the chunks compute in.
struct ProfileSetup {
  const JobConfig& config;
  const ProfileOptions& options;
  dist::Runtime* runtime;
  Ranks ranks;
  int64_t compute_ranks = 1;
  ModelArgs args;
  int64_t seq_len = 0;
  int64_t copies = 1;
  c10::Device device = c10::Device(at::kCPU);
  MixedPrecision dtypes;

  /// Whether this rank times compute.
  bool computes() const {
    return ranks.rank() < compute_ranks;
  }
};

/// The setup of a profile of `config` over `runtime`'s ranks (null: this
/// process alone); a collective call where the compute dtype is `auto`.
ProfileSetup profile_setup(
    const JobConfig& config,
    dist::Runtime* runtime,
    const ProfileOptions& options) {
  const Ranks ranks(runtime);
  const int64_t compute_ranks =
      options.compute_ranks() > 0
          ? std::min(options.compute_ranks(), ranks.size())
          : ranks.size();
  // The flavor's shapes with the tokenizer's vocabulary, as the dry run
  // settles them.
  const ModelArgs args = plan_model_args(config);
  if (args.n_layers < 1) {
    throw_config_error(config.origin("model.flavor"), "the model has no layer");
  }
  register_builtin_parallelisms();
  const c10::Device cpu(at::kCPU);
  const MixedPrecisionChoice mp =
      resolve_mixed_precision(config.training, cpu, [&ranks] {
        // Every rank measures; all take the slowest figure, as the trainer.
        auto speed = at::tensor({measure_bf16_matmul_speed()}, at::kDouble);
        if (ranks.world() != nullptr) {
          ranks.world()->all_reduce(speed, dist::ReduceOp::kMin);
        }
        return speed.item<double>();
      });
  // Blocks with weights of their own, as many as a stage or a rank's
  // stages would pass through (at most options.block_copies() and about
  // 1 GiB of weights, gradients and AdamW state).
  const int64_t copies = std::clamp<int64_t>(
      (int64_t{1} << 30) / std::max<int64_t>(1, 16 * args.params_per_layer()),
      1,
      std::min(options.block_copies(), args.n_layers));
  return ProfileSetup{
      config,
      options,
      runtime,
      ranks,
      compute_ranks,
      args,
      config.training.seq_len,
      copies,
      cpu,
      mp.dtypes};
}

/// The pieces' costs at each size, and the first block copy (the one the
/// optimizer is timed on).
struct TimedPieces {
  std::vector<MicrobatchCosts> costs;
  Chunk block;
};

/// Each size's costs from `figures`, which hold, per size, for the block,
/// the embedding and the output in turn, the means of F, B, I and W, then
/// their deviations: each piece's means, and the block's deviations as its
/// spread (the embedding's and the output's are a small part of a
/// stage's).
std::vector<MicrobatchCosts> piece_costs(
    const std::vector<double>& figures, const std::vector<int64_t>& rows_list) {
  std::vector<MicrobatchCosts> out;
  size_t k = 0;
  const auto next = [&] {
    PassCosts c{figures[k], figures[k + 1], figures[k + 2], figures[k + 3]};
    k += 4;
    return c;
  };
  for (const int64_t rows : rows_list) {
    MicrobatchCosts m;
    m.rows = rows;
    m.block = next();
    m.spread = next();
    m.embedding = next();
    next();
    m.output = next();
    next();
    out.push_back(m);
  }
  return out;
}

/// A block (setup.copies of it), the embedding and the output, built on
/// `on`, each timed by time_chunk at every size of `rows_list` (by this
/// rank where `runs`), then the mean over the compute ranks. `time_blocks`
/// false: the block's figures stay 0 (the pipeline measures them).
TimedPieces time_pieces(
    const ProfileSetup& setup,
    const ParallelContext& on,
    const std::vector<int64_t>& rows_list,
    bool runs,
    bool time_blocks) {
  const JobConfig& config = setup.config;
  const ModelArgs& args = setup.args;
  const int64_t n = args.n_layers;
  std::vector<Chunk> blocks;
  for (int64_t c = 0; c < setup.copies; ++c) {
    blocks.push_back(
        make_chunk(config, args, ChunkSpec{c, c + 1, false, false}, on));
  }
  std::vector<Chunk*> block_copies;
  for (auto& b : blocks) {
    block_copies.push_back(&b);
  }
  Chunk embedding = make_chunk(config, args, ChunkSpec{0, 0, true, false}, on);
  Chunk output = make_chunk(config, args, ChunkSpec{n, n, false, true}, on);
  std::vector<double> figures;
  for (const int64_t rows : rows_list) {
    for (const std::vector<Chunk*>& chunk :
         {block_copies,
          std::vector<Chunk*>{&embedding},
          std::vector<Chunk*>{&output}}) {
      const bool skip = !time_blocks && chunk == block_copies;
      const auto [c, v] = skip ? std::pair<PassCosts, PassCosts>{}
                               : time_chunk(
                                     chunk,
                                     args,
                                     rows,
                                     setup.seq_len,
                                     setup.ranks,
                                     runs,
                                     setup.options);
      figures.insert(figures.end(), {c.f, c.b, c.i, c.w, v.f, v.b, v.i, v.w});
    }
  }
  figures = setup.ranks.mean_over(std::move(figures), setup.compute_ranks);
  return {piece_costs(figures, rows_list), blocks.front()};
}

/// Each searched parallelism's degrees (options.splits) into
/// costs.split_costs: the pieces cut as the builder cuts them, every rank
/// of the world in one of its groups at once (only where the world divides
/// by the degree and every rank times compute). Returns what it timed, as
/// the cost file's `obtained` says it, or "".
std::string time_splits(const ProfileSetup& setup, PlanCosts& costs) {
  const Ranks& ranks = setup.ranks;
  std::string done;
  for (const auto& [name, by_degree] : setup.options.splits()) {
    const Parallelism* split = searched_parallelism(name);
    for (const auto& [degree, rows_list] : by_degree) {
      if (setup.runtime == nullptr || degree < 2 ||
          ranks.size() % degree != 0 || setup.compute_ranks < ranks.size()) {
        continue;
      }
      const ParallelDims dims = ParallelDims::of(
          {{kReplicateAxis, static_cast<int64_t>(ranks.size()) / degree},
           {split->axis->name, degree}},
          static_cast<int64_t>(ranks.size()));
      const dist::ParallelMesh mesh(
          dims, ranks.rank(), setup.runtime->shared_from_this());
      const ParallelContext on{
          setup.config, mesh, setup.device, /*pipelined=*/true, setup.dtypes};
      costs.split_costs[name][degree] =
          time_pieces(setup, on, rows_list, true, true).costs;
      done += (done.empty() ? "" : "; ") + name + " " + std::to_string(degree) +
              " (" + describe_rows(rows_list) + " sequences)";
    }
  }
  return done;
}

/// The links between ranks into `costs`. With two ranks or more, P2P as
/// the pipeline meets it where its runs timed their own messages (every
/// rank holds the same figures): both ranks computing (on shared cores a
/// large message waits for its transport's threads to get a core), fitted
/// over the sizes; else half an idle round trip. Then the world's
/// collectives. With one rank, nothing to measure: communication free.
/// Returns whether P2P came from the pipeline's messages.
bool time_links(
    const ProfileSetup& setup,
    const std::vector<PipelinedBlock>& pipelined,
    PlanCosts& costs) {
  const Ranks& ranks = setup.ranks;
  const ProfileOptions& options = setup.options;
  if (ranks.size() < 2) {
    for (CommCosts* c :
         {&costs.p2p,
          &costs.all_reduce,
          &costs.all_gather,
          &costs.reduce_scatter}) {
      c->inter_node = LinkCosts{0.0, 1e18};
    }
    return false;
  }
  std::vector<std::pair<double, double>> delivered;
  for (size_t k = 0; k < pipelined.size(); ++k) {
    if (pipelined[k].delivery_s >= 0.0) {
      delivered.push_back(
          {static_cast<double>(
               options.rows()[k] * setup.seq_len * setup.args.dim *
               c10::elementSize(setup.dtypes.param)),
           pipelined[k].delivery_s});
    }
  }
  const bool in_pipeline = delivered.size() >= 2;
  costs.p2p.inter_node =
      in_pipeline ? fit_link_costs(delivered) : time_p2p(ranks, options);
  costs.all_reduce.inter_node = time_collective("all_reduce", ranks, options);
  costs.all_gather.inter_node = time_collective("all_gather", ranks, options);
  costs.reduce_scatter.inter_node =
      time_collective("reduce_scatter", ranks, options);
  return in_pipeline;
}

/// How the profile measured `costs`, the cost file's `obtained`: the ranks
/// and threads, the sizes and runs, where the block was timed
/// (`block_in_pipeline`), the splits timed (`splits`, time_splits's), and
/// where P2P came from (`p2p_in_pipeline`, time_links's).
std::string describe_profile(
    const ProfileSetup& setup,
    const PlanCosts& costs,
    bool block_in_pipeline,
    const std::string& splits,
    bool p2p_in_pipeline) {
  const Ranks& ranks = setup.ranks;
  const ProfileOptions& options = setup.options;
  std::ostringstream obtained;
  obtained << "measured by baton plan's profile on this machine: "
           << ranks.size() << " rank(s) at once (" << setup.compute_ranks
           << " timing compute), " << at::get_num_threads()
           << " intra-op thread(s) each" << binding() << ", compute "
           << costs.compute_dtype << "; per microbatch of "
           << describe_rows(options.rows()) << " sequence(s) of "
           << setup.seq_len << " tokens, the mean of " << options.repeats()
           << " runs after " << options.warmup() << " warm-up(s)";
  if (!block_in_pipeline) {
    obtained << ", each passing through up to " << options.block_copies()
             << " blocks of their own weights";
  } else {
    obtained << " for the embedding and the output; the block's passes as "
                "the pipeline executor runs them in Interleaved1F1B and "
                "InterleavedZeroBubble over "
             << ranks.size() << " ranks, 2 one-block stages each, "
             << 2 * ranks.size() << " microbatches, the mean of "
             << options.pipeline_runs()
             << " run(s) after a warm-up, each size's runs interleaved with "
                "the others', with the time a rank takes to post each SEND "
                "and RECV";
  }
  obtained << "; the block's passes also with their standard deviation "
              "(spread)";
  if (!splits.empty()) {
    obtained << "; " << splits
             << ", each piece cut by the parallelism's own steps over that "
                "many ranks, their collectives included";
  }
  if (costs.data_parallel) {
    obtained << "; data parallelism over the " << costs.data_parallel->degree
             << " ranks (replicate, fully_shard always and never) as a "
                "micro-step of "
             << setup.copies << " blocks with its own appliers, at "
             << costs.data_parallel->rows
             << " sequence(s) per rank, against the same chunk alone";
  }
  if (ranks.size() >= 2) {
    obtained << (p2p_in_pipeline
                     ? "; P2P from the pipeline runs' own messages (from the "
                       "later of a SEND and its RECV posted to the data "
                       "usable, the median of those a compute waited for, "
                       "per size)"
                     : "; P2P between ranks 0 and 1")
             << " and the collectives of " << ranks.size() << " ranks over "
             << ranks.world()->backend() << ", fitted to latency + bytes / "
             << "bandwidth";
  } else {
    obtained << "; one rank: communication not measured (free)";
  }
  return obtained.str();
}

}  // namespace

LinkCosts fit_link_costs(const std::vector<std::pair<double, double>>& points) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    const double wgt = 1.0 / (y * y);
    sw += wgt;
    sx += wgt * x;
    sy += wgt * y;
    sxx += wgt * x * x;
    sxy += wgt * x * y;
  }
  const double det = sw * sxx - sx * sx;
  double slope = det != 0.0 ? (sw * sxy - sx * sy) / det : 0.0;
  double intercept = det != 0.0 ? (sy - slope * sx) / sw : 0.0;
  if (slope <= 0.0 || intercept < 0.0) {
    // Noise larger than the trend: the largest size's rate, no latency.
    const auto& [x, y] = points.back();
    slope = y / x;
    intercept = 0.0;
  }
  LinkCosts link;
  link.latency_s = intercept;
  link.bandwidth = 1.0 / slope;
  return link;
}

PlanCosts profile_plan_costs(
    const JobConfig& config,
    dist::Runtime* runtime,
    const ProfileOptions& options) {
  const ProfileSetup setup = profile_setup(config, runtime, options);
  const Ranks& ranks = setup.ranks;
  // Each rank works alone on its chunks: a mesh of one, the run's dtypes.
  const dist::ParallelMesh single(ParallelDims::of({}, 1), 0, nullptr);
  const ParallelContext context{
      config, single, setup.device, /*pipelined=*/true, setup.dtypes};

  PlanCosts costs;
  costs.path = "the profile";
  // Its phases, said by rank 0 as each starts (the profile's ranks log at
  // LogLevel::kProgress: these lines alone).
  const auto start = Clock::now();
  int phase = 0;
  const auto say = [&](const std::string& what) {
    if (ranks.rank() == 0) {
      BATON_LOG_PROGRESS(
          "plan: profile " + std::to_string(++phase) + "/6 at " +
          std::to_string(std::lround(since(start))) + " s: " + what);
    }
  };
  say(ranks.size() > 1 ? "a block's passes in a pipeline over " +
                             std::to_string(ranks.size()) + " ranks"
                       : "the passes of a block");
  std::vector<PipelinedBlock> pipelined = time_blocks_in_pipeline(
      config,
      setup.args,
      context,
      options.rows(),
      setup.copies,
      runtime,
      setup.compute_ranks,
      options);
  say("the embedding's and the output's passes at " +
      describe_rows(options.rows()) + " sequence(s)");
  auto [measured, block] = time_pieces(
      setup, context, options.rows(), setup.computes(), pipelined.empty());
  for (size_t k = 0; k < pipelined.size(); ++k) {
    measured[k].block = pipelined[k].block;
    measured[k].send_s = pipelined[k].send_s;
    measured[k].recv_s = pipelined[k].recv_s;
    measured[k].spread = pipelined[k].spread;
  }
  costs.microbatches = std::move(measured);
  say("the optimizer step");
  costs.optimizer_s_per_parameter =
      ranks
          .mean_over(
              {time_optimizer(
                  config, block, single, ranks, setup.computes(), options)},
              setup.compute_ranks)
          .front();
  std::string searched;
  for (const Parallelism* p : searched_parallelisms()) {
    searched += (searched.empty() ? "" : ", ") + p->name;
  }
  say("the splits of the searched parallelisms (" + searched + ")");
  const std::string splits = time_splits(setup, costs);
  say("data parallelism: replicate and fully_shard");
  costs.data_parallel = plan_detail::time_data_parallel(
      config,
      setup.args,
      setup.dtypes,
      options.data_parallel_rows(),
      setup.copies,
      runtime,
      setup.compute_ranks,
      options);
  costs.compute_dtype = mixed_precision_name(setup.dtypes.param);
  costs.device = "cpu";
  say("the links: point to point and the collectives");
  const bool p2p_in_pipeline = time_links(setup, pipelined, costs);
  costs.description = config.model.name + " " + config.model.flavor +
                      ", seq_len " + std::to_string(setup.seq_len) +
                      ", profiled here";
  costs.obtained = describe_profile(
      setup, costs, !pipelined.empty(), splits, p2p_in_pipeline);
  return costs;
}

}  // namespace baton
