/* test_k_select.c - data-dependent ops (nonzero, masked_select, unique*,
 * bincount) through check() + shape() + run() as the bridge drives them,
 * plus nonzero_static and masked_scatter, against naive references. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { return tku_xorshift(&g_rng); }
static int64_t rint_(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo)); }

/* perm: memory order of dims (outermost first); NULL = contiguous */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  return tku_alloc(dtype, ndim, sizes, perm, 1, 16);
}


/* The bridge's path for a data-dependent op: check (no outputs), shape(),
 * allocate contiguous outputs, check + run. outs[] receive the outputs. */
static tpu_status_t dyn_op(const char* name, int nargs, const tpu_k_value_t* args, int nout, tt_t* outs) {
  const tpu_k_entry_t* e = tpu_k_lookup(name);
  if (!e || !e->shape) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "no dynamic entry %s", name);
  tpu_k_call_t c = mkcall(name, nargs, args, nout, NULL);
  if (e->check) TPU_RETURN_IF_ERROR(e->check(&c));
  tpu_tensor_t shapes[4];
  memset(shapes, 0, sizeof(shapes));
  TPU_RETURN_IF_ERROR(e->shape(&c, shapes));
  tpu_tensor_t ot[4];
  for (int i = 0; i < nout; ++i) {
    outs[i] = mk(shapes[i].dtype, shapes[i].ndim, shapes[i].sizes, NULL);
    ot[i] = outs[i].t;
  }
  return call_op(name, nargs, args, nout, ot);
}

/* ---- nonzero ---------------------------------------------------------------------- */

static void test_nonzero(void) {
  int64_t s[3] = {4, 5, 6};
  int perm[3] = {2, 0, 1};
  int dts[4] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_I32, TPU_DTYPE_BOOL};
  for (int t = 0; t < 4; ++t) {
    tt_t x = mk(dts[t], 3, s, perm);
    for (int64_t i = 0; i < 120; ++i) setf(&x.t, i, rnd() % 3 == 0 ? (double)rint_(1, 5) : 0.0);
    if (dts[t] == TPU_DTYPE_F32) {
      setf(&x.t, 1, -0.0);
      setf(&x.t, 2, NAN);
    }
    int64_t expect = 0;
    for (int64_t i = 0; i < 120; ++i) expect += getf(&x.t, i) != 0.0 || isnan(getf(&x.t, i));
    tt_t o[1];
    tpu_k_value_t a[1] = {vt(&x.t)};
    bool st = ok(dyn_op("aten::nonzero", 1, a, 1, o));
    int bad = 0;
    if (st) {
      CHECKF(o[0].t.sizes[0] == expect && o[0].t.sizes[1] == 3, "nonzero rows %lld vs %lld", (long long)o[0].t.sizes[0],
             (long long)expect);
      int64_t r = 0;
      for (int64_t i = 0; i < 120 && r < o[0].t.sizes[0]; ++i) {
        double v = getf(&x.t, i);
        if (v == 0.0) continue;
        int64_t idx[3];
        unravel(&x.t, i, idx);
        const int64_t* row = (const int64_t*)o[0].buf + r * 3;
        bad += row[0] != idx[0] || row[1] != idx[1] || row[2] != idx[2];
        ++r;
      }
      fr(&o[0]);
    }
    CHECKF(st && bad == 0, "nonzero dtype %d bad=%d", dts[t], bad);
    /* nonzero_static: fewer and more rows than nonzeros */
    for (int k = 0; k < 2; ++k) {
      int64_t size = k ? expect + 3 : expect / 2;
      int64_t os[2] = {size, 3};
      tt_t so = mk(TPU_DTYPE_I64, 2, os, NULL);
      tpu_k_value_t b[3] = {vt(&x.t), vi(size), vi(-9)};
      st = ok(call_op("aten::nonzero_static", 3, b, 1, &so.t));
      int64_t r = 0;
      bad = 0;
      for (int64_t i = 0; i < 120 && r < size; ++i) {
        if (getf(&x.t, i) == 0.0) continue;
        int64_t idx[3];
        unravel(&x.t, i, idx);
        const int64_t* row = (const int64_t*)so.buf + r * 3;
        bad += row[0] != idx[0] || row[1] != idx[1] || row[2] != idx[2];
        ++r;
      }
      for (; r < size; ++r) bad += ((int64_t*)so.buf)[r * 3] != -9 || ((int64_t*)so.buf)[r * 3 + 2] != -9;
      CHECKF(st && bad == 0, "nonzero_static size %lld bad=%d", (long long)size, bad);
      fr(&so);
    }
    /* run() with a wrongly sized output is an error, not an overflow */
    int64_t ws[2] = {expect - 1, 3};
    tt_t wo = mk(TPU_DTYPE_I64, 2, ws, NULL);
    CHECK_STATUS(call_op("aten::nonzero", 1, a, 1, &wo.t), TPU_STATUS_INVALID_ARGUMENT, "nonzero elements");
    fr(&wo);
    fr(&x);
  }
  /* 0-dim and empty */
  tt_t z = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  *(float*)z.buf = 2.0f;
  tt_t o[1];
  tpu_k_value_t a[1] = {vt(&z.t)};
  bool st = ok(dyn_op("aten::nonzero", 1, a, 1, o));
  CHECK(st && o[0].t.ndim == 2 && o[0].t.sizes[0] == 1 && o[0].t.sizes[1] == 0);
  if (st) fr(&o[0]);
  int64_t e0[2] = {3, 0};
  tt_t em = mk(TPU_DTYPE_F32, 2, e0, NULL);
  a[0] = vt(&em.t);
  st = ok(dyn_op("aten::nonzero", 1, a, 1, o));
  CHECK(st && o[0].t.sizes[0] == 0 && o[0].t.sizes[1] == 2);
  if (st) fr(&o[0]);
  fr(&z);
  fr(&em);
}

