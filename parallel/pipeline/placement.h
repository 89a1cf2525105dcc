#pragma once

#include <cstdint>
#include <vector>

#include "parallel/pipeline/action.h"

namespace baton::pipeline {

/// How stages map to ranks.
enum class PlacementStyle {
  kLoop,  ///< rank = stage mod p (rank r holds r, r+p, r+2p, ...)
  kV,     ///< rank r holds stages r and 2p-1-r (exactly 2 stages per rank)
};

/// Stage -> rank for `pp` ranks with `stages_per_rank` stages each, looped:
/// p=4, 8 stages gives rank 0 stages {0, 4}.
std::vector<int64_t> loop_placement(int64_t pp, int64_t stages_per_rank);

/// Stage -> rank for the V layout (2 stages per rank): p=4 gives rank 0
/// stages {0, 7}.
std::vector<int64_t> v_placement(int64_t pp);

/// Stage -> rank for `style`. Throws ConfigError when V is asked for with a
/// number of stages per rank other than 2.
std::vector<int64_t> make_placement(
    PlacementStyle style, int64_t pp, int64_t stages_per_rank);

/// The stages rank `rank` holds, in increasing order.
std::vector<int64_t> stages_of_rank(
    const std::vector<int64_t>& stage_to_rank, int64_t rank);

/// Stage -> rank read off a schedule's actions (for custom schedules). Throws
/// ScheduleError naming both ranks when a stage appears on two, or a stage
/// in [0, num_stages) appears nowhere.
std::vector<int64_t> placement_from_actions(
    const std::vector<ActionList>& ranks, int64_t num_stages);

}  // namespace baton::pipeline
