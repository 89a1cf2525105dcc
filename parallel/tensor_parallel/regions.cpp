#include "parallel/tensor_parallel/regions.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <mutex>

#include "parallel/dist/process_group.h"

namespace baton::tensor_parallel {

namespace {

std::mutex& traffic_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, Traffic>& traffic_table() {
  static std::map<std::string, Traffic> t;
  return t;
}

void count(const std::string& key, int64_t bytes) {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  auto& t = traffic_table()[key];
  t.calls += 1;
  t.bytes += bytes;
}

/// Runs `op` under the region's name: a profiler range, and a CommError
/// that says which region and collective failed.
template <class Op>
at::Tensor named(
    const Region& region, const std::string& what, const Op& op) {
  const std::string label = "tensor_parallel " + region.name + " " + what;
  RECORD_FUNCTION(label, std::vector<c10::IValue>());
  try {
    return op();
  } catch (const dist::CommError& e) {
    throw dist::CommError(
        "[tensor_parallel] " + region.name + ": " + what + ": " + e.what());
  }
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

class GatherSequence : public torch::autograd::Function<GatherSequence> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& x,
      int64_t region_ptr) {
    ctx->saved_data["region"] = region_ptr;
    const Region& region = region_of(ctx);
    return named(region, "enter all-gather", [&] {
      return gather_along_sequence(x, region, region.name + " enter forward");
    });
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const Region& region = region_of(ctx);
    return {
        named(
            region,
            "enter backward reduce-scatter",
            [&] {
              return scatter_along_sequence(
                  grads[0], region, region.name + " enter backward");
            }),
        at::Tensor()};
  }
};

class ReduceScatterSequence
    : public torch::autograd::Function<ReduceScatterSequence> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& x,
      int64_t region_ptr) {
    ctx->saved_data["region"] = region_ptr;
    const Region& region = region_of(ctx);
    return named(region, "leave reduce-scatter", [&] {
      return scatter_along_sequence(x, region, region.name + " leave forward");
    });
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const Region& region = region_of(ctx);
    return {
        named(
            region,
            "leave backward all-gather",
            [&] {
              return gather_along_sequence(
                  grads[0], region, region.name + " leave backward");
            }),
        at::Tensor()};
  }
};

}  // namespace

at::Tensor gather_sequence(const at::Tensor& x, const Region& region) {
  return GatherSequence::apply(x, reinterpret_cast<int64_t>(&region));
}

at::Tensor reduce_scatter_sequence(const at::Tensor& x, const Region& region) {
  return ReduceScatterSequence::apply(x, reinterpret_cast<int64_t>(&region));
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

std::map<std::string, Traffic> traffic() {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  return traffic_table();
}

void reset_traffic() {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  traffic_table().clear();
}

}  // namespace baton::tensor_parallel
