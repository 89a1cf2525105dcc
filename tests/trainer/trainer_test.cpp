#include <gtest/gtest.h>
#include <torch/torch.h>

#include "builders/builder_registry.h"
#include "models/llama/transformer.h"
#include "trainer/train_step.h"
#include "trainer/trainer.h"

namespace baton {
namespace {

std::shared_ptr<llama::TransformerImpl> tiny_model(uint64_t seed) {
  llama::ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.vocab_size = 40;
  args.multiple_of = 16;
  auto model = std::make_shared<llama::TransformerImpl>(args);
  model->init_weights(seed);
  return model;
}

Batch random_batch(int64_t b, int64_t t) {
  const auto tokens = torch::randint(0, 40, {b, t + 1}, torch::kLong);
  return {tokens.slice(1, 0, t), tokens.slice(1, 1, t + 1)};
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
      torch::cat({a.inputs, b.inputs}), torch::cat({a.labels, b.labels})};

  auto accumulated = tiny_model(5);
  ModelParts parts_a({accumulated});
  LocalTrainStep step_a(cross_entropy_sum);
  const auto out_a = step_a.run(parts_a, {a, b});

  auto whole = tiny_model(5);
  ModelParts parts_b({whole});
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
  ModelParts two({tiny_model(0), tiny_model(0)});
  LocalTrainStep step(cross_entropy_sum);
  EXPECT_THROW(step.run(two, {random_batch(1, 4)}), std::invalid_argument);
  ModelParts one({tiny_model(0)});
  EXPECT_THROW(step.run(one, {}), std::invalid_argument);
}

JobConfig small_job(
    const std::string& dump, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "model.flavor=debugmodel",
      "training.seq_len=32",
      "training.local_batch_size=2",
      "training.steps=12",
      "training.num_threads=1",
      "lr_scheduler.warmup_steps=2",
      "optimizer.lr=0.003",
      "metrics.peak_tflops=1",
      "metrics.log_freq=4",
      "job.dump_folder=" + dump,
  };
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_job_config("", overrides);
}

TEST(Trainer, LossFallsAndGradientsAreClipped) {
  register_builtin_builders();
  const auto dump = ::testing::TempDir() + "/trainer_clip";
  auto trainer =
      make_trainer_builder(small_job(dump, {"training.max_norm=0.5"}))->build();
  const auto history = trainer->train();
  ASSERT_EQ(history.size(), 12u);
  EXPECT_EQ(trainer->step(), 12);
  EXPECT_LT(history.back().loss, history.front().loss - 1.0);
  for (const auto& m : history) {
    EXPECT_TRUE(std::isfinite(m.grad_norm));
    EXPECT_GT(m.tokens_per_sec, 0.0);
  }
  // Run one more step by hand and check the clipped gradients' norm.
  trainer->train_step();
  double sq = 0.0;
  for (const auto& p : trainer->components().model_parts.parameters()) {
    sq += p.grad().pow(2).sum().item<double>();
  }
  EXPECT_LE(std::sqrt(sq), 0.5 + 1e-4);
}

TEST(Trainer, GradientAccumulationCountsEveryMicroStepsTokens) {
  register_builtin_builders();
  const auto dump = ::testing::TempDir() + "/trainer_accum";
  auto trainer =
      make_trainer_builder(
          small_job(dump, {"training.gradient_accumulation_steps=3"}))
          ->build();
  const auto m = trainer->train_step();
  // 3 micro-steps x 2 sequences x 32 tokens, over the step's time.
  EXPECT_NEAR(m.tokens_per_sec * m.step_time_s, 3 * 2 * 32, 1e-6);
}

TEST(Trainer, SameSeedSameLosses) {
  register_builtin_builders();
  const auto dump = ::testing::TempDir() + "/trainer_seed";
  auto first = make_trainer_builder(small_job(dump))->build()->train();
  auto second = make_trainer_builder(small_job(dump))->build()->train();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].loss, second[i].loss) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace baton
