/* test_k_reduce.c - reductions, scans, medians, softmax and norms against naive loops. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { return tku_urand(&g_rng); } /* [-1, 1) */

/* perm: memory order of dims, outermost first (NULL: row-major). */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  return tku_alloc(dtype, ndim, sizes, perm, 1, 16);
}
static void fill(tt_t* x, double scale, bool ints) { tku_fill(x, &g_rng, scale, ints); }


/* ---- reference reduction ------------------------------------------------------ */

enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, R_ANY, R_ALL, R_VAR, R_STD, R_NORM, R_LSE };

/* Output shape of reducing `in` over mask (keepdim or not). */
static int red_shape(const tpu_tensor_t* in, unsigned mask, bool keep, int64_t* sizes) {
  int nd = 0;
  for (int d = 0; d < in->ndim; ++d) {
    if ((mask >> d) & 1u) {
      if (keep) sizes[nd++] = 1;
    } else {
      sizes[nd++] = in->sizes[d];
    }
  }
  return nd;
}

/* Reference values per output (keepdim layout, row-major), length = outer numel. */
static double* ref_reduce(const tpu_tensor_t* in, unsigned mask, int kind, double p, double corr) {
  int64_t osz[TPU_MAX_DIMS];
  int ond = red_shape(in, mask, true, osz);
  int64_t on = 1;
  for (int d = 0; d < ond; ++d) on *= osz[d];
  int64_t n = tpu_tensor_numel(in);
  int64_t rn = on ? (n / (on ? on : 1)) : 0;
  if (on == 0) return calloc(1, sizeof(double));
  rn = 1;
  for (int d = 0; d < in->ndim; ++d)
    if ((mask >> d) & 1u) rn *= in->sizes[d];
  double* acc = calloc((size_t)on, sizeof(double));
  double* acc2 = calloc((size_t)on, sizeof(double));
  double* best = calloc((size_t)on, sizeof(double));
  int64_t* cnt = calloc((size_t)on, sizeof(int64_t));
  for (int64_t o = 0; o < on; ++o) {
    acc[o] = kind == R_PROD || kind == R_ALL ? 1 : 0;
    best[o] = kind == R_LSE ? -INFINITY : 0;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t idx[TPU_MAX_DIMS];
      unravel(in, i, idx);
      int64_t o = 0, r = 0;
      for (int d = 0; d < in->ndim; ++d) {
        if ((mask >> d) & 1u) r = r * in->sizes[d] + idx[d];
        else o = o * in->sizes[d] + idx[d];
      }
      double x = get(in, idx);
      if (pass == 0) {
        switch (kind) {
          case R_SUM: case R_MEAN: case R_VAR: case R_STD: acc[o] += x; break;
          case R_PROD: acc[o] *= x; break;
          case R_ANY: acc[o] = acc[o] || x != 0; break;
          case R_ALL: acc[o] = acc[o] && x != 0; break;
          case R_NORM:
            if (isinf(p)) {
              if (cnt[o] == 0 || (p > 0 ? fabs(x) > acc[o] : fabs(x) < acc[o])) acc[o] = fabs(x);
            } else if (p == 0) {
              acc[o] += x != 0;
            } else {
              acc[o] += pow(fabs(x), p);
            }
            break;
          case R_LSE: if (x > best[o]) best[o] = x; break;
          default: {
            bool mx = kind == R_MAX || kind == R_ARGMAX;
            if (isnan(best[o]) && cnt[o]) break;
            if (cnt[o] == 0 || isnan(x) || (mx ? x > best[o] : x < best[o])) {
              best[o] = x;
              acc[o] = (double)r;
            }
          }
        }
        cnt[o]++;
      } else {
        if (kind == R_VAR || kind == R_STD) {
          double mu = acc[o] / (double)rn;
          acc2[o] += (x - mu) * (x - mu);
        }
        if (kind == R_LSE) acc2[o] += exp(x - (isinf(best[o]) ? 0 : best[o]));
      }
    }
  }
  for (int64_t o = 0; o < on; ++o) {
    switch (kind) {
      case R_MEAN: acc[o] /= (double)rn; break;
      case R_MAX: case R_MIN: acc[o] = best[o]; break;
      case R_VAR: case R_STD: {
        double div = rn - corr;
        acc[o] = acc2[o] / (div > 0 ? div : 0);
        if (kind == R_STD) acc[o] = sqrt(acc[o]);
        break;
      }
      case R_NORM:
        if (!isinf(p) && p != 0) acc[o] = pow(acc[o], 1.0 / p);
        break;
      case R_LSE: acc[o] = log(acc2[o]) + (isinf(best[o]) ? 0 : best[o]); break;
      default: break;
    }
  }
  free(acc2);
  free(best);
  free(cnt);
  return acc;
}

static double cmp_out(const tpu_tensor_t* out, const double* ref, double rtol) {
  int64_t n = tpu_tensor_numel(out);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double g = getf(out, i), r = ref[i];
    if (isnan(r) && isnan(g)) continue;
    if (isinf(r) && g == r) continue;
    double e = fabs(g - r) / (fabs(r) + 1.0);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  (void)rtol;
  return worst;
}

static unsigned mask_of(const int64_t* dims, int nd, int ndim) {
  unsigned m = 0;
  if (nd == 0) return (1u << ndim) - 1u;
  for (int i = 0; i < nd; ++i) m |= 1u << (dims[i] < 0 ? dims[i] + ndim : dims[i]);
  return m;
}

/* sum.dim_IntList / mean.dim / amax / ... over `dims` */
static void test_dimlist(const char* op, int kind, int dt, int odt, int ndim, const int64_t* sizes, const int* perm,
                         const int64_t* dims, int ndims, bool keep, double tol) {
  tt_t in = mk(dt, ndim, sizes, perm);
  fill(&in, 2.0, !tpu_dtype_is_floating(dt));
  unsigned mask = mask_of(dims, ndims, ndim);
  int64_t osz[TPU_MAX_DIMS];
  int ond = red_shape(&in.t, mask, keep, osz);
  tt_t out = mk(odt, ond, osz, NULL);
  tpu_k_value_t args[4] = {vt(&in.t), vints(dims, ndims), vb(keep), vn()};
  int nargs = 4;
  if (kind == R_MAX || kind == R_MIN) nargs = 3;
  bool s = ok(call_op(op, nargs, args, 1, &out.t));
  double* ref = ref_reduce(&in.t, mask, kind, 0, 0);
  double err = cmp_out(&out.t, ref, tol);
  CHECKF(s && err <= tol, "%s %s ndim=%d ndims=%d keep=%d perm=%d err=%g", op, tpu_dtype_name(dt), ndim, ndims,
         keep, perm != NULL, err);
  free(ref);
  fr(&in);
  fr(&out);
}

