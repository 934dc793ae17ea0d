/* quant_avx2.c - the row engines of quant.c compiled with -mavx2 -mfma
 * -mf16c (only called after tpu_ku_use_avx2() says so).
 *
 * A block's 32 weights become four vectors of 8 floats: the nibbles (or
 * int8s) are widened to int32 and converted exactly, multiplied with x in
 * float32, and the block's sum is scaled by d (plus m * sum(x) for Q4_1). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/quant.h"

static inline float qa_f16(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

/* The 32 weights of a block as integers in float: w[0..3] = weights
 * 0-7, 8-15, 16-23, 24-31. */
static inline void qa_nibbles(const uint8_t* qs, bool centred, __m256* w) {
  const __m128i m15 = _mm_set1_epi8(15);
  __m128i q = _mm_loadu_si128((const __m128i*)qs);
  __m128i lo = _mm_and_si128(q, m15);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), m15);
  if (centred) {
    const __m128i eight = _mm_set1_epi8(8);
    lo = _mm_sub_epi8(lo, eight);
    hi = _mm_sub_epi8(hi, eight);
  }
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

static inline void qa_int8s(const uint8_t* qs, __m256* w) {
  __m128i a = _mm_loadu_si128((const __m128i*)qs);
  __m128i b = _mm_loadu_si128((const __m128i*)(qs + 16));
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}

static inline __m256 qa_dot32(const __m256* w, const float* x) {
  __m256 t = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
  __m256 u = _mm256_mul_ps(w[2], _mm256_loadu_ps(x + 16));
  t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), t);
  u = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), u);
  return _mm256_add_ps(t, u);
}

static inline __m256 qa_sum32(const float* x) {
  __m256 a = _mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8));
  __m256 b = _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24));
  return _mm256_add_ps(a, b);
}

static inline float qa_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* dot(row of W, x) over nb blocks. */
static float qa_row_dot(int qtype, const uint8_t* p, const float* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 w[4];
  switch (qtype) {
    case TPU_QU_Q4_0:
      for (int64_t b = 0; b < nb; ++b, p += 18, x += 32) {
        qa_nibbles(p + 2, true, w);
        __m256 t = qa_dot32(w, x);
        if (b & 1)
          acc1 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p)), t, acc1);
        else
          acc0 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p)), t, acc0);
      }
      break;
    case TPU_QU_Q4_1:
      for (int64_t b = 0; b < nb; ++b, p += 20, x += 32) {
        qa_nibbles(p + 4, false, w);
        __m256 t = qa_dot32(w, x);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p)), t, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p + 2)), qa_sum32(x), acc1);
      }
      break;
    case TPU_QU_Q8_0:
      for (int64_t b = 0; b < nb; ++b, p += 34, x += 32) {
        qa_int8s(p + 2, w);
        __m256 t = qa_dot32(w, x);
        if (b & 1)
          acc1 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p)), t, acc1);
        else
          acc0 = _mm256_fmadd_ps(_mm256_set1_ps(qa_f16(p)), t, acc0);
      }
      break;
    default: break;
  }
  return qa_hsum(_mm256_add_ps(acc0, acc1));
}

/* ---- one row of x (decode) ----------------------------------------------------
 * x is first rearranged, once per call (quant.c), into the order in which the nibbles
 * come out of a cheap unpack: the block's 16 bytes broadcast to both halves
 * of a ymm register as dwords; nibble k (0..3) of lane i sits at bit
 * shift_k = 8k (lanes 0-3) or 8k + 4 (lanes 4-7), so lane i of vector k holds
 * weight kQaPerm[8k + i] of the block. The unpack does not shift it down:
 * vector k = dwords & (15 << shift_k), converted to float, is the weight times
 * 2^shift_k, and x is stored times 2^-shift_k (exact: powers of two) - one AND
 * and one conversion per vector. Vector 3 is shifted right by 24 first (it
 * would reach the sign bit). Per-block sums of x (unscaled) carry the
 * offsets: Q4_1's m * sum(x) and Q4_0's -8 d * sum(x). Two rows of W share
 * each x load. */
