/* random.c - kernel family "random": uniform_, normal_, bernoulli_, random_,
 * exponential_ and their functional/out forms (see tpu/kernels.h for the ABI).
 *
 * Counter-based: element i of the iteration (the output walked in memory
 * order, see tpu_ku_iter) takes one Philox4x32-10 block, counter
 * (call->rng_offset + i) in the low 64 bits, key call->rng_seed, giving four
 * 32-bit draws. Results therefore depend only on (seed, offset, shape,
 * layout), never on the thread count. Uniform doubles use 53 bits (two draws);
 * normals use Box-Muller on two such uniforms (all four draws). */
#include "kernels/kutil.h"

#define RK_GRAIN 16384
#define RK_TWO_PI 6.28318530717958647692

/* ---- Philox4x32-10 ---------------------------------------------------------- */

static inline void rk_philox(uint64_t counter, uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* [0, 1) with 53 bits */
static inline double rk_u53(uint32_t lo, uint32_t hi) {
  uint64_t x = ((uint64_t)hi << 32) | lo;
  return (double)(x >> 11) * 0x1.0p-53;
}

/* ---- kinds ------------------------------------------------------------------ */

typedef enum {
  RK_UNIFORM,     /* self, from, to */
  RK_NORMAL,      /* self, mean, std */
  RK_NORMAL_TF,   /* mean tensor, std float */
  RK_NORMAL_FT,   /* mean float, std tensor */
  RK_NORMAL_TT,   /* mean tensor, std tensor */
  RK_BERNOULLI_F, /* self, p float */
  RK_BERNOULLI_T, /* self, p tensor */
  RK_BERNOULLI_S, /* self holds the probabilities */
  RK_RANDOM,      /* self */
  RK_RANDOM_FROM, /* self, from, to? */
  RK_RANDOM_TO,   /* self, to */
  RK_EXPONENTIAL, /* self, lambd */
} rk_kind_t;

typedef struct {
  int kind;
  int out_dtype;
  int nin;               /* tensor inputs iterated after the output */
  int in_dtype[2];
  double a, b;           /* from/to, mean/std, p, lambda */
  int digits;            /* uniform mantissa bits of the output dtype */
  int64_t base;          /* random_: lowest value */
  uint64_t range;        /* random_: number of values; 0 = all 2^64 */
  uint64_t seed, offset;
  int err;               /* data-dependent argument error (atomic) */
} rk_ctx_t;

typedef struct {
  rk_ctx_t* c;
  const tpu_ku_iter_t* it;
  int64_t pos;
} rk_chunk_t;

static int rk_digits(int dt) {
  switch (dt) {
    case TPU_DTYPE_F64: return 53;
    case TPU_DTYPE_F32: return 24;
    case TPU_DTYPE_F16: return 11;
    case TPU_DTYPE_BF16: return 8;
    default: return 0;
  }
}

static inline double rk_normal(const uint32_t r[4]) {
  double u1 = 1.0 - rk_u53(r[0], r[1]); /* (0, 1] */
  double u2 = rk_u53(r[2], r[3]);
  return sqrt(-2.0 * log(u1)) * cos(RK_TWO_PI * u2);
}

static void rk_inner(void* vctx, char** ptrs, const int64_t* st, int64_t n) {
  rk_chunk_t* ch = (rk_chunk_t*)vctx;
  rk_ctx_t* c = ch->c;
  const int dt = c->out_dtype;
  const uint64_t ctr0 = c->offset + (uint64_t)ch->pos;
  bool bad = false;
  uint32_t r[4];
  for (int64_t i = 0; i < n; ++i) {
    rk_philox(ctr0 + (uint64_t)i, c->seed, r);
    char* o = ptrs[0] + i * st[0];
    switch (c->kind) {
      case RK_UNIFORM: {
        double u;
        if (c->digits == 53) u = rk_u53(r[0], r[1]);
        else u = (double)(r[0] >> (32 - c->digits)) * ldexp(1.0, -c->digits);
        tpu_ku_store_f64(o, dt, u * (c->b - c->a) + c->a);
        break;
      }
      case RK_NORMAL:
        tpu_ku_store_f64(o, dt, c->a + c->b * rk_normal(r));
        break;
      case RK_NORMAL_TF:
      case RK_NORMAL_FT:
      case RK_NORMAL_TT: {
        double mean = c->a, sd = c->b;
        int k = 1;
        if (c->kind != RK_NORMAL_FT) {
          mean = tpu_ku_load_f64(ptrs[k] + i * st[k], c->in_dtype[k - 1]);
          ++k;
        }
        if (c->kind != RK_NORMAL_TF) {
          sd = tpu_ku_load_f64(ptrs[k] + i * st[k], c->in_dtype[k - 1]);
          if (!(sd >= 0.0)) bad = true;
        }
        tpu_ku_store_f64(o, dt, mean + sd * rk_normal(r));
        break;
      }
      case RK_BERNOULLI_F:
        tpu_ku_store_i64(o, dt, rk_u53(r[0], r[1]) < c->a ? 1 : 0);
        break;
      case RK_BERNOULLI_T:
      case RK_BERNOULLI_S: {
        double p = tpu_ku_load_f64(ptrs[1] + i * st[1], c->in_dtype[0]);
        if (!(p >= 0.0 && p <= 1.0)) bad = true;
        tpu_ku_store_i64(o, dt, rk_u53(r[0], r[1]) < p ? 1 : 0);
        break;
      }
      case RK_RANDOM:
      case RK_RANDOM_FROM:
      case RK_RANDOM_TO: {
        uint64_t x;
        if (c->range == 0) x = ((uint64_t)r[1] << 32) | r[0];
        else if (c->range > 0xffffffffu) x = (((uint64_t)r[1] << 32) | r[0]) % c->range;
        else x = r[0] % c->range;
        int64_t v = (int64_t)((uint64_t)c->base + x);
        if (tpu_dtype_is_floating((tpu_dtype_t)dt)) tpu_ku_store_f64(o, dt, (double)v);
        else tpu_ku_store_i64(o, dt, v);
        break;
      }
      case RK_EXPONENTIAL:
        tpu_ku_store_f64(o, dt, -1.0 / c->a * log1p(-rk_u53(r[0], r[1])));
        break;
      default:
        break;
    }
  }
  ch->pos += n;
  if (bad) __atomic_store_n(&c->err, 1, __ATOMIC_RELAXED);
}

static void rk_body(void* vctx, int64_t begin, int64_t end) {
  rk_chunk_t ch = *(const rk_chunk_t*)vctx;
  ch.pos = begin;
  tpu_ku_iter_run(ch.it, begin, end, rk_inner, &ch);
}

/* ---- setup ------------------------------------------------------------------ */

static bool rk_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }

static int64_t rk_dtype_max(int dt) {
  switch (dt) {
    case TPU_DTYPE_I64: return INT64_MAX;
    case TPU_DTYPE_I32: return INT32_MAX;
    case TPU_DTYPE_I16: return INT16_MAX;
    case TPU_DTYPE_I8: return INT8_MAX;
    case TPU_DTYPE_U8: return UINT8_MAX;
    case TPU_DTYPE_BOOL: return 1;
    default: return (int64_t)1 << rk_digits(dt);
  }
}

static int64_t rk_dtype_min(int dt) {
  switch (dt) {
    case TPU_DTYPE_I64: return INT64_MIN;
    case TPU_DTYPE_I32: return INT32_MIN;
    case TPU_DTYPE_I16: return INT16_MIN;
    case TPU_DTYPE_I8: return INT8_MIN;
    case TPU_DTYPE_U8:
    case TPU_DTYPE_BOOL: return 0;
    default: return -((int64_t)1 << rk_digits(dt));
  }
}

static tpu_status_t rk_setup(const tpu_k_call_t* call, int kind, rk_ctx_t* c, tpu_ku_iter_t* it) {
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->seed = call->rng_seed;
  c->offset = call->rng_offset;
  if (call->num_outputs < 1 || !call->outputs)
    return TPU_KU_INVALID(call, "expected an output tensor");
  const tpu_tensor_t* out = &call->outputs[0];
  const int dt = out->dtype;
  if (!rk_dtype_ok(dt)) return tpu_ku_unsupported_dtype(call, dt);
  c->out_dtype = dt;
  const bool fl = tpu_dtype_is_floating((tpu_dtype_t)dt);
  const tpu_tensor_t* ins[2] = {NULL, NULL};
  switch (kind) {
    case RK_UNIFORM:
      if (!fl) return tpu_ku_unsupported_dtype(call, dt);
      c->a = tpu_ku_double(call, 1, 0.0);
      c->b = tpu_ku_double(call, 2, 1.0);
      if (!(c->a <= c->b))
        return TPU_KU_INVALID(call, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g", c->a, c->b);
      c->digits = rk_digits(dt);
      break;
    case RK_NORMAL:
      if (!fl) return tpu_ku_unsupported_dtype(call, dt);
      c->a = tpu_ku_double(call, 1, 0.0);
      c->b = tpu_ku_double(call, 2, 1.0);
      if (!(c->b >= 0.0)) return TPU_KU_INVALID(call, "normal expects std >= 0.0, but found std %g", c->b);
      break;
    case RK_NORMAL_TF:
    case RK_NORMAL_FT:
    case RK_NORMAL_TT:
      if (!fl) return tpu_ku_unsupported_dtype(call, dt);
      if (kind != RK_NORMAL_FT) {
        ins[c->nin] = tpu_ku_tensor(call, 0);
        if (!ins[c->nin]) return TPU_KU_INVALID(call, "mean must be a tensor");
        c->nin++;
      } else {
        c->a = tpu_ku_double(call, 0, 0.0);
      }
      if (kind != RK_NORMAL_TF) {
        ins[c->nin] = tpu_ku_tensor(call, 1);
        if (!ins[c->nin]) return TPU_KU_INVALID(call, "std must be a tensor");
        c->nin++;
      } else {
        c->b = tpu_ku_double(call, 1, 1.0);
        if (!(c->b >= 0.0)) return TPU_KU_INVALID(call, "normal expects std >= 0.0, but found std %g", c->b);
      }
      break;
    case RK_BERNOULLI_F:
      c->a = tpu_ku_double(call, 1, 0.5);
      if (!(c->a >= 0.0 && c->a <= 1.0))
        return TPU_KU_INVALID(call, "bernoulli_ expects p to be in [0, 1], but got p=%g", c->a);
      break;
    case RK_BERNOULLI_T:
    case RK_BERNOULLI_S:
      ins[0] = tpu_ku_tensor(call, kind == RK_BERNOULLI_T ? 1 : 0);
      if (!ins[0]) return TPU_KU_INVALID(call, "p must be a tensor");
      c->nin = 1;
      break;
    case RK_RANDOM:
      c->base = 0;
      c->range = (uint64_t)rk_dtype_max(dt) + 1u;
      break;
    case RK_RANDOM_FROM:
    case RK_RANDOM_TO: {
      int64_t from = kind == RK_RANDOM_TO ? 0 : tpu_ku_int(call, 1, 0);
      int to_idx = kind == RK_RANDOM_TO ? 1 : 2;
      bool has_to = !tpu_ku_is_none(call, to_idx);
      if (has_to) {
        int64_t to = tpu_ku_int(call, to_idx, 0);
        if (from >= to)
          return TPU_KU_INVALID(call, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                                (long long)from, (long long)to);
        if (from < rk_dtype_min(dt) || to - 1 > rk_dtype_max(dt))
          return TPU_KU_INVALID(call, "random_ expects [from, to) = [%lld, %lld) to fit in dtype %s",
                                (long long)from, (long long)to, tpu_dtype_name((tpu_dtype_t)dt));
        c->range = (uint64_t)to - (uint64_t)from;
      } else {
        int64_t hi = rk_dtype_max(dt);
        if (from > hi || from < rk_dtype_min(dt))
          return TPU_KU_INVALID(call, "random_ expects 'from' = %lld to fit in dtype %s",
                                (long long)from, tpu_dtype_name((tpu_dtype_t)dt));
        c->range = (uint64_t)hi - (uint64_t)from + 1u; /* wraps to 0 for the full int64 range */
      }
      c->base = from;
      break;
    }
    case RK_EXPONENTIAL:
      if (!fl) return tpu_ku_unsupported_dtype(call, dt);
      c->a = tpu_ku_double(call, 1, 1.0);
      if (!(c->a > 0.0))
        return TPU_KU_INVALID(call, "exponential_ expects lambda > 0.0, but found lambda=%g", c->a);
      break;
    default:
      return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: unknown random kind %d", call->op, kind);
  }
  const tpu_tensor_t* ops[3] = {out, ins[0], ins[1]};
  for (int j = 0; j < c->nin; ++j) {
    if (!rk_dtype_ok(ins[j]->dtype)) return tpu_ku_unsupported_dtype(call, ins[j]->dtype);
    c->in_dtype[j] = ins[j]->dtype;
  }
  return tpu_ku_iter_init(it, 1 + c->nin, ops, call->op);
}

static tpu_status_t rk_check(const tpu_k_call_t* call, int kind) {
  rk_ctx_t c;
  tpu_ku_iter_t it;
  return rk_setup(call, kind, &c, &it);
}

static tpu_status_t rk_run(const tpu_k_call_t* call, int kind) {
  rk_ctx_t c;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(rk_setup(call, kind, &c, &it));
  if (it.numel == 0) return TPU_OK;
  rk_chunk_t ch = {&c, &it, 0};
  tpu_parallel_for(call->pool, it.numel, RK_GRAIN, rk_body, &ch);
  if (__atomic_load_n(&c.err, __ATOMIC_RELAXED)) {
    if (kind == RK_BERNOULLI_T || kind == RK_BERNOULLI_S)
      return TPU_KU_INVALID(call, "Expected p_in >= 0 && p_in <= 1 to be true");
    return TPU_KU_INVALID(call, "normal expects all elements of std >= 0.0");
  }
  return TPU_OK;
}

/* ---- dropout, randperm, multinomial -----------------------------------------
 * Element (or sample) i draws from Philox counter rng_offset + i. */

/* Byte offset of the element with row-major linear index `lin`. */
static int64_t rk_offset_of(const tpu_tensor_t* t, int64_t lin) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    int64_t sz = t->sizes[d] > 0 ? t->sizes[d] : 1;
    off += (lin % sz) * t->strides[d];
    lin /= sz;
  }
  return off * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

