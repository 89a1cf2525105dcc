// Context parallel's attention over real Gloo, ranks as threads: each rank's
// rows of the gathered-keys attention against full causal attention of the
// whole sequence in one process (values and the gradients of q, k and v,
// grouped-query heads, float32 within 1e-6, with and without document
// masking), its traffic against the formula, and its errors named. The
// tiles alone: tests/models/block_attention_test.cpp. Whole training runs:
// tests/trainer/context_parallel_step_test.cpp.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "common/sequence_split.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/dist/process_group.h"
#include "tests/models/reference_attention.h"
#include "tests/parallel/multi_rank.h"

namespace baton {
namespace {

using context_parallel::GatheredKvAttention;

using testing::random_documents;
using testing::reference_attention;

struct Inputs {
  at::Tensor q, k, v, grad;  // whole sequence; grad: of the output
};

/// Random q (scaled), k, v and an output gradient of `grad_scale`.
Inputs random_inputs(
    int64_t B,
    int64_t H,
    int64_t KV,
    int64_t T,
    int64_t D,
    at::ScalarType dtype,
    double grad_scale) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto f = at::TensorOptions().dtype(dtype);
  return {
      at::randn({B, H, T, D}, gen, f) * (1.0 / std::sqrt(double(D))),
      at::randn({B, KV, T, D}, gen, f),
      at::randn({B, KV, T, D}, gen, f),
      at::randn({B, H, T, D}, gen, f) * grad_scale};
}

/// Each of `cp` ranks' rows of the gathered-keys attention, and its
/// gradients, against the whole sequence's in one process (the plain
/// formula in float64), within `atol`; with `documents` ((2, T) ids, T =
/// 40 cp), a row sees only its own document's keys.
void check_against_one_process(
    int64_t cp,
    int64_t H,
    int64_t KV,
    at::ScalarType dtype,
    double atol,
    const at::Tensor& documents = at::Tensor()) {
  const int64_t B = 2, T = 8 * cp * 5, D = 16;  // chunks of 20 rows
  // Outputs of unit size; gradients of q, k and v within a few units.
  const Inputs in = random_inputs(B, H, KV, T, D, dtype, 0.1);
  const auto positions = at::arange(T, at::kLong);
  // One process: the whole sequence's causal attention and its gradients.
  const auto q = in.q.to(at::kDouble).clone().requires_grad_();
  const auto k = in.k.to(at::kDouble).clone().requires_grad_();
  const auto v = in.v.to(at::kDouble).clone().requires_grad_();
  const auto want =
      reference_attention(q, k, v, positions, positions, documents, documents);
  (want * in.grad.to(at::kDouble)).sum().backward();
  context_parallel::reset_traffic();
  testing::run_ranks(cp, [&](int64_t rank, dist::Runtime& rt) {
    const SequenceSplit split{cp, rank};
    const auto lq = split.take(in.q, 2).requires_grad_();
    const auto lk = split.take(in.k, 2).requires_grad_();
    const auto lv = split.take(in.v, 2).requires_grad_();
    GatheredKvAttention attention(rt.world(), split, "layers.0.attention");
    const auto out = attention.attend(lq, lk, lv, documents);
    EXPECT_EQ(out.scalar_type(), dtype);
    (out * split.take(in.grad, 2)).sum().backward();
    const auto check = [&](const at::Tensor& got,
                           const at::Tensor& whole,
                           const char* what) {
      const auto expect = split.take(whole, 2);
      EXPECT_LT((got.to(at::kDouble) - expect).abs().max().item<double>(), atol)
          << what << ", rank " << rank << " of cp " << cp << " (largest "
          << expect.abs().max().item<double>() << ")";
    };
    check(out.detach(), want.detach(), "output");
    check(lq.grad(), q.grad(), "dq");
    check(lk.grad(), k.grad(), "dk");
    check(lv.grad(), v.grad(), "dv");
  });
  // Each rank sent (cp - 1) copies of its keys and values each way.
  const int64_t kv_bytes =
      2 * B * KV * (T / cp) * D * static_cast<int64_t>(c10::elementSize(dtype));
  const auto counted = context_parallel::traffic();
  EXPECT_EQ(
      counted.at("kv all_gather forward").bytes, cp * (cp - 1) * kv_bytes);
  EXPECT_EQ(
      counted.at("kv reduce_scatter backward").bytes, cp * (cp - 1) * kv_bytes);
}

TEST(ContextParallel, GatheredKeysEqualFullAttentionAtCp2WithGroupedHeads) {
  // The algorithm in float64, then float32 within 1e-6 absolute.
  check_against_one_process(2, /*H=*/4, /*KV=*/2, at::kDouble, 1e-12);
  check_against_one_process(2, /*H=*/4, /*KV=*/2, at::kFloat, 1e-6);
}

TEST(ContextParallel, GatheredKeysEqualFullAttentionAtCp4) {
  check_against_one_process(4, /*H=*/4, /*KV=*/1, at::kDouble, 1e-12);
  check_against_one_process(4, /*H=*/4, /*KV=*/1, at::kFloat, 1e-6);
}

TEST(ContextParallel, GatheredKeysKeepDocumentsApart) {
  // Document masking across the shards: one row of 5 documents, one of 12
  // (some shorter than a chunk, some spanning several ranks' chunks).
  for (const int64_t cp : {2, 4}) {
    const auto documents = random_documents({4, 11}, 40 * cp, 21 + cp);
    check_against_one_process(cp, 4, 2, at::kDouble, 1e-12, documents);
    check_against_one_process(cp, 4, 2, at::kFloat, 1e-6, documents);
  }
}
TEST(ContextParallel, ARankThatFailsIsNamedByLayerAndExchange) {
  // Rank 1 never joins: rank 0's gather times out naming the layer.
  const auto errors =
      testing::run_rank_threads(2, [](int64_t rank, dist::Runtime& rt) {
        rt.set_timeout(std::chrono::milliseconds(1500));
        if (rank == 1) {
          return;
        }
        const SequenceSplit split{2, 0};
        GatheredKvAttention attention(rt.world(), split, "layers.3.attention");
        const auto x = at::randn({1, 2, 8, 4});
        attention.attend(x, x, x, at::Tensor());
      });
  EXPECT_NE(
      errors[0].find("[context_parallel] layers.3.attention: kv all_gather "
                     "forward"),
      std::string::npos)
      << errors[0];
}

}  // namespace
}  // namespace baton
