/* norm.c - kernel family "norm": group normalisation for the graph
 * compiler's lowering of aten::native_group_norm (torch_tpu/_graph.py).
 *
 *   tpu::group_norm(input, weight?, bias?, group, eps) -> (out, mean?, rstd?)
 *
 * input [N, C, spatial...] (any strides, C divisible by `group`), weight and
 * bias [C] or absent, out like input (any strides), mean and rstd [N, group]
 * in input's dtype (dtype INVALID: not wanted). float32, bfloat16, float16
 * and float64.
 *
 * Each (n, g) is one task: the group's C/group channels over every spatial
 * position. Statistics in double: a first pass for the mean, a second for
 * the (biased) variance of x - mean; rstd = 1 / sqrt(var + eps). Then, as
 * ATen's CPU kernel and torch_tpu/_decomp.py's half-precision rule do,
 * per channel scale = rstd * weight[c], shift = bias[c] - mean * scale and
 * out = x * scale + shift, computed in float (double for float64) and
 * rounded once to the output's dtype.
 *
 * The graph compiler may run the kernel on a slice of whole groups (channels
 * [c0, c1) of input, weight, bias and out, groups [c0, c1) / (C / group) of
 * mean and rstd, `group` = their count): the call is self-contained for any
 * such slice. Nothing is allocated; a task keeps one chunk buffer on the
 * stack. */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define GN_CHUNK 1024 /* elements per converted chunk */
#define GN_MAXSD (TPU_MAX_DIMS - 2)

/* A channel's positions as rows: `rows` rows of `len` elements, row r at
 * element offset off(r) (the spatial dims but the last, collapsed where both
 * tensors allow), `ist`/`ost` the last dim's strides in input / output. */
typedef struct {
  const char* x;
  char* y;
  int32_t xdt, ydt, xes, yes;
  int64_t xsn, xsc, ysn, ysc;
  int nsd; /* collapsed spatial dims */
  int64_t sz[GN_MAXSD], xst[GN_MAXSD], yst[GN_MAXSD];
  int64_t rows, len;
  int64_t N, C, G, Cg;
  const char* w;
  const char* b;
  int32_t wdt, bdt;
  int64_t ws, bs;
  char* mean;
  char* rstd;
  int32_t mdt, rdt;
  int64_t msn, msg, rsn, rsg;
  double eps;
} gn_ctx_t;

static void gn_row_offsets(const gn_ctx_t* x, int64_t r, int64_t* xo, int64_t* yo) {
  *xo = 0;
  *yo = 0;
  for (int j = x->nsd - 2; j >= 0; --j) {
    int64_t i = r % x->sz[j];
    r /= x->sz[j];
    *xo += i * x->xst[j];
    *yo += i * x->yst[j];
  }
}

static void gn_load(const char* p, int dt, int64_t st, int64_t n, float* dst) {
  switch (dt) {
    case TPU_DTYPE_F32:
      if (st == 1) {
        memcpy(dst, p, (size_t)n * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = ((const float*)p)[i * st];
      }
      break;
    case TPU_DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = tpu_ku_bf16_to_f32(((const uint16_t*)p)[i * st]);
      break;
    default: /* F16 */
      for (int64_t i = 0; i < n; ++i) dst[i] = tpu_ku_f16_to_f32(((const uint16_t*)p)[i * st]);
      break;
  }
}

static void gn_store(char* p, int dt, int64_t st, int64_t n, const float* src) {
  switch (dt) {
    case TPU_DTYPE_F32:
      for (int64_t i = 0; i < n; ++i) ((float*)p)[i * st] = src[i];
      break;
    case TPU_DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) ((uint16_t*)p)[i * st] = tpu_ku_f32_to_bf16(src[i]);
      break;
    default: /* F16 */
      for (int64_t i = 0; i < n; ++i) ((uint16_t*)p)[i * st] = tpu_ku_f32_to_f16(src[i]);
      break;
  }
}

/* sum of v[0..n) in double from eight float lanes (as conv.c's bias sums) */
static double gn_sum(const float* v, int64_t n) {
  float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) s8[u] += v[i + u];
  for (; i < n; ++i) s8[i & 7] += v[i];
  return ((double)s8[0] + s8[1] + s8[2] + s8[3]) + ((double)s8[4] + s8[5] + s8[6] + s8[7]);
}

