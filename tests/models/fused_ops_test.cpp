// The fused rotary embedding, RMSNorm and causal attention (the kernel and
// the blocked path) against the plain ATen formulas, computed in float64 with
// autograd: values and gradients.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <stdexcept>

#include "models/common/attention_kernel.h"
#include "models/common/fused_ops.h"
#include "models/common/swiglu_kernel.h"
#include "models/common/transformer.h"

namespace baton::models {
namespace {

RopeTables tables(int64_t T, int64_t D) {
  const auto angles = torch::outer(
      torch::arange(T, torch::kDouble), torch::rand({D / 2}, torch::kDouble));
  return {angles.cos().to(torch::kFloat), angles.sin().to(torch::kFloat)};
}

/// softmax(q k^T * scale + causal mask) v with a full (T, T) mask.
at::Tensor reference_attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const auto mask = torch::full(
                        {T, T},
                        -std::numeric_limits<double>::infinity(),
                        q.options().requires_grad(false))
                        .triu(1);
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale + mask;
  return torch::matmul(torch::softmax(scores, -1), v);
}

TEST(FusedOps, RopeHeadsFirstMatchesApplyRopeWithGradients) {
  torch::manual_seed(0);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const auto rope = tables(T, D);
  const double scale = 0.37;
  const auto x = torch::randn({B, T, H, D});
  const auto gy = torch::randn({B, H, T, D});

  const auto xf = x.clone().requires_grad_(true);
  const auto y = rope_heads_first(xf, rope.cos, rope.sin, scale);
  y.backward(gy);

  const auto xr = x.to(torch::kDouble).requires_grad_(true);
  const RopeTables rope64{
      rope.cos.to(torch::kDouble), rope.sin.to(torch::kDouble)};
  const auto yr = (apply_rope(xr, rope64) * scale).transpose(1, 2);
  yr.backward(gy.to(torch::kDouble));

  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{B, H, T, D}));
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), yr, 1e-5, 1e-6));
  EXPECT_TRUE(
      torch::allclose(xf.grad().to(torch::kDouble), xr.grad(), 1e-5, 1e-6));
}

TEST(FusedOps, RopeFallsBackToTheFormulaForOtherDtypes) {
  torch::manual_seed(1);
  const auto rope = tables(4, 6);
  const auto x = torch::randn({1, 4, 2, 6}, torch::kDouble);
  const auto y = rope_heads_first(x, rope.cos, rope.sin, 2.0);
  const RopeTables rope64{
      rope.cos.to(torch::kDouble), rope.sin.to(torch::kDouble)};
  EXPECT_TRUE(torch::allclose(
      y, (apply_rope(x, rope64) * 2.0).transpose(1, 2), 1e-12, 1e-12));
}

TEST(FusedOps, RopeRejectsMismatchedTables) {
  const auto rope = tables(4, 6);
  try {
    rope_heads_first(torch::randn({1, 5, 2, 6}), rope.cos, rope.sin);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[rope]"), std::string::npos);
  }
}

TEST(FusedOps, RmsNormMatchesTheFormulaWithGradients) {
  torch::manual_seed(4);
  const auto x = torch::randn({3, 5, 24}) * 3.0;
  const auto w = torch::randn({24});
  const auto gy = torch::randn({3, 5, 24});
  const double eps = 1e-5;
  auto xf = x.clone().requires_grad_(true);
  auto wf = w.clone().requires_grad_(true);
  const auto y = rms_norm(xf, wf, eps);
  y.backward(gy);
  auto xr = x.to(torch::kDouble).requires_grad_(true);
  auto wr = w.to(torch::kDouble).requires_grad_(true);
  const auto yr =
      xr * torch::rsqrt(xr.pow(2).mean(-1, /*keepdim=*/true) + eps) * wr;
  yr.backward(gy.to(torch::kDouble));
  const auto close = [](const at::Tensor& a, const at::Tensor& b) {
    return torch::allclose(a.to(torch::kDouble), b, 1e-5, 1e-5);
  };
  EXPECT_TRUE(close(y, yr));
  EXPECT_TRUE(close(xf.grad(), xr.grad()));
  EXPECT_TRUE(close(wf.grad(), wr.grad()));
  EXPECT_THROW(rms_norm(x, torch::ones({23}), eps), c10::Error);
}

