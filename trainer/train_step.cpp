#include "trainer/train_step.h"

#include <torch/torch.h>

#include <stdexcept>

namespace baton {

at::Tensor cross_entropy_sum(
    const at::Tensor& logits, const at::Tensor& labels) {
  return torch::nn::functional::cross_entropy(
      logits.flatten(0, 1),  // (B * T, vocab)
      labels.flatten(),      // (B * T)
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

StepOutput LocalTrainStep::run(
    ModelParts& parts, const std::vector<Batch>& batches) {
  if (parts.size() != 1) {
    throw std::invalid_argument(
        "[LocalTrainStep] needs exactly one model part, got " +
        std::to_string(parts.size()));
  }
  if (batches.empty()) {
    throw std::invalid_argument("[LocalTrainStep] needs at least one batch");
  }
  auto& model = parts[0];
  const auto device = model.parameters().at(0).device();
  int64_t tokens = 0;
  for (const auto& batch : batches) {
    tokens += batch.labels.numel();
  }
  double loss_sum = 0.0;
  for (const auto& batch : batches) {
    const auto logits = model.forward(batch.inputs.to(device));  // (B, T, V)
    const auto loss = loss_(logits, batch.labels.to(device));
    // Scaled by the step's token count so accumulated gradients are those of
    // the mean loss over the whole step.
    (loss / static_cast<double>(tokens)).backward();
    loss_sum += loss.item<double>();
  }
  return {loss_sum / static_cast<double>(tokens), tokens};
}

}  // namespace baton