static double gn_sqdev(const float* v, int64_t n, float m) {
  float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) {
      float d = v[i + u] - m;
      s8[u] += d * d;
    }
  for (; i < n; ++i) {
    float d = v[i] - m;
    s8[i & 7] += d * d;
  }
  return ((double)s8[0] + s8[1] + s8[2] + s8[3]) + ((double)s8[4] + s8[5] + s8[6] + s8[7]);
}

static void gn_stats_out(const gn_ctx_t* x, int64_t n, int64_t g, double mean, double rstd) {
  if (x->mean) tpu_ku_store_f64(x->mean + (n * x->msn + g * x->msg) * (int64_t)tpu_dtype_size(x->mdt), x->mdt, mean);
  if (x->rstd) tpu_ku_store_f64(x->rstd + (n * x->rsn + g * x->rsg) * (int64_t)tpu_dtype_size(x->rdt), x->rdt, rstd);
}

static double gn_param(const char* p, int dt, int64_t st, int64_t c, double dflt) {
  return p ? tpu_ku_load_f64(p + c * st * (int64_t)tpu_dtype_size(dt), dt) : dflt;
}

/* One pass of a float32 / bfloat16 / float16 task over channels of group
 * (n, g): 0 sums x, 1 sums (x - m)^2, 2 writes x * scale[c] + shift[c]. */
static double gn_pass_f32(const gn_ctx_t* x, int64_t n, int64_t g, int pass, float m, double mean, double rstd) {
  float buf[GN_CHUNK];
  double acc = 0.0;
  const int L = x->nsd - 1;
  for (int64_t c = g * x->Cg; c < (g + 1) * x->Cg; ++c) {
    const char* xc = x->x + (n * x->xsn + c * x->xsc) * x->xes;
    char* yc = x->y + (n * x->ysn + c * x->ysc) * x->yes;
    float scale = 0.0f, shift = 0.0f;
    if (pass == 2) {
      scale = (float)(rstd * gn_param(x->w, x->wdt, x->ws, c, 1.0));
      shift = (float)(gn_param(x->b, x->bdt, x->bs, c, 0.0) - mean * (double)scale);
    }
    for (int64_t r = 0; r < x->rows; ++r) {
      int64_t xo, yo;
      gn_row_offsets(x, r, &xo, &yo);
      for (int64_t i0 = 0; i0 < x->len; i0 += GN_CHUNK) {
        int64_t k = x->len - i0 < GN_CHUNK ? x->len - i0 : GN_CHUNK;
        const char* src = xc + (xo + i0 * x->xst[L]) * x->xes;
        char* dst = yc + (yo + i0 * x->yst[L]) * x->yes;
        /* float32 rows with unit stride are read (and written) in place */
        const float* v = buf;
        if (x->xdt == TPU_DTYPE_F32 && x->xst[L] == 1) {
          v = (const float*)src;
        } else {
          gn_load(src, x->xdt, x->xst[L], k, buf);
        }
        if (pass == 0) {
          acc += gn_sum(v, k);
        } else if (pass == 1) {
          acc += gn_sqdev(v, k, m);
        } else if (x->ydt == TPU_DTYPE_F32 && x->yst[L] == 1) {
          float* y = (float*)dst;
          for (int64_t i = 0; i < k; ++i) y[i] = v[i] * scale + shift;
        } else {
          for (int64_t i = 0; i < k; ++i) buf[i] = v[i] * scale + shift;
          gn_store(dst, x->ydt, x->yst[L], k, buf);
        }
      }
    }
  }
  return acc;
}

