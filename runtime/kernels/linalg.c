/* linalg.c - kernel family "linalg" (see tpu/kernels.h for the ABI): mm, bmm,
 * addmm, baddbmm, addbmm, addmv, mv, dot.
 *
 * float32/f16/bf16: packed, cache-blocked GEMM (MRxNR register tiles,
 * KCxNC B panels, MCxKC A blocks, all on the stack), inputs converted to f32
 * while packing, f32 accumulation. M==1 / N==1 use a GEMV that streams the
 * matrix once. bf16 x bf16 on CPUs with AVX512_BF16 keeps the operands in
 * bf16 and multiplies pairs with vdpbf16ps (f32 accumulation; see "bf16 x
 * bf16" below). f64 and integer dtypes use plain loops. */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/kutil.h"

#if defined(__x86_64__)
#define LA_X86 1
/* arch/x86_64/gemm_avx2.c */
void tpu_k_avx2_sgemm_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                           int accumulate, int mr, int nr);
void tpu_k_avx2_pack_b_rows(int64_t kc, int64_t nc, const void* b, int dt, int64_t rs,
                            float* dst);
void tpu_k_avx2_pack_b_cols(int64_t kc, int64_t nc, const void* b, int dt, int64_t cs,
                            float* dst);
void tpu_k_avx2_pack_a_rows(int64_t kc, int mr, const void* a, int dt, int64_t rs, float alpha,
                            float* dst);
void tpu_k_avx2_pack_a_cols(int64_t kc, int mr, const void* a, int dt, int64_t cs, float alpha,
                            float* dst);
void tpu_k_avx2_to_f32(int64_t n, const void* src, int dt, float* dst);
void tpu_k_avx2_gemv_nk(int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                        const float* x, float* acc);
void tpu_k_avx2_gemv_kn(int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                        const float* x, float* acc);
/* arch/x86_64/elementwise_avx2.c */
void tpu_k_avx2_f32_to_bf16(uint16_t* restrict o, const float* restrict a, int64_t n);
#else
#define LA_X86 0
#endif

#if LA_X86 && defined(TPU_HAVE_AVX512BF16)
#define LA_BF16DP 1
/* arch/x86_64/gemm_avx512bf16.c */
void tpu_k_avx512bf16_pack_b(int64_t kc, int64_t nr, const uint16_t* b, int64_t rs, int64_t cs,
                             uint16_t* dst);
void tpu_k_avx512bf16_gemm_8x32(int64_t kc, const uint16_t* a, int64_t lda, int mr,
                                const uint16_t* bp, float* acc, int accumulate);
void tpu_k_avx512bf16_dot_nk(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb, int ms,
                             const uint16_t* x, int64_t ldx, float* acc, int64_t ldacc);
void tpu_k_avx512bf16_gemv_kn(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb,
                              const uint16_t* x, float* acc);
void tpu_k_avx512bf16_store(int64_t n, const float* acc, float alpha, const void* bias,
                            int bias_dt, int64_t bias_cs, float beta, void* c, int c_dt);
#else
#define LA_BF16DP 0
#endif

enum {
  LA_MR = 6,
  LA_NR = 16,
  LA_KC = 128,
  LA_NC = 256,  /* B panel columns (direct path) */
  LA_MC = 96,   /* A block rows */
  LA_NCB = 128, /* tile columns when accumulating into a scratch tile */
  LA_GV_NB = 1024, /* max GEMV columns per task */
  LA_GV_KB = 2048,
  /* bf16 x bf16 with vdpbf16ps (gemm_avx512bf16.c) */
  LA_BMR = 8,
  LA_BNR = 32,
  LA_BKC = 2048,  /* K per packed B micro-panel (even) */
  LA_BMC = 256,   /* max rows per task (its f32 strip is LA_BMC x LA_BNR) */
  LA_BDOT_M = 4,  /* up to this many rows: dot products along K, no packing */
};

static int64_t la_min(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t la_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bool la_use_avx2(void) {
#if LA_X86
  return tpu_ku_use_avx2();
#else
  return false;
#endif
}

static bool la_is_half_or_f32(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}

static inline float la_ldf(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
    default: return (float)tpu_ku_load_f64(p, dt);
  }
}

static inline void la_stf(char* p, int dt, float v) {
  switch (dt) {
    case TPU_DTYPE_F32: *(float*)p = v; break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16(v); break;
    case TPU_DTYPE_F16: *(uint16_t*)p = tpu_ku_f32_to_f16(v); break;
    default: tpu_ku_store_f64(p, dt, v); break;
  }
}

/* ---- problem description --------------------------------------------------- */

/* A (batched) matrix view; strides in elements. */
typedef struct {
  const char* p;
  int32_t dt;
  int32_t es;
  int64_t bs, rs, cs;
} la_mat_t;

static inline const char* la_at(const la_mat_t* m, int64_t b, int64_t r, int64_t c) {
  return m->p + (b * m->bs + r * m->rs + c * m->cs) * (int64_t)m->es;
}

/* C[b] = beta * bias[b] + alpha * A[b] @ B[b]; A is MxK, B is KxN. */
typedef struct {
  int64_t batch, M, N, K;
  la_mat_t a, b, c, bias; /* bias.p == NULL: none (or beta == 0) */
  double alpha, beta;
  int64_t alpha_i, beta_i;
  bool avx2;
  /* packed-path decomposition */
  bool direct; /* accumulate straight into C (f32, unit column stride) */
  int64_t mchunk, nchunk, mtiles, ntiles;
  int64_t gv_nb; /* GEMV columns per task */
} la_gemm_t;

#if LA_BF16DP
static void la_bf16_run(la_gemm_t* g, tpu_threadpool_t* pool, int nthreads);
static bool la_bf16_ok(la_gemm_t* g);
#endif

