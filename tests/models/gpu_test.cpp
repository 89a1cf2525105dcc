// The model on a CUDA device against the CPU, from the same weights, and
// the CUDA kernels Baton's layers pick there (context parallel's blocks in
// SDPA's memory-efficient kernel, the experts' grouped matmul) against the
// CPU and the loop they replace. Skips (with the reason) where there is no
// CUDA device, as on a CPU-only libtorch.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/common/block_attention.h"
#include "models/common/transformer.h"
#include "models/generate.h"
#include "models/moe.h"

namespace baton::models {
namespace {

/// Why the GPU tests skip, or "" where there is a CUDA device.
std::string why_no_gpu() {
  return torch::cuda::is_available()
             ? ""
             : "no CUDA device visible to libtorch; this test runs where "
               "there is one (bench/gpu.sh builds and runs it)";
}

ModelArgs tiny_args() {
  ModelArgs args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 50;
  args.multiple_of = 32;
  return args;
}

TEST(Gpu, ForwardAndBackwardMatchTheCpu) {
  if (const auto why = why_no_gpu(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const ModelArgs args = tiny_args();
  auto cpu = std::make_shared<TransformerImpl>(args);
  auto gpu = std::make_shared<TransformerImpl>(args);
  cpu->init_weights(3);
  gpu->init_weights(3);
  gpu->to(torch::kCUDA);
  const auto tokens = torch::randint(0, args.vocab_size, {2, 16}, torch::kLong);
  const auto yc = cpu->forward(tokens);
  const auto yg = gpu->forward(tokens.to(torch::kCUDA));
  EXPECT_TRUE(torch::allclose(yg.cpu(), yc, 1e-4, 1e-4));
  yc.square().sum().backward();
  yg.square().sum().backward();
  const auto pg = gpu->named_parameters();
  for (const auto& item : cpu->named_parameters()) {
    EXPECT_TRUE(torch::allclose(
        pg[item.key()].grad().cpu(), item.value().grad(), 1e-3, 1e-4))
        << item.key();
  }
}

TEST(Gpu, GenerationMatchesTheCpu) {
  if (const auto why = why_no_gpu(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  ModelArgs args = tiny_args();
  args.qk_norm = true;
  auto cpu = std::make_shared<TransformerImpl>(args);
  auto gpu = std::make_shared<TransformerImpl>(args);
  cpu->init_weights(3);
  gpu->init_weights(3);
  gpu->to(torch::kCUDA);
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.keep_logits = true;
  const Generation c = generate(*cpu, {1, 2, 3}, options);
  const Generation g = generate(*gpu, {1, 2, 3}, options);
  EXPECT_EQ(g.tokens, c.tokens);
  for (size_t i = 0; i < c.logits.size(); ++i) {
    EXPECT_TRUE(torch::allclose(g.logits[i], c.logits[i], 1e-4, 1e-4)) << i;
  }
}

/// Context parallel's blocks for the second half of a sequence's rows, as
/// a rank holding them runs them: the earlier keys (full), then its own
/// (causal), merged, and the backward of both from the final (out, lse).
/// Returns out, lse, dq, dk, dv in float64.
std::vector<at::Tensor> cp_blocks(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& dout,
    bool expect_whole) {
  const int64_t T = k.size(2), half = T / 2;
  const BlockSpan all{at::arange(T, at::kLong), at::Tensor()};
  const BlockSpan rows = all.narrow(half, T - half);
  const BlockSpan earlier = all.narrow(0, half);
  const at::Tensor qr = q.narrow(3, half, T - half);
  const auto kr = [&](const at::Tensor& x, bool own) {
    return own ? x.narrow(2, half, T - half) : x.narrow(2, 0, half);
  };
  EXPECT_EQ(block_runs_whole(qr, rows, earlier), expect_whole);
  EXPECT_EQ(block_runs_whole(qr, rows, rows), expect_whole);
  const auto acc = block_accumulation(q);
  at::Tensor out = at::zeros(qr.sizes(), q.options().dtype(acc));
  at::Tensor lse = at::full(qr.sizes().slice(0, 4), -INFINITY, out.options());
  accumulate_attention(qr, kr(k, false), kr(v, false), rows, earlier, out, lse);
  accumulate_attention(qr, kr(k, true), kr(v, true), rows, rows, out, lse);
  at::Tensor dq = at::zeros(qr.sizes(), out.options());
  at::Tensor dk = at::zeros(k.sizes(), out.options());
  at::Tensor dv = at::zeros(v.sizes(), out.options());
  for (const bool own : {false, true}) {
    accumulate_attention_backward(
        qr,
        kr(k, own),
        kr(v, own),
        rows,
        own ? rows : earlier,
        out,
        lse,
        dout,
        dq,
        kr(dk, own),
        kr(dv, own));
  }
  std::vector<at::Tensor> got;
  for (const auto& t : {out, lse, dq, dk, dv}) {
    got.push_back(t.to(at::kCPU, at::kDouble));
  }
  return got;
}

TEST(Gpu, ContextParallelBlocksRunInSdpaAndMatchTheCpu) {
  if (const auto why = why_no_gpu(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // Grouped-query heads (G = 2), head dim 64, 70 rows a half: the kernel's
  // log-sum-exp rows (multiples of 32) padded and cut. The CPU's float64
  // run of the same blocks (its flash kernel, checked against the formula
  // in block_attention_test) is the reference.
  const int64_t B = 2, KV = 2, G = 2, T = 140, D = 64;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const auto f = at::TensorOptions().dtype(at::kDouble);
  const auto q = at::randn({B, KV, G, T, D}, gen, f) / std::sqrt(double(D));
  const auto k = at::randn({B, KV, T, D}, gen, f);
  const auto v = at::randn({B, KV, T, D}, gen, f);
  const auto dout = at::randn({B, KV, G, T / 2, D}, gen, f);
  const auto want = cp_blocks(q, k, v, dout, /*expect_whole=*/true);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto cuda = [&](const at::Tensor& t) {
      return t.to(torch::kCUDA, dtype);
    };
    const auto got =
        cp_blocks(cuda(q), cuda(k), cuda(v), cuda(dout), /*expect_whole=*/true);
    // float32: the kernel's 3xTF32 products; bfloat16: its inputs' and each
    // block's output rounding.
    const double tol = dtype == at::kFloat ? 1e-4 : 4e-2;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = (got[i] - want[i]).abs().max().item<double>();
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LT(err, tol * std::max(1.0, scale))
          << names[i] << " in " << c10::toString(dtype);
    }
  }
  // float64 and odd head dims stay in tiles on CUDA, and agree as well.
  const auto tiles = cp_blocks(
      q.to(torch::kCUDA),
      k.to(torch::kCUDA),
      v.to(torch::kCUDA),
      dout.to(torch::kCUDA),
      /*expect_whole=*/false);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LT((tiles[i] - want[i]).abs().max().item<double>(), 1e-10)
        << names[i];
  }
}

TEST(Gpu, GroupedExpertProductsMatchTheLoop) {
  if (const auto why = why_no_gpu(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // 8 experts of hidden 64 over rows of 32, some with no rows: the grouped
  // matmul (CUTLASS's on sm90 in bfloat16, each group padded to 16 bytes of
  // rows) against the per-expert loop on the same GPU, values and every
  // gradient.
  torch::manual_seed(5);
  const std::vector<int64_t> count{5, 0, 17, 3, 0, 0, 9, 1};
  const auto o =
      torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const at::Tensor w1 = (torch::randn({8, 64, 32}) * 0.3).to(o);
  const at::Tensor w3 = (torch::randn({8, 64, 32}) * 0.3).to(o);
  const at::Tensor w2 = (torch::randn({8, 32, 64}) * 0.3).to(o);
  const at::Tensor xs = torch::randn({35, 32}).to(o);
  const at::Tensor g = torch::randn({35, 32}).to(o);
  ASSERT_TRUE(grouped_mm_takes(xs, w1));
  ASSERT_TRUE(grouped_mm_takes(xs, w2));
  const auto run = [&](ExpertProducts how) {
    std::vector<at::Tensor> leaves{xs, w1, w3, w2};
    for (auto& t : leaves) {
      t = t.clone().requires_grad_(true);
    }
    const at::Tensor out =
        expert_products(leaves[0], count, leaves[1], leaves[2], leaves[3], how);
    (out * g).sum().backward();
    std::vector<at::Tensor> got{out.detach().to(torch::kCPU, torch::kFloat)};
    for (const auto& t : leaves) {
      got.push_back(t.grad().to(torch::kCPU, torch::kFloat));
    }
    return got;
  };
  const auto loop = run(ExpertProducts::kLoop);
  const auto grouped = run(ExpertProducts::kAuto);
  for (size_t i = 0; i < loop.size(); ++i) {
    const double scale = loop[i].abs().max().item<double>();
    EXPECT_LT(
        (grouped[i] - loop[i]).abs().max().item<double>(),
        2e-2 * std::max(1.0, scale))
        << i;
  }
  // The experts without rows get no gradient.
  EXPECT_EQ(grouped[2][1].abs().max().item<float>(), 0.0f);
}

}  // namespace
}  // namespace baton::models