static void test_sums(void) {
  int64_t s3[3] = {4, 5, 6};
  int p3[3] = {2, 0, 1};
  int64_t d0[1] = {0}, d1[1] = {-1}, d02[2] = {0, 2}, d12[2] = {1, -3};
  for (int k = 0; k < 2; ++k) {
    bool keep = k;
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, NULL, d0, 1, keep, 1e-6);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, NULL, d1, 1, keep, 1e-6);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, p3, d02, 2, keep, 1e-6);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, p3, d12, 2, keep, 1e-6);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, p3, NULL, 0, keep, 1e-6);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_BF16, TPU_DTYPE_BF16, 3, s3, NULL, d1, 1, keep, 8e-3);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_I32, TPU_DTYPE_I64, 3, s3, p3, d02, 2, keep, 0);
    test_dimlist("aten::sum.dim_IntList", R_SUM, TPU_DTYPE_F64, TPU_DTYPE_F64, 3, s3, NULL, d0, 1, keep, 1e-14);
    test_dimlist("aten::mean.dim", R_MEAN, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, p3, d12, 2, keep, 1e-6);
    test_dimlist("aten::mean.dim", R_MEAN, TPU_DTYPE_F16, TPU_DTYPE_F16, 3, s3, NULL, d0, 1, keep, 1e-3);
    test_dimlist("aten::amax", R_MAX, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, p3, d02, 2, keep, 0);
    test_dimlist("aten::amax", R_MAX, TPU_DTYPE_F32, TPU_DTYPE_F32, 3, s3, NULL, d0, 1, keep, 0);
    test_dimlist("aten::amin", R_MIN, TPU_DTYPE_I64, TPU_DTYPE_I64, 3, s3, NULL, d0, 1, keep, 0);
    test_dimlist("aten::amin", R_MIN, TPU_DTYPE_BF16, TPU_DTYPE_BF16, 3, s3, p3, NULL, 0, keep, 0);
  }
  /* Large sum: float accumulation must stay accurate. */
  int64_t big[1] = {1000003};
  tt_t x = mk(TPU_DTYPE_F32, 1, big, NULL);
  double ref = 0;
  for (int64_t i = 0; i < big[0]; ++i) {
    float v = (float)(0.1 + 0.5 * urand());
    ((float*)x.buf)[i] = v;
    ref += v;
  }
  tt_t o = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  tpu_k_value_t args[2] = {vt(&x.t), vn()};
  bool s = ok(call_op("aten::sum", 2, args, 1, &o.t));
  float got = *(float*)o.buf;
  CHECKF(s && fabs(got - ref) / ref < 1e-6, "big sum %.9g vs %.9g", got, ref);
  /* same through mean.dim over a strided 2-D view (lanes / rows paths) */
  int64_t s2[2] = {1000, 1000};
  x.t.ndim = 2;
  x.t.sizes[0] = 1000; x.t.sizes[1] = 1000; x.t.strides[0] = 1000; x.t.strides[1] = 1;
  tt_t o2 = mk(TPU_DTYPE_F32, 1, s2, NULL);
  for (int d = 0; d < 2; ++d) {
    int64_t dd[1] = {d};
    tpu_k_value_t a2[4] = {vt(&x.t), vints(dd, 1), vb(false), vn()};
    s = ok(call_op("aten::sum.dim_IntList", 4, a2, 1, &o2.t));
    double worst = 0;
    for (int64_t j = 0; j < 1000; ++j) {
      double r = 0;
      for (int64_t i = 0; i < 1000; ++i) r += ((float*)x.buf)[d == 0 ? i * 1000 + j : j * 1000 + i];
      double e = fabs(((float*)o2.buf)[j] - r) / fabs(r);
      if (e > worst) worst = e;
    }
    CHECKF(s && worst < 1e-6, "sum dim %d err %g", d, worst);
  }
  fr(&x); fr(&o); fr(&o2);
}

static void test_scalar_reductions(void) {
  int64_t s2[2] = {3, 5};
  int p2[2] = {1, 0};
  tt_t in = mk(TPU_DTYPE_F32, 2, s2, p2);
  fill(&in, 3.0, false);
  tt_t o = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  tt_t oi = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  tpu_k_value_t a1[1] = {vt(&in.t)};
  struct { const char* op; int kind; } cases[] = {{"aten::max", R_MAX}, {"aten::min", R_MIN}};
  for (int i = 0; i < 2; ++i) {
    bool s = ok(call_op(cases[i].op, 1, a1, 1, &o.t));
    double* r = ref_reduce(&in.t, 3u, cases[i].kind, 0, 0);
    CHECKF(s && *(float*)o.buf == (float)r[0], "%s", cases[i].op);
    free(r);
  }
  tpu_k_value_t a2[2] = {vt(&in.t), vn()};
  bool s = ok(call_op("aten::prod", 2, a2, 1, &o.t));
  double* r = ref_reduce(&in.t, 3u, R_PROD, 0, 0);
  CHECKF(s && fabs(*(float*)o.buf - r[0]) <= 1e-5 * fabs(r[0]), "prod %g vs %g", *(float*)o.buf, r[0]);
  free(r);
  tpu_k_value_t a3[3] = {vt(&in.t), vn(), vb(false)};
  s = ok(call_op("aten::argmax", 3, a3, 1, &oi.t));
  r = ref_reduce(&in.t, 3u, R_ARGMAX, 0, 0);
  CHECKF(s && *(int64_t*)oi.buf == (int64_t)r[0], "argmax %lld vs %g", (long long)*(int64_t*)oi.buf, r[0]);
  free(r);
  s = ok(call_op("aten::argmin", 3, a3, 1, &oi.t));
  r = ref_reduce(&in.t, 3u, R_ARGMIN, 0, 0);
  CHECKF(s && *(int64_t*)oi.buf == (int64_t)r[0], "argmin %lld vs %g", (long long)*(int64_t*)oi.buf, r[0]);
  free(r);
  /* NaN handling and first-occurrence ties */
  float v[6] = {1, 5, NAN, 5, NAN, 2};
  int64_t s6[1] = {6};
  tt_t nv = mk(TPU_DTYPE_F32, 1, s6, NULL);
  memcpy(nv.buf, v, sizeof(v));
  tpu_k_value_t an[3] = {vt(&nv.t), vi(0), vb(false)};
  tpu_tensor_t vo[2] = {o.t, oi.t};
  s = ok(call_op("aten::max.dim", 3, an, 2, vo));
  CHECKF(s && isnan(*(float*)o.buf) && *(int64_t*)oi.buf == 2, "max.dim NaN -> idx %lld", (long long)*(int64_t*)oi.buf);
  v[2] = v[4] = 0;
  memcpy(nv.buf, v, sizeof(v));
  s = ok(call_op("aten::max.dim", 3, an, 2, vo));
  CHECKF(s && *(float*)o.buf == 5 && *(int64_t*)oi.buf == 1, "max.dim tie -> idx %lld", (long long)*(int64_t*)oi.buf);
  s = ok(call_op("aten::min.dim", 3, an, 2, vo));
  CHECKF(s && *(float*)o.buf == 0 && *(int64_t*)oi.buf == 2, "min.dim tie -> idx %lld", (long long)*(int64_t*)oi.buf);
  fr(&in); fr(&o); fr(&oi); fr(&nv);
}

