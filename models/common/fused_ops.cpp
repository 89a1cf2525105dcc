#include "models/common/fused_ops.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "models/common/attention_kernel.h"
#include "models/common/swiglu_kernel.h"
#include "models/common/transformer.h"
#include "models/recompute.h"

namespace baton::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// One pass over x: rotate each pair and move heads before time.
/// x: (B, T, H, D) contiguous -> (B, H, T, D). With `inverse`, rotates by
/// minus the angles and moves time back before heads: (B, H, T, D) ->
/// (B, T, H, D), which is the backward of the forward.
at::Tensor rope_kernel(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    float scale,
    bool inverse) {
  const int64_t B = x.size(0);
  const int64_t T = inverse ? x.size(2) : x.size(1);
  const int64_t H = inverse ? x.size(1) : x.size(2);
  const int64_t D = x.size(3);
  const int64_t half = D / 2;
  auto out = inverse ? at::empty({B, T, H, D}, x.options())
                     : at::empty({B, H, T, D}, x.options());
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float* cs = cos.data_ptr<float>();
  const float* sn = sin.data_ptr<float>();
  const float sign = inverse ? -1.0f : 1.0f;
  at::parallel_for(0, B * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      const float* c = cs + t * half;
      const float* s = sn + t * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t time_major = ((b * T + t) * H + h) * D;
        const int64_t head_major = ((b * H + h) * T + t) * D;
        const float* src = in + (inverse ? head_major : time_major);
        float* dst = o + (inverse ? time_major : head_major);
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = src[2 * i], x1 = src[2 * i + 1];
          const float si = sign * s[i];
          dst[2 * i] = (x0 * c[i] - x1 * si) * scale;
          dst[2 * i + 1] = (x0 * si + x1 * c[i]) * scale;
        }
      }
    }
  });
  return out;
}

class RopeHeadsFirst : public torch::autograd::Function<RopeHeadsFirst> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x,
      const at::Tensor& cos,
      const at::Tensor& sin,
      double scale) {
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["scale"] = scale;
    return rope_kernel(
        x.contiguous(), cos, sin, static_cast<float>(scale), false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto gx = rope_kernel(
        grads[0].contiguous(),
        ctx->saved_data["cos"].toTensor(),
        ctx->saved_data["sin"].toTensor(),
        static_cast<float>(ctx->saved_data["scale"].toDouble()),
        true);
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat;
}

/// bf16 or fp16: computed in float32 by the ops below.
bool reduced_float(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

class RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& x_in,
      const at::Tensor& weight_in,
      double eps) {
    const auto x = x_in.contiguous();
    const auto weight = weight_in.contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto out = at::empty_like(x);
    auto inv_rms = at::empty({rows}, x.options());  // 1 / rms of each row
    const float* xp = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    float* o = out.data_ptr<float>();
    float* r = inv_rms.data_ptr<float>();
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* xi = xp + i * dim;
        float sum = 0.0f;
        for (int64_t j = 0; j < dim; ++j) {
          sum += xi[j] * xi[j];
        }
        const float ri = 1.0f / std::sqrt(sum / dim + static_cast<float>(eps));
        r[i] = ri;
        float* oi = o + i * dim;
        for (int64_t j = 0; j < dim; ++j) {
          oi[j] = xi[j] * ri * w[j];
        }
      }
    });
    ctx->save_for_backward({x, weight, inv_rms});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& inv_rms = saved[2];
    const auto g = grads[0].contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto gx = at::empty_like(x);
    // Per-thread partial sums of the weight gradient, added at the end.
    auto gw_parts = at::zeros({at::get_num_threads(), dim}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    const float* r = inv_rms.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* gxp = gx.data_ptr<float>();
    float* parts = gw_parts.data_ptr<float>();
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      float* gw = parts + at::get_thread_num() * dim;
      for (int64_t i = begin; i < end; ++i) {
        const float* xi = xp + i * dim;
        const float* gi = gp + i * dim;
        const float ri = r[i];
        float dot = 0.0f;  // sum_j g w x
        for (int64_t j = 0; j < dim; ++j) {
          dot += gi[j] * w[j] * xi[j];
          gw[j] += gi[j] * xi[j] * ri;
        }
        const float c = ri * ri * ri * dot / dim;
        float* gxi = gxp + i * dim;
        for (int64_t j = 0; j < dim; ++j) {
          gxi[j] = ri * gi[j] * w[j] - c * xi[j];
        }
      }
    });
    return {gx, gw_parts.sum(0), at::Tensor()};
  }
};

