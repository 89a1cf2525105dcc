#pragma once

// SwiGLU's elementwise part on the CPU in float32, silu(a) * b, forward and
// backward in one pass over memory each. ATen runs it as silu, then a
// product, and its backward as four or five passes, each reading and
// writing whole (tokens, hidden) tensors; on the small flavor's shapes the
// fused passes are about three times faster (BM_Swiglu). Compiled once per
// instruction set like the attention kernel, the widest the CPU runs
// chosen at run time (attention_kernel::best_isa).

#include <cstdint>

#include "models/common/attention_kernel.h"

namespace baton::models::swiglu_kernel {

/// out[i] = silu(a[i]) * b[i] for i < n.
using Forward = void (*)(const float* a, const float* b, float* out, int64_t n);
/// The gradients of Forward's a and b (written) from out's gradient g.
using Backward = void (*)(
    const float* a,
    const float* b,
    const float* g,
    float* ga,
    float* gb,
    int64_t n);

/// One instruction set's compiled pair.
struct Kernels {
  Forward forward;
  Backward backward;
};

/// The kernels compiled for `isa`; throws std::invalid_argument where this
/// CPU does not run them.
const Kernels& kernels(attention_kernel::Isa isa);

/// The kernels of attention_kernel::best_isa().
const Kernels& kernels();

}  // namespace baton::models::swiglu_kernel
