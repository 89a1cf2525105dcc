#include "app/cli.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "common/error.h"
#include "common/text.h"
#include "parallel/pipeline/schedule_io.h"

namespace baton {

namespace {

std::string to_upper_ascii(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
  }
  return s;
}

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

/// The pointer every usage error ends with: " (see 'baton train --help')".
std::string see_help(const std::string& command) {
  return " (see 'baton " + (command.empty() ? "" : command + " ") + "--help')";
}

const CommandUsage& command_usage_of(const std::string& command) {
  for (const CommandUsage& usage : cli_commands()) {
    if (usage.command == command) {
      return usage;
    }
  }
  throw std::invalid_argument("[cli] no usage for '" + command + "'");
}

// The command a first argument names: "train", or "tokenizer" for
// "tokenizer train". Throws ConfigError for an unknown one.
const CommandUsage& usage_for_word(const std::string& word) {
  std::vector<std::string> words;
  for (const CommandUsage& usage : cli_commands()) {
    const std::string first = usage.command.substr(0, usage.command.find(' '));
    if (first == word) {
      return usage;
    }
    words.push_back(first);
  }
  std::string message = "unknown command '" + word + "'";
  const std::string hint = closest_match(word, words);
  message += hint.empty() ? "; allowed: " + join(words, ", ")
                          : "; did you mean '" + hint + "'?";
  throw ConfigError(message + see_help(""));
}

/// `value` as an integer of at least `least`, else ConfigError naming
/// `flag`.
int64_t parse_count(
    const std::string& flag, const std::string& value, int64_t least = 1) {
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n >= least) {
      return n;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      flag + ": '" + value +
      "' is not allowed; allowed: an integer >= " + std::to_string(least));
}

bool is_help(const std::string& arg) {
  return arg == "--help" || arg == "-h";
}

/// The names `command`'s parser matches, from its usage table.
std::vector<std::string> option_names(const std::string& command) {
  std::vector<std::string> names;
  for (const OptionUsage& option : command_usage_of(command).options) {
    if (!option.name.empty()) {
      names.push_back(option.name);
    }
  }
  return names;
}

/// Walks `--name=value` / `--name value` options of `command` in order.
class OptionReader {
 public:
  OptionReader(const std::vector<std::string>& args, std::string command)
      : args_(args), command_(std::move(command)) {}

  /// Moves to the next option; false after the last. Throws ConfigError for
  /// an argument that is not an option.
  bool next() {
    if (++i_ >= args_.size()) {
      return false;
    }
    const std::string& arg = args_[i_];
    if (arg.rfind("--", 0) != 0) {
      throw ConfigError(
          "baton " + command_ + ": unexpected argument '" + arg +
          "'; options start with --" + see_help(command_));
    }
    name_ = arg.substr(2);
    inline_value_.reset();
    if (const auto eq = name_.find('='); eq != std::string::npos) {
      inline_value_ = name_.substr(eq + 1);
      name_ = name_.substr(0, eq);
    }
    return true;
  }
  /// The option's name, without `--` and value.
  const std::string& name() const {
    return name_;
  }
  /// True for a bare `--flag` (no `=value`).
  bool is_flag() const {
    return !inline_value_.has_value();
  }
  /// The option's value: after `=`, else the next argument.
  std::string value() {
    if (inline_value_) {
      return *inline_value_;
    }
    if (i_ + 1 >= args_.size()) {
      throw ConfigError("--" + name_ + " needs a value");
    }
    return args_[++i_];
  }
  /// Throws ConfigError for the current (unknown) option, suggesting the
  /// closest of the command's options, else `fallback_hint`, and pointing
  /// at its --help.
  [[noreturn]] void fail_unknown(const std::string& fallback_hint = "") const {
    std::string message = "unknown option '--" + name_ + "'";
    const std::string hint = closest_match(name_, option_names(command_));
    if (!hint.empty()) {
      message += "; did you mean '--" + hint + "'?";
    } else if (!fallback_hint.empty()) {
      message += "; " + fallback_hint;
    }
    throw ConfigError(message + see_help(command_));
  }

