// The command line's usage table (cli_commands(): every command's synopsis
// and options, which the parsers' hints read too) and the help texts made
// from it.

#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/cli_detail.h"
#include "common/text.h"
#include "parallel/pipeline/schedule_io.h"

namespace baton {

namespace {

using cli_detail::command_usage_of;

// Where an option's help starts; longer forms put it on the next line.
constexpr size_t kOptionColumn = 24;
constexpr size_t kWidth = 80;

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + "  " : s + std::string(width - s.size(), ' ');
}

// "  --form   help", the help wrapped at kWidth under its column.
std::string option_line(const OptionUsage& option) {
  std::string text = "  " + option.form;
  text += text.size() + 2 > kOptionColumn
              ? "\n" + std::string(kOptionColumn, ' ')
              : std::string(kOptionColumn - text.size(), ' ');
  size_t column = kOptionColumn;
  size_t begin = 0;
  bool first = true;
  while (begin < option.help.size()) {
    size_t end = option.help.find(' ', begin);
    if (end == std::string::npos) {
      end = option.help.size();
    }
    const std::string word = option.help.substr(begin, end - begin);
    if (!first && column + 1 + word.size() > kWidth) {
      text += "\n" + std::string(kOptionColumn, ' ');
      column = kOptionColumn;
      first = true;
    }
    text += (first ? "" : " ") + word;
    column += (first ? 0 : 1) + word.size();
    first = false;
    begin = end + 1;
  }
  return text + "\n";
}

// `baton train`.
CommandUsage train_usage() {
  return {
      "train",
      "trains a model from a YAML job config",
      {"baton train --config FILE [--config FILE ...]",
       "            [--nproc N [--max-restarts R] [--cpu-bind cores|none]]",
       "            [--plugin FILE ...] [--SECTION.KEY=VALUE ...]",
       "            [--print-config] [--dry-run[=text|json] [--device D]]",
       "            [--log-level debug|info|progress|warning]"},
      {{"config",
        "--config FILE",
        "the YAML job config (see configs/); repeated, later files set "
        "their keys over earlier ones' (a baton plan overlay)"},
       {"plugin",
        "--plugin FILE",
        "loads a shared library that extends Baton (docs/extending.md) "
        "before the config is checked; repeatable, and loaded before the "
        "config's plugins: list"},
       {"",
        "--SECTION.KEY=VALUE",
        "sets one config key, e.g. --training.steps=30"},
       {"builder",
        "--builder=NAME",
        "the trainer builder; default auto (pipeline when pp > 1)"},
       {"nproc",
        "--nproc N",
        "launches N local ranks of this binary and waits for them"},
       {"max-restarts",
        "--max-restarts R",
        "with --nproc: after a rank fails, starts every rank again from the "
        "latest checkpoint, at most R times"},
       {"cpu-bind",
        "--cpu-bind cores|none",
        "with --nproc: cores binds each rank to its own share of this "
        "process's cores (whole cores, none shared while there are enough); "
        "default none"},
       {"print-config",
        "--print-config",
        "prints the effective config as YAML and exits"},
       {"dry-run",
        "--dry-run[=text|json]",
        "prints what every rank would hold (stages, parameters, memory) "
        "without allocating a weight, for --nproc's world (else the "
        "degrees'), and exits"},
       {"device",
        "--device cpu|cuda",
        "with --dry-run: the device the run would compute on (what "
        "attention keeps, what auto precision takes); default this "
        "machine's"},
       {"log-level",
        "--log-level LEVEL",
        "debug, info (default), progress (the step lines, warnings and "
        "errors) or warning; the same as --metrics.log_level=LEVEL"}}};
}

// `baton schedule`.
CommandUsage schedule_usage() {
  return {
      "schedule",
      "generates or loads, checks and simulates a pipeline schedule",
      {"baton schedule --schedule NAME --pp P --microbatches M",
       "               [--stages-per-rank V] [--format FORMAT] [--comms]",
       "               [--out FILE] [--costs KIND=VALUE,...]",
       "baton schedule --csv FILE [--format FORMAT] [--comms] [--out FILE]",
       "               [--costs KIND=VALUE,...]"},
      {{"schedule",
        "--schedule NAME",
        "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
        "ZBVZeroBubble or DualPipeV (any case)"},
       {"pp", "--pp P", "pipeline ranks"},
       {"stages-per-rank",
        "--stages-per-rank V",
        "stages per rank; default 1 for GPipe and 1F1B, else 2"},
       {"microbatches", "--microbatches M", "microbatches per step"},
       {"csv",
        "--csv FILE",
        "loads a custom schedule from CSV instead of --schedule"},
       {"format",
        "--format FORMAT",
        join(pipeline::schedule_formats(), ", ") + "; default text"},
       {"comms",
        "--comms",
        "shows the lowered schedule: sends, receives, gradient "
        "reductions"},
       {"out", "--out FILE", "writes to FILE instead of stdout"},
       {"costs",
        "--costs KIND=VALUE,...",
        "simulated cost of F, B, I, W, OVERLAP (-1: F + B) and the P2P "
        "latency; default 1 each, OVERLAP -1, P2P 0"}}};
}

// `usage` with the input options `tokenizer train` and `data tokenize`
// share before its own.
CommandUsage with_text_inputs(CommandUsage usage) {
  const std::vector<OptionUsage> inputs = {
      {"input", "--input PATH", "a corpus file, folder or glob; repeatable"},
      {"dataset",
       "--dataset NAME",
       "jsonl or text; default: by each input's name (*.txt, *.txt.gz: text; "
       "*.jsonl, *.jsonl.gz, a folder: jsonl)"},
      {"text-field",
       "--text-field NAME",
       "the JSON Lines field with the text; default text"}};
  usage.options.insert(usage.options.begin(), inputs.begin(), inputs.end());
  return usage;
}

// `baton tokenizer train`.
CommandUsage tokenizer_train_usage() {
  return with_text_inputs(
      {"tokenizer train",
       "trains a SentencePiece tokenizer on text",
       {"baton tokenizer train --input PATH [--input PATH ...] --vocab-size "
        "N",
        "                      --out FILE [--dataset jsonl|text]",
        "                      [--text-field NAME] [--model-type "
        "bpe|unigram]"},
       {{"vocab-size",
         "--vocab-size N",
         "pieces in the model, at least 260 (3 special, 256 bytes)"},
        {"model-type", "--model-type TYPE", "bpe (default) or unigram"},
        {"out", "--out FILE", "the SentencePiece .model file to write"}}});
}

// `baton data tokenize`.
CommandUsage data_tokenize_usage() {
  return with_text_inputs(
      {"data tokenize",
       "tokenises text into token shards for training.dataset: tokens",
       {"baton data tokenize --input PATH [--input PATH ...] --out DIR",
        "                    [--dataset jsonl|text] [--text-field NAME]",
        "                    [--tokenizer NAME] [--tokenizer-path FILE]",
        "                    [--tokens-per-shard N]"},
       {{"tokenizer",
         "--tokenizer NAME",
         "bytes (default), sentencepiece or tiktoken"},
        {"tokenizer-path",
         "--tokenizer-path FILE",
         "the tokenizer's model file (sentencepiece, tiktoken)"},
        {"out", "--out DIR", "the folder the shards are written to"},
        {"tokens-per-shard",
         "--tokens-per-shard N",
         "a new shard starts once one holds N tokens; default 2^28"}}});
}

// `baton plan`.
CommandUsage plan_usage() {
  return {
      "plan",
      "ranks layouts, schedules and checkpointing for a world size from "
      "measured costs",
      {"baton plan --config FILE --nproc N [--costs FILE] [--memory-per-rank "
       "GIB]",
       "           [--top K] [--out DIR] [--global-batch ROWS] [--synthesize "
       "L]",
       "           [--tolerance PCT]",
       "           [--cpu-bind cores|none] [--plugin FILE ...]",
       "           [--log-level LEVEL] [--SECTION.KEY=VALUE ...]",
       "baton plan --config FILE --nproc N --write-costs FILE",
       "           [--profile-repeats R] [--cpu-bind cores|none]",
       "baton plan --config FILE --write-costs-from-flops FILE",
       "           [--peak-tflops X] [--efficiency E]"},
      {{"config", "--config FILE", "the base job config (repeatable)"},
       {"plugin",
        "--plugin FILE",
        "loads a shared library that extends Baton, as train does"},
       {"", "--SECTION.KEY=VALUE", "sets one key of the base config"},
       {"nproc", "--nproc N", "the world size to plan for"},
       {"log-level",
        "--log-level LEVEL",
        "debug, info (default), progress (phases and warnings) or warning"},
       {"costs",
        "--costs FILE",
        "the cost file (docs/plan.md); without it the costs are profiled "
        "on this machine first (min(N, cores) ranks at once) and written "
        "to DIR/costs.json with --out"},
       {"write-costs",
        "--write-costs FILE",
        "profiles on this machine, writes the cost file and exits"},
       {"profile-repeats",
        "--profile-repeats R",
        "timed runs per profile measurement (the median is kept; the "
        "pipelined block's runs: half as many, at least 1); default 5"},
       {"cpu-bind",
        "--cpu-bind cores|none",
        "binds the profile's ranks as baton train --cpu-bind would: profile "
        "the way the planned runs will be launched; default: both ways where "
        "this machine has a core per rank, and the plan chooses (the "
        "overlay's first line says how to train)"},
       {"memory-per-rank",
        "--memory-per-rank GIB",
        "the memory cap per rank; default the cost file's, else none"},
       {"top", "--top K", "candidates shown; default 10"},
       {"out",
        "--out DIR",
        "writes plan.yaml (an overlay for baton train's second --config), "
        "schedule.svg, plan.txt, plan.json and a CSV per synthesised "
        "schedule ranked"},
       {"synthesize",
        "--synthesize L",
        "synthesises a schedule for the costs of the L fastest pipelined "
        "layouts, ranked where faster than the built-in ones by more than "
        "the tolerance (at least 0.5 %); 0: none; default 8"},
       {"tolerance",
        "--tolerance PCT",
        "predictions within PCT % of the fastest count as level and rank "
        "simplest first (fewer pipeline stages, built-in schedule, less "
        "tensor parallelism, fewer microbatches, less checkpointing); 0: by "
        "prediction alone; default 2"},
       {"global-batch",
        "--global-batch ROWS",
        "sequences per step over all data-parallel ranks, kept across "
        "candidates; default local_batch_size x the config's data-parallel "
        "ranks"},
       {"write-costs-from-flops",
        "--write-costs-from-flops FILE",
        "writes a cost file from the model's FLOPs and exits"},
       {"peak-tflops",
        "--peak-tflops X",
        "with --write-costs-from-flops: the peak; default 989 (H100 bf16)"},
       {"efficiency",
        "--efficiency E",
        "with --write-costs-from-flops: the fraction of the peak reached; "
        "default 0.4"}}};
}

// `baton checkpoint inspect`.
CommandUsage checkpoint_inspect_usage() {
  return {
      "checkpoint inspect",
      "lists what a checkpoint holds and checks it byte by byte",
      {"baton checkpoint inspect DIR [--tensors]"},
      {{"", "DIR", "a run's checkpoint folder, or one step-N folder"},
       {"tensors",
        "--tensors",
        "lists every tensor: its dtype, shape and where its bytes are "
        "(default: each step's summary and the check's verdict)"}}};
}

// `baton generate`.
CommandUsage generate_usage() {
  return {
      "generate",
      "continues a prompt with a trained model",
      {"baton generate (--checkpoint DIR | --hf DIR) --prompt TEXT",
       "               [--max-new-tokens N] [--temperature T] [--top-k K]",
       "               [--top-p P] [--seed S] [--device cpu|cuda]",
       "               [--dtype float32|bfloat16] [--tokenizer NAME]",
       "               [--tokenizer-path FILE] [--plugin FILE ...]"},
      {{"checkpoint",
        "--checkpoint DIR",
        "a run's checkpoint folder (its latest step) or one step-N folder: "
        "the model and tokenizer the run recorded"},
       {"hf",
        "--hf DIR",
        "a Hugging Face folder (config.json, safetensors, tokenizer.json), "
        "a Baton export's or transformers'"},
       {"plugin",
        "--plugin FILE",
        "loads a shared library that extends Baton first (a model family "
        "or tokenizer of its own)"},
       {"prompt",
        "--prompt TEXT",
        "the text to continue (after the tokenizer's BOS, where it has one)"},
       {"max-new-tokens",
        "--max-new-tokens N",
        "tokens generated at most; it stops earlier at EOS; default 64"},
       {"temperature",
        "--temperature T",
        "0 (default): greedy; else sampling with the logits divided by T"},
       {"top-k", "--top-k K", "sample among the K likeliest; default 0: all"},
       {"top-p",
        "--top-p P",
        "sample among the likeliest whose probabilities reach P; default 1"},
       {"seed", "--seed S", "the sampling's seed; default 0"},
       {"device", "--device cpu|cuda", "where the model runs; default cpu"},
       {"dtype",
        "--dtype float32|bfloat16",
        "the weights' dtype; default float32"},
       {"tokenizer",
        "--tokenizer NAME",
        "the tokenizer, instead of the one the folder names"},
       {"tokenizer-path",
        "--tokenizer-path FILE",
        "its file, instead of the one the folder names"}}};
}

}  // namespace

