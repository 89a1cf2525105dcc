#include "models/linear.h"

#include <torch/torch.h>

#include "models/forward_state.h"
#include "models/param_cast.h"
#include "models/recompute.h"

namespace baton {

namespace {

/// x W^T whose backward consults the slot current at forward time.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["slot"] = reinterpret_cast<int64_t>(forward_state().slot);
    // Under an op-selective checkpoint the product is kept by the first
    // forward and handed back to the recomputation.
    SavedOps* ops = saved_ops();
    if (ops != nullptr && ops->mode() == SavedOps::Mode::kReplay) {
      return ops->take().at(0);
    }
    auto y = at::matmul(x, weight.t());
    if (ops != nullptr) {
      ops->keep({y});
    }
    return y;
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& gy = grads[0];
    at::Tensor gx;
    if (ctx->needs_input_grad(0)) {
      gx = at::matmul(gy, weight);
    }
    if (!ctx->needs_input_grad(1)) {
      return {gx, at::Tensor()};
    }
    auto weight_grad = [](const at::Tensor& gy, const at::Tensor& x) {
      return gy.reshape({-1, gy.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
    };
    auto* slot =
        reinterpret_cast<WeightGradSlot*>(ctx->saved_data["slot"].toInt());
    if (slot != nullptr && slot->defer) {
      // `weight` is the parameter itself (a saved leaf unpacks to it) or,
      // under mixed precision, its cast (ParamCast): the queued gradient
      // goes through autograd from `weight`, so it reaches the parameter's
      // .grad as this backward's would have (through the cast, in the
      // accumulator's dtype, past the accumulator's hooks).
      slot->work.push_back([weight, gy, x, weight_grad]() {
        at::Tensor g;
        {
          torch::NoGradGuard no_grad;
          g = weight_grad(gy, x);
        }
        torch::autograd::backward({weight}, {g});
      });
      return {gx, at::Tensor()};
    }
    return {gx, weight_grad(gy, x)};
  }
};

}  // namespace

void WeightGradSlot::run() {
  auto todo = std::move(work);
  work.clear();
  for (auto& w : todo) {
    w();
  }
}

WeightGradSlotGuard::WeightGradSlotGuard(WeightGradSlot* slot)
    : previous_(forward_state().slot) {
  forward_state().slot = slot;
}

WeightGradSlotGuard::~WeightGradSlotGuard() {
  forward_state().slot = previous_;
}

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features) {
  weight =
      register_parameter("weight", torch::empty({out_features, in_features}));
  // torch::nn::Linear's default; the model's init replaces it.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
}

LinearImpl::LinearImpl(at::Tensor tied_weight)
    : weight(std::move(tied_weight)) {}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  return LinearFunction::apply(x, compute_param(weight));
}

}  // namespace baton
