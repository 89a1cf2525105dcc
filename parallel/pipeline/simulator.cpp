#include "parallel/pipeline/simulator.h"

#include <algorithm>
#include <optional>

#include "parallel/pipeline/schedule_state.h"

namespace baton::pipeline {

namespace {

constexpr double kNotYet = -1.0;

// When an action may start, or what it waits for.
struct Readiness {
  bool ready = false;
  double inputs_at = 0.0;
  std::string waiting_for;
};

class Simulator {
 public:
  Simulator(const Schedule& s, const SimulationCosts& costs)
      : s_(s),
        costs_(costs),
        last_(s.num_stages - 1),
        explicit_comms_(false),
        f_end_(s.num_stages, s.microbatches, kNotYet),
        grad_end_(s.num_stages, s.microbatches, kNotYet),
        i_end_(s.num_stages, s.microbatches, kNotYet),
        send_f_(s.num_stages, s.microbatches, kNotYet),
        send_b_(s.num_stages, s.microbatches, kNotYet),
        recv_f_(s.num_stages, s.microbatches, kNotYet),
        recv_b_(s.num_stages, s.microbatches, kNotYet),
        recv_posted_f_(s.num_stages, s.microbatches, kNotYet),
        recv_posted_b_(s.num_stages, s.microbatches, kNotYet),
        clock_(s.pp, 0.0),
        in_flight_(s.pp, 0) {
    for (const auto& rank : s.ranks) {
      for (const auto& slot : rank) {
        explicit_comms_ = explicit_comms_ || (slot && is_comm(slot->kind));
      }
    }
    out_.busy.assign(s.pp, 0.0);
    out_.peak_activations.assign(s.pp, 0);
    out_.timeline.resize(s.pp);
    for (int64_t r = 0; r < s.pp; ++r) {
      out_.timeline[r].reserve(s.ranks[r].size());
    }
  }

  SimulationResult run() {
    std::vector<size_t> next(s_.pp, 0);
    std::vector<uint8_t> ran(s_.pp, 0);
    const auto has_next = [&](int64_t r) {
      const ActionList& list = s_.ranks[r];
      while (next[r] < list.size() && !list[next[r]]) {
        ++next[r];
      }
      return next[r] < list.size();
    };
    int64_t step = 0;
    while (true) {
      bool remaining = false;
      bool progress = false;
      std::fill(ran.begin(), ran.end(), 0);
      // A second pass lets a rank run what a later rank unblocked in the same
      // step (PyTorch's _simulate_comms_compute does the same).
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t r = 0; r < s_.pp; ++r) {
          if (ran[r] || !has_next(r)) {
            continue;
          }
          remaining = true;
          const Action& a = *s_.ranks[r][next[r]];
          const Readiness ready = readiness(a, r);
          if (!ready.ready) {
            continue;
          }
          execute(a, r, static_cast<int64_t>(next[r]), step, ready.inputs_at);
          ++next[r];
          ran[r] = 1;
          progress = true;
        }
      }
      if (!remaining) {
        break;
      }
      if (!progress) {
        Deadlock deadlock;
        deadlock.step = step;
        describe_ = true;
        for (int64_t r = 0; r < s_.pp; ++r) {
          if (has_next(r)) {
            const Action& a = *s_.ranks[r][next[r]];
            deadlock.stuck.push_back(StuckAction{
                r,
                static_cast<int64_t>(next[r]),
                a,
                readiness(a, r).waiting_for});
          }
        }
        out_.deadlock = std::move(deadlock);
        break;
      }
      ++step;
    }
    out_.steps = step;
    out_.makespan = *std::max_element(clock_.begin(), clock_.end());
    out_.bubble_fraction.assign(s_.pp, 0.0);
    for (int64_t r = 0; r < s_.pp; ++r) {
      if (out_.makespan > 0.0) {
        out_.bubble_fraction[r] =
            (out_.makespan - out_.busy[r]) / out_.makespan;
      }
    }
    return std::move(out_);
  }

 private:
  int64_t rank_of(int64_t stage) const {
    return s_.stage_to_rank[stage];
  }

  // What a blocked action waits for; built only for the deadlock report,
  // as building it for every readiness check would dominate the run time.
  std::string on_rank(const Action& a, int64_t rank) const {
    return describe_ ? a.str() + " on rank " + std::to_string(rank) : "";
  }

  std::string backward_of(int64_t s, int64_t mb, int64_t rank) const {
    return describe_
               ? "the backward of stage " + std::to_string(s) + " microbatch " +
                     std::to_string(mb) + " on rank " + std::to_string(rank)
               : "";
  }

