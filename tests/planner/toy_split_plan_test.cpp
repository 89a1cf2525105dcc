// A parallelism registered from this test alone whose axis splits every
// block (as tensor parallel's does), searched by the planner through its
// PlanSearch: its degrees join the layouts, its modelled collectives or its
// measured costs time the blocks, its key is in the overlay, and the
// profile is asked to measure it.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "builders/builder_registry.h"
#include "parallel/parallelism.h"
#include "planner/dry_run.h"
#include "planner/plan.h"
#include "tests/baton_binary.h"
#include "tests/planner/hand_costs.h"

namespace baton {
namespace {

using testing::hand_costs;
using testing::source_path;

constexpr const char* kSplit = "ts";

/// "toy_split": axis ts (inside the data axes), its degree at
/// toy_split.degree, searched up to 4; it accepts even degrees only.
/// Unmeasured, a block's forward all-gathers and reduce-scatters its
/// activations once each (and its backward again).
void register_toy_split() {
  register_builtin_builders();
  static std::once_flag once;
  std::call_once(once, [] {
    Parallelism p;
    p.name = "toy_split";
    p.axis = MeshAxisSpec{kSplit, 600, "toy_split.degree", {}};
    p.section = "toy_split";
    p.fields = {
        {"degree", int64_t{1}, FieldSpec("toy split ranks").mesh_degree()}};
    p.check = [](const JobConfig&,
                 const ParallelDims& dims,
                 const ModelArgs&) -> std::optional<ConfigProblem> {
      if (dims.degree(kSplit) % 2 != 0 && dims.degree(kSplit) != 1) {
        return ConfigProblem{"toy_split.degree", "toy_split.degree: odd"};
      }
      return std::nullopt;
    };
    p.hidden_shards = [](const ParallelDims& dims) {
      return dims.degree(kSplit);
    };
    p.sequence_shards = [](const ParallelDims& dims) {
      return dims.degree(kSplit);
    };
    p.plan = PlanSearch{4, 1, 1, {}};
    register_parallelism(std::move(p));
  });
}

JobConfig debug_config() {
  register_toy_split();
  return load_job_config(
      source_path("configs/debug_model.yaml"),
      {"training.mixed_precision_param=float32"});
}

/// The hand costs with every collective a latency of `collective_s` alone.
PlanCosts costs_with(double collective_s) {
  return hand_costs(LinkCosts{collective_s, 1e18});
}

/// The unpipelined candidate of `result` with dp_replicate `replicate`
/// and ts `ts`, or null.
const PlanCandidate* unpipelined(
    const PlanResult& result, int64_t replicate, int64_t ts) {
  for (const auto& c : result.ranked) {
    if (c.pp == 1 && c.dp_shard == 1 && c.dp_replicate == replicate &&
        c.split(kSplit) == ts && c.split("tp") == 1 &&
        c.activation_checkpoint == "none") {
      return &c;
    }
  }
  return nullptr;
}

TEST(ToySplit, ThePlannerSearchesItsDegreesAndModelsItsCollectives) {
  const JobConfig config = debug_config();
  const int64_t layers = plan_model_args(config).n_layers;
  // 4 ranks, 4 sequences: ts 2 x dp 2 and ts 4 beside dp 4; never ts 3.
  const double latency = 0.01;
  const PlanResult result = plan_layouts(
      config,
      4,
      costs_with(latency),
      PlanOptions().global_batch(4).tolerance(0.0).synthesize(0));
  std::set<int64_t> degrees;
  for (const auto& c : result.ranked) {
    degrees.insert(c.split(kSplit));
  }
  EXPECT_EQ(degrees, (std::set<int64_t>{1, 2, 4}));

  // dp 4 runs 1 sequence a rank; ts 2 x dp 2 runs 2 sequences over 2
  // ranks: the same compute, plus per block one all-gather and one
  // reduce-scatter in forward and again in backward (the all-reduce of the
  // gradients aside, which both pay).
  const PlanCandidate* dp4 = unpipelined(result, 4, 1);
  const PlanCandidate* ts2 = unpipelined(result, 2, 2);
  ASSERT_NE(dp4, nullptr);
  ASSERT_NE(ts2, nullptr);
  EXPECT_NEAR(ts2->compute_s - dp4->compute_s, layers * 2 * 2 * latency, 1e-9);
  // Its degree under its own section, and in the table and the JSON.
  EXPECT_NE(
      plan_overlay_yaml(*ts2, "test").find("toy_split:\n  degree: 2\n"),
      std::string::npos);
  EXPECT_NE(
      format_plan_table(result, costs_with(latency), 3)
          .find("pp dp_rep dp_shard"),
      std::string::npos);
  EXPECT_NE(
      plan_result_json(result, costs_with(latency)).find("\"ts\": 2"),
      std::string::npos);
}

TEST(ToySplit, MeasuredCostsReplaceTheModelAndTheProfileIsAskedForThem) {
  const JobConfig config = debug_config();
  const int64_t layers = plan_model_args(config).n_layers;
  PlanCosts costs = costs_with(0.01);
  // Measured at ts 2: a block's passes 0.25 s per sequence, collectives in.
  MicrobatchCosts measured;
  measured.rows = 1;
  measured.block = PassCosts{0.25, 0.25, 0.25, 0.25};
  costs.split_costs["toy_split"][2] = {measured};
  // Through a cost file (under the parallelism's name) and back.
  const auto path =
      std::filesystem::path(::testing::TempDir()) / "toy_split_costs.json";
  std::ofstream(path) << plan_costs_to_json(costs);
  const PlanCosts read = load_plan_costs(path.string());
  ASSERT_EQ(read.split_costs.count("toy_split"), 1u);
  ASSERT_EQ(read.split_costs.at("toy_split").count(2), 1u);
  const PlanResult result = plan_layouts(
      config,
      2,
      read,
      PlanOptions().global_batch(2).tolerance(0.0).synthesize(0));
  // 2 sequences on one ts group: F + B of each block at 2 x 0.25 s, no
  // modelled collective.
  const PlanCandidate* ts2 = unpipelined(result, 1, 2);
  ASSERT_NE(ts2, nullptr);
  EXPECT_NEAR(ts2->compute_s, layers * (0.5 + 0.5), 1e-9);

  // The profile measures ts 2 at the microbatch sizes of its layouts.
  const SplitRows rows =
      plan_split_rows(config, 2, PlanOptions().global_batch(2));
  ASSERT_EQ(rows.count("toy_split"), 1u);
  EXPECT_EQ(
      rows.at("toy_split"),
      (std::map<int64_t, std::vector<int64_t>>{{2, {2}}}));
}

TEST(ToySplit, TheDryRunSplitsTheBlocksActivationsByItsHiddenShards) {
  const JobConfig one = debug_config();
  JobConfig two = one;
  two.set_integer("toy_split.degree", 2);
  const auto whole = dry_run(one, 1, DryRunOptions().device("cpu"));
  const auto split = dry_run(two, 2, DryRunOptions().device("cpu"));
  ASSERT_EQ(split.ranks.size(), 2u);
  EXPECT_EQ(split.ranks[1].coordinates.at(kSplit), 1);
  EXPECT_LT(
      split.ranks[0].activation_bytes_per_microbatch,
      whole.ranks[0].activation_bytes_per_microbatch);
}

}  // namespace
}  // namespace baton
