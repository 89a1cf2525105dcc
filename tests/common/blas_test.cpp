// The BLAS the process computes with, as the start-up log names it.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/blas.h"

namespace baton {
namespace {

TEST(Blas, TheWheelsBlasServesTheProductsAndIsNamed) {
  // A product first, so that whatever loads lazily has loaded.
  (void)at::mm(at::ones({4, 4}), at::ones({4, 4}));
  const BlasInfo blas = loaded_blas();
  std::cout << "loaded: " << blas.describe() << "\n";
  EXPECT_FALSE(blas.sgemm_library.empty());
#if defined(__x86_64__)
  // The x86-64 wheel links MKL into libtorch_cpu: sgemm_ and its version
  // come from there, and nothing else in the process defines them first.
  EXPECT_NE(blas.sgemm_library.find("libtorch_cpu"), std::string::npos)
      << blas.sgemm_library;
  EXPECT_NE(blas.version.find("Math Kernel Library"), std::string::npos)
      << blas.version;
#endif
  EXPECT_NE(blas.describe().find(blas.sgemm_library), std::string::npos);
}

TEST(Blas, ABlasWithoutAKnownVersionIsNamedByItsFile) {
  BlasInfo other;
  other.sgemm_library = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3";
  EXPECT_EQ(
      other.describe(),
      "a BLAS (sgemm_ from "
      "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3)");
  EXPECT_EQ(BlasInfo().describe(), "no sgemm_ in the process");
}

}  // namespace
}  // namespace baton
