#pragma once

#include "parallel/pipeline/action.h"

namespace baton::pipeline {

/// Adds communication to a compute-only schedule, as PyTorch's
/// _add_send_recv does: ranks are scanned in order, each emitting its next
/// compute action once its input is available; when the neighbouring stage
/// of an emitted F (or B / I) lives on another rank, a SEND is appended here
/// and the matching RECV to the peer at that moment, so receivers never order
/// their own receives and every pair is posted in one global order.
/// Neighbours on the same rank (the turn of a V) exchange nothing. A
/// REDUCE_GRAD follows the action that completes a stage's m-th B or W. Idle
/// slots are dropped. Throws ScheduleError when a pass makes no progress
/// (naming each rank's stuck action) or the input already has comms.
Schedule lower_schedule(const Schedule& compute);

}  // namespace baton::pipeline
