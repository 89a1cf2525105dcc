// The mixture-of-experts layer (models/moe.h) against a reference written
// token by token in float64: routing (softmax and sigmoid, group-limited,
// biased), the experts' sum, shared experts, the auxiliary loss and its
// gradient; and the statistics a step's balance reads.

#include "models/moe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
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
at::Tensor reference(const MoEImpl& moe, const at::Tensor& x) {
  const MoeArgs& a = moe.args();
  const int64_t n = x.size(0);
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
    at::Tensor out = at::zeros({x.size(1)}, x.options());
    for (int64_t i = 0; i < a.top_k; ++i) {
      const int64_t e = choice[i].second;
      const at::Tensor h =
          at::silu(at::matmul(moe.w1[e], x[t])) * at::matmul(moe.w3[e], x[t]);
      out = out + weights[i] * at::matmul(moe.w2[e], h);
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