 private:
  const std::vector<std::string>& args_;
  std::string command_;
  size_t i_ = static_cast<size_t>(-1);
  std::string name_;
  std::optional<std::string> inline_value_;
};

dist::CpuBind parse_bind(const std::string& value) {
  try {
    return dist::parse_cpu_bind("--cpu-bind", value);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

void require(bool present, const std::string& command, const char* what) {
  if (!present) {
    throw ConfigError("baton " + command + ": " + what + " is required");
  }
}

TrainArgs parse_train(const std::vector<std::string>& args) {
  TrainArgs out;
  bool cpu_bind_given = false;
  OptionReader option(args, "train");
  while (option.next()) {
    const std::string& name = option.name();
    if (name == "config") {
      out.config_paths.push_back(option.value());
    } else if (name == "print-config" && option.is_flag()) {
      out.print_config = true;
    } else if (name == "dry-run") {
      out.dry_run = option.is_flag() ? "text" : option.value();
      if (out.dry_run != "text" && out.dry_run != "json") {
        throw ConfigError(
            "--dry-run=" + out.dry_run +
            ": unknown format; allowed: text, "
            "json (--dry-run alone is text)");
      }
    } else if (name == "device") {
      out.device = option.value();
      if (out.device != "cpu" && out.device != "cuda") {
        throw ConfigError(
            "--device " + out.device + ": unknown device; allowed: cpu, cuda");
      }
    } else if (name == "nproc") {
      out.nproc = parse_count("--nproc", option.value());
    } else if (name == "max-restarts") {
      out.max_restarts = parse_count("--max-restarts", option.value());
    } else if (name == "cpu-bind") {
      out.cpu_bind = parse_bind(option.value());
      cpu_bind_given = true;
    } else if (name.find('.') != std::string::npos || name == "builder") {
      out.overrides.push_back(name + "=" + option.value());
    } else {
      option.fail_unknown("config overrides are written --SECTION.KEY=VALUE");
    }
  }
  require(!out.config_paths.empty(), "train", "--config FILE");
  if (!out.device.empty() && out.dry_run.empty()) {
    throw ConfigError(
        "--device " + out.device +
        ": applies to --dry-run only (a run computes on CUDA when the "
        "machine has it, else on the CPU)");
  }
  if (out.max_restarts > 0 && out.nproc == 0) {
    throw ConfigError(
        "--max-restarts " + std::to_string(out.max_restarts) +
        ": needs --nproc N (under torchrun, use torchrun's --max-restarts)");
  }
  if (cpu_bind_given && out.nproc == 0) {
    throw ConfigError(
        "--cpu-bind: needs --nproc N (it binds the ranks the launcher "
        "starts; under torchrun, bind them with its own options or "
        "numactl)");
  }
  return out;
}

double parse_positive(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double x = std::stod(value, &used);
    if (used == value.size() && x > 0.0) {
      return x;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      flag + ": '" + value + "' is not allowed; allowed: a number > 0");
}

/// A percentage in [0, 100).
double parse_percent(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double x = std::stod(value, &used);
    if (used == value.size() && x >= 0.0 && x < 100.0) {
      return x;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      flag + ": '" + value +
      "' is not allowed; allowed: a percentage >= 0 and < 100");
}

PlanArgs parse_plan(const std::vector<std::string>& args) {
  PlanArgs out;
  bool cpu_bind_given = false;
  OptionReader option(args, "plan");
  while (option.next()) {
    const std::string& name = option.name();
    if (name == "config") {
      out.config_paths.push_back(option.value());
    } else if (name == "nproc") {
      out.nproc = parse_count("--nproc", option.value());
    } else if (name == "memory-per-rank") {
      out.memory_per_rank_gib =
          parse_positive("--memory-per-rank", option.value());
    } else if (name == "costs") {
      out.costs_path = option.value();
    } else if (name == "top") {
      out.top = parse_count("--top", option.value());
    } else if (name == "synthesize") {
      out.synthesize = parse_count("--synthesize", option.value(), 0);
    } else if (name == "tolerance") {
      out.tolerance_percent = parse_percent("--tolerance", option.value());
    } else if (name == "out") {
      out.out_dir = option.value();
    } else if (name == "global-batch") {
      out.global_batch = parse_count("--global-batch", option.value());
    } else if (name == "write-costs-from-flops") {
      out.write_costs_path = option.value();
    } else if (name == "write-costs") {
      out.profile_path = option.value();
    } else if (name == "profile-repeats") {
      out.profile_repeats = parse_count("--profile-repeats", option.value());
    } else if (name == "cpu-bind") {
      out.cpu_bind = parse_bind(option.value());
      cpu_bind_given = true;
    } else if (name == "profile-rank") {
      out.profile_rank_path = option.value();
    } else if (name == "profile-compute-ranks") {
      out.profile_compute_ranks =
          parse_count("--profile-compute-ranks", option.value());
    } else if (name == "peak-tflops") {
      out.peak_tflops = parse_positive("--peak-tflops", option.value());
    } else if (name == "efficiency") {
      out.efficiency = parse_positive("--efficiency", option.value());
      if (out.efficiency > 1.0) {
        throw ConfigError(
            "--efficiency: '" + option.value() +
            "' is not allowed; allowed: a fraction in (0, 1]");
      }
    } else if (name.find('.') != std::string::npos) {
      out.overrides.push_back(name + "=" + option.value());
    } else {
      option.fail_unknown("config overrides are written --SECTION.KEY=VALUE");
    }
  }
  require(!out.config_paths.empty(), "plan", "--config FILE");
  if (out.write_costs_path.empty()) {
    require(out.nproc > 0, "plan", "--nproc N");
  }
  if (!out.costs_path.empty() && !out.profile_path.empty()) {
    throw ConfigError(
        "plan: --costs and --write-costs are not allowed together; allowed: "
        "--costs FILE (plan from it) or --write-costs FILE (profile here)");
  }
  if (cpu_bind_given &&
      (!out.costs_path.empty() || !out.write_costs_path.empty())) {
    throw ConfigError(
        "plan: --cpu-bind binds the ranks of the profile on this machine; "
        "with --costs or --write-costs-from-flops nothing is profiled");
  }
  return out;
}

// "F=1,B=2,P2P=0.1" into `costs`, whose keys are the allowed ones.
void parse_costs(
    const std::string& text, std::map<std::string, double>& costs) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : costs) {
    keys.push_back(key);
  }
  const std::string allowed = "KIND=VALUE,... with KIND one of " +
                              join(keys, ", ") +
                              " and VALUE a number >= 0 (OVERLAP may be -1)";
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) {
      end = text.size();
    }
    const std::string item = text.substr(begin, end - begin);
    const size_t eq = item.find('=');
    const std::string key = to_upper_ascii(item.substr(0, eq));
    double value = 0.0;
    bool ok = eq != std::string::npos && costs.count(key) > 0;
    if (ok) {
      try {
        size_t used = 0;
        const std::string number = item.substr(eq + 1);
        value = std::stod(number, &used);
        ok = used == number.size() && (value >= 0.0 || key == "OVERLAP");
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      throw ConfigError(
          "--costs: '" + item + "' is not allowed; allowed: " + allowed);
    }
    costs[key] = value;
    begin = end + 1;
  }
}

