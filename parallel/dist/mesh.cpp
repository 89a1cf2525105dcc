#include "parallel/dist/mesh.h"

#include <map>
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

/// The order every rank creates its groups in: dp before its two factors,
/// so that the group they share when one factor is 1 is named "dp".
constexpr MeshDim kDims[] = {
    MeshDim::kPp,
    MeshDim::kDp,
    MeshDim::kDpReplicate,
    MeshDim::kDpShard,
    MeshDim::kTp};

}  // namespace

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::kPp:
      return "pp";
    case MeshDim::kDp:
      return "dp";
    case MeshDim::kDpReplicate:
      return "dp_replicate";
    case MeshDim::kDpShard:
      return "dp_shard";
    case MeshDim::kTp:
      return "tp";
  }
  return "?";
}

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
  groups_.resize(std::size(kDims));
  // Every rank creates its groups in the same order (kDims), each once: a
  // dimension with the members of an earlier one (or of the world) shares
  // its group.
  std::map<std::vector<int64_t>, std::shared_ptr<ProcessGroup>> by_members;
  for (const MeshDim dim : kDims) {
    const auto ranks = mesh_group(dims, rank, dim);
    auto& group = groups_[static_cast<size_t>(dim)];
    if (ranks.size() == 1) {
      group = ProcessGroup::single(mesh_dim_name(dim), rank);
    } else if (static_cast<int64_t>(ranks.size()) == dims.world_size) {
      group = world_;
    } else if (const auto it = by_members.find(ranks); it != by_members.end()) {
      group = it->second;
    } else {
      group = runtime->new_group(ranks, mesh_dim_name(dim) + ranks_text(ranks));
      by_members[ranks] = group;
    }
  }
}

const std::shared_ptr<ProcessGroup>& ParallelMesh::group(MeshDim dim) const {
  return groups_.at(static_cast<size_t>(dim));
}

std::string ParallelMesh::to_string() const {
  std::string text =
      "rank " + std::to_string(rank_) + ": pp " + std::to_string(coord_.pp) +
      "/" + std::to_string(dims_.pp) + ", dp " +
      std::to_string(coord_.dp(dims_)) + "/" + std::to_string(dims_.dp());
  std::string groups = "groups pp " + ranks_text(pp()->global_ranks()) +
                       ", dp " + ranks_text(dp()->global_ranks());
  const std::pair<MeshDim, int64_t> more[] = {
      {MeshDim::kDpShard, dims_.dp_shard}, {MeshDim::kTp, dims_.tp}};
  for (const auto& [dim, degree] : more) {
    if (degree > 1) {
      const auto& g = group(dim);
      text += std::string(", ") + mesh_dim_name(dim) + " " +
              std::to_string(g->rank()) + "/" + std::to_string(degree);
      groups += std::string(", ") + mesh_dim_name(dim) + " " +
                ranks_text(g->global_ranks());
    }
  }
  return text + " (" + groups + ")";
}

}  // namespace baton::dist
