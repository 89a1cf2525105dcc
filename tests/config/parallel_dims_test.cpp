#include <gtest/gtest.h>

#include "common/error.h"
#include "config/parallel_dims.h"

namespace baton {
namespace {

TEST(ParallelDims, ResolvesTheRestDegree) {
  const auto d = ParallelDims::resolve(-1, 1, 1, 4, 8);
  EXPECT_EQ(d.dp_replicate, 2);
  EXPECT_EQ(d.pp, 4);
  EXPECT_EQ(d.dp(), 2);
  EXPECT_TRUE(d.pp_enabled());
  EXPECT_TRUE(d.dp_enabled());
  EXPECT_EQ(d.to_string(), "dp_replicate=2 dp_shard=1 tp=1 pp=4 (world 8)");
}

TEST(ParallelDims, SingleRank) {
  const auto d = ParallelDims::resolve(1, 1, 1, 1, 1);
  EXPECT_FALSE(d.pp_enabled());
  EXPECT_FALSE(d.dp_enabled());
}

void expect_error(
    int64_t r,
    int64_t s,
    int64_t t,
    int64_t p,
    int64_t world,
    const std::string& fragment) {
  try {
    ParallelDims::resolve(r, s, t, p, world);
    FAIL() << "expected ConfigError containing " << fragment;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << e.what();
  }
}

TEST(ParallelDims, RejectsWhatDoesNotFitTheWorld) {
  expect_error(2, 1, 1, 2, 8, "multiply to 4, not the world size 8");
  expect_error(-1, -1, 1, 1, 8, "-1 in at most one parallelism degree");
  expect_error(-1, 1, 1, 3, 8, "does not divide the world size 8");
  expect_error(
      0, 1, 1, 1, 1, "data_parallel_replicate_degree: 0 is out of range");
}

}  // namespace
}  // namespace baton
