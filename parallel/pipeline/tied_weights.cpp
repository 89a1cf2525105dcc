#include "parallel/pipeline/tied_weights.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"

namespace baton::pipeline {

namespace {

/// The tied weight of `part`; throws std::logic_error where it has none.
at::Tensor tied_weight(const ModelPart& part) {
  const auto params = part.module().named_parameters();
  const at::Tensor* p = params.find(kTiedWeight);
  if (p == nullptr) {
    throw std::logic_error(
        "[pipeline] stage " + std::to_string(part.stage()) +
        " of a tied model holds no " + kTiedWeight);
  }
  return *p;
}

/// `p`'s gradient, zeros where its backward left none.
at::Tensor& gradient(at::Tensor& p) {
  if (!p.grad().defined()) {
    p.mutable_grad() = at::zeros_like(p);
  }
  return p.mutable_grad();
}

}  // namespace

void tie_embeddings(
    ModelParts& parts,
    bool tied,
    const std::vector<int64_t>& stage_to_rank,
    const dist::ParallelMesh& mesh,
    const std::shared_ptr<dist::Runtime>& runtime) {
  const auto stages = static_cast<int64_t>(stage_to_rank.size());
  if (!tied || stages < 2) {
    return;
  }
  const int64_t first = stage_to_rank.front();
  const int64_t last = stage_to_rank.back();
  const int64_t me = mesh.coord().at(kPipelineAxis);
  if (me != first && me != last) {
    return;
  }
  if (me == last) {
    parts.at_stage(stages - 1).mark_tied_copy(kTiedWeight);
  }
  if (first == last) {
    at::Tensor original = tied_weight(parts.at_stage(0));
    at::Tensor copy = tied_weight(parts.at_stage(stages - 1));
    parts.add_gradient_hook([original, copy]() mutable {
      at::NoGradGuard no_grad;
      gradient(original).add_(gradient(copy));
      gradient(copy).copy_(original.grad());
    });
    return;
  }
  const auto& pp = mesh.group(kPipelineAxis)->global_ranks();
  std::vector<int64_t> ranks = {pp.at(first), pp.at(last)};
  std::sort(ranks.begin(), ranks.end());
  if (!runtime) {
    throw std::logic_error(
        "[pipeline] tying two ranks' stages needs a runtime");
  }
  // Named by its members: each tp and dp coordinate has its own pair.
  auto group = runtime->new_group(
      ranks,
      "tied_embeddings[" + std::to_string(ranks[0]) + "," +
          std::to_string(ranks[1]) + "]");
  at::Tensor weight = tied_weight(parts.at_stage(me == first ? 0 : stages - 1));
  parts.add_gradient_hook([group, weight]() mutable {
    at::NoGradGuard no_grad;
    group->all_reduce(gradient(weight), dist::ReduceOp::kSum);
  });
}

}  // namespace baton::pipeline
