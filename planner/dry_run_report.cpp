#include "planner/dry_run.h"

// The dry run's report as text (a table, ranks with equal figures grouped)
// and as JSON: format_dry_run. The arithmetic: dry_run.cpp.

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>
#include <string>

#include "parallel/axes.h"

namespace baton {

namespace {

std::string human_bytes(int64_t bytes) {
  char text[32];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib >= 1024.0) {
    std::snprintf(text, sizeof(text), "%.2f GiB", mib / 1024.0);
  } else {
    std::snprintf(text, sizeof(text), "%.1f MiB", mib);
  }
  return text;
}

std::string human_count(int64_t n) {
  char text[32];
  if (n >= 1000000000) {
    std::snprintf(text, sizeof(text), "%.2fB", static_cast<double>(n) / 1e9);
  } else if (n >= 1000000) {
    std::snprintf(text, sizeof(text), "%.2fM", static_cast<double>(n) / 1e6);
  } else {
    std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(n));
  }
  return text;
}

/// "3" or "0-7".
std::string span(int64_t first, int64_t last) {
  return first == last ? std::to_string(first)
                       : std::to_string(first) + "-" + std::to_string(last);
}

bool same_figures(const DryRunRank& a, const DryRunRank& b) {
  if (a.stages.size() != b.stages.size()) {
    return false;
  }
  for (size_t i = 0; i < a.stages.size(); ++i) {
    if (a.stages[i].stage != b.stages[i].stage ||
        a.stages[i].parameters != b.stages[i].parameters) {
      return false;
    }
  }
  return a.parameters == b.parameters && a.buffer_bytes == b.buffer_bytes &&
         a.activation_bytes_per_microbatch ==
             b.activation_bytes_per_microbatch &&
         a.recompute_bytes == b.recompute_bytes &&
         a.peak_microbatches == b.peak_microbatches &&
         a.total_bytes == b.total_bytes;
}

std::string format_json(const DryRunReport& report) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : report.ranks) {
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& s : r.stages) {
      stages.push_back(
          {{"stage", s.stage},
           {"holds", s.holds},
           {"parameters", s.parameters},
           {"root_parameters", s.root_parameters},
           {"expert_parameters", s.expert_parameters},
           {"activation_bytes", s.activation_bytes},
           {"recompute_bytes", s.recompute_bytes}});
    }
    ranks.push_back(
        {{"rank", r.rank},
         {"stages", stages},
         {"parameters", r.parameters},
         {"weight_bytes", r.weight_bytes},
         {"gradient_bytes", r.gradient_bytes},
         {"optimizer_bytes", r.optimizer_bytes},
         {"buffer_bytes", r.buffer_bytes},
         {"activation_bytes_per_microbatch", r.activation_bytes_per_microbatch},
         {"recompute_bytes", r.recompute_bytes},
         {"peak_microbatches", r.peak_microbatches},
         {"activation_peak_bytes", r.activation_peak_bytes},
         {"total_bytes", r.total_bytes}});
    for (const auto& [axis, index] : r.coordinates) {
      ranks.back()[axis] = index;
    }
  }
  const auto& d = report.dims;
  nlohmann::json out = {
      {"model", report.model},
      {"flavor", report.flavor},
      {"model_parameters", report.model_parameters},
      {"active_parameters", report.active_parameters},
      {"vocab_size", report.vocab_size},
      {"vocab_source", report.vocab_source},
      {"world_size", d.world_size},
      {"schedule", report.schedule},
      {"num_stages", report.num_stages},
      {"microbatches", report.microbatches},
      {"microbatch_tokens", report.microbatch_tokens},
      {"compute_dtype", report.compute_dtype},
      {"device", report.device},
      {"attention_saved", report.attention_saved},
      {"activation_checkpoint", report.activation_checkpoint},
      {"ranks", ranks}};
  for (const auto& axis : d.axes) {
    out[axis.name] = axis.degree;
  }
  if (report.experts) {
    const auto& e = *report.experts;
    out["experts"] = {
        {"experts", e.experts},
        {"top_k", e.top_k},
        {"moe_layers", e.moe_layers},
        {"ep", e.ep},
        {"experts_per_rank", e.experts / e.ep},
        {"all_to_all_bytes_per_layer_and_microbatch",
         e.all_to_all_bytes_per_layer}};
  }
  if (report.context) {
    const auto& c = *report.context;
    out["context"] = {
        {"cp", c.cp},
        {"chunk_len", c.chunk_len},
        {"kv_bytes_per_layer_and_microbatch", c.bytes_per_layer}};
  }
  return out.dump(1) + "\n";
}