/// silu(a) * b and its gradients against the formula in float64.
void expect_swiglu_matches_formula(
    const at::Tensor& a, const at::Tensor& b, double tol) {
  const auto g = torch::randn(a.sizes()).to(a.scalar_type());
  auto af = a.clone().requires_grad_(true);
  auto bf = b.clone().requires_grad_(true);
  const auto y = swiglu(af, bf);
  y.backward(g);
  auto ar = a.to(torch::kDouble).requires_grad_(true);
  auto br = b.to(torch::kDouble).requires_grad_(true);
  const auto yr = torch::silu(ar) * br;
  yr.backward(g.to(torch::kDouble));
  const auto close = [tol](const at::Tensor& x, const at::Tensor& ref) {
    return torch::allclose(x.to(torch::kDouble), ref, tol, tol);
  };
  EXPECT_EQ(y.scalar_type(), a.scalar_type());
  EXPECT_TRUE(close(y, yr)) << a.sizes() << " " << a.scalar_type();
  EXPECT_TRUE(close(af.grad(), ar.grad())) << a.sizes();
  EXPECT_TRUE(close(bf.grad(), br.grad())) << a.sizes();
}

TEST(FusedOps, SwigluMatchesTheFormulaWithGradients) {
  torch::manual_seed(6);
  // Sizes with a partial vector at the end, and over several threads' tasks;
  // inputs up to +-40, where the sigmoid saturates on both sides.
  const int threads_before = at::get_num_threads();
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{3 * 16384 + 5}}) {
      const auto a = torch::randn({n}) * 6.0;
      expect_swiglu_matches_formula(a, torch::randn({n}), 1e-5);
    }
    const auto wide = torch::linspace(-40.0, 40.0, 801).reshape({3, 267});
    expect_swiglu_matches_formula(wide, torch::randn({3, 267}), 1e-5);
  }
  at::set_num_threads(threads_before);
  // bf16 (mixed precision): ATen's ops, in bf16.
  const auto a = (torch::randn({4, 40}) * 3.0).to(torch::kBFloat16);
  expect_swiglu_matches_formula(
      a, torch::randn({4, 40}).to(torch::kBFloat16), 2e-2);
  EXPECT_THROW(swiglu(torch::ones({4}), torch::ones({5})), c10::Error);
  EXPECT_THROW(
      swiglu(torch::ones({4}), torch::ones({4}, torch::kDouble)), c10::Error);
}

TEST(FusedOps, SwigluKernelsOfEverySupportedIsaAgree) {
  using attention_kernel::Isa;
  torch::manual_seed(7);
  const int64_t n = 16 * 5 + 3;
  const auto a = torch::randn({n}) * 8.0, b = torch::randn({n}),
             g = torch::randn({n});
  const auto s = torch::sigmoid(a.to(torch::kDouble));
  const auto y_ref = a.to(torch::kDouble) * s * b.to(torch::kDouble);
  const auto ga_ref = g.to(torch::kDouble) * b.to(torch::kDouble) * s *
                      (1 + a.to(torch::kDouble) * (1 - s));
  const auto gb_ref = g.to(torch::kDouble) * a.to(torch::kDouble) * s;
  for (const Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (!attention_kernel::isa_supported(isa)) {
      EXPECT_THROW(swiglu_kernel::kernels(isa), std::invalid_argument);
      continue;
    }
    const auto& k = swiglu_kernel::kernels(isa);
    auto y = torch::empty({n}), ga = torch::empty({n}), gb = torch::empty({n});
    k.forward(a.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n);
    k.backward(
        a.data_ptr<float>(),
        b.data_ptr<float>(),
        g.data_ptr<float>(),
        ga.data_ptr<float>(),
        gb.data_ptr<float>(),
        n);
    const char* name = attention_kernel::isa_name(isa);
    EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), y_ref, 1e-5, 1e-5))
        << name;
    EXPECT_TRUE(torch::allclose(ga.to(torch::kDouble), ga_ref, 1e-5, 1e-5))
        << name;
    EXPECT_TRUE(torch::allclose(gb.to(torch::kDouble), gb_ref, 1e-5, 1e-5))
        << name;
  }
}