static la_mat_t la_mat(const tpu_tensor_t* t, int64_t rows, int64_t cols) {
  la_mat_t m;
  m.p = (const char*)t->data;
  m.dt = t->dtype;
  m.es = (int32_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  m.bs = m.rs = m.cs = 0;
  if (t->ndim == 3) {
    m.bs = t->strides[0];
    m.rs = t->strides[1];
    m.cs = t->strides[2];
  } else if (t->ndim == 2) {
    m.rs = t->strides[0];
    m.cs = t->strides[1];
  }
  if (rows == 1) m.rs = 1; /* degenerate dims: any stride; 1 keeps layout tests simple */
  if (cols == 1) m.cs = 1;
  return m;
}

/* Bias `t` broadcast (right-aligned) to [batch?, rows, cols] of rank `nd`. */
static la_mat_t la_bias(const tpu_tensor_t* t, int nd) {
  la_mat_t m;
  int64_t st[3] = {0, 0, 0};
  int off = nd - t->ndim;
  for (int d = 0; d < t->ndim; ++d) st[off + d] = t->sizes[d] == 1 ? 0 : t->strides[d];
  m.p = (const char*)t->data;
  m.dt = t->dtype;
  m.es = (int32_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  if (nd == 3) {
    m.bs = st[0]; m.rs = st[1]; m.cs = st[2];
  } else {
    m.bs = 0; m.rs = st[0]; m.cs = st[1];
  }
  return m;
}

static void la_transpose(la_gemm_t* g) {
  int64_t t = g->M;
  g->M = g->N;
  g->N = t;
  la_mat_t a = g->a;
  g->a = g->b;
  g->b = a;
  t = g->a.rs; g->a.rs = g->a.cs; g->a.cs = t;
  t = g->b.rs; g->b.rs = g->b.cs; g->b.cs = t;
  t = g->c.rs; g->c.rs = g->c.cs; g->c.cs = t;
  t = g->bias.rs; g->bias.rs = g->bias.cs; g->bias.cs = t;
}

/* ---- packing ------------------------------------------------------------------ */

/* dst: ceil(nc/NR) panels of kc x NR floats (zero padded). */
static void la_pack_b(const la_gemm_t* g, int64_t bi, int64_t pc, int64_t kc, int64_t n0,
                      int64_t nc, float* dst) {
  const la_mat_t* B = &g->b;
  const char* src = la_at(B, bi, pc, n0);
#if LA_X86
  if (g->avx2 && la_is_half_or_f32(B->dt)) {
    if (B->cs == 1 || nc == 1) {
      tpu_k_avx2_pack_b_rows(kc, nc, src, B->dt, B->rs, dst);
      return;
    }
    if (B->rs == 1 || kc == 1) {
      tpu_k_avx2_pack_b_cols(kc, nc, src, B->dt, B->cs, dst);
      return;
    }
  }
#endif
  int64_t es = B->es;
  for (int64_t j0 = 0; j0 < nc; j0 += LA_NR) {
    int64_t nr = la_min(LA_NR, nc - j0);
    float* d = dst + j0 * kc;
    if (B->dt == TPU_DTYPE_F32 && B->cs == 1 && nr == LA_NR) {
      for (int64_t k = 0; k < kc; ++k)
        memcpy(d + k * LA_NR, src + (k * B->rs + j0) * es, LA_NR * sizeof(float));
      continue;
    }
    for (int64_t j = 0; j < nr; ++j) {
      const char* s = src + (j0 + j) * B->cs * es;
      for (int64_t k = 0; k < kc; ++k) d[k * LA_NR + j] = la_ldf(s + k * B->rs * es, B->dt);
    }
    for (int64_t j = nr; j < LA_NR; ++j)
      for (int64_t k = 0; k < kc; ++k) d[k * LA_NR + j] = 0.0f;
  }
}

/* dst: ceil(mc/MR) panels of kc x MR floats (zero padded), scaled by alpha. */
static void la_pack_a(const la_gemm_t* g, int64_t bi, int64_t ic, int64_t mc, int64_t pc,
                      int64_t kc, float* dst) {
  const la_mat_t* A = &g->a;
  const char* src = la_at(A, bi, ic, pc);
  int64_t es = A->es;
  float alpha = (float)g->alpha;
  for (int64_t i0 = 0; i0 < mc; i0 += LA_MR) {
    int64_t mr = la_min(LA_MR, mc - i0);
    float* d = dst + i0 * kc;
#if LA_X86
    if (g->avx2 && la_is_half_or_f32(A->dt)) {
      const char* s = src + i0 * A->rs * es;
      if (A->cs == 1 || kc == 1) {
        tpu_k_avx2_pack_a_rows(kc, (int)mr, s, A->dt, A->rs, alpha, d);
        continue;
      }
      if (A->rs == 1 || mr == 1) {
        tpu_k_avx2_pack_a_cols(kc, (int)mr, s, A->dt, A->cs, alpha, d);
        continue;
      }
    }
#endif
    for (int64_t i = 0; i < mr; ++i) {
      const char* s = src + (i0 + i) * A->rs * es;
      if (A->dt == TPU_DTYPE_F32 && A->cs == 1) {
        const float* sf = (const float*)s;
        for (int64_t k = 0; k < kc; ++k) d[k * LA_MR + i] = sf[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) d[k * LA_MR + i] = la_ldf(s + k * A->cs * es, A->dt);
      }
    }
    for (int64_t i = mr; i < LA_MR; ++i)
      for (int64_t k = 0; k < kc; ++k) d[k * LA_MR + i] = 0.0f;
    if (alpha != 1.0f)
      for (int64_t k = 0; k < kc * LA_MR; ++k) d[k] *= alpha;
  }
}

static void la_micro_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             int accumulate, int mr, int nr) {
  float acc[LA_MR][LA_NR];
  memset(acc, 0, sizeof(acc));
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * LA_NR;
    for (int i = 0; i < LA_MR; ++i) {
      float ai = a[k * LA_MR + i];
      for (int j = 0; j < LA_NR; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < mr; ++i) {
    float* cr = c + i * ldc;
    if (accumulate) {
      for (int j = 0; j < nr; ++j) cr[j] += acc[i][j];
    } else {
      for (int j = 0; j < nr; ++j) cr[j] = acc[i][j];
    }
  }
}

/* C[m0:m1, n0:n1] (= C ptr, row stride ldc, unit column stride, float)
 * (+)= alpha * A @ B over all of K. `acc0`: accumulate onto C's contents. */
static void la_sgemm_block(const la_gemm_t* g, int64_t bi, int64_t m0, int64_t m1, int64_t n0,
                           int64_t n1, float* C, int64_t ldc, bool acc0) {
  _Alignas(64) float bpack[LA_KC * LA_NC];
  _Alignas(64) float apack[LA_MC * LA_KC];
  int64_t nc = n1 - n0;
  for (int64_t pc = 0; pc < g->K; pc += LA_KC) {
    int64_t kc = la_min(LA_KC, g->K - pc);
    int accumulate = (pc > 0 || acc0) ? 1 : 0;
    la_pack_b(g, bi, pc, kc, n0, nc, bpack);
    for (int64_t ic = m0; ic < m1; ic += LA_MC) {
      int64_t mc = la_min(LA_MC, m1 - ic);
      la_pack_a(g, bi, ic, mc, pc, kc, apack);
      for (int64_t jr = 0; jr < nc; jr += LA_NR) {
        int nr = (int)la_min(LA_NR, nc - jr);
        for (int64_t ir = 0; ir < mc; ir += LA_MR) {
          int mr = (int)la_min(LA_MR, mc - ir);
          float* cp = C + (ic - m0 + ir) * ldc + jr;
#if LA_X86
          if (g->avx2) {
            tpu_k_avx2_sgemm_6x16(kc, apack + ir * kc, bpack + jr * kc, cp, ldc, accumulate, mr, nr);
            continue;
          }
#endif
          la_micro_generic(kc, apack + ir * kc, bpack + jr * kc, cp, ldc, accumulate, mr, nr);
        }
      }
    }
  }
}

static inline float la_bias_f(const la_gemm_t* g, int64_t bi, int64_t m, int64_t n) {
  return (float)g->beta * la_ldf(la_at(&g->bias, bi, m, n), g->bias.dt);
}

static void la_sgemm_task(const la_gemm_t* g, int64_t t) {
  int64_t per_batch = g->mtiles * g->ntiles;
  int64_t bi = t / per_batch, r = t % per_batch;
  int64_t m0 = (r / g->ntiles) * g->mchunk, n0 = (r % g->ntiles) * g->nchunk;
  int64_t m1 = la_min(g->M, m0 + g->mchunk), n1 = la_min(g->N, n0 + g->nchunk);
  if (g->direct) {
    float* C = (float*)la_at(&g->c, bi, m0, n0);
    int64_t ldc = g->c.rs;
    bool acc0 = false;
    if (g->bias.p) {
      bool same = g->bias.p == g->c.p && g->bias.dt == TPU_DTYPE_F32 && g->bias.bs == g->c.bs &&
                  g->bias.rs == g->c.rs && g->bias.cs == g->c.cs;
      if (!(same && g->beta == 1.0)) {
        if (g->bias.dt == TPU_DTYPE_F32 && g->bias.cs == 1) { /* rows of f32 (a broadcast bias: rs 0) */
          float beta = (float)g->beta;
          for (int64_t m = m0; m < m1; ++m) {
            const float* src = (const float*)la_at(&g->bias, bi, m, n0);
            float* dst = C + (m - m0) * ldc;
            for (int64_t n = 0; n < n1 - n0; ++n) dst[n] = beta * src[n];
          }
        } else {
          for (int64_t m = m0; m < m1; ++m)
            for (int64_t n = n0; n < n1; ++n) C[(m - m0) * ldc + (n - n0)] = la_bias_f(g, bi, m, n);
        }
      }
      acc0 = true;
    }
    la_sgemm_block(g, bi, m0, m1, n0, n1, C, ldc, acc0);
    return;
  }
  _Alignas(64) float cbuf[LA_MC * LA_NCB];
  int64_t ldc = n1 - n0;
  la_sgemm_block(g, bi, m0, m1, n0, n1, cbuf, ldc, false);
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t n = n0; n < n1; ++n) {
      float v = cbuf[(m - m0) * ldc + (n - n0)];
      if (g->bias.p) v += la_bias_f(g, bi, m, n);
      la_stf((char*)la_at(&g->c, bi, m, n), g->c.dt, v);
    }
  }
}

