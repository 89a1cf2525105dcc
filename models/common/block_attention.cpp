#include "models/common/block_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

#include "models/recompute.h"

namespace baton::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// One tile: query rows [r0, r0 + rows) against keys [k0, k0 + keys);
/// `mask` where a row may see a key, (rows, keys) or with documents (B, 1,
/// 1, rows, keys); undefined where every row sees every key.
struct Tile {
  int64_t r0, rows, k0, keys;
  at::Tensor mask;
};

/// The least and greatest of a run of values.
struct Range {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();

  void add(int64_t x) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
};

/// What a tiling needs to know of one tile's rows or keys: its positions'
/// range and, with documents, each batch row's documents' range.
struct SpanTile {
  int64_t start = 0, length = 0;
  Range positions;
  std::vector<Range> documents;  // per batch row; empty without documents
};

std::vector<SpanTile> span_tiles(const BlockSpan& span, int64_t size) {
  TORCH_CHECK(
      span.positions.dim() == 1 && span.positions.scalar_type() == at::kLong &&
          span.positions.device().is_cpu(),
      "[attention] positions: (T) int64 on the CPU; got ",
      span.positions.sizes());
  const auto pos = span.positions.accessor<int64_t, 1>();
  const bool documents = span.documents.defined();
  std::vector<SpanTile> tiles;
  const int64_t n = span.positions.size(0);
  for (int64_t start = 0; start < n; start += size) {
    SpanTile t;
    t.start = start;
    t.length = std::min(size, n - start);
    for (int64_t i = start; i < start + t.length; ++i) {
      t.positions.add(pos[i]);
    }
    if (documents) {
      const auto doc = span.documents.accessor<int64_t, 2>();
      t.documents.resize(static_cast<size_t>(span.documents.size(0)));
      for (int64_t b = 0; b < span.documents.size(0); ++b) {
        for (int64_t i = start; i < start + t.length; ++i) {
          t.documents[static_cast<size_t>(b)].add(doc[b][i]);
        }
      }
    }
    tiles.push_back(std::move(t));
  }
  return tiles;
}

void check_spans(const BlockSpan& rows, const BlockSpan& keys) {
  TORCH_CHECK(
      rows.documents.defined() == keys.documents.defined(),
      "[attention] documents for both the rows and the keys, or for neither");
  for (const BlockSpan* s : {&rows, &keys}) {
    TORCH_CHECK(
        !s->documents.defined() ||
            (s->documents.dim() == 2 &&
             s->documents.scalar_type() == at::kLong &&
             s->documents.device().is_cpu() &&
             s->documents.size(1) == s->positions.size(0)),
        "[attention] documents: (B, T) int64 on the CPU, T = the "
        "positions' ",
        s->positions.size(0),
        "; got ",
        s->documents.sizes());
  }
  TORCH_CHECK(
      !rows.documents.defined() ||
          rows.documents.size(0) == keys.documents.size(0),
      "[attention] the rows' and keys' documents name different batches");
}

/// Calls `fn` for each tile of rows x keys in which some row sees some key,
/// with the mask where some row does not see every key.
template <class Fn>
void for_each_tile(const BlockSpan& rows, const BlockSpan& keys, Fn fn) {
  check_spans(rows, keys);
  const bool documents = rows.documents.defined();
  const auto row_tiles = span_tiles(rows, kTileRows);
  const auto key_tiles = span_tiles(keys, kTileKeys);
  for (const SpanTile& r : row_tiles) {
    for (const SpanTile& k : key_tiles) {
      if (k.positions.lo > r.positions.hi) {
        continue;  // no row sees any key
      }
      bool partial = k.positions.hi > r.positions.lo;
      if (documents) {
        bool any = false;  // some batch row's rows and keys share a document
        for (size_t b = 0; b < r.documents.size(); ++b) {
          const Range& rd = r.documents[b];
          const Range& kd = k.documents[b];
          if (kd.hi < rd.lo || kd.lo > rd.hi) {
            partial = true;  // this batch row's rows see none of these keys
            continue;
          }
          any = true;
          partial =
              partial || rd.lo != rd.hi || kd.lo != kd.hi || rd.lo != kd.lo;
        }
        if (!any) {
          continue;
        }
      }
      Tile tile{r.start, r.length, k.start, k.length, at::Tensor()};
      if (partial) {
        tile.mask = keys.positions.narrow(0, k.start, k.length).unsqueeze(0) <=
                    rows.positions.narrow(0, r.start, r.length).unsqueeze(1);
        if (documents) {
          const at::Tensor same =
              keys.documents.narrow(1, k.start, k.length).unsqueeze(1) ==
              rows.documents.narrow(1, r.start, r.length).unsqueeze(2);
          tile.mask = (tile.mask.unsqueeze(0) & same)
                          .view({same.size(0), 1, 1, r.length, k.length});
        }
      }
      fn(tile);
    }
  }
}

