// The vocabulary-parallel cross-entropy and embedding against the plain
// ones on random inputs, values and gradients, with 2 and 3 tp ranks (a
// vocabulary that splits unevenly) and ignored labels; real Gloo between
// rank threads.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "models/loss.h"
#include "parallel/dist/process_group.h"
#include "parallel/tensor_parallel/vocab_parallel.h"
#include "tests/parallel/multi_rank.h"

namespace baton::tensor_parallel {
namespace {

TEST(VocabRange, SplitsContiguouslyTheFirstRanksOneMore) {
  EXPECT_EQ(VocabRange::of(10, 0, 3).begin, 0);
  EXPECT_EQ(VocabRange::of(10, 0, 3).end, 4);
  EXPECT_EQ(VocabRange::of(10, 1, 3).begin, 4);
  EXPECT_EQ(VocabRange::of(10, 1, 3).end, 7);
  EXPECT_EQ(VocabRange::of(10, 2, 3).begin, 7);
  EXPECT_EQ(VocabRange::of(10, 2, 3).end, 10);
  EXPECT_EQ(VocabRange::of(8, 1, 2).size(), 4);
}

/// Logits (B, T, V) and labels (B, T), some labels -100.
struct LossCase {
  at::Tensor logits;
  at::Tensor labels;
};

LossCase loss_case(int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  LossCase c;
  c.logits = at::randn({3, 5, vocab}, gen) * 3.0;
  c.labels = at::randint(0, vocab, {3, 5}, gen, at::kLong);
  c.labels[0][1] = -100;
  c.labels[2][4] = -100;
  return c;
}

void expect_loss_equals_plain(int64_t tp, int64_t vocab) {
  SCOPED_TRACE("tp " + std::to_string(tp) + ", vocab " + std::to_string(vocab));
  const LossCase c = loss_case(vocab);
  const at::Tensor whole = c.logits.clone().requires_grad_(true);
  const at::Tensor expected = cross_entropy_sum(whole, c.labels);
  expected.backward();
  testing::run_ranks(tp, [&](int64_t rank, dist::Runtime& rt) {
    const Region region{rt.world(), "loss"};
    const VocabRange range = VocabRange::of(vocab, rank, tp);
    const at::Tensor mine =
        c.logits.slice(2, range.begin, range.end).clone().requires_grad_(true);
    const at::Tensor loss =
        vocab_parallel_cross_entropy_sum(mine, c.labels, range, region);
    (loss * 0.5).backward();  // a gradient other than 1 flows through
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-4);
    const at::Tensor want = whole.grad().slice(2, range.begin, range.end) * 0.5;
    EXPECT_TRUE(torch::allclose(mine.grad(), want, 1e-5, 1e-6))
        << "rank " << rank << " gradient differs by "
        << (mine.grad() - want).abs().max().item<double>();
    // Ignored labels get no gradient at all.
    EXPECT_EQ(mine.grad()[0][1].abs().max().item<float>(), 0.0f);
  });
}

TEST(VocabParallelCrossEntropy, EqualsThePlainOneValuesAndGradients) {
  expect_loss_equals_plain(2, 16);
  expect_loss_equals_plain(3, 16);  // 6 + 5 + 5 columns
}

TEST(VocabParallelCrossEntropy, TakesBf16LogitsInFloat32) {
  const LossCase c = loss_case(8);
  const at::Tensor expected =
      cross_entropy_sum(c.logits.to(at::kBFloat16), c.labels);
  testing::run_ranks(2, [&](int64_t rank, dist::Runtime& rt) {
    const Region region{rt.world(), "loss"};
    const VocabRange range = VocabRange::of(8, rank, 2);
    const at::Tensor loss = vocab_parallel_cross_entropy_sum(
        c.logits.to(at::kBFloat16).slice(2, range.begin, range.end),
        c.labels,
        range,
        region);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-4);
  });
}

TEST(VocabParallelCrossEntropy, RefusesLogitsOfAnotherRange) {
  const LossCase c = loss_case(8);
  const auto region = Region{dist::ProcessGroup::single("tp"), "loss"};
  try {
    vocab_parallel_cross_entropy_sum(
        c.logits, c.labels, VocabRange{0, 4}, region);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "[tensor_parallel] loss: logits of 8 columns; allowed: this "
            "rank's 4 of the vocabulary"),
        std::string::npos)
        << e.what();
  }
}

TEST(VocabParallelEmbedding, EqualsThePlainLookupScatteredAlongTheSequence) {
  constexpr int64_t kVocab = 11, kDim = 4, kTp = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor table = at::randn({kVocab, kDim}, gen);
  const at::Tensor ids = at::randint(0, kVocab, {2, 6}, gen, at::kLong);
  const at::Tensor go = at::randn({2, 6, kDim}, gen);  // d loss / d output
  const at::Tensor whole = table.clone().requires_grad_(true);
  const at::Tensor expected = torch::nn::functional::embedding(ids, whole);
  expected.backward(go);
  testing::run_ranks(kTp, [&](int64_t rank, dist::Runtime& rt) {
    const Region region{rt.world(), "tok_embeddings"};
    const VocabRange range = VocabRange::of(kVocab, rank, kTp);
    const at::Tensor rows =
        table.slice(0, range.begin, range.end).clone().requires_grad_(true);
    const at::Tensor out = vocab_parallel_embedding(ids, rows, range, region);
    // This rank's positions of every row: [3 rank, 3 rank + 3).
    const at::Tensor want = expected.slice(1, 3 * rank, 3 * rank + 3);
    ASSERT_EQ(out.sizes(), want.sizes());
    EXPECT_TRUE(torch::allclose(out, want, 1e-6, 1e-6));
    out.backward(go.slice(1, 3 * rank, 3 * rank + 3));
    // Each row's gradient, from every position, on the rank holding it.
    EXPECT_TRUE(torch::allclose(
        rows.grad(),
        whole.grad().slice(0, range.begin, range.end),
        1e-5,
        1e-6));
  });
}

}  // namespace
}  // namespace baton::tensor_parallel
