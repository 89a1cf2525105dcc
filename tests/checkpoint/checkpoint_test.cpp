// CheckpointManager end to end, through the `baton` binary as a user runs
// it: exact resume, resume under other layouts, a save killed half-way,
// keep_latest_k, every bad-checkpoint error, and the model-only export read
// by an independent parse. One test builds the model, optimizer, scheduler
// and loader in process to check that a failed load changes nothing.

#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "checkpoint/safetensors.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "models/model_spec.h"
#include "optim/lr_schedulers.h"
#include "optim/optimizers.h"
#include "parallel/dist/process_group.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::baton_bin;
using testing::BinaryResult;
using testing::fresh_dir;
using testing::read_metrics;
using testing::run_command;
using testing::source_path;

/// Small shapes, 10 steps, a checkpoint every 5; float32 compute, whatever
/// `auto` picks on this machine, so that other layouts resume to the same
/// numbers (bf16 is not layout-exact; a test below sets it).
const std::string kRun =
    " --training.mixed_precision_param=float32"
    " --training.seq_len=32 --training.local_batch_size=4"
    " --parallelism.pipeline_parallel_microbatch_size=1"
    " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
    " --metrics.peak_tflops=1 --training.steps=10"
    " --checkpoint.enable=true --checkpoint.interval=5";

BinaryResult train(
    const std::string& config,
    const fs::path& dump,
    const std::string& extra = "",
    int nproc = 1,
    const std::string& env = "") {
  return run_command(
      env + " " + baton_bin() + " train" +
      (nproc > 1 ? " --nproc " + std::to_string(nproc) : "") + " --config " +
      source_path("configs/" + config + ".yaml") +
      " --job.dump_folder=" + dump.string() + kRun + extra);
}

/// (step, loss) of every logged step.
std::vector<std::pair<int64_t, double>> losses(const fs::path& dump) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& j : read_metrics(dump)) {
    out.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
  }
  return out;
}

fs::path step_dir(const fs::path& dump, int64_t step) {
  return dump / "checkpoint" / ("step-" + std::to_string(step));
}

/// A fresh run folder holding only `from`'s checkpoint of `step`: a run
/// that stopped after that save.
fs::path stopped_at(
    const fs::path& from, int64_t step, const std::string& name) {
  const fs::path dump = fresh_dir(name);
  fs::create_directories(dump / "checkpoint");
  fs::copy(step_dir(from, step), step_dir(dump, step));
  return dump;
}

/// Every tensor of a checkpoint folder, by FQN.
std::map<std::string, at::Tensor> checkpoint_tensors(const fs::path& dir) {
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") {
      continue;
    }
    const SafetensorsReader reader(entry.path().string());
    for (const auto& e : reader.entries()) {
      out[e.name] = reader.read(e.name);
    }
  }
  return out;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream(path) << j.dump(1);
}

class ExactResume : public ::testing::TestWithParam<bool> {};

TEST_P(ExactResume, TenStepsEqualFiveSaveResumeFive) {
  const std::string async = GetParam() ? "true" : "false";
  const auto straight = fresh_dir("ck_exact_" + async);
  const auto r = train("debug_model", straight, " --checkpoint.async=" + async);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto resumed = stopped_at(straight, 5, "ck_exact_resumed_" + async);
  const auto r2 = train("debug_model", resumed, " --checkpoint.async=" + async);
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("resumed from step 5"), std::string::npos);

  const auto all = losses(straight);
  const auto after = losses(resumed);
  ASSERT_EQ(all.size(), 10u);
  ASSERT_EQ(after.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(after[i].first, all[5 + i].first);
    EXPECT_EQ(after[i].second, all[5 + i].second) << "step " << 6 + i;
  }
  // The end states agree bitwise: weights and optimizer state.
  const auto a = checkpoint_tensors(step_dir(straight, 10));
  const auto b = checkpoint_tensors(step_dir(resumed, 10));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  }
  const json index = read_json(step_dir(resumed, 10) / "index.json");
  EXPECT_EQ(index["step"], 10);
  EXPECT_EQ(index["tokens_seen"], 10 * 4 * 32);
  EXPECT_EQ(index["lr_scheduler_steps"], 10);
}

INSTANTIATE_TEST_SUITE_P(
    SyncAndAsync, ExactResume, ::testing::Bool(), [](const auto& info) {
      return info.param ? "Async" : "Sync";
    });

