#pragma once

// ModelParts from plain chunks, for tests that build their models by hand.

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "config/parallel_dims.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/applier.h"
#include "parallel/mixed_precision.h"
#include "parallel/model_parts.h"
#include "parallel/tensor_parallel/tensor_parallel.h"

namespace baton::testing {

/// One part per chunk, as stages first_stage, first_stage + 1, ...
inline ModelParts parts_of(
    const std::vector<std::shared_ptr<ModelChunk>>& chunks,
    int64_t first_stage = 0) {
  ModelParts parts;
  for (const auto& chunk : chunks) {
    parts.push_back(std::make_shared<ModelPart>(chunk, first_stage++));
  }
  return parts;
}

/// The chain the builders give data parallel of these degrees: to_device,
/// then append_data_parallel's steps.
inline ApplierChain data_parallel_chain(int64_t replicate, int64_t shard) {
  register_builtin_appliers();
  ApplierChain chain;
  chain.append("to_device");
  append_data_parallel(
      chain, ParallelDims::resolve(replicate, shard, 1, 1, replicate * shard));
  return chain;
}

/// `chain` with the activation_checkpoint step after to_device (and
/// tensor_parallel), as the builders place it, when `config`'s
/// activation_checkpoint.mode is not none.
inline ApplierChain with_activation_checkpoint(
    ApplierChain chain, const JobConfig& config) {
  if (config.activation_checkpoint.mode != "none") {
    chain.insert_after(
        chain.contains("tensor_parallel") ? "tensor_parallel" : "to_device",
        "activation_checkpoint",
        std::make_unique<ActivationCheckpointApplier>());
  }
  return chain;
}

/// `chain` with the tensor_parallel step after to_device, as the builders
/// place it, when `tp` is above 1.
inline ApplierChain with_tensor_parallel(ApplierChain chain, int64_t tp) {
  if (tp > 1) {
    chain.insert_after(
        "to_device",
        "tensor_parallel",
        std::make_unique<tensor_parallel::TensorParallelApplier>());
  }
  return chain;
}

/// `chain` with the mixed_precision step where the builders place it (after
/// to_device, tensor_parallel and activation_checkpoint) when `mp` casts the
/// weights.
inline ApplierChain with_mixed_precision(
    ApplierChain chain, const MixedPrecision& mp) {
  if (mp.param_cast()) {
    std::string after = "to_device";
    for (const char* step : {"tensor_parallel", "activation_checkpoint"}) {
      if (chain.contains(step)) {
        after = step;
      }
    }
    chain.insert_after(
        after, "mixed_precision", std::make_unique<MixedPrecisionApplier>());
  }
  return chain;
}

/// Writes each parameter of `parts` into `whole` under its FQN: a copy when
/// this rank holds all of it, else its slice (ModelPart::slice) of a tensor
/// of NaNs made the first time, so that the ranks of one replica together
/// fill it and a slice nobody wrote shows. From rank threads, under a lock.
inline void collect_whole(
    const ModelParts& parts, std::map<std::string, at::Tensor>& whole) {
  parts.for_each([&](ModelPart& part) {
    for (const auto& item : part.module().named_parameters()) {
      const at::Tensor p = item.value().detach();
      const ParamSlice* slice = part.slice(item.key());
      if (slice == nullptr) {
        whole[item.key()] = p.clone();
        continue;
      }
      auto& t = whole[item.key()];
      if (!t.defined()) {
        t = at::full(slice->global_shape, NAN, p.options());
      }
      at::Tensor view = t;
      for (int64_t d = 0; d < p.dim(); ++d) {
        view = view.narrow(d, slice->offsets[d], p.size(d));
      }
      view.copy_(p);
    }
  });
}

}  // namespace baton::testing
