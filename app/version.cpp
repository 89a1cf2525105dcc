#include "app/version.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <sstream>

#include "common/blas.h"
#include "common/version.h"
#include "models/common/attention_kernel.h"

namespace baton {

std::string version_report() {
  std::ostringstream out;
  out << "baton " << kVersion << " (commit " << git_commit() << ")\n";
  out << "libtorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "."
      << TORCH_VERSION_PATCH << "\n";
#ifdef BATON_CUDA_VERSION
  out << "CUDA " << BATON_CUDA_VERSION << " with the NCCL backend; "
      << static_cast<int>(torch::cuda::device_count())
      << " device(s) visible\n";
#else
  out << "CUDA: none (a CPU-only build)\n";
#endif
  out << "BLAS: " << loaded_blas().describe() << "\n";
  out << "CPU attention kernel: "
      << models::attention_kernel::isa_name(
             models::attention_kernel::best_isa())
      << "\n";
  return out.str();
}

}  // namespace baton
