#pragma once

// The `baton` command line as a function, for a program of one's own that
// adds its pieces to Baton's registries (appliers, parallelisms, builders,
// optimizers, LR schedules, datasets, tokenizers, model families) and hands
// over:
//
//   int main(int argc, char** argv) {
//     my_extension::register_all();
//     return baton::run(argc, argv);
//   }
//
// Its config keys and registry names are then known to the config check,
// --print-config, --dry-run and `baton plan`. Ranks that `--nproc` starts,
// and the restarts that set the OpenMP wait policy, run the same program
// again, so every rank registers the same pieces.

namespace baton {

/// Runs the command `argv` names (`baton train ...`, `baton plan ...`) and
/// returns the exit code: 0 success, 2 bad usage or config, 1 failure, 75 a
/// run stopped by SIGTERM or SIGUSR1 (docs/ARCHITECTURE.md §4). Errors are
/// printed to stderr as `error: ...`; nothing is thrown.
int run(int argc, char** argv);

}  // namespace baton
