// Pipelined training against the same model as one stage: every schedule,
// several (pp, stages per rank, microbatches), real Gloo between threads.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "common/error.h"
#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/loss.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/mixed_precision.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/split.h"
#include "parallel/pipeline/synthesis.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "trainer/pipeline_train_step.h"
#include "trainer/train_step.h"

namespace baton::pipeline {
namespace {

constexpr int64_t kVocab = 32;
constexpr int64_t kSeq = 6;
constexpr int64_t kSteps = 2;

ModelArgs tiny_args(int64_t layers) {
  ModelArgs args;
  args.dim = 16;
  args.n_layers = layers;
  args.n_heads = 2;
  args.vocab_size = kVocab;
  args.multiple_of = 16;
  return args;
}

Batch step_batch(int64_t step, int64_t rows) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77 + step);
  const auto tokens = at::randint(0, kVocab, {rows, kSeq + 1}, gen, at::kLong);
  return {tokens.slice(1, 0, kSeq), tokens.slice(1, 1, kSeq + 1), {}};
}

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<at::Tensor> params) {
  // eps 1e-6 keeps Adam's first update continuous in the gradient (see
  // replicate_test.cpp).
  return std::make_unique<torch::optim::AdamW>(
      std::move(params),
      torch::optim::AdamWOptions(3e-3).weight_decay(0.1).eps(1e-6));
}

struct Result {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
};

Result train_one_stage(
    int64_t layers, int64_t rows, const MixedPrecision& mp = {}) {
  auto model = std::make_shared<models::TransformerImpl>(tiny_args(layers));
  model->init_weights(5);
  ModelParts parts = testing::parts_of({model});
  const ApplierChain chain =
      testing::with_mixed_precision(testing::data_parallel_chain(1, 1), mp);
  const JobConfig config;
  const dist::ParallelMesh mesh(
      baton::testing::builtin_dims(1, 1, 1, 1, 1), 0, nullptr);
  chain.apply(
      parts[0],
      ParallelContext{config, mesh, at::kCPU, /*pipelined=*/false, mp});
  LocalTrainStep step(cross_entropy_sum);
  auto opt = adamw(model->parameters());
  Result r;
  for (int64_t s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    r.losses.push_back(step.run(parts, {step_batch(s, rows)}).loss);
    opt->step();
  }
  for (const auto& item : model->named_parameters()) {
    r.params[item.key()] = item.value().detach().clone();
  }
  return r;
}

/// The data-parallel side of a pipelined layout.
struct DataParallel {
  int64_t replicate = 1;
  int64_t shard = 1;
  std::string reshard = "default";

  int64_t degree() const {
    return replicate * shard;
  }
};

