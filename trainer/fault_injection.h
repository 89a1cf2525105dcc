#pragma once

#include <cstdint>
#include <string>

namespace baton {

/// Faults the failure tests inject, from the environment variable
/// BATON_INJECT_FAULT="KIND:RANK:STEP[:ATTEMPTS]" (with ATTEMPTS, only in
/// the first ATTEMPTS attempts of a `--max-restarts` job, by
/// BATON_RESTART_COUNT): at the start of step STEP, global
/// rank RANK throws (KIND throw), kills itself with SIGKILL (kill) or stops
/// answering (hang); with hangaction it stops answering inside the
/// REDUCE_GRAD action of step STEP's pipeline schedule (a pipelined run: the
/// hang report names the action); with killsave the checkpoint save of step
/// STEP kills the process half-way through writing its file, with stallsave
/// it stops there (sleeps) instead, so that a test can signal a save in
/// progress. Unset: nothing. Read and parsed once per process; only
/// the train loop, the checkpoint and the start-up ask it.
class FaultInjection {
 public:
  /// The process's faults; the first call parses the variable and throws
  /// ConfigError (exit code 2) when it is malformed.
  static const FaultInjection& get();

  /// At the start of step `step` on global rank `rank`: throws, kills or
  /// hangs when asked to; otherwise returns.
  void at_step_start(int64_t rank, int64_t step) const;
  /// Inside a pipeline action of the step at_step_start last saw, on
  /// global rank `rank`: hangs when asked to (hangaction); else returns.
  void in_pipeline_action(int64_t rank) const;
  /// True when the save of `step` on `rank` is to die half-way.
  bool kill_during_save(int64_t rank, int64_t step) const;
  /// True when the save of `step` on `rank` is to stall half-way.
  bool stall_during_save(int64_t rank, int64_t step) const;

 private:
  FaultInjection() = default;

  /// throw, kill, hang, hangaction, killsave or stallsave; empty
  /// when unset.
  std::string kind_;
  int64_t rank_ = -1;
  int64_t step_ = -1;
};

}  // namespace baton
