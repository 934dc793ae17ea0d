/* test_k_factor.c - LU, Cholesky and QR kernels (kernels/factor.c) against
 * hand-computed factors (pivots, ties, singular info, reflector signs) and
 * residuals (P L U = A, A X = B, A A^-1 = I, Q R = A, Q^T Q = I), with
 * column-major outputs, batches, empty batches and bad arguments; Jacobi SVD
 * and eigh by residuals (U S Vh = A, A V = V diag(w)) and orthonormality. */
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

/* max |U S Vh - A| and the orthonormality errors of U's and Vh's columns/rows. */
static void svd_errors(const tpu_tensor_t* A, const tpu_tensor_t* U, const tpu_tensor_t* S, const tpu_tensor_t* Vh,
                       int64_t m, int64_t n, int64_t ucols, int64_t vrows, double* rec, double* ou, double* ov) {
  int64_t k = m < n ? m : n;
  *rec = *ou = *ov = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at2(U, i, p) * getf(S, p) * at2(Vh, p, j);
      *rec = fmax(*rec, fabs(s - at2(A, i, j)));
    }
  for (int64_t a = 0; a < ucols; ++a)
    for (int64_t b = 0; b < ucols; ++b) {
      double s = 0;
      for (int64_t i = 0; i < m; ++i) s += at2(U, i, a) * at2(U, i, b);
      *ou = fmax(*ou, fabs(s - (a == b ? 1.0 : 0.0)));
    }
  for (int64_t a = 0; a < vrows; ++a)
    for (int64_t b = 0; b < vrows; ++b) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += at2(Vh, a, j) * at2(Vh, b, j);
      *ov = fmax(*ov, fabs(s - (a == b ? 1.0 : 0.0)));
    }
}

