#include "models/model_args.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace baton {

using json = nlohmann::json;

double RopeScaling::attention_scale() const {
  if (type != "yarn") {
    return 1.0;
  }
  if (attention_factor) {
    return *attention_factor;
  }
  return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

int64_t ModelArgs::ffn_hidden_dim() const {
  if (ffn_hidden) {
    return *ffn_hidden;
  }
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier) {
    hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  }
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

int64_t ModelArgs::params_per_layer() const {
  const int64_t q_dim = n_heads * head_dim();
  const int64_t kv_dim = kv_heads() * head_dim();
  const int64_t attention = 2 * dim * q_dim + 2 * dim * kv_dim;
  const int64_t feed_forward = 3 * dim * ffn_hidden_dim();
  const int64_t norms = 2 * dim + (qk_norm ? 2 * head_dim() : 0);
  return attention + feed_forward + norms;
}

int64_t ModelArgs::params_of_layer(int64_t layer) const {
  if (!moe.is_moe_layer(layer)) {
    return params_per_layer();
  }
  const int64_t dense_ffn = 3 * dim * ffn_hidden_dim();
  const int64_t expert = 3 * dim * moe.expert_hidden;
  return params_per_layer() - dense_ffn + moe.num_experts * dim +
         (moe.num_experts + moe.shared_experts) * expert;
}

int64_t ModelArgs::active_params_of_layer(int64_t layer) const {
  if (!moe.is_moe_layer(layer)) {
    return params_per_layer();
  }
  const int64_t expert = 3 * dim * moe.expert_hidden;
  return params_of_layer(layer) - (moe.num_experts - moe.top_k) * expert;
}

int64_t ModelArgs::num_params() const {
  const int64_t embedding = vocab_size * dim;
  const int64_t output = (tie_embeddings ? 0 : dim * vocab_size) + dim;
  int64_t blocks = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    blocks += params_of_layer(i);
  }
  return embedding + blocks + output;
}

int64_t ModelArgs::active_params() const {
  int64_t idle = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    idle += params_of_layer(i) - active_params_of_layer(i);
  }
  return num_params() - idle;
}

double ModelArgs::flops_per_token(int64_t seq_len) const {
  const int64_t untied =
      active_params() + (tie_embeddings ? vocab_size * dim : 0);
  const double dense = 6.0 * static_cast<double>(untied - vocab_size * dim);
  const double attention =
      12.0 * static_cast<double>(n_layers) * static_cast<double>(n_heads) *
      static_cast<double>(head_dim()) * static_cast<double>(seq_len);
  return dense + attention;
}

void ModelArgs::validate() const {
  auto check = [](bool ok, const std::string& message) {
    if (!ok) {
      throw std::invalid_argument("[model] " + message);
    }
  };
  check(
      dim > 0 && n_layers >= 0 && n_heads > 0 && vocab_size > 0,
      "dim, n_heads and vocab_size must be positive");
  check(
      attention_head_dim || dim % n_heads == 0,
      "dim " + std::to_string(dim) + " is not divisible by n_heads " +
          std::to_string(n_heads) + " (and no head_dim is given)");
  check(
      kv_heads() > 0 && n_heads % kv_heads() == 0,
      "n_heads " + std::to_string(n_heads) +
          " is not divisible by n_kv_heads " + std::to_string(kv_heads()));
  check(
      head_dim() > 0 && head_dim() % 2 == 0,
      "head_dim " + std::to_string(head_dim()) +
          " must be positive and even for RoPE");
  check(multiple_of > 0, "multiple_of must be positive");
  check(ffn_hidden_dim() > 0, "the feed-forward hidden size must be positive");
  const auto& s = rope_scaling;
  check(
      s.type.empty() || s.type == "llama3" || s.type == "yarn",
      "rope scaling '" + s.type + "'; known: llama3, yarn");
  check(
      !s.enabled() || (s.factor > 0 && s.original_max_position_embeddings > 0),
      "rope scaling needs a positive factor and original context");
  check(
      s.type != "llama3" || s.high_freq_factor > s.low_freq_factor,
      "llama3 rope scaling needs high_freq_factor > low_freq_factor");
  if (moe.enabled()) {
    check(
        moe.top_k >= 1 && moe.top_k <= moe.num_experts,
        "moe top_k " + std::to_string(moe.top_k) + " must be in [1, " +
            std::to_string(moe.num_experts) + "] (the experts)");
    check(moe.expert_hidden > 0, "moe expert_hidden must be positive");
    check(moe.shared_experts >= 0, "moe shared_experts must be >= 0");
    check(
        moe.score_func == "softmax" || moe.score_func == "sigmoid",
        "moe score_func '" + moe.score_func + "'; known: softmax, sigmoid");
    check(
        moe.n_groups >= 1 && moe.num_experts % moe.n_groups == 0 &&
            moe.topk_groups >= 1 && moe.topk_groups <= moe.n_groups,
        "moe n_groups " + std::to_string(moe.n_groups) +
            " must divide the experts (" + std::to_string(moe.num_experts) +
            ") and topk_groups " + std::to_string(moe.topk_groups) +
            " be in [1, n_groups]");
    check(
        moe.top_k <= moe.num_experts / moe.n_groups * moe.topk_groups,
        "moe top_k " + std::to_string(moe.top_k) +
            " exceeds the experts of topk_groups groups");
    check(moe.first_dense_layers >= 0, "moe first_dense_layers must be >= 0");
  }
}

