#include "builders/builder_registry.h"

#include "builders/pipeline_trainer_builder.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "models/model_spec.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/pipeline/schedules.h"

namespace baton {

Registry<BuilderCreator>& builder_registry() {
  static Registry<BuilderCreator> registry("builder");
  return registry;
}

void register_builtin_builders() {
  register_builtin_models();
  register_builtin_tokenizers();
  register_builtin_datasets();
  register_builtin_optimizers();
  register_builtin_lr_schedules();
  register_builtin_appliers();
  pipeline::register_builtin_schedules();
  builder_registry().add_builtins_once([](Registry<BuilderCreator>& registry) {
    registry.add(
        "default",
        [](const JobConfig& config) {
          return std::make_unique<TrainerBuilder>(config);
        },
        "one model part per rank, local train step");
    registry.add(
        "pipeline",
        [](const JobConfig& config) {
          return std::make_unique<PipelineTrainerBuilder>(config);
        },
        "pipeline stages (several per rank), schedule executor");
  });
}

std::unique_ptr<TrainerBuilder> make_trainer_builder(const JobConfig& config) {
  std::string name = config.builder;
  if (to_lower(name) == "auto") {
    name = config.parallelism.pipeline_parallel_degree > 1 ? "pipeline"
                                                           : "default";
  }
  return builder_registry().get(name, config.origin("builder"))(config);
}

}  // namespace baton
