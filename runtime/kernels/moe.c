/* moe.c - kernel family "moe" (see tpu/kernels.h for the ABI): grouped GEMMs
 * for Mixture-of-Experts layers.
 *
 *   tpu::ragged_dot(lhs[M,K], rhs[G,K,N], group_sizes[G]) -> out[M,N]
 *       rows of lhs are sorted by group: group g is the next group_sizes[g]
 *       rows and uses rhs[g]. sum(group_sizes) must equal M.
 *   tpu::ragged_dot_rhs_grad(lhs[M,K], grad[M,N], group_sizes[G]) -> [G,K,N]
 *       out[g] = lhs rows of group g (transposed) @ grad rows of group g: the
 *       gradient of ragged_dot with respect to rhs (empty groups give zeros).
 *   aten::_grouped_mm(self, mat2, offs?, bias?, out_dtype?) -> out
 *       offs[g] is the END of group g (cumulative, int32). 2-D x 3-D: groups of
 *       rows as above (rows at and past offs[-1] are zeroed); 3-D x 2-D: groups
 *       of output columns; 2-D x 2-D: groups of K (out[g] = A[:, Kg] @ B[Kg]);
 *       3-D x 3-D: a batched matmul (no offs).
 *   tpu::gather_bmm(a, b, ids[S], gathered) -> out[S,M,N]
 *       out[s] = a[ids[s]] @ b[s] (gathered 0: a [E,M,K], b [S,K,N]) or
 *       a[s] @ b[ids[s]] (gathered 1: a [S,M,K], b [E,K,N]): the batched
 *       product of a gathered operand (Transformers' batched_mm experts)
 *       without the gather. The pairs are sorted by expert on the worker
 *       thread; each expert's matrix is read once per piece of at most
 *       MO_SMALL of its vectors. Scratch for the order: the one malloc here.
 *
 * float32, bfloat16 and float16 (any mix), float32 accumulation; any strides.
 * Group sizes are read on the queue's worker thread, so nothing waits for the
 * device. Work is split into (row block x column block) tasks over the whole
 * output, not per group, so that many small groups (decode) and one big group
 * (prefill) both keep every core busy. Each row block owns the pieces (at
 * most MO_MB rows of one group) that start in it, so every group's weights
 * are read once per column block. A piece of at most MO_SMALL rows against a
 * weight in nn.Linear layout (unit stride along K) streams the weight rows
 * once (arch/x86_64 nk_rows); larger pieces use the packed GEMM tile of
 * linalg.c (kernels/gemm.h). */
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/kutil.h"

#if defined(__x86_64__)
#define MO_X86 1
/* arch/x86_64/gemm_avx2.c */
void tpu_k_avx2_gemm_nk_rows(int64_t mr, int64_t nn, int64_t kc, const void* b, int dt, int64_t ldb,
                             const float* x, int64_t ldx, float* acc, int64_t ldacc);
void tpu_k_avx2_to_f32(int64_t n, const void* src, int dt, float* dst);
#else
#define MO_X86 0
#endif

#if MO_X86 && defined(TPU_HAVE_AVX512BF16)
#define MO_BF16DP 1
/* arch/x86_64/gemm_avx512bf16.c */
void tpu_k_avx512bf16_dot_nk(int64_t nn, int64_t kc, const uint16_t* b, int64_t ldb, int ms,
                             const uint16_t* x, int64_t ldx, float* acc, int64_t ldacc);
#else
#define MO_BF16DP 0
#endif

enum {
  MO_MB = 64,     /* rows per row block (and per piece of a big group) */
  MO_SMALL = 8,   /* pieces up to this many rows stream the weight */
  MO_KC = 1024,   /* K chunk of the streaming path (x rows converted to f32) */
  MO_KC_BF16 = 4096, /* K chunk of gather_bmm's bf16 path: weight rows up to 8 KB read whole */
  MO_NB_MAX = 256, /* columns per task */
  MO_TM = 64,     /* scratch tile rows / columns of the packed path */
  MO_TN = 128,
};

static int64_t mo_min(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mo_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bool mo_fdt(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}

static inline float mo_ldf(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    default: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
  }
}

static inline void mo_stf(char* p, int dt, float v) {
  switch (dt) {
    case TPU_DTYPE_F32: *(float*)p = v; break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16(v); break;
    default: *(uint16_t*)p = tpu_ku_f32_to_f16(v); break;
  }
}

/* A matrix operand of group g at p + (g*bs + r*rs + c*cs) elements; bs == 0
 * when all groups share it. */
typedef struct {
  const char* p;
  int32_t dt, es;
  int64_t bs, rs, cs;
} mo_mat_t;

static inline const char* mo_at(const mo_mat_t* m, int64_t g, int64_t r, int64_t c) {
  return m->p + (g * m->bs + r * m->rs + c * m->cs) * (int64_t)m->es;
}

typedef enum {
  MO_ROWS = 0,  /* groups partition the rows of A and C (B per group) */
  MO_KSLICE = 1, /* groups partition K (C per group) */
  MO_BATCH = 2, /* every operand per group, full K */
} mo_kind_t;

typedef struct {
  mo_kind_t kind;
  int64_t G, M, N, K;
  mo_mat_t a, b, c;
  const char* gs; /* group sizes (counts) or ends (cumulative); NULL for MO_BATCH */
  int32_t gs_dt;
  bool cumulative;
  bool avx2;
  int64_t mtiles, ntiles, nb;
} mo_prob_t;

