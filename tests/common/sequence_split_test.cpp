// The head-tail split of a sequence over context parallel's ranks: which
// chunks and positions a shard holds, its rows taken and put back.

#include "common/sequence_split.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace baton {
namespace {

TEST(SequenceSplit, HeadAndTailChunksRoundTrip) {
  const SequenceSplit one{3, 1};
  EXPECT_EQ(one.chunks()[0], 1);
  EXPECT_EQ(one.chunks()[1], 4);
  // seq 12 over 3: chunks of 2; shard 1 holds positions 2, 3, 8, 9.
  EXPECT_TRUE(at::equal(one.positions(4), at::tensor({2, 3, 8, 9}, at::kLong)));
  EXPECT_EQ(one.position(3, 4), 9);
  const auto x = at::arange(2 * 12, at::kLong).view({2, 12});
  EXPECT_TRUE(at::equal(one.take(x, 1), x.index_select(1, one.positions(4))));
  std::vector<at::Tensor> shards;
  for (int64_t r = 0; r < 3; ++r) {
    shards.push_back(SequenceSplit{3, r}.take(x, 1));
  }
  EXPECT_TRUE(at::equal(one.restore(at::stack(shards), 1), x));
  EXPECT_THROW(one.take(at::zeros({2, 10}), 1), std::invalid_argument);
  EXPECT_THROW(
      one.restore(at::stack(shards).narrow(0, 0, 2), 1), std::invalid_argument);
  // Unsplit: every row in order.
  EXPECT_TRUE(at::equal(SequenceSplit{}.take(x, 1), x));
}

}  // namespace
}  // namespace baton
