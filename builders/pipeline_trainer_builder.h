#pragma once

#include <memory>
#include <vector>

#include "builders/trainer_builder.h"
#include "parallel/pipeline/action.h"

namespace baton {

/// Pipeline parallelism with any number of model chunks per rank. Splits
/// the model into pp x pipeline_parallel_stages_per_rank stages, keeps the
/// stages the schedule places on this rank (loop or V) as its model parts,
/// builds a loader only where stage 0 lives, and trains with the schedule
/// executor. Optimizers and LR schedulers are the base ones: one per part.
class PipelineTrainerBuilder : public TrainerBuilder {
 public:
  explicit PipelineTrainerBuilder(const JobConfig& config);
  ~PipelineTrainerBuilder() override;

 protected:
  /// Splits, keeps this rank's stages (in increasing order) and calls the
  /// base parallelize on each.
  ModelParts build_model(const llama::ModelArgs& args) override;
  /// The base loader on the rank holding stage 0; null everywhere else
  /// (those ranks never open the dataset).
  std::unique_ptr<DataLoader> build_dataloader(
      std::shared_ptr<const Tokenizer> tokenizer) override;
  /// The PipelinedTrainStep over this rank's parts.
  std::unique_ptr<TrainStep> build_train_step(
      const ModelParts& parts, LossFn loss) override;

  /// The compute-only schedule (set by build_model).
  const pipeline::Schedule& schedule() const {
    return schedule_;
  }
  /// The stage ids of this rank's parts, in part order.
  const std::vector<int64_t>& stage_ids() const {
    return stage_ids_;
  }

 private:
  pipeline::Schedule schedule_;
  std::vector<int64_t> stage_ids_;
  int64_t dim_ = 0;
};

}  // namespace baton
