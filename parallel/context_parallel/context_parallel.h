#pragma once

// Context parallel: every sequence split across the ranks of the cp axis
// (SequenceSplit's head-tail chunks, for causal balance), each rank holding
// seq_len / cp positions of every sequence through the whole model, and
// exact causal attention across the shards.
//
// The attention all-gathers the keys and values (Llama 3's choice) rather
// than passing them around a ring (torchtitan's default): both move the same
// bytes, (cp - 1) / cp of the whole sequence's keys and values forward and
// as many gradient bytes backward (an all-gather then a reduce-scatter, as
// against cp - 1 ring steps each way), but the gather is one collective per
// layer and direction instead of cp - 1 latencies, its gradient needs no
// second ring, and with grouped-query attention the keys and values are a
// small share of the activations (kv_heads / n_heads of q's width), so
// holding the whole sequence's for one layer costs little. The transfer is
// posted before the block computations it does not feed: each rank computes
// its chunks' diagonal (causal) blocks from its own keys while the gather
// runs, and in the backward the diagonal blocks' gradients while the
// reduce-scatter of the earlier chunks' key and value gradients runs. The
// blocks run in models/common/block_attention.h's engine (on the CPU
// ATen's flash-attention kernel, else tiles), merged by their log-sum-exp, and
// the backward recomputes each block's probabilities from the saved log-sum-exp
// (FlashAttention's), so nothing of (T, T) is saved. Under document masking
// every rank holds the whole rows' documents (a few bytes per position), so a
// row sees only its own document's keys, wherever they sit, with no exchange of
// its own.
//
// Where it sits in the mesh (torchtitan's): cp between dp_shard and tp. Its
// ranks hold the same weights and see different tokens, so fully_shard
// shards the weights over dp_shard x cp (the dp_shard_cp group) and their
// gradients are summed there; the loss and its token count sum over cp
// (cp joins the "loss" group), and the data loader gives every cp rank the
// same rows, each keeping its chunks.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/sequence_split.h"
#include "models/common/transformer.h"
#include "parallel/applier.h"
#include "parallel/axes.h"
#include "parallel/dist/traffic.h"

namespace baton {
struct Parallelism;
struct JobConfig;
}  // namespace baton

namespace baton::context_parallel {

inline constexpr const char* kAxis = kContextAxis;
/// Its degree's config key, in the parallelism section.
inline constexpr const char* kDegreeKey = "parallelism.context_parallel_degree";

/// What makes cp unusable for `config` on a model shaped `args`: a
/// seq_len that is not a multiple of 2 x cp (x tp under sequence parallel,
/// whose shards split each cp shard); the problem names the keys.
std::optional<ConfigProblem> context_parallel_problem(
    const JobConfig& config, const ModelArgs& args, int64_t cp, int64_t tp);

/// One attention layer's attention over the cp group: this rank's rows
/// against the whole sequence's keys, exact, as described above. The
/// exchanges are named "context_parallel <layer> kv all_gather forward"
/// and "kv reduce_scatter backward" in profiler traces, the flight recorder
/// and errors.
class GatheredKvAttention final : public models::SplitSequenceAttention {
 public:
  GatheredKvAttention(
      std::shared_ptr<dist::ProcessGroup> group,
      SequenceSplit split,
      std::string name);

  at::Tensor attend(
      const at::Tensor& q,
      const at::Tensor& k,
      const at::Tensor& v,
      const at::Tensor& documents) override;

  const std::string& name() const {
    return name_;
  }
  dist::ProcessGroup& group() const {
    return *group_;
  }
  const SequenceSplit& split() const {
    return split_;
  }

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  SequenceSplit split_;
  std::string name_;
};

/// What this process's cp attention sent to other ranks, per direction
/// ("kv all_gather forward", "kv reduce_scatter backward"): calls, bytes,
/// and the time spent waiting for the exchange after the blocks that
/// overlap it. Ranks run as threads of one process add up.
using Traffic = dist::Traffic;
std::map<std::string, Traffic> traffic();
void reset_traffic();

/// The context_parallel step (parallelism.context_parallel_degree > 1):
/// sets the part's sequence split (RoPE's positions) and each attention
/// layer's GatheredKvAttention; an MoE layer's per-sequence statistics
/// (the auxiliary loss) add up the other cp shards' positions.
class ContextParallelApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

/// Context parallel as registered: the axis cp between dp_shard and tp,
/// the key parallelism.context_parallel_degree, the context_parallel step
/// among the model steps.
Parallelism context_parallel_parallelism();

}  // namespace baton::context_parallel
