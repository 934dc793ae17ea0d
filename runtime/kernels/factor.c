/* factor.c - dense matrix factorisations and what is built on them, in the
 * conventions of LAPACK as PyTorch's CPU returns them (float32, float64):
 *
 *   LU with partial pivoting (getrf): linalg_lu_factor_ex, linalg_lu_solve,
 *     _linalg_solve_ex, linalg_inv_ex, _linalg_det, _linalg_slogdet,
 *     lu_unpack, linalg_lu;
 *   Cholesky (potrf): linalg_cholesky_ex, _cholesky_solve_helper,
 *     cholesky_inverse;
 *   Householder QR (geqrf): geqrf, linalg_qr, linalg_householder_product,
 *     ormqr;
 *   one-sided Jacobi SVD: _linalg_svd (singular values descending, U and Vh
 *     orthonormal, null and full_matrices columns completed from the
 *     standard basis; the signs of the singular vectors are Jacobi's, not
 *     gesdd's); cyclic Jacobi eigensolver: _linalg_eigh (the UPLO triangle,
 *     eigenvalues ascending). Both compute in double for float32 as well.
 *
 * Every op works one matrix at a time, in parallel over the batch: the
 * matrix is loaded from its strided view into a column-major double scratch
 * (one buffer per chunk of batch elements: the exception to "kernels
 * allocate nothing", failure is OUT_OF_MEMORY), factored there and stored to
 * the outputs, whose sizes and strides (LAPACK's column-major layouts) came
 * from PyTorch's meta functions. Factorisations of float32 round each
 * operation's result to float32, so the pivots follow float32 arithmetic as
 * LAPACK's sgetrf does; the solves accumulate in double.
 *
 * LU pivot choice is LAPACK's: the first row of largest |value| at or below
 * the diagonal; a zero pivot leaves its column unscaled and sets info to its
 * 1-based index (the first one). Pivots are 1-based int32, row interchanges
 * applied in order. Cholesky's info is the order of the first leading minor
 * that is not positive-definite. Householder reflectors are LAPACK's
 * H = I - tau v v^T, v[0] = 1, beta = -sign(alpha) ||x||, tau = 0 when the
 * column below the diagonal is zero.
 *
 * check_errors=True (lu_factor_ex, solve_ex, inv_ex, cholesky_ex) returns
 * PyTorch's LinAlgError message from run(): being data-dependent, it surfaces
 * at the next synchronisation rather than at the call.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kutil.h"

/* ---- strided matrices and the batch ------------------------------------------ */

typedef struct {
  char* p;                  /* element [0, ..., 0]; NULL: absent */
  int dt;
  int64_t rs, cs;           /* byte strides of the matrix rows / columns */
  int64_t bst[TPU_MAX_DIMS];/* byte strides of the batch dims */
} fx_mat_t;

typedef struct {
  int nb;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t count;
} fx_batch_t;

static void fx_batch_of(const tpu_tensor_t* t, int core, fx_batch_t* b) {
  b->nb = t->ndim - core;
  b->count = 1;
  for (int d = 0; d < b->nb; ++d) {
    b->sizes[d] = t->sizes[d];
    b->count *= t->sizes[d];
  }
}

/* The view of `t` with its last `core` dims (2: a matrix, 1: a vector, 0: a
 * scalar) over the batch; `trans` swaps a matrix's row and column strides. */
static tpu_status_t fx_mat(const tpu_k_call_t* call, const tpu_tensor_t* t, int core, const fx_batch_t* b,
                           bool trans, fx_mat_t* m) {
  memset(m, 0, sizeof(*m));
  if (!t || t->dtype == TPU_DTYPE_INVALID) return TPU_OK;
  TPU_RETURN_IF_ERROR(tpu_ku_batch_strides(call, t, core, b->sizes, b->nb, m->bst));
  int64_t es = (int64_t)tpu_dtype_size(t->dtype);
  m->p = (char*)t->data;
  m->dt = t->dtype;
  if (core >= 1) m->rs = t->strides[t->ndim - core] * es;
  if (core == 2) m->cs = t->strides[t->ndim - 1] * es;
  if (trans) {
    int64_t s = m->rs;
    m->rs = m->cs;
    m->cs = s;
  }
  return TPU_OK;
}

static inline char* fx_at(const fx_mat_t* m, const fx_batch_t* b, int64_t bi) {
  if (!m->p) return NULL; /* absent, or an empty tensor without storage */
  return tpu_ku_batch_at(m->p, b->sizes, m->bst, b->nb, bi);
}

/* Column-major scratch s (leading dimension ld) <-> rows x cols of a view. */
static void fx_load(const fx_mat_t* m, const char* base, int64_t rows, int64_t cols, double* s, int64_t ld) {
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) s[i + j * ld] = tpu_ku_load_f64(base + i * m->rs + j * m->cs, m->dt);
}
static void fx_store(const fx_mat_t* m, char* base, int64_t rows, int64_t cols, const double* s, int64_t ld) {
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) tpu_ku_store_f64(base + i * m->rs + j * m->cs, m->dt, s[i + j * ld]);
}

static inline double fx_rnd(double x, bool f32) { return f32 ? (double)(float)x : x; }

static bool fx_dtype_ok(int dt) { return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64; }

/* ---- the job: one item per batch element -------------------------------------- */

typedef struct fx_job_s fx_job_t;
typedef void (*fx_item_fn_t)(fx_job_t* j, int64_t bi, double* ws);

struct fx_job_s {
  const tpu_k_call_t* call;
  fx_batch_t b;
  int64_t m, n, k;  /* the matrix is m x n, k = min(m, n) (or the columns solved) */
  bool f32;
  bool flag;        /* lu_solve: solve with A^T; cholesky: upper; lu_unpack: data */
  bool flag2;       /* lu_unpack: pivots; ormqr: transpose */
  bool flag3;       /* ormqr: left */
  int64_t qcols;    /* linalg_qr: columns of Q (0: none) */
  fx_mat_t a, b2, lu, piv, info, x, p, l, u, det, logdet;
  size_t ws_bytes;
  fx_item_fn_t item;
  atomic_int oom, bad_pivot, nonfinite;
};

static void fx_chunk(void* ctx, int64_t begin, int64_t end) {
  fx_job_t* j = (fx_job_t*)ctx;
  double* ws = NULL;
  if (j->ws_bytes) {
    ws = (double*)malloc(j->ws_bytes);
    if (!ws) {
      atomic_store(&j->oom, 1);
      return;
    }
  }
  for (int64_t bi = begin; bi < end; ++bi) j->item(j, bi, ws);
  free(ws);
}

/* Runs the job's items; `cost` is about the flops of one item. */
static tpu_status_t fx_run(fx_job_t* j, double cost) {
  if (j->b.count == 0) return TPU_OK;
  double g = 262144.0 / (cost + 1.0);
  int64_t grain = g < 1.0 ? 1 : (g > (double)j->b.count ? j->b.count : (int64_t)g);
  tpu_parallel_for(j->call->pool, j->b.count, grain, fx_chunk, j);
  if (atomic_load(&j->oom))
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a %lldx%lld scratch matrix",
                     j->call->op, (long long)j->m, (long long)j->n);
  if (atomic_load(&j->bad_pivot)) /* a RuntimeError, as the CPU raises */
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: pivots passed to lu_unpack must be between 1 and LU.size(-2) "
                     "inclusive.Did you properly pass the result of lu_factor?", j->call->op); /* the CPU's words */
  if (atomic_load(&j->nonfinite)) /* svd: LAPACK's info > 0 on such input, LinAlgError on the CPU */
    return TPU_ERROR(TPU_STATUS_LINALG, "linalg.svd: The algorithm failed to converge because the input matrix "
                     "contained non-finite values.");
  return TPU_OK;
}

/* PyTorch's _linalg_check_errors: the first batch element whose info is
 * non-zero, as the message of `api` (TPU_STATUS_LINALG: LinAlgError, but for
 * lu_factor, whose error the CPU raises as a plain RuntimeError). */
typedef enum { FX_ERR_LU_FACTOR, FX_ERR_SOLVE, FX_ERR_INV, FX_ERR_CHOLESKY } fx_err_kind_t;

static tpu_status_t fx_check_info(const fx_job_t* j, const tpu_tensor_t* info, const char* api,
                                  fx_err_kind_t kind) {
  for (int64_t bi = 0; bi < j->b.count; ++bi) {
    int64_t v = tpu_ku_load_i64(fx_at(&j->info, &j->b, bi), j->info.dt);
    if (v == 0) continue;
    char batch[64] = "";
    if (info->ndim > 0) snprintf(batch, sizeof(batch), ": (Batch element %lld)", (long long)bi);
    long long i = (long long)v;
    switch (kind) {
      case FX_ERR_LU_FACTOR: /* a plain RuntimeError on the CPU */
        return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                         "%s%s: U[%lld,%lld] is zero and using it on lu_solve would result in a division by "
                         "zero. If you still want to perform the factorization, consider calling "
                         "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)",
                         api, batch, i, i);
      case FX_ERR_SOLVE:
        return TPU_ERROR(TPU_STATUS_LINALG,
                         "%s%s: The solver failed because the input matrix is singular.", api, batch);
      case FX_ERR_INV:
        return TPU_ERROR(TPU_STATUS_LINALG,
                         "%s%s: The diagonal element %lld is zero, the inversion could not be completed "
                         "because the input matrix is singular.",
                         api, batch, i);
      default:
        return TPU_ERROR(TPU_STATUS_LINALG,
                         "%s%s: The factorization could not be completed because the input is not "
                         "positive-definite (the leading minor of order %lld is not positive-definite).",
                         api, batch, i);
    }
  }
  return TPU_OK;
}

