// Sharded checkpoints load exactly at any other data-parallel layout: a
// checkpoint saved by dp_shard 2 is read by one process, by dp_shard 3 (rows
// that divide unevenly), 4, and HSDP 2 x 2, and every rank then holds its
// slice of exactly the saved weights and optimizer state; in process, ranks
// as threads over real Gloo. The optimizer state is saved through each
// optimizer's registered state layout: AdamW's, and two registered here,
// SGD with momentum (a state shaped like its parameter) and RowStats (a
// per-row statistic and a step: not shaped like its parameter, resharded
// along the rows it keeps); ColStats, whose statistic sums over the rows
// fully_shard splits, is refused with an error naming it.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"
#include "common/torch_compat.h"
#include "config/job_config.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizer_state.h"
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
using nlohmann::json;

constexpr int64_t kVocab = 40;

struct Layout {
  int64_t replicate = 1;
  int64_t shard = 1;
  int64_t world() const {
    return replicate * shard;
  }
};

/// Whole weights and optimizer state, by FQN (<fqn>.exp_avg, ...).
using Tensors = std::map<std::string, at::Tensor>;

/// Scales each gradient by the inverse root of a running mean of its
/// squares over each row (dimension 0): a state of one value per row and a
/// step count, shaped unlike its parameter.
struct RowState final : torch::optim::OptimizerCloneableParamState<RowState> {
  at::Tensor row;
  int64_t step = 0;
};

class RowStats : public torch::optim::SGD {
 public:
  RowStats(std::vector<at::Tensor> params, double lr)
      : SGD(std::move(params), torch::optim::SGDOptions(lr)), lr_(lr) {}

  at::Tensor step(LossClosure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      for (auto& p : group.params()) {
        if (!p.grad().defined()) {
          continue;
        }
        auto& slot = state_[compat::optimizer_state_key(p)];
        if (!slot) {
          slot = std::make_unique<RowState>();
        }
        auto& st = static_cast<RowState&>(*slot);
        const at::Tensor g2 = p.grad().pow(2);
        const at::Tensor row = p.dim() > 1 ? g2.mean(1) : g2;
        st.row = st.row.defined() ? 0.9 * st.row + 0.1 * row : row;
        st.step += 1;
        at::Tensor scale = (st.row + 1e-8).rsqrt();
        if (p.dim() > 1) {
          scale = scale.unsqueeze(1);
        }
        p.sub_(p.grad() * scale * lr_);
      }
    }
    return {};
  }

 private:
  double lr_;
};

/// RowStats with a column statistic registered as its state: one value per
/// column, summed over the rows.
class ColStats final : public RowStats {
 public:
  using RowStats::RowStats;
};

OptimizerStateCodec row_stats_codec(
    const char* name, const char* field, int64_t kept) {
  OptimizerStateCodec codec;
  codec.name = name;
  codec.fields = {
      {field, std::vector<int64_t>{kept}, std::nullopt},
      {"step", std::vector<int64_t>{}, at::kLong}};
  codec.read = [](const torch::optim::OptimizerParamState* state,
                  const at::Tensor& p) -> std::vector<at::Tensor> {
    const auto* st = static_cast<const RowState*>(state);
    if (st == nullptr) {
      return {at::zeros({p.size(0)}), at::scalar_tensor(0, at::kLong)};
    }
    return {st->row, at::scalar_tensor(st->step, at::kLong)};
  };
  codec.make = [](const std::vector<at::Tensor>& fields, const at::Tensor&) {
    auto st = std::make_unique<RowState>();
    st->row = fields.at(0).clone();
    st->step = fields.at(1).item<int64_t>();
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(st));
  };
  return codec;
}

