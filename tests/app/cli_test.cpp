// Runs the `baton` executable as a user would and checks exit codes and
// messages.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "app/cli.h"
#include "common/error.h"
#include "common/version.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

using Result = testing::BinaryResult;

Result run_baton(const std::string& args) {
  return testing::run_command(testing::baton_bin() + " " + args);
}

fs::path source_dir() {
  // Tests run in the build tree; the configs live in the source tree.
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string debug_config() {
  return (source_dir() / "configs" / "debug_model.yaml").string();
}

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, HelpExitsZero) {
  const auto r = run_baton("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("baton train --config FILE"), std::string::npos);
}

// stdout alone, as written: stderr goes to /dev/null inside the subshell.
Result run_baton_stdout(const std::string& args) {
  return testing::run_command_raw(
      "(" + testing::baton_bin() + " " + args + " 2>/dev/null)");
}

TEST(Cli, BareBatonPrintsTheUsageToStderrAndExitsTwo) {
  const auto both = testing::run_command_raw(testing::baton_bin());
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_EQ(both.output, cli_usage());
  EXPECT_EQ(run_baton_stdout("").output, "");
}

TEST(Cli, VersionNamesBatonItsCommitLibtorchCudaAndBlas) {
  for (const std::string& form : {"--version", "version"}) {
    const auto r = run_baton_stdout(form);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(
        r.output.rfind(std::string("baton ") + kVersion + " (commit ", 0), 0u)
        << r.output;
    EXPECT_NE(
        r.output.find(
            "\nlibtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
            std::to_string(TORCH_VERSION_MINOR) + "." +
            std::to_string(TORCH_VERSION_PATCH) + "\n"),
        std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("\nCUDA"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\nBLAS: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\nCPU attention kernel: "), std::string::npos)
        << r.output;
  }
  // The commit is one of this checkout's (the one the binary was built
  // from, which a later commit leaves behind until the next build).
  const std::string version = run_baton_stdout("--version").output;
  const size_t at = version.find("(commit ") + 8;
  const std::string commit = version.substr(at, 12);
  if (testing::run_command(
          "git -C " + source_dir().string() + " rev-parse HEAD")
          .code == 0) {
    EXPECT_EQ(
        testing::run_command(
            "git -C " + source_dir().string() + " cat-file -e " + commit +
            "^{commit}")
            .code,
        0)
        << version;
  }
  const auto extra = run_baton("--version now");
  EXPECT_EQ(extra.code, 2) << extra.output;
  EXPECT_NE(extra.output.find("takes no arguments"), std::string::npos)
      << extra.output;
}

TEST(Cli, HelpOnEveryCommandPrintsItsOptionsAndExitsZero) {
  const auto top = run_baton_stdout("--help");
  EXPECT_EQ(top.code, 0);
  EXPECT_EQ(top.output, cli_usage());
  EXPECT_EQ(run_baton_stdout("-h").output, cli_usage());
  EXPECT_EQ(run_baton_stdout("help").output, cli_usage());
  for (const CommandUsage& usage : cli_commands()) {
    const std::string& command = usage.command;
    const std::string text = command_usage(command);
    EXPECT_EQ(text.rfind("usage: baton " + command, 0), 0u) << text;
    EXPECT_NE(top.output.find("  " + command + " "), std::string::npos)
        << command;
    // One line per option, within 80 columns.
    for (const OptionUsage& option : usage.options) {
      EXPECT_NE(text.find("\n  " + option.form), std::string::npos)
          << command << ": " << option.form << "\n"
          << text;
    }
    for (size_t begin = 0, end; begin < text.size(); begin = end + 1) {
      end = text.find('\n', begin);
      EXPECT_LE(end - begin, 80u) << text.substr(begin, end - begin);
    }
    const std::string group = command.substr(0, command.find(' '));
    for (const std::string& args :
         {command + " --help",
          command + " -h",
          group + " --help",
          "help " + group,
          // Help wins over whatever else is given, even a bad option.
          command + " --bogus=1 --help"}) {
      const auto r = run_baton_stdout(args);
      EXPECT_EQ(r.code, 0) << args;
      EXPECT_EQ(r.output, text) << args;
    }
  }
  const auto r = run_baton("help bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: unknown command 'bogus'; allowed: train, schedule, plan, "
          "tokenizer, data, checkpoint, generate (see 'baton --help')",
          0),
      0u)
      << r.output;
}

TEST(Cli, EveryOptionTheHelpListsIsParsed) {
  // The usage table drives the "did you mean" hints; each option it names
  // must be one its command's parser knows.
  for (const CommandUsage& usage : cli_commands()) {
    std::vector<std::string> args;
    for (size_t begin = 0, end; begin <= usage.command.size();
         begin = end + 1) {
      end = std::min(usage.command.find(' ', begin), usage.command.size());
      args.push_back(usage.command.substr(begin, end - begin));
    }
    for (const OptionUsage& option : usage.options) {
      if (option.name.empty()) {
        continue;
      }
      std::vector<std::string> line = args;
      line.push_back("--" + option.name);
      line.push_back("1");
      try {
        parse_cli(line);
      } catch (const ConfigError& e) {
        EXPECT_EQ(
            std::string(e.what()).find("unknown option"), std::string::npos)
            << usage.command << " --" << option.name << ": " << e.what();
      }
    }
  }
}

TEST(Cli, TrainTakesSeveralConfigsAndPlanItsOptions) {
  const CliArgs train =
      parse_cli({"train", "--config", "a.yaml", "--config=b.yaml"});
  EXPECT_EQ(
      train.train.config_paths, (std::vector<std::string>{"a.yaml", "b.yaml"}));
  const CliArgs plan = parse_cli(
      {"plan",
       "--config",
       "a.yaml",
       "--nproc",
       "512",
       "--costs",
       "c.json",
       "--memory-per-rank",
       "80",
       "--top",
       "5",
       "--out",
       "dir",
       "--synthesize",
       "3",
       "--training.seq_len=128"});
  EXPECT_EQ(plan.command, "plan");
  EXPECT_EQ(plan.plan.nproc, 512);
  EXPECT_EQ(plan.plan.costs_path, "c.json");
  EXPECT_EQ(plan.plan.memory_per_rank_gib, 80.0);
  EXPECT_EQ(plan.plan.top, 5);
  EXPECT_EQ(plan.plan.out_dir, "dir");
  EXPECT_EQ(plan.plan.synthesize, 3);
  EXPECT_EQ(
      parse_cli({"plan", "--config", "a", "--nproc", "2", "--synthesize", "0"})
          .plan.synthesize,
      0);
  EXPECT_EQ(
      parse_cli({"plan", "--config", "a", "--nproc", "2"}).plan.synthesize, 8);
  EXPECT_THROW(
      parse_cli({"plan", "--config", "a", "--nproc", "2", "--synthesize", "x"}),
      ConfigError);
  EXPECT_EQ(
      plan.plan.overrides, (std::vector<std::string>{"training.seq_len=128"}));
  EXPECT_THROW(
      parse_cli({"plan", "--config", "a.yaml", "--costs", "c.json"}),
      ConfigError);
  EXPECT_THROW(
      parse_cli(
          {"plan",
           "--config",
           "a.yaml",
           "--nproc",
           "2",
           "--costs",
           "c",
           "--memory-per-rank",
           "-1"}),
      ConfigError);
}

/// What parse_cli refuses `line` with, or "no error".
std::string message(const std::vector<std::string>& line) {
  try {
    parse_cli(line);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Cli, EveryFormOfAnOptionReadsTheSame) {
  // --name value, --name=value; overrides in both forms, in order.
  const CliArgs a = parse_cli(
      {"train",
       "--config",
       "a.yaml",
       "--training.steps",
       "3",
       "--nproc=2",
       "--training.seq_len=64",
       "--log-level",
       "progress",
       "--dry-run",
       "json"});
  EXPECT_EQ(a.train.nproc, 2);
  EXPECT_EQ(a.train.dry_run, "json");
  EXPECT_EQ(
      a.train.overrides,
      (std::vector<std::string>{
          "training.steps=3",
          "training.seq_len=64",
          "metrics.log_level=progress"}));
  EXPECT_EQ(
      parse_cli({"train", "--config", "a", "--dry-run"}).train.dry_run, "text");
  EXPECT_EQ(
      parse_cli({"checkpoint", "inspect", "--tensors", "run/checkpoint"})
          .checkpoint_inspect.dir,
      "run/checkpoint");
  // A later word that names another command is not one: a folder called
  // "train" is a folder, a stray "plan" an error.
  EXPECT_EQ(
      parse_cli({"checkpoint", "inspect", "train"}).checkpoint_inspect.dir,
      "train");
  EXPECT_EQ(
      message({"train", "--config", "a", "plan"}),
      "baton train: unexpected argument 'plan'; options start with -- (see "
      "'baton train --help')");
  EXPECT_EQ(message({"train", "--config"}), "--config needs a value");
  EXPECT_EQ(
      message({"train", "--config", "a", "--training.steps"}),
      "--training.steps needs a value");
  EXPECT_EQ(
      message({"checkpoint", "inspect", "--tensor", "d"}),
      "unknown option '--tensor'; did you mean '--tensors'? (see 'baton "
      "checkpoint inspect --help')");
  EXPECT_EQ(
      message(
          {"generate", "--checkpoint", "c", "--prompt", "p", "--seed", "-1"}),
      "--seed: '-1' is not allowed; allowed: an integer >= 0");
}

TEST(Cli, CpuBindIsForTheRanksALaunchStarts) {
  EXPECT_EQ(
      parse_cli(
          {"train", "--config", "a", "--nproc", "2", "--cpu-bind", "cores"})
          .train.cpu_bind,
      dist::CpuBind::kCores);
  EXPECT_EQ(
      parse_cli({"train", "--config", "a", "--nproc", "2"}).train.cpu_bind,
      dist::CpuBind::kNone);
  EXPECT_EQ(
      parse_cli({"plan", "--config", "a", "--nproc", "2", "--cpu-bind=cores"})
          .plan.cpu_bind,
      dist::CpuBind::kCores);
  // Without --nproc nothing is launched to bind.
  EXPECT_NE(
      message({"train", "--config", "a", "--cpu-bind", "cores"})
          .find("--cpu-bind: needs --nproc N"),
      std::string::npos);
  EXPECT_NE(
      message(
          {"train", "--config", "a", "--nproc", "2", "--cpu-bind", "sockets"})
          .find("--cpu-bind sockets: unknown binding; allowed: none, cores"),
      std::string::npos);
  // Planning from a cost file profiles nothing.
  EXPECT_NE(
      message({"plan",
               "--config",
               "a",
               "--nproc",
               "2",
               "--costs",
               "c.json",
               "--cpu-bind",
               "cores"})
          .find("nothing is profiled"),
      std::string::npos);
  // Exit 2 from the binary, before any rank starts.
  const auto r =
      run_baton("train --config " + debug_config() + " --cpu-bind cores");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--cpu-bind: needs --nproc N"), std::string::npos)
      << r.output;
}

TEST(Cli, UnknownOptionsExitTwoPointingAtTheCommandsHelp) {
  auto r = run_baton("train --config " + debug_config() + " --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: unknown option '--bogus'; config overrides are written "
          "--SECTION.KEY=VALUE (see 'baton train --help')",
          0),
      0u)
      << r.output;
  r = run_baton("schedule --schedule gpipe --pp 2 --microbatchs 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: unknown option '--microbatchs'; did you mean "
          "'--microbatches'? (see 'baton schedule --help')",
          0),
      0u)
      << r.output;
  r = run_baton("schedule stray");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: baton schedule: unexpected argument 'stray'; options start "
          "with -- (see 'baton schedule --help')",
          0),
      0u)
      << r.output;
  r = run_baton("checkpoint inspect");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("allowed: one checkpoint folder (see 'baton checkpoint "
                    "inspect --help')"),
      std::string::npos)
      << r.output;
}

