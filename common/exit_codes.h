#pragma once

namespace baton {

/// The exit code of a run stopped by SIGTERM or SIGUSR1 at a step boundary
/// (after saving there when checkpointing is on): EX_TEMPFAIL of
/// sysexits.h, "try again later". The next launch resumes.
inline constexpr int kPreemptedExitCode = 75;

}  // namespace baton
