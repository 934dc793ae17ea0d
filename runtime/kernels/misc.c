/* misc.c - kernel family "misc" (see tpu/kernels.h for the ABI): histc, eye,
 * log_sigmoid forward/backward, erfinv, _cdist_forward/_pdist_forward and their backward,
 * segment_reduce and its backward, _embedding_bag(_forward_only) and its dense backward.
 *
 * histc: floating inputs follow the CPU: bin = (x - min) * bins / (max - min)
 * evaluated in the input dtype's arithmetic (each f16/bf16 operation
 * rounds), truncated, x == max in the last bin, x outside [min, max]
 * dropped; integer inputs follow CUDA (the CPU rejects them):
 * bin = (x - min) * bins / (max - min) in int64 arithmetic. min == max
 * means "use the data's min and max" (read in run(), the output's shape is
 * known); a range that is then still empty widens to [min - 1, max + 1]. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

static int64_t mi_min64(int64_t a, int64_t b) { return a < b ? a : b; }

static bool mi_is_int(int dt) {
  return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32 || dt == TPU_DTYPE_I16 || dt == TPU_DTYPE_I8 ||
         dt == TPU_DTYPE_U8;
}

/* Rounds v to the precision of dtype dt (floating dtypes). */
static double mi_round(int dt, double v) {
  switch (dt) {
    case TPU_DTYPE_F32: return (double)(float)v;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16((float)v));
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)v));
    default: return v;
  }
}

/* ---- histc ---------------------------------------------------------------- */

enum { MI_HBINS = 4096 }; /* counters kept on the stack up to this many bins */

typedef struct {
  int dt;
  bool is_int;
  /* floats */
  double lo, hi; /* rounded to the input dtype */
  int64_t bins;
  /* ints */
  int64_t ilo, ihi;
  /* min/max scan */
  double fmin, fmax;
  int64_t imin, imax;
  bool seen, nan;
  /* counting */
  int64_t* cnt;      /* stack counters, or NULL */
  const tpu_tensor_t* out;
} mi_hist_t;

static void mi_hist_scan(void* ctx, char** p, const int64_t* st, int64_t n) {
  mi_hist_t* h = (mi_hist_t*)ctx;
  const char* a = p[0];
  for (int64_t i = 0; i < n; ++i, a += st[0]) {
    if (h->is_int) {
      int64_t v = tpu_ku_load_i64(a, h->dt);
      if (!h->seen || v < h->imin) h->imin = v;
      if (!h->seen || v > h->imax) h->imax = v;
    } else {
      double v = tpu_ku_load_f64(a, h->dt);
      if (v != v) h->nan = true;
      if (!h->seen || v < h->fmin) h->fmin = v;
      if (!h->seen || v > h->fmax) h->fmax = v;
    }
    h->seen = true;
  }
}

static void mi_hist_add(mi_hist_t* h, int64_t bin) {
  if (h->cnt) {
    h->cnt[bin]++;
    return;
  }
  const tpu_tensor_t* o = h->out;
  char* e = (char*)o->data + bin * o->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)o->dtype);
  if (tpu_dtype_is_floating((tpu_dtype_t)o->dtype))
    tpu_ku_store_f64(e, o->dtype, tpu_ku_load_f64(e, o->dtype) + 1.0);
  else
    tpu_ku_store_i64(e, o->dtype, tpu_ku_load_i64(e, o->dtype) + 1);
}

static void mi_hist_count(void* ctx, char** p, const int64_t* st, int64_t n) {
  mi_hist_t* h = (mi_hist_t*)ctx;
  const char* a = p[0];
  int64_t bins = h->bins;
  for (int64_t i = 0; i < n; ++i, a += st[0]) {
    int64_t bin;
    if (h->is_int) {
      int64_t v = tpu_ku_load_i64(a, h->dt);
      if (v < h->ilo || v > h->ihi) continue;
      /* CUDA: (int)((v - min) * nbins / (max - min)) in the accumulate type */
      uint64_t num = ((uint64_t)v - (uint64_t)h->ilo) * (uint64_t)bins;
      bin = (int64_t)(num / ((uint64_t)h->ihi - (uint64_t)h->ilo));
      if (bin == bins) bin = bins - 1;
      if (bin < 0 || bin >= bins) continue;
    } else {
      double v = tpu_ku_load_f64(a, h->dt);
      if (!(v >= h->lo && v <= h->hi)) continue;
      double q;
      if (h->dt == TPU_DTYPE_F64) {
        q = (v - h->lo) * (double)bins / (h->hi - h->lo);
      } else if (h->dt == TPU_DTYPE_F32) {
        q = (double)((((float)v - (float)h->lo) * (float)bins) / ((float)h->hi - (float)h->lo));
      } else {
        int dt = h->dt;
        q = mi_round(dt, mi_round(dt, mi_round(dt, v - h->lo) * mi_round(dt, (double)bins)) /
                             mi_round(dt, h->hi - h->lo));
      }
      if (!(q >= 0.0)) continue; /* NaN: a range that rounded to empty */
      bin = q >= (double)bins ? bins - 1 : (int64_t)q;
    }
    mi_hist_add(h, bin);
  }
}

static tpu_status_t mi_histc_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  if (!x || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected a tensor argument");
  const tpu_tensor_t* out = &call->outputs[0];
  if (!tpu_dtype_is_floating((tpu_dtype_t)x->dtype) && !mi_is_int(x->dtype))
    return tpu_ku_unsupported_dtype(call, x->dtype);
  if (out->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, out->dtype);
  int64_t bins = tpu_ku_int(call, 1, 100);
  if (bins <= 0) return TPU_KU_INVALID(call, "torch.histc: bins must be > 0, but got %lld", (long long)bins);
  if (out->ndim != 1 || out->sizes[0] != bins)
    return TPU_KU_INVALID(call, "expected a 1-D output of %lld bins", (long long)bins);
  if (mi_is_int(x->dtype)) {
    int64_t lo = tpu_ku_int(call, 2, 0), hi = tpu_ku_int(call, 3, 0);
    if (lo != hi && lo > hi) return TPU_KU_INVALID(call, "torch.histc: max must be larger than min");
  } else {
    double lo = tpu_ku_double(call, 2, 0.0), hi = tpu_ku_double(call, 3, 0.0);
    if (lo != hi) {
      if (isinf(lo) || isinf(hi) || isnan(lo) || isnan(hi))
        return TPU_KU_INVALID(call, "torch.histc: range of [%g, %g] is not finite", lo, hi);
      if (!(lo < hi)) return TPU_KU_INVALID(call, "torch.histc: max must be larger than min");
    }
  }
  return TPU_OK;
}

static tpu_status_t mi_histc_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(mi_histc_check(call));
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  mi_hist_t h;
  memset(&h, 0, sizeof(h));
  h.dt = x->dtype;
  h.is_int = mi_is_int(x->dtype);
  h.bins = tpu_ku_int(call, 1, 100);
  h.out = out;
  int64_t n = tpu_tensor_numel(x);
  tpu_ku_iter_t it;
  const tpu_tensor_t* ops[1] = {x};
  if (n > 0) TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 1, ops, call->op));
  if (h.is_int) {
    h.ilo = tpu_ku_int(call, 2, 0);
    h.ihi = tpu_ku_int(call, 3, 0);
    if (h.ilo == h.ihi && n > 0) {
      tpu_ku_iter_run(&it, 0, n, mi_hist_scan, &h);
      h.ilo = h.imin;
      h.ihi = h.imax;
    }
    if (h.ilo == h.ihi) {
      h.ilo -= 1;
      h.ihi += 1;
    }
    if (!(h.ilo < h.ihi)) return TPU_KU_INVALID(call, "torch.histc: max must be larger than min");
  } else {
    h.lo = tpu_ku_double(call, 2, 0.0);
    h.hi = tpu_ku_double(call, 3, 0.0);
    if (h.lo == h.hi && n > 0) {
      tpu_ku_iter_run(&it, 0, n, mi_hist_scan, &h);
      h.lo = h.nan ? NAN : h.fmin;
      h.hi = h.nan ? NAN : h.fmax;
    }
    if (h.lo == h.hi) {
      h.lo -= 1.0;
      h.hi += 1.0;
    }
    if (isinf(h.lo) || isinf(h.hi) || isnan(h.lo) || isnan(h.hi))
      return TPU_KU_INVALID(call, "torch.histc: range of [%g, %g] is not finite", h.lo, h.hi);
    if (!(h.lo < h.hi)) return TPU_KU_INVALID(call, "torch.histc: max must be larger than min");
    /* the outer bin edges, as the CPU's linspace in the input dtype gives them */
    h.lo = mi_round(h.dt, h.lo);
    h.hi = mi_round(h.dt, h.hi);
  }
  int64_t cnt[MI_HBINS];
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)out->dtype);
  if (h.bins <= MI_HBINS) {
    memset(cnt, 0, (size_t)h.bins * sizeof(int64_t));
    h.cnt = cnt;
  } else {
    for (int64_t b = 0; b < h.bins; ++b) tpu_ku_store_i64((char*)out->data + b * out->strides[0] * es, out->dtype, 0);
  }
  if (n > 0) tpu_ku_iter_run(&it, 0, n, mi_hist_count, &h);
  if (h.cnt)
    for (int64_t b = 0; b < h.bins; ++b)
      tpu_ku_store_i64((char*)out->data + b * out->strides[0] * es, out->dtype, cnt[b]);
  return TPU_OK;
}

/* ---- eye -------------------------------------------------------------------- */

typedef struct {
  const tpu_tensor_t* out;
} mi_eye_t;

