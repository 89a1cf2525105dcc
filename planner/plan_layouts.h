#pragma once

// The layouts the planner searches (planner/ only): the splits of the
// blocks over the searched parallelisms' axes, pp and dp that divide the
// world, and each layout's candidates (data-parallel modes, schedules,
// microbatches, layer splits).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "models/model_args.h"
#include "planner/plan.h"

namespace baton::plan_detail {

/// A split of the blocks, pp and dp that the world and the model allow.
struct Layout {
  std::map<std::string, int64_t> splits;  // degrees above 1, by axis
  int64_t pp = 1;
  int64_t dp = 1;

  int64_t split_ranks() const {
    int64_t k = 1;
    for (const auto& [axis, degree] : splits) {
      k *= degree;
    }
    return k;
  }
};

/// The layouts the search of `world` ranks covers, and its global batch
/// (options.global_batch, else the base config's local batch times its
/// data-parallel ranks). Throws ConfigError when none divides the world
/// for the model.
std::pair<std::vector<Layout>, int64_t> searched_layouts(
    const JobConfig& base,
    const ModelArgs& args,
    int64_t world,
    const PlanOptions& options);

/// The candidates of one layout of `base`'s model, before memory and
/// time.
void add_candidates(
    const JobConfig& base,
    const Layout& layout,
    int64_t global_batch,
    const ModelArgs& args,
    const MicrobatchCosts& unit,
    const PlanOptions& options,
    std::vector<PlanCandidate>& out);

}  // namespace baton::plan_detail
