#include "models/param_cast.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "models/forward_state.h"

namespace baton {

ParamCast::ParamCast(at::ScalarType dtype) : dtype_(dtype) {}

at::Tensor ParamCast::get(const at::Tensor& param) {
  if (param.scalar_type() == dtype_ || !param.is_floating_point()) {
    return param;
  }
  const int64_t version = param._version();
  if (!c10::GradMode::is_enabled() || !param.requires_grad()) {
    // A kept cast serves a no-grad read too (an activation checkpoint's
    // first forward, between the step's recomputations); a new one is not
    // kept.
    const auto kept = cache_.find(param.unsafeGetTensorImpl());
    if (kept != cache_.end() && kept->second.version == version) {
      return kept->second.cast;
    }
    return param.to(dtype_);
  }
  auto& entry = cache_[param.unsafeGetTensorImpl()];
  if (!entry.cast.defined() || entry.version != version) {
    entry.cast = param.to(dtype_);
    entry.version = version;
    ++casts_;
  }
  return entry.cast;
}

void ParamCast::clear() {
  cache_.clear();
}

at::Tensor compute_param(const at::Tensor& param) {
  ParamCast* cast = forward_state().cast;
  return cast == nullptr ? param : cast->get(param);
}

}  // namespace baton
