#pragma once

// CheckpointManager::FolderPlan, for the two files that use it:
// checkpoint_folder.cpp makes and carries it out, checkpoint_load.cpp loads
// the step it names.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace baton {

struct CheckpointManager::FolderPlan {
  /// A rename (`to` set) or a removal (`to` empty), and the log line that
  /// says why.
  struct Move {
    std::filesystem::path from;
    std::filesystem::path to;
    std::string why;
  };
  std::vector<Move> moves;
  /// The step to resume (-1: none) and where its files are now (a complete
  /// `.partial` is read where it lies and renamed after).
  int64_t step = -1;
  std::filesystem::path dir;
};

}  // namespace baton
