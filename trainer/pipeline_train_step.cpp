#include "trainer/pipeline_train_step.h"

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <stdexcept>

#include "parallel/dist/process_group.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/simulator.h"

namespace baton {

PipelinedTrainStep::PipelinedTrainStep(
    std::unique_ptr<pipeline::PipelineExecutor> executor,
    std::shared_ptr<dist::ProcessGroup> pp_group,
    std::shared_ptr<dist::ProcessGroup> dp_group,
    int64_t accumulation_steps,
    int64_t tokens_per_micro_step,
    std::string trace_path)
    : executor_(std::move(executor)),
      pp_group_(std::move(pp_group)),
      dp_group_(std::move(dp_group)),
      accumulation_steps_(accumulation_steps),
      tokens_per_micro_step_(tokens_per_micro_step),
      trace_path_(std::move(trace_path)) {}

PipelinedTrainStep::~PipelinedTrainStep() = default;

StepOutput PipelinedTrainStep::run(
    ModelParts& /*parts*/, const std::vector<Batch>& batches) {
  const bool has_data =
      executor_->schedule().stage_to_rank.at(0) == executor_->pp_rank();
  if (has_data && static_cast<int64_t>(batches.size()) != accumulation_steps_) {
    throw std::invalid_argument(
        "[PipelinedTrainStep] the first stage needs one batch per "
        "accumulation step (" +
        std::to_string(accumulation_steps_) + "), got " +
        std::to_string(batches.size()));
  }
  // Every micro-step has the same token count on every data-parallel rank.
  const int64_t tokens =
      tokens_per_micro_step_ * accumulation_steps_ * dp_group_->size();
  double loss_sum = 0.0;
  double wall = 0.0;
  double compute = 0.0;
  last_actions_.clear();
  for (int64_t i = 0; i < accumulation_steps_; ++i) {
    const bool last = i + 1 == accumulation_steps_;
    at::Tensor inputs, labels;
    if (has_data) {
      inputs = batches[i].inputs;
      labels = batches[i].labels;
    }
    auto run = executor_->run(
        inputs, labels, 1.0 / static_cast<double>(tokens), /*reduce=*/last);
    loss_sum += run.loss_sum;
    wall += run.wall_s;
    compute += run.compute_s;
    last_actions_.insert(
        last_actions_.end(), run.actions.begin(), run.actions.end());
  }
  loss_sum = sum_over(dp_group_, sum_over(pp_group_, loss_sum));
  StepOutput out;
  out.loss = loss_sum / static_cast<double>(tokens);
  out.tokens = tokens;
  out.bubble = wall > 0.0 ? std::max(0.0, 1.0 - compute / wall) : 0.0;
  if (!trace_path_.empty()) {
    write_pipeline_traces(
        trace_path_,
        executor_->schedule(),
        executor_->pp_rank(),
        last_actions_);
  }
  return out;
}

void write_pipeline_traces(
    const std::string& prefix,
    const pipeline::Schedule& lowered,
    int64_t pp_rank,
    const std::vector<pipeline::ExecutedAction>& actions) {
  std::vector<std::vector<pipeline::ExecutedAction>> ranks(lowered.pp);
  // One process per rank in the file; real timestamps start at 0.
  double t0 = actions.empty() ? 0.0 : actions.front().start_us;
  for (auto a : actions) {
    a.start_us -= t0;
    a.end_us -= t0;
    ranks[pp_rank].push_back(a);
  }
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    if (!out) {
      throw std::runtime_error("cannot write the pipeline trace " + path);
    }
  };
  write(
      prefix + ".rank" + std::to_string(pp_rank) + ".json",
      pipeline::executed_trace_json(ranks));
  if (pp_rank != 0) {
    return;
  }
  // Mean measured cost of each kind of compute action, in microseconds.
  std::map<std::string, std::pair<double, int64_t>> cost;
  for (const auto& a : actions) {
    if (!a.compute) {
      continue;
    }
    const auto kind = pipeline::parse_action(a.name).kind;
    auto& [sum, n] = cost[std::string(pipeline::action_kind_code(kind))];
    sum += a.end_us - a.start_us - a.wait_us;
    ++n;
  }
  auto mean = [&](const char* k, double fallback) {
    const auto it = cost.find(k);
    return it == cost.end() ? fallback : it->second.first / it->second.second;
  };
  const double f = mean("F", 1.0);
  const auto costs = pipeline::SimulationCosts()
                         .forward(f)
                         .backward(mean("B", 2.0 * f))
                         .backward_input(mean("I", f))
                         .backward_weight(mean("W", f));
  const auto sim = pipeline::simulate(lowered, costs);
  write(
      prefix + ".simulated.json",
      pipeline::format_schedule(lowered, sim, "chrome"));
}

}  // namespace baton
