#include "models/common/transformer.h"

#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "common/text.h"
#include "models/common/block_attention.h"
#include "models/common/fused_ops.h"
#include "models/forward_state.h"
#include "models/param_cast.h"

namespace baton::models {

namespace F = torch::nn::functional;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  return rms_norm(x, compute_param(weight), eps_);
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope) {
  const auto sizes = x.sizes();  // (B, T, H, D)
  const auto pairs = x.reshape({sizes[0], sizes[1], sizes[2], -1, 2});
  const auto x0 = pairs.select(-1, 0);  // (B, T, H, D/2)
  const auto x1 = pairs.select(-1, 1);
  const auto cos = rope.cos.view({1, sizes[1], 1, -1});  // (1, T, 1, D/2)
  const auto sin = rope.sin.view({1, sizes[1], 1, -1});
  return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).view(sizes);
}

AttentionImpl::AttentionImpl(const ModelArgs& args)
    : head_dim_(args.head_dim()) {
  const int64_t q_width = args.n_heads * head_dim_;
  const int64_t kv_width = args.kv_heads() * head_dim_;
  wq = register_module("wq", Linear(args.dim, q_width));
  wk = register_module("wk", Linear(args.dim, kv_width));
  wv = register_module("wv", Linear(args.dim, kv_width));
  wo = register_module("wo", Linear(q_width, args.dim));
  if (args.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, args.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, args.norm_eps));
  }
}