typedef struct {
  const tpu_tensor_t *in, *out, *mask;
  double p, scale;
  bool train;
  uint64_t seed, ctr0;
} rk_dropout_t;

static void rk_dropout_body(void* vctx, int64_t begin, int64_t end) {
  const rk_dropout_t* c = (const rk_dropout_t*)vctx;
  for (int64_t i = begin; i < end; ++i) {
    double x = tpu_ku_load_f64((const char*)c->in->data + rk_offset_of(c->in, i), c->in->dtype);
    bool keep = true;
    if (c->train) {
      uint32_t r[4];
      rk_philox(c->ctr0 + (uint64_t)i, c->seed, r);
      keep = rk_u53(r[0], r[1]) >= c->p;
    }
    tpu_ku_store_f64((char*)c->out->data + rk_offset_of(c->out, i), c->out->dtype,
                     keep ? (c->train ? x * c->scale : x) : 0.0);
    if (c->mask->dtype != TPU_DTYPE_INVALID)
      *((uint8_t*)c->mask->data + rk_offset_of(c->mask, i)) = keep ? 1 : 0;
  }
}

static tpu_status_t rk_dropout_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* in = tpu_ku_tensor(call, 0);
  if (!in || call->num_outputs < 2) return TPU_KU_INVALID(call, "expected (input, p, train)");
  if (!tpu_dtype_is_floating((tpu_dtype_t)in->dtype)) return tpu_ku_unsupported_dtype(call, in->dtype);
  double p = tpu_ku_double(call, 1, 0.5);
  if (!(p >= 0.0 && p <= 1.0)) return TPU_KU_INVALID(call, "dropout probability has to be between 0 and 1, but got %g", p);
  return TPU_OK;
}

