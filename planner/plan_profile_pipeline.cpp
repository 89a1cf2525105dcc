#include "planner/plan_profile_detail.h"

// The profile's pipeline probe (plan_profile_detail.h): the block's passes
// timed inside real PipelineExecutor runs of two schedules over the ranks,
// with the time to post a SEND and a RECV and, where the ranks share one
// clock, each message's delivery.

#include <algorithm>
#include <array>
#include <string>

#include "models/model_spec.h"
#include "parallel/dist/launch_env.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"

namespace baton::plan_detail {

namespace {

/// The messages of one run of a lowered schedule, on one time line: for
/// each (direction, receiving stage, microbatch) the sender's SEND posted,
/// the receiver's RECV posted, and, where the compute that needed it
/// waited, when the data became usable (its start + its wait). Every rank
/// fills its own entries; a sum over the ranks then holds them all.
class MessageTimes {
 public:
  static constexpr double kWaitedUs = 20.0;

  MessageTimes(int64_t stages, int64_t microbatches)
      : microbatches_(microbatches),
        grid_(at::zeros({2, stages, microbatches, 4}, at::kDouble)) {}

  void add(const pipeline::ExecutorRun& run) {
    auto g = grid_.accessor<double, 4>();
    for (const pipeline::ExecutedAction& a : run.actions) {
      const pipeline::Action action = pipeline::parse_action(a.name);
      const int64_t s = action.stage;
      const int64_t mb = action.microbatch;
      const double start = run.epoch_us + a.start_us;
      const double end = run.epoch_us + a.end_us;
      switch (action.kind) {
        case pipeline::ActionKind::kSendF:
          g[0][s + 1][mb][0] = end;
          break;
        case pipeline::ActionKind::kSendB:
          g[1][s - 1][mb][0] = end;
          break;
        case pipeline::ActionKind::kRecvF:
          g[0][s][mb][1] = end;
          break;
        case pipeline::ActionKind::kRecvB:
          g[1][s][mb][1] = end;
          break;
        case pipeline::ActionKind::kF:
        case pipeline::ActionKind::kB:
        case pipeline::ActionKind::kI:
          // The wait comes first in these (an OVERLAP_F_B's backward waits
          // after its forward: left out). Waiting on data already there
          // takes a few microseconds (0-3 on an AMD EPYC, against 50 and
          // more where the data was still on its way): below kWaitedUs the
          // data had arrived, at an unknown time, before the compute began.
          if (a.wait_us > kWaitedUs) {
            const int64_t d = action.kind == pipeline::ActionKind::kF ? 0 : 1;
            g[d][s][mb][2] = start + a.wait_us;
            g[d][s][mb][3] = 1.0;
          }
          break;
        default:
          break;
      }
    }
  }

  /// Seconds from the later post to the data usable, of each message
  /// waited for (after the sum over the ranks).
  std::vector<double> delivery_s(const Ranks& ranks) {
    if (ranks.world() != nullptr) {
      ranks.world()->all_reduce(grid_);
    }
    std::vector<double> out;
    auto g = grid_.accessor<double, 4>();
    for (int64_t d = 0; d < 2; ++d) {
      for (int64_t s = 0; s < grid_.size(1); ++s) {
        for (int64_t mb = 0; mb < microbatches_; ++mb) {
          const double send = g[d][s][mb][0];
          const double recv = g[d][s][mb][1];
          if (g[d][s][mb][3] == 0.0 || send == 0.0 || recv == 0.0) {
            continue;
          }
          const double t = g[d][s][mb][2] - std::max(send, recv);
          if (t >= 0.0) {
            out.push_back(t * 1e-6);
          }
        }
      }
    }
    return out;
  }