static inline int64_t mo_gs(const mo_prob_t* p, int64_t g) {
  return tpu_ku_load_i64(p->gs + g * (int64_t)tpu_dtype_size((tpu_dtype_t)p->gs_dt), p->gs_dt);
}

/* [start, end) of group g given the end of group g-1 (`prev`). */
static inline int64_t mo_group_end(const mo_prob_t* p, int64_t g, int64_t prev) {
  return p->cumulative ? mo_gs(p, g) : prev + mo_gs(p, g);
}

/* Stores an f32 row into a row of C (any dtype among f32/bf16/f16, column
 * stride cs elements). */
static void mo_store_row(char* dst, int dt, int64_t es, int64_t cs, const float* src, int64_t n) {
  if (dt == TPU_DTYPE_F32 && cs == 1) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < n; ++j) mo_stf(dst + j * cs * es, dt, src[j]);
}

/* C[g][m0:m0+m, n0:n0+n] = A[g][m0:, k0:k0+k] @ B[g][k0:, n0:]. */
static void mo_piece(const mo_prob_t* p, int64_t g, int64_t m0, int64_t m, int64_t n0, int64_t n,
                     int64_t k0, int64_t k) {
  const mo_mat_t *A = &p->a, *B = &p->b, *C = &p->c;
  char* c0 = (char*)mo_at(C, g, m0, n0);
#if MO_X86
  if (p->avx2 && m <= MO_SMALL && k > 0 && (B->rs == 1 || k == 1)) {
    /* streaming: acc[m][n] in f32, x rows in f32 (converted per K chunk) */
    _Alignas(64) float acc[MO_SMALL * MO_NB_MAX];
    _Alignas(64) float xbuf[MO_SMALL * MO_KC];
    for (int64_t i = 0; i < m * n; ++i) acc[i] = 0.0f;
    for (int64_t kc0 = 0; kc0 < k; kc0 += MO_KC) {
      int64_t kc = mo_min(MO_KC, k - kc0);
      const float* x = xbuf;
      int64_t ldx = MO_KC;
      const char* a0 = mo_at(A, g, m0, k0 + kc0);
      if (A->dt == TPU_DTYPE_F32 && (A->cs == 1 || kc == 1)) {
        x = (const float*)a0;
        ldx = A->rs;
      } else {
        for (int64_t i = 0; i < m; ++i) {
          const char* ar = a0 + i * A->rs * A->es;
          if (A->cs == 1) {
            tpu_k_avx2_to_f32(kc, ar, A->dt, xbuf + i * MO_KC);
          } else {
            for (int64_t kk = 0; kk < kc; ++kk) xbuf[i * MO_KC + kk] = mo_ldf(ar + kk * A->cs * A->es, A->dt);
          }
        }
      }
      tpu_k_avx2_gemm_nk_rows(m, n, kc, mo_at(B, g, k0 + kc0, n0), B->dt, B->cs, x, ldx, acc, n);
    }
    for (int64_t i = 0; i < m; ++i) mo_store_row(c0 + i * C->rs * C->es, C->dt, C->es, C->cs, acc + i * n, n);
    return;
  }
#endif
  tpu_k_gemm_mat_t a = {mo_at(A, g, m0, k0), A->dt, A->rs, A->cs};
  tpu_k_gemm_mat_t b = {mo_at(B, g, k0, n0), B->dt, B->rs, B->cs};
  if (C->dt == TPU_DTYPE_F32 && C->cs == 1) {
    tpu_k_sgemm_tile(m, n, k, &a, &b, (float*)c0, C->rs, false, p->avx2);
    return;
  }
  _Alignas(64) float tile[MO_TM * MO_TN];
  for (int64_t i0 = 0; i0 < m; i0 += MO_TM) {
    int64_t mt = mo_min(MO_TM, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += MO_TN) {
      int64_t nt = mo_min(MO_TN, n - j0);
      tpu_k_gemm_mat_t at = a, bt = b;
      at.data = (const char*)a.data + i0 * A->rs * A->es;
      bt.data = (const char*)b.data + j0 * B->cs * B->es;
      tpu_k_sgemm_tile(mt, nt, k, &at, &bt, tile, nt, false, p->avx2);
      for (int64_t i = 0; i < mt; ++i)
        mo_store_row(c0 + ((i0 + i) * C->rs + j0 * C->cs) * C->es, C->dt, C->es, C->cs, tile + i * nt, nt);
    }
  }
}

static void mo_zero(const mo_prob_t* p, int64_t g, int64_t m0, int64_t m, int64_t n0, int64_t n) {
  const mo_mat_t* C = &p->c;
  for (int64_t i = 0; i < m; ++i) {
    char* r = (char*)mo_at(C, g, m0 + i, n0);
    for (int64_t j = 0; j < n; ++j) memset(r + j * C->cs * C->es, 0, (size_t)C->es);
  }
}

/* MO_ROWS task: row block rb, column block nt. Processes every piece (MO_MB
 * rows of one group) that starts in [lo, hi), and zeroes the rows of the
 * block past the last group. */