TEST(Cli, UnknownCommandIsUsageError) {
  const auto r = run_baton("trian");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: unknown command 'trian'; did you mean 'train'?", 0),
      0u)
      << r.output;
}

TEST(Cli, MissingConfigAndUnknownOptionAreUsageErrors) {
  auto r = run_baton("train");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("error: baton train: --config FILE is required"),
      std::string::npos);
  r = run_baton("train --config " + debug_config() + " --print-confg");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("did you mean '--print-config'?"), std::string::npos)
      << r.output;
}

TEST(Cli, BadConfigFileExitsTwoNamingFileLineAndKey) {
  const auto path = write_file(
      "cli_bad.yaml", "model:\n  flavor: debugmodel\ntraining:\n  stpes: 3\n");
  const auto r = run_baton("train --config " + path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: " + path.string() +
              ":4: unknown key 'training.stpes'; did you mean "
              "'training.steps'?",
          0),
      0u)
      << r.output;
}

TEST(Cli, BadOverrideExitsTwo) {
  auto r =
      run_baton("train --config " + debug_config() + " --training.seq_len=-3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("error: --training.seq_len=-3: training.seq_len: -3 is out "
                    "of range; allowed: an integer >= 1"),
      std::string::npos)
      << r.output;
  // Three tp ranks do not split the debug model's 16 heads: every rank
  // refuses at the tensor_parallel step, naming the key.
  r = run_baton(
      "train --nproc 3 --config " + debug_config() +
      " --parallelism.tensor_parallel_degree=3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("parallelism.tensor_parallel_degree: 3 does not divide "
                    "the model's n_heads (16)"),
      std::string::npos)
      << r.output;
  r = run_baton(
      "train --config " + debug_config() +
      " --training.mixed_precision_param=half");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("error: --training.mixed_precision_param=half: "
                    "training.mixed_precision_param: 'half' is not allowed"),
      std::string::npos)
      << r.output;
}

