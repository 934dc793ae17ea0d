/* reduce.c - kernel family "reduce" (see tpu/kernels.h for the ABI):
 * sum/mean/prod/amax/amin/max/min/argmax/argmin/any/all/var/std/var_mean/
 * linalg_vector_norm/logsumexp, median/nanmedian/kthvalue/mode, cumsum/cumprod/cummax/cummin/logcumsumexp,
 * softmax/log_softmax and their backward, layer norm (+ backward), fused RMS norm.
 *
 * A "plan" splits the input's dims into outer (kept) and reduced dims and
 * carries byte strides of several operands over both, coalesced. Reductions
 * walk the reduced space in runs of its innermost dim. f32/f16/bf16 sums add
 * float chunks of <= 256 elements into a double; other float statistics use
 * double; integers use int64 with wrap-around. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define RD_MAXOPS 8
#define RD_CHUNK 256
#define RD_LANES 256
#define RD_MAXPARTS 64

#if defined(__x86_64__)
#include <stdlib.h>
/* arch/x86_64/gemm_avx2.c: dst[i] = exp(src[i] - sub) (dst may be src, or
 * NULL: not stored), returns the sum */
float tpu_k_avx2_exp_sub_sum(const float* src, float* dst, int64_t n, float sub);
/* max (mx) or min of x[0..n), n >= 1; *nan = 1 when x holds a NaN */
float tpu_k_avx2_extreme(const float* x, int64_t n, int mx, int* nan);
#endif

static bool rd_use_avx2(void) {
#if defined(__x86_64__)
  return tpu_ku_use_avx2();
#else
  return false;
#endif
}

/* GCC only if-converts (and so vectorises) the float selects below without
 * trapping math. */
#if defined(__GNUC__) && !defined(__clang__)
#define RD_VECTORIZE __attribute__((optimize("no-trapping-math")))
#else
#define RD_VECTORIZE
#endif

static int64_t rd_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- plans ------------------------------------------------------------------ */

typedef enum {
  RD_MAP_RED = 0,   /* output of the reduction (keepdim or not) */
  RD_MAP_SAME = 1,  /* same rank as the input; size-1 dims broadcast */
  RD_MAP_RIGHT = 2, /* right-aligned broadcast (weights of a norm) */
} rd_map_t;

typedef struct {
  int32_t nd;                             /* innermost is nd-1 */
  int64_t sz[TPU_MAX_DIMS];
  int64_t st[RD_MAXOPS][TPU_MAX_DIMS];    /* bytes */
  int64_t numel;
} rd_space_t;

typedef struct {
  int32_t nops;
  char* base[RD_MAXOPS];
  rd_space_t outer, red;
} rd_plan_t;

static void rd_coalesce(rd_space_t* s, int nops) {
  if (s->nd <= 1) return;
  int32_t cur = 0;
  for (int32_t d = 1; d < s->nd; ++d) {
    bool can = true;
    for (int k = 0; k < nops && can; ++k)
      if (s->st[k][cur] != s->st[k][d] * s->sz[d]) can = false;
    if (can) {
      s->sz[cur] *= s->sz[d];
      for (int k = 0; k < nops; ++k) s->st[k][cur] = s->st[k][d];
    } else {
      ++cur;
      s->sz[cur] = s->sz[d];
      for (int k = 0; k < nops; ++k) s->st[k][cur] = s->st[k][d];
    }
  }
  s->nd = cur + 1;
}

/* ops[0] is the input (its shape defines the dims); `mask` marks reduced
 * dims. sort_red: order reduced dims by the input's |stride| (not for arg
 * reductions, which need logical order). */
static void rd_plan_init(rd_plan_t* pl, const tpu_tensor_t* in, uint32_t mask, int nops,
                         const tpu_tensor_t* const* ops, const rd_map_t* maps, bool sort_red) {
  memset(pl, 0, sizeof(*pl));
  int32_t nd = in->ndim;
  int64_t st[RD_MAXOPS][TPU_MAX_DIMS];
  pl->nops = nops;
  for (int k = 0; k < nops; ++k) {
    const tpu_tensor_t* t = ops[k];
    int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
    pl->base[k] = (char*)t->data;
    for (int32_t d = 0; d < nd; ++d) st[k][d] = 0;
    if (k == 0 || maps[k] == RD_MAP_SAME) {
      if (t->ndim == nd)
        for (int32_t d = 0; d < nd; ++d) st[k][d] = t->sizes[d] == 1 ? 0 : t->strides[d] * es;
    } else if (maps[k] == RD_MAP_RIGHT) {
      int32_t off = nd - t->ndim;
      for (int32_t j = 0; j < t->ndim; ++j)
        if (off + j >= 0) st[k][off + j] = t->sizes[j] == 1 ? 0 : t->strides[j] * es;
    } else if (t->ndim == nd) {
      for (int32_t d = 0; d < nd; ++d)
        st[k][d] = ((mask >> d) & 1u) || t->sizes[d] == 1 ? 0 : t->strides[d] * es;
    } else {
      int32_t j = 0;
      for (int32_t d = 0; d < nd; ++d) {
        if ((mask >> d) & 1u) continue;
        if (j < t->ndim) st[k][d] = t->sizes[j] == 1 ? 0 : t->strides[j] * es;
        ++j;
      }
    }
  }
  pl->outer.numel = pl->red.numel = 1;
  int32_t rdims[TPU_MAX_DIMS], nr = 0;
  for (int32_t d = 0; d < nd; ++d) {
    bool red = (mask >> d) & 1u;
    if (red)
      pl->red.numel *= in->sizes[d];
    else
      pl->outer.numel *= in->sizes[d];
    if (in->sizes[d] == 1) continue;
    if (red) {
      rdims[nr++] = d;
    } else {
      rd_space_t* s = &pl->outer;
      s->sz[s->nd] = in->sizes[d];
      for (int k = 0; k < nops; ++k) s->st[k][s->nd] = st[k][d];
      s->nd++;
    }
  }
  if (sort_red) { /* stable: largest |stride| first */
    for (int32_t i = 1; i < nr; ++i) {
      for (int32_t j = i; j > 0; --j) {
        int64_t a = st[0][rdims[j - 1]], b = st[0][rdims[j]];
        if (a < 0) a = -a;
        if (b < 0) b = -b;
        if (a >= b) break;
        int32_t t = rdims[j];
        rdims[j] = rdims[j - 1];
        rdims[j - 1] = t;
      }
    }
  }
  for (int32_t i = 0; i < nr; ++i) {
    rd_space_t* s = &pl->red;
    s->sz[s->nd] = in->sizes[rdims[i]];
    for (int k = 0; k < nops; ++k) s->st[k][s->nd] = st[k][rdims[i]];
    s->nd++;
  }
  rd_coalesce(&pl->outer, nops);
  rd_coalesce(&pl->red, nops);
}

/* Index walkers stay scalar: vectorised, their pointer sums reload offsets
 * just stored as 8-byte words with 16-byte loads (a failed store forward per
 * row or run, as in tpu_ku_iter_run). */
#if defined(__GNUC__) && !defined(__clang__)
#define RD_SCALAR __attribute__((optimize("no-tree-vectorize")))
#else
#define RD_SCALAR
#endif

/* Byte offsets of flat position `flat` of a space; fills idx. */
RD_SCALAR static void rd_unravel(const rd_space_t* s, int nops, int64_t flat, int64_t* idx, int64_t* off) {
  for (int k = 0; k < nops; ++k) off[k] = 0;
  for (int32_t d = s->nd - 1; d >= 0; --d) {
    idx[d] = flat % s->sz[d];
    flat /= s->sz[d];
    for (int k = 0; k < nops; ++k) off[k] += idx[d] * s->st[k][d];
  }
}

RD_SCALAR static void rd_step(const rd_space_t* s, int nops, int64_t* idx, int64_t* off) {
  for (int32_t d = s->nd - 1; d >= 0; --d) {
    idx[d]++;
    for (int k = 0; k < nops; ++k) off[k] += s->st[k][d];
    if (idx[d] < s->sz[d]) return;
    for (int k = 0; k < nops; ++k) off[k] -= idx[d] * s->st[k][d];
    idx[d] = 0;
  }
}

/* fn(ctx, ptrs, byte strides, count, flat index of the first element) */
typedef void (*rd_run_fn)(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0);

/* Walks flat range [e0, e1) of the reduced space, relative to `base`. */
RD_SCALAR static void rd_runs(const rd_plan_t* pl, char* const* base, int64_t e0, int64_t e1, rd_run_fn fn,
                              void* ctx) {
  const rd_space_t* s = &pl->red;
  int nops = pl->nops;
  char* p[RD_MAXOPS];
  int64_t sb[RD_MAXOPS];
  if (e1 > s->numel) e1 = s->numel;
  if (e0 >= e1) return;
  if (s->nd == 0) {
    for (int k = 0; k < nops; ++k) {
      p[k] = base[k];
      sb[k] = 0;
    }
    fn(ctx, p, sb, 1, 0);
    return;
  }
  int32_t last = s->nd - 1;
  int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
  rd_unravel(s, nops, e0, idx, off);
  for (int k = 0; k < nops; ++k) sb[k] = s->st[k][last];
  int64_t pos = e0;
  while (pos < e1) {
    int64_t cnt = rd_min(s->sz[last] - idx[last], e1 - pos);
    for (int k = 0; k < nops; ++k) p[k] = base[k] + off[k];
    fn(ctx, p, sb, cnt, pos);
    pos += cnt;
    if (pos >= e1) break;
    for (int k = 0; k < nops; ++k) off[k] += (s->sz[last] - 1 - idx[last]) * sb[k];
    idx[last] = s->sz[last] - 1;
    rd_step(s, nops, idx, off);
  }
}

/* Row drivers: fn(ctx, base pointers of one outer position, flat outer idx) */
typedef void (*rd_row_fn)(void* ctx, char* const* base, int64_t o);

typedef struct {
  const rd_plan_t* pl;
  rd_row_fn fn;
  void* ctx;
} rd_rows_ctx_t;

RD_SCALAR static void rd_rows_body(void* c_, int64_t o0, int64_t o1) {
  const rd_rows_ctx_t* c = (const rd_rows_ctx_t*)c_;
  const rd_plan_t* pl = c->pl;
  int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
  char* b[RD_MAXOPS];
  rd_unravel(&pl->outer, pl->nops, o0, idx, off);
  for (int64_t o = o0; o < o1; ++o) {
    for (int k = 0; k < pl->nops; ++k) b[k] = pl->base[k] + off[k];
    c->fn(c->ctx, b, o);
    rd_step(&pl->outer, pl->nops, idx, off);
  }
}

static void rd_rows(const rd_plan_t* pl, tpu_threadpool_t* pool, int64_t work_per_row,
                    rd_row_fn fn, void* ctx) {
  if (pl->outer.numel == 0) return;
  rd_rows_ctx_t c = {pl, fn, ctx};
  int64_t grain = 32768 / (work_per_row > 0 ? work_per_row : 1);
  tpu_parallel_for(pool, pl->outer.numel, grain < 1 ? 1 : grain, rd_rows_body, &c);
}

/* ---- element loading -------------------------------------------------------- */

static void rd_load_f(const char* p, int64_t sb, int dt, int64_t n, float* buf) {
  switch (dt) {
    case TPU_DTYPE_F32:
      if (sb == 4) {
        memcpy(buf, p, (size_t)n * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) buf[i] = *(const float*)(p + i * sb);
      }
      break;
    case TPU_DTYPE_BF16:
      if (sb == 2) {
        const uint16_t* h = (const uint16_t*)p;
        uint32_t* u = (uint32_t*)buf;
        for (int64_t i = 0; i < n; ++i) u[i] = (uint32_t)h[i] << 16;
      } else {
        for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_bf16_to_f32(*(const uint16_t*)(p + i * sb));
      }
      break;
    case TPU_DTYPE_F16:
      for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_f16_to_f32(*(const uint16_t*)(p + i * sb));
      break;
    default:
      for (int64_t i = 0; i < n; ++i) buf[i] = (float)tpu_ku_load_f64(p + i * sb, dt);
      break;
  }
}

static void rd_load_d(const char* p, int64_t sb, int dt, int64_t n, double* buf) {
  switch (dt) {
    case TPU_DTYPE_F32:
      if (sb == 4) {
        const float* f = (const float*)p;
        for (int64_t i = 0; i < n; ++i) buf[i] = f[i];
      } else {
        for (int64_t i = 0; i < n; ++i) buf[i] = *(const float*)(p + i * sb);
      }
      break;
    case TPU_DTYPE_F64:
      if (sb == 8) memcpy(buf, p, (size_t)n * 8);
      else for (int64_t i = 0; i < n; ++i) buf[i] = *(const double*)(p + i * sb);
      break;
    case TPU_DTYPE_BF16:
      if (sb == 2) {
        const uint16_t* h = (const uint16_t*)p;
        for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_bf16_to_f32(h[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_bf16_to_f32(*(const uint16_t*)(p + i * sb));
      }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_load_f64(p + i * sb, dt);
      break;
  }
}

static void rd_load_i(const char* p, int64_t sb, int dt, int64_t n, int64_t* buf) {
  switch (dt) {
    case TPU_DTYPE_I64:
      for (int64_t i = 0; i < n; ++i) buf[i] = *(const int64_t*)(p + i * sb);
      break;
    case TPU_DTYPE_I32:
      for (int64_t i = 0; i < n; ++i) buf[i] = *(const int32_t*)(p + i * sb);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) buf[i] = tpu_ku_load_i64(p + i * sb, dt);
      break;
  }
}

static void rd_store_f(char* p, int dt, float v) {
  switch (dt) {
    case TPU_DTYPE_F32: *(float*)p = v; break;
    case TPU_DTYPE_BF16: *(uint16_t*)p = tpu_ku_f32_to_bf16(v); break;
    case TPU_DTYPE_F16: *(uint16_t*)p = tpu_ku_f32_to_f16(v); break;
    default: tpu_ku_store_f64(p, dt, v); break;
  }
}

/* Stores n floats at p (byte stride sb) as dtype dt. */
static void rd_store_run_f(char* p, int64_t sb, int dt, int64_t n, const float* buf) {
  if (dt == TPU_DTYPE_F32 && sb == 4) {
    memcpy(p, buf, (size_t)n * 4);
  } else if (dt == TPU_DTYPE_BF16 && sb == 2) {
    uint16_t* h = (uint16_t*)p;
    for (int64_t i = 0; i < n; ++i) h[i] = tpu_ku_f32_to_bf16(buf[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) rd_store_f(p + i * sb, dt, buf[i]);
  }
}

/* Eight independent 4-lane accumulators (GCC/Clang vector extensions, any
 * ISA), so the loop runs at the adder's throughput rather than its latency;
 * lanes are folded pairwise. */
typedef float rd_v4f __attribute__((vector_size(16)));

static inline rd_v4f rd_ld4(const float* p) {
  rd_v4f v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static float rd_sum_f(const float* x, int64_t n) {
  rd_v4f a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 += rd_ld4(x + i);
    a1 += rd_ld4(x + i + 4);
    a2 += rd_ld4(x + i + 8);
    a3 += rd_ld4(x + i + 12);
    a4 += rd_ld4(x + i + 16);
    a5 += rd_ld4(x + i + 20);
    a6 += rd_ld4(x + i + 24);
    a7 += rd_ld4(x + i + 28);
  }
  rd_v4f v = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7));
  float t = 0.0f;
  for (; i < n; ++i) t += x[i];
  return ((v[0] + v[2]) + (v[1] + v[3])) + t;
}

