// Pipeline schedules as data: generate + lower + validate + simulate one
// schedule per iteration, for a large layout (64 ranks, 256 microbatches).

#include <benchmark/benchmark.h>

#include <string>

#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/validation.h"

namespace {

namespace pp = baton::pipeline;

void BM_ScheduleEndToEnd(benchmark::State& state, const std::string& name) {
  const int64_t p = state.range(0);
  const int64_t v = state.range(1);
  const int64_t m = state.range(2);
  int64_t actions = 0;
  double makespan = 0.0;
  for (auto _ : state) {
    const pp::Schedule compute = pp::make_schedule(name, p, v, m);
    const pp::Schedule lowered = pp::lower_schedule(compute);
    pp::validate_schedule(lowered);
    const pp::SimulationResult sim = pp::simulate(lowered);
    if (sim.deadlock) {
      state.SkipWithError(sim.deadlock->message().c_str());
      break;
    }
    actions = 0;
    for (const auto& rank : lowered.ranks) {
      actions += static_cast<int64_t>(rank.size());
    }
    makespan = sim.makespan;  // also keeps the work observable
  }
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["makespan"] = makespan;
  state.counters["actions_per_sec"] = benchmark::Counter(
      static_cast<double>(actions * state.iterations()),
      benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_ScheduleEndToEnd, Interleaved1F1B, "Interleaved1F1B")
    ->Args({64, 4, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ScheduleEndToEnd, LoopedBFS, "LoopedBFS")
    ->Args({64, 4, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(
    BM_ScheduleEndToEnd, InterleavedZeroBubble, "InterleavedZeroBubble")
    ->Args({64, 4, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ScheduleEndToEnd, ZBVZeroBubble, "ZBVZeroBubble")
    ->Args({64, 2, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ScheduleEndToEnd, DualPipeV, "DualPipeV")
    ->Args({64, 2, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ScheduleEndToEnd, OneFOneB, "1F1B")
    ->Args({64, 1, 256})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
