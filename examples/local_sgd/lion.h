#pragma once

// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms",
// 2023): the update is the sign of an interpolation of the momentum and
// the gradient, so every weight moves by exactly lr (plus decoupled weight
// decay); one state tensor per parameter instead of AdamW's two.

#include <torch/optim/optimizer.h>

#include <vector>

namespace local_sgd {

struct LionOptions
    : public torch::optim::OptimizerCloneableOptions<LionOptions> {
  explicit LionOptions(double lr = 1e-4) : lr_(lr) {}
  TORCH_ARG(double, lr);
  /// The interpolation of the update, and the momentum's decay.
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.99;
  TORCH_ARG(double, weight_decay) = 0.0;

  // What Baton's LR schedules read and set.
  double get_lr() const override {
    return lr();
  }
  void set_lr(const double lr) override {
    this->lr(lr);
  }
};

struct LionParamState
    : public torch::optim::OptimizerCloneableParamState<LionParamState> {
  TORCH_ARG(at::Tensor, exp_avg);
};

class Lion final : public torch::optim::Optimizer {
 public:
  Lion(std::vector<at::Tensor> params, LionOptions defaults);
  at::Tensor step(LossClosure closure = nullptr) override;
};

/// Registers `lion` (optimizer.name: lion), its config section (`lion:`
/// beta1, beta2) and how checkpoints keep its state.
void register_lion();

}  // namespace local_sgd
