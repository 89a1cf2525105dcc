// The registered model families: their flavors' parameter counts against
// the published model cards, their built modules against parameter_shapes
// (which the dry run counts), the tied output, and config.json's fields.
// Their forward against transformers' own: tests/checkpoint/
// hf_families_test.cpp.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "models/common/transformer.h"
#include "models/model_spec.h"

namespace baton {
namespace {

const ModelSpec& family(const std::string& name) {
  register_builtin_models();
  return model_registry().get(name);
}

TEST(ModelFamilies, Llama32AndQwen3CountWhatTheirCardsSay) {
  const auto& llama = family("llama3").flavors;
  // Hugging Face's counts of meta-llama/Llama-3.2-1B and -3B (tied).
  EXPECT_EQ(llama.at("1B").num_params(), 1235814400);
  EXPECT_EQ(llama.at("3B").num_params(), 3212749824);
  EXPECT_EQ(llama.at("1B").ffn_hidden_dim(), 8192);
  EXPECT_EQ(llama.at("3B").ffn_hidden_dim(), 8192);
  // The 3.1 flavors have 3.0's shapes, RoPE scaled.
  EXPECT_EQ(llama.at("8B").num_params(), llama.at("3.0-8B").num_params());
  EXPECT_EQ(llama.at("8B").rope_scaling.type, "llama3");
  EXPECT_FALSE(llama.at("3.0-8B").rope_scaling.enabled());
  // Qwen3's model cards: total and non-embedding, in their rounding.
  const auto& qwen = family("qwen3").flavors;
  const std::tuple<const char*, double, double> cards[] = {
      {"0.6B", 0.6e9, 0.44e9},
      {"1.7B", 1.7e9, 1.4e9},
      {"4B", 4.0e9, 3.6e9},
      {"8B", 8.2e9, 6.95e9},
      {"14B", 14.8e9, 13.2e9},
      {"32B", 32.8e9, 31.2e9}};
  for (const auto& [name, total, non_embedding] : cards) {
    SCOPED_TRACE(name);
    const ModelArgs& a = qwen.at(name);
    const double n = static_cast<double>(a.num_params());
    const double embeddings =
        static_cast<double>(a.vocab_size * a.dim) * (a.tie_embeddings ? 1 : 2);
    EXPECT_NEAR(n, total, 0.05 * total);
    EXPECT_NEAR(n - embeddings, non_embedding, 0.03 * non_embedding);
  }
}

/// The built chunk's parameters (name, shape) in order.
std::vector<ParamShape> built(const ModelSpec& spec, const ModelArgs& args) {
  std::vector<ParamShape> out;
  for (const auto& item :
       spec.build(args, ChunkSpec{}, 1)->named_parameters()) {
    out.push_back({item.key(), item.value().sizes().vec()});
  }
  return out;
}

TEST(ModelFamilies, DeepSeekStyleCountsWhatItsCardsSay) {
  const auto& deepseek = family("deepseek_moe").flavors;
  // deepseek-ai/deepseek-moe-16b-base's card: 16.4B parameters, 2.8B
  // activated per token (its attention is multi-head, as here).
  const ModelArgs& moe16b = deepseek.at("16B");
  EXPECT_NEAR(static_cast<double>(moe16b.num_params()), 16.4e9, 0.02 * 16.4e9);
  EXPECT_NEAR(static_cast<double>(moe16b.active_params()), 2.8e9, 0.05 * 2.8e9);
  // DeepSeek-V3's experts: 58 MoE blocks of 256 routed experts, 3 x 7168 x
  // 2048 each, and one shared; GQA in place of its latent attention.
  const ModelArgs& v3 = deepseek.at("V3-GQA");
  const double experts = 58.0 * 257 * 3 * 7168 * 2048;
  EXPECT_GT(static_cast<double>(v3.num_params()), experts);
  EXPECT_LT(static_cast<double>(v3.num_params()), 1.05 * 671e9);
  EXPECT_EQ(v3.moe.first_dense_layers, 3);
  const ModelArgs& debug = deepseek.at("debugmodel");
  EXPECT_EQ(debug.moe.score_func, "sigmoid");
  EXPECT_TRUE(debug.moe.expert_bias);
  EXPECT_EQ(debug.moe.shared_experts, 1);
}

TEST(ModelFamilies, BuiltModulesAreWhatTheDryRunCounts) {
  for (const char* name : {"llama3", "qwen3", "qwen3_moe", "deepseek_moe"}) {
    SCOPED_TRACE(name);
    const ModelSpec& spec = family(name);
    ModelArgs args = spec.flavors.at("debugmodel");
    args.vocab_size = 50;
    for (const bool tied : {false, true}) {
      args.tie_embeddings = tied;
      const auto params = built(spec, args);
      EXPECT_EQ(params, spec.parameter_shapes(args, ChunkSpec{}));
      int64_t n = 0;
      for (const auto& [fqn, shape] : params) {
        n += c10::multiply_integers(shape);
      }
      EXPECT_EQ(n, spec.num_params(args));
    }
  }
  // Qwen3: q and k normed per head, heads of their own width.
  const ModelArgs q = family("qwen3").flavors.at("debugmodel");
  const auto shapes = family("qwen3").parameter_shapes(q, ChunkSpec{});
  EXPECT_NE(
      std::find(
          shapes.begin(),
          shapes.end(),
          ParamShape{"layers.0.attention.q_norm.weight", {q.head_dim()}}),
      shapes.end());
  EXPECT_NE(q.head_dim(), q.dim / q.n_heads);
}

TEST(ModelFamilies, TiedOutputIsTheEmbeddingsWeight) {
  ModelArgs args = family("llama3").flavors.at("debugmodel");
  args.vocab_size = 40;
  args.n_layers = 1;
  args.tie_embeddings = true;
  models::TransformerImpl model(args);
  model.init_weights(3);
  const auto tokens = torch::randint(0, 40, {2, 5}, torch::kLong);
  const auto logits = model.forward(tokens);
  logits.sum().backward();
  // One parameter, with the gradient of both uses.
  const auto params = model.named_parameters();
  EXPECT_EQ(params.find("output.weight"), nullptr);
  const at::Tensor& weight = params["tok_embeddings.weight"];
  ASSERT_TRUE(weight.grad().defined());
  // Rows of tokens never seen still get the output's gradient.
  EXPECT_GT(weight.grad().abs().sum().item<double>(), 0.0);
  // Its init is the output's (N(0, 1) would make sqrt(dim)-wide logits).
  EXPECT_LT(weight.std().item<double>(), 0.2);
  // The last pipeline stage holds a copy, initialised alike.
  models::TransformerImpl last(args, ChunkSpec{0, -1, false, true});
  last.init_weights(3);
  EXPECT_TRUE(
      torch::equal(last.named_parameters()["tok_embeddings.weight"], weight));
  EXPECT_EQ(
      family("llama3")
          .parameter_shapes(args, ChunkSpec{0, -1, false, true})
          .back()
          .first,
      "tok_embeddings.weight");
}

TEST(ModelFamilies, ConfigJsonReadsBothFormsAndNamesWhatItRefuses) {
  const HfFormat& hf = family("llama3").hf;
  const nlohmann::json older = {
      {"model_type", "llama"},
      {"hidden_size", 64},
      {"intermediate_size", 96},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"vocab_size", 100},
      {"rope_theta", 500000.0},
      {"rope_scaling",
       {{"type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}}},
      {"torch_dtype", "bfloat16"}};
  nlohmann::json newer = older;
  newer.erase("rope_theta");
  newer.erase("rope_scaling");
  newer.erase("torch_dtype");
  newer["dtype"] = "bfloat16";
  newer["rope_parameters"] = older["rope_scaling"];
  newer["rope_parameters"].erase("type");
  newer["rope_parameters"]["rope_type"] = "llama3";
  newer["rope_parameters"]["rope_theta"] = 500000.0;
  const ModelArgs a = hf.read_config(older, "old");
  const ModelArgs b = hf.read_config(newer, "new");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.rope_scaling.type, "llama3");
  EXPECT_EQ(a.kv_heads(), 4);
  EXPECT_EQ(a.ffn_hidden_dim(), 96);
  // Written and read back: the same model.
  EXPECT_EQ(hf.read_config(hf.write_config(a), "round trip"), a);
  const std::pair<nlohmann::json, std::string> refused[] = {
      {{{"hidden_act", "gelu"}}, "hidden_act is \"gelu\"; allowed: \"silu\""},
      {{{"attention_bias", true}}, "attention_bias is true; allowed: false"},
      {{{"model_type", "mistral"}}, "model_type is \"mistral\""},
      {{{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}}},
       "rope_scaling.rope_type is \"longrope\"; allowed: \"default\", "
       "\"llama3\""},
      {{{"num_key_value_heads", 3}}, "num_key_value_heads 3 does not divide"},
      {{{"hidden_size", "64"}}, "hidden_size is \"64\"; allowed: a number"},
  };
  for (const auto& [change, message] : refused) {
    SCOPED_TRACE(change.dump());
    nlohmann::json bad = older;
    bad.update(change);
    try {
      hf.read_config(bad, "DIR/config.json");
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(
          std::string(e.what()).find("DIR/config.json: "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what();
    }
  }
  // Qwen3 refuses sliding windows, and its head width defaults to 128.
  const HfFormat& qwen = family("qwen3").hf;
  nlohmann::json q = older;
  q["model_type"] = "qwen3";
  q.erase("rope_scaling");
  EXPECT_EQ(qwen.read_config(q, "q").head_dim(), 128);
  EXPECT_TRUE(qwen.read_config(q, "q").qk_norm);
  q["use_sliding_window"] = true;
  EXPECT_THROW(qwen.read_config(q, "q"), ConfigError);
}

}  // namespace
}  // namespace baton
