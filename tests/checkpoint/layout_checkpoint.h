#pragma once

// A CheckpointManager for one rank of a layout run (tests/trainer/
// layout_run.h): its CheckpointLayout from the run's degrees and the rank's
// mesh coordinates, over the run's world group (or a group of one).

#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "tests/parallel/test_parts.h"
#include "tests/trainer/layout_run.h"

namespace baton::testing {

inline std::unique_ptr<CheckpointManager> layout_checkpoint(
    const RunLayout& layout,
    LayoutRank& me,
    const std::string& dump,
    const CheckpointConfig& config,
    const std::string& model_config_json = "{}") {
  CheckpointLayout where = CheckpointLayout::of(*me.mesh);
  where.stages_per_rank = layout.stages_per_rank;
  where.schedule = layout.pp > 1 ? layout.schedule : "";
  return std::make_unique<CheckpointManager>(
      config,
      dump,
      me.parts,
      *me.optimizers,
      *me.schedulers,
      /*dataloader=*/nullptr,
      where,
      me.runtime ? me.runtime->world()
                 : dist::ProcessGroup::single("checkpoint"),
      model_config_json);
}

}  // namespace baton::testing
