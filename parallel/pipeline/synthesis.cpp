#include "parallel/pipeline/synthesis.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <string>

#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedule_state.h"

namespace baton::pipeline {

namespace {

constexpr double kUnknown = -1.0;

/// What a rank would run next, and when.
struct Choice {
  Action action;
  double start = 0.0;
};

/// The greedy's state while it builds one schedule.
class Greedy {
 public:
  Greedy(
      const std::vector<int64_t>& stage_to_rank,
      int64_t microbatches,
      const SimulationCosts& costs,
      const SynthesisRules& rules)
      : to_rank_(stage_to_rank),
        m_(microbatches),
        costs_(costs),
        rules_(rules),
        stages_(static_cast<int64_t>(stage_to_rank.size())),
        f_end_(stages_, std::max<int64_t>(microbatches, 0), kUnknown),
        grad_end_(stages_, std::max<int64_t>(microbatches, 0), kUnknown),
        next_f_(stages_, 0),
        next_b_(stages_, 0) {
    if (stages_ == 0 || microbatches < 1) {
      throw ScheduleError(
          "[synthesis] needs at least one stage and one microbatch, got " +
          std::to_string(stages_) + " stage(s) and " +
          std::to_string(microbatches) + " microbatch(es)");
    }
    pp_ = *std::max_element(to_rank_.begin(), to_rank_.end()) + 1;
    stages_of_.resize(pp_);
    for (int64_t s = 0; s < stages_; ++s) {
      stages_of_.at(to_rank_[s]).push_back(s);
    }
    if (!rules.max_in_flight().empty() &&
        static_cast<int64_t>(rules.max_in_flight().size()) != pp_) {
      throw ScheduleError(
          "[synthesis] " + std::to_string(rules.max_in_flight().size()) +
          " budgets for " + std::to_string(pp_) + " ranks");
    }
    clock_.assign(pp_, 0.0);
    reserved_.assign(pp_, 0);
    limit_.assign(pp_, 0);
    pending_w_.resize(pp_);
    out_.resize(pp_);
    for (int64_t r = 0; r < pp_; ++r) {
      const auto held = static_cast<int64_t>(stages_of_[r].size());
      if (held == 0) {
        throw ScheduleError(
            "[synthesis] rank " + std::to_string(r) + " holds no stage");
      }
      limit_[r] = rules.max_in_flight().empty() ? held * m_
                                                : rules.max_in_flight().at(r);
      if (limit_[r] < held) {
        throw ScheduleError(
            "[synthesis] rank " + std::to_string(r) + " holds " +
            std::to_string(held) + " stages, so its budget of " +
            std::to_string(limit_[r]) +
            " activations cannot take one microbatch through them; "
            "allowed: at least " +
            std::to_string(held));
      }
    }
  }

  Schedule run() {
    int64_t left = stages_ * m_ * (rules_.split_backward() ? 3 : 2);
    while (left > 0) {
      int64_t rank = -1;
      Choice best;
      for (int64_t r = 0; r < pp_; ++r) {
        const auto choice = choose(r);
        if (choice && (rank < 0 || choice->start < best.start)) {
          rank = r;
          best = *choice;
        }
      }
      if (rank < 0) {
        throw ScheduleError(
            "[synthesis] no rank can go on with " + std::to_string(left) +
            " action(s) left (a bug in the synthesiser)");
      }
      execute(rank, best);
      --left;
    }
    Schedule out;
    out.name = "Synthesized";
    out.pp = pp_;
    out.num_stages = stages_;
    out.microbatches = m_;
    out.stage_to_rank = to_rank_;
    out.stages_per_rank = static_cast<int64_t>(stages_of_[0].size());
    for (const auto& held : stages_of_) {
      if (static_cast<int64_t>(held.size()) != out.stages_per_rank) {
        out.stages_per_rank = 0;
      }
    }
    out.ranks = std::move(out_);
    return out;
  }

 private:
  bool remote(int64_t a, int64_t b) const {
    return to_rank_[a] != to_rank_[b];
  }

