// bf16 mixed precision through the local train step: one process against
// float32, and data parallel (dp_shard 2, HSDP, dp_replicate 2; reduce in
// float32 or bfloat16) against one process in bf16 with the same global
// batch; real Gloo between rank threads. The masters, their gradients and
// AdamW's state stay float32.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "config/job_config.h"
#include "models/model_spec.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/mixed_precision.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "tests/trainer/step_batches.h"
#include "trainer/train_step.h"

namespace baton {
namespace {

constexpr int64_t kVocab = 48;
constexpr int64_t kSteps = 3;
const char* const kProbe = "layers.0.attention.wq.weight";

Batch global_batch(int64_t step, int64_t rows) {
  return testing::global_batch(step, rows, kVocab, /*seed=*/3000);
}

struct Layout {
  int64_t replicate = 1;
  int64_t shard = 1;
  int64_t micro = 1;
  MixedPrecision mp;

  int64_t world() const {
    return replicate * shard;
  }
  std::string str() const {
    return "replicate " + std::to_string(replicate) + " x shard " +
           std::to_string(shard) + ", " + std::to_string(micro) +
           " micro-steps, compute " + mixed_precision_name(mp.param) +
           ", reduce " + mixed_precision_name(mp.reduce);
  }
};

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::map<std::string, at::Tensor>> replicas;
  /// The dtype block 0's wq weight had while the block computed.
  at::ScalarType computed_with = at::kDouble;
};

/// Records the dtype `param` has while the unit it wraps computes.
class DtypeRecorder final : public UnitWrapper {
 public:
  DtypeRecorder(at::Tensor param, at::ScalarType* out)
      : param_(std::move(param)), out_(out) {}
  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    *out_ = param_.scalar_type();
    return run(input);
  }

 private:
  at::Tensor param_;
  at::ScalarType* out_;
};

void expect_float32_state(
    const ModelParts& parts, torch::optim::Optimizer& opt) {
  for (const auto& p : parts.parameters()) {
    EXPECT_EQ(p.scalar_type(), at::kFloat);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
  }
  ASSERT_FALSE(opt.state().empty());
  for (const auto& [key, state] : opt.state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    EXPECT_EQ(s.exp_avg().scalar_type(), at::kFloat);
    EXPECT_EQ(s.exp_avg_sq().scalar_type(), at::kFloat);
  }
}

void train_rank(
    const Layout& layout,
    int64_t rank,
    dist::Runtime* rt,
    int64_t global_rows,
    TrainRun& run,
    std::mutex& mutex) {
  const auto dims = baton::testing::builtin_dims(
      layout.replicate, layout.shard, 1, 1, layout.world());
  const dist::ParallelMesh mesh(
      dims, rank, rt ? rt->shared_from_this() : nullptr);
  JobConfig config;
  config.parallelism.data_parallel_replicate_degree = layout.replicate;
  config.parallelism.data_parallel_shard_degree = layout.shard;
  auto model = testing::tiny_llama(kVocab, 13);
  at::ScalarType computed_with = at::kDouble;
  model->wrap_unit(
      "layers.0",
      std::make_shared<DtypeRecorder>(
          model->named_parameters()[kProbe], &computed_with));
  ModelParts parts = testing::parts_of({model});
  testing::with_mixed_precision(
      testing::data_parallel_chain(layout.replicate, layout.shard), layout.mp)
      .apply(
          parts[0],
          ParallelContext{
              config, mesh, at::kCPU, /*pipelined=*/false, layout.mp});
  LocalTrainStep step(cross_entropy_sum, mesh.loss());
  torch::optim::AdamW opt(
      parts.parameters(),
      torch::optim::AdamWOptions(3e-3).weight_decay(0.1).eps(1e-6));
  const int64_t local_rows = global_rows / layout.world();
  const int64_t dp_rank = mesh.index("dp");
  std::vector<double> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto batches = testing::micro_batches(
        global_batch(s, global_rows), dp_rank, local_rows, layout.micro);
    opt.zero_grad();
    losses.push_back(step.run(parts, batches).loss);
    opt.step();
  }
  expect_float32_state(parts, opt);
  std::lock_guard<std::mutex> lock(mutex);
  if (rank == 0) {
    run.losses = losses;
    run.computed_with = computed_with;
  }
  testing::collect_whole(
      parts, run.replicas.at(mesh.coord().at("dp_replicate")));
}

TrainRun train(const Layout& layout, int64_t global_rows) {
  TrainRun run;
  run.replicas.resize(layout.replicate);
  std::mutex mutex;
  baton::testing::run_ranks_or_one(
      layout.world(), [&](int64_t r, dist::Runtime* rt) {
        train_rank(layout, r, rt, global_rows, run, mutex);
      });
  return run;
}

void expect_close(
    const TrainRun& got,
    const TrainRun& want,
    double loss_rel,
    double param_atol) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], loss_rel * want.losses[i])
        << "step " << i;
  }
  const auto& whole = want.replicas.at(0);
  for (const auto& replica : got.replicas) {
    ASSERT_EQ(replica.size(), whole.size());
    for (const auto& [fqn, p] : whole) {
      EXPECT_TRUE(torch::allclose(replica.at(fqn), p, 0.0, param_atol))
          << fqn << " differs by "
          << (replica.at(fqn) - p).abs().max().item<double>();
    }
  }
}

const MixedPrecision kBf16{at::kBFloat16, at::kFloat};
const MixedPrecision kBf16Reduce{at::kBFloat16, at::kBFloat16};

TEST(MixedPrecisionStep, OneProcessBf16FollowsFloat32) {
  at::set_num_threads(1);
  const TrainRun fp32 = train(Layout{}, 4);
  const TrainRun bf16 = train(Layout{1, 1, 2, kBf16}, 4);
  // The one-process cast keeps the master float32 while the block computes.
  EXPECT_EQ(bf16.computed_with, at::kFloat);
  expect_close(bf16, fp32, 2e-2, 2e-2);
}

TEST(MixedPrecisionStep, FullyShardGathersBf16AndEqualsOneProcess) {
  at::set_num_threads(1);
  const TrainRun reference = train(Layout{1, 1, 1, kBf16}, 8);
  for (const auto& mp : {kBf16, kBf16Reduce}) {
    for (const int64_t micro : {1, 2}) {
      const Layout layout{1, 2, micro, mp};
      SCOPED_TRACE(layout.str());
      const TrainRun sharded = train(layout, 8);
      EXPECT_EQ(sharded.computed_with, at::kBFloat16);
      expect_close(sharded, reference, 1e-2, 1e-2);
    }
  }
  const Layout hybrid{2, 2, 1, kBf16Reduce};
  SCOPED_TRACE(hybrid.str());
  expect_close(train(hybrid, 8), reference, 1e-2, 1e-2);
}

TEST(MixedPrecisionStep, ReplicateReducesInBf16AndEqualsOneProcess) {
  at::set_num_threads(1);
  const TrainRun reference = train(Layout{1, 1, 1, kBf16}, 8);
  for (const auto& mp : {kBf16, kBf16Reduce}) {
    const Layout layout{2, 1, 2, mp};
    SCOPED_TRACE(layout.str());
    expect_close(train(layout, 8), reference, 1e-2, 1e-2);
  }
}

}  // namespace
}  // namespace baton
