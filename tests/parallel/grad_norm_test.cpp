// The global grad norm over every rank's slice of the gradients, against the
// norm of the whole gradient computed in one place: pipeline stages summed,
// gradients split along dp_shard and tp summed over their groups, replicas
// counted once; and clipping to it.

#include "parallel/grad_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <mutex>

#include "models/model_spec.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton {
namespace {

/// A chunk with two parameters and no compute: `whole` (4 elements, the
/// same on every rank of a stage) and `split` (this rank's 3 elements of a
/// gradient split across ranks).
class TwoParams final : public ModelChunk {
 public:
  TwoParams() {
    whole = register_parameter("whole", torch::zeros({4}));
    split = register_parameter("split", torch::zeros({3}));
  }
  at::Tensor forward(const at::Tensor& input) override {
    return input;
  }
  const ChunkSpec& spec() const override {
    return spec_;
  }
  std::vector<std::string> unit_names() const override {
    return {""};
  }
  void wrap_unit(const std::string&, std::shared_ptr<UnitWrapper>) override {
    throw std::logic_error("TwoParams runs no wrappers");
  }

  at::Tensor whole, split;

 private:
  ChunkSpec spec_;
};

/// The gradient values of stage `stage`: `whole`'s, and the slice `index` of
/// `split`'s.
at::Tensor whole_grad(int64_t stage) {
  return torch::arange(4, torch::kFloat) + 10.0 * stage;
}
at::Tensor split_grad(int64_t stage, int64_t index) {
  return torch::arange(3, torch::kFloat) * (index + 1) - stage;
}

/// Runs grad_norm on every rank of `dims`, `split` marked along `split_dims`
/// (its slice index is the rank's position in those groups), and checks it
/// against the norm of the whole gradient.
void check_norm(
    const ParallelDims& dims,
    const std::vector<std::string>& split_dims,
    double max_norm = 0.0) {
  // The whole gradient: per stage, `whole` once and every slice of `split`.
  int64_t slices = 1;
  for (const auto& d : split_dims) {
    slices *= dims.degree(d);
  }
  double squares = 0.0;
  for (int64_t stage = 0; stage < dims.degree("pp"); ++stage) {
    squares += whole_grad(stage).pow(2).sum().item<double>();
    for (int64_t i = 0; i < slices; ++i) {
      squares += split_grad(stage, i).pow(2).sum().item<double>();
    }
  }
  const double expected = std::sqrt(squares);
  std::vector<double> norms(dims.world_size);
  std::vector<double> clipped(dims.world_size);
  baton::testing::run_ranks(dims.world_size, [&](int64_t r, dist::Runtime& rt) {
    const dist::ParallelMesh mesh(dims, r, rt.shared_from_this());
    const auto c = mesh.coord();
    int64_t index = 0;
    for (const auto& d : split_dims) {
      index = index * dims.degree(d) + c.at(d);
    }
    auto chunk = std::make_shared<TwoParams>();
    chunk->whole.mutable_grad() = whole_grad(c.at("pp"));
    chunk->split.mutable_grad() = split_grad(c.at("pp"), index);
    ModelParts parts;
    parts.push_back(std::make_shared<ModelPart>(chunk, c.at("pp")));
    for (const auto& d : split_dims) {
      parts[0].mark_grad_split("split", d);
    }
    norms[r] = clip_grad_norm(parts, mesh, max_norm);
    if (max_norm > 0.0) {
      clipped[r] = grad_norm(parts, mesh);
    }
  });
  for (int64_t r = 0; r < dims.world_size; ++r) {
    EXPECT_NEAR(norms[r], expected, 1e-9 * expected) << "rank " << r;
    if (max_norm > 0.0) {
      EXPECT_NEAR(clipped[r], max_norm, 1e-5) << "rank " << r;
    }
  }
}

TEST(GradNorm, PipelineStagesAreSummed) {
  check_norm(baton::testing::builtin_dims(1, 1, 1, 2, 2), {});
}

TEST(GradNorm, ReplicatedGradientsCountOnce) {
  check_norm(baton::testing::builtin_dims(2, 1, 1, 2, 4), {});
}

TEST(GradNorm, ShardedGradientsAreSummedOverTheirGroup) {
  check_norm(baton::testing::builtin_dims(1, 2, 1, 2, 4), {"dp_shard"});
  check_norm(baton::testing::builtin_dims(1, 1, 2, 2, 4), {"tp"});
}

TEST(GradNorm, GradientsSplitAlongTwoDimensions) {
  // pp 2 x dp_shard 2 x tp 2: a tensor-parallel shard, sharded again.
  check_norm(baton::testing::builtin_dims(1, 2, 2, 2, 8), {"tp", "dp_shard"});
}

TEST(GradNorm, ClipsToTheGlobalNorm) {
  check_norm(baton::testing::builtin_dims(1, 2, 1, 2, 4), {"dp_shard"}, 1.5);
  // A single process: clipping scales every gradient by one factor.
  const dist::ParallelMesh mesh(
      baton::testing::builtin_dims(1, 1, 1, 1, 1), 0, nullptr);
  auto chunk = std::make_shared<TwoParams>();
  chunk->whole.mutable_grad() = torch::full({4}, 3.0);
  chunk->split.mutable_grad() = torch::full({3}, 0.0);
  ModelParts parts;
  parts.push_back(std::make_shared<ModelPart>(chunk));
  EXPECT_DOUBLE_EQ(clip_grad_norm(parts, mesh, 0.0), 6.0);  // 0: no clipping
  EXPECT_DOUBLE_EQ(clip_grad_norm(parts, mesh, 12.0), 6.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(parts, mesh, 3.0), 6.0);
  EXPECT_NEAR(chunk->whole.grad()[0].item<double>(), 1.5, 1e-6);
}

}  // namespace
}  // namespace baton
