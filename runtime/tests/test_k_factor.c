/* test_k_factor.c - LU, Cholesky and QR kernels (kernels/factor.c) against
 * hand-computed factors (pivots, ties, singular info, reflector signs) and
 * residuals (P L U = A, A X = B, A A^-1 = I, Q R = A, Q^T Q = I), with
 * column-major outputs, batches, empty batches and bad arguments. */
#include "tests/test_kernel_util.h"

static const int kColMajor[2] = {1, 0};
static const int kColMajor3[3] = {0, 2, 1};

/* A contiguous 2-d matrix from row-major values. */
static tt_t mat(int dt, int64_t r, int64_t c, const double* v, bool colmajor) {
  int64_t s[2] = {r, c};
  tt_t t = tku_alloc(dt, 2, s, colmajor ? kColMajor : NULL, 1, 0);
  for (int64_t i = 0; i < r * c; ++i) setf(&t.t, i, v[i]);
  return t;
}
static tt_t vec(int dt, int64_t n) { return tku_alloc(dt, 1, &n, NULL, 1, 0); }
static tt_t scalar(int dt) { return tku_alloc(dt, 0, NULL, NULL, 1, 0); }
static double at2(const tpu_tensor_t* t, int64_t i, int64_t j) {
  int64_t idx[2] = {i, j};
  return get(t, idx);
}

static void test_lu_pivots(void) {
  const double a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 10};
  tt_t A = mat(TPU_DTYPE_F64, 3, 3, a, false), LU = mat(TPU_DTYPE_F64, 3, 3, a, true);
  tt_t piv = vec(TPU_DTYPE_I32, 3), info = scalar(TPU_DTYPE_I32);
  tpu_k_value_t args[3] = {vt(&A.t), vb(true), vb(false)};
  tpu_tensor_t outs[3] = {LU.t, piv.t, info.t};
  CHECK(ok(call_op("aten::linalg_lu_factor_ex", 3, args, 3, outs)));
  CHECKF(geti(&piv.t, 0) == 3 && geti(&piv.t, 1) == 3 && geti(&piv.t, 2) == 3 && geti(&info.t, 0) == 0,
         "pivots %lld %lld %lld info %lld", (long long)geti(&piv.t, 0), (long long)geti(&piv.t, 1),
         (long long)geti(&piv.t, 2), (long long)geti(&info.t, 0));
  /* P L U == A: undo the interchanges on L U. */
  double lu[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int p = 0; p < 3; ++p) {
        double l = p < i ? at2(&LU.t, i, p) : (p == i ? 1.0 : 0.0);
        double u = p <= j ? at2(&LU.t, p, j) : 0.0;
        s += l * u;
      }
      lu[i][j] = s;
    }
  for (int i = 2; i >= 0; --i) {
    int p = (int)geti(&piv.t, i) - 1;
    for (int j = 0; j < 3; ++j) {
      double t = lu[i][j];
      lu[i][j] = lu[p][j];
      lu[p][j] = t;
    }
  }
  double err = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) err = fmax(err, fabs(lu[i][j] - a[i * 3 + j]));
  CHECKF(err < 1e-12, "P L U - A: %g", err);
  /* a tie in |value| takes the first row */
  const double tie[4] = {1, 0, -1, 1};
  tt_t T = mat(TPU_DTYPE_F32, 2, 2, tie, false), TLU = mat(TPU_DTYPE_F32, 2, 2, tie, true);
  tt_t tp = vec(TPU_DTYPE_I32, 2);
  tpu_k_value_t targs[3] = {vt(&T.t), vb(true), vb(false)};
  tpu_tensor_t touts[3] = {TLU.t, tp.t, info.t};
  CHECK(ok(call_op("aten::linalg_lu_factor_ex", 3, targs, 3, touts)));
  CHECK(geti(&tp.t, 0) == 1 && geti(&tp.t, 1) == 2 && at2(&TLU.t, 1, 0) == -1.0);
  /* singular: info is the first zero pivot; a zero column is not interchanged */
  const double sing[4] = {1, 2, 2, 4};
  tt_t S = mat(TPU_DTYPE_F64, 2, 2, sing, false), SLU = mat(TPU_DTYPE_F64, 2, 2, sing, true);
  tpu_k_value_t sargs[3] = {vt(&S.t), vb(true), vb(false)};
  tpu_tensor_t souts[3] = {SLU.t, tp.t, info.t};
  CHECK(ok(call_op("aten::linalg_lu_factor_ex", 3, sargs, 3, souts)));
  CHECKF(geti(&info.t, 0) == 2 && geti(&tp.t, 0) == 2 && geti(&tp.t, 1) == 2, "info %lld",
         (long long)geti(&info.t, 0));
  /* check_errors reports it */
  tpu_k_value_t eargs[3] = {vt(&S.t), vb(true), vb(true)};
  tpu_status_t st = call_op("aten::linalg_lu_factor_ex", 3, eargs, 3, souts);
  CHECK(tpu_status_code(st) == TPU_STATUS_FAILED_PRECONDITION && strstr(tpu_status_message(st), "U[2,2] is zero") != NULL);
  tpu_status_free(st);
  /* no pivoting and integer inputs are refused */
  tpu_k_value_t nargs[3] = {vt(&A.t), vb(false), vb(false)};
  st = call_op("aten::linalg_lu_factor_ex", 3, nargs, 3, outs);
  CHECK(tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(st);
  tt_t I = mat(TPU_DTYPE_I64, 3, 3, a, false);
  tpu_k_value_t iargs[3] = {vt(&I.t), vb(true), vb(false)};
  st = call_op("aten::linalg_lu_factor_ex", 3, iargs, 3, outs);
  CHECK(tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED && strstr(tpu_status_message(st), "int64") != NULL);
  tpu_status_free(st);
  fr(&A); fr(&LU); fr(&piv); fr(&info); fr(&T); fr(&TLU); fr(&tp); fr(&S); fr(&SLU); fr(&I);
}

