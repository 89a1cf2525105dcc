#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <vector>

#include "config/job_config.h"
#include "config/parallel_dims.h"
#include "models/model_args.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "trainer/checkpointer.h"

namespace baton {

namespace dist {
class ProcessGroup;
}
namespace checkpoint_detail {
struct WantedTensor;
}
struct HfFormat;
class DataLoader;
class Tokenizer;
struct OptimizerStateCodec;
class LRSchedulersContainer;
class OptimizersContainer;

/// Where this rank stands in the job, as the checkpoint needs it: the
/// mesh's axes (each with its degree) and this rank's place on each, which
/// the checkpoint names none of.
struct CheckpointLayout {
  /// Global rank and world size.
  int64_t rank = 0;
  int64_t world_size = 1;
  /// The mesh's axes in order, with their degrees; recorded in the index,
  /// and RNG states are restored only under the same ones.
  std::vector<MeshAxis> axes;
  /// This rank's position on each axis.
  dist::MeshCoord coord;
  /// This rank's index and the degree of the dp group (the ranks that read
  /// different batches): the loader state is saved by dp index.
  int64_t dp_rank = 0;
  int64_t dp_size = 1;
  /// The pipeline's stages per rank and schedule ("" without pipelining),
  /// recorded in the index with the axes.
  int64_t stages_per_rank = 1;
  std::string schedule;

  /// `mesh`'s axes and this rank's place in them (dp_rank and dp_size from
  /// its dp group).
  static CheckpointLayout of(const dist::ParallelMesh& mesh);
  /// Whether this rank writes a tensor split along `split` (the axes its
  /// applier marked, ModelPart::grad_split): every other rank along those
  /// axes holds another slice of it, every rank along an axis whose ranks
  /// hold different parameters (pipeline stages) its own tensors, and along
  /// every other axis a copy, which position 0 writes.
  bool writes(const std::vector<std::string>& split) const;
};

/// The registered state layout (optim/optimizer_state.h) of each part's
/// optimizer, checked against the parts: throws CheckpointError naming the
/// optimizer when it has none, or the state field that sums over a
/// dimension the layout splits (no other layout could load it).
std::vector<const OptimizerStateCodec*> checked_state_codecs(
    const ModelParts& parts, const OptimizersContainer& optimizers);

/// Saves and restores everything a run needs to continue as if it had not
/// stopped, in a form that does not depend on the layout. A save at step N
/// writes `<dump_folder>/<checkpoint.folder>/step-N/`:
///   - `rank-RRRRR.safetensors` from each rank that writes a tensor
///     (CheckpointLayout::writes: position 0 of every axis along which the
///     ranks hold copies of it; every rank along the axes its applier split
///     it over, each its slice; every pipeline rank its stages): its
///     parts' parameters under their FQNs
///     (`layers.3.attention.wq.weight`) and the AdamW state as
///     `optimizer.<fqn>.exp_avg`, `.exp_avg_sq`, `.step`;
///   - `index.json`: every tensor's file, dtype, shape and CRC-32, the train
///     state, the LR scheduler's step, each DP rank's loader state and each
///     rank's RNG state.
/// The folder is written as `step-N.partial`, fsynced, then renamed, so a
/// crash mid-save leaves the earlier checkpoints whole. Any degree of any
/// axis, stage count or schedule loads a checkpoint written by any other: ranks
/// read the FQNs they hold, each the part of every saved slice that falls in
/// its own slice (ModelPart::slice). The loader state is restored when the DP
/// degree matches and skipped with a warning otherwise.
///
/// Loading checks everything before changing anything: a truncated file,
/// a checksum mismatch, a missing or extra FQN, or a shape or dtype
/// mismatch throws CheckpointError on every rank, naming the file and the
/// tensor, and leaves the model, optimizers and loader as they were.
///
/// With checkpoint.async the files are written by a background thread from
/// a copy taken at the step; the next save (and finish()) waits for it.
/// Saves talk over `group`, a group of every rank used by nothing else (on
/// Gloo, with a timeout long enough for the slowest writer).
///
/// With checkpoint.initial_load_hf and nothing to resume, load() reads the
/// weights alone from a Hugging Face Llama folder (checkpoint/hf_folder.h)
/// through the same staging: each rank its parts' FQNs, each cut to its
/// slice, checked on every rank before any is applied; export_format hf
/// makes the model-only export that folder.
///
/// At start-up, once the load has been read and checked on every rank (or
/// there is nothing to load), rank 0 tidies the folder: a save that died
/// after its index was written is renamed into place, other leftovers are
/// removed, and with a load_step older than the latest the later
/// checkpoints (an abandoned timeline) are renamed `step-M.superseded` so
/// that neither "latest" nor keep_latest_k sees them again. A load that
/// fails leaves the folder as it was.
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
  /// The run's tokenizer, which an HF export ships as tokenizer.json (with
  /// a tokenizer_config.json) where it can say itself so.
  void set_tokenizer(std::shared_ptr<const Tokenizer> tokenizer) {
    tokenizer_ = std::move(tokenizer);
  }