/// The tile's scores (B, KV, G, rows, keys) in the accumulation dtype,
/// masked with -inf, and q's tile as (B, KV, G * rows, D).
std::pair<at::Tensor, at::Tensor> tile_scores(
    const at::Tensor& q, const at::Tensor& k, const Tile& t) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  const at::Tensor qt =
      q.narrow(3, t.r0, t.rows).reshape({B, KV, G * t.rows, D});
  const at::Tensor kt = k.narrow(2, t.k0, t.keys);
  at::Tensor scores = at::matmul(qt, kt.transpose(-1, -2))
                          .to(block_accumulation(q))
                          .view({B, KV, G, t.rows, t.keys});
  if (t.mask.defined()) {
    scores.masked_fill_(t.mask.to(scores.device()).logical_not(), kNegInf);
  }
  return {scores, qt};
}

/// -inf (a row that has seen no key) as 0, so exp(score - lse) is 0 there.
at::Tensor finite_or_zero(const at::Tensor& lse) {
  return at::where(lse == kNegInf, at::zeros_like(lse), lse);
}

/// Merges a tile's (out, lse) into the running ones, in place.
void merge(
    at::Tensor out,
    at::Tensor lse,
    const at::Tensor& tile_out,
    const at::Tensor& tile_lse) {
  const at::Tensor m = finite_or_zero(at::maximum(lse, tile_lse));
  const at::Tensor wa = at::exp(lse - m);
  const at::Tensor wb = at::exp(tile_lse - m);
  const at::Tensor total = wa + wb;
  const at::Tensor safe = at::where(total == 0, at::ones_like(total), total);
  out.copy_(
      (out * wa.unsqueeze(-1) + tile_out * wb.unsqueeze(-1)) /
      safe.unsqueeze(-1));
  lse.copy_(m + at::log(total));
}

/// The fused kernel that takes a whole block, where one does: ATen's
/// flash-attention kernel on the CPU, the memory-efficient (CUTLASS) kernel
/// of SDPA on CUDA, both with their log-sum-exp.
enum class BlockKernel { kTiles, kCpuFlash, kCudaEfficient };

/// How a block runs: in tiles, or whole in a kernel, causal (rows and keys
/// the same run of positions: a diagonal block) or full (every key at or
/// before every row).
struct BlockPlan {
  BlockKernel kernel = BlockKernel::kTiles;
  bool causal = false;
};

/// Whether `p` is the run first, first + 1, ... of positions.
bool consecutive(const at::Tensor& p) {
  const auto a = p.accessor<int64_t, 1>();
  for (int64_t i = 1; i < p.size(0); ++i) {
    if (a[i] != a[0] + i) {
      return false;
    }
  }
  return true;
}

/// The kernel that takes q's blocks, by device and dtype. The CPU kernel
/// serves float32 and float64: its outputs are in the input dtype, so
/// bfloat16's partial outputs would be rounded before their merge, and
/// those stay in tiles, which accumulate in float32. On CUDA bfloat16 and
/// float16 blocks run in the kernel too (the tiles would write every
/// tile's scores to memory), as torch's own ring attention runs them: each
/// block's output rounded to the input dtype once, then merged in float32. The
/// CUDA kernels read rows 16 bytes at a time: head dims that are multiples
/// of 8.
BlockKernel kernel_for(const at::Tensor& q) {
  const auto dtype = q.scalar_type();
  if (q.device().is_cpu()) {
    return dtype == at::kFloat || dtype == at::kDouble ? BlockKernel::kCpuFlash
                                                       : BlockKernel::kTiles;
  }
  if (q.device().is_cuda() && q.size(4) % 8 == 0 &&
      (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf)) {
    return BlockKernel::kCudaEfficient;
  }
  return BlockKernel::kTiles;
}

