/* kutil.c - helpers shared by every kernel file (see kutil.h). */
#include "kernels/kutil.h"

#include <math.h>
#include <stdatomic.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <stdlib.h>

#include <stdio.h>

/* ---- dtypes / tensors ---------------------------------------------------- */

size_t tpu_dtype_size(tpu_dtype_t dtype) {
  switch (dtype) {
    case TPU_DTYPE_F64:
    case TPU_DTYPE_I64: return 8;
    case TPU_DTYPE_F32:
    case TPU_DTYPE_I32: return 4;
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16:
    case TPU_DTYPE_I16: return 2;
    case TPU_DTYPE_I8:
    case TPU_DTYPE_U8:
    case TPU_DTYPE_BOOL: return 1;
    default: return 0;
  }
}

const char* tpu_dtype_name(tpu_dtype_t dtype) {
  switch (dtype) {
    case TPU_DTYPE_F32: return "float32";
    case TPU_DTYPE_F64: return "float64";
    case TPU_DTYPE_F16: return "float16";
    case TPU_DTYPE_BF16: return "bfloat16";
    case TPU_DTYPE_I64: return "int64";
    case TPU_DTYPE_I32: return "int32";
    case TPU_DTYPE_I16: return "int16";
    case TPU_DTYPE_I8: return "int8";
    case TPU_DTYPE_U8: return "uint8";
    case TPU_DTYPE_BOOL: return "bool";
    default: return "invalid";
  }
}

bool tpu_dtype_is_floating(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_F32 || dtype == TPU_DTYPE_F64 || dtype == TPU_DTYPE_F16 ||
         dtype == TPU_DTYPE_BF16;
}

int64_t tpu_tensor_numel(const tpu_tensor_t* t) {
  if (!t) return 0;
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim && d < TPU_MAX_DIMS; ++d) n *= t->sizes[d];
  return n;
}

static int64_t tensor_bytes(const tpu_tensor_t* t) {
  if (!t || t->dtype == TPU_DTYPE_INVALID) return 0;
  return tpu_tensor_numel(t) * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

int64_t tpu_k_call_bytes(const tpu_k_call_t* call) {
  if (!call) return 0;
  int64_t n = 0;
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpu_k_value_t* v = &call->args[i];
    if (v->kind == TPU_K_TENSOR) {
      n += tensor_bytes(v->v.tensor);
    } else if (v->kind == TPU_K_TENSORS) {
      for (int64_t j = 0; j < v->v.tensors.len; ++j) n += tensor_bytes(&v->v.tensors.data[j]);
    }
  }
  for (int32_t i = 0; call->outputs && i < call->num_outputs; ++i) n += tensor_bytes(&call->outputs[i]);
  return n;
}

int64_t tpu_tensor_span(const tpu_tensor_t* t) {
  if (!t) return 0;
  int64_t last = 0;
  for (int32_t d = 0; d < t->ndim && d < TPU_MAX_DIMS; ++d) {
    if (t->sizes[d] == 0) return 0;
    last += (t->sizes[d] - 1) * t->strides[d];
  }
  return last + 1;
}

bool tpu_tensor_is_contiguous(const tpu_tensor_t* t) {
  if (!t) return false;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    int64_t s = t->sizes[d];
    if (s == 0) return true;
    if (s != 1 && t->strides[d] != expected) return false;
    expected *= s;
  }
  return true;
}

/* ---- half conversions ----------------------------------------------------- */

