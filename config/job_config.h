#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/error.h"

namespace baton {

/// What a config field accepts. Sections describe their fields with it in
/// `visit`, so decoding, validation, messages and --print-config share one
/// table. Chained setters, as in torch::nn options.
struct FieldSpec {
  explicit FieldSpec(std::string help) : help(std::move(help)) {}

  /// Numbers must be >= `v`.
  FieldSpec& at_least(double v) {
    min = v;
    return *this;
  }
  /// Numbers must be > `v`.
  FieldSpec& greater_than(double v) {
    min = v;
    min_exclusive = true;
    return *this;
  }
  /// Numbers must be <= `v`.
  FieldSpec& at_most(double v) {
    max = v;
    return *this;
  }
  /// Numbers must be < `v`.
  FieldSpec& less_than(double v) {
    max = v;
    max_exclusive = true;
    return *this;
  }
  /// Strings must be one of `values` (matched case-insensitively, stored as
  /// spelled here).
  FieldSpec& one_of(std::vector<std::string> values) {
    choices = std::move(values);
    return *this;
  }
  /// Strings (or each string of a list) must be names in the registry of
  /// `kind` ("optimizer"), matched case-insensitively: checked when that
  /// registry exists in the process (the binary registers its built-ins
  /// before it reads the config; a registry look-up at build time checks
  /// the rest).
  FieldSpec& registered_in(const char* kind) {
    registry = kind;
    return *this;
  }
  /// Lists must have exactly `n` elements.
  FieldSpec& length(size_t n) {
    exact_length = n;
    return *this;
  }
  /// The integer is the degree of a mesh axis (>= 1, or -1 for the rest of
  /// the world in at most one such key): checked together with the other
  /// such keys (degrees_problem); a parallelism's MeshAxisSpec names it.
  FieldSpec& mesh_degree() {
    is_mesh_degree = true;
    min = -1;
    return *this;
  }

  /// One line shown by --print-config and in errors.
  std::string help;
  std::optional<double> min;
  bool min_exclusive = false;
  std::optional<double> max;
  bool max_exclusive = false;
  std::vector<std::string> choices;
  /// A registry kind, or null.
  const char* registry = nullptr;
  std::optional<size_t> exact_length;
  bool is_mesh_degree = false;
};

/// The value of a field of a registered section (SectionField).
using ConfigValue =
    std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

/// One key of a registered section: its name, its default (whose type is
/// the field's type) and what it accepts.
struct SectionField {
  std::string name;
  ConfigValue value;
  FieldSpec spec;
};

/// A config section that an extension registers (a parallelism's own keys,
/// register_config_section) rather than a struct of JobConfig: decoded,
/// checked, printed by --print-config and named in errors like the built-in
/// sections.
struct RegisteredSection {
  std::vector<SectionField> fields;

  template <class V>
  void visit(V&& v) {
    for (auto& field : fields) {
      std::visit(
          [&](auto& value) { v(field.name.c_str(), value, field.spec); },
          field.value);
    }
  }
  /// Whether the section has the key `key`.
  bool has(const std::string& key) const;
  /// The value of `key` as a T; throws std::logic_error naming the key when
  /// there is none or it holds another type.
  template <class T>
  const T& get(const std::string& key) const {
    const T* typed = std::get_if<T>(&value(key));
    if (typed == nullptr) {
      throw std::logic_error(
          "[RegisteredSection] " + key +
          ": read as another type than registered");
    }
    return *typed;
  }
  /// The value of `key`; throws std::logic_error when there is none.
  const ConfigValue& value(const std::string& key) const;
};

/// Registers `fields` (with their defaults) under the section `name`, a new
/// one or `parallelism` (where parallelisms put their degrees), before
/// configs that use them are loaded: configs made after it accept, print
/// and check those keys. Each field joins the section once; registering it
/// again the same is a no-op; another built-in section, a built-in key or
/// a key registered otherwise is a programming error (std::logic_error).
void register_config_section(
    const std::string& name, std::vector<SectionField> fields);

// Every section is a plain struct with inline defaults and a `visit` that
// names each field once: `v(name, field, spec)`. Field types are int64_t,
// double, bool, std::string, std::optional<double>, std::vector<double>,
// std::vector<int64_t>, std::vector<std::string> and
// std::vector<std::vector<std::string>>.
// ARCHITECTURE.md §4 lists the keys.

/// `job:` section.
struct JobSection {
  /// Where metrics.jsonl and checkpoints go.
  std::string dump_folder = "./outputs";
  std::string description = "";

