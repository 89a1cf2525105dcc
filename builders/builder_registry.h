#pragma once

#include <functional>
#include <memory>

#include "builders/trainer_builder.h"
#include "common/registry.h"

namespace baton {

/// Makes a builder for a job.
using BuilderCreator =
    std::function<std::unique_ptr<TrainerBuilder>(const JobConfig& config)>;

/// The builder registry (the top-level `builder:` key).
Registry<BuilderCreator>& builder_registry();

/// Registers the built-in builders (`default`, `pipeline`) and every other
/// built-in registry (models, tokenizers, datasets, optimizers, LR
/// schedules, appliers, pipeline schedules); safe to call more than once.
/// Call it before load_job_config, so that the config check sees every
/// registry's names.
void register_builtin_builders();

/// The builder `config.builder` names; `auto` picks the pipeline builder when
/// pipeline_parallel_degree > 1, else `default`. Throws ConfigError for an
/// unknown name, listing the known ones.
std::unique_ptr<TrainerBuilder> make_trainer_builder(const JobConfig& config);

}  // namespace baton