  double hop(int64_t from, int64_t to) const {
    return remote(from, to) ? costs_.p2p_latency() : 0.0;
  }

  /// When F(s, mb)'s input has been sent (its producer's end); kUnknown
  /// while its producer has not run.
  double forward_ready(int64_t s, int64_t mb) {
    if (s == 0) {
      return 0.0;
    }
    const double end = f_end_.at(s - 1, mb);
    return end < 0.0 ? kUnknown : end;
  }

  /// When an action the rank could start at `now` whose input was sent at
  /// `sent` starts: the lowering mostly places its RECV just before it, and
  /// the data moves once both sides posted (the simulator's rendezvous), a
  /// latency after the later of the two when the input comes from another
  /// rank.
  double start_at(double now, double sent, int64_t from, int64_t to) const {
    return std::max(now, sent) + hop(from, to);
  }

  /// When the backward of (s, mb) has its output gradient.
  double backward_ready(int64_t s, int64_t mb) {
    const double own = f_end_.at(s, mb);
    if (own < 0.0) {
      return kUnknown;
    }
    if (s == stages_ - 1) {
      return own;
    }
    const double end = grad_end_.at(s + 1, mb);
    return end < 0.0 ? kUnknown : std::max(own, end);
  }

  /// Rank r's next action by the rules, or nothing while it must wait for
  /// an action no rank has run yet.
  std::optional<Choice> choose(int64_t r) {
    const double now = clock_[r];
    const ActionKind backward =
        rules_.split_backward() ? ActionKind::kI : ActionKind::kB;
    std::optional<Choice> ready_backward;
    std::optional<Choice> later;  // the first to become ready after now
    const auto consider_later = [&](const Choice& c) {
      if (!later || c.start < later->start ||
          (c.start == later->start && c.action.kind != ActionKind::kF &&
           later->action.kind == ActionKind::kF)) {
        later = c;
      }
    };
    for (const int64_t s : stages_of_[r]) {
      const int64_t mb = next_b_[s];
      if (mb >= next_f_[s]) {
        continue;  // its forward has not run
      }
      const double at = backward_ready(s, mb);
      if (at < 0.0) {
        continue;
      }
      const Choice c{
          Action::make(backward, s, mb),
          s == stages_ - 1 ? std::max(now, at) : start_at(now, at, s + 1, s)};
      if (at <= now) {
        // The oldest microbatch first, then the later stage.
        if (!ready_backward || mb < ready_backward->action.microbatch ||
            (mb == ready_backward->action.microbatch &&
             s > ready_backward->action.stage)) {
          ready_backward = c;
        }
      } else {
        consider_later(c);
      }
    }
    if (ready_backward && !rules_.forward_first()) {
      return ready_backward;
    }
    std::optional<Choice> ready_forward;
    const int64_t held = static_cast<int64_t>(stages_of_[r].size());
    for (const int64_t s : stages_of_[r]) {
      const int64_t mb = next_f_[s];
      if (mb >= m_) {
        continue;
      }
      const bool enters = s == stages_of_[r].front();
      if (enters && reserved_[r] + held > limit_[r]) {
        continue;  // the budget is spent until a backward frees some
      }
      const double at = forward_ready(s, mb);
      if (at < 0.0) {
        continue;
      }
      const Choice c{
          Action::make(ActionKind::kF, s, mb),
          s == 0 ? std::max(now, at) : start_at(now, at, s - 1, s)};
      if (at <= now) {
        if (!ready_forward ||
            (rules_.later_stage_first() ? s > ready_forward->action.stage
                                        : s < ready_forward->action.stage)) {
          ready_forward = c;
        }
      } else {
        consider_later(c);
      }
    }
    if (ready_forward) {
      return ready_forward;
    }
    if (ready_backward) {
      return ready_backward;
    }
    if (!pending_w_[r].empty()) {
      // A W fills the time until something else is ready.
      return Choice{pending_w_[r].front(), now};
    }
    return later;
  }

