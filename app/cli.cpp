// The command line's parsers: the command a first word names, each
// command's options read in order against its usage table (cli_usage.cpp),
// with "did you mean" hints and the pointer to its --help.

#include "app/cli.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "app/cli_detail.h"
#include "common/error.h"
#include "common/text.h"
#include "parallel/pipeline/schedule_io.h"

namespace baton {

namespace {

using cli_detail::command_usage_of;

std::string to_upper_ascii(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
  }
  return s;
}

/// The pointer every usage error ends with: " (see 'baton train --help')".
std::string see_help(const std::string& command) {
  return " (see 'baton " + (command.empty() ? "" : command + " ") + "--help')";
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
    } else if (name == "plugin") {
      out.plugins.push_back(option.value());
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
    } else if (
        name.find('.') != std::string::npos || name == "builder" ||
        name == "plugins") {
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
    } else if (name == "plugin") {
      out.plugins.push_back(option.value());
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
    } else if (name.find('.') != std::string::npos || name == "plugins") {
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
  CheckpointInspectArgs out;
  std::vector<std::string> folders;
  for (const auto& arg : args) {
    if (arg == "--tensors") {
      out.tensors = true;
    } else if (arg.rfind("--", 0) == 0) {
      throw ConfigError(
          "baton checkpoint inspect: unknown option '" + arg +
          "'; allowed: --tensors" + see_help("checkpoint inspect"));
    } else {
      folders.push_back(arg);
    }
  }
  if (folders.size() != 1) {
    throw ConfigError(
        "baton checkpoint inspect: " +
        (folders.empty()
             ? std::string("no folder")
             : "'" + folders[0] + (folders.size() > 1 ? "' ..." : "'")) +
        "; allowed: one checkpoint folder" + see_help("checkpoint inspect"));
  }
  out.dir = folders[0];
  return out;
}

/// A number `value` of `flag` within [least, most].
double parse_number(
    const std::string& flag,
    const std::string& value,
    double least,
    double most,
    const std::string& allowed) {
  try {
    size_t used = 0;
    const double x = std::stod(value, &used);
    if (used == value.size() && x >= least && x <= most) {
      return x;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      flag + ": '" + value + "' is not allowed; allowed: " + allowed);
}

GenerateArgs parse_generate(const std::vector<std::string>& args) {
  GenerateArgs out;
  OptionReader option(args, "generate");
  const auto one_of = [](const std::string& flag,
                         const std::string& value,
                         const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
      throw ConfigError(
          flag + ": '" + value +
          "' is not allowed; allowed: " + join(allowed, ", "));
    }
    return value;
  };
  while (option.next()) {
    const std::string& name = option.name();
    if (name == "checkpoint") {
      out.checkpoint = option.value();
    } else if (name == "plugin") {
      out.plugins.push_back(option.value());
    } else if (name == "hf") {
      out.hf = option.value();
    } else if (name == "prompt") {
      out.prompt = option.value();
      out.has_prompt = true;
    } else if (name == "max-new-tokens") {
      out.max_new_tokens = parse_count("--max-new-tokens", option.value());
    } else if (name == "temperature") {
      out.temperature = parse_number(
          "--temperature", option.value(), 0.0, 1e9, "a number >= 0");
    } else if (name == "top-k") {
      out.top_k = parse_count("--top-k", option.value(), 0);
    } else if (name == "top-p") {
      out.top_p = parse_number(
          "--top-p", option.value(), 1e-9, 1.0, "a number > 0 and <= 1");
    } else if (name == "seed") {
      out.seed =
          static_cast<uint64_t>(parse_count("--seed", option.value(), 0));
    } else if (name == "device") {
      out.device =
          one_of("--device", to_lower(option.value()), {"cpu", "cuda"});
    } else if (name == "dtype") {
      out.dtype =
          one_of("--dtype", to_lower(option.value()), {"float32", "bfloat16"});
    } else if (name == "tokenizer") {
      out.tokenizer = option.value();
    } else if (name == "tokenizer-path") {
      out.tokenizer_path = option.value();
    } else {
      option.fail_unknown();
    }
  }
  if (out.checkpoint.empty() == out.hf.empty()) {
    throw ConfigError(
        std::string("baton generate: ") +
        (out.checkpoint.empty() ? "no model" : "both --checkpoint and --hf") +
        "; allowed: --checkpoint DIR or --hf DIR" + see_help("generate"));
  }
  require(out.has_prompt, "generate", "--prompt TEXT");
  return out;
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
    out.bare = args.empty();
    return out;
  }
  if (args[0] == "--version" || args[0] == "version") {
    if (args.size() > 1) {
      throw ConfigError(
          "baton " + args[0] + ": takes no arguments, got '" + args[1] + "'" +
          see_help(""));
    }
    out.command = "version";
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
  } else if (command == "generate") {
    out.generate = parse_generate(rest);
  } else {
    throw std::logic_error("[cli] no parser for '" + command + "'");
  }
  return out;
}

}  // namespace baton
