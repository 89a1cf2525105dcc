#include "planner/plan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "common/error.h"
#include "models/model_spec.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/synthesis.h"
#include "planner/dry_run.h"
#include "planner/plan_layouts.h"
#include "planner/plan_model.h"
#include "planner/plan_text.h"

// The search (plan.h): the candidates every schedule accepts scored in
// parallel, a schedule synthesised for the fastest pipelined layouts, and
// the ranking.

namespace baton {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

using plan_detail::add_candidates;
using plan_detail::CachedSchedule;
using plan_detail::candidate_config;
using plan_detail::cost_model;
using plan_detail::CostModel;
using plan_detail::costs_at;
using plan_detail::describe_layout;
using plan_detail::freed_block_gathers;
using plan_detail::gib;
using plan_detail::Layout;
using plan_detail::measure_memory;
using plan_detail::measure_time;
using plan_detail::on_cuda;
using plan_detail::schedule_label;
using plan_detail::ScheduleKey;
using plan_detail::score;
using plan_detail::searched_layouts;
using plan_detail::simulation_costs;
using plan_detail::stored_bytes;

/// The vocabulary is the tokenizer's, or the flavor's when its file is
/// absent.
ModelArgs plan_model_args(const JobConfig& base) {
  const auto& spec =
      model_registry().get(base.model.name, base.origin("model.name"));
  ModelArgs args =
      model_flavor(spec, base.model.flavor, base.origin("model.flavor"));
  // One rank: every registered axis at 1.
  register_builtin_parallelisms();
  JobConfig one = base;
  for (const auto& p : registered_parallelisms()) {
    if (p.axis) {
      one.set_integer(p.axis->degree_key, 1);
    }
    if (p.derived_axis) {
      one.set_integer(p.derived_axis->degree_key, 1);
    }
  }
  args.vocab_size = dry_run(one, 1).vocab_size;
  return args;
}

namespace {

void parallel_for(
    int64_t n, int64_t threads, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex error_mutex;
  const int64_t count = std::max<int64_t>(1, std::min(threads, n));
  for (int64_t t = 0; t < count; ++t) {
    pool.emplace_back([&] {
      for (int64_t k = next++; k < n; k = next++) {
        try {
          fn(k);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) {
            error = std::current_exception();
          }
        }
      }
    });
  }
  for (auto& t : pool) {
    t.join();
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

/// Each (schedule, pp, v, m) of `candidates` lowered once, in the order the
/// executor posts it on the costs' device (pipeline::posting_order).
std::map<ScheduleKey, CachedSchedule> lower_schedules(
    const std::vector<PlanCandidate>& candidates, bool cuda, int64_t threads) {
  std::map<ScheduleKey, CachedSchedule> cache;
  for (const auto& c : candidates) {
    if (c.pp > 1) {
      cache[{c.schedule, c.pp, c.stages_per_rank, c.microbatches}];
    }
  }
  std::vector<std::pair<const ScheduleKey, CachedSchedule>*> entries;
  for (auto& entry : cache) {
    entries.push_back(&entry);
  }
  parallel_for(static_cast<int64_t>(entries.size()), threads, [&](int64_t k) {
    const auto& [name, pp, v, m] = entries[k]->first;
    CachedSchedule& s = entries[k]->second;
    try {
      const auto planned = pipeline::plan_schedule(
          pipeline::make_schedule(name, pp, v, m), pipeline::SimulationCosts());
      s.lowered = pipeline::posting_order(planned.lowered, cuda);
      s.peaks = planned.simulation.peak_activations;
      s.freed_gathers = freed_block_gathers(s.lowered);
    } catch (const ConfigError& e) {
      s.error = e.what();  // a layout the schedule cannot run
    }
  });
  return cache;
}

/// The candidates every schedule accepts, and their schedules lowered.
struct Candidates {
  std::vector<PlanCandidate> list;
  std::map<ScheduleKey, CachedSchedule> schedules;

  const CachedSchedule* schedule_of(const PlanCandidate& c) const {
    if (c.pp == 1) {
      return nullptr;
    }
    return &schedules.at({c.schedule, c.pp, c.stages_per_rank, c.microbatches});
  }
};

Candidates valid_candidates(
    const JobConfig& base,
    const std::vector<Layout>& found,
    int64_t global_batch,
    const ModelArgs& args,
    const PlanCosts& costs,
    const PlanOptions& options,
    int64_t threads) {
  const MicrobatchCosts unit = costs_at(costs.microbatches, 1);
  std::vector<PlanCandidate> all;
  for (const Layout& layout : found) {
    add_candidates(base, layout, global_batch, args, unit, options, all);
  }
  Candidates out;
  out.schedules = lower_schedules(all, on_cuda(costs), threads);
  // Drop the layouts a schedule refuses (1F1B with m < pp, ...).
  for (auto& c : all) {
    const CachedSchedule* schedule = out.schedule_of(c);
    if (schedule == nullptr || schedule->error.empty()) {
      out.list.push_back(std::move(c));
    }
  }
  return out;
}

/// A candidate's checkpointing choices, cheapest first: none; without
/// pipelining full; pipelined full on the first k stages, k = 1 .. stages
/// (the last: every stage, written as an empty list). Each adds compute
/// to the one before, so the first that fits is the one to rank.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_choices(
    const PlanCandidate& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> choices{
      {"none", {}}};
  const auto stages =
      c.pp > 1 ? static_cast<int64_t>(c.layers_per_stage.size()) : 1;
  std::vector<int64_t> prefix;
  for (int64_t k = 1; k < stages; ++k) {
    prefix.push_back(k - 1);
    choices.push_back({"full", prefix});
  }
  choices.push_back({"full", {}});
  return choices;
}

/// What a rank stores between steps depends on the layout only: its
/// pipeline stages, their split and placement, and the degrees (not the
/// microbatches, checkpointing or resharding). A candidate's key for it.
std::string stored_key(const PlanCandidate& c) {
  std::ostringstream out;
  out << c.pp << '|' << c.dp_replicate << '|' << c.dp_shard << '|';
  for (const auto& [axis, degree] : c.splits) {
    out << axis << degree << ',';
  }
  for (const auto& [axis, degree] : c.borrowed) {
    out << axis << degree << ',';
  }
  out << '|' << c.schedule << '|' << c.stages_per_rank << '|';
  for (const int64_t n : c.layers_per_stage) {
    out << n << ',';
  }
  return out.str();
}

/// The stored bytes of each layout dry-run so far (stored_key), shared by
/// the scoring threads.
class StoredBytes {
 public:
  std::optional<int64_t> find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = bytes_.find(key);
    return it == bytes_.end() ? std::nullopt
                              : std::optional<int64_t>(it->second);
  }
  void add(const std::string& key, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_.emplace(key, bytes);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, int64_t> bytes_;
};

/// Scores each candidate's checkpointing choices up to the first that fits
/// the cap; the later ones only add compute (counted as dominated, not
/// scored). Memory falls as more stages checkpoint (but for one block's
/// recompute transient on a rank's first checkpointed stage), so where full
/// on every stage does not fit no prefix is scored (all counted over the
/// cap), and otherwise the first prefix that fits is found by bisection on
/// the dry runs alone (those below it counted over the cap), and only it
/// is timed. With `skip_stored`, a candidate whose layout another
/// candidate's dry run found storing more than the cap between steps is
/// counted over the cap without a dry run of its own. Fills `result`'s
/// ranked list (in candidate order) and counts. Returns the candidate of
/// the smallest peak dry-run.
PlanCandidate score_all(
    const JobConfig& base,
    const Candidates& candidates,
    const CostModel& model,
    int64_t threads,
    bool skip_stored,
    PlanResult& result) {
  const auto& valid = candidates.list;
  const int64_t cap = result.memory_cap;
  const bool skip = skip_stored && cap > 0;
  std::vector<std::vector<PlanCandidate>> scored(valid.size());
  std::vector<PlanCandidate> smallest(valid.size());
  std::atomic<int64_t> considered{0}, pruned{0}, dominated{0};
  StoredBytes stored;
  const double tokens =
      static_cast<double>(result.global_batch * base.training.seq_len);
  parallel_for(static_cast<int64_t>(valid.size()), threads, [&](int64_t k) {
    smallest[k].peak_bytes = INT64_MAX;
    const auto choices = checkpoint_choices(valid[k]);
    const auto n = static_cast<int64_t>(choices.size());
    considered += n;
    const std::string key = skip ? stored_key(valid[k]) : "";
    if (skip) {
      if (const auto bytes = stored.find(key); bytes && *bytes > cap) {
        pruned += n;
        return;
      }
    }
    const CachedSchedule* schedule = candidates.schedule_of(valid[k]);
    // Choice j's dry run into (c, report): whether it fits.
    const auto attempt =
        [&](int64_t j, PlanCandidate& c, DryRunReport& report) {
          c = valid[k];
          std::tie(c.activation_checkpoint, c.checkpoint_stages) = choices[j];
          report = measure_memory(base, result.world_size, model, schedule, c);
          if (skip) {
            stored.add(key, stored_bytes(report));
          }
          if (c.peak_bytes < smallest[k].peak_bytes) {
            smallest[k] = c;
          }
          return cap == 0 || c.peak_bytes <= cap;
        };
    const auto rank =
        [&](PlanCandidate c, const DryRunReport& report, int64_t j) {
          measure_time(model, schedule, report, c);
          c.tokens_per_s = tokens / c.step_s;
          c.tokens_per_s_per_rank = c.tokens_per_s / result.world_size;
          scored[k].push_back(std::move(c));
          pruned += j;  // the cheaper choices before it
          dominated += n - 1 - j;
        };
    PlanCandidate c;
    DryRunReport report;
    if (attempt(0, c, report)) {
      return rank(c, report, 0);
    }
    PlanCandidate best;
    DryRunReport best_report;
    if (!attempt(n - 1, best, best_report)) {
      pruned += n;
      return;
    }
    // Choice lo does not fit, hi does.
    int64_t lo = 0;
    int64_t hi = n - 1;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (attempt(mid, c, report)) {
        hi = mid;
        best = c;
        best_report = std::move(report);
      } else {
        lo = mid;
      }
    }
    rank(best, best_report, hi);
  });
  result.considered = considered;
  result.pruned = pruned;
  result.dominated = dominated;
  for (auto& list : scored) {
    for (auto& c : list) {
      result.ranked.push_back(std::move(c));
    }
  }
  return *std::min_element(
      smallest.begin(),
      smallest.end(),
      [](const PlanCandidate& a, const PlanCandidate& b) {
        return a.peak_bytes < b.peak_bytes;
      });
}

/// A pipelined candidate's layout but for its schedule: what a synthesised
/// schedule replaces the schedule of.
std::string layout_key(
    const PlanCandidate& c, const std::vector<int64_t>& stage_to_rank) {
  std::ostringstream out;
  const auto list = [&out](const std::vector<int64_t>& values) {
    for (const int64_t v : values) {
      out << v << ',';
    }
    out << '|';
  };
  out << c.pp << '|' << c.dp_replicate << '|' << c.dp_shard << '|';
  for (const auto& [axis, degree] : c.splits) {
    out << axis << degree << ',';
  }
  for (const auto& [axis, degree] : c.borrowed) {
    out << axis << degree << ',';
  }
  out << '|' << c.fsdp_reshard << '|' << c.microbatch_size << '|'
      << c.activation_checkpoint << '|';
  list(c.checkpoint_stages);
  list(c.layers_per_stage);
  list(stage_to_rank);
  return out.str();
}

/// What a synthesised schedule must save to replace a built-in one at
/// least, whatever the tolerance: a custom CSV is worth it only for a gain.
constexpr double kSynthesisMargin = 0.005;

/// For the `count` fastest pipelined layouts of `result.ranked` (sorted),
/// a schedule synthesised for each one's costs within three budgets (the
/// activations its built-in schedule holds, one more microbatch per rank,
/// none), each scored like any candidate (dry run, cap, simulation); the
/// fastest that fits joins the ranking when it is faster than the built-in
/// one by more than `margin` (a fraction). The synthesis picks the
/// fastest of many rule sets by the cost model, so its pick also gains
/// from the model's errors (on a two-core EPYC synthesised schedules ran
/// 4-9 % behind their predictions where the built-in one they beat ran
/// 1.5 % ahead of its own, bench/notes.md): plan_layouts passes its
/// tolerance, the model's accuracy.
void synthesize_for_fastest(
    const JobConfig& base,
    const Candidates& candidates,
    const CostModel& model,
    int64_t threads,
    int64_t count,
    double margin,
    PlanResult& result) {
  std::vector<const PlanCandidate*> picked;
  std::set<std::string> seen;
  for (const auto& c : result.ranked) {
    if (static_cast<int64_t>(picked.size()) >= count) {
      break;
    }
    if (c.pp > 1 &&
        seen.insert(
                layout_key(c, candidates.schedule_of(c)->lowered.stage_to_rank))
            .second) {
      picked.push_back(&c);
    }
  }
  std::vector<std::optional<PlanCandidate>> won(picked.size());
  parallel_for(static_cast<int64_t>(picked.size()), threads, [&](int64_t k) {
    const PlanCandidate& built_in = *picked[k];
    const CachedSchedule& cached = *candidates.schedule_of(built_in);
    const pipeline::Schedule& lowered = cached.lowered;
    const auto costs = simulation_costs(model, built_in);
    std::vector<int64_t> held = cached.peaks;
    std::vector<int64_t> more = held;
    for (int64_t r = 0; r < lowered.pp; ++r) {
      const auto stages = static_cast<int64_t>(
          pipeline::stages_of_rank(lowered.stage_to_rank, r).size());
      held[r] = std::max(held[r], stages);
      more[r] = held[r] + stages;
    }
    for (const auto& budget : {held, more, std::vector<int64_t>{}}) {
      const auto made = pipeline::synthesize_best(
          lowered.stage_to_rank,
          built_in.microbatches,
          costs,
          {budget},
          on_cuda(model.costs));
      CachedSchedule schedule;
      schedule.lowered = made.planned.lowered;
      schedule.peaks = made.planned.simulation.peak_activations;
      schedule.freed_gathers = freed_block_gathers(schedule.lowered);
      PlanCandidate c = built_in;
      c.schedule = "Synthesized";
      c.synthesized =
          std::make_shared<const pipeline::Schedule>(made.planned.compute);
      c.synthesized_over = built_in.schedule;
      c.synthesized_over_step_s = built_in.step_s;
      c.peak_bytes = 0;
      c.bubble = 0.0;
      if (score(
              base,
              result.world_size,
              model,
              &schedule,
              result.memory_cap,
              c) &&
          c.step_s < (1.0 - margin) * built_in.step_s &&
          (!won[k] || c.step_s < won[k]->step_s)) {
        won[k] = std::move(c);
      }
    }
  });
  const double tokens =
      static_cast<double>(result.global_batch * base.training.seq_len);
  result.synthesis_layouts = static_cast<int64_t>(picked.size());
  for (auto& c : won) {
    if (c) {
      c->tokens_per_s = tokens / c->step_s;
      c->tokens_per_s_per_rank = c->tokens_per_s / result.world_size;
      result.ranked.push_back(std::move(*c));
      ++result.synthesis_wins;
    }
  }
}

/// Stages that recompute their blocks in backward.
int64_t checkpointed_stages(const PlanCandidate& c) {
  if (c.activation_checkpoint != "full") {
    return 0;
  }
  return c.checkpoint_stages.empty()
             ? c.pp * c.stages_per_rank
             : static_cast<int64_t>(c.checkpoint_stages.size());
}

/// `result.ranked` sorted by prediction: those within `tolerance` of the
/// fastest move to the front, simplest first, then by prediction.
void rank_ties_simplest_first(double tolerance, PlanResult& result) {
  result.tolerance = tolerance;
  auto& ranked = result.ranked;
  if (ranked.empty()) {
    return;
  }
  result.fastest_step_s = ranked.front().step_s;
  const double limit = result.fastest_step_s * (1.0 + tolerance);
  const auto end =
      std::find_if(ranked.begin(), ranked.end(), [&](const PlanCandidate& c) {
        return c.step_s > limit;
      });
  // Sorted by prediction already: a stable sort by simplicity keeps that
  // order among the equally simple.
  std::stable_sort(ranked.begin(), end, plan_simplicity_less);
  result.tied = end - ranked.begin();
}

}  // namespace

