// A tied model's checkpoint: saved by pp 2 x tp 2, whose last stage holds a
// copy of the first stage's embedding, it holds the weight once (the copy
// is not written), and it resumes at one process and at pp 2 under the V
// schedule (both copies on rank 0, each loading the one weight and its
// optimizer state), continuing the straight run's losses and weights.
// Ranks as threads over real Gloo.

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "tests/checkpoint/layout_checkpoint.h"
#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::LayoutRank;
using testing::RunLayout;

constexpr int64_t kSaveAt = 2;
constexpr int64_t kSteps = 4;

RunLayout tied(RunLayout layout) {
  ModelArgs args = testing::layout_run_args();
  args.tie_embeddings = true;
  layout.args = args;
  layout.rows = 4 / layout.dp_shard;
  return layout;
}

std::unique_ptr<CheckpointManager> checkpoint_of(
    const RunLayout& layout, LayoutRank& me, const fs::path& dump) {
  CheckpointConfig config;
  config.enable = true;
  return testing::layout_checkpoint(layout, me, dump.string(), config);
}

TEST(TiedCheckpoint, PipelinedTiedModelResumesAtOtherLayouts) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_tied";
  fs::remove_all(dump);
  const auto straight = testing::run_layout(tied(RunLayout{}), kSteps);

  RunLayout saver;
  saver.pp = 2;
  saver.tp = 2;
  saver = tied(saver);
  testing::run_layout(
      saver, kSaveAt, nullptr, [&](LayoutRank& me, int64_t last) {
        auto ck = checkpoint_of(saver, me, dump);
        ck->maybe_save({last, 0}, /*last=*/true);
        ck->finish({last, 0});
      });
  // The weight once: its two vocabulary slices, from the first stage.
  int64_t slices = 0;
  for (const auto& file : fs::recursive_directory_iterator(dump)) {
    if (file.path().extension() != ".safetensors") {
      continue;
    }
    const SafetensorsReader reader(file.path().string());
    for (const auto& e : reader.entries()) {
      slices += e.name == "tok_embeddings.weight";
    }
  }
  EXPECT_EQ(slices, 2);

  RunLayout zbv;
  zbv.pp = 2;
  zbv.schedule = "ZBVZeroBubble";
  zbv.stages_per_rank = 2;
  for (const RunLayout& layout : {tied(RunLayout{}), tied(zbv)}) {
    testing::expect_resumes(layout, dump.string(), kSaveAt, kSteps, straight);
  }
}

}  // namespace
}  // namespace baton
