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

/// The lowered `schedule` with each RECV moved up to just before the compute
/// action that precedes it on its rank (a RECV with no compute before it
/// stays), so its data can move while that compute runs. The order Gloo's
/// ranks post in (`posting_order`): Gloo holds a send until its
/// receiver has posted, and a receiver that posts just before it needs the
/// data then waits for its peer, busy computing on a shared machine, to
/// answer (on the debug model's LoopedBFS, pp 2, v 3, 16 microbatches of
/// one row: 160 receives, about 50 of them waited on for 0.3-0.5 ms, the
/// step 5-8 % slower than with early posting). Not for NCCL, which runs a
/// pair's sends and receives in one stream in the order posted: a RECV moved
/// above a SEND to the same peer could wait on a send queued behind that
/// SEND on the peer. Everything else keeps its order.
Schedule post_receives_early(Schedule schedule);

/// Throws ScheduleError unless each pair of ranks posts the messages between
/// them in one order on both sides (naming the first that differ): NCCL
/// runs a pair's sends and receives in posted order, so a pair that differs
/// would hang. The lowering's schedules always pass; a lowered CSV may not.
void check_pair_order(const Schedule& lowered);

/// The lowered `schedule` in the order the executor posts it: on CPU
/// tensors (Gloo) receives early (`post_receives_early`), on CUDA ones (NCCL)
/// as lowered, checked by `check_pair_order`. What the trainer runs and what
/// the planner simulates.
Schedule posting_order(Schedule schedule, bool cuda);

}  // namespace baton::pipeline
