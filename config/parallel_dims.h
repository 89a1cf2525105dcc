#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"

namespace baton {

/// Checks the four degrees alone: each is >= 1 or -1, and at most one is -1
/// (it takes the rest of the world). The config check and
/// ParallelDims::resolve both ask it.
std::optional<ConfigProblem> degrees_problem(
    int64_t dp_replicate, int64_t dp_shard, int64_t tp, int64_t pp);

/// The degrees of each kind of parallelism. Their product is the world size;
/// one of them may be given as -1 to take what is left.
struct ParallelDims {
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t world_size = 1;

  /// Resolves a -1 degree and checks that the product equals `world_size`.
  /// Throws ConfigError naming the degrees and the world size otherwise
  /// (and for a degrees_problem).
  static ParallelDims resolve(
      int64_t dp_replicate,
      int64_t dp_shard,
      int64_t tp,
      int64_t pp,
      int64_t world_size);

  /// Ranks that hold a replica or shard of the same weights.
  int64_t dp() const {
    return dp_replicate * dp_shard;
  }
  bool pp_enabled() const {
    return pp > 1;
  }
  bool dp_enabled() const {
    return dp() > 1;
  }
  /// "dp_replicate=2 dp_shard=1 tp=1 pp=4 (world 8)".
  std::string to_string() const;
};

}  // namespace baton
