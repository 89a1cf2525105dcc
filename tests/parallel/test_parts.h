#pragma once

// ModelParts from plain chunks, for tests that build their models by hand.

#include <memory>
#include <vector>

#include "parallel/model_parts.h"

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

}  // namespace baton::testing
