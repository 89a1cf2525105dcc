// The `baton` executable: parses the command line, hands the JobConfig to a
// builder, trains. Exit codes: 0 success, 2 bad usage or config, 1 failure.

#include <c10/util/Exception.h>
#include <glog/logging.h>

#include <exception>
#include <fstream>
#include <iostream>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "trainer/cli.h"
#include "trainer/job_config.h"

namespace {

int run_train(const baton::TrainArgs& args) {
  if (args.nproc > 0) {
    throw baton::ConfigError(
        "--nproc: launching local ranks is not supported yet");
  }
  const auto config = baton::load_job_config(args.config_path, args.overrides);
  if (args.print_config) {
    std::cout << baton::job_config_to_yaml(config);
    return 0;
  }
  baton::register_builtin_builders();
  auto trainer = baton::make_trainer_builder(config)->build();
  trainer->train();
  return 0;
}

// Generates (or loads) a schedule, plans it and writes it in the asked
// format.
int run_schedule(const baton::ScheduleArgs& args) {
  namespace pp = baton::pipeline;
  const pp::Schedule schedule =
      args.csv_path.empty()
          ? pp::make_schedule(
                args.schedule, args.pp, args.stages_per_rank, args.microbatches)
          : pp::load_schedule_csv(args.csv_path);
  const auto costs = pp::SimulationCosts()
                         .forward(args.costs.at("F"))
                         .backward(args.costs.at("B"))
                         .backward_input(args.costs.at("I"))
                         .backward_weight(args.costs.at("W"))
                         .overlap_f_b(args.costs.at("OVERLAP"))
                         .p2p_latency(args.costs.at("P2P"));
  const pp::PlannedSchedule plan = pp::plan_schedule(schedule, costs);
  const std::string text = pp::format_schedule(
      args.comms ? plan.lowered : plan.compute, plan.simulation, args.format);
  if (args.out_path.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(args.out_path);
  out << text;
  if (!out) {
    throw std::runtime_error("cannot write '" + args.out_path + "'");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  try {
    const auto cli =
        baton::parse_cli(std::vector<std::string>(argv + 1, argv + argc));
    if (cli.command == "help") {
      std::cout << baton::cli_usage();
      return 0;
    }
    if (cli.command == "schedule") {
      return run_schedule(cli.schedule);
    }
    return run_train(cli.train);
  } catch (const baton::ConfigError& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
