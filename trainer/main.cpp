// The `baton` executable: parses the command line, hands the JobConfig to a
// builder, trains. Exit codes: 0 success, 2 bad usage or config, 1 failure.

#include <c10/util/Exception.h>
#include <glog/logging.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "common/threads.h"
#include "data/dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shards.h"
#include "parallel/dist/launcher.h"
#include "parallel/dist/process_group.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "trainer/cli.h"
#include "trainer/job_config.h"
#include "trainer/progress.h"

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
  std::cerr << "error: " << message << std::endl;
  runtime.report_failure(message);
  google::FlushLogFiles(google::GLOG_INFO);
  std::cout.flush();
  std::_Exit(code);
}

int run_train(const baton::TrainArgs& args, char** argv) {
  const auto config = baton::load_job_config(args.config_path, args.overrides);
  if (args.print_config) {
    std::cout << baton::job_config_to_yaml(config);
    return 0;
  }
  if (args.nproc > 0) {
    // The config is checked once, here, before any rank starts.
    baton::dist::LocalLaunchOptions launch;
    launch.nproc = args.nproc;
    launch.args = {"train", "--config", args.config_path};
    for (const auto& o : args.overrides) {
      launch.args.push_back("--" + o);
    }
    launch.store_timeout =
        std::chrono::seconds(config.comm.init_timeout_seconds);
    return baton::dist::launch_local(launch);
  }
  // Several intra-op threads must not spin beside OpenBLAS's
  // (common/threads.h): start again with OMP_WAIT_POLICY=PASSIVE unless the
  // user chose a policy, or the config could not be read a second time (a
  // pipe, /dev/stdin).
  if (baton::openmp_wait_policy_unset() &&
      (args.config_path.empty() ||
       std::filesystem::is_regular_file(args.config_path)) &&
      baton::resolve_intra_op_threads(
          config.training.num_threads,
          baton::dist::detect_launch_env().local_world_size) > 1) {
    baton::reexec_with_passive_openmp_wait(argv);
  }
  baton::register_builtin_builders();
  // Both live outside the try, so the runtime they hold is still there when
  // a failure is reported.
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

// The datasets `--dataset` makes of each `--input`, indexed up front so the
// progress has a total.
std::vector<std::unique_ptr<baton::Dataset>> open_inputs(
    const std::vector<std::string>& inputs,
    const std::string& dataset,
    const std::string& text_field) {
  baton::register_builtin_datasets();
  const auto& creator = baton::dataset_registry().get(dataset, "--dataset");
  std::vector<std::unique_ptr<baton::Dataset>> datasets;
  for (const std::string& input : inputs) {
    baton::DatasetOptions options;
    options.path = input;
    options.text_field = text_field;
    datasets.push_back(creator(options));
  }
  return datasets;
}

// Trains a SentencePiece model on the inputs' texts.
int run_tokenizer_train(const baton::TokenizerTrainArgs& args) {
  const auto datasets = open_inputs(args.inputs, args.dataset, args.text_field);
  std::vector<const baton::TextDataset*> texts;
  int64_t documents = 0;
  for (const auto& dataset : datasets) {
    const auto* text = dynamic_cast<const baton::TextDataset*>(dataset.get());
    if (text == nullptr) {
      throw baton::ConfigError(
          "--dataset: '" + args.dataset +
          "' holds tokens, not text; allowed: a text dataset (jsonl, text)");
    }
    texts.push_back(text);
    documents += text->size();
  }
  size_t which = 0;
  int64_t index = 0;
  const auto next_text = [&]() -> std::optional<std::string> {
    while (which < texts.size() && index == texts[which]->size()) {
      ++which;
      index = 0;
    }
    if (which == texts.size()) {
      return std::nullopt;
    }
    return texts[which]->text(index++);
  };
  baton::SentencePieceTrainOptions options(args.vocab_size);
  options.model_type = args.model_type;
  options.num_threads = std::max(1u, std::thread::hardware_concurrency());
  const auto start = std::chrono::steady_clock::now();
  baton::train_sentencepiece(next_text, options, args.out_path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "trained a " << args.model_type << " SentencePiece model of "
            << args.vocab_size << " pieces on " << documents << " documents in "
            << seconds << " s: " << args.out_path << '\n';
  return 0;
}

// Tokenises the inputs into token shards, with a progress report on stderr.
int run_data_tokenize(const baton::DataTokenizeArgs& args) {
  baton::register_builtin_tokenizers();
  const auto tokenizer = baton::tokenizer_registry().get(
      args.tokenizer, "--tokenizer")(args.tokenizer_path);
  const auto datasets = open_inputs(args.inputs, args.dataset, args.text_field);
  int64_t documents = 0;
  for (const auto& dataset : datasets) {
    documents += dataset->size();
  }
  baton::TokenShardWriter writer(
      args.out_dir, *tokenizer, args.tokens_per_shard);
  baton::ProgressReporter progress(
      std::cerr, ::isatty(STDERR_FILENO) == 1, documents);
  for (const auto& dataset : datasets) {
    for (int64_t i = 0; i < dataset->size(); ++i) {
      const std::vector<int32_t> ids = dataset->tokens(i, *tokenizer);
      writer.add(ids);
      progress.add(static_cast<int64_t>(ids.size()));
    }
  }
  progress.finish();
  const auto shards = writer.finish();
  std::cout << "wrote " << documents << " documents in " << shards.size()
            << " shard" << (shards.size() == 1 ? "" : "s") << " to "
            << args.out_dir << " (vocab " << tokenizer->vocab_size()
            << "); train on them with training.dataset=tokens, "
               "training.dataset_path="
            << args.out_dir << " and the same model.tokenizer\n";
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
    if (cli.command == "tokenizer train") {
      return run_tokenizer_train(cli.tokenizer_train);
    }
    if (cli.command == "data tokenize") {
      return run_data_tokenize(cli.data_tokenize);
    }
    return run_train(cli.train, argv);
  } catch (...) {
    const auto [code, message] = describe(std::current_exception());
    std::cerr << "error: " << message << '\n';
    return code;
  }
}