/// Runs attend(q, k, v, q_scaled) with `threads` ATen threads on random
/// (2, 3, T, D) inputs given as views that are not contiguous, and checks
/// its output and gradients against reference_attention in float64.
template <class Attend>
void expect_attention_matches_reference(
    int64_t T, int64_t D, bool q_scaled, int threads, const Attend& attend) {
  const int threads_before = at::get_num_threads();
  at::set_num_threads(threads);
  torch::manual_seed(T * 100 + D);
  const int64_t B = 2, H = 3;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q = torch::randn({B, H, T, D});
  const auto k = torch::randn({B, H, T, D});
  const auto v = torch::randn({B, H, T, D});
  const auto gy = torch::randn({B, H, T, D});

  auto qf = q.clone().requires_grad_(true);
  auto kf = k.clone().requires_grad_(true);
  auto vf = v.clone().requires_grad_(true);
  const auto q_in = q_scaled ? qf * scale : qf;
  const auto y = attend(
      q_in.transpose(1, 2).contiguous().transpose(1, 2),
      kf.transpose(0, 1).contiguous().transpose(0, 1),
      vf,
      q_scaled);
  y.backward(gy);

  auto qr = q.to(torch::kDouble).requires_grad_(true);
  auto kr = k.to(torch::kDouble).requires_grad_(true);
  auto vr = v.to(torch::kDouble).requires_grad_(true);
  const auto yr = reference_attention(qr, kr, vr);
  yr.backward(gy.to(torch::kDouble));

  const auto close = [](const at::Tensor& a, const at::Tensor& b) {
    return torch::allclose(a.to(torch::kDouble), b, 1e-4, 1e-5);
  };
  EXPECT_TRUE(close(y, yr));
  EXPECT_TRUE(close(qf.grad(), qr.grad()));
  EXPECT_TRUE(close(kf.grad(), kr.grad()));
  EXPECT_TRUE(close(vf.grad(), vr.grad()));
  at::set_num_threads(threads_before);
}

class BlockedAttention
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool, int>> {
};

TEST_P(BlockedAttention, MatchesFullSoftmaxAttentionWithGradients) {
  const auto [T, block, q_scaled, threads] = GetParam();
  // With 2 threads the heads are split among them (fused_ops.cpp).
  expect_attention_matches_reference(
      T,
      8,
      q_scaled,
      threads,
      [block = block](
          const at::Tensor& q,
          const at::Tensor& k,
          const at::Tensor& v,
          bool scaled) {
        return blocked_causal_attention(q, k, v, scaled, block);
      });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes,
    BlockedAttention,
    ::testing::Values(
        std::make_tuple(16, 16, false, 1),  // one block
        std::make_tuple(16, 4, false, 1),   // whole blocks
        std::make_tuple(13, 4, false, 1),   // a short last block
        std::make_tuple(13, 64, true, 1),   // block longer than the sequence
        std::make_tuple(9, 2, true, 1),
        std::make_tuple(16, 4, false, 2),  // heads split between 2 threads
        std::make_tuple(13, 4, true, 2)));

class KernelAttention
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool, int>> {
};

TEST_P(KernelAttention, MatchesFullSoftmaxAttentionWithGradients) {
  const auto [T, D, q_scaled, threads] = GetParam();
  // With 2 threads the heads are split among them.
  expect_attention_matches_reference(
      T,
      D,
      q_scaled,
      threads,
      [](const at::Tensor& q,
         const at::Tensor& k,
         const at::Tensor& v,
         bool scaled) { return causal_attention(q, k, v, scaled); });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes,
    KernelAttention,
    ::testing::Values(
        std::make_tuple(1, 16, false, 1),   // one row
        std::make_tuple(13, 8, false, 1),   // padded rows and columns
        std::make_tuple(16, 16, true, 1),   // whole chunks
        std::make_tuple(37, 24, false, 1),  // a short last chunk of each
        std::make_tuple(70, 64, true, 1),
        std::make_tuple(33, 128, false, 1),  // Llama 3's head width
        std::make_tuple(37, 16, false, 2),   // heads split between 2 threads
        std::make_tuple(21, 64, true, 2)));

TEST(FusedOps, AttentionOnTwoThreadsKeepsTheCallersInferenceMode) {
  // The heads run on OpenMP's threads, which must get the caller's
  // thread-local state: here, writing into inference tensors.
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(7);
  const auto q = torch::randn({2, 3, 16, 8});
  const auto k = torch::randn({2, 3, 16, 8});
  const auto v = torch::randn({2, 3, 16, 8});
  at::Tensor kernel, blocked;
  {
    const c10::InferenceMode inference;
    kernel = causal_attention(q, k, v);
    blocked = blocked_causal_attention(q, k, v, false, 4);
  }
  at::set_num_threads(before);
  const auto yr = reference_attention(
      q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble));
  EXPECT_TRUE(torch::allclose(kernel.to(torch::kDouble), yr, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(blocked.to(torch::kDouble), yr, 1e-4, 1e-5));
}