/* ---- masked_select / masked_scatter ----------------------------------------------------- */

static void test_masked(void) {
  /* self [3, 1, 5] (non-contiguous) with mask [4, 1] -> broadcast [3, 4, 5] */
  int64_t ss[3] = {3, 1, 5}, ms[2] = {4, 1};
  int perm[3] = {2, 1, 0};
  tt_t x = mk(TPU_DTYPE_F32, 3, ss, perm), m = mk(TPU_DTYPE_BOOL, 2, ms, NULL);
  for (int64_t i = 0; i < 15; ++i) setf(&x.t, i, (double)i);
  ((uint8_t*)m.buf)[0] = 1;
  ((uint8_t*)m.buf)[2] = 1;
  tt_t o[1];
  tpu_k_value_t a[2] = {vt(&x.t), vt(&m.t)};
  bool st = ok(dyn_op("aten::masked_select", 2, a, 1, o));
  int bad = 0;
  if (st) {
    CHECKF(o[0].t.ndim == 1 && o[0].t.sizes[0] == 30, "masked_select size %lld", (long long)o[0].t.sizes[0]);
    int64_t c = 0;
    for (int64_t i0 = 0; i0 < 3; ++i0)
      for (int64_t i1 = 0; i1 < 4; ++i1)
        for (int64_t i2 = 0; i2 < 5; ++i2) {
          if (!((uint8_t*)m.buf)[i1]) continue;
          if (c < o[0].t.sizes[0]) bad += ((float*)o[0].buf)[c] != (float)(i0 * 5 + i2);
          ++c;
        }
    fr(&o[0]);
  }
  CHECKF(st && bad == 0, "masked_select bad=%d", bad);
  /* masked_scatter_ in place on [3, 4] with mask [4] (broadcast), source 2-D */
  int64_t ys[2] = {3, 4}, ms1[1] = {4}, srs[2] = {4, 5};
  tt_t y = mk(TPU_DTYPE_I64, 2, ys, NULL), m1 = mk(TPU_DTYPE_BOOL, 1, ms1, NULL), src = mk(TPU_DTYPE_I64, 2, srs, perm + 1);
  for (int64_t i = 0; i < 12; ++i) ((int64_t*)y.buf)[i] = -1;
  for (int64_t i = 0; i < 20; ++i) setf(&src.t, i, 100.0 + (double)i);
  ((uint8_t*)m1.buf)[1] = 1;
  ((uint8_t*)m1.buf)[3] = 1;
  tpu_k_value_t b[3] = {vt(&y.t), vt(&m1.t), vt(&src.t)};
  st = ok(call_op("aten::masked_scatter_", 3, b, 1, &y.t));
  bad = 0;
  int64_t k = 0;
  for (int64_t i = 0; i < 12; ++i) {
    int64_t want = ((uint8_t*)m1.buf)[i % 4] ? 100 + k++ : -1;
    bad += ((int64_t*)y.buf)[i] != want;
  }
  CHECKF(st && bad == 0, "masked_scatter_ bad=%d", bad);
  /* functional form: out = broadcast(self [4], mask [3, 4]) */
  int64_t m2s[2] = {3, 4};
  tt_t self1 = mk(TPU_DTYPE_I64, 1, ms1, NULL), m2 = mk(TPU_DTYPE_BOOL, 2, m2s, NULL), out = mk(TPU_DTYPE_I64, 2, ys, NULL);
  for (int64_t i = 0; i < 4; ++i) ((int64_t*)self1.buf)[i] = 7 + i;
  for (int64_t i = 0; i < 12; ++i) ((uint8_t*)m2.buf)[i] = (uint8_t)(i % 3 == 0);
  tpu_k_value_t c3[3] = {vt(&self1.t), vt(&m2.t), vt(&src.t)};
  st = ok(call_op("aten::masked_scatter", 3, c3, 1, &out.t));
  bad = 0;
  k = 0;
  for (int64_t i = 0; i < 12; ++i) {
    int64_t want = i % 3 == 0 ? 100 + k++ : 7 + i % 4;
    bad += ((int64_t*)out.buf)[i] != want;
  }
  CHECKF(st && bad == 0, "masked_scatter bad=%d", bad);
  /* source too small */
  int64_t s2[1] = {2};
  tt_t small = mk(TPU_DTYPE_I64, 1, s2, NULL);
  c3[2] = vt(&small.t);
  CHECK_STATUS(call_op("aten::masked_scatter", 3, c3, 1, &out.t), TPU_STATUS_INVALID_ARGUMENT,
               "Number of elements of source < number of ones in mask");
  /* mask dtype */
  c3[1] = vt(&y.t);
  CHECK_STATUS(call_op("aten::masked_scatter", 3, c3, 1, &out.t), TPU_STATUS_INVALID_ARGUMENT, "boolean masks");
  fr(&x); fr(&m); fr(&y); fr(&m1); fr(&src); fr(&self1); fr(&m2); fr(&out); fr(&small);
}

