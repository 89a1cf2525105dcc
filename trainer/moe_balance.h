#pragma once

// The load balance of a mixture-of-experts model between optimizer steps:
// each MoE layer's step statistics (models/moe.h) summed over the ranks
// that trained the layer on different tokens, the routing bias moved
// towards balance (DeepSeek-V3's auxiliary-loss-free update, as
// torchtitan's _update_expert_bias does it before the optimizer step), and
// the summary the metrics log.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace baton {

class ModelParts;
namespace dist {
class ProcessGroup;
}

/// One step's routing, over this rank's MoE layers; combine() folds in
/// other pipeline ranks' so the logging rank reports every layer.
struct MoeStepSummary {
  /// MoE layers summarised.
  int64_t layers = 0;
  /// Sum over layers of each layer's token-weighted auxiliary loss.
  double aux_loss_sum = 0.0;
  /// Over every layer and expert: the least and most tokens an expert got,
  /// as a fraction of its layer's mean (1 at perfect balance).
  double load_min = 0.0;
  double load_max = 0.0;
  /// Sum and largest over layers of the coefficient of variation of the
  /// tokens per expert (0 at perfect balance).
  double load_cv_sum = 0.0;
  double load_cv_max = 0.0;
  /// Token-expert pairs dropped past an expert's capacity.
  int64_t dropped = 0;

  /// The mean over layers of the auxiliary loss and of the load CV.
  double aux_loss() const {
    return layers > 0 ? aux_loss_sum / static_cast<double>(layers) : 0.0;
  }
  double load_cv() const {
    return layers > 0 ? load_cv_sum / static_cast<double>(layers) : 0.0;
  }
};

namespace models {
class MoEImpl;
}

/// Every mixture-of-experts layer of `parts`, in module order.
std::vector<models::MoEImpl*> moe_layers(const ModelParts& parts);

/// For every MoE layer of `parts`: its statistics since the last call, the
/// tokens per expert summed over `group` (the ranks that train the same
/// layers on other tokens; null: this rank alone), so every rank sees the
/// same counts; where the layer has a routing bias and `bias_rate` > 0, the
/// bias moved by bias_rate x sign(mean load - the expert's load) and
/// centred to mean 0 (identical on every rank). Returns the summary; no
/// MoE layer: layers 0.
MoeStepSummary balance_experts(
    ModelParts& parts,
    const std::shared_ptr<dist::ProcessGroup>& group,
    double bias_rate);

/// `mine` combined over `group` (the pipeline ranks: each holds other
/// layers): layers, sums and dropped added, minima and maxima taken.
MoeStepSummary combine_moe_summary(
    const MoeStepSummary& mine,
    const std::shared_ptr<dist::ProcessGroup>& group);

}  // namespace baton
