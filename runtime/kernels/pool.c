/* pool.c - pooling over the last two dims of (C, H, W) or (N, C, H, W)
 * tensors (avg_pool3d: the last three of (C, D, H, W) or (N, C, D, H, W)) of
 * any strides (channels_last included):
 *   aten::avg_pool2d(.out), aten::avg_pool2d_backward(.grad_input),
 *   aten::avg_pool3d(.out), aten::avg_pool3d_backward(.grad_input),
 *   aten::max_pool2d_with_indices(.out) (values and int64 indices, a flat
 *   index into H*W per plane), aten::max_pool2d_with_indices_backward(.grad_input),
 *   aten::_adaptive_avg_pool3d(.out), aten::_adaptive_avg_pool2d_backward(.out),
 *   aten::_adaptive_avg_pool3d_backward(.out),
 *   aten::adaptive_max_pool2d(.out), aten::adaptive_max_pool3d(.out) (values
 *   and int64 indices, a flat index into (D*)H*W per plane) and their
 *   backwards (.grad_input).
 *
 * Results follow PyTorch's CPU kernels: window bounds, divisors
 * (count_include_pad, divisor_override), sums in window order, accumulated in
 * float for bfloat16/float16 (double for float64, int64 for int64); max takes
 * the first largest value and the last NaN (NaN propagates). The backward of
 * avg_pool2d gathers, for each input element, the contributions of the
 * outputs covering it in the order the CPU scatters them, rounding each step
 * to the gradient's dtype as the CPU does; the backward of
 * max_pool2d scatters in output order, rounding each sum to the gradient's
 * dtype, as the CPU does. Output sizes come from PyTorch's meta functions;
 * the kernels check only what they rely on. Work is split over the N*C planes. */
#ifndef PL_TEMPLATE_PASS
#include <stdatomic.h>
#include <string.h>

#include "kernels/kutil.h"

/* One operand as planes: plane p = (n, c) with n = p / C, c = p % C; D is 1
 * (sd 0) for 2-d pooling. */
typedef struct {
  char* p;
  int dt;
  int64_t es, C, D, H, W;
  int64_t sn, sc, sd, sh, sw; /* element strides */
} pl_t;

typedef struct {
  int nsp; /* spatial dims: 2, or 3 (avg_pool3d) */
  int64_t kd, sd, pd; /* depth (3-d): kernel, stride, padding; 1, 1, 0 in 2-d */
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
  int64_t divisor; /* 0: none */
  pl_t x, y, ix;   /* input, output (or grad), indices */
  atomic_int bad_index;
} pl_args_t;

static inline int64_t pl_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pl_max(int64_t a, int64_t b) { return a > b ? a : b; }
/* floor(a / b) for b > 0 */
static inline int64_t pl_fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static inline char* pl_plane(const pl_t* t, int64_t p) {
  return t->p + ((p / t->C) * t->sn + (p % t->C) * t->sc) * t->es;
}

/* `t` as planes over its last `nsp` dims (2 or 3). */
static void pl_view(const tpu_tensor_t* t, int nsp, pl_t* out) {
  memset(out, 0, sizeof(*out));
  out->p = (char*)t->data;
  out->dt = t->dtype;
  out->es = (int64_t)tpu_dtype_size(t->dtype);
  int o = t->ndim - nsp - 1, L = t->ndim - 1;
  out->C = t->sizes[o];
  out->sc = t->strides[o];
  out->sn = o == 1 ? t->strides[0] : 0;
  out->D = nsp == 3 ? t->sizes[o + 1] : 1;
  out->sd = nsp == 3 ? t->strides[o + 1] : 0;
  out->H = t->sizes[L - 1];
  out->W = t->sizes[L];
  out->sh = t->strides[L - 1];
  out->sw = t->strides[L];
}

/* avg_pool's window of output (od, oh, ow): clipped bounds and divisor. */
static inline int64_t pl_avg_window(const pl_args_t* a, const pl_t* X, int64_t od, int64_t oh, int64_t ow,
                                    int64_t* b) {
  int64_t ds = od * a->sd - a->pd, hs = oh * a->sh - a->ph, ws = ow * a->sw - a->pw;
  int64_t de = pl_min(ds + a->kd, X->D + a->pd);
  int64_t he = pl_min(hs + a->kh, X->H + a->ph), we = pl_min(ws + a->kw, X->W + a->pw);
  int64_t pool = (de - ds) * (he - hs) * (we - ws);
  b[0] = pl_max(ds, 0);
  b[1] = pl_min(de, X->D);
  b[2] = pl_max(hs, 0);
  b[3] = pl_min(he, X->H);
  b[4] = pl_max(ws, 0);
  b[5] = pl_min(we, X->W);
  if (a->divisor != 0) return a->divisor;
  return a->count_include_pad ? pool : (b[1] - b[0]) * (b[3] - b[2]) * (b[5] - b[4]);
}

/* Outputs o in [0, n) whose avg window [o * s - p, o * s - p + k) holds
 * input index i: o0..o1 (empty when o0 > o1). */
static inline void pl_cover(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n, int64_t* o0, int64_t* o1) {
  *o0 = pl_max(0, pl_fdiv(i + p - k, s) + 1);
  *o1 = pl_min(n - 1, pl_fdiv(i + p, s));
}

/* Adaptive pooling: output o of n over an input of size `in` covers
 * [floor(o in / n), ceil((o + 1) in / n)). */
static inline int64_t pl_ad_start(int64_t o, int64_t in, int64_t n) { return (o * in) / n; }
static inline int64_t pl_ad_end(int64_t o, int64_t in, int64_t n) { return ((o + 1) * in + n - 1) / n; }

