/* gemm_avx2.c - AVX2/FMA/F16C pieces of the GEMM in linalg.c: the 6x16
 * microkernel, B-panel packing with bf16/f16 conversion, and GEMV rows.
 * Compiled with -mavx2 -mfma -mf16c; only called after
 * __builtin_cpu_supports says so. Prototypes are repeated in linalg.c. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kutil.h"

#define MR 6
#define NR 16

static inline __m256 ld8(const void* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_BF16: {
      __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    case TPU_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
    default: return _mm256_loadu_ps((const float*)p);
  }
}

static inline float ld1(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    case TPU_DTYPE_F16: return _cvtsh_ss(*(const uint16_t*)p);
    default: return *(const float*)p;
  }
}

static inline size_t esz(int dt) { return dt == TPU_DTYPE_F32 ? 4 : 2; }

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void tpu_k_avx2_sgemm_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                           int accumulate, int mr, int nr) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  /* C's rows are read (accumulate) or written only after the K loop, and
   * they are often out of L2 by then (C is visited once per K block): ask
   * for them now, so that their loads overlap the K loop (without this they
   * took about a tenth of the kernel's perf samples). */
  for (int i = 0; i < mr; ++i) {
    _mm_prefetch((const char*)(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch((const char*)(c + i * ldc + nr - 1), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 av;
    av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR;
    b += NR;
  }
  if (mr == MR && nr == NR) {
#define ROW(i, x0, x1)                                                       \
  do {                                                                       \
    float* cr = c + (i) * ldc;                                               \
    if (accumulate) {                                                        \
      x0 = _mm256_add_ps(x0, _mm256_loadu_ps(cr));                           \
      x1 = _mm256_add_ps(x1, _mm256_loadu_ps(cr + 8));                       \
    }                                                                        \
    _mm256_storeu_ps(cr, x0);                                                \
    _mm256_storeu_ps(cr + 8, x1);                                            \
  } while (0)
    ROW(0, c00, c01); ROW(1, c10, c11); ROW(2, c20, c21);
    ROW(3, c30, c31); ROW(4, c40, c41); ROW(5, c50, c51);
#undef ROW
    return;
  }
  _Alignas(32) float t[MR * NR];
  _mm256_store_ps(t + 0 * NR, c00); _mm256_store_ps(t + 0 * NR + 8, c01);
  _mm256_store_ps(t + 1 * NR, c10); _mm256_store_ps(t + 1 * NR + 8, c11);
  _mm256_store_ps(t + 2 * NR, c20); _mm256_store_ps(t + 2 * NR + 8, c21);
  _mm256_store_ps(t + 3 * NR, c30); _mm256_store_ps(t + 3 * NR + 8, c31);
  _mm256_store_ps(t + 4 * NR, c40); _mm256_store_ps(t + 4 * NR + 8, c41);
  _mm256_store_ps(t + 5 * NR, c50); _mm256_store_ps(t + 5 * NR + 8, c51);
  for (int i = 0; i < mr; ++i) {
    float* cr = c + i * ldc;
    if (accumulate) {
      for (int j = 0; j < nr; ++j) cr[j] += t[i * NR + j];
    } else {
      for (int j = 0; j < nr; ++j) cr[j] = t[i * NR + j];
    }
  }
}

/* B[k, n] at b + (k*rs + n) elements (unit stride along n). */
void tpu_k_avx2_pack_b_rows(int64_t kc, int64_t nc, const void* b, int dt, int64_t rs,
                            float* dst) {
  const char* base = (const char*)b;
  size_t es = esz(dt);
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    int64_t nr = nc - j0 < NR ? nc - j0 : NR;
    float* d = dst + j0 * kc;
    if (nr == NR) {
      for (int64_t k = 0; k < kc; ++k) {
        const char* s = base + (size_t)(k * rs + j0) * es;
        _mm256_store_ps(d + k * NR, ld8(s, dt));
        _mm256_store_ps(d + k * NR + 8, ld8(s + 8 * es, dt));
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const char* s = base + (size_t)(k * rs + j0) * es;
        int64_t j = 0;
        for (; j < nr; ++j) d[k * NR + j] = ld1(s + j * es, dt);
        for (; j < NR; ++j) d[k * NR + j] = 0.0f;
      }
    }
  }
}

static inline void transpose8(__m256* r) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* B[k, n] at b + (k + n*cs) elements (unit stride along k: a transposed
 * row-major weight). */
void tpu_k_avx2_pack_b_cols(int64_t kc, int64_t nc, const void* b, int dt, int64_t cs,
                            float* dst) {
  const char* base = (const char*)b;
  size_t es = esz(dt);
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    int64_t nr = nc - j0 < NR ? nc - j0 : NR;
    float* d = dst + j0 * kc;
    int64_t k = 0;
    if (nr == NR) {
      for (; k + 8 <= kc; k += 8) {
        for (int g = 0; g < 2; ++g) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i)
            r[i] = ld8(base + (size_t)(k + (j0 + g * 8 + i) * cs) * es, dt);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_store_ps(d + (k + i) * NR + g * 8, r[i]);
        }
      }
    }
    for (; k < kc; ++k) {
      int64_t j = 0;
      for (; j < nr; ++j) d[k * NR + j] = ld1(base + (size_t)(k + (j0 + j) * cs) * es, dt);
      for (; j < NR; ++j) d[k * NR + j] = 0.0f;
    }
  }
}