float tpu_ku_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (mant << 13); /* inf / nan (payload kept) */
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {
    /* subnormal: value = mant * 2^-24, exact in float */
    float f = (float)mant * 5.9604644775390625e-8f;
    memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t tpu_ku_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint16_t o;
  if (a >= 0x47800000u) { /* >= 65536 before rounding, inf or nan */
    o = a > 0x7f800000u ? (uint16_t)(0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (a < 0x38800000u) { /* below the smallest normal half (2^-14) */
    /* Adding 0.5 aligns the half subnormal grid with float's last mantissa
     * bits; the FPU rounds to nearest even. */
    float af, magic = 0.5f;
    memcpy(&af, &a, 4);
    af += magic;
    uint32_t r;
    memcpy(&r, &af, 4);
    o = (uint16_t)(r - 0x3f000000u);
  } else {
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu; /* rebias exponent (-112 << 23) and add rounding bias */
    a += mant_odd;
    o = (uint16_t)(a >> 13); /* overflow to 0x7c00 (inf) falls out naturally */
  }
  return (uint16_t)(o | sign);
}

/* ---- stores --------------------------------------------------------------- */

static inline int64_t ku_f64_to_i64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

void tpu_ku_store_i64(void* p, int dtype, int64_t v) {
  switch (dtype) {
    case TPU_DTYPE_F32: *(float*)p = (float)v; break;
    case TPU_DTYPE_F64: *(double*)p = (double)v; break;
    case TPU_DTYPE_F16: *(uint16_t*)p = tpu_ku_f32_to_f16((float)v); break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16((float)v); break;
    case TPU_DTYPE_I64: *(int64_t*)p = v; break;
    case TPU_DTYPE_I32: *(int32_t*)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case TPU_DTYPE_I16: *(int16_t*)p = (int16_t)(uint16_t)(uint64_t)v; break;
    case TPU_DTYPE_I8: *(int8_t*)p = (int8_t)(uint8_t)(uint64_t)v; break;
    case TPU_DTYPE_U8: *(uint8_t*)p = (uint8_t)(uint64_t)v; break;
    case TPU_DTYPE_BOOL: *(uint8_t*)p = v != 0; break;
    default: break;
  }
}

void tpu_ku_store_f64(void* p, int dtype, double v) {
  switch (dtype) {
    case TPU_DTYPE_F32: *(float*)p = (float)v; break;
    case TPU_DTYPE_F64: *(double*)p = v; break;
    case TPU_DTYPE_F16: *(uint16_t*)p = tpu_ku_f32_to_f16((float)v); break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16((float)v); break;
    case TPU_DTYPE_BOOL: *(uint8_t*)p = v != 0; break;
    default: tpu_ku_store_i64(p, dtype, ku_f64_to_i64(v)); break;
  }
}

/* ---- arguments ------------------------------------------------------------ */

double tpu_ku_double(const tpu_k_call_t* c, int i, double dflt) {
  if (i < 0 || i >= c->num_args) return dflt;
  const tpu_k_value_t* v = &c->args[i];
  switch (v->kind) {
    case TPU_K_INT: return (double)v->v.i;
    case TPU_K_DOUBLE: return v->v.d;
    case TPU_K_BOOL: return v->v.b ? 1.0 : 0.0;
    default: return dflt;
  }
}

int64_t tpu_ku_int(const tpu_k_call_t* c, int i, int64_t dflt) {
  if (i < 0 || i >= c->num_args) return dflt;
  const tpu_k_value_t* v = &c->args[i];
  switch (v->kind) {
    case TPU_K_INT: return v->v.i;
    case TPU_K_DOUBLE: return ku_f64_to_i64(v->v.d);
    case TPU_K_BOOL: return v->v.b ? 1 : 0;
    default: return dflt;
  }
}

bool tpu_ku_bool(const tpu_k_call_t* c, int i, bool dflt) {
  if (i < 0 || i >= c->num_args) return dflt;
  const tpu_k_value_t* v = &c->args[i];
  switch (v->kind) {
    case TPU_K_BOOL: return v->v.b;
    case TPU_K_INT: return v->v.i != 0;
    case TPU_K_DOUBLE: return v->v.d != 0.0;
    default: return dflt;
  }
}

const char* tpu_ku_string(const tpu_k_call_t* c, int i, const char* dflt) {
  if (i < 0 || i >= c->num_args) return dflt;
  const tpu_k_value_t* v = &c->args[i];
  if (v->kind == TPU_K_STRING && v->v.s) return v->v.s;
  return dflt;
}

tpu_status_t tpu_ku_wrap_dim(const tpu_k_call_t* c, int64_t dim, int32_t ndim,
                             int32_t* out_dim) {
  int64_t n = ndim <= 0 ? 1 : ndim;
  if (dim < -n || dim >= n) {
    return tpu_status_annotate(
        TPU_ERROR(TPU_STATUS_OUT_OF_RANGE,
                  "Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                  (long long)-n, (long long)(n - 1), (long long)dim),
        "%s", c && c->op ? c->op : "kernel");
  }
  if (dim < 0) dim += n;
  *out_dim = (int32_t)dim;
  return TPU_OK;
}

tpu_status_t tpu_ku_batch_strides(const tpu_k_call_t* c, const tpu_tensor_t* t, int core,
                                  const int64_t* bsizes, int nb, int64_t* out) {
  int tb = t->ndim - core;
  if (tb < 0) return TPU_KU_INVALID(c, "an input has %d dims, expected at least %d", (int)t->ndim, core);
  if (tb > nb) return TPU_KU_INVALID(c, "batch dims of an input exceed the output's");
  int64_t es = (int64_t)tpu_dtype_size(t->dtype);
  for (int d = 0; d < nb; ++d) {
    int td = d - (nb - tb);
    if (td < 0 || t->sizes[td] == 1) {
      out[d] = 0;
    } else if (t->sizes[td] == bsizes[d]) {
      out[d] = t->strides[td] * es;
    } else {
      return TPU_KU_INVALID(c, "batch dims do not broadcast (%lld vs %lld)", (long long)t->sizes[td],
                            (long long)bsizes[d]);
    }
  }
  return TPU_OK;
}

/* ---- errors --------------------------------------------------------------- */

tpu_status_t tpu_ku_check_scalar_fits(const tpu_k_call_t* c, int i, int dtype) {
  if (i >= c->num_args) return TPU_OK;
  return tpu_ku_check_value_fits(c, &c->args[i], dtype);
}

tpu_status_t tpu_ku_check_value_fits(const tpu_k_call_t* c, const tpu_k_value_t* v, int dtype) {
  if (dtype == TPU_DTYPE_BOOL || dtype == TPU_DTYPE_F64) return TPU_OK;
  bool over = false;
  if (tpu_dtype_is_floating((tpu_dtype_t)dtype)) {
    const double max = dtype == TPU_DTYPE_F32 ? 3.4028234663852886e38
                       : dtype == TPU_DTYPE_F16 ? 65504.0
                                                : 3.3895313892515355e38;
    const double d = v->kind == TPU_K_DOUBLE ? v->v.d : v->kind == TPU_K_INT ? (double)v->v.i : 0.0;
    over = !isinf(d) && (d < -max || d > max);
  } else {
    int64_t lo, hi;
    switch (dtype) {
      case TPU_DTYPE_I8: lo = INT8_MIN; hi = INT8_MAX; break;
      case TPU_DTYPE_I16: lo = INT16_MIN; hi = INT16_MAX; break;
      case TPU_DTYPE_I32: lo = INT32_MIN; hi = INT32_MAX; break;
      case TPU_DTYPE_U8: lo = 0; hi = UINT8_MAX; break;
      default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    if (v->kind == TPU_K_DOUBLE) {
      const double d = v->v.d;
      over = !(d >= (double)lo && d <= (double)hi);
      if (dtype == TPU_DTYPE_I64) over = !(d >= -9.2233720368547758e18 && d < 9.2233720368547758e18);
    } else if (v->kind == TPU_K_INT) {
      const int64_t x = v->v.i;
      over = x > hi || (dtype == TPU_DTYPE_U8 ? x < -(int64_t)UINT8_MAX : x < lo);
    }
  }
  if (!over) return TPU_OK;
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: value cannot be converted to type %s without overflow",
                   c->op ? c->op : "kernel", tpu_dtype_name((tpu_dtype_t)dtype));
}

tpu_status_t tpu_ku_unsupported_dtype(const tpu_k_call_t* c, int dtype) {
  return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: dtype %s is not supported on tpu",
                   c && c->op ? c->op : "kernel", tpu_dtype_name((tpu_dtype_t)dtype));
}

/* ---- strided iteration ---------------------------------------------------- */

static void ku_format_shape(char* buf, size_t cap, const int64_t* sizes, int32_t ndim) {
  size_t len = 0;
  int w = snprintf(buf, cap, "[");
  if (w > 0) len = (size_t)w;
  for (int32_t d = 0; d < ndim && len < cap; ++d) {
    w = snprintf(buf + len, cap - len, d ? ", %lld" : "%lld", (long long)sizes[d]);
    if (w > 0) len += (size_t)w;
  }
  if (len < cap) snprintf(buf + len, cap - len, "]");
}

tpu_status_t tpu_ku_iter_init(tpu_ku_iter_t* it, int n, const tpu_tensor_t* const* ops,
                              const char* op_name) {
  const char* name = op_name ? op_name : "kernel";
  memset(it, 0, sizeof(*it));
  if (n < 1 || n > TPU_KU_MAX_OPERANDS)
    return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: iterator over %d operands (max %d)", name, n,
                     TPU_KU_MAX_OPERANDS);
  for (int k = 0; k < n; ++k) {
    if (!ops[k])
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: operand %d is missing", name, k);
    if (ops[k]->ndim < 0 || ops[k]->ndim > TPU_MAX_DIMS)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: operand %d has %d dims (max %d)", name,
                       k, (int)ops[k]->ndim, TPU_MAX_DIMS);
    if (tpu_dtype_size((tpu_dtype_t)ops[k]->dtype) == 0)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: operand %d has an invalid dtype (%d)",
                       name, k, (int)ops[k]->dtype);
  }
  const tpu_tensor_t* o0 = ops[0];
  const int32_t nd = o0->ndim;
  it->n = n;

  /* Per logical dim (outermost first): byte strides of every operand. */
  int64_t lsizes[TPU_MAX_DIMS];
  int64_t lstr[TPU_KU_MAX_OPERANDS][TPU_MAX_DIMS];
  int64_t numel = 1;
  for (int32_t d = 0; d < nd; ++d) {
    lsizes[d] = o0->sizes[d];
    numel *= o0->sizes[d];
  }
  for (int k = 0; k < n; ++k) {
    const tpu_tensor_t* t = ops[k];
    const int64_t esz = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
    const int32_t off = nd - t->ndim;
    bool ok = true;
    for (int32_t j = 0; j < -off; ++j)
      if (t->sizes[j] != 1) ok = false;
    for (int32_t d = 0; d < nd && ok; ++d) {
      int32_t j = d - off;
      if (j < 0) {
        lstr[k][d] = 0;
      } else if (t->sizes[j] == lsizes[d]) {
        lstr[k][d] = lsizes[d] == 1 ? 0 : t->strides[j] * esz;
      } else if (t->sizes[j] == 1) {
        lstr[k][d] = 0;
      } else {
        ok = false;
      }
    }
    if (!ok) {
      char a[200], b[200];
      ku_format_shape(a, sizeof(a), t->sizes, t->ndim);
      ku_format_shape(b, sizeof(b), o0->sizes, nd);
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                       "%s: operand %d of shape %s cannot be broadcast to shape %s", name, k, a,
                       b);
    }
    it->base[k] = (char*)t->data;
  }
  it->numel = numel;
  if (numel == 0) {
    it->ndim = 1;
    it->sizes[0] = 0;
    return TPU_OK;
  }

  /* Innermost first, size-1 dims dropped. */
  int32_t m = 0;
  for (int32_t d = nd - 1; d >= 0; --d) {
    if (lsizes[d] == 1) continue;
    it->sizes[m] = lsizes[d];
    for (int k = 0; k < n; ++k) it->strides[k][m] = lstr[k][d];
    ++m;
  }

  /* If operand 0 is a plain output (no broadcast dims), walk it in memory
   * order: a stable insertion sort on |stride| (a no-op when it is
   * contiguous). Outputs with zero strides (reduction-style use) keep the
   * logical order. */
  bool reorder = m > 1;
  for (int32_t d = 0; d < m && reorder; ++d)
    if (it->strides[0][d] == 0) reorder = false;
  if (reorder) {
    for (int32_t i = 1; i < m; ++i) {
      for (int32_t j = i; j > 0; --j) {
        int64_t sa = it->strides[0][j - 1], sb = it->strides[0][j];
        if (sa < 0) sa = -sa;
        if (sb < 0) sb = -sb;
        if (sa <= sb) break;
        int64_t ts = it->sizes[j];
        it->sizes[j] = it->sizes[j - 1];
        it->sizes[j - 1] = ts;
        for (int k = 0; k < n; ++k) {
          int64_t t = it->strides[k][j];
          it->strides[k][j] = it->strides[k][j - 1];
          it->strides[k][j - 1] = t;
        }
      }
    }
  }

  /* Coalesce: dim d merges into the current inner dim when every operand
   * steps over it exactly as if the two were one. */
  if (m == 0) {
    it->ndim = 1;
    it->sizes[0] = 1;
    for (int k = 0; k < n; ++k) it->strides[k][0] = 0;
    return TPU_OK;
  }
  int32_t cur = 0;
  for (int32_t d = 1; d < m; ++d) {
    bool can = true;
    for (int k = 0; k < n && can; ++k)
      if (it->strides[k][d] != it->strides[k][cur] * it->sizes[cur]) can = false;
    if (can) {
      it->sizes[cur] *= it->sizes[d];
    } else {
      ++cur;
      it->sizes[cur] = it->sizes[d];
      for (int k = 0; k < n; ++k) it->strides[k][cur] = it->strides[k][d];
    }
  }
  it->ndim = cur + 1;
  for (int32_t d = it->ndim; d < TPU_MAX_DIMS; ++d) {
    it->sizes[d] = 0;
    for (int k = 0; k < n; ++k) it->strides[k][d] = 0;
  }
  return TPU_OK;
}

