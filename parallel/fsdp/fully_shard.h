#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/torch_compat.h"
#include "parallel/applier.h"
#include "parallel/dist/process_group.h"
#include "parallel/grad_sync.h"

namespace baton {
struct Parallelism;

class ModelPart;

namespace fsdp {

/// When a unit's gathered parameters are freed after its forward
/// (parallelism.fsdp_reshard_after_forward).
enum class ReshardAfterForward {
  /// As torchtitan: free without pipelining; keep them for pipeline stages,
  /// which run several microbatches through the same parameters.
  kDefault,
  kAlways,
  kNever,
};

/// "default", "always" or "never" -> the policy.
ReshardAfterForward parse_reshard_after_forward(const std::string& text);
/// Whether `policy` frees a unit's gathered parameters after its forward in
/// a part that is (or is not) a pipeline stage: what fully_shard does and
/// the dry run counts.
bool frees_after_forward(ReshardAfterForward policy, bool pipelined);

/// The groups a fully sharded part talks over: the shards of each
/// parameter across `shard`, and with HSDP whole shard groups replicated
/// across `replicate` (size 1: plain FSDP).
struct ShardGroups {
  std::shared_ptr<dist::ProcessGroup> shard;
  std::shared_ptr<dist::ProcessGroup> replicate;
};

/// One unit of a part (a transformer block, or the rest of the part): its
/// parameters, each split on dim 0 across the shard group and gathered
/// together before the unit computes, FSDP2's FSDPParamGroup. Each
/// parameter stays the one tensor the module and the optimizer hold:
///   - sharded (between steps): its data is this rank's rows, a view into
///     the unit's flat shard buffer, and its gradient the shard's;
///   - unsharded: its data is the whole tensor, gathered (all-gather of the
///     flat shard buffers, then a copy out per parameter), and autograd
///     accumulates whole gradients into it;
///   - freed: still whole-shaped (autograd's saved tensors refer to it), its
///     storage released until a gather refills it before backward.
/// Rows are split as ceil(rows / ranks) per rank, the last ranks holding
/// fewer (or none); the communication buffers are padded to equal chunks.
/// Mixed precision (`dtypes`): the shards stay in the parameters' dtype
/// (float32 masters); the gather moves, and the whole parameters hold, the
/// param dtype, and so do the whole gradients autograd accumulates into
/// them (over a step's micro-steps or a stage's microbatches); those are
/// reduced in the reduce dtype and added to the shards' gradients in the
/// masters' dtype.
class Unit {
 public:
  /// `params`: the unit's (FQN, parameter) pairs, whole. Shards them.
  Unit(
      std::string name,
      std::vector<std::pair<std::string, at::Tensor>> params,
      ShardGroups groups,
      MixedPrecision dtypes = {});
  ~Unit();
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  const std::string& name() const {
    return name_;
  }
  /// Starts gathering the parameters (no-op unless sharded or freed).
  void unshard();
  /// Finishes the gather (starting it if needed): the module computes with
  /// the whole parameters from here on.
  void wait_for_unshard();
  /// Frees the gathered parameters' memory, keeping their shapes.
  void reshard();
  /// Starts reducing the accumulated whole gradients: a reduce-scatter over
  /// the shard group (then, for HSDP, an all-reduce over replicas); the
  /// whole gradients are dropped.
  void reduce_grads();
  /// Waits for reduce_grads (when it was started) and returns the
  /// parameters to their shards, each gradient the reduced shard plus what
  /// the shard held before the step.
  void to_sharded();
  /// The parameters and where each lives, for the checkpoint and tests.
  struct Param;
  const std::vector<Param>& params() const;
  /// Seconds spent blocked on this unit's gathers and reduce-scatters: the
  /// communication that computation did not hide.
  double gather_wait_s() const {
    return gather_wait_s_;
  }
  double reduce_wait_s() const {
    return reduce_wait_s_;
  }
  /// Throws std::invalid_argument unless `params` can make a unit: some,
  /// none 0-d or frozen, one dtype and device.
  static void check(
      const std::string& name,
      const std::vector<std::pair<std::string, at::Tensor>>& params);

