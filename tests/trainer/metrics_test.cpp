#include "trainer/metrics.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(Metrics, TimeLeftReadsAtAGlance) {
  EXPECT_EQ(format_duration(0.0), "0s");
  EXPECT_EQ(format_duration(-3.0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(60.0), "1m00s");
  EXPECT_EQ(format_duration(725.0), "12m05s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3600.0 * 3 + 4 * 60 + 30), "3h04m");
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(Metrics, KnownGpusHaveTheirPublishedDensePeakPerDtype) {
  // As CUDA names them; the more specific name wins.
  EXPECT_EQ(
      published_peak_tflops("NVIDIA H100 80GB HBM3", c10::kBFloat16), 989.4);
  EXPECT_EQ(published_peak_tflops("NVIDIA H100 PCIe", c10::kBFloat16), 756.0);
  EXPECT_EQ(published_peak_tflops("NVIDIA H100 NVL", c10::kBFloat16), 835.0);
  EXPECT_EQ(published_peak_tflops("NVIDIA H200", c10::kBFloat16), 989.4);
  EXPECT_EQ(
      published_peak_tflops("NVIDIA A100-SXM4-80GB", c10::kBFloat16), 312.0);
  EXPECT_EQ(published_peak_tflops("NVIDIA L40S", c10::kBFloat16), 362.1);
  EXPECT_EQ(published_peak_tflops("NVIDIA L4", c10::kBFloat16), 121.0);
  EXPECT_EQ(published_peak_tflops("NVIDIA B200", c10::kBFloat16), 2250.0);
  // float32 runs on the CUDA cores (TF32 off): a much lower peak.
  EXPECT_EQ(published_peak_tflops("NVIDIA H100 80GB HBM3", c10::kFloat), 66.9);
  EXPECT_EQ(published_peak_tflops("NVIDIA A100-SXM4-40GB", c10::kFloat), 19.5);
  // Not in the table, or no published figure for the dtype: the probe.
  EXPECT_EQ(
      published_peak_tflops("NVIDIA GeForce GTX 1080", c10::kBFloat16),
      std::nullopt);
  EXPECT_EQ(published_peak_tflops("NVIDIA A10G", c10::kBFloat16), std::nullopt);
  EXPECT_EQ(published_peak_tflops("NVIDIA B200", c10::kFloat), std::nullopt);
  EXPECT_EQ(published_peak_tflops("", c10::kBFloat16), std::nullopt);
}

}  // namespace
}  // namespace baton
