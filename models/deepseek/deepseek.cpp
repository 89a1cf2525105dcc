#include "models/deepseek/deepseek.h"

namespace baton::deepseek {

namespace {

ModelArgs decoder(
    int64_t dim,
    int64_t n_layers,
    int64_t n_heads,
    int64_t n_kv_heads,
    int64_t head_dim,
    int64_t dense_hidden,
    int64_t vocab) {
  ModelArgs a;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.attention_head_dim = head_dim;
  a.ffn_hidden = dense_hidden;
  a.vocab_size = vocab;
  a.norm_eps = 1e-6;
  a.rope_theta = 10000;
  a.max_seq_len = 4096;
  return a;
}

/// DeepSeek-V3's routing: sigmoid scores, top-k within the best groups, a
/// routing bias, the chosen scores renormalised and scaled.
MoeArgs v3_routing(
    int64_t experts,
    int64_t top_k,
    int64_t hidden,
    int64_t shared,
    int64_t groups,
    int64_t kept_groups,
    double scale,
    int64_t first_dense) {
  MoeArgs m;
  m.num_experts = experts;
  m.top_k = top_k;
  m.expert_hidden = hidden;
  m.shared_experts = shared;
  m.score_func = "sigmoid";
  m.route_norm = true;
  m.route_scale = scale;
  m.n_groups = groups;
  m.topk_groups = kept_groups;
  m.expert_bias = true;
  m.first_dense_layers = first_dense;
  return m;
}

}  // namespace

const std::map<std::string, ModelArgs>& flavors() {
  static const std::map<std::string, ModelArgs> flavors = [] {
    std::map<std::string, ModelArgs> f;
    // qwen3_moe's debug shape with DeepSeek's routing: 8 experts of hidden
    // 256 in 4 groups (2 kept), top 2, one shared expert, the first block
    // a dense SwiGLU of 768.
    ModelArgs debug = decoder(256, 6, 8, 4, 32, 768, ModelArgs{}.vocab_size);
    debug.moe = v3_routing(8, 2, 256, 1, 4, 2, 2.5, 1);
    f["debugmodel"] = debug;
    // deepseek-ai/deepseek-moe-16b-base's config.json: softmax scores, top
    // 6 of 64 without groups or bias, not renormalised, 2 shared experts.
    ModelArgs moe16b = decoder(2048, 28, 16, 16, 128, 10944, 102400);
    moe16b.moe = v3_routing(64, 6, 1408, 2, 1, 1, 1.0, 1);
    moe16b.moe.score_func = "softmax";
    moe16b.moe.route_norm = false;
    moe16b.moe.expert_bias = false;
    f["16B"] = moe16b;
    // deepseek-ai/DeepSeek-V3's MoE (config.json), GQA for its attention.
    ModelArgs v3 = decoder(7168, 61, 128, 8, 128, 18432, 129280);
    v3.moe = v3_routing(256, 8, 2048, 1, 8, 4, 2.5, 3);
    v3.max_seq_len = 163840;
    f["V3-GQA"] = v3;
    return f;
  }();
  return flavors;
}

ModelSpec spec() {
  ModelSpec spec = decoder_model_spec();
  spec.flavors = flavors();
  // The decoder's tensor-parallel plan cuts the attention and the dense
  // blocks' feed-forward; the MoE blocks keep their weights whole over tp
  // (expert parallel splits the experts; docs/ARCHITECTURE.md, "Mixture of
  // experts").
  return spec;
}

}  // namespace baton::deepseek