/// Whether `got` (any dtype) is within `rel` of `want` in norm.
bool near_in_norm(const at::Tensor& got, const at::Tensor& want, double rel) {
  const auto g = got.to(torch::kDouble);
  const auto w = want.to(torch::kDouble);
  return ((g - w).norm() / w.norm()).item<double>() < rel;
}

TEST(FusedOps, Bf16RopeAndRmsNormComputeInFloat32) {
  torch::manual_seed(11);
  const auto rope = tables(6, 8);
  const auto x = torch::randn({2, 6, 3, 8});
  auto xb = x.to(torch::kBFloat16).requires_grad_(true);
  const auto y = rope_heads_first(xb, rope.cos, rope.sin, 0.5);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  // Rotated in float32 from the bf16 input: only the output's rounding.
  const auto want =
      rope_heads_first(xb.detach().to(torch::kFloat), rope.cos, rope.sin, 0.5);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), want, 1e-2, 1e-2));
  y.sum().backward();
  EXPECT_EQ(xb.grad().scalar_type(), torch::kBFloat16);

  const auto h = torch::randn({3, 4, 16}) * 4.0;
  const auto w = torch::randn({16});
  auto hb = h.to(torch::kBFloat16).requires_grad_(true);
  auto wb = w.to(torch::kBFloat16).requires_grad_(true);
  const auto n = rms_norm(hb, wb, 1e-5);
  EXPECT_EQ(n.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(near_in_norm(n, rms_norm(h, w, 1e-5), 2e-2));
  n.sum().backward();
  EXPECT_EQ(hb.grad().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(wb.grad().scalar_type(), torch::kBFloat16);
}

TEST(FusedOps, BlockedAttentionRunsInBf16) {
  torch::manual_seed(12);
  const int64_t B = 2, H = 2, T = 13, D = 8;
  const auto q = torch::randn({B, H, T, D});
  const auto k = torch::randn({B, H, T, D});
  const auto v = torch::randn({B, H, T, D});
  auto qb = q.to(torch::kBFloat16).requires_grad_(true);
  auto kb = k.to(torch::kBFloat16).requires_grad_(true);
  auto vb = v.to(torch::kBFloat16).requires_grad_(true);
  // Not float32: the blocked path, with or without a block size.
  EXPECT_TRUE(torch::equal(
      causal_attention(qb, kb, vb),
      blocked_causal_attention(qb, kb, vb, false, 64)));
  const auto y = blocked_causal_attention(qb, kb, vb, false, 4);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  auto qr = q.to(torch::kDouble).requires_grad_(true);
  auto kr = k.to(torch::kDouble).requires_grad_(true);
  auto vr = v.to(torch::kDouble).requires_grad_(true);
  const auto yr = reference_attention(qr, kr, vr);
  EXPECT_TRUE(near_in_norm(y, yr, 3e-2));
  const auto gy = torch::randn({B, H, T, D});
  y.backward(gy.to(torch::kBFloat16));
  yr.backward(gy.to(torch::kDouble));
  EXPECT_TRUE(near_in_norm(qb.grad(), qr.grad(), 5e-2));
  EXPECT_TRUE(near_in_norm(kb.grad(), kr.grad(), 5e-2));
  EXPECT_TRUE(near_in_norm(vb.grad(), vr.grad(), 5e-2));
}

TEST(FusedOps, AttentionRejectsMismatchedShapes) {
  const auto q = torch::randn({1, 2, 4, 8});
  const auto k = torch::randn({1, 2, 5, 8});
  for (const bool blocked : {false, true}) {
    try {
      if (blocked) {
        blocked_causal_attention(q, k, q);
      } else {
        causal_attention(q, k, q);
      }
      FAIL() << "expected an error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("[attention]"), std::string::npos);
    }
  }
  try {
    blocked_causal_attention(q, q, q, false, 0);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("block must be positive"),
        std::string::npos);
  }
}

}  // namespace
}  // namespace baton::models
