// The same tokens in every layout, through the `baton` binary as a user runs
// it: with one global batch of 8 sequences, one process, dp_replicate 2,
// dp_shard 2, pp 2, pp 2 x dp_shard 2 and one process with two
// accumulation steps train on the same tokens and give the same losses step
// by step; and a checkpoint saved by pp 2 x 2 chunks x dp_shard 2 resumes at
// tp 2 x dp_replicate 2, at one process and at pp 2 under ZBV, each
// continuing the straight run's losses. A validation (held-out loss every
// few steps) gives the same losses in every layout and changes nothing of
// the training's.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::baton_bin;
using testing::fresh_dir;
using testing::read_losses;
using testing::run_command;
using testing::source_path;

// float32 compute, whatever `auto` picks on this machine: layouts agree to
// the order of float sums, not bf16's rounding.
const std::string kRun =
    " --training.mixed_precision_param=float32 --training.steps=10 "
    "--training.seq_len=64 --lr_scheduler.warmup_steps=2 "
    "--metrics.log_freq=1 --metrics.peak_tflops=1";

/// The losses of `baton train` with `args` in a fresh folder `name`
/// (kept, for a resume).
std::vector<double> train(
    const std::string& name,
    const std::string& args,
    fs::path* dump_out = nullptr) {
  const auto dump = fresh_dir(name);
  const auto r = run_command(
      baton_bin() + " train" + args + " --config " +
      source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() + kRun);
  EXPECT_EQ(r.code, 0) << r.output;
  if (dump_out != nullptr) {
    *dump_out = dump;
  }
  return read_losses(dump);
}

void expect_same_losses(
    const std::vector<double>& got,
    const std::vector<double>& want,
    size_t first_step = 1) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5) << "step " << first_step + i;
  }
}

TEST(LayoutInvariance, EveryLayoutOfOneGlobalBatchTrainsOnTheSameTokens) {
  const auto one = train("same_one", " --training.local_batch_size=8");
  ASSERT_EQ(one.size(), 10u);
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"dp_replicate 2",
       " --nproc 2 --training.local_batch_size=4 "
       "--parallelism.data_parallel_replicate_degree=2"},
      {"dp_shard 2",
       " --nproc 2 --training.local_batch_size=4 "
       "--parallelism.data_parallel_shard_degree=2"},
      {"pp 2 (4 microbatches)",
       " --nproc 2 --training.local_batch_size=8 "
       "--parallelism.pipeline_parallel_degree=2 "
       "--parallelism.pipeline_parallel_microbatch_size=2"},
      {"pp 2 x dp_shard 2",
       " --nproc 4 --training.local_batch_size=4 "
       "--parallelism.pipeline_parallel_degree=2 "
       "--parallelism.data_parallel_shard_degree=2"},
      {"2 accumulation steps",
       " --training.local_batch_size=4 "
       "--training.gradient_accumulation_steps=2"},
  };
  for (const auto& [name, args] : layouts) {
    SCOPED_TRACE(name);
    expect_same_losses(train("same_layout", args), one);
  }
}

TEST(LayoutInvariance, ACheckpointResumesAtEveryOtherLayout) {
  const std::string saver_args =
      " --nproc 4 --training.local_batch_size=4 "
      "--parallelism.pipeline_parallel_degree=2 "
      "--parallelism.pipeline_parallel_schedule=Interleaved1F1B "
      "--parallelism.pipeline_parallel_stages_per_rank=2 "
      "--parallelism.data_parallel_shard_degree=2 "
      "--checkpoint.enable=true --checkpoint.interval=5";
  fs::path saved;
  const auto straight = train("resume_saver", saver_args, &saved);
  ASSERT_EQ(straight.size(), 10u);
  const std::vector<double> tail(straight.begin() + 5, straight.end());
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"tp 2 x dp_replicate 2",
       " --nproc 4 --training.local_batch_size=4 "
       "--parallelism.tensor_parallel_degree=2 "
       "--parallelism.data_parallel_replicate_degree=2"},
      {"one process", " --training.local_batch_size=8"},
      {"pp 2 (ZBV)",
       " --nproc 2 --training.local_batch_size=8 "
       "--parallelism.pipeline_parallel_degree=2 "
       "--parallelism.pipeline_parallel_schedule=ZBVZeroBubble "
       "--parallelism.pipeline_parallel_stages_per_rank=2"},
  };
  for (const auto& [name, args] : layouts) {
    SCOPED_TRACE(name);
    // A run that stopped after the save at step 5, resumed in this layout.
    const auto dump = fresh_dir("resume_at");
    fs::create_directories(dump / "checkpoint");
    fs::copy(
        saved / "checkpoint" / "step-5",
        dump / "checkpoint" / "step-5",
        fs::copy_options::recursive);
    const auto r = run_command(
        baton_bin() + " train" + args + " --config " +
        source_path("configs/debug_model.yaml") +
        " --job.dump_folder=" + dump.string() + kRun +
        " --checkpoint.enable=true --checkpoint.interval=100");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from step 5"), std::string::npos)
        << r.output;
    const auto losses = read_losses(dump);
    ASSERT_EQ(losses.size(), 5u) << r.output;
    expect_same_losses(losses, tail, 6);
  }
}