namespace {

/// (B, KV, T, D) -> (B, H, T, D), each key/value head shared by H / KV
/// query heads.
at::Tensor expand_kv(const at::Tensor& x, int64_t n_heads) {
  const auto s = x.sizes();
  TORCH_CHECK(
      s[1] > 0 && n_heads % s[1] == 0,
      "[model] attention: ",
      n_heads,
      " query heads; allowed: a multiple of the ",
      s[1],
      " key/value heads this module holds");
  const int64_t repeats = n_heads / s[1];
  if (repeats == 1) {
    return x;
  }
  return x.unsqueeze(2)
      .expand({s[0], s[1], repeats, s[2], s[3]})
      .reshape({s[0], n_heads, s[2], s[3]});
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionImpl::heads_first(
    const at::Tensor& x, const RopeTables& rope, double q_scale) {
  const int64_t B = x.size(0), T = x.size(1);
  // (B, T, heads, D) -> (B, heads, T, D), normed per head, rotated
  at::Tensor q = wq(x).view({B, T, -1, head_dim_});
  at::Tensor k = wk(x).view({B, T, -1, head_dim_});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  return {
      rope_heads_first(q, rope.cos, rope.sin, q_scale),
      rope_heads_first(k, rope.cos, rope.sin),
      wv(x).view({B, T, -1, head_dim_}).transpose(1, 2)};
}

at::Tensor AttentionImpl::forward(
    const at::Tensor& input, const RopeTables& rope) {
  const at::Tensor x = hooks.in(input);
  const int64_t B = x.size(0), T = x.size(1);
  // Head counts come from the projections this module holds, so a tensor
  // parallel applier can give it a slice of the heads (and kv heads).
  // On the CPU, blocked attention skips the masked half of the scores and
  // takes q with the 1 / sqrt(D) factor folded into its rotation, as do
  // the split and document attentions everywhere.
  const at::Tensor& documents = forward_state().documents;
  const bool blocked = x.device().is_cpu();
  const bool scaled = blocked || split_attention || documents.defined();
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto [q, k, v] = heads_first(x, rope, scaled ? scale : 1.0);
  at::Tensor out;  // (B, H, T, D)
  if (split_attention) {
    // The sequence is split across ranks: this rank's rows over all of it.
    out = split_attention->attend(q, k, v, documents);
  } else if (documents.defined()) {
    // Packed documents kept apart, in the block engine's tiles (k and v
    // unexpanded).
    out = document_attention(q, k, v, documents);
  } else {
    const int64_t heads = q.size(1);
    k = expand_kv(k, heads);
    v = expand_kv(v, heads);
    out = blocked ? causal_attention(q, k, v, /*q_scaled=*/true)
                  : at::scaled_dot_product_attention(
                        q,
                        k,
                        v,
                        /*attn_mask=*/{},
                        /*dropout_p=*/0.0,
                        /*is_causal=*/true);
  }
  // (B, H, T, D) -> (B, T, H * D)
  return hooks.out(wo(out.transpose(1, 2).reshape({B, T, -1})));
}

at::Tensor AttentionImpl::forward_cached(
    const at::Tensor& x,
    const RopeTables& rope,
    at::Tensor& k_cache,
    at::Tensor& v_cache,
    int64_t start) {
  const int64_t B = x.size(0), T = x.size(1);
  const auto [q, k, v] = heads_first(x, rope, 1.0);
  k_cache.narrow(2, start, T).copy_(k);
  v_cache.narrow(2, start, T).copy_(v);
  const int64_t heads = q.size(1);
  const at::Tensor keys = expand_kv(k_cache.narrow(2, 0, start + T), heads);
  const at::Tensor values = expand_kv(v_cache.narrow(2, 0, start + T), heads);
  // Query i sits at position start + i and sees keys 0 .. start + i.
  std::optional<at::Tensor> mask;
  if (T > 1) {
    mask = at::ones({T, start + T}, x.options().dtype(at::kBool)).tril(start);
  }
  const at::Tensor out =
      at::scaled_dot_product_attention(q, keys, values, mask);
  return wo(out.transpose(1, 2).reshape({B, T, -1}));
}

FeedForwardImpl::FeedForwardImpl(const ModelArgs& args) {
  const int64_t hidden = args.ffn_hidden_dim();
  w1 = register_module("w1", Linear(args.dim, hidden));
  w2 = register_module("w2", Linear(hidden, args.dim));
  w3 = register_module("w3", Linear(args.dim, hidden));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& input) {
  const at::Tensor x = hooks.in(input);
  return hooks.out(w2(swiglu(w1(x), w3(x))));
}

TransformerBlockImpl::TransformerBlockImpl(
    const ModelArgs& args, int64_t layer) {
  // Meta's registration order, so parameters list in their state-dict order.
  attention = register_module("attention", Attention(args));
  if (args.moe.is_moe_layer(layer)) {
    moe = register_module("moe", MoE(args));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(args));
  }
  attention_norm =
      register_module("attention_norm", RMSNorm(args.dim, args.norm_eps));
  ffn_norm = register_module("ffn_norm", RMSNorm(args.dim, args.norm_eps));
}

at::Tensor TransformerBlockImpl::ffn(const at::Tensor& h) {
  return moe ? moe(h) : feed_forward(h);
}

at::Tensor TransformerBlockImpl::forward(
    const at::Tensor& x, const RopeTables& rope) {
  auto h = x + attention(attention_norm(x), rope);
  return h + ffn(ffn_norm(h));
}

at::Tensor TransformerBlockImpl::forward_cached(
    const at::Tensor& x,
    const RopeTables& rope,
    at::Tensor& k_cache,
    at::Tensor& v_cache,
    int64_t start) {
  auto h = x + attention->forward_cached(
                   attention_norm(x), rope, k_cache, v_cache, start);
  return h + ffn(ffn_norm(h));
}

TransformerImpl::TransformerImpl(const ModelArgs& args, const ChunkSpec& chunk)
    : args_(args), chunk_(chunk) {
  args_.validate();
  if (chunk_.end_layer < 0) {
    chunk_.end_layer = args_.n_layers;
  }
  if (chunk_.first_layer < 0 || chunk_.first_layer > chunk_.end_layer ||
      chunk_.end_layer > args_.n_layers) {
    throw std::invalid_argument(
        "[model] layer range [" + std::to_string(chunk_.first_layer) + ", " +
        std::to_string(chunk_.end_layer) + ") is not within the model's " +
        std::to_string(args_.n_layers) + " layers");
  }
  if (chunk_.first_layer == chunk_.end_layer && !chunk_.embedding &&
      !chunk_.output) {
    throw std::invalid_argument("[model] a model chunk must hold something");
  }
  if (chunk_.embedding) {
    tok_embeddings = register_module(
        "tok_embeddings", torch::nn::Embedding(args_.vocab_size, args_.dim));
  }
  layers = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = chunk_.first_layer; i < chunk_.end_layer; ++i) {
    blocks_.emplace_back(args_, i);
    layers->update({{std::to_string(i), blocks_.back().ptr()}});
  }
  block_wrappers_.resize(blocks_.size());
  if (chunk_.output) {
    norm = register_module("norm", RMSNorm(args_.dim, args_.norm_eps));
    if (!args_.tie_embeddings) {
      output = register_module("output", Linear(args_.dim, args_.vocab_size));
    } else {
      if (!chunk_.embedding) {
        // The last pipeline stage's copy of the first stage's weight
        // (initialised alike by its name; parallel/pipeline ties them).
        tok_embeddings = register_module(
            "tok_embeddings",
            torch::nn::Embedding(args_.vocab_size, args_.dim));
      }
      output = register_module("output", Linear(tok_embeddings->weight));
    }
  }
}