#define PL_TEMPLATE_PASS 1
/* float types: T storage, ACC accumulation, LD/ST conversions */
#define SFX(n) n##_f32
#define T float
#define ACC float
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) isnan(v)
#define LOWEST (-INFINITY)
#define PL_FLOAT 1
#include "pool.c"
#define SFX(n) n##_f64
#define T double
#define ACC double
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) isnan(v)
#define LOWEST (-INFINITY)
#define PL_FLOAT 1
#include "pool.c"
#define SFX(n) n##_bf16
#define T uint16_t
#define ACC float
#define LD(v) tpu_ku_bf16_to_f32(v)
#define ST(v) tpu_ku_f32_to_bf16(v)
#define RND(v) tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(v))
#define ISNAN(v) isnan(v)
#define LOWEST (-INFINITY)
#define PL_FLOAT 1
#include "pool.c"
#define SFX(n) n##_f16
#define T uint16_t
#define ACC float
#define LD(v) tpu_ku_f16_to_f32(v)
#define ST(v) tpu_ku_f32_to_f16(v)
#define RND(v) tpu_ku_f16_to_f32(tpu_ku_f32_to_f16(v))
#define ISNAN(v) isnan(v)
#define LOWEST (-INFINITY)
#define PL_FLOAT 1
#include "pool.c"
/* integer types: max_pool2d for all, avg_pool2d for int64 only (as the CPU) */
#define SFX(n) n##_i64
#define T int64_t
#define ACC int64_t
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) 0
#define LOWEST INT64_MIN
#define PL_AVG_INT 1
#include "pool.c"
#define SFX(n) n##_i32
#define T int32_t
#define ACC int32_t
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) 0
#define LOWEST INT32_MIN
#include "pool.c"
#define SFX(n) n##_i16
#define T int16_t
#define ACC int16_t
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) 0
#define LOWEST INT16_MIN
#include "pool.c"
#define SFX(n) n##_i8
#define T int8_t
#define ACC int8_t
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) 0
#define LOWEST INT8_MIN
#include "pool.c"
#define SFX(n) n##_u8
#define T uint8_t
#define ACC uint8_t
#define LD(v) (v)
#define ST(v) (v)
#define ISNAN(v) 0
#define LOWEST 0
#include "pool.c"
#undef PL_TEMPLATE_PASS

/* ---- arguments ------------------------------------------------------------ */

static bool pl_float(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}
static bool pl_int(int dt) {
  return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32 || dt == TPU_DTYPE_I16 || dt == TPU_DTYPE_I8 ||
         dt == TPU_DTYPE_U8;
}

/* int[nsp] argument `i` into out[0..nsp): one value for every dim or one
 * per dim; an empty list (stride) takes `dflt`. */
static tpu_status_t pl_ints(const tpu_k_call_t* call, int i, const char* what, int nsp, int64_t lo,
                            const int64_t* dflt, int64_t* out) {
  const tpu_k_value_t* v = i < call->num_args ? &call->args[i] : NULL;
  if (v && v->kind == TPU_K_INT) {
    for (int j = 0; j < nsp; ++j) out[j] = v->v.i;
  } else if (v && v->kind == TPU_K_INTS && (v->v.ints.len == nsp || v->v.ints.len == 1)) {
    for (int j = 0; j < nsp; ++j) out[j] = v->v.ints.data[v->v.ints.len == 1 ? 0 : j];
  } else if (dflt && (!v || v->kind == TPU_K_NONE || (v->kind == TPU_K_INTS && v->v.ints.len == 0))) {
    for (int j = 0; j < nsp; ++j) out[j] = dflt[j];
  } else {
    return TPU_KU_INVALID(call, "%s must either be a single int, or a tuple of %d ints", what, nsp);
  }
  for (int j = 0; j < nsp; ++j)
    if (out[j] < lo)
      return TPU_KU_INVALID(call, "%s must be >= %lld, got %lld", what, (long long)lo, (long long)out[j]);
  return TPU_OK;
}

static tpu_status_t pl_pair(const tpu_k_call_t* call, int i, const char* what, int64_t lo, const int64_t* dflt,
                            int64_t* out_h, int64_t* out_w) {
  int64_t v[2];
  TPU_RETURN_IF_ERROR(pl_ints(call, i, what, 2, lo, dflt, v));
  *out_h = v[0];
  *out_w = v[1];
  return TPU_OK;
}

static tpu_status_t pl_rank(const tpu_k_call_t* call, const tpu_tensor_t* t, int nsp, const char* what) {
  if (!t || t->dtype == TPU_DTYPE_INVALID) return TPU_KU_INVALID(call, "expected a tensor for %s", what);
  if (t->ndim != nsp + 1 && t->ndim != nsp + 2)
    return TPU_KU_INVALID(call, "expected a %d-D or %d-D %s, got %d-D", nsp + 1, nsp + 2, what, (int)t->ndim);
  return TPU_OK;
}

/* Same leading (N, C) dims (all but the last `nsp`); `spatial`: all dims. */
static tpu_status_t pl_same(const tpu_k_call_t* call, const tpu_tensor_t* a, const tpu_tensor_t* b, int nsp,
                            const char* what, bool spatial) {
  if (a->ndim != b->ndim) return TPU_KU_INVALID(call, "%s must have the input's rank %d, got %d", what, (int)a->ndim, (int)b->ndim);
  int n = spatial ? a->ndim : a->ndim - nsp;
  for (int d = 0; d < n; ++d)
    if (a->sizes[d] != b->sizes[d])
      return TPU_KU_INVALID(call, "%s: size %lld at dim %d, expected %lld", what, (long long)b->sizes[d], d,
                            (long long)a->sizes[d]);
  return TPU_OK;
}

