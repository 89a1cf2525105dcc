#include "parallel/pipeline/action.h"

#include <array>

#include "common/error.h"

namespace baton::pipeline {

namespace {

struct KindCode {
  ActionKind kind;
  std::string_view code;
};

// No code is a prefix of another, so the first code that matches decides.
constexpr std::array<KindCode, 9> kSimpleCodes = {{
    {ActionKind::kF, "F"},
    {ActionKind::kB, "B"},
    {ActionKind::kI, "I"},
    {ActionKind::kW, "W"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
}};

constexpr std::string_view kOverlapSuffix = ")OVERLAP_F_B";

[[noreturn]] void throw_parse_error(std::string_view text, const char* why) {
  throw ConfigError(
      "[schedule] cannot parse action '" + std::string(text) + "': " + why +
      "; allowed: STAGE CODE MICROBATCH with CODE one of F, B, I, W, SEND_F, "
      "RECV_F, SEND_B, RECV_B (e.g. 0F1, 3SEND_F1), STAGE REDUCE_GRAD "
      "(e.g. 0REDUCE_GRAD), or (0F7;7B3)OVERLAP_F_B");
}

// Reads a non-negative decimal without sign or leading zeros from the front
// of `text`; returns the digits consumed (0 when there are none).
size_t read_index(std::string_view text, int64_t& out) {
  size_t n = 0;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') {
    ++n;
  }
  if (n == 0 || n > 9 || (n > 1 && text[0] == '0')) {
    return 0;
  }
  out = 0;
  for (size_t i = 0; i < n; ++i) {
    out = out * 10 + (text[i] - '0');
  }
  return n;
}

Action parse_simple(std::string_view text, std::string_view whole) {
  int64_t stage = 0;
  const size_t stage_digits = read_index(text, stage);
  if (stage_digits == 0) {
    throw_parse_error(whole, "expected a stage index (digits, no leading 0)");
  }
  const std::string_view rest = text.substr(stage_digits);
  for (const auto& [kind, code] : kSimpleCodes) {
    if (rest.substr(0, code.size()) != code) {
      continue;
    }
    const std::string_view tail = rest.substr(code.size());
    if (kind == ActionKind::kReduceGrad) {
      if (!tail.empty()) {
        throw_parse_error(whole, "REDUCE_GRAD takes no microbatch");
      }
      return Action::make(kind, stage);
    }
    int64_t microbatch = 0;
    const size_t mb_digits = read_index(tail, microbatch);
    if (mb_digits == 0 || mb_digits != tail.size()) {
      throw_parse_error(
          whole,
          "expected a microbatch index (digits, no leading 0) to end it");
    }
    return Action::make(kind, stage, microbatch);
  }
  throw_parse_error(whole, "unknown action code");
}

}  // namespace

std::string_view action_kind_code(ActionKind kind) {
  if (kind == ActionKind::kOverlapFB) {
    return "OVERLAP_F_B";
  }
  for (const auto& entry : kSimpleCodes) {
    if (entry.kind == kind) {
      return entry.code;
    }
  }
  return "?";
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kF || kind == ActionKind::kB ||
         kind == ActionKind::kI || kind == ActionKind::kW ||
         kind == ActionKind::kOverlapFB;
}

bool is_comm(ActionKind kind) {
  return kind == ActionKind::kSendF || kind == ActionKind::kRecvF ||
         kind == ActionKind::kSendB || kind == ActionKind::kRecvB;
}

Action Action::make(ActionKind kind, int64_t stage, int64_t microbatch) {
  Action a;
  a.kind = kind;
  a.stage = stage;
  a.microbatch = microbatch;
  return a;
}

Action Action::overlap(const Action& forward, const Action& backward) {
  if (forward.kind != ActionKind::kF || backward.kind != ActionKind::kB) {
    throw std::logic_error(
        "[schedule] OVERLAP_F_B joins an F and a B, got " + forward.str() +
        " and " + backward.str());
  }
  Action a;
  a.kind = ActionKind::kOverlapFB;
  a.stage = forward.stage;
  a.microbatch = forward.microbatch;
  a.backward_stage = backward.stage;
  a.backward_microbatch = backward.microbatch;
  return a;
}

Action Action::forward_part() const {
  return make(ActionKind::kF, stage, microbatch);
}

Action Action::backward_part() const {
  return make(ActionKind::kB, backward_stage, backward_microbatch);
}

std::string Action::str() const {
  if (kind == ActionKind::kOverlapFB) {
    return "(" + forward_part().str() + ";" + backward_part().str() + ")" +
           std::string(action_kind_code(kind));
  }
  std::string out = std::to_string(stage) + std::string(action_kind_code(kind));
  if (kind != ActionKind::kReduceGrad) {
    out += std::to_string(microbatch);
  }
  return out;
}

Action parse_action(std::string_view text) {
  if (text.empty()) {
    throw_parse_error(text, "empty string (an idle slot is an empty CSV cell)");
  }
  if (text.front() != '(') {
    return parse_simple(text, text);
  }
  if (text.size() <= kOverlapSuffix.size() ||
      text.substr(text.size() - kOverlapSuffix.size()) != kOverlapSuffix) {
    throw_parse_error(text, "a '(' must open '(F;B)OVERLAP_F_B'");
  }
  const std::string_view inner =
      text.substr(1, text.size() - 1 - kOverlapSuffix.size());
  const size_t semi = inner.find(';');
  if (semi == std::string_view::npos) {
    throw_parse_error(text, "an overlap needs two actions separated by ';'");
  }
  const Action forward = parse_simple(inner.substr(0, semi), text);
  const Action backward = parse_simple(inner.substr(semi + 1), text);
  if (forward.kind != ActionKind::kF || backward.kind != ActionKind::kB) {
    throw_parse_error(text, "an overlap is an F then a B");
  }
  return Action::overlap(forward, backward);
}

bool Schedule::has_comms() const {
  for (const auto& rank : ranks) {
    for (const auto& slot : rank) {
      if (slot &&
          (is_comm(slot->kind) || slot->kind == ActionKind::kReduceGrad)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace baton::pipeline
