#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <utility>
#include <vector>

namespace baton {

/// Where a layout that splits activations across ranks changes them around
/// a module: an `enter` runs on what the module reads, a `leave` on what it
/// returns (tensor parallel's all-gather of the sequence before the
/// column-parallel matmuls, its reduce-scatter after the row-parallel ones).
/// Appliers add theirs and they compose as the FSDP unit wrappers do: the
/// one added last is the outermost, so its `enter` runs first and its
/// `leave` last. Empty, the hooks pass the tensor through; the model never
/// adds any, a parallel applier does.
class RegionHooks {
 public:
  using Hook = std::function<at::Tensor(const at::Tensor&)>;

  /// Wraps the hooks added so far in `enter` and `leave` (either may be
  /// empty: that side passes through).
  void add(Hook enter, Hook leave) {
    if (enter) {
      enters_.push_back(std::move(enter));
    }
    if (leave) {
      leaves_.push_back(std::move(leave));
    }
  }

  /// `x` through every `enter`, the last added first.
  at::Tensor in(const at::Tensor& x) const {
    at::Tensor y = x;
    for (auto it = enters_.rbegin(); it != enters_.rend(); ++it) {
      y = (*it)(y);
    }
    return y;
  }
  /// `x` through every `leave`, the first added first.
  at::Tensor out(const at::Tensor& x) const {
    at::Tensor y = x;
    for (const Hook& leave : leaves_) {
      y = leave(y);
    }
    return y;
  }
  /// Whether any hook was added.
  bool empty() const {
    return enters_.empty() && leaves_.empty();
  }

 private:
  std::vector<Hook> enters_;
  std::vector<Hook> leaves_;
};

}  // namespace baton
