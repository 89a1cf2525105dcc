#pragma once

namespace baton {

/// The mesh axes of the built-in parallelisms other than tensor parallel
/// (its own folder names its axis): the pipeline's, outermost, and the two
/// data-parallel ones (parallel/parallelism.h registers them).
inline constexpr const char* kPipelineAxis = "pp";
inline constexpr const char* kReplicateAxis = "dp_replicate";
inline constexpr const char* kShardAxis = "dp_shard";

}  // namespace baton
