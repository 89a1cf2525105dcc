#pragma once

// Every use of libtorch beyond its stable public API lives here or in the
// dist facade (parallel/dist/process_group*, c10d): the storage surgery of
// fully sharded data parallel, the optimizer state's key, the type of an
// autograd node reference. A new libtorch would break here first, and a
// difference between the versions Baton supports (the pinned one and the
// floor, scripts/versions.env) goes here, naming the version that needs it.

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace baton::compat {

/// A strong reference to an autograd node, as
/// torch::autograd::impl::grad_accumulator returns it: a std::shared_ptr in
/// 2.11, a c10::intrusive_ptr in 2.15. Holding one keeps the accumulator,
/// and the hooks on it, alive (the parameter holds it weakly).
using NodeRef = decltype(torch::autograd::impl::grad_accumulator(
    std::declval<const at::Tensor&>()));

/// The key of torch::optim::Optimizer::state(): the parameter's TensorImpl.
using OptimizerStateKey = void*;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
static_assert(
    std::is_same_v<
        std::remove_cvref_t<decltype(std::declval<torch::optim::Optimizer&>()
                                         .state())>::key_type,
        OptimizerStateKey>,
    "torch::optim::Optimizer::state() is keyed differently in this libtorch: "
    "update compat::OptimizerStateKey");

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

/// ATen's grouped matmul (at::_grouped_mm, private but the one PyTorch's
/// MoE layers use; both supported versions have it, with a CPU kernel and
/// CUDA's CUTLASS one on sm90 and later in bfloat16, a loop of products
/// elsewhere): rows (M, K) in groups ending at `offs` (int32, cumulative,
/// one per group), each times its group's (K, N) of `weights` (G, K, N):
/// (M, N), with its autograd. Every tensor's strides and data pointer must
/// be multiples of 16 bytes (grouped_mm_aligned).
inline at::Tensor grouped_mm(
    const at::Tensor& rows, const at::Tensor& weights, const at::Tensor& offs) {
  return at::_grouped_mm(rows, weights, offs);
}

/// Whether grouped_mm takes `t`: its data pointer and every stride but a
/// unit one multiples of 16 bytes.
inline bool grouped_mm_aligned(const at::Tensor& t) {
  const int64_t size = static_cast<int64_t>(t.element_size());
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) {
    return false;
  }
  for (const int64_t stride : t.strides()) {
    if (stride != 1 && (stride * size) % 16 != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace baton::compat
