#include "parallel/applier.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "common/text.h"
#include "config/job_config.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/mesh.h"
#include "parallel/mixed_precision.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"

namespace baton {

Registry<ApplierCreator>& applier_registry() {
  static Registry<ApplierCreator> registry("applier");
  return registry;
}

void register_builtin_appliers() {
  applier_registry().add_builtins_once([](Registry<ApplierCreator>& registry) {
    registry.add(
        "to_device",
        [] { return std::make_unique<ToDeviceApplier>(); },
        "moves the part to the device and puts it in training mode");
    registry.add(
        "activation_checkpoint",
        [] { return std::make_unique<ActivationCheckpointApplier>(); },
        "activation checkpointing of the transformer blocks "
        "(activation_checkpoint.mode): recompute in backward what was not "
        "kept");
    registry.add(
        "mixed_precision",
        [] { return std::make_unique<MixedPrecisionApplier>(); },
        "bf16 compute over float32 master weights: the weights cast once "
        "per step (training.mixed_precision_param)");
    registry.add(
        "check_replicas",
        [] { return std::make_unique<CheckReplicasApplier>(); },
        "checks that the data-parallel replicas start from equal weights");
  });
  // Each parallelism registers its own appliers.
  register_builtin_parallelisms();
}

ApplierChain::ApplierChain() = default;
ApplierChain::~ApplierChain() = default;
ApplierChain::ApplierChain(ApplierChain&&) noexcept = default;
ApplierChain& ApplierChain::operator=(ApplierChain&&) noexcept = default;

void ApplierChain::append(const std::string& name, const std::string& where) {
  if (contains(name)) {
    throw_config_error(
        where,
        "applier '" + name + "' is already in the chain (" +
            join(names(), " -> ") + "); allowed: each step once");
  }
  steps_.emplace_back(name, applier_registry().get(name, where)());
}

void ApplierChain::append(std::string name, std::unique_ptr<Applier> applier) {
  insert(steps_.end(), std::move(name), std::move(applier));
}

void ApplierChain::insert_before(
    const std::string& anchor,
    std::string name,
    std::unique_ptr<Applier> applier) {
  insert(find(anchor), std::move(name), std::move(applier));
}

void ApplierChain::insert_after(
    const std::string& anchor,
    std::string name,
    std::unique_ptr<Applier> applier) {
  insert(find(anchor) + 1, std::move(name), std::move(applier));
}

void ApplierChain::replace(
    const std::string& name, std::unique_ptr<Applier> applier) {
  if (!applier) {
    throw std::logic_error("[ApplierChain] replace '" + name + "': null");
  }
  find(name)->second = std::move(applier);
}

void ApplierChain::remove(const std::string& name) {
  steps_.erase(find(name));
}

bool ApplierChain::contains(const std::string& name) const {
  return std::any_of(steps_.begin(), steps_.end(), [&](const Step& s) {
    return s.first == name;
  });
}

std::vector<std::string> ApplierChain::names() const {
  std::vector<std::string> out;
  for (const auto& step : steps_) {
    out.push_back(step.first);
  }
  return out;
}

void ApplierChain::apply(
    ModelPart& part, const ParallelContext& context) const {
  for (const auto& [name, applier] : steps_) {
    try {
      applier->apply(part, context);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(
          "[parallelize] stage " + std::to_string(part.stage()) + ", step '" +
          name + "': " + e.what());
    }
  }
}

std::vector<ApplierChain::Step>::iterator ApplierChain::find(
    const std::string& name) {
  const auto it =
      std::find_if(steps_.begin(), steps_.end(), [&](const Step& s) {
        return s.first == name;
      });
  if (it == steps_.end()) {
    throw std::logic_error(
        "[ApplierChain] step: '" + name + "' is not in the chain; allowed: " +
        (steps_.empty() ? std::string("none (the chain is empty)")
                        : join(names(), ", ")));
  }
  return it;
}

void ApplierChain::insert(
    std::vector<Step>::iterator at,
    std::string name,
    std::unique_ptr<Applier> applier) {
  if (!applier) {
    throw std::logic_error("[ApplierChain] step '" + name + "': null applier");
  }
  if (contains(name)) {
    throw std::logic_error(
        "[ApplierChain] step: '" + name +
        "' is already in the chain; allowed: each name once");
  }
  steps_.emplace(at, std::move(name), std::move(applier));
}

std::vector<std::pair<std::string, std::string>> builder_placed_appliers() {
  std::vector<std::pair<std::string, std::string>> placed = {
      {"to_device", "leave it out: every chain starts with it"},
      {"activation_checkpoint", "set activation_checkpoint.mode instead"},
      {"mixed_precision", "set training.mixed_precision_param instead"}};
  // A parallelism's steps: set its degree instead (any of them, for a
  // step several place).
  std::vector<std::pair<std::string, std::vector<std::string>>> by_step;
  for (const auto& p : registered_parallelisms()) {
    const std::string what =
        p.axis ? p.axis->degree_key : "the parallelism " + p.name;
    for (const auto& step : p.steps) {
      auto it =
          std::find_if(by_step.begin(), by_step.end(), [&](const auto& entry) {
            return entry.first == step;
          });
      if (it == by_step.end()) {
        by_step.emplace_back(step, std::vector<std::string>{});
        it = by_step.end() - 1;
      }
      it->second.push_back(what);
    }
  }
  for (const auto& [step, keys] : by_step) {
    placed.emplace_back(step, "set " + join(keys, " or ") + " instead");
  }
  return placed;
}

void ToDeviceApplier::apply(ModelPart& part, const ParallelContext& context) {
  part.module().to(context.device);
  part.module().train();
}

void CheckReplicasApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : part.module().named_parameters()) {
    // Split across data ranks by an earlier applier, which checked them
    // whole (expert parallel's experts).
    if (part.shard_group(item.key()) != nullptr) {
      continue;
    }
    names.push_back(item.key());
    params.push_back(item.value());
  }
  check_replicas_equal(params, names, *context.mesh.dp());
}

}  // namespace baton