/// Additive causal mask of one diagonal block: 0 on and below the
/// diagonal, -inf above.
at::Tensor diagonal_mask(int64_t block, const at::TensorOptions& options) {
  return at::full(
             {block, block}, -std::numeric_limits<float>::infinity(), options)
      .triu(1);
}

/// OpenBLAS runs a product of m x n x k at most this large on the calling
/// thread alone (its default GEMM_MULTITHREAD_THRESHOLD, 4, times 65536):
/// attention's per-head products of small heads stay below it, so they can
/// run on ATen's threads, head by head, without OpenBLAS's threads under
/// them (OpenBLAS's pthreads build warns, and may stall, when its threaded
/// path is entered from inside an OpenMP region).
constexpr int64_t kBlasSingleThreadedMnk = 4 * 65536;

/// Runs body(begin, end) over the B * H heads: split among ATen's threads
/// when there are several and each per-head product (up to rows x T x D)
/// runs single-threaded in BLAS; else in one piece, where the products use
/// BLAS's own threads. x: one of the (B, H, T, D) inputs.
void for_heads(
    const at::Tensor& x,
    int64_t rows,
    const std::function<void(int64_t, int64_t)>& body) {
  const int64_t heads = x.size(0) * x.size(1), T = x.size(2), D = x.size(3);
  if (x.is_cpu() && at::get_num_threads() > 1 &&
      rows * T * D <= kBlasSingleThreadedMnk) {
    // OpenMP's threads do not inherit the caller's thread-local state
    // (grad mode, inference mode, ...): hand it over.
    const at::ThreadLocalState state;
    at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
      const at::ThreadLocalStateGuard guard(state);
      body(begin, end);
    });
  } else {
    body(0, heads);
  }
}

/// The attention probabilities of query rows t0 .. t0 + bt against keys
/// 0 .. t0 + bt. q, k: (n, T, D), q carrying the 1 / sqrt(D) factor;
/// mask: diagonal_mask(block) -> (n, bt, t0 + bt).
at::Tensor block_probs(
    const at::Tensor& q,
    const at::Tensor& k,
    int64_t t0,
    int64_t bt,
    const at::Tensor& mask) {
  auto scores =
      at::bmm(q.narrow(1, t0, bt), k.narrow(1, 0, t0 + bt).transpose(1, 2));
  scores.narrow(-1, t0, bt).add_(mask.narrow(0, 0, bt).narrow(1, 0, bt));
  return at::_softmax(scores, -1, false);
}

/// Attention's inputs as both autograd functions keep them: q carrying the
/// 1 / sqrt(D) factor, all three contiguous, saved for the backward with
/// the factor and whether the caller had applied it.
struct AttentionInputs {
  at::Tensor q, k, v;
};

AttentionInputs save_attention_inputs(
    AutogradContext* ctx,
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    bool q_scaled) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  AttentionInputs in{
      q_scaled ? q.contiguous() : (q * scale).contiguous(),
      k.contiguous(),
      v.contiguous()};
  ctx->save_for_backward({in.q, in.k, in.v});
  ctx->saved_data["q_scaled"] = q_scaled;
  ctx->saved_data["scale"] = scale;
  return in;
}

