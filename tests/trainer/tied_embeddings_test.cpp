// A model whose output projection is its token embedding (Llama 3.2, the
// small Qwen3s) in every layout against one process: the pipeline's first
// and last stages each hold the weight, and their gradients are summed
// (parallel/pipeline/tied_weights.h) over two ranks (1F1B, interleaved) or
// on one (the V schedule puts both ends on rank 0), composed with tensor
// parallel (both copies cut by vocabulary alike) and FSDP (sharded alike).
// Ranks are threads over real Gloo. Losses, grad norms (the copy counted
// once) and every weight after three steps equal one process's.

#include <gtest/gtest.h>

#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

using testing::RunLayout;

RunLayout tied(RunLayout layout) {
  ModelArgs args = testing::layout_run_args();
  args.tie_embeddings = true;
  layout.args = args;
  return layout;
}

TEST(TiedEmbeddings, EveryLayoutTrainsAsOneProcess) {
  at::set_num_threads(1);
  const auto one = testing::run_layout(tied(RunLayout{}), 3);
  ASSERT_EQ(one.params.count("output.weight"), 0u);
  ASSERT_EQ(one.params.count("tok_embeddings.weight"), 1u);
  std::vector<RunLayout> layouts;
  for (const auto& [schedule, stages_per_rank] :
       {std::pair{"1F1B", 1},
        std::pair{"Interleaved1F1B", 2},
        std::pair{"ZBVZeroBubble", 2}}) {
    RunLayout l;
    l.pp = 2;
    l.schedule = schedule;
    l.stages_per_rank = stages_per_rank;
    layouts.push_back(l);
  }
  RunLayout pp2_tp2;
  pp2_tp2.pp = 2;
  pp2_tp2.tp = 2;
  layouts.push_back(pp2_tp2);
  RunLayout pp2_fsdp2;
  pp2_fsdp2.pp = 2;
  pp2_fsdp2.dp_shard = 2;
  pp2_fsdp2.rows = 1;  // one microbatch each: GPipe
  pp2_fsdp2.schedule = "GPipe";
  layouts.push_back(pp2_fsdp2);
  RunLayout tp2;
  tp2.tp = 2;
  layouts.push_back(tp2);
  for (const RunLayout& layout : layouts) {
    SCOPED_TRACE(layout.str());
    const auto run = testing::run_layout(tied(layout), 3);
    EXPECT_TRUE(testing::same_run(run, one));
  }
}

}  // namespace
}  // namespace baton