/* Validates the square or rectangular matrix input `A` (argument `ai`). */
static tpu_status_t fx_input(const tpu_k_call_t* call, int ai, bool square, const tpu_tensor_t** out) {
  const tpu_tensor_t* A = tpu_ku_tensor(call, ai);
  if (!A || !call->outputs || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  if (!fx_dtype_ok(A->dtype)) return tpu_ku_unsupported_dtype(call, A->dtype);
  if (A->ndim < 2) return TPU_KU_INVALID(call, "expected a tensor with at least 2 dims, got %d", (int)A->ndim);
  if (square && A->sizes[A->ndim - 1] != A->sizes[A->ndim - 2])
    return TPU_KU_INVALID(call, "A must be batches of square matrices, but they are %lld by %lld matrices",
                          (long long)A->sizes[A->ndim - 2], (long long)A->sizes[A->ndim - 1]);
  *out = A;
  return TPU_OK;
}

static const tpu_tensor_t* fx_out(const tpu_k_call_t* call, int i) {
  return i < call->num_outputs && call->outputs[i].dtype != TPU_DTYPE_INVALID ? &call->outputs[i] : NULL;
}

/* Every floating output must be the input's dtype (out= of another dtype). */
static tpu_status_t fx_same_dtype(const tpu_k_call_t* call, const tpu_tensor_t* t, int dt, const char* what) {
  if (t && t->dtype != dt)
    return TPU_KU_INVALID(call, "%s must be %s, got %s", what, tpu_dtype_name((tpu_dtype_t)dt),
                          tpu_dtype_name((tpu_dtype_t)t->dtype));
  return TPU_OK;
}

/* ---- LU ------------------------------------------------------------------------ */

/* In-place LU of the m x n column-major `a`; piv[0..k) 0-based; returns info. */
static int64_t fx_getrf(double* a, int64_t m, int64_t n, int64_t ld, int64_t* piv, bool f32) {
  const int64_t k = m < n ? m : n;
  const double sfmin = f32 ? FLT_MIN : DBL_MIN;
  int64_t info = 0;
  for (int64_t j = 0; j < k; ++j) {
    double* col = a + j * ld;
    int64_t p = j;
    double best = fabs(col[j]);
    for (int64_t i = j + 1; i < m; ++i) {
      if (fabs(col[i]) > best) {
        best = fabs(col[i]);
        p = i;
      }
    }
    piv[j] = p;
    if (col[p] != 0.0) {
      if (p != j) {
        for (int64_t c = 0; c < n; ++c) {
          double t = a[j + c * ld];
          a[j + c * ld] = a[p + c * ld];
          a[p + c * ld] = t;
        }
      }
      double d = col[j];
      if (fabs(d) >= sfmin) {
        double r = fx_rnd(1.0 / d, f32);
        for (int64_t i = j + 1; i < m; ++i) col[i] = fx_rnd(col[i] * r, f32);
      } else {
        for (int64_t i = j + 1; i < m; ++i) col[i] = fx_rnd(col[i] / d, f32);
      }
    } else if (info == 0) {
      info = j + 1;
    }
    for (int64_t c = j + 1; c < n; ++c) {
      double* cc = a + c * ld;
      double u = cc[j];
      if (u == 0.0) continue;
      for (int64_t i = j + 1; i < m; ++i) cc[i] = fx_rnd(cc[i] - col[i] * u, f32);
    }
  }
  return info;
}

/* Solves op(A) x = b in place, A = P L U factored in `lu` (n x n), op(A) = A^T
 * when `trans`. */
static void fx_getrs(const double* lu, int64_t n, int64_t ld, const int64_t* piv, double* x, bool trans) {
  if (!trans) {
    for (int64_t i = 0; i < n; ++i) {
      double t = x[i];
      x[i] = x[piv[i]];
      x[piv[i]] = t;
    }
    for (int64_t j = 0; j < n; ++j) {
      const double* col = lu + j * ld;
      double xj = x[j];
      if (xj == 0.0) continue;
      for (int64_t i = j + 1; i < n; ++i) x[i] -= col[i] * xj;
    }
    for (int64_t j = n - 1; j >= 0; --j) {
      const double* col = lu + j * ld;
      x[j] /= col[j];
      double xj = x[j];
      if (xj == 0.0) continue;
      for (int64_t i = 0; i < j; ++i) x[i] -= col[i] * xj;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) { /* U^T y = b */
      const double* col = lu + i * ld;
      double s = x[i];
      for (int64_t j = 0; j < i; ++j) s -= col[j] * x[j];
      x[i] = s / col[i];
    }
    for (int64_t i = n - 1; i >= 0; --i) { /* L^T z = y */
      const double* col = lu + i * ld;
      double s = x[i];
      for (int64_t j = i + 1; j < n; ++j) s -= col[j] * x[j];
      x[i] = s;
    }
    for (int64_t i = n - 1; i >= 0; --i) {
      double t = x[i];
      x[i] = x[piv[i]];
      x[piv[i]] = t;
    }
  }
}

/* Loads 1-based pivots into piv[0..k) (0-based); false if one is out of range. */
static bool fx_load_pivots(const fx_job_t* j, int64_t bi, int64_t k, int64_t rows, int64_t* piv) {
  const char* pp = fx_at(&j->piv, &j->b, bi);
  for (int64_t i = 0; i < k; ++i) {
    int64_t v = tpu_ku_load_i64(pp + i * j->piv.rs, j->piv.dt);
    if (v < 1 || v > rows) return false;
    piv[i] = v - 1;
  }
  return true;
}

/* lu (m x n, ld m) and piv to the P, L, U outputs present. */
static void fx_write_plu(const fx_job_t* j, int64_t bi, const double* lu, const int64_t* piv, int64_t* perm) {
  const int64_t m = j->m, n = j->n, k = j->k;
  if (j->l.p) {
    char* L = fx_at(&j->l, &j->b, bi);
    for (int64_t c = 0; c < k; ++c)
      for (int64_t i = 0; i < m; ++i)
        tpu_ku_store_f64(L + i * j->l.rs + c * j->l.cs, j->l.dt, i > c ? lu[i + c * m] : (i == c ? 1.0 : 0.0));
  }
  if (j->u.p) {
    char* U = fx_at(&j->u, &j->b, bi);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < k; ++i)
        tpu_ku_store_f64(U + i * j->u.rs + c * j->u.cs, j->u.dt, i <= c ? lu[i + c * m] : 0.0);
  }
  if (j->p.p) {
    for (int64_t i = 0; i < m; ++i) perm[i] = i;
    for (int64_t i = 0; i < k; ++i) {
      int64_t t = perm[i];
      perm[i] = perm[piv[i]];
      perm[piv[i]] = t;
    }
    char* P = fx_at(&j->p, &j->b, bi);
    for (int64_t c = 0; c < m; ++c)
      for (int64_t i = 0; i < m; ++i)
        tpu_ku_store_f64(P + i * j->p.rs + c * j->p.cs, j->p.dt, perm[c] == i ? 1.0 : 0.0);
  }
}

/* Factor item: LU of a (or a^T) into the outputs present: LU, pivots, info,
 * det, (sign, logabsdet), P L U. */
static void fx_lu_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t m = j->m, n = j->n, k = j->k;
  int64_t* piv = (int64_t*)(ws + m * n);
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), m, n, ws, m);
  int64_t info = fx_getrf(ws, m, n, m, piv, j->f32);
  if (j->lu.p) fx_store(&j->lu, fx_at(&j->lu, &j->b, bi), m, n, ws, m);
  if (j->piv.p) {
    char* pp = fx_at(&j->piv, &j->b, bi);
    for (int64_t i = 0; i < k; ++i) tpu_ku_store_i64(pp + i * j->piv.rs, j->piv.dt, piv[i] + 1);
  }
  if (j->info.p) tpu_ku_store_i64(fx_at(&j->info, &j->b, bi), j->info.dt, info);
  if (j->det.p || j->logdet.p) {
    bool odd = false;
    for (int64_t i = 0; i < k; ++i) odd ^= piv[i] != i;
    double prod = odd ? -1.0 : 1.0, sgn = prod, logabs = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      double d = ws[i + i * m];
      prod *= d;
      sgn *= d > 0 ? 1.0 : (d < 0 ? -1.0 : (d == 0 ? 0.0 : d));
      logabs += log(fabs(d));
    }
    if (j->logdet.p) {
      tpu_ku_store_f64(fx_at(&j->det, &j->b, bi), j->det.dt, sgn);
      tpu_ku_store_f64(fx_at(&j->logdet, &j->b, bi), j->logdet.dt, logabs);
    } else {
      tpu_ku_store_f64(fx_at(&j->det, &j->b, bi), j->det.dt, prod);
    }
  }
  fx_write_plu(j, bi, ws, piv, piv + k);
}