/// pp x dp ranks, `accum` micro-steps of `m` microbatches per rank: the
/// global batch of each step is dp * accum * m rows. Each part goes
/// through the builder's chain of appliers for `dp`.
Result train_pipelined_dp(
    const Schedule& schedule,
    const DataParallel& dp,
    int64_t accum,
    int64_t layers,
    const MixedPrecision& mp = {},
    const ActivationCheckpointConfig& ac = {}) {
  const int64_t pp = schedule.pp;
  const int64_t m = schedule.microbatches;
  const auto chunks = split_model(layers, schedule.num_stages);
  const int64_t world = pp * dp.degree();
  JobConfig config;
  config.parallelism.data_parallel_replicate_degree = dp.replicate;
  config.parallelism.data_parallel_shard_degree = dp.shard;
  config.parallelism.pipeline_parallel_degree = pp;
  config.parallelism.fsdp_reshard_after_forward = dp.reshard;
  config.parallelism.data_parallel_bucket_size_mb = 1;
  config.activation_checkpoint = ac;
  const ApplierChain chain = testing::with_mixed_precision(
      testing::with_activation_checkpoint(
          testing::data_parallel_chain(dp.replicate, dp.shard), config),
      mp);
  Result result;
  std::mutex mutex;
  baton::testing::run_ranks(world, [&](int64_t rank, dist::Runtime& rt) {
    const auto dims =
        baton::testing::builtin_dims(dp.replicate, dp.shard, 1, pp, world);
    dist::ParallelMesh mesh(dims, rank, rt.shared_from_this());
    const int64_t my_pp = mesh.coord().at("pp");
    std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages;
    ModelParts parts;
    std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
    for (int64_t s = 0; s < schedule.num_stages; ++s) {
      if (schedule.stage_to_rank[s] != my_pp) {
        continue;
      }
      auto chunk = std::make_shared<models::TransformerImpl>(
          tiny_args(layers), chunks[s]);
      chunk->init_weights(5);
      stages.emplace_back(s, chunk);
      auto part = std::make_shared<ModelPart>(chunk, s);
      chain.apply(
          *part,
          ParallelContext{config, mesh, at::kCPU, /*pipelined=*/true, mp});
      parts.push_back(part);
      opts.push_back(adamw(chunk->parameters()));
    }
    ExecutorShapes shapes;
    shapes.microbatches = m;
    shapes.seq_len = kSeq;
    shapes.dim = 16;
    shapes.dtype = mp.param;
    PipelinedTrainStep step(
        std::make_unique<PipelineExecutor>(
            lower_schedule(schedule),
            stages,
            mesh.group("pp"),
            cross_entropy_sum,
            shapes),
        mesh.group("pp"),
        mesh.dp(),
        accum,
        m * kSeq);
    std::vector<double> losses;
    for (int64_t s = 0; s < kSteps; ++s) {
      for (auto& o : opts) {
        o->zero_grad();
      }
      std::vector<Batch> batches;
      if (schedule.stage_to_rank[0] == my_pp) {
        const Batch all = step_batch(s, dp.degree() * accum * m);
        const int64_t d = mesh.index("dp");
        for (int64_t a = 0; a < accum; ++a) {
          const int64_t begin = (d * accum + a) * m;
          batches.push_back(
              {all.inputs.slice(0, begin, begin + m),
               all.labels.slice(0, begin, begin + m),
               {}});
        }
      }
      const auto out = step.run(parts, batches);
      EXPECT_GE(out.bubble, 0.0);
      losses.push_back(out.loss);
      for (auto& o : opts) {
        o->step();
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (rank == 0) {
      result.losses = losses;
    }
    if (mesh.coord().at("dp_replicate") == 0) {  // one replica's weights
      testing::collect_whole(parts, result.params);
    }
  });
  return result;
}

Result train_pipelined_dp(
    const std::string& name,
    int64_t pp,
    int64_t v,
    int64_t m,
    const DataParallel& dp,
    int64_t accum,
    int64_t layers,
    const MixedPrecision& mp = {},
    const ActivationCheckpointConfig& ac = {}) {
  return train_pipelined_dp(
      make_schedule(name, pp, v, m), dp, accum, layers, mp, ac);
}

void expect_same(
    const Result& piped,
    const Result& reference,
    double loss_atol = 1e-5,
    double rtol = 1e-4,
    double atol = 1e-5) {
  ASSERT_EQ(piped.losses.size(), reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(piped.losses[i], reference.losses[i], loss_atol) << i;
  }
  ASSERT_EQ(piped.params.size(), reference.params.size());
  for (const auto& [fqn, p] : reference.params) {
    ASSERT_EQ(piped.params.count(fqn), 1u) << fqn;
    EXPECT_EQ(piped.params.at(fqn).scalar_type(), at::kFloat) << fqn;
    EXPECT_TRUE(torch::allclose(piped.params.at(fqn), p, rtol, atol))
        << fqn << " differs by "
        << (piped.params.at(fqn) - p).abs().max().item<double>();
  }
}

TEST(PipelineWithDataParallel, AccumulationAndReplicasEqualOneStage) {
  at::set_num_threads(1);
  register_builtin_schedules();
  for (const auto& [name, v, m] :
       {std::tuple<std::string, int64_t, int64_t>{"1F1B", 1, 2},
        {"ZBVZeroBubble", 2, 4}}) {
    SCOPED_TRACE(name);
    const int64_t pp = 2, accum = 2, layers = pp * v;
    const DataParallel dp{2, 1};
    const Result reference = train_one_stage(layers, dp.degree() * accum * m);
    expect_same(
        train_pipelined_dp(name, pp, v, m, dp, accum, layers), reference);
  }
}

TEST(PipelineWithFullyShard, ShardedStagesEqualOneStageUnderEveryPolicy) {
  // pp 2 x dp_shard 2: 1F1B, and ZBV (two chunks per rank in V, split
  // backward), with and without accumulation, every reshard policy.
  at::set_num_threads(1);
  register_builtin_schedules();
  for (const auto& [name, v, m] :
       {std::tuple<std::string, int64_t, int64_t>{"1F1B", 1, 2},
        {"ZBVZeroBubble", 2, 4}}) {
    for (const int64_t accum : {1, 2}) {
      for (const char* policy : {"default", "always", "never"}) {
        SCOPED_TRACE(
            name + ", " + std::to_string(accum) + " micro-steps, reshard " +
            policy);
        const int64_t pp = 2, layers = pp * v;
        const DataParallel dp{1, 2, policy};
        expect_same(
            train_pipelined_dp(name, pp, v, m, dp, accum, layers),
            train_one_stage(layers, dp.degree() * accum * m));
      }
    }
  }
}

TEST(PipelineWithActivationCheckpoint, EveryModeTrainsAsNoneUnderEverySplit) {
  // 1F1B, Interleaved1F1B (two chunks per rank in a loop) and ZBV (in V,
  // with the split backward: the recomputation happens in I, W uses what
  // it queued), each mode against the same schedule without checkpointing
  // (within 1e-6) and against one stage.
  at::set_num_threads(1);
  register_builtin_schedules();
  for (const auto& [name, v, m] :
       {std::tuple<std::string, int64_t, int64_t>{"1F1B", 1, 2},
        {"Interleaved1F1B", 2, 4},
        {"ZBVZeroBubble", 2, 4}}) {
    const int64_t pp = 2, layers = 2 * pp * v;
    const Result none =
        train_pipelined_dp(name, pp, v, m, DataParallel{}, 1, layers);
    expect_same(none, train_one_stage(layers, m));
    for (const auto& [mode, selective] :
         std::vector<std::pair<std::string, std::string>>{
             {"full", "layer"}, {"selective", "layer"}, {"selective", "op"}}) {
      SCOPED_TRACE(name + ", " + mode + " " + selective);
      ActivationCheckpointConfig ac;
      ac.mode = mode;
      ac.selective = selective;
      ac.selective_every = 2;
      const Result r = train_pipelined_dp(
          name, pp, v, m, DataParallel{}, 1, layers, MixedPrecision{}, ac);
      for (size_t i = 0; i < none.losses.size(); ++i) {
        EXPECT_NEAR(r.losses[i], none.losses[i], 1e-6) << i;
      }
      for (const auto& [fqn, p] : none.params) {
        EXPECT_LE((r.params.at(fqn) - p).abs().max().item<double>(), 1e-6)
            << fqn;
      }
    }
  }
}

TEST(PipelineWithActivationCheckpoint, ComposesWithBf16AndFullyShard) {
  // ZBV in bf16 over dp_shard 2, full checkpointing against none: the
  // recomputation reads the same casts and gathered parameters.
  at::set_num_threads(1);
  register_builtin_schedules();
  const MixedPrecision mp{at::kBFloat16, at::kFloat};
  ActivationCheckpointConfig ac;
  ac.mode = "full";
  const DataParallel dp{1, 2};
  const Result none =
      train_pipelined_dp("ZBVZeroBubble", 2, 2, 4, dp, 1, 4, mp);
  const Result r =
      train_pipelined_dp("ZBVZeroBubble", 2, 2, 4, dp, 1, 4, mp, ac);
  for (size_t i = 0; i < none.losses.size(); ++i) {
    EXPECT_NEAR(r.losses[i], none.losses[i], 1e-6) << i;
  }
  for (const auto& [fqn, p] : none.params) {
    EXPECT_LE((r.params.at(fqn) - p).abs().max().item<double>(), 1e-6) << fqn;
  }
}

TEST(PipelineMixedPrecision, Bf16StagesEqualOneStageInBf16) {
  // 1F1B, and ZBV's split backward (dW deferred through the casts, or into
  // the gathered bf16 parameters under fully_shard), against one stage in
  // bf16 with the same global batch; activations move between stages in
  // bf16.
  at::set_num_threads(1);
  register_builtin_schedules();
  const MixedPrecision mp{at::kBFloat16, at::kBFloat16};
  for (const auto& [name, v, m] :
       {std::tuple<std::string, int64_t, int64_t>{"1F1B", 1, 2},
        {"ZBVZeroBubble", 2, 4}}) {
    for (const DataParallel& dp : {DataParallel{}, DataParallel{1, 2}}) {
      SCOPED_TRACE(name + ", dp_shard " + std::to_string(dp.shard));
      const int64_t pp = 2, accum = 2, layers = pp * v;
      expect_same(
          train_pipelined_dp(name, pp, v, m, dp, accum, layers, mp),
          train_one_stage(layers, dp.degree() * accum * m, mp),
          2e-2,
          0.0,
          1e-2);
    }
  }
}

// A schedule synthesised for uneven costs (the last stage three times the
// others, the first half) under each rule set trains as one stage does.
TEST(SynthesizedSchedule, EqualsOneStageUnderEveryRuleSet) {
  at::set_num_threads(1);
  int64_t layouts = 0;
  for (const auto& [pp, v, placement] :
       std::vector<std::tuple<int64_t, int64_t, PlacementStyle>>{
           {2, 2, PlacementStyle::kV},
           {2, 2, PlacementStyle::kLoop},
           {3, 1, PlacementStyle::kLoop}}) {
    const int64_t stages = pp * v;
    StageCosts per_stage;
    for (const auto kind :
         {ActionKind::kF, ActionKind::kB, ActionKind::kI, ActionKind::kW}) {
      per_stage[{0, kind}] = 0.5;
      per_stage[{stages - 1, kind}] = 3.0;
    }
    const auto costs = SimulationCosts().p2p_latency(0.1).per_stage(per_stage);
    const auto placed = make_placement(placement, pp, v);
    for (const int64_t m : {pp, 2 * pp + 1}) {
      for (const bool split : {true, false}) {
        for (const bool forward_first : {false, true}) {
          const auto rules =
              SynthesisRules()
                  .split_backward(split)
                  .forward_first(forward_first)
                  .max_in_flight(std::vector<int64_t>(pp, v + 1));
          const Schedule schedule =
              synthesize_schedule(placed, m, costs, rules);
          SCOPED_TRACE(
              "pp=" + std::to_string(pp) + " v=" + std::to_string(v) +
              " m=" + std::to_string(m) + " split=" + std::to_string(split) +
              " forward_first=" + std::to_string(forward_first));
          expect_same(
              train_pipelined_dp(schedule, DataParallel{}, 1, stages),
              train_one_stage(stages, m));
          ++layouts;
        }
      }
    }
  }
  EXPECT_EQ(layouts, 24);
}

class EverySchedule : public ::testing::TestWithParam<std::string> {};

TEST_P(EverySchedule, EqualsOneStageForEveryLayoutItAccepts) {
  at::set_num_threads(1);
  register_builtin_schedules();
  int64_t layouts = 0;
  for (int64_t pp : {2, 3, 4}) {
    for (int64_t v : {1, 2}) {
      for (int64_t m : {pp, 2 * pp, 3 * pp}) {
        try {
          make_schedule(GetParam(), pp, v, m);
        } catch (const ConfigError&) {
          continue;  // a layout this schedule does not run
        }
        SCOPED_TRACE(
            GetParam() + " pp=" + std::to_string(pp) +
            " v=" + std::to_string(v) + " m=" + std::to_string(m));
        const int64_t layers = pp * v;
        expect_same(
            train_pipelined_dp(
                GetParam(), pp, v, m, DataParallel{}, /*accum=*/1, layers),
            train_one_stage(layers, m));
        ++layouts;
      }
    }
  }
  EXPECT_GE(layouts, 3) << "too few layouts accepted";
  std::cout << GetParam() << ": " << layouts << " layouts checked\n";
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline,
    EverySchedule,
    ::testing::Values(
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV"));

}  // namespace
}  // namespace baton::pipeline
