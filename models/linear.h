#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <vector>

namespace baton {

/// Weight-gradient work that a backward put off: what a pipeline stage's I
/// (input-gradient) pass leaves for its W pass, one per microbatch. Linear
/// layers whose forward ran while a slot was current (see
/// WeightGradSlotGuard) look at the slot in their backward: when `defer` is
/// set they compute the input gradient only and queue the weight-gradient
/// matmul here; otherwise they compute both, as usual.
struct WeightGradSlot {
  /// Set by the stage around its I pass.
  bool defer = false;
  /// Queued weight-gradient work; run() runs and clears it.
  std::vector<std::function<void()>> work;

  /// Runs the queued work in order (accumulating into .grad), then clears.
  void run();
};

/// Makes `slot` current for Linear forwards on this thread while alive.
class WeightGradSlotGuard {
 public:
  explicit WeightGradSlotGuard(WeightGradSlot* slot);
  ~WeightGradSlotGuard();
  WeightGradSlotGuard(const WeightGradSlotGuard&) = delete;
  WeightGradSlotGuard& operator=(const WeightGradSlotGuard&) = delete;

 private:
  WeightGradSlot* previous_;
};

/// y = x W^T without bias; its backward can defer dW (see WeightGradSlot).
/// The parameter is named `weight`, as torch::nn::Linear's.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features);
  /// Multiplies by another module's parameter `tied_weight` (out, in),
  /// which it does not register: tied embeddings' output projection.
  explicit LinearImpl(at::Tensor tied_weight);
  /// x: (..., in) -> (..., out)
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;  // (out, in)
};
TORCH_MODULE(Linear);

}  // namespace baton