/* One pass of a float64 task (as gn_pass_f32, in double throughout). */
static double gn_pass_f64(const gn_ctx_t* x, int64_t n, int64_t g, int pass, double mean, double rstd) {
  double acc = 0.0;
  const int L = x->nsd - 1;
  for (int64_t c = g * x->Cg; c < (g + 1) * x->Cg; ++c) {
    const double* xc = (const double*)x->x + n * x->xsn + c * x->xsc;
    double* yc = (double*)x->y + n * x->ysn + c * x->ysc;
    double scale = 0.0, shift = 0.0;
    if (pass == 2) {
      scale = rstd * gn_param(x->w, x->wdt, x->ws, c, 1.0);
      shift = gn_param(x->b, x->bdt, x->bs, c, 0.0) - mean * scale;
    }
    for (int64_t r = 0; r < x->rows; ++r) {
      int64_t xo, yo;
      gn_row_offsets(x, r, &xo, &yo);
      const double* xr = xc + xo;
      double* yr = yc + yo;
      for (int64_t i = 0; i < x->len; ++i) {
        double v = xr[i * x->xst[L]];
        if (pass == 0) {
          acc += v;
        } else if (pass == 1) {
          acc += (v - mean) * (v - mean);
        } else {
          yr[i * x->yst[L]] = v * scale + shift;
        }
      }
    }
  }
  return acc;
}

static void gn_task(const gn_ctx_t* x, int64_t t) {
  int64_t n = t / x->G, g = t % x->G;
  double count = (double)x->Cg * (double)x->rows * (double)x->len;
  bool f64 = x->xdt == TPU_DTYPE_F64;
  if (count == 0) { /* no positions (ATen refuses HxW == 0 before any kernel): NaN statistics */
    gn_stats_out(x, n, g, NAN, NAN);
    return;
  }
  double mean = (f64 ? gn_pass_f64(x, n, g, 0, 0.0, 0.0) : gn_pass_f32(x, n, g, 0, 0.0f, 0.0, 0.0)) / count;
  double var;
  if (f64) {
    var = gn_pass_f64(x, n, g, 1, mean, 0.0) / count;
  } else {
    /* deviations from the float-rounded mean mf: sum (x - mf)^2 = sum (x - mean)^2 + count (mf - mean)^2 */
    float mf = (float)mean;
    double e = (double)mf - mean;
    var = gn_pass_f32(x, n, g, 1, mf, 0.0, 0.0) / count - e * e;
  }
  if (var < 0) var = 0;
  double rstd = 1.0 / sqrt(var + x->eps);
  gn_stats_out(x, n, g, mean, rstd);
  if (f64) {
    gn_pass_f64(x, n, g, 2, mean, rstd);
  } else {
    gn_pass_f32(x, n, g, 2, 0.0f, mean, rstd);
  }
}

static void gn_par(void* ctx, int64_t b, int64_t e) {
  for (int64_t t = b; t < e; ++t) gn_task((const gn_ctx_t*)ctx, t);
}

/* ---- entry ------------------------------------------------------------------- */

static bool gn_dtype_ok(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_F64;
}

static bool gn_wanted(const tpu_k_call_t* call, int j) {
  return call->num_outputs > j && call->outputs[j].dtype != TPU_DTYPE_INVALID;
}

