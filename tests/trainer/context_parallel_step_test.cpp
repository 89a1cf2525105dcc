// Context parallel's whole training runs: the small Llama of layout_run.h
// with every sequence split over cp ranks, in every layout the issue names,
// against one process on the same global batches (losses within 1e-5,
// weights rtol 1e-4 after 3 AdamW steps, float32), ranks as threads over
// real Gloo, with and without document masking. The attention alone
// against full attention:
// tests/parallel/context_parallel/context_parallel_test.cpp.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

constexpr int64_t kSteps = 3;

testing::RunLayout cp_layout(int64_t cp, int64_t dp_shard = 1) {
  testing::RunLayout l;
  l.cp = cp;
  l.dp_shard = dp_shard;
  l.rows = 4 / dp_shard;
  return l;
}

void expect_follows_one_process(const testing::RunLayout& layout) {
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_TRUE(testing::same_run(run, reference)) << layout.str();
}

TEST(ContextParallel, Cp2FollowsOneProcess) {
  // The weights sharded over cp (fully_shard over dp_shard x cp).
  expect_follows_one_process(cp_layout(2));
}

TEST(ContextParallel, Cp4FollowsOneProcess) {
  expect_follows_one_process(cp_layout(4));
}

TEST(ContextParallel, Cp2TimesDpShard2FollowsOneProcess) {
  expect_follows_one_process(cp_layout(2, 2));
}

TEST(ContextParallel, Cp2WithFullActivationCheckpointingFollowsOneProcess) {
  // The recomputation gathers the keys and values again.
  auto layout = cp_layout(2);
  layout.ac = "full";
  expect_follows_one_process(layout);
}

TEST(ContextParallel, Cp2WithOpSelectiveCheckpointingFollowsOneProcess) {
  // The recomputation takes the kept output back without gathering.
  auto layout = cp_layout(2);
  layout.ac = "selective";
  layout.ac_selective = "op";
  expect_follows_one_process(layout);
}

TEST(ContextParallel, Cp2TimesTp2FollowsOneProcess) {
  // Sequence parallel inside each cp shard: tp's ranks split the shard's
  // positions between the blocks and its heads within them.
  auto layout = cp_layout(2);
  layout.tp = 2;
  expect_follows_one_process(layout);
}

TEST(ContextParallel, Pp2TimesCp2FollowsOneProcess) {
  auto layout = cp_layout(2);
  layout.pp = 2;
  layout.schedule = "1F1B";
  expect_follows_one_process(layout);
}

TEST(ContextParallel, Cp2KeepsDocumentsApartAsOneProcess) {
  // Document masking across the shards: each rank's rows see only their
  // own documents' keys, some of them on the other rank.
  auto layout = cp_layout(2);
  layout.documents = true;
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  // The mask matters: without it the first loss is another.
  auto unmasked = layout.one_process();
  unmasked.documents = false;
  EXPECT_GT(
      std::abs(
          testing::run_layout(unmasked, 1).losses.at(0) -
          reference.losses.at(0)),
      1e-4);
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_TRUE(testing::same_run(run, reference)) << layout.str();
}

TEST(ContextParallel, Pp2TimesCp2KeepsDocumentsApart) {
  // The first stage's rank sends every stage's rank the documents.
  auto layout = cp_layout(2);
  layout.pp = 2;
  layout.documents = true;
  expect_follows_one_process(layout);
}

TEST(ContextParallel, DocumentsUnderOpSelectiveCheckpointing) {
  // The recomputation takes the kept output and log-sum-exp back, in one
  // process and at cp 2.
  for (const int64_t cp : {1, 2}) {
    auto layout = cp_layout(cp);
    layout.documents = true;
    layout.ac = "selective";
    layout.ac_selective = "op";
    expect_follows_one_process(layout);
  }
}

TEST(ContextParallel, Cp2TimesEp2RoutesEachShardsTokens) {
  // ep borrows the cp ranks: each routes its own positions' tokens to the
  // experts split between the two; the auxiliary loss adds up both
  // shards' statistics of every sequence.
  testing::RunLayout layout = cp_layout(2);
  layout.model = "qwen3_moe";
  layout.args = testing::layout_moe_args(/*deepseek=*/true);
  layout.ep = 2;
  layout.aux_loss_coeff = 0.01;
  layout.after_init = testing::spread_routers;
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  ASSERT_GT(reference.min_margin, 1e-4)
      << "the inputs route some token too close to call";
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_GT(run.min_margin, 1e-4);
  EXPECT_TRUE(testing::same_run(run, reference)) << layout.str();
}

}  // namespace
}  // namespace baton
