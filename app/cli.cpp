// The command line's parser: CLI11's command tree, each command's options
// bound to its usage table (cli_usage.cpp) and read in order; what CLI11
// leaves over is the config overrides (--SECTION.KEY=VALUE), or an error
// with a "did you mean" hint and the pointer to the command's --help.

#include "app/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <map>
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

/// Throws ConfigError for the unknown option `--name` of `command`,
/// suggesting the closest of its options, else `fallback_hint`, and pointing
/// at its --help.
[[noreturn]] void fail_unknown(
    const std::string& command,
    const std::string& name,
    const std::string& fallback_hint = "") {
  std::string message = "unknown option '--" + name + "'";
  const std::string hint = closest_match(name, option_names(command));
  if (!hint.empty()) {
    message += "; did you mean '--" + hint + "'?";
  } else if (!fallback_hint.empty()) {
    message += "; " + fallback_hint;
  }
  throw ConfigError(message + see_help(command));
}

/// One command's options as a CLI11 subcommand: each option of its usage
/// table bound to a handler that runs as the option is read, so options act
/// in command-line order. Every option it parses is in the usage table
/// (internal ones aside), and check_complete() says every option the table
/// lists has a handler: the help and the parser cannot drift apart.
class CommandOptions {
 public:
  using Handler = std::function<void(const std::string&)>;

  CommandOptions(CLI::App& app, std::string command)
      : app_(app), command_(std::move(command)) {
    app_.set_help_flag();  // --help is read before CLI11 runs.
    app_.allow_extras();   // Overrides, and unknown options for the hints.
  }

  /// --NAME VALUE or --NAME=VALUE; repeatable.
  void value(const std::string& name, Handler on) {
    app_.add_option_function<std::string>(
            "--" + name, std::move(on), help(name))
        ->trigger_on_parse()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  /// --NAME alone.
  void flag(const std::string& name, std::function<void()> on) {
    app_.add_flag_function(
            "--" + name, [on = std::move(on)](int64_t) { on(); }, help(name))
        ->trigger_on_parse();
  }
  /// --NAME (meaning `implicit`), --NAME=VALUE or --NAME VALUE.
  void optional_value(
      const std::string& name, const std::string& implicit, Handler on) {
    app_.add_option_function<std::string>(
            "--" + name, std::move(on), help(name))
        ->expected(0, 1)
        ->default_str(implicit)
        ->trigger_on_parse();
  }
  /// An option the launcher passes to ranks it starts, not in the help.
  void internal(const std::string& name, Handler on) {
    app_.add_option_function<std::string>("--" + name, std::move(on))
        ->trigger_on_parse();
  }
  /// An option that is a config override by another name (override_aliases):
  /// read with the overrides, in their order.
  void override_alias(const std::string& name) {
    help(name);
    aliases_.push_back(name);
  }
  /// Throws std::logic_error naming an option of the usage table that has
  /// no handler.
  void check_complete() const {
    for (const std::string& name : option_names(command_)) {
      if (name != "help" &&
          std::find(aliases_.begin(), aliases_.end(), name) == aliases_.end() &&
          app_.get_option_no_throw("--" + name) == nullptr) {
        throw std::logic_error(
            "[cli] baton " + command_ + " --" + name +
            " is in the usage table but has no handler");
      }
    }
  }

 private:
  /// The option's help line; std::logic_error for one not in the table.
  std::string help(const std::string& name) const {
    for (const OptionUsage& option : command_usage_of(command_).options) {
      if (option.name == name) {
        return option.help;
      }
    }
    throw std::logic_error(
        "[cli] baton " + command_ + " --" + name +
        " is not in its usage table");
  }

  CLI::App& app_;
  std::string command_;
  std::vector<std::string> aliases_;
};

/// The options that set one config key: --builder NAME is --builder=NAME,
/// --log-level L is --metrics.log_level=L (and --plugins=[...] the
/// top-level key).
const std::map<std::string, std::string>& override_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"builder", "builder"},
      {"log-level", "metrics.log_level"},
      {"plugins", "plugins"}};
  return aliases;
}

