// SwiGLU's kernels for avx512; CMakeLists.txt gives this file its
// instruction-set flags.
#define BATON_SWIGLU_ISA_NS avx512
#include "models/common/swiglu_kernel_impl.h"