/* avg_pool2d/3d(self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override); backward: grad_output first. */
static tpu_status_t pl_avg_parse(const tpu_k_call_t* call, bool bwd, int nsp, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->nsp = nsp;
  int o = bwd ? 1 : 0;
  const tpu_tensor_t* x = tpu_ku_tensor(call, o);
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* y = &call->outputs[0];
  TPU_RETURN_IF_ERROR(pl_rank(call, x, nsp, "input"));
  TPU_RETURN_IF_ERROR(pl_rank(call, y, nsp, "output"));
  if (!(pl_float(x->dtype) || x->dtype == TPU_DTYPE_I64)) return tpu_ku_unsupported_dtype(call, x->dtype);
  /* the CPU's avg_pool3d has float32, float64 and int64 only */
  if (nsp == 3 && (x->dtype == TPU_DTYPE_BF16 || x->dtype == TPU_DTYPE_F16))
    return tpu_ku_unsupported_dtype(call, x->dtype);
  if (y->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, y->dtype);
  int64_t k[3], s[3], p[3];
  TPU_RETURN_IF_ERROR(pl_ints(call, o + 1, "kernel_size", nsp, 1, NULL, k));
  TPU_RETURN_IF_ERROR(pl_ints(call, o + 2, "stride", nsp, 1, k, s));
  TPU_RETURN_IF_ERROR(pl_ints(call, o + 3, "padding", nsp, 0, NULL, p));
  for (int j = 0; j < nsp; ++j)
    if (p[j] * 2 > k[j]) return TPU_KU_INVALID(call, "pad should be smaller than or equal to half of kernel size");
  int q = nsp - 2; /* first of (h, w) */
  a->kd = q ? k[0] : 1;
  a->sd = q ? s[0] : 1;
  a->pd = q ? p[0] : 0;
  a->kh = k[q];
  a->kw = k[q + 1];
  a->sh = s[q];
  a->sw = s[q + 1];
  a->ph = p[q];
  a->pw = p[q + 1];
  a->dh = a->dw = 1;
  a->count_include_pad = tpu_ku_bool(call, o + 5, true);
  a->divisor = tpu_ku_is_none(call, o + 6) ? 0 : tpu_ku_int(call, o + 6, 0);
  if (!tpu_ku_is_none(call, o + 6) && a->divisor == 0) return TPU_KU_INVALID(call, "divisor must be not zero");
  if (bwd) {
    const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
    TPU_RETURN_IF_ERROR(pl_rank(call, g, nsp, "grad_output"));
    if (g->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, g->dtype);
    TPU_RETURN_IF_ERROR(pl_same(call, x, g, nsp, "grad_output", false));
    TPU_RETURN_IF_ERROR(pl_same(call, x, y, nsp, "grad_input", true));
    pl_view(y, nsp, &a->x); /* grad_input (written) has the input's shape */
    pl_view(g, nsp, &a->y);
  } else {
    TPU_RETURN_IF_ERROR(pl_same(call, x, y, nsp, "output", false));
    pl_view(x, nsp, &a->x);
    pl_view(y, nsp, &a->y);
  }
  return TPU_OK;
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode). */
static tpu_status_t pl_max_parse(const tpu_k_call_t* call, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->nsp = 2;
  a->kd = a->sd = 1;
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected two outputs (values, indices)");
  const tpu_tensor_t* y = &call->outputs[0];
  const tpu_tensor_t* ix = &call->outputs[1];
  TPU_RETURN_IF_ERROR(pl_rank(call, x, 2, "input"));
  TPU_RETURN_IF_ERROR(pl_rank(call, y, 2, "output"));
  TPU_RETURN_IF_ERROR(pl_rank(call, ix, 2, "indices"));
  if (!pl_float(x->dtype) && !pl_int(x->dtype)) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (y->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, y->dtype);
  if (ix->dtype != TPU_DTYPE_I64) return TPU_KU_INVALID(call, "indices must be int64, got %s", tpu_dtype_name(ix->dtype));
  TPU_RETURN_IF_ERROR(pl_same(call, x, y, 2, "output", false));
  TPU_RETURN_IF_ERROR(pl_same(call, y, ix, 2, "indices", true));
  TPU_RETURN_IF_ERROR(pl_pair(call, 1, "kernel_size", 1, NULL, &a->kh, &a->kw));
  int64_t k[2] = {a->kh, a->kw};
  TPU_RETURN_IF_ERROR(pl_pair(call, 2, "stride", 1, k, &a->sh, &a->sw));
  TPU_RETURN_IF_ERROR(pl_pair(call, 3, "padding", 0, NULL, &a->ph, &a->pw));
  int64_t one[2] = {1, 1};
  TPU_RETURN_IF_ERROR(pl_pair(call, 4, "dilation", 1, one, &a->dh, &a->dw));
  if (a->ph * 2 > (a->kh - 1) * a->dh + 1 || a->pw * 2 > (a->kw - 1) * a->dw + 1)
    return TPU_KU_INVALID(call, "pad should be at most half of effective kernel size");
  pl_view(x, 2, &a->x);
  pl_view(y, 2, &a->y);
  pl_view(ix, 2, &a->ix);
  return TPU_OK;
}

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
 * padding, dilation, ceil_mode, indices): only the gradient, the indices and
 * grad_input's shape matter. */
static tpu_status_t pl_maxb_parse(const tpu_k_call_t* call, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->nsp = 2;
  a->kd = a->sd = 1;
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* x = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* ix = tpu_ku_tensor(call, 7);
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* gi = &call->outputs[0];
  TPU_RETURN_IF_ERROR(pl_rank(call, g, 2, "grad_output"));
  TPU_RETURN_IF_ERROR(pl_rank(call, x, 2, "input"));
  TPU_RETURN_IF_ERROR(pl_rank(call, ix, 2, "indices"));
  TPU_RETURN_IF_ERROR(pl_rank(call, gi, 2, "grad_input"));
  if (!pl_float(g->dtype)) return tpu_ku_unsupported_dtype(call, g->dtype);
  if (gi->dtype != g->dtype) return tpu_ku_unsupported_dtype(call, gi->dtype);
  if (ix->dtype != TPU_DTYPE_I64) return TPU_KU_INVALID(call, "indices must be int64, got %s", tpu_dtype_name(ix->dtype));
  TPU_RETURN_IF_ERROR(pl_same(call, x, gi, 2, "grad_input", true));
  TPU_RETURN_IF_ERROR(pl_same(call, x, g, 2, "grad_output", false));
  TPU_RETURN_IF_ERROR(pl_same(call, g, ix, 2, "indices", true));
  pl_view(gi, 2, &a->x);
  pl_view(g, 2, &a->y);
  pl_view(ix, 2, &a->ix);
  return TPU_OK;
}

static int64_t pl_planes(const pl_t* t, const tpu_tensor_t* src, int nsp) {
  return src->ndim == nsp + 2 ? src->sizes[0] * t->C : t->C;
}

static int64_t pl_grain(int64_t per_plane) { return pl_max(1, 32768 / pl_max(1, per_plane)); }

/* The per-dtype bodies of one pooling pass (NULL where the dtype is not
 * supported), and the one for a dtype. */
typedef struct {
  tpu_parallel_fn_t f32, f64, bf16, f16, i64, i32, i16, i8, u8;
} pl_fns_t;

