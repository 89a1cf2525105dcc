#include "trainer/cli.h"

#include "common/error.h"
#include "common/text.h"

namespace baton {

namespace {

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

TrainArgs parse_train(const std::vector<std::string>& args) {
  TrainArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      throw ConfigError(
          "unexpected argument '" + arg + "'; options start with --\n" +
          cli_usage());
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    // Flags that take a value accept both --flag=value and --flag value.
    const auto take_value = [&]() {
      if (has_value) {
        return value;
      }
      if (i + 1 >= args.size()) {
        throw ConfigError("--" + name + " needs a value");
      }
      return args[++i];
    };
    if (name == "config") {
      out.config_path = take_value();
    } else if (name == "print-config" && !has_value) {
      out.print_config = true;
    } else if (name == "nproc") {
      out.nproc = parse_count("--nproc", take_value());
    } else if (name.find('.') != std::string::npos || name == "builder") {
      out.overrides.push_back(name + "=" + take_value());
    } else {
      std::string message = "unknown option '--" + name + "'";
      const std::string hint =
          closest_match(name, {"config", "print-config", "nproc", "builder"});
      if (!hint.empty()) {
        message += "; did you mean '--" + hint + "'?";
      } else {
        message += "; config overrides are written --SECTION.KEY=VALUE";
      }
      throw ConfigError(message);
    }
  }
  if (out.config_path.empty()) {
    throw ConfigError("baton train: --config FILE is required");
  }
  return out;
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
  std::string message = "unknown command '" + out.command + "'";
  const std::string hint = closest_match(out.command, {"train", "schedule"});
  if (!hint.empty()) {
    message += "; did you mean '" + hint + "'?";
  }
  throw ConfigError(message + "\n" + cli_usage());
}

std::string cli_usage() {
  return "usage:\n"
         "  baton train --config FILE [--SECTION.KEY=VALUE ...] "
         "[--print-config]\n"
         "\n"
         "  --config FILE         YAML job config (see configs/)\n"
         "  --SECTION.KEY=VALUE   override one config key, e.g. "
         "--training.steps=30\n"
         "  --print-config        print the effective config as YAML and exit\n"
         "\n"
         "exit codes: 0 success, 2 bad usage or config, 1 runtime failure\n";
}

}  // namespace baton
