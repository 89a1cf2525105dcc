#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/process_group.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"

namespace baton {
namespace {

using baton::testing::run_ranks;

constexpr int64_t kVocab = 48;

std::shared_ptr<models::TransformerImpl> tiny_model() {
  return testing::tiny_llama(kVocab, /*seed=*/11);
}

TEST(DataParallel, BucketLayoutCoversEveryParameterOnceInReverseOrder) {
  auto model = tiny_model();
  const auto params = model->parameters();
  GradientReducer reducer(params, dist::ProcessGroup::single("dp"), 4096);
  std::vector<int64_t> order;
  for (const auto& bucket : reducer.bucket_layout()) {
    int64_t bytes = 0;
    for (auto i : bucket) {
      order.push_back(i);
      bytes += params[i].numel() * 4;
    }
    // A bucket overflows only when it holds a single large parameter.
    EXPECT_TRUE(bytes <= 4096 || bucket.size() == 1) << bytes;
  }
  ASSERT_EQ(order.size(), params.size());
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_EQ(order[k], static_cast<int64_t>(params.size() - 1 - k));
  }
}

TEST(DataParallel, ReplicasThatDifferAreRejected) {
  run_ranks(2, [](int64_t rank, dist::Runtime& rt) {
    auto model = tiny_model();
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) {
      names.push_back(item.key());
    }
    check_replicas_equal(model->parameters(), names, *rt.world());
    if (rank == 1) {
      torch::NoGradGuard no_grad;
      model->named_parameters()["norm.weight"].add_(1e-3);
    }
    try {
      check_replicas_equal(model->parameters(), names, *rt.world());
      ADD_FAILURE() << "different replicas passed";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(
          std::string(e.what()).find("norm.weight differs"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace baton
