// The activation_checkpoint applier: which blocks it wraps for each mode,
// and training under every mode against `none` in one process (the same
// losses and gradients, within 1e-6). The pipelined and fully sharded
// runs are in tests/trainer/.

#include "parallel/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "models/common/transformer.h"
#include "models/loss.h"
#include "parallel/dist/mesh.h"
#include "parallel/model_parts.h"
#include "tests/parallel/count_runs.h"
#include "tests/parallel/test_parts.h"

namespace baton {
namespace {

constexpr int64_t kVocab = 24;

/// (rows, 8) inputs and their next tokens, from seed.
std::pair<at::Tensor, at::Tensor> tokens(int64_t rows, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto t = at::randint(0, kVocab, {rows, 9}, gen, at::kLong);
  return {t.slice(1, 0, 8), t.slice(1, 1, 9)};
}

std::shared_ptr<models::TransformerImpl> four_layers() {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 4;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = kVocab;
  args.multiple_of = 16;
  auto model = std::make_shared<models::TransformerImpl>(args);
  model->init_weights(9);
  return model;
}

ActivationCheckpointConfig ac(
    const std::string& mode,
    const std::string& selective = "layer",
    int64_t every = 2) {
  ActivationCheckpointConfig c;
  c.mode = mode;
  c.selective = selective;
  c.selective_every = every;
  return c;
}

void apply_ac(ModelPart& part, const ActivationCheckpointConfig& c) {
  JobConfig config;
  config.activation_checkpoint = c;
  const dist::ParallelMesh mesh(
      baton::testing::builtin_dims(1, 1, 1, 1, 1), 0, nullptr);
  ActivationCheckpointApplier().apply(
      part, ParallelContext{config, mesh, at::kCPU});
}

TEST(RecomputePlan, ChoosesBlocksByModeAndGlobalIndex) {
  const auto full = RecomputePlan::from(ac("full"));
  const auto none = RecomputePlan::from(ac("none"));
  const auto every2 = RecomputePlan::from(ac("selective", "layer", 2));
  const auto every3 = RecomputePlan::from(ac("selective", "layer", 3));
  const auto op = RecomputePlan::from(ac("selective", "op"));
  std::vector<int64_t> picked2, picked3;
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(full.checkpoints(i));
    EXPECT_FALSE(none.checkpoints(i));
    EXPECT_TRUE(op.checkpoints(i));
    if (every2.checkpoints(i)) {
      picked2.push_back(i);
    }
    if (every3.checkpoints(i)) {
      picked3.push_back(i);
    }
  }
  // torchtitan's count: the 2nd, 4th, ... block.
  EXPECT_EQ(picked2, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(picked3, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(every2.describe(), "selective (every 2nd block recomputed)");
  EXPECT_NE(op.describe().find("op"), std::string::npos);
}

TEST(ActivationCheckpointApplier, RecomputesExactlyTheChosenBlocks) {
  for (const auto& [config, expected] :
       std::vector<std::pair<ActivationCheckpointConfig, std::vector<int>>>{
           {ac("none"), {1, 1, 1, 1}},
           {ac("full"), {2, 2, 2, 2}},
           {ac("selective", "layer", 2), {1, 2, 1, 2}},
           {ac("selective", "op"), {2, 2, 2, 2}}}) {
    SCOPED_TRACE(config.mode + " " + config.selective);
    auto model = four_layers();
    std::vector<int> runs(4, 0);
    for (int i = 0; i < 4; ++i) {
      model->wrap_unit(
          "layers." + std::to_string(i),
          std::make_shared<testing::CountRuns<int>>(runs[i]));
    }
    ModelPart part(model);
    apply_ac(part, config);
    const auto [inputs, labels] = tokens(2, 5);
    cross_entropy_sum(model->forward(inputs), labels).backward();
    EXPECT_EQ(runs, expected);
    // Evaluation needs no recomputation.
    torch::NoGradGuard no_grad;
    model->forward(inputs);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(runs[i], expected[i] + 1) << i;
    }
  }
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> first_grads;
  std::map<std::string, at::Tensor> params;
};

/// Three AdamW steps of two micro-steps each under `config`.
TrainRun train(const ActivationCheckpointConfig& config) {
  auto model = four_layers();
  ModelPart part(model);
  apply_ac(part, config);
  torch::optim::AdamW opt(
      model->parameters(), torch::optim::AdamWOptions(3e-3).eps(1e-6));
  TrainRun r;
  for (int64_t s = 0; s < 3; ++s) {
    opt.zero_grad();
    const auto [inputs, labels] = tokens(4, 11 + s);
    double loss = 0.0;
    for (int64_t micro = 0; micro < 2; ++micro) {
      const auto ce = cross_entropy_sum(
          model->forward(inputs.slice(0, 2 * micro, 2 * micro + 2)),
          labels.slice(0, 2 * micro, 2 * micro + 2));
      (ce / static_cast<double>(labels.numel())).backward();
      loss += ce.item<double>();
    }
    r.losses.push_back(loss / static_cast<double>(labels.numel()));
    if (s == 0) {
      for (const auto& p : model->named_parameters()) {
        r.first_grads[p.key()] = p.value().grad().clone();
      }
    }
    opt.step();
  }
  for (const auto& p : model->named_parameters()) {
    r.params[p.key()] = p.value().detach().clone();
  }
  return r;
}

TEST(ActivationCheckpointApplier, EveryModeTrainsAsNone) {
  at::set_num_threads(1);
  const TrainRun none = train(ac("none"));
  for (const auto& config :
       {ac("full"),
        ac("selective", "layer", 1),
        ac("selective", "layer", 2),
        ac("selective", "op")}) {
    SCOPED_TRACE(config.mode + " " + config.selective);
    const TrainRun r = train(config);
    for (size_t i = 0; i < none.losses.size(); ++i) {
      EXPECT_NEAR(r.losses[i], none.losses[i], 1e-6) << i;
    }
    for (const auto& [fqn, g] : none.first_grads) {
      EXPECT_LE((r.first_grads.at(fqn) - g).abs().max().item<double>(), 1e-6)
          << fqn;
      EXPECT_LE(
          (r.params.at(fqn) - none.params.at(fqn)).abs().max().item<double>(),
          1e-6)
          << fqn;
    }
  }
}

}  // namespace
}  // namespace baton
