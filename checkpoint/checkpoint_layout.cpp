#include <c10/util/Type.h>
#include <torch/optim/optimizer.h>

#include <algorithm>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"
#include "optim/optimizer_state.h"
#include "optim/optimizers.h"

// What a checkpoint knows of the layout and of the optimizer's state: who
// writes each tensor, and whether each state can be saved layout-free.

namespace baton {

using checkpoint_index::optimizer_fqn;

CheckpointLayout CheckpointLayout::of(const dist::ParallelMesh& mesh) {
  CheckpointLayout layout;
  layout.rank = mesh.rank();
  layout.world_size = mesh.dims().world_size;
  layout.axes = mesh.dims().axes;
  layout.coord = mesh.coord();
  layout.dp_rank = mesh.index("dp");
  layout.dp_size = mesh.dims().dp();
  return layout;
}

bool CheckpointLayout::writes(const std::vector<std::string>& split) const {
  return std::all_of(axes.begin(), axes.end(), [&](const MeshAxis& axis) {
    return axis.splits_model ||
           std::find(split.begin(), split.end(), axis.name) != split.end() ||
           coord.at(axis.name) == 0;
  });
}

std::vector<const OptimizerStateCodec*> checked_state_codecs(
    const ModelParts& parts, const OptimizersContainer& optimizers) {
  std::vector<const OptimizerStateCodec*> codecs;
  for (size_t i = 0; i < parts.size(); ++i) {
    const OptimizerStateCodec* codec = optimizer_state_codec(optimizers[i]);
    if (codec == nullptr) {
      throw CheckpointError(
          "[checkpoint] the optimizer of stage " +
          std::to_string(parts[i].stage()) + " (" +
          c10::demangle(typeid(optimizers[i]).name()) +
          ") has no registered state layout; allowed: an optimizer "
          "registered with register_optimizer_state (AdamW is)");
    }
    codecs.push_back(codec);
    for (const auto& item : parts[i].module().named_parameters()) {
      const ParamSlice* slice = parts[i].slice(item.key());
      if (slice == nullptr) {
        continue;
      }
      for (const OptimizerStateField& f : codec->fields) {
        if (!f.kept_dims || f.scalar()) {
          continue;
        }
        for (int64_t d = 0; d < item.value().dim(); ++d) {
          const bool kept =
              std::find(f.kept_dims->begin(), f.kept_dims->end(), d) !=
              f.kept_dims->end();
          if (!kept && item.value().size(d) != slice->global_shape.at(d)) {
            throw CheckpointError(
                "[checkpoint] " + optimizer_fqn(item.key(), f.name.c_str()) +
                " (" + codec->name + ") sums over dimension " +
                std::to_string(d) + " of '" + item.key() +
                "', which this layout splits across ranks: it cannot be "
                "saved so that another layout loads it; allowed: a layout "
                "that keeps that dimension whole, or an optimizer whose "
                "state keeps it");
          }
        }
      }
    }
  }
  return codecs;
}

}  // namespace baton
