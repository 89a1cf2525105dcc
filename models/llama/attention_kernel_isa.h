#pragma once

// The head kernels of each instruction set, compiled from
// attention_kernel_impl.h by attention_kernel_<isa>.cpp; attention_kernel.cpp
// chooses among them.

#include "models/llama/attention_kernel.h"

#define BATON_ATTENTION_DECLARE_ISA(ns)                                  \
  namespace baton::llama::attention_kernel::ns {                         \
  void head_forward(                                                     \
      const float* q,                                                    \
      const float* k,                                                    \
      const float* v,                                                    \
      int64_t seq_len,                                                   \
      int64_t head_dim,                                                  \
      float* out,                                                        \
      float* probs,                                                      \
      float* scratch);                                                   \
  void head_backward(                                                    \
      const float* q,                                                    \
      const float* k,                                                    \
      const float* v,                                                    \
      const float* probs,                                                \
      const float* gout,                                                 \
      int64_t seq_len,                                                   \
      int64_t head_dim,                                                  \
      float* gq,                                                         \
      float* gk,                                                         \
      float* gv,                                                         \
      float* scratch);                                                   \
  }

BATON_ATTENTION_DECLARE_ISA(baseline)
BATON_ATTENTION_DECLARE_ISA(avx2)
BATON_ATTENTION_DECLARE_ISA(avx512)

#undef BATON_ATTENTION_DECLARE_ISA
