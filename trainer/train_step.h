#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "data/dataloader.h"
#include "trainer/model_parts.h"

namespace baton {

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
  /// Mean token loss over the whole step; NaN on ranks that do not see it.
  double loss = 0.0;
  /// Tokens the step trained on.
  int64_t tokens = 0;
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

/// The whole model in one part: forward, loss, backward per micro-step.
class LocalTrainStep final : public TrainStep {
 public:
  explicit LocalTrainStep(LossFn loss) : loss_(std::move(loss)) {}
  StepOutput run(ModelParts& parts, const std::vector<Batch>& batches) override;

 private:
  LossFn loss_;
};

}  // namespace baton
