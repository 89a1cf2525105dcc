#include "builders/trainer_builder.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "builders/job_check.h"
#include "checkpoint/checkpoint.h"
#include "common/allocator.h"
#include "common/blas.h"
#include "common/logging.h"
#include "common/text.h"
#include "common/threads.h"
#include "data/dataset.h"
#include "models/moe.h"
#include "parallel/activation_checkpoint.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/mixed_precision.h"
#include "parallel/parallelism.h"
#include "trainer/moe_balance.h"

namespace baton {

namespace {

/// `var`'s value, or "unset" (empty counts as unset, as
/// common/threads.h reads it).
std::string value_or_unset(const char* var) {
  const char* value = std::getenv(var);
  return value == nullptr || *value == '\0' ? "unset" : value;
}

/// comm.backend resolved for `device`: auto is NCCL on CUDA, else Gloo.
std::string comm_backend(const JobConfig& config, const at::Device& device) {
  const std::string& b = config.comm.backend;
  if (b == "auto") {
    return device.is_cuda() ? "nccl" : "gloo";
  }
  if (b == "nccl" && !device.is_cuda()) {
    throw_config_error(
        config.origin("comm.backend"),
        "comm.backend: nccl needs CUDA tensors, but this run trains on " +
            device.str() + "; allowed here: auto, gloo");
  }
  return b;
}

void check_built(bool ok, const std::string& what) {
  if (!ok) {
    throw std::logic_error("[TrainerBuilder] " + what);
  }
}

/// The model's shape as config.json of the model-only export records it,
/// with the tokenizer's BOS and EOS ids (an HF export's token ids).
std::string model_config_json(
    const JobConfig& config, const ModelArgs& a, const Tokenizer& tokenizer) {
  nlohmann::json model = model_args_json(a);
  model["model"] = config.model.name;
  model["flavor"] = config.model.flavor;
  model["tokenizer"] = config.model.tokenizer;
  // Where the tokenizer's file was, so that `baton generate --checkpoint`
  // finds it without the config.
  if (!config.model.tokenizer_path.empty()) {
    model["tokenizer_path"] =
        std::filesystem::absolute(
            resolve_asset_path(config.model.tokenizer_path))
            .lexically_normal()
            .string();
  }
  model["bos_id"] = tokenizer.bos_id();
  model["eos_id"] = tokenizer.eos_id();
  return model.dump();
}

}  // namespace

TrainerBuilder::TrainerBuilder(const JobConfig& config) : config_(config) {}

TrainerBuilder::~TrainerBuilder() = default;

std::unique_ptr<Trainer> TrainerBuilder::build() {
  init_runtime();
  TrainerComponents c;
  c.tokenizer = build_tokenizer();
  check_built(c.tokenizer != nullptr, "build_tokenizer returned null");
  tokenizer_ = c.tokenizer;

  const auto& spec =
      model_registry().get(config_.model.name, config_.origin("model.name"));
  ModelArgs args =
      model_flavor(spec, config_.model.flavor, config_.origin("model.flavor"));
  args.vocab_size = c.tokenizer->vocab_size();
  c.flops_per_token = spec.flops_per_token(args, config_.training.seq_len);
  model_args_ = args;
  if (const auto problem = parallelism_problem(config_, dims_, args)) {
    throw_config_error(config_.origin(problem->key), problem->message);
  }
  check_hf_layout(config_, spec);
  c.model_parts = build_model(args);
  check_built(!c.model_parts.empty(), "build_model returned no parts");
  c.moe = args.moe.enabled();
  for (models::MoEImpl* moe : moe_layers(c.model_parts)) {
    moe->aux_loss_coeff = config_.moe.aux_loss_coeff;
    moe->capacity_factor = config_.moe.capacity_factor;
    moe->products = models::parse_expert_products(config_.moe.expert_products);
  }
  parallelize(c.model_parts, build_appliers());

  c.optimizers = build_optimizers(c.model_parts);
  check_built(
      c.optimizers && c.optimizers->size() == c.model_parts.size(),
      "build_optimizers must return one optimizer per model part");
  c.lr_schedulers = build_lr_schedulers(*c.optimizers);
  check_built(
      c.lr_schedulers && c.lr_schedulers->size() == c.optimizers->size(),
      "build_lr_schedulers must return one scheduler per optimizer");
  if (const auto warning =
          config_.lr_scheduler.phases_warning(config_.training.steps);
      warning && env_.rank == 0) {
    const std::string where =
        config_.first_origin({warning->key.c_str(), "training.steps"});
    LOG(WARNING) << (where.empty() ? "" : where + ": ") << warning->message;
  }

  c.dataloader = build_dataloader(c.tokenizer);
  if (c.dataloader) {
    c.validation_dataloader = build_validation_dataloader(c.tokenizer);
  }
  auto loss = build_loss();
  check_built(static_cast<bool>(loss), "build_loss returned an empty function");
  c.train_step = build_train_step(c.model_parts, std::move(loss));
  check_built(c.train_step != nullptr, "build_train_step returned null");
  c.checkpointer = build_checkpointer(
      c.model_parts, *c.optimizers, *c.lr_schedulers, c.dataloader.get());
  c.metrics = build_metrics();
  check_built(c.metrics != nullptr, "build_metrics returned null");

  c.world_size = env_.world_size;
  c.rank = env_.rank;
  c.runtime = runtime_;
  c.mesh = mesh_;
  c.peak_tflops = peak_for_mfu(args);
  return std::make_unique<Trainer>(config_, std::move(c));
}

double TrainerBuilder::peak_for_mfu(const ModelArgs& args) const {
  const std::string dtype = mixed_precision_name(mixed_precision_.param);
  if (config_.metrics.peak_tflops > 0.0) {
    LOG_IF(INFO, log_facts()) << "mfu: against metrics.peak_tflops, "
                              << config_.metrics.peak_tflops << " TFLOP/s";
    return config_.metrics.peak_tflops;
  }
  if (device_.is_cuda()) {
    const std::string name = cuda_device_name(device_.index());
    if (const auto peak = published_peak_tflops(name, mixed_precision_.param)) {
      LOG_IF(INFO, log_facts())
          << "mfu: against the " << name << "'s published dense " << dtype
          << " peak, " << *peak << " TFLOP/s per GPU";
      return *peak;
    }
    const double probe = measure_peak(args);
    LOG_IF(INFO, log_facts())
        << "mfu: against a " << dtype << " matmul probe, " << probe
        << " TFLOP/s: the " << name << " has no published " << dtype
        << " peak in Baton's table (set metrics.peak_tflops to its data "
           "sheet's)";
    return probe;
  }
  const double probe = measure_peak(args);
  LOG_IF(INFO, log_facts())
      << "mfu: against a " << dtype << " matmul probe on the CPU, " << probe
      << " TFLOP/s per rank (CPUs publish no peak Baton knows; set "
         "metrics.peak_tflops to skip the probe)";
  return probe;
}

double TrainerBuilder::measure_peak(const ModelArgs& args) const {
  // The step's own matmul shapes (this rank's, as the enabled parallelisms
  // split them) and the 1024 square, the best of each: no matmul of the
  // step is faster than this peak.
  const StepShape shape = parallel_step_shape(
      config_,
      dims_,
      StepShape{
          config_.training.local_batch_size * config_.training.seq_len,
          args.dim,
          args.ffn_hidden_dim(),
          args.vocab_size});
  GemmShape best;
  // On the device the step runs on: a CPU probe under a GPU's step made
  // its MFU 300 %.
  const double peak = measure_peak_tflops(
      peak_probe_shapes(
          shape.tokens, shape.dim, shape.hidden, shape.vocab, device_),
      0.4,
      mixed_precision_.param,
      &best,
      device_);
  std::ostringstream where;
  if (device_.is_cuda()) {
    where << device_.str();
  } else {
    where << at::get_num_threads() << " ATen threads, "
          << loaded_blas().describe();
  }
  VLOG(1) << "peak " << peak << " TFLOP/s, the best of a "
          << mixed_precision_name(mixed_precision_.param)
          << " matmul probe over the step's shapes and the 1024 square"
          << (device_.is_cuda() ? " and the 8192 square" : "")
          << " (fastest: " << best.m << "x" << best.k << " by " << best.k << "x"
          << best.n << ") on " << where.str();
  return peak;
}

void TrainerBuilder::parallelize(ModelParts& parts, const ApplierChain& chain) {
  check_built(!chain.empty(), "build_appliers returned an empty chain");
  const ParallelContext context{
      config_, mesh(), device_, pipelined(), mixed_precision_};
  parts.for_each([&](ModelPart& part) { chain.apply(part, context); });
  LOG_IF(INFO, log_facts())
      << "parallelize: " << join(chain.names(), " -> ") << " on "
      << parts.size() << (parts.size() == 1 ? " part" : " parts")
      << (mesh().dims().degree(kPipelineAxis) > 1 ? " per pipeline rank" : "");
  if (chain.contains("activation_checkpoint") && log_facts()) {
    LOG(INFO) << "activation checkpoint: "
              << RecomputePlan::from(config_.activation_checkpoint).describe();
  }
}

dist::ParallelMesh& TrainerBuilder::mesh() const {
  if (!mesh_) {
    throw std::logic_error("[TrainerBuilder] mesh() before init_runtime()");
  }
  return *mesh_;
}

void TrainerBuilder::init_runtime() {
  keep_freed_memory_in_process();
  track_cpu_tensor_memory();
  env_ = env_override_ ? *env_override_ : dist::detect_launch_env();
  // The registered parallelisms' axes, with the degrees the config sets.
  register_builtin_parallelisms();
  dims_ = ParallelDims::from_config(config_, env_.world_size, env_.to_string());
  device_ = torch::cuda::is_available()
                ? at::Device(at::kCUDA, static_cast<int>(env_.local_rank))
                : at::Device(at::kCPU);
  // Checked on one rank too, so a config that cannot run distributed fails
  // before it is scaled out.
  const std::string backend = comm_backend(config_, device_);
  if (env_.distributed()) {
    dist::RuntimeOptions options;
    options.backend = backend;
    options.init_timeout =
        std::chrono::seconds(config_.comm.init_timeout_seconds);
    options.flight_recorder_entries = config_.comm.flight_recorder_entries;
    options.flight_recorder_dir =
        (std::filesystem::path(config_.job.dump_folder) / "flight_recorder")
            .string();
    runtime_ = dist::Runtime::init(env_, options);
  }
  mesh_ = std::make_shared<dist::ParallelMesh>(dims_, env_.rank, runtime_);
  const int64_t threads = resolve_intra_op_threads(
      config_.training.num_threads, env_.local_world_size);
  at::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(config_.training.seed);
  if (config_.training.deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  // After the threads are set: auto's CPU probe measures with them. Every
  // rank measures and all take the slowest rank's figure, so they agree.
  const MixedPrecisionChoice mp =
      resolve_mixed_precision(config_.training, device_, [this] {
        auto speed = torch::tensor({measure_bf16_matmul_speed()});
        mesh_->world()->all_reduce(speed, dist::ReduceOp::kMin);
        return speed.item<double>();
      });
  mixed_precision_ = mp.dtypes;
  // The job's facts once (every rank resolves the same); each rank's
  // groups at --log-level debug.
  LOG_IF(INFO, log_facts())
      << "mixed precision: compute " << mixed_precision_name(mp.dtypes.param)
      << " (" << mp.why << "), reduce "
      << mixed_precision_name(mp.dtypes.reduce)
      << "; weights, gradients and optimizer state float32";
  LOG_IF(INFO, log_facts())
      << "runtime: " << env_.world_size
      << (env_.world_size == 1 ? " rank" : " ranks") << " (" << env_.source
      << "), " << threads << " intra-op threads (" << kOmpWaitPolicyVar << "="
      << value_or_unset(kOmpWaitPolicyVar) << "), device "
      << (device_.is_cuda() ? "cuda" : "cpu") << "; " << dims_.to_string()
      << (dims_.inferred.empty() ? "" : ", " + dims_.inferred);
  VLOG(1) << "runtime: " << env_.to_string() << "; " << mesh_->to_string()
          << "; device " << device_.str();
}

std::shared_ptr<const Tokenizer> TrainerBuilder::build_tokenizer() {
  return tokenizer_registry().get(
      config_.model.tokenizer,
      config_.origin("model.tokenizer"))(config_.model.tokenizer_path);
}

ModelParts TrainerBuilder::build_model(const ModelArgs& args) {
  // One stage without pipelining (a degree of -1 may have resolved to 1).
  if (const auto problem = config_.activation_checkpoint.stages_problem(1)) {
    throw_config_error(config_.origin(problem->key), problem->message);
  }
  const auto& spec = model_registry().get(config_.model.name);
  ModelParts parts;
  parts.push_back(std::make_shared<ModelPart>(
      spec.build(args, ChunkSpec{}, config_.training.seed), /*stage=*/0));
  return parts;
}

ApplierChain TrainerBuilder::build_appliers() {
  const auto enabled = enabled_parallelisms(config_, dims_);
  ApplierChain chain;
  // A step that two parallelisms place (check_replicas) runs once.
  const auto append_steps = [&](ChainPlace place) {
    for (const Parallelism* p : enabled) {
      if (p->place != place || !p->appliers) {
        continue;
      }
      for (const auto& step : p->appliers(config_, dims_)) {
        if (!chain.contains(step)) {
          chain.append(step);
        }
      }
    }
  };
  chain.append("to_device");
  append_steps(ChainPlace::kModel);
  if (config_.activation_checkpoint.mode != "none") {
    chain.append("activation_checkpoint");
  }
  if (mixed_precision_.param_cast()) {
    // Under fully_shard too: the gathered weights are then already in the
    // param dtype, and the casts return them as they are.
    chain.append("mixed_precision");
  }
  check_listed_appliers(config_);
  const std::string where = config_.origin("parallelism.appliers");
  for (const auto& name : config_.parallelism.appliers) {
    chain.append(name, where);
  }
  append_steps(ChainPlace::kData);
  return chain;
}

std::unique_ptr<torch::optim::Optimizer> TrainerBuilder::build_optimizer(
    ModelPart& part) {
  return optimizer_registry().get(
      config_.optimizer.name, config_.origin("optimizer.name"))(
      part.module().parameters(), config_);
}

std::unique_ptr<OptimizersContainer> TrainerBuilder::build_optimizers(
    const ModelParts& parts) {
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  parts.for_each(
      [&](ModelPart& part) { optimizers.push_back(build_optimizer(part)); });
  return std::make_unique<OptimizersContainer>(std::move(optimizers));
}

std::unique_ptr<LRScheduler> TrainerBuilder::build_lr_scheduler(
    torch::optim::Optimizer& optimizer) {
  return std::make_unique<LRScheduler>(
      optimizer,
      lr_schedule_registry().get(
          config_.lr_scheduler.name, config_.origin("lr_scheduler.name"))(
          config_.lr_scheduler, config_.training.steps));
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
  options.dp_rank = mesh().index("dp");
  options.dp_size = dims_.dp();
  options.sequence_split = parallel_sequence_split(config_, mesh());
  options.documents = t.document_mask;
  options.shuffle = t.dataset_shuffle;
  options.seed = static_cast<uint64_t>(t.seed);
  options.prefetch = t.dataset_prefetch;
  LOG_IF(INFO, log_facts())
      << "data: " << t.dataset
      << (options.dp_size > 1
              ? ", a shard for each of the " + std::to_string(options.dp_size) +
                    " data-parallel ranks"
              : std::string());
  return std::make_unique<DataLoader>(
      std::move(dataset), std::move(tokenizer), options);
}

std::unique_ptr<DataLoader> TrainerBuilder::build_validation_dataloader(
    std::shared_ptr<const Tokenizer> tokenizer) {
  const ValidationConfig& v = config_.validation;
  if (!v.enable) {
    return nullptr;
  }
  DatasetOptions dataset_options;
  dataset_options.path = v.dataset_path;
  dataset_options.text_field = v.dataset_text_field;
  auto dataset = dataset_registry().get(
      v.dataset, config_.origin("validation.dataset"))(dataset_options);
  const TrainingConfig& t = config_.training;
  DataLoaderOptions options(t.local_batch_size, t.seq_len);
  options.dp_rank = mesh().index("dp");
  options.dp_size = dims_.dp();
  options.sequence_split = parallel_sequence_split(config_, mesh());
  options.documents = t.document_mask;
  options.prefetch = 0;
  LOG_IF(INFO, log_facts())
      << "validation: " << v.dataset << " (" << v.dataset_path << "), "
      << v.steps << " batches every " << v.freq << " steps"
      << (options.dp_size > 1
              ? ", a shard for each of the " + std::to_string(options.dp_size) +
                    " data-parallel ranks"
              : std::string());
  return std::make_unique<DataLoader>(
      std::move(dataset), std::move(tokenizer), options);
}

LossFn TrainerBuilder::build_loss() {
  // Cross-entropy, unless an enabled parallelism splits the output (tensor
  // parallel's vocabulary-parallel loss).
  return parallel_loss(config_, mesh(), model_args_);
}

std::unique_ptr<TrainStep> TrainerBuilder::build_train_step(
    const ModelParts& parts, LossFn loss) {
  return std::make_unique<LocalTrainStep>(std::move(loss), mesh().loss());
}

std::unique_ptr<Checkpointer> TrainerBuilder::build_checkpointer(
    const ModelParts& parts,
    const OptimizersContainer& optimizers,
    const LRSchedulersContainer& schedulers,
    DataLoader* dataloader) {
  const CheckpointConfig& ck = config_.checkpoint;
  if (!ck.enable && !ck.model_only_export && ck.initial_load_hf.empty()) {
    return nullptr;
  }
  const auto& p = config_.parallelism;
  CheckpointLayout layout = CheckpointLayout::of(mesh());
  if (dims_.degree(kPipelineAxis) > 1) {
    layout.stages_per_rank = p.pipeline_parallel_stages_per_rank;
    layout.schedule = p.pipeline_parallel_schedule_csv.empty()
                          ? p.pipeline_parallel_schedule
                          : p.pipeline_parallel_schedule_csv;
  }
  // Saves may run in a background thread: they get a group of their own,
  // on Gloo (they exchange CPU tensors, also under NCCL), that waits for the
  // slowest writer rather than for comm.train_timeout_seconds.
  std::vector<int64_t> everyone(env_.world_size);
  std::iota(everyone.begin(), everyone.end(), 0);
  dist::GroupOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::seconds(ck.timeout_seconds);
  auto group = runtime_ ? runtime_->new_group(everyone, "checkpoint", options)
                        : dist::ProcessGroup::single("checkpoint", env_.rank);
  auto manager = std::make_unique<CheckpointManager>(
      ck,
      config_.job.dump_folder,
      parts,
      optimizers,
      schedulers,
      dataloader,
      std::move(layout),
      std::move(group),
      model_config_json(config_, model_args_, *tokenizer_));
  manager->set_tokenizer(tokenizer_);
  return manager;
}

std::unique_ptr<MetricsLogger> TrainerBuilder::build_metrics() {
  return std::make_unique<MetricsLogger>(
      config_.metrics,
      config_.job.dump_folder,
      /*is_logging_rank=*/env_.rank == 0,
      config_.training.steps);
}

}  // namespace baton
