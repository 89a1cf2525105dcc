#include "parallel/data_parallel/replicate.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <stdexcept>

#include "common/torch_compat.h"
#include "config/job_config.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "parallel/parallelism.h"

namespace baton {

struct GradientReducer::State {
  struct Bucket {
    std::vector<int64_t> params;
    at::Tensor flat;
    std::vector<int64_t> offsets;
    int64_t pending = 0;
    bool started = false;
    dist::Work work;
  };

  std::vector<at::Tensor> params;
  std::shared_ptr<dist::ProcessGroup> group;
  std::vector<Bucket> buckets;
  std::vector<int64_t> bucket_of;
  // Keep the AccumulateGrad nodes (and so the hooks) alive.
  std::vector<compat::NodeRef> accumulators;

  std::mutex mutex;
  bool sync = false;
  int64_t next_to_start = 0;
  int64_t started_by_hooks = 0;

  void start(Bucket& b) {
    for (size_t i = 0; i < b.params.size(); ++i) {
      const auto& p = params[b.params[i]];
      auto view = b.flat.narrow(0, b.offsets[i], p.numel());
      if (p.grad().defined()) {
        view.copy_(p.grad().reshape(-1));
      } else {
        view.zero_();
      }
    }
    b.work = group->all_reduce_async(b.flat, dist::ReduceOp::kSum);
    b.started = true;
  }

  /// Starts every bucket from next_to_start on that is ready, in order.
  void start_ready() {
    while (next_to_start < static_cast<int64_t>(buckets.size()) &&
           buckets[next_to_start].pending == 0) {
      start(buckets[next_to_start++]);
      ++started_by_hooks;
    }
  }

  void on_gradient_ready(int64_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!sync) {
      return;
    }
    auto& b = buckets[bucket_of[index]];
    if (b.pending > 0 && --b.pending == 0) {
      start_ready();
    }
  }
};

GradientReducer::GradientReducer(
    std::vector<at::Tensor> parameters,
    std::shared_ptr<dist::ProcessGroup> group,
    int64_t bucket_bytes,
    std::optional<at::ScalarType> reduce_dtype)
    : state_(std::make_shared<State>()) {
  auto& s = *state_;
  s.params = std::move(parameters);
  s.group = std::move(group);
  s.bucket_of.assign(s.params.size(), -1);
  // Reverse registration order; a new bucket when full or the dtype changes.
  for (int64_t i = static_cast<int64_t>(s.params.size()) - 1; i >= 0; --i) {
    const auto& p = s.params[i];
    if (!p.requires_grad()) {
      continue;
    }
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    bool fits = !s.buckets.empty();
    if (fits) {
      auto& b = s.buckets.back();
      const auto& first = s.params[b.params.front()];
      int64_t used = 0;
      for (auto j : b.params) {
        used += s.params[j].numel() * s.params[j].element_size();
      }
      fits = first.scalar_type() == p.scalar_type() &&
             first.device() == p.device() && used + bytes <= bucket_bytes;
    }
    if (!fits) {
      s.buckets.emplace_back();
    }
    s.buckets.back().params.push_back(i);
    s.bucket_of[i] = static_cast<int64_t>(s.buckets.size()) - 1;
  }
  for (auto& b : s.buckets) {
    int64_t numel = 0;
    for (auto j : b.params) {
      b.offsets.push_back(numel);
      numel += s.params[j].numel();
    }
    const auto& options = s.params[b.params.front()].options();
    b.flat = at::zeros(
        {numel},
        options.dtype(reduce_dtype.value_or(options.dtype().toScalarType())));
  }
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.bucket_of[i] < 0) {
      continue;
    }
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    if (!acc) {
      throw std::invalid_argument(
          "[GradientReducer] parameter " + std::to_string(i) +
          " is not a leaf that accumulates gradients");
    }
    const auto index = static_cast<int64_t>(i);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, index](
            const torch::autograd::variable_list& outputs,
            const torch::autograd::variable_list& /*inputs*/) {
          if (auto state = weak.lock()) {
            state->on_gradient_ready(index);
          }
          return outputs;
        }));
    s.accumulators.push_back(std::move(acc));
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::prepare(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto& s = *state_;
  if (s.sync) {
    throw std::logic_error(
        "[GradientReducer] prepare(sync) twice without finish()");
  }
  s.sync = sync;
  if (sync) {
    s.next_to_start = 0;
    s.started_by_hooks = 0;
    for (auto& b : s.buckets) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.started = false;
    }
  }
}