#define QA_AHEAD 16   /* rows of W prefetched ahead */
#define QA_MROWS 4    /* rows of x per pass over W (tpu_k_avx2_qu_gemv with M > 1) */

static const uint8_t kQaPerm[32] = {0, 4, 8,  12, 16, 20, 24, 28, 1, 5, 9,  13, 17, 21, 25, 29,
                                    2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};

/* A block's 16 nibble bytes -> w[0..3] in the order above (times 2^shift_k). */
static inline void qa_nib_unpack(const uint8_t* qs, __m256* w) {
  const __m256i m0 = _mm256_setr_epi32(0xF, 0xF, 0xF, 0xF, 0xF0, 0xF0, 0xF0, 0xF0);
  const __m256i m1 = _mm256_slli_epi32(m0, 8), m2 = _mm256_slli_epi32(m0, 16);
  __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)qs));
  w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v, m0));
  w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v, m1));
  w[2] = _mm256_cvtepi32_ps(_mm256_and_si256(v, m2));
  w[3] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 24), m0));
}

/* A Q8_0 block's 32 int8 weights -> w[0..3] in their natural order. */
static inline void qa_i8_unpack(const uint8_t* qs, __m256* w) {
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)qs)));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(qs + 8))));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(qs + 16))));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(qs + 24))));
}

/* The block's 8-lane partial dot product of unpacked weights w and x (every
 * path sums in this order, so one row of x gives the same bits in each). */
static inline __m256 qa_wdot(const __m256* w, const __m256* x) {
  __m256 t = _mm256_mul_ps(w[0], x[0]);
  __m256 u = _mm256_mul_ps(w[2], x[2]);
  t = _mm256_fmadd_ps(w[1], x[1], t);
  u = _mm256_fmadd_ps(w[3], x[3], u);
  return _mm256_add_ps(t, u);
}

static inline __m256 qa_nib_dot(const uint8_t* qs, const __m256* x) {
  __m256 w[4];
  qa_nib_unpack(qs, w);
  return qa_wdot(w, x);
}

/* 2^-shift_k of weight j = 8k + i's position in qa_nib_dot's vectors (vector 3: after its shift). */
static inline float qa_nib_scale(int j) {
  const int k = j >> 3, hi = (j & 7) >= 4;
  static const float kScale[4][2] = {{1.0f, 0x1p-4f}, {0x1p-8f, 0x1p-12f}, {0x1p-16f, 0x1p-20f}, {1.0f, 0x1p-4f}};
  return kScale[k][hi];
}

static inline __m256 qa_i8_dot(const uint8_t* qs, const __m256* x) {
  __m256 w[4];
  qa_i8_unpack(qs, w);
  return qa_wdot(w, x);
}

