#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/job_config.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/model_parts.h"
#include "trainer/checkpointer.h"
#include "trainer/metrics.h"
#include "trainer/train_step.h"

namespace baton {

namespace dist {
class ParallelMesh;
class Runtime;
}  // namespace dist

/// Everything a trainer runs with; a TrainerBuilder fills it in.
struct TrainerComponents {
  /// Training FLOPs per token of the whole model (for MFU).
  double flops_per_token = 0.0;
  /// The model has mixture-of-experts layers (on some pipeline rank): every
  /// step balances them, and logged steps report their routing.
  bool moe = false;
  ModelParts model_parts;
  std::unique_ptr<OptimizersContainer> optimizers;
  std::unique_ptr<LRSchedulersContainer> lr_schedulers;
  std::shared_ptr<const Tokenizer> tokenizer;
  /// Null on ranks that load no data.
  std::unique_ptr<DataLoader> dataloader;
  /// The held-out data's loader (`validation:`), read from its start at
  /// every validation; null without validation or where no data is loaded.
  std::unique_ptr<DataLoader> validation_dataloader;
  std::unique_ptr<TrainStep> train_step;
  /// Null when checkpointing is off.
  std::unique_ptr<Checkpointer> checkpointer;
  std::unique_ptr<MetricsLogger> metrics;
  /// Peak TFLOP/s for MFU (configured or measured), per rank.
  double peak_tflops = 0.0;
  /// Ranks in the job; tflops and MFU are per rank.
  int64_t world_size = 1;
  /// This process's global rank.
  int64_t rank = 0;
  /// The distributed runtime, null for a single process. The trainer keeps
  /// it alive and switches it to comm.train_timeout_seconds after the first
  /// step.
  std::shared_ptr<dist::Runtime> runtime;
  /// This rank's groups: the grad norm is summed over the groups the
  /// gradients are split across (parallel/grad_norm.h) and the pipeline
  /// bubbles gathered over pp.
  std::shared_ptr<dist::ParallelMesh> mesh;
};

/// The train loop. Each step: fetch the micro-step batches, run the
/// TrainStep, clip gradients (clip_grad_norm over the mesh), step
/// optimizers and LR schedulers, log, save when due; then the ranks agree
/// whether one was asked to stop (trainer/preemption.h), and if so all
/// save that step and return.
class Trainer {
 public:
  Trainer(const JobConfig& config, TrainerComponents components);
  ~Trainer();

  /// Trains until training.steps; returns the metrics of every step.
  std::vector<StepMetrics> train();
  /// Runs one optimizer step (every micro-step's forward and backward
  /// through the TrainStep, the clip, the optimizers and the schedulers)
  /// and returns its metrics.
  StepMetrics optimizer_step();
  /// Whether train() stopped early because a rank was asked to
  /// (SIGTERM, SIGUSR1: trainer/preemption.h).
  bool preempted() const {
    return preempted_;
  }
  /// Optimizer steps taken so far.
  int64_t step() const {
    return step_;
  }
  /// What a checkpoint saves of the loop: steps and tokens so far.
  TrainState state() const {
    return {step_, tokens_seen_};
  }
  const TrainerComponents& components() const {
    return c_;
  }

 private:
  /// The start-up log's line of this rank's parameter, gradient and
  /// optimizer-state bytes.
  void log_memory() const;
  /// validation.steps batches of the held-out data from their start,
  /// forward only, on every rank: into `m`'s validation fields.
  void validate(StepMetrics& m);
  /// Whether any rank received a preemption signal; every rank calls it at
  /// the same step boundaries (a MAX all-reduce over the world).
  bool stop_agreed() const;

  JobConfig config_;
  TrainerComponents c_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  bool first_step_done_ = false;
  bool preempted_ = false;
  /// MFU above 100% has been warned about (once a run).
  bool mfu_warned_ = false;
  /// Where the validation loader starts each validation.
  std::optional<DataLoaderState> validation_start_;
};

}  // namespace baton
