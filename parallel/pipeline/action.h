#pragma once

// The pipeline schedule IR: an Action is (stage, kind, microbatch); a
// Schedule is one list of actions per rank. Schedules are data: generators
// make them, lowering adds communication, validation and simulation read
// them, and only the executor talks to other ranks.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace baton::pipeline {

/// A malformed or deadlocking schedule. The message names the rank, the step
/// (the action's index in that rank's list) and the action.
class ScheduleError : public std::runtime_error {
 public:
  explicit ScheduleError(const std::string& message)
      : std::runtime_error(message) {}
};

/// What an action does. The string codes are PyTorch's.
enum class ActionKind : uint8_t {
  kF,           ///< forward ("F")
  kB,           ///< full backward: input and weight gradients ("B")
  kI,           ///< backward for the input gradient only ("I")
  kW,           ///< backward for the weight gradient, after its I ("W")
  kSendF,       ///< send a stage's output activation to the next stage
  kRecvF,       ///< receive a stage's input activation from the previous stage
  kSendB,       ///< send a stage's input gradient to the previous stage
  kRecvB,       ///< receive a stage's output gradient from the next stage
  kReduceGrad,  ///< reduce a stage's gradients across data-parallel ranks
  kOverlapFB,   ///< a forward and a backward run together (DualPipeV)
};

/// The string code of `kind`: "F", "SEND_F", "REDUCE_GRAD", ...
std::string_view action_kind_code(ActionKind kind);

/// True for F, B, I, W and OVERLAP_F_B (the actions that do compute).
bool is_compute(ActionKind kind);

/// True for SEND_F, RECV_F, SEND_B and RECV_B.
bool is_comm(ActionKind kind);

/// One step of one rank. For OVERLAP_F_B, `stage` and `microbatch` are the
/// forward's and `backward_stage` / `backward_microbatch` the backward's.
struct Action {
  /// What the action does.
  ActionKind kind = ActionKind::kF;
  /// The stage it runs on (for an overlap: the forward's stage).
  int64_t stage = 0;
  /// The microbatch; -1 for REDUCE_GRAD.
  int64_t microbatch = -1;
  /// OVERLAP_F_B only: the backward's stage.
  int64_t backward_stage = -1;
  /// OVERLAP_F_B only: the backward's microbatch.
  int64_t backward_microbatch = -1;

  /// A simple action.
  static Action make(ActionKind kind, int64_t stage, int64_t microbatch = -1);
  /// `(forward;backward)OVERLAP_F_B`; `forward` must be an F and `backward`
  /// a B.
  static Action overlap(const Action& forward, const Action& backward);

  /// The forward part of an overlap.
  Action forward_part() const;
  /// The backward part of an overlap.
  Action backward_part() const;

  /// PyTorch's string form: `0F1`, `3SEND_F1`, `0REDUCE_GRAD`,
  /// `(0F7;7B3)OVERLAP_F_B`.
  std::string str() const;

  /// Field-wise equality.
  bool operator==(const Action& other) const = default;
};

/// Parses the string form with a full match (no spaces, no leading zeros,
/// an overlap must be `(sF m;sB m)OVERLAP_F_B`). Throws ConfigError naming
/// the string and the accepted forms.
Action parse_action(std::string_view text);

/// One rank's program; std::nullopt is an idle slot (a hint for pictures
/// and grids, ignored by lowering, validation and simulation).
using ActionList = std::vector<std::optional<Action>>;

/// One action list per rank, with the layout it runs on.
struct Schedule {
  /// The generator's name ("Interleaved1F1B") or "custom".
  std::string name;
  /// Pipeline ranks.
  int64_t pp = 0;
  /// Stages per rank; 0 when ranks hold different numbers of stages.
  int64_t stages_per_rank = 0;
  /// Stages in the whole pipeline.
  int64_t num_stages = 0;
  /// Microbatches per step.
  int64_t microbatches = 0;
  /// The rank of each stage.
  std::vector<int64_t> stage_to_rank;
  /// The program of each rank.
  std::vector<ActionList> ranks;

  /// True when any rank holds a SEND, RECV or REDUCE_GRAD (a lowered
  /// schedule).
  bool has_comms() const;
};

}  // namespace baton::pipeline