static tpu_status_t rk_dropout_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rk_dropout_check(call));
  rk_dropout_t c;
  c.in = tpu_ku_tensor(call, 0);
  c.out = &call->outputs[0];
  c.mask = &call->outputs[1];
  c.p = tpu_ku_double(call, 1, 0.5);
  c.train = tpu_ku_bool(call, 2, true);
  c.scale = c.p < 1.0 ? 1.0 / (1.0 - c.p) : 0.0;
  c.seed = call->rng_seed;
  c.ctr0 = call->rng_offset;
  int64_t n = tpu_tensor_numel(c.out);
  if (n > 0) tpu_parallel_for(call->pool, n, RK_GRAIN, rk_dropout_body, &c);
  return TPU_OK;
}

static tpu_status_t rk_dropout_bwd_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* m = tpu_ku_tensor(call, 1);
  if (!g || !m) return TPU_KU_INVALID(call, "expected (grad_output, mask, scale)");
  if (g->dtype == TPU_DTYPE_INVALID || g->dtype >= TPU_DTYPE_COUNT_)
    return tpu_ku_unsupported_dtype(call, g->dtype);
  const int od = call->num_outputs > 0 ? call->outputs[0].dtype : TPU_DTYPE_INVALID;
  if (!tpu_dtype_is_floating((tpu_dtype_t)od)) return tpu_ku_unsupported_dtype(call, od);
  return TPU_OK;
}

