/* test_k_solve.c - linalg_solve_triangular / triangular_solve against a naive
 * residual check (op(tri(A)) X == B), over upper/lower, left/right,
 * unitriangular, batch broadcast and transposed strides. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 88172645463325252ull;
static double urand(void) { /* [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

typedef struct {
  tpu_tensor_t t;
  void* buf;
} tt_t;

/* perm (optional): memory order of dims, outermost first. */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  tt_t r;
  memset(&r, 0, sizeof(r));
  r.t.dtype = dtype;
  r.t.ndim = ndim;
  int64_t st = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    int d = perm ? perm[i] : i;
    r.t.strides[d] = st;
    st *= sizes[d] > 0 ? sizes[d] : 1;
  }
  for (int d = 0; d < ndim; ++d) r.t.sizes[d] = sizes[d];
  r.buf = calloc(1, (size_t)st * tpu_dtype_size(dtype) + 16);
  r.t.data = r.buf;
  return r;
}
static void fr(tt_t* t) { free(t->buf); }

static char* ep(const tpu_tensor_t* t, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; ++d) off += idx[d] * t->strides[d];
  return (char*)t->data + off * (int64_t)tpu_dtype_size(t->dtype);
}
static double get(const tpu_tensor_t* t, const int64_t* idx) { return tpu_ku_load_f64(ep(t, idx), t->dtype); }
static void set(const tpu_tensor_t* t, const int64_t* idx, double v) { tpu_ku_store_f64(ep(t, idx), t->dtype, v); }

static void unravel(const tpu_tensor_t* t, int64_t i, int64_t* idx) {
  for (int d = t->ndim - 1; d >= 0; --d) {
    idx[d] = i % t->sizes[d];
    i /= t->sizes[d];
  }
}
/* Square matrices: diag in [2,3) (sign random), off-diagonal small. */
static void fill_a(tt_t* a) {
  int64_t n = tpu_tensor_numel(&a->t), idx[TPU_MAX_DIMS];
  int nd = a->t.ndim;
  for (int64_t i = 0; i < n; ++i) {
    unravel(&a->t, i, idx);
    double v = urand();
    if (idx[nd - 1] == idx[nd - 2]) v = (v < 0 ? -1 : 1) * (2.0 + fabs(v));
    else v *= 0.5;
    set(&a->t, idx, v);
  }
}
static void fill(tt_t* x) {
  int64_t n = tpu_tensor_numel(&x->t), idx[TPU_MAX_DIMS];
  for (int64_t i = 0; i < n; ++i) {
    unravel(&x->t, i, idx);
    set(&x->t, idx, urand());
  }
}

static tpu_k_value_t vt(const tpu_tensor_t* t) { tpu_k_value_t v; v.kind = TPU_K_TENSOR; v.v.tensor = t; return v; }
static tpu_k_value_t vb(bool b) { tpu_k_value_t v; v.kind = TPU_K_BOOL; v.v.b = b; return v; }

static tpu_threadpool_t* g_pool;

static tpu_status_t call_op(const char* name, int nargs, const tpu_k_value_t* args, int nout,
                            const tpu_tensor_t* outs) {
  const tpu_k_entry_t* e = tpu_k_lookup(name);
  if (!e) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "no entry %s", name);
  tpu_k_call_t c;
  memset(&c, 0, sizeof(c));
  c.op = name;
  c.num_args = nargs;
  c.args = args;
  c.num_outputs = nout;
  c.outputs = outs;
  c.pool = g_pool;
  if (e->check) TPU_RETURN_IF_ERROR(e->check(&c));
  return e->run(&c);
}

/* Broadcast index of a batch-prefixed tensor t from output index oidx. */
static void bidx(const tpu_tensor_t* t, const int64_t* oidx, int ond, int64_t r, int64_t c,
                 int64_t* idx) {
  int tb = t->ndim - 2, ob = ond - 2;
  for (int d = 0; d < tb; ++d) idx[d] = t->sizes[d] == 1 ? 0 : oidx[d + ob - tb];
  idx[tb] = r;
  idx[tb + 1] = c;
}
/* Effective matrix element: tri(A) (with unit diag), transposed if trans. */
static double aeff(const tpu_tensor_t* A, const int64_t* oidx, int ond, int64_t i, int64_t j,
                   bool upper, bool unit, bool trans) {
  if (trans) { int64_t t = i; i = j; j = t; }
  if (i == j && unit) return 1.0;
  if (upper ? j < i : j > i) return 0.0;
  int64_t idx[TPU_MAX_DIMS];
  bidx(A, oidx, ond, i, j, idx);
  return get(A, idx);
}

