#include "config/parallel_dims.h"

#include <array>

#include "common/error.h"

namespace baton {

std::optional<ConfigProblem> degrees_problem(
    int64_t dp_replicate, int64_t dp_shard, int64_t tp, int64_t pp) {
  const std::array<std::pair<const char*, int64_t>, 4> degrees = {{
      {"parallelism.data_parallel_replicate_degree", dp_replicate},
      {"parallelism.data_parallel_shard_degree", dp_shard},
      {"parallelism.tensor_parallel_degree", tp},
      {"parallelism.pipeline_parallel_degree", pp},
  }};
  const char* inferred = nullptr;
  for (const auto& [key, degree] : degrees) {
    if (degree == -1) {
      if (inferred != nullptr) {
        return ConfigProblem{
            key,
            std::string(key) + ": -1 conflicts with " + inferred +
                " -1; allowed: -1 in at most one parallelism degree"};
      }
      inferred = key;
    } else if (degree < 1) {
      return ConfigProblem{
          key,
          std::string(key) + ": " + std::to_string(degree) +
              " is out of range; allowed: an integer >= 1, or -1 for the "
              "rest"};
    }
  }
  return std::nullopt;
}

ParallelDims ParallelDims::resolve(
    int64_t dp_replicate,
    int64_t dp_shard,
    int64_t tp,
    int64_t pp,
    int64_t world_size) {
  if (world_size < 1) {
    throw ConfigError(
        "[ParallelDims] world size: " + std::to_string(world_size) +
        "; allowed: an integer >= 1");
  }
  if (const auto problem = degrees_problem(dp_replicate, dp_shard, tp, pp)) {
    throw ConfigError(problem->message);
  }
  ParallelDims d{dp_replicate, dp_shard, tp, pp, world_size};
  int64_t known = 1;
  int64_t* rest = nullptr;
  for (int64_t* value : {&d.dp_replicate, &d.dp_shard, &d.tp, &d.pp}) {
    if (*value == -1) {
      rest = value;
    } else {
      known *= *value;
    }
  }
  if (rest != nullptr) {
    if (world_size % known != 0) {
      throw ConfigError(
          "parallelism: the other degrees multiply to " +
          std::to_string(known) + ", which does not divide the world size " +
          std::to_string(world_size) +
          "; allowed: degrees whose product divides the world size");
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