static double rd_sum_d(const double* x, int64_t n) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += x[i + j];
  for (; i < n; ++i) a[i & 3] += x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

static double rd_sumsq_d(const double* x, int64_t n, double mu) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += (x[i + j] - mu) * (x[i + j] - mu);
  for (; i < n; ++i) a[i & 3] += (x[i] - mu) * (x[i] - mu);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

static double rd_sumabs_d(const double* x, int64_t n) {
  double a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += fabs(x[i + j]);
  for (; i < n; ++i) a[i & 3] += fabs(x[i]);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

/* max (mx) or min of x[0..n); *nan set when x holds a NaN. */
RD_VECTORIZE static float rd_extreme_f(const float* x, int64_t n, bool mx, bool* nan, bool avx2) {
#if defined(__x86_64__)
  if (avx2 && n > 0) {
    int bad;
    float r = tpu_k_avx2_extreme(x, n, mx, &bad);
    *nan = bad != 0;
    return r;
  }
#endif
  (void)avx2;
  float m[8];
  int32_t bad[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < 8; ++j) m[j] = mx ? -INFINITY : INFINITY;
  int64_t i = 0;
  if (mx) {
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        float v = x[i + j];
        m[j] = v > m[j] ? v : m[j];
        bad[j] |= v != v;
      }
  } else {
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        float v = x[i + j];
        m[j] = v < m[j] ? v : m[j];
        bad[j] |= v != v;
      }
  }
  for (; i < n; ++i) {
    float v = x[i];
    if (mx ? v > m[0] : v < m[0]) m[0] = v;
    bad[0] |= v != v;
  }
  float r = m[0];
  for (int j = 1; j < 8; ++j) r = mx ? (m[j] > r ? m[j] : r) : (m[j] < r ? m[j] : r);
  *nan = false;
  for (int j = 0; j < 8; ++j) *nan |= bad[j] != 0;
  return r;
}

/* exp over a buffer, vectorisable (Cephes-style polynomial, ~1 ulp). */
RD_VECTORIZE static void rd_exp_buf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    bool nan = v != v;
    float c = nan ? 0.0f : v;
    c = c < -87.0f ? -87.0f : c;
    c = c > 88.0f ? 88.0f : c;
    float fx = c * 1.44269504088896341f;
    fx = (fx + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = c - fx * 0.693359375f + fx * 2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    int32_t e = ((int32_t)fx + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    y *= s;
    y = v < -87.0f ? 0.0f : y;
    y = v > 88.5f ? INFINITY : y;
    x[i] = nan ? v : y;
  }
}

/* ---- dims -------------------------------------------------------------------- */

/* Reduced-dim mask from argument `ai` (int[] / int / None). `empty_all`:
 * an empty list means every dim (sum, amax, ...), else no dim (any.dims). */
static tpu_status_t rd_mask(const tpu_k_call_t* call, int ai, int32_t ndim, bool empty_all,
                            uint32_t* out_mask) {
  uint32_t all = ndim >= 32 ? 0xffffffffu : ((1u << ndim) - 1u);
  *out_mask = 0;
  if (ai < 0 || tpu_ku_is_none(call, ai)) {
    *out_mask = all;
    return TPU_OK;
  }
  const tpu_k_value_t* v = &call->args[ai];
  const int64_t* dims;
  int64_t n;
  int64_t one;
  if (v->kind == TPU_K_INTS) {
    dims = v->v.ints.data;
    n = v->v.ints.len;
    if (n == 0) {
      *out_mask = empty_all ? all : 0;
      return TPU_OK;
    }
  } else if (v->kind == TPU_K_INT) {
    one = v->v.i;
    dims = &one;
    n = 1;
  } else {
    return TPU_KU_INVALID(call, "expected dims as int or int[] (argument %d)", ai);
  }
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t d;
    TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, dims[i], ndim, &d));
    if (ndim == 0) continue;
    if ((m >> d) & 1u)
      return TPU_KU_INVALID(call, "dim %d appears multiple times in the list of dims", (int)d);
    m |= 1u << d;
  }
  *out_mask = m;
  return TPU_OK;
}

/* Does `out` have the shape of `in` reduced over `mask`? */
static bool rd_shape_ok(const tpu_tensor_t* in, uint32_t mask, const tpu_tensor_t* out) {
  if (out->ndim == in->ndim) {
    for (int32_t d = 0; d < in->ndim; ++d)
      if (out->sizes[d] != (((mask >> d) & 1u) ? 1 : in->sizes[d])) return false;
    return true;
  }
  int32_t j = 0;
  for (int32_t d = 0; d < in->ndim; ++d) {
    if ((mask >> d) & 1u) continue;
    if (j >= out->ndim || out->sizes[j] != in->sizes[d]) return false;
    ++j;
  }
  return j == out->ndim;
}

static bool rd_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }
static bool rd_float_dt(int dt) { return tpu_dtype_is_floating((tpu_dtype_t)dt); }
static bool rd_half_dt(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}

/* "aten::amax.out" -> "amax" */
static void rd_short_name(const char* op, char* buf, size_t cap) {
  const char* s = strstr(op, "::");
  s = s ? s + 2 : op;
  size_t n = 0;
  while (s[n] && s[n] != '.' && n + 1 < cap) {
    buf[n] = s[n];
    ++n;
  }
  buf[n] = 0;
}

/* ---- reductions ------------------------------------------------------------ */

enum {
  RD_SUM, RD_MEAN, RD_PROD, RD_MAX, RD_MIN, RD_MAXDIM, RD_MINDIM, RD_ARGMAX, RD_ARGMIN,
  RD_ANY, RD_ALL, RD_VAR, RD_STD, RD_VARMEAN, RD_NORM, RD_LSE,
};

enum { RD_DIMS_NONE, RD_DIMS_LIST, RD_DIMS_ONE, RD_DIMS_OPT_ONE, RD_DIMS_LIST_EMPTY_NONE };

typedef struct {
  const char* name;
  int kind;
  int dims_style;
  int dim_arg, keep_arg, extra_arg; /* -1: absent */
  int nouts;
} rd_desc_t;

