#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <tuple>
#include <vector>

#include "common/sequence_split.h"
#include "models/linear.h"
#include "models/model_args.h"
#include "models/model_spec.h"
#include "models/moe.h"
#include "models/region.h"

namespace baton::models {

/// Root-mean-square layer norm with a learned scale.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  /// x: (..., dim) -> (..., dim)
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

/// Rotary position embedding tables for T consecutive positions.
struct RopeTables {
  at::Tensor cos;  // (T, head_dim / 2)
  at::Tensor sin;  // (T, head_dim / 2)
  /// The position of row 0.
  int64_t first_position = 0;
};

/// RoPE's inverse frequencies (head_dim / 2), float64: rope_theta's, then
/// stretched as args.rope_scaling says (Llama 3.1's or YaRN, as
/// transformers computes them).
at::Tensor rope_inv_freq(const ModelArgs& args);

/// The tables of positions first_position .. first_position + seq_len - 1
/// for `args`' head width, rope_theta and scaling (YaRN's attention factor
/// multiplies cos and sin), float32 on `device` (angles in float64 first,
/// so a row does not depend on where the table starts).
RopeTables rope_tables(
    const ModelArgs& args,
    int64_t first_position,
    int64_t seq_len,
    const at::Device& device);

/// The same for the positions `positions` ((T) int64, in any order: a
/// rank's shard of a split sequence).
RopeTables rope_tables(
    const ModelArgs& args,
    const at::Tensor& positions,
    const at::Device& device);

/// Rotates the pairs (x[2i], x[2i+1]) of each head, Meta's layout.
/// x: (B, T, H, head_dim) -> (B, T, H, head_dim)
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope);

/// The keys and values a whole model has computed so far, for generation:
/// per block, (B, kv_heads, capacity, head_dim) each, of which the first
/// `length` positions are filled.
struct KvCache {
  std::vector<at::Tensor> k, v;
  int64_t length = 0;
  int64_t capacity() const {
    return k.empty() ? 0 : k.front().size(2);
  }
};

/// Attention over a sequence whose positions are split across ranks
/// (context parallel sets one on each attention module): each rank holds
/// its SequenceSplit rows of q, k and v and gets its rows' causal attention
/// over the whole sequence.
class SplitSequenceAttention {
 public:
  virtual ~SplitSequenceAttention() = default;
  /// q: (B, H, T_local, D), already multiplied by 1 / sqrt(D); k, v:
  /// (B, KV, T_local, D), KV dividing H (query head h reads key/value head
  /// h / (H / KV)). `documents`: under document masking each position's
  /// document, (B, T_whole) for the whole sequence (a row sees only its own
  /// document's keys); undefined: one document. Returns (B, H, T_local, D).
  virtual at::Tensor attend(
      const at::Tensor& q,
      const at::Tensor& k,
      const at::Tensor& v,
      const at::Tensor& documents) = 0;
};

/// Causal grouped-query attention: n_heads query heads share n_kv_heads
/// key/value heads, each query and key head RMS-normed before RoPE where
/// args.qk_norm (q_norm, k_norm: one weight of head_dim, shared by the
/// heads). The forward reads the head counts from the rows of wq and wk
/// (head_dim each), so the module may hold a slice of the heads. Where the
/// forward state carries documents (ForwardState::documents, document
/// masking), a position attends only to its own document's earlier ones
/// (block_attention.h's document_attention, or the split attention's).
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  /// x: (B, T, dim) -> (B, T, dim)
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope);
  /// The same for positions start .. start + T - 1 (rope's rows) of
  /// sequences whose earlier keys and values are in `k_cache` / `v_cache`
  /// (B, kv_heads, capacity, D); this call's are written after them. Each
  /// position attends to itself and every earlier one.
  at::Tensor forward_cached(
      const at::Tensor& x,
      const RopeTables& rope,
      at::Tensor& k_cache,
      at::Tensor& v_cache,
      int64_t start);

  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  /// Set where args.qk_norm.
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  /// Around the whole module: the enter hooks before wq, wk and wv read the
  /// input, the leave hooks after wo.
  RegionHooks hooks;
  /// Set where the sequence is split across ranks: the attention its rows
  /// get (unset: the whole sequence is here).
  std::shared_ptr<SplitSequenceAttention> split_attention;

 private:
  /// q, k rotated (q times `q_scale`) and v, each (B, heads, T, D), of x
  /// (B, T, dim).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> heads_first(
      const at::Tensor& x, const RopeTables& rope, double q_scale);

  int64_t head_dim_;
};
TORCH_MODULE(Attention);

/// SwiGLU feed-forward: w2(silu(w1 x) * w3 x).
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const ModelArgs& args);
  /// x: (B, T, dim) -> (B, T, dim)
  at::Tensor forward(const at::Tensor& x);

  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
  /// Around the whole module: the enter hooks before w1 and w3, the leave
  /// hooks after w2.
  RegionHooks hooks;
};
TORCH_MODULE(FeedForward);

