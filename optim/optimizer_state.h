#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace baton {

/// One field of an optimizer's per-parameter state, as checkpoints save it
/// (`optimizer.<fqn>.<name>`).
struct OptimizerStateField {
  std::string name;
  /// The parameter dimensions the field keeps, in order: nothing set for a
  /// state shaped like its parameter (AdamW's moments), {} for a scalar (a
  /// step count), some for a factored statistic (Adafactor's row and
  /// column moments keep {0} and {1}). A checkpoint slices the field as its
  /// parameter along the kept dimensions; a dimension it sums over must not
  /// be split by the layout, or the state cannot be saved (an error names
  /// it).
  std::optional<std::vector<int64_t>> kept_dims;
  /// Its dtype; nothing set: its parameter's.
  std::optional<at::ScalarType> dtype;

  /// The field's shape for a parameter (or slice) shaped `param`.
  std::vector<int64_t> shape_of(const std::vector<int64_t>& param) const;
  /// A scalar: kept_dims set and empty.
  bool scalar() const {
    return kept_dims && kept_dims->empty();
  }
};

/// How checkpoints read and rebuild one optimizer type's per-parameter
/// state, field by field, so any registered optimizer is saved and
/// resharded like the weights.
struct OptimizerStateCodec {
  /// For messages and the index ("AdamW").
  std::string name;
  std::vector<OptimizerStateField> fields;
  /// The state's tensors, one per field, shaped as the fields say for
  /// `param`; `state` is null before the parameter's first step: what the
  /// optimizer would start from.
  std::function<std::vector<at::Tensor>(
      const torch::optim::OptimizerParamState* state, const at::Tensor& param)>
      read;
  /// The state rebuilt from the fields' tensors, on `param`'s device.
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(
      const std::vector<at::Tensor>& fields, const at::Tensor& param)>
      make;
};

/// Registers how the state of the optimizer type `type` (a
/// torch::optim::Optimizer subclass, matched by dynamic type) is
/// checkpointed. Registering a type twice is a programming error.
void register_optimizer_state(std::type_index type, OptimizerStateCodec codec);
/// The codec of `optimizer`'s dynamic type, or null.
const OptimizerStateCodec* optimizer_state_codec(
    const torch::optim::Optimizer& optimizer);

}  // namespace baton