bool plan_simplicity_less(const PlanCandidate& a, const PlanCandidate& b) {
  const auto key = [](const PlanCandidate& c) {
    return std::make_tuple(
        c.pp * c.stages_per_rank,
        c.synthesized != nullptr,
        c.split_ranks(),
        c.shard_ranks() > 1,
        c.borrowed_ranks(),
        c.microbatches,
        checkpointed_stages(c));
  };
  return key(a) < key(b);
}

PlanResult plan_layouts(
    const JobConfig& base,
    int64_t world,
    const PlanCosts& costs,
    const PlanOptions& options) {
  pipeline::register_builtin_schedules();
  const ModelArgs args = plan_model_args(base);
  PlanResult result;
  result.world_size = world;
  const auto [found, global_batch] =
      searched_layouts(base, args, world, options);
  result.global_batch = global_batch;
  result.memory_cap = options.memory_per_rank() > 0
                          ? options.memory_per_rank()
                          : static_cast<int64_t>(
                                costs.memory_per_rank_gib.value_or(0.0) * kGiB);
  const int64_t threads =
      options.threads() > 0
          ? options.threads()
          : std::max<unsigned>(1, std::thread::hardware_concurrency());
  const Candidates candidates = valid_candidates(
      base, found, result.global_batch, args, costs, options, threads);
  const CostModel model = cost_model(base, args, costs);
  PlanCandidate smallest =
      score_all(base, candidates, model, threads, /*skip_stored=*/true, result);
  if (result.ranked.empty()) {
    // Nothing fits: every candidate's dry run, for the smallest peak.
    smallest = score_all(
        base, candidates, model, threads, /*skip_stored=*/false, result);
  }
  if (result.ranked.empty()) {
    throw_config_error(
        options.memory_per_rank() > 0
            ? "--memory-per-rank " + gib(result.memory_cap) + " GiB"
            : costs.path + ": memory_per_rank_gib " + gib(result.memory_cap),
        "no plan fits: the smallest peak of the " +
            std::to_string(result.considered) + " candidates is " +
            gib(smallest.peak_bytes) + " GiB (" + describe_layout(smallest) +
            "); allowed: a cap of at least that; try more ranks or a "
            "smaller batch");
  }
  const auto by_step = [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.step_s < b.step_s;
  };
  std::stable_sort(result.ranked.begin(), result.ranked.end(), by_step);
  if (options.synthesize() > 0) {
    synthesize_for_fastest(
        base,
        candidates,
        model,
        threads,
        options.synthesize(),
        std::max(kSynthesisMargin, options.tolerance()),
        result);
    std::stable_sort(result.ranked.begin(), result.ranked.end(), by_step);
  }
  rank_ties_simplest_first(options.tolerance(), result);
  return result;
}

std::string plan_schedule_svg(
    const JobConfig& base, const PlanCandidate& c, const PlanCosts& costs) {
  pipeline::register_builtin_schedules();
  const ModelArgs args = plan_model_args(base);
  const CostModel model = cost_model(base, args, costs);
  const auto costs_of_c = simulation_costs(model, c);
  const auto planned = pipeline::plan_schedule(
      c.synthesized ? *c.synthesized
                    : pipeline::make_schedule(
                          c.schedule, c.pp, c.stages_per_rank, c.microbatches),
      costs_of_c);
  // Timed as it was scored: in the executor's posting order.
  const auto simulation = pipeline::simulate(
      pipeline::posting_order(planned.lowered, on_cuda(costs)), costs_of_c);
  return pipeline::format_schedule(planned.compute, simulation, "svg");
}

}  // namespace baton