/// Blocks without documents whose rows and keys are each one run of
/// positions, and that are diagonal or full, run whole in the kernel.
BlockPlan block_plan(
    const at::Tensor& q, const BlockSpan& rows, const BlockSpan& keys) {
  const BlockKernel kernel = kernel_for(q);
  if (kernel == BlockKernel::kTiles || rows.documents.defined() ||
      rows.positions.size(0) == 0 || keys.positions.size(0) == 0 ||
      !consecutive(rows.positions) || !consecutive(keys.positions)) {
    return {};
  }
  const auto r = rows.positions.accessor<int64_t, 1>();
  const auto k = keys.positions.accessor<int64_t, 1>();
  const int64_t nr = rows.positions.size(0), nk = keys.positions.size(0);
  if (k[nk - 1] <= r[0]) {
    return {kernel, /*causal=*/false};
  }
  if (nr == nk && r[0] == k[0]) {
    return {kernel, /*causal=*/true};
  }
  return {};
}

/// (B, KV, Tk, D) -> (B, KV G, Tk, D), each key/value head repeated for
/// its G query heads, contiguous.
at::Tensor repeat_heads(const at::Tensor& x, int64_t G) {
  const auto s = x.sizes();
  return x.unsqueeze(2)
      .expand({s[0], s[1], G, s[2], s[3]})
      .reshape({s[0], s[1] * G, s[2], s[3]});
}

/// The CUDA kernel's log-sum-exp rows come in multiples of 32 (its
/// forward's padding, which its backward reads by).
constexpr int64_t kCudaLseRows = 32;

/// One block in its kernel, merged into the running (out, lse).
void kernel_block(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockPlan& plan,
    at::Tensor& out,
    at::Tensor& lse) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), Tq = q.size(3),
                D = q.size(4);
  const at::Tensor q4 = q.reshape({B, KV * G, Tq, D});
  const at::Tensor k4 = repeat_heads(k, G);
  const at::Tensor v4 = repeat_heads(v, G);
  at::Tensor block_out, block_lse;
  if (plan.kernel == BlockKernel::kCpuFlash) {
    std::tie(block_out, block_lse) =
        at::_scaled_dot_product_flash_attention_for_cpu(
            q4,
            k4,
            v4,
            /*dropout_p=*/0.0,
            plan.causal,
            /*attn_mask=*/std::nullopt,
            /*scale=*/1.0);
  } else {
    auto result = at::_scaled_dot_product_efficient_attention(
        q4,
        k4,
        v4,
        /*attn_bias=*/std::nullopt,
        /*compute_log_sumexp=*/true,
        /*dropout_p=*/0.0,
        plan.causal,
        /*scale=*/1.0);
    block_out = std::get<0>(result);
    block_lse = std::get<1>(result).narrow(2, 0, Tq);
  }
  merge(
      out,
      lse,
      block_out.reshape({B, KV, G, Tq, D}).to(out.scalar_type()),
      block_lse.reshape({B, KV, G, Tq}).to(lse.scalar_type()));
}

/// The kernel's gradients of one block given the final out and lse, added
/// into dq, dk and dv (each key/value head's summed over its G query
/// heads).
void kernel_block_backward(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockPlan& plan,
    const at::Tensor& out,
    const at::Tensor& lse,
    const at::Tensor& dout,
    at::Tensor& dq,
    at::Tensor& dk,
    at::Tensor& dv) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), Tq = q.size(3),
                D = q.size(4), Tk = k.size(2);
  const auto dtype = q.scalar_type();
  const at::Tensor q4 = q.reshape({B, KV * G, Tq, D});
  const at::Tensor dout4 = dout.to(dtype).reshape({B, KV * G, Tq, D});
  const at::Tensor out4 = out.to(dtype).reshape({B, KV * G, Tq, D});
  const at::Tensor k4 = repeat_heads(k, G);
  const at::Tensor v4 = repeat_heads(v, G);
  at::Tensor gq, gk, gv;
  if (plan.kernel == BlockKernel::kCpuFlash) {
    std::tie(gq, gk, gv) =
        at::_scaled_dot_product_flash_attention_for_cpu_backward(
            dout4,
            q4,
            k4,
            v4,
            out4,
            lse.reshape({B, KV * G, Tq}),
            /*dropout_p=*/0.0,
            plan.causal,
            /*attn_mask=*/std::nullopt,
            /*scale=*/1.0);
  } else {
    // The final lse (over every key the rows see) in the kernel's padded
    // float32 rows; the padding's +inf gives those rows no weight. Without
    // dropout the kernel reads no philox state.
    const int64_t padded =
        (Tq + kCudaLseRows - 1) / kCudaLseRows * kCudaLseRows;
    at::Tensor lse_rows = at::full(
        {B, KV * G, padded},
        std::numeric_limits<double>::infinity(),
        q.options().dtype(at::kFloat));
    lse_rows.narrow(2, 0, Tq).copy_(lse.reshape({B, KV * G, Tq}));
    const at::Tensor no_philox = at::empty({0}, q.options().dtype(at::kLong));
    // The kernel reads `out` as its forward wrote it, (B, Tq, H, D) in
    // memory: it takes that layout's row stride as given, not the tensor's.
    const at::Tensor out_rows =
        out4.transpose(1, 2).contiguous().transpose(1, 2);
    auto grads = at::_scaled_dot_product_efficient_attention_backward(
        dout4,
        q4,
        k4,
        v4,
        /*attn_bias=*/at::Tensor(),
        out_rows,
        lse_rows,
        no_philox,
        no_philox,
        /*dropout_p=*/0.0,
        /*grad_input_mask=*/{true, true, true, false},
        plan.causal,
        /*scale=*/1.0);
    gq = std::get<0>(grads);
    gk = std::get<1>(grads);
    gv = std::get<2>(grads);
  }
  dq.add_(gq.reshape({B, KV, G, Tq, D}).to(dq.scalar_type()));
  dk.add_(gk.reshape({B, KV, G, Tk, D}).sum(2).to(dk.scalar_type()));
  dv.add_(gv.reshape({B, KV, G, Tk, D}).sum(2).to(dv.scalar_type()));
}