/* ---- bincount ---------------------------------------------------------------------------- */

static void test_bincount(void) {
  int64_t n[1] = {50};
  tt_t x = mk(TPU_DTYPE_I32, 1, n, NULL), w = mk(TPU_DTYPE_F32, 1, n, NULL), wd = mk(TPU_DTYPE_BF16, 1, n, NULL);
  for (int64_t i = 0; i < 50; ++i) {
    ((int32_t*)x.buf)[i] = (int32_t)rint_(0, 9);
    setf(&w.t, i, (double)rint_(-4, 4) * 0.5);
    setf(&wd.t, i, (double)rint_(-4, 4) * 0.5);
  }
  for (int mode = 0; mode < 3; ++mode) {
    for (int64_t minlen = 0; minlen <= 12; minlen += 12) {
      tt_t o[1];
      tpu_k_value_t a[3] = {vt(&x.t), mode == 0 ? vn() : vt(mode == 1 ? &w.t : &wd.t), vi(minlen)};
      bool st = ok(dyn_op("aten::bincount", 3, a, 1, o));
      int bad = 0;
      if (st) {
        int64_t mx = 0;
        for (int64_t i = 0; i < 50; ++i) mx = ((int32_t*)x.buf)[i] > mx ? ((int32_t*)x.buf)[i] : mx;
        int64_t len = mx + 1 > minlen ? mx + 1 : minlen;
        int want_dt = mode == 0 ? TPU_DTYPE_I64 : mode == 1 ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
        CHECKF(o[0].t.sizes[0] == len && o[0].t.dtype == want_dt, "bincount len %lld dtype %d", (long long)o[0].t.sizes[0],
               o[0].t.dtype);
        for (int64_t b = 0; b < o[0].t.sizes[0]; ++b) {
          double ref = 0;
          for (int64_t i = 0; i < 50; ++i)
            if (((int32_t*)x.buf)[i] == b) ref += mode == 0 ? 1.0 : getf(mode == 1 ? &w.t : &wd.t, i);
          bad += getf(&o[0].t, b) != ref;
        }
        fr(&o[0]);
      }
      CHECKF(st && bad == 0, "bincount mode %d minlength %lld bad=%d", mode, (long long)minlen, bad);
    }
  }
  ((int32_t*)x.buf)[7] = -1;
  tt_t o[1];
  tpu_k_value_t a[3] = {vt(&x.t), vn(), vi(0)};
  CHECK_STATUS(dyn_op("aten::bincount", 3, a, 1, o), TPU_STATUS_INVALID_ARGUMENT, "non-negative");
  int64_t z[1] = {0};
  tt_t e = mk(TPU_DTYPE_I64, 1, z, NULL);
  tpu_k_value_t b[3] = {vt(&e.t), vn(), vi(3)};
  bool st = ok(dyn_op("aten::bincount", 3, b, 1, o));
  CHECK(st && o[0].t.sizes[0] == 3 && ((int64_t*)o[0].buf)[2] == 0);
  if (st) fr(&o[0]);
  fr(&x); fr(&w); fr(&wd); fr(&e);
}