/* d (and m) of a block as floats: lane 0 = d, lane 1 = m. */
static inline __m128 qa_scales(const uint8_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

/* The offset term of a row's dot product from o = sum over blocks of (d, m) * sx
 * (qa_scales' lanes times the block sums sx of x): Q4_1 adds m * sx, Q4_0
 * subtracts q40 * d * sx (its nibbles are q + 8: q40 = 8 where sx sums x, 1 where
 * it already holds 8 times the sum), Q8_0 has none. Kept in a vector accumulator:
 * one FMA per block instead of a scalar chain. */
static inline float qa_offset(__m128 o, const int qt, const float q40) {
  if (qt == TPU_QU_Q4_1) return _mm_cvtss_f32(_mm_movehdup_ps(o));
  if (qt == TPU_QU_Q4_0) return -q40 * _mm_cvtss_f32(o);
  return 0.0f;
}

/* y[n0..n1) for one row of x, laid out as above (xp, sx); `qt` is a
 * constant in each instantiation below. */
static inline __attribute__((always_inline)) void qa_gemv_rows_t(const tpu_qu_ctx_t* c, const float* xp,
                                                                 const float* sx, int64_t n0, int64_t n1,
                                                                 const int qt) {
  const int64_t nb = c->K / TPU_QU_BLOCK, rb = c->row_bytes;
  const int qoff = qt == TPU_QU_Q4_1 ? 4 : 2;
  int64_t n = n0;
  for (; n + 2 <= n1; n += 2) {
    const uint8_t* p0 = c->w + n * rb;
    const uint8_t* p1 = p0 + rb;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m128 o0 = _mm_setzero_ps(), o1 = _mm_setzero_ps(); /* sum of (d, m) * sx, see qa_offset */
    const int64_t bb = qt == TPU_QU_Q4_0 ? 18 : qt == TPU_QU_Q4_1 ? 20 : 34;
    for (int64_t b = 0; b < nb; ++b, p0 += bb, p1 += bb) {
      __builtin_prefetch(p0 + QA_AHEAD * rb, 0, 0); /* the rows QA_AHEAD / 2 pairs ahead */
      __builtin_prefetch(p1 + QA_AHEAD * rb, 0, 0);
      __m256 x[4] = {_mm256_load_ps(xp + 32 * b), _mm256_load_ps(xp + 32 * b + 8), _mm256_load_ps(xp + 32 * b + 16),
                     _mm256_load_ps(xp + 32 * b + 24)};
      __m128 d0 = qa_scales(p0), d1 = qa_scales(p1);
      __m256 t0 = qt == TPU_QU_Q8_0 ? qa_i8_dot(p0 + 2, x) : qa_nib_dot(p0 + qoff, x);
      __m256 t1 = qt == TPU_QU_Q8_0 ? qa_i8_dot(p1 + 2, x) : qa_nib_dot(p1 + qoff, x);
      a0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(d0), t0, a0);
      a1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(d1), t1, a1);
      if (qt != TPU_QU_Q8_0) {
        const __m128 s = _mm_broadcast_ss(sx + b);
        o0 = _mm_fmadd_ps(d0, s, o0);
        o1 = _mm_fmadd_ps(d1, s, o1);
      }
    }
    c->y[n] = qa_hsum(a0) + qa_offset(o0, qt, 8.0f);
    c->y[n + 1] = qa_hsum(a1) + qa_offset(o1, qt, 8.0f);
  }
  for (; n < n1; ++n) {
    const uint8_t* p0 = c->w + n * rb;
    __m256 a0 = _mm256_setzero_ps();
    __m128 o0 = _mm_setzero_ps();
    const int64_t bb = qt == TPU_QU_Q4_0 ? 18 : qt == TPU_QU_Q4_1 ? 20 : 34;
    for (int64_t b = 0; b < nb; ++b, p0 += bb) {
      __m256 x[4] = {_mm256_load_ps(xp + 32 * b), _mm256_load_ps(xp + 32 * b + 8), _mm256_load_ps(xp + 32 * b + 16),
                     _mm256_load_ps(xp + 32 * b + 24)};
      __m128 d0 = qa_scales(p0);
      __m256 t0 = qt == TPU_QU_Q8_0 ? qa_i8_dot(p0 + 2, x) : qa_nib_dot(p0 + qoff, x);
      a0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(d0), t0, a0);
      if (qt != TPU_QU_Q8_0) o0 = _mm_fmadd_ps(d0, _mm_broadcast_ss(sx + b), o0);
    }
    c->y[n] = qa_hsum(a0) + qa_offset(o0, qt, 8.0f);
  }
}

static void qa_gemv_rows(const tpu_qu_ctx_t* c, const float* xp, const float* sx, int64_t n0, int64_t n1) {
  switch (c->qtype) {
    case TPU_QU_Q4_0: qa_gemv_rows_t(c, xp, sx, n0, n1, TPU_QU_Q4_0); break;
    case TPU_QU_Q4_1: qa_gemv_rows_t(c, xp, sx, n0, n1, TPU_QU_Q4_1); break;
    case TPU_QU_Q8_0: qa_gemv_rows_t(c, xp, sx, n0, n1, TPU_QU_Q8_0); break;
    default: break;
  }
}

