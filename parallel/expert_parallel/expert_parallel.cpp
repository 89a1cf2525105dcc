#include "parallel/expert_parallel/expert_parallel.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <c10/util/accumulate.h>

#include <numeric>

#include "config/job_config.h"
#include "parallel/axes.h"
#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/dist/traffic.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"

namespace baton::expert_parallel {

namespace {

dist::TrafficLog& traffic_log() {
  static dist::TrafficLog log;
  return log;
}

void count(const std::string& key, int64_t bytes) {
  traffic_log().count(key, bytes);
}

/// Runs `op` under the layer's name: a profiler range, the flight
/// recorder's label, and a CommError that says which layer and exchange
/// failed.
template <class Op>
void named(const AllToAllDispatcher& d, const std::string& what, const Op& op) {
  dist::run_labelled("expert_parallel", d.name(), what, op);
}

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

/// Rows of `x` split as `send` to the ep ranks, `receive` rows back from
/// each: (sum(receive), ...).
at::Tensor exchange(
    const AllToAllDispatcher& d,
    const at::Tensor& x,
    const std::vector<int64_t>& receive,
    const std::vector<int64_t>& send,
    const std::string& what) {
  auto sizes = x.sizes().vec();
  sizes[0] = sum(receive);
  at::Tensor out = at::empty(sizes, x.options());
  const int64_t row_bytes = static_cast<int64_t>(x.element_size()) *
                            c10::multiply_integers(x.sizes().slice(1));
  const int64_t kept = send.at(d.group().rank());
  count(what, (x.size(0) - kept) * row_bytes);
  named(d, what, [&] { d.group().all_to_all(out, x, receive, send); });
  return out;
}

/// The rows' all-to-all as an autograd function: its backward sends the
/// gradients back the way the rows came.
class AllToAll : public torch::autograd::Function<AllToAll> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& x,
      int64_t dispatcher,
      std::vector<int64_t> receive,
      std::vector<int64_t> send,
      bool combine) {
    ctx->saved_data["dispatcher"] = dispatcher;
    ctx->saved_data["receive"] = receive;
    ctx->saved_data["send"] = send;
    ctx->saved_data["combine"] = combine;
    ctx->saved_data["row_shape"] = x.sizes().slice(1).vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["device"] = x.device();
    return exchange(
        of(dispatcher),
        x.contiguous(),
        receive,
        send,
        combine ? "combine forward" : "dispatch forward");
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const auto receive = ctx->saved_data["receive"].toIntVector();
    const auto send = ctx->saved_data["send"].toIntVector();
    const bool combine = ctx->saved_data["combine"].toBool();
    at::Tensor grad = grads[0];
    if (!grad.defined()) {
      // No gradient reached the rows: every rank still takes part.
      auto shape = ctx->saved_data["row_shape"].toIntVector();
      shape.insert(shape.begin(), sum(receive));
      grad = at::zeros(
          shape,
          at::TensorOptions()
              .dtype(
                  static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt()))
              .device(ctx->saved_data["device"].toDevice()));
    }
    const auto& d = of(ctx->saved_data["dispatcher"].toInt());
    return {
        exchange(
            d,
            grad.contiguous(),
            send,
            receive,
            combine ? "combine backward" : "dispatch backward"),
        at::Tensor(),
        at::Tensor(),
        at::Tensor(),
        at::Tensor()};
  }

 private:
  static const AllToAllDispatcher& of(int64_t pointer) {
    return *reinterpret_cast<const AllToAllDispatcher*>(pointer);
  }
};

}  // namespace

std::map<std::string, Traffic> traffic() {
  return traffic_log().snapshot();
}

void reset_traffic() {
  traffic_log().reset();
}

AllToAllDispatcher::AllToAllDispatcher(
    std::shared_ptr<dist::ProcessGroup> group,
    std::string name,
    int64_t num_experts)
    : group_(std::move(group)),
      name_(std::move(name)),
      num_experts_(num_experts) {
  if (num_experts_ % group_->size() != 0) {
    throw std::invalid_argument(
        "[expert_parallel] " + name_ + ": " + std::to_string(num_experts_) +
        " experts over " + std::to_string(group_->size()) +
        " ranks; allowed: a multiple of the ep degree");
  }
}

