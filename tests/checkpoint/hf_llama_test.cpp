// The Hugging Face Llama layout: checkpoint.export_format hf writes it and
// checkpoint.initial_load_hf reads it. The round trip is bitwise, from one
// file or from shards (transformers' own forward of such folders:
// hf_families_test.cpp); a load into pp 2 and tp 2 (ranks as threads over real
// Gloo) trains to the one-process loss; a bad folder changes nothing and names
// the file and the cause. Through the binary: the keys, and their exit
// codes.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "models/model_spec.h"
#include "tests/baton_binary.h"
#include "tests/checkpoint/layout_checkpoint.h"
#include "tests/trainer/layout_run.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::LayoutRank;
using testing::RunLayout;

/// Baton's model config (the builder's, as the Baton export writes it) of
/// the layout runs' model.
std::string model_config() {
  const ModelArgs a = testing::layout_run_args();
  return json{
      {"model", "llama3"},
      {"flavor", "layout_run"},
      {"dim", a.dim},
      {"n_layers", a.n_layers},
      {"n_heads", a.n_heads},
      {"n_kv_heads", a.kv_heads()},
      {"vocab_size", a.vocab_size},
      {"multiple_of", a.multiple_of},
      {"ffn_hidden_dim", a.ffn_hidden_dim()},
      {"norm_eps", a.norm_eps},
      {"rope_theta", a.rope_theta}}
      .dump();
}

std::unique_ptr<CheckpointManager> manager_of(
    const RunLayout& layout,
    LayoutRank& me,
    const fs::path& dump,
    const CheckpointConfig& config) {
  return testing::layout_checkpoint(
      layout, me, dump.string(), config, model_config());
}

CheckpointConfig hf_export() {
  CheckpointConfig config;
  config.model_only_export = true;
  config.export_format = "hf";
  return config;
}

CheckpointConfig hf_load(const fs::path& dir) {
  CheckpointConfig config;
  config.initial_load_hf = dir.string();
  return config;
}

/// Trains the one-process layout run for `steps` and exports it as HF into
/// `dump`/checkpoint/export; returns the run (its weights at the end).
testing::LayoutRunResult exported_run(const fs::path& dump, int64_t steps) {
  fs::remove_all(dump);
  return testing::run_layout(
      RunLayout{}, steps, nullptr, [&](LayoutRank& me, int64_t last) {
        manager_of(RunLayout{}, me, dump, hf_export())->finish({last, 0});
      });
}

std::map<std::string, at::Tensor> read_all(const fs::path& file) {
  const SafetensorsReader reader(file.string());
  std::map<std::string, at::Tensor> out;
  for (const auto& e : reader.entries()) {
    out[e.name] = reader.read(e.name);
  }
  return out;
}

// ---------------------------------------------------------------------------

const HfFormat& llama_format() {
  register_builtin_models();
  return model_registry().get("llama3").hf;
}

