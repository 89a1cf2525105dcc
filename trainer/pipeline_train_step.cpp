#include "trainer/pipeline_train_step.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "parallel/dist/process_group.h"
#include "parallel/pipeline/trace.h"
#include "trainer/fault_injection.h"

namespace baton {

PipelinedTrainStep::PipelinedTrainStep(
    std::unique_ptr<pipeline::PipelineExecutor> executor,
    std::shared_ptr<dist::ProcessGroup> pp_group,
    std::shared_ptr<dist::ProcessGroup> dp_group,
    int64_t accumulation_steps,
    int64_t tokens_per_micro_step,
    std::string trace_path)
    : executor_(std::move(executor)),
      pp_group_(std::move(pp_group)),
      dp_group_(std::move(dp_group)),
      accumulation_steps_(accumulation_steps),
      tokens_per_micro_step_(tokens_per_micro_step),
      trace_path_(std::move(trace_path)) {}

PipelinedTrainStep::~PipelinedTrainStep() = default;

void PipelinedTrainStep::check_parts(const ModelParts& parts) const {
  const auto& stage_to_rank = executor_->schedule().stage_to_rank;
  std::vector<int64_t> want;
  for (int64_t s = 0; s < static_cast<int64_t>(stage_to_rank.size()); ++s) {
    if (stage_to_rank[s] == executor_->pp_rank()) {
      want.push_back(s);
    }
  }
  std::vector<int64_t> have;
  parts.for_each([&](ModelPart& part) { have.push_back(part.stage()); });
  if (have != want) {
    throw std::invalid_argument(
        "[PipelinedTrainStep] parts: stages " + c10::str(have) +
        "; allowed: the stages the schedule gives pipeline rank " +
        std::to_string(executor_->pp_rank()) + ", " + c10::str(want));
  }
}

EvalOutput PipelinedTrainStep::evaluate(
    ModelParts& parts, const std::vector<Batch>& batches) {
  check_parts(parts);
  // Only the first stage's ranks load data: they say how many batches.
  const int64_t first = executor_->schedule().stage_to_rank.at(0);
  at::Tensor count =
      at::full({1}, static_cast<int64_t>(batches.size()), at::kLong);
  pp_group_->broadcast(count, first);
  const int64_t n = count.item<int64_t>();
  const bool has_data = first == executor_->pp_rank();
  double loss_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor inputs, labels, documents;
    if (has_data) {
      inputs = batches[i].inputs;
      labels = batches[i].labels;
      documents = batches[i].documents;
    }
    loss_sum += executor_->evaluate(inputs, labels, documents).loss_sum;
  }
  parts.for_each([](ModelPart& part) { part.grad_sync().after_eval(); });
  const int64_t tokens = tokens_per_micro_step_ * n * dp_group_->size();
  loss_sum = sum_over(dp_group_, sum_over(pp_group_, loss_sum));
  return {tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0, tokens};
}

StepOutput PipelinedTrainStep::run(
    ModelParts& parts, const std::vector<Batch>& batches) {
  check_parts(parts);
  const bool has_data =
      executor_->schedule().stage_to_rank.at(0) == executor_->pp_rank();
  if (has_data && static_cast<int64_t>(batches.size()) != accumulation_steps_) {
    throw std::invalid_argument(
        "[PipelinedTrainStep] the first stage needs one batch per "
        "accumulation step (" +
        std::to_string(accumulation_steps_) + "), got " +
        std::to_string(batches.size()));
  }
  // Every micro-step has the same token count on every data-parallel rank.
  const int64_t tokens =
      tokens_per_micro_step_ * accumulation_steps_ * dp_group_->size();
  double loss_sum = 0.0;
  std::vector<int64_t> reduced;
  double wall = 0.0;
  double compute = 0.0;
  last_actions_.clear();
  for (int64_t i = 0; i < accumulation_steps_; ++i) {
    const bool last = i + 1 == accumulation_steps_;
    at::Tensor inputs, labels, documents;
    if (has_data) {
      inputs = batches[i].inputs;
      labels = batches[i].labels;
      documents = batches[i].documents;
    }
    // Gradients are synchronised once, when the last micro-step's schedule
    // says a stage's are complete.
    std::function<void(int64_t)> reduce_grad;
    if (last) {
      const int64_t global_rank = pp_group_->global_ranks()[pp_group_->rank()];
      reduce_grad = [&parts, &reduced, global_rank](int64_t stage) {
        FaultInjection::get().in_pipeline_action(global_rank);
        parts.at_stage(stage).grad_sync().reduce_now();
        reduced.push_back(stage);
      };
    }
    auto run = executor_->run(
        inputs,
        labels,
        documents,
        1.0 / static_cast<double>(tokens),
        reduce_grad);
    loss_sum += run.loss_sum;
    wall += run.wall_s;
    compute += run.compute_s;
    last_actions_.insert(
        last_actions_.end(), run.actions.begin(), run.actions.end());
  }
  // A custom schedule (a lowered CSV) may have no REDUCE_GRAD for a stage:
  // its gradients are synchronised after the last micro-step, so that no
  // replica or shard is left out.
  parts.for_each([&](ModelPart& part) {
    if (std::find(reduced.begin(), reduced.end(), part.stage()) ==
        reduced.end()) {
      part.grad_sync().reduce_now();
    }
  });
  // Weights two stages hold (a tied embedding), once every stage's are.
  parts.run_gradient_hooks();
  loss_sum = sum_over(dp_group_, sum_over(pp_group_, loss_sum));
  StepOutput out;
  out.loss = loss_sum / static_cast<double>(tokens);
  out.tokens = tokens;
  out.bubble = wall > 0.0 ? std::max(0.0, 1.0 - compute / wall) : 0.0;
  if (!trace_path_.empty()) {
    pipeline::write_pipeline_traces(
        trace_path_,
        executor_->schedule(),
        executor_->pp_rank(),
        last_actions_);
  }
  return out;
}

}  // namespace baton
