#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainer/checkpointer.h"
#include "trainer/job_config.h"
#include "trainer/model_parts.h"

namespace baton {

namespace dist {
class ProcessGroup;
}
class DataLoader;
class LRSchedulersContainer;
class OptimizersContainer;

/// Where this rank stands in the job, as the checkpoint needs it.
struct CheckpointLayout {
  int64_t rank = 0;
  int64_t world_size = 1;
  /// This rank's data-parallel index and degree: the loader state is saved
  /// per DP rank, and only DP rank 0 writes tensors (replicas hold the same).
  int64_t dp_rank = 0;
  int64_t dp_size = 1;
  /// "pp 2, 2 stages per rank (Interleaved1F1B), dp 1": recorded in the
  /// index; RNG states are restored only under the same layout.
  std::string description = "one process";
};

/// Saves and restores everything a run needs to continue as if it had not
/// stopped, in a form that does not depend on the layout. A save at step N
/// writes `<dump_folder>/<checkpoint.folder>/step-N/`:
///   - `rank-RRRRR.safetensors` from each rank with DP index 0: its parts'
///     parameters under their FQNs (`layers.3.attention.wq.weight`) and the
///     AdamW state as `optimizer.<fqn>.exp_avg`, `.exp_avg_sq`, `.step`;
///   - `index.json`: every tensor's file, dtype, shape and CRC-32, the train
///     state, the LR scheduler's step, each DP rank's loader state and each
///     rank's RNG state.
/// The folder is written as `step-N.partial`, fsynced, then renamed, so a
/// crash mid-save leaves the earlier checkpoints whole. Any pp degree,
/// stage count, schedule or DP degree loads a checkpoint written by any
/// other: ranks read the FQNs they hold. The loader state is restored when
/// the DP degree matches and skipped with a warning otherwise.
///
/// Loading checks everything before changing anything: a truncated file,
/// a checksum mismatch, a missing or extra FQN, or a shape or dtype
/// mismatch throws CheckpointError on every rank, naming the file and the
/// tensor, and leaves the model, optimizers and loader as they were.
///
/// With checkpoint.async the files are written by a background thread from
/// a copy taken at the step; the next save (and finish()) waits for it.
/// Saves talk over `group`, a group of every rank used by nothing else.
class CheckpointManager final : public Checkpointer {
 public:
  /// `dataloader` is null on ranks that load no data. `model_config_json`
  /// is the model's shape, written beside the model-only export.
  CheckpointManager(
      const CheckpointConfig& config,
      const std::string& dump_folder,
      ModelParts parts,
      const OptimizersContainer& optimizers,
      const LRSchedulersContainer& schedulers,
      DataLoader* dataloader,
      CheckpointLayout layout,
      std::shared_ptr<dist::ProcessGroup> group,
      std::string model_config_json);
  /// Waits for a save in flight (its errors are logged, not thrown).
  ~CheckpointManager() override;

  TrainState load() override;
  void maybe_save(const TrainState& state, bool last) override;
  void finish(const TrainState& state) override;

  /// `<dump_folder>/<checkpoint.folder>`.
  const std::filesystem::path& folder() const {
    return folder_;
  }
  /// The complete checkpoints in `folder`, by step, ascending.
  static std::vector<int64_t> list_steps(const std::filesystem::path& folder);

  struct Snapshot;

 private:
  void save(const TrainState& state);
  /// Waits for the background save; rethrows its error.
  void wait();
  Snapshot snapshot(const TrainState& state, bool copy) const;
  void write(const Snapshot& snapshot);
  void prune();
  void export_model(const TrainState& state);

  CheckpointConfig config_;
  std::filesystem::path folder_;
  ModelParts parts_;
  const OptimizersContainer& optimizers_;
  const LRSchedulersContainer& schedulers_;
  DataLoader* dataloader_;
  CheckpointLayout layout_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::string model_config_json_;
  std::thread worker_;
  std::exception_ptr worker_error_;
  int64_t last_saved_step_ = -1;
};

}  // namespace baton
