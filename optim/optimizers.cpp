#include "optim/optimizers.h"

#include <torch/optim/adamw.h>

#include "optim/fused_adamw.h"

namespace baton {

OptimizersContainer::OptimizersContainer(
    std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers)
    : optimizers_(std::move(optimizers)) {}

OptimizersContainer::~OptimizersContainer() = default;

void OptimizersContainer::step() {
  for_each([](torch::optim::Optimizer& o) { o.step(); });
}

void OptimizersContainer::zero_grad() {
  // set_to_none: the gradients' memory goes back between steps.
  for_each(
      [](torch::optim::Optimizer& o) { o.zero_grad(/*set_to_none=*/true); });
}

int64_t OptimizersContainer::state_bytes() const {
  const auto bytes = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size())
                       : int64_t{0};
  };
  int64_t total = 0;
  for (const auto& optimizer : optimizers_) {
    for (const auto& [key, state] : optimizer->state()) {
      if (const auto* adam =
              dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
        total += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) +
                 bytes(adam->max_exp_avg_sq());
      }
    }
  }
  return total;
}

Registry<OptimizerCreator>& optimizer_registry() {
  static Registry<OptimizerCreator> registry("optimizer");
  return registry;
}

void register_builtin_optimizers() {
  optimizer_registry().add_builtins_once(
      [](Registry<OptimizerCreator>& registry) {
        registry.add(
            "AdamW",
            [](std::vector<at::Tensor> params, const OptimizerConfig& config)
                -> std::unique_ptr<torch::optim::Optimizer> {
              auto options =
                  torch::optim::AdamWOptions(config.lr)
                      .betas({config.betas.at(0), config.betas.at(1)})
                      .eps(config.eps)
                      .weight_decay(config.weight_decay);
              return std::make_unique<FusedAdamW>(std::move(params), options);
            },
            "Adam with decoupled weight decay, one fused pass per parameter "
            "(FusedAdamW: torch::optim::AdamW's options and state)");
      });
}

}  // namespace baton