/* lu_unpack item: LU and pivots from their tensors. */
static void fx_unpack_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t m = j->m, n = j->n, k = j->k;
  int64_t* piv = (int64_t*)(ws + m * n);
  if (j->l.p || j->u.p) fx_load(&j->lu, fx_at(&j->lu, &j->b, bi), m, n, ws, m);
  if (j->p.p && !fx_load_pivots(j, bi, k, m, piv)) {
    atomic_store(&j->bad_pivot, 1);
    return;
  }
  fx_write_plu(j, bi, ws, piv, piv + k);
}

/* lu_solve item: op(A) X' = B' column by column (x, b2 are the primed views;
 * k columns of n rows). */
static void fx_solve_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t n = j->n;
  double* lu = ws;
  double* x = ws + n * n;
  int64_t* piv = (int64_t*)(x + n);
  fx_load(&j->lu, fx_at(&j->lu, &j->b, bi), n, n, lu, n);
  if (!fx_load_pivots(j, bi, n, n, piv)) {
    atomic_store(&j->bad_pivot, 1);
    return;
  }
  const char* B = fx_at(&j->b2, &j->b, bi);
  char* X = fx_at(&j->x, &j->b, bi);
  for (int64_t c = 0; c < j->k; ++c) {
    fx_load(&j->b2, B + c * j->b2.cs, n, 1, x, n);
    fx_getrs(lu, n, n, piv, x, j->flag);
    fx_store(&j->x, X + c * j->x.cs, n, 1, x, n);
  }
}

/* inv item: LU of A, then the columns of the identity solved. */
static void fx_inv_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t n = j->n;
  double* x = ws + n * n;
  int64_t* piv = (int64_t*)(x + n);
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), n, n, ws, n);
  int64_t info = fx_getrf(ws, n, n, n, piv, j->f32);
  tpu_ku_store_i64(fx_at(&j->info, &j->b, bi), j->info.dt, info);
  if (!j->x.p) return;
  char* X = fx_at(&j->x, &j->b, bi);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < n; ++i) x[i] = i == c ? 1.0 : 0.0;
    fx_getrs(ws, n, n, piv, x, false);
    fx_store(&j->x, X + c * j->x.cs, n, 1, x, n);
  }
}

static double fx_cube(int64_t m, int64_t n) { return (double)m * (double)n * (double)(m < n ? m : n) + (double)(m * n); }

static void fx_job_init(fx_job_t* j, const tpu_k_call_t* call) {
  memset(j, 0, sizeof(*j));
  j->call = call;
  atomic_init(&j->oom, 0);
  atomic_init(&j->bad_pivot, 0);
  atomic_init(&j->nonfinite, 0);
}

/* check(): the op's setup alone (validation without touching data). */
#define FX_CHECK(op)                                      \
  static tpu_status_t op##_check(const tpu_k_call_t* call) { \
    fx_job_t j;                                           \
    return op##_setup(call, &j);                          \
  }

/* A factor job over A (transposed when `transA`) with batch of A. */
static tpu_status_t fx_setup_factor(fx_job_t* j, const tpu_k_call_t* call, const tpu_tensor_t* A, bool transA) {
  fx_batch_of(A, 2, &j->b);
  TPU_RETURN_IF_ERROR(fx_mat(call, A, 2, &j->b, transA, &j->a));
  j->m = A->sizes[A->ndim - (transA ? 1 : 2)];
  j->n = A->sizes[A->ndim - (transA ? 2 : 1)];
  j->k = j->m < j->n ? j->m : j->n;
  j->f32 = A->dtype == TPU_DTYPE_F32;
  j->item = fx_lu_item;
  j->ws_bytes = sizeof(double) * (size_t)(j->m * j->n + j->k + j->m + 1);
  return TPU_OK;
}

static tpu_status_t fx_out_mat(fx_job_t* j, const tpu_k_call_t* call, int i, int core, int dt, fx_mat_t* m) {
  const tpu_tensor_t* t = fx_out(call, i);
  if (t && dt != TPU_DTYPE_INVALID) TPU_RETURN_IF_ERROR(fx_same_dtype(call, t, dt, "an output"));
  if (t && tpu_tensor_numel(t) == 0 && j->b.count != 0 && core > 0) {
    /* an output left empty by the meta function (unpack_data=False, mode='r') */
    memset(m, 0, sizeof(*m));
    return TPU_OK;
  }
  return fx_mat(call, t, core, &j->b, false, m);
}

/* linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info) */
static tpu_status_t lu_factor_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &A));
  if (!tpu_ku_bool(call, 1, true))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "linalg.lu_factor: LU without pivoting is not implemented on tpu");
  if (call->num_outputs < 3) return TPU_KU_INVALID(call, "expected 3 outputs");
  fx_job_init(j, call);
  TPU_RETURN_IF_ERROR(fx_setup_factor(j, call, A, false));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, A->dtype, &j->lu));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 1, TPU_DTYPE_INVALID, &j->piv));
  return fx_out_mat(j, call, 2, 0, TPU_DTYPE_INVALID, &j->info);
}
FX_CHECK(lu_factor)
static tpu_status_t lu_factor_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(lu_factor_setup(call, &j));
  TPU_RETURN_IF_ERROR(fx_run(&j, fx_cube(j.m, j.n)));
  if (tpu_ku_bool(call, 2, false))
    return fx_check_info(&j, &call->outputs[2], "torch.linalg.lu_factor_ex", FX_ERR_LU_FACTOR);
  return TPU_OK;
}

/* linalg_lu(A, *, pivot) -> (P, L, U) */
static tpu_status_t lu_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &A));
  if (!tpu_ku_bool(call, 1, true))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "linalg.lu_factor: LU without pivoting is not implemented on tpu");
  if (call->num_outputs < 3) return TPU_KU_INVALID(call, "expected 3 outputs");
  fx_job_init(j, call);
  TPU_RETURN_IF_ERROR(fx_setup_factor(j, call, A, false));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, A->dtype, &j->p));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 2, A->dtype, &j->l));
  return fx_out_mat(j, call, 2, 2, A->dtype, &j->u);
}
FX_CHECK(lu)
static tpu_status_t lu_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(lu_setup(call, &j));
  return fx_run(&j, fx_cube(j.m, j.n) + (double)(j.m * j.m));
}

/* _linalg_det(A) -> (result, LU, pivots); _linalg_slogdet(A) -> (sign,
 * logabsdet, LU, pivots). Like the CPU, a contiguous A is factored as A^T
 * (same determinant), which is what LU and pivots then hold. */
static tpu_status_t det_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, true, &A));
  bool slog = strncmp(call->op, "aten::_linalg_slogdet", 21) == 0;
  if (call->num_outputs < (slog ? 4 : 3)) return TPU_KU_INVALID(call, "expected %d outputs", slog ? 4 : 3);
  fx_job_init(j, call);
  TPU_RETURN_IF_ERROR(fx_setup_factor(j, call, A, tpu_tensor_is_contiguous(A)));
  int o = 0;
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, o++, 0, A->dtype, &j->det));
  if (slog) TPU_RETURN_IF_ERROR(fx_out_mat(j, call, o++, 0, A->dtype, &j->logdet));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, o++, 2, A->dtype, &j->lu));
  return fx_out_mat(j, call, o, 1, TPU_DTYPE_INVALID, &j->piv);
}
FX_CHECK(det)
static tpu_status_t det_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(det_setup(call, &j));
  return fx_run(&j, fx_cube(j.n, j.n));
}

/* lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U) */
static tpu_status_t unpack_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* LU = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &LU));
  const tpu_tensor_t* piv = tpu_ku_tensor(call, 1);
  if (!piv || piv->ndim < 1) return TPU_KU_INVALID(call, "expected LU_pivots with at least 1 dim");
  if (call->num_outputs < 3) return TPU_KU_INVALID(call, "expected 3 outputs");
  fx_job_init(j, call);
  fx_batch_of(LU, 2, &j->b);
  j->m = LU->sizes[LU->ndim - 2];
  j->n = LU->sizes[LU->ndim - 1];
  j->k = j->m < j->n ? j->m : j->n;
  if (piv->sizes[piv->ndim - 1] != j->k)
    return TPU_KU_INVALID(call, "LU_pivots has %lld elements per matrix, expected %lld",
                          (long long)piv->sizes[piv->ndim - 1], (long long)j->k);
  TPU_RETURN_IF_ERROR(fx_mat(call, LU, 2, &j->b, false, &j->lu));
  TPU_RETURN_IF_ERROR(fx_mat(call, piv, 1, &j->b, false, &j->piv));
  if (tpu_ku_bool(call, 3, true)) TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, LU->dtype, &j->p));
  if (tpu_ku_bool(call, 2, true)) {
    TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 2, LU->dtype, &j->l));
    TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 2, 2, LU->dtype, &j->u));
  }
  j->item = fx_unpack_item;
  j->ws_bytes = sizeof(double) * (size_t)(j->m * j->n + j->k + j->m + 1);
  return TPU_OK;
}
FX_CHECK(unpack)
static tpu_status_t unpack_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(unpack_setup(call, &j));
  return fx_run(&j, (double)(j.m * (j.m + j.n)));
}

