// `baton plan` for Llama 3 405B on 512 ranks from
// bench/costs/llama3_405b_h100.json: the whole search (pp up to 16, the
// seven schedules, v up to 8, m up to 64), per iteration.

#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>

#include "builders/builder_registry.h"
#include "config/job_config.h"
#include "planner/plan.h"

namespace {

std::string source_path(const std::string& relative) {
  return (std::filesystem::path(BATON_SOURCE_DIR) / relative).string();
}

void BM_Plan405bOn512Ranks(benchmark::State& state) {
  baton::register_builtin_builders();
  const baton::JobConfig config =
      baton::load_job_config(source_path("configs/llama3_405b.yaml"));
  const baton::PlanCosts costs =
      baton::load_plan_costs(source_path("bench/costs/llama3_405b_h100.json"));
  const auto options = baton::PlanOptions().threads(state.range(0));
  baton::PlanResult result;
  for (auto _ : state) {
    result = baton::plan_layouts(config, 512, costs, options);
    benchmark::DoNotOptimize(result.ranked.data());
  }
  state.counters["considered"] = static_cast<double>(result.considered);
  state.counters["ranked"] = static_cast<double>(result.ranked.size());
}
BENCHMARK(BM_Plan405bOn512Ranks)
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
