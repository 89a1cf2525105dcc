#pragma once

// The Hugging Face `transformers` layout of a Llama checkpoint, as
// `checkpoint.initial_load_hf` reads it and `checkpoint.export_format: hf`
// writes it (docs/checkpoints.md):
//   DIR/config.json                    LlamaConfig's fields
//   DIR/model.safetensors.index.json   {"metadata": {"total_size": N},
//                                       "weight_map": {name: file}}
//   DIR/model-0000K-of-0000N.safetensors (or one DIR/model.safetensors,
//                                       with or without the index)
// Names are transformers' (`model.layers.3.self_attn.q_proj.weight`), and
// the rows of q_proj and k_proj are permuted: transformers' rotary embedding
// rotates the two halves of each head (rotate_half), where Baton's, as
// Meta's, rotates interleaved pairs. Internal to checkpoint/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace baton {
struct SafetensorsEntry;
}

namespace baton::hf_llama {

inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";
inline constexpr const char* kSingleFile = "model.safetensors";

/// The model's shape in LlamaConfig's terms, and its names for messages.
struct Shape {
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 0.0;
  double rope_theta = 0.0;
  /// "llama3 debugmodel".
  std::string model;

  int64_t head_dim() const {
    return hidden_size / num_attention_heads;
  }
};

/// The shape of Baton's model config (the `config.json` of the Baton
/// export: dim, n_layers, n_heads, n_kv_heads, ffn_hidden_dim, vocab_size,
/// norm_eps, rope_theta); throws std::invalid_argument when a field is
/// missing.
Shape shape_of(const nlohmann::json& model_config);

/// The config.json of an export: LlamaConfig's fields for `shape`,
/// `torch_dtype` and Baton's own record under "baton".
nlohmann::json config_json(
    const Shape& shape,
    const std::string& torch_dtype,
    const nlohmann::json& baton);

/// The model.safetensors.index.json of `entries`, all in `file`.
nlohmann::json index_json(
    const std::vector<SafetensorsEntry>& entries, const std::string& file);

/// Checks DIR (the value of checkpoint.initial_load_hf): config.json is
/// there, parses, describes a Llama of `shape` (every shape field, untied
/// embeddings, no RoPE scaling), and a weights file (the index or
/// model.safetensors) is beside it. Throws ConfigError naming the key, the
/// file and the field.
void check_folder(const std::filesystem::path& dir, const Shape& shape);

/// The tensors of an HF folder and the file that lists them.
struct WeightMap {
  /// The index, or model.safetensors without one: where a missing or extra
  /// name is reported.
  std::string listing;
  /// HF name -> file name in the folder.
  std::map<std::string, std::string> files;
};
/// Reads DIR's index (or model.safetensors' header). Throws CheckpointError
/// naming the file when it is malformed.
WeightMap read_weight_map(const std::filesystem::path& dir);

/// The HF name of a Baton FQN ("layers.3.feed_forward.w3.weight" ->
/// "model.layers.3.mlp.up_proj.weight"); "" for a name it has none for.
std::string hf_name(const std::string& fqn);
/// Whether a tensor of an HF folder is one Baton has no use for and may
/// skip: the rotary tables (`rotary_emb.inv_freq`) older exports saved.
bool ignorable(const std::string& hf_name);

/// `weight` (Baton's layout of `fqn`, whole) in HF's: the rows of wq and wk
/// permuted per head from interleaved pairs to halves; other tensors as
/// they are.
at::Tensor to_hf(
    const std::string& fqn, const at::Tensor& weight, const Shape& shape);
/// The inverse of to_hf: HF's tensor of `fqn` in Baton's layout.
at::Tensor from_hf(
    const std::string& fqn, const at::Tensor& weight, const Shape& shape);

}  // namespace baton::hf_llama
