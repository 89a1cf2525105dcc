// SwiGLU's kernels for baseline; CMakeLists.txt gives this file its
// instruction-set flags.
#define BATON_SWIGLU_ISA_NS baseline
#include "models/common/swiglu_kernel_impl.h"
