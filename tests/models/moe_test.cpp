// The mixture-of-experts layer (models/moe.h) against a reference written
// token by token in float64: routing (softmax and sigmoid, group-limited,
// biased), the experts' sum, shared experts, the auxiliary loss and its
// gradient; and the statistics a step's balance reads.

#include "models/moe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "models/common/transformer.h"
#include "models/forward_state.h"

namespace baton::models {
namespace {

ModelArgs moe_args(const std::string& score_func) {
  ModelArgs a;
  a.dim = 16;
  a.n_layers = 1;
  a.n_heads = 2;
  a.vocab_size = 8;
  a.moe.num_experts = 8;
  a.moe.top_k = 2;
  a.moe.expert_hidden = 12;
  a.moe.score_func = score_func;
  return a;
}

/// A DeepSeek-style layer: sigmoid scores, 4 groups of which a token uses
/// 2, a routing bias, a shared expert, the weights scaled by 2.5.
ModelArgs deepseek_args() {
  ModelArgs a = moe_args("sigmoid");
  a.moe.top_k = 3;
  a.moe.n_groups = 4;
  a.moe.topk_groups = 2;
  a.moe.expert_bias = true;
  a.moe.shared_experts = 1;
  a.moe.route_scale = 2.5;
  return a;
}

/// Random weights (float64), the bias too where there is one.
void randomise(MoEImpl& moe, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : moe.parameters()) {
    p.set_data(torch::randn(p.sizes(), torch::kFloat64) * 0.3);
  }
  if (moe.expert_bias.defined()) {
    moe.expert_bias.copy_(torch::randn({moe.args().num_experts}) * 0.05);
  }
}

/// The smallest gap, over tokens, between the k-th and (k+1)-th choice
/// scores (bias and group mask included): routing that a float error could
/// flip has a gap near 0.
double routing_margin(const MoEImpl& moe, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  const MoeArgs& a = moe.args();
  const at::Tensor logits = at::matmul(x, moe.gate->weight.t());
  at::Tensor choice =
      a.score_func == "sigmoid" ? logits.sigmoid() : logits.softmax(-1);
  if (moe.expert_bias.defined()) {
    choice = choice + moe.expert_bias.to(choice.dtype());
  }
  if (a.n_groups > 1) {
    // Group scores must be apart too.
    const int64_t per = a.num_experts / a.n_groups;
    const at::Tensor g =
        std::get<0>(choice.view({x.size(0), a.n_groups, per}).topk(2, -1))
            .sum(-1);
    const at::Tensor sorted = std::get<0>(g.sort(-1, /*descending=*/true));
    const double group_gap =
        (sorted.select(1, a.topk_groups - 1) - sorted.select(1, a.topk_groups))
            .min()
            .item<double>();
    const at::Tensor kept = std::get<1>(g.topk(a.topk_groups, -1));
    at::Tensor mask = at::ones_like(g, at::kBool).scatter_(1, kept, false);
    choice = choice.masked_fill(
        mask.unsqueeze(-1)
            .expand({x.size(0), a.n_groups, per})
            .reshape({x.size(0), a.num_experts}),
        -1e30);
    const at::Tensor s = std::get<0>(choice.sort(-1, /*descending=*/true));
    return std::min(
        group_gap,
        (s.select(1, a.top_k - 1) - s.select(1, a.top_k)).min().item<double>());
  }
  const at::Tensor s = std::get<0>(choice.sort(-1, /*descending=*/true));
  return (s.select(1, a.top_k - 1) - s.select(1, a.top_k)).min().item<double>();
}

/// The layer's output written out token by token: each token's experts by
/// a full sort of its scores, the experts' SwiGLUs summed with their
/// weights, the shared expert added.
at::Tensor reference(
    const MoEImpl& moe, const at::Tensor& x, double capacity_factor = 0.0) {
  const MoeArgs& a = moe.args();
  const int64_t n = x.size(0);
  // Each token's (expert, weight) pairs, then those past an expert's
  // capacity dropped.
  std::vector<std::vector<std::pair<int64_t, at::Tensor>>> pairs(n);
  const at::Tensor logits = at::matmul(x, moe.gate->weight.t());
  const at::Tensor scores =
      a.score_func == "sigmoid" ? logits.sigmoid() : logits.softmax(-1);
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<std::pair<double, int64_t>> choice;
    const int64_t per = a.num_experts / a.n_groups;
    std::vector<double> value(a.num_experts);
    for (int64_t e = 0; e < a.num_experts; ++e) {
      value[e] =
          scores[t][e].item<double>() +
          (moe.expert_bias.defined() ? moe.expert_bias[e].item<double>() : 0.0);
    }
    // Groups by the sum of their two best.
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < a.n_groups; ++g) {
      std::vector<double> in(
          value.begin() + g * per, value.begin() + (g + 1) * per);
      std::sort(in.rbegin(), in.rend());
      groups.push_back({in[0] + (per > 1 ? in[1] : 0.0), g});
    }
    std::sort(groups.rbegin(), groups.rend());
    for (int64_t gi = 0; gi < a.topk_groups; ++gi) {
      const int64_t g = groups[gi].second;
      for (int64_t e = g * per; e < (g + 1) * per; ++e) {
        choice.push_back({value[e], e});
      }
    }
    std::sort(choice.rbegin(), choice.rend());
    at::Tensor weights = at::stack([&] {
      std::vector<at::Tensor> w;
      for (int64_t i = 0; i < a.top_k; ++i) {
        w.push_back(scores[t][choice[i].second]);
      }
      return w;
    }());
    if (a.route_norm) {
      weights = weights / weights.sum();
    }
    weights = weights * a.route_scale;
    for (int64_t i = 0; i < a.top_k; ++i) {
      pairs[t].push_back({choice[i].second, weights[i]});
    }
  }
  if (capacity_factor > 0.0) {
    // Per expert, its pairs by descending score, the earlier pair first
    // among equals; those past ceil(factor n k / E) dropped.
    const auto capacity = static_cast<size_t>(
        std::ceil(capacity_factor * n * a.top_k / a.num_experts));
    for (int64_t e = 0; e < a.num_experts; ++e) {
      std::vector<std::tuple<double, int64_t, int64_t>> mine;
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < a.top_k; ++i) {
          if (pairs[t][i].first == e) {
            mine.push_back({-scores[t][e].item<double>(), t * a.top_k + i, t});
          }
        }
      }
      std::sort(mine.begin(), mine.end());
      for (size_t j = capacity; j < mine.size(); ++j) {
        const int64_t pair = std::get<1>(mine[j]);
        pairs[pair / a.top_k][pair % a.top_k].first = -1;  // dropped
      }
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    at::Tensor out = at::zeros({x.size(1)}, x.options());
    for (const auto& [e, weight] : pairs[t]) {
      if (e < 0) {
        continue;
      }
      const at::Tensor h =
          at::silu(at::matmul(moe.w1[e], x[t])) * at::matmul(moe.w3[e], x[t]);
      out = out + weight * at::matmul(moe.w2[e], h);
    }
    rows.push_back(out);
  }
  at::Tensor out = at::stack(rows);
  if (moe.shared_experts) {
    const auto& s = *moe.shared_experts;
    out = out + at::matmul(
                    at::silu(at::matmul(x, s.w1->weight.t())) *
                        at::matmul(x, s.w3->weight.t()),
                    s.w2->weight.t());
  }
  return out;
}

