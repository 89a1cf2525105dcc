#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton {

/// How RoPE's frequencies are stretched for a context longer than the one
/// a model was pre-trained on (transformers' `rope_scaling` /
/// `rope_parameters`).
struct RopeScaling {
  /// "" (none), "llama3" (Llama 3.1's: low frequencies divided by `factor`,
  /// high ones kept, a smooth ramp between) or "yarn" (YaRN, as Qwen3's
  /// long-context configs use it).
  std::string type;
  double factor = 1.0;
  /// The context the model was pre-trained on (llama3: wavelengths are
  /// measured against it; yarn: the correction range).
  int64_t original_max_position_embeddings = 8192;
  /// llama3: wavelengths longer than original / low_freq_factor are
  /// divided by factor, shorter than original / high_freq_factor kept.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  /// yarn: the rotations bounding the ramp between interpolated and
  /// extrapolated frequencies, and whether its ends are rounded outwards.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  /// yarn: the factor on cos and sin; unset: 0.1 ln(factor) + 1.
  std::optional<double> attention_factor;

  bool enabled() const {
    return !type.empty();
  }
  /// The factor on cos and sin (1 but for yarn).
  double attention_scale() const;
  bool operator==(const RopeScaling&) const = default;
};

/// A mixture-of-experts feed-forward's shape and routing (models/moe.h);
/// num_experts 0: every block dense.
struct MoeArgs {
  /// Routed experts per MoE block.
  int64_t num_experts = 0;
  /// Experts each token goes to.
  int64_t top_k = 0;
  /// Each routed expert's SwiGLU hidden size (HF moe_intermediate_size).
  int64_t expert_hidden = 0;
  /// Shared experts, run on every token (DeepSeek's): one SwiGLU of
  /// shared_experts x expert_hidden.
  int64_t shared_experts = 0;
  /// "softmax" (Qwen3-MoE) or "sigmoid" (DeepSeek-V3) of the logits.
  std::string score_func = "softmax";
  /// The chosen weights renormalised to sum 1 (HF norm_topk_prob).
  bool route_norm = true;
  /// The weights' factor (DeepSeek's routed_scaling_factor).
  double route_scale = 1.0;
  /// Group-limited routing (DeepSeek's n_group / topk_group): experts in
  /// n_groups groups, a token's top-k taken within its topk_groups best
  /// groups (scored by the sum of each group's two best scores).
  int64_t n_groups = 1;
  int64_t topk_groups = 1;
  /// A routing bias added to the scores for choosing only (the auxiliary-
  /// loss-free balance; HF e_score_correction_bias).
  bool expert_bias = false;
  /// The first blocks dense (DeepSeek's first_k_dense_replace).
  int64_t first_dense_layers = 0;

  bool enabled() const {
    return num_experts > 0;
  }
  /// Whether block `layer` is an MoE block.
  bool is_moe_layer(int64_t layer) const {
    return enabled() && layer >= first_dense_layers;
  }
  bool operator==(const MoeArgs&) const = default;
};

/// Shape of a decoder-only transformer of any registered family: the
/// fields of Meta's Llama ModelArgs, and what later families add (explicit
/// head and feed-forward widths, per-head q/k norms, tied embeddings, RoPE
/// scaling).
struct ModelArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  /// Key/value heads for grouped-query attention; unset = n_heads.
  std::optional<int64_t> n_kv_heads;
  /// Width of one attention head; unset = dim / n_heads (Qwen3 sets it).
  std::optional<int64_t> attention_head_dim;
  /// Follows the tokenizer: the builder overwrites it.
  int64_t vocab_size = 128256;
  /// The SwiGLU hidden size, when given outright (Qwen3, a config.json's
  /// intermediate_size); unset: derived from multiple_of and
  /// ffn_dim_multiplier, as Meta's code does.
  std::optional<int64_t> ffn_hidden;
  /// The SwiGLU hidden size is rounded up to a multiple of this.
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  /// The longest context the model is made for (HF's
  /// max_position_embeddings); RoPE is not limited by it.
  int64_t max_seq_len = 8192;
  /// RMSNorm on each query and key head before RoPE (Qwen3).
  bool qk_norm = false;
  /// The output projection is the token embedding's weight (Llama 3.2 1B
  /// and 3B, the small Qwen3s): one parameter, `tok_embeddings.weight`.
  bool tie_embeddings = false;
  /// Mixture of experts in the blocks moe.is_moe_layer says.
  MoeArgs moe;

  /// Key/value heads (n_kv_heads, or n_heads when unset).
  int64_t kv_heads() const {
    return n_kv_heads.value_or(n_heads);
  }
  /// Width of one attention head.
  int64_t head_dim() const {
    return attention_head_dim.value_or(dim / n_heads);
  }
  /// SwiGLU hidden size: ffn_hidden, or 2/3 of 4*dim, times
  /// ffn_dim_multiplier, rounded up to multiple_of (Meta's reference code).
  int64_t ffn_hidden_dim() const;
  /// Parameters of one dense transformer block.
  int64_t params_per_layer() const;
  /// Parameters of block `layer`: an MoE block holds every expert.
  int64_t params_of_layer(int64_t layer) const;
  /// The parameters of block `layer` one token's forward uses: an MoE
  /// block's router, top_k experts and shared experts.
  int64_t active_params_of_layer(int64_t layer) const;
  /// Parameters of the whole model (the output projection counted once
  /// more unless tied).
  int64_t num_params() const;
  /// The parameters one token's forward uses (num_params for a dense
  /// model).
  int64_t active_params() const;
  /// Training FLOPs per token at `seq_len`: 6 x the non-embedding
  /// parameters a token uses (the output projection always in: tied or
  /// not, it is a matmul) plus 12 x layers x heads x head_dim x seq_len
  /// for attention (torchtitan's count, so MFU figures compare).
  double flops_per_token(int64_t seq_len) const;
  /// Throws std::invalid_argument for inconsistent shapes (dim not divisible
  /// by n_heads without an explicit head_dim, n_heads not divisible by
  /// n_kv_heads, odd head_dim, an unknown RoPE scaling, ...).
  void validate() const;
  bool operator==(const ModelArgs&) const = default;
};

/// `args` as the model record of a checkpoint (config.json of a Baton
/// export; the HF mapping reads it back): every field, ffn_hidden_dim
/// resolved.
nlohmann::json model_args_json(const ModelArgs& args);
/// The inverse of model_args_json; fields absent from older records take
/// their defaults. Throws std::invalid_argument naming a missing shape
/// field.
ModelArgs model_args_from_json(const nlohmann::json& record);

/// A parameter's FQN and whole shape.
using ParamShape = std::pair<std::string, std::vector<int64_t>>;

}  // namespace baton