  template <class V>
  void visit(V&& v) {
    v("dump_folder",
      dump_folder,
      FieldSpec("folder for metrics.jsonl and checkpoints"));
    v("description", description, FieldSpec("free text shown in the log"));
  }
};

/// `model:` section.
struct ModelConfig {
  std::string name = "llama3";
  std::string flavor = "debugmodel";
  std::string tokenizer = "bytes";
  std::string tokenizer_path = "";

  template <class V>
  void visit(V&& v) {
    v("name", name, FieldSpec("registered model name").registered_in("model"));
    v("flavor", flavor, FieldSpec("model size preset of that model"));
    v("tokenizer",
      tokenizer,
      FieldSpec("registered tokenizer").registered_in("tokenizer"));
    v("tokenizer_path",
      tokenizer_path,
      FieldSpec("tokenizer model file (sentencepiece: .model, tiktoken: "
                "Llama 3's tokenizer.model; not used by bytes)"));
  }
};

/// `optimizer:` section.
struct OptimizerConfig {
  std::string name = "AdamW";
  double lr = 8e-4;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;

  template <class V>
  void visit(V&& v) {
    v("name",
      name,
      FieldSpec("registered optimizer").registered_in("optimizer"));
    v("lr", lr, FieldSpec("peak learning rate").greater_than(0));
    v("betas",
      betas,
      FieldSpec("Adam betas [beta1, beta2]")
          .at_least(0)
          .less_than(1)
          .length(2));
    v("eps", eps, FieldSpec("Adam epsilon").greater_than(0));
    v("weight_decay",
      weight_decay,
      FieldSpec("decoupled weight decay").at_least(0));
  }
};

/// `lr_scheduler:` section: the registered schedule and the parameters of
/// warmup_stable_decay (linear warmup, optional stable phase, decay).
struct LRSchedulerConfig {
  std::string name = "warmup_stable_decay";
  int64_t warmup_steps = 200;
  /// Fraction of training.steps spent decaying; unset = every step after
  /// warmup decays (no stable phase).
  std::optional<double> decay_ratio;
  std::string decay_type = "linear";
  double min_lr_factor = 0.0;

  /// Steps of decay at the end of `training_steps`: decay_ratio of them, or
  /// every step after warmup when decay_ratio is unset; 0 when warmup is
  /// longer than the run.
  int64_t decay_steps(int64_t training_steps) const;
  /// Why warmup and decay do not fit in `training_steps`; nothing when they
  /// do. The config check and the schedule both ask it. A warmup longer
  /// than the run is not a problem but a warning (phases_warning).
  std::optional<ConfigProblem> phases_problem(int64_t training_steps) const;
  /// A warning when warmup is longer than `training_steps`: the run then
  /// warms up at the configured slope for all its steps (as torchtitan
  /// does), never reaching the full rate nor decaying; nothing otherwise.
  std::optional<ConfigProblem> phases_warning(int64_t training_steps) const;

  template <class V>
  void visit(V&& v) {
    v("name",
      name,
      FieldSpec("registered LR schedule").registered_in("lr schedule"));
    v("warmup_steps",
      warmup_steps,
      FieldSpec("steps of linear warmup").at_least(0));
    v("decay_ratio",
      decay_ratio,
      FieldSpec("fraction of steps that decay (null: all after warmup)")
          .at_least(0)
          .at_most(1));
    v("decay_type",
      decay_type,
      FieldSpec("decay curve").one_of({"linear", "sqrt", "cosine"}));
    v("min_lr_factor",
      min_lr_factor,
      FieldSpec("final lr as a fraction of lr").at_least(0).at_most(1));
  }
};

/// `training:` section.
struct TrainingConfig {
  std::string dataset = "kjv";
  std::string dataset_path = "";
  std::string dataset_text_field = "text";
  bool dataset_shuffle = false;
  /// Batches prepared ahead by a background thread; 0 = none.
  int64_t dataset_prefetch = 2;
  int64_t local_batch_size = 8;
  int64_t seq_len = 2048;
  /// Document masking: packed documents attend only within themselves
  /// (block-causal; Batch::documents, models/common/block_attention.h).
  bool document_mask = false;
  int64_t steps = 10000;
  /// Gradient clipping threshold on the global grad norm; 0 disables it.
  double max_norm = 1.0;
  int64_t gradient_accumulation_steps = 1;
  int64_t seed = 0;
  bool deterministic = false;
  /// Intra-op threads; 0 = cores / local ranks.
  int64_t num_threads = 0;
  /// Mixed precision: the dtype forward and backward compute in (the
  /// master weights and optimizer state stay float32). auto: bfloat16 on
  /// CUDA; on the CPU bfloat16 only where a start-up probe measures its
  /// matmul faster than float32's.
  std::string mixed_precision_param = "auto";
  /// The dtype gradients are reduced in across data-parallel ranks.
  std::string mixed_precision_reduce = "float32";

