#pragma once

// The Hugging Face layout of models/common's decoder, shared by the
// families built on it: transformers' names (`model.layers.3.self_attn.
// q_proj.weight`), the rows of q_proj and k_proj (and the q_norm / k_norm
// weights) permuted per head, since transformers' rotary embedding rotates
// the two halves of each head (rotate_half) where Baton's, as Meta's,
// rotates interleaved pairs; and config.json's fields, read in both forms
// transformers has written.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "models/hf_format.h"
#include "models/model_args.h"

namespace baton::models {

/// What a family's config class makes of absent config.json fields, and
/// what it adds.
struct DecoderHfOptions {
  std::string model_type;
  std::string architecture;
  /// head_dim when config.json has none; unset: hidden_size / heads.
  std::optional<int64_t> default_head_dim;
  int64_t default_max_position_embeddings = 2048;
  double default_rope_theta = 10000.0;
  /// Per-head q/k RMSNorm (Qwen3).
  bool qk_norm = false;
  /// The family's config has a sliding-window switch (Qwen3's
  /// use_sliding_window), which Baton's full attention refuses when on.
  bool sliding_window_field = false;
  /// The family's config has mlp_bias (Llama's).
  bool mlp_bias_field = false;
  /// Mixture of experts as Qwen3-MoE's config.json says it (num_experts,
  /// num_experts_per_tok, moe_intermediate_size, norm_topk_prob) and its
  /// tensors are named (mlp.gate, mlp.experts.E.{gate,up,down}_proj).
  bool qwen_moe = false;
};

/// The HfFormat of a decoder family described by `options`.
HfFormat decoder_hf_format(const DecoderHfOptions& options);

/// The first field in which `file` (read from a config.json) and `model`
/// (the run's) differ, as "hidden_size is 64, but the model has dim 256";
/// nullopt when they describe the same weights and RoPE.
std::optional<std::string> hf_shape_difference(
    const ModelArgs& file, const ModelArgs& model);

}  // namespace baton::models
