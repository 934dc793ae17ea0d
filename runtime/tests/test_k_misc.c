/* test_k_misc.c - histc, eye, erfinv, log_sigmoid forward/backward, cdist/pdist,
 * segment_reduce. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* 1-D or 2-D tensor; `stride` is the innermost stride. */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, int64_t stride) {
  return tku_alloc(dtype, ndim, sizes, NULL, stride, 16);
}


static double get1(const tpu_tensor_t* t, int64_t i) {
  return tpu_ku_load_f64((char*)t->data + i * t->strides[0] * (int64_t)tpu_dtype_size(t->dtype), t->dtype);
}
static void set1(const tpu_tensor_t* t, int64_t i, double v) {
  tpu_ku_store_f64((char*)t->data + i * t->strides[0] * (int64_t)tpu_dtype_size(t->dtype), t->dtype, v);
}

static void test_histc_float(void) {
  /* CPU: torch.histc(torch.tensor([0., 1., 2., 2.5, 3., 4., 5., -1., 9.]), bins=4, min=0, max=4)
   * -> [1, 1, 2, 2] (4 in the last bin; -1, 5, 9 dropped). */
  double v[9] = {0, 1, 2, 2.5, 3, 4, 5, -1, 9};
  int64_t n9[1] = {9}, n4[1] = {4};
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int k = 0; k < 3; ++k) {
    tt_t x = mk(dts[k], 1, n9, 2), o = mk(dts[k], 1, n4, 1);
    for (int i = 0; i < 9; ++i) set1(&x.t, i, v[i]);
    tpu_k_value_t a[4] = {vt(&x.t), vi(4), vd(0.0), vd(4.0)};
    CHECK_OK(call_op("aten::histc", 4, a, 1, &o.t));
    CHECKF(get1(&o.t, 0) == 1 && get1(&o.t, 1) == 1 && get1(&o.t, 2) == 2 && get1(&o.t, 3) == 2,
           "histc %s: %g %g %g %g", tpu_dtype_name(dts[k]), get1(&o.t, 0), get1(&o.t, 1), get1(&o.t, 2),
           get1(&o.t, 3));
    /* min == max: the data's range [-1, 9]: edges -1, 1.5, 4, 6.5, 9 */
    tpu_k_value_t b[4] = {vt(&x.t), vi(4), vd(0.0), vd(0.0)};
    CHECK_OK(call_op("aten::histc.out", 4, b, 1, &o.t));
    CHECKF(get1(&o.t, 0) == 3 && get1(&o.t, 1) == 3 && get1(&o.t, 2) == 2 && get1(&o.t, 3) == 1,
           "histc data range %s: %g %g %g %g", tpu_dtype_name(dts[k]), get1(&o.t, 0), get1(&o.t, 1),
           get1(&o.t, 2), get1(&o.t, 3));
    fr(&x);
    fr(&o);
  }
  /* edge cases: 0.1 * 3 style edges; bins > stack counters */
  int64_t n1000[1] = {1000}, nb[1] = {5000};
  tt_t x = mk(TPU_DTYPE_F32, 1, n1000, 1), o = mk(TPU_DTYPE_F32, 1, nb, 1);
  for (int i = 0; i < 1000; ++i) set1(&x.t, i, (double)(float)(i * 0.001));
  tpu_k_value_t a[4] = {vt(&x.t), vi(5000), vd(0.0), vd(1.0)};
  CHECK_OK(call_op("aten::histc", 4, a, 1, &o.t));
  double tot = 0;
  for (int i = 0; i < 5000; ++i) tot += get1(&o.t, i);
  CHECK(tot == 1000);
  fr(&x);
  fr(&o);
  /* all equal values, min == max: range widens to [v-1, v+1] */
  int64_t n3[1] = {3}, n2[1] = {2};
  tt_t y = mk(TPU_DTYPE_F32, 1, n3, 1), p = mk(TPU_DTYPE_F32, 1, n2, 1);
  for (int i = 0; i < 3; ++i) set1(&y.t, i, 5.0);
  tpu_k_value_t c[4] = {vt(&y.t), vi(2), vd(0.0), vd(0.0)};
  CHECK_OK(call_op("aten::histc", 4, c, 1, &p.t));
  CHECK(get1(&p.t, 0) == 0 && get1(&p.t, 1) == 3);
  /* errors */
  tpu_k_value_t e1[4] = {vt(&y.t), vi(2), vd(3.0), vd(1.0)};
  CHECK_STATUS(call_op("aten::histc", 4, e1, 1, &p.t), TPU_STATUS_INVALID_ARGUMENT, "max must be larger");
  tpu_k_value_t e2[4] = {vt(&y.t), vi(0), vd(0.0), vd(1.0)};
  CHECK_STATUS(call_op("aten::histc", 4, e2, 1, &p.t), TPU_STATUS_INVALID_ARGUMENT, "bins");
  set1(&y.t, 1, NAN);
  CHECK_STATUS(call_op("aten::histc", 4, c, 1, &p.t), TPU_STATUS_INVALID_ARGUMENT, "not finite");
  tpu_k_value_t e3[4] = {vt(&y.t), vi(2), vd(0.0), vd(INFINITY)};
  CHECK_STATUS(call_op("aten::histc", 4, e3, 1, &p.t), TPU_STATUS_INVALID_ARGUMENT, "not finite");
  fr(&y);
  fr(&p);
}

