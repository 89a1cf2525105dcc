// The body of swiglu_kernel.h's kernels, included once per instruction set
// by swiglu_kernel_<isa>.cpp with BATON_SWIGLU_ISA_NS naming the namespace
// and the file's compile flags choosing the instructions. Internal linkage
// throughout, as in attention_kernel_impl.h.

#ifndef BATON_SWIGLU_ISA_NS
#error "define BATON_SWIGLU_ISA_NS first"
#endif

#include <cstdint>

#include "models/common/swiglu_kernel.h"

namespace baton::models::swiglu_kernel::BATON_SWIGLU_ISA_NS {

namespace {

#include "models/common/vector_math_impl.h"

/// sigmoid(x) from exp of a non-positive argument only, so that no lane
/// overflows: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below.
Vec sigmoid(Vec x) {
  const Vec e = exp_nonpositive(x < 0.0f ? x : -x);
  const Vec one = Vec{} + 1.0f;
  return (x < 0.0f ? e : one) / (one + e);
}

/// The last n % kLanes elements go through a zero-padded vector.
template <class Body>
void over_vectors(int64_t n, const Body& body) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    body(i, kLanes);
  }
  if (i < n) {
    body(i, n - i);
  }
}

/// `count` floats from p into a vector, zero beyond them.
Vec load_part(const float* p, int64_t count) {
  if (count == kLanes) {
    return load(p);
  }
  Vec v{};
  for (int64_t w = 0; w < count; ++w) {
    v[w] = p[w];
  }
  return v;
}

void store_part(float* p, Vec v, int64_t count) {
  if (count == kLanes) {
    store(p, v);
    return;
  }
  for (int64_t w = 0; w < count; ++w) {
    p[w] = v[w];
  }
}

void forward(const float* a, const float* b, float* out, int64_t n) {
  over_vectors(n, [&](int64_t i, int64_t count) {
    const Vec x = load_part(a + i, count);
    store_part(out + i, x * sigmoid(x) * load_part(b + i, count), count);
  });
}

/// With s = sigmoid(a): d silu(a) / da = s (1 + a (1 - s)).
void backward(
    const float* a,
    const float* b,
    const float* g,
    float* ga,
    float* gb,
    int64_t n) {
  over_vectors(n, [&](int64_t i, int64_t count) {
    const Vec x = load_part(a + i, count);
    const Vec s = sigmoid(x);
    const Vec gi = load_part(g + i, count);
    store_part(gb + i, gi * x * s, count);
    store_part(
        ga + i,
        gi * load_part(b + i, count) * s * (1.0f + x * (1.0f - s)),
        count);
  });
}

}  // namespace

// Declared extern in swiglu_kernel.cpp: the one name each file exports.
extern const Kernels kKernels;
const Kernels kKernels{forward, backward};

}  // namespace baton::models::swiglu_kernel::BATON_SWIGLU_ISA_NS