/* ---- unique --------------------------------------------------------------------------------
 * Reference: items sorted by (class, index) with qsort; NaN after numbers,
 * each NaN its own class. */

typedef struct {
  double v;
  int64_t i;
} ref_item_t;

static int ref_cls(double a, int64_t ia, double b, int64_t ib) {
  bool na = isnan(a), nb = isnan(b);
  if (na || nb) {
    if (na && nb) return (ia > ib) - (ia < ib);
    return na ? 1 : -1;
  }
  return (a > b) - (a < b);
}
static int ref_qcmp(const void* pa, const void* pb) {
  const ref_item_t* a = (const ref_item_t*)pa;
  const ref_item_t* b = (const ref_item_t*)pb;
  int c = ref_cls(a->v, a->i, b->v, b->i);
  return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* Checks flat _unique2 outputs against the reference. Returns #mismatches. */
static int check_unique_flat(const tpu_tensor_t* x, const tt_t* o, bool inv, bool cnt) {
  int64_t n = tpu_tensor_numel(x);
  ref_item_t* it = (ref_item_t*)malloc(sizeof(ref_item_t) * (size_t)(n + 1));
  int64_t* cls = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n + 1));
  int64_t* counts = (int64_t*)calloc((size_t)(n + 1), sizeof(int64_t));
  double* vals = (double*)malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; ++i) {
    it[i].v = getf(x, i);
    it[i].i = i;
  }
  qsort(it, (size_t)n, sizeof(ref_item_t), ref_qcmp);
  int64_t k = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (j == 0 || ref_cls(it[j - 1].v, it[j - 1].i, it[j].v, it[j].i) != 0) {
      ++k;
      vals[k] = it[j].v;
    }
    cls[it[j].i] = k;
    counts[k]++;
  }
  int64_t K = k + 1;
  int bad = 0;
  if (o[0].t.sizes[0] != K) {
    printf("  K %lld vs ref %lld\n", (long long)o[0].t.sizes[0], (long long)K);
    bad++;
  } else {
    for (int64_t c = 0; c < K; ++c) {
      double g = getf(&o[0].t, c);
      if (!(g == vals[c] || (isnan(g) && isnan(vals[c]))) || signbit(g) != signbit(vals[c])) bad++;
    }
    if (inv) {
      if (tpu_tensor_numel(&o[1].t) != n) bad++;
      else
        for (int64_t i = 0; i < n; ++i) bad += geti(&o[1].t, i) != cls[i];
    } else {
      bad += tpu_tensor_numel(&o[1].t) != 0;
    }
    if (cnt) {
      for (int64_t c = 0; c < K; ++c) bad += geti(&o[2].t, c) != counts[c];
    } else {
      bad += tpu_tensor_numel(&o[2].t) != 0;
    }
  }
  free(it);
  free(cls);
  free(counts);
  free(vals);
  return bad;
}