  // The input of F(s, mb) on rank r.
  Readiness forward_input(int64_t s, int64_t mb, int64_t r) {
    if (s == 0) {
      return {true, 0.0, ""};
    }
    if (explicit_comms_ && rank_of(s - 1) != r) {
      const double at = recv_f_.at(s, mb);
      return {
          at >= 0.0,
          at,
          recv_posted_f_.at(s, mb) < 0.0
              ? on_rank(Action::make(ActionKind::kRecvF, s, mb), r)
              : on_rank(
                    Action::make(ActionKind::kSendF, s - 1, mb),
                    rank_of(s - 1))};
    }
    const double end = f_end_.at(s - 1, mb);
    const double hop = rank_of(s - 1) == r ? 0.0 : costs_.p2p_latency();
    return {
        end >= 0.0,
        end + hop,
        on_rank(Action::make(ActionKind::kF, s - 1, mb), rank_of(s - 1))};
  }

  // The output gradient of stage s, microbatch mb, on rank r.
  Readiness backward_input(int64_t s, int64_t mb, int64_t r) {
    const double own = f_end_.at(s, mb);
    if (own < 0.0) {
      return {false, 0.0, on_rank(Action::make(ActionKind::kF, s, mb), r)};
    }
    if (s == last_) {
      return {true, own, ""};
    }
    Readiness out;
    if (explicit_comms_ && rank_of(s + 1) != r) {
      const double at = recv_b_.at(s, mb);
      out = {
          at >= 0.0,
          at,
          recv_posted_b_.at(s, mb) < 0.0
              ? on_rank(Action::make(ActionKind::kRecvB, s, mb), r)
              : on_rank(
                    Action::make(ActionKind::kSendB, s + 1, mb),
                    rank_of(s + 1))};
    } else {
      const double end = grad_end_.at(s + 1, mb);
      const double hop = rank_of(s + 1) == r ? 0.0 : costs_.p2p_latency();
      out = {end >= 0.0, end + hop, backward_of(s + 1, mb, rank_of(s + 1))};
    }
    out.inputs_at = std::max(out.inputs_at, own);
    return out;
  }

  Readiness readiness(const Action& a, int64_t r) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    switch (a.kind) {
      case ActionKind::kF:
        return forward_input(s, mb, r);
      case ActionKind::kB:
      case ActionKind::kI:
        return backward_input(s, mb, r);
      case ActionKind::kOverlapFB: {
        Readiness f = forward_input(s, mb, r);
        const Readiness b =
            backward_input(a.backward_stage, a.backward_microbatch, r);
        if (!f.ready) {
          return f;
        }
        if (!b.ready) {
          return b;
        }
        f.inputs_at = std::max(f.inputs_at, b.inputs_at);
        return f;
      }
      case ActionKind::kW: {
        const double at = i_end_.at(s, mb);
        return {at >= 0.0, at, on_rank(Action::make(ActionKind::kI, s, mb), r)};
      }
      case ActionKind::kSendF: {
        const double at = f_end_.at(s, mb);
        return {at >= 0.0, at, on_rank(Action::make(ActionKind::kF, s, mb), r)};
      }
      case ActionKind::kSendB: {
        const double at = grad_end_.at(s, mb);
        return {at >= 0.0, at, backward_of(s, mb, r)};
      }
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:  // posting a receive waits for nothing
      case ActionKind::kReduceGrad:
        return {true, 0.0, ""};
    }
    return {};
  }

  /// Once a message's SEND and RECV are both posted: when its data is
  /// usable.
  void meet(double sent, double received, double& usable) const {
    if (sent >= 0.0 && received >= 0.0) {
      usable = std::max(sent, received) + costs_.p2p_latency();
    }
  }

  /// The action's own entry in `per_action`, if it has one.
  std::optional<double> own_cost(const Action& a) const {
    if (costs_.per_action().empty()) {
      return std::nullopt;
    }
    const auto it = costs_.per_action().find(a.str());
    if (it == costs_.per_action().end()) {
      return std::nullopt;
    }
    return it->second;
  }

  /// A SEND's or RECV's time to post: its own entry, else its kind's.
  double comm_cost(const Action& a) const {
    if (!is_comm(a.kind)) {
      return 0.0;
    }
    if (const auto own = own_cost(a)) {
      return *own;
    }
    return a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB
               ? costs_.send_post()
               : costs_.recv_post();
  }

  double cost(const Action& a) const {
    const double base = action_cost(costs_, a);
    if (!costs_.variation() || is_comm(a.kind) ||
        a.kind == ActionKind::kReduceGrad) {
      return base;
    }
    return std::max(0.0, base + costs_.variation()(a));
  }

  void finish_compute(const Action& part, double end, int64_t r) {
    const int64_t s = part.stage;
    const int64_t mb = part.microbatch;
    if (part.kind == ActionKind::kF) {
      f_end_.at(s, mb) = end;
      ++in_flight_[r];
    } else if (part.kind == ActionKind::kB || part.kind == ActionKind::kI) {
      grad_end_.at(s, mb) = end;
      if (part.kind == ActionKind::kI) {
        i_end_.at(s, mb) = end;
      }
    }
    // The activations are held until the backward is whole: W still reads
    // them.
    if (part.kind == ActionKind::kB || part.kind == ActionKind::kW) {
      --in_flight_[r];
    }
  }

  void execute(
      const Action& a,
      int64_t r,
      int64_t index,
      int64_t step,
      double inputs_at) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    double start = clock_[r];
    // Posting a SEND or RECV takes the rank its posting cost (not counted
    // as busy).
    double end = start + comm_cost(a);
    switch (a.kind) {
      // Posting does not block; the compute that needs the data waits. The
      // data moves once both sides have posted (Gloo's pairs hold a send
      // until the receiver says it is ready; NCCL's send and recv meet in
      // one kernel): usable a latency after the later post, whichever of
      // the two the simulation reaches first.
      case ActionKind::kSendF:
        send_f_.at(s, mb) = end;
        meet(
            send_f_.at(s, mb),
            recv_posted_f_.at(s + 1, mb),
            recv_f_.at(s + 1, mb));
        clock_[r] = end;
        break;
      case ActionKind::kSendB:
        send_b_.at(s, mb) = end;
        meet(
            send_b_.at(s, mb),
            recv_posted_b_.at(s - 1, mb),
            recv_b_.at(s - 1, mb));
        clock_[r] = end;
        break;
      case ActionKind::kRecvF:
        recv_posted_f_.at(s, mb) = end;
        meet(send_f_.at(s - 1, mb), end, recv_f_.at(s, mb));
        clock_[r] = end;
        break;
      case ActionKind::kRecvB:
        recv_posted_b_.at(s, mb) = end;
        meet(send_b_.at(s + 1, mb), end, recv_b_.at(s, mb));
        clock_[r] = end;
        break;
      default: {
        start = std::max(start, inputs_at);
        const double c = cost(a);
        end = start + c;
        clock_[r] = end;
        if (a.kind != ActionKind::kReduceGrad) {
          out_.busy[r] += c;
        }
        if (a.kind == ActionKind::kOverlapFB) {
          finish_compute(a.forward_part(), end, r);
          finish_compute(a.backward_part(), end, r);
        } else {
          finish_compute(a, end, r);
        }
        out_.peak_activations[r] =
            std::max(out_.peak_activations[r], in_flight_[r]);
      }
    }
    out_.timeline[r].push_back(TimedAction{a, index, step, start, end});
  }

  const Schedule& s_;
  const SimulationCosts& costs_;
  int64_t last_;
  bool explicit_comms_;
  bool describe_ = false;
  StageGrid<double> f_end_;
  StageGrid<double> grad_end_;  // B or I
  StageGrid<double> i_end_;
  StageGrid<double> send_f_;  // when posted
  StageGrid<double> send_b_;
  StageGrid<double> recv_f_;  // when the data is usable
  StageGrid<double> recv_b_;
  StageGrid<double> recv_posted_f_;  // when the receive was posted
  StageGrid<double> recv_posted_b_;
  std::vector<double> clock_;
  std::vector<int64_t> in_flight_;
  SimulationResult out_;
};

}  // namespace

