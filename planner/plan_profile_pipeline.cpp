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

/// The probe's pipeline: one pipeline rank per rank of the world, two
/// stages of one block each (loop placement), 2 x ranks microbatches.
struct ProbeShape {
  int64_t pp = 0;
  int64_t stages_per_rank = 2;
  int64_t num_stages = 0;
  int64_t microbatches = 0;
  int64_t seq_len = 0;

  int64_t last_stage() const {
    return num_stages - 1;
  }
};

/// This rank's stages of `layout`, as the executor takes them.
struct RankStages {
  std::vector<Chunk> chunks;
  /// (stage index, its module) of each chunk.
  std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages;
};

/// This rank's stages: one block each (layers taken in turn), the first
/// with the embedding, the last with the norm, output and loss.
RankStages rank_stages(
    const JobConfig& config,
    const ModelArgs& args,
    const ParallelContext& context,
    const pipeline::Schedule& layout,
    const ProbeShape& shape,
    int64_t rank) {
  RankStages out;
  std::vector<int64_t> held;
  for (int64_t s = 0; s < shape.num_stages; ++s) {
    if (layout.stage_to_rank.at(s) != rank) {
      continue;
    }
    const int64_t layer = s % args.n_layers;
    out.chunks.push_back(make_chunk(
        config,
        args,
        ChunkSpec{layer, layer + 1, s == 0, s == shape.last_stage()},
        context));
    held.push_back(s);
  }
  for (size_t k = 0; k < out.chunks.size(); ++k) {
    out.stages.emplace_back(held[k], out.chunks[k].part->module_ptr());
  }
  return out;
}

/// One executor of the probe, for one (size, schedule), and its batch.
struct ProbeRun {
  size_t size;  // index into rows_list
  std::unique_ptr<pipeline::PipelineExecutor> executor;
  at::Tensor inputs, labels;  // (microbatches x rows, T), the first stage's
  double loss_scale = 1.0;
};

/// The executor of schedule `name` over `held`, at rows_list[size];
/// `first` says whether this rank holds the first stage (the batch's).
ProbeRun probe_run(
    const std::string& name,
    const ProbeShape& shape,
    const std::vector<int64_t>& rows_list,
    size_t size,
    const RankStages& held,
    bool first,
    const ModelArgs& args,
    const ParallelContext& context,
    dist::Runtime& runtime) {
  const int64_t rows = rows_list[size];
  const int64_t m = shape.microbatches;
  pipeline::ExecutorShapes shapes;
  shapes.microbatches = m;
  shapes.microbatch_size = rows;
  shapes.seq_len = shape.seq_len;
  shapes.dim = args.dim;
  shapes.dtype = context.mixed_precision.param;
  ProbeRun run;
  run.size = size;
  run.executor = std::make_unique<pipeline::PipelineExecutor>(
      pipeline::posting_order(
          pipeline::plan_schedule(
              pipeline::make_schedule(name, shape.pp, shape.stages_per_rank, m),
              pipeline::SimulationCosts())
              .lowered,
          context.device.is_cuda()),
      held.stages,
      runtime.world(),
      held.chunks.front().loss,
      shapes);
  if (first) {
    run.inputs =
        at::randint(args.vocab_size, {m * rows, shape.seq_len}, at::kLong);
    run.labels =
        at::randint(args.vocab_size, {m * rows, shape.seq_len}, at::kLong);
  }
  run.loss_scale = 1.0 / static_cast<double>(m * rows * shape.seq_len);
  return run;
}

/// The passes the probe times, in the order of PipelinedBlock's figures.
constexpr std::array<pipeline::ActionKind, 4> kPassKinds{
    pipeline::ActionKind::kF,
    pipeline::ActionKind::kB,
    pipeline::ActionKind::kI,
    pipeline::ActionKind::kW};

/// What the runs of one size sampled: seconds of each kind (F, B, I, W),
/// over this rank's stages that hold a block only; then posting a SEND and
/// a RECV, over all. And the delivery of each message waited for.
struct ProbeSamples {
  std::array<std::vector<double>, 6> kinds;
  std::vector<double> deliveries;
};