static tpu_status_t rk_dropout_bwd_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rk_dropout_bwd_check(call));
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* m = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* out = &call->outputs[0];
  double scale = tpu_ku_double(call, 2, 1.0);
  int64_t n = tpu_tensor_numel(out);
  /* The CPU's grad * mask * scale: grad * mask in grad's dtype (mask is 0/1,
   * so exact), then the product with the Scalar scale in the result's opmath
   * type (float for float32/float16/bfloat16, and for the float32 result of an
   * integer or bool grad; double for float64), rounded once to the result. */
  const bool f64 = out->dtype == TPU_DTYPE_F64;
  const float sf = (float)scale;
  for (int64_t i = 0; i < n; ++i) {
    const char* gp = (const char*)g->data + rk_offset_of(g, i);
    double mv = tpu_ku_load_f64((const char*)m->data + rk_offset_of(m, i), m->dtype);
    double v;
    if (f64) {
      v = tpu_ku_load_f64(gp, g->dtype) * mv * scale;
    } else {
      float gv = tpu_dtype_is_floating((tpu_dtype_t)g->dtype) ? (float)tpu_ku_load_f64(gp, g->dtype)
                                                              : (float)tpu_ku_load_i64(gp, g->dtype);
      float gm = gv * (float)mv;
      v = (double)(gm * sf);
    }
    tpu_ku_store_f64((char*)out->data + rk_offset_of(out, i), out->dtype, v);
  }
  return TPU_OK;
}

static tpu_status_t rk_randperm_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype == TPU_DTYPE_BOOL || out->dtype == TPU_DTYPE_INVALID) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (tpu_ku_int(call, 0, 0) < 0) return TPU_KU_INVALID(call, "n must be non-negative, got %lld", (long long)tpu_ku_int(call, 0, 0));
  return TPU_OK;
}

