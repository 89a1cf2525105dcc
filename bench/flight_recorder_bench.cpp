// The flight recorder's cost per recorded operation: what the dist facade
// adds to each collective or P2P operation (record at start, finish at
// wait) and the pipeline executor to each action. Compare with a Gloo
// operation on loopback (tens of microseconds).

#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "parallel/dist/flight_recorder.h"

namespace {

namespace dist = baton::dist;

/// What the facade does for one collective: fill an entry, record, finish.
void BM_FlightRecorderCollective(benchmark::State& state) {
  dist::FlightRecorder recorder(state.range(0));
  const std::string group = "dp_shard";
  int64_t seq = 0;
  for (auto _ : state) {
    dist::FlightEntry e;
    e.kind = dist::FlightKind::kCollective;
    e.name = "all_gather_into";
    std::strncpy(e.group, group.c_str(), sizeof(e.group) - 1);
    e.group_seq = ++seq;
    e.bytes = 1 << 20;
    e.dtype = "BFloat16";
    const uint64_t id = recorder.record(e);
    recorder.finish(id, dist::FlightState::kCompleted);
    benchmark::DoNotOptimize(id);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlightRecorderCollective)->Arg(0)->Arg(512)->Arg(65536);

/// A P2P operation under a pipeline action's label, as the executor posts
/// them: the label is copied from the thread's FlightLabel.
void BM_FlightRecorderLabelledP2P(benchmark::State& state) {
  dist::FlightRecorder recorder(512);
  const std::string action = "1SEND_F3";
  const dist::FlightLabel label(action);
  for (auto _ : state) {
    dist::FlightEntry e;
    e.kind = dist::FlightKind::kP2P;
    e.name = "send";
    e.peer = 1;
    e.tag = 7;
    const uint64_t id = recorder.record(e);
    recorder.finish(id, dist::FlightState::kCompleted);
    benchmark::DoNotOptimize(id);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlightRecorderLabelledP2P);

/// The dump itself (on failure only): 512 entries to JSON.
void BM_FlightRecorderToJson(benchmark::State& state) {
  dist::FlightRecorder recorder(512);
  for (int i = 0; i < 512; ++i) {
    dist::FlightEntry e;
    e.name = "all_reduce";
    recorder.record(e, "layers.0.attention");
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(recorder.to_json(0, 2, "bench"));
  }
}
BENCHMARK(BM_FlightRecorderToJson);

}  // namespace

BENCHMARK_MAIN();
