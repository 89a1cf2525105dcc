// Tensor parallel's traffic against the formula: the debug and small
// models at tp 2, ranks as threads over real Gloo, one optimizer step
// (forward, vocabulary-parallel cross-entropy, backward, AdamW) per
// iteration through the local train step. Each sequence-parallel region
// counts the bytes a rank hands to its collectives
// (parallel/tensor_parallel/regions.h); the formula is Megatron's, from
// the model's shape alone: with b sequences of T tokens, hidden size d, e
// bytes per element and n ranks, each all-gather or reduce-scatter of the
// sequence moves (n - 1) / n x b T d e per rank, and a block has four (its
// attention's and feed-forward's entry gathers and exit reduce-scatters)
// forward and four backward; its two norms' gradients are all-reduced
// (2 (n - 1) / n x d x 4 bytes each); the root adds the embedding's
// reduce-scatter and the output's gather, with their backward, and the
// final norm's all-reduce. Also the step time, for the record (TP on two
// CPU cores is not expected to pay).

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>

#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/llama3/llama3.h"
#include "models/model_args.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "parallel/tensor_parallel/regions.h"
#include "parallel/tensor_parallel/tensor_parallel.h"
#include "tests/parallel/rank_threads.h"
#include "trainer/train_step.h"

namespace {

namespace tp = baton::tensor_parallel;

constexpr int64_t kRanks = 2;
constexpr int64_t kBatch = 2;  // sequences per step
constexpr int64_t kSeqLen = 256;
constexpr int64_t kVocab = 258;  // the byte tokenizer's
constexpr int kTimedSteps = 3;

/// Bytes per rank and step of one block's regions and of the root's, by the
/// formula above.
struct Formula {
  double block = 0.0;
  double root = 0.0;
};

Formula formula(const baton::ModelArgs& a, int64_t n) {
  const double activation = static_cast<double>(kBatch * kSeqLen * a.dim) * 4;
  const double moved = (n - 1.0) / n * activation;
  const double norm = 2.0 * (n - 1.0) / n * a.dim * 4;
  return {8 * moved + 2 * norm, 4 * moved + norm};
}

void BM_TensorParallelTraffic(benchmark::State& state, const char* flavor) {
  auto args = baton::llama3::flavors().at(flavor);
  args.vocab_size = kVocab;
  baton::register_builtin_optimizers();
  baton::register_builtin_parallelisms();
  double step_s = 0.0;
  std::map<std::string, tp::Traffic> counted;
  for (auto _ : state) {
    std::mutex mutex;
    const auto errors = baton::testing::run_rank_threads(
        kRanks,
        [&](int64_t rank, baton::dist::Runtime& rt) {
          at::set_num_threads(1);
          const auto dims = baton::ParallelDims::of(
              {{baton::tensor_parallel::kAxis, kRanks}}, kRanks);
          const baton::dist::ParallelMesh mesh(
              dims, rank, rt.shared_from_this());
          baton::JobConfig config;
          config.set_integer("parallelism.tensor_parallel_degree", kRanks);
          config.training.seq_len = kSeqLen;
          auto model = std::make_shared<baton::models::TransformerImpl>(args);
          model->init_weights(0);
          baton::ModelParts parts;
          parts.push_back(std::make_shared<baton::ModelPart>(model));
          tp::TensorParallelApplier().apply(
              parts[0], baton::ParallelContext{config, mesh, at::kCPU});
          auto opt = baton::optimizer_registry().get("AdamW")(
              parts.parameters(), config);
          baton::LocalTrainStep step(
              tp::tensor_parallel_loss(mesh, kVocab), mesh.loss());
          const auto tokens =
              torch::randint(0, kVocab, {kBatch, kSeqLen + 1}, torch::kLong);
          const baton::Batch batch{
              tokens.slice(1, 0, kSeqLen), tokens.slice(1, 1, kSeqLen + 1), {}};
          const auto run_step = [&] {
            opt->zero_grad();
            step.run(parts, {batch});
            opt->step();
          };
          run_step();  // warm-up
          rt.world()->barrier();
          if (rank == 0) {
            tp::reset_traffic();
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
          rt.world()->barrier();
          std::lock_guard<std::mutex> lock(mutex);
          if (rank == 0) {
            step_s = s;
            counted = tp::traffic();
          }
        },
        std::chrono::seconds(120));
    for (const auto& e : errors) {
      if (!e.empty()) {
        state.SkipWithError(e.c_str());
        return;
      }
    }
  }
  // Per rank and step: the table adds both rank threads' counts.
  const double per = 1.0 / (kRanks * kTimedSteps);
  double blocks = 0.0, root = 0.0, collectives = 0.0;
  for (const auto& [key, t] : counted) {
    (key.rfind("layers.", 0) == 0 ? blocks : root) += t.bytes * per;
    collectives += t.calls * per;
  }
  const Formula f = formula(args, kRanks);
  state.counters["block_mib"] = blocks / args.n_layers / (1 << 20);
  state.counters["block_formula_mib"] = f.block / (1 << 20);
  state.counters["root_mib"] = root / (1 << 20);
  state.counters["root_formula_mib"] = f.root / (1 << 20);
  state.counters["collectives_per_step"] = collectives;
  state.counters["step_s"] = step_s;
  state.counters["tokens_per_sec"] = kBatch * kSeqLen / step_s;
  state.counters["layers"] = static_cast<double>(args.n_layers);
  state.counters["dim"] = static_cast<double>(args.dim);
}

BENCHMARK_CAPTURE(BM_TensorParallelTraffic, debugmodel, "debugmodel")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TensorParallelTraffic, small, "small")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
