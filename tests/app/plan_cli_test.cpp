// `baton plan` as a user runs it: the debug model planned for 2 ranks from
// a hand-made cost file, its overlay taken by `baton train` as a second
// --config (a dry run, then 2 real steps), and the error paths' exit 2.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "parallel/dist/launcher.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::run_command;
using testing::source_path;

std::string plan_command(const std::string& args) {
  return baton_bin() + " plan --config " +
         source_path("configs/debug_model.yaml") + " --costs " +
         source_path("bench/costs/debug_hand.json") + " " + args;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PlanCli, DebugModelOnTwoRanksWritesAnOverlayTrainAccepts) {
  const auto dir = fresh_dir("plan_cli");
  const auto r =
      run_command(plan_command("--nproc 2 --top 25 --out " + dir.string()));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("considered"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n25 | "), std::string::npos) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir / "plan.yaml"));
  ASSERT_TRUE(std::filesystem::exists(dir / "plan.txt"));
  const std::string svg = read(dir / "schedule.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  const std::string overlay = read(dir / "plan.yaml");
  EXPECT_NE(overlay.find("pipeline_parallel_degree: 2"), std::string::npos)
      << overlay;

  // The overlay over the base config gives the planned layout.
  const auto report_path = dir / "dry_run.json";
  const std::string train = baton_bin() + " train --config " +
                            source_path("configs/debug_model.yaml") +
                            " --config " + (dir / "plan.yaml").string();
  const auto d = run_command(
      train + " --nproc 2 --dry-run=json > " + report_path.string());
  ASSERT_EQ(d.code, 0) << d.output << read(report_path);
  const auto report = nlohmann::json::parse(read(report_path));
  EXPECT_EQ(report["pp"], 2);
  const std::string line =
      overlay.substr(overlay.find("pipeline_parallel_schedule: ") + 28);
  EXPECT_EQ(report["schedule"], line.substr(0, line.find('\n')));
  EXPECT_EQ(report["microbatches"], 16);

  // And trains with it: two steps.
  const auto t = run_command(
      train + " --nproc 2 --training.steps=2 --job.dump_folder=" +
      (dir / "run").string());
  EXPECT_EQ(t.code, 0) << t.output;
}

TEST(PlanCli, SynthesisedSchedulesAreWrittenAsCsvsTheirOverlaysName) {
  const auto dir = fresh_dir("plan_cli_synthesis");
  const auto r =
      run_command(plan_command("--nproc 2 --top 100 --out " + dir.string()));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("synthesis: a schedule made for the costs of each "
                    "of the 8 fastest pipelined layouts"),
      std::string::npos)
      << r.output;
  const auto plan = nlohmann::json::parse(read(dir / "plan.json"));
  ASSERT_GE(plan["synthesis_wins"].get<int64_t>(), 1) << r.output;
  int64_t written = 0;
  for (const auto& c : plan["ranked"]) {
    if (c["schedule"] != "Synthesized") {
      continue;
    }
    ++written;
    const std::string csv = c["schedule_csv"];
    EXPECT_EQ(
        csv,
        std::filesystem::absolute(
            dir / ("schedule-rank" + std::to_string(c["rank"].get<int64_t>()) +
                   ".csv"))
            .string());
    EXPECT_TRUE(std::filesystem::exists(csv)) << csv;
    EXPECT_NE(r.output.find(csv), std::string::npos) << r.output;
    const std::string overlay = c["overlay"];
    EXPECT_NE(
        overlay.find("pipeline_parallel_schedule_csv: \"" + csv + "\""),
        std::string::npos)
        << overlay;
  }
  EXPECT_EQ(written, plan["synthesis_wins"].get<int64_t>());

  const auto none =
      run_command(plan_command("--nproc 2 --top 100 --synthesize 0"));
  ASSERT_EQ(none.code, 0) << none.output;
  EXPECT_EQ(none.output.find("Synthesized"), std::string::npos) << none.output;
  EXPECT_EQ(none.output.find("synthesis:"), std::string::npos) << none.output;

  const auto bad = run_command(plan_command("--nproc 2 --synthesize=-1"));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(
      bad.output.find("--synthesize: '-1' is not allowed; allowed: an integer "
                      ">= 0"),
      std::string::npos)
      << bad.output;
}

TEST(PlanCli, NearTiesRankSimplestFirstAndTheOverlayIsTheFirst) {
  const auto dir = fresh_dir("plan_cli_tolerance");
  const auto r = run_command(
      plan_command("--nproc 2 --top 100 --tolerance 5 --out " + dir.string()));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto plan = nlohmann::json::parse(read(dir / "plan.json"));
  const int64_t tied = plan["tied"];
  ASSERT_GE(tied, 2) << r.output;
  EXPECT_EQ(plan["tolerance"], 0.05);
  EXPECT_NE(
      r.output.find(
          "ranks 1-" + std::to_string(tied) +
          ": predicted within 5 % of the fastest"),
      std::string::npos)
      << r.output;
  // plan.yaml is rank 1's overlay, the simplest of the level ones, and
  // says so.
  const std::string yaml = read(dir / "plan.yaml");
  const std::string overlay = plan["ranked"][0]["overlay"];
  EXPECT_EQ(yaml.substr(yaml.find('\n')), overlay.substr(overlay.find('\n')));
  EXPECT_NE(
      yaml.find(
          "; the simplest of the " + std::to_string(tied) +
          " predicted within 5 % of the fastest"),
      std::string::npos)
      << yaml;
  const double fastest = plan["fastest_step_s"];
  for (int64_t k = 0; k < tied; ++k) {
    EXPECT_LE(plan["ranked"][k]["step_s"].get<double>(), fastest * 1.05);
  }

  const auto strict =
      run_command(plan_command("--nproc 2 --top 100 --tolerance 0"));
  ASSERT_EQ(strict.code, 0) << strict.output;
  EXPECT_EQ(strict.output.find("ranks 1-"), std::string::npos) << strict.output;

  for (const std::string value : {"-1", "100", "abc"}) {
    const auto bad =
        run_command(plan_command("--nproc 2 --tolerance=" + value));
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(
        bad.output.find(
            "--tolerance: '" + value +
            "' is not allowed; allowed: a percentage >= 0 and < 100"),
        std::string::npos)
        << bad.output;
  }
}

TEST(PlanCli, BadInputsExitTwoNamingTheCause) {
  const auto cap =
      run_command(plan_command("--nproc 2 --memory-per-rank 1e-6"));
  EXPECT_EQ(cap.code, 2) << cap.output;
  EXPECT_NE(cap.output.find("smallest peak"), std::string::npos) << cap.output;

  const auto world = run_command(plan_command("--nproc 7 --global-batch 16"));
  EXPECT_EQ(world.code, 2) << world.output;
  EXPECT_NE(world.output.find("no layout"), std::string::npos) << world.output;

  const auto dir = fresh_dir("plan_cli_bad");
  std::filesystem::create_directories(dir);
  const auto bad = dir / "costs.json";
  std::ofstream(bad) << R"({"description": "x", "obtained": "y"})";
  const auto file = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") + " --nproc 2 --costs " +
      bad.string());
  EXPECT_EQ(file.code, 2) << file.output;
  EXPECT_NE(file.output.find(bad.string()), std::string::npos) << file.output;
  EXPECT_NE(file.output.find("microbatches: missing"), std::string::npos)
      << file.output;

  const auto both = run_command(
      plan_command("--nproc 2 --write-costs " + (dir / "w.json").string()));
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("not allowed together"), std::string::npos)
      << both.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "w.json"));

  // A world no layout divides is refused before the profile starts.
  const auto unprofiled = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") +
      " --nproc 7 --global-batch 16 --write-costs " +
      (dir / "p.json").string());
  EXPECT_EQ(unprofiled.code, 2) << unprofiled.output;
  EXPECT_NE(unprofiled.output.find("no layout"), std::string::npos)
      << unprofiled.output;
  EXPECT_EQ(unprofiled.output.find("profiling"), std::string::npos)
      << unprofiled.output;
}

