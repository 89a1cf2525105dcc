#include "parallel/grad_norm.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"

namespace baton {

namespace {

using DimSet = std::vector<std::string>;

/// Sorted, so that the same set marked in another order is one key.
DimSet canonical(DimSet dims) {
  std::sort(dims.begin(), dims.end());
  return dims;
}

}  // namespace

double grad_norm(const ModelParts& parts, const dist::ParallelMesh& mesh) {
  torch::NoGradGuard no_grad;
  // This rank's sum of squares per set of dimensions its gradients are
  // split along; {} = gradients this rank holds whole.
  std::map<DimSet, at::Tensor> squares;
  squares[{}] = at::zeros({}, at::kDouble);
  parts.for_each([&](ModelPart& part) {
    for (const auto& item : part.module().named_parameters()) {
      // The set is counted even without a gradient, so that the ranks of a
      // group agree on what they reduce.
      auto& sum = squares[canonical(part.grad_split(item.key()))];
      if (!sum.defined()) {
        sum = at::zeros({}, at::kDouble);
      }
      const at::Tensor& g = item.value().grad();
      // A tied copy's gradient is its original's, counted there.
      if (g.defined() && !part.tied_copy(item.key())) {
        sum = sum + g.pow(2).sum().to(at::kDouble).cpu();
      }
    }
  });
  // Within a stage: a split gradient's squares are summed over each group
  // it is split along (all of one dimension's sets in one all-reduce). The
  // groups lie within the stage, so ranks of other stages need not match.
  std::vector<std::string> dims;
  for (const auto& [set, sum] : squares) {
    for (const auto& d : set) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
        dims.push_back(d);
      }
    }
  }
  std::sort(dims.begin(), dims.end());
  for (const auto& d : dims) {
    std::vector<at::Tensor*> members;
    for (auto& [set, sum] : squares) {
      if (std::find(set.begin(), set.end(), d) != set.end()) {
        members.push_back(&sum);
      }
    }
    std::vector<at::Tensor> values;
    for (auto* t : members) {
      values.push_back(*t);
    }
    at::Tensor packed = at::stack(values);
    mesh.group(d)->all_reduce(packed);
    for (size_t i = 0; i < members.size(); ++i) {
      *members[i] = packed[static_cast<int64_t>(i)];
    }
  }
  at::Tensor stage_total = at::zeros({}, at::kDouble);
  for (const auto& [set, sum] : squares) {
    stage_total = stage_total + sum;
  }
  // Each pipeline rank holds other parameters: sum the stages (over every
  // axis whose ranks hold different parameters).
  at::Tensor total = stage_total.reshape({1});
  for (const auto& axis : mesh.dims().axes) {
    if (axis.splits_model && axis.degree > 1) {
      mesh.group(axis.name)->all_reduce(total);
    }
  }
  return std::sqrt(total.item<double>());
}

double clip_grad_norm(
    const ModelParts& parts, const dist::ParallelMesh& mesh, double max_norm) {
  const double norm = grad_norm(parts, mesh);
  if (max_norm > 0.0 && std::isfinite(norm) && norm > max_norm) {
    torch::NoGradGuard no_grad;
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& p : parts.parameters()) {
      if (p.grad().defined()) {
        p.grad().mul_(scale);
      }
    }
  }
  return norm;
}

}  // namespace baton