static void mo_rows_task(const mo_prob_t* p, int64_t t) {
  int64_t rb = t / p->ntiles, nt = t % p->ntiles;
  int64_t lo = rb * MO_MB, hi = mo_min(p->M, lo + MO_MB);
  int64_t n0 = nt * p->nb, n = mo_min(p->N, n0 + p->nb) - n0;
  int64_t start = 0;
  for (int64_t g = 0; g < p->G && start < hi; ++g) {
    int64_t end = mo_group_end(p, g, start);
    if (end > lo) {
      int64_t s = start;
      if (s < lo) s = start + mo_cdiv(lo - start, MO_MB) * MO_MB;
      for (; s < end && s < hi; s += MO_MB) mo_piece(p, g, s, mo_min(end, s + MO_MB) - s, n0, n, 0, p->K);
    }
    start = end;
  }
  if (start < hi) {
    int64_t z0 = start > lo ? start : lo;
    mo_zero(p, 0, z0, hi - z0, n0, n);
  }
}

/* MO_KSLICE / MO_BATCH task: group g, row block, column block. */
static void mo_batch_task(const mo_prob_t* p, int64_t t) {
  int64_t per = p->mtiles * p->ntiles;
  int64_t g = t / per, r = t % per;
  int64_t m0 = (r / p->ntiles) * MO_MB, m = mo_min(p->M, m0 + MO_MB) - m0;
  int64_t n0 = (r % p->ntiles) * p->nb, n = mo_min(p->N, n0 + p->nb) - n0;
  int64_t k0 = 0, k = p->K;
  if (p->kind == MO_KSLICE) {
    if (p->cumulative) {
      k0 = g > 0 ? mo_gs(p, g - 1) : 0;
    } else {
      k0 = 0;
      for (int64_t q = 0; q < g; ++q) k0 += mo_gs(p, q);
    }
    k = p->cumulative ? mo_gs(p, g) - k0 : mo_gs(p, g);
  }
  if (k == 0) {
    mo_zero(p, g, m0, m, n0, n);
    return;
  }
  mo_piece(p, g, m0, m, n0, n, k0, k);
}

static void mo_par(void* ctx, int64_t begin, int64_t end) {
  const mo_prob_t* p = (const mo_prob_t*)ctx;
  for (int64_t t = begin; t < end; ++t) {
    if (p->kind == MO_ROWS)
      mo_rows_task(p, t);
    else
      mo_batch_task(p, t);
  }
}

/* Validates the group sizes / ends against `total` (rows or K): sizes must be
 * >= 0 and sum to total (counts, `exact`) or be non-decreasing and <= total
 * (ends). Reads device data: run() only. */
static tpu_status_t mo_check_groups(const tpu_k_call_t* call, const mo_prob_t* p, int64_t total,
                                    bool exact, const char* what) {
  int64_t prev = 0;
  for (int64_t g = 0; g < p->G; ++g) {
    int64_t v = mo_gs(p, g);
    if (p->cumulative) {
      if (v < prev || v > total)
        return TPU_KU_INVALID(call, "offs must be non-decreasing and at most %lld (the %s), got offs[%lld] = %lld after %lld",
                              (long long)total, what, (long long)g, (long long)v, (long long)prev);
      prev = v;
    } else {
      if (v < 0)
        return TPU_KU_INVALID(call, "group_sizes[%lld] = %lld is negative", (long long)g, (long long)v);
      prev += v;
      if (prev > total) break;
    }
  }
  if (!p->cumulative && exact && prev > total)
    return TPU_KU_INVALID(call, "group_sizes must sum to the %s (%lld), got a larger sum", what, (long long)total);
  if (!p->cumulative && exact && prev < total)
    return TPU_KU_INVALID(call, "group_sizes must sum to the %s (%lld), got a sum of %lld", what, (long long)total,
                          (long long)prev);
  return TPU_OK;
}

static void mo_run(mo_prob_t* p, tpu_threadpool_t* pool) {
  int threads = tpu_threadpool_size(pool);
  int64_t mblocks = p->kind == MO_ROWS ? mo_cdiv(p->M, MO_MB) : p->G * mo_cdiv(p->M, MO_MB);
  /* columns per task: about 4 tasks per thread, 16..MO_NB_MAX columns */
  int64_t want = 4 * (int64_t)threads;
  int64_t nb = mo_cdiv(p->N * mblocks, want);
  nb = mo_cdiv(nb, 16) * 16;
  p->nb = nb < 16 ? 16 : nb > MO_NB_MAX ? MO_NB_MAX : nb;
  p->ntiles = mo_cdiv(p->N, p->nb);
  p->mtiles = mo_cdiv(p->M, MO_MB);
  p->avx2 = tpu_k_gemm_use_avx2();
  tpu_parallel_for(pool, mblocks * p->ntiles, 1, mo_par, p);
}

