// Plugins in the stock binary. The example plugin (examples/local_sgd: the
// local_sgd parallelism with an axis and config section of its own, and the
// Lion optimizer), built out of tree against the installed package by
// tests/example.cmake, is loaded with --plugin or the YAML's plugins:, is
// known to --print-config and --dry-run, and trains composed with pp 2 on
// 4 ranks to the losses and weights of a reference written here: the same
// model and data as one process, each replica stepped by its own Lion and
// averaged every k steps. Plugins that cannot load exit 2 naming the file
// and the cause, before any rank starts.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "builders/builder_registry.h"
#include "checkpoint/saved_model.h"
#include "common/version.h"
#include "config/job_config.h"
#include "models/loss.h"
#include "models/model_spec.h"
#include "parallel/model_parts.h"
#include "tests/baton_binary.h"
#include "trainer/trainer.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::run_command;
using testing::source_path;

const std::string kPlugin = LOCAL_SGD_PLUGIN;
constexpr int64_t kReplicas = 2;
constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 32;
constexpr int64_t kSteps = 6;
constexpr int64_t kEvery = 2;
constexpr double kOuterLr = 0.5;
constexpr double kLr = 1e-3;
constexpr double kWeightDecay = 0.1;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.95;

/// What the plugin's run and the reference share: the debug model, its
/// data, the LR schedule, no clipping.
std::string base_yaml(const fs::path& dump, int64_t local_batch) {
  return "job:\n  dump_folder: " + dump.string() +
         "\nmodel:\n  name: llama3\n  flavor: debugmodel\n  tokenizer: bytes\n"
         "lr_scheduler:\n  warmup_steps: 2\n"
         "training:\n  dataset: kjv\n  steps: " +
         std::to_string(kSteps) + "\n  seq_len: " + std::to_string(kSeq) +
         "\n  local_batch_size: " + std::to_string(local_batch) +
         "\n  max_norm: 1.0e6\n  num_threads: 1\n"
         "  mixed_precision_param: float32\n"
         "metrics:\n  log_freq: 1\n  peak_tflops: 1\n";
}

/// The plugin's keys: Lion, 2 local-SGD replicas of a 2-stage pipeline.
std::string plugin_yaml(const fs::path& dump) {
  return base_yaml(dump, kBatch) +
         "optimizer:\n  name: lion\n  lr: " + std::to_string(kLr) +
         "\n  weight_decay: " + std::to_string(kWeightDecay) +
         "\nlion:\n  beta1: " + std::to_string(kBeta1) +
         "\n  beta2: " + std::to_string(kBeta2) +
         "\nparallelism:\n  pipeline_parallel_degree: 2\n"
         "  pipeline_parallel_microbatch_size: 1\n"
         "local_sgd:\n  degree: " +
         std::to_string(kReplicas) +
         "\n  sync_every: " + std::to_string(kEvery) +
         "\n  outer_lr: " + std::to_string(kOuterLr) +
         "\ncheckpoint:\n  enable: true\n  interval: " +
         std::to_string(kSteps) + "\n";
}

fs::path write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  return path;
}

struct Reference {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> weights;
};