/// Values and gradients of `moe` against reference() on 24 random tokens,
/// asserting the routing margin first.
void expect_matches_reference(const ModelArgs& args, uint64_t seed) {
  MoE moe(args);
  randomise(*moe, seed);
  torch::manual_seed(seed + 1);
  const at::Tensor x = torch::randn({24, args.dim}, torch::kFloat64);
  ASSERT_GT(routing_margin(*moe, x), 1e-6)
      << "pick another seed: a choice within float error of a tie";
  const at::Tensor g = torch::randn({24, args.dim}, torch::kFloat64);

  const at::Tensor xa = x.clone().requires_grad_(true);
  (moe->forward(xa.unsqueeze(0)).squeeze(0) * g).sum().backward();
  std::vector<at::Tensor> grads;
  for (auto& p : moe->parameters()) {
    grads.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }
  const at::Tensor xb = x.clone().requires_grad_(true);
  const at::Tensor want = reference(*moe, xb);
  (want * g).sum().backward();

  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(
      moe->forward(x.unsqueeze(0)).squeeze(0), want, 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-10, 1e-12));
  size_t i = 0;
  for (auto& p : moe->parameters()) {
    EXPECT_TRUE(torch::allclose(grads[i], p.grad(), 1e-10, 1e-12)) << i;
    ++i;
  }
}