json model_args_json(const ModelArgs& a) {
  json record = {
      {"dim", a.dim},
      {"n_layers", a.n_layers},
      {"n_heads", a.n_heads},
      {"n_kv_heads", a.kv_heads()},
      {"head_dim", a.head_dim()},
      {"vocab_size", a.vocab_size},
      {"multiple_of", a.multiple_of},
      {"ffn_hidden_dim", a.ffn_hidden_dim()},
      {"norm_eps", a.norm_eps},
      {"rope_theta", a.rope_theta},
      {"max_seq_len", a.max_seq_len},
      {"qk_norm", a.qk_norm},
      {"tie_embeddings", a.tie_embeddings}};
  if (a.ffn_dim_multiplier) {
    record["ffn_dim_multiplier"] = *a.ffn_dim_multiplier;
  }
  if (a.moe.enabled()) {
    const MoeArgs& m = a.moe;
    record["moe"] = {
        {"num_experts", m.num_experts},
        {"top_k", m.top_k},
        {"expert_hidden", m.expert_hidden},
        {"shared_experts", m.shared_experts},
        {"score_func", m.score_func},
        {"route_norm", m.route_norm},
        {"route_scale", m.route_scale},
        {"n_groups", m.n_groups},
        {"topk_groups", m.topk_groups},
        {"expert_bias", m.expert_bias},
        {"first_dense_layers", m.first_dense_layers}};
  }
  const RopeScaling& s = a.rope_scaling;
  if (s.enabled()) {
    json scaling = {
        {"type", s.type},
        {"factor", s.factor},
        {"original_max_position_embeddings",
         s.original_max_position_embeddings}};
    if (s.type == "llama3") {
      scaling["low_freq_factor"] = s.low_freq_factor;
      scaling["high_freq_factor"] = s.high_freq_factor;
    } else {
      scaling["beta_fast"] = s.beta_fast;
      scaling["beta_slow"] = s.beta_slow;
      scaling["truncate"] = s.truncate;
      if (s.attention_factor) {
        scaling["attention_factor"] = *s.attention_factor;
      }
    }
    record["rope_scaling"] = scaling;
  }
  return record;
}

ModelArgs model_args_from_json(const json& c) {
  for (const char* key :
       {"dim",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "ffn_hidden_dim",
        "vocab_size",
        "norm_eps",
        "rope_theta"}) {
    if (!c.contains(key)) {
      throw std::invalid_argument(
          std::string("[model] the model record has no '") + key + "'");
    }
  }
  ModelArgs a;
  a.dim = c["dim"].get<int64_t>();
  a.n_layers = c["n_layers"].get<int64_t>();
  a.n_heads = c["n_heads"].get<int64_t>();
  a.n_kv_heads = c["n_kv_heads"].get<int64_t>();
  a.attention_head_dim = c.value("head_dim", a.dim / a.n_heads);
  a.vocab_size = c["vocab_size"].get<int64_t>();
  a.ffn_hidden = c["ffn_hidden_dim"].get<int64_t>();
  a.multiple_of = c.value("multiple_of", a.multiple_of);
  if (c.contains("ffn_dim_multiplier")) {
    a.ffn_dim_multiplier = c["ffn_dim_multiplier"].get<double>();
  }
  a.norm_eps = c["norm_eps"].get<double>();
  a.rope_theta = c["rope_theta"].get<double>();
  a.max_seq_len = c.value("max_seq_len", a.max_seq_len);
  a.qk_norm = c.value("qk_norm", false);
  a.tie_embeddings = c.value("tie_embeddings", false);
  if (c.contains("moe")) {
    const json& m = c["moe"];
    MoeArgs& o = a.moe;
    o.num_experts = m.at("num_experts").get<int64_t>();
    o.top_k = m.at("top_k").get<int64_t>();
    o.expert_hidden = m.at("expert_hidden").get<int64_t>();
    o.shared_experts = m.value("shared_experts", o.shared_experts);
    o.score_func = m.value("score_func", o.score_func);
    o.route_norm = m.value("route_norm", o.route_norm);
    o.route_scale = m.value("route_scale", o.route_scale);
    o.n_groups = m.value("n_groups", o.n_groups);
    o.topk_groups = m.value("topk_groups", o.topk_groups);
    o.expert_bias = m.value("expert_bias", o.expert_bias);
    o.first_dense_layers = m.value("first_dense_layers", o.first_dense_layers);
  }
  if (c.contains("rope_scaling")) {
    const json& s = c["rope_scaling"];
    RopeScaling& r = a.rope_scaling;
    r.type = s.at("type").get<std::string>();
    r.factor = s.at("factor").get<double>();
    r.original_max_position_embeddings =
        s.at("original_max_position_embeddings").get<int64_t>();
    r.low_freq_factor = s.value("low_freq_factor", r.low_freq_factor);
    r.high_freq_factor = s.value("high_freq_factor", r.high_freq_factor);
    r.beta_fast = s.value("beta_fast", r.beta_fast);
    r.beta_slow = s.value("beta_slow", r.beta_slow);
    r.truncate = s.value("truncate", r.truncate);
    if (s.contains("attention_factor")) {
      r.attention_factor = s["attention_factor"].get<double>();
    }
  }
  return a;
}

}  // namespace baton