TEST(Checkpoint, PipelinedSaveResumesUnderOtherLayouts) {
  // Saved by pp 2 with 2 stages per rank (Interleaved1F1B, loop placement).
  const auto saved = fresh_dir("ck_layout_saved");
  const auto r = train("debug_pp_interleaved", saved, "", 2);
  ASSERT_EQ(r.code, 0) << r.output;
  // Each pipeline rank wrote its own stages' tensors.
  const json index = read_json(step_dir(saved, 5) / "index.json");
  // The layout lists the mesh's axes, pp outermost.
  const json axis_pp = {{"name", "pp"}, {"degree", 2}};
  const json axis_dp_replicate = {{"name", "dp_replicate"}, {"degree", 1}};
  EXPECT_EQ(index["layout"]["axes"][0], axis_pp);
  EXPECT_EQ(index["layout"]["axes"][1], axis_dp_replicate);
  EXPECT_EQ(index["layout"]["stages_per_rank"], 2);
  EXPECT_EQ(index["layout"]["schedule"], "Interleaved1F1B");
  EXPECT_EQ(
      index["tensors"]["tok_embeddings.weight"]["file"],
      "rank-00000.safetensors");
  EXPECT_EQ(
      index["tensors"]["layers.2.attention.wq.weight"]["file"],
      "rank-00001.safetensors");
  EXPECT_EQ(
      index["tensors"]["optimizer.output.weight.exp_avg"]["file"],
      "rank-00001.safetensors");
  const auto reference = losses(saved);
  ASSERT_EQ(reference.size(), 10u);

  const std::pair<std::string, int> layouts[] = {
      {"debug_model", 1}, {"debug_pp_zbv", 2}, {"debug_pp_1f1b", 2}};
  for (const auto& [config, nproc] : layouts) {
    const auto dump = stopped_at(saved, 5, "ck_layout_" + config);
    const auto r2 = train(config, dump, "", nproc);
    ASSERT_EQ(r2.code, 0) << r2.output;
    EXPECT_NE(r2.output.find("resumed from step 5"), std::string::npos);
    const auto after = losses(dump);
    ASSERT_EQ(after.size(), 5u) << config;
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(after[i].first, 6 + static_cast<int64_t>(i));
      EXPECT_NEAR(
          after[i].second,
          reference[5 + i].second,
          1e-5 * reference[5 + i].second)
          << config << " step " << after[i].first;
    }
  }
}

/// Runs `saved` (10 steps, saves at 5 and 10) and resumes its step 5 under
/// each of `layouts` (config, nproc, extra flags); each must continue the
/// straight run's losses.
void expect_resumes_under(
    const std::string& config,
    int nproc,
    const std::string& extra,
    const std::string& name,
    const std::vector<std::tuple<std::string, int, std::string>>& layouts) {
  const auto saved = fresh_dir("ck_" + name);
  const auto r = train(config, saved, extra, nproc);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto reference = losses(saved);
  ASSERT_EQ(reference.size(), 10u);
  for (const auto& [config2, nproc2, extra2] : layouts) {
    SCOPED_TRACE(config2 + extra2);
    const auto dump = stopped_at(saved, 5, "ck_" + name + "_resumed");
    const auto r2 = train(config2, dump, extra2, nproc2);
    ASSERT_EQ(r2.code, 0) << r2.output;
    EXPECT_NE(r2.output.find("resumed from step 5"), std::string::npos);
    const auto after = losses(dump);
    ASSERT_EQ(after.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(
          after[i].second,
          reference[5 + i].second,
          1e-5 * reference[5 + i].second)
          << "step " << after[i].first;
    }
  }
}

const std::string kShard2 = " --parallelism.data_parallel_shard_degree=2";
const std::string kReplicate2 =
    " --parallelism.data_parallel_replicate_degree=2";

TEST(Checkpoint, ShardedSavesSlicesAndResumesUnderOtherLayouts) {
  // dp_shard 2 saves each rank's rows; the index tiles each tensor with them.
  const auto saved = fresh_dir("ck_fsdp_index");
  ASSERT_EQ(train("debug_model", saved, kShard2, 2).code, 0);
  const json index = read_json(step_dir(saved, 5) / "index.json");
  const json axis_dp_shard = {{"name", "dp_shard"}, {"degree", 2}};
  EXPECT_EQ(index["layout"]["axes"][2], axis_dp_shard);
  const json& wq = index["tensors"]["layers.0.attention.wq.weight"];
  EXPECT_EQ(wq["shape"], json::array({256, 256}));
  ASSERT_EQ(wq["slices"].size(), 2u);
  EXPECT_EQ(wq["slices"][1]["offsets"], json::array({128, 0}));
  EXPECT_EQ(wq["slices"][1]["file"], "rank-00001.safetensors");
  // The steps are scalars, written once.
  EXPECT_EQ(
      index["tensors"]["optimizer.norm.weight.step"]["file"],
      "rank-00000.safetensors");
  // Same data-parallel degree (so the same data): unsharded, sharded under
  // a pipeline, and back.
  expect_resumes_under(
      "debug_model",
      2,
      kShard2,
      "fsdp_out",
      {{"debug_model", 2, kReplicate2},
       {"debug_pp_1f1b",
        4,
        kShard2 + " --parallelism.fsdp_reshard_after_"
                  "forward=always"},
       {"debug_pp_zbv", 4, kReplicate2}});
  expect_resumes_under(
      "debug_pp_zbv",
      4,
      kReplicate2,
      "fsdp_in",
      {{"debug_model", 2, kShard2}, {"debug_pp_1f1b", 4, kShard2}});
}

