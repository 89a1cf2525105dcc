// Context parallel's attention alone, on the debug Llama's attention shape
// (16 heads of 16, no grouping), one sequence of S positions split over 2
// ranks as threads over real Gloo, one ATen thread each, float32:
//
// - BM_GatheredKvAttention/S: one attention layer's forward and backward
//   (GatheredKvAttention::attend): its time, the bytes each rank sent
//   against the formula, (cp - 1) x 2 (keys and values) x S / cp x kv
//   width x 4 bytes forward (the all-gather) and as many backward (the
//   reduce-scatter), and how much of the exchanges the blocks computed
//   meanwhile hid: the time a rank still waited for them after its own
//   blocks, against the time the same two collectives take alone (each
//   rank's ranks posting them back to back, nothing to compute).
// - BM_OneProcessAttention/S: the same layer's causal attention over the
//   whole sequence in one process (models/common's CPU kernel), for scale.
//
// The whole model's activation peak and tokens/s, one process against cp 2
// as real processes: bench/context_parallel_runs.py.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>

#include "common/sequence_split.h"
#include "models/common/fused_ops.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/dist/process_group.h"
#include "tests/parallel/rank_threads.h"

namespace {

namespace cp = baton::context_parallel;

constexpr int64_t kRanks = 2;
constexpr int64_t kHeads = 16;
constexpr int64_t kHeadDim = 16;
constexpr int kTimed = 3;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void BM_GatheredKvAttention(benchmark::State& state) {
  const int64_t seq = state.range(0);
  const int64_t local = seq / kRanks;
  double layer_s = 0.0, wait_s = 0.0, alone_s = 0.0;
  std::map<std::string, cp::Traffic> counted;
  for (auto _ : state) {
    std::mutex mutex;
    const auto errors = baton::testing::run_rank_threads(
        kRanks,
        [&](int64_t rank, baton::dist::Runtime& rt) {
          at::set_num_threads(1);
          const baton::SequenceSplit split{kRanks, rank};
          at::manual_seed(rank);
          const auto q =
              (at::randn({1, kHeads, local, kHeadDim}) * 0.25).requires_grad_();
          const auto k =
              at::randn({1, kHeads, local, kHeadDim}).requires_grad_();
          const auto v =
              at::randn({1, kHeads, local, kHeadDim}).requires_grad_();
          const auto grad = at::randn({1, kHeads, local, kHeadDim});
          cp::GatheredKvAttention attention(
              rt.world(), split, "layers.0.attention");
          const auto layer = [&] {
            (attention.attend(q, k, v, at::Tensor()) * grad).sum().backward();
          };
          layer();  // warm-up
          rt.world()->barrier();
          if (rank == 0) {
            cp::reset_traffic();
          }
          rt.world()->barrier();
          auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < kTimed; ++i) {
            layer();
          }
          const double layer_time = seconds_since(start) / kTimed;
          rt.world()->barrier();
          // The same two exchanges with nothing to hide them behind.
          auto kv = at::randn({2, 1, kHeads, local, kHeadDim});
          auto gathered = at::empty({kRanks * kv.numel()});
          auto whole = at::randn({kRanks * kv.numel()});
          auto mine = at::empty({kv.numel()});
          rt.world()->barrier();
          start = std::chrono::steady_clock::now();
          for (int i = 0; i < kTimed; ++i) {
            rt.world()->all_gather_into_async(gathered, kv).wait();
            rt.world()->reduce_scatter_async(mine, whole).wait();
          }
          const double alone = seconds_since(start) / kTimed;
          rt.world()->barrier();
          std::lock_guard<std::mutex> lock(mutex);
          if (rank == 0) {
            layer_s = layer_time;
            alone_s = alone;
            counted = cp::traffic();
          }
        },
        std::chrono::seconds(300));
    for (const auto& e : errors) {
      if (!e.empty()) {
        state.SkipWithError(e.c_str());
        return;
      }
    }
    state.SetIterationTime(layer_s);
  }
  const double kv_bytes =
      static_cast<double>((kRanks - 1) * 2 * local * kHeads * kHeadDim * 4);
  double bytes = 0.0;
  for (const auto& [key, t] : counted) {
    bytes += static_cast<double>(t.bytes);
    wait_s += static_cast<double>(t.wait_ns) * 1e-9;
  }
  // Both ranks' counts, kTimed layers: per rank and layer.
  bytes /= kRanks * kTimed;
  wait_s /= kRanks * kTimed;
  state.counters["layer_ms"] = layer_s * 1e3;
  state.counters["bytes_per_rank"] = bytes;
  state.counters["formula_bytes"] = 2 * kv_bytes;
  state.counters["wait_ms"] = wait_s * 1e3;
  state.counters["alone_ms"] = alone_s * 1e3;
  state.counters["hidden_fraction"] =
      alone_s > 0 ? std::max(0.0, 1.0 - wait_s / alone_s) : 0.0;
}

void BM_OneProcessAttention(benchmark::State& state) {
  const int64_t seq = state.range(0);
  at::set_num_threads(1);
  at::manual_seed(0);
  const auto q =
      (at::randn({1, kHeads, seq, kHeadDim}) * 0.25).requires_grad_();
  const auto k = at::randn({1, kHeads, seq, kHeadDim}).requires_grad_();
  const auto v = at::randn({1, kHeads, seq, kHeadDim}).requires_grad_();
  const auto grad = at::randn({1, kHeads, seq, kHeadDim});
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    (baton::models::causal_attention(q, k, v, /*q_scaled=*/true) * grad)
        .sum()
        .backward();
    state.SetIterationTime(seconds_since(start));
  }
}

}  // namespace

BENCHMARK(BM_GatheredKvAttention)
    ->Arg(8192)
    ->Arg(16384)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneProcessAttention)
    ->Arg(8192)
    ->Arg(16384)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
