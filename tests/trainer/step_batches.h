#pragma once

// The global batches of the train-step tests, and one rank's rows of them.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <vector>

#include "data/dataloader.h"

namespace baton::testing {

/// The global batch of step `step`: (rows, 9) tokens below `vocab`, from a
/// generator seeded by seed + step, so every rank thread that asks gets it.
inline Batch global_batch(
    int64_t step, int64_t rows, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + step);
  const auto tokens = at::randint(0, vocab, {rows, 9}, gen, at::kLong);
  return {tokens.slice(1, 0, 8), tokens.slice(1, 1, 9), {}};
}

/// Rows [begin, begin + count) of `b` (and of its documents, if any).
inline Batch rows_of(const Batch& b, int64_t begin, int64_t count) {
  return {
      b.inputs.slice(0, begin, begin + count),
      b.labels.slice(0, begin, begin + count),
      b.documents.defined() ? b.documents.slice(0, begin, begin + count)
                            : at::Tensor()};
}

/// Data-parallel rank `dp_rank`'s `local_rows` rows of `global`, cut into
/// `micro` equal micro-batches (one per gradient-accumulation micro-step).
inline std::vector<Batch> micro_batches(
    const Batch& global, int64_t dp_rank, int64_t local_rows, int64_t micro) {
  const Batch mine = rows_of(global, dp_rank * local_rows, local_rows);
  std::vector<Batch> batches;
  const int64_t per = local_rows / micro;
  for (int64_t m = 0; m < micro; ++m) {
    batches.push_back(rows_of(mine, m * per, per));
  }
  return batches;
}

}  // namespace baton::testing