static void test_maxdim_strided(void) {
  int64_t s3[3] = {3, 40, 7};
  int p3[3] = {1, 2, 0};
  tt_t in = mk(TPU_DTYPE_F32, 3, s3, p3);
  fill(&in, 1.0, false);
  for (int dim = -3; dim < 3; ++dim) {
    int d = dim < 0 ? dim + 3 : dim;
    int64_t osz[3];
    int ond = red_shape(&in.t, 1u << d, dim & 1, osz);
    tt_t ov = mk(TPU_DTYPE_F32, ond, osz, NULL), oi = mk(TPU_DTYPE_I64, ond, osz, NULL);
    tpu_k_value_t a[3] = {vt(&in.t), vi(dim), vb(dim & 1)};
    tpu_tensor_t outs[2] = {ov.t, oi.t};
    bool s = ok(call_op("aten::min.dim", 3, a, 2, outs));
    double* rv = ref_reduce(&in.t, 1u << d, R_MIN, 0, 0);
    double* ri = ref_reduce(&in.t, 1u << d, R_ARGMIN, 0, 0);
    double e1 = cmp_out(&ov.t, rv, 0), e2 = cmp_out(&oi.t, ri, 0);
    CHECKF(s && e1 == 0 && e2 == 0, "min.dim dim=%d %g %g", dim, e1, e2);
    tt_t oa = mk(TPU_DTYPE_I64, ond, osz, NULL);
    tpu_k_value_t a2[3] = {vt(&in.t), vi(dim), vb(dim & 1)};
    s = ok(call_op("aten::argmin", 3, a2, 1, &oa.t));
    CHECKF(s && cmp_out(&oa.t, ri, 0) == 0, "argmin dim=%d", dim);
    free(rv); free(ri);
    fr(&ov); fr(&oi); fr(&oa);
  }
  fr(&in);
}

static void test_any_all(void) {
  int64_t s2[2] = {6, 70};
  tt_t in = mk(TPU_DTYPE_BOOL, 2, s2, NULL);
  for (int64_t i = 0; i < 6 * 70; ++i) ((uint8_t*)in.buf)[i] = (i % 70) < (i / 70) * 10 ? 1 : 0;
  for (int64_t i = 0; i < 70; ++i) ((uint8_t*)in.buf)[5 * 70 + i] = 1;
  for (int k = 0; k < 2; ++k) {
    const char* op = k ? "aten::all.dim" : "aten::any.dim";
    for (int dim = 0; dim < 2; ++dim) {
      int64_t osz[2];
      int ond = red_shape(&in.t, 1u << dim, false, osz);
      tt_t o = mk(TPU_DTYPE_BOOL, ond, osz, NULL);
      tpu_k_value_t a[3] = {vt(&in.t), vi(dim), vb(false)};
      bool s = ok(call_op(op, 3, a, 1, &o.t));
      double* r = ref_reduce(&in.t, 1u << dim, k ? R_ALL : R_ANY, 0, 0);
      CHECKF(s && cmp_out(&o.t, r, 0) == 0, "%s dim %d", op, dim);
      free(r);
      fr(&o);
    }
  }
  /* any.dims with [] reduces nothing; with None everything */
  tt_t o = mk(TPU_DTYPE_BOOL, 2, s2, NULL);
  tpu_k_value_t a[3] = {vt(&in.t), vints(NULL, 0), vb(false)};
  bool s = ok(call_op("aten::any.dims", 3, a, 1, &o.t));
  CHECKF(s && memcmp(o.buf, in.buf, 6 * 70) == 0, "any.dims []");
  tt_t o0 = mk(TPU_DTYPE_BOOL, 0, NULL, NULL);
  tpu_k_value_t an[3] = {vt(&in.t), vn(), vb(false)};
  s = ok(call_op("aten::all.dims", 3, an, 1, &o0.t));
  CHECKF(s && *(uint8_t*)o0.buf == 0, "all.dims None");
  tt_t fl = mk(TPU_DTYPE_F32, 2, s2, NULL);
  for (int64_t i = 0; i < 6 * 70; ++i) ((float*)fl.buf)[i] = i == 77 ? NAN : 1.0f;
  tpu_k_value_t af[1] = {vt(&fl.t)};
  s = ok(call_op("aten::all", 1, af, 1, &o0.t));
  CHECKF(s && *(uint8_t*)o0.buf == 1, "all() with NaN is true");
  fr(&in); fr(&o); fr(&o0); fr(&fl);
}

static void test_var_norm_lse(void) {
  int64_t s3[3] = {5, 33, 4};
  int p3[3] = {2, 1, 0};
  int64_t d1[1] = {1}, d02[2] = {0, 2};
  tt_t in = mk(TPU_DTYPE_F32, 3, s3, p3);
  fill(&in, 3.0, false);
  for (int c = 0; c < 3; ++c) {
    double corr = c;
    for (int k = 0; k < 2; ++k) {
      const int64_t* dims = k ? d02 : d1;
      int nd = k ? 2 : 1;
      unsigned mask = mask_of(dims, nd, 3);
      int64_t osz[3];
      int ond = red_shape(&in.t, mask, k, osz);
      tt_t o = mk(TPU_DTYPE_F32, ond, osz, NULL), o2 = mk(TPU_DTYPE_F32, ond, osz, NULL);
      tpu_k_value_t a[4] = {vt(&in.t), vints(dims, nd), c == 1 ? vn() : vd(corr), vb(k)};
      bool s = ok(call_op("aten::var.correction", 4, a, 1, &o.t));
      double* r = ref_reduce(&in.t, mask, R_VAR, 0, corr);
      double e = cmp_out(&o.t, r, 0);
      CHECKF(s && e < 1e-5, "var corr=%g k=%d err=%g", corr, k, e);
      free(r);
      s = ok(call_op("aten::std.correction", 4, a, 1, &o.t));
      r = ref_reduce(&in.t, mask, R_STD, 0, corr);
      e = cmp_out(&o.t, r, 0);
      CHECKF(s && e < 1e-5, "std corr=%g k=%d err=%g", corr, k, e);
      free(r);
      tpu_tensor_t vm[2] = {o.t, o2.t};
      s = ok(call_op("aten::var_mean.correction", 4, a, 2, vm));
      r = ref_reduce(&in.t, mask, R_MEAN, 0, 0);
      e = cmp_out(&o2.t, r, 0);
      CHECKF(s && e < 1e-5, "var_mean mean err=%g", e);
      free(r);
      fr(&o); fr(&o2);
    }
  }
  double ords[6] = {2, 1, 0, 3, INFINITY, -INFINITY};
  for (int i = 0; i < 6; ++i) {
    unsigned mask = mask_of(d02, 2, 3);
    int64_t osz[3];
    int ond = red_shape(&in.t, mask, false, osz);
    tt_t o = mk(TPU_DTYPE_F32, ond, osz, NULL);
    tpu_k_value_t a[5] = {vt(&in.t), vd(ords[i]), vints(d02, 2), vb(false), vn()};
    bool s = ok(call_op("aten::linalg_vector_norm", 5, a, 1, &o.t));
    double* r = ref_reduce(&in.t, mask, R_NORM, ords[i], 0);
    double e = cmp_out(&o.t, r, 0);
    CHECKF(s && e < 1e-5, "norm ord=%g err=%g", ords[i], e);
    free(r);
    fr(&o);
  }
  /* full norm (split path) */
  int64_t big[1] = {300000};
  tt_t x = mk(TPU_DTYPE_BF16, 1, big, NULL);
  fill(&x, 1.0, false);
  tt_t o = mk(TPU_DTYPE_BF16, 0, NULL, NULL);
  tpu_k_value_t a[5] = {vt(&x.t), vi(2), vn(), vb(false), vn()};
  bool s = ok(call_op("aten::linalg_vector_norm", 5, a, 1, &o.t));
  double* r = ref_reduce(&x.t, 1u, R_NORM, 2, 0);
  CHECKF(s && cmp_out(&o.t, r, 0) < 8e-3, "big bf16 norm %g vs %g", getf(&o.t, 0), r[0]);
  free(r);
  fr(&x); fr(&o);
  /* logsumexp with -inf and +inf rows */
  int64_t s2[2] = {4, 9};
  tt_t l = mk(TPU_DTYPE_F32, 2, s2, NULL);
  fill(&l, 10.0, false);
  for (int j = 0; j < 9; ++j) ((float*)l.buf)[9 + j] = -INFINITY;
  ((float*)l.buf)[20] = INFINITY;
  int64_t s4[1] = {4}, dl[1] = {-1};
  tt_t lo = mk(TPU_DTYPE_F32, 1, s4, NULL);
  tpu_k_value_t al[3] = {vt(&l.t), vints(dl, 1), vb(false)};
  s = ok(call_op("aten::logsumexp", 3, al, 1, &lo.t));
  r = ref_reduce(&l.t, 2u, R_LSE, 0, 0);
  double e = cmp_out(&lo.t, r, 0);
  CHECKF(s && e < 1e-6 && isinf(((float*)lo.buf)[1]) && ((float*)lo.buf)[1] < 0 &&
             isinf(((float*)lo.buf)[2]) && ((float*)lo.buf)[2] > 0,
         "logsumexp err=%g [%g %g %g %g]", e, ((float*)lo.buf)[0], ((float*)lo.buf)[1], ((float*)lo.buf)[2],
         ((float*)lo.buf)[3]);
  free(r);
  fr(&in); fr(&l); fr(&lo);
}

