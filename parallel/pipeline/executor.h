#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/loss.h"
#include "models/model_spec.h"
#include "parallel/pipeline/action.h"

namespace baton::dist {
class ProcessGroup;
}

namespace baton::pipeline {

/// One action as it ran on this rank, for the Chrome trace and the bubble.
struct ExecutedAction {
  std::string name;       // Action::str()
  double start_us = 0.0;  // since the executor's epoch
  double end_us = 0.0;
  bool compute = false;
  /// Of [start_us, end_us), the time a compute action waited for a receive
  /// it needed; the rest is its cost.
  double wait_us = 0.0;
};

/// What one run of the schedule (one local batch) produced on this rank.
struct ExecutorRun {
  /// Sum of the token losses of every microbatch, on the rank holding the
  /// last stage; 0 elsewhere.
  double loss_sum = 0.0;
  /// Wall time of the run and the part of it spent computing (F, B, I, W,
  /// the loss); the rest is the bubble (waiting for peers, posting sends).
  double wall_s = 0.0;
  double compute_s = 0.0;
  std::vector<ExecutedAction> actions;
  /// The executor's epoch (the origin of the actions' times) on
  /// std::chrono::steady_clock, in microseconds since that clock's epoch:
  /// on Linux one clock for every process of a machine, so the ranks of one
  /// machine can put their actions on one time line.
  double epoch_us = 0.0;
};

/// The shapes every stage agrees on, so receivers can allocate and check.
struct ExecutorShapes {
  int64_t microbatches = 1;
  int64_t microbatch_size = 1;
  /// Positions of the inputs and labels this rank holds of each sequence
  /// (seq_len / cp where context parallel splits it).
  int64_t seq_len = 1;
  /// Hidden size of the activations between stages.
  int64_t dim = 1;
  /// The activations between stages hold seq_len / sequence_shards
  /// positions: under tensor parallel's sequence parallel each tp rank sends
  /// its shard (to the same tp rank of the next stage).
  int64_t sequence_shards = 1;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  /// Under document masking: positions of each row's documents, the whole
  /// sequence's (seq_len x cp, Batch::documents); 0: no documents.
  int64_t documents_len = 0;

  /// Positions of the activations between stages.
  int64_t hidden_seq_len() const {
    return seq_len / sequence_shards;
  }
};

/// Runs this rank's part of a lowered schedule: F / B / I / W / OVERLAP_F_B
/// on the stages it holds, SEND / RECV through the pipeline group (stages
/// on the same rank hand tensors over locally), REDUCE_GRAD through the
/// caller's callback (the train step reaches each part's gradient
/// synchroniser through the part). Labels travel from the rank of stage 0 to
/// the rank of the last stage once per run, and documents (document
/// masking) to every rank, whose stages' attention reads them. I runs the
/// backward with the
/// stage's linear layers deferring their weight gradients (models/linear.h); W
/// runs what they queued.
class PipelineExecutor {
 public:
  /// `lowered`: the whole lowered schedule (every rank's list). `stages`:
  /// this rank's stage ids and their chunks. `group`: the pipeline group
  /// (group rank = pipeline rank). `loss` is applied on the last stage.
  PipelineExecutor(
      Schedule lowered,
      std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages,
      std::shared_ptr<dist::ProcessGroup> group,
      LossFn loss,
      ExecutorShapes shapes);
  ~PipelineExecutor();

  /// Runs the schedule once. `inputs` / `labels` are (microbatches *
  /// microbatch_size, seq_len) int64 on the rank that holds stage 0 and
  /// undefined elsewhere; `documents` there too, (microbatches *
  /// microbatch_size, documents_len) int64 where shapes.documents_len > 0,
  /// else undefined. Each microbatch's loss is scaled by `loss_scale`
  /// before its backward. Each REDUCE_GRAD action calls `reduce_grad(stage)`
  /// once that stage's gradients are complete; without one (gradient
  /// accumulation before the last micro-step) they do nothing.
  /// Throws std::runtime_error (or dist::CommError) naming the action.
  ExecutorRun run(
      const at::Tensor& inputs,
      const at::Tensor& labels,
      const at::Tensor& documents,
      double loss_scale,
      const std::function<void(int64_t stage)>& reduce_grad = nullptr);

  /// Runs the schedule's forwards alone, without gradients: each rank's F
  /// actions (and OVERLAP_F_B's forward half) with their SEND_F / RECV_F,
  /// in the schedule's order, which removing the backwards cannot
  /// deadlock. The loss of every microbatch is summed on the last stage's
  /// rank (loss_sum); nothing is scaled, no gradient is touched.
  ExecutorRun evaluate(
      const at::Tensor& inputs,
      const at::Tensor& labels,
      const at::Tensor& documents);

  int64_t pp_rank() const;
  const Schedule& schedule() const;

 private:
  /// run() and evaluate(): the labels' and documents' exchange, then this
  /// rank's actions.
  ExecutorRun run_schedule(
      const at::Tensor& inputs,
      const at::Tensor& labels,
      const at::Tensor& documents,
      double loss_scale,
      const std::function<void(int64_t stage)>& reduce_grad);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace baton::pipeline
