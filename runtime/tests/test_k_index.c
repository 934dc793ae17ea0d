/* test_k_index.c - indexing, scatter/gather, cat, flip/roll, triu, ranges,
 * sort/topk against naive loops, and the out-of-range error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { return tku_urand(&g_rng); } /* [-1, 1) */

static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  return tku_alloc(dtype, ndim, sizes, perm, 1, 16);
}


static void fill(tt_t* x) {
  int64_t n = tpu_tensor_numel(&x->t);
  for (int64_t i = 0; i < n; ++i) setf(&x->t, i, floor(urand() * 100.0));
}
static void fill_idx(tt_t* x, int64_t lo, int64_t hi) {
  int64_t n = tpu_tensor_numel(&x->t);
  for (int64_t i = 0; i < n; ++i) setf(&x->t, i, lo + (int64_t)((urand() + 1) * 0.5 * (double)(hi - lo)) % (hi - lo));
}

/* ---- tests ------------------------------------------------------------------ */

static void test_index_select(void) {
  int64_t s[3] = {5, 6, 7};
  int perm[3] = {2, 0, 1};
  tt_t x = mk(TPU_DTYPE_F32, 3, s, perm);
  fill(&x);
  for (int dim = 0; dim < 3; ++dim) {
    int64_t ni[1] = {9};
    tt_t idx = mk(dim == 1 ? TPU_DTYPE_I32 : TPU_DTYPE_I64, 1, ni, NULL);
    fill_idx(&idx, 0, s[dim]);
    int64_t os[3] = {5, 6, 7};
    os[dim] = 9;
    tt_t o = mk(TPU_DTYPE_F32, 3, os, NULL);
    tpu_k_value_t a[3] = {vt(&x.t), vi(dim - 3), vt(&idx.t)};
    bool st = ok(call_op("aten::index_select", 3, a, 1, &o.t));
    int bad = 0;
    for (int64_t f = 0; f < 9 * 42; ++f) {
      int64_t oi[3];
      unravel(&o.t, f, oi);
      int64_t si[3] = {oi[0], oi[1], oi[2]};
      si[dim] = (int64_t)getf(&idx.t, oi[dim]);
      if (get(&o.t, oi) != get(&x.t, si)) bad++;
    }
    CHECKF(st && bad == 0, "index_select dim %d bad=%d", dim, bad);
    fr(&idx); fr(&o);
  }
  /* out of range */
  int64_t ni[1] = {3}, os[3] = {3, 6, 7};
  tt_t idx = mk(TPU_DTYPE_I64, 1, ni, NULL);
  ((int64_t*)idx.buf)[0] = 1;
  ((int64_t*)idx.buf)[1] = 7;
  tt_t o = mk(TPU_DTYPE_F32, 3, os, NULL);
  tpu_k_value_t a[3] = {vt(&x.t), vi(0), vt(&idx.t)};
  CHECK_STATUS(call_op("aten::index_select", 3, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE,
               "index_select: index 7 is out of bounds for dimension 0 with size 5");
  ((int64_t*)idx.buf)[1] = -1;
  CHECK_STATUS(call_op("aten::index_select", 3, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE, "index -1 is out of bounds");
  /* embedding-style: 2-D weight, many rows */
  int64_t ws[2] = {50, 33}, ni2[1] = {200}, eos[2] = {200, 33};
  tt_t w = mk(TPU_DTYPE_BF16, 2, ws, NULL), id2 = mk(TPU_DTYPE_I64, 1, ni2, NULL), eo = mk(TPU_DTYPE_BF16, 2, eos, NULL);
  fill(&w);
  fill_idx(&id2, 0, 50);
  tpu_k_value_t a2[3] = {vt(&w.t), vi(0), vt(&id2.t)};
  bool st = ok(call_op("aten::index_select", 3, a2, 1, &eo.t));
  int bad = 0;
  for (int64_t r = 0; r < 200; ++r)
    if (memcmp((uint16_t*)eo.buf + r * 33, (uint16_t*)w.buf + ((int64_t*)id2.buf)[r] * 33, 66)) bad++;
  CHECKF(st && bad == 0, "embedding rows bad=%d", bad);
  fr(&x); fr(&idx); fr(&o); fr(&w); fr(&id2); fr(&eo);
}

static void test_gather_scatter(void) {
  int64_t s[2] = {5, 8}, is[2] = {4, 6};
  int perm[2] = {1, 0};
  tt_t x = mk(TPU_DTYPE_F32, 2, s, perm);
  fill(&x);
  for (int dim = 0; dim < 2; ++dim) {
    tt_t idx = mk(TPU_DTYPE_I64, 2, is, NULL);
    fill_idx(&idx, 0, s[dim]);
    tt_t o = mk(TPU_DTYPE_F32, 2, is, NULL);
    tpu_k_value_t a[4] = {vt(&x.t), vi(dim), vt(&idx.t), vb(false)};
    bool st = ok(call_op("aten::gather", 4, a, 1, &o.t));
    int bad = 0;
    for (int64_t f = 0; f < 24; ++f) {
      int64_t ii[2];
      unravel(&idx.t, f, ii);
      int64_t si[2] = {ii[0], ii[1]};
      si[dim] = (int64_t)get(&idx.t, ii);
      if (get(&o.t, ii) != get(&x.t, si)) bad++;
    }
    CHECKF(st && bad == 0, "gather dim %d bad=%d", dim, bad);
    /* scatter_add into a copy of x, src larger than index */
    tt_t src = mk(TPU_DTYPE_F32, 2, s, NULL), out = mk(TPU_DTYPE_F32, 2, s, NULL), ref = mk(TPU_DTYPE_F64, 2, s, NULL);
    fill(&src);
    for (int64_t f = 0; f < 40; ++f) setf(&ref.t, f, getf(&x.t, f));
    for (int64_t f = 0; f < 24; ++f) {
      int64_t ii[2];
      unravel(&idx.t, f, ii);
      int64_t di[2] = {ii[0], ii[1]};
      di[dim] = (int64_t)get(&idx.t, ii);
      set(&ref.t, di, get(&ref.t, di) + get(&src.t, ii));
    }
    tpu_k_value_t b[4] = {vt(&x.t), vi(dim), vt(&idx.t), vt(&src.t)};
    st = ok(call_op("aten::scatter_add", 4, b, 1, &out.t));
    bad = 0;
    for (int64_t f = 0; f < 40; ++f) bad += getf(&out.t, f) != getf(&ref.t, f);
    CHECKF(st && bad == 0, "scatter_add dim %d bad=%d", dim, bad);
    /* scatter_.value in place */
    tpu_k_value_t c[4] = {vt(&out.t), vi(dim), vt(&idx.t), vd(-0.5)};
    st = ok(call_op("aten::scatter_.value", 4, c, 1, &out.t));
    bad = 0;
    for (int64_t f = 0; f < 24; ++f) {
      int64_t ii[2];
      unravel(&idx.t, f, ii);
      ii[dim] = (int64_t)get(&idx.t, ii);
      bad += get(&out.t, ii) != -0.5;
    }
    CHECKF(st && bad == 0, "scatter_.value dim %d", dim);
    fr(&idx); fr(&o); fr(&src); fr(&out); fr(&ref);
  }
  tt_t idx = mk(TPU_DTYPE_I64, 2, is, NULL), o = mk(TPU_DTYPE_F32, 2, is, NULL);
  ((int64_t*)idx.buf)[5] = 9;
  tpu_k_value_t a[4] = {vt(&x.t), vi(1), vt(&idx.t), vb(false)};
  CHECK_STATUS(call_op("aten::gather", 4, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE,
               "gather: index 9 is out of bounds for dimension 1 with size 8");
  tt_t so = mk(TPU_DTYPE_F32, 2, s, NULL);
  tpu_k_value_t b[4] = {vt(&x.t), vi(-1), vt(&idx.t), vd(1)};
  CHECK_STATUS(call_op("aten::scatter.value", 4, b, 1, &so.t), TPU_STATUS_OUT_OF_RANGE, "index 9 is out of bounds for dimension 1 with size 8");
  fr(&x); fr(&idx); fr(&o); fr(&so);
}

static void test_advanced_index(void) {
  int64_t s[3] = {4, 5, 6};
  int perm[3] = {1, 2, 0};
  tt_t x = mk(TPU_DTYPE_I32, 3, s, perm);
  fill(&x);
  /* x[i] with i [2,3] */
  int64_t is[2] = {2, 3};
  tt_t i0 = mk(TPU_DTYPE_I64, 2, is, NULL);
  fill_idx(&i0, -4, 4);
  tpu_tensor_t none;
  memset(&none, 0, sizeof(none));
  {
    int64_t os[4] = {2, 3, 5, 6};
    tt_t o = mk(TPU_DTYPE_I32, 4, os, NULL);
    tpu_tensor_t list[1] = {i0.t};
    tpu_k_value_t a[2] = {vt(&x.t), vts(list, 1)};
    bool st = ok(call_op("aten::index.Tensor", 2, a, 1, &o.t));
    int bad = 0;
    for (int64_t f = 0; f < 180; ++f) {
      int64_t oi[4];
      unravel(&o.t, f, oi);
      int64_t bi[2] = {oi[0], oi[1]};
      int64_t v = (int64_t)get(&i0.t, bi);
      int64_t si[3] = {v < 0 ? v + 4 : v, oi[2], oi[3]};
      bad += get(&o.t, oi) != get(&x.t, si);
    }
    CHECKF(st && bad == 0, "x[i] bad=%d", bad);
    fr(&o);
  }
  /* x[:, j, k] with j [3] and k [2,1] broadcast -> [4, 2, 3] */
  int64_t js[1] = {3}, ks[2] = {2, 1};
  tt_t j = mk(TPU_DTYPE_I32, 1, js, NULL), k = mk(TPU_DTYPE_I64, 2, ks, NULL);
  fill_idx(&j, 0, 5);
  fill_idx(&k, -6, 6);
  {
    int64_t os[3] = {4, 2, 3};
    tt_t o = mk(TPU_DTYPE_I32, 3, os, NULL);
    tpu_tensor_t list[3] = {none, j.t, k.t};
    tpu_k_value_t a[2] = {vt(&x.t), vts(list, 3)};
    bool st = ok(call_op("aten::index.Tensor", 2, a, 1, &o.t));
    int bad = 0;
    for (int64_t f = 0; f < 24; ++f) {
      int64_t oi[3];
      unravel(&o.t, f, oi);
      int64_t jj = ((int32_t*)j.buf)[oi[2]], kk = ((int64_t*)k.buf)[oi[1]];
      int64_t si[3] = {oi[0], jj, kk < 0 ? kk + 6 : kk};
      bad += get(&o.t, oi) != get(&x.t, si);
    }
    CHECKF(st && bad == 0, "x[:, j, k] bad=%d", bad);
    fr(&o);
  }
  /* non-adjacent x[i1, :, k1] with i1 [3], k1 [3] -> [3, 5] */
  {
    tt_t i1 = mk(TPU_DTYPE_I64, 1, js, NULL), k1 = mk(TPU_DTYPE_I64, 1, js, NULL);
    fill_idx(&i1, 0, 4);
    fill_idx(&k1, 0, 6);
    int64_t os[2] = {3, 5};
    tt_t o = mk(TPU_DTYPE_I32, 2, os, NULL);
    tpu_tensor_t list[3] = {i1.t, none, k1.t};
    tpu_k_value_t a[2] = {vt(&x.t), vts(list, 3)};
    bool st = ok(call_op("aten::index.Tensor", 2, a, 1, &o.t));
    int bad = 0;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t m = 0; m < 5; ++m) {
        int64_t oi[2] = {b, m}, si[3] = {((int64_t*)i1.buf)[b], m, ((int64_t*)k1.buf)[b]};
        bad += get(&o.t, oi) != get(&x.t, si);
      }
    CHECKF(st && bad == 0, "x[i, :, k] bad=%d", bad);
    /* out of range on dim 2 */
    ((int64_t*)k1.buf)[1] = 6;
    CHECK_STATUS(call_op("aten::index.Tensor", 2, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE,
                 "index 6 is out of bounds for dimension 2 with size 6");
    ((int64_t*)k1.buf)[1] = -7;
    CHECK_STATUS(call_op("aten::index.Tensor", 2, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE, "index -7 is out of bounds");
    fr(&i1); fr(&k1); fr(&o);
  }
  /* bool mask over the first two dims */
  {
    int64_t ms[2] = {4, 5};
    tt_t m = mk(TPU_DTYPE_BOOL, 2, ms, NULL);
    int64_t nnz = 0;
    for (int i = 0; i < 20; ++i) {
      ((uint8_t*)m.buf)[i] = (i * 7) % 3 == 0;
      nnz += (i * 7) % 3 == 0;
    }
    int64_t os[2] = {nnz, 6};
    tt_t o = mk(TPU_DTYPE_I32, 2, os, NULL);
    tpu_tensor_t list[1] = {m.t};
    tpu_k_value_t a[2] = {vt(&x.t), vts(list, 1)};
    bool st = ok(call_op("aten::index.Tensor", 2, a, 1, &o.t));
    int bad = 0, r = 0;
    for (int i = 0; i < 20; ++i) {
      if (!((uint8_t*)m.buf)[i]) continue;
      for (int c = 0; c < 6; ++c) {
        int64_t oi[2] = {r, c}, si[3] = {i / 5, i % 5, c};
        bad += get(&o.t, oi) != get(&x.t, si);
      }
      r++;
    }
    CHECKF(st && bad == 0, "x[mask] bad=%d", bad);
    /* index_put_ with the mask: x[mask] = 7 (values broadcast) */
    tt_t y = mk(TPU_DTYPE_I32, 3, s, NULL);
    fill(&y);
    tt_t ycopy = mk(TPU_DTYPE_I32, 3, s, NULL);
    memcpy(ycopy.buf, y.buf, 120 * 4);
    tt_t seven = mk(TPU_DTYPE_I32, 0, NULL, NULL);
    *(int32_t*)seven.buf = 7;
    tpu_k_value_t p[4] = {vt(&y.t), vts(list, 1), vt(&seven.t), vb(false)};
    st = ok(call_op("aten::index_put_", 4, p, 1, &y.t));
    bad = 0;
    for (int i = 0; i < 120; ++i) {
      int pos = i / 6;
      int want = ((uint8_t*)m.buf)[pos] ? 7 : ((int32_t*)ycopy.buf)[i];
      bad += ((int32_t*)y.buf)[i] != want;
    }
    CHECKF(st && bad == 0, "x[mask] = 7 bad=%d", bad);
    fr(&m); fr(&o); fr(&y); fr(&ycopy); fr(&seven);
  }
  /* index_put_ accumulate with duplicate indices: y[i] += v, i = [1, 3, 1] */
  {
    int64_t ys[2] = {4, 3}, ns[1] = {3}, vs[2] = {3, 3};
    tt_t y = mk(TPU_DTYPE_F32, 2, ys, NULL), ii = mk(TPU_DTYPE_I64, 1, ns, NULL), v = mk(TPU_DTYPE_F32, 2, vs, NULL);
    ((int64_t*)ii.buf)[0] = 1;
    ((int64_t*)ii.buf)[1] = 3;
    ((int64_t*)ii.buf)[2] = -3;
    for (int i = 0; i < 9; ++i) ((float*)v.buf)[i] = (float)(i + 1);
    tpu_tensor_t list[1] = {ii.t};
    tpu_k_value_t p[5] = {vt(&y.t), vts(list, 1), vt(&v.t), vb(true), vb(false)};
    bool st = ok(call_op("aten::_index_put_impl_", 5, p, 1, &y.t));
    float* yb = (float*)y.buf;
    CHECKF(st && yb[3] == 1 + 7 && yb[4] == 2 + 8 && yb[5] == 3 + 9 && yb[9] == 4 && yb[0] == 0 && yb[6] == 0,
           "index_put accumulate [%g %g %g | %g]", yb[3], yb[4], yb[5], yb[9]);
    /* functional index_put, not accumulating, into a new output */
    tt_t o = mk(TPU_DTYPE_F32, 2, ys, NULL);
    tpu_k_value_t q[4] = {vt(&y.t), vts(list, 1), vt(&v.t), vb(false)};
    st = ok(call_op("aten::index_put", 4, q, 1, &o.t));
    float* ob = (float*)o.buf;
    CHECKF(st && ob[3] == 7 && ob[9] == 4 && ob[0] == 0 && yb[9] == 4, "index_put functional");
    ((int64_t*)ii.buf)[1] = 4;
    CHECK_STATUS(call_op("aten::index_put_", 4, q, 1, &y.t), TPU_STATUS_OUT_OF_RANGE,
                 "index 4 is out of bounds for dimension 0 with size 4");
    fr(&y); fr(&ii); fr(&v); fr(&o);
  }
  fr(&x); fr(&i0); fr(&j); fr(&k);
}

static void test_embedding_backward(void) {
  int64_t is[2] = {3, 4}, gs[3] = {3, 4, 10}, os[2] = {6, 10};
  tt_t idx = mk(TPU_DTYPE_I64, 2, is, NULL), g = mk(TPU_DTYPE_F32, 3, gs, NULL), o = mk(TPU_DTYPE_F32, 2, os, NULL);
  fill_idx(&idx, 0, 6);
  fill(&g);
  for (int scale = 0; scale < 2; ++scale) {
    tpu_k_value_t a[5] = {vt(&g.t), vt(&idx.t), vi(6), vi(2), vb(scale)};
    bool st = ok(call_op("aten::embedding_dense_backward", 5, a, 1, &o.t));
    double ref[60] = {0};
    int cnt[6] = {0};
    for (int i = 0; i < 12; ++i) cnt[((int64_t*)idx.buf)[i]]++;
    for (int i = 0; i < 12; ++i) {
      int64_t w = ((int64_t*)idx.buf)[i];
      if (w == 2) continue;
      for (int c = 0; c < 10; ++c) ref[w * 10 + c] += ((float*)g.buf)[i * 10 + c] / (scale ? cnt[w] : 1);
    }
    double err = 0;
    for (int i = 0; i < 60; ++i) err = fmax(err, fabs(((float*)o.buf)[i] - ref[i]));
    CHECKF(st && err < 1e-4, "embedding_dense_backward scale=%d err=%g", scale, err);
  }
  ((int64_t*)idx.buf)[4] = 6;
  tpu_k_value_t a[5] = {vt(&g.t), vt(&idx.t), vi(6), vi(-1), vb(false)};
  CHECK_STATUS(call_op("aten::embedding_dense_backward", 5, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE,
               "embedding_dense_backward: index 6 is out of bounds for dimension 0 with size 6");
  fr(&idx); fr(&g); fr(&o);
}

static void test_cat_stack(void) {
  int64_t s1[2] = {2, 3}, s2[2] = {2, 4}, se[1] = {0}, os[2] = {2, 7};
  int perm[2] = {1, 0};
  tt_t a = mk(TPU_DTYPE_F32, 2, s1, perm), b = mk(TPU_DTYPE_I64, 2, s2, NULL), e = mk(TPU_DTYPE_F32, 1, se, NULL);
  fill(&a);
  fill(&b);
  tt_t o = mk(TPU_DTYPE_F32, 2, os, NULL);
  tpu_tensor_t list[3] = {a.t, e.t, b.t};
  tpu_k_value_t args[2] = {vts(list, 3), vi(-1)};
  bool st = ok(call_op("aten::cat", 2, args, 1, &o.t));
  int bad = 0;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 7; ++c) {
      int64_t oi[2] = {r, c}, ai[2] = {r, c}, bi[2] = {r, c - 3};
      double want = c < 3 ? get(&a.t, ai) : get(&b.t, bi);
      bad += get(&o.t, oi) != want;
    }
  CHECKF(st && bad == 0, "cat bad=%d", bad);
  /* stack on a new middle dim */
  int64_t ss[3] = {2, 2, 3};
  tt_t c2 = mk(TPU_DTYPE_F32, 2, s1, NULL);
  fill(&c2);
  tt_t so = mk(TPU_DTYPE_F32, 3, ss, NULL);
  tpu_tensor_t sl[2] = {a.t, c2.t};
  tpu_k_value_t sargs[2] = {vts(sl, 2), vi(1)};
  st = ok(call_op("aten::stack", 2, sargs, 1, &so.t));
  bad = 0;
  for (int64_t f = 0; f < 12; ++f) {
    int64_t oi[3];
    unravel(&so.t, f, oi);
    int64_t ii[2] = {oi[0], oi[2]};
    bad += get(&so.t, oi) != get(oi[1] ? &c2.t : &a.t, ii);
  }
  CHECKF(st && bad == 0, "stack bad=%d", bad);
  int64_t bad_os[2] = {2, 8};
  tt_t ob = mk(TPU_DTYPE_F32, 2, bad_os, NULL);
  CHECK_STATUS(call_op("aten::cat", 2, args, 1, &ob.t), TPU_STATUS_INVALID_ARGUMENT, "output size");
  fr(&a); fr(&b); fr(&e); fr(&o); fr(&c2); fr(&so); fr(&ob);
}

static void test_flip_roll_tri(void) {
  int64_t s[3] = {3, 4, 5};
  int perm[3] = {2, 1, 0};
  tt_t x = mk(TPU_DTYPE_I16, 3, s, perm);
  fill(&x);
  tt_t o = mk(TPU_DTYPE_I16, 3, s, NULL);
  int64_t fd[2] = {0, -1};
  tpu_k_value_t fa[2] = {vt(&x.t), vints(fd, 2)};
  bool st = ok(call_op("aten::flip", 2, fa, 1, &o.t));
  int bad = 0;
  for (int64_t f = 0; f < 60; ++f) {
    int64_t oi[3];
    unravel(&o.t, f, oi);
    int64_t si[3] = {2 - oi[0], oi[1], 4 - oi[2]};
    bad += get(&o.t, oi) != get(&x.t, si);
  }
  CHECKF(st && bad == 0, "flip bad=%d", bad);
  int64_t sh[2] = {1, -7}, rd[2] = {1, 2};
  tpu_k_value_t ra[3] = {vt(&x.t), vints(sh, 2), vints(rd, 2)};
  st = ok(call_op("aten::roll", 3, ra, 1, &o.t));
  bad = 0;
  for (int64_t f = 0; f < 60; ++f) {
    int64_t oi[3];
    unravel(&o.t, f, oi);
    int64_t si[3] = {oi[0], (oi[1] - 1 + 4) % 4, ((oi[2] + 7) % 5 + 5) % 5};
    bad += get(&o.t, oi) != get(&x.t, si);
  }
  CHECKF(st && bad == 0, "roll dims bad=%d", bad);
  int64_t sf[1] = {13};
  tpu_k_value_t rf[3] = {vt(&x.t), vints(sf, 1), vints(NULL, 0)};
  st = ok(call_op("aten::roll", 3, rf, 1, &o.t));
  bad = 0;
  for (int64_t f = 0; f < 60; ++f) bad += getf(&o.t, f) != getf(&x.t, (f - 13 + 60) % 60);
  CHECKF(st && bad == 0, "roll flat bad=%d", bad);
  for (int up = 0; up < 2; ++up)
    for (int64_t dg = -2; dg <= 2; dg += 2) {
      tpu_k_value_t ta[2] = {vt(&x.t), vi(dg)};
      st = ok(call_op(up ? "aten::triu" : "aten::tril", 2, ta, 1, &o.t));
      bad = 0;
      for (int64_t f = 0; f < 60; ++f) {
        int64_t oi[3];
        unravel(&o.t, f, oi);
        bool keep = up ? oi[2] - oi[1] >= dg : oi[2] - oi[1] <= dg;
        bad += get(&o.t, oi) != (keep ? get(&x.t, oi) : 0);
      }
      CHECKF(st && bad == 0, "%s diag %lld bad=%d", up ? "triu" : "tril", (long long)dg, bad);
    }
  tt_t y = mk(TPU_DTYPE_I16, 3, s, NULL);
  memcpy(y.buf, o.buf, 120);
  tpu_k_value_t ti[2] = {vt(&y.t), vi(0)};
  st = ok(call_op("aten::triu_", 2, ti, 1, &y.t));
  bad = 0;
  for (int64_t f = 0; f < 60; ++f) {
    int64_t oi[3];
    unravel(&y.t, f, oi);
    bad += get(&y.t, oi) != (oi[2] >= oi[1] ? get(&o.t, oi) : 0);
  }
  CHECKF(st && bad == 0, "triu_ bad=%d", bad);
  fr(&x); fr(&o); fr(&y);
}

static void test_ranges(void) {
  int64_t n5[1] = {5}, n7[1] = {7}, n4[1] = {4};
  tt_t li = mk(TPU_DTYPE_I64, 1, n5, NULL);
  tpu_k_value_t a[4] = {vi(0), vi(10), vi(5)};
  bool st = ok(call_op("aten::linspace.out", 3, a, 1, &li.t));
  int64_t* l = (int64_t*)li.buf;
  CHECKF(st && l[0] == 0 && l[1] == 2 && l[2] == 5 && l[3] == 7 && l[4] == 10, "linspace int64 [%lld %lld %lld %lld %lld]",
         (long long)l[0], (long long)l[1], (long long)l[2], (long long)l[3], (long long)l[4]);
  tt_t lb = mk(TPU_DTYPE_BF16, 1, n7, NULL);
  tpu_k_value_t b[3] = {vi(0), vi(1), vi(7)};
  st = ok(call_op("aten::linspace.out", 3, b, 1, &lb.t));
  double want[7] = {0, 0.1670, 0.3340, 0.5, 0.6680, 0.8320, 1.0};
  double err = 0;
  for (int i = 0; i < 7; ++i) err = fmax(err, fabs(getf(&lb.t, i) - want[i]));
  CHECKF(st && err < 1e-4, "linspace bf16 err %g", err);
  tt_t ar = mk(TPU_DTYPE_F32, 1, n4, NULL);
  tpu_k_value_t c[3] = {vd(1.0), vd(3.0), vd(0.5)};
  st = ok(call_op("aten::arange.start_out", 3, c, 1, &ar.t));
  float* f = (float*)ar.buf;
  CHECKF(st && f[0] == 1.0f && f[3] == 2.5f, "arange float");
  tt_t ai = mk(TPU_DTYPE_I32, 1, n4, NULL);
  tpu_k_value_t d[3] = {vi(10), vi(-2), vi(-3)};
  st = ok(call_op("aten::arange.start_out", 3, d, 1, &ai.t));
  int32_t* ip = (int32_t*)ai.buf;
  CHECKF(st && ip[0] == 10 && ip[3] == 1, "arange int");
  /* repeat_interleave */
  int64_t n3[1] = {3}, n6[1] = {6};
  tt_t r = mk(TPU_DTYPE_I64, 1, n3, NULL), ro = mk(TPU_DTYPE_I64, 1, n6, NULL);
  ((int64_t*)r.buf)[0] = 2; ((int64_t*)r.buf)[1] = 0; ((int64_t*)r.buf)[2] = 4;
  tpu_k_value_t e[2] = {vt(&r.t), vn()};
  st = ok(call_op("aten::repeat_interleave.Tensor", 2, e, 1, &ro.t));
  int64_t* rp = (int64_t*)ro.buf;
  CHECKF(st && rp[0] == 0 && rp[1] == 0 && rp[2] == 2 && rp[5] == 2, "repeat_interleave");
  /* data-dependent output shape: shape() with outputs NULL */
  const tpu_k_entry_t* ent = tpu_k_lookup("aten::repeat_interleave.Tensor");
  tpu_k_call_t sc;
  memset(&sc, 0, sizeof(sc));
  sc.op = "aten::repeat_interleave.Tensor";
  sc.num_args = 2;
  sc.args = e;
  sc.num_outputs = 1;
  tpu_tensor_t shp;
  CHECK(ent && ent->shape);
  if (ent && ent->shape) {
    CHECK_OK(ent->check(&sc));
    CHECK_OK(ent->shape(&sc, &shp));
    CHECK(shp.ndim == 1 && shp.sizes[0] == 6 && shp.dtype == TPU_DTYPE_I64);
  }
  ((int64_t*)r.buf)[1] = 1;
  CHECK_STATUS(call_op("aten::repeat_interleave.Tensor", 2, e, 1, &ro.t), TPU_STATUS_INVALID_ARGUMENT, "sum to 7");
  ((int64_t*)r.buf)[1] = -1;
  if (ent && ent->shape) CHECK_STATUS(ent->shape(&sc, &shp), TPU_STATUS_INVALID_ARGUMENT, "negative");
  fr(&li); fr(&lb); fr(&ar); fr(&ai); fr(&r); fr(&ro);
}

static int cmp_asc(double a, int64_t ia, double b, int64_t ib) {
  bool na = isnan(a), nb = isnan(b);
  if (na != nb) return na ? 1 : -1;
  if (!na && a != b) return a < b ? -1 : 1;
  return ia < ib ? -1 : ia > ib;
}

static void test_sort_topk(void) {
  /* fixed case with NaN and signed zeros */
  float v[5] = {1.0f, NAN, 3.0f, -0.0f, 0.0f};
  int64_t n5[1] = {5};
  tt_t x = mk(TPU_DTYPE_F32, 1, n5, NULL), sv = mk(TPU_DTYPE_F32, 1, n5, NULL), si = mk(TPU_DTYPE_I64, 1, n5, NULL);
  memcpy(x.buf, v, sizeof(v));
  tpu_tensor_t outs[2] = {sv.t, si.t};
  tpu_k_value_t a[4] = {vt(&x.t), vb(true), vi(0), vb(false)};
  bool st = ok(call_op("aten::sort.stable", 4, a, 2, outs));
  int64_t* ip = (int64_t*)si.buf;
  CHECKF(st && ip[0] == 3 && ip[1] == 4 && ip[2] == 0 && ip[3] == 2 && ip[4] == 1 && isnan(((float*)sv.buf)[4]),
         "sort asc idx [%lld %lld %lld %lld %lld]", (long long)ip[0], (long long)ip[1], (long long)ip[2], (long long)ip[3],
         (long long)ip[4]);
  tpu_k_value_t b[3] = {vt(&x.t), vi(-1), vb(true)};
  st = ok(call_op("aten::sort", 3, b, 2, outs));
  CHECKF(st && ip[0] == 1 && ip[1] == 2 && ip[2] == 0 && ip[3] == 3 && ip[4] == 4, "sort desc idx [%lld %lld %lld %lld %lld]",
         (long long)ip[0], (long long)ip[1], (long long)ip[2], (long long)ip[3], (long long)ip[4]);
  /* random 2-D, non-contiguous, along both dims, several dtypes */
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_I32};
  for (int t = 0; t < 3; ++t) {
    int64_t s[2] = {37, 41};
    int perm[2] = {1, 0};
    tt_t m = mk(dts[t], 2, s, perm);
    fill(&m);
    for (int dim = 0; dim < 2; ++dim)
      for (int desc = 0; desc < 2; ++desc) {
        tt_t ov = mk(dts[t], 2, s, NULL), oi = mk(TPU_DTYPE_I64, 2, s, NULL);
        tpu_tensor_t o2[2] = {ov.t, oi.t};
        tpu_k_value_t c[3] = {vt(&m.t), vi(dim), vb(desc)};
        st = ok(call_op("aten::sort", 3, c, 2, o2));
        int bad = 0;
        for (int64_t line = 0; line < s[1 - dim]; ++line) {
          for (int64_t p = 0; p < s[dim]; ++p) {
            int64_t idx[2];
            idx[dim] = p;
            idx[1 - dim] = line;
            int64_t src = (int64_t)get(&oi.t, idx);
            int64_t sidx[2] = {idx[0], idx[1]};
            sidx[dim] = src;
            if (get(&ov.t, idx) != get(&m.t, sidx)) bad++;
            if (p > 0) {
              int64_t pidx[2] = {idx[0], idx[1]};
              pidx[dim] = p - 1;
              double pa = get(&ov.t, pidx), pb = get(&ov.t, idx);
              int64_t ia = (int64_t)get(&oi.t, pidx), ib = src;
              int cmp = desc ? cmp_asc(pb, ia, pa, ib) : cmp_asc(pa, ia, pb, ib);
              if (desc) cmp = (pa == pb) ? (ia < ib ? -1 : 1) : (pa > pb ? -1 : 1);
              if (cmp >= 0) bad++;
            }
          }
        }
        CHECKF(st && bad == 0, "sort %s dim %d desc %d bad=%d", tpu_dtype_name(dts[t]), dim, desc, bad);
        /* topk k=5 */
        int64_t ks[2] = {s[0], s[1]};
        ks[dim] = 5;
        tt_t tv = mk(dts[t], 2, ks, NULL), ti = mk(TPU_DTYPE_I64, 2, ks, NULL);
        tpu_tensor_t t2[2] = {tv.t, ti.t};
        tpu_k_value_t d[5] = {vt(&m.t), vi(5), vi(dim), vb(desc), vb(true)};
        st = ok(call_op("aten::topk", 5, d, 2, t2));
        bad = 0;
        for (int64_t line = 0; line < s[1 - dim]; ++line)
          for (int64_t p = 0; p < 5; ++p) {
            int64_t idx[2], sidx[2];
            idx[dim] = p;
            idx[1 - dim] = line;
            sidx[dim] = p;
            sidx[1 - dim] = line;
            /* values equal the sorted-descending (largest) / ascending prefix */
            int64_t oidx[2] = {sidx[0], sidx[1]};
            double want;
            if (desc) {
              oidx[dim] = p; /* ov sorted descending in this iteration */
              want = get(&ov.t, oidx);
            } else {
              want = get(&ov.t, oidx);
            }
            if (get(&tv.t, idx) != want) bad++;
            int64_t src = (int64_t)get(&ti.t, idx);
            int64_t ms[2] = {idx[0], idx[1]};
            ms[dim] = src;
            if (get(&m.t, ms) != get(&tv.t, idx)) bad++;
          }
        CHECKF(st && bad == 0, "topk %s dim %d largest %d bad=%d", tpu_dtype_name(dts[t]), dim, desc, bad);
        fr(&ov); fr(&oi); fr(&tv); fr(&ti);
      }
    fr(&m);
  }
  fr(&x); fr(&sv); fr(&si);
}

/* ---- scatter reductions, index_add/copy/fill, embedding_renorm_ ------------------ */

/* reference scatter_reduce over [rows, cols] along dim, integer-valued data */
static void ref_scatter_reduce(const tt_t* self, const tt_t* idx, const tt_t* src, int dim, const char* red,
                               bool include_self, tt_t* ref) {
  int64_t n = tpu_tensor_numel(&self->t);
  double cnt[64];
  for (int64_t f = 0; f < n; ++f) {
    setf(&ref->t, f, getf(&self->t, f));
    cnt[f] = include_self;
  }
  int64_t ni = tpu_tensor_numel(&idx->t);
  bool mean = strcmp(red, "mean") == 0, prod = strcmp(red, "prod") == 0;
  bool amax = strcmp(red, "amax") == 0, amin = strcmp(red, "amin") == 0;
  if (!include_self) {
    for (int64_t f = 0; f < ni; ++f) {
      int64_t ii[2];
      unravel(&idx->t, f, ii);
      ii[dim] = (int64_t)get(&idx->t, ii);
      set(&ref->t, ii, prod ? 1 : amax ? -INFINITY : amin ? INFINITY : 0);
    }
  }
  for (int64_t f = 0; f < ni; ++f) {
    int64_t ii[2], di[2];
    unravel(&idx->t, f, ii);
    di[0] = ii[0];
    di[1] = ii[1];
    di[dim] = (int64_t)get(&idx->t, ii);
    double a = get(&ref->t, di), v = get(&src->t, ii);
    set(&ref->t, di, prod ? a * v : amax ? (a > v ? a : v) : amin ? (a < v ? a : v) : a + v);
    cnt[di[0] * ref->t.sizes[1] + di[1]] += 1;
  }
  if (mean)
    for (int64_t f = 0; f < n; ++f) setf(&ref->t, f, getf(&ref->t, f) / (cnt[f] == 0 ? 1 : cnt[f]));
}

static void test_scatter_reduce(void) {
  int64_t s[2] = {4, 6}, is[2] = {5, 6};
  const char* reds[5] = {"sum", "prod", "mean", "amax", "amin"};
  for (int dim = 0; dim < 2; ++dim)
    for (int r = 0; r < 5; ++r)
      for (int inc = 0; inc < 2; ++inc) {
        tt_t x = mk(TPU_DTYPE_F64, 2, s, NULL), idx = mk(TPU_DTYPE_I64, 2, is, NULL), src = mk(TPU_DTYPE_F64, 2, is, NULL);
        tt_t out = mk(TPU_DTYPE_F64, 2, s, NULL), ref = mk(TPU_DTYPE_F64, 2, s, NULL);
        fill(&x);
        fill(&src);
        int64_t is2[2] = {dim == 0 ? 5 : 4, dim == 0 ? 6 : 5};
        idx.t.sizes[0] = is2[0];
        idx.t.sizes[1] = is2[1];
        fill_idx(&idx, 0, s[dim]);
        tpu_k_value_t a[7] = {vt(&x.t), vi(dim), vt(&idx.t), vt(&src.t), {.kind = TPU_K_STRING, .v.s = reds[r]}, vb(inc),
                              vt(&out.t)};
        bool st = ok(call_op("aten::scatter_reduce.two_out", 7, a, 1, &out.t));
        ref_scatter_reduce(&x, &idx, &src, dim, reds[r], inc, &ref);
        int bad = 0;
        for (int64_t f = 0; f < 24; ++f) bad += fabs(getf(&out.t, f) - getf(&ref.t, f)) > 1e-9 * fabs(getf(&ref.t, f));
        CHECKF(st && bad == 0, "scatter_reduce %s dim %d include_self %d bad=%d", reds[r], dim, inc, bad);
        fr(&x); fr(&idx); fr(&src); fr(&out); fr(&ref);
      }
  /* bf16 accumulates in float: 300 ones reach 300 (bf16 steps would stop at 256) */
  int64_t n1 = 1, n300 = 300;
  tt_t z = mk(TPU_DTYPE_BF16, 1, &n1, NULL), ones = mk(TPU_DTYPE_BF16, 1, &n300, NULL), i0 = mk(TPU_DTYPE_I64, 1, &n300, NULL);
  for (int i = 0; i < 300; ++i) setf(&ones.t, i, 1.0);
  tpu_k_value_t a[4] = {vt(&z.t), vi(0), vt(&i0.t), vt(&ones.t)};
  CHECK(ok(call_op("aten::scatter_add_", 4, a, 1, &z.t)) && getf(&z.t, 0) == 300.0);
  tpu_k_value_t m[6] = {vt(&z.t), vi(0), vt(&i0.t), vt(&ones.t), {.kind = TPU_K_STRING, .v.s = "mean"}, vb(false)};
  CHECK(ok(call_op("aten::scatter_reduce_.two", 6, m, 1, &z.t)) && getf(&z.t, 0) == 1.0);
  /* old API: scatter(reduce="multiply") with a value; int32 wraps */
  int64_t s3 = 3, s4 = 4;
  tt_t xi = mk(TPU_DTYPE_I32, 1, &s3, NULL), ii = mk(TPU_DTYPE_I64, 1, &s4, NULL), oi = mk(TPU_DTYPE_I32, 1, &s3, NULL);
  for (int i = 0; i < 3; ++i) setf(&xi.t, i, i + 2);
  int64_t iv[4] = {0, 0, 2, 0};
  memcpy(ii.buf, iv, sizeof(iv));
  tpu_k_value_t v[5] = {vt(&xi.t), vi(0), vt(&ii.t), vi(3), {.kind = TPU_K_STRING, .v.s = "multiply"}};
  CHECK(ok(call_op("aten::scatter.value_reduce", 5, v, 1, &oi.t)) && getf(&oi.t, 0) == 54 && getf(&oi.t, 1) == 3 &&
        getf(&oi.t, 2) == 12);
  tpu_k_value_t bad[5] = {vt(&xi.t), vi(0), vt(&ii.t), vi(3), {.kind = TPU_K_STRING, .v.s = "max"}};
  CHECK_STATUS(call_op("aten::scatter.value_reduce", 5, bad, 1, &oi.t), TPU_STATUS_INVALID_ARGUMENT, "add or multiply");
  iv[1] = 3;
  memcpy(ii.buf, iv, sizeof(iv));
  CHECK_STATUS(call_op("aten::scatter.value_reduce", 5, v, 1, &oi.t), TPU_STATUS_OUT_OF_RANGE, "index 3 is out of bounds");
  /* an empty index may have any dtype (PyTorch checks non-empty ones only) */
  int64_t e2[2] = {0, 3};
  tt_t ef = mk(TPU_DTYPE_F32, 2, e2, NULL), eo = mk(TPU_DTYPE_I32, 1, &s3, NULL);
  tpu_k_value_t g[4] = {vt(&xi.t), vi(0), vt(&ef.t), vb(false)};
  tt_t go = mk(TPU_DTYPE_I32, 2, e2, NULL);
  CHECK(ok(call_op("aten::gather", 4, g, 1, &go.t)));
  tpu_k_value_t sc[4] = {vt(&xi.t), vi(0), vt(&ef.t), vt(&xi.t)};
  CHECK(ok(call_op("aten::scatter.src", 4, sc, 1, &eo.t)) && getf(&eo.t, 2) == getf(&xi.t, 2));
  CHECK(ok(call_op("aten::scatter_add", 4, sc, 1, &eo.t)));
  fr(&z); fr(&ones); fr(&i0); fr(&xi); fr(&ii); fr(&oi); fr(&ef); fr(&eo); fr(&go);
}

static void test_index_add_copy_fill(void) {
  int64_t s[2] = {5, 3}, n4 = 4, ss[2] = {4, 3};
  int perm[2] = {1, 0};
  tt_t x = mk(TPU_DTYPE_F32, 2, s, perm), src = mk(TPU_DTYPE_F32, 2, ss, NULL), idx = mk(TPU_DTYPE_I64, 1, &n4, NULL);
  fill(&x);
  fill(&src);
  int64_t iv[4] = {1, 4, 1, 0};
  memcpy(idx.buf, iv, sizeof(iv));
  for (int alpha = 1; alpha <= 2; ++alpha) {
    tt_t o = mk(TPU_DTYPE_F32, 2, s, NULL);
    tpu_k_value_t a[5] = {vt(&x.t), vi(0), vt(&idx.t), vt(&src.t), vi(alpha)};
    bool st = ok(call_op("aten::index_add", 5, a, 1, &o.t));
    int bad = 0;
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 3; ++c) {
        double want = get(&x.t, (int64_t[]){r, c});
        for (int k = 0; k < 4; ++k)
          if (iv[k] == r) want += alpha * get(&src.t, (int64_t[]){k, c});
        bad += get(&o.t, (int64_t[]){r, c}) != want;
      }
    CHECKF(st && bad == 0, "index_add alpha %d bad=%d", alpha, bad);
    fr(&o);
  }
  /* 1-d bf16 adds in bf16 arithmetic: 300 ones stop at 256 */
  int64_t n1 = 1, n300 = 300;
  tt_t z = mk(TPU_DTYPE_BF16, 1, &n1, NULL), ones = mk(TPU_DTYPE_BF16, 1, &n300, NULL), i0 = mk(TPU_DTYPE_I64, 1, &n300, NULL);
  for (int i = 0; i < 300; ++i) setf(&ones.t, i, 1.0);
  tpu_k_value_t za[5] = {vt(&z.t), vi(0), vt(&i0.t), vt(&ones.t), vi(1)};
  CHECK(ok(call_op("aten::index_add_", 5, za, 1, &z.t)) && getf(&z.t, 0) == 256.0);
  /* index_copy: the last of repeated indices wins */
  tt_t o = mk(TPU_DTYPE_F32, 2, s, NULL);
  tpu_k_value_t c[4] = {vt(&x.t), vi(0), vt(&idx.t), vt(&src.t)};
  CHECK(ok(call_op("aten::index_copy", 4, c, 1, &o.t)));
  CHECK(get(&o.t, (int64_t[]){1, 2}) == get(&src.t, (int64_t[]){2, 2}) &&
        get(&o.t, (int64_t[]){0, 0}) == get(&src.t, (int64_t[]){3, 0}) &&
        get(&o.t, (int64_t[]){2, 1}) == get(&x.t, (int64_t[]){2, 1}));
  /* index_fill_ with negative indices, a Scalar and a 0-dim tensor value */
  int64_t fv[2] = {-1, 1}, n2 = 2;
  tt_t fi = mk(TPU_DTYPE_I64, 1, &n2, NULL);
  memcpy(fi.buf, fv, sizeof(fv));
  tpu_k_value_t f1[4] = {vt(&o.t), vi(1), vt(&fi.t), vd(7.5)};
  CHECK(ok(call_op("aten::index_fill_.int_Scalar", 4, f1, 1, &o.t)));
  CHECK(get(&o.t, (int64_t[]){3, 2}) == 7.5 && get(&o.t, (int64_t[]){0, 1}) == 7.5);
  double dv = -2;
  tpu_tensor_t t0;
  memset(&t0, 0, sizeof(t0));
  t0.data = &dv;
  t0.dtype = TPU_DTYPE_F64;
  tpu_k_value_t f2[4] = {vt(&o.t), vi(0), vt(&fi.t), vt(&t0)};
  CHECK(ok(call_op("aten::index_fill_.int_Tensor", 4, f2, 1, &o.t)));
  CHECK(get(&o.t, (int64_t[]){4, 0}) == -2 && get(&o.t, (int64_t[]){1, 2}) == -2);
  fv[0] = -6;
  memcpy(fi.buf, fv, sizeof(fv));
  CHECK_STATUS(call_op("aten::index_fill_.int_Scalar", 4, f1, 1, &o.t), TPU_STATUS_OUT_OF_RANGE, "index -6");
  /* index_add with an index past the end */
  iv[2] = 5;
  memcpy(idx.buf, iv, sizeof(iv));
  tpu_k_value_t a[5] = {vt(&x.t), vi(0), vt(&idx.t), vt(&src.t), vi(1)};
  CHECK_STATUS(call_op("aten::index_add", 5, a, 1, &o.t), TPU_STATUS_OUT_OF_RANGE, "index 5 is out of bounds");
  fr(&x); fr(&src); fr(&idx); fr(&z); fr(&ones); fr(&i0); fr(&o); fr(&fi);
}

static void test_embedding_renorm(void) {
  int64_t s[2] = {6, 4}, ni = 5;
  tt_t w = mk(TPU_DTYPE_F32, 2, s, NULL), idx = mk(TPU_DTYPE_I64, 1, &ni, NULL);
  for (int64_t f = 0; f < 24; ++f) setf(&w.t, f, (double)(f % 7) - 2.5);
  tt_t before = mk(TPU_DTYPE_F32, 2, s, NULL);
  memcpy(before.buf, w.buf, 24 * 4);
  int64_t iv[5] = {1, 3, 1, -1, 3}; /* repeated rows are renormed once; -1 is row 5 */
  memcpy(idx.buf, iv, sizeof(iv));
  tpu_k_value_t a[4] = {vt(&w.t), vt(&idx.t), vd(1.0), vd(2.0)};
  CHECK(ok(call_op("aten::embedding_renorm_", 4, a, 1, &w.t)));
  int bad = 0;
  for (int64_t r = 0; r < 6; ++r) {
    double n2 = 0;
    for (int64_t c = 0; c < 4; ++c) n2 += pow(get(&before.t, (int64_t[]){r, c}), 2);
    double norm = (float)sqrt(n2);
    bool touched = r == 1 || r == 3 || r == 5;
    float scale = (float)(1.0 / (norm + 1e-7));
    for (int64_t c = 0; c < 4; ++c) {
      float v = (float)get(&before.t, (int64_t[]){r, c});
      float want = touched && norm > 1.0 ? v * scale : v;
      bad += (float)get(&w.t, (int64_t[]){r, c}) != want;
    }
  }
  CHECKF(bad == 0, "embedding_renorm_ bad=%d", bad);
  iv[0] = 6;
  memcpy(idx.buf, iv, sizeof(iv));
  CHECK_STATUS(call_op("aten::embedding_renorm_", 4, a, 1, &w.t), TPU_STATUS_OUT_OF_RANGE, "index 6");
  fr(&w); fr(&idx); fr(&before);
}

/* ---- searchsorted / bucketize, put_, index_reduce -------------------------------- */

/* Naive lower/upper bound of v in b[0..n) (NaN last, as `!(b >= v)` walks). */
static int64_t ref_bound(const double* b, int64_t n, double v, bool right) {
  int64_t k = 0;
  while (k < n && (right ? !(b[k] > v) : !(b[k] >= v))) ++k;
  return k;
}

static void test_searchsorted(void) {
  /* 2 rows of 9 sorted boundaries (repeats, inf, NaN), values 2 x 3 x 5 transposed in memory */
  static const double row[9] = {-2, -1, -1, 0, 0.5, 0.5, 3, INFINITY, NAN};
  int64_t bs[2] = {2, 9}, vs3[2] = {2, 15};
  tt_t b = mk(TPU_DTYPE_F32, 2, bs, NULL);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t k = 0; k < 9; ++k) setf(&b.t, r * 9 + k, row[k] + (r && k < 7 ? 1 : 0));
  int perm[2] = {1, 0};
  tt_t v = mk(TPU_DTYPE_F64, 2, vs3, perm);
  for (int64_t i = 0; i < 30; ++i) setf(&v.t, i, i % 7 == 0 ? NAN : floor(urand() * 8.0) / 2);
  for (int right = 0; right < 2; ++right) {
    for (int nd = 1; nd <= 2; ++nd) {
      tt_t o = mk(TPU_DTYPE_I64, 2, vs3, NULL);
      tpu_tensor_t bt = b.t;
      if (nd == 1) { /* the first row as 1-D boundaries */
        bt.ndim = 1;
        bt.sizes[0] = 9;
        bt.strides[0] = 1;
      }
      tpu_k_value_t a[7] = {vt(&bt), vt(&v.t), vb(false), vb(right), vn(), vn(), vt(&o.t)};
      bool good = ok(call_op("aten::searchsorted.Tensor", 6, a, 1, &o.t));
      for (int64_t i = 0; good && i < 30; ++i) {
        double br[9];
        int64_t r = nd == 2 ? i / 15 : 0;
        for (int64_t k = 0; k < 9; ++k) br[k] = getf(&b.t, r * 9 + k);
        /* float32 boundaries, float64 values: compared in float64 */
        good = geti(&o.t, i) == ref_bound(br, 9, getf(&v.t, i), right);
        CHECKF(good, "searchsorted nd %d right %d value %lld (%g): %lld", nd, right, (long long)i, getf(&v.t, i),
               (long long)geti(&o.t, i));
      }
      fr(&o);
    }
  }
  /* side="right" with a sorter over scrambled boundaries, int32 out; bucketize of a Scalar */
  int64_t s1[1] = {5}, s0[1] = {3};
  tt_t sb = mk(TPU_DTYPE_I64, 1, s1, NULL), so = mk(TPU_DTYPE_I64, 1, s1, NULL);
  static const int64_t scr[5] = {7, 1, 5, 3, 5}, ord[5] = {1, 3, 2, 4, 0};
  for (int k = 0; k < 5; ++k) ((int64_t*)sb.buf)[k] = scr[k], ((int64_t*)so.buf)[k] = ord[k];
  tt_t sv = mk(TPU_DTYPE_I16, 1, s0, NULL), o32 = mk(TPU_DTYPE_I32, 1, s0, NULL);
  static const int16_t q[3] = {5, 0, 8};
  for (int k = 0; k < 3; ++k) ((int16_t*)sv.buf)[k] = q[k];
  tpu_k_value_t a2[6] = {vt(&sb.t), vt(&sv.t), vb(true), vb(false), vs("right"), vt(&so.t)};
  CHECK_OK(call_op("aten::searchsorted.Tensor", 6, a2, 1, &o32.t));
  CHECK(((int32_t*)o32.buf)[0] == 4 && ((int32_t*)o32.buf)[1] == 0 && ((int32_t*)o32.buf)[2] == 5);
  tt_t o0 = mk(TPU_DTYPE_I64, 0, NULL, NULL);
  tpu_tensor_t b1 = sb.t; /* sorted: 1 3 5 5 7 */
  int64_t sorted[5] = {1, 3, 5, 5, 7};
  b1.data = sorted;
  tpu_k_value_t a3[4] = {vi(5), vt(&b1), vb(false), vb(false)};
  CHECK_OK(call_op("aten::bucketize.Scalar", 4, a3, 1, &o0.t));
  CHECK(*(int64_t*)o0.buf == 2);
  a3[0].kind = TPU_K_DOUBLE;
  a3[0].v.d = 5.5;
  a3[3] = vb(true);
  CHECK_OK(call_op("aten::bucketize.Scalar", 4, a3, 1, &o0.t));
  CHECK(*(int64_t*)o0.buf == 4);
  /* errors: a sorter index out of range, side/right opposites, the out dtype, bool */
  ((int64_t*)so.buf)[2] = 5;
  CHECK_STATUS(call_op("aten::searchsorted.Tensor", 6, a2, 1, &o32.t), TPU_STATUS_FAILED_PRECONDITION,
               "sorter index out of range");
  ((int64_t*)so.buf)[2] = 2;
  tpu_k_value_t a4[6] = {vt(&sb.t), vt(&sv.t), vb(true), vb(true), vs("left"), vn()};
  CHECK_STATUS(call_op("aten::searchsorted.Tensor", 6, a4, 1, &o32.t), TPU_STATUS_FAILED_PRECONDITION, "opposites");
  a4[2] = vb(false);
  a4[4] = vn();
  CHECK_STATUS(call_op("aten::searchsorted.Tensor", 6, a4, 1, &o32.t), TPU_STATUS_FAILED_PRECONDITION, "dtype is wrong");
  tpu_tensor_t bb = sb.t, vbt = sv.t;
  bb.dtype = vbt.dtype = TPU_DTYPE_BOOL;
  tt_t o64 = mk(TPU_DTYPE_I64, 1, s0, NULL);
  tpu_k_value_t a5[6] = {vt(&bb), vt(&vbt), vb(false), vb(false), vn(), vn()};
  CHECK_STATUS(call_op("aten::searchsorted.Tensor", 6, a5, 1, &o64.t), TPU_STATUS_UNIMPLEMENTED, "bool");
  fr(&b); fr(&v); fr(&sb); fr(&so); fr(&sv); fr(&o32); fr(&o0); fr(&o64);
}

static void test_put_index_reduce(void) {
  /* put_ into a transposed 3 x 4 float32: repeats keep the last value, accumulate adds in order */
  int64_t s2[2] = {3, 4}, s1[1] = {5};
  int perm[2] = {1, 0};
  tt_t x = mk(TPU_DTYPE_F32, 2, s2, perm), ix = mk(TPU_DTYPE_I64, 1, s1, NULL), src = mk(TPU_DTYPE_F32, 1, s1, NULL);
  static const int64_t iv[5] = {0, -1, 5, 0, 11};
  for (int k = 0; k < 5; ++k) ((int64_t*)ix.buf)[k] = iv[k], ((float*)src.buf)[k] = (float)(k + 1);
  for (int acc = 0; acc < 2; ++acc) {
    for (int64_t i = 0; i < 12; ++i) setf(&x.t, i, 10.0);
    tpu_k_value_t a[4] = {vt(&x.t), vt(&ix.t), vt(&src.t), vb(acc)};
    CHECK_OK(call_op("aten::put_", 4, a, 1, &x.t));
    /* flat 0 gets 1 then 4; 11 gets 2 then 5; 5 gets 3 */
    CHECK(getf(&x.t, 0) == (acc ? 15.0 : 4.0) && getf(&x.t, 11) == (acc ? 17.0 : 5.0) &&
          getf(&x.t, 5) == (acc ? 13.0 : 3.0) && getf(&x.t, 1) == 10.0);
  }
  ((int64_t*)ix.buf)[2] = 12;
  tpu_k_value_t bad[4] = {vt(&x.t), vt(&ix.t), vt(&src.t), vb(false)};
  CHECK_STATUS(call_op("aten::put_", 4, bad, 1, &x.t), TPU_STATUS_OUT_OF_RANGE, "out of range");
  CHECK(getf(&x.t, 0) == 15.0); /* nothing written */
  /* index_reduce along dim 1 of a 2 x 3 float16: prod and mean round to float16 every step */
  int64_t h2[2] = {2, 3}, hs[2] = {2, 4}, hi[1] = {4};
  tt_t h = mk(TPU_DTYPE_F16, 2, h2, NULL), hsrc = mk(TPU_DTYPE_F16, 2, hs, NULL), hix = mk(TPU_DTYPE_I32, 1, hi, NULL);
  tt_t ho = mk(TPU_DTYPE_F16, 2, h2, NULL);
  static const int32_t hv[4] = {2, 0, 2, 2};
  for (int k = 0; k < 4; ++k) ((int32_t*)hix.buf)[k] = hv[k];
  for (int64_t i = 0; i < 6; ++i) setf(&h.t, i, 1000.0);
  for (int64_t i = 0; i < 8; ++i) setf(&hsrc.t, i, 0.3);
  const char* reds[2] = {"prod", "mean"};
  for (int r = 0; r < 2; ++r) {
    for (int incl = 0; incl < 2; ++incl) {
      tpu_k_value_t a[6] = {vt(&h.t), vi(1), vt(&hix.t), vt(&hsrc.t), vs(reds[r]), vb(incl)};
      CHECK_OK(call_op("aten::index_reduce", 6, a, 1, &ho.t));
      /* the reference: the same steps, each rounded to float16 */
      double s = incl ? 1000.0 : (r ? 0.0 : 1.0), c = incl;
      const double p3 = tpu_ku_f16_to_f32(tpu_ku_f32_to_f16(0.3f));
      for (int k = 0; k < 3; ++k, ++c) s = tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)(r ? s + p3 : s * p3)));
      if (r) s = tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)(s / c)));
      const double sum0 = tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)(1000.0 + p3)));
      double want0 = incl ? tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)(r ? sum0 / 2 : 1000.0 * p3))) : p3;
      CHECKF(getf(&ho.t, 2) == s && getf(&ho.t, 5) == s && getf(&ho.t, 0) == want0 && getf(&ho.t, 1) == 1000.0,
             "index_reduce %s include_self %d: %g %g %g, want %g %g", reds[r], incl, getf(&ho.t, 0), getf(&ho.t, 1),
             getf(&ho.t, 2), want0, s);
    }
  }
  /* float32 amax/amin along dim 0 (the slice-by-slice path): a NaN source wins, rows not indexed stay */
  int64_t f2[2] = {3, 2}, fs[2] = {3, 2}, fi[1] = {3};
  tt_t fx = mk(TPU_DTYPE_F32, 2, f2, perm), fsrc = mk(TPU_DTYPE_F32, 2, fs, NULL), fix = mk(TPU_DTYPE_I64, 1, fi, NULL);
  tt_t fo = mk(TPU_DTYPE_F32, 2, f2, NULL);
  static const int64_t fiv[3] = {2, 0, 2};
  static const float fsv[6] = {5, -1, 7, 8, NAN, -3};
  for (int k = 0; k < 3; ++k) ((int64_t*)fix.buf)[k] = fiv[k];
  for (int k = 0; k < 6; ++k) setf(&fsrc.t, k, fsv[k]), setf(&fx.t, k, 1.0);
  for (int mx = 0; mx < 2; ++mx) {
    tpu_k_value_t a[6] = {vt(&fx.t), vi(0), vt(&fix.t), vt(&fsrc.t), vs(mx ? "amax" : "amin"), vb(true)};
    CHECK_OK(call_op("aten::index_reduce", 6, a, 1, &fo.t));
    /* row 2 combines source rows 0 and 2, row 0 source row 1 */
    CHECK(isnan(getf(&fo.t, 4)) && getf(&fo.t, 5) == (mx ? 1.0 : -3.0) && getf(&fo.t, 0) == (mx ? 7.0 : 1.0) &&
          getf(&fo.t, 1) == (mx ? 8.0 : 1.0) && getf(&fo.t, 2) == 1.0 && getf(&fo.t, 3) == 1.0);
  }
  fr(&fx); fr(&fsrc); fr(&fix); fr(&fo);
  ((int32_t*)hix.buf)[1] = 3;
  tpu_k_value_t oob[6] = {vt(&h.t), vi(1), vt(&hix.t), vt(&hsrc.t), vs("amax"), vb(true)};
  CHECK_STATUS(call_op("aten::index_reduce", 6, oob, 1, &ho.t), TPU_STATUS_OUT_OF_RANGE, "out of bounds");
  ((int32_t*)hix.buf)[1] = 0;
  oob[4] = vs("sum");
  CHECK_STATUS(call_op("aten::index_reduce", 6, oob, 1, &ho.t), TPU_STATUS_FAILED_PRECONDITION, "amax or amin");
  fr(&x); fr(&ix); fr(&src); fr(&h); fr(&hsrc); fr(&hix); fr(&ho);
}

int main(void) {
  if (!tku_start(2)) return 1;
  for (int round = 0; round < 2; ++round) {
    RUN_TEST(test_index_select);
    RUN_TEST(test_gather_scatter);
    RUN_TEST(test_advanced_index);
    RUN_TEST(test_embedding_backward);
    RUN_TEST(test_cat_stack);
    RUN_TEST(test_flip_roll_tri);
    RUN_TEST(test_ranges);
    RUN_TEST(test_sort_topk);
    RUN_TEST(test_scatter_reduce);
    RUN_TEST(test_index_add_copy_fill);
    RUN_TEST(test_embedding_renorm);
    RUN_TEST(test_searchsorted);
    RUN_TEST(test_put_index_reduce);
    tpu_threadpool_destroy(g_pool);
    g_pool = NULL;
  }
  return TEST_REPORT();
}