  /// The compute's own cost plus posting its sends and receives.
  double duration(const Action& a) const {
    double t = action_cost(costs_, a);
    const int64_t s = a.stage;
    const bool has_prev = s > 0 && remote(s - 1, s);
    const bool has_next = s + 1 < stages_ && remote(s + 1, s);
    if (a.kind == ActionKind::kF) {
      t += (has_prev ? costs_.recv_post() : 0.0) +
           (has_next ? costs_.send_post() : 0.0);
    } else if (a.kind == ActionKind::kB || a.kind == ActionKind::kI) {
      t += (has_next ? costs_.recv_post() : 0.0) +
           (has_prev ? costs_.send_post() : 0.0);
    }
    return t;
  }

  void execute(int64_t r, const Choice& c) {
    const Action& a = c.action;
    const double end = c.start + duration(a);
    clock_[r] = end;
    out_[r].push_back(a);
    const int64_t s = a.stage;
    switch (a.kind) {
      case ActionKind::kF:
        f_end_.at(s, a.microbatch) = end;
        ++next_f_[s];
        if (s == stages_of_[r].front()) {
          reserved_[r] += static_cast<int64_t>(stages_of_[r].size());
        }
        break;
      case ActionKind::kB:
        grad_end_.at(s, a.microbatch) = end;
        ++next_b_[s];
        --reserved_[r];
        break;
      case ActionKind::kI:
        grad_end_.at(s, a.microbatch) = end;
        ++next_b_[s];
        pending_w_[r].push_back(Action::make(ActionKind::kW, s, a.microbatch));
        break;
      case ActionKind::kW:
        pending_w_[r].pop_front();
        --reserved_[r];
        break;
      default:
        break;
    }
  }

  const std::vector<int64_t>& to_rank_;
  const int64_t m_;
  const SimulationCosts& costs_;
  const SynthesisRules& rules_;
  const int64_t stages_;
  int64_t pp_ = 0;
  std::vector<std::vector<int64_t>> stages_of_;
  StageGrid<double> f_end_;
  StageGrid<double> grad_end_;
  std::vector<int64_t> next_f_;
  std::vector<int64_t> next_b_;
  std::vector<double> clock_;
  std::vector<int64_t> reserved_;
  std::vector<int64_t> limit_;
  std::vector<std::deque<Action>> pending_w_;
  std::vector<ActionList> out_;
};

}  // namespace

Schedule synthesize_schedule(
    const std::vector<int64_t>& stage_to_rank,
    int64_t microbatches,
    const SimulationCosts& costs,
    const SynthesisRules& rules) {
  return Greedy(stage_to_rank, microbatches, costs, rules).run();
}

SynthesisResult synthesize_best(
    const std::vector<int64_t>& stage_to_rank,
    int64_t microbatches,
    const SimulationCosts& costs,
    const std::vector<std::vector<int64_t>>& budgets,
    bool cuda) {
  std::optional<SynthesisResult> best;
  int64_t tried = 0;
  for (const bool split : {true, false}) {
    for (const bool later_first : {true, false}) {
      for (const bool forward_first : {false, true}) {
        for (const auto& budget : budgets) {
          const auto rules = SynthesisRules()
                                 .split_backward(split)
                                 .later_stage_first(later_first)
                                 .forward_first(forward_first)
                                 .max_in_flight(budget);
          auto planned = plan_schedule(
              synthesize_schedule(stage_to_rank, microbatches, costs, rules),
              costs);
          planned.lowered = posting_order(std::move(planned.lowered), cuda);
          if (!cuda) {  // its receives moved: their timing changes
            planned.simulation = simulate(planned.lowered, costs);
          }
          ++tried;
          if (!best ||
              planned.simulation.makespan < best->planned.simulation.makespan) {
            best = SynthesisResult{std::move(planned), rules, 0};
          }
        }
      }
    }
  }
  if (!best) {
    throw ScheduleError("[synthesis] no budget to try");
  }
  best->tried = tried;
  return std::move(*best);
}

}  // namespace baton::pipeline
