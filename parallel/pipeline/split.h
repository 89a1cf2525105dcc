#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.h"

namespace baton {
struct Parallelism;
}

namespace baton::pipeline {

/// Pipeline parallelism as registered: the pp axis (outermost,
/// parallelism.pipeline_parallel_degree); its stages hold different
/// parameters, and each forward carries one microbatch
/// (pipeline_parallel_microbatch_size sequences). The pipeline builder
/// places the stages; it adds no applier.
Parallelism pipeline_parallelism();

/// The chunk each of `num_stages` stages holds, for a model of `n_layers`
/// transformer layers: the embedding on stage 0, the final norm and output
/// on the last stage, and the layers either `layers_per_stage` each (0:
/// spread as evenly as possible, the extra layers to the earliest stages).
/// Throws ConfigError for more stages than layers, an empty stage, or
/// layers_per_stage that does not cover the model exactly.
std::vector<ChunkSpec> split_model(
    int64_t n_layers, int64_t num_stages, int64_t layers_per_stage = 0);

/// The chunks named by explicit module FQNs per stage, e.g.
/// {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}}. Each
/// stage's layers must be contiguous, the stages in order, and every module
/// named once. Throws ConfigError naming the bad entry.
std::vector<ChunkSpec> split_model_by_fqns(
    int64_t n_layers, const std::vector<std::vector<std::string>>& fqns);

/// "tok_embeddings, layers.0-3" for logs.
std::string describe_chunk(const ChunkSpec& chunk);

}  // namespace baton::pipeline
