#pragma once

// A small Llama for tests, initialised from a seed.

#include <memory>

#include "models/common/transformer.h"

namespace baton::testing {

/// dim 32, 2 layers, 4 query and 2 key/value heads, `vocab` tokens.
inline std::shared_ptr<models::TransformerImpl> tiny_llama(
    int64_t vocab, uint64_t seed) {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = vocab;
  args.multiple_of = 16;
  auto model = std::make_shared<models::TransformerImpl>(args);
  model->init_weights(seed);
  return model;
}

}  // namespace baton::testing
