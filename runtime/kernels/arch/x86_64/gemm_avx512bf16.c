/* gemm_avx512bf16.c - AVX512_BF16 pieces of the bfloat16 GEMM in linalg.c:
 * vdpbf16ps multiplies bf16 pairs and accumulates in f32, so bf16 operands
 * are used as they are (no conversion on the critical path).
 *
 * Pair layout: vdpbf16ps lane i computes acc[i] += a.lo*b.lo + a.hi*b.hi
 * over the 32-bit lane i of both sources. A row's elements (k, k+1) form one
 * 32-bit pair as they lie in memory; B is packed so that lane l of a 512-bit
 * word holds (B[k][j0+l], B[k+1][j0+l]) for 16 consecutive columns.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (and the AVX2
 * flags); only called when tpu_ku_use_avx512bf16() says so. Prototypes are
 * repeated in linalg.c. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kutil.h"

#define MR 8
#define NR 32 /* two zmm of f32 accumulators per row */

static inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/* 32-bit pair at p (any alignment). */
static inline int32_t ld_pair(const uint16_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

static inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u);
}
static inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* Word interleave of two rows of 32 bf16: lo = (r0[0], r1[0], ..., r0[15],
 * r1[15]), hi = the same for elements 16..31. */
static inline void interleave2(__m512i r0, __m512i r1, __m512i* lo, __m512i* hi) {
  const __m512i ilo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                       39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i ihi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56,
                                       24, 55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17,
                                       48, 16);
  *lo = _mm512_permutex2var_epi16(r0, ilo, r1);
  *hi = _mm512_permutex2var_epi16(r0, ihi, r1);
}

/* In-place transpose of a 16x16 matrix of 32-bit elements. */
static inline void transpose16(__m512i* r) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  /* b[4g + q], lane L = rows 4g..4g+3 of column 4L + q */
  for (int g = 0; g < 4; ++g) {
    __m512i x0 = a[4 * g], x1 = a[4 * g + 1], x2 = a[4 * g + 2], x3 = a[4 * g + 3];
    b[4 * g + 0] = _mm512_unpacklo_epi64(x0, x2);
    b[4 * g + 1] = _mm512_unpackhi_epi64(x0, x2);
    b[4 * g + 2] = _mm512_unpacklo_epi64(x1, x3);
    b[4 * g + 3] = _mm512_unpackhi_epi64(x1, x3);
  }
  for (int q = 0; q < 4; ++q) {
    __m512i c0 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0x88);
    __m512i c1 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0xDD);
    __m512i d0 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0x88);
    __m512i d1 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0xDD);
    r[0 + q] = _mm512_shuffle_i32x4(c0, d0, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(c1, d1, 0x88);
    r[8 + q] = _mm512_shuffle_i32x4(c0, d0, 0xDD);
    r[12 + q] = _mm512_shuffle_i32x4(c1, d1, 0xDD);
  }
}

/* ---- B packing ------------------------------------------------------------------
 * One micro-panel: kc rows x NR columns of B (element (k, j) at
 * b[k*rs + j*cs]) as two halves of 16 columns, each kp = ceil(kc/2) pairs x
 * 16 columns x 2 bf16: pair p of column j (j = 16h + l) at
 * dst[(h*kp + p)*32 + 2l] and the next element. Columns >= nr and the odd
 * tail's second element are zero. */
void tpu_k_avx512bf16_pack_b(int64_t kc, int64_t nr, const uint16_t* b, int64_t rs, int64_t cs,
                             uint16_t* dst) {
  int64_t kp = (kc + 1) / 2;
  if (cs == 1 || nr == 1) {
    /* rows of B are contiguous: interleave row pairs */
    __mmask32 m = mask32(nr);
    for (int64_t p = 0; p < kp; ++p) {
      __m512i r0 = _mm512_maskz_loadu_epi16(m, b + 2 * p * rs);
      __m512i r1 = 2 * p + 1 < kc ? _mm512_maskz_loadu_epi16(m, b + (2 * p + 1) * rs)
                                  : _mm512_setzero_si512();
      __m512i lo, hi;
      interleave2(r0, r1, &lo, &hi);
      _mm512_store_si512((void*)(dst + p * 32), lo);
      _mm512_store_si512((void*)(dst + (kp + p) * 32), hi);
    }
    return;
  }
  if (rs == 1) {
    /* columns of B are contiguous (a row-major weight, transposed): each
     * column's pairs are 32-bit words; transpose 16 columns x 16 pairs */
    for (int64_t h = 0; h < 2; ++h) {
      int64_t j0 = 16 * h;
      for (int64_t k0 = 0; k0 < kc; k0 += 32) {
        __mmask32 m = mask32(kc - k0);
        __m512i r[16];
        for (int64_t j = 0; j < 16; ++j)
          r[j] = j0 + j < nr ? _mm512_maskz_loadu_epi16(m, b + (j0 + j) * cs + k0)
                             : _mm512_setzero_si512();
        transpose16(r);
        int64_t np = kp - k0 / 2 < 16 ? kp - k0 / 2 : 16;
        for (int64_t q = 0; q < np; ++q)
          _mm512_store_si512((void*)(dst + (h * kp + k0 / 2 + q) * 32), r[q]);
      }
    }
    return;
  }
  for (int64_t p = 0; p < kp; ++p)
    for (int64_t j = 0; j < NR; ++j) {
      int64_t k = 2 * p;
      bool in = j < nr;
      uint16_t* d = dst + ((j / 16) * kp + p) * 32 + 2 * (j % 16);
      d[0] = in ? b[k * rs + j * cs] : 0;
      d[1] = in && k + 1 < kc ? b[(k + 1) * rs + j * cs] : 0;
    }
}