/// What CLI11 left over, in order: "--SECTION.KEY=VALUE" or
/// "--SECTION.KEY VALUE" overrides where `overrides` is given (and
/// `--builder` / `--plugins`), else errors: an unknown option with the
/// closest known one, a stray word. `positional` takes the words of a
/// command that has them (checkpoint inspect's folder).
void read_extras(
    const std::string& command,
    const std::vector<std::string>& extras,
    std::vector<std::string>* overrides,
    std::vector<std::string>* positional = nullptr,
    const std::string& fallback_hint = "") {
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    if (arg.rfind("--", 0) != 0) {
      if (positional != nullptr) {
        positional->push_back(arg);
        continue;
      }
      throw ConfigError(
          "baton " + command + ": unexpected argument '" + arg +
          "'; options start with --" + see_help(command));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto alias = override_aliases().find(name);
    const bool is_override = name.find('.') != std::string::npos ||
                             alias != override_aliases().end();
    if (overrides == nullptr || !is_override) {
      fail_unknown(
          command,
          name,
          overrides != nullptr
              ? "config overrides are written --SECTION.KEY=VALUE"
              : fallback_hint);
    }
    if (!value) {
      if (i + 1 >= extras.size() || extras[i + 1].rfind("--", 0) == 0) {
        throw ConfigError("--" + name + " needs a value");
      }
      value = extras[++i];
    }
    overrides->push_back(
        (alias != override_aliases().end() ? alias->second : name) + "=" +
        *value);
  }
}

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

/// `baton train`'s options into `out`.
void train_options(CLI::App& app, TrainArgs& out, bool& cpu_bind_given) {
  CommandOptions o(app, "train");
  o.value(
      "config", [&](const std::string& v) { out.config_paths.push_back(v); });
  o.value("plugin", [&](const std::string& v) { out.plugins.push_back(v); });
  o.override_alias("builder");
  o.flag("print-config", [&] { out.print_config = true; });
  o.optional_value("dry-run", "text", [&](const std::string& v) {
    out.dry_run = v;
    if (out.dry_run != "text" && out.dry_run != "json") {
      throw ConfigError(
          "--dry-run=" + out.dry_run +
          ": unknown format; allowed: text, json (--dry-run alone is text)");
    }
  });
  o.value("device", [&](const std::string& v) {
    out.device = v;
    if (out.device != "cpu" && out.device != "cuda") {
      throw ConfigError(
          "--device " + out.device + ": unknown device; allowed: cpu, cuda");
    }
  });
  o.value("nproc", [&](const std::string& v) {
    out.nproc = parse_count("--nproc", v);
  });
  o.value("max-restarts", [&](const std::string& v) {
    out.max_restarts = parse_count("--max-restarts", v);
  });
  o.value("cpu-bind", [&](const std::string& v) {
    out.cpu_bind = parse_bind(v);
    cpu_bind_given = true;
  });
  o.override_alias("log-level");
  o.check_complete();
}