static tpu_status_t gn_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (!in || call->num_outputs < 1 || call->num_outputs > 3)
    return TPU_KU_INVALID(call, "expected (input, weight?, bias?, group, eps) -> (out, mean?, rstd?)");
  const tpu_tensor_t* out = &call->outputs[0];
  if (!gn_dtype_ok(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (out->dtype != in->dtype) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (in->ndim < 2) return TPU_KU_INVALID(call, "expected an input of at least 2 dims, got %d-D", (int)in->ndim);
  if (out->ndim != in->ndim) return TPU_KU_INVALID(call, "output must have the input's sizes");
  for (int d = 0; d < in->ndim; ++d)
    if (out->sizes[d] != in->sizes[d]) return TPU_KU_INVALID(call, "output must have the input's sizes");
  int64_t G = tpu_ku_int(call, 3, 1), N = in->sizes[0], C = in->sizes[1];
  if (G < 1 || C % G != 0)
    return TPU_KU_INVALID(call, "expected the number of channels (%lld) to be divisible by group (%lld)",
                          (long long)C, (long long)G);
  for (int i = 1; i <= 2; ++i) {
    const tpu_tensor_t* p = tpu_ku_tensor(call, i);
    if (!p) continue;
    if (!gn_dtype_ok(p->dtype)) return tpu_ku_unsupported_dtype(call, p->dtype);
    if (p->ndim != 1 || p->sizes[0] != C)
      return TPU_KU_INVALID(call, "expected %s of %lld elements", i == 1 ? "weight" : "bias", (long long)C);
  }
  for (int j = 1; j <= 2; ++j) {
    if (!gn_wanted(call, j)) continue;
    const tpu_tensor_t* s = &call->outputs[j];
    if (!gn_dtype_ok(s->dtype)) return tpu_ku_unsupported_dtype(call, s->dtype);
    if (s->ndim != 2 || s->sizes[0] != N || s->sizes[1] != G)
      return TPU_KU_INVALID(call, "expected %s of sizes [%lld, %lld]", j == 1 ? "mean" : "rstd", (long long)N,
                            (long long)G);
  }
  return TPU_OK;
}

static tpu_status_t gn_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(gn_check(call));
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  gn_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.N = in->sizes[0];
  x.C = in->sizes[1];
  x.G = tpu_ku_int(call, 3, 1);
  x.Cg = x.C / x.G;
  x.eps = tpu_ku_double(call, 4, 1e-5);
  x.x = (const char*)in->data;
  x.y = (char*)out->data;
  x.xdt = in->dtype;
  x.ydt = out->dtype;
  x.xes = (int32_t)tpu_dtype_size((tpu_dtype_t)in->dtype);
  x.yes = (int32_t)tpu_dtype_size((tpu_dtype_t)out->dtype);
  x.xsn = in->strides[0];
  x.xsc = in->strides[1];
  x.ysn = out->strides[0];
  x.ysc = out->strides[1];
  /* spatial dims (size-1 dims dropped), adjacent ones merged where both layouts allow */
  x.nsd = 0;
  for (int d = 2; d < in->ndim; ++d) {
    if (in->sizes[d] == 1) continue;
    if (x.nsd > 0 && x.xst[x.nsd - 1] == in->strides[d] * in->sizes[d] &&
        x.yst[x.nsd - 1] == out->strides[d] * in->sizes[d]) {
      x.sz[x.nsd - 1] *= in->sizes[d];
      x.xst[x.nsd - 1] = in->strides[d];
      x.yst[x.nsd - 1] = out->strides[d];
      continue;
    }
    x.sz[x.nsd] = in->sizes[d];
    x.xst[x.nsd] = in->strides[d];
    x.yst[x.nsd] = out->strides[d];
    x.nsd++;
  }
  bool empty = false;
  for (int d = 2; d < in->ndim; ++d) empty = empty || in->sizes[d] == 0;
  if (x.nsd == 0) { /* one position per channel */
    x.sz[0] = empty ? 0 : 1;
    x.xst[0] = x.yst[0] = 1;
    x.nsd = 1;
  }
  x.len = empty ? 0 : x.sz[x.nsd - 1];
  x.rows = 1;
  for (int j = 0; j < x.nsd - 1; ++j) x.rows *= x.sz[j];
  const tpu_tensor_t* w = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 2);
  if (w) x.w = (const char*)w->data, x.wdt = w->dtype, x.ws = w->strides[0];
  if (b) x.b = (const char*)b->data, x.bdt = b->dtype, x.bs = b->strides[0];
  if (gn_wanted(call, 1)) {
    const tpu_tensor_t* m = &call->outputs[1];
    x.mean = (char*)m->data, x.mdt = m->dtype, x.msn = m->strides[0], x.msg = m->strides[1];
  }
  if (gn_wanted(call, 2)) {
    const tpu_tensor_t* r = &call->outputs[2];
    x.rstd = (char*)r->data, x.rdt = r->dtype, x.rsn = r->strides[0], x.rsg = r->strides[1];
  }
  if (x.N * x.G == 0) return TPU_OK;
  int64_t per = x.Cg * x.rows * x.len;
  int64_t grain = per > 0 ? (per >= 16384 ? 1 : 16384 / per) : 64;
  tpu_parallel_for(call->pool, x.N * x.G, grain, gn_par, &x);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_norm_entries[] = {
    {"tpu::group_norm", gn_run, gn_check, 0, NULL},
};
const size_t tpu_k_norm_count = sizeof(tpu_k_norm_entries) / sizeof(tpu_k_norm_entries[0]);