TEST(Checkpoint, Bf16RunsSaveFloat32WeightsAndOptimizerState) {
  // Mixed precision computes in bf16 over float32 masters: what a save
  // writes is the masters and AdamW's float32 state, unsharded, sharded or
  // pipelined (ZBV: split backward, bf16 activations between stages), and a
  // float32 run resumes from it.
  for (const auto& [config, nproc, extra] :
       {std::tuple<std::string, int, std::string>{"debug_model", 1, ""},
        {"debug_model",
         2,
         kShard2 + " --training.mixed_precision_reduce=bfloat16"},
        {"debug_pp_zbv", 2, ""}}) {
    SCOPED_TRACE(config + extra);
    const auto dump =
        fresh_dir("ck_bf16_" + config + "_" + std::to_string(nproc));
    const auto r = train(
        config,
        dump,
        extra + " --training.mixed_precision_param=bfloat16",
        nproc);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(
        r.output.find("mixed precision: compute bfloat16"), std::string::npos)
        << r.output;
    const json index = read_json(step_dir(dump, 5) / "index.json");
    int64_t floats = 0;
    for (const auto& [fqn, entry] : index["tensors"].items()) {
      if (fqn.size() > 5 && fqn.substr(fqn.size() - 5) == ".step") {
        continue;  // AdamW's step counts
      }
      EXPECT_EQ(entry["dtype"], "F32") << fqn;
      ++floats;
    }
    EXPECT_GT(floats, 0);
    for (const auto& [fqn, t] : checkpoint_tensors(step_dir(dump, 5))) {
      if (fqn.find(".step") == std::string::npos) {
        EXPECT_EQ(t.scalar_type(), at::kFloat) << fqn;
      }
    }
    if (nproc == 1) {
      const auto resumed = stopped_at(dump, 5, "ck_bf16_resumed");
      const auto r2 = train(
          "debug_model", resumed, " --training.mixed_precision_param=float32");
      ASSERT_EQ(r2.code, 0) << r2.output;
      EXPECT_NE(r2.output.find("resumed from step 5"), std::string::npos);
    }
  }
}

TEST(Checkpoint, AShardedRunExportsWholeTensors) {
  // The export of dp_shard 2 equals the one of the same run unsharded
  // (dp_replicate 2): whole tensors, assembled from the ranks' rows.
  const std::string exported = " --checkpoint.model_only_export=true";
  const auto sharded = fresh_dir("ck_fsdp_export");
  ASSERT_EQ(train("debug_model", sharded, kShard2 + exported, 2).code, 0);
  const auto replicated = fresh_dir("ck_fsdp_export_reference");
  ASSERT_EQ(
      train("debug_model", replicated, kReplicate2 + exported, 2).code, 0);
  const SafetensorsReader a(
      (sharded / "checkpoint" / "export" / "model.safetensors").string());
  const SafetensorsReader b(
      (replicated / "checkpoint" / "export" / "model.safetensors").string());
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const auto& e : b.entries()) {
    ASSERT_NE(a.find(e.name), nullptr) << e.name;
    EXPECT_TRUE(torch::allclose(a.read(e.name), b.read(e.name), 1e-4, 1e-6))
        << e.name;
  }
}

TEST(Checkpoint, DataParallelReplicasWriteOnceAndTheLoaderStateIsGlobal) {
  // Saved in the background, by two processes.
  const auto saved = fresh_dir("ck_dp_saved");
  const std::string dp2 = " --parallelism.data_parallel_replicate_degree=2";
  const auto r =
      train("debug_model", saved, dp2 + " --checkpoint.async=true", 2);
  ASSERT_EQ(r.code, 0) << r.output;
  // One writer for the replicated tensors, one loader state for the global
  // stream, where every rank stands.
  EXPECT_TRUE(fs::exists(step_dir(saved, 5) / "rank-00000.safetensors"));
  EXPECT_FALSE(fs::exists(step_dir(saved, 5) / "rank-00001.safetensors"));
  const json index = read_json(step_dir(saved, 5) / "index.json");
  EXPECT_EQ(index["version"], 4);
  ASSERT_TRUE(index["dataloader"].contains("state")) << index["dataloader"];
  EXPECT_FALSE(index["dataloader"]["state"].contains("dp_rank"));

  // Same degree: the loaders continue where they were; exact.
  const auto same = stopped_at(saved, 5, "ck_dp_same");
  const auto r2 = train("debug_model", same, dp2, 2);
  ASSERT_EQ(r2.code, 0) << r2.output;
  const auto all = losses(saved);
  const auto after = losses(same);
  ASSERT_EQ(after.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(after[i].second, all[5 + i].second) << "step " << 6 + i;
  }
  // Another degree with the same global batch (one process, twice the
  // local batch): the same tokens follow, so the same losses, up to the
  // order of float sums.
  const auto other = stopped_at(saved, 5, "ck_dp_other");
  const auto r3 = train("debug_model", other, " --training.local_batch_size=8");
  ASSERT_EQ(r3.code, 0) << r3.output;
  EXPECT_NE(r3.output.find("resumed from step 5"), std::string::npos);
  const auto one = losses(other);
  ASSERT_EQ(one.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(one[i].second, all[5 + i].second, 1e-5) << "step " << 6 + i;
  }
}

