// A program of its own around Baton's command line (app/run.h): the stock
// commands plus an applier this file defines, `scale_grads`, which the YAML
// (or an override) selects. tests/app/custom_main_test.cpp runs it.

#include <ATen/ATen.h>

#include <memory>

#include "app/run.h"
#include "parallel/applier.h"
#include "parallel/model_parts.h"

namespace {

/// Every gradient of the part times 2 as backward produces it (a tensor
/// hook: before accumulation and before any gradient sync).
class ScaleGrads final : public baton::Applier {
 public:
  void apply(baton::ModelPart& part, const baton::ParallelContext&) override {
    for (auto& p : part.module().parameters()) {
      p.register_hook([](const at::Tensor& g) { return g * 2.0; });
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  baton::applier_registry().add(
      "scale_grads",
      [] { return std::make_unique<ScaleGrads>(); },
      "custom_baton: every gradient times 2");
  return baton::run(argc, argv);
}
