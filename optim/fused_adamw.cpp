#include "optim/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/optim/serialize.h>
#include <torch/torch.h>

#include <cmath>

#include "common/torch_compat.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace baton {

namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

/// The update's scalars for one parameter and step.
struct Coefficients {
  float decay;  // 1 - lr * weight_decay
  float beta1;
  float beta2;
  float inv_sqrt_bias_correction2;
  float eps;
  float step_size;  // lr / bias_correction1
};

/// p, m, v updated in place from g over [begin, end), element by element,
/// in the order torch::optim::AdamW computes them; four lanes at a time
/// where SSE2 is there (every x86-64), since std::sqrt's errno keeps the
/// compiler from vectorizing the plain loop.
void update_range(
    float* p,
    const float* g,
    float* m,
    float* v,
    int64_t begin,
    int64_t end,
    const Coefficients& c) {
  const float one_minus_beta1 = 1.0f - c.beta1;
  const float one_minus_beta2 = 1.0f - c.beta2;
  int64_t i = begin;
#ifdef __SSE2__
  const __m128 beta1 = _mm_set1_ps(c.beta1), beta2 = _mm_set1_ps(c.beta2);
  const __m128 omb1 = _mm_set1_ps(one_minus_beta1);
  const __m128 omb2 = _mm_set1_ps(one_minus_beta2);
  const __m128 inv_bc2 = _mm_set1_ps(c.inv_sqrt_bias_correction2);
  const __m128 eps = _mm_set1_ps(c.eps), decay = _mm_set1_ps(c.decay);
  const __m128 step = _mm_set1_ps(c.step_size);
  for (; i + 4 <= end; i += 4) {
    const __m128 gi = _mm_loadu_ps(g + i);
    const __m128 mi = _mm_add_ps(
        _mm_mul_ps(_mm_loadu_ps(m + i), beta1), _mm_mul_ps(omb1, gi));
    const __m128 vi = _mm_add_ps(
        _mm_mul_ps(_mm_loadu_ps(v + i), beta2),
        _mm_mul_ps(_mm_mul_ps(omb2, gi), gi));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    const __m128 denom = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), inv_bc2), eps);
    const __m128 pi = _mm_sub_ps(
        _mm_mul_ps(_mm_loadu_ps(p + i), decay),
        _mm_mul_ps(step, _mm_div_ps(mi, denom)));
    _mm_storeu_ps(p + i, pi);
  }
#endif
  for (; i < end; ++i) {
    const float gi = g[i];
    const float mi = m[i] * c.beta1 + one_minus_beta1 * gi;
    const float vi = v[i] * c.beta2 + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * c.inv_sqrt_bias_correction2 + c.eps;
    p[i] = p[i] * c.decay - c.step_size * (mi / denom);
  }
}

void update_contiguous(
    float* p,
    const float* g,
    float* m,
    float* v,
    int64_t n,
    const Coefficients& c) {
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    update_range(p, g, m, v, begin, end, c);
  });
}

bool fusable(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.is_contiguous();
}

}  // namespace

FusedAdamW::FusedAdamW(
    std::vector<torch::optim::OptimizerParamGroup> param_groups,
    AdamWOptions defaults)
    : Optimizer(
          std::move(param_groups),
          std::make_unique<AdamWOptions>(std::move(defaults))) {
  // Groups without options of their own took the defaults above.
  for (const auto& group : param_groups_) {
    check_options(static_cast<const AdamWOptions&>(group.options()));
  }
}

void FusedAdamW::check_options(const AdamWOptions& o) {
  TORCH_CHECK(
      o.lr() >= 0,
      "[FusedAdamW] lr: ",
      o.lr(),
      " is an invalid learning rate; allowed: >= 0");
  TORCH_CHECK(o.eps() >= 0, "[FusedAdamW] eps: ", o.eps(), "; allowed: >= 0");
  const auto [beta1, beta2] = o.betas();
  TORCH_CHECK(
      0 <= beta1 && beta1 < 1,
      "[FusedAdamW] beta1: ",
      beta1,
      "; allowed: [0, 1)");
  TORCH_CHECK(
      0 <= beta2 && beta2 < 1,
      "[FusedAdamW] beta2: ",
      beta2,
      "; allowed: [0, 1)");
  TORCH_CHECK(
      o.weight_decay() >= 0,
      "[FusedAdamW] weight_decay: ",
      o.weight_decay(),
      "; allowed: >= 0");
  TORCH_CHECK(
      !o.amsgrad(),
      "[FusedAdamW] amsgrad: true; allowed: false; hint: use "
      "torch::optim::AdamW");
}

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, AdamWOptions defaults)
    : FusedAdamW(
          {torch::optim::OptimizerParamGroup(std::move(params))},
          std::move(defaults)) {}

at::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    const auto [beta1, beta2] = options.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) {
        continue;
      }
      const auto& grad = p.grad();
      TORCH_CHECK(
          !grad.is_sparse(), "[FusedAdamW] does not support sparse gradients");
      const auto key = compat::optimizer_state_key(p);
      auto& slot = state_[key];
      if (!slot) {
        auto fresh = std::make_unique<AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      const double step_size = options.lr() / bias_correction1;
      auto& exp_avg = state.exp_avg();
      auto& exp_avg_sq = state.exp_avg_sq();
      if (fusable(p) && fusable(grad) && fusable(exp_avg) &&
          fusable(exp_avg_sq)) {
        const Coefficients c{
            static_cast<float>(1 - options.lr() * options.weight_decay()),
            static_cast<float>(beta1),
            static_cast<float>(beta2),
            static_cast<float>(1 / std::sqrt(bias_correction2)),
            static_cast<float>(options.eps()),
            static_cast<float>(step_size)};
        update_contiguous(
            p.data_ptr<float>(),
            grad.data_ptr<float>(),
            exp_avg.data_ptr<float>(),
            exp_avg_sq.data_ptr<float>(),
            p.numel(),
            c);
        continue;
      }
      // torch::optim::AdamW's arithmetic, for other devices and dtypes.
      if (options.weight_decay() != 0) {
        p.mul_(1 - options.lr() * options.weight_decay());
      }
      exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const auto denom =
          (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options.eps());
      p.addcdiv_(exp_avg, denom, -step_size);
    }
  }
  return loss;
}

void FusedAdamW::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdamWParamState, AdamWOptions>(archive, *this);
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdamWParamState, AdamWOptions>(archive, *this);
}

}  // namespace baton
