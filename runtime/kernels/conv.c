/* conv.c - kernel family "conv": N-d convolution (any number of spatial
 * dims; stride, padding, dilation, groups incl. depthwise, bias; transposed)
 * forward and backward, for the bridge's aten::convolution_overrideable and
 * aten::convolution_backward_overrideable (torch_tpu/csrc/aten/conv.cpp).
 *
 *   tpu::conv_fwd(input, weight, bias?, stride[], padding[], dilation[],
 *                 transposed, output_padding[], groups) -> out
 *   tpu::conv_bwd(grad_output, input, weight, stride[], padding[], dilation[],
 *                 transposed, output_padding[], groups, output_mask[3])
 *                 -> (grad_input?, grad_weight?, grad_bias?)
 *
 * The bridge allocates the outputs (sizes from ATen's conv_output_size /
 * conv_input_size); outputs it does not want have dtype INVALID. Every read
 * of an activation is bounds-checked against the tensor it comes from, so
 * any output spatial size is memory-safe.
 *
 * All three computations are phrased on one "regular" convolution
 * X [N, G*Cg, x...] -(W [G*M, Cg, k...])-> Y [N, G*M, y...]:
 *   P1  Y = conv(X, W)               forward; transposed grad_input
 *   P2  X = conv^T(Y, W)             grad_input; transposed forward
 *   P3  dW = corr(Y, X)              grad_weight (both)
 * P2 is P1 on Y with the per-group-transposed, flipped kernel: with unit
 * stride one problem (padding (k-1)*d - p); with stride s, one dense
 * problem per residue class of the X positions mod s (see cv_p2), so the
 * backward of strided convolutions runs on the same paths as the forward.
 *
 * Paths (f32/bf16/f16; f32 accumulation):
 *   gemm    im2col of a [128 x 256] tile on the stack feeding linalg.c's
 *           packed AVX2 GEMM core (kernels/gemm.h); used when a group has
 *           >= 8 output channels and >= 8 reduction terms (>= 2 and >= 64),
 *           up to 3 spatial dims. 1x1 unit-stride unpadded convs read the
 *           input in place.
 *   blocked 1-D/2-D kernels with taps, up to ~320 input channels per group
 *           (AVX2): no im2col; a band of output rows reads a zero-padded f32
 *           copy of its input rows, 4 output channels x 24 outputs held in
 *           registers over all input channels and taps (see "blocked path").
 *   direct  loop nest vectorised along the last spatial dim (depthwise,
 *           small groups, more than 3 spatial dims).
 * float64 and integer dtypes run the direct path in double (exact for
 * integer sums below 2^53; the direct path is written once below the
 * "template" marker and instantiated for float and double).
 * TORCH_TPU_CONV_PATH=direct|gemm|blocked forces a path (tests; blocked
 * falls back to the usual choice where its limits are exceeded: more than 2
 * spatial dims, 64 taps, a band or 4 weight rows larger than its stack tiles).
 *
 * Nothing is allocated: a gemm task keeps its tiles (~270 KB) and the GEMM
 * core's packed blocks (~180 KB) on the stack, a blocked task its input band
 * and weights (~275 KB); the runtime's queue and pool
 * threads have default (8 MB) stacks. */
#ifndef CV_TEMPLATE_PASS

#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/kutil.h"

#define CV_MAXSD (TPU_MAX_DIMS - 2)
#define CV_GD 3 /* gemm path: at most this many spatial dims */
enum {
  CV_MB = 96,    /* gemm: output channels per tile */
  CV_KT = 128,   /* gemm: reduction rows per im2col tile (P1), positions per tile (P3) */
  CV_NB = 256,   /* gemm: positions per tile (P1), reduction columns per tile (P3) */
  CV_WB = 1024,  /* direct: last-dim outputs per stack tile */
  CV_SPAN = 4096, /* direct: input span buffer */
  CV_KWC = 64,   /* direct P3: kernel taps accumulated at once */
};

enum { CV_PATH_AUTO = 0, CV_PATH_DIRECT = 1, CV_PATH_GEMM = 2, CV_PATH_BLOCKED = 3 };

/* An activation [N, C, spatial...]; strides in elements. */
typedef struct {
  char* p;
  int32_t dt, es;
  int64_t sn, sc;
  int64_t sz[CV_MAXSD], st[CV_MAXSD];
} cv_act_t;

/* A regular convolution src [N, G*Cg, ...] -> dst [N, G*M, ...]. Weight
 * element (g, m, c, kpos) is at w + (g*wg + m*wm + c*wc + sum kpos_j*wk_j)
 * elements (wk may be negative: flipped kernels). */
typedef struct {
  int nd;
  int64_t N, G, M, Cg;
  cv_act_t src, dst;
  int64_t k[CV_MAXSD], s[CV_MAXSD], p[CV_MAXSD], d[CV_MAXSD];
  int64_t kprod, kouter; /* kernel taps in all dims / in the outer dims */
  const char* w;
  int32_t wdt, wes;
  int64_t wg, wm, wc, wk[CV_MAXSD];
  bool avx2;
} cv_prob_t;

/* One op of a call: the problem plus the result it writes. */
typedef struct {
  const cv_prob_t* q;
  /* bias added to the result's channels (P1: dst, P2: src), or NULL */
  const char* b;
  int32_t bdt;
  int64_t bs;
  /* P3: weight gradient, laid out like W (same accessor strides) */
  char* gw;
  int32_t gwdt, gwes;
  int64_t gwg, gwm, gwc, gwk[CV_MAXSD];
  /* tiling */
  int64_t rows;            /* direct: outer positions per (n, channel) */
  int64_t mblocks, pblocks, P, nb;
  bool direct_c, pointwise;
} cv_ctx_t;

static inline int64_t cv_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cv_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cv_fdiv(int64_t a, int64_t b) { /* floor(a / b), b > 0 */
  int64_t q = a / b;
  return (a % b < 0) ? q - 1 : q;
}
static inline int64_t cv_cdiv(int64_t a, int64_t b) { return cv_fdiv(a + b - 1, b); }

static inline float cv_ldf(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
    default: return (float)tpu_ku_load_f64(p, dt);
  }
}
static inline double cv_ldd(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: case TPU_DTYPE_BF16: case TPU_DTYPE_F16: return (double)cv_ldf(p, dt);
    default: return tpu_ku_load_f64(p, dt);
  }
}

/* tpu_ku_f32_to_bf16 without branches, so that store loops vectorise. */
static inline uint16_t cv_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t qnan = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? qnan : r);
}

static bool cv_dtype_supported(int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: case TPU_DTYPE_F64: case TPU_DTYPE_F16: case TPU_DTYPE_BF16:
    case TPU_DTYPE_I64: case TPU_DTYPE_I32: case TPU_DTYPE_I16: case TPU_DTYPE_I8: case TPU_DTYPE_U8:
      return true;
    default:
      return false;
  }
}
static bool cv_is_gemm_dt(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}

/* Spatial dims (of `a`) are one run of unit stride. */
static bool cv_flat(const cv_act_t* a, int nd) {
  int64_t expect = 1;
  for (int j = nd - 1; j >= 0; --j) {
    if (a->sz[j] != 1 && a->st[j] != expect) return false;
    expect *= a->sz[j];
  }
  return true;
}

static int64_t cv_prod(const int64_t* v, int n) {
  int64_t r = 1;
  for (int i = 0; i < n; ++i) r *= v[i];
  return r;
}

/* Decodes linear index `r` over sizes[0..n) (last fastest). */
static inline void cv_unravel(int64_t r, const int64_t* sizes, int n, int64_t* idx) {
  for (int j = n - 1; j >= 0; --j) {
    int64_t s = sizes[j] > 0 ? sizes[j] : 1;
    idx[j] = r % s;
    r /= s;
  }
}

/* ---- direct path (instantiated for float and double) ----------------------- */

#define CV_TEMPLATE_PASS 1
#define T float
#define SFX(name) name##_f32
#include "kernels/conv.c"
#undef T
#undef SFX
#define T double
#define SFX(name) name##_f64
#include "kernels/conv.c"
#undef T
#undef SFX
#undef CV_TEMPLATE_PASS

/* ---- gemm path -------------------------------------------------------------- */

/* A run of consecutive tile positions along the last spatial dim. */
typedef struct {
  int64_t o[CV_GD]; /* outer multi-index (dims 0..nd-2) */
  int64_t ow, len, j; /* first last-dim index, length, first tile column */
} cv_run_t;

