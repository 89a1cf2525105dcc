// ParamCast (models/param_cast.h): one cast per parameter per step under
// grad mode, gradients in the float32 masters, no cast reused across
// no-grad or an in-place update; bf16 forwards and backwards of the tiny
// Llama against float32's.

#include "models/param_cast.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/forward_state.h"
#include "models/linear.h"
#include "models/loss.h"
#include "tests/models/tiny_llama.h"

namespace baton {
namespace {

constexpr int64_t kVocab = 40;

/// Runs `f` with `cast` current, as the mixed_precision applier's root
/// wrapper does.
template <class F>
auto with_cast(ParamCast* cast, F&& f) {
  ForwardState state = forward_state();
  state.cast = cast;
  const ForwardStateGuard guard(state);
  return f();
}

at::Tensor tokens(int64_t seed, int64_t rows = 2, int64_t seq = 8) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, kVocab, {rows, seq + 1}, gen, at::kLong);
}

/// Summed loss of one microbatch, backward run with `scale`.
double micro_step(
    models::TransformerImpl& model, const at::Tensor& t, double scale = 1.0) {
  const auto logits = model.forward(t.slice(1, 0, -1));
  const auto loss = cross_entropy_sum(logits, t.slice(1, 1));
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  (loss * scale).backward();
  return loss.item<double>();
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

TEST(ParamCast, CastsEachParameterOncePerStepAndAccumulatesInFloat32) {
  auto model = testing::tiny_llama(kVocab, 3);
  const auto n = static_cast<int64_t>(model->parameters().size());
  ParamCast cast(at::kBFloat16);
  // Two microbatches (gradient accumulation): the second reuses the casts.
  at::Tensor logits;
  with_cast(&cast, [&] {
    micro_step(*model, tokens(1));
    logits = model->forward(tokens(2).slice(1, 0, -1));
    cross_entropy_sum(logits, tokens(2).slice(1, 1)).backward();
    return 0;
  });
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  EXPECT_EQ(cast.casts(), n);
  EXPECT_EQ(cast.kept(), static_cast<size_t>(n));
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), at::kFloat) << item.key();
  }
  // The next step casts again, once.
  cast.clear();
  EXPECT_EQ(cast.kept(), 0u);
  with_cast(&cast, [&] { return micro_step(*model, tokens(3)); });
  EXPECT_EQ(cast.casts(), 2 * n);
}

TEST(ParamCast, ANoGradCastIsNeverReusedForTraining) {
  auto model = testing::tiny_llama(kVocab, 4);
  ParamCast cast(at::kBFloat16);
  with_cast(&cast, [&] {
    torch::NoGradGuard no_grad;
    return model->forward(tokens(1).slice(1, 0, -1));
  });
  EXPECT_EQ(cast.casts(), 0);
  EXPECT_EQ(cast.kept(), 0u);
  with_cast(&cast, [&] { return micro_step(*model, tokens(1)); });
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined()) << item.key();
  }
}

TEST(ParamCast, ANoGradReadUsesTheKeptCast) {
  // As an activation checkpoint's first forward after another microbatch
  // made the casts: no second cast.
  Linear layer(4, 3);
  ParamCast cast(at::kBFloat16);
  const auto kept =
      with_cast(&cast, [&] { return compute_param(layer->weight); });
  const auto read = with_cast(&cast, [&] {
    torch::NoGradGuard no_grad;
    return compute_param(layer->weight);
  });
  EXPECT_TRUE(read.is_same(kept));
  EXPECT_EQ(cast.casts(), 1);
}

TEST(ParamCast, AnInPlaceUpdateOfTheMasterMakesANewCast) {
  Linear layer(4, 3);
  ParamCast cast(at::kBFloat16);
  const auto first =
      with_cast(&cast, [&] { return compute_param(layer->weight); });
  EXPECT_TRUE(with_cast(&cast, [&] {
                return compute_param(layer->weight);
              }).is_same(first));
  {
    torch::NoGradGuard no_grad;
    layer->weight.add_(1.0);  // the optimizer's step, without clear()
  }
  const auto second =
      with_cast(&cast, [&] { return compute_param(layer->weight); });
  EXPECT_FALSE(second.is_same(first));
  EXPECT_EQ(cast.casts(), 2);
  EXPECT_TRUE(torch::allclose(
      second.to(at::kFloat), layer->weight.detach(), 1e-2, 1e-2));
  // Without a current cast a parameter reads as itself.
  EXPECT_TRUE(compute_param(layer->weight).is_same(layer->weight));
}

TEST(ParamCast, DeferredWeightGradientsReachTheFloat32Master) {
  torch::manual_seed(2);
  Linear layer(8, 4);
  const auto x = torch::randn({3, 8}).to(at::kBFloat16);
  const auto gy = torch::randn({3, 4}).to(at::kBFloat16);
  ParamCast cast(at::kBFloat16);
  // Reference: an ordinary bf16 backward.
  with_cast(&cast, [&] {
    layer(x.clone().requires_grad_(true)).backward(gy);
    return 0;
  });
  const auto dw = layer->weight.grad().clone();
  layer->weight.mutable_grad() = at::Tensor();
  // The I pass defers dW; the W pass adds it through the cast.
  WeightGradSlot slot;
  for (int pass = 1; pass <= 2; ++pass) {
    at::Tensor y;
    with_cast(&cast, [&] {
      WeightGradSlotGuard guard(&slot);
      y = layer(x.clone().requires_grad_(true));
      return 0;
    });
    slot.defer = true;
    y.backward(gy);
    slot.defer = false;
    ASSERT_EQ(slot.work.size(), 1u);
    slot.run();
    ASSERT_TRUE(layer->weight.grad().defined());
    EXPECT_EQ(layer->weight.grad().scalar_type(), at::kFloat);
    EXPECT_TRUE(torch::allclose(layer->weight.grad(), pass * dw));
  }
  EXPECT_EQ(cast.casts(), 1);
}

TEST(ParamCast, Bf16LossAndGradientsFollowFloat32) {
  at::set_num_threads(1);
  auto fp32 = testing::tiny_llama(kVocab, 5);
  auto bf16 = testing::tiny_llama(kVocab, 5);
  const auto t = tokens(9, 4, 16);
  const double want = micro_step(*fp32, t);
  ParamCast cast(at::kBFloat16);
  const double got = with_cast(&cast, [&] { return micro_step(*bf16, t); });
  EXPECT_NEAR(got, want, 2e-2 * want);
  const auto ref = fp32->named_parameters();
  for (const auto& item : bf16->named_parameters()) {
    EXPECT_LT(relative_error(item.value().grad(), ref[item.key()].grad()), 5e-2)
        << item.key();
  }
}

}  // namespace
}  // namespace baton