static void test_empty(void) {
  int64_t s2[2] = {0, 3}, s1[1] = {3}, d0[1] = {0};
  tt_t in = mk(TPU_DTYPE_F32, 2, s2, NULL);
  in.t.data = NULL;
  tt_t o = mk(TPU_DTYPE_F32, 1, s1, NULL);
  tpu_k_value_t a[4] = {vt(&in.t), vints(d0, 1), vb(false), vn()};
  bool s = ok(call_op("aten::sum.dim_IntList", 4, a, 1, &o.t));
  CHECKF(s && ((float*)o.buf)[0] == 0 && ((float*)o.buf)[2] == 0, "sum over empty dim");
  tpu_k_value_t ap[4] = {vt(&in.t), vi(0), vb(false), vn()};
  ((float*)o.buf)[1] = 7;
  s = ok(call_op("aten::prod.dim_int", 4, ap, 1, &o.t));
  CHECKF(s && ((float*)o.buf)[1] == 1, "prod over empty dim");
  s = ok(call_op("aten::mean.dim", 4, a, 1, &o.t));
  CHECKF(s && isnan(((float*)o.buf)[1]), "mean over empty dim is nan");
  CHECK_STATUS(call_op("aten::amax", 3, a, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT,
               "amax(): Expected reduction dim 0 to have non-zero size.");
  tt_t o0 = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  tpu_k_value_t a1[1] = {vt(&in.t)};
  CHECK_STATUS(call_op("aten::max", 1, a1, 1, &o0.t), TPU_STATUS_INVALID_ARGUMENT,
               "max(): Expected reduction dim to be specified for input.numel() == 0");
  tt_t oi = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  tpu_k_value_t a3[3] = {vt(&in.t), vn(), vb(false)};
  CHECK_STATUS(call_op("aten::argmax", 3, a3, 1, &oi.t), TPU_STATUS_INVALID_ARGUMENT, "argmax()");
  /* sum of empty with no dims -> 0; amax over the non-empty dim -> empty output, fine */
  tpu_k_value_t as[2] = {vt(&in.t), vn()};
  *(float*)o0.buf = 5;
  s = ok(call_op("aten::sum", 2, as, 1, &o0.t));
  CHECKF(s && *(float*)o0.buf == 0, "sum of empty");
  int64_t s0[1] = {0}, d1[1] = {1};
  tt_t oe = mk(TPU_DTYPE_F32, 1, s0, NULL);
  oe.t.data = NULL;
  tpu_k_value_t am[3] = {vt(&in.t), vints(d1, 1), vb(false)};
  CHECK_OK(call_op("aten::amax", 3, am, 1, &oe.t));
  /* 0-dim input */
  tt_t z = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  *(float*)z.buf = 4.5f;
  tpu_k_value_t az[4] = {vt(&z.t), vints(NULL, 0), vb(false), vn()};
  s = ok(call_op("aten::sum.dim_IntList", 4, az, 1, &o0.t));
  CHECKF(s && *(float*)o0.buf == 4.5f, "sum of 0-dim");
  tpu_k_value_t azd[3] = {vt(&z.t), vi(-1), vb(true)};
  tpu_tensor_t vo[2] = {o0.t, oi.t};
  s = ok(call_op("aten::max.dim", 3, azd, 2, vo));
  CHECKF(s && *(float*)o0.buf == 4.5f && *(int64_t*)oi.buf == 0, "max.dim of 0-dim");
  /* errors: bad dim, duplicate dim, unsupported dtype */
  int64_t bad[1] = {2}, dup[2] = {0, -2};
  tpu_k_value_t ab[4] = {vt(&in.t), vints(bad, 1), vb(false), vn()};
  CHECK_STATUS(call_op("aten::sum.dim_IntList", 4, ab, 1, &o.t), TPU_STATUS_OUT_OF_RANGE, "Dimension out of range");
  tpu_k_value_t ad[4] = {vt(&in.t), vints(dup, 2), vb(false), vn()};
  CHECK_STATUS(call_op("aten::sum.dim_IntList", 4, ad, 1, &o0.t), TPU_STATUS_INVALID_ARGUMENT, "multiple times");
  tt_t bi = mk(TPU_DTYPE_I32, 1, s1, NULL);
  tt_t bo = mk(TPU_DTYPE_I32, 0, NULL, NULL);
  tpu_k_value_t av[4] = {vt(&bi.t), vn(), vn(), vb(false)};
  CHECK_STATUS(call_op("aten::var.correction", 4, av, 1, &bo.t), TPU_STATUS_UNIMPLEMENTED, "int32");
  fr(&in); fr(&o); fr(&o0); fr(&oi); fr(&oe); fr(&z); fr(&bi); fr(&bo);
}

static void test_scan(void) {
  int64_t s2[2] = {7, 300};
  int p2[2] = {1, 0};
  tt_t in = mk(TPU_DTYPE_F32, 2, s2, p2);
  fill(&in, 1.0, false);
  for (int dim = 0; dim < 2; ++dim) {
    tt_t o = mk(TPU_DTYPE_F32, 2, s2, NULL);
    tpu_k_value_t a[3] = {vt(&in.t), vi(dim - 2), vn()};
    bool s = ok(call_op("aten::cumsum", 3, a, 1, &o.t));
    double worst = 0;
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 300; ++j) {
        double r = 0;
        for (int64_t k = 0; k <= (dim ? j : i); ++k) {
          int64_t idx[2] = {dim ? i : k, dim ? k : j};
          r += get(&in.t, idx);
        }
        int64_t idx[2] = {i, j};
        double e = fabs(get(&o.t, idx) - r);
        if (e > worst) worst = e;
      }
    CHECKF(s && worst < 1e-5, "cumsum dim %d err %g", dim, worst);
    fr(&o);
  }
  int64_t s1[1] = {10};
  tt_t ii = mk(TPU_DTYPE_I32, 1, s1, NULL), io = mk(TPU_DTYPE_I64, 1, s1, NULL);
  for (int i = 0; i < 10; ++i) ((int32_t*)ii.buf)[i] = i + 1;
  tpu_k_value_t a[3] = {vt(&ii.t), vi(0), vdt(TPU_DTYPE_I64)};
  bool s = ok(call_op("aten::cumprod", 3, a, 1, &io.t));
  CHECKF(s && ((int64_t*)io.buf)[9] == 3628800 && ((int64_t*)io.buf)[3] == 24, "cumprod int");
  fr(&in); fr(&ii); fr(&io);
}

