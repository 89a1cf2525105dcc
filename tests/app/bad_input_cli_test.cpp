// The bad-input sweep through the binary, as a user meets it: files of
// tests/corpus/bad_inputs/ given to the command that reads them, every run
// under `timeout`. Each exits with the code docs/ARCHITECTURE.md section 4
// gives that input (2 a bad config or schedule cell, 1 a file that cannot be
// used) and a first line `error: ...` naming the file; never a signal.
// The in-process sweeps (tests/config, tests/parallel/pipeline, tests/data,
// tests/checkpoint) try the thousands of mutations.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/baton_binary.h"
#include "tests/common/bad_input_sweep.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::baton_bin;
using testing::run_command;
using testing::source_path;
using testing::Sweep;

/// The files `names` of the corpus of `kind`, each checked to exist. Each
/// run starts libtorch (about a second): a few of each kind, one per kind
/// of damage; the in-process sweeps read every file.
std::vector<fs::path> corpus(
    const std::string& kind, const std::vector<std::string>& names) {
  std::vector<fs::path> out;
  for (const auto& name : names) {
    out.push_back(source_path("tests/corpus/bad_inputs/" + kind + "/" + name));
    EXPECT_TRUE(fs::exists(out.back())) << out.back();
  }
  return out;
}

/// The first line of stderr that is not a log line (glog's start with a
/// severity letter and the date).
std::string error_line(const std::string& output) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("error:", 0) == 0) {
      return line;
    }
  }
  return "";
}

/// "" when `command` (run under a timeout) exits with one of `codes`,
/// printing an `error:` line that holds `names`.
std::string check_run(
    const std::string& command,
    const std::vector<int>& codes,
    const std::string& names) {
  const auto r = run_command("timeout -s KILL 120 " + command);
  if (std::find(codes.begin(), codes.end(), r.code) == codes.end()) {
    return "exit " + std::to_string(r.code) + ": " + r.output;
  }
  const std::string line = error_line(r.output);
  if (line.empty()) {
    return "no 'error:' line: " + r.output;
  }
  return testing::missing_from(line, {names});
}

TEST(BadInputCli, BadConfigsExitTwoNamingTheFileAndLine) {
  Sweep sweep("cli_config");
  for (const auto& file : corpus(
           "config",
           {"list_for_number.yaml",
            "scalar_for_list.yaml",
            "huge_number.yaml",
            "unclosed_list.yaml",
            "deep_nesting.yaml",
            "binary_garbage.yaml"})) {
    sweep.run(file.filename().string(), [&] {
      return check_run(
          baton_bin() + " train --print-config --config " + file.string(),
          {2},
          "error: " + file.string() + ":");
    });
  }
}

TEST(BadInputCli, BadScheduleCsvsExitNamingTheFile) {
  Sweep sweep("cli_schedule");
  for (const auto& file : corpus(
           "schedule",
           {"huge_stage.csv",
            "binary_cell.csv",
            "stage_on_two_ranks.csv",
            "forward_without_backward.csv",
            "only_blank_lines.csv"})) {
    // A cell that does not parse is bad input (2); a schedule that parses
    // but cannot run (a stage on two ranks, a deadlock) fails planning (1).
    sweep.run(file.filename().string(), [&] {
      return check_run(
          baton_bin() + " schedule --csv " + file.string(),
          {1, 2},
          file.string());
    });
  }
}

TEST(BadInputCli, BadTokenizerFilesExitOneNamingTheFile) {
  Sweep sweep("cli_tokenizer");
  const auto dir = testing::fresh_dir("bad_input_cli_tokenizer");
  fs::create_directories(dir);
  std::ofstream(dir / "input.txt") << "In the beginning\n";
  for (const auto& file : corpus(
           "tokenizer",
           {"huge_rank.txt",
            "missing_bytes.txt",
            "not_base64.txt",
            "garbage.model",
            "empty.model",
            "wordpiece.json",
            "truncated.json"})) {
    const std::string kind = file.extension() == ".model"  ? "sentencepiece"
                             : file.extension() == ".json" ? "huggingface"
                                                           : "tiktoken";
    sweep.run(file.filename().string(), [&] {
      fs::remove_all(dir / "out");
      return check_run(
          baton_bin() + " data tokenize --tokenizer " + kind +
              " --tokenizer-path " + file.string() + " --input " +
              (dir / "input.txt").string() + " --out " + (dir / "out").string(),
          {1},
          file.string());
    });
  }
}

