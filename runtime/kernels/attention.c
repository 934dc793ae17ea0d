/* attention.c - kernel family "attention": fused scaled-dot-product
 * attention, forward and backward, flash style (online softmax over key
 * blocks; the L x S score matrix is never materialised).
 *
 *   tpu::sdpa_fwd(q, k, v, bias?, is_causal, scale, for_backward = true) -> (out, lse)
 *   tpu::sdpa_bwd(grad_out, q, k, v, bias?, out, lse, is_causal, scale)
 *       -> (dq, dk, dv, dbias)          (any output may be absent: INVALID)
 *
 * Queued by the bridge (torch_tpu/csrc/aten/attention.cpp) for
 * aten::_scaled_dot_product_fused_attention_overrideable(_backward).
 *
 * Shapes: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] with
 * Hq % Hkv == 0 (grouped-query attention: q head h reads kv head
 * h / (Hq / Hkv)); out [B, Hq, L, Ev] (q's dtype); lse [B, Hq, L] float32;
 * dq/dk/dv like q/k/v; dbias [B, Hq, L, S] float32 (the gradient of an
 * additive bias before any broadcasting is summed away by the bridge).
 * Any strides. q/k/v dtypes: float32, bfloat16, float16 (one dtype), with
 * float32 accumulation. E, Ev <= AT_DMAX.
 * bias: broadcastable (right-aligned) to [B, Hq, L, S]; bool (true = take
 * part, as in PyTorch) or float (added to the scaled scores).
 * is_causal: query i sees keys j <= i (PyTorch's top-left alignment:
 * tril(ones(L, S))), combined with bias if both are given.
 * Scores are scale * q.k (+ bias); a row whose scores are all -inf gets
 * out = 0 and lse = -inf, like PyTorch's math path (_safe_softmax); its
 * gradients are 0.
 *
 * Work split (tpu_parallel_for): forward and the dq pass run one task per
 * (batch, kv head, block of AT_BR query rows), the query rows of the Hq/Hkv
 * heads that share a kv head being stacked (so decoding with GQA still
 * fills a block); the dk/dv pass runs one task per (batch, kv head, block
 * of AT_BC keys) and loops over the group's heads, so no two tasks write
 * the same gradient. Backward recomputes the probabilities from lse.
 * for_backward = false (the bridge's calls that autograd does not record)
 * lets a forward with few query rows per kv head take the decode kernel;
 * its lse is as accurate but rounds otherwise than the blocks' kernel,
 * against which the backward's gradient checks were made.
 * Float32 blocks of K/V with unit column stride are read in place; other
 * layouts/dtypes are converted into stack buffers. Every task keeps its
 * blocks on the stack (no allocation): up to ~420 KiB with E = Ev = 256.
 * The block products use an AVX2/FMA micro-kernel (arch/x86_64/
 * attention_avx2.c) when the CPU has it (TORCH_TPU_KERNEL_ISA=generic
 * forces the portable loops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"

#if defined(__x86_64__) || defined(_M_X64)
#define AT_X86 1
/* arch/x86_64/attention_avx2.c */
void tpu_k_avx2_attn_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs,
                          const float* b, int64_t ldb, float* c, int64_t ldc, int accumulate);
void tpu_k_avx2_attn_exp_sub(int64_t rows, int64_t cols, float* x, int64_t ld, const float* sub, int per_col,
                             float* colsum);
void tpu_k_avx2_attn_to_f32(int64_t n, const void* src, int dt, float* dst);
void tpu_k_avx2_attn_dots(int64_t nr, int64_t nc, int64_t E, const float* q, int64_t ldq, const float* k,
                          int64_t ldk, float* s, int64_t lds);
#else
#define AT_X86 0
#endif

#define AT_BR 64    /* query rows per block */
#define AT_BC 64    /* keys per block */
#define AT_DMAX 256 /* largest head dim */

/* ---- block operations (portable versions; AVX2 ones selected at run time) ---- */

typedef struct {
  /* C[m x n] (+)= A[m x k] B[k x n]; A(i, p) = a[i*ars + p*acs], B(p, j) =
   * b[p*ldb + j], C(i, j) = c[i*ldc + j]. */
  void (*gemm)(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
               int64_t ldb, float* c, int64_t ldc, int accumulate);
  /* x[i][j] = exp(x[i][j] - sub[per_col ? j : i]) (exp(-inf) = 0); when
   * colsum != NULL, colsum[j] += sum_i x[i][j] (per_col only). */
  void (*exp_sub)(int64_t rows, int64_t cols, float* x, int64_t ld, const float* sub, int per_col, float* colsum);
  /* contiguous n elements of dtype dt -> float */
  void (*to_f32)(int64_t n, const void* src, int dt, float* dst);
  /* s[x * lds + j] = dot(q row x, k row j) over E, x < nr, j < nc */
  void (*dots)(int64_t nr, int64_t nc, int64_t E, const float* q, int64_t ldq, const float* k, int64_t ldk, float* s,
               int64_t lds);
} at_ops_t;

static void at_gemm_c(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
                      int64_t ldb, float* c, int64_t ldc, int accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    if (!accumulate)
      for (int64_t j = 0; j < n; ++j) cr[j] = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[i * ars + p * acs];
      const float* br = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
  }
}

static void at_exp_sub_c(int64_t rows, int64_t cols, float* x, int64_t ld, const float* sub, int per_col,
                         float* colsum) {
  for (int64_t i = 0; i < rows; ++i) {
    float* xr = x + i * ld;
    for (int64_t j = 0; j < cols; ++j) {
      float e = expf(xr[j] - (per_col ? sub[j] : sub[i]));
      xr[j] = e;
      if (colsum) colsum[j] += e;
    }
  }
}

