#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace baton {

/// Where a layout that splits activations across ranks changes them around
/// a module: `enter` runs on what the module reads, `leave` on what it
/// returns (tensor parallel's all-gather of the sequence before the
/// column-parallel matmuls, its reduce-scatter after the row-parallel ones).
/// Unset, a hook passes the tensor through; the model never sets them, a
/// parallel applier does.
struct RegionHooks {
  std::function<at::Tensor(const at::Tensor&)> enter;
  std::function<at::Tensor(const at::Tensor&)> leave;

  /// `x` through `enter`, or `x` when it is unset.
  at::Tensor in(const at::Tensor& x) const {
    return enter ? enter(x) : x;
  }
  /// `x` through `leave`, or `x` when it is unset.
  at::Tensor out(const at::Tensor& x) const {
    return leave ? leave(x) : x;
  }
};

}  // namespace baton
