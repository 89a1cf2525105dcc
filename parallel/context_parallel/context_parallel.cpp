#include "parallel/context_parallel/context_parallel.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>

#include "config/job_config.h"
#include "models/common/block_attention.h"
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

/// One of this rank's two chunks: its rows [start, start + length) of the
/// rank's T, where they sit (positions, documents), and the keys of the
/// whole sequence before it (positions [0, before)), the earlier chunks'.
struct Chunk {
  int64_t start = 0, length = 0;
  models::BlockSpan rows;
  int64_t before = 0;
  models::BlockSpan earlier;
};

/// This rank's two chunks for a rank-local length T; `documents`: the
/// whole row's (B, shards x T), or undefined.
std::array<Chunk, 2> chunks_of(
    const SequenceSplit& split, int64_t T, const at::Tensor& documents) {
  const int64_t L = T / 2;
  const models::BlockSpan local{
      split.positions(T),
      documents.defined() ? split.take(documents, /*dim=*/1) : at::Tensor()};
  std::array<Chunk, 2> chunks;
  for (int64_t h = 0; h < 2; ++h) {
    Chunk& c = chunks[h];
    c.start = h * L;
    c.length = L;
    c.rows = local.narrow(h * L, L);
    c.before = split.chunks()[h] * L;
    c.earlier = models::BlockSpan{
        at::arange(c.before, at::kLong),
        documents.defined() ? documents.narrow(1, 0, c.before) : at::Tensor()};
  }
  return chunks;
}

/// The gathered-keys attention as one autograd node over this rank's q, k
/// and v (see the header for the order of the work); `documents`: the whole
/// row's, under document masking, else undefined.
class GatheredKv : public torch::autograd::Function<GatheredKv> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& q_in,
      const at::Tensor& k_in,
      const at::Tensor& v_in,
      const std::optional<at::Tensor>& maybe_documents,
      int64_t attention) {
    GatheredKvAttention& self = of(attention);
    const SequenceSplit& split = self.split();
    const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2),
                  D = q_in.size(3), KV = k_in.size(1);
    const int64_t n = split.shards;
    const at::Tensor q = q_in.contiguous().view({B, KV, H / KV, T, D});
    const at::Tensor k = k_in.contiguous();
    const at::Tensor v = v_in.contiguous();
    const at::Tensor documents = maybe_documents.value_or(at::Tensor());
    ctx->saved_data["attention"] = attention;
    ctx->saved_data["documents"] = documents;
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
    const auto chunks = chunks_of(split, T, documents);
    at::Tensor out = at::zeros(
        {B, KV, H / KV, T, D},
        q.options().dtype(models::block_accumulation(q)));
    at::Tensor lse = at::full({B, KV, H / KV, T}, kNegInf, out.options());
    for (const Chunk& c : chunks) {
      auto rows_out = out.narrow(3, c.start, c.length);
      auto rows_lse = lse.narrow(3, c.start, c.length);
      models::accumulate_attention(
          q.narrow(3, c.start, c.length),
          k.narrow(2, c.start, c.length),
          v.narrow(2, c.start, c.length),
          c.rows,
          c.rows,
          rows_out,
          rows_lse);
    }
    wait_for(work, self, "kv all_gather forward");
    // (2, B, KV, n T, D): the whole sequence's keys and values, in order.
    const at::Tensor whole =
        split.restore(gathered.view({n, 2, B, KV, T, D}), /*dim=*/3);
    for (const Chunk& c : chunks) {
      if (c.before == 0) {
        continue;
      }
      auto rows_out = out.narrow(3, c.start, c.length);
      auto rows_lse = lse.narrow(3, c.start, c.length);
      models::accumulate_attention(
          q.narrow(3, c.start, c.length),
          whole.select(0, 0).narrow(2, 0, c.before),
          whole.select(0, 1).narrow(2, 0, c.before),
          c.rows,
          c.earlier,
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
    const int64_t n = split.shards;
    const at::Tensor dout = grads[0].contiguous().view({B, KV, G, T, D});
    const at::Tensor out5 = out.view({B, KV, G, T, D});
    const auto acc = models::block_accumulation(q);
    const c10::IValue& documents = ctx->saved_data["documents"];
    const auto chunks = chunks_of(
        split, T, documents.isTensor() ? documents.toTensor() : at::Tensor());
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(acc));
    // The chunk's rows of a (B, KV, G, T, ...) tensor.
    auto rows = [](const at::Tensor& x, const Chunk& c) {
      return x.narrow(3, c.start, c.length);
    };
    // The earlier chunks' keys first: their gradients go to other ranks.
    at::Tensor d_whole = at::zeros(whole.sizes(), dq.options());
    for (const Chunk& c : chunks) {
      if (c.before == 0) {
        continue;
      }
      models::accumulate_attention_backward(
          rows(q, c),
          whole.select(0, 0).narrow(2, 0, c.before),
          whole.select(0, 1).narrow(2, 0, c.before),
          c.rows,
          c.earlier,
          rows(out5, c),
          rows(lse, c),
          rows(dout, c),
          rows(dq, c),
          d_whole.select(0, 0).narrow(2, 0, c.before),
          d_whole.select(0, 1).narrow(2, 0, c.before));
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
    for (const Chunk& c : chunks) {
      models::accumulate_attention_backward(
          rows(q, c),
          k.narrow(2, c.start, c.length),
          v.narrow(2, c.start, c.length),
          c.rows,
          c.rows,
          rows(out5, c),
          rows(lse, c),
          rows(dout, c),
          rows(dq, c),
          dk.narrow(2, c.start, c.length),
          dv.narrow(2, c.start, c.length));
    }
    wait_for(work, self, "kv reduce_scatter backward");
    dk.add_(received.select(0, 0));
    dv.add_(received.select(0, 1));
    return {
        dq.to(q.scalar_type()).view({B, KV * G, T, D}),
        dk.to(k.scalar_type()),
        dv.to(v.scalar_type()),
        at::Tensor(),
        at::Tensor()};
  }
};

}  // namespace