TEST(Checkpoint, OlderIndexesLoad) {
  // A version 2 index of the per-rank loader: one rank's state is a position in
  // the global stream and is restored; several ranks' are not, and the run says
  // so and starts the stream over.
  const auto saved = fresh_dir("ck_v2_saved");
  ASSERT_EQ(train("debug_model", saved).code, 0);
  const auto as_v2 = [&](const std::string& name, int64_t dp) {
    const auto dir = stopped_at(saved, 5, name);
    const fs::path path = step_dir(dir, 5) / "index.json";
    json index = read_json(path);
    json state = index["dataloader"]["state"];
    state["dp_rank"] = 0;
    state["dp_size"] = dp;
    index["version"] = 2;
    index["dataloader"] = {{"dp_size", dp}, {"states", {{"0", state}}}};
    std::ofstream(path) << index.dump();
    return dir;
  };
  const auto one = as_v2("ck_v2_one", 1);
  const auto r1 = train("debug_model", one);
  ASSERT_EQ(r1.code, 0) << r1.output;
  const auto all = losses(saved);
  const auto after = losses(one);
  ASSERT_EQ(after.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(after[i].second, all[5 + i].second) << "step " << 6 + i;
  }
  // A version 3 index names the four degrees of its day: it loads, and its
  // layout is this run's, so the RNG states carry over.
  const auto v3 = stopped_at(saved, 5, "ck_v3");
  {
    const fs::path path = step_dir(v3, 5) / "index.json";
    json index = read_json(path);
    index["version"] = 3;
    index["layout"] = {
        {"world_size", 1},
        {"pp", 1},
        {"stages_per_rank", 1},
        {"schedule", ""},
        {"dp_replicate", 1},
        {"dp_shard", 1},
        {"tp", 1}};
    std::ofstream(path) << index.dump();
  }
  const auto r3 = train("debug_model", v3);
  ASSERT_EQ(r3.code, 0) << r3.output;
  EXPECT_NE(r3.output.find("resumed from step 5"), std::string::npos);
  EXPECT_EQ(r3.output.find("RNG states not restored"), std::string::npos)
      << r3.output;
  const auto after_v3 = losses(v3);
  ASSERT_EQ(after_v3.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(after_v3[i].second, all[5 + i].second) << "step " << 6 + i;
  }
  const auto two = as_v2("ck_v2_two", 2);
  const auto r2 = train("debug_model", two);
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(
      r2.output.find("holds no global loader state (a per-rank one of "
                     "several ranks, saved by an earlier Baton)"),
      std::string::npos)
      << r2.output;
}

TEST(Checkpoint, InspectReportsWhatASaveHoldsAndFindsDamage) {
  const auto dump = fresh_dir("ck_inspect");
  ASSERT_EQ(
      train(
          "debug_model", dump, " --parallelism.data_parallel_shard_degree=2", 2)
          .code,
      0);
  const std::string inspect = baton_bin() + " checkpoint inspect ";
  // By default a summary per step; --tensors lists every tensor.
  const auto summary = run_command(inspect + (dump / "checkpoint").string());
  EXPECT_EQ(summary.code, 0) << summary.output;
  EXPECT_EQ(
      summary.output.find("layers.0.attention.wq.weight"), std::string::npos)
      << summary.output;
  EXPECT_NE(
      summary.output.find(
          "every byte checks out (--tensors lists every tensor)"),
      std::string::npos)
      << summary.output;
  const auto good =
      run_command(inspect + (dump / "checkpoint").string() + " --tensors");
  EXPECT_EQ(good.code, 0) << good.output;
  for (const char* expected :
       {"2 steps step-5 step-10",
        "step-5: step 5, ",
        "saved by dp_shard 2 (index version 4)",
        "  loader: {\"dataset_size\":",
        "  layers.0.attention.wq.weight  F32 [256, 256]  2 slices: "
        "rank-00000.safetensors at [0, 0] [128, 256]; rank-00001.safetensors "
        "at [128, 0] [128, 256];",
        "every byte checks out"}) {
    EXPECT_NE(good.output.find(expected), std::string::npos) << expected << "\n"
                                                             << good.output;
  }
  // One flipped byte at the end of a file's data: its last tensor.
  const fs::path file = step_dir(dump, 10) / "rank-00001.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x5a);
    f.seekp(-1, std::ios::end);
    f.put(c);
  }
  const auto bad = run_command(inspect + step_dir(dump, 10).string());
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(
      bad.output.find("error: step-10/rank-00001.safetensors: tensor '"),
      std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("(the file is damaged)"), std::string::npos);
  // Not a checkpoint: exit 1 naming the folder; no folder: usage, exit 2.
  const auto empty = fresh_dir("ck_inspect_empty");
  fs::create_directories(empty);
  const auto none = run_command(inspect + empty.string());
  EXPECT_EQ(none.code, 1) << none.output;
  EXPECT_NE(
      none.output.find("holds no step-N folder with an index.json"),
      std::string::npos)
      << none.output;
  EXPECT_EQ(run_command(baton_bin() + " checkpoint inspect").code, 2);
}