/* The solve of X (out) from LU, pivots and B, each a tensor with its batch
 * broadcast to X's: op(A) X' = B' with X' = X, or X^T when !left. */
static tpu_status_t fx_setup_solve(fx_job_t* j, const tpu_k_call_t* call, const tpu_tensor_t* LU,
                                   const tpu_tensor_t* piv, const tpu_tensor_t* B, const tpu_tensor_t* X, bool left,
                                   bool adjoint) {
  if (!fx_dtype_ok(LU->dtype)) return tpu_ku_unsupported_dtype(call, LU->dtype);
  if (!fx_dtype_ok(B->dtype)) return tpu_ku_unsupported_dtype(call, B->dtype);
  if (!fx_dtype_ok(X->dtype)) return tpu_ku_unsupported_dtype(call, X->dtype);
  if (LU->ndim < 2 || B->ndim < 2 || X->ndim < 2 || piv->ndim < 1)
    return TPU_KU_INVALID(call, "expected matrices (LU, B, result) and a pivots vector");
  int64_t n = LU->sizes[LU->ndim - 1];
  if (LU->sizes[LU->ndim - 2] != n || piv->sizes[piv->ndim - 1] != n)
    return TPU_KU_INVALID(call, "LU must be square with n pivots (got %lldx%lld, %lld pivots)",
                          (long long)LU->sizes[LU->ndim - 2], (long long)n, (long long)piv->sizes[piv->ndim - 1]);
  int64_t xr = X->sizes[X->ndim - 2], xc = X->sizes[X->ndim - 1];
  if (B->sizes[B->ndim - 2] != xr || B->sizes[B->ndim - 1] != xc || (left ? xr : xc) != n)
    return TPU_KU_INVALID(call, "B (%lldx%lld) does not match A (%lldx%lld) and the result",
                          (long long)B->sizes[B->ndim - 2], (long long)B->sizes[B->ndim - 1], (long long)n,
                          (long long)n);
  fx_batch_of(X, 2, &j->b);
  TPU_RETURN_IF_ERROR(fx_mat(call, LU, 2, &j->b, false, &j->lu));
  TPU_RETURN_IF_ERROR(fx_mat(call, piv, 1, &j->b, false, &j->piv));
  TPU_RETURN_IF_ERROR(fx_mat(call, B, 2, &j->b, !left, &j->b2));
  TPU_RETURN_IF_ERROR(fx_mat(call, X, 2, &j->b, !left, &j->x));
  j->m = j->n = n;
  j->k = left ? xc : xr;
  j->flag = adjoint != !left;
  j->item = fx_solve_item;
  j->ws_bytes = sizeof(double) * (size_t)(n * n + 2 * n + 1);
  return TPU_OK;
}

/* linalg_lu_solve(LU, pivots, B, *, left, adjoint) -> out */
static tpu_status_t lu_solve_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t *LU = tpu_ku_tensor(call, 0), *piv = tpu_ku_tensor(call, 1), *B = tpu_ku_tensor(call, 2);
  if (!LU || !piv || !B || call->num_outputs < 1 || !call->outputs)
    return TPU_KU_INVALID(call, "expected tensor arguments");
  fx_job_init(j, call);
  return fx_setup_solve(j, call, LU, piv, B, &call->outputs[0], tpu_ku_bool(call, 3, true),
                        tpu_ku_bool(call, 4, false));
}
FX_CHECK(lu_solve)
static tpu_status_t lu_solve_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(lu_solve_setup(call, &j));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  return fx_run(&j, (double)(j.n * j.n) * (double)(j.k + 1));
}

/* _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info):
 * LU of A (as the CPU returns it, whatever A's strides), B a vector (numpy's
 * rule) when it is 1-d or A's shape without its last dim. */
typedef struct {
  fx_job_t factor, solve;
  tpu_tensor_t b, x; /* B and result, as matrices */
} fx_solve_ex_t;

static tpu_status_t solve_ex_setup(const tpu_k_call_t* call, fx_solve_ex_t* s) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, true, &A));
  const tpu_tensor_t* B = tpu_ku_tensor(call, 1);
  if (!B || call->num_outputs < 4) return TPU_KU_INVALID(call, "expected tensor arguments and 4 outputs");
  if (!fx_dtype_ok(B->dtype)) return tpu_ku_unsupported_dtype(call, B->dtype);
  fx_job_init(&s->factor, call);
  TPU_RETURN_IF_ERROR(fx_setup_factor(&s->factor, call, A, false));
  TPU_RETURN_IF_ERROR(fx_out_mat(&s->factor, call, 1, 2, A->dtype, &s->factor.lu));
  TPU_RETURN_IF_ERROR(fx_out_mat(&s->factor, call, 2, 1, TPU_DTYPE_INVALID, &s->factor.piv));
  TPU_RETURN_IF_ERROR(fx_out_mat(&s->factor, call, 3, 0, TPU_DTYPE_INVALID, &s->factor.info));
  bool vec = B->ndim == 1;
  if (!vec && B->ndim == A->ndim - 1) {
    vec = true;
    for (int d = 0; d < B->ndim; ++d) vec = vec && B->sizes[d] == A->sizes[d];
  }
  s->b = *B;
  s->x = call->outputs[0];
  if (vec) {
    if (s->b.ndim >= TPU_MAX_DIMS || s->x.ndim >= TPU_MAX_DIMS) return TPU_KU_INVALID(call, "too many dims");
    s->b.sizes[s->b.ndim] = 1;
    s->b.strides[s->b.ndim++] = 1;
    s->x.sizes[s->x.ndim] = 1;
    s->x.strides[s->x.ndim++] = 1;
  }
  fx_job_init(&s->solve, call);
  return fx_setup_solve(&s->solve, call, &call->outputs[1], &call->outputs[2], &s->b, &s->x,
                        tpu_ku_bool(call, 2, true), false);
}
static tpu_status_t solve_ex_check(const tpu_k_call_t* call) {
  fx_solve_ex_t s;
  return solve_ex_setup(call, &s);
}
static tpu_status_t solve_ex_run(const tpu_k_call_t* call) {
  fx_solve_ex_t s;
  TPU_RETURN_IF_ERROR(solve_ex_setup(call, &s));
  TPU_RETURN_IF_ERROR(fx_run(&s.factor, fx_cube(s.factor.n, s.factor.n)));
  if (tpu_ku_bool(call, 3, false))
    TPU_RETURN_IF_ERROR(fx_check_info(&s.factor, &call->outputs[3], "torch.linalg.solve_ex", FX_ERR_SOLVE));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  return fx_run(&s.solve, (double)(s.solve.n * s.solve.n) * (double)(s.solve.k + 1));
}

/* linalg_inv_ex(A, *, check_errors) -> (inverse, info) */
static tpu_status_t inv_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, true, &A));
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected 2 outputs");
  fx_job_init(j, call);
  TPU_RETURN_IF_ERROR(fx_setup_factor(j, call, A, false));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, A->dtype, &j->x));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 0, TPU_DTYPE_INVALID, &j->info));
  if (!j->info.p && j->b.count > 0) return TPU_KU_INVALID(call, "expected an info output");
  j->item = fx_inv_item;
  j->ws_bytes = sizeof(double) * (size_t)(j->n * j->n + 2 * j->n + 1);
  return TPU_OK;
}
FX_CHECK(inv)
static tpu_status_t inv_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(inv_setup(call, &j));
  TPU_RETURN_IF_ERROR(fx_run(&j, 3.0 * fx_cube(j.n, j.n)));
  if (tpu_ku_bool(call, 1, false)) return fx_check_info(&j, &call->outputs[1], "linalg.inv_ex", FX_ERR_INV);
  return TPU_OK;
}

/* ---- Cholesky -------------------------------------------------------------------- */

/* In-place Cholesky A = L L^T of the lower triangle of `a` (n x n); returns
 * info (0, or the order of the first leading minor not positive-definite,
 * where it stops). */
static int64_t fx_potrf(double* a, int64_t n, int64_t ld, bool f32) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j + j * ld];
    for (int64_t p = 0; p < j; ++p) d -= a[j + p * ld] * a[j + p * ld];
    if (!(d > 0.0)) {
      a[j + j * ld] = d;
      return j + 1;
    }
    double ljj = fx_rnd(sqrt(d), f32);
    a[j + j * ld] = ljj;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i + j * ld];
      for (int64_t p = 0; p < j; ++p) s -= a[i + p * ld] * a[j + p * ld];
      a[i + j * ld] = fx_rnd(s / ljj, f32);
    }
  }
  return 0;
}