static tpu_parallel_fn_t pl_pick(const pl_fns_t* f, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return f->f32;
    case TPU_DTYPE_F64: return f->f64;
    case TPU_DTYPE_BF16: return f->bf16;
    case TPU_DTYPE_F16: return f->f16;
    case TPU_DTYPE_I64: return f->i64;
    case TPU_DTYPE_I32: return f->i32;
    case TPU_DTYPE_I16: return f->i16;
    case TPU_DTYPE_I8: return f->i8;
    case TPU_DTYPE_U8: return f->u8;
    default: return NULL;
  }
}

/* ---- entries ------------------------------------------------------------- */

static tpu_status_t pl_avg_run_nsp(const tpu_k_call_t* call, int nsp) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_avg_parse(call, false, nsp, &a));
  const tpu_tensor_t* y = &call->outputs[0];
  if (tpu_tensor_numel(y) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.y, y, a.nsp), g = pl_grain(a.y.D * a.y.H * a.y.W * a.kd * a.kh * a.kw);
  static const pl_fns_t fns = {
      .f32 = pl_avg_fwd_f32, .f64 = pl_avg_fwd_f64, .bf16 = pl_avg_fwd_bf16, .f16 = pl_avg_fwd_f16,
      .i64 = pl_avg_fwd_i64};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  return TPU_OK;
}

static tpu_status_t pl_avgb_run_nsp(const tpu_k_call_t* call, int nsp) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_avg_parse(call, true, nsp, &a));
  const tpu_tensor_t* gi = &call->outputs[0];
  if (tpu_tensor_numel(gi) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.x, gi, a.nsp);
  int64_t g = pl_grain(a.x.D * a.x.H * a.x.W * (a.kd / a.sd + 1) * (a.kh / a.sh + 1) * (a.kw / a.sw + 1));
  static const pl_fns_t fns = {
      .f32 = pl_avg_bwd_f32, .f64 = pl_avg_bwd_f64, .bf16 = pl_avg_bwd_bf16, .f16 = pl_avg_bwd_f16,
      .i64 = pl_avg_bwd_i64};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  return TPU_OK;
}

static tpu_status_t pl_avg_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_avg_parse(call, false, 2, &a);
}
static tpu_status_t pl_avg_run(const tpu_k_call_t* call) { return pl_avg_run_nsp(call, 2); }
static tpu_status_t pl_avgb_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_avg_parse(call, true, 2, &a);
}
static tpu_status_t pl_avgb_run(const tpu_k_call_t* call) { return pl_avgb_run_nsp(call, 2); }
static tpu_status_t pl_avg3_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_avg_parse(call, false, 3, &a);
}
static tpu_status_t pl_avg3_run(const tpu_k_call_t* call) { return pl_avg_run_nsp(call, 3); }
static tpu_status_t pl_avg3b_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_avg_parse(call, true, 3, &a);
}
static tpu_status_t pl_avg3b_run(const tpu_k_call_t* call) { return pl_avgb_run_nsp(call, 3); }

static tpu_status_t pl_max_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_max_parse(call, &a);
}

static tpu_status_t pl_max_run(const tpu_k_call_t* call) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_max_parse(call, &a));
  const tpu_tensor_t* y = &call->outputs[0];
  if (tpu_tensor_numel(y) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.y, y, a.nsp), g = pl_grain(a.y.H * a.y.W * a.kh * a.kw);
  static const pl_fns_t fns = {
      .f32 = pl_max_fwd_f32, .f64 = pl_max_fwd_f64, .bf16 = pl_max_fwd_bf16, .f16 = pl_max_fwd_f16,
      .i64 = pl_max_fwd_i64, .i32 = pl_max_fwd_i32, .i16 = pl_max_fwd_i16, .i8 = pl_max_fwd_i8, .u8 = pl_max_fwd_u8};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  return TPU_OK;
}

static tpu_status_t pl_maxb_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_maxb_parse(call, &a);
}

static tpu_status_t pl_maxb_run(const tpu_k_call_t* call) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_maxb_parse(call, &a));
  const tpu_tensor_t* gi = &call->outputs[0];
  if (tpu_tensor_numel(gi) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.x, gi, a.nsp), g = pl_grain(a.x.H * a.x.W + a.y.H * a.y.W);
  static const pl_fns_t fns = {
      .f32 = pl_max_bwd_f32, .f64 = pl_max_bwd_f64, .bf16 = pl_max_bwd_bf16, .f16 = pl_max_bwd_f16};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  atomic_init(&a.bad_index, 0);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  if (atomic_load(&a.bad_index))
    return TPU_KU_INVALID(call, "an index is out of range of the input plane (%lld x %lld)", (long long)a.x.H,
                          (long long)a.x.W);
  return TPU_OK;
}

/* ---- adaptive max pooling ---------------------------------------------------
 * adaptive_max_pool2d/3d(self, output_size) -> (values, int64 indices) and
 * their backwards (grad_output, self, indices), as the CPU: output o of n over
 * an input of size L takes the max of [floor(o L / n), ceil((o + 1) L / n)),
 * the first largest value or the last NaN; its index is the flat position
 * (d * H + h) * W + w in the input plane. The backward zeroes grad_input and
 * adds each gradient at its index in output order, rounding each sum to the
 * dtype. Floating dtypes only (the CPU has no other). The output sizes are
 * the output tensors' (output_size is not read). */
static tpu_status_t pl_nonempty(const tpu_k_call_t* call, const tpu_tensor_t* t, const char* what) {
  for (int d = 1; d < t->ndim; ++d)
    if (t->sizes[d] == 0)
      return TPU_KU_INVALID(call, "expected %s to have non-zero size for non-batch dimensions, but dimension %d "
                            "is empty", what, d);
  return TPU_OK;
}

static tpu_status_t pl_amax_parse(const tpu_k_call_t* call, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  const int nsp = strstr(call->op, "pool3d") ? 3 : 2;
  a->nsp = nsp;
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected two outputs (values, indices)");
  const tpu_tensor_t* y = &call->outputs[0];
  const tpu_tensor_t* ix = &call->outputs[1];
  TPU_RETURN_IF_ERROR(pl_rank(call, x, nsp, "input"));
  TPU_RETURN_IF_ERROR(pl_rank(call, y, nsp, "output"));
  TPU_RETURN_IF_ERROR(pl_rank(call, ix, nsp, "indices"));
  if (!pl_float(x->dtype)) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (y->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, y->dtype);
  if (ix->dtype != TPU_DTYPE_I64) return TPU_KU_INVALID(call, "indices must be int64, got %s", tpu_dtype_name(ix->dtype));
  TPU_RETURN_IF_ERROR(pl_same(call, x, y, nsp, "output", false));
  TPU_RETURN_IF_ERROR(pl_same(call, y, ix, nsp, "indices", true));
  TPU_RETURN_IF_ERROR(pl_nonempty(call, x, "input"));
  pl_view(x, nsp, &a->x);
  pl_view(y, nsp, &a->y);
  pl_view(ix, nsp, &a->ix);
  return TPU_OK;
}