static const rd_desc_t kRdDescs[] = {
    {"aten::sum.dim_IntList", RD_SUM, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::sum.IntList_out", RD_SUM, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::sum", RD_SUM, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::sum.out", RD_SUM, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::mean.dim", RD_MEAN, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::mean.out", RD_MEAN, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::mean", RD_MEAN, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::prod", RD_PROD, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::prod.out", RD_PROD, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::prod.dim_int", RD_PROD, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::prod.int_out", RD_PROD, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::amax", RD_MAX, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::amax.out", RD_MAX, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::amin", RD_MIN, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::amin.out", RD_MIN, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::max", RD_MAX, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::max.unary_out", RD_MAX, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::min", RD_MIN, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::min.unary_out", RD_MIN, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::max.dim", RD_MAXDIM, RD_DIMS_ONE, 1, 2, -1, 2},
    {"aten::max.dim_max", RD_MAXDIM, RD_DIMS_ONE, 1, 2, -1, 2},
    {"aten::min.dim", RD_MINDIM, RD_DIMS_ONE, 1, 2, -1, 2},
    {"aten::min.dim_min", RD_MINDIM, RD_DIMS_ONE, 1, 2, -1, 2},
    {"aten::argmax", RD_ARGMAX, RD_DIMS_OPT_ONE, 1, 2, -1, 1},
    {"aten::argmax.out", RD_ARGMAX, RD_DIMS_OPT_ONE, 1, 2, -1, 1},
    {"aten::argmin", RD_ARGMIN, RD_DIMS_OPT_ONE, 1, 2, -1, 1},
    {"aten::argmin.out", RD_ARGMIN, RD_DIMS_OPT_ONE, 1, 2, -1, 1},
    {"aten::any", RD_ANY, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::any.all_out", RD_ANY, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::any.dim", RD_ANY, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::any.out", RD_ANY, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::any.dims", RD_ANY, RD_DIMS_LIST_EMPTY_NONE, 1, 2, -1, 1},
    {"aten::any.dims_out", RD_ANY, RD_DIMS_LIST_EMPTY_NONE, 1, 2, -1, 1},
    {"aten::all", RD_ALL, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::all.all_out", RD_ALL, RD_DIMS_NONE, -1, -1, -1, 1},
    {"aten::all.dim", RD_ALL, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::all.out", RD_ALL, RD_DIMS_ONE, 1, 2, -1, 1},
    {"aten::all.dims", RD_ALL, RD_DIMS_LIST_EMPTY_NONE, 1, 2, -1, 1},
    {"aten::all.dims_out", RD_ALL, RD_DIMS_LIST_EMPTY_NONE, 1, 2, -1, 1},
    {"aten::var.correction", RD_VAR, RD_DIMS_LIST, 1, 3, 2, 1},
    {"aten::var.correction_out", RD_VAR, RD_DIMS_LIST, 1, 3, 2, 1},
    {"aten::std.correction", RD_STD, RD_DIMS_LIST, 1, 3, 2, 1},
    {"aten::std.correction_out", RD_STD, RD_DIMS_LIST, 1, 3, 2, 1},
    {"aten::var_mean.correction", RD_VARMEAN, RD_DIMS_LIST, 1, 3, 2, 2},
    {"aten::var_mean.correction_out", RD_VARMEAN, RD_DIMS_LIST, 1, 3, 2, 2},
    {"aten::linalg_vector_norm", RD_NORM, RD_DIMS_LIST, 2, 3, 1, 1},
    {"aten::linalg_vector_norm.out", RD_NORM, RD_DIMS_LIST, 2, 3, 1, 1},
    {"aten::logsumexp", RD_LSE, RD_DIMS_LIST, 1, 2, -1, 1},
    {"aten::logsumexp.out", RD_LSE, RD_DIMS_LIST, 1, 2, -1, 1},
};

static const rd_desc_t* rd_find(const char* op) {
  for (size_t i = 0; i < sizeof(kRdDescs) / sizeof(kRdDescs[0]); ++i)
    if (strcmp(kRdDescs[i].name, op) == 0) return &kRdDescs[i];
  return NULL;
}

typedef struct {
  const rd_desc_t* desc;
  int kind;
  const tpu_tensor_t* in;
  const tpu_tensor_t* outs[2];
  uint32_t mask;
  bool ints;     /* integer accumulation */
  double p;      /* norm order */
  double corr;   /* var correction */
  int64_t rnumel;
  int passes;
  bool avx2;
} rd_op_t;

typedef struct {
  double d, d2, aux;
  int64_t i, idx;
  bool has, stop;
} rd_state_t;

static tpu_status_t rd_setup(const tpu_k_call_t* call, rd_op_t* op) {
  memset(op, 0, sizeof(*op));
  const rd_desc_t* desc = rd_find(call->op);
  if (!desc) return TPU_KU_INVALID(call, "unknown reduction");
  op->desc = desc;
  op->kind = desc->kind;
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (!in) return TPU_KU_INVALID(call, "expected a tensor as self");
  if (call->num_outputs < desc->nouts)
    return TPU_KU_INVALID(call, "expected %d outputs, got %d", desc->nouts, (int)call->num_outputs);
  if (in->ndim > 31) return TPU_KU_INVALID(call, "too many dims (%d)", (int)in->ndim);
  op->in = in;
  for (int i = 0; i < desc->nouts; ++i) op->outs[i] = &call->outputs[i];
  if (!rd_dtype_ok(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  for (int i = 0; i < desc->nouts; ++i)
    if (!rd_dtype_ok(op->outs[i]->dtype)) return tpu_ku_unsupported_dtype(call, op->outs[i]->dtype);
  int kind = op->kind;
  int odt = op->outs[0]->dtype;
  if ((kind == RD_MEAN || kind == RD_VAR || kind == RD_STD || kind == RD_VARMEAN ||
       kind == RD_NORM || kind == RD_LSE) && !rd_float_dt(odt))
    return tpu_ku_unsupported_dtype(call, odt);
  if ((kind == RD_VAR || kind == RD_STD || kind == RD_VARMEAN || kind == RD_NORM) &&
      !rd_float_dt(in->dtype))
    return tpu_ku_unsupported_dtype(call, in->dtype);
  if ((kind == RD_ARGMAX || kind == RD_ARGMIN) && (odt != TPU_DTYPE_I64 || in->dtype == TPU_DTYPE_BOOL))
    return tpu_ku_unsupported_dtype(call, odt != TPU_DTYPE_I64 ? odt : in->dtype);
  if ((kind == RD_MAXDIM || kind == RD_MINDIM) && op->outs[1]->dtype != TPU_DTYPE_I64)
    return tpu_ku_unsupported_dtype(call, op->outs[1]->dtype);
  /* dims */
  switch (desc->dims_style) {
    case RD_DIMS_NONE:
      op->mask = in->ndim >= 32 ? 0xffffffffu : (1u << in->ndim) - 1u;
      break;
    case RD_DIMS_LIST_EMPTY_NONE:
      TPU_RETURN_IF_ERROR(rd_mask(call, desc->dim_arg, in->ndim, false, &op->mask));
      break;
    default:
      TPU_RETURN_IF_ERROR(rd_mask(call, desc->dim_arg, in->ndim, true, &op->mask));
      break;
  }
  for (int i = 0; i < desc->nouts; ++i)
    if (!rd_shape_ok(in, op->mask, op->outs[i]))
      return TPU_KU_INVALID(call, "output %d has %d dims, which does not match the reduced input shape", i,
                            (int)op->outs[i]->ndim);
  op->rnumel = 1;
  bool zero_dim = false;
  for (int32_t d = 0; d < in->ndim; ++d)
    if ((op->mask >> d) & 1u) {
      op->rnumel *= in->sizes[d];
      if (in->sizes[d] == 0) zero_dim = true;
    }
  char nm[64];
  rd_short_name(call->op, nm, sizeof(nm));
  bool extreme = kind == RD_MAX || kind == RD_MIN || kind == RD_MAXDIM || kind == RD_MINDIM ||
                 kind == RD_ARGMAX || kind == RD_ARGMIN;
  if (extreme && tpu_tensor_numel(in) == 0 &&
      (desc->dims_style == RD_DIMS_NONE ||
       (desc->dims_style == RD_DIMS_OPT_ONE && tpu_ku_is_none(call, desc->dim_arg))))
    return TPU_KU_INVALID(call, "%s(): Expected reduction dim to be specified for input.numel() == 0.%s", nm,
                          desc->dims_style == RD_DIMS_NONE ? " Specify the reduction dim with the 'dim' argument." : "");
  if (extreme && zero_dim) {
    for (int32_t d = 0; d < in->ndim; ++d)
      if (((op->mask >> d) & 1u) && in->sizes[d] == 0)
        return TPU_KU_INVALID(call, "%s(): Expected reduction dim %d to have non-zero size.", nm, (int)d);
  }
  op->ints = !rd_float_dt(in->dtype) && !rd_float_dt(odt);
  if (extreme) op->ints = !rd_float_dt(in->dtype);
  op->passes = 1;
  if (kind == RD_NORM) {
    op->p = tpu_ku_double(call, desc->extra_arg, 2.0);
    if (isinf(op->p) && op->rnumel == 0 && tpu_tensor_numel(op->outs[0]) > 0)
      return TPU_KU_INVALID(call, "linalg.vector_norm cannot compute the %s norm on an empty tensor because the operation does not have an identity",
                            op->p > 0 ? "inf" : "-inf");
  }
  if (kind == RD_VAR || kind == RD_STD || kind == RD_VARMEAN) {
    op->corr = tpu_ku_double(call, desc->extra_arg, 1.0);
    op->passes = 2;
  }
  if (kind == RD_LSE) op->passes = 2;
  return TPU_OK;
}

typedef struct {
  const rd_op_t* op;
  rd_state_t* s;
  int pass;
} rd_cc_t;

static void rd_state_init(const rd_op_t* op, rd_state_t* s) {
  memset(s, 0, sizeof(*s));
  if (op->kind == RD_PROD) {
    s->d = 1.0;
    s->i = 1;
  }
  if (op->kind == RD_ALL) s->i = 1;
  if (op->kind == RD_NORM && op->p == -INFINITY) s->d = INFINITY;
  if (op->kind == RD_LSE) s->d = -INFINITY;
}

static void rd_consume(void* ctx, char* const* pp, const int64_t* sbs, int64_t n, int64_t flat0) {
  const rd_cc_t* c = (const rd_cc_t*)ctx;
  const rd_op_t* op = c->op;
  rd_state_t* s = c->s;
  const char* p = pp[0];
  int64_t sb = sbs[0];
  int dt = op->in->dtype;
  double db[RD_CHUNK];
  int64_t ib[RD_CHUNK];
  for (int64_t i0 = 0; i0 < n && !s->stop; i0 += RD_CHUNK) {
    int64_t m = rd_min(RD_CHUNK, n - i0);
    const char* q = p + i0 * sb;
    switch (op->kind) {
      case RD_SUM:
      case RD_MEAN:
        if (op->ints) {
          rd_load_i(q, sb, dt, m, ib);
          uint64_t t = 0;
          for (int64_t i = 0; i < m; ++i) t += (uint64_t)ib[i];
          s->i = (int64_t)((uint64_t)s->i + t);
        } else if (rd_half_dt(dt) && op->outs[0]->dtype != TPU_DTYPE_F64) {
          if (dt == TPU_DTYPE_F32 && sb == 4) {
            s->d += rd_sum_f((const float*)q, m);
          } else {
            float fb[RD_CHUNK];
            rd_load_f(q, sb, dt, m, fb);
            s->d += rd_sum_f(fb, m);
          }
        } else {
          rd_load_d(q, sb, dt, m, db);
          s->d += rd_sum_d(db, m);
        }
        break;
      case RD_PROD:
        if (op->ints) {
          rd_load_i(q, sb, dt, m, ib);
          uint64_t t = (uint64_t)s->i;
          for (int64_t i = 0; i < m; ++i) t *= (uint64_t)ib[i];
          s->i = (int64_t)t;
        } else {
          rd_load_d(q, sb, dt, m, db);
          for (int64_t i = 0; i < m; ++i) s->d *= db[i];
        }
        break;
      case RD_MAX: case RD_MAXDIM: case RD_ARGMAX:
      case RD_MIN: case RD_MINDIM: case RD_ARGMIN: {
        bool mx = op->kind == RD_MAX || op->kind == RD_MAXDIM || op->kind == RD_ARGMAX;
        if (rd_half_dt(dt)) {
          /* extreme of the chunk, then (arg ops) the first index holding it */
          float fb[RD_CHUNK];
          const float* src = (const float*)q;
          if (!(dt == TPU_DTYPE_F32 && sb == 4)) {
            rd_load_f(q, sb, dt, m, fb);
            src = fb;
          }
          bool nan, arg = op->kind != RD_MAX && op->kind != RD_MIN;
          float e = rd_extreme_f(src, m, mx, &nan, op->avx2);
          if (nan) {
            int64_t i = 0;
            while (i < m && src[i] == src[i]) ++i;
            s->d = NAN;
            s->idx = flat0 + i0 + i;
            s->has = true;
            s->stop = true;
          } else if (!s->has || (mx ? e > s->d : e < s->d)) {
            s->d = e;
            s->has = true;
            if (arg) {
              int64_t i = 0;
              while (i < m - 1 && src[i] != e) ++i;
              s->idx = flat0 + i0 + i;
            }
          }
          break;
        }
        if (op->ints) {
          rd_load_i(q, sb, dt, m, ib);
          for (int64_t i = 0; i < m; ++i) {
            int64_t x = ib[i];
            if (!s->has || (mx ? x > s->i : x < s->i)) {
              s->i = x;
              s->idx = flat0 + i0 + i;
              s->has = true;
            }
          }
        } else {
          rd_load_d(q, sb, dt, m, db);
          for (int64_t i = 0; i < m; ++i) {
            double x = db[i];
            if (x != x) { /* NaN wins and stays */
              s->d = x;
              s->idx = flat0 + i0 + i;
              s->has = true;
              s->stop = true;
              break;
            }
            if (!s->has || (mx ? x > s->d : x < s->d)) {
              s->d = x;
              s->idx = flat0 + i0 + i;
              s->has = true;
            }
          }
        }
        break;
      }
      case RD_ANY:
      case RD_ALL: {
        bool any = op->kind == RD_ANY;
        if (rd_float_dt(dt)) {
          rd_load_d(q, sb, dt, m, db);
          for (int64_t i = 0; i < m; ++i) ib[i] = db[i] != 0.0;
        } else {
          rd_load_i(q, sb, dt, m, ib);
        }
        for (int64_t i = 0; i < m; ++i) {
          if (any && ib[i]) { s->i = 1; s->stop = true; break; }
          if (!any && !ib[i]) { s->i = 0; s->stop = true; break; }
        }
        break;
      }
      case RD_NORM: {
        if ((op->p == 2.0 || op->p == 1.0) && rd_half_dt(dt)) {
          float fb[RD_CHUNK], a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          const float* src = (const float*)q;
          if (!(dt == TPU_DTYPE_F32 && sb == 4)) {
            rd_load_f(q, sb, dt, m, fb);
            src = fb;
          }
          int64_t i = 0;
          if (op->p == 2.0) {
            for (; i + 8 <= m; i += 8)
              for (int j = 0; j < 8; ++j) a[j] += src[i + j] * src[i + j];
            for (; i < m; ++i) a[0] += src[i] * src[i];
          } else {
            for (; i + 8 <= m; i += 8)
              for (int j = 0; j < 8; ++j) a[j] += fabsf(src[i + j]);
            for (; i < m; ++i) a[0] += fabsf(src[i]);
          }
          s->d += (double)(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
          break;
        }
        rd_load_d(q, sb, dt, m, db);
        double pv = op->p, acc = s->d;
        if (pv == 2.0) {
          acc += rd_sumsq_d(db, m, 0.0);
        } else if (pv == 1.0) {
          acc += rd_sumabs_d(db, m);
        } else if (pv == 0.0) {
          for (int64_t i = 0; i < m; ++i) acc += db[i] != 0.0 ? 1.0 : 0.0;
        } else if (pv == INFINITY || pv == -INFINITY) {
          for (int64_t i = 0; i < m; ++i) {
            double a = fabs(db[i]);
            if (a != a || acc != acc) { acc = a != a ? a : acc; continue; }
            if (pv > 0 ? a > acc : a < acc) acc = a;
          }
        } else {
          for (int64_t i = 0; i < m; ++i) acc += pow(fabs(db[i]), pv);
        }
        s->d = acc;
        break;
      }
      case RD_VAR: case RD_STD: case RD_VARMEAN:
        rd_load_d(q, sb, dt, m, db);
        if (c->pass == 0) {
          s->d += rd_sum_d(db, m);
        } else {
          double mu = s->aux;
          s->d2 += rd_sumsq_d(db, m, mu);
          s->d += rd_sum_d(db, m) - (double)m * mu;
        }
        break;
      case RD_LSE:
        rd_load_d(q, sb, dt, m, db);
        if (c->pass == 0) {
          for (int64_t i = 0; i < m; ++i) {
            double x = db[i];
            if (x != x) { s->d = x; s->stop = true; break; }
            if (x > s->d) s->d = x;
          }
        } else {
          double mu = s->aux, a = 0;
          for (int64_t i = 0; i < m; ++i) a += exp(db[i] - mu);
          s->d2 += a;
        }
        break;
      default:
        break;
    }
  }
}

/* b (later elements) into a (earlier elements). */
static void rd_merge(const rd_op_t* op, int pass, rd_state_t* a, const rd_state_t* b) {
  switch (op->kind) {
    case RD_SUM: case RD_MEAN:
      a->d += b->d;
      a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i);
      break;
    case RD_PROD:
      a->d *= b->d;
      a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i);
      break;
    case RD_MAX: case RD_MAXDIM: case RD_ARGMAX:
    case RD_MIN: case RD_MINDIM: case RD_ARGMIN: {
      bool mx = op->kind == RD_MAX || op->kind == RD_MAXDIM || op->kind == RD_ARGMAX;
      if (!b->has || a->stop) break;
      if (!a->has || b->stop) { *a = *b; break; }
      bool take = op->ints ? (mx ? b->i > a->i : b->i < a->i) : (mx ? b->d > a->d : b->d < a->d);
      if (take) *a = *b;
      break;
    }
    case RD_ANY: a->i = a->i || b->i; break;
    case RD_ALL: a->i = a->i && b->i; break;
    case RD_NORM:
      if (op->p == INFINITY || op->p == -INFINITY) {
        if (a->d != a->d) break;
        if (b->d != b->d || (op->p > 0 ? b->d > a->d : b->d < a->d)) a->d = b->d;
      } else {
        a->d += b->d;
      }
      break;
    case RD_VAR: case RD_STD: case RD_VARMEAN:
      a->d += b->d;
      a->d2 += b->d2;
      break;
    case RD_LSE:
      if (pass == 0) {
        if (a->d != a->d) break;
        if (b->d != b->d || b->d > a->d) a->d = b->d;
      } else {
        a->d2 += b->d2;
      }
      break;
    default:
      break;
  }
}

/* Between passes: pass-0 result becomes aux and the accumulators restart. */
static void rd_between(const rd_op_t* op, rd_state_t* s) {
  if (op->kind == RD_LSE) {
    double m = s->d;
    s->aux = (m == INFINITY || m == -INFINITY) ? 0.0 : m;
    s->d2 = 0;
  } else {
    s->aux = op->rnumel > 0 ? s->d / (double)op->rnumel : NAN;
    s->d = 0;
    s->d2 = 0;
  }
}

static void rd_store(const rd_op_t* op, const rd_state_t* s, char* const* outp) {
  int odt = op->outs[0]->dtype;
  double n = (double)op->rnumel;
  switch (op->kind) {
    case RD_SUM: case RD_PROD:
      if (op->ints) tpu_ku_store_i64(outp[0], odt, s->i);
      else tpu_ku_store_f64(outp[0], odt, s->d);
      break;
    case RD_MEAN:
      tpu_ku_store_f64(outp[0], odt, (op->ints ? (double)s->i : s->d) / n);
      break;
    case RD_MAX: case RD_MIN: case RD_MAXDIM: case RD_MINDIM:
      if (op->ints) tpu_ku_store_i64(outp[0], odt, s->i);
      else tpu_ku_store_f64(outp[0], odt, s->d);
      if (op->kind == RD_MAXDIM || op->kind == RD_MINDIM) *(int64_t*)outp[1] = s->idx;
      break;
    case RD_ARGMAX: case RD_ARGMIN:
      *(int64_t*)outp[0] = s->idx;
      break;
    case RD_ANY: case RD_ALL:
      tpu_ku_store_i64(outp[0], odt, s->i ? 1 : 0);
      break;
    case RD_NORM: {
      double p = op->p, v = s->d;
      if (p == 2.0) v = sqrt(v);
      else if (p != 1.0 && p != 0.0 && !isinf(p)) v = pow(v, 1.0 / p);
      tpu_ku_store_f64(outp[0], odt, v);
      break;
    }
    case RD_VAR: case RD_STD: case RD_VARMEAN: {
      double m2 = s->d2 - (n > 0 ? s->d * s->d / n : 0.0);
      if (m2 < 0) m2 = 0;
      double div = n - op->corr;
      if (div < 0) div = 0;
      double v = m2 / div;
      if (op->kind == RD_STD) v = sqrt(v);
      tpu_ku_store_f64(outp[0], odt, v);
      if (op->kind == RD_VARMEAN) tpu_ku_store_f64(outp[1], op->outs[1]->dtype, s->aux);
      break;
    }
    case RD_LSE:
      tpu_ku_store_f64(outp[0], odt, s->d != s->d ? s->d : log(s->d2) + s->aux);
      break;
    default:
      break;
  }
}

typedef struct {
  const rd_op_t* op;
  const rd_plan_t* pl;
} rd_ctx_t;

static void rd_row(void* ctx, char* const* base, int64_t o) {
  const rd_ctx_t* c = (const rd_ctx_t*)ctx;
  rd_state_t s;
  rd_state_init(c->op, &s);
  for (int pass = 0; pass < c->op->passes; ++pass) {
    if (pass > 0) rd_between(c->op, &s);
    rd_cc_t cc = {c->op, &s, pass};
    s.stop = false;
    rd_runs(c->pl, base, 0, c->pl->red.numel, rd_consume, &cc);
  }
  rd_store(c->op, &s, base + 1);
}

/* One output, its reduced space split over threads. */
typedef struct {
  const rd_op_t* op;
  const rd_plan_t* pl;
  char* const* base;
  rd_state_t* parts;
  int64_t nparts, per;
  int pass;
  double aux;
} rd_split_t;

static void rd_split_body(void* ctx, int64_t b, int64_t e) {
  const rd_split_t* c = (const rd_split_t*)ctx;
  for (int64_t i = b; i < e; ++i) {
    rd_state_t* s = &c->parts[i];
    rd_state_init(c->op, s);
    s->aux = c->aux;
    rd_cc_t cc = {c->op, s, c->pass};
    rd_runs(c->pl, c->base, i * c->per, (i + 1) * c->per, rd_consume, &cc);
  }
}

static void rd_split_one(const rd_op_t* op, const rd_plan_t* pl, tpu_threadpool_t* pool,
                         char* const* base) {
  rd_state_t parts[RD_MAXPARTS];
  int64_t nparts = 4 * (int64_t)tpu_threadpool_size(pool);
  if (nparts > RD_MAXPARTS) nparts = RD_MAXPARTS;
  int64_t per = (pl->red.numel + nparts - 1) / nparts;
  nparts = (pl->red.numel + per - 1) / per;
  rd_state_t s;
  rd_state_init(op, &s);
  for (int pass = 0; pass < op->passes; ++pass) {
    if (pass > 0) rd_between(op, &s);
    rd_split_t c = {op, pl, base, parts, nparts, per, pass, s.aux};
    tpu_parallel_for(pool, nparts, 1, rd_split_body, &c);
    rd_state_t acc = parts[0];
    for (int64_t i = 1; i < nparts; ++i) rd_merge(op, pass, &acc, &parts[i]);
    if (pass == 0) {
      s = acc;
    } else if (op->kind == RD_LSE) {
      s.d2 = acc.d2;
    } else {
      s.d = acc.d;
      s.d2 = acc.d2;
    }
  }
  rd_store(op, &s, base + 1);
}

/* Lanes: RD_LANES neighbouring outputs whose inputs are adjacent in memory,
 * reduced together (sum over dim 0 of a row-major matrix, ...). */
typedef struct {
  const rd_op_t* op;
  const rd_plan_t* pl;
  int64_t groups_per_row, inner;
} rd_lanes_t;

typedef struct {
  const rd_op_t* op;
  int64_t nl;
  double* d;
  int64_t* iv;
} rd_lane_cc_t;

static void rd_lane_consume(void* ctx, char* const* pp, const int64_t* sbs, int64_t n, int64_t flat0) {
  const rd_lane_cc_t* c = (const rd_lane_cc_t*)ctx;
  const rd_op_t* op = c->op;
  int dt = op->in->dtype;
  int64_t nl = c->nl, es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
  double* d = c->d;
  int64_t* iv = c->iv;
  double db[RD_LANES];
  int64_t ib[RD_LANES];
  if ((op->kind == RD_SUM || op->kind == RD_MEAN) && !op->ints && dt == TPU_DTYPE_F32) {
    /* float32 columns: up to eight rows summed in float lanes (vectorised),
     * each partial then added to the double accumulators */
    float fb[RD_LANES];
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
      int64_t rows = rd_min(8, n - j0);
      memcpy(fb, pp[0] + j0 * sbs[0], (size_t)nl * sizeof(float));
      for (int64_t j = 1; j < rows; ++j) {
        const float* x = (const float*)(pp[0] + (j0 + j) * sbs[0]);
        for (int64_t l = 0; l < nl; ++l) fb[l] += x[l];
      }
      for (int64_t l = 0; l < nl; ++l) d[l] += (double)fb[l];
    }
    (void)flat0;
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const char* q = pp[0] + j * sbs[0];
    bool ints = op->ints || ((op->kind == RD_ANY || op->kind == RD_ALL) && !rd_float_dt(dt));
    if (ints) rd_load_i(q, es, dt, nl, ib);
    else rd_load_d(q, es, dt, nl, db);
    switch (op->kind) {
      case RD_SUM: case RD_MEAN:
        if (ints) for (int64_t l = 0; l < nl; ++l) iv[l] = (int64_t)((uint64_t)iv[l] + (uint64_t)ib[l]);
        else for (int64_t l = 0; l < nl; ++l) d[l] += db[l];
        break;
      case RD_PROD:
        if (ints) for (int64_t l = 0; l < nl; ++l) iv[l] = (int64_t)((uint64_t)iv[l] * (uint64_t)ib[l]);
        else for (int64_t l = 0; l < nl; ++l) d[l] *= db[l];
        break;
      case RD_MAX: case RD_MIN: {
        bool mx = op->kind == RD_MAX;
        if (ints) {
          for (int64_t l = 0; l < nl; ++l)
            if (mx ? ib[l] > iv[l] : ib[l] < iv[l]) iv[l] = ib[l];
        } else {
          for (int64_t l = 0; l < nl; ++l) {
            double x = db[l];
            if (d[l] != d[l]) continue;
            if (x != x || (mx ? x > d[l] : x < d[l])) d[l] = x;
          }
        }
        break;
      }
      case RD_ANY:
        if (ints) for (int64_t l = 0; l < nl; ++l) iv[l] |= ib[l] != 0;
        else for (int64_t l = 0; l < nl; ++l) iv[l] |= db[l] != 0.0;
        break;
      case RD_ALL:
        if (ints) for (int64_t l = 0; l < nl; ++l) iv[l] &= ib[l] != 0;
        else for (int64_t l = 0; l < nl; ++l) iv[l] &= db[l] != 0.0;
        break;
      case RD_NORM: {
        double pv = op->p;
        for (int64_t l = 0; l < nl; ++l) {
          double a = fabs(db[l]);
          if (pv == 2.0) d[l] += a * a;
          else if (pv == 1.0) d[l] += a;
          else if (pv == 0.0) d[l] += a != 0.0;
          else if (isinf(pv)) {
            if (d[l] != d[l]) continue;
            if (a != a || (pv > 0 ? a > d[l] : a < d[l])) d[l] = a;
          } else {
            d[l] += pow(a, pv);
          }
        }
        break;
      }
      default:
        break;
    }
  }
  (void)flat0;
}

static void rd_lanes_body(void* ctx, int64_t g0, int64_t g1) {
  const rd_lanes_t* c = (const rd_lanes_t*)ctx;
  const rd_plan_t* pl = c->pl;
  const rd_op_t* op = c->op;
  int32_t last = pl->outer.nd - 1;
  for (int64_t g = g0; g < g1; ++g) {
    int64_t row = g / c->groups_per_row, l0 = (g % c->groups_per_row) * RD_LANES;
    int64_t nl = rd_min(RD_LANES, c->inner - l0);
    int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
    rd_unravel(&pl->outer, pl->nops, row * c->inner + l0, idx, off);
    char* base[RD_MAXOPS];
    for (int k = 0; k < pl->nops; ++k) base[k] = pl->base[k] + off[k];
    double d[RD_LANES];
    int64_t iv[RD_LANES];
    rd_state_t s0;
    rd_state_init(op, &s0);
    for (int64_t l = 0; l < nl; ++l) {
      d[l] = s0.d;
      iv[l] = s0.i;
      if (op->kind == RD_MAX) { d[l] = -INFINITY; iv[l] = INT64_MIN; }
      if (op->kind == RD_MIN) { d[l] = INFINITY; iv[l] = INT64_MAX; }
    }
    rd_lane_cc_t cc = {op, nl, d, iv};
    rd_runs(pl, base, 0, pl->red.numel, rd_lane_consume, &cc);
    for (int64_t l = 0; l < nl; ++l) {
      rd_state_t s = s0;
      s.d = d[l];
      s.i = iv[l];
      char* outp[RD_MAXOPS];
      for (int k = 1; k < pl->nops; ++k) outp[k - 1] = base[k] + l * pl->outer.st[k][last];
      rd_store(op, &s, outp);
    }
  }
}

static tpu_status_t rd_check(const tpu_k_call_t* call) {
  rd_op_t op;
  return rd_setup(call, &op);
}

static tpu_status_t rd_run(const tpu_k_call_t* call) {
  rd_op_t op;
  TPU_RETURN_IF_ERROR(rd_setup(call, &op));
  op.avx2 = rd_use_avx2();
  int nouts = op.desc->nouts;
  const tpu_tensor_t* ops[3] = {op.in, op.outs[0], nouts > 1 ? op.outs[1] : op.outs[0]};
  rd_map_t maps[3] = {RD_MAP_SAME, RD_MAP_RED, RD_MAP_RED};
  bool arg = op.kind == RD_MAXDIM || op.kind == RD_MINDIM || op.kind == RD_ARGMAX || op.kind == RD_ARGMIN;
  rd_plan_t pl;
  rd_plan_init(&pl, op.in, op.mask, 1 + nouts, ops, maps, !arg);
  if (pl.outer.numel == 0) return TPU_OK;
  int nthreads = tpu_threadpool_size(call->pool);
  int64_t rn = pl.red.numel;
  bool lane_kind = op.kind == RD_SUM || op.kind == RD_MEAN || op.kind == RD_PROD ||
                   op.kind == RD_MAX || op.kind == RD_MIN || op.kind == RD_ANY ||
                   op.kind == RD_ALL || op.kind == RD_NORM;
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)op.in->dtype);
  if (lane_kind && rn > 1 && pl.outer.nd > 0 && pl.outer.st[0][pl.outer.nd - 1] == es &&
      pl.red.nd > 0 && pl.red.st[0][pl.red.nd - 1] != es &&
      !(pl.outer.numel < nthreads && rn >= 65536)) {
    rd_lanes_t c = {&op, &pl, 0, pl.outer.sz[pl.outer.nd - 1]};
    c.groups_per_row = (c.inner + RD_LANES - 1) / RD_LANES;
    int64_t groups = pl.outer.numel / c.inner * c.groups_per_row;
    int64_t work = rn * RD_LANES;
    int64_t grain = 32768 / work;
    tpu_parallel_for(call->pool, groups, grain < 1 ? 1 : grain, rd_lanes_body, &c);
    return TPU_OK;
  }
  if (nthreads > 1 && pl.outer.numel < nthreads && rn >= 65536) {
    int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
    rd_unravel(&pl.outer, pl.nops, 0, idx, off);
    for (int64_t o = 0; o < pl.outer.numel; ++o) {
      char* base[RD_MAXOPS];
      for (int k = 0; k < pl.nops; ++k) base[k] = pl.base[k] + off[k];
      rd_split_one(&op, &pl, call->pool, base);
      rd_step(&pl.outer, pl.nops, idx, off);
    }
    return TPU_OK;
  }
  rd_ctx_t c = {&op, &pl};
  rd_rows(&pl, call->pool, rn * op.passes, rd_row, &c);
  return TPU_OK;
}

/* ---- single-dim line ops: cumsum/cumprod, softmax family -------------------- */

static tpu_status_t rd_line_dim(const tpu_k_call_t* call, const tpu_tensor_t* in, int ai,
                                int32_t* out_dim) {
  if (tpu_ku_is_none(call, ai) || call->args[ai].kind != TPU_K_INT)
    return TPU_KU_INVALID(call, "expected an int dim (argument %d)", ai);
  return tpu_ku_wrap_dim(call, call->args[ai].v.i, in->ndim, out_dim);
}

static bool rd_same_shape(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

typedef struct {
  bool prod, ints, lse; /* lse: _logcumsumexp */
  int in_dt, out_dt;
  const rd_plan_t* pl;
} rd_scan_t;

/* log(e^x + e^acc) as the CPU's logcumsumexp steps: NaN in either stays NaN,
 * equal infinities give x, else max + log1p(exp(min - max)); in double for
 * float32/float64, in float for float16/bfloat16 (the CPU's accumulation types). */
static double rd_log_add_exp(double x, double acc, bool half) {
  const double lo = acc != acc ? acc : (acc < x ? acc : x), hi = acc != acc ? acc : (x < acc ? acc : x);
  if (lo == hi && !isfinite(lo)) return x;
  if (half) return (double)(log1pf(expf((float)lo - (float)hi)) + (float)hi);
  return log1p(exp(lo - hi)) + hi;
}

typedef struct {
  const rd_scan_t* sc;
  double d;
  int64_t i;
} rd_scan_cc_t;

static void rd_scan_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_scan_cc_t* c = (rd_scan_cc_t*)ctx;
  const rd_scan_t* sc = c->sc;
  if (sc->lse) {
    const bool half = sc->in_dt != TPU_DTYPE_F32 && sc->in_dt != TPU_DTYPE_F64;
    for (int64_t i = 0; i < n; ++i) {
      c->d = rd_log_add_exp(tpu_ku_load_f64(p[0] + i * sb[0], sc->in_dt), c->d, half);
      tpu_ku_store_f64(p[1] + i * sb[1], sc->out_dt, c->d);
    }
    return;
  }
  if (sc->in_dt == TPU_DTYPE_F32 && sc->out_dt == TPU_DTYPE_F32 && !sc->prod) {
    double acc = c->d;
    for (int64_t i = 0; i < n; ++i) {
      acc += *(const float*)(p[0] + i * sb[0]);
      *(float*)(p[1] + i * sb[1]) = (float)acc;
    }
    c->d = acc;
    return;
  }
  if (sc->ints && sc->in_dt == TPU_DTYPE_I64 && sc->out_dt == TPU_DTYPE_I64 && !sc->prod) {
    uint64_t acc = (uint64_t)c->i;
    for (int64_t i = 0; i < n; ++i) {
      acc += (uint64_t)*(const int64_t*)(p[0] + i * sb[0]);
      *(int64_t*)(p[1] + i * sb[1]) = (int64_t)acc;
    }
    c->i = (int64_t)acc;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const char* x = p[0] + i * sb[0];
    char* y = p[1] + i * sb[1];
    if (sc->ints) {
      uint64_t v = (uint64_t)tpu_ku_load_i64(x, sc->in_dt);
      c->i = (int64_t)(sc->prod ? (uint64_t)c->i * v : (uint64_t)c->i + v);
      tpu_ku_store_i64(y, sc->out_dt, c->i);
    } else {
      double v = tpu_ku_load_f64(x, sc->in_dt);
      c->d = sc->prod ? c->d * v : c->d + v;
      tpu_ku_store_f64(y, sc->out_dt, c->d);
    }
  }
  (void)flat0;
}

static void rd_scan_row(void* ctx, char* const* base, int64_t o) {
  const rd_scan_t* sc = (const rd_scan_t*)ctx;
  rd_scan_cc_t c = {sc, sc->lse ? -INFINITY : sc->prod ? 1.0 : 0.0, sc->prod ? 1 : 0};
  rd_runs(sc->pl, base, 0, sc->pl->red.numel, rd_scan_run, &c);
  (void)o;
}

static tpu_status_t rd_scan_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (!in || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and an output");
  if (!rd_dtype_ok(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (strstr(call->op, "logcumsumexp")) { /* floating only, the output in self's dtype */
    if (!rd_float_dt(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
    if (call->outputs[0].dtype != in->dtype)
      return TPU_KU_INVALID(call, "expected scalar_type %s but found %s", tpu_dtype_name((tpu_dtype_t)in->dtype),
                            tpu_dtype_name((tpu_dtype_t)call->outputs[0].dtype));
  }
  /* PyTorch has no bool cumsum/cumprod (bool inputs give int64 results);
   * a 0-dim tensor is copied before that check */
  if (!rd_dtype_ok(call->outputs[0].dtype) || (call->outputs[0].dtype == TPU_DTYPE_BOOL && in->ndim > 0))
    return tpu_ku_unsupported_dtype(call, call->outputs[0].dtype);
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, 1, &dim));
  if (!rd_same_shape(in, &call->outputs[0])) return TPU_KU_INVALID(call, "output shape differs from input");
  return TPU_OK;
}

static tpu_status_t rd_scan_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_scan_check(call));
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, 1, &dim));
  if (tpu_tensor_numel(in) == 0) return TPU_OK;
  const tpu_tensor_t* ops[2] = {in, out};
  rd_map_t maps[2] = {RD_MAP_SAME, RD_MAP_SAME};
  rd_plan_t pl;
  rd_plan_init(&pl, in, in->ndim ? 1u << dim : 0u, 2, ops, maps, false);
  rd_scan_t sc;
  sc.prod = strstr(call->op, "cumprod") != NULL;
  sc.lse = strstr(call->op, "logcumsumexp") != NULL;
  sc.in_dt = in->dtype;
  sc.out_dt = out->dtype;
  sc.ints = !rd_float_dt(in->dtype) && !rd_float_dt(out->dtype);
  sc.pl = &pl;
  rd_rows(&pl, call->pool, pl.red.numel, rd_scan_row, &sc);
  return TPU_OK;
}

