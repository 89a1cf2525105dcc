// The `baton` command line as a function (app/run.h): parses it, hands the
// JobConfig to a builder, trains. Exit codes: 0 success, 2 bad usage or
// config, 1 failure, 75 stopped by SIGTERM / SIGUSR1 at a step boundary
// (trainer/preemption.h).

#include <c10/util/Exception.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "app/run.h"

#include "app/cli.h"
#include "app/commands.h"
#include "app/plugins.h"
#include "app/version.h"
#include "builders/builder_registry.h"
#include "builders/job_check.h"
#include "checkpoint/checkpoint.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/threads.h"
#include "config/job_config.h"
#include "parallel/dist/launch_env.h"
#include "parallel/dist/launcher.h"
#include "parallel/dist/process_group.h"
#include "planner/dry_run.h"
#include "trainer/fault_injection.h"
#include "trainer/metrics.h"
#include "trainer/preemption.h"

namespace {

/// The exit code and message of an exception: ConfigError 2, else 1.
std::pair<int, std::string> describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const baton::ConfigError& e) {
    return {2, e.what()};
  } catch (const c10::Error& e) {
    return {1, e.what_without_backtrace()};
  } catch (const std::exception& e) {
    return {1, e.what()};
  } catch (...) {
    return {1, "unknown exception"};
  }
}

/// One rank of several failed: print the error, tell the other ranks through
/// the store, and leave at once. Destructors are skipped on purpose: a Gloo
/// group still holding work in flight would block in its destructor.
[[noreturn]] void exit_rank(
    const std::exception_ptr& error, baton::dist::Runtime& runtime) {
  const auto [code, message] = describe(error);
  baton::clear_status();
  std::cerr << "error: " << message << std::endl;
  runtime.report_failure(message);
  google::FlushLogFiles(google::GLOG_INFO);
  std::cout.flush();
  std::_Exit(code);
}

/// What a restarted --nproc job resumes from, for the launcher's log.
std::string resume_note(const baton::JobConfig& config) {
  if (!config.checkpoint.enable) {
    return "from step 0 (checkpoint.enable is off: the run starts over)";
  }
  const auto folder =
      std::filesystem::path(config.job.dump_folder) / config.checkpoint.folder;
  const auto steps = baton::CheckpointManager::list_steps(folder);
  if (steps.empty()) {
    return "from step 0 (no checkpoint in " + folder.string() +
           " yet: the run starts over)";
  }
  return "from the latest checkpoint, step " + std::to_string(steps.back()) +
         " (" + folder.string() + ")";
}

/// Where a finished --nproc job left its outputs, for the launcher's last
/// line.
std::string outputs_note(const baton::JobConfig& config) {
  const std::filesystem::path dump(config.job.dump_folder);
  std::vector<std::string> parts;
  if (config.metrics.jsonl) {
    parts.push_back("metrics in " + (dump / "metrics.jsonl").string());
  }
  if (config.metrics.tensorboard) {
    parts.push_back(
        "TensorBoard files in " +
        baton::tensorboard_folder(config.job.dump_folder));
  }
  if (config.checkpoint.enable) {
    const auto folder = dump / config.checkpoint.folder;
    const auto steps = baton::CheckpointManager::list_steps(folder);
    parts.push_back(
        "checkpoints in " + folder.string() +
        (steps.empty()
             ? " (none saved)"
             : " (latest step " + std::to_string(steps.back()) + ")"));
  }
  std::string out;
  for (const auto& part : parts) {
    out += (out.empty() ? "" : "; ") + part;
  }
  return out.empty() ? "it wrote no files (metrics.jsonl off)" : out;
}

/// The world --print-config and --dry-run check a config for: --nproc,
/// else the launch environment's (torchrun, SLURM, ...) when it has one,
/// else the product of the degrees; 0 (not known) when a degree is -1 and
/// nothing else says. `source` says which, for messages.
int64_t job_world_size(
    const baton::JobConfig& config,
    const baton::TrainArgs& args,
    std::string& source) {
  if (args.nproc > 0) {
    source = "--nproc " + std::to_string(args.nproc);
    return args.nproc;
  }
  const auto env = baton::dist::detect_launch_env();
  if (env.world_size > 1) {
    source = env.to_string();
    return env.world_size;
  }
  int64_t world = 1;
  for (const auto& [key, degree] : config.mesh_degrees()) {
    if (degree < 0) {
      source = key + " is -1 and no --nproc N gives the world";
      return 0;
    }
    world *= degree;
  }
  source = "the product of the degrees";
  return world;
}

/// `baton train --nproc N`: starts N local ranks of this binary with the
/// same arguments and waits for them. The config is checked once, here,
/// before any rank starts.
int launch_ranks(const baton::JobConfig& config, const baton::TrainArgs& args) {
  baton::dist::LocalLaunchOptions launch;
  launch.nproc = args.nproc;
  launch.args = {"train"};
  for (const auto& path : args.plugins) {
    launch.args.push_back("--plugin");
    launch.args.push_back(path);
  }
  for (const auto& path : args.config_paths) {
    launch.args.push_back("--config");
    launch.args.push_back(path);
  }
  for (const auto& o : args.overrides) {
    launch.args.push_back("--" + o);
  }
  launch.max_restarts = args.max_restarts;
  launch.cpu_bind = args.cpu_bind;
  // A rank left blocked on the failed one fails on its own within a
  // collective's timeout: a shorter comm.train_timeout_seconds than the
  // grace (and 2 s to write its reports and exit) bounds the wait instead.
  launch.grace = std::min<std::chrono::milliseconds>(
      launch.grace,
      std::chrono::seconds(
          std::max<int64_t>(config.comm.train_timeout_seconds, 0) + 2));
  launch.resume_note = [config] { return resume_note(config); };
  launch.outputs_note = [config] { return outputs_note(config); };
  if (config.comm.flight_recorder_entries > 0) {
    launch.flight_recorder_dir =
        (std::filesystem::path(config.job.dump_folder) / "flight_recorder")
            .string();
  }
  return baton::dist::launch_local(launch);
}

