#include "parallel/dist/mesh.h"

#include <stdexcept>

#include "common/text.h"
#include "parallel/dist/process_group.h"

namespace baton::dist {

namespace {

std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::vector<std::string> items;
  for (const auto r : ranks) {
    items.push_back(std::to_string(r));
  }
  return "[" + join(items, ", ") + "]";
}

/// The sub-group of `rank` along `dim`, shared with the world group when
/// it spans the world, a group of one when the degree is 1.
std::shared_ptr<ProcessGroup> make_group(
    const ParallelDims& dims,
    int64_t rank,
    MeshDim dim,
    const char* name,
    const std::shared_ptr<Runtime>& runtime,
    const std::shared_ptr<ProcessGroup>& world) {
  const auto ranks = mesh_group(dims, rank, dim);
  if (ranks.size() == 1) {
    return ProcessGroup::single(name, rank);
  }
  if (static_cast<int64_t>(ranks.size()) == dims.world_size) {
    return world;
  }
  return runtime->new_group(ranks, std::string(name) + ranks_text(ranks));
}

}  // namespace

MeshCoord mesh_coord(const ParallelDims& d, int64_t rank) {
  if (rank < 0 || rank >= d.world_size) {
    throw std::invalid_argument(
        "[mesh] rank " + std::to_string(rank) + " outside world " +
        std::to_string(d.world_size));
  }
  MeshCoord c;
  c.tp = rank % d.tp;
  rank /= d.tp;
  c.dp_shard = rank % d.dp_shard;
  rank /= d.dp_shard;
  c.dp_replicate = rank % d.dp_replicate;
  c.pp = rank / d.dp_replicate;
  return c;
}

int64_t mesh_rank(const ParallelDims& d, const MeshCoord& c) {
  return ((c.pp * d.dp_replicate + c.dp_replicate) * d.dp_shard + c.dp_shard) *
             d.tp +
         c.tp;
}

std::vector<int64_t> mesh_group(
    const ParallelDims& d, int64_t rank, MeshDim dim) {
  const MeshCoord me = mesh_coord(d, rank);
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < d.world_size; ++r) {
    const MeshCoord c = mesh_coord(d, r);
    const bool same_pp = c.pp == me.pp;
    const bool same_rep = c.dp_replicate == me.dp_replicate;
    const bool same_shard = c.dp_shard == me.dp_shard;
    const bool same_tp = c.tp == me.tp;
    bool member = false;
    switch (dim) {
      case MeshDim::kPp:
        member = same_rep && same_shard && same_tp;
        break;
      case MeshDim::kDp:
        member = same_pp && same_tp;
        break;
      case MeshDim::kDpReplicate:
        member = same_pp && same_shard && same_tp;
        break;
      case MeshDim::kDpShard:
        member = same_pp && same_rep && same_tp;
        break;
      case MeshDim::kTp:
        member = same_pp && same_rep && same_shard;
        break;
    }
    if (member) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

ParallelMesh::ParallelMesh(
    const ParallelDims& dims,
    int64_t rank,
    const std::shared_ptr<Runtime>& runtime)
    : dims_(dims), rank_(rank), coord_(mesh_coord(dims, rank)) {
  if (dims.world_size > 1 && !runtime) {
    throw std::invalid_argument(
        "[ParallelMesh] a world of " + std::to_string(dims.world_size) +
        " ranks needs a distributed runtime");
  }
  world_ = runtime ? runtime->world() : ProcessGroup::single("world", rank);
  // Same order on every rank: pp groups, then dp groups.
  pp_ = make_group(dims, rank, MeshDim::kPp, "pp", runtime, world_);
  dp_ = make_group(dims, rank, MeshDim::kDp, "dp", runtime, world_);
}

std::string ParallelMesh::to_string() const {
  return "rank " + std::to_string(rank_) + ": pp " + std::to_string(coord_.pp) +
         "/" + std::to_string(dims_.pp) + ", dp " +
         std::to_string(coord_.dp(dims_)) + "/" + std::to_string(dims_.dp()) +
         " (groups pp " + ranks_text(pp_->global_ranks()) + ", dp " +
         ranks_text(dp_->global_ranks()) + ")";
}

}  // namespace baton::dist
