// Generation: the KV-cached forward against the model's own whole-sequence
// forward (the training path), and the choice of the next token. Against
// transformers' generate with its cache: tests/checkpoint/
// hf_families_test.cpp.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "models/common/transformer.h"
#include "models/generate.h"

namespace baton {
namespace {

using models::KvCache;
using models::Transformer;

ModelArgs tiny_args() {
  ModelArgs args;
  args.dim = 64;
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 50;
  args.multiple_of = 32;
  args.max_seq_len = 64;
  return args;
}

/// Sharper weights than the init's, so that attention is far from uniform
/// and a wrong position or mask shows.
Transformer built(const ModelArgs& args) {
  // One thread: a pool's hand-offs cost more than these tiny ops.
  at::set_num_threads(1);
  at::manual_seed(3);
  Transformer model(args);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) {
    p.copy_(
        p.dim() == 1 ? 1.0 + 0.2 * torch::randn_like(p)
                     : 0.3 * torch::randn_like(p));
  }
  return model;
}

TEST(Generate, CachedLogitsEqualTheWholeForwardForEveryFamilyOption) {
  ModelArgs plain = tiny_args();
  ModelArgs qwen = tiny_args();
  qwen.qk_norm = true;
  qwen.tie_embeddings = true;
  qwen.attention_head_dim = 32;
  ModelArgs scaled = tiny_args();
  scaled.rope_scaling.type = "llama3";
  scaled.rope_scaling.factor = 8.0;
  scaled.rope_scaling.original_max_position_embeddings = 8;
  ModelArgs yarn = tiny_args();
  yarn.rope_scaling.type = "yarn";
  yarn.rope_scaling.factor = 4.0;
  yarn.rope_scaling.original_max_position_embeddings = 8;
  for (const auto& [name, args] :
       {std::pair{"plain", plain},
        std::pair{"qk_norm, tied, head_dim 32", qwen},
        std::pair{"llama3 scaling", scaled},
        std::pair{"yarn", yarn}}) {
    SCOPED_TRACE(name);
    Transformer model = built(args);
    torch::NoGradGuard no_grad;
    const at::Tensor ids = torch::randint(0, args.vocab_size, {2, 11});
    const at::Tensor whole = model->forward(ids);  // (2, 11, vocab)
    // A prompt of 4, single tokens, then a run of 3 after a filled cache
    // (its mask), then the last.
    KvCache cache = model->new_cache(2, 12);
    std::vector<at::Tensor> pieces;
    for (const auto& [from, to] :
         {std::pair{0, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 10}, {10, 11}}) {
      pieces.push_back(model->forward_cached(ids.slice(1, from, to), cache));
      EXPECT_EQ(cache.length, to);
    }
    const at::Tensor cached = torch::cat(pieces, 1);
    EXPECT_LE(
        ((cached - whole).abs().max() / whole.abs().max()).item<double>(),
        1e-5);
  }
}

TEST(Generate, TheCacheRefusesWhatItCannotHold) {
  Transformer model = built(tiny_args());
  KvCache cache = model->new_cache(1, 4);
  torch::NoGradGuard no_grad;
  model->forward_cached(torch::zeros({1, 3}, torch::kLong), cache);
  EXPECT_THROW(
      model->forward_cached(torch::zeros({1, 2}, torch::kLong), cache),
      std::invalid_argument);
  EXPECT_THROW(model->new_cache(0, 4), std::invalid_argument);
  Transformer chunk(tiny_args(), ChunkSpec{0, 2, true, false});
  EXPECT_THROW(chunk->new_cache(1, 4), std::invalid_argument);
}

TEST(Generate, GreedyTakesTheLargestLogitAndSamplingStaysInTopKAndTopP) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  // Probabilities 0.4, 0.3, 0.2, 0.1 over ids 3, 0, 2, 1.
  const at::Tensor logits =
      torch::tensor({0.3, 0.1, 0.2, 0.4}).log().to(torch::kFloat);
  SamplingOptions greedy;
  EXPECT_EQ(choose_token(logits, greedy, gen), 3);
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  SamplingOptions top2 = top1;
  top2.top_k = 2;
  SamplingOptions nucleus;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.5;  // 0.4 < 0.5: the second is in, the third not
  SamplingOptions all;
  all.temperature = 1.0;
  std::set<int64_t> seen1, seen2, seen_p, seen_all;
  for (int i = 0; i < 400; ++i) {
    seen1.insert(choose_token(logits, top1, gen));
    seen2.insert(choose_token(logits, top2, gen));
    seen_p.insert(choose_token(logits, nucleus, gen));
    seen_all.insert(choose_token(logits, all, gen));
  }
  EXPECT_EQ(seen1, (std::set<int64_t>{3}));
  EXPECT_EQ(seen2, (std::set<int64_t>{0, 3}));
  EXPECT_EQ(seen_p, (std::set<int64_t>{0, 3}));
  EXPECT_EQ(seen_all, (std::set<int64_t>{0, 1, 2, 3}));
  // A high temperature flattens: the rarest comes up about as often as
  // the likeliest.
  SamplingOptions hot;
  hot.temperature = 100.0;
  int rare = 0;
  for (int i = 0; i < 2000; ++i) {
    rare += choose_token(logits, hot, gen) == 1;
  }
  EXPECT_GT(rare, 400);
  EXPECT_LT(rare, 600);
  for (const auto& bad :
       {SamplingOptions{-1.0, 0, 1.0},
        SamplingOptions{1.0, -1, 1.0},
        SamplingOptions{1.0, 0, 0.0},
        SamplingOptions{1.0, 0, 1.5}}) {
    EXPECT_THROW(bad.validate(), std::invalid_argument);
  }
}

TEST(Generate, StopsAtAStopIdAndRepeatsWithTheSeed) {
  Transformer model = built(tiny_args());
  GenerateOptions options;
  options.max_new_tokens = 20;
  options.sampling.temperature = 1.0;
  options.seed = 11;
  const Generation a = generate(*model, {1, 2, 3}, options);
  const Generation b = generate(*model, {1, 2, 3}, options);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 20u);
  EXPECT_FALSE(a.stopped);
  options.seed = 12;
  EXPECT_NE(generate(*model, {1, 2, 3}, options).tokens, a.tokens);
  // Stopping at the fifth token: it is returned, nothing after it.
  options.seed = 11;
  options.stop_ids = {a.tokens[4]};
  const Generation stopped = generate(*model, {1, 2, 3}, options);
  EXPECT_TRUE(stopped.stopped);
  ASSERT_LE(stopped.tokens.size(), 5u);
  EXPECT_EQ(stopped.tokens.back(), a.tokens[4]);
  // The greedy choice is the argmax of the logits it keeps.
  GenerateOptions greedy;
  greedy.max_new_tokens = 5;
  greedy.keep_logits = true;
  const Generation g = generate(*model, {4, 5}, greedy);
  ASSERT_EQ(g.logits.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(g.tokens[i], g.logits[i].argmax().item<int64_t>());
  }
  EXPECT_THROW(generate(*model, {}, greedy), std::invalid_argument);
  greedy.max_new_tokens = 64;  // 2 + 64 > max_seq_len 64
  EXPECT_THROW(generate(*model, {4, 5}, greedy), std::invalid_argument);
}

}  // namespace
}  // namespace baton
