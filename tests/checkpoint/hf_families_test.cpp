// The model families against transformers itself. transformers makes tiny
// random models (tests/checkpoint/hf_reference.py): Llama 3.1's RoPE
// scaling, Llama 3.2's tied embeddings, Qwen3, Qwen3 with YaRN, and a
// sharded bf16 Qwen3 folder, and computes their logits and loss on fixed
// tokens. Each folder's config.json is read by its family's reader, the
// weights load through checkpoint.initial_load_hf, and
// - at one process Baton's logits equal transformers' (float32: within
//   1e-5 of the largest logit; bf16: the difference's norm within 2e-2 of
//   the logits');
// - at pp 2 x tp 2 and at dp_shard 2 x tp 2 (ranks as threads over real
//   Gloo) the first step's loss equals transformers' loss;
// - the export (export_format hf), loaded by from_pretrained, gives
//   transformers' logits again, as the same architecture;
// - generation with the KV cache picks transformers' tokens from its
//   logits at every step (float32, within 1e-5), and the greedy text of a
//   trained debug model, through `baton generate`, is transformers'
//   generate's from the export.
// Offline: every model is made in the test. Where the project's Python
// cannot import torch and transformers (the CPU-only set-up without the
// NVIDIA wheels) the tests skip, saying why.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/saved_model.h"
#include "data/dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_dataset.h"
#include "data/tokenizer.h"
#include "models/common/transformer.h"
#include "models/generate.h"
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

std::string reference_command(const std::string& args) {
  return std::string("HF_HUB_OFFLINE=1 '") + BATON_PYTHON + "' '" +
         BATON_SOURCE_DIR + "/tests/checkpoint/hf_reference.py' " + args;
}

/// One folder transformers made: its family, whether it is bf16.
struct Case {
  const char* name;  // the folder under the suite's, hf_reference.py's case
  const char* family;
  bool bf16 = false;
  /// Mixture of experts: no tensor parallel (it does not cut experts).
  bool moe = false;
};

const Case kCases[] = {
    {"llama31", "llama3"},
    {"llama32_tied", "llama3"},
    {"qwen3", "qwen3"},
    {"qwen3_yarn", "qwen3"},
    {"qwen3_bfloat16", "qwen3", true},
    {"qwen3_moe", "qwen3_moe", false, true},
};

class HfFamilies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test in a process of its own,
    // two at a time.
    root_ = fs::path(::testing::TempDir()) /
            ("hf_families_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const auto r = testing::run_command(reference_command(
        "make '" + root_.string() +
        "' llama31 llama32_tied qwen3 qwen3_yarn qwen3:bfloat16 qwen3_moe"));
    made_ = r.code;
    output_ = r.output;
  }

  static void TearDownTestSuite() {
    fs::remove_all(root_);
  }

  void SetUp() override {
    if (made_ == 3) {
      GTEST_SKIP() << "the project's Python has no transformers: " << output_;
    }
    ASSERT_EQ(made_, 0) << output_;
    register_builtin_models();
    at::set_num_threads(1);
  }

  /// The case's folder, its family's shape from config.json, its layout.
  struct Loaded {
    fs::path dir;
    ModelArgs args;
    at::Tensor tokens;  // (4, 9)
    at::Tensor logits;  // (4, 8, vocab) float32, transformers'
    double loss = 0.0;
    /// An MoE model's smallest gap between a token's k-th and (k+1)-th
    /// routing probability (inf for a dense one).
    double router_margin = 0.0;
  };
  static Loaded loaded(const Case& c) {
    Loaded l;
    l.dir = root_ / c.name;
    std::ifstream in(l.dir / "config.json");
    const json config = json::parse(in);
    l.args = model_registry().get(c.family).hf.read_config(config, c.name);
    const SafetensorsReader ref((l.dir / "reference.safetensors").string());
    l.tokens = ref.read("tokens");
    l.logits = ref.read("logits");
    l.loss = ref.read("loss").item<double>();
    l.router_margin = ref.read("router_margin").item<double>();
    return l;
  }

  /// `layout` training `c`'s model from its folder on transformers'
  /// tokens; `after` runs on every rank once the steps are done.
  static RunLayout layout_of(const Case& c, const Loaded& l, RunLayout layout) {
    layout.model = c.family;
    layout.args = l.args;
    layout.bf16 = c.bf16;
    const at::Tensor tokens = l.tokens;
    layout.batch = [tokens](int64_t) {
      return Batch{tokens.slice(1, 0, 8), tokens.slice(1, 1, 9), {}};
    };
    return layout;
  }

  static std::unique_ptr<CheckpointManager> manager(
      const RunLayout& layout,
      LayoutRank& me,
      const fs::path& dump,
      const CheckpointConfig& config,
      const Case& c,
      const ModelArgs& args) {
    json record = model_args_json(args);
    record["model"] = c.family;
    record["flavor"] = c.name;
    return testing::layout_checkpoint(
        layout, me, dump.string(), config, record.dump());
  }

  static fs::path root_;
  static int made_;
  static std::string output_;
};

