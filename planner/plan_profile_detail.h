#pragma once

// What the profile's two files share (planner/ only): the clock and the
// statistics of its timed runs, the ranks lined up before each, the model's
// chunks as a pipeline stage builds them, and the pipeline probe
// (plan_profile_pipeline.cpp) that times the block for plan_profile.cpp.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/job_config.h"
#include "models/loss.h"
#include "models/model_args.h"
#include "parallel/applier.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "planner/plan.h"
#include "planner/plan_profile.h"

namespace baton::plan_detail {

using Clock = std::chrono::steady_clock;

/// Seconds from `start` to now.
double since(Clock::time_point start);

/// The median of `v` (the links' figure, and the pipeline messages').
double median(std::vector<double> v);

/// The figure of a piece of a step: a step costs the sum of its pieces, so
/// their means, slow runs included (an action's occasional stall, when the
/// other ranks' work or the machine gets in its way, is part of what a
/// step pays; the medians left it out and under-predicted real runs by
/// 5-10 %, docs/plan.md).
double mean(const std::vector<double>& v);

/// The sample standard deviation (0 for fewer than two): how much a piece
/// varies from one run to the next, the cost file's `spread`.
double deviation(const std::vector<double>& v);

/// The ranks of the launch, lined up before each timed piece so that they
/// run it together.
class Ranks {
 public:
  explicit Ranks(dist::Runtime* runtime)
      : world_(runtime != nullptr ? runtime->world().get() : nullptr) {}

  int64_t rank() const {
    return world_ != nullptr ? world_->rank() : 0;
  }
  int64_t size() const {
    return world_ != nullptr ? world_->size() : 1;
  }
  void line_up() const {
    if (world_ != nullptr) {
      world_->barrier();
    }
  }
  dist::ProcessGroup* world() const {
    return world_;
  }

  /// The mean of `values` over the first `n` ranks (each rank's own values
  /// before; every rank gets the mean).
  std::vector<double> mean_over(std::vector<double> values, int64_t n) const {
    if (world_ == nullptr) {
      return values;
    }
    at::Tensor t = at::tensor(values, at::kDouble);
    if (rank() >= n) {
      t.zero_();
    }
    world_->all_reduce(t);
    t.div_(static_cast<double>(n));
    return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
  }

 private:
  dist::ProcessGroup* world_;
};

/// One chunk of the model as a pipeline stage holds it: built by the
/// model's spec, with the run's mixed precision applied.
struct Chunk {
  std::shared_ptr<ModelPart> part;
  bool takes_ids = false;
  bool ends_in_loss = false;
  /// The loss of a chunk that ends in it (parallel_loss: tensor parallel's
  /// vocabulary-parallel one under tp).
  LossFn loss = cross_entropy_sum;
  /// The rank's positions of each sequence, T / positions_shards (context
  /// parallel's split: its token ids and labels too); the hidden states
  /// between blocks hold T / (positions_shards x sequence_shards).
  int64_t positions_shards = 1;
  int64_t sequence_shards = 1;
};

/// The appliers that the parallelisms `context`'s mesh enables place at
/// `place`, applied to `part` in order, as the builder's chain runs them.
void apply_placed(
    const JobConfig& config,
    const ParallelContext& context,
    ChainPlace place,
    ModelPart& part);

/// Cut by the model steps of the parallelisms `context`'s mesh enables (a
/// split of the blocks: tensor parallel's), as the builder cuts them.
Chunk make_chunk(
    const JobConfig& config,
    const ModelArgs& args,
    const ChunkSpec& spec,
    const ParallelContext& context);

/// Drops the gradients of `chunk`'s parameters, as a step's end does.
void drop_grads(const Chunk& chunk);

/// What the pipeline measures at one microbatch size: the block's passes
/// and the time to post a SEND and a RECV.
struct PipelinedBlock {
  PassCosts block;
  double send_s = 0.0;
  double recv_s = 0.0;
  /// The passes' standard deviations over the runs.
  PassCosts spread;
  /// The median, over the messages a compute action waited for, of the
  /// time from the later of the SEND and its RECV being posted to the data
  /// being usable (the ranks' clocks put on one time line); negative where
  /// no message was waited for or the ranks' clocks cannot be compared.
  double delivery_s = -1.0;
};

/// F, B, I and W of a block at each of `rows_list`, as the pipeline
/// executor runs them in a real schedule over the world's ranks (one
/// pipeline rank each, two stages of one block each, loop placement):
/// Interleaved1F1B for F and B, InterleavedZeroBubble for F, I and W, with
/// 2 x ranks microbatches, the runs of every size interleaved so that the
/// machine's slow and fast spells meet every size alike. An action's cost is
/// its time less its wait for a receive (the executor's own measure); the
/// figures are the means over the stages that hold neither the
/// embedding nor the output, then the mean over the ranks. Between a
/// forward and its backward the schedule runs other microbatches and
/// stages, so the passes meet their activations and weights as in a
/// training step, and the costs are the ones the executor itself records.
/// Also the time a rank takes to post a SEND and a RECV (the means over
/// every stage's), which the plan's simulation charges each P2P.
/// Empty where it cannot run: one rank, a rank that does not time compute,
/// or room for one block copy only (no stage without the embedding or the
/// output).
std::vector<PipelinedBlock> time_blocks_in_pipeline(
    const JobConfig& config,
    const ModelArgs& args,
    const ParallelContext& context,
    const std::vector<int64_t>& rows_list,
    int64_t copies,
    dist::Runtime* runtime,
    int64_t compute_ranks,
    const ProfileOptions& options);

/// Each data-parallel mode over the world's ranks (replicate; fully_shard
/// resharding always and never), timed against no data parallelism on the
/// same chunk of `copies` blocks: a micro-step of `rows` sequences, forward,
/// backward and the gradient synchronisation's end, as the run's own
/// appliers make it; per mode, the extra seconds per block (the mean over
/// the ranks). Null where it cannot run: one rank, a rank that does not time
/// compute, or `rows` 0.
std::optional<DataParallelCosts> time_data_parallel(
    const JobConfig& config,
    const ModelArgs& args,
    const MixedPrecision& dtypes,
    int64_t rows,
    int64_t copies,
    dist::Runtime* runtime,
    int64_t compute_ranks,
    const ProfileOptions& options);

}  // namespace baton::plan_detail