TEST(Moe, SoftmaxTopKEqualsTheTokenByTokenReference) {
  expect_matches_reference(moe_args("softmax"), 1);
}

TEST(Moe, DeepSeekRoutingEqualsTheTokenByTokenReference) {
  // Sigmoid, group-limited, biased, scaled, with a shared expert.
  expect_matches_reference(deepseek_args(), 3);
}

TEST(Moe, ACapacityDropsEachExpertsWorstScoredPairsAsTheReference) {
  // A router skewed towards experts 0 and 1: at capacity factor 1 each
  // expert takes at most 24 x 2 / 8 = 6 pairs.
  const ModelArgs args = moe_args("softmax");
  MoE moe(args);
  randomise(*moe, 3);
  {
    torch::NoGradGuard no_grad;
    moe->gate->weight.narrow(0, 0, 2).add_(0.4);
  }
  moe->capacity_factor = 1.0;
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({24, args.dim}, torch::kFloat64).abs();
  const at::Tensor g = torch::randn({24, args.dim}, torch::kFloat64);
  const Routing routing =
      route(at::matmul(x, moe->gate->weight.t()), moe->args(), at::Tensor());
  const at::Tensor load = at::bincount(routing.experts.flatten(), {}, 8);
  int64_t over = 0;
  for (int64_t e = 0; e < 8; ++e) {
    over += std::max<int64_t>(0, load[e].item<int64_t>() - 6);
  }
  ASSERT_GT(over, 4) << "the skew should overload some experts";
  const at::Tensor keep = capacity_keep(routing, 8, 1.0);
  EXPECT_EQ(keep.logical_not().sum().item<int64_t>(), over);

  const at::Tensor xa = x.clone().requires_grad_(true);
  (moe->forward(xa.unsqueeze(0)).squeeze(0) * g).sum().backward();
  EXPECT_EQ(moe->take_stats().dropped, over);
  std::vector<at::Tensor> grads;
  for (auto& p : moe->parameters()) {
    grads.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }
  const at::Tensor xb = x.clone().requires_grad_(true);
  const at::Tensor want = reference(*moe, xb, 1.0);
  (want * g).sum().backward();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(
      moe->forward(x.unsqueeze(0)).squeeze(0), want, 1e-10, 1e-12));
  EXPECT_FALSE(torch::allclose(
      reference(*moe, x), want, 1e-3, 1e-3));  // the drops change it
  EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-10, 1e-12));
  size_t i = 0;
  for (auto& p : moe->parameters()) {
    EXPECT_TRUE(torch::allclose(grads[i], p.grad(), 1e-10, 1e-12)) << i;
    ++i;
  }
  // A factor large enough drops nothing.
  EXPECT_TRUE(capacity_keep(routing, 8, 8.0).all().item<bool>());
}