/* A panel of mr (<= MR) rows: dst[k*MR + i] = alpha * A[i, k] for k < kc,
 * rows mr..MR-1 zero. A[i, k] at a + (i*rs + k) elements (unit stride
 * along k: a row-major A). Eight k at a time: the rows are loaded as eight
 * vectors (missing rows zero), transposed, and the first MR lanes of each
 * column stored. */
void tpu_k_avx2_pack_a_rows(int64_t kc, int mr, const void* a, int dt, int64_t rs, float alpha,
                            float* dst) {
  const char* base = (const char*)a;
  size_t es = esz(dt);
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = i < mr ? ld8(base + (size_t)(i * rs + k) * es, dt) : _mm256_setzero_ps();
    transpose8(r);
    for (int j = 0; j < 8; ++j) {
      __m256 v = alpha == 1.0f ? r[j] : _mm256_mul_ps(r[j], va);
      float* d = dst + (k + j) * MR;
      _mm_storeu_ps(d, _mm256_castps256_ps128(v));
      _mm_storel_epi64((__m128i_u*)(d + 4), _mm_castps_si128(_mm256_extractf128_ps(v, 1)));
    }
  }
  for (; k < kc; ++k) {
    float* d = dst + k * MR;
    for (int i = 0; i < MR; ++i) d[i] = i < mr ? alpha * ld1(base + (size_t)(i * rs + k) * es, dt) : 0.0f;
  }
}

/* As tpu_k_avx2_pack_a_rows for A[i, k] at a + (i + k*cs) elements (unit
 * stride along rows: a transposed A, as in the weight gradient dY^T @ X). */
void tpu_k_avx2_pack_a_cols(int64_t kc, int mr, const void* a, int dt, int64_t cs, float alpha,
                            float* dst) {
  const char* base = (const char*)a;
  size_t es = esz(dt);
  for (int64_t k = 0; k < kc; ++k) {
    const char* s = base + (size_t)(k * cs) * es;
    float* d = dst + k * MR;
    if (mr == MR && dt == TPU_DTYPE_F32) {
      const float* sf = (const float*)s;
      __m128 lo = _mm_loadu_ps(sf);
      __m128 hi = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i_u*)(sf + 4)));
      if (alpha != 1.0f) {
        lo = _mm_mul_ps(lo, _mm_set1_ps(alpha));
        hi = _mm_mul_ps(hi, _mm_set1_ps(alpha));
      }
      _mm_storeu_ps(d, lo);
      _mm_storel_epi64((__m128i_u*)(d + 4), _mm_castps_si128(hi));
      continue;
    }
    for (int i = 0; i < MR; ++i) d[i] = i < mr ? alpha * ld1(s + (size_t)i * es, dt) : 0.0f;
  }
}

/* dst[i] = src[i] for contiguous f32/bf16/f16 src. */
void tpu_k_avx2_to_f32(int64_t n, const void* src, int dt, float* dst) {
  const char* s = (const char*)src;
  size_t es = esz(dt);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, ld8(s + i * es, dt));
  for (; i < n; ++i) dst[i] = ld1(s + i * es, dt);
}