/* ---- a few rows of x (short prefills, small batches) ---------------------------
 * Each row of x laid out as for one row (xp at stride K, sx at stride nb); per
 * block the weights are unpacked once and dotted with R <= QA_MROWS rows of x
 * (R is a constant in each instantiation). The sums run in qa_gemv_rows_t's
 * order, so every row of y has the bits one-row calls would give. The offsets
 * (d, m) * sx take a second pass over the row's scales (the row is in L1 by
 * then), which keeps the main loop's accumulators in registers. */
static inline __attribute__((always_inline)) void qa_gemv_mrows_t(const tpu_qu_ctx_t* c, const float* xp,
                                                                  const float* sx, float* y, int64_t n0,
                                                                  int64_t n1, const int qt, const int R) {
  const int64_t K = c->K, nb = K / TPU_QU_BLOCK, rb = c->row_bytes, N = c->N;
  const int qoff = qt == TPU_QU_Q4_1 ? 4 : 2;
  const int64_t bb = qt == TPU_QU_Q4_0 ? 18 : qt == TPU_QU_Q4_1 ? 20 : 34;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* p = c->w + n * rb;
    __m256 a[QA_MROWS];
    for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += bb) {
      __builtin_prefetch(p + QA_AHEAD * rb, 0, 0);
      __m256 w[4];
      if (qt == TPU_QU_Q8_0)
        qa_i8_unpack(p + 2, w);
      else
        qa_nib_unpack(p + qoff, w);
      const __m256 d = _mm256_broadcastss_ps(qa_scales(p));
      for (int r = 0; r < R; ++r) {
        const float* xb = xp + r * K + 32 * b;
        const __m256 x[4] = {_mm256_load_ps(xb), _mm256_load_ps(xb + 8), _mm256_load_ps(xb + 16),
                             _mm256_load_ps(xb + 24)};
        a[r] = _mm256_fmadd_ps(d, qa_wdot(w, x), a[r]);
      }
    }
    for (int r = 0; r < R; ++r) y[r * N + n] = qa_hsum(a[r]);
    if (qt == TPU_QU_Q8_0) continue;
    p = c->w + n * rb;
    __m128 o[QA_MROWS];
    for (int r = 0; r < R; ++r) o[r] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += bb) {
      const __m128 d = qa_scales(p);
      for (int r = 0; r < R; ++r) o[r] = _mm_fmadd_ps(d, _mm_broadcast_ss(sx + r * nb + b), o[r]);
    }
    for (int r = 0; r < R; ++r) y[r * N + n] += qa_offset(o[r], qt, 8.0f);
  }
}

#define QA_MROWS_CASE(QT)                                                         \
  case QT:                                                                        \
    switch (R) {                                                                  \
      case 2: qa_gemv_mrows_t(c, xp, sx, y, n0, n1, QT, 2); break;                \
      case 3: qa_gemv_mrows_t(c, xp, sx, y, n0, n1, QT, 3); break;                \
      default: qa_gemv_mrows_t(c, xp, sx, y, n0, n1, QT, 4); break;               \
    }                                                                             \
    break;

static void qa_gemv_mrows(const tpu_qu_ctx_t* c, const float* xp, const float* sx, float* y, int64_t n0, int64_t n1,
                          int R) {
  switch (c->qtype) {
    QA_MROWS_CASE(TPU_QU_Q4_0)
    QA_MROWS_CASE(TPU_QU_Q4_1)
    QA_MROWS_CASE(TPU_QU_Q8_0)
    default: break;
  }
}

static inline float qa_dot(const float* a, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    a0 = _mm256_fmadd_ps(_mm256_load_ps(a + j), _mm256_loadu_ps(x + j), a0);
    a1 = _mm256_fmadd_ps(_mm256_load_ps(a + j + 8), _mm256_loadu_ps(x + j + 8), a1);
  }
  return qa_hsum(_mm256_add_ps(a0, a1));
}