/* Batched solve (LU broadcast over B's batch), inverse, det, slogdet. */
static void test_lu_solve_inv_det(void) {
  uint64_t rng = 12345;
  int64_t as[3] = {2, 4, 4}, bs[3] = {2, 4, 3};
  tt_t A = tku_alloc(TPU_DTYPE_F64, 3, as, NULL, 1, 0);
  tku_fill(&A, &rng, 1.0, false);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i) {
      int64_t idx[3] = {b, i, i};
      set(&A.t, idx, get(&A.t, idx) + 3.0);
    }
  tt_t B = tku_alloc(TPU_DTYPE_F64, 3, bs, NULL, 1, 0);
  tku_fill(&B, &rng, 1.0, false);
  tt_t X = tku_alloc(TPU_DTYPE_F64, 3, bs, kColMajor3, 1, 0);
  tt_t LU = tku_alloc(TPU_DTYPE_F64, 3, as, kColMajor3, 1, 0);
  int64_t ps[2] = {2, 4};
  tt_t piv = tku_alloc(TPU_DTYPE_I32, 2, ps, NULL, 1, 0), info = tku_alloc(TPU_DTYPE_I32, 1, as, NULL, 1, 0);
  tpu_k_value_t args[4] = {vt(&A.t), vt(&B.t), vb(true), vb(false)};
  tpu_tensor_t outs[4] = {X.t, LU.t, piv.t, info.t};
  CHECK(ok(call_op("aten::_linalg_solve_ex", 4, args, 4, outs)));
  double err = 0;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (int p = 0; p < 4; ++p) {
          int64_t ia[3] = {b, i, p}, ix[3] = {b, p, c};
          s += get(&A.t, ia) * get(&X.t, ix);
        }
        int64_t ib[3] = {b, i, c};
        err = fmax(err, fabs(s - get(&B.t, ib)));
      }
  CHECKF(err < 1e-12, "A X - B: %g", err);
  /* adjoint solve with the factors: A^T X = B */
  tpu_k_value_t sargs[5] = {vt(&LU.t), vt(&piv.t), vt(&B.t), vb(true), vb(true)};
  CHECK(ok(call_op("aten::linalg_lu_solve", 5, sargs, 1, &X.t)));
  err = 0;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (int p = 0; p < 4; ++p) {
          int64_t ia[3] = {b, p, i}, ix[3] = {b, p, c};
          s += get(&A.t, ia) * get(&X.t, ix);
        }
        int64_t ib[3] = {b, i, c};
        err = fmax(err, fabs(s - get(&B.t, ib)));
      }
  CHECKF(err < 1e-12, "A^T X - B: %g", err);
  /* a pivot out of range is an error, not a wild read */
  int64_t pz[2] = {0, 0};
  set(&piv.t, pz, 9);
  tpu_status_t st = call_op("aten::linalg_lu_solve", 5, sargs, 1, &X.t);
  CHECK(tpu_status_code(st) == TPU_STATUS_FAILED_PRECONDITION && strstr(tpu_status_message(st), "pivots") != NULL);
  tpu_status_free(st);
  /* inverse */
  tt_t Inv = tku_alloc(TPU_DTYPE_F64, 3, as, kColMajor3, 1, 0);
  tpu_k_value_t iargs[2] = {vt(&A.t), vb(false)};
  tpu_tensor_t iouts[2] = {Inv.t, info.t};
  CHECK(ok(call_op("aten::linalg_inv_ex", 2, iargs, 2, iouts)));
  err = 0;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 4; ++c) {
        double s = 0;
        for (int p = 0; p < 4; ++p) {
          int64_t ia[3] = {b, i, p}, ix[3] = {b, p, c};
          s += get(&A.t, ia) * get(&Inv.t, ix);
        }
        err = fmax(err, fabs(s - (i == c ? 1.0 : 0.0)));
      }
  CHECKF(err < 1e-12, "A A^-1 - I: %g", err);
  /* det([[1,2],[3,4]]) = -2 */
  const double d2[4] = {1, 2, 3, 4};
  tt_t D = mat(TPU_DTYPE_F32, 2, 2, d2, false), DLU = mat(TPU_DTYPE_F32, 2, 2, d2, true);
  tt_t det = scalar(TPU_DTYPE_F32), lad = scalar(TPU_DTYPE_F32), dp = vec(TPU_DTYPE_I32, 2);
  tpu_k_value_t dargs[1] = {vt(&D.t)};
  tpu_tensor_t douts[3] = {det.t, DLU.t, dp.t};
  CHECK(ok(call_op("aten::_linalg_det", 1, dargs, 3, douts)));
  CHECKF(close_f(getf(&det.t, 0), -2.0, 1e-6, 0), "det %g", getf(&det.t, 0));
  tpu_tensor_t sl[4] = {det.t, lad.t, DLU.t, dp.t};
  CHECK(ok(call_op("aten::_linalg_slogdet", 1, dargs, 4, sl)));
  CHECKF(getf(&det.t, 0) == -1.0 && close_f(getf(&lad.t, 0), log(2.0), 1e-6, 0), "sign %g log %g",
         getf(&det.t, 0), getf(&lad.t, 0));
  /* an empty batch does nothing */
  int64_t es[3] = {0, 4, 4}, esb[1] = {0};
  tt_t E = tku_alloc(TPU_DTYPE_F64, 3, es, NULL, 1, 0), Ei = tku_alloc(TPU_DTYPE_I32, 1, esb, NULL, 1, 0);
  tpu_k_value_t eargs[2] = {vt(&E.t), vb(true)};
  tpu_tensor_t eouts[2] = {E.t, Ei.t};
  CHECK(ok(call_op("aten::linalg_inv_ex", 2, eargs, 2, eouts)));
  /* non-square for inv */
  int64_t ns[2] = {2, 3};
  tt_t N = tku_alloc(TPU_DTYPE_F64, 2, ns, NULL, 1, 0);
  tpu_k_value_t nargs[2] = {vt(&N.t), vb(false)};
  tpu_tensor_t nouts[2] = {N.t, info.t};
  st = call_op("aten::linalg_inv_ex", 2, nargs, 2, nouts);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(st);
  fr(&A); fr(&B); fr(&X); fr(&LU); fr(&piv); fr(&info); fr(&Inv); fr(&D); fr(&DLU); fr(&det); fr(&lad);
  fr(&dp); fr(&E); fr(&Ei); fr(&N);
}

