#include "models/llama/args.h"

#include <stdexcept>
#include <string>

#include "models/model_spec.h"

namespace baton::llama {

int64_t ModelArgs::ffn_hidden_dim() const {
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier) {
    hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  }
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

int64_t ModelArgs::params_per_layer() const {
  const int64_t kv_dim = kv_heads() * head_dim();
  const int64_t attention = 2 * dim * dim + 2 * dim * kv_dim;
  const int64_t feed_forward = 3 * dim * ffn_hidden_dim();
  const int64_t norms = 2 * dim;
  return attention + feed_forward + norms;
}

int64_t ModelArgs::num_params() const {
  const int64_t embedding = vocab_size * dim;
  const int64_t output = dim * vocab_size + dim;  // final norm and projection
  return embedding + n_layers * params_per_layer() + output;
}

double ModelArgs::flops_per_token(int64_t seq_len) const {
  const double dense =
      6.0 * static_cast<double>(num_params() - vocab_size * dim);
  const double attention =
      12.0 * static_cast<double>(n_layers) * static_cast<double>(n_heads) *
      static_cast<double>(head_dim()) * static_cast<double>(seq_len);
  return dense + attention;
}

void ModelArgs::validate() const {
  auto check = [](bool ok, const std::string& message) {
    if (!ok) {
      throw std::invalid_argument("[llama] " + message);
    }
  };
  check(
      dim > 0 && n_layers >= 0 && n_heads > 0 && vocab_size > 0,
      "dim, n_heads and vocab_size must be positive");
  check(
      dim % n_heads == 0,
      "dim " + std::to_string(dim) + " is not divisible by n_heads " +
          std::to_string(n_heads));
  check(
      kv_heads() > 0 && n_heads % kv_heads() == 0,
      "n_heads " + std::to_string(n_heads) +
          " is not divisible by n_kv_heads " + std::to_string(kv_heads()));
  check(
      head_dim() % 2 == 0,
      "head_dim " + std::to_string(head_dim()) + " must be even for RoPE");
  check(multiple_of > 0, "multiple_of must be positive");
}

std::vector<ParamShape> parameter_shapes(
    const ModelArgs& args, const ChunkSpec& chunk) {
  const int64_t end = chunk.end_layer < 0 ? args.n_layers : chunk.end_layer;
  const int64_t q = args.n_heads * args.head_dim();
  const int64_t kv = args.kv_heads() * args.head_dim();
  const int64_t hidden = args.ffn_hidden_dim();
  std::vector<ParamShape> shapes;
  if (chunk.embedding) {
    shapes.push_back({"tok_embeddings.weight", {args.vocab_size, args.dim}});
  }
  for (int64_t i = chunk.first_layer; i < end; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    shapes.push_back({p + "attention.wq.weight", {q, args.dim}});
    shapes.push_back({p + "attention.wk.weight", {kv, args.dim}});
    shapes.push_back({p + "attention.wv.weight", {kv, args.dim}});
    shapes.push_back({p + "attention.wo.weight", {args.dim, q}});
    shapes.push_back({p + "feed_forward.w1.weight", {hidden, args.dim}});
    shapes.push_back({p + "feed_forward.w2.weight", {args.dim, hidden}});
    shapes.push_back({p + "feed_forward.w3.weight", {hidden, args.dim}});
    shapes.push_back({p + "attention_norm.weight", {args.dim}});
    shapes.push_back({p + "ffn_norm.weight", {args.dim}});
  }
  if (chunk.output) {
    shapes.push_back({"norm.weight", {args.dim}});
    shapes.push_back({"output.weight", {args.vocab_size, args.dim}});
  }
  return shapes;
}

const std::map<std::string, ModelArgs>& llama3_flavors() {
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

    ModelArgs b8;
    b8.dim = 4096;
    b8.n_layers = 32;
    b8.n_heads = 32;
    b8.n_kv_heads = 8;
    b8.ffn_dim_multiplier = 1.3;
    b8.multiple_of = 1024;
    f["8B"] = b8;

    ModelArgs b70;
    b70.dim = 8192;
    b70.n_layers = 80;
    b70.n_heads = 64;
    b70.n_kv_heads = 8;
    b70.ffn_dim_multiplier = 1.3;
    b70.multiple_of = 4096;
    f["70B"] = b70;

    ModelArgs b405;
    b405.dim = 16384;
    b405.n_layers = 126;
    b405.n_heads = 128;
    b405.n_kv_heads = 8;
    b405.ffn_dim_multiplier = 1.2;
    b405.multiple_of = 4096;
    f["405B"] = b405;
    return f;
  }();
  return flavors;
}

}  // namespace baton::llama
