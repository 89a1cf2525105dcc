#pragma once

#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <vector>

namespace baton {

/// AdamW whose update of each parameter is one pass over memory: weight
/// decay, both moments, bias correction and the step in one loop, instead
/// of torch::optim::AdamW's eight tensor operations and two temporaries per
/// parameter. Same options (torch::optim::AdamWOptions, amsgrad excepted),
/// same state (torch::optim::AdamWParamState keyed by the parameter's
/// TensorImpl, as libtorch keys it), same results up to float rounding.
/// Parameters must be contiguous float32 on the CPU; anything else falls
/// back to torch::optim::AdamW's arithmetic for that parameter. The options
/// of every group are checked once, at construction (throws c10::Error).
class FusedAdamW final : public torch::optim::Optimizer {
 public:
  explicit FusedAdamW(
      std::vector<torch::optim::OptimizerParamGroup> param_groups,
      torch::optim::AdamWOptions defaults = torch::optim::AdamWOptions());
  explicit FusedAdamW(
      std::vector<at::Tensor> params,
      torch::optim::AdamWOptions defaults = torch::optim::AdamWOptions());

  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  static void check_options(const torch::optim::AdamWOptions& options);
};

}  // namespace baton