/* Splits positions [p0, p0 + cnt) of the grid `sz` (nd dims) into runs. */
static int cv_runs(const int64_t* sz, int nd, int64_t p0, int64_t cnt, cv_run_t* runs) {
  int L = nd - 1;
  int64_t W = sz[L];
  int nr = 0;
  for (int64_t j = 0; j < cnt;) {
    int64_t pos = p0 + j;
    cv_run_t* r = &runs[nr++];
    r->ow = pos % W;
    r->len = cv_min(W - r->ow, cnt - j);
    r->j = j;
    cv_unravel(pos / W, sz, L, r->o);
    j += r->len;
  }
  return nr;
}

/* cv_load_f32 / cv_store_f32 (strided runs <-> f32) come from the template pass. */

/* Reduction index kk (over Cg * kprod, kernel taps fastest) -> channel and taps. */
static inline void cv_kdecode(const cv_prob_t* q, int64_t kk, int64_t* c, int64_t* kpos) {
  *c = kk / q->kprod;
  cv_unravel(kk % q->kprod, q->k, q->nd, kpos);
}

/* col[kk * ldcol + j] = src[n, cbase + c(k0+kk), position j of the runs
 * moved by the taps], zero where that falls into the padding. */
static void cv_im2col(const cv_prob_t* q, int64_t n, int64_t cbase, int64_t k0, int64_t kt,
                      const cv_run_t* runs, int nr, float* col, int64_t ldcol) {
  enum { KWT = 64 };
  const cv_act_t* X = &q->src;
  int nd = q->nd, L = nd - 1;
  int64_t IW = X->sz[L], s = q->s[L], d = q->d[L], p = q->p[L], KW = q->k[L];
  /* valid last-dim outputs [olo, ohi) of each tap, for the first KWT taps */
  int64_t olo[KWT], ohi[KWT];
  for (int64_t kw = 0; kw < KW && kw < KWT; ++kw) {
    olo[kw] = cv_cdiv(p - kw * d, s);
    ohi[kw] = cv_fdiv(IW - 1 - kw * d + p, s) + 1;
  }
  int64_t c, kpos[CV_GD];
  cv_kdecode(q, k0, &c, kpos);
  for (int64_t kk = 0; kk < kt; ++kk) {
    if (kk > 0) { /* next tap: last dim fastest, then channel */
      int j = L;
      while (j >= 0 && ++kpos[j] == q->k[j]) kpos[j--] = 0;
      if (j < 0) ++c;
    }
    const char* xc = X->p + (n * X->sn + (cbase + c) * X->sc) * X->es;
    float* row = col + kk * ldcol;
    int64_t kw = kpos[L];
    int64_t wlo = kw < KWT ? olo[kw] : cv_cdiv(p - kw * d, s);
    int64_t whi = kw < KWT ? ohi[kw] : cv_fdiv(IW - 1 - kw * d + p, s) + 1;
    for (int r = 0; r < nr; ++r) {
      const cv_run_t* ru = &runs[r];
      float* dst = row + ru->j;
      bool ok = true;
      int64_t off = 0;
      for (int j = 0; j < L; ++j) {
        int64_t ii = ru->o[j] * q->s[j] + kpos[j] * q->d[j] - q->p[j];
        if (ii < 0 || ii >= X->sz[j]) {
          ok = false;
          break;
        }
        off += ii * X->st[j];
      }
      int64_t lo = cv_max(ru->ow, wlo), hi = cv_min(ru->ow + ru->len, whi);
      if (!ok || lo >= hi) {
        memset(dst, 0, (size_t)ru->len * sizeof(float));
        continue;
      }
      for (int64_t o = ru->ow; o < lo; ++o) dst[o - ru->ow] = 0.0f;
      cv_load_f32(xc + (off + (lo * s + kw * d - p) * X->st[L]) * X->es, X->dt, s * X->st[L],
                  hi - lo, dst + (lo - ru->ow));
      for (int64_t o = hi; o < ru->ow + ru->len; ++o) dst[o - ru->ow] = 0.0f;
    }
  }
}

static void cv_p1_gemm_task(const cv_ctx_t* x, int64_t t) {
  const cv_prob_t* q = x->q;
  int nd = q->nd, L = nd - 1;
  int64_t pbi = t % x->pblocks;
  t /= x->pblocks;
  int64_t mbi = t % x->mblocks;
  t /= x->mblocks;
  int64_t g = t % q->G, n = t / q->G;
  int64_t m0 = mbi * CV_MB, mb = cv_min(CV_MB, q->M - m0);
  int64_t p0 = pbi * x->nb, pc = cv_min(x->nb, x->P - p0);
  _Alignas(64) float atile[CV_MB * CV_KT];
  _Alignas(64) float col[CV_KT * CV_NB];
  _Alignas(64) float cbuf[CV_MB * CV_NB];
  int64_t woff[CV_KT];
  cv_run_t runs[CV_NB];
  int nr = cv_runs(q->dst.sz, nd, p0, pc, runs);
  const cv_act_t* Y = &q->dst;
  const cv_act_t* X = &q->src;
  float* C;
  int64_t ldc;
  if (x->direct_c) {
    C = (float*)(Y->p + (n * Y->sn + (g * q->M + m0) * Y->sc + p0) * Y->es);
    ldc = Y->sc;
  } else {
    C = cbuf;
    ldc = CV_NB;
  }
  int64_t Kd = q->Cg * q->kprod;
  if (Kd == 0) {
    tpu_k_gemm_mat_t z = {atile, TPU_DTYPE_F32, CV_KT, 1};
    tpu_k_sgemm_tile(mb, pc, 0, &z, &z, C, ldc, false, q->avx2);
  }
  for (int64_t k0 = 0; k0 < Kd; k0 += CV_KT) {
    int64_t kt = cv_min(CV_KT, Kd - k0);
    for (int64_t kk = 0; kk < kt; ++kk) {
      int64_t c, kpos[CV_MAXSD];
      cv_kdecode(q, k0 + kk, &c, kpos);
      int64_t o = c * q->wc;
      for (int j = 0; j < nd; ++j) o += kpos[j] * q->wk[j];
      woff[kk] = o;
    }
    /* A: f32 weight rows in place when the tile's taps are evenly spaced in
     * memory (a contiguous weight), else gathered into f32 */
    int64_t wstep = kt > 1 ? woff[1] - woff[0] : 1;
    bool even = q->wdt == TPU_DTYPE_F32; /* halves: converted once here, not per pack */
    for (int64_t kk = 2; kk < kt && even; ++kk) even = woff[kk] - woff[kk - 1] == wstep;
    tpu_k_gemm_mat_t A = {atile, TPU_DTYPE_F32, CV_KT, 1};
    if (even) {
      A.data = q->w + (g * q->wg + m0 * q->wm + woff[0]) * q->wes;
      A.dtype = q->wdt;
      A.rs = q->wm;
      A.cs = wstep;
    } else {
      for (int64_t m = 0; m < mb; ++m) {
        const char* wr = q->w + (g * q->wg + (m0 + m) * q->wm) * q->wes;
        float* ar = atile + m * CV_KT;
        if (q->wdt == TPU_DTYPE_F32) {
          for (int64_t kk = 0; kk < kt; ++kk) ar[kk] = ((const float*)wr)[woff[kk]];
        } else if (q->wdt == TPU_DTYPE_BF16) {
          for (int64_t kk = 0; kk < kt; ++kk) ar[kk] = tpu_ku_bf16_to_f32(((const uint16_t*)wr)[woff[kk]]);
        } else {
          for (int64_t kk = 0; kk < kt; ++kk) ar[kk] = cv_ldf(wr + woff[kk] * q->wes, q->wdt);
        }
      }
    }
    tpu_k_gemm_mat_t B;
    if (x->pointwise) {
      B.data = X->p + (n * X->sn + (g * q->Cg + k0) * X->sc + p0) * X->es;
      B.dtype = X->dt;
      B.rs = X->sc;
      B.cs = 1;
    } else {
      cv_im2col(q, n, g * q->Cg, k0, kt, runs, nr, col, CV_NB);
      B.data = col;
      B.dtype = TPU_DTYPE_F32;
      B.rs = CV_NB;
      B.cs = 1;
    }
    tpu_k_sgemm_tile(mb, pc, kt, &A, &B, C, ldc, k0 > 0, q->avx2);
  }
  for (int64_t m = 0; m < mb; ++m) {
    float* cr = C + m * ldc;
    if (x->b) {
      float bv = cv_ldf(x->b + (g * q->M + m0 + m) * x->bs * (int64_t)tpu_dtype_size(x->bdt), x->bdt);
      for (int64_t j = 0; j < pc; ++j) cr[j] += bv;
    }
    if (x->direct_c) continue;
    char* yc = Y->p + (n * Y->sn + (g * q->M + m0 + m) * Y->sc) * Y->es;
    for (int r = 0; r < nr; ++r) {
      int64_t off = runs[r].ow * Y->st[L];
      for (int j = 0; j < L; ++j) off += runs[r].o[j] * Y->st[j];
      cv_store_f32(yc + off * Y->es, Y->dt, Y->st[L], runs[r].len, cr + runs[r].j);
    }
  }
}