/// The one-sequence document attention as an autograd node.
class DocumentAttention : public torch::autograd::Function<DocumentAttention> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& q_in,
      const at::Tensor& k_in,
      const at::Tensor& v_in,
      const at::Tensor& documents) {
    const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2),
                  D = q_in.size(3), KV = k_in.size(1);
    const at::Tensor q = q_in.contiguous().view({B, KV, H / KV, T, D});
    const at::Tensor k = k_in.contiguous();
    const at::Tensor v = v_in.contiguous();
    ctx->saved_data["documents"] = documents;
    SavedOps* ops = saved_ops();
    if (ops != nullptr && ops->mode() == SavedOps::Mode::kReplay) {
      // An op-selective checkpoint's recomputation: what the first forward
      // kept.
      auto kept = ops->take();
      ctx->save_for_backward({q, k, v, kept.at(0), kept.at(1)});
      return kept.at(0);
    }
    const BlockSpan span{at::arange(T, at::kLong), documents};
    auto [out, lse] = attention_with_lse(q, k, v, span, span);
    at::Tensor result = out.to(q.scalar_type()).view({B, H, T, D});
    if (ops != nullptr) {
      ops->keep({result, lse});
    }
    ctx->save_for_backward({q, k, v, result, lse});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& q = saved[0];  // (B, KV, G, T, D)
    const at::Tensor& k = saved[1];
    const at::Tensor& v = saved[2];
    const at::Tensor& out = saved[3];  // (B, H, T, D)
    const at::Tensor& lse = saved[4];  // (B, KV, G, T)
    const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), T = q.size(3),
                  D = q.size(4);
    const auto acc = block_accumulation(q);
    const at::Tensor dout = grads[0].contiguous().view({B, KV, G, T, D});
    const BlockSpan span{
        at::arange(T, at::kLong), ctx->saved_data["documents"].toTensor()};
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(acc));
    at::Tensor dk = at::zeros(k.sizes(), dq.options());
    at::Tensor dv = at::zeros(v.sizes(), dq.options());
    accumulate_attention_backward(
        q, k, v, span, span, out.view({B, KV, G, T, D}), lse, dout, dq, dk, dv);
    return {
        dq.to(q.scalar_type()).view({B, KV * G, T, D}),
        dk.to(k.scalar_type()),
        dv.to(v.scalar_type()),
        at::Tensor()};
  }
};

}  // namespace

BlockSpan BlockSpan::narrow(int64_t start, int64_t length) const {
  return {
      positions.narrow(0, start, length),
      documents.defined() ? documents.narrow(1, start, length) : at::Tensor()};
}

bool block_runs_whole(
    const at::Tensor& q, const BlockSpan& rows, const BlockSpan& keys) {
  return block_plan(q, rows, keys).kernel != BlockKernel::kTiles;
}

at::ScalarType block_accumulation(const at::Tensor& x) {
  return at::promote_types(x.scalar_type(), at::kFloat);
}

