#include "parallel/context_parallel/context_parallel.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "config/job_config.h"
#include "models/recompute.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"
#include "parallel/tensor_parallel/regions.h"

namespace baton::context_parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

dist::TrafficLog& traffic_log() {
  static dist::TrafficLog log;
  return log;
}

/// The dtype the block computations accumulate in: float32 for bf16 and
/// float32 inputs, float64 for float64 ones.
at::ScalarType accumulation(const at::Tensor& x) {
  return at::promote_types(x.scalar_type(), at::kFloat);
}

/// One tile of the block computations: query rows [r0, r0 + rows) against
/// keys [k0, k0 + keys); `mask` (rows, keys) bool where a row may see a
/// key, undefined where it sees them all.
struct Tile {
  int64_t r0, rows, k0, keys;
  at::Tensor mask;
};

/// Calls `fn` for each tile of q_positions x k_positions in which some row
/// sees some key (causally: key position <= row position), with the mask
/// where some row does not see every key.
template <class Fn>
void for_each_tile(
    const at::Tensor& q_positions, const at::Tensor& k_positions, Fn fn) {
  const auto qp = q_positions.accessor<int64_t, 1>();
  const auto kp = k_positions.accessor<int64_t, 1>();
  const int64_t tq = q_positions.size(0), tk = k_positions.size(0);
  for (int64_t r0 = 0; r0 < tq; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, tq - r0);
    int64_t q_min = qp[r0], q_max = qp[r0];
    for (int64_t i = r0; i < r0 + rows; ++i) {
      q_min = std::min(q_min, qp[i]);
      q_max = std::max(q_max, qp[i]);
    }
    for (int64_t k0 = 0; k0 < tk; k0 += kTileKeys) {
      const int64_t keys = std::min(kTileKeys, tk - k0);
      int64_t k_min = kp[k0], k_max = kp[k0];
      for (int64_t j = k0; j < k0 + keys; ++j) {
        k_min = std::min(k_min, kp[j]);
        k_max = std::max(k_max, kp[j]);
      }
      if (k_min > q_max) {
        continue;  // no row sees any key
      }
      Tile tile{r0, rows, k0, keys, at::Tensor()};
      if (k_max > q_min) {
        tile.mask = k_positions.narrow(0, k0, keys).unsqueeze(0) <=
                    q_positions.narrow(0, r0, rows).unsqueeze(1);
      }
      fn(tile);
    }
  }
}

/// The tile's scores (B, KV, G, rows, keys), float32, masked with -inf, and
/// q's tile as (B, KV, G * rows, D).
std::pair<at::Tensor, at::Tensor> tile_scores(
    const at::Tensor& q, const at::Tensor& k, const Tile& t) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  const at::Tensor qt =
      q.narrow(3, t.r0, t.rows).reshape({B, KV, G * t.rows, D});
  const at::Tensor kt = k.narrow(2, t.k0, t.keys);
  at::Tensor scores = at::matmul(qt, kt.transpose(-1, -2))
                          .to(accumulation(q))
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

