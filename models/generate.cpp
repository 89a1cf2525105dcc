#include "models/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace baton {

void SamplingOptions::validate() const {
  if (!(temperature >= 0.0)) {
    throw std::invalid_argument(
        "temperature " + std::to_string(temperature) +
        "; allowed: 0 (greedy) or more");
  }
  if (top_k < 0) {
    throw std::invalid_argument(
        "top_k " + std::to_string(top_k) + "; allowed: 0 (all) or more");
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    throw std::invalid_argument(
        "top_p " + std::to_string(top_p) + "; allowed: above 0, at most 1");
  }
}

int64_t choose_token(
    const at::Tensor& logits,
    const SamplingOptions& options,
    at::Generator& generator) {
  const at::Tensor x = logits.to(at::kFloat).reshape({-1});
  if (options.temperature == 0.0) {
    return x.argmax().item<int64_t>();
  }
  at::Tensor scores = x / options.temperature;
  const auto lowest = -std::numeric_limits<float>::infinity();
  if (options.top_k > 0 && options.top_k < scores.numel()) {
    const at::Tensor kth = std::get<0>(scores.topk(options.top_k)).min();
    scores = scores.masked_fill(scores < kth, lowest);
  }
  if (options.top_p < 1.0) {
    const auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/true);
    const at::Tensor probs = sorted.softmax(0);
    // A token is dropped when the ones likelier than it reach top_p
    // already; the likeliest is always kept.
    const at::Tensor before = probs.cumsum(0) - probs;
    const at::Tensor drop = before >= options.top_p;
    scores = scores.index_put(
        {order.masked_select(drop)},
        at::scalar_tensor(lowest, scores.options()));
  }
  return at::multinomial(scores.softmax(0), 1, false, generator)
      .item<int64_t>();
}

Generation generate(
    models::TransformerImpl& model,
    const std::vector<int32_t>& prompt,
    const GenerateOptions& options,
    const std::function<void(int32_t)>& on_token) {
  options.sampling.validate();
  if (prompt.empty()) {
    throw std::invalid_argument(
        "[generate] the prompt has no tokens; allowed: at least one (the "
        "tokenizer's BOS for an empty text)");
  }
  if (options.max_new_tokens < 1) {
    throw std::invalid_argument(
        "[generate] max_new_tokens " + std::to_string(options.max_new_tokens) +
        "; allowed: at least 1");
  }
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t capacity = P + options.max_new_tokens;
  const int64_t max_len = model.args().max_seq_len;
  if (max_len > 0 && capacity > max_len) {
    throw std::invalid_argument(
        "[generate] " + std::to_string(P) + " prompt tokens + " +
        std::to_string(options.max_new_tokens) +
        " new ones; allowed: at most the model's max_seq_len " +
        std::to_string(max_len));
  }
  at::NoGradGuard no_grad;
  const at::Device device = model.tok_embeddings->weight.device();
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(options.seed);
  models::KvCache cache = model.new_cache(1, capacity);
  at::Tensor ids = at::tensor(
                       std::vector<int64_t>(prompt.begin(), prompt.end()),
                       at::TensorOptions(at::kLong).device(device))
                       .view({1, P});
  Generation out;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    // (1, T, vocab): the last position's logits choose the next token.
    const at::Tensor logits = model.forward_cached(ids, cache)
                                  .select(1, -1)
                                  .squeeze(0)
                                  .to(at::kCPU, at::kFloat);
    const auto next =
        static_cast<int32_t>(choose_token(logits, options.sampling, generator));
    if (options.keep_logits) {
      out.logits.push_back(logits);
    }
    out.tokens.push_back(next);
    if (on_token) {
      on_token(next);
    }
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) !=
        options.stop_ids.end()) {
      out.stopped = true;
      break;
    }
    ids = at::full({1, 1}, next, at::TensorOptions(at::kLong).device(device));
  }
  return out;
}

}  // namespace baton
