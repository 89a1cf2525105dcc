#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/pipeline/executor.h"
#include "trainer/train_step.h"

namespace baton {

/// A TrainStep that runs a pipeline schedule: one executor run per
/// gradient-accumulation micro-step, with the loss of each microbatch scaled
/// by the global step's token count so the gradients equal the
/// non-pipelined ones. Only the rank holding stage 0 gets batches. The loss
/// is summed over the pipeline group (only the last stage has it) and
/// `dp_group`, the ranks whose tokens make the global batch (the mesh's
/// loss group: data parallel's, and context parallel's, whose ranks each
/// hold part of every sequence), so every rank returns the global loss.
/// `tokens_per_micro_step`: this rank's. On the last
/// micro-step each REDUCE_GRAD of the schedule synchronises that stage's
/// part through its grad_sync(), and a part the schedule has no REDUCE_GRAD
/// for (a custom CSV schedule's) is synchronised after it.
class PipelinedTrainStep final : public TrainStep {
 public:
  PipelinedTrainStep(
      std::unique_ptr<pipeline::PipelineExecutor> executor,
      std::shared_ptr<dist::ProcessGroup> pp_group,
      std::shared_ptr<dist::ProcessGroup> dp_group,
      int64_t accumulation_steps,
      int64_t tokens_per_micro_step,
      std::string trace_path = "");
  ~PipelinedTrainStep() override;

  StepOutput run(ModelParts& parts, const std::vector<Batch>& batches) override;
  /// Each batch through the schedule's forwards alone
  /// (PipelineExecutor::evaluate); the last stage's loss summed over the
  /// pipeline and data-parallel groups. Every pipeline rank runs one
  /// evaluate per batch of the first stage's (their count is broadcast).
  EvalOutput evaluate(
      ModelParts& parts, const std::vector<Batch>& batches) override;

 private:
  /// Throws std::invalid_argument unless `parts` are the executor's stages.
  void check_parts(const ModelParts& parts) const;

  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  std::shared_ptr<dist::ProcessGroup> pp_group_;
  std::shared_ptr<dist::ProcessGroup> dp_group_;
  int64_t accumulation_steps_;
  int64_t tokens_per_micro_step_;
  std::vector<pipeline::ExecutedAction> last_actions_;
  /// Prefix of the Chrome traces; empty: none.
  std::string trace_path_;
};

}  // namespace baton