/* Solves L L^T x = b in place (L: the lower triangle of `l`). */
static void fx_potrs(const double* l, int64_t n, int64_t ld, double* x) {
  for (int64_t j = 0; j < n; ++j) {
    const double* col = l + j * ld;
    x[j] /= col[j];
    double xj = x[j];
    if (xj == 0.0) continue;
    for (int64_t i = j + 1; i < n; ++i) x[i] -= col[i] * xj;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    const double* col = l + i * ld;
    double s = x[i];
    for (int64_t j = i + 1; j < n; ++j) s -= col[j] * x[j];
    x[i] = s / col[i];
  }
}

/* cholesky_ex item: a (transposed view when upper) -> lower factor; the
 * output view is transposed the same way, so U = L^T; zeros elsewhere. */
static void fx_chol_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t n = j->n;
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), n, n, ws, n);
  int64_t info = fx_potrf(ws, n, n, j->f32);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < c; ++i) ws[i + c * n] = 0.0;
  if (j->l.p) fx_store(&j->l, fx_at(&j->l, &j->b, bi), n, n, ws, n);
  tpu_ku_store_i64(fx_at(&j->info, &j->b, bi), j->info.dt, info);
}

/* _cholesky_solve_helper item (b2: the right-hand sides, k columns) and
 * cholesky_inverse item (no b2: the identity's columns). */
static void fx_chol_solve_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t n = j->n;
  double* x = ws + n * n;
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), n, n, ws, n);
  const char* B = j->b2.p ? fx_at(&j->b2, &j->b, bi) : NULL;
  char* X = fx_at(&j->x, &j->b, bi);
  for (int64_t c = 0; c < j->k; ++c) {
    if (B) {
      fx_load(&j->b2, B + c * j->b2.cs, n, 1, x, n);
    } else {
      for (int64_t i = 0; i < n; ++i) x[i] = i == c ? 1.0 : 0.0;
    }
    fx_potrs(ws, n, n, x);
    fx_store(&j->x, X + c * j->x.cs, n, 1, x, n);
  }
}

/* linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info) */
static tpu_status_t chol_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, true, &A));
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected 2 outputs");
  bool upper = tpu_ku_bool(call, 1, false);
  fx_job_init(j, call);
  fx_batch_of(A, 2, &j->b);
  j->m = j->n = j->k = A->sizes[A->ndim - 1];
  j->f32 = A->dtype == TPU_DTYPE_F32;
  TPU_RETURN_IF_ERROR(fx_mat(call, A, 2, &j->b, upper, &j->a));
  const tpu_tensor_t* L = fx_out(call, 0);
  if (L) TPU_RETURN_IF_ERROR(fx_same_dtype(call, L, A->dtype, "L"));
  if (L && tpu_tensor_numel(L) > 0) TPU_RETURN_IF_ERROR(fx_mat(call, L, 2, &j->b, upper, &j->l));
  TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 0, TPU_DTYPE_INVALID, &j->info));
  if (!j->info.p && j->b.count > 0) return TPU_KU_INVALID(call, "expected an info output");
  j->item = fx_chol_item;
  j->ws_bytes = sizeof(double) * (size_t)(j->n * j->n + 1);
  return TPU_OK;
}
FX_CHECK(chol)
static tpu_status_t chol_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(chol_setup(call, &j));
  TPU_RETURN_IF_ERROR(fx_run(&j, fx_cube(j.n, j.n) / 3.0));
  if (tpu_ku_bool(call, 2, false))
    return fx_check_info(&j, &call->outputs[1], "linalg.cholesky_ex", FX_ERR_CHOLESKY);
  return TPU_OK;
}

/* _cholesky_solve_helper(self, A, upper) -> out: (A A^T or A^T A) X = self;
 * cholesky_inverse(self, upper) -> out: the inverse of that product. Only
 * the factor's triangle is read. */
static tpu_status_t chol_solve_setup(const tpu_k_call_t* call, fx_job_t* j) {
  bool inverse = strncmp(call->op, "aten::cholesky_inverse", 22) == 0;
  const tpu_tensor_t* F = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, inverse ? 0 : 1, true, &F));
  const tpu_tensor_t* B = inverse ? NULL : tpu_ku_tensor(call, 0);
  if (!inverse && !B) return TPU_KU_INVALID(call, "expected tensor arguments");
  if (B && !fx_dtype_ok(B->dtype)) return tpu_ku_unsupported_dtype(call, B->dtype);
  bool upper = tpu_ku_bool(call, inverse ? 1 : 2, false);
  const tpu_tensor_t* X = &call->outputs[0];
  TPU_RETURN_IF_ERROR(fx_same_dtype(call, X, F->dtype, "the result"));
  if (X->ndim < 2) return TPU_KU_INVALID(call, "expected a matrix result");
  int64_t n = F->sizes[F->ndim - 1];
  if (X->sizes[X->ndim - 2] != n || (B && (B->ndim < 2 || B->sizes[B->ndim - 2] != n ||
                                           B->sizes[B->ndim - 1] != X->sizes[X->ndim - 1])))
    return TPU_KU_INVALID(call, "the right-hand side and result must have %lld rows", (long long)n);
  fx_job_init(j, call);
  fx_batch_of(X, 2, &j->b);
  j->m = j->n = n;
  j->k = X->sizes[X->ndim - 1];
  TPU_RETURN_IF_ERROR(fx_mat(call, F, 2, &j->b, upper, &j->a));
  TPU_RETURN_IF_ERROR(fx_mat(call, B, 2, &j->b, false, &j->b2));
  TPU_RETURN_IF_ERROR(fx_mat(call, X, 2, &j->b, false, &j->x));
  j->item = fx_chol_solve_item;
  j->ws_bytes = sizeof(double) * (size_t)(n * n + n + 1);
  return TPU_OK;
}
FX_CHECK(chol_solve)
static tpu_status_t chol_solve_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(chol_solve_setup(call, &j));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  return fx_run(&j, 2.0 * (double)(j.n * j.n) * (double)(j.k + 1));
}

/* ---- Householder QR ---------------------------------------------------------------- */

/* Reflector of x[0..len): x[0] becomes beta, x[1..) v (v[0] = 1 implied);
 * returns tau. */
static double fx_larfg(double* x, int64_t len, bool f32) {
  double ss = 0.0;
  for (int64_t i = 1; i < len; ++i) ss += x[i] * x[i];
  if (ss == 0.0) return 0.0;
  double alpha = x[0];
  double beta = fx_rnd(-copysign(sqrt(alpha * alpha + ss), alpha), f32);
  double tau = fx_rnd((beta - alpha) / beta, f32);
  double scal = fx_rnd(1.0 / (alpha - beta), f32);
  for (int64_t i = 1; i < len; ++i) x[i] = fx_rnd(x[i] * scal, f32);
  x[0] = beta;
  return tau;
}

/* c (rows x cols, ld) = (I - tau v v^T) c, v[0] = 1 implied. */
static void fx_larf_left(const double* v, double tau, double* c, int64_t rows, int64_t cols, int64_t ld, bool f32) {
  if (tau == 0.0) return;
  for (int64_t q = 0; q < cols; ++q) {
    double* cc = c + q * ld;
    double w = cc[0];
    for (int64_t i = 1; i < rows; ++i) w += v[i] * cc[i];
    if (w == 0.0) continue;
    w *= tau;
    cc[0] = fx_rnd(cc[0] - w, f32);
    for (int64_t i = 1; i < rows; ++i) cc[i] = fx_rnd(cc[i] - w * v[i], f32);
  }
}

/* c (rows x len, ld) = c (I - tau v v^T). */
static void fx_larf_right(const double* v, double tau, double* c, int64_t rows, int64_t len, int64_t ld, bool f32) {
  if (tau == 0.0) return;
  for (int64_t r = 0; r < rows; ++r) {
    double w = c[r];
    for (int64_t i = 1; i < len; ++i) w += c[r + i * ld] * v[i];
    if (w == 0.0) continue;
    w *= tau;
    c[r] = fx_rnd(c[r] - w, f32);
    for (int64_t i = 1; i < len; ++i) c[r + i * ld] = fx_rnd(c[r + i * ld] - w * v[i], f32);
  }
}

static void fx_geqrf(double* a, int64_t m, int64_t n, int64_t ld, double* tau, bool f32) {
  const int64_t k = m < n ? m : n;
  for (int64_t j = 0; j < k; ++j) {
    double* x = a + j + j * ld;
    tau[j] = fx_larfg(x, m - j, f32);
    fx_larf_left(x, tau[j], x + ld, m - j, n - j - 1, ld, f32);
  }
}

/* q (m x qc) = the first qc columns of H_0 ... H_{k-1} (reflectors in a). */
static void fx_orgqr(const double* a, int64_t lda, const double* tau, int64_t k, double* q, int64_t m, int64_t qc,
                     bool f32) {
  for (int64_t c = 0; c < qc; ++c)
    for (int64_t i = 0; i < m; ++i) q[i + c * m] = i == c ? 1.0 : 0.0;
  for (int64_t j = (k < qc ? k : qc) - 1; j >= 0; --j)
    fx_larf_left(a + j + j * lda, tau[j], q + j + j * m, m - j, qc - j, m, f32);
}

