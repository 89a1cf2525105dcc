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
  if (!c10::GradMode::is_enabled() || !param.requires_grad()) {
    return param.to(dtype_);
  }
  const int64_t version = param._version();
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
