#pragma once

namespace baton {

/// The mesh axes of the built-in parallelisms other than tensor parallel
/// (its own folder names its axis): the pipeline's, outermost, the two
/// data-parallel ones, context parallel's, and expert parallel's
/// (parallel/parallelism.h registers them).
inline constexpr const char* kPipelineAxis = "pp";
inline constexpr const char* kReplicateAxis = "dp_replicate";
inline constexpr const char* kShardAxis = "dp_shard";
/// Context parallel's axis: its ranks hold different positions of the same
/// sequences.
inline constexpr const char* kContextAxis = "cp";
/// The ranks that hold the same weights within a replica, dp_shard x cp,
/// over which fully_shard shards them (cp's ranks hold the same weights
/// and see different tokens, as dp_shard's do).
inline constexpr const char* kShardContextGroup = "dp_shard_cp";
/// Expert parallel's derived axes: ep, the innermost ranks of dp_shard x cp
/// that split the experts, and the rest of dp_shard x cp, the ranks that
/// hold the same experts (over which fully_shard shards them).
inline constexpr const char* kExpertAxis = "ep";
inline constexpr const char* kExpertRestAxis = "dp_shard_mod_ep";

}  // namespace baton