/// Adds q's attention over (k, v) into the running (out, lse), tile by
/// tile; shapes as attention_with_lse's.
void accumulate(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& q_positions,
    const at::Tensor& k_positions,
    at::Tensor& out,
    at::Tensor& lse) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  for_each_tile(q_positions, k_positions, [&](const Tile& t) {
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

/// The gradients of q's attention over (k, v) given the final (all keys')
/// lse, the output's gradient `dout` and delta = rowsum(dout * out), added
/// into dq (B, KV, G, Tq, D), dk and dv (B, KV, Tk, D), float32.
void accumulate_backward(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& q_positions,
    const at::Tensor& k_positions,
    const at::Tensor& lse,
    const at::Tensor& dout,
    const at::Tensor& delta,
    at::Tensor dq,
    at::Tensor dk,
    at::Tensor dv) {
  const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), D = q.size(4);
  const auto dtype = q.scalar_type();
  for_each_tile(q_positions, k_positions, [&](const Tile& t) {
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

/// Waits for `work` under its name, counting the time it still took.
void wait_for(
    dist::Work& work,
    const GatheredKvAttention& self,
    const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  dist::run_labelled(
      "context_parallel", self.name(), what, [&] { work.wait(); });
  traffic_log().waited(
      what,
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start)
          .count());
}

GatheredKvAttention& of(int64_t attention) {
  return *reinterpret_cast<GatheredKvAttention*>(attention);
}

/// The gathered-keys attention as one autograd node over this rank's q, k
/// and v (see the header for the order of the work).
class GatheredKv : public torch::autograd::Function<GatheredKv> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& q_in,
      const at::Tensor& k_in,
      const at::Tensor& v_in,
      int64_t attention) {
    GatheredKvAttention& self = of(attention);
    const SequenceSplit& split = self.split();
    const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2),
                  D = q_in.size(3), KV = k_in.size(1);
    const int64_t L = T / 2, n = split.shards;
    const at::Tensor q = q_in.contiguous().view({B, KV, H / KV, T, D});
    const at::Tensor k = k_in.contiguous();
    const at::Tensor v = v_in.contiguous();
    ctx->saved_data["attention"] = attention;
    SavedOps* ops = saved_ops();
    if (ops != nullptr && ops->mode() == SavedOps::Mode::kReplay) {
      // An op-selective checkpoint's recomputation: what the first forward
      // kept, without gathering again.
      auto kept = ops->take();
      ctx->save_for_backward({q, k, v, kept.at(2), kept.at(0), kept.at(1)});
      return kept.at(0);
    }
    const at::Tensor kv = at::stack({k, v});  // (2, B, KV, T, D)
    at::Tensor gathered = at::empty({n * kv.numel()}, kv.options());
    traffic_log().count("kv all_gather forward", (n - 1) * kv.nbytes());
    dist::Work work = dist::run_labelled(
        "context_parallel", self.name(), "kv all_gather forward", [&] {
          return self.group().all_gather_into_async(gathered, kv);
        });
    // The diagonal blocks, from this rank's keys, while the gather runs.
    const at::Tensor positions = split.positions(T);
    at::Tensor out =
        at::zeros({B, KV, H / KV, T, D}, q.options().dtype(accumulation(q)));
    at::Tensor lse = at::full({B, KV, H / KV, T}, kNegInf, out.options());
    for (int64_t h = 0; h < 2; ++h) {
      auto rows_out = out.narrow(3, h * L, L);
      auto rows_lse = lse.narrow(3, h * L, L);
      const auto pos = positions.narrow(0, h * L, L);
      accumulate(
          q.narrow(3, h * L, L),
          k.narrow(2, h * L, L),
          v.narrow(2, h * L, L),
          pos,
          pos,
          rows_out,
          rows_lse);
    }
    wait_for(work, self, "kv all_gather forward");
    // (2, B, KV, n T, D): the whole sequence's keys and values, in order.
    const at::Tensor whole =
        split.restore(gathered.view({n, 2, B, KV, T, D}), /*dim=*/3);
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t before = split.chunks()[h] * L;  // keys of earlier chunks
      if (before == 0) {
        continue;
      }
      auto rows_out = out.narrow(3, h * L, L);
      auto rows_lse = lse.narrow(3, h * L, L);
      accumulate(
          q.narrow(3, h * L, L),
          whole.select(0, 0).narrow(2, 0, before),
          whole.select(0, 1).narrow(2, 0, before),
          positions.narrow(0, h * L, L),
          at::arange(before, at::kLong),
          rows_out,
          rows_lse);
    }
    at::Tensor result = out.to(q.scalar_type()).view({B, H, T, D});
    if (ops != nullptr) {
      ops->keep({result, lse, whole});
    }
    ctx->save_for_backward({q, k, v, whole, result, lse});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    GatheredKvAttention& self = of(ctx->saved_data["attention"].toInt());
    const SequenceSplit& split = self.split();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& q = saved[0];  // (B, KV, G, T, D)
    const at::Tensor& k = saved[1];
    const at::Tensor& v = saved[2];
    const at::Tensor& whole = saved[3];  // (2, B, KV, n T, D)
    const at::Tensor& out = saved[4];    // (B, H, T, D)
    const at::Tensor& lse = saved[5];    // (B, KV, G, T)
    const int64_t B = q.size(0), KV = q.size(1), G = q.size(2), T = q.size(3),
                  D = q.size(4);
    const int64_t L = T / 2, n = split.shards;
    const at::Tensor dout = grads[0].contiguous().view({B, KV, G, T, D});
    const auto acc = accumulation(q);
    const at::Tensor delta =
        (dout.to(acc) * out.view({B, KV, G, T, D}).to(acc)).sum(-1);
    const at::Tensor positions = split.positions(T);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(acc));
    // The earlier chunks' keys first: their gradients go to other ranks.
    at::Tensor d_whole = at::zeros(whole.sizes(), dq.options());
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t before = split.chunks()[h] * L;
      if (before == 0) {
        continue;
      }
      accumulate_backward(
          q.narrow(3, h * L, L),
          whole.select(0, 0).narrow(2, 0, before),
          whole.select(0, 1).narrow(2, 0, before),
          positions.narrow(0, h * L, L),
          at::arange(before, at::kLong),
          lse.narrow(3, h * L, L),
          dout.narrow(3, h * L, L),
          delta.narrow(3, h * L, L),
          dq.narrow(3, h * L, L),
          d_whole.select(0, 0).narrow(2, 0, before),
          d_whole.select(0, 1).narrow(2, 0, before));
    }
    // Each rank's rows of the gradient, in rank order, summed over the
    // ranks into this one's.
    std::vector<at::Tensor> by_rank;
    by_rank.reserve(n);
    for (int64_t r = 0; r < n; ++r) {
      by_rank.push_back(SequenceSplit{n, r}.take(d_whole, /*dim=*/3));
    }
    const at::Tensor send = at::stack(by_rank).to(k.scalar_type()).contiguous();
    at::Tensor received = at::empty({2, B, KV, T, D}, k.options());
    traffic_log().count(
        "kv reduce_scatter backward", (n - 1) * received.nbytes());
    dist::Work work = dist::run_labelled(
        "context_parallel", self.name(), "kv reduce_scatter backward", [&] {
          return self.group().reduce_scatter_async(received, send);
        });
    // The diagonal blocks' gradients while the reduce-scatter runs.
    at::Tensor dk = at::zeros(k.sizes(), dq.options());
    at::Tensor dv = at::zeros(v.sizes(), dq.options());
    for (int64_t h = 0; h < 2; ++h) {
      const auto pos = positions.narrow(0, h * L, L);
      accumulate_backward(
          q.narrow(3, h * L, L),
          k.narrow(2, h * L, L),
          v.narrow(2, h * L, L),
          pos,
          pos,
          lse.narrow(3, h * L, L),
          dout.narrow(3, h * L, L),
          delta.narrow(3, h * L, L),
          dq.narrow(3, h * L, L),
          dk.narrow(2, h * L, L),
          dv.narrow(2, h * L, L));
    }
    wait_for(work, self, "kv reduce_scatter backward");
    dk.add_(received.select(0, 0));
    dv.add_(received.select(0, 1));
    return {
        dq.to(q.scalar_type()).view({B, KV * G, T, D}),
        dk.to(k.scalar_type()),
        dv.to(v.scalar_type()),
        at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> attention_with_lse(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& q_positions,
    const at::Tensor& k_positions) {
  const auto sizes = q.sizes();
  at::Tensor out = at::zeros(sizes, q.options().dtype(accumulation(q)));
  at::Tensor lse = at::full(sizes.slice(0, 4), kNegInf, out.options());
  accumulate(q, k, v, q_positions, k_positions, out, lse);
  return {out, lse};
}

GatheredKvAttention::GatheredKvAttention(
    std::shared_ptr<dist::ProcessGroup> group,
    SequenceSplit split,
    std::string name)
    : group_(std::move(group)), split_(split), name_(std::move(name)) {}

at::Tensor GatheredKvAttention::attend(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(
      q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() &&
          q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
          q.size(3) == k.size(3) && k.size(1) > 0 &&
          q.size(1) % k.size(1) == 0 && q.size(2) % 2 == 0,
      "[context_parallel] ",
      name_,
      ": q (B, H, T, D) and k, v (B, KV, T, D) with KV dividing H and an even "
      "T (this rank's two chunks); got q ",
      q.sizes(),
      ", k ",
      k.sizes(),
      ", v ",
      v.sizes());
  return GatheredKv::apply(q, k, v, reinterpret_cast<int64_t>(this));
}

std::map<std::string, Traffic> traffic() {
  return traffic_log().snapshot();
}

void reset_traffic() {
  traffic_log().reset();
}

std::optional<ConfigProblem> context_parallel_problem(
    const JobConfig& config, const ModelArgs&, int64_t cp, int64_t tp) {
  if (cp <= 1) {
    return std::nullopt;
  }
  const int64_t seq_len = config.training.seq_len;
  const int64_t multiple = 2 * cp * std::max<int64_t>(tp, 1);
  if (seq_len % multiple != 0) {
    return ConfigProblem{
        "training.seq_len",
        "training.seq_len: " + std::to_string(seq_len) +
            " positions do not split over " + kDegreeKey + " " +
            std::to_string(cp) +
            (tp > 1
                 ? " x parallelism.tensor_parallel_degree " + std::to_string(tp)
                 : std::string()) +
            " (each cp rank holds two chunks of seq_len / (2 x cp)" +
            (tp > 1 ? ", split again over tp" : "") +
            "); allowed: a multiple of " + std::to_string(multiple)};
  }
  return std::nullopt;
}

void ContextParallelApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  auto* model = dynamic_cast<models::TransformerImpl*>(&part.module());
  const auto& group = context.mesh.group(kAxis);
  const int64_t n = group->size();
  if (n == 1) {
    return;
  }
  if (model == nullptr) {
    throw ConfigError(
        std::string(kDegreeKey) +
        ": context parallel needs a model of models/common's decoder (its "
        "attention and RoPE); this model is not one; allowed: 1");
  }
  const SequenceSplit split{n, group->rank()};
  model->sequence_split = split;
  int64_t layers = 0;
  for (const auto& item : model->layers->items()) {
    const std::string prefix = "layers." + item.first + ".";
    auto& block = *item.second->as<models::TransformerBlockImpl>();
    block.attention->split_attention = std::make_shared<GatheredKvAttention>(
        group, split, prefix + "attention");
    if (block.moe) {
      // The auxiliary loss's per-sequence statistics add up every cp
      // rank's positions of the sequence (after tensor parallel's ranks'
      // where both split it).
      const auto region = std::make_shared<tensor_parallel::Region>(
          tensor_parallel::Region{group, prefix + "moe"});
      auto before = block.moe->sum_over_sequence;
      block.moe->sequence_shards *= n;
      block.moe->sum_over_sequence = [before, region](const at::Tensor& x) {
        const at::Tensor partial = before ? before(x) : x;
        return tensor_parallel::sum_over_ranks(partial, *region);
      };
    }
    ++layers;
  }
  LOG_IF(INFO, context.mesh.leads({kPipelineAxis}))
      << "context_parallel: stage " << part.stage() << ": " << layers
      << " attention layers over cp " << n << " (keys and values all-gathered)"
      << "; each rank holds 2 chunks of seq_len / " << 2 * n;
}

