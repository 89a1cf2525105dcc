// The plan's profile step: what it measures on one rank and on two rank
// threads over real Gloo, the fit of its links, the microbatch sizes it
// times, and the optimizer term its costs add to a plan. No figure here is
// compared with a time: what a pass takes is the benchmark's business
// (bench/plan_runs.py); these check what is measured and how it is used.

#include "planner/plan_profile.h"

#include <gtest/gtest.h>

#include <cmath>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "planner/dry_run.h"
#include "tests/baton_binary.h"
#include "tests/parallel/rank_threads.h"

namespace baton {
namespace {

using testing::fresh_dir;
using testing::source_path;

/// The debug model cut short (2 layers, 32 tokens) so a profile is quick.
JobConfig tiny_config() {
  register_builtin_builders();
  JobConfig config = load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32", "training.seq_len=32"});
  return config;
}

ProfileOptions quick(std::vector<int64_t> rows) {
  return ProfileOptions()
      .rows(std::move(rows))
      .repeats(1)
      .warmup(0)
      .pipeline_runs(1)
      .comm_bytes({1 << 10, 1 << 14});
}

void expect_measured(const PassCosts& c, const std::string& what) {
  for (const double t : {c.f, c.b, c.i, c.w}) {
    EXPECT_GT(t, 0.0) << what;
    EXPECT_LT(t, 60.0) << what;
  }
}

TEST(PlanProfile, OneRankTimesEveryPieceAtEachSizeAndLeavesLinksFree) {
  const JobConfig config = tiny_config();
  const PlanCosts costs = profile_plan_costs(config, nullptr, quick({1, 2}));
  // One run of each: nothing to say how much a pass varies.
  EXPECT_EQ(costs.microbatches[0].spread.b, 0.0);
  // Three: the block's passes vary from run to run (one pass's deviation).
  const PlanCosts three =
      profile_plan_costs(config, nullptr, quick({1}).repeats(3));
  const PassCosts& v = three.microbatches[0].spread;
  EXPECT_GT(v.f + v.b + v.i + v.w, 0.0);
  EXPECT_GE(std::min({v.f, v.b, v.i, v.w}), 0.0);
  ASSERT_EQ(costs.microbatches.size(), 2u);
  EXPECT_EQ(costs.microbatches[0].rows, 1);
  EXPECT_EQ(costs.microbatches[1].rows, 2);
  for (const auto& m : costs.microbatches) {
    const std::string at = "rows " + std::to_string(m.rows);
    expect_measured(m.block, "block at " + at);
    // The embedding is a lookup: its input-gradient pass does its weight's
    // gradient, and no Linear leaves work for W.
    EXPECT_GT(m.embedding.f, 0.0) << at;
    EXPECT_GT(m.embedding.b, 0.0) << at;
    EXPECT_GE(m.embedding.w, 0.0) << at;
    expect_measured(m.output, "output at " + at);
  }
  EXPECT_GT(costs.optimizer_s_per_parameter, 0.0);
  EXPECT_EQ(costs.compute_dtype, "float32");
  EXPECT_EQ(costs.device, "cpu");
  EXPECT_NE(
      costs.obtained.find("communication not measured"), std::string::npos)
      << costs.obtained;
  EXPECT_EQ(costs.p2p.inter_node.latency_s, 0.0);

  // What it writes is a cost file the planner reads back, the new fields
  // included.
  const auto dir = fresh_dir("plan_profile_one");
  std::filesystem::create_directories(dir);
  const auto path = (dir / "costs.json").string();
  std::ofstream(path) << plan_costs_to_json(costs);
  const PlanCosts back = load_plan_costs(path);
  EXPECT_EQ(back.microbatches.size(), 2u);
  EXPECT_DOUBLE_EQ(back.microbatches[1].block.i, costs.microbatches[1].block.i);
  EXPECT_DOUBLE_EQ(
      back.optimizer_s_per_parameter, costs.optimizer_s_per_parameter);
  EXPECT_EQ(back.compute_dtype, "float32");
  EXPECT_EQ(back.device, "cpu");
}

TEST(PlanProfile, TwoRankThreadsAgreeOnTheCostsAndMeasureTheLinks) {
  const JobConfig config = tiny_config();
  std::vector<PlanCosts> got(2);
  const auto errors =
      testing::run_rank_threads(2, [&](int64_t rank, dist::Runtime& runtime) {
        got[rank] = profile_plan_costs(
            config,
            &runtime,
            quick({1})
                .splits({{"tensor_parallel", {{2, {1, 2}}}}})
                .data_parallel_rows(1));
      });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  // One mean over the ranks, the same on both.
  EXPECT_EQ(plan_costs_to_json(got[0]), plan_costs_to_json(got[1]));
  const PlanCosts& costs = got[0];
  expect_measured(costs.microbatches.at(0).block, "block");
  for (const CommCosts* c :
       {&costs.p2p,
        &costs.all_reduce,
        &costs.all_gather,
        &costs.reduce_scatter}) {
    EXPECT_GE(c->inter_node.latency_s, 0.0);
    EXPECT_GT(c->inter_node.bandwidth, 0.0);
    EXPECT_LT(c->inter_node.bandwidth, 1e15);
  }
  EXPECT_NE(costs.obtained.find("over gloo"), std::string::npos)
      << costs.obtained;
  // Every rank times compute, so the block's passes come from the pipeline
  // executor running both schedules (F and B from one, I and W from the
  // other: all four measured above).
  EXPECT_NE(
      costs.obtained.find(
          "the block's passes as the pipeline executor runs them in "
          "Interleaved1F1B and InterleavedZeroBubble over 2 ranks"),
      std::string::npos)
      << costs.obtained;
  // How much the block's passes varied over the run's 4 microbatches:
  // never negative, some above 0.
  const PassCosts& spread = costs.microbatches.at(0).spread;
  for (const double v : {spread.f, spread.b, spread.i, spread.w}) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 60.0);
  }
  EXPECT_GT(spread.f + spread.b + spread.i + spread.w, 0.0);
  // And its P2P's posting, on the rank that posts.
  EXPECT_GT(costs.microbatches.at(0).send_s, 0.0);
  EXPECT_GT(costs.microbatches.at(0).recv_s, 0.0);
  EXPECT_LT(costs.microbatches.at(0).send_s, 60.0);
  // Data parallelism over the two ranks, each mode timed with its own
  // appliers against the chunk alone, and said so.
  ASSERT_TRUE(costs.data_parallel.has_value());
  EXPECT_EQ(costs.data_parallel->degree, 2);
  EXPECT_EQ(costs.data_parallel->rows, 1);
  for (const char* mode :
       {"replicate", "fully_shard always", "fully_shard never"}) {
    ASSERT_EQ(costs.data_parallel->block_s.count(mode), 1u) << mode;
    EXPECT_TRUE(std::isfinite(costs.data_parallel->block_s.at(mode))) << mode;
  }
  EXPECT_NE(
      costs.obtained.find("data parallelism over the 2 ranks"),
      std::string::npos)
      << costs.obtained;
  // The pieces cut over the two ranks by the tensor_parallel step.
  ASSERT_EQ(costs.split_costs.count("tensor_parallel"), 1u);
  ASSERT_EQ(costs.split_costs.at("tensor_parallel").count(2), 1u);
  const auto& tp = costs.split_costs.at("tensor_parallel").at(2);
  ASSERT_EQ(tp.size(), 2u);
  EXPECT_EQ(tp[1].rows, 2);
  expect_measured(tp[0].block, "tp block");
  expect_measured(tp[1].output, "tp output");
  EXPECT_NE(
      costs.obtained.find("tensor_parallel 2 (1, 2 sequences)"),
      std::string::npos)
      << costs.obtained;
  const auto dir = fresh_dir("plan_profile_two");
  std::filesystem::create_directories(dir);
  const auto path = (dir / "costs.json").string();
  std::ofstream(path) << plan_costs_to_json(costs);
  EXPECT_EQ(
      plan_costs_to_json(load_plan_costs(path)), plan_costs_to_json(costs));
}

