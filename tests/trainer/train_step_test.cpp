#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/common/transformer.h"
#include "tests/parallel/test_parts.h"
#include "trainer/train_step.h"

namespace baton {
namespace {

std::shared_ptr<models::TransformerImpl> tiny_model(uint64_t seed) {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.vocab_size = 40;
  args.multiple_of = 16;
  auto model = std::make_shared<models::TransformerImpl>(args);
  model->init_weights(seed);
  return model;
}

Batch random_batch(int64_t b, int64_t t) {
  const auto tokens = torch::randint(0, 40, {b, t + 1}, torch::kLong);
  return {tokens.slice(1, 0, t), tokens.slice(1, 1, t + 1), {}};
}

std::map<std::string, at::Tensor> grads_of(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters()) {
    out[item.key()] = item.value().grad().clone();
  }
  return out;
}

TEST(LocalTrainStep, AccumulatedMicroStepsEqualOneBigBatch) {
  // Two micro-steps of 2 sequences give the gradients and loss of one step
  // over the same 4 sequences (loss = token sum / the step's token count).
  torch::manual_seed(3);
  const Batch a = random_batch(2, 8), b = random_batch(2, 8);
  const Batch both = {
      torch::cat({a.inputs, b.inputs}), torch::cat({a.labels, b.labels}), {}};

  auto accumulated = tiny_model(5);
  ModelParts parts_a = testing::parts_of({accumulated});
  LocalTrainStep step_a(cross_entropy_sum);
  const auto out_a = step_a.run(parts_a, {a, b});

  auto whole = tiny_model(5);
  ModelParts parts_b = testing::parts_of({whole});
  LocalTrainStep step_b(cross_entropy_sum);
  const auto out_b = step_b.run(parts_b, {both});

  EXPECT_EQ(out_a.tokens, 32);
  EXPECT_EQ(out_b.tokens, 32);
  EXPECT_NEAR(out_a.loss, out_b.loss, 1e-5);
  const auto ga = grads_of(*accumulated), gb = grads_of(*whole);
  ASSERT_EQ(ga.size(), gb.size());
  for (const auto& [name, g] : ga) {
    EXPECT_TRUE(torch::allclose(g, gb.at(name), 1e-5, 1e-6)) << name;
  }
  // And they equal the gradients of PyTorch's mean cross-entropy.
  auto reference = tiny_model(5);
  const auto logits = reference->forward(both.inputs);
  torch::nn::functional::cross_entropy(
      logits.flatten(0, 1), both.labels.flatten())
      .backward();
  const auto gr = grads_of(*reference);
  for (const auto& [name, g] : ga) {
    EXPECT_TRUE(torch::allclose(g, gr.at(name), 1e-5, 1e-6)) << name;
  }
}

TEST(LocalTrainStep, RejectsMultiplePartsAndNoData) {
  ModelParts two = testing::parts_of({tiny_model(0), tiny_model(0)});
  LocalTrainStep step(cross_entropy_sum);
  EXPECT_THROW(step.run(two, {random_batch(1, 4)}), std::invalid_argument);
  ModelParts one = testing::parts_of({tiny_model(0)});
  EXPECT_THROW(step.run(one, {}), std::invalid_argument);
}

}  // namespace
}  // namespace baton
