#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "parallel/dist/traffic.h"

namespace baton::tensor_parallel {

/// A place in the model where tensor parallel communicates: the tp group
/// and the region's name ("layers.3.attention"), which errors, profiler
/// traces and the traffic count carry.
struct Region {
  std::shared_ptr<dist::ProcessGroup> group;
  std::string name;
};

/// (B, T / n, ...) -> (B, T, ...): every tp rank's sequence shard gathered
/// along dim 1, rank r's at positions [r T / n, (r + 1) T / n). Its backward
/// reduce-scatters the gradient back to the shards (Megatron's
/// gather-from-sequence-parallel region): what runs before the
/// column-parallel matmuls.
at::Tensor gather_sequence(const at::Tensor& x, const Region& region);

/// (B, T, ...) partial sums -> (B, T / n, ...): summed over the tp ranks
/// and scattered along dim 1 (the reduce-scatter-to-sequence-parallel
/// region). Its backward all-gathers: what runs after the row-parallel
/// matmuls, in place of an all-reduce.
at::Tensor reduce_scatter_sequence(const at::Tensor& x, const Region& region);

/// Sums `grad` (a replicated parameter's gradient computed from this rank's
/// sequence shard) over the tp ranks, returning the sum: the norms'
/// weights under sequence parallel.
at::Tensor all_reduce_gradient(const at::Tensor& grad, const Region& region);

/// The sum of `x` over the tp ranks, every rank's; its backward passes the
/// gradient through unchanged: for a statistic of the sequence that each
/// rank computes a shard's part of (the MoE auxiliary loss's per-sequence
/// counts and scores), whose replicated loss each rank backpropagates.
at::Tensor sum_over_ranks(const at::Tensor& x, const Region& region);

/// What this process handed to tensor-parallel collectives: per region and
/// direction ("layers.0.attention enter forward"), the calls and the bytes a
/// rank sends (an all-gather or reduce-scatter of n shards of S bytes
/// sends (n - 1) S, a ring all-reduce of S bytes 2 (n - 1) S / n). Ranks run
/// as threads of one process add up. For the benchmark that checks the
/// traffic against the formula.
using Traffic = dist::Traffic;
std::map<std::string, Traffic> traffic();
void reset_traffic();

}  // namespace baton::tensor_parallel