/* ---- median / nanmedian ---------------------------------------------------------- */

/* NaN matches NaN, anything else only itself. */
static bool same_f(double got, double want) { return isnan(want) ? isnan(got) : got == want; }

/* The lower median of v[0..n) (NaN last; nanmedian: of the non-NaN values)
 * and its index as the CPU's comparator defines it: ties in index order. */
static double ref_median(const double* v, int64_t n, bool nan_median, int64_t* at) {
  int64_t nn = 0, first_nan = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(v[i])) {
      if (first_nan < 0) first_nan = i;
    } else {
      nn++;
    }
  }
  if (nn == 0 || (first_nan >= 0 && !nan_median)) {
    /* the CPU's nanmedian of an all-NaN row: torch.full((n,), nan).nanmedian(0) */
    *at = !nan_median ? first_nan : n == 37 ? 26 : n == 5 ? 2 : -1;
    return NAN;
  }
  int64_t rank = (nn - 1) / 2;
  for (int64_t i = 0; i < n; ++i) { /* the element with `rank` smaller ones and more than rank - ties */
    if (isnan(v[i])) continue;
    int64_t below = 0, same = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (isnan(v[j])) continue;
      below += v[j] < v[i];
      same += v[j] == v[i];
    }
    if (below <= rank && rank < below + same) {
      for (int64_t j = 0, seen = 0; j < n; ++j)
        if (v[j] == v[i] && seen++ == rank - below) {
          *at = j;
          return v[i];
        }
    }
  }
  *at = -1;
  return NAN;
}

static void test_median(void) {
  /* 5 x 37 float32 with ties and NaNs, transposed in memory; every dim, keepdim or not */
  int64_t s2[2] = {5, 37};
  int p2[2] = {1, 0};
  tt_t in = mk(TPU_DTYPE_F32, 2, s2, p2);
  for (int64_t i = 0; i < 5 * 37; ++i) setf(&in.t, i, floor(urand() * 6.0));
  for (int64_t j = 0; j < 37; ++j) setf(&in.t, 2 * 37 + j, NAN); /* an all-NaN row */
  setf(&in.t, 3, NAN);
  setf(&in.t, 37 + 5, NAN);
  setf(&in.t, 4 * 37 + 36, NAN);
  double row[37];
  for (int nanm = 0; nanm < 2; ++nanm) {
    const char* op = nanm ? "aten::nanmedian.dim_values" : "aten::median.dim_values";
    for (int dim = 0; dim < 2; ++dim) {
      for (int keep = 0; keep < 2; ++keep) {
        int64_t os[2];
        int ond = red_shape(&in.t, 1u << dim, keep, os);
        tt_t v = mk(TPU_DTYPE_F32, ond, os, NULL), ix = mk(TPU_DTYPE_I64, ond, os, NULL);
        tpu_k_value_t a[5] = {vt(&in.t), vi(dim), vb(keep), vt(&v.t), vt(&ix.t)};
        tpu_tensor_t outs[2] = {v.t, ix.t};
        bool good = ok(call_op(op, 5, a, 2, outs));
        int64_t rows = dim ? 5 : 37, len = dim ? 37 : 5;
        for (int64_t r = 0; good && r < rows; ++r) {
          for (int64_t k = 0; k < len; ++k) {
            int64_t idx[2] = {dim ? r : k, dim ? k : r};
            row[k] = get(&in.t, idx);
          }
          int64_t at;
          double want = ref_median(row, len, nanm, &at);
          good = same_f(getf(&v.t, r), want) && geti(&ix.t, r) == at;
          CHECKF(good, "%s dim %d keep %d row %lld: %g at %lld, want %g at %lld", op, dim, keep, (long long)r,
                 getf(&v.t, r), (long long)geti(&ix.t, r), want, (long long)at);
        }
        fr(&v);
        fr(&ix);
      }
    }
  }
  /* the whole input: float64 and bfloat16 as float32 above, without the NaN row */
  for (int64_t j = 0; j < 37; ++j) setf(&in.t, 2 * 37 + j, j % 7);
  double all[5 * 37];
  for (int64_t i = 0; i < 5 * 37; ++i) all[i] = getf(&in.t, i);
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int k = 0; k < 3; ++k) {
    tt_t x = mk(dts[k], 2, s2, NULL), o = mk(dts[k], 0, NULL, NULL);
    for (int64_t i = 0; i < 5 * 37; ++i) setf(&x.t, i, all[i]);
    for (int nanm = 0; nanm < 2; ++nanm) {
      tpu_k_value_t a[1] = {vt(&x.t)};
      bool good = ok(call_op(nanm ? "aten::nanmedian" : "aten::median", 1, a, 1, &o.t));
      int64_t at;
      double want = ref_median(all, 5 * 37, nanm, &at);
      CHECKF(good && same_f(getf(&o.t, 0), want), "%s median %d: %g want %g", tpu_dtype_name(dts[k]), nanm,
             getf(&o.t, 0), want);
    }
    fr(&x);
    fr(&o);
  }
  /* int64 past 2^53 compares exactly; CPU: torch.tensor([3, 1, 1, 2, 2]).median(0) = (2, 3) */
  static const int64_t kv[5] = {3, 1, 1, 2, 2};
  int64_t s1[1] = {5};
  tt_t xi = mk(TPU_DTYPE_I64, 1, s1, NULL), vi0 = mk(TPU_DTYPE_I64, 0, NULL, NULL), ii0 = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  const int64_t big = (int64_t)1 << 60;
  for (int i = 0; i < 5; ++i) ((int64_t*)xi.buf)[i] = big + kv[i];
  tpu_k_value_t a[5] = {vt(&xi.t), vi(0), vb(false), vt(&vi0.t), vt(&ii0.t)};
  tpu_tensor_t outs[2] = {vi0.t, ii0.t};
  CHECK_OK(call_op("aten::median.dim_values", 5, a, 2, outs));
  CHECK(*(int64_t*)vi0.buf == big + 2 && *(int64_t*)ii0.buf == 3);
  /* an empty dim, bool and a values dtype other than self's are refused */
  int64_t se[2] = {2, 0};
  tt_t xe = mk(TPU_DTYPE_F32, 2, se, NULL);
  tpu_k_value_t e[5] = {vt(&xe.t), vi(1), vb(false), vt(&vi0.t), vt(&ii0.t)};
  tpu_tensor_t eo[2] = {vi0.t, ii0.t};
  eo[0].dtype = TPU_DTYPE_F32;
  eo[0].ndim = eo[1].ndim = 1;
  eo[0].sizes[0] = eo[1].sizes[0] = 2;
  CHECK_STATUS(call_op("aten::median.dim_values", 5, e, 2, eo), TPU_STATUS_OUT_OF_RANGE, "non-zero size");
  tpu_tensor_t xb = xi.t;
  xb.dtype = TPU_DTYPE_BOOL;
  tpu_k_value_t b[1] = {vt(&xb)};
  tpu_tensor_t bo = vi0.t;
  bo.dtype = TPU_DTYPE_BOOL;
  CHECK_STATUS(call_op("aten::median", 1, b, 1, &bo), TPU_STATUS_UNIMPLEMENTED, "bool");
  tpu_k_value_t c[1] = {vt(&xi.t)};
  tpu_tensor_t co = vi0.t;
  co.dtype = TPU_DTYPE_F64;
  CHECK_STATUS(call_op("aten::nanmedian", 1, c, 1, &co), TPU_STATUS_FAILED_PRECONDITION, "values");
  fr(&in); fr(&xi); fr(&vi0); fr(&ii0); fr(&xe);
}