/// Pre-norm transformer block: attention, then a dense SwiGLU
/// (feed_forward) or, where args.moe.is_moe_layer(layer), a mixture of
/// experts (moe).
class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const ModelArgs& args, int64_t layer = 0);
  /// x: (B, T, dim) -> (B, T, dim)
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope);
  /// As forward, with AttentionImpl::forward_cached.
  at::Tensor forward_cached(
      const at::Tensor& x,
      const RopeTables& rope,
      at::Tensor& k_cache,
      at::Tensor& v_cache,
      int64_t start);

  RMSNorm attention_norm{nullptr};
  Attention attention{nullptr};
  RMSNorm ffn_norm{nullptr};
  /// One of the two is set.
  FeedForward feed_forward{nullptr};
  MoE moe{nullptr};

 private:
  at::Tensor ffn(const at::Tensor& h);
};
TORCH_MODULE(TransformerBlock);

/// A pre-norm decoder-only transformer (Llama 3's architecture, with what
/// ModelArgs adds for later families), or a contiguous chunk of it (see
/// ChunkSpec). Submodule names are Meta's: tok_embeddings, layers.<global
/// index>, norm, output. With args.tie_embeddings the output projection
/// multiplies by tok_embeddings' weight and has no parameter of its own; a
/// chunk that holds the output but not the embedding (a pipeline's last
/// stage) holds a copy of that weight, `tok_embeddings.weight` too, which
/// parallel/pipeline/tied_weights.h keeps equal to the first stage's.
class TransformerImpl final : public ModelChunk {
 public:
  TransformerImpl(const ModelArgs& args, const ChunkSpec& chunk = {});
  at::Tensor forward(const at::Tensor& input) override;
  const ChunkSpec& spec() const override {
    return chunk_;
  }
  /// "layers.<i>" for each block held, then "" (embedding, norm, output).
  std::vector<std::string> unit_names() const override;
  void wrap_unit(
      const std::string& name, std::shared_ptr<UnitWrapper> wrapper) override;
  /// Initialises every parameter from a generator seeded by (seed, its
  /// name), so the weights do not depend on how the model is split.
  void init_weights(uint64_t seed);

  /// An empty cache for `batch` sequences of up to `capacity` tokens, in
  /// the dtype and on the device of the model's weights (a whole model).
  KvCache new_cache(int64_t batch, int64_t capacity) const;
  /// Generation's forward: the logits (B, T, vocab) of ids (B, T) at
  /// positions cache.length .. cache.length + T - 1, each seeing the
  /// tokens before it in the cache; their keys and values are added to
  /// the cache. A whole model only (embedding, every block, output), no
  /// wrappers or layout hooks; throws std::invalid_argument beyond the
  /// cache's capacity.
  at::Tensor forward_cached(const at::Tensor& ids, KvCache& cache);

  const ModelArgs& args() const {
    return args_;
  }

  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleDict layers{nullptr};
  RMSNorm norm{nullptr};
  Linear output{nullptr};

  /// How the token embedding looks ids (B, T) up in its weight (the compute
  /// copy of tok_embeddings->weight); unset: a plain lookup. A layout that
  /// holds a slice of the vocabulary sets its own.
  std::function<at::Tensor(const at::Tensor& ids, const at::Tensor& weight)>
      embedding_lookup;
  /// Around the output projection: the enter hooks run on the final norm's
  /// output.
  RegionHooks output_hooks;
  /// The hidden states between blocks hold 1 / sequence_shards of the
  /// positions their attention sees (a sequence-parallel layout's shard;
  /// its enter hooks gather the rest), so RoPE's tables cover that many.
  int64_t sequence_shards = 1;
  /// Which rows of each sequence this rank holds where a layout splits the
  /// sequence across ranks (context parallel): RoPE rotates each row by its
  /// position in the whole sequence.
  SequenceSplit sequence_split;
  /// Added to every position (a sequence that continues an earlier one).
  int64_t position_offset = 0;

 private:
  /// RoPE tables for `seq_len` positions from position_offset on `device`,
  /// cached.
  const RopeTables& rope_for(int64_t seq_len, const at::Device& device);
  /// The forward without the root's wrappers.
  at::Tensor forward_root(const at::Tensor& input);

  ModelArgs args_;
  ChunkSpec chunk_;
  /// What rope_ was built for: the offset and the split.
  using RopeKey = std::tuple<int64_t, int64_t, int64_t>;
  RopeKey rope_key_;
  std::vector<TransformerBlock> blocks_;  // the entries of `layers`, in order
  /// Wrappers per block (same order as blocks_), and the root's.
  std::vector<std::vector<std::shared_ptr<UnitWrapper>>> block_wrappers_;
  std::vector<std::shared_ptr<UnitWrapper>> root_wrappers_;
  RopeTables rope_;
};
TORCH_MODULE(Transformer);

/// The parameters the chunk `chunk` of a model shaped `args` holds, in the
/// order the built module lists them (named_parameters), without building
/// it: what a dry run counts.
std::vector<ParamShape> parameter_shapes(
    const ModelArgs& args, const ChunkSpec& chunk);

/// Seed of the generator that initialises the parameter named `fqn`.
uint64_t parameter_seed(uint64_t seed, const std::string& fqn);

}  // namespace baton::models
