#include <gtest/gtest.h>
#include <torch/torch.h>

#include "optim/lr_schedulers.h"

namespace baton {
namespace {

LRSchedulerConfig schedule(
    int64_t warmup,
    std::optional<double> decay_ratio,
    const std::string& type,
    double min_factor) {
  LRSchedulerConfig c;
  c.warmup_steps = warmup;
  c.decay_ratio = decay_ratio;
  c.decay_type = type;
  c.min_lr_factor = min_factor;
  return c;
}

TEST(WarmupStableDecay, WarmupThenLinearDecayOverTheRest) {
  // 10 steps, 2 of warmup, no decay_ratio: steps 3..10 decay, linearly to 0.
  const WarmupStableDecay s(schedule(2, std::nullopt, "linear", 0.0), 10);
  EXPECT_EQ(s.decay_steps(), 8);
  const std::vector<double> expected = {
      1.0 / 2,
      1.0,
      7.0 / 8,
      6.0 / 8,
      5.0 / 8,
      4.0 / 8,
      3.0 / 8,
      2.0 / 8,
      1.0 / 8,
      0.0};
  for (int64_t step = 1; step <= 10; ++step) {
    EXPECT_NEAR(s.factor(step), expected[step - 1], 1e-12) << "step " << step;
  }
}

TEST(WarmupStableDecay, StablePhaseThenEachDecayCurve) {
  // 10 steps, warmup 2, decay_ratio 0.5: steps 3-5 stable, 6-10 decay.
  // Step 6 is 1/5 of the way: linear 0.8, sqrt 1 - sqrt(0.2), cosine
  // (1 + cos(pi / 5)) / 2; the floor min_lr_factor scales what remains.
  const WarmupStableDecay linear(schedule(2, 0.5, "linear", 0.1), 10);
  EXPECT_EQ(linear.decay_steps(), 5);
  for (int64_t step : {3, 4, 5}) {
    EXPECT_DOUBLE_EQ(linear.factor(step), 1.0);
  }
  EXPECT_NEAR(linear.factor(6), 0.1 + 0.9 * 0.8, 1e-12);
  EXPECT_NEAR(linear.factor(10), 0.1, 1e-12);

  const WarmupStableDecay sqrt(schedule(2, 0.5, "sqrt", 0.0), 10);
  EXPECT_NEAR(sqrt.factor(6), 0.5527864045000421, 1e-12);
  EXPECT_NEAR(sqrt.factor(10), 0.0, 1e-12);

  const WarmupStableDecay cosine(schedule(2, 0.5, "cosine", 0.0), 10);
  EXPECT_NEAR(cosine.factor(6), 0.9045084971874737, 1e-12);
  EXPECT_NEAR(cosine.factor(8), 0.3454915028125263, 1e-12);
  EXPECT_NEAR(cosine.factor(10), 0.0, 1e-12);
}

TEST(WarmupStableDecay, NoWarmupAndNoDecay) {
  const WarmupStableDecay flat(schedule(0, 0.0, "linear", 0.0), 4);
  for (int64_t step = 1; step <= 4; ++step) {
    EXPECT_DOUBLE_EQ(flat.factor(step), 1.0);
  }
}

TEST(WarmupStableDecay, WarmupLongerThanTheRunKeepsItsSlope) {
  // Warmup 10 on a 5-step run (debug_model.yaml with --training.steps=5):
  // every step warms up as it would in the full run, s / 10, and none
  // decays, decay_ratio or not.
  for (const std::optional<double> ratio : {std::optional<double>(), {0.5}}) {
    const WarmupStableDecay s(schedule(10, ratio, "cosine", 0.1), 5);
    EXPECT_EQ(s.decay_steps(), 0);
    for (int64_t step = 1; step <= 5; ++step) {
      EXPECT_NEAR(s.factor(step), static_cast<double>(step) / 10.0, 1e-12)
          << "step " << step;
    }
  }
  // On the optimizer: the rate each step uses.
  auto w = torch::zeros({2}, torch::requires_grad());
  torch::optim::AdamW optimizer({w}, torch::optim::AdamWOptions(3e-3));
  LRScheduler scheduler(
      optimizer,
      std::make_shared<WarmupStableDecay>(
          schedule(10, std::nullopt, "cosine", 0.1), 5));
  for (int64_t step = 1; step <= 5; ++step) {
    EXPECT_NEAR(scheduler.lr(), 3e-3 * static_cast<double>(step) / 10.0, 1e-15)
        << "step " << step;
    scheduler.step();
  }
}

TEST(WarmupStableDecay, RejectsPhasesLongerThanTraining) {
  EXPECT_THROW(
      WarmupStableDecay(schedule(8, 0.5, "linear", 0.0), 10),
      std::invalid_argument);
}

TEST(LRScheduler, SetsEachStepsRateOnTheOptimizer) {
  auto w = torch::zeros({2}, torch::requires_grad());
  torch::optim::AdamW optimizer({w}, torch::optim::AdamWOptions(0.5));
  LRScheduler scheduler(
      optimizer,
      std::make_shared<WarmupStableDecay>(
          schedule(2, std::nullopt, "linear", 0.0), 10));
  EXPECT_NEAR(scheduler.lr(), 0.5 / 2, 1e-12);  // step 1 is set up front
  scheduler.step();
  EXPECT_NEAR(scheduler.lr(), 0.5, 1e-12);
  scheduler.step();
  EXPECT_NEAR(scheduler.lr(), 0.5 * 7 / 8, 1e-12);
  EXPECT_EQ(scheduler.steps_done(), 2);
  EXPECT_NEAR(
      optimizer.param_groups()[0].options().get_lr(), 0.5 * 7 / 8, 1e-12);
}

TEST(LRSchedulersContainer, StepsEverySchedulerTogether) {
  auto a = torch::zeros({1}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  torch::optim::AdamW oa({a}, torch::optim::AdamWOptions(1.0));
  torch::optim::AdamW ob({b}, torch::optim::AdamWOptions(1.0));
  std::vector<std::unique_ptr<LRScheduler>> list;
  const auto curve = std::make_shared<WarmupStableDecay>(
      schedule(1, std::nullopt, "linear", 0.0), 3);
  list.push_back(std::make_unique<LRScheduler>(oa, curve));
  list.push_back(std::make_unique<LRScheduler>(ob, curve));
  LRSchedulersContainer schedulers(std::move(list));
  schedulers.step();
  EXPECT_NEAR(schedulers[0].lr(), 0.5, 1e-12);
  EXPECT_NEAR(schedulers[1].lr(), 0.5, 1e-12);
  EXPECT_NEAR(schedulers.lr(), 0.5, 1e-12);
}

}  // namespace
}  // namespace baton