static tpu_status_t pl_amaxb_parse(const tpu_k_call_t* call, pl_args_t* a) {
  memset(a, 0, sizeof(*a));
  const int nsp = strstr(call->op, "pool3d") ? 3 : 2;
  a->nsp = nsp;
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* x = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* ix = tpu_ku_tensor(call, 2);
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* gi = &call->outputs[0];
  TPU_RETURN_IF_ERROR(pl_rank(call, g, nsp, "grad_output"));
  TPU_RETURN_IF_ERROR(pl_rank(call, x, nsp, "input"));
  TPU_RETURN_IF_ERROR(pl_rank(call, ix, nsp, "indices"));
  TPU_RETURN_IF_ERROR(pl_rank(call, gi, nsp, "grad_input"));
  if (!pl_float(g->dtype)) return tpu_ku_unsupported_dtype(call, g->dtype);
  if (x->dtype != g->dtype)
    return TPU_KU_INVALID(call, "expected dtype %s for grad_output but got dtype %s", tpu_dtype_name(x->dtype),
                          tpu_dtype_name(g->dtype));
  if (gi->dtype != g->dtype) return tpu_ku_unsupported_dtype(call, gi->dtype);
  if (ix->dtype != TPU_DTYPE_I64) return TPU_KU_INVALID(call, "indices must be int64, got %s", tpu_dtype_name(ix->dtype));
  TPU_RETURN_IF_ERROR(pl_same(call, x, gi, nsp, "grad_input", true));
  TPU_RETURN_IF_ERROR(pl_same(call, x, g, nsp, "grad_output", false));
  TPU_RETURN_IF_ERROR(pl_same(call, g, ix, nsp, "indices", true));
  TPU_RETURN_IF_ERROR(pl_nonempty(call, g, "grad_output"));
  pl_view(gi, nsp, &a->x);
  pl_view(g, nsp, &a->y);
  pl_view(ix, nsp, &a->ix);
  return TPU_OK;
}

static tpu_status_t pl_amax_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_amax_parse(call, &a);
}

static tpu_status_t pl_amax_run(const tpu_k_call_t* call) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_amax_parse(call, &a));
  const tpu_tensor_t* y = &call->outputs[0];
  if (tpu_tensor_numel(y) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.y, y, a.nsp), g = pl_grain(a.x.D * a.x.H * a.x.W + a.y.D * a.y.H * a.y.W);
  static const pl_fns_t fns = {
      .f32 = pl_amax_fwd_f32, .f64 = pl_amax_fwd_f64, .bf16 = pl_amax_fwd_bf16, .f16 = pl_amax_fwd_f16};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  return TPU_OK;
}

static tpu_status_t pl_amaxb_check(const tpu_k_call_t* call) {
  pl_args_t a;
  return pl_amaxb_parse(call, &a);
}

static tpu_status_t pl_amaxb_run(const tpu_k_call_t* call) {
  pl_args_t a;
  TPU_RETURN_IF_ERROR(pl_amaxb_parse(call, &a));
  const tpu_tensor_t* gi = &call->outputs[0];
  if (tpu_tensor_numel(gi) == 0) return TPU_OK;
  int64_t n = pl_planes(&a.x, gi, a.nsp), g = pl_grain(a.x.D * a.x.H * a.x.W + a.y.D * a.y.H * a.y.W);
  static const pl_fns_t fns = {
      .f32 = pl_amax_bwd_f32, .f64 = pl_amax_bwd_f64, .bf16 = pl_amax_bwd_bf16, .f16 = pl_amax_bwd_f16};
  tpu_parallel_fn_t fn = pl_pick(&fns, a.x.dt);
  if (!fn) return tpu_ku_unsupported_dtype(call, a.x.dt);
  atomic_init(&a.bad_index, 0);
  tpu_parallel_for(call->pool, n, g, fn, &a);
  if (atomic_load(&a.bad_index))
    return TPU_KU_INVALID(call, "an index is out of range of the input plane (%lld x %lld x %lld)", (long long)a.x.D,
                          (long long)a.x.H, (long long)a.x.W);
  return TPU_OK;
}

/* ---- adaptive average pooling -----------------------------------------------
 * _adaptive_avg_pool3d(self, output_size) and the backward of the 2-d and 3-d
 * ones (grad_output, self), as the CPU: output o of n over an input of size L
 * averages [floor(o L / n), ceil((o + 1) L / n)); the forward sums its window
 * in (d, h, w) order and divides by kd, kh, kw in turn; the backward gives
 * each input the sum of grad / kd / kh / kw of the outputs covering it, in
 * output order; every step in the dtype's own arithmetic (float16/bfloat16:
 * float, rounded to the dtype each time). Floating dtypes only (the CPU has
 * no other). */
typedef struct {
  int nsp;
  bool bwd;
  pl_t x, y; /* forward: input, output; backward: grad_input, grad_output */
} pl_ad_t;

static double pl_ad_round(int dt, double v) {
  switch (dt) {
    case TPU_DTYPE_F32: return (double)(float)v;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16((float)v));
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)v));
    default: return v;
  }
}

/* v / kd / kh / kw, each step in the dtype's arithmetic (float, rounded) */
static double pl_ad_div(int dt, double v, int64_t kd, int64_t kh, int64_t kw) {
  if (dt == TPU_DTYPE_F64) return v / (double)kd / (double)kh / (double)kw;
  v = pl_ad_round(dt, (float)v / (float)kd);
  v = pl_ad_round(dt, (float)v / (float)kh);
  return pl_ad_round(dt, (float)v / (float)kw);
}

