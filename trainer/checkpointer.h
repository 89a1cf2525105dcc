#pragma once

#include <cstdint>

namespace baton {

/// Saves and restores training state. The trainer calls it when the builder
/// made one (checkpoint.enable); the implementation lands with the
/// checkpointing issue (#7).
class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  /// Restores the latest (or configured) checkpoint; returns the step it
  /// resumes after, or 0 when there is none.
  virtual int64_t load() = 0;
  /// Saves after `step` when the interval says so (or `force`).
  virtual void maybe_save(int64_t step, bool force) = 0;
};

}  // namespace baton