std::string Deadlock::message() const {
  std::string out = "[schedule] deadlock at step " + std::to_string(step) +
                    ": no rank can run its next action";
  for (const auto& s : stuck) {
    out += "; " + where_in_schedule(s.rank, s.index, s.action) + " waits for " +
           s.waiting_for;
  }
  return out;
}

double SimulationResult::max_bubble_fraction() const {
  double out = 0.0;
  for (const double b : bubble_fraction) {
    out = std::max(out, b);
  }
  return out;
}

double action_cost(const SimulationCosts& costs, const Action& a) {
  if (!costs.per_action().empty()) {
    const auto it = costs.per_action().find(a.str());
    if (it != costs.per_action().end()) {
      return it->second;
    }
  }
  if (a.kind == ActionKind::kOverlapFB && costs.overlap_f_b() < 0.0) {
    // No gain: its forward's and backward's costs, each its stage's.
    return action_cost(costs, a.forward_part()) +
           action_cost(costs, a.backward_part());
  }
  const auto it = costs.per_stage().find({a.stage, a.kind});
  if (it != costs.per_stage().end()) {
    return it->second;
  }
  switch (a.kind) {
    case ActionKind::kF:
      return costs.forward();
    case ActionKind::kB:
      return costs.backward();
    case ActionKind::kI:
      return costs.backward_input();
    case ActionKind::kW:
      return costs.backward_weight();
    case ActionKind::kOverlapFB:
      return costs.overlap_f_b() >= 0.0 ? costs.overlap_f_b()
                                        : costs.forward() + costs.backward();
    case ActionKind::kReduceGrad:
      return costs.reduce_grad();
    default:
      return 0.0;
  }
}

SimulationResult simulate(
    const Schedule& schedule, const SimulationCosts& costs) {
  return Simulator(schedule, costs).run();
}

}  // namespace baton::pipeline