static void at_to_f32_c(int64_t n, const void* src, int dt, float* dst) {
  const uint16_t* h = (const uint16_t*)src;
  switch (dt) {
    case TPU_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case TPU_DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = tpu_ku_bf16_to_f32(h[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = tpu_ku_f16_to_f32(h[i]);
      break;
  }
}

static void at_dots_c(int64_t nr, int64_t nc, int64_t E, const float* q, int64_t ldq, const float* k, int64_t ldk,
                      float* s, int64_t lds) {
  for (int64_t x = 0; x < nr; ++x) {
    for (int64_t j = 0; j < nc; ++j) {
      float t = 0.0f;
      for (int64_t e = 0; e < E; ++e) t += q[x * ldq + e] * k[j * ldk + e];
      s[x * lds + j] = t;
    }
  }
}

static const at_ops_t kAtOpsC = {at_gemm_c, at_exp_sub_c, at_to_f32_c, at_dots_c};
#if AT_X86
static const at_ops_t kAtOpsAvx2 = {tpu_k_avx2_attn_gemm, tpu_k_avx2_attn_exp_sub, tpu_k_avx2_attn_to_f32,
                                    tpu_k_avx2_attn_dots};
#endif

static const at_ops_t* at_ops(void) {
#if AT_X86
  if (tpu_ku_use_avx2()) return &kAtOpsAvx2;
#endif
  return &kAtOpsC;
}

/* ---- views -------------------------------------------------------------------------- */

/* A [B, H, R, C] view with byte strides (0 where broadcast). */
typedef struct {
  char* p;
  int dt;
  int64_t es;
  int64_t s[4];
} at_v4_t;

static inline char* at_row(const at_v4_t* v, int64_t b, int64_t h, int64_t r) {
  return v->p + b * v->s[0] + h * v->s[1] + r * v->s[2];
}

/* View of t broadcast (right-aligned) to `sizes` (4 dims); false if it
 * cannot broadcast. */
static bool at_view(const tpu_tensor_t* t, const int64_t* sizes, at_v4_t* v) {
  memset(v, 0, sizeof(*v));
  v->p = (char*)t->data;
  v->dt = t->dtype;
  v->es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  if (t->ndim > 4) return false;
  int32_t lead = 4 - t->ndim;
  for (int32_t d = 0; d < 4; ++d) {
    int32_t j = d - lead;
    if (j < 0 || t->sizes[j] == 1) {
      v->s[d] = 0;
    } else if (t->sizes[j] == sizes[d]) {
      v->s[d] = t->strides[j] * v->es;
    } else {
      return false;
    }
  }
  return true;
}

/* n elements at p (byte stride st) -> float */
static void at_load(const at_ops_t* ops, float* dst, const char* p, int dt, int64_t st, int64_t n) {
  int64_t es = dt == TPU_DTYPE_F32 ? 4 : 2;
  if (st == es) {
    ops->to_f32(n, p, dt, dst);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const char* q = p + i * st;
    dst[i] = dt == TPU_DTYPE_F32    ? *(const float*)q
             : dt == TPU_DTYPE_BF16 ? tpu_ku_bf16_to_f32(*(const uint16_t*)q)
                                    : tpu_ku_f16_to_f32(*(const uint16_t*)q);
  }
}

/* n floats * mul -> elements at p (byte stride st) */
static void at_store(char* p, int dt, int64_t st, const float* src, float mul, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float f = src[i] * mul;
    char* q = p + i * st;
    if (dt == TPU_DTYPE_F32) {
      *(float*)q = f;
    } else if (dt == TPU_DTYPE_BF16) {
      *(uint16_t*)q = tpu_ku_f32_to_bf16(f);
    } else {
      *(uint16_t*)q = tpu_ku_f32_to_f16(f);
    }
  }
}

static inline float at_bias_val(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_BOOL: return *(const uint8_t*)p ? 0.0f : -INFINITY;
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_F64: return (float)*(const double*)p;
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    default: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
  }
}

/* ---- arguments -------------------------------------------------------------------------- */

typedef struct {
  const at_ops_t* ops;
  int64_t B, Hq, Hkv, G, L, S, E, Ev;
  float scale;
  bool causal, has_bias;
  at_v4_t q, k, v, bias;
  /* forward */
  at_v4_t o, lse;
  bool want_lse, for_bwd;
  /* backward */
  at_v4_t go, oin, lsein, dq, dk, dv, db;
  bool want_dq, want_dk, want_dv, want_db;
  int64_t nrb; /* query row blocks per (b, kv head), rows of the group stacked */
  int64_t nkb; /* key blocks */
} at_ctx_t;

static bool at_qkv_dt(int dt) { return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16; }
static bool at_bias_dt(int dt) { return at_qkv_dt(dt) || dt == TPU_DTYPE_BOOL || dt == TPU_DTYPE_F64; }
static bool at_has(const tpu_k_call_t* call, int i) {
  return call->outputs && i < call->num_outputs && call->outputs[i].dtype != TPU_DTYPE_INVALID;
}

/* Checks the output (or input) `t` against sizes[0..nd) and dtype. */
static tpu_status_t at_expect(const tpu_k_call_t* call, const tpu_tensor_t* t, const char* what, int nd,
                              const int64_t* sizes, int dt) {
  if (t->dtype != dt)
    return TPU_KU_INVALID(call, "%s must be %s, got %s", what, tpu_dtype_name((tpu_dtype_t)dt),
                          tpu_dtype_name((tpu_dtype_t)t->dtype));
  bool ok = t->ndim == nd;
  for (int d = 0; ok && d < nd; ++d) ok = t->sizes[d] == sizes[d];
  if (!ok && nd == 4)
    return TPU_KU_INVALID(call, "%s must have shape [%lld, %lld, %lld, %lld]", what, (long long)sizes[0],
                          (long long)sizes[1], (long long)sizes[2], (long long)sizes[3]);
  if (!ok)
    return TPU_KU_INVALID(call, "%s must have shape [%lld, %lld, %lld]", what, (long long)sizes[0],
                          (long long)sizes[1], (long long)sizes[2]);
  return TPU_OK;
}