/// Local SGD written out in one process: the model and the data of a
/// one-process run whose batch is both replicas' rows (replica r's are
/// rows [r B, (r+1) B), as a data-parallel rank's), each replica's weights
/// stepped by Lion on the mean loss of its rows, and every `every` steps
/// (0: never) the mean of the replicas, `outer` of the way from the last
/// one. The logged loss is the global batch's mean.
Reference reference(int64_t every, double outer) {
  register_builtin_builders();
  const fs::path dump = fresh_dir("plugin_reference");
  const auto path = write(
      dump / "reference.yaml",
      base_yaml(dump / "out", kReplicas * kBatch) +
          "optimizer:\n  lr: " + std::to_string(kLr) + "\n");
  auto trainer = make_trainer_builder(load_job_config(path.string()))->build();
  auto& c = trainer->components();
  auto& model = c.model_parts[0].module();
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  std::vector<std::vector<at::Tensor>> w(kReplicas), m(kReplicas);
  for (int64_t r = 0; r < kReplicas; ++r) {
    for (const auto& p : params) {
      w[r].push_back(p.detach().clone());
      m[r].push_back(at::zeros_like(p));
    }
  }
  std::vector<at::Tensor> anchor;
  for (const auto& t : w[0]) {
    anchor.push_back(t.clone());
  }
  Reference out;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const double lr = c.lr_schedulers->lr();
    const Batch batch = c.dataloader->next();
    double loss_sum = 0.0;
    for (int64_t r = 0; r < kReplicas; ++r) {
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) {
          params[i].copy_(w[r][i]);
          params[i].mutable_grad() = at::Tensor();
        }
      }
      const at::Tensor loss = cross_entropy_sum(
          model.forward(batch.inputs.narrow(0, r * kBatch, kBatch)),
          batch.labels.narrow(0, r * kBatch, kBatch));
      (loss / static_cast<double>(kBatch * kSeq)).backward();
      loss_sum += loss.item<double>();
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor g = params[i].grad();
        w[r][i].mul_(1.0 - lr * kWeightDecay);
        w[r][i].sub_(lr * at::sign(kBeta1 * m[r][i] + (1.0 - kBeta1) * g));
        m[r][i] = kBeta2 * m[r][i] + (1.0 - kBeta2) * g;
      }
    }
    out.losses.push_back(
        loss_sum / static_cast<double>(kReplicas * kBatch * kSeq));
    if (every > 0 && step % every == 0) {
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor mean = w[0][i].clone();
        for (int64_t r = 1; r < kReplicas; ++r) {
          mean += w[r][i];
        }
        mean /= static_cast<double>(kReplicas);
        anchor[i] = anchor[i] + outer * (mean - anchor[i]);
        for (int64_t r = 0; r < kReplicas; ++r) {
          w[r][i] = anchor[i].clone();
        }
      }
    }
    c.lr_schedulers->step();
  }
  for (size_t i = 0; i < names.size(); ++i) {
    out.weights[names[i]] = w[0][i];
  }
  return out;
}

/// The whole weights of the checkpoint folder `dir` (its latest step).
std::map<std::string, at::Tensor> saved_weights(const fs::path& dir) {
  const SavedModel saved = read_checkpoint_model(dir);
  auto model =
      model_registry().get(saved.family).build(saved.args, ChunkSpec{}, 0);
  load_saved_weights(saved, *model);
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model->named_parameters()) {
    out[item.key()] = item.value().detach();
  }
  return out;
}