static void la_sgemm_par(void* ctx, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) la_sgemm_task((const la_gemm_t*)ctx, t);
}

/* ---- GEMV (M == 1) ---------------------------------------------------------- */

static void la_load_f32_run(const char* p, int dt, int64_t stride, int64_t n, bool avx2,
                            float* dst) {
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
#if LA_X86
  if (avx2 && stride == 1 && la_is_half_or_f32(dt)) {
    tpu_k_avx2_to_f32(n, p, dt, dst);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = la_ldf(p + i * stride * es, dt);
}

static void la_gemv_task(const la_gemm_t* g, int64_t t) {
  int64_t nblocks = la_cdiv(g->N, g->gv_nb);
  int64_t bi = t / nblocks;
  int64_t n0 = (t % nblocks) * g->gv_nb, nn = la_min(g->gv_nb, g->N - n0);
  float acc[LA_GV_NB];
  float xbuf[LA_GV_KB];
  const la_mat_t* B = &g->b;
  for (int64_t j = 0; j < nn; ++j) acc[j] = 0.0f;
  for (int64_t k0 = 0; k0 < g->K; k0 += LA_GV_KB) {
    int64_t kb = la_min(LA_GV_KB, g->K - k0);
    la_load_f32_run(la_at(&g->a, bi, 0, k0), g->a.dt, g->a.cs, kb, g->avx2, xbuf);
    const char* bp = la_at(B, bi, k0, n0);
    bool half = la_is_half_or_f32(B->dt);
#if LA_X86
    if (g->avx2 && half && (B->cs == 1 || nn == 1)) {
      tpu_k_avx2_gemv_kn(nn, kb, bp, B->dt, B->rs, xbuf, acc);
      continue;
    }
    if (g->avx2 && half && (B->rs == 1 || kb == 1)) {
      tpu_k_avx2_gemv_nk(nn, kb, bp, B->dt, B->cs, xbuf, acc);
      continue;
    }
#endif
    (void)half;
    int64_t es = B->es;
    if (B->rs == 1 || kb == 1) {
      for (int64_t j = 0; j < nn; ++j) {
        const char* r = bp + j * B->cs * es;
        float s = 0.0f;
        for (int64_t k = 0; k < kb; ++k) s += la_ldf(r + k * es, B->dt) * xbuf[k];
        acc[j] += s;
      }
    } else {
      for (int64_t k = 0; k < kb; ++k) {
        const char* r = bp + k * B->rs * es;
        float xk = xbuf[k];
        for (int64_t j = 0; j < nn; ++j) acc[j] += la_ldf(r + j * B->cs * es, B->dt) * xk;
      }
    }
  }
  float alpha = (float)g->alpha;
  for (int64_t j = 0; j < nn; ++j) {
    float v = alpha * acc[j];
    if (g->bias.p) v += la_bias_f(g, bi, 0, n0 + j);
    la_stf((char*)la_at(&g->c, bi, 0, n0 + j), g->c.dt, v);
  }
}

/* Columns per GEMV task: 2 equal tasks per thread (multiples of 8 columns,
 * at most LA_GV_NB). Each task streams its block of B start to end, so fewer,
 * longer streams read faster: a 192x576 fp32 GEMV ran at 14-17 GB/s with 4
 * tasks of 32 columns per thread and 20-27 GB/s with 2 tasks of 48; 576x576
 * and 1536x576 gained about 5%. */
static int64_t la_gemv_block(int64_t n, int nthreads) {
  int64_t nb = la_cdiv(la_cdiv(n, 2 * (int64_t)nthreads), 8) * 8;
  return nb < 8 ? 8 : nb > LA_GV_NB ? LA_GV_NB : nb;
}

static void la_gemv_par(void* ctx, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) la_gemv_task((const la_gemm_t*)ctx, t);
}

/* ---- plain loops: small float problems, f64, integers ------------------------
 * Floating products accumulate with fused multiply-adds along K, as the CPU's
 * BLAS does (addbmm's per-batch sums then equal the CPU's to the bit where MKL
 * runs its Intel kernels; on AMD its order differs by an ulp or two). */

