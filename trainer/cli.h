#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

/// `baton train` arguments.
struct TrainArgs {
  std::string config_path;
  /// "section.key=value", in command-line order.
  std::vector<std::string> overrides;
  bool print_config = false;
  /// Local ranks to launch; 0 = this process is one rank.
  int64_t nproc = 0;
};

/// The parsed command line.
struct CliArgs {
  /// "train", or "help" for --help / no arguments.
  std::string command;
  TrainArgs train;
};

/// Parses argv[1:]. Throws ConfigError (exit code 2) for an unknown command
/// or flag, a missing value or a missing --config.
CliArgs parse_cli(const std::vector<std::string>& args);

/// The usage text of `baton --help`.
std::string cli_usage();

}  // namespace baton