/* bf16 rows of B against f32 x: one 32-byte load gives 16 bf16, i.e. eight
 * 32-bit words (b[2i], b[2i+1]). A word shifted left by 16 is b[2i] as f32,
 * the word with its low half cleared is b[2i+1]: two integer ops per 16
 * elements and no zero-extension shuffle (vpmovzxwd, which the generic ld8
 * needs per 8 elements). x is copied once per call into the matching order,
 * per 16 elements the 8 even then the 8 odd ones. One B row at a time, start
 * to end (see tpu_k_avx2_gemv_nk). Single-thread, weights in L2/L3 (2026-12-07, with
 * other processes loading the machine): 1.1-1.4x the ld8 loop at the
 * SmolLM2/Qwen3 projection shapes. */
enum { GEMV_BF16_KB = 2048 };

static void gemv_nk_bf16(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb, const float* x,
                         float* acc) {
  _Alignas(32) float xs[GEMV_BF16_KB];
  const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
  for (int64_t k0 = 0; k0 < kc; k0 += GEMV_BF16_KB) {
    int64_t kb = kc - k0 < GEMV_BF16_KB ? kc - k0 : GEMV_BF16_KB;
    int64_t k16 = kb & ~(int64_t)15, k32 = kb & ~(int64_t)31;
    const float* xk = x + k0;
    for (int64_t k = 0; k < k16; k += 16)
      for (int i = 0; i < 8; ++i) {
        xs[k + i] = xk[k + 2 * i];
        xs[k + 8 + i] = xk[k + 2 * i + 1];
      }
    for (int64_t j = 0; j < nn; ++j) {
      const uint16_t* r = b + j * ldb + k0;
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
      __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k < k32; k += 32) {
        __m256i v0 = _mm256_loadu_si256((const __m256i*)(r + k));
        __m256i v1 = _mm256_loadu_si256((const __m256i*)(r + k + 16));
        s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_load_ps(xs + k), s0);
        s1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi_mask)), _mm256_load_ps(xs + k + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), _mm256_load_ps(xs + k + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, hi_mask)), _mm256_load_ps(xs + k + 24), s3);
      }
      if (k < k16) {
        __m256i v0 = _mm256_loadu_si256((const __m256i*)(r + k));
        s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_load_ps(xs + k), s0);
        s1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi_mask)), _mm256_load_ps(xs + k + 8), s1);
        k += 16;
      }
      float t = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
      for (; k < kb; ++k) t += tpu_ku_bf16_to_f32(r[k]) * xk[k];
      acc[j] += t;
    }
  }
}

/* acc[j] += sum_k x[k] * B[j, k]; row j at b + j*ldb elements, unit stride
 * along k. One row at a time, start to end: rows are short (a linear
 * layer's K), and reading several rows interleaved makes as many short
 * streams, which the hardware prefetcher follows badly (a decode-size
 * GEMV ran at half the bandwidth of reading the rows in order). */
void tpu_k_avx2_gemv_nk(int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                        const float* x, float* acc) {
  if (dt == TPU_DTYPE_BF16) {
    gemv_nk_bf16(nn, kc, (const uint16_t*)b, ldb, x, acc);
    return;
  }
  const char* base = (const char*)b;
  size_t es = esz(dt);
  for (int64_t j = 0; j < nn; ++j) {
    const char* r = base + (size_t)j * ldb * es;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= kc; k += 32) {
      s0 = _mm256_fmadd_ps(ld8(r + k * es, dt), _mm256_loadu_ps(x + k), s0);
      s1 = _mm256_fmadd_ps(ld8(r + (k + 8) * es, dt), _mm256_loadu_ps(x + k + 8), s1);
      s2 = _mm256_fmadd_ps(ld8(r + (k + 16) * es, dt), _mm256_loadu_ps(x + k + 16), s2);
      s3 = _mm256_fmadd_ps(ld8(r + (k + 24) * es, dt), _mm256_loadu_ps(x + k + 24), s3);
    }
    for (; k + 8 <= kc; k += 8) s0 = _mm256_fmadd_ps(ld8(r + k * es, dt), _mm256_loadu_ps(x + k), s0);
    float t = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; k < kc; ++k) t += ld1(r + k * es, dt) * x[k];
    acc[j] += t;
  }
}

