// The block attention engine (models/common/block_attention.h) against the
// plain formula: its tiles with positions in any order, the kernel's whole
// diagonal and earlier blocks, document masks that cut tiles anywhere, and
// the one-process document attention's values
// and gradients (grouped-query heads; float64 within 1e-12, float32 within
// 1e-6). Context parallel's use of it: tests/parallel/context_parallel/.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "models/common/block_attention.h"
#include "models/common/fused_ops.h"
#include "tests/models/reference_attention.h"

namespace baton::models {
namespace {

using testing::random_documents;
using testing::reference_attention;

TEST(BlockAttention, TilesMatchThePlainFormulaWithAnyPositions) {
  // Rows and keys in no order, more than one tile each way, G = 2 query
  // heads per key/value head, and a row that sees no key at all.
  const int64_t B = 2, KV = 2, G = 2, D = 8;
  const int64_t Tq = kTileRows + 44;
  const int64_t Tk = kTileKeys + 24;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto f = at::TensorOptions().dtype(at::kDouble);
  const auto q = at::randn({B, KV, G, Tq, D}, gen, f);
  const auto k = at::randn({B, KV, Tk, D}, gen, f);
  const auto v = at::randn({B, KV, Tk, D}, gen, f);
  auto q_pos = at::randperm(Tq, gen, at::kLong) + 20;
  q_pos[5] = 0;  // below every key: sees none
  const auto k_pos = at::randperm(Tk, gen, at::kLong) + 1;
  const auto [out, lse] =
      attention_with_lse(q, k, v, {q_pos, at::Tensor()}, {k_pos, at::Tensor()});
  const auto want =
      reference_attention(q.reshape({B, KV * G, Tq, D}), k, v, q_pos, k_pos);
  auto got = out.to(at::kDouble).reshape({B, KV * G, Tq, D});
  // The row that sees nothing: zeros and -inf, where the formula gives NaN.
  EXPECT_TRUE(at::all(got.select(2, 5) == 0).item<bool>());
  EXPECT_TRUE(at::all(lse.select(3, 5) == -INFINITY).item<bool>());
  const auto keep = at::arange(Tq, at::kLong) != 5;
  EXPECT_TRUE(at::allclose(
      got.index({at::indexing::Slice(), at::indexing::Slice(), keep}),
      want.index({at::indexing::Slice(), at::indexing::Slice(), keep}),
      0,
      1e-12));
}

TEST(BlockAttention, KernelBlocksGiveTheFormulasOutputAndLogSumExp) {
  // Context parallel's two kinds of block, which the CPU flash kernel runs
  // whole: a diagonal one (rows and keys one run of positions, causal) and
  // an earlier one (every key before every row), grouped heads, against
  // the formula's output and log-sum-exp.
  const int64_t B = 2, KV = 2, G = 2, D = 8, T = 70;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const auto f = at::TensorOptions().dtype(at::kDouble);
  for (const bool diagonal : {true, false}) {
    const int64_t Tk = diagonal ? T : 90;
    const auto q = at::randn({B, KV, G, T, D}, gen, f);
    const auto k = at::randn({B, KV, Tk, D}, gen, f);
    const auto v = at::randn({B, KV, Tk, D}, gen, f);
    const auto q_pos = at::arange(100, 100 + T, at::kLong);
    const auto k_pos = diagonal ? q_pos : at::arange(10, 10 + Tk, at::kLong);
    const BlockSpan rows{q_pos, at::Tensor()}, keys{k_pos, at::Tensor()};
    EXPECT_TRUE(block_runs_whole(q, rows, keys));
    // bfloat16 stays in tiles on the CPU (the kernel would round each
    // block's output), as does a block whose keys are not one run.
    EXPECT_FALSE(block_runs_whole(q.to(at::kBFloat16), rows, keys));
    EXPECT_FALSE(block_runs_whole(q, rows, {k_pos.flip(0), at::Tensor()}));
    const auto [out, lse] = attention_with_lse(
        q, k, v, {q_pos, at::Tensor()}, {k_pos, at::Tensor()});
    const auto q4 = q.reshape({B, KV * G, T, D});
    const auto want = reference_attention(q4, k, v, q_pos, k_pos);
    auto scores = at::matmul(q4, k.repeat_interleave(G, 1).transpose(-1, -2));
    scores = scores.masked_fill(
        (k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)).logical_not(), -INFINITY);
    const auto want_lse = at::logsumexp(scores, -1);
    EXPECT_LT(
        (out.reshape({B, KV * G, T, D}) - want).abs().max().item<double>(),
        1e-12)
        << (diagonal ? "diagonal" : "earlier");
    EXPECT_LT(
        (lse.reshape({B, KV * G, T}) - want_lse).abs().max().item<double>(),
        1e-12)
        << (diagonal ? "diagonal" : "earlier");
  }
}

TEST(BlockAttention, DocumentMasksCutTilesAnywhere) {
  // Rows [40, 40 + Tq) against keys [0, Tk) of one sequence; three batch
  // rows: one document, a few, and a document at every position (each row
  // sees itself alone, or nothing where the keys stop before it).
  const int64_t KV = 1, G = 2, D = 8, Tk = kTileKeys + 30;
  const int64_t first_row = 40, Tq = kTileRows + 70;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto f = at::TensorOptions().dtype(at::kDouble);
  const int64_t T = first_row + Tq;
  const auto docs = random_documents({0, 6, T - 1}, T, 11);
  const int64_t B = docs.size(0);
  const auto q = at::randn({B, KV, G, Tq, D}, gen, f);
  const auto k = at::randn({B, KV, Tk, D}, gen, f);
  const auto v = at::randn({B, KV, Tk, D}, gen, f);
  const auto q_pos = at::arange(first_row, T, at::kLong);
  const auto k_pos = at::arange(Tk, at::kLong);
  const BlockSpan rows{q_pos, docs.narrow(1, first_row, Tq)};
  const BlockSpan keys{k_pos, docs.narrow(1, 0, Tk)};
  const auto [out, lse] = attention_with_lse(q, k, v, rows, keys);
  const auto want = reference_attention(
      q.reshape({B, KV * G, Tq, D}),
      k,
      v,
      q_pos,
      k_pos,
      rows.documents,
      keys.documents);
  const auto got = out.reshape({B, KV * G, Tq, D});
  // Rows that see no key (the last batch row's beyond Tk): 0, where the
  // formula gives NaN.
  const auto seen = at::isfinite(lse).reshape({B, KV * G, Tq});
  EXPECT_TRUE(at::all(got.masked_select(seen.logical_not().unsqueeze(-1)) == 0)
                  .item<bool>());
  const auto mask = seen.unsqueeze(-1).expand_as(got);
  EXPECT_LT(
      (got.masked_select(mask) - want.masked_select(mask))
          .abs()
          .max()
          .item<double>(),
      1e-12);
  // Where every position is its own document, a row that sees its own key
  // gives its value.
  const auto last = got.select(0, 2).select(0, 0);  // (Tq, D)
  const auto own =
      v.select(0, 2).select(0, 0).narrow(0, first_row, Tk - first_row);
  EXPECT_TRUE(at::allclose(last.narrow(0, 0, Tk - first_row), own, 0, 1e-12));
}

/// The one-process document attention's output and gradients against the
/// formula in float64, within `atol` (outputs of unit size; gradients
/// within a few units).
void check_document_attention(at::ScalarType dtype, double atol) {
  const int64_t H = 4, KV = 2, T = 2 * kTileRows + 24, D = 16;
  const auto docs = random_documents({0, 3, 17}, T, 9);
  const int64_t B = docs.size(0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto f = at::TensorOptions().dtype(dtype);
  const auto q0 = at::randn({B, H, T, D}, gen, f) / std::sqrt(double(D));
  const auto k0 = at::randn({B, KV, T, D}, gen, f);
  const auto v0 = at::randn({B, KV, T, D}, gen, f);
  const auto grad = at::randn({B, H, T, D}, gen, f) * 0.1;
  const auto positions = at::arange(T, at::kLong);
  const auto q = q0.to(at::kDouble).clone().requires_grad_();
  const auto k = k0.to(at::kDouble).clone().requires_grad_();
  const auto v = v0.to(at::kDouble).clone().requires_grad_();
  const auto want =
      reference_attention(q, k, v, positions, positions, docs, docs);
  (want * grad.to(at::kDouble)).sum().backward();
  const auto lq = q0.clone().requires_grad_();
  const auto lk = k0.clone().requires_grad_();
  const auto lv = v0.clone().requires_grad_();
  const auto out = document_attention(lq, lk, lv, docs);
  EXPECT_EQ(out.scalar_type(), dtype);
  (out * grad).sum().backward();
  const auto check = [&](const at::Tensor& got,
                         const at::Tensor& expect,
                         const char* what) {
    EXPECT_LT((got.to(at::kDouble) - expect).abs().max().item<double>(), atol)
        << what << " in " << c10::toString(dtype) << " (largest "
        << expect.abs().max().item<double>() << ")";
  };
  check(out.detach(), want.detach(), "output");
  check(lq.grad(), q.grad(), "dq");
  check(lk.grad(), k.grad(), "dk");
  check(lv.grad(), v.grad(), "dv");
}

TEST(BlockAttention, DocumentAttentionEqualsTheFormula) {
  check_document_attention(at::kDouble, 1e-12);
  check_document_attention(at::kFloat, 1e-6);
}

TEST(BlockAttention, OneDocumentIsCausalAttention) {
  // Every position in document 0: the causal attention the model runs
  // without documents.
  const int64_t B = 2, H = 2, T = 70, D = 8;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  const auto q = at::randn({B, H, T, D}, gen) / std::sqrt(double(D));
  const auto k = at::randn({B, H, T, D}, gen);
  const auto v = at::randn({B, H, T, D}, gen);
  const auto got = document_attention(q, k, v, at::zeros({B, T}, at::kLong));
  const auto want = causal_attention(q, k, v, /*q_scaled=*/true);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-6);
}

TEST(BlockAttention, RefusesDocumentsOfAnotherShape) {
  const auto x = at::randn({1, 2, 8, 4});
  try {
    document_attention(x, x, x, at::zeros({1, 7}, at::kLong));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("documents (B, T) = [1, 8]; got [1, 7]"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton::models
