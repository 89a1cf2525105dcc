#include <gtest/gtest.h>

#include "common/text.h"

namespace baton {
namespace {

TEST(Text, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("stpes", "steps"), 1u);
  EXPECT_EQ(edit_distance("step", "steps"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(Text, ClosestMatchSuggestsOnlyPlausibleTypos) {
  const std::vector<std::string> keys = {"seq_len", "steps", "seed"};
  EXPECT_EQ(closest_match("stesp", keys), "steps");
  EXPECT_EQ(closest_match("SEQ_LEN", keys), "seq_len");
  EXPECT_EQ(closest_match("seqlen", keys), "seq_len");
  EXPECT_EQ(closest_match("learning_rate", keys), "");
}

TEST(Text, JoinAndLower) {
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(join({}, ", "), "");
  EXPECT_EQ(to_lower("AdamW"), "adamw");
}

}  // namespace
}  // namespace baton
