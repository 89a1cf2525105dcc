#pragma once

// Expert parallel: each MoE layer's routed experts split across the ranks
// of the ep axis, the token-expert rows sent to the rank that holds their
// expert and the outputs brought back by all-to-alls with uneven splits
// (torchtitan's AllToAllTokenDispatcher, Megatron's alltoall dispatcher).
//
// Its place in the mesh (torchtitan's): ep borrows the innermost ep ranks of
// dp_shard rather than multiplying the world. Those ranks read different
// batches already, which is what expert parallel needs (each dispatches its
// own tokens), and dense weights stay sharded over all of dp_shard; the
// experts are split over ep and fully_shard shards each rank's experts over
// the rest of dp_shard (dp_shard_mod_ep), the ranks that hold the same
// experts. A separate axis multiplying the world would leave its ranks
// reading the same tokens, computing the dense layers twice.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/moe.h"
#include "parallel/applier.h"
#include "parallel/axes.h"
#include "parallel/dist/traffic.h"

namespace baton {
struct Parallelism;
}

namespace baton::expert_parallel {

/// Its axis, the innermost ep ranks of dp_shard, and the rest of dp_shard
/// (parallel/axes.h).
inline constexpr const char* kAxis = kExpertAxis;
inline constexpr const char* kRestAxis = kExpertRestAxis;
/// Its degree's config key, in the parallelism section.
inline constexpr const char* kDegreeKey = "parallelism.expert_parallel_degree";

/// What makes `ep` unusable for a model shaped `args`: no MoE layers, or
/// experts that do not split evenly; the problem names the key.
std::optional<ConfigProblem> expert_parallel_problem(
    const ModelArgs& args, int64_t ep);

/// One MoE layer's dispatcher over the ep group: the counts of rows for
/// each expert exchanged first (an all-to-all of E counts), then the rows
/// (an all-to-all with uneven splits), regrouped by local expert for the
/// experts, and their outputs back the same way. Both all-to-alls are
/// autograd functions (the backward sends the gradients the other way),
/// named "expert_parallel <layer> dispatch|combine" in profiler traces, the
/// flight recorder and errors.
class AllToAllDispatcher final : public models::ExpertDispatcher {
 public:
  AllToAllDispatcher(
      std::shared_ptr<dist::ProcessGroup> group,
      std::string name,
      int64_t num_experts);

  at::Tensor run(
      const at::Tensor& rows,
      const at::Tensor& counts,
      const models::LocalExperts& experts) override;

  const std::string& name() const {
    return name_;
  }
  dist::ProcessGroup& group() const {
    return *group_;
  }

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  std::string name_;
  int64_t num_experts_;
};

/// What this process's dispatchers sent to other ranks, per direction
/// ("dispatch forward", "combine backward", ...): calls and bytes (rows
/// kept on this rank are not counted; the counts' exchange is, under
/// "counts"). Ranks run as threads of one process add up. For the bench
/// that checks the bytes against the formula.
using Traffic = dist::Traffic;
std::map<std::string, Traffic> traffic();
void reset_traffic();

/// The expert_parallel step (parallelism.expert_parallel_degree > 1): in
/// each MoE layer of the part, checks the whole experts equal over the
/// data-parallel ranks, keeps this ep rank's E / ep of them (in place: the
/// module and the optimizer keep the same tensors), records their slice,
/// their gradients split along dp_shard (the pieces of dp_shard's ranks
/// are disjoint: ep splits by expert, fully_shard the rest by row) and
/// their shard group dp_shard_mod_ep, and sets the layer's dispatcher.
class ExpertParallelApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

/// Expert parallel as registered: the derived axis ep of dp_shard and its
/// rest, the key parallelism.expert_parallel_degree, the expert_parallel
/// step among the model steps.
Parallelism expert_parallel_parallelism();

}  // namespace baton::expert_parallel
