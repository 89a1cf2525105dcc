#include "trainer/model_parts.h"

namespace baton {

std::vector<at::Tensor> ModelParts::parameters() const {
  std::vector<at::Tensor> params;
  for_each([&](ModelChunk& part) {
    for (const auto& p : part.parameters()) {
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

void ModelParts::train(bool on) const {
  for_each([&](ModelChunk& part) { part.train(on); });
}

}  // namespace baton
