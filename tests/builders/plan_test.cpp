// The planner's search and cost model against figures worked out by hand on
// the debug model (6 layers) on 2 ranks, its error paths, its cost files,
// and the 405B cluster plan from bench/costs/llama3_405b_h100.json.

#include "builders/plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::fresh_dir;
using testing::source_path;

JobConfig debug_config() {
  register_builtin_builders();
  return load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
}

/// Per block and sequence F = I = W = 1 s and B = 2 s, the embedding and
/// output free, P2P free, every collective 1000 s: only pipelining pays.
PlanCosts hand_costs() {
  PlanCosts costs;
  costs.path = "hand";
  costs.description = "hand";
  MicrobatchCosts m;
  m.rows = 1;
  m.block = PassCosts{1.0, 2.0, 1.0, 1.0};
  costs.microbatches = {m};
  costs.p2p.inter_node = LinkCosts{0.0, 1e18};
  const LinkCosts slow{1000.0, 1e9};
  costs.all_reduce.inter_node = slow;
  costs.all_gather.inter_node = slow;
  costs.reduce_scatter.inter_node = slow;
  return costs;
}

const PlanCandidate* find(
    const PlanResult& result,
    const std::string& schedule,
    int64_t v,
    int64_t microbatch_size,
    bool balanced = false) {
  for (const auto& c : result.ranked) {
    if (c.schedule == schedule && c.stages_per_rank == v &&
        c.microbatch_size == microbatch_size && c.balanced == balanced) {
      return &c;
    }
  }
  return nullptr;
}

TEST(Plan, RanksTheDebugModelOnTwoRanksAsWorkedOutByHand) {
  const PlanResult result = plan_layouts(debug_config(), 2, hand_costs());
  // The global batch: 8 sequences per rank x 2 ranks.
  EXPECT_EQ(result.global_batch, 16);
  EXPECT_GE(result.ranked.size(), 20u);
  EXPECT_GT(result.considered, static_cast<int64_t>(result.ranked.size()));
  // Each pipeline rank runs 3 blocks: F = 3 s, B = 6 s per sequence. 1F1B
  // and GPipe with 16 microbatches of 1 take (m + p - 1)(F + B) = 17 x 9 =
  // 153 s, a bubble of (p - 1) / (m + p - 1) = 1/17.
  const PlanCandidate* one_f_one_b = find(result, "1F1B", 1, 1);
  const PlanCandidate* gpipe = find(result, "GPipe", 1, 1);
  ASSERT_NE(one_f_one_b, nullptr);
  ASSERT_NE(gpipe, nullptr);
  EXPECT_NEAR(one_f_one_b->step_s, 153.0, 1e-6);
  EXPECT_NEAR(gpipe->step_s, 153.0, 1e-6);
  EXPECT_NEAR(one_f_one_b->bubble, 9.0 / 153.0, 1e-9);
  EXPECT_EQ(one_f_one_b->dp_sync_s, 0.0);
  EXPECT_NEAR(one_f_one_b->tokens_per_s, 16.0 * 256 / 153.0, 1e-6);
  // Microbatches of 2: (8 + 1) x 18 = 162 s.
  ASSERT_NE(find(result, "1F1B", 1, 2), nullptr);
  EXPECT_NEAR(find(result, "1F1B", 1, 2)->step_s, 162.0, 1e-6);
  // ZBV with F = I = W fills 1F1B's bubble: between the 144 s of work per
  // rank and 1F1B's 153.
  const PlanCandidate* zbv = find(result, "ZBVZeroBubble", 2, 1);
  ASSERT_NE(zbv, nullptr);
  EXPECT_GE(zbv->step_s, 144.0);
  EXPECT_LT(zbv->step_s, 153.0);
  // Nothing beats the work itself, and the best is a pipeline on both
  // ranks (data parallel and tensor parallel pay 1000 s per collective).
  const PlanCandidate& best = result.ranked.front();
  EXPECT_GE(best.step_s, 144.0);
  EXPECT_LE(best.step_s, zbv->step_s);
  EXPECT_EQ(best.pp, 2);
  EXPECT_EQ(best.activation_checkpoint, "none");
  for (size_t k = 1; k < result.ranked.size(); ++k) {
    EXPECT_LE(result.ranked[k - 1].step_s, result.ranked[k].step_s);
  }
  // A layout with data parallelism pays the all-reduce.
  bool saw_dp = false;
  for (const auto& c : result.ranked) {
    if (c.dp_replicate == 2) {
      saw_dp = true;
      EXPECT_GE(c.dp_sync_s, 1000.0);
    }
  }
  EXPECT_TRUE(saw_dp);
}

TEST(Plan, BalancedSplitsGiveTheOutputStageFewerLayers) {
  PlanCosts costs = hand_costs();
  // The output as dear as two blocks.
  costs.microbatches[0].output = PassCosts{2.0, 4.0, 2.0, 2.0};
  const PlanResult result = plan_layouts(debug_config(), 2, costs);
  const PlanCandidate* balanced = find(result, "1F1B", 1, 1, true);
  ASSERT_NE(balanced, nullptr);
  // 6 layers + 2 units of output over 2 stages: 4 and 2.
  EXPECT_EQ(balanced->layers_per_stage, (std::vector<int64_t>{4, 2}));
  const PlanCandidate* even = find(result, "1F1B", 1, 1, false);
  ASSERT_NE(even, nullptr);
  EXPECT_LT(balanced->step_s, even->step_s);
  EXPECT_EQ(
      split_fqns(balanced->layers_per_stage),
      (std::vector<std::vector<std::string>>{
          {"tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3"},
          {"layers.4", "layers.5", "norm", "output"}}));
}