ScheduleArgs parse_schedule(const std::vector<std::string>& args) {
  ScheduleArgs out;
  OptionReader option(args, "schedule");
  while (option.next()) {
    const std::string& name = option.name();
    if (name == "schedule") {
      out.schedule = option.value();
    } else if (name == "pp") {
      out.pp = parse_count("--pp", option.value());
    } else if (name == "stages-per-rank") {
      out.stages_per_rank = parse_count("--stages-per-rank", option.value());
    } else if (name == "microbatches") {
      out.microbatches = parse_count("--microbatches", option.value());
    } else if (name == "format") {
      out.format = option.value();
      const auto& formats = pipeline::schedule_formats();
      if (std::find(formats.begin(), formats.end(), out.format) ==
          formats.end()) {
        throw ConfigError(
            "--format: '" + out.format +
            "' is not allowed; allowed: " + join(formats, ", "));
      }
    } else if (name == "comms" && option.is_flag()) {
      out.comms = true;
    } else if (name == "out") {
      out.out_path = option.value();
    } else if (name == "csv") {
      out.csv_path = option.value();
    } else if (name == "costs") {
      parse_costs(option.value(), out.costs);
    } else {
      option.fail_unknown();
    }
  }
  if (!out.csv_path.empty()) {
    if (!out.schedule.empty()) {
      throw ConfigError(
          "baton schedule: give --schedule NAME or --csv FILE, not both");
    }
    return out;
  }
  if (out.schedule.empty() || out.pp == 0 || out.microbatches == 0) {
    throw ConfigError(
        "baton schedule: --schedule NAME, --pp P and --microbatches M are "
        "required (or --csv FILE)");
  }
  return out;
}

