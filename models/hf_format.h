#pragma once

// How a model family reads and writes the Hugging Face `transformers`
// layout: config.json's fields both ways, the tensors' names, and the
// permutations between Baton's layout and transformers'. The folder itself
// (safetensors shards, the index) is checkpoint/'s business.

#include <ATen/core/Tensor.h>

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "models/model_args.h"

namespace baton {

struct HfFormat {
  /// config.json's model_type and architectures[0]: "llama",
  /// "LlamaForCausalLM".
  std::string model_type;
  std::string architecture;
  /// The model's shape from a config.json in either form transformers has
  /// written (`rope_scaling` / `rope_theta` / `torch_dtype`, or
  /// `rope_parameters` / `dtype`), the vocabulary included. Throws
  /// ConfigError "<where>: <field> is ...; allowed: ..." for a field the
  /// family cannot take (an activation, a RoPE type, biases, ...).
  std::function<ModelArgs(
      const nlohmann::json& config, const std::string& where)>
      read_config;
  /// config.json's fields for `args` (model_type, architectures, shapes,
  /// RoPE in the newer rope_parameters form and the older rope_scaling,
  /// tying, max_position_embeddings), without dtype and token ids.
  std::function<nlohmann::json(const ModelArgs& args)> write_config;
  /// The HF name of a Baton FQN ("layers.3.feed_forward.w3.weight" ->
  /// "model.layers.3.mlp.up_proj.weight"); "" for a name it has none for.
  /// A tensor HF stores one per expert (Baton's grouped experts, experts
  /// first) has a name with kExpertIndex where the expert's index goes
  /// ("model.layers.3.mlp.experts.{e}.gate_proj.weight"): expert e's is
  /// hf_expert_name(name, e), the whole tensor's row e.
  std::function<std::string(const std::string& fqn)> name;
  /// `weight` (the whole tensor of `fqn`) from Baton's layout to HF's
  /// (`to_hf`) or back: RoPE's rows permuted per head; others as they are.
  std::function<at::Tensor(
      const std::string& fqn,
      const at::Tensor& weight,
      const ModelArgs& args,
      bool to_hf)>
      convert;

  bool defined() const {
    return static_cast<bool>(read_config);
  }
};

/// Where an expert's index goes in an HfFormat name.
inline constexpr const char* kExpertIndex = "{e}";

/// Whether `name` (an HfFormat name) is one per expert.
inline bool hf_per_expert(const std::string& name) {
  return name.find(kExpertIndex) != std::string::npos;
}

/// Expert `e`'s name of a per-expert `name`.
inline std::string hf_expert_name(const std::string& name, int64_t e) {
  std::string out = name;
  out.replace(out.find(kExpertIndex), 3, std::to_string(e));
  return out;
}

}  // namespace baton