/* acc[j] += sum_k x[k] * B[k, j]; row k at b + k*ldb elements, unit stride
 * along j. Four rows at a time, so each pass streams four rows. */
void tpu_k_avx2_gemv_kn(int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                        const float* x, float* acc) {
  const char* base = (const char*)b;
  size_t es = esz(dt);
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const char* r0 = base + (size_t)(k + 0) * ldb * es;
    const char* r1 = base + (size_t)(k + 1) * ldb * es;
    const char* r2 = base + (size_t)(k + 2) * ldb * es;
    const char* r3 = base + (size_t)(k + 3) * ldb * es;
    __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1);
    __m256 x2 = _mm256_broadcast_ss(x + k + 2), x3 = _mm256_broadcast_ss(x + k + 3);
    int64_t j = 0;
    for (; j + 8 <= nn; j += 8) {
      __m256 a = _mm256_loadu_ps(acc + j);
      __m256 t = _mm256_mul_ps(ld8(r0 + j * es, dt), x0);
      t = _mm256_fmadd_ps(ld8(r1 + j * es, dt), x1, t);
      a = _mm256_fmadd_ps(ld8(r2 + j * es, dt), x2, a);
      t = _mm256_fmadd_ps(ld8(r3 + j * es, dt), x3, t);
      _mm256_storeu_ps(acc + j, _mm256_add_ps(a, t));
    }
    for (; j < nn; ++j)
      acc[j] += ld1(r0 + j * es, dt) * x[k] + ld1(r1 + j * es, dt) * x[k + 1] +
                ld1(r2 + j * es, dt) * x[k + 2] + ld1(r3 + j * es, dt) * x[k + 3];
  }
  for (; k < kc; ++k) {
    const char* r0 = base + (size_t)k * ldb * es;
    __m256 x0 = _mm256_broadcast_ss(x + k);
    int64_t j = 0;
    for (; j + 8 <= nn; j += 8)
      _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(ld8(r0 + j * es, dt), x0, _mm256_loadu_ps(acc + j)));
    for (; j < nn; ++j) acc[j] += ld1(r0 + j * es, dt) * x[k];
  }
}

/* ---- exp for softmax (reduce.c) --------------------------------------------
 * Cephes-style polynomial, ~1 ulp; exp(x) = 0 below -87, inf above 88.5, NaN
 * kept. */
static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.5f), _CMP_GT_OQ);
  __m256 c = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), c);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
  return _mm256_blendv_ps(y, x, nan);
}

/* dst[i] = exp(src[i] - sub) (dst == src allowed; dst NULL: nothing
 * stored); returns the sum of the results. */
float tpu_k_avx2_exp_sub_sum(const float* src, float* dst, int64_t n, float sub) {
  __m256 s = _mm256_set1_ps(sub), acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = exp8(_mm256_sub_ps(_mm256_loadu_ps(src + i), s));
    __m256 b = exp8(_mm256_sub_ps(_mm256_loadu_ps(src + i + 8), s));
    if (dst) {
      _mm256_storeu_ps(dst + i, a);
      _mm256_storeu_ps(dst + i + 8, b);
    }
    acc0 = _mm256_add_ps(acc0, a);
    acc1 = _mm256_add_ps(acc1, b);
  }
  float t = hsum(_mm256_add_ps(acc0, acc1));
  if (i < n) {
    _Alignas(32) float tmp[16];
    int64_t m = n - i;
    for (int64_t j = 0; j < 16; ++j) tmp[j] = j < m ? src[i + j] : -__builtin_inff();
    __m256 a = exp8(_mm256_sub_ps(_mm256_load_ps(tmp), s));
    __m256 b = exp8(_mm256_sub_ps(_mm256_load_ps(tmp + 8), s));
    _mm256_store_ps(tmp, a);
    _mm256_store_ps(tmp + 8, b);
    for (int64_t j = 0; j < m; ++j) {
      if (dst) dst[i + j] = tmp[j];
      t += tmp[j];
    }
  }
  return t;
}