TEST(Cli, NcclWithoutCudaIsAConfigError) {
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --comm.backend=nccl --metrics.peak_tflops=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("comm.backend: nccl needs CUDA tensors"), std::string::npos)
      << r.output;
}

TEST(Cli, UnknownModelFlavorExitsTwoWithItsLine) {
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --model.flavor=debugmodle --metrics.peak_tflops=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find(
          "error: --model.flavor=debugmodle: unknown flavor 'debugmodle'"),
      std::string::npos)
      << r.output;
}

/// The `error: ...` line of `output` ("" when it has none).
std::string error_line(const std::string& output) {
  const size_t at = output.find("error: ");
  return at == std::string::npos
             ? ""
             : output.substr(at, output.find('\n', at) - at);
}

TEST(Cli, PrintConfigDryRunAndTrainRefuseTheSameConfigs) {
  const std::string base =
      " --config " + debug_config() +
      " --training.steps=1 --checkpoint.enable=false"
      " --job.dump_folder=" +
      (fs::path(::testing::TempDir()) / "one_check").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model.flavor=huge", "unknown flavor 'huge'"},
      {"--builder=mine", "unknown builder 'mine'"},
      {"--parallelism.appliers=[fully_shard]",
       "'fully_shard' is a step the builder places itself"},
      {"--parallelism.appliers=[nothing]", "nothing"}};
  for (const auto& [override_, cause] : cases) {
    SCOPED_TRACE(override_);
    std::vector<std::string> errors;
    for (const std::string& mode : {" --print-config", " --dry-run", ""}) {
      const auto r = run_baton("train" + base + " " + override_ + mode);
      EXPECT_EQ(r.code, 2) << mode << "\n" << r.output;
      errors.push_back(error_line(r.output));
      EXPECT_NE(errors.back().find(cause), std::string::npos) << mode << "\n"
                                                              << r.output;
    }
    EXPECT_EQ(errors[0], errors[1]);
    EXPECT_EQ(errors[1], errors[2]);
  }
}

