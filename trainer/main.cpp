// The `baton` executable: parses the command line, hands the JobConfig to a
// builder, trains. Exit codes: 0 success, 2 bad usage or config, 1 failure.

#include <c10/util/Exception.h>
#include <glog/logging.h>

#include <exception>
#include <iostream>

#include "builders/builder_registry.h"
#include "common/error.h"
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
