#include "app/cli.h"

#include <algorithm>
#include <optional>

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

int64_t parse_count(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n >= 1) {
      return n;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      flag + ": '" + value + "' is not allowed; allowed: an integer >= 1");
}

/// Walks `--name=value` / `--name value` options in order.
class OptionReader {
 public:
  explicit OptionReader(const std::vector<std::string>& args) : args_(args) {}

  /// Moves to the next option; false after the last. Throws ConfigError for
  /// an argument that is not an option.
  bool next() {
    if (++i_ >= args_.size()) {
      return false;
    }
    const std::string& arg = args_[i_];
    if (arg.rfind("--", 0) != 0) {
      throw ConfigError(
          "unexpected argument '" + arg + "'; options start with --\n" +
          cli_usage());
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
  /// closest of `known`, else `fallback_hint`.
  [[noreturn]] void fail_unknown(
      const std::vector<std::string>& known,
      const std::string& fallback_hint) const {
    std::string message = "unknown option '--" + name_ + "'";
    const std::string hint = closest_match(name_, known);
    if (!hint.empty()) {
      message += "; did you mean '--" + hint + "'?";
    } else if (!fallback_hint.empty()) {
      message += "; " + fallback_hint;
    }
    throw ConfigError(message);
  }

 private:
  const std::vector<std::string>& args_;
  size_t i_ = static_cast<size_t>(-1);
  std::string name_;
  std::optional<std::string> inline_value_;
};

void require(bool present, const std::string& command, const char* what) {
  if (!present) {
    throw ConfigError("baton " + command + ": " + what + " is required");
  }
}

TrainArgs parse_train(const std::vector<std::string>& args) {
  TrainArgs out;
  OptionReader option(args);
  while (option.next()) {
    const std::string& name = option.name();
    if (name == "config") {
      out.config_path = option.value();
    } else if (name == "print-config" && option.is_flag()) {
      out.print_config = true;
    } else if (name == "nproc") {
      out.nproc = parse_count("--nproc", option.value());
    } else if (name == "max-restarts") {
      out.max_restarts = parse_count("--max-restarts", option.value());
    } else if (name.find('.') != std::string::npos || name == "builder") {
      out.overrides.push_back(name + "=" + option.value());
    } else {
      option.fail_unknown(
          {"config", "print-config", "nproc", "max-restarts", "builder"},
          "config overrides are written --SECTION.KEY=VALUE");
    }
  }
  require(!out.config_path.empty(), "train", "--config FILE");
  if (out.max_restarts > 0 && out.nproc == 0) {
    throw ConfigError(
        "--max-restarts " + std::to_string(out.max_restarts) +
        ": needs --nproc N (under torchrun, use torchrun's --max-restarts)");
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
  static const std::vector<std::string> kFlags = {
      "schedule",
      "pp",
      "stages-per-rank",
      "microbatches",
      "format",
      "comms",
      "out",
      "csv",
      "costs"};
  ScheduleArgs out;
  OptionReader option(args);
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
      option.fail_unknown(kFlags, "");
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
  static const std::vector<std::string> kFlags = {
      "input", "dataset", "text-field", "vocab-size", "model-type", "out"};
  TokenizerTrainArgs out;
  OptionReader option(args);
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
      option.fail_unknown(kFlags, "");
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
  static const std::vector<std::string> kFlags = {
      "input",
      "dataset",
      "text-field",
      "tokenizer",
      "tokenizer-path",
      "out",
      "tokens-per-shard"};
  DataTokenizeArgs out;
  OptionReader option(args);
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
      option.fail_unknown(kFlags, "");
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
        "; allowed: one checkpoint folder\n" + cli_usage());
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
        "baton " + group + ": expected '" + action + "', got " + got + "\n" +
        cli_usage());
  }
  return std::vector<std::string>(args.begin() + 1, args.end());
}

}  // namespace

CliArgs parse_cli(const std::vector<std::string>& args) {
  CliArgs out;
  if (args.empty() || args[0] == "--help" || args[0] == "-h" ||
      args[0] == "help") {
    out.command = "help";
    return out;
  }
  out.command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (out.command == "train") {
    out.train = parse_train(rest);
    return out;
  }
  if (out.command == "schedule") {
    out.schedule = parse_schedule(rest);
    return out;
  }
  if (out.command == "tokenizer") {
    out.command = "tokenizer train";
    out.tokenizer_train =
        parse_tokenizer_train(sub_command_args("tokenizer", "train", rest));
    return out;
  }
  if (out.command == "data") {
    out.command = "data tokenize";
    out.data_tokenize =
        parse_data_tokenize(sub_command_args("data", "tokenize", rest));
    return out;
  }
  if (out.command == "checkpoint") {
    out.command = "checkpoint inspect";
    out.checkpoint_inspect = parse_checkpoint_inspect(
        sub_command_args("checkpoint", "inspect", rest));
    return out;
  }
  std::string message = "unknown command '" + out.command + "'";
  const std::string hint = closest_match(
      out.command, {"train", "schedule", "tokenizer", "data", "checkpoint"});
  if (!hint.empty()) {
    message += "; did you mean '" + hint + "'?";
  }
  throw ConfigError(message + "\n" + cli_usage());
}

std::string cli_usage() {
  return "usage:\n"
         "  baton train --config FILE [--SECTION.KEY=VALUE ...] "
         "[--print-config]\n"
         "  baton schedule --schedule NAME --pp P [--stages-per-rank V] "
         "--microbatches M\n"
         "                 [--format text|csv|json|chrome|svg] [--comms] "
         "[--out FILE]\n"
         "                 [--costs KIND=VALUE,...]\n"
         "  baton schedule --csv FILE [--format ...] [--comms] [--out FILE]\n"
         "  baton tokenizer train --input PATH... --vocab-size N --out FILE\n"
         "                 [--dataset jsonl|text] [--text-field NAME] "
         "[--model-type bpe|unigram]\n"
         "  baton data tokenize --input PATH... --out DIR [--dataset "
         "jsonl|text]\n"
         "                 [--text-field NAME] [--tokenizer NAME] "
         "[--tokenizer-path FILE]\n"
         "                 [--tokens-per-shard N]\n"
         "  baton checkpoint inspect DIR\n"
         "\n"
         "  --config FILE         YAML job config (see configs/)\n"
         "  --SECTION.KEY=VALUE   override one config key, e.g. "
         "--training.steps=30\n"
         "  --print-config        print the effective config as YAML and exit\n"
         "  --schedule NAME       GPipe, 1F1B, Interleaved1F1B, LoopedBFS,\n"
         "                        InterleavedZeroBubble, ZBVZeroBubble, "
         "DualPipeV\n"
         "  --stages-per-rank V   default 1 for GPipe and 1F1B, else 2\n"
         "  --comms               show the schedule with sends, receives and\n"
         "                        gradient reductions\n"
         "  --costs F=1,B=2,...   simulated cost per kind (F, B, I, W, "
         "OVERLAP)\n"
         "                        and P2P latency; all 1 and P2P 0 by default\n"
         "  --input PATH          a corpus file, folder or glob (repeatable)\n"
         "  --dataset NAME        reads the inputs: jsonl (default) or text\n"
         "  --tokenizer NAME      bytes (default), sentencepiece or tiktoken\n"
         "\n"
         "exit codes: 0 success, 2 bad usage or config, 1 runtime failure\n";
}

}  // namespace baton
