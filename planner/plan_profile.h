#pragma once

// `baton plan`'s profile step: measures on this machine what a cost file
// holds (docs/plan.md). Every rank of the launch times the same pieces at
// the same moments, so the figures carry the ranks' contention for the
// cores, caches and memory that a real run of that many ranks meets.

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "planner/plan.h"

namespace baton {

namespace dist {
class Runtime;
}

/// What the profile measures and how often.

struct ProfileOptions {
  /// Microbatch sizes (sequences of seq_len tokens) to time.
  TORCH_ARG(std::vector<int64_t>, rows) = std::vector<int64_t>{1};
  /// Timed runs of each measurement, after `warmup` untimed ones; the
  /// mean is kept (links: the median).
  TORCH_ARG(int64_t, repeats) = 5;
  TORCH_ARG(int64_t, warmup) = 2;
  /// Blocks, each with weights of its own, that a run passes through in
  /// turn (as a stage runs its layers), so that a pass meets its weights
  /// as cold as in training; at most the model's layers and about 1 GiB.
  TORCH_ARG(int64_t, block_copies) = 4;
  /// Timed runs (after one warm-up) of the pipeline that measures the
  /// block's passes where two ranks or more all time compute; 0: the block
  /// timed alone, as the embedding and the output are.
  TORCH_ARG(int64_t, pipeline_runs) = 3;
  /// Ranks that time the compute; the others only meet the barriers and
  /// take part in the communication (a world larger than the cores). 0:
  /// every rank.
  TORCH_ARG(int64_t, compute_ranks) = 0;
  /// Degrees of the searched parallelisms (Parallelism::plan) to time, by
  /// name, each with its microbatch sizes: the pieces cut by the
  /// parallelism's own steps over that many ranks (only where the world
  /// divides by it and every rank times compute).
  TORCH_ARG(SplitRows, splits) = {};
  /// Sequences per rank at which the data-parallel modes are timed over
  /// the world (PlanCosts::data_parallel; only where every rank times
  /// compute); 0: not timed.
  TORCH_ARG(int64_t, data_parallel_rows) = 0;
  /// Byte sizes the P2P and the collectives are timed at.
  TORCH_ARG(std::vector<int64_t>, comm_bytes) = std::vector<int64_t>{
      1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24};
};

/// Fits seconds = latency + x / bandwidth to (x bytes, seconds) points by
/// least squares on the relative error (weights 1 / seconds^2, so the small
/// sizes count as much as the large). Where noise hides the trend (a
/// slope or latency below 0) the largest point's rate, no latency.
LinkCosts fit_link_costs(const std::vector<std::pair<double, double>>& points);

/// Measures `config`'s model on this process, one rank of `runtime`'s
/// world (null: a process of its own):
/// - at each of options.rows, F, B, I and W of three chunks built as a
///   pipeline stage builds them (the model's own code, its mixed
///   precision applied): a block (with two ranks or more, all timing
///   compute, as the pipeline executor runs it in Interleaved1F1B and
///   InterleavedZeroBubble over the ranks, options.pipeline_runs() runs;
///   else options.block_copies() of them, with weights of their own,
///   passed through in turn); the embedding alone;
///   the final norm, output projection and loss; and, for each degree of
///   options.splits, the same pieces cut by that parallelism's steps over
///   that many ranks (their collectives inside the passes);
/// - the optimizer step with gradient clipping, per parameter;
/// - with two ranks or more, P2P between ranks 0 and 1 (half a round trip)
///   and the world's all_reduce, all_gather and reduce_scatter at
///   options.comm_bytes, each fitted to latency + bytes / bandwidth by
///   least squares on the relative error.
/// Compute figures are the mean over the compute ranks of each one's
/// mean; every rank returns the same costs (a collective call).
PlanCosts profile_plan_costs(
    const JobConfig& config,
    dist::Runtime* runtime,
    const ProfileOptions& options = ProfileOptions());

}  // namespace baton
