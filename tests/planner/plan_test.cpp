// The planner's search and cost model against figures worked out by hand on
// the debug model (6 layers) on 2 ranks, its error paths, its cost files,
// and the 405B cluster plan from bench/costs/llama3_405b_h100.json.

#include "planner/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/validation.h"
#include "planner/dry_run.h"
#include "tests/baton_binary.h"
#include "tests/planner/hand_costs.h"

namespace baton {
namespace {

using testing::fresh_dir;
using testing::hand_costs;
using testing::source_path;

JobConfig debug_config() {
  register_builtin_builders();
  return load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
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
  // By prediction alone (near-ties: RanksNearTiesSimplestFirst).
  const PlanResult result = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().tolerance(0.0));
  EXPECT_EQ(result.tied, 1);
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

TEST(Plan, RanksNearTiesSimplestFirst) {
  // The same search by prediction alone and with a 5 % tolerance: the
  // same candidates; those within 5 % of the fastest come first, ordered
  // by plan_simplicity_less and then by prediction; the rest follow by
  // prediction. Built-in schedules only: the tolerance is also the margin
  // a synthesised one must clear.
  const PlanResult strict = plan_layouts(
      debug_config(),
      2,
      hand_costs(),
      PlanOptions().tolerance(0.0).synthesize(0));
  const PlanResult level = plan_layouts(
      debug_config(),
      2,
      hand_costs(),
      PlanOptions().tolerance(0.05).synthesize(0));
  ASSERT_EQ(strict.ranked.size(), level.ranked.size());
  const double fastest = strict.ranked.front().step_s;
  EXPECT_EQ(level.fastest_step_s, fastest);
  EXPECT_EQ(level.tolerance, 0.05);
  int64_t within = 0;
  for (const auto& c : strict.ranked) {
    within += c.step_s <= fastest * 1.05 ? 1 : 0;
  }
  EXPECT_EQ(level.tied, within);
  // The hand costs' ZBV-like schedules lie within 5 % of each other, with
  // 2 and more stages per rank: the test means something only with
  // several levels of simplicity among them.
  ASSERT_GE(level.tied, 3);
  std::set<int64_t> stages;
  for (int64_t k = 0; k < level.tied; ++k) {
    const PlanCandidate& c = level.ranked[k];
    EXPECT_LE(c.step_s, fastest * 1.05);
    stages.insert(c.pp * c.stages_per_rank);
    if (k > 0) {
      const PlanCandidate& before = level.ranked[k - 1];
      EXPECT_FALSE(plan_simplicity_less(c, before)) << k;
      if (!plan_simplicity_less(before, c)) {
        EXPECT_LE(before.step_s, c.step_s) << k;
      }
    }
  }
  EXPECT_GE(stages.size(), 2u);
  // Fewer stages in all ranks first even where a longer pipeline is
  // predicted faster.
  EXPECT_EQ(
      level.ranked.front().pp * level.ranked.front().stages_per_rank,
      *stages.begin());
  EXPECT_GT(level.ranked.front().step_s, fastest);
  for (size_t k = level.tied; k < level.ranked.size(); ++k) {
    EXPECT_GT(level.ranked[k].step_s, fastest * 1.05);
    EXPECT_EQ(level.ranked[k].step_s, strict.ranked[k].step_s);
  }
}

TEST(Plan, SimplicityOrdersStagesScheduleSplitShardingMicrobatches) {
  PlanCandidate a;
  a.pp = 2;
  a.stages_per_rank = 1;
  a.microbatches = 8;
  PlanCandidate b = a;
  EXPECT_FALSE(plan_simplicity_less(a, b));
  EXPECT_FALSE(plan_simplicity_less(b, a));
  b.stages_per_rank = 2;  // 4 stages against 2
  b.microbatches = 1;
  EXPECT_TRUE(plan_simplicity_less(a, b));
  b = a;
  b.synthesized = std::make_shared<pipeline::Schedule>();
  EXPECT_TRUE(plan_simplicity_less(a, b));
  b = a;
  b.splits["tp"] = 2;
  EXPECT_TRUE(plan_simplicity_less(a, b));
  b = a;
  b.dp_shard = 2;
  b.microbatches = 4;
  EXPECT_TRUE(plan_simplicity_less(a, b));
  b = a;
  b.microbatches = 16;
  EXPECT_TRUE(plan_simplicity_less(a, b));
  b = a;
  b.activation_checkpoint = "full";
  b.checkpoint_stages = {0};
  EXPECT_TRUE(plan_simplicity_less(a, b));
  PlanCandidate all = b;
  all.checkpoint_stages.clear();  // every stage: 2
  EXPECT_TRUE(plan_simplicity_less(b, all));
  // No pipeline at all is simplest.
  PlanCandidate dp;
  dp.dp_replicate = 2;
  EXPECT_TRUE(plan_simplicity_less(dp, a));
}

/// The first ranked candidate `pick` accepts.
const PlanCandidate* find_if(
    const PlanResult& result,
    const std::function<bool(const PlanCandidate&)>& pick) {
  for (const auto& c : result.ranked) {
    if (pick(c)) {
      return &c;
    }
  }
  return nullptr;
}

/// The debug config as a candidate's layout sets it (float32 compute and
/// reductions: 4 bytes each).
JobConfig layout_config(const std::vector<std::string>& overrides) {
  register_builtin_builders();
  std::vector<std::string> all = {"training.mixed_precision_param=float32"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return load_job_config(source_path("configs/debug_model.yaml"), all);
}

/// A hand collective of the hand costs over 2 ranks: 1000 s + (n - 1) / n
/// x bytes / 1 GB/s, twice the bytes for an all-reduce.
double hand_collective(double bytes, double factor = 1.0) {
  return 1000.0 + factor * 0.5 * bytes / 1e9;
}

/// The data-parallel sync worked out from a dry run's stored elements:
/// fully_shard over 2 (float32) reduce-scatters the whole gradients, gathers
/// the blocks `block_gathers` times and the root once; with HSDP over 2
/// replicas, all-reduces the shard too. The most of the report's ranks.
double hand_fsdp_sync(
    const DryRunReport& report,
    int64_t block_gathers,
    bool hsdp,
    const std::vector<int64_t>& layers_per_stage) {
  // Each unit (a stage's blocks one by one, its root) reduces and gathers
  // alone: a latency (1000 s) per unit beyond the first of a collective.
  double most = 0.0;
  for (const auto& r : report.ranks) {
    const double n = static_cast<double>(r.parameters);
    double units = 0;
    for (const auto& stage : r.stages) {
      units += static_cast<double>(layers_per_stage.at(stage.stage)) +
               (stage.root_parameters > 0 ? 1 : 0);
    }
    double t = hand_collective(n * 2 * 4) + (units - 1) * 1000.0;
    if (hsdp) {
      t += hand_collective(n * 4, 2.0) + (units - 1) * 1000.0;
    }
    for (const auto& stage : r.stages) {
      const double root = static_cast<double>(stage.root_parameters);
      const double blocks = static_cast<double>(stage.parameters) - root;
      const double block_units =
          static_cast<double>(layers_per_stage.at(stage.stage));
      t += block_gathers *
           (hand_collective(blocks * 2 * 4) + (block_units - 1) * 1000.0);
      if (root > 0) {
        t += hand_collective(root * 2 * 4);
      }
    }
    most = std::max(most, t);
  }
  return most;
}

int64_t max_total(const DryRunReport& report) {
  int64_t most = 0;
  for (const auto& r : report.ranks) {
    most = std::max(most, r.total_bytes);
  }
  return most;
}

TEST(Plan, HsdpOnFourRanksPaysTheReplicasAllReduceOfTheShard) {
  const PlanResult result = plan_layouts(debug_config(), 4, hand_costs());
  const auto hsdp = [&](const std::string& reshard) {
    return find_if(result, [&](const PlanCandidate& c) {
      return c.pp == 1 && c.split("tp") == 1 && c.dp_replicate == 2 &&
             c.dp_shard == 2 && c.fsdp_reshard == reshard;
    });
  };
  const PlanCandidate* never = hsdp("never");
  const PlanCandidate* always = hsdp("always");
  ASSERT_NE(never, nullptr);
  ASSERT_NE(always, nullptr);
  // Plain replicate 4 and shard 4 are there too.
  EXPECT_NE(
      find_if(result, [](const PlanCandidate& c) { return c.dp_shard == 4; }),
      nullptr);
  EXPECT_NE(
      find_if(
          result, [](const PlanCandidate& c) { return c.dp_replicate == 4; }),
      nullptr);
  // Rank 0 stores half of every parameter's rows (ceil): n elements, in 7
  // units (the root: embedding, norm, output; 6 blocks), each reducing and
  // gathering alone (a latency of 1000 s each). It reduce-scatters 2n
  // float32s over its shard pair (7 x 1000 + 0.5 x 8n / 1e9 s), all-reduces
  // its n over its replica pair (7 x 1000 + 2 x 0.5 x 4n / 1e9), and
  // gathers the blocks once kept (never) or twice freed (always) (6 x 1000
  // + ...) and the root once.
  const auto report = dry_run(
      layout_config(
          {"parallelism.data_parallel_replicate_degree=2",
           "parallelism.data_parallel_shard_degree=2"}),
      4,
      DryRunOptions().first_rank_per_pipeline_rank(true));
  const double n = static_cast<double>(report.ranks.at(0).parameters);
  const double root =
      static_cast<double>(report.ranks.at(0).stages.at(0).root_parameters);
  const double by_hand = 7000.0 + 0.5 * 8 * n / 1e9 + 7000.0 + 4 * n / 1e9 +
                         6000.0 + 0.5 * 8 * (n - root) / 1e9 + 1000.0 +
                         0.5 * 8 * root / 1e9;
  EXPECT_NEAR(never->dp_sync_s, by_hand, 1e-9);
  EXPECT_NEAR(never->dp_sync_s, hand_fsdp_sync(report, 1, true, {6}), 1e-9);
  EXPECT_NEAR(
      always->dp_sync_s - never->dp_sync_s,
      6000.0 + 0.5 * 8 * (n - root) / 1e9,
      1e-9);
  EXPECT_EQ(always->compute_s, never->compute_s);
  // Kept, the gathered blocks and their whole gradients stay all the step.
  EXPECT_GT(never->peak_bytes, always->peak_bytes);
}

TEST(Plan, ContextParallelSplitsTheBlocksAndShardsTheWeightsOverCp) {
  // The debug model (dim 256, 6 blocks, no grouped heads) on 4 ranks, a
  // global batch of 32 sequences of 256: 16 a data-parallel rank at dp 2,
  // one microbatch of (16, 256, 256) float32 activations.
  const PlanResult result = plan_layouts(debug_config(), 4, hand_costs());
  const double act = 16.0 * 256 * 256 * 4;
  const auto gather = [](double bytes) { return 1000.0 + 0.5 * bytes / 1e9; };
  const auto at = [&](int64_t cp, int64_t tp, int64_t shard) {
    return find_if(result, [=](const PlanCandidate& c) {
      return c.pp == 1 && c.split("cp") == cp && c.split("tp") == tp &&
             c.dp_shard == shard && c.dp_replicate * shard * cp * tp == 4 &&
             c.fsdp_reshard == "never" && c.activation_checkpoint == "none";
    });
  };
  // cp 2 x dp_shard 2: each block's passes halved (F 16 / 2, B 32 / 2) and
  // one gather of the whole sequence's keys and values each way (twice the
  // activations' width: k and v of 16 heads of 16).
  const PlanCandidate* cp2 = at(2, 1, 2);
  ASSERT_NE(cp2, nullptr);
  EXPECT_NEAR(
      cp2->compute_s,
      6 * (8 + gather(2 * act)) + 6 * (16 + gather(2 * act)),
      1e-9);
  // cp 2 x tp 2 (no data parallel: all 32 sequences, twice the
  // activations): a quarter of each pass; tp's two gathers and two
  // reduce-scatters a pass move the cp shard's activations, cp's gather
  // the keys and values of the tp rank's heads.
  const PlanCandidate* cp2tp2 = at(2, 2, 1);
  ASSERT_NE(cp2tp2, nullptr);
  ASSERT_EQ(cp2tp2->local_batch, 32);
  const double per_pass = 4 * gather(2 * act / 2) + gather(2 * act);
  EXPECT_NEAR(
      cp2tp2->compute_s, 6 * (8 + per_pass) + 6 * (16 + per_pass), 1e-9);
  // fully_shard shards over dp_shard x cp: cp 2 x dp_shard 2 syncs as
  // dp_shard 4 does (the same 4-rank group, the same quarter of the
  // weights), cp 4 too, and cp 2 with 2 replicas as HSDP 2 x 2.
  const PlanCandidate* shard4 = at(1, 1, 4);
  ASSERT_NE(shard4, nullptr);
  EXPECT_NEAR(cp2->dp_sync_s, shard4->dp_sync_s, 1e-9);
  ASSERT_NE(at(4, 1, 1), nullptr);
  EXPECT_NEAR(at(4, 1, 1)->dp_sync_s, shard4->dp_sync_s, 1e-9);
  const PlanCandidate* cp2_replicated = find_if(result, [](const auto& c) {
    return c.pp == 1 && c.split("cp") == 2 && c.split("tp") == 1 &&
           c.dp_replicate == 2 && c.fsdp_reshard == "never" &&
           c.activation_checkpoint == "none";
  });
  const PlanCandidate* hsdp = find_if(result, [](const auto& c) {
    return c.pp == 1 && c.split_ranks() == 1 && c.dp_replicate == 2 &&
           c.dp_shard == 2 && c.fsdp_reshard == "never" &&
           c.activation_checkpoint == "none";
  });
  ASSERT_NE(cp2_replicated, nullptr);
  ASSERT_NE(hsdp, nullptr);
  EXPECT_NEAR(cp2_replicated->dp_sync_s, hsdp->dp_sync_s, 1e-9);
}

TEST(Plan, ExpertParallelBorrowsFromDpShardAndCostsItsAllToAlls) {
  // The debug Qwen3-MoE (dim 256, 6 MoE blocks of 8 experts, top 2) on 4
  // ranks, a global batch of 32 sequences of 256: 8 a data-parallel rank,
  // one microbatch of (8, 256, 256) float32 activations.
  register_builtin_builders();
  const JobConfig moe = load_job_config(
      source_path("configs/debug_moe.yaml"),
      {"training.mixed_precision_param=float32"});
  const PlanResult result = plan_layouts(moe, 4, hand_costs());
  const ModelArgs args = plan_model_args(moe);
  ASSERT_EQ(args.moe.num_experts, 8);
  const auto at = [&](int64_t ep, int64_t shard) {
    return find_if(result, [=](const PlanCandidate& c) {
      return c.pp == 1 && c.split_ranks() == 1 && c.dp_shard == shard &&
             c.dp_replicate * shard == 4 && c.borrowed_degree("ep") == ep &&
             c.fsdp_reshard == "never" && c.activation_checkpoint == "none";
    });
  };
  const PlanCandidate* ep1 = at(1, 4);
  const PlanCandidate* ep2 = at(2, 4);
  const PlanCandidate* ep4 = at(4, 4);
  ASSERT_NE(ep1, nullptr);
  ASSERT_NE(ep2, nullptr);
  ASSERT_NE(ep4, nullptr);
  // ep borrows from dp_shard x cp: none with 4 replicas, none of 8.
  EXPECT_EQ(
      find_if(
          result,
          [](const PlanCandidate& c) {
            return c.borrowed_degree("ep") > 1 && c.shard_ranks() == 1;
          }),
      nullptr);
  // Each block's forward dispatches and combines its 2 rows per token (2 x
  // the activations) by all-to-all, as many again in backward: 4 a block.
  const double act = 8.0 * 256 * 256 * 4;
  const auto all_to_all = [&](int64_t n) {
    return 1000.0 + (n - 1.0) / n * 2.0 * act / 1e9;
  };
  EXPECT_NEAR(ep2->compute_s - ep1->compute_s, 6 * 4 * all_to_all(2), 1e-9);
  EXPECT_NEAR(ep4->compute_s - ep1->compute_s, 6 * 4 * all_to_all(4), 1e-9);
  // fully_shard: each rank stores a quarter of the experts whatever ep is
  // (ep 2: half of them over 2 ranks), but gathers and reduce-scatters them
  // over the ranks holding the same ones: 4 at ep 1, 2 at ep 2 (a
  // collective more per block: 6 reduce-scatters, 6 gathers), none at ep 4.
  const double experts = 8.0 * 3 * 256 * 256 * 6 / 4;  // elements stored
  const double bytes = experts * 4;
  const double over4 = 3.0 / 4 * 4 * bytes / 1e9;
  const double over2 = 1.0 / 2 * 2 * bytes / 1e9;
  EXPECT_NEAR(
      ep2->dp_sync_s - ep1->dp_sync_s, 12 * 1000.0 + 2 * (over2 - over4), 1e-6);
  EXPECT_NEAR(ep4->dp_sync_s - ep1->dp_sync_s, -2 * over4, 1e-6);
  // The overlay runs it; the table and the JSON name the degree.
  EXPECT_NE(
      plan_overlay_yaml(*ep2, "ep").find("  expert_parallel_degree: 2\n"),
      std::string::npos);
  EXPECT_NE(
      format_plan_table(result, hand_costs(), 3).find("dp_shard cp tp ep |"),
      std::string::npos);
  // A dense model searches no ep.
  const PlanResult dense = plan_layouts(debug_config(), 4, hand_costs());
  EXPECT_EQ(
      find_if(
          dense, [](const PlanCandidate& c) { return !c.borrowed.empty(); }),
      nullptr);
}

TEST(Plan, ReshardingAPipelineStageGathersItsBlocksPerMicrobatch) {
  const PlanResult result = plan_layouts(debug_config(), 4, hand_costs());
  const auto staged = [&](const std::string& reshard) {
    return find_if(result, [&](const PlanCandidate& c) {
      return c.pp == 2 && c.dp_shard == 2 && c.dp_replicate == 1 &&
             c.schedule == "1F1B" && c.microbatch_size == 1 && !c.balanced &&
             c.fsdp_reshard == reshard;
    });
  };
  const PlanCandidate* never = staged("never");
  const PlanCandidate* always = staged("always");
  ASSERT_NE(never, nullptr);
  ASSERT_NE(always, nullptr);
  ASSERT_EQ(never->microbatches, 16);
  const auto report = [](const std::string& reshard) {
    return dry_run(
        layout_config(
            {"parallelism.pipeline_parallel_degree=2",
             "parallelism.data_parallel_shard_degree=2",
             "parallelism.pipeline_parallel_schedule=1F1B",
             "parallelism.pipeline_parallel_microbatch_size=1",
             "training.local_batch_size=16",
             "parallelism.fsdp_reshard_after_forward=" + reshard}),
        4);
  };
  // Kept: each stage's blocks gathered once a step. Freed after every
  // forward: 1F1B's m forwards each free them and the stage's next action
  // gathers them again, m + 1 = 17 gathers.
  ASSERT_EQ(never->layers_per_stage, (std::vector<int64_t>{3, 3}));
  EXPECT_NEAR(
      never->dp_sync_s,
      hand_fsdp_sync(report("never"), 1, false, never->layers_per_stage),
      1e-9);
  EXPECT_NEAR(
      always->dp_sync_s,
      hand_fsdp_sync(report("always"), 17, false, always->layers_per_stage),
      1e-9);
  EXPECT_EQ(always->compute_s, never->compute_s);
  EXPECT_EQ(never->peak_bytes, max_total(report("never")));
  EXPECT_EQ(always->peak_bytes, max_total(report("always")));
  EXPECT_GT(never->peak_bytes, always->peak_bytes);
}

/// The 1F1B candidate of pp 2 on 2 ranks, microbatches of 1, even split.
const PlanCandidate* one_f_one_b_pp2(const PlanResult& result) {
  return find_if(result, [](const PlanCandidate& c) {
    return c.pp == 2 && c.schedule == "1F1B" && c.microbatch_size == 1 &&
           !c.balanced;
  });
}

JobConfig pp2_config(const std::vector<std::string>& ac) {
  std::vector<std::string> all = {
      "parallelism.pipeline_parallel_degree=2",
      "parallelism.pipeline_parallel_schedule=1F1B",
      "parallelism.pipeline_parallel_microbatch_size=1",
      "training.local_batch_size=16"};
  all.insert(all.end(), ac.begin(), ac.end());
  return layout_config(all);
}

TEST(Plan, CheckpointsTheFirstStageAloneWhereNoneDoesNotFit) {
  // 1F1B's stage 0 holds 2 microbatches, stage 1 one: under a cap of what
  // checkpointing stage 0 alone peaks at, none does not fit and that does.
  const int64_t none = max_total(dry_run(pp2_config({}), 2));
  const int64_t first = max_total(dry_run(
      pp2_config(
          {"activation_checkpoint.mode=full",
           "activation_checkpoint.stages=[0]"}),
      2));
  ASSERT_LT(first, none);
  const PlanResult result = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().memory_per_rank(first));
  const PlanCandidate* c = one_f_one_b_pp2(result);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->activation_checkpoint, "full");
  EXPECT_EQ(c->checkpoint_stages, (std::vector<int64_t>{0}));
  EXPECT_EQ(c->peak_bytes, first);
  // Stage 0's B recomputes its 3 blocks' forward: F = 3, B = 9 s per
  // microbatch there, F = 3, B = 6 on stage 1. At least stage 0's 16 x 12
  // s of work; less than full on both stages, (m + p - 1) x 12 = 204.
  EXPECT_GE(c->compute_s, 192.0);
  EXPECT_LT(c->compute_s, 204.0);
  EXPECT_EQ(
      result.considered + result.synthesis_wins,
      result.pruned + result.dominated +
          static_cast<int64_t>(result.ranked.size()));
  EXPECT_GT(result.pruned, 0);
}

TEST(Plan, OverlaysOfHsdpAndPerStageCheckpointingRoundTripThroughTheDryRun) {
  const auto dir = fresh_dir("plan_overlays");
  std::filesystem::create_directories(dir);
  const auto dry_run_json =
      [&](const PlanCandidate& c, const std::string& name, int64_t world) {
        const auto overlay = dir / (name + ".yaml");
        std::ofstream(overlay) << plan_overlay_yaml(c, "test");
        const auto out = dir / (name + ".json");
        const auto r = testing::run_command(
            testing::baton_bin() + " train --config " +
            source_path("configs/debug_model.yaml") + " --config " +
            overlay.string() + " --training.mixed_precision_param=float32" +
            " --nproc " + std::to_string(world) + " --dry-run=json > " +
            out.string());
        EXPECT_EQ(r.code, 0) << r.output;
        std::ifstream in(out);
        return nlohmann::json::parse(in);
      };
  const int64_t first = max_total(dry_run(
      pp2_config(
          {"activation_checkpoint.mode=full",
           "activation_checkpoint.stages=[0]"}),
      2));
  const PlanResult capped = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().memory_per_rank(first));
  const PlanCandidate* staged = one_f_one_b_pp2(capped);
  ASSERT_NE(staged, nullptr);
  const auto a = dry_run_json(*staged, "stage0", 2);
  EXPECT_EQ(a["activation_checkpoint"], "full on stages 0");
  EXPECT_GT(a["ranks"][0]["stages"][0]["recompute_bytes"], 0);
  EXPECT_EQ(a["ranks"][1]["stages"][0]["recompute_bytes"], 0);
  EXPECT_EQ(
      std::max(
          a["ranks"][0]["total_bytes"].get<int64_t>(),
          a["ranks"][1]["total_bytes"].get<int64_t>()),
      staged->peak_bytes);

