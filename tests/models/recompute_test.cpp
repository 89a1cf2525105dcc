// Activation checkpointing's engine against the plain forward: the same
// gradients, the recomputation run once, and under the state the forward
// had.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <vector>

#include "models/common/fused_ops.h"
#include "models/common/transformer.h"
#include "models/forward_state.h"
#include "models/linear.h"
#include "models/recompute.h"
#include "tests/models/tiny_llama.h"

namespace baton {
namespace {

ModelArgs block_args() {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 1;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 16;
  args.multiple_of = 16;
  return args;
}

models::RopeTables rope_tables(int64_t seq, int64_t head_dim) {
  const auto inv = torch::pow(
      10000.0, -torch::arange(0, head_dim / 2, torch::kFloat64) * 2 / head_dim);
  const auto angles = torch::outer(torch::arange(seq, torch::kFloat64), inv);
  return {angles.cos().to(torch::kFloat), angles.sin().to(torch::kFloat)};
}

struct Grads {
  at::Tensor input;
  std::map<std::string, at::Tensor> params;
};

/// One block's forward (through `wrap`) and backward from a fixed output
/// gradient; returns the input's and every parameter's gradient.
template <class Wrap>
Grads block_grads(Wrap wrap) {
  torch::manual_seed(3);
  models::TransformerBlock block(block_args());
  const auto rope = rope_tables(8, 8);
  const auto x = torch::randn({2, 8, 32}).requires_grad_(true);
  const auto gy = torch::randn({2, 8, 32});
  auto run = [block, rope](const at::Tensor& in) mutable {
    return block(in, rope);
  };
  wrap(run, x).backward(gy);
  Grads g{x.grad().clone(), {}};
  for (const auto& p : block->named_parameters()) {
    g.params[p.key()] = p.value().grad().clone();
  }
  return g;
}

void expect_close(const Grads& a, const Grads& b) {
  EXPECT_LE((a.input - b.input).abs().max().item<double>(), 1e-6);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, g] : b.params) {
    EXPECT_LE((a.params.at(name) - g).abs().max().item<double>(), 1e-6) << name;
  }
}

TEST(Checkpoint, FullAndKeepExpensiveOpsGiveThePlainGradients) {
  const auto plain =
      block_grads([](auto& run, const at::Tensor& x) { return run(x); });
  for (const auto policy :
       {CheckpointPolicy::kFull, CheckpointPolicy::kKeepExpensiveOps}) {
    SCOPED_TRACE(policy == CheckpointPolicy::kFull ? "full" : "op");
    expect_close(
        block_grads([policy](auto& run, const at::Tensor& x) {
          return checkpoint(run, x, policy);
        }),
        plain);
  }
}

TEST(Checkpoint, RecomputesOnceInBackwardAndNotWithoutGrad) {
  int calls = 0;
  const auto w = torch::randn({4, 4}).requires_grad_(true);
  auto run = [&calls, w](const at::Tensor& x) {
    ++calls;
    return (x.matmul(w)).tanh();
  };
  const auto x = torch::randn({3, 4}).requires_grad_(true);
  auto y = checkpoint(run, x, CheckpointPolicy::kFull);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(w.grad().defined());
  {
    torch::NoGradGuard no_grad;
    calls = 0;
    const auto z = checkpoint(run, x, CheckpointPolicy::kFull);
    EXPECT_EQ(calls, 1);
    EXPECT_FALSE(z.requires_grad());
  }
}

TEST(Checkpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  const auto w = torch::randn({4, 4}).requires_grad_(true);
  const auto x = torch::randn({3, 4});  // needs no gradient
  auto run = [w](const at::Tensor& in) { return in.matmul(w); };
  checkpoint(run, x, CheckpointPolicy::kFull).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(w.grad(), x.sum(0).unsqueeze(1).expand({4, 4})));
}

TEST(Checkpoint, AUnitThatTakesTokenIdsStillTrains) {
  torch::manual_seed(2);
  auto table = torch::randn({10, 4}).requires_grad_(true);
  auto run = [table](const at::Tensor& ids) {
    return table.index_select(0, ids);
  };
  const auto ids = torch::tensor({1, 3, 3}, torch::kLong);
  checkpoint(run, ids, CheckpointPolicy::kFull).pow(2).sum().backward();
  ASSERT_TRUE(table.grad().defined());
  auto expected = torch::zeros({10, 4});
  expected[1] = 2 * table[1].detach();
  expected[3] = 4 * table[3].detach();
  EXPECT_TRUE(torch::allclose(table.grad(), expected));
}