static void mi_eye_rows(void* ctx, int64_t b, int64_t e) {
  const tpu_tensor_t* o = ((const mi_eye_t*)ctx)->out;
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)o->dtype);
  int64_t m = o->sizes[1];
  for (int64_t i = b; i < e; ++i) {
    char* row = (char*)o->data + i * o->strides[0] * es;
    if (o->strides[1] == 1) {
      memset(row, 0, (size_t)(m * es));
    } else {
      for (int64_t j = 0; j < m; ++j) memset(row + j * o->strides[1] * es, 0, (size_t)es);
    }
    if (i < m) tpu_ku_store_i64(row + i * o->strides[1] * es, o->dtype, 1);
  }
}

static tpu_status_t mi_eye_check(const tpu_k_call_t* call) {
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* o = &call->outputs[0];
  if (tpu_dtype_size((tpu_dtype_t)o->dtype) == 0) return tpu_ku_unsupported_dtype(call, o->dtype);
  int64_t n = tpu_ku_int(call, 0, 0);
  bool has_m = strcmp(call->op, "aten::eye.m_out") == 0;
  int64_t m = has_m ? tpu_ku_int(call, 1, 0) : n;
  if (n < 0) return TPU_KU_INVALID(call, "n must be greater or equal to 0, got %lld", (long long)n);
  if (m < 0) return TPU_KU_INVALID(call, "m must be greater or equal to 0, got %lld", (long long)m);
  if (o->ndim != 2 || o->sizes[0] != n || o->sizes[1] != m)
    return TPU_KU_INVALID(call, "expected a %lldx%lld output", (long long)n, (long long)m);
  return TPU_OK;
}

static tpu_status_t mi_eye_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(mi_eye_check(call));
  const tpu_tensor_t* o = &call->outputs[0];
  if (tpu_tensor_numel(o) == 0) return TPU_OK;
  mi_eye_t x = {o};
  tpu_parallel_for(call->pool, o->sizes[0], mi_min64(o->sizes[0], 1 + 65536 / (o->sizes[1] + 1)),
                   mi_eye_rows, &x);
  return TPU_OK;
}

/* ---- unary math: erfinv, log_sigmoid ------------------------------------------ */

/* PyTorch's calc_erfinv (ATen/native/Math.h): rational initial guess, two
 * Newton steps; in float for f32/f16/bf16 (as the CPU kernel), double for f64. */
static float mi_erfinvf(float y) {
  static const float a[4] = {0.886226899f, -1.645349621f, 0.914624893f, -0.140543331f};
  static const float b[4] = {-2.118377725f, 1.442710462f, -0.329097515f, 0.012229801f};
  static const float c[4] = {-1.970840454f, -1.624906493f, 3.429567803f, 1.641345311f};
  static const float d[2] = {3.543889200f, 1.637067800f};
  float ya = fabsf(y);
  if (ya > 1.0f) return NAN;
  if (ya == 1.0f) return copysignf(INFINITY, y);
  float x;
  if (ya <= 0.7f) {
    float z = y * y;
    float num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    float dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0f;
    x = y * num / dem;
  } else {
    float z = sqrtf(-logf((1.0f - ya) / 2.0f));
    float num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    float dem = (d[1] * z + d[0]) * z + 1.0f;
    x = copysignf(num, y) / dem;
  }
  const float k = 2.0f / (float)sqrt(3.14159265358979323846);
  x = x - (erff(x) - y) / (k * expf(-x * x));
  x = x - (erff(x) - y) / (k * expf(-x * x));
  return x;
}

static double mi_erfinv(double y) {
  static const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  static const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  static const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  static const double d[2] = {3.543889200, 1.637067800};
  double ya = fabs(y);
  if (ya > 1.0) return NAN;
  if (ya == 1.0) return copysign(INFINITY, y);
  double x;
  if (ya <= 0.7) {
    double z = y * y;
    double num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    double dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
    x = y * num / dem;
  } else {
    double z = sqrt(-log((1.0 - ya) / 2.0));
    double num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    double dem = (d[1] * z + d[0]) * z + 1.0;
    x = copysign(num, y) / dem;
  }
  const double k = 2.0 / sqrt(3.14159265358979323846);
  x = x - (erf(x) - y) / (k * exp(-x * x));
  x = x - (erf(x) - y) / (k * exp(-x * x));
  return x;
}

typedef enum { MI_ERFINV, MI_LOGSIG_FWD, MI_LOGSIG_BWD } mi_op_t;

typedef struct {
  mi_op_t op;
  int nout, nin;
  int dt[4]; /* operand dtypes: outputs first, then inputs */
  bool f64;  /* compute in double */
} mi_un_t;

/* log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)); buffer = exp(-|x|). */
static void mi_un_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const mi_un_t* u = (const mi_un_t*)ctx;
  for (int64_t i = 0; i < n; ++i) {
    char* q[4];
    for (int k = 0; k < u->nout + u->nin; ++k) q[k] = p[k] + i * st[k];
    switch (u->op) {
      case MI_ERFINV: {
        double x = tpu_ku_load_f64(q[1], u->dt[1]);
        double r = u->f64 ? mi_erfinv(x) : (double)mi_erfinvf((float)x);
        tpu_ku_store_f64(q[0], u->dt[0], r);
        break;
      }
      case MI_LOGSIG_FWD: {
        double x = tpu_ku_load_f64(q[u->nout], u->dt[u->nout]);
        double out, z;
        if (u->f64) {
          z = exp(-fabs(x));
          out = (x < 0 ? x : 0.0) - log1p(z);
        } else {
          float xf = (float)x, zf = expf(-fabsf(xf));
          z = zf;
          out = (double)((xf < 0.0f ? xf : 0.0f) - log1pf(zf));
        }
        tpu_ku_store_f64(q[0], u->dt[0], out);
        if (u->nout > 1 && u->dt[1] != TPU_DTYPE_INVALID) tpu_ku_store_f64(q[1], u->dt[1], z);
        break;
      }
      case MI_LOGSIG_BWD: { /* (grad_input; grad_output, self): z recomputed from self */
        double g = tpu_ku_load_f64(q[1], u->dt[1]);
        double x = tpu_ku_load_f64(q[2], u->dt[2]);
        double r;
        if (u->f64) {
          double z = exp(-fabs(x));
          r = x < 0 ? (1.0 - z / (1.0 + z)) * g : (z / (1.0 + z)) * g;
        } else {
          float xf = (float)x, gf = (float)g, zf = expf(-fabsf(xf));
          r = xf < 0.0f ? (1.0f - zf / (1.0f + zf)) * gf : (zf / (1.0f + zf)) * gf;
        }
        tpu_ku_store_f64(q[0], u->dt[0], r);
        break;
      }
    }
  }
}

static mi_op_t mi_op_of(const char* op) {
  if (strncmp(op, "aten::erfinv", 12) == 0) return MI_ERFINV;
  if (strncmp(op, "aten::log_sigmoid_forward", 25) == 0) return MI_LOGSIG_FWD;
  return MI_LOGSIG_BWD;
}

/* Sets up operands: ops[0..nout) outputs, then inputs. */
static tpu_status_t mi_un_setup(const tpu_k_call_t* call, mi_un_t* u, const tpu_tensor_t** ops) {
  memset(u, 0, sizeof(*u));
  u->op = mi_op_of(call->op);
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  if (!a || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  switch (u->op) {
    case MI_ERFINV:
      u->nout = 1;
      u->nin = 1;
      ops[0] = &call->outputs[0];
      ops[1] = a;
      break;
    case MI_LOGSIG_FWD:
      u->nout = (call->num_outputs > 1 && call->outputs[1].dtype != TPU_DTYPE_INVALID &&
                 tpu_tensor_numel(&call->outputs[1]) == tpu_tensor_numel(&call->outputs[0]))
                    ? 2
                    : 1;
      u->nin = 1;
      ops[0] = &call->outputs[0];
      ops[1] = u->nout > 1 ? &call->outputs[1] : NULL;
      ops[u->nout] = a;
      break;
    case MI_LOGSIG_BWD:
      if (!b) return TPU_KU_INVALID(call, "expected tensor arguments");
      u->nout = 1;
      u->nin = 2;
      ops[0] = &call->outputs[0];
      ops[1] = a; /* grad_output */
      ops[2] = b; /* self */
      break;
  }
  int nops = u->nout + u->nin;
  for (int k = 0; k < nops; ++k) {
    int dt = ops[k]->dtype;
    bool in = k >= u->nout;
    bool ok = tpu_dtype_is_floating((tpu_dtype_t)dt) ||
              (in && u->op == MI_ERFINV && tpu_dtype_size((tpu_dtype_t)dt) > 0);
    if (!ok) return tpu_ku_unsupported_dtype(call, dt);
    u->dt[k] = dt;
  }
  u->f64 = ops[0]->dtype == TPU_DTYPE_F64;
  return TPU_OK;
}

static tpu_status_t mi_un_check(const tpu_k_call_t* call) {
  mi_un_t u;
  const tpu_tensor_t* ops[4];
  TPU_RETURN_IF_ERROR(mi_un_setup(call, &u, ops));
  tpu_ku_iter_t it;
  return tpu_ku_iter_init(&it, u.nout + u.nin, ops, call->op);
}

static tpu_status_t mi_un_run(const tpu_k_call_t* call) {
  mi_un_t u;
  const tpu_tensor_t* ops[4];
  TPU_RETURN_IF_ERROR(mi_un_setup(call, &u, ops));
  if (tpu_tensor_numel(ops[0]) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, u.nout + u.nin, ops, call->op));
  tpu_ku_iter_parallel(&it, call->pool, 8192, mi_un_inner, &u);
  return TPU_OK;
}