class BlockedCausalAttention
    : public torch::autograd::Function<BlockedCausalAttention> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& q,
      const at::Tensor& k,
      const at::Tensor& v,
      bool q_scaled,
      int64_t block) {
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
    const auto [qs, kc, vc] = save_attention_inputs(ctx, q, k, v, q_scaled);
    ctx->saved_data["block"] = block;
    // Under an op-selective checkpoint the first forward keeps the output
    // only; the recomputation takes it back, and the backward recomputes
    // each block's probabilities as it reaches it.
    SavedOps* ops = saved_ops();
    if (ops != nullptr && ops->mode() == SavedOps::Mode::kReplay) {
      return ops->take().at(0);
    }
    const auto mask = diagonal_mask(block, qs.options());
    auto out = at::empty_like(qs);  // (B, H, T, D)
    // Heads flattened: (B * H, T, D) views.
    const auto q3 = qs.view({BH, T, D});
    const auto k3 = kc.view({BH, T, D});
    const auto v3 = vc.view({BH, T, D});
    auto out3 = out.view({BH, T, D});
    // Each block's probabilities, (B * H, bt, t1), kept for the backward.
    std::vector<at::Tensor> p_blocks;
    for (int64_t t0 = 0; t0 < T; t0 += block) {
      const int64_t bt = std::min(block, T - t0);
      p_blocks.push_back(at::empty({BH, bt, t0 + bt}, qs.options()));
    }
    for_heads(qs, block, [&](int64_t h0, int64_t h1) {
      const auto qh = q3.slice(0, h0, h1);
      const auto kh = k3.slice(0, h0, h1);
      const auto vh = v3.slice(0, h0, h1);
      int64_t i = 0;
      for (int64_t t0 = 0; t0 < T; t0 += block, ++i) {
        const int64_t bt = std::min(block, T - t0), t1 = t0 + bt;
        // This block's queries against keys 0 .. t1.
        auto scores =
            at::bmm(qh.narrow(1, t0, bt), kh.narrow(1, 0, t1).transpose(1, 2));
        scores.narrow(-1, t0, bt).add_(mask.narrow(0, 0, bt).narrow(1, 0, bt));
        auto p = p_blocks[i].slice(0, h0, h1);
        at::_softmax_out(p, scores, -1, false);
        out3.slice(0, h0, h1).narrow(1, t0, bt).copy_(
            at::bmm(p, vh.narrow(1, 0, t1)));
      }
    });
    if (ops != nullptr) {
      ops->keep({out});
    } else {
      ctx->saved_data["probs"] = c10::List<at::Tensor>(p_blocks);
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& qs = saved[0];
    const int64_t BH = qs.size(0) * qs.size(1), T = qs.size(2), D = qs.size(3);
    const auto q3 = qs.view({BH, T, D});
    const auto k3 = saved[1].view({BH, T, D});
    const auto v3 = saved[2].view({BH, T, D});
    // Kept by the forward, or (after an op-selective checkpoint's replay)
    // recomputed block by block below.
    const bool kept = ctx->saved_data.count("probs") != 0;
    const auto probs = kept ? ctx->saved_data["probs"].toTensorList()
                            : c10::List<at::Tensor>();
    const bool q_scaled = ctx->saved_data["q_scaled"].toBool();
    const int64_t block = ctx->saved_data["block"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto gout = grads[0].contiguous().view({BH, T, D});
    auto gq = at::empty_like(qs);
    auto gk = at::zeros_like(qs);
    auto gv = at::zeros_like(qs);
    const auto mask = kept ? at::Tensor() : diagonal_mask(block, qs.options());
    auto gq3 = gq.view({BH, T, D});
    auto gk3 = gk.view({BH, T, D});
    auto gv3 = gv.view({BH, T, D});
    for_heads(qs, block, [&](int64_t h0, int64_t h1) {
      const auto qh = q3.slice(0, h0, h1);
      const auto kh = k3.slice(0, h0, h1);
      const auto vh = v3.slice(0, h0, h1);
      const auto gh = gout.slice(0, h0, h1);
      auto gqh = gq3.slice(0, h0, h1);
      auto gkh = gk3.slice(0, h0, h1);
      auto gvh = gv3.slice(0, h0, h1);
      int64_t i = 0;
      for (int64_t t0 = 0; t0 < T; t0 += block, ++i) {
        const int64_t bt = std::min(block, T - t0), t1 = t0 + bt;
        const at::Tensor p = kept  // (n, bt, t1)
                                 ? probs.get(i).slice(0, h0, h1)
                                 : block_probs(qh, kh, t0, bt, mask);
        const auto go = gh.narrow(1, t0, bt);  // (n, bt, D)
        gvh.narrow(1, 0, t1).add_(at::bmm(p.transpose(1, 2), go));
        const auto gp = at::bmm(go, vh.narrow(1, 0, t1).transpose(1, 2));
        const auto gs = at::_softmax_backward_data(gp, p, -1, p.scalar_type());
        auto gq_block = at::bmm(gs, kh.narrow(1, 0, t1));  // (n, bt, D)
        if (!q_scaled) {
          gq_block.mul_(scale);
        }
        gqh.narrow(1, t0, bt).copy_(gq_block);
        gkh.narrow(1, 0, t1).add_(
            at::bmm(gs.transpose(1, 2), qh.narrow(1, t0, bt)));
      }
    });
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

/// Runs body(head, scratch) for each of `heads` heads, split among ATen's
/// threads, each thread with scratch for attention_kernel's functions.
void for_kernel_heads(
    int64_t heads,
    int64_t seq_len,
    int64_t head_dim,
    const std::function<void(int64_t, float*)>& body) {
  const int64_t scratch = attention_kernel::scratch_floats(seq_len, head_dim);
  at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(scratch);
    for (int64_t h = begin; h < end; ++h) {
      body(h, buffer.data());
    }
  });
}

/// Causal attention on the CPU in float32, head by head in
/// attention_kernel.h's kernel. Saves the probabilities in the kernel's
/// layout (about half of (T, T) per head, as the blocked path keeps).
class KernelCausalAttention
    : public torch::autograd::Function<KernelCausalAttention> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& q,
      const at::Tensor& k,
      const at::Tensor& v,
      bool q_scaled) {
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
    const auto [qs, kc, vc] = save_attention_inputs(ctx, q, k, v, q_scaled);
    // Under an op-selective checkpoint the first forward keeps the output
    // only; the recomputation takes it back, and the backward recomputes
    // the probabilities.
    SavedOps* ops = saved_ops();
    if (ops != nullptr && ops->mode() == SavedOps::Mode::kReplay) {
      return ops->take().at(0);
    }
    auto out = at::empty_like(qs);  // (B, H, T, D)
    at::Tensor probs;               // (B * H, probs_floats(T))
    if (ops == nullptr) {
      probs = at::empty({BH, attention_kernel::probs_floats(T)}, qs.options());
    }
    const auto forward = attention_kernel::head_kernels().forward;
    const float* qp = qs.data_ptr<float>();
    const float* kp = kc.data_ptr<float>();
    const float* vp = vc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    float* pp = probs.defined() ? probs.data_ptr<float>() : nullptr;
    const int64_t head = T * D,
                  head_probs = probs.defined() ? probs.size(1) : 0;
    for_kernel_heads(BH, T, D, [&](int64_t h, float* scratch) {
      forward(
          qp + h * head,
          kp + h * head,
          vp + h * head,
          T,
          D,
          op + h * head,
          pp == nullptr ? nullptr : pp + h * head_probs,
          scratch);
    });
    if (ops != nullptr) {
      ops->keep({out});
    } else {
      ctx->saved_data["probs"] = probs;
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& qs = saved[0];
    const int64_t BH = qs.size(0) * qs.size(1), T = qs.size(2), D = qs.size(3);
    // Kept by the forward, or (after an op-selective checkpoint's replay)
    // recomputed by the kernel.
    const at::Tensor probs = ctx->saved_data.count("probs") != 0
                                 ? ctx->saved_data["probs"].toTensor()
                                 : at::Tensor();
    const auto gout = grads[0].contiguous();
    auto gq = at::empty_like(qs);
    auto gk = at::empty_like(qs);
    auto gv = at::empty_like(qs);
    const auto backward = attention_kernel::head_kernels().backward;
    const float* qp = qs.data_ptr<float>();
    const float* kp = saved[1].data_ptr<float>();
    const float* vp = saved[2].data_ptr<float>();
    const float* pp = probs.defined() ? probs.data_ptr<float>() : nullptr;
    const float* gp = gout.data_ptr<float>();
    float* gqp = gq.data_ptr<float>();
    float* gkp = gk.data_ptr<float>();
    float* gvp = gv.data_ptr<float>();
    const int64_t head = T * D,
                  head_probs = probs.defined() ? probs.size(1) : 0;
    for_kernel_heads(BH, T, D, [&](int64_t h, float* scratch) {
      backward(
          qp + h * head,
          kp + h * head,
          vp + h * head,
          pp == nullptr ? nullptr : pp + h * head_probs,
          gp + h * head,
          T,
          D,
          gqp + h * head,
          gkp + h * head,
          gvp + h * head,
          scratch);
    });
    if (!ctx->saved_data["q_scaled"].toBool()) {
      gq.mul_(ctx->saved_data["scale"].toDouble());
    }
    return {gq, gk, gv, at::Tensor()};
  }
};

}  // namespace

