// Expert parallel's whole training runs (and tensor parallel's with
// experts): a small MoE model in every layout the issue names against one
// process on the same global batches (losses
// within 1e-5, weights rtol 1e-4 after 3 AdamW steps, float32), ranks as
// threads over real Gloo, on inputs whose routing margin is asserted far
// above float error.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

constexpr int64_t kSteps = 3;

testing::RunLayout moe_layout(int64_t dp_shard, int64_t ep, bool deepseek) {
  testing::RunLayout l;
  l.model = "qwen3_moe";
  l.args = testing::layout_moe_args(deepseek);
  l.dp_shard = dp_shard;
  l.ep = ep;
  l.aux_loss_coeff = 0.01;
  l.rows = 8 / dp_shard;
  l.after_init = testing::spread_routers;
  return l;
}

/// `layout` against one process on the same global batches, the routing
/// margin of the reference asserted first.
void expect_follows_one_process(const testing::RunLayout& layout) {
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  // Float error in the scores is about 1e-7: a margin of 1e-4 routes every
  // token the same in every layout.
  ASSERT_GT(reference.min_margin, 1e-4)
      << "the inputs route some token too close to call";
  EXPECT_TRUE(std::isfinite(reference.min_margin));
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_GT(run.min_margin, 1e-4);
  EXPECT_TRUE(testing::same_run(run, reference)) << layout.str();
}

TEST(ExpertParallel, Ep2FollowsOneProcess) {
  expect_follows_one_process(moe_layout(2, 2, /*deepseek=*/false));
}

TEST(ExpertParallel, Ep4OnFourRanksFollowsOneProcess) {
  expect_follows_one_process(moe_layout(4, 4, /*deepseek=*/true));
}

TEST(ExpertParallel, Ep2TimesTheRestOfDpShardFollowsOneProcess) {
  // dp_shard 4: experts split over ep 2, each rank's sharded over the
  // other 2 (dp_shard_mod_ep), the dense weights over all 4.
  expect_follows_one_process(moe_layout(4, 2, /*deepseek=*/true));
}

TEST(ExpertParallel, HsdpReplicasOfEp2FollowOneProcess) {
  // 2 replicas of dp_shard 2, ep 2 within each: the experts' gradients
  // all-reduced over the replicas as the dense weights' are.
  auto layout = moe_layout(2, 2, /*deepseek=*/true);
  layout.dp_replicate = 2;
  layout.rows = 2;
  expect_follows_one_process(layout);
}

TEST(ExpertParallel, Ep2InBf16FollowsOneProcessInBf16) {
  // bf16 compute, float32 master weights and reductions: the all-to-alls
  // move bf16 rows, and the tolerances are bf16's. The gate's logits are
  // bf16 products (promoted to float32 for the scores), so two experts'
  // often tie exactly (margin 0: no margin to assert); each layout
  // computes a token's logits from the same row and weights, and breaks
  // the ties alike.
  auto layout = moe_layout(2, 2, /*deepseek=*/false);
  layout.bf16 = true;
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_TRUE(testing::same_run(run, reference, 2e-2, 0.0, 2e-2))
      << layout.str();
}

TEST(ExpertParallel, Ep2WithFullActivationCheckpointingFollowsOneProcess) {
  auto layout = moe_layout(2, 2, /*deepseek=*/true);
  layout.ac = "full";
  expect_follows_one_process(layout);
}

TEST(ExpertParallel, TensorParallelWithExpertsFollowsOneProcess) {
  // tp 2 alone: attention and the dense first block cut, the MoE blocks
  // routing each rank's half of every sequence with whole experts; then
  // tp 2 x ep 2 on 4 ranks (dp_shard 2, its ranks the ep group).
  for (const int64_t ep : {1, 2}) {
    auto layout = moe_layout(ep, ep, /*deepseek=*/true);
    layout.tp = 2;
    SCOPED_TRACE(layout.str());
    expect_follows_one_process(layout);
  }
}

TEST(ExpertParallel, PipelineTimesEpFollowsOneProcess) {
  for (const char* schedule : {"1F1B", "ZBVZeroBubble"}) {
    auto layout = moe_layout(2, 2, /*deepseek=*/true);
    layout.pp = 2;
    layout.schedule = schedule;
    layout.stages_per_rank = std::string(schedule) == "1F1B" ? 1 : 2;
    layout.rows = 4;
    SCOPED_TRACE(layout.str());
    expect_follows_one_process(layout);
  }
}

}  // namespace
}  // namespace baton