TEST(Plan, ACapNoPlanFitsNamesTheSmallestPeak) {
  try {
    plan_layouts(
        debug_config(), 2, hand_costs(), PlanOptions().memory_per_rank(1024));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--memory-per-rank"), std::string::npos) << what;
    EXPECT_NE(what.find("no plan fits"), std::string::npos) << what;
    EXPECT_NE(what.find("smallest peak"), std::string::npos) << what;
  }
}

TEST(Plan, TheCostFilesCapNamesItsOrigin) {
  PlanCosts costs = hand_costs();
  costs.memory_per_rank_gib = 1e-6;
  try {
    plan_layouts(debug_config(), 2, costs);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hand: memory_per_rank_gib"), std::string::npos)
        << what;
    EXPECT_NE(what.find("smallest peak"), std::string::npos) << what;
  }
}

TEST(Plan, AWorldNoLayoutDividesIsAConfigError) {
  // 7 ranks: tp 7 does not divide 16 heads, pp 7 exceeds 6 layers, dp 7
  // does not divide 16 sequences.
  try {
    plan_layouts(
        debug_config(), 7, hand_costs(), PlanOptions().global_batch(16));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--nproc 7"), std::string::npos) << what;
    EXPECT_NE(what.find("no layout"), std::string::npos) << what;
  }
}

std::string write_file(const std::string& name, const std::string& text) {
  const auto dir = fresh_dir("plan_costs");
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(Plan, CostFilesRoundTripAndBadOnesNameTheField) {
  const PlanCosts written = hand_costs();
  const std::string path = write_file("good.json", plan_costs_to_json(written));
  const PlanCosts read = load_plan_costs(path);
  EXPECT_EQ(read.microbatches.size(), 1u);
  EXPECT_EQ(read.microbatches[0].block.b, 2.0);
  EXPECT_EQ(read.all_reduce.inter_node.latency_s, 1000.0);
  EXPECT_FALSE(read.memory_per_rank_gib.has_value());

  const auto expect_error = [](const std::string& file,
                               const std::string& field) {
    try {
      load_plan_costs(file);
      FAIL() << "expected a ConfigError for " << field;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      EXPECT_NE(what.find(field), std::string::npos) << what;
    }
  };
  std::string text = plan_costs_to_json(written);
  const std::string no_p2p = text.substr(0, text.find("\"p2p\"")) +
                             text.substr(text.find("\"reduce_scatter\""));
  expect_error(write_file("no_p2p.json", no_p2p), "p2p");
  std::string bad_f = text;
  bad_f.replace(bad_f.find("\"F\": 1.0"), 8, "\"F\": \"x\"");
  expect_error(write_file("bad_f.json", bad_f), "microbatches[0].block.F");
  expect_error(write_file("not_json.json", "{"), "not JSON");
}

TEST(Plan, Llama405bOn512H100sRanksInterleavedAbove1F1B) {
  register_builtin_builders();
  const JobConfig config =
      load_job_config(source_path("configs/llama3_405b.yaml"));
  const PlanCosts costs =
      load_plan_costs(source_path("bench/costs/llama3_405b_h100.json"));
  const PlanResult result = plan_layouts(config, 512, costs);
  EXPECT_EQ(result.global_batch, 128);
  EXPECT_GT(result.pruned, 0);
  const auto at_888 = [&](const std::string& schedule, int64_t v) {
    for (const auto& c : result.ranked) {
      if (c.pp == 8 && c.tp == 8 && c.dp_shard == 8 && c.schedule == schedule &&
          c.stages_per_rank == v && c.microbatch_size == 1 && !c.balanced) {
        return &c;
      }
    }
    return static_cast<const PlanCandidate*>(nullptr);
  };
  const PlanCandidate* interleaved = at_888("Interleaved1F1B", 2);
  const PlanCandidate* one_f_one_b = at_888("1F1B", 1);
  ASSERT_NE(interleaved, nullptr);
  ASSERT_NE(one_f_one_b, nullptr);
  EXPECT_LE(interleaved->peak_bytes, int64_t{80} << 30);
  EXPECT_GT(interleaved->tokens_per_s, one_f_one_b->tokens_per_s);
  std::cout << "405B at FSDP 8 x TP 8 x PP 8, microbatches of 1: "
            << "Interleaved1F1B v2 " << interleaved->tokens_per_s_per_rank
            << " tokens/s/GPU, 1F1B " << one_f_one_b->tokens_per_s_per_rank
            << ", ratio "
            << interleaved->tokens_per_s / one_f_one_b->tokens_per_s
            << " (torchtitan: 128 / 100)\n";
}

}  // namespace
}  // namespace baton