// With two sizes, P2P comes from the pipeline runs' own messages: the ranks
// (threads of one process: one clock) put their SENDs, RECVs and the waits
// of the computes that needed them on one time line, and the link is
// fitted to what a message took from the later post to its data usable.
TEST(PlanProfile, TwoSizesFitP2PFromThePipelinesOwnMessages) {
  const JobConfig config = tiny_config();
  std::vector<PlanCosts> got(2);
  const auto errors =
      testing::run_rank_threads(2, [&](int64_t rank, dist::Runtime& runtime) {
        got[rank] = profile_plan_costs(config, &runtime, quick({1, 2}));
      });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  EXPECT_EQ(plan_costs_to_json(got[0]), plan_costs_to_json(got[1]));
  const LinkCosts& p2p = got[0].p2p.inter_node;
  EXPECT_GE(p2p.latency_s, 0.0);
  EXPECT_GT(p2p.bandwidth, 0.0);
  EXPECT_LT(p2p.bandwidth, 1e15);
  // A message takes at least a microsecond and less than a minute: the
  // clocks were one.
  const double bytes = 32.0 * 256 * 4;
  EXPECT_GT(p2p.latency_s + bytes / p2p.bandwidth, 1e-6);
  EXPECT_LT(p2p.latency_s + bytes / p2p.bandwidth, 60.0);
  EXPECT_NE(
      got[0].obtained.find("P2P from the pipeline runs' own messages"),
      std::string::npos)
      << got[0].obtained;
}