static inline __attribute__((always_inline)) void la_naive_row(const la_gemm_t* g, int64_t row) {
  int64_t bi = row / g->M, m = row % g->M;
  int cls = g->c.dt;
  for (int64_t n = 0; n < g->N; ++n) {
    char* cp = (char*)la_at(&g->c, bi, m, n);
    if (cls == TPU_DTYPE_F64) {
      double s = 0.0;
      for (int64_t k = 0; k < g->K; ++k)
        s = fma(tpu_ku_load_f64(la_at(&g->a, bi, m, k), g->a.dt), tpu_ku_load_f64(la_at(&g->b, bi, k, n), g->b.dt), s);
      double v = g->alpha * s;
      if (g->bias.p) v += g->beta * tpu_ku_load_f64(la_at(&g->bias, bi, m, n), g->bias.dt);
      *(double*)cp = v;
    } else if (tpu_dtype_is_floating((tpu_dtype_t)cls)) {
      float s = 0.0f;
      for (int64_t k = 0; k < g->K; ++k)
        s = fmaf(la_ldf(la_at(&g->a, bi, m, k), g->a.dt), la_ldf(la_at(&g->b, bi, k, n), g->b.dt), s);
      float v = (float)g->alpha * s;
      if (g->bias.p) v += la_bias_f(g, bi, m, n);
      la_stf(cp, cls, v);
    } else {
      uint64_t s = 0;
      for (int64_t k = 0; k < g->K; ++k)
        s += (uint64_t)tpu_ku_load_i64(la_at(&g->a, bi, m, k), g->a.dt) *
             (uint64_t)tpu_ku_load_i64(la_at(&g->b, bi, k, n), g->b.dt);
      uint64_t v = (uint64_t)g->alpha_i * s;
      if (g->bias.p)
        v += (uint64_t)g->beta_i * (uint64_t)tpu_ku_load_i64(la_at(&g->bias, bi, m, n), g->bias.dt);
      tpu_ku_store_i64(cp, cls, (int64_t)v);
    }
  }
}

static void la_naive_par(void* ctx, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) la_naive_row((const la_gemm_t*)ctx, r);
}

#if LA_X86
/* the same loops with fma()/fmaf() as instructions (CPUs with FMA: g->avx2) */
__attribute__((target("fma"))) static void la_naive_par_fma(void* ctx, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) la_naive_row((const la_gemm_t*)ctx, r);
}
#endif

/* ---- driver --------------------------------------------------------------------- */

static void la_gemm_run(la_gemm_t* g, tpu_threadpool_t* pool) {
  if (g->batch == 0 || g->M == 0 || g->N == 0) return;
  if (g->bias.p && g->beta == 0.0 && g->beta_i == 0) g->bias.p = NULL;
  int nthreads = tpu_threadpool_size(pool);
  bool fl = la_is_half_or_f32(g->c.dt) && la_is_half_or_f32(g->a.dt) && la_is_half_or_f32(g->b.dt);
  double flops = (double)g->batch * (double)g->M * (double)g->N * (double)g->K;
  if (!fl || g->K == 0 || flops <= 4096.0) {
    int64_t rows = g->batch * g->M;
    int64_t grain = (int64_t)(1 + 32768.0 / ((double)g->N * (double)(g->K + 1)));
#if LA_X86
    if (la_use_avx2()) {
      tpu_parallel_for(pool, rows, grain, la_naive_par_fma, g);
      return;
    }
#endif
    tpu_parallel_for(pool, rows, grain, la_naive_par, g);
    return;
  }
  g->avx2 = la_use_avx2();
  /* Keep the output's unit stride on the column side. */
  if (g->c.cs != 1 && (g->c.rs == 1 || g->N == 1)) la_transpose(g);
  if (g->M > 1 && g->N == 1) la_transpose(g);
#if LA_BF16DP
  if (la_bf16_ok(g)) {
    la_bf16_run(g, pool, nthreads);
    return;
  }
#endif
  if (g->N > 1 && g->M == 1) {
    g->gv_nb = la_gemv_block(g->N, nthreads);
    int64_t tasks = g->batch * la_cdiv(g->N, g->gv_nb);
    tpu_parallel_for(pool, tasks, 1, la_gemv_par, g);
    return;
  }
  g->direct = g->c.dt == TPU_DTYPE_F32 && g->c.cs == 1;
  int64_t target = nthreads > 1 ? 2 * (int64_t)nthreads : 1;
  if (g->direct) {
    /* Every task packs its own B columns (K x nchunk) and A rows (mchunk x
     * K): split the longer side first, so that a task's packing stays
     * small next to its mchunk x nchunk x K multiply-adds. */
    g->nchunk = la_min(g->N, LA_NC);
    g->ntiles = la_cdiv(g->N, g->nchunk);
    g->mchunk = g->M;
    g->mtiles = 1;
    while (g->batch * g->ntiles * g->mtiles < target) {
      bool m_ok = g->mchunk > 4 * LA_MR, n_ok = g->nchunk > 4 * LA_NR;
      if (!m_ok && !n_ok) break;
      if (m_ok && (!n_ok || g->mchunk >= g->nchunk)) {
        g->mchunk = la_cdiv(la_cdiv(g->mchunk, 2), LA_MR) * LA_MR;
        g->mtiles = la_cdiv(g->M, g->mchunk);
      } else {
        g->nchunk = la_cdiv(la_cdiv(g->nchunk, 2), LA_NR) * LA_NR;
        g->ntiles = la_cdiv(g->N, g->nchunk);
      }
    }
  } else {
    g->nchunk = LA_NCB;
    g->mchunk = LA_MC;
    g->ntiles = la_cdiv(g->N, g->nchunk);
    g->mtiles = la_cdiv(g->M, g->mchunk);
  }
  tpu_parallel_for(pool, g->batch * g->mtiles * g->ntiles, 1, la_sgemm_par, g);
}

/* ---- bf16 x bf16 with AVX512_BF16 ------------------------------------------------
 * Operands stay bf16: vdpbf16ps multiplies pairs along K and accumulates in
 * f32. A is read in place (rows need unit stride along K); B is packed per
 * 32-column micro-panel into the pair-interleaved layout (or read in place by
 * the dot-product kernel when A has few rows and B's columns are contiguous,
 * i.e. a row-major weight as in linear()). alpha, bias and the conversion to
 * the output dtype are applied once, on the f32 sums. */
#if LA_BF16DP

static bool la_bf16_ok(la_gemm_t* g) {
  if (g->a.dt != TPU_DTYPE_BF16 || g->b.dt != TPU_DTYPE_BF16 || !la_is_half_or_f32(g->c.dt))
    return false;
  if (g->bias.p && !la_is_half_or_f32(g->bias.dt)) return false;
  if (!tpu_ku_use_avx512bf16()) return false;
  if (g->M == 1) /* GEMV: x any stride (gathered), B rows or columns contiguous */
    return g->b.rs == 1 || g->b.cs == 1;
  if (g->a.cs != 1 && g->b.rs == 1) la_transpose(g); /* C^T = B^T A^T: B^T rows are contiguous */
  return g->a.cs == 1;
}

