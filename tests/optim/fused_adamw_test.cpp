// FusedAdamW against torch::optim::AdamW: the same parameters after several
// steps with the same gradients, the same state in the same place.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/torch_compat.h"
#include "optim/fused_adamw.h"

namespace baton {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

/// Parameters of several shapes: contiguous float (the fused path), a
/// transposed float view and a float64 tensor (the fallback).
std::vector<at::Tensor> make_params() {
  torch::manual_seed(3);
  return {
      torch::randn({7, 5}),
      torch::randn({1000}),
      torch::randn({4, 6}).t(),
      torch::randn({3}, torch::kDouble)};
}

void expect_same_run(const AdamWOptions& options, int64_t steps) {
  auto mine = make_params();
  auto ref = make_params();
  for (auto& p : mine) {
    p.requires_grad_(true);
  }
  for (auto& p : ref) {
    p.requires_grad_(true);
  }
  FusedAdamW fused(mine, options);
  torch::optim::AdamW adamw(ref, options);
  for (int64_t s = 0; s < steps; ++s) {
    for (size_t i = 0; i < mine.size(); ++i) {
      const auto g = torch::randn_like(mine[i]) * (s + 1);
      mine[i].mutable_grad() = g.clone();
      ref[i].mutable_grad() = g.clone();
    }
    fused.step();
    adamw.step();
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(torch::allclose(mine[i], ref[i], 1e-5, 1e-6))
        << "parameter " << i << " max diff "
        << (mine[i] - ref[i]).abs().max().item<double>();
    const auto key = compat::optimizer_state_key(mine[i]);
    const auto ref_key = compat::optimizer_state_key(ref[i]);
    ASSERT_EQ(fused.state().count(key), 1u);
    auto* st = dynamic_cast<AdamWParamState*>(fused.state().at(key).get());
    auto* rs = dynamic_cast<AdamWParamState*>(adamw.state().at(ref_key).get());
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->step(), rs->step());
    EXPECT_TRUE(torch::allclose(st->exp_avg(), rs->exp_avg(), 1e-5, 1e-7));
    EXPECT_TRUE(
        torch::allclose(st->exp_avg_sq(), rs->exp_avg_sq(), 1e-5, 1e-9));
  }
}

TEST(FusedAdamW, MatchesTorchAdamW) {
  expect_same_run(
      AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1), 6);
}

TEST(FusedAdamW, MatchesTorchAdamWWithoutDecayAndLargeSteps) {
  expect_same_run(AdamWOptions(0.5).betas({0.5, 0.6}).weight_decay(0.0), 4);
}

TEST(FusedAdamW, ResumesFromStateItDidNotCreate) {
  // A checkpoint restores AdamWParamState entries before the first step.
  auto p = torch::randn({10}).requires_grad_(true);
  auto r = p.detach().clone().requires_grad_(true);
  const auto options = AdamWOptions(1e-2).weight_decay(0.1);
  FusedAdamW fused({p}, options);
  torch::optim::AdamW adamw({r}, options);
  auto restored = [] {
    auto state = std::make_unique<AdamWParamState>();
    state->step(7);
    state->exp_avg(torch::full({10}, 0.25));
    state->exp_avg_sq(torch::full({10}, 0.5));
    return state;
  };
  adamw.state()[compat::optimizer_state_key(r)] = restored();
  fused.state()[compat::optimizer_state_key(p)] = restored();
  const auto g = torch::randn({10});
  p.mutable_grad() = g.clone();
  r.mutable_grad() = g.clone();
  fused.step();
  adamw.step();
  EXPECT_TRUE(torch::allclose(p, r, 1e-6, 1e-7));
}

TEST(FusedAdamW, RejectsAmsgradAndBadOptions) {
  auto p = torch::randn({2}).requires_grad_(true);
  EXPECT_THROW(FusedAdamW({p}, AdamWOptions(1e-3).amsgrad(true)), c10::Error);
  try {
    FusedAdamW({p}, AdamWOptions(-1.0));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("invalid learning rate"), std::string::npos);
  }
  // A group with options of its own is checked too, once, at construction.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{p},
      std::make_unique<AdamWOptions>(AdamWOptions(1e-3).amsgrad(true)));
  try {
    FusedAdamW fused(std::move(groups));
    FAIL() << "a group asking for amsgrad was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "[FusedAdamW] amsgrad: true; allowed: false"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
