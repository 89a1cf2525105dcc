#include "trainer/train_step.h"

#include <torch/torch.h>

#include <stdexcept>

#include "models/forward_state.h"
#include "parallel/dist/process_group.h"

namespace baton {

namespace {

/// The one part a local step runs; throws std::invalid_argument otherwise.
ModelPart& only_part(ModelParts& parts) {
  if (parts.size() != 1) {
    throw std::invalid_argument(
        "[LocalTrainStep] needs exactly one model part, got " +
        std::to_string(parts.size()));
  }
  return parts[0];
}

}  // namespace

StepOutput LocalTrainStep::run(
    ModelParts& parts, const std::vector<Batch>& batches) {
  auto& part = only_part(parts);
  if (batches.empty()) {
    throw std::invalid_argument("[LocalTrainStep] needs at least one batch");
  }
  auto& model = part.module();
  const auto device = model.parameters().at(0).device();
  int64_t local_tokens = 0;
  for (const auto& batch : batches) {
    local_tokens += batch.labels.numel();
  }
  const auto tokens = static_cast<int64_t>(
      sum_over(batch_group_, static_cast<double>(local_tokens)));
  double loss_sum = 0.0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const bool last = i + 1 == batches.size();
    part.grad_sync().prepare(/*sync=*/last);
    const auto& batch = batches[i];
    // A term a module adds to the objective itself (MoE's auxiliary loss)
    // takes the loss's scale.
    ForwardState scaled = forward_state();
    scaled.loss_scale = 1.0 / static_cast<double>(tokens);
    scaled.documents = batch.documents;
    const ForwardStateGuard scale(scaled);
    const auto logits = model.forward(batch.inputs.to(device));  // (B, T, V)
    const auto loss = loss_(logits, batch.labels.to(device));
    // Scaled by the global step's token count so accumulated (and, across
    // data-parallel ranks, summed) gradients are those of the mean loss
    // over the whole global step.
    (loss / static_cast<double>(tokens)).backward();
    loss_sum += loss.item<double>();
  }
  part.grad_sync().finish();
  parts.run_gradient_hooks();
  loss_sum = sum_over(batch_group_, loss_sum);
  return {loss_sum / static_cast<double>(tokens), tokens};
}

EvalOutput LocalTrainStep::evaluate(
    ModelParts& parts, const std::vector<Batch>& batches) {
  auto& part = only_part(parts);
  auto& model = part.module();
  const auto device = model.parameters().at(0).device();
  double loss_sum = 0.0;
  int64_t tokens = 0;
  {
    torch::NoGradGuard no_grad;
    ForwardState evaluating = forward_state();
    evaluating.evaluating = true;
    const ForwardStateGuard guard(evaluating);
    for (const auto& batch : batches) {
      ForwardState documents = forward_state();
      documents.documents = batch.documents;
      const ForwardStateGuard keep_apart(documents);
      const auto logits = model.forward(batch.inputs.to(device));
      loss_sum += loss_(logits, batch.labels.to(device)).item<double>();
      tokens += batch.labels.numel();
    }
  }
  part.grad_sync().after_eval();
  tokens =
      static_cast<int64_t>(sum_over(batch_group_, static_cast<double>(tokens)));
  loss_sum = sum_over(batch_group_, loss_sum);
  return {tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0, tokens};
}

double sum_over(
    const std::shared_ptr<dist::ProcessGroup>& group, double value) {
  if (!group || group->size() == 1) {
    return value;
  }
  auto t = torch::tensor({value}, torch::kFloat64);
  group->all_reduce(t, dist::ReduceOp::kSum);
  return t.item<double>();
}

}  // namespace baton