  const PlanResult four = plan_layouts(debug_config(), 4, hand_costs());
  const PlanCandidate* hsdp = find_if(four, [](const PlanCandidate& c) {
    return c.dp_replicate == 2 && c.dp_shard == 2 && c.pp == 1 &&
           c.fsdp_reshard == "always";
  });
  ASSERT_NE(hsdp, nullptr);
  const std::string overlay = plan_overlay_yaml(*hsdp, "test");
  EXPECT_NE(
      overlay.find("fsdp_reshard_after_forward: always"), std::string::npos)
      << overlay;
  const auto b = dry_run_json(*hsdp, "hsdp", 4);
  EXPECT_EQ(b["dp_replicate"], 2);
  EXPECT_EQ(b["dp_shard"], 2);
  EXPECT_EQ(b["ranks"][0]["total_bytes"].get<int64_t>(), hsdp->peak_bytes);

  // A stage the pipeline lacks exits 2 naming the key.
  const auto bad = testing::run_command(
      testing::baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --parallelism.pipeline_parallel_degree=2" +
      " --activation_checkpoint.stages=[0,2] --nproc 2 --dry-run");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(
      bad.output.find("activation_checkpoint.stages: stage 2 is out of range"),
      std::string::npos)
      << bad.output;
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

TEST(Plan, MeasuredDataParallelismReplacesTheModelledBlocksSync) {
  // An all-reduce free by the links; measured, replicate adds 0.5 s per
  // block at 2 ranks of 8 sequences: a dp_replicate 2 candidate's sync is
  // then 6 blocks x 0.5 s (its root's, modelled, still free).
  PlanCosts costs = hand_costs();
  costs.all_reduce.inter_node = LinkCosts{0.0, 1e18};
  const auto pick = [](const PlanResult& r) {
    return find_if(r, [](const PlanCandidate& c) {
      return c.pp == 1 && c.dp_replicate == 2 &&
             c.activation_checkpoint == "none";
    });
  };
  const auto options = PlanOptions().global_batch(16).tolerance(0.0);
  // Each result kept: a candidate points into its result.
  const PlanResult modelled = plan_layouts(debug_config(), 2, costs, options);
  const PlanCandidate* before = pick(modelled);
  ASSERT_NE(before, nullptr);
  EXPECT_NEAR(before->dp_sync_s, 0.0, 1e-9);
  costs.data_parallel = DataParallelCosts{2, 8, {{"replicate", 0.5}}};
  const PlanResult measured = plan_layouts(debug_config(), 2, costs, options);
  const PlanCandidate* after = pick(measured);
  ASSERT_NE(after, nullptr);
  EXPECT_NEAR(after->dp_sync_s, 6 * 0.5, 1e-9);
  EXPECT_NEAR(after->step_s - before->step_s, 3.0, 1e-9);
  // Another batch per rank is modelled as before.
  costs.data_parallel->rows = 4;
  const PlanResult other_rows = plan_layouts(debug_config(), 2, costs, options);
  const PlanCandidate* other = pick(other_rows);
  ASSERT_NE(other, nullptr);
  EXPECT_NEAR(other->dp_sync_s, 0.0, 1e-9);
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
  EXPECT_FALSE(read.data_parallel.has_value());
  // Measured data parallelism round-trips; a mode's figure must be a
  // number.
  PlanCosts with_dp = written;
  with_dp.data_parallel = DataParallelCosts{
      2, 8, {{"replicate", 0.5}, {"fully_shard never", 0.25}}};
  const std::string dp_text = plan_costs_to_json(with_dp);
  const PlanCosts dp_back = load_plan_costs(write_file("dp.json", dp_text));
  ASSERT_TRUE(dp_back.data_parallel.has_value());
  EXPECT_EQ(dp_back.data_parallel->degree, 2);
  EXPECT_EQ(dp_back.data_parallel->rows, 8);
  EXPECT_EQ(dp_back.data_parallel->block_s, with_dp.data_parallel->block_s);
  std::string bad_dp = dp_text;
  bad_dp.replace(bad_dp.find("0.5"), 3, "\"x\"");
  try {
    load_plan_costs(write_file("bad_dp.json", bad_dp));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("data_parallel.block_s.replicate"),
        std::string::npos)
        << e.what();
  }
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