static void pl_ad_planes(void* ctx, int64_t begin, int64_t end) {
  const pl_ad_t* a = (const pl_ad_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y; /* X: the larger (input) side */
  const int dt = X->dt;
  const bool f64 = dt == TPU_DTYPE_F64;
  for (int64_t p = begin; p < end; ++p) {
    char *xp = pl_plane(X, p), *yp = pl_plane(Y, p);
    if (!a->bwd) {
      for (int64_t od = 0; od < Y->D; ++od)
        for (int64_t oh = 0; oh < Y->H; ++oh)
          for (int64_t ow = 0; ow < Y->W; ++ow) {
            const int64_t d0 = pl_ad_start(od, X->D, Y->D), d1 = pl_ad_end(od, X->D, Y->D);
            const int64_t h0 = pl_ad_start(oh, X->H, Y->H), h1 = pl_ad_end(oh, X->H, Y->H);
            const int64_t w0 = pl_ad_start(ow, X->W, Y->W), w1 = pl_ad_end(ow, X->W, Y->W);
            double s = 0.0;
            for (int64_t d = d0; d < d1; ++d)
              for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) {
                  const double v = tpu_ku_load_f64(xp + (d * X->sd + h * X->sh + w * X->sw) * X->es, dt);
                  s = f64 ? s + v : pl_ad_round(dt, (float)s + (float)v);
                }
            const double r = pl_ad_div(dt, s, d1 - d0, h1 - h0, w1 - w0);
            tpu_ku_store_f64(yp + (od * Y->sd + oh * Y->sh + ow * Y->sw) * Y->es, dt, r);
          }
      continue;
    }
    for (int64_t d = 0; d < X->D; ++d)
      for (int64_t h = 0; h < X->H; ++h)
        for (int64_t w = 0; w < X->W; ++w) {
          double s = 0.0;
          /* the outputs whose windows hold (d, h, w), in output order */
          for (int64_t od = (d * Y->D) / X->D; od < Y->D && pl_ad_start(od, X->D, Y->D) <= d; ++od) {
            const int64_t d0 = pl_ad_start(od, X->D, Y->D), d1 = pl_ad_end(od, X->D, Y->D);
            if (d >= d1) continue;
            for (int64_t oh = (h * Y->H) / X->H; oh < Y->H && pl_ad_start(oh, X->H, Y->H) <= h; ++oh) {
              const int64_t h0 = pl_ad_start(oh, X->H, Y->H), h1 = pl_ad_end(oh, X->H, Y->H);
              if (h >= h1) continue;
              for (int64_t ow = (w * Y->W) / X->W; ow < Y->W && pl_ad_start(ow, X->W, Y->W) <= w; ++ow) {
                const int64_t w0 = pl_ad_start(ow, X->W, Y->W), w1 = pl_ad_end(ow, X->W, Y->W);
                if (w >= w1) continue;
                const double g = tpu_ku_load_f64(yp + (od * Y->sd + oh * Y->sh + ow * Y->sw) * Y->es, dt);
                const double delta = pl_ad_div(dt, g, d1 - d0, h1 - h0, w1 - w0);
                s = f64 ? s + delta : pl_ad_round(dt, (float)s + (float)delta);
              }
            }
          }
          tpu_ku_store_f64(xp + (d * X->sd + h * X->sh + w * X->sw) * X->es, dt, s);
        }
  }
}

