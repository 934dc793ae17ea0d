/* solve.c - triangular solves: aten::linalg_solve_triangular(.out) and
 * aten::triangular_solve(.X).
 *
 * Every variant is reduced to one core problem: M X = B with M an n x n
 * triangular matrix (a strided view of A, possibly transposed), X n x k
 * (a strided view of the output, possibly transposed). The output is
 * written directly: each (batch, column) work item copies its column of B
 * into the output, then solves in place by forward or back substitution.
 * Accumulation is in double; bf16/f16 values are stored back after each
 * row. A zero diagonal gives inf/nan like PyTorch (no error).
 *
 *   linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False)
 *     left:  A X = B;  right: X A = B  <=>  A^T X^T = B^T.
 *   triangular_solve(B, A, upper=True, transpose=False, unitriangular=False)
 *     -> (solution, cloned_coefficient); transpose solves A^T X = B.
 */
#include "kernels/kutil.h"

static bool sv_dtype_ok(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 ||
         dt == TPU_DTYPE_BF16;
}

static inline double sv_ld(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_F64: return *(const double*)p;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    default: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
  }
}
static inline void sv_st(char* p, int dt, double v) {
  switch (dt) {
    case TPU_DTYPE_F32: *(float*)p = (float)v; break;
    case TPU_DTYPE_F64: *(double*)p = v; break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16((float)v); break;
    default: *(uint16_t*)p = tpu_ku_f32_to_f16((float)v); break;
  }
}

typedef struct {
  int64_t n, k;           /* M is n x n; X, B are n x k */
  int nb;                 /* batch dims (of the output) */
  int64_t bsizes[TPU_MAX_DIMS];
  int64_t bst_x[TPU_MAX_DIMS], bst_a[TPU_MAX_DIMS], bst_b[TPU_MAX_DIMS]; /* bytes */
  int64_t m_r, m_c;       /* M strides (bytes): row, column */
  int64_t x_r, x_c;       /* X strides (bytes) */
  int64_t b_r, b_c;       /* B strides (bytes) */
  const char* a;
  const char* b;
  char* x;
  int adt, bdt, xdt;
  bool upper, unit;
} sv_prob_t;

static void sv_work(void* ctx, int64_t begin, int64_t end) {
  const sv_prob_t* p = (const sv_prob_t*)ctx;
  const int64_t n = p->n, k = p->k;
  for (int64_t w = begin; w < end; ++w) {
    int64_t bi = w / k, col = w % k;
    const char* a = p->a;
    const char* b = p->b + col * p->b_c;
    char* x = p->x + col * p->x_c;
    for (int d = p->nb - 1; d >= 0; --d) {
      int64_t i = bi % p->bsizes[d];
      bi /= p->bsizes[d];
      a += i * p->bst_a[d];
      b += i * p->bst_b[d];
      x += i * p->bst_x[d];
    }
    /* copy B's column into X's column */
    for (int64_t i = 0; i < n; ++i) sv_st(x + i * p->x_r, p->xdt, sv_ld(b + i * p->b_r, p->bdt));
    if (p->upper) {
      for (int64_t i = n - 1; i >= 0; --i) {
        const char* row = a + i * p->m_r;
        double s = sv_ld(x + i * p->x_r, p->xdt);
        for (int64_t j = i + 1; j < n; ++j)
          s -= sv_ld(row + j * p->m_c, p->adt) * sv_ld(x + j * p->x_r, p->xdt);
        if (!p->unit) s /= sv_ld(row + i * p->m_c, p->adt);
        sv_st(x + i * p->x_r, p->xdt, s);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const char* row = a + i * p->m_r;
        double s = sv_ld(x + i * p->x_r, p->xdt);
        for (int64_t j = 0; j < i; ++j)
          s -= sv_ld(row + j * p->m_c, p->adt) * sv_ld(x + j * p->x_r, p->xdt);
        if (!p->unit) s /= sv_ld(row + i * p->m_c, p->adt);
        sv_st(x + i * p->x_r, p->xdt, s);
      }
    }
  }
}