TEST(Moe, GroupedProductsEqualTheLoopWhereTheyTakeTheTensors) {
  // 8 experts of hidden 12 over rows of 16, float32 (48- and 64-byte
  // rows): rows for some experts, none for others.
  torch::manual_seed(5);
  const at::Tensor w1 = torch::randn({8, 12, 16}) * 0.3;
  const at::Tensor w3 = torch::randn({8, 12, 16}) * 0.3;
  const at::Tensor w2 = torch::randn({8, 16, 12}) * 0.3;
  const std::vector<int64_t> count{5, 0, 17, 3, 0, 0, 9, 1};
  const at::Tensor xs = torch::randn({35, 16});
  ASSERT_TRUE(grouped_mm_takes(xs, w1));
  ASSERT_TRUE(grouped_mm_takes(xs, w2));
  const at::Tensor g = torch::randn({35, 16});
  const auto run = [&](ExpertProducts how, int64_t align = 0) {
    std::vector<at::Tensor> leaves{xs, w1, w3, w2};
    for (auto& t : leaves) {
      t = t.clone().requires_grad_(true);
    }
    const at::Tensor out = expert_products(
        leaves[0], count, leaves[1], leaves[2], leaves[3], how, align);
    (out * g).sum().backward();
    std::vector<at::Tensor> got{out.detach()};
    for (const auto& t : leaves) {
      got.push_back(t.grad());
    }
    return got;
  };
  const auto loop = run(ExpertProducts::kLoop);
  const auto grouped = run(ExpertProducts::kAuto);
  // With each expert's group padded to 8 rows, as on CUDA in bfloat16.
  const auto padded = run(ExpertProducts::kAuto, 8);
  for (size_t i = 0; i < loop.size(); ++i) {
    EXPECT_TRUE(torch::allclose(grouped[i], loop[i], 1e-5, 1e-5)) << i;
    EXPECT_TRUE(torch::allclose(padded[i], loop[i], 1e-5, 1e-5)) << i;
  }
  // The experts without rows get no gradient either way.
  EXPECT_EQ(grouped[2][1].abs().max().item<float>(), 0.0f);
  // Rows of 6 float32s (24 bytes) or float64s: the grouped matmul does not
  // take them, and kAuto runs the loop.
  EXPECT_FALSE(grouped_mm_takes(torch::randn({4, 6}), torch::randn({2, 8, 6})));
  EXPECT_FALSE(
      grouped_mm_takes(xs.to(torch::kFloat64), w1.to(torch::kFloat64)));
  const std::vector<int64_t> two{1, 3};
  const at::Tensor narrow = torch::randn({4, 6});
  const at::Tensor v1 = torch::randn({2, 8, 6});
  const at::Tensor v3 = torch::randn({2, 8, 6});
  const at::Tensor v2 = torch::randn({2, 6, 8});
  EXPECT_TRUE(torch::equal(
      expert_products(narrow, two, v1, v3, v2, ExpertProducts::kAuto),
      expert_products(narrow, two, v1, v3, v2, ExpertProducts::kLoop)));
  EXPECT_EQ(parse_expert_products("loop"), ExpertProducts::kLoop);
  EXPECT_THROW(parse_expert_products("grouped_mm"), std::invalid_argument);
}

TEST(Moe, TheBiasChoosesExpertsButDoesNotWeighThem) {
  MoeArgs a = deepseek_args().moe;
  a.n_groups = 1;
  a.topk_groups = 1;
  a.route_norm = false;
  a.route_scale = 1.0;
  torch::manual_seed(0);
  const at::Tensor logits = torch::randn({6, a.num_experts}, torch::kFloat64);
  at::Tensor bias = at::zeros({a.num_experts}, torch::kFloat64);
  bias[5] = 10.0;  // Expert 5 wins every token's choice...
  const Routing r = route(logits, a, bias);
  const at::Tensor is5 = r.experts == 5;
  EXPECT_TRUE(is5.any(1).all().item<bool>());
  // ...with the weight its score gives it, not its bias.
  const at::Tensor w5 = (r.weights * is5.to(torch::kFloat64)).sum(1);
  EXPECT_TRUE(torch::allclose(w5, logits.sigmoid().select(1, 5), 1e-12, 1e-12));
}

TEST(Moe, TheAuxiliaryLossIsTransformersAndReachesTheRouter) {
  const ModelArgs args = moe_args("softmax");
  MoE moe(args);
  randomise(*moe, 5);
  moe->aux_loss_coeff = 0.01;
  torch::manual_seed(6);
  const at::Tensor x = torch::randn({1, 32, args.dim}, torch::kFloat64);
  // transformers' load_balancing_loss_func for one layer.
  const at::Tensor probs = at::matmul(x[0], moe->gate->weight.t()).softmax(-1);
  const at::Tensor chosen = std::get<1>(probs.topk(args.moe.top_k, -1));
  const at::Tensor share = at::one_hot(chosen, args.moe.num_experts)
                               .sum(at::IntArrayRef{0, 1})
                               .to(torch::kFloat64) /
                           32.0;
  const double want =
      (share * probs.mean(0)).sum().item<double>() * args.moe.num_experts;

  // In a step (loss_scale 1/100): the objective is sum(out * g) +
  // coeff x loss_scale x tokens x aux, the router's gradient included.
  ForwardState state;
  state.loss_scale = 1.0 / 100.0;
  const ForwardStateGuard guard(state);
  const at::Tensor g = torch::randn({1, 32, args.dim}, torch::kFloat64);
  (moe->forward(x) * g).sum().backward();
  const at::Tensor got = moe->gate->weight.grad().clone();
  moe->gate->weight.mutable_grad() = at::Tensor();
  const MoeStats stats = moe->take_stats();
  EXPECT_NEAR(stats.aux_loss_sum / stats.tokens, want, 1e-12);
  EXPECT_EQ(stats.tokens, 32);
  EXPECT_DOUBLE_EQ(stats.tokens_per_expert.sum().item<double>(), 64.0);

  moe->aux_loss_coeff = 0.0;
  (moe->forward(x) * g).sum().backward();
  const at::Tensor without = moe->gate->weight.grad().clone();
  moe->gate->weight.mutable_grad() = at::Tensor();
  // The aux term's own gradient, by autograd on the formula.
  const at::Tensor w = moe->gate->weight.detach().clone().requires_grad_(true);
  const at::Tensor p = at::matmul(x[0], w.t()).softmax(-1);
  const at::Tensor aux =
      (share * p.mean(0)).sum() * static_cast<double>(args.moe.num_experts);
  (aux * (0.01 * 32.0 / 100.0)).backward();
  EXPECT_TRUE(torch::allclose(got - without, w.grad(), 1e-10, 1e-12));
}