/* Parses and validates; fills ctx (views) when `ctx` is not NULL. */
static tpu_status_t at_parse(const tpu_k_call_t* call, bool bwd, at_ctx_t* ctx) {
  const int o = bwd ? 1 : 0; /* backward has grad_out first */
  const tpu_tensor_t* q = tpu_ku_tensor(call, o + 0);
  const tpu_tensor_t* k = tpu_ku_tensor(call, o + 1);
  const tpu_tensor_t* v = tpu_ku_tensor(call, o + 2);
  const tpu_tensor_t* bias = tpu_ku_tensor(call, o + 3);
  if (!q || !k || !v) return TPU_KU_INVALID(call, "expected query, key and value tensors");
  if (!at_qkv_dt(q->dtype)) return tpu_ku_unsupported_dtype(call, q->dtype);
  if (k->dtype != q->dtype || v->dtype != q->dtype)
    return TPU_KU_INVALID(call, "query, key and value must have the same dtype, got %s, %s and %s",
                          tpu_dtype_name((tpu_dtype_t)q->dtype), tpu_dtype_name((tpu_dtype_t)k->dtype),
                          tpu_dtype_name((tpu_dtype_t)v->dtype));
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
    return TPU_KU_INVALID(call, "query, key and value must be 4-D [batch, heads, seq, dim], got %d-D, %d-D and %d-D",
                          (int)q->ndim, (int)k->ndim, (int)v->ndim);
  const int64_t B = q->sizes[0], Hq = q->sizes[1], L = q->sizes[2], E = q->sizes[3];
  const int64_t Hkv = k->sizes[1], S = k->sizes[2], Ev = v->sizes[3];
  if (k->sizes[0] != B || v->sizes[0] != B) return TPU_KU_INVALID(call, "batch sizes of query, key and value differ");
  if (v->sizes[1] != Hkv || v->sizes[2] != S) return TPU_KU_INVALID(call, "key and value must have the same heads and length");
  if (k->sizes[3] != E) return TPU_KU_INVALID(call, "query and key head dims differ (%lld vs %lld)", (long long)E,
                                              (long long)k->sizes[3]);
  if (Hkv == 0 ? Hq != 0 : Hq % Hkv != 0)
    return TPU_KU_INVALID(call, "the number of query heads (%lld) must be a multiple of the key/value heads (%lld)",
                          (long long)Hq, (long long)Hkv);
  if (E > AT_DMAX || Ev > AT_DMAX)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: head dims above %d are not supported on tpu (got %lld, %lld)",
                     call->op, AT_DMAX, (long long)E, (long long)Ev);
  const int64_t full[4] = {B, Hq, L, S};
  at_v4_t bv;
  if (bias) {
    if (!at_bias_dt(bias->dtype)) return tpu_ku_unsupported_dtype(call, bias->dtype);
    if (!at_view(bias, full, &bv))
      return TPU_KU_INVALID(call, "attn_mask of %d dims cannot be broadcast to [%lld, %lld, %lld, %lld]", (int)bias->ndim,
                            (long long)B, (long long)Hq, (long long)L, (long long)S);
  }
  const int64_t osz[4] = {B, Hq, L, Ev}, lsz[3] = {B, Hq, L};
  const tpu_tensor_t *go = NULL, *oin = NULL, *lsein = NULL;
  if (bwd) {
    go = tpu_ku_tensor(call, 0);
    oin = tpu_ku_tensor(call, 5);
    lsein = tpu_ku_tensor(call, 6);
    if (!go || !oin || !lsein) return TPU_KU_INVALID(call, "expected grad_out, out and logsumexp tensors");
    TPU_RETURN_IF_ERROR(at_expect(call, go, "grad_out", 4, osz, q->dtype));
    TPU_RETURN_IF_ERROR(at_expect(call, oin, "out", 4, osz, q->dtype));
    TPU_RETURN_IF_ERROR(at_expect(call, lsein, "logsumexp", 3, lsz, TPU_DTYPE_F32));
  }
  if (call->outputs) {
    if (!bwd) {
      if (call->num_outputs < 1 || !at_has(call, 0)) return TPU_KU_INVALID(call, "expected an output");
      TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[0], "output", 4, osz, q->dtype));
      if (at_has(call, 1)) TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[1], "logsumexp", 3, lsz, TPU_DTYPE_F32));
    } else {
      if (at_has(call, 0)) TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[0], "grad_query", 4, q->sizes, q->dtype));
      if (at_has(call, 1)) TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[1], "grad_key", 4, k->sizes, k->dtype));
      if (at_has(call, 2)) TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[2], "grad_value", 4, v->sizes, v->dtype));
      if (at_has(call, 3)) TPU_RETURN_IF_ERROR(at_expect(call, &call->outputs[3], "grad_attn_bias", 4, full, TPU_DTYPE_F32));
    }
  }
  if (!ctx) return TPU_OK;
  memset(ctx, 0, sizeof(*ctx));
  ctx->ops = at_ops();
  ctx->B = B;
  ctx->Hq = Hq;
  ctx->Hkv = Hkv;
  ctx->G = Hkv ? Hq / Hkv : 1;
  ctx->L = L;
  ctx->S = S;
  ctx->E = E;
  ctx->Ev = Ev;
  const int ai = bwd ? 7 : 4; /* is_causal, scale */
  ctx->causal = tpu_ku_bool(call, ai, false);
  double sc = tpu_ku_double(call, ai + 1, E > 0 ? 1.0 / sqrt((double)E) : 1.0);
  ctx->scale = (float)sc;
  at_view(q, q->sizes, &ctx->q);
  at_view(k, k->sizes, &ctx->k);
  at_view(v, v->sizes, &ctx->v);
  if (bias) {
    ctx->has_bias = true;
    ctx->bias = bv;
  }
  ctx->nrb = (ctx->G * L + AT_BR - 1) / AT_BR;
  ctx->nkb = (S + AT_BC - 1) / AT_BC;
  if (!bwd) {
    ctx->for_bwd = tpu_ku_bool(call, 6, true);
    at_view(&call->outputs[0], osz, &ctx->o);
    if (at_has(call, 1)) {
      const tpu_tensor_t* l = &call->outputs[1];
      ctx->want_lse = true;
      ctx->lse.p = (char*)l->data;
      ctx->lse.s[0] = l->strides[0] * 4;
      ctx->lse.s[1] = l->strides[1] * 4;
      ctx->lse.s[2] = l->strides[2] * 4;
    }
  } else {
    at_view(go, osz, &ctx->go);
    at_view(oin, osz, &ctx->oin);
    ctx->lsein.p = (char*)lsein->data;
    ctx->lsein.s[0] = lsein->strides[0] * 4;
    ctx->lsein.s[1] = lsein->strides[1] * 4;
    ctx->lsein.s[2] = lsein->strides[2] * 4;
    if ((ctx->want_dq = at_has(call, 0))) at_view(&call->outputs[0], q->sizes, &ctx->dq);
    if ((ctx->want_dk = at_has(call, 1))) at_view(&call->outputs[1], k->sizes, &ctx->dk);
    if ((ctx->want_dv = at_has(call, 2))) at_view(&call->outputs[2], v->sizes, &ctx->dv);
    if ((ctx->want_db = at_has(call, 3) && bias != NULL)) at_view(&call->outputs[3], full, &ctx->db);
  }
  return TPU_OK;
}

static tpu_status_t at_fwd_check(const tpu_k_call_t* call) { return at_parse(call, false, NULL); }
static tpu_status_t at_bwd_check(const tpu_k_call_t* call) { return at_parse(call, true, NULL); }

/* ---- shared block pieces -------------------------------------------------------------- */

/* The rows of query block `rb` of (b, kvh): heads and positions. */
typedef struct {
  int64_t nr;
  int64_t h[AT_BR], i[AT_BR];
  int64_t imin, imax;
} at_rows_t;

