// The dist facade's groups: ProcessGroup's collectives and point-to-point
// operations over c10d's Gloo and NCCL backends, each recorded in the flight
// recorder, and the Work that waits for one (process_group_detail.h).

#include "parallel/dist/process_group.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>

#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/process_group_detail.h"

namespace baton::dist {

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // summed, then divided here
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

struct Work::Impl {
  std::string what;
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> then;
  std::shared_ptr<Core> runtime;
  /// The group's own timeout (0: the runtime's current one).
  Millis timeout{0};
  uint64_t flight_id = 0;
  bool done = false;
};

Work::Work() = default;
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

void Work::wait() {
  if (!impl_ || impl_->done) {
    return;
  }
  if (impl_->work) {
    const Millis timeout =
        impl_->timeout.count() > 0 ? impl_->timeout : impl_->runtime->timeout();
    std::string error;
    try {
      impl_->work->wait(timeout);
    } catch (const std::exception& e) {
      error = error_text(e);
    }
    if (!error.empty()) {
      impl_->done = true;
      FlightRecorder::process().finish(impl_->flight_id, FlightState::kFailed);
      const std::string what = impl_->what + " failed (timeout " +
                               seconds_text(timeout) + "): " + error;
      throw CommError(
          "[dist] " + what + "; " + diagnose_within(impl_->runtime) +
          impl_->runtime->flight_failure(what));
    }
    FlightRecorder::process().finish(impl_->flight_id, FlightState::kCompleted);
  }
  impl_->done = true;
  if (impl_->then) {
    impl_->then();
  }
}

bool Work::completed() const {
  return !impl_ || impl_->done || !impl_->work || impl_->work->isCompleted();
}

Work ProcessGroup::Impl::make_work(
    const std::string& op, Started started, std::function<void()> then) const {
  auto impl = std::make_unique<Work::Impl>();
  impl->what = describe(op);
  impl->work = std::move(started.work);
  impl->flight_id = started.flight_id;
  impl->then = std::move(then);
  impl->runtime = runtime;
  impl->timeout = timeout;
  return Work(std::move(impl));
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::single(
    const std::string& name, int64_t global_rank) {
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->global_ranks = {global_rank};
  return std::make_shared<ProcessGroup>(std::move(impl));
}

int64_t ProcessGroup::rank() const {
  return impl_->rank;
}
int64_t ProcessGroup::size() const {
  return impl_->size();
}
const std::string& ProcessGroup::name() const {
  return impl_->name;
}
const std::vector<int64_t>& ProcessGroup::global_ranks() const {
  return impl_->global_ranks;
}
std::string ProcessGroup::backend() const {
  return impl_->backend;
}

Work ProcessGroup::all_reduce_async(at::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument(
        "[ProcessGroup] all_reduce AVG: a " +
        std::string(c10::toString(tensor.scalar_type())) +
        " tensor; allowed: floating-point tensors (or SUM, MIN, MAX)");
  }
  if (impl_->local()) {
    return Work();
  }
  // bf16 and fp16 are reduced in their own dtype (half the bytes of a
  // float32 copy), on Gloo as on NCCL.
  at::Tensor buffer = tensor;
  const int64_t size = impl_->size();
  std::function<void()> then;
  if (op == ReduceOp::kAvg) {
    then = [buffer, size]() mutable { buffer.div_(static_cast<double>(size)); };
  }
  const uint64_t id = impl_->record("all_reduce", buffer);
  auto work = impl_->start("all_reduce", id, [&] {
    std::vector<at::Tensor> tensors{buffer};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    return impl_->pg->allreduce(tensors, opts);
  });
  return impl_->make_work("all_reduce", std::move(work), std::move(then));
}

void ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}

void ProcessGroup::broadcast(at::Tensor& tensor, int64_t root) {
  if (root < 0 || root >= size()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() + "] broadcast root " + std::to_string(root) +
        " outside a group of " + std::to_string(size()));
  }
  if (impl_->local()) {
    return;
  }
  const uint64_t id = impl_->record("broadcast", tensor);
  auto work = impl_->start("broadcast", id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return impl_->pg->broadcast(tensors, opts);
  });
  impl_->make_work("broadcast", std::move(work)).wait();
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& tensor) {
  std::vector<int64_t> shape{size()};
  for (const auto s : tensor.sizes()) {
    shape.push_back(s);
  }
  at::Tensor out = at::empty(shape, tensor.options());
  if (impl_->local()) {
    out[0].copy_(tensor);
    return out;
  }
  at::Tensor in = tensor.contiguous().view({-1});
  const uint64_t id = impl_->record("all_gather", in);
  auto work = impl_->start("all_gather", id, [&] {
    at::Tensor flat = out.view({-1});
    return impl_->pg->_allgather_base(flat, in);
  });
  impl_->make_work("all_gather", std::move(work)).wait();
  return out;
}