  template <class V>
  void visit(V&& v) {
    v("dataset",
      dataset,
      FieldSpec("registered dataset name").registered_in("dataset"));
    v("dataset_path",
      dataset_path,
      FieldSpec("dataset file, folder or glob (empty: the dataset's "
                "default)"));
    v("dataset_text_field",
      dataset_text_field,
      FieldSpec("JSON Lines field holding each document's text"));
    v("dataset_shuffle",
      dataset_shuffle,
      FieldSpec("shuffle each rank's documents per epoch (seeded by seed)"));
    v("dataset_prefetch",
      dataset_prefetch,
      FieldSpec("batches a background thread prepares ahead (0: none)")
          .at_least(0));
    v("local_batch_size",
      local_batch_size,
      FieldSpec("sequences per rank per micro-step").at_least(1));
    v("seq_len", seq_len, FieldSpec("tokens per sequence").at_least(1));
    v("document_mask",
      document_mask,
      FieldSpec("packed documents attend only within themselves "
                "(block-causal attention) instead of across a sequence"));
    v("steps", steps, FieldSpec("optimizer steps to train").at_least(1));
    v("max_norm",
      max_norm,
      FieldSpec("gradient clipping norm (0: no clipping)").at_least(0));
    v("gradient_accumulation_steps",
      gradient_accumulation_steps,
      FieldSpec("micro-steps per optimizer step").at_least(1));
    v("seed",
      seed,
      FieldSpec("seed of initialisation and data order").at_least(0));
    v("deterministic",
      deterministic,
      FieldSpec("use deterministic algorithms only"));
    v("num_threads",
      num_threads,
      FieldSpec("intra-op threads (0: cores / local ranks)").at_least(0));
    v("mixed_precision_param",
      mixed_precision_param,
      FieldSpec("dtype of forward and backward compute, weights kept "
                "float32 (auto: bfloat16 on CUDA, on the CPU where measured "
                "faster)")
          .one_of({"auto", "bfloat16", "float32"}));
    v("mixed_precision_reduce",
      mixed_precision_reduce,
      FieldSpec("dtype of the data-parallel gradient reductions")
          .one_of({"float32", "bfloat16"}));
  }
};

/// `parallelism:` section.
struct ParallelismConfig {
  int64_t data_parallel_replicate_degree = 1;
  int64_t data_parallel_shard_degree = 1;
  /// Size of the gradient all-reduce buckets of data parallel, as DDP's
  /// bucket_cap_mb.
  double data_parallel_bucket_size_mb = 25.0;
  int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";
  int64_t pipeline_parallel_stages_per_rank = 1;
  /// 0 = spread the layers evenly over the stages.
  int64_t pipeline_parallel_layers_per_stage = 0;
  std::vector<std::vector<std::string>> pipeline_parallel_module_fqns_per_stage;
  int64_t pipeline_parallel_microbatch_size = 1;
  std::string pipeline_parallel_schedule_csv = "";
  std::string pipeline_parallel_trace = "";
  /// When fully sharded data parallel frees a unit's gathered parameters
  /// after its forward: default (free without pipelining, keep for
  /// pipeline stages), always, never.
  std::string fsdp_reshard_after_forward = "default";
  /// Registered appliers run on every model part after the built-in
  /// model-changing steps and before data parallel, in this order.
  std::vector<std::string> appliers;
  /// The keys registered parallelisms add to the section
  /// (register_config_section("parallelism", ...)): tensor parallel's
  /// degree, ...
  RegisteredSection registered;

