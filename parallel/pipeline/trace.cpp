#include "parallel/pipeline/trace.h"

#include <fstream>
#include <map>
#include <stdexcept>

#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/simulator.h"

namespace baton::pipeline {

std::string executed_trace_json(
    const std::vector<std::vector<ExecutedAction>>& ranks) {
  std::string json = "{\"traceEvents\": [\n";
  bool first = true;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& a : ranks[r]) {
      json += first ? "" : ",\n";
      first = false;
      json +=
          "{\"name\": \"" + a.name + "\", \"cat\": \"" +
          (a.compute ? "compute" : "comm") +
          "\", \"ph\": \"X\", \"pid\": " + std::to_string(r) +
          ", \"tid\": 0, \"ts\": " + std::to_string(a.start_us) +
          ", \"dur\": " + std::to_string(a.end_us - a.start_us) +
          (a.compute
               ? ", \"args\": {\"wait_us\": " + std::to_string(a.wait_us) + "}"
               : std::string()) +
          "}";
    }
  }
  return json + "\n]}\n";
}

void write_pipeline_traces(
    const std::string& prefix,
    const Schedule& lowered,
    int64_t pp_rank,
    const std::vector<ExecutedAction>& actions) {
  std::vector<std::vector<ExecutedAction>> ranks(lowered.pp);
  // One process per rank in the file; real timestamps start at 0.
  double t0 = actions.empty() ? 0.0 : actions.front().start_us;
  for (auto a : actions) {
    a.start_us -= t0;
    a.end_us -= t0;
    ranks[pp_rank].push_back(a);
  }
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    if (!out) {
      throw std::runtime_error("[pipeline] trace: cannot write " + path);
    }
  };
  write(
      prefix + ".rank" + std::to_string(pp_rank) + ".json",
      executed_trace_json(ranks));
  if (pp_rank != 0) {
    return;
  }
  // Mean measured cost of each kind of compute action, in microseconds.
  std::map<std::string, std::pair<double, int64_t>> cost;
  for (const auto& a : actions) {
    if (!a.compute) {
      continue;
    }
    const auto kind = parse_action(a.name).kind;
    auto& [sum, n] = cost[std::string(action_kind_code(kind))];
    sum += a.end_us - a.start_us - a.wait_us;
    ++n;
  }
  auto mean = [&](const char* k, double fallback) {
    const auto it = cost.find(k);
    return it == cost.end() ? fallback : it->second.first / it->second.second;
  };
  const double f = mean("F", 1.0);
  const auto costs = SimulationCosts()
                         .forward(f)
                         .backward(mean("B", 2.0 * f))
                         .backward_input(mean("I", f))
                         .backward_weight(mean("W", f));
  const auto sim = simulate(lowered, costs);
  write(prefix + ".simulated.json", format_schedule(lowered, sim, "chrome"));
}

}  // namespace baton::pipeline
