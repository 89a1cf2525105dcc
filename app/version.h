#pragma once

// `baton --version`: what this binary is and what it runs on.

#include <string>

namespace baton {

/// The source tree's commit the binary was built from (12 hex digits,
/// "-dirty" when tracked files had changes, "unknown" outside git);
/// generated on every build (cmake/git_commit.cmake).
const char* git_commit();

/// Baton's version and commit, the libtorch it was built against and runs,
/// CUDA (built with it or not, and the devices this process sees), the
/// BLAS and the CPU attention kernel's instruction set: one fact per line.
std::string version_report();

}  // namespace baton
