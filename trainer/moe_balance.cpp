#include "trainer/moe_balance.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/moe.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"

namespace baton {

std::vector<models::MoEImpl*> moe_layers(const ModelParts& parts) {
  std::vector<models::MoEImpl*> out;
  parts.for_each([&](ModelPart& part) {
    for (const auto& module : part.module().modules(/*include_self=*/true)) {
      if (auto* moe = dynamic_cast<models::MoEImpl*>(module.get())) {
        out.push_back(moe);
      }
    }
  });
  return out;
}

MoeStepSummary balance_experts(
    ModelParts& parts,
    const std::shared_ptr<dist::ProcessGroup>& group,
    double bias_rate) {
  MoeStepSummary summary;
  const auto layers = moe_layers(parts);
  if (layers.empty()) {
    return summary;
  }
  // One exchange for every layer: its counts, tokens, weighted aux loss and
  // drops, in float64 (counts are exact well past 2^50).
  const int64_t experts = layers.front()->args().num_experts;
  std::vector<models::MoeStats> stats;
  std::vector<at::Tensor> rows;
  for (auto* layer : layers) {
    stats.push_back(layer->take_stats());
    const models::MoeStats& s = stats.back();
    rows.push_back(at::cat(
        {s.tokens_per_expert,
         at::tensor(
             {static_cast<double>(s.tokens),
              s.aux_loss_sum,
              static_cast<double>(s.dropped)},
             at::kDouble)}));
  }
  at::Tensor all = at::stack(rows);  // (layers, E + 3)
  if (group && group->size() > 1) {
    group->all_reduce(all);
  }
  // Under sequence parallel each rank routed a shard of its sequences: the
  // other shards' ranks (the same for every layer of the part) add theirs.
  if (const auto& over_shards = layers.front()->sum_over_sequence) {
    torch::NoGradGuard no_grad;
    all = over_shards(all);
  }
  summary.load_min = std::numeric_limits<double>::infinity();
  for (size_t l = 0; l < layers.size(); ++l) {
    const at::Tensor counts = all[l].narrow(0, 0, experts);
    const double tokens = all[l][experts].item<double>();
    const double aux = all[l][experts + 1].item<double>();
    summary.dropped += static_cast<int64_t>(all[l][experts + 2].item<double>());
    if (tokens <= 0.0) {
      continue;  // A layer that saw no tokens (an idle stage).
    }
    ++summary.layers;
    summary.aux_loss_sum += aux / tokens;
    const double mean = counts.mean().item<double>();
    const at::Tensor load = counts / mean;
    summary.load_min = std::min(summary.load_min, load.min().item<double>());
    summary.load_max = std::max(summary.load_max, load.max().item<double>());
    const double cv = counts.std(/*unbiased=*/false).item<double>() / mean;
    summary.load_cv_sum += cv;
    summary.load_cv_max = std::max(summary.load_cv_max, cv);
    models::MoEImpl* layer = layers[l];
    if (bias_rate > 0.0 && layer->expert_bias.defined()) {
      // Under-loaded experts up, over-loaded down, then centred: the
      // same counts on every rank, so the same bias.
      torch::NoGradGuard no_grad;
      const at::Tensor step = (mean - counts).sign() * bias_rate;
      at::Tensor& bias = layer->expert_bias;
      const at::Tensor moved = bias.to(at::kDouble) + step;
      bias.copy_((moved - moved.mean()).to(bias.dtype()));
    }
  }
  if (summary.layers == 0) {
    summary.load_min = 0.0;
  }
  return summary;
}

MoeStepSummary combine_moe_summary(
    const MoeStepSummary& mine,
    const std::shared_ptr<dist::ProcessGroup>& group) {
  if (!group || group->size() == 1) {
    return mine;
  }
  at::Tensor sums = at::tensor(
      {static_cast<double>(mine.layers),
       mine.aux_loss_sum,
       mine.load_cv_sum,
       static_cast<double>(mine.dropped)},
      at::kDouble);
  group->all_reduce(sums);
  // Ranks without MoE layers take no part in the extremes.
  const bool has = mine.layers > 0;
  at::Tensor maxima = at::tensor(
      {has ? -mine.load_min : -std::numeric_limits<double>::infinity(),
       has ? mine.load_max : -std::numeric_limits<double>::infinity(),
       has ? mine.load_cv_max : -std::numeric_limits<double>::infinity()},
      at::kDouble);
  group->all_reduce(maxima, dist::ReduceOp::kMax);
  MoeStepSummary out;
  out.layers = static_cast<int64_t>(sums[0].item<double>());
  out.aux_loss_sum = sums[1].item<double>();
  out.load_cv_sum = sums[2].item<double>();
  out.dropped = static_cast<int64_t>(sums[3].item<double>());
  if (out.layers > 0) {
    out.load_min = -maxima[0].item<double>();
    out.load_max = maxima[1].item<double>();
    out.load_cv_max = maxima[2].item<double>();
  }
  return out;
}

}  // namespace baton
