#include "models/qwen3/qwen3.h"

#include <tuple>

#include "models/common/hf_decoder.h"

namespace baton::qwen3 {

namespace {

ModelArgs qwen3(
    int64_t dim,
    int64_t n_layers,
    int64_t n_heads,
    int64_t n_kv_heads,
    int64_t head_dim,
    int64_t hidden) {
  ModelArgs a;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.attention_head_dim = head_dim;
  a.ffn_hidden = hidden;
  a.vocab_size = 151936;
  a.norm_eps = 1e-6;
  a.rope_theta = 1e6;
  a.max_seq_len = 40960;
  a.qk_norm = true;
  return a;
}

}  // namespace

const std::map<std::string, ModelArgs>& flavors() {
  static const std::map<std::string, ModelArgs> flavors = [] {
    std::map<std::string, ModelArgs> f;
    // Tied, as the small Qwen3s are: pipelines tie its two ends.
    f["debugmodel"] = qwen3(256, 6, 8, 4, 64, 768);
    f["debugmodel"].tie_embeddings = true;
    for (const auto& [name, dim, layers, heads, hidden, tied] :
         {std::tuple{"0.6B", 1024, 28, 16, 3072, true},
          std::tuple{"1.7B", 2048, 28, 16, 6144, true},
          std::tuple{"4B", 2560, 36, 32, 9728, true},
          std::tuple{"8B", 4096, 36, 32, 12288, false},
          std::tuple{"14B", 5120, 40, 40, 17408, false},
          std::tuple{"32B", 5120, 64, 64, 25600, false}}) {
      ModelArgs a = qwen3(dim, layers, heads, 8, 128, hidden);
      a.tie_embeddings = tied;
      f[name] = a;
    }
    return f;
  }();
  return flavors;
}

const std::map<std::string, ModelArgs>& moe_flavors() {
  static const std::map<std::string, ModelArgs> flavors = [] {
    const auto moe =
        [](ModelArgs a, int64_t experts, int64_t top_k, int64_t expert_hidden) {
          a.moe.num_experts = experts;
          a.moe.top_k = top_k;
          a.moe.expert_hidden = expert_hidden;
          a.moe.score_func = "softmax";
          a.moe.route_norm = true;
          return a;
        };
    std::map<std::string, ModelArgs> f;
    // The dense debug model's shape with 8 experts of a third of its
    // hidden width, 2 a token: two thirds of its feed-forward FLOPs.
    f["debugmodel"] = moe(qwen3(256, 6, 8, 4, 64, 768), 8, 2, 256);
    // Hugging Face's Qwen3-30B-A3B and Qwen3-235B-A22B config.json.
    f["30B-A3B"] = moe(qwen3(2048, 48, 32, 4, 128, 6144), 128, 8, 768);
    f["235B-A22B"] = moe(qwen3(4096, 94, 64, 4, 128, 12288), 128, 8, 1536);
    return f;
  }();
  return flavors;
}

ModelSpec moe_spec() {
  ModelSpec spec = decoder_model_spec();
  spec.flavors = moe_flavors();
  // The decoder's tensor-parallel plan cuts the attention and the dense
  // blocks' feed-forward; the MoE blocks keep their weights whole over tp
  // (expert parallel splits the experts; docs/ARCHITECTURE.md, "Mixture of
  // experts").
  spec.hf = models::decoder_hf_format(
      {.model_type = "qwen3_moe",
       .architecture = "Qwen3MoeForCausalLM",
       .default_head_dim = 128,
       .default_max_position_embeddings = 32768,
       .qk_norm = true,
       .sliding_window_field = true,
       .qwen_moe = true});
  return spec;
}

ModelSpec spec() {
  ModelSpec spec = decoder_model_spec();
  spec.flavors = flavors();
  spec.hf = models::decoder_hf_format(
      {.model_type = "qwen3",
       .architecture = "Qwen3ForCausalLM",
       .default_head_dim = 128,
       .default_max_position_embeddings = 32768,
       .qk_norm = true,
       .sliding_window_field = true});
  return spec;
}

}  // namespace baton::qwen3
