// Data parallel through the local train step: replicas equal one process
// running the global batch, with accumulation and small buckets, and the
// buckets start from the gradient hooks during backward.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/process_group.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "tests/trainer/step_batches.h"
#include "trainer/train_step.h"

namespace baton {
namespace {

using baton::testing::run_ranks;

constexpr int64_t kVocab = 48;

std::shared_ptr<models::TransformerImpl> tiny_model() {
  return testing::tiny_llama(kVocab, /*seed=*/11);
}

Batch global_batch(int64_t step, int64_t rows) {
  return testing::global_batch(step, rows, kVocab, /*seed=*/1000);
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
  int64_t hook_buckets = 0;
  int64_t buckets = 0;
};

std::map<std::string, at::Tensor> params_of(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters()) {
    out[item.key()] = item.value().detach().clone();
  }
  return out;
}

/// `steps` AdamW steps on this rank's share of each global batch of
/// `global_rows` rows, cut into `micro` micro-steps; `group` null = one
/// process with everything.
TrainRun train(
    const std::shared_ptr<dist::ProcessGroup>& group,
    int64_t global_rows,
    int64_t micro,
    int64_t bucket_bytes,
    int64_t steps = 3) {
  const int64_t world = group ? group->size() : 1;
  const int64_t rank = group ? group->rank() : 0;
  auto model = tiny_model();
  ModelParts parts = testing::parts_of({model});
  std::shared_ptr<GradientReducer> reducer;
  if (group) {
    reducer = std::make_shared<GradientReducer>(
        model->parameters(), group, bucket_bytes);
    parts[0].grad_sync().add(reducer);
  }
  LocalTrainStep step(cross_entropy_sum, group);
  // eps 1e-6 rather than 1e-8: Adam's first step moves each weight by about
  // lr * sign(grad), so a gradient element within rounding of zero could
  // flip a whole lr step between two float32 summation orders; with a
  // larger eps the update is continuous in the gradient.
  torch::optim::AdamW opt(
      model->parameters(),
      torch::optim::AdamWOptions(3e-3).weight_decay(0.1).eps(1e-6));
  TrainRun run;
  const int64_t local_rows = global_rows / world;
  for (int64_t s = 0; s < steps; ++s) {
    const auto batches = testing::micro_batches(
        global_batch(s, global_rows), rank, local_rows, micro);
    opt.zero_grad();
    const auto out = step.run(parts, batches);
    EXPECT_EQ(out.tokens, global_rows * 8);
    run.losses.push_back(out.loss);
    opt.step();
  }
  run.params = params_of(*model);
  if (reducer) {
    run.hook_buckets = reducer->buckets_started_by_hooks();
    run.buckets = static_cast<int64_t>(reducer->bucket_layout().size());
  }
  return run;
}

void expect_same_training(const TrainRun& dp, const TrainRun& reference) {
  ASSERT_EQ(dp.losses.size(), reference.losses.size());
  for (size_t i = 0; i < dp.losses.size(); ++i) {
    EXPECT_NEAR(dp.losses[i], reference.losses[i], 1e-5) << "step " << i;
  }
  for (const auto& [name, p] : reference.params) {
    EXPECT_TRUE(torch::allclose(dp.params.at(name), p, 1e-4, 1e-5))
        << name << " differs by "
        << (dp.params.at(name) - p).abs().max().item<double>();
  }
}

void check_dp_equals_one_process(
    int64_t world, int64_t micro, int64_t bucket_bytes) {
  at::set_num_threads(1);
  const int64_t global_rows = 4 * world;
  const TrainRun reference = train(nullptr, global_rows, /*micro=*/1, 0);
  std::vector<TrainRun> runs(world);
  run_ranks(world, [&](int64_t rank, dist::Runtime& rt) {
    runs[rank] = train(rt.world(), global_rows, micro, bucket_bytes);
  });
  for (int64_t r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_same_training(runs[r], reference);
    // Replicas stay bitwise identical.
    for (const auto& [name, p] : runs[0].params) {
      EXPECT_TRUE(torch::equal(runs[r].params.at(name), p)) << name;
    }
  }
}

TEST(DataParallel, TwoRanksEqualOneProcessWithTheGlobalBatch) {
  check_dp_equals_one_process(2, /*micro=*/1, /*bucket_bytes=*/25 << 20);
}

TEST(DataParallel, ThreeRanksWithAccumulationAndSmallBuckets) {
  // Two micro-steps per rank; gradients are reduced once, in the second.
  check_dp_equals_one_process(3, /*micro=*/2, /*bucket_bytes=*/4096);
}

TEST(DataParallel, BucketsStartFromHooksDuringBackward) {
  at::set_num_threads(1);
  std::vector<TrainRun> runs(2);
  run_ranks(2, [&](int64_t rank, dist::Runtime& rt) {
    runs[rank] = train(rt.world(), 4, 1, /*bucket_bytes=*/2048, /*steps=*/1);
  });
  EXPECT_GT(runs[0].buckets, 3);
  // Every bucket whose parameters all got gradients started in backward.
  EXPECT_EQ(runs[0].hook_buckets, runs[0].buckets);
}

}  // namespace
}  // namespace baton