TEST(Moe, ARecomputationCountsItsTokensOnceAndAnEvaluationNot) {
  const ModelArgs args = moe_args("softmax");
  MoE moe(args);
  randomise(*moe, 7);
  const at::Tensor x = torch::randn({1, 10, args.dim}, torch::kFloat64);
  moe->forward(x);
  ForwardState state;
  state.recomputing = true;
  {
    const ForwardStateGuard guard(state);
    moe->forward(x);
  }
  // Nor does a held-out loss's forward.
  state.recomputing = false;
  state.evaluating = true;
  {
    const ForwardStateGuard guard(state);
    moe->forward(x);
  }
  EXPECT_EQ(moe->stats().tokens, 10);
  EXPECT_DOUBLE_EQ(moe->stats().tokens_per_expert.sum().item<double>(), 20.0);
}

TEST(Moe, AModelWithFirstDenseBlocksRunsAndCountsAsTheDryRunDoes) {
  // One token: most experts get nothing.
  ModelArgs args = moe_args("softmax");
  args.n_layers = 2;
  args.moe.first_dense_layers = 1;
  Transformer model(args);
  model->init_weights(0);
  EXPECT_FALSE(model->named_parameters().contains("layers.0.moe.experts.w1"));
  EXPECT_TRUE(model->named_parameters().contains("layers.1.moe.experts.w1"));
  EXPECT_TRUE(
      model->named_parameters().contains("layers.0.feed_forward.w1.weight"));
  const at::Tensor ids = torch::tensor({{3}}, torch::kLong);
  const at::Tensor logits = model->forward(ids);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 1, args.vocab_size}));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  // The shapes the dry run counts are the module's.
  const auto shapes = parameter_shapes(args, ChunkSpec{});
  const auto named = model->named_parameters();
  ASSERT_EQ(shapes.size(), named.size());
  for (const auto& [fqn, shape] : shapes) {
    ASSERT_TRUE(named.contains(fqn)) << fqn;
    EXPECT_EQ(named[fqn].sizes().vec(), shape) << fqn;
  }
  int64_t total = 0;
  for (const auto& p : model->parameters()) {
    total += p.numel();
  }
  EXPECT_EQ(total, args.num_params());
}

TEST(Moe, PublishedShapesCountTheirTotalAndActiveParameters) {
  // Qwen3-30B-A3B: 30.5B parameters, 3.3B a token uses; 235B-A22B.
  ModelArgs a;
  a.dim = 2048;
  a.n_layers = 48;
  a.n_heads = 32;
  a.n_kv_heads = 4;
  a.attention_head_dim = 128;
  a.vocab_size = 151936;
  a.ffn_hidden = 6144;
  a.qk_norm = true;
  a.moe.num_experts = 128;
  a.moe.top_k = 8;
  a.moe.expert_hidden = 768;
  EXPECT_EQ(a.num_params(), 30532122624);
  EXPECT_EQ(a.active_params(), 3353032704);
  EXPECT_LT(a.flops_per_token(4096), 6.0 * 3.4e9 + 12.0 * 48 * 32 * 128 * 4096);
}

TEST(Moe, BadShapesAreRefusedNamingTheField) {
  ModelArgs a = moe_args("softmax");
  a.moe.top_k = 9;
  EXPECT_THROW(a.validate(), std::invalid_argument);
  a = moe_args("softmax");
  a.moe.score_func = "relu";
  EXPECT_THROW(a.validate(), std::invalid_argument);
  a = deepseek_args();
  a.moe.n_groups = 3;
  EXPECT_THROW(a.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace baton::models
