#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/parallel_dims.h"

namespace baton::dist {

class ProcessGroup;
class Runtime;

/// A rank's position on each parallel dimension.
struct MeshCoord {
  int64_t pp = 0;
  int64_t dp_replicate = 0;
  int64_t dp_shard = 0;
  int64_t tp = 0;

  /// Index among the data-parallel ranks: dp_replicate * dp_shard degree +
  /// dp_shard. Picks the data shard.
  int64_t dp(const ParallelDims& dims) const {
    return dp_replicate * dims.dp_shard + dp_shard;
  }
};

/// Dimensions a sub-group runs along: the four degrees, and kDp, the
/// flattened dp_replicate x dp_shard (the ranks that split the batch).
enum class MeshDim { kPp, kDp, kDpReplicate, kDpShard, kTp };

/// "pp", "dp", "dp_replicate", "dp_shard", "tp".
const char* mesh_dim_name(MeshDim dim);

/// Rank order, as torchtitan's device mesh: pp outermost, then
/// dp_replicate, dp_shard, tp innermost, so
/// rank = ((pp * dp_replicate + r) * dp_shard + s) * tp + t. Neighbouring
/// ranks share a pipeline stage; with pp 2 x dp 2 ranks 0, 1 are stage 0.
MeshCoord mesh_coord(const ParallelDims& dims, int64_t rank);
int64_t mesh_rank(const ParallelDims& dims, const MeshCoord& coord);
/// The ascending global ranks of `rank`'s group along `dim`: the ranks whose
/// other coordinates equal `rank`'s.
std::vector<int64_t> mesh_group(
    const ParallelDims& dims, int64_t rank, MeshDim dim);

/// The process groups of one rank: the world and one group along each
/// MeshDim (pp, dp_replicate, dp_shard, tp and the flattened dp, which is
/// also the group the loss and token counts are summed over). A dimension
/// of degree 1 gets a group of one; dimensions with the same members share
/// one group.
class ParallelMesh {
 public:
  /// Creates the sub-groups (collectively: every rank calls it, in the same
  /// order). `runtime` may be null for a single rank.
  ParallelMesh(
      const ParallelDims& dims,
      int64_t rank,
      const std::shared_ptr<Runtime>& runtime);

  int64_t rank() const {
    return rank_;
  }
  const MeshCoord& coord() const {
    return coord_;
  }
  const std::shared_ptr<ProcessGroup>& world() const {
    return world_;
  }
  /// This rank's group along `dim`.
  const std::shared_ptr<ProcessGroup>& group(MeshDim dim) const;
  /// group(MeshDim::kPp).
  const std::shared_ptr<ProcessGroup>& pp() const {
    return group(MeshDim::kPp);
  }
  /// group(MeshDim::kDp).
  const std::shared_ptr<ProcessGroup>& dp() const {
    return group(MeshDim::kDp);
  }
  /// The ranks that together train on one global batch (dp: tensor-parallel
  /// peers see the same batch).
  const std::shared_ptr<ProcessGroup>& loss() const {
    return group(MeshDim::kDp);
  }
  /// "rank 3: pp 1/2, dp 1/2 (groups pp [1, 3], dp [2, 3])", with the
  /// dp_shard and tp groups too when their degrees are above 1.
  std::string to_string() const;

 private:
  ParallelDims dims_;
  int64_t rank_;
  MeshCoord coord_;
  std::shared_ptr<ProcessGroup> world_;
  /// Indexed by MeshDim.
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace baton::dist
