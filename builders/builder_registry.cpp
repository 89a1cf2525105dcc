#include "builders/builder_registry.h"

#include <mutex>

#include "data/text_dataset.h"
#include "data/tokenizer.h"
#include "models/model_spec.h"
#include "trainer/optimizers.h"

namespace baton {

Registry<BuilderCreator>& builder_registry() {
  static Registry<BuilderCreator> registry("builder");
  return registry;
}

void register_builtin_builders() {
  // Ranks may run as threads, each building its own trainer.
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  register_builtin_models();
  register_builtin_tokenizers();
  register_builtin_datasets();
  register_builtin_optimizers();
  auto& registry = builder_registry();
  if (registry.contains("default")) {
    return;
  }
  registry.add(
      "default",
      [](const JobConfig& config) {
        return std::make_unique<TrainerBuilder>(config);
      },
      "one model part per rank, local train step");
}

std::unique_ptr<TrainerBuilder> make_trainer_builder(const JobConfig& config) {
  std::string name = config.builder;
  if (to_lower(name) == "auto") {
    // The pipeline builder registers itself as "pipeline" (#6); until then a
    // pipelined config is rejected when the config is validated.
    name = config.parallelism.pipeline_parallel_degree > 1 ? "pipeline"
                                                           : "default";
  }
  return builder_registry().get(name, config.origin("builder"))(config);
}

}  // namespace baton
