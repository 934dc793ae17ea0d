/* fused.c - kernel family "fused": the short pointwise/row chains of a
 * decoder layer that Transformers writes as several ATen ops, each done in
 * one pass (see tpu/kernels.h for the ABI).
 *
 *   tpu::rms_norm(x, weight?, eps, unit_offset) -> y
 *   tpu::rms_norm_backward(grad, x, weight?, eps, unit_offset, chunks) -> (dx, dw_part)
 *   tpu::rope(q, k, cos, sin) -> (q_out, k_out)
 *   tpu::rope_backward(grad_q, grad_k, cos, sin) -> (dq, dk)
 *   tpu::swiglu(gate, up, act) -> y
 *   tpu::swiglu_backward(grad, gate, up, act) -> (dgate, dup)
 *
 * Queued through the bridge's boxed path (schemas and meta functions in
 * torch_tpu/csrc/aten/fused.cpp). Dtypes float32, bfloat16, float16; math in
 * float32; any strides.
 *
 * rms_norm (normalises over the last dim, H): n = x * rsqrt(mean(x^2) + eps)
 * in float32, then
 *   unit_offset false (Llama and most models):  y = weight * n.to(x.dtype)
 *       (y's dtype is promote(weight, x); no weight: y = n.to(x.dtype)),
 *   unit_offset true (Gemma):  y = (n * (1 + weight.float())).to(x.dtype).
 * Intermediate roundings of the reference ops are reproduced, so half
 * results match the unfused ops up to the last bit of float32 math.
 * rms_norm_backward: dx (x's dtype) and, when weight is given, per-chunk
 * float32 partial sums of dweight: rows are split into `chunks` contiguous
 * ranges (dw_part [chunks, H], one range per task, so the result does not
 * depend on the thread count); the caller sums dw_part over dim 0.
 *
 * rope: q [B, Hq, L, D], k [B, Hk, L, D]; cos/sin [B or 1, L or 1, R] or
 * [L or 1, R], applied to every head (Transformers' unsqueeze_dim=1), R even
 * and <= D: the first R channels are rotated with the rotate_half
 * convention, out = x * cos + rotate_half(x) * sin, the other D - R pass
 * through (partial rotary). Half inputs: each product and the sum rounded
 * to the dtype like the unfused ops. rope_backward applies the transposed
 * rotation (the gradient for q and k; cos/sin get none).
 *
 * swiglu: y = act(gate) * up with act "silu" or "gelu_tanh" (gelu with
 * tanh approximation); act(gate) rounded to the dtype before the product,
 * as the unfused ops do. gate and up have equal shapes and dtypes.
 *
 * The row engines below are compiled twice: here (portable) and by
 * arch/x86_64/fused_avx2.c with FU_ARCH_AVX2 (-mavx2 -mfma -mf16c), which
 * exports them as tpu_k_avx2_fu_*; the entry points pick one at run time. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/ew_vecmath.h"
#include "kernels/kutil.h"

#define FU_CHUNK 256     /* floats per stack buffer */
#define FU_GRAIN 16384   /* elements per parallel task, at least */

/* ---- contexts (shared by both builds) ---------------------------------------- */

/* A tensor seen as rows over its last dim. */
typedef struct {
  char* p;
  int dt;
  int64_t es;                 /* element bytes */
  int32_t nlead;              /* leading dims */
  int64_t sizes[TPU_MAX_DIMS];
  int64_t bst[TPU_MAX_DIMS];  /* byte strides */
} fu_rows_t;

typedef struct {
  int64_t rows, H;
  float eps;
  bool unit_offset, has_w;
  fu_rows_t x, y, g, dx; /* y: forward output; g, dx: backward */
  char* w;
  int wdt;
  int64_t wbst;
  /* backward weight partials */
  char* dwp;
  int64_t dwp_row, dwp_col; /* byte strides */
  int64_t chunks;
} fu_rms_t;

typedef struct {
  int64_t B, L, D, R, Hq, Hk;
  bool bwd;
  int dt;
  char *q, *k, *qo, *ko, *cos, *sin;
  int64_t qs[4], ks[4], qos[4], kos[4]; /* byte strides [B, H, L, D] */
  int64_t cs[3], ss[3];                 /* byte strides [B, L, R], 0 = broadcast */
} fu_rope_t;

enum { FU_ACT_SILU = 0, FU_ACT_GELU_TANH = 1 };

typedef struct {
  int act;
  int dt;
  bool bwd;
} fu_glu_t;

static inline char* fu_row(const fu_rows_t* v, int64_t r) {
  char* p = v->p;
  for (int32_t d = v->nlead - 1; d >= 0 && r; --d) {
    int64_t s = v->sizes[d];
    p += (r % s) * v->bst[d];
    r /= s;
  }
  return p;
}

/* ---- element loops ----------------------------------------------------------------- */