/* ---- _cdist_forward, _pdist_forward ----------------------------------------
 * The p-norm distance of row pairs, as the CPU's direct kernel (the matrix
 * product form of p = 2 for large inputs runs above, through cdist's
 * composite): p = 0 counts the differing elements, p = 1 sums |d|, p = 2 is
 * sqrt(sum d^2), p = inf max |d| (NaN if a difference is NaN), any other p
 * (sum |d|^p)^(1/p). Sums in double, the result rounded once to the dtype
 * (float32 or float64: the CPU has no other). cdist broadcasts the batch dims
 * of x1 [..., P, M] and x2 [..., R, M] to the output's [..., P, R]; pdist
 * writes the pairs i < j of x [N, M] in row-major order. */
typedef struct {
  int dt;
  double p;
  int64_t M, P, R, nbatch;
  int32_t nb;                 /* batch dims */
  int64_t bsize[TPU_MAX_DIMS]; /* the output's batch sizes */
  int64_t b1[TPU_MAX_DIMS], b2[TPU_MAX_DIMS], bo[TPU_MAX_DIMS]; /* their strides, elements */
  const char *x1, *x2;
  char* out;
  int64_t r1, c1, r2, c2, ro, co; /* row/column strides of x1, x2 and the output */
  bool pdist;
} mi_dist_t;

static double mi_dist_pair(const mi_dist_t* d, const char* a, int64_t ca, const char* b, int64_t cb) {
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)d->dt);
  const double p = d->p;
  double acc = 0.0;
  for (int64_t m = 0; m < d->M; ++m) {
    const double v = fabs(tpu_ku_load_f64(a + m * ca * es, d->dt) - tpu_ku_load_f64(b + m * cb * es, d->dt));
    if (p == 0.0) acc += v != 0.0 ? 1.0 : 0.0;
    else if (p == 1.0) acc += v;
    else if (p == 2.0) acc += v * v;
    else if (isinf(p)) acc = (v != v || acc != acc) ? NAN : (v > acc ? v : acc);
    else acc += pow(v, p);
  }
  if (p == 0.0 || p == 1.0 || isinf(p)) return acc;
  if (p == 2.0) return sqrt(acc);
  return pow(acc, 1.0 / p);
}

/* task t: one row i of x1 (cdist: in batch t / P) against every row it pairs with */
static void mi_dist_par(void* ctx, int64_t begin, int64_t end) {
  const mi_dist_t* d = (const mi_dist_t*)ctx;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)d->dt);
  for (int64_t t = begin; t < end; ++t) {
    if (d->pdist) {
      const int64_t i = t, n = d->P;
      int64_t k = i * n - i * (i + 1) / 2; /* index of the pair (i, i + 1) */
      for (int64_t j = i + 1; j < n; ++j, ++k) {
        const double v = mi_dist_pair(d, d->x1 + i * d->r1 * es, d->c1, d->x1 + j * d->r1 * es, d->c1);
        tpu_ku_store_f64(d->out + k * d->co * es, d->dt, v);
      }
      continue;
    }
    int64_t bi = t / d->P, i = t % d->P, o1 = 0, o2 = 0, oo = 0;
    for (int32_t k = d->nb - 1; k >= 0; --k) {
      const int64_t idx = bi % d->bsize[k];
      bi /= d->bsize[k];
      o1 += idx * d->b1[k];
      o2 += idx * d->b2[k];
      oo += idx * d->bo[k];
    }
    const char* a = d->x1 + (o1 + i * d->r1) * es;
    for (int64_t j = 0; j < d->R; ++j) {
      const double v = mi_dist_pair(d, a, d->c1, d->x2 + (o2 + j * d->r2) * es, d->c2);
      tpu_ku_store_f64(d->out + (oo + i * d->ro + j * d->co) * es, d->dt, v);
    }
  }
}

static tpu_status_t mi_dist_setup(const tpu_k_call_t* call, mi_dist_t* d) {
  memset(d, 0, sizeof(*d));
  d->pdist = strncmp(call->op, "aten::_pdist", 12) == 0;
  const tpu_tensor_t* x1 = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* x2 = d->pdist ? x1 : tpu_ku_tensor(call, 1);
  if (!x1 || !x2 || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* o = &call->outputs[0];
  const char* name = d->pdist ? "pdist" : "cdist";
  d->p = tpu_ku_double(call, d->pdist ? 1 : 2, 2.0);
  if (d->pdist ? x1->ndim != 2 : (x1->ndim < 2 || x2->ndim < 2))
    return TPU_KU_INVALID(call, "%s only supports %s tensors, got: %dD and %dD", name,
                          d->pdist ? "2D" : "at least 2D", (int)x1->ndim, (int)x2->ndim);
  if (!tpu_dtype_is_floating((tpu_dtype_t)x1->dtype))
    return TPU_KU_INVALID(call, "%s only supports floating-point dtypes, X1 got: %s", name,
                          tpu_dtype_name((tpu_dtype_t)x1->dtype));
  if (x2->dtype != x1->dtype || o->dtype != x1->dtype)
    return TPU_KU_INVALID(call, "expected scalar type %s but found %s", tpu_dtype_name((tpu_dtype_t)x1->dtype),
                          tpu_dtype_name((tpu_dtype_t)(x2->dtype != x1->dtype ? x2->dtype : o->dtype)));
  if (x1->dtype != TPU_DTYPE_F32 && x1->dtype != TPU_DTYPE_F64) return tpu_ku_unsupported_dtype(call, x1->dtype);
  if (!d->pdist && !(d->p >= 0.0)) return TPU_KU_INVALID(call, "cdist only supports non-negative p values");
  const int32_t n1 = x1->ndim, n2 = x2->ndim;
  d->M = x1->sizes[n1 - 1];
  if (x2->sizes[n2 - 1] != d->M)
    return TPU_KU_INVALID(call, "X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                          (long long)d->M, (long long)x2->sizes[n2 - 1]);
  d->dt = x1->dtype;
  d->x1 = (const char*)x1->data;
  d->x2 = (const char*)x2->data;
  d->out = (char*)o->data;
  d->P = x1->sizes[n1 - 2];
  d->r1 = x1->strides[n1 - 2];
  d->c1 = x1->strides[n1 - 1];
  if (d->pdist) {
    const int64_t want = d->P * (d->P - 1) / 2;
    if (o->ndim != 1 || o->sizes[0] != (want > 0 ? want : 0))
      return TPU_KU_INVALID(call, "pdist: out must be [%lld] for %lld rows", (long long)(want > 0 ? want : 0),
                            (long long)d->P);
    d->co = o->strides[0];
    d->nbatch = 1;
    return TPU_OK;
  }
  d->R = x2->sizes[n2 - 2];
  d->r2 = x2->strides[n2 - 2];
  d->c2 = x2->strides[n2 - 1];
  const int32_t no = o->ndim;
  d->nb = no - 2;
  if (no < 2 || o->sizes[no - 2] != d->P || o->sizes[no - 1] != d->R || n1 - 2 > d->nb || n2 - 2 > d->nb)
    return TPU_KU_INVALID(call, "cdist: out (%d-D) must be [..., %lld, %lld]", (int)no, (long long)d->P,
                          (long long)d->R);
  d->ro = o->strides[no - 2];
  d->co = o->strides[no - 1];
  d->nbatch = 1;
  for (int32_t k = 0; k < d->nb; ++k) {
    const int32_t k1 = k - (d->nb - (n1 - 2)), k2 = k - (d->nb - (n2 - 2));
    const int64_t s1 = k1 >= 0 ? x1->sizes[k1] : 1, s2 = k2 >= 0 ? x2->sizes[k2] : 1, so = o->sizes[k];
    if ((s1 != so && s1 != 1) || (s2 != so && s2 != 1))
      return TPU_KU_INVALID(call, "cdist: batch dim %d of X1 (%lld) and X2 (%lld) do not broadcast to %lld", (int)k,
                            (long long)s1, (long long)s2, (long long)so);
    d->bsize[k] = so;
    d->b1[k] = s1 == 1 ? 0 : x1->strides[k1];
    d->b2[k] = s2 == 1 ? 0 : x2->strides[k2];
    d->bo[k] = o->strides[k];
    d->nbatch *= so;
  }
  return TPU_OK;
}

static tpu_status_t mi_dist_check(const tpu_k_call_t* call) {
  mi_dist_t d;
  return mi_dist_setup(call, &d);
}

static tpu_status_t mi_dist_run(const tpu_k_call_t* call) {
  mi_dist_t d;
  TPU_RETURN_IF_ERROR(mi_dist_setup(call, &d));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  const int64_t tasks = d.nbatch * d.P, per = (d.pdist ? d.P / 2 + 1 : d.R) * (d.M + 1);
  tpu_parallel_for(call->pool, tasks, 1 + 16384 / per, mi_dist_par, &d);
  return TPU_OK;
}

/* _cdist_backward(grad, x1, x2, p, cdist) -> d/dx1 of sum(grad * cdist), of
 * the broadcast batch shape [..., P, M]; _pdist_backward(grad, x, p, pdist)
 * -> [N, M]. Per pair, with d = x1_m - x2_m and the pair's distance r, the
 * CPU's derivatives: p = 0: 0; p = 1: sign(d); p = 2: d / r; p = inf:
 * sign(d) where |d| == r; p < 2: sign(d) |d|^(p-1) / r^(p-1), 0 for d = 0
 * when p < 1; any other p: d |d|^(p-2) / r^(p-1); 0 wherever r = 0 (for
 * p = 2 and the general forms). Sums over the pairs in double. */
static double mi_dist_deriv(double p, double d, double r) {
  const double s = (double)((0.0 < d) - (d < 0.0));
  if (p == 0.0) return 0.0;
  if (p == 1.0) return s;
  if (isinf(p)) return s * (1.0 - fmin(1.0, ceil(fabs(fabs(d) - r))));
  if (r == 0.0) return 0.0;
  if (p == 2.0) return d / r;
  if (p < 2.0) return (d == 0.0 && p < 1.0) ? 0.0 : s * pow(fabs(d), p - 1.0) / pow(r, p - 1.0);
  return d * pow(fabs(d), p - 2.0) / pow(r, p - 1.0);
}

typedef struct {
  mi_dist_t f;             /* x1, x2 and the shapes, as the forward's (out: grad_x1) */
  const char *g, *r;       /* grad and the forward's result */
  int64_t gbo[TPU_MAX_DIMS], rbo[TPU_MAX_DIMS]; /* their batch strides */
  int64_t gr, gc, rr, rc;  /* their row/column strides (pdist: gc, rc) */
} mi_distb_t;

static void mi_distb_par(void* ctx, int64_t begin, int64_t end) {
  const mi_distb_t* b = (const mi_distb_t*)ctx;
  const mi_dist_t* d = &b->f;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)d->dt);
  for (int64_t t = begin; t < end; ++t) {
    int64_t bi = t / d->P, i = t % d->P, o1 = 0, o2 = 0, oo = 0, og = 0, orr = 0;
    for (int32_t k = d->nb - 1; k >= 0; --k) {
      const int64_t idx = bi % d->bsize[k];
      bi /= d->bsize[k];
      o1 += idx * d->b1[k];
      o2 += idx * d->b2[k];
      oo += idx * d->bo[k];
      og += idx * b->gbo[k];
      orr += idx * b->rbo[k];
    }
    const char* a = d->x1 + (o1 + i * d->r1) * es;
    const int64_t nj = d->pdist ? d->P : d->R;
    for (int64_t m = 0; m < d->M; ++m) {
      const double am = tpu_ku_load_f64(a + m * d->c1 * es, d->dt);
      double acc = 0.0;
      for (int64_t j = 0; j < nj; ++j) {
        double gv, rv, bm;
        if (d->pdist) {
          if (j == i) continue;
          const int64_t lo = i < j ? i : j, hi = i < j ? j : i, k = lo * d->P - lo * (lo + 1) / 2 + (hi - lo - 1);
          gv = tpu_ku_load_f64(b->g + k * b->gc * es, d->dt);
          rv = tpu_ku_load_f64(b->r + k * b->rc * es, d->dt);
          bm = tpu_ku_load_f64(d->x1 + (j * d->r1 + m * d->c1) * es, d->dt);
        } else {
          gv = tpu_ku_load_f64(b->g + (og + i * b->gr + j * b->gc) * es, d->dt);
          rv = tpu_ku_load_f64(b->r + (orr + i * b->rr + j * b->rc) * es, d->dt);
          bm = tpu_ku_load_f64(d->x2 + (o2 + j * d->r2 + m * d->c2) * es, d->dt);
        }
        acc += gv * mi_dist_deriv(d->p, am - bm, rv);
      }
      tpu_ku_store_f64(d->out + (oo + i * d->ro + m * d->co) * es, d->dt, acc);
    }
  }
}