/// Reads the input options `tokenizer train` and `data tokenize` share;
/// false when `option` is not one of them.
template <class Args>
bool read_input_option(OptionReader& option, Args& out) {
  const std::string& name = option.name();
  if (name == "input") {
    out.inputs.push_back(option.value());
  } else if (name == "dataset") {
    out.dataset = option.value();
  } else if (name == "text-field") {
    out.text_field = option.value();
  } else {
    return false;
  }
  return true;
}

TokenizerTrainArgs parse_tokenizer_train(const std::vector<std::string>& args) {
  TokenizerTrainArgs out;
  OptionReader option(args, "tokenizer train");
  while (option.next()) {
    const std::string& name = option.name();
    if (read_input_option(option, out)) {
      continue;
    }
    if (name == "vocab-size") {
      out.vocab_size = parse_count("--vocab-size", option.value());
    } else if (name == "model-type") {
      out.model_type = to_lower(option.value());
      if (out.model_type != "bpe" && out.model_type != "unigram") {
        throw ConfigError(
            "--model-type: '" + out.model_type +
            "' is not allowed; allowed: bpe, unigram");
      }
    } else if (name == "out") {
      out.out_path = option.value();
    } else {
      option.fail_unknown();
    }
  }
  require(!out.inputs.empty(), "tokenizer train", "--input PATH");
  require(out.vocab_size > 0, "tokenizer train", "--vocab-size N");
  require(!out.out_path.empty(), "tokenizer train", "--out FILE");
  // unk, BOS, EOS and the 256 byte pieces come first.
  if (out.vocab_size < 260) {
    throw ConfigError(
        "--vocab-size: " + std::to_string(out.vocab_size) +
        " is not allowed; allowed: an integer >= 260 (3 special and 256 byte "
        "pieces come first)");
  }
  return out;
}

DataTokenizeArgs parse_data_tokenize(const std::vector<std::string>& args) {
  DataTokenizeArgs out;
  OptionReader option(args, "data tokenize");
  while (option.next()) {
    const std::string& name = option.name();
    if (read_input_option(option, out)) {
      continue;
    }
    if (name == "tokenizer") {
      out.tokenizer = option.value();
    } else if (name == "tokenizer-path") {
      out.tokenizer_path = option.value();
    } else if (name == "out") {
      out.out_dir = option.value();
    } else if (name == "tokens-per-shard") {
      out.tokens_per_shard = parse_count("--tokens-per-shard", option.value());
    } else {
      option.fail_unknown();
    }
  }
  require(!out.inputs.empty(), "data tokenize", "--input PATH");
  require(!out.out_dir.empty(), "data tokenize", "--out DIR");
  return out;
}