static void cv_p1_gemm_par(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) cv_p1_gemm_task((const cv_ctx_t*)ctx, t);
}

/* P3: dW[g, m, kk] = sum_{n, y positions} Y[n, g*M + m, pos] * col_X[kk, pos]. */
static void cv_p3_gemm_task(const cv_ctx_t* x, int64_t t) {
  const cv_prob_t* q = x->q;
  int nd = q->nd, L = nd - 1;
  int64_t Kd = q->Cg * q->kprod;
  int64_t kblocks = (Kd + x->nb - 1) / x->nb;
  int64_t kbi = t % kblocks;
  t /= kblocks;
  int64_t mbi = t % x->mblocks, g = t / x->mblocks;
  int64_t m0 = mbi * CV_MB, mb = cv_min(CV_MB, q->M - m0);
  int64_t k0 = kbi * x->nb, kb = cv_min(x->nb, Kd - k0);
  _Alignas(64) float atile[CV_MB * CV_KT];
  _Alignas(64) float col[CV_NB * CV_KT];
  _Alignas(64) float cbuf[CV_MB * CV_NB];
  cv_run_t runs[CV_KT];
  const cv_act_t* Y = &q->dst;
  bool first = true;
  tpu_k_gemm_mat_t A = {atile, TPU_DTYPE_F32, CV_KT, 1};
  tpu_k_gemm_mat_t B = {col, TPU_DTYPE_F32, 1, CV_KT};
  for (int64_t n = 0; n < q->N; ++n) {
    for (int64_t p0 = 0; p0 < x->P; p0 += CV_KT) {
      int64_t pc = cv_min(CV_KT, x->P - p0);
      int nr = cv_runs(Y->sz, nd, p0, pc, runs);
      for (int64_t m = 0; m < mb; ++m) {
        const char* yc = Y->p + (n * Y->sn + (g * q->M + m0 + m) * Y->sc) * Y->es;
        for (int r = 0; r < nr; ++r) {
          int64_t off = runs[r].ow * Y->st[L];
          for (int j = 0; j < L; ++j) off += runs[r].o[j] * Y->st[j];
          cv_load_f32(yc + off * Y->es, Y->dt, Y->st[L], runs[r].len, atile + m * CV_KT + runs[r].j);
        }
      }
      cv_im2col(q, n, g * q->Cg, k0, kb, runs, nr, col, CV_KT);
      tpu_k_sgemm_tile(mb, kb, pc, &A, &B, cbuf, CV_NB, !first, q->avx2);
      first = false;
    }
  }
  if (first)
    for (int64_t i = 0; i < mb * CV_NB; ++i) cbuf[i] = 0.0f;
  for (int64_t kk = 0; kk < kb; ++kk) {
    int64_t c, kpos[CV_MAXSD];
    cv_kdecode(q, k0 + kk, &c, kpos);
    int64_t o = g * x->gwg + c * x->gwc;
    for (int j = 0; j < nd; ++j) o += kpos[j] * x->gwk[j];
    for (int64_t m = 0; m < mb; ++m)
      cv_store_f32(x->gw + (o + (m0 + m) * x->gwm) * x->gwes, x->gwdt, 1, 1, cbuf + m * CV_NB + kk);
  }
}

static void cv_p3_gemm_par(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) cv_p3_gemm_task((const cv_ctx_t*)ctx, t);
}

/* ---- blocked path ---------------------------------------------------------------
 * 1-D/2-D convolutions without im2col: a task takes a band of output rows of
 * one (n, group), copies the input rows they read into a zero-padded f32
 * band (each row split into `s` phases by column mod stride, so that every
 * tap of 8 consecutive outputs is one unit-stride load), then accumulates
 * tiles of 4 output channels x 3 vectors of 8 outputs in registers over all
 * input channels and taps (tpu_k_avx2_conv_4x3). */

enum {
  CV_BX = 49152, /* blocked: input band floats (192 KB) */
  CV_BW = 16384, /* blocked: weight floats per chunk of output channels (64 KB) */
  CV_BT = 64,    /* blocked: at most this many kernel taps */
  CV_BV = 4096,  /* blocked: at most this many output vectors per band */
};

#if defined(__x86_64__)
/* arch/x86_64/conv_avx2.c */
void tpu_k_avx2_conv_4x3(const float* const x[3], int64_t C, int64_t cs, const int64_t* toff,
                         int64_t K, const float* const w[4], float* acc);
void tpu_k_avx2_conv3x3_4x3(const float* const x[3], int64_t C, int64_t cs, int64_t rl,
                            const float* const w[4], float* acc);
#endif

/* Portable twin of tpu_k_avx2_conv_4x3 (tests, CPUs without AVX2). */
static void cv_blk_4x3_c(const float* const x[3], int64_t C, int64_t cs, const int64_t* toff, int64_t K,
                         const float* const w[4], float* acc) {
  for (int i = 0; i < 96; ++i) acc[i] = 0.0f;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < K; ++t)
      for (int m = 0; m < 4; ++m) {
        float wv = w[m][c * K + t];
        for (int v = 0; v < 3; ++v) {
          const float* xv = x[v] + c * cs + toff[t];
          for (int i = 0; i < 8; ++i) acc[(m * 3 + v) * 8 + i] += wv * xv[i];
        }
      }
}

/* Geometry of the blocked path (a 1-D problem is a 2-D one of one row). */
typedef struct {
  int64_t IH, IW, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
  int64_t xsh, xsw, ysh, ysw; /* row / column strides of src and dst */
  int64_t wkh, wkw;           /* weight strides of the taps */
  int64_t PL, RL;             /* padded phase length, padded row length (floats) */
  int64_t nvr;                /* output vectors per row */
} cv_bgeo_t;

static void cv_bgeo(const cv_prob_t* q, cv_bgeo_t* b) {
  int L = q->nd - 1;
  bool two = q->nd == 2;
  b->IH = two ? q->src.sz[0] : 1;
  b->OH = two ? q->dst.sz[0] : 1;
  b->KH = two ? q->k[0] : 1;
  b->sh = two ? q->s[0] : 1;
  b->dh = two ? q->d[0] : 1;
  b->ph = two ? q->p[0] : 0;
  b->xsh = two ? q->src.st[0] : 0;
  b->ysh = two ? q->dst.st[0] : 0;
  b->wkh = two ? q->wk[0] : 0;
  b->IW = q->src.sz[L];
  b->OW = q->dst.sz[L];
  b->KW = q->k[L];
  b->sw = q->s[L];
  b->dw = q->d[L];
  b->pw = q->p[L];
  b->xsw = q->src.st[L];
  b->ysw = q->dst.st[L];
  b->wkw = q->wk[L];
  b->nvr = (b->OW + 7) / 8;
  b->PL = b->nvr * 8 + ((b->KW - 1) * b->dw) / b->sw;
  b->RL = b->sw * b->PL;
}

/* Input rows a band of `rows` output rows reads. */
static int64_t cv_brows(const cv_bgeo_t* b, int64_t rows) { return (rows - 1) * b->sh + (b->KH - 1) * b->dh + 1; }

/* Channel stride of a band of `rows` output rows: an odd number of cache
 * lines, so that the same column of successive channels does not fall into
 * one L1 set (a power-of-two stride would thrash it). */
static int64_t cv_bcs(const cv_bgeo_t* b, int64_t rows) {
  int64_t cs = (cv_brows(b, rows) * b->RL + 15) / 16 * 16;
  return (cs / 16) % 2 == 0 ? cs + 16 : cs;
}

/* The weight's taps of one output channel are f32 elements c * taps + t,
 * in (channel, tap) order: usable in place, without packing. */
static bool cv_blk_w_direct(const cv_prob_t* q, const cv_bgeo_t* b) {
  return q->wdt == TPU_DTYPE_F32 && b->wkw == 1 && (q->nd == 1 || b->wkh == b->KW) && q->wc == q->kprod;
}

/* Largest band (output rows) whose padded input fits CV_BX; 0 if none. */
static int64_t cv_blk_maxrows(const cv_prob_t* q, const cv_bgeo_t* b) {
  int64_t r = 0;
  while (r < b->OH && q->Cg * cv_bcs(b, r + 1) <= CV_BX && (r + 1) * b->nvr <= CV_BV) ++r;
  return r;
}

/* Can the blocked path run q? */
static bool cv_blk_ok(const cv_prob_t* q, int out_dt) {
  if (q->nd < 1 || q->nd > 2) return false;
  if (!cv_is_gemm_dt(q->src.dt) || !cv_is_gemm_dt(q->dst.dt) || !cv_is_gemm_dt(q->wdt) || !cv_is_gemm_dt(out_dt))
    return false;
  if (q->kprod > CV_BT || q->kprod < 1 || q->Cg < 1 || q->M < 1) return false;
  if (4 * q->Cg * q->kprod > CV_BW) return false;
  cv_bgeo_t b;
  cv_bgeo(q, &b);
  return cv_blk_maxrows(q, &b) >= 1;
}

