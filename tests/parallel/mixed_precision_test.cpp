// training.mixed_precision_* resolved per device (auto's CPU probe stubbed:
// no timing here), and the mixed_precision applier on a part.

#include "parallel/mixed_precision.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "config/job_config.h"
#include "config/parallel_dims.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/test_parts.h"

namespace baton {
namespace {

TrainingConfig training(const std::string& param, const std::string& reduce) {
  TrainingConfig t;
  t.mixed_precision_param = param;
  t.mixed_precision_reduce = reduce;
  return t;
}

TEST(MixedPrecision, TheProbeTimesOneCoreAndLeavesTheThreadsAsItFoundThem) {
  // No timing asserted: the probe returns a speed ratio and restores
  // ATen's thread count, which it sets to one meanwhile.
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const double speed = measure_bf16_matmul_speed();
  EXPECT_TRUE(std::isfinite(speed));
  EXPECT_GT(speed, 0.0);
  EXPECT_EQ(at::get_num_threads(), 2);
  at::set_num_threads(threads);
}

TEST(MixedPrecision, AutoIsBf16OnCudaAndOnTheCpuOnlyWhereClearlyFaster) {
  int probes = 0;
  const auto slow = [&] {
    ++probes;
    return 0.3;
  };
  const auto fast = [&] {
    ++probes;
    return 1.8;
  };
  const auto cpu = c10::Device(at::kCPU);
  const auto on_slow =
      resolve_mixed_precision(training("auto", "float32"), cpu, slow);
  EXPECT_EQ(on_slow.dtypes.param, at::kFloat);
  EXPECT_NE(on_slow.why.find("0.30x fp32's speed"), std::string::npos)
      << on_slow.why;
  const auto on_fast =
      resolve_mixed_precision(training("auto", "bfloat16"), cpu, fast);
  EXPECT_EQ(on_fast.dtypes.param, at::kBFloat16);
  EXPECT_EQ(on_fast.dtypes.reduce, at::kBFloat16);
  EXPECT_EQ(probes, 2);
  // Barely faster is not enough: a probe near 1x would flip between runs.
  const auto barely = resolve_mixed_precision(
      training("auto", "float32"), cpu, [] { return 1.1; });
  EXPECT_EQ(barely.dtypes.param, at::kFloat);
  EXPECT_NE(barely.why.find("under the 1.20x auto asks"), std::string::npos)
      << barely.why;
  const auto cuda = resolve_mixed_precision(
      training("auto", "float32"), c10::Device(at::kCUDA, 0), slow);
  EXPECT_EQ(cuda.dtypes.param, at::kBFloat16);
  // A set dtype is kept, without a probe.
  EXPECT_EQ(
      resolve_mixed_precision(training("float32", "float32"), cpu, fast)
          .dtypes.param,
      at::kFloat);
  EXPECT_EQ(
      resolve_mixed_precision(training("bfloat16", "float32"), cpu, slow)
          .dtypes.param,
      at::kBFloat16);
  EXPECT_EQ(probes, 2);
}

TEST(MixedPrecision, TheApplierCastsTheForwardAndKeepsTheMasters) {
  const JobConfig config;
  const dist::ParallelMesh mesh(
      baton::testing::builtin_dims(1, 1, 1, 1, 1), 0, nullptr);
  auto model = testing::tiny_llama(16, 1);
  ModelPart part(model);
  MixedPrecisionApplier applier;
  // float32: nothing changes.
  applier.apply(part, ParallelContext{config, mesh, at::kCPU});
  EXPECT_TRUE(part.grad_sync().empty());
  const auto ids = at::randint(0, 16, {2, 5}, at::kLong);
  EXPECT_EQ(model->forward(ids).scalar_type(), at::kFloat);

  applier.apply(
      part,
      ParallelContext{
          config, mesh, at::kCPU, false, {at::kBFloat16, at::kFloat}});
  EXPECT_EQ(part.grad_sync().size(), 1u);
  const auto logits = model->forward(ids);
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  logits.to(at::kFloat).sum().backward();
  part.grad_sync().finish();
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), at::kFloat) << item.key();
  }
}

}  // namespace
}  // namespace baton