/* Kept scalar: vectorised, the per-run pointer sums reload the offsets the
 * carry loop just stored as 8-byte words with 16-byte loads, a failed store
 * forward on every run (most of the time of short-run copies). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
void tpu_ku_iter_run(const tpu_ku_iter_t* it, int64_t begin, int64_t end,
                     tpu_ku_inner_fn_t fn, void* ctx) {
  if (begin < 0) begin = 0;
  if (end > it->numel) end = it->numel;
  if (begin >= end) return;
  const int n = it->n;
  const int32_t nd = it->ndim;
  int64_t idx[TPU_MAX_DIMS];
  int64_t off[TPU_KU_MAX_OPERANDS];
  int64_t inner[TPU_KU_MAX_OPERANDS];
  char* ptrs[TPU_KU_MAX_OPERANDS];
  for (int k = 0; k < n; ++k) {
    off[k] = 0;
    inner[k] = it->strides[k][0];
  }
  int64_t rem = begin;
  for (int32_t d = 0; d < nd; ++d) {
    idx[d] = rem % it->sizes[d];
    rem /= it->sizes[d];
    for (int k = 0; k < n; ++k) off[k] += idx[d] * it->strides[k][d];
  }
  int64_t pos = begin;
  for (;;) {
    int64_t cnt = it->sizes[0] - idx[0];
    if (cnt > end - pos) cnt = end - pos;
    for (int k = 0; k < n; ++k) ptrs[k] = it->base[k] + off[k];
    fn(ctx, ptrs, inner, cnt);
    pos += cnt;
    if (pos >= end) break;
    /* The run finished dim 0 (otherwise pos == end): carry outwards. */
    for (int k = 0; k < n; ++k) off[k] -= idx[0] * it->strides[k][0];
    idx[0] = 0;
    for (int32_t d = 1; d < nd; ++d) {
      idx[d]++;
      for (int k = 0; k < n; ++k) off[k] += it->strides[k][d];
      if (idx[d] < it->sizes[d]) break;
      for (int k = 0; k < n; ++k) off[k] -= idx[d] * it->strides[k][d];
      idx[d] = 0;
    }
  }
}