/* Should the automatic choice take the blocked path for q? Kernels with
 * taps and up to about 320 input channels of 3x3 per group (measured against
 * the gemm path: 1.3-3x faster at the small channel counts of diffusion
 * UNets, equal at 256 channels, slower above: the 4 x 3 tile re-reads the
 * input band per 4 output channels). 1x1 kernels stay GEMMs (the gemm path
 * reads their input in place), and fewer than 4 output channels per group
 * would leave the tile mostly idle. */
static bool cv_blk_auto(const cv_prob_t* q) {
  return q->kprod > 1 && q->M >= 4 && q->Cg * q->kprod <= 3072;
}

static void cv_blk_task(const cv_ctx_t* x, int64_t t) {
  const cv_prob_t* q = x->q;
  cv_bgeo_t b;
  cv_bgeo(q, &b);
  int64_t bands = (b.OH + x->nb - 1) / x->nb;
  int64_t bi = t % bands;
  t /= bands;
  int64_t g = t % q->G, n = t / q->G;
  int64_t oh0 = bi * x->nb, rows = cv_min(x->nb, b.OH - oh0);
  int64_t R = cv_brows(&b, rows), CS = cv_bcs(&b, rows), K = q->kprod, Cg = q->Cg;
  _Alignas(64) float xb[CV_BX];
  _Alignas(64) float wp[CV_BW];
  _Alignas(64) float acc[96];
  float bias[CV_BW / 4];
  int64_t toff[CV_BT];
  const cv_act_t* X = &q->src;
  const cv_act_t* Y = &q->dst;
  /* the padded input band */
  for (int64_t c = 0; c < Cg; ++c) {
    const char* xc = X->p + (n * X->sn + (g * Cg + c) * X->sc) * X->es;
    for (int64_t i = 0; i < R; ++i) {
      float* row = xb + c * CS + i * b.RL;
      int64_t ih = oh0 * b.sh - b.ph + i;
      if (ih < 0 || ih >= b.IH) {
        memset(row, 0, (size_t)b.RL * sizeof(float));
        continue;
      }
      const char* xr = xc + ih * b.xsh * X->es;
      for (int64_t r = 0; r < b.sw; ++r) { /* phase r: padded columns r + sw * j */
        float* ph = row + r * b.PL;
        int64_t lo = cv_max(0, cv_cdiv(b.pw - r, b.sw)), hi = cv_min(b.PL, cv_fdiv(b.IW - 1 + b.pw - r, b.sw) + 1);
        if (lo >= hi) {
          memset(ph, 0, (size_t)b.PL * sizeof(float));
          continue;
        }
        for (int64_t j = 0; j < lo; ++j) ph[j] = 0.0f;
        cv_load_f32(xr + (r + b.sw * lo - b.pw) * b.xsw * X->es, X->dt, b.sw * b.xsw, hi - lo, ph + lo);
        for (int64_t j = hi; j < b.PL; ++j) ph[j] = 0.0f;
      }
    }
  }
  for (int64_t kh = 0; kh < b.KH; ++kh)
    for (int64_t kw = 0; kw < b.KW; ++kw)
      toff[kh * b.KW + kw] = kh * b.dh * b.RL + ((kw * b.dw) % b.sw) * b.PL + (kw * b.dw) / b.sw;
  bool wdirect = cv_blk_w_direct(q, &b);
  bool k3 = b.KH == 3 && b.KW == 3 && b.sw == 1 && b.dh == 1 && b.dw == 1; /* toff = kh * RL + kw */
  int64_t nv = rows * b.nvr;
  /* output channels per chunk: their weights (packed or not) stay in cache
   * while every vector group of the band runs over them */
  int64_t mc = cv_max(4, CV_BW / (Cg * K) / 4 * 4);
  for (int64_t mc0 = 0; mc0 < q->M; mc0 += mc) {
    int64_t mcn = cv_min(mc, q->M - mc0);
    for (int64_t m = 0; m < mcn; ++m) {
      int64_t mm = mc0 + m;
      bias[m] = x->b ? cv_ldf(x->b + (g * q->M + mm) * x->bs * (int64_t)tpu_dtype_size((tpu_dtype_t)x->bdt), x->bdt) : 0.0f;
      if (wdirect) continue;
      float* dst = wp + m * Cg * K;
      const char* wr = q->w + (g * q->wg + mm * q->wm) * q->wes;
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t kh = 0; kh < b.KH; ++kh)
          for (int64_t kw = 0; kw < b.KW; ++kw)
            dst[c * K + kh * b.KW + kw] = cv_ldf(wr + (c * q->wc + kh * b.wkh + kw * b.wkw) * q->wes, q->wdt);
    }
    for (int64_t v0 = 0; v0 < nv; v0 += 3) {
      int nvv = (int)cv_min(3, nv - v0);
      const float* xp[3];
      int64_t vr[3], vw[3];
      for (int v = 0; v < 3; ++v) {
        int64_t vi = v0 + (v < nvv ? v : 0);
        vr[v] = vi / b.nvr;
        vw[v] = (vi % b.nvr) * 8;
        xp[v] = xb + vr[v] * b.sh * b.RL + vw[v];
      }
      for (int64_t m0 = 0; m0 < mcn; m0 += 4) {
        int mr = (int)cv_min(4, mcn - m0);
        const float* w[4];
        for (int m = 0; m < 4; ++m) {
          int64_t mm = m0 + (m < mr ? m : 0);
          w[m] = wdirect ? (const float*)(q->w + (g * q->wg + (mc0 + mm) * q->wm) * q->wes) : wp + mm * Cg * K;
        }
#if defined(__x86_64__)
        if (q->avx2 && k3)
          tpu_k_avx2_conv3x3_4x3(xp, Cg, CS, b.RL, w, acc);
        else if (q->avx2)
          tpu_k_avx2_conv_4x3(xp, Cg, CS, toff, K, w, acc);
        else
#endif
          cv_blk_4x3_c(xp, Cg, CS, toff, K, w, acc);
        for (int m = 0; m < mr; ++m) {
          char* yc = Y->p + (n * Y->sn + (g * q->M + mc0 + m0 + m) * Y->sc) * Y->es;
          float bv = bias[m0 + m];
          for (int v = 0; v < nvv; ++v) {
            float* a = acc + (m * 3 + v) * 8;
            int64_t len = cv_min(8, b.OW - vw[v]);
            for (int i = 0; i < 8; ++i) a[i] += bv;
            cv_store_f32(yc + ((oh0 + vr[v]) * b.ysh + vw[v] * b.ysw) * Y->es, Y->dt, b.ysw, len, a);
          }
        }
      }
    }
  }
}

static void cv_blk_par(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) cv_blk_task((const cv_ctx_t*)ctx, t);
}

/* ---- drivers ------------------------------------------------------------------ */

static int cv_path_env(void) {
  switch (tpu_ku_env(TPU_KU_ENV_CONV_PATH)) {
    case 0: return CV_PATH_DIRECT;
    case 1: return CV_PATH_GEMM;
    case 2: return CV_PATH_BLOCKED;
    default: return CV_PATH_AUTO;
  }
}

static bool cv_gemm_ok(const cv_prob_t* q, int out_dt, int path) {
  if (q->nd > CV_GD || path == CV_PATH_DIRECT) return false;
  if (!cv_is_gemm_dt(q->src.dt) || !cv_is_gemm_dt(q->dst.dt) || !cv_is_gemm_dt(q->wdt) ||
      !cv_is_gemm_dt(out_dt))
    return false;
  if (path == CV_PATH_GEMM) return true;
  int64_t Kd = q->Cg * q->kprod;
  return Kd >= 8 && (q->M >= 8 || (q->M >= 2 && Kd >= 64));
}

static void cv_finish(cv_prob_t* q) {
  q->kprod = cv_prod(q->k, q->nd);
  q->kouter = cv_prod(q->k, q->nd - 1);
}

/* Block size (<= cap, a multiple of `align` unless the whole) for splitting
 * `total` items, given `other` independent tasks per block, so that the
 * task count spreads evenly over `threads`: among block counts from the
 * fewest that fit `cap` up to blocks of `minb`, the least idle-thread time
 * wins (ties: fewer blocks). */
