#include "builders/pipeline_trainer_builder.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <filesystem>

#include "common/error.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/parallelism.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/placement.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/split.h"
#include "parallel/pipeline/tied_weights.h"
#include "trainer/pipeline_train_step.h"

namespace baton {

PipelineTrainerBuilder::PipelineTrainerBuilder(const JobConfig& config)
    : TrainerBuilder(config) {}

PipelineTrainerBuilder::~PipelineTrainerBuilder() = default;

pipeline::Schedule pipeline_schedule(const JobConfig& config, int64_t pp) {
  const auto& p = config.parallelism;
  const int64_t batch = config.training.local_batch_size;
  if (batch % p.pipeline_parallel_microbatch_size != 0) {
    throw_config_error(
        config.first_origin(
            {"parallelism.pipeline_parallel_microbatch_size",
             "training.local_batch_size"}),
        "parallelism.pipeline_parallel_microbatch_size: " +
            std::to_string(p.pipeline_parallel_microbatch_size) +
            " does not divide training.local_batch_size " +
            std::to_string(batch) +
            "; allowed: a divisor of the local batch size");
  }
  const int64_t microbatches = batch / p.pipeline_parallel_microbatch_size;
  pipeline::register_builtin_schedules();
  if (p.pipeline_parallel_schedule_csv.empty()) {
    return pipeline::make_schedule(
        p.pipeline_parallel_schedule,
        pp,
        p.pipeline_parallel_stages_per_rank,
        microbatches);
  }
  pipeline::Schedule schedule =
      pipeline::load_schedule_csv(p.pipeline_parallel_schedule_csv);
  if (schedule.pp != pp || schedule.microbatches != microbatches) {
    throw_config_error(
        config.origin("parallelism.pipeline_parallel_schedule_csv"),
        "parallelism.pipeline_parallel_schedule_csv: '" +
            p.pipeline_parallel_schedule_csv + "' is for pp " +
            std::to_string(schedule.pp) + " and " +
            std::to_string(schedule.microbatches) +
            " microbatches, but this run has pp " + std::to_string(pp) +
            " and " + std::to_string(microbatches) +
            " (local_batch_size / pipeline_parallel_microbatch_size)");
  }
  return schedule;
}

std::vector<ChunkSpec> pipeline_stages(
    const JobConfig& config,
    const pipeline::Schedule& schedule,
    int64_t n_layers) {
  const auto& p = config.parallelism;
  auto chunks = p.pipeline_parallel_module_fqns_per_stage.empty()
                    ? pipeline::split_model(
                          n_layers,
                          schedule.num_stages,
                          p.pipeline_parallel_layers_per_stage)
                    : pipeline::split_model_by_fqns(
                          n_layers, p.pipeline_parallel_module_fqns_per_stage);
  if (static_cast<int64_t>(chunks.size()) != schedule.num_stages) {
    throw_config_error(
        config.origin("parallelism.pipeline_parallel_module_fqns_per_stage"),
        "parallelism.pipeline_parallel_module_fqns_per_stage: " +
            std::to_string(chunks.size()) + " stages, but the schedule has " +
            std::to_string(schedule.num_stages) +
            "; allowed: one list per stage");
  }
  if (const auto problem =
          config.activation_checkpoint.stages_problem(schedule.num_stages)) {
    throw_config_error(config.origin(problem->key), problem->message);
  }
  return chunks;
}

void PipelineTrainerBuilder::init_runtime() {
  TrainerBuilder::init_runtime();
  schedule_ =
      pipeline_schedule(config(), parallel_dims().degree(kPipelineAxis));
}

ModelParts PipelineTrainerBuilder::build_model(const ModelArgs& args) {
  const auto chunks = pipeline_stages(config(), schedule_, args.n_layers);
  const int64_t my_pp = mesh().coord().at(kPipelineAxis);
  const auto& spec = model_registry().get(config().model.name);
  ModelParts parts;
  for (int64_t s = 0; s < schedule_.num_stages; ++s) {
    if (schedule_.stage_to_rank.at(s) != my_pp) {
      continue;
    }
    LOG_IF(INFO, mesh().leads({kPipelineAxis}))
        << "pipeline rank " << my_pp << " holds stage " << s << ": "
        << pipeline::describe_chunk(chunks[s]);
    parts.push_back(std::make_shared<ModelPart>(
        spec.build(args, chunks[s], config().training.seed), s));
  }
  pipeline::tie_embeddings(
      parts, args.tie_embeddings, schedule_.stage_to_rank, mesh(), runtime());
  return parts;
}

std::unique_ptr<DataLoader> PipelineTrainerBuilder::build_dataloader(
    std::shared_ptr<const Tokenizer> tokenizer) {
  if (schedule_.stage_to_rank.at(0) != mesh().coord().at(kPipelineAxis)) {
    return nullptr;
  }
  return TrainerBuilder::build_dataloader(std::move(tokenizer));
}

std::unique_ptr<TrainStep> PipelineTrainerBuilder::build_train_step(
    const ModelParts& parts, LossFn loss) {
  // Lowered (unless a CSV already was), validated, checked for deadlock, and
  // put in the order this device's transport posts best.
  auto lowered = pipeline::posting_order(
      pipeline::plan_schedule(schedule_, pipeline::SimulationCosts()).lowered,
      device().is_cuda());
  std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages;
  parts.for_each([&](ModelPart& part) {
    stages.emplace_back(part.stage(), part.module_ptr());
  });
  const auto& p = config().parallelism;
  pipeline::ExecutorShapes shapes;
  shapes.microbatches = schedule_.microbatches;
  shapes.microbatch_size = p.pipeline_parallel_microbatch_size;
  // This rank's positions of each sequence (context parallel splits them).
  shapes.seq_len = config().training.seq_len /
                   parallel_sequence_split(config(), mesh()).shards;
  shapes.dim = model_args().dim;
  shapes.sequence_shards = parallel_sequence_shards(config(), parallel_dims());
  // Document masking: every stage's attention reads the whole rows'
  // documents.
  shapes.documents_len =
      config().training.document_mask ? config().training.seq_len : 0;
  shapes.device = device();
  // Stages hand over activations in the compute dtype.
  shapes.dtype = mixed_precision().param;
  auto executor = std::make_unique<pipeline::PipelineExecutor>(
      std::move(lowered),
      std::move(stages),
      mesh().group(kPipelineAxis),
      std::move(loss),
      shapes);
  // This rank's tokens of a micro-step (its positions of each sequence
  // where context parallel splits them); the loss and the token count sum
  // over the loss group (dp x cp).
  const int64_t tokens = config().training.local_batch_size *
                         config().training.seq_len /
                         parallel_sequence_split(config(), mesh()).shards;
  // pipeline_parallel_trace: "" or false = off, true = <dump_folder>/
  // pipeline_trace, else the prefix itself.
  std::string trace = p.pipeline_parallel_trace;
  if (trace == "false") {
    trace.clear();
  } else if (trace == "true") {
    trace = config().job.dump_folder + "/pipeline_trace";
  }
  if (!trace.empty()) {
    std::filesystem::create_directories(
        std::filesystem::path(trace).parent_path());
  }
  return std::make_unique<PipelinedTrainStep>(
      std::move(executor),
      mesh().group(kPipelineAxis),
      mesh().loss(),
      config().training.gradient_accumulation_steps,
      tokens,
      trace);
}

}  // namespace baton