static tpu_status_t mi_distb_setup(const tpu_k_call_t* call, mi_distb_t* b) {
  memset(b, 0, sizeof(*b));
  mi_dist_t* d = &b->f;
  d->pdist = strncmp(call->op, "aten::_pdist", 12) == 0;
  const int xi = 1, x2i = d->pdist ? 1 : 2, pi = d->pdist ? 2 : 3, ri = d->pdist ? 3 : 4;
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* x1 = tpu_ku_tensor(call, xi);
  const tpu_tensor_t* x2 = tpu_ku_tensor(call, x2i);
  const tpu_tensor_t* r = tpu_ku_tensor(call, ri);
  if (!g || !x1 || !x2 || !r || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* o = &call->outputs[0];
  const char* name = d->pdist ? "_pdist_backward" : "_cdist_backward";
  if (d->pdist ? x1->ndim != 2 : (x1->ndim < 2 || x2->ndim < 2))
    return TPU_KU_INVALID(call, "%s: expected %s inputs, got %dD and %dD", name, d->pdist ? "2D" : "at least 2D",
                          (int)x1->ndim, (int)x2->ndim);
  if (x1->dtype != TPU_DTYPE_F32 && x1->dtype != TPU_DTYPE_F64) return tpu_ku_unsupported_dtype(call, x1->dtype);
  if (x2->dtype != x1->dtype || g->dtype != x1->dtype || r->dtype != x1->dtype || o->dtype != x1->dtype)
    return TPU_KU_INVALID(call, "%s: grad, inputs, result and output must share one dtype (%s)", name,
                          tpu_dtype_name((tpu_dtype_t)x1->dtype));
  d->p = tpu_ku_double(call, pi, 2.0);
  const int32_t n1 = x1->ndim, n2 = x2->ndim, no = o->ndim;
  d->M = x1->sizes[n1 - 1];
  d->P = x1->sizes[n1 - 2];
  if (x2->sizes[n2 - 1] != d->M)
    return TPU_KU_INVALID(call, "%s: X1 and X2 must have the same number of columns. X1: %lld X2: %lld", name,
                          (long long)d->M, (long long)x2->sizes[n2 - 1]);
  d->dt = x1->dtype;
  d->x1 = (const char*)x1->data;
  d->x2 = (const char*)x2->data;
  d->out = (char*)o->data;
  d->r1 = x1->strides[n1 - 2];
  d->c1 = x1->strides[n1 - 1];
  b->g = (const char*)g->data;
  b->r = (const char*)r->data;
  d->nbatch = 1;
  if (no != (d->pdist ? 2 : (n1 > n2 ? n1 : n2)) || o->sizes[no - 2] != d->P || o->sizes[no - 1] != d->M)
    return TPU_KU_INVALID(call, "%s: out (%d-D) must be [..., %lld, %lld]", name, (int)no, (long long)d->P,
                          (long long)d->M);
  d->ro = o->strides[no - 2];
  d->co = o->strides[no - 1];
  if (d->pdist) {
    const int64_t np = d->P * (d->P - 1) / 2;
    if (g->ndim != 1 || r->ndim != 1 || g->sizes[0] != np || r->sizes[0] != np)
      return TPU_KU_INVALID(call, "%s: grad and pdist must have %lld elements", name, (long long)np);
    b->gc = g->strides[0];
    b->rc = r->strides[0];
    return TPU_OK;
  }
  d->R = x2->sizes[n2 - 2];
  d->r2 = x2->strides[n2 - 2];
  d->c2 = x2->strides[n2 - 1];
  d->nb = no - 2;
  if (g->ndim != no || r->ndim != no || g->sizes[no - 2] != d->P || g->sizes[no - 1] != d->R ||
      r->sizes[no - 2] != d->P || r->sizes[no - 1] != d->R)
    return TPU_KU_INVALID(call, "%s: grad and cdist must be [..., %lld, %lld]", name, (long long)d->P,
                          (long long)d->R);
  b->gr = g->strides[no - 2];
  b->gc = g->strides[no - 1];
  b->rr = r->strides[no - 2];
  b->rc = r->strides[no - 1];
  for (int32_t k = 0; k < d->nb; ++k) {
    const int32_t k1 = k - (d->nb - (n1 - 2)), k2 = k - (d->nb - (n2 - 2));
    const int64_t s1 = k1 >= 0 ? x1->sizes[k1] : 1, s2 = k2 >= 0 ? x2->sizes[k2] : 1, so = o->sizes[k];
    if ((s1 != so && s1 != 1) || (s2 != so && s2 != 1) || g->sizes[k] != so || r->sizes[k] != so)
      return TPU_KU_INVALID(call, "%s: batch dim %d of X1 (%lld) and X2 (%lld) do not broadcast to %lld", name,
                            (int)k, (long long)s1, (long long)s2, (long long)so);
    d->bsize[k] = so;
    d->b1[k] = s1 == 1 ? 0 : x1->strides[k1];
    d->b2[k] = s2 == 1 ? 0 : x2->strides[k2];
    d->bo[k] = o->strides[k];
    b->gbo[k] = g->strides[k];
    b->rbo[k] = r->strides[k];
    d->nbatch *= so;
  }
  return TPU_OK;
}

static tpu_status_t mi_distb_check(const tpu_k_call_t* call) {
  mi_distb_t b;
  return mi_distb_setup(call, &b);
}

static tpu_status_t mi_distb_run(const tpu_k_call_t* call) {
  mi_distb_t b;
  TPU_RETURN_IF_ERROR(mi_distb_setup(call, &b));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  const int64_t tasks = b.f.nbatch * b.f.P, per = (b.f.pdist ? b.f.P : b.f.R) * (b.f.M + 1);
  tpu_parallel_for(call->pool, tasks, 1 + 16384 / per, mi_distb_par, &b);
  return TPU_OK;
}

/* ---- segment_reduce ----------------------------------------------------------
 * segment_reduce(data, reduce, lengths | offsets, axis, unsafe, initial): data's
 * dim `axis` cut into consecutive segments, each reduced to one element. The
 * segments of outer row o (data's dims before axis) come from lengths[o, :]
 * (their sizes) or offsets[o, :] (S + 1 bounds). As the CPU: the reduction
 * starts from `initial`, else 0 (sum, mean), 1 (prod), -inf (max), +inf (min);
 * max/min propagate NaN; mean divides by the segment's size, and an empty
 * segment's mean is `initial`, else NaN. Every step in the dtype's own
 * arithmetic (float16/bfloat16: float, rounded to the dtype each time). The
 * lengths or offsets are read when the op runs: negative lengths, rows that
 * do not add up to data's size (or exceed it with unsafe=True) and offsets
 * that decrease or leave [0, size] are errors. */
typedef enum { MI_SEG_SUM, MI_SEG_MEAN, MI_SEG_PROD, MI_SEG_MAX, MI_SEG_MIN } mi_seg_op_t;

typedef struct {
  mi_seg_op_t op;
  int dt;
  bool has_initial, offsets;
  double initial;
  const tpu_tensor_t *data, *idx, *out; /* idx: lengths or offsets */
  int32_t axis;
  int64_t S, L;                          /* segments, data's size along axis */
  int64_t outer, inner;                  /* products of data's dims before and after axis */
} mi_seg_t;

static double mi_seg_round(int dt, double v) { return dt == TPU_DTYPE_F64 ? v : mi_round(dt, v); }

/* element offset of `flat` over dims [d0, d1) of t, unravelled by `sizes` */
static int64_t mi_seg_offset(const tpu_tensor_t* t, const int64_t* sizes, int32_t d0, int32_t d1, int32_t tdim0,
                             int64_t flat) {
  int64_t off = 0;
  for (int32_t d = d1 - 1; d >= d0; --d) {
    off += (flat % sizes[d]) * t->strides[tdim0 + (d - d0)];
    flat /= sizes[d];
  }
  return off;
}

/* segment s of outer row o: [*start, *start + *len) */
static void mi_seg_bounds(const mi_seg_t* g, int64_t o, int64_t s, int64_t* start, int64_t* len) {
  const tpu_tensor_t* t = g->idx;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  const char* row = (const char*)t->data + mi_seg_offset(t, g->data->sizes, 0, g->axis, 0, o) * es;
  const int64_t st = t->strides[g->axis] * es;
  if (g->offsets) {
    *start = tpu_ku_load_i64(row + s * st, t->dtype);
    *len = tpu_ku_load_i64(row + (s + 1) * st, t->dtype) - *start;
    return;
  }
  int64_t a = 0;
  for (int64_t k = 0; k < s; ++k) a += tpu_ku_load_i64(row + k * st, t->dtype);
  *start = a;
  *len = tpu_ku_load_i64(row + s * st, t->dtype);
}

static void mi_seg_par(void* ctx, int64_t begin, int64_t end) {
  const mi_seg_t* g = (const mi_seg_t*)ctx;
  const tpu_tensor_t *x = g->data, *y = g->out;
  const int64_t xes = (int64_t)tpu_dtype_size((tpu_dtype_t)x->dtype), yes = (int64_t)tpu_dtype_size((tpu_dtype_t)y->dtype);
  const int32_t nd = x->ndim;
  double init = g->op == MI_SEG_PROD ? 1.0 : g->op == MI_SEG_MAX ? -INFINITY : g->op == MI_SEG_MIN ? INFINITY : 0.0;
  if (g->has_initial) init = mi_seg_round(g->dt, g->initial);
  for (int64_t t = begin; t < end; ++t) {
    const int64_t o = t / g->S, s = t % g->S;
    int64_t start, len;
    mi_seg_bounds(g, o, s, &start, &len);
    const int64_t xo = mi_seg_offset(x, x->sizes, 0, g->axis, 0, o), yo = mi_seg_offset(y, x->sizes, 0, g->axis, 0, o);
    for (int64_t i = 0; i < g->inner; ++i) {
      const int64_t xi = mi_seg_offset(x, x->sizes, g->axis + 1, nd, g->axis + 1, i);
      const int64_t yi = mi_seg_offset(y, x->sizes, g->axis + 1, nd, g->axis + 1, i);
      double r = init;
      for (int64_t j = start; j < start + len; ++j) {
        const double v = tpu_ku_load_f64((const char*)x->data + (xo + j * x->strides[g->axis] + xi) * xes, g->dt);
        switch (g->op) {
          case MI_SEG_SUM: case MI_SEG_MEAN: r = mi_seg_round(g->dt, r + v); break;
          case MI_SEG_PROD: r = mi_seg_round(g->dt, r * v); break;
          case MI_SEG_MAX: r = (isnan(v) || isnan(r)) ? NAN : (v > r ? v : r); break;
          default: r = (isnan(v) || isnan(r)) ? NAN : (v < r ? v : r); break;
        }
      }
      if (g->op == MI_SEG_MEAN) r = len == 0 ? (g->has_initial ? init : NAN) : mi_seg_round(g->dt, r / (double)len);
      tpu_ku_store_f64((char*)y->data + (yo + s * y->strides[g->axis] + yi) * yes, g->dt, r);
    }
  }
}

static tpu_status_t mi_seg_setup(const tpu_k_call_t* call, mi_seg_t* g) {
  memset(g, 0, sizeof(*g));
  g->data = tpu_ku_tensor(call, 0);
  const char* red = tpu_ku_string(call, 1, NULL);
  const tpu_tensor_t* lengths = tpu_ku_is_none(call, 2) ? NULL : tpu_ku_tensor(call, 2);
  const tpu_tensor_t* indices = tpu_ku_is_none(call, 3) ? NULL : tpu_ku_tensor(call, 3);
  const tpu_tensor_t* offsets = tpu_ku_is_none(call, 4) ? NULL : tpu_ku_tensor(call, 4);
  if (!g->data || !red || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected data, reduce and an output");
  g->out = &call->outputs[0];
  if (!strcmp(red, "sum")) g->op = MI_SEG_SUM;
  else if (!strcmp(red, "mean")) g->op = MI_SEG_MEAN;
  else if (!strcmp(red, "prod")) g->op = MI_SEG_PROD;
  else if (!strcmp(red, "max") || !strcmp(red, "amax")) g->op = MI_SEG_MAX;
  else if (!strcmp(red, "min") || !strcmp(red, "amin")) g->op = MI_SEG_MIN;
  else return TPU_KU_INVALID(call, "reduce argument must be either sum, prod, mean, amax or amin, got %s", red);
  if (indices) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: indices based reduction is not supported yet", call->op);
  if (!lengths == !offsets)
    return TPU_KU_INVALID(call, "segment_reduce(): exactly one of lengths and offsets must be given");
  g->offsets = offsets != NULL;
  g->idx = offsets ? offsets : lengths;
  const tpu_tensor_t *x = g->data, *ix = g->idx, *y = g->out;
  if (!tpu_dtype_is_floating((tpu_dtype_t)x->dtype)) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (y->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, y->dtype);
  if (ix->dtype != TPU_DTYPE_I64 && ix->dtype != TPU_DTYPE_I32) return tpu_ku_unsupported_dtype(call, ix->dtype);
  g->dt = x->dtype;
  g->axis = (int32_t)tpu_ku_int(call, 5, 0);
  if (g->axis < 0) g->axis += x->ndim;
  if (g->axis < 0 || g->axis >= x->ndim || ix->ndim != g->axis + 1)
    return TPU_KU_INVALID(call, "segment_reduce(): axis %d of %d-D data needs %s of %d dims (got %d)",
                          (int)g->axis, (int)x->ndim, offsets ? "offsets" : "lengths", (int)g->axis + 1, (int)ix->ndim);
  g->S = ix->sizes[g->axis] - (offsets ? 1 : 0);
  g->L = x->sizes[g->axis];
  if (g->S < 0) return TPU_KU_INVALID(call, "segment_reduce(): offsets must hold at least one value");
  if (y->ndim != x->ndim) return TPU_KU_INVALID(call, "segment_reduce(): output rank %d, data %d", (int)y->ndim,
                                                (int)x->ndim);
  g->outer = g->inner = 1;
  for (int32_t d = 0; d < x->ndim; ++d) {
    const int64_t want = d == g->axis ? g->S : x->sizes[d];
    if (y->sizes[d] != want || (d < g->axis && ix->sizes[d] != x->sizes[d]))
      return TPU_KU_INVALID(call, "segment_reduce(): size mismatch at dim %d", (int)d);
    if (d < g->axis) g->outer *= x->sizes[d];
    if (d > g->axis) g->inner *= x->sizes[d];
  }
  if (!tpu_ku_is_none(call, 7)) {
    g->has_initial = true;
    g->initial = tpu_ku_double(call, 7, 0.0);
  }
  return TPU_OK;
}

static tpu_status_t mi_seg_check(const tpu_k_call_t* call) {
  mi_seg_t g;
  return mi_seg_setup(call, &g);
}

static tpu_status_t mi_seg_run(const tpu_k_call_t* call) {
  mi_seg_t g;
  TPU_RETURN_IF_ERROR(mi_seg_setup(call, &g));
  const bool unsafe = tpu_ku_is_none(call, 6) ? false : call->args[6].v.b;
  /* the segments must lie inside data along axis: read them before any element */
  for (int64_t o = 0; o < g.outer; ++o) {
    int64_t prev_end = 0;
    for (int64_t s = 0; s < g.S; ++s) {
      int64_t start, len;
      mi_seg_bounds(&g, o, s, &start, &len);
      if (len < 0 || start < 0 || start + len > g.L || (g.offsets && s > 0 && start != prev_end))
        return TPU_KU_INVALID(call, "segment_reduce(): segment %lld of row %lld, [%lld, %lld), is outside data's %lld "
                              "elements along axis %d", (long long)s, (long long)o, (long long)start,
                              (long long)(start + len), (long long)g.L, (int)g.axis);
      prev_end = start + len;
    }
    if (!g.offsets && !unsafe && prev_end != g.L)
      return TPU_KU_INVALID(call, "segment_reduce(): Expected all rows of lengths along axis to sum to "
                            "data.size(lengths.dim()-1) when !unsafe (row %lld sums to %lld, not %lld).",
                            (long long)o, (long long)prev_end, (long long)g.L);
  }
  if (tpu_tensor_numel(g.out) == 0) return TPU_OK;
  tpu_parallel_for(call->pool, g.outer * g.S, 1 + 4096 / (g.inner * (g.L / (g.S ? g.S : 1) + 1)), mi_seg_par, &g);
  return TPU_OK;
}

/* _segment_reduce_backward(grad, output, data, reduce, lengths | offsets, axis,
 * initial) -> d/d data, as the CPU: sum passes grad to every element of the
 * segment, mean grad / size; max/min give grad to the elements equal to the
 * output and to NaNs, divided by their count where grad is positive (the
 * CPU leaves a negative grad whole on every tie); prod gives
 * (grad * output) / x, and for a zero or NaN x grad times the product of
 * initial (else 1) and the segment's other elements, in order. Elements in no
 * segment get 0. Every step in the dtype's arithmetic. */
typedef struct {
  mi_seg_t f;                    /* data, the segments, and (out) grad_input */
  const tpu_tensor_t *grad, *y;  /* grad and output: [..., S, ...] */
} mi_segb_t;

static void mi_segb_par(void* ctx, int64_t begin, int64_t end) {
  const mi_segb_t* b = (const mi_segb_t*)ctx;
  const mi_seg_t* g = &b->f;
  const tpu_tensor_t *x = g->data, *gi = g->out;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)g->dt);
  const int32_t nd = x->ndim, ax = g->axis;
  const double init = g->has_initial ? mi_seg_round(g->dt, g->initial) : 1.0;
#define MI_AT(t, o, j, i) ((char*)(t)->data + (mi_seg_offset(t, x->sizes, 0, ax, 0, o) + (j) * (t)->strides[ax] + \
                                               mi_seg_offset(t, x->sizes, ax + 1, nd, ax + 1, i)) * es)
  for (int64_t o = begin; o < end; ++o) {
    for (int64_t j = 0; j < g->L; ++j)
      for (int64_t i = 0; i < g->inner; ++i) tpu_ku_store_f64(MI_AT(gi, o, j, i), g->dt, 0.0);
    for (int64_t s = 0; s < g->S; ++s) {
      int64_t start, len;
      mi_seg_bounds(g, o, s, &start, &len);
      for (int64_t i = 0; i < g->inner; ++i) {
        const double gv = tpu_ku_load_f64(MI_AT(b->grad, o, s, i), g->dt);
        const double yv = tpu_ku_load_f64(MI_AT(b->y, o, s, i), g->dt);
        int64_t count = 0;
        if (g->op == MI_SEG_MAX || g->op == MI_SEG_MIN)
          for (int64_t j = start; j < start + len; ++j) {
            const double v = tpu_ku_load_f64(MI_AT(x, o, j, i), g->dt);
            count += v == yv || isnan(v);
          }
        for (int64_t j = start; j < start + len; ++j) {
          const double v = tpu_ku_load_f64(MI_AT(x, o, j, i), g->dt);
          double r;
          switch (g->op) {
            case MI_SEG_SUM: r = gv; break;
            case MI_SEG_MEAN: r = mi_seg_round(g->dt, gv / (double)len); break;
            case MI_SEG_MAX: case MI_SEG_MIN:
              r = (v == yv || isnan(v)) ? (count >= 2 && gv > 0 ? mi_seg_round(g->dt, gv / (double)count) : gv) : 0.0;
              break;
            default:
              if (v == 0.0 || isnan(v)) {
                double p = init;
                for (int64_t k = start; k < start + len; ++k)
                  if (k != j) p = mi_seg_round(g->dt, p * tpu_ku_load_f64(MI_AT(x, o, k, i), g->dt));
                r = mi_seg_round(g->dt, gv * p);
              } else {
                r = mi_seg_round(g->dt, mi_seg_round(g->dt, gv * yv) / v);
              }
              break;
          }
          tpu_ku_store_f64(MI_AT(gi, o, j, i), g->dt, r);
        }
      }
    }
  }
