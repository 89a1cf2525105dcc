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
#include "parallel/axes.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/mixed_precision.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
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

/// The built-in parallelisms' layout with these degrees, as the builders
/// resolve it from the config's four degrees.
inline ParallelDims builtin_dims(
    int64_t replicate,
    int64_t shard,
    int64_t tp,
    int64_t pp,
    int64_t world,
    int64_t ep = 1,
    int64_t cp = 1) {
  register_builtin_appliers();
  return ParallelDims::of(
      {{kReplicateAxis, replicate},
       {kShardAxis, shard},
       {kContextAxis, cp},
       {tensor_parallel::kAxis, tp},
       {kPipelineAxis, pp},
       {kExpertAxis, ep}},
      world);
}

/// The chain the builders give data parallel of these degrees: to_device,
/// then the data-parallel parallelisms' steps (each step once).
inline ApplierChain data_parallel_chain(
    int64_t replicate, int64_t shard, int64_t cp = 1) {
  const auto dims = builtin_dims(
      replicate, shard, 1, 1, replicate * shard * cp, /*ep=*/1, cp);
  ApplierChain chain;
  chain.append("to_device");
  const JobConfig config;
  for (const Parallelism* p : enabled_parallelisms(config, dims)) {
    if (p->place != ChainPlace::kData) {
      continue;
    }
    for (const auto& step : p->appliers(config, dims)) {
      if (!chain.contains(step)) {
        chain.append(step);
      }
    }
  }
  return chain;
}

/// `chain` with the activation_checkpoint step after to_device (and
/// tensor_parallel), as the builders place it, when `config`'s
/// activation_checkpoint.mode is not none.
inline ApplierChain with_activation_checkpoint(
    ApplierChain chain, const JobConfig& config) {
  if (config.activation_checkpoint.mode != "none") {
    std::string after = "to_device";
    for (const char* step :
         {"tensor_parallel", "context_parallel", "expert_parallel"}) {
      if (chain.contains(step)) {
        after = step;
      }
    }
    chain.insert_after(
        after,
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

/// `chain` with the context_parallel step after to_device and
/// tensor_parallel, as the builders place it, when `cp` is above 1.
inline ApplierChain with_context_parallel(ApplierChain chain, int64_t cp) {
  if (cp > 1) {
    chain.insert_after(
        chain.contains("tensor_parallel") ? "tensor_parallel" : "to_device",
        "context_parallel",
        std::make_unique<context_parallel::ContextParallelApplier>());
  }
  return chain;
}

/// `chain` with the expert_parallel step after to_device and
/// tensor_parallel, as the builders place it, when `ep` is above 1.
inline ApplierChain with_expert_parallel(ApplierChain chain, int64_t ep) {
  if (ep > 1) {
    std::string after = "to_device";
    for (const char* step : {"tensor_parallel", "context_parallel"}) {
      if (chain.contains(step)) {
        after = step;
      }
    }
    chain.insert_after(
        after,
        "expert_parallel",
        std::make_unique<expert_parallel::ExpertParallelApplier>());
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
    for (const char* step :
         {"tensor_parallel",
          "context_parallel",
          "expert_parallel",
          "activation_checkpoint"}) {
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
    // Buffers (an MoE's routing bias) are whole on every rank.
    for (const auto& item : part.module().named_buffers()) {
      whole[item.key()] = item.value().detach().clone();
    }
  });
}

}  // namespace baton::testing