  // The optional posting costs: absent is 0, present round-trips, a bad
  // one names its field.
  EXPECT_EQ(read.microbatches[0].send_s, 0.0);
  EXPECT_EQ(text.find("\"post\""), std::string::npos);
  PlanCosts posted = written;
  posted.microbatches[0].send_s = 0.25;
  posted.microbatches[0].recv_s = 0.125;
  const std::string posted_text = plan_costs_to_json(posted);
  const PlanCosts back =
      load_plan_costs(write_file("posted.json", posted_text));
  EXPECT_EQ(back.microbatches[0].send_s, 0.25);
  EXPECT_EQ(back.microbatches[0].recv_s, 0.125);
  std::string bad_post = posted_text;
  bad_post.replace(bad_post.find("\"send_s\": 0.25"), 14, "\"send_s\": -1.0");
  expect_error(
      write_file("bad_post.json", bad_post), "microbatches[0].post.send_s");

  // The optional spread: absent is 0, present round-trips, a negative one
  // names its field.
  EXPECT_EQ(text.find("\"spread\""), std::string::npos);
  EXPECT_EQ(read.microbatches[0].spread.f, 0.0);
  PlanCosts spread = written;
  spread.microbatches[0].spread = PassCosts{0.25, 0.5, 0.125, 0.0625};
  const std::string spread_text = plan_costs_to_json(spread);
  const PlanCosts spread_back =
      load_plan_costs(write_file("spread.json", spread_text));
  EXPECT_EQ(spread_back.microbatches[0].spread.b, 0.5);
  EXPECT_EQ(spread_back.microbatches[0].spread.w, 0.0625);
  std::string bad_spread = spread_text;
  const std::string spread_f = "\"F\": 0.25";
  bad_spread.replace(
      bad_spread.find(spread_f), spread_f.size(), "\"F\": -0.25");
  expect_error(
      write_file("bad_spread.json", bad_spread), "microbatches[0].spread.F");

