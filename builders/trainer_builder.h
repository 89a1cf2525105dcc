#pragma once

#include <memory>

#include "models/llama/args.h"
#include "parallel/dist/launch_env.h"
#include "parallel/dist/parallel_dims.h"
#include "trainer/trainer.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

namespace dist {
class ParallelMesh;
class Runtime;
}  // namespace dist
class GradientReducer;

/// Builds a Trainer from a JobConfig. `build()` runs the hooks in a fixed
/// order and checks what each returns; a new parallel strategy subclasses
/// the builder, overrides the hooks it changes and calls the base ones for
/// the rest (PipelineTrainerBuilder overrides build_model, build_dataloader
/// and build_train_step).
class TrainerBuilder {
 public:
  explicit TrainerBuilder(const JobConfig& config);
  virtual ~TrainerBuilder();
  TrainerBuilder(const TrainerBuilder&) = delete;
  TrainerBuilder& operator=(const TrainerBuilder&) = delete;

  /// Runs every hook, in order: init_runtime, build_tokenizer, build_model
  /// (which calls parallelize per part), build_optimizers, build_lr_schedulers,
  /// build_dataloader, build_loss, build_train_step, build_checkpointer,
  /// build_metrics. Throws std::logic_error when a hook returns something
  /// unusable (no parts, one optimizer short, ...).
  std::unique_ptr<Trainer> build();

 protected:
  const JobConfig& config() const {
    return config_;
  }
  /// Set by init_runtime.
  const ParallelDims& parallel_dims() const {
    return dims_;
  }
  /// This process's place in the job; set by init_runtime.
  const dist::LaunchEnv& launch_env() const {
    return env_;
  }
  /// This rank's process groups; set by init_runtime.
  dist::ParallelMesh& mesh() const;
  /// The distributed runtime; null for a single process.
  const std::shared_ptr<dist::Runtime>& runtime() const {
    return runtime_;
  }

  /// Threads, seeds, determinism, the launch environment, the distributed
  /// runtime (store and process groups, when there are several ranks), the
  /// parallel layout and the device.
  virtual void init_runtime();
  /// The tokenizer of `model.tokenizer`.
  virtual std::shared_ptr<const Tokenizer> build_tokenizer();
  /// The whole model as one part, initialised and parallelized. `args` is
  /// the flavor with the tokenizer's vocabulary size.
  virtual ModelParts build_model(const llama::ModelArgs& args);
  /// Applies this builder's parallelism to one part; the base moves it to
  /// the device, puts it in training mode and, with data parallel
  /// replicas, checks that the replicas start equal and attaches a
  /// GradientReducer (see grad_reducers()).
  virtual void parallelize(ModelChunk& part);
  /// The optimizer of one part (`optimizer.name`).
  virtual std::unique_ptr<torch::optim::Optimizer> build_optimizer(
      ModelChunk& part);
  /// One optimizer per part, from build_optimizer.
  virtual std::unique_ptr<OptimizersContainer> build_optimizers(
      const ModelParts& parts);
  /// The LR scheduler of one optimizer.
  virtual std::unique_ptr<LRScheduler> build_lr_scheduler(
      torch::optim::Optimizer& optimizer);
  /// One scheduler per optimizer, from build_lr_scheduler.
  virtual std::unique_ptr<LRSchedulersContainer> build_lr_schedulers(
      const OptimizersContainer& optimizers);
  /// The data loader of this rank (null where it loads no data).
  virtual std::unique_ptr<DataLoader> build_dataloader(
      std::shared_ptr<const Tokenizer> tokenizer);
  /// The token loss; cross-entropy summed over tokens.
  virtual LossFn build_loss();
  /// Forward and backward of one step over `parts`; the base one is local,
  /// with the data-parallel group and reducers.
  virtual std::unique_ptr<TrainStep> build_train_step(
      const ModelParts& parts, LossFn loss);
  /// The checkpointer (a CheckpointManager over `parts`, one optimizer and
  /// scheduler per part, and this rank's loader, null where it loads none),
  /// or null when checkpoint.enable and checkpoint.model_only_export are
  /// both off.
  virtual std::unique_ptr<Checkpointer> build_checkpointer(
      const ModelParts& parts,
      const OptimizersContainer& optimizers,
      const LRSchedulersContainer& schedulers,
      DataLoader* dataloader);
  /// The metrics logger (writes on global rank 0 only).
  virtual std::unique_ptr<MetricsLogger> build_metrics();

  /// Device the parts train on.
  at::Device device() const {
    return device_;
  }
  /// The reducers parallelize attached, one per part, in part order.
  const std::vector<std::shared_ptr<GradientReducer>>& grad_reducers() const {
    return reducers_;
  }

 private:
  JobConfig config_;
  /// The model's shape (build() sets it before build_model).
  llama::ModelArgs model_args_;
  ParallelDims dims_;
  dist::LaunchEnv env_;
  std::shared_ptr<dist::Runtime> runtime_;
  std::shared_ptr<dist::ParallelMesh> mesh_;
  std::vector<std::shared_ptr<GradientReducer>> reducers_;
  at::Device device_{at::kCPU};
};

}  // namespace baton
