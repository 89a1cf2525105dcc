#include "parallel/dist/parallel_dims.h"

#include <array>

#include "common/error.h"

namespace baton {

ParallelDims ParallelDims::resolve(
    int64_t dp_replicate,
    int64_t dp_shard,
    int64_t tp,
    int64_t pp,
    int64_t world_size) {
  if (world_size < 1) {
    throw ConfigError(
        "[ParallelDims] world size must be >= 1, got " +
        std::to_string(world_size));
  }
  ParallelDims d{dp_replicate, dp_shard, tp, pp, world_size};
  const std::array<std::pair<const char*, int64_t*>, 4> degrees = {{
      {"data_parallel_replicate_degree", &d.dp_replicate},
      {"data_parallel_shard_degree", &d.dp_shard},
      {"tensor_parallel_degree", &d.tp},
      {"pipeline_parallel_degree", &d.pp},
  }};
  int64_t known = 1;
  int64_t* rest = nullptr;
  for (const auto& [name, value] : degrees) {
    if (*value == -1) {
      if (rest != nullptr) {
        throw ConfigError(
            std::string("parallelism: at most one degree may be -1; ") + name +
            " is the second");
      }
      rest = value;
    } else if (*value < 1) {
      throw ConfigError(
          std::string("parallelism.") + name + ": " + std::to_string(*value) +
          " is out of range; allowed: an integer >= 1, or -1 for the rest");
    } else {
      known *= *value;
    }
  }
  if (rest != nullptr) {
    if (world_size % known != 0) {
      throw ConfigError(
          "parallelism: the other degrees multiply to " +
          std::to_string(known) + ", which does not divide the world size " +
          std::to_string(world_size));
    }
    *rest = world_size / known;
  } else if (known != world_size) {
    throw ConfigError(
        "parallelism: " + d.to_string() + " multiply to " +
        std::to_string(known) + ", not the world size " +
        std::to_string(world_size) +
        "; allowed: degrees whose product is the world size (use -1 for one "
        "degree to take the rest)");
  }
  return d;
}

std::string ParallelDims::to_string() const {
  return "dp_replicate=" + std::to_string(dp_replicate) +
         " dp_shard=" + std::to_string(dp_shard) + " tp=" + std::to_string(tp) +
         " pp=" + std::to_string(pp) + " (world " + std::to_string(world_size) +
         ")";
}

}  // namespace baton