static bool sv_is_lst(const char* op) { return strncmp(op, "aten::linalg_solve_triangular", 29) == 0; }

/* Builds the core problem; used by both check (validation) and run. */
static tpu_status_t sv_setup(const tpu_k_call_t* call, sv_prob_t* p) {
  memset(p, 0, sizeof(*p));
  bool lst = sv_is_lst(call->op);
  const tpu_tensor_t* A = tpu_ku_tensor(call, lst ? 0 : 1);
  const tpu_tensor_t* B = tpu_ku_tensor(call, lst ? 1 : 0);
  if (!A || !B || call->num_outputs < (lst ? 1 : 2) || !call->outputs)
    return TPU_KU_INVALID(call, "expected tensor arguments");
  const tpu_tensor_t* X = &call->outputs[0];
  if (!sv_dtype_ok(A->dtype)) return tpu_ku_unsupported_dtype(call, A->dtype);
  if (!sv_dtype_ok(B->dtype)) return tpu_ku_unsupported_dtype(call, B->dtype);
  if (!sv_dtype_ok(X->dtype)) return tpu_ku_unsupported_dtype(call, X->dtype);
  if (A->ndim < 2 || B->ndim < 2 || X->ndim < 2)
    return TPU_KU_INVALID(call, "expected tensors with at least 2 dims (got %d, %d, %d)",
                          (int)A->ndim, (int)B->ndim, (int)X->ndim);
  bool upper, left = true, unit, transA = false;
  if (lst) {
    upper = tpu_ku_bool(call, 2, false);
    left = tpu_ku_bool(call, 3, true);
    unit = tpu_ku_bool(call, 4, false);
  } else {
    upper = tpu_ku_bool(call, 2, true);
    transA = tpu_ku_bool(call, 3, false);
    unit = tpu_ku_bool(call, 4, false);
  }
  int an = A->ndim, bn = B->ndim, xn = X->ndim;
  int64_t n = A->sizes[an - 1];
  if (A->sizes[an - 2] != n)
    return TPU_KU_INVALID(call, "A must be square (got %lldx%lld)", (long long)A->sizes[an - 2],
                          (long long)n);
  if (B->sizes[bn - 2] != X->sizes[xn - 2] || B->sizes[bn - 1] != X->sizes[xn - 1])
    return TPU_KU_INVALID(call, "B and output matrix sizes differ");
  int64_t as = (int64_t)tpu_dtype_size(A->dtype), bs = (int64_t)tpu_dtype_size(B->dtype),
          xs = (int64_t)tpu_dtype_size(X->dtype);
  p->m_r = A->strides[an - 2] * as;
  p->m_c = A->strides[an - 1] * as;
  p->upper = upper;
  p->unit = unit;
  if (transA || !left) { /* M = A^T: swap strides, flip triangle */
    int64_t t = p->m_r; p->m_r = p->m_c; p->m_c = t;
    p->upper = !upper;
  }
  if (left) {
    if (X->sizes[xn - 2] != n)
      return TPU_KU_INVALID(call, "B has %lld rows, A is %lldx%lld",
                            (long long)X->sizes[xn - 2], (long long)n, (long long)n);
    p->k = X->sizes[xn - 1];
    p->x_r = X->strides[xn - 2] * xs; p->x_c = X->strides[xn - 1] * xs;
    p->b_r = B->strides[bn - 2] * bs; p->b_c = B->strides[bn - 1] * bs;
  } else { /* X^T is n x k */
    if (X->sizes[xn - 1] != n)
      return TPU_KU_INVALID(call, "B has %lld columns, A is %lldx%lld",
                            (long long)X->sizes[xn - 1], (long long)n, (long long)n);
    p->k = X->sizes[xn - 2];
    p->x_r = X->strides[xn - 1] * xs; p->x_c = X->strides[xn - 2] * xs;
    p->b_r = B->strides[bn - 1] * bs; p->b_c = B->strides[bn - 2] * bs;
  }
  p->n = n;
  p->nb = xn - 2;
  for (int d = 0; d < p->nb; ++d) {
    p->bsizes[d] = X->sizes[d];
    p->bst_x[d] = X->strides[d] * xs;
  }
  TPU_RETURN_IF_ERROR(tpu_ku_batch_strides(call, A, 2, p->bsizes, p->nb, p->bst_a));
  TPU_RETURN_IF_ERROR(tpu_ku_batch_strides(call, B, 2, p->bsizes, p->nb, p->bst_b));
  if (!lst) {
    const tpu_tensor_t* Mo = &call->outputs[1];
    if (!sv_dtype_ok(Mo->dtype)) return tpu_ku_unsupported_dtype(call, Mo->dtype);
    if (tpu_tensor_numel(Mo) != 0) {
      if (Mo->ndim < 2 || Mo->sizes[Mo->ndim - 1] != n || Mo->sizes[Mo->ndim - 2] != n)
        return TPU_KU_INVALID(call, "cloned_coefficient must be %lldx%lld", (long long)n,
                              (long long)n);
    }
  }
  p->a = (const char*)A->data;
  p->b = (const char*)B->data;
  p->x = (char*)X->data;
  p->adt = A->dtype;
  p->bdt = B->dtype;
  p->xdt = X->dtype;
  return TPU_OK;
}

