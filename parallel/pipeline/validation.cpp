#include "parallel/pipeline/validation.h"

#include "parallel/pipeline/schedule_state.h"

namespace baton::pipeline {

namespace {

std::string stage_mb(int64_t s, int64_t mb) {
  return "stage " + std::to_string(s) + " microbatch " + std::to_string(mb);
}

class Validator {
 public:
  explicit Validator(const Schedule& s)
      : s_(s),
        last_(s.num_stages - 1),
        forward_(s.num_stages, s.microbatches, 0),
        backward_(s.num_stages, s.microbatches, 0),
        weight_(s.num_stages, s.microbatches, 0),
        send_f_(s.num_stages, s.microbatches, 0),
        recv_f_(s.num_stages, s.microbatches, 0),
        send_b_(s.num_stages, s.microbatches, 0),
        recv_b_(s.num_stages, s.microbatches, 0),
        counts_(s.num_stages),
        reduced_(s.num_stages, 0) {
    for (const auto& rank : s.ranks) {
      for (const auto& slot : rank) {
        if (slot && is_comm(slot->kind)) {
          lowered_ = true;
        }
        if (slot && slot->kind == ActionKind::kReduceGrad) {
          reduces_ = true;
        }
      }
    }
  }

  void run() {
    for (int64_t r = 0; r < s_.pp; ++r) {
      const ActionList& list = s_.ranks[r];
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i]) {
          continue;
        }
        const Action& a = *list[i];
        const auto fail = [&](const std::string& why) {
          throw ScheduleError(
              "[schedule] " + where_in_schedule(r, i, a) + ": " + why);
        };
        if (a.kind == ActionKind::kOverlapFB) {
          check(a.forward_part(), r, fail);
          check(a.backward_part(), r, fail);
        } else {
          check(a, r, fail);
        }
      }
    }
    check_totals();
  }

 private:
  struct Counts {
    int64_t f = 0, b = 0, i = 0, w = 0;
  };

  enum : uint8_t { kNone = 0, kFull = 1, kInput = 2 };

  template <class Fail>
  void check(const Action& a, int64_t r, const Fail& fail) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    if (s < 0 || s > last_) {
      fail("stage out of range [0, " + std::to_string(s_.num_stages) + ")");
    }
    if (s_.stage_to_rank[s] != r) {
      fail(
          "stage " + std::to_string(s) + " lives on rank " +
          std::to_string(s_.stage_to_rank[s]) +
          "; a stage lives on one rank only");
    }
    if (a.kind == ActionKind::kReduceGrad) {
      check_reduce_grad(s, fail);
      return;
    }
    if (mb < 0 || mb >= s_.microbatches) {
      fail(
          "microbatch out of range [0, " + std::to_string(s_.microbatches) +
          ")");
    }
    switch (a.kind) {
      case ActionKind::kF:
      case ActionKind::kB:
      case ActionKind::kI:
      case ActionKind::kW:
        check_compute(a, r, fail);
        return;
      case ActionKind::kSendF:
      case ActionKind::kRecvF:
      case ActionKind::kSendB:
      case ActionKind::kRecvB:
        check_transfer(a, r, fail);
        return;
      default:
        fail("unexpected action kind");
    }
  }

  template <class Fail>
  void check_reduce_grad(int64_t s, const Fail& fail) {
    if (reduced_[s]) {
      fail("a second REDUCE_GRAD of stage " + std::to_string(s));
    }
    const Counts& c = counts_[s];
    if (c.b + c.w != s_.microbatches) {
      fail(
          "REDUCE_GRAD before the stage's last backward (" +
          std::to_string(c.b + c.w) + " of " + std::to_string(s_.microbatches) +
          " done)");
    }
    reduced_[s] = 1;
  }

  /// F, B, I or W of a stage on rank `r`.
  template <class Fail>
  void check_compute(const Action& a, int64_t r, const Fail& fail) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    switch (a.kind) {
      case ActionKind::kF:
        if (lowered_ && prev_remote(s, r) && !recv_f_.at(s, mb)) {
          fail(
              "no earlier RECV_F of its input from rank " +
              std::to_string(s_.stage_to_rank[s - 1]));
        }
        once(forward_, a, "F", fail);
        ++counts_[s].f;
        return;
      case ActionKind::kB:
      case ActionKind::kI:
        if (!forward_.at(s, mb)) {
          fail(
              "backward before the forward of " + stage_mb(s, mb) +
              " on this rank");
        }
        if (backward_.at(s, mb) != kNone) {
          fail("a second backward (B or I) of " + stage_mb(s, mb));
        }
        if (reduced_[s]) {
          fail("backward after the stage's REDUCE_GRAD");
        }
        if (lowered_ && next_remote(s, r) && !recv_b_.at(s, mb)) {
          fail(
              "no earlier RECV_B of its output gradient from rank " +
              std::to_string(s_.stage_to_rank[s + 1]));
        }
        backward_.at(s, mb) = a.kind == ActionKind::kB ? kFull : kInput;
        ++(a.kind == ActionKind::kB ? counts_[s].b : counts_[s].i);
        return;
      default:  // kW
        if (backward_.at(s, mb) != kInput) {
          fail("W needs an earlier I of " + stage_mb(s, mb) + " on this rank");
        }
        if (reduced_[s]) {
          fail("W after the stage's REDUCE_GRAD");
        }
        once(weight_, a, "W", fail);
        ++counts_[s].w;
        return;
    }
  }

  /// SEND_F, RECV_F, SEND_B or RECV_B of a stage on rank `r`.
  template <class Fail>
  void check_transfer(const Action& a, int64_t r, const Fail& fail) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    switch (a.kind) {
      case ActionKind::kSendF:
        if (!next_remote(s, r)) {
          fail("nothing to send: the next stage is absent or on this rank");
        }
        if (!forward_.at(s, mb)) {
          fail("SEND_F before the F of " + stage_mb(s, mb));
        }
        once(send_f_, a, "SEND_F", fail);
        return;
      case ActionKind::kRecvF:
        if (!prev_remote(s, r)) {
          fail(
              "nothing to receive: the previous stage is absent or on this "
              "rank");
        }
        once(recv_f_, a, "RECV_F", fail);
        return;
      case ActionKind::kSendB:
        if (!prev_remote(s, r)) {
          fail(
              "nothing to send: the previous stage is absent or on this "
              "rank");
        }
        if (backward_.at(s, mb) == kNone) {
          fail("SEND_B before the backward of " + stage_mb(s, mb));
        }
        once(send_b_, a, "SEND_B", fail);
        return;
      default:  // kRecvB
        if (!next_remote(s, r)) {
          fail("nothing to receive: the next stage is absent or on this rank");
        }
        once(recv_b_, a, "RECV_B", fail);
        return;
    }
  }

  /// The stage before `s` exists and lives on another rank than `r`.
  bool prev_remote(int64_t s, int64_t r) const {
    return s > 0 && s_.stage_to_rank[s - 1] != r;
  }

  /// The stage after `s` exists and lives on another rank than `r`.
  bool next_remote(int64_t s, int64_t r) const {
    return s < last_ && s_.stage_to_rank[s + 1] != r;
  }

  /// Marks `a`'s (stage, microbatch) in `grid`; fails if it was marked.
  template <class Fail>
  void once(
      StageGrid<uint8_t>& grid,
      const Action& a,
      const char* what,
      const Fail& fail) {
    if (grid.at(a.stage, a.microbatch)) {
      fail(
          std::string("a second ") + what + " of " +
          stage_mb(a.stage, a.microbatch));
    }
    grid.at(a.stage, a.microbatch) = 1;
  }

  void check_totals() {
    const int64_t m = s_.microbatches;
    for (int64_t s = 0; s <= last_; ++s) {
      const Counts& c = counts_[s];
      const std::string where = "[schedule] stage " + std::to_string(s) +
                                " (rank " +
                                std::to_string(s_.stage_to_rank[s]) + "): ";
      if (c.f != m) {
        throw ScheduleError(
            where + std::to_string(c.f) + " forwards, expected " +
            std::to_string(m) + " (one per microbatch)");
      }
      if (c.i != c.w || c.b + (c.i + c.w) / 2 != m) {
        throw ScheduleError(
            where + "B=" + std::to_string(c.b) + " I=" + std::to_string(c.i) +
            " W=" + std::to_string(c.w) +
            ", expected #I == #W and #B + (#I + #W) / 2 == " +
            std::to_string(m));
      }
      if (reduces_ && !reduced_[s]) {
        throw ScheduleError(where + "no REDUCE_GRAD");
      }
      if (!lowered_) {
        continue;
      }
      for (int64_t mb = 0; mb < m; ++mb) {
        if (s < last_ && s_.stage_to_rank[s + 1] != s_.stage_to_rank[s] &&
            send_f_.at(s, mb) != recv_f_.at(s + 1, mb)) {
          throw ScheduleError(
              where + "SEND_F and RECV_F of microbatch " + std::to_string(mb) +
              " are not paired (" + std::to_string(send_f_.at(s, mb)) +
              " send, " + std::to_string(recv_f_.at(s + 1, mb)) +
              " receive on rank " + std::to_string(s_.stage_to_rank[s + 1]) +
              ")");
        }
        if (s > 0 && s_.stage_to_rank[s - 1] != s_.stage_to_rank[s] &&
            send_b_.at(s, mb) != recv_b_.at(s - 1, mb)) {
          throw ScheduleError(
              where + "SEND_B and RECV_B of microbatch " + std::to_string(mb) +
              " are not paired (" + std::to_string(send_b_.at(s, mb)) +
              " send, " + std::to_string(recv_b_.at(s - 1, mb)) +
              " receive on rank " + std::to_string(s_.stage_to_rank[s - 1]) +
              ")");
        }
      }
    }
  }

  const Schedule& s_;
  int64_t last_;
  bool lowered_ = false;
  bool reduces_ = false;
  StageGrid<uint8_t> forward_;
  StageGrid<uint8_t> backward_;
  StageGrid<uint8_t> weight_;
  StageGrid<uint8_t> send_f_;
  StageGrid<uint8_t> recv_f_;
  StageGrid<uint8_t> send_b_;
  StageGrid<uint8_t> recv_b_;
  std::vector<Counts> counts_;
  std::vector<uint8_t> reduced_;
};

}  // namespace

void validate_schedule(const Schedule& schedule) {
  if (schedule.pp < 1 || schedule.num_stages < 1 || schedule.microbatches < 1 ||
      static_cast<int64_t>(schedule.ranks.size()) != schedule.pp ||
      static_cast<int64_t>(schedule.stage_to_rank.size()) !=
          schedule.num_stages) {
    throw ScheduleError(
        "[schedule] malformed schedule: pp=" + std::to_string(schedule.pp) +
        " with " + std::to_string(schedule.ranks.size()) + " rank lists, " +
        std::to_string(schedule.num_stages) + " stages with " +
        std::to_string(schedule.stage_to_rank.size()) +
        " placed, microbatches=" + std::to_string(schedule.microbatches));
  }
  Validator(schedule).run();
}

}  // namespace baton::pipeline