std::string format_text(const DryRunReport& report) {
  std::ostringstream out;
  const auto& d = report.dims;
  out << "dry run: " << report.model << " " << report.flavor << ", "
      << human_count(report.model_parameters) << " parameters"
      << (report.active_parameters != report.model_parameters
              ? " (" + human_count(report.active_parameters) +
                    " active per token)"
              : std::string())
      << ", vocabulary " << report.vocab_size << " (" << report.vocab_source
      << ")\n"
      << "layout: " << d.to_string() << "\n";
  if (report.experts) {
    const auto& e = *report.experts;
    out << "experts: " << e.moe_layers << " MoE layers of " << e.experts
        << " experts, top " << e.top_k;
    if (e.ep > 1) {
      out << "; ep " << e.ep << ": each rank holds " << e.experts / e.ep
          << " of each layer's experts (sharded over dp_shard_mod_ep "
          << d.degree(kExpertRestAxis) << "), the all-to-alls move "
          << human_bytes(e.all_to_all_bytes_per_layer)
          << " per rank, MoE layer and microbatch at balance (dispatch and "
             "combine, forward and backward)";
    }
    out << "\n";
  }
  if (report.context) {
    const auto& c = *report.context;
    out << "context: cp " << c.cp << ": each rank holds 2 chunks of "
        << c.chunk_len << " positions of every sequence (head and tail); "
        << "attention moves " << human_bytes(c.bytes_per_layer)
        << " per rank, layer and microbatch (keys and values all-gathered "
           "forward, their gradients reduce-scattered backward)\n";
  }
  if (!report.schedule.empty()) {
    out << "pipeline: " << report.schedule << ", " << report.num_stages
        << " stages, " << report.microbatches << " microbatches of "
        << report.microbatch_tokens << " tokens\n";
  } else {
    out << "micro-step: " << report.microbatch_tokens << " tokens per rank\n";
  }
  out << "compute " << report.compute_dtype << " on " << report.device
      << "; attention keeps " << report.attention_saved
      << "; activation checkpointing " << report.activation_checkpoint
      << "; AdamW: two float32 states per parameter; no weight allocated\n\n";
  std::string axes;
  for (const auto& axis : d.axes) {
    axes += (axes.empty() ? "" : " ") + axis.name;
  }
  out << "ranks | coordinates (" << axes
      << ") | stages held | "
         "parameters | weights | gradients | optimizer | gathered/cast | "
         "activations saved per microbatch | recompute | activation peak "
         "(microbatches) | total\n";
  const auto& ranks = report.ranks;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && same_figures(ranks[i], ranks[j + 1])) {
      ++j;
    }
    const DryRunRank& r = ranks[i];
    const auto range = [&](auto field) {
      int64_t lo = field(ranks[i]), hi = lo;
      for (size_t k = i; k <= j; ++k) {
        lo = std::min(lo, field(ranks[k]));
        hi = std::max(hi, field(ranks[k]));
      }
      return span(lo, hi);
    };
    std::string stages;
    for (const auto& s : r.stages) {
      stages += (stages.empty() ? "" : "; ") + std::to_string(s.stage) + " (" +
                s.holds + ")";
    }
    std::string coordinates;
    for (const auto& axis : d.axes) {
      coordinates += (coordinates.empty() ? "" : " ") +
                     range([&axis](const DryRunRank& x) {
                       return x.coordinates.at(axis.name);
                     });
    }
    out << span(ranks[i].rank, ranks[j].rank) << " | " << coordinates << " | "
        << stages << " | " << human_count(r.parameters) << " | "
        << human_bytes(r.weight_bytes) << " | " << human_bytes(r.gradient_bytes)
        << " | " << human_bytes(r.optimizer_bytes) << " | "
        << human_bytes(r.buffer_bytes) << " | "
        << human_bytes(r.activation_bytes_per_microbatch) << " | "
        << human_bytes(r.recompute_bytes) << " | "
        << human_bytes(r.activation_peak_bytes) << " (" << r.peak_microbatches
        << ") | " << human_bytes(r.total_bytes) << "\n";
    i = j + 1;
  }
  return out.str();
}

}  // namespace

std::string format_dry_run(
    const DryRunReport& report, const std::string& format) {
  if (format == "json") {
    return format_json(report);
  }
  return format_text(report);
}

}  // namespace baton
