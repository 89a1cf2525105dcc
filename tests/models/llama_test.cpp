#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/common/transformer.h"
#include "models/llama3/llama3.h"
#include "models/model_spec.h"

namespace baton::models {
namespace {

ModelArgs tiny_args() {
  ModelArgs args;
  args.dim = 64;
  args.n_layers = 4;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 50;
  args.multiple_of = 32;
  return args;
}

std::vector<std::string> names(torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& item : m.named_parameters()) {
    out.push_back(item.key());
  }
  return out;
}

TEST(LlamaArgs, ParameterCountsMatchMetasPublishedModels) {
  // Meta's model cards: 8.03B, 70.6B, 406B (vocabulary 128256, untied).
  const auto& flavors = llama3::flavors();
  EXPECT_EQ(flavors.at("8B").num_params(), 8030261248);
  EXPECT_EQ(flavors.at("70B").num_params(), 70553706496);
  EXPECT_EQ(flavors.at("405B").num_params(), 405853388800);
  EXPECT_EQ(flavors.at("8B").ffn_hidden_dim(), 14336);
  EXPECT_EQ(flavors.at("70B").ffn_hidden_dim(), 28672);
  EXPECT_EQ(flavors.at("405B").ffn_hidden_dim(), 53248);
}

TEST(LlamaArgs, ParameterCountMatchesTheBuiltModel) {
  auto args = tiny_args();
  TransformerImpl model(args);
  int64_t n = 0;
  for (const auto& p : model.parameters()) {
    n += p.numel();
  }
  EXPECT_EQ(n, args.num_params());
  auto debug = llama3::flavors().at("debugmodel");
  debug.vocab_size = 258;
  TransformerImpl debug_model(debug);
  n = 0;
  for (const auto& p : debug_model.parameters()) {
    n += p.numel();
  }
  EXPECT_EQ(n, debug.num_params());
}

TEST(LlamaArgs, FlopsPerTokenFollowsTorchtitansCount) {
  const auto& b8 = llama3::flavors().at("8B");
  const double non_embedding = 8030261248.0 - 128256.0 * 4096.0;
  EXPECT_DOUBLE_EQ(
      b8.flops_per_token(8192),
      6.0 * non_embedding + 12.0 * 32 * 32 * 128 * 8192);
}

TEST(LlamaArgs, RejectsInconsistentShapes) {
  auto args = tiny_args();
  args.n_kv_heads = 3;
  EXPECT_THROW(
      {
        try {
          args.validate();
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(
              std::string(e.what()).find("n_kv_heads 3"), std::string::npos);
          throw;
        }
      },
      std::invalid_argument);
}

TEST(Llama, FullyQualifiedNamesAreMetas) {
  TransformerImpl model(tiny_args());
  const auto n = names(model);
  for (const char* expected :
       {"tok_embeddings.weight",
        "layers.3.attention.wq.weight",
        "layers.3.attention.wk.weight",
        "layers.3.attention.wv.weight",
        "layers.3.attention.wo.weight",
        "layers.3.feed_forward.w1.weight",
        "layers.3.feed_forward.w2.weight",
        "layers.3.feed_forward.w3.weight",
        "layers.3.attention_norm.weight",
        "layers.3.ffn_norm.weight",
        "norm.weight",
        "output.weight"}) {
    EXPECT_NE(std::find(n.begin(), n.end(), expected), n.end()) << expected;
  }
  EXPECT_EQ(n.size(), 2 + 4 * 9 + 1u);
}

TEST(Llama, ChunksKeepGlobalNames) {
  ChunkSpec middle;
  middle.first_layer = 1;
  middle.end_layer = 3;
  middle.embedding = false;
  middle.output = false;
  TransformerImpl chunk(tiny_args(), middle);
  const auto n = names(chunk);
  EXPECT_EQ(n.front(), "layers.1.attention.wq.weight");
  EXPECT_EQ(n.back(), "layers.2.ffn_norm.weight");
  EXPECT_EQ(n.size(), 2 * 9u);
}

TEST(Llama, RejectsBadChunks) {
  ChunkSpec beyond;
  beyond.end_layer = 9;
  EXPECT_THROW(TransformerImpl(tiny_args(), beyond), std::invalid_argument);
  ChunkSpec empty;
  empty.first_layer = 2;
  empty.end_layer = 2;
  empty.embedding = false;
  empty.output = false;
  EXPECT_THROW(TransformerImpl(tiny_args(), empty), std::invalid_argument);
}

TEST(Llama, InitIsLayoutIndependentAndSeeded) {
  const auto args = tiny_args();
  TransformerImpl whole(args);
  whole.init_weights(7);
  const auto whole_params = whole.named_parameters();

  // The same model as three chunks: embedding + layer 0, layers 1-2, layer 3
  // + output.
  std::vector<ChunkSpec> specs(3);
  specs[0] = {0, 1, true, false};
  specs[1] = {1, 3, false, false};
  specs[2] = {3, 4, false, true};
  size_t seen = 0;
  for (const auto& spec : specs) {
    TransformerImpl chunk(args, spec);
    chunk.init_weights(7);
    for (const auto& item : chunk.named_parameters()) {
      ASSERT_TRUE(whole_params.contains(item.key())) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), whole_params[item.key()]))
          << item.key();
      ++seen;
    }
  }
  EXPECT_EQ(seen, whole_params.size());

  TransformerImpl other_seed(args);
  other_seed.init_weights(8);
  EXPECT_FALSE(torch::equal(
      other_seed.named_parameters()["layers.0.attention.wq.weight"],
      whole_params["layers.0.attention.wq.weight"]));
  // Different parameters draw different values.
  EXPECT_FALSE(torch::equal(
      whole_params["layers.0.attention.wq.weight"].flatten().slice(0, 0, 64),
      whole_params["layers.1.attention.wq.weight"].flatten().slice(0, 0, 64)));
}

