// The body of attention_kernel.h's head kernels, included once per
// instruction set by attention_kernel_<isa>.cpp with
// BATON_ATTENTION_ISA_NS naming the namespace, BATON_ATTENTION_TILE the
// chunks a product holds in registers, and the file's compile flags
// choosing the instructions. Written on GCC's vector types of 16 floats,
// which each file's flags lower to its registers.
//
// Everything here but kKernels has internal linkage, and nothing uses a
// standard-library template: an inline function with external linkage,
// compiled in each of these files with different instruction sets, would
// be merged by the linker into one copy, and the baseline kernel could end
// up calling AVX-512 code.

#if !defined(BATON_ATTENTION_ISA_NS) || !defined(BATON_ATTENTION_TILE)
#error "define BATON_ATTENTION_ISA_NS and BATON_ATTENTION_TILE first"
#endif

#include <cstdint>
#include <cstring>

#include "models/common/attention_kernel_isa.h"

namespace baton::models::attention_kernel::BATON_ATTENTION_ISA_NS {

namespace {

// Vec, load, store and exp_nonpositive, with this file's linkage.
#include "models/common/vector_math_impl.h"

/// A chunk of keys or of head columns is one Vec.
static_assert(kLanes == kChunk);
constexpr int64_t kRows = kGroupRows;

float lane_sum(Vec v) {
  float sum = 0.0f;
  for (int64_t w = 0; w < kLanes; ++w) {
    sum += v[w];
  }
  return sum;
}

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

int64_t min_of(int64_t a, int64_t b) {
  return a < b ? a : b;
}

/// A head's sizes with the sequence and head columns padded to whole
/// chunks.
struct Dims {
  int64_t T;
  int64_t D;
  int64_t Tp;
  int64_t Dp;
};

Dims dims_of(int64_t seq_len, int64_t head_dim) {
  return {
      seq_len, head_dim, round_up(seq_len, kLanes), round_up(head_dim, kLanes)};
}

/// (n, D) rows -> (rows_out, Dp), zero beyond n rows and D columns.
void pad_rows(
    const float* src, int64_t n, const Dims& d, int64_t rows_out, float* dst) {
  std::memset(dst, 0, sizeof(float) * rows_out * d.Dp);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * d.Dp, src + i * d.D, sizeof(float) * d.D);
  }
}

/// (T, D) rows -> transposed (Dp, Tp), zero-padded.
void transpose_pad(const float* src, const Dims& d, float* dst) {
  std::memset(dst, 0, sizeof(float) * d.Dp * d.Tp);
  for (int64_t j = 0; j < d.T; ++j) {
    for (int64_t c = 0; c < d.D; ++c) {
      dst[c * d.Tp + j] = src[j * d.D + c];
    }
  }
}

/// Chunks of keys (in rows_times_columns) or of head columns (in the other
/// two products) held in registers at once beside the group's rows: as
/// many as the ISA's registers hold without spilling.
constexpr int64_t kTile = BATON_ATTENTION_TILE;

/// Calls tile.template operator()<chunks>(at) over [0, end) in whole
/// chunks: kTile chunks at a time, then one at a time.
template <class Tile>
void over_chunks(int64_t end, const Tile& tile) {
  int64_t at = 0;
  for (; at + kTile * kLanes <= end; at += kTile * kLanes) {
    tile.template operator()<kTile>(at);
  }
  for (; at < end; at += kLanes) {
    tile.template operator()<1>(at);
  }
}

/// out[r][j] = sum_c a[i0 + r][c] bt[c][j] over `chunks` chunks of keys
/// from j0. One load of each chunk of bt serves the group's rows.
template <int64_t chunks>
void rows_times_columns_tile(
    const float* rows,
    const float* bt,
    const Dims& d,
    int64_t j0,
    float* out,
    int64_t stride) {
  Vec acc[kRows][chunks];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t n = 0; n < chunks; ++n) {
      acc[r][n] = Vec{};
    }
  }
  for (int64_t c = 0; c < d.Dp; ++c) {
    Vec b[chunks];
    for (int64_t n = 0; n < chunks; ++n) {
      b[n] = load(bt + c * d.Tp + j0 + n * kLanes);
    }
    for (int64_t r = 0; r < kRows; ++r) {
      const float ar = rows[r * d.Dp + c];
      for (int64_t n = 0; n < chunks; ++n) {
        acc[r][n] += ar * b[n];
      }
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t n = 0; n < chunks; ++n) {
      store(out + r * stride + j0 + n * kLanes, acc[r][n]);
    }
  }
}

