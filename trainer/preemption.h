#pragma once

#include <chrono>

#include "common/exit_codes.h"

namespace baton {

/// SIGTERM and SIGUSR1 (what `sbatch --signal` sends) ask the run to stop.
/// The handler only records the signal; the train loop asks requested() at
/// each step boundary and every rank agrees on the step (Trainer). A second
/// SIGTERM, or the grace period running out, ends the process at once, as
/// an untrapped SIGTERM would (exit status 143): saves are written to
/// `step-N.partial` and renamed, so the earlier checkpoints stay whole.
class Preemption {
 public:
  /// Installs the handlers of SIGTERM and SIGUSR1 (once per process; the
  /// grace of the latest call counts). `grace`: how long after the first
  /// signal the process may take to stop; 0: no limit.
  static void install(std::chrono::seconds grace);
  /// The first signal received (SIGTERM or SIGUSR1), 0 when none.
  static int requested();
};

}  // namespace baton
