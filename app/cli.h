#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel/dist/launcher.h"

namespace baton {

/// `baton train` arguments.
struct TrainArgs {
  /// --config files in order; later files override earlier ones key by key.
  std::vector<std::string> config_paths;
  /// "section.key=value", in command-line order.
  std::vector<std::string> overrides;
  /// --plugin files, loaded before the config's `plugins:`.
  std::vector<std::string> plugins;
  bool print_config = false;
  /// --dry-run: "" (train), "text" or "json" (print each rank's footprint
  /// for the world size and exit).
  std::string dry_run;
  /// --device with --dry-run: "cpu" or "cuda", the device the run would
  /// compute on; "": this machine's.
  std::string device;
  /// Local ranks to launch; 0 = this process is one rank.
  int64_t nproc = 0;
  /// With nproc: how many times every rank is restarted after one fails.
  int64_t max_restarts = 0;
  /// With nproc: where the ranks may run (--cpu-bind).
  dist::CpuBind cpu_bind = dist::CpuBind::kNone;
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

/// `baton plan` arguments.
struct PlanArgs {
  /// --config files in order, as for train.
  std::vector<std::string> config_paths;
  /// "section.key=value", in command-line order.
  std::vector<std::string> overrides;
  /// --plugin files, as for train.
  std::vector<std::string> plugins;
  /// The world size to plan for.
  int64_t nproc = 0;
  /// The cap per rank in GiB; 0 = the cost file's, else none.
  double memory_per_rank_gib = 0.0;
  /// The cost file (docs/plan.md).
  std::string costs_path;
  /// Candidates the table shows.
  int64_t top = 10;
  /// The fastest pipelined layouts a schedule is synthesised for; 0: none.
  int64_t synthesize = 8;
  /// Predictions within this many percent of the fastest rank simplest
  /// first (PlanOptions::tolerance); 0: by prediction alone.
  double tolerance_percent = 2.0;
  /// Where plan.yaml, schedule.svg and plan.txt go; empty = none written.
  std::string out_dir;
  /// Sequences per step over the data-parallel ranks; 0 = the config's
  /// local_batch_size x its data-parallel ranks (world over pp and the
  /// degrees of the axes that split the blocks).
  int64_t global_batch = 0;
  /// With --write-costs-from-flops: the cost file to write instead of
  /// planning, from the model's FLOPs, --peak-tflops and --efficiency.
  std::string write_costs_path;
  double peak_tflops = 989.0;
  double efficiency = 0.4;
  /// With --write-costs: profile on this machine, write this cost file and
  /// stop (without --costs the profile runs anyway and the plan follows).
  std::string profile_path;
  /// Timed runs per profile measurement.
  int64_t profile_repeats = 5;
  /// Where the profile's ranks may run (--cpu-bind): as the runs planned
  /// for will be launched. Not given: both ways where this machine has a
  /// core for each rank, and the plan chooses.
  std::optional<dist::CpuBind> cpu_bind;
  /// Internal: set on the ranks the profile launches (--profile-rank FILE),
  /// where rank 0 writes the costs.
  std::string profile_rank_path;
  /// Internal: how many of those ranks time the compute.
  int64_t profile_compute_ranks = 0;
};

/// `baton tokenizer train` arguments.
struct TokenizerTrainArgs {
  /// Corpus files, folders or globs (--input, repeatable).
  std::vector<std::string> inputs;
  /// Registered dataset that reads them (jsonl, text, ...); empty = each
  /// input's by its name (dataset_for_path).
  std::string dataset;
  /// JSON Lines field with the text.
  std::string text_field = "text";
  /// Pieces in the model.
  int64_t vocab_size = 0;
  /// bpe or unigram.
  std::string model_type = "bpe";
  /// The .model file to write.
  std::string out_path;
};

/// `baton data tokenize` arguments.
struct DataTokenizeArgs {
  /// Corpus files, folders or globs (--input, repeatable).
  std::vector<std::string> inputs;
  /// As TokenizerTrainArgs::dataset.
  std::string dataset;
  std::string text_field = "text";
  /// Registered tokenizer and its file.
  std::string tokenizer = "bytes";
  std::string tokenizer_path;
  /// Folder for the shards.
  std::string out_dir;
  /// A new shard starts once one holds this many tokens.
  int64_t tokens_per_shard = int64_t{1} << 28;
};

/// `baton checkpoint inspect` arguments.
struct CheckpointInspectArgs {
  /// A checkpoint folder (a run's checkpoint/) or one step-N folder.
  std::string dir;
  /// --tensors: every tensor, not only each step's summary.
  bool tensors = false;
};

/// `baton generate` arguments.
struct GenerateArgs {
  /// A Baton checkpoint folder (or step folder), or a Hugging Face folder:
  /// exactly one.
  std::string checkpoint;
  std::string hf;
  std::string prompt;
  bool has_prompt = false;
  int64_t max_new_tokens = 64;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  /// "cpu" or "cuda".
  std::string device = "cpu";
  /// "float32" or "bfloat16".
  std::string dtype = "float32";
  /// Overrides of what the checkpoint says its tokenizer is.
  std::string tokenizer;
  std::string tokenizer_path;
  /// --plugin files (a model family or tokenizer of a plugin's).
  std::vector<std::string> plugins;
};

/// One option of a command, as its --help shows it.
struct OptionUsage {
  /// The name the parser matches, without `--` ("config"); empty for what
  /// the parser matches by shape (--SECTION.KEY=VALUE, a positional DIR).
  std::string name;
  /// The left column: "--config FILE".
  std::string form;
  /// One line.
  std::string help;
};

/// A command's usage: what `baton COMMAND --help` prints.
struct CommandUsage {
  /// "train", "tokenizer train", ...
  std::string command;
  /// What it does, one line.
  std::string summary;
  /// Synopsis lines, each starting `baton COMMAND`; continuation lines
  /// start with spaces.
  std::vector<std::string> synopsis;
  std::vector<OptionUsage> options;
};

/// Every command's usage, in the order `baton --help` lists them. The
/// parsers' "did you mean" hints come from the same table.
const std::vector<CommandUsage>& cli_commands();

/// The parsed command line.
struct CliArgs {
  /// "train", "schedule", "plan", "tokenizer train", "data tokenize",
  /// "checkpoint inspect", "generate", "version" for --version / `version`,
  /// or "help" for --help / -h / `help` / no arguments.
  std::string command;
  /// With "help": no arguments at all (the usage goes to stderr, exit 2).
  bool bare = false;
  /// With "help": the command whose usage to print; empty = baton's own.
  std::string help_topic;
  /// Set for "train".
  TrainArgs train;
  /// Set for "schedule".
  ScheduleArgs schedule;
  /// Set for "plan".
  PlanArgs plan;
  /// Set for "tokenizer train".
  TokenizerTrainArgs tokenizer_train;
  /// Set for "data tokenize".
  DataTokenizeArgs data_tokenize;
  /// Set for "checkpoint inspect".
  CheckpointInspectArgs checkpoint_inspect;
  /// Set for "generate".
  GenerateArgs generate;
};

/// Parses argv[1:]. `--help` or `-h` anywhere after a command (`baton
/// tokenizer --help` too), or `baton help COMMAND`, asks for that command's
/// usage, whatever else is given. Throws ConfigError (exit code 2) for an
/// unknown command or flag (the message points at the command's --help), a
/// missing value, a missing --config, a `schedule` without --schedule /
/// --pp / --microbatches (or --csv) or with an unknown format, or a
/// `tokenizer train` / `data tokenize` without --input or --out, or a
/// `checkpoint inspect` without exactly one folder.
CliArgs parse_cli(const std::vector<std::string>& args);

/// The usage text of `baton --help`: every command's synopsis.
std::string cli_usage();

/// The usage text of `baton COMMAND --help`: its synopsis and one line per
/// option. Throws std::invalid_argument for a command not in
/// cli_commands().
std::string command_usage(const std::string& command);

}  // namespace baton