/* Q4_K super-block -> out[256] (layout in quant.h). */
static void qa_dequant_q4k(const uint8_t* b, float* out) {
  const float d = qa_f16(b), dmin = qa_f16(b + 2);
  const uint8_t* s = b + 4;
  const __m256i m15 = _mm256_set1_epi32(15);
  for (int i = 0; i < 4; ++i) {
    int j0 = 2 * i, j1 = 2 * i + 1, sc0, mn0, sc1, mn1;
    if (j0 < 4) {
      sc0 = s[j0] & 63, mn0 = s[j0 + 4] & 63, sc1 = s[j1] & 63, mn1 = s[j1 + 4] & 63;
    } else {
      sc0 = (s[j0 + 4] & 15) | ((s[j0 - 4] >> 6) << 4), mn0 = (s[j0 + 4] >> 4) | ((s[j0] >> 6) << 4);
      sc1 = (s[j1 + 4] & 15) | ((s[j1 - 4] >> 6) << 4), mn1 = (s[j1 + 4] >> 4) | ((s[j1] >> 6) << 4);
    }
    const __m256 d0 = _mm256_set1_ps(d * (float)sc0), m0 = _mm256_set1_ps(dmin * (float)mn0);
    const __m256 d1 = _mm256_set1_ps(d * (float)sc1), m1 = _mm256_set1_ps(dmin * (float)mn1);
    const uint8_t* qs = b + 16 + 32 * i;
    for (int g = 0; g < 4; ++g) {
      __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(qs + 8 * g)));
      __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, m15));
      __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
      _mm256_storeu_ps(out + 64 * i + 8 * g, _mm256_fmsub_ps(lo, d0, m0));
      _mm256_storeu_ps(out + 64 * i + 32 + 8 * g, _mm256_fmsub_ps(hi, d1, m1));
    }
  }
}

/* Q6_K super-block -> out[256]. */
static void qa_dequant_q6k(const uint8_t* b, float* out) {
  const float d = qa_f16(b + 208);
  const __m256i m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = (const int8_t*)(b + 192 + 8 * h);
    for (int g = 0; g < 4; ++g) {
      int is = g / 2;
      __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(ql + 8 * g)));
      __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(ql + 32 + 8 * g)));
      __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(qh + 8 * g)));
      __m256i q1 = _mm256_or_si256(_mm256_and_si256(a, m15), _mm256_slli_epi32(_mm256_and_si256(hb, m3), 4));
      __m256i q2 = _mm256_or_si256(_mm256_and_si256(c, m15),
                                   _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), m3), 4));
      __m256i q3 = _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                   _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), m3), 4));
      __m256i q4 = _mm256_or_si256(_mm256_srli_epi32(c, 4), _mm256_slli_epi32(_mm256_srli_epi32(hb, 6), 4));
      float* o = out + 128 * h + 8 * g;
      _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q1, k32)), _mm256_set1_ps(d * sc[is])));
      _mm256_storeu_ps(o + 32,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q2, k32)), _mm256_set1_ps(d * sc[is + 2])));
      _mm256_storeu_ps(o + 64,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q3, k32)), _mm256_set1_ps(d * sc[is + 4])));
      _mm256_storeu_ps(o + 96,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q4, k32)), _mm256_set1_ps(d * sc[is + 6])));
    }
  }
}

/* Q4_K, Q6_K: each super-block dequantized into a buffer, then dotted. */
static void qa_kquant_rows(const tpu_qu_ctx_t* c, int64_t n0, int64_t n1) {
  float buf[TPU_QU_KBLOCK] __attribute__((aligned(32)));
  const int64_t nb = c->K / TPU_QU_KBLOCK;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = c->w + n * c->row_bytes;
    for (int64_t m = 0; m < c->M; ++m) c->y[m * c->N + n] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      if (c->qtype == TPU_QU_Q4_K)
        qa_dequant_q4k(row + b * c->block_bytes, buf);
      else
        qa_dequant_q6k(row + b * c->block_bytes, buf);
      for (int64_t m = 0; m < c->M; ++m)
        c->y[m * c->N + n] += qa_dot(buf, c->x + m * c->K + b * TPU_QU_KBLOCK, TPU_QU_KBLOCK);
    }
  }
}

