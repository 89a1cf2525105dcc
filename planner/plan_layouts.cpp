#include "planner/plan_layouts.h"

// The layouts and candidates the planner searches (plan_layouts.h), and the
// sizes and splits it asks the profile to measure.

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "parallel/axes.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/schedules.h"

namespace baton {

namespace plan_detail {

namespace {

/// The base config's local batch times its data-parallel ranks: the world
/// over its pp and its searched axes' degrees.
int64_t default_global_batch(const JobConfig& base, int64_t world) {
  int64_t model_ranks =
      std::max<int64_t>(1, base.parallelism.pipeline_parallel_degree);
  for (const Parallelism* p : searched_parallelisms()) {
    model_ranks *=
        std::max<int64_t>(1, base.integer(p->axis->degree_key).value_or(1));
  }
  return base.training.local_batch_size *
         std::max<int64_t>(1, world / model_ranks);
}

/// Every split of the blocks over the searched parallelisms' axes whose
/// ranks divide `world`: each axis at 1, or at a degree up to its
/// PlanSearch::max_degree that its check accepts for the model.
std::vector<std::map<std::string, int64_t>> block_splits(
    const JobConfig& base, const ModelArgs& args, int64_t world) {
  std::vector<std::map<std::string, int64_t>> out{{}};
  for (const Parallelism* p : searched_parallelisms()) {
    const std::string& axis = p->axis->name;
    std::vector<std::map<std::string, int64_t>> grown;
    for (const auto& split : out) {
      grown.push_back(split);
      int64_t k = 1;
      for (const auto& [name, degree] : split) {
        k *= degree;
      }
      for (int64_t d = 2; d <= std::min(p->plan->max_degree, world / k); ++d) {
        if ((world / k) % d != 0) {
          continue;
        }
        if (p->check) {
          JobConfig config = base;
          config.set_integer(p->axis->degree_key, d);
          if (p->check(config, ParallelDims::of({{axis, d}}, d), args)) {
            continue;
          }
        }
        auto wider = split;
        wider[axis] = d;
        grown.push_back(std::move(wider));
      }
    }
    out = std::move(grown);
  }
  return out;
}

std::vector<Layout> layouts(
    const JobConfig& base,
    const ModelArgs& args,
    int64_t world,
    int64_t global_batch,
    const PlanOptions& options) {
  std::vector<Layout> out;
  for (auto& split : block_splits(base, args, world)) {
    Layout layout{std::move(split)};
    const int64_t k = layout.split_ranks();
    for (int64_t pp = 1; pp <= std::min(options.max_pp(), world / k); ++pp) {
      if ((world / k) % pp != 0 || pp > args.n_layers) {
        continue;
      }
      layout.pp = pp;
      layout.dp = world / (k * pp);
      if (global_batch % layout.dp == 0) {
        out.push_back(layout);
      }
    }
  }
  return out;
}

/// The stages per rank the registered schedule `name` is searched at (its
/// ScheduleSpec's range, capped at `max_v`).
std::vector<int64_t> stages_per_rank_values(
    const std::string& name, int64_t max_v) {
  const pipeline::ScheduleSpec& spec = pipeline::schedule_registry().get(name);
  const int64_t last = spec.max_stages_per_rank == 0
                           ? max_v
                           : std::min(max_v, spec.max_stages_per_rank);
  std::vector<int64_t> v;
  for (int64_t k = spec.min_stages_per_rank; k <= last; ++k) {
    v.push_back(k);
  }
  // A schedule of a fixed count runs it whatever the cap.
  if (v.empty() && spec.min_stages_per_rank == spec.max_stages_per_rank) {
    v.push_back(spec.min_stages_per_rank);
  }
  return v;
}

std::vector<int64_t> even_split(int64_t n_layers, int64_t stages) {
  std::vector<int64_t> layers(stages, n_layers / stages);
  for (int64_t s = 0; s < n_layers % stages; ++s) {
    ++layers[s];
  }
  return layers;
}

/// The first stage `e` block units lighter (the embedding) and the last
/// `o` (the output) than an equal share of layers + e + o; the layers left
/// spread evenly over the middle stages, the extra ones to the earliest.
std::vector<int64_t> balanced_split(
    int64_t n_layers, int64_t stages, double e, double o) {
  const double share = (n_layers + e + o) / stages;
  const int64_t middle_stages = stages - 2;
  const auto edge = [&](double lighter) {
    return std::clamp<int64_t>(
        std::llround(share - lighter), 1, n_layers - middle_stages - 1);
  };
  std::vector<int64_t> layers(stages, 0);
  layers.front() = edge(e);
  layers.back() = stages == 2 ? n_layers - layers.front() : edge(o);
  if (middle_stages > 0) {
    int64_t left = n_layers - layers.front() - layers.back();
    if (left < middle_stages) {
      return even_split(n_layers, stages);
    }
    for (int64_t s = 1; s <= middle_stages; ++s) {
      layers[s] = left / middle_stages + (s <= left % middle_stages ? 1 : 0);
    }
  }
  if (layers.back() < 1) {
    return even_split(n_layers, stages);
  }
  return layers;
}

/// The searched axes' names ("tp"), for messages.
std::string split_names() {
  std::string names;
  for (const Parallelism* p : searched_parallelisms()) {
    names += (names.empty() ? "" : " x ") + p->axis->name;
  }
  return names.empty() ? "1" : names;
}

/// What each searched axis's degree must be ("tp up to 8 where
/// tensor_parallel accepts it for the model, "), for messages.
std::string split_rules() {
  std::string rules;
  for (const Parallelism* p : searched_parallelisms()) {
    rules += p->axis->name + " up to " + std::to_string(p->plan->max_degree) +
             " where " + p->name + " accepts it for the model, ";
  }
  return rules;
}

[[noreturn]] void throw_no_layout(
    const JobConfig& base,
    const ModelArgs& args,
    int64_t world,
    int64_t global_batch,
    const PlanOptions& options) {
  throw_config_error(
      "--nproc " + std::to_string(world),
      "no layout pp x dp x " + split_names() + " divides " +
          std::to_string(world) + " ranks for " + base.model.name + " " +
          base.model.flavor + " (" + std::to_string(args.n_layers) +
          " layers, " + std::to_string(args.n_heads) +
          " heads) with a global batch of " + std::to_string(global_batch) +
          " sequences; allowed: pp <= the layers and max " +
          std::to_string(options.max_pp()) + ", " + split_rules() +
          "dp dividing the global batch; try another --nproc or "
          "--global-batch");
}

/// `c`'s degree along the mesh axis `axis`.
int64_t axis_degree(const PlanCandidate& c, const std::string& axis) {
  if (axis == kPipelineAxis) {
    return c.pp;
  }
  if (axis == kReplicateAxis) {
    return c.dp_replicate;
  }
  if (axis == kShardAxis) {
    return c.dp_shard;
  }
  return c.split(axis);
}

/// Each choice of the borrowing parallelisms' degrees for `c`: none, and
/// each degree from 2 to a borrowing parallelism's PlanBorrowSearch::
/// max_degree that divides the product of `c`'s degrees of its derived
/// axis's sources and that its check accepts for the model, alone or with
/// the others' (each over the same sources' ranks).
std::vector<std::map<std::string, int64_t>> borrow_choices(
    const JobConfig& base, const ModelArgs& args, const PlanCandidate& c) {
  std::vector<std::map<std::string, int64_t>> out{{}};
  for (const Parallelism* p : borrowing_parallelisms()) {
    const DerivedAxisSpec& axis = *p->derived_axis;
    int64_t ranks = 1;
    std::map<std::string, int64_t> sources;
    for (const std::string& source : axis.sources) {
      sources[source] = axis_degree(c, source);
      ranks *= sources[source];
    }
    std::vector<std::map<std::string, int64_t>> grown;
    for (const auto& choice : out) {
      grown.push_back(choice);
      for (int64_t d = 2; d <= std::min(p->borrow_plan->max_degree, ranks);
           ++d) {
        if (ranks % d != 0) {
          continue;
        }
        if (p->check) {
          JobConfig config = base;
          config.set_integer(axis.degree_key, d);
          ParallelDims dims = ParallelDims::of(sources, ranks);
          dims.add_derived(axis, d);
          if (p->check(config, dims, args)) {
            continue;
          }
        }
        auto wider = choice;
        wider[axis.name] = d;
        grown.push_back(std::move(wider));
      }
    }
    out = std::move(grown);
  }
  return out;
}

}  // namespace

std::pair<std::vector<Layout>, int64_t> searched_layouts(
    const JobConfig& base,
    const ModelArgs& args,
    int64_t world,
    const PlanOptions& options) {
  const int64_t global_batch = options.global_batch() > 0
                                   ? options.global_batch()
                                   : default_global_batch(base, world);
  auto found = layouts(base, args, world, global_batch, options);
  if (found.empty()) {
    throw_no_layout(base, args, world, global_batch, options);
  }
  return {std::move(found), global_batch};
}

void add_candidates(
    const JobConfig& base,
    const Layout& layout,
    int64_t global_batch,
    const ModelArgs& args,
    const MicrobatchCosts& unit,
    const PlanOptions& options,
    std::vector<PlanCandidate>& out) {
  const int64_t local = global_batch / layout.dp;
  // Replicate, shard, and HSDP's replicas of shard groups: dp = r x s.
  std::vector<std::pair<int64_t, int64_t>> dp_modes{{layout.dp, 1}};
  for (int64_t shard = 2; shard <= layout.dp; ++shard) {
    if (layout.dp % shard == 0) {
      dp_modes.push_back({layout.dp / shard, shard});
    }
  }
  // fully_shard's default is one of always (unpipelined) and never
  // (pipelined): both are searched, by name, where it is on (dp_shard x cp
  // above 1); each with every choice of the borrowed degrees.
  // The choices depend on the candidate's data-parallel degrees alone
  // within a layout: each asked of the checks once.
  std::map<
      std::pair<int64_t, int64_t>,
      std::vector<std::map<std::string, int64_t>>>
      choices;
  const auto push = [&](PlanCandidate c) {
    const std::pair<int64_t, int64_t> dp{c.dp_replicate, c.dp_shard};
    auto it = choices.find(dp);
    if (it == choices.end()) {
      it = choices.emplace(dp, borrow_choices(base, args, c)).first;
    }
    for (const auto& borrowed : it->second) {
      c.borrowed = borrowed;
      if (c.shard_ranks() == 1) {
        out.push_back(c);
        continue;
      }
      for (const char* reshard : {"always", "never"}) {
        c.fsdp_reshard = reshard;
        out.push_back(c);
      }
    }
  };
  const double block = unit.block.f + unit.block.b;
  const double e = (unit.embedding.f + unit.embedding.b) / block;
  const double o = (unit.output.f + unit.output.b) / block;
  for (const auto& [replicate, shard] : dp_modes) {
    PlanCandidate c;
    c.pp = layout.pp;
    c.splits = layout.splits;
    c.dp_replicate = replicate;
    c.dp_shard = shard;
    c.local_batch = local;
    if (layout.pp == 1) {
      c.microbatch_size = local;
      c.layers_per_stage = {args.n_layers};
      push(c);
      continue;
    }
    for (const std::string& name : pipeline::schedule_registry().names()) {
      for (const int64_t v :
           stages_per_rank_values(name, options.max_stages_per_rank())) {
        const int64_t stages = layout.pp * v;
        if (stages > args.n_layers) {
          continue;
        }
        for (int64_t mb = 1; mb <= local; ++mb) {
          if (local % mb != 0 || local / mb > options.max_microbatches()) {
            continue;
          }
          c.schedule = name;
          c.stages_per_rank = v;
          c.microbatch_size = mb;
          c.microbatches = local / mb;
          c.balanced = false;
          c.layers_per_stage = even_split(args.n_layers, stages);
          push(c);
          const auto balanced = balanced_split(args.n_layers, stages, e, o);
          if (balanced != c.layers_per_stage) {
            c.balanced = true;
            c.layers_per_stage = balanced;
            push(c);
          }
        }
      }
    }
  }
}

}  // namespace plan_detail

using plan_detail::Layout;
using plan_detail::searched_layouts;

int64_t PlanCandidate::split(const std::string& axis) const {
  const auto it = splits.find(axis);
  return it == splits.end() ? 1 : it->second;
}

int64_t PlanCandidate::split_ranks() const {
  int64_t k = 1;
  for (const auto& [axis, degree] : splits) {
    k *= degree;
  }
  return k;
}

int64_t PlanCandidate::shard_ranks() const {
  return dp_shard * split(kContextAxis);
}

int64_t PlanCandidate::shard_stride() const {
  return split_ranks() / split(kContextAxis);
}

int64_t PlanCandidate::borrowed_degree(const std::string& axis) const {
  const auto it = borrowed.find(axis);
  return it == borrowed.end() ? 1 : it->second;
}

int64_t PlanCandidate::borrowed_ranks() const {
  int64_t k = 1;
  for (const auto& [axis, degree] : borrowed) {
    k *= degree;
  }
  return k;
}

bool PlanCandidate::checkpoints_stage(int64_t stage) const {
  return activation_checkpoint == "full" &&
         (checkpoint_stages.empty() ||
          std::find(
              checkpoint_stages.begin(), checkpoint_stages.end(), stage) !=
              checkpoint_stages.end());
}

std::vector<std::vector<std::string>> split_fqns(
    const std::vector<int64_t>& layers_per_stage) {
  std::vector<std::vector<std::string>> fqns;
  int64_t layer = 0;
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    std::vector<std::string> stage;
    if (s == 0) {
      stage.push_back("tok_embeddings");
    }
    for (int64_t k = 0; k < layers_per_stage[s]; ++k) {
      stage.push_back("layers." + std::to_string(layer++));
    }
    if (s + 1 == layers_per_stage.size()) {
      stage.push_back("norm");
      stage.push_back("output");
    }
    fqns.push_back(std::move(stage));
  }
  return fqns;
}