/* _cummax_helper / _cummin_helper(self, values, indices, dim): the running
 * extreme along dim and its index, as PyTorch's cummax_cummin_helper: a tie
 * takes the later index (>=, <=); a NaN is taken and kept, each later NaN
 * moving the index. values has self's dtype (the element's bytes are
 * copied), indices int64; cummax/cummin size both and handle 0-dim and
 * empty inputs before they call the helper. */
typedef struct {
  bool max, ints;
  int dt;
  const rd_plan_t* pl;
} rd_cumext_t;

typedef struct {
  const rd_cumext_t* ce;
  double d;
  int64_t i, idx;
  char cur[8];
} rd_cumext_cc_t;

static void rd_cumext_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_cumext_cc_t* c = (rd_cumext_cc_t*)ctx;
  const rd_cumext_t* ce = c->ce;
  const size_t es = tpu_dtype_size((tpu_dtype_t)ce->dt);
  for (int64_t k = 0; k < n; ++k) {
    const char* x = p[0] + k * sb[0];
    bool take = flat0 + k == 0;
    if (ce->ints) {
      int64_t v = tpu_ku_load_i64(x, ce->dt);
      take = take || (ce->max ? v >= c->i : v <= c->i);
      if (take) c->i = v;
    } else {
      double v = tpu_ku_load_f64(x, ce->dt);
      take = take || v != v || (c->d == c->d && (ce->max ? v >= c->d : v <= c->d));
      if (take) c->d = v;
    }
    if (take) {
      memcpy(c->cur, x, es);
      c->idx = flat0 + k;
    }
    memcpy(p[1] + k * sb[1], c->cur, es);
    *(int64_t*)(p[2] + k * sb[2]) = c->idx;
  }
}

