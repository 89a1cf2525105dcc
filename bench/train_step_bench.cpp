// One optimizer step (forward, loss, backward, clip, AdamW) of the Llama
// flavors on the bundled corpus, single process.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>

#include "bench/train_step_config.h"
#include "builders/builder_registry.h"
#include "common/allocator.h"
#include "common/blas.h"
#include "common/threads.h"
#include "common/torch_compat.h"
#include "models/common/attention_kernel.h"
#include "models/common/fused_ops.h"

namespace {

constexpr int kWarmupSteps = 3;

std::unique_ptr<baton::Trainer> make_trainer(
    const std::string& flavor,
    int64_t seq_len,
    int64_t threads,
    const std::string& precision) {
  baton::register_builtin_builders();
  const auto config = baton::load_job_config(
      "",
      baton::bench::train_step_overrides(
          flavor, seq_len, /*batch=*/8, threads, precision));
  return baton::make_trainer_builder(config)->build();
}

void BM_TrainStep(benchmark::State& state, const std::string& flavor) {
  const int64_t seq_len = state.range(0);
  const int64_t threads = state.range(1);
  const bool bf16 = state.range(2) != 0;
  auto trainer =
      make_trainer(flavor, seq_len, threads, bf16 ? "bfloat16" : "float32");
  // Warm-up: the allocator's heap and BLAS buffers grow over the first
  // steps (as the torchtitan peer's do: it warms up as many).
  for (int i = 0; i < kWarmupSteps; ++i) {
    trainer->optimizer_step();
  }
  double tflops = 0.0;
  for (auto _ : state) {
    tflops += trainer->optimizer_step().tflops;
  }
  const int64_t tokens = 8 * seq_len;
  state.counters["tokens_per_sec"] = benchmark::Counter(
      static_cast<double>(tokens * state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["tflops"] = tflops / static_cast<double>(state.iterations());
}
// A fixed number of steps per repetition, the same on every run; bf16 1:
// bfloat16 compute over float32 master weights (mixed_precision_param).
BENCHMARK_CAPTURE(BM_TrainStep, debugmodel, std::string("debugmodel"))
    ->ArgNames({"seq_len", "threads", "bf16"})
    ->ArgsProduct({{256}, {1, 2}, {0, 1}})
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, small, std::string("small"))
    ->ArgNames({"seq_len", "threads", "bf16"})
    ->ArgsProduct({{256}, {1, 2}, {0, 1}})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// Peak matmul throughput, the denominator of MFU: float32 (bf16 0) and
/// bfloat16 (bf16 1, what the bfloat16 steps' products run in).
void BM_MatmulPeak(benchmark::State& state) {
  at::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = state.range(0);
  const auto dtype = state.range(2) != 0 ? at::kBFloat16 : at::kFloat;
  const auto a = torch::randn({n, n}).to(dtype);
  const auto b = torch::randn({n, n}).to(dtype);
  auto c = torch::empty({n, n}, dtype);
  at::mm_out(c, a, b);  // untimed: oneDNN builds its kernel once
  for (auto _ : state) {
    at::mm_out(c, a, b);
  }
  state.counters["flops"] = benchmark::Counter(
      2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulPeak)
    ->ArgNames({"n", "threads", "bf16"})
    ->ArgsProduct({{1024}, {1, 2}, {0, 1}})
    ->UseRealTime();

/// Times forward + backward of `attend` on one layer's attention at the
/// flavors' shapes (B 8, T 256; debugmodel: 16 heads of 16, small: 8 heads
/// of 64) with `threads` ATen threads.
template <typename Attend>
void time_attention(
    benchmark::State& state,
    int64_t heads,
    int64_t head_dim,
    int64_t threads,
    const Attend& attend) {
  at::set_num_threads(static_cast<int>(threads));
  const auto make = [&] {
    return torch::randn({8, heads, 256, head_dim}).requires_grad_(true);
  };
  const auto q = make(), k = make(), v = make();
  const auto gy = torch::randn({8, heads, 256, head_dim});
  const auto step = [&] { attend(q, k, v).backward(gy); };
  // One untimed run first: the first one grows the heap (page faults) and
  // would be the only one timed when it alone passes the minimum time.
  step();
  for (auto _ : state) {
    step();
  }
}

/// Baton's blocked attention in ATen's batched products by block size
/// (block = T: one block, every score formed), and libtorch's own (the
/// math path of _scaled_dot_product_attention, block 0 here).
void BM_CausalAttention(benchmark::State& state) {
  const int64_t block = state.range(2);
  time_attention(
      state,
      state.range(0),
      state.range(1),
      state.range(3),
      [block](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return block > 0 ? baton::models::blocked_causal_attention(
                               q, k, v, false, block)
                         : at::scaled_dot_product_attention(
                               q, k, v, {}, 0.0, /*is_causal=*/true);
      });
}
BENCHMARK(BM_CausalAttention)
    ->ArgNames({"heads", "head_dim", "block", "threads"})
    ->ArgsProduct({{16}, {16}, {0, 32, 64, 128, 256}, {1}})
    ->Args({8, 64, 0, 1})
    ->Args({8, 64, 64, 1})
    ->Args({16, 16, 0, 2})
    ->Args({16, 16, 64, 2})
    ->Args({8, 64, 0, 2})
    ->Args({8, 64, 64, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// What the model runs on the CPU in float32: the attention kernel
/// (models/common/attention_kernel.h), the widest instruction set the CPU
/// runs, the heads split among ATen's threads.
void BM_AttentionKernel(benchmark::State& state) {
  time_attention(
      state,
      state.range(0),
      state.range(1),
      state.range(2),
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return baton::models::causal_attention(q, k, v);
      });
  state.SetLabel(baton::models::attention_kernel::isa_name(
      baton::models::attention_kernel::best_isa()));
}
BENCHMARK(BM_AttentionKernel)
    ->ArgNames({"heads", "head_dim", "threads"})
    ->ArgsProduct({{16}, {16}, {1, 2}})
    ->ArgsProduct({{8}, {64}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// SwiGLU's elementwise part, forward + backward, at the flavors' shapes
/// (8 x 256 tokens; debugmodel: hidden 768, small: 1536) with `threads`
/// ATen threads: fused (1: swiglu, swiglu_kernel.h) against ATen's silu and
/// product (0).
void BM_Swiglu(benchmark::State& state) {
  const int64_t hidden = state.range(0);
  const bool fused = state.range(1) != 0;
  at::set_num_threads(static_cast<int>(state.range(2)));
  const auto a = torch::randn({8, 256, hidden}).requires_grad_(true);
  const auto b = torch::randn({8, 256, hidden}).requires_grad_(true);
  const auto gy = torch::randn({8, 256, hidden});
  const auto step = [&] {
    const auto y = fused ? baton::models::swiglu(a, b) : torch::silu(a) * b;
    y.backward(gy);
    a.mutable_grad() = at::Tensor();
    b.mutable_grad() = at::Tensor();
  };
  step();  // untimed: the heap grows once
  for (auto _ : state) {
    step();
  }
  if (fused) {
    state.SetLabel(baton::models::attention_kernel::isa_name(
        baton::models::attention_kernel::best_isa()));
  }
}
BENCHMARK(BM_Swiglu)
    ->ArgNames({"hidden", "fused", "threads"})
    ->ArgsProduct({{768, 1536}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // As `baton train` runs with several threads (common/threads.h): the
  // benchmarks set 1 or 2 ATen threads themselves. The torchtitan peer is
  // run with the same settings (scripts/bench.sh).
  baton::restart_for_load_time_settings(
      argv, baton::load_time_settings(/*intra_op_threads=*/2));
  benchmark::AddCustomContext("blas", baton::loaded_blas().describe());
  baton::keep_freed_memory_in_process();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