fs::path HfFamilies::root_;
int HfFamilies::made_ = -1;
std::string HfFamilies::output_;

/// float32: max |a - b| / max |b|, within 1e-5; bf16: |a - b| / |b| (the
/// norms), within 2e-2 (its rounding makes single logits differ more).
double relative(const at::Tensor& a, const at::Tensor& b, bool bf16) {
  const at::Tensor d = a.to(torch::kFloat) - b;
  return bf16 ? (d.norm() / b.norm()).item<double>()
              : (d.abs().max() / b.abs().max()).item<double>();
}
double tolerance(bool bf16) {
  return bf16 ? 2e-2 : 1e-5;
}

TEST_F(HfFamilies, OneProcessLogitsEqualTransformersAndTheExportLoadsBack) {
  std::string checks;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Loaded l = loaded(c);
    // Every layout routes transformers' tokens alike only where no choice
    // is within float error of a tie: float32's error in a probability here
    // is about 1e-7.
    ASSERT_GT(l.router_margin, 1e-5);
    RunLayout one;
    one.rows = 4;
    one = layout_of(c, l, one);
    const fs::path dump = root_ / (std::string("export_") + c.name);
    CheckpointConfig load;
    load.initial_load_hf = l.dir.string();
    CheckpointConfig exporting;
    exporting.model_only_export = true;
    exporting.export_format = "hf";
    at::Tensor logits;
    testing::run_layout(
        one,
        0,
        [&](LayoutRank& me) {
          manager(one, me, dump / "load", load, c, l.args)->load();
          torch::NoGradGuard no_grad;
          logits = me.parts[0].module().forward(l.tokens.slice(1, 0, 8));
          return int64_t{0};
        },
        [&](LayoutRank& me, int64_t last) {
          manager(one, me, dump, exporting, c, l.args)->finish({last, 0});
        });
    EXPECT_LE(relative(logits, l.logits, c.bf16), tolerance(c.bf16));
    checks += " '" + (dump / "checkpoint" / "export").string() + ":" +
              l.dir.string() + "'";
  }
  // The exports, read by transformers: one launch for all.
  const auto [code, out] =
      testing::run_command(reference_command("check" + checks));
  ASSERT_EQ(code, 0) << out;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') {
      continue;
    }
    ASSERT_LT(i, std::size(kCases)) << out;
    const Case& c = kCases[i++];
    const json r = json::parse(line);
    SCOPED_TRACE(c.name);
    EXPECT_EQ(
        r["architecture"], model_registry().get(c.family).hf.architecture);
    // The export is float32 of what was loaded: bf16 folders' values
    // exactly, so every case is transformers' own float32 forward.
    EXPECT_LE(r[c.bf16 ? "l2" : "relative"].get<double>(), tolerance(c.bf16))
        << line;
  }
  EXPECT_EQ(i, std::size(kCases)) << out;
}

TEST_F(HfFamilies, ShardedLayoutsTrainFromTransformersLoss) {
  RunLayout pp2_tp2;
  pp2_tp2.pp = 2;
  pp2_tp2.tp = 2;
  pp2_tp2.rows = 4;
  RunLayout fsdp2_tp2;
  fsdp2_tp2.dp_shard = 2;
  fsdp2_tp2.tp = 2;
  fsdp2_tp2.rows = 2;
  // Experts: each rank loads its experts' rows of the per-expert tensors.
  RunLayout pp2_fsdp2;
  pp2_fsdp2.pp = 2;
  pp2_fsdp2.dp_shard = 2;
  pp2_fsdp2.rows = 2;
  for (const Case& c : kCases) {
    if (c.bf16) {
      continue;
    }
    SCOPED_TRACE(c.name);
    const Loaded l = loaded(c);
    const std::vector<RunLayout> layouts =
        c.moe ? std::vector<RunLayout>{pp2_fsdp2}
              : std::vector<RunLayout>{pp2_tp2, fsdp2_tp2};
    for (RunLayout layout : layouts) {
      layout = layout_of(c, l, layout);
      SCOPED_TRACE(layout.str());
      CheckpointConfig load;
      load.initial_load_hf = l.dir.string();
      const fs::path dump = root_ / (std::string("layout_") + c.name);
      const auto run = testing::run_layout(layout, 1, [&](LayoutRank& me) {
        return manager(layout, me, dump, load, c, l.args)->load().step;
      });
      ASSERT_EQ(run.losses.size(), 1u);
      EXPECT_NEAR(run.losses[0], l.loss, 1e-5 * l.loss);
    }
  }
}

