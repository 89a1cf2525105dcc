#pragma once

// bf16 mixed precision (training.mixed_precision_param / _reduce): float32
// master weights and optimizer state, forward and backward in the param
// dtype, gradients reduced in the reduce dtype, the loss in float32.
//
// Without fully_shard the `mixed_precision` applier casts a part's weights
// once per step (models/param_cast.h): its root wrapper makes the part's
// ParamCast current for the forward, and the GradientSync it attaches drops
// the casts after the step's last backward. With fully_shard the gather
// casts: the weights are whole in the param dtype while a unit computes, so
// the casts find them already cast.

#include <c10/core/Device.h>

#include <functional>
#include <string>

#include "parallel/applier.h"

namespace baton {

struct TrainingConfig;

/// training.mixed_precision_* resolved for a device, and why.
struct MixedPrecisionChoice {
  MixedPrecision dtypes;
  /// For the start-up log: how `auto` was decided, or that it was set.
  std::string why;
};

/// bf16 matmul speed over float32's on one CPU core, measured on a
/// model-sized product (1024 x 256 by 256 x 1024, the best of 5 runs of
/// each, interleaved, on one ATen thread, restored after): above 1, bf16 is
/// faster. Per core, so that the answer does not depend on the run's
/// threads: with Debian's OpenBLAS, whose float32 products ran on its own
/// threads, a comparison on the run's threads moved from 1.03x to 1.48x
/// between two starts on one Zen 4 (bench/notes.md).
double measure_bf16_matmul_speed();

/// What `auto` asks of bf16's matmul on the CPU over float32's.
constexpr double kAutoBf16MinSpeedup = 1.2;

/// The dtypes of `training` on `device`: `auto` is bfloat16 on CUDA and, on
/// the CPU, bfloat16 only when `bf16_speed()` (a probe, run only then)
/// says its matmul is at least kAutoBf16MinSpeedup times float32's.
MixedPrecisionChoice resolve_mixed_precision(
    const TrainingConfig& training,
    const c10::Device& device,
    const std::function<double()>& bf16_speed = measure_bf16_matmul_speed);

/// The string form of a mixed-precision dtype: "bfloat16", "float32".
std::string mixed_precision_name(at::ScalarType dtype);

/// The `mixed_precision` applier: when the context's param dtype is not
/// float32, the part's forwards read their weights through a ParamCast
/// made current by a root wrapper (and cast a floating input, a pipeline
/// stage's activations, to that dtype), and a GradientSync attached to the
/// part drops the step's casts after its last backward (finish,
/// reduce_now). Does nothing with a float32 param dtype.
class MixedPrecisionApplier final : public Applier {
 public:
  void apply(ModelPart& part, const ParallelContext& context) override;
};

}  // namespace baton