  // The optional device: absent is this machine's, present round-trips, a
  // device Baton does not run on names the field.
  EXPECT_EQ(read.device, "");
  EXPECT_EQ(text.find("\"device\""), std::string::npos);
  PlanCosts on_cuda = written;
  on_cuda.device = "cuda";
  const std::string cuda_text = plan_costs_to_json(on_cuda);
  EXPECT_EQ(load_plan_costs(write_file("cuda.json", cuda_text)).device, "cuda");
  std::string bad_device = cuda_text;
  bad_device.replace(
      bad_device.find("\"device\": \"cuda\""), 16, "\"device\": \"tpu\"");
  expect_error(write_file("bad_device.json", bad_device), "device");
}

TEST(Plan, TheCostFilesDeviceSizesAttentionsMemory) {
  // The same layouts from costs for a CPU and for CUDA: on the CPU
  // attention keeps its probabilities, on CUDA a log-sum-exp per row, so
  // every candidate that checkpoints nothing peaks higher on the CPU.
  PlanCosts cpu = hand_costs();
  cpu.device = "cpu";
  PlanCosts cuda = hand_costs();
  cuda.device = "cuda";
  const PlanResult on_cpu = plan_layouts(debug_config(), 2, cpu);
  const PlanResult on_cuda = plan_layouts(debug_config(), 2, cuda);
  const PlanCandidate* a = find(on_cpu, "1F1B", 1, 1);
  const PlanCandidate* b = find(on_cuda, "1F1B", 1, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_GT(a->peak_bytes, b->peak_bytes);
  // The CPU's executor posts receives early (Gloo), CUDA's as lowered
  // (NCCL): with no P2P latency the same time, but for rounding.
  EXPECT_NEAR(a->step_s, b->step_s, 1e-9 * b->step_s);
}

TEST(Plan, PostingEachSendAndRecvLengthensPipelinesOnly) {
  // The hand costs' 1F1B over 2 ranks, 16 microbatches of 1: 153 s. With
  // 1 s to post a SEND and 0.5 s a RECV, rank 0 alone posts 16 sends of
  // activations and 16 receives of gradients beside its 144 s of passes:
  // at least 168 s. Without a pipeline nothing is posted.
  const PlanResult plain = plan_layouts(debug_config(), 2, hand_costs());
  PlanCosts costs = hand_costs();
  costs.microbatches[0].send_s = 1.0;
  costs.microbatches[0].recv_s = 0.5;
  const PlanResult posted = plan_layouts(debug_config(), 2, costs);
  const PlanCandidate* before = find(plain, "1F1B", 1, 1);
  const PlanCandidate* after = find(posted, "1F1B", 1, 1);
  ASSERT_NE(before, nullptr);
  ASSERT_NE(after, nullptr);
  EXPECT_NEAR(before->step_s, 153.0, 1e-6);
  EXPECT_GE(after->step_s, 168.0 - 1e-6);
  EXPECT_LE(after->step_s, 153.0 + 32 * 1.5 + 1e-6);
  const auto dp = [](const PlanCandidate& c) { return c.pp == 1; };
  ASSERT_NE(find_if(plain, dp), nullptr);
  EXPECT_DOUBLE_EQ(find_if(plain, dp)->step_s, find_if(posted, dp)->step_s);
}

/// Whether `a` and `b` have one layout but for their schedule.
bool same_layout(const PlanCandidate& a, const PlanCandidate& b) {
  return a.pp == b.pp && a.dp_replicate == b.dp_replicate &&
         a.dp_shard == b.dp_shard && a.splits == b.splits &&
         a.fsdp_reshard == b.fsdp_reshard &&
         a.stages_per_rank == b.stages_per_rank &&
         a.microbatch_size == b.microbatch_size &&
         a.layers_per_stage == b.layers_per_stage &&
         a.activation_checkpoint == b.activation_checkpoint &&
         a.checkpoint_stages == b.checkpoint_stages;
}

TEST(Plan, TheExpectedMaximumOfNormalsMatchesItsClosedForms) {
  EXPECT_EQ(expected_max_of_normals(1), 0.0);
  EXPECT_NEAR(expected_max_of_normals(2), 1.0 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(expected_max_of_normals(3), 1.5 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(expected_max_of_normals(4), 1.029375, 1e-5);
}

TEST(Plan, VaryingPassesCostTheSlowestReplicaAndPipelineWaits) {
  // Per block and sequence F varies by 0.3 s and B by 0.4 s (standard
  // deviations), I and W by 0.2 s.
  const PlanResult exact = plan_layouts(debug_config(), 2, hand_costs());
  PlanCosts costs = hand_costs();
  costs.microbatches[0].spread = PassCosts{0.3, 0.4, 0.2, 0.2};
  const PlanResult varied = plan_layouts(debug_config(), 2, costs);
  const auto ddp = [](const PlanCandidate& c) {
    return c.pp == 1 && c.dp_replicate == 2;
  };
  const PlanCandidate* before = find_if(exact, ddp);
  const PlanCandidate* after = find_if(varied, ddp);
  ASSERT_NE(before, nullptr);
  ASSERT_NE(after, nullptr);
  // Two replicas of 6 blocks over `rows` sequences each (deviations
  // scaled by rows like the costs): a replica's passes vary by sqrt(6) x
  // rows x sqrt(0.3^2 + 0.4^2) = sqrt(6) x rows x 0.5, and the step waits
  // for the slower, 1 / sqrt(pi) of that above the mean.
  const double rows = static_cast<double>(before->local_batch);
  EXPECT_NEAR(
      after->compute_s - before->compute_s,
      std::sqrt(6.0) * rows * 0.5 / std::sqrt(M_PI),
      1e-6);
  EXPECT_EQ(after->dp_sync_s, before->dp_sync_s);
  // A pipeline's ranks wait for each other: its expected makespan is at
  // least the makespan of the mean costs (153 s for 1F1B), the same for the
  // same costs, and every pipelined candidate pays something.
  const PlanCandidate* plain = find(exact, "1F1B", 1, 1);
  const PlanCandidate* waits = find(varied, "1F1B", 1, 1);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(waits, nullptr);
  EXPECT_NEAR(plain->step_s, 153.0, 1e-6);
  EXPECT_GT(waits->step_s, plain->step_s + 1.0);
  EXPECT_LT(waits->step_s, plain->step_s * 1.2);
  EXPECT_EQ(
      find(plan_layouts(debug_config(), 2, costs), "1F1B", 1, 1)->step_s,
      waits->step_s);
  for (const auto& c : varied.ranked) {
    if (c.pp > 1 && !c.synthesized) {
      const PlanCandidate* same = find_if(exact, [&](const PlanCandidate& e) {
        return same_layout(e, c) && e.schedule == c.schedule &&
               e.balanced == c.balanced;
      });
      if (same != nullptr) {
        EXPECT_GE(c.compute_s, same->compute_s - 1e-9) << c.schedule;
      }
    }
  }
}

TEST(Plan, ASynthesisedScheduleJoinsTheRankingOnlyWhereItBeatsTheBuiltIns) {
  const PlanResult with = plan_layouts(debug_config(), 2, hand_costs());
  const PlanResult without = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().synthesize(0));
  EXPECT_EQ(without.synthesis_layouts, 0);
  EXPECT_EQ(with.synthesis_layouts, 8);
  EXPECT_GE(with.synthesis_wins, 1);
  EXPECT_EQ(with.ranked.size(), without.ranked.size() + with.synthesis_wins);
  int64_t synthesized = 0;
  for (const auto& c : without.ranked) {
    EXPECT_FALSE(c.synthesized);
  }
  for (const auto& c : with.ranked) {
    if (!c.synthesized) {
      continue;
    }
    ++synthesized;
    SCOPED_TRACE(c.synthesized_over);
    EXPECT_EQ(c.schedule, "Synthesized");
    // Faster by more than the tolerance (2 %): the model's accuracy.
    EXPECT_LT(c.step_s, 0.98 * c.synthesized_over_step_s);
    EXPECT_EQ(c.synthesized->microbatches, c.microbatches);
    EXPECT_EQ(c.synthesized->pp, c.pp);
    pipeline::validate_schedule(*c.synthesized);
    // What it beat is the fastest built-in schedule at its layout.
    const PlanCandidate* beaten = find_if(without, [&](const PlanCandidate& b) {
      return same_layout(b, c) && b.schedule == c.synthesized_over;
    });
    ASSERT_NE(beaten, nullptr);
    EXPECT_DOUBLE_EQ(beaten->step_s, c.synthesized_over_step_s);
    // ... of those on its placement.
    for (const auto& b : without.ranked) {
      if (same_layout(b, c) &&
          pipeline::make_schedule(
              b.schedule, b.pp, b.stages_per_rank, b.microbatches)
                  .stage_to_rank == c.synthesized->stage_to_rank) {
        EXPECT_LE(c.synthesized_over_step_s, b.step_s) << b.schedule;
      }
    }
  }
  EXPECT_EQ(synthesized, with.synthesis_wins);
  // A smaller tolerance lets smaller gains in, down to 0.5 %; a larger
  // one keeps more out.
  const PlanResult lenient = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().tolerance(0.0));
  const PlanResult strict = plan_layouts(
      debug_config(), 2, hand_costs(), PlanOptions().tolerance(0.1));
  EXPECT_GE(lenient.synthesis_wins, with.synthesis_wins);
  EXPECT_LE(strict.synthesis_wins, with.synthesis_wins);
  for (const auto& c : lenient.ranked) {
    if (c.synthesized) {
      EXPECT_LT(c.step_s, 0.995 * c.synthesized_over_step_s);
    }
  }
  for (const auto& c : strict.ranked) {
    if (c.synthesized) {
      EXPECT_LT(c.step_s, 0.9 * c.synthesized_over_step_s);
    }
  }
  const auto table = format_plan_table(with, hand_costs(), 100);
  EXPECT_NE(
      table.find(
          "synthesis: a schedule made for the costs of each of "
          "the 8 fastest pipelined layouts; " +
          std::to_string(with.synthesis_wins) + " beat"),
      std::string::npos)
      << table;
  EXPECT_NE(table.find(": Synthesized over "), std::string::npos) << table;
}

TEST(Plan, ASynthesisedPlanTrainsFromItsOverlayAndCsv) {
  PlanResult result = plan_layouts(debug_config(), 2, hand_costs());
  const PlanCandidate* made = find_if(
      result, [](const PlanCandidate& c) { return c.synthesized != nullptr; });
  ASSERT_NE(made, nullptr);
  EXPECT_THROW(plan_overlay_yaml(*made, "no CSV yet"), std::invalid_argument);
  const auto dir = fresh_dir("plan_synthesized");
  std::filesystem::create_directories(dir);
  write_synthesized_schedules(result, dir.string());
  ASSERT_FALSE(made->schedule_csv.empty());
  EXPECT_TRUE(std::filesystem::path(made->schedule_csv).is_absolute());
  EXPECT_EQ(
      pipeline::load_schedule_csv(made->schedule_csv).ranks,
      made->synthesized->ranks);
  const auto json =
      nlohmann::json::parse(plan_result_json(result, hand_costs()));
  bool listed = false;
  for (const auto& c : json["ranked"]) {
    listed = listed || c.value("schedule_csv", "") == made->schedule_csv;
  }
  EXPECT_TRUE(listed);
  const auto overlay = dir / "synthesized.yaml";
  std::ofstream(overlay) << plan_overlay_yaml(*made, "test");
  const std::string base =
      testing::baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") + " --config " +
      overlay.string() + " --training.mixed_precision_param=float32 --nproc 2";
  // The dry run reads the CSV and sizes what the plan did.
  const auto out = dir / "dry_run.json";
  auto r = testing::run_command(base + " --dry-run=json > " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(out);
  const auto report = nlohmann::json::parse(in);
  EXPECT_EQ(
      std::max(
          report["ranks"][0]["total_bytes"].get<int64_t>(),
          report["ranks"][1]["total_bytes"].get<int64_t>()),
      made->peak_bytes);
  // And a step trains with it.
  r = testing::run_command(
      base +
      " --training.steps=1 --training.seq_len=64 --checkpoint.enable=false" +
      " --metrics.log_freq=1 --job.dump_folder=" + (dir / "run").string() +
      " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step 1/1  loss"), std::string::npos) << r.output;
}

TEST(Plan, Llama405bOn512H100sRanksInterleavedAbove1F1B) {
  register_builtin_builders();
  const JobConfig config =
      load_job_config(source_path("configs/llama3_405b.yaml"));
  const PlanCosts costs =
      load_plan_costs(source_path("bench/costs/llama3_405b_h100.json"));
  // Searched up to the layouts compared (pp 8, 2 stages a rank): their
  // figures are the whole search's, which takes 13x as long.
  const PlanResult result = plan_layouts(
      config, 512, costs, PlanOptions().max_pp(8).max_stages_per_rank(2));
  EXPECT_EQ(result.global_batch, 128);
  EXPECT_GT(result.pruned, 0);
  const auto at_888 = [&](const std::string& schedule, int64_t v) {
    for (const auto& c : result.ranked) {
      if (c.pp == 8 && c.split("tp") == 8 && c.dp_shard == 8 &&
          c.schedule == schedule && c.stages_per_rank == v &&
          c.microbatch_size == 1 && !c.balanced && c.fsdp_reshard == "never") {
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
