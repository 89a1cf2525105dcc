// A unit's parameters across its states: sharded rows (uneven, some ranks
// holding none), gathered back whole, freed and refilled in place, and the
// slices the checkpoint reads; real Gloo between rank threads.

#include "parallel/fsdp/fully_shard.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/job_config.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton::fsdp {
namespace {

TEST(FsdpUnit, ShardsGatherFreeAndRefillInPlace) {
  // 5 rows over 4 ranks: 2, 2, 1 and 0 rows; a 1-d parameter of 3.
  const auto a = torch::arange(15, torch::kFloat).view({5, 3});
  const auto b = torch::arange(3, torch::kFloat) + 100;
  baton::testing::run_ranks(4, [&](int64_t rank, dist::Runtime& rt) {
    auto pa = a.clone().requires_grad_(true);
    auto pb = b.clone().requires_grad_(true);
    ShardGroups groups{rt.world(), dist::ProcessGroup::single("replica", rank)};
    Unit unit("u", {{"a", pa}, {"b", pb}}, groups);
    const int64_t rows[] = {2, 2, 1, 0};
    EXPECT_EQ(pa.size(0), rows[rank]);
    EXPECT_EQ(pb.size(0), rank < 3 ? 1 : 0);
    EXPECT_TRUE(torch::equal(
        pa, a.narrow(0, std::min<int64_t>(2 * rank, 5), rows[rank])));
    const auto version = pa._version();
    unit.unshard();
    unit.wait_for_unshard();
    EXPECT_TRUE(torch::equal(pa, a));
    EXPECT_TRUE(torch::equal(pb, b));
    // Freed: shape kept, memory gone; refilled by the next gather.
    unit.reshard();
    EXPECT_EQ(pa.sizes(), a.sizes());
    EXPECT_EQ(pa.storage().nbytes(), 0u);
    unit.wait_for_unshard();
    EXPECT_TRUE(torch::equal(pa, a));
    EXPECT_EQ(pa._version(), version);  // autograd's saved copy stays valid
    // Whole gradients reduce-scatter into the shards': 4 ranks' ones.
    pa.mutable_grad() = torch::ones({5, 3});
    unit.reduce_grads();
    unit.to_sharded();
    EXPECT_EQ(pa.size(0), rows[rank]);
    EXPECT_TRUE(torch::equal(pa.grad(), torch::full({rows[rank], 3}, 4.0)));
    // A parameter without a gradient counts as zeros, as with replicate.
    EXPECT_TRUE(torch::equal(pb.grad(), torch::zeros({pb.size(0)})));
  });
}

TEST(FullyShardApplier, RecordsEachParametersSliceAndRefusesScalars) {
  register_builtin_appliers();
  baton::testing::run_ranks(2, [](int64_t rank, dist::Runtime& rt) {
    JobConfig config;
    config.parallelism.data_parallel_shard_degree = 2;
    const dist::ParallelMesh mesh(
        baton::testing::builtin_dims(1, 2, 1, 1, 2),
        rank,
        rt.shared_from_this());
    ModelPart part(baton::testing::tiny_llama(/*vocab=*/33, 1));
    const auto whole = part.module()
                           .named_parameters()["output.weight"]
                           .detach()
                           .clone();  // (33, 32)
    FullyShardApplier().apply(part, ParallelContext{config, mesh, at::kCPU});
    const ParamSlice* slice = part.slice("output.weight");
    ASSERT_NE(slice, nullptr);
    EXPECT_EQ(slice->global_shape, (std::vector<int64_t>{33, 32}));
    EXPECT_EQ(slice->offsets, (std::vector<int64_t>{rank * 17, 0}));
    // By value: named_parameters() returns a temporary dict.
    const at::Tensor shard = part.module().named_parameters()["output.weight"];
    EXPECT_EQ(shard.size(0), rank == 0 ? 17 : 16);
    EXPECT_TRUE(torch::equal(shard, whole.narrow(0, rank * 17, shard.size(0))));
    EXPECT_EQ(
        part.grad_split("layers.1.attention.wq.weight"),
        (std::vector<std::string>{"dp_shard"}));
    EXPECT_EQ(part.grad_sync().size(), 1u);
  });
  auto scalar = torch::zeros({}).requires_grad_(true);
  ShardGroups groups{
      dist::ProcessGroup::single("shard"), dist::ProcessGroup::single("r")};
  EXPECT_THROW(Unit("u", {{"s", scalar}}, groups), std::invalid_argument);
  EXPECT_THROW(parse_reshard_after_forward("sometimes"), std::invalid_argument);
}

}  // namespace
}  // namespace baton::fsdp