static void test_unique_flat(void) {
  /* fixed case mirroring PyTorch: [nan, 1, nan, -0, 0, 1, 3] */
  {
    float v[7] = {NAN, 1.0f, NAN, -0.0f, 0.0f, 1.0f, 3.0f};
    int64_t n7[1] = {7};
    tt_t x = mk(TPU_DTYPE_F32, 1, n7, NULL);
    memcpy(x.buf, v, sizeof(v));
    tt_t o[3];
    tpu_k_value_t a[4] = {vt(&x.t), vb(true), vb(true), vb(true)};
    bool st = ok(dyn_op("aten::_unique2", 4, a, 3, o));
    if (st) {
      const float* u = (const float*)o[0].buf;
      const int64_t* inv = (const int64_t*)o[1].buf;
      const int64_t* c = (const int64_t*)o[2].buf;
      CHECKF(o[0].t.sizes[0] == 5 && signbit(u[0]) && u[1] == 1.0f && u[2] == 3.0f && isnan(u[3]) && isnan(u[4]),
             "unique nan/zero values");
      CHECKF(inv[0] == 3 && inv[1] == 1 && inv[2] == 4 && inv[3] == 0 && inv[4] == 0 && inv[5] == 1 && inv[6] == 2,
             "unique nan inverse [%lld %lld %lld %lld %lld %lld %lld]", (long long)inv[0], (long long)inv[1],
             (long long)inv[2], (long long)inv[3], (long long)inv[4], (long long)inv[5], (long long)inv[6]);
      CHECKF(c[0] == 2 && c[1] == 2 && c[2] == 1 && c[3] == 1 && c[4] == 1, "unique nan counts");
      for (int i = 0; i < 3; ++i) fr(&o[i]);
    }
    CHECK(st);
    fr(&x);
  }
  /* random: several dtypes, small and large K (> the batch capacity),
   * non-contiguous input, all flag combinations */
  struct {
    int dt;
    int64_t r0, r1, range;
  } cases[] = {
      {TPU_DTYPE_I64, 37, 29, 40},       {TPU_DTYPE_F32, 50, 40, 1000},   {TPU_DTYPE_BF16, 16, 16, 64},
      {TPU_DTYPE_I32, 100, 90, 6000},    {TPU_DTYPE_F64, 80, 75, 100000}, {TPU_DTYPE_BOOL, 9, 7, 2},
      {TPU_DTYPE_U8, 30, 31, 256},       {TPU_DTYPE_I16, 65, 67, 5000},
      /* several bitmap windows; a range too wide for them (sorted batches) */
      {TPU_DTYPE_I32, 70, 70, 3000000},  {TPU_DTYPE_I64, 90, 80, 1000000000000},
  };
  int perm[2] = {1, 0};
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    int64_t s[2] = {cases[ci].r0, cases[ci].r1};
    tt_t x = mk(cases[ci].dt, 2, s, perm);
    int64_t n = s[0] * s[1];
    for (int64_t i = 0; i < n; ++i) {
      double v = (double)rint_(0, cases[ci].range) - (cases[ci].dt == TPU_DTYPE_U8 || cases[ci].dt == TPU_DTYPE_BOOL ? 0 : cases[ci].range / 3);
      if (cases[ci].dt == TPU_DTYPE_F32 && i % 97 == 5) v = NAN;
      setf(&x.t, i, v);
    }
    for (int f = 0; f < 4; ++f) {
      bool inv = f & 1, cnt = (f >> 1) & 1;
      tt_t o[3];
      tpu_k_value_t a[4] = {vt(&x.t), vb(f == 2), vb(inv), vb(cnt)};
      bool st = ok(dyn_op("aten::_unique2", 4, a, 3, o));
      int bad = st ? check_unique_flat(&x.t, o, inv, cnt) : -1;
      CHECKF(st && bad == 0, "_unique2 case %zu flags %d bad=%d", ci, f, bad);
      if (st)
        for (int i = 0; i < 3; ++i) fr(&o[i]);
    }
    /* _unique (two outputs) */
    tt_t o[3];
    tpu_k_value_t a[3] = {vt(&x.t), vb(true), vb(true)};
    bool st = ok(dyn_op("aten::_unique", 3, a, 2, o));
    if (st) {
      int64_t z[1] = {0};
      o[2] = mk(TPU_DTYPE_I64, 1, z, NULL);
      int bad = check_unique_flat(&x.t, o, true, false);
      CHECKF(bad == 0, "_unique case %zu bad=%d", ci, bad);
      for (int i = 0; i < 3; ++i) fr(&o[i]);
    }
    CHECK(st);
    fr(&x);
  }
  /* empty and 0-dim */
  int64_t e[2] = {0, 3};
  tt_t x = mk(TPU_DTYPE_F32, 2, e, NULL);
  tt_t o[3];
  tpu_k_value_t a[4] = {vt(&x.t), vb(true), vb(true), vb(true)};
  bool st = ok(dyn_op("aten::_unique2", 4, a, 3, o));
  CHECK(st && o[0].t.sizes[0] == 0 && o[1].t.ndim == 2 && o[1].t.sizes[1] == 3 && o[2].t.sizes[0] == 0);
  if (st)
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  fr(&x);
  x = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  *(int64_t*)x.buf = 5;
  a[0] = vt(&x.t);
  st = ok(dyn_op("aten::_unique2", 4, a, 3, o));
  CHECK(st && o[0].t.sizes[0] == 1 && o[1].t.ndim == 0 && *(int64_t*)o[1].buf == 0 && *(int64_t*)o[2].buf == 1);
  if (st)
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  fr(&x);
}