static void rd_cumext_row(void* ctx, char* const* base, int64_t o) {
  const rd_cumext_t* ce = (const rd_cumext_t*)ctx;
  rd_cumext_cc_t c;
  memset(&c, 0, sizeof(c));
  c.ce = ce;
  rd_runs(ce->pl, base, 0, ce->pl->red.numel, rd_cumext_run, &c);
  (void)o;
}

static tpu_status_t rd_cumext_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* vals = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* idx = tpu_ku_tensor(call, 2);
  if (!in || !vals || !idx) return TPU_KU_INVALID(call, "expected self, values and indices");
  if (!rd_dtype_ok(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (vals->dtype != in->dtype || idx->dtype != TPU_DTYPE_I64)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: expected values of dtype %s and int64 indices, got %s and %s", call->op,
                     tpu_dtype_name((tpu_dtype_t)in->dtype), tpu_dtype_name((tpu_dtype_t)vals->dtype),
                     tpu_dtype_name((tpu_dtype_t)idx->dtype));
  if (!rd_same_shape(in, vals) || !rd_same_shape(in, idx))
    return TPU_KU_INVALID(call, "values and indices must have the shape of self");
  int32_t dim;
  return rd_line_dim(call, in, 3, &dim);
}

static tpu_status_t rd_cumext_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_cumext_check(call));
  const tpu_tensor_t* ops[3] = {tpu_ku_tensor(call, 0), tpu_ku_tensor(call, 1), tpu_ku_tensor(call, 2)};
  const tpu_tensor_t* in = ops[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, 3, &dim));
  if (tpu_tensor_numel(in) == 0) return TPU_OK;
  rd_map_t maps[3] = {RD_MAP_SAME, RD_MAP_SAME, RD_MAP_SAME};
  rd_plan_t pl;
  rd_plan_init(&pl, in, in->ndim ? 1u << dim : 0u, 3, ops, maps, false);
  rd_cumext_t ce;
  ce.max = strstr(call->op, "cummax") != NULL;
  ce.dt = in->dtype;
  ce.ints = !rd_float_dt(in->dtype);
  ce.pl = &pl;
  rd_rows(&pl, call->pool, pl.red.numel, rd_cumext_row, &ce);
  return TPU_OK;
}

/* median / nanmedian, of the whole input or along dim (values, indices):
 * the lower median ((n - 1) / 2 in ascending order, n counting non-NaN
 * elements for nanmedian). No scratch memory: a radix select over
 * order-preserving 64-bit keys, one pass per 8-bit digit from the top (a
 * 256-count histogram of the candidates that share the digits found so far;
 * it stops early when one is left), then one pass for the element of that
 * rank among those with the found key. median of a row holding a NaN is its
 * first NaN; nanmedian of an all-NaN row is NaN at the index the CPU's
 * nth_element leaves (rd_allnan_index).
 * Ties are ordered by index, as the CPU's nth_element comparator orders them
 * (-0.0 ties with 0.0), so the index is the CPU's. */
typedef struct {
  bool nan_median; /* nanmedian */
  bool with_idx;
  int dt;
  const rd_plan_t* pl;
} rd_med_t;

typedef struct {
  const rd_med_t* md;
  int pass; /* 0..7: histogram of digit 7 - pass; 8: find */
  uint64_t prefix, mask;
  int64_t count[256], nan, first_nan, found;
  int64_t rank; /* pass 8: which occurrence of the found key */
  const char* at;
} rd_med_cc_t;

static inline bool rd_med_key(const char* x, int dt, uint64_t* key) {
  if (rd_float_dt(dt)) {
    double v = tpu_ku_load_f64(x, dt);
    if (v != v) return false;
    if (v == 0) v = 0.0; /* -0.0 ties with 0.0, as the CPU's comparisons */
    uint64_t b;
    memcpy(&b, &v, 8);
    *key = (b >> 63) ? ~b : b | (UINT64_C(1) << 63);
  } else {
    *key = (uint64_t)tpu_ku_load_i64(x, dt) ^ (UINT64_C(1) << 63);
  }
  return true;
}

static void rd_med_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_med_cc_t* c = (rd_med_cc_t*)ctx;
  const int dt = c->md->dt;
  const int shift = 56 - 8 * c->pass;
  for (int64_t k = 0; k < n; ++k) {
    const char* x = p[0] + k * sb[0];
    uint64_t key;
    if (!rd_med_key(x, dt, &key)) {
      if (c->pass == 0 && c->nan++ == 0) c->first_nan = flat0 + k;
      continue;
    }
    if ((key & c->mask) != c->prefix) continue;
    if (c->pass < 8) {
      c->count[(key >> shift) & 255]++;
    } else if (!c->at && c->rank-- == 0) {
      c->at = x;
      c->found = flat0 + k;
    }
  }
}

/* The index the CPU's nanmedian returns for an all-NaN row of n: libstdc++'s
 * nth_element(first, first, last) with a comparator that is always false
 * there. Each introselect round over [0, l) (while l > 3) swaps 0 with l / 2,
 * then swaps pairs (1 + k, l - 1 - k) inward, k < (l - 1) / 2, and goes on
 * with [0, 1 + (l - 1) / 2); the final insertion sort moves nothing. Traced
 * backwards from position 0. */
static int64_t rd_allnan_index(int64_t n) {
  int64_t len[64];
  int r = 0;
  for (int64_t l = n; l > 3; l = 1 + (l - 1) / 2) len[r++] = l;
  int64_t pos = 0;
  while (r-- > 0) {
    const int64_t l = len[r], k = (l - 1) / 2, mid = l / 2;
    if ((pos >= 1 && pos <= k) || (pos >= l - k && pos <= l - 1)) pos = l - pos;
    if (pos == 0) pos = mid;
    else if (pos == mid) pos = 0;
  }
  return pos;
}

static void rd_med_row(void* ctx, char* const* base, int64_t o) {
  const rd_med_t* md = (const rd_med_t*)ctx;
  const rd_plan_t* pl = md->pl;
  const int64_t n = pl->red.numel;
  rd_med_cc_t c;
  memset(&c, 0, sizeof(c));
  c.md = md;
  int64_t rank = 0;
  bool nan_result = false;
  for (c.pass = 0; c.pass < 8; ++c.pass) {
    memset(c.count, 0, sizeof(c.count));
    rd_runs(pl, base, 0, n, rd_med_run, &c);
    if (c.pass == 0) {
      nan_result = c.nan == n || (c.nan > 0 && !md->nan_median);
      if (nan_result) break;
      rank = (n - c.nan - 1) / 2;
    }
    int b = 0;
    for (; b < 255 && rank >= c.count[b]; ++b) rank -= c.count[b];
    const int shift = 56 - 8 * c.pass;
    c.prefix |= (uint64_t)b << shift;
    c.mask |= (uint64_t)255 << shift;
    if (c.count[b] == 1) break; /* one candidate left: the prefix finds it */
  }
  const size_t es = tpu_dtype_size((tpu_dtype_t)md->dt);
  if (!nan_result) {
    c.pass = 8;
    c.rank = rank;
    rd_runs(pl, base, 0, n, rd_med_run, &c);
  } else { /* a NaN: median's first one, nanmedian's all-NaN row as the CPU leaves it */
    c.found = md->nan_median ? rd_allnan_index(n) : c.first_nan;
    int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
    rd_unravel(&pl->red, pl->nops, c.found, idx, off);
    c.at = base[0] + off[0];
  }
  memcpy(base[1], c.at, es);
  if (md->with_idx) *(int64_t*)base[2] = c.found;
  (void)o;
}

/* (values, indices) of a reduction along one dim (median/nanmedian.dim_values,
 * kthvalue.values, mode): values of self's dtype and int64 indices (a
 * mismatch is a RuntimeError on the CPU: checkSameType), a non-empty dim
 * (IndexError naming `what`), outputs of the reduced shape (keepdim or not).
 * The dim is argument `dim_arg`. */
static tpu_status_t rd_valind_check(const tpu_k_call_t* call, const tpu_tensor_t* in, int dim_arg,
                                    const char* what, int32_t* out_dim) {
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected values and indices");
  if (call->outputs[0].dtype != in->dtype || call->outputs[1].dtype != TPU_DTYPE_I64)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: expected values of dtype %s and int64 indices, got %s and %s", call->op,
                     tpu_dtype_name((tpu_dtype_t)in->dtype), tpu_dtype_name((tpu_dtype_t)call->outputs[0].dtype),
                     tpu_dtype_name((tpu_dtype_t)call->outputs[1].dtype));
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, dim_arg, &dim));
  if (in->ndim > 0 && in->sizes[dim] == 0)
    return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: %s(): Expected reduction dim %d to have non-zero size.",
                     call->op, what, dim);
  for (int k = 0; k < 2; ++k) {
    const tpu_tensor_t* t = &call->outputs[k];
    bool keep = t->ndim == in->ndim && in->ndim > 0;
    bool ok = keep || t->ndim == (in->ndim > 0 ? in->ndim - 1 : 0);
    for (int32_t d = 0, j = 0; ok && d < in->ndim; ++d) {
      if (d == dim && !keep) continue;
      ok = t->sizes[j++] == (d == dim ? 1 : in->sizes[d]);
    }
    if (!ok) return TPU_KU_INVALID(call, "output %d has the wrong shape for dim %d", k, dim);
  }
  *out_dim = dim;
  return TPU_OK;
}

static tpu_status_t rd_med_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  const bool with_idx = call->num_args > 1;
  if (!in || call->num_outputs < (with_idx ? 2 : 1)) return TPU_KU_INVALID(call, "expected self and the outputs");
  if (!rd_dtype_ok(in->dtype) || in->dtype == TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (with_idx) {
    int32_t dim;
    return rd_valind_check(call, in, 1, "median", &dim);
  }
  /* dtype mismatches are RuntimeErrors on the CPU (checkSameType) */
  if (call->outputs[0].dtype != in->dtype)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: expected values of dtype %s, got %s", call->op,
                     tpu_dtype_name((tpu_dtype_t)in->dtype), tpu_dtype_name((tpu_dtype_t)call->outputs[0].dtype));
  if (tpu_tensor_numel(&call->outputs[0]) != 1) return TPU_KU_INVALID(call, "expected a 0-dim output");
  return TPU_OK;
}

static tpu_status_t rd_med_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_med_check(call));
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  rd_med_t md;
  md.nan_median = strstr(call->op, "nanmedian") != NULL;
  md.with_idx = call->num_args > 1;
  md.dt = in->dtype;
  const tpu_tensor_t* out = &call->outputs[0];
  if (tpu_tensor_numel(in) == 0) { /* the whole input (a dim must be non-empty): NaN, as on the CPU */
    if (rd_float_dt(md.dt)) tpu_ku_store_f64(out->data, md.dt, NAN);
    else tpu_ku_store_i64(out->data, md.dt, INT64_MIN);
    return TPU_OK;
  }
  uint32_t mask = in->ndim ? (uint32_t)((1ull << in->ndim) - 1) : 0u;
  if (md.with_idx) {
    int32_t dim;
    TPU_RETURN_IF_ERROR(rd_line_dim(call, in, 1, &dim));
    mask = in->ndim ? 1u << dim : 0u;
  }
  const tpu_tensor_t* ops[3] = {in, out, md.with_idx ? &call->outputs[1] : out};
  rd_map_t maps[3] = {RD_MAP_SAME, RD_MAP_RED, RD_MAP_RED};
  rd_plan_t pl;
  rd_plan_init(&pl, in, mask, md.with_idx ? 3 : 2, ops, maps, false);
  md.pl = &pl;
  rd_rows(&pl, call->pool, pl.red.numel * 9, rd_med_row, &md);
  return TPU_OK;
}

/* kthvalue.values(self, k, dim, keepdim) and mode(self, dim, keepdim): the
 * CPU's algorithms, replayed on a copy of each row so that ties (and NaN)
 * give the CPU's index, which depends on the order its partitioning leaves
 * equal elements in:
 *   kthvalue: PyTorch's quick_select_template (median-of-three Numerical
 *   Recipes quickselect; NaN sorts largest), the k-th element after it;
 *   mode: std::sort of (value, index) pairs by value alone (libstdc++'s
 *   introsort: median-of-three to first, unguarded partition, heap sort past
 *   2*floor(log2 n) levels, final insertion sort over 16-element runs), then
 *   the first longest run of equal values, and the index of the run's last
 *   pair. NaN compares false with `<` and unequal with `!=`, as there.
 * These need O(n) scratch per row: the one exception to "kernels allocate
 * nothing" in this file (16 bytes per element, freed before the row ends;
 * failure is OUT_OF_MEMORY). Values are compared as double (exact for every
 * float dtype) or int64; the value written is the chosen element's bytes. */
typedef struct {
  union {
    double f;
    int64_t i;
  } v;
  int64_t idx;
} rd_sel_t;

typedef struct {
  bool ints, mode;
  int dt;
  int64_t k; /* kthvalue: 0-based rank */
  const rd_plan_t* pl;
  int failed;
} rd_selc_t;

static inline bool rd_sel_lt(const rd_sel_t* a, const rd_sel_t* b, bool ints) {
  return ints ? a->v.i < b->v.i : a->v.f < b->v.f;
}
static inline bool rd_sel_ne(const rd_sel_t* a, const rd_sel_t* b, bool ints) {
  return ints ? a->v.i != b->v.i : a->v.f != b->v.f;
}
/* kthvalue's gt_or_nan */
static inline bool rd_sel_gt(const rd_sel_t* a, const rd_sel_t* b, bool ints) {
  if (ints) return a->v.i > b->v.i;
  return (isnan(a->v.f) && !isnan(b->v.f)) || a->v.f > b->v.f;
}
static inline void rd_sel_swap(rd_sel_t* a, int64_t i, int64_t j) {
  rd_sel_t t = a[i];
  a[i] = a[j];
  a[j] = t;
}

static void rd_quickselect(rd_sel_t* a, int64_t n, int64_t k, bool ints) {
  int64_t L = 0, R = n - 1;
  for (;;) {
    if (R <= L) return;
    if (R == L + 1) {
      if (rd_sel_gt(&a[L], &a[R], ints)) rd_sel_swap(a, L, R);
      return;
    }
    rd_sel_swap(a, L + (R - L) / 2, L + 1);
    if (rd_sel_gt(&a[L + 1], &a[R], ints)) rd_sel_swap(a, L + 1, R);
    if (rd_sel_gt(&a[L], &a[R], ints)) rd_sel_swap(a, L, R);
    if (rd_sel_gt(&a[L + 1], &a[L], ints)) rd_sel_swap(a, L + 1, L);
    int64_t i = L + 1, j = R;
    const rd_sel_t piv = a[L];
    for (;;) {
      do ++i; while (rd_sel_gt(&piv, &a[i], ints));
      do --j; while (rd_sel_gt(&a[j], &piv, ints));
      if (j < i) break;
      rd_sel_swap(a, i, j);
    }
    rd_sel_swap(a, L, j);
    if (j <= k) L = i;
    if (j >= k) R = j - 1;
  }
}

