// Pipelined training at pp = 2, ranks as threads over real Gloo: one
// optimizer step (forward, cross-entropy, backward, AdamW) of the debug
// model per schedule and microbatch count, with the bubble each rank's
// executor measured beside the simulator's prediction for the same
// schedule fed with the F / B / I / W costs of each stage measured in the
// same steps, and beside its replay with each action's own measured cost.
// Also P2P latency and bandwidth over Gloo for activation-sized tensors.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "common/allocator.h"
#include "models/common/transformer.h"
#include "models/llama3/llama3.h"
#include "models/loss.h"
#include "models/model_args.h"
#include "optim/optimizers.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/split.h"
#include "tests/parallel/rank_threads.h"

namespace {

namespace pp = baton::pipeline;

constexpr int64_t kRanks = 2;
constexpr int64_t kBatch = 8;  // sequences per step, split in microbatches
constexpr int64_t kSeqLen = 256;
constexpr int64_t kVocab = 258;  // the byte tokenizer's
constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 4;

double seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// What one rank saw over the timed steps.
struct RankFigures {
  std::vector<double> step_s;
  /// Of each timed step: when this rank's executor run started and ended
  /// (seconds on the clock every rank thread shares), and how much of it
  /// this rank computed.
  std::vector<double> run_start_s;
  std::vector<double> run_end_s;
  std::vector<double> compute_s;
  /// Of each timed step: time in SEND / RECV actions (posting them: the
  /// receives are irecv) and compute actions' waits for a receive.
  std::vector<double> comm_s;
  std::vector<double> wait_s;
  std::vector<pp::ExecutedAction> actions;  // every timed step's
};

/// Runs `body` on kRanks rank threads; throws the first rank's error.
void run_ranks(
    const std::function<void(int64_t, baton::dist::Runtime&)>& body) {
  const auto errors =
      baton::testing::run_rank_threads(kRanks, body, std::chrono::seconds(120));
  for (int64_t r = 0; r < kRanks; ++r) {
    if (!errors[r].empty()) {
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
    }
  }
}

/// Mean measured cost of each compute kind, overall and per stage (the
/// stages holding the embedding or the loss cost more), over every rank's
/// actions, less the time they waited for a receive; and of posting each
/// kind of SEND and RECV per stage.
pp::SimulationCosts measured_costs(const std::vector<RankFigures>& ranks) {
  std::map<pp::ActionKind, std::pair<double, int64_t>> kind_sum;
  std::map<std::pair<int64_t, pp::ActionKind>, std::pair<double, int64_t>>
      stage_sum;
  // SEND / RECV: the mean time posting one took, per stage and kind, given
  // to each such action (the simulator has no per-kind cost for them).
  using Key = std::pair<int64_t, pp::ActionKind>;
  std::map<Key, std::pair<double, int64_t>> comm_sum;
  std::map<std::string, Key> comm_key;
  for (const auto& r : ranks) {
    for (const auto& a : r.actions) {
      const auto action = pp::parse_action(a.name);
      if (pp::is_comm(action.kind)) {
        const Key key{action.stage, action.kind};
        auto& acc = comm_sum[key];
        acc.first += a.end_us - a.start_us;
        ++acc.second;
        comm_key.emplace(a.name, key);
      }
    }
  }
  pp::ActionCosts comm;
  for (const auto& [name, key] : comm_key) {
    comm[name] = comm_sum[key].first / comm_sum[key].second;
  }
  for (const auto& r : ranks) {
    for (const auto& a : r.actions) {
      if (!a.compute) {
        continue;
      }
      const auto action = pp::parse_action(a.name);
      for (auto* acc :
           {&kind_sum[action.kind], &stage_sum[{action.stage, action.kind}]}) {
        acc->first += a.end_us - a.start_us - a.wait_us;
        ++acc->second;
      }
    }
  }
  auto mean = [&](pp::ActionKind k) {
    const auto it = kind_sum.find(k);
    return it == kind_sum.end() ? 0.0 : it->second.first / it->second.second;
  };
  pp::StageCosts per_stage;
  for (const auto& [key, acc] : stage_sum) {
    per_stage[key] = acc.first / acc.second;
  }
  return pp::SimulationCosts()
      .forward(mean(pp::ActionKind::kF))
      .backward(mean(pp::ActionKind::kB))
      .backward_input(mean(pp::ActionKind::kI))
      .backward_weight(mean(pp::ActionKind::kW))
      .per_stage(per_stage)
      .per_action(comm);
}

/// Each action's own cost: the median over the timed steps of its time less
/// the time it waited for a receive; for a SEND or RECV, the time posting
/// it took. On shared cores an action costs more while the other rank
/// computes than alone in the ramp-up and drain; fed these, the simulator
/// replays the schedule with the costs each action really had, so what
/// remains of the gap is the time on the wire and the executor's
/// bookkeeping between actions.
pp::ActionCosts measured_action_costs(const std::vector<RankFigures>& ranks) {
  std::map<std::string, std::vector<double>> samples;
  for (const auto& r : ranks) {
    for (const auto& a : r.actions) {
      samples[a.name].push_back(a.end_us - a.start_us - a.wait_us);
    }
  }
  pp::ActionCosts costs;
  for (auto& [name, times] : samples) {
    costs[name] = median(std::move(times));
  }
  return costs;
}

void BM_PipelineStep(
    benchmark::State& state, const std::string& name, int64_t v) {
  const int64_t m = state.range(0);
  pp::register_builtin_schedules();
  const pp::Schedule schedule = pp::make_schedule(name, kRanks, v, m);
  const pp::Schedule lowered = pp::lower_schedule(schedule);
  auto args = baton::llama3::flavors().at("debugmodel");
  args.vocab_size = kVocab;
  const auto chunks = pp::split_model(args.n_layers, schedule.num_stages);
  baton::register_builtin_optimizers();
  const auto make_optimizer = baton::optimizer_registry().get("AdamW", "bench");
  std::vector<RankFigures> figures(kRanks);
  for (auto _ : state) {
    run_ranks([&](int64_t rank, baton::dist::Runtime& runtime) {
      at::set_num_threads(1);
      std::vector<std::pair<int64_t, std::shared_ptr<baton::ModelChunk>>>
          stages;
      std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
      for (int64_t s = 0; s < schedule.num_stages; ++s) {
        if (schedule.stage_to_rank[s] != rank) {
          continue;
        }
        auto chunk =
            std::make_shared<baton::models::TransformerImpl>(args, chunks[s]);
        chunk->init_weights(0);
        optimizers.push_back(
            make_optimizer(chunk->parameters(), baton::JobConfig{}));
        stages.emplace_back(s, std::move(chunk));
      }
      pp::ExecutorShapes shapes;
      shapes.microbatches = m;
      shapes.microbatch_size = kBatch / m;
      shapes.seq_len = kSeqLen;
      shapes.dim = args.dim;
      pp::PipelineExecutor executor(
          lowered, stages, runtime.world(), baton::cross_entropy_sum, shapes);
      at::Tensor inputs, labels;
      if (schedule.stage_to_rank[0] == rank) {
        const auto tokens =
            torch::randint(0, kVocab, {kBatch, kSeqLen + 1}, torch::kLong);
        inputs = tokens.slice(1, 0, kSeqLen);
        labels = tokens.slice(1, 1, kSeqLen + 1);
      }
      RankFigures& mine = figures[rank];
      mine = RankFigures();
      for (int i = 0; i < kWarmupSteps + kTimedSteps; ++i) {
        runtime.world()->barrier();
        const auto start = std::chrono::steady_clock::now();
        for (auto& o : optimizers) {
          o->zero_grad();
        }
        const auto run_start = std::chrono::steady_clock::now();
        auto run = executor.run(
            inputs, labels, at::Tensor(), 1.0 / (kBatch * kSeqLen));
        const auto run_end = std::chrono::steady_clock::now();
        for (auto& o : optimizers) {
          o->step();
        }
        const double step_s = std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
        if (i < kWarmupSteps) {
          continue;
        }
        mine.step_s.push_back(step_s);
        mine.run_start_s.push_back(seconds(run_start));
        mine.run_end_s.push_back(seconds(run_end));
        mine.compute_s.push_back(run.compute_s);
        double comm_us = 0.0, wait_us = 0.0;
        for (const auto& a : run.actions) {
          if (a.compute) {
            wait_us += a.wait_us;
          } else if (pp::is_comm(pp::parse_action(a.name).kind)) {
            comm_us += a.end_us - a.start_us;
          }
        }
        mine.comm_s.push_back(comm_us * 1e-6);
        mine.wait_s.push_back(wait_us * 1e-6);
        mine.actions.insert(
            mine.actions.end(), run.actions.begin(), run.actions.end());
      }
    });
    // The step ends when the slower rank's optimizer is done.
    std::vector<double> steps(kTimedSteps);
    for (int i = 0; i < kTimedSteps; ++i) {
      steps[i] = std::max(figures[0].step_s[i], figures[1].step_s[i]);
    }
    state.SetIterationTime(median(steps));
  }
  const auto costs = measured_costs(figures);
  const auto sim = pp::simulate(lowered, costs);
  auto replay_costs = costs;
  replay_costs.per_action(measured_action_costs(figures));
  const auto replay = pp::simulate(lowered, replay_costs);
  // Measured bubble: each rank's idle share of the pipeline's span, from
  // the first rank starting its run to the last one finishing, which is
  // what the simulator's makespan is. (A rank's own run ends when its last
  // action does; the last stage's ends well before the first stage's last
  // backward, and in training it waits for the next step's input instead.)
  std::vector<std::vector<double>> bubble(kRanks), comm(kRanks), wait(kRanks);
  for (int i = 0; i < kTimedSteps; ++i) {
    double start = figures[0].run_start_s[i], end = figures[0].run_end_s[i];
    for (int64_t r = 1; r < kRanks; ++r) {
      start = std::min(start, figures[r].run_start_s[i]);
      end = std::max(end, figures[r].run_end_s[i]);
    }
    for (int64_t r = 0; r < kRanks; ++r) {
      bubble[r].push_back(1.0 - figures[r].compute_s[i] / (end - start));
      comm[r].push_back(figures[r].comm_s[i] / (end - start));
      wait[r].push_back(figures[r].wait_s[i] / (end - start));
    }
  }
  for (int64_t r = 0; r < kRanks; ++r) {
    const std::string suffix = "_r" + std::to_string(r);
    state.counters["bubble_pct" + suffix] = 100.0 * median(bubble[r]);
    state.counters["comm_pct" + suffix] = 100.0 * median(comm[r]);
    state.counters["recv_wait_pct" + suffix] = 100.0 * median(wait[r]);
    state.counters["predicted_bubble_pct" + suffix] =
        100.0 * sim.bubble_fraction[r];
    state.counters["replayed_bubble_pct" + suffix] =
        100.0 * replay.bubble_fraction[r];
    state.counters["peak_activations" + suffix] =
        static_cast<double>(sim.peak_activations[r]);
  }
  state.counters["cost_F_ms"] = costs.forward() / 1e3;
  state.counters["cost_B_ms"] = costs.backward() / 1e3;
  state.counters["cost_I_ms"] = costs.backward_input() / 1e3;
  state.counters["cost_W_ms"] = costs.backward_weight() / 1e3;
  state.counters["stages_per_rank"] =
      static_cast<double>(schedule.num_stages / kRanks);
  state.counters["tokens_per_sec"] = benchmark::Counter(
      static_cast<double>(kBatch * kSeqLen), benchmark::Counter::kIsRate);
}

#define BATON_PIPELINE_BENCH(label, name, v, ...)                 \
  BENCHMARK_CAPTURE(BM_PipelineStep, label, std::string(name), v) \
      ->ArgName("m") __VA_ARGS__->Iterations(1)                   \
      ->UseManualTime()                                           \
      ->Unit(benchmark::kMillisecond)

BATON_PIPELINE_BENCH(GPipe, "GPipe", 1, ->Arg(2)->Arg(4)->Arg(8));
BATON_PIPELINE_BENCH(OneFOneB, "1F1B", 1, ->Arg(2)->Arg(4)->Arg(8));
BATON_PIPELINE_BENCH(
    Interleaved1F1B, "Interleaved1F1B", 2, ->Arg(2)->Arg(4)->Arg(8));
BATON_PIPELINE_BENCH(
    ZBVZeroBubble, "ZBVZeroBubble", 2, ->Arg(2)->Arg(4)->Arg(8));
BATON_PIPELINE_BENCH(DualPipeV, "DualPipeV", 2, ->Arg(4)->Arg(8));

/// Ping-pong of a float tensor of `bytes` between two ranks: half the
/// round trip is the one-way time.
void BM_P2P(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  constexpr int kRoundTrips = 20;
  std::vector<double> one_way_s;
  for (auto _ : state) {
    run_ranks([&](int64_t rank, baton::dist::Runtime& runtime) {
      auto& group = *runtime.world();
      auto t = torch::ones({std::max<int64_t>(1, bytes / 4)});
      const int64_t peer = 1 - rank;
      for (int i = 0; i < kRoundTrips + 2; ++i) {
        const auto start = std::chrono::steady_clock::now();
        if (rank == 0) {
          group.send(t, peer, i);
          group.recv(t, peer, i);
        } else {
          group.recv(t, peer, i);
          group.send(t, peer, i);
        }
        if (rank == 0 && i >= 2) {
          one_way_s.push_back(
              0.5 * std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count());
        }
      }
    });
    state.SetIterationTime(median(one_way_s));
  }
  const double t = median(one_way_s);
  state.counters["latency_us"] = t * 1e6;
  state.counters["bandwidth_GBps"] = static_cast<double>(bytes) / t / 1e9;
}
// 4 bytes (latency), then microbatches of the debug (dim 256) and small
// (dim 512) models' activations: 1 x 256 x 256, 2 x 256 x 256, 8 x 256 x 512
// floats.
BENCHMARK(BM_P2P)
    ->ArgName("bytes")
    ->Arg(4)
    ->Arg(256 << 10)
    ->Arg(512 << 10)
    ->Arg(4 << 20)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

/// One collective of fully sharded and replicated data parallel between
/// two rank threads, on a float buffer of `bytes` (the all-reduced buffer,
/// the gathered output, the reduce-scattered input): the median time and
/// the bus bandwidth, as nccl-tests count it (the bytes each rank sends:
/// 2 (n-1)/n of the buffer for an all-reduce, (n-1)/n for the others).
void BM_Collective(benchmark::State& state, int op) {
  const int64_t bytes = state.range(0);
  constexpr int kRuns = 10;
  constexpr int64_t kRanks = 2;
  std::vector<double> seconds;
  for (auto _ : state) {
    run_ranks([&](int64_t rank, baton::dist::Runtime& runtime) {
      auto& group = *runtime.world();
      const int64_t n = std::max<int64_t>(kRanks, bytes / 4) / kRanks * kRanks;
      auto whole = torch::ones({n});
      auto part = torch::ones({n / kRanks});
      for (int i = 0; i < kRuns + 2; ++i) {
        group.barrier();
        const auto start = std::chrono::steady_clock::now();
        if (op == 0) {
          group.all_reduce(whole);
        } else if (op == 1) {
          group.all_gather_into_async(whole, part).wait();
        } else {
          group.reduce_scatter(part, whole);
        }
        if (rank == 0 && i >= 2) {
          seconds.push_back(std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count());
        }
      }
    });
    state.SetIterationTime(median(seconds));
  }
  const double t = median(seconds);
  const double factor = (op == 0 ? 2.0 : 1.0) * (kRanks - 1) / kRanks;
  state.counters["time_ms"] = t * 1e3;
  state.counters["bus_GBps"] = factor * static_cast<double>(bytes) / t / 1e9;
}
// A debug block's parameters (3 MiB) and a small one's (12.5 MiB), and 50.
#define BATON_COLLECTIVE_BENCH(label, op)     \
  BENCHMARK_CAPTURE(BM_Collective, label, op) \
      ->ArgName("bytes")                      \
      ->Arg(3 << 20)                          \
      ->Arg(25 << 19)                         \
      ->Arg(50 << 20)                         \
      ->Iterations(1)                         \
      ->UseManualTime()                       \
      ->Unit(benchmark::kMillisecond)

BATON_COLLECTIVE_BENCH(all_reduce, 0);
BATON_COLLECTIVE_BENCH(all_gather, 1);
BATON_COLLECTIVE_BENCH(reduce_scatter, 2);

}  // namespace

int main(int argc, char** argv) {
  baton::keep_freed_memory_in_process();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