TEST(Llama, InitFollowsTorchtitansScales) {
  auto args = tiny_args();
  args.dim = 256;
  args.n_heads = 8;
  TransformerImpl model(args);
  model.init_weights(0);
  auto p = model.named_parameters();
  EXPECT_NEAR(p["tok_embeddings.weight"].std().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(
      p["layers.0.attention.wq.weight"].std().item<double>(), 0.02, 0.002);
  // Depth-scaled output projections: 0.02 / sqrt(2 * (layer + 1)).
  EXPECT_NEAR(
      p["layers.3.feed_forward.w2.weight"].std().item<double>(),
      0.02 / std::sqrt(8.0),
      0.001);
  EXPECT_TRUE(torch::equal(p["norm.weight"], torch::ones({256})));
  const double out_std = 1.0 / 16.0;
  EXPECT_LE(p["output.weight"].abs().max().item<double>(), 3 * out_std + 1e-6);
}

TEST(Llama, ChunkedForwardEqualsWholeForward) {
  const auto args = tiny_args();
  TransformerImpl whole(args);
  whole.init_weights(1);
  TransformerImpl first(args, {0, 2, true, false});
  TransformerImpl second(args, {2, 4, false, true});
  first.init_weights(1);
  second.init_weights(1);
  const auto tokens = torch::randint(0, args.vocab_size, {2, 12}, torch::kLong);
  const auto expected = whole.forward(tokens);
  const auto hidden = first.forward(tokens);
  EXPECT_EQ(hidden.sizes(), (std::vector<int64_t>{2, 12, 64}));
  const auto logits = second.forward(hidden);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 12, 50}));
  EXPECT_TRUE(torch::allclose(logits, expected, 1e-5, 1e-5));
}

TEST(Llama, AttentionIsCausal) {
  const auto args = tiny_args();
  TransformerImpl model(args);
  model.init_weights(2);
  auto tokens = torch::randint(0, args.vocab_size, {1, 10}, torch::kLong);
  const auto before = model.forward(tokens);
  tokens[0][7] = (tokens[0][7].item<int64_t>() + 1) % args.vocab_size;
  const auto after = model.forward(tokens);
  EXPECT_TRUE(
      torch::allclose(before.slice(1, 0, 7), after.slice(1, 0, 7), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(
      before.slice(1, 7, 10), after.slice(1, 7, 10), 1e-4, 1e-4));
}

TEST(Llama, AttentionMatchesAHandWrittenReference) {
  // Grouped-query attention written out with explicit loops over heads and a
  // -inf mask, against the module's batched version.
  auto args = tiny_args();
  AttentionImpl attention(args);
  const int64_t T = 6, H = 4, KV = 2, D = 16;
  const auto x = torch::randn({1, T, 64});
  RopeTables rope;
  rope.cos = torch::ones({T, D / 2});
  rope.sin = torch::zeros({T, D / 2});  // identity rotation
  const auto out = attention.forward(x, rope);

  const auto q = attention.wq(x).view({T, H, D});
  const auto k = attention.wk(x).view({T, KV, D});
  const auto v = attention.wv(x).view({T, KV, D});
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / KV);
    auto scores = torch::mm(q.select(1, h), k.select(1, g).t()) / std::sqrt(D);
    scores.masked_fill_(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
    heads.push_back(torch::mm(scores.softmax(-1), v.select(1, g)));
  }
  const auto expected = attention.wo(torch::cat(heads, 1)).unsqueeze(0);
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-5));
}

