// The load balance between steps (trainer/moe_balance.h): the routing bias
// moves a skewed router towards balance, on every rank alike over real
// Gloo, and the summary the metrics log.

#include "trainer/moe_balance.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "models/common/transformer.h"
#include "parallel/dist/process_group.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton {
namespace {

/// Two MoE blocks with a sigmoid router and a routing bias.
ModelArgs biased_args() {
  ModelArgs a;
  a.dim = 32;
  a.n_layers = 2;
  a.n_heads = 4;
  a.vocab_size = 64;
  a.moe.num_experts = 8;
  a.moe.top_k = 2;
  a.moe.expert_hidden = 16;
  a.moe.score_func = "sigmoid";
  a.moe.expert_bias = true;
  return a;
}

std::vector<models::MoEImpl*> layers_of(models::TransformerImpl& model) {
  std::vector<models::MoEImpl*> out;
  for (const auto& m : model.modules()) {
    if (auto* moe = dynamic_cast<models::MoEImpl*>(m.get())) {
      out.push_back(moe);
    }
  }
  return out;
}

/// The model with expert 0's bias far ahead: every token chooses it.
std::shared_ptr<models::TransformerImpl> skewed_model() {
  auto model = std::make_shared<models::TransformerImpl>(biased_args());
  model->init_weights(0);
  for (auto* moe : layers_of(*model)) {
    torch::NoGradGuard no_grad;
    moe->expert_bias[0] = 0.5;
  }
  return model;
}

/// One step's forward on `rows` random sequences of 16 tokens.
void forward(models::TransformerImpl& model, int64_t rows, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  model.forward(torch::randint(64, {rows, 16}, gen));
}

TEST(MoeBalance, TheBiasMovesASkewedRouterTowardsBalance) {
  auto model = skewed_model();
  ModelParts parts = testing::parts_of({model});
  forward(*model, 4, 1);
  const MoeStepSummary first = balance_experts(parts, nullptr, 0.02);
  EXPECT_EQ(first.layers, 2);
  // Every token chose expert 0: its load is E / k = 4x the mean.
  EXPECT_DOUBLE_EQ(first.load_max, 4.0);
  MoeStepSummary last = first;
  for (int step = 2; step <= 60; ++step) {
    forward(*model, 8, step);
    last = balance_experts(parts, nullptr, 0.02);
  }
  EXPECT_LT(last.load_max, 2.0) << last.load_max;
  // From 1.16 to about a third: what random routing of 256 choices over
  // 8 experts leaves (the sign update keeps moving by the rate).
  EXPECT_LT(last.load_cv(), first.load_cv() / 2.0)
      << first.load_cv() << " -> " << last.load_cv();
  for (auto* moe : layers_of(*model)) {
    // Centred, and expert 0 pushed down from where it started.
    EXPECT_NEAR(moe->expert_bias.sum().item<double>(), 0.0, 1e-5);
    EXPECT_LT(moe->expert_bias[0].item<double>(), 0.3);
  }
  // Without a rate the bias stays; the statistics are still taken.
  const at::Tensor before = layers_of(*model)[0]->expert_bias.clone();
  forward(*model, 4, 99);
  EXPECT_EQ(balance_experts(parts, nullptr, 0.0).layers, 2);
  EXPECT_TRUE(torch::equal(before, layers_of(*model)[0]->expert_bias));
  EXPECT_EQ(layers_of(*model)[0]->stats().tokens, 0);
}

TEST(MoeBalance, EveryRankMovesItsBiasAlikeOnTheSummedCounts) {
  // Two ranks on different tokens; one process on both ranks' tokens is
  // the reference: the same counts, so the same bias, bit for bit.
  auto one = skewed_model();
  ModelParts one_parts = testing::parts_of({one});
  forward(*one, 3, 10);
  forward(*one, 3, 11);
  balance_experts(one_parts, nullptr, 0.01);
  const at::Tensor want = layers_of(*one)[1]->expert_bias.clone();

  std::vector<at::Tensor> got(2);
  std::vector<MoeStepSummary> summaries(2);
  testing::run_ranks(2, [&](int64_t rank, dist::Runtime& runtime) {
    auto model = skewed_model();
    ModelParts parts = testing::parts_of({model});
    forward(*model, 3, 10 + static_cast<uint64_t>(rank));
    summaries[rank] = balance_experts(parts, runtime.world(), 0.01);
    got[rank] = layers_of(*model)[1]->expert_bias.clone();
  });
  ASSERT_TRUE(got[0].defined() && got[1].defined());
  EXPECT_TRUE(torch::equal(got[0], got[1]));
  EXPECT_TRUE(torch::equal(got[0], want));
  EXPECT_EQ(summaries[0].load_max, summaries[1].load_max);
}

TEST(MoeBalance, PipelineRanksCombineTheirLayers) {
  MoeStepSummary a;
  a.layers = 2;
  a.aux_loss_sum = 4.0;
  a.load_min = 0.5;
  a.load_max = 1.5;
  a.load_cv_sum = 0.4;
  a.load_cv_max = 0.3;
  MoeStepSummary b;  // A stage without MoE layers (first dense blocks).
  std::vector<MoeStepSummary> out(2);
  testing::run_ranks(2, [&](int64_t rank, dist::Runtime& runtime) {
    out[rank] = combine_moe_summary(rank == 0 ? a : b, runtime.world());
  });
  for (const auto& s : out) {
    EXPECT_EQ(s.layers, 2);
    EXPECT_DOUBLE_EQ(s.aux_loss(), 2.0);
    EXPECT_DOUBLE_EQ(s.load_min, 0.5);
    EXPECT_DOUBLE_EQ(s.load_max, 1.5);
    EXPECT_DOUBLE_EQ(s.load_cv(), 0.2);
    EXPECT_DOUBLE_EQ(s.load_cv_max, 0.3);
  }
}

}  // namespace
}  // namespace baton