/* rows of a [n, w] int64 matrix (row i at p + i*w) */
static int row_cmp(const int64_t* a, const int64_t* b, int64_t w) {
  for (int64_t j = 0; j < w; ++j)
    if (a[j] != b[j]) return a[j] < b[j] ? -1 : 1;
  return 0;
}

static void test_unique_dim(void) {
  /* [n, w] int64 with few distinct rows, and [w, n] viewed along dim 1;
   * n large enough for several batches in the second case */
  int64_t ns[2] = {300, 5000};
  int64_t dr[2] = {7, 3000};
  for (int c = 0; c < 2; ++c) {
    int64_t n = ns[c], w = 3;
    int64_t* rows = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n * w));
    int64_t* protos = (int64_t*)malloc(sizeof(int64_t) * (size_t)(dr[c] * w));
    for (int64_t p = 0; p < dr[c] * w; ++p) protos[p] = rint_(-3, 3) * 1000 + p;
    for (int64_t i = 0; i < n; ++i) memcpy(rows + i * w, protos + rint_(0, dr[c]) * w, sizeof(int64_t) * (size_t)w);
    for (int dim = 0; dim < 2; ++dim) {
      /* dim 0: x [n, w]; dim 1: x [w, n] (x[j, i] = row i's j) */
      int64_t s[2] = {dim ? w : n, dim ? n : w};
      int perm[2] = {1, 0};
      tt_t x = mk(TPU_DTYPE_I64, 2, s, dim ? NULL : perm);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j) {
          int64_t idx[2] = {dim ? j : i, dim ? i : j};
          *(int64_t*)ep(&x.t, idx) = rows[i * w + j];
        }
      /* reference: sorted distinct rows */
      int64_t* sorted = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n * w));
      memcpy(sorted, rows, sizeof(int64_t) * (size_t)(n * w));
      /* insertion-free: simple qsort on row pointers via index array */
      int64_t K = 0;
      int64_t* uniq = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n * w));
      /* O(n * K) reference (fine for these sizes) */
      for (int64_t i = 0; i < n; ++i) {
        int64_t lo = 0, hi = K;
        while (lo < hi) {
          int64_t mid = (lo + hi) / 2;
          int cc = row_cmp(uniq + mid * w, rows + i * w, w);
          if (cc < 0) lo = mid + 1;
          else hi = mid;
        }
        if (lo < K && row_cmp(uniq + lo * w, rows + i * w, w) == 0) continue;
        memmove(uniq + (lo + 1) * w, uniq + lo * w, sizeof(int64_t) * (size_t)((K - lo) * w));
        memcpy(uniq + lo * w, rows + i * w, sizeof(int64_t) * (size_t)w);
        K++;
      }
      tt_t o[3];
      tpu_k_value_t a[5] = {vt(&x.t), vi(dim), vb(true), vb(false), vb(false)};
      bool st = ok(dyn_op("aten::unique_dim", 5, a, 3, o));
      int bad = 0;
      if (st) {
        CHECKF(o[0].t.sizes[dim] == K && o[1].t.sizes[0] == n && o[2].t.sizes[0] == K, "unique_dim K %lld vs %lld",
               (long long)o[0].t.sizes[dim], (long long)K);
        if (o[0].t.sizes[dim] == K) {
          for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < w; ++j) {
              int64_t idx[2] = {dim ? j : k, dim ? k : j};
              bad += *(int64_t*)ep(&o[0].t, idx) != uniq[k * w + j];
            }
          int64_t total = 0;
          for (int64_t i = 0; i < n; ++i) {
            int64_t g = ((int64_t*)o[1].buf)[i];
            bad += g < 0 || g >= K || row_cmp(uniq + g * w, rows + i * w, w) != 0;
          }
          for (int64_t k = 0; k < K; ++k) total += ((int64_t*)o[2].buf)[k];
          bad += total != n;
        }
        for (int i = 0; i < 3; ++i) fr(&o[i]);
      }
      CHECKF(st && bad == 0, "unique_dim case %d dim %d bad=%d", c, dim, bad);
      /* consecutive along the same dim */
      tpu_k_value_t b[4] = {vt(&x.t), vi(dim), vb(true), vb(true)};
      st = ok(dyn_op("aten::unique_dim_consecutive", 4, b, 3, o));
      bad = 0;
      if (st) {
        int64_t runs = 0;
        for (int64_t i = 0; i < n; ++i) runs += i == 0 || row_cmp(rows + (i - 1) * w, rows + i * w, w) != 0;
        bad += o[0].t.sizes[dim] != runs;
        int64_t r = -1;
        for (int64_t i = 0; i < n && !bad; ++i) {
          if (i == 0 || row_cmp(rows + (i - 1) * w, rows + i * w, w) != 0) ++r;
          bad += ((int64_t*)o[1].buf)[i] != r;
        }
        for (int i = 0; i < 3; ++i) fr(&o[i]);
      }
      CHECKF(st && bad == 0, "unique_dim_consecutive case %d dim %d bad=%d", c, dim, bad);
      free(sorted);
      free(uniq);
      fr(&x);
    }
    free(rows);
    free(protos);
  }
  /* zero-size rules */
  int64_t s03[2] = {0, 3}, s30[2] = {3, 0}, s00[2] = {0, 0};
  tt_t a03 = mk(TPU_DTYPE_F32, 2, s03, NULL), a30 = mk(TPU_DTYPE_F32, 2, s30, NULL), a00 = mk(TPU_DTYPE_F32, 2, s00, NULL);
  tt_t o[3];
  tpu_k_value_t a[5] = {vt(&a03.t), vi(0), vb(true), vb(true), vb(true)};
  bool st = ok(dyn_op("aten::unique_dim", 5, a, 3, o));
  CHECK(st && o[0].t.sizes[0] == 0 && o[0].t.sizes[1] == 3 && o[1].t.sizes[0] == 0);
  if (st)
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  a[0] = vt(&a30.t);
  CHECK_STATUS(dyn_op("aten::unique_dim", 5, a, 3, o), TPU_STATUS_INVALID_ARGUMENT, "aren't selected");
  a[0] = vt(&a00.t);
  a[1] = vi(1);
  CHECK_STATUS(dyn_op("aten::unique_dim", 5, a, 3, o), TPU_STATUS_INVALID_ARGUMENT, "more than one");
  tt_t sc = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  a[0] = vt(&sc.t);
  a[1] = vi(0);
  CHECK_STATUS(dyn_op("aten::unique_dim", 5, a, 3, o), TPU_STATUS_OUT_OF_RANGE, "no dimensions");
  fr(&a03); fr(&a30); fr(&a00); fr(&sc);
}