#undef MI_AT
}

static tpu_status_t mi_segb_setup(const tpu_k_call_t* call, mi_segb_t* b) {
  memset(b, 0, sizeof(*b));
  /* as the forward's arguments: (data, reduce, lengths, indices = None, offsets, axis, unsafe, initial) */
  tpu_k_value_t args[8];
  const int map[8] = {2, 3, 4, -1, 5, 6, -1, 7};
  for (int k = 0; k < 8; ++k) {
    memset(&args[k], 0, sizeof(args[k]));
    if (map[k] >= 0 && map[k] < call->num_args) args[k] = call->args[map[k]];
  }
  args[6].kind = TPU_K_BOOL;
  args[6].v.b = false;
  tpu_k_call_t fwd = *call;
  fwd.args = args;
  fwd.num_args = 8;
  b->grad = tpu_ku_tensor(call, 0);
  b->y = tpu_ku_tensor(call, 1);
  if (!b->grad || !b->y || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected grad, output and data");
  /* the forward's checks with grad as its output, then grad_input as data's twin */
  fwd.outputs = b->grad;
  TPU_RETURN_IF_ERROR(mi_seg_setup(&fwd, &b->f));
  const tpu_tensor_t *x = b->f.data, *gi = &call->outputs[0];
  if (b->y->dtype != x->dtype || gi->dtype != x->dtype) return tpu_ku_unsupported_dtype(call, b->y->dtype);
  if (b->y->ndim != b->grad->ndim || gi->ndim != x->ndim)
    return TPU_KU_INVALID(call, "_segment_reduce_backward: output and grad_input ranks");
  for (int32_t d = 0; d < x->ndim; ++d)
    if (b->y->sizes[d] != b->grad->sizes[d] || gi->sizes[d] != x->sizes[d])
      return TPU_KU_INVALID(call, "_segment_reduce_backward: size mismatch at dim %d", (int)d);
  b->f.out = gi;
  return TPU_OK;
}

static tpu_status_t mi_segb_check(const tpu_k_call_t* call) {
  mi_segb_t b;
  return mi_segb_setup(call, &b);
}

static tpu_status_t mi_segb_run(const tpu_k_call_t* call) {
  mi_segb_t b;
  TPU_RETURN_IF_ERROR(mi_segb_setup(call, &b));
  const mi_seg_t* g = &b.f;
  for (int64_t o = 0; o < g->outer; ++o)
    for (int64_t s = 0, prev = 0; s < g->S; ++s) {
      int64_t start, len;
      mi_seg_bounds(g, o, s, &start, &len);
      if (len < 0 || start < 0 || start + len > g->L || start < prev)
        return TPU_KU_INVALID(call, "segment %lld of row %lld, [%lld, %lld), is outside data's %lld elements",
                              (long long)s, (long long)o, (long long)start, (long long)(start + len), (long long)g->L);
      prev = start + len;
    }
  if (tpu_tensor_numel(g->out) == 0) return TPU_OK;
  tpu_parallel_for(call->pool, g->outer, 1, mi_segb_par, &b);
  return TPU_OK;
}

/* ---- _embedding_bag / _embedding_bag_forward_only ------------------------------
 * (weight [V, D], indices [N], offsets, scale_grad_by_freq, mode, sparse,
 * per_sample_weights, include_last_offset, padding_idx) -> (output [B, D],
 * offset2bag, bag_size [B], max_indices), as the CPU: bag b holds indices
 * [offsets[b], offsets[b + 1]) (the last bag runs to N, or with
 * include_last_offset to offsets[B], which PyTorch documents as N: the CPU's
 * paths disagree when it is not); entries equal to padding_idx are skipped. mode 0
 * sums (times per_sample_weights when given), 1 averages over the bag's
 * other entries, 2 takes the max (the first largest; its weight row in
 * max_indices [B, D]); an empty bag is 0. offset2bag (when PyTorch sizes it
 * N) is each entry's bag; bag_size the bag's entries (0 for mode 0);
 * max_indices for modes 0 and 1 repeats bag_size (all in the indices' integer
 * dtype; their sizes are the meta function's). Sums in float (double for
 * float64), the result rounded once. Indices outside [0, V) and offsets
 * that do not start at 0 or decrease are errors. */
typedef struct {
  const tpu_tensor_t *w, *ix, *off, *psw;
  const tpu_tensor_t* out[4];
  int64_t V, D, N, B, pad;
  int mode;
  bool last; /* include_last_offset: offsets[B] ends the last bag */
} mi_eb_t;

static int64_t mi_eb_i(const tpu_tensor_t* t, int64_t i) {
  return tpu_ku_load_i64((const char*)t->data + i * t->strides[0] * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype),
                         t->dtype);
}
static void mi_eb_store_i(const tpu_tensor_t* t, int64_t i, int64_t j, int64_t v) {
  const int64_t off = i * t->strides[0] + (t->ndim > 1 ? j * t->strides[1] : 0);
  tpu_ku_store_i64((char*)t->data + off * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype), t->dtype, v);
}

