#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "common/registry.h"
#include "config/job_config.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

/// One optimizer per model part, driven together.
class OptimizersContainer {
 public:
  explicit OptimizersContainer(
      std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers);
  ~OptimizersContainer();

  /// Steps every optimizer.
  void step();
  /// Drops the gradients of every optimizer's parameters (set to none, on
  /// every libtorch version: no gradient memory is held between steps).
  void zero_grad();
  size_t size() const {
    return optimizers_.size();
  }
  torch::optim::Optimizer& operator[](size_t i) const {
    return *optimizers_.at(i);
  }
  /// Bytes of the optimizers' per-parameter state tensors on this rank, as
  /// each optimizer type's registered state codec reads them (AdamW's
  /// moments and step; an optimizer without a codec counts 0).
  int64_t state_bytes() const;
  /// Calls `f(optimizer)` for each optimizer, in part order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& optimizer : optimizers_) {
      f(*optimizer);
    }
  }

 private:
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;
};

/// Makes an optimizer over `params` from the job's `optimizer:` section (and
/// a section of its own, where a plugin's optimizer registered one).
using OptimizerCreator = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<at::Tensor> params, const JobConfig& config)>;

/// The optimizer registry (`optimizer.name`).
Registry<OptimizerCreator>& optimizer_registry();

/// Registers the built-in optimizers (AdamW); safe to call more than once.
void register_builtin_optimizers();

}  // namespace baton