static void at_rows(const at_ctx_t* c, int64_t kvh, int64_t rb, at_rows_t* r) {
  int64_t rho0 = rb * AT_BR, total = c->G * c->L;
  r->nr = total - rho0 < AT_BR ? total - rho0 : AT_BR;
  r->imin = INT64_MAX;
  r->imax = -1;
  for (int64_t x = 0; x < r->nr; ++x) {
    int64_t rho = rho0 + x;
    r->h[x] = kvh * c->G + rho / c->L;
    r->i[x] = rho % c->L;
    if (r->i[x] < r->imin) r->imin = r->i[x];
    if (r->i[x] > r->imax) r->imax = r->i[x];
  }
}

/* Rows [j0, j0+n) of a [.., .., S, D] kv view at (b, h) as a float matrix:
 * in place when float32 with unit column stride, else converted into buf
 * (ld = D). Returns the matrix; *ld its row stride in floats. */
static const float* at_kv_block(const at_ctx_t* c, const at_v4_t* v, int64_t b, int64_t h, int64_t j0, int64_t n,
                                int64_t D, float* buf, int64_t* ld) {
  const char* p = at_row(v, b, h, j0);
  if (v->dt == TPU_DTYPE_F32 && (v->s[3] == 4 || D <= 1) && v->s[2] % 4 == 0) {
    *ld = v->s[2] / 4;
    return (const float*)p;
  }
  for (int64_t j = 0; j < n; ++j) at_load(c->ops, buf + j * D, p + j * v->s[2], v->dt, v->s[3], D);
  *ld = D;
  return buf;
}

/* Transposed, scaled query (or any [B,H,L,D] view) rows of a block:
 * dst[e * AT_BR + x] = row x's element e * mul. */
static void at_pack_rows_t(const at_ctx_t* c, const at_v4_t* v, int64_t b, const at_rows_t* r, int64_t D, float mul,
                           float* dst) {
  float tmp[AT_DMAX];
  for (int64_t x = 0; x < r->nr; ++x) {
    at_load(c->ops, tmp, at_row(v, b, r->h[x], r->i[x]), v->dt, v->s[3], D);
    for (int64_t e = 0; e < D; ++e) dst[e * AT_BR + x] = tmp[e] * mul;
  }
}

/* Adds bias / causal -inf to a score block whose (row x of r, key j0+j)
 * is s[x * sx + j * sj]: transposed blocks (sx 1, sj AT_BR) or row-major
 * ones (sx ld, sj 1). */
static void at_mask(const at_ctx_t* c, float* s, int64_t sx, int64_t sj, int64_t b, const at_rows_t* r, int64_t j0,
                    int64_t nc) {
  if (c->has_bias) {
    const int64_t s3 = c->bias.s[3];
    for (int64_t x = 0; x < r->nr; ++x) {
      const char* bp = at_row(&c->bias, b, r->h[x], r->i[x]) + j0 * s3;
      for (int64_t j = 0; j < nc; ++j) s[x * sx + j * sj] += at_bias_val(bp + j * s3, c->bias.dt);
    }
  }
  if (c->causal && j0 + nc - 1 > r->imin) {
    for (int64_t x = 0; x < r->nr; ++x)
      for (int64_t j = r->i[x] + 1 - j0 < 0 ? 0 : r->i[x] + 1 - j0; j < nc; ++j) s[x * sx + j * sj] = -INFINITY;
  }
}

/* Keys a query block needs: [0, kend). */
static int64_t at_kend(const at_ctx_t* c, const at_rows_t* r) {
  if (!c->causal) return c->S;
  return r->imax + 1 < c->S ? r->imax + 1 : c->S;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* Output row (b, h, i) = acc / l, lse = m + log(l); a row that saw no key
 * (l == 0) gets 0 and -inf. */
static void at_store_out(const at_ctx_t* c, int64_t b, int64_t h, int64_t i, const float* acc, float m, float l) {
  const bool dead = l == 0.0f;
  at_store(at_row(&c->o, b, h, i), c->o.dt, c->o.s[3], acc, dead ? 0.0f : 1.0f / l, c->Ev);
  if (c->want_lse) *(float*)at_row(&c->lse, b, h, i) = dead ? -INFINITY : m + logf(l);
}

static void at_fwd_tasks(void* vctx, int64_t t0, int64_t t1) {
  const at_ctx_t* c = (const at_ctx_t*)vctx;
  const at_ops_t* ops = c->ops;
  const int64_t E = c->E, Ev = c->Ev;
  float qT[AT_DMAX * AT_BR];
  float sT[AT_BC * AT_BR];
  float acc[AT_BR * AT_DMAX];
  float kbuf[AT_BC * AT_DMAX];
  float vbuf[AT_BC * AT_DMAX];
  float m[AT_BR], l[AT_BR], mx[AT_BR], msub[AT_BR], alpha[AT_BR], csum[AT_BR];
  at_rows_t r;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t rb = t % c->nrb, kvh = (t / c->nrb) % c->Hkv, b = t / (c->nrb * c->Hkv);
    at_rows(c, kvh, rb, &r);
    const int64_t nr = r.nr;
    at_pack_rows_t(c, &c->q, b, &r, E, c->scale, qT);
    for (int64_t x = 0; x < nr; ++x) {
      m[x] = -INFINITY;
      l[x] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)(nr * Ev));
    const int64_t kend = at_kend(c, &r);
    for (int64_t j0 = 0; j0 < kend; j0 += AT_BC) {
      const int64_t nc = kend - j0 < AT_BC ? kend - j0 : AT_BC;
      int64_t ldk, ldv;
      const float* kb = at_kv_block(c, &c->k, b, kvh, j0, nc, E, kbuf, &ldk);
      ops->gemm(nc, nr, E, kb, ldk, 1, qT, AT_BR, sT, AT_BR, 0);
      at_mask(c, sT, 1, AT_BR, b, &r, j0, nc);
      for (int64_t x = 0; x < nr; ++x) mx[x] = -INFINITY;
      for (int64_t j = 0; j < nc; ++j) {
        const float* sr = sT + j * AT_BR;
        for (int64_t x = 0; x < nr; ++x) mx[x] = sr[x] > mx[x] ? sr[x] : mx[x];
      }
      bool rescale = false;
      for (int64_t x = 0; x < nr; ++x) {
        const float mn = mx[x] > m[x] ? mx[x] : m[x];
        alpha[x] = m[x] == -INFINITY ? 0.0f : expf(m[x] - mn);
        if (alpha[x] != 1.0f) rescale = true;
        msub[x] = mn == -INFINITY ? 0.0f : mn;
        m[x] = mn;
        csum[x] = 0.0f;
      }
      ops->exp_sub(nc, nr, sT, AT_BR, msub, 1, csum);
      for (int64_t x = 0; x < nr; ++x) l[x] = l[x] * alpha[x] + csum[x];
      if (rescale) {
        for (int64_t x = 0; x < nr; ++x) {
          if (alpha[x] == 1.0f) continue;
          float* ar = acc + x * Ev;
          for (int64_t e = 0; e < Ev; ++e) ar[e] *= alpha[x];
        }
      }
      const float* vb = at_kv_block(c, &c->v, b, kvh, j0, nc, Ev, vbuf, &ldv);
      ops->gemm(nr, Ev, nc, sT, 1, AT_BR, vb, ldv, acc, Ev, 1);
    }
    for (int64_t x = 0; x < nr; ++x) at_store_out(c, b, r.h[x], r.i[x], acc + x * Ev, m[x], l[x]);
  }
}

