#include "models/moe.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "common/torch_compat.h"
#include "models/common/fused_ops.h"
#include "models/common/transformer.h"
#include "models/forward_state.h"
#include "models/param_cast.h"

namespace baton::models {

namespace {

/// Adds `aux` (a scalar) to the objective without changing `y`: forward
/// returns y; backward passes y's gradient on and gives aux the gradient
/// `weight` (DeepSeek's AddAuxiliaryLoss), so the auxiliary loss reaches
/// the router wherever the block runs (a pipeline stage, a recomputation)
/// without a path through the loss function.
class AddAuxiliaryLoss : public torch::autograd::Function<AddAuxiliaryLoss> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& y,
      const at::Tensor& aux,
      double weight) {
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["dtype"] = static_cast<int64_t>(aux.scalar_type());
    return y.view_as(y);
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const double weight = ctx->saved_data["weight"].toDouble();
    const auto dtype =
        static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor aux_grad =
        at::full({}, weight, grads[0].options().dtype(dtype));
    return {grads[0], aux_grad, at::Tensor()};
  }
};

}  // namespace

Routing route(
    const at::Tensor& logits,
    const MoeArgs& args,
    const at::Tensor& expert_bias) {
  const int64_t n = logits.size(0);
  const int64_t experts = args.num_experts;
  Routing r;
  r.scores =
      args.score_func == "sigmoid" ? logits.sigmoid() : logits.softmax(-1);
  // What the choice is made on: the scores plus the bias, masked outside
  // the token's best groups. No gradient flows through the choice.
  at::Tensor choice = r.scores.detach();
  if (expert_bias.defined()) {
    choice = choice + expert_bias.to(choice.dtype());
  }
  if (args.n_groups > 1) {
    const int64_t per_group = experts / args.n_groups;
    const at::Tensor grouped = choice.view({n, args.n_groups, per_group});
    // Each group scored by the sum of its two best (DeepSeek-V3's).
    const at::Tensor group_scores =
        std::get<0>(grouped.topk(std::min<int64_t>(2, per_group), -1))
            .sum(-1);  // (n, groups)
    const at::Tensor best =
        std::get<1>(group_scores.topk(args.topk_groups, -1));
    const at::Tensor keep =
        at::zeros({n, args.n_groups}, choice.options().dtype(at::kBool))
            .scatter_(1, best, true)
            .unsqueeze(-1)
            .expand({n, args.n_groups, per_group})
            .reshape({n, experts});
    choice = choice.masked_fill(keep.logical_not(), -1e30);
  }
  // One more than k: the margin between the last chosen and the next.
  const int64_t k = args.top_k;
  auto [best, index] = choice.topk(std::min(k + 1, experts), -1);
  r.experts = index.narrow(1, 0, k).contiguous();
  r.margin = k < experts
                 ? (best.select(1, k - 1) - best.select(1, k)).to(at::kFloat)
                 : at::full({n}, INFINITY, best.options().dtype(at::kFloat));
  r.weights = r.scores.gather(1, r.experts);
  if (args.route_norm) {
    r.weights = r.weights / (r.weights.sum(-1, true) + 1e-20);
  }
  if (args.route_scale != 1.0) {
    r.weights = r.weights * args.route_scale;
  }
  return r;
}

at::Tensor moe_aux_loss(
    const Routing& routing,
    int64_t num_experts,
    int64_t sequences,
    const SequenceSum& over_shards,
    int64_t shards) {
  const int64_t n = routing.experts.size(0);
  const int64_t length = n / sequences;
  const int64_t k = routing.experts.size(1);
  // Per sequence: the share of its tokens' choices each expert got, and
  // each expert's mean score over its tokens (summed over the sequence's
  // shards where other ranks hold the rest of it).
  at::Tensor counts =
      at::zeros({sequences, num_experts}, routing.scores.options())
          .scatter_add_(
              1,
              routing.experts.reshape({sequences, length * k}),
              at::ones({sequences, length * k}, routing.scores.options()));
  at::Tensor score_sums =
      routing.scores.reshape({sequences, length, num_experts}).sum(1);
  if (over_shards) {
    counts = over_shards(counts);
    score_sums = over_shards(score_sums);
  }
  const double whole = static_cast<double>(length * shards);
  const at::Tensor share = counts / whole;  // sums to k
  const at::Tensor mean_score = score_sums / whole;
  return (share * mean_score).sum(-1).mean() * static_cast<double>(num_experts);
}