TEST(Plugins, LocalSgdWithLionTrainsWithPp2AsTheReference) {
  const fs::path dir = fresh_dir("plugin_local_sgd");
  const auto config = write(dir / "run.yaml", plugin_yaml(dir / "out"));
  const auto r = run_command(
      baton_bin() + " train --config " + config.string() + " --plugin " +
      kPlugin + " --nproc 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("plugin: local_sgd from " + kPlugin), std::string::npos)
      << r.output;
  const std::vector<double> losses = read_losses(dir / "out");
  const Reference want = reference(kEvery, kOuterLr);
  const Reference apart = reference(0, kOuterLr);
  ASSERT_EQ(losses.size(), want.losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_NEAR(losses[i], want.losses[i], 1e-4);
  }
  // The averages count: replicas that never average train otherwise.
  EXPECT_GT(std::abs(apart.losses.back() - want.losses.back()), 1e-3);
  // The checkpoint of the last step (taken where the replicas agree) holds
  // the reference's weights. Lion moves every weight by exactly lr, so a
  // gradient element within float rounding of zero may take the other sign
  // in the other summation order: a few weights in a million may differ by
  // a share of 2 lr, none by more, and the rest agree to rounding.
  const auto saved = saved_weights(dir / "out" / "checkpoint");
  ASSERT_EQ(saved.size(), want.weights.size());
  int64_t total = 0;
  int64_t flipped = 0;
  double worst = 0.0;
  for (const auto& [fqn, w] : want.weights) {
    ASSERT_EQ(saved.count(fqn), 1u) << fqn;
    const at::Tensor diff = (saved.at(fqn) - w).abs();
    total += diff.numel();
    flipped += (diff > 1e-5).sum().item<int64_t>();
    worst = std::max(worst, diff.max().item<double>());
  }
  EXPECT_LE(flipped, total / 10000) << flipped << " of " << total;
  EXPECT_LE(worst, 2 * kLr) << flipped << " of " << total;
}

TEST(Plugins, TheYamlNamesThemRelativeToItsFolder) {
  const fs::path dir = fresh_dir("plugin_yaml");
  const fs::path folder = dir / "configs";
  fs::create_directories(folder);
  const std::string relative = fs::relative(kPlugin, folder).string();
  const auto config = write(
      folder / "run.yaml",
      "plugins: [" + relative + "]\n" + plugin_yaml(dir / "out"));
  const auto printed = run_command(
      "(" + baton_bin() + " train --config " + config.string() +
      " --print-config > " + (dir / "printed.yaml").string() + ")");
  ASSERT_EQ(printed.code, 0) << printed.output;
  std::ifstream in(dir / "printed.yaml");
  const std::string yaml(
      (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(yaml.find("plugins: [" + kPlugin + "]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("local_sgd:\n  degree: 2"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("lion:\n  beta1: 0.9"), std::string::npos) << yaml;
  // What it printed loads back, the plugin with it.
  const auto again = run_command(
      baton_bin() + " train --config " + (dir / "printed.yaml").string() +
      " --dry-run --nproc 4");
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("local_sgd"), std::string::npos) << again.output;
  // The plugin's check runs in the dry run: local SGD and data parallel
  // would both average.
  const auto refused = run_command(
      baton_bin() + " train --config " + config.string() +
      " --dry-run --nproc 8 --parallelism.data_parallel_replicate_degree=2");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(
      refused.output.find("local_sgd.degree: 2 replicas average their weights"),
      std::string::npos)
      << refused.output;
  // Without the plugin its keys are unknown.
  const auto stock = run_command(
      baton_bin() + " train --config " + config.string() +
      " --plugins=[] --print-config");
  EXPECT_EQ(stock.code, 2) << stock.output;
  EXPECT_NE(stock.output.find("unknown section 'lion'"), std::string::npos)
      << stock.output;
}

TEST(Plugins, BadOnesExitTwoNamingTheFileBeforeAnyRankStarts) {
  const fs::path dir = fresh_dir("plugin_bad");
  fs::create_directories(dir);
  const fs::path text = write(dir / "notes.so", "not a library\n");
  const std::string torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." +
                                    std::to_string(TORCH_VERSION_MINOR) + "." +
                                    std::to_string(TORCH_VERSION_PATCH);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(dir / "missing.so").string(), "no such file"},
      {text.string(), "cannot load it: "},
      {NO_ENTRY_PLUGIN,
       "not a Baton plugin: no baton_plugin_info entry point; hint: name its "
       "registration function with BATON_PLUGIN"},
      {BAD_API_PLUGIN, "built for plugin API 99, this baton loads API 1"},
      {BAD_BATON_PLUGIN,
       std::string("built against Baton 0.0.1, this baton is ") + kVersion},
      {BAD_TORCH_PLUGIN,
       "built against libtorch 1.13.1, this baton runs libtorch " +
           torch_version},
      {CLASH_PLUGIN,
       "registering 'clash' failed: [registry] optimizer 'AdamW' is already "
       "registered"},
      {THROWS_PLUGIN,
       "registering 'throws' failed: this plugin needs a GPU and found none"}};
  const std::string train =
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") +
      " --nproc 2 --job.dump_folder=" + (dir / "out").string();
  for (const auto& [path, cause] : cases) {
    SCOPED_TRACE(path);
    const auto r = run_command(train + " --plugin " + path);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(
        r.output.find("error: plugin " + path + ": " + cause),
        std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << r.output;
  }
  // Named by the YAML, relative to its folder: the message names the file.
  const auto config = write(
      dir / "yaml" / "run.yaml",
      "plugins: [../missing.so]\n" + base_yaml(dir / "out", 2));
  const auto r =
      run_command(baton_bin() + " train --config " + config.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find(
          "error: plugin " + (dir / "missing.so").string() + ": no such file"),
      std::string::npos)
      << r.output;
  // And for the other commands that take --plugin.
  for (const std::string& command :
       {" plan --config " + config.string() + " --nproc 2",
        std::string(" generate --hf ") + dir.string() + " --prompt x"}) {
    const auto other =
        run_command(baton_bin() + command + " --plugin " + BAD_API_PLUGIN);
    EXPECT_EQ(other.code, 2) << other.output;
    EXPECT_NE(
        other.output.find(std::string("error: plugin ") + BAD_API_PLUGIN),
        std::string::npos)
        << other.output;
  }
}

}  // namespace
}  // namespace baton