TEST(HfLlama, NamesAndPermutation) {
  const HfFormat& f = llama_format();
  EXPECT_EQ(
      f.name("layers.3.feed_forward.w3.weight"),
      "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(
      f.name("layers.12.attention.wk.weight"),
      "model.layers.12.self_attn.k_proj.weight");
  EXPECT_EQ(
      f.name("layers.2.attention.q_norm.weight"),
      "model.layers.2.self_attn.q_norm.weight");
  EXPECT_EQ(f.name("output.weight"), "lm_head.weight");
  EXPECT_EQ(f.name("layers.1.attention.rope"), "");
  // One head of 4: Baton's rows (x0 y0 x1 y1), pairs, are HF's (x0 x1 y0
  // y1), halves; the values are the rows' indices.
  ModelArgs shape;
  shape.dim = 4;
  shape.n_heads = 1;
  shape.n_kv_heads = 1;
  const auto w = torch::arange(4, torch::kFloat32).view({4, 1});
  const auto hf = f.convert("layers.0.attention.wq.weight", w, shape, true);
  EXPECT_TRUE(torch::equal(hf.view({4}), torch::tensor({0.f, 2.f, 1.f, 3.f})));
  EXPECT_TRUE(torch::equal(
      f.convert("layers.0.attention.wv.weight", w, shape, true), w));
  // A per-head norm's weight, as its head's rows.
  EXPECT_TRUE(torch::equal(
      f.convert("layers.0.attention.k_norm.weight", w.view({4}), shape, true),
      torch::tensor({0.f, 2.f, 1.f, 3.f})));
  // GQA: wk is permuted per key/value head.
  shape.dim = 16;
  shape.n_heads = 4;
  shape.n_kv_heads = 2;
  const auto k = torch::randn({8, 16});  // 2 kv heads of 4 rows
  const auto k_hf = f.convert("layers.0.attention.wk.weight", k, shape, true);
  EXPECT_TRUE(torch::equal(k_hf[1], k[2]));
  EXPECT_TRUE(torch::equal(k_hf[5], k[6]));
  EXPECT_TRUE(torch::equal(k_hf[6], k[5]));
  EXPECT_TRUE(torch::equal(k_hf[7], k[7]));
  EXPECT_TRUE(torch::equal(
      f.convert("layers.0.attention.wk.weight", k_hf, shape, false), k));
}

