/* attention_avx2.c - AVX2/FMA/F16C block operations of attention.c: a
 * small-GEMM micro-kernel (6x16 / 4x16 / 1x16 register tiles, masked column
 * edges, A read through arbitrary row/column strides so transposed score
 * blocks need no copy), a vectorised exp(x - sub) and bf16/f16 -> f32 row
 * conversion. Compiled with -mavx2 -mfma -mf16c; only called after
 * __builtin_cpu_supports says so. Prototypes are repeated in attention.c. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kutil.h"

/* lanes [0, n) set, n in [0, 8] */
static inline __m256i at_lanes(int64_t n) {
  static const int32_t kTbl[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i*)(kTbl + 8 - n));
}

/* C[MR x nr] (+)= A[MR x k] B[k x nr], nr <= 16, MR <= 6. Named
 * accumulators (an array would be kept in memory by GCC); rows >= MR are
 * dead code once inlined with a constant MR. */
#define AT_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
static inline __attribute__((always_inline)) void at_tile(const int MR, int64_t k, const float* a, int64_t ars,
                                                          int64_t acs, const float* b, int64_t ldb, float* c,
                                                          int64_t ldc, int accumulate, int64_t nr) {
#define AT_DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
  AT_ROWS(AT_DECL)
#undef AT_DECL
#define AT_FMA2(r)                                               \
  if (MR > r) {                                                  \
    const __m256 av = _mm256_broadcast_ss(ap + (r) * ars);       \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                  \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                  \
  }
#define AT_FMA1(r) \
  if (MR > r) c##r##0 = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + (r) * ars), b0, c##r##0);
  const __m256i m0 = at_lanes(nr >= 8 ? 8 : nr), m1 = at_lanes(nr > 8 ? nr - 8 : 0);
  if (nr == 16) {
    for (int64_t p = 0; p < k; ++p) {
      const __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
      const float* ap = a + p * acs;
      AT_ROWS(AT_FMA2)
    }
  } else if (nr <= 8) {
    for (int64_t p = 0; p < k; ++p) {
      const __m256 b0 = _mm256_maskload_ps(b + p * ldb, m0);
      const float* ap = a + p * acs;
      AT_ROWS(AT_FMA1)
    }
  } else {
    for (int64_t p = 0; p < k; ++p) {
      const __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_maskload_ps(b + p * ldb + 8, m1);
      const float* ap = a + p * acs;
      AT_ROWS(AT_FMA2)
    }
  }
#undef AT_FMA1
#undef AT_FMA2
#define AT_STORE(r)                                                            \
  if (MR > r) {                                                                \
    float* cr = c + (r) * ldc;                                                 \
    if (nr == 16) {                                                            \
      if (accumulate) {                                                        \
        c##r##0 = _mm256_add_ps(c##r##0, _mm256_loadu_ps(cr));                 \
        c##r##1 = _mm256_add_ps(c##r##1, _mm256_loadu_ps(cr + 8));             \
      }                                                                        \
      _mm256_storeu_ps(cr, c##r##0);                                           \
      _mm256_storeu_ps(cr + 8, c##r##1);                                       \
    } else {                                                                   \
      if (accumulate) {                                                        \
        c##r##0 = _mm256_add_ps(c##r##0, _mm256_maskload_ps(cr, m0));          \
        c##r##1 = _mm256_add_ps(c##r##1, _mm256_maskload_ps(cr + 8, m1));      \
      }                                                                        \
      _mm256_maskstore_ps(cr, m0, c##r##0);                                    \
      if (nr > 8) _mm256_maskstore_ps(cr + 8, m1, c##r##1);                    \
    }                                                                          \
  }
  AT_ROWS(AT_STORE)
#undef AT_STORE
}

#define AT_KERNEL(MR)                                                                                     \
  static void at_k##MR(int64_t k, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb, float* c, \
                       int64_t ldc, int accumulate, int64_t nr) {                                            \
    at_tile(MR, k, a, ars, acs, b, ldb, c, ldc, accumulate, nr);                                             \
  }
AT_KERNEL(6)
AT_KERNEL(4)
AT_KERNEL(3)
AT_KERNEL(2)
AT_KERNEL(1)
#undef AT_KERNEL

void tpu_k_avx2_attn_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs,
                          const float* b, int64_t ldb, float* c, int64_t ldc, int accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nr = n - j0 < 16 ? n - j0 : 16;
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) at_k6(k, a + i * ars, ars, acs, b + j0, ldb, c + i * ldc + j0, ldc, accumulate, nr);
    if (i + 4 <= m) {
      at_k4(k, a + i * ars, ars, acs, b + j0, ldb, c + i * ldc + j0, ldc, accumulate, nr);
      i += 4;
    }
    /* the last rows (decoding: a kv head's few query rows) in one pass over B */
    const float* ai = a + i * ars;
    float* ci = c + i * ldc + j0;
    if (m - i == 3) at_k3(k, ai, ars, acs, b + j0, ldb, ci, ldc, accumulate, nr);
    if (m - i == 2) at_k2(k, ai, ars, acs, b + j0, ldb, ci, ldc, accumulate, nr);
    if (m - i == 1) at_k1(k, ai, ars, acs, b + j0, ldb, ci, ldc, accumulate, nr);
  }
}

/* Four partial-sum vectors -> their four totals. */
static inline __m128 at_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* s[r * lds + j] = dot(q row r, k row j) for r < R (<= 3), j < 4: the four
 * key rows are loaded once for the R query rows (named accumulators, as in
 * at_tile). */