/* x's nb blocks -> xp in the unpack's order and scaling (Q8_0: as they are), sx
 * the blocks' sums (once per call, by quant.c). */
void tpu_k_avx2_qu_layout_x(int qtype, const float* x, int64_t nb, float* xp, float* sx) {
  const bool nibbles = qtype != TPU_QU_Q8_0;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    float s = 0.0f;
    for (int j = 0; j < 32; ++j) {
      xp[32 * b + j] = nibbles ? xb[kQaPerm[j]] * qa_nib_scale(j) : xb[j];
      s += xb[j];
    }
    sx[b] = s;
  }
}

void tpu_k_avx2_qu_gemv(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  const int64_t nb = c->K / TPU_QU_BLOCK;
  if (c->block != TPU_QU_BLOCK) {
    qa_kquant_rows(c, n0, n1);
    return;
  }
  if (!c->xl) { /* K > TPU_QU_GEMV_MAXK: x not laid out */
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < c->M; ++m)
        c->y[m * c->N + n] = qa_row_dot(c->qtype, c->w + n * c->row_bytes, c->x + m * c->K, nb);
    return;
  }
  /* rows of x in groups of QA_MROWS (one alone: the two-W-row loop) */
  for (int64_t m0 = 0; m0 < c->M; m0 += QA_MROWS) {
    const int64_t R = c->M - m0 < QA_MROWS ? c->M - m0 : QA_MROWS;
    const float *xp = c->xl + m0 * c->K, *sx = c->xls + m0 * nb;
    if (R == 1) {
      tpu_qu_ctx_t row = *c;
      row.y = c->y + m0 * c->N;
      qa_gemv_rows(&row, xp, sx, n0, n1);
    } else {
      qa_gemv_mrows(c, xp, sx, c->y + m0 * c->N, n0, n1, (int)R);
    }
  }
}

/* 32 weights of a block -> out (exact products d * q (+ m), in float32). */
static inline void qa_dequant(int qtype, const uint8_t* p, float* out) {
  __m256 w[4];
  if (qtype == TPU_QU_Q8_0) {
    qa_int8s(p + 2, w);
  } else {
    qa_nibbles(p + (qtype == TPU_QU_Q4_1 ? 4 : 2), qtype == TPU_QU_Q4_0, w);
  }
  __m256 d = _mm256_set1_ps(qa_f16(p));
  if (qtype == TPU_QU_Q4_1) {
    __m256 m = _mm256_set1_ps(qa_f16(p + 2));
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_fmadd_ps(w[i], d, m));
  } else {
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(w[i], d));
  }
}

/* ---- many rows of x (prefill) -------------------------------------------------
 * A panel of W rows is dequantized into a stack buffer (at most QA_PANEL
 * floats), then every row of x is dotted with four panel rows at a time, so
 * each x row is read once per panel instead of once per W row. */
#define QA_PANEL 16384

static void qa_panel_dots(const float* buf, int64_t rows, int64_t K, const float* x, float* y) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *b0 = buf + r * K, *b1 = b0 + K, *b2 = b1 + K, *b3 = b2 + K;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) {
      __m256 xv = _mm256_loadu_ps(x + k);
      a0 = _mm256_fmadd_ps(_mm256_load_ps(b0 + k), xv, a0);
      a1 = _mm256_fmadd_ps(_mm256_load_ps(b1 + k), xv, a1);
      a2 = _mm256_fmadd_ps(_mm256_load_ps(b2 + k), xv, a2);
      a3 = _mm256_fmadd_ps(_mm256_load_ps(b3 + k), xv, a3);
    }
    y[r] = qa_hsum(a0);
    y[r + 1] = qa_hsum(a1);
    y[r + 2] = qa_hsum(a2);
    y[r + 3] = qa_hsum(a3);
  }
  for (; r < rows; ++r) {
    const float* b0 = buf + r * K;
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) a0 = _mm256_fmadd_ps(_mm256_load_ps(b0 + k), _mm256_loadu_ps(x + k), a0);
    y[r] = qa_hsum(a0);
  }
}

