#include "models/llama3/llama3.h"

#include "models/common/hf_decoder.h"

namespace baton::llama3 {

namespace {

/// Llama 3.1's RoPE scaling: `factor` over an 8K pre-training context.
RopeScaling llama31_scaling(double factor) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

ModelArgs llama31(
    int64_t dim,
    int64_t n_layers,
    int64_t n_heads,
    double ffn_dim_multiplier,
    int64_t multiple_of) {
  ModelArgs a;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = 8;
  a.ffn_dim_multiplier = ffn_dim_multiplier;
  a.multiple_of = multiple_of;
  a.rope_scaling = llama31_scaling(8.0);
  a.max_seq_len = 131072;
  return a;
}

}  // namespace

const std::map<std::string, ModelArgs>& flavors() {
  static const std::map<std::string, ModelArgs> flavors = [] {
    std::map<std::string, ModelArgs> f;
    ModelArgs debug;
    debug.dim = 256;
    debug.n_layers = 6;
    debug.n_heads = 16;
    f["debugmodel"] = debug;

    // Sized for CPU training and benchmarks: 8 layers, GQA.
    ModelArgs small;
    small.dim = 512;
    small.n_layers = 8;
    small.n_heads = 8;
    small.n_kv_heads = 4;
    f["small"] = small;

    // Llama 3.2: the input embedding doubles as the output projection.
    for (const auto& [name, dim, layers, heads, multiplier] :
         {std::tuple{"1B", 2048, 16, 32, 1.5},
          std::tuple{"3B", 3072, 28, 24, 1.0}}) {
      ModelArgs a = llama31(dim, layers, heads, multiplier, 256);
      a.rope_scaling = llama31_scaling(32.0);
      a.tie_embeddings = true;
      f[name] = a;
    }
    f["8B"] = llama31(4096, 32, 32, 1.3, 1024);
    f["70B"] = llama31(8192, 80, 64, 1.3, 4096);
    f["405B"] = llama31(16384, 126, 128, 1.2, 4096);
    // Llama 3 as released in April 2024: the same shapes, RoPE unscaled,
    // an 8K context.
    for (const char* name : {"8B", "70B"}) {
      ModelArgs a = f[name];
      a.rope_scaling = {};
      a.max_seq_len = 8192;
      f[std::string("3.0-") + name] = a;
    }
    return f;
  }();
  return flavors;
}

ModelSpec spec() {
  ModelSpec spec = decoder_model_spec();
  spec.flavors = flavors();
  spec.hf = models::decoder_hf_format(
      {.model_type = "llama",
       .architecture = "LlamaForCausalLM",
       .default_head_dim = std::nullopt,
       .default_max_position_embeddings = 2048,
       .mlp_bias_field = true});
  return spec;
}

}  // namespace baton::llama3
