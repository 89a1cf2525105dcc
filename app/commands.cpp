#include "app/commands.h"

#include <unistd.h>

#include <glog/logging.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "app/progress.h"
#include "checkpoint/inspect.h"
#include "checkpoint/saved_model.h"
#include "common/allocator.h"
#include "common/blas.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/threads.h"
#include "config/job_config.h"
#include "data/dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "models/common/attention_kernel.h"
#include "models/common/transformer.h"
#include "models/generate.h"
#include "models/model_spec.h"
#include "parallel/dist/launch_env.h"
#include "parallel/dist/launcher.h"
#include "parallel/dist/process_group.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"
#include "planner/plan.h"
#include "planner/plan_profile.h"
#include "trainer/fault_injection.h"

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

void log_cpu_kernels() {
  LOG(INFO) << "blas: " << loaded_blas().describe();
  // The CPU code Baton chooses by instruction set: float32 attention.
  LOG(INFO) << "attention: CPU kernel with "
            << models::attention_kernel::isa_name(
                   models::attention_kernel::best_isa())
            << " instructions";
}

namespace {

PlanOptions plan_options(const PlanArgs& args) {
  auto options = PlanOptions()
                     .global_batch(args.global_batch)
                     .synthesize(args.synthesize)
                     .tolerance(args.tolerance_percent / 100.0);
  if (args.memory_per_rank_gib > 0.0) {
    options.memory_per_rank(static_cast<int64_t>(
        args.memory_per_rank_gib * 1024.0 * 1024.0 * 1024.0));
  }
  return options;
}

/// One rank of the profile's launch: times what the cost file holds with
/// the others (planner/plan_profile.h); rank 0 writes it.
int run_profile_rank(const JobConfig& config, const PlanArgs& args) {
  log_cpu_kernels();
  keep_freed_memory_in_process();
  const dist::LaunchEnv env = dist::detect_launch_env();
  std::shared_ptr<dist::Runtime> runtime;
  if (env.distributed()) {
    dist::RuntimeOptions options;
    options.init_timeout =
        std::chrono::seconds(config.comm.init_timeout_seconds);
    runtime = dist::Runtime::init(env, options);
    runtime->set_timeout(
        std::chrono::seconds(config.comm.train_timeout_seconds));
  }
  at::set_num_threads(static_cast<int>(resolve_intra_op_threads(
      config.training.num_threads, env.local_world_size)));
  const PlanOptions options = plan_options(args);
  const PlanCosts costs = profile_plan_costs(
      config,
      runtime.get(),
      ProfileOptions()
          .rows(plan_microbatch_rows(config, args.nproc, options))
          .splits(plan_split_rows(config, args.nproc, options))
          .data_parallel_rows(
              plan_data_parallel_rows(config, args.nproc, options))
          .repeats(args.profile_repeats)
          .pipeline_runs(std::max<int64_t>(1, (args.profile_repeats + 1) / 2))
          .compute_ranks(args.profile_compute_ranks));
  if (env.rank == 0) {
    write_text_file(args.profile_rank_path, plan_costs_to_json(costs));
  }
  return 0;
}

/// Profiles on this machine: min(N, cores) ranks time the compute at once,
/// as a run of N ranks here would (two at least, for the links, when N >
/// 1). Returns the costs; writes them to `path`.
PlanCosts profile_here(
    const JobConfig& config,
    const PlanArgs& args,
    const std::string& path,
    dist::CpuBind bind) {
  log_cpu_kernels();
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t compute = std::min(args.nproc, cores);
  const int64_t ranks = args.nproc > 1 ? std::max<int64_t>(2, compute) : 1;
  dist::LocalLaunchOptions launch;
  launch.nproc = ranks;
  launch.cpu_bind = bind;
  launch.args = {"plan"};
  for (const auto& file : args.plugins) {
    launch.args.insert(launch.args.end(), {"--plugin", file});
  }
  for (const auto& file : args.config_paths) {
    launch.args.insert(launch.args.end(), {"--config", file});
  }
  for (const auto& o : args.overrides) {
    launch.args.push_back("--" + o);
  }
  launch.args.insert(
      launch.args.end(),
      {"--nproc",
       std::to_string(args.nproc),
       "--profile-repeats",
       std::to_string(args.profile_repeats),
       "--profile-compute-ranks",
       std::to_string(compute),
       "--profile-rank",
       path});
  if (args.global_batch > 0) {
    launch.args.insert(
        launch.args.end(),
        {"--global-batch", std::to_string(args.global_batch)});
  }
  if (args.memory_per_rank_gib > 0.0) {
    launch.args.insert(
        launch.args.end(),
        {"--memory-per-rank", std::to_string(args.memory_per_rank_gib)});
  }
  std::cout << "plan: profiling on this machine with " << ranks << " rank(s) ("
            << compute << " timing compute, ";
  if (bind == dist::CpuBind::kCores) {
    std::cout << "each bound to its own cores and as many threads)\n";
  } else {
    std::cout << dist::threads_per_rank(ranks) << " thread(s) each)\n";
  }
  std::cout << std::flush;
  const auto start = std::chrono::steady_clock::now();
  if (const int code = dist::launch_local(launch); code != 0) {
    throw std::runtime_error(
        "[plan] the profile's ranks failed (exit " + std::to_string(code) +
        "); their messages are above");
  }
  PlanCosts costs = load_plan_costs(path);
  std::cout << "plan: profiled in "
            << std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " s; wrote " << path << " (reuse it with --costs)\n";
  return costs;
}

/// One binding's profile and plan.
struct Planned {
  dist::CpuBind bind = dist::CpuBind::kNone;
  PlanCosts costs;
  PlanResult result;
  /// How to train as profiled ("--nproc 2 --cpu-bind cores"); empty for
  /// costs not measured here.
  std::string launch;
};

/// The profile's ranks bound to their own cores or not: as --cpu-bind
/// says, else both where this machine has a core for each rank (what
/// binding gains or costs differs from machine to machine: the plan
/// measures it).
std::vector<dist::CpuBind> bindings_to_profile(const PlanArgs& args) {
  if (args.cpu_bind) {
    return {*args.cpu_bind};
  }
  const auto cores =
      static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (args.nproc < 2 || args.nproc > cores) {
    return {dist::CpuBind::kNone};
  }
  return {dist::CpuBind::kNone, dist::CpuBind::kCores};
}

/// The cost file (--costs), else a profile on this machine per binding
/// (costs.json, and costs-cpu-bind-cores.json beside it for bound ranks),
/// each planned.
std::vector<Planned> plan_each_binding(
    const JobConfig& config, const PlanArgs& args) {
  const auto options = plan_options(args);
  if (!args.costs_path.empty()) {
    Planned p;
    p.costs = load_plan_costs(args.costs_path);
    p.result = plan_layouts(config, args.nproc, p.costs, options);
    return {p};
  }
  std::string dir = args.out_dir;
  if (dir.empty()) {
    dir = config.job.dump_folder;
  }
  std::filesystem::create_directories(dir);
  const auto bindings = bindings_to_profile(args);
  std::vector<Planned> out;
  for (const dist::CpuBind bind : bindings) {
    const bool bound = bind == dist::CpuBind::kCores;
    const std::string name = args.out_dir.empty() ? "plan_costs" : "costs";
    const std::string path =
        (std::filesystem::path(dir) /
         (name + (bound && bindings.size() > 1 ? "-cpu-bind-cores" : "") +
          ".json"))
            .string();
    Planned p;
    p.bind = bind;
    p.costs = profile_here(config, args, path, bind);
    p.result = plan_layouts(config, args.nproc, p.costs, options);
    p.result.cpu_bind = bound ? "cores" : "none";
    p.launch = "--nproc " + std::to_string(args.nproc) +
               (bound ? " --cpu-bind cores" : "");
    out.push_back(std::move(p));
  }
  return out;
}

/// The binding whose best plan is fastest; bound ranks only where that is
/// faster by more than the plan's tolerance (its accuracy): unbound is the
/// launch with nothing to say.
const Planned& choose_binding(
    const std::vector<Planned>& planned, double tolerance) {
  const Planned* chosen = &planned.front();
  for (const Planned& p : planned) {
    const bool bound = p.bind == dist::CpuBind::kCores;
    const double step = p.result.ranked.front().step_s;
    const double best = chosen->result.ranked.front().step_s;
    if (bound ? step < best * (1.0 - tolerance) : step < best) {
      chosen = &p;
    }
  }
  return *chosen;
}

/// Each binding's best prediction, and the one chosen.
std::string describe_bindings(
    const std::vector<Planned>& planned, const Planned& chosen) {
  std::ostringstream out;
  out << "binding: profiled both ways:";
  for (const Planned& p : planned) {
    char line[128];
    std::snprintf(
        line,
        sizeof(line),
        " %s, best %.4g s a step;",
        p.bind == dist::CpuBind::kCores ? "each rank bound to its own cores"
                                        : "ranks unbound",
        p.result.ranked.front().step_s);
    out << line;
  }
  out << " train with " << chosen.launch << "\n";
  return out.str();
}

/// Into --out: the chosen candidate's overlay (its first line why, and how
/// to launch it), the table, the JSON, the synthesised schedules and the
/// chosen pipeline's SVG.
void write_plan_files(
    const JobConfig& config,
    const PlanArgs& args,
    const Planned& chosen,
    const std::string& table,
    PlanResult& result) {
  std::filesystem::create_directories(args.out_dir);
  write_synthesized_schedules(result, args.out_dir);
  const PlanCandidate& best = result.ranked.front();
  char why[256];
  std::snprintf(
      why,
      sizeof(why),
      "rank 1 of %zu, predicted %.4g s per step, %.4g tokens/s per rank",
      result.ranked.size(),
      best.step_s,
      best.tokens_per_s_per_rank);
  std::string reason = why;
  if (result.tied > 1) {
    std::snprintf(
        why,
        sizeof(why),
        "; the simplest of the %lld predicted within %.3g %% of the fastest "
        "(%.4g s)",
        static_cast<long long>(result.tied),
        100.0 * result.tolerance,
        result.fastest_step_s);
    reason += why;
  }
  if (!chosen.launch.empty()) {
    // The launch belongs with the costs it was profiled under.
    reason += "; profiled here as it will run: train with " + chosen.launch;
  }
  const std::string dir = args.out_dir + "/";
  write_text_file(dir + "plan.yaml", plan_overlay_yaml(best, reason));
  write_text_file(dir + "plan.txt", table);
  write_text_file(dir + "plan.json", plan_result_json(result, chosen.costs));
  std::cout << "plan: wrote " << dir << "plan.yaml, " << dir << "plan.txt, "
            << dir << "plan.json";
  for (const auto& c : result.ranked) {
    if (!c.schedule_csv.empty()) {
      std::cout << ", " << c.schedule_csv;
    }
  }
  if (best.pp > 1) {
    write_text_file(
        dir + "schedule.svg", plan_schedule_svg(config, best, chosen.costs));
    std::cout << ", " << dir << "schedule.svg";
  }
  std::cout << "\n";
}

}  // namespace

