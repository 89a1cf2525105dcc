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
/// is summed over the pipeline group (only the last stage has it) and the
/// data-parallel group, so every rank returns the global loss.
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

 private:
  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  std::shared_ptr<dist::ProcessGroup> pp_group_;
  std::shared_ptr<dist::ProcessGroup> dp_group_;
  int64_t accumulation_steps_;
  int64_t tokens_per_micro_step_;
  std::vector<pipeline::ExecutedAction> last_actions_;
  /// Prefix of the Chrome traces; empty: none.
  std::string trace_path_;
};

/// After each step, when tracing: this rank's executed actions as a Chrome
/// trace in `<prefix>.rank<R>.json` (real times), and on pipeline rank 0
/// `<prefix>.simulated.json`, the simulator's timeline of the same schedule
/// with the F, B, I and W costs measured in the step.
void write_pipeline_traces(
    const std::string& prefix,
    const pipeline::Schedule& lowered,
    int64_t pp_rank,
    const std::vector<pipeline::ExecutedAction>& actions);

}  // namespace baton