/* ---- micro-kernel ---------------------------------------------------------------
 * acc[i*NR + j] (+)= sum_k A[i][k] * B[k][j] for an MR x NR tile: A row i at
 * a + i*lda (unit stride along k, kc elements, any kc), rows >= mr are not
 * read; bp a micro-panel from tpu_k_avx512bf16_pack_b. */
void tpu_k_avx512bf16_gemm_8x32(int64_t kc, const uint16_t* a, int64_t lda, int mr,
                                const uint16_t* bp, float* acc, int accumulate) {
  const uint16_t* ar[MR];
  for (int i = 0; i < MR; ++i) ar[i] = a + (i < mr ? i : 0) * lda;
  __m512 c[MR][2];
  for (int i = 0; i < MR; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
  int64_t kp = kc / 2;
  const uint16_t* bp1 = bp + (kc + 1) / 2 * 32; /* second half: columns 16..31 */
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh b0 = as_bh(_mm512_load_si512((const void*)(bp + p * 32)));
    __m512bh b1 = as_bh(_mm512_load_si512((const void*)(bp1 + p * 32)));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512bh av = as_bh(_mm512_set1_epi32(ld_pair(ar[i] + 2 * p)));
      c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
    }
  }
  if (kc & 1) { /* last element alone; its partner in the packed B is zero */
    __m512bh b0 = as_bh(_mm512_load_si512((const void*)(bp + kp * 32)));
    __m512bh b1 = as_bh(_mm512_load_si512((const void*)(bp1 + kp * 32)));
    for (int i = 0; i < MR; ++i) {
      __m512bh av = as_bh(_mm512_set1_epi32((int32_t)ar[i][2 * kp]));
      c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
    }
  }
  for (int i = 0; i < mr; ++i) {
    float* o = acc + i * NR;
    if (accumulate) {
      c[i][0] = _mm512_add_ps(c[i][0], _mm512_load_ps(o));
      c[i][1] = _mm512_add_ps(c[i][1], _mm512_load_ps(o + 16));
    }
    _mm512_store_ps(o, c[i][0]);
    _mm512_store_ps(o + 16, c[i][1]);
  }
}

/* ---- GEMV-like kernels (few rows of A) ------------------------------------------- */

static inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }

/* acc[m*ldacc + j] += sum_k x[m*ldx + k] * b[j*ldb + k] for m < ms (1..4),
 * j < nn: dot products along k, where both operands have unit stride.
 * One column (one row of b) at a time, start to end, for all MS rows of x:
 * a single stream of b at a time, which the hardware prefetcher follows (four
 * rows of b interleaved read 7 GB/s from memory on one core where one row at
 * a time read 14, with the same sums per byte in cache). U chains per row of
 * x (6 or more chains in flight), reduced pairwise. MS is a constant at each call. */
static inline __attribute__((always_inline)) void dot_nk_rows(const int MS, int64_t nn, int64_t kc,
                                                              const uint16_t* b, int64_t ldb,
                                                              const uint16_t* const* xr, float* acc,
                                                              int64_t ldacc) {
  enum { UMAX = 4 };
  const int U = MS <= 2 ? 4 : 2;
  int64_t kfull = kc & ~(int64_t)31;
  int64_t kmain = kfull / (32 * U) * (32 * U);
  __mmask32 tm = mask32(kc - kfull);
  for (int64_t j = 0; j < nn; ++j) {
    __m512 s[4][UMAX];
    for (int m = 0; m < MS; ++m)
      for (int u = 0; u < U; ++u) s[m][u] = _mm512_setzero_ps();
    const uint16_t* br = b + j * ldb;
    int64_t k = 0;
    for (; k < kmain; k += 32 * U)
      for (int u = 0; u < U; ++u) {
        __m512bh w = as_bh(_mm512_loadu_si512(br + k + 32 * u));
        for (int m = 0; m < MS; ++m)
          s[m][u] = _mm512_dpbf16_ps(s[m][u], w, as_bh(_mm512_loadu_si512(xr[m] + k + 32 * u)));
      }
    for (; k < kc; k += 32) {
      __mmask32 mk = k < kfull ? (__mmask32)0xffffffffu : tm;
      __m512bh w = as_bh(_mm512_maskz_loadu_epi16(mk, br + k));
      for (int m = 0; m < MS; ++m)
        s[m][0] = _mm512_dpbf16_ps(s[m][0], w, as_bh(_mm512_maskz_loadu_epi16(mk, xr[m] + k)));
    }
    for (int m = 0; m < MS; ++m) {
      __m512 t = _mm512_add_ps(s[m][0], s[m][1]);
      if (U == 4) t = _mm512_add_ps(t, _mm512_add_ps(s[m][2], s[m][3]));
      acc[m * ldacc + j] += hsum512(t);
    }
  }
}