/// Adds the actions of `done` to `kinds` (ProbeSamples::kinds).
void sample_actions(
    const pipeline::ExecutorRun& done,
    const ProbeShape& shape,
    std::array<std::vector<double>, 6>& kinds) {
  for (const pipeline::ExecutedAction& a : done.actions) {
    const pipeline::Action action = pipeline::parse_action(a.name);
    if (pipeline::is_comm(action.kind)) {
      const bool send = action.kind == pipeline::ActionKind::kSendF ||
                        action.kind == pipeline::ActionKind::kSendB;
      kinds[send ? 4 : 5].push_back((a.end_us - a.start_us) * 1e-6);
      continue;
    }
    if (!a.compute || action.stage == 0 || action.stage == shape.last_stage()) {
      continue;
    }
    const double seconds = (a.end_us - a.start_us - a.wait_us) * 1e-6;
    const auto kind =
        std::find(kPassKinds.begin(), kPassKinds.end(), action.kind);
    if (kind != kPassKinds.end()) {
      kinds[kind - kPassKinds.begin()].push_back(seconds);
    }
  }
}

/// Runs every executor of `runs` once to warm up, then
/// options.pipeline_runs() times, the sizes interleaved, the ranks lined
/// up before each; the samples of each size. The messages' deliveries only
/// where the ranks' clocks are `comparable`.
std::vector<ProbeSamples> run_probe(
    std::vector<ProbeRun>& runs,
    const RankStages& held,
    const ProbeShape& shape,
    size_t sizes,
    const Ranks& ranks,
    bool comparable,
    const ProfileOptions& options) {
  std::vector<ProbeSamples> samples(sizes);
  for (int64_t k = 0; k < 1 + options.pipeline_runs(); ++k) {
    for (ProbeRun& run : runs) {
      ranks.line_up();
      const pipeline::ExecutorRun done = run.executor->run(
          run.inputs, run.labels, at::Tensor(), run.loss_scale);
      if (k > 0 && comparable) {
        MessageTimes messages(shape.num_stages, shape.microbatches);
        messages.add(done);
        for (const double t : messages.delivery_s(ranks)) {
          samples[run.size].deliveries.push_back(t);
        }
      }
      for (const Chunk& chunk : held.chunks) {
        drop_grads(chunk);
      }
      if (k == 0) {
        continue;  // warm-up
      }
      sample_actions(done, shape, samples[run.size].kinds);
    }
  }
  return samples;
}

/// Each size's figures from its samples: the six means and the four
/// passes' deviations, each the mean over the `pp` ranks; and the median
/// delivery.
std::vector<PipelinedBlock> summarise_probe(
    const std::vector<ProbeSamples>& samples, const Ranks& ranks, int64_t pp) {
  std::vector<double> figures;
  for (const ProbeSamples& size : samples) {
    for (const auto& v : size.kinds) {
      figures.push_back(mean(v));
    }
    for (size_t kind = 0; kind < kPassKinds.size(); ++kind) {
      figures.push_back(deviation(size.kinds[kind]));
    }
  }
  figures = ranks.mean_over(std::move(figures), pp);
  std::vector<PipelinedBlock> out;
  for (size_t k = 0; k < samples.size(); ++k) {
    const double* f = &figures[10 * k];
    const std::vector<double>& deliveries = samples[k].deliveries;
    out.push_back(
        {PassCosts{f[0], f[1], f[2], f[3]},
         f[4],
         f[5],
         PassCosts{f[6], f[7], f[8], f[9]},
         deliveries.empty() ? -1.0 : median(deliveries)});
  }
  return out;
}

}  // namespace

std::vector<PipelinedBlock> time_blocks_in_pipeline(
    const JobConfig& config,
    const ModelArgs& args,
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
  ProbeShape shape;
  shape.pp = ranks.size();
  shape.num_stages = shape.pp * shape.stages_per_rank;
  shape.microbatches = 2 * shape.pp;
  shape.seq_len = config.training.seq_len;
  pipeline::register_builtin_schedules();
  const std::vector<std::string> schedules{
      "Interleaved1F1B", "InterleavedZeroBubble"};
  const pipeline::Schedule layout = pipeline::make_schedule(
      schedules.front(), shape.pp, shape.stages_per_rank, shape.microbatches);
  const RankStages held =
      rank_stages(config, args, context, layout, shape, ranks.rank());

  // One executor per (size, schedule), built once.
  const bool first = layout.stage_to_rank.front() == ranks.rank();
  std::vector<ProbeRun> runs;
  for (size_t k = 0; k < rows_list.size(); ++k) {
    for (const std::string& name : schedules) {
      runs.push_back(probe_run(
          name, shape, rows_list, k, held, first, args, context, *runtime));
    }
  }
  // Every rank on this machine (as the launch says, which also picks Gloo's
  // loopback): their steady clocks are one clock.
  const bool comparable_clocks =
      runtime->env().world_size == runtime->env().local_world_size;
  return summarise_probe(
      run_probe(
          runs,
          held,
          shape,
          rows_list.size(),
          ranks,
          comparable_clocks,
          options),
      ranks,
      shape.pp);
}

}  // namespace baton::plan_detail
