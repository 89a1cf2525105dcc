#include "models/common/hf_decoder.h"

#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "common/error.h"

namespace baton::models {

using json = nlohmann::json;

namespace {

/// Baton's and HF's names of a block's tensors, after `layers.N.` and
/// `model.layers.N.`.
const std::pair<const char*, const char*> kBlockNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"attention.q_norm.weight", "self_attn.q_norm.weight"},
    {"attention.k_norm.weight", "self_attn.k_norm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};
/// The same in an MoE block (transformers' Qwen3-MoE and DeepSeek-V3 names;
/// kExpertIndex: one tensor per expert).
const std::pair<const char*, const char*> kMoeNames[] = {
    {"moe.router.gate.weight", "mlp.gate.weight"},
    {"moe.expert_bias", "mlp.gate.e_score_correction_bias"},
    {"moe.experts.w1", "mlp.experts.{e}.gate_proj.weight"},
    {"moe.experts.w2", "mlp.experts.{e}.down_proj.weight"},
    {"moe.experts.w3", "mlp.experts.{e}.up_proj.weight"},
    {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
    {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
    {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
};
/// The same outside the blocks.
const std::pair<const char*, const char*> kRootNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

std::string hf_name(const std::string& fqn) {
  for (const auto& [baton, hf] : kRootNames) {
    if (fqn == baton) {
      return hf;
    }
  }
  if (!fqn.starts_with("layers.")) {
    return "";
  }
  const size_t dot = fqn.find('.', 7);
  if (dot == std::string::npos) {
    return "";
  }
  const std::string rest = fqn.substr(dot + 1);
  using Names = std::span<const std::pair<const char*, const char*>>;
  for (const Names names : {Names(kBlockNames), Names(kMoeNames)}) {
    for (const auto& [baton, hf] : names) {
      if (rest == baton) {
        return "model." + fqn.substr(0, dot + 1) + hf;
      }
    }
  }
  return "";
}

/// `weight` (heads * D, cols) with each head's rows reordered: from
/// (D/2, 2) to (2, D/2) (Baton -> HF) or back. A 1-D weight (a per-head
/// norm's, D) is one head of one column.
at::Tensor permute_heads(const at::Tensor& weight, int64_t heads, bool to_hf) {
  const at::Tensor w = weight.dim() == 1 ? weight.unsqueeze(1) : weight;
  const int64_t rows = w.size(0);
  const int64_t cols = w.size(1);
  TORCH_CHECK(
      heads > 0 && rows % (2 * heads) == 0,
      "[hf] the rotary rows: ",
      rows,
      " rows do not split into ",
      heads,
      " heads of pairs");
  const int64_t half = rows / heads / 2;
  const auto view = to_hf ? w.reshape({heads, half, 2, cols})
                          : w.reshape({heads, 2, half, cols});
  return view.transpose(1, 2).reshape(weight.sizes());
}

/// The heads whose rows RoPE rotates in `fqn` (wq: query heads, wk:
/// key/value heads, the per-head norms: one), or 0.
int64_t rotated_heads(const std::string& fqn, const ModelArgs& args) {
  if (fqn.ends_with(".attention.wq.weight")) {
    return args.n_heads;
  }
  if (fqn.ends_with(".attention.wk.weight")) {
    return args.kv_heads();
  }
  if (fqn.ends_with(".attention.q_norm.weight") ||
      fqn.ends_with(".attention.k_norm.weight")) {
    return 1;
  }
  return 0;
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

/// Reads config.json's fields, failing with "<where>: <field> ...".
class Fields {
 public:
  Fields(const json& c, std::string where) : c_(c), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(where_ + ": " + what);
  }
  bool has(const std::string& key) const {
    return c_.contains(key) && !c_[key].is_null();
  }
  double number(const std::string& key, std::optional<double> fallback) const {
    return number_in(c_, key, fallback, "");
  }
  double number_in(
      const json& object,
      const std::string& key,
      std::optional<double> fallback,
      const std::string& prefix) const {
    if (!object.contains(key) || object[key].is_null()) {
      if (!fallback) {
        fail(
            prefix + key + " is missing; a " + model_type_ +
            " config.json has it");
      }
      return *fallback;
    }
    if (!object[key].is_number()) {
      fail(prefix + key + " is " + object[key].dump() + "; allowed: a number");
    }
    return object[key].get<double>();
  }
  int64_t count(const std::string& key, std::optional<double> fallback) const {
    const double v = number(key, fallback);
    if (v <= 0 || v != std::floor(v) || v > 1e12) {
      fail(
          key + " is " + number_text(v) +
          "; allowed: a positive integer (at most 1e12)");
    }
    return static_cast<int64_t>(v);
  }
  /// `key` is absent, null or `allowed`.
  void only(const std::string& key, const json& allowed, const std::string& why)
      const {
    if (has(key) && c_[key] != allowed) {
      fail(
          key + " is " + c_[key].dump() + "; allowed: " + allowed.dump() +
          " (" + why + ")");
    }
  }
  void set_model_type(std::string t) {
    model_type_ = std::move(t);
  }
  const json& raw() const {
    return c_;
  }

 private:
  const json& c_;
  std::string where_;
  std::string model_type_;
};

/// RoPE's base and scaling from `rope_parameters` (transformers 5) or
/// `rope_theta` with `rope_scaling` (earlier; "type" before "rope_type").
void read_rope(
    const Fields& f,
    const DecoderHfOptions& o,
    int64_t max_positions,
    ModelArgs& a) {
  const json& c = f.raw();
  const bool newer = f.has("rope_parameters");
  const std::string where = newer ? "rope_parameters." : "rope_scaling.";
  json rope = json::object();
  if (newer) {
    rope = c["rope_parameters"];
  } else if (f.has("rope_scaling")) {
    rope = c["rope_scaling"];
  }
  if (!rope.is_object()) {
    f.fail(
        where.substr(0, where.size() - 1) + " is " + rope.dump() +
        "; allowed: an object");
  }
  a.rope_theta = newer ? f.number_in(rope, "rope_theta", std::nullopt, where)
                       : f.number("rope_theta", o.default_rope_theta);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (rope.contains(key) && rope[key].is_string()) {
      type = rope[key].get<std::string>();
      break;
    }
  }
  if (type == "default") {
    return;
  }
  if (type != "llama3" && type != "yarn") {
    f.fail(
        where + "rope_type is \"" + type +
        "\"; allowed: \"default\", \"llama3\" (Llama 3.1's), \"yarn\"");
  }
  RopeScaling& s = a.rope_scaling;
  s.type = type;
  const auto number = [&](const char* key, std::optional<double> fallback) {
    return f.number_in(rope, key, fallback, where);
  };
  s.factor = number("factor", std::nullopt);
  s.original_max_position_embeddings = static_cast<int64_t>(number(
      "original_max_position_embeddings",
      type == "yarn" ? std::optional<double>(static_cast<double>(max_positions))
                     : std::nullopt));
  if (type == "llama3") {
    s.low_freq_factor = number("low_freq_factor", std::nullopt);
    s.high_freq_factor = number("high_freq_factor", std::nullopt);
    if (s.high_freq_factor <= s.low_freq_factor) {
      f.fail(where + "high_freq_factor must exceed low_freq_factor");
    }
    return;
  }
  s.beta_fast = number("beta_fast", 32.0);
  s.beta_slow = number("beta_slow", 1.0);
  if (rope.contains("truncate") && rope["truncate"].is_boolean()) {
    s.truncate = rope["truncate"].get<bool>();
  }
  if (rope.contains("attention_factor") &&
      !rope["attention_factor"].is_null()) {
    s.attention_factor = number("attention_factor", std::nullopt);
  } else if (rope.contains("mscale") && rope.contains("mscale_all_dim")) {
    const auto mscale = [&](double m) {
      return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0;
    };
    s.attention_factor = mscale(number("mscale", std::nullopt)) /
                         mscale(number("mscale_all_dim", std::nullopt));
  }
}

ModelArgs read_config(
    const json& c, const std::string& where, const DecoderHfOptions& o) {
  Fields f(c, where);
  f.set_model_type(o.model_type);
  if (!c.is_object()) {
    f.fail("not a JSON object");
  }
  if (f.has("model_type") && c["model_type"] != o.model_type) {
    f.fail(
        "model_type is " + c["model_type"].dump() + "; allowed: \"" +
        o.model_type + "\" (model.name chooses the family: its model_type)");
  }
  f.only("hidden_act", "silu", "Baton's feed-forward is SwiGLU");
  f.only("attention_bias", false, "Baton's projections have no bias");
  if (o.mlp_bias_field) {
    f.only("mlp_bias", false, "Baton's projections have no bias");
  }
  if (o.sliding_window_field) {
    f.only("use_sliding_window", false, "Baton's attention is full");
  }
  if (f.has("partial_rotary_factor") &&
      f.number("partial_rotary_factor", 1.0) != 1.0) {
    f.fail(
        "partial_rotary_factor is " + c["partial_rotary_factor"].dump() +
        "; allowed: 1 (RoPE over the whole head)");
  }
  ModelArgs a;
  a.dim = f.count("hidden_size", std::nullopt);
  a.n_layers = f.count("num_hidden_layers", std::nullopt);
  a.n_heads = f.count("num_attention_heads", std::nullopt);
  a.n_kv_heads = f.count("num_key_value_heads", static_cast<double>(a.n_heads));
  const auto head_dim = o.default_head_dim
                            ? static_cast<double>(*o.default_head_dim)
                            : static_cast<double>(a.dim / a.n_heads);
  a.attention_head_dim = f.count("head_dim", head_dim);
  a.ffn_hidden = f.count("intermediate_size", std::nullopt);
  a.vocab_size = f.count("vocab_size", std::nullopt);
  a.norm_eps = f.number("rms_norm_eps", 1e-6);
  a.max_seq_len = f.count(
      "max_position_embeddings",
      static_cast<double>(o.default_max_position_embeddings));
  read_rope(f, o, a.max_seq_len, a);
  a.qk_norm = o.qk_norm;
  if (f.has("tie_word_embeddings")) {
    if (!c["tie_word_embeddings"].is_boolean()) {
      f.fail(
          "tie_word_embeddings is " + c["tie_word_embeddings"].dump() +
          "; allowed: true, false");
    }
    a.tie_embeddings = c["tie_word_embeddings"].get<bool>();
  }
  if (a.n_heads % *a.n_kv_heads != 0) {
    f.fail(
        "num_key_value_heads " + std::to_string(*a.n_kv_heads) +
        " does not divide num_attention_heads " + std::to_string(a.n_heads));
  }
  if (*a.attention_head_dim % 2 != 0) {
    f.fail(
        "head_dim " + std::to_string(*a.attention_head_dim) +
        " is odd; allowed: an even width (RoPE rotates pairs)");
  }
  if (o.qwen_moe) {
    MoeArgs& m = a.moe;
    // The hub's config.json says num_experts; transformers 5 writes
    // num_local_experts.
    m.num_experts = f.has("num_experts")
                        ? f.count("num_experts", std::nullopt)
                        : f.count("num_local_experts", std::nullopt);
    m.top_k = f.count("num_experts_per_tok", std::nullopt);
    m.expert_hidden = f.count("moe_intermediate_size", std::nullopt);
    m.score_func = "softmax";
    m.route_norm = false;  // Qwen3MoeConfig's default
    if (f.has("norm_topk_prob")) {
      if (!c["norm_topk_prob"].is_boolean()) {
        f.fail(
            "norm_topk_prob is " + c["norm_topk_prob"].dump() +
            "; allowed: true, false");
      }
      m.route_norm = c["norm_topk_prob"].get<bool>();
    }
    f.only(
        "decoder_sparse_step",
        1,
        "Baton's MoE models have experts in "
        "every block");
    if (f.has("mlp_only_layers") &&
        !(c["mlp_only_layers"].is_array() && c["mlp_only_layers"].empty())) {
      f.fail(
          "mlp_only_layers is " + c["mlp_only_layers"].dump() +
          "; allowed: [] (experts in every block)");
    }
    if (m.top_k > m.num_experts) {
      f.fail(
          "num_experts_per_tok " + std::to_string(m.top_k) +
          " exceeds num_experts " + std::to_string(m.num_experts));
    }
  }
  return a;
}

json write_config(const ModelArgs& a, const DecoderHfOptions& o) {
  json rope_scaling = nullptr;
  const RopeScaling& s = a.rope_scaling;
  if (s.enabled()) {
    rope_scaling = {
        {"rope_type", s.type},
        {"factor", s.factor},
        {"original_max_position_embeddings",
         s.original_max_position_embeddings}};
    if (s.type == "llama3") {
      rope_scaling["low_freq_factor"] = s.low_freq_factor;
      rope_scaling["high_freq_factor"] = s.high_freq_factor;
    } else {
      rope_scaling["beta_fast"] = s.beta_fast;
      rope_scaling["beta_slow"] = s.beta_slow;
      rope_scaling["truncate"] = s.truncate;
      if (s.attention_factor) {
        rope_scaling["attention_factor"] = *s.attention_factor;
      }
    }
  }
  json c = {
      {"architectures", {o.architecture}},
      {"model_type", o.model_type},
      {"hidden_size", a.dim},
      {"num_hidden_layers", a.n_layers},
      {"num_attention_heads", a.n_heads},
      {"num_key_value_heads", a.kv_heads()},
      {"head_dim", a.head_dim()},
      {"intermediate_size", a.ffn_hidden_dim()},
      {"vocab_size", a.vocab_size},
      {"rms_norm_eps", a.norm_eps},
      {"rope_theta", a.rope_theta},
      {"rope_scaling", rope_scaling},
      {"max_position_embeddings", a.max_seq_len},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"tie_word_embeddings", a.tie_embeddings}};
  if (o.mlp_bias_field) {
    c["mlp_bias"] = false;
  }
  if (o.sliding_window_field) {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
  }
  if (o.qwen_moe) {
    c["num_experts"] = a.moe.num_experts;
    c["num_experts_per_tok"] = a.moe.top_k;
    c["moe_intermediate_size"] = a.moe.expert_hidden;
    c["norm_topk_prob"] = a.moe.route_norm;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
  }
  return c;
}

}  // namespace

HfFormat decoder_hf_format(const DecoderHfOptions& options) {
  HfFormat f;
  f.model_type = options.model_type;
  f.architecture = options.architecture;
  f.read_config = [options](const json& c, const std::string& where) {
    return read_config(c, where, options);
  };
  f.write_config = [options](const ModelArgs& a) {
    return write_config(a, options);
  };
  f.name = hf_name;
  f.convert = [](const std::string& fqn,
                 const at::Tensor& weight,
                 const ModelArgs& args,
                 bool to_hf) {
    const int64_t heads = rotated_heads(fqn, args);
    return heads > 0 ? permute_heads(weight, heads, to_hf) : weight;
  };
  return f;
}

std::optional<std::string> hf_shape_difference(
    const ModelArgs& file, const ModelArgs& model) {
  struct Field {
    const char* hf;
    const char* baton;
    double file;
    double model;
  };
  const Field fields[] = {
      {"hidden_size", "dim", double(file.dim), double(model.dim)},
      {"num_hidden_layers",
       "n_layers",
       double(file.n_layers),
       double(model.n_layers)},
      {"num_attention_heads",
       "n_heads",
       double(file.n_heads),
       double(model.n_heads)},
      {"num_key_value_heads",
       "n_kv_heads",
       double(file.kv_heads()),
       double(model.kv_heads())},
      {"head_dim",
       "head_dim",
       double(file.head_dim()),
       double(model.head_dim())},
      {"intermediate_size",
       "ffn_hidden_dim",
       double(file.ffn_hidden_dim()),
       double(model.ffn_hidden_dim())},
      {"vocab_size",
       "vocab_size (it follows model.tokenizer)",
       double(file.vocab_size),
       double(model.vocab_size)},
      {"rms_norm_eps", "norm_eps", file.norm_eps, model.norm_eps},
      {"rope_theta", "rope_theta", file.rope_theta, model.rope_theta},
  };
  for (const Field& f : fields) {
    if (std::abs(f.file - f.model) > 1e-9 * std::abs(f.model)) {
      return std::string(f.hf) + " is " + number_text(f.file) +
             ", but the model has " + f.baton + " " + number_text(f.model);
    }
  }
  const MoeArgs& fm = file.moe;
  const MoeArgs& mm = model.moe;
  if (fm.num_experts != mm.num_experts || fm.top_k != mm.top_k ||
      fm.expert_hidden != mm.expert_hidden) {
    return "the experts are " + std::to_string(fm.num_experts) + " (top " +
           std::to_string(fm.top_k) + ", hidden " +
           std::to_string(fm.expert_hidden) + "), but the model's are " +
           std::to_string(mm.num_experts) + " (top " +
           std::to_string(mm.top_k) + ", hidden " +
           std::to_string(mm.expert_hidden) + ")";
  }
  if (fm.route_norm != mm.route_norm) {
    return std::string("norm_topk_prob is ") +
           (fm.route_norm ? "true" : "false") + ", but the model's is " +
           (mm.route_norm ? "true" : "false");
  }
  if (file.tie_embeddings != model.tie_embeddings) {
    const auto text = [](bool b) { return b ? "true" : "false"; };
    return std::string("tie_word_embeddings is ") + text(file.tie_embeddings) +
           ", but the model has tie_embeddings " + text(model.tie_embeddings);
  }
  if (!(file.rope_scaling == model.rope_scaling)) {
    const auto text = [](const RopeScaling& s) {
      return s.enabled()
                 ? "\"" + s.type + "\" (factor " + number_text(s.factor) +
                       ", original context " +
                       std::to_string(s.original_max_position_embeddings) + ")"
                 : std::string("none");
    };
    return "the RoPE scaling is " + text(file.rope_scaling) +
           ", but the model's is " + text(model.rope_scaling);
  }
  return std::nullopt;
}

}  // namespace baton::models