static void test_histc_int(void) {
  /* CUDA semantics: expert ids 0..7, bins = 8, min = 0, max = 7 */
  int64_t n[1] = {12}, nb[1] = {8};
  int64_t ids[12] = {0, 7, 3, 3, 1, 7, 7, 2, 5, 6, 4, 0};
  int dts[3] = {TPU_DTYPE_I64, TPU_DTYPE_I32, TPU_DTYPE_U8};
  for (int k = 0; k < 3; ++k) {
    tt_t x = mk(dts[k], 1, n, 1), o = mk(dts[k], 1, nb, 1);
    for (int i = 0; i < 12; ++i) set1(&x.t, i, (double)ids[i]);
    tpu_k_value_t a[4] = {vt(&x.t), vi(8), vi(0), vi(7)};
    CHECK_OK(call_op("aten::histc", 4, a, 1, &o.t));
    int64_t want[8] = {2, 1, 1, 2, 1, 1, 1, 3};
    bool same = true;
    for (int i = 0; i < 8; ++i) same = same && get1(&o.t, i) == want[i];
    CHECKF(same, "histc int %s", tpu_dtype_name(dts[k]));
    /* min == max == 0: data range [0, 7] */
    tpu_k_value_t b[4] = {vt(&x.t), vi(8), vi(0), vi(0)};
    CHECK_OK(call_op("aten::histc", 4, b, 1, &o.t));
    same = true;
    for (int i = 0; i < 8; ++i) same = same && get1(&o.t, i) == want[i];
    CHECKF(same, "histc int data range %s", tpu_dtype_name(dts[k]));
    /* bins = 3 over [0, 7]: bin = v * 3 / 7 (integer): {0,1,2}, {3,4}, {5,6,7} */
    tt_t o3 = mk(dts[k], 1, (int64_t[]){3}, 1);
    tpu_k_value_t c[4] = {vt(&x.t), vi(3), vi(0), vi(7)};
    CHECK_OK(call_op("aten::histc", 4, c, 1, &o3.t));
    CHECKF(get1(&o3.t, 0) == 4 && get1(&o3.t, 1) == 3 && get1(&o3.t, 2) == 5, "histc int bins=3 %g %g %g",
           get1(&o3.t, 0), get1(&o3.t, 1), get1(&o3.t, 2));
    fr(&x);
    fr(&o);
    fr(&o3);
  }
}

static void test_eye(void) {
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_BOOL, TPU_DTYPE_I64};
  for (int k = 0; k < 3; ++k) {
    int64_t sz[2] = {3, 5};
    tt_t o = mk(dts[k], 2, sz, 2); /* gapped columns */
    memset(o.buf, 0x7f, (size_t)(3 * 5 * 2) * tpu_dtype_size(dts[k]));
    tpu_k_value_t a[2] = {vi(3), vi(5)};
    CHECK_OK(call_op("aten::eye.m_out", 2, a, 1, &o.t));
    bool okv = true;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        char* p = (char*)o.t.data + (i * o.t.strides[0] + j * o.t.strides[1]) * (int64_t)tpu_dtype_size(dts[k]);
        okv = okv && tpu_ku_load_f64(p, dts[k]) == (i == j ? 1.0 : 0.0);
      }
    CHECKF(okv, "eye.m_out %s", tpu_dtype_name(dts[k]));
    fr(&o);
  }
  int64_t sz[2] = {4, 4};
  tt_t o = mk(TPU_DTYPE_F32, 2, sz, 1);
  tpu_k_value_t a[1] = {vi(4)};
  CHECK_OK(call_op("aten::eye.out", 1, a, 1, &o.t));
  CHECK(((float*)o.buf)[0] == 1 && ((float*)o.buf)[5] == 1 && ((float*)o.buf)[1] == 0);
  tpu_k_value_t b[1] = {vi(3)};
  CHECK_STATUS(call_op("aten::eye.out", 1, b, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, NULL);
  fr(&o);
}