TEST(Llama, AttentionRunsOnASliceOfItsHeads) {
  // What a tensor-parallel applier does: split the query and key/value heads
  // (rows of wq, wk, wv) and the matching columns of wo over two modules.
  // The head counts come from the tensors, so each slice runs as is, and the
  // slices' outputs sum to the whole module's.
  const auto args = tiny_args();  // dim 64, 4 query heads, 2 kv heads
  const int64_t D = args.head_dim(), T = 7;
  AttentionImpl whole(args);
  const auto x = torch::randn({2, T, args.dim});
  const auto angles = torch::outer(
      torch::arange(T, torch::kFloat), torch::rand({D / 2}));  // (T, D/2)
  const RopeTables rope{angles.cos(), angles.sin()};
  const auto expected = whole.forward(x, rope);
  at::Tensor sum;
  for (int64_t r = 0; r < 2; ++r) {
    AttentionImpl slice(args);
    torch::NoGradGuard no_grad;
    // Query heads 2r, 2r+1 share kv head r.
    slice.wq->weight.set_data(whole.wq->weight.narrow(0, 2 * r * D, 2 * D));
    slice.wk->weight.set_data(whole.wk->weight.narrow(0, r * D, D));
    slice.wv->weight.set_data(whole.wv->weight.narrow(0, r * D, D));
    slice.wo->weight.set_data(whole.wo->weight.narrow(1, 2 * r * D, 2 * D));
    const auto part = slice.forward(x, rope);
    sum = sum.defined() ? sum + part : part;
  }
  EXPECT_TRUE(torch::allclose(sum, expected, 1e-5, 1e-5))
      << (sum - expected).abs().max().item<double>();
  // A slice whose query heads do not group over its kv heads is refused.
  AttentionImpl odd(args);
  {
    torch::NoGradGuard no_grad;
    odd.wq->weight.set_data(whole.wq->weight.narrow(0, 0, 3 * D));
  }
  EXPECT_THROW(odd.forward(x, rope), c10::Error);
}

/// Logs "<tag> in" and "<tag> out" around the unit; scales the output.
class LoggingWrapper final : public UnitWrapper {
 public:
  LoggingWrapper(std::string tag, std::vector<std::string>& log, double scale)
      : tag_(std::move(tag)), log_(log), scale_(scale) {}
  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    log_.push_back(tag_ + " in");
    auto out = run(input) * scale_;
    log_.push_back(tag_ + " out");
    return out;
  }

 private:
  std::string tag_;
  std::vector<std::string>& log_;
  double scale_;
};

TEST(Llama, UnitsRunThroughTheirWrappersInForwardOrder) {
  const auto args = tiny_args();
  TransformerImpl chunk(args, ChunkSpec{1, 3, true, true});
  chunk.init_weights(4);
  EXPECT_EQ(
      chunk.unit_names(),
      (std::vector<std::string>{"layers.1", "layers.2", ""}));
  const auto tokens = torch::randint(0, args.vocab_size, {2, 5}, torch::kLong);
  const auto plain = chunk.forward(tokens);
  std::vector<std::string> log;
  for (const std::string name : {"layers.1", "layers.2", ""}) {
    chunk.wrap_unit(
        name,
        std::make_shared<LoggingWrapper>(
            (name.empty() ? "root" : name) + " inner", log, 1.0));
  }
  chunk.wrap_unit(
      "layers.2", std::make_shared<LoggingWrapper>("layers.2 outer", log, 1.0));
  const auto wrapped = chunk.forward(tokens);
  EXPECT_TRUE(torch::allclose(wrapped, plain, 1e-6, 1e-6));
  EXPECT_EQ(
      log,
      (std::vector<std::string>{
          "root inner in",
          "layers.1 inner in",
          "layers.1 inner out",
          "layers.2 outer in",
          "layers.2 inner in",
          "layers.2 inner out",
          "layers.2 outer out",
          "root inner out"}));
  // A wrapper's output is what the next unit gets.
  TransformerImpl scaled(args, ChunkSpec{1, 3, true, true});
  scaled.init_weights(4);
  scaled.wrap_unit("", std::make_shared<LoggingWrapper>("root", log, 2.0));
  EXPECT_TRUE(torch::allclose(scaled.forward(tokens), 2 * plain, 1e-5, 1e-5));
  try {
    chunk.wrap_unit("layers.0", std::make_shared<LoggingWrapper>("", log, 1));
    ADD_FAILURE() << "a unit the chunk does not hold was wrapped";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "[model] wrap_unit: 'layers.0' is not a unit of this chunk; allowed: "
        "layers.1, layers.2, \"\" (the root)");
  }
}

