#include "models/loss.h"

#include <torch/torch.h>

namespace baton {

at::Tensor cross_entropy_sum(
    const at::Tensor& logits, const at::Tensor& labels) {
  return torch::nn::functional::cross_entropy(
      logits.flatten(0, 1),  // (B * T, vocab)
      labels.flatten(),      // (B * T)
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace baton