/* Fisher-Yates from the last position down; step i draws counter offset+i. */
static tpu_status_t rk_randperm_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rk_randperm_check(call));
  const tpu_tensor_t* out = &call->outputs[0];
  int64_t n = tpu_tensor_numel(out);
  for (int64_t i = 0; i < n; ++i) tpu_ku_store_i64((char*)out->data + rk_offset_of(out, i), out->dtype, i);
  for (int64_t i = n - 1; i > 0; --i) {
    uint32_t r[4];
    rk_philox(call->rng_offset + (uint64_t)i, call->rng_seed, r);
    int64_t j = (int64_t)((((uint64_t)r[1] << 32) | r[0]) % (uint64_t)(i + 1));
    char* pi = (char*)out->data + rk_offset_of(out, i);
    char* pj = (char*)out->data + rk_offset_of(out, j);
    int64_t a = tpu_ku_load_i64(pi, out->dtype), b = tpu_ku_load_i64(pj, out->dtype);
    tpu_ku_store_i64(pi, out->dtype, b);
    tpu_ku_store_i64(pj, out->dtype, a);
  }
  return TPU_OK;
}

static tpu_status_t rk_multinomial_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* w = tpu_ku_tensor(call, 0);
  if (!w || (w->ndim != 1 && w->ndim != 2)) return TPU_KU_INVALID(call, "prob_dist must be 1 or 2 dim");
  if (!tpu_dtype_is_floating((tpu_dtype_t)w->dtype)) return tpu_ku_unsupported_dtype(call, w->dtype);
  if (tpu_ku_int(call, 1, 1) <= 0) return TPU_KU_INVALID(call, "cannot sample n_sample <= 0 samples");
  return TPU_OK;
}

/* Inverse-CDF sampling per row; without replacement, categories already
 * drawn for the row are excluded from the remaining mass. */
static tpu_status_t rk_multinomial_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(rk_multinomial_check(call));
  const tpu_tensor_t* w = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  const int64_t ns = tpu_ku_int(call, 1, 1);
  const bool repl = tpu_ku_bool(call, 2, false);
  const int64_t rows = w->ndim == 2 ? w->sizes[0] : 1;
  const int64_t ncat = w->sizes[w->ndim - 1];
  const int64_t ws = w->strides[w->ndim - 1], wr = w->ndim == 2 ? w->strides[0] : 0;
  const int64_t os = out->strides[out->ndim - 1], orow = out->ndim == 2 ? out->strides[0] : 0;
  const size_t wb = tpu_dtype_size((tpu_dtype_t)w->dtype), ob = tpu_dtype_size((tpu_dtype_t)out->dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = (const char*)w->data + r * wr * (int64_t)wb;
    char* orw = (char*)out->data + r * orow * (int64_t)ob;
    double total = 0.0;
    int64_t positive = 0;
    for (int64_t k = 0; k < ncat; ++k) {
      double v = tpu_ku_load_f64(row + k * ws * (int64_t)wb, w->dtype);
      if (!(v >= 0.0) || isinf(v))
        return TPU_KU_INVALID(call, "probability tensor contains either `inf`, `nan` or element < 0");
      total += v;
      positive += v > 0.0;
    }
    if (!(total > 0.0)) return TPU_KU_INVALID(call, "invalid multinomial distribution (sum of probabilities <= 0)");
    if (!repl && ns > positive)
      return TPU_KU_INVALID(call, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    for (int64_t s = 0; s < ns; ++s) {
      uint32_t rr[4];
      rk_philox(call->rng_offset + (uint64_t)(r * ns + s), call->rng_seed, rr);
      double u = rk_u53(rr[0], rr[1]) * total, acc = 0.0;
      int64_t pick = -1, last = -1;
      for (int64_t k = 0; k < ncat; ++k) {
        double v = tpu_ku_load_f64(row + k * ws * (int64_t)wb, w->dtype);
        if (!repl) {
          for (int64_t t = 0; t < s && v > 0.0; ++t)
            if (tpu_ku_load_i64(orw + t * os * (int64_t)ob, out->dtype) == k) v = 0.0;
        }
        if (v <= 0.0) continue;
        last = k;
        acc += v;
        if (u < acc) {
          pick = k;
          break;
        }
      }
      if (pick < 0) pick = last; /* rounding at the top end */
      tpu_ku_store_i64(orw + s * os * (int64_t)ob, out->dtype, pick);
      if (!repl) total -= tpu_ku_load_f64(row + pick * ws * (int64_t)wb, w->dtype);
    }
  }
  return TPU_OK;
}