  template <class V>
  void visit(V&& v) {
    v("data_parallel_replicate_degree",
      data_parallel_replicate_degree,
      FieldSpec("DDP replicas (-1: the rest of the world)").mesh_degree());
    v("data_parallel_shard_degree",
      data_parallel_shard_degree,
      FieldSpec("FSDP shards (-1: the rest of the world; left unset, it takes "
                "what the other degrees leave)")
          .mesh_degree());
    v("data_parallel_bucket_size_mb",
      data_parallel_bucket_size_mb,
      FieldSpec("MiB per gradient all-reduce bucket").greater_than(0));
    v("pipeline_parallel_degree",
      pipeline_parallel_degree,
      FieldSpec("pipeline ranks").mesh_degree());
    v("pipeline_parallel_schedule",
      pipeline_parallel_schedule,
      FieldSpec("pipeline schedule name").registered_in("schedule"));
    v("pipeline_parallel_stages_per_rank",
      pipeline_parallel_stages_per_rank,
      FieldSpec("model chunks per pipeline rank").at_least(1));
    v("pipeline_parallel_layers_per_stage",
      pipeline_parallel_layers_per_stage,
      FieldSpec("transformer layers per stage (0: even split)").at_least(0));
    v("pipeline_parallel_module_fqns_per_stage",
      pipeline_parallel_module_fqns_per_stage,
      FieldSpec("explicit list of module FQNs per stage"));
    v("pipeline_parallel_microbatch_size",
      pipeline_parallel_microbatch_size,
      FieldSpec("sequences per pipeline microbatch").at_least(1));
    v("pipeline_parallel_schedule_csv",
      pipeline_parallel_schedule_csv,
      FieldSpec("CSV file with a custom schedule"));
    v("pipeline_parallel_trace",
      pipeline_parallel_trace,
      FieldSpec("Chrome traces of the executed and simulated schedule: true "
                "(<dump_folder>/pipeline_trace.*.json) or a path prefix"));
    v("fsdp_reshard_after_forward",
      fsdp_reshard_after_forward,
      FieldSpec("free a unit's gathered parameters after its forward "
                "(default: without pipelining only)")
          .one_of({"default", "always", "never"}));
    v("appliers",
      appliers,
      FieldSpec("registered appliers run on every model part before data "
                "parallel, in order")
          .registered_in("applier"));
    registered.visit(v);
  }
};

/// `activation_checkpoint:` section: which transformer blocks keep only
/// their input and recompute their forward in backward.
struct ActivationCheckpointConfig {
  /// none, full (every block) or selective (see `selective`).
  std::string mode = "none";
  /// With mode selective: layer (every selective_every-th block, fully) or
  /// op (every block keeps its matmul and attention outputs and recomputes
  /// the cheap ops between them).
  std::string selective = "layer";
  /// With selective layer: checkpoint blocks whose index in the model is a
  /// multiple of this minus one (1: every block, 2: every other block).
  int64_t selective_every = 2;
  /// The pipeline stages (global indices) whose blocks checkpoint with
  /// `mode`; empty = every stage. Early stages hold the most microbatches
  /// in flight, so checkpointing only them saves the most per recompute.
  std::vector<int64_t> stages;

  /// Why `stages` does not fit a pipeline of `num_stages` (a duplicate or
  /// an index outside [0, num_stages)); nothing when it fits. num_stages
  /// 0: not known yet, only duplicates are problems. The config check and
  /// the builders (which know the schedule's stages) both ask it.
  std::optional<ConfigProblem> stages_problem(int64_t num_stages) const;