static int64_t cv_split(int64_t total, int64_t cap, int64_t minb, int64_t align, int64_t other,
                        int threads) {
  if (total <= 0) return cap;
  int64_t kmin = (total + cap - 1) / cap, kmax = cv_max(kmin, (total + minb - 1) / minb);
  int64_t best = cap;
  double best_cost = 1e300;
  for (int64_t k = kmin; k <= kmax && k <= kmin + 64; ++k) {
    int64_t b = ((total + k - 1) / k + align - 1) / align * align;
    if (b > cap) b = cap;
    int64_t blocks = (total + b - 1) / b;
    int64_t tasks = other * blocks;
    int64_t rounds = (tasks + threads - 1) / threads;
    /* time ~ rounds * block size, plus a small per-block overhead */
    double cost = (double)rounds * (double)b + 8.0 * (double)blocks * (double)other / threads;
    if (cost < best_cost) {
      best_cost = cost;
      best = b;
    }
  }
  return best;
}

/* P1: q->dst = conv(q->src) (+ bias on dst channels). */
static void cv_p1(const cv_prob_t* q, const char* b, int bdt, int64_t bs, int out_dt, int path,
                  tpu_threadpool_t* pool) {
  cv_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.q = q;
  x.b = b;
  x.bdt = bdt;
  x.bs = bs;
  int nd = q->nd;
  int64_t chans = q->G * q->M;
  if ((path == CV_PATH_BLOCKED || (path == CV_PATH_AUTO && q->avx2 && cv_blk_auto(q))) && cv_blk_ok(q, out_dt)) {
    cv_bgeo_t bg;
    cv_bgeo(q, &bg);
    int64_t maxr = cv_blk_maxrows(q, &bg);
    x.nb = cv_split(bg.OH, maxr, cv_min(maxr, 2), 1, q->N * q->G, tpu_threadpool_size(pool));
    tpu_parallel_for(pool, q->N * q->G * ((bg.OH + x.nb - 1) / x.nb), 1, cv_blk_par, &x);
    return;
  }
  if (path == CV_PATH_BLOCKED) path = CV_PATH_AUTO; /* not runnable blocked: the usual choice */
  if (cv_gemm_ok(q, out_dt, path)) {
    x.P = cv_prod(q->dst.sz, nd);
    x.mblocks = (q->M + CV_MB - 1) / CV_MB;
    x.nb = cv_split(x.P, CV_NB, 64, 16, q->N * q->G * x.mblocks, tpu_threadpool_size(pool));
    x.pblocks = (x.P + x.nb - 1) / x.nb;
    x.direct_c = q->dst.dt == TPU_DTYPE_F32 && cv_flat(&q->dst, nd);
    bool same = true;
    for (int j = 0; j < nd; ++j) {
      if (q->k[j] != 1 || q->s[j] != 1 || q->p[j] != 0 || q->src.sz[j] != q->dst.sz[j]) same = false;
    }
    x.pointwise = same && cv_flat(&q->src, nd);
    tpu_parallel_for(pool, q->N * q->G * x.mblocks * x.pblocks, 1, cv_p1_gemm_par, &x);
    return;
  }
  x.rows = cv_prod(q->dst.sz, nd - 1);
  int64_t tasks = q->N * chans * x.rows;
  int64_t work = cv_max(1, q->dst.sz[nd - 1] * q->Cg * q->kprod);
  int64_t grain = cv_max(1, 16384 / work);
  if (!cv_is_gemm_dt(out_dt)) /* f64 and integers: double accumulation */
    tpu_parallel_for(pool, tasks, grain, cv_p1_direct_par_f64, &x);
  else
    tpu_parallel_for(pool, tasks, grain, cv_p1_direct_par_f32, &x);
}

static int64_t cv_gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* P2: q->src = conv^T(q->dst) (+ bias on src channels), as prod(s) unit-stride
 * P1 problems, one per residue class r of (x + p) mod s: those X positions
 * form a sub-grid x = x0 + s*t, fed only by the taps with k*d = r (mod s),
 * which read y = t + q0 - (k*d - r)/s: a dense correlation of Y with the
 * flipped sub-kernel (dilation lcm(d, s)/s), written through a strided view
 * of X. With s == 1 this is the single flipped-kernel convolution. */
static void cv_p2(const cv_prob_t* q, const char* b, int bdt, int64_t bs, int out_dt, int path,
                  tpu_threadpool_t* pool) {
  int nd = q->nd;
  int64_t classes = cv_prod(q->s, nd);
  for (int64_t cls = 0; cls < classes; ++cls) {
    int64_t r[CV_MAXSD];
    cv_unravel(cls, q->s, nd, r);
    cv_prob_t f = *q;
    f.src = q->dst;
    f.dst = q->src;
    f.M = q->Cg;
    f.Cg = q->M;
    f.wg = q->wg;
    f.wm = q->wc;
    f.wc = q->wm;
    const char* w = q->w;
    bool empty = false;
    for (int j = 0; j < nd; ++j) {
      int64_t s = q->s[j], d = q->d[j], p = q->p[j], K = q->k[j], Xn = q->src.sz[j];
      int64_t x0 = ((r[j] - p) % s + s) % s;
      int64_t T = x0 < Xn ? (Xn - 1 - x0) / s + 1 : 0;
      if (T == 0) empty = true;
      int64_t kstep = s / cv_gcd(d, s);
      int64_t ka = -1;
      for (int64_t k = 0; k < K && k < kstep; ++k)
        if ((k * d) % s == r[j]) {
          ka = k;
          break;
        }
      int64_t Kr = ka < 0 ? 0 : (K - 1 - ka) / kstep + 1;
      int64_t q0 = (x0 + p - r[j]) / s;
      int64_t ea = ka < 0 ? 0 : (ka * d - r[j]) / s;
      int64_t dd = kstep * d / s;
      f.k[j] = Kr;
      f.s[j] = 1;
      f.d[j] = dd;
      f.p[j] = (Kr - 1) * dd + ea - q0;
      if (Kr > 0) w += (ka + (Kr - 1) * kstep) * q->wk[j] * q->wes;
      f.wk[j] = -kstep * q->wk[j];
      f.dst.sz[j] = T;
      f.dst.st[j] = q->src.st[j] * s;
      f.dst.p += x0 * q->src.st[j] * q->src.es;
    }
    if (empty) continue;
    f.w = w;
    cv_finish(&f);
    cv_p1(&f, b, bdt, bs, out_dt, path, pool);
  }
}

/* P3: gw = corr(q->dst, q->src). */
static void cv_p3(const cv_prob_t* q, const tpu_tensor_t* gw, int path, tpu_threadpool_t* pool) {
  cv_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.q = q;
  int nd = q->nd;
  x.gw = (char*)gw->data;
  x.gwdt = gw->dtype;
  x.gwes = (int32_t)tpu_dtype_size((tpu_dtype_t)gw->dtype);
  x.gwm = gw->strides[0];
  x.gwg = q->M * gw->strides[0];
  x.gwc = gw->strides[1];
  for (int j = 0; j < nd; ++j) x.gwk[j] = gw->strides[2 + j];
  if (cv_gemm_ok(q, gw->dtype, path)) {
    x.P = cv_prod(q->dst.sz, nd);
    x.mblocks = (q->M + CV_MB - 1) / CV_MB;
    int64_t Kd = q->Cg * q->kprod;
    x.nb = cv_split(Kd, CV_NB, 32, 16, q->G * x.mblocks, tpu_threadpool_size(pool));
    int64_t kblocks = (Kd + x.nb - 1) / x.nb;
    tpu_parallel_for(pool, q->G * x.mblocks * kblocks, 1, cv_p3_gemm_par, &x);
    return;
  }
  int64_t tasks = q->G * q->M * q->Cg * q->kouter;
  int64_t work = cv_max(1, q->N * cv_prod(q->dst.sz, nd) * q->k[nd - 1]);
  int64_t grain = cv_max(1, 16384 / work);
  if (!cv_is_gemm_dt(gw->dtype))
    tpu_parallel_for(pool, tasks, grain, cv_p3_direct_par_f64, &x);
  else
    tpu_parallel_for(pool, tasks, grain, cv_p3_direct_par_f32, &x);
}

/* grad_bias[c] = sum over n and positions of g[n, c, ...]. */
typedef struct {
  const tpu_tensor_t* g;
  const tpu_tensor_t* gb;
} cv_bias_ctx_t;