int run_plan(const PlanArgs& args) {
  const JobConfig config = load_job_config(args.config_paths, args.overrides);
  set_log_level(parse_log_level(config.metrics.log_level));
  if (!args.profile_rank_path.empty()) {
    // The profile builds the run's pieces many times over: their start-up
    // lines would repeat; its phases say what it does (unless asked for
    // more, or less).
    if (config.metrics.log_level == "info") {
      set_log_level(LogLevel::kProgress);
    }
    return run_profile_rank(config, args);
  }
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
  // A world no layout divides is refused before anything is measured.
  const auto options = plan_options(args);
  plan_microbatch_rows(config, args.nproc, options);
  if (!args.profile_path.empty()) {
    profile_here(
        config,
        args,
        args.profile_path,
        args.cpu_bind.value_or(dist::CpuBind::kNone));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Planned> planned = plan_each_binding(config, args);
  const Planned& chosen = choose_binding(planned, options.tolerance());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  PlanResult result = chosen.result;
  const PlanCosts& costs = chosen.costs;
  std::ostringstream table;
  table << format_plan_table(result, costs, args.top);
  if (planned.size() > 1) {
    table << describe_bindings(planned, chosen);
  }
  table << (chosen.launch.empty() ? "planned in " : "profiled and planned in ")
        << seconds << " s\n";
  std::cout << table.str();
  if (args.out_dir.empty()) {
    return 0;
  }
  write_plan_files(config, args, chosen, table.str(), result);
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
  const auto problems = inspect_checkpoint(args.dir, std::cout, args.tensors);
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

namespace {

/// The tokenizer generate runs with: the flags', else the one `saved`
/// names. Throws ConfigError naming where it came from.
std::unique_ptr<Tokenizer> generation_tokenizer(
    const GenerateArgs& args, const SavedModel& saved) {
  const std::string kind =
      args.tokenizer.empty() ? saved.tokenizer : args.tokenizer;
  if (kind.empty()) {
    throw ConfigError(
        std::string(args.hf.empty() ? "--checkpoint: " : "--hf: ") +
        saved.dir.string() +
        ": names no tokenizer (no tokenizer.json beside it); allowed: a "
        "folder with one, or --tokenizer NAME [--tokenizer-path FILE]");
  }
  register_builtin_tokenizers();
  const std::string where = args.tokenizer.empty()
                                ? saved.dir.string() + " (its tokenizer)"
                                : std::string("--tokenizer");
  const std::string path =
      args.tokenizer_path.empty() ? saved.tokenizer_path : args.tokenizer_path;
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = tokenizer_registry().get(kind, where)(path);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(
        (args.tokenizer_path.empty() ? where : "--tokenizer-path") + ": " +
        e.what() + "; allowed: a readable " + kind +
        " file (--tokenizer-path FILE)");
  }
  if (tokenizer->vocab_size() > saved.args.vocab_size) {
    throw ConfigError(
        where + ": the " + kind + " tokenizer has " +
        std::to_string(tokenizer->vocab_size()) + " ids but " + saved.name +
        " only " + std::to_string(saved.args.vocab_size) +
        "; allowed: the tokenizer the model was trained with");
  }
  return tokenizer;
}

/// The prompt's ids after the tokenizer's BOS, checked to leave room for
/// --max-new-tokens within the model's max_seq_len.
std::vector<int32_t> prompt_ids(
    const GenerateArgs& args,
    const Tokenizer& tokenizer,
    const ModelArgs& model) {
  std::vector<int32_t> prompt;
  if (tokenizer.bos_id() >= 0) {
    prompt.push_back(tokenizer.bos_id());
  }
  const std::vector<int32_t> text = tokenizer.encode(args.prompt);
  prompt.insert(prompt.end(), text.begin(), text.end());
  if (prompt.empty()) {
    throw ConfigError(
        "--prompt: empty, and the tokenizer has no BOS to start from; "
        "allowed: some text");
  }
  const int64_t room = model.max_seq_len - static_cast<int64_t>(prompt.size());
  if (args.max_new_tokens > room) {
    throw ConfigError(
        "--max-new-tokens: " + std::to_string(args.max_new_tokens) +
        " after a prompt of " + std::to_string(prompt.size()) +
        " tokens; allowed: at most " +
        std::to_string(std::max<int64_t>(room, 0)) + " (the model's " +
        "max_seq_len " + std::to_string(model.max_seq_len) + ")");
  }
  return prompt;
}

/// The whole model of `saved` on one process: built, its weights read and
/// checked, then moved to the flags' device and dtype.
std::shared_ptr<models::TransformerImpl> generation_model(
    const GenerateArgs& args, const SavedModel& saved) {
  if (args.device == "cuda" && !torch::cuda::is_available()) {
    throw ConfigError(
        "--device: 'cuda' is not allowed here: this process sees no CUDA "
        "device (or Baton was built without CUDA); allowed: cpu");
  }
  const ModelSpec& spec = model_registry().get(saved.family);
  auto model = std::dynamic_pointer_cast<models::TransformerImpl>(
      spec.build(saved.args, ChunkSpec{}, 0));
  if (!model) {
    throw ConfigError(
        saved.name +
        ": the family's model is not the decoder of "
        "models/common, which generation runs; allowed: a family built on it");
  }
  load_saved_weights(saved, *model);
  model->to(
      args.device == "cuda" ? at::Device(at::kCUDA) : at::Device(at::kCPU),
      args.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat);
  model->eval();
  return model;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const SavedModel saved = args.hf.empty()
                               ? read_checkpoint_model(args.checkpoint)
                               : read_hf_model(args.hf, "--hf");
  const auto tokenizer = generation_tokenizer(args, saved);
  const std::vector<int32_t> prompt = prompt_ids(args, *tokenizer, saved.args);
  const auto model = generation_model(args, saved);
  LOG(INFO) << "generate: " << saved.name << " from "
            << (saved.hf ? saved.dir.string()
                         : saved.dir.string() + " (step " +
                               std::to_string(saved.step) + ")")
            << ", "
            << (args.tokenizer.empty() ? saved.tokenizer : args.tokenizer)
            << " tokenizer, " << args.dtype << " on " << args.device
            << "; loaded in " << seconds_since(start) << " s";

  GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.stop_ids = {tokenizer->eos_id()};
  options.sampling.temperature = args.temperature;
  options.sampling.top_k = args.top_k;
  options.sampling.top_p = args.top_p;
  options.seed = args.seed;
  // The text as it grows: each token's new bytes, while the decoded text
  // so far extends what is printed (the rest at the end otherwise).
  std::cout << args.prompt << std::flush;
  std::vector<int32_t> generated;
  std::string printed;
  const auto gen_start = std::chrono::steady_clock::now();
  const Generation result = generate(*model, prompt, options, [&](int32_t id) {
    if (id == tokenizer->eos_id()) {
      return;
    }
    generated.push_back(id);
    const std::string now = tokenizer->decode(generated);
    if (now.size() > printed.size() && now.rfind(printed, 0) == 0) {
      std::cout << now.substr(printed.size()) << std::flush;
      printed = now;
    }
  });
  const std::string text = tokenizer->decode(generated);
  std::cout << (text.rfind(printed, 0) == 0 ? text.substr(printed.size())
                                            : "\n" + text)
            << std::endl;
  const double gen_s = seconds_since(gen_start);
  LOG(INFO) << "generate: " << result.tokens.size() << " tokens after "
            << prompt.size() << " prompt tokens in " << gen_s << " s ("
            << (gen_s > 0 ? result.tokens.size() / gen_s : 0.0)
            << " tokens/s); "
            << (result.stopped ? "stopped at EOS"
                               : "stopped at --max-new-tokens");
  return 0;
}

}  // namespace baton
