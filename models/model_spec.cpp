#include "models/model_spec.h"

#include "models/common/transformer.h"
#include "models/deepseek/deepseek.h"
#include "models/llama3/llama3.h"
#include "models/qwen3/qwen3.h"

namespace baton {

Registry<ModelSpec>& model_registry() {
  static Registry<ModelSpec> registry("model");
  return registry;
}

ModelSpec decoder_model_spec() {
  ModelSpec spec;
  spec.build = [](const ModelArgs& args,
                  const ChunkSpec& chunk,
                  uint64_t seed) -> std::shared_ptr<ModelChunk> {
    auto model = std::make_shared<models::TransformerImpl>(args, chunk);
    model->init_weights(seed);
    return model;
  };
  spec.parameter_shapes = models::parameter_shapes;
  spec.num_params = [](const ModelArgs& args) { return args.num_params(); };
  spec.flops_per_token = [](const ModelArgs& args, int64_t seq_len) {
    return args.flops_per_token(seq_len);
  };
  // Megatron's: the attention's q, k, v and the feed-forward's w1, w3 by
  // output rows (heads, hidden units), wo and w2 by input columns, the
  // embedding and output by vocabulary; the norms whole (q_norm and k_norm
  // act on each head alone).
  spec.tensor_parallel_plan = {
      {".attention.wq.weight", TensorSplit::kColumn},
      {".attention.wk.weight", TensorSplit::kColumn},
      {".attention.wv.weight", TensorSplit::kColumn},
      {".attention.wo.weight", TensorSplit::kRow},
      {".feed_forward.w1.weight", TensorSplit::kColumn},
      {".feed_forward.w3.weight", TensorSplit::kColumn},
      {".feed_forward.w2.weight", TensorSplit::kRow},
      {"tok_embeddings.weight", TensorSplit::kVocab},
      {"output.weight", TensorSplit::kVocab},
  };
  return spec;
}

const TensorParallelRule* tensor_parallel_rule(
    const std::vector<TensorParallelRule>& plan, const std::string& fqn) {
  for (const TensorParallelRule& rule : plan) {
    if (rule.suffix.starts_with('.') ? fqn.ends_with(rule.suffix)
                                     : fqn == rule.suffix) {
      return &rule;
    }
  }
  return nullptr;
}

void register_builtin_models() {
  model_registry().add_builtins_once([](Registry<ModelSpec>& registry) {
    registry.add("llama3", llama3::spec(), "Llama 3 to 3.3 (Meta's)");
    registry.add("qwen3", qwen3::spec(), "Qwen3 dense (Alibaba's)");
    registry.add(
        "qwen3_moe", qwen3::moe_spec(), "Qwen3 mixture of experts (Alibaba's)");
    registry.add(
        "deepseek_moe",
        deepseek::spec(),
        "DeepSeek-V3's mixture of experts with grouped-query attention");
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

const ModelArgs& model_flavor(
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