TEST(Cli, PrintConfigShowsTheEffectiveConfig) {
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --training.steps=42 --print-config");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("steps: 42"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("flavor: debugmodel"), std::string::npos);
  // What it prints loads back.
  const auto path = write_file("cli_printed.yaml", r.output);
  const auto again =
      run_baton("train --config " + path.string() + " --print-config");
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(again.output, r.output);
}

TEST(Cli, RuntimeFailureExitsOne) {
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --training.dataset_path=/nonexistent/corpus.jsonl "
      "--metrics.peak_tflops=1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos);
  EXPECT_NE(r.output.find("/nonexistent/corpus.jsonl"), std::string::npos)
      << r.output;
}

TEST(Cli, TrainsTheDebugModelAndWritesEveryMetricsKey) {
  const fs::path dump = fs::path(::testing::TempDir()) / "cli_train_run";
  fs::remove_all(dump);
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --job.dump_folder=" + dump.string() +
      " --training.steps=30 --training.seq_len=64 --training.local_batch_size=4"
      " --metrics.log_freq=5 --training.num_threads=1"
      " --training.mixed_precision_param=float32");
  ASSERT_EQ(r.code, 0) << r.output;
  // MFU's peak names where it came from (the CPU: a probe in the compute
  // dtype); the BLAS line names the library serving the products.
  EXPECT_NE(
      r.output.find("mfu: against a float32 matmul probe on the CPU, "),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("blas: "), std::string::npos) << r.output;
  // Each step line says how far the run is and, from the second logged
  // line on, the time left.
  EXPECT_NE(r.output.find("step  1/30  loss "), std::string::npos) << r.output;
  const size_t fifth = r.output.find("step  5/30  loss ");
  ASSERT_NE(fifth, std::string::npos) << r.output;
  const std::string line =
      r.output.substr(fifth, r.output.find('\n', fifth) - fifth);
  EXPECT_NE(line.find(" MiB  eta "), std::string::npos) << line;
  const size_t last_line = r.output.find("step 30/30  loss ");
  ASSERT_NE(last_line, std::string::npos) << r.output;
  EXPECT_EQ(
      r.output.substr(last_line, r.output.find('\n', last_line) - last_line)
          .find("eta"),
      std::string::npos)
      << r.output;
