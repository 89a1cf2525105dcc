#pragma once

// Trains the same small Llama under any layout of pp (a named schedule),
// dp_shard, cp and tp, ranks as threads over real Gloo, with the builders'
// chain of appliers, AdamW and its LR schedule, on global batches every
// layout cuts the same way: what the tensor-parallel tests compare with one
// process, and the checkpoint tests save and resume.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/moe.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/grad_norm.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/split.h"
#include "parallel/pipeline/tied_weights.h"
#include "parallel/tensor_parallel/tensor_parallel.h"
#include "tests/models/reference_attention.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "tests/trainer/step_batches.h"
#include "trainer/moe_balance.h"
#include "trainer/pipeline_train_step.h"
#include "trainer/train_step.h"

namespace baton::testing {

/// A layout of the layout runs: pp with a schedule (pp 1: the local step),
/// dp_shard, tp, and ep of dp_shard.
struct RunLayout {
  int64_t pp = 1;
  std::string schedule = "1F1B";
  int64_t stages_per_rank = 1;
  /// HSDP's replicas of the dp_shard groups.
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  /// Context parallel: each sequence split over cp ranks (kLayoutRunSeq a
  /// multiple of 2 x cp, x tp).
  int64_t cp = 1;
  int64_t tp = 1;
  /// Expert parallel: ep of the dp_shard ranks (a model with experts).
  int64_t ep = 1;
  /// The MoE layers' auxiliary-loss coefficient (moe.aux_loss_coeff) and
  /// routing-bias step (moe.bias_update_rate; the trainer's balance_experts
  /// before each optimizer step).
  double aux_loss_coeff = 0.0;
  double bias_update_rate = 0.0;
  /// activation_checkpoint.mode, and with selective its kind.
  std::string ac = "none";
  std::string ac_selective = "layer";
  /// bf16 compute (training.mixed_precision_param), float32 reductions.
  bool bf16 = false;
  /// Document masking: every row of the global batches cut into documents
  /// at 2 places (seeded by the step), attention kept within them.
  bool documents = false;
  /// Rows of the global batch each data-parallel rank trains on per step
  /// (a pipeline's microbatches, of one row each).
  int64_t rows = 2;
  /// The model: its family (model.name) and shape; unset: layout_run_args().
  std::string model = "llama3";
  std::optional<ModelArgs> args;
  /// Run on each whole chunk after its seeded init, before the appliers
  /// (the same on every rank).
  std::function<void(ModelChunk&)> after_init;
  /// Step s's global batch (rows x dp rows of kLayoutRunSeq); unset:
  /// global_batch's.
  std::function<Batch(int64_t step)> batch;

