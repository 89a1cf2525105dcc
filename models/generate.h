#pragma once

// Text generation with the decoder of models/common: a prompt run through
// the model once into a KV cache, then one token at a time, each chosen
// from its logits greedily or by sampling (temperature, top-k, top-p, as
// transformers applies them, in that order).

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "models/common/transformer.h"

namespace baton {

/// How the next token is chosen from the logits.
struct SamplingOptions {
  /// 0: greedy (the largest logit, the lowest id of a tie); else the
  /// logits are divided by it before the softmax.
  double temperature = 0.0;
  /// Sample among the k likeliest tokens only; 0: all.
  int64_t top_k = 0;
  /// Sample among the likeliest tokens whose probabilities, summed in
  /// descending order, first reach top_p (the token that crosses it
  /// included); 1: all.
  double top_p = 1.0;

  /// Throws std::invalid_argument naming the option outside its range
  /// (temperature >= 0, top_k >= 0, 0 < top_p <= 1).
  void validate() const;
};

/// The id chosen from `logits` (vocab,), with `generator` for the draw.
int64_t choose_token(
    const at::Tensor& logits,
    const SamplingOptions& options,
    at::Generator& generator);

struct GenerateOptions {
  /// Tokens generated at most.
  int64_t max_new_tokens = 64;
  /// Generation stops after any of these (EOS); it is returned.
  std::vector<int32_t> stop_ids;
  SamplingOptions sampling;
  /// The draws' generator seed.
  uint64_t seed = 0;
  /// Keep each step's logits (Generation::logits).
  bool keep_logits = false;
};

struct Generation {
  /// The generated ids (not the prompt's).
  std::vector<int32_t> tokens;
  /// Whether a stop id ended it (else max_new_tokens did).
  bool stopped = false;
  /// With keep_logits, the logits (vocab,) float32 on the CPU each token
  /// was chosen from: tokens[i] from logits[i].
  std::vector<at::Tensor> logits;
};

/// Generates after `prompt` (not empty) with `model`, a whole model, under
/// no grad; `on_token` sees each id as it is chosen. The cache holds the
/// prompt and max_new_tokens; throws std::invalid_argument where that is
/// more than the model's max_seq_len.
Generation generate(
    models::TransformerImpl& model,
    const std::vector<int32_t>& prompt,
    const GenerateOptions& options,
    const std::function<void(int32_t)>& on_token = {});

}  // namespace baton