#define RK_WRAP(NAME, KIND)                                                              \
  static tpu_status_t rk_run_##NAME(const tpu_k_call_t* c) { return rk_run(c, KIND); } \
  static tpu_status_t rk_check_##NAME(const tpu_k_call_t* c) { return rk_check(c, KIND); }
RK_WRAP(uniform, RK_UNIFORM)
RK_WRAP(normal, RK_NORMAL)
RK_WRAP(normal_tf, RK_NORMAL_TF)
RK_WRAP(normal_ft, RK_NORMAL_FT)
RK_WRAP(normal_tt, RK_NORMAL_TT)
RK_WRAP(bernoulli_f, RK_BERNOULLI_F)
RK_WRAP(bernoulli_t, RK_BERNOULLI_T)
RK_WRAP(bernoulli_s, RK_BERNOULLI_S)
RK_WRAP(random, RK_RANDOM)
RK_WRAP(random_from, RK_RANDOM_FROM)
RK_WRAP(random_to, RK_RANDOM_TO)
RK_WRAP(exponential, RK_EXPONENTIAL)
#undef RK_WRAP

#define R(name, NAME) {name, rk_run_##NAME, rk_check_##NAME, TPU_K_FLAG_RANDOM},
const tpu_k_entry_t tpu_k_random_entries[] = {
    R("aten::uniform_", uniform) R("aten::uniform", uniform) R("aten::uniform.out", uniform)
    R("aten::normal_", normal) R("aten::normal.out", normal)
    R("aten::normal.Tensor_float", normal_tf) R("aten::normal.Tensor_float_out", normal_tf)
    R("aten::normal.float_Tensor", normal_ft) R("aten::normal.float_Tensor_out", normal_ft)
    R("aten::normal.Tensor_Tensor", normal_tt) R("aten::normal.Tensor_Tensor_out", normal_tt)
    R("aten::bernoulli_.float", bernoulli_f) R("aten::bernoulli.p", bernoulli_f)
    R("aten::bernoulli.float_out", bernoulli_f)
    R("aten::bernoulli_.Tensor", bernoulli_t) R("aten::bernoulli.Tensor", bernoulli_t)
    R("aten::bernoulli.Tensor_out", bernoulli_t)
    R("aten::bernoulli", bernoulli_s) R("aten::bernoulli.out", bernoulli_s)
    R("aten::random_", random) R("aten::random", random) R("aten::random.out", random)
    R("aten::random_.from", random_from) R("aten::random.from", random_from)
    R("aten::random.from_out", random_from)
    R("aten::random_.to", random_to) R("aten::random.to", random_to)
    R("aten::random.to_out", random_to)
    R("aten::exponential_", exponential) R("aten::exponential", exponential)
    R("aten::exponential.out", exponential)
    {"aten::native_dropout", rk_dropout_run, rk_dropout_check, TPU_K_FLAG_RANDOM},
    {"aten::native_dropout.out", rk_dropout_run, rk_dropout_check, TPU_K_FLAG_RANDOM},
    {"aten::native_dropout_backward", rk_dropout_bwd_run, rk_dropout_bwd_check, 0},
    {"aten::native_dropout_backward.out", rk_dropout_bwd_run, rk_dropout_bwd_check, 0},
    {"aten::randperm.generator_out", rk_randperm_run, rk_randperm_check, TPU_K_FLAG_RANDOM},
    {"aten::randperm.out", rk_randperm_run, rk_randperm_check, TPU_K_FLAG_RANDOM},
    {"aten::multinomial", rk_multinomial_run, rk_multinomial_check, TPU_K_FLAG_RANDOM},
    {"aten::multinomial.out", rk_multinomial_run, rk_multinomial_check, TPU_K_FLAG_RANDOM},
};
const size_t tpu_k_random_count = sizeof(tpu_k_random_entries) / sizeof(tpu_k_random_entries[0]);