MoEImpl::MoEImpl(const ModelArgs& args) : args_(args.moe) {
  const int64_t e = args_.num_experts;
  const int64_t h = args_.expert_hidden;
  if (e < 1 || args_.top_k < 1 || h < 1) {
    throw std::invalid_argument("[MoE] needs experts, top_k and a hidden size");
  }
  // torchtitan's names: router.gate, experts.w1/w2/w3, shared_experts.
  auto router =
      register_module("router", std::make_shared<torch::nn::Module>());
  gate = router->register_module("gate", Linear(args.dim, e));
  auto experts =
      register_module("experts", std::make_shared<torch::nn::Module>());
  w1 = experts->register_parameter("w1", at::empty({e, h, args.dim}));
  w2 = experts->register_parameter("w2", at::empty({e, args.dim, h}));
  w3 = experts->register_parameter("w3", at::empty({e, h, args.dim}));
  if (args_.shared_experts > 0) {
    ModelArgs shared = args;
    shared.ffn_hidden = args_.shared_experts * h;
    shared_experts = register_module(
        "shared_experts", std::make_shared<FeedForwardImpl>(shared));
  }
  if (args_.expert_bias) {
    expert_bias = register_buffer("expert_bias", at::zeros({e}));
  }
  stats_.tokens_per_expert = at::zeros({e}, at::kDouble);
  stats_.min_margin = INFINITY;
}