/// A SentencePiece model of `type` trained on the first chapters of the
/// bundled corpus with SentencePiece's `flags` beside Baton's.
std::string train_sentencepiece_model(
    const fs::path& path,
    const char* type,
    int64_t vocab_size,
    const std::map<std::string, std::string>& flags) {
  DatasetOptions options;
  options.path = resolve_asset_path("assets/kjv.jsonl.gz");
  const JsonlDataset kjv(options);
  SentencePieceTrainOptions train(vocab_size);
  train.model_type = type;
  train.flags = flags;
  int64_t next = 0;
  train_sentencepiece(
      [&]() -> std::optional<std::string> {
        return next < 40 ? std::optional(kjv.text(next++)) : std::nullopt;
      },
      train,
      path.string());
  return path.string();
}

// The export ships the run's tokenizer: AutoTokenizer.from_pretrained on
// it encodes text to Baton's ids, with Baton's BOS first where it has one,
// and decodes them to Baton's text, for the byte tokenizer, the tiktoken
// format, a tokenizer.json and SentencePiece models of each kind: the
// bundled BPE (Llama 2's kind: a dummy prefix, byte fallback), a unigram,
// and, with user-defined pieces, a unigram under nmt_nfkc's charsmap with
// extra spaces removed and a BPE without a dummy prefix.
TEST_F(HfFamilies, TheExportsTokenizerEncodesToBatonsIds) {
  register_builtin_tokenizers();
  // Spaces leading, trailing and in runs, newlines, tabs, digits, what
  // needs byte fallback (CJK, emoji, control characters, a NUL), and what
  // NFKC changes (a decomposed accent, full-width letters, a ligature).
  const std::string plain =
      std::string(
          "  In the beginning God created\n\n the heaven:   and\tthe "
          "earth , 1234567890 3.14\r\n caf\u00e9 cafe\u0301 \uff21\uff22 "
          "\ufb01ne \u65e5\u672c\u8a9e \U0001F600\U0001F44D\U0001F3FD "
          "\x01\x1f\x7f") +
      std::string(1, '\0') + " \u00a0nbsp\u200b [x]<tool>a++b  ";
  // Special-token strings in the text: tokenizers matches them; Baton's
  // tiktoken and SentencePiece, as their own libraries, read them as plain
  // text, so their comparisons leave them out.
  const std::string specials = plain + "<|end_of_text|><|endoftext|>";
  struct Run {
    const char* name;
    const char* config;
    const char* kind;
    std::string path;
    /// decode(encode(text)) is the text (no NFC, no NFKC).
    bool lossless = true;
  };
  const fs::path models = root_ / "sentencepiece";
  fs::create_directories(models);
  const std::vector<Run> runs = {
      {"bytes", "debug_model", "bytes", ""},
      {"tiktoken",
       "debug_model_tiktoken",
       "tiktoken",
       testing::source_path("assets/kjv_tiktoken.txt")},
      {"huggingface",
       "debug_qwen3",
       "huggingface",
       testing::source_path("assets/kjv_tokenizer.json"),
       false},
      {"sp_bpe",
       "debug_model_sp",
       "sentencepiece",
       testing::source_path("assets/kjv_sp.model")},
      {"sp_unigram",
       "debug_model_sp",
       "sentencepiece",
       train_sentencepiece_model(models / "unigram.model", "unigram", 600, {})},
      {"sp_unigram_nfkc",
       "debug_model_sp",
       "sentencepiece",
       train_sentencepiece_model(
           models / "nfkc.model",
           "unigram",
           600,
           {{"normalization_rule_name", "nmt_nfkc"},
            {"remove_extra_whitespaces", "true"},
            {"user_defined_symbols", "<tool>,[x],++"}}),
       false},
      {"sp_bpe_user_defined",
       "debug_model_sp",
       "sentencepiece",
       train_sentencepiece_model(
           models / "user.model",
           "bpe",
           600,
           {{"add_dummy_prefix", "false"},
            {"user_defined_symbols", "<tool>,[x],++"}})},
  };
  // Tokenizers that match special-token strings in text get them.
  const auto specials_in_text = [](const Run& run) {
    return std::string(run.kind) == "bytes" ||
           std::string(run.kind) == "huggingface";
  };
  const fs::path text_files[] = {root_ / "plain.txt", root_ / "specials.txt"};
  std::ofstream(text_files[0], std::ios::binary) << plain;
  std::ofstream(text_files[1], std::ios::binary) << specials;
  std::string pairs;
  for (const Run& run : runs) {
    SCOPED_TRACE(run.name);
    const fs::path dump = root_ / (std::string("tokenizer_") + run.name);
    fs::remove_all(dump);
    const auto trained = testing::run_command(
        testing::baton_bin() + " train --config " +
        testing::source_path(std::string("configs/") + run.config + ".yaml") +
        " --job.dump_folder=" + dump.string() +
        (run.path.empty() ? "" : " --model.tokenizer_path=" + run.path) +
        " --training.steps=1 --metrics.peak_tflops=1"
        " --checkpoint.model_only_export=true --checkpoint.export_format=hf");
    ASSERT_EQ(trained.code, 0) << trained.output;
    EXPECT_EQ(trained.output.find("has no tokenizer.json"), std::string::npos)
        << trained.output;
    pairs += " '" + (dump / "checkpoint" / "export").string() + ":" +
             text_files[specials_in_text(run) ? 1 : 0].string() + "'";
  }
  // The exports, read by transformers: one launch for all.
  const auto r = testing::run_command(reference_command("tokenize" + pairs));
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<json> hf;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') {
      hf.push_back(json::parse(line));
    }
  }
  ASSERT_EQ(hf.size(), runs.size()) << r.output;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    SCOPED_TRACE(run.name);
    const std::string& text = specials_in_text(run) ? specials : plain;
    const auto tokenizer = tokenizer_registry().get(run.kind)(run.path);
    const auto ids = tokenizer->encode(text);
    EXPECT_EQ(hf[i]["ids"].get<std::vector<int32_t>>(), ids);
    if (tokenizer->bos_id() >= 0) {
      EXPECT_EQ(hf[i]["bos"], tokenizer->bos_id());
      EXPECT_EQ(hf[i]["with_special"][0], tokenizer->bos_id());
    }
    EXPECT_EQ(hf[i]["eos"], tokenizer->eos_id());
    EXPECT_EQ(hf[i]["decoded"].get<std::string>(), tokenizer->decode(ids));
    if (run.lossless) {
      EXPECT_EQ(tokenizer->decode(ids), text);
    }
  }
}