/// Registers the optimizers of this file: sgd_momentum (libtorch's SGD and
/// its momentum buffer), row_stats and col_stats.
void register_test_optimizers() {
  register_builtin_optimizers();
  static std::once_flag once;
  std::call_once(once, [] {
    optimizer_registry().add(
        "sgd_momentum",
        [](std::vector<at::Tensor> params,
           const JobConfig& job) -> std::unique_ptr<torch::optim::Optimizer> {
          return std::make_unique<torch::optim::SGD>(
              std::move(params),
              torch::optim::SGDOptions(job.optimizer.lr).momentum(0.9));
        },
        "test: SGD with momentum");
    OptimizerStateCodec sgd;
    sgd.name = "SGD";
    sgd.fields = {{"momentum_buffer", std::nullopt, std::nullopt}};
    sgd.read = [](const torch::optim::OptimizerParamState* state,
                  const at::Tensor& p) -> std::vector<at::Tensor> {
      const auto* st = static_cast<const torch::optim::SGDParamState*>(state);
      return {st ? st->momentum_buffer() : at::zeros_like(p)};
    };
    sgd.make = [](const std::vector<at::Tensor>& fields, const at::Tensor&) {
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(fields.at(0).clone());
      return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(st));
    };
    register_optimizer_state(typeid(torch::optim::SGD), std::move(sgd));
    optimizer_registry().add(
        "row_stats",
        [](std::vector<at::Tensor> params,
           const JobConfig& job) -> std::unique_ptr<torch::optim::Optimizer> {
          return std::make_unique<RowStats>(
              std::move(params), job.optimizer.lr);
        },
        "test: per-row gradient statistics");
    register_optimizer_state(
        typeid(RowStats), row_stats_codec("RowStats", "row", 0));
    optimizer_registry().add(
        "col_stats",
        [](std::vector<at::Tensor> params,
           const JobConfig& job) -> std::unique_ptr<torch::optim::Optimizer> {
          return std::make_unique<ColStats>(
              std::move(params), job.optimizer.lr);
        },
        "test: per-column gradient statistics");
    register_optimizer_state(
        typeid(ColStats), row_stats_codec("ColStats", "col", 1));
  });
}

