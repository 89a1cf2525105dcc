#pragma once

// Llama 3 as a model family (`model.name: llama3`): Meta's architecture,
// its flavors from the April 2024 release to Llama 3.3, and the
// transformers LlamaForCausalLM layout.

#include <map>
#include <string>

#include "models/model_spec.h"

namespace baton::llama3 {

/// The flavors by name:
/// - `debugmodel`, `small`: CPU-sized, RoPE unscaled;
/// - `1B`, `3B`: Llama 3.2 (tied embeddings, RoPE scaled 32x);
/// - `8B`, `70B`, `405B`: Llama 3.1 (and 3.3 70B; RoPE scaled 8x, 128K
///   context);
/// - `3.0-8B`, `3.0-70B`: Llama 3 as released in April 2024 (the same
///   shapes, RoPE unscaled, 8K context).
const std::map<std::string, ModelArgs>& flavors();

/// The family as registered.
ModelSpec spec();

}  // namespace baton::llama3