static void test_cholesky(void) {
  const double a[4] = {4, 2, 2, 3};
  tt_t A = mat(TPU_DTYPE_F64, 2, 2, a, false), L = mat(TPU_DTYPE_F64, 2, 2, a, true);
  tt_t info = scalar(TPU_DTYPE_I32);
  for (int up = 0; up < 2; ++up) {
    tpu_k_value_t args[3] = {vt(&A.t), vb(up), vb(false)};
    tpu_tensor_t outs[2] = {L.t, info.t};
    CHECK(ok(call_op("aten::linalg_cholesky_ex", 3, args, 2, outs)));
    double l10 = up ? at2(&L.t, 0, 1) : at2(&L.t, 1, 0), z = up ? at2(&L.t, 1, 0) : at2(&L.t, 0, 1);
    CHECKF(at2(&L.t, 0, 0) == 2.0 && l10 == 1.0 && z == 0.0 && close_f(at2(&L.t, 1, 1), sqrt(2.0), 1e-15, 0) &&
               geti(&info.t, 0) == 0,
           "upper %d: %g %g %g %g", up, at2(&L.t, 0, 0), at2(&L.t, 0, 1), at2(&L.t, 1, 0), at2(&L.t, 1, 1));
  }
  const double bad[4] = {1, 2, 2, 1};
  tt_t B = mat(TPU_DTYPE_F32, 2, 2, bad, false), BL = mat(TPU_DTYPE_F32, 2, 2, bad, true);
  tpu_k_value_t bargs[3] = {vt(&B.t), vb(false), vb(false)};
  tpu_tensor_t bouts[2] = {BL.t, info.t};
  CHECK(ok(call_op("aten::linalg_cholesky_ex", 3, bargs, 2, bouts)));
  CHECKF(geti(&info.t, 0) == 2, "info %lld", (long long)geti(&info.t, 0));
  tpu_k_value_t eargs[3] = {vt(&B.t), vb(false), vb(true)};
  tpu_status_t st = call_op("aten::linalg_cholesky_ex", 3, eargs, 2, bouts);
  CHECK(tpu_status_code(st) == TPU_STATUS_LINALG && strstr(tpu_status_message(st), "leading minor of order 2") != NULL);
  tpu_status_free(st);
  /* cholesky_inverse of L = inv(A) = [[3,-2],[-2,4]] / 8 */
  tpu_k_value_t largs[3] = {vt(&A.t), vb(false), vb(false)};
  tpu_tensor_t louts[2] = {L.t, info.t};
  CHECK(ok(call_op("aten::linalg_cholesky_ex", 3, largs, 2, louts)));
  tt_t Inv = mat(TPU_DTYPE_F64, 2, 2, a, true);
  tpu_k_value_t iargs[2] = {vt(&L.t), vb(false)};
  CHECK(ok(call_op("aten::cholesky_inverse", 2, iargs, 1, &Inv.t)));
  CHECKF(close_f(at2(&Inv.t, 0, 0), 3.0 / 8, 1e-14, 0) && close_f(at2(&Inv.t, 0, 1), -2.0 / 8, 1e-14, 0) &&
             close_f(at2(&Inv.t, 1, 1), 4.0 / 8, 1e-14, 0),
         "inverse %g %g %g", at2(&Inv.t, 0, 0), at2(&Inv.t, 0, 1), at2(&Inv.t, 1, 1));
  /* solve A x = [8, 7] -> x = [1.25, 1.5] */
  const double rhs[2] = {8, 7};
  tt_t R = mat(TPU_DTYPE_F64, 2, 1, rhs, false), X = mat(TPU_DTYPE_F64, 2, 1, rhs, true);
  tpu_k_value_t sargs[3] = {vt(&R.t), vt(&L.t), vb(false)};
  CHECK(ok(call_op("aten::_cholesky_solve_helper", 3, sargs, 1, &X.t)));
  CHECKF(close_f(at2(&X.t, 0, 0), 1.25, 1e-14, 0) && close_f(at2(&X.t, 1, 0), 1.5, 1e-14, 0), "x %g %g",
         at2(&X.t, 0, 0), at2(&X.t, 1, 0));
  /* 0x0 matrices without storage: info 0 for each, nothing else touched */
  int64_t zs[3] = {2, 0, 0}, zb[1] = {2};
  tpu_tensor_t Z = T_(NULL, TPU_DTYPE_F64, 3, zs, NULL);
  tt_t zi = tku_alloc(TPU_DTYPE_I32, 1, zb, NULL, 1, 0);
  setf(&zi.t, 0, 7);
  setf(&zi.t, 1, 7);
  tpu_k_value_t zargs[3] = {vt(&Z), vb(false), vb(false)};
  tpu_tensor_t zouts[2] = {Z, zi.t};
  CHECK(ok(call_op("aten::linalg_cholesky_ex", 3, zargs, 2, zouts)));
  CHECK(geti(&zi.t, 0) == 0 && geti(&zi.t, 1) == 0);
  setf(&zi.t, 0, 7);
  CHECK(ok(call_op("aten::linalg_inv_ex", 2, zargs, 2, zouts)));
  CHECK(geti(&zi.t, 0) == 0);
  fr(&A); fr(&L); fr(&info); fr(&B); fr(&BL); fr(&Inv); fr(&R); fr(&X); fr(&zi);
}

