#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/linear.h"

namespace baton {
namespace {

TEST(Linear, MatchesTorchLinear) {
  torch::manual_seed(0);
  Linear mine(5, 3);
  const auto x = torch::randn({2, 4, 5}, torch::requires_grad());
  const auto y = mine(x);
  const auto ref = torch::nn::functional::linear(x, mine->weight);
  EXPECT_TRUE(torch::allclose(y, ref));
  EXPECT_EQ(
      mine->named_parameters().keys(), std::vector<std::string>{"weight"});
}

TEST(Linear, DefersTheWeightGradientToItsSlot) {
  torch::manual_seed(1);
  Linear layer(6, 4);
  const auto x = torch::randn({3, 6});
  const auto gy = torch::randn({3, 4});

  // Reference: an ordinary backward.
  const auto xr = x.clone().requires_grad_(true);
  layer(xr).backward(gy);
  const auto dw = layer->weight.grad().clone();
  const auto dx = xr.grad().clone();
  layer->weight.mutable_grad() = at::Tensor();

  // Forward with a slot current; backward with the slot deferring.
  WeightGradSlot slot;
  const auto xd = x.clone().requires_grad_(true);
  at::Tensor y;
  {
    WeightGradSlotGuard guard(&slot);
    y = layer(xd);
  }
  slot.defer = true;
  y.backward(gy);
  slot.defer = false;
  EXPECT_TRUE(torch::allclose(xd.grad(), dx));   // input gradient now
  EXPECT_FALSE(layer->weight.grad().defined());  // weight gradient later
  ASSERT_EQ(slot.work.size(), 1u);
  slot.run();
  EXPECT_TRUE(slot.work.empty());
  ASSERT_TRUE(layer->weight.grad().defined());
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), dw));
  // A second deferred backward accumulates, as AccumulateGrad would.
  {
    WeightGradSlotGuard guard(&slot);
    y = layer(xd);
  }
  slot.defer = true;
  y.backward(gy);
  slot.defer = false;
  slot.run();
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), 2 * dw));
}

TEST(Linear, WithoutASlotTheBackwardIsOrdinary) {
  Linear layer(2, 2);
  WeightGradSlot slot;
  slot.defer = true;  // not current at forward: ignored
  const auto x = torch::randn({1, 2}, torch::requires_grad());
  layer(x).sum().backward();
  EXPECT_TRUE(layer->weight.grad().defined());
  EXPECT_TRUE(slot.work.empty());
}

}  // namespace
}  // namespace baton
