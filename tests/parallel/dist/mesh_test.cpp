#include <gtest/gtest.h>

#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"

namespace baton::dist {
namespace {

using Ranks = std::vector<int64_t>;

TEST(Mesh, PipelineOutermostThenDataParallel) {
  // pp 2 x dp_replicate 2: ranks 0, 1 hold stage 0; 2, 3 stage 1.
  const auto d = ParallelDims::resolve(2, 1, 1, 2, 4);
  EXPECT_EQ(mesh_coord(d, 0).pp, 0);
  EXPECT_EQ(mesh_coord(d, 1).pp, 0);
  EXPECT_EQ(mesh_coord(d, 2).pp, 1);
  EXPECT_EQ(mesh_coord(d, 3).dp(d), 1);
  EXPECT_EQ(mesh_group(d, 1, MeshDim::kPp), (Ranks{1, 3}));
  EXPECT_EQ(mesh_group(d, 2, MeshDim::kPp), (Ranks{0, 2}));
  EXPECT_EQ(mesh_group(d, 2, MeshDim::kDp), (Ranks{2, 3}));
  EXPECT_EQ(mesh_group(d, 0, MeshDim::kDpReplicate), (Ranks{0, 1}));
  EXPECT_EQ(mesh_group(d, 0, MeshDim::kDpShard), (Ranks{0}));
}

TEST(Mesh, EightRanksFourDimensions) {
  // pp 2 x dp_replicate 2 x dp_shard 1 x tp 2.
  const auto d = ParallelDims::resolve(2, 1, 2, 2, 8);
  EXPECT_EQ(mesh_group(d, 5, MeshDim::kTp), (Ranks{4, 5}));
  EXPECT_EQ(mesh_group(d, 5, MeshDim::kDp), (Ranks{5, 7}));
  EXPECT_EQ(mesh_group(d, 5, MeshDim::kPp), (Ranks{1, 5}));
  const auto c = mesh_coord(d, 6);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp_replicate, 1);
  EXPECT_EQ(c.tp, 0);
}

TEST(Mesh, ReplicateAndShardFlattenIntoDp) {
  const auto d = ParallelDims::resolve(2, 2, 1, 1, 4);
  EXPECT_EQ(mesh_group(d, 3, MeshDim::kDp), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(mesh_group(d, 3, MeshDim::kDpReplicate), (Ranks{1, 3}));
  EXPECT_EQ(mesh_group(d, 3, MeshDim::kDpShard), (Ranks{2, 3}));
  EXPECT_EQ(mesh_coord(d, 3).dp(d), 3);
  EXPECT_EQ(mesh_coord(d, 2).dp(d), 2);
}

TEST(Mesh, CoordAndRankAreInverse) {
  for (const auto& d :
       {ParallelDims::resolve(2, 3, 1, 2, 12),
        ParallelDims::resolve(1, 2, 2, 3, 12),
        ParallelDims::resolve(3, 1, 1, 4, 12)}) {
    std::vector<bool> seen(d.world_size, false);
    for (int64_t r = 0; r < d.world_size; ++r) {
      EXPECT_EQ(mesh_rank(d, mesh_coord(d, r)), r);
      // Each rank's groups along pp and dp meet only in the rank itself,
      // and their sizes are the degrees.
      const auto pp = mesh_group(d, r, MeshDim::kPp);
      const auto dp = mesh_group(d, r, MeshDim::kDp);
      EXPECT_EQ(static_cast<int64_t>(pp.size()), d.pp);
      EXPECT_EQ(static_cast<int64_t>(dp.size()), d.dp());
      seen[r] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), d.world_size);
  }
}

TEST(Mesh, SingleRankGetsLocalGroups) {
  const auto d = ParallelDims::resolve(1, 1, 1, 1, 1);
  ParallelMesh mesh(d, 0, nullptr);
  EXPECT_EQ(mesh.pp()->size(), 1);
  EXPECT_EQ(mesh.dp()->backend(), "local");
  EXPECT_EQ(mesh.loss().get(), mesh.dp().get());
  EXPECT_EQ(mesh.to_string(), "rank 0: pp 0/1, dp 0/1 (groups pp [0], dp [0])");
}

}  // namespace
}  // namespace baton::dist