static void mi_eb_bounds(const mi_eb_t* e, int64_t b, int64_t* s, int64_t* t) {
  *s = mi_eb_i(e->off, b);
  *t = b + 1 < e->B || e->last ? mi_eb_i(e->off, b + 1) : e->N;
}

static void mi_eb_par(void* ctx, int64_t begin, int64_t end) {
  const mi_eb_t* e = (const mi_eb_t*)ctx;
  const tpu_tensor_t *w = e->w, *o = e->out[0];
  const int dt = w->dtype;
  const bool f64 = dt == TPU_DTYPE_F64;
  const int64_t wes = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
  for (int64_t b = begin; b < end; ++b) {
    int64_t s, t, count = 0;
    mi_eb_bounds(e, b, &s, &t);
    for (int64_t k = s; k < t; ++k) count += mi_eb_i(e->ix, k) != e->pad;
    for (int64_t d = 0; d < e->D; ++d) {
      double acc = 0.0;
      int64_t arg = 0;
      bool seen = false;
      for (int64_t k = s; k < t; ++k) {
        const int64_t r = mi_eb_i(e->ix, k);
        if (r == e->pad) continue;
        double v = tpu_ku_load_f64((const char*)w->data + (r * w->strides[0] + d * w->strides[1]) * wes, dt);
        if (e->mode == 2) {
          if (!seen || v > acc) {
            acc = v;
            arg = r;
          }
          seen = true;
          continue;
        }
        if (e->psw) v = f64 ? v * tpu_ku_load_f64((const char*)e->psw->data + k * e->psw->strides[0] * wes, dt)
                            : (double)((float)v * (float)tpu_ku_load_f64((const char*)e->psw->data +
                                                                         k * e->psw->strides[0] * wes, dt));
        acc = f64 ? acc + v : (double)((float)acc + (float)v);
      }
      if (e->mode == 1 && count > 0) acc = f64 ? acc / (double)count : (double)((float)acc / (float)count);
      tpu_ku_store_f64((char*)o->data + (b * o->strides[0] + d * o->strides[1]) * wes, dt, acc);
      if (e->mode == 2 && e->out[3]->ndim == 2) mi_eb_store_i(e->out[3], b, d, arg);
    }
    const int64_t bs = e->mode == 0 ? 0 : count;
    mi_eb_store_i(e->out[2], b, 0, bs);
    if (e->out[3]->ndim == 1 && e->out[3]->sizes[0] == e->B) mi_eb_store_i(e->out[3], b, 0, bs);
    if (e->out[1]->sizes[0] == e->N)
      for (int64_t k = s; k < t; ++k) mi_eb_store_i(e->out[1], k, 0, b);
  }
}

