#include "parallel/pipeline/schedules.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "common/error.h"

namespace baton::pipeline {

namespace {

using K = ActionKind;

Action act(K kind, int64_t stage, int64_t microbatch) {
  return Action::make(kind, stage, microbatch);
}

[[noreturn]] void reject(const std::string& schedule, const std::string& why) {
  throw ConfigError("[schedule] " + schedule + ": " + why);
}

void require_one_stage(const std::string& name, int64_t v) {
  if (v != 1) {
    reject(
        name,
        "runs 1 stage per rank, got --stages-per-rank " + std::to_string(v) +
            "; use Interleaved1F1B or LoopedBFS for more");
  }
}

void require_two_stages(const std::string& name, int64_t v) {
  if (v != 2) {
    reject(
        name,
        "needs exactly 2 stages per rank (V placement), got "
        "--stages-per-rank " +
            std::to_string(v));
  }
}

std::vector<ActionList> gpipe(int64_t p, int64_t v, int64_t m) {
  require_one_stage("GPipe", v);
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t mb = 0; mb < m; ++mb) {
      ranks[r].push_back(act(K::kF, r, mb));
    }
    for (int64_t mb = 0; mb < m; ++mb) {
      ranks[r].push_back(act(K::kB, r, mb));
    }
  }
  return ranks;
}

std::vector<ActionList> one_f_one_b(int64_t p, int64_t v, int64_t m) {
  require_one_stage("1F1B", v);
  if (m < p) {
    reject(
        "1F1B",
        "needs at least as many microbatches as ranks (it hangs otherwise), "
        "got --microbatches " +
            std::to_string(m) + " with --pp " + std::to_string(p) +
            "; use m >= " + std::to_string(p) + " or GPipe");
  }
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    const int64_t warmup = std::min(m, p - r);
    int64_t next_f = 0;
    int64_t next_b = 0;
    while (next_f < warmup) {
      ranks[r].push_back(act(K::kF, r, next_f++));
    }
    while (next_f < m) {
      ranks[r].push_back(act(K::kB, r, next_b++));
      ranks[r].push_back(act(K::kF, r, next_f++));
    }
    while (next_b < m) {
      ranks[r].push_back(act(K::kB, r, next_b++));
    }
  }
  return ranks;
}

std::vector<ActionList> looped_bfs(int64_t p, int64_t v, int64_t m) {
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    ActionList& ops = ranks[r];
    ops.resize(r);  // idle until the first forward reaches this rank
    for (int64_t local = 0; local < v; ++local) {
      for (int64_t mb = 0; mb < m; ++mb) {
        ops.push_back(act(K::kF, local * p + r, mb));
      }
    }
    // Wait for the first backward to come back up from the last rank.
    ops.resize(ops.size() + 2 * (p - 1 - r));
    for (int64_t local = v - 1; local >= 0; --local) {
      for (int64_t mb = m - 1; mb >= 0; --mb) {
        ops.push_back(act(K::kB, local * p + r, mb));
      }
    }
  }
  return ranks;
}

// Interleaved1F1B and InterleavedZeroBubble share PyTorch's
// _get_1f1b_rank_ops: warmup forwards, then steady F + backward (+ W for
// zero bubble), then cooldown backwards (+ W), then leftover W.
std::vector<ActionList> interleaved(
    const std::string& name,
    int64_t p,
    int64_t v,
    int64_t m,
    bool zero_bubble) {
  const int64_t rounds = std::max<int64_t>(1, m / p);
  const int64_t per_round = m / rounds;
  if (m % rounds != 0) {
    reject(
        name,
        "needs the microbatches to be a multiple of the rounds "
        "(max(1, m // p) = " +
            std::to_string(rounds) + "), got --microbatches " +
            std::to_string(m) + " with --pp " + std::to_string(p) +
            "; use a multiple of " + std::to_string(p) + " or fewer than " +
            std::to_string(2 * p));
  }
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    const int64_t hop = zero_bubble ? 1 : 2;
    const int64_t warmup =
        std::min((v - 1) * per_round + hop * (p - 1 - r), m * v);
    const int64_t steady = m * v - warmup;
    const int64_t total = m * v + warmup;  // warmup + steady + cooldown
    const auto forward_stage = [&](int64_t op) {
      return ((op / per_round) % v) * p + r;
    };
    const auto backward_stage = [&](int64_t op) {
      return (v - 1 - ((op - warmup) / per_round) % v) * p + r;
    };
    std::map<int64_t, int64_t> next_f;
    std::map<int64_t, int64_t> next_b;
    std::map<int64_t, int64_t> next_w;
    std::vector<int64_t> backward_ops;
    size_t weights_done = 0;
    const K backward_kind = zero_bubble ? K::kI : K::kB;
    ActionList& ops = ranks[r];
    ops.resize(r);  // idle until the first forward reaches this rank
    const auto emit_weight = [&]() {
      const int64_t stage = backward_stage(backward_ops[weights_done++]);
      ops.push_back(act(K::kW, stage, next_w[stage]++));
    };
    for (int64_t op = 0; op < total; ++op) {
      if (op < warmup) {
        const int64_t stage = forward_stage(op);
        ops.push_back(act(K::kF, stage, next_f[stage]++));
        if (op == warmup - 1) {
          // Idle until the first backward trickles back to this rank.
          const int64_t wait =
              zero_bubble ? p - r - 1 : v * p + 2 * (p - 1 - r) - (warmup + r);
          ops.resize(ops.size() + std::max<int64_t>(0, wait));
        }
        continue;
      }
      if (op < warmup + steady) {
        const int64_t stage = forward_stage(op);
        ops.push_back(act(K::kF, stage, next_f[stage]++));
      } else if (!zero_bubble) {
        ops.emplace_back();  // keeps ranks aligned with 1F1B elsewhere
      }
      const int64_t stage = backward_stage(op);
      ops.push_back(act(backward_kind, stage, next_b[stage]++));
      backward_ops.push_back(op);
      // Rank r delays its weight gradients by r slots.
      if (zero_bubble && op - warmup >= r) {
        emit_weight();
      }
    }
    while (zero_bubble && weights_done < backward_ops.size()) {
      emit_weight();
    }
  }
  return ranks;
}

