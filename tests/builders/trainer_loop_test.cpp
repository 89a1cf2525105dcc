// The trainer loop as the default builder builds it: the loss falls,
// gradients are clipped, accumulation counts every micro-step's tokens, and
// the same seed gives the same losses.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "builders/builder_registry.h"

namespace baton {
namespace {

JobConfig small_job(
    const std::string& dump, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "model.flavor=debugmodel",
      "training.seq_len=32",
      "training.local_batch_size=2",
      "training.steps=12",
      "training.num_threads=1",
      // auto's CPU probe may choose differently from one build to the next
      // on a busy machine; these tests are about seeds and counts.
      "training.mixed_precision_param=float32",
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
  trainer->optimizer_step();
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
  const auto m = trainer->optimizer_step();
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