/* ---- forward, few query rows per kv head (decoding) ----------------------------------------
 * Decoding: at most AT_DR query rows per kv head (one token's group of heads, or
 * for a forward no backward reads, a few positions of it),
 * one task takes a kv head's rows against a range of keys with the scores row-major (keys
 * along the vector lanes of the dot products, the softmax and P.V); the
 * transposed 64-row blocks above would leave most lanes of their score
 * products empty. Long key ranges are split over tasks when there are
 * fewer kv heads than 2 per thread; each split keeps its running max, sum
 * and unnormalised output, merged afterwards. */
#define AT_DR 8
#define AT_SPLIT_MIN 256 /* keys per split, at least */

typedef struct {
  const at_ctx_t* c;
  int64_t nsplit, per; /* key ranges per (batch, kv head), keys per range */
  float* part;         /* nsplit > 1: per task and row, [max, sum, acc[Ev]] */
} at_dec_t;

static void at_fwd_dec_tasks(void* vctx, int64_t t0, int64_t t1) {
  const at_dec_t* d = (const at_dec_t*)vctx;
  const at_ctx_t* c = d->c;
  const at_ops_t* ops = c->ops;
  const int64_t E = c->E, Ev = c->Ev;
  float q[AT_DR * AT_DMAX];
  float s[AT_DR * AT_BC];
  float acc[AT_DR * AT_DMAX];
  float kbuf[AT_BC * AT_DMAX];
  float vbuf[AT_BC * AT_DMAX];
  float m[AT_DR], l[AT_DR], msub[AT_DR];
  at_rows_t r;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t split = t % d->nsplit, kvh = (t / d->nsplit) % c->Hkv, b = t / (d->nsplit * c->Hkv);
    at_rows(c, kvh, 0, &r);
    const int64_t nr = r.nr;
    for (int64_t x = 0; x < nr; ++x) {
      float* qx = q + x * E;
      at_load(ops, qx, at_row(&c->q, b, r.h[x], r.i[x]), c->q.dt, c->q.s[3], E);
      for (int64_t e = 0; e < E; ++e) qx[e] *= c->scale;
      m[x] = -INFINITY;
      l[x] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)(nr * Ev));
    const int64_t kend = at_kend(c, &r), jb = split * d->per;
    const int64_t je = jb + d->per < kend ? jb + d->per : kend;
    for (int64_t j0 = jb; j0 < je; j0 += AT_BC) {
      const int64_t nc = je - j0 < AT_BC ? je - j0 : AT_BC;
      int64_t ldk, ldv;
      const float* kb = at_kv_block(c, &c->k, b, kvh, j0, nc, E, kbuf, &ldk);
      ops->dots(nr, nc, E, q, E, kb, ldk, s, AT_BC);
      at_mask(c, s, AT_BC, 1, b, &r, j0, nc);
      for (int64_t x = 0; x < nr; ++x) {
        const float* sr = s + x * AT_BC;
        float mx = m[x];
        for (int64_t j = 0; j < nc; ++j) mx = sr[j] > mx ? sr[j] : mx;
        const float alpha = m[x] == -INFINITY ? 0.0f : expf(m[x] - mx);
        if (alpha != 1.0f) {
          l[x] *= alpha;
          for (int64_t e = 0; e < Ev; ++e) acc[x * Ev + e] *= alpha;
        }
        m[x] = mx;
        msub[x] = mx == -INFINITY ? 0.0f : mx;
      }
      ops->exp_sub(nr, nc, s, AT_BC, msub, 0, NULL);
      for (int64_t x = 0; x < nr; ++x) {
        float sum = 0.0f;
        for (int64_t j = 0; j < nc; ++j) sum += s[x * AT_BC + j];
        l[x] += sum;
      }
      const float* vb = at_kv_block(c, &c->v, b, kvh, j0, nc, Ev, vbuf, &ldv);
      ops->gemm(nr, Ev, nc, s, AT_BC, 1, vb, ldv, acc, Ev, 1);
    }
    if (d->nsplit == 1) {
      for (int64_t x = 0; x < nr; ++x) at_store_out(c, b, r.h[x], r.i[x], acc + x * Ev, m[x], l[x]);
      continue;
    }
    float* part = d->part + t * AT_DR * (Ev + 2);
    for (int64_t x = 0; x < nr; ++x) {
      part[x * (Ev + 2)] = m[x];
      part[x * (Ev + 2) + 1] = l[x];
      memcpy(part + x * (Ev + 2) + 2, acc + x * Ev, sizeof(float) * (size_t)Ev);
    }
  }
}

/* Merges the key ranges' partial results of (batch, kv head) `bh`. */
static void at_fwd_dec_merge(const at_dec_t* d, int64_t bh) {
  const at_ctx_t* c = d->c;
  const int64_t Ev = c->Ev, b = bh / c->Hkv;
  float acc[AT_DMAX];
  at_rows_t r;
  at_rows(c, bh % c->Hkv, 0, &r);
  for (int64_t x = 0; x < r.nr; ++x) {
    float mx = -INFINITY, l = 0.0f;
    for (int64_t sp = 0; sp < d->nsplit; ++sp) {
      const float ms = d->part[((bh * d->nsplit + sp) * AT_DR + x) * (Ev + 2)];
      mx = ms > mx ? ms : mx;
    }
    memset(acc, 0, sizeof(float) * (size_t)Ev);
    for (int64_t sp = 0; mx != -INFINITY && sp < d->nsplit; ++sp) {
      const float* part = d->part + ((bh * d->nsplit + sp) * AT_DR + x) * (Ev + 2);
      if (part[0] == -INFINITY) continue;
      const float w = expf(part[0] - mx);
      l += part[1] * w;
      for (int64_t e = 0; e < Ev; ++e) acc[e] += part[2 + e] * w;
    }
    at_store_out(c, b, r.h[x], r.i[x], acc, mx, l);
  }
}

