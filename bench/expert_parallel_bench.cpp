// Expert parallel and the experts' products, on the debug Qwen3-MoE (dim
// 256, 6 layers, 8 experts of hidden 256, top 2), float32:
//
// - BM_MoeStep/ep:E: one optimizer step of the whole model (forward, loss,
//   backward, fully_shard's reduce-scatters, AdamW) on 2 ranks as threads
//   over real Gloo, dp_shard 2 with ep E (1: plain FSDP, every rank all
//   experts), 2 x 256 tokens per rank: tokens/s, and at ep 2 the bytes each
//   rank hands to the all-to-alls per step against the formula from the
//   step's routing: a rank's rows for the other rank's experts (the counts
//   its routers made, as MoeStats keeps them) x dim x 4 bytes, sent four
//   times (dispatch and combine, forward and backward; a rank sends back as
//   many rows as it receives, and the two ranks' sums are equal), plus the
//   counts' exchange, (n - 1) E / n x 8 bytes per exchange.
// - BM_ExpertProducts/loop, /grouped_mm and /dense (and their _bf16): one
//   MoE layer's forward and backward on 2048 tokens (router, the sorted
//   rows, the experts' products as one product per expert or ATen's
//   grouped matmul) against a dense SwiGLU whose hidden size is top_k x the
//   experts' (the same multiply-adds per token), one thread, float32 and
//   bfloat16: what moe.expert_products' auto chooses on the CPU, and what
//   the experts cost over one product of the same FLOPs.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>

#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/model_args.h"
#include "models/moe.h"
#include "models/qwen3/qwen3.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "tests/parallel/rank_threads.h"
#include "trainer/moe_balance.h"
#include "trainer/train_step.h"