TEST(HfLlama, ExportRoundTripsBitwiseInEitherFolderForm) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "hf_export";
  const auto trained = exported_run(dump, 2);
  const fs::path dir = dump / "checkpoint" / "export";

  // The folder: config.json, one file and the index naming it for each.
  std::ifstream in(dir / "config.json");
  const json config = json::parse(in);
  EXPECT_EQ(config["architectures"][0].get<std::string>(), "LlamaForCausalLM");
  EXPECT_EQ(config["hidden_size"].get<int64_t>(), 32);
  EXPECT_EQ(config["num_key_value_heads"].get<int64_t>(), 2);
  EXPECT_EQ(config["intermediate_size"].get<int64_t>(), 96);
  EXPECT_FALSE(config["tie_word_embeddings"].get<bool>());
  std::ifstream index_in(dir / "model.safetensors.index.json");
  const json index = json::parse(index_in);
  const auto weights = read_all(dir / "model.safetensors");
  ASSERT_EQ(index["weight_map"].size(), trained.params.size());
  ASSERT_EQ(weights.size(), trained.params.size());
  for (const auto& [name, file] : index["weight_map"].items()) {
    EXPECT_EQ(file.get<std::string>(), "model.safetensors");
    EXPECT_TRUE(weights.contains(name)) << name;
  }

  // Loaded back: bitwise the exported run's weights.
  const auto loaded = testing::run_layout(RunLayout{}, 0, [&](LayoutRank& me) {
    return manager_of(RunLayout{}, me, dump / "load", hf_load(dir))
        ->load()
        .step;
  });
  for (const auto& [fqn, p] : trained.params) {
    EXPECT_TRUE(torch::equal(loaded.params.at(fqn), p)) << fqn;
  }

  // The same weights as transformers shards them: two files and an index,
  // with an inv_freq buffer of older exports, to skip.
  const fs::path sharded = fs::path(::testing::TempDir()) / "hf_sharded";
  fs::remove_all(sharded);
  fs::create_directories(sharded);
  fs::copy(dir / "config.json", sharded / "config.json");
  std::vector<SafetensorsItem> shards[2];
  json map = json::object();
  int n = 0;
  for (const auto& [name, t] : weights) {
    const int k = n++ % 2;
    shards[k].push_back(safetensors_item(name, t));
    map[name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
  }
  shards[1].push_back(safetensors_item(
      "model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({4})));
  map["model.layers.0.self_attn.rotary_emb.inv_freq"] =
      "model-00002-of-00002.safetensors";
  for (int k = 0; k < 2; ++k) {
    write_safetensors(
        (sharded /
         ("model-0000" + std::to_string(k + 1) + "-of-00002.safetensors"))
            .string(),
        shards[k]);
  }
  std::ofstream(sharded / "model.safetensors.index.json")
      << json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  const auto from_shards =
      testing::run_layout(RunLayout{}, 0, [&](LayoutRank& me) {
        return manager_of(RunLayout{}, me, dump / "load", hf_load(sharded))
            ->load()
            .step;
      });
  for (const auto& [fqn, p] : trained.params) {
    EXPECT_TRUE(torch::equal(from_shards.params.at(fqn), p)) << fqn;
  }

  // Baton's logits against transformers' own: hf_families_test.cpp.
}

TEST(HfLlama, LoadsIntoPipelineAndTensorParallelLayouts) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "hf_layouts";
  const auto trained = exported_run(dump, 2);
  const fs::path dir = dump / "checkpoint" / "export";
  const auto fresh = testing::run_layout(RunLayout{}, 1);

  const auto from_hf = [&](const RunLayout& layout, int64_t steps = 1) {
    return testing::run_layout(layout, steps, [&](LayoutRank& me) {
      return manager_of(layout, me, dump / "load", hf_load(dir))->load().step;
    });
  };
  const auto one = from_hf(RunLayout{});
  ASSERT_EQ(one.losses.size(), 1u);
  // The load is what the loss sees: the trained weights, not the init.
  EXPECT_GT(std::abs(one.losses[0] - fresh.losses[0]), 1e-3);
  RunLayout pp2;
  pp2.pp = 2;
  RunLayout tp2;
  tp2.tp = 2;
  RunLayout tp2_fsdp2;
  tp2_fsdp2.tp = 2;
  tp2_fsdp2.dp_shard = 2;
  tp2_fsdp2.rows = 1;
  for (const RunLayout& layout : {pp2, tp2, tp2_fsdp2}) {
    SCOPED_TRACE(layout.str());
    // Each rank's slices of the whole tensors, bitwise.
    const auto loaded = from_hf(layout, 0);
    for (const auto& [fqn, p] : trained.params) {
      EXPECT_TRUE(torch::equal(loaded.params.at(fqn), p)) << fqn;
    }
    const auto run = from_hf(layout);
    ASSERT_EQ(run.losses.size(), 1u);
    EXPECT_NEAR(run.losses[0], one.losses[0], 1e-5);
    EXPECT_TRUE(testing::same_run(run, one));
  }
}

/// Loads `dir` into the one-process run and expects `error` containing
/// each of `parts`, with the weights left at their init.
template <class Error>
void expect_load_fails(
    const fs::path& dir, const std::vector<std::string>& parts) {
  const fs::path dump = fs::path(::testing::TempDir()) / "hf_bad_load";
  const auto init = testing::run_layout(RunLayout{}, 0);
  const auto after =
      testing::run_layout(RunLayout{}, 0, [&](LayoutRank& me) -> int64_t {
        try {
          manager_of(RunLayout{}, me, dump, hf_load(dir))->load();
          ADD_FAILURE() << "loaded " << dir;
        } catch (const Error& e) {
          for (const auto& part : parts) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
                << "'" << part << "' not in: " << e.what();
          }
        }
        return 0;
      });
  for (const auto& [fqn, p] : init.params) {
    EXPECT_TRUE(torch::equal(after.params.at(fqn), p)) << fqn << " changed";
  }
}

/// A copy of the exported folder `from` as `name`.
fs::path copy_of(const fs::path& from, const std::string& name) {
  const fs::path to = fs::path(::testing::TempDir()) / name;
  fs::remove_all(to);
  fs::copy(from, to);
  return to;
}