at::Tensor rope_heads_first(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    double scale) {
  TORCH_CHECK(
      x.dim() == 4 && x.size(3) % 2 == 0 && cos.size(0) == x.size(1) &&
          cos.size(1) * 2 == x.size(3),
      "[rope] x must be (B, T, H, D) with even D and tables (T, D/2); got x ",
      x.sizes(),
      " and tables ",
      cos.sizes());
  if (reduced_float(x)) {
    // Lower precision (bf16 under mixed precision): rotated in float32 with
    // the float32 tables, as Meta's Llama does, and cast back.
    return rope_heads_first(x.to(at::kFloat), cos, sin, scale)
        .to(x.scalar_type());
  }
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat ||
      cos.scalar_type() != at::kFloat) {
    // The composite formula, for devices and dtypes the kernel does not
    // cover.
    auto out = apply_rope(x, RopeTables{cos.to(x.dtype()), sin.to(x.dtype())});
    return (scale == 1.0 ? out : out * scale).transpose(1, 2).contiguous();
  }
  return RopeHeadsFirst::apply(x, cos.contiguous(), sin.contiguous(), scale);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(
      x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
      "[rms_norm] x (..., dim) and weight (dim) disagree: ",
      x.sizes(),
      " and ",
      weight.sizes());
  if (reduced_float(x)) {
    // Lower precision (bf16 under mixed precision): normalised in float32
    // and cast back before the scale, as Meta's Llama does.
    const auto xf = x.to(at::kFloat);
    const auto ones = at::ones({x.size(-1)}, xf.options());
    return rms_norm(xf, ones, eps).to(x.scalar_type()) * weight;
  }
  if (!cpu_float(x) || !cpu_float(weight)) {
    return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
  }
  return RMSNormFunction::apply(x, weight, eps);
}