  TrainState load() override;
  void maybe_save(const TrainState& state, bool last) override;
  void save_now(const TrainState& state) override;
  void finish(const TrainState& state) override;

  /// `<dump_folder>/<checkpoint.folder>`.
  const std::filesystem::path& folder() const {
    return folder_;
  }
  /// The complete checkpoints in `folder`, by step, ascending.
  static std::vector<int64_t> list_steps(const std::filesystem::path& folder);

 private:
  /// What one save writes, taken at the step (a copy when async).
  struct Snapshot;

  void save(const TrainState& state);
  /// Whether this rank writes the parameter `fqn` of `part`, this rank's
  /// `p` (and its optimizer state): CheckpointLayout::writes of its marked
  /// axes, and for a slice only a non-empty one.
  bool writes(
      const ModelPart& part, const std::string& fqn, const at::Tensor& p) const;
  /// How the optimizer of part `i` saves its state (checked at
  /// construction).
  const OptimizerStateCodec& state_codec(size_t i) const {
    return *codecs_.at(i);
  }
  /// Waits for the background save; rethrows its error.
  void wait();
  Snapshot snapshot(const TrainState& state, bool copy) const;
  /// Writes this rank's file and meets the other ranks (every rank).
  void write(const Snapshot& snapshot);
  /// Rank 0: the index, the rename, keep_latest_k.
  void finish_save(
      const Snapshot& snapshot,
      const std::vector<std::string>& rank_metas,
      const std::filesystem::path& tmp,
      std::chrono::steady_clock::time_point start);
  void prune();
  /// What rank 0 finds in the folder at start-up: the step to resume,
  /// where it lies, and the tidying the folder needs.
  struct FolderPlan;
  /// Rank 0: plans, changing nothing. Complete leftovers of interrupted
  /// saves are to be put in place and the others removed; with a
  /// load_step older than the latest, the later steps moved aside.
  FolderPlan plan_folder() const;
  /// Rank 0: carries out the plan's moves.
  void tidy(const FolderPlan& plan) const;

  // The steps of load(), in order.
  /// Rank 0 plans (plan_folder) and every rank learns the step and where
  /// it lies; its error is thrown on every rank.
  FolderPlan agree_on_plan() const;
  /// Rank 0 tidies (only once the load has been read and checked, or when
  /// there is none); its error is thrown on every rank.
  void tidy_everywhere(const FolderPlan& plan) const;
  /// What load() has read and checked, and applies once every rank has.
  struct Staged;
  /// The tensors this rank restores: its parts' weights and (with
  /// `optimizer_state`) their AdamW state.
  using Wanted = checkpoint_detail::WantedTensor;
  std::vector<Wanted> wanted_tensors(bool optimizer_state = true) const;
  /// The FQNs every rank restores (collective).
  std::vector<std::string> fqns_of_every_rank(
      const std::vector<Wanted>& wanted) const;
  /// Reads and checks this rank's tensors from the files the index names.
  void stage_tensors(
      const nlohmann::json& index,
      const std::filesystem::path& dir,
      const std::vector<Wanted>& wanted,
      const std::vector<std::string>& model_fqns,
      Staged& staged) const;
  /// The loader state, the LR step, the token count and the RNG state.
  void stage_state(
      const nlohmann::json& index,
      const std::string& index_path,
      Staged& staged) const;
  /// Phase 2: sets the weights, optimizer state, loader, schedulers, RNG.
  void apply(Staged& staged) const;
  /// checkpoint.initial_load_hf: the weights alone from a Hugging Face
  /// folder of the model's family, in the same two phases (collective).
  void load_hf() const;
  /// Reads this rank's weights from the HF folder's files, renamed and
  /// permuted into Baton's layout, each cut to this rank's slice.
  void stage_hf_tensors(
      const std::vector<Wanted>& wanted,
      const std::vector<std::string>& model_fqns,
      Staged& staged) const;
  /// The model as the Hugging Face layout needs it, from
  /// model_config_json: its family's HF format, its shape, "llama3 8B".
  struct HfModel {
    const HfFormat* format = nullptr;
    ModelArgs args;
    std::string name;
  };
  HfModel hf_model() const;
  void export_model(const TrainState& state);
  /// tokenizer.json and tokenizer_config.json of the run's tokenizer into
  /// the export's folder `tmp` (a warning where it has none).
  void write_hf_tokenizer(
      const std::filesystem::path& tmp, const nlohmann::json& record) const;
  /// Rank 0: merges the ranks' pieces into export/model.safetensors (HF's
  /// names and layout, and its index, with export_format hf).
  void merge_export(
      const TrainState& state,
      const std::filesystem::path& tmp,
      const std::filesystem::path& dir,
      std::chrono::steady_clock::time_point start) const;

  CheckpointConfig config_;
  std::vector<const OptimizerStateCodec*> codecs_;
  std::filesystem::path folder_;
  ModelParts parts_;
  const OptimizersContainer& optimizers_;
  const LRSchedulersContainer& schedulers_;
  DataLoader* dataloader_;
  CheckpointLayout layout_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::string model_config_json_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::thread worker_;
  std::exception_ptr worker_error_;
  int64_t last_saved_step_ = -1;
};

}  // namespace baton