Work ProcessGroup::all_gather_into_async(
    at::Tensor& output, const at::Tensor& input) {
  const int64_t n = input.numel();
  if (output.numel() != n * size() || !output.is_contiguous()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() +
        "] all_gather_into output: " + std::to_string(output.numel()) +
        " elements" + (output.is_contiguous() ? "" : ", not contiguous") +
        "; allowed: contiguous, size (" + std::to_string(size()) +
        ") x input (" + std::to_string(n) + ")");
  }
  const at::Tensor flat_out = output.view({-1});
  if (impl_->local()) {
    flat_out.copy_(input.reshape({-1}));
    return Work();
  }
  at::Tensor in = input.contiguous().view({-1});
  const uint64_t id = impl_->record("all_gather_into", in);
  auto work = impl_->start("all_gather_into", id, [&] {
    at::Tensor out = flat_out;
    return impl_->pg->_allgather_base(out, in);
  });
  return impl_->make_work("all_gather_into", std::move(work), [keep = in] {});
}

void ProcessGroup::reduce_scatter(
    at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

namespace {

#ifdef USE_C10D_NCCL
/// NCCL's own reduce-scatter, into `output` (a contiguous copy if it is not
/// contiguous).
Work nccl_reduce_scatter(
    const ProcessGroup::Impl& impl,
    at::Tensor& output,
    const at::Tensor& input,
    ReduceOp op) {
  const int64_t ranks = impl.size();
  at::Tensor out = output.is_contiguous() ? output : output.contiguous();
  at::Tensor in = input.contiguous().view({-1});
  const uint64_t id = impl.record("reduce_scatter", in);
  auto work = impl.start("reduce_scatter", id, [&] {
    at::Tensor flat = out.view({-1});
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op == ReduceOp::kAvg ? ReduceOp::kSum : op);
    return impl.pg->_reduce_scatter_base(flat, in, opts);
  });
  return impl.make_work(
      "reduce_scatter",
      std::move(work),
      [output, out, in, op, ranks]() mutable {
        if (op == ReduceOp::kAvg) {
          out.div_(static_cast<double>(ranks));
        }
        if (out.data_ptr() != output.data_ptr()) {
          output.copy_(out);
        }
      });
}
#endif

/// Gloo: chunk r of every rank to rank r (all-to-all), then a local
/// reduction of the size() chunks received, in float32 for bf16 and fp16.
/// Not c10d's Gloo reduce-scatter, which is an all-reduce of the whole
/// input and a chunk of it: about twice the bytes a rank sends.
Work all_to_all_reduce_scatter(
    const ProcessGroup::Impl& impl,
    at::Tensor& output,
    const at::Tensor& input,
    ReduceOp op) {
  const int64_t ranks = impl.size();
  const int64_t n = output.numel();
  at::Tensor send = input.contiguous().view({-1});
  at::Tensor received = at::empty_like(send);
  const uint64_t id = impl.record("reduce_scatter", send);
  auto work = impl.start("reduce_scatter", id, [&] {
    std::vector<int64_t> equal_splits;
    c10d::AllToAllOptions opts;
    return impl.pg->alltoall_base(
        received, send, equal_splits, equal_splits, opts);
  });
  return impl.make_work(
      "reduce_scatter",
      std::move(work),
      [output, send, received, op, ranks, n]() mutable {
        const bool low = received.scalar_type() == at::kBFloat16 ||
                         received.scalar_type() == at::kHalf;
        const at::Tensor chunks =
            (low ? received.to(at::kFloat) : received).view({ranks, n});
        at::Tensor reduced;
        switch (op) {
          case ReduceOp::kSum:
            reduced = chunks.sum(0);
            break;
          case ReduceOp::kAvg:
            reduced = chunks.mean(0);
            break;
          case ReduceOp::kMax:
            reduced = std::get<0>(chunks.max(0));
            break;
          case ReduceOp::kMin:
            reduced = std::get<0>(chunks.min(0));
            break;
        }
        output.copy_(reduced.view(output.sizes()));
      });
}

}  // namespace

Work ProcessGroup::reduce_scatter_async(
    at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  const int64_t n = output.numel();
  if (input.numel() != n * size()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() + "] reduce_scatter input: " +
        std::to_string(input.numel()) + " elements; allowed: size (" +
        std::to_string(size()) + ") x output (" + std::to_string(n) + ")");
  }
  if (op == ReduceOp::kAvg && !at::isFloatingType(input.scalar_type())) {
    throw std::invalid_argument(
        "[ProcessGroup] reduce_scatter AVG: a " +
        std::string(c10::toString(input.scalar_type())) +
        " tensor; allowed: floating-point tensors (or SUM, MIN, MAX)");
  }
  if (impl_->local()) {
    output.copy_(input.reshape(output.sizes()));
    return Work();
  }