// Generation with the KV cache, step by step against transformers' own
// generate with its cache: the same greedy tokens, each chosen from the same
// logits.
TEST_F(HfFamilies, GenerationsLogitsEqualTransformersWithItsCache) {
  constexpr int64_t kSteps = 12;
  std::string dirs;
  for (const Case& c : kCases) {
    if (!c.bf16) {
      dirs += " '" + (root_ / c.name).string() + "'";
    }
  }
  const auto r = testing::run_command(
      reference_command("generate " + std::to_string(kSteps) + dirs));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const Case& c : kCases) {
    if (c.bf16) {
      continue;
    }
    SCOPED_TRACE(c.name);
    const SavedModel saved = read_hf_model(root_ / c.name, c.name);
    EXPECT_EQ(saved.family, c.family);
    auto model = std::dynamic_pointer_cast<models::TransformerImpl>(
        model_registry().get(saved.family).build(saved.args, ChunkSpec{}, 0));
    ASSERT_TRUE(model);
    load_saved_weights(saved, *model);
    const SafetensorsReader ref(
        (root_ / c.name / "generate.safetensors").string());
    const at::Tensor prompt = ref.read("prompt");
    const at::Tensor tokens = ref.read("tokens");
    const at::Tensor logits = ref.read("logits");
    GenerateOptions options;
    options.max_new_tokens = kSteps;
    options.keep_logits = true;
    const Generation g = generate(
        *model,
        std::vector<int32_t>(
            prompt.data_ptr<int64_t>(),
            prompt.data_ptr<int64_t>() + prompt.numel()),
        options);
    ASSERT_EQ(static_cast<int64_t>(g.tokens.size()), kSteps);
    for (int64_t i = 0; i < kSteps; ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      EXPECT_EQ(g.tokens[i], tokens[i].item<int64_t>());
      // Ten cached steps add up float error: llama31's tenth came to
      // 1.6e-5 on an AMD EPYC (Zen 5, MKL's and oneDNN's kernels there),
      // 1e-5 elsewhere.
      EXPECT_LE(relative(g.logits[i], logits[i], false), 3 * tolerance(false));
    }
  }
}

