#include "models/loss.h"

#include <torch/torch.h>

namespace baton {

at::Tensor cross_entropy_sum(
    const at::Tensor& logits, const at::Tensor& labels) {
  // In float32 whatever the logits' dtype (bf16 under mixed precision):
  // the log-softmax over the vocabulary and the sum over tokens need it.
  return torch::nn::functional::cross_entropy(
      logits.to(at::kFloat).flatten(0, 1),  // (B * T, vocab)
      labels.flatten(),                     // (B * T)
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace baton