typedef struct {
  const tpu_ku_iter_t* it;
  tpu_ku_inner_fn_t fn;
  void* ctx;
} ku_par_ctx_t;

static void ku_par_body(void* p, int64_t begin, int64_t end) {
  const ku_par_ctx_t* c = (const ku_par_ctx_t*)p;
  tpu_ku_iter_run(c->it, begin, end, c->fn, c->ctx);
}

void tpu_ku_iter_parallel(const tpu_ku_iter_t* it, tpu_threadpool_t* pool, int64_t grain,
                          tpu_ku_inner_fn_t fn, void* ctx) {
  if (it->numel <= 0) return;
  if (grain < 1) grain = 1;
  if (!pool || it->numel <= grain || tpu_threadpool_size(pool) <= 1) {
    tpu_ku_iter_run(it, 0, it->numel, fn, ctx);
    return;
  }
  ku_par_ctx_t c = {it, fn, ctx};
  tpu_parallel_for(pool, it->numel, grain, ku_par_body, &c);
}

static const char* const kIsaValues[] = {"generic", "avx2"};
static const char* const kConvPathValues[] = {"direct", "gemm", "blocked"};
static const struct {
  const char* name;
  const char* const* values;
  int32_t n;
} kEnv[] = {
    [TPU_KU_ENV_KERNEL_ISA] = {"TORCH_TPU_KERNEL_ISA", kIsaValues, 2},
    [TPU_KU_ENV_CONV_PATH] = {"TORCH_TPU_CONV_PATH", kConvPathValues, 3},
};