static void test_erfinv(void) {
  int64_t n[1] = {7};
  double ys[7] = {0.0, 0.5, -0.3, 0.9, -0.999, 1.0, 1.5};
  int dts[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  for (int k = 0; k < 2; ++k) {
    tt_t x = mk(dts[k], 1, n, 1), o = mk(dts[k], 1, n, 1);
    for (int i = 0; i < 7; ++i) set1(&x.t, i, ys[i]);
    tpu_k_value_t a[1] = {vt(&x.t)};
    CHECK_OK(call_op("aten::erfinv", 1, a, 1, &o.t));
    double tol = dts[k] == TPU_DTYPE_F64 ? 1e-13 : 1e-5;
    bool good = true;
    for (int i = 0; i < 5; ++i) good = good && fabs(erf(get1(&o.t, i)) - get1(&x.t, i)) < tol;
    CHECKF(good, "erfinv %s", tpu_dtype_name(dts[k]));
    CHECK(isinf(get1(&o.t, 5)) && get1(&o.t, 5) > 0 && isnan(get1(&o.t, 6)));
    /* in place */
    CHECK_OK(call_op("aten::erfinv_", 1, a, 1, &x.t));
    CHECK(fabs(get1(&x.t, 1) - get1(&o.t, 1)) == 0.0);
    fr(&x);
    fr(&o);
  }
  /* integer input, float output */
  tt_t xi = mk(TPU_DTYPE_I64, 1, (int64_t[]){2}, 1), of = mk(TPU_DTYPE_F32, 1, (int64_t[]){2}, 1);
  set1(&xi.t, 0, 0);
  set1(&xi.t, 1, 1);
  tpu_k_value_t a[1] = {vt(&xi.t)};
  CHECK_OK(call_op("aten::erfinv.out", 1, a, 1, &of.t));
  CHECK(get1(&of.t, 0) == 0.0 && isinf(get1(&of.t, 1)));
  fr(&xi);
  fr(&of);
}

static void test_log_sigmoid(void) {
  int64_t n[1] = {6};
  double xs[6] = {-30.0, -2.0, -0.1, 0.0, 0.7, 25.0};
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int k = 0; k < 3; ++k) {
    int dt = dts[k];
    double tol = dt == TPU_DTYPE_F64 ? 1e-14 : dt == TPU_DTYPE_F32 ? 1e-6 : 1e-2;
    tt_t x = mk(dt, 1, n, 3), out = mk(dt, 1, n, 1), buf = mk(dt, 1, n, 1), g = mk(dt, 1, n, 1),
         gi = mk(dt, 1, n, 1);
    for (int i = 0; i < 6; ++i) {
      set1(&x.t, i, xs[i]);
      set1(&g.t, i, 0.5 + i);
    }
    tpu_tensor_t outs[2] = {out.t, buf.t};
    tpu_k_value_t a[1] = {vt(&x.t)};
    CHECK_OK(call_op("aten::log_sigmoid_forward", 1, a, 2, outs));
    tpu_k_value_t b[3] = {vt(&g.t), vt(&x.t), vt(&buf.t)};
    CHECK_OK(call_op("aten::log_sigmoid_backward", 3, b, 1, &gi.t));
    bool good = true;
    for (int i = 0; i < 6; ++i) {
      double xv = get1(&x.t, i);
      double ref = -log1p(exp(-xv));
      if (xv < -20) ref = xv - log1p(exp(xv));
      double dref = (0.5 + i) / (1.0 + exp(xv)); /* d/dx log sigmoid = 1 - sigmoid */
      good = good && fabs(get1(&out.t, i) - ref) <= tol * (1 + fabs(ref));
      good = good && fabs(get1(&buf.t, i) - exp(-fabs(xv))) <= tol * (1 + exp(-fabs(xv)));
      good = good && fabs(get1(&gi.t, i) - dref) <= tol * (1 + fabs(dref));
    }
    CHECKF(good, "log_sigmoid %s", tpu_dtype_name(dt));
    fr(&x); fr(&out); fr(&buf); fr(&g); fr(&gi);
  }
}

/* cdist of x1 [2, 3] (stored transposed) and x2 [3, 3] (every other element),
 * pdist of x [4, 2]; distances worked out by hand from the p-norm's definition. */