static void cv_bias_par(void* ctx, int64_t b, int64_t e) {
  const cv_bias_ctx_t* x = (const cv_bias_ctx_t*)ctx;
  const tpu_tensor_t* g = x->g;
  int nd = g->ndim - 2, L = nd - 1;
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)g->dtype);
  int64_t rows = cv_prod(g->sizes + 2, nd - 1);
  int64_t W = g->sizes[2 + L];
  float buf[CV_WB];
  for (int64_t c = b; c < e; ++c) {
    double acc = 0.0;
    for (int64_t n = 0; n < g->sizes[0]; ++n) {
      for (int64_t r = 0; r < rows; ++r) {
        int64_t idx[CV_MAXSD];
        cv_unravel(r, g->sizes + 2, L, idx);
        int64_t off = n * g->strides[0] + c * g->strides[1];
        for (int j = 0; j < L; ++j) off += idx[j] * g->strides[2 + j];
        const char* row = (const char*)g->data + off * es;
        for (int64_t w0 = 0; w0 < W; w0 += CV_WB) {
          int64_t wb = cv_min(CV_WB, W - w0);
          if (!cv_is_gemm_dt(g->dtype)) {
            for (int64_t i = 0; i < wb; ++i) acc += tpu_ku_load_f64(row + (w0 + i) * g->strides[2 + L] * es, g->dtype);
            continue;
          }
          cv_load_f32(row + w0 * g->strides[2 + L] * es, g->dtype, g->strides[2 + L], wb, buf);
          float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t i = 0;
          for (; i + 8 <= wb; i += 8)
            for (int u = 0; u < 8; ++u) s8[u] += buf[i + u];
          for (; i < wb; ++i) s8[0] += buf[i];
          acc += ((double)s8[0] + s8[1] + s8[2] + s8[3]) + ((double)s8[4] + s8[5] + s8[6] + s8[7]);
        }
      }
    }
    char* o = (char*)x->gb->data + c * x->gb->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)x->gb->dtype);
    tpu_ku_store_f64(o, x->gb->dtype, acc);
  }
}

/* ---- entries ------------------------------------------------------------------- */

typedef struct {
  const tpu_tensor_t* x; /* regular-conv input side */
  const tpu_tensor_t* y; /* regular-conv output side */
  const tpu_tensor_t* w;
  int nd;
  int64_t G;
  bool transposed;
  int64_t s[CV_MAXSD], p[CV_MAXSD], d[CV_MAXSD];
} cv_args_t;

static bool cv_valid(const tpu_tensor_t* t) { return t && t->dtype != TPU_DTYPE_INVALID; }

static tpu_status_t cv_ints(const tpu_k_call_t* call, int i, int nd, int64_t dflt, int64_t lo,
                            const char* what, int64_t* out) {
  for (int j = 0; j < nd; ++j) out[j] = dflt;
  if (tpu_ku_is_none(call, i)) return TPU_OK;
  const tpu_k_value_t* v = &call->args[i];
  if (v->kind == TPU_K_INT) {
    for (int j = 0; j < nd; ++j) out[j] = v->v.i;
  } else if (v->kind == TPU_K_INTS) {
    if (v->v.ints.len != nd && v->v.ints.len != 1)
      return TPU_KU_INVALID(call, "expected %s to have %d elements (one per spatial dim), got %lld",
                            what, nd, (long long)v->v.ints.len);
    for (int j = 0; j < nd; ++j) out[j] = v->v.ints.data[v->v.ints.len == 1 ? 0 : j];
  } else {
    return TPU_KU_INVALID(call, "expected an int list for %s", what);
  }
  for (int j = 0; j < nd; ++j)
    if (out[j] < lo)
      return TPU_KU_INVALID(call, "%s must be >= %lld, got %lld", what, (long long)lo,
                            (long long)out[j]);
  return TPU_OK;
}

static tpu_status_t cv_dtype_ok(const tpu_k_call_t* call, const tpu_tensor_t* t) {
  if (t && !cv_dtype_supported(t->dtype)) return tpu_ku_unsupported_dtype(call, t->dtype);
  return TPU_OK;
}

static bool cv_same_sizes(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; ++i)
    if (a->sizes[i] != b->sizes[i]) return false;
  return true;
}

/* Parses and validates; `bwd`: the conv_bwd argument layout. */
static tpu_status_t cv_parse(const tpu_k_call_t* call, bool bwd, cv_args_t* a) {
  memset(a, 0, sizeof(*a));
  int o = bwd ? 1 : 0;
  const tpu_tensor_t* in = tpu_ku_tensor(call, o);
  const tpu_tensor_t* w = tpu_ku_tensor(call, o + 1);
  const tpu_tensor_t* other = bwd ? tpu_ku_tensor(call, 0) : (call->num_outputs > 0 ? &call->outputs[0] : NULL);
  if (!in || !w || !other) return TPU_KU_INVALID(call, "expected tensor arguments");
  TPU_RETURN_IF_ERROR(cv_dtype_ok(call, in));
  TPU_RETURN_IF_ERROR(cv_dtype_ok(call, w));
  TPU_RETURN_IF_ERROR(cv_dtype_ok(call, other));
  if (w->ndim < 3)
    return TPU_KU_INVALID(call, "expected a weight with at least one spatial dim, got %d-D", (int)w->ndim);
  if (in->ndim != w->ndim || other->ndim != w->ndim)
    return TPU_KU_INVALID(call, "expected %d-D input and output for a %d-D weight, got %d-D and %d-D",
                          (int)w->ndim, (int)w->ndim, (int)in->ndim, (int)other->ndim);
  int nd = w->ndim - 2;
  a->nd = nd;
  a->w = w;
  a->transposed = tpu_ku_bool(call, 6, false);
  a->G = tpu_ku_int(call, 8, 1);
  if (a->G < 1) return TPU_KU_INVALID(call, "non-positive groups is not supported");
  TPU_RETURN_IF_ERROR(cv_ints(call, 3, nd, 1, 1, "stride", a->s));
  TPU_RETURN_IF_ERROR(cv_ints(call, 4, nd, 0, 0, "padding", a->p));
  TPU_RETURN_IF_ERROR(cv_ints(call, 5, nd, 1, 1, "dilation", a->d));
  a->x = a->transposed ? other : in;
  a->y = a->transposed ? in : other;
  int64_t G = a->G;
  if (a->y->sizes[1] != w->sizes[0] || w->sizes[0] % G != 0 || w->sizes[1] * G != a->x->sizes[1])
    return TPU_KU_INVALID(call,
                          "channel mismatch: %s has %lld channels, weight is [%lld, %lld, ...] with "
                          "groups=%lld, %s has %lld channels",
                          a->transposed ? "output" : "input", (long long)a->x->sizes[1],
                          (long long)w->sizes[0], (long long)w->sizes[1], (long long)G,
                          a->transposed ? "input" : "output", (long long)a->y->sizes[1]);
  if (a->x->sizes[0] != a->y->sizes[0])
    return TPU_KU_INVALID(call, "batch mismatch: %lld vs %lld", (long long)a->x->sizes[0],
                          (long long)a->y->sizes[0]);
  for (int j = 0; j < nd; ++j)
    if (w->sizes[2 + j] < 1) return TPU_KU_INVALID(call, "kernel size must be positive");
  if (!bwd) {
    const tpu_tensor_t* b = tpu_ku_tensor(call, 2);
    if (b) {
      TPU_RETURN_IF_ERROR(cv_dtype_ok(call, b));
      if (b->ndim != 1 || b->sizes[0] != other->sizes[1])
        return TPU_KU_INVALID(call, "expected a bias of %lld elements", (long long)other->sizes[1]);
    }
  } else {
    const tpu_tensor_t* go = tpu_ku_tensor(call, 0);
    if (call->num_outputs > 0 && cv_valid(&call->outputs[0])) {
      TPU_RETURN_IF_ERROR(cv_dtype_ok(call, &call->outputs[0]));
      if (!cv_same_sizes(&call->outputs[0], in)) return TPU_KU_INVALID(call, "grad_input must have the input's sizes");
    }
    if (call->num_outputs > 1 && cv_valid(&call->outputs[1])) {
      TPU_RETURN_IF_ERROR(cv_dtype_ok(call, &call->outputs[1]));
      if (!cv_same_sizes(&call->outputs[1], w)) return TPU_KU_INVALID(call, "grad_weight must have the weight's sizes");
    }
    if (call->num_outputs > 2 && cv_valid(&call->outputs[2])) {
      const tpu_tensor_t* gb = &call->outputs[2];
      TPU_RETURN_IF_ERROR(cv_dtype_ok(call, gb));
      if (gb->ndim != 1 || gb->sizes[0] != go->sizes[1])
        return TPU_KU_INVALID(call, "grad_bias must have %lld elements", (long long)go->sizes[1]);
    }
  }
  return TPU_OK;
}

