// Sharded checkpoints load exactly at any other data-parallel layout: a
// checkpoint saved by dp_shard 2 is read by one process, by dp_shard 3 (rows
// that divide unevenly), 4, and HSDP 2 x 2, and every rank then holds its
// slice of exactly the saved weights and AdamW state; in process, ranks as
// threads over real Gloo.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "checkpoint/checkpoint.h"
#include "common/torch_compat.h"
#include "config/job_config.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "trainer/train_step.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 40;

struct Layout {
  int64_t replicate = 1;
  int64_t shard = 1;
  int64_t world() const {
    return replicate * shard;
  }
};

/// Whole weights and AdamW state, by FQN (optimizer.<fqn>.exp_avg, ...).
using Tensors = std::map<std::string, at::Tensor>;

/// The rank's AdamW state of its parts as parts of their own, so that
/// collect_whole assembles them like the weights.
void collect_state(
    const ModelParts& parts,
    const OptimizersContainer& optimizers,
    Tensors& whole) {
  testing::collect_whole(parts, whole);
  for (size_t i = 0; i < parts.size(); ++i) {
    auto& part = parts[i];
    for (const auto& item : part.module().named_parameters()) {
      const auto& states = optimizers[i].state();
      auto it = states.find(compat::optimizer_state_key(item.value()));
      ASSERT_NE(it, states.end()) << item.key();
      const auto& st =
          static_cast<const torch::optim::AdamWParamState&>(*it->second);
      whole[item.key() + ".step"] = at::scalar_tensor(st.step(), at::kLong);
      const std::pair<std::string, at::Tensor> fields[] = {
          {"exp_avg", st.exp_avg()}, {"exp_avg_sq", st.exp_avg_sq()}};
      for (const auto& [field, t] : fields) {
        const std::string name = item.key() + "." + field;
        const ParamSlice* slice = part.slice(item.key());
        auto& out = whole[name];
        if (!slice) {
          out = t.clone();
          continue;
        }
        if (!out.defined()) {
          out = at::full(slice->global_shape, NAN);
        }
        if (t.numel() > 0) {
          out.narrow(0, slice->offsets[0], t.size(0)).copy_(t);
        }
      }
    }
  }
}

/// Builds the tiny model under `layout` on this rank (seeded by `seed`),
/// trains `steps` steps, saves (steps > 0) or loads (steps == 0) the
/// checkpoint in `dump`, and collects the rank's state into `whole`.
void run_rank(
    const Layout& layout,
    int64_t rank,
    dist::Runtime* rt,
    uint64_t seed,
    int64_t steps,
    const fs::path& dump,
    Tensors& whole,
    std::mutex& mutex) {
  const auto dims = baton::testing::builtin_dims(
      layout.replicate, layout.shard, 1, 1, layout.world());
  const dist::ParallelMesh mesh(
      dims, rank, rt ? rt->shared_from_this() : nullptr);
  JobConfig config;
  config.parallelism.data_parallel_replicate_degree = layout.replicate;
  config.parallelism.data_parallel_shard_degree = layout.shard;
  config.checkpoint.enable = true;
  register_builtin_optimizers();
  ModelParts parts = testing::parts_of({testing::tiny_llama(kVocab, seed)});
  testing::data_parallel_chain(layout.replicate, layout.shard)
      .apply(parts[0], ParallelContext{config, mesh, at::kCPU});
  std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
  opts.push_back(optimizer_registry().get("AdamW")(
      parts[0].module().parameters(), config.optimizer));
  OptimizersContainer optimizers(std::move(opts));
  std::vector<std::unique_ptr<LRScheduler>> lrs;
  lrs.push_back(std::make_unique<LRScheduler>(
      optimizers[0],
      std::make_shared<WarmupStableDecay>(config.lr_scheduler, 1000)));
  LRSchedulersContainer schedulers(std::move(lrs));
  const CheckpointLayout where = CheckpointLayout::of(mesh);
  CheckpointManager checkpoint(
      config.checkpoint,
      dump.string(),
      parts,
      optimizers,
      schedulers,
      /*dataloader=*/nullptr,
      where,
      rt ? rt->world() : dist::ProcessGroup::single("checkpoint"),
      "{}");
  if (steps > 0) {
    LocalTrainStep step(cross_entropy_sum, mesh.loss());
    for (int64_t s = 0; s < steps; ++s) {
      const auto tokens =
          torch::randint(0, kVocab, {2, 9}, torch::kLong);  // any data
      optimizers.zero_grad();
      step.run(parts, {{tokens.slice(1, 0, 8), tokens.slice(1, 1, 9)}});
      optimizers.step();
      schedulers.step();
    }
    checkpoint.maybe_save({steps, 0}, /*last=*/true);
    checkpoint.finish({steps, 0});
  } else {
    EXPECT_EQ(checkpoint.load().step, 2);
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (mesh.coord().at("dp_replicate") == 0) {
    collect_state(parts, optimizers, whole);
  }
}

Tensors run(
    const Layout& layout, uint64_t seed, int64_t steps, const fs::path& dump) {
  Tensors whole;
  std::mutex mutex;
  if (layout.world() == 1) {
    run_rank(layout, 0, nullptr, seed, steps, dump, whole, mutex);
  } else {
    baton::testing::run_ranks(
        layout.world(), [&](int64_t r, dist::Runtime& rt) {
          run_rank(layout, r, &rt, seed, steps, dump, whole, mutex);
        });
  }
  return whole;
}

TEST(ShardedCheckpoint, LoadsExactlyAtEveryDataParallelLayout) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_reshard";
  fs::remove_all(dump);
  const Tensors saved = run(Layout{1, 2}, /*seed=*/1, /*steps=*/2, dump);
  ASSERT_FALSE(saved.empty());
  for (const Layout& layout :
       {Layout{1, 1}, Layout{1, 3}, Layout{1, 4}, Layout{2, 2}, Layout{2, 1}}) {
    SCOPED_TRACE(
        "replicate " + std::to_string(layout.replicate) + " x shard " +
        std::to_string(layout.shard));
    // Other initial weights: everything must come from the checkpoint.
    const Tensors loaded = run(layout, /*seed=*/7, /*steps=*/0, dump);
    ASSERT_EQ(loaded.size(), saved.size());
    for (const auto& [name, t] : saved) {
      ASSERT_TRUE(loaded.count(name)) << name;
      EXPECT_TRUE(torch::equal(loaded.at(name), t)) << name;
    }
  }
}

}  // namespace
}  // namespace baton
