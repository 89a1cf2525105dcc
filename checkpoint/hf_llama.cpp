#include "checkpoint/hf_llama.h"

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/error.h"

namespace baton::hf_llama {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kKey = "checkpoint.initial_load_hf";

/// Baton's and HF's names of a block's tensors, after `layers.N.` and
/// `model.layers.N.`.
const std::pair<const char*, const char*> kBlockNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};
/// The same outside the blocks.
const std::pair<const char*, const char*> kRootNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

/// The heads whose rows RoPE rotates in `fqn` (wq: query heads, wk:
/// key/value heads), or 0.
int64_t rotated_heads(const std::string& fqn, const Shape& shape) {
  if (fqn.ends_with(".attention.wq.weight")) {
    return shape.num_attention_heads;
  }
  if (fqn.ends_with(".attention.wk.weight")) {
    return shape.num_key_value_heads;
  }
  return 0;
}

/// `weight` (heads * D, dim) with each head's rows reordered: from
/// (D/2, 2) to (2, D/2) (Baton -> HF) or back.
at::Tensor permute_heads(const at::Tensor& weight, int64_t heads, bool to_hf) {
  const int64_t rows = weight.size(0);
  const int64_t cols = weight.size(1);
  TORCH_CHECK(
      heads > 0 && rows % (2 * heads) == 0,
      "[checkpoint] the rotary rows: ",
      rows,
      " rows do not split into ",
      heads,
      " heads of pairs");
  const int64_t half = rows / heads / 2;
  const auto view = to_hf ? weight.reshape({heads, half, 2, cols})
                          : weight.reshape({heads, 2, half, cols});
  return view.transpose(1, 2).reshape({rows, cols});
}

[[noreturn]] void config_problem(
    const fs::path& file, const std::string& what) {
  throw ConfigError(kKey + ": " + file.string() + ": " + what);
}

/// `config[key]` as a number, `fallback` when absent (LlamaConfig's
/// default), or fails naming the key.
double number_field(
    const json& config,
    const fs::path& file,
    const std::string& key,
    std::optional<double> fallback) {
  if (!config.contains(key) || config[key].is_null()) {
    if (!fallback) {
      config_problem(file, key + " is missing; a Llama config.json has it");
    }
    return *fallback;
  }
  if (!config[key].is_number()) {
    config_problem(
        file, key + " is " + config[key].dump() + "; allowed: a number");
  }
  return config[key].get<double>();
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

/// Each shape field of `c` (absent ones at LlamaConfig's defaults) equals
/// the model's.
void check_shape_fields(const json& c, const fs::path& file, const Shape& s) {
  const int64_t heads = s.num_attention_heads;
  const std::vector<
      std::tuple<std::string, double, std::optional<double>, std::string>>
      fields = {
          {"hidden_size", s.hidden_size, std::nullopt, "dim"},
          {"num_hidden_layers", s.num_hidden_layers, std::nullopt, "n_layers"},
          {"num_attention_heads", heads, std::nullopt, "n_heads"},
          {"num_key_value_heads",
           s.num_key_value_heads,
           number_field(c, file, "num_attention_heads", std::nullopt),
           "n_kv_heads"},
          {"intermediate_size",
           s.intermediate_size,
           std::nullopt,
           "ffn_hidden_dim"},
          {"vocab_size",
           s.vocab_size,
           std::nullopt,
           "vocab_size (it follows model.tokenizer)"},
          {"head_dim",
           s.head_dim(),
           number_field(c, file, "hidden_size", std::nullopt) /
               number_field(c, file, "num_attention_heads", std::nullopt),
           "dim / n_heads"},
          {"rms_norm_eps", s.rms_norm_eps, 1e-6, "norm_eps"},
          {"rope_theta", s.rope_theta, 10000.0, "rope_theta"},
      };
  for (const auto& [key, model, fallback, baton] : fields) {
    const double v = number_field(c, file, key, fallback);
    if (std::abs(v - model) > 1e-9 * std::abs(model)) {
      config_problem(
          file,
          key + " is " + number_text(v) + ", but the model (" + s.model +
              ") has " + baton + " " + number_text(model) +
              "; allowed: " + number_text(model) +
              "; choose the model.flavor (and tokenizer) the checkpoint was "
              "trained with");
    }
  }
}

}  // namespace

Shape shape_of(const json& c) {
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
          std::string("[checkpoint] the model's config has no '") + key +
          "': the Hugging Face layout needs a Llama model");
    }
  }
  Shape s;
  s.hidden_size = c["dim"].get<int64_t>();
  s.num_hidden_layers = c["n_layers"].get<int64_t>();
  s.num_attention_heads = c["n_heads"].get<int64_t>();
  s.num_key_value_heads = c["n_kv_heads"].get<int64_t>();
  s.intermediate_size = c["ffn_hidden_dim"].get<int64_t>();
  s.vocab_size = c["vocab_size"].get<int64_t>();
  s.rms_norm_eps = c["norm_eps"].get<double>();
  s.rope_theta = c["rope_theta"].get<double>();
  s.model = c.value("model", std::string("llama3")) + " " +
            c.value("flavor", std::string());
  return s;
}

