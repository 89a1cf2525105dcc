#include <gtest/gtest.h>

#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "tests/parallel/multi_rank.h"

namespace baton::dist {
namespace {

using Ranks = std::vector<int64_t>;

MeshAxisSpec spec(
    const char* name, int order, std::vector<std::string> joins = {}) {
  return MeshAxisSpec{
      name,
      order,
      std::string("test.") + name,
      joins,
      name == std::string("pp")};
}

/// The built-in axes' shape, spelled out here so that the mesh is tested
/// without the registry: pp outermost, the data axes joining dp and loss,
/// tp innermost.
ParallelDims four(int64_t r, int64_t s, int64_t t, int64_t p, int64_t world) {
  return ParallelDims::resolve(
      {{spec("tp", 1000), t},
       {spec("dp_shard", 200, {"dp", "loss"}), s},
       {spec("pp", 0), p},
       {spec("dp_replicate", 100, {"dp", "loss"}), r}},
      world);
}

TEST(Mesh, PipelineOutermostThenDataParallel) {
  // pp 2 x dp_replicate 2: ranks 0, 1 hold stage 0; 2, 3 stage 1.
  const auto d = four(2, 1, 1, 2, 4);
  EXPECT_EQ(mesh_coord(d, 0).at("pp"), 0);
  EXPECT_EQ(mesh_coord(d, 1).at("pp"), 0);
  EXPECT_EQ(mesh_coord(d, 2).at("pp"), 1);
  EXPECT_EQ(mesh_index(d, mesh_coord(d, 3), "dp"), 1);
  EXPECT_EQ(mesh_group(d, 1, "pp"), (Ranks{1, 3}));
  EXPECT_EQ(mesh_group(d, 2, "pp"), (Ranks{0, 2}));
  EXPECT_EQ(mesh_group(d, 2, "dp"), (Ranks{2, 3}));
  EXPECT_EQ(mesh_group(d, 2, "loss"), (Ranks{2, 3}));
  EXPECT_EQ(mesh_group(d, 0, "dp_replicate"), (Ranks{0, 1}));
  EXPECT_EQ(mesh_group(d, 0, "dp_shard"), (Ranks{0}));
  EXPECT_EQ(d.to_string(), "pp=2 dp_replicate=2 dp_shard=1 tp=1 (world 4)");
}

TEST(Mesh, EightRanksFourAxes) {
  // pp 2 x dp_replicate 2 x dp_shard 1 x tp 2.
  const auto d = four(2, 1, 2, 2, 8);
  EXPECT_EQ(mesh_group(d, 5, "tp"), (Ranks{4, 5}));
  EXPECT_EQ(mesh_group(d, 5, "dp"), (Ranks{5, 7}));
  EXPECT_EQ(mesh_group(d, 5, "pp"), (Ranks{1, 5}));
  const auto c = mesh_coord(d, 6);
  EXPECT_EQ(c.at("pp"), 1);
  EXPECT_EQ(c.at("dp_replicate"), 1);
  EXPECT_EQ(c.at("tp"), 0);
  EXPECT_EQ(c.at("no_such_axis"), 0);
  EXPECT_EQ(d.degree("dp"), 2);
  EXPECT_EQ(d.degree("no_such_axis"), 1);
  EXPECT_THROW(mesh_group(d, 0, "no_such_axis"), std::invalid_argument);
}

TEST(Mesh, ReplicateAndShardFlattenIntoDp) {
  const auto d = four(2, 2, 1, 1, 4);
  EXPECT_EQ(mesh_group(d, 3, "dp"), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(mesh_group(d, 3, "dp_replicate"), (Ranks{1, 3}));
  EXPECT_EQ(mesh_group(d, 3, "dp_shard"), (Ranks{2, 3}));
  EXPECT_EQ(mesh_index(d, mesh_coord(d, 3), "dp"), 3);
  EXPECT_EQ(mesh_index(d, mesh_coord(d, 2), "dp"), 2);
  EXPECT_EQ(d.dp(), 4);
}

TEST(Mesh, CoordAndRankAreInverse) {
  for (const auto& d :
       {four(2, 3, 1, 2, 12), four(1, 2, 2, 3, 12), four(3, 1, 1, 4, 12)}) {
    for (int64_t r = 0; r < d.world_size; ++r) {
      EXPECT_EQ(mesh_rank(d, mesh_coord(d, r)), r);
      // Each rank's groups along pp and dp meet only in the rank itself,
      // and their sizes are the degrees; its index in a group is its
      // place among the group's ascending ranks.
      const auto pp = mesh_group(d, r, "pp");
      const auto dp = mesh_group(d, r, "dp");
      EXPECT_EQ(static_cast<int64_t>(pp.size()), d.degree("pp"));
      EXPECT_EQ(static_cast<int64_t>(dp.size()), d.dp());
      const auto c = mesh_coord(d, r);
      EXPECT_EQ(dp.at(mesh_index(d, c, "dp")), r);
      EXPECT_EQ(pp.at(mesh_index(d, c, "pp")), r);
    }
  }
}

TEST(Mesh, DerivedAxisReslicesItsSources) {
  // dp_shard 4 x tp 2; "ep" of 2 borrows from dp_shard, as expert parallel
  // borrows from dp_shard x cp: its groups are pairs of dp_shard
  // neighbours with the same tp rank.
  auto d = four(1, 4, 2, 1, 8);
  d.add_derived(DerivedAxis{"ep", {"dp_shard"}, 2});
  EXPECT_EQ(d.degree("ep"), 2);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(mesh_group(d, 0, "ep"), (Ranks{0, 2}));
  EXPECT_EQ(mesh_group(d, 5, "ep"), (Ranks{5, 7}));
  EXPECT_EQ(mesh_group(d, 3, "ep"), (Ranks{1, 3}));
  EXPECT_EQ(mesh_index(d, mesh_coord(d, 7), "ep"), 1);
  EXPECT_EQ(mesh_index(d, mesh_coord(d, 4), "ep"), 0);
  EXPECT_EQ(
      d.to_string(),
      "pp=1 dp_replicate=1 dp_shard=4 tp=2 ep=2 (of dp_shard) (world 8)");
  EXPECT_THROW(
      d.add_derived(DerivedAxis{"ep3", {"dp_shard"}, 3}),
      std::invalid_argument);
  EXPECT_THROW(
      d.add_derived(DerivedAxis{"x", {"nope"}, 1}), std::invalid_argument);
  EXPECT_THROW(
      d.add_derived(DerivedAxis{"tp", {"dp_shard"}, 2}), std::invalid_argument);
}

TEST(Mesh, SingleRankGetsLocalGroups) {
  const auto d = four(1, 1, 1, 1, 1);
  ParallelMesh mesh(d, 0, nullptr);
  EXPECT_EQ(mesh.group("pp")->size(), 1);
  EXPECT_EQ(mesh.dp()->backend(), "local");
  EXPECT_EQ(mesh.loss().get(), mesh.dp().get());
  EXPECT_EQ(mesh.to_string(), "rank 0: every group is this rank");
  EXPECT_THROW(mesh.group("cp"), std::invalid_argument);
}

TEST(Mesh, GroupsAreSharedByMembersAndNamedEveryWay) {
  // pp 2 x dp_replicate 2 on four rank threads: dp, loss and dp_replicate
  // are one group; the log names it every way.
  const auto d = four(2, 1, 1, 2, 4);
  std::vector<std::string> text(4);
  baton::testing::run_ranks(4, [&](int64_t r, Runtime& rt) {
    ParallelMesh mesh(d, r, rt.shared_from_this());
    EXPECT_EQ(mesh.dp().get(), mesh.group("dp_replicate").get());
    EXPECT_EQ(mesh.loss().get(), mesh.dp().get());
    EXPECT_EQ(mesh.group("pp")->global_ranks(), mesh_group(d, r, "pp"));
    text[r] = mesh.to_string();
  });
  EXPECT_EQ(
      text[3],
      "rank 3: dp=loss=dp_replicate 1/2, pp 1/2 (groups dp=loss=dp_replicate "
      "[2, 3], pp [1, 3])");
}

}  // namespace
}  // namespace baton::dist
