#include "builders/job_check.h"

#include <filesystem>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "common/text.h"
#include "data/tokenizer.h"
#include "models/model_spec.h"
#include "parallel/applier.h"
#include "parallel/parallelism.h"

namespace baton {

std::pair<int64_t, std::string> job_vocabulary(
    const JobConfig& config, const ModelArgs& flavor) {
  const auto& m = config.model;
  if (!m.tokenizer_path.empty() && !std::filesystem::exists(m.tokenizer_path)) {
    return {
        flavor.vocab_size,
        "the flavor's (tokenizer file " + m.tokenizer_path + " not found)"};
  }
  const auto tokenizer = tokenizer_registry().get(
      m.tokenizer, config.origin("model.tokenizer"))(m.tokenizer_path);
  return {tokenizer->vocab_size(), "tokenizer " + m.tokenizer};
}

void check_listed_appliers(const JobConfig& config) {
  const std::string where = config.origin("parallelism.appliers");
  const auto placed = builder_placed_appliers();
  for (const auto& name : config.parallelism.appliers) {
    for (const auto& [step, hint] : placed) {
      if (to_lower(name) == to_lower(step)) {
        throw_config_error(
            where,
            "parallelism.appliers: '" + name +
                "' is a step the builder places itself, from the config; "
                "allowed: other registered appliers; hint: " +
                hint);
      }
    }
    applier_registry().get(name, where);
  }
}

void check_hf_layout(const JobConfig& config, const ModelSpec& spec) {
  // A family without a Hugging Face layout cannot be exported as one nor
  // loaded from one: said now, not after the run's last step.
  const auto& ck = config.checkpoint;
  if (spec.hf.defined()) {
    return;
  }
  if (ck.model_only_export && to_lower(ck.export_format) == "hf") {
    throw_config_error(
        config.origin("checkpoint.export_format"),
        "checkpoint.export_format: hf for model '" + config.model.name +
            "', whose family registers no Hugging Face layout; allowed: "
            "baton (the checkpoint's own format), or a family with one");
  }
  if (!ck.initial_load_hf.empty()) {
    throw_config_error(
        config.origin("checkpoint.initial_load_hf"),
        "checkpoint.initial_load_hf: a Hugging Face folder for model '" +
            config.model.name +
            "', whose family registers no Hugging Face layout; allowed: "
            "empty, or a family with one");
  }
}

CheckedJob check_job(
    const JobConfig& config,
    int64_t world_size,
    const std::string& world_source) {
  register_builtin_builders();
  if (to_lower(config.builder) != "auto") {
    builder_registry().get(config.builder, config.origin("builder"));
  }
  CheckedJob job;
  const ModelSpec& spec =
      model_registry().get(config.model.name, config.origin("model.name"));
  job.args =
      model_flavor(spec, config.model.flavor, config.origin("model.flavor"));
  std::tie(job.args.vocab_size, job.vocab_source) =
      job_vocabulary(config, job.args);
  if (world_size > 0) {
    job.dims = ParallelDims::from_config(config, world_size, world_source);
    if (const auto problem = parallelism_problem(config, job.dims, job.args)) {
      throw_config_error(config.origin(problem->key), problem->message);
    }
  }
  check_hf_layout(config, spec);
  check_listed_appliers(config);
  return job;
}

}  // namespace baton