/* geqrf, linalg_qr, householder_product and ormqr items. */
static void fx_qr_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t m = j->m, n = j->n, k = j->k;
  double* tau = ws + m * n;
  double* q = tau + k + 1;
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), m, n, ws, m);
  fx_geqrf(ws, m, n, m, tau, j->f32);
  if (j->lu.p) fx_store(&j->lu, fx_at(&j->lu, &j->b, bi), m, n, ws, m); /* geqrf's a */
  if (j->piv.p) fx_store(&j->piv, fx_at(&j->piv, &j->b, bi), k, 1, tau, k); /* geqrf's tau */
  if (j->u.p) { /* R: the upper triangle of the first rrows rows */
    int64_t rrows = j->flag ? m : k;
    char* R = fx_at(&j->u, &j->b, bi);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < rrows; ++i)
        tpu_ku_store_f64(R + i * j->u.rs + c * j->u.cs, j->u.dt, i <= c ? ws[i + c * m] : 0.0);
  }
  if (j->qcols > 0 && j->x.p) {
    fx_orgqr(ws, m, tau, k, q, m, j->qcols, j->f32);
    fx_store(&j->x, fx_at(&j->x, &j->b, bi), m, j->qcols, q, m);
  }
}

static void fx_hh_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t m = j->m, n = j->n, k = j->k;
  double* tau = ws + m * n;
  double* q = tau + k + 1;
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), m, n, ws, m);
  fx_load(&j->piv, fx_at(&j->piv, &j->b, bi), k, 1, tau, k);
  fx_orgqr(ws, m, tau, k, q, m, n, j->f32);
  fx_store(&j->x, fx_at(&j->x, &j->b, bi), m, n, q, m);
}

/* ormqr: a holds the reflectors (nq x k columns read), c the m x n matrix. */
static void fx_ormqr_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t m = j->m, n = j->n, k = j->k, nq = j->flag3 ? m : n;
  double* tau = ws + nq * k;
  double* c = tau + k + 1;
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), nq, k, ws, nq);
  fx_load(&j->piv, fx_at(&j->piv, &j->b, bi), k, 1, tau, k);
  fx_load(&j->b2, fx_at(&j->b2, &j->b, bi), m, n, c, m);
  bool descending = j->flag3 != j->flag2;
  for (int64_t t = 0; t < k; ++t) {
    int64_t r = descending ? k - 1 - t : t;
    const double* v = ws + r + r * nq;
    if (j->flag3) {
      fx_larf_left(v, tau[r], c + r, m - r, n, m, j->f32);
    } else {
      fx_larf_right(v, tau[r], c + r * m, m, n - r, m, j->f32);
    }
  }
  fx_store(&j->x, fx_at(&j->x, &j->b, bi), m, n, c, m);
}

/* geqrf(self) -> (a, tau); linalg_qr(A, mode) -> (Q, R) */
static tpu_status_t qr_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &A));
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected 2 outputs");
  bool geqrf = strncmp(call->op, "aten::geqrf", 11) == 0;
  fx_job_init(j, call);
  fx_batch_of(A, 2, &j->b);
  j->m = A->sizes[A->ndim - 2];
  j->n = A->sizes[A->ndim - 1];
  j->k = j->m < j->n ? j->m : j->n;
  j->f32 = A->dtype == TPU_DTYPE_F32;
  TPU_RETURN_IF_ERROR(fx_mat(call, A, 2, &j->b, false, &j->a));
  if (geqrf) {
    TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, A->dtype, &j->lu));
    TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 1, A->dtype, &j->piv));
  } else {
    const char* mode = tpu_ku_string(call, 1, "reduced");
    bool complete = strcmp(mode, "complete") == 0;
    if (!complete && strcmp(mode, "reduced") != 0 && strcmp(mode, "r") != 0)
      return TPU_KU_INVALID(call, "qr received unrecognized mode '%s' but expected one of 'reduced' "
                                  "(default), 'r', or 'complete'", mode);
    j->flag = complete;
    j->qcols = strcmp(mode, "r") == 0 ? 0 : (complete ? j->m : j->k);
    if (j->qcols > 0) TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 0, 2, A->dtype, &j->x));
    TPU_RETURN_IF_ERROR(fx_out_mat(j, call, 1, 2, A->dtype, &j->u));
  }
  j->item = fx_qr_item;
  j->ws_bytes = sizeof(double) * (size_t)(j->m * j->n + j->k + 1 + j->m * j->qcols + 1);
  return TPU_OK;
}
FX_CHECK(qr)
static tpu_status_t qr_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(qr_setup(call, &j));
  return fx_run(&j, 2.0 * fx_cube(j.m, j.n) + (double)(j.m * j.qcols * j.k));
}

/* linalg_householder_product(input, tau) -> out; ormqr(self, input2 (tau),
 * input3 (C), left, transpose) -> out */
static tpu_status_t hh_setup(const tpu_k_call_t* call, fx_job_t* j) {
  bool orm = strncmp(call->op, "aten::ormqr", 11) == 0;
  const tpu_tensor_t* V = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &V));
  const tpu_tensor_t* tau = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* C = orm ? tpu_ku_tensor(call, 2) : NULL;
  if (!tau || (orm && !C)) return TPU_KU_INVALID(call, "expected tensor arguments");
  TPU_RETURN_IF_ERROR(fx_same_dtype(call, tau, V->dtype, "tau"));
  if (C) TPU_RETURN_IF_ERROR(fx_same_dtype(call, C, V->dtype, "other"));
  const tpu_tensor_t* X = &call->outputs[0];
  TPU_RETURN_IF_ERROR(fx_same_dtype(call, X, V->dtype, "the result"));
  if (tau->ndim < 1 || X->ndim < 2 || (C && C->ndim < 2))
    return TPU_KU_INVALID(call, "expected a tau vector and matrices");
  fx_job_init(j, call);
  fx_batch_of(X, 2, &j->b);
  int64_t vr = V->sizes[V->ndim - 2], vc = V->sizes[V->ndim - 1], k = tau->sizes[tau->ndim - 1];
  j->m = X->sizes[X->ndim - 2];
  j->n = X->sizes[X->ndim - 1];
  j->k = k;
  j->f32 = V->dtype == TPU_DTYPE_F32;
  if (orm) {
    j->flag3 = tpu_ku_bool(call, 3, true);
    j->flag2 = tpu_ku_bool(call, 4, false);
    int64_t nq = j->flag3 ? j->m : j->n;
    if (C->sizes[C->ndim - 2] != j->m || C->sizes[C->ndim - 1] != j->n || vr != nq || k > vc || k > nq)
      return TPU_KU_INVALID(call, "input (%lldx%lld), tau (%lld) and other (%lldx%lld) do not match",
                            (long long)vr, (long long)vc, (long long)k, (long long)C->sizes[C->ndim - 2],
                            (long long)C->sizes[C->ndim - 1]);
    TPU_RETURN_IF_ERROR(fx_mat(call, C, 2, &j->b, false, &j->b2));
    j->item = fx_ormqr_item;
    j->ws_bytes = sizeof(double) * (size_t)(nq * k + k + 1 + j->m * j->n + 1);
  } else {
    if (vr != j->m || vc != j->n || j->n > j->m || k > j->n)
      return TPU_KU_INVALID(call, "input (%lldx%lld) must have at least as many rows as columns, and tau "
                                  "(%lld) at most as many elements as columns",
                            (long long)vr, (long long)vc, (long long)k);
    j->item = fx_hh_item;
    j->ws_bytes = sizeof(double) * (size_t)(2 * j->m * j->n + k + 2);
  }
  TPU_RETURN_IF_ERROR(fx_mat(call, V, 2, &j->b, false, &j->a));
  TPU_RETURN_IF_ERROR(fx_mat(call, tau, 1, &j->b, false, &j->piv));
  return fx_mat(call, X, 2, &j->b, false, &j->x);
}
FX_CHECK(hh)
static tpu_status_t hh_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(hh_setup(call, &j));
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  return fx_run(&j, 4.0 * (double)(j.m * j.n) * (double)(j.k + 1));
}

/* ---- Jacobi SVD and symmetric eigensolver --------------------------------------------- */

/* Orthonormal completion: column c of u (p rows, ld p) becomes the standard
 * basis vector with the largest residual against columns 0..c-1, that
 * residual normalised (two Gram-Schmidt passes). */