/* Max |op(A) X - B| (left) or |X op(A) - B| (right) over the output. */
static double residual(const tpu_tensor_t* A, const tpu_tensor_t* B, const tpu_tensor_t* X,
                       bool upper, bool left, bool unit, bool trans) {
  int nd = X->ndim;
  int64_t n = A->sizes[A->ndim - 1];
  int64_t total = tpu_tensor_numel(X), idx[TPU_MAX_DIMS], j2[TPU_MAX_DIMS];
  double err = 0;
  for (int64_t e = 0; e < total; ++e) {
    unravel(X, e, idx);
    int64_t r = idx[nd - 2], c = idx[nd - 1];
    double s = 0;
    for (int64_t q = 0; q < n; ++q) {
      memcpy(j2, idx, sizeof(j2));
      if (left) {
        j2[nd - 2] = q;
        s += aeff(A, idx, nd, r, q, upper, unit, trans) * get(X, j2);
      } else {
        j2[nd - 1] = q;
        s += get(X, j2) * aeff(A, idx, nd, q, c, upper, unit, trans);
      }
    }
    int64_t bi[TPU_MAX_DIMS];
    bidx(B, idx, nd, r, c, bi);
    double d = fabs(s - get(B, bi));
    if (!(d <= err)) err = d; /* NaN propagates */
  }
  return err;
}

static void test_lst(int dtype, int nda, const int64_t* asz, int ndb, const int64_t* bsz,
                     int ndo, const int64_t* osz, bool upper, bool left, bool unit, bool transp,
                     bool use_out, double tol) {
  int pa[TPU_MAX_DIMS], pb[TPU_MAX_DIMS], po[TPU_MAX_DIMS];
  for (int i = 0; i < TPU_MAX_DIMS; ++i) pa[i] = pb[i] = po[i] = i;
  if (transp) {
    pa[nda - 2] = nda - 1; pa[nda - 1] = nda - 2;
    pb[ndb - 2] = ndb - 1; pb[ndb - 1] = ndb - 2;
    po[0] = ndo - 1; for (int i = 1; i < ndo; ++i) po[i] = i - 1; /* last dim outermost */
  }
  tt_t A = mk(dtype, nda, asz, pa), B = mk(dtype, ndb, bsz, pb), X = mk(dtype, ndo, osz, po);
  fill_a(&A);
  fill(&B);
  tpu_k_value_t args[6] = {vt(&A.t), vt(&B.t), vb(upper), vb(left), vb(unit), vt(&X.t)};
  tpu_status_t s = call_op(use_out ? "aten::linalg_solve_triangular.out" : "aten::linalg_solve_triangular",
                           use_out ? 6 : 5, args, 1, &X.t);
  CHECKF(s == TPU_OK, "status %s", tpu_status_message(s));
  tpu_status_free(s);
  double err = residual(&A.t, &B.t, &X.t, upper, left, unit, false);
  CHECKF(err <= tol, "dtype %d upper %d left %d unit %d transp %d: residual %g", dtype, upper,
         left, unit, transp, err);
  fr(&A); fr(&B); fr(&X);
}

static void test_all_lst(void) {
  for (int dt = 0; dt < 3; ++dt) {
    int dtype = dt == 0 ? TPU_DTYPE_F32 : dt == 1 ? TPU_DTYPE_F64 : TPU_DTYPE_BF16;
    double tol = dt == 0 ? 1e-4 : dt == 1 ? 1e-11 : 0.15;
    for (int m = 0; m < 16; ++m) {
      bool upper = m & 1, left = m & 2, unit = m & 4, transp = m & 8;
      int64_t n = 13, k = 5;
      /* plain 2-D */
      {
        int64_t a[2] = {n, n}, b[2] = {left ? n : k, left ? k : n};
        test_lst(dtype, 2, a, 2, b, 2, b, upper, left, unit, transp, m & 1, tol);
      }
      /* batch broadcast: A [2,1,n,n], B [3,.,.] -> out [2,3,.,.] */
      {
        int64_t a[4] = {2, 1, n, n}, b[3] = {3, left ? n : k, left ? k : n};
        int64_t o[4] = {2, 3, b[1], b[2]};
        test_lst(dtype, 4, a, 3, b, 4, o, upper, left, unit, transp, !(m & 1), tol);
      }
    }
  }
  /* larger, multi-threaded */
  int64_t a[3] = {4, 70, 70}, b[3] = {4, 70, 33};
  test_lst(TPU_DTYPE_F64, 3, a, 3, b, 3, b, false, true, false, true, false, 1e-10);
  test_lst(TPU_DTYPE_F16, 3, a, 3, b, 3, b, true, true, false, false, false, 0.2);
}