void tpu_k_avx512bf16_dot_nk(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb, int ms,
                             const uint16_t* x, int64_t ldx, float* acc, int64_t ldacc) {
  const uint16_t* xr[4];
  for (int m = 0; m < 4; ++m) xr[m] = x + (m < ms ? m : 0) * ldx;
  switch (ms) {
    case 1: dot_nk_rows(1, nn, kc, b, ldb, xr, acc, ldacc); return;
    case 2: dot_nk_rows(2, nn, kc, b, ldb, xr, acc, ldacc); return;
    case 3: dot_nk_rows(3, nn, kc, b, ldb, xr, acc, ldacc); return;
    default: dot_nk_rows(4, nn, kc, b, ldb, xr, acc, ldacc); return;
  }
}

/* acc[j] += sum_k x[k] * b[k*ldb + j], j < nn: rows of B have unit stride;
 * row pairs are interleaved on the fly and x pairs broadcast. Up to four
 * pairs (eight rows) per pass over acc. */
void tpu_k_avx512bf16_gemv_kn(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb,
                              const uint16_t* x, float* acc) {
  for (int64_t k0 = 0; k0 < kc; k0 += 8) {
    int np = (int)((kc - k0 + 1) / 2 < 4 ? (kc - k0 + 1) / 2 : 4);
    __m512bh xv[4];
    const uint16_t* r[8];
    for (int q = 0; q < 4; ++q) {
      int64_t k = k0 + 2 * q;
      bool has0 = q < np, has1 = q < np && k + 1 < kc;
      xv[q] = as_bh(_mm512_set1_epi32(has1 ? ld_pair(x + k) : has0 ? (int32_t)x[k] : 0));
      r[2 * q] = has0 ? b + k * ldb : NULL;
      r[2 * q + 1] = has1 ? b + (k + 1) * ldb : NULL;
    }
    for (int64_t j = 0; j < nn; j += 32) {
      __mmask32 m = mask32(nn - j);
      __mmask16 m0 = mask16(nn - j), m1 = nn - j > 16 ? mask16(nn - j - 16) : 0;
      __m512 a0 = _mm512_maskz_loadu_ps(m0, acc + j);
      __m512 a1 = _mm512_maskz_loadu_ps(m1, acc + j + 16);
      for (int q = 0; q < np; ++q) {
        __m512i v0 = _mm512_maskz_loadu_epi16(m, r[2 * q] + j);
        __m512i v1 = r[2 * q + 1] ? _mm512_maskz_loadu_epi16(m, r[2 * q + 1] + j)
                                  : _mm512_setzero_si512();
        __m512i lo, hi;
        interleave2(v0, v1, &lo, &hi);
        a0 = _mm512_dpbf16_ps(a0, as_bh(lo), xv[q]);
        a1 = _mm512_dpbf16_ps(a1, as_bh(hi), xv[q]);
      }
      _mm512_mask_storeu_ps(acc + j, m0, a0);
      _mm512_mask_storeu_ps(acc + j + 16, m1, a1);
    }
  }
}

/* ---- output ---------------------------------------------------------------------- */

/* f32 -> bf16, round to nearest even, NaN kept quiet (as tpu_ku_f32_to_bf16). */
static inline __m256i f32_to_bf16_16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

static inline __m512 ld16f(const void* p, int dt, __mmask16 m) {
  if (dt == TPU_DTYPE_BF16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  return _mm512_maskz_loadu_ps(m, p);
}

/* c[j] = alpha * acc[j] + beta * bias[j * bias_cs] for j < n; c unit stride,
 * f32 or bf16; bias NULL or f32/bf16 with bias_cs 0 or 1. */
void tpu_k_avx512bf16_store(int64_t n, const float* acc, float alpha, const void* bias,
                            int bias_dt, int64_t bias_cs, float beta, void* c, int c_dt) {
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  size_t bes = bias_dt == TPU_DTYPE_F32 ? 4 : 2;
  __m512 bconst = _mm512_setzero_ps();
  if (bias && bias_cs == 0)
    bconst = _mm512_mul_ps(vb, _mm512_set1_ps(bias_dt == TPU_DTYPE_F32 ? *(const float*)bias
                                                       : tpu_ku_bf16_to_f32(*(const uint16_t*)bias)));
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = mask16(n - j);
    __m512 v = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, acc + j));
    if (bias) {
      if (bias_cs == 0)
        v = _mm512_add_ps(v, bconst);
      else
        v = _mm512_fmadd_ps(vb, ld16f((const char*)bias + j * bes, bias_dt, m), v);
    }
    if (c_dt == TPU_DTYPE_F32)
      _mm512_mask_storeu_ps((float*)c + j, m, v);
    else
      _mm256_mask_storeu_epi16((uint16_t*)c + j, m, f32_to_bf16_16(v));
  }
}
