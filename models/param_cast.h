#pragma once

// Mixed precision's view of the parameters: the master weights stay float32
// (what the optimizer updates and the checkpoint saves) and a forward reads
// each through compute_param(), which gives the copy in the compute dtype
// when a ParamCast is current (ForwardState::cast).

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <unordered_map>

namespace baton {

/// One model part's casts of its parameters to the compute dtype, made once
/// per step: under grad mode the first read of a parameter makes a
/// differentiable cast (a ToCopyBackward node) and every later read until
/// clear() returns that same tensor, so the backward of every microbatch
/// flows through one node into the master's .grad and gradients accumulate
/// in float32 with no low-precision .grad held. A cast is made again when
/// its master changed in place since (its version counter moved: the
/// optimizer's step), so none is ever stale. Under no-grad a read returns
/// the kept cast if there is one, else a fresh cast that is not kept, so a
/// training forward never reuses a cast without a graph. Used from one thread
/// at a time (the one training the part).
class ParamCast {
 public:
  explicit ParamCast(at::ScalarType dtype);

  /// The compute dtype.
  at::ScalarType dtype() const {
    return dtype_;
  }
  /// `param` in dtype() (itself when it already is, or is not floating).
  at::Tensor get(const at::Tensor& param);
  /// Drops the kept casts: after the step's last backward.
  void clear();
  /// Casts made under grad mode since construction.
  int64_t casts() const {
    return casts_;
  }
  /// Casts kept now.
  size_t kept() const {
    return cache_.size();
  }

 private:
  struct Entry {
    at::Tensor cast;
    int64_t version = 0;
  };
  at::ScalarType dtype_;
  std::unordered_map<const c10::TensorImpl*, Entry> cache_;
  int64_t casts_ = 0;
};

/// `param` as the current forward computes with it: the current ParamCast's
/// cast of it (forward_state().cast), or `param` itself when none is.
at::Tensor compute_param(const at::Tensor& param);

}  // namespace baton
