#pragma once

#include <memory>
#include <optional>

#include "config/parallel_dims.h"
#include "models/model_args.h"
#include "parallel/applier.h"
#include "parallel/dist/launch_env.h"
#include "trainer/trainer.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

namespace dist {
class ParallelMesh;
class Runtime;
}  // namespace dist

/// Builds a Trainer from a JobConfig. `build()` runs the hooks in a fixed
/// order and checks what each returns. The builder decides which model
/// parts this rank holds (build_model); every parallelism is an Applier in
/// the chain build_appliers() returns, which build() runs on every part, so
/// a new strategy is an applier, not a builder. A subclass overrides the
/// hooks it changes and calls the base ones for the rest
/// (PipelineTrainerBuilder overrides init_runtime, build_model,
/// build_dataloader and build_train_step).
class TrainerBuilder {
 public:
  explicit TrainerBuilder(const JobConfig& config);
  virtual ~TrainerBuilder();
  TrainerBuilder(const TrainerBuilder&) = delete;
  TrainerBuilder& operator=(const TrainerBuilder&) = delete;

  /// Runs every hook, in order: init_runtime, build_tokenizer, build_model,
  /// build_appliers (then each applier on each part, in chain order),
  /// build_optimizers, build_lr_schedulers, build_dataloader, build_loss,
  /// build_train_step, build_checkpointer, build_metrics. Throws
  /// std::logic_error when a hook returns something unusable (no parts,
  /// one optimizer short, ...).
  std::unique_ptr<Trainer> build();

  /// Makes build() run as `env` says instead of reading the launch
  /// environment of the process (tests run ranks as threads). Before build().
  void use_launch_env(const dist::LaunchEnv& env) {
    env_override_ = env;
  }

 protected:
  const JobConfig& config() const {
    return config_;
  }
  /// Set by init_runtime.
  const ParallelDims& parallel_dims() const {
    return dims_;
  }
  /// This rank's process groups; set by init_runtime.
  dist::ParallelMesh& mesh() const;
  /// The distributed runtime, for groups of its own (null for one
  /// process); set by init_runtime.
  const std::shared_ptr<dist::Runtime>& runtime() const {
    return runtime_;
  }
  /// Device the parts train on; set by init_runtime.
  at::Device device() const {
    return device_;
  }
  /// The mixed-precision dtypes (training.mixed_precision_*, `auto`
  /// resolved for the device); set by init_runtime.
  const MixedPrecision& mixed_precision() const {
    return mixed_precision_;
  }
  /// The model's shape (the flavor with the tokenizer's vocabulary); set
  /// before build_model.
  const ModelArgs& model_args() const {
    return model_args_;
  }

  /// Threads, seeds, determinism, the launch environment, the distributed
  /// runtime (store and process groups, when there are several ranks), the
  /// parallel layout, the device and the mixed-precision dtypes.
  virtual void init_runtime();
  /// The tokenizer of `model.tokenizer`.
  virtual std::shared_ptr<const Tokenizer> build_tokenizer();
  /// The parts this rank holds, built and initialised (on the CPU, not yet
  /// parallelized); the base: the whole model as one part, stage 0.
  virtual ModelParts build_model(const ModelArgs& args);
  /// The steps applied to every part, in order. The base chain: to_device;
  /// the model steps of the enabled parallelisms (ChainPlace::kModel, as
  /// tensor parallel's); activation_checkpoint unless its mode is none;
  /// mixed_precision when the param dtype is not float32; the registered
  /// appliers `parallelism.appliers` lists, in order; then the enabled
  /// parallelisms' data steps (kData: check_replicas, then fully_shard or
  /// replicate), each step once. A subclass calls the base and inserts,
  /// replaces or removes steps.
  virtual ApplierChain build_appliers();
  /// Whether the parts are pipeline stages trained by the schedule executor
  /// (the appliers see it in ParallelContext::pipelined); the base: no.
  virtual bool pipelined() const {
    return false;
  }
  /// The optimizer of one part (`optimizer.name`).
  virtual std::unique_ptr<torch::optim::Optimizer> build_optimizer(
      ModelPart& part);
  /// One optimizer per part, from build_optimizer.
  virtual std::unique_ptr<OptimizersContainer> build_optimizers(
      const ModelParts& parts);
  /// The LR scheduler of one optimizer: the `lr_scheduler.name` schedule.
  virtual std::unique_ptr<LRScheduler> build_lr_scheduler(
      torch::optim::Optimizer& optimizer);
  /// One scheduler per optimizer, from build_lr_scheduler.
  virtual std::unique_ptr<LRSchedulersContainer> build_lr_schedulers(
      const OptimizersContainer& optimizers);
  /// The data loader of this rank (null where it loads no data).
  virtual std::unique_ptr<DataLoader> build_dataloader(
      std::shared_ptr<const Tokenizer> tokenizer);
  /// The held-out data's loader of this rank (`validation:`; training's
  /// batch shape, in order, no prefetch); null without validation.enable or
  /// where build_dataloader gives none.
  virtual std::unique_ptr<DataLoader> build_validation_dataloader(
      std::shared_ptr<const Tokenizer> tokenizer);
  /// The token loss; cross-entropy summed over tokens.
  virtual LossFn build_loss();
  /// Forward and backward of one step over `parts`; the base one is local,
  /// summing tokens and losses over the loss group.
  virtual std::unique_ptr<TrainStep> build_train_step(
      const ModelParts& parts, LossFn loss);
  /// The checkpointer (a CheckpointManager over `parts`, one optimizer and
  /// scheduler per part, and this rank's loader, null where it loads none),
  /// or null when checkpoint.enable, checkpoint.model_only_export and
  /// checkpoint.initial_load_hf are all off.
  virtual std::unique_ptr<Checkpointer> build_checkpointer(
      const ModelParts& parts,
      const OptimizersContainer& optimizers,
      const LRSchedulersContainer& schedulers,
      DataLoader* dataloader);
  /// The metrics logger (writes on global rank 0 only).
  virtual std::unique_ptr<MetricsLogger> build_metrics();

 private:
  /// Runs `chain` on every part (build() calls it between build_model and
  /// build_optimizers).
  void parallelize(ModelParts& parts, const ApplierChain& chain);
  /// The peak TFLOP/s MFU is measured against, without metrics.peak_tflops:
  /// the best of a matmul probe over this rank's step shapes (as the
  /// enabled parallelisms split them) on the device the step runs on.
  double measure_peak(const ModelArgs& args) const;
  /// MFU's peak: metrics.peak_tflops, else a known GPU's published dense
  /// peak for the compute dtype, else measure_peak's; logged with where it
  /// came from.
  double peak_for_mfu(const ModelArgs& args) const;

  JobConfig config_;
  ModelArgs model_args_;
  ParallelDims dims_;
  std::optional<dist::LaunchEnv> env_override_;
  dist::LaunchEnv env_;
  std::shared_ptr<dist::Runtime> runtime_;
  /// build_tokenizer's, for the checkpoint's model record.
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<dist::ParallelMesh> mesh_;
  at::Device device_{at::kCPU};
  MixedPrecision mixed_precision_;
};

}  // namespace baton
