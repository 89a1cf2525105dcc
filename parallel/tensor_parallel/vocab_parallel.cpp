#include "parallel/tensor_parallel/vocab_parallel.h"

#include <torch/torch.h>

#include <algorithm>

#include "parallel/dist/process_group.h"

namespace baton::tensor_parallel {

namespace {

/// What cross_entropy ignores by default.
constexpr int64_t kIgnoreIndex = -100;

/// Which labels fall in `range`, and their column there (0 elsewhere).
struct LocalTargets {
  at::Tensor in_range;  // (N) bool
  at::Tensor column;    // (N) int64
};

LocalTargets local_targets(const at::Tensor& labels, const VocabRange& range) {
  const at::Tensor in_range = (labels >= range.begin) & (labels < range.end);
  return {in_range, (labels - range.begin) * in_range};
}

class VocabParallelCrossEntropy
    : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  /// logits (N, V_r) float32, labels (N) int64.
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& logits,
      const at::Tensor& labels,
      int64_t begin,
      int64_t end,
      int64_t region_ptr) {
    const Region& region = *reinterpret_cast<const Region*>(region_ptr);
    dist::ProcessGroup& group = *region.group;
    const auto targets = local_targets(labels, VocabRange{begin, end});
    at::Tensor max = std::get<0>(logits.max(-1));  // (N)
    group.all_reduce(max, dist::ReduceOp::kMax);
    const at::Tensor exp = (logits - max.unsqueeze(1)).exp_();  // (N, V_r)
    const at::Tensor target =
        logits.gather(1, targets.column.unsqueeze(1)).squeeze(1) *
        targets.in_range;
    // The sum of exponentials and the target's logit in one all-reduce.
    at::Tensor sums = at::stack({exp.sum(-1), target});  // (2, N)
    group.all_reduce(sums);
    const at::Tensor sum_exp = sums[0];
    const at::Tensor valid = labels != kIgnoreIndex;
    const at::Tensor losses = (sum_exp.log() + max - sums[1]) * valid;
    ctx->save_for_backward(
        {exp.div_(sum_exp.unsqueeze(1)),  // softmax (N, V_r)
         targets.column,
         targets.in_range,
         valid});
    return losses.sum();
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& softmax = saved[0];
    at::Tensor grad = softmax.clone();
    grad.scatter_add_(
        1, saved[1].unsqueeze(1), -saved[2].to(grad.dtype()).unsqueeze(1));
    grad.mul_((saved[3].to(grad.dtype()) * grads[0]).unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

VocabRange VocabRange::of(int64_t vocab, int64_t rank, int64_t size) {
  const int64_t base = vocab / size;
  const int64_t extra = vocab % size;
  const int64_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

at::Tensor vocab_parallel_embedding(
    const at::Tensor& ids,
    const at::Tensor& weight,
    const VocabRange& range,
    const Region& region) {
  const auto targets = local_targets(ids, range);
  // (B, T, dim): this rank's rows, zeros for the ids other ranks hold.
  const at::Tensor partial =
      torch::nn::functional::embedding(targets.column, weight) *
      targets.in_range.unsqueeze(-1).to(weight.dtype());
  return reduce_scatter_sequence(partial, region);
}

at::Tensor vocab_parallel_cross_entropy_sum(
    const at::Tensor& logits,
    const at::Tensor& labels,
    const VocabRange& range,
    const Region& region) {
  TORCH_CHECK(
      logits.size(-1) == range.size(),
      "[tensor_parallel] ",
      region.name,
      ": logits of ",
      logits.size(-1),
      " columns; allowed: this rank's ",
      range.size(),
      " of the vocabulary");
  try {
    return VocabParallelCrossEntropy::apply(
        logits.to(at::kFloat).flatten(0, 1),  // (B * T, V_r)
        labels.flatten(),                     // (B * T)
        range.begin,
        range.end,
        reinterpret_cast<int64_t>(&region));
  } catch (const dist::CommError& e) {
    throw dist::CommError(
        "[tensor_parallel] " + region.name + ": all-reduce: " + e.what());
  }
}

}  // namespace baton::tensor_parallel
