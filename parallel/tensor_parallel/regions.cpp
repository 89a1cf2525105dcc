#include "parallel/tensor_parallel/regions.h"

#include <torch/torch.h>

#include "parallel/dist/process_group.h"
#include "parallel/dist/traffic.h"

namespace baton::tensor_parallel {

namespace {

dist::TrafficLog& traffic_log() {
  static dist::TrafficLog log;
  return log;
}

void count(const std::string& key, int64_t bytes) {
  traffic_log().count(key, bytes);
}

/// Runs `op` under the region's name: a profiler range, and a CommError
/// that says which region and collective failed.
template <class Op>
at::Tensor named(const Region& region, const std::string& what, const Op& op) {
  return dist::run_labelled("tensor_parallel", region.name, what, op);
}

/// The all-gather along the sequence: (B, T / n, ...) -> (B, T, ...).
at::Tensor gather_along_sequence(
    const at::Tensor& x, const Region& region, const std::string& key) {
  dist::ProcessGroup& g = *region.group;
  const int64_t n = g.size();
  count(key, (n - 1) * x.numel() * x.element_size());
  auto sizes = x.sizes().vec();
  const at::Tensor stacked = g.all_gather(x.contiguous());  // (n, B, T/n, ..)
  sizes[1] *= n;
  return stacked.movedim(0, 1).reshape(sizes);
}

/// The reduce-scatter along the sequence: (B, T, ...) -> (B, T / n, ...).
at::Tensor scatter_along_sequence(
    const at::Tensor& x, const Region& region, const std::string& key) {
  dist::ProcessGroup& g = *region.group;
  const int64_t n = g.size();
  auto sizes = x.sizes().vec();
  TORCH_CHECK(
      sizes.size() >= 2 && sizes[1] % n == 0,
      "[tensor_parallel] ",
      region.name,
      ": a sequence of ",
      sizes.size() >= 2 ? sizes[1] : 0,
      " positions; allowed: a multiple of the tp degree ",
      n);
  auto split = sizes;
  split[1] = sizes[1] / n;
  split.insert(split.begin() + 1, n);  // (B, n, T/n, ...)
  // Chunk r (positions [r T / n, (r + 1) T / n)) contiguous at [r m, ..).
  const at::Tensor chunks = x.reshape(split).movedim(1, 0).contiguous();
  sizes[1] /= n;
  at::Tensor out = at::empty(sizes, x.options());
  count(key, (n - 1) * out.numel() * out.element_size());
  g.reduce_scatter(out, chunks);
  return out;
}

const Region& region_of(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<const Region*>(ctx->saved_data["region"].toInt());
}

/// The two sequence-parallel regions, each the other's backward: `gather`
/// all-gathers the sequence forward and reduce-scatters the gradient,
/// otherwise the reverse. `enter` / `leave` name the side of the module.
class SequenceRegion : public torch::autograd::Function<SequenceRegion> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& x,
      int64_t region_ptr,
      bool gather) {
    ctx->saved_data["region"] = region_ptr;
    ctx->saved_data["gather"] = gather;
    return run(*reinterpret_cast<const Region*>(region_ptr), x, gather, false);
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const bool gather = ctx->saved_data["gather"].toBool();
    return {
        run(region_of(ctx), grads[0], !gather, true),
        at::Tensor(),
        at::Tensor()};
  }

 private:
  /// The collective `gather` names on `x`, labelled by the module side
  /// (the gathering region is its entry) and the direction.
  static at::Tensor run(
      const Region& region, const at::Tensor& x, bool gather, bool backward) {
    const bool enter = gather != backward;
    const std::string side = enter ? "enter" : "leave";
    const std::string key =
        region.name + " " + side + (backward ? " backward" : " forward");
    return named(
        region,
        side + (backward ? " backward " : " ") +
            (gather ? "all-gather" : "reduce-scatter"),
        [&] {
          return gather ? gather_along_sequence(x, region, key)
                        : scatter_along_sequence(x, region, key);
        });
  }
};

}  // namespace

at::Tensor gather_sequence(const at::Tensor& x, const Region& region) {
  return SequenceRegion::apply(
      x, reinterpret_cast<int64_t>(&region), /*gather=*/true);
}

at::Tensor reduce_scatter_sequence(const at::Tensor& x, const Region& region) {
  return SequenceRegion::apply(
      x, reinterpret_cast<int64_t>(&region), /*gather=*/false);
}

at::Tensor all_reduce_gradient(const at::Tensor& grad, const Region& region) {
  return named(region, "gradient all-reduce", [&] {
    const int64_t n = region.group->size();
    at::Tensor sum = grad.clone();
    count(
        region.name + " gradient",
        2 * (n - 1) * sum.numel() * sum.element_size() / n);
    region.group->all_reduce(sum);
    return sum;
  });
}

namespace {

/// Forward: the sum over the region's ranks; backward: the gradient as it
/// is (each rank backpropagates the same replicated loss into its own
/// addend).
class SumOverRanks : public torch::autograd::Function<SumOverRanks> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext*,
      const at::Tensor& x,
      int64_t region_ptr) {
    const Region& region = *reinterpret_cast<const Region*>(region_ptr);
    return named(region, "sum", [&] {
      const int64_t n = region.group->size();
      at::Tensor sum = x.contiguous().clone();
      count(
          region.name + " sum",
          2 * (n - 1) * sum.numel() * sum.element_size() / n);
      region.group->all_reduce(sum);
      return sum;
    });
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext*, torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor sum_over_ranks(const at::Tensor& x, const Region& region) {
  return SumOverRanks::apply(x, reinterpret_cast<int64_t>(&region));
}

std::map<std::string, Traffic> traffic() {
  return traffic_log().snapshot();
}

void reset_traffic() {
  traffic_log().reset();
}

}  // namespace baton::tensor_parallel
