#pragma once

#include <cstdint>
#include <map>
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

/// `baton schedule` arguments.
struct ScheduleArgs {
  /// A registered schedule name (empty with --csv).
  std::string schedule;
  /// Pipeline ranks.
  int64_t pp = 0;
  /// Stages per rank; 0 = the schedule's default.
  int64_t stages_per_rank = 0;
  /// Microbatches per step.
  int64_t microbatches = 0;
  /// text | csv | json | chrome | svg.
  std::string format = "text";
  /// Show the lowered schedule (with SEND / RECV / REDUCE_GRAD).
  bool comms = false;
  /// Where to write; empty = stdout.
  std::string out_path;
  /// A custom schedule to load instead of --schedule.
  std::string csv_path;
  /// Simulated cost per kind from --costs KIND=VALUE,...: keys F, B, I, W,
  /// OVERLAP (F and B together; negative = F + B) and P2P (latency).
  std::map<std::string, double> costs = {
      {"F", 1.0},
      {"B", 1.0},
      {"I", 1.0},
      {"W", 1.0},
      {"OVERLAP", -1.0},
      {"P2P", 0.0}};
};

/// The parsed command line.
struct CliArgs {
  /// "train", "schedule", or "help" for --help / no arguments.
  std::string command;
  /// Set for "train".
  TrainArgs train;
  /// Set for "schedule".
  ScheduleArgs schedule;
};

/// Parses argv[1:]. Throws ConfigError (exit code 2) for an unknown command
/// or flag, a missing value, a missing --config, or a `schedule` without
/// --schedule / --pp / --microbatches (or --csv) or with an unknown format.
CliArgs parse_cli(const std::vector<std::string>& args);

/// The usage text of `baton --help`.
std::string cli_usage();

}  // namespace baton
