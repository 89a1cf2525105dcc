// The start-up matmul probe MFU is measured against: the step's shapes and
// the squares, on the device the step runs on.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/metrics.h"

namespace baton {
namespace {

bool same(const GemmShape& a, const GemmShape& b) {
  return a.m == b.m && a.k == b.k && a.n == b.n;
}

TEST(PeakProbe, ShapesAreTheStepsAndTheSquaresAGpuNeeds) {
  const auto cpu = peak_probe_shapes(16384, 256, 768, 2000);
  ASSERT_EQ(cpu.size(), 5u);
  EXPECT_TRUE(same(cpu[0], {1024, 1024, 1024}));
  // Rows capped at 4096, where a CPU's rate no longer grows.
  EXPECT_TRUE(same(cpu[1], {4096, 256, 256}));
  EXPECT_TRUE(same(cpu[2], {4096, 256, 768}));
  EXPECT_TRUE(same(cpu[3], {4096, 768, 256}));
  EXPECT_TRUE(same(cpu[4], {4096, 256, 2000}));
  const auto gpu =
      peak_probe_shapes(16384, 256, 768, 2000, c10::Device(c10::kCUDA, 0));
  ASSERT_EQ(gpu.size(), 6u);
  EXPECT_TRUE(same(gpu.back(), {8192, 8192, 8192}));
}

TEST(PeakProbe, NamesTheFastestShapeOnTheCpu) {
  const std::vector<GemmShape> shapes{{64, 64, 64}, {256, 256, 256}};
  GemmShape best;
  const double peak = measure_peak_tflops(shapes, 0.05, at::kFloat, &best);
  EXPECT_GT(peak, 0.0);
  EXPECT_TRUE(same(best, shapes[0]) || same(best, shapes[1]));
}

TEST(PeakProbe, RunsOnTheGpuWhenTheStepDoes) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible to libtorch; this test runs "
                    "where there is one (bench/gpu.sh builds and runs it)";
  }
  // A CPU's probe under a GPU's step made the step's MFU 300 %: the same
  // square on the GPU is far faster than on the CPU.
  const std::vector<GemmShape> square{{1024, 1024, 1024}};
  const double cpu = measure_peak_tflops(square, 0.1, at::kBFloat16);
  const double gpu = measure_peak_tflops(
      square, 0.1, at::kBFloat16, nullptr, c10::Device(c10::kCUDA, 0));
  EXPECT_GT(gpu, 10.0 * cpu) << "cpu " << cpu << " gpu " << gpu;
}

}  // namespace
}  // namespace baton
