// The extension story for parallelisms: an applier defined only in this
// file, registered under a name and selected from YAML, changes training
// in a way checked numerically, composed with pp 2 x dp 2 (ranks as threads
// over real Gloo, each building its trainer in process); a builder subclass
// that edits the base chain; an LR schedule registered here and selected
// from YAML.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "builders/builder_registry.h"
#include "builders/pipeline_trainer_builder.h"
#include "parallel/dist/process_group.h"
#include "tests/builders/rank_builds.h"
#include "tests/parallel/count_runs.h"

namespace baton {
namespace {

constexpr double kScale = 2.0;

/// Multiplies every gradient of the part by kScale as backward produces it
/// (a tensor hook, so before accumulation and before any gradient sync).
class ScaleGrads final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext&) override {
    for (auto& p : part.module().parameters()) {
      p.register_hook([](const at::Tensor& g) { return g * kScale; });
    }
  }
};

/// Halves the learning rate every step: a schedule of this file's own.
class Halving final : public LRSchedule {
 public:
  double factor(int64_t step) const override {
    return std::pow(0.5, static_cast<double>(step - 1));
  }
};

/// The base chain without check_replicas, with ScaleGrads inserted before
/// replicate in code rather than from YAML.
class EditedChainBuilder final : public TrainerBuilder {
 public:
  using TrainerBuilder::TrainerBuilder;
  static std::vector<std::string> last_chain;

 protected:
  ApplierChain build_appliers() override {
    ApplierChain chain = TrainerBuilder::build_appliers();
    chain.remove("check_replicas");
    chain.insert_before("replicate", "scale", std::make_unique<ScaleGrads>());
    last_chain = chain.names();
    return chain;
  }
};
std::vector<std::string> EditedChainBuilder::last_chain;

void register_test_extensions() {
  register_builtin_builders();
  if (!applier_registry().contains("scale_grads")) {
    applier_registry().add(
        "scale_grads",
        [] { return std::make_unique<ScaleGrads>(); },
        "test: gradients times 2");
    lr_schedule_registry().add(
        "halving",
        [](const LRSchedulerConfig&, int64_t) -> std::unique_ptr<LRSchedule> {
          return std::make_unique<Halving>();
        },
        "test: lr halves every step");
    builder_registry().add(
        "edited_chain",
        [](const JobConfig& c) {
          return std::make_unique<EditedChainBuilder>(c);
        },
        "test: base chain edited in code");
  }
}

/// A YAML file of the debug model on `name`.out, 4 steps of short
/// sequences, gradients clipped hard (max_norm 0.05) so that every step
/// clips; float32 compute whatever `auto` picks here (the chains checked
/// have no mixed_precision step); `extra` is appended (more sections).
std::string write_config(const std::string& name, const std::string& extra) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const auto dump = dir / (name + ".out");
  std::filesystem::remove_all(dump);
  const auto path = dir / (name + ".yaml");
  std::ofstream(path) << "job:\n  dump_folder: " << dump.string() << "\n"
                      << "model:\n  flavor: debugmodel\n"
                      << "lr_scheduler:\n  warmup_steps: 1\n"
                      << "training:\n  steps: 4\n  seq_len: 32\n"
                      << "  local_batch_size: 2\n  num_threads: 1\n"
                      << "  max_norm: 0.05\n"
                      << "  mixed_precision_param: float32\n"
                      << "metrics:\n  peak_tflops: 1\n  log_freq: 1\n"
                      << extra;
  return path.string();
}

/// Trains `config` on `world` ranks, one thread each, over a store this
/// function hosts; returns global rank 0's metrics.
std::vector<StepMetrics> train_ranks(const JobConfig& config, int64_t world) {
  std::vector<std::vector<StepMetrics>> history(world);
  testing::on_each_rank(config, world, [&](int64_t r, TrainerBuilder& b) {
    history[r] = b.build()->train();
  });
  return history[0];
}

/// Both runs clip every step to the same norm, so they take the same steps
/// while the scaled run's gradients (and so its norms) are kScale times.
void expect_scaled(
    const std::vector<StepMetrics>& scaled,
    const std::vector<StepMetrics>& reference) {
  ASSERT_EQ(scaled.size(), 4u);
  ASSERT_EQ(reference.size(), 4u);
  for (size_t i = 0; i < scaled.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_GT(reference[i].grad_norm, 0.05);  // every step clips
    EXPECT_NEAR(
        scaled[i].grad_norm / reference[i].grad_norm, kScale, 1e-4 * kScale);
    EXPECT_NEAR(scaled[i].loss, reference[i].loss, 1e-4 * reference[i].loss);
  }
}

const std::string kPipelineAndDataParallel =
    "parallelism:\n"
    "  pipeline_parallel_degree: 2\n"
    "  data_parallel_replicate_degree: 2\n"
    "  pipeline_parallel_schedule: 1F1B\n"
    "  pipeline_parallel_microbatch_size: 1\n";

