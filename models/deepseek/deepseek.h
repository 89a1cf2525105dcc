#pragma once

// DeepSeek-style mixture of experts as a model family (`model.name:
// deepseek_moe`): the Llama decoder's grouped-query attention with
// DeepSeek-V3's routing in the MoE blocks (sigmoid scores, group-limited
// top-k, a routing bias moved towards balance before each optimizer step,
// the chosen scores renormalised and scaled), shared experts run on every
// token, and the first blocks dense. Its attention is GQA, not DeepSeek's
// multi-head latent attention, so it has no Hugging Face layout: its MoE
// block is checked against transformers' DeepseekV3MoE
// (tests/checkpoint/hf_families_test.cpp).

#include <map>
#include <string>

#include "models/model_spec.h"

namespace baton::deepseek {

/// The flavors by name: `debugmodel` (CPU-sized: 8 routed experts of which
/// a token uses 2, in 4 groups of which 2 are kept, one shared expert, the
/// first block dense); `16B`, DeepSeekMoE 16B's shape (which had
/// multi-head attention, as here: 64 experts, top 6, 2 shared, softmax
/// scores); and `V3-GQA`, DeepSeek-V3's MoE shape (256 experts, top 8 in 4
/// of 8 groups, one shared, the first 3 blocks dense) with grouped-query
/// attention of 8 key/value heads in place of its latent attention, for the
/// dry run and the planner.
const std::map<std::string, ModelArgs>& flavors();

/// The family as registered.
ModelSpec spec();

}  // namespace baton::deepseek