  int64_t world() const {
    return pp * dp_replicate * dp_shard * cp * tp;
  }
  /// The one-process run of the same global batches.
  RunLayout one_process() const {
    RunLayout one;
    one.rows = rows * dp_replicate * dp_shard;
    one.bf16 = bf16;
    one.documents = documents;
    one.model = model;
    one.args = args;
    one.batch = batch;
    one.aux_loss_coeff = aux_loss_coeff;
    one.bias_update_rate = bias_update_rate;
    one.after_init = after_init;
    return one;
  }
  std::string str() const {
    return "pp " + std::to_string(pp) +
           (pp > 1 ? " (" + schedule + ")" : std::string()) +
           (dp_replicate > 1 ? " x dp_replicate " + std::to_string(dp_replicate)
                             : std::string()) +
           " x dp_shard " + std::to_string(dp_shard) +
           (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) + " x tp " +
           std::to_string(tp) +
           (ep > 1 ? " (ep " + std::to_string(ep) + ")" : std::string()) +
           (ac == "none"
                ? std::string()
                : ", activation checkpoint " + ac + " " + ac_selective) +
           (bf16 ? ", bf16" : "") + (documents ? ", documents" : "");
  }
};

/// The model of the layout runs: 4 layers, dim 32, 4 query and 2 key/value
/// heads, hidden 96, a vocabulary of 37 (odd: tp 2 splits it 19 + 18).
inline ModelArgs layout_run_args() {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 4;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 37;
  args.multiple_of = 16;
  return args;
}

/// layout_run_args with experts in every block: 8 of hidden 16, top 2 of
/// softmax scores (Qwen3-MoE's routing); `deepseek`: sigmoid scores in 2
/// groups (the best 1 kept), a shared expert, a routing bias, the first
/// block dense, scaled 2.5 (DeepSeek-V3's).
inline ModelArgs layout_moe_args(bool deepseek) {
  ModelArgs args = layout_run_args();
  args.moe.num_experts = 8;
  args.moe.top_k = 2;
  args.moe.expert_hidden = 16;
  if (deepseek) {
    args.moe.score_func = "sigmoid";
    args.moe.n_groups = 2;
    args.moe.topk_groups = 1;
    args.moe.shared_experts = 1;
    args.moe.expert_bias = true;
    args.moe.first_dense_layers = 1;
    args.moe.route_scale = 2.5;
  }
  return args;
}

/// An after_init that multiplies the routers' weights by 30: scores far
/// apart, so that no token sits near a tie between its k-th and (k+1)-th
/// expert and every layout routes alike (the runs assert the margin).
inline void spread_routers(ModelChunk& chunk) {
  torch::NoGradGuard no_grad;
  for (auto& item : chunk.named_parameters()) {
    if (item.key().find("router.gate.weight") != std::string::npos) {
      item.value().mul_(30.0);
    }
  }
}

/// The sequence length of global_batch.
constexpr int64_t kLayoutRunSeq = 8;

/// What one rank built, for the callbacks of run_layout.
struct LayoutRank {
  int64_t rank = 0;
  const dist::ParallelMesh* mesh = nullptr;
  dist::Runtime* runtime = nullptr;  // null for one process
  ModelParts parts;
  std::unique_ptr<OptimizersContainer> optimizers;
  std::unique_ptr<LRSchedulersContainer> schedulers;
};

/// The losses and grad norms of steps [first, last) and the whole weights at
/// the end.
struct LayoutRunResult {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::map<std::string, at::Tensor> params;
  /// The smallest routing margin of any MoE layer's forwards on any rank
  /// (MoeStats::min_margin; +inf without experts).
  double min_margin = INFINITY;
};

/// Called on every rank after it is built, before it trains; returns the
/// first step to train (a resume loads and returns its step).
using BeforeTraining = std::function<int64_t(LayoutRank&)>;
/// Called on every rank after its last step.
using AfterTraining = std::function<void(LayoutRank&, int64_t last)>;

/// One rank of `layout`: builds its parts (seeded init, whole weights,
/// then the chain: to_device, tensor_parallel, activation_checkpoint,
/// check_replicas, fully_shard as the builder places them), then trains
/// steps [before(rank), last) on global batch s (layout.rows rows per
/// data-parallel rank) and records the losses and its slices.
inline void run_layout_rank(
    const RunLayout& layout,
    int64_t rank,
    dist::Runtime* rt,
    int64_t last,
    const BeforeTraining& before,
    const AfterTraining& after,
    LayoutRunResult& result,
    std::mutex& mutex) {
  const ModelArgs args = layout.args.value_or(layout_run_args());
  const auto dims = baton::testing::builtin_dims(
      layout.dp_replicate,
      layout.dp_shard,
      layout.tp,
      layout.pp,
      layout.world(),
      layout.ep,
      layout.cp);
  const dist::ParallelMesh mesh(
      dims, rank, rt ? rt->shared_from_this() : nullptr);
  JobConfig config;
  config.model.name = layout.model;
  config.parallelism.data_parallel_replicate_degree = layout.dp_replicate;
  config.parallelism.data_parallel_shard_degree = layout.dp_shard;
  config.set_integer("parallelism.tensor_parallel_degree", layout.tp);
  config.set_integer("parallelism.expert_parallel_degree", layout.ep);
  config.set_integer("parallelism.context_parallel_degree", layout.cp);
  config.parallelism.pipeline_parallel_degree = layout.pp;
  config.training.seq_len = kLayoutRunSeq;
  config.activation_checkpoint.mode = layout.ac;
  config.activation_checkpoint.selective = layout.ac_selective;
  // eps 1e-6: see data_parallel_step_test.cpp. A rate large enough that a
  // wrong gradient shows in three steps (norm weights near 1 move by about
  // the rate each step).
  config.optimizer.lr = 1e-2;
  config.optimizer.eps = 1e-6;
  config.optimizer.weight_decay = 0.1;
  const MixedPrecision mp = layout.bf16
                                ? MixedPrecision{at::kBFloat16, at::kFloat}
                                : MixedPrecision{};
  const ApplierChain chain = with_mixed_precision(
      with_activation_checkpoint(
          with_expert_parallel(
              with_context_parallel(
                  with_tensor_parallel(
                      data_parallel_chain(
                          layout.dp_replicate, layout.dp_shard, layout.cp),
                      layout.tp),
                  layout.cp),
              layout.ep),
          config),
      mp);
  const bool pipelined = layout.pp > 1;
  pipeline::Schedule schedule;
  std::vector<ChunkSpec> chunks = {ChunkSpec{}};
  if (pipelined) {
    pipeline::register_builtin_schedules();
    schedule = pipeline::make_schedule(
        layout.schedule, layout.pp, layout.stages_per_rank, layout.rows);
    chunks = pipeline::split_model(args.n_layers, schedule.num_stages);
  }
  LayoutRank me;
  me.rank = rank;
  me.mesh = &mesh;
  me.runtime = rt;
  std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages;
  for (int64_t s = 0; s < static_cast<int64_t>(chunks.size()); ++s) {
    if (pipelined && schedule.stage_to_rank[s] != mesh.coord().at("pp")) {
      continue;
    }
    auto chunk = std::make_shared<models::TransformerImpl>(args, chunks[s]);
    chunk->init_weights(5);
    if (layout.after_init) {
      layout.after_init(*chunk);
    }
    auto part = std::make_shared<ModelPart>(chunk, s);
    chain.apply(*part, ParallelContext{config, mesh, at::kCPU, pipelined, mp});
    for (const auto& m : chunk->modules()) {
      if (auto* moe = m->as<models::MoEImpl>()) {
        moe->aux_loss_coeff = layout.aux_loss_coeff;
      }
    }
    stages.emplace_back(s, chunk);
    me.parts.push_back(part);
  }
  if (pipelined) {
    pipeline::tie_embeddings(
        me.parts,
        args.tie_embeddings,
        schedule.stage_to_rank,
        mesh,
        rt ? rt->shared_from_this() : nullptr);
  }
  register_builtin_optimizers();
  std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
  std::vector<std::unique_ptr<LRScheduler>> lrs;
  me.parts.for_each([&](ModelPart& part) {
    opts.push_back(
        optimizer_registry().get("AdamW")(part.module().parameters(), config));
  });
  me.optimizers = std::make_unique<OptimizersContainer>(std::move(opts));
  me.optimizers->for_each([&](torch::optim::Optimizer& o) {
    lrs.push_back(std::make_unique<LRScheduler>(
        o, std::make_shared<WarmupStableDecay>(config.lr_scheduler, 1000)));
  });
  me.schedulers = std::make_unique<LRSchedulersContainer>(std::move(lrs));
  const LossFn loss =
      tensor_parallel::tensor_parallel_loss(mesh, args.vocab_size);
  std::unique_ptr<TrainStep> step;
  if (pipelined) {
    pipeline::ExecutorShapes shapes;
    shapes.microbatches = layout.rows;
    shapes.seq_len = kLayoutRunSeq / layout.cp;
    shapes.dim = args.dim;
    shapes.sequence_shards = layout.tp;
    shapes.dtype = mp.param;
    shapes.documents_len = layout.documents ? kLayoutRunSeq : 0;
    step = std::make_unique<PipelinedTrainStep>(
        std::make_unique<pipeline::PipelineExecutor>(
            pipeline::lower_schedule(schedule),
            stages,
            mesh.group("pp"),
            loss,
            shapes),
        mesh.group("pp"),
        mesh.loss(),
        /*accumulation=*/1,
        layout.rows * kLayoutRunSeq / layout.cp);
  } else {
    step = std::make_unique<LocalTrainStep>(loss, mesh.loss());
  }
  const int64_t first = before ? before(me) : 0;
  const int64_t dp_rank = mesh.index("dp");
  const bool reads_data =
      !pipelined || schedule.stage_to_rank[0] == mesh.coord().at("pp");
  std::vector<double> losses;
  std::vector<double> norms;
  double margin = INFINITY;
  for (int64_t s = first; s < last; ++s) {
    std::vector<Batch> batches;
    if (reads_data) {
      Batch global =
          layout.batch
              ? layout.batch(s)
              : global_batch(s, layout.rows * dims.dp(), args.vocab_size, 3000);
      if (layout.documents) {
        global.documents = random_documents(
            std::vector<int64_t>(global.inputs.size(0), 2),
            kLayoutRunSeq,
            static_cast<uint64_t>(100 + s));
      }
      batches = micro_batches(global, dp_rank, layout.rows, 1);
      // Context parallel: this rank's positions of each row.
      const SequenceSplit split{layout.cp, mesh.index(kContextAxis)};
      for (Batch& b : batches) {
        b.inputs = split.take(b.inputs, 1);
        b.labels = split.take(b.labels, 1);
      }
    }
    me.optimizers->zero_grad();
    losses.push_back(step->run(me.parts, batches).loss);
    // Over the groups each gradient is split along, as the trainer's clip.
    norms.push_back(grad_norm(me.parts, mesh));
    for (models::MoEImpl* moe : moe_layers(me.parts)) {
      margin = std::min(margin, moe->stats().min_margin);
    }
    balance_experts(me.parts, mesh.loss(), layout.bias_update_rate);
    me.optimizers->step();
    me.schedulers->step();
  }
  if (after) {
    after(me, last);
  }
  std::lock_guard<std::mutex> lock(mutex);
  result.min_margin = std::min(result.min_margin, margin);
  if (rank == 0) {
    result.losses = losses;
    result.grad_norms = norms;
  }
  // The tensors every rank of a stage holds whole (the norms under tp)
  // must have stayed equal.
  me.parts.for_each([&](ModelPart& part) {
    for (const auto& item : part.module().named_parameters()) {
      const auto it = result.params.find(item.key());
      if (part.slice(item.key()) == nullptr && it != result.params.end()) {
        EXPECT_TRUE(torch::allclose(it->second, item.value(), 1e-6, 1e-7))
            << item.key() << " differs between ranks by "
            << (it->second - item.value()).abs().max().item<double>();
      }
    }
  });
  collect_whole(me.parts, result.params);
}

/// run_layout_rank on every rank of `layout` (one process for world 1).
inline LayoutRunResult run_layout(
    const RunLayout& layout,
    int64_t last,
    const BeforeTraining& before = nullptr,
    const AfterTraining& after = nullptr) {
  LayoutRunResult result;
  std::mutex mutex;
  run_ranks_or_one(layout.world(), [&](int64_t r, dist::Runtime* rt) {
    run_layout_rank(layout, r, rt, last, before, after, result, mutex);
  });
  return result;
}

/// Whether `run` matches `reference`: losses within `loss_atol`, grad norms
/// within a relative 10 x `loss_atol`, every whole weight within rtol
/// `rtol` (and atol `atol`); the failure lists every mismatch.
inline ::testing::AssertionResult same_run(
    const LayoutRunResult& run,
    const LayoutRunResult& reference,
    double loss_atol = 1e-5,
    double rtol = 1e-4,
    double atol = 1e-5) {
  std::ostringstream bad;
  if (run.losses.size() != reference.losses.size() ||
      run.grad_norms.size() != reference.grad_norms.size() ||
      run.params.size() != reference.params.size()) {
    return ::testing::AssertionFailure()
           << run.losses.size() << " losses, " << run.grad_norms.size()
           << " grad norms, " << run.params.size() << " weights; the reference "
           << reference.losses.size() << ", " << reference.grad_norms.size()
           << ", " << reference.params.size();
  }
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    if (!(std::abs(run.losses[i] - reference.losses[i]) <= loss_atol)) {
      bad << "\n  step " << i << ": loss " << run.losses[i] << " against "
          << reference.losses[i];
    }
    const double norm = reference.grad_norms[i];
    if (!(std::abs(run.grad_norms[i] - norm) <= 10 * loss_atol * norm)) {
      bad << "\n  step " << i << ": grad norm " << run.grad_norms[i]
          << " against " << norm;
    }
  }
  for (const auto& [fqn, p] : reference.params) {
    const auto it = run.params.find(fqn);
    if (it == run.params.end()) {
      bad << "\n  " << fqn << ": missing";
    } else if (!torch::allclose(it->second, p, rtol, atol)) {
      bad << "\n  " << fqn << " differs by "
          << (it->second - p).abs().max().item<double>();
    }
  }
  if (bad.str().empty()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "differs from the reference:" << bad.str();
}

}  // namespace baton::testing