/// A held-out corpus the debug corpus does not hold: JSON Lines of made-up
/// sentences.
fs::path held_out_corpus() {
  const fs::path dir = fresh_dir("validation_data");
  fs::create_directories(dir);
  const fs::path file = dir / "held_out.jsonl";
  const char* words[] = {
      "river",
      "stone",
      "lamp",
      "garden",
      "north",
      "quiet",
      "seven",
      "bread",
      "window",
      "slowly"};
  std::ofstream out(file);
  for (int d = 0; d < 40; ++d) {
    std::string text;
    for (int w = 0; w < 60; ++w) {
      text += std::string(w ? " " : "") + words[(d * 7 + w * w) % 10];
    }
    out << "{\"text\": \"" << text << ".\"}\n";
  }
  return file;
}

TEST(LayoutInvariance, ValidationLossIsTheSameInEveryLayout) {
  const std::string validation =
      " --validation.enable=true --validation.freq=2 --validation.steps=2"
      " --validation.dataset=jsonl --validation.dataset_path=" +
      held_out_corpus().string();
  const std::string run =
      " --training.mixed_precision_param=float32 --training.steps=4"
      " --training.seq_len=64 --lr_scheduler.warmup_steps=2"
      " --metrics.log_freq=1 --metrics.peak_tflops=1"
      " --checkpoint.model_only_export=false";
  const auto train_validating = [&](const std::string& args) {
    const auto dump = fresh_dir("validation_run");
    const auto r = run_command(
        baton_bin() + " train" + args + " --config " +
        source_path("configs/debug_model.yaml") +
        " --job.dump_folder=" + dump.string() + run + validation);
    EXPECT_EQ(r.code, 0) << r.output;
    return testing::read_metrics(dump);
  };
  const auto one = train_validating(" --training.local_batch_size=8");
  ASSERT_EQ(one.size(), 4u);
  // The training's losses are those of a run without validation: it reads
  // none of the training data and changes no weight.
  const auto plain = fresh_dir("validation_plain");
  ASSERT_EQ(
      run_command(
          baton_bin() + " train --training.local_batch_size=8 --config " +
          source_path("configs/debug_model.yaml") +
          " --job.dump_folder=" + plain.string() + run)
          .code,
      0);
  const auto losses = read_losses(plain);
  ASSERT_EQ(losses.size(), 4u);
  std::vector<double> held_out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(one[i]["loss"].get<double>(), losses[i]) << "step " << i + 1;
    EXPECT_EQ(one[i].contains("validation_loss"), i % 2 == 1);
    if (one[i].contains("validation_loss")) {
      held_out.push_back(one[i]["validation_loss"].get<double>());
      // 2 batches of 8 x 64 tokens.
      EXPECT_EQ(one[i]["validation_tokens"].get<int64_t>(), 2 * 8 * 64);
    }
  }
  ASSERT_EQ(held_out.size(), 2u);
  EXPECT_LT(held_out[1], held_out[0]);  // it learns
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"dp_shard 2",
       " --nproc 2 --training.local_batch_size=4 "
       "--parallelism.data_parallel_shard_degree=2"},
      {"tp 2 x dp_replicate 2",
       " --nproc 4 --training.local_batch_size=4 "
       "--parallelism.tensor_parallel_degree=2 "
       "--parallelism.data_parallel_replicate_degree=2"},
      {"pp 2 (1F1B, 4 microbatches)",
       " --nproc 2 --training.local_batch_size=8 "
       "--parallelism.pipeline_parallel_degree=2 "
       "--parallelism.pipeline_parallel_microbatch_size=2"},
      {"pp 2 x dp_shard 2 (ZBV)",
       " --nproc 4 --training.local_batch_size=4 "
       "--parallelism.pipeline_parallel_degree=2 "
       "--parallelism.pipeline_parallel_schedule=ZBVZeroBubble "
       "--parallelism.pipeline_parallel_stages_per_rank=2 "
       "--parallelism.data_parallel_shard_degree=2"},
  };
  for (const auto& [name, args] : layouts) {
    SCOPED_TRACE(name);
    const auto lines = train_validating(args);
    ASSERT_EQ(lines.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(lines[i]["loss"].get<double>(), losses[i], 1e-5)
          << "step " << i + 1;
      if (i % 2 == 1) {
        EXPECT_NEAR(
            lines[i]["validation_loss"].get<double>(), held_out[i / 2], 1e-5)
            << "step " << i + 1;
        EXPECT_EQ(lines[i]["validation_tokens"].get<int64_t>(), 2 * 8 * 64);
      }
    }
  }
}

}  // namespace
}  // namespace baton