void tpu_k_avx2_qu_gemm(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  const int64_t K = c->K, nb = K / TPU_QU_BLOCK;
  if (K > QA_PANEL || c->block != TPU_QU_BLOCK) {
    if (c->block != TPU_QU_BLOCK) {
      qa_kquant_rows(c, n0, n1);
      return;
    }
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < c->M; ++m)
        c->y[m * c->N + n] = qa_row_dot(c->qtype, c->w + n * c->row_bytes, c->x + m * K, nb);
    return;
  }
  float buf[QA_PANEL] __attribute__((aligned(32)));
  const int64_t panel = QA_PANEL / K;
  float ys[QA_PANEL / TPU_QU_BLOCK]; /* one x row's results for the panel (panel <= 512) */
  for (int64_t n = n0; n < n1; n += panel) {
    int64_t rows = n1 - n < panel ? n1 - n : panel;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = c->w + (n + r) * c->row_bytes;
      for (int64_t b = 0; b < nb; ++b) qa_dequant(c->qtype, row + b * c->block_bytes, buf + r * K + b * TPU_QU_BLOCK);
    }
    for (int64_t m = 0; m < c->M; ++m) {
      qa_panel_dots(buf, rows, K, c->x + m * K, ys);
      memcpy(c->y + m * c->N + n, ys, (size_t)rows * sizeof(float));
    }
  }
}

/* ---- act_bits = 8 (quant.c): int8 activations, integer dot products -----------
 * Per block: the 32 weights as bytes in their natural order (Q4_0/Q4_1: the
 * 16 low nibbles, then the 16 high ones, unsigned 0..15; Q8_0: signed), times
 * the block's 32 int8 q of x through vpmaddubsw (unsigned x signed bytes ->
 * 16 int16 pair sums, at most 2 * 15 * 127 or, for Q8_0 after moving the
 * weight's sign onto x, 2 * 128 * 127 < 32768: no saturation) and vpmaddwd
 * (-> 8 int32), converted to float and scaled by d_w * d_x. */