/* C[bi, m, n0 .. n0+nn) = alpha * acc + beta * bias. */
static void la_bf16_out(const la_gemm_t* g, int64_t bi, int64_t m, int64_t n0, int64_t nn,
                        const float* acc) {
  const la_mat_t* bs = &g->bias;
  const void* bp = bs->p ? la_at(bs, bi, m, n0) : NULL;
  char* cp = (char*)la_at(&g->c, bi, m, n0);
  bool cvec = g->c.cs == 1 && (g->c.dt == TPU_DTYPE_F32 || g->c.dt == TPU_DTYPE_BF16);
  bool bvec = !bp || ((bs->dt == TPU_DTYPE_F32 || bs->dt == TPU_DTYPE_BF16) && (bs->cs == 0 || bs->cs == 1));
  if (cvec && bvec) {
    tpu_k_avx512bf16_store(nn, acc, (float)g->alpha, bp, bs->dt, bs->cs, (float)g->beta, cp, g->c.dt);
    return;
  }
  float alpha = (float)g->alpha;
  for (int64_t j = 0; j < nn; ++j) {
    float v = alpha * acc[j];
    if (bp) v += la_bias_f(g, bi, m, n0 + j);
    la_stf(cp + j * g->c.cs * g->c.es, g->c.dt, v);
  }
}

/* Few rows (M <= LA_BDOT_M, or M == 1 with B rows contiguous): one task per
 * column block, streaming B once. */
static void la_bf16_gemv_task(const la_gemm_t* g, int64_t t) {
  int64_t nblocks = la_cdiv(g->N, g->gv_nb);
  int64_t bi = t / nblocks;
  int64_t n0 = (t % nblocks) * g->gv_nb, nn = la_min(g->gv_nb, g->N - n0);
  int ms = (int)g->M;
  _Alignas(64) float acc[LA_BDOT_M * LA_GV_NB];
  _Alignas(64) uint16_t xbuf[LA_GV_KB];
  const la_mat_t* B = &g->b;
  for (int64_t j = 0; j < ms * nn; ++j) acc[j] = 0.0f;
  for (int64_t k0 = 0; k0 < g->K; k0 += LA_GV_KB) {
    int64_t kb = la_min(LA_GV_KB, g->K - k0);
    const uint16_t* x = (const uint16_t*)la_at(&g->a, bi, 0, k0);
    int64_t ldx = g->a.rs;
    if (g->a.cs != 1) { /* M == 1 here */
      for (int64_t k = 0; k < kb; ++k) xbuf[k] = x[k * g->a.cs];
      x = xbuf;
      ldx = 0;
    }
    const uint16_t* bp = (const uint16_t*)la_at(B, bi, k0, n0);
    if (B->rs == 1 || kb == 1)
      tpu_k_avx512bf16_dot_nk(nn, kb, bp, B->cs, ms, x, ldx, acc, nn);
    else
      tpu_k_avx512bf16_gemv_kn(nn, kb, bp, B->rs, x, acc);
  }
  for (int m = 0; m < ms; ++m) la_bf16_out(g, bi, m, n0, nn, acc + m * nn);
}

static void la_bf16_gemv_par(void* ctx, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) la_bf16_gemv_task((const la_gemm_t*)ctx, t);
}

/* One task: rows [m0, m1) x columns [n0, n1) of batch bi. Per 32-column
 * micro-panel and K block, B is packed once and swept by all row tiles. */
static void la_bf16_gemm_task(const la_gemm_t* g, int64_t t) {
  int64_t per_batch = g->mtiles * g->ntiles;
  int64_t bi = t / per_batch, r = t % per_batch;
  int64_t m0 = (r / g->ntiles) * g->mchunk, n0 = (r % g->ntiles) * g->nchunk;
  int64_t m1 = la_min(g->M, m0 + g->mchunk), n1 = la_min(g->N, n0 + g->nchunk);
  _Alignas(64) uint16_t bpack[LA_BKC / 2 * 2 * LA_BNR];
  _Alignas(64) float strip[LA_BMC * LA_BNR]; /* f32 sums, row stride LA_BNR */
  const la_mat_t* A = &g->a;
  const la_mat_t* B = &g->b;
  for (int64_t jr = n0; jr < n1; jr += LA_BNR) {
    int64_t nr = la_min(LA_BNR, n1 - jr);
    for (int64_t pc = 0; pc < g->K; pc += LA_BKC) {
      int64_t kc = la_min(LA_BKC, g->K - pc);
      bool last = pc + kc >= g->K;
      tpu_k_avx512bf16_pack_b(kc, nr, (const uint16_t*)la_at(B, bi, pc, jr), B->rs, B->cs, bpack);
      for (int64_t ir = m0; ir < m1; ir += LA_BMR) {
        int mr = (int)la_min(LA_BMR, m1 - ir);
        float* acc = strip + (ir - m0) * LA_BNR;
        tpu_k_avx512bf16_gemm_8x32(kc, (const uint16_t*)la_at(A, bi, ir, pc), A->rs, mr, bpack,
                                   acc, pc > 0);
        if (last)
          for (int i = 0; i < mr; ++i) la_bf16_out(g, bi, ir + i, jr, nr, acc + i * LA_BNR);
      }
    }
  }
}

static void la_bf16_gemm_par(void* ctx, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) la_bf16_gemm_task((const la_gemm_t*)ctx, t);
}

static void la_bf16_run(la_gemm_t* g, tpu_threadpool_t* pool, int nthreads) {
  int64_t target = 4 * (int64_t)nthreads;
  bool dot = g->M <= LA_BDOT_M && (g->b.rs == 1 || g->K == 1);
  if (g->M == 1 || dot) {
    g->gv_nb = la_gemv_block(g->N, nthreads);
    tpu_parallel_for(pool, g->batch * la_cdiv(g->N, g->gv_nb), 1, la_bf16_gemv_par, g);
    return;
  }
  /* Rows: at most LA_BMC per task, fewer when K is large so that the task's
   * A rows (read once per micro-panel) stay in L2. Columns: split until there
   * are ~4 tasks per thread. */
  int64_t mmax = la_min(LA_BMC, 262144 / g->K / LA_BMR * LA_BMR); /* A rows: <= 512 KB */
  if (mmax < 4 * LA_BMR) mmax = 4 * LA_BMR;
  g->mtiles = la_cdiv(g->M, mmax);
  g->mchunk = la_cdiv(la_cdiv(g->M, g->mtiles), LA_BMR) * LA_BMR;
  int64_t nsplit = la_cdiv(target, g->batch * g->mtiles); /* >= 1 */
  g->nchunk = la_cdiv(la_cdiv(g->N, nsplit), LA_BNR) * LA_BNR;
  g->ntiles = la_cdiv(g->N, g->nchunk);
  while (g->batch * g->mtiles * g->ntiles < target && g->mchunk > 2 * LA_BMR) {
    g->mchunk = la_cdiv(la_cdiv(g->mchunk, 2), LA_BMR) * LA_BMR;
    g->mtiles = la_cdiv(g->M, g->mchunk);
  }
  tpu_parallel_for(pool, g->batch * g->mtiles * g->ntiles, 1, la_bf16_gemm_par, g);
}

