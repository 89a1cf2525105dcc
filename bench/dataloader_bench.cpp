// How long the train loop waits in DataLoader::next(), with and without the
// prefetch thread, while a simulated step (matmuls) keeps the cores busy:
// Llama 3's tokenizer (the bundled tiktoken file) on the bundled corpus,
// batches of 16 x 1024 tokens.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>

#include "data/dataloader.h"
#include "data/text_dataset.h"
#include "data/tiktoken_tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

void BM_LoaderWait(benchmark::State& state) {
  at::set_num_threads(1);
  baton::DataLoaderOptions options(16, 1024);
  options.prefetch = state.range(0);
  const auto step = std::chrono::milliseconds(state.range(1));
  baton::DatasetOptions kjv;
  kjv.path = baton::resolve_asset_path("assets/kjv.jsonl.gz");
  baton::DataLoader loader(
      std::make_unique<baton::JsonlDataset>(kjv),
      std::make_shared<baton::TiktokenTokenizer>(
          baton::resolve_asset_path("assets/kjv_tiktoken.txt")),
      options);
  loader.next();  // starts the worker
  const auto a = torch::randn({256, 256});
  double waited_s = 0.0;
  for (auto _ : state) {
    const auto start = Clock::now();
    benchmark::DoNotOptimize(loader.next());
    waited_s += std::chrono::duration<double>(Clock::now() - start).count();
    const auto until = Clock::now() + step;
    while (Clock::now() < until) {
      benchmark::DoNotOptimize(at::mm(a, a));
    }
  }
  state.counters["wait_ms"] =
      1e3 * waited_s / static_cast<double>(state.iterations());
}
BENCHMARK(BM_LoaderWait)
    ->ArgNames({"prefetch", "step_ms"})
    ->Args({0, 0})
    ->Args({0, 200})
    ->Args({2, 200})
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