static tpu_status_t mi_eb_setup(const tpu_k_call_t* call, mi_eb_t* e) {
  memset(e, 0, sizeof(*e));
  e->w = tpu_ku_tensor(call, 0);
  e->ix = tpu_ku_tensor(call, 1);
  e->off = tpu_ku_tensor(call, 2);
  e->psw = tpu_ku_is_none(call, 6) ? NULL : tpu_ku_tensor(call, 6);
  if (!e->w || !e->ix || !e->off || call->num_outputs < 4) return TPU_KU_INVALID(call, "expected weight, indices, offsets");
  for (int k = 0; k < 4; ++k) e->out[k] = &call->outputs[k];
  e->mode = (int)tpu_ku_int(call, 4, 0);
  e->pad = tpu_ku_is_none(call, 8) ? -1 : tpu_ku_int(call, 8, -1);
  const bool last = e->last = !tpu_ku_is_none(call, 7) && call->args[7].v.b;
  const tpu_tensor_t *w = e->w, *ix = e->ix, *off = e->off;
  if (w->ndim != 2 || ix->ndim != 1 || off->ndim != 1)
    return TPU_KU_INVALID(call, "expected a 2-D weight and 1-D indices and offsets (got %d-D, %d-D, %d-D)",
                          (int)w->ndim, (int)ix->ndim, (int)off->ndim);
  if (e->mode < 0 || e->mode > 2) return TPU_KU_INVALID(call, "mode has to be one of sum, mean or max (got %d)", e->mode);
  if (!tpu_dtype_is_floating((tpu_dtype_t)w->dtype)) return tpu_ku_unsupported_dtype(call, w->dtype);
  if ((ix->dtype != TPU_DTYPE_I64 && ix->dtype != TPU_DTYPE_I32) || off->dtype != ix->dtype)
    return TPU_KU_INVALID(call, "expected int64 or int32 indices and offsets of one dtype (got %s and %s)",
                          tpu_dtype_name((tpu_dtype_t)ix->dtype), tpu_dtype_name((tpu_dtype_t)off->dtype));
  if (e->psw && (e->mode != 0 || e->psw->ndim != 1 || e->psw->sizes[0] != ix->sizes[0] || e->psw->dtype != w->dtype))
    return TPU_KU_INVALID(call, "per_sample_weights: mode sum only, one weight per index in weight's dtype");
  e->V = w->sizes[0];
  e->D = w->sizes[1];
  e->N = ix->sizes[0];
  e->B = off->sizes[0] - (last ? 1 : 0);
  if (e->B < 0) e->B = 0;
  if (e->pad < 0 && e->pad != -1) e->pad += e->V; /* a negative padding_idx counts from the end */
  const tpu_tensor_t *o = e->out[0], *o2b = e->out[1], *bs = e->out[2], *mi = e->out[3];
  if (o->dtype != w->dtype || o->ndim != 2 || o->sizes[0] != e->B || o->sizes[1] != e->D)
    return TPU_KU_INVALID(call, "output must be [%lld, %lld] of weight's dtype", (long long)e->B, (long long)e->D);
  if (o2b->ndim != 1 || (o2b->sizes[0] != e->N && o2b->sizes[0] != 0) || bs->ndim != 1 ||
      (bs->sizes[0] != e->B && bs->sizes[0] != off->sizes[0]) ||
      mi->ndim < 1 || mi->ndim > 2 || (mi->ndim == 2 && (mi->sizes[0] != e->B || mi->sizes[1] != e->D)) ||
      (mi->ndim == 1 && mi->sizes[0] != e->B && mi->sizes[0] != 0))
    return TPU_KU_INVALID(call, "offset2bag, bag_size or max_indices of unexpected sizes");
  for (int k = 1; k < 4; ++k)
    if (e->out[k]->dtype != TPU_DTYPE_I64 && e->out[k]->dtype != TPU_DTYPE_I32 && tpu_tensor_numel(e->out[k]) > 0)
      return tpu_ku_unsupported_dtype(call, e->out[k]->dtype);
  return TPU_OK;
}

static tpu_status_t mi_eb_check(const tpu_k_call_t* call) {
  mi_eb_t e;
  return mi_eb_setup(call, &e);
}

static tpu_status_t mi_eb_run(const tpu_k_call_t* call) {
  mi_eb_t e;
  TPU_RETURN_IF_ERROR(mi_eb_setup(call, &e));
  for (int64_t k = 0; k < e.N; ++k) {
    const int64_t r = mi_eb_i(e.ix, k);
    if (r < 0 || r >= e.V)
      return TPU_KU_INVALID(call, "index %lld of indices is out of range for %lld embeddings", (long long)r,
                            (long long)e.V);
  }
  for (int64_t b = 0, prev = 0; b < e.B; ++b) {
    int64_t s, t;
    mi_eb_bounds(&e, b, &s, &t);
    if ((b == 0 && s != 0) || s < prev || t < s || t > e.N)
      return TPU_KU_INVALID(call, "offsets must start at 0 and not decrease within %lld indices (bag %lld: [%lld, %lld))",
                            (long long)e.N, (long long)b, (long long)s, (long long)t);
    prev = s;
  }
  for (int64_t b = e.B; b < e.out[2]->sizes[0]; ++b) mi_eb_store_i(e.out[2], b, 0, 0); /* meta: one per offset */
  if (e.B == 0) return TPU_OK;
  tpu_parallel_for(call->pool, e.B, 1 + 4096 / (e.D * (e.N / e.B + 1) + 1), mi_eb_par, &e);
  return TPU_OK;
}

/* _embedding_bag_backward (dense: sparse=False) -> grad_weight [num_weights, D]:
 * each non-padding index k of bag b adds grad[b] (times per_sample_weights[k];
 * mode mean: divided by bag_size[b]; scale_grad_by_freq: by the index's count
 * in the batch) to its row; mode max adds grad[b, d] to row
 * maximum_indices[b, d] of non-empty bags. _embedding_bag_per_sample_weights_backward
 * -> [N]: grad[b] . weight[indices[k]] (0 for padding). An index's bag is the
 * last b with offsets[b] <= k. Sums in float (double for float64). */
typedef struct {
  const tpu_tensor_t *g, *ix, *off, *bs, *mx, *psw, *w;
  const tpu_tensor_t* out;
  int64_t N, B, D, V, pad;
  int mode;
  bool freq, psw_bwd;
} mi_ebb_t;

