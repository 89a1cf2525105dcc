#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "data/dataloader.h"
#include "trainer/model_parts.h"

namespace baton {

namespace dist {
class ProcessGroup;
}
class GradientReducer;

/// Sum of the token cross-entropies of `logits` (B, T, vocab) against
/// `labels` (B, T). The step divides by its total token count, so gradients
/// do not depend on how the step is cut into micro-steps or microbatches.
using LossFn = std::function<at::Tensor(
    const at::Tensor& logits, const at::Tensor& labels)>;

/// Cross-entropy summed over tokens: the default LossFn.
at::Tensor cross_entropy_sum(
    const at::Tensor& logits, const at::Tensor& labels);

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

/// What a train step shares with other ranks; empty for a single process.
struct StepCommunication {
  /// The ranks that together train on one global batch (the data-parallel
  /// group): token counts and losses are summed over it, and each rank
  /// scales its loss by the global token count. Null: this rank alone.
  std::shared_ptr<dist::ProcessGroup> batch_group;
  /// One per model part that replicates its gradients (data parallel); they
  /// sum the gradients over `batch_group` during the last backward.
  std::vector<std::shared_ptr<GradientReducer>> reducers;
};

/// Forward and backward of one optimizer step, accumulating gradients into
/// the parts. The trainer loop calls it between zero_grad and the optimizer
/// without knowing whether it is local or pipelined.
class TrainStep {
 public:
  virtual ~TrainStep() = default;
  /// Runs the step over `batches` (one per gradient-accumulation micro-step;
  /// empty on ranks that load no data).
  virtual StepOutput run(
      ModelParts& parts, const std::vector<Batch>& batches) = 0;
};

/// The whole model in one part: forward, loss, backward per micro-step;
/// with data parallelism, gradients are summed across the batch group
/// during the last micro-step's backward.
class LocalTrainStep final : public TrainStep {
 public:
  explicit LocalTrainStep(LossFn loss, StepCommunication comm = {})
      : loss_(std::move(loss)), comm_(std::move(comm)) {}
  StepOutput run(ModelParts& parts, const std::vector<Batch>& batches) override;

 private:
  LossFn loss_;
  StepCommunication comm_;
};

/// The sum of `value` over `group` (itself when `group` is null).
double sum_over(const std::shared_ptr<dist::ProcessGroup>& group, double value);

}  // namespace baton