namespace {

/// The microbatch sizes of `found`'s layouts (those splitting the blocks
/// as `splits` only, when given).
std::vector<int64_t> microbatch_rows(
    const std::vector<Layout>& found,
    int64_t global_batch,
    const PlanOptions& options,
    const std::map<std::string, int64_t>* splits = nullptr) {
  std::vector<int64_t> rows;
  for (const Layout& layout : found) {
    if (splits != nullptr && layout.splits != *splits) {
      continue;
    }
    const int64_t local = global_batch / layout.dp;
    for (int64_t mb = 1; mb <= local; ++mb) {
      const bool pipelined_size = layout.pp > 1 && local % mb == 0 &&
                                  local / mb <= options.max_microbatches();
      if (pipelined_size || (layout.pp == 1 && mb == local)) {
        rows.push_back(mb);
      }
    }
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace

std::vector<int64_t> plan_microbatch_rows(
    const JobConfig& base, int64_t world, const PlanOptions& options) {
  const auto [found, global_batch] =
      searched_layouts(base, plan_model_args(base), world, options);
  return microbatch_rows(found, global_batch, options);
}

int64_t plan_data_parallel_rows(
    const JobConfig& base, int64_t world, const PlanOptions& options) {
  const auto [found, global_batch] =
      searched_layouts(base, plan_model_args(base), world, options);
  for (const Layout& layout : found) {
    if (layout.pp == 1 && layout.splits.empty() && layout.dp == world) {
      return global_batch / world;
    }
  }
  return 0;
}

SplitRows plan_split_rows(
    const JobConfig& base, int64_t world, const PlanOptions& options) {
  const auto [found, global_batch] =
      searched_layouts(base, plan_model_args(base), world, options);
  SplitRows rows;
  for (const Layout& layout : found) {
    if (layout.splits.size() != 1) {
      continue;
    }
    const auto& [axis, degree] = *layout.splits.begin();
    for (const Parallelism* p : searched_parallelisms()) {
      if (p->axis->name == axis && rows[p->name].count(degree) == 0) {
        rows[p->name][degree] =
            microbatch_rows(found, global_batch, options, &layout.splits);
      }
    }
  }
  return rows;
}

}  // namespace baton