static void test_svd(void) {
  /* [[3, 0], [4, 5]]: singular values sqrt(45), sqrt(5) */
  const double a[4] = {3, 0, 4, 5};
  tt_t A = mat(TPU_DTYPE_F64, 2, 2, a, false), U = mat(TPU_DTYPE_F64, 2, 2, a, true);
  tt_t Vh = mat(TPU_DTYPE_F64, 2, 2, a, true), S = vec(TPU_DTYPE_F64, 2);
  tpu_k_value_t args[3] = {vt(&A.t), vb(false), vb(true)};
  tpu_tensor_t outs[3] = {U.t, S.t, Vh.t};
  CHECK(ok(call_op("aten::_linalg_svd", 3, args, 3, outs)));
  CHECKF(close_f(getf(&S.t, 0), sqrt(45.0), 1e-14, 0) && close_f(getf(&S.t, 1), sqrt(5.0), 1e-14, 0), "S %g %g",
         getf(&S.t, 0), getf(&S.t, 1));
  double rec, ou, ov;
  svd_errors(&A.t, &U.t, &S.t, &Vh.t, 2, 2, 2, 2, &rec, &ou, &ov);
  CHECKF(rec < 1e-13 && ou < 1e-13 && ov < 1e-13, "2x2: %g %g %g", rec, ou, ov);
  /* random and rank-deficient rectangles, both orientations, reduced and full */
  uint64_t rng = 99;
  for (int shape = 0; shape < 4; ++shape) {
    int64_t m = shape % 2 ? 3 : 5, n = shape % 2 ? 5 : 3, k = 3;
    for (int full = 0; full < 2; ++full) {
      int64_t sa[2] = {m, n}, su[2] = {m, full ? m : k}, sv[2] = {full ? n : k, n};
      tt_t M = tku_alloc(TPU_DTYPE_F64, 2, sa, NULL, 1, 0);
      tku_fill(&M, &rng, 1.0, false);
      if (shape >= 2) /* rank 1: every row a multiple of the first */
        for (int64_t i = 1; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int64_t i0[2] = {0, j}, ij[2] = {i, j};
            set(&M.t, ij, (double)(i + 1) * get(&M.t, i0));
          }
      tt_t MU = tku_alloc(TPU_DTYPE_F64, 2, su, kColMajor, 1, 0), MV = tku_alloc(TPU_DTYPE_F64, 2, sv, kColMajor, 1, 0);
      tt_t MS = vec(TPU_DTYPE_F64, k);
      tpu_k_value_t margs[3] = {vt(&M.t), vb(full), vb(true)};
      tpu_tensor_t mouts[3] = {MU.t, MS.t, MV.t};
      CHECK(ok(call_op("aten::_linalg_svd", 3, margs, 3, mouts)));
      svd_errors(&M.t, &MU.t, &MS.t, &MV.t, m, n, su[1], sv[0], &rec, &ou, &ov);
      bool desc = getf(&MS.t, 0) >= getf(&MS.t, 1) && getf(&MS.t, 1) >= getf(&MS.t, 2) && getf(&MS.t, 2) >= 0;
      CHECKF(rec < 1e-12 && ou < 1e-12 && ov < 1e-12 && desc, "%lldx%lld full %d rank %s: %g %g %g S %g %g %g",
             (long long)m, (long long)n, full, shape >= 2 ? "1" : "full", rec, ou, ov, getf(&MS.t, 0),
             getf(&MS.t, 1), getf(&MS.t, 2));
      if (shape >= 2) CHECKF(getf(&MS.t, 1) < 1e-12, "rank 1: S[1] %g", getf(&MS.t, 1));
      fr(&M); fr(&MU); fr(&MV); fr(&MS);
    }
  }
  /* compute_uv=False: S only (U and Vh are empty); float32 */
  tt_t F = mat(TPU_DTYPE_F32, 2, 2, a, false), FS = vec(TPU_DTYPE_F32, 2);
  int64_t zero = 0;
  tpu_tensor_t E = T_(NULL, TPU_DTYPE_F32, 1, &zero, NULL);
  tpu_k_value_t fargs[3] = {vt(&F.t), vb(false), vb(false)};
  tpu_tensor_t fouts[3] = {E, FS.t, E};
  CHECK(ok(call_op("aten::_linalg_svd", 3, fargs, 3, fouts)));
  CHECKF(close_f(getf(&FS.t, 0), sqrt(45.0), 1e-6, 0) && close_f(getf(&FS.t, 1), sqrt(5.0), 1e-6, 0), "f32 S %g %g",
         getf(&FS.t, 0), getf(&FS.t, 1));
  /* 3x0, full_matrices: U = I, S and Vh empty */
  int64_t s30[2] = {3, 0}, s33[2] = {3, 3}, s00[2] = {0, 0};
  tpu_tensor_t Z = T_(NULL, TPU_DTYPE_F64, 2, s30, NULL), ZS = T_(NULL, TPU_DTYPE_F64, 1, &zero, NULL);
  tpu_tensor_t ZV = T_(NULL, TPU_DTYPE_F64, 2, s00, NULL);
  tt_t ZU = tku_alloc(TPU_DTYPE_F64, 2, s33, kColMajor, 1, 0);
  for (int64_t i = 0; i < 9; ++i) setf(&ZU.t, i, 7);
  tpu_k_value_t zargs[3] = {vt(&Z), vb(true), vb(true)};
  tpu_tensor_t zouts[3] = {ZU.t, ZS, ZV};
  CHECK(ok(call_op("aten::_linalg_svd", 3, zargs, 3, zouts)));
  double zerr = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) zerr = fmax(zerr, fabs(at2(&ZU.t, i, j) - (i == j ? 1.0 : 0.0)));
  CHECKF(zerr == 0.0, "3x0 U - I: %g", zerr);
  /* non-finite input: LinAlgError as on the CPU; bfloat16: unsupported */
  const double nan_a[4] = {1, NAN, 0, 1};
  tt_t Nn = mat(TPU_DTYPE_F64, 2, 2, nan_a, false);
  tpu_k_value_t nargs[3] = {vt(&Nn.t), vb(false), vb(true)};
  tpu_status_t st = call_op("aten::_linalg_svd", 3, nargs, 3, outs);
  CHECK(tpu_status_code(st) == TPU_STATUS_LINALG && strstr(tpu_status_message(st), "non-finite") != NULL);
  tpu_status_free(st);
  tt_t Bf = mat(TPU_DTYPE_BF16, 2, 2, a, false);
  tpu_k_value_t bargs[3] = {vt(&Bf.t), vb(false), vb(true)};
  st = call_op("aten::_linalg_svd", 3, bargs, 3, outs);
  CHECK(st != TPU_OK);
  tpu_status_free(st);
  fr(&A); fr(&U); fr(&Vh); fr(&S); fr(&F); fr(&FS); fr(&ZU); fr(&Nn); fr(&Bf);
}