static void test_unique_consecutive(void) {
  int64_t s[2] = {3, 4};
  tt_t x = mk(TPU_DTYPE_F32, 2, s, NULL);
  float v[12] = {1, 1, 2, 2, 2, NAN, NAN, 3, 3, 1, 1, 1};
  memcpy(x.buf, v, sizeof(v));
  tt_t o[3];
  tpu_k_value_t a[4] = {vt(&x.t), vb(true), vb(true), vn()};
  bool st = ok(dyn_op("aten::unique_consecutive", 4, a, 3, o));
  if (st) {
    const float* u = (const float*)o[0].buf;
    const int64_t* inv = (const int64_t*)o[1].buf;
    const int64_t* c = (const int64_t*)o[2].buf;
    CHECKF(o[0].t.sizes[0] == 6 && u[0] == 1 && u[1] == 2 && isnan(u[2]) && isnan(u[3]) && u[4] == 3 && u[5] == 1,
           "unique_consecutive values (K=%lld)", (long long)o[0].t.sizes[0]);
    CHECK(o[1].t.ndim == 2 && inv[0] == 0 && inv[4] == 1 && inv[5] == 2 && inv[6] == 3 && inv[11] == 5);
    CHECK(c[0] == 2 && c[1] == 3 && c[2] == 1 && c[3] == 1 && c[4] == 2 && c[5] == 3);
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  }
  CHECK(st);
  /* without inverse / counts: empty outputs */
  tpu_k_value_t b[4] = {vt(&x.t), vb(false), vb(false), vn()};
  st = ok(dyn_op("aten::unique_consecutive", 4, b, 3, o));
  CHECK(st && o[0].t.sizes[0] == 6 && o[1].t.sizes[0] == 0 && o[2].t.sizes[0] == 0);
  if (st)
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  /* with dim: rows [1,1,2,2], [2,nan,nan,3], [3,1,1,1] along dim 1 -> columns */
  tpu_k_value_t d[4] = {vt(&x.t), vb(false), vb(false), vi(-1)};
  st = ok(dyn_op("aten::unique_consecutive", 4, d, 3, o));
  CHECK(st && o[0].t.ndim == 2 && o[0].t.sizes[0] == 3 && o[0].t.sizes[1] == 4 && o[1].t.sizes[0] == 4);
  if (st)
    for (int i = 0; i < 3; ++i) fr(&o[i]);
  fr(&x);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_nonzero);
  RUN_TEST(test_masked);
  RUN_TEST(test_bincount);
  RUN_TEST(test_unique_flat);
  RUN_TEST(test_unique_dim);
  RUN_TEST(test_unique_consecutive);
  return tku_finish();
}
