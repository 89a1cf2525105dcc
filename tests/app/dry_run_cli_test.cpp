// `baton train --dry-run` of the real configs at their full world sizes
// (Llama 3's at 8, 64 and 512 ranks; Qwen3's and Llama 3.2's at 8), as a
// user runs it: no weight is allocated (a
// 4 GiB address-space limit, where 8B's weights alone are 32 GB and 405B's
// 1.5 TiB; the wheel's CUDA libraries map about 2 GiB of it as they load),
// every rank is reported, and the ranks' parameters add up to the model's.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::run_command;
using testing::source_path;

struct DryRun {
  testing::BinaryResult result;
  nlohmann::json report;
};

DryRun dry_run_json(const std::string& config, const std::string& args = "") {
  const auto dir = fresh_dir("dry_run_" + config);
  std::filesystem::create_directories(dir);
  const auto out = dir / "report.json";
  DryRun d;
  d.result = run_command(
      "ulimit -v 4194304 && " + baton_bin() + " train --config " +
      source_path("configs/" + config + ".yaml") + " --dry-run=json" + args +
      " > " + out.string());
  std::ifstream in(out);
  if (d.result.code == 0) {
    d.report = nlohmann::json::parse(in);
  }
  return d;
}

int64_t sum_parameters(const nlohmann::json& report) {
  int64_t n = 0;
  for (const auto& r : report["ranks"]) {
    n += r["parameters"].get<int64_t>();
  }
  return n;
}

/// The norms' weights, which tensor parallel keeps whole on every tp rank.
int64_t norm_parameters(int64_t layers, int64_t dim) {
  return (2 * layers + 1) * dim;
}

TEST(DryRunCli, Llama3_8bOnEightRanks) {
  const auto d = dry_run_json("llama3_8b");
  ASSERT_EQ(d.result.code, 0) << d.result.output;
  const auto& r = d.report;
  EXPECT_EQ(r["world_size"], 8);
  EXPECT_EQ(r["dp_shard"], 8);
  EXPECT_EQ(r["vocab_size"], 128256);
  EXPECT_EQ(r["model_parameters"], 8030261248);
  ASSERT_EQ(r["ranks"].size(), 8u);
  // FSDP alone: the shards tile the model exactly once.
  EXPECT_EQ(sum_parameters(r), 8030261248);
  EXPECT_EQ(r["activation_checkpoint"], "selective op");
  EXPECT_EQ(r["compute_dtype"], "bfloat16");
}

TEST(DryRunCli, Qwen3AndLlama32ConfigsOnEightRanks) {
  // Their flavors' vocabularies (no tokenizer file here), the tie of the
  // small ones counted once, FSDP's shards tiling each model once.
  const std::tuple<const char*, int64_t, int64_t, const char*> configs[] = {
      {"qwen3_0.6b", 151936, 596049920, "selective op"},
      {"qwen3_32b", 151936, 32762123264, "full"},
      {"llama3_2_1b", 128256, 1235814400, "selective op"}};
  for (const auto& [config, vocab, params, checkpointing] : configs) {
    SCOPED_TRACE(config);
    const auto d = dry_run_json(config, " --device cuda");
    ASSERT_EQ(d.result.code, 0) << d.result.output;
    const auto& r = d.report;
    EXPECT_EQ(r["world_size"], 8);
    EXPECT_EQ(r["vocab_size"], vocab);
    EXPECT_EQ(r["model_parameters"], params);
    EXPECT_EQ(sum_parameters(r), params);
    EXPECT_EQ(r["activation_checkpoint"], checkpointing);
  }
}

TEST(DryRunCli, Llama3_70bOnSixtyFourRanks) {
  const auto d = dry_run_json("llama3_70b");
  ASSERT_EQ(d.result.code, 0) << d.result.output;
  const auto& r = d.report;
  EXPECT_EQ(r["world_size"], 64);
  EXPECT_EQ(r["tp"], 8);
  ASSERT_EQ(r["ranks"].size(), 64u);
  // Each tp rank holds its slice of the cut weights and all of the norms.
  EXPECT_EQ(
      sum_parameters(r),
      r["model_parameters"].get<int64_t>() + 7 * norm_parameters(80, 8192));
}