/// Several intra-op threads must not spin after each parallel region on
/// the cores the others need (common/threads.h): starts again with
/// OMP_WAIT_POLICY=PASSIVE unless the user set it. Not when the config
/// could not be read a second time (a pipe, /dev/stdin).
void restart_for_passive_wait(
    const baton::JobConfig& config, const baton::TrainArgs& args, char** argv) {
  const bool rereadable = std::all_of(
      args.config_paths.begin(),
      args.config_paths.end(),
      [](const std::string& path) {
        return std::filesystem::is_regular_file(path);
      });
  if (rereadable) {
    baton::restart_for_load_time_settings(
        argv,
        baton::load_time_settings(baton::resolve_intra_op_threads(
            config.training.num_threads,
            baton::dist::detect_launch_env().local_world_size)));
  }
}

int run_train(const baton::TrainArgs& args, char** argv) {
  // Every registry is filled before the config is checked against them:
  // the built-ins, then what the plugins add.
  baton::register_builtin_builders();
  baton::load_config_plugins(args.plugins, args.config_paths, args.overrides);
  const auto config = baton::load_job_config(args.config_paths, args.overrides);
  baton::set_log_level(baton::parse_log_level(config.metrics.log_level));
  // A malformed BATON_INJECT_FAULT fails here, before any rank starts.
  baton::FaultInjection::get();
  // What train refuses, --print-config and --dry-run refuse too.
  std::string world_source;
  const int64_t world = job_world_size(config, args, world_source);
  if (args.print_config) {
    baton::check_job(config, world, world_source);
    std::cout << baton::job_config_to_yaml(config);
    return 0;
  }
  if (!args.dry_run.empty()) {
    if (world == 0) {
      throw baton::ConfigError(
          "--dry-run: " + world_source +
          "; allowed: a world size given with --nproc N");
    }
    baton::check_job(config, world, world_source);
    std::cout << baton::format_dry_run(
        baton::dry_run(
            config, world, baton::DryRunOptions().device(args.device)),
        args.dry_run);
    return 0;
  }
  // Once per machine: by the --nproc launcher, which its ranks share, or
  // by each machine's first rank.
  const auto env = baton::dist::detect_launch_env();
  if (args.nproc > 0 || (env.source != "baton" && env.local_rank == 0)) {
    baton::log_cpu_kernels();
  }
  if (args.nproc > 0) {
    // Checked here, once, rather than in every rank.
    baton::check_job(config, args.nproc, world_source);
    return launch_ranks(config, args);
  }
  restart_for_passive_wait(config, args, argv);
  // Both live outside the try, so the runtime they hold is still there when
  // a failure is reported.
  // From here a SIGTERM or SIGUSR1 stops the run at a step boundary.
  baton::Preemption::install(
      std::chrono::seconds(config.checkpoint.preemption_grace_seconds));
  auto builder = baton::make_trainer_builder(config);
  std::unique_ptr<baton::Trainer> trainer;
  try {
    trainer = builder->build();
    trainer->train();
  } catch (...) {
    if (auto runtime = baton::dist::Runtime::current()) {
      exit_rank(std::current_exception(), *runtime);
    }
    throw;
  }
  return trainer->preempted() ? baton::kPreemptedExitCode : 0;
}

}  // namespace

int baton::run(int argc, char** argv) {
  baton::init_logging(argv[0]);
  try {
    const auto cli =
        baton::parse_cli(std::vector<std::string>(argv + 1, argv + argc));
    if (cli.command == "help") {
      if (cli.bare) {
        // No command is a usage error: the usage goes where errors go.
        std::cerr << baton::cli_usage();
        return 2;
      }
      std::cout
          << (cli.help_topic.empty() ? baton::cli_usage()
                                     : baton::command_usage(cli.help_topic));
      return 0;
    }
    if (cli.command == "version") {
      std::cout << baton::version_report();
      return 0;
    }
    if (cli.command == "schedule") {
      return baton::run_schedule(cli.schedule);
    }
    if (cli.command == "plan") {
      baton::register_builtin_builders();
      baton::load_config_plugins(
          cli.plan.plugins, cli.plan.config_paths, cli.plan.overrides);
      return baton::run_plan(cli.plan);
    }
    if (cli.command == "tokenizer train") {
      return baton::run_tokenizer_train(cli.tokenizer_train);
    }
    if (cli.command == "data tokenize") {
      return baton::run_data_tokenize(cli.data_tokenize);
    }
    if (cli.command == "checkpoint inspect") {
      return baton::run_checkpoint_inspect(cli.checkpoint_inspect);
    }
    if (cli.command == "generate") {
      if (!cli.generate.plugins.empty()) {
        baton::register_builtin_builders();
        baton::load_plugins(cli.generate.plugins);
      }
      return baton::run_generate(cli.generate);
    }
    return run_train(cli.train, argv);
  } catch (...) {
    const auto [code, message] = describe(std::current_exception());
    baton::clear_status();
    std::cerr << "error: " << message << '\n';
    return code;
  }
}