void accumulate_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys,
    at::Tensor& out,
    at::Tensor& lse) {
  const BlockPlan plan = block_plan(q, rows, keys);
  if (plan.kernel != BlockKernel::kTiles) {
    kernel_block(q, k, v, plan, out, lse);
    return;
  }
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  for_each_tile(rows, keys, [&](const Tile& t) {
    const auto [scores, qt] = tile_scores(q, k, t);
    const at::Tensor tile_lse = at::logsumexp(scores, -1);  // (B, KV, G, rows)
    const at::Tensor p =
        at::exp(scores - finite_or_zero(tile_lse).unsqueeze(-1));
    const at::Tensor vt = v.narrow(2, t.k0, t.keys);
    const at::Tensor tile_out =
        at::matmul(p.view({B, KV, G * t.rows, t.keys}).to(vt.scalar_type()), vt)
            .to(out.scalar_type())
            .view({B, KV, G, t.rows, D});
    merge(
        out.narrow(3, t.r0, t.rows),
        lse.narrow(3, t.r0, t.rows),
        tile_out,
        tile_lse);
  });
}

void accumulate_attention_backward(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys,
    const at::Tensor& out,
    const at::Tensor& lse,
    const at::Tensor& dout,
    at::Tensor dq,
    at::Tensor dk,
    at::Tensor dv) {
  const BlockPlan plan = block_plan(q, rows, keys);
  if (plan.kernel != BlockKernel::kTiles) {
    kernel_block_backward(q, k, v, plan, out, lse, dout, dq, dk, dv);
    return;
  }
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  const auto dtype = q.scalar_type();
  const auto acc = block_accumulation(q);
  const at::Tensor delta = (dout.to(acc) * out.to(acc)).sum(-1);
  for_each_tile(rows, keys, [&](const Tile& t) {
    const auto [scores, qt] = tile_scores(q, k, t);
    const at::Tensor p = at::exp(
        scores - finite_or_zero(lse.narrow(3, t.r0, t.rows)).unsqueeze(-1));
    const at::Tensor p2 = p.view({B, KV, G * t.rows, t.keys}).to(dtype);
    const at::Tensor dot =
        dout.narrow(3, t.r0, t.rows).reshape({B, KV, G * t.rows, D});
    const at::Tensor kt = k.narrow(2, t.k0, t.keys);
    const at::Tensor vt = v.narrow(2, t.k0, t.keys);
    dv.narrow(2, t.k0, t.keys)
        .add_(at::matmul(p2.transpose(-1, -2), dot).to(dv.scalar_type()));
    const at::Tensor dp = at::matmul(dot, vt.transpose(-1, -2))
                              .to(dv.scalar_type())
                              .view({B, KV, G, t.rows, t.keys});
    const at::Tensor ds =
        (p * (dp - delta.narrow(3, t.r0, t.rows).unsqueeze(-1)))
            .view({B, KV, G * t.rows, t.keys})
            .to(dtype);
    dq.narrow(3, t.r0, t.rows)
        .add_(at::matmul(ds, kt)
                  .to(dq.scalar_type())
                  .view({B, KV, G, t.rows, D}));
    dk.narrow(2, t.k0, t.keys)
        .add_(at::matmul(ds.transpose(-1, -2), qt).to(dk.scalar_type()));
  });
}

std::pair<at::Tensor, at::Tensor> attention_with_lse(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const BlockSpan& rows,
    const BlockSpan& keys) {
  const auto sizes = q.sizes();
  at::Tensor out = at::zeros(sizes, q.options().dtype(block_accumulation(q)));
  at::Tensor lse = at::full(sizes.slice(0, 4), kNegInf, out.options());
  accumulate_attention(q, k, v, rows, keys, out, lse);
  return {out, lse};
}

at::Tensor document_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& documents) {
  TORCH_CHECK(
      q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() &&
          q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
          q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
      "[attention] q (B, H, T, D) and k, v (B, KV, T, D) with KV dividing H; "
      "got q ",
      q.sizes(),
      ", k ",
      k.sizes(),
      ", v ",
      v.sizes());
  TORCH_CHECK(
      documents.dim() == 2 && documents.size(0) == q.size(0) &&
          documents.size(1) == q.size(2),
      "[attention] documents (B, T) = ",
      at::IntArrayRef{q.size(0), q.size(2)},
      "; got ",
      documents.sizes());
  return DocumentAttention::apply(
      q, k, v, documents.to(at::kCPU, at::kLong).contiguous());
}

}  // namespace baton::models