/// The rank's optimizer state of its parts as parts of their own (through
/// the optimizer's registered state layout), so that it assembles like the
/// weights: each field's slice is its parameter's along the dimensions it
/// keeps.
void collect_state(
    const ModelParts& parts,
    const OptimizersContainer& optimizers,
    Tensors& whole) {
  testing::collect_whole(parts, whole);
  for (size_t i = 0; i < parts.size(); ++i) {
    auto& part = parts[i];
    const OptimizerStateCodec* codec = optimizer_state_codec(optimizers[i]);
    ASSERT_NE(codec, nullptr);
    for (const auto& item : part.module().named_parameters()) {
      const auto& states = optimizers[i].state();
      auto it = states.find(compat::optimizer_state_key(item.value()));
      ASSERT_NE(it, states.end()) << item.key();
      const auto fields = codec->read(it->second.get(), item.value());
      const ParamSlice* slice = part.slice(item.key());
      for (size_t k = 0; k < codec->fields.size(); ++k) {
        const OptimizerStateField& f = codec->fields[k];
        const at::Tensor& t = fields[k];
        auto& out = whole[item.key() + "." + f.name];
        if (slice == nullptr || f.scalar()) {
          out = t.clone();
          continue;
        }
        const auto global = f.shape_of(slice->global_shape);
        const auto offsets = f.shape_of(slice->offsets);
        if (!out.defined()) {
          out = at::full(global, NAN, t.options());
        }
        if (t.numel() > 0) {
          at::Tensor into = out;
          for (size_t d = 0; d < offsets.size(); ++d) {
            into = into.narrow(static_cast<int64_t>(d), offsets[d], t.size(d));
          }
          into.copy_(t);
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
    const std::string& optimizer,
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
  register_test_optimizers();
  ModelParts parts = testing::parts_of({testing::tiny_llama(kVocab, seed)});
  testing::data_parallel_chain(layout.replicate, layout.shard)
      .apply(parts[0], ParallelContext{config, mesh, at::kCPU});
  std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
  opts.push_back(optimizer_registry().get(optimizer)(
      parts[0].module().parameters(), config));
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
      step.run(parts, {{tokens.slice(1, 0, 8), tokens.slice(1, 1, 9), {}}});
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
    const Layout& layout,
    uint64_t seed,
    int64_t steps,
    const fs::path& dump,
    const std::string& optimizer = "AdamW") {
  Tensors whole;
  std::mutex mutex;
  if (layout.world() == 1) {
    run_rank(layout, optimizer, 0, nullptr, seed, steps, dump, whole, mutex);
  } else {
    baton::testing::run_ranks(
        layout.world(), [&](int64_t r, dist::Runtime& rt) {
          run_rank(layout, optimizer, r, &rt, seed, steps, dump, whole, mutex);
        });
  }
  return whole;
}

/// Saved by dp_shard 2 with `optimizer`, loaded at each of `layouts` from
/// other initial weights: every weight and state tensor as saved.
void expect_reshards(
    const std::string& optimizer, const std::vector<Layout>& layouts) {
  at::set_num_threads(1);
  const fs::path dump =
      fs::path(::testing::TempDir()) / ("ck_reshard_" + optimizer);
  fs::remove_all(dump);
  const Tensors saved =
      run(Layout{1, 2}, /*seed=*/1, /*steps=*/2, dump, optimizer);
  ASSERT_FALSE(saved.empty());
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(
        optimizer + ": replicate " + std::to_string(layout.replicate) +
        " x shard " + std::to_string(layout.shard));
    const Tensors loaded =
        run(layout, /*seed=*/7, /*steps=*/0, dump, optimizer);
    ASSERT_EQ(loaded.size(), saved.size());
    for (const auto& [name, t] : saved) {
      ASSERT_TRUE(loaded.count(name)) << name;
      EXPECT_TRUE(torch::equal(loaded.at(name), t)) << name;
    }
  }
}

TEST(ShardedCheckpoint, LoadsExactlyAtEveryDataParallelLayout) {
  expect_reshards(
      "AdamW",
      {Layout{1, 1}, Layout{1, 3}, Layout{1, 4}, Layout{2, 2}, Layout{2, 1}});
}

TEST(ShardedCheckpoint, AnyRegisteredOptimizersStateReshards) {
  // A state shaped like its parameter, and one that is not (a value per
  // row, a step), both through the registered layouts of this file.
  expect_reshards("sgd_momentum", {Layout{1, 1}, Layout{1, 3}, Layout{2, 2}});
  expect_reshards("row_stats", {Layout{1, 1}, Layout{1, 3}, Layout{2, 2}});
  const json index = checkpoint_index::read_index(
      fs::path(::testing::TempDir()) /
      "ck_reshard_row_stats/checkpoint/step-2");
  EXPECT_EQ(index["optimizer"], "RowStats");
  const json& row = index["tensors"]["optimizer.output.weight.row"];
  EXPECT_EQ(row["shape"], json::array({kVocab})) << row;
  EXPECT_EQ(row["slices"].size(), 2u) << row;
}

TEST(ShardedCheckpoint, AStateThatSumsOverASplitDimensionIsRefused) {
  // One process holds every row: ColStats saves there. Under dp_shard 2
  // each rank's column sums cover its rows only: no layout could load them.
  const fs::path dump = fs::path(::testing::TempDir()) / "ck_col_stats";
  fs::remove_all(dump);
  EXPECT_FALSE(run(Layout{1, 1}, 1, 2, dump, "col_stats").empty());
  std::vector<std::string> errors(2);
  baton::testing::run_ranks(2, [&](int64_t r, dist::Runtime& rt) {
    try {
      Tensors whole;
      std::mutex mutex;
      run_rank(Layout{1, 2}, "col_stats", r, &rt, 1, 2, dump, whole, mutex);
    } catch (const CheckpointError& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(
        e.find("optimizer.tok_embeddings.weight.col (ColStats) sums over "
               "dimension 0 of 'tok_embeddings.weight', which this layout "
               "splits across ranks"),
        std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace baton