TEST(Checkpoint, ASaveKilledHalfWayLeavesThePreviousOneLoadable) {
  const std::string every2 = " --training.steps=6 --checkpoint.interval=2";
  const auto straight = fresh_dir("ck_kill_straight");
  ASSERT_EQ(train("debug_model", straight, every2).code, 0);

  const auto dump = fresh_dir("ck_kill");
  const auto killed =
      train("debug_model", dump, every2, 1, "BATON_INJECT_FAULT=killsave:0:4");
  EXPECT_NE(killed.code, 0) << killed.output;
  EXPECT_NE(killed.output.find("killed half-way"), std::string::npos);
  // Step 4 died mid-file: only its partial folder exists, shorter than a
  // whole file, and step 2 is complete.
  const auto partial =
      dump / "checkpoint" / "step-4.partial" / "rank-00000.safetensors";
  ASSERT_TRUE(fs::exists(partial));
  EXPECT_LT(
      fs::file_size(partial),
      fs::file_size(step_dir(dump, 2) / "rank-00000.safetensors"));
  EXPECT_FALSE(fs::exists(step_dir(dump, 4)));
  EXPECT_EQ(
      CheckpointManager::list_steps(dump / "checkpoint"),
      std::vector<int64_t>{2});

  const auto again = train("debug_model", dump, every2);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(
      again.output.find("step-4.partial, left by a save that did not finish"),
      std::string::npos);
  EXPECT_NE(again.output.find("resumed from step 2"), std::string::npos);
  // The killed run logged steps 1-4; the resumed one kept 1-2 of them and
  // logged 3-6, with the losses of the run that was never interrupted.
  const auto reference = losses(straight);
  const auto both = losses(dump);
  ASSERT_EQ(both.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(both[i].first, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(both[i].second, reference[i].second) << "step " << i + 1;
  }
}

TEST(Checkpoint, KeepsTheLatestKAndLoadsAGivenStep) {
  const auto dump = fresh_dir("ck_keep");
  const auto r = train(
      "debug_model",
      dump,
      " --checkpoint.interval=2 --checkpoint.keep_latest_k=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(
      CheckpointManager::list_steps(dump / "checkpoint"),
      (std::vector<int64_t>{8, 10}));
  const auto missing = train("debug_model", dump, " --checkpoint.load_step=4");
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(
      missing.output.find(
          "error: [checkpoint] checkpoint.load_step 4: no step-4 in " +
          (dump / "checkpoint").string() + " (complete checkpoints: 8, 10)"),
      std::string::npos)
      << missing.output;
  // load_step 8 resumes there and trains steps 9 and 10 again; the old
  // step 10 belongs to the abandoned run and is moved aside, not loaded or
  // pruned later.
  const auto r2 = train("debug_model", dump, " --checkpoint.load_step=8");
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("resumed from step 8"), std::string::npos);
  EXPECT_NE(
      r2.output.find("step-10.superseded (kept, never loaded or pruned)"),
      std::string::npos)
      << r2.output;
  EXPECT_TRUE(
      fs::exists(dump / "checkpoint" / "step-10.superseded" / "index.json"));
  EXPECT_EQ(
      CheckpointManager::list_steps(dump / "checkpoint"),
      (std::vector<int64_t>{8, 10}));
  // A save that died after writing its index, before its rename, is
  // complete: the next start puts it in place and resumes from it.
  fs::rename(step_dir(dump, 10), dump / "checkpoint" / "step-10.partial");
  const auto r3 = train("debug_model", dump);
  ASSERT_EQ(r3.code, 0) << r3.output;
  EXPECT_NE(
      r3.output.find("step-10.partial is complete; renamed to"),
      std::string::npos)
      << r3.output;
  EXPECT_NE(r3.output.find("resumed from step 10"), std::string::npos);
}

TEST(Checkpoint, ASaveThatCannotBeWrittenStopsTheRun) {
  // The checkpoint folder's place is taken by a file: sync saves fail at
  // once, async ones at the next save or the end, never silently.
  for (const std::string async : {"false", "true"}) {
    const auto dump = fresh_dir("ck_unwritable_" + async);
    fs::create_directories(dump);
    std::ofstream(dump / "checkpoint") << "not a folder";
    const auto r = train("debug_model", dump, " --checkpoint.async=" + async);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(
        r.output.find("error: [checkpoint] checkpoint of step 5 not saved: "
                      "rank 0: "),
        std::string::npos)
        << r.output;
  }
}

/// A checkpoint of the debug model at step 5. ctest runs tests in parallel
/// processes: each test names its own.
fs::path good_checkpoint(const std::string& name) {
  const auto dump = fresh_dir(name);
  const auto r = train("debug_model", dump, " --training.steps=5");
  EXPECT_EQ(r.code, 0) << r.output;
  return dump;
}

