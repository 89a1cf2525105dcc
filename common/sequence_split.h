#pragma once

// Context parallel's split of every sequence across the ranks of its group,
// for causal balance (torchtitan's head-tail load balancer, Megatron's CP):
// the sequence is cut into 2 x shards chunks of equal length, and shard i
// holds chunk i followed by chunk 2 shards - 1 - i. Under a causal mask the
// early chunks' queries see few keys and the late ones many; pairing the
// i-th from the head with the i-th from the tail gives every shard the same
// work, 2 x shards chunk-by-chunk blocks (a diagonal block counted as half).
// The data loader cuts its rows this way, the model's RoPE rotates by the
// positions it names, and the attention puts the shards' keys back in
// sequence order.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <utility>

namespace baton {

struct SequenceSplit {
  /// Ranks the sequence is split over (1: not split) and this one's index.
  int64_t shards = 1;
  int64_t index = 0;

  bool split() const {
    return shards > 1;
  }
  /// The two chunks this shard holds, in its row order.
  std::array<int64_t, 2> chunks() const {
    return {index, 2 * shards - 1 - index};
  }
  /// The shard that holds chunk `chunk` and where in its rows (0: first
  /// half, 1: second).
  std::pair<int64_t, int64_t> holder(int64_t chunk) const {
    return chunk < shards
               ? std::pair<int64_t, int64_t>{chunk, 0}
               : std::pair<int64_t, int64_t>{2 * shards - 1 - chunk, 1};
  }
  /// The position in the whole sequence of this shard's row `row` of
  /// `local_len` (= seq_len / shards).
  int64_t position(int64_t row, int64_t local_len) const;
  /// This shard's positions, (local_len) int64.
  at::Tensor positions(int64_t local_len) const;
  /// This shard's rows of `x` along `dim` (the whole sequence there, a
  /// multiple of 2 x shards), contiguous: its two chunks, head's first.
  at::Tensor take(const at::Tensor& x, int64_t dim) const;
  /// The whole sequence along `dim` from every shard's rows stacked along
  /// a new leading dimension (shards, ..., local_len, ...), as an
  /// all-gather returns them: the inverse of take over all shards.
  at::Tensor restore(const at::Tensor& gathered, int64_t dim) const;
};

}  // namespace baton