Parallelism context_parallel_parallelism() {
  Parallelism p;
  p.name = "context_parallel";
  p.axis = MeshAxisSpec{kAxis, 300, kDegreeKey, {"loss", kShardContextGroup}};
  p.section = "parallelism";
  p.fields = {
      {"context_parallel_degree",
       int64_t{1},
       FieldSpec(
           "context parallel ranks: every sequence split over this many "
           "ranks (two chunks of seq_len / (2 x cp) each, head and tail), "
           "attention exact across them")
           .mesh_degree()}};
  p.owned_appliers = {
      {"context_parallel",
       [] { return std::make_unique<ContextParallelApplier>(); },
       "context parallel over cp (parallelism.context_parallel_degree): "
       "each rank holds its chunks of every sequence; attention all-gathers "
       "the keys and values"}};
  p.steps = {"context_parallel"};
  p.appliers = [](const JobConfig&, const ParallelDims&) {
    return std::vector<std::string>{"context_parallel"};
  };
  p.check = [](const JobConfig& config,
               const ParallelDims& dims,
               const ModelArgs& args) {
    return context_parallel_problem(
        config, args, dims.degree(kAxis), dims.degree("tp"));
  };
  // Each rank multiplies seq_len / cp tokens of each sequence.
  p.step_shape = [](const JobConfig&,
                    const ParallelDims& dims,
                    StepShape& shape) { shape.tokens /= dims.degree(kAxis); };
  // The token ids are split too (the loader's rows), so stages hand over
  // the rank's positions without a sequence_shards of their own.
  p.sequence_split = [](const ParallelDims& dims,
                        const dist::MeshCoord& coord) {
    return SequenceSplit{dims.degree(kAxis), coord.at(kAxis)};
  };
  return p;
}

}  // namespace baton::context_parallel