/// Rewrites `dir`'s rank-00000 file with `edit` applied to its tensors and
/// the index updated to match (valid checksums): the file and index agree,
/// but no longer with the model.
void rewrite_consistently(
    const fs::path& dir,
    const std::function<void(std::map<std::string, at::Tensor>&)>& edit) {
  auto tensors = checkpoint_tensors(dir);
  edit(tensors);
  std::vector<SafetensorsItem> items;
  for (const auto& [name, t] : tensors) {
    items.push_back(safetensors_item(name, t));
  }
  const auto entries =
      write_safetensors((dir / "rank-00000.safetensors").string(), items);
  json index = read_json(dir / "index.json");
  for (const auto& e : entries) {
    index["tensors"][e.name] = {
        {"file", "rank-00000.safetensors"},
        {"dtype", safetensors_dtype(e.dtype)},
        {"shape", e.shape},
        {"crc32", e.crc32}};
  }
  write_json(dir / "index.json", index);
}

struct BadCase {
  std::string name;
  std::function<void(const fs::path& dir)> corrupt;
  std::vector<std::string> message;
};

TEST(Checkpoint, EveryBadCheckpointExitsOneNamingTheFileAndTensor) {
  const std::string file = "rank-00000.safetensors";
  const std::vector<BadCase> cases = {
      {"truncated",
       [&](const fs::path& dir) {
         fs::resize_file(dir / file, fs::file_size(dir / file) / 2);
       },
       {file, "truncated: tensor '"}},
      {"checksum",
       [&](const fs::path& dir) {
         // Flip a byte inside layers.3.feed_forward.w2.weight.
         const SafetensorsReader reader((dir / file).string());
         const auto* e = reader.find("layers.3.feed_forward.w2.weight");
         ASSERT_NE(e, nullptr);
         std::fstream f(
             dir / file, std::ios::in | std::ios::out | std::ios::binary);
         uint64_t header = 0;
         f.read(reinterpret_cast<char*>(&header), 8);
         const auto at =
             static_cast<std::streamoff>(8 + header + e->begin + 100);
         char byte = 0;
         f.seekg(at);
         f.read(&byte, 1);
         byte = static_cast<char>(byte ^ 0x5a);
         f.seekp(at);
         f.write(&byte, 1);
       },
       {file, "tensor 'layers.3.feed_forward.w2.weight': checksum mismatch"}},
      {"missing",
       [](const fs::path& dir) {
         json index = read_json(dir / "index.json");
         index["tensors"].erase(
             "optimizer.layers.1.attention.wk.weight.exp_avg_sq");
         write_json(dir / "index.json", index);
       },
       {"index.json",
        "tensor 'optimizer.layers.1.attention.wk.weight.exp_avg_sq' is "
        "missing"}},
      {"extra",
       [](const fs::path& dir) {
         json index = read_json(dir / "index.json");
         index["tensors"]["layers.6.attention.wq.weight"] =
             index["tensors"]["layers.5.attention.wq.weight"];
         write_json(dir / "index.json", index);
       },
       {"index.json",
        "tensor 'layers.6.attention.wq.weight' (in rank-00000.safetensors) is "
        "not in the model"}},
      {"shape",
       [](const fs::path& dir) {
         rewrite_consistently(dir, [](auto& t) {
           t["tok_embeddings.weight"] = torch::zeros({100, 256});
         });
       },
       {file,
        "tensor 'tok_embeddings.weight' is F32 [100, 256], but the model's is "
        "F32 [258, 256]"}},
      {"dtype",
       [](const fs::path& dir) {
         rewrite_consistently(dir, [](auto& t) {
           t["norm.weight"] = t["norm.weight"].to(torch::kBFloat16);
         });
       },
       {file,
        "tensor 'norm.weight' is BF16 [256], but the model's is F32 [256]"}},
      {"index_and_file_disagree",
       [&](const fs::path& dir) {
         json index = read_json(dir / "index.json");
         index["tensors"]["norm.weight"]["file"] = "rank-00001.safetensors";
         write_json(dir / "index.json", index);
         std::ofstream(dir / "rank-00001.safetensors") << "garbage";
       },
       {"rank-00001.safetensors",
        "truncated",
        "(it holds tensor 'norm.weight')"}},
  };
  const auto good = good_checkpoint("ck_good_for_bad");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto dump = stopped_at(good, 5, "ck_bad_" + c.name);
    c.corrupt(step_dir(dump, 5));
    const auto r = train("debug_model", dump);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("error: [checkpoint] "), std::string::npos)
        << r.output;
    for (const auto& m : c.message) {
      EXPECT_NE(r.output.find(m), std::string::npos) << m << "\n" << r.output;
    }
    // Nothing trained on: no step was logged.
    EXPECT_TRUE(read_metrics(dump).empty());
  }
}