static void test_triangular_solve(void) {
  for (int m = 0; m < 8; ++m) {
    bool upper = m & 1, trans = m & 2, unit = m & 4;
    int64_t asz[3] = {1, 9, 9}, bsz[3] = {3, 9, 4}, msz[3] = {3, 9, 9};
    tt_t A = mk(TPU_DTYPE_F64, 3, asz, NULL), B = mk(TPU_DTYPE_F64, 3, bsz, NULL);
    tt_t X = mk(TPU_DTYPE_F64, 3, bsz, NULL), M = mk(TPU_DTYPE_F64, 3, msz, NULL);
    fill_a(&A);
    fill(&B);
    tpu_k_value_t args[7] = {vt(&B.t), vt(&A.t), vb(upper), vb(trans), vb(unit), vt(&X.t), vt(&M.t)};
    tpu_tensor_t outs[2] = {X.t, M.t};
    tpu_status_t s = call_op(m & 1 ? "aten::triangular_solve.X" : "aten::triangular_solve",
                             m & 1 ? 7 : 5, args, 2, outs);
    CHECKF(s == TPU_OK, "status %s", tpu_status_message(s));
    tpu_status_free(s);
    double err = residual(&A.t, &B.t, &X.t, upper, true, unit, trans);
    CHECKF(err <= 1e-11, "triangular_solve upper %d trans %d unit %d: residual %g", upper, trans,
           unit, err);
    bool same = true;
    for (int64_t bb = 0; bb < 3; ++bb)
      for (int64_t i = 0; i < 9; ++i)
        for (int64_t j = 0; j < 9; ++j) {
          int64_t mi[3] = {bb, i, j}, ai[3] = {0, i, j};
          if (get(&M.t, mi) != get(&A.t, ai)) same = false;
        }
    CHECK(same);
    fr(&A); fr(&B); fr(&X); fr(&M);
  }
}

static void test_edge(void) {
  /* singular: zero diagonal -> inf/nan, no error */
  {
    int64_t a[2] = {3, 3}, b[2] = {3, 2};
    tt_t A = mk(TPU_DTYPE_F32, 2, a, NULL), B = mk(TPU_DTYPE_F32, 2, b, NULL), X = mk(TPU_DTYPE_F32, 2, b, NULL);
    fill(&B);
    tpu_k_value_t args[5] = {vt(&A.t), vt(&B.t), vb(true), vb(true), vb(false)};
    CHECK_OK(call_op("aten::linalg_solve_triangular", 5, args, 1, &X.t));
    int64_t i0[2] = {2, 0};
    CHECK(!isfinite(get(&X.t, i0)));
    fr(&A); fr(&B); fr(&X);
  }
  /* unsupported dtype */
  {
    int64_t a[2] = {3, 3}, b[2] = {3, 2};
    tt_t A = mk(TPU_DTYPE_I64, 2, a, NULL), B = mk(TPU_DTYPE_I64, 2, b, NULL), X = mk(TPU_DTYPE_I64, 2, b, NULL);
    tpu_k_value_t args[5] = {vt(&A.t), vt(&B.t), vb(true), vb(true), vb(false)};
    CHECK_STATUS(call_op("aten::linalg_solve_triangular", 5, args, 1, &X.t),
                 TPU_STATUS_UNIMPLEMENTED, "int64");
    fr(&A); fr(&B); fr(&X);
  }
  /* empty */
  {
    int64_t a[2] = {0, 0}, b[2] = {0, 4};
    tt_t A = mk(TPU_DTYPE_F32, 2, a, NULL), B = mk(TPU_DTYPE_F32, 2, b, NULL), X = mk(TPU_DTYPE_F32, 2, b, NULL);
    tpu_k_value_t args[5] = {vt(&A.t), vt(&B.t), vb(false), vb(true), vb(false)};
    CHECK_OK(call_op("aten::linalg_solve_triangular", 5, args, 1, &X.t));
    fr(&A); fr(&B); fr(&X);
  }
  /* shape mismatch */
  {
    int64_t a[2] = {3, 3}, b[2] = {4, 2};
    tt_t A = mk(TPU_DTYPE_F32, 2, a, NULL), B = mk(TPU_DTYPE_F32, 2, b, NULL), X = mk(TPU_DTYPE_F32, 2, b, NULL);
    tpu_k_value_t args[5] = {vt(&A.t), vt(&B.t), vb(false), vb(true), vb(false)};
    CHECK_STATUS(call_op("aten::linalg_solve_triangular", 5, args, 1, &X.t),
                 TPU_STATUS_INVALID_ARGUMENT, NULL);
    fr(&A); fr(&B); fr(&X);
  }
}

int main(void) {
  tpu_status_t s = tpu_threadpool_create(3, &g_pool);
  if (s) {
    printf("pool: %s\n", tpu_status_message(s));
    return 1;
  }
  RUN_TEST(test_all_lst);
  RUN_TEST(test_triangular_solve);
  RUN_TEST(test_edge);
  tpu_threadpool_destroy(g_pool);
  g_pool = NULL;
  RUN_TEST(test_all_lst);
  return TEST_REPORT();
}