/* ---- kthvalue / mode ----------------------------------------------------------- */

/* x[i] = (7 i) % 5, NaN where i % 11 == 3 (n = 37), and the CPU's indices:
 * torch's kthvalue(k).indices for k = 1..37 and mode(), whose ties come from
 * its quickselect and std::sort. */
static const int64_t kKthCpu[37] = {5,  0,  15, 20, 10, 35, 30, 23, 33, 28, 13, 18, 8,  11, 31, 1,  21, 16, 6,
                                    26, 4,  19, 9,  34, 29, 24, 2,  32, 12, 17, 22, 27, 7,  14, 25, 3,  36};

static void test_kthvalue_mode(void) {
  int64_t s2[2] = {37, 3};
  int p2[2] = {1, 0}; /* the dim of 37 strided in memory */
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int q = 0; q < 3; ++q) {
    tt_t in = mk(dts[q], 2, s2, p2);
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t c = 0; c < 3; ++c) setf(&in.t, i * 3 + c, i % 11 == 3 ? NAN : (double)((7 * i) % 5));
    int64_t os[1] = {3};
    tt_t v = mk(dts[q], 1, os, NULL), ix = mk(TPU_DTYPE_I64, 1, os, NULL);
    tpu_tensor_t outs[2] = {v.t, ix.t};
    for (int64_t k = 1; k <= 37; ++k) {
      tpu_k_value_t a[6] = {vt(&in.t), vi(k), vi(-2), vb(false), vt(&v.t), vt(&ix.t)};
      bool good = ok(call_op("aten::kthvalue.values", 6, a, 2, outs));
      int64_t want = kKthCpu[k - 1];
      double wv = want % 11 == 3 ? NAN : (double)((7 * want) % 5);
      for (int64_t c = 0; good && c < 3; ++c) good = geti(&ix.t, c) == want && same_f(getf(&v.t, c), wv);
      CHECKF(good, "%s kthvalue k=%lld: %g at %lld, want %g at %lld", tpu_dtype_name(dts[q]), (long long)k,
             getf(&v.t, 0), (long long)geti(&ix.t, 0), wv, (long long)want);
    }
    tpu_k_value_t m[5] = {vt(&in.t), vi(0), vb(false), vt(&v.t), vt(&ix.t)};
    CHECK_OK(call_op("aten::mode", 5, m, 2, outs));
    CHECK(geti(&ix.t, 2) == 12 && getf(&v.t, 2) == 4.0);
    fr(&in); fr(&v); fr(&ix);
  }
  /* 40 equal values (the introsort path past 16): CPU mode index 19; int64
   * past 2^53 exact: the CPU's mode of (2^60 + (7 i) % 5) is at 10, its
   * kthvalue k = 1, 10, 37 at 5, 28, 12 */
  int64_t s1[1] = {40};
  tt_t ones = mk(TPU_DTYPE_F32, 1, s1, NULL), v0 = mk(TPU_DTYPE_F32, 0, NULL, NULL), i0 = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  for (int64_t i = 0; i < 40; ++i) setf(&ones.t, i, 1.0);
  tpu_tensor_t o0[2] = {v0.t, i0.t};
  tpu_k_value_t m1[5] = {vt(&ones.t), vi(0), vb(false), vt(&v0.t), vt(&i0.t)};
  CHECK_OK(call_op("aten::mode", 5, m1, 2, o0));
  CHECK(*(int64_t*)i0.buf == 19 && *(float*)v0.buf == 1.0f);
  int64_t s37[1] = {37};
  tt_t xi = mk(TPU_DTYPE_I64, 1, s37, NULL), vl = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  const int64_t big = (int64_t)1 << 60;
  for (int64_t i = 0; i < 37; ++i) ((int64_t*)xi.buf)[i] = big + (7 * i) % 5;
  tpu_tensor_t ol[2] = {vl.t, i0.t};
  tpu_k_value_t m2[5] = {vt(&xi.t), vi(0), vb(false), vt(&vl.t), vt(&i0.t)};
  CHECK_OK(call_op("aten::mode", 5, m2, 2, ol));
  CHECK(*(int64_t*)i0.buf == 10 && *(int64_t*)vl.buf == big);
  static const int64_t ks[3] = {1, 10, 37}, kat[3] = {5, 28, 12};
  for (int j = 0; j < 3; ++j) {
    tpu_k_value_t a[6] = {vt(&xi.t), vi(ks[j]), vi(0), vb(true), vt(&vl.t), vt(&i0.t)};
    CHECK_OK(call_op("aten::kthvalue.values", 6, a, 2, ol));
    CHECK(*(int64_t*)i0.buf == kat[j] && *(int64_t*)vl.buf == ((int64_t*)xi.buf)[kat[j]]);
  }
  /* k out of range, an empty dim, bool kthvalue, a wrong values dtype */
  tpu_k_value_t bad[6] = {vt(&xi.t), vi(38), vi(0), vb(false), vt(&vl.t), vt(&i0.t)};
  CHECK_STATUS(call_op("aten::kthvalue.values", 6, bad, 2, ol), TPU_STATUS_FAILED_PRECONDITION, "out of range");
  bad[1] = vi(0);
  CHECK_STATUS(call_op("aten::kthvalue.values", 6, bad, 2, ol), TPU_STATUS_FAILED_PRECONDITION, "out of range");
  int64_t se[2] = {2, 0};
  tt_t xe = mk(TPU_DTYPE_F32, 2, se, NULL);
  int64_t s2o[1] = {2};
  tt_t ve = mk(TPU_DTYPE_F32, 1, s2o, NULL), ie = mk(TPU_DTYPE_I64, 1, s2o, NULL);
  tpu_tensor_t oe[2] = {ve.t, ie.t};
  tpu_k_value_t e[5] = {vt(&xe.t), vi(1), vb(false), vt(&ve.t), vt(&ie.t)};
  CHECK_STATUS(call_op("aten::mode", 5, e, 2, oe), TPU_STATUS_OUT_OF_RANGE, "mode(): Expected reduction dim 1");
  tpu_tensor_t xb = xi.t, vb0 = vl.t;
  xb.dtype = vb0.dtype = TPU_DTYPE_BOOL;
  tpu_tensor_t ob[2] = {vb0, i0.t};
  tpu_k_value_t b[6] = {vt(&xb), vi(1), vi(0), vb(false), vt(&vb0), vt(&i0.t)};
  CHECK_STATUS(call_op("aten::kthvalue.values", 6, b, 2, ob), TPU_STATUS_UNIMPLEMENTED, "bool");
  tpu_k_value_t wd[5] = {vt(&xi.t), vi(0), vb(false), vt(&v0.t), vt(&i0.t)};
  CHECK_STATUS(call_op("aten::mode", 5, wd, 2, o0), TPU_STATUS_FAILED_PRECONDITION, "values");
  fr(&ones); fr(&v0); fr(&i0); fr(&xi); fr(&vl); fr(&xe); fr(&ve); fr(&ie);
}

