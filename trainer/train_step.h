#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "data/dataloader.h"
#include "models/loss.h"
#include "parallel/model_parts.h"

namespace baton {

namespace dist {
class ProcessGroup;
}

/// What one step's forward and backward produced.
struct StepOutput {
  /// Mean token loss over the whole global step (every data-parallel rank);
  /// NaN on ranks that do not see it.
  double loss = 0.0;
  /// Tokens the global step trained on.
  int64_t tokens = 0;
  /// Pipelined steps: this rank's idle fraction of the step (waiting for
  /// its peers); negative when the step is not pipelined.
  double bubble = -1.0;
};

/// What a validation pass computed.
struct EvalOutput {
  /// Mean token loss over every data-parallel rank's batches, on every
  /// rank.
  double loss = 0.0;
  /// Tokens it was computed on (all data-parallel ranks').
  int64_t tokens = 0;
};

/// Forward and backward of one optimizer step, accumulating gradients into
/// the parts and synchronising them through each part's grad_sync(). The
/// trainer loop calls it between zero_grad and the optimizer without
/// knowing whether it is local or pipelined.
class TrainStep {
 public:
  virtual ~TrainStep() = default;
  /// Runs the step over `batches` (one per gradient-accumulation micro-step;
  /// empty on ranks that load no data).
  virtual StepOutput run(
      ModelParts& parts, const std::vector<Batch>& batches) = 0;
  /// The loss of `batches` (each a micro-step's; empty on ranks that load
  /// no data), forward only, without gradients; the parts are left as a
  /// step starts (GradientSync::after_eval). Every rank takes part.
  virtual EvalOutput evaluate(
      ModelParts& parts, const std::vector<Batch>& batches) = 0;
};

/// The whole model in one part: forward, loss, backward per micro-step.
/// Token counts and losses are summed over `batch_group` (the ranks that
/// together train on one global batch; null: this rank alone), and each
/// rank scales its loss by the global token count; the part's gradient
/// synchroniser runs during the last micro-step's backward.
class LocalTrainStep final : public TrainStep {
 public:
  explicit LocalTrainStep(
      LossFn loss, std::shared_ptr<dist::ProcessGroup> batch_group = nullptr)
      : loss_(std::move(loss)), batch_group_(std::move(batch_group)) {}
  StepOutput run(ModelParts& parts, const std::vector<Batch>& batches) override;
  EvalOutput evaluate(
      ModelParts& parts, const std::vector<Batch>& batches) override;

 private:
  LossFn loss_;
  std::shared_ptr<dist::ProcessGroup> batch_group_;
};

/// The sum of `value` over `group` (itself when `group` is null).
double sum_over(const std::shared_ptr<dist::ProcessGroup>& group, double value);

}  // namespace baton