TEST(PlanProfile, MeasuredTensorParallelCostsReplaceTheModelledOnes) {
  register_builtin_builders();
  const JobConfig config = load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
  PlanCosts costs = load_plan_costs(source_path("bench/costs/debug_hand.json"));
  const auto tp_candidate = [](const PlanResult& r) {
    for (const auto& c : r.ranked) {
      if (c.split("tp") == 2) {
        return c;
      }
    }
    ADD_FAILURE() << "no tp 2 candidate";
    return PlanCandidate();
  };
  // Modelled: 4 collectives of 1000 s per block forward.
  EXPECT_GT(tp_candidate(plan_layouts(config, 2, costs)).step_s, 24000.0);
  // Measured: per sequence and block F = 0.5 s, B = 1 s on one tp rank,
  // collectives inside. tp 2 runs the global 16 sequences in one
  // micro-step: 6 blocks x 16 x (0.5 + 1) = 144 s.
  MicrobatchCosts m;
  m.rows = 1;
  m.block = PassCosts{0.5, 1.0, 0.5, 0.5};
  costs.split_costs["tensor_parallel"][2] = {m};
  const PlanCandidate c = tp_candidate(plan_layouts(config, 2, costs));
  EXPECT_NEAR(c.compute_s, 144.0, 1e-9);
  EXPECT_NEAR(c.step_s, 144.0, 1e-9);
}

TEST(PlanProfile, WithoutPipelineRunsOrWithOneComputeRankTheBlockIsTimedAlone) {
  const JobConfig config = tiny_config();
  for (const auto& options :
       {quick({1, 2}).pipeline_runs(0), quick({1}).compute_ranks(1)}) {
    std::vector<PlanCosts> got(2);
    const auto errors =
        testing::run_rank_threads(2, [&](int64_t rank, dist::Runtime& runtime) {
          got[rank] = profile_plan_costs(config, &runtime, options);
        });
    ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
    for (const auto& m : got[0].microbatches) {
      expect_measured(m.block, "block at rows " + std::to_string(m.rows));
    }
    EXPECT_EQ(got[0].obtained.find("pipeline executor"), std::string::npos)
        << got[0].obtained;
  }
}