TEST(HfLlama, BadFoldersNameTheFileAndChangeNothing) {
  at::set_num_threads(1);
  const fs::path dump = fs::path(::testing::TempDir()) / "hf_bad";
  exported_run(dump, 1);
  const fs::path good = dump / "checkpoint" / "export";
  {
    SCOPED_TRACE("no config.json");
    const auto dir = copy_of(good, "hf_no_config");
    fs::remove(dir / "config.json");
    expect_load_fails<ConfigError>(
        dir, {"checkpoint.initial_load_hf", dir.string(), "config.json"});
  }
  {
    SCOPED_TRACE("a shape field");
    const auto dir = copy_of(good, "hf_bad_layers");
    json config = json::parse(std::ifstream(dir / "config.json"));
    config["num_hidden_layers"] = 3;
    std::ofstream(dir / "config.json") << config.dump();
    expect_load_fails<ConfigError>(
        dir,
        {(dir / "config.json").string(),
         "num_hidden_layers is 3",
         "n_layers 4"});
  }
  // Fields that do not fit the model, or that no family reads: each named
  // with what is allowed or what the model has.
  const std::tuple<const char*, json, std::string> unsupported[] = {
      {"tie_word_embeddings",
       true,
       "tie_word_embeddings is true, but the model has tie_embeddings false"},
      {"rope_scaling",
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}},
       "the RoPE scaling is \"llama3\" (factor 8, original context 8192), "
       "but the model's is none"},
      {"rope_scaling",
       {{"rope_type", "llama3"}, {"factor", 8.0}},
       "rope_scaling.original_max_position_embeddings is missing"},
      {"rope_scaling",
       {{"rope_type", "dynamic"}, {"factor", 2.0}},
       "rope_scaling.rope_type is \"dynamic\"; allowed: \"default\", "
       "\"llama3\""},
      {"hidden_act", "gelu", "hidden_act is \"gelu\"; allowed: \"silu\""},
      {"model_type", "qwen3", "model_type is \"qwen3\"; allowed: \"llama\""},
      {"num_key_value_heads", 4, "num_key_value_heads is 4"},
      {"rope_theta", 10000.0, "rope_theta is 10000"}};
  for (const auto& [key, value, message] : unsupported) {
    SCOPED_TRACE(key);
    const auto dir = copy_of(good, "hf_unsupported");
    json config = json::parse(std::ifstream(dir / "config.json"));
    config[key] = value;
    std::ofstream(dir / "config.json") << config.dump();
    expect_load_fails<ConfigError>(
        dir, {(dir / "config.json").string(), message});
  }
  {
    SCOPED_TRACE("a tensor missing from model.safetensors");
    const auto dir = copy_of(good, "hf_missing_tensor");
    fs::remove(dir / "model.safetensors.index.json");
    auto weights = read_all(dir / "model.safetensors");
    weights.erase("model.layers.2.mlp.up_proj.weight");
    std::vector<SafetensorsItem> items;
    for (const auto& [name, t] : weights) {
      items.push_back(safetensors_item(name, t));
    }
    write_safetensors((dir / "model.safetensors").string(), items);
    expect_load_fails<CheckpointError>(
        dir,
        {(dir / "model.safetensors").string(),
         "'model.layers.2.mlp.up_proj.weight'",
         "layers.2.feed_forward.w3.weight",
         "missing"});
  }
  {
    SCOPED_TRACE("a tensor the model does not have");
    const auto dir = copy_of(good, "hf_extra_tensor");
    json index =
        json::parse(std::ifstream(dir / "model.safetensors.index.json"));
    index["weight_map"]["model.layers.4.mlp.up_proj.weight"] =
        "model.safetensors";
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
    expect_load_fails<CheckpointError>(
        dir,
        {(dir / "model.safetensors.index.json").string(),
         "'model.layers.4.mlp.up_proj.weight'",
         "not in the model"});
  }
  {
    SCOPED_TRACE("a malformed header");
    const auto dir = copy_of(good, "hf_bad_header");
    std::fstream f(
        dir / "model.safetensors",
        std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("[[[[", 4);
    f.close();
    expect_load_fails<CheckpointError>(
        dir, {(dir / "model.safetensors").string()});
  }
}