TEST(ApplierFromYaml, ScalesGradientsOnEveryPartUnderPipelineAndDataParallel) {
  register_test_extensions();
  const auto reference = load_job_config(
      write_config("applier_reference", kPipelineAndDataParallel));
  const auto scaled = load_job_config(write_config(
      "applier_scaled",
      kPipelineAndDataParallel + "  appliers: [scale_grads]\n"));
  EXPECT_EQ(
      scaled.parallelism.appliers, (std::vector<std::string>{"scale_grads"}));
  // pp 2 x dp 2: the pipeline builder, with replicate after the applier.
  expect_scaled(train_ranks(scaled, 4), train_ranks(reference, 4));
}

TEST(ApplierFromYaml, AnUnregisteredApplierIsAConfigErrorNamingTheKey) {
  register_test_extensions();
  const std::string path = write_config(
      "applier_unknown", "parallelism:\n  appliers: [scale_grad]\n");
  try {
    load_job_config(path);
    ADD_FAILURE() << "an unknown applier passed the config check";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            ":18: parallelism.appliers: 'scale_grad' is not a registered "
            "applier"),
        std::string::npos)
        << e.what();
    EXPECT_NE(
        std::string(e.what()).find("did you mean 'scale_grads'?"),
        std::string::npos)
        << e.what();
  }
}

TEST(ApplierFromYaml, TheBuildersOwnStepsAreRefused) {
  // They come from the degrees and the training dtypes; listed again they
  // would reduce (or cast) twice.
  register_test_extensions();
  for (const char* name :
       {"replicate",
        "fully_shard",
        "check_replicas",
        "tensor_parallel",
        "to_device",
        "activation_checkpoint",
        "mixed_precision"}) {
    const auto config = load_job_config(
        write_config("applier_builtin", ""),
        {"parallelism.appliers=[" + std::string(name) + "]",
         "parallelism.data_parallel_replicate_degree=1"});
    try {
      make_trainer_builder(config)->build();
      ADD_FAILURE() << name << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "--parallelism.appliers=[" + std::string(name) +
              "]: parallelism.appliers: '" + name +
              "' is a step the builder places itself"),
          std::string::npos)
          << e.what();
      const std::string n = name;
      EXPECT_NE(
          std::string(e.what()).find(
              n == "activation_checkpoint"
                  ? "hint: set activation_checkpoint.mode instead"
              : n == "mixed_precision"
                  ? "hint: set training.mixed_precision_param instead"
              : n == "to_device"
                  ? "hint: leave it out: every chain starts with it"
              : n == "replicate"
                  ? "hint: set parallelism.data_parallel_replicate_degree "
                    "instead"
              : n == "fully_shard"
                  ? "hint: set parallelism.data_parallel_shard_degree instead"
              : n == "tensor_parallel"
                  ? "hint: set parallelism.tensor_parallel_degree instead"
                  : "hint: set parallelism.data_parallel_replicate_degree or "
                    "parallelism.data_parallel_shard_degree instead"),
          std::string::npos)
          << e.what();
    }
  }
}

TEST(ActivationCheckpointFromYaml, EveryModeTrainsAsNoneUnderPipelineAndDp) {
  // pp 2 x dp 2 from YAML: the builder places activation_checkpoint after
  // to_device on every stage; losses and grad norms are those of none.
  register_test_extensions();
  const auto reference = train_ranks(
      load_job_config(write_config("ac_none", kPipelineAndDataParallel)), 4);
  ASSERT_EQ(reference.size(), 4u);
  for (const char* section :
       {"activation_checkpoint:\n  mode: full\n",
        "activation_checkpoint:\n  mode: selective\n  selective: op\n",
        "activation_checkpoint:\n  mode: selective\n  selective_every: 1\n"}) {
    SCOPED_TRACE(section);
    const auto run = train_ranks(
        load_job_config(
            write_config("ac_mode", kPipelineAndDataParallel + section)),
        4);
    ASSERT_EQ(run.size(), 4u);
    for (size_t i = 0; i < run.size(); ++i) {
      EXPECT_NEAR(run[i].loss, reference[i].loss, 1e-6) << i;
      EXPECT_NEAR(run[i].grad_norm, reference[i].grad_norm, 1e-6) << i;
    }
  }
}

/// Runs of each pipeline stage's blocks: forwards and recomputations.
std::array<std::atomic<int64_t>, 2> block_runs;

/// Counts each run of a block of the part's stage; placed inside
/// activation checkpointing's wrapper, it sees the recomputations too.
class CountBlockRuns final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext&) override {
    for (const auto& unit : part.module().unit_names()) {
      if (unit.rfind("layers.", 0) == 0) {
        part.module().wrap_unit(
            unit,
            std::make_shared<testing::CountRuns<std::atomic<int64_t>>>(
                block_runs.at(part.stage())));
      }
    }
  }
};

