#pragma once

// The thread-local state a model's forward reads besides its inputs and
// parameters. Whoever sets a field does so with a guard around the forward;
// activation checkpointing captures the whole state at the forward and puts
// it back while it recomputes that forward during backward, so a recomputed
// unit behaves as it did the first time.

#include <ATen/core/Tensor.h>

namespace baton {

struct WeightGradSlot;  // models/linear.h
class SavedOps;         // models/recompute.h
class ParamCast;        // models/param_cast.h

struct ForwardState {
  /// The pipeline stage's slot for deferred weight gradients (Linear).
  WeightGradSlot* slot = nullptr;
  /// Selective checkpointing's record of the outputs it keeps.
  SavedOps* saved_ops = nullptr;
  /// Mixed precision's casts of the parameters (compute_param).
  ParamCast* cast = nullptr;
  /// Set while activation checkpointing recomputes a forward during
  /// backward: what a forward counts (MoE's routing statistics) it counts
  /// once.
  bool recomputing = false;
  /// Set while a held-out loss is computed (no step follows): statistics a
  /// step's update reads (MoE's tokens per expert) are not counted.
  bool evaluating = false;
  /// What the train step scales each microbatch's summed loss by (1 / the
  /// global step's tokens); 0 outside a training step. A term a module
  /// adds to the objective itself (MoE's auxiliary loss) takes the same
  /// scale.
  double loss_scale = 0.0;
  /// Document masking (training.document_mask): each position's document
  /// within its row, (B, seq_len) int64 for the whole row (Batch::documents),
  /// so that attention keeps packed documents apart; undefined: every row
  /// one document. The train steps set it around each microbatch's forward.
  at::Tensor documents;
};

/// This thread's state (read and written in place by the guards).
ForwardState& forward_state();

/// Sets this thread's state to `state` while alive, then restores it.
class ForwardStateGuard {
 public:
  explicit ForwardStateGuard(const ForwardState& state);
  ~ForwardStateGuard();
  ForwardStateGuard(const ForwardStateGuard&) = delete;
  ForwardStateGuard& operator=(const ForwardStateGuard&) = delete;

 private:
  ForwardState previous_;
};

}  // namespace baton
