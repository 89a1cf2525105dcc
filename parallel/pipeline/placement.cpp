#include "parallel/pipeline/placement.h"

#include <string>

#include "common/error.h"

namespace baton::pipeline {

std::vector<int64_t> loop_placement(int64_t pp, int64_t stages_per_rank) {
  std::vector<int64_t> out(pp * stages_per_rank);
  for (int64_t s = 0; s < pp * stages_per_rank; ++s) {
    out[s] = s % pp;
  }
  return out;
}

std::vector<int64_t> v_placement(int64_t pp) {
  std::vector<int64_t> out(2 * pp);
  for (int64_t s = 0; s < 2 * pp; ++s) {
    out[s] = s < pp ? s : 2 * pp - 1 - s;
  }
  return out;
}

std::vector<int64_t> make_placement(
    PlacementStyle style, int64_t pp, int64_t stages_per_rank) {
  if (style == PlacementStyle::kLoop) {
    return loop_placement(pp, stages_per_rank);
  }
  if (stages_per_rank != 2) {
    throw ConfigError(
        "[schedule] V placement holds exactly 2 stages per rank, got " +
        std::to_string(stages_per_rank));
  }
  return v_placement(pp);
}

std::vector<int64_t> stages_of_rank(
    const std::vector<int64_t>& stage_to_rank, int64_t rank) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < stage_to_rank.size(); ++s) {
    if (stage_to_rank[s] == rank) {
      out.push_back(static_cast<int64_t>(s));
    }
  }
  return out;
}

std::vector<int64_t> placement_from_actions(
    const std::vector<ActionList>& ranks, int64_t num_stages) {
  std::vector<int64_t> out(num_stages, -1);
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const auto& slot = ranks[r][i];
      if (!slot) {
        continue;
      }
      std::vector<int64_t> stages = {slot->stage};
      if (slot->kind == ActionKind::kOverlapFB) {
        stages.push_back(slot->backward_stage);
      }
      for (const int64_t s : stages) {
        if (s < 0 || s >= num_stages) {
          continue;  // validation reports the range
        }
        if (out[s] >= 0 && out[s] != static_cast<int64_t>(r)) {
          throw ScheduleError(
              "[schedule] rank " + std::to_string(r) + " step " +
              std::to_string(i) + " (" + slot->str() + "): stage " +
              std::to_string(s) + " already lives on rank " +
              std::to_string(out[s]) + "; a stage lives on one rank only");
        }
        out[s] = static_cast<int64_t>(r);
      }
    }
  }
  for (int64_t s = 0; s < num_stages; ++s) {
    if (out[s] < 0) {
      throw ScheduleError(
          "[schedule] stage " + std::to_string(s) + " of " +
          std::to_string(num_stages) + " has no actions on any rank");
    }
  }
  return out;
}

}  // namespace baton::pipeline
