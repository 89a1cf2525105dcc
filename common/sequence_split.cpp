#include "common/sequence_split.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace baton {

namespace {

void check_divides(int64_t len, int64_t shards, const char* what) {
  if (shards < 1 || len % (2 * shards) != 0) {
    throw std::invalid_argument(
        std::string("[sequence_split] ") + what + " of " + std::to_string(len) +
        " rows over " + std::to_string(shards) +
        " shards; allowed: a multiple of 2 x shards");
  }
}

}  // namespace

int64_t SequenceSplit::position(int64_t row, int64_t local_len) const {
  const int64_t chunk_len = local_len / 2;
  const auto c = chunks();
  return row < chunk_len ? c[0] * chunk_len + row
                         : c[1] * chunk_len + (row - chunk_len);
}

at::Tensor SequenceSplit::positions(int64_t local_len) const {
  if (!split()) {
    return at::arange(local_len, at::kLong);
  }
  check_divides(local_len * shards, shards, "positions");
  const int64_t chunk_len = local_len / 2;
  const auto c = chunks();
  return at::cat(
      {at::arange(c[0] * chunk_len, (c[0] + 1) * chunk_len, at::kLong),
       at::arange(c[1] * chunk_len, (c[1] + 1) * chunk_len, at::kLong)});
}

at::Tensor SequenceSplit::take(const at::Tensor& x, int64_t dim) const {
  if (!split()) {
    return x;
  }
  const int64_t len = x.size(dim);
  check_divides(len, shards, "take");
  const int64_t chunk_len = len / (2 * shards);
  const auto c = chunks();
  return at::cat(
      {x.narrow(dim, c[0] * chunk_len, chunk_len),
       x.narrow(dim, c[1] * chunk_len, chunk_len)},
      dim);
}

at::Tensor SequenceSplit::restore(
    const at::Tensor& gathered, int64_t dim) const {
  if (gathered.size(0) != shards) {
    throw std::invalid_argument(
        "[sequence_split] restore: " + std::to_string(gathered.size(0)) +
        " shards stacked; allowed: " + std::to_string(shards));
  }
  // `dim` of one shard's rows is dim + 1 of the stack.
  const int64_t local_len = gathered.size(dim + 1);
  const int64_t chunk_len = local_len / 2;
  std::vector<at::Tensor> pieces;
  pieces.reserve(2 * shards);
  for (int64_t chunk = 0; chunk < 2 * shards; ++chunk) {
    const auto [shard, half] = holder(chunk);
    pieces.push_back(
        gathered.select(0, shard).narrow(dim, half * chunk_len, chunk_len));
  }
  return at::cat(pieces, dim);
}

}  // namespace baton