#endif /* LA_BF16DP */

/* ---- float32 products with bfloat16 operands ----------------------------------------
 * Under TPU_K_CALL_BF16_PRODUCTS (torch.set_float32_matmul_precision("medium"),
 * torch.tpu.precision(DEFAULT)) an f32 x f32 product rounds A and B to bf16
 * copies and takes the bf16 x bf16 path above: f32 accumulation, and alpha,
 * beta, the bias and C stay f32, as a TPU's default precision multiplies.
 * Rounding costs one pass over A and B, which pays only where the product is
 * compute bound: both M and N at least LA_BF16_ROUND_MIN (bench section
 * "matmul precision"); smaller products stay f32, as do CPUs without
 * AVX512_BF16 (the setting permits bf16, it does not require it). */
#if LA_BF16DP

enum { LA_BF16_ROUND_MIN = 64 };

/* Copies lines of `src` (rows, or columns when by_cols) to bf16, line t of the
 * flattened batch at dst + t * len. */
typedef struct {
  la_mat_t src;
  uint16_t* dst;
  int64_t lines, len;
  bool by_cols;
} la_round_t;

static void la_round_par(void* ctx, int64_t begin, int64_t end) {
  const la_round_t* r = (const la_round_t*)ctx;
  for (int64_t t = begin; t < end; ++t) {
    int64_t bi = t / r->lines, l = t % r->lines;
    const float* p = (const float*)(r->by_cols ? la_at(&r->src, bi, 0, l) : la_at(&r->src, bi, l, 0));
    int64_t step = r->by_cols ? r->src.rs : r->src.cs;
    uint16_t* o = r->dst + t * r->len;
    if (step == 1) {
      tpu_k_avx2_f32_to_bf16(o, p, r->len);
    } else {
      for (int64_t i = 0; i < r->len; ++i) o[i] = tpu_ku_f32_to_bf16(p[i * step]);
    }
  }
}

static void la_round(la_mat_t* m, int64_t batch, int64_t rows, int64_t cols, bool by_cols, uint16_t* dst,
                     tpu_threadpool_t* pool) {
  la_round_t r = {*m, dst, by_cols ? cols : rows, by_cols ? rows : cols, by_cols};
  int64_t grain = 1 + 16384 / (r.len + 1);
  tpu_parallel_for(pool, batch * r.lines, grain, la_round_par, &r);
  m->p = (const char*)dst;
  m->dt = TPU_DTYPE_BF16;
  m->es = 2;
  m->bs = rows * cols;
  m->rs = by_cols ? 1 : cols;
  m->cs = by_cols ? rows : 1;
}

/* Rounds g's operands when the call permits it and it pays; returns the copies
 * to free after the product (NULL: g unchanged). */
static uint16_t* la_round_operands(const tpu_k_call_t* call, la_gemm_t* g) {
  if (!(call->flags & TPU_K_CALL_BF16_PRODUCTS) || g->a.dt != TPU_DTYPE_F32 || g->b.dt != TPU_DTYPE_F32 ||
      g->M < LA_BF16_ROUND_MIN || g->N < LA_BF16_ROUND_MIN || g->K < 2 || !tpu_ku_use_avx512bf16())
    return NULL;
  int64_t na = g->M * g->K, nb = g->K * g->N;
  uint16_t* buf = (uint16_t*)malloc(sizeof(uint16_t) * (size_t)(g->batch * (na + nb)));
  if (!buf) return NULL; /* f32 is within the permission */
  la_round(&g->a, g->batch, g->M, g->K, false, buf, call->pool);
  /* B keeps its orientation: a transposed weight (linear()) stays K-contiguous. */
  la_round(&g->b, g->batch, g->K, g->N, g->b.rs == 1 && g->b.cs != 1, buf + g->batch * na, call->pool);
  return buf;
}

#endif /* LA_BF16DP */

/* ---- exported tile core (kernels/gemm.h) -------------------------------------------- */

bool tpu_k_gemm_use_avx2(void) { return la_use_avx2(); }

void tpu_k_sgemm_tile(int64_t M, int64_t N, int64_t K, const tpu_k_gemm_mat_t* a,
                      const tpu_k_gemm_mat_t* b, float* c, int64_t ldc, bool accumulate,
                      bool avx2) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) memset(c + m * ldc, 0, (size_t)N * sizeof(float));
    return;
  }
  la_gemm_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = 1.0;
  g.alpha_i = 1;
  g.avx2 = avx2;
  g.a.p = (const char*)a->data;
  g.a.dt = a->dtype;
  g.a.es = (int32_t)tpu_dtype_size((tpu_dtype_t)a->dtype);
  g.a.rs = a->rs;
  g.a.cs = a->cs;
  g.b.p = (const char*)b->data;
  g.b.dt = b->dtype;
  g.b.es = (int32_t)tpu_dtype_size((tpu_dtype_t)b->dtype);
  g.b.rs = b->rs;
  g.b.cs = b->cs;
  for (int64_t n0 = 0; n0 < N; n0 += LA_NC) /* la_sgemm_block packs at most LA_NC columns */
    la_sgemm_block(&g, 0, 0, M, n0, la_min(N, n0 + LA_NC), c + n0, ldc, accumulate);
}

/* ---- entries ---------------------------------------------------------------------- */

static bool la_dtype_ok(int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: case TPU_DTYPE_F64: case TPU_DTYPE_F16: case TPU_DTYPE_BF16:
    case TPU_DTYPE_I64: case TPU_DTYPE_I32: case TPU_DTYPE_I16: case TPU_DTYPE_I8:
    case TPU_DTYPE_U8:
      return true;
    default:
      return false;
  }
}

static bool la_broadcasts(const tpu_tensor_t* t, const int64_t* shape, int nd) {
  if (t->ndim > nd) return false;
  int off = nd - t->ndim;
  for (int d = 0; d < t->ndim; ++d)
    if (t->sizes[d] != 1 && t->sizes[d] != shape[off + d]) return false;
  return true;
}

/* Layout of the args of one entry. */
typedef struct {
  int bias, a, b, beta, alpha; /* arg indices, -1 if absent */
  int nd;                      /* 2: mm family, 3: bmm family, 1: mv family */
} la_sig_t;

static la_sig_t la_sig(const char* op) {
  la_sig_t s = {-1, 0, 1, -1, -1, 2};
  if (strncmp(op, "aten::bmm", 9) == 0) s.nd = 3;
  if (strncmp(op, "aten::mv", 8) == 0) s.nd = 1;
  if (strncmp(op, "aten::add", 9) == 0 || strncmp(op, "aten::baddbmm", 13) == 0) {
    s.bias = 0; s.a = 1; s.b = 2; s.beta = 3; s.alpha = 4;
    if (strncmp(op, "aten::baddbmm", 13) == 0) s.nd = 3;
    if (strncmp(op, "aten::addmv", 11) == 0) s.nd = 1;
  }
  return s;
}

