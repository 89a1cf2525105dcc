#include "parallel/model_parts.h"

#include <algorithm>
#include <stdexcept>

namespace baton {

ModelPart::ModelPart(std::shared_ptr<ModelChunk> module, int64_t stage)
    : module_(std::move(module)), stage_(stage) {
  if (!module_) {
    throw std::invalid_argument("[ModelPart] module: null");
  }
}

void ModelPart::mark_grad_split(const std::string& fqn, dist::MeshDim dim) {
  if (dim == dist::MeshDim::kPp) {
    throw std::invalid_argument(
        "[ModelPart] mark_grad_split: pp; allowed: dp, dp_replicate, "
        "dp_shard, tp; hint: every stage's gradients are summed over pp "
        "already");
  }
  if (!module_->named_parameters().contains(fqn)) {
    throw std::invalid_argument(
        "[ModelPart] mark_grad_split: '" + fqn +
        "' is not a parameter of stage " + std::to_string(stage_));
  }
  auto& dims = grad_split_[fqn];
  if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
    dims.push_back(dim);
  }
}

const std::vector<dist::MeshDim>& ModelPart::grad_split(
    const std::string& fqn) const {
  static const std::vector<dist::MeshDim> kWhole;
  const auto it = grad_split_.find(fqn);
  return it == grad_split_.end() ? kWhole : it->second;
}

void ModelParts::push_back(std::shared_ptr<ModelPart> part) {
  if (!part) {
    throw std::invalid_argument("[ModelParts] push_back: null part");
  }
  if (!parts_.empty() && part->stage() <= parts_.back()->stage()) {
    throw std::invalid_argument(
        "[ModelParts] stage " + std::to_string(part->stage()) +
        " after stage " + std::to_string(parts_.back()->stage()) +
        "; allowed: parts in increasing stage order");
  }
  parts_.push_back(std::move(part));
}

ModelPart& ModelParts::at_stage(int64_t stage) const {
  for (const auto& part : parts_) {
    if (part->stage() == stage) {
      return *part;
    }
  }
  throw std::out_of_range(
      "[ModelParts] this rank holds no part for stage " +
      std::to_string(stage));
}

std::vector<at::Tensor> ModelParts::parameters() const {
  std::vector<at::Tensor> params;
  for_each([&](ModelPart& part) {
    for (const auto& p : part.module().parameters()) {
      params.push_back(p);
    }
  });
  return params;
}

int64_t ModelParts::num_params() const {
  int64_t n = 0;
  for (const auto& p : parameters()) {
    n += p.numel();
  }
  return n;
}

}  // namespace baton