std::vector<ActionList> interleaved_1f1b(int64_t p, int64_t v, int64_t m) {
  return interleaved("Interleaved1F1B", p, v, m, /*zero_bubble=*/false);
}

std::vector<ActionList> interleaved_zero_bubble(
    int64_t p, int64_t v, int64_t m) {
  return interleaved("InterleavedZeroBubble", p, v, m, /*zero_bubble=*/true);
}

std::vector<ActionList> zbv_zero_bubble(int64_t p, int64_t v, int64_t m) {
  require_two_stages("ZBVZeroBubble", v);
  // Generate for enough microbatches to fill the V, then drop the extra.
  const int64_t n = std::max(2 * p - 1, m);
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    const int64_t c0 = r;
    const int64_t c1 = 2 * p - 1 - r;
    int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    ActionList& ops = ranks[r];
    ops.resize(r);
    for (int64_t i = 0; i < 2 * (p - r) - 1; ++i) {
      ops.push_back(act(K::kF, c0, f0++));
    }
    for (int64_t i = 0; i < r; ++i) {
      ops.push_back(act(K::kF, c1, f1++));
      ops.push_back(act(K::kF, c0, f0++));
    }
    for (int64_t i = 0; i < p - r; ++i) {
      ops.push_back(act(K::kF, c1, f1++));
      ops.push_back(act(K::kI, c1, b1));
      ops.push_back(act(K::kW, c1, b1++));
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) {
        ops.push_back(act(K::kF, c0, f0++));
      }
      ops.push_back(act(K::kI, c0, b0));
      ops.push_back(act(K::kW, c0, b0++));
      ops.push_back(act(K::kF, c1, f1++));
      ops.push_back(act(K::kI, c1, b1));
      ops.push_back(act(K::kW, c1, b1++));
    }
    int64_t w0 = b0, w1 = b1;
    for (int64_t i = 0; i < r; ++i) {
      ops.push_back(act(K::kI, c0, b0++));
      ops.push_back(act(K::kI, c1, b1++));
    }
    for (int64_t i = 0; i < p - r; ++i) {
      ops.push_back(act(K::kI, c0, b0++));
      ops.push_back(act(K::kW, c0, w0++));
    }
    while (w1 < b1) {
      ops.push_back(act(K::kW, c1, w1++));
    }
    while (w0 < b0) {
      ops.push_back(act(K::kW, c0, w0++));
    }
    for (auto& slot : ops) {
      if (slot && slot->microbatch >= m) {
        slot.reset();
      }
    }
  }
  return ranks;
}

