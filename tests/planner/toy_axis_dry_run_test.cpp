// The toy parallelism of tests/builders/toy_parallelism.h, registered from
// the tests alone, in the dry run: each rank's stored parameters lose the
// embedding rows the other toy rank holds.

#include <gtest/gtest.h>

#include "models/model_spec.h"
#include "planner/dry_run.h"
#include "tests/builders/toy_parallelism.h"

namespace baton {
namespace {

using tensor_parallel::VocabRange;
using testing::kToy;
using testing::register_toy;
using testing::write_config;

TEST(ToyAxis, DryRunCountsWhatEachRankHolds) {
  register_toy();
  const auto one = dry_run(load_job_config(write_config("toy_dry_one", 1)), 1);
  const auto toy = dry_run(load_job_config(write_config("toy_dry_two", 2)), 2);
  EXPECT_EQ(toy.dims.degree(kToy), 2);
  ASSERT_EQ(one.ranks.size(), 1u);
  ASSERT_EQ(toy.ranks.size(), 2u);
  const int64_t vocab = one.vocab_size;
  const int64_t dim =
      model_flavor(model_registry().get("llama3"), "debugmodel").dim;
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(
        toy.ranks[r].parameters,
        one.ranks[0].parameters -
            (vocab - VocabRange::of(vocab, r, 2).size()) * dim)
        << "rank " << r;
  }
}

}  // namespace
}  // namespace baton