#if defined(__x86_64__)
  EXPECT_NE(r.output.find("Math Kernel Library"), std::string::npos)
      << r.output;
#endif
  std::ifstream in(dump / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 7u);  // step 1, then every 5 steps
  for (const auto& j : lines) {
    for (const char* key :
         {"step",
          "loss",
          "grad_norm",
          "lr",
          "tokens_per_sec",
          "tflops",
          "mfu_pct",
          "step_time_s",
          "data_time_s",
          "peak_rss_mib",
          "tensor_peak_mib",
          "activation_peak_mib"}) {
      ASSERT_TRUE(j.contains(key)) << key;
      EXPECT_TRUE(j[key].is_number()) << key;
    }
    EXPECT_GT(j["tokens_per_sec"].get<double>(), 0.0);
    EXPECT_GT(j["mfu_pct"].get<double>(), 0.0);
    EXPECT_GT(j["peak_rss_mib"].get<double>(), 0.0);
    EXPECT_GT(j["activation_peak_mib"].get<double>(), 0.0);
    EXPECT_GT(
        j["tensor_peak_mib"].get<double>(),
        j["activation_peak_mib"].get<double>());
  }
  EXPECT_EQ(lines.front()["step"], 1);
  EXPECT_EQ(lines.back()["step"], 30);
  const double first = lines.front()["loss"], last = lines.back()["loss"];
  EXPECT_NEAR(first, std::log(258.0), 0.6);  // about uniform over 258 ids
  EXPECT_LT(last, first - 1.5) << "the loss should fall clearly";
}

TEST(Cli, ActivationCheckpointingLowersTheActivationPeak) {
  // One process per mode, as a rank is: the same losses, and full
  // checkpointing holds well under half of the step's peak (the debug
  // model at seq 512: the blocks' activations dominate the step's, its 20
  // MiB of gradients included).
  std::map<std::string, nlohmann::json> last;
  for (const std::string mode : {"none", "full"}) {
    const fs::path dump = fs::path(::testing::TempDir()) / ("cli_ac_" + mode);
    fs::remove_all(dump);
    const auto r = run_baton(
        "train --config " + debug_config() +
        " --job.dump_folder=" + dump.string() +
        " --training.steps=2 --lr_scheduler.warmup_steps=1"
        " --training.seq_len=512 --training.local_batch_size=2"
        " --metrics.log_freq=1 --metrics.peak_tflops=1"
        " --training.mixed_precision_param=float32"
        " --training.num_threads=1 --activation_checkpoint.mode=" +
        mode);
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream in(dump / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      last[mode] = nlohmann::json::parse(line);
    }
    if (mode == "full") {
      EXPECT_NE(r.output.find("activation checkpoint: full"), std::string::npos)
          << r.output;
    }
  }
  EXPECT_EQ(last["full"]["loss"], last["none"]["loss"]);
  EXPECT_LT(
      last["full"]["activation_peak_mib"].get<double>(),
      0.5 * last["none"]["activation_peak_mib"].get<double>());
}

