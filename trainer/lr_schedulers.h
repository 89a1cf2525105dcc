#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/job_config.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

/// The learning-rate multiplier of each step (1-based): linear warmup over
/// `warmup_steps` (step s of warmup gets s / (warmup_steps + 1)), then a
/// stable phase at 1, then `decay_steps` of decay (linear, sqrt or cosine)
/// that reaches `min_lr_factor` at the last step. Without `decay_ratio`
/// every step after warmup decays.
class WarmupStableDecay {
 public:
  WarmupStableDecay(const LRSchedulerConfig& config, int64_t training_steps);
  /// The multiplier of step `step` (1 = the first optimizer step).
  double factor(int64_t step) const;
  /// Steps of decay at the end of training (0: none).
  int64_t decay_steps() const {
    return decay_steps_;
  }

 private:
  int64_t training_steps_;
  int64_t warmup_steps_;
  int64_t decay_steps_;
  std::string decay_type_;
  double min_lr_factor_;
};

/// Sets one optimizer's learning rate from a WarmupStableDecay curve. The
/// rate for step 1 is set on construction; `step()` moves to the next step.
class LRScheduler {
 public:
  LRScheduler(
      torch::optim::Optimizer& optimizer,
      const LRSchedulerConfig& config,
      int64_t training_steps);
  /// Advances to the next step and sets its learning rate on every
  /// parameter group.
  void step();
  /// The learning rate the next optimizer step will use.
  double lr() const;
  /// Steps taken so far (the state a checkpoint saves).
  int64_t steps_done() const {
    return steps_done_;
  }
  /// Continues after `steps_done` steps (from a checkpoint): sets the rate
  /// of the next step as if step() had been called that many times.
  void load_state(int64_t steps_done);

 private:
  void apply();

  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  WarmupStableDecay schedule_;
  int64_t steps_done_ = 0;
};

/// One LR scheduler per optimizer, stepped together.
class LRSchedulersContainer {
 public:
  explicit LRSchedulersContainer(
      std::vector<std::unique_ptr<LRScheduler>> schedulers);
  ~LRSchedulersContainer();
  /// Steps every scheduler.
  void step();
  size_t size() const {
    return schedulers_.size();
  }
  LRScheduler& operator[](size_t i) const {
    return *schedulers_.at(i);
  }
  /// The learning rate of the first scheduler (they share one curve).
  double lr() const;

 private:
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
};

}  // namespace baton