json config_json(
    const Shape& s, const std::string& torch_dtype, const json& baton) {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", s.hidden_size},
      {"num_hidden_layers", s.num_hidden_layers},
      {"num_attention_heads", s.num_attention_heads},
      {"num_key_value_heads", s.num_key_value_heads},
      {"head_dim", s.head_dim()},
      {"intermediate_size", s.intermediate_size},
      {"vocab_size", s.vocab_size},
      {"rms_norm_eps", s.rms_norm_eps},
      {"rope_theta", s.rope_theta},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", false},
      {"torch_dtype", torch_dtype},
      {"baton", baton}};
}

json index_json(
    const std::vector<SafetensorsEntry>& entries, const std::string& file) {
  json index = {
      {"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  uint64_t total = 0;
  for (const auto& e : entries) {
    total += e.end - e.begin;
    index["weight_map"][e.name] = file;
  }
  index["metadata"]["total_size"] = total;
  return index;
}

void check_folder(const fs::path& dir, const Shape& s) {
  const fs::path file = dir / kConfigFile;
  std::ifstream in(file);
  if (!in) {
    throw ConfigError(
        kKey + ": " + dir.string() + ": has no " + kConfigFile +
        " (or it cannot be read); allowed: a Hugging Face Llama folder "
        "(config.json, model.safetensors or its shards and index)");
  }
  json c;
  try {
    c = json::parse(in);
  } catch (const std::exception& e) {
    config_problem(file, std::string("not valid JSON: ") + e.what());
  }
  if (!c.is_object()) {
    config_problem(file, "not a JSON object");
  }
  if (c.contains("model_type") && c["model_type"] != "llama") {
    config_problem(
        file,
        "model_type is " + c["model_type"].dump() +
            "; allowed: \"llama\" (Baton's llama3 is that architecture)");
  }
  check_shape_fields(c, file, s);
  const json tied = c.value("tie_word_embeddings", json(false));
  if (!tied.is_null() && tied != false) {
    config_problem(
        file,
        "tie_word_embeddings is " + tied.dump() +
            "; allowed: false (Baton's llama3 has an output projection of "
            "its own)");
  }
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
    config_problem(
        file,
        "rope_scaling is " + c["rope_scaling"].dump() +
            "; allowed: null (Baton's RoPE has no scaling)");
  }
  const json act = c.value("hidden_act", json("silu"));
  if (act != "silu") {
    config_problem(file, "hidden_act is " + act.dump() + "; allowed: \"silu\"");
  }
  if (!fs::exists(dir / kIndexFile) && !fs::exists(dir / kSingleFile)) {
    throw ConfigError(
        kKey + ": " + dir.string() + ": has neither " + kIndexFile + " nor " +
        kSingleFile + "; allowed: a Hugging Face Llama folder");
  }
}

WeightMap read_weight_map(const fs::path& dir) {
  WeightMap map;
  const fs::path index = dir / kIndexFile;
  if (!fs::exists(index)) {
    map.listing = (dir / kSingleFile).string();
    const SafetensorsReader reader(map.listing);
    for (const auto& e : reader.entries()) {
      map.files[e.name] = kSingleFile;
    }
    return map;
  }
  map.listing = index.string();
  const auto bad = [&](const std::string& what) {
    throw CheckpointError("[checkpoint] " + map.listing + ": " + what);
  };
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    bad("has no \"weight_map\" object (name -> file)");
  }
  for (const auto& [name, file] : j["weight_map"].items()) {
    // Shards sit beside the index: a path elsewhere is not one.
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos) {
      bad("tensor '" + name + "' maps to " + file.dump() +
          "; allowed: a file name in the folder");
    }
    map.files[name] = file.get<std::string>();
  }
  return map;
}

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
  for (const auto& [baton, hf] : kBlockNames) {
    if (rest == baton) {
      return "model." + fqn.substr(0, dot + 1) + hf;
    }
  }
  return "";
}

bool ignorable(const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq");
}

at::Tensor to_hf(
    const std::string& fqn, const at::Tensor& weight, const Shape& shape) {
  const int64_t heads = rotated_heads(fqn, shape);
  return heads > 0 ? permute_heads(weight, heads, true) : weight;
}

at::Tensor from_hf(
    const std::string& fqn, const at::Tensor& weight, const Shape& shape) {
  const int64_t heads = rotated_heads(fqn, shape);
  return heads > 0 ? permute_heads(weight, heads, false) : weight;
}

}  // namespace baton::hf_llama
