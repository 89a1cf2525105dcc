#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace baton {

/// Sum of the token losses of `logits` (B, T, vocab) against `labels`
/// (B, T). Train steps divide by their total token count, so gradients do
/// not depend on how a step is cut into micro-steps or microbatches; the
/// local step and the pipeline executor take the same function.
using LossFn = std::function<at::Tensor(
    const at::Tensor& logits, const at::Tensor& labels)>;

/// Cross-entropy summed over tokens, in float32 whatever the logits' dtype
/// (bf16 under mixed precision): the default LossFn.
at::Tensor cross_entropy_sum(
    const at::Tensor& logits, const at::Tensor& labels);

}  // namespace baton
