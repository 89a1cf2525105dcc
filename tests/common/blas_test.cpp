// Choosing OpenBLAS's kernel set: what is loaded, what the CPU runs, the
// choice for each setting, and the check of the loaded kernels' products.

#include <gtest/gtest.h>

#include "common/blas.h"
#include "common/error.h"

namespace baton {
namespace {

CpuSimd avx512_bf16() {
  CpuSimd c;
  c.avx2 = c.avx512f = c.avx512bf16 = true;
  c.model = "a CPU with AVX-512 BF16";
  return c;
}

CpuSimd avx2_only() {
  CpuSimd c;
  c.avx2 = true;
  c.model = "an AVX2 CPU";
  return c;
}

BlasInfo openblas(const std::string& kernels) {
  BlasInfo b;
  b.openblas = true;
  b.kernels = kernels;
  return b;
}

TEST(Blas, TheLoadedOpenBlasAndTheCpuAreFound) {
  const BlasInfo blas = loaded_blas();
  std::cout << "loaded: " << blas.describe() << "\n";
  // libtorch here links Debian's OpenBLAS, and its sgemm_ is the one the
  // process calls.
  EXPECT_TRUE(blas.openblas);
  EXPECT_FALSE(blas.kernels.empty());
  EXPECT_FALSE(blas.sgemm_library.empty());
  const CpuSimd cpu = cpu_simd();
  std::cout << "cpu: " << cpu.model << " avx2 " << cpu.avx2 << " avx512f "
            << cpu.avx512f << " avx512_bf16 " << cpu.avx512bf16 << "\n";
  EXPECT_FALSE(cpu.model.empty());
}

TEST(Blas, AnotherBlasServingSgemmIsNamedAndLeftAlone) {
  // As loaded_blas() reports BLIS through LD_LIBRARY_PATH beside Debian's
  // liblapack (which brings libopenblas in): not OpenBLAS, named by file.
  BlasInfo blis;
  blis.sgemm_library = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3";
  EXPECT_EQ(
      blis.describe(),
      "not OpenBLAS (sgemm_ from "
      "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3)");
  const KernelChoice choice =
      choose_kernels("auto", blis, avx512_bf16(), "", "");
  EXPECT_EQ(choice.kernels, "");
  EXPECT_NE(choice.why.find("not OpenBLAS"), std::string::npos) << choice.why;
}

TEST(Blas, AutoTakesTheFastestSetTheCpuRunsOverASlowerOne) {
  const auto c =
      choose_kernels("auto", openblas("Prescott"), avx512_bf16(), "", "");
  EXPECT_EQ(c.kernels, "SkylakeX");
  EXPECT_EQ(c.why, "this CPU has AVX-512 and OpenBLAS picked Prescott");
  EXPECT_EQ(
      choose_kernels("auto", openblas("Haswell"), avx512_bf16(), "SkylakeX", "")
          .kernels,
      "Cooperlake");  // the refused one is skipped
  EXPECT_EQ(
      choose_kernels(
          "auto",
          openblas("Prescott"),
          avx512_bf16(),
          "SkylakeX,Cooperlake",
          "")
          .kernels,
      "Haswell");
  EXPECT_EQ(
      choose_kernels("auto", openblas("Cooperlake"), avx512_bf16(), "", "")
          .kernels,
      "");  // as fast: OpenBLAS's own is kept
  EXPECT_EQ(
      choose_kernels("auto", openblas("Haswell"), avx2_only(), "", "").kernels,
      "");  // already the fastest this CPU runs
  EXPECT_EQ(
      choose_kernels(
          "auto",
          openblas("SkylakeX"),
          avx512_bf16(),
          "SkylakeX,Cooperlake",
          "")
          .kernels,
      "");
  BlasInfo other;
  EXPECT_EQ(choose_kernels("auto", other, avx512_bf16(), "", "").kernels, "");
}

TEST(Blas, DefaultKeepsAndAForcedSetIsTakenOrRefusedByName) {
  EXPECT_EQ(
      choose_kernels("default", openblas("Prescott"), avx512_bf16(), "", "")
          .kernels,
      "");
  EXPECT_EQ(
      choose_kernels("SkylakeX", openblas("Haswell"), avx512_bf16(), "", "")
          .kernels,
      "SkylakeX");
  try {
    choose_kernels(
        "Cooperlake",
        openblas("Haswell"),
        avx2_only(),
        "",
        "BATON_BLAS_KERNELS");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "BATON_BLAS_KERNELS: training.blas_kernels: Cooperlake needs AVX-512 "
        "with BF16, which this CPU (an AVX2 CPU) lacks; allowed: auto, "
        "default, or a kernel set it runs");
  }
  CpuSimd old;
  old.model = "an SSE CPU";
  EXPECT_EQ(missing_instructions("Zen", old), "AVX2");
  EXPECT_EQ(missing_instructions("Sandybridge", old), "AVX");
  EXPECT_EQ(missing_instructions("Prescott", old), "");
  EXPECT_THROW(
      choose_kernels("Pentium", openblas("Haswell"), old, "", ""), ConfigError);
  // A forced set whose check failed is not tried again.
  EXPECT_EQ(
      choose_kernels(
          "SkylakeX", openblas("Haswell"), avx512_bf16(), "SkylakeX", "")
          .kernels,
      "");
}

TEST(Blas, TheLoadedKernelsComputeCorrectProducts) {
  EXPECT_EQ(check_blas_products(), "");
}

TEST(Blas, AThreadsGuardSetsOpenBlasThreadsAndRestoresThem) {
  // libtorch here links Debian's OpenBLAS (the first test checks it).
  const int before = blas_threads();
  ASSERT_GT(before, 0);
  {
    const BlasThreadsGuard one(1);
    EXPECT_EQ(blas_threads(), 1);
    {
      const BlasThreadsGuard two(2);
      EXPECT_EQ(blas_threads(), 2);
    }
    EXPECT_EQ(blas_threads(), 1);
  }
  EXPECT_EQ(blas_threads(), before);
}

}  // namespace
}  // namespace baton
