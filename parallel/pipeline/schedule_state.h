#pragma once

// Internal: flat per-(stage, microbatch) flags shared by lowering,
// validation and simulation.

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/action.h"

namespace baton::pipeline {

/// A value per (stage, microbatch), stored flat.
template <class T>
class StageGrid {
 public:
  /// A grid of `stages` x `microbatches` copies of `init`.
  StageGrid(int64_t stages, int64_t microbatches, T init = T())
      : microbatches_(microbatches),
        data_(static_cast<size_t>(stages * microbatches), init) {}

  /// The value of (stage, microbatch).
  T& at(int64_t stage, int64_t microbatch) {
    return data_[static_cast<size_t>(stage * microbatches_ + microbatch)];
  }

 private:
  int64_t microbatches_;
  std::vector<T> data_;
};

/// "rank R step I (ACTION)", the prefix of every schedule message.
inline std::string where_in_schedule(
    int64_t rank, int64_t step, const Action& action) {
  return "rank " + std::to_string(rank) + " step " + std::to_string(step) +
         " (" + action.str() + ")";
}

}  // namespace baton::pipeline