/// out[r][j] = sum_c a[i0 + r][c] bt[c][j] for the group's kRows rows of
/// a (Tp, Dp) and the columns j < jend of bt (Dp, Tp), whole chunks.
/// out: (kRows, stride).
void rows_times_columns(
    const float* a,
    const float* bt,
    const Dims& d,
    int64_t i0,
    int64_t jend,
    float* out,
    int64_t stride) {
  const float* rows = a + i0 * d.Dp;
  over_chunks(jend, [&]<int64_t chunks>(int64_t j0) {
    rows_times_columns_tile<chunks>(rows, bt, d, j0, out, stride);
  });
}

/// Turns the group's scores s (kRows, width) into causal probabilities:
/// row r (query i0 + r) over keys 0 .. i0 + r, zero after them; rows at or
/// past `rows` all zero.
void softmax_rows(float* s, int64_t i0, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = s + r * width;
    if (r >= rows) {
      std::memset(row, 0, sizeof(float) * width);
      continue;
    }
    const int64_t len = i0 + r + 1;
    const int64_t len_p = round_up(len, kLanes);
    for (int64_t j = len; j < len_p; ++j) {
      row[j] = -__builtin_inff();
    }
    Vec lane_max = load(row);
    for (int64_t j0 = kLanes; j0 < len_p; j0 += kLanes) {
      const Vec x = load(row + j0);
      lane_max = x > lane_max ? x : lane_max;
    }
    float m = lane_max[0];
    for (int64_t w = 1; w < kLanes; ++w) {
      m = lane_max[w] > m ? lane_max[w] : m;
    }
    Vec sums = {};
    for (int64_t j0 = 0; j0 < len_p; j0 += kLanes) {
      const Vec e = exp_nonpositive(load(row + j0) - m);
      store(row + j0, e);
      sums += e;
    }
    const float inv = 1.0f / lane_sum(sums);
    for (int64_t j0 = 0; j0 < len_p; j0 += kLanes) {
      store(row + j0, load(row + j0) * inv);
    }
    for (int64_t j = len; j < width; ++j) {
      row[j] = 0.0f;
    }
  }
}

/// out[r][c] = sum_{j < jend} p[r][j] v[j][c] over `chunks` chunks of
/// head columns from c0.
template <int64_t chunks>
void probs_times_rows_tile(
    const float* p,
    int64_t stride,
    const float* v,
    const Dims& d,
    int64_t jend,
    int64_t c0,
    float* out) {
  // With one chunk, two sets of sums, for even and odd keys: each sum then
  // waits on its own previous FMA only every other key. With more, the
  // chunks' sums already overlap (and a second set would not fit in the
  // registers).
  constexpr int64_t sets = chunks == 1 ? 2 : 1;
  Vec acc[sets][kRows][chunks];
  for (int64_t e = 0; e < sets; ++e) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t n = 0; n < chunks; ++n) {
        acc[e][r][n] = Vec{};
      }
    }
  }
  const auto add_key = [&](Vec(&sums)[kRows][chunks], int64_t j) {
    Vec vj[chunks];
    for (int64_t n = 0; n < chunks; ++n) {
      vj[n] = load(v + j * d.Dp + c0 + n * kLanes);
    }
    for (int64_t r = 0; r < kRows; ++r) {
      const float pr = p[r * stride + j];
      for (int64_t n = 0; n < chunks; ++n) {
        sums[r][n] += pr * vj[n];
      }
    }
  };
  int64_t j = 0;
  for (; j + sets <= jend; j += sets) {
    for (int64_t e = 0; e < sets; ++e) {
      add_key(acc[e], j + e);
    }
  }
  for (; j < jend; ++j) {
    add_key(acc[0], j);
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t n = 0; n < chunks; ++n) {
      Vec sum = acc[0][r][n];
      for (int64_t e = 1; e < sets; ++e) {
        sum += acc[e][r][n];
      }
      store(out + r * d.Dp + c0 + n * kLanes, sum);
    }
  }
}