TEST(Checkpoint, KeepsTheSlotOfItsForwardSoTheWeightPassUsesTheRecompute) {
  // As a pipeline stage's split backward: the input pass defers the linear
  // layers' weight gradients into the slot the forward ran under; the
  // recomputation (during the input pass) must queue them there too.
  torch::manual_seed(1);
  Linear a(6, 5), b(5, 4);
  int calls = 0;
  auto run = [&calls, a, b](const at::Tensor& x) mutable {
    ++calls;
    return b(a(x).relu());
  };
  const auto x = torch::randn({3, 6}).requires_grad_(true);
  // Reference: no checkpoint, no deferral.
  run(x).sum().backward();
  const auto ga = a->weight.grad().clone(), gb = b->weight.grad().clone();
  const auto gx = x.grad().clone();
  a->weight.mutable_grad() = at::Tensor();
  b->weight.mutable_grad() = at::Tensor();
  x.mutable_grad() = at::Tensor();

  WeightGradSlot slot;
  at::Tensor y;
  {
    WeightGradSlotGuard guard(&slot);
    y = checkpoint(run, x, CheckpointPolicy::kKeepExpensiveOps);
  }
  slot.defer = true;
  y.sum().backward();  // the input pass, outside the guard
  slot.defer = false;
  EXPECT_EQ(calls, 3);  // reference, forward, one recomputation
  EXPECT_TRUE(torch::allclose(x.grad(), gx));
  EXPECT_FALSE(a->weight.grad().defined());
  EXPECT_EQ(slot.work.size(), 2u);
  slot.run();  // the weight pass
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(torch::allclose(a->weight.grad(), ga));
  EXPECT_TRUE(torch::allclose(b->weight.grad(), gb));
}

TEST(Checkpoint, KeepExpensiveOpsReplaysTheMatmulsInsteadOfRecomputingThem) {
  Linear a(4, 4);
  std::vector<SavedOps::Mode> modes;
  std::vector<int64_t> kept_bytes, pending;
  auto run = [&](const at::Tensor& x) mutable {
    SavedOps* ops = saved_ops();
    EXPECT_NE(ops, nullptr);
    modes.push_back(ops->mode());
    pending.push_back(static_cast<int64_t>(ops->pending()));
    const auto y = a(x);
    kept_bytes.push_back(ops->bytes());
    return y.sigmoid();
  };
  const auto x = torch::randn({2, 4}).requires_grad_(true);
  auto y = checkpoint(run, x, CheckpointPolicy::kKeepExpensiveOps);
  EXPECT_EQ(saved_ops(), nullptr);  // only inside the unit
  y.sum().backward();
  ASSERT_EQ(modes.size(), 2u);
  EXPECT_EQ(modes[0], SavedOps::Mode::kRecord);
  EXPECT_EQ(modes[1], SavedOps::Mode::kReplay);
  // The forward keeps the (2, 4) product; the recomputation takes it back.
  EXPECT_EQ(kept_bytes[0], 2 * 4 * 4);
  EXPECT_EQ(pending[1], 1);
  EXPECT_EQ(kept_bytes[1], 0);
  EXPECT_TRUE(a->weight.grad().defined());
}

TEST(Checkpoint, ARecomputationThatRunsOtherOpsIsAnError) {
  Linear a(4, 4);
  bool first = true;
  auto run = [&](const at::Tensor& x) mutable {
    auto y = a(x);
    if (first) {
      y = a(y);  // the first forward runs one more matmul
      first = false;
    }
    return y;
  };
  const auto x = torch::randn({2, 4}).requires_grad_(true);
  auto y = checkpoint(run, x, CheckpointPolicy::kKeepExpensiveOps);
  try {
    y.sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("fewer ops"), std::string::npos)
        << e.what();
  }
}

TEST(CausalAttention, RecomputedProbabilitiesGiveTheKeptOnesGradients) {
  // The op-selective replay keeps attention's output only; its backward
  // recomputes the probabilities (the kernel's rows, the blocked path's
  // blocks).
  torch::manual_seed(4);
  const auto q = torch::randn({2, 3, 130, 8}).requires_grad_(true);
  const auto k = torch::randn({2, 3, 130, 8}).requires_grad_(true);
  const auto v = torch::randn({2, 3, 130, 8}).requires_grad_(true);
  const auto go = torch::randn({2, 3, 130, 8});
  for (const bool blocked : {false, true}) {
    SCOPED_TRACE(blocked ? "blocked" : "kernel");
    const auto attend = [&](const at::Tensor& qq) {
      return blocked ? models::blocked_causal_attention(qq, k, v)
                     : models::causal_attention(qq, k, v);
    };
    for (auto* t : {&q, &k, &v}) {
      const_cast<at::Tensor*>(t)->mutable_grad() = at::Tensor();
    }
    attend(q).backward(go);
    const auto gq = q.grad().clone(), gk = k.grad().clone(),
               gv = v.grad().clone();
    for (auto* t : {&q, &k, &v}) {
      const_cast<at::Tensor*>(t)->mutable_grad() = at::Tensor();
    }
    const auto out = checkpoint(attend, q, CheckpointPolicy::kKeepExpensiveOps);
    out.backward(go);
    EXPECT_LE((q.grad() - gq).abs().max().item<double>(), 1e-6);
    EXPECT_LE((k.grad() - gk).abs().max().item<double>(), 1e-6);
    EXPECT_LE((v.grad() - gv).abs().max().item<double>(), 1e-6);
  }
}

}  // namespace
}  // namespace baton
