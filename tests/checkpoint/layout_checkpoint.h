#pragma once

// A CheckpointManager for one rank of a layout run (tests/trainer/
// layout_run.h): its CheckpointLayout from the run's degrees and the rank's
// mesh coordinates, over the run's world group (or a group of one); a run
// that saves one; and the check that a saved run resumes at another layout.

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

/// Runs `saver` for `save_at` steps and saves its checkpoint into `dump`
/// (fully_shard's slices, the optimizer state, the scheduler); expects its
/// losses to follow `straight`'s within 1e-5 where one is given.
inline void save_layout_at(
    const RunLayout& saver,
    const std::string& dump,
    int64_t save_at,
    const LayoutRunResult* straight = nullptr) {
  SCOPED_TRACE("saved at " + saver.str());
  CheckpointConfig config;
  config.enable = true;
  const auto first =
      run_layout(saver, save_at, nullptr, [&](LayoutRank& me, int64_t last) {
        auto ck = layout_checkpoint(saver, me, dump, config);
        ck->maybe_save({last, 0}, /*last=*/true);
        ck->finish({last, 0});
      });
  ASSERT_EQ(first.losses.size(), static_cast<size_t>(save_at));
  if (straight == nullptr) {
    return;
  }
  for (int64_t s = 0; s < save_at; ++s) {
    EXPECT_NEAR(first.losses[s], straight->losses[s], 1e-5) << "step " << s;
  }
}

/// Resumes the checkpoint that `dump` holds at step `saved` in `layout`
/// through steps [saved, last) and expects `straight` (a run of `last`
/// steps without a break): its losses from `saved` on within 1e-5 and its
/// final weights.
inline void expect_resumes(
    const RunLayout& layout,
    const std::string& dump,
    int64_t saved,
    int64_t last,
    const LayoutRunResult& straight) {
  SCOPED_TRACE("resumed at " + layout.str());
  CheckpointConfig config;
  config.enable = true;
  const auto resumed = run_layout(layout, last, [&](LayoutRank& me) {
    return layout_checkpoint(layout, me, dump, config)->load().step;
  });
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(last - saved));
  for (int64_t s = saved; s < last; ++s) {
    EXPECT_NEAR(resumed.losses[s - saved], straight.losses[s], 1e-5)
        << "step " << s;
  }
  for (const auto& [fqn, p] : straight.params) {
    EXPECT_TRUE(torch::allclose(resumed.params.at(fqn), p, 1e-4, 1e-5)) << fqn;
  }
}

}  // namespace baton::testing