 private:
  int64_t microbatches_;
  at::Tensor grid_;
};

}  // namespace

std::vector<PipelinedBlock> time_blocks_in_pipeline(
    const JobConfig& config,
    const llama::ModelArgs& args,
    const ParallelContext& context,
    const std::vector<int64_t>& rows_list,
    int64_t copies,
    dist::Runtime* runtime,
    int64_t compute_ranks,
    const ProfileOptions& options) {
  if (runtime == nullptr || options.pipeline_runs() < 1 || copies < 2 ||
      compute_ranks < runtime->world()->size() ||
      runtime->world()->size() < 2) {
    return {};
  }
  const Ranks ranks(runtime);
  const int64_t pp = ranks.size();
  const int64_t stages_per_rank = 2;
  const int64_t num_stages = pp * stages_per_rank;
  const int64_t last_stage = num_stages - 1;
  const int64_t microbatches = 2 * pp;
  const int64_t seq_len = config.training.seq_len;
  pipeline::register_builtin_schedules();
  const std::vector<std::string> schedules{
      "Interleaved1F1B", "InterleavedZeroBubble"};
  const pipeline::Schedule layout = pipeline::make_schedule(
      schedules.front(), pp, stages_per_rank, microbatches);

  // This rank's stages: one block each (layers taken in turn), the first
  // with the embedding, the last with the norm, output and loss.
  std::vector<Chunk> chunks;
  std::vector<int64_t> held;
  for (int64_t s = 0; s < num_stages; ++s) {
    if (layout.stage_to_rank.at(s) != ranks.rank()) {
      continue;
    }
    const int64_t layer = s % args.n_layers;
    chunks.push_back(make_chunk(
        config,
        args,
        ChunkSpec{layer, layer + 1, s == 0, s == last_stage},
        context));
    held.push_back(s);
  }
  std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages;
  for (size_t k = 0; k < chunks.size(); ++k) {
    stages.emplace_back(held[k], chunks[k].part->module_ptr());
  }

  // One executor per (size, schedule), built once.
  struct Run {
    size_t size;
    std::unique_ptr<pipeline::PipelineExecutor> executor;
    at::Tensor inputs, labels;
    double loss_scale = 1.0;
  };
  std::vector<Run> runs;
  for (size_t k = 0; k < rows_list.size(); ++k) {
    const int64_t rows = rows_list[k];
    for (const std::string& name : schedules) {
      pipeline::ExecutorShapes shapes;
      shapes.microbatches = microbatches;
      shapes.microbatch_size = rows;
      shapes.seq_len = seq_len;
      shapes.dim = args.dim;
      shapes.dtype = context.mixed_precision.param;
      Run run;
      run.size = k;
      run.executor = std::make_unique<pipeline::PipelineExecutor>(
          pipeline::posting_order(
              pipeline::plan_schedule(
                  pipeline::make_schedule(
                      name, pp, stages_per_rank, microbatches),
                  pipeline::SimulationCosts())
                  .lowered,
              context.device.is_cuda()),
          stages,
          runtime->world(),
          chunks.front().loss,
          shapes);
      if (layout.stage_to_rank.front() == ranks.rank()) {
        run.inputs = at::randint(
            args.vocab_size, {microbatches * rows, seq_len}, at::kLong);
        run.labels = at::randint(
            args.vocab_size, {microbatches * rows, seq_len}, at::kLong);
      }
      run.loss_scale = 1.0 / static_cast<double>(microbatches * rows * seq_len);
      runs.push_back(std::move(run));
    }
  }

  // Seconds of each kind (F, B, I, W) per size, over this rank's stages
  // that hold a block only; then posting a SEND and a RECV, over all.
  constexpr std::array<pipeline::ActionKind, 4> kPassKinds{
      pipeline::ActionKind::kF,
      pipeline::ActionKind::kB,
      pipeline::ActionKind::kI,
      pipeline::ActionKind::kW};
  std::vector<std::array<std::vector<double>, 6>> samples(rows_list.size());
  std::vector<std::vector<double>> deliveries(rows_list.size());
  // Every rank on this machine (as the launch says, which also picks Gloo's
  // loopback): their steady clocks are one clock.
  const bool comparable_clocks =
      runtime->env().world_size == runtime->env().local_world_size;
  for (int64_t k = 0; k < 1 + options.pipeline_runs(); ++k) {
    for (Run& run : runs) {
      ranks.line_up();
      const pipeline::ExecutorRun done =
          run.executor->run(run.inputs, run.labels, run.loss_scale);
      if (k > 0 && comparable_clocks) {
        MessageTimes messages(num_stages, microbatches);
        messages.add(done);
        for (const double t : messages.delivery_s(ranks)) {
          deliveries[run.size].push_back(t);
        }
      }
      for (const Chunk& chunk : chunks) {
        drop_grads(chunk);
      }
      if (k == 0) {
        continue;  // warm-up
      }
      for (const pipeline::ExecutedAction& a : done.actions) {
        const pipeline::Action action = pipeline::parse_action(a.name);
        if (pipeline::is_comm(action.kind)) {
          const bool send = action.kind == pipeline::ActionKind::kSendF ||
                            action.kind == pipeline::ActionKind::kSendB;
          samples[run.size][send ? 4 : 5].push_back(
              (a.end_us - a.start_us) * 1e-6);
          continue;
        }
        if (!a.compute || action.stage == 0 || action.stage == last_stage) {
          continue;
        }
        const double seconds = (a.end_us - a.start_us - a.wait_us) * 1e-6;
        const auto kind =
            std::find(kPassKinds.begin(), kPassKinds.end(), action.kind);
        if (kind != kPassKinds.end()) {
          samples[run.size][kind - kPassKinds.begin()].push_back(seconds);
        }
      }
    }
  }
  // Per size: the six means, then the four passes' deviations.
  std::vector<double> figures;
  for (const auto& kinds : samples) {
    for (const auto& v : kinds) {
      figures.push_back(mean(v));
    }
    for (size_t kind = 0; kind < kPassKinds.size(); ++kind) {
      figures.push_back(deviation(kinds[kind]));
    }
  }
  figures = ranks.mean_over(std::move(figures), pp);
  std::vector<PipelinedBlock> out;
  for (size_t k = 0; k < rows_list.size(); ++k) {
    const double* f = &figures[10 * k];
    out.push_back(
        {PassCosts{f[0], f[1], f[2], f[3]},
         f[4],
         f[5],
         PassCosts{f[6], f[7], f[8], f[9]},
         deliveries[k].empty() ? -1.0 : median(deliveries[k])});
  }
  return out;
}

}  // namespace baton::plan_detail
