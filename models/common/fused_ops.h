#pragma once

// The Llama block's memory-bound pieces as single autograd nodes: RMSNorm,
// rotary embedding fused with the heads-first transpose, SwiGLU's product,
// and causal attention that never forms the masked half of the scores. Each has
// its own backward, so autograd saves what the backward needs and nothing else.
// Checked against the plain ATen formulas in tests/models/fused_ops_test.cpp.

#include <ATen/core/Tensor.h>

namespace baton::models {

/// Rotates the pairs (x[2i], x[2i+1]) of each head by the angles of `cos` /
/// `sin` (T, D/2), Meta's layout, multiplies by `scale`, and returns the
/// result heads first. x: (B, T, H, D) -> (B, H, T, D), contiguous. A
/// lower-precision x (bf16) is rotated in float32 and returned in its dtype.
at::Tensor rope_heads_first(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    double scale = 1.0);

/// x / sqrt(mean(x^2, -1) + eps) * weight in one pass per row, with a
/// one-pass backward. x: (..., dim), weight: (dim) -> (..., dim). A
/// lower-precision x (bf16) is normalised in float32, cast back, then
/// scaled by weight (Meta's Llama's order).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// silu(a) * b, SwiGLU's elementwise part, keeping a and b for its backward
/// (not silu(a) too, as ATen's two ops do). On the CPU in float32 each pass
/// is one of swiglu_kernel.h's; elsewhere (a GPU, bf16) ATen's ops. a and
/// b: the same shape, dtype and device.
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);

/// softmax(q k^T / sqrt(D) + causal mask) v. q, k, v: (B, H, T, D) ->
/// (B, H, T, D). `q_scaled`: q already carries the 1 / sqrt(D) factor. On
/// the CPU in float32 each head runs in attention_kernel.h's kernel (the
/// heads split among ATen's threads); elsewhere as
/// blocked_causal_attention with blocks of 64 rows.
at::Tensor causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    bool q_scaled = false);

/// blocked_causal_attention's default rows per block.
inline constexpr int64_t kAttentionBlockRows = 64;

/// The same in ATen's batched products, in blocks of `block` query rows
/// that only look at the keys up to their block's end, so about half of
/// the scores of a long sequence are never formed. Any dtype and device.
at::Tensor blocked_causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    bool q_scaled = false,
    int64_t block = kAttentionBlockRows);

/// Elements causal_attention keeps per head of a sequence of `seq_len` for
/// its backward beyond q, k, v and its output: the probabilities of the
/// unmasked half, in the kernel's row-group layout (`kernel`: CPU float32)
/// or in blocked_causal_attention's blocks (in the compute
/// dtype). None under an op-selective checkpoint, whose backward
/// recomputes them.
int64_t causal_attention_saved_elements(int64_t seq_len, bool kernel);

}  // namespace baton::models
