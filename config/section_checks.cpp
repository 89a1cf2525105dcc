#include <algorithm>
#include <string>

#include "common/text.h"
#include "config/config_detail.h"
#include "config/job_config.h"

namespace baton {

using config_detail::format_number;

std::optional<ConfigProblem> ActivationCheckpointConfig::stages_problem(
    int64_t num_stages) const {
  const std::string key = "activation_checkpoint.stages";
  for (size_t k = 0; k < stages.size(); ++k) {
    const int64_t s = stages[k];
    if (std::find(stages.begin(), stages.begin() + k, s) !=
        stages.begin() + k) {
      return ConfigProblem{
          key,
          key + ": stage " + std::to_string(s) +
              " is listed twice; allowed: distinct stage indices"};
    }
    if (num_stages > 0 && (s < 0 || s >= num_stages)) {
      return ConfigProblem{
          key,
          key + ": stage " + std::to_string(s) + " is out of range for " +
              std::to_string(num_stages) +
              (num_stages == 1 ? " stage" : " stages") +
              "; allowed: global stage indices in [0, " +
              std::to_string(num_stages - 1) +
              "], or an empty list for every stage; hint: the stages are "
              "pipeline_parallel_degree x pipeline_parallel_stages_per_rank"};
    }
  }
  return std::nullopt;
}

std::optional<ConfigProblem> ValidationConfig::data_problem(
    const TrainingConfig& training) const {
  if (!enable) {
    return std::nullopt;
  }
  if (dataset_path.empty()) {
    return ConfigProblem{
        "validation.dataset_path",
        "validation.dataset_path: empty with validation.enable: true; "
        "allowed: a held-out file, folder or glob that training does not "
        "read"};
  }
  if (to_lower(dataset) == to_lower(training.dataset) &&
      dataset_path == training.dataset_path) {
    return ConfigProblem{
        "validation.dataset_path",
        "validation.dataset_path: '" + dataset_path +
            "' is the training data (training.dataset_path); allowed: "
            "held-out data that training does not read"};
  }
  return std::nullopt;
}

int64_t LRSchedulerConfig::decay_steps(int64_t training_steps) const {
  if (warmup_steps > training_steps) {
    return 0;
  }
  return decay_ratio ? static_cast<int64_t>(std::llround(
                           static_cast<double>(training_steps) * *decay_ratio))
                     : training_steps - warmup_steps;
}

std::optional<ConfigProblem> LRSchedulerConfig::phases_problem(
    int64_t training_steps) const {
  const int64_t decay = decay_steps(training_steps);
  if (decay_ratio && warmup_steps <= training_steps &&
      warmup_steps + decay > training_steps) {
    return ConfigProblem{
        "lr_scheduler.decay_ratio",
        "lr_scheduler.decay_ratio: " + format_number(*decay_ratio) + " gives " +
            std::to_string(decay) + " decay steps, which with " +
            std::to_string(warmup_steps) +
            " warmup steps exceed training.steps " +
            std::to_string(training_steps) + "; allowed: at most " +
            format_number(
                static_cast<double>(training_steps - warmup_steps) /
                static_cast<double>(training_steps))};
  }
  return std::nullopt;
}

std::optional<ConfigProblem> LRSchedulerConfig::phases_warning(
    int64_t training_steps) const {
  if (warmup_steps <= training_steps) {
    return std::nullopt;
  }
  return ConfigProblem{
      "lr_scheduler.warmup_steps",
      "lr_scheduler.warmup_steps: " + std::to_string(warmup_steps) +
          " exceeds training.steps " + std::to_string(training_steps) +
          "; the run warms up for all its steps (step s at s / " +
          std::to_string(warmup_steps) +
          " of optimizer.lr), never reaching the full rate nor decaying; set "
          "lr_scheduler.warmup_steps at most training.steps for the whole "
          "schedule"};
}

}  // namespace baton