/// out[r][c] = sum_{j < jend} p[r][j] v[j][c] for the group's rows.
/// p: (kRows, stride), v: (>= jend, Dp), out: (kRows, Dp).
void probs_times_rows(
    const float* p,
    int64_t stride,
    const float* v,
    const Dims& d,
    int64_t jend,
    float* out) {
  over_chunks(d.Dp, [&]<int64_t chunks>(int64_t c0) {
    probs_times_rows_tile<chunks>(p, stride, v, d, jend, c0, out);
  });
}

/// acc[j][c] += sum_r coef[r][j] rows[r][c] for j < jend over `chunks`
/// chunks of head columns from c0.
template <int64_t chunks>
void accumulate_rows_tile(
    const float* coef,
    int64_t stride,
    const float* rows,
    const Dims& d,
    int64_t jend,
    int64_t c0,
    float* acc) {
  Vec x[kRows][chunks];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t n = 0; n < chunks; ++n) {
      x[r][n] = load(rows + r * d.Dp + c0 + n * kLanes);
    }
  }
  for (int64_t j = 0; j < jend; ++j) {
    float* dst = acc + j * d.Dp + c0;
    Vec sum[chunks];
    for (int64_t n = 0; n < chunks; ++n) {
      sum[n] = load(dst + n * kLanes);
    }
    for (int64_t r = 0; r < kRows; ++r) {
      const float cr = coef[r * stride + j];
      for (int64_t n = 0; n < chunks; ++n) {
        sum[n] += cr * x[r][n];
      }
    }
    for (int64_t n = 0; n < chunks; ++n) {
      store(dst + n * kLanes, sum[n]);
    }
  }
}

/// acc[j] += sum_r coef[r][j] rows[r] for j < jend: the keys' gradients
/// from one group of query rows. coef: (kRows, stride), rows: (kRows, Dp),
/// acc: (>= jend, Dp).
void accumulate_rows(
    const float* coef,
    int64_t stride,
    const float* rows,
    const Dims& d,
    int64_t jend,
    float* acc) {
  over_chunks(d.Dp, [&]<int64_t chunks>(int64_t c0) {
    accumulate_rows_tile<chunks>(coef, stride, rows, d, jend, c0, acc);
  });
}

/// Copies `rows` rows of a (rows, Dp) buffer to rows i0 .. i0 + rows of a
/// (T, D) tensor.
void store_rows(
    const float* src, int64_t i0, int64_t rows, const Dims& d, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* from = src + r * d.Dp;
    float* to = dst + (i0 + r) * d.D;
    int64_t c = 0;
    for (; c + kLanes <= d.D; c += kLanes) {
      store(to + c, load(from + c));
    }
    for (; c < d.D; ++c) {
      to[c] = from[c];
    }
  }
}

void head_forward(
    const float* q,
    const float* k,
    const float* v,
    int64_t seq_len,
    int64_t head_dim,
    float* out,
    float* probs,
    float* scratch) {
  const Dims d = dims_of(seq_len, head_dim);
  float* qp = scratch;           // (Tp, Dp)
  float* kt = qp + d.Tp * d.Dp;  // (Dp, Tp)
  float* vp = kt + d.Dp * d.Tp;  // (T, Dp)
  float* o = vp + d.T * d.Dp;    // (kRows, Dp)
  float* s = o + kRows * d.Dp;   // (kRows, Tp) when probs is null
  pad_rows(q, d.T, d, d.Tp, qp);
  transpose_pad(k, d, kt);
  pad_rows(v, d.T, d, d.T, vp);
  for (int64_t i0 = 0; i0 < d.T; i0 += kRows) {
    const int64_t rows = min_of(kRows, d.T - i0);
    const int64_t jend = i0 + rows;  // the group sees keys 0 .. jend - 1
    const int64_t width = round_up(jend, kLanes);
    // The group's probabilities are written where the backward reads them.
    float* p = probs != nullptr ? probs : s;
    rows_times_columns(qp, kt, d, i0, jend, p, width);
    softmax_rows(p, i0, rows, width);
    probs_times_rows(p, width, vp, d, jend, o);
    store_rows(o, i0, rows, d, out);
    if (probs != nullptr) {
      probs += kRows * width;
    }
  }
}

