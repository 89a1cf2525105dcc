// The sequence-parallel regions: the all-gather's backward is a
// reduce-scatter and the reduce-scatter's an all-gather, against the same
// computation on one process; errors name the region; the traffic count is
// what the formula says. Real Gloo between rank threads.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/dist/process_group.h"
#include "parallel/tensor_parallel/regions.h"
#include "tests/parallel/multi_rank.h"

namespace baton::tensor_parallel {
namespace {

constexpr int64_t kTp = 2;

/// Per-rank weights w_r (B, T, D): rank r's partial sums of a row-parallel
/// output are x * w_r.
at::Tensor weight_of(int64_t rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(50 + rank);
  return at::randn({2, 4, 3}, gen);
}

TEST(SequenceRegions, GatherAndReduceScatterAreEachOthersBackward) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor x = at::randn({2, 4, 3}, gen);  // the whole sequence
  // One process: every rank's y_r = gather(x)[.] * w_r, summed and
  // scattered: out = sum_r x * w_r, and d sum(out * out) / dx.
  const at::Tensor whole = x.clone().requires_grad_(true);
  const at::Tensor out = whole * weight_of(0) + whole * weight_of(1);
  (out * out).sum().backward();
  reset_traffic();
  testing::run_ranks(kTp, [&](int64_t rank, dist::Runtime& rt) {
    const Region region{rt.world(), "layers.0.attention"};
    const at::Tensor shard =
        x.slice(1, 2 * rank, 2 * rank + 2).clone().requires_grad_(true);
    const at::Tensor full = gather_sequence(shard, region);  // (2, 4, 3)
    EXPECT_TRUE(torch::equal(full, x));
    const at::Tensor mine =
        reduce_scatter_sequence(full * weight_of(rank), region);
    EXPECT_TRUE(torch::allclose(
        mine, out.slice(1, 2 * rank, 2 * rank + 2).detach(), 1e-6, 1e-6));
    (mine * mine).sum().backward();
    EXPECT_TRUE(torch::allclose(
        shard.grad(),
        whole.grad().slice(1, 2 * rank, 2 * rank + 2),
        1e-5,
        1e-6));
  });
  // Each of the four collectives on each rank sends (n - 1) shards of
  // 2 x 2 x 3 floats.
  const auto counted = traffic();
  for (const char* key :
       {"layers.0.attention enter forward",
        "layers.0.attention enter backward",
        "layers.0.attention leave forward",
        "layers.0.attention leave backward"}) {
    ASSERT_TRUE(counted.count(key)) << key;
    EXPECT_EQ(counted.at(key).calls, kTp) << key;
    EXPECT_EQ(counted.at(key).bytes, kTp * (kTp - 1) * 12 * 4) << key;
  }
}

TEST(SequenceRegions, AllReduceGradientSumsOverTheRanks) {
  testing::run_ranks(kTp, [&](int64_t rank, dist::Runtime& rt) {
    const Region region{rt.world(), "norm"};
    const at::Tensor g = at::full({4}, static_cast<float>(rank + 1));
    const at::Tensor sum = all_reduce_gradient(g, region);
    EXPECT_TRUE(torch::equal(sum, at::full({4}, 3.0f)));
    EXPECT_EQ(g[0].item<float>(), rank + 1.0f);  // the input is kept
  });
}

TEST(SequenceRegions, ASequenceThatDoesNotSplitNamesTheRegion) {
  testing::run_ranks(kTp, [&](int64_t, dist::Runtime& rt) {
    const Region region{rt.world(), "layers.2.feed_forward"};
    try {
      reduce_scatter_sequence(at::ones({1, 3, 2}), region);
      ADD_FAILURE() << "no error";
    } catch (const std::exception& e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "[tensor_parallel] layers.2.feed_forward: a sequence of 3 "
              "positions; allowed: a multiple of the tp degree 2"),
          std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace baton::tensor_parallel