#define AT_R3(X) X(0) X(1) X(2)
static inline __attribute__((always_inline)) void at_dots_tile(const int R, int64_t E, const float* q, int64_t ldq,
                                                               const float* k, int64_t ldk, float* s, int64_t lds) {
  const float* k0 = k;
  const float* k1 = k0 + ldk;
  const float* k2 = k1 + ldk;
  const float* k3 = k2 + ldk;
#define AT_DDECL(r) \
  __m256 d##r##0 = _mm256_setzero_ps(), d##r##1 = _mm256_setzero_ps(), d##r##2 = _mm256_setzero_ps(), \
         d##r##3 = _mm256_setzero_ps();
  AT_R3(AT_DDECL)
#undef AT_DDECL
  int64_t e = 0;
  for (; e + 8 <= E; e += 8) {
    const __m256 v0 = _mm256_loadu_ps(k0 + e), v1 = _mm256_loadu_ps(k1 + e);
    const __m256 v2 = _mm256_loadu_ps(k2 + e), v3 = _mm256_loadu_ps(k3 + e);
#define AT_DFMA(r)                                          \
  if (R > r) {                                              \
    const __m256 qv = _mm256_loadu_ps(q + (r) * ldq + e);   \
    d##r##0 = _mm256_fmadd_ps(v0, qv, d##r##0);             \
    d##r##1 = _mm256_fmadd_ps(v1, qv, d##r##1);             \
    d##r##2 = _mm256_fmadd_ps(v2, qv, d##r##2);             \
    d##r##3 = _mm256_fmadd_ps(v3, qv, d##r##3);             \
  }
    AT_R3(AT_DFMA)
#undef AT_DFMA
  }
#define AT_DSTORE(r)                                                        \
  if (R > r) {                                                              \
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                  \
    const float* qr = q + (r) * ldq;                                        \
    for (int64_t f = e; f < E; ++f) {                                       \
      t[0] += qr[f] * k0[f];                                                \
      t[1] += qr[f] * k1[f];                                                \
      t[2] += qr[f] * k2[f];                                                \
      t[3] += qr[f] * k3[f];                                                \
    }                                                                       \
    _mm_storeu_ps(s + (r) * lds, _mm_add_ps(at_hsum4(d##r##0, d##r##1, d##r##2, d##r##3), _mm_loadu_ps(t))); \
  }
  AT_R3(AT_DSTORE)
#undef AT_DSTORE
}
#undef AT_R3

/* s[x * lds + j] = sum_e q[x * ldq + e] * k[j * ldk + e] for x < nr, j < nc
 * (decoding's scores: few query rows, keys along the lanes of s). */
void tpu_k_avx2_attn_dots(int64_t nr, int64_t nc, int64_t E, const float* q, int64_t ldq, const float* k,
                          int64_t ldk, float* s, int64_t lds) {
  for (int64_t x = 0; x < nr; x += 3) {
    const int64_t rows = nr - x < 3 ? nr - x : 3;
    const float* qx = q + x * ldq;
    float* sx = s + x * lds;
    int64_t j = 0;
    for (; j + 4 <= nc; j += 4) {
      const float* kj = k + j * ldk;
      if (rows == 3) at_dots_tile(3, E, qx, ldq, kj, ldk, sx + j, lds);
      if (rows == 2) at_dots_tile(2, E, qx, ldq, kj, ldk, sx + j, lds);
      if (rows == 1) at_dots_tile(1, E, qx, ldq, kj, ldk, sx + j, lds);
    }
    for (; j < nc; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        float t = 0.0f;
        for (int64_t e = 0; e < E; ++e) t += qx[r * ldq + e] * k[j * ldk + e];
        sx[r * lds + j] = t;
      }
    }
  }
}

/* exp(x) for float32 lanes: Cephes-style range reduction and degree-6
 * polynomial (< 2 ulp); exactly 0 below ln(FLT_MIN) (and for -inf); NaN
 * stays NaN. Arguments here are <= ~0 (scores minus their maximum). */
static inline __m256 at_exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f), hi = _mm256_set1_ps(88.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(hi, x);
  x = _mm256_max_ps(lo, x);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

void tpu_k_avx2_attn_exp_sub(int64_t rows, int64_t cols, float* x, int64_t ld, const float* sub, int per_col,
                             float* colsum) {
  for (int64_t i = 0; i < rows; ++i) {
    float* xr = x + i * ld;
    const __m256 rs = _mm256_set1_ps(per_col ? 0.0f : sub[i]);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const __m256 s = per_col ? _mm256_loadu_ps(sub + j) : rs;
      const __m256 v = at_exp8(_mm256_sub_ps(_mm256_loadu_ps(xr + j), s));
      _mm256_storeu_ps(xr + j, v);
      if (colsum) _mm256_storeu_ps(colsum + j, _mm256_add_ps(_mm256_loadu_ps(colsum + j), v));
    }
    for (; j < cols; ++j) {
      const float v = expf(xr[j] - (per_col ? sub[j] : sub[i]));
      xr[j] = v;
      if (colsum) colsum[j] += v;
    }
  }
}

void tpu_k_avx2_attn_to_f32(int64_t n, const void* src, int dt, float* dst) {
  if (dt == TPU_DTYPE_F32) {
    memcpy(dst, src, (size_t)n * 4);
    return;
  }
  const uint16_t* h = (const uint16_t*)src;
  int64_t i = 0;
  if (dt == TPU_DTYPE_BF16) {
    for (; i + 8 <= n; i += 8) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(h + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; ++i) dst[i] = tpu_ku_bf16_to_f32(h[i]);
    return;
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(h + i))));
  for (; i < n; ++i) dst[i] = tpu_ku_f16_to_f32(h[i]);
}