TEST(PlanCli, WithoutACostFileProfilesThisMachineThenPlans) {
  // The debug model cut to 32 tokens, two ranks as processes, one timed
  // run per measurement: the whole path, quickly.
  const auto dir = fresh_dir("plan_cli_profile");
  const auto r = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") +
      " --training.seq_len=32 --training.mixed_precision_param=float32"
      " --nproc 2 --profile-repeats 1 --cpu-bind cores --out " +
      dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("profiling on this machine with 2 rank(s)"),
      std::string::npos)
      << r.output;
  // Its six phases, each said once by the profile's rank 0; the run's
  // start-up lines, which its pieces would repeat, are not.
  for (int phase = 1; phase <= 6; ++phase) {
    const std::string line =
        "plan: profile " + std::to_string(phase) + "/6 at ";
    const size_t at = r.output.find(line);
    EXPECT_NE(at, std::string::npos) << line << "\n" << r.output;
    EXPECT_EQ(at, r.output.rfind(line)) << r.output;
  }
  EXPECT_EQ(r.output.find("plan: profile 7/"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank1]: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fully_shard: stage"), std::string::npos) << r.output;
  const auto costs = nlohmann::json::parse(read(dir / "costs.json"));
  const std::string obtained = costs["obtained"].get<std::string>();
  EXPECT_NE(obtained.find("measured by baton plan"), std::string::npos);
  // Bound (--cpu-bind cores), rank 0 ran on its own share of the cores, and
  // the overlay says how to launch the run it plans.
  const auto cores = dist::allowed_cores();
  if (cores.size() >= 2) {
    EXPECT_NE(
        obtained.find(
            "bound to CPU(s) " +
            dist::format_cpu_list(dist::cores_per_rank(2, cores)[0]) + " of "),
        std::string::npos)
        << obtained;
  }
  EXPECT_NE(
      read(dir / "plan.yaml").find("train with --nproc 2 --cpu-bind cores"),
      std::string::npos)
      << read(dir / "plan.yaml");
  // The sizes the search can choose: 1, 2, 4, 8 and 16 sequences.
  EXPECT_EQ(costs["microbatches"].size(), 5u);
  EXPECT_GT(costs["all_reduce"]["bandwidth_GBps"].get<double>(), 0.0);
  EXPECT_GT(costs["optimizer"]["seconds_per_parameter"].get<double>(), 0.0);
  const auto plan = nlohmann::json::parse(read(dir / "plan.json"));
  EXPECT_GE(plan["ranked"].size(), 20u);
  EXPECT_EQ(plan["ranked"][0]["rank"], 1);
  EXPECT_NE(
      plan["ranked"][0]["overlay"].get<std::string>().find(
          "pipeline_parallel_degree"),
      std::string::npos);
  // The file it wrote plans again without a profile.
  const auto again = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") +
      " --training.seq_len=32 --nproc 2 --costs " +
      (dir / "costs.json").string());
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(again.output.find("profiling"), std::string::npos) << again.output;

  // --write-costs profiles and stops.
  const auto w = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") +
      " --training.seq_len=32 --nproc 1 --profile-repeats 1 --write-costs " +
      (dir / "one.json").string());
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_EQ(w.output.find("candidates:"), std::string::npos) << w.output;
  const auto one = nlohmann::json::parse(read(dir / "one.json"));
  EXPECT_NE(
      one["obtained"].get<std::string>().find("communication not measured"),
      std::string::npos);
}