/* libstdc++'s __adjust_heap / __push_heap over a[0..len) */
static void rd_heap_adjust(rd_sel_t* a, int64_t hole, int64_t len, rd_sel_t val, bool ints) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (rd_sel_lt(&a[child], &a[child - 1], ints)) child--;
    a[hole] = a[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    a[hole] = a[child - 1];
    hole = child - 1;
  }
  int64_t parent = (hole - 1) / 2;
  while (hole > top && rd_sel_lt(&a[parent], &val, ints)) {
    a[hole] = a[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  a[hole] = val;
}

static void rd_heapsort(rd_sel_t* a, int64_t n, bool ints) {
  for (int64_t p = (n - 2) / 2; n >= 2 && p >= 0; --p) rd_heap_adjust(a, p, n, a[p], ints);
  for (int64_t m = n - 1; m > 0; --m) {
    rd_sel_t v = a[m];
    a[m] = a[0];
    rd_heap_adjust(a, 0, m, v, ints);
  }
}

static void rd_introsort(rd_sel_t* a, int64_t n, int depth, bool ints) {
  while (n > 16) {
    if (depth == 0) {
      rd_heapsort(a, n, ints);
      return;
    }
    --depth;
    /* __move_median_to_first(a, a + 1, mid, last - 1) */
    int64_t x = 1, y = n / 2, z = n - 1, m;
    if (rd_sel_lt(&a[x], &a[y], ints)) m = rd_sel_lt(&a[y], &a[z], ints) ? y : rd_sel_lt(&a[x], &a[z], ints) ? z : x;
    else m = rd_sel_lt(&a[x], &a[z], ints) ? x : rd_sel_lt(&a[y], &a[z], ints) ? z : y;
    rd_sel_swap(a, 0, m);
    /* __unguarded_partition(a + 1, a + n, a); bounded where NaN breaks the guards */
    int64_t f = 1, l = n;
    for (;;) {
      while (f < n - 1 && rd_sel_lt(&a[f], &a[0], ints)) ++f;
      --l;
      while (l > 0 && rd_sel_lt(&a[0], &a[l], ints)) --l;
      if (!(f < l)) break;
      rd_sel_swap(a, f, l);
      ++f;
    }
    rd_introsort(a + f, n - f, depth, ints);
    n = f;
  }
}

static void rd_linear_insert(rd_sel_t* a, int64_t i, int64_t lo, bool ints) {
  rd_sel_t v = a[i];
  while (i > lo && rd_sel_lt(&v, &a[i - 1], ints)) {
    a[i] = a[i - 1];
    --i;
  }
  a[i] = v;
}

static void rd_std_sort(rd_sel_t* a, int64_t n, bool ints) {
  if (n < 2) return;
  int lg = 63 - __builtin_clzll((unsigned long long)n);
  rd_introsort(a, n, 2 * lg, ints);
  const int64_t head = n > 16 ? 16 : n;
  for (int64_t i = 1; i < head; ++i) { /* __insertion_sort */
    if (rd_sel_lt(&a[i], &a[0], ints)) {
      rd_sel_t v = a[i];
      memmove(a + 1, a, (size_t)i * sizeof(*a));
      a[0] = v;
    } else {
      rd_linear_insert(a, i, 0, ints);
    }
  }
  for (int64_t i = head; i < n; ++i) rd_linear_insert(a, i, 0, ints); /* __unguarded_insertion_sort */
}

typedef struct {
  rd_sel_t* a;
  const rd_selc_t* sc;
} rd_sel_ld_t;

static void rd_sel_load(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  const rd_sel_ld_t* ld = (const rd_sel_ld_t*)ctx;
  const rd_selc_t* sc = ld->sc;
  for (int64_t k = 0; k < n; ++k) {
    rd_sel_t* e = &ld->a[flat0 + k];
    const char* x = p[0] + k * sb[0];
    if (sc->ints) e->v.i = tpu_ku_load_i64(x, sc->dt);
    else e->v.f = tpu_ku_load_f64(x, sc->dt);
    e->idx = flat0 + k;
  }
}

static void rd_sel_row(void* ctx, char* const* base, int64_t o) {
  rd_selc_t* sc = (rd_selc_t*)ctx;
  const rd_plan_t* pl = sc->pl;
  const int64_t n = pl->red.numel;
  rd_sel_t* a = (rd_sel_t*)malloc((size_t)n * sizeof(rd_sel_t));
  if (!a) {
    __atomic_store_n(&sc->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  rd_sel_ld_t ld = {a, sc};
  rd_runs(pl, base, 0, n, rd_sel_load, &ld);
  int64_t found;
  if (sc->mode) {
    rd_std_sort(a, n, sc->ints);
    int64_t run = 0, best = 0;
    found = 0;
    for (int64_t i = 0; i < n; ++i) {
      ++run;
      if (i == n - 1 || rd_sel_ne(&a[i], &a[i + 1], sc->ints)) {
        if (run > best) {
          best = run;
          found = a[i].idx;
        }
        run = 0;
      }
    }
  } else {
    rd_quickselect(a, n, sc->k, sc->ints);
    found = a[sc->k].idx;
  }
  free(a);
  int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
  rd_unravel(&pl->red, pl->nops, found, idx, off);
  memcpy(base[1], base[0] + off[0], tpu_dtype_size((tpu_dtype_t)sc->dt));
  *(int64_t*)base[2] = found;
  (void)o;
}

/* kthvalue.values: (self, k, dim, keepdim); mode: (self, dim, keepdim) */
static tpu_status_t rd_sel_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (!in) return TPU_KU_INVALID(call, "expected self");
  const bool mode = strstr(call->op, "mode") != NULL;
  if (!rd_dtype_ok(in->dtype) || (!mode && in->dtype == TPU_DTYPE_BOOL))
    return tpu_ku_unsupported_dtype(call, in->dtype);
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_valind_check(call, in, mode ? 1 : 2, mode ? "mode" : "kthvalue", &dim));
  if (!mode) {
    int64_t k = tpu_ku_int(call, 1, 0), n = in->ndim ? in->sizes[dim] : 1;
    if (k < 1 || k > n)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "%s: kthvalue(): selected number k out of range for dimension %d", call->op, dim);
  }
  return TPU_OK;
}

static tpu_status_t rd_sel_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_sel_check(call));
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  rd_selc_t sc;
  memset(&sc, 0, sizeof(sc));
  sc.mode = strstr(call->op, "mode") != NULL;
  sc.dt = in->dtype;
  sc.ints = !rd_float_dt(in->dtype);
  sc.k = sc.mode ? 0 : tpu_ku_int(call, 1, 1) - 1;
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, sc.mode ? 1 : 2, &dim));
  if (tpu_tensor_numel(in) == 0) return TPU_OK;
  const tpu_tensor_t* ops[3] = {in, &call->outputs[0], &call->outputs[1]};
  rd_map_t maps[3] = {RD_MAP_SAME, RD_MAP_RED, RD_MAP_RED};
  rd_plan_t pl;
  rd_plan_init(&pl, in, in->ndim ? 1u << dim : 0u, 3, ops, maps, false);
  sc.pl = &pl;
  rd_rows(&pl, call->pool, pl.red.numel * 16, rd_sel_row, &sc);
  if (sc.failed) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: no memory for a row of %lld elements", call->op,
                                  (long long)pl.red.numel);
  return TPU_OK;
}

/* softmax / log_softmax and backward. Float math (double for f64). */
enum { SM_FWD, SM_LOGFWD, SM_BWD, SM_LOGBWD };

typedef struct {
  int mode;
  int dt[3];
  bool avx2;
  const rd_plan_t* pl;
} rd_sm_t;

typedef struct {
  const rd_sm_t* sm;
  int pass;
  double a, b; /* fwd: max, sum; bwd: dot */
} rd_sm_cc_t;

static void rd_sm_fwd_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_sm_cc_t* c = (rd_sm_cc_t*)ctx;
  const rd_sm_t* sm = c->sm;
  bool dbl = sm->dt[0] == TPU_DTYPE_F64 || sm->dt[1] == TPU_DTYPE_F64;
  float fb[RD_CHUNK];
  double db[RD_CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += RD_CHUNK) {
    int64_t m = rd_min(RD_CHUNK, n - i0);
    const char* q = p[0] + i0 * sb[0];
    char* y = p[1] + i0 * sb[1];
    if (dbl) {
      rd_load_d(q, sb[0], sm->dt[0], m, db);
      if (c->pass == 0) {
        for (int64_t i = 0; i < m; ++i) c->a = db[i] > c->a || db[i] != db[i] ? db[i] : c->a;
      } else if (c->pass == 1) {
        for (int64_t i = 0; i < m; ++i) c->b += exp(db[i] - c->a);
      } else {
        for (int64_t i = 0; i < m; ++i) {
          double v = sm->mode == SM_FWD ? exp(db[i] - c->a) / c->b : db[i] - c->a - log(c->b);
          tpu_ku_store_f64(y + i * sb[1], sm->dt[1], v);
        }
      }
      continue;
    }
    /* f32 rows with unit stride are read in place where the pass does not
     * overwrite its buffer (max, the AVX2 exp sum, log_softmax's output) */
    bool direct = sm->dt[0] == TPU_DTYPE_F32 && sb[0] == 4 &&
                  (c->pass == 0 || (c->pass == 1 && sm->avx2) || (c->pass == 2 && sm->mode == SM_LOGFWD));
    if (!direct) rd_load_f(q, sb[0], sm->dt[0], m, fb);
    const float* src = direct ? (const float*)q : fb;
    float mx = (float)c->a;
    if (c->pass == 0) {
      bool nan;
      float t = rd_extreme_f(src, m, true, &nan, sm->avx2);
      if (nan || c->a != c->a) c->a = NAN;
      else if (t > c->a) c->a = t;
    } else if (c->pass == 1) {
#if defined(__x86_64__)
      if (sm->avx2) {
        c->b += tpu_k_avx2_exp_sub_sum(src, NULL, m, mx);
        continue;
      }
#endif
      for (int64_t i = 0; i < m; ++i) fb[i] -= mx;
      rd_exp_buf(fb, m);
      c->b += rd_sum_f(fb, m);
    } else {
      if (sm->mode == SM_FWD) {
        float inv = (float)(1.0 / c->b);
#if defined(__x86_64__)
        if (sm->avx2) {
          tpu_k_avx2_exp_sub_sum(fb, fb, m, mx);
        } else
#endif
        {
          for (int64_t i = 0; i < m; ++i) fb[i] -= mx;
          rd_exp_buf(fb, m);
        }
        for (int64_t i = 0; i < m; ++i) fb[i] *= inv;
      } else {
        float ls = (float)log(c->b);
        if (sm->dt[1] == TPU_DTYPE_F32 && sb[1] == 4) {
          float* yf = (float*)y;
          for (int64_t i = 0; i < m; ++i) yf[i] = src[i] - mx - ls;
          continue;
        }
        for (int64_t i = 0; i < m; ++i) fb[i] = src[i] - mx - ls;
      }
      rd_store_run_f(y, sb[1], sm->dt[1], m, fb);
    }
  }
  (void)flat0;
}

/* backward: p[0] grad_output, p[1] output, p[2] grad_input */
static void rd_sm_bwd_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_sm_cc_t* c = (rd_sm_cc_t*)ctx;
  const rd_sm_t* sm = c->sm;
  double g[RD_CHUNK], y[RD_CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += RD_CHUNK) {
    int64_t m = rd_min(RD_CHUNK, n - i0);
    rd_load_d(p[0] + i0 * sb[0], sb[0], sm->dt[0], m, g);
    if (c->pass == 0) {
      if (sm->mode == SM_BWD) {
        rd_load_d(p[1] + i0 * sb[1], sb[1], sm->dt[1], m, y);
        for (int64_t i = 0; i < m; ++i) c->a += g[i] * y[i];
      } else {
        c->a += rd_sum_d(g, m);
      }
    } else {
      rd_load_d(p[1] + i0 * sb[1], sb[1], sm->dt[1], m, y);
      char* o = p[2] + i0 * sb[2];
      for (int64_t i = 0; i < m; ++i) {
        double v = sm->mode == SM_BWD ? y[i] * (g[i] - c->a) : g[i] - exp(y[i]) * c->a;
        tpu_ku_store_f64(o + i * sb[2], sm->dt[2], v);
      }
    }
  }
  (void)flat0;
}

static void rd_sm_row(void* ctx, char* const* base, int64_t o) {
  const rd_sm_t* sm = (const rd_sm_t*)ctx;
  rd_sm_cc_t c = {sm, 0, -INFINITY, 0.0};
  int64_t n = sm->pl->red.numel;
  if (sm->mode == SM_FWD || sm->mode == SM_LOGFWD) {
    for (c.pass = 0; c.pass < 3; ++c.pass) rd_runs(sm->pl, base, 0, n, rd_sm_fwd_run, &c);
  } else {
    c.a = 0.0;
    for (c.pass = 0; c.pass < 2; ++c.pass) rd_runs(sm->pl, base, 0, n, rd_sm_bwd_run, &c);
  }
  (void)o;
}

static int rd_sm_mode(const char* op) {
  bool lg = strstr(op, "log_softmax") != NULL;
  bool bw = strstr(op, "backward") != NULL;
  return bw ? (lg ? SM_LOGBWD : SM_BWD) : (lg ? SM_LOGFWD : SM_FWD);
}

static tpu_status_t rd_sm_check(const tpu_k_call_t* call) {
  int mode = rd_sm_mode(call->op);
  bool bw = mode == SM_BWD || mode == SM_LOGBWD;
  int nin = bw ? 2 : 1;
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* out = &call->outputs[0];
  for (int i = 0; i < nin; ++i) {
    const tpu_tensor_t* t = tpu_ku_tensor(call, i);
    if (!t) return TPU_KU_INVALID(call, "expected a tensor (argument %d)", i);
    if (!rd_float_dt(t->dtype)) return tpu_ku_unsupported_dtype(call, t->dtype);
    if (!rd_same_shape(t, out)) return TPU_KU_INVALID(call, "input %d and output shapes differ", i);
  }
  if (!rd_float_dt(out->dtype)) return tpu_ku_unsupported_dtype(call, out->dtype);
  int32_t dim;
  return rd_line_dim(call, tpu_ku_tensor(call, 0), bw ? 2 : 1, &dim);
}

static tpu_status_t rd_sm_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_sm_check(call));
  int mode = rd_sm_mode(call->op);
  bool bw = mode == SM_BWD || mode == SM_LOGBWD;
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(rd_line_dim(call, in, bw ? 2 : 1, &dim));
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  const tpu_tensor_t* ops[3] = {in, bw ? tpu_ku_tensor(call, 1) : out, out};
  rd_map_t maps[3] = {RD_MAP_SAME, RD_MAP_SAME, RD_MAP_SAME};
  rd_plan_t pl;
  int nops = bw ? 3 : 2;
  rd_plan_init(&pl, in, in->ndim ? 1u << dim : 0u, nops, ops, maps, false);
  rd_sm_t sm;
  sm.mode = mode;
  sm.avx2 = rd_use_avx2();
  for (int k = 0; k < 3; ++k) sm.dt[k] = ops[k]->dtype;
  sm.pl = &pl;
  rd_rows(&pl, call->pool, pl.red.numel * 4, rd_sm_row, &sm);
  return TPU_OK;
}

/* ---- layer norm / rms norm ------------------------------------------------ */

/* Number of trailing dims covered by normalized_shape, validated. */
static tpu_status_t rd_norm_axis(const tpu_k_call_t* call, const tpu_tensor_t* in, int ai,
                                 uint32_t* out_mask, int64_t* out_n) {
  if (ai >= call->num_args || call->args[ai].kind != TPU_K_INTS)
    return TPU_KU_INVALID(call, "expected normalized_shape as int[]");
  const int64_t* ns = call->args[ai].v.ints.data;
  int64_t k = call->args[ai].v.ints.len;
  if (k < 1 || k > in->ndim)
    return TPU_KU_INVALID(call, "normalized_shape has %lld dims, input has %d", (long long)k, (int)in->ndim);
  uint32_t m = 0;
  int64_t n = 1;
  for (int64_t j = 0; j < k; ++j) {
    int32_t d = in->ndim - (int32_t)k + (int32_t)j;
    if (in->sizes[d] != ns[j])
      return TPU_KU_INVALID(call, "Given normalized_shape dim %lld = %lld, but input dim %d has size %lld",
                            (long long)j, (long long)ns[j], (int)d, (long long)in->sizes[d]);
    m |= 1u << d;
    n *= ns[j];
  }
  *out_mask = m;
  *out_n = n;
  return TPU_OK;
}