TEST(HfLlama, HalfPrecisionFilesLoadConvertedToTheModelsDtype) {
  at::set_num_threads(1);
  const std::pair<const char*, at::ScalarType> dtypes[] = {
      {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};
  for (const auto& [name, dtype] : dtypes) {
    SCOPED_TRACE(name);
    const fs::path dump = fs::path(::testing::TempDir()) / "hf_half";
    fs::remove_all(dump);
    CheckpointConfig config = hf_export();
    config.export_dtype = name;
    const auto trained = testing::run_layout(
        RunLayout{}, 1, nullptr, [&](LayoutRank& me, int64_t last) {
          manager_of(RunLayout{}, me, dump, config)->finish({last, 0});
        });
    const fs::path dir = dump / "checkpoint" / "export";
    EXPECT_EQ(
        SafetensorsReader((dir / "model.safetensors").string())
            .entries()
            .front()
            .dtype,
        dtype);
    const auto loaded =
        testing::run_layout(RunLayout{}, 0, [&](LayoutRank& me) {
          return manager_of(RunLayout{}, me, dump / "load", hf_load(dir))
              ->load()
              .step;
        });
    for (const auto& [fqn, p] : trained.params) {
      const auto& q = loaded.params.at(fqn);
      EXPECT_EQ(q.scalar_type(), at::kFloat);
      EXPECT_TRUE(torch::equal(q, p.to(dtype).to(at::kFloat))) << fqn;
    }
  }
}

// --- through the binary ---------------------------------------------------

const std::string kRun =
    " --training.mixed_precision_param=float32"
    " --training.seq_len=32 --training.local_batch_size=4"
    " --lr_scheduler.warmup_steps=1 --metrics.log_freq=1"
    " --metrics.peak_tflops=1";

testing::BinaryResult train(const fs::path& dump, const std::string& extra) {
  return testing::run_command(
      testing::baton_bin() + " train --config " +
      testing::source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() + kRun + extra);
}

TEST(HfLlama, TheBinaryExportsAndStartsFromHf) {
  const auto a = testing::fresh_dir("hf_bin_a");
  const auto r = train(
      a,
      " --training.steps=2 --checkpoint.model_only_export=true"
      " --checkpoint.export_format=hf");
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path dir = a / "checkpoint" / "export";
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  // A folder to publish: the byte tokenizer's BOS and EOS (256, 257), in
  // config.json and generation_config.json, and the context.
  const json config = json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(config["bos_token_id"], 256);
  EXPECT_EQ(config["eos_token_id"], 257);
  EXPECT_EQ(config["max_position_embeddings"], 8192);
  const json generation =
      json::parse(std::ifstream(dir / "generation_config.json"));
  EXPECT_EQ(generation["bos_token_id"], 256);
  EXPECT_EQ(generation["eos_token_id"], 257);

  const auto b = testing::fresh_dir("hf_bin_b");
  const auto loaded = train(
      b, " --training.steps=1 --checkpoint.initial_load_hf=" + dir.string());
  ASSERT_EQ(loaded.code, 0) << loaded.output;
  EXPECT_NE(
      loaded.output.find("weights from the Hugging Face folder"),
      std::string::npos)
      << loaded.output;

  const auto c = testing::fresh_dir("hf_bin_c");
  const auto wrong = train(
      c,
      " --training.steps=1 --model.flavor=small"
      " --checkpoint.initial_load_hf=" +
          dir.string());
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(
      wrong.output.find("error: checkpoint.initial_load_hf: "),
      std::string::npos)
      << wrong.output;
  EXPECT_NE(wrong.output.find("hidden_size is 256"), std::string::npos)
      << wrong.output;

  const auto broken = copy_of(dir, "hf_bin_broken");
  {
    std::fstream f(
        broken / "model.safetensors",
        std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("[[[[", 4);
  }
  const auto damaged = train(
      c, " --training.steps=1 --checkpoint.initial_load_hf=" + broken.string());
  EXPECT_EQ(damaged.code, 1) << damaged.output;
  EXPECT_NE(
      damaged.output.find((broken / "model.safetensors").string()),
      std::string::npos)
      << damaged.output;
}

}  // namespace
}  // namespace baton
