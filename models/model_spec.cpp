#include "models/model_spec.h"

#include "models/llama/transformer.h"

namespace baton {

Registry<ModelSpec>& model_registry() {
  static Registry<ModelSpec> registry("model");
  return registry;
}

void register_builtin_models() {
  model_registry().add_builtins_once([](Registry<ModelSpec>& registry) {
    ModelSpec llama3;
    llama3.flavors = llama::llama3_flavors();
    llama3.build = [](const llama::ModelArgs& args,
                      const ChunkSpec& chunk,
                      uint64_t seed) -> std::shared_ptr<ModelChunk> {
      auto model = std::make_shared<llama::TransformerImpl>(args, chunk);
      model->init_weights(seed);
      return model;
    };
    llama3.parameter_shapes = llama::parameter_shapes;
    llama3.num_params = [](const llama::ModelArgs& args) {
      return args.num_params();
    };
    llama3.flops_per_token = [](const llama::ModelArgs& args, int64_t seq_len) {
      return args.flops_per_token(seq_len);
    };
    registry.add("llama3", std::move(llama3), "Llama 3 (Meta's architecture)");
  });
}

at::Tensor run_wrapped(
    const std::vector<std::shared_ptr<UnitWrapper>>& wrappers,
    const std::function<at::Tensor(const at::Tensor&)>& run,
    const at::Tensor& input) {
  std::function<at::Tensor(const at::Tensor&)> f = run;
  for (const auto& w : wrappers) {
    f = [w, inner = std::move(f)](const at::Tensor& x) {
      return w->forward(inner, x);
    };
  }
  return f(input);
}

const llama::ModelArgs& model_flavor(
    const ModelSpec& spec,
    const std::string& flavor,
    const std::string& where) {
  const auto it = spec.flavors.find(flavor);
  if (it == spec.flavors.end()) {
    std::vector<std::string> names;
    for (const auto& [name, args] : spec.flavors) {
      names.push_back(name);
    }
    std::string message =
        "unknown flavor '" + flavor + "'; known: " + join(names, ", ");
    const std::string hint = closest_match(flavor, names);
    if (!hint.empty()) {
      message += "; did you mean '" + hint + "'?";
    }
    throw_config_error(where, message);
  }
  return it->second;
}

}  // namespace baton
