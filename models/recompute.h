#pragma once

// Activation checkpointing's engine: a unit's forward that keeps only its
// input and recomputes itself when backward reaches it (full), or that also
// keeps the outputs of its expensive ops, matmuls and attention, so the
// recomputation redoes only the cheap ones between them (selective by op).
// The model's ops take part through SavedOps: while a checkpointed forward
// runs, Linear and the blocked attention record their outputs; while it is
// recomputed, they hand those outputs back instead of computing them.

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <vector>

namespace baton {

/// The outputs an op-selective checkpoint keeps, in the order the ops ran.
/// The first forward records them; the recomputation replays them, in the
/// same order (the forward is deterministic in which ops it runs).
class SavedOps {
 public:
  enum class Mode { kRecord, kReplay };

  Mode mode() const {
    return mode_;
  }
  void set_mode(Mode mode) {
    mode_ = mode;
  }
  /// Records one op's outputs (mode kRecord).
  void keep(std::vector<at::Tensor> outputs);
  /// The next recorded op's outputs (mode kReplay); throws std::logic_error
  /// when the recomputation runs an op the first forward did not.
  std::vector<at::Tensor> take();
  /// Recorded outputs not yet replayed.
  size_t pending() const {
    return kept_.size();
  }
  /// Bytes of the recorded outputs not yet replayed.
  int64_t bytes() const;

 private:
  Mode mode_ = Mode::kRecord;
  std::deque<std::vector<at::Tensor>> kept_;
};

/// The SavedOps an op should record into (nullptr: none) or replay from.
/// Ops call this in their forward: when it returns a recorder, they keep
/// their outputs; when it returns a replayer, they take them back.
SavedOps* saved_ops();

/// What a checkpoint keeps of the unit's activations.
enum class CheckpointPolicy {
  /// The input only; the whole forward is recomputed.
  kFull,
  /// The input and the outputs of the matmuls and attention.
  kKeepExpensiveOps,
};

/// `run(input)` checkpointed under `policy`: run without keeping its
/// activations, and rerun with grad in backward, with the thread-local
/// ForwardState it had (pipeline weight-gradient slot, ...), then
/// backpropagated through. Under a pipeline's split backward (the slot
/// defers weight gradients) the recomputation happens once, in the input
/// pass; the weight pass uses what it queued. Without grad mode, or when
/// nothing requires grad, it is run(input).
at::Tensor checkpoint(
    const std::function<at::Tensor(const at::Tensor&)>& run,
    const at::Tensor& input,
    CheckpointPolicy policy);

}  // namespace baton