/// DualPipeV's actions on rank `r` of `p`: stages r and 2p - 1 - r, `m`
/// microbatches.
ActionList dual_pipe_v_rank(int64_t p, int64_t r, int64_t m) {
  const int64_t s0 = r;
  const int64_t s1 = 2 * p - 1 - r;
  std::map<int64_t, int64_t> next_f;
  std::map<int64_t, int64_t> next_b;                // B and I share one counter
  std::deque<std::pair<int64_t, int64_t>> weights;  // pending (stage, mb)
  ActionList ops;
  const auto f = [&](int64_t s) { return act(K::kF, s, next_f[s]++); };
  const auto b = [&](int64_t s) { return act(K::kB, s, next_b[s]++); };
  const auto i_op = [&](int64_t s) {
    const int64_t mb = next_b[s]++;
    weights.emplace_back(s, mb);
    return act(K::kI, s, mb);
  };
  const auto w = [&]() {
    const auto [s, mb] = weights.front();
    weights.pop_front();
    return act(K::kW, s, mb);
  };
  const auto overlap = [&](int64_t forward_stage, int64_t backward_stage) {
    const Action fwd = f(forward_stage);
    return Action::overlap(fwd, b(backward_stage));
  };
  for (int64_t k = 0; k < 2 * (p - r - 1); ++k) {
    ops.push_back(f(s0));
  }
  for (int64_t k = 0; k < r + 1; ++k) {
    ops.push_back(f(s0));
    ops.push_back(f(s1));
  }
  for (int64_t k = 0; k < p - r - 1; ++k) {
    ops.push_back(i_op(s1));
    ops.push_back(w());
    ops.push_back(f(s1));
  }
  for (int64_t k = 0; k < m - 2 * p + r + 1; ++k) {
    if (k == 0 && r == p - 1) {
      // The turn of the V: not overlapped, to shrink the bubble.
      ops.push_back(f(s0));
      ops.push_back(b(s1));
    } else {
      ops.push_back(overlap(s0, s1));
    }
    ops.push_back(overlap(s1, s0));
  }
  for (int64_t k = 0; k < p - r - 1; ++k) {
    ops.push_back(b(s1));
    ops.push_back(overlap(s1, s0));
  }
  // The second half of the last backwards splits into I and W.
  bool split = false;
  for (int64_t k = 0; k < r + 1; ++k) {
    if (k == (r + 1) / 2 && r % 2 == 1) {
      split = true;
    }
    ops.push_back(split ? i_op(s1) : b(s1));
    if (k == (r + 1) / 2 && r % 2 == 0) {
      split = true;
    }
    ops.push_back(split ? i_op(s0) : b(s0));
  }
  for (int64_t k = 0; k < p - r - 1; ++k) {
    ops.push_back(w());
    ops.push_back(i_op(s0));
  }
  for (int64_t k = 0; k < r + 1; ++k) {
    ops.push_back(w());
  }
  return ops;
}

std::vector<ActionList> dual_pipe_v(int64_t p, int64_t v, int64_t m) {
  require_two_stages("DualPipeV", v);
  if (m < 2 * p) {
    reject(
        "DualPipeV",
        "needs at least 2 * pp microbatches, got --microbatches " +
            std::to_string(m) + " with --pp " + std::to_string(p) +
            "; use m >= " + std::to_string(2 * p));
  }
  std::vector<ActionList> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    ranks[r] = dual_pipe_v_rank(p, r, m);
  }
  return ranks;
}

}  // namespace

Registry<ScheduleSpec>& schedule_registry() {
  static Registry<ScheduleSpec> registry("schedule");
  return registry;
}

void register_builtin_schedules() {
  schedule_registry().add_builtins_once([](Registry<ScheduleSpec>& registry) {
    // `v` stages per rank by default; the planner searches [min_v, max_v]
    // (max_v 0: unbounded).
    const auto add = [&](const char* name,
                         auto generate,
                         PlacementStyle placement,
                         int64_t v,
                         int64_t min_v,
                         int64_t max_v,
                         const char* help) {
      registry.add(
          name, ScheduleSpec{generate, placement, v, min_v, max_v}, help);
    };
    const auto loop = PlacementStyle::kLoop;
    add("GPipe", gpipe, loop, 1, 1, 1, "all forwards, then all backwards");
    add("1F1B",
        one_f_one_b,
        loop,
        1,
        1,
        1,
        "one forward, one backward (m >= p)");
    add("Interleaved1F1B",
        interleaved_1f1b,
        loop,
        2,
        2,
        0,
        "1F1B over several looped stages per rank (Megatron)");
    add("LoopedBFS",
        looped_bfs,
        loop,
        2,
        2,
        0,
        "every forward of each local stage, then every backward");
    add("InterleavedZeroBubble",
        interleaved_zero_bubble,
        loop,
        2,
        2,
        0,
        "ZB1P: interleaved with split backward, W delayed by the rank");
    add("ZBVZeroBubble",
        zbv_zero_bubble,
        PlacementStyle::kV,
        2,
        2,
        2,
        "zero bubble on a V placement (2 stages per rank)");
    add("DualPipeV",
        dual_pipe_v,
        PlacementStyle::kV,
        2,
        2,
        2,
        "DeepSeek's DualPipe on a V placement, overlapping F and B (m >= 2p)");
  });
}

Schedule make_schedule(
    const std::string& name,
    int64_t pp,
    int64_t stages_per_rank,
    int64_t microbatches) {
  register_builtin_schedules();
  const ScheduleSpec& spec = schedule_registry().get(name);
  const int64_t v =
      stages_per_rank == 0 ? spec.default_stages_per_rank : stages_per_rank;
  if (pp < 1 || v < 1 || microbatches < 1) {
    throw ConfigError(
        "[schedule] " + name +
        ": pp, stages per rank and microbatches must "
        "be >= 1, got pp=" +
        std::to_string(pp) + " stages_per_rank=" + std::to_string(v) +
        " microbatches=" + std::to_string(microbatches));
  }
  Schedule out;
  for (const auto& known : schedule_registry().names()) {
    if (to_lower(known) == to_lower(name)) {
      out.name = known;
    }
  }
  out.ranks = spec.generate(pp, v, microbatches);
  out.pp = pp;
  out.stages_per_rank = v;
  out.num_stages = pp * v;
  out.microbatches = microbatches;
  out.stage_to_rank = make_placement(spec.placement, pp, v);
  return out;
}

}  // namespace baton::pipeline
