#include "builders/trainer_builder.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "common/allocator.h"
#include "data/dataset.h"

namespace baton {

namespace {

/// LOCAL_WORLD_SIZE from the launcher's environment, else 1.
int64_t local_world_size() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 1;
}

void check_built(bool ok, const std::string& what) {
  if (!ok) {
    throw std::logic_error("[TrainerBuilder] " + what);
  }
}

}  // namespace

TrainerBuilder::TrainerBuilder(const JobConfig& config) : config_(config) {}

TrainerBuilder::~TrainerBuilder() = default;

std::unique_ptr<Trainer> TrainerBuilder::build() {
  init_runtime();
  TrainerComponents c;
  c.tokenizer = build_tokenizer();
  check_built(c.tokenizer != nullptr, "build_tokenizer returned null");

  const auto& spec =
      model_registry().get(config_.model.name, config_.origin("model.name"));
  llama::ModelArgs args =
      model_flavor(spec, config_.model.flavor, config_.origin("model.flavor"));
  args.vocab_size = c.tokenizer->vocab_size();
  c.flops_per_token = spec.flops_per_token(args, config_.training.seq_len);
  c.model_parts = build_model(args);
  check_built(!c.model_parts.empty(), "build_model returned no parts");

  c.optimizers = build_optimizers(c.model_parts);
  check_built(
      c.optimizers && c.optimizers->size() == c.model_parts.size(),
      "build_optimizers must return one optimizer per model part");
  c.lr_schedulers = build_lr_schedulers(*c.optimizers);
  check_built(
      c.lr_schedulers && c.lr_schedulers->size() == c.optimizers->size(),
      "build_lr_schedulers must return one scheduler per optimizer");

  c.dataloader = build_dataloader(c.tokenizer);
  auto loss = build_loss();
  check_built(static_cast<bool>(loss), "build_loss returned an empty function");
  c.train_step = build_train_step(c.model_parts, std::move(loss));
  check_built(c.train_step != nullptr, "build_train_step returned null");
  c.checkpointer = build_checkpointer(
      c.model_parts, *c.optimizers, *c.lr_schedulers, c.dataloader.get());
  c.metrics = build_metrics();
  check_built(c.metrics != nullptr, "build_metrics returned null");

  c.peak_tflops = config_.metrics.peak_tflops;
  if (c.peak_tflops <= 0.0) {
    c.peak_tflops = measure_peak_tflops();
    LOG(INFO) << "peak " << c.peak_tflops
              << " TFLOP/s, measured by a 1024x1024 fp32 matmul probe on "
              << at::get_num_threads()
              << " threads (set metrics.peak_tflops to skip the probe)";
  }
  return std::make_unique<Trainer>(config_, std::move(c));
}

void TrainerBuilder::init_runtime() {
  keep_freed_memory_in_process();
  const auto& p = config_.parallelism;
  dims_ = ParallelDims::resolve(
      p.data_parallel_replicate_degree,
      p.data_parallel_shard_degree,
      p.tensor_parallel_degree,
      p.pipeline_parallel_degree,
      /*world_size=*/1);
  int64_t threads = config_.training.num_threads;
  if (threads == 0) {
    const int64_t cores =
        std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads = std::max<int64_t>(1, cores / local_world_size());
  }
  at::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(config_.training.seed);
  if (config_.training.deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  device_ = torch::cuda::is_available() ? at::Device(at::kCUDA, 0)
                                        : at::Device(at::kCPU);
  LOG(INFO) << "runtime: " << dims_.to_string() << ", " << threads
            << " intra-op threads, device " << device_.str();
}

std::shared_ptr<const Tokenizer> TrainerBuilder::build_tokenizer() {
  return tokenizer_registry().get(
      config_.model.tokenizer,
      config_.origin("model.tokenizer"))(config_.model.tokenizer_path);
}

ModelParts TrainerBuilder::build_model(const llama::ModelArgs& args) {
  const auto& spec = model_registry().get(config_.model.name);
  auto part = spec.build(args, ChunkSpec{}, config_.training.seed);
  parallelize(*part);
  ModelParts parts;
  parts.push_back(std::move(part));
  return parts;
}

void TrainerBuilder::parallelize(ModelChunk& part) {
  part.to(device_);
  part.train();
}

std::unique_ptr<torch::optim::Optimizer> TrainerBuilder::build_optimizer(
    ModelChunk& part) {
  return optimizer_registry().get(
      config_.optimizer.name, config_.origin("optimizer.name"))(
      part.parameters(), config_.optimizer);
}

std::unique_ptr<OptimizersContainer> TrainerBuilder::build_optimizers(
    const ModelParts& parts) {
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  parts.for_each(
      [&](ModelChunk& part) { optimizers.push_back(build_optimizer(part)); });
  return std::make_unique<OptimizersContainer>(std::move(optimizers));
}

std::unique_ptr<LRScheduler> TrainerBuilder::build_lr_scheduler(
    torch::optim::Optimizer& optimizer) {
  return std::make_unique<LRScheduler>(
      optimizer, config_.lr_scheduler, config_.training.steps);
}

std::unique_ptr<LRSchedulersContainer> TrainerBuilder::build_lr_schedulers(
    const OptimizersContainer& optimizers) {
  std::vector<std::unique_ptr<LRScheduler>> schedulers;
  optimizers.for_each([&](torch::optim::Optimizer& o) {
    schedulers.push_back(build_lr_scheduler(o));
  });
  return std::make_unique<LRSchedulersContainer>(std::move(schedulers));
}

std::unique_ptr<DataLoader> TrainerBuilder::build_dataloader(
    std::shared_ptr<const Tokenizer> tokenizer) {
  const TrainingConfig& t = config_.training;
  DatasetOptions dataset_options;
  dataset_options.path = t.dataset_path;
  dataset_options.text_field = t.dataset_text_field;
  auto dataset = dataset_registry().get(
      t.dataset, config_.origin("training.dataset"))(dataset_options);
  DataLoaderOptions options(t.local_batch_size, t.seq_len);
  options.dp_rank = 0;
  options.dp_size = dims_.dp();
  options.shuffle = t.dataset_shuffle;
  options.seed = static_cast<uint64_t>(t.seed);
  options.prefetch = t.dataset_prefetch;
  return std::make_unique<DataLoader>(
      std::move(dataset), std::move(tokenizer), options);
}

LossFn TrainerBuilder::build_loss() {
  return cross_entropy_sum;
}

std::unique_ptr<TrainStep> TrainerBuilder::build_train_step(
    const ModelParts& parts, LossFn loss) {
  return std::make_unique<LocalTrainStep>(std::move(loss));
}

std::unique_ptr<Checkpointer> TrainerBuilder::build_checkpointer(
    const ModelParts& parts,
    const OptimizersContainer& optimizers,
    const LRSchedulersContainer& schedulers,
    const DataLoader* dataloader) {
  if (config_.checkpoint.enable) {
    // The config check rejects checkpoint.enable until #7 lands; fail loudly
    // rather than train without the checkpoints the user asked for.
    throw ConfigError("checkpoint.enable: true is not supported yet");
  }
  return nullptr;
}

std::unique_ptr<MetricsLogger> TrainerBuilder::build_metrics() {
  return std::make_unique<MetricsLogger>(
      config_.metrics, config_.job.dump_folder, /*is_logging_rank=*/true);
}

}  // namespace baton
