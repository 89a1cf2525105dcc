#include "config/parallel_dims.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "common/error.h"
#include "common/text.h"
#include "config/job_config.h"

namespace baton {

namespace {

std::mutex& axes_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<MeshAxisSpec>& axes() {
  static std::vector<MeshAxisSpec> declared;
  return declared;
}

std::vector<DerivedAxisSpec>& derived_specs() {
  static std::vector<DerivedAxisSpec> declared;
  return declared;
}

bool same_spec(const MeshAxisSpec& a, const MeshAxisSpec& b) {
  return a.name == b.name && a.order == b.order &&
         a.degree_key == b.degree_key && a.joins == b.joins &&
         a.splits_model == b.splits_model;
}

}  // namespace

void declare_mesh_axis(MeshAxisSpec spec) {
  std::lock_guard lock(axes_mutex());
  auto& declared = axes();
  for (const auto& axis : declared) {
    if (same_spec(axis, spec)) {
      return;
    }
    if (axis.name == spec.name || axis.order == spec.order) {
      throw std::logic_error(
          "[mesh] declare_mesh_axis '" + spec.name + "' (order " +
          std::to_string(spec.order) + "): axis '" + axis.name +
          "' is declared with " +
          (axis.name == spec.name ? "that name" : "that order") +
          " already, otherwise");
    }
  }
  const auto at = std::find_if(
      declared.begin(), declared.end(), [&](const MeshAxisSpec& a) {
        return a.order > spec.order;
      });
  declared.insert(at, std::move(spec));
}

std::vector<MeshAxisSpec> declared_mesh_axes() {
  std::lock_guard lock(axes_mutex());
  return axes();
}

void declare_derived_axis(DerivedAxisSpec spec) {
  std::lock_guard lock(axes_mutex());
  for (const auto& d : derived_specs()) {
    if (d.name == spec.name) {
      if (d.sources == spec.sources && d.degree_key == spec.degree_key &&
          d.rest == spec.rest) {
        return;
      }
      throw std::logic_error(
          "[mesh] declare_derived_axis '" + spec.name +
          "': declared already, otherwise");
    }
  }
  derived_specs().push_back(std::move(spec));
}

std::vector<DerivedAxisSpec> declared_derived_axes() {
  std::lock_guard lock(axes_mutex());
  return derived_specs();
}

std::optional<ConfigProblem> degrees_problem(
    const std::vector<std::pair<std::string, int64_t>>& degrees) {
  const std::string* inferred = nullptr;
  for (const auto& [key, degree] : degrees) {
    if (degree == -1) {
      if (inferred != nullptr) {
        return ConfigProblem{
            key,
            key + ": -1 conflicts with " + *inferred +
                " -1; allowed: -1 in at most one parallelism degree"};
      }
      inferred = &key;
    } else if (degree < 1) {
      return ConfigProblem{
          key,
          key + ": " + std::to_string(degree) +
              " is out of range; allowed: an integer >= 1, or -1 for the "
              "rest"};
    }
  }
  return std::nullopt;
}

namespace {

/// "; a layout that fits: ..." for a config whose degrees do not fit
/// `world_size`: the world its degrees make, or the keys that make the
/// whole world data parallel.
std::string fitting_layout(const JobConfig& config, int64_t world_size) {
  const std::string shard_key = "parallelism.data_parallel_shard_degree";
  std::vector<std::string> keys;
  int64_t product = 1;
  for (const auto& [key, degree] : config.mesh_degrees()) {
    if (degree > 1) {
      product *= degree;
      if (key != shard_key) {
        keys.push_back("--" + key + "=1");
      }
    }
  }
  keys.push_back("--" + shard_key + "=-1");
  std::string out = "; a layout that fits: ";
  if (product > 1) {
    out += "--nproc " + std::to_string(product);
    if (config.origin(shard_key).empty()) {
      // The unset shard degree takes what a larger world leaves.
      out += " or a multiple of it (the rest data parallel)";
    }
    out += ", or ";
  }
  return out + join(keys, " ") + " (data parallel over the " +
         std::to_string(world_size) + " ranks)";
}

}  // namespace

ParallelDims ParallelDims::from_config(
    const JobConfig& config,
    int64_t world_size,
    const std::string& world_source) {
  std::vector<std::pair<MeshAxisSpec, int64_t>> requested;
  std::vector<const char*> keys;
  const auto declared = declared_mesh_axes();
  for (const auto& spec : declared) {
    const auto degree = config.integer(spec.degree_key);
    if (!degree) {
      throw std::logic_error(
          "[mesh] axis '" + spec.name + "': its degree key '" +
          spec.degree_key + "' is not an integer key of the config");
    }
    requested.emplace_back(spec, *degree);
    keys.push_back(spec.degree_key.c_str());
  }
  for (const auto& [key, degree] : config.mesh_degrees()) {
    const bool read = std::any_of(
        declared.begin(), declared.end(), [&](const MeshAxisSpec& s) {
          return s.degree_key == key;
        });
    if (!read && degree != 1) {
      throw_config_error(
          config.origin(key),
          key + ": " + std::to_string(degree) +
              " needs its parallelism, which is not registered in this "
              "process; allowed: 1");
    }
  }
  // torchtitan's default: an unset data-parallel shard degree takes what
  // the other degrees leave of the world.
  const std::string shard_key = "parallelism.data_parallel_shard_degree";
  int64_t product = 1;
  bool any_rest = false;
  for (const auto& [spec, degree] : requested) {
    any_rest = any_rest || degree == -1;
    product *= degree;
  }
  std::string inferred;
  if (!any_rest && product != world_size && config.origin(shard_key).empty()) {
    for (auto& [spec, degree] : requested) {
      if (spec.degree_key == shard_key && degree == 1 &&
          world_size % product == 0) {
        degree = -1;
        inferred = shard_key +
                   " unset: " + std::to_string(world_size / product) +
                   ", what the other degrees leave of the world of " +
                   std::to_string(world_size);
      }
    }
  }
  ParallelDims dims;
  try {
    dims = resolve(std::move(requested), world_size);
    dims.inferred = inferred;
  } catch (const ConfigError& e) {
    // The degrees meet the world size only here: name where they were set.
    std::string where;
    for (const char* key : keys) {
      if (where.empty()) {
        where = config.origin(key);
      }
    }
    throw_config_error(
        where,
        std::string(e.what()) +
            (world_source.empty() ? "" : " (" + world_source + ")") +
            fitting_layout(config, world_size));
  }
  for (const auto& spec : declared_derived_axes()) {
    const auto degree = config.integer(spec.degree_key);
    if (!degree) {
      throw std::logic_error(
          "[mesh] derived axis '" + spec.name + "': its degree key '" +
          spec.degree_key + "' is not an integer key of the config");
    }
    try {
      dims.add_derived(spec, *degree);
    } catch (const ConfigError& e) {
      throw_config_error(config.origin(spec.degree_key), e.what());
    }
  }
  return dims;
}

ParallelDims ParallelDims::of(
    const std::map<std::string, int64_t>& degrees, int64_t world_size) {
  std::vector<std::pair<MeshAxisSpec, int64_t>> requested;
  size_t known = 0;
  std::vector<std::string> names;
  for (const auto& spec : declared_mesh_axes()) {
    const auto it = degrees.find(spec.name);
    known += it != degrees.end();
    requested.emplace_back(spec, it == degrees.end() ? 1 : it->second);
    names.push_back(spec.name);
  }
  const auto derived_axes = declared_derived_axes();
  for (const auto& spec : derived_axes) {
    known += degrees.count(spec.name);
    names.push_back(spec.name);
  }
  if (known != degrees.size()) {
    throw std::invalid_argument(
        "[ParallelDims] of: a degree for an axis that is not declared; "
        "allowed: " +
        join(names, ", "));
  }
  ParallelDims dims = resolve(std::move(requested), world_size);
  for (const auto& spec : derived_axes) {
    if (const auto it = degrees.find(spec.name); it != degrees.end()) {
      dims.add_derived(spec, it->second);
    }
  }
  return dims;
}

ParallelDims ParallelDims::resolve(
    std::vector<std::pair<MeshAxisSpec, int64_t>> requested,
    int64_t world_size) {
  if (world_size < 1) {
    throw ConfigError(
        "[ParallelDims] world size: " + std::to_string(world_size) +
        "; allowed: an integer >= 1");
  }
  std::stable_sort(
      requested.begin(), requested.end(), [](const auto& a, const auto& b) {
        return a.first.order < b.first.order;
      });
  std::vector<std::pair<std::string, int64_t>> by_key;
  for (const auto& [spec, degree] : requested) {
    by_key.emplace_back(spec.degree_key, degree);
  }
  if (const auto problem = degrees_problem(by_key)) {
    throw ConfigError(problem->message);
  }
  ParallelDims d;
  d.world_size = world_size;
  // Every mesh has these two, of one rank where no axis joins them.
  d.flattened["dp"];
  d.flattened["loss"];
  int64_t known = 1;
  std::optional<size_t> rest;
  for (const auto& [spec, degree] : requested) {
    if (degree == -1) {
      rest = d.axes.size();
    } else {
      known *= degree;
    }
    d.axes.push_back(MeshAxis{spec.name, degree, spec.splits_model});
    for (const auto& group : spec.joins) {
      d.flattened[group].push_back(spec.name);
    }
  }
  if (rest) {
    if (world_size % known != 0) {
      throw ConfigError(
          "parallelism: the other degrees multiply to " +
          std::to_string(known) + ", which does not divide the world size " +
          std::to_string(world_size) +
          "; allowed: degrees whose product divides the world size");
    }
    d.axes[*rest].degree = world_size / known;
  } else if (known != world_size) {
    throw ConfigError(
        "parallelism: " + d.to_string() + " multiply to " +
        std::to_string(known) + ", not the world size " +
        std::to_string(world_size) +
        "; allowed: degrees whose product is the world size (use -1 for one "
        "degree to take the rest)");
  }
  return d;
}

void ParallelDims::add_derived(DerivedAxis axis) {
  if (has(axis.name)) {
    throw std::invalid_argument(
        "[ParallelDims] derived axis '" + axis.name +
        "': the mesh has that name already");
  }
  int64_t product = 1;
  for (const auto& source : axis.sources) {
    const bool is_axis =
        std::any_of(axes.begin(), axes.end(), [&](const MeshAxis& a) {
          return a.name == source;
        });
    if (!is_axis) {
      throw std::invalid_argument(
          "[ParallelDims] derived axis '" + axis.name + "': source '" + source +
          "' is not an axis of the mesh");
    }
    product *= degree(source);
  }
  if (axis.degree < 1 || axis.stride < 1 ||
      product % (axis.degree * axis.stride) != 0) {
    throw std::invalid_argument(
        "[ParallelDims] derived axis '" + axis.name + "': degree " +
        std::to_string(axis.degree) +
        (axis.stride > 1 ? " x stride " + std::to_string(axis.stride) : "") +
        " does not divide " + join(axis.sources, " x ") + " = " +
        std::to_string(product));
  }
  derived.push_back(std::move(axis));
}

void ParallelDims::add_derived(const DerivedAxisSpec& spec, int64_t degree) {
  if (degree < 1) {
    throw ConfigError(
        spec.degree_key + ": " + std::to_string(degree) +
        " is out of range; allowed: an integer >= 1");
  }
  if (degree == 1) {
    return;
  }
  int64_t product = 1;
  for (const auto& source : spec.sources) {
    product *= this->degree(source);
  }
  if (product % degree != 0) {
    std::vector<std::string> sources;
    for (const auto& source : spec.sources) {
      sources.push_back(source + " " + std::to_string(this->degree(source)));
    }
    throw ConfigError(
        spec.degree_key + ": " + std::to_string(degree) + " does not divide " +
        join(sources, " x ") + " = " + std::to_string(product) + " (" +
        to_string() + "); allowed: a divisor of " + std::to_string(product) +
        ", the " + join(spec.sources, " x ") + " ranks it borrows");
  }
  add_derived(DerivedAxis{spec.name, spec.sources, degree, 1});
  if (!spec.rest.empty()) {
    add_derived(DerivedAxis{spec.rest, spec.sources, product / degree, degree});
  }
}

int64_t ParallelDims::degree(const std::string& name) const {
  for (const auto& axis : axes) {
    if (axis.name == name) {
      return axis.degree;
    }
  }
  if (const auto it = flattened.find(name); it != flattened.end()) {
    int64_t product = 1;
    for (const auto& axis : it->second) {
      product *= degree(axis);
    }
    return product;
  }
  for (const auto& axis : derived) {
    if (axis.name == name) {
      return axis.degree;
    }
  }
  return 1;
}

bool ParallelDims::has(const std::string& name) const {
  return flattened.count(name) > 0 ||
         std::any_of(
             axes.begin(),
             axes.end(),
             [&](const MeshAxis& a) { return a.name == name; }) ||
         std::any_of(derived.begin(), derived.end(), [&](const DerivedAxis& a) {
           return a.name == name;
         });
}

std::string ParallelDims::to_string() const {
  std::vector<std::string> items;
  for (const auto& axis : axes) {
    items.push_back(axis.name + "=" + std::to_string(axis.degree));
  }
  for (const auto& axis : derived) {
    items.push_back(
        axis.name + "=" + std::to_string(axis.degree) + " (of " +
        join(axis.sources, " x ") + ")");
  }
  return join(items, " ") + " (world " + std::to_string(world_size) + ")";
}

}  // namespace baton
