#pragma once

// Every difference between the libtorch versions Baton builds against
// (Debian 12's 1.13, Debian 13's 2.6, a pip PyTorch's) lives here or in the
// dist facade (parallel/dist/process_group.cpp, c10d's Backend split); no
// other file names a version. So does every use of libtorch internals below
// its public API (the storage surgery of fully sharded data parallel), where
// a new version would show first.

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <string>
#include <type_traits>
#include <utility>

/// True when the libtorch being compiled against is at least major.minor.
#define BATON_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// c10::Allocator::allocate is const up to 2.2 and not from 2.3, which also
/// makes copy_data pure virtual (common/allocator.cpp overrides both).
#if BATON_TORCH_AT_LEAST(2, 3)
#define BATON_ALLOCATOR_ALLOCATE_CONST
#else
#define BATON_ALLOCATOR_ALLOCATE_CONST const
#endif

namespace baton::compat {

/// The key of torch::optim::Optimizer::state(): the parameter's TensorImpl
/// as a pointer string up to 2.1, the pointer itself from 2.2.
#if BATON_TORCH_AT_LEAST(2, 2)
using OptimizerStateKey = void*;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif
static_assert(
    std::is_same_v<
        std::remove_cvref_t<decltype(std::declval<torch::optim::Optimizer&>()
                                         .state())>::key_type,
        OptimizerStateKey>,
    "torch::optim::Optimizer::state() is keyed differently in this libtorch: "
    "update compat::OptimizerStateKey");

/// Causal scaled dot-product attention, (B, H, T, D) each -> (B, H, T, D):
/// at::_scaled_dot_product_attention (which returns a tuple) in 1.13,
/// at::scaled_dot_product_attention from 2.0.
inline at::Tensor causal_sdpa(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if BATON_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(
      q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  return std::get<0>(at::_scaled_dot_product_attention(
      q,
      k,
      v,
      /*attn_mask=*/{},
      /*dropout_p=*/0.0,
      /*need_attn_weights=*/false,
      /*is_causal=*/true));
#endif
}

/// Frees the memory of `t`'s storage, keeping its shape and every tensor
/// that shares the storage (an autograd-saved parameter among them): their
/// data is gone until refill_storage. Fully sharded data parallel frees an
/// unsharded parameter this way after its forward.
inline void free_storage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

/// Gives `t`'s freed storage `bytes` bytes again (contents undefined), from
/// the allocator it had.
inline void refill_storage(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

/// Drops every gradient of `optimizer`'s parameters, as zero_grad does by
/// default from 2.0 (set_to_none); 1.13's zero_grad() zeroes them in place
/// and keeps their memory between steps.
inline void zero_grad_to_none(torch::optim::Optimizer& optimizer) {
#if BATON_TORCH_AT_LEAST(2, 0)
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      p.mutable_grad() = at::Tensor();
    }
  }
#endif
}

}  // namespace baton::compat
