// Checkpoints do not change with context parallel: one saved at cp 2 x
// dp_shard 2 (fully_shard's slices over dp_shard x cp, 4 ranks) resumes in
// one process and at cp 4, continuing the straight run's losses within
// 1e-5, optimizer state included. Ranks as threads over real Gloo.

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
constexpr int64_t kRows = 4;  // the global batch's

RunLayout layout(int64_t dp_shard, int64_t cp) {
  RunLayout l;
  l.dp_shard = dp_shard;
  l.cp = cp;
  l.rows = kRows / dp_shard;
  return l;
}

TEST(ContextParallelCheckpoint, Cp2TimesDpShard2ResumesInOneProcessAndAtCp4) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_cp_reshard";
  fs::remove_all(dump);
  const auto straight = testing::run_layout(layout(1, 1), kSteps);
  const RunLayout saver = layout(2, 2);
  testing::save_layout_at(saver, dump.string(), kSaveAt, &straight);
  for (const RunLayout& resumed : {layout(1, 1), layout(1, 4)}) {
    testing::expect_resumes(resumed, dump.string(), kSaveAt, kSteps, straight);
  }
}

}  // namespace
}  // namespace baton
