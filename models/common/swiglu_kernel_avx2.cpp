// SwiGLU's kernels for avx2; CMakeLists.txt gives this file its
// instruction-set flags.
#define BATON_SWIGLU_ISA_NS avx2
#include "models/common/swiglu_kernel_impl.h"
