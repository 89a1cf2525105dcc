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
  const auto dims = baton::testing::builtin_dims(
      1, layout.dp_shard, layout.tp, layout.pp, layout.world());
  CheckpointLayout where;
  where.rank = me.rank;
  where.world_size = layout.world();
  where.dp_rank = me.mesh->index("dp");
  where.dp_size = dims.dp();
  where.tp_rank = me.mesh->coord().at("tp");
  where.pp = layout.pp;
  where.stages_per_rank = layout.stages_per_rank;
  where.schedule = layout.pp > 1 ? layout.schedule : "";
  where.dp_shard = layout.dp_shard;
  where.tp = layout.tp;
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
