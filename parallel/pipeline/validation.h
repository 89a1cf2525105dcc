#pragma once

#include "parallel/pipeline/action.h"

namespace baton::pipeline {

/// Checks a schedule, compute-only or lowered, and throws ScheduleError at
/// the first problem, naming the rank, the step (index in that rank's list,
/// idle slots included) and the action. Checked: stages and microbatches in
/// range; each stage on one rank only (and on the rank its placement says);
/// B and I after the F of the same (stage, microbatch) on that rank, W after
/// its I, nothing twice; per stage m distinct F, #I == #W and
/// #B + (#I + #W) / 2 == m. For a lowered schedule also: a RECV before each
/// F / B / I whose neighbour stage lives on another rank, each SEND after
/// the action producing it and paired with exactly one RECV on the peer, no
/// communication between stages on the same rank, and one REDUCE_GRAD per
/// stage after its last backward.
void validate_schedule(const Schedule& schedule);

}  // namespace baton::pipeline