TEST(BadInputCli, BadTokenShardsExitOneNamingTheShard) {
  Sweep sweep("cli_shards");
  const auto dir = testing::fresh_dir("bad_input_cli_shards");
  for (const auto& file : corpus(
           "shards",
           {"documents_wrap_around.bin",
            "tokens_wrap_around.bin",
            "short_header.bin",
            "token_out_of_vocab.bin"})) {
    const auto shards = dir / file.stem();
    fs::create_directories(shards);
    fs::copy_file(file, shards / "shard_000000.bin");
    sweep.run(file.filename().string(), [&] {
      return check_run(
          baton_bin() + " train --config " +
              source_path("configs/debug_model.yaml") +
              " --training.dataset=tokens --training.dataset_path=" +
              shards.string() +
              " --job.dump_folder=" + (dir / "dump").string() +
              " --training.steps=1 --training.seq_len=16"
              " --training.local_batch_size=1 --metrics.peak_tflops=1"
              " --training.mixed_precision_param=float32",
          {1},
          (shards / "shard_000000.bin").string());
    });
  }
}

TEST(BadInputCli, DamagedCheckpointIndexesExitOneNamingTheFile) {
  Sweep sweep("cli_checkpoint");
  const auto dir = testing::fresh_dir("bad_input_cli_checkpoint");
  const std::vector<std::pair<std::string, std::string>> indexes = {
      {"not_json", "{\"format\": \"baton-checkpoint\", "},
      {"a_list", "[1, 2]"},
      {"version_string",
       "{\"format\": \"baton-checkpoint\", \"version\": \"3\"}"},
      {"tensors_a_string",
       "{\"format\": \"baton-checkpoint\", \"version\": 3, \"step\": 2, "
       "\"tensors\": \"x\"}"},
  };
  for (const auto& [name, text] : indexes) {
    const auto step = dir / name / "step-2";
    fs::create_directories(step);
    std::ofstream(step / "index.json") << text;
    sweep.run(name, [&] {
      return check_run(
          baton_bin() + " checkpoint inspect " + step.string(),
          {1},
          (step / "index.json").string());
    });
  }
}

// `baton generate` with what it cannot load: usage errors and HF folders
// that do not say a registered family exit 2, checkpoints that cannot be
// read exit 1, each naming the flag or the file.
TEST(BadInputCli, GenerateRefusesWhatItCannotLoadNamingIt) {
  Sweep sweep("cli_generate");
  const auto dir = testing::fresh_dir("bad_input_cli_generate");
  const auto write = [&](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.parent_path();
  };
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  const fs::path damaged =
      write(dir / "damaged" / "step-2" / "index.json", "{\"format\": ");
  const fs::path no_config = write(dir / "no_config" / "model.safetensors", "");
  const fs::path gpt2 =
      write(dir / "gpt2" / "config.json", "{\"model_type\": \"gpt2\"}");
  const fs::path dynamic = write(
      dir / "dynamic" / "config.json",
      "{\"model_type\": \"llama\", \"hidden_size\": 64, "
      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
      "\"intermediate_size\": 128, \"vocab_size\": 300, "
      "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}");
  // A llama config.json of 64 positions (its weights are never read).
  const fs::path llama = write(
      dir / "llama" / "config.json",
      "{\"model_type\": \"llama\", \"hidden_size\": 64, "
      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
      "\"intermediate_size\": 128, \"vocab_size\": 300, "
      "\"max_position_embeddings\": 64}");
  write(llama / "model.safetensors", "");
  const std::string gen = baton_bin() + " generate ";
  const std::tuple<std::string, std::string, int, std::string> cases[] = {
      {"no_model", gen + "--prompt x", 2, "--checkpoint DIR or --hf DIR"},
      {"both", gen + "--checkpoint a --hf b --prompt x", 2, "both"},
      {"no_prompt", gen + "--hf " + gpt2.string(), 2, "--prompt"},
      {"temperature",
       gen + "--hf x --prompt x --temperature -1",
       2,
       "--temperature"},
      {"dtype", gen + "--hf x --prompt x --dtype fp8", 2, "--dtype"},
      {"too_long",
       gen + "--hf " + llama.string() +
           " --tokenizer bytes --prompt x --max-new-tokens 100",
       2,
       "--max-new-tokens: 100 after a prompt of 2 tokens; allowed: at most "
       "62"},
      {"missing",
       gen + "--checkpoint " + (dir / "none").string() + " --prompt x",
       1,
       (dir / "none").string()},
      {"empty",
       gen + "--checkpoint " + empty.string() + " --prompt x",
       1,
       empty.string()},
      {"damaged",
       gen + "--checkpoint " + damaged.string() + " --prompt x",
       1,
       (damaged / "index.json").string()},
      {"no_config",
       gen + "--hf " + no_config.string() + " --prompt x",
       2,
       "config.json"},
      {"gpt2", gen + "--hf " + gpt2.string() + " --prompt x", 2, "'gpt2'"},
      {"dynamic",
       gen + "--hf " + dynamic.string() + " --prompt x",
       2,
       "dynamic"},
  };
  for (const auto& [name, command, code, names] : cases) {
    sweep.run(name, [&, &command = command, &code = code, &names = names] {
      return check_run(command, {code}, names);
    });
  }
}

}  // namespace
}  // namespace baton