TEST(Checkpoint, AFailedLoadChangesNothing) {
  // The corrupt tensor is the last one read: every other one was read and
  // checked first, yet the model, the optimizer and the LR stay untouched.
  const auto dump =
      stopped_at(good_checkpoint("ck_good_for_no_partial"), 5, "ck_no_partial");
  rewrite_consistently(step_dir(dump, 5), [](auto&) {});
  json index = read_json(step_dir(dump, 5) / "index.json");
  index["tensors"]["optimizer.output.weight.step"]["crc32"] = 12345;
  write_json(step_dir(dump, 5) / "index.json", index);

  // The debug model, its optimizer, scheduler and loader, as the checkpoint
  // of the binary's run needs them.
  register_builtin_models();
  register_builtin_tokenizers();
  register_builtin_datasets();
  register_builtin_optimizers();
  register_builtin_lr_schedules();
  const JobConfig config = load_job_config(
      source_path("configs/debug_model.yaml"),
      {"job.dump_folder=" + dump.string(),
       "training.seq_len=32",
       "training.local_batch_size=4",
       "checkpoint.enable=true"});
  std::shared_ptr<const Tokenizer> tokenizer =
      tokenizer_registry().get(config.model.tokenizer)("");
  const auto& spec = model_registry().get(config.model.name);
  ModelArgs args = model_flavor(spec, config.model.flavor);
  args.vocab_size = tokenizer->vocab_size();
  ModelParts parts;
  parts.push_back(std::make_shared<ModelPart>(
      spec.build(args, ChunkSpec{}, config.training.seed)));
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizer_list;
  optimizer_list.push_back(optimizer_registry().get(config.optimizer.name)(
      parts[0].module().parameters(), config));
  OptimizersContainer optimizers(std::move(optimizer_list));
  std::vector<std::unique_ptr<LRScheduler>> scheduler_list;
  scheduler_list.push_back(std::make_unique<LRScheduler>(
      optimizers[0],
      lr_schedule_registry().get(config.lr_scheduler.name)(
          config.lr_scheduler, config.training.steps)));
  LRSchedulersContainer schedulers(std::move(scheduler_list));
  DataLoader dataloader(
      dataset_registry().get(config.training.dataset)({}),
      tokenizer,
      DataLoaderOptions(
          config.training.local_batch_size, config.training.seq_len));
  CheckpointManager checkpointer(
      config.checkpoint,
      config.job.dump_folder,
      parts,
      optimizers,
      schedulers,
      &dataloader,
      CheckpointLayout{},
      dist::ProcessGroup::single("checkpoint"),
      "{}");
  std::vector<at::Tensor> before;
  for (const auto& p : parts.parameters()) {
    before.push_back(p.detach().clone());
  }
  const double lr = schedulers.lr();
  const auto loader = dataloader.state();
  try {
    checkpointer.load();
    ADD_FAILURE() << "the corrupt checkpoint loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "tensor 'optimizer.output.weight.step': checksum mismatch"),
        std::string::npos)
        << e.what();
  }
  const auto after = parts.parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(after[i], before[i])) << i;
  }
  EXPECT_TRUE(optimizers[0].state().empty());
  EXPECT_EQ(schedulers.lr(), lr);
  EXPECT_EQ(dataloader.state(), loader);
}

/// Every file and folder under `dir` (relative names) with its contents.
std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(entry.path(), dir).string();
    if (entry.is_directory()) {
      out[name + "/"] = "";
      continue;
    }
    std::ifstream in(entry.path(), std::ios::binary);
    out[name] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

TEST(Checkpoint, AFailedLoadLeavesTheFolderByteForByte) {
  // Steps 5 and 10, an unfinished save of step 12 and a complete one of
  // step 15 that died before its rename: a successful load of step 5
  // would move 10 and 15 aside and remove step 12's leftover. With step 5
  // (or, resuming from the latest, step 15) corrupt, nothing moves.
  const auto straight = fresh_dir("ck_failed_load_source");
  ASSERT_EQ(train("debug_model", straight).code, 0);
  const auto dump = fresh_dir("ck_failed_load");
  fs::create_directories(dump / "checkpoint");
  for (const int64_t step : {5, 10}) {
    fs::copy(step_dir(straight, step), step_dir(dump, step));
  }
  const fs::path partial = dump / "checkpoint" / "step-12.partial";
  fs::create_directories(partial);
  std::ofstream(partial / "rank-00000.safetensors") << "half a file";
  fs::copy(step_dir(straight, 10), dump / "checkpoint" / "step-15.partial");
  const auto flip_a_byte = [](const fs::path& dir) {
    const fs::path file = dir / "rank-00000.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(file) - 10));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 10));
    f.write(&byte, 1);
  };
  flip_a_byte(step_dir(dump, 5));
  flip_a_byte(dump / "checkpoint" / "step-15.partial");
  const auto before = folder_bytes(dump / "checkpoint");
  for (const std::string extra : {" --checkpoint.load_step=5", ""}) {
    SCOPED_TRACE(extra);
    const auto r = train("debug_model", dump, extra);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("checksum mismatch"), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("superseded"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("removing"), std::string::npos) << r.output;
    const auto after = folder_bytes(dump / "checkpoint");
    EXPECT_EQ(after.size(), before.size());
    for (const auto& [name, bytes] : before) {
      const auto it = after.find(name);
      ASSERT_NE(it, after.end()) << name << " is gone";
      EXPECT_TRUE(it->second == bytes) << name << " changed";
    }
    EXPECT_TRUE(read_metrics(dump).empty());
  }
  // With step 5 whole again, the same load succeeds and only then tidies.
  fs::remove_all(step_dir(dump, 5));
  fs::copy(step_dir(straight, 5), step_dir(dump, 5));
  const auto ok = train("debug_model", dump, " --checkpoint.load_step=5");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("resumed from step 5"), std::string::npos);
  EXPECT_TRUE(fs::exists(dump / "checkpoint" / "step-10.superseded"));
  EXPECT_TRUE(fs::exists(dump / "checkpoint" / "step-15.superseded"));
  EXPECT_FALSE(fs::exists(partial));
}