/* the bag of index k: the last b < B with offsets[b] <= k (-1: none) */
static int64_t mi_ebb_bag(const mi_ebb_t* e, int64_t k) {
  int64_t lo = 0, hi = (e->off->sizes[0] < e->B ? e->off->sizes[0] : e->B) - 1, b = -1;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (mi_eb_i(e->off, mid) <= k) {
      b = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return b;
}

static double mi_ebb_ld(const tpu_tensor_t* t, int64_t i, int64_t j) {
  return tpu_ku_load_f64((const char*)t->data + (i * t->strides[0] + (t->ndim > 1 ? j * t->strides[1] : 0)) *
                                                    (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype),
                         t->dtype);
}

static void mi_ebb_par(void* ctx, int64_t begin, int64_t end) {
  const mi_ebb_t* e = (const mi_ebb_t*)ctx;
  const tpu_tensor_t* o = e->out;
  const int dt = o->dtype;
  const bool f64 = dt == TPU_DTYPE_F64;
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
  if (e->psw_bwd) { /* tasks: indices */
    for (int64_t k = begin; k < end; ++k) {
      const int64_t r = mi_eb_i(e->ix, k), b = mi_ebb_bag(e, k);
      double acc = 0.0;
      if (r != e->pad && b >= 0)
        for (int64_t d = 0; d < e->D; ++d) {
          const double p = mi_ebb_ld(e->g, b, d) * mi_ebb_ld(e->w, r, d);
          acc = f64 ? acc + p : (double)((float)acc + (float)p);
        }
      tpu_ku_store_f64((char*)o->data + k * o->strides[0] * es, dt, acc);
    }
    return;
  }
  for (int64_t d = begin; d < end; ++d) { /* tasks: columns of grad_weight */
    for (int64_t v = 0; v < e->V; ++v) tpu_ku_store_f64((char*)o->data + (v * o->strides[0] + d * o->strides[1]) * es, dt, 0.0);
    if (e->mode == 2) {
      for (int64_t b = 0; b < e->B; ++b) {
        if (mi_eb_i(e->bs, b) == 0) continue;
        const int64_t r = (int64_t)mi_ebb_ld(e->mx, b, d);
        if (r < 0 || r >= e->V) continue;
        char* p = (char*)o->data + (r * o->strides[0] + d * o->strides[1]) * es;
        const double s = tpu_ku_load_f64(p, dt) + mi_ebb_ld(e->g, b, d);
        tpu_ku_store_f64(p, dt, f64 ? s : (double)(float)s);
      }
      continue;
    }
    for (int64_t k = 0; k < e->N; ++k) {
      const int64_t r = mi_eb_i(e->ix, k), b = mi_ebb_bag(e, k);
      if (r == e->pad || b < 0) continue;
      double v = mi_ebb_ld(e->g, b, d);
      if (e->psw) v = f64 ? v * mi_ebb_ld(e->psw, k, 0) : (double)((float)v * (float)mi_ebb_ld(e->psw, k, 0));
      if (e->mode == 1) {
        const int64_t n = mi_eb_i(e->bs, b);
        if (n > 0) v = f64 ? v / (double)n : (double)((float)v / (float)n);
      }
      if (e->freq) {
        int64_t c = 0;
        for (int64_t q = 0; q < e->N; ++q) c += mi_eb_i(e->ix, q) == r;
        v = f64 ? v / (double)c : (double)((float)v / (float)c);
      }
      char* p = (char*)o->data + (r * o->strides[0] + d * o->strides[1]) * es;
      const double s = tpu_ku_load_f64(p, dt) + v;
      tpu_ku_store_f64(p, dt, f64 ? s : (double)(float)s);
    }
  }
}

static tpu_status_t mi_ebb_setup(const tpu_k_call_t* call, mi_ebb_t* e) {
  memset(e, 0, sizeof(*e));
  e->psw_bwd = strstr(call->op, "per_sample_weights") != NULL;
  e->g = tpu_ku_tensor(call, 0);
  if (e->psw_bwd) {
    e->w = tpu_ku_tensor(call, 1);
    e->ix = tpu_ku_tensor(call, 2);
    e->off = tpu_ku_tensor(call, 3);
    e->mode = (int)tpu_ku_int(call, 5, 0);
    e->pad = tpu_ku_int(call, 6, -1);
    if (!e->w) return TPU_KU_INVALID(call, "expected weight");
    if (e->mode != 0) return TPU_KU_INVALID(call, "per_sample_weights are only supported for mode sum");
  } else {
    e->ix = tpu_ku_tensor(call, 1);
    e->off = tpu_ku_tensor(call, 2);
    e->bs = tpu_ku_tensor(call, 4);
    e->mx = tpu_ku_tensor(call, 5);
    e->V = tpu_ku_int(call, 6, 0);
    e->freq = !tpu_ku_is_none(call, 7) && call->args[7].v.b;
    e->mode = (int)tpu_ku_int(call, 8, 0);
    if (!tpu_ku_is_none(call, 9) && call->args[9].v.b)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: sparse gradients are not supported on tpu", call->op);
    e->psw = tpu_ku_is_none(call, 10) ? NULL : tpu_ku_tensor(call, 10);
    e->pad = tpu_ku_int(call, 11, -1);
    if (!e->bs || !e->mx) return TPU_KU_INVALID(call, "expected bag_size and maximum_indices");
  }
  if (!e->g || !e->ix || !e->off || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  e->out = &call->outputs[0];
  const tpu_tensor_t *g = e->g, *o = e->out;
  if (g->ndim != 2 || e->ix->ndim != 1 || e->off->ndim != 1)
    return TPU_KU_INVALID(call, "expected a 2-D grad and 1-D indices and offsets");
  if (!tpu_dtype_is_floating((tpu_dtype_t)g->dtype) || o->dtype != g->dtype)
    return tpu_ku_unsupported_dtype(call, g->dtype);
  if ((e->ix->dtype != TPU_DTYPE_I64 && e->ix->dtype != TPU_DTYPE_I32) || e->off->dtype != e->ix->dtype)
    return tpu_ku_unsupported_dtype(call, e->ix->dtype);
  e->N = e->ix->sizes[0];
  e->B = g->sizes[0];
  e->D = g->sizes[1];
  if (e->psw_bwd) {
    e->V = e->w->sizes[0];
    if (e->w->ndim != 2 || e->w->sizes[1] != e->D || e->w->dtype != g->dtype || o->ndim != 1 || o->sizes[0] != e->N)
      return TPU_KU_INVALID(call, "weight must be [V, %lld] and the output [%lld]", (long long)e->D, (long long)e->N);
  } else {
    if (o->ndim != 2 || o->sizes[0] != e->V || o->sizes[1] != e->D)
      return TPU_KU_INVALID(call, "grad_weight must be [%lld, %lld]", (long long)e->V, (long long)e->D);
    if (e->bs->ndim != 1 || e->bs->sizes[0] < e->B || (e->bs->dtype != TPU_DTYPE_I64 && e->bs->dtype != TPU_DTYPE_I32))
      return TPU_KU_INVALID(call, "bag_size must hold one integer per bag");
    if (e->mode == 2 && (e->mx->ndim != 2 || e->mx->sizes[0] < e->B || e->mx->sizes[1] != e->D))
      return TPU_KU_INVALID(call, "maximum_indices must be [%lld, %lld] for mode max", (long long)e->B,
                            (long long)e->D);
    if (e->psw && (e->psw->ndim != 1 || e->psw->sizes[0] != e->N || e->psw->dtype != g->dtype))
      return TPU_KU_INVALID(call, "per_sample_weights must be [%lld] of grad's dtype", (long long)e->N);
  }
  if (e->pad < 0 && e->pad != -1) e->pad += e->V;
  return TPU_OK;
}

static tpu_status_t mi_ebb_check(const tpu_k_call_t* call) {
  mi_ebb_t e;
  return mi_ebb_setup(call, &e);
}

static tpu_status_t mi_ebb_run(const tpu_k_call_t* call) {
  mi_ebb_t e;
  TPU_RETURN_IF_ERROR(mi_ebb_setup(call, &e));
  for (int64_t k = 0; k < e.N; ++k) {
    const int64_t r = mi_eb_i(e.ix, k);
    if (r < 0 || r >= e.V)
      return TPU_KU_INVALID(call, "index %lld is out of range for %lld embeddings", (long long)r, (long long)e.V);
  }
  if (tpu_tensor_numel(e.out) == 0) return TPU_OK;
  if (e.psw_bwd) tpu_parallel_for(call->pool, e.N, 1 + 4096 / (e.D + 1), mi_ebb_par, &e);
  else tpu_parallel_for(call->pool, e.D, 1, mi_ebb_par, &e);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_misc_entries[] = {
    {"aten::histc", mi_histc_run, mi_histc_check, 0, NULL},
    {"aten::segment_reduce", mi_seg_run, mi_seg_check, 0, NULL},
    {"aten::_embedding_bag", mi_eb_run, mi_eb_check, 0, NULL},
    {"aten::_embedding_bag.out", mi_eb_run, mi_eb_check, 0, NULL},
    {"aten::_embedding_bag_forward_only", mi_eb_run, mi_eb_check, 0, NULL},
    {"aten::_embedding_bag_forward_only.out", mi_eb_run, mi_eb_check, 0, NULL},
    {"aten::_embedding_bag_backward", mi_ebb_run, mi_ebb_check, 0, NULL},
    {"aten::_embedding_bag_per_sample_weights_backward", mi_ebb_run, mi_ebb_check, 0, NULL},
    {"aten::_embedding_bag_per_sample_weights_backward.out", mi_ebb_run, mi_ebb_check, 0, NULL},
    {"aten::segment_reduce.out", mi_seg_run, mi_seg_check, 0, NULL},
    {"aten::_segment_reduce_backward", mi_segb_run, mi_segb_check, 0, NULL},
    {"aten::_segment_reduce_backward.out", mi_segb_run, mi_segb_check, 0, NULL},
    {"aten::_cdist_forward", mi_dist_run, mi_dist_check, 0, NULL},
    {"aten::_cdist_forward.out", mi_dist_run, mi_dist_check, 0, NULL},
    {"aten::_pdist_forward", mi_dist_run, mi_dist_check, 0, NULL},
    {"aten::_pdist_forward.out", mi_dist_run, mi_dist_check, 0, NULL},
    {"aten::_cdist_backward", mi_distb_run, mi_distb_check, 0, NULL},
    {"aten::_cdist_backward.out", mi_distb_run, mi_distb_check, 0, NULL},
    {"aten::_pdist_backward", mi_distb_run, mi_distb_check, 0, NULL},
    {"aten::_pdist_backward.out", mi_distb_run, mi_distb_check, 0, NULL},
    {"aten::histc.out", mi_histc_run, mi_histc_check, 0, NULL},
    {"aten::eye.out", mi_eye_run, mi_eye_check, 0, NULL},
    {"aten::eye.m_out", mi_eye_run, mi_eye_check, 0, NULL},
    {"aten::erfinv", mi_un_run, mi_un_check, 0, NULL},
    {"aten::erfinv.out", mi_un_run, mi_un_check, 0, NULL},
    {"aten::erfinv_", mi_un_run, mi_un_check, 0, NULL},
    {"aten::log_sigmoid_forward", mi_un_run, mi_un_check, 0, NULL},
    {"aten::log_sigmoid_forward.output", mi_un_run, mi_un_check, 0, NULL},
    {"aten::log_sigmoid_backward", mi_un_run, mi_un_check, 0, NULL},
    {"aten::log_sigmoid_backward.grad_input", mi_un_run, mi_un_check, 0, NULL},
};
const size_t tpu_k_misc_count = sizeof(tpu_k_misc_entries) / sizeof(tpu_k_misc_entries[0]);