static void test_softmax(void) {
  int64_t s3[3] = {3, 4, 257};
  int p3[3] = {0, 2, 1};
  for (int dt = 0; dt < 3; ++dt) {
    int dtype = dt == 0 ? TPU_DTYPE_F32 : dt == 1 ? TPU_DTYPE_BF16 : TPU_DTYPE_F64;
    tt_t in = mk(dtype, 3, s3, dt == 0 ? p3 : NULL);
    fill(&in, 8.0, false);
    if (dt == 0) { /* a fully masked row and a partly masked one */
      for (int j = 0; j < 257; ++j) { int64_t idx[3] = {1, 2, j}; set(&in.t, idx, -INFINITY); }
      for (int j = 0; j < 100; ++j) { int64_t idx[3] = {2, 0, j}; set(&in.t, idx, -INFINITY); }
    }
    for (int lg = 0; lg < 2; ++lg) {
      for (int dim = 0; dim < 3; ++dim) {
        tt_t o = mk(dtype == TPU_DTYPE_BF16 && lg ? TPU_DTYPE_F32 : dtype, 3, s3, NULL);
        tpu_k_value_t a[3] = {vt(&in.t), vi(dim), vb(dtype == TPU_DTYPE_BF16 && lg)};
        bool s = ok(call_op(lg ? "aten::_log_softmax" : "aten::_softmax", 3, a, 1, &o.t));
        double worst = 0, sumerr = 0;
        int64_t n = tpu_tensor_numel(&in.t);
        for (int64_t f = 0; f < n; ++f) {
          int64_t idx[3];
          unravel(&in.t, f, idx);
          if (idx[dim] != 0) continue;
          double mx = -INFINITY, sum = 0, osum = 0;
          for (int64_t k = 0; k < s3[dim]; ++k) { idx[dim] = k; double v = get(&in.t, idx); if (v > mx) mx = v; }
          for (int64_t k = 0; k < s3[dim]; ++k) { idx[dim] = k; sum += exp(get(&in.t, idx) - mx); }
          bool all_masked = isinf(mx) && mx < 0;
          for (int64_t k = 0; k < s3[dim]; ++k) {
            idx[dim] = k;
            double x = get(&in.t, idx), g = get(&o.t, idx);
            double r = lg ? x - mx - log(sum) : exp(x - mx) / sum;
            if (all_masked) { if (!isnan(g)) worst = INFINITY; continue; }
            if (isinf(r) && g == r) continue;
            double e = fabs(g - r) / (lg ? fabs(r) + 1 : 1);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            osum += g;
          }
          if (!lg && !all_masked && fabs(osum - 1) > sumerr) sumerr = fabs(osum - 1);
        }
        double tol = dtype == TPU_DTYPE_BF16 && !lg ? 8e-3 : dtype == TPU_DTYPE_F64 ? 1e-12 : 1e-5;
        CHECKF(s && worst < tol && sumerr < (dtype == TPU_DTYPE_BF16 ? 3e-2 : 1e-5),
               "%s %s dim=%d err=%g sumerr=%g", lg ? "log_softmax" : "softmax", tpu_dtype_name(dtype), dim,
               worst, sumerr);
        /* backward vs formula */
        if (dtype != TPU_DTYPE_BF16) {
          tt_t g = mk(dtype, 3, s3, NULL), gi = mk(dtype, 3, s3, NULL);
          fill(&g, 1.0, false);
          tpu_k_value_t b[4] = {vt(&g.t), vt(&o.t), vi(dim), vdt(dtype)};
          s = ok(call_op(lg ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data", 4, b, 1, &gi.t));
          double werr = 0;
          for (int64_t f = 0; f < n; ++f) {
            int64_t idx[3];
            unravel(&in.t, f, idx);
            if (idx[dim] != 0) continue;
            double dot = 0;
            for (int64_t k = 0; k < s3[dim]; ++k) {
              idx[dim] = k;
              dot += lg ? get(&g.t, idx) : get(&g.t, idx) * get(&o.t, idx);
            }
            for (int64_t k = 0; k < s3[dim]; ++k) {
              idx[dim] = k;
              double y = get(&o.t, idx), gg = get(&g.t, idx);
              double r = lg ? gg - exp(y) * dot : y * (gg - dot);
              double e = fabs(get(&gi.t, idx) - r);
              if (isnan(r) && isnan(get(&gi.t, idx))) continue;
              if (!(e <= werr)) werr = isnan(e) ? INFINITY : e;
            }
          }
          CHECKF(s && werr < 1e-5, "%s backward dim=%d err=%g", lg ? "log_softmax" : "softmax", dim, werr);
          fr(&g); fr(&gi);
        }
        fr(&o);
      }
    }
    fr(&in);
  }
}

static void test_layer_norm(void) {
  int64_t s3[3] = {4, 6, 50};
  int p3[3] = {1, 0, 2};
  int64_t ns[2] = {6, 50};
  int64_t sm[3] = {4, 1, 1};
  for (int variant = 0; variant < 3; ++variant) {
    int dtype = variant == 2 ? TPU_DTYPE_BF16 : TPU_DTYPE_F32;
    tt_t x = mk(dtype, 3, s3, variant == 1 ? p3 : NULL);
    fill(&x, 2.0, false);
    tt_t w = mk(dtype, 2, ns, NULL), b = mk(dtype, 2, ns, NULL);
    fill(&w, 1.0, false);
    fill(&b, 1.0, false);
    tt_t y = mk(dtype, 3, s3, NULL), mean = mk(TPU_DTYPE_F32, 3, sm, NULL), rstd = mk(TPU_DTYPE_F32, 3, sm, NULL);
    tpu_k_value_t a[5] = {vt(&x.t), vints(ns, 2), variant == 1 ? vn() : vt(&w.t), vt(&b.t), vd(1e-5)};
    tpu_tensor_t outs[3] = {y.t, mean.t, rstd.t};
    bool s = ok(call_op("aten::native_layer_norm", 5, a, 3, outs));
    double worst = 0;
    for (int64_t r = 0; r < 4; ++r) {
      double mu = 0, var = 0;
      for (int64_t i = 0; i < 300; ++i) { int64_t idx[3] = {r, i / 50, i % 50}; mu += get(&x.t, idx); }
      mu /= 300;
      for (int64_t i = 0; i < 300; ++i) { int64_t idx[3] = {r, i / 50, i % 50}; double d = get(&x.t, idx) - mu; var += d * d; }
      var /= 300;
      double rs = 1 / sqrt(var + 1e-5);
      worst = fmax(worst, fabs(((float*)mean.buf)[r] - mu));
      worst = fmax(worst, fabs(((float*)rstd.buf)[r] - rs) / rs);
      for (int64_t i = 0; i < 300; ++i) {
        int64_t idx[3] = {r, i / 50, i % 50}, wi[2] = {i / 50, i % 50};
        double ref = (get(&x.t, idx) - mu) * rs * (variant == 1 ? 1 : get(&w.t, wi)) + get(&b.t, wi);
        worst = fmax(worst, fabs(get(&y.t, idx) - ref) / (1 + fabs(ref)));
      }
    }
    CHECKF(s && worst < (dtype == TPU_DTYPE_BF16 ? 8e-3 : 1e-5), "layer_norm variant %d err %g", variant, worst);

    if (variant < 2) {
      /* backward vs finite differences of L = sum(y * g) */
      tt_t g = mk(dtype, 3, s3, NULL), gi = mk(dtype, 3, s3, NULL), gw = mk(dtype, 2, ns, NULL), gb = mk(dtype, 2, ns, NULL);
      fill(&g, 1.0, false);
      int64_t mask[3] = {1, 1, 1};
      tpu_k_value_t bargs[8] = {vt(&g.t), vt(&x.t), vints(ns, 2), vt(&mean.t), vt(&rstd.t),
                                variant == 1 ? vn() : vt(&w.t), vt(&b.t), vints(mask, 3)};
      tpu_tensor_t bouts[3] = {gi.t, gw.t, gb.t};
      s = ok(call_op("aten::native_layer_norm_backward", 8, bargs, 3, bouts));
      double berr = 0;
      for (int64_t r = 0; r < 4; ++r) {
        double mu = ((float*)mean.buf)[r], rs = ((float*)rstd.buf)[r];
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < 300; ++i) {
          int64_t idx[3] = {r, i / 50, i % 50}, wi[2] = {i / 50, i % 50};
          double gg = get(&g.t, idx) * (variant == 1 ? 1 : get(&w.t, wi));
          sg += gg;
          sgx += gg * (get(&x.t, idx) - mu) * rs;
        }
        for (int64_t i = 0; i < 300; ++i) {
          int64_t idx[3] = {r, i / 50, i % 50}, wi[2] = {i / 50, i % 50};
          double gg = get(&g.t, idx) * (variant == 1 ? 1 : get(&w.t, wi));
          double xh = (get(&x.t, idx) - mu) * rs;
          double ref = rs * (gg - sg / 300 - xh * sgx / 300);
          berr = fmax(berr, fabs(get(&gi.t, idx) - ref));
        }
      }
      for (int64_t i = 0; i < 300; ++i) {
        double rw = 0, rb = 0;
        for (int64_t r = 0; r < 4; ++r) {
          int64_t idx[3] = {r, i / 50, i % 50};
          rw += get(&g.t, idx) * (get(&x.t, idx) - ((float*)mean.buf)[r]) * ((float*)rstd.buf)[r];
          rb += get(&g.t, idx);
        }
        berr = fmax(berr, fabs(((float*)gw.buf)[i] - rw));
        berr = fmax(berr, fabs(((float*)gb.buf)[i] - rb));
      }
      CHECKF(s && berr < 1e-4, "layer_norm_backward variant %d err %g", variant, berr);
      fr(&g); fr(&gi); fr(&gw); fr(&gb);
    }
    fr(&x); fr(&w); fr(&b); fr(&y); fr(&mean); fr(&rstd);
  }
  /* RMS norm */
  int64_t s2[2] = {5, 64}, n1[1] = {64}, r2[2] = {5, 1};
  tt_t x = mk(TPU_DTYPE_F32, 2, s2, NULL), w = mk(TPU_DTYPE_F32, 1, n1, NULL);
  tt_t y = mk(TPU_DTYPE_F32, 2, s2, NULL), rs = mk(TPU_DTYPE_F32, 2, r2, NULL);
  fill(&x, 1, false);
  fill(&w, 1, false);
  tpu_k_value_t a[4] = {vt(&x.t), vints(n1, 1), vt(&w.t), vn()};
  tpu_tensor_t outs[2] = {y.t, rs.t};
  if (tpu_k_lookup("aten::_fused_rms_norm")) {
    bool s = ok(call_op("aten::_fused_rms_norm", 4, a, 2, outs));
    double worst = 0;
    for (int r = 0; r < 5; ++r) {
      double ms = 0;
      for (int i = 0; i < 64; ++i) ms += ((float*)x.buf)[r * 64 + i] * (double)((float*)x.buf)[r * 64 + i];
      double rr = 1 / sqrt(ms / 64 + FLT_EPSILON);
      worst = fmax(worst, fabs(((float*)rs.buf)[r] - rr) / rr);
      for (int i = 0; i < 64; ++i)
        worst = fmax(worst, fabs(((float*)y.buf)[r * 64 + i] - ((float*)x.buf)[r * 64 + i] * rr * ((float*)w.buf)[i]));
    }
    CHECKF(s && worst < 1e-5, "rms_norm err %g", worst);
  }
  fr(&x); fr(&w); fr(&y); fr(&rs);
}

/* _logcumsumexp along each dim of a transposed [4, 6] float64 tensor against
 * log(sum exp) of the prefix (in long double), with -inf, +inf and NaN rows:
 * equal infinities stay, NaN propagates; float32 the same within 2e-7. */
static void test_logcumsumexp(void) {
  int64_t s2[2] = {4, 6};
  int p2[2] = {1, 0};
  for (int k = 0; k < 2; ++k) {
    const int dt = k ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
    tt_t in = mk(dt, 2, s2, p2), o = mk(dt, 2, s2, NULL);
    fill(&in, 20.0, false);
    int64_t ix[2] = {1, 2};
    set(&in.t, ix, -INFINITY);
    ix[1] = 3;
    set(&in.t, ix, INFINITY);
    ix[0] = 2;
    ix[1] = 1;
    set(&in.t, ix, NAN);
    for (int j = 0; j < 6; ++j) {
      int64_t r3[2] = {3, j};
      set(&in.t, r3, -INFINITY);
    }
    for (int dim = 0; dim < 2; ++dim) {
      tpu_k_value_t a[2] = {vt(&in.t), vi(dim)};
      CHECK_OK(call_op("aten::_logcumsumexp", 2, a, 1, &o.t));
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          long double acc = 0.0L;
          bool nan = false, pinf = false;
          for (int64_t q = 0; q <= (dim ? j : i); ++q) {
            int64_t id[2] = {dim ? i : q, dim ? q : j};
            const double v = get(&in.t, id);
            nan |= isnan(v);
            pinf |= v == INFINITY;
            acc += expl((long double)v);
          }
          const double want = nan ? NAN : pinf ? INFINITY : (double)logl(acc);
          int64_t id[2] = {i, j};
          CHECKF(close_f(get(&o.t, id), want, k ? 2e-7 : 1e-14, 0.0), "logcumsumexp %s dim %d [%lld, %lld]: %.17g want %.17g",
                 tpu_dtype_name(dt), dim, (long long)i, (long long)j, get(&o.t, id), want);
        }
    }
    tpu_tensor_t lo = o.t;
    lo.dtype = TPU_DTYPE_I64; /* floating only, out in self's dtype */
    tpu_k_value_t a[2] = {vt(&in.t), vi(0)};
    CHECK_STATUS(call_op("aten::_logcumsumexp", 2, a, 1, &lo), TPU_STATUS_INVALID_ARGUMENT, "scalar_type");
    fr(&in);
    fr(&o);
  }
}

int main(void) {
  if (!tku_start(2)) return 1;
  for (int round = 0; round < 2; ++round) {
    RUN_TEST(test_sums);
    RUN_TEST(test_scalar_reductions);
    RUN_TEST(test_maxdim_strided);
    RUN_TEST(test_any_all);
    RUN_TEST(test_var_norm_lse);
    RUN_TEST(test_empty);
    RUN_TEST(test_scan);
    RUN_TEST(test_logcumsumexp);
    RUN_TEST(test_median);
    RUN_TEST(test_kthvalue_mode);
    RUN_TEST(test_softmax);
    RUN_TEST(test_layer_norm);
    tpu_threadpool_destroy(g_pool);
    g_pool = NULL; /* second round single-threaded, portable code paths */
    setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);
  }
  unsetenv("TORCH_TPU_KERNEL_ISA");
  return TEST_REPORT();
}
