// Local SGD, a parallelism of its own from outside Baton's tree: its
// replicas (the mesh axis `local_sgd`, local_sgd.degree of them) each read
// their share of the global batch and step their own weights, and every
// local_sgd.sync_every steps they average their weights instead of their
// gradients at every step (Stich, "Local SGD Converges Fast and
// Communicates Little", 2019). With local_sgd.outer_lr below 1 the
// replicas move only that far from the weights of the last average towards
// the new one: DiLoCo's outer step without its momentum (Douillard et al.,
// 2023). It composes with pipeline parallel: every stage averages with the
// same stage of the other replicas.
//
// The plugin also adds the Lion optimizer (lion.h). BATON_PLUGIN at the end
// is the entry point the binary calls (common/plugin.h).

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/plugin.h"
#include "config/job_config.h"
#include "lion.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/grad_sync.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"

namespace local_sgd {
namespace {

constexpr const char* kAxis = "local_sgd";

/// One part's replicas: each backward's gradients stay the replica's own,
/// and every `every` steps the weights are averaged over `group`.
class LocalSgdSync final : public baton::GradientSync {
 public:
  LocalSgdSync(
      std::vector<at::Tensor> params,
      std::shared_ptr<baton::dist::ProcessGroup> group,
      int64_t every,
      double outer_lr)
      : params_(std::move(params)),
        group_(std::move(group)),
        every_(every),
        outer_lr_(outer_lr) {}

  void prepare(bool sync) override {
    sync_ = sync;
  }
  void finish() override {
    if (sync_) {
      own_gradients();
    }
  }
  void reduce_now() override {
    own_gradients();
  }
  void after_step(int64_t step) override {
    if (step % every_ == 0) {
      average();
    }
  }

 private:
  /// The train step scales every backward by the global batch's token
  /// count, all replicas' tokens (what data parallel's sum of gradients
  /// needs); a replica steps on the mean loss of its own batch, so its
  /// gradients are `replicas` times that. Before the optimizer's step,
  /// when the weights are still those the step began with: the first time,
  /// they are the outer step's start (initialised or loaded).
  void own_gradients() {
    at::NoGradGuard no_grad;
    if (!anchor_.defined()) {
      anchor_ = flat_weights();
    }
    const auto replicas = static_cast<double>(group_->size());
    for (auto& p : params_) {
      if (p.grad().defined()) {
        p.mutable_grad().mul_(replicas);
      }
    }
  }

  at::Tensor flat_weights() const {
    std::vector<at::Tensor> flat;
    for (const auto& p : params_) {
      flat.push_back(p.detach().reshape({-1}));
    }
    return at::cat(flat);
  }

  /// The replicas' mean weights; with outer_lr, the last average moved
  /// that far towards it. Every replica ends with the same weights.
  void average() {
    at::NoGradGuard no_grad;
    at::Tensor mean = flat_weights();
    group_->all_reduce(mean, baton::dist::ReduceOp::kSum);
    mean.div_(static_cast<double>(group_->size()));
    if (outer_lr_ != 1.0 && anchor_.defined()) {
      mean = anchor_ + (mean - anchor_) * outer_lr_;
    }
    int64_t offset = 0;
    for (auto& p : params_) {
      const int64_t n = p.numel();
      p.detach().copy_(mean.narrow(0, offset, n).view(p.sizes()));
      offset += n;
    }
    anchor_ = mean;
  }

  std::vector<at::Tensor> params_;
  std::shared_ptr<baton::dist::ProcessGroup> group_;
  int64_t every_;
  double outer_lr_;
  bool sync_ = true;
  /// The weights of the last average (the outer step's start).
  at::Tensor anchor_;
};

class LocalSgdApplier final : public baton::Applier {
 public:
  void apply(
      baton::ModelPart& part, const baton::ParallelContext& context) override {
    const auto& section = context.config.section(kAxis);
    part.grad_sync().add(std::make_shared<LocalSgdSync>(
        part.module().parameters(),
        context.mesh.group(kAxis),
        section.get<int64_t>("sync_every"),
        section.get<double>("outer_lr")));
  }
};

/// What local SGD cannot run with, naming the key to change.
std::optional<baton::ConfigProblem> check(
    const baton::JobConfig& config, const baton::ParallelDims& dims) {
  const int64_t replicas = dims.degree(kAxis);
  const int64_t every = config.section(kAxis).get<int64_t>("sync_every");
  if (dims.degree(baton::kReplicateAxis) > 1 ||
      dims.degree(baton::kShardAxis) > 1) {
    return baton::ConfigProblem{
        "local_sgd.degree",
        "local_sgd.degree: " + std::to_string(replicas) +
            " replicas average their weights, and data parallel "
            "(dp_replicate " +
            std::to_string(dims.degree(baton::kReplicateAxis)) + ", dp_shard " +
            std::to_string(dims.degree(baton::kShardAxis)) +
            ") would average their gradients as well; allowed: "
            "data_parallel_replicate_degree and data_parallel_shard_degree "
            "1 with local_sgd"};
  }
  // A checkpoint keeps one replica's weights: saved where they all agree.
  if (config.checkpoint.enable && config.checkpoint.interval % every != 0) {
    return baton::ConfigProblem{
        "checkpoint.interval",
        "checkpoint.interval: " + std::to_string(config.checkpoint.interval) +
            " is not a multiple of local_sgd.sync_every " +
            std::to_string(every) +
            "; allowed: a multiple, so that checkpoints are taken where the "
            "replicas agree"};
  }
  return std::nullopt;
}

void register_local_sgd() {
  baton::Parallelism p;
  p.name = "local_sgd";
  // Outside the built-in data axes (order 100, 200), inside the pipeline's
  // (0); its replicas read different batches (dp) that together make the
  // global batch (loss).
  p.axis = baton::MeshAxisSpec{kAxis, 50, "local_sgd.degree", {"dp", "loss"}};
  p.section = "local_sgd";
  p.fields = {
      {"degree",
       int64_t{1},
       baton::FieldSpec("local SGD replicas (-1: the rest of the world)")
           .mesh_degree()},
      {"sync_every",
       int64_t{8},
       baton::FieldSpec("steps between two averages of the replicas' weights")
           .at_least(1)},
      {"outer_lr",
       1.0,
       baton::FieldSpec(
           "how far an average moves the weights from the last one (1: "
           "all the way, plain local SGD)")
           .greater_than(0.0)
           .at_most(1.0)}};
  p.owned_appliers = {
      {"local_sgd",
       [] { return std::make_unique<LocalSgdApplier>(); },
       "local SGD (example plugin): replicas average their weights every "
       "local_sgd.sync_every steps"}};
  p.place = baton::ChainPlace::kData;
  p.steps = {"local_sgd"};
  p.appliers = [](const baton::JobConfig&, const baton::ParallelDims&) {
    return std::vector<std::string>{"local_sgd"};
  };
  p.check = [](const baton::JobConfig& config,
               const baton::ParallelDims& dims,
               const baton::ModelArgs&) { return check(config, dims); };
  baton::register_parallelism(std::move(p));
}

void register_all() {
  register_local_sgd();
  register_lion();
}

}  // namespace
}  // namespace local_sgd

BATON_PLUGIN("local_sgd", local_sgd::register_all)
