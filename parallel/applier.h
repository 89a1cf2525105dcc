#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/registry.h"

namespace baton {

struct JobConfig;
class ModelPart;
namespace dist {
class ParallelMesh;
}

/// The dtypes of mixed precision (training.mixed_precision_param and
/// _reduce, `auto` resolved; parallel/mixed_precision.h): the master
/// weights, their gradients and the optimizer state are float32 whatever
/// these say.
struct MixedPrecision {
  /// What forward and backward compute in: the mixed_precision applier
  /// casts the weights to it once per step, fully_shard gathers them in it.
  at::ScalarType param = at::kFloat;
  /// What data-parallel reductions move the gradients in.
  at::ScalarType reduce = at::kFloat;

  /// `param` as a cast to make, or none when the weights compute as kept.
  std::optional<at::ScalarType> param_cast() const {
    return param == at::kFloat ? std::nullopt : std::optional(param);
  }
  /// `reduce` as a cast to make, or none when gradients move as kept.
  std::optional<at::ScalarType> reduce_cast() const {
    return reduce == at::kFloat ? std::nullopt : std::optional(reduce);
  }
};

/// What every applier sees besides the part: the job, this rank's groups,
/// the device the parts train on, whether the parts are pipeline stages
/// (trained by the schedule executor, several microbatches per step), and
/// the mixed-precision dtypes the builder resolved.
struct ParallelContext {
  const JobConfig& config;
  const dist::ParallelMesh& mesh;
  c10::Device device;
  bool pipelined = false;
  MixedPrecision mixed_precision = {};
};

/// One parallelism (or other per-part transform) applied to one model part,
/// as each step of torchtitan's parallelize_llama is: it may move or wrap
/// the part's submodules, replace its parameters (keeping their FQNs),
/// attach a gradient synchroniser (ModelPart::grad_sync) and mark the
/// gradients it splits across ranks (ModelPart::mark_grad_split). Each
/// applier knows only its own dimension of the mesh. The builder runs an
/// ApplierChain on every part it holds, before the optimizers are built.
class Applier {
 public:
  virtual ~Applier() = default;
  /// Applies this step to `part`. Collective when the step communicates:
  /// every rank of the groups it uses applies it to its part of the same
  /// stage.
  virtual void apply(ModelPart& part, const ParallelContext& context) = 0;
};

/// Makes an applier; registered by name in applier_registry().
using ApplierCreator = std::function<std::unique_ptr<Applier>()>;

/// The applier registry (`parallelism.appliers` and the builders' chains).
Registry<ApplierCreator>& applier_registry();

/// Registers the built-in appliers: to_device, activation_checkpoint,
/// mixed_precision, check_replicas, and through
/// register_builtin_parallelisms each built-in parallelism's own (replicate,
/// fully_shard, tensor_parallel). Safe to call more than once.
void register_builtin_appliers();

/// The ordered steps applied to every model part, each under a name. A
/// builder's build_appliers() returns one; a subclass calls the base and
/// inserts, replaces or removes steps by name. Names are unique in a chain.
class ApplierChain {
 public:
  ApplierChain();
  ~ApplierChain();
  ApplierChain(ApplierChain&&) noexcept;
  ApplierChain& operator=(ApplierChain&&) noexcept;

  /// Appends the registered applier `name`. Throws ConfigError for an
  /// unknown name (listing the known ones; `where` prefixes the message).
  void append(const std::string& name, const std::string& where = "");
  /// Appends `applier` as the step `name`.
  void append(std::string name, std::unique_ptr<Applier> applier);
  /// Inserts `applier` as `name` just before / after the step `anchor`.
  void insert_before(
      const std::string& anchor,
      std::string name,
      std::unique_ptr<Applier> applier);
  void insert_after(
      const std::string& anchor,
      std::string name,
      std::unique_ptr<Applier> applier);
  /// Replaces the applier of the step `name` (keeping its place).
  void replace(const std::string& name, std::unique_ptr<Applier> applier);
  /// Removes the step `name`.
  void remove(const std::string& name);
  bool contains(const std::string& name) const;
  /// The step names, in order.
  std::vector<std::string> names() const;
  bool empty() const {
    return steps_.empty();
  }

  /// Runs every step on `part`, in order. An error names the step and the
  /// part's stage.
  void apply(ModelPart& part, const ParallelContext& context) const;

 private:
  using Step = std::pair<std::string, std::unique_ptr<Applier>>;
  /// The step `name`; throws std::logic_error listing the steps otherwise.
  std::vector<Step>::iterator find(const std::string& name);
  void insert(
      std::vector<Step>::iterator at,
      std::string name,
      std::unique_ptr<Applier> applier);

  std::vector<Step> steps_;
};

/// The steps the builders place themselves, from the config: to_device,
/// activation_checkpoint, mixed_precision and every registered
/// parallelism's steps, each with the hint of the error when
/// `parallelism.appliers` names one, which it may not (what to set
/// instead).
std::vector<std::pair<std::string, std::string>> builder_placed_appliers();

/// Built-in step: moves the part to the context's device and puts it in
/// training mode. First in every builder's chain.
class ToDeviceApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

/// Built-in step: checks that the part's parameters are equal on every rank
/// of the data-parallel group (initialisation must not depend on the rank),
/// naming the first that differs.
class CheckReplicasApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

}  // namespace baton