static inline __m256i qa_nib_bytes(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128((const __m128i*)qs);
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* 8 int32 partial sums of u[j] * s[j] (u unsigned bytes, s signed). */
static inline __m256i qa_dot_us(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The block's integer dot product (as 8 int32 lanes) with x's q. */
static inline __m256i qa_a8_block(const uint8_t* p, __m256i xq, const int qt) {
  if (qt == TPU_QU_Q8_0) {
    const __m256i w = _mm256_loadu_si256((const __m256i*)(p + 2));
    return qa_dot_us(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
  }
  return qa_dot_us(qa_nib_bytes(p + (qt == TPU_QU_Q4_1 ? 4 : 2)), xq);
}

/* y[n0..n1) for row m of x; `qt` is a constant in each instantiation. */
static inline __attribute__((always_inline)) void qa_a8_rows_t(const tpu_qu_ctx_t* c, int64_t m, int64_t n0,
                                                               int64_t n1, const int qt) {
  const int64_t nb = c->K / TPU_QU_BLOCK, rb = c->row_bytes;
  const int64_t bb = qt == TPU_QU_Q4_0 ? 18 : qt == TPU_QU_Q4_1 ? 20 : 34;
  const int8_t* xq = c->xq + m * c->K;
  const float* xd = c->xd + m * nb;
  const float* xs = c->xs + m * nb;
  float* y = c->y + m * c->N;
  int64_t n = n0;
  for (; n + 2 <= n1; n += 2) {
    const uint8_t* p0 = c->w + n * rb;
    const uint8_t* p1 = p0 + rb;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m128 o0 = _mm_setzero_ps(), o1 = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p0 += bb, p1 += bb) {
      __builtin_prefetch(p0 + QA_AHEAD * rb, 0, 0);
      __builtin_prefetch(p1 + QA_AHEAD * rb, 0, 0);
      const __m256i x = _mm256_loadu_si256((const __m256i*)(xq + 32 * b));
      const __m128 s0 = qa_scales(p0), s1 = qa_scales(p1); /* lane 0: d_w, lane 1: m */
      const __m256 dx = _mm256_broadcast_ss(xd + b);
      const __m256 i0 = _mm256_cvtepi32_ps(qa_a8_block(p0, x, qt));
      const __m256 i1 = _mm256_cvtepi32_ps(qa_a8_block(p1, x, qt));
      a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcastss_ps(s0), dx), i0, a0);
      a1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcastss_ps(s1), dx), i1, a1);
      if (qt != TPU_QU_Q8_0) {
        const __m128 sb = _mm_broadcast_ss(xs + b);
        o0 = _mm_fmadd_ps(s0, sb, o0);
        o1 = _mm_fmadd_ps(s1, sb, o1);
      }
    }
    y[n] = qa_hsum(a0) + qa_offset(o0, qt, 1.0f);
    y[n + 1] = qa_hsum(a1) + qa_offset(o1, qt, 1.0f);
  }
  for (; n < n1; ++n) {
    const uint8_t* p0 = c->w + n * rb;
    __m256 a0 = _mm256_setzero_ps();
    __m128 o0 = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p0 += bb) {
      const __m256i x = _mm256_loadu_si256((const __m256i*)(xq + 32 * b));
      const __m128 s0 = qa_scales(p0);
      const __m256 i0 = _mm256_cvtepi32_ps(qa_a8_block(p0, x, qt));
      a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcastss_ps(s0), _mm256_broadcast_ss(xd + b)), i0, a0);
      if (qt != TPU_QU_Q8_0) o0 = _mm_fmadd_ps(s0, _mm_broadcast_ss(xs + b), o0);
    }
    y[n] = qa_hsum(a0) + qa_offset(o0, qt, 1.0f);
  }
}

#define QA_A8_CHUNK 16 /* W rows per pass over the rows of x (they stay in L1) */

void tpu_k_avx2_qu_gemv_a8(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  for (int64_t n = n0; n < n1; n += QA_A8_CHUNK) {
    const int64_t e = n1 - n < QA_A8_CHUNK ? n1 : n + QA_A8_CHUNK;
    for (int64_t m = 0; m < c->M; ++m) {
      switch (c->qtype) {
        case TPU_QU_Q4_0: qa_a8_rows_t(c, m, n, e, TPU_QU_Q4_0); break;
        case TPU_QU_Q4_1: qa_a8_rows_t(c, m, n, e, TPU_QU_Q4_1); break;
        case TPU_QU_Q8_0: qa_a8_rows_t(c, m, n, e, TPU_QU_Q8_0); break;
        default: break;
      }
    }
  }
}

static inline float qa_hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void tpu_k_avx2_qu_quantize_x(int qtype, const float* x, int64_t nb, int8_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < nb; ++b, x += 32, q += 32) {
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
    }
    const float amax = qa_hmax(mx);
    if (_mm256_movemask_ps(bad) != 0 || !(amax <= FLT_MAX)) {
      memset(q, 0, 32);
      d[b] = NAN;
      s[b] = NAN;
      continue;
    }
    const float db = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
    __m256i r[4];
    for (int i = 0; i < 4; ++i)
      r[i] = _mm256_cvttps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    /* |r| <= 127, so the saturating packs are exact; they interleave the
     * 128-bit lanes, which the permutation undoes. */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256((__m256i*)q, _mm256_permutevar8x32_epi32(p, order));
    d[b] = db;
    if (qtype == TPU_QU_Q4_1) {
      s[b] = qa_hsum(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
    } else {
      const __m256i t = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
      __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4e));
      u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xb1));
      s[b] = 8.0f * db * (float)_mm_cvtsi128_si32(u);
    }
  }
}