static void cv_act(cv_act_t* a, const tpu_tensor_t* t, int nd) {
  memset(a, 0, sizeof(*a));
  a->p = (char*)t->data;
  a->dt = t->dtype;
  a->es = (int32_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  a->sn = t->strides[0];
  a->sc = t->strides[1];
  for (int j = 0; j < nd; ++j) {
    a->sz[j] = t->sizes[2 + j];
    a->st[j] = t->strides[2 + j];
  }
}

/* The regular problem over tensors x (input side) and y (output side). */
static void cv_prob(cv_prob_t* q, const cv_args_t* a, const tpu_tensor_t* x, const tpu_tensor_t* y) {
  memset(q, 0, sizeof(*q));
  int nd = a->nd;
  q->nd = nd;
  q->N = x->sizes[0];
  q->G = a->G;
  q->M = a->w->sizes[0] / a->G;
  q->Cg = a->w->sizes[1];
  cv_act(&q->src, x, nd);
  cv_act(&q->dst, y, nd);
  for (int j = 0; j < nd; ++j) {
    q->k[j] = a->w->sizes[2 + j];
    q->s[j] = a->s[j];
    q->p[j] = a->p[j];
    q->d[j] = a->d[j];
    q->wk[j] = a->w->strides[2 + j];
  }
  q->w = (const char*)a->w->data;
  q->wdt = a->w->dtype;
  q->wes = (int32_t)tpu_dtype_size((tpu_dtype_t)a->w->dtype);
  q->wm = a->w->strides[0];
  q->wg = q->M * a->w->strides[0];
  q->wc = a->w->strides[1];
  q->avx2 = tpu_k_gemm_use_avx2();
  cv_finish(q);
}

static tpu_status_t cv_fwd_check(const tpu_k_call_t* call) {
  cv_args_t a;
  return cv_parse(call, false, &a);
}

static tpu_status_t cv_fwd_run(const tpu_k_call_t* call) {
  cv_args_t a;
  TPU_RETURN_IF_ERROR(cv_parse(call, false, &a));
  const tpu_tensor_t* out = &call->outputs[0];
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  const tpu_tensor_t* b = tpu_ku_tensor(call, 2);
  const char* bp = b ? (const char*)b->data : NULL;
  int bdt = b ? b->dtype : 0;
  int64_t bs = b ? b->strides[0] : 0;
  int path = cv_path_env();
  cv_prob_t q;
  cv_prob(&q, &a, a.x, a.y);
  if (a.transposed)
    cv_p2(&q, bp, bdt, bs, out->dtype, path, call->pool);
  else
    cv_p1(&q, bp, bdt, bs, out->dtype, path, call->pool);
  return TPU_OK;
}

static tpu_status_t cv_bwd_check(const tpu_k_call_t* call) {
  cv_args_t a;
  return cv_parse(call, true, &a);
}

static tpu_status_t cv_bwd_run(const tpu_k_call_t* call) {
  cv_args_t a;
  TPU_RETURN_IF_ERROR(cv_parse(call, true, &a));
  int path = cv_path_env();
  const tpu_tensor_t* go = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* gi = call->num_outputs > 0 && cv_valid(&call->outputs[0]) ? &call->outputs[0] : NULL;
  const tpu_tensor_t* gw = call->num_outputs > 1 && cv_valid(&call->outputs[1]) ? &call->outputs[1] : NULL;
  const tpu_tensor_t* gb = call->num_outputs > 2 && cv_valid(&call->outputs[2]) ? &call->outputs[2] : NULL;
  if (gi && tpu_tensor_numel(gi) > 0) {
    cv_prob_t q;
    if (!a.transposed) { /* grad wrt X: P2 from grad_output */
      cv_prob(&q, &a, gi, go);
      cv_p2(&q, NULL, 0, 0, gi->dtype, path, call->pool);
    } else { /* grad wrt Y: P1 from grad_output */
      cv_prob(&q, &a, go, gi);
      cv_p1(&q, NULL, 0, 0, gi->dtype, path, call->pool);
    }
  }
  if (gw && tpu_tensor_numel(gw) > 0) {
    cv_prob_t q;
    cv_prob(&q, &a, a.x, a.y); /* (input, grad_output) or (grad_output, input) */
    cv_p3(&q, gw, path, call->pool);
  }
  if (gb && tpu_tensor_numel(gb) > 0) {
    cv_bias_ctx_t x = {go, gb};
    int64_t per = cv_max(1, tpu_tensor_numel(go) / gb->sizes[0]);
    tpu_parallel_for(call->pool, gb->sizes[0], cv_max(1, 32768 / per), cv_bias_par, &x);
  }
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_conv_entries[] = {
    {"tpu::conv_fwd", cv_fwd_run, cv_fwd_check, 0, NULL},
    {"tpu::conv_bwd", cv_bwd_run, cv_bwd_check, 0, NULL},
};
const size_t tpu_k_conv_count = sizeof(tpu_k_conv_entries) / sizeof(tpu_k_conv_entries[0]);

#else /* CV_TEMPLATE_PASS: direct path, T = float or double */

static inline T SFX(cv_ld)(const char* p, int dt) { return (T)cv_ldd(p, dt); }

/* dst[i] = src[i * stride] for i < n, converted to T. */
static void SFX(cv_load)(const char* p, int dt, int64_t stride, int64_t n, T* dst) {
  if (dt == TPU_DTYPE_F32) {
    const float* s = (const float*)p;
    if (stride == 1)
      for (int64_t i = 0; i < n; ++i) dst[i] = (T)s[i];
    else
      for (int64_t i = 0; i < n; ++i) dst[i] = (T)s[i * stride];
  } else if (dt == TPU_DTYPE_BF16) {
    const uint16_t* s = (const uint16_t*)p;
    if (stride == 1)
      for (int64_t i = 0; i < n; ++i) dst[i] = (T)tpu_ku_bf16_to_f32(s[i]);
    else
      for (int64_t i = 0; i < n; ++i) dst[i] = (T)tpu_ku_bf16_to_f32(s[i * stride]);
  } else if (dt == TPU_DTYPE_F64) {
    const double* s = (const double*)p;
    for (int64_t i = 0; i < n; ++i) dst[i] = (T)s[i * stride];
  } else {
    int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
    for (int64_t i = 0; i < n; ++i) dst[i] = (T)cv_ldd(p + i * stride * es, dt);
  }
}

/* dst[i] = row[lo + i] (zero outside [0, len)), i < n; row stride `st`. */
static void SFX(cv_load_pad)(const char* row, int dt, int64_t es, int64_t st, int64_t len,
                             int64_t lo, int64_t n, T* dst) {
  int64_t a = cv_max(lo, 0), b = cv_min(lo + n, len);
  if (a >= b) {
    for (int64_t i = 0; i < n; ++i) dst[i] = 0;
    return;
  }
  for (int64_t i = lo; i < a; ++i) dst[i - lo] = 0;
  SFX(cv_load)(row + a * st * es, dt, st, b - a, dst + (a - lo));
  for (int64_t i = b; i < lo + n; ++i) dst[i - lo] = 0;
}

static void SFX(cv_store)(char* p, int dt, int64_t stride, int64_t n, const T* src) {
  switch (dt) {
    case TPU_DTYPE_F32:
      if (stride == 1)
        for (int64_t i = 0; i < n; ++i) ((float*)p)[i] = (float)src[i];
      else
        for (int64_t i = 0; i < n; ++i) ((float*)p)[i * stride] = (float)src[i];
      break;
    case TPU_DTYPE_F64:
      for (int64_t i = 0; i < n; ++i) ((double*)p)[i * stride] = (double)src[i];
      break;
    case TPU_DTYPE_BF16:
      if (stride == 1)
        for (int64_t i = 0; i < n; ++i) ((uint16_t*)p)[i] = cv_bf16((float)src[i]);
      else
        for (int64_t i = 0; i < n; ++i) ((uint16_t*)p)[i * stride] = tpu_ku_f32_to_bf16((float)src[i]);
      break;
    case TPU_DTYPE_F16:
      for (int64_t i = 0; i < n; ++i) ((uint16_t*)p)[i * stride] = tpu_ku_f32_to_f16((float)src[i]);
      break;
    default: {
      int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
      for (int64_t i = 0; i < n; ++i) tpu_ku_store_f64(p + i * stride * es, dt, (double)src[i]);
    }
  }
}

/* sum a[i] * b[i] with 8 partial sums (vectorisable). */
static T SFX(cv_dot)(const T* a, const T* b, int64_t n) {
  T s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) s8[u] += a[i + u] * b[i + u];
  T s = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

static T SFX(cv_bias)(const cv_ctx_t* x, int64_t ch) {
  if (!x->b) return 0;
  return SFX(cv_ld)(x->b + ch * x->bs * (int64_t)tpu_dtype_size((tpu_dtype_t)x->bdt), x->bdt);
}

/* P1 direct: one dst row (n, channel, outer position), all of its last dim. */
static void SFX(cv_p1_direct_task)(const cv_ctx_t* x, int64_t t) {
  const cv_prob_t* q = x->q;
  const cv_act_t* X = &q->src;
  const cv_act_t* Y = &q->dst;
  int nd = q->nd, L = nd - 1;
  int64_t row = t % x->rows;
  t /= x->rows;
  int64_t ch = t % (q->G * q->M), n = t / (q->G * q->M);
  int64_t g = ch / q->M, m = ch % q->M;
  int64_t yo[CV_MAXSD], kpo[CV_MAXSD];
  cv_unravel(row, Y->sz, L, yo);
  int64_t OW = Y->sz[L], IW = X->sz[L], s = q->s[L], d = q->d[L], p = q->p[L], KW = q->k[L];
  int64_t xst = X->st[L];
  T acc[CV_WB];
  T buf[CV_SPAN];
  /* span path: one zero-padded input span per (channel, outer taps) */
  int64_t reach = KW > 0 ? (KW - 1) * d + 1 : 1;
  int64_t wbs = reach < CV_SPAN ? cv_min(CV_WB, (CV_SPAN - reach) / s + 1) : 0;
  bool span = wbs >= 16 || wbs >= OW;
  int64_t wblk = span ? wbs : CV_WB;
  char* yrow = Y->p + n * Y->sn * Y->es + ch * Y->sc * Y->es;
  for (int j = 0; j < L; ++j) yrow += yo[j] * Y->st[j] * Y->es;
  T bias = SFX(cv_bias)(x, ch);
  for (int64_t ow0 = 0; ow0 < OW; ow0 += wblk) {
    int64_t wb = cv_min(wblk, OW - ow0);
    for (int64_t j = 0; j < wb; ++j) acc[j] = 0;
    for (int64_t c = 0; c < q->Cg; ++c) {
      const char* xc = X->p + (n * X->sn + (g * q->Cg + c) * X->sc) * X->es;
      for (int64_t ko = 0; ko < q->kouter; ++ko) {
        cv_unravel(ko, q->k, L, kpo);
        int64_t xoff = 0, woff = g * q->wg + m * q->wm + c * q->wc;
        bool ok = true;
        for (int j = 0; j < L; ++j) {
          int64_t xi = yo[j] * q->s[j] + kpo[j] * q->d[j] - q->p[j];
          if (xi < 0 || xi >= X->sz[j]) {
            ok = false;
            break;
          }
          xoff += xi * X->st[j];
          woff += kpo[j] * q->wk[j];
        }
        if (!ok) continue;
        const char* xr = xc + xoff * X->es;
        if (span) {
          int64_t lo = ow0 * s - p, cnt = (wb - 1) * s + reach;
          SFX(cv_load_pad)(xr, X->dt, X->es, xst, IW, lo, cnt, buf);
          if (s == 1 && KW >= 2 && KW <= 4) { /* short kernels: all taps per output at once */
            T w4[4] = {0, 0, 0, 0};
            for (int64_t kw = 0; kw < KW; ++kw) w4[kw] = SFX(cv_ld)(q->w + (woff + kw * q->wk[L]) * q->wes, q->wdt);
            const T *x0 = buf, *x1 = buf + d, *x2 = KW > 2 ? buf + 2 * d : buf, *x3 = KW > 3 ? buf + 3 * d : buf;
            if (KW == 4)
              for (int64_t j = 0; j < wb; ++j) acc[j] += (w4[0] * x0[j] + w4[1] * x1[j]) + (w4[2] * x2[j] + w4[3] * x3[j]);
            else if (KW == 3)
              for (int64_t j = 0; j < wb; ++j) acc[j] += (w4[0] * x0[j] + w4[1] * x1[j]) + w4[2] * x2[j];
            else
              for (int64_t j = 0; j < wb; ++j) acc[j] += w4[0] * x0[j] + w4[1] * x1[j];
            continue;
          }
          for (int64_t kw = 0; kw < KW; ++kw) {
            T w = SFX(cv_ld)(q->w + (woff + kw * q->wk[L]) * q->wes, q->wdt);
            const T* xb = buf + kw * d;
            if (s == 1) {
              for (int64_t j = 0; j < wb; ++j) acc[j] += w * xb[j];
            } else {
              for (int64_t j = 0; j < wb; ++j) acc[j] += w * xb[j * s];
            }
          }
        } else {
          for (int64_t kw = 0; kw < KW; ++kw) {
            int64_t lo = cv_max(ow0, cv_cdiv(p - kw * d, s));
            int64_t hi = cv_min(ow0 + wb, cv_fdiv(IW - 1 - kw * d + p, s) + 1);
            if (lo >= hi) continue;
            T w = SFX(cv_ld)(q->w + (woff + kw * q->wk[L]) * q->wes, q->wdt);
            SFX(cv_load)(xr + (lo * s + kw * d - p) * xst * X->es, X->dt, s * xst, hi - lo, buf);
            T* a = acc + (lo - ow0);
            for (int64_t j = 0; j < hi - lo; ++j) a[j] += w * buf[j];
          }
        }
      }
    }
    if (x->b)
      for (int64_t j = 0; j < wb; ++j) acc[j] += bias;
    SFX(cv_store)(yrow + ow0 * Y->st[L] * Y->es, Y->dt, Y->st[L], wb, acc);
  }
}

static void SFX(cv_p1_direct_par)(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) SFX(cv_p1_direct_task)((const cv_ctx_t*)ctx, t);
}

/* P3 direct: dW[dst channel, src channel, outer taps, all last-dim taps]. */
static void SFX(cv_p3_direct_task)(const cv_ctx_t* x, int64_t t) {
  const cv_prob_t* q = x->q;
  const cv_act_t* X = &q->src;
  const cv_act_t* Y = &q->dst;
  int nd = q->nd, L = nd - 1;
  int64_t ko = t % q->kouter;
  t /= q->kouter;
  int64_t i = t % q->Cg, ych = t / q->Cg;
  int64_t g = ych / q->M, o = ych % q->M;
  int64_t xch = g * q->Cg + i;
  int64_t kpo[CV_MAXSD], yo[CV_MAXSD];
  cv_unravel(ko, q->k, L, kpo);
  int64_t OW = Y->sz[L], IW = X->sz[L], s = q->s[L], d = q->d[L], p = q->p[L], KW = q->k[L];
  int64_t rows = cv_prod(Y->sz, L);
  T ybuf[CV_WB];
  T xbuf[CV_WB];
  double acc[CV_KWC];
  int64_t gwo = g * x->gwg + o * x->gwm + i * x->gwc;
  for (int j = 0; j < L; ++j) gwo += kpo[j] * x->gwk[j];
  for (int64_t kw0 = 0; kw0 < KW; kw0 += CV_KWC) {
    int64_t kwn = cv_min(CV_KWC, KW - kw0);
    for (int64_t k = 0; k < kwn; ++k) acc[k] = 0.0;
    for (int64_t n = 0; n < q->N; ++n) {
      for (int64_t r = 0; r < rows; ++r) {
        cv_unravel(r, Y->sz, L, yo);
        int64_t xoff = 0, yoff = 0;
        bool ok = true;
        for (int j = 0; j < L; ++j) {
          int64_t xi = yo[j] * q->s[j] + kpo[j] * q->d[j] - q->p[j];
          if (xi < 0 || xi >= X->sz[j]) {
            ok = false;
            break;
          }
          xoff += xi * X->st[j];
          yoff += yo[j] * Y->st[j];
        }
        if (!ok) continue;
        const char* yr = Y->p + (n * Y->sn + ych * Y->sc + yoff) * Y->es;
        const char* xr = X->p + (n * X->sn + xch * X->sc + xoff) * X->es;
        for (int64_t ow0 = 0; ow0 < OW; ow0 += CV_WB) {
          int64_t wb = cv_min(CV_WB, OW - ow0);
          SFX(cv_load)(yr + ow0 * Y->st[L] * Y->es, Y->dt, Y->st[L], wb, ybuf);
          for (int64_t k = 0; k < kwn; ++k) {
            int64_t kw = kw0 + k;
            int64_t lo = cv_max(ow0, cv_cdiv(p - kw * d, s));
            int64_t hi = cv_min(ow0 + wb, cv_fdiv(IW - 1 - kw * d + p, s) + 1);
            if (lo >= hi) continue;
            SFX(cv_load)(xr + (lo * s + kw * d - p) * X->st[L] * X->es, X->dt, s * X->st[L], hi - lo, xbuf);
            acc[k] += (double)SFX(cv_dot)(ybuf + (lo - ow0), xbuf, hi - lo);
          }
        }
      }
    }
    for (int64_t k = 0; k < kwn; ++k)
      tpu_ku_store_f64(x->gw + (gwo + (kw0 + k) * x->gwk[L]) * x->gwes, x->gwdt, acc[k]);
  }
}

static void SFX(cv_p3_direct_par)(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) SFX(cv_p3_direct_task)((const cv_ctx_t*)ctx, t);
}

#endif /* CV_TEMPLATE_PASS */
