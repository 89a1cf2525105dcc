#pragma once

// Causal attention of one head on the CPU in float32, without BLAS: the
// scores, softmax and both products of a group of query rows stay in the
// core's caches and registers. libtorch 1.13 (built without MKL) runs each
// (batch, head) product as its own OpenBLAS call, and with heads of 16 to
// 128 columns those calls spend more time packing and dispatching than
// multiplying; this kernel is several times faster there
// (BM_CausalAttention, docs/PERFORMANCE.md).
//
// The same source is compiled once per instruction set (AVX-512, AVX2 with
// FMA, and baseline x86-64) and the widest one the CPU runs is chosen at
// run time, so the binary runs on any x86-64.

#include <cstdint>

namespace baton::models::attention_kernel {

/// The instruction sets the kernel is compiled for, narrowest first.
enum class Isa { kBaseline, kAvx2, kAvx512 };

/// Whether this CPU runs `isa`'s code.
bool isa_supported(Isa isa);

/// The widest instruction set this CPU runs.
Isa best_isa();

/// "baseline", "avx2" or "avx512".
const char* isa_name(Isa isa);

/// The kernels work on groups of kGroupRows query rows against keys in
/// chunks of kChunk.
constexpr int64_t kGroupRows = 4;
constexpr int64_t kChunk = 16;

/// Floats of scratch one call of either function needs for a head of
/// `seq_len` rows of `head_dim` columns.
int64_t scratch_floats(int64_t seq_len, int64_t head_dim);

/// Floats of one head's saved probabilities: each group of kGroupRows
/// query rows keeps its rows over the keys it sees, in whole chunks (about
/// half of (T, T) for long sequences).
int64_t probs_floats(int64_t seq_len);

/// softmax(q k^T + causal mask) v for one head. q, k, v, out: (T, D)
/// row-major; q already carries the 1 / sqrt(D) factor. Writes the
/// probabilities (probs_floats) into `probs` unless it is null.
using HeadForward = void (*)(
    const float* q,
    const float* k,
    const float* v,
    int64_t seq_len,
    int64_t head_dim,
    float* out,
    float* probs,
    float* scratch);

/// The gradients of HeadForward's q, k and v (written, not accumulated)
/// from its output's gradient `gout`. `probs`: what the forward wrote, or
/// null to recompute them from q and k.
using HeadBackward = void (*)(
    const float* q,
    const float* k,
    const float* v,
    const float* probs,
    const float* gout,
    int64_t seq_len,
    int64_t head_dim,
    float* gq,
    float* gk,
    float* gv,
    float* scratch);

/// One instruction set's compiled pair.
struct HeadKernels {
  HeadForward forward;
  HeadBackward backward;
};

/// The kernels compiled for `isa`; throws std::invalid_argument where this
/// CPU does not run them.
const HeadKernels& head_kernels(Isa isa);

/// The kernels of best_isa(), chosen once.
const HeadKernels& head_kernels();

}  // namespace baton::models::attention_kernel
