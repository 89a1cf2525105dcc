// The attention head kernel of every instruction set this CPU runs, called
// directly, against softmax attention computed in float64 by ATen with
// autograd: the output, and the three gradients from the probabilities the
// forward kept and from recomputed ones.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/common/attention_kernel.h"

namespace baton::models::attention_kernel {
namespace {

/// One head's float64 reference: out and q, k, v's gradients for `gout`.
struct Reference {
  at::Tensor out, gq, gk, gv;
};

Reference reference_head(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& gout) {
  auto qd = q.to(torch::kDouble).requires_grad_(true);
  auto kd = k.to(torch::kDouble).requires_grad_(true);
  auto vd = v.to(torch::kDouble).requires_grad_(true);
  const int64_t T = q.size(0);
  const auto mask =
      torch::full(
          {T, T}, -std::numeric_limits<double>::infinity(), torch::kDouble)
          .triu(1);
  const auto probs = torch::softmax(qd.mm(kd.t()) + mask, -1);
  const auto out = probs.mm(vd);
  out.backward(gout.to(torch::kDouble));
  return {out.detach(), qd.grad(), kd.grad(), vd.grad()};
}

/// Whether `got` is within float32's reach of `want`.
bool close(const std::vector<float>& got, const at::Tensor& want) {
  const auto g =
      torch::tensor(got, torch::kFloat).to(torch::kDouble).view(want.sizes());
  return torch::allclose(g, want, 1e-4, 1e-5);
}

const Isa kIsas[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};

TEST(AttentionKernel, EverySupportedIsaMatchesTheReference) {
  int ran = 0;
  for (const Isa isa : kIsas) {
    if (!isa_supported(isa)) {
      continue;
    }
    ++ran;
    const HeadKernels& kernels = head_kernels(isa);
    // Rows and columns that fill the 16-lane chunks and the 4-row groups,
    // and ones that leave them short.
    for (const auto& [T, D] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 8},
             {5, 16},
             {16, 16},
             {37, 24},
             {64, 64},
             {67, 40},
             {33, 128}}) {
      SCOPED_TRACE(
          std::string(isa_name(isa)) + " T " + std::to_string(T) + " D " +
          std::to_string(D));
      torch::manual_seed(T * 1000 + D);
      const auto q = torch::randn({T, D}) / std::sqrt(static_cast<double>(D));
      const auto k = torch::randn({T, D});
      const auto v = torch::randn({T, D});
      const auto gout = torch::randn({T, D});
      const Reference want = reference_head(q, k, v, gout);

      std::vector<float> scratch(scratch_floats(T, D));
      std::vector<float> out(T * D), probs(probs_floats(T));
      kernels.forward(
          q.data_ptr<float>(),
          k.data_ptr<float>(),
          v.data_ptr<float>(),
          T,
          D,
          out.data(),
          probs.data(),
          scratch.data());
      EXPECT_TRUE(close(out, want.out));

      for (const bool kept : {true, false}) {
        SCOPED_TRACE(kept ? "probabilities kept" : "recomputed");
        std::vector<float> gq(T * D, -1.0f), gk(T * D, -1.0f), gv(T * D, -1.0f);
        kernels.backward(
            q.data_ptr<float>(),
            k.data_ptr<float>(),
            v.data_ptr<float>(),
            kept ? probs.data() : nullptr,
            gout.data_ptr<float>(),
            T,
            D,
            gq.data(),
            gk.data(),
            gv.data(),
            scratch.data());
        EXPECT_TRUE(close(gq, want.gq));
        EXPECT_TRUE(close(gk, want.gk));
        EXPECT_TRUE(close(gv, want.gv));
      }
    }
  }
  EXPECT_GE(ran, 1);
}

TEST(AttentionKernel, TheBestIsaIsTheWidestSupportedAndOthersAreRefused) {
  const Isa best = best_isa();
  EXPECT_TRUE(isa_supported(best));
  EXPECT_TRUE(isa_supported(Isa::kBaseline));
  for (const Isa isa : kIsas) {
    if (static_cast<int>(isa) > static_cast<int>(best)) {
      EXPECT_FALSE(isa_supported(isa)) << isa_name(isa);
    }
    if (isa_supported(isa)) {
      continue;
    }
    try {
      head_kernels(isa);
      FAIL() << "expected an error for " << isa_name(isa);
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("[attention]"), std::string::npos) << message;
      EXPECT_NE(message.find(isa_name(isa)), std::string::npos) << message;
    }
  }
  EXPECT_EQ(head_kernels().forward, head_kernels(best).forward);
  EXPECT_EQ(head_kernels().backward, head_kernels(best).backward);
}

}  // namespace
}  // namespace baton::models::attention_kernel