TEST(Cli, AWarmupLongerThanTheRunWarnsOnceAndTrains) {
  // The first thing a new user tries: five steps of a config whose warmup
  // is ten. torchtitan warns and goes on; every step warms up at the
  // configured slope, step s at s / 10 of optimizer.lr (3e-3).
  const fs::path dump = testing::fresh_dir("cli_short_warmup");
  const auto r = run_baton(
      "train --config " + debug_config() +
      " --job.dump_folder=" + dump.string() +
      " --training.steps=5 --training.seq_len=32"
      " --training.local_batch_size=2 --metrics.log_freq=1"
      " --metrics.peak_tflops=1 --training.mixed_precision_param=float32");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string warning =
      "lr_scheduler.warmup_steps: 10 exceeds training.steps 5";
  const size_t at = r.output.find(warning);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(warning, at + 1), std::string::npos) << r.output;
  // glog's warning line, naming where warmup_steps was set.
  EXPECT_NE(
      r.output.find(debug_config() + ":21: " + warning), std::string::npos)
      << r.output;
  const auto lines = testing::read_metrics(dump);
  ASSERT_EQ(lines.size(), 5u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_NEAR(
        lines[i]["lr"].get<double>(),
        3e-3 * static_cast<double>(i + 1) / 10.0,
        1e-12)
        << "step " << i + 1;
  }
}

// With several intra-op threads and OMP_WAIT_POLICY unset, `baton train`
// starts itself again with PASSIVE (common/threads.h). libgomp reports what
// it read at load time (OMP_DISPLAY_ENV): GOMP_SPINCOUNT 300000 for the
// unset default, 0 for PASSIVE; the runtime's log line names the policy as
// the process that trained saw it.
TEST(Cli, RestartsWithPassiveWaitsUnlessTheUserChose) {
  const std::string train =
      " train --config " + debug_config() +
      " --training.steps=1 --lr_scheduler.warmup_steps=1"
      " --training.seq_len=32"
      " --training.local_batch_size=2 --metrics.peak_tflops=1"
      " --metrics.jsonl=false --job.dump_folder=" +
      (fs::path(::testing::TempDir()) / "cli_omp").string();
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  // Runs with `env` prefixed and `threads` intra-op threads; checks it
  // trained, how many times libgomp started, and the runtime's log of the
  // policy.
  const auto run = [&](const std::string& env,
                       int threads,
                       size_t starts,
                       const std::string& policy) {
    const auto r = testing::run_command(
        "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=VERBOSE " +
        env + testing::baton_bin() + train +
        " --training.num_threads=" + std::to_string(threads));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(count(r.output, "GOMP_SPINCOUNT"), starts) << r.output;
    EXPECT_NE(
        r.output.find(
            std::to_string(threads) +
            " intra-op threads (OMP_WAIT_POLICY=" + policy + "), device"),
        std::string::npos)
        << r.output;
    return r.output;
  };
  // Unset, 2 threads: the first process saw the spinning default, the
  // restarted one PASSIVE.
  auto out = run("", 2, 2, "PASSIVE");
  EXPECT_EQ(count(out, "GOMP_SPINCOUNT = '300000'"), 1u) << out;
  EXPECT_EQ(count(out, "GOMP_SPINCOUNT = '0'"), 1u) << out;
  // One thread: nothing spins beside it, no restart.
  run("", 1, 1, "unset");
  // The user's choice stands.
  out = run("OMP_WAIT_POLICY=ACTIVE ", 2, 1, "ACTIVE");
  EXPECT_NE(out.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << out;
}

// --- tokenizer train / data tokenize -----------------------------------------

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir;
}

TEST(CliData, UsageErrorsExitTwo) {
  auto r = run_baton("data tokenize --inptu x.jsonl --out d");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.output.rfind(
          "error: unknown option '--inptu'; did you mean '--input'?", 0),
      0u)
      << r.output;
  r = run_baton("data tokenise --input x.jsonl");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("error: baton data: expected 'tokenize', got 'tokenise'"),
      std::string::npos)
      << r.output;
  r = run_baton("data tokenize --input x.jsonl");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("error: baton data tokenize: --out DIR is required"),
      std::string::npos)
      << r.output;
  r = run_baton("data tokenize --input x.jsonl --out d --tokenizer wordpiece");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("--tokenizer: unknown tokenizer 'wordpiece'"),
      std::string::npos)
      << r.output;
  r = run_baton("tokenizer train --input x.jsonl --out m.model");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--vocab-size N is required"), std::string::npos)
      << r.output;
  r = run_baton("tokenizer train --input x --vocab-size 100 --out m.model");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("--vocab-size: 100 is not allowed; allowed: an integer >= "
                    "260"),
      std::string::npos)
      << r.output;
  r = run_baton(
      "tokenizer train --input x --vocab-size 300 --out m --model-type "
      "wordpiece");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("allowed: bpe, unigram"), std::string::npos)
      << r.output;
}

