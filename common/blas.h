#pragma once

#include <string>

namespace baton {

/// The BLAS this process computes with, for the start-up log.
///
/// PyTorch's x86-64 wheels link MKL into libtorch_cpu: its products run on
/// libtorch's own OpenMP threads (at::set_num_threads), chosen by MKL for
/// the CPU it finds, so Baton has no kernel set or thread pool of the
/// BLAS's to choose. (On Debian's libtorch 1.13 it chose OpenBLAS's kernels
/// at start-up and timed out OpenBLAS's idle threads; both went with that
/// build: docs/ARCHITECTURE.md, "libtorch".)
struct BlasInfo {
  /// The file the process's sgemm_ comes from; "" when it has none.
  std::string sgemm_library;
  /// The BLAS's version as it reports it (MKL_Get_Version_String,
  /// openblas_get_config); "" for a BLAS Baton does not know.
  std::string version;

  /// "Intel(R) oneAPI Math Kernel Library Version 2024.2 ... (sgemm_ from
  /// .../libtorch_cpu.so)".
  std::string describe() const;
};
BlasInfo loaded_blas();

}  // namespace baton
