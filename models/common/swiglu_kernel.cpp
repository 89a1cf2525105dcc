#include "models/common/swiglu_kernel.h"

#include <stdexcept>
#include <string>

namespace baton::models::swiglu_kernel {

// Each defined by swiglu_kernel_<isa>.cpp.
namespace baseline {
extern const Kernels kKernels;
}  // namespace baseline
namespace avx2 {
extern const Kernels kKernels;
}  // namespace avx2
namespace avx512 {
extern const Kernels kKernels;
}  // namespace avx512

const Kernels& kernels(attention_kernel::Isa isa) {
  static const Kernels* const all[] = {
      &baseline::kKernels, &avx2::kKernels, &avx512::kKernels};
  if (!attention_kernel::isa_supported(isa)) {
    throw std::invalid_argument(
        std::string("[swiglu] this CPU does not run the ") +
        attention_kernel::isa_name(isa) + " kernels; it runs up to " +
        attention_kernel::isa_name(attention_kernel::best_isa()));
  }
  return *all[static_cast<int>(isa)];
}

const Kernels& kernels() {
  static const Kernels& best = kernels(attention_kernel::best_isa());
  return best;
}

}  // namespace baton::models::swiglu_kernel