static tpu_status_t pl_ad_setup(const tpu_k_call_t* call, pl_ad_t* a) {
  memset(a, 0, sizeof(*a));
  a->nsp = strstr(call->op, "pool3d") ? 3 : 2;
  a->bwd = strstr(call->op, "_backward") != NULL;
  const tpu_tensor_t* in = tpu_ku_tensor(call, a->bwd ? 1 : 0);
  const tpu_tensor_t* g = a->bwd ? tpu_ku_tensor(call, 0) : NULL;
  if (!in || (a->bwd && !g) || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* o = &call->outputs[0];
  const tpu_tensor_t* small = a->bwd ? g : o; /* the pooled side */
  const tpu_tensor_t* big = a->bwd ? o : in;
  TPU_RETURN_IF_ERROR(pl_rank(call, in, a->nsp, "self"));
  TPU_RETURN_IF_ERROR(pl_rank(call, small, a->nsp, a->bwd ? "grad_output" : "out"));
  TPU_RETURN_IF_ERROR(pl_rank(call, big, a->nsp, a->bwd ? "grad_input" : "self"));
  if (!pl_float(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (small->dtype != in->dtype || big->dtype != in->dtype)
    return TPU_KU_INVALID(call, "expected %s for every tensor, got %s", tpu_dtype_name((tpu_dtype_t)in->dtype),
                          tpu_dtype_name((tpu_dtype_t)(small->dtype != in->dtype ? small->dtype : big->dtype)));
  if (small->ndim != in->ndim || big->ndim != in->ndim)
    return TPU_KU_INVALID(call, "expected tensors of self's rank %d", (int)in->ndim);
  for (int d = 0; d < in->ndim; ++d) {
    const bool spatial = d >= in->ndim - a->nsp;
    if (big->sizes[d] != in->sizes[d] || (!spatial && small->sizes[d] != in->sizes[d]))
      return TPU_KU_INVALID(call, "size mismatch at dim %d: %lld, %lld and self's %lld", d,
                            (long long)small->sizes[d], (long long)big->sizes[d], (long long)in->sizes[d]);
    if (spatial && small->sizes[d] == 0 && in->sizes[d] != 0)
      return TPU_KU_INVALID(call, "output size 0 at dim %d for a non-empty input", d);
  }
  pl_view(big, a->nsp, &a->x);
  pl_view(small, a->nsp, &a->y);
  return TPU_OK;
}

static tpu_status_t pl_ad_check(const tpu_k_call_t* call) {
  pl_ad_t a;
  return pl_ad_setup(call, &a);
}

static tpu_status_t pl_ad_run(const tpu_k_call_t* call) {
  pl_ad_t a;
  TPU_RETURN_IF_ERROR(pl_ad_setup(call, &a));
  const tpu_tensor_t* big = &call->outputs[0];
  if (tpu_tensor_numel(big) == 0 || tpu_tensor_numel(a.bwd ? tpu_ku_tensor(call, 1) : tpu_ku_tensor(call, 0)) == 0)
    return TPU_OK;
  const int64_t planes = tpu_tensor_numel(a.bwd ? big : tpu_ku_tensor(call, 0)) / (a.x.D * a.x.H * a.x.W);
  tpu_parallel_for(call->pool, planes, 1 + 4096 / (a.x.D * a.x.H * a.x.W + 1), pl_ad_planes, &a);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_pool_entries[] = {
    {"aten::avg_pool2d", pl_avg_run, pl_avg_check, 0, NULL},
    {"aten::_adaptive_avg_pool3d", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::_adaptive_avg_pool3d.out", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::_adaptive_avg_pool2d_backward", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::_adaptive_avg_pool2d_backward.out", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::_adaptive_avg_pool3d_backward", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::_adaptive_avg_pool3d_backward.out", pl_ad_run, pl_ad_check, 0, NULL},
    {"aten::avg_pool2d.out", pl_avg_run, pl_avg_check, 0, NULL},
    {"aten::avg_pool2d_backward", pl_avgb_run, pl_avgb_check, 0, NULL},
    {"aten::avg_pool2d_backward.grad_input", pl_avgb_run, pl_avgb_check, 0, NULL},
    {"aten::avg_pool3d", pl_avg3_run, pl_avg3_check, 0, NULL},
    {"aten::avg_pool3d.out", pl_avg3_run, pl_avg3_check, 0, NULL},
    {"aten::avg_pool3d_backward", pl_avg3b_run, pl_avg3b_check, 0, NULL},
    {"aten::avg_pool3d_backward.grad_input", pl_avg3b_run, pl_avg3b_check, 0, NULL},
    {"aten::max_pool2d_with_indices", pl_max_run, pl_max_check, 0, NULL},
    {"aten::max_pool2d_with_indices.out", pl_max_run, pl_max_check, 0, NULL},
    {"aten::max_pool2d_with_indices_backward", pl_maxb_run, pl_maxb_check, 0, NULL},
    {"aten::max_pool2d_with_indices_backward.grad_input", pl_maxb_run, pl_maxb_check, 0, NULL},
    {"aten::adaptive_max_pool2d", pl_amax_run, pl_amax_check, 0, NULL},
    {"aten::adaptive_max_pool2d.out", pl_amax_run, pl_amax_check, 0, NULL},
    {"aten::adaptive_max_pool2d_backward", pl_amaxb_run, pl_amaxb_check, 0, NULL},
    {"aten::adaptive_max_pool2d_backward.grad_input", pl_amaxb_run, pl_amaxb_check, 0, NULL},
    {"aten::adaptive_max_pool3d", pl_amax_run, pl_amax_check, 0, NULL},
    {"aten::adaptive_max_pool3d.out", pl_amax_run, pl_amax_check, 0, NULL},
    {"aten::adaptive_max_pool3d_backward", pl_amaxb_run, pl_amaxb_check, 0, NULL},
    {"aten::adaptive_max_pool3d_backward.grad_input", pl_amaxb_run, pl_amaxb_check, 0, NULL},
};
const size_t tpu_k_pool_count = sizeof(tpu_k_pool_entries) / sizeof(tpu_k_pool_entries[0]);

#else /* PL_TEMPLATE_PASS: T storage, ACC accumulation */
#ifndef RND /* rounding to T (bfloat16 / float16 only) */
#define RND(v) (v)
#endif

#if defined(PL_FLOAT) || defined(PL_AVG_INT)
static void SFX(pl_avg_fwd)(void* ctx, int64_t b, int64_t e) {
  const pl_args_t* a = (const pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y;
  for (int64_t p = b; p < e; ++p) {
    const T* x = (const T*)pl_plane(X, p);
    T* y = (T*)pl_plane(Y, p);
    for (int64_t od = 0; od < Y->D; ++od) {
      for (int64_t oh = 0; oh < Y->H; ++oh) {
        for (int64_t ow = 0; ow < Y->W; ++ow) {
          int64_t w[6];
          int64_t div = pl_avg_window(a, X, od, oh, ow, w);
          ACC v = 0;
          if (w[0] < w[1] && w[2] < w[3] && w[4] < w[5]) {
            ACC sum = 0;
            for (int64_t id = w[0]; id < w[1]; ++id)
              for (int64_t ih = w[2]; ih < w[3]; ++ih)
                for (int64_t iw = w[4]; iw < w[5]; ++iw) sum += LD(x[id * X->sd + ih * X->sh + iw * X->sw]);
            v = sum / (ACC)div;
          }
          y[od * Y->sd + oh * Y->sh + ow * Y->sw] = ST(v);
        }
      }
    }
  }
}

/* a->x is grad_input (written), a->y grad_output. As the CPU, each
 * contribution grad / divisor and each partial sum is rounded to T. */
static void SFX(pl_avg_bwd)(void* ctx, int64_t b, int64_t e) {
  const pl_args_t* a = (const pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y;
  for (int64_t p = b; p < e; ++p) {
    T* gi = (T*)pl_plane(X, p);
    const T* go = (const T*)pl_plane(Y, p);
    for (int64_t id = 0; id < X->D; ++id) {
      int64_t od0, od1;
      pl_cover(id, a->kd, a->sd, a->pd, Y->D, &od0, &od1);
      for (int64_t ih = 0; ih < X->H; ++ih) {
        int64_t oh0, oh1;
        pl_cover(ih, a->kh, a->sh, a->ph, Y->H, &oh0, &oh1);
        for (int64_t iw = 0; iw < X->W; ++iw) {
          int64_t ow0, ow1;
          pl_cover(iw, a->kw, a->sw, a->pw, Y->W, &ow0, &ow1);
          ACC acc = 0;
          for (int64_t od = od0; od <= od1; ++od) {
            for (int64_t oh = oh0; oh <= oh1; ++oh) {
              for (int64_t ow = ow0; ow <= ow1; ++ow) {
                int64_t w[6];
                int64_t div = pl_avg_window(a, X, od, oh, ow, w);
                acc = RND(acc + RND(LD(go[od * Y->sd + oh * Y->sh + ow * Y->sw]) / RND((ACC)div)));
              }
            }
          }
          gi[id * X->sd + ih * X->sh + iw * X->sw] = ST(acc);
        }
      }
    }
  }
}
#endif

static void SFX(pl_max_fwd)(void* ctx, int64_t b, int64_t e) {
  const pl_args_t* a = (const pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y, *I = &a->ix;
  for (int64_t p = b; p < e; ++p) {
    const T* x = (const T*)pl_plane(X, p);
    T* y = (T*)pl_plane(Y, p);
    int64_t* ix = (int64_t*)pl_plane(I, p);
    for (int64_t oh = 0; oh < Y->H; ++oh) {
      int64_t h0 = oh * a->sh - a->ph;
      int64_t h1 = pl_min(h0 + (a->kh - 1) * a->dh + 1, X->H);
      while (h0 < 0) h0 += a->dh;
      for (int64_t ow = 0; ow < Y->W; ++ow) {
        int64_t w0 = ow * a->sw - a->pw;
        int64_t w1 = pl_min(w0 + (a->kw - 1) * a->dw + 1, X->W);
        while (w0 < 0) w0 += a->dw;
        int64_t mi = h0 * X->W + w0;
        ACC mv = LOWEST;
        for (int64_t ih = h0; ih < h1; ih += a->dh) {
          for (int64_t iw = w0; iw < w1; iw += a->dw) {
            ACC v = LD(x[ih * X->sh + iw * X->sw]);
            if (v > mv || ISNAN(v)) {
              mv = v;
              mi = ih * X->W + iw;
            }
          }
        }
        y[oh * Y->sh + ow * Y->sw] = ST(mv);
        ix[oh * I->sh + ow * I->sw] = mi;
      }
    }
  }
}

#ifdef PL_FLOAT
/* a->x is grad_input (written), a->y grad_output, a->ix the indices. */
static void SFX(pl_max_bwd)(void* ctx, int64_t b, int64_t e) {
  pl_args_t* a = (pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y, *I = &a->ix;
  int64_t plane = X->H * X->W;
  for (int64_t p = b; p < e; ++p) {
    T* gi = (T*)pl_plane(X, p);
    const T* go = (const T*)pl_plane(Y, p);
    const int64_t* ix = (const int64_t*)pl_plane(I, p);
    for (int64_t ih = 0; ih < X->H; ++ih)
      for (int64_t iw = 0; iw < X->W; ++iw) gi[ih * X->sh + iw * X->sw] = ST((ACC)0);
    for (int64_t oh = 0; oh < Y->H; ++oh) {
      for (int64_t ow = 0; ow < Y->W; ++ow) {
        int64_t k = ix[oh * I->sh + ow * I->sw];
        if (k == -1) continue;
        if (k < 0 || k >= plane) {
          atomic_store(&a->bad_index, 1);
          continue;
        }
        T* d = &gi[(k / X->W) * X->sh + (k % X->W) * X->sw];
        *d = ST(LD(*d) + LD(go[oh * Y->sh + ow * Y->sw]));
      }
    }
  }
}

/* Adaptive max pooling over (D, H, W) (D = 1, sd = 0 in 2-d): a->x input,
 * a->y values, a->ix indices. The value is stored as read (NaN bits kept). */
static void SFX(pl_amax_fwd)(void* ctx, int64_t b, int64_t e) {
  const pl_args_t* a = (const pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y, *I = &a->ix;
  for (int64_t p = b; p < e; ++p) {
    const T* x = (const T*)pl_plane(X, p);
    T* y = (T*)pl_plane(Y, p);
    int64_t* ix = (int64_t*)pl_plane(I, p);
    for (int64_t od = 0; od < Y->D; ++od) {
      const int64_t d0 = pl_ad_start(od, X->D, Y->D), d1 = pl_ad_end(od, X->D, Y->D);
      for (int64_t oh = 0; oh < Y->H; ++oh) {
        const int64_t h0 = pl_ad_start(oh, X->H, Y->H), h1 = pl_ad_end(oh, X->H, Y->H);
        for (int64_t ow = 0; ow < Y->W; ++ow) {
          const int64_t w0 = pl_ad_start(ow, X->W, Y->W), w1 = pl_ad_end(ow, X->W, Y->W);
          int64_t mi = (d0 * X->H + h0) * X->W + w0;
          ACC mv = LOWEST;
          T mt = ST(LOWEST);
          for (int64_t id = d0; id < d1; ++id)
            for (int64_t ih = h0; ih < h1; ++ih)
              for (int64_t iw = w0; iw < w1; ++iw) {
                const T t = x[id * X->sd + ih * X->sh + iw * X->sw];
                const ACC v = LD(t);
                if (v > mv || ISNAN(v)) {
                  mv = v;
                  mt = t;
                  mi = (id * X->H + ih) * X->W + iw;
                }
              }
          y[od * Y->sd + oh * Y->sh + ow * Y->sw] = mt;
          ix[od * I->sd + oh * I->sh + ow * I->sw] = mi;
        }
      }
    }
  }
}

/* a->x is grad_input (written), a->y grad_output, a->ix the indices. */
static void SFX(pl_amax_bwd)(void* ctx, int64_t b, int64_t e) {
  pl_args_t* a = (pl_args_t*)ctx;
  const pl_t *X = &a->x, *Y = &a->y, *I = &a->ix;
  const int64_t hw = X->H * X->W, plane = X->D * hw;
  for (int64_t p = b; p < e; ++p) {
    T* gi = (T*)pl_plane(X, p);
    const T* go = (const T*)pl_plane(Y, p);
    const int64_t* ix = (const int64_t*)pl_plane(I, p);
    for (int64_t id = 0; id < X->D; ++id)
      for (int64_t ih = 0; ih < X->H; ++ih)
        for (int64_t iw = 0; iw < X->W; ++iw) gi[id * X->sd + ih * X->sh + iw * X->sw] = ST((ACC)0);
    for (int64_t od = 0; od < Y->D; ++od)
      for (int64_t oh = 0; oh < Y->H; ++oh)
        for (int64_t ow = 0; ow < Y->W; ++ow) {
          const int64_t k = ix[od * I->sd + oh * I->sh + ow * I->sw];
          if (k < 0 || k >= plane) {
            atomic_store(&a->bad_index, 1);
            continue;
          }
          T* d = &gi[(k / hw) * X->sd + ((k % hw) / X->W) * X->sh + (k % X->W) * X->sw];
          *d = ST(LD(*d) + LD(go[od * Y->sd + oh * Y->sh + ow * Y->sw]));
        }
  }
}
#endif

#undef SFX
#undef T
#undef ACC
#undef LD
#undef ST
#undef RND
#undef ISNAN
#undef LOWEST
#undef PL_FLOAT
#undef PL_AVG_INT
#endif /* PL_TEMPLATE_PASS */
