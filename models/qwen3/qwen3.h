#pragma once

// Qwen3 dense as a model family (`model.name: qwen3`): the Llama decoder
// with an RMSNorm on each query and key head before RoPE, head widths of
// their own, RoPE base 1e6, the small ones' embeddings tied; the
// transformers Qwen3ForCausalLM layout.

#include <map>
#include <string>

#include "models/model_spec.h"

namespace baton::qwen3 {

/// The flavors by name: `debugmodel` (CPU-sized, tied) and Qwen3's published
/// dense shapes `0.6B`, `1.7B`, `4B` (tied), `8B`, `14B`, `32B`.
const std::map<std::string, ModelArgs>& flavors();

/// The family as registered.
ModelSpec spec();

/// Qwen3-MoE (`model.name: qwen3_moe`): Qwen3's attention, every block's
/// feed-forward a mixture of experts (softmax router, top-k renormalised,
/// no shared experts). Flavors: `debugmodel` (CPU-sized: 8 experts, top 2)
/// and the published `30B-A3B` and `235B-A22B` shapes.
const std::map<std::string, ModelArgs>& moe_flavors();
ModelSpec moe_spec();

}  // namespace baton::qwen3