static void fx_complete_col(double* u, int64_t p, int64_t c, double* tmp) {
  double best = -1.0;
  double* col = u + c * p;
  for (int64_t e = 0; e < p; ++e) {
    for (int64_t i = 0; i < p; ++i) tmp[i] = i == e ? 1.0 : 0.0;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t q = 0; q < c; ++q) {
        const double* uq = u + q * p;
        double d = 0.0;
        for (int64_t i = 0; i < p; ++i) d += uq[i] * tmp[i];
        for (int64_t i = 0; i < p; ++i) tmp[i] -= d * uq[i];
      }
    double nn = 0.0;
    for (int64_t i = 0; i < p; ++i) nn += tmp[i] * tmp[i];
    if (nn > best + 1e-12) {
      best = nn;
      memcpy(col, tmp, sizeof(double) * (size_t)p);
    }
    if (best > 0.5) break; /* as good as any: at least half of e's length is new */
  }
  double r = best > 0.0 ? 1.0 / sqrt(best) : 0.0;
  for (int64_t i = 0; i < p; ++i) col[i] *= r;
}

/* Makes columns 0..cols-1 of u orthonormal in order: each is orthogonalised
 * against the previous ones (twice); one that loses more than half its length
 * (a null direction, or rounding noise) is replaced by a completion. */
static void fx_orthonormalise(double* u, int64_t p, int64_t cols, double* tmp) {
  for (int64_t c = 0; c < cols; ++c) {
    double* uc = u + c * p;
    double n0 = 0.0;
    for (int64_t i = 0; i < p; ++i) n0 += uc[i] * uc[i];
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t q = 0; q < c; ++q) {
        const double* uq = u + q * p;
        double d = 0.0;
        for (int64_t i = 0; i < p; ++i) d += uq[i] * uc[i];
        for (int64_t i = 0; i < p; ++i) uc[i] -= d * uq[i];
      }
    double nn = 0.0;
    for (int64_t i = 0; i < p; ++i) nn += uc[i] * uc[i];
    if (!(n0 > 0.0) || !(nn > 0.25 * n0) || !(nn > 0.0)) {
      fx_complete_col(u, p, c, tmp);
    } else {
      double r = 1.0 / sqrt(nn);
      for (int64_t i = 0; i < p; ++i) uc[i] *= r;
    }
  }
}

/* One-sided (Hestenes) Jacobi on the p x q column-major w (p >= q): plane
 * rotations of column pairs until every pair is orthogonal to working
 * precision; v (q x q, NULL: not wanted) accumulates the rotations. Then
 * w's columns are U S and w = U S V^T. */
static void fx_jacobi_svd(double* w, int64_t p, int64_t q, double* v) {
  if (v)
    for (int64_t c = 0; c < q; ++c)
      for (int64_t i = 0; i < q; ++i) v[i + c * q] = i == c ? 1.0 : 0.0;
  const double tol = DBL_EPSILON * (double)(p > 1 ? p : 1);
  for (int sweep = 0; sweep < 80; ++sweep) {
    bool rotated = false;
    for (int64_t a = 0; a + 1 < q; ++a)
      for (int64_t b = a + 1; b < q; ++b) {
        double* wa = w + a * p;
        double* wb = w + b * p;
        double al = 0.0, be = 0.0, ga = 0.0;
        for (int64_t i = 0; i < p; ++i) {
          al += wa[i] * wa[i];
          be += wb[i] * wb[i];
          ga += wa[i] * wb[i];
        }
        if (!(fabs(ga) > tol * sqrt(al * be)) || ga == 0.0) continue;
        rotated = true;
        double zeta = (be - al) / (2.0 * ga);
        double t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
        double c = 1.0 / sqrt(1.0 + t * t), s = c * t;
        for (int64_t i = 0; i < p; ++i) {
          double x = wa[i], y = wb[i];
          wa[i] = c * x - s * y;
          wb[i] = s * x + c * y;
        }
        if (v) {
          double* va = v + a * q;
          double* vb = v + b * q;
          for (int64_t i = 0; i < q; ++i) {
            double x = va[i], y = vb[i];
            va[i] = c * x - s * y;
            vb[i] = s * x + c * y;
          }
        }
      }
    if (!rotated) break;
  }
}

/* Cyclic two-sided Jacobi on the symmetric n x n column-major a (both
 * triangles set): rotations until the off-diagonal norm is below working
 * precision relative to ||A||_F; v (NULL: not wanted) accumulates them. The
 * eigenvalues are left on the diagonal. */
static void fx_jacobi_eigh(double* a, int64_t n, double* v) {
  if (v)
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < n; ++i) v[i + c * n] = i == c ? 1.0 : 0.0;
  double fro = 0.0;
  for (int64_t i = 0; i < n * n; ++i) fro += a[i] * a[i];
  if (!(fro > 0.0) || !isfinite(fro)) return;
  const double stop = DBL_EPSILON * DBL_EPSILON * 0.25 * fro;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int64_t c = 0; c < n; ++c)
      for (int64_t r = c + 1; r < n; ++r) off += a[r + c * n] * a[r + c * n];
    if (!(off > stop)) break;
    for (int64_t p = 0; p + 1 < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = a[p + q * n];
        if (apq == 0.0) continue;
        double app = a[p + p * n], aqq = a[q + q * n];
        double theta = (aqq - app) / (2.0 * apq);
        double t = fabs(theta) > 1e150 ? 0.5 / theta
                                        : copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) { /* columns p, q: A J */
          double x = a[k + p * n], y = a[k + q * n];
          a[k + p * n] = c * x - s * y;
          a[k + q * n] = s * x + c * y;
        }
        for (int64_t k = 0; k < n; ++k) { /* rows p, q: J^T A */
          double x = a[p + k * n], y = a[q + k * n];
          a[p + k * n] = c * x - s * y;
          a[q + k * n] = s * x + c * y;
        }
        a[p + q * n] = a[q + p * n] = 0.0;
        if (v) {
          double* vp = v + p * n;
          double* vq = v + q * n;
          for (int64_t k = 0; k < n; ++k) {
            double x = vp[k], y = vq[k];
            vp[k] = c * x - s * y;
            vq[k] = s * x + c * y;
          }
        }
      }
  }
}

/* perm[0..n) sorts key[] (stable insertion sort; descending or ascending). */
static void fx_sort_perm(const double* key, int64_t n, bool descending, int64_t* perm) {
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = 1; i < n; ++i) {
    int64_t x = perm[i], k = i;
    while (k > 0 && (descending ? key[perm[k - 1]] < key[x] : key[perm[k - 1]] > key[x])) {
      perm[k] = perm[k - 1];
      --k;
    }
    perm[k] = x;
  }
}

/* _linalg_svd item. w = A (m >= n) or A^T (flag: m < n), p x q, p >= q:
 * w = Uw S Vw^T; Uw goes to j->u (U, or Vh seen transposed), Vw to j->l (Vh
 * seen transposed, or U); qcols columns of Uw (q, or p for full_matrices). */
static void fx_svd_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t p = j->m, q = j->n, uc = j->qcols;
  const bool uv = j->flag2;
  double* w = ws;
  double* v = w + p * q;
  double* u = v + q * q;
  double* s = u + p * (uc > q ? uc : q);
  double* tmp = s + q;
  int64_t* perm = (int64_t*)(tmp + (p > q ? p : q));
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), p, q, w, p);
  bool finite = true;
  for (int64_t i = 0; i < p * q; ++i) finite &= isfinite(w[i]) != 0;
  if (!finite) {
    atomic_store(&j->nonfinite, 1);
    return;
  }
  fx_jacobi_svd(w, p, q, uv ? v : NULL);
  for (int64_t c = 0; c < q; ++c) {
    double nn = 0.0;
    for (int64_t i = 0; i < p; ++i) nn += w[i + c * p] * w[i + c * p];
    tmp[c] = sqrt(nn);
  }
  fx_sort_perm(tmp, q, true, perm);
  for (int64_t c = 0; c < q; ++c) s[c] = tmp[perm[c]];
  if (j->x.p) fx_store(&j->x, fx_at(&j->x, &j->b, bi), q, 1, s, q);
  if (!uv) return;
  for (int64_t c = 0; c < q; ++c) { /* Uw = the sorted columns of w / sigma */
    const double* wc = w + perm[c] * p;
    double r = s[c] > 0.0 ? 1.0 / s[c] : 0.0;
    for (int64_t i = 0; i < p; ++i) u[i + c * p] = wc[i] * r;
  }
  fx_orthonormalise(u, p, q, tmp);
  for (int64_t c = q; c < uc; ++c) fx_complete_col(u, p, c, tmp);
  if (j->u.p) fx_store(&j->u, fx_at(&j->u, &j->b, bi), p, uc, u, p);
  if (j->l.p) {
    for (int64_t c = 0; c < q; ++c) memcpy(w + c * q, v + perm[c] * q, sizeof(double) * (size_t)q);
    fx_store(&j->l, fx_at(&j->l, &j->b, bi), q, q, w, q);
  }
}

