#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "config/job_config.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

/// The learning-rate multiplier of each optimizer step: the curve an
/// `lr_scheduler.name` picks. New schedules subclass it and register in
/// lr_schedule_registry(), or come from an overridden
/// TrainerBuilder::build_lr_scheduler.
class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  /// The multiplier of step `step` (1 = the first optimizer step).
  virtual double factor(int64_t step) const = 0;
};

/// `warmup_stable_decay`: linear warmup over `warmup_steps` (step s of
/// warmup gets s / warmup_steps, the last the full rate, as torchtitan 0.3's
/// schedule), then a stable phase at 1, then `decay_steps` of decay (linear,
/// sqrt or cosine) that reaches `min_lr_factor` at the last step. Without
/// `decay_ratio` every step after warmup decays. A warmup longer than the
/// run keeps its slope: every step of the run warms up (s / warmup_steps)
/// and none decays (torchtitan 0.3 shortens the warmup to the run instead;
/// LRSchedulerConfig::phases_warning).
class WarmupStableDecay final : public LRSchedule {
 public:
  /// Throws std::invalid_argument when the phases do not fit in
  /// `training_steps` (LRSchedulerConfig::phases_problem).
  WarmupStableDecay(const LRSchedulerConfig& config, int64_t training_steps);
  double factor(int64_t step) const override;
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

/// Makes the schedule of `lr_scheduler.name` for a run of `training_steps`.
using LRScheduleCreator = std::function<std::unique_ptr<LRSchedule>(
    const LRSchedulerConfig& config, int64_t training_steps)>;

/// The LR-schedule registry (`lr_scheduler.name`).
Registry<LRScheduleCreator>& lr_schedule_registry();

/// Registers the built-in schedules (warmup_stable_decay); safe to call
/// more than once.
void register_builtin_lr_schedules();

/// Sets one optimizer's learning rate from an LRSchedule: each parameter
/// group's rate is its initial rate times the schedule's factor. The rate
/// for step 1 is set on construction; `step()` moves to the next step.
class LRScheduler {
 public:
  LRScheduler(
      torch::optim::Optimizer& optimizer,
      std::shared_ptr<const LRSchedule> schedule);
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
  std::shared_ptr<const LRSchedule> schedule_;
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