TEST(CliData, InputsAreReadByTheirNamesUnlessTheDatasetIsNamed) {
  // A plain-text corpus (one document per .txt file), as a new user has.
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += "In the beginning was the word, and the word was plain text.\n";
  }
  const fs::path work = testing::fresh_dir("cli_by_name");
  fs::create_directories(work);
  const auto corpus = work / "corpus.txt";
  std::ofstream(corpus) << text;
  const std::string model = (work / "m.model").string();
  auto r = run_baton(
      "tokenizer train --input " + corpus.string() +
      " --vocab-size 320 --out " + model);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("pieces on 1 documents"), std::string::npos)
      << r.output;
  r = run_baton(
      "data tokenize --input " + corpus.string() + " --out " +
      (work / "shards").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 1 documents"), std::string::npos) << r.output;
  // A named dataset is what reads it: the text is not JSON.
  r = run_baton(
      "tokenizer train --input " + corpus.string() +
      " --dataset jsonl --vocab-size 320 --out " + model);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find("[JsonlDataset] " + corpus.string() + ":1:"),
      std::string::npos)
      << r.output;
  // A name that says nothing: exit 2 naming the file and the endings.
  const auto notes = work / "corpus.md";
  std::ofstream(notes) << text;
  r = run_baton(
      "tokenizer train --input " + corpus.string() + " --input " +
      notes.string() + " --vocab-size 320 --out " + model);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(
      r.output.rfind(
          "error: --input: '" + notes.string() +
              "': cannot tell its format from its name; allowed: a folder, "
              "*.txt (text), *.txt.gz (text), *.jsonl (jsonl), *.jsonl.gz "
              "(jsonl); or name the dataset",
          0),
      0u)
      << r.output;
  r = run_baton(
      "tokenizer train --input " + notes.string() +
      " --dataset text --vocab-size 320 --out " + model);
  EXPECT_EQ(r.code, 0) << r.output;
  // Training: debug_model.yaml's `kjv` pointed at the .txt reads it as text.
  r = run_baton(
      "train --config " + debug_config() +
      " --training.dataset_path=" + corpus.string() +
      " --training.steps=1 --lr_scheduler.warmup_steps=0"
      " --training.seq_len=32 --training.local_batch_size=2"
      " --metrics.peak_tflops=1 --job.dump_folder=" +
      (work / "out").string());
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(CliData, BadDataExitsOneNamingFileAndLine) {
  const auto bad = write_file(
      "cli_bad.jsonl", "{\"text\": \"fine\"}\n{\"txt\": \"typo\"}\n");
  const auto r = run_baton(
      "data tokenize --input " + bad.string() + " --out " +
      fresh_dir("cli_bad_shards").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find(
          "error: [JsonlDataset] " + bad.string() + ":2: missing field 'text'"),
      std::string::npos)
      << r.output;
}