static mo_mat_t mo_mat(const tpu_tensor_t* t) {
  mo_mat_t m;
  m.p = (const char*)t->data;
  m.dt = t->dtype;
  m.es = (int32_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  int o = t->ndim - 2;
  m.bs = o > 0 ? t->strides[0] : 0;
  m.rs = t->strides[o];
  m.cs = t->strides[o + 1];
  /* degenerate dims: any stride; 1 keeps the layout tests simple */
  if (t->sizes[o] == 1) m.rs = 1;
  if (t->sizes[o + 1] == 1) m.cs = 1;
  return m;
}

static void mo_transpose(mo_mat_t* m) {
  int64_t t = m->rs;
  m->rs = m->cs;
  m->cs = t;
}

/* ---- tpu::ragged_dot ------------------------------------------------------------ */

static tpu_status_t rd_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* gs = tpu_ku_tensor(call, 2);
  if (!a || !b || !gs || call->num_outputs != 1) return TPU_KU_INVALID(call, "expected (lhs, rhs, group_sizes) tensors");
  const tpu_tensor_t* c = &call->outputs[0];
  if (!mo_fdt(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!mo_fdt(b->dtype)) return tpu_ku_unsupported_dtype(call, b->dtype);
  if (!mo_fdt(c->dtype)) return tpu_ku_unsupported_dtype(call, c->dtype);
  if (gs->dtype != TPU_DTYPE_I32 && gs->dtype != TPU_DTYPE_I64)
    return TPU_KU_INVALID(call, "group_sizes must be int32 or int64, got %s", tpu_dtype_name((tpu_dtype_t)gs->dtype));
  if (a->ndim != 2 || b->ndim != 3 || gs->ndim != 1)
    return TPU_KU_INVALID(call, "expected lhs [M, K], rhs [G, K, N], group_sizes [G], got %d-D, %d-D, %d-D",
                          (int)a->ndim, (int)b->ndim, (int)gs->ndim);
  if (b->sizes[1] != a->sizes[1] || gs->sizes[0] != b->sizes[0])
    return TPU_KU_INVALID(call, "sizes do not match: lhs [%lld, %lld], rhs [%lld, %lld, %lld], group_sizes [%lld]",
                          (long long)a->sizes[0], (long long)a->sizes[1], (long long)b->sizes[0],
                          (long long)b->sizes[1], (long long)b->sizes[2], (long long)gs->sizes[0]);
  if (c->ndim != 2 || c->sizes[0] != a->sizes[0] || c->sizes[1] != b->sizes[2])
    return TPU_KU_INVALID(call, "output must be [%lld, %lld]", (long long)a->sizes[0], (long long)b->sizes[2]);
  return TPU_OK;
}

static tpu_status_t rd_run(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* gs = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* c = &call->outputs[0];
  mo_prob_t p;
  memset(&p, 0, sizeof(p));
  p.kind = MO_ROWS;
  p.G = b->sizes[0];
  p.M = a->sizes[0];
  p.K = a->sizes[1];
  p.N = b->sizes[2];
  p.gs = (const char*)gs->data;
  p.gs_dt = gs->dtype;
  p.cumulative = false;
  /* group_sizes may be strided: read through a 1-element-stride view only */
  if (p.G > 1 && gs->strides[0] != 1)
    return TPU_KU_INVALID(call, "group_sizes must be contiguous (stride %lld)", (long long)gs->strides[0]);
  if (p.G > 0) TPU_RETURN_IF_ERROR(mo_check_groups(call, &p, p.M, true, "rows of lhs"));
  else if (p.M != 0) return TPU_KU_INVALID(call, "group_sizes is empty but lhs has %lld rows", (long long)p.M);
  if (p.M == 0 || p.N == 0) return TPU_OK;
  p.a = mo_mat(a);
  p.b = mo_mat(b);
  p.c = mo_mat(c);
  mo_run(&p, call->pool);
  return TPU_OK;
}

/* ---- tpu::ragged_dot_rhs_grad --------------------------------------------------- */

static tpu_status_t rg_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* d = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* gs = tpu_ku_tensor(call, 2);
  if (!a || !d || !gs || call->num_outputs != 1) return TPU_KU_INVALID(call, "expected (lhs, grad, group_sizes) tensors");
  const tpu_tensor_t* c = &call->outputs[0];
  if (!mo_fdt(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!mo_fdt(d->dtype)) return tpu_ku_unsupported_dtype(call, d->dtype);
  if (!mo_fdt(c->dtype)) return tpu_ku_unsupported_dtype(call, c->dtype);
  if (gs->dtype != TPU_DTYPE_I32 && gs->dtype != TPU_DTYPE_I64)
    return TPU_KU_INVALID(call, "group_sizes must be int32 or int64, got %s", tpu_dtype_name((tpu_dtype_t)gs->dtype));
  if (a->ndim != 2 || d->ndim != 2 || gs->ndim != 1 || d->sizes[0] != a->sizes[0])
    return TPU_KU_INVALID(call, "expected lhs [M, K], grad [M, N], group_sizes [G]");
  if (c->ndim != 3 || c->sizes[0] != gs->sizes[0] || c->sizes[1] != a->sizes[1] || c->sizes[2] != d->sizes[1])
    return TPU_KU_INVALID(call, "output must be [G, K, N]");
  return TPU_OK;
}

static tpu_status_t rg_run(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* d = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* gs = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* c = &call->outputs[0];
  mo_prob_t p;
  memset(&p, 0, sizeof(p));
  p.kind = MO_KSLICE;
  p.G = gs->sizes[0];
  p.M = a->sizes[1]; /* out[g] is [K, N]: rows are lhs columns */
  p.K = a->sizes[0]; /* contraction over the rows of lhs and grad */
  p.N = d->sizes[1];
  p.gs = (const char*)gs->data;
  p.gs_dt = gs->dtype;
  p.cumulative = false;
  if (p.G > 1 && gs->strides[0] != 1)
    return TPU_KU_INVALID(call, "group_sizes must be contiguous (stride %lld)", (long long)gs->strides[0]);
  TPU_RETURN_IF_ERROR(mo_check_groups(call, &p, p.K, true, "rows of lhs"));
  if (p.G == 0 || p.M == 0 || p.N == 0) return TPU_OK;
  p.a = mo_mat(a);
  mo_transpose(&p.a);
  p.b = mo_mat(d);
  p.c = mo_mat(c);
  mo_run(&p, call->pool);
  return TPU_OK;
}

/* ---- aten::_grouped_mm ---------------------------------------------------------- */

static tpu_status_t gm_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* offs = tpu_ku_tensor(call, 2);
  if (!a || !b || call->num_outputs != 1) return TPU_KU_INVALID(call, "expected tensors mat_a and mat_b");
  const tpu_tensor_t* c = &call->outputs[0];
  if (!mo_fdt(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!mo_fdt(b->dtype)) return tpu_ku_unsupported_dtype(call, b->dtype);
  if (!mo_fdt(c->dtype)) return tpu_ku_unsupported_dtype(call, c->dtype);
  if (!tpu_ku_is_none(call, 3) && tpu_ku_tensor(call, 3))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: bias is not supported", call->op);
  if ((a->ndim != 2 && a->ndim != 3) || (b->ndim != 2 && b->ndim != 3))
    return TPU_KU_INVALID(call, "mat_a and mat_b must be 2-D or 3-D, got %d-D and %d-D", (int)a->ndim, (int)b->ndim);
  bool need_offs = a->ndim == 2 || b->ndim == 2;
  if (need_offs != (offs != NULL))
    return TPU_KU_INVALID(call, need_offs ? "offs is required for %d-D x %d-D" : "offs must be None for %d-D x %d-D",
                          (int)a->ndim, (int)b->ndim);
  int64_t K = a->sizes[a->ndim - 1];
  if (b->sizes[b->ndim - 2] != K) return TPU_KU_INVALID(call, "contraction dimension of mat_a and mat_b must match");
  if (offs) {
    if (offs->ndim != 1 || (offs->dtype != TPU_DTYPE_I32 && offs->dtype != TPU_DTYPE_I64))
      return TPU_KU_INVALID(call, "offs must be a 1-D int32 tensor");
    if (offs->sizes[0] > 1 && offs->strides[0] != 1) return TPU_KU_INVALID(call, "offs must be contiguous");
  }
  int64_t G = offs ? offs->sizes[0] : a->sizes[0];
  int64_t want[3];
  int nd;
  if (a->ndim == 2 && b->ndim == 3) {
    if (b->sizes[0] != G) return TPU_KU_INVALID(call, "matrix batch sizes have to match");
    want[0] = a->sizes[0]; want[1] = b->sizes[2]; nd = 2;
  } else if (a->ndim == 3 && b->ndim == 2) {
    if (a->sizes[0] != G) return TPU_KU_INVALID(call, "matrix batch sizes have to match");
    want[0] = a->sizes[1]; want[1] = b->sizes[1]; nd = 2;
  } else if (a->ndim == 2) {
    want[0] = G; want[1] = a->sizes[0]; want[2] = b->sizes[1]; nd = 3;
  } else {
    if (b->sizes[0] != G) return TPU_KU_INVALID(call, "batched dimension has to match");
    want[0] = G; want[1] = a->sizes[1]; want[2] = b->sizes[2]; nd = 3;
  }
  bool ok = c->ndim == nd;
  for (int d = 0; ok && d < nd; ++d) ok = c->sizes[d] == want[d];
  if (!ok) return TPU_KU_INVALID(call, "unexpected output shape");
  return TPU_OK;
}

static tpu_status_t gm_run(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* offs = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* c = &call->outputs[0];
  mo_prob_t p;
  memset(&p, 0, sizeof(p));
  p.a = mo_mat(a);
  p.b = mo_mat(b);
  p.c = mo_mat(c);
  if (offs) {
    p.gs = (const char*)offs->data;
    p.gs_dt = offs->dtype;
    p.cumulative = true;
    p.G = offs->sizes[0];
  }
  if (a->ndim == 2 && b->ndim == 3) { /* rows of A grouped */
    p.kind = MO_ROWS;
    p.M = a->sizes[0]; p.K = a->sizes[1]; p.N = b->sizes[2];
    TPU_RETURN_IF_ERROR(mo_check_groups(call, &p, p.M, false, "rows of mat_a"));
  } else if (a->ndim == 3 && b->ndim == 2) { /* columns of B / C grouped: C^T = B^T A^T */
    p.kind = MO_ROWS;
    p.M = b->sizes[1]; p.K = a->sizes[2]; p.N = a->sizes[1];
    mo_mat_t at = p.a;
    p.a = p.b; /* B^T [N_total, K], shared */
    p.b = at;  /* A[g]^T [K, M] */
    mo_transpose(&p.a);
    mo_transpose(&p.b);
    mo_transpose(&p.c);
    TPU_RETURN_IF_ERROR(mo_check_groups(call, &p, p.M, false, "columns of mat_b"));
  } else if (a->ndim == 2) { /* K grouped, one output per group */
    p.kind = MO_KSLICE;
    p.M = a->sizes[0]; p.K = a->sizes[1]; p.N = b->sizes[1];
    TPU_RETURN_IF_ERROR(mo_check_groups(call, &p, p.K, false, "columns of mat_a"));
  } else {
    p.kind = MO_BATCH;
    p.G = a->sizes[0]; p.M = a->sizes[1]; p.K = a->sizes[2]; p.N = b->sizes[2];
  }
  if (p.M == 0 || p.N == 0 || (p.kind != MO_ROWS && p.G == 0)) return TPU_OK;
  mo_run(&p, call->pool);
  return TPU_OK;
}

/* ---- tpu::gather_bmm ------------------------------------------------------------ */

/* The batched product of a gathered operand, out[s] = a[ids[s]] @ b[s]
 * (gathered 0) or a[s] @ b[ids[s]] (gathered 1), without the gather: the pairs
 * s are sorted by expert (a counting sort on the worker thread) and each
 * expert's weight is streamed once per piece of at most MO_SMALL of its
 * vectors, as ragged_dot does for rows sorted by group.
 *
 * The problem in vector form: pair s has Q vectors x(s, q) of length K (the
 * columns of b[s], or the rows of a[s]); each gives an output vector y(s, q)
 * of length P: y[p] = sum_k x[k] * W_e(k, p), W_e the expert's weight seen as
 * [K, P] (a[e] transposed, or b[e]). */
typedef struct {
  int64_t S, Q, K, P, E;
  const char* x; int32_t xdt, xes; int64_t xbs, xqs, xks; /* x(s,q)[k] */
  const char* w; int32_t wdt, wes; int64_t wbs, wks, wps; /* W_e(k,p) */
  char* y; int32_t ydt, yes; int64_t ybs, yqs, yps;       /* y(s,q)[p] */
  const int64_t* order;  /* pairs sorted by expert (stable) */
  const int64_t* pe;     /* per piece: expert, first row, rows (row r: pair order[r / Q], vector r % Q) */
  const int64_t* pr;
  const int64_t* pm;
  int64_t npieces, nb, ntiles;
  bool avx2;
  bool bf16dp; /* x and W bfloat16, W unit stride along K: vdpbf16ps on the bf16 pairs */
} gb_prob_t;

#if MO_BF16DP
/* gb_task's bf16 x bf16 path: x rows gathered as bf16 (exact), the products
 * summed in f32 by vdpbf16ps, W streamed once for up to 4 x rows and read
 * again from cache for the next 4. */
static void gb_task_bf16(const gb_prob_t* p, int64_t e, int64_t m, int64_t n0, int64_t n, const char* const* xrow,
                         char* const* yrow) {
  _Alignas(64) float acc[MO_SMALL * MO_NB_MAX];
  _Alignas(64) uint16_t xb[MO_SMALL * MO_KC_BF16];
  for (int64_t i = 0; i < m * n; ++i) acc[i] = 0.0f;
  const char* w0 = p->w + (e * p->wbs + n0 * p->wps) * (int64_t)p->wes;
  for (int64_t kc0 = 0; kc0 < p->K; kc0 += MO_KC_BF16) {
    int64_t kc = mo_min(MO_KC_BF16, p->K - kc0);
    for (int64_t i = 0; i < m; ++i) {
      const uint16_t* xr = (const uint16_t*)xrow[i] + kc0 * p->xks;
      if (p->xks == 1) {
        memcpy(xb + i * MO_KC_BF16, xr, (size_t)kc * sizeof(uint16_t));
      } else {
        for (int64_t k = 0; k < kc; ++k) xb[i * MO_KC_BF16 + k] = xr[k * p->xks];
      }
    }
    const uint16_t* wk = (const uint16_t*)w0 + kc0;
    for (int64_t i0 = 0; i0 < m; i0 += 4)
      tpu_k_avx512bf16_dot_nk(n, kc, wk, p->wps, (int)mo_min(4, m - i0), xb + i0 * MO_KC_BF16, MO_KC_BF16, acc + i0 * n, n);
  }
  for (int64_t i = 0; i < m; ++i) mo_store_row(yrow[i], p->ydt, p->yes, p->yps, acc + i * n, n);
}
#endif

static void gb_task(const gb_prob_t* p, int64_t t) {
  int64_t pi = t / p->ntiles, nt = t % p->ntiles;
  int64_t e = p->pe[pi], r0 = p->pr[pi], m = p->pm[pi];
  int64_t n0 = nt * p->nb, n = mo_min(p->P, n0 + p->nb) - n0;
  _Alignas(64) float acc[MO_SMALL * MO_NB_MAX];
  _Alignas(64) float xbuf[MO_SMALL * MO_KC];
  const char* xrow[MO_SMALL];
  char* yrow[MO_SMALL];
  for (int64_t i = 0; i < m; ++i) {
    int64_t r = r0 + i, s = p->order[r / p->Q], q = r % p->Q;
    xrow[i] = p->x + (s * p->xbs + q * p->xqs) * (int64_t)p->xes;
    yrow[i] = p->y + (s * p->ybs + q * p->yqs + n0 * p->yps) * (int64_t)p->yes;
  }
#if MO_BF16DP
  if (p->bf16dp) {
    gb_task_bf16(p, e, m, n0, n, xrow, yrow);
    return;
  }
#endif
  for (int64_t i = 0; i < m * n; ++i) acc[i] = 0.0f;
  const char* w0 = p->w + (e * p->wbs + n0 * p->wps) * (int64_t)p->wes;
  for (int64_t kc0 = 0; kc0 < p->K; kc0 += MO_KC) {
    int64_t kc = mo_min(MO_KC, p->K - kc0);
    for (int64_t i = 0; i < m; ++i) {
      const char* xr = xrow[i] + kc0 * p->xks * (int64_t)p->xes;
      float* dst = xbuf + i * MO_KC;
#if MO_X86
      if (p->avx2 && p->xks == 1) {
        tpu_k_avx2_to_f32(kc, xr, p->xdt, dst);
        continue;
      }
#endif
      for (int64_t k = 0; k < kc; ++k) dst[k] = mo_ldf(xr + k * p->xks * (int64_t)p->xes, p->xdt);
    }
    const char* wk = w0 + kc0 * p->wks * (int64_t)p->wes;
#if MO_X86
    if (p->avx2 && (p->wks == 1 || kc == 1)) {
      tpu_k_avx2_gemm_nk_rows(m, n, kc, wk, p->wdt, p->wps, xbuf, MO_KC, acc, n);
      continue;
    }
#endif
    tpu_k_gemm_mat_t a = {xbuf, TPU_DTYPE_F32, MO_KC, 1};
    tpu_k_gemm_mat_t b = {wk, p->wdt, p->wks, p->wps};
    tpu_k_sgemm_tile(m, n, kc, &a, &b, acc, n, kc0 > 0, p->avx2);
  }
  for (int64_t i = 0; i < m; ++i) mo_store_row(yrow[i], p->ydt, p->yes, p->yps, acc + i * n, n);
}

static void gb_par(void* ctx, int64_t begin, int64_t end) {
  const gb_prob_t* p = (const gb_prob_t*)ctx;
  for (int64_t t = begin; t < end; ++t) gb_task(p, t);
}

/* a, b, ids, gathered (0: a is [E, M, K] and b [S, K, N]; 1: a is [S, M, K]
 * and b [E, K, N]) -> out [S, M, N]. */
static tpu_status_t gb_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* ids = tpu_ku_tensor(call, 2);
  int64_t gathered = tpu_ku_int(call, 3, -1);
  if (!a || !b || !ids || call->num_outputs != 1) return TPU_KU_INVALID(call, "expected (a, b, ids) tensors");
  if (gathered != 0 && gathered != 1) return TPU_KU_INVALID(call, "gathered must be 0 or 1, got %lld", (long long)gathered);
  const tpu_tensor_t* c = &call->outputs[0];
  if (!mo_fdt(a->dtype)) return tpu_ku_unsupported_dtype(call, a->dtype);
  if (!mo_fdt(b->dtype)) return tpu_ku_unsupported_dtype(call, b->dtype);
  if (!mo_fdt(c->dtype)) return tpu_ku_unsupported_dtype(call, c->dtype);
  if (ids->dtype != TPU_DTYPE_I32 && ids->dtype != TPU_DTYPE_I64)
    return TPU_KU_INVALID(call, "ids must be int32 or int64, got %s", tpu_dtype_name((tpu_dtype_t)ids->dtype));
  if (a->ndim != 3 || b->ndim != 3 || ids->ndim != 1)
    return TPU_KU_INVALID(call, "expected a and b 3-D and ids 1-D, got %d-D, %d-D, %d-D", (int)a->ndim, (int)b->ndim,
                          (int)ids->ndim);
  const tpu_tensor_t* pairs = gathered == 0 ? b : a;
  if (a->sizes[2] != b->sizes[1] || pairs->sizes[0] != ids->sizes[0])
    return TPU_KU_INVALID(call, "sizes do not match: a [%lld, %lld, %lld], b [%lld, %lld, %lld], ids [%lld]",
                          (long long)a->sizes[0], (long long)a->sizes[1], (long long)a->sizes[2],
                          (long long)b->sizes[0], (long long)b->sizes[1], (long long)b->sizes[2],
                          (long long)ids->sizes[0]);
  if (c->ndim != 3 || c->sizes[0] != ids->sizes[0] || c->sizes[1] != a->sizes[1] || c->sizes[2] != b->sizes[2])
    return TPU_KU_INVALID(call, "output must be [%lld, %lld, %lld]", (long long)ids->sizes[0], (long long)a->sizes[1],
                          (long long)b->sizes[2]);
  return TPU_OK;
}

