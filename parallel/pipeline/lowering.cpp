#include "parallel/pipeline/lowering.h"

#include <map>
#include <optional>
#include <tuple>

#include "parallel/pipeline/schedule_state.h"

namespace baton::pipeline {

namespace {

class Lowering {
 public:
  explicit Lowering(const Schedule& compute)
      : in_(compute),
        last_stage_(compute.num_stages - 1),
        f_done_(compute.num_stages, compute.microbatches, 0),
        grad_done_(compute.num_stages, compute.microbatches, 0),
        recv_f_(compute.num_stages, compute.microbatches, 0),
        recv_b_(compute.num_stages, compute.microbatches, 0),
        completed_(compute.num_stages, 0) {}

  Schedule run() {
    Schedule out = in_;
    out.ranks.assign(in_.pp, ActionList());
    for (int64_t r = 0; r < in_.pp; ++r) {
      // Each compute action brings about one send and one receive.
      out.ranks[r].reserve(3 * in_.ranks[r].size());
    }
    out_ = &out;
    std::vector<size_t> next(in_.pp, 0);
    const auto skip_idle = [&](int64_t r) {
      while (next[r] < in_.ranks[r].size() && !in_.ranks[r][next[r]]) {
        ++next[r];
      }
      return next[r] < in_.ranks[r].size();
    };
    while (true) {
      bool remaining = false;
      bool progress = false;
      for (int64_t r = 0; r < in_.pp; ++r) {
        if (!skip_idle(r)) {
          continue;
        }
        remaining = true;
        const Action& a = *in_.ranks[r][next[r]];
        if (!ready(a, r)) {
          continue;
        }
        emit(a, r);
        ++next[r];
        progress = true;
      }
      if (!remaining) {
        return out;
      }
      if (!progress) {
        std::string stuck;
        for (int64_t r = 0; r < in_.pp; ++r) {
          if (skip_idle(r)) {
            stuck +=
                "; " +
                where_in_schedule(
                    r, static_cast<int64_t>(next[r]), *in_.ranks[r][next[r]]) +
                " waits for its input";
          }
        }
        throw ScheduleError(
            "[schedule] malformed compute schedule, lowering cannot place "
            "sends and receives" +
            stuck);
      }
    }
  }

 private:
  int64_t rank_of(int64_t stage) const {
    return in_.stage_to_rank[stage];
  }

  bool forward_ready(int64_t s, int64_t mb, int64_t r) {
    if (s == 0) {
      return true;
    }
    return rank_of(s - 1) == r ? f_done_.at(s - 1, mb) : recv_f_.at(s, mb);
  }

  bool backward_ready(int64_t s, int64_t mb, int64_t r) {
    if (s == last_stage_) {
      return true;
    }
    return rank_of(s + 1) == r ? grad_done_.at(s + 1, mb) : recv_b_.at(s, mb);
  }

  bool ready(const Action& a, int64_t r) {
    switch (a.kind) {
      case ActionKind::kF:
        return forward_ready(a.stage, a.microbatch, r);
      case ActionKind::kB:
      case ActionKind::kI:
        return backward_ready(a.stage, a.microbatch, r);
      case ActionKind::kOverlapFB:
        return forward_ready(a.stage, a.microbatch, r) &&
               backward_ready(a.backward_stage, a.backward_microbatch, r);
      default:
        return true;
    }
  }

  void append(int64_t r, const Action& a) {
    out_->ranks[r].emplace_back(a);
  }

  // Appends the communication a compute part needs, then REDUCE_GRAD when it
  // completes its stage's last backward.
  void after(const Action& part, int64_t r) {
    const int64_t s = part.stage;
    const int64_t mb = part.microbatch;
    if (part.kind == ActionKind::kF) {
      f_done_.at(s, mb) = true;
      if (s < last_stage_ && rank_of(s + 1) != r) {
        append(r, Action::make(ActionKind::kSendF, s, mb));
        append(rank_of(s + 1), Action::make(ActionKind::kRecvF, s + 1, mb));
        recv_f_.at(s + 1, mb) = true;
      }
      return;
    }
    if (part.kind == ActionKind::kB || part.kind == ActionKind::kI) {
      grad_done_.at(s, mb) = true;
      if (s > 0 && rank_of(s - 1) != r) {
        append(r, Action::make(ActionKind::kSendB, s, mb));
        append(rank_of(s - 1), Action::make(ActionKind::kRecvB, s - 1, mb));
        recv_b_.at(s - 1, mb) = true;
      }
    }
    if (part.kind == ActionKind::kB || part.kind == ActionKind::kW) {
      if (++completed_[s] == in_.microbatches) {
        append(r, Action::make(ActionKind::kReduceGrad, s));
      }
    }
  }

  void emit(const Action& a, int64_t r) {
    append(r, a);
    if (a.kind == ActionKind::kOverlapFB) {
      after(a.forward_part(), r);
      after(a.backward_part(), r);
    } else {
      after(a, r);
    }
  }