  template <class V>
  void visit(V&& v) {
    v("mode",
      mode,
      FieldSpec("activation checkpointing of the transformer blocks")
          .one_of({"none", "full", "selective"}));
    v("selective",
      selective,
      FieldSpec("with mode selective: whole blocks every selective_every "
                "(layer) or the cheap ops of every block (op)")
          .one_of({"layer", "op"}));
    v("selective_every",
      selective_every,
      FieldSpec("with selective layer: checkpoint every k-th block")
          .at_least(1));
    v("stages",
      stages,
      FieldSpec("pipeline stages (global indices) that checkpoint with mode; "
                "empty: every stage")
          .at_least(0));
  }
};

/// `checkpoint:` section.
struct CheckpointConfig {
  bool enable = false;
  std::string folder = "checkpoint";
  int64_t interval = 500;
  /// 0 keeps every checkpoint.
  int64_t keep_latest_k = 0;
  /// -1 = the latest.
  int64_t load_step = -1;
  bool model_only_export = false;
  std::string export_dtype = "float32";
  /// baton: Baton's FQNs and config.json; hf: a Hugging Face Llama folder.
  std::string export_format = "baton";
  /// A Hugging Face Llama folder to start from when there is no checkpoint
  /// to resume ("" = none).
  std::string initial_load_hf;
  bool async = false;
  int64_t timeout_seconds = 1800;
  /// After SIGTERM or SIGUSR1; 0 = no limit.
  int64_t preemption_grace_seconds = 120;

  template <class V>
  void visit(V&& v) {
    v("enable", enable, FieldSpec("save and resume checkpoints"));
    v("folder", folder, FieldSpec("checkpoint folder inside job.dump_folder"));
    v("interval", interval, FieldSpec("steps between saves").at_least(1));
    v("keep_latest_k",
      keep_latest_k,
      FieldSpec("checkpoints kept (0: all)").at_least(0));
    v("load_step",
      load_step,
      FieldSpec("step to resume (-1: latest)").at_least(-1));
    v("model_only_export",
      model_only_export,
      FieldSpec("export the weights alone at the end"));
    v("export_dtype",
      export_dtype,
      FieldSpec("dtype of the exported weights")
          .one_of({"float32", "bfloat16", "float16"}));
    v("export_format",
      export_format,
      FieldSpec("the export's layout: Baton's names or Hugging Face Llama's")
          .one_of({"baton", "hf"}));
    v("initial_load_hf",
      initial_load_hf,
      FieldSpec("Hugging Face Llama folder to start from when there is no "
                "checkpoint to resume"));
    v("async", async, FieldSpec("save in a background thread"));
    v("timeout_seconds",
      timeout_seconds,
      FieldSpec("how long ranks wait for each other during a save or load")
          .at_least(1));
    v("preemption_grace_seconds",
      preemption_grace_seconds,
      FieldSpec("after SIGTERM or SIGUSR1: how long the run may take to stop "
                "and save before it exits at once (0: no limit)")
          .at_least(0));
  }
};

/// `metrics:` section.
struct MetricsConfig {
  int64_t log_freq = 10;
  bool jsonl = true;
  bool tensorboard = false;
  /// Peak TFLOP/s for MFU; 0 = the GPU's published peak, else a matmul
  /// probe at start-up.
  double peak_tflops = 0.0;
  /// How much reaches the console (common/logging.h).
  std::string log_level = "info";

  template <class V>
  void visit(V&& v) {
    v("log_freq", log_freq, FieldSpec("steps between log lines").at_least(1));
    v("jsonl", jsonl, FieldSpec("write <dump_folder>/metrics.jsonl"));
    v("tensorboard",
      tensorboard,
      FieldSpec("write TensorBoard event files in <dump_folder>/tensorboard"));
    v("peak_tflops",
      peak_tflops,
      FieldSpec("peak TFLOP/s for MFU (0: a known GPU's published dense "
                "peak, else measured at start-up)")
          .at_least(0));
    v("log_level",
      log_level,
      FieldSpec("what reaches the console: debug, info, progress (steps, "
                "phases, warnings) or warning")
          .one_of({"debug", "info", "progress", "warning"}));
  }
};

/// `moe:` section: how a mixture-of-experts model (a flavor with experts)
/// trains; its shape is the flavor's.
struct MoeConfig {
  /// The auxiliary load-balancing loss's coefficient (transformers'
  /// router_aux_loss_coef): the objective adds coeff x each MoE layer's
  /// loss, token-weighted; 0: measured for the metrics only.
  double aux_loss_coeff = 0.0;
  /// DeepSeek-V3's auxiliary-loss-free balance: before each optimizer step
  /// a routing bias (flavors that have one) moves by this much towards the
  /// step's under-loaded experts (torchtitan's load_balance_coeff); 0: off.
  double bias_update_rate = 1e-3;
  /// Each expert takes at most ceil(capacity_factor x N x top_k / E) of
  /// the rows a forward routes on a rank (N its tokens there), those with
  /// the highest scores; the rest are dropped (the token keeps its other
  /// experts and the residual). 0: no capacity, nothing dropped.
  double capacity_factor = 0.0;
  /// How a rank multiplies its experts' rows: auto (ATen's grouped matmul
  /// wherever it takes the tensors: CUDA's CUTLASS kernel, and on the CPU
  /// faster than the loop in float32 and bfloat16 alike; else the loop) or
  /// loop (one product per expert).
  std::string expert_products = "auto";