/* 1 + the last key any query row may attend to under the mask (0: none).
 * A decode step over a static cache masks the cache's unwritten tail: the
 * keys past this are skipped (they would add exp(-inf) = 0). */
static int64_t at_mask_kmax(const at_ctx_t* c) {
  int64_t kmax = 0;
  const int64_t s3 = c->bias.s[3];
  /* a broadcast (stride-0) dimension of the mask is scanned once */
  const int64_t nb = c->bias.s[0] ? c->B : 1, nh = c->bias.s[1] ? c->Hq : 1, nl = c->bias.s[2] ? c->L : 1;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = nl - 1; i >= 0; --i) { /* later rows usually see more keys */
        const char* bp = at_row(&c->bias, b, h, i);
        for (int64_t j = c->S - 1; j >= kmax; --j)
          if (at_bias_val(bp + j * s3, c->bias.dt) != -INFINITY) {
            kmax = j + 1;
            break;
          }
        if (kmax == c->S) return kmax;
      }
  return kmax;
}

static tpu_status_t at_fwd_dec(const tpu_k_call_t* call, const at_ctx_t* c) {
  const int64_t heads = c->B * c->Hkv, threads = tpu_threadpool_size(call->pool);
  at_dec_t d = {c, 1, c->S, NULL};
  if (heads < 2 * threads && c->S >= 2 * AT_SPLIT_MIN) {
    int64_t want = (2 * threads + heads - 1) / heads, most = c->S / AT_SPLIT_MIN;
    d.nsplit = want < most ? want : most;
    d.per = (c->S + d.nsplit - 1) / d.nsplit;
    d.per = (d.per + AT_BC - 1) / AT_BC * AT_BC;
    d.nsplit = (c->S + d.per - 1) / d.per;
    d.part = malloc(sizeof(float) * (size_t)(heads * d.nsplit * AT_DR * (c->Ev + 2)));
    if (!d.part) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory", call->op);
  }
  /* a small problem runs on this thread: waking the pool costs more */
  const int64_t tasks = heads * d.nsplit;
  const double work = (double)heads * (double)c->S * (double)(c->G * c->L) * (double)(c->E + c->Ev);
  tpu_parallel_for(call->pool, tasks, work < 131072.0 ? tasks : 1, at_fwd_dec_tasks, &d);
  if (d.part) {
    for (int64_t bh = 0; bh < heads; ++bh) at_fwd_dec_merge(&d, bh);
    free(d.part);
  }
  return TPU_OK;
}

static tpu_status_t at_fwd_run(const tpu_k_call_t* call) {
  at_ctx_t c;
  TPU_RETURN_IF_ERROR(at_parse(call, false, &c));
  if (c.B == 0 || c.Hq == 0 || c.L == 0) return TPU_OK;
  if (c.has_bias) c.S = at_mask_kmax(&c); /* the forward reads no key past this one */
  /* One token with its group of query heads, or (inference only) a few rows per kv
   * head: Transformers' GQA decode folds the group into rows, [B, Hkv, G, E]. The
   * decode kernel takes those in 32 us per call in SmolLM2's decode step, against 50 us
   * on the blocks' kernel; a forward the backward will read keeps the blocks' kernel
   * for L > 1 (the OpInfo gradient checks against the CPU's float32 failed on the
   * decode kernel's lse rounding). */
  if (c.G * c.L <= AT_DR && (c.L == 1 || !c.for_bwd)) return at_fwd_dec(call, &c);
  tpu_parallel_for(call->pool, c.B * c.Hkv * c.nrb, 1, at_fwd_tasks, &c);
  return TPU_OK;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* D[x] = dot(grad_out row, out row); msub[x] = lse (+inf for dead rows, so
 * every probability is 0). */
static void at_rows_d_lse(const at_ctx_t* c, int64_t b, const int64_t* h, const int64_t* i, int64_t nr, float* D,
                          float* msub) {
  float g[AT_DMAX], o[AT_DMAX];
  for (int64_t x = 0; x < nr; ++x) {
    at_load(c->ops, g, at_row(&c->go, b, h[x], i[x]), c->go.dt, c->go.s[3], c->Ev);
    at_load(c->ops, o, at_row(&c->oin, b, h[x], i[x]), c->oin.dt, c->oin.s[3], c->Ev);
    float s = 0.0f;
    for (int64_t e = 0; e < c->Ev; ++e) s += g[e] * o[e];
    D[x] = s;
    float lse = *(const float*)at_row(&c->lsein, b, h[x], i[x]);
    msub[x] = lse == -INFINITY ? INFINITY : lse;
  }
}

/* Pass A: dq (and dbias), one task per query block. */
static void at_bwd_q_tasks(void* vctx, int64_t t0, int64_t t1) {
  const at_ctx_t* c = (const at_ctx_t*)vctx;
  const at_ops_t* ops = c->ops;
  const int64_t E = c->E, Ev = c->Ev;
  float qT[AT_DMAX * AT_BR];
  float doT[AT_DMAX * AT_BR];
  float sT[AT_BC * AT_BR];
  float dpT[AT_BC * AT_BR];
  float dq[AT_BR * AT_DMAX];
  float kbuf[AT_BC * AT_DMAX];
  float vbuf[AT_BC * AT_DMAX];
  float D[AT_BR], msub[AT_BR];
  at_rows_t r;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t rb = t % c->nrb, kvh = (t / c->nrb) % c->Hkv, b = t / (c->nrb * c->Hkv);
    at_rows(c, kvh, rb, &r);
    const int64_t nr = r.nr;
    at_pack_rows_t(c, &c->q, b, &r, E, c->scale, qT);
    at_pack_rows_t(c, &c->go, b, &r, Ev, 1.0f, doT);
    at_rows_d_lse(c, b, r.h, r.i, nr, D, msub);
    memset(dq, 0, sizeof(float) * (size_t)(nr * E));
    const int64_t kend = at_kend(c, &r);
    for (int64_t j0 = 0; j0 < kend; j0 += AT_BC) {
      const int64_t nc = kend - j0 < AT_BC ? kend - j0 : AT_BC;
      int64_t ldk, ldv;
      const float* kb = at_kv_block(c, &c->k, b, kvh, j0, nc, E, kbuf, &ldk);
      const float* vb = at_kv_block(c, &c->v, b, kvh, j0, nc, Ev, vbuf, &ldv);
      ops->gemm(nc, nr, E, kb, ldk, 1, qT, AT_BR, sT, AT_BR, 0);
      at_mask(c, sT, 1, AT_BR, b, &r, j0, nc);
      ops->exp_sub(nc, nr, sT, AT_BR, msub, 1, NULL);
      ops->gemm(nc, nr, Ev, vb, ldv, 1, doT, AT_BR, dpT, AT_BR, 0);
      for (int64_t j = 0; j < nc; ++j) {
        float* dr = dpT + j * AT_BR;
        const float* pr = sT + j * AT_BR;
        for (int64_t x = 0; x < nr; ++x) dr[x] = pr[x] * (dr[x] - D[x]);
      }
      if (c->want_db) {
        for (int64_t x = 0; x < nr; ++x) {
          char* p = at_row(&c->db, b, r.h[x], r.i[x]) + j0 * c->db.s[3];
          for (int64_t j = 0; j < nc; ++j) *(float*)(p + j * c->db.s[3]) = dpT[j * AT_BR + x];
        }
      }
      if (c->want_dq) ops->gemm(nr, E, nc, dpT, 1, AT_BR, kb, ldk, dq, E, 1);
    }
    for (int64_t x = 0; x < nr; ++x) {
      if (c->want_dq) at_store(at_row(&c->dq, b, r.h[x], r.i[x]), c->dq.dt, c->dq.s[3], dq + x * E, c->scale, E);
      if (c->want_db)
        for (int64_t j = kend; j < c->S; ++j) *(float*)(at_row(&c->db, b, r.h[x], r.i[x]) + j * c->db.s[3]) = 0.0f;
    }
  }
}

