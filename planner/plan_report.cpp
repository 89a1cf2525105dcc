#include <torch/cuda.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/placement.h"
#include "parallel/pipeline/schedule_io.h"
#include "planner/plan.h"
#include "planner/plan_text.h"

// The plan's report: the table, the JSON, the overlay it writes, the SVGs
// of synthesised schedules, and the text they share with the search.

namespace baton {

namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

namespace plan_detail {

bool on_cuda(const PlanCosts& costs) {
  return costs.device.empty() ? torch::cuda::is_available()
                              : costs.device == "cuda";
}

std::string describe_ac(const PlanCandidate& c) {
  if (c.checkpoint_stages.empty()) {
    return c.activation_checkpoint;
  }
  const int64_t last = c.checkpoint_stages.back();
  return c.activation_checkpoint + " " +
         (last == 0 ? "0" : "0-" + std::to_string(last));
}

std::string schedule_label(const PlanCandidate& c) {
  if (!c.synthesized) {
    return c.schedule;
  }
  const bool v = c.stages_per_rank == 2 &&
                 c.synthesized->stage_to_rank == pipeline::v_placement(c.pp);
  return c.schedule + (v ? " V" : " loop");
}

std::string describe_layout(const PlanCandidate& c) {
  std::ostringstream out;
  out << "pp " << c.pp << " x dp_replicate " << c.dp_replicate << " x dp_shard "
      << c.dp_shard;
  for (const Parallelism* p : searched_parallelisms()) {
    out << " x " << p->axis->name << " " << c.split(p->axis->name);
  }
  for (const auto& [axis, degree] : c.borrowed) {
    out << ", " << axis << " " << degree;
  }
  if (c.pp > 1) {
    out << ", " << schedule_label(c) << " v " << c.stages_per_rank << ", m "
        << c.microbatches << " of " << c.microbatch_size;
  }
  out << ", ac " << describe_ac(c);
  if (c.shard_ranks() > 1) {
    out << ", reshard " << c.fsdp_reshard;
  }
  return out.str();
}

std::string describe_split(const std::vector<int64_t>& layers) {
  std::string out;
  for (size_t k = 0; k < layers.size();) {
    size_t j = k;
    while (j < layers.size() && layers[j] == layers[k]) {
      ++j;
    }
    out += (out.empty() ? "" : ",") + std::to_string(layers[k]);
    if (j - k > 1) {
      out += "*" + std::to_string(j - k);
    }
    k = j;
  }
  return out;
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", static_cast<double>(bytes) / kGiB);
  return text;
}

}  // namespace plan_detail

using plan_detail::describe_ac;
using plan_detail::describe_layout;
using plan_detail::describe_split;
using plan_detail::gib;
using plan_detail::on_cuda;
using plan_detail::schedule_label;

namespace {

/// The table's preamble: the world and the costs, the candidates'
/// counts, the synthesis, the ranks tied with the fastest and what a
/// step's time holds.
std::string plan_table_preamble(
    const PlanResult& result, const PlanCosts& costs) {
  std::ostringstream out;
  out << "plan: " << result.world_size << " ranks, global batch "
      << result.global_batch << " sequences; costs: " << costs.description
      << " (" << costs.path << ")\n"
      << "candidates: " << result.considered << " considered, " << result.pruned
      << " over the memory cap"
      << (result.memory_cap > 0 ? " of " + gib(result.memory_cap) + " GiB"
                                : std::string(" (no cap)"))
      << ", " << result.dominated
      << " not scored (checkpointing more stages than one that fits), "
      << result.ranked.size() << " ranked\n";
  if (result.synthesis_layouts > 0) {
    out << "synthesis: a schedule made for the costs of each of the "
        << result.synthesis_layouts << " fastest pipelined layouts; "
        << result.synthesis_wins
        << " beat the layout's best built-in schedule (ranked as "
           "Synthesized)\n";
  }
  if (result.tied > 1) {
    char within[128];
    std::snprintf(
        within,
        sizeof(within),
        "predicted within %.3g %% of the fastest (%.4g s)",
        100.0 * result.tolerance,
        result.fastest_step_s);
    out << "ranks 1-" << result.tied << ": " << within
        << ", level within the model's accuracy: the simplest first (fewer "
           "pipeline stages, built-in schedule, fewer ranks sharing each "
           "block, replicated before sharded, fewer microbatches, less "
           "checkpointing; --tolerance 0 ranks by prediction alone)\n";
  }
  out << "step time = simulated pipeline + data-parallel gradient sync (not "
         "overlapped) + optimizer step"
      << (costs.optimizer_s_per_parameter > 0.0
              ? std::string()
              : std::string(" (not in the cost file: left out)"))
      << "\n\n";
  return out.str();
}

/// The table's row of `c`, ranked `rank` (from 1).
std::string plan_table_row(int64_t rank, const PlanCandidate& c) {
  const std::string split =
      c.pp > 1 ? std::string(c.balanced ? "balanced " : "even ") +
                     describe_split(c.layers_per_stage)
               : std::string("-");
  std::string degrees = std::to_string(c.pp) + " " +
                        std::to_string(c.dp_replicate) + " " +
                        std::to_string(c.dp_shard);
  for (const Parallelism* p : searched_parallelisms()) {
    degrees += " " + std::to_string(c.split(p->axis->name));
  }
  for (const Parallelism* p : borrowing_parallelisms()) {
    degrees += " " + std::to_string(c.borrowed_degree(p->derived_axis->name));
  }
  char line[512];
  std::snprintf(
      line,
      sizeof(line),
      "%lld | %s | %s | %s %lld | %lld x %lld | %s | %s | "
      "%.4g (%.4g + %.4g + %.4g) | %.4g | %.4g | %.1f | %s\n",
      static_cast<long long>(rank),
      degrees.c_str(),
      c.shard_ranks() > 1 ? c.fsdp_reshard.c_str() : "-",
      c.pp > 1 ? schedule_label(c).c_str() : "-",
      static_cast<long long>(c.stages_per_rank),
      static_cast<long long>(c.microbatch_size),
      static_cast<long long>(c.microbatches),
      split.c_str(),
      describe_ac(c).c_str(),
      c.step_s,
      c.compute_s,
      c.dp_sync_s,
      c.optimizer_s,
      c.tokens_per_s,
      c.tokens_per_s_per_rank,
      c.bubble * 100.0,
      gib(c.peak_bytes).c_str());
  return line;
}

/// A line for each synthesised schedule among the first `n` ranked: the
/// built-in schedule it beat at its layout, and by how much.
std::string synthesis_lines(const PlanResult& result, int64_t n) {
  std::string out;
  for (int64_t k = 0; k < n; ++k) {
    const PlanCandidate& c = result.ranked[k];
    if (c.synthesized) {
      char line[256];
      std::snprintf(
          line,
          sizeof(line),
          "rank %lld: Synthesized over %s (%.4g s at this layout), %.1f %% "
          "faster\n",
          static_cast<long long>(k + 1),
          c.synthesized_over.c_str(),
          c.synthesized_over_step_s,
          100.0 * (1.0 - c.step_s / c.synthesized_over_step_s));
      out += line;
    }
  }
  return out;
}

}  // namespace

std::string format_plan_table(
    const PlanResult& result, const PlanCosts& costs, int64_t top) {
  std::ostringstream out;
  out << plan_table_preamble(result, costs);
  std::string axes = "pp dp_rep dp_shard";
  for (const Parallelism* p : searched_parallelisms()) {
    axes += " " + p->axis->name;
  }
  for (const Parallelism* p : borrowing_parallelisms()) {
    axes += " " + p->derived_axis->name;
  }
  out << "rank | " << axes
      << " | reshard | schedule v | "
         "microbatch x m | layers per stage | ac (stages) | step s (pipeline + "
         "dp sync + optimizer) | tokens/s | tokens/s/rank | bubble % | peak "
         "GiB\n";
  const int64_t n = std::min<int64_t>(top, result.ranked.size());
  for (int64_t k = 0; k < n; ++k) {
    out << plan_table_row(k + 1, result.ranked[k]);
  }
  out << synthesis_lines(result, n);
  return out.str();
}

std::string plan_result_json(const PlanResult& result, const PlanCosts& costs) {
  json ranked = json::array();
  for (size_t k = 0; k < result.ranked.size(); ++k) {
    const PlanCandidate& c = result.ranked[k];
    ranked.push_back(
        {{"rank", k + 1},
         {"layout", describe_layout(c)},
         {"pp", c.pp},
         {"dp_replicate", c.dp_replicate},
         {"dp_shard", c.dp_shard},
         {"schedule", c.schedule},
         {"stages_per_rank", c.stages_per_rank},
         {"local_batch", c.local_batch},
         {"microbatch_size", c.microbatch_size},
         {"microbatches", c.microbatches},
         {"layers_per_stage", c.layers_per_stage},
         {"balanced", c.balanced},
         {"activation_checkpoint", c.activation_checkpoint},
         {"checkpoint_stages", c.checkpoint_stages},
         {"fsdp_reshard", c.fsdp_reshard},
         {"compute_s", c.compute_s},
         {"dp_sync_s", c.dp_sync_s},
         {"optimizer_s", c.optimizer_s},
         {"step_s", c.step_s},
         {"tokens_per_s", c.tokens_per_s},
         {"tokens_per_s_per_rank", c.tokens_per_s_per_rank},
         {"bubble", c.bubble},
         {"peak_bytes", c.peak_bytes},
         {"overlay", plan_overlay_yaml(c, "rank " + std::to_string(k + 1))}});
    for (const Parallelism* p : searched_parallelisms()) {
      ranked.back()[p->axis->name] = c.split(p->axis->name);
    }
    for (const Parallelism* p : borrowing_parallelisms()) {
      ranked.back()[p->derived_axis->name] =
          c.borrowed_degree(p->derived_axis->name);
    }
    if (c.synthesized) {
      ranked.back()["synthesized_over"] = c.synthesized_over;
      ranked.back()["synthesized_over_step_s"] = c.synthesized_over_step_s;
      ranked.back()["schedule_csv"] = c.schedule_csv;
    }
  }
  const json out = {
      {"world_size", result.world_size},
      {"global_batch", result.global_batch},
      {"considered", result.considered},
      {"pruned", result.pruned},
      {"dominated", result.dominated},
      {"memory_cap", result.memory_cap},
      {"synthesis_layouts", result.synthesis_layouts},
      {"synthesis_wins", result.synthesis_wins},
      {"tolerance", result.tolerance},
      {"tied", result.tied},
      {"fastest_step_s", result.fastest_step_s},
      {"cpu_bind", result.cpu_bind},
      {"costs",
       {{"path", costs.path},
        {"description", costs.description},
        {"obtained", costs.obtained}}},
      {"ranked", ranked}};
  return out.dump(2) + "\n";
}

std::string plan_overlay_yaml(const PlanCandidate& c, const std::string& why) {
  // The searched and borrowed axes' degrees, each under its key's section:
  // those in `parallelism` beside the built-in degrees, the others after.
  std::string in_parallelism;
  std::map<std::string, std::string> other_sections;
  const auto degree_line = [&](const std::string& key, int64_t degree) {
    const auto dot = key.find('.');
    (key.substr(0, dot) == "parallelism"
         ? in_parallelism
         : other_sections[key.substr(0, dot)]) +=
        "  " + key.substr(dot + 1) + ": " + std::to_string(degree) + "\n";
  };
  for (const Parallelism* p : searched_parallelisms()) {
    degree_line(p->axis->degree_key, c.split(p->axis->name));
  }
  for (const Parallelism* p : borrowing_parallelisms()) {
    degree_line(
        p->derived_axis->degree_key, c.borrowed_degree(p->derived_axis->name));
  }
  std::ostringstream out;
  out << "# baton plan: " << why << "\n"
      << "# Use as: baton train --config BASE.yaml --config THIS.yaml\n"
      << "training:\n"
      << "  local_batch_size: " << c.local_batch << "\n"
      << "parallelism:\n"
      << "  data_parallel_replicate_degree: " << c.dp_replicate << "\n"
      << "  data_parallel_shard_degree: " << c.dp_shard << "\n"
      << in_parallelism << "  pipeline_parallel_degree: " << c.pp << "\n"
      << "  fsdp_reshard_after_forward: " << c.fsdp_reshard << "\n";
  if (c.pp > 1) {
    if (c.synthesized && c.schedule_csv.empty()) {
      throw std::invalid_argument(
          "plan_overlay_yaml: a synthesised schedule needs its CSV's path");
    }
    if (c.synthesized) {
      out << "  # The CSV is the schedule (synthesised by baton plan); the "
             "named one is what it beat.\n"
          << "  pipeline_parallel_schedule: " << c.synthesized_over << "\n";
    } else {
      out << "  pipeline_parallel_schedule: " << c.schedule << "\n";
    }
    out << "  pipeline_parallel_stages_per_rank: " << c.stages_per_rank << "\n"
        << "  pipeline_parallel_microbatch_size: " << c.microbatch_size << "\n"
        << "  pipeline_parallel_schedule_csv: \"" << c.schedule_csv << "\"\n"
        << "  pipeline_parallel_layers_per_stage: 0\n";
    if (c.balanced) {
      out << "  pipeline_parallel_module_fqns_per_stage:\n";
      for (const auto& stage : split_fqns(c.layers_per_stage)) {
        out << "    - [";
        for (size_t k = 0; k < stage.size(); ++k) {
          out << (k ? ", " : "") << stage[k];
        }
        out << "]\n";
      }
    } else {
      out << "  pipeline_parallel_module_fqns_per_stage: []\n";
    }
  }
  out << "activation_checkpoint:\n"
      << "  mode: " << c.activation_checkpoint << "\n"
      << "  stages: [";
  for (size_t k = 0; k < c.checkpoint_stages.size(); ++k) {
    out << (k ? ", " : "") << c.checkpoint_stages[k];
  }
  out << "]\n";
  for (const auto& [section, lines] : other_sections) {
    out << section << ":\n" << lines;
  }
  return out.str();
}

void write_synthesized_schedules(PlanResult& result, const std::string& dir) {
  for (size_t k = 0; k < result.ranked.size(); ++k) {
    PlanCandidate& c = result.ranked[k];
    if (!c.synthesized) {
      continue;
    }
    const auto path = std::filesystem::absolute(
        std::filesystem::path(dir) /
        ("schedule-rank" + std::to_string(k + 1) + ".csv"));
    std::ofstream out(path);
    out << pipeline::schedule_to_csv(*c.synthesized);
    if (!out) {
      throw std::runtime_error("[plan] cannot write '" + path.string() + "'");
    }
    c.schedule_csv = path.string();
  }
}

}  // namespace baton
