#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/applier.h"

namespace baton {

struct ActivationCheckpointConfig;

/// Which blocks a part checkpoints (recomputes in backward), and how (the
/// `activation_checkpoint` section, parsed). Named for the recomputation so
/// that it is not taken for checkpoint/'s saved state.
struct RecomputePlan {
  enum class Kind { kNone, kFull, kLayer, kOp };
  Kind kind = Kind::kNone;
  /// With kLayer: blocks whose global index i has (i + 1) % every == 0,
  /// torchtitan's count, so the choice does not depend on the split.
  int64_t every = 1;
  /// The pipeline stages that checkpoint; empty = every stage.
  std::vector<int64_t> stages;

  static RecomputePlan from(const ActivationCheckpointConfig& config);
  /// Whether the block with global index `layer` is checkpointed.
  bool checkpoints(int64_t layer) const;
  /// Whether the blocks of pipeline stage `stage` follow the plan (false:
  /// they keep every activation).
  bool checkpoints_stage(int64_t stage) const;
  /// "full", "selective (every 2nd block)", "selective (op: matmul and
  /// attention outputs kept)" or "none", for the log, with " on stages 0,
  /// 1" when only some stages checkpoint.
  std::string describe() const;

 private:
  /// describe() without the stages.
  std::string describe_blocks() const;
};

/// The `activation_checkpoint` applier: on a part whose stage the plan
/// lists (every part when it lists none), wraps each transformer block the
/// plan names so that it keeps only its input (full, selective by layer)
/// or its input and its matmul and attention outputs (selective by op) and
/// recomputes the rest in backward (models/recompute.h). The builder places
/// it before data parallel, so fully sharded data parallel's gather wraps
/// the recomputation too.
class ActivationCheckpointApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

}  // namespace baton
