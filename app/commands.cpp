#include "app/commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "app/progress.h"
#include "builders/plan.h"
#include "checkpoint/inspect.h"
#include "common/error.h"
#include "config/job_config.h"
#include "data/dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"

namespace baton {

// Generates (or loads) a schedule, plans it and writes it in the asked
// format.
int run_schedule(const ScheduleArgs& args) {
  namespace pp = pipeline;
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
  const pp::PlannedSchedule plan = [&] {
    try {
      return pp::plan_schedule(schedule, costs);
    } catch (const pp::ScheduleError& e) {
      // The planner knows the actions, not the file they came from.
      if (args.csv_path.empty()) {
        throw;
      }
      throw pp::ScheduleError(args.csv_path + ": " + e.what());
    }
  }();
  const std::string text = pp::format_schedule(
      args.comms ? plan.lowered : plan.compute, plan.simulation, args.format);
  if (args.out_path.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(args.out_path);
  out << text;
  if (!out) {
    throw std::runtime_error(
        "[schedule] --out: cannot write '" + args.out_path + "'");
  }
  return 0;
}

namespace {

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) {
    throw std::runtime_error("[plan] cannot write '" + path + "'");
  }
}

}  // namespace

int run_plan(const PlanArgs& args) {
  const JobConfig config = load_job_config(args.config_paths, args.overrides);
  if (!args.write_costs_path.empty()) {
    const PlanCosts costs = plan_costs_from_flops(
        config,
        FlopsCostOptions()
            .peak_tflops(args.peak_tflops)
            .efficiency(args.efficiency));
    write_text_file(args.write_costs_path, plan_costs_to_json(costs));
    std::cout << "plan: wrote " << args.write_costs_path << " ("
              << costs.obtained << ")\n";
    return 0;
  }
  const PlanCosts costs = load_plan_costs(args.costs_path);
  auto options = PlanOptions().global_batch(args.global_batch);
  if (args.memory_per_rank_gib > 0.0) {
    options.memory_per_rank(static_cast<int64_t>(
        args.memory_per_rank_gib * 1024.0 * 1024.0 * 1024.0));
  }
  const auto start = std::chrono::steady_clock::now();
  const PlanResult result = plan_layouts(config, args.nproc, costs, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::ostringstream table;
  table << format_plan_table(result, costs, args.top) << "planned in "
        << seconds << " s\n";
  std::cout << table.str();
  if (args.out_dir.empty()) {
    return 0;
  }
  std::filesystem::create_directories(args.out_dir);
  const PlanCandidate& best = result.ranked.front();
  char why[128];
  std::snprintf(
      why,
      sizeof(why),
      "rank 1 of %zu, predicted %.4g s per step, %.4g tokens/s per rank",
      result.ranked.size(),
      best.step_s,
      best.tokens_per_s_per_rank);
  const std::string dir = args.out_dir + "/";
  write_text_file(dir + "plan.yaml", plan_overlay_yaml(best, why));
  write_text_file(dir + "plan.txt", table.str());
  std::cout << "plan: wrote " << dir << "plan.yaml, " << dir << "plan.txt";
  if (best.pp > 1) {
    write_text_file(
        dir + "schedule.svg", plan_schedule_svg(config, best, costs));
    std::cout << ", " << dir << "schedule.svg";
  }
  std::cout << "\n";
  return 0;
}

namespace {

// The datasets `--dataset` (else each input's name) makes of each
// `--input`, indexed up front so the progress has a total. Every input's
// dataset is found before any is read, so a bad name fails at once.
std::vector<std::unique_ptr<Dataset>> open_inputs(
    const std::vector<std::string>& inputs,
    const std::string& dataset,
    const std::string& text_field) {
  register_builtin_datasets();
  std::vector<const DatasetCreator*> creators;
  for (const std::string& input : inputs) {
    creators.push_back(
        dataset.empty() ? &dataset_registry().get(
                              dataset_for_path(input, "--input"), "--input")
                        : &dataset_registry().get(dataset, "--dataset"));
  }
  std::vector<std::unique_ptr<Dataset>> datasets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    DatasetOptions options;
    options.path = inputs[i];
    options.text_field = text_field;
    datasets.push_back((*creators[i])(options));
  }
  return datasets;
}

}  // namespace

int run_tokenizer_train(const TokenizerTrainArgs& args) {
  const auto datasets = open_inputs(args.inputs, args.dataset, args.text_field);
  std::vector<const TextDataset*> texts;
  int64_t documents = 0;
  for (const auto& dataset : datasets) {
    const auto* text = dynamic_cast<const TextDataset*>(dataset.get());
    if (text == nullptr) {
      throw ConfigError(
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
  SentencePieceTrainOptions options(args.vocab_size);
  options.model_type = args.model_type;
  options.num_threads = std::max(1u, std::thread::hardware_concurrency());
  const auto start = std::chrono::steady_clock::now();
  train_sentencepiece(next_text, options, args.out_path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "trained a " << args.model_type << " SentencePiece model of "
            << args.vocab_size << " pieces on " << documents << " documents in "
            << seconds << " s: " << args.out_path << '\n';
  return 0;
}

// Tokenises the inputs into token shards, with a progress report on stderr.
int run_data_tokenize(const DataTokenizeArgs& args) {
  register_builtin_tokenizers();
  const auto tokenizer = tokenizer_registry().get(
      args.tokenizer, "--tokenizer")(args.tokenizer_path);
  const auto datasets = open_inputs(args.inputs, args.dataset, args.text_field);
  int64_t documents = 0;
  for (const auto& dataset : datasets) {
    documents += dataset->size();
  }
  TokenShardWriter writer(args.out_dir, *tokenizer, args.tokens_per_shard);
  ProgressReporter progress(std::cerr, ::isatty(STDERR_FILENO) == 1, documents);
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

int run_checkpoint_inspect(const CheckpointInspectArgs& args) {
  const auto problems = inspect_checkpoint(args.dir, std::cout);
  if (problems.empty()) {
    return 0;
  }
  std::cerr << "error: " << problems.front()
            << (problems.size() > 1
                    ? " (and " + std::to_string(problems.size() - 1) +
                          " more problems, listed above)"
                    : std::string())
            << '\n';
  return 1;
}

}  // namespace baton