namespace {

/// Elements of a SwiGLU pass per task of ATen's threads.
constexpr int64_t kSwigluGrain = int64_t{1} << 14;

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& a_in, const at::Tensor& b_in) {
    const auto a = a_in.contiguous();
    const auto b = b_in.contiguous();
    ctx->save_for_backward({a, b});
    if (!cpu_float(a) || !cpu_float(b)) {
      return at::silu(a) * b;
    }
    auto out = at::empty_like(a);
    const auto kernel = swiglu_kernel::kernels().forward;
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, a.numel(), kSwigluGrain, [&](int64_t i, int64_t end) {
      kernel(ap + i, bp + i, op + i, end - i);
    });
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const auto g = grads[0].contiguous();
    if (!cpu_float(a) || !cpu_float(b) || !cpu_float(g)) {
      // The ops ATen's own autograd would run, in the tensors' dtype.
      return {at::silu_backward(g * b, a), g * at::silu(a)};
    }
    auto ga = at::empty_like(a);
    auto gb = at::empty_like(b);
    const auto kernel = swiglu_kernel::kernels().backward;
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* gap = ga.data_ptr<float>();
    float* gbp = gb.data_ptr<float>();
    at::parallel_for(0, a.numel(), kSwigluGrain, [&](int64_t i, int64_t end) {
      kernel(ap + i, bp + i, gp + i, gap + i, gbp + i, end - i);
    });
    return {ga, gb};
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(
      a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
          a.device() == b.device(),
      "[swiglu] a and b must have one shape, dtype and device; got ",
      a.sizes(),
      " ",
      a.scalar_type(),
      " and ",
      b.sizes(),
      " ",
      b.scalar_type());
  return SwigluFunction::apply(a, b);
}

namespace {

void check_attention_shapes(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(
      q.dim() == 4 && q.sizes() == k.sizes() && q.sizes() == v.sizes(),
      "[attention] q, k and v must have the same (B, H, T, D) shape; got ",
      q.sizes(),
      ", ",
      k.sizes(),
      " and ",
      v.sizes());
}

}  // namespace

at::Tensor causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    bool q_scaled) {
  check_attention_shapes(q, k, v);
  if (cpu_float(q) && cpu_float(k) && cpu_float(v)) {
    return KernelCausalAttention::apply(q, k, v, q_scaled);
  }
  return blocked_causal_attention(q, k, v, q_scaled);
}

at::Tensor blocked_causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    bool q_scaled,
    int64_t block) {
  check_attention_shapes(q, k, v);
  TORCH_CHECK(block > 0, "[attention] block must be positive, got ", block);
  return BlockedCausalAttention::apply(q, k, v, q_scaled, block);
}

int64_t causal_attention_saved_elements(int64_t seq_len, bool kernel) {
  if (kernel) {
    return attention_kernel::probs_floats(seq_len);
  }
  // Each block's rows against the keys up to the block's end.
  int64_t elements = 0;
  for (int64_t t0 = 0; t0 < seq_len; t0 += kAttentionBlockRows) {
    const int64_t rows = std::min(kAttentionBlockRows, seq_len - t0);
    elements += rows * (t0 + rows);
  }
  return elements;
}

}  // namespace baton::models