TEST(CliData, TokenizesTrainsAndRejectsAMismatchedTokenizer) {
  // A SentencePiece model trained on the bundled corpus, its shards, and a
  // training run on them with the wrong tokenizer.
  const fs::path work = fresh_dir("cli_data_run");
  fs::create_directories(work);
  const std::string model = (work / "kjv.model").string();
  const std::string kjv = (source_dir() / "assets" / "kjv.jsonl.gz").string();
  auto r = run_baton(
      "tokenizer train --input " + kjv + " --vocab-size 320 --out " + model);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("trained a bpe SentencePiece model of 320 pieces on 1189 "
                    "documents"),
      std::string::npos)
      << r.output;

  const std::string shards = (work / "shards").string();
  r = run_baton(
      "data tokenize --input " + kjv + " --tokenizer sentencepiece " +
      "--tokenizer-path " + model + " --out " + shards +
      " --tokens-per-shard 500000");
  ASSERT_EQ(r.code, 0) << r.output;
  // Not a terminal: plain progress lines, the last one complete.
  EXPECT_NE(r.output.find("1189/1189 documents (100.0%)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("wrote 1189 documents in "), std::string::npos)
      << r.output;
  EXPECT_GT(std::distance(fs::directory_iterator(shards), {}), 1);

  r = run_baton(
      "train --config " + debug_config() +
      " --training.dataset=tokens --training.dataset_path=" + shards +
      " --training.steps=1 --lr_scheduler.warmup_steps=0"
      " --metrics.peak_tflops=1 --job.dump_folder=" +
      (work / "out").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find("was made with a tokenizer of vocab 320"),
      std::string::npos)
      << r.output;
}

TEST(CliSchedule, PrintsAGridAndWritesEveryFormat) {
  auto r = run_baton(
      "schedule --schedule interleaved1f1b --pp 2 --stages-per-rank 2 "
      "--microbatches 4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: 0F0 0F1 2F0 2F1 _"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("makespan"), std::string::npos);

  const fs::path csv = fs::path(::testing::TempDir()) / "sched_comms.csv";
  r = run_baton(
      "schedule --schedule 1F1B --pp 2 --microbatches 2 --format csv --comms "
      "--out " +
      csv.string());
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream in(csv);
  std::string row;
  std::getline(in, row);
  EXPECT_EQ(
      row,
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,"
      "0REDUCE_GRAD");
  // The CSV loads back as a custom schedule.
  r = run_baton("schedule --csv " + csv.string() + " --format json");
  EXPECT_EQ(r.code, 0) << r.output;
  const auto json = nlohmann::json::parse(r.output);
  EXPECT_EQ(json["schedule"], "custom");
  EXPECT_EQ(json["pp"], 2);

  r = run_baton(
      "schedule --schedule DualPipeV --pp 4 --microbatches 8 --format svg");
  EXPECT_EQ(r.code, 0) << r.output.substr(0, 300);
  EXPECT_EQ(r.output.rfind("<svg", 0), 0u);
  r = run_baton(
      "schedule --schedule GPipe --pp 2 --microbatches 2 --format chrome");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"ph\":\"X\""), std::string::npos);
}

TEST(CliSchedule, RejectionsAreUsageErrors) {
  auto r = run_baton("schedule --schedule 1F1B --pp 4 --microbatches 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("error: [schedule] 1F1B"), std::string::npos)
      << r.output;
  r = run_baton("schedule --schedule Pipedream --pp 4 --microbatches 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown schedule 'Pipedream'"), std::string::npos);
  EXPECT_NE(r.output.find("ZBVZeroBubble"), std::string::npos) << r.output;
  r = run_baton("schedule --schedule GPipe --pp 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--microbatches M"), std::string::npos);
  r = run_baton(
      "schedule --schedule GPipe --pp 4 --microbatches 8 --format png");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("allowed: text, csv, json, chrome, svg"),
      std::string::npos);
  r = run_baton(
      "schedule --schedule GPipe --pp 4 --microbatches 8 --costs F=1,X=2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--costs: 'X=2' is not allowed"), std::string::npos)
      << r.output;
}

TEST(CliSchedule, CostsChangeTheSimulation) {
  // GPipe with B = 2 F: makespan 3 (m + p - 1) = 33 for p = 4, m = 8.
  const auto r = run_baton(
      "schedule --schedule GPipe --pp 4 --microbatches 8 --format json "
      "--costs F=1,b=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(r.output)["simulation"]["makespan"].get<double>(),
      33.0);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

/// `baton train` of the debug model for `steps` steps, under `env`, in a
/// dump folder of its own (`name`: the tests run in parallel).
Result train_briefly(
    const std::string& name,
    const std::string& env,
    const std::string& extra,
    int steps = 2) {
  const auto dump = testing::fresh_dir(name);
  return testing::run_command(
      env + " " + testing::baton_bin() + " train --config " + debug_config() +
      " --training.steps=" + std::to_string(steps) +
      " --lr_scheduler.warmup_steps=1 --training.seq_len=32 "
      "--metrics.log_freq=1 --job.dump_folder=" +
      dump.string() + extra);
}

TEST(Cli, MfuAboveOneHundredPercentIsAWarningNamingThePeak) {
  const auto r =
      train_briefly("cli_mfu", "", " --metrics.peak_tflops=0.0001", 1);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("is above 100%: the step ran faster than the peak of "
                    "0.0001 TFLOP/s"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton
