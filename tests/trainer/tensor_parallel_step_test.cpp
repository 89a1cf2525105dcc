// Tensor parallel (with sequence parallel) against one process on the same
// global batches, alone and under sharded data parallel and pipelining
// (1F1B, and ZBV, whose split backward runs the TP linears' W apart): after
// three AdamW steps the losses agree within 1e-5 and every whole weight,
// assembled from its TP (and FSDP) slices, within rtol 1e-4. Real Gloo
// between rank threads.

#include <gtest/gtest.h>

#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

using testing::RunLayout;

constexpr int64_t kSteps = 3;

void expect_equals_one_process(const RunLayout& layout) {
  SCOPED_TRACE(layout.str());
  at::set_num_threads(1);
  const auto reference = testing::run_layout(layout.one_process(), kSteps);
  const auto run = testing::run_layout(layout, kSteps);
  EXPECT_TRUE(testing::same_run(run, reference));
}

RunLayout tp(int64_t degree) {
  RunLayout l;
  l.tp = degree;
  return l;
}

TEST(TensorParallel, TwoRanksEqualOneProcess) {
  expect_equals_one_process(tp(2));
}

TEST(TensorParallel, InsideShardedDataParallelEqualsOneProcess) {
  RunLayout l = tp(2);
  l.dp_shard = 2;
  expect_equals_one_process(l);
}

TEST(TensorParallel, RecomputesItsCommunicationUnderActivationCheckpoint) {
  // The recomputation gathers the sequence again inside backward; the
  // op-selective policy keeps the matmuls' outputs and not the gathers.
  for (const auto& [mode, kind] :
       std::vector<std::pair<std::string, std::string>>{
           {"full", "layer"}, {"selective", "op"}}) {
    RunLayout l = tp(2);
    l.ac = mode;
    l.ac_selective = kind;
    expect_equals_one_process(l);
  }
}

TEST(TensorParallel, Bf16EqualsOneProcessInBf16) {
  // The sequence gathers and scatters move bf16 activations (bit for bit
  // as fp16 on Gloo); the weights cast once per step, as without tp.
  for (const int64_t shard : {1, 2}) {
    RunLayout l = tp(2);
    l.dp_shard = shard;
    l.bf16 = true;
    SCOPED_TRACE(l.str());
    at::set_num_threads(1);
    EXPECT_TRUE(testing::same_run(
        testing::run_layout(l, kSteps),
        testing::run_layout(l.one_process(), kSteps),
        2e-2,
        0.0,
        2e-2));
  }
}

TEST(TensorParallel, PipelinedWith1F1BAndZbvEqualsOneProcess) {
  RunLayout l = tp(2);
  l.pp = 2;
  l.schedule = "1F1B";
  expect_equals_one_process(l);
  l.schedule = "ZBVZeroBubble";
  l.stages_per_rank = 2;
  expect_equals_one_process(l);
}

TEST(TensorParallel, EveryScheduleRunsItsStagesUnderTensorParallel) {
  // pp 2 x tp 2 under each of the seven schedules, with the stages per rank
  // and microbatches it takes (DualPipeV's overlapped F and B included).
  pipeline::register_builtin_schedules();
  for (const char* name :
       {"GPipe",
        "1F1B",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV"}) {
    RunLayout l = tp(2);
    l.pp = 2;
    l.schedule = name;
    l.rows = 4;
    l.stages_per_rank =
        std::string(name) == "GPipe" || std::string(name) == "1F1B" ? 1 : 2;
    expect_equals_one_process(l);
  }
}

TEST(TensorParallel, ThreeDimensionsOnEightRanksEqualOneProcess) {
  RunLayout l = tp(2);
  l.pp = 2;
  l.dp_shard = 2;
  expect_equals_one_process(l);
}

}  // namespace
}  // namespace baton
