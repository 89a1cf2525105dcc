// The model on a CUDA device against the CPU, from the same weights. Skips
// (with the reason) where there is no CUDA device, as on Debian's CPU-only
// libtorch.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "models/common/transformer.h"
#include "models/generate.h"

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

}  // namespace
}  // namespace baton::models
