// A checkpoint saved by pp 2 x tp 2 resumes at tp 1 (one process) and at
// tp 2 x dp_shard 2: TP slices (and FSDP slices within them) are written
// with their global offsets and read back by any other layout, optimizer
// state included, and the resumed runs continue the straight run's losses.
// Ranks as threads over real Gloo.

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "tests/checkpoint/layout_checkpoint.h"
#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::RunLayout;

constexpr int64_t kSaveAt = 2;
constexpr int64_t kSteps = 4;
/// The global batch's rows: every layout below trains on the same ones.
constexpr int64_t kRows = 4;

RunLayout with_rows(RunLayout layout) {
  layout.rows = kRows / layout.dp_shard;
  return layout;
}

TEST(TensorParallelCheckpoint, PipelinedTpResumesAtOtherLayouts) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_tp_reshard";
  fs::remove_all(dump);
  const auto straight = testing::run_layout(with_rows(RunLayout{}), kSteps);

  RunLayout saver = with_rows(RunLayout{});
  saver.pp = 2;
  saver.tp = 2;
  testing::save_layout_at(saver, dump.string(), kSaveAt, &straight);

  RunLayout sharded = RunLayout{};
  sharded.tp = 2;
  sharded.dp_shard = 2;
  for (const RunLayout& layout : {with_rows(RunLayout{}), with_rows(sharded)}) {
    testing::expect_resumes(layout, dump.string(), kSaveAt, kSteps, straight);
  }
}

}  // namespace
}  // namespace baton
