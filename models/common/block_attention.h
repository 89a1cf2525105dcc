#pragma once

// Attention in tiles of query rows against keys, merged by their
// log-sum-exp: the engine under context parallel's attention across shards
// (parallel/context_parallel) and under document masking, where packed
// documents attend only within themselves (block-causal, torchtitan's
// FlexAttention mask). Query row i sees key j where key j's position in the
// whole sequence is at most row i's and, with documents, both belong to the
// same document. A tile in which no row sees any key is skipped, so a causal
// mask costs about half of the products and a document mask less again; a
// tile in which every row sees every key needs no mask. A block without
// documents whose keys all precede its rows, or that is causal on one run of
// positions (context parallel's earlier and diagonal blocks), runs whole in
// a fused kernel with its log-sum-exp instead: on the CPU ATen's
// flash-attention kernel in float32 and float64 (about twice as fast as the
// tiles at seq 8192), on CUDA SDPA's memory-efficient kernel in float32,
// bfloat16 and float16 with head dims a multiple of 8 (a half-precision
// block's output rounded once before its float32 merge, as in torch's own
// ring attention). The backward
// recomputes each tile's probabilities from the saved log-sum-exp
// (FlashAttention's), so nothing of (T, T) is kept. ATen's batched products:
// any device and dtype, accumulating in float32 (float64 for float64
// inputs).
//
// Shapes: q (B, KV, G, Tq, D), G query heads per key/value head, q already
// carrying the 1 / sqrt(D) factor; k, v (B, KV, Tk, D); out (B, KV, G, Tq,
// D) and lse (B, KV, G, Tq) in the accumulation dtype.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace baton::models {

/// Query rows and keys per tile (the scores of one tile: B x H x kTileRows
/// x kTileKeys floats). 128 x 128 measured fastest on the CPU at seq 8192
/// (docs/PERFORMANCE.md's context parallel section).
inline constexpr int64_t kTileRows = 128;
inline constexpr int64_t kTileKeys = 128;

/// Where a block's query rows or keys sit: their positions in the whole
/// sequence ((T) int64, on the CPU) and, under document masking, each one's
/// document ((B, T) int64, on the CPU, nondecreasing with the position);
/// documents undefined: every position in one document.
struct BlockSpan {
  at::Tensor positions;
  at::Tensor documents;

  /// The span of the positions [start, start + length) of this one.
  BlockSpan narrow(int64_t start, int64_t length) const;
};

/// The dtype the blocks accumulate in for inputs like `x`: float32 for
/// bfloat16 and float32, float64 for float64.
at::ScalarType block_accumulation(const at::Tensor& x);

/// Whether q's block over these keys runs whole in a fused kernel (see
/// above) rather than in tiles.
bool block_runs_whole(
    const at::Tensor& q, const BlockSpan& rows, const BlockSpan& keys);

/// Adds q's attention over (k, v) into the running (out, lse), in place,
/// tile by tile or whole in a kernel.
void accumulate_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys,
    at::Tensor& out,
    at::Tensor& lse);

/// Adds into dq (B, KV, G, Tq, D), dk and dv (B, KV, Tk, D) (accumulation
/// dtype) the gradients of q's attention over (k, v), given the final
/// output `out` (B, KV, G, Tq, D) and lse over every key the rows see, and
/// the output's gradient `dout` (B, KV, G, Tq, D).
void accumulate_attention_backward(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys,
    const at::Tensor& out,
    const at::Tensor& lse,
    const at::Tensor& dout,
    at::Tensor dq,
    at::Tensor dk,
    at::Tensor dv);

/// q's attention over (k, v) with its log-sum-exp, from nothing: (out, lse);
/// a row that sees no key has lse -inf and out 0.
std::pair<at::Tensor, at::Tensor> attention_with_lse(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys);

/// Causal attention of packed documents in one sequence: row i sees keys j
/// <= i of its own document. q (B, H, T, D) carrying 1 / sqrt(D), k, v (B,
/// KV, T, D) with KV dividing H, `documents` (B, T) int64 nondecreasing
/// along each row. Returns (B, H, T, D) in q's dtype, differentiable in q, k
/// and v; keeps q, k, v, the output and the log-sum-exp for its backward
/// (under an op-selective checkpoint the output and log-sum-exp, which the
/// recomputation takes back).
at::Tensor document_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& documents);

}  // namespace baton::models