int32_t tpu_ku_env(tpu_ku_env_t var) {
  int32_t index = -1;
  tpu_status_t st = tpu_env_choice(kEnv[var].name, kEnv[var].values, kEnv[var].n, &index);
  if (st) {
    tpu_status_free(st);
    return -1;
  }
  return index;
}

tpu_status_t tpu_k_check_environment(void) {
  for (size_t i = 0; i < sizeof(kEnv) / sizeof(kEnv[0]); i++) {
    int32_t index;
    TPU_RETURN_IF_ERROR(tpu_env_choice(kEnv[i].name, kEnv[i].values, kEnv[i].n, &index));
  }
  return TPU_OK;
}

bool tpu_ku_use_avx2(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (tpu_ku_env(TPU_KU_ENV_KERNEL_ISA) == 0) return false; /* "generic" */
  __builtin_cpu_init();
#if defined(__clang__) /* older clang cannot query f16c; every AVX2+FMA CPU has it */
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
#else
  return false;
#endif
}

bool tpu_ku_use_avx512bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__) && defined(TPU_HAVE_AVX512BF16)
  if (tpu_ku_env(TPU_KU_ENV_KERNEL_ISA) >= 0) return false; /* "generic" or "avx2" */
  if (!tpu_ku_use_avx2()) return false;
  /* avx512f/bw: the CPU has them and the OS saves zmm state (libgcc checks
   * XCR0). AVX512_BF16 is CPUID leaf 7 subleaf 1, EAX bit 5. */
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl"))
    return false;
  /* CPUID is read once: under a hypervisor each execution traps to it (7 us
   * measured on the KVM guest this was written on), and this is asked on
   * every bf16 matrix product. 0: not read yet, 1: absent, 2: present. */
  static _Atomic int bf16_bit = 0;
  int known = atomic_load_explicit(&bf16_bit, memory_order_relaxed);
  if (known == 0) {
    unsigned eax, ebx, ecx, edx;
    known = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && ((eax >> 5) & 1u) ? 2 : 1;
    atomic_store_explicit(&bf16_bit, known, memory_order_relaxed);
  }
  return known == 2;
#else
  return false;
#endif
}