GatheredKvAttention::GatheredKvAttention(
    std::shared_ptr<dist::ProcessGroup> group,
    SequenceSplit split,
    std::string name)
    : group_(std::move(group)), split_(split), name_(std::move(name)) {}

at::Tensor GatheredKvAttention::attend(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& documents) {
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
  TORCH_CHECK(
      !documents.defined() ||
          (documents.dim() == 2 && documents.size(0) == q.size(0) &&
           documents.size(1) == split_.shards * q.size(2)),
      "[context_parallel] ",
      name_,
      ": documents of the whole rows, (B, cp x T) = ",
      at::IntArrayRef{q.size(0), split_.shards * q.size(2)},
      "; got ",
      documents.sizes());
  return GatheredKv::apply(
      q,
      k,
      v,
      documents.defined() ? std::optional<at::Tensor>(
                                documents.to(at::kCPU, at::kLong).contiguous())
                          : std::nullopt,
      reinterpret_cast<int64_t>(this));
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
  // The planner searches cp as it does tp: each rank does 1 / cp of every
  // block's work (the head-tail split balances the causal attention), and
  // each attention layer all-gathers the whole sequence's keys and values
  // of the rank's heads forward and reduce-scatters their gradients
  // backward (modelled as a gather each way; the diagonal blocks hide most
  // of it, docs/PERFORMANCE.md, which the model leaves out).
  p.plan = PlanSearch{
      8,
      1,
      0,
      [](const ModelArgs& args, const std::map<std::string, int64_t>& splits) {
        const auto tp = splits.find("tp");
        const double t = tp == splits.end() ? 1.0 : tp->second;
        return 2.0 * static_cast<double>(args.kv_heads()) *
               static_cast<double>(args.head_dim()) /
               (static_cast<double>(args.dim) * t);
      }};
  // The token ids are split too (the loader's rows), so stages hand over
  // the rank's positions without a sequence_shards of their own.
  p.sequence_split = [](const ParallelDims& dims,
                        const dist::MeshCoord& coord) {
    return SequenceSplit{dims.degree(kAxis), coord.at(kAxis)};
  };
  return p;
}

}  // namespace baton::context_parallel