at::Tensor rope_inv_freq(const ModelArgs& args) {
  const int64_t D = args.head_dim();
  const auto exponents = torch::arange(0, D / 2, torch::kFloat64) * (2.0 / D);
  const at::Tensor inv_freq = torch::pow(args.rope_theta, -exponents);
  const RopeScaling& s = args.rope_scaling;
  const auto original = static_cast<double>(s.original_max_position_embeddings);
  if (s.type == "llama3") {
    // Llama 3.1: wavelengths above original / low_freq_factor are divided
    // by factor, those below original / high_freq_factor kept, and the
    // ones between blended by how many times they fit the original context.
    const at::Tensor wavelen = 2.0 * M_PI / inv_freq;
    const double low_wavelen = original / s.low_freq_factor;
    const double high_wavelen = original / s.high_freq_factor;
    const at::Tensor smooth = (original / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
    const at::Tensor blended =
        (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
    return torch::where(
        wavelen > low_wavelen,
        inv_freq / s.factor,
        torch::where(wavelen < high_wavelen, inv_freq, blended));
  }
  if (s.type == "yarn") {
    // YaRN: interpolated (divided by factor) below the correction range's
    // low end, extrapolated (kept) above its high end, a linear ramp
    // between; the range is where the original context turns
    // beta_fast and beta_slow times.
    const auto correction_dim = [&](double rotations) {
      return D * std::log(original / (rotations * 2.0 * M_PI)) /
             (2.0 * std::log(args.rope_theta));
    };
    double low = correction_dim(s.beta_fast);
    double high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(D - 1));
    if (low == high) {
      high += 0.001;
    }
    const at::Tensor ramp =
        ((torch::arange(0, D / 2, torch::kFloat64) - low) / (high - low))
            .clamp(0.0, 1.0);
    const at::Tensor extrapolation = 1.0 - ramp;
    return inv_freq / s.factor * (1.0 - extrapolation) +
           inv_freq * extrapolation;
  }
  return inv_freq;
}

RopeTables rope_tables(
    const ModelArgs& args,
    const at::Tensor& positions,
    const at::Device& device) {
  const at::Tensor inv_freq = rope_inv_freq(args);  // (D/2)
  const auto angles =
      torch::outer(positions.to(torch::kFloat64), inv_freq);  // (T, D/2)
  const double scale = args.rope_scaling.attention_scale();
  return {
      (angles.cos() * scale).to(device, torch::kFloat32),
      (angles.sin() * scale).to(device, torch::kFloat32),
      positions.numel() > 0 ? positions[0].item<int64_t>() : 0};
}

RopeTables rope_tables(
    const ModelArgs& args,
    int64_t first_position,
    int64_t seq_len,
    const at::Device& device) {
  return rope_tables(
      args,
      torch::arange(first_position, first_position + seq_len, torch::kLong),
      device);
}

const RopeTables& TransformerImpl::rope_for(
    int64_t seq_len, const at::Device& device) {
  const RopeKey key{
      position_offset, sequence_split.shards, sequence_split.index};
  if (!rope_.cos.defined() || rope_.cos.size(0) != seq_len ||
      rope_key_ != key || rope_.cos.device() != device) {
    rope_ = rope_tables(
        args_, sequence_split.positions(seq_len) + position_offset, device);
    rope_key_ = key;
  }
  return rope_;
}

at::Tensor TransformerImpl::forward(const at::Tensor& input) {
  return run_wrapped(
      root_wrappers_,
      [this](const at::Tensor& x) { return forward_root(x); },
      input);
}

at::Tensor TransformerImpl::forward_root(const at::Tensor& input) {
  // The embedding reads its weight as every module does (compute_param),
  // so a mixed-precision forward starts in the compute dtype.
  at::Tensor h = input;  // (B, T, dim), or (B, T / tp, dim) sequence-sharded
  if (chunk_.embedding) {
    const at::Tensor weight = compute_param(tok_embeddings->weight);
    h = embedding_lookup ? embedding_lookup(input, weight)
                         : F::embedding(input, weight);
  }
  // Token ids are the whole sequence; a stage's hidden input may be its
  // shard of it.
  const int64_t seq_len =
      chunk_.embedding ? input.size(1) : input.size(1) * sequence_shards;
  const auto& rope = rope_for(seq_len, h.device());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    auto& block = blocks_[i];
    h = run_wrapped(
        block_wrappers_[i],
        // By value: activation checkpointing reruns this in backward.
        [block, rope](const at::Tensor& x) mutable { return block(x, rope); },
        h);
  }
  if (chunk_.output) {
    h = output(output_hooks.in(norm(h)));  // (B, T, vocab)
  }
  return h;
}