namespace {

namespace ep = baton::expert_parallel;

constexpr int64_t kRanks = 2;
constexpr int64_t kBatch = 2;  // sequences per rank and step
constexpr int64_t kSeqLen = 256;
constexpr int64_t kVocab = 258;  // the byte tokenizer's
constexpr int kTimedSteps = 3;

baton::ModelArgs debug_moe() {
  auto args = baton::qwen3::moe_flavors().at("debugmodel");
  args.vocab_size = kVocab;
  return args;
}

void BM_MoeStep(benchmark::State& state) {
  const int64_t degree = state.range(0);
  const auto args = debug_moe();
  baton::register_builtin_optimizers();
  baton::register_builtin_appliers();
  double step_s = 0.0;
  double formula_bytes = 0.0;
  std::map<std::string, ep::Traffic> counted;
  for (auto _ : state) {
    std::mutex mutex;
    double remote_rows = 0.0;
    int64_t exchanges = 0;
    const auto errors = baton::testing::run_rank_threads(
        kRanks,
        [&](int64_t rank, baton::dist::Runtime& rt) {
          at::set_num_threads(1);
          const auto dims = baton::ParallelDims::of(
              {{baton::kShardAxis, kRanks}, {baton::kExpertAxis, degree}},
              kRanks);
          const baton::dist::ParallelMesh mesh(
              dims, rank, rt.shared_from_this());
          baton::JobConfig config;
          config.parallelism.data_parallel_shard_degree = kRanks;
          config.set_integer("parallelism.expert_parallel_degree", degree);
          config.training.seq_len = kSeqLen;
          auto model = std::make_shared<baton::models::TransformerImpl>(args);
          model->init_weights(0);
          baton::ModelParts parts;
          parts.push_back(std::make_shared<baton::ModelPart>(model));
          const baton::ParallelContext context{config, mesh, at::kCPU};
          if (degree > 1) {
            ep::ExpertParallelApplier().apply(parts[0], context);
          }
          baton::fsdp::FullyShardApplier().apply(parts[0], context);
          auto opt = baton::optimizer_registry().get("AdamW")(
              parts.parameters(), config);
          baton::LocalTrainStep step(baton::cross_entropy_sum, mesh.loss());
          at::manual_seed(rank);
          const auto tokens =
              torch::randint(0, kVocab, {kBatch, kSeqLen + 1}, torch::kLong);
          const baton::Batch batch{
              tokens.slice(1, 0, kSeqLen), tokens.slice(1, 1, kSeqLen + 1), {}};
          const auto run_step = [&] {
            opt->zero_grad();
            step.run(parts, {batch});
            opt->step();
          };
          run_step();                                       // warm-up
          baton::balance_experts(parts, mesh.loss(), 0.0);  // fresh counts
          rt.world()->barrier();
          if (rank == 0) {
            ep::reset_traffic();
          }
          rt.world()->barrier();
          const auto start = std::chrono::steady_clock::now();
          for (int s = 0; s < kTimedSteps; ++s) {
            run_step();
          }
          const double s = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count() /
                           kTimedSteps;
          // The rows this rank's routers sent to the other rank's experts.
          double remote = 0.0;
          int64_t layers = 0;
          for (auto* moe : baton::moe_layers(parts)) {
            const auto& st = moe->stats();
            const int64_t experts = moe->args().num_experts;
            const int64_t local = experts / degree;
            const int64_t me =
                degree > 1 ? mesh.index(baton::kExpertAxis) : rank;
            const auto* c = st.tokens_per_expert.data_ptr<double>();
            for (int64_t e = 0; e < experts; ++e) {
              remote += e / local == me ? 0.0 : c[e];
            }
            ++layers;
          }
          rt.world()->barrier();
          std::lock_guard<std::mutex> lock(mutex);
          remote_rows += remote;
          exchanges = layers * kTimedSteps;
          if (rank == 0) {
            step_s = s;
            counted = ep::traffic();
          }
        },
        std::chrono::seconds(300));
    for (const auto& e : errors) {
      if (!e.empty()) {
        state.SkipWithError(e.c_str());
        return;
      }
    }
    // Per rank: the rows both ranks sent, four times over, and the counts.
    formula_bytes = degree > 1 ? 4.0 * remote_rows * args.dim * 4 / kRanks +
                                     exchanges * (kRanks - 1.0) / kRanks *
                                         args.moe.num_experts * 8
                               : 0.0;
  }
  // Per rank and step: the table adds both rank threads' counts.
  const double per = 1.0 / (kRanks * kTimedSteps);
  double bytes = 0.0;
  double calls = 0.0;
  for (const auto& [key, t] : counted) {
    bytes += t.bytes * per;
    calls += t.calls * per;
  }
  state.counters["a2a_mib"] = bytes / (1 << 20);
  state.counters["a2a_formula_mib"] = formula_bytes / kTimedSteps / (1 << 20);
  state.counters["a2a_per_step"] = calls;
  state.counters["step_s"] = step_s;
  state.counters["tokens_per_sec"] = kRanks * kBatch * kSeqLen / step_s;
  // At balance a rank sends (n - 1) / n of its k rows per token per layer.
  const double balanced = 4.0 * (kRanks - 1.0) / kRanks * kBatch * kSeqLen *
                          args.moe.top_k * args.dim * 4 * args.n_layers;
  state.counters["a2a_balanced_mib"] = degree > 1 ? balanced / (1 << 20) : 0.0;
}

BENCHMARK(BM_MoeStep)
    ->ArgName("ep")
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

constexpr int64_t kTokens = 2048;

/// What BM_ExpertProducts runs: the MoE layer with its experts' products
/// as a loop or ATen's grouped matmul, or the dense SwiGLU of the same
/// multiply-adds.
enum class Layer { kLoop, kGrouped, kDense };

void BM_ExpertProducts(
    benchmark::State& state, Layer kind, at::ScalarType dtype) {
  at::set_num_threads(1);
  const auto args = debug_moe();
  at::manual_seed(0);
  std::shared_ptr<torch::nn::Module> layer;
  std::function<at::Tensor(const at::Tensor&)> forward;
  if (kind != Layer::kDense) {
    auto moe = std::make_shared<baton::models::MoEImpl>(args);
    moe->products = kind == Layer::kLoop ? baton::models::ExpertProducts::kLoop
                                         : baton::models::ExpertProducts::kAuto;
    for (auto& p : moe->parameters()) {
      torch::NoGradGuard no_grad;
      p.normal_(0.0, 0.02);
    }
    moe->to(dtype);
    forward = [moe](const at::Tensor& x) { return moe->forward(x); };
    layer = moe;
  } else {
    baton::ModelArgs dense = args;
    dense.moe = {};
    dense.ffn_hidden = args.moe.top_k * args.moe.expert_hidden;
    auto ffn = std::make_shared<baton::models::FeedForwardImpl>(dense);
    for (auto& p : ffn->parameters()) {
      torch::NoGradGuard no_grad;
      p.normal_(0.0, 0.02);
    }
    ffn->to(dtype);
    forward = [ffn](const at::Tensor& x) { return ffn->forward(x); };
    layer = ffn;
  }
  const at::Tensor x =
      at::randn({1, kTokens, args.dim}).to(dtype).requires_grad_();
  const auto pass = [&] {
    forward(x).sum().backward();
    layer->zero_grad();
  };
  pass();  // warm-up: oneDNN's kernels for these shapes
  for (auto _ : state) {
    pass();
  }
  // Multiply-adds of the expert products (forward and backward: 3x).
  const double flops = 3.0 * 2.0 * kTokens * args.moe.top_k * 3.0 * args.dim *
                       args.moe.expert_hidden;
  state.counters["tokens_per_sec"] = benchmark::Counter(
      static_cast<double>(kTokens),
      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gflops"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_ExpertProducts, loop, Layer::kLoop, at::kFloat)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ExpertProducts, grouped_mm, Layer::kGrouped, at::kFloat)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ExpertProducts, dense, Layer::kDense, at::kFloat)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ExpertProducts, loop_bf16, Layer::kLoop, at::kBFloat16)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(
    BM_ExpertProducts, grouped_mm_bf16, Layer::kGrouped, at::kBFloat16)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ExpertProducts, dense_bf16, Layer::kDense, at::kBFloat16)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