  template <class V>
  void visit(V&& v) {
    v("aux_loss_coeff",
      aux_loss_coeff,
      FieldSpec("coefficient of the auxiliary load-balancing loss (0: "
                "measured, not trained on)")
          .at_least(0));
    v("bias_update_rate",
      bias_update_rate,
      FieldSpec("step of the routing bias towards balance before each "
                "optimizer step, for flavors with a routing bias (0: off)")
          .at_least(0));
    v("capacity_factor",
      capacity_factor,
      FieldSpec("each expert takes at most capacity_factor x tokens x top_k "
                "/ experts of a forward's rows on a rank, the best-scored; "
                "the rest are dropped (0: no capacity, none dropped)")
          .at_least(0));
    v("expert_products",
      expert_products,
      FieldSpec("how the experts' products run: auto (ATen's grouped "
                "matmul where it takes the tensors, else a product per "
                "expert) or loop (a product per expert)")
          .one_of({"auto", "loop"}));
  }
};

/// `validation:` section: a held-out loss every `freq` steps.
struct ValidationConfig {
  bool enable = false;
  std::string dataset = "kjv";
  /// The held-out data; required with enable, and not the training's.
  std::string dataset_path = "";
  std::string dataset_text_field = "text";
  int64_t freq = 100;
  /// Batches per validation: each data-parallel rank's local_batch_size x
  /// seq_len, as a training micro-step's.
  int64_t steps = 10;

  template <class V>
  void visit(V&& v) {
    v("enable", enable, FieldSpec("compute a held-out loss every freq steps"));
    v("dataset",
      dataset,
      FieldSpec("registered dataset name of the held-out data")
          .registered_in("dataset"));
    v("dataset_path",
      dataset_path,
      FieldSpec("held-out file, folder or glob (required with enable; not "
                "the training data)"));
    v("dataset_text_field",
      dataset_text_field,
      FieldSpec("JSON Lines field holding each document's text"));
    v("freq", freq, FieldSpec("steps between validations").at_least(1));
    v("steps",
      steps,
      FieldSpec("batches per validation (local_batch_size x seq_len each, "
                "per data-parallel rank)")
          .at_least(1));
  }

  /// The problem of enable without a dataset_path, or one that reads the
  /// training data (`training`'s dataset and path); nothing when disabled.
  std::optional<ConfigProblem> data_problem(
      const TrainingConfig& training) const;
};

/// `comm:` section.
struct CommConfig {
  std::string backend = "auto";
  int64_t init_timeout_seconds = 300;
  int64_t train_timeout_seconds = 100;
  /// Collectives, P2P operations and pipeline actions each rank keeps, and
  /// writes to <job.dump_folder>/flight_recorder/rank<N>.json when one
  /// times out (docs/launching.md, "Hang reports"); 0: none.
  int64_t flight_recorder_entries = 512;

  template <class V>
  void visit(V&& v) {
    v("backend",
      backend,
      FieldSpec("collective backend").one_of({"auto", "gloo", "nccl"}));
    v("init_timeout_seconds",
      init_timeout_seconds,
      FieldSpec("rendezvous timeout").at_least(1));
    v("train_timeout_seconds",
      train_timeout_seconds,
      FieldSpec("collective timeout after the first step").at_least(1));
    v("flight_recorder_entries",
      flight_recorder_entries,
      FieldSpec("operations each rank keeps for its hang report (0: none)")
          .at_least(0));
  }
};

/// The whole job: decoded from YAML once, validated, then passed down by
/// const reference. No YAML types leave config/job_config.cpp, config_file.cpp
/// and config/job_config_print.cpp.
struct JobConfig {
  /// Every built-in section at its defaults, and each section registered
  /// so far (register_config_section) at its defaults.
  JobConfig();