const CommandUsage& cli_detail::command_usage_of(const std::string& command) {
  for (const CommandUsage& usage : cli_commands()) {
    if (usage.command == command) {
      return usage;
    }
  }
  throw std::invalid_argument("[cli] no usage for '" + command + "'");
}

const std::vector<CommandUsage>& cli_commands() {
  static const std::vector<CommandUsage> commands = [] {
    std::vector<CommandUsage> list = {
        train_usage(),
        schedule_usage(),
        plan_usage(),
        tokenizer_train_usage(),
        data_tokenize_usage(),
        checkpoint_inspect_usage(),
        generate_usage()};
    for (CommandUsage& usage : list) {
      usage.options.push_back(
          {"help", "-h, --help", "prints this help and exits"});
    }
    return list;
  }();
  return commands;
}

std::string cli_usage() {
  std::string text = "usage: baton COMMAND [OPTIONS]\n\ncommands:\n";
  for (const CommandUsage& usage : cli_commands()) {
    text += "  " + pad(usage.command, kOptionColumn - 2) + usage.summary + "\n";
  }
  text += "\n";
  for (const CommandUsage& usage : cli_commands()) {
    for (const std::string& line : usage.synopsis) {
      text += "  " + line + "\n";
    }
  }
  text +=
      "\n'baton COMMAND --help' (or -h) lists a command's options; "
      "'baton --version' says\nwhich Baton, libtorch, CUDA and BLAS this "
      "binary runs.\n"
      "exit codes: 0 success, 2 bad usage or config, 1 runtime failure\n";
  return text;
}

std::string command_usage(const std::string& command) {
  const CommandUsage& usage = command_usage_of(command);
  std::string text;
  for (size_t i = 0; i < usage.synopsis.size(); ++i) {
    text += (i == 0 ? "usage: " : "       ") + usage.synopsis[i] + "\n";
  }
  text += "\n" + usage.summary + "\n\noptions:\n";
  for (const OptionUsage& option : usage.options) {
    text += option_line(option);
  }
  text += "\nexit codes: 0 success, 2 bad usage or config, 1 runtime failure\n";
  return text;
}

}  // namespace baton
