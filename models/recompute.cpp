#include "models/recompute.h"

#include <torch/torch.h>

#include <stdexcept>

#include "models/forward_state.h"

namespace baton {

void SavedOps::keep(std::vector<at::Tensor> outputs) {
  kept_.push_back(std::move(outputs));
}

std::vector<at::Tensor> SavedOps::take() {
  if (kept_.empty()) {
    throw std::logic_error(
        "[recompute] the recomputation ran an op the checkpointed forward did "
        "not record: the unit's forward must run the same ops each time");
  }
  auto out = std::move(kept_.front());
  kept_.pop_front();
  return out;
}

int64_t SavedOps::bytes() const {
  int64_t total = 0;
  for (const auto& op : kept_) {
    for (const auto& t : op) {
      if (t.defined()) {
        total += t.numel() * static_cast<int64_t>(t.element_size());
      }
    }
  }
  return total;
}

SavedOps* saved_ops() {
  return forward_state().saved_ops;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// What a checkpoint's backward needs besides its input: the forward to
/// rerun, the state to rerun it under and the outputs kept.
struct Recompute : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> run;
  ForwardState state;
  std::unique_ptr<SavedOps> ops;  // null under CheckpointPolicy::kFull
};

class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Runs under no grad (Function::apply's forward does): nothing but the
  // input, and the recorded ops' outputs, outlives it.
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& input,
      const at::Tensor& /*anchor*/,
      c10::intrusive_ptr<Recompute> recompute) {
    ForwardState state = recompute->state;
    state.saved_ops = recompute->ops.get();
    at::Tensor out;
    {
      ForwardStateGuard guard(state);
      out = recompute->run(input);
    }
    ctx->save_for_backward({input});
    ctx->saved_data["recompute"] = at::IValue::make_capsule(recompute);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = ctx->saved_data["recompute"].toCapsule();
    auto* recompute = static_cast<Recompute*>(holder.get());
    if (!recompute->run) {
      throw std::logic_error(
          "[recompute] backward through a checkpointed unit twice: its "
          "recomputation is used up (retain_graph is not supported)");
    }
    auto x = ctx->get_saved_variables()[0].detach();
    const bool differentiable = at::isFloatingType(x.scalar_type());
    if (differentiable) {
      x.requires_grad_(true);
    }
    ForwardState state = recompute->state;
    state.recomputing = true;
    if (recompute->ops) {
      recompute->ops->set_mode(SavedOps::Mode::kReplay);
      state.saved_ops = recompute->ops.get();
    }
    at::Tensor out;
    {
      ForwardStateGuard guard(state);
      at::AutoGradMode grad(true);
      out = recompute->run(x);
    }
    if (recompute->ops && recompute->ops->pending() != 0) {
      throw std::logic_error(
          "[recompute] the recomputation ran fewer ops than the checkpointed "
          "forward recorded: the unit's forward must run the same ops each "
          "time");
    }
    // Free what the first forward kept before backpropagating.
    recompute->run = nullptr;
    recompute->ops.reset();
    if (grads[0].defined() && out.requires_grad()) {
      torch::autograd::backward({out}, {grads[0]});
    }
    return {
        differentiable ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(
    const std::function<at::Tensor(const at::Tensor&)>& run,
    const at::Tensor& input,
    CheckpointPolicy policy) {
  if (!at::GradMode::is_enabled()) {
    return run(input);
  }
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->run = run;
  recompute->state = forward_state();
  recompute->state.saved_ops = nullptr;
  if (policy == CheckpointPolicy::kKeepExpensiveOps) {
    recompute->ops = std::make_unique<SavedOps>();
  }
  // The unit's parameters get their gradients from the recomputation, which
  // backward reaches only through this node: an input that needs a gradient
  // puts it on the graph, and so does the anchor, for an input that needs
  // none (token ids, the output of frozen layers).
  static thread_local const at::Tensor anchor =
      at::empty({0}).requires_grad_(true);
  return CheckpointFunction::apply(input, anchor, std::move(recompute));
}

}  // namespace baton