KvCache TransformerImpl::new_cache(int64_t batch, int64_t capacity) const {
  if (!chunk_.embedding || !chunk_.output ||
      static_cast<int64_t>(blocks_.size()) != args_.n_layers) {
    throw std::invalid_argument(
        "[model] a KV cache needs the whole model; this chunk holds layers [" +
        std::to_string(chunk_.first_layer) + ", " +
        std::to_string(chunk_.end_layer) + ")" +
        (chunk_.embedding ? "" : " without the embedding") +
        (chunk_.output ? "" : " without the output"));
  }
  if (batch < 1 || capacity < 1) {
    throw std::invalid_argument(
        "[model] a KV cache of " + std::to_string(batch) + " x " +
        std::to_string(capacity) + " tokens; allowed: at least 1 x 1");
  }
  KvCache cache;
  const at::Tensor& w = tok_embeddings->weight;
  for (const auto& block : blocks_) {
    // The kv heads this module holds (all of them: a whole model).
    const int64_t kv_heads =
        block->attention->wk->weight.size(0) / args_.head_dim();
    const std::vector<int64_t> shape{
        batch, kv_heads, capacity, args_.head_dim()};
    cache.k.push_back(at::zeros(shape, w.options()));
    cache.v.push_back(at::zeros(shape, w.options()));
  }
  return cache;
}

