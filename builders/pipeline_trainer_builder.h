#pragma once

#include <memory>
#include <vector>

#include "builders/trainer_builder.h"
#include "parallel/pipeline/action.h"

namespace baton {

/// The compute-only schedule of `config` for a pp degree of `pp`: the
/// generated one, or the one read from pipeline_parallel_schedule_csv
/// (checked against pp and the microbatches). A ConfigError names the key
/// (a microbatch size that does not divide the local batch, a CSV for
/// another layout). The pipeline builder and the dry run both use it.
pipeline::Schedule pipeline_schedule(const JobConfig& config, int64_t pp);
/// The chunk each of `schedule`'s stages holds of a model of `n_layers`
/// layers (an even split, pipeline_parallel_layers_per_stage, or the FQN
/// lists), checked against the schedule and activation_checkpoint.stages.
std::vector<ChunkSpec> pipeline_stages(
    const JobConfig& config,
    const pipeline::Schedule& schedule,
    int64_t n_layers);

/// Pipeline parallelism with any number of model chunks per rank. Builds
/// the schedule, splits the model into its stages, keeps the stages the
/// schedule places on this rank (loop or V) as its model parts, builds a
/// loader only where stage 0 lives, and trains with the schedule executor.
/// Everything else is the base's: one optimizer and scheduler per part, and
/// the same applier chain on every part, so data parallel (and any other
/// applier) composes with pipelining without a subclass of its own.
class PipelineTrainerBuilder : public TrainerBuilder {
 public:
  explicit PipelineTrainerBuilder(const JobConfig& config);
  ~PipelineTrainerBuilder() override;

 protected:
  /// The base's, then the schedule (generated, or read from
  /// pipeline_parallel_schedule_csv) for this run's pp degree and
  /// microbatches.
  void init_runtime() override;
  /// Splits the model into the schedule's stages and keeps this rank's, in
  /// increasing stage order.
  ModelParts build_model(const ModelArgs& args) override;
  /// The base loader on the rank holding stage 0; null everywhere else
  /// (those ranks never open the dataset).
  std::unique_ptr<DataLoader> build_dataloader(
      std::shared_ptr<const Tokenizer> tokenizer) override;
  /// The PipelinedTrainStep over this rank's parts.
  std::unique_ptr<TrainStep> build_train_step(
      const ModelParts& parts, LossFn loss) override;
  /// Yes: the parts are stages.
  bool pipelined() const override {
    return true;
  }

 private:
  /// The compute-only schedule (set by init_runtime).
  pipeline::Schedule schedule_;
};

}  // namespace baton
