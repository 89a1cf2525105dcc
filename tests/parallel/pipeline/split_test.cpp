// Splitting a model into pipeline stages: even splits, explicit layer
// counts and FQN lists, and their errors.

#include <gtest/gtest.h>

#include "common/error.h"
#include "parallel/pipeline/split.h"

namespace baton::pipeline {
namespace {

TEST(Split, EvenWithExtraLayersFirst) {
  const auto c = split_model(7, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].first_layer, 0);
  EXPECT_EQ(c[0].end_layer, 3);
  EXPECT_EQ(c[1].end_layer, 5);
  EXPECT_EQ(c[2].end_layer, 7);
  EXPECT_TRUE(c[0].embedding);
  EXPECT_FALSE(c[1].embedding || c[1].output);
  EXPECT_TRUE(c[2].output);
  EXPECT_EQ(describe_chunk(c[0]), "tok_embeddings, layers.0-2");
  EXPECT_EQ(describe_chunk(c[2]), "layers.5-6, norm, output");
}

TEST(Split, ErrorsAndExplicitLists) {
  EXPECT_THROW(split_model(2, 3), ConfigError);
  EXPECT_THROW(split_model(8, 4, 3), ConfigError);
  const auto c = split_model(8, 4, 2);
  EXPECT_EQ(c[3].first_layer, 6);
  const auto f = split_model_by_fqns(
      3,
      {{"tok_embeddings", "layers.0"},
       {"layers.1", "layers.2", "norm", "output"}});
  EXPECT_EQ(f[0].end_layer, 1);
  EXPECT_EQ(f[1].first_layer, 1);
  EXPECT_TRUE(f[1].output);
  EXPECT_THROW(
      split_model_by_fqns(
          3, {{"layers.0"}, {"layers.1", "layers.2", "norm", "output"}}),
      ConfigError);
  EXPECT_THROW(
      split_model_by_fqns(
          3,
          {{"tok_embeddings", "layers.1"},
           {"layers.0", "layers.2", "norm", "output"}}),
      ConfigError);
  EXPECT_THROW(
      split_model_by_fqns(
          2,
          {{"tok_embeddings", "layers.0"}, {}, {"layers.1", "norm", "output"}}),
      ConfigError);
}

}  // namespace
}  // namespace baton::pipeline