/* n elements of dtype dt at p (byte stride st) -> float */
static inline void fu_load(float* restrict dst, const char* restrict p, int dt, int64_t st, int64_t n) {
  if (dt == TPU_DTYPE_F32) {
    if (st == 4) {
      memcpy(dst, p, (size_t)n * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = *(const float*)(p + i * st);
    }
  } else if (dt == TPU_DTYPE_BF16) {
    if (st == 2) {
      const uint16_t* h = (const uint16_t*)p;
      for (int64_t i = 0; i < n; ++i) dst[i] = ew_vm_bf2f(h[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = ew_vm_bf2f(*(const uint16_t*)(p + i * st));
    }
  } else {
    if (st == 2) {
      const uint16_t* h = (const uint16_t*)p;
      for (int64_t i = 0; i < n; ++i) dst[i] = ew_vm_h2f(h[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = ew_vm_h2f(*(const uint16_t*)(p + i * st));
    }
  }
}

/* n floats -> elements of dtype dt at p (byte stride st), rounded to nearest even */
static inline void fu_store(char* restrict p, int dt, int64_t st, const float* restrict src, int64_t n) {
  if (dt == TPU_DTYPE_F32) {
    if (st == 4) {
      memcpy(p, src, (size_t)n * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) *(float*)(p + i * st) = src[i];
    }
  } else if (dt == TPU_DTYPE_BF16) {
    if (st == 2) {
      uint16_t* h = (uint16_t*)p;
      for (int64_t i = 0; i < n; ++i) h[i] = ew_vm_f2bf(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) *(uint16_t*)(p + i * st) = ew_vm_f2bf(src[i]);
    }
  } else {
    if (st == 2) {
      uint16_t* h = (uint16_t*)p;
      for (int64_t i = 0; i < n; ++i) h[i] = ew_vm_f2h(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) *(uint16_t*)(p + i * st) = ew_vm_f2h(src[i]);
    }
  }
}

/* x = float(dtype(x)): what a cast to a half dtype and back does */
static inline void fu_round(float* restrict x, int dt, int64_t n) {
  if (dt == TPU_DTYPE_BF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = ew_vm_bf2f(ew_vm_f2bf(x[i]));
  } else if (dt == TPU_DTYPE_F16) {
    for (int64_t i = 0; i < n; ++i) x[i] = ew_vm_h2f(ew_vm_f2h(x[i]));
  }
}

/* sum of squares with 16 independent partial sums (vectorisable) */
static inline float fu_sumsq(const float* restrict x, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * x[i + j];
  float s = 0.0f;
  for (; i < n; ++i) s += x[i] * x[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

static inline float fu_dot(const float* restrict a, const float* restrict b, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

/* ---- row engines ------------------------------------------------------------------- */

#ifdef FU_ARCH_AVX2
#define FU_ENGINE(name) void tpu_k_avx2_##name(void* vctx, int64_t r0, int64_t r1)
#define FU_INNER(name) void tpu_k_avx2_##name(void* vctx, char** ptrs, const int64_t* st, int64_t count)
FU_ENGINE(fu_rms_fwd);
FU_ENGINE(fu_rms_bwd);
FU_ENGINE(fu_rope);
FU_INNER(fu_glu);
#else
#define FU_ENGINE(name) static void name(void* vctx, int64_t r0, int64_t r1)
#define FU_INNER(name) static void name(void* vctx, char** ptrs, const int64_t* st, int64_t count)
#endif

/* 1 / sqrt(mean(x^2) + eps) of one row */
static float fu_rms_rstd(const fu_rms_t* c, const char* xr) {
  float buf[FU_CHUNK];
  float ss = 0.0f;
  const int64_t xst = c->x.bst[c->x.nlead];
  for (int64_t i0 = 0; i0 < c->H; i0 += FU_CHUNK) {
    const int64_t n = c->H - i0 < FU_CHUNK ? c->H - i0 : FU_CHUNK;
    fu_load(buf, xr + i0 * xst, c->x.dt, xst, n);
    ss += fu_sumsq(buf, n);
  }
  const float var = ss / (float)c->H;
  return 1.0f / sqrtf(var + c->eps);
}

/* w (Llama: weight; Gemma: 1 + weight) for channels [i0, i0+n) */
static inline void fu_rms_weight(const fu_rms_t* c, float* restrict wb, int64_t i0, int64_t n) {
  fu_load(wb, c->w + i0 * c->wbst, c->wdt, c->wbst, n);
  if (c->unit_offset)
    for (int64_t i = 0; i < n; ++i) wb[i] = 1.0f + wb[i];
}

FU_ENGINE(fu_rms_fwd) {
  const fu_rms_t* c = (const fu_rms_t*)vctx;
  float xb[FU_CHUNK], wb[FU_CHUNK];
  const int64_t xst = c->x.bst[c->x.nlead], yst = c->y.bst[c->y.nlead];
  for (int64_t r = r0; r < r1; ++r) {
    const char* xr = fu_row(&c->x, r);
    char* yr = fu_row(&c->y, r);
    const float rs = fu_rms_rstd(c, xr);
    for (int64_t i0 = 0; i0 < c->H; i0 += FU_CHUNK) {
      const int64_t n = c->H - i0 < FU_CHUNK ? c->H - i0 : FU_CHUNK;
      fu_load(xb, xr + i0 * xst, c->x.dt, xst, n);
      for (int64_t i = 0; i < n; ++i) xb[i] *= rs;
      if (!c->unit_offset) fu_round(xb, c->x.dt, n); /* n.to(input_dtype) */
      if (c->has_w) {
        fu_rms_weight(c, wb, i0, n);
        for (int64_t i = 0; i < n; ++i) xb[i] *= wb[i];
      }
      fu_store(yr + i0 * yst, c->y.dt, yst, xb, n);
    }
  }
}

/* Rows [r0, r1) of chunk tasks: task t covers rows [t*rows/chunks, (t+1)*rows/chunks)
 * when dw_part is wanted (r0, r1 are then task indices). */
FU_ENGINE(fu_rms_bwd) {
  const fu_rms_t* c = (const fu_rms_t*)vctx;
  float xb[FU_CHUNK], gb[FU_CHUNK], wb[FU_CHUNK];
  const int64_t xst = c->x.bst[c->x.nlead], gst = c->g.bst[c->g.nlead], dst = c->dx.bst[c->dx.nlead];
  for (int64_t t = r0; t < r1; ++t) {
    int64_t ra = t, rb = t + 1;
    float* dw = NULL;
    if (c->dwp) {
      ra = t * c->rows / c->chunks;
      rb = (t + 1) * c->rows / c->chunks;
      dw = (float*)(c->dwp + t * c->dwp_row);
      for (int64_t i = 0; i < c->H; ++i) *(float*)((char*)dw + i * c->dwp_col) = 0.0f;
    }
    for (int64_t r = ra; r < rb; ++r) {
      const char* xr = fu_row(&c->x, r);
      const char* gr = fu_row(&c->g, r);
      char* dr = fu_row(&c->dx, r);
      const float rs = fu_rms_rstd(c, xr);
      /* dn = grad * w; dot = sum(dn * n) */
      float dot = 0.0f;
      for (int64_t i0 = 0; i0 < c->H; i0 += FU_CHUNK) {
        const int64_t n = c->H - i0 < FU_CHUNK ? c->H - i0 : FU_CHUNK;
        fu_load(xb, xr + i0 * xst, c->x.dt, xst, n);
        fu_load(gb, gr + i0 * gst, c->g.dt, gst, n);
        if (c->has_w) {
          fu_rms_weight(c, wb, i0, n);
          for (int64_t i = 0; i < n; ++i) gb[i] *= wb[i];
        }
        dot += fu_dot(gb, xb, n);
      }
      dot *= rs; /* sum(dn * x) * rs = sum(dn * n) */
      const float k = dot / (float)c->H;
      for (int64_t i0 = 0; i0 < c->H; i0 += FU_CHUNK) {
        const int64_t n = c->H - i0 < FU_CHUNK ? c->H - i0 : FU_CHUNK;
        fu_load(xb, xr + i0 * xst, c->x.dt, xst, n);
        fu_load(gb, gr + i0 * gst, c->g.dt, gst, n);
        for (int64_t i = 0; i < n; ++i) xb[i] *= rs; /* n */
        if (dw) {
          /* dweight += grad * n (Llama: n as rounded to x's dtype) */
          float nb[FU_CHUNK];
          memcpy(nb, xb, (size_t)n * 4);
          if (!c->unit_offset) fu_round(nb, c->x.dt, n);
          char* dwc = (char*)dw + i0 * c->dwp_col;
          for (int64_t i = 0; i < n; ++i) *(float*)(dwc + i * c->dwp_col) += gb[i] * nb[i];
        }
        if (c->has_w) {
          fu_rms_weight(c, wb, i0, n);
          for (int64_t i = 0; i < n; ++i) gb[i] *= wb[i];
        }
        for (int64_t i = 0; i < n; ++i) gb[i] = rs * (gb[i] - xb[i] * k);
        fu_store(dr + i0 * dst, c->dx.dt, dst, gb, n);
      }
    }
  }
}

/* Row t: q rows first ([B, Hq, L] order), then k rows. */
FU_ENGINE(fu_rope) {
  const fu_rope_t* c = (const fu_rope_t*)vctx;
  float x1[FU_CHUNK], x2[FU_CHUNK], c1[FU_CHUNK], c2[FU_CHUNK], s1[FU_CHUNK], s2[FU_CHUNK];
  float o1[FU_CHUNK], o2[FU_CHUNK];
  const int64_t nq = c->B * c->Hq * c->L;
  const int64_t half = c->R / 2;
  const bool round = !c->bwd && c->dt != TPU_DTYPE_F32;
  for (int64_t t = r0; t < r1; ++t) {
    const bool isq = t < nq;
    const int64_t u = isq ? t : t - nq, H = isq ? c->Hq : c->Hk;
    const int64_t l = u % c->L, h = (u / c->L) % H, b = u / (c->L * H);
    const int64_t* is = isq ? c->qs : c->ks;
    const int64_t* os = isq ? c->qos : c->kos;
    const char* xr = (isq ? c->q : c->k) + b * is[0] + h * is[1] + l * is[2];
    char* orow = (isq ? c->qo : c->ko) + b * os[0] + h * os[1] + l * os[2];
    const char* cr = c->cos + b * c->cs[0] + l * c->cs[1];
    const char* sr = c->sin + b * c->ss[0] + l * c->ss[1];
    const int64_t xs = is[3], ost = os[3], cst = c->cs[2], sst = c->ss[2];
    for (int64_t i0 = 0; i0 < half; i0 += FU_CHUNK) {
      const int64_t n = half - i0 < FU_CHUNK ? half - i0 : FU_CHUNK;
      fu_load(x1, xr + i0 * xs, c->dt, xs, n);
      fu_load(x2, xr + (half + i0) * xs, c->dt, xs, n);
      fu_load(c1, cr + i0 * cst, c->dt, cst, n);
      fu_load(c2, cr + (half + i0) * cst, c->dt, cst, n);
      fu_load(s1, sr + i0 * sst, c->dt, sst, n);
      fu_load(s2, sr + (half + i0) * sst, c->dt, sst, n);
      if (!c->bwd) {
        /* out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2 */
        for (int64_t i = 0; i < n; ++i) {
          o1[i] = x1[i] * c1[i];
          o2[i] = x2[i] * c2[i];
          s1[i] = -(x2[i] * s1[i]);
          s2[i] = x1[i] * s2[i];
        }
      } else {
        /* transposed: d1 = g1 c1 + g2 s2, d2 = g2 c2 - g1 s1 */
        for (int64_t i = 0; i < n; ++i) {
          o1[i] = x1[i] * c1[i];
          o2[i] = x2[i] * c2[i];
          const float a = x2[i] * s2[i], bb = -(x1[i] * s1[i]);
          s1[i] = a;
          s2[i] = bb;
        }
      }
      if (round) {
        fu_round(o1, c->dt, n);
        fu_round(o2, c->dt, n);
        fu_round(s1, c->dt, n);
        fu_round(s2, c->dt, n);
      }
      for (int64_t i = 0; i < n; ++i) {
        o1[i] += s1[i];
        o2[i] += s2[i];
      }
      fu_store(orow + i0 * ost, c->dt, ost, o1, n);
      fu_store(orow + (half + i0) * ost, c->dt, ost, o2, n);
    }
    for (int64_t i0 = c->R; i0 < c->D; i0 += FU_CHUNK) { /* pass-through channels */
      const int64_t n = c->D - i0 < FU_CHUNK ? c->D - i0 : FU_CHUNK;
      fu_load(x1, xr + i0 * xs, c->dt, xs, n);
      fu_store(orow + i0 * ost, c->dt, ost, x1, n);
    }
  }
}

/* Forward operands (y, gate, up); backward (dgate, dup, grad, gate, up). */
FU_INNER(fu_glu) {
  const fu_glu_t* c = (const fu_glu_t*)vctx;
  float a[FU_CHUNK], gt[FU_CHUNK], up[FU_CHUNK], gr[FU_CHUNK];
  const int dt = c->dt;
  for (int64_t i0 = 0; i0 < count; i0 += FU_CHUNK) {
    const int64_t n = count - i0 < FU_CHUNK ? count - i0 : FU_CHUNK;
    if (!c->bwd) {
      fu_load(gt, ptrs[1] + i0 * st[1], dt, st[1], n);
      fu_load(up, ptrs[2] + i0 * st[2], dt, st[2], n);
      if (c->act == FU_ACT_SILU) {
        ew_vm_silu_loop(a, gt, n);
      } else {
        ew_vm_gelu_tanh_loop(a, gt, n);
      }
      fu_round(a, dt, n); /* act(gate) is a tensor of the input dtype */
      for (int64_t i = 0; i < n; ++i) a[i] *= up[i];
      fu_store(ptrs[0] + i0 * st[0], dt, st[0], a, n);
    } else {
      fu_load(gr, ptrs[2] + i0 * st[2], dt, st[2], n);
      fu_load(gt, ptrs[3] + i0 * st[3], dt, st[3], n);
      fu_load(up, ptrs[4] + i0 * st[4], dt, st[4], n);
      /* dup = grad * act(gate) */
      if (c->act == FU_ACT_SILU) {
        ew_vm_silu_loop(a, gt, n);
      } else {
        ew_vm_gelu_tanh_loop(a, gt, n);
      }
      fu_round(a, dt, n);
      for (int64_t i = 0; i < n; ++i) a[i] *= gr[i];
      fu_store(ptrs[1] + i0 * st[1], dt, st[1], a, n);
      /* dgate = grad * up * act'(gate) */
      for (int64_t i = 0; i < n; ++i) gr[i] *= up[i];
      if (c->act == FU_ACT_SILU) {
        ew_vm_silu_bwd_loop(a, gr, gt, n);
      } else {
        ew_vm_gelu_tanh_bwd_loop(a, gr, gt, n);
      }
      fu_store(ptrs[0] + i0 * st[0], dt, st[0], a, n);
    }
  }
}

#ifndef FU_ARCH_AVX2
/* ---- entry points (portable build only) --------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#define FU_X86 1
void tpu_k_avx2_fu_rms_fwd(void* vctx, int64_t r0, int64_t r1);
void tpu_k_avx2_fu_rms_bwd(void* vctx, int64_t r0, int64_t r1);
void tpu_k_avx2_fu_rope(void* vctx, int64_t r0, int64_t r1);
void tpu_k_avx2_fu_glu(void* vctx, char** ptrs, const int64_t* st, int64_t count);
#else
#define FU_X86 0
#endif

static bool fu_float_dt(int dt) { return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16; }

static bool fu_has_out(const tpu_k_call_t* call, int i) {
  return call->outputs && i < call->num_outputs && call->outputs[i].dtype != TPU_DTYPE_INVALID;
}

static bool fu_same_shape(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* "[2, 3, 4]" */
static const char* fu_shape(char* buf, size_t cap, const tpu_tensor_t* t) {
  size_t len = 0;
  buf[0] = '\0';
  len += (size_t)snprintf(buf + len, cap - len, "[");
  for (int32_t d = 0; d < t->ndim && len < cap; ++d)
    len += (size_t)snprintf(buf + len, cap - len, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

static void fu_rows_view(const tpu_tensor_t* t, fu_rows_t* v) {
  memset(v, 0, sizeof(*v));
  v->p = (char*)t->data;
  v->dt = t->dtype;
  v->es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  v->nlead = t->ndim - 1;
  for (int32_t d = 0; d < t->ndim; ++d) {
    v->sizes[d] = t->sizes[d];
    v->bst[d] = t->strides[d] * v->es;
  }
}

/* float result type of a binary op of dtypes a and b (both floating) */
static int fu_promote(int a, int b) {
  if (a == b) return a;
  return TPU_DTYPE_F32; /* f32 with anything, or bf16 with f16 */
}

/* ---- rms_norm ---- */

static tpu_status_t fu_rms_parse(const tpu_k_call_t* call, bool bwd, fu_rms_t* c) {
  const int o = bwd ? 1 : 0;
  const tpu_tensor_t* x = tpu_ku_tensor(call, o + 0);
  const tpu_tensor_t* w = tpu_ku_tensor(call, o + 1);
  const tpu_tensor_t* g = bwd ? tpu_ku_tensor(call, 0) : NULL;
  char b1[160], b2[160];
  if (!x || (bwd && !g)) return TPU_KU_INVALID(call, "expected %s", bwd ? "grad and input tensors" : "an input tensor");
  if (!fu_float_dt(x->dtype)) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (x->ndim < 1) return TPU_KU_INVALID(call, "input must have at least 1 dimension, got a 0-dim tensor");
  const int64_t H = x->sizes[x->ndim - 1];
  if (w) {
    if (!fu_float_dt(w->dtype)) return tpu_ku_unsupported_dtype(call, w->dtype);
    if (w->ndim != 1 || w->sizes[0] != H)
      return TPU_KU_INVALID(call, "weight of shape %s does not match the last dim of input %s (expected [%lld])",
                            fu_shape(b1, sizeof b1, w), fu_shape(b2, sizeof b2, x), (long long)H);
  }
  const bool unit_offset = tpu_ku_bool(call, o + 3, false);
  const int ydt = (w && !unit_offset) ? fu_promote(w->dtype, x->dtype) : x->dtype;
  if (bwd) {
    if (!fu_same_shape(g, x))
      return TPU_KU_INVALID(call, "grad of shape %s does not match input %s", fu_shape(b1, sizeof b1, g),
                            fu_shape(b2, sizeof b2, x));
    if (g->dtype != ydt)
      return TPU_KU_INVALID(call, "grad must be %s, got %s", tpu_dtype_name((tpu_dtype_t)ydt),
                            tpu_dtype_name((tpu_dtype_t)g->dtype));
  }
  if (call->outputs) {
    if (!bwd) {
      if (!fu_has_out(call, 0)) return TPU_KU_INVALID(call, "expected an output");
      const tpu_tensor_t* y = &call->outputs[0];
      if (!fu_same_shape(y, x) || y->dtype != ydt)
        return TPU_KU_INVALID(call, "output must be %s of shape %s", tpu_dtype_name((tpu_dtype_t)ydt),
                              fu_shape(b1, sizeof b1, x));
    } else {
      if (!fu_has_out(call, 0)) return TPU_KU_INVALID(call, "expected grad_input");
      const tpu_tensor_t* dx = &call->outputs[0];
      if (!fu_same_shape(dx, x) || dx->dtype != x->dtype)
        return TPU_KU_INVALID(call, "grad_input must be %s of shape %s", tpu_dtype_name((tpu_dtype_t)x->dtype),
                              fu_shape(b1, sizeof b1, x));
      if (fu_has_out(call, 1)) {
        const tpu_tensor_t* p = &call->outputs[1];
        if (!w) return TPU_KU_INVALID(call, "weight partial sums requested without a weight");
        if (p->dtype != TPU_DTYPE_F32 || p->ndim != 2 || p->sizes[1] != H || p->sizes[0] < 1)
          return TPU_KU_INVALID(call, "weight partial sums must be float32 [chunks >= 1, %lld]", (long long)H);
      }
    }
  }
  if (!c) return TPU_OK;
  memset(c, 0, sizeof(*c));
  int64_t n = tpu_tensor_numel(x);
  c->H = H;
  c->rows = H ? n / H : 0;
  c->eps = (float)tpu_ku_double(call, o + 2, 1e-6);
  c->unit_offset = unit_offset;
  fu_rows_view(x, &c->x);
  if (w) {
    c->has_w = true;
    c->w = (char*)w->data;
    c->wdt = w->dtype;
    c->wbst = w->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)w->dtype);
  }
  if (!bwd) {
    fu_rows_view(&call->outputs[0], &c->y);
  } else {
    fu_rows_view(g, &c->g);
    fu_rows_view(&call->outputs[0], &c->dx);
    if (fu_has_out(call, 1)) {
      const tpu_tensor_t* p = &call->outputs[1];
      c->dwp = (char*)p->data;
      c->dwp_row = p->strides[0] * 4;
      c->dwp_col = p->strides[1] * 4;
      c->chunks = p->sizes[0];
    }
  }
  return TPU_OK;
}

static tpu_status_t fu_rms_check(const tpu_k_call_t* call) { return fu_rms_parse(call, false, NULL); }
static tpu_status_t fu_rms_bwd_check(const tpu_k_call_t* call) { return fu_rms_parse(call, true, NULL); }

static int64_t fu_row_grain(int64_t len) { return len >= FU_GRAIN ? 1 : FU_GRAIN / (len > 0 ? len : 1); }

static tpu_status_t fu_rms_run(const tpu_k_call_t* call) {
  fu_rms_t c;
  TPU_RETURN_IF_ERROR(fu_rms_parse(call, false, &c));
  if (c.rows == 0 || c.H == 0) return TPU_OK;
  tpu_parallel_fn_t fn = fu_rms_fwd;
#if FU_X86
  if (tpu_ku_use_avx2()) fn = tpu_k_avx2_fu_rms_fwd;
#endif
  tpu_parallel_for(call->pool, c.rows, fu_row_grain(c.H), fn, &c);
  return TPU_OK;
}

static tpu_status_t fu_rms_bwd_run(const tpu_k_call_t* call) {
  fu_rms_t c;
  TPU_RETURN_IF_ERROR(fu_rms_parse(call, true, &c));
  if (c.H == 0) return TPU_OK;
  tpu_parallel_fn_t fn = fu_rms_bwd;
#if FU_X86
  if (tpu_ku_use_avx2()) fn = tpu_k_avx2_fu_rms_bwd;
#endif
  if (c.dwp) {
    tpu_parallel_for(call->pool, c.chunks, 1, fn, &c); /* empty chunks zero their row */
  } else if (c.rows > 0) {
    tpu_parallel_for(call->pool, c.rows, fu_row_grain(c.H), fn, &c);
  }
  return TPU_OK;
}

/* ---- rope ---- */

/* byte strides of cos/sin broadcast to [B, L, R] */
static bool fu_rope_cs(const tpu_tensor_t* t, int64_t B, int64_t L, int64_t R, int64_t* s) {
  if (t->ndim != 2 && t->ndim != 3) return false;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  const int32_t lead = 3 - t->ndim;
  const int64_t full[3] = {B, L, R};
  for (int d = 0; d < 3; ++d) {
    const int32_t j = d - lead;
    if (j < 0 || (t->sizes[j] == 1 && full[d] != 1)) {
      if (d == 2) return false;
      s[d] = 0;
    } else if (t->sizes[j] == full[d]) {
      s[d] = t->strides[j] * es;
    } else {
      return false;
    }
  }
  return true;
}

static tpu_status_t fu_rope_parse(const tpu_k_call_t* call, bool bwd, fu_rope_t* c) {
  const tpu_tensor_t* q = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* k = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* cs = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* sn = tpu_ku_tensor(call, 3);
  const char* qn = bwd ? "grad_q" : "q";
  const char* kn = bwd ? "grad_k" : "k";
  char b1[160], b2[160], b3[160];
  if (!q || !k || !cs || !sn) return TPU_KU_INVALID(call, "expected %s, %s, cos and sin tensors", qn, kn);
  if (!fu_float_dt(q->dtype)) return tpu_ku_unsupported_dtype(call, q->dtype);
  if (k->dtype != q->dtype || cs->dtype != q->dtype || sn->dtype != q->dtype)
    return TPU_KU_INVALID(call, "%s, %s, cos and sin must have the same dtype, got %s, %s, %s and %s", qn, kn,
                          tpu_dtype_name((tpu_dtype_t)q->dtype), tpu_dtype_name((tpu_dtype_t)k->dtype),
                          tpu_dtype_name((tpu_dtype_t)cs->dtype), tpu_dtype_name((tpu_dtype_t)sn->dtype));
  if (q->ndim != 4 || k->ndim != 4)
    return TPU_KU_INVALID(call, "%s and %s must be 4-D [batch, heads, seq, head_dim], got %s and %s", qn, kn,
                          fu_shape(b1, sizeof b1, q), fu_shape(b2, sizeof b2, k));
  const int64_t B = q->sizes[0], L = q->sizes[2], D = q->sizes[3];
  if (k->sizes[0] != B || k->sizes[2] != L || k->sizes[3] != D)
    return TPU_KU_INVALID(call, "%s %s and %s %s must agree in batch, seq and head_dim", qn,
                          fu_shape(b1, sizeof b1, q), kn, fu_shape(b2, sizeof b2, k));
  if (cs->ndim < 1 || !fu_same_shape(cs, sn))
    return TPU_KU_INVALID(call, "cos %s and sin %s must have the same shape", fu_shape(b1, sizeof b1, cs),
                          fu_shape(b2, sizeof b2, sn));
  const int64_t R = cs->sizes[cs->ndim - 1];
  int64_t cst[3], sst[3];
  if (R % 2 != 0 || R > D || !fu_rope_cs(cs, B, L, R, cst) || !fu_rope_cs(sn, B, L, R, sst))
    return TPU_KU_INVALID(call,
                          "cos/sin of shape %s must be [batch or 1, seq or 1, rotary_dim] or [seq or 1, rotary_dim] "
                          "with an even rotary_dim <= head_dim, for %s of shape %s",
                          fu_shape(b1, sizeof b1, cs), qn, fu_shape(b3, sizeof b3, q));
  if (call->outputs) {
    if (!fu_has_out(call, 0) || !fu_has_out(call, 1)) return TPU_KU_INVALID(call, "expected two outputs");
    if (!fu_same_shape(&call->outputs[0], q) || call->outputs[0].dtype != q->dtype ||
        !fu_same_shape(&call->outputs[1], k) || call->outputs[1].dtype != k->dtype)
      return TPU_KU_INVALID(call, "outputs must match %s and %s in shape and dtype", qn, kn);
  }
  if (!c) return TPU_OK;
  memset(c, 0, sizeof(*c));
  c->B = B;
  c->L = L;
  c->D = D;
  c->R = R;
  c->Hq = q->sizes[1];
  c->Hk = k->sizes[1];
  c->bwd = bwd;
  c->dt = q->dtype;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)q->dtype);
  c->q = (char*)q->data;
  c->k = (char*)k->data;
  c->qo = (char*)call->outputs[0].data;
  c->ko = (char*)call->outputs[1].data;
  c->cos = (char*)cs->data;
  c->sin = (char*)sn->data;
  for (int d = 0; d < 4; ++d) {
    c->qs[d] = q->strides[d] * es;
    c->ks[d] = k->strides[d] * es;
    c->qos[d] = call->outputs[0].strides[d] * es;
    c->kos[d] = call->outputs[1].strides[d] * es;
  }
  memcpy(c->cs, cst, sizeof cst);
  memcpy(c->ss, sst, sizeof sst);
  return TPU_OK;
}

static tpu_status_t fu_rope_check(const tpu_k_call_t* call) { return fu_rope_parse(call, false, NULL); }
static tpu_status_t fu_rope_bwd_check(const tpu_k_call_t* call) { return fu_rope_parse(call, true, NULL); }

static tpu_status_t fu_rope_run_impl(const tpu_k_call_t* call, bool bwd) {
  fu_rope_t c;
  TPU_RETURN_IF_ERROR(fu_rope_parse(call, bwd, &c));
  const int64_t rows = c.B * (c.Hq + c.Hk) * c.L;
  if (rows == 0 || c.D == 0) return TPU_OK;
  tpu_parallel_fn_t fn = fu_rope;
#if FU_X86
  if (tpu_ku_use_avx2()) fn = tpu_k_avx2_fu_rope;
#endif
  tpu_parallel_for(call->pool, rows, fu_row_grain(c.D), fn, &c);
  return TPU_OK;
}
static tpu_status_t fu_rope_run(const tpu_k_call_t* call) { return fu_rope_run_impl(call, false); }
static tpu_status_t fu_rope_bwd_run(const tpu_k_call_t* call) { return fu_rope_run_impl(call, true); }

/* ---- swiglu ---- */

static tpu_status_t fu_glu_parse(const tpu_k_call_t* call, bool bwd, fu_glu_t* c, int* out_act) {
  const int o = bwd ? 1 : 0;
  const tpu_tensor_t* gate = tpu_ku_tensor(call, o + 0);
  const tpu_tensor_t* up = tpu_ku_tensor(call, o + 1);
  const tpu_tensor_t* grad = bwd ? tpu_ku_tensor(call, 0) : NULL;
  char b1[160], b2[160];
  if (!gate || !up || (bwd && !grad)) return TPU_KU_INVALID(call, "expected gate and up tensors");
  if (!fu_float_dt(gate->dtype)) return tpu_ku_unsupported_dtype(call, gate->dtype);
  if (up->dtype != gate->dtype)
    return TPU_KU_INVALID(call, "gate and up must have the same dtype, got %s and %s",
                          tpu_dtype_name((tpu_dtype_t)gate->dtype), tpu_dtype_name((tpu_dtype_t)up->dtype));
  if (!fu_same_shape(gate, up))
    return TPU_KU_INVALID(call, "gate %s and up %s must have the same shape", fu_shape(b1, sizeof b1, gate),
                          fu_shape(b2, sizeof b2, up));
  if (bwd && (!fu_same_shape(grad, gate) || grad->dtype != gate->dtype))
    return TPU_KU_INVALID(call, "grad must match gate in shape and dtype");
  const char* act = tpu_ku_string(call, o + 2, "silu");
  int a;
  if (strcmp(act, "silu") == 0) {
    a = FU_ACT_SILU;
  } else if (strcmp(act, "gelu_tanh") == 0) {
    a = FU_ACT_GELU_TANH;
  } else {
    return TPU_KU_INVALID(call, "act must be 'silu' or 'gelu_tanh', got '%s'", act);
  }
  if (call->outputs) {
    const int nout = bwd ? 2 : 1;
    for (int i = 0; i < nout; ++i) {
      if (!fu_has_out(call, i)) return TPU_KU_INVALID(call, "expected %d outputs", nout);
      if (!fu_same_shape(&call->outputs[i], gate) || call->outputs[i].dtype != gate->dtype)
        return TPU_KU_INVALID(call, "outputs must match gate in shape and dtype");
    }
  }
  if (out_act) *out_act = a;
  if (c) {
    c->act = a;
    c->dt = gate->dtype;
    c->bwd = bwd;
  }
  return TPU_OK;
}

static tpu_status_t fu_glu_check(const tpu_k_call_t* call) { return fu_glu_parse(call, false, NULL, NULL); }
static tpu_status_t fu_glu_bwd_check(const tpu_k_call_t* call) { return fu_glu_parse(call, true, NULL, NULL); }

static tpu_status_t fu_glu_run_impl(const tpu_k_call_t* call, bool bwd) {
  fu_glu_t c;
  TPU_RETURN_IF_ERROR(fu_glu_parse(call, bwd, &c, NULL));
  const int o = bwd ? 1 : 0;
  const tpu_tensor_t* ops[5];
  int n = 0;
  ops[n++] = &call->outputs[0];
  if (bwd) ops[n++] = &call->outputs[1];
  if (bwd) ops[n++] = tpu_ku_tensor(call, 0);
  ops[n++] = tpu_ku_tensor(call, o + 0);
  ops[n++] = tpu_ku_tensor(call, o + 1);
  if (tpu_tensor_numel(ops[0]) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, n, ops, call->op));
  tpu_ku_inner_fn_t fn = fu_glu;
#if FU_X86
  if (tpu_ku_use_avx2()) fn = tpu_k_avx2_fu_glu;
#endif
  tpu_ku_iter_parallel(&it, call->pool, FU_GRAIN, fn, &c);
  return TPU_OK;
}
static tpu_status_t fu_glu_run(const tpu_k_call_t* call) { return fu_glu_run_impl(call, false); }
static tpu_status_t fu_glu_bwd_run(const tpu_k_call_t* call) { return fu_glu_run_impl(call, true); }

const tpu_k_entry_t tpu_k_fused_entries[] = {
    {"tpu::rms_norm", fu_rms_run, fu_rms_check, 0, NULL},
    {"tpu::rms_norm_backward", fu_rms_bwd_run, fu_rms_bwd_check, 0, NULL},
    {"tpu::rope", fu_rope_run, fu_rope_check, 0, NULL},
    {"tpu::rope_backward", fu_rope_bwd_run, fu_rope_bwd_check, 0, NULL},
    {"tpu::swiglu", fu_glu_run, fu_glu_check, 0, NULL},
    {"tpu::swiglu_backward", fu_glu_bwd_run, fu_glu_bwd_check, 0, NULL},
};
const size_t tpu_k_fused_count = sizeof(tpu_k_fused_entries) / sizeof(tpu_k_fused_entries[0]);

#endif /* !FU_ARCH_AVX2 */