/// The pipeline builder with CountBlockRuns innermost: before
/// activation_checkpoint where the chain has it.
class CountingPipelineBuilder final : public PipelineTrainerBuilder {
 public:
  using PipelineTrainerBuilder::PipelineTrainerBuilder;

 protected:
  ApplierChain build_appliers() override {
    ApplierChain chain = PipelineTrainerBuilder::build_appliers();
    if (chain.contains("activation_checkpoint")) {
      chain.insert_before(
          "activation_checkpoint",
          "count_block_runs",
          std::make_unique<CountBlockRuns>());
    } else {
      chain.append("count_block_runs", std::make_unique<CountBlockRuns>());
    }
    return chain;
  }
};

/// What a pp 2 run ends with: rank 0's metrics, every rank's parameters
/// by FQN, and each stage's block runs.
struct PipelineRun {
  std::vector<StepMetrics> metrics;
  std::map<std::string, at::Tensor> params;
  std::array<int64_t, 2> runs{};
};

PipelineRun train_counting(const std::string& name, const std::string& ac) {
  if (!builder_registry().contains("counting_pipeline")) {
    builder_registry().add(
        "counting_pipeline",
        [](const JobConfig& c) {
          return std::make_unique<CountingPipelineBuilder>(c);
        },
        "test: the pipeline builder counting its blocks' runs");
  }
  for (auto& runs : block_runs) {
    runs = 0;
  }
  const JobConfig config = load_job_config(write_config(
      name,
      "builder: counting_pipeline\n"
      "parallelism:\n"
      "  pipeline_parallel_degree: 2\n"
      "  pipeline_parallel_schedule: 1F1B\n"
      "  pipeline_parallel_microbatch_size: 1\n" +
          ac));
  PipelineRun out;
  std::mutex mutex;
  testing::on_each_rank(config, 2, [&](int64_t r, TrainerBuilder& b) {
    auto trainer = b.build();
    auto metrics = trainer->train();
    std::lock_guard<std::mutex> lock(mutex);
    if (r == 0) {
      out.metrics = std::move(metrics);
    }
    trainer->components().model_parts.for_each([&](ModelPart& part) {
      for (const auto& item : part.module().named_parameters()) {
        out.params[item.key()] = item.value().detach().clone();
      }
    });
  });
  out.runs = {block_runs[0].load(), block_runs[1].load()};
  return out;
}

TEST(
    ActivationCheckpointFromYaml, OnlyTheListedStageRecomputesAndTrainsAsNone) {
  register_test_extensions();
  const PipelineRun none = train_counting("ac_stage_none", "");
  const PipelineRun first = train_counting(
      "ac_stage_first",
      "activation_checkpoint:\n  mode: full\n  stages: [0]\n");
  // 4 steps x 2 microbatches x 3 blocks per stage; stage 0 runs each block
  // again in backward.
  EXPECT_EQ(none.runs[0], 24);
  EXPECT_EQ(none.runs[1], 24);
  EXPECT_EQ(first.runs[0], 48);
  EXPECT_EQ(first.runs[1], 24);
  ASSERT_EQ(none.metrics.size(), 4u);
  ASSERT_EQ(first.metrics.size(), 4u);
  for (size_t i = 0; i < none.metrics.size(); ++i) {
    EXPECT_NEAR(first.metrics[i].loss, none.metrics[i].loss, 1e-6) << i;
    EXPECT_NEAR(first.metrics[i].grad_norm, none.metrics[i].grad_norm, 1e-6)
        << i;
  }
  ASSERT_EQ(first.params.size(), none.params.size());
  EXPECT_GT(none.params.size(), 0u);
  for (const auto& [fqn, want] : none.params) {
    ASSERT_EQ(first.params.count(fqn), 1u) << fqn;
    EXPECT_LE((first.params.at(fqn) - want).abs().max().item<double>(), 1e-6)
        << fqn;
  }
}

TEST(ApplierChainHook, ASubclassEditsTheBaseChain) {
  register_test_extensions();
  const std::string dp = "parallelism:\n  data_parallel_replicate_degree: 2\n";
  const auto reference = load_job_config(write_config("chain_reference", dp));
  const auto edited = load_job_config(
      write_config("chain_edited", "builder: edited_chain\n" + dp));
  const auto scaled = train_ranks(edited, 2);
  EXPECT_EQ(
      EditedChainBuilder::last_chain,
      (std::vector<std::string>{"to_device", "scale", "replicate"}));
  expect_scaled(scaled, train_ranks(reference, 2));
}

TEST(LRScheduleFromYaml, ARegisteredScheduleSetsEveryStepsRate) {
  register_test_extensions();
  const auto config = load_job_config(
      write_config("lr_halving", "optimizer:\n  lr: 0.001\n"),
      {"lr_scheduler.name=halving"});
  const auto history = make_trainer_builder(config)->build()->train();
  ASSERT_EQ(history.size(), 4u);
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_DOUBLE_EQ(history[i].lr, 0.001 * std::pow(0.5, i)) << i;
  }
}

}  // namespace
}  // namespace baton