#ifdef USE_C10D_NCCL
  if (impl_->backend == "nccl") {
    return nccl_reduce_scatter(*impl_, output, input, op);
  }
#endif
  return all_to_all_reduce_scatter(*impl_, output, input, op);
}

Work ProcessGroup::all_to_all_async(
    at::Tensor& output,
    const at::Tensor& input,
    const std::vector<int64_t>& output_splits,
    const std::vector<int64_t>& input_splits) {
  const auto rows_of = [&](const std::vector<int64_t>& splits,
                           const at::Tensor& t,
                           const char* what) {
    if (splits.empty()) {
      if (t.dim() == 0 || t.size(0) % size() != 0) {
        throw std::invalid_argument(
            "[ProcessGroup " + name() + "] all_to_all " + what +
            ": equal splits of " + (t.dim() ? std::to_string(t.size(0)) : "0") +
            " rows; allowed: a multiple of the group's " +
            std::to_string(size()));
      }
      return;
    }
    int64_t sum = 0;
    for (const auto n : splits) {
      sum += n < 0 ? t.size(0) + 1 : n;  // a negative count never matches
    }
    if (static_cast<int64_t>(splits.size()) != size() || t.dim() == 0 ||
        sum != t.size(0)) {
      throw std::invalid_argument(
          "[ProcessGroup " + name() + "] all_to_all " + what +
          " splits: " + std::to_string(splits.size()) + " counts summing to " +
          std::to_string(sum) + " for " +
          (t.dim() ? std::to_string(t.size(0)) : "0") +
          " rows; allowed: one count >= 0 per member (" +
          std::to_string(size()) + "), summing to the rows");
    }
  };
  rows_of(input_splits, input, "input");
  rows_of(output_splits, output, "output");
  if (!output.is_contiguous()) {
    throw std::invalid_argument(
        "[ProcessGroup " + name() + "] all_to_all output: not contiguous");
  }
  if (impl_->local()) {
    output.copy_(input);
    return Work();
  }
  at::Tensor in = input.contiguous();
  const uint64_t id = impl_->record("all_to_all", in);
  auto work = impl_->start("all_to_all", id, [&] {
    std::vector<int64_t> out_splits = output_splits;
    std::vector<int64_t> in_splits = input_splits;
    c10d::AllToAllOptions opts;
    return impl_->pg->alltoall_base(output, in, out_splits, in_splits, opts);
  });
  return impl_->make_work("all_to_all", std::move(work), [keep = in] {});
}

void ProcessGroup::all_to_all(
    at::Tensor& output,
    const at::Tensor& input,
    const std::vector<int64_t>& output_splits,
    const std::vector<int64_t>& input_splits) {
  all_to_all_async(output, input, output_splits, input_splits).wait();
}

Work ProcessGroup::isend(const at::Tensor& tensor, int64_t dst, int64_t tag) {
  impl_->check_peer(dst, "send destination");
  TORCH_CHECK(
      tensor.is_contiguous(), "[ProcessGroup] send needs a contiguous tensor");
  const uint64_t id = impl_->record("send", tensor, dst, tag);
  auto work = impl_->start("send to rank " + std::to_string(dst), id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    return impl_->pg->send(
        tensors, static_cast<int>(dst), static_cast<int>(tag));
  });
  // Keep the tensor alive until the send is done.
  return impl_->make_work(
      "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) +
          ")",
      std::move(work),
      [keep = tensor] {});
}

Work ProcessGroup::irecv(at::Tensor& tensor, int64_t src, int64_t tag) {
  impl_->check_peer(src, "receive source");
  TORCH_CHECK(
      tensor.is_contiguous(), "[ProcessGroup] recv needs a contiguous tensor");
  const uint64_t id = impl_->record("recv", tensor, src, tag);
  auto work = impl_->start("recv from rank " + std::to_string(src), id, [&] {
    std::vector<at::Tensor> tensors{tensor};
    return impl_->pg->recv(
        tensors, static_cast<int>(src), static_cast<int>(tag));
  });
  return impl_->make_work(
      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) +
          ")",
      std::move(work));
}

void ProcessGroup::send(const at::Tensor& tensor, int64_t dst, int64_t tag) {
  isend(tensor, dst, tag).wait();
}

void ProcessGroup::recv(at::Tensor& tensor, int64_t src, int64_t tag) {
  irecv(tensor, src, tag).wait();
}

void ProcessGroup::barrier() {
  if (impl_->local()) {
    return;
  }
  const uint64_t id = impl_->record("barrier", at::Tensor());
  auto work = impl_->start("barrier", id, [&] { return impl_->pg->barrier(); });
  impl_->make_work("barrier", std::move(work)).wait();
}

}  // namespace baton::dist