TEST(Checkpoint, ModelOnlyExportIsOneSafetensorsFileAnyReaderCanRead) {
  // Pipelined, so rank 0 merges both ranks' weights into the one file.
  const auto dump = fresh_dir("ck_export");
  const auto r = train(
      "debug_pp_1f1b",
      dump,
      " --training.steps=3 --checkpoint.interval=3"
      " --checkpoint.model_only_export=true --checkpoint.export_dtype=bfloat16",
      2);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto path = dump / "checkpoint" / "export" / "model.safetensors";
  ASSERT_TRUE(fs::exists(path));
  // Parsed by hand: 8-byte length, JSON header, data back to back.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  // The weights of the whole model, nothing else, in bf16, back to back.
  const auto weights = checkpoint_tensors(step_dir(dump, 3));
  size_t model_tensors = 0;
  uint64_t offset = 0;
  std::vector<std::string> names;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      continue;
    }
    names.push_back(name);
    EXPECT_EQ(entry["dtype"], "BF16") << name;
    const auto offsets = entry["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_TRUE(weights.count(name)) << name;
    const at::Tensor expected = weights.at(name).to(torch::kBFloat16);
    EXPECT_EQ(
        entry["shape"].get<std::vector<int64_t>>(), expected.sizes().vec());
    ASSERT_EQ(
        offsets[1] - offsets[0], static_cast<uint64_t>(expected.numel()) * 2);
    EXPECT_EQ(
        std::memcmp(
            bytes.data() + 8 + n + offsets[0],
            expected.data_ptr(),
            offsets[1] - offsets[0]),
        0)
        << name;
    offset += offsets[1] - offsets[0];
  }
  EXPECT_EQ(8 + n + offset, bytes.size());
  for (const auto& [name, t] : weights) {
    model_tensors += name.rfind("optimizer.", 0) != 0;
  }
  EXPECT_EQ(names.size(), model_tensors);
  EXPECT_EQ(model_tensors, 2u + 6 * 9 + 1);
  for (const std::string name :
       {"tok_embeddings.weight",
        "layers.0.attention.wq.weight",
        "layers.5.feed_forward.w3.weight",
        "norm.weight",
        "output.weight"}) {
    EXPECT_TRUE(header.contains(name)) << name;
  }
  const json config = read_json(dump / "checkpoint" / "export" / "config.json");
  EXPECT_EQ(config["dim"], 256);
  EXPECT_EQ(config["n_layers"], 6);
  EXPECT_EQ(config["vocab_size"], 258);
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["step"], 3);
  EXPECT_FALSE(fs::exists(dump / "checkpoint" / "export.partial"));
}

// A checkpoint records the model it was saved from: resuming it into
// another family or flavor fails (exit 1, nothing loaded) naming the saved
// model and the key to change, not a missing tensor.
TEST(Checkpoint, AResumeIntoAnotherFamilyOrFlavorNamesIt) {
  const auto dump = testing::fresh_dir("ck_other_family");
  const auto saved =
      train("debug_model", dump, " --model.name=qwen3 --training.steps=5");
  ASSERT_EQ(saved.code, 0) << saved.output;
  const json index = read_json(step_dir(dump, 5) / "index.json");
  EXPECT_EQ(index["model"]["model"], "qwen3");
  EXPECT_EQ(index["model"]["tie_embeddings"], true);
  const auto other = train("debug_model", dump, "");
  EXPECT_EQ(other.code, 1) << other.output;
  EXPECT_NE(
      other.output.find("saved from model qwen3 debugmodel, but this run's "
                        "model.name is 'llama3'"),
      std::string::npos)
      << other.output;
  // The same family with another tokenizer: another vocabulary.
  const auto retokenized = train(
      "debug_model",
      dump,
      " --model.name=qwen3 --model.tokenizer=sentencepiece"
      " --model.tokenizer_path=" +
          source_path("assets/kjv_sp.model"));
  EXPECT_EQ(retokenized.code, 1) << retokenized.output;
  EXPECT_NE(
      retokenized.output.find("with vocab_size 258, but this run's"),
      std::string::npos)
      << retokenized.output;
}

}  // namespace
}  // namespace baton