static tpu_status_t gb_run(const tpu_k_call_t* call) {
  const tpu_tensor_t* a = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* b = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* ids = tpu_ku_tensor(call, 2);
  const bool g1 = tpu_ku_int(call, 3, 0) == 1;
  const tpu_tensor_t* c = &call->outputs[0];
  gb_prob_t p;
  memset(&p, 0, sizeof(p));
  const tpu_tensor_t* w = g1 ? b : a;
  const tpu_tensor_t* x = g1 ? a : b;
  p.S = ids->sizes[0];
  p.E = w->sizes[0];
  p.K = a->sizes[2];
  if (p.S == 0 || a->sizes[1] == 0 || b->sizes[2] == 0) return TPU_OK;
  /* ids first: nothing is read out of bounds, negative ids count from the end */
  const int64_t es_id = (int64_t)tpu_dtype_size((tpu_dtype_t)ids->dtype);
  for (int64_t s = 0; s < p.S; ++s) {
    int64_t v = tpu_ku_load_i64((const char*)ids->data + s * ids->strides[0] * es_id, ids->dtype);
    if (v < -p.E || v >= p.E)
      return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: index %lld is out of bounds for dimension 0 with size %lld",
                       call->op, (long long)v, (long long)p.E);
  }
  p.x = (const char*)x->data; p.xdt = x->dtype; p.xes = (int32_t)tpu_dtype_size((tpu_dtype_t)x->dtype);
  p.w = (const char*)w->data; p.wdt = w->dtype; p.wes = (int32_t)tpu_dtype_size((tpu_dtype_t)w->dtype);
  p.y = (char*)c->data; p.ydt = c->dtype; p.yes = (int32_t)tpu_dtype_size((tpu_dtype_t)c->dtype);
  p.xbs = x->strides[0];
  p.wbs = w->strides[0];
  p.ybs = c->strides[0];
  if (!g1) { /* y(s, q) = out[s][:, q] = a[e] @ b[s][:, q] */
    p.Q = b->sizes[2]; p.P = a->sizes[1];
    p.xqs = b->strides[2]; p.xks = b->strides[1];
    p.wks = a->strides[2]; p.wps = a->strides[1];
    p.yqs = c->strides[2]; p.yps = c->strides[1];
  } else { /* y(s, q) = out[s][q, :] = a[s][q, :] @ b[e] */
    p.Q = a->sizes[1]; p.P = b->sizes[2];
    p.xqs = a->strides[1]; p.xks = a->strides[2];
    p.wks = b->strides[1]; p.wps = b->strides[2];
    p.yqs = c->strides[1]; p.yps = c->strides[2];
  }
  if (p.K == 0) {
    for (int64_t s = 0; s < p.S; ++s)
      for (int64_t q = 0; q < p.Q; ++q)
        for (int64_t j = 0; j < p.P; ++j)
          memset(p.y + (s * p.ybs + q * p.yqs + j * p.yps) * (int64_t)p.yes, 0, (size_t)p.yes);
    return TPU_OK;
  }
  /* scratch: order[S], start[E + 1], pieces (expert, first row, rows) */
  const int64_t rows = p.S * p.Q;
  const int64_t max_pieces = rows / MO_SMALL + (p.E < p.S ? p.E : p.S) + 1;
  int64_t* scratch = (int64_t*)malloc(sizeof(int64_t) * (size_t)(p.S + p.E + 1 + 3 * max_pieces));
  if (!scratch)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for the expert order of %lld pairs", call->op,
                     (long long)p.S);
  int64_t* order = scratch;
  int64_t* start = order + p.S;
  int64_t* pe = start + p.E + 1;
  int64_t* pr = pe + max_pieces;
  int64_t* pm = pr + max_pieces;
  for (int64_t e = 0; e <= p.E; ++e) start[e] = 0;
  for (int64_t s = 0; s < p.S; ++s) {
    int64_t v = tpu_ku_load_i64((const char*)ids->data + s * ids->strides[0] * es_id, ids->dtype);
    start[(v < 0 ? v + p.E : v) + 1]++;
  }
  for (int64_t e = 0; e < p.E; ++e) start[e + 1] += start[e];
  int64_t n = 0;
  for (int64_t e = 0; e < p.E; ++e) {
    for (int64_t r = start[e] * p.Q; r < start[e + 1] * p.Q; r += MO_SMALL) {
      pe[n] = e;
      pr[n] = r;
      pm[n] = mo_min(MO_SMALL, start[e + 1] * p.Q - r);
      ++n;
    }
  }
  for (int64_t s = 0; s < p.S; ++s) { /* stable: start[e] is the next free slot of expert e */
    int64_t v = tpu_ku_load_i64((const char*)ids->data + s * ids->strides[0] * es_id, ids->dtype);
    order[start[v < 0 ? v + p.E : v]++] = s;
  }
  p.order = order;
  p.pe = pe; p.pr = pr; p.pm = pm;
  p.npieces = n;
  int threads = tpu_threadpool_size(call->pool);
  int64_t nb = mo_cdiv(p.P * n, 4 * (int64_t)threads);
  nb = mo_cdiv(nb, 16) * 16;
  p.nb = nb < 16 ? 16 : nb > MO_NB_MAX ? MO_NB_MAX : nb;
  p.ntiles = mo_cdiv(p.P, p.nb);
  p.avx2 = tpu_k_gemm_use_avx2();
  p.bf16dp = MO_BF16DP && p.wdt == TPU_DTYPE_BF16 && p.xdt == TPU_DTYPE_BF16 && p.wks == 1 && tpu_ku_use_avx512bf16();
  tpu_parallel_for(call->pool, n * p.ntiles, 1, gb_par, &p);
  free(scratch);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_moe_entries[] = {
    {"tpu::ragged_dot", rd_run, rd_check, 0, NULL},
    {"tpu::ragged_dot_rhs_grad", rg_run, rg_check, 0, NULL},
    {"aten::_grouped_mm", gm_run, gm_check, 0, NULL},
    {"tpu::gather_bmm", gb_run, gb_check, 0, NULL},
};
const size_t tpu_k_moe_count = sizeof(tpu_k_moe_entries) / sizeof(tpu_k_moe_entries[0]);