static tpu_status_t sv_check(const tpu_k_call_t* call) {
  sv_prob_t p;
  return sv_setup(call, &p);
}

/* cloned_coefficient of triangular_solve: A broadcast into outputs[1]. */
typedef struct {
  int dt_out, dt_in;
} sv_copy_ctx_t;
static void sv_copy_inner(void* ctx, char** ptrs, const int64_t* strides, int64_t count) {
  const sv_copy_ctx_t* c = (const sv_copy_ctx_t*)ctx;
  for (int64_t i = 0; i < count; ++i)
    sv_st(ptrs[0] + i * strides[0], c->dt_out, sv_ld(ptrs[1] + i * strides[1], c->dt_in));
}

static tpu_status_t sv_run(const tpu_k_call_t* call) {
  sv_prob_t p;
  TPU_RETURN_IF_ERROR(sv_setup(call, &p));
  if (!sv_is_lst(call->op)) {
    const tpu_tensor_t* Mo = &call->outputs[1];
    if (tpu_tensor_numel(Mo) > 0) {
      const tpu_tensor_t* ops[2] = {Mo, tpu_ku_tensor(call, 1)};
      tpu_ku_iter_t it;
      TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, call->op));
      sv_copy_ctx_t cc = {Mo->dtype, ops[1]->dtype};
      tpu_ku_iter_parallel(&it, call->pool, 32768, sv_copy_inner, &cc);
    }
  }
  if (tpu_tensor_numel(&call->outputs[0]) == 0) return TPU_OK;
  int64_t batch = 1;
  for (int d = 0; d < p.nb; ++d) batch *= p.bsizes[d];
  int64_t items = batch * p.k;
  int64_t cost = p.n * p.n + p.n + 1;
  int64_t grain = 65536 / cost;
  if (grain < 1) grain = 1;
  tpu_parallel_for(call->pool, items, grain, sv_work, &p);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_solve_entries[] = {
    {"aten::linalg_solve_triangular", sv_run, sv_check, 0, NULL},
    {"aten::linalg_solve_triangular.out", sv_run, sv_check, 0, NULL},
    {"aten::triangular_solve", sv_run, sv_check, 0, NULL},
    {"aten::triangular_solve.X", sv_run, sv_check, 0, NULL},
};
const size_t tpu_k_solve_count = sizeof(tpu_k_solve_entries) / sizeof(tpu_k_solve_entries[0]);