/* _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh) */
static tpu_status_t svd_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, false, &A));
  if (call->num_outputs < 3) return TPU_KU_INVALID(call, "expected 3 outputs");
  bool full = tpu_ku_bool(call, 1, false), uv = tpu_ku_bool(call, 2, true);
  fx_job_init(j, call);
  fx_batch_of(A, 2, &j->b);
  int64_t m = A->sizes[A->ndim - 2], n = A->sizes[A->ndim - 1];
  bool trans = m < n;
  j->flag = trans;
  j->flag2 = uv;
  j->m = trans ? n : m; /* p */
  j->n = trans ? m : n; /* q */
  j->k = j->n;
  j->qcols = uv ? (full ? j->m : j->n) : 0;
  j->f32 = A->dtype == TPU_DTYPE_F32;
  TPU_RETURN_IF_ERROR(fx_mat(call, A, 2, &j->b, trans, &j->a));
  const tpu_tensor_t* S = fx_out(call, 1);
  if (S) TPU_RETURN_IF_ERROR(fx_same_dtype(call, S, A->dtype, "S"));
  TPU_RETURN_IF_ERROR(fx_mat(call, S, 1, &j->b, false, &j->x));
  if (uv) {
    const tpu_tensor_t* U = fx_out(call, 0);
    const tpu_tensor_t* Vh = fx_out(call, 2);
    if (!U || !Vh || U->ndim != A->ndim || Vh->ndim != A->ndim)
      return TPU_KU_INVALID(call, "expected U and Vh outputs with %d dims", (int)A->ndim);
    TPU_RETURN_IF_ERROR(fx_same_dtype(call, U, A->dtype, "U"));
    TPU_RETURN_IF_ERROR(fx_same_dtype(call, Vh, A->dtype, "Vh"));
    TPU_RETURN_IF_ERROR(fx_mat(call, trans ? Vh : U, 2, &j->b, trans, &j->u));
    TPU_RETURN_IF_ERROR(fx_mat(call, trans ? U : Vh, 2, &j->b, !trans, &j->l));
  }
  j->item = fx_svd_item;
  int64_t p = j->m, q = j->n;
  j->ws_bytes = sizeof(double) * (size_t)(p * q + q * q + p * (j->qcols > q ? j->qcols : q) + q + (p > q ? p : q) +
                                          q + 1);
  return TPU_OK;
}
FX_CHECK(svd)
static tpu_status_t svd_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(svd_setup(call, &j));
  return fx_run(&j, 20.0 * fx_cube(j.m, j.n));
}

/* _linalg_eigh item: the triangle UPLO (flag: 'U') of A, symmetrised;
 * eigenvalues ascending to x, eigenvectors (flag2) to l. */
static void fx_eigh_item(fx_job_t* j, int64_t bi, double* ws) {
  const int64_t n = j->n;
  double* a = ws;
  double* v = a + n * n;
  double* w = v + n * n;
  int64_t* perm = (int64_t*)(w + n);
  fx_load(&j->a, fx_at(&j->a, &j->b, bi), n, n, a, n);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = c + 1; r < n; ++r) {
      if (j->flag)
        a[r + c * n] = a[c + r * n];
      else
        a[c + r * n] = a[r + c * n];
    }
  fx_jacobi_eigh(a, n, j->flag2 ? v : NULL);
  for (int64_t i = 0; i < n; ++i) w[i] = a[i + i * n];
  fx_sort_perm(w, n, false, perm);
  for (int64_t i = 0; i < n; ++i) a[i] = w[perm[i]];
  if (j->x.p) fx_store(&j->x, fx_at(&j->x, &j->b, bi), n, 1, a, n);
  if (j->l.p) {
    for (int64_t c = 0; c < n; ++c) memcpy(a + c * n, v + perm[c] * n, sizeof(double) * (size_t)n);
    fx_store(&j->l, fx_at(&j->l, &j->b, bi), n, n, a, n);
  }
}

/* _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors) */
static tpu_status_t eigh_setup(const tpu_k_call_t* call, fx_job_t* j) {
  const tpu_tensor_t* A = NULL;
  TPU_RETURN_IF_ERROR(fx_input(call, 0, true, &A));
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected 2 outputs");
  const char* uplo = tpu_ku_string(call, 1, "L");
  if (strcmp(uplo, "L") != 0 && strcmp(uplo, "U") != 0 && strcmp(uplo, "l") != 0 && strcmp(uplo, "u") != 0)
    return TPU_KU_INVALID(call, "Expected UPLO argument to be 'L' or 'U', but got %s", uplo);
  bool cv = tpu_ku_bool(call, 2, true);
  fx_job_init(j, call);
  fx_batch_of(A, 2, &j->b);
  j->m = j->n = j->k = A->sizes[A->ndim - 1];
  j->flag = uplo[0] == 'U' || uplo[0] == 'u';
  j->flag2 = cv;
  j->f32 = A->dtype == TPU_DTYPE_F32;
  TPU_RETURN_IF_ERROR(fx_mat(call, A, 2, &j->b, false, &j->a));
  const tpu_tensor_t* W = fx_out(call, 0);
  if (W) TPU_RETURN_IF_ERROR(fx_same_dtype(call, W, A->dtype, "eigenvalues"));
  TPU_RETURN_IF_ERROR(fx_mat(call, W, 1, &j->b, false, &j->x));
  if (cv) {
    const tpu_tensor_t* V = fx_out(call, 1);
    if (!V || V->ndim != A->ndim) return TPU_KU_INVALID(call, "expected an eigenvectors output");
    TPU_RETURN_IF_ERROR(fx_same_dtype(call, V, A->dtype, "eigenvectors"));
    TPU_RETURN_IF_ERROR(fx_mat(call, V, 2, &j->b, false, &j->l));
  }
  j->item = fx_eigh_item;
  j->ws_bytes = sizeof(double) * (size_t)(2 * j->n * j->n + 2 * j->n + 1);
  return TPU_OK;
}
FX_CHECK(eigh)
static tpu_status_t eigh_run(const tpu_k_call_t* call) {
  fx_job_t j;
  TPU_RETURN_IF_ERROR(eigh_setup(call, &j));
  return fx_run(&j, 30.0 * fx_cube(j.n, j.n));
}

const tpu_k_entry_t tpu_k_factor_entries[] = {
    {"aten::linalg_lu_factor_ex", lu_factor_run, lu_factor_check, 0, NULL},
    {"aten::linalg_lu_factor_ex.out", lu_factor_run, lu_factor_check, 0, NULL},
    {"aten::linalg_lu", lu_run, lu_check, 0, NULL},
    {"aten::linalg_lu.out", lu_run, lu_check, 0, NULL},
    {"aten::_linalg_det", det_run, det_check, 0, NULL},
    {"aten::_linalg_det.result", det_run, det_check, 0, NULL},
    {"aten::_linalg_slogdet", det_run, det_check, 0, NULL},
    {"aten::_linalg_slogdet.sign", det_run, det_check, 0, NULL},
    {"aten::lu_unpack", unpack_run, unpack_check, 0, NULL},
    {"aten::lu_unpack.out", unpack_run, unpack_check, 0, NULL},
    {"aten::linalg_lu_solve", lu_solve_run, lu_solve_check, 0, NULL},
    {"aten::linalg_lu_solve.out", lu_solve_run, lu_solve_check, 0, NULL},
    {"aten::_linalg_solve_ex", solve_ex_run, solve_ex_check, 0, NULL},
    {"aten::_linalg_solve_ex.result", solve_ex_run, solve_ex_check, 0, NULL},
    {"aten::linalg_inv_ex", inv_run, inv_check, 0, NULL},
    {"aten::linalg_inv_ex.inverse", inv_run, inv_check, 0, NULL},
    {"aten::linalg_cholesky_ex", chol_run, chol_check, 0, NULL},
    {"aten::linalg_cholesky_ex.L", chol_run, chol_check, 0, NULL},
    {"aten::_cholesky_solve_helper", chol_solve_run, chol_solve_check, 0, NULL},
    {"aten::_cholesky_solve_helper.out", chol_solve_run, chol_solve_check, 0, NULL},
    {"aten::cholesky_inverse", chol_solve_run, chol_solve_check, 0, NULL},
    {"aten::cholesky_inverse.out", chol_solve_run, chol_solve_check, 0, NULL},
    {"aten::geqrf", qr_run, qr_check, 0, NULL},
    {"aten::geqrf.a", qr_run, qr_check, 0, NULL},
    {"aten::linalg_qr", qr_run, qr_check, 0, NULL},
    {"aten::linalg_qr.out", qr_run, qr_check, 0, NULL},
    {"aten::linalg_householder_product", hh_run, hh_check, 0, NULL},
    {"aten::linalg_householder_product.out", hh_run, hh_check, 0, NULL},
    {"aten::ormqr", hh_run, hh_check, 0, NULL},
    {"aten::ormqr.out", hh_run, hh_check, 0, NULL},
    {"aten::_linalg_svd", svd_run, svd_check, 0, NULL},
    {"aten::_linalg_svd.U", svd_run, svd_check, 0, NULL},
    {"aten::_linalg_eigh", eigh_run, eigh_check, 0, NULL},
    {"aten::_linalg_eigh.eigenvalues", eigh_run, eigh_check, 0, NULL},
};
const size_t tpu_k_factor_count = sizeof(tpu_k_factor_entries) / sizeof(tpu_k_factor_entries[0]);