static void test_qr(void) {
  /* geqrf of [3, 4]^T: beta = -5, tau = 1.6, v = [1, 0.5] */
  const double c[2] = {3, 4};
  tt_t A = mat(TPU_DTYPE_F64, 2, 1, c, false), a = mat(TPU_DTYPE_F64, 2, 1, c, true);
  tt_t tau = vec(TPU_DTYPE_F64, 1);
  tpu_k_value_t args[1] = {vt(&A.t)};
  tpu_tensor_t outs[2] = {a.t, tau.t};
  CHECK(ok(call_op("aten::geqrf", 1, args, 2, outs)));
  CHECKF(close_f(at2(&a.t, 0, 0), -5.0, 1e-15, 0) && close_f(at2(&a.t, 1, 0), 0.5, 1e-15, 0) &&
             close_f(getf(&tau.t, 0), 1.6, 1e-15, 0),
         "a %g %g tau %g", at2(&a.t, 0, 0), at2(&a.t, 1, 0), getf(&tau.t, 0));
  /* complete QR of a 4x3: Q R = A, Q^T Q = I, R upper */
  uint64_t rng = 777;
  int64_t s43[2] = {4, 3}, s44[2] = {4, 4};
  tt_t M = tku_alloc(TPU_DTYPE_F64, 2, s43, NULL, 1, 0);
  tku_fill(&M, &rng, 1.0, false);
  tt_t Q = tku_alloc(TPU_DTYPE_F64, 2, s44, kColMajor, 1, 0), R = tku_alloc(TPU_DTYPE_F64, 2, s43, kColMajor, 1, 0);
  tpu_k_value_t qargs[2] = {vt(&M.t), vs("complete")};
  tpu_tensor_t qouts[2] = {Q.t, R.t};
  CHECK(ok(call_op("aten::linalg_qr", 2, qargs, 2, qouts)));
  double err = 0, orth = 0, low = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0, o = 0;
      for (int p = 0; p < 4; ++p) {
        if (j < 3) s += at2(&Q.t, i, p) * at2(&R.t, p, j);
        o += at2(&Q.t, p, i) * at2(&Q.t, p, j);
      }
      if (j < 3) err = fmax(err, fabs(s - at2(&M.t, i, j)));
      if (j < 3 && i > j) low = fmax(low, fabs(at2(&R.t, i, j)));
      orth = fmax(orth, fabs(o - (i == j ? 1.0 : 0.0)));
    }
  CHECKF(err < 1e-12 && orth < 1e-12 && low == 0.0, "QR - A %g, Q^T Q - I %g, below R %g", err, orth, low);
  /* ormqr(a, tau, I) is householder_product(a, tau) */
  tt_t G = tku_alloc(TPU_DTYPE_F64, 2, s43, kColMajor, 1, 0), T = vec(TPU_DTYPE_F64, 3);
  tpu_tensor_t gouts[2] = {G.t, T.t};
  tpu_k_value_t gargs[1] = {vt(&M.t)};
  CHECK(ok(call_op("aten::geqrf", 1, gargs, 2, gouts)));
  tt_t H = tku_alloc(TPU_DTYPE_F64, 2, s43, kColMajor, 1, 0), O = tku_alloc(TPU_DTYPE_F64, 2, s43, NULL, 1, 0);
  tt_t Id = tku_alloc(TPU_DTYPE_F64, 2, s43, NULL, 1, 0);
  for (int i = 0; i < 3; ++i) {
    int64_t idx[2] = {i, i};
    set(&Id.t, idx, 1.0);
  }
  tpu_k_value_t hargs[2] = {vt(&G.t), vt(&T.t)};
  CHECK(ok(call_op("aten::linalg_householder_product", 2, hargs, 1, &H.t)));
  tpu_k_value_t oargs[5] = {vt(&G.t), vt(&T.t), vt(&Id.t), vb(true), vb(false)};
  CHECK(ok(call_op("aten::ormqr", 5, oargs, 1, &O.t)));
  err = 0;
  for (int64_t i = 0; i < 12; ++i) err = fmax(err, fabs(getf(&H.t, i) - getf(&O.t, i)));
  CHECKF(err < 1e-13, "householder_product vs ormqr: %g", err);
  /* a bad mode */
  tpu_k_value_t bargs[2] = {vt(&M.t), vs("full")};
  tpu_status_t st = call_op("aten::linalg_qr", 2, bargs, 2, qouts);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT && strstr(tpu_status_message(st), "full") != NULL);
  tpu_status_free(st);
  fr(&A); fr(&a); fr(&tau); fr(&M); fr(&Q); fr(&R); fr(&G); fr(&T); fr(&H); fr(&O); fr(&Id);
}

int main(void) {
  if (!tku_start(2)) return 1;
  test_lu_pivots();
  test_lu_solve_inv_det();
  test_cholesky();
  test_qr();
  return tku_finish();
}
