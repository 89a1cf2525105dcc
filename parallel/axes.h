#pragma once

namespace baton {

/// The mesh axes of the built-in parallelisms other than tensor parallel
/// (its own folder names its axis): the pipeline's, outermost, the two
/// data-parallel ones, and expert parallel's (parallel/parallelism.h
/// registers them).
inline constexpr const char* kPipelineAxis = "pp";
inline constexpr const char* kReplicateAxis = "dp_replicate";
inline constexpr const char* kShardAxis = "dp_shard";
/// Expert parallel's derived axes: ep, the innermost ranks of dp_shard that
/// split the experts, and the rest of dp_shard, the ranks that hold the
/// same experts (over which fully_shard shards them).
inline constexpr const char* kExpertAxis = "ep";
inline constexpr const char* kExpertRestAxis = "dp_shard_mod_ep";

}  // namespace baton
