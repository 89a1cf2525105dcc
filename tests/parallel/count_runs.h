#pragma once

// A unit wrapper that counts the runs of the unit it wraps: placed inside
// activation checkpointing's wrapper, it sees the recomputations too. For
// tests of what runs how often.

#include <functional>

#include "models/model_spec.h"

namespace baton::testing {

/// Adds one to `Count` (an int, or a std::atomic where ranks are threads)
/// per run of the wrapped unit.
template <class Count>
class CountRuns final : public UnitWrapper {
 public:
  explicit CountRuns(Count& runs) : runs_(runs) {}
  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    ++runs_;
    return run(input);
  }

 private:
  Count& runs_;
};

}  // namespace baton::testing
