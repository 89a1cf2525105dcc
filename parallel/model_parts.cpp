#include "parallel/model_parts.h"

#include <algorithm>
#include <stdexcept>

#include "parallel/axes.h"

namespace baton {

ModelPart::ModelPart(std::shared_ptr<ModelChunk> module, int64_t stage)
    : module_(std::move(module)), stage_(stage) {
  if (!module_) {
    throw std::invalid_argument("[ModelPart] module: null");
  }
}

void ModelPart::mark_grad_split(
    const std::string& fqn, const std::string& dim) {
  if (dim == kPipelineAxis) {
    throw std::invalid_argument(
        "[ModelPart] mark_grad_split: pp; allowed: an axis or group within "
        "the stage; hint: every stage's gradients are summed over pp "
        "already");
  }
  if (!module_->named_parameters().contains(fqn)) {
    throw std::invalid_argument(
        "[ModelPart] mark_grad_split: '" + fqn +
        "' is not a parameter of stage " + std::to_string(stage_) +
        "; allowed: the FQN of one of its parameters");
  }
  auto& dims = grad_split_[fqn];
  if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
    dims.push_back(dim);
  }
}

const std::vector<std::string>& ModelPart::grad_split(
    const std::string& fqn) const {
  static const std::vector<std::string> kWhole;
  const auto it = grad_split_.find(fqn);
  return it == grad_split_.end() ? kWhole : it->second;
}

void ModelPart::set_slice(const std::string& fqn, ParamSlice slice) {
  const auto params = module_->named_parameters();
  if (!params.contains(fqn)) {
    throw std::invalid_argument(
        "[ModelPart] set_slice: '" + fqn + "' is not a parameter of stage " +
        std::to_string(stage_) +
        "; allowed: the FQN of one of its "
        "parameters");
  }
  const at::Tensor& p = params[fqn];
  bool fits = slice.global_shape.size() == static_cast<size_t>(p.dim()) &&
              slice.offsets.size() == static_cast<size_t>(p.dim());
  for (int64_t d = 0; fits && d < p.dim(); ++d) {
    fits = slice.offsets[d] >= 0 &&
           slice.offsets[d] + p.size(d) <= slice.global_shape[d];
  }
  if (!fits) {
    throw std::invalid_argument(
        "[ModelPart] set_slice: " + fqn + " of shape " + c10::str(p.sizes()) +
        " at offsets " + c10::str(slice.offsets) +
        "; allowed: a slice "
        "inside the global shape " +
        c10::str(slice.global_shape));
  }
  slices_[fqn] = std::move(slice);
}

const ParamSlice* ModelPart::slice(const std::string& fqn) const {
  const auto it = slices_.find(fqn);
  return it == slices_.end() ? nullptr : &it->second;
}

void ModelPart::set_shard_group(const std::string& fqn, std::string group) {
  if (!module_->named_parameters().contains(fqn)) {
    throw std::invalid_argument(
        "[ModelPart] set_shard_group: '" + fqn +
        "' is not a parameter of stage " + std::to_string(stage_) +
        "; allowed: the FQN of one of its parameters");
  }
  shard_groups_[fqn] = std::move(group);
}

const std::string* ModelPart::shard_group(const std::string& fqn) const {
  const auto it = shard_groups_.find(fqn);
  return it == shard_groups_.end() ? nullptr : &it->second;
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

void ModelPart::mark_tied_copy(const std::string& fqn) {
  tied_copies_.insert(fqn);
}

void ModelParts::add_gradient_hook(std::function<void()> hook) {
  gradient_hooks_->push_back(std::move(hook));
}

void ModelParts::run_gradient_hooks() const {
  for (const auto& hook : *gradient_hooks_) {
    hook();
  }
}

int64_t ModelParts::num_params() const {
  int64_t n = 0;
  for (const auto& p : parameters()) {
    n += p.numel();
  }
  return n;
}

}  // namespace baton
