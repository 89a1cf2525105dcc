#include "parallel/dist/mesh.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

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

/// Every name of the mesh, in the order every rank creates their groups:
/// the flattened groups first (so that a group an axis shares with one is
/// named for the group: "dp" rather than "dp_replicate"), then the axes,
/// then the derived axes.
std::vector<std::string> mesh_names(const ParallelDims& dims) {
  std::vector<std::string> names;
  for (const auto& [name, axes] : dims.flattened) {
    names.push_back(name);
  }
  for (const auto& axis : dims.axes) {
    names.push_back(axis.name);
  }
  for (const auto& axis : dims.derived) {
    names.push_back(axis.name);
  }
  return names;
}

[[noreturn]] void throw_unknown(
    const ParallelDims& dims, const std::string& name) {
  throw std::invalid_argument(
      "[mesh] '" + name + "' is not an axis or group of the mesh; allowed: " +
      join(mesh_names(dims), ", "));
}

/// Row-major index of `coord` over `axes` (in mesh order).
int64_t flat_index(
    const ParallelDims& dims,
    const MeshCoord& coord,
    const std::vector<std::string>& axes) {
  int64_t index = 0;
  for (const auto& axis : dims.axes) {
    if (std::find(axes.begin(), axes.end(), axis.name) != axes.end()) {
      index = index * axis.degree + coord.at(axis.name);
    }
  }
  return index;
}

const DerivedAxis* find_derived(
    const ParallelDims& dims, const std::string& name) {
  for (const auto& axis : dims.derived) {
    if (axis.name == name) {
      return &axis;
    }
  }
  return nullptr;
}

/// The axes the group `name` runs along.
std::vector<std::string> group_axes(
    const ParallelDims& dims, const std::string& name) {
  if (const auto it = dims.flattened.find(name); it != dims.flattened.end()) {
    return it->second;
  }
  if (const DerivedAxis* derived = find_derived(dims, name)) {
    return derived->sources;
  }
  for (const auto& axis : dims.axes) {
    if (axis.name == name) {
      return {name};
    }
  }
  throw_unknown(dims, name);
}

}  // namespace

int64_t MeshCoord::at(const std::string& axis) const {
  for (const auto& [name, value] : values_) {
    if (name == axis) {
      return value;
    }
  }
  return 0;
}

void MeshCoord::set(const std::string& axis, int64_t value) {
  for (auto& [name, v] : values_) {
    if (name == axis) {
      v = value;
      return;
    }
  }
  values_.emplace_back(axis, value);
}

MeshCoord mesh_coord(const ParallelDims& d, int64_t rank) {
  if (rank < 0 || rank >= d.world_size) {
    throw std::invalid_argument(
        "[mesh] rank " + std::to_string(rank) + " outside world " +
        std::to_string(d.world_size));
  }
  std::vector<int64_t> values(d.axes.size());
  for (size_t i = d.axes.size(); i-- > 0;) {
    values[i] = rank % d.axes[i].degree;
    rank /= d.axes[i].degree;
  }
  MeshCoord c;
  for (size_t i = 0; i < d.axes.size(); ++i) {
    c.set(d.axes[i].name, values[i]);
  }
  return c;
}

bool ParallelMesh::leads(const std::vector<std::string>& axes) const {
  for (const auto& axis : dims_.axes) {
    if (std::find(axes.begin(), axes.end(), axis.name) == axes.end() &&
        coord_.at(axis.name) != 0) {
      return false;
    }
  }
  return true;
}

int64_t mesh_rank(const ParallelDims& d, const MeshCoord& c) {
  int64_t rank = 0;
  for (const auto& axis : d.axes) {
    rank = rank * axis.degree + c.at(axis.name);
  }
  return rank;
}

int64_t mesh_index(
    const ParallelDims& d, const MeshCoord& c, const std::string& name) {
  const auto axes = group_axes(d, name);
  const int64_t flat = flat_index(d, c, axes);
  if (const DerivedAxis* derived = find_derived(d, name)) {
    return flat / derived->stride % derived->degree;
  }
  return flat;
}

std::vector<int64_t> mesh_group(
    const ParallelDims& d, int64_t rank, const std::string& name) {
  const auto axes = group_axes(d, name);
  const DerivedAxis* derived = find_derived(d, name);
  const MeshCoord me = mesh_coord(d, rank);
  // A derived axis's members share the sources' positions off it: the
  // inner ones (below its stride) and the outer ones.
  const auto outer = [&](const MeshCoord& c) {
    if (!derived) {
      return std::pair<int64_t, int64_t>{0, 0};
    }
    const int64_t flat = flat_index(d, c, axes);
    return std::pair<int64_t, int64_t>{
        flat % derived->stride, flat / (derived->stride * derived->degree)};
  };
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < d.world_size; ++r) {
    const MeshCoord c = mesh_coord(d, r);
    bool member = outer(c) == outer(me);
    for (const auto& axis : d.axes) {
      const bool along =
          std::find(axes.begin(), axes.end(), axis.name) != axes.end();
      member = member && (along || c.at(axis.name) == me.at(axis.name));
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
  // Every rank creates its groups in the same order (mesh_names), each
  // once: a name with the members of an earlier one (or of the world)
  // shares its group.
  for (const auto& name : mesh_names(dims)) {
    const auto ranks = mesh_group(dims, rank, name);
    const auto same =
        std::find_if(distinct_.begin(), distinct_.end(), [&](const auto& d) {
          return d.second == ranks;
        });
    if (same != distinct_.end()) {
      groups_[name] = groups_.at(same->first.front());
      same->first.push_back(name);
      continue;
    }
    auto& group = groups_[name];
    if (ranks.size() == 1) {
      group = ProcessGroup::single(name, rank);
    } else if (static_cast<int64_t>(ranks.size()) == dims.world_size) {
      group = world_;
    } else {
      group = runtime->new_group(ranks, name + ranks_text(ranks));
    }
    distinct_.emplace_back(std::vector<std::string>{name}, ranks);
  }
}

int64_t ParallelMesh::index(const std::string& name) const {
  return mesh_index(dims_, coord_, name);
}

const std::shared_ptr<ProcessGroup>& ParallelMesh::group(
    const std::string& name) const {
  const auto it = groups_.find(name);
  if (it == groups_.end()) {
    throw_unknown(dims_, name);
  }
  return it->second;
}

std::string ParallelMesh::to_string() const {
  std::vector<std::string> places;
  std::vector<std::string> members;
  for (const auto& [names, ranks] : distinct_) {
    if (ranks.size() < 2) {
      continue;
    }
    const std::string name = join(names, "=");
    places.push_back(
        name + " " + std::to_string(index(names.front())) + "/" +
        std::to_string(ranks.size()));
    members.push_back(name + " " + ranks_text(ranks));
  }
  if (places.empty()) {
    return "rank " + std::to_string(rank_) + ": every group is this rank";
  }
  return "rank " + std::to_string(rank_) + ": " + join(places, ", ") +
         " (groups " + join(members, ", ") + ")";
}

}  // namespace baton::dist