TEST(PlanProfile, AWorldLargerThanTheComputeRanksTimesOnTheFirstOnly) {
  const JobConfig config = tiny_config();
  std::vector<PlanCosts> got(2);
  const auto errors =
      testing::run_rank_threads(2, [&](int64_t rank, dist::Runtime& runtime) {
        got[rank] =
            profile_plan_costs(config, &runtime, quick({1}).compute_ranks(1));
      });
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << errors[1];
  EXPECT_EQ(plan_costs_to_json(got[0]), plan_costs_to_json(got[1]));
  // Rank 1 timed nothing, and its zeros are not in the mean.
  expect_measured(got[0].microbatches.at(0).block, "block");
  EXPECT_NE(got[0].obtained.find("(1 timing compute)"), std::string::npos)
      << got[0].obtained;
}

TEST(PlanProfile, FitsLatencyAndBandwidthExactlyOnALine) {
  // 20 us + bytes / 2 GB/s.
  std::vector<std::pair<double, double>> points;
  for (const double x : {1e3, 1e5, 1e6, 1e7}) {
    points.push_back({x, 20e-6 + x / 2e9});
  }
  const LinkCosts link = fit_link_costs(points);
  EXPECT_NEAR(link.latency_s, 20e-6, 1e-12);
  EXPECT_NEAR(link.bandwidth, 2e9, 1.0);
  // Noise that makes the line fall: the largest point's rate, no latency.
  const LinkCosts noisy = fit_link_costs({{1e3, 5e-3}, {1e6, 1e-3}});
  EXPECT_EQ(noisy.latency_s, 0.0);
  EXPECT_NEAR(noisy.bandwidth, 1e6 / 1e-3, 1e-3);
}

TEST(PlanProfile, TimesTheMicrobatchSizesTheSearchCanChoose) {
  register_builtin_builders();
  const JobConfig config = load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
  // 2 ranks, a global batch of 16: dp 2 runs local batches of 8 in one
  // micro-step (tp 2 too: dp 1, 16); pp 2 cuts 16 into 1, 2, 4, 8 or 16.
  EXPECT_EQ(
      plan_microbatch_rows(config, 2), (std::vector<int64_t>{1, 2, 4, 8, 16}));
  // At most 4 microbatches per pipeline: 4, 8 and 16, and dp's 8.
  EXPECT_EQ(
      plan_microbatch_rows(config, 2, PlanOptions().max_microbatches(4)),
      (std::vector<int64_t>{4, 8, 16}));
  EXPECT_THROW(
      plan_microbatch_rows(config, 7, PlanOptions().global_batch(16)),
      ConfigError);
}

TEST(PlanProfile, TheOptimizerTermIsTheMostLoadedRanksParametersTimesItsRate) {
  register_builtin_builders();
  const JobConfig config = load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
  PlanCosts costs = load_plan_costs(source_path("bench/costs/debug_hand.json"));
  // Built-in schedules only: whether a synthesised one clears its margin
  // depends on the whole step.
  const auto options = PlanOptions().synthesize(0);
  const PlanResult without = plan_layouts(config, 2, costs, options);
  costs.optimizer_s_per_parameter = 1e-6;
  const PlanResult with = plan_layouts(config, 2, costs, options);
  ASSERT_EQ(without.ranked.size(), with.ranked.size());
  int64_t checked = 0;
  for (const auto& c : with.ranked) {
    if (c.pp != 2 || c.schedule != "1F1B" || c.microbatch_size != 1 ||
        c.balanced) {
      continue;
    }
    // 1F1B over 3 + 3 layers: stage 0 holds the embedding, stage 1 the
    // norm and output; the larger of the two is the most loaded rank.
    JobConfig one = config;
    one.parallelism.pipeline_parallel_degree = 2;
    one.training.local_batch_size = 16;
    const DryRunReport report = dry_run(one, 2);
    int64_t most = 0;
    for (const auto& r : report.ranks) {
      most = std::max(most, r.parameters);
    }
    EXPECT_NEAR(c.optimizer_s, static_cast<double>(most) * 1e-6, 1e-9);
    EXPECT_NEAR(c.step_s, c.compute_s + c.dp_sync_s + c.optimizer_s, 1e-9);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
  for (const auto& c : without.ranked) {
    EXPECT_EQ(c.optimizer_s, 0.0);
  }
}

}  // namespace
}  // namespace baton