static void test_distances(void) {
  static const double a[6] = {0, 1, 2, 3, -1, 0.5}, b[9] = {1, 1, 1, 0, 1, 2, -2, 0, 4};
  /* sum |d|^p per pair (row-major [2, 3]) for p = 1, 2, 3; counts (p = 0) and maxima (p = inf) */
  static const double s1[6] = {2, 0, 5, 4.5, 6.5, 9.5}, s2[6] = {2, 0, 9, 8.25, 15.25, 38.25};
  static const double s3[6] = {2, 0, 17, 16.125, 38.375, 168.875};
  static const double c0[6] = {2, 0, 3, 3, 3, 3}, mx[6] = {1, 0, 2, 2, 3, 5};
  const int perm[2] = {1, 0};
  int64_t sa[2] = {2, 3}, sb[2] = {3, 3}, so[2] = {2, 3};
  tt_t x1 = tku_alloc(TPU_DTYPE_F64, 2, sa, perm, 1, 16), x2 = tku_alloc(TPU_DTYPE_F64, 2, sb, NULL, 2, 16);
  tt_t o = tku_alloc(TPU_DTYPE_F64, 2, so, NULL, 1, 16);
  int64_t idx[2];
  for (int i = 0; i < 6; ++i) {
    unravel(&x1.t, i, idx);
    set(&x1.t, idx, a[i]);
  }
  for (int i = 0; i < 9; ++i) {
    unravel(&x2.t, i, idx);
    set(&x2.t, idx, b[i]);
  }
  const double ps[5] = {0.0, 1.0, 2.0, 3.0, INFINITY};
  for (int k = 0; k < 5; ++k) {
    tpu_k_value_t args[4] = {vt(&x1.t), vt(&x2.t), vd(ps[k]), vn()};
    CHECK_OK(call_op("aten::_cdist_forward", 4, args, 1, &o.t));
    for (int i = 0; i < 6; ++i) {
      const double want = k == 0 ? c0[i] : k == 1 ? s1[i] : k == 2 ? sqrt(s2[i]) : k == 3 ? cbrt(s3[i]) : mx[i];
      unravel(&o.t, i, idx);
      CHECKF(close_f(get(&o.t, idx), want, 1e-15, 0.0), "cdist p=%g [%d]: %.17g want %.17g", ps[k], i,
             get(&o.t, idx), want);
    }
  }
  /* bad inputs: a negative p, integer rows, mismatched columns */
  tpu_k_value_t neg[4] = {vt(&x1.t), vt(&x2.t), vd(-1.0), vn()};
  CHECK_STATUS(call_op("aten::_cdist_forward", 4, neg, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "non-negative");
  tpu_tensor_t xi = x1.t;
  xi.dtype = TPU_DTYPE_I64;
  tpu_k_value_t ints[4] = {vt(&xi), vt(&x2.t), vd(2.0), vn()};
  CHECK_STATUS(call_op("aten::_cdist_forward", 4, ints, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "floating");
  tpu_tensor_t narrow = x2.t;
  narrow.sizes[1] = 2;
  tpu_k_value_t cols[4] = {vt(&x1.t), vt(&narrow), vd(2.0), vn()};
  CHECK_STATUS(call_op("aten::_cdist_forward", 4, cols, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "columns");
  /* pdist: rows (0, 1), (3, -1), (1, 1), (0, 1) -> pairs 01 02 03 12 13 23 */
  static const double px[8] = {0, 1, 3, -1, 1, 1, 0, 1}, pw2[6] = {13, 1, 0, 8, 13, 1};
  int64_t sx[2] = {4, 2}, sp[1] = {6};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, sx, NULL, 3, 16), po = tku_alloc(TPU_DTYPE_F32, 1, sp, NULL, 2, 16);
  for (int i = 0; i < 8; ++i) {
    unravel(&x.t, i, idx);
    set(&x.t, idx, px[i]);
  }
  tpu_k_value_t pargs[2] = {vt(&x.t), vd(2.0)};
  CHECK_OK(call_op("aten::_pdist_forward", 2, pargs, 1, &po.t));
  for (int i = 0; i < 6; ++i)
    CHECKF(close_f(get1(&po.t, i), sqrt(pw2[i]), 1e-7, 0.0), "pdist [%d]: %.9g want %.9g", i, get1(&po.t, i),
           sqrt(pw2[i]));
  tpu_k_value_t p1[2] = {vt(&x1.t), vd(2.0)}; /* pdist's output must have n (n - 1) / 2 elements */
  CHECK_STATUS(call_op("aten::_pdist_forward", 2, p1, 1, &po.t), TPU_STATUS_INVALID_ARGUMENT, "pdist");
  fr(&x1);
  fr(&x2);
  fr(&o);
  fr(&x);
  fr(&po);
}

/* segment_reduce max over dim 0 of [5, 2] with lengths [2, 0, 3]: the empty
 * segment is -inf; lengths that do not cover the data, or reach past it
 * with unsafe=True, are errors (read before any element). */
static void test_segment_reduce(void) {
  int64_t sd[2] = {5, 2}, sl[1] = {3}, so[2] = {3, 2};
  tt_t d = tku_alloc(TPU_DTYPE_F32, 2, sd, NULL, 2, 16), l = tku_alloc(TPU_DTYPE_I64, 1, sl, NULL, 1, 16);
  tt_t o = tku_alloc(TPU_DTYPE_F32, 2, so, NULL, 1, 16);
  int64_t idx[2];
  for (int i = 0; i < 10; ++i) {
    unravel(&d.t, i, idx);
    set(&d.t, idx, i + 1);
  }
  const int64_t lv[3] = {2, 0, 3};
  for (int i = 0; i < 3; ++i) ((int64_t*)l.t.data)[i] = lv[i];
  tpu_k_value_t args[8] = {vt(&d.t), vs("max"), vt(&l.t), vn(), vn(), vi(0), vb(false), vn()};
  CHECK_OK(call_op("aten::segment_reduce", 8, args, 1, &o.t));
  static const double want[6] = {3, 4, -INFINITY, -INFINITY, 9, 10};
  for (int i = 0; i < 6; ++i) {
    unravel(&o.t, i, idx);
    CHECKF(get(&o.t, idx) == want[i], "segment_reduce max [%d]: %g want %g", i, get(&o.t, idx), want[i]);
  }
  args[1] = vs("mean");
  CHECK_OK(call_op("aten::segment_reduce", 8, args, 1, &o.t));
  idx[0] = 1;
  idx[1] = 0;
  CHECK(isnan(get(&o.t, idx)));
  ((int64_t*)l.t.data)[2] = 2; /* rows sum to 4 of 5 */
  CHECK_STATUS(call_op("aten::segment_reduce", 8, args, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "sum to");
  ((int64_t*)l.t.data)[2] = 9; /* past the end, unsafe */
  args[6] = vb(true);
  CHECK_STATUS(call_op("aten::segment_reduce", 8, args, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "outside");
  ((int64_t*)l.t.data)[1] = -1;
  CHECK_STATUS(call_op("aten::segment_reduce", 8, args, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "outside");
  args[1] = vs("median");
  CHECK_STATUS(call_op("aten::segment_reduce", 8, args, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "reduce");
  fr(&d);
  fr(&l);
  fr(&o);
}

/* ---- the kernel table: tpu_k_lookup's hash index agrees with a scan ---- */
static void* lookup_all(void* arg) {
  (void)arg;
  size_t bad = 0;
  for (size_t i = 0; i < tpu_k_entry_count(); ++i) {
    const tpu_k_entry_t* e = tpu_k_entry_at(i);
    const tpu_k_entry_t* first = NULL; /* the first entry of that name, in table order */
    for (size_t j = 0; j <= i && !first; ++j) {
      if (strcmp(tpu_k_entry_at(j)->name, e->name) == 0) first = tpu_k_entry_at(j);
    }
    bad += tpu_k_lookup(e->name) != first;
  }
  return (void*)bad;
}

static void test_registry_lookup(void) {
  /* first lookups from four threads at once: the index is built once */
  pthread_t th[4];
  for (int t = 0; t < 4; ++t) CHECK(pthread_create(&th[t], NULL, lookup_all, NULL) == 0);
  for (int t = 0; t < 4; ++t) {
    void* bad = NULL;
    CHECK(pthread_join(th[t], &bad) == 0);
    CHECK(bad == NULL);
  }
  CHECK(tpu_k_entry_count() > 500);
  CHECK(tpu_k_lookup("aten::add.Tensor") != NULL);
  CHECK_STREQ(tpu_k_lookup("aten::add.Tensor")->name, "aten::add.Tensor");
  const char* missing[] = {"aten::no_such_op", "", "aten::add.Tensorx", "aten::add.Tenso", "aten::ad", "tpu::"};
  for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); ++i) CHECK(tpu_k_lookup(missing[i]) == NULL);
  CHECK(tpu_k_lookup(NULL) == NULL);
}

int main(void) {
  RUN_TEST(test_registry_lookup); /* first: no lookup may have built the index yet */
  if (!tku_start(2)) return 1;
  RUN_TEST(test_histc_float);
  RUN_TEST(test_histc_int);
  RUN_TEST(test_eye);
  RUN_TEST(test_erfinv);
  RUN_TEST(test_log_sigmoid);
  RUN_TEST(test_distances);
  RUN_TEST(test_segment_reduce);
  return tku_finish();
}