TEST(PlanCli, WithoutCpuBindProfilesBothBindingsAndSaysWhichToTrainWith) {
  // Where this machine has a core per rank, the plan profiles its ranks
  // unbound and bound, plans each, and says which launch to train with.
  if (dist::allowed_cores().size() < 2) {
    GTEST_SKIP() << "binding two ranks needs two cores";
  }
  const auto dir = fresh_dir("plan_cli_bindings");
  const auto r = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/debug_model.yaml") +
      " --training.seq_len=32 --training.mixed_precision_param=float32"
      " --nproc 2 --global-batch 4 --profile-repeats 1 --out " +
      dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "costs.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "costs-cpu-bind-cores.json"));
  const auto bound =
      nlohmann::json::parse(read(dir / "costs-cpu-bind-cores.json"));
  EXPECT_NE(
      bound["obtained"].get<std::string>().find("bound to CPU(s)"),
      std::string::npos);
  const auto unbound = nlohmann::json::parse(read(dir / "costs.json"));
  EXPECT_EQ(
      unbound["obtained"].get<std::string>().find("bound to CPU(s)"),
      std::string::npos);
  EXPECT_NE(
      r.output.find("binding: profiled both ways: ranks unbound, best "),
      std::string::npos)
      << r.output;
  const auto plan = nlohmann::json::parse(read(dir / "plan.json"));
  const std::string bind = plan["cpu_bind"].get<std::string>();
  ASSERT_TRUE(bind == "none" || bind == "cores") << bind;
  // The overlay's launch is the chosen binding's, and so are the plan's
  // costs.
  const std::string launch = bind == "cores"
                                 ? "train with --nproc 2 --cpu-bind cores\n"
                                 : "train with --nproc 2\n";
  EXPECT_NE(read(dir / "plan.yaml").find(launch), std::string::npos)
      << read(dir / "plan.yaml");
  EXPECT_EQ(
      plan["costs"]["obtained"],
      (bind == "cores" ? bound : unbound)["obtained"]);
}

TEST(PlanCli, WritesACostFileFromFlops) {
  const auto dir = fresh_dir("plan_cli_flops");
  std::filesystem::create_directories(dir);
  const auto path = dir / "costs.json";
  const auto w = run_command(
      baton_bin() + " plan --config " +
      source_path("configs/llama3_405b.yaml") + " --write-costs-from-flops " +
      path.string() + " --peak-tflops 989 --efficiency 0.4");
  ASSERT_EQ(w.code, 0) << w.output;
  const auto costs = nlohmann::json::parse(read(path));
  EXPECT_NE(
      costs["obtained"].get<std::string>().find("40% of 989 TFLOP/s"),
      std::string::npos);
  // 6.912e9 FLOPs per token per block forward x 8192 tokens at 395.6
  // TFLOP/s.
  EXPECT_NEAR(
      costs["microbatches"][0]["block"]["F"].get<double>(), 0.14314, 1e-4);
}

}  // namespace
}  // namespace baton
