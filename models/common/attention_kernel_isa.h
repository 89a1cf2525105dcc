#pragma once

// The head kernels of each instruction set, compiled from
// attention_kernel_impl.h by attention_kernel_<isa>.cpp; attention_kernel.cpp
// chooses among them.

#include "models/common/attention_kernel.h"

namespace baton::models::attention_kernel {
namespace baseline {
extern const HeadKernels kKernels;
}  // namespace baseline
namespace avx2 {
extern const HeadKernels kKernels;
}  // namespace avx2
namespace avx512 {
extern const HeadKernels kKernels;
}  // namespace avx512
}  // namespace baton::models::attention_kernel