static bool rd_numel_matches(const tpu_tensor_t* t, int64_t n) { return tpu_tensor_numel(t) == n; }

/* Absent optional tensor: a 0-dim stand-in that is never read. */
static tpu_tensor_t rd_dummy(const tpu_tensor_t* like) {
  tpu_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = like->data;
  t.dtype = like->dtype;
  return t;
}

enum { LN_LAYER, LN_RMS };

typedef struct {
  int mode;
  bool has_w, has_b;
  double eps;
  int64_t n;
  int dt[8];
  const rd_plan_t* pl;
} rd_ln_t;

typedef struct {
  const rd_ln_t* ln;
  int pass;
  double s, s2, mean, rstd;
} rd_ln_cc_t;

/* ops: 0 x, 1 y, 2 w, 3 b, 4 mean, 5 rstd (rms: 4 rstd) */
static void rd_ln_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_ln_cc_t* c = (rd_ln_cc_t*)ctx;
  const rd_ln_t* ln = c->ln;
  double x[RD_CHUNK];
  float xf[RD_CHUNK], w[RD_CHUNK], b[RD_CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += RD_CHUNK) {
    int64_t m = rd_min(RD_CHUNK, n - i0);
    if (c->pass == 2 && ln->dt[1] == TPU_DTYPE_F64) { /* float64 output: normalise in double */
      double wd[RD_CHUNK], bd[RD_CHUNK];
      rd_load_d(p[0] + i0 * sb[0], sb[0], ln->dt[0], m, x);
      if (ln->has_w) rd_load_d(p[2] + i0 * sb[2], sb[2], ln->dt[2], m, wd);
      if (ln->has_b) rd_load_d(p[3] + i0 * sb[3], sb[3], ln->dt[3], m, bd);
      for (int64_t i = 0; i < m; ++i) {
        double y = (x[i] - c->mean) * c->rstd;
        if (ln->has_w) y *= wd[i];
        if (ln->has_b) y += bd[i];
        tpu_ku_store_f64(p[1] + (i0 + i) * sb[1], TPU_DTYPE_F64, y);
      }
      continue;
    }
    if (c->pass == 2) {
      rd_load_f(p[0] + i0 * sb[0], sb[0], ln->dt[0], m, xf);
      if (ln->has_w) rd_load_f(p[2] + i0 * sb[2], sb[2], ln->dt[2], m, w);
      if (ln->has_b) rd_load_f(p[3] + i0 * sb[3], sb[3], ln->dt[3], m, b);
      float mu = (float)c->mean, rs = (float)c->rstd;
      for (int64_t i = 0; i < m; ++i) xf[i] = (xf[i] - mu) * rs;
      if (ln->has_w)
        for (int64_t i = 0; i < m; ++i) xf[i] *= w[i];
      if (ln->has_b)
        for (int64_t i = 0; i < m; ++i) xf[i] += b[i];
      rd_store_run_f(p[1] + i0 * sb[1], sb[1], ln->dt[1], m, xf);
      continue;
    }
    rd_load_d(p[0] + i0 * sb[0], sb[0], ln->dt[0], m, x);
    if (c->pass == 0) {
      if (ln->mode == LN_RMS) {
        c->s2 += rd_sumsq_d(x, m, 0.0);
      } else {
        c->s += rd_sum_d(x, m);
      }
    } else if (c->pass == 1) {
      c->s2 += rd_sumsq_d(x, m, c->mean);
      c->s += rd_sum_d(x, m) - (double)m * c->mean;
    }
  }
  (void)flat0;
}

static void rd_ln_row(void* ctx, char* const* base, int64_t o) {
  const rd_ln_t* ln = (const rd_ln_t*)ctx;
  rd_ln_cc_t c;
  memset(&c, 0, sizeof(c));
  c.ln = ln;
  int64_t n = ln->pl->red.numel;
  double nn = (double)ln->n;
  if (ln->mode == LN_RMS) {
    c.pass = 0;
    rd_runs(ln->pl, base, 0, n, rd_ln_run, &c);
    c.mean = 0.0;
    c.rstd = 1.0 / sqrt(c.s2 / nn + ln->eps);
    c.pass = 2;
    rd_runs(ln->pl, base, 0, n, rd_ln_run, &c);
    if (ln->dt[4] == TPU_DTYPE_F64) {
      tpu_ku_store_f64(base[4], ln->dt[4], c.rstd);
    } else {
      rd_store_f(base[4], ln->dt[4], (float)c.rstd);
    }
    return;
  }
  c.pass = 0;
  rd_runs(ln->pl, base, 0, n, rd_ln_run, &c);
  c.mean = c.s / nn;
  c.s = c.s2 = 0;
  c.pass = 1;
  rd_runs(ln->pl, base, 0, n, rd_ln_run, &c);
  double var = (c.s2 - c.s * c.s / nn) / nn;
  if (var < 0) var = 0;
  c.rstd = 1.0 / sqrt(var + ln->eps);
  c.pass = 2;
  rd_runs(ln->pl, base, 0, n, rd_ln_run, &c);
  tpu_ku_store_f64(base[4], ln->dt[4], c.mean);
  tpu_ku_store_f64(base[5], ln->dt[5], c.rstd);
  (void)o;
}

static bool rd_opt_tensor(const tpu_k_call_t* call, int ai, const tpu_tensor_t** out) {
  *out = tpu_ku_tensor(call, ai);
  return *out != NULL;
}

static tpu_status_t rd_ln_prepare(const tpu_k_call_t* call, int mode, uint32_t* mask, int64_t* n) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  int nout = mode == LN_RMS ? 2 : 3;
  if (!in || call->num_outputs < nout) return TPU_KU_INVALID(call, "expected input and %d outputs", nout);
  if (!rd_float_dt(in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  if (in->ndim > 31) return TPU_KU_INVALID(call, "too many dims");
  TPU_RETURN_IF_ERROR(rd_norm_axis(call, in, 1, mask, n));
  for (int i = 0; i < nout; ++i)
    if (!rd_float_dt(call->outputs[i].dtype)) return tpu_ku_unsupported_dtype(call, call->outputs[i].dtype);
  if (!rd_same_shape(in, &call->outputs[0])) return TPU_KU_INVALID(call, "output shape differs from input");
  int64_t rows = 1;
  for (int32_t d = 0; d < in->ndim; ++d)
    if (!((*mask >> d) & 1u)) rows *= in->sizes[d];
  for (int i = 1; i < nout; ++i)
    if (call->outputs[i].ndim != in->ndim || !rd_numel_matches(&call->outputs[i], rows) ||
        !rd_shape_ok(in, *mask, &call->outputs[i]))
      return TPU_KU_INVALID(call, "output %d must have the input's leading shape and size-1 normalized dims", i);
  int wa = 2, ba = mode == LN_RMS ? -1 : 3;
  const tpu_tensor_t* t;
  if (mode == LN_LAYER) {
    /* PyTorch's CPU rule: weight and bias have the input's dtype, or all are
     * float32 under a bfloat16/float16 input. */
    const tpu_tensor_t *w = NULL, *b = NULL;
    rd_opt_tensor(call, wa, &w);
    rd_opt_tensor(call, ba, &b);
    const int first = w ? w->dtype : b ? b->dtype : in->dtype;
    const bool reduced = in->dtype == TPU_DTYPE_BF16 || in->dtype == TPU_DTYPE_F16;
    const bool mixed = reduced && first == TPU_DTYPE_F32;
    const int want = mixed ? TPU_DTYPE_F32 : in->dtype;
    if ((w && w->dtype != want) || (b && b->dtype != want))
      return TPU_KU_INVALID(call, "mixed dtype: input %s with weight %s and bias %s (parameters must have the "
                            "input's dtype, or be float32 for a bfloat16/float16 input)",
                            tpu_dtype_name((tpu_dtype_t)in->dtype),
                            w ? tpu_dtype_name((tpu_dtype_t)w->dtype) : "None",
                            b ? tpu_dtype_name((tpu_dtype_t)b->dtype) : "None");
  }
  if (rd_opt_tensor(call, wa, &t)) {
    if (!rd_float_dt(t->dtype)) return tpu_ku_unsupported_dtype(call, t->dtype);
    if (tpu_tensor_numel(t) != *n) return TPU_KU_INVALID(call, "weight has %lld elements, expected %lld",
                                                         (long long)tpu_tensor_numel(t), (long long)*n);
  }
  if (ba >= 0 && rd_opt_tensor(call, ba, &t)) {
    if (!rd_float_dt(t->dtype)) return tpu_ku_unsupported_dtype(call, t->dtype);
    if (tpu_tensor_numel(t) != *n) return TPU_KU_INVALID(call, "bias has %lld elements, expected %lld",
                                                         (long long)tpu_tensor_numel(t), (long long)*n);
  }
  return TPU_OK;
}

/* Weight/bias viewed with the input's trailing shape (they may have been
 * given flattened). */
static tpu_tensor_t rd_trailing_view(const tpu_tensor_t* w, const tpu_tensor_t* in, uint32_t mask) {
  if (w->ndim > 0 && w->ndim <= in->ndim) {
    bool same = true;
    for (int32_t j = 0; j < w->ndim; ++j)
      if (w->sizes[j] != in->sizes[in->ndim - w->ndim + j]) same = false;
    if (same) return *w;
  }
  /* contiguous weight given with another shape of the same numel */
  tpu_tensor_t v = *w;
  int32_t k = 0;
  for (int32_t d = 0; d < in->ndim; ++d)
    if ((mask >> d) & 1u) v.sizes[k++] = in->sizes[d];
  v.ndim = k;
  int64_t st = 1;
  for (int32_t j = k - 1; j >= 0; --j) {
    v.strides[j] = st;
    st *= v.sizes[j];
  }
  return v;
}

/* Writes v into every element of t (any strides). */
static void rd_fill(const tpu_tensor_t* t, double v) {
  const int64_t numel = tpu_tensor_numel(t);
  const size_t es = tpu_dtype_size((tpu_dtype_t)t->dtype);
  for (int64_t k = 0; k < numel; ++k) {
    int64_t off = 0, rem = k;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
      off += (rem % t->sizes[d]) * t->strides[d];
      rem /= t->sizes[d];
    }
    tpu_ku_store_f64((char*)t->data + off * (int64_t)es, t->dtype, v);
  }
}

static tpu_status_t rd_ln_check(const tpu_k_call_t* call) {
  uint32_t mask;
  int64_t n;
  return rd_ln_prepare(call, strstr(call->op, "rms") ? LN_RMS : LN_LAYER, &mask, &n);
}

static tpu_status_t rd_ln_exec(const tpu_k_call_t* call) {
  int mode = strstr(call->op, "rms") ? LN_RMS : LN_LAYER;
  uint32_t mask;
  int64_t n;
  TPU_RETURN_IF_ERROR(rd_ln_prepare(call, mode, &mask, &n));
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (tpu_tensor_numel(in) == 0) {
    /* rows of no elements (normalized size 0): mean 0 and rstd NaN, as on the CPU */
    if (mode == LN_LAYER && n == 0) {
      rd_fill(&call->outputs[1], 0.0);
      rd_fill(&call->outputs[2], NAN);
    }
    return TPU_OK;
  }
  const tpu_tensor_t* w = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* b = mode == LN_LAYER ? tpu_ku_tensor(call, 3) : NULL;
  tpu_tensor_t dummy = rd_dummy(in), wv = w ? rd_trailing_view(w, in, mask) : dummy,
               bv = b ? rd_trailing_view(b, in, mask) : dummy;
  rd_ln_t ln;
  memset(&ln, 0, sizeof(ln));
  ln.mode = mode;
  ln.has_w = w != NULL;
  ln.has_b = b != NULL;
  ln.n = n;
  if (mode == LN_RMS) {
    ln.eps = tpu_ku_is_none(call, 3) ? (in->dtype == TPU_DTYPE_F64 ? DBL_EPSILON : FLT_EPSILON)
                                     : tpu_ku_double(call, 3, 1e-6);
  } else {
    ln.eps = tpu_ku_double(call, 4, 1e-5);
  }
  const tpu_tensor_t* ops[6] = {in, &call->outputs[0], &wv, &bv, &call->outputs[1],
                                mode == LN_RMS ? &call->outputs[1] : &call->outputs[2]};
  rd_map_t maps[6] = {RD_MAP_SAME, RD_MAP_SAME, RD_MAP_RIGHT, RD_MAP_RIGHT, RD_MAP_SAME, RD_MAP_SAME};
  for (int k = 0; k < 6; ++k) ln.dt[k] = ops[k]->dtype;
  rd_plan_t pl;
  rd_plan_init(&pl, in, mask, 6, ops, maps, false);
  ln.pl = &pl;
  rd_rows(&pl, call->pool, n * 3, rd_ln_row, &ln);
  return TPU_OK;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
 * weight?, bias?, output_mask) -> (grad_input, grad_weight, grad_bias) */
typedef struct {
  bool has_w;
  int64_t n;
  int dt[6];
  const rd_plan_t* pl;
} rd_lnb_t;

typedef struct {
  const rd_lnb_t* c;
  int pass;
  double mean, rstd, sg, sgx;
} rd_lnb_cc_t;

/* ops: 0 go, 1 x, 2 w, 3 gi, 4 mean, 5 rstd */
static void rd_lnb_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_lnb_cc_t* c = (rd_lnb_cc_t*)ctx;
  const rd_lnb_t* lb = c->c;
  double go[RD_CHUNK], x[RD_CHUNK], w[RD_CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += RD_CHUNK) {
    int64_t m = rd_min(RD_CHUNK, n - i0);
    rd_load_d(p[0] + i0 * sb[0], sb[0], lb->dt[0], m, go);
    rd_load_d(p[1] + i0 * sb[1], sb[1], lb->dt[1], m, x);
    if (lb->has_w) {
      rd_load_d(p[2] + i0 * sb[2], sb[2], lb->dt[2], m, w);
      for (int64_t i = 0; i < m; ++i) go[i] *= w[i];
    }
    if (c->pass == 0) {
      for (int64_t i = 0; i < m; ++i) {
        c->sg += go[i];
        c->sgx += go[i] * (x[i] - c->mean) * c->rstd;
      }
    } else {
      double nn = (double)lb->n, a = c->sg / nn, bm = c->sgx / nn;
      for (int64_t i = 0; i < m; ++i) {
        double xh = (x[i] - c->mean) * c->rstd;
        tpu_ku_store_f64(p[3] + (i0 + i) * sb[3], lb->dt[3], c->rstd * (go[i] - a - xh * bm));
      }
    }
  }
  (void)flat0;
}

static void rd_lnb_row(void* ctx, char* const* base, int64_t o) {
  const rd_lnb_t* lb = (const rd_lnb_t*)ctx;
  rd_lnb_cc_t c;
  memset(&c, 0, sizeof(c));
  c.c = lb;
  c.mean = tpu_ku_load_f64(base[4], lb->dt[4]);
  c.rstd = tpu_ku_load_f64(base[5], lb->dt[5]);
  for (c.pass = 0; c.pass < 2; ++c.pass) rd_runs(lb->pl, base, 0, lb->pl->red.numel, rd_lnb_run, &c);
  (void)o;
}