TEST(DryRunCli, Llama3_405bOnFiveHundredTwelveRanks) {
  const auto d = dry_run_json("llama3_405b");
  ASSERT_EQ(d.result.code, 0) << d.result.output;
  const auto& r = d.report;
  EXPECT_EQ(r["world_size"], 512);
  EXPECT_EQ(r["pp"], 8);
  EXPECT_EQ(r["schedule"], "Interleaved1F1B");
  EXPECT_EQ(r["num_stages"], 16);
  EXPECT_EQ(r["microbatches"], 16);
  ASSERT_EQ(r["ranks"].size(), 512u);
  EXPECT_EQ(
      sum_parameters(r),
      r["model_parameters"].get<int64_t>() + 7 * norm_parameters(126, 16384));
  // Loop placement: pipeline rank 0 holds stages 0 and 8, the last rank
  // stages 7 and 15 (the last 7 layers, the norm and the output).
  const auto& first = r["ranks"][0]["stages"];
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]["stage"], 0);
  EXPECT_EQ(first[0]["holds"], "tok_embeddings, layers.0-7");
  EXPECT_EQ(first[1]["stage"], 8);
  const auto& last = r["ranks"][511]["stages"];
  EXPECT_EQ(last[1]["holds"], "layers.119-125, norm, output");
  EXPECT_EQ(r["ranks"][511]["pp"], 7);
  EXPECT_EQ(r["ranks"][511]["tp"], 7);
  // Interleaved1F1B: the first pipeline rank holds the most in flight.
  EXPECT_GT(
      r["ranks"][0]["peak_microbatches"].get<int64_t>(),
      r["ranks"][511]["peak_microbatches"].get<int64_t>());
}

TEST(DryRunCli, TextGroupsTheRanks) {
  const auto r = run_command(
      baton_bin() + " train --config " +
      source_path("configs/llama3_405b.yaml") + " --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("layout: pp=8 dp_replicate=1 dp_shard=8 cp=1 tp=8 "
                    "(world 512)"),
      std::string::npos)
      << r.output;
  // One row per pipeline rank: 64 ranks each.
  EXPECT_NE(
      r.output.find("\n448-511 | 7 0 0-7 0 0-7 | 7 (layers.56-63); 15 "
                    "(layers.119-125, norm, output) |"),
      std::string::npos)
      << r.output;
}

TEST(DryRunCli, BadRequestsExitTwo) {
  const std::string config = source_path("configs/llama3_8b.yaml");
  const auto format =
      run_command(baton_bin() + " train --config " + config + " --dry-run=xml");
  EXPECT_EQ(format.code, 2) << format.output;
  EXPECT_NE(format.output.find("allowed: text, json"), std::string::npos)
      << format.output;
  // A -1 degree needs the world size.
  const auto rest = run_command(
      baton_bin() + " train --config " + config +
      " --dry-run --parallelism.data_parallel_shard_degree=-1");
  EXPECT_EQ(rest.code, 2) << rest.output;
  EXPECT_NE(rest.output.find("--nproc N"), std::string::npos) << rest.output;
  // ... and given one, takes it.
  const auto sixteen = run_command(
      baton_bin() + " train --config " + config +
      " --dry-run --nproc 16 --parallelism.data_parallel_shard_degree=-1");
  EXPECT_EQ(sixteen.code, 0) << sixteen.output;
  EXPECT_NE(sixteen.output.find("(world 16)"), std::string::npos)
      << sixteen.output;
  // A world the degrees do not multiply to.
  const auto seven = run_command(
      baton_bin() + " train --config " + config + " --dry-run --nproc 7");
  EXPECT_EQ(seven.code, 2) << seven.output;
  // A device Baton does not compute on, and --device without --dry-run.
  const auto tpu = run_command(
      baton_bin() + " train --config " + config + " --dry-run --device tpu");
  EXPECT_EQ(tpu.code, 2) << tpu.output;
  EXPECT_NE(tpu.output.find("allowed: cpu, cuda"), std::string::npos)
      << tpu.output;
  const auto run =
      run_command(baton_bin() + " train --config " + config + " --device cuda");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("applies to --dry-run only"), std::string::npos)
      << run.output;
}

TEST(DryRunCli, TheDeviceDecidesWhatAttentionKeeps) {
  // 70B, full checkpointing: the block recomputing in backward holds its
  // attention's probabilities on a CPU (8 heads per tp rank, 8192^2 / 2 per
  // head) and a log-sum-exp per row on CUDA.
  const auto cpu = dry_run_json("llama3_70b", " --device cpu");
  const auto cuda = dry_run_json("llama3_70b", " --device cuda");
  ASSERT_EQ(cpu.result.code, 0) << cpu.result.output;
  ASSERT_EQ(cuda.result.code, 0) << cuda.result.output;
  EXPECT_EQ(cpu.report["device"], "cpu");
  EXPECT_EQ(cuda.report["device"], "cuda");
  const int64_t sequences = 8;  // the config's microbatch: local_batch_size
  const int64_t more =
      cpu.report["ranks"][0]["recompute_bytes"].get<int64_t>() -
      cuda.report["ranks"][0]["recompute_bytes"].get<int64_t>();
  EXPECT_GT(more, sequences * 8 * 8192 * 8192 / 2 * 2);
  EXPECT_LT(more, sequences * 8 * 8192 * (8192 + 64) / 2 * 2);
  EXPECT_EQ(
      cpu.report["ranks"][0]["parameters"],
      cuda.report["ranks"][0]["parameters"]);
}

}  // namespace
}  // namespace baton
