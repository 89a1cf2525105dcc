// Fully sharded data parallel through the local train step, against one
// process running the same global batch: dp_shard 2 and 4, HSDP 2 x 2, with
// and without gradient accumulation, under every reshard policy; real Gloo
// between rank threads.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "parallel/applier.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"
#include "tests/trainer/step_batches.h"
#include "trainer/train_step.h"

namespace baton {
namespace {

constexpr int64_t kVocab = 48;
constexpr int64_t kSteps = 3;

Batch global_batch(int64_t step, int64_t rows) {
  return testing::global_batch(step, rows, kVocab, /*seed=*/2000);
}

/// A data-parallel layout of the step.
struct Layout {
  int64_t replicate = 1;
  int64_t shard = 1;
  /// Micro-steps of gradient accumulation per rank.
  int64_t micro = 1;
  std::string reshard = "default";
  /// activation_checkpoint.mode, and with "selective" its kind.
  std::string ac = "none";
  std::string ac_selective = "layer";

  int64_t world() const {
    return replicate * shard;
  }
  std::string str() const {
    return "replicate " + std::to_string(replicate) + " x shard " +
           std::to_string(shard) + ", " + std::to_string(micro) +
           " micro-steps, reshard " + reshard + ", activation checkpoint " +
           ac + (ac == "selective" ? " " + ac_selective : "");
  }
};

struct ShardedRun {
  std::vector<double> losses;
  /// Whole parameters, per replica (each assembled from its shards).
  std::vector<std::map<std::string, at::Tensor>> replicas;
};

/// kSteps AdamW steps of `layout` on `world` rank threads (or one process
/// when `rt` is null): the parts go through the builder's chain of appliers.
void train_rank(
    const Layout& layout,
    int64_t rank,
    dist::Runtime* rt,
    int64_t global_rows,
    ShardedRun& run,
    std::mutex& mutex) {
  const auto dims = baton::testing::builtin_dims(
      layout.replicate, layout.shard, 1, 1, layout.world());
  const dist::ParallelMesh mesh(
      dims, rank, rt ? rt->shared_from_this() : nullptr);
  JobConfig config;
  config.parallelism.data_parallel_replicate_degree = layout.replicate;
  config.parallelism.data_parallel_shard_degree = layout.shard;
  config.parallelism.fsdp_reshard_after_forward = layout.reshard;
  config.activation_checkpoint.mode = layout.ac;
  config.activation_checkpoint.selective = layout.ac_selective;
  config.activation_checkpoint.selective_every = 2;
  ModelParts parts = testing::parts_of({testing::tiny_llama(kVocab, 11)});
  testing::with_activation_checkpoint(
      testing::data_parallel_chain(layout.replicate, layout.shard), config)
      .apply(parts[0], ParallelContext{config, mesh, at::kCPU});
  LocalTrainStep step(cross_entropy_sum, mesh.loss());
  // eps 1e-6: see data_parallel_step_test.cpp.
  torch::optim::AdamW opt(
      parts.parameters(),
      torch::optim::AdamWOptions(3e-3).weight_decay(0.1).eps(1e-6));
  const int64_t local_rows = global_rows / layout.world();
  const int64_t dp_rank = mesh.index("dp");
  std::vector<double> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto batches = testing::micro_batches(
        global_batch(s, global_rows), dp_rank, local_rows, layout.micro);
    opt.zero_grad();
    losses.push_back(step.run(parts, batches).loss);
    opt.step();
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (rank == 0) {
    run.losses = losses;
  }
  testing::collect_whole(
      parts, run.replicas.at(mesh.coord().at("dp_replicate")));
}

ShardedRun train(const Layout& layout, int64_t global_rows) {
  ShardedRun run;
  run.replicas.resize(layout.replicate);
  std::mutex mutex;
  baton::testing::run_ranks_or_one(
      layout.world(), [&](int64_t r, dist::Runtime* rt) {
        train_rank(layout, r, rt, global_rows, run, mutex);
      });
  return run;
}

void expect_equals_one_process(const Layout& layout) {
  SCOPED_TRACE(layout.str());
  at::set_num_threads(1);
  const int64_t global_rows = 4 * layout.world();
  const ShardedRun reference = train(Layout{}, global_rows);
  const ShardedRun sharded = train(layout, global_rows);
  ASSERT_EQ(sharded.losses.size(), reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(sharded.losses[i], reference.losses[i], 1e-5) << "step " << i;
  }
  const auto& whole = reference.replicas.at(0);
  for (const auto& replica : sharded.replicas) {
    ASSERT_EQ(replica.size(), whole.size());
    for (const auto& [fqn, p] : whole) {
      EXPECT_TRUE(torch::allclose(replica.at(fqn), p, 1e-4, 1e-5))
          << fqn << " differs by "
          << (replica.at(fqn) - p).abs().max().item<double>();
    }
  }
}

TEST(FullyShard, TwoAndFourShardsEqualOneProcess) {
  expect_equals_one_process({1, 2, 1, "default"});
  expect_equals_one_process({1, 4, 1, "default"});
}

TEST(FullyShard, AccumulationReducesOncePerStep) {
  expect_equals_one_process({1, 2, 2, "default"});
  expect_equals_one_process({1, 4, 2, "always"});
}

TEST(FullyShard, HybridShardsWithinReplicasAndReducesAcrossThem) {
  expect_equals_one_process({2, 2, 1, "default"});
  expect_equals_one_process({2, 2, 2, "never"});
}

TEST(FullyShard, EveryReshardPolicyGivesTheSameNumbers) {
  for (const char* policy : {"default", "always", "never"}) {
    expect_equals_one_process({1, 2, 1, policy});
  }
}

TEST(FullyShard, ActivationCheckpointingTrainsAsWithout) {
  // The recomputation runs on parameters gathered again for backward (the
  // reshard policy decides whether they were freed after the forward):
  // every mode gives the numbers of the same layout without it.
  at::set_num_threads(1);
  for (const char* policy : {"default", "always", "never"}) {
    const Layout plain{1, 2, 2, policy};
    const ShardedRun reference = train(plain, 8);
    for (const auto& [mode, selective] :
         std::vector<std::pair<std::string, std::string>>{
             {"full", "layer"}, {"selective", "layer"}, {"selective", "op"}}) {
      Layout layout = plain;
      layout.ac = mode;
      layout.ac_selective = selective;
      SCOPED_TRACE(layout.str());
      const ShardedRun run = train(layout, 8);
      ASSERT_EQ(run.losses.size(), reference.losses.size());
      for (size_t i = 0; i < reference.losses.size(); ++i) {
        EXPECT_NEAR(run.losses[i], reference.losses[i], 1e-6) << "step " << i;
      }
      for (const auto& [fqn, p] : reference.replicas.at(0)) {
        EXPECT_LE(
            (run.replicas.at(0).at(fqn) - p).abs().max().item<double>(), 1e-6)
            << fqn;
      }
    }
  }
  expect_equals_one_process({1, 2, 2, "always", "full"});
}

}  // namespace
}  // namespace baton