// The DeepSeek-V3 routing (sigmoid scores, group-limited top-k, the score
// correction bias, renormalised and scaled weights, a shared expert):
// Baton's MoE layer against transformers' DeepseekV3MoE on its weights
// and inputs, the output and the input's gradient.
TEST_F(HfFamilies, TheDeepSeekMoeBlockEqualsTransformers) {
  const fs::path file = root_ / "deepseek_moe.safetensors";
  const auto r = testing::run_command(
      reference_command("deepseek_moe '" + file.string() + "'"));
  ASSERT_EQ(r.code, 0) << r.output;
  const SafetensorsReader ref(file.string());
  ASSERT_GT(ref.read("margin").item<double>(), 1e-4);
  ModelArgs args;
  args.dim = 32;
  args.n_heads = 4;
  args.moe.num_experts = 8;
  args.moe.top_k = 3;
  args.moe.expert_hidden = 16;
  args.moe.score_func = "sigmoid";
  args.moe.n_groups = 4;
  args.moe.topk_groups = 2;
  args.moe.route_scale = 2.5;
  args.moe.expert_bias = true;
  args.moe.shared_experts = 1;
  models::MoE moe(args);
  {
    torch::NoGradGuard no_grad;
    moe->gate->weight.copy_(ref.read("gate.weight"));
    moe->expert_bias.copy_(ref.read("gate.e_score_correction_bias"));
    // transformers fuses gate and up: rows [0, hidden) gate, then up.
    const at::Tensor gate_up = ref.read("experts.gate_up_proj");
    moe->w1.copy_(gate_up.narrow(1, 0, 16));
    moe->w3.copy_(gate_up.narrow(1, 16, 16));
    moe->w2.copy_(ref.read("experts.down_proj"));
    moe->shared_experts->w1->weight.copy_(
        ref.read("shared_experts.gate_proj.weight"));
    moe->shared_experts->w3->weight.copy_(
        ref.read("shared_experts.up_proj.weight"));
    moe->shared_experts->w2->weight.copy_(
        ref.read("shared_experts.down_proj.weight"));
  }
  const at::Tensor x = ref.read("x").requires_grad_(true);
  const at::Tensor out = moe->forward(x);
  (out * ref.read("g")).sum().backward();
  EXPECT_LE(relative(out.detach(), ref.read("out"), false), 1e-5);
  EXPECT_LE(relative(x.grad(), ref.read("x_grad"), false), 1e-5);
}

// `baton generate` on a trained debug model prints transformers' greedy
// text: from the run's checkpoint and from its HF export alike.
TEST_F(HfFamilies, GreedyTextOfATrainedDebugModelEqualsTransformersGenerate) {
  const fs::path dump = root_ / "generate_debug";
  fs::remove_all(dump);
  const auto trained = testing::run_command(
      testing::baton_bin() + " train --config " +
      testing::source_path("configs/debug_model.yaml") +
      " --job.dump_folder=" + dump.string() +
      " --training.steps=20 --metrics.peak_tflops=1"
      " --checkpoint.enable=true --checkpoint.interval=20"
      " --checkpoint.model_only_export=true --checkpoint.export_format=hf");
  ASSERT_EQ(trained.code, 0) << trained.output;
  const std::string prompt = "And God said, Let there be";
  const fs::path export_dir = dump / "checkpoint" / "export";
  const auto hf = testing::run_command(reference_command(
      "generate_text '" + export_dir.string() + "' '" + prompt + "' 40"));
  ASSERT_EQ(hf.code, 0) << hf.output;
  json expected;
  std::istringstream lines(hf.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') {
      expected = json::parse(line);
    }
  }
  ASSERT_TRUE(expected.contains("text")) << hf.output;
  for (const std::string& from :
       {"--checkpoint '" + (dump / "checkpoint").string() + "'",
        "--hf '" + export_dir.string() + "'"}) {
    SCOPED_TRACE(from);
    const fs::path out = dump / "generated.txt";
    // stdout alone holds the text (the log goes to stderr).
    const auto r = testing::run_command(
        "( " + testing::baton_bin() + " generate " + from + " --prompt '" +
        prompt + "' --max-new-tokens 40 > '" + out.string() + "' )");
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    text.pop_back();
    EXPECT_EQ(text, expected["text"].get<std::string>());
    EXPECT_GT(text.size(), prompt.size());
  }
}

}  // namespace
}  // namespace baton