static tpu_status_t la_check(const tpu_k_call_t* call) {
  la_sig_t s = la_sig(call->op);
  const tpu_tensor_t* a = tpu_ku_tensor(call, s.a);
  const tpu_tensor_t* b = tpu_ku_tensor(call, s.b);
  if (!a || !b || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* c = &call->outputs[0];
  if (!la_dtype_ok(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!la_dtype_ok(b->dtype)) return tpu_ku_unsupported_dtype(call, b->dtype);
  if (!la_dtype_ok(c->dtype)) return tpu_ku_unsupported_dtype(call, c->dtype);
  if (a->dtype != b->dtype)
    return TPU_KU_INVALID(call, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                          tpu_dtype_name((tpu_dtype_t)a->dtype), tpu_dtype_name((tpu_dtype_t)b->dtype));
  int64_t M, N, K;
  int64_t shape[3];
  int nd;
  if (s.nd == 1) {
    if (a->ndim != 2 || b->ndim != 1 || c->ndim != 1)
      return TPU_KU_INVALID(call, "expected a 2-D matrix and a 1-D vector (got %d-D and %d-D)",
                            (int)a->ndim, (int)b->ndim);
    M = a->sizes[0]; K = a->sizes[1]; N = 1;
    if (b->sizes[0] != K || c->sizes[0] != M)
      return TPU_KU_INVALID(call, "size mismatch: matrix %lldx%lld, vector %lld, out %lld",
                            (long long)M, (long long)K, (long long)b->sizes[0],
                            (long long)c->sizes[0]);
    shape[0] = M;
    nd = 1;
  } else {
    nd = s.nd;
    if (a->ndim != nd || b->ndim != nd || c->ndim != nd)
      return TPU_KU_INVALID(call, "expected %d-D tensors (got %d-D and %d-D)", nd, (int)a->ndim,
                            (int)b->ndim);
    int o = nd - 2;
    M = a->sizes[o]; K = a->sizes[o + 1]; N = b->sizes[o + 1];
    if (b->sizes[o] != K || c->sizes[o] != M || c->sizes[o + 1] != N ||
        (nd == 3 && (b->sizes[0] != a->sizes[0] || c->sizes[0] != a->sizes[0])))
      return TPU_KU_INVALID(call, "shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                            (long long)M, (long long)K, (long long)b->sizes[o],
                            (long long)N);
    for (int d = 0; d < nd; ++d) shape[d] = c->sizes[d];
  }
  if (s.bias >= 0) {
    const tpu_tensor_t* bias = tpu_ku_tensor(call, s.bias);
    if (!bias) return TPU_KU_INVALID(call, "expected a tensor for self");
    if (!la_dtype_ok(bias->dtype)) return tpu_ku_unsupported_dtype(call, bias->dtype);
    if (!la_broadcasts(bias, shape, nd))
      return TPU_KU_INVALID(call, "self (%d-D) is not broadcastable to the result", (int)bias->ndim);
  }
  return TPU_OK;
}

static tpu_status_t la_run(const tpu_k_call_t* call) {
  la_sig_t s = la_sig(call->op);
  const tpu_tensor_t* a = tpu_ku_tensor(call, s.a);
  const tpu_tensor_t* b = tpu_ku_tensor(call, s.b);
  const tpu_tensor_t* c = &call->outputs[0];
  la_gemm_t g;
  memset(&g, 0, sizeof(g));
  if (s.nd == 1) {
    g.batch = 1; g.M = a->sizes[0]; g.K = a->sizes[1]; g.N = 1;
    g.a = la_mat(a, g.M, g.K);
    /* vector as a Kx1 matrix */
    g.b.p = (const char*)b->data; g.b.dt = b->dtype;
    g.b.es = (int32_t)tpu_dtype_size((tpu_dtype_t)b->dtype);
    g.b.rs = g.K == 1 ? 1 : b->strides[0];
    g.b.cs = 1;
    g.c.p = (const char*)c->data; g.c.dt = c->dtype;
    g.c.es = (int32_t)tpu_dtype_size((tpu_dtype_t)c->dtype);
    g.c.rs = g.M == 1 ? 1 : c->strides[0];
    g.c.cs = 1;
  } else {
    int o = s.nd - 2;
    g.batch = s.nd == 3 ? a->sizes[0] : 1;
    g.M = a->sizes[o]; g.K = a->sizes[o + 1]; g.N = b->sizes[o + 1];
    g.a = la_mat(a, g.M, g.K);
    g.b = la_mat(b, g.K, g.N);
    g.c = la_mat(c, g.M, g.N);
  }
  if (tpu_tensor_numel(c) == 0) return TPU_OK;
  g.alpha = 1.0; g.alpha_i = 1;
  if (s.bias >= 0) {
    const tpu_tensor_t* bias = tpu_ku_tensor(call, s.bias);
    g.beta = tpu_ku_double(call, s.beta, 1.0);
    g.beta_i = tpu_ku_int(call, s.beta, 1);
    g.alpha = tpu_ku_double(call, s.alpha, 1.0);
    g.alpha_i = tpu_ku_int(call, s.alpha, 1);
    if (g.beta != 0.0 || g.beta_i != 0) {
      g.bias = la_bias(bias, s.nd == 1 ? 2 : s.nd);
      if (s.nd == 1) { /* [M] -> [M,1] */
        g.bias.rs = bias->ndim == 1 && bias->sizes[0] != 1 ? bias->strides[0] : 0;
        g.bias.cs = 0;
      }
    }
  }
#if LA_BF16DP
  uint16_t* rounded = la_round_operands(call, &g);
#endif
  la_gemm_run(&g, call->pool);
#if LA_BF16DP
  free(rounded);
#endif
  return TPU_OK;
}

/* dot: double accumulation for floating dtypes, int64 for integers. */
static tpu_status_t la_dot_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  if (!a || !b || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  if (!la_dtype_ok(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!la_dtype_ok(b->dtype)) return tpu_ku_unsupported_dtype(call, b->dtype);
  if (!la_dtype_ok(call->outputs[0].dtype)) return tpu_ku_unsupported_dtype(call, call->outputs[0].dtype);
  if (a->ndim != 1 || b->ndim != 1)
    return TPU_KU_INVALID(call, "1D tensors expected, but got %dD and %dD tensors", (int)a->ndim,
                          (int)b->ndim);
  if (a->sizes[0] != b->sizes[0])
    return TPU_KU_INVALID(call, "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same number of elements, but got %lld and %lld elements respectively",
                          (long long)a->sizes[0], (long long)b->sizes[0], (long long)a->sizes[0],
                          (long long)b->sizes[0]);
  return TPU_OK;
}

static tpu_status_t la_dot_run(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* c = &call->outputs[0];
  int64_t n = a->sizes[0];
  const char* pa = (const char*)a->data;
  const char* pb = (const char*)b->data;
  int64_t sa = a->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)a->dtype);
  int64_t sb = b->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)b->dtype);
  if (tpu_dtype_is_floating((tpu_dtype_t)c->dtype)) {
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    if (a->dtype == TPU_DTYPE_F32 && b->dtype == TPU_DTYPE_F32) {
      for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j)
          acc[j] += (double)*(const float*)(pa + (i + j) * sa) * *(const float*)(pb + (i + j) * sb);
    }
    for (; i < n; ++i) acc[i & 3] += tpu_ku_load_f64(pa + i * sa, a->dtype) * tpu_ku_load_f64(pb + i * sb, b->dtype);
    double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (c->dtype == TPU_DTYPE_F32 || c->dtype == TPU_DTYPE_F64)
      tpu_ku_store_f64(c->data, c->dtype, s);
    else
      la_stf((char*)c->data, c->dtype, (float)s);
  } else {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i)
      s += (uint64_t)tpu_ku_load_i64(pa + i * sa, a->dtype) * (uint64_t)tpu_ku_load_i64(pb + i * sb, b->dtype);
    tpu_ku_store_i64(c->data, c->dtype, (int64_t)s);
  }
  return TPU_OK;
}

