#include "parallel/mixed_precision.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>

#include "config/job_config.h"
#include "models/forward_state.h"
#include "models/param_cast.h"
#include "parallel/grad_sync.h"
#include "parallel/model_parts.h"

namespace baton {

namespace {

at::ScalarType dtype_named(const std::string& name) {
  return name == "bfloat16" ? at::kBFloat16 : at::kFloat;
}

/// Seconds of one product c = a b.
double matmul_s(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const auto start = std::chrono::steady_clock::now();
  at::mm_out(c, a, b);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// Makes the part's ParamCast current around its whole forward.
class CastAround final : public UnitWrapper {
 public:
  explicit CastAround(std::shared_ptr<ParamCast> cast)
      : cast_(std::move(cast)) {}

  at::Tensor forward(
      const std::function<at::Tensor(const at::Tensor&)>& run,
      const at::Tensor& input) override {
    ForwardState state = forward_state();
    state.cast = cast_.get();
    const ForwardStateGuard guard(state);
    return run(input.is_floating_point() ? input.to(cast_->dtype()) : input);
  }

 private:
  std::shared_ptr<ParamCast> cast_;
};

/// Drops the step's casts once its last backward has run, so the next
/// step casts the updated weights and no cast outlives its step.
class ReleaseCasts final : public GradientSync {
 public:
  explicit ReleaseCasts(std::shared_ptr<ParamCast> cast)
      : cast_(std::move(cast)) {}

  void prepare(bool /*sync*/) override {}
  void finish() override {
    cast_->clear();
  }
  void reduce_now() override {
    cast_->clear();
  }

 private:
  std::shared_ptr<ParamCast> cast_;
};

}  // namespace

double measure_bf16_matmul_speed() {
  c10::AutoGradMode no_grad(false);
  // One core: ATen's intra-op threads (which MKL's products run on too) set
  // to one, restored after. The count is the process's: rank threads
  // sharing a process probe one at a time, so that none restores another's
  // setting.
  static std::mutex one_probe_at_a_time;
  const std::lock_guard<std::mutex> lock(one_probe_at_a_time);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  double fp32 = 1e30, bf16 = 1e30;
  {
    const auto a = at::randn({1024, 256});
    const auto b = at::randn({256, 1024});
    const auto a16 = a.to(at::kBFloat16), b16 = b.to(at::kBFloat16);
    auto c = at::mm(a, b);
    auto c16 = at::mm(a16, b16);
    // Interleaved, so that a slow spell of the machine meets both; the
    // best of each.
    for (int i = 0; i < 5; ++i) {
      fp32 = std::min(fp32, matmul_s(a, b, c));
      bf16 = std::min(bf16, matmul_s(a16, b16, c16));
    }
  }
  at::set_num_threads(threads);
  return fp32 / bf16;
}

std::string mixed_precision_name(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16" : "float32";
}

MixedPrecisionChoice resolve_mixed_precision(
    const TrainingConfig& training,
    const c10::Device& device,
    const std::function<double()>& bf16_speed) {
  MixedPrecisionChoice choice;
  choice.dtypes.reduce = dtype_named(training.mixed_precision_reduce);
  if (training.mixed_precision_param != "auto") {
    choice.dtypes.param = dtype_named(training.mixed_precision_param);
    choice.why = "as set";
    return choice;
  }
  if (device.is_cuda()) {
    choice.dtypes.param = at::kBFloat16;
    choice.why = "auto on CUDA";
    return choice;
  }
  const double speed = bf16_speed();
  // A margin, so that a CPU where the two run about as fast does not flip
  // from one run to the next with the probe's noise.
  const bool faster = speed >= kAutoBf16MinSpeedup;
  choice.dtypes.param = faster ? at::kBFloat16 : at::kFloat;
  std::ostringstream why;
  why << std::fixed << std::setprecision(2)
      << "auto on the CPU: a bf16 matmul probe ran at " << speed
      << "x fp32's speed per core here";
  if (!faster) {
    why << ", under the " << kAutoBf16MinSpeedup
        << "x auto asks; set bfloat16 to use it anyway";
  }
  choice.why = why.str();
  return choice;
}

void MixedPrecisionApplier::apply(
    ModelPart& part, const ParallelContext& context) {
  const auto dtype = context.mixed_precision.param_cast();
  if (!dtype) {
    return;
  }
  auto cast = std::make_shared<ParamCast>(*dtype);
  part.module().wrap_unit("", std::make_shared<CastAround>(cast));
  part.grad_sync().add(std::make_shared<ReleaseCasts>(std::move(cast)));
}

}  // namespace baton