  const Schedule& in_;
  Schedule* out_ = nullptr;
  int64_t last_stage_;
  StageGrid<uint8_t> f_done_;
  StageGrid<uint8_t> grad_done_;  // B or I done: the input gradient exists
  StageGrid<uint8_t> recv_f_;
  StageGrid<uint8_t> recv_b_;
  std::vector<int64_t> completed_;  // B + W per stage
};

void check_compute_only(const Schedule& compute) {
  for (size_t r = 0; r < compute.ranks.size(); ++r) {
    for (size_t i = 0; i < compute.ranks[r].size(); ++i) {
      const auto& slot = compute.ranks[r][i];
      if (!slot) {
        continue;
      }
      const bool in_range =
          slot->stage >= 0 && slot->stage < compute.num_stages &&
          slot->microbatch >= 0 && slot->microbatch < compute.microbatches &&
          (slot->kind != ActionKind::kOverlapFB ||
           (slot->backward_stage >= 0 &&
            slot->backward_stage < compute.num_stages &&
            slot->backward_microbatch >= 0 &&
            slot->backward_microbatch < compute.microbatches));
      if (!is_compute(slot->kind) || !in_range) {
        throw ScheduleError(
            "[schedule] " +
            where_in_schedule(static_cast<int64_t>(r), i, *slot) +
            ": lowering takes compute-only actions (F, B, I, W, OVERLAP_F_B) "
            "with stages in [0, " +
            std::to_string(compute.num_stages) + ") and microbatches in [0, " +
            std::to_string(compute.microbatches) + ")");
      }
    }
  }
}

}  // namespace

Schedule lower_schedule(const Schedule& compute) {
  check_compute_only(compute);
  if (static_cast<int64_t>(compute.stage_to_rank.size()) !=
          compute.num_stages ||
      static_cast<int64_t>(compute.ranks.size()) != compute.pp) {
    throw ScheduleError(
        "[schedule] lowering needs a placement for each of the " +
        std::to_string(compute.num_stages) + " stages and a list per rank");
  }
  return Lowering(compute).run();
}

Schedule post_receives_early(Schedule schedule) {
  for (ActionList& list : schedule.ranks) {
    ActionList out;
    out.reserve(list.size());
    // Where the last compute action went in `out`: a RECV goes before it.
    std::optional<size_t> compute;
    for (auto& slot : list) {
      if (!slot) {
        continue;
      }
      const ActionKind kind = slot->kind;
      if ((kind == ActionKind::kRecvF || kind == ActionKind::kRecvB) &&
          compute) {
        out.insert(
            out.begin() + static_cast<std::ptrdiff_t>(*compute),
            std::move(slot));
        ++*compute;
        continue;
      }
      if (is_compute(kind)) {
        compute = out.size();
      }
      out.push_back(std::move(slot));
    }
    list = std::move(out);
  }
  return schedule;
}

void check_pair_order(const Schedule& lowered) {
  // Per rank and peer: the messages in posted order, each as the SEND that
  // carries it ("F" or "B", the sending stage, the microbatch), beside the
  // action that posts it here.
  struct Posted {
    std::tuple<bool, int64_t, int64_t> message;
    Action action;
    int64_t index;
  };
  std::vector<std::map<int64_t, std::vector<Posted>>> posted(lowered.pp);
  for (int64_t r = 0; r < lowered.pp; ++r) {
    const ActionList& list = lowered.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i] || !is_comm(list[i]->kind)) {
        continue;
      }
      const Action& a = *list[i];
      int64_t from = a.stage;  // the sending stage
      int64_t peer_stage = a.stage;
      bool backward = false;
      switch (a.kind) {
        case ActionKind::kSendF:
          peer_stage = a.stage + 1;
          break;
        case ActionKind::kRecvF:
          from = peer_stage = a.stage - 1;
          break;
        case ActionKind::kSendB:
          backward = true;
          peer_stage = a.stage - 1;
          break;
        default:  // kRecvB
          backward = true;
          from = peer_stage = a.stage + 1;
      }
      posted[r][lowered.stage_to_rank.at(peer_stage)].push_back(
          {{backward, from, a.microbatch}, a, static_cast<int64_t>(i)});
    }
  }
  for (int64_t r = 0; r < lowered.pp; ++r) {
    for (const auto& [p, mine] : posted[r]) {
      if (p <= r) {
        continue;
      }
      const auto& theirs = posted[p][r];
      for (size_t k = 0; k < std::max(mine.size(), theirs.size()); ++k) {
        if (k < mine.size() && k < theirs.size() &&
            mine[k].message == theirs[k].message) {
          continue;
        }
        const auto name = [](int64_t rank,
                             const std::vector<Posted>& list,
                             size_t k) {
          return k < list.size()
                     ? where_in_schedule(rank, list[k].index, list[k].action)
                     : "rank " + std::to_string(rank) + " posts no more";
        };
        throw ScheduleError(
            "[schedule] ranks " + std::to_string(r) + " and " +
            std::to_string(p) + " post their messages in different orders (" +
            name(r, mine, k) + " against " + name(p, theirs, k) +
            "); NCCL runs a pair's sends and receives in posted order, so " +
            "this schedule would hang on CUDA");
      }
    }
  }
}

Schedule posting_order(Schedule schedule, bool cuda) {
  if (cuda) {
    check_pair_order(schedule);
    return schedule;
  }
  return post_receives_early(std::move(schedule));
}

}  // namespace baton::pipeline
