// GCC vectors of 16 floats and the arithmetic the CPU kernels share, for
// the kernel bodies compiled once per instruction set
// (attention_kernel_impl.h, swiglu_kernel_impl.h). Included inside an
// anonymous namespace of the file's instruction-set namespace, so that each
// set gets its own copy with internal linkage (see attention_kernel_impl.h
// on why nothing here may be merged across sets). Only built-in types: no
// standard-library header may land inside that namespace.

/// One vector of 16 floats: one AVX-512 register, two AVX2 ones, four SSE
/// ones, as the file's flags lower it.
constexpr long kLanes = 16;

using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using IntVec = int __attribute__((vector_size(kLanes * sizeof(int))));
/// The same, at any float's address.
using UnalignedVec = float __attribute__((
    vector_size(kLanes * sizeof(float)), aligned(alignof(float)), may_alias));

Vec load(const float* p) {
  return *reinterpret_cast<const UnalignedVec*>(p);
}

void store(float* p, Vec v) {
  *reinterpret_cast<UnalignedVec*>(p) = v;
}

/// exp(x) for x <= 0 (softmax's shifted scores), Cephes' polynomial with
/// about 1 ulp of error; -inf and anything below -87 give ~1e-38, which
/// the callers zero where it stands for a masked key.
Vec exp_nonpositive(Vec x) {
  x = x < -87.0f ? Vec{} - 87.0f : x;
  // Round x / ln 2 to the nearest integer n in float arithmetic.
  const Vec n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  Vec r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  Vec p = Vec{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const IntVec bits = (__builtin_convertvector(n, IntVec) + 127) << 23;
  return p * (Vec)bits;  // a bit cast between vectors of one size
}
