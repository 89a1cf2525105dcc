#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "parallel/tensor_parallel/regions.h"

namespace baton::tensor_parallel {

/// The rows [begin, end) of a vocabulary of `vocab` tokens that tp rank
/// `rank` of `size` holds: contiguous, the first vocab % size ranks one row
/// more, none empty while vocab >= size.
struct VocabRange {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const {
    return end - begin;
  }
  static VocabRange of(int64_t vocab, int64_t rank, int64_t size);
};

/// The token embedding with its table split by vocabulary: ids (B, T) are
/// looked up in this rank's rows `weight` (range.size(), dim), ids outside
/// the range giving zeros, and the partial embeddings are summed over the
/// tp ranks and scattered along the sequence: (B, T / n, dim), the
/// sequence-parallel input of the first block. The gradient of each row
/// stays on the rank that holds it.
at::Tensor vocab_parallel_embedding(
    const at::Tensor& ids,
    const at::Tensor& weight,
    const VocabRange& range,
    const Region& region);

/// Cross-entropy summed over tokens from vocabulary-parallel logits: this
/// rank's `logits` (B, T, range.size()) are the columns [range.begin,
/// range.end) of the whole (B, T, vocab), which are never gathered (the
/// max, the sum of exponentials and the target's logit are all-reduced
/// over the tp group, a few floats per token). Equal to cross_entropy_sum
/// of the whole logits, values and gradients, in float32; labels -100 are
/// ignored, as there.
at::Tensor vocab_parallel_cross_entropy_sum(
    const at::Tensor& logits,
    const at::Tensor& labels,
    const VocabRange& range,
    const Region& region);

}  // namespace baton::tensor_parallel