/* addbmm(self, batch1, batch2, beta, alpha): beta * self + alpha * sum_b
 * batch1[b] @ batch2[b], as the CPU computes it: one addmm per batch into the
 * output (the first with self and beta, the rest accumulating with beta 1), so
 * float16/bfloat16 round to the dtype after every batch as there. No batches:
 * beta * self, or zeros when beta is 0. */
static tpu_status_t la_addbmm_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* a = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 2);
  if (!self || !a || !b || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* c = &call->outputs[0];
  if (a->ndim != 3) return TPU_KU_INVALID(call, "batch1 must be a 3D tensor (got %d-D)", (int)a->ndim);
  if (b->ndim != 3) return TPU_KU_INVALID(call, "batch2 must be a 3D tensor (got %d-D)", (int)b->ndim);
  if (a->sizes[0] != b->sizes[0])
    return TPU_KU_INVALID(call, "batch1 and batch2 must have same number of batches, got %lld and %lld",
                          (long long)a->sizes[0], (long long)b->sizes[0]);
  if (a->sizes[2] != b->sizes[1])
    return TPU_KU_INVALID(call, "Incompatible matrix sizes for bmm (%lldx%lld and %lldx%lld)", (long long)a->sizes[1],
                          (long long)a->sizes[2], (long long)b->sizes[1], (long long)b->sizes[2]);
  const int64_t shape[2] = {a->sizes[1], b->sizes[2]};
  if (!la_broadcasts(self, shape, 2))
    return TPU_KU_INVALID(call, "self (%d-D) is not broadcastable to the result [%lld, %lld]", (int)self->ndim,
                          (long long)shape[0], (long long)shape[1]);
  if (c->ndim != 2 || c->sizes[0] != shape[0] || c->sizes[1] != shape[1])
    return TPU_KU_INVALID(call, "out must be [%lld, %lld] (got %d-D)", (long long)shape[0], (long long)shape[1],
                          (int)c->ndim);
  if (!la_dtype_ok(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (a->dtype != b->dtype)
    return TPU_KU_INVALID(call, "mat1 and mat2 must have the same dtype, but got %s and %s",
                          tpu_dtype_name((tpu_dtype_t)a->dtype), tpu_dtype_name((tpu_dtype_t)b->dtype));
  if (self->dtype != b->dtype || c->dtype != b->dtype)
    return TPU_KU_INVALID(call, "self and mat2 must have the same dtype, but got %s and %s",
                          tpu_dtype_name((tpu_dtype_t)(self->dtype != b->dtype ? self->dtype : c->dtype)),
                          tpu_dtype_name((tpu_dtype_t)b->dtype));
  return TPU_OK;
}

static tpu_status_t la_addbmm_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(la_addbmm_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* a = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* c = &call->outputs[0];
  if (tpu_tensor_numel(c) == 0) return TPU_OK;
  const int64_t nb = a->sizes[0];
  la_gemm_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1;
  g.M = a->sizes[1];
  g.K = nb == 0 ? 0 : a->sizes[2];
  g.N = b->sizes[2];
  g.c = la_mat(c, g.M, g.N);
  const double beta = tpu_ku_double(call, 3, 1.0), alpha = tpu_ku_double(call, 4, 1.0);
  const int64_t beta_i = tpu_ku_int(call, 3, 1), alpha_i = tpu_ku_int(call, 4, 1);
  for (int64_t i = 0; i < (nb == 0 ? 1 : nb); ++i) {
    la_gemm_t s = g;
    if (nb > 0) {
      tpu_tensor_t ai = *a, bi = *b; /* batch i as a 2-D matrix */
      ai.data = (char*)a->data + i * a->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)a->dtype);
      bi.data = (char*)b->data + i * b->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)b->dtype);
      ai.ndim = bi.ndim = 2;
      ai.sizes[0] = a->sizes[1]; ai.sizes[1] = a->sizes[2];
      ai.strides[0] = a->strides[1]; ai.strides[1] = a->strides[2];
      bi.sizes[0] = b->sizes[1]; bi.sizes[1] = b->sizes[2];
      bi.strides[0] = b->strides[1]; bi.strides[1] = b->strides[2];
      s.a = la_mat(&ai, g.M, g.K);
      s.b = la_mat(&bi, g.K, g.N);
      s.alpha = alpha;
      s.alpha_i = alpha_i;
    } else { /* no products: alpha does not enter (0 * inf would be NaN) */
      s.a = s.b = g.c;
    }
    if (i == 0) {
      s.beta = beta;
      s.beta_i = beta_i;
      if (beta != 0.0 || beta_i != 0) s.bias = la_bias(self, 2);
    } else { /* accumulate onto the output */
      s.beta = 1.0;
      s.beta_i = 1;
      s.bias = g.c;
    }
#if LA_BF16DP
    uint16_t* rounded = la_round_operands(call, &s);
#endif
    la_gemm_run(&s, call->pool);
#if LA_BF16DP
    free(rounded);
#endif
  }
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_linalg_entries[] = {
    {"aten::mm", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::mm.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::bmm", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::bmm.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmm", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmm.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmm_", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::baddbmm", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::baddbmm_", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::baddbmm.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmv", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmv.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addmv_", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::mv", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::mv.out", la_run, la_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addbmm", la_addbmm_run, la_addbmm_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addbmm.out", la_addbmm_run, la_addbmm_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::addbmm_", la_addbmm_run, la_addbmm_check, TPU_K_FLAG_MATMUL, NULL},
    {"aten::dot", la_dot_run, la_dot_check, 0, NULL},
    {"aten::dot.out", la_dot_run, la_dot_check, 0, NULL},
};
const size_t tpu_k_linalg_count = sizeof(tpu_k_linalg_entries) / sizeof(tpu_k_linalg_entries[0]);
