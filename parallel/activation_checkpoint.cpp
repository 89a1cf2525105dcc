#include "parallel/activation_checkpoint.h"

#include <algorithm>
#include <memory>

#include "config/job_config.h"
#include "models/model_spec.h"
#include "models/recompute.h"
#include "parallel/model_parts.h"

namespace baton {

RecomputePlan RecomputePlan::from(const ActivationCheckpointConfig& config) {
  RecomputePlan plan;
  if (config.mode == "full") {
    plan.kind = Kind::kFull;
  } else if (config.mode == "selective") {
    plan.kind = config.selective == "op" ? Kind::kOp : Kind::kLayer;
    plan.every = config.selective_every;
  }
  plan.stages = config.stages;
  return plan;
}

bool RecomputePlan::checkpoints_stage(int64_t stage) const {
  return stages.empty() ||
         std::find(stages.begin(), stages.end(), stage) != stages.end();
}

bool RecomputePlan::checkpoints(int64_t layer) const {
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kLayer:
      return (layer + 1) % every == 0;
    default:
      return true;
  }
}

std::string RecomputePlan::describe() const {
  if (kind == Kind::kNone || stages.empty()) {
    return describe_blocks();
  }
  std::string list;
  for (const int64_t s : stages) {
    list += (list.empty() ? "" : ", ") + std::to_string(s);
  }
  return describe_blocks() +
         (stages.size() == 1 ? " on stage " : " on stages ") + list;
}

std::string RecomputePlan::describe_blocks() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kFull:
      return "full (every block recomputed)";
    case Kind::kLayer:
      return every == 1 ? "selective (every block recomputed)"
                        : "selective (every " + std::to_string(every) +
                              (every == 2   ? "nd"
                               : every == 3 ? "rd"
                                            : "th") +
                              " block recomputed)";
    case Kind::kOp:
      return "selective (op: matmul and attention outputs kept, the rest "
             "recomputed)";
  }
  return "none";
}

namespace {

class CheckpointUnit final : public UnitWrapper {
 public:
  explicit CheckpointUnit(CheckpointPolicy policy) : policy_(policy) {}

  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    return checkpoint(run, input, policy_);
  }

 private:
  CheckpointPolicy policy_;
};

/// The global index of unit "layers.<i>", or -1 for another unit.
int64_t layer_index(const std::string& unit) {
  const std::string prefix = "layers.";
  if (unit.compare(0, prefix.size(), prefix) != 0) {
    return -1;
  }
  return std::stoll(unit.substr(prefix.size()));
}

}  // namespace

void ActivationCheckpointApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  const auto plan = RecomputePlan::from(context.config.activation_checkpoint);
  if (!plan.checkpoints_stage(part.stage())) {
    return;
  }
  const auto policy = plan.kind == RecomputePlan::Kind::kOp
                          ? CheckpointPolicy::kKeepExpensiveOps
                          : CheckpointPolicy::kFull;
  auto& chunk = part.module();
  for (const auto& unit : chunk.unit_names()) {
    const int64_t layer = layer_index(unit);
    if (layer >= 0 && plan.checkpoints(layer)) {
      chunk.wrap_unit(unit, std::make_shared<CheckpointUnit>(policy));
    }
  }
}

}  // namespace baton
