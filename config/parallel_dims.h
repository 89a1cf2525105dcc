#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace baton {

struct JobConfig;

/// A mesh axis as the parallelism that owns it declares it
/// (declare_mesh_axis): the mesh is the declared axes in `order`, each
/// with the degree its config key sets.
struct MeshAxisSpec {
  /// "tp", "dp_shard": how groups and logs name it.
  std::string name;
  /// Its place in the rank order, lower outer: pp outermost, then the data
  /// axes, then the others, tp innermost (the built-ins use 0, 100, 200 and
  /// 1000). Two axes may not share a place.
  int order = 0;
  /// The integer config key of its degree ("parallelism.tensor_parallel_
  /// degree", or a key of the owner's registered section); its FieldSpec is
  /// marked mesh_degree().
  std::string degree_key;
  /// The flattened groups the axis is part of, each the axes that join it in
  /// mesh order: "dp" (the ranks that hold replicas or shards of the same
  /// weights and read different batches), "loss" (the ranks whose tokens
  /// together make the global batch: losses and token counts are summed
  /// over it), or a name of the owner's.
  std::vector<std::string> joins;
  /// Whether its ranks hold different parameters (pipeline stages) rather
  /// than copies or slices of the same: a rank's tensors are its own along
  /// it (the checkpoint's writers, the grad norm's sum over stages).
  bool splits_model = false;
};

/// Declares `spec` for every mesh built after it (ParallelDims::from_config
/// and ::of). Declaring the same spec again is a no-op; another spec under
/// a declared name or order is a programming error (std::logic_error).
void declare_mesh_axis(MeshAxisSpec spec);
/// The declared axes, outermost first.
std::vector<MeshAxisSpec> declared_mesh_axes();

/// One axis of a resolved mesh: its name and degree.
struct MeshAxis {
  std::string name;
  int64_t degree = 1;
  /// MeshAxisSpec::splits_model.
  bool splits_model = false;
};

/// An axis that re-slices others rather than multiplying the world: a
/// rank's position on it is (flat / stride) % degree, flat its row-major
/// position over the `sources` (as expert parallel borrows its ranks from
/// dp_shard x cp: stride 1, the innermost `degree` positions; the rest of
/// the sources, the ranks that hold the same experts, is the derived axis
/// of stride `degree`), so stride x degree must divide the sources'
/// product.
struct DerivedAxis {
  std::string name;
  std::vector<std::string> sources;
  int64_t degree = 1;
  int64_t stride = 1;
};

/// A derived axis as the parallelism that owns it declares it
/// (declare_derived_axis): `name` of the degree `degree_key` sets (an
/// integer key >= 1, not a mesh degree: it multiplies nothing), the
/// innermost positions of `sources`; and, where `rest` is named, the rest
/// of the sources as a derived axis of that name. Both are in a mesh whose
/// degree is above 1.
struct DerivedAxisSpec {
  std::string name;
  std::vector<std::string> sources;
  std::string degree_key;
  std::string rest;
};

/// Declares `spec` for every mesh from_config builds after it; the same
/// spec again is a no-op, another under a declared name a programming error
/// (std::logic_error).
void declare_derived_axis(DerivedAxisSpec spec);
std::vector<DerivedAxisSpec> declared_derived_axes();

/// Checks the degrees alone, given as (config key, degree): each is >= 1 or
/// -1, and at most one is -1 (it takes the rest of the world). The config
/// check (over every key marked mesh_degree) and ParallelDims::resolve both
/// ask it.
std::optional<ConfigProblem> degrees_problem(
    const std::vector<std::pair<std::string, int64_t>>& degrees);

/// The parallel layout: the mesh's named axes, outermost first, each with
/// its degree (their product is the world size), the flattened groups the
/// axes join, and derived axes. An axis that is not in the mesh has degree
/// 1.
struct ParallelDims {
  std::vector<MeshAxis> axes;
  /// Flattened name -> its axes, in mesh order.
  std::map<std::string, std::vector<std::string>> flattened;
  std::vector<DerivedAxis> derived;
  int64_t world_size = 1;
  /// How from_config chose a degree the config left unset ("" when it
  /// chose none), for the start-up log.
  std::string inferred;

  /// The declared axes with the degrees `config` sets, a -1 resolved, the
  /// product checked against `world_size`. Where no key is -1 and
  /// parallelism.data_parallel_shard_degree is not set, that degree takes
  /// the rest of the world (as torchtitan's default dp_shard -1), and
  /// `inferred` says so. Throws ConfigError naming the keys, the world size
  /// and a layout that would fit (and for a degree set above 1 by a key
  /// that no declared axis reads). `world_source` says where the world size
  /// came from, for the message ("world 4 from torchrun").
  static ParallelDims from_config(
      const JobConfig& config,
      int64_t world_size,
      const std::string& world_source = "");
  /// The declared axes with `degrees` by axis name (absent: 1; -1: the
  /// rest), and the declared derived axes named there with theirs; for
  /// tests, benchmarks and the planner's candidates.
  static ParallelDims of(
      const std::map<std::string, int64_t>& degrees, int64_t world_size);
  /// `axes` (each spec with its degree, -1 for at most one) in spec order:
  /// what from_config and of share.
  static ParallelDims resolve(
      std::vector<std::pair<MeshAxisSpec, int64_t>> axes, int64_t world_size);

  /// Adds `axis`; throws std::invalid_argument when a source is not an axis
  /// or its stride x degree does not divide the sources' product.
  void add_derived(DerivedAxis axis);
  /// Adds `spec`'s axis of `degree` and its rest (no-op for degree 1);
  /// throws ConfigError naming the degree key when it does not divide the
  /// sources' product.
  void add_derived(const DerivedAxisSpec& spec, int64_t degree);

  /// The degree of the axis, flattened group or derived axis `name`; 1 when
  /// the mesh has none of that name.
  int64_t degree(const std::string& name) const;
  /// Whether `name` is an axis, flattened group or derived axis of the mesh.
  bool has(const std::string& name) const;
  /// degree("dp"): the ranks that read different batches.
  int64_t dp() const {
    return degree("dp");
  }
  /// "pp=4 dp_replicate=2 dp_shard=1 tp=1 (world 8)", the axes in order.
  std::string to_string() const;
};

}  // namespace baton
