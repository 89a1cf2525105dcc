#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "models/hf_format.h"
#include "models/model_args.h"

namespace baton {

/// Which part of a model a chunk holds. Pipeline stages are chunks; without
/// pipelining the one chunk holds everything.
struct ChunkSpec {
  /// First transformer layer held (global index).
  int64_t first_layer = 0;
  /// One past the last layer held; -1 = through the last layer.
  int64_t end_layer = -1;
  /// Holds the token embedding (the first stage).
  bool embedding = true;
  /// Holds the final norm and output projection (the last stage).
  bool output = true;
};

/// Runs one unit of a chunk's forward its own way: fully sharded data
/// parallel gathers the unit's parameters before it and frees them after;
/// activation checkpointing keeps the input and recomputes in backward.
/// Appliers add wrappers (ModelChunk::wrap_unit); the model knows nothing of
/// what they do.
class UnitWrapper {
 public:
  virtual ~UnitWrapper() = default;
  /// Computes the unit on `input` by calling `run` (once, or again later to
  /// recompute) and returns its output.
  virtual at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) = 0;
};

/// A contiguous piece of a model: some layers, with or without the embedding
/// and the output. Parameter names are those of the whole model
/// (`layers.4.attention.wq.weight` in any chunk), whatever the split.
class ModelChunk : public torch::nn::Module {
 public:
  /// Token ids (B, T) int64 when the chunk holds the embedding, else hidden
  /// states (B, T, dim); returns logits (B, T, vocab) when it holds the
  /// output, else hidden states (B, T, dim).
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  /// What this chunk holds.
  virtual const ChunkSpec& spec() const = 0;
  /// The units of the forward, in the order it runs them: each block by its
  /// FQN prefix ("layers.4"), then "" for the root, the whole forward, whose
  /// own parameters are those outside every block (embedding, norm,
  /// output).
  virtual std::vector<std::string> unit_names() const = 0;
  /// Runs unit `name`'s forward through `wrapper` from now on. Wrappers of
  /// one unit nest: the first added is innermost. Throws
  /// std::invalid_argument for a name not in unit_names().
  virtual void wrap_unit(
      const std::string& name, std::shared_ptr<UnitWrapper> wrapper) = 0;
};

/// `run(input)` through `wrappers`, the first innermost (no wrappers: run).
at::Tensor run_wrapped(
    const std::vector<std::shared_ptr<UnitWrapper>>& wrappers,
    const std::function<at::Tensor(const at::Tensor&)>& run,
    const at::Tensor& input);

/// How tensor parallel cuts one parameter: the plan as plain data, read by
/// parallel/tensor_parallel (models/ holds no parallel code).
enum class TensorSplit {
  /// Output rows (dim 0) in even blocks: column-parallel (heads, hidden
  /// units).
  kColumn,
  /// Input columns (dim 1) in even blocks: row-parallel.
  kRow,
  /// Rows (dim 0) by the vocabulary's ranges: the embedding and output.
  kVocab,
};

/// One rule of a family's tensor-parallel plan: the parameters whose FQN
/// ends with `suffix` (".attention.wq.weight"), or is it
/// ("tok_embeddings.weight"), split as `split`. A parameter no rule names
/// is held whole by every tp rank (the norms), its gradient summed over tp.
struct TensorParallelRule {
  std::string suffix;
  TensorSplit split = TensorSplit::kColumn;
};

/// Everything the framework needs to know about one model family. A family
/// is one folder, models/<family>/, registered by name (`model.name`).
struct ModelSpec {
  /// Size presets by name.
  std::map<std::string, ModelArgs> flavors;
  /// Builds the chunk `chunk` of a model shaped `args`, initialised from
  /// `seed` so that any split gives bitwise the same weights.
  std::function<std::shared_ptr<ModelChunk>(
      const ModelArgs& args, const ChunkSpec& chunk, uint64_t seed)>
      build;
  /// The parameters a chunk holds (FQN, whole shape), in the module's
  /// order, without building it.
  std::function<std::vector<ParamShape>(
      const ModelArgs& args, const ChunkSpec& chunk)>
      parameter_shapes;
  /// Parameters of the whole model, without building it.
  std::function<int64_t(const ModelArgs& args)> num_params;
  /// Training FLOPs per token at `seq_len` (the numerator of MFU).
  std::function<double(const ModelArgs& args, int64_t seq_len)> flops_per_token;
  /// Its tensor-parallel plan; empty: tensor parallel refuses the family.
  std::vector<TensorParallelRule> tensor_parallel_plan;
  /// Its Hugging Face layout (checkpoint.initial_load_hf, export_format hf).
  HfFormat hf;
};

/// A ModelSpec for the pre-norm decoder of models/common (build,
/// parameter_shapes, num_params, flops_per_token and the tensor-parallel
/// plan of its modules), for a family to add its flavors and HF format to.
ModelSpec decoder_model_spec();

/// The rule of `plan` that cuts `fqn`, or null.
const TensorParallelRule* tensor_parallel_rule(
    const std::vector<TensorParallelRule>& plan, const std::string& fqn);

/// The model registry (`model.name`).
Registry<ModelSpec>& model_registry();

/// Registers the built-in families (`llama3`, `qwen3`); safe to call more
/// than once.
void register_builtin_models();

/// The flavor `flavor` of `spec`; throws ConfigError listing the flavors
/// (`where` prefixes the message, as in Registry::get).
const ModelArgs& model_flavor(
    const ModelSpec& spec,
    const std::string& flavor,
    const std::string& where = "");

}  // namespace baton