at::Tensor TransformerImpl::forward_cached(
    const at::Tensor& ids, KvCache& cache) {
  const int64_t T = ids.size(1);
  const int64_t start = cache.length;
  if (cache.k.size() != blocks_.size() || start + T > cache.capacity()) {
    throw std::invalid_argument(
        "[model] forward_cached: " + std::to_string(start) + " + " +
        std::to_string(T) + " tokens; allowed: at most the cache's " +
        std::to_string(cache.capacity()) +
        " (made by new_cache for this "
        "model)");
  }
  at::Tensor h = F::embedding(ids, compute_param(tok_embeddings->weight));
  const RopeTables rope = rope_tables(args_, start, T, h.device());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    h = blocks_[i]->forward_cached(h, rope, cache.k[i], cache.v[i], start);
  }
  cache.length = start + T;
  return output(norm(h));
}

std::vector<ParamShape> parameter_shapes(
    const ModelArgs& args, const ChunkSpec& chunk) {
  const int64_t end = chunk.end_layer < 0 ? args.n_layers : chunk.end_layer;
  const int64_t D = args.head_dim();
  const int64_t q = args.n_heads * D;
  const int64_t kv = args.kv_heads() * D;
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
    if (args.qk_norm) {
      shapes.push_back({p + "attention.q_norm.weight", {D}});
      shapes.push_back({p + "attention.k_norm.weight", {D}});
    }
    if (args.moe.is_moe_layer(i)) {
      const MoeArgs& m = args.moe;
      const int64_t h = m.expert_hidden;
      shapes.push_back(
          {p + "moe.router.gate.weight", {m.num_experts, args.dim}});
      shapes.push_back({p + "moe.experts.w1", {m.num_experts, h, args.dim}});
      shapes.push_back({p + "moe.experts.w2", {m.num_experts, args.dim, h}});
      shapes.push_back({p + "moe.experts.w3", {m.num_experts, h, args.dim}});
      if (m.shared_experts > 0) {
        const int64_t s = m.shared_experts * h;
        shapes.push_back({p + "moe.shared_experts.w1.weight", {s, args.dim}});
        shapes.push_back({p + "moe.shared_experts.w2.weight", {args.dim, s}});
        shapes.push_back({p + "moe.shared_experts.w3.weight", {s, args.dim}});
      }
    } else {
      shapes.push_back({p + "feed_forward.w1.weight", {hidden, args.dim}});
      shapes.push_back({p + "feed_forward.w2.weight", {args.dim, hidden}});
      shapes.push_back({p + "feed_forward.w3.weight", {hidden, args.dim}});
    }
    shapes.push_back({p + "attention_norm.weight", {args.dim}});
    shapes.push_back({p + "ffn_norm.weight", {args.dim}});
  }
  if (chunk.output) {
    shapes.push_back({"norm.weight", {args.dim}});
    if (!args.tie_embeddings) {
      shapes.push_back({"output.weight", {args.vocab_size, args.dim}});
    } else if (!chunk.embedding) {
      shapes.push_back({"tok_embeddings.weight", {args.vocab_size, args.dim}});
    }
  }
  return shapes;
}

std::vector<std::string> TransformerImpl::unit_names() const {
  std::vector<std::string> names;
  for (int64_t i = chunk_.first_layer; i < chunk_.end_layer; ++i) {
    names.push_back("layers." + std::to_string(i));
  }
  names.emplace_back();
  return names;
}

void TransformerImpl::wrap_unit(
    const std::string& name, std::shared_ptr<UnitWrapper> wrapper) {
  if (!wrapper) {
    throw std::invalid_argument("[model] wrap_unit '" + name + "': null");
  }
  if (name.empty()) {
    root_wrappers_.push_back(std::move(wrapper));
    return;
  }
  const auto names = unit_names();
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    if (names[i] == name) {
      block_wrappers_[i].push_back(std::move(wrapper));
      return;
    }
  }
  const std::vector<std::string> blocks(names.begin(), names.end() - 1);
  throw std::invalid_argument(
      "[model] wrap_unit: '" + name +
      "' is not a unit of this chunk; allowed: " +
      (blocks.empty() ? std::string() : join(blocks, ", ") + ", ") +
      "\"\" (the root)");
}

}  // namespace baton::models
