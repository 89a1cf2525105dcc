#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/parallel_dims.h"

namespace baton::dist {

class ProcessGroup;
class Runtime;

/// A rank's position on each axis of the mesh, by name.
class MeshCoord {
 public:
  /// The position on `axis`; 0 where the mesh has no such axis.
  int64_t at(const std::string& axis) const;
  /// Sets the position on `axis` (adding it when absent).
  void set(const std::string& axis, int64_t value);

 private:
  std::vector<std::pair<std::string, int64_t>> values_;
};

/// Rank order, as torchtitan's device mesh: the axes in ParallelDims order,
/// the first outermost, so with pp, dp_replicate, dp_shard and tp
/// rank = ((pp * dp_replicate + r) * dp_shard + s) * tp + t. Neighbouring
/// ranks share a pipeline stage; with pp 2 x dp 2 ranks 0, 1 are stage 0.
MeshCoord mesh_coord(const ParallelDims& dims, int64_t rank);
int64_t mesh_rank(const ParallelDims& dims, const MeshCoord& coord);
/// The index of `coord` along `name`: its position on an axis; on a
/// flattened group, its position among the group's members (row-major over
/// the group's axes); on a derived axis, (flat / stride) % degree of its
/// flattened sources' position. Throws std::invalid_argument for a name the
/// mesh does not have.
int64_t mesh_index(
    const ParallelDims& dims, const MeshCoord& coord, const std::string& name);
/// The ascending global ranks of `rank`'s group along `name` (an axis, a
/// flattened group or a derived axis): the ranks whose coordinates off that
/// group's axes equal `rank`'s (for a derived axis, also the sources'
/// positions off it).
std::vector<int64_t> mesh_group(
    const ParallelDims& dims, int64_t rank, const std::string& name);

/// The process groups of one rank: the world and one group for each axis,
/// flattened group and derived axis of the layout, by name. A group of
/// degree 1 is a group of one; names with the same members share one group.
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
  const ParallelDims& dims() const {
    return dims_;
  }
  const MeshCoord& coord() const {
    return coord_;
  }
  /// mesh_index of this rank along `name`.
  int64_t index(const std::string& name) const;
  /// True where this rank is at position 0 on every axis but `axes`: the
  /// one that logs what the ranks differing only off `axes` share (with
  /// {"pp"}: the first rank of each pipeline stage).
  bool leads(const std::vector<std::string>& axes) const;
  const std::shared_ptr<ProcessGroup>& world() const {
    return world_;
  }
  /// This rank's group along `name`; throws std::invalid_argument naming the
  /// mesh's names for one it does not have.
  const std::shared_ptr<ProcessGroup>& group(const std::string& name) const;
  /// group("dp"): the ranks that hold replicas or shards of the same weights
  /// and read different batches.
  const std::shared_ptr<ProcessGroup>& dp() const {
    return group("dp");
  }
  /// group("loss"): the ranks that together train on one global batch
  /// (losses and token counts are summed over it).
  const std::shared_ptr<ProcessGroup>& loss() const {
    return group("loss");
  }
  /// "rank 5: pp 1/2, dp_replicate=dp=loss 0/2, tp 1/2 (groups pp [1, 5],
  /// dp_replicate=dp=loss [5, 7], tp [4, 5])": each group above one rank
  /// once, under all its names.
  std::string to_string() const;

 private:
  ParallelDims dims_;
  int64_t rank_;
  MeshCoord coord_;
  std::shared_ptr<ProcessGroup> world_;
  /// (names, ranks) of each distinct group, in creation order.
  std::vector<std::pair<std::vector<std::string>, std::vector<int64_t>>>
      distinct_;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace baton::dist