static void test_eigh(void) {
  /* [[2, 1], [1, 2]]: eigenvalues 1, 3; the other triangle is ignored */
  const double lo[4] = {2, 99, 1, 2}, up[4] = {2, 1, -99, 2};
  for (int u = 0; u < 2; ++u) {
    tt_t A = mat(TPU_DTYPE_F64, 2, 2, u ? up : lo, false), V = mat(TPU_DTYPE_F64, 2, 2, lo, true);
    tt_t W = vec(TPU_DTYPE_F64, 2);
    tpu_k_value_t args[3] = {vt(&A.t), vs(u ? "U" : "L"), vb(true)};
    tpu_tensor_t outs[2] = {W.t, V.t};
    CHECK(ok(call_op("aten::_linalg_eigh", 3, args, 2, outs)));
    CHECKF(close_f(getf(&W.t, 0), 1.0, 1e-15, 1e-15) && close_f(getf(&W.t, 1), 3.0, 1e-15, 0), "uplo %d: w %g %g", u,
           getf(&W.t, 0), getf(&W.t, 1));
    double r = fabs(at2(&V.t, 0, 0) + at2(&V.t, 1, 0)) + fabs(fabs(at2(&V.t, 0, 1)) - sqrt(0.5));
    CHECKF(r < 1e-15, "uplo %d: eigenvectors %g %g %g %g", u, at2(&V.t, 0, 0), at2(&V.t, 1, 0), at2(&V.t, 0, 1),
           at2(&V.t, 1, 1));
    fr(&A); fr(&V); fr(&W);
  }
  /* a random symmetric 6x6, batched (2): A V = V diag(w), V^T V = I, w ascending */
  uint64_t rng = 5;
  int64_t s[3] = {2, 6, 6}, sw[2] = {2, 6};
  tt_t R = tku_alloc(TPU_DTYPE_F64, 3, s, NULL, 1, 0);
  tku_fill(&R, &rng, 1.0, false);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < i; ++j) {
        int64_t ij[3] = {b, i, j}, ji[3] = {b, j, i};
        set(&R.t, ji, get(&R.t, ij));
      }
  tt_t V = tku_alloc(TPU_DTYPE_F64, 3, s, kColMajor3, 1, 0), W = tku_alloc(TPU_DTYPE_F64, 2, sw, NULL, 1, 0);
  tpu_k_value_t args[3] = {vt(&R.t), vs("L"), vb(true)};
  tpu_tensor_t outs[2] = {W.t, V.t};
  CHECK(ok(call_op("aten::_linalg_eigh", 3, args, 2, outs)));
  double res = 0, orth = 0;
  bool asc = true;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i) {
      int64_t wi[2] = {b, i}, wp[2] = {b, i - 1};
      if (i > 0) asc &= get(&W.t, wp) <= get(&W.t, wi);
      for (int64_t c = 0; c < 6; ++c) {
        double av = 0, vv = 0;
        for (int64_t p = 0; p < 6; ++p) {
          int64_t ip[3] = {b, i, p}, pc[3] = {b, p, c}, pi[3] = {b, p, i};
          av += get(&R.t, ip) * get(&V.t, pc);
          vv += get(&V.t, pi) * get(&V.t, pc);
        }
        int64_t ic[3] = {b, i, c}, wc[2] = {b, c};
        res = fmax(res, fabs(av - get(&V.t, ic) * get(&W.t, wc)));
        orth = fmax(orth, fabs(vv - (i == c ? 1.0 : 0.0)));
      }
    }
  CHECKF(res < 1e-12 && orth < 1e-12 && asc, "A V - V w %g, V^T V - I %g, ascending %d", res, orth, asc);
  /* compute_v=False, and a bad UPLO */
  int64_t zero = 0;
  tpu_tensor_t E = T_(NULL, TPU_DTYPE_F64, 1, &zero, NULL);
  tt_t W2 = tku_alloc(TPU_DTYPE_F64, 2, sw, NULL, 1, 0);
  tpu_k_value_t nargs[3] = {vt(&R.t), vs("U"), vb(false)};
  tpu_tensor_t nouts[2] = {W2.t, E};
  CHECK(ok(call_op("aten::_linalg_eigh", 3, nargs, 2, nouts)));
  double dw = 0;
  for (int64_t i = 0; i < 12; ++i) dw = fmax(dw, fabs(getf(&W2.t, i) - getf(&W.t, i)));
  CHECKF(dw < 1e-12, "eigenvalues without vectors differ by %g", dw);
  tpu_k_value_t bargs[3] = {vt(&R.t), vs("X"), vb(true)};
  tpu_status_t st = call_op("aten::_linalg_eigh", 3, bargs, 2, outs);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(st);
  fr(&R); fr(&V); fr(&W); fr(&W2);
}

int main(void) {
  if (!tku_start(2)) return 1;
  test_lu_pivots();
  test_lu_solve_inv_det();
  test_cholesky();
  test_qr();
  test_svd();
  test_eigh();
  return tku_finish();
}
