#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton {
struct ChunkSpec;
}

namespace baton::llama {

/// Shape of a Llama 3 model (the fields of Meta's ModelArgs).
struct ModelArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  /// Key/value heads for grouped-query attention; unset = n_heads.
  std::optional<int64_t> n_kv_heads;
  /// Follows the tokenizer: the builder overwrites it.
  int64_t vocab_size = 128256;
  /// The SwiGLU hidden size is rounded up to a multiple of this.
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;

  /// Key/value heads (n_kv_heads, or n_heads when unset).
  int64_t kv_heads() const {
    return n_kv_heads.value_or(n_heads);
  }
  /// Width of one attention head.
  int64_t head_dim() const {
    return dim / n_heads;
  }
  /// SwiGLU hidden size: 2/3 of 4*dim, times ffn_dim_multiplier, rounded up
  /// to multiple_of (as in Meta's reference code).
  int64_t ffn_hidden_dim() const;
  /// Parameters of one transformer block.
  int64_t params_per_layer() const;
  /// Parameters of the whole model (embedding and output included, untied).
  int64_t num_params() const;
  /// Training FLOPs per token at `seq_len`: 6 x the non-embedding
  /// parameters plus 12 x layers x heads x head_dim x seq_len for attention
  /// (torchtitan's count, so MFU figures compare).
  double flops_per_token(int64_t seq_len) const;
  /// Throws std::invalid_argument for inconsistent shapes (dim not divisible
  /// by n_heads, n_heads not divisible by n_kv_heads, odd head_dim, ...).
  void validate() const;
};

/// A parameter's FQN and whole shape.
using ParamShape = std::pair<std::string, std::vector<int64_t>>;

/// The parameters the chunk `chunk` of a model shaped `args` holds, in the
/// order the built module lists them (named_parameters), without building
/// it: what a dry run counts.
std::vector<ParamShape> parameter_shapes(
    const ModelArgs& args, const ChunkSpec& chunk);

/// The flavors of llama3: `debugmodel`, `small` (a CPU-sized model), `8B`,
/// `70B`, `405B`, keyed by name.
const std::map<std::string, ModelArgs>& llama3_flavors();

}  // namespace baton::llama
