// A checkpoint saved by ep 2 x pp 2 (4 ranks) resumes at ep 1 (one
// process) and at ep 4 (4 ranks): the experts are written as slices with
// their global offsets (ep's experts, fully_shard's rows within them), read
// back by any other ep degree with their optimizer state, and the routing
// biases the balance moved are saved and restored; the resumed runs
// continue the straight run's losses within 1e-5. Ranks as threads over
// real Gloo.

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
constexpr int64_t kRows = 8;

/// The layout runs' model with DeepSeek-style experts (layout_moe_args),
/// routers spread so no token sits near a tie.
RunLayout moe(int64_t dp_shard, int64_t ep, int64_t pp = 1) {
  RunLayout l;
  l.model = "qwen3_moe";
  // DeepSeek-style: the routing bias moved 0.01 per step (far above the
  // default, so that it changes the routing) is part of what resumes.
  l.args = testing::layout_moe_args(/*deepseek=*/true);
  l.args->moe.route_scale = 1.0;
  l.aux_loss_coeff = 0.01;
  l.bias_update_rate = 0.01;
  l.after_init = testing::spread_routers;
  l.dp_shard = dp_shard;
  l.ep = ep;
  l.pp = pp;
  l.rows = kRows / dp_shard;
  return l;
}

TEST(ExpertParallelCheckpoint, Ep2TimesPp2ResumesAtEp1AndEp4) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_ep_reshard";
  fs::remove_all(dump);
  const auto straight = testing::run_layout(moe(1, 1), kSteps);
  ASSERT_GT(straight.min_margin, 1e-4);
  // The bias moved: the balance ran, and the checkpoint has one to carry.
  ASSERT_GT(
      straight.params.at("layers.1.moe.expert_bias").abs().max().item<double>(),
      0.0);

  const RunLayout saver = moe(2, 2, /*pp=*/2);
  testing::save_layout_at(saver, dump.string(), kSaveAt, &straight);
  for (const RunLayout& layout : {moe(1, 1), moe(4, 4)}) {
    testing::expect_resumes(layout, dump.string(), kSaveAt, kSteps, straight);
  }
}

}  // namespace
}  // namespace baton
