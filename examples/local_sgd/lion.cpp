#include "lion.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <memory>
#include <optional>
#include <typeinfo>

#include "config/job_config.h"
#include "optim/optimizer_state.h"
#include "optim/optimizers.h"

namespace local_sgd {

Lion::Lion(std::vector<at::Tensor> params, LionOptions defaults)
    : torch::optim::Optimizer(
          {torch::optim::OptimizerParamGroup(std::move(params))},
          std::make_unique<LionOptions>(defaults)) {}

at::Tensor Lion::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LionOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) {
        continue;
      }
      const at::Tensor& g = p.grad();
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<LionParamState>();
        fresh->exp_avg(at::zeros_like(p));
        slot = std::move(fresh);
      }
      at::Tensor& m = static_cast<LionParamState&>(*slot).exp_avg();
      p.mul_(1.0 - o.lr() * o.weight_decay());
      p.add_(at::sign(m * o.beta1() + g * (1.0 - o.beta1())), -o.lr());
      m.mul_(o.beta2()).add_(g, 1.0 - o.beta2());
    }
  }
  return loss;
}

void register_lion() {
  baton::register_config_section(
      "lion",
      {{"beta1",
        0.9,
        baton::FieldSpec("Lion: the update's interpolation of momentum and "
                         "gradient")
            .at_least(0.0)
            .less_than(1.0)},
       {"beta2",
        0.99,
        baton::FieldSpec("Lion: the momentum's decay")
            .at_least(0.0)
            .less_than(1.0)}});
  baton::optimizer_registry().add(
      "lion",
      [](std::vector<at::Tensor> params, const baton::JobConfig& config)
          -> std::unique_ptr<torch::optim::Optimizer> {
        const auto& lion = config.section("lion");
        return std::make_unique<Lion>(
            std::move(params),
            LionOptions(config.optimizer.lr)
                .beta1(lion.get<double>("beta1"))
                .beta2(lion.get<double>("beta2"))
                .weight_decay(config.optimizer.weight_decay));
      },
      "Lion: sign updates, one momentum per weight (local_sgd example "
      "plugin; its keys under lion:)");
  // Checkpoints save and reshard its momentum like the weights.
  baton::OptimizerStateCodec codec;
  codec.name = "Lion";
  codec.fields = {{"exp_avg", std::nullopt, std::nullopt}};
  codec.read = [](const torch::optim::OptimizerParamState* state,
                  const at::Tensor& p) -> std::vector<at::Tensor> {
    const auto* lion = dynamic_cast<const LionParamState*>(state);
    return {lion != nullptr ? lion->exp_avg() : at::zeros_like(p)};
  };
  codec.make = [](const std::vector<at::Tensor>& fields, const at::Tensor& p) {
    auto state = std::make_unique<LionParamState>();
    state->exp_avg(fields.at(0).to(p.device()).clone());
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  };
  baton::register_optimizer_state(typeid(Lion), std::move(codec));
}

}  // namespace local_sgd
