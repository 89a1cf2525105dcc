#include "models/common/attention_kernel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/common/attention_kernel_isa.h"

namespace baton::models::attention_kernel {

bool isa_supported(Isa isa) {
#if !defined(__x86_64__)
  // attention_kernel_avx*.cpp are built without their flags off x86.
  return isa == Isa::kBaseline;
#else
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      // The flags attention_kernel_avx512.cpp is built with.
      return __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
  }
  return false;
#endif
}

Isa best_isa() {
  static const Isa best = [] {
    for (const Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
      if (isa_supported(isa)) {
        return isa;
      }
    }
    return Isa::kBaseline;
  }();
  return best;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

namespace {

int64_t whole_chunks(int64_t n) {
  return (n + kChunk - 1) / kChunk * kChunk;
}

}  // namespace

int64_t scratch_floats(int64_t seq_len, int64_t head_dim) {
  // attention_kernel_impl.h's layouts: at most seven (Tp, Dp) buffers and
  // a group's rows over every key and over the head's columns.
  const int64_t tp = whole_chunks(seq_len), dp = whole_chunks(head_dim);
  return 7 * tp * dp + 2 * kGroupRows * tp + kGroupRows * dp;
}

int64_t probs_floats(int64_t seq_len) {
  int64_t floats = 0;
  for (int64_t i0 = 0; i0 < seq_len; i0 += kGroupRows) {
    const int64_t jend = std::min(i0 + kGroupRows, seq_len);
    floats += kGroupRows * whole_chunks(jend);
  }
  return floats;
}

const HeadKernels& head_kernels(Isa isa) {
  static const HeadKernels* const kernels[] = {
      &baseline::kKernels, &avx2::kKernels, &avx512::kKernels};
  if (!isa_supported(isa)) {
    throw std::invalid_argument(
        std::string("[attention] this CPU does not run the ") + isa_name(isa) +
        " kernels; it runs up to " + isa_name(best_isa()));
  }
  return *kernels[static_cast<int>(isa)];
}

const HeadKernels& head_kernels() {
  static const HeadKernels& best = head_kernels(best_isa());
  return best;
}

}  // namespace baton::models::attention_kernel
