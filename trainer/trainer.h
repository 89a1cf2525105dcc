#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "trainer/checkpointer.h"
#include "trainer/job_config.h"
#include "trainer/lr_schedulers.h"
#include "trainer/metrics.h"
#include "trainer/model_parts.h"
#include "trainer/optimizers.h"
#include "trainer/train_step.h"

namespace baton {

namespace dist {
class ProcessGroup;
class Runtime;
}  // namespace dist

/// Everything a trainer runs with; a TrainerBuilder fills it in.
struct TrainerComponents {
  /// Training FLOPs per token of the whole model (for MFU).
  double flops_per_token = 0.0;
  ModelParts model_parts;
  std::unique_ptr<OptimizersContainer> optimizers;
  std::unique_ptr<LRSchedulersContainer> lr_schedulers;
  std::shared_ptr<const Tokenizer> tokenizer;
  /// Null on ranks that load no data.
  std::unique_ptr<DataLoader> dataloader;
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
  /// The pipeline group: the grad norm is summed over it (each rank holds
  /// different parameters) and the bubbles gathered. Null: this rank alone.
  std::shared_ptr<dist::ProcessGroup> pp_group;
};

/// The train loop. Each step: fetch the micro-step batches, run the
/// TrainStep, clip gradients, step optimizers and LR schedulers, log.
class Trainer {
 public:
  Trainer(const JobConfig& config, TrainerComponents components);
  ~Trainer();

  /// Trains until training.steps; returns the metrics of every step.
  std::vector<StepMetrics> train();
  /// Runs one optimizer step and returns its metrics.
  StepMetrics train_step();
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
  /// Clips gradients to max_norm over every part; returns the norm before.
  double clip_gradients();

  JobConfig config_;
  TrainerComponents c_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  bool first_step_done_ = false;
};

/// Fault injection for the failure tests, from BATON_INJECT_FAULT=
/// "KIND:RANK:STEP": at the start of step STEP, global rank RANK throws
/// (KIND throw), kills itself with SIGKILL (kill) or stops answering
/// (hang). KIND killsave is the checkpoint's (kill_during_save_requested).
/// Unset: nothing. A malformed value throws ConfigError.
void maybe_inject_fault(int64_t rank, int64_t step);

/// True when BATON_INJECT_FAULT is "killsave:RANK:STEP" for this rank and
/// step: the checkpoint save of that step then kills the process half-way
/// through writing its file.
bool kill_during_save_requested(int64_t rank, int64_t step);

}  // namespace baton