void GradientReducer::finish() {
  auto& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.sync) {
      throw std::logic_error(
          "[GradientReducer] finish() without prepare(true)");
    }
    s.sync = false;
    while (s.next_to_start < static_cast<int64_t>(s.buckets.size())) {
      s.start(s.buckets[s.next_to_start++]);
    }
  }
  for (auto& b : s.buckets) {
    b.work.wait();
    for (size_t i = 0; i < b.params.size(); ++i) {
      auto& p = s.params[b.params[i]];
      auto sum = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(sum);
      } else {
        p.mutable_grad() =
            sum.to(p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
      }
    }
  }
}

std::vector<std::vector<int64_t>> GradientReducer::bucket_layout() const {
  std::vector<std::vector<int64_t>> layout;
  for (const auto& b : state_->buckets) {
    layout.push_back(b.params);
  }
  return layout;
}

int64_t GradientReducer::buckets_started_by_hooks() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->started_by_hooks;
}

void check_replicas_equal(
    const std::vector<at::Tensor>& parameters,
    const std::vector<std::string>& names,
    dist::ProcessGroup& group) {
  if (group.size() == 1 || parameters.empty()) {
    return;
  }
  std::vector<at::Tensor> prints;
  for (const auto& p : parameters) {
    const auto d = p.detach().to(at::kDouble);
    prints.push_back(at::stack({d.sum(), d.pow(2).sum()}));
  }
  const auto mine = at::stack(prints).cpu();
  auto lo = mine.clone();
  auto hi = mine.clone();
  group.all_reduce(lo, dist::ReduceOp::kMin);
  group.all_reduce(hi, dist::ReduceOp::kMax);
  const auto differs = (lo != hi).any(1);
  for (int64_t i = 0; i < differs.size(0); ++i) {
    if (differs[i].item<bool>()) {
      throw std::runtime_error(
          "[data_parallel] parameter " +
          (i < static_cast<int64_t>(names.size()) ? names[i]
                                                  : std::to_string(i)) +
          " differs between the replicas of group '" + group.name() +
          "' at start-up; hint: initialisation must not depend on the rank");
    }
  }
}

void ReplicateApplier::apply(ModelPart& part, const ParallelContext& context) {
  const auto bucket_bytes = static_cast<int64_t>(
      context.config.parallelism.data_parallel_bucket_size_mb * 1024 * 1024);
  part.grad_sync().add(std::make_shared<GradientReducer>(
      part.module().parameters(),
      context.mesh.dp(),
      bucket_bytes,
      context.mixed_precision.reduce_cast()));
}

Parallelism replicate_parallelism() {
  Parallelism p;
  p.name = "replicate";
  p.axis = MeshAxisSpec{
      kReplicateAxis,
      100,
      "parallelism.data_parallel_replicate_degree",
      {"dp", "loss"}};
  p.owned_appliers = {
      {"replicate",
       [] { return std::make_unique<ReplicateApplier>(); },
       "data parallel (DDP): bucketed gradient all-reduce over dp during "
       "backward"}};
  p.place = ChainPlace::kData;
  p.steps = {"check_replicas", "replicate"};
  p.appliers = [](const JobConfig&, const ParallelDims& dims) {
    // fully_shard reduces over dp_replicate itself (HSDP) where it runs.
    return dims.degree(kShardContextGroup) > 1
               ? std::vector<std::string>{}
               : std::vector<std::string>{"check_replicas", "replicate"};
  };
  return p;
}

}  // namespace baton
