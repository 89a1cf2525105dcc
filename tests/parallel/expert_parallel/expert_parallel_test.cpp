// Expert parallel's dispatcher over real Gloo, ranks as threads: its
// all-to-alls against the rows computed where they are (values and
// gradients), an expert parallel rank that gets no rows included. Whole
// training runs: tests/trainer/expert_parallel_step_test.cpp.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "models/moe.h"
#include "parallel/dist/process_group.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "tests/parallel/multi_rank.h"

namespace baton {
namespace {

using expert_parallel::AllToAllDispatcher;

constexpr int64_t kExperts = 4;
constexpr int64_t kDim = 3;

/// Rank r's rows sorted by expert, `counts` of each: what its router would
/// hand the dispatcher. Every rank can make every rank's (a generator of
/// its own: the ranks are threads).
at::Tensor rows_of(int64_t rank, const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (const auto c : counts) {
    total += c;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11 + rank);
  return at::randn({total, kDim}, gen, at::TensorOptions().dtype(at::kDouble))
      .mul_(1.0 + rank);
}

/// Expert e's function: its rows times its weight.
at::Tensor expert_of(
    const at::Tensor& rows,
    const std::vector<int64_t>& counts,
    const at::Tensor& weight) {
  std::vector<at::Tensor> out;
  int64_t start = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    out.push_back(rows.narrow(0, start, counts[e]) * weight[e]);
    start += counts[e];
  }
  return at::cat(out, 0);
}

void check_dispatch(const std::vector<std::vector<int64_t>>& counts) {
  const auto world = static_cast<int64_t>(counts.size());
  const int64_t local = kExperts / world;
  testing::run_ranks(world, [&](int64_t rank, dist::Runtime& rt) {
    const at::Tensor rows = rows_of(rank, counts[rank]).requires_grad_();
    // Expert e's weight is e + 1; this rank's are its slice of them.
    const at::Tensor all_weights =
        at::arange(1, kExperts + 1, at::TensorOptions().dtype(at::kDouble));
    const at::Tensor weight =
        all_weights.narrow(0, rank * local, local).clone().requires_grad_();
    AllToAllDispatcher dispatcher(rt.world(), "layers.0.moe", kExperts);
    int64_t seen = -1;
    const at::Tensor out = dispatcher.run(
        rows,
        at::tensor(counts[rank], at::kLong),
        [&](const at::Tensor& got, const std::vector<int64_t>& c) {
          seen = got.size(0);
          EXPECT_EQ(static_cast<int64_t>(c.size()), local);
          return expert_of(got, c, weight);
        });
    // Where the rows were: each times its expert's weight.
    const at::Tensor want = expert_of(rows.detach(), counts[rank], all_weights);
    EXPECT_TRUE(torch::allclose(out, want, 0, 1e-12)) << "rank " << rank;
    int64_t expected_rows = 0;
    for (int64_t q = 0; q < world; ++q) {
      for (int64_t l = 0; l < local; ++l) {
        expected_rows += counts[q][rank * local + l];
      }
    }
    EXPECT_EQ(seen, expected_rows) << "rank " << rank;
    // Gradients: d(sum out * g)/d rows = g * weight; d/d weight[l] = the
    // sum over every rank's rows of expert l of rows . g.
    const at::Tensor g = at::ones_like(out) * (1.0 + rank);
    out.backward(g);
    EXPECT_TRUE(torch::allclose(
        rows.grad(), expert_of(g, counts[rank], all_weights), 0, 1e-12));
    for (int64_t l = 0; l < local; ++l) {
      const int64_t e = rank * local + l;
      double want_grad = 0.0;
      for (int64_t q = 0; q < world; ++q) {
        const at::Tensor theirs = rows_of(q, counts[q]);
        int64_t start = 0;
        for (int64_t m = 0; m < e; ++m) {
          start += counts[q][m];
        }
        want_grad +=
            theirs.narrow(0, start, counts[q][e]).sum().item<double>() *
            (1.0 + q);
      }
      EXPECT_NEAR(weight.grad()[l].item<double>(), want_grad, 1e-9)
          << "rank " << rank << " expert " << e;
    }
  });
}

TEST(ExpertParallel, DispatchAndCombineMatchTheRowsComputedInPlace) {
  check_dispatch({{3, 0, 2, 5}, {1, 4, 0, 2}});
  check_dispatch({{1, 2, 0, 3}, {0, 0, 4, 1}, {2, 2, 2, 2}, {5, 0, 0, 1}});
}

TEST(ExpertParallel, ARankWhoseExpertsGetNoRowsStillTakesPart) {
  // Every row goes to rank 0's experts: rank 1 computes nothing, yet
  // exchanges (forward and backward) as rank 0 does.
  check_dispatch({{3, 2, 0, 0}, {4, 1, 0, 0}});
}

}  // namespace
}  // namespace baton