at::Tensor AllToAllDispatcher::run(
    const at::Tensor& rows,
    const at::Tensor& counts,
    const models::LocalExperts& experts) {
  const int64_t ranks = group_->size();
  const int64_t local = num_experts_ / ranks;
  TORCH_CHECK(
      counts.numel() == num_experts_,
      "[expert_parallel] ",
      name_,
      ": counts for ",
      counts.numel(),
      " experts; allowed: ",
      num_experts_);
  // The counts first: received[q L + l] rows of rank q for local expert l.
  at::Tensor sent_counts = counts.to(rows.device(), at::kLong).contiguous();
  at::Tensor received_counts = at::empty_like(sent_counts);
  {
    torch::NoGradGuard no_grad;
    count("counts", (ranks - 1) * local * sent_counts.element_size());
    named(*this, "counts", [&] {
      group_->all_to_all(received_counts, sent_counts, {}, {});
    });
  }
  const at::Tensor sent_cpu = sent_counts.cpu();
  const at::Tensor got_cpu = received_counts.cpu();
  const auto* sent = sent_cpu.data_ptr<int64_t>();
  const auto* got = got_cpu.data_ptr<int64_t>();
  std::vector<int64_t> send(ranks, 0);
  std::vector<int64_t> receive(ranks, 0);
  for (int64_t q = 0; q < ranks; ++q) {
    for (int64_t l = 0; l < local; ++l) {
      send[q] += sent[q * local + l];
      receive[q] += got[q * local + l];
    }
  }
  const auto self = reinterpret_cast<int64_t>(this);
  const at::Tensor arrived =
      AllToAll::apply(rows, self, receive, send, /*combine=*/false);
  // Arrived by source rank, then local expert; the experts want them by
  // local expert, then source rank.
  std::vector<int64_t> by_expert;
  by_expert.reserve(sum(receive));
  std::vector<int64_t> local_counts(local, 0);
  for (int64_t l = 0; l < local; ++l) {
    int64_t start = 0;
    for (int64_t q = 0; q < ranks; ++q) {
      int64_t at_expert = start;
      for (int64_t m = 0; m < l; ++m) {
        at_expert += got[q * local + m];
      }
      for (int64_t i = 0; i < got[q * local + l]; ++i) {
        by_expert.push_back(at_expert + i);
      }
      local_counts[l] += got[q * local + l];
      start += receive[q];
    }
  }
  const auto n = static_cast<int64_t>(by_expert.size());
  std::vector<int64_t> back(n);
  for (int64_t i = 0; i < n; ++i) {
    back[by_expert[i]] = i;
  }
  const auto index = [&](const std::vector<int64_t>& v) {
    return at::tensor(v, at::kLong).to(rows.device());
  };
  const at::Tensor computed =
      experts(arrived.index_select(0, index(by_expert)), local_counts);
  const at::Tensor returned = computed.index_select(0, index(back));
  return AllToAll::apply(returned, self, send, receive, /*combine=*/true);
}

std::optional<ConfigProblem> expert_parallel_problem(
    const ModelArgs& args, int64_t ep) {
  if (ep <= 1) {
    return std::nullopt;
  }
  if (args.moe.num_experts < 1) {
    return ConfigProblem{
        kDegreeKey,
        std::string(kDegreeKey) + ": " + std::to_string(ep) +
            " for a model without experts; allowed: 1, or a mixture-of-"
            "experts model (model.name: qwen3_moe or deepseek_moe)"};
  }
  if (args.moe.num_experts % ep != 0) {
    return ConfigProblem{
        kDegreeKey,
        std::string(kDegreeKey) + ": " + std::to_string(ep) +
            " does not divide the model's " +
            std::to_string(args.moe.num_experts) +
            " experts; allowed: a divisor of " +
            std::to_string(args.moe.num_experts)};
  }
  return std::nullopt;
}

void ExpertParallelApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  const auto& group = context.mesh.group(kAxis);
  const int64_t ep = group->size();
  const int64_t me = group->rank();
  int64_t layers = 0;
  int64_t experts = 0;
  int64_t bytes = 0;
  for (const auto& item : part.module().named_modules("", false)) {
    auto* moe = item.value()->as<models::MoEImpl>();
    if (moe == nullptr) {
      continue;
    }
    experts = moe->args().num_experts;
    if (experts % ep != 0 || moe->w1.size(0) != experts) {
      throw std::invalid_argument(
          "[expert_parallel] " + item.key() + ": " +
          std::to_string(moe->w1.size(0)) + " experts of " +
          std::to_string(experts) + " over ep " + std::to_string(ep) +
          "; allowed: the whole experts, a multiple of ep");
    }
    const int64_t local = experts / ep;
    const std::vector<std::string> names = {
        item.key() + ".experts.w1",
        item.key() + ".experts.w2",
        item.key() + ".experts.w3"};
    std::vector<at::Tensor> weights = {moe->w1, moe->w2, moe->w3};
    // Whole, every data-parallel rank must start from the same experts
    // (check_replicas checks the rest).
    check_replicas_equal(weights, names, *context.mesh.dp());
    for (size_t i = 0; i < weights.size(); ++i) {
      at::Tensor& w = weights[i];
      ParamSlice slice;
      slice.global_shape = w.sizes().vec();
      slice.offsets.assign(w.dim(), 0);
      slice.offsets[0] = me * local;
      {
        torch::NoGradGuard no_grad;
        w.set_data(w.narrow(0, me * local, local).clone());
      }
      bytes += w.nbytes();
      part.set_slice(names[i], std::move(slice));
      // The ep ranks hold different experts and fully_shard splits each
      // rank's over the rest of dp_shard x cp: every rank of those a piece
      // of its own.
      part.mark_grad_split(names[i], kShardAxis);
      if (context.mesh.dims().degree(kContextAxis) > 1) {
        part.mark_grad_split(names[i], kContextAxis);
      }
      part.set_shard_group(names[i], kRestAxis);
    }
    moe->dispatcher =
        std::make_shared<AllToAllDispatcher>(group, item.key(), experts);
    ++layers;
  }
  LOG_IF(INFO, layers > 0 && context.mesh.leads({kPipelineAxis}))
      << "expert_parallel: stage " << part.stage() << ": " << layers
      << " MoE layers, " << experts << " experts each over ep " << ep
      << ": this rank holds experts [" << me * (experts / ep) << ", "
      << (me + 1) * (experts / ep) << "), " << bytes / (1 << 20)
      << " MiB, sharded over " << kRestAxis << " "
      << context.mesh.dims().degree(kRestAxis);
}

Parallelism expert_parallel_parallelism() {
  Parallelism p;
  p.name = "expert_parallel";
  // Borrowed from dp_shard x cp (torchtitan's): cp's ranks route their own
  // positions' tokens as dp_shard's route their own rows'.
  p.derived_axis =
      DerivedAxisSpec{kAxis, {kShardAxis, kContextAxis}, kDegreeKey, kRestAxis};
  p.section = "parallelism";
  p.fields = {
      {"expert_parallel_degree",
       int64_t{1},
       FieldSpec(
           "expert parallel ranks: the MoE layers' experts split over this "
           "many of dp_shard x cp's ranks (it divides "
           "data_parallel_shard_degree x context_parallel_degree)")
           .at_least(1)}};
  p.owned_appliers = {
      {"expert_parallel",
       [] { return std::make_unique<ExpertParallelApplier>(); },
       "expert parallel over ep (parallelism.expert_parallel_degree): each "
       "MoE layer's experts split over ep, tokens dispatched and combined "
       "by all-to-all"}};
  p.steps = {"expert_parallel"};
  p.appliers = [](const JobConfig&, const ParallelDims&) {
    return std::vector<std::string>{"expert_parallel"};
  };
  p.check =
      [](const JobConfig&, const ParallelDims& dims, const ModelArgs& args) {
        return expert_parallel_problem(args, dims.degree(kAxis));
      };
  // The planner searches ep where dp_shard x cp allows it: the experts'
  // FLOPs stay where they were (a balanced router gives each rank as many
  // rows as it sends), and each MoE block's forward dispatches and
  // combines its top_k rows per token by all-to-all (as many in its
  // backward), averaged over the blocks as the planner's costs are per
  // block. The counts' exchange before each dispatch is left out (E x 8
  // bytes).
  p.borrow_plan = PlanBorrowSearch{
      64, 2, [](const ModelArgs& args) {
        int64_t moe_layers = 0;
        for (int64_t i = 0; i < args.n_layers; ++i) {
          moe_layers += args.moe.is_moe_layer(i) ? 1 : 0;
        }
        return static_cast<double>(args.moe.top_k * moe_layers) /
               static_cast<double>(args.n_layers);
      }};
  p.stored_shape = [](const JobConfig&,
                      const ModelArgs&,
                      const std::string& fqn,
                      const dist::MeshCoord&,
                      const ParallelDims& dims,
                      std::vector<int64_t>& shape) {
    if (models::is_routed_expert(fqn)) {
      shape[0] /= dims.degree(kAxis);
    }
  };
  return p;
}

}  // namespace baton::expert_parallel