/* Keys j0..j0+nc of kv head kvh, transposed for the block products:
 * kT[e][j] = scale * k_j[e], vT[e][j] = v_j[e] (row stride AT_BC). */
static void at_load_kv_t(const at_ctx_t* c, int64_t b, int64_t kvh, int64_t j0, int64_t nc, float* kT, float* vT,
                         float* tmp) {
  for (int64_t j = 0; j < nc; ++j) {
    at_load(c->ops, tmp, at_row(&c->k, b, kvh, j0 + j), c->k.dt, c->k.s[3], c->E);
    for (int64_t e = 0; e < c->E; ++e) kT[e * AT_BC + j] = tmp[e] * c->scale;
    at_load(c->ops, tmp, at_row(&c->v, b, kvh, j0 + j), c->v.dt, c->v.s[3], c->Ev);
    for (int64_t e = 0; e < c->Ev; ++e) vT[e * AT_BC + j] = tmp[e];
  }
}

typedef struct at_bwd_blk_t {
  const float* qb; /* query rows, row stride ldq */
  const float* gb; /* output-gradient rows, row stride ldo */
  int64_t ldq, ldo;
} at_bwd_blk_t;

/* Backward, query rows i0..i0+nr of head h against keys j0..j0+nc (kT from
 * at_load_kv_t): loads the query and output-gradient blocks, D = rowsum(dO*O)
 * and the rows' log-sum-exp, and leaves the probabilities P in s. */
static void at_bwd_probs(const at_ctx_t* c, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                         const float* kT, float* qbuf, float* dobuf, float* s, float* D, float* msub,
                         at_bwd_blk_t* out) {
  int64_t hh[AT_BR], ii[AT_BR];
  for (int64_t x = 0; x < nr; ++x) {
    hh[x] = h;
    ii[x] = i0 + x;
  }
  out->qb = at_kv_block(c, &c->q, b, h, i0, nr, c->E, qbuf, &out->ldq);
  out->gb = at_kv_block(c, &c->go, b, h, i0, nr, c->Ev, dobuf, &out->ldo);
  at_rows_d_lse(c, b, hh, ii, nr, D, msub);
  c->ops->gemm(nr, nc, c->E, out->qb, out->ldq, 1, kT, AT_BC, s, AT_BC, 0);
  if (c->has_bias) {
    const int64_t s3 = c->bias.s[3];
    for (int64_t x = 0; x < nr; ++x) {
      const char* bp = at_row(&c->bias, b, h, i0 + x) + j0 * s3;
      float* sr = s + x * AT_BC;
      for (int64_t j = 0; j < nc; ++j) sr[j] += at_bias_val(bp + j * s3, c->bias.dt);
    }
  }
  if (c->causal && j0 + nc - 1 > i0) {
    for (int64_t x = 0; x < nr; ++x)
      for (int64_t j = i0 + x + 1 - j0 < 0 ? 0 : i0 + x + 1 - j0; j < nc; ++j) s[x * AT_BC + j] = -INFINITY;
  }
  c->ops->exp_sub(nr, nc, s, AT_BC, msub, 0, NULL);
}

/* dS = P * (dP - D), in place in dp. */
static void at_bwd_ds(int64_t nr, int64_t nc, const float* s, float* dp, const float* D) {
  for (int64_t x = 0; x < nr; ++x) {
    float* dr = dp + x * AT_BC;
    const float* pr = s + x * AT_BC;
    for (int64_t j = 0; j < nc; ++j) dr[j] = pr[j] * (dr[j] - D[x]);
  }
}

/* Pass B: dk, dv, one task per (b, kv head, key block). Scores here are
 * row-major S[x][j] = q_x . (scale k_j). */