TEST(Llama, RopeRotatesPairsByPositionTimesFrequency) {
  // Position 1, pair 0 rotates by 1 radian (frequency theta^0 = 1).
  ModelArgs args = tiny_args();
  const auto x = torch::zeros({1, 2, 1, 4});
  x[0][1][0][0] = 1.0;  // pair 0 = (1, 0) at position 1
  RopeTables rope;
  const auto angles = torch::outer(
      torch::arange(2, torch::kFloat64),
      torch::pow(args.rope_theta, -torch::arange(0, 2, torch::kFloat64) * 0.5));
  rope.cos = angles.cos().to(torch::kFloat32);
  rope.sin = angles.sin().to(torch::kFloat32);
  const auto y = apply_rope(x, rope);
  EXPECT_NEAR(y[0][1][0][0].item<double>(), std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[0][1][0][1].item<double>(), std::sin(1.0), 1e-6);
  EXPECT_NEAR(y.norm().item<double>(), 1.0, 1e-6);  // rotations keep norms
}

TEST(Llama, RopeTablesStartAtTheirFirstPosition) {
  // A rank holding positions 5..11 of a sequence (context parallel) gets
  // exactly the rows 5..11 of the whole sequence's tables.
  const ModelArgs args = tiny_args();
  const auto whole = rope_tables(args, 0, 12, torch::kCPU);
  const auto shard = rope_tables(args, 5, 7, torch::kCPU);
  EXPECT_EQ(shard.first_position, 5);
  EXPECT_TRUE(torch::equal(shard.cos, whole.cos.slice(0, 5, 12)));
  EXPECT_TRUE(torch::equal(shard.sin, whole.sin.slice(0, 5, 12)));
}

TEST(Llama, APositionOffsetRotatesByTheWholeSequencesPositions) {
  // Attention sees only relative positions, so shifting every position by
  // the same offset leaves the logits as they were, up to rounding; the
  // offset is used (the tables are rebuilt for it), and setting it back
  // gives the first logits exactly.
  const auto args = tiny_args();
  TransformerImpl model(args);
  model.init_weights(3);
  const auto tokens = torch::randint(0, args.vocab_size, {2, 9}, torch::kLong);
  const auto at_zero = model.forward(tokens);
  model.position_offset = 1000;
  const auto shifted = model.forward(tokens);
  EXPECT_TRUE(torch::allclose(shifted, at_zero, 1e-4, 1e-4));
  EXPECT_FALSE(torch::equal(shifted, at_zero));
  model.position_offset = 0;
  EXPECT_TRUE(torch::equal(model.forward(tokens), at_zero));
}

TEST(ModelSpec, RegistryBuildsFlavorsAndListsThemOnError) {
  register_builtin_models();
  const auto& spec = model_registry().get("LLAMA3");
  auto args = model_flavor(spec, "debugmodel");
  EXPECT_EQ(args.dim, 256);
  EXPECT_EQ(args.n_layers, 6);
  EXPECT_EQ(args.n_heads, 16);
  args.vocab_size = 258;
  auto chunk = spec.build(args, ChunkSpec{0, 1, true, false}, 0);
  EXPECT_EQ(chunk->spec().end_layer, 1);
  // Sizes come from the spec without building the whole model.
  const auto& b8 = model_flavor(spec, "8B");
  EXPECT_EQ(spec.num_params(b8), 8030261248);
  EXPECT_DOUBLE_EQ(spec.flops_per_token(b8, 2048), b8.flops_per_token(2048));
  try {
    model_flavor(spec, "debugmodle", "x.yaml:3");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(
        m.find("x.yaml:3: unknown flavor 'debugmodle'"), std::string::npos)
        << m;
    EXPECT_NE(m.find("405B, 70B, 8B, debugmodel, small"), std::string::npos)
        << m;
    EXPECT_NE(m.find("did you mean 'debugmodel'"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace baton::models