/* max (mx != 0) or min of x[0..n), n >= 1; *nan = 1 when x holds a NaN. */
float tpu_k_avx2_extreme(const float* x, int64_t n, int mx, int* nan) {
  __m256 m0 = _mm256_set1_ps(mx ? -__builtin_inff() : __builtin_inff()), m1 = m0;
  __m256 bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    m0 = mx ? _mm256_max_ps(a, m0) : _mm256_min_ps(a, m0);
    m1 = mx ? _mm256_max_ps(b, m1) : _mm256_min_ps(b, m1);
  }
  m0 = mx ? _mm256_max_ps(m0, m1) : _mm256_min_ps(m0, m1);
  _Alignas(32) float t[8];
  _mm256_store_ps(t, m0);
  float r = t[0];
  for (int j = 1; j < 8; ++j) r = mx ? (t[j] > r ? t[j] : r) : (t[j] < r ? t[j] : r);
  int any = _mm256_movemask_ps(bad) != 0;
  for (; i < n; ++i) {
    float v = x[i];
    if (v != v) any = 1;
    if (mx ? v > r : v < r) r = v;
  }
  *nan = any;
  return r;
}

/* ---- small-M GEMM against an nn.Linear-layout B (moe.c) -------------------- */

/* m (<= 4) f32 x rows against nr (<= 4) B rows r[0..nr) with unit stride
 * along k; only the first `nv` results are stored. `dt`, `m` and `nr` are
 * compile-time constants at every call site, so the m*nr accumulators live in
 * registers and the dtype switch leaves the loop. */
static inline __attribute__((always_inline)) void nk_block(int m, int nr, int dt, int64_t kc,
                                                           const char* const* r, int nv, const float* x,
                                                           int64_t ldx, float* acc, int64_t ldacc) {
  __m256 s[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) s[i][j] = _mm256_setzero_ps();
  size_t es = esz(dt);
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 w[4];
    for (int j = 0; j < nr; ++j) w[j] = ld8(r[j] + k * es, dt);
    for (int i = 0; i < m; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < nr; ++j) s[i][j] = _mm256_fmadd_ps(w[j], xv, s[i][j]);
    }
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < nr; ++j) {
      if (j >= nv) break;
      float t = hsum(s[i][j]);
      for (int64_t kk = k; kk < kc; ++kk) t += ld1(r[j] + kk * es, dt) * x[i * ldx + kk];
      acc[i * ldacc + j] += t;
    }
  }
}

static inline __attribute__((always_inline)) void nk_rows_dt(int dt, int64_t mr, int64_t nn, int64_t kc,
                                                             const char* b, int64_t ldb, const float* x,
                                                             int64_t ldx, float* acc, int64_t ldacc) {
  size_t es = esz(dt);
  for (int64_t j = 0; j < nn; j += 4) {
    int nv = nn - j < 4 ? (int)(nn - j) : 4;
    const char* r[4];
    for (int q = 0; q < 4; ++q) r[q] = b + (size_t)(j + (q < nv ? q : 0)) * (size_t)ldb * es;
    /* two x rows at a time: 8 accumulators; the four B rows come from cache
     * after the first pair (MO_KC in moe.c keeps them in L1) */
    for (int64_t i = 0; i < mr; i += 2) {
      const float* xi = x + i * ldx;
      float* ai = acc + i * ldacc + j;
      if (mr - i == 1)
        nk_block(1, 4, dt, kc, r, nv, xi, ldx, ai, ldacc);
      else
        nk_block(2, 4, dt, kc, r, nv, xi, ldx, ai, ldacc);
    }
  }
}

/* acc[i*ldacc + j] += sum_k x[i*ldx + k] * B[j, k] for i < mr, j < nn, where
 * B row j starts at b + j*ldb elements with unit stride along k (dt f32, bf16
 * or f16). Four B rows at a time against every x row (two at a time), so B
 * is streamed from memory once and x stays in L1/L2. */
void tpu_k_avx2_gemm_nk_rows(int64_t mr, int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                             const float* x, int64_t ldx, float* acc, int64_t ldacc) {
  const char* bp = (const char*)b;
  switch (dt) {
    case TPU_DTYPE_BF16: nk_rows_dt(TPU_DTYPE_BF16, mr, nn, kc, bp, ldb, x, ldx, acc, ldacc); break;
    case TPU_DTYPE_F16: nk_rows_dt(TPU_DTYPE_F16, mr, nn, kc, bp, ldb, x, ldx, acc, ldacc); break;
    default: nk_rows_dt(TPU_DTYPE_F32, mr, nn, kc, bp, ldb, x, ldx, acc, ldacc); break;
  }
}