  /// Registered trainer builder; "auto" picks one from the parallelism.
  std::string builder = "auto";
  /// Shared libraries that extend Baton (docs/extending.md), absolute: a
  /// file's relative to its folder, an override's to the working folder.
  /// The binary loads them before it loads the config (plugin_paths).
  std::vector<std::string> plugins;
  JobSection job;
  ModelConfig model;
  OptimizerConfig optimizer;
  LRSchedulerConfig lr_scheduler;
  TrainingConfig training;
  ParallelismConfig parallelism;
  ActivationCheckpointConfig activation_checkpoint;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ValidationConfig validation;
  CommConfig comm;
  MoeConfig moe;
  /// The registered sections, by name, as loaded (after the built-in ones
  /// in the file, printed in name order).
  std::map<std::string, RegisteredSection> sections;

  /// Where each key was last set: "file.yaml:12" or "--section.key=value".
  /// Keys left at their default are absent. Lets later checks (registry
  /// look-ups) point at the line to fix.
  std::map<std::string, std::string> origins;

  /// The origin of `key_path` ("model.flavor"), or "" when it is a default.
  std::string origin(const std::string& key_path) const;
  /// The origin of the first of `keys` that was set, for messages about a
  /// combination of keys; "" when none was.
  std::string first_origin(std::initializer_list<const char*> keys) const;
  /// The registered section `name` as loaded, or its registered defaults
  /// when it was registered after this config was made; throws
  /// std::logic_error when no section of that name is registered.
  const RegisteredSection& section(const std::string& name) const;
  /// The integer at `key_path` ("parallelism.tensor_parallel_degree",
  /// "toy.degree"), in a built-in or registered section; nothing when there
  /// is no such key or it is not an integer.
  std::optional<int64_t> integer(const std::string& key_path) const;
  /// Adds the sections and keys registered since this config was made, at
  /// their defaults (what is set stays).
  void add_registered_keys();
  /// Sets the integer at `key_path` (a key registered after this config was
  /// made joins it); throws std::logic_error when there is no such integer
  /// key.
  void set_integer(const std::string& key_path, int64_t value);
  /// Every key marked mesh_degree() with its value, in visit order.
  std::vector<std::pair<std::string, int64_t>> mesh_degrees() const;

  /// Calls `v(name, section)` for each section in file order.
  template <class V>
  void visit_sections(V&& v) {
    v("job", job);
    v("model", model);
    v("optimizer", optimizer);
    v("lr_scheduler", lr_scheduler);
    v("training", training);
    v("parallelism", parallelism);
    v("activation_checkpoint", activation_checkpoint);
    v("checkpoint", checkpoint);
    v("metrics", metrics);
    v("validation", validation);
    v("comm", comm);
    v("moe", moe);
    for (auto& [name, section] : sections) {
      v(name.c_str(), section);
    }
  }
};

/// Loads `path` (empty: all defaults), applies `overrides` in order (each
/// "section.key=value", the value parsed as YAML), then validates. Throws
/// ConfigError (exit code 2) with one message naming the file and line (or
/// the override), the key path, the bad value and what is allowed; unknown
/// keys get a "did you mean" when one is close. A value that needs a feature
/// Baton does not have yet fails saying so.
JobConfig load_job_config(
    const std::string& path, const std::vector<std::string>& overrides = {});

/// Loads each of `paths` in order over the same config (a later file sets
/// only the keys it names, over the earlier files'), then applies
/// `overrides` and validates, as the one-file form does.
JobConfig load_job_config(
    const std::vector<std::string>& paths,
    const std::vector<std::string>& overrides);

/// The `plugins:` of `paths` and `overrides` as load_job_config would
/// resolve them (the last file or override that names the key wins),
/// without decoding anything else: what a plugin registers must be known
/// before the rest is checked. Throws ConfigError as load_job_config does.
std::vector<std::string> plugin_paths(
    const std::vector<std::string>& paths,
    const std::vector<std::string>& overrides);

/// The effective config as YAML (every key, defaults included), loadable back.
std::string job_config_to_yaml(const JobConfig& config);

}  // namespace baton