/* grad_weight / grad_bias: reduce over rows. ops: 0 go, 1 x, 2 mean, 3 rstd,
 * 4 gw, 5 gb; plan's outer space = normalized positions. */
typedef struct {
  bool gw, gb;
  int dt[6];
  const rd_plan_t* pl;
  int64_t inner, groups_per_row;
} rd_lnw_t;

typedef struct {
  const rd_lnw_t* c;
  int64_t nl;
  double* aw;
  double* ab;
} rd_lnw_cc_t;

static void rd_lnw_run(void* ctx, char* const* p, const int64_t* sb, int64_t n, int64_t flat0) {
  rd_lnw_cc_t* cc = (rd_lnw_cc_t*)ctx;
  const rd_lnw_t* c = cc->c;
  int32_t last = c->pl->outer.nd - 1;
  int64_t s0 = last >= 0 ? c->pl->outer.st[0][last] : 0, s1 = last >= 0 ? c->pl->outer.st[1][last] : 0;
  double go[RD_LANES], x[RD_LANES];
  for (int64_t j = 0; j < n; ++j) {
    double mean = tpu_ku_load_f64(p[2] + j * sb[2], c->dt[2]);
    double rstd = tpu_ku_load_f64(p[3] + j * sb[3], c->dt[3]);
    rd_load_d(p[0] + j * sb[0], s0, c->dt[0], cc->nl, go);
    for (int64_t l = 0; l < cc->nl; ++l) cc->ab[l] += go[l];
    if (c->gw) {
      rd_load_d(p[1] + j * sb[1], s1, c->dt[1], cc->nl, x);
      for (int64_t l = 0; l < cc->nl; ++l) cc->aw[l] += go[l] * (x[l] - mean) * rstd;
    }
  }
  (void)flat0;
}

static void rd_lnw_body(void* ctx, int64_t g0, int64_t g1) {
  const rd_lnw_t* c = (const rd_lnw_t*)ctx;
  const rd_plan_t* pl = c->pl;
  int32_t last = pl->outer.nd - 1;
  for (int64_t g = g0; g < g1; ++g) {
    int64_t row = g / c->groups_per_row, l0 = (g % c->groups_per_row) * RD_LANES;
    int64_t nl = rd_min(RD_LANES, c->inner - l0);
    int64_t idx[TPU_MAX_DIMS], off[RD_MAXOPS];
    rd_unravel(&pl->outer, pl->nops, row * c->inner + l0, idx, off);
    char* base[RD_MAXOPS];
    for (int k = 0; k < pl->nops; ++k) base[k] = pl->base[k] + off[k];
    double aw[RD_LANES], ab[RD_LANES];
    for (int64_t l = 0; l < nl; ++l) aw[l] = ab[l] = 0.0;
    rd_lnw_cc_t cc = {c, nl, aw, ab};
    rd_runs(pl, base, 0, pl->red.numel, rd_lnw_run, &cc);
    for (int64_t l = 0; l < nl; ++l) {
      int64_t s4 = last >= 0 ? pl->outer.st[4][last] : 0, s5 = last >= 0 ? pl->outer.st[5][last] : 0;
      if (c->gw) tpu_ku_store_f64(base[4] + l * s4, c->dt[4], aw[l]);
      if (c->gb) tpu_ku_store_f64(base[5] + l * s5, c->dt[5], ab[l]);
    }
  }
}

static bool rd_mask_bit(const tpu_k_call_t* call, int ai, int i) {
  if (ai < call->num_args && call->args[ai].kind == TPU_K_INTS && i < call->args[ai].v.ints.len)
    return call->args[ai].v.ints.data[i] != 0;
  return true;
}

static bool rd_out_present(const tpu_k_call_t* call, int i) {
  if (i >= call->num_outputs) return false;
  const tpu_tensor_t* t = &call->outputs[i];
  return t->dtype != TPU_DTYPE_INVALID && (t->data != NULL || tpu_tensor_numel(t) == 0);
}

static tpu_status_t rd_lnb_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* go = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* in = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* mean = tpu_ku_tensor(call, 3);
  const tpu_tensor_t* rstd = tpu_ku_tensor(call, 4);
  if (!go || !in || !mean || !rstd) return TPU_KU_INVALID(call, "expected grad_out, input, mean, rstd tensors");
  if (in->ndim > 31) return TPU_KU_INVALID(call, "too many dims");
  const tpu_tensor_t* all[4] = {go, in, mean, rstd};
  for (int i = 0; i < 4; ++i)
    if (!rd_float_dt(all[i]->dtype)) return tpu_ku_unsupported_dtype(call, all[i]->dtype);
  if (!rd_same_shape(go, in)) return TPU_KU_INVALID(call, "grad_out and input shapes differ");
  uint32_t mask;
  int64_t n;
  TPU_RETURN_IF_ERROR(rd_norm_axis(call, in, 2, &mask, &n));
  int64_t rows = 1;
  for (int32_t d = 0; d < in->ndim; ++d)
    if (!((mask >> d) & 1u)) rows *= in->sizes[d];
  if (tpu_tensor_numel(mean) != rows || tpu_tensor_numel(rstd) != rows)
    return TPU_KU_INVALID(call, "mean/rstd must have %lld elements", (long long)rows);
  const tpu_tensor_t* w = tpu_ku_tensor(call, 5);
  if (w && tpu_tensor_numel(w) != n) return TPU_KU_INVALID(call, "weight must have %lld elements", (long long)n);
  if (w && !rd_float_dt(w->dtype)) return tpu_ku_unsupported_dtype(call, w->dtype);
  for (int i = 0; i < 3; ++i) {
    if (!rd_mask_bit(call, 7, i) || !rd_out_present(call, i)) continue;
    const tpu_tensor_t* o = &call->outputs[i];
    if (!rd_float_dt(o->dtype)) return tpu_ku_unsupported_dtype(call, o->dtype);
    if (i == 0 && !rd_same_shape(o, in)) return TPU_KU_INVALID(call, "grad_input shape differs from input");
    if (i > 0 && tpu_tensor_numel(o) != n) return TPU_KU_INVALID(call, "output %d must have %lld elements", i, (long long)n);
  }
  return TPU_OK;
}

static tpu_status_t rd_lnb_exec(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rd_lnb_check(call));
  const tpu_tensor_t* go = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* in = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* w = tpu_ku_tensor(call, 5);
  uint32_t mask;
  int64_t n;
  TPU_RETURN_IF_ERROR(rd_norm_axis(call, in, 2, &mask, &n));
  /* mean/rstd viewed with the input's rank: leading sizes, size-1 tail */
  tpu_tensor_t mv = *tpu_ku_tensor(call, 3), rv = *tpu_ku_tensor(call, 4);
  if (mv.ndim != in->ndim || rv.ndim != in->ndim) {
    tpu_tensor_t* vs[2] = {&mv, &rv};
    for (int k = 0; k < 2; ++k) {
      int64_t st = 1;
      vs[k]->ndim = in->ndim;
      for (int32_t d = in->ndim - 1; d >= 0; --d) {
        vs[k]->sizes[d] = ((mask >> d) & 1u) ? 1 : in->sizes[d];
        vs[k]->strides[d] = st;
        st *= vs[k]->sizes[d];
      }
    }
  }
  tpu_tensor_t dummy = rd_dummy(in), wv = w ? rd_trailing_view(w, in, mask) : dummy;
  bool do_gi = rd_mask_bit(call, 7, 0) && rd_out_present(call, 0);
  bool do_gw = rd_mask_bit(call, 7, 1) && rd_out_present(call, 1);
  bool do_gb = rd_mask_bit(call, 7, 2) && rd_out_present(call, 2);
  if (do_gi && tpu_tensor_numel(in) > 0) {
    const tpu_tensor_t* ops[6] = {go, in, &wv, &call->outputs[0], &mv, &rv};
    rd_map_t maps[6] = {RD_MAP_SAME, RD_MAP_SAME, RD_MAP_RIGHT, RD_MAP_SAME, RD_MAP_SAME, RD_MAP_SAME};
    rd_plan_t pl;
    rd_plan_init(&pl, in, mask, 6, ops, maps, false);
    rd_lnb_t lb;
    lb.has_w = w != NULL;
    lb.n = n;
    for (int k = 0; k < 6; ++k) lb.dt[k] = ops[k]->dtype;
    lb.pl = &pl;
    rd_rows(&pl, call->pool, n * 2, rd_lnb_row, &lb);
  }
  if ((do_gw || do_gb) && n > 0) {
    tpu_tensor_t gwv = do_gw ? rd_trailing_view(&call->outputs[1], in, mask) : dummy;
    tpu_tensor_t gbv = do_gb ? rd_trailing_view(&call->outputs[2], in, mask) : dummy;
    const tpu_tensor_t* ops[6] = {go, in, &mv, &rv, &gwv, &gbv};
    rd_map_t maps[6] = {RD_MAP_SAME, RD_MAP_SAME, RD_MAP_SAME, RD_MAP_SAME, RD_MAP_RIGHT, RD_MAP_RIGHT};
    uint32_t all = in->ndim >= 32 ? 0xffffffffu : (1u << in->ndim) - 1u;
    rd_plan_t pl;
    rd_plan_init(&pl, in, all & ~mask, 6, ops, maps, false);
    rd_lnw_t c;
    c.gw = do_gw;
    c.gb = do_gb;
    for (int k = 0; k < 6; ++k) c.dt[k] = ops[k]->dtype;
    c.pl = &pl;
    c.inner = pl.outer.nd > 0 ? pl.outer.sz[pl.outer.nd - 1] : 1;
    c.groups_per_row = (c.inner + RD_LANES - 1) / RD_LANES;
    int64_t groups = pl.outer.numel / c.inner * c.groups_per_row;
    int64_t grain = 32768 / (pl.red.numel * RD_LANES + 1);
    tpu_parallel_for(call->pool, groups, grain < 1 ? 1 : grain, rd_lnw_body, &c);
  }
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_reduce_entries[] = {
    {"aten::sum.dim_IntList", rd_run, rd_check, 0, NULL},
    {"aten::sum.IntList_out", rd_run, rd_check, 0, NULL},
    {"aten::sum", rd_run, rd_check, 0, NULL},
    {"aten::sum.out", rd_run, rd_check, 0, NULL},
    {"aten::mean.dim", rd_run, rd_check, 0, NULL},
    {"aten::mean.out", rd_run, rd_check, 0, NULL},
    {"aten::mean", rd_run, rd_check, 0, NULL},
    {"aten::prod", rd_run, rd_check, 0, NULL},
    {"aten::prod.out", rd_run, rd_check, 0, NULL},
    {"aten::prod.dim_int", rd_run, rd_check, 0, NULL},
    {"aten::prod.int_out", rd_run, rd_check, 0, NULL},
    {"aten::amax", rd_run, rd_check, 0, NULL},
    {"aten::amax.out", rd_run, rd_check, 0, NULL},
    {"aten::amin", rd_run, rd_check, 0, NULL},
    {"aten::amin.out", rd_run, rd_check, 0, NULL},
    {"aten::max", rd_run, rd_check, 0, NULL},
    {"aten::max.unary_out", rd_run, rd_check, 0, NULL},
    {"aten::min", rd_run, rd_check, 0, NULL},
    {"aten::min.unary_out", rd_run, rd_check, 0, NULL},
    {"aten::max.dim", rd_run, rd_check, 0, NULL},
    {"aten::max.dim_max", rd_run, rd_check, 0, NULL},
    {"aten::min.dim", rd_run, rd_check, 0, NULL},
    {"aten::min.dim_min", rd_run, rd_check, 0, NULL},
    {"aten::argmax", rd_run, rd_check, 0, NULL},
    {"aten::argmax.out", rd_run, rd_check, 0, NULL},
    {"aten::argmin", rd_run, rd_check, 0, NULL},
    {"aten::argmin.out", rd_run, rd_check, 0, NULL},
    {"aten::any", rd_run, rd_check, 0, NULL},
    {"aten::any.all_out", rd_run, rd_check, 0, NULL},
    {"aten::any.dim", rd_run, rd_check, 0, NULL},
    {"aten::any.out", rd_run, rd_check, 0, NULL},
    {"aten::any.dims", rd_run, rd_check, 0, NULL},
    {"aten::any.dims_out", rd_run, rd_check, 0, NULL},
    {"aten::all", rd_run, rd_check, 0, NULL},
    {"aten::all.all_out", rd_run, rd_check, 0, NULL},
    {"aten::all.dim", rd_run, rd_check, 0, NULL},
    {"aten::all.out", rd_run, rd_check, 0, NULL},
    {"aten::all.dims", rd_run, rd_check, 0, NULL},
    {"aten::all.dims_out", rd_run, rd_check, 0, NULL},
    {"aten::var.correction", rd_run, rd_check, 0, NULL},
    {"aten::var.correction_out", rd_run, rd_check, 0, NULL},
    {"aten::std.correction", rd_run, rd_check, 0, NULL},
    {"aten::std.correction_out", rd_run, rd_check, 0, NULL},
    {"aten::var_mean.correction", rd_run, rd_check, 0, NULL},
    {"aten::var_mean.correction_out", rd_run, rd_check, 0, NULL},
    {"aten::linalg_vector_norm", rd_run, rd_check, 0, NULL},
    {"aten::linalg_vector_norm.out", rd_run, rd_check, 0, NULL},
    {"aten::logsumexp", rd_run, rd_check, 0, NULL},
    {"aten::logsumexp.out", rd_run, rd_check, 0, NULL},
    {"aten::cumsum", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::cumsum.out", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::cumprod", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::cumprod.out", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::_logcumsumexp", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::_logcumsumexp.out", rd_scan_exec, rd_scan_check, 0, NULL},
    {"aten::_cummax_helper", rd_cumext_exec, rd_cumext_check, 0, NULL},
    {"aten::_cummin_helper", rd_cumext_exec, rd_cumext_check, 0, NULL},
    {"aten::median", rd_med_exec, rd_med_check, 0, NULL},
    {"aten::median.dim_values", rd_med_exec, rd_med_check, 0, NULL},
    {"aten::nanmedian", rd_med_exec, rd_med_check, 0, NULL},
    {"aten::nanmedian.dim_values", rd_med_exec, rd_med_check, 0, NULL},
    {"aten::kthvalue.values", rd_sel_exec, rd_sel_check, 0, NULL},
    {"aten::mode", rd_sel_exec, rd_sel_check, 0, NULL},
    {"aten::mode.values", rd_sel_exec, rd_sel_check, 0, NULL},
    {"aten::_softmax", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_softmax.out", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_log_softmax", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_log_softmax.out", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_softmax_backward_data", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_softmax_backward_data.out", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_log_softmax_backward_data", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::_log_softmax_backward_data.out", rd_sm_exec, rd_sm_check, 0, NULL},
    {"aten::native_layer_norm", rd_ln_exec, rd_ln_check, 0, NULL},
    {"aten::native_layer_norm.out", rd_ln_exec, rd_ln_check, 0, NULL},
    {"aten::native_layer_norm_backward", rd_lnb_exec, rd_lnb_check, 0, NULL},
    {"aten::native_layer_norm_backward.out", rd_lnb_exec, rd_lnb_check, 0, NULL},
    {"aten::_fused_rms_norm", rd_ln_exec, rd_ln_check, 0, NULL},
};
const size_t tpu_k_reduce_count = sizeof(tpu_k_reduce_entries) / sizeof(tpu_k_reduce_entries[0]);
