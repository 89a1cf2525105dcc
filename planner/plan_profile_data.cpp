#include "planner/plan_profile_detail.h"

// The profile's data-parallel probe (plan_profile_detail.h): what
// replicate's gradient all-reduce and fully_shard's gathers, frees and
// reduce-scatters add to a micro-step on this machine's ranks, timed with
// the run's own appliers rather than modelled from the links.

#include <torch/autograd.h>

#include <string>
#include <utility>

#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/parallelism.h"

namespace baton::plan_detail {

namespace {

/// A data-parallel mode: the config's degrees and resharding over `world`
/// ranks, and its name in the cost file ("" for none).
struct DataMode {
  std::string name;
  int64_t replicate = 1;
  int64_t shard = 1;
  std::string reshard = "default";
};

/// A chunk of `copies` blocks (layers 0 .. copies - 1, one part) laid out
/// as `mode` over the world: the model steps, then the data steps of the
/// parallelisms the mode enables, as the builder places them.
Chunk data_parallel_chunk(
    const JobConfig& config,
    const ModelArgs& args,
    const ParallelContext& context,
    int64_t copies) {
  Chunk chunk =
      make_chunk(config, args, ChunkSpec{0, copies, false, false}, context);
  apply_placed(config, context, ChainPlace::kData, *chunk.part);
  return chunk;
}

/// Seconds of one micro-step of `chunk` (forward, backward with the
/// gradient synchronisation prepared, its end awaited), the mean of the
/// options' repeats after its warm-ups, the ranks lined up before each.
double time_micro_step(
    const Chunk& chunk,
    const ModelArgs& args,
    int64_t rows,
    int64_t seq_len,
    const Ranks& ranks,
    const ProfileOptions& options) {
  const at::Tensor hidden = at::randn({rows, seq_len, args.dim}) * 0.5;
  at::Tensor grad_out;
  std::vector<double> seconds;
  for (int64_t k = 0; k < options.warmup() + options.repeats(); ++k) {
    ranks.line_up();
    const auto start = Clock::now();
    chunk.part->grad_sync().prepare(/*sync=*/true);
    const at::Tensor out =
        chunk.part->module().forward(hidden.detach().requires_grad_(true));
    if (!grad_out.defined()) {
      grad_out = at::randn_like(out) * 1e-3;
    }
    torch::autograd::backward({out}, {grad_out});
    chunk.part->grad_sync().finish();
    if (k >= options.warmup()) {
      seconds.push_back(since(start));
    }
    drop_grads(chunk);
  }
  return mean(seconds);
}

}  // namespace

std::optional<DataParallelCosts> time_data_parallel(
    const JobConfig& config,
    const ModelArgs& args,
    const MixedPrecision& dtypes,
    int64_t rows,
    int64_t copies,
    dist::Runtime* runtime,
    int64_t compute_ranks,
    const ProfileOptions& options) {
  if (runtime == nullptr || rows < 1 || runtime->world()->size() < 2 ||
      compute_ranks < runtime->world()->size()) {
    return std::nullopt;
  }
  const Ranks ranks(runtime);
  const int64_t world = ranks.size();
  const std::vector<DataMode> modes{
      {"", 1, 1, "default"},
      {"replicate", world, 1, "default"},
      {"fully_shard always", 1, world, "always"},
      {"fully_shard never", 1, world, "never"}};
  std::vector<double> per_block;
  for (const DataMode& mode : modes) {
    JobConfig mode_config = config;
    auto& p = mode_config.parallelism;
    p.data_parallel_replicate_degree = mode.replicate;
    p.data_parallel_shard_degree = mode.shard;
    p.fsdp_reshard_after_forward = mode.reshard;
    // Without data parallelism each rank works alone, as the pieces do.
    const ParallelDims dims =
        mode.name.empty()
            ? ParallelDims::of({}, 1)
            : ParallelDims::of(
                  {{kReplicateAxis, mode.replicate}, {kShardAxis, mode.shard}},
                  world);
    const dist::ParallelMesh mesh(
        dims,
        mode.name.empty() ? 0 : ranks.rank(),
        mode.name.empty() ? nullptr : runtime->shared_from_this());
    const ParallelContext context{
        mode_config, mesh, c10::Device(at::kCPU), /*pipelined=*/false, dtypes};
    const Chunk chunk = data_parallel_chunk(mode_config, args, context, copies);
    per_block.push_back(
        time_micro_step(
            chunk, args, rows, config.training.seq_len, ranks, options) /
        static_cast<double>(copies));
  }
  per_block = ranks.mean_over(std::move(per_block), compute_ranks);
  DataParallelCosts costs;
  costs.degree = world;
  costs.rows = rows;
  for (size_t k = 1; k < modes.size(); ++k) {
    costs.block_s[modes[k].name] = per_block[k] - per_block[0];
  }
  return costs;
}

}  // namespace baton::plan_detail