static void at_bwd_kv_tasks(void* vctx, int64_t t0, int64_t t1) {
  const at_ctx_t* c = (const at_ctx_t*)vctx;
  const at_ops_t* ops = c->ops;
  const int64_t E = c->E, Ev = c->Ev;
  float kT[AT_DMAX * AT_BC];
  float vT[AT_DMAX * AT_BC];
  float qbuf[AT_BR * AT_DMAX];
  float dobuf[AT_BR * AT_DMAX];
  float s[AT_BR * AT_BC];
  float dp[AT_BR * AT_BC];
  float dk[AT_BC * AT_DMAX];
  float dv[AT_BC * AT_DMAX];
  float tmp[AT_DMAX];
  float D[AT_BR], msub[AT_BR];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t kb = t % c->nkb, kvh = (t / c->nkb) % c->Hkv, b = t / (c->nkb * c->Hkv);
    const int64_t j0 = kb * AT_BC, nc = c->S - j0 < AT_BC ? c->S - j0 : AT_BC;
    at_load_kv_t(c, b, kvh, j0, nc, kT, vT, tmp);
    memset(dk, 0, sizeof(float) * (size_t)(nc * E));
    memset(dv, 0, sizeof(float) * (size_t)(nc * Ev));
    for (int64_t g = 0; g < c->G; ++g) {
      const int64_t h = kvh * c->G + g;
      for (int64_t i0 = 0; i0 < c->L; i0 += AT_BR) {
        const int64_t nr = c->L - i0 < AT_BR ? c->L - i0 : AT_BR;
        if (c->causal && i0 + nr - 1 < j0) continue;
        at_bwd_blk_t q;
        at_bwd_probs(c, b, h, i0, nr, j0, nc, kT, qbuf, dobuf, s, D, msub, &q);
        const float *qb = q.qb, *gb = q.gb;
        const int64_t ldq = q.ldq, ldo = q.ldo;
        if (c->want_dv) ops->gemm(nc, Ev, nr, s, 1, AT_BC, gb, ldo, dv, Ev, 1);
        if (c->want_dk) {
          ops->gemm(nr, nc, Ev, gb, ldo, 1, vT, AT_BC, dp, AT_BC, 0);
          at_bwd_ds(nr, nc, s, dp, D);
          ops->gemm(nc, E, nr, dp, 1, AT_BC, qb, ldq, dk, E, 1);
        }
      }
    }
    for (int64_t j = 0; j < nc; ++j) {
      if (c->want_dk) at_store(at_row(&c->dk, b, kvh, j0 + j), c->dk.dt, c->dk.s[3], dk + j * E, c->scale, E);
      if (c->want_dv) at_store(at_row(&c->dv, b, kvh, j0 + j), c->dv.dt, c->dv.s[3], dv + j * Ev, 1.0f, Ev);
    }
  }
}

/* One pass for short key ranges (S <= AT_BC, head dims <= AT_FDMAX, no bias
 * gradient): one task per (b, kv head) holds the whole key block, so each
 * query block's probabilities and dS are computed once and feed dq, dk and
 * dv (five block products instead of the two passes' seven). */
#define AT_FDMAX 128

static bool at_bwd_fused_ok(const at_ctx_t* c, int nthreads) {
  return c->nkb == 1 && !c->want_db && c->E <= AT_FDMAX && c->Ev <= AT_FDMAX &&
         c->B * c->Hkv >= 2 * (int64_t)nthreads;
}

static void at_bwd_fused_tasks(void* vctx, int64_t t0, int64_t t1) {
  const at_ctx_t* c = (const at_ctx_t*)vctx;
  const at_ops_t* ops = c->ops;
  const int64_t E = c->E, Ev = c->Ev, nc = c->S;
  float kT[AT_FDMAX * AT_BC];
  float vT[AT_FDMAX * AT_BC];
  float kbuf[AT_BC * AT_FDMAX];
  float qbuf[AT_BR * AT_FDMAX];
  float dobuf[AT_BR * AT_FDMAX];
  float s[AT_BR * AT_BC];
  float dp[AT_BR * AT_BC];
  float dk[AT_BC * AT_FDMAX];
  float dv[AT_BC * AT_FDMAX];
  float dq[AT_BR * AT_FDMAX];
  float tmp[AT_FDMAX];
  float D[AT_BR], msub[AT_BR];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t kvh = t % c->Hkv, b = t / c->Hkv;
    at_load_kv_t(c, b, kvh, 0, nc, kT, vT, tmp);
    int64_t ldk;
    const float* kb = at_kv_block(c, &c->k, b, kvh, 0, nc, E, kbuf, &ldk);
    memset(dk, 0, sizeof(float) * (size_t)(nc * E));
    memset(dv, 0, sizeof(float) * (size_t)(nc * Ev));
    for (int64_t g = 0; g < c->G; ++g) {
      const int64_t h = kvh * c->G + g;
      for (int64_t i0 = 0; i0 < c->L; i0 += AT_BR) {
        const int64_t nr = c->L - i0 < AT_BR ? c->L - i0 : AT_BR;
        at_bwd_blk_t q;
        at_bwd_probs(c, b, h, i0, nr, 0, nc, kT, qbuf, dobuf, s, D, msub, &q);
        const float *qb = q.qb, *gb = q.gb;
        const int64_t ldq = q.ldq, ldo = q.ldo;
        if (c->want_dv) ops->gemm(nc, Ev, nr, s, 1, AT_BC, gb, ldo, dv, Ev, 1);
        if (!c->want_dk && !c->want_dq) continue;
        ops->gemm(nr, nc, Ev, gb, ldo, 1, vT, AT_BC, dp, AT_BC, 0);
        at_bwd_ds(nr, nc, s, dp, D);
        if (c->want_dk) ops->gemm(nc, E, nr, dp, 1, AT_BC, qb, ldq, dk, E, 1);
        if (c->want_dq) {
          ops->gemm(nr, E, nc, dp, AT_BC, 1, kb, ldk, dq, E, 0);
          for (int64_t x = 0; x < nr; ++x)
            at_store(at_row(&c->dq, b, h, i0 + x), c->dq.dt, c->dq.s[3], dq + x * E, c->scale, E);
        }
      }
    }
    for (int64_t j = 0; j < nc; ++j) {
      if (c->want_dk) at_store(at_row(&c->dk, b, kvh, j), c->dk.dt, c->dk.s[3], dk + j * E, c->scale, E);
      if (c->want_dv) at_store(at_row(&c->dv, b, kvh, j), c->dv.dt, c->dv.s[3], dv + j * Ev, 1.0f, Ev);
    }
  }
}

static tpu_status_t at_bwd_run(const tpu_k_call_t* call) {
  at_ctx_t c;
  TPU_RETURN_IF_ERROR(at_parse(call, true, &c));
  if (c.B == 0 || c.Hq == 0) return TPU_OK;
  if (c.L > 0 && c.S > 0 && at_bwd_fused_ok(&c, tpu_threadpool_size(call->pool))) {
    tpu_parallel_for(call->pool, c.B * c.Hkv, 1, at_bwd_fused_tasks, &c);
    return TPU_OK;
  }
  if ((c.want_dq || c.want_db) && c.L > 0) tpu_parallel_for(call->pool, c.B * c.Hkv * c.nrb, 1, at_bwd_q_tasks, &c);
  if ((c.want_dk || c.want_dv) && c.S > 0) tpu_parallel_for(call->pool, c.B * c.Hkv * c.nkb, 1, at_bwd_kv_tasks, &c);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_attention_entries[] = {
    {"tpu::sdpa_fwd", at_fwd_run, at_fwd_check, 0, NULL},
    {"tpu::sdpa_bwd", at_bwd_run, at_bwd_check, 0, NULL},
};
const size_t tpu_k_attention_count = sizeof(tpu_k_attention_entries) / sizeof(tpu_k_attention_entries[0]);