bool is_routed_expert(const std::string& fqn) {
  for (const char* w : {".experts.w1", ".experts.w2", ".experts.w3"}) {
    const std::string suffix = w;
    if (fqn.size() >= suffix.size() &&
        fqn.compare(fqn.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

at::Tensor capacity_keep(
    const Routing& routing, int64_t num_experts, double factor) {
  const int64_t n = routing.experts.size(0);
  const int64_t k = routing.experts.size(1);
  const auto flags = routing.experts.options().dtype(at::kBool);
  if (factor <= 0.0) {
    return at::ones({n, k}, flags);
  }
  const auto capacity = static_cast<int64_t>(std::ceil(
      factor * static_cast<double>(n * k) / static_cast<double>(num_experts)));
  const at::Tensor expert = routing.experts.flatten();
  const at::Tensor score =
      routing.scores.detach().gather(1, routing.experts).flatten();
  // The pairs grouped by expert, each expert's best-scored first (stable
  // sorts: ties to the earlier pair).
  const at::Tensor by_score = std::get<1>(at::sort(
      score, std::optional<bool>(true), /*dim=*/0, /*descending=*/true));
  const at::Tensor by_expert = std::get<1>(at::sort(
      expert.index_select(0, by_score), std::optional<bool>(true), 0, false));
  const at::Tensor order = by_score.index_select(0, by_expert);
  // Each pair's place among its expert's: its place in `order` less where
  // its expert's pairs start.
  const at::Tensor counts = at::bincount(expert, {}, num_experts);
  const at::Tensor starts = counts.cumsum(0) - counts;
  const at::Tensor place =
      at::arange(n * k, expert.options()) -
      starts.index_select(0, expert.index_select(0, order));
  return at::zeros({n * k}, flags)
      .index_put_({order}, place < capacity)
      .view({n, k});
}

at::Tensor MoEImpl::experts_forward(
    const at::Tensor& x, const Routing& routing) {
  const int64_t n = x.size(0);
  const int64_t k = args_.top_k;
  at::Tensor flat = routing.experts.flatten();  // (n k)
  // The pairs each expert takes (all without a capacity), sorted by expert
  // (stable: a token's order kept); `order` indexes the (n k) pairs.
  at::Tensor pairs;
  last_dropped_ = 0;
  if (capacity_factor > 0.0) {
    pairs = capacity_keep(routing, args_.num_experts, capacity_factor)
                .flatten()
                .nonzero()
                .squeeze(1);
    last_dropped_ = n * k - pairs.size(0);
    flat = flat.index_select(0, pairs);
  }
  at::Tensor order =
      std::get<1>(at::sort(flat, std::optional<bool>(true), /*dim=*/0));
  if (pairs.defined()) {
    order = pairs.index_select(0, order);
  }
  const at::Tensor token = order.div(k, "floor");
  const at::Tensor counts =
      at::bincount(flat, /*weights=*/{}, args_.num_experts).cpu();
  const at::Tensor xs = x.index_select(0, token);
  at::Tensor ys;
  if (dispatcher) {
    ys = dispatcher->run(
        xs,
        counts,
        [this](const at::Tensor& rows, const std::vector<int64_t>& c) {
          return local_experts(rows, c);
        });
  } else {
    const auto* count = counts.data_ptr<int64_t>();
    ys = local_experts(
        xs, std::vector<int64_t>(count, count + args_.num_experts));
  }
  const at::Tensor gates =
      routing.weights.flatten().index_select(0, order).to(ys.dtype());
  return at::zeros({n, x.size(1)}, ys.options())
      .index_add(0, token, ys * gates.unsqueeze(1));
}

namespace {

/// One product per expert that has rows: exactly the routed rows' FLOPs (a
/// batched product would pad every expert to the most loaded one's rows).
at::Tensor experts_loop(
    const at::Tensor& xs,
    const std::vector<int64_t>& count,
    const at::Tensor& w1,
    const at::Tensor& w3,
    const at::Tensor& w2) {
  // Unbound once: a select per expert would give each its own gradient of
  // the whole tensor to add up (E^2 work); unbind's backward stacks them.
  const std::vector<at::Tensor> a = w1.unbind(0);
  const std::vector<at::Tensor> b = w3.unbind(0);
  const std::vector<at::Tensor> c = w2.unbind(0);
  std::vector<at::Tensor> outs;
  // Split once (its backward concatenates): a narrow per expert would give
  // each a gradient the size of all the rows to add up.
  const std::vector<at::Tensor> rows_of = xs.split_with_sizes(count);
  // The rows are padded to a multiple of kRowBucket on the CPU: oneDNN
  // compiles a kernel per shape, and a new row count every step and expert
  // made it compile all the time (half the debug model's step, and 1.4 GB
  // of kernels; padded, the step ran 1.5x faster).
  constexpr int64_t kRowBucket = 64;
  for (size_t e = 0; e < count.size(); ++e) {
    if (count[e] == 0) {
      continue;
    }
    at::Tensor rows = rows_of[e];
    const int64_t pad = (kRowBucket - count[e] % kRowBucket) % kRowBucket;
    if (pad > 0 && xs.device().is_cpu()) {
      rows = at::constant_pad_nd(rows, {0, 0, 0, pad});
    }
    const at::Tensor hidden =
        swiglu(at::mm(rows, a[e].t()), at::mm(rows, b[e].t()));
    outs.push_back(at::mm(hidden, c[e].t()).narrow(0, 0, count[e]));
  }
  if (outs.empty()) {
    return at::Tensor();
  }
  return at::cat(outs, 0);
}

/// All experts' products at once, ATen's grouped matmul: each expert's
/// rows (consecutive, `count` each) times its weights, the weights read
/// transposed in place. Each expert's group starts at a multiple of
/// `align` rows: the weights' gradient reads the rows transposed, its
/// groups along the inner dimension, and CUDA's kernel wants each group's
/// start 16-byte aligned there (torchtitan pads its groups likewise); the
/// rows are then scattered into zero-padded groups and gathered back.
at::Tensor experts_grouped(
    const at::Tensor& xs,
    const std::vector<int64_t>& count,
    const at::Tensor& w1,
    const at::Tensor& w3,
    const at::Tensor& w2,
    int64_t align) {
  std::vector<int32_t> ends(count.size());
  std::vector<int64_t> place;  // each row's row in the padded groups
  const bool pad = align > 1;
  int64_t end = 0;
  for (size_t e = 0; e < count.size(); ++e) {
    if (pad) {
      for (int64_t r = 0; r < count[e]; ++r) {
        place.push_back(end + r);
      }
      end += (count[e] + align - 1) / align * align;
    } else {
      end += count[e];
    }
    ends[e] = static_cast<int32_t>(end);
  }
  const auto on_device = [&xs](const at::Tensor& t) {
    return t.to(xs.device());
  };
  const at::Tensor offs =
      on_device(at::tensor(ends, at::TensorOptions().dtype(at::kInt)));
  at::Tensor rows = xs;
  at::Tensor index;
  if (pad) {
    index = on_device(at::tensor(place, at::TensorOptions().dtype(at::kLong)));
    rows = at::zeros({end, xs.size(1)}, xs.options()).index_copy(0, index, xs);
  }
  const at::Tensor hidden = swiglu(
      compat::grouped_mm(rows, w1.transpose(1, 2), offs),
      compat::grouped_mm(rows, w3.transpose(1, 2), offs));
  const at::Tensor out = compat::grouped_mm(hidden, w2.transpose(1, 2), offs);
  return pad ? out.index_select(0, index) : out;
}

}  // namespace

ExpertProducts parse_expert_products(const std::string& name) {
  if (name == "auto") {
    return ExpertProducts::kAuto;
  }
  if (name == "loop") {
    return ExpertProducts::kLoop;
  }
  throw std::invalid_argument(
      "[MoE] expert_products '" + name + "'; allowed: auto, loop");
}

bool grouped_mm_takes(const at::Tensor& xs, const at::Tensor& weight) {
  const auto dtype = xs.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  // The activations' rows and the weights' transposed (dim, hidden) and
  // (hidden, dim) views: every stride but the unit one 16-byte aligned.
  const int64_t size = static_cast<int64_t>(xs.element_size());
  const bool widths =
      (weight.size(1) * size) % 16 == 0 && (weight.size(2) * size) % 16 == 0;
  return widths && weight.scalar_type() == dtype &&
         compat::grouped_mm_aligned(xs) && compat::grouped_mm_aligned(weight);
}

at::Tensor expert_products(
    const at::Tensor& xs,
    const std::vector<int64_t>& count,
    const at::Tensor& w1,
    const at::Tensor& w3,
    const at::Tensor& w2,
    ExpertProducts how,
    int64_t align_rows) {
  const bool grouped = how == ExpertProducts::kAuto && xs.size(0) > 0 &&
                       grouped_mm_takes(xs, w1) && grouped_mm_takes(xs, w3) &&
                       grouped_mm_takes(xs, w2);
  if (!grouped) {
    return experts_loop(xs, count, w1, w3, w2);
  }
  // 16 bytes of rows on CUDA; the CPU kernel takes groups anywhere.
  const int64_t align = align_rows > 0 ? align_rows
                        : xs.is_cuda()
                            ? 16 / static_cast<int64_t>(xs.element_size())
                            : 1;
  return experts_grouped(xs, count, w1, w3, w2, align);
}

at::Tensor MoEImpl::local_experts(
    const at::Tensor& xs, const std::vector<int64_t>& count) const {
  const auto experts = static_cast<int64_t>(count.size());
  TORCH_CHECK(
      experts == w1.size(0),
      "[MoE] rows for ",
      experts,
      " experts; this module holds ",
      w1.size(0));
  const at::Tensor a = compute_param(w1);
  const at::Tensor b = compute_param(w3);
  const at::Tensor c = compute_param(w2);
  const at::Tensor out = expert_products(xs, count, a, b, c, products);
  if (!out.defined()) {
    // No rows (expert parallel: none came to this rank's experts): still
    // a function of them and of the weights, so that the backward runs the
    // dispatch's all-to-all and the weights' gradient hooks (tensor
    // parallel's sums) as every other rank's does.
    return xs.mul(0.0) + (a.sum() + b.sum() + c.sum()) * 0.0;
  }
  return out;
}

at::Tensor MoEImpl::forward(const at::Tensor& input) {
  const at::Tensor in = hooks.in(input);
  const auto shape = in.sizes().vec();
  const at::Tensor x = in.reshape({-1, shape.back()});
  // Routing in float32 at least: bf16 logits would tie and flip choices.
  const at::Tensor logits =
      gate(x).to(at::promote_types(x.scalar_type(), at::kFloat));
  const Routing routing = route(logits, args_, expert_bias);
  at::Tensor out = experts_forward(x, routing).to(x.dtype());
  if (shared_experts) {
    out = out + shared_experts->forward(x);
  }
  const ForwardState& state = forward_state();
  const bool counts = !state.recomputing && !state.evaluating;
  const bool aux_wanted = aux_loss_coeff > 0.0 && state.loss_scale > 0.0;
  at::Tensor aux;
  if (aux_wanted || counts) {
    aux = moe_aux_loss(
        routing,
        args_.num_experts,
        in.dim() == 3 ? in.size(0) : 1,
        sum_over_sequence,
        sequence_shards);
  }
  if (counts) {
    torch::NoGradGuard no_grad;
    const at::Tensor c =
        at::bincount(routing.experts.flatten(), {}, args_.num_experts);
    const at::Tensor a = aux.detach() * static_cast<double>(x.size(0));
    stats_.pending_counts =
        stats_.pending_counts.defined() ? stats_.pending_counts + c : c;
    stats_.pending_aux =
        stats_.pending_aux.defined() ? stats_.pending_aux + a : a;
    const at::Tensor m = routing.margin.min();
    stats_.pending_margin = stats_.pending_margin.defined()
                                ? at::minimum(stats_.pending_margin, m)
                                : m;
    stats_.tokens += x.size(0);
    stats_.dropped += last_dropped_;
  }
  if (aux_wanted && aux.requires_grad()) {
    // The objective's term: coeff x the layer's loss, weighted by this
    // forward's share of the step's tokens (the cross-entropy's scale).
    out = AddAuxiliaryLoss::apply(
        out,
        aux,
        aux_loss_coeff * state.loss_scale *
            static_cast<double>(x.size(0) * sequence_shards));
  }
  return hooks.out(out.reshape(shape));
}

const MoeStats& MoEImpl::stats() {
  if (stats_.pending_counts.defined()) {
    stats_.tokens_per_expert += stats_.pending_counts.cpu().to(at::kDouble);
    stats_.aux_loss_sum += stats_.pending_aux.item<double>();
    stats_.min_margin =
        std::min(stats_.min_margin, stats_.pending_margin.item<double>());
    stats_.pending_counts = at::Tensor();
    stats_.pending_aux = at::Tensor();
    stats_.pending_margin = at::Tensor();
  }
  return stats_;
}

MoeStats MoEImpl::take_stats() {
  MoeStats out = stats();
  stats_ = MoeStats{};
  stats_.tokens_per_expert = at::zeros({args_.num_experts}, at::kDouble);
  stats_.min_margin = INFINITY;
  return out;
}

}  // namespace baton::models
