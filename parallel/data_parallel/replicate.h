#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/applier.h"
#include "parallel/grad_sync.h"

namespace baton::dist {
class ProcessGroup;
}

namespace baton {

/// Data parallel (replicate) for one model part, as DDP does it: the
/// gradients are all-reduced (summed) across `group` in buckets, each bucket
/// started by the gradient-accumulation hooks as soon as its last gradient
/// is ready during backward, so communication overlaps the rest of the
/// backward. Buckets hold parameters in reverse registration order (about
/// the order backward produces them) and start in the same order on every
/// rank, which keeps Gloo's collectives matched.
///
/// Per step: prepare(sync) before each backward (sync only on the last
/// micro-step of gradient accumulation), finish() after the last one. The
/// train step scales the loss by the global token count, so the summed
/// gradients equal those of one process running the whole global batch.
///
/// With `reduce_dtype` (mixed_precision_reduce: bfloat16) the buckets hold
/// the gradients in that dtype for the all-reduce and the sums are written
/// back in the gradients' own dtype.
class GradientReducer final : public GradientSync {
 public:
  GradientReducer(
      std::vector<at::Tensor> parameters,
      std::shared_ptr<dist::ProcessGroup> group,
      int64_t bucket_bytes,
      std::optional<at::ScalarType> reduce_dtype = std::nullopt);
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before a backward: whether its gradients should be reduced.
  void prepare(bool sync) override;
  /// After the last backward of the step: starts the buckets no hook
  /// started (parameters without gradients count as zeros), waits for all,
  /// and writes the sums into the gradients. Throws dist::CommError.
  void finish() override;

  /// Parameter indices of each bucket, in start order.
  std::vector<std::vector<int64_t>> bucket_layout() const;
  /// Buckets the hooks started during the last synced backward (the rest
  /// started in finish()).
  int64_t buckets_started_by_hooks() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

/// Checks that `parameters` are equal on every rank of `group` (a cheap
/// fingerprint per tensor: sum and sum of squares, compared by MIN and MAX
/// all-reduces). Throws std::runtime_error naming the first that differs.
void check_replicas_equal(
    const std::vector<at::Tensor>& parameters,
    const std::vector<std::string>& names,
    dist::ProcessGroup& group);

/// The `replicate` applier (DDP): attaches a GradientReducer over the
/// data-parallel group, with parallelism.data_parallel_bucket_size_mb
/// buckets reduced in the context's mixed-precision reduce dtype, to the
/// part.
class ReplicateApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

struct Parallelism;

/// Data parallel over replicas as registered: the dp_replicate axis
/// (parallelism.data_parallel_replicate_degree), joining the dp and loss
/// groups; its steps check_replicas and replicate, last in the chain, unless
/// dp_shard is above 1 too (fully_shard then reduces across the replicas:
/// HSDP).
Parallelism replicate_parallelism();

}  // namespace baton