 private:
  enum class State { kSharded, kGathering, kUnsharded, kFreed };
  /// Rank r's first row of `p` and its row count.
  static std::pair<int64_t, int64_t> rows_of_rank(const Param& p, int64_t r);

  std::string name_;
  ShardGroups groups_;
  MixedPrecision dtypes_;
  std::vector<Param> params_;
  int64_t ranks_ = 1;
  int64_t rank_ = 0;
  /// Elements of one rank's padded shards: the chunk each rank
  /// contributes to a gather or gets from a reduce-scatter.
  int64_t chunk_numel_ = 0;
  at::Tensor shard_flat_;
  State state_ = State::kSharded;
  /// The state unshard() started from (kSharded or kFreed).
  State gathering_from_ = State::kSharded;
  at::Tensor gather_send_;  // the shards in the param dtype, while gathering
  at::Tensor gathered_;
  dist::Work gather_;
  at::Tensor reduce_input_;
  at::Tensor reduced_;
  dist::Work reduce_scatter_;
  bool reducing_ = false;
  double gather_wait_s_ = 0.0;
  double reduce_wait_s_ = 0.0;
};

struct Unit::Param {
  std::string fqn;
  /// The module's parameter.
  at::Tensor param;
  std::vector<int64_t> full_shape;
  int64_t rows = 0;
  /// Elements per row (the product of the other dimensions).
  int64_t row_numel = 0;
  /// ceil(rows / ranks): the padded rows of each rank's chunk.
  int64_t rows_per_rank = 0;
  /// This rank's first row and its row count (rows_per_rank or fewer).
  int64_t first_row = 0;
  int64_t my_rows = 0;
  /// Where its padded shard starts in a chunk.
  int64_t offset = 0;
  /// (my_rows, ...) view of the unit's flat shard buffer.
  at::Tensor shard;
  /// The shard's gradient from before the step (zeros after zero_grad),
  /// set aside while the parameter is whole.
  at::Tensor shard_grad;
};

/// The fully sharded state of one model part: its units in forward order,
/// the unit wrappers that gather and free them around their forwards, and
/// the gradient sync (reduce-scatter) of all of them.
class FullyShardedPart final : public GradientSync {
 public:
  /// `other_groups`: the groups of the parameters the part shards over
  /// another group than dp_shard (ModelPart::shard_group), by its name;
  /// their unit is a separate one that gathers and reduces with theirs.
  FullyShardedPart(
      ModelPart& part,
      ShardGroups groups,
      ReshardAfterForward policy,
      bool pipelined,
      MixedPrecision dtypes = {},
      const std::map<std::string, ShardGroups>& other_groups = {});
  ~FullyShardedPart() override;

  void prepare(bool sync) override;
  void finish() override;
  void reduce_now() override;
  /// Every unit back to its shards, the gradients the shards held before.
  void after_eval() override;

  /// The units, in forward order (blocks, then the root).
  const std::vector<std::unique_ptr<Unit>>& units() const {
    return units_;
  }

  struct State;

 private:
  std::vector<std::unique_ptr<Unit>> units_;
  /// The parameters' gradient accumulators, made while they were whole.
  std::vector<compat::NodeRef> accumulators_;
  std::shared_ptr<State> state_;
};

/// The `fully_shard` applier (FSDP; HSDP when data_parallel_replicate_degree
/// is above 1 too): shards every parameter of the part across the dp_shard
/// group (or the group ModelPart::shard_group names), wraps each unit to gather
/// its parameters, marks the gradients split along dp_shard and attaches the
/// reduce-scatter as the part's gradient sync; gathers and reduces in the
/// context's mixed-precision dtypes.
class FullyShardApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

/// Fully sharded data parallel as registered: the dp_shard axis
/// (parallelism.data_parallel_shard_degree), joining the dp and loss
/// groups; its steps check_replicas and fully_shard, last in the chain.
Parallelism fully_shard_parallelism();

}  // namespace fsdp
}  // namespace baton
