#pragma once

// Attention by its plain formula, the independent reference of the block
// attention's tests (one process, document masking, context parallel).

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <vector>

namespace baton::testing {

/// softmax(q k^T + mask) v in plain ATen ops, q (B, H, Tq, D) scaled, k, v
/// (B, KV, Tk, D): row i sees key j where k_pos[j] <= q_pos[i] and, with
/// documents ((B, Tq) and (B, Tk)), both are of the same document.
inline at::Tensor reference_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& q_pos,
    const at::Tensor& k_pos,
    const at::Tensor& q_docs = at::Tensor(),
    const at::Tensor& k_docs = at::Tensor()) {
  const int64_t repeats = q.size(1) / k.size(1);
  const auto kk = k.repeat_interleave(repeats, 1);
  const auto vv = v.repeat_interleave(repeats, 1);
  auto scores = at::matmul(q, kk.transpose(-1, -2));  // (B, H, Tq, Tk)
  auto allowed = k_pos.unsqueeze(0) <= q_pos.unsqueeze(1);
  if (q_docs.defined()) {
    allowed =
        (allowed.unsqueeze(0) & (k_docs.unsqueeze(1) == q_docs.unsqueeze(2)))
            .unsqueeze(1);  // (B, 1, Tq, Tk)
  }
  scores = scores.masked_fill(
      allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), vv);
}

/// (B, T) document ids, B = cuts.size(): row b cut at cuts[b] random
/// places (seeded by `seed`), its ids counting up from 0 along the row.
inline at::Tensor random_documents(
    const std::vector<int64_t>& cuts, int64_t T, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto B = static_cast<int64_t>(cuts.size());
  at::Tensor starts = at::zeros({B, T}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const at::Tensor where =
        at::randperm(T - 1, gen, at::kLong).narrow(0, 0, cuts[b]) + 1;
    starts[b].index_fill_(0, where, 1);
  }
  return starts.cumsum(1);
}

}  // namespace baton::testing
