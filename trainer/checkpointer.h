#pragma once

#include <cstdint>

namespace baton {

/// The trainer's own progress, saved with every checkpoint.
struct TrainState {
  /// Optimizer steps taken.
  int64_t step = 0;
  /// Tokens of the global batches trained on so far.
  int64_t tokens_seen = 0;
};

/// Saves and restores training state. The trainer calls it when the builder
/// made one (checkpoint.enable, model_only_export or initial_load_hf); the
/// implementation is CheckpointManager (trainer/checkpoint.h).
class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  /// Restores the latest (or configured) checkpoint and returns its train
  /// state; a zero state when there is none to resume (after loading the
  /// starting weights, when the config names them).
  virtual TrainState load() = 0;
  /// Saves after `state.step` when the interval says so, or when `last`
  /// (the final step).
  virtual void maybe_save(const TrainState& state, bool last) = 0;
  /// Saves after `state.step` now, unless that step is saved already, and
  /// waits for every save in flight: the run stops here (preemption).
  virtual void save_now(const TrainState& state) = 0;
  /// At the end of training: waits for a save in flight and writes what is
  /// due at the end (the model-only export). Every rank calls it.
  virtual void finish(const TrainState& state) = 0;
};

}  // namespace baton
