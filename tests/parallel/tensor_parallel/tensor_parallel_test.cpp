// The tensor_parallel applier on its own: what each rank holds (slices of
// the whole weights, recorded for the checkpoint and marked split along tp
// for the grad norm), and the shapes it refuses, by name.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "config/job_config.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "parallel/tensor_parallel/tensor_parallel.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton::tensor_parallel {
namespace {

TEST(TensorParallelApplier, EachRankHoldsItsSliceOfTheWholeWeights) {
  // tiny_llama: dim 32, 4 heads of 8, 2 key/value heads, hidden 96, and a
  // vocabulary of 13, split 7 + 6.
  const auto whole = testing::tiny_llama(13, 4);
  testing::run_ranks(2, [&](int64_t rank, dist::Runtime& rt) {
    const dist::ParallelMesh mesh(
        baton::testing::builtin_dims(1, 1, 2, 1, 2),
        rank,
        rt.shared_from_this());
    JobConfig config;
    config.training.seq_len = 8;
    ModelPart part(testing::tiny_llama(13, 4));
    TensorParallelApplier().apply(
        part, ParallelContext{config, mesh, at::kCPU});
    const auto params = part.module().named_parameters();
    const auto expect_slice =
        [&](const std::string& fqn, int64_t dim, int64_t begin, int64_t size) {
          SCOPED_TRACE(fqn);
          const at::Tensor& p = params[fqn];
          const at::Tensor w = whole->named_parameters()[fqn];
          EXPECT_TRUE(torch::equal(p, w.narrow(dim, begin, size)));
          const ParamSlice* slice = part.slice(fqn);
          ASSERT_NE(slice, nullptr);
          EXPECT_EQ(slice->global_shape, w.sizes().vec());
          std::vector<int64_t> offsets(w.dim(), 0);
          offsets[dim] = begin;
          EXPECT_EQ(slice->offsets, offsets);
          EXPECT_EQ(part.grad_split(fqn), std::vector<std::string>{"tp"});
        };
    expect_slice("layers.0.attention.wq.weight", 0, 16 * rank, 16);
    expect_slice("layers.0.attention.wk.weight", 0, 8 * rank, 8);
    expect_slice("layers.1.attention.wv.weight", 0, 8 * rank, 8);
    expect_slice("layers.1.attention.wo.weight", 1, 16 * rank, 16);
    expect_slice("layers.0.feed_forward.w1.weight", 0, 48 * rank, 48);
    expect_slice("layers.0.feed_forward.w3.weight", 0, 48 * rank, 48);
    expect_slice("layers.1.feed_forward.w2.weight", 1, 48 * rank, 48);
    expect_slice("tok_embeddings.weight", 0, 7 * rank, 7 - rank);
    expect_slice("output.weight", 0, 7 * rank, 7 - rank);
    for (const char* fqn :
         {"layers.0.attention_norm.weight",
          "layers.1.ffn_norm.weight",
          "norm.weight"}) {
      EXPECT_EQ(part.slice(fqn), nullptr) << fqn;
      EXPECT_TRUE(part.grad_split(fqn).empty()) << fqn;
      EXPECT_TRUE(torch::equal(params[fqn], whole->named_parameters()[fqn]));
    }
  });
}

TEST(TensorParallelApplier, NamesTheShapeThatDoesNotSplit) {
  ModelArgs args;
  args.dim = 32;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 13;
  args.multiple_of = 16;  // hidden 96
  EXPECT_FALSE(tensor_parallel_problem(args, 8, 2).has_value());
  const auto message = [&](int64_t seq, int64_t tp) {
    const auto p = tensor_parallel_problem(args, seq, tp);
    EXPECT_TRUE(p.has_value());
    EXPECT_EQ(p->key, "parallelism.tensor_parallel_degree");
    return p->message;
  };
  EXPECT_EQ(
      message(8, 3),
      "parallelism.tensor_parallel_degree: 3 does not divide the model's "
      "n_heads (4); allowed: a divisor of n_heads, n_kv_heads, the "
      "feed-forward hidden size and training.seq_len");
  EXPECT_NE(message(8, 4).find("n_kv_heads (2)"), std::string::npos);
  EXPECT_NE(message(6, 4).find("n_kv_heads"), std::string::npos);
  args.n_kv_heads = 4;
  EXPECT_NE(
      message(6, 4).find("training.seq_len (sequence parallel splits it) (6)"),
      std::string::npos);
  args.vocab_size = 3;
  EXPECT_NE(
      message(8, 4).find("4 ranks for a vocabulary of 3"), std::string::npos);
}

TEST(TensorParallelApplier, RefusesAtApplyWithAConfigError) {
  testing::run_ranks(3, [&](int64_t rank, dist::Runtime& rt) {
    const dist::ParallelMesh mesh(
        baton::testing::builtin_dims(1, 1, 3, 1, 3),
        rank,
        rt.shared_from_this());
    JobConfig config;
    ModelPart part(testing::tiny_llama(13, 4));
    EXPECT_THROW(
        TensorParallelApplier().apply(
            part, ParallelContext{config, mesh, at::kCPU}),
        ConfigError);
  });
}

}  // namespace
}  // namespace baton::tensor_parallel
