#include "optim/lr_schedulers.h"

#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace baton {

WarmupStableDecay::WarmupStableDecay(
    const LRSchedulerConfig& config, int64_t training_steps)
    : training_steps_(training_steps),
      warmup_steps_(config.warmup_steps),
      decay_steps_(config.decay_steps(training_steps)),
      decay_type_(config.decay_type),
      min_lr_factor_(config.min_lr_factor) {
  if (const auto problem = config.phases_problem(training_steps)) {
    throw std::invalid_argument("[lr_scheduler] " + problem->message);
  }
}

double WarmupStableDecay::factor(int64_t step) const {
  if (step <= warmup_steps_) {
    return static_cast<double>(step) / static_cast<double>(warmup_steps_);
  }
  const int64_t decay_start = training_steps_ - decay_steps_;
  if (step <= decay_start) {
    return 1.0;
  }
  const double progress = std::min(
      1.0,
      static_cast<double>(step - decay_start) /
          static_cast<double>(decay_steps_));
  double remaining = 0.0;
  if (decay_type_ == "linear") {
    remaining = 1.0 - progress;
  } else if (decay_type_ == "sqrt") {
    remaining = 1.0 - std::sqrt(progress);
  } else if (decay_type_ == "cosine") {
    remaining = 0.5 * (1.0 + std::cos(M_PI * progress));
  } else {
    throw std::invalid_argument(
        "[lr_scheduler] unknown decay_type '" + decay_type_ +
        "'; allowed: linear, sqrt, cosine");
  }
  return min_lr_factor_ + (1.0 - min_lr_factor_) * remaining;
}

Registry<LRScheduleCreator>& lr_schedule_registry() {
  static Registry<LRScheduleCreator> registry("lr schedule");
  return registry;
}

void register_builtin_lr_schedules() {
  lr_schedule_registry().add_builtins_once(
      [](Registry<LRScheduleCreator>& registry) {
        registry.add(
            "warmup_stable_decay",
            [](const LRSchedulerConfig& config,
               int64_t training_steps) -> std::unique_ptr<LRSchedule> {
              return std::make_unique<WarmupStableDecay>(
                  config, training_steps);
            },
            "linear warmup, a stable phase, then decay_type decay to "
            "min_lr_factor");
      });
}

LRScheduler::LRScheduler(
    torch::optim::Optimizer& optimizer,
    std::shared_ptr<const LRSchedule> schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  if (!schedule_) {
    throw std::invalid_argument("[LRScheduler] schedule: null");
  }
  for (auto& group : optimizer_.param_groups()) {
    base_lrs_.push_back(group.options().get_lr());
  }
  apply();
}

void LRScheduler::step() {
  ++steps_done_;
  apply();
}

void LRScheduler::load_state(int64_t steps_done) {
  if (steps_done < 0) {
    throw std::invalid_argument(
        "[lr_scheduler] steps done must be >= 0, got " +
        std::to_string(steps_done));
  }
  steps_done_ = steps_done;
  apply();
}

void LRScheduler::apply() {
  const double f = schedule_->factor(steps_done_ + 1);
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].options().set_lr(base_lrs_.at(i) * f);
  }
}

double LRScheduler::lr() const {
  return optimizer_.param_groups().at(0).options().get_lr();
}

LRSchedulersContainer::LRSchedulersContainer(
    std::vector<std::unique_ptr<LRScheduler>> schedulers)
    : schedulers_(std::move(schedulers)) {}

LRSchedulersContainer::~LRSchedulersContainer() = default;

void LRSchedulersContainer::step() {
  for (auto& s : schedulers_) {
    s->step();
  }
}

double LRSchedulersContainer::lr() const {
  return schedulers_.at(0)->lr();
}

}  // namespace baton