CheckpointInspectArgs parse_checkpoint_inspect(
    const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].rfind("--", 0) == 0) {
    throw ConfigError(
        "baton checkpoint inspect: " +
        (args.empty() ? std::string("no folder")
                      : "'" + args[0] + (args.size() > 1 ? "' ..." : "'")) +
        "; allowed: one checkpoint folder" + see_help("checkpoint inspect"));
  }
  return {args[0]};
}

/// `baton GROUP ACTION ...`: the action must be `action`.
std::vector<std::string> sub_command_args(
    const std::string& group,
    const std::string& action,
    const std::vector<std::string>& args) {
  if (args.empty() || args[0] != action) {
    const std::string got = args.empty() ? "nothing" : "'" + args[0] + "'";
    throw ConfigError(
        "baton " + group + ": expected '" + action + "', got " + got +
        see_help(group + " " + action));
  }
  return std::vector<std::string>(args.begin() + 1, args.end());
}

}  // namespace

CliArgs parse_cli(const std::vector<std::string>& args) {
  CliArgs out;
  if (args.empty() || is_help(args[0])) {
    out.command = "help";
    return out;
  }
  if (args[0] == "help") {
    out.command = "help";
    if (args.size() > 1) {
      out.help_topic = usage_for_word(args[1]).command;
    }
    return out;
  }
  const std::string command = usage_for_word(args[0]).command;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (std::any_of(rest.begin(), rest.end(), is_help)) {
    out.command = "help";
    out.help_topic = command;
    return out;
  }
  out.command = command;
  if (command == "train") {
    out.train = parse_train(rest);
  } else if (command == "schedule") {
    out.schedule = parse_schedule(rest);
  } else if (command == "plan") {
    out.plan = parse_plan(rest);
  } else if (command == "tokenizer train") {
    out.tokenizer_train =
        parse_tokenizer_train(sub_command_args("tokenizer", "train", rest));
  } else if (command == "data tokenize") {
    out.data_tokenize =
        parse_data_tokenize(sub_command_args("data", "tokenize", rest));
  } else if (command == "checkpoint inspect") {
    out.checkpoint_inspect = parse_checkpoint_inspect(
        sub_command_args("checkpoint", "inspect", rest));
  } else {
    throw std::logic_error("[cli] no parser for '" + command + "'");
  }
  return out;
}

namespace {

// `baton train`.
CommandUsage train_usage() {
  return {
      "train",
      "trains a model from a YAML job config",
      {"baton train --config FILE [--config FILE ...]",
       "            [--nproc N [--max-restarts R] [--cpu-bind cores|none]]",
       "            [--SECTION.KEY=VALUE ...]",
       "            [--print-config] [--dry-run[=text|json] [--device D]]"},
      {{"config",
        "--config FILE",
        "the YAML job config (see configs/); repeated, later files set "
        "their keys over earlier ones' (a baton plan overlay)"},
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
        "machine's"}}};
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
       "           [--cpu-bind cores|none] [--SECTION.KEY=VALUE ...]",
       "baton plan --config FILE --nproc N --write-costs FILE",
       "           [--profile-repeats R] [--cpu-bind cores|none]",
       "baton plan --config FILE --write-costs-from-flops FILE",
       "           [--peak-tflops X] [--efficiency E]"},
      {{"config", "--config FILE", "the base job config (repeatable)"},
       {"", "--SECTION.KEY=VALUE", "sets one key of the base config"},
       {"nproc", "--nproc N", "the world size to plan for"},
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
        "the way the planned runs will be launched; default none"},
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
        "candidates; default local_batch_size x world / (tp x pp)"},
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
      {"baton checkpoint inspect DIR"},
      {{"", "DIR", "a run's checkpoint folder, or one step-N folder"}}};
}

}  // namespace

const std::vector<CommandUsage>& cli_commands() {
  static const std::vector<CommandUsage> commands = [] {
    std::vector<CommandUsage> list = {
        train_usage(),
        schedule_usage(),
        plan_usage(),
        tokenizer_train_usage(),
        data_tokenize_usage(),
        checkpoint_inspect_usage()};
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
      "\n'baton COMMAND --help' (or -h) lists a command's options.\n"
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