/// What `baton train`'s options need of each other.
void check_train(const TrainArgs& out, bool cpu_bind_given) {
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

/// `baton plan`'s options into `out`.
void plan_options(CLI::App& app, PlanArgs& out, bool& cpu_bind_given) {
  CommandOptions o(app, "plan");
  o.value(
      "config", [&](const std::string& v) { out.config_paths.push_back(v); });
  o.value("plugin", [&](const std::string& v) { out.plugins.push_back(v); });
  o.value("nproc", [&](const std::string& v) {
    out.nproc = parse_count("--nproc", v);
  });
  o.value("memory-per-rank", [&](const std::string& v) {
    out.memory_per_rank_gib = parse_positive("--memory-per-rank", v);
  });
  o.value("costs", [&](const std::string& v) { out.costs_path = v; });
  o.value(
      "top", [&](const std::string& v) { out.top = parse_count("--top", v); });
  o.value("synthesize", [&](const std::string& v) {
    out.synthesize = parse_count("--synthesize", v, 0);
  });
  o.value("tolerance", [&](const std::string& v) {
    out.tolerance_percent = parse_percent("--tolerance", v);
  });
  o.value("out", [&](const std::string& v) { out.out_dir = v; });
  o.value("global-batch", [&](const std::string& v) {
    out.global_batch = parse_count("--global-batch", v);
  });
  o.value("write-costs-from-flops", [&](const std::string& v) {
    out.write_costs_path = v;
  });
  o.value("write-costs", [&](const std::string& v) { out.profile_path = v; });
  o.value("profile-repeats", [&](const std::string& v) {
    out.profile_repeats = parse_count("--profile-repeats", v);
  });
  o.value("cpu-bind", [&](const std::string& v) {
    out.cpu_bind = parse_bind(v);
    cpu_bind_given = true;
  });
  o.value("peak-tflops", [&](const std::string& v) {
    out.peak_tflops = parse_positive("--peak-tflops", v);
  });
  o.value("efficiency", [&](const std::string& v) {
    out.efficiency = parse_positive("--efficiency", v);
    if (out.efficiency > 1.0) {
      throw ConfigError(
          "--efficiency: '" + v +
          "' is not allowed; allowed: a fraction in (0, 1]");
    }
  });
  o.override_alias("log-level");
  o.internal(
      "profile-rank", [&](const std::string& v) { out.profile_rank_path = v; });
  o.internal("profile-compute-ranks", [&](const std::string& v) {
    out.profile_compute_ranks = parse_count("--profile-compute-ranks", v);
  });
  o.check_complete();
}

/// What `baton plan`'s options need of each other.
void check_plan(const PlanArgs& out, bool cpu_bind_given) {
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

/// `baton schedule`'s options into `out`.
void schedule_options(CLI::App& app, ScheduleArgs& out) {
  CommandOptions o(app, "schedule");
  o.value("schedule", [&](const std::string& v) { out.schedule = v; });
  o.value("pp", [&](const std::string& v) { out.pp = parse_count("--pp", v); });
  o.value("stages-per-rank", [&](const std::string& v) {
    out.stages_per_rank = parse_count("--stages-per-rank", v);
  });
  o.value("microbatches", [&](const std::string& v) {
    out.microbatches = parse_count("--microbatches", v);
  });
  o.value("format", [&](const std::string& v) {
    out.format = v;
    const auto& formats = pipeline::schedule_formats();
    if (std::find(formats.begin(), formats.end(), out.format) ==
        formats.end()) {
      throw ConfigError(
          "--format: '" + out.format +
          "' is not allowed; allowed: " + join(formats, ", "));
    }
  });
  o.flag("comms", [&] { out.comms = true; });
  o.value("out", [&](const std::string& v) { out.out_path = v; });
  o.value("csv", [&](const std::string& v) { out.csv_path = v; });
  o.value("costs", [&](const std::string& v) { parse_costs(v, out.costs); });
  o.check_complete();
}

void check_schedule(const ScheduleArgs& out) {
  if (!out.csv_path.empty()) {
    if (!out.schedule.empty()) {
      throw ConfigError(
          "baton schedule: give --schedule NAME or --csv FILE, not both");
    }
    return;
  }
  if (out.schedule.empty() || out.pp == 0 || out.microbatches == 0) {
    throw ConfigError(
        "baton schedule: --schedule NAME, --pp P and --microbatches M are "
        "required (or --csv FILE)");
  }
}

/// The input options `tokenizer train` and `data tokenize` share.
template <class Args>
void input_options(CommandOptions& o, Args& out) {
  o.value("input", [&](const std::string& v) { out.inputs.push_back(v); });
  o.value("dataset", [&](const std::string& v) { out.dataset = v; });
  o.value("text-field", [&](const std::string& v) { out.text_field = v; });
}

void tokenizer_train_options(CLI::App& app, TokenizerTrainArgs& out) {
  CommandOptions o(app, "tokenizer train");
  input_options(o, out);
  o.value("vocab-size", [&](const std::string& v) {
    out.vocab_size = parse_count("--vocab-size", v);
  });
  o.value("model-type", [&](const std::string& v) {
    out.model_type = to_lower(v);
    if (out.model_type != "bpe" && out.model_type != "unigram") {
      throw ConfigError(
          "--model-type: '" + out.model_type +
          "' is not allowed; allowed: bpe, unigram");
    }
  });
  o.value("out", [&](const std::string& v) { out.out_path = v; });
  o.check_complete();
}

void check_tokenizer_train(const TokenizerTrainArgs& out) {
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
}

void data_tokenize_options(CLI::App& app, DataTokenizeArgs& out) {
  CommandOptions o(app, "data tokenize");
  input_options(o, out);
  o.value("tokenizer", [&](const std::string& v) { out.tokenizer = v; });
  o.value(
      "tokenizer-path", [&](const std::string& v) { out.tokenizer_path = v; });
  o.value("out", [&](const std::string& v) { out.out_dir = v; });
  o.value("tokens-per-shard", [&](const std::string& v) {
    out.tokens_per_shard = parse_count("--tokens-per-shard", v);
  });
  o.check_complete();
}

void check_data_tokenize(const DataTokenizeArgs& out) {
  require(!out.inputs.empty(), "data tokenize", "--input PATH");
  require(!out.out_dir.empty(), "data tokenize", "--out DIR");
}

void checkpoint_inspect_options(CLI::App& app, CheckpointInspectArgs& out) {
  CommandOptions o(app, "checkpoint inspect");
  o.flag("tensors", [&] { out.tensors = true; });
  o.check_complete();
}

/// The folder is the one positional word.
void check_checkpoint_inspect(
    CheckpointInspectArgs& out, const std::vector<std::string>& folders) {
  if (folders.size() != 1) {
    throw ConfigError(
        "baton checkpoint inspect: " +
        (folders.empty()
             ? std::string("no folder")
             : "'" + folders[0] + (folders.size() > 1 ? "' ..." : "'")) +
        "; allowed: one checkpoint folder" + see_help("checkpoint inspect"));
  }
  out.dir = folders[0];
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

void generate_options(CLI::App& app, GenerateArgs& out) {
  CommandOptions o(app, "generate");
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
  o.value("checkpoint", [&](const std::string& v) { out.checkpoint = v; });
  o.value("plugin", [&](const std::string& v) { out.plugins.push_back(v); });
  o.value("hf", [&](const std::string& v) { out.hf = v; });
  o.value("prompt", [&](const std::string& v) {
    out.prompt = v;
    out.has_prompt = true;
  });
  o.value("max-new-tokens", [&](const std::string& v) {
    out.max_new_tokens = parse_count("--max-new-tokens", v);
  });
  o.value("temperature", [&](const std::string& v) {
    out.temperature =
        parse_number("--temperature", v, 0.0, 1e9, "a number >= 0");
  });
  o.value("top-k", [&](const std::string& v) {
    out.top_k = parse_count("--top-k", v, 0);
  });
  o.value("top-p", [&](const std::string& v) {
    out.top_p = parse_number("--top-p", v, 1e-9, 1.0, "a number > 0 and <= 1");
  });
  o.value("seed", [&](const std::string& v) {
    out.seed = static_cast<uint64_t>(parse_count("--seed", v, 0));
  });
  o.value("device", [&, one_of](const std::string& v) {
    out.device = one_of("--device", to_lower(v), {"cpu", "cuda"});
  });
  o.value("dtype", [&, one_of](const std::string& v) {
    out.dtype = one_of("--dtype", to_lower(v), {"float32", "bfloat16"});
  });
  o.value("tokenizer", [&](const std::string& v) { out.tokenizer = v; });
  o.value(
      "tokenizer-path", [&](const std::string& v) { out.tokenizer_path = v; });
  o.check_complete();
}

void check_generate(const GenerateArgs& out) {
  if (out.checkpoint.empty() == out.hf.empty()) {
    throw ConfigError(
        std::string("baton generate: ") +
        (out.checkpoint.empty() ? "no model" : "both --checkpoint and --hf") +
        "; allowed: --checkpoint DIR or --hf DIR" + see_help("generate"));
  }
  require(out.has_prompt, "generate", "--prompt TEXT");
}

/// `baton GROUP ACTION ...`: the action must be `action`.
void expect_action(
    const std::string& group,
    const std::string& action,
    const std::vector<std::string>& rest) {
  if (rest.empty() || rest[0] != action) {
    const std::string got = rest.empty() ? "nothing" : "'" + rest[0] + "'";
    throw ConfigError(
        "baton " + group + ": expected '" + action + "', got " + got +
        see_help(group + " " + action));
  }
}

/// The CLI11 command tree: each command a subcommand (`tokenizer train`
/// one of `tokenizer`'s) whose options write into `out`.
class CommandTree {
 public:
  explicit CommandTree(CliArgs& out) : out_(out) {
    root_.set_help_flag();
    // One command a line: a later word that names another command (a
    // folder called "train") is not one.
    root_.require_subcommand(1);
    train_options(*root_.add_subcommand("train"), out.train, train_bind_);
    schedule_options(*root_.add_subcommand("schedule"), out.schedule);
    plan_options(*root_.add_subcommand("plan"), out.plan, plan_bind_);
    tokenizer_train_options(
        *group("tokenizer")->add_subcommand("train"), out.tokenizer_train);
    data_tokenize_options(
        *group("data")->add_subcommand("tokenize"), out.data_tokenize);
    checkpoint_inspect_options(
        *group("checkpoint")->add_subcommand("inspect"),
        out.checkpoint_inspect);
    generate_options(*root_.add_subcommand("generate"), out.generate);
  }

  /// Reads `args` (the command's words first) into `out` for `command`,
  /// then checks what the command's options need of each other.
  void parse(const std::string& command, const std::vector<std::string>& args) {
    // CLI11 takes the words last first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      root_.parse(reversed);
    } catch (const CLI::ArgumentMismatch& e) {
      // "--config: 1 required TEXT missing": an option without its value.
      const std::string what = e.what();
      throw ConfigError(what.substr(0, what.find(':')) + " needs a value");
    } catch (const CLI::ParseError& e) {
      throw ConfigError(
          "baton " + command + ": " + e.what() + see_help(command));
    }
    const std::vector<std::string> extras = leaf(command).remaining();
    if (command == "train") {
      read_extras(command, extras, &out_.train.overrides);
      check_train(out_.train, train_bind_);
    } else if (command == "plan") {
      read_extras(command, extras, &out_.plan.overrides);
      check_plan(out_.plan, plan_bind_);
    } else if (command == "schedule") {
      read_extras(command, extras, nullptr);
      check_schedule(out_.schedule);
    } else if (command == "tokenizer train") {
      read_extras(command, extras, nullptr);
      check_tokenizer_train(out_.tokenizer_train);
    } else if (command == "data tokenize") {
      read_extras(command, extras, nullptr);
      check_data_tokenize(out_.data_tokenize);
    } else if (command == "checkpoint inspect") {
      std::vector<std::string> folders;
      read_extras(command, extras, nullptr, &folders, "allowed: --tensors");
      check_checkpoint_inspect(out_.checkpoint_inspect, folders);
    } else if (command == "generate") {
      read_extras(command, extras, nullptr);
      check_generate(out_.generate);
    } else {
      throw std::logic_error("[cli] no parser for '" + command + "'");
    }
  }

 private:
  /// A command group (`baton tokenizer ...`): only its actions.
  CLI::App* group(const std::string& name) {
    CLI::App* app = root_.add_subcommand(name);
    app->set_help_flag();
    app->require_subcommand(1);
    return app;
  }
  /// The subcommand `command` names ("tokenizer train": two deep).
  CLI::App& leaf(const std::string& command) {
    CLI::App* app = &root_;
    for (size_t begin = 0, end; begin <= command.size(); begin = end + 1) {
      end = std::min(command.find(' ', begin), command.size());
      app = app->get_subcommand(command.substr(begin, end - begin));
    }
    return *app;
  }

  CliArgs& out_;
  CLI::App root_{"", "baton"};
  bool train_bind_ = false;
  bool plan_bind_ = false;
};

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
  // The command and --help are read first, for their own messages: help
  // wins over whatever else is given, even a bad option.
  const std::string command = usage_for_word(args[0]).command;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (std::any_of(rest.begin(), rest.end(), is_help)) {
    out.command = "help";
    out.help_topic = command;
    return out;
  }
  if (const auto space = command.find(' '); space != std::string::npos) {
    expect_action(command.substr(0, space), command.substr(space + 1), rest);
  }
  out.command = command;
  CommandTree(out).parse(command, args);
  return out;
}

}  // namespace baton
