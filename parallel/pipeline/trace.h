#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/action.h"
#include "parallel/pipeline/executor.h"

namespace baton::pipeline {

/// Chrome trace JSON ("traceEvents") of executed actions, one process per
/// rank (`pid` = rank); a compute action's `args.wait_us` is the part of
/// its duration spent waiting for a receive it needed.
std::string executed_trace_json(
    const std::vector<std::vector<ExecutedAction>>& ranks);

/// This rank's executed actions of one step as a Chrome trace in
/// `<prefix>.rank<R>.json` (real times), and on pipeline rank 0
/// `<prefix>.simulated.json`, the simulator's timeline of the same schedule
/// with the F, B, I and W costs measured in the step.
void write_pipeline_traces(
    const std::string& prefix,
    const Schedule& lowered,
    int64_t pp_rank,
    const std::vector<ExecutedAction>& actions);

}  // namespace baton::pipeline