void head_backward(
    const float* q,
    const float* k,
    const float* v,
    const float* probs,
    const float* gout,
    int64_t seq_len,
    int64_t head_dim,
    float* gq,
    float* gk,
    float* gv,
    float* scratch) {
  const Dims d = dims_of(seq_len, head_dim);
  float* qp = scratch;             // (Tp, Dp)
  float* kp = qp + d.Tp * d.Dp;    // (T, Dp)
  float* kt = kp + d.T * d.Dp;     // (Dp, Tp), to recompute the probabilities
  float* vt = kt + d.Dp * d.Tp;    // (Dp, Tp)
  float* gop = vt + d.Dp * d.Tp;   // (Tp, Dp)
  float* gkp = gop + d.Tp * d.Dp;  // (T, Dp)
  float* gvp = gkp + d.T * d.Dp;   // (T, Dp)
  float* gqr = gvp + d.T * d.Dp;   // (kRows, Dp)
  float* ds = gqr + kRows * d.Dp;  // (kRows, Tp)
  float* s = ds + kRows * d.Tp;    // (kRows, Tp) when probs is null
  pad_rows(q, d.T, d, d.Tp, qp);
  pad_rows(k, d.T, d, d.T, kp);
  if (probs == nullptr) {
    transpose_pad(k, d, kt);
  }
  transpose_pad(v, d, vt);
  pad_rows(gout, d.T, d, d.Tp, gop);
  std::memset(gkp, 0, sizeof(float) * d.T * d.Dp);
  std::memset(gvp, 0, sizeof(float) * d.T * d.Dp);
  for (int64_t i0 = 0; i0 < d.T; i0 += kRows) {
    const int64_t rows = min_of(kRows, d.T - i0);
    const int64_t jend = i0 + rows;
    const int64_t width = round_up(jend, kLanes);
    const float* p = probs;
    if (probs == nullptr) {
      rows_times_columns(qp, kt, d, i0, jend, s, width);
      softmax_rows(s, i0, rows, width);
      p = s;
    } else {
      probs += kRows * width;
    }
    // dP = gout v^T, then dS = P (dP - rowsum(P dP)): the softmax's
    // backward. P is zero past each row's last key, so dS is too.
    rows_times_columns(gop, vt, d, i0, jend, ds, width);
    for (int64_t r = 0; r < kRows; ++r) {
      const float* pr = p + r * width;
      float* dr = ds + r * width;
      Vec dots = {};
      for (int64_t j0 = 0; j0 < width; j0 += kLanes) {
        dots += load(pr + j0) * load(dr + j0);
      }
      const float dot = lane_sum(dots);
      for (int64_t j0 = 0; j0 < width; j0 += kLanes) {
        store(dr + j0, load(pr + j0) * (load(dr + j0) - dot));
      }
    }
    probs_times_rows(ds, width, kp, d, jend, gqr);  // gq = dS k
    store_rows(gqr, i0, rows, d, gq);
    accumulate_rows(ds, width, qp + i0 * d.Dp, d, jend, gkp);  // gk += dS^T q
    accumulate_rows(p, width, gop + i0 * d.Dp, d, jend, gvp);  // gv += P^T go
  }
  store_rows(gkp, 0, d.T, d, gk);
  store_rows(gvp, 0, d.T, d, gv);
}

}  // namespace

// Declared extern in attention_kernel_isa.h: the one name each file exports.
const HeadKernels kKernels{head_forward, head_backward};

}  // namespace baton::models::attention_kernel::BATON_ATTENTION_ISA_NS
