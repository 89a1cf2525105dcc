#include "optim/optimizers.h"

#include <torch/optim/adamw.h>

#include "common/torch_compat.h"
#include "optim/fused_adamw.h"
#include "optim/optimizer_state.h"

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
    // Through the state's codec, so that any registered optimizer counts
    // (a plugin's as well as AdamW).
    const OptimizerStateCodec* codec = optimizer_state_codec(*optimizer);
    if (codec == nullptr) {
      continue;
    }
    const auto& state = optimizer->state();
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params()) {
        const auto it = state.find(compat::optimizer_state_key(p));
        if (it == state.end()) {
          continue;
        }
        for (const auto& t : codec->read(it->second.get(), p)) {
          total += bytes(t);
        }
      }
    }
  }
  return total;
}

namespace {

/// AdamW's state as checkpoints keep it: exp_avg and exp_avg_sq shaped like
/// the parameter, the step a scalar (amsgrad's max_exp_avg_sq is not
/// supported by FusedAdamW).
OptimizerStateCodec adamw_state_codec() {
  OptimizerStateCodec codec;
  codec.name = "AdamW";
  codec.fields = {
      {"exp_avg", std::nullopt, std::nullopt},
      {"exp_avg_sq", std::nullopt, std::nullopt},
      {"step", std::vector<int64_t>{}, at::kLong}};
  codec.read = [](const torch::optim::OptimizerParamState* state,
                  const at::Tensor& p) -> std::vector<at::Tensor> {
    const auto* adam =
        dynamic_cast<const torch::optim::AdamWParamState*>(state);
    if (state != nullptr && adam == nullptr) {
      throw std::logic_error("[AdamW] a parameter's state is not AdamW's");
    }
    if (adam == nullptr) {
      // Before its first step: what AdamW starts from.
      const at::Tensor zeros = at::zeros(p.sizes(), p.options());
      return {zeros, zeros, at::scalar_tensor(0, at::kLong)};
    }
    return {
        adam->exp_avg(),
        adam->exp_avg_sq(),
        at::scalar_tensor(adam->step(), at::kLong)};
  };
  codec.make = [](const std::vector<at::Tensor>& fields, const at::Tensor& p) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->exp_avg(fields.at(0).to(p.device()));
    state->exp_avg_sq(fields.at(1).to(p.device()));
    state->step(fields.at(2).item<int64_t>());
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  };
  return codec;
}

}  // namespace

Registry<OptimizerCreator>& optimizer_registry() {
  static Registry<OptimizerCreator> registry("optimizer");
  return registry;
}

void register_builtin_optimizers() {
  optimizer_registry().add_builtins_once(
      [](Registry<OptimizerCreator>& registry) {
        registry.add(
            "AdamW",
            [](std::vector<at::Tensor> params, const JobConfig& job)
                -> std::unique_ptr<torch::optim::Optimizer> {
              const OptimizerConfig& config = job.optimizer;
              auto options =
                  torch::optim::AdamWOptions(config.lr)
                      .betas({config.betas.at(0), config.betas.at(1)})
                      .eps(config.eps)
                      .weight_decay(config.weight_decay);
              return std::make_unique<FusedAdamW>(std::move(params), options);
            },
            "Adam with decoupled weight decay, one fused pass per parameter "
            "(FusedAdamW: torch::optim::AdamW's options and state)");
        // FusedAdamW keeps libtorch's AdamW state: one codec for both.
        register_optimizer_state(typeid(FusedAdamW), adamw_state_codec());
        register_optimizer_state(
            typeid(torch::optim::AdamW), adamw_state_codec());
      });
}

}  // namespace baton
