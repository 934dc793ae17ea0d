/* loss.c - kernel family "loss" (see tpu/kernels.h for the ABI):
 * nll_loss(2d) forward/backward, mse_loss, smooth_l1_loss, huber_loss,
 * binary_cross_entropy, each with its backward.
 *
 * Results follow PyTorch's CPU kernels operation by operation: every
 * intermediate is rounded to the tensor's dtype where PyTorch computes in
 * scalar_t (f16/bf16 arithmetic rounds each step; f32 math done in double
 * and rounded once per operation is exactly f32 math), and nll_loss keeps
 * PyTorch's cascade of partial sums. Reductions of pointwise losses (mean,
 * sum) add the rounded per-element losses in double over a fixed split into
 * chunks, so the result does not depend on the thread count.
 *
 * Reduction codes are ATen's: 0 none, 1 mean, 2 sum. A target outside
 * [0, n_classes) that is not ignore_index fails run() with OUT_OF_RANGE. */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

enum { LS_NONE = 0, LS_MEAN = 1, LS_SUM = 2 };

static bool ls_float_dt(int dt) { return tpu_dtype_is_floating((tpu_dtype_t)dt); }

/* v rounded to dtype dt (f64: unchanged). */
static inline double ls_r(double v, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return (float)v;
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)v));
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16((float)v));
    default: return v;
  }
}

static tpu_status_t ls_reduction(const tpu_k_call_t* call, int i, int* out) {
  int64_t r = tpu_ku_int(call, i, LS_MEAN);
  if (r < LS_NONE || r > LS_SUM) return TPU_KU_INVALID(call, "%lld is not a valid value for reduction", (long long)r);
  *out = (int)r;
  return TPU_OK;
}

/* An optional tensor argument (None, or a tensor with dtype INVALID: absent). */
static const tpu_tensor_t* ls_opt_tensor(const tpu_k_call_t* call, int i) {
  const tpu_tensor_t* t = tpu_ku_tensor(call, i);
  return t && t->dtype != TPU_DTYPE_INVALID ? t : NULL;
}

/* Element i (row-major over t's sizes) of t. */
static inline const char* ls_at(const tpu_tensor_t* t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    off += (i % t->sizes[d]) * t->strides[d];
    i /= t->sizes[d];
  }
  return (const char*)t->data + off * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

/* ======================================================================= *
 * nll_loss / nll_loss2d                                                   *
 * ======================================================================= */

/* self [N, C, spatial...] or [C]; target [N, spatial...] or []; sample s in
 * [0, N * S) is (b = s / S, e = s % S) with S the spatial numel. */
typedef struct {
  const tpu_tensor_t* self;
  const tpu_tensor_t* target;
  const tpu_tensor_t* weight; /* NULL: none */
  int dt, red;
  int64_t ignore, nclass, nbatch, nspatial;
  bool batched; /* self has a batch dim */
} ls_nll_t;

static tpu_status_t ls_nll_setup(const tpu_k_call_t* call, int a0, bool two_d, ls_nll_t* p) {
  memset(p, 0, sizeof(*p));
  p->self = tpu_ku_tensor(call, a0);
  p->target = tpu_ku_tensor(call, a0 + 1);
  p->weight = ls_opt_tensor(call, a0 + 2);
  if (!p->self || !p->target || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and target");
  p->dt = p->self->dtype;
  if (!ls_float_dt(p->dt)) return tpu_ku_unsupported_dtype(call, p->dt);
  int tdt = p->target->dtype;
  if (tdt != TPU_DTYPE_I64 && tdt != TPU_DTYPE_I32 && tdt != TPU_DTYPE_U8) return tpu_ku_unsupported_dtype(call, tdt);
  if (p->weight && p->weight->dtype != p->dt) return tpu_ku_unsupported_dtype(call, p->weight->dtype);
  TPU_RETURN_IF_ERROR(ls_reduction(call, a0 + 3, &p->red));
  p->ignore = tpu_ku_int(call, a0 + 4, -100);
  const tpu_tensor_t* s = p->self;
  const tpu_tensor_t* t = p->target;
  if (two_d) {
    if (s->ndim != 4) return TPU_KU_INVALID(call, "only batches of spatial inputs supported (4D tensors), but got input of size: %dD", (int)s->ndim);
    if (t->ndim != 3) return TPU_KU_INVALID(call, "only batches of spatial targets supported (3D tensors) but got targets of dimension: %d", (int)t->ndim);
  } else {
    if (s->ndim < 1 || s->ndim > 2) return TPU_KU_INVALID(call, "input tensor should be 1D or 2D");
    if (t->ndim > 1) return TPU_KU_INVALID(call, "0D or 1D target tensor expected, multi-target not supported");
  }
  p->batched = s->ndim >= 2;
  p->nclass = s->sizes[p->batched ? 1 : 0];
  p->nbatch = p->batched ? s->sizes[0] : 1;
  p->nspatial = 1;
  for (int32_t d = 2; d < s->ndim; ++d) p->nspatial *= s->sizes[d];
  if (p->batched && (t->ndim != s->ndim - 1 || t->sizes[0] != p->nbatch))
    return TPU_KU_INVALID(call, "input and target batch or spatial sizes don't match");
  for (int32_t d = 2; d < s->ndim; ++d)
    if (t->sizes[d - 1] != s->sizes[d]) return TPU_KU_INVALID(call, "input and target batch or spatial sizes don't match");
  if (!p->batched && t->ndim == 1 && t->sizes[0] != 1)
    return TPU_KU_INVALID(call, "input and target batch sizes don't match");
  if (p->weight && tpu_tensor_numel(p->weight) != p->nclass)
    return TPU_KU_INVALID(call, "weight tensor should be defined either for all %lld classes or no classes but got weight tensor of shape [%lld]",
                          (long long)p->nclass, (long long)tpu_tensor_numel(p->weight));
  return TPU_OK;
}

static inline int64_t ls_nll_target(const ls_nll_t* p, int64_t s) {
  return tpu_ku_load_i64(ls_at(p->target, s), p->target->dtype);
}

/* Byte offset of (sample s, class c) in a tensor shaped like self. */
static inline int64_t ls_nll_off(const ls_nll_t* p, const tpu_tensor_t* t, int64_t s, int64_t c) {
  int64_t off = 0;
  if (p->batched) {
    int64_t e = s % p->nspatial;
    off = (s / p->nspatial) * t->strides[0] + c * t->strides[1];
    for (int32_t d = t->ndim - 1; d >= 2; --d) {
      off += (e % t->sizes[d]) * t->strides[d];
      e /= t->sizes[d];
    }
  } else {
    off = c * t->strides[0];
  }
  return off * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

static double ls_nll_weight(const ls_nll_t* p, int64_t c) {
  return p->weight ? tpu_ku_load_f64(ls_at(p->weight, c), p->dt) : 1.0;
}

/* Every target is ignore_index or a class. */
static tpu_status_t ls_nll_validate(const tpu_k_call_t* call, const ls_nll_t* p) {
  int64_t n = tpu_tensor_numel(p->target);
  for (int64_t s = 0; s < n; ++s) {
    int64_t t = ls_nll_target(p, s);
    if (t != p->ignore && (t < 0 || t >= p->nclass))
      return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: target %lld is out of bounds (n_classes %lld)", call->op,
                       (long long)t, (long long)p->nclass);
  }
  return TPU_OK;
}

/* nll_loss_forward(self, target, weight, reduction, ignore_index) ->
 * (output, total_weight); nll_loss2d_forward likewise. */
static tpu_status_t ls_nll_fwd_check(const tpu_k_call_t* call) {
  ls_nll_t p;
  TPU_RETURN_IF_ERROR(ls_nll_setup(call, 0, strstr(call->op, "2d") != NULL, &p));
  if (call->num_outputs < 2) return TPU_KU_INVALID(call, "expected output and total_weight");
  for (int k = 0; k < 2; ++k)
    if (call->outputs[k].dtype != p.dt) return tpu_ku_unsupported_dtype(call, call->outputs[k].dtype);
  if (tpu_tensor_numel(&call->outputs[1]) != 1) return TPU_KU_INVALID(call, "total_weight must have one element");
  bool elementwise = p.red == LS_NONE && p.batched;
  int64_t want = elementwise ? tpu_tensor_numel(p.target) : 1;
  if (tpu_tensor_numel(&call->outputs[0]) != want)
    return TPU_KU_INVALID(call, "output has %lld elements, expected %lld", (long long)tpu_tensor_numel(&call->outputs[0]),
                          (long long)want);
  return TPU_OK;
}

static tpu_status_t ls_nll_fwd_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ls_nll_fwd_check(call));
  ls_nll_t p;
  TPU_RETURN_IF_ERROR(ls_nll_setup(call, 0, strstr(call->op, "2d") != NULL, &p));
  TPU_RETURN_IF_ERROR(ls_nll_validate(call, &p));
  const tpu_tensor_t* out = &call->outputs[0];
  const tpu_tensor_t* tw = &call->outputs[1];
  const int dt = p.dt;
  const int64_t n = tpu_tensor_numel(p.target);
  const char* in = (const char*)p.self->data;
  tpu_ku_store_f64(tw->data, dt, 0.0);
  if (p.red == LS_NONE && p.batched) { /* out[s] = -x[s, t] * w[t] */
    for (int64_t s = 0; s < n; ++s) {
      int64_t t = ls_nll_target(&p, s);
      double v = 0.0;
      if (t != p.ignore) v = ls_r(-tpu_ku_load_f64(in + ls_nll_off(&p, p.self, s, t), dt) * ls_nll_weight(&p, t), dt);
      tpu_ku_store_f64((char*)ls_at(out, s), dt, v);
    }
    return TPU_OK;
  }
  if (n == 0) { /* mean of nothing: 0/0 */
    tpu_ku_store_f64(out->data, dt, p.red == LS_MEAN ? NAN : 0.0);
    return TPU_OK;
  }
  /* PyTorch's cascade: level 0 takes every sample; after sample s, levels
   * whose index bits are all zero are pushed one level up. */
  enum { LEVELS = 8 };
  double wsum[LEVELS] = {0}, lsum[LEVELS] = {0};
  int64_t ceil_log2 = 1;
  if (n > 2) {
    ceil_log2 = 0;
    for (uint64_t x = (uint64_t)n - 1; x; x >>= 1) ceil_log2++;
  }
  const int64_t level_power = ceil_log2 / LEVELS > 4 ? ceil_log2 / LEVELS : 4;
  const int64_t level_mask = ((int64_t)1 << level_power) - 1;
  int64_t ignored = 0;
  for (int64_t s = 0; s < n; ++s) {
    int64_t t = ls_nll_target(&p, s);
    if (t == p.ignore) {
      ++ignored;
      continue;
    }
    double x = tpu_ku_load_f64(in + ls_nll_off(&p, p.self, s, t), dt);
    if (p.weight) {
      double w = ls_nll_weight(&p, t);
      lsum[0] = ls_r(lsum[0] - ls_r(x * w, dt), dt);
      wsum[0] = ls_r(wsum[0] + w, dt);
    } else {
      lsum[0] = ls_r(lsum[0] - x, dt);
    }
    for (int j = 0; j + 1 < LEVELS; ++j) {
      if ((s & (level_mask << (j * level_power))) != 0) break;
      wsum[j + 1] = ls_r(wsum[j + 1] + wsum[j], dt);
      lsum[j + 1] = ls_r(lsum[j + 1] + lsum[j], dt);
      wsum[j] = lsum[j] = 0.0;
    }
  }
  double total = 0.0, loss = 0.0;
  for (int j = 0; j < LEVELS; ++j) {
    total = ls_r(total + wsum[j], dt);
    loss = ls_r(loss + lsum[j], dt);
  }
  if (!p.weight) total = ls_r((double)(n - ignored), dt);
  if (p.red == LS_MEAN) loss = ls_r(loss / total, dt);
  tpu_ku_store_f64(out->data, dt, loss);
  tpu_ku_store_f64(tw->data, dt, total);
  return TPU_OK;
}

/* nll_loss_backward(grad_output, self, target, weight, reduction,
 * ignore_index, total_weight) -> grad_input; nll_loss2d_backward likewise. */
static tpu_status_t ls_nll_bwd_check(const tpu_k_call_t* call) {
  ls_nll_t p;
  TPU_RETURN_IF_ERROR(ls_nll_setup(call, 1, strstr(call->op, "2d") != NULL, &p));
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* tw = tpu_ku_tensor(call, 6);
  if (!g || !tw) return TPU_KU_INVALID(call, "expected grad_output and total_weight");
  if (g->dtype != p.dt) return tpu_ku_unsupported_dtype(call, g->dtype);
  if (tw->dtype != p.dt) return tpu_ku_unsupported_dtype(call, tw->dtype);
  if (tpu_tensor_numel(tw) != 1) return TPU_KU_INVALID(call, "expected total_weight to be a single element tensor");
  bool elementwise = p.red == LS_NONE && p.batched;
  if (tpu_tensor_numel(g) != (elementwise ? tpu_tensor_numel(p.target) : 1))
    return TPU_KU_INVALID(call, "grad_output has %lld elements", (long long)tpu_tensor_numel(g));
  const tpu_tensor_t* gi = &call->outputs[0];
  if (gi->dtype != p.dt) return tpu_ku_unsupported_dtype(call, gi->dtype);
  if (gi->ndim != p.self->ndim) return TPU_KU_INVALID(call, "grad_input must have self's shape");
  for (int32_t d = 0; d < gi->ndim; ++d)
    if (gi->sizes[d] != p.self->sizes[d]) return TPU_KU_INVALID(call, "grad_input must have self's shape");
  return TPU_OK;
}

static void ls_zero_inner(void* ctx, char** ptrs, const int64_t* st, int64_t n) {
  int64_t es = *(const int64_t*)ctx;
  for (int64_t i = 0; i < n; ++i) memset(ptrs[0] + i * st[0], 0, (size_t)es);
}

static tpu_status_t ls_nll_bwd_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ls_nll_bwd_check(call));
  ls_nll_t p;
  TPU_RETURN_IF_ERROR(ls_nll_setup(call, 1, strstr(call->op, "2d") != NULL, &p));
  TPU_RETURN_IF_ERROR(ls_nll_validate(call, &p));
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* gi = &call->outputs[0];
  const int dt = p.dt;
  if (tpu_tensor_numel(gi) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 1, &gi, call->op));
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)dt);
  tpu_ku_iter_parallel(&it, call->pool, 65536, ls_zero_inner, &es);
  const int64_t n = tpu_tensor_numel(p.target);
  char* base = (char*)gi->data;
  if (p.red == LS_NONE && p.batched) { /* gi[s, t] = -w[t] * g[s] */
    for (int64_t s = 0; s < n; ++s) {
      int64_t t = ls_nll_target(&p, s);
      if (t == p.ignore) continue;
      double v = ls_r(-ls_nll_weight(&p, t) * tpu_ku_load_f64(ls_at(g, s), dt), dt);
      tpu_ku_store_f64(base + ls_nll_off(&p, gi, s, t), dt, v);
    }
    return TPU_OK;
  }
  double gv = tpu_ku_load_f64(g->data, dt);
  double total = tpu_ku_load_f64(tpu_ku_tensor(call, 6)->data, dt);
  double grad = -(p.red == LS_MEAN ? ls_r(gv / total, dt) : gv);
  for (int64_t s = 0; s < n; ++s) {
    int64_t t = ls_nll_target(&p, s);
    if (t == p.ignore) continue;
    double v = p.weight ? ls_r(ls_nll_weight(&p, t) * grad, dt) : grad;
    tpu_ku_store_f64(base + ls_nll_off(&p, gi, s, t), dt, v);
  }
  return TPU_OK;
}

/* ======================================================================= *
 * pointwise losses: mse, smooth_l1, huber, binary_cross_entropy           *
 * ======================================================================= */

enum { LS_MSE, LS_SMOOTH_L1, LS_HUBER, LS_BCE };

typedef struct {
  int op, dt, red;
  bool fl;       /* compute in float, round once (PyTorch's bf16 smooth_l1) */
  double param;  /* beta / delta, as PyTorch holds it */
  double norm;   /* backward: the reduction's scale, as PyTorch holds it */
  bool backward, has_weight;
  int bad;       /* bce: 1 an input, 2 a target outside [0, 1] (atomic) */
} ls_pw_t;

/* Rounds to the op's arithmetic type. */
static inline double ls_pr(const ls_pw_t* c, double v) { return c->fl ? (float)v : ls_r(v, c->dt); }

static inline double ls_log(const ls_pw_t* c, double v, bool plus1) {
  if (c->dt == TPU_DTYPE_F64) return plus1 ? log1p(v) : log(v);
  return plus1 ? log1pf((float)v) : logf((float)v);
}

static double ls_pw_fwd(ls_pw_t* c, double x, double t, double w) {
  const int dt = c->dt;
  switch (c->op) {
    case LS_MSE: {
      double d = ls_r(x - t, dt);
      return ls_r(d * d, dt);
    }
    case LS_SMOOTH_L1: {
      double z = fabs(ls_pr(c, x - t)), b = c->param;
      double v = z < b ? ls_pr(c, ls_pr(c, ls_pr(c, 0.5 * z) * z) / b) : ls_pr(c, z - ls_pr(c, 0.5 * b));
      return ls_r(v, dt);
    }
    case LS_HUBER: {
      double z = fabs(ls_pr(c, x - t)), d = c->param;
      double v = z < d ? ls_pr(c, ls_pr(c, 0.5 * z) * z) : ls_pr(c, d * ls_pr(c, z - ls_pr(c, 0.5 * d)));
      return ls_r(v, dt);
    }
    default: { /* bce: (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100) */
      if (!(x >= 0 && x <= 1)) __atomic_or_fetch(&c->bad, 1, __ATOMIC_RELAXED);
      if (!(t >= 0 && t <= 1)) __atomic_or_fetch(&c->bad, 2, __ATOMIC_RELAXED);
      double l1 = ls_r(ls_log(c, -x, true), dt), l0 = ls_r(ls_log(c, x, false), dt);
      l1 = l1 > -100 ? l1 : -100;
      l0 = l0 > -100 ? l0 : -100;
      double v = ls_r(ls_r(ls_r(t - 1, dt) * l1, dt) - ls_r(t * l0, dt), dt);
      return c->has_weight ? ls_r(v * w, dt) : v;
    }
  }
}

/* `tail`: the element is in the scalar tail of PyTorch's vector loop. */
static double ls_pw_bwd(const ls_pw_t* c, double x, double t, double g, double w, bool tail) {
  const int dt = c->dt;
  const double nv = c->norm;
  switch (c->op) {
    case LS_MSE: /* norm * (x - t) * g */
      return ls_r(ls_r(nv * ls_r(x - t, dt), dt) * g, dt);
    /* smooth_l1 / huber: PyTorch's vector loop computes norm * o * g with o
     * the clamped slope; its scalar tail groups the products differently. */
    case LS_SMOOTH_L1: {
      double d = ls_pr(c, x - t), b = c->param, v;
      if (!tail) {
        double o = fabs(d) >= b ? (d > 0 ? 1.0 : -1.0) : ls_pr(c, d / b);
        v = ls_pr(c, ls_pr(c, nv * o) * g);
      } else if (d <= -b) {
        v = ls_pr(c, -nv * g);
      } else if (d >= b) {
        v = ls_pr(c, nv * g);
      } else {
        v = ls_pr(c, ls_pr(c, ls_pr(c, nv * d) * g) / b);
      }
      return ls_r(v, dt);
    }
    case LS_HUBER: {
      double d = ls_pr(c, x - t), dl = c->param;
      if (!tail) return ls_r(ls_pr(c, ls_pr(c, nv * (d >= dl ? dl : d <= -dl ? -dl : d)) * g), dt);
      if (d <= -dl) return ls_r(ls_pr(c, ls_pr(c, -nv * g) * dl), dt);
      if (d >= dl) return ls_r(ls_pr(c, ls_pr(c, nv * g) * dl), dt);
      return ls_r(ls_pr(c, ls_pr(c, nv * d) * g), dt);
    }
    default: { /* g * (x - t) / max((1 - x) * x, 1e-12), * w, / numel */
      double den = ls_r(ls_r(1 - x, dt) * x, dt), eps = ls_r(1e-12, dt);
      double v = ls_r(ls_r(g * ls_r(x - t, dt), dt) / (den > eps ? den : eps), dt);
      if (c->has_weight) v = ls_r(v * w, dt);
      if (c->red == LS_MEAN) v = ls_r(v / nv, dt);
      return v;
    }
  }
}

/* forward, none:   ptrs out, x, t[, w]
 * forward, reduce: ptrs dummy, x, t[, w]  (sum into ls_part_t)
 * backward:        ptrs grad_input, x, t, g[, w] */
typedef struct {
  ls_pw_t* c;
  double sum;
} ls_part_t;

/* Elements of an inner run that PyTorch's cpu_kernel_vec takes through its
 * vector path (2 x 32-byte vectors per step): whole steps from the start of
 * a run whose operands are contiguous but for at most one broadcast input. */
static int64_t ls_vector_prefix(int nops, const int64_t* st, int64_t es, int64_t n) {
  int zeros = 0;
  if (st[0] != es) return 0;
  for (int k = 1; k < nops; ++k) {
    if (st[k] == 0) zeros++;
    else if (st[k] != es) return 0;
  }
  int64_t block = 64 / es;
  return zeros > 1 ? 0 : n / block * block;
}

static void ls_pw_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  ls_pw_t* c = (ls_pw_t*)ctx;
  const int dt = c->dt;
  int64_t nvec = c->backward ? ls_vector_prefix(4, st, (int64_t)tpu_dtype_size((tpu_dtype_t)dt), n) : n;
  for (int64_t i = 0; i < n; ++i) {
    double x = tpu_ku_load_f64(p[1] + i * st[1], dt), t = tpu_ku_load_f64(p[2] + i * st[2], dt);
    double v;
    if (c->backward) {
      double g = tpu_ku_load_f64(p[3] + i * st[3], dt);
      double w = c->has_weight ? tpu_ku_load_f64(p[4] + i * st[4], dt) : 1.0;
      v = ls_pw_bwd(c, x, t, g, w, i >= nvec);
    } else {
      double w = c->has_weight ? tpu_ku_load_f64(p[3] + i * st[3], dt) : 1.0;
      v = ls_pw_fwd(c, x, t, w);
    }
    tpu_ku_store_f64(p[0] + i * st[0], dt, v);
  }
}

static void ls_pw_sum_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  ls_part_t* part = (ls_part_t*)ctx;
  ls_pw_t* c = part->c;
  const int dt = c->dt;
  double s = part->sum;
  for (int64_t i = 0; i < n; ++i) {
    double w = c->has_weight ? tpu_ku_load_f64(p[3] + i * st[3], dt) : 1.0;
    s += ls_pw_fwd(c, tpu_ku_load_f64(p[1] + i * st[1], dt), tpu_ku_load_f64(p[2] + i * st[2], dt), w);
  }
  part->sum = s;
}

#define LS_PARTS 64

typedef struct {
  const tpu_ku_iter_t* it;
  ls_pw_t* c;
  int64_t chunk;
  double part[LS_PARTS];
  int bad[LS_PARTS];
} ls_sum_t;

static void ls_sum_body(void* ctx, int64_t b, int64_t e) {
  ls_sum_t* s = (ls_sum_t*)ctx;
  for (int64_t k = b; k < e; ++k) {
    ls_pw_t c = *s->c; /* per chunk: the bce range flag */
    ls_part_t part = {&c, 0.0};
    tpu_ku_iter_run(s->it, k * s->chunk, (k + 1) * s->chunk, ls_pw_sum_inner, &part);
    s->part[k] = part.sum;
    s->bad[k] = c.bad;
  }
}

static bool ls_pw_backward(const tpu_k_call_t* call) { return strstr(call->op, "backward") != NULL; }

/* Argument layout: forward (self, target, [weight,] reduction[, param]);
 * backward (grad_output, self, target, [weight,] reduction[, param]). */
static tpu_status_t ls_pw_setup(const tpu_k_call_t* call, int op, ls_pw_t* c, const tpu_tensor_t** x,
                                const tpu_tensor_t** t, const tpu_tensor_t** g, const tpu_tensor_t** w) {
  memset(c, 0, sizeof(*c));
  c->op = op;
  c->backward = ls_pw_backward(call);
  const int a = c->backward ? 1 : 0;
  *g = c->backward ? tpu_ku_tensor(call, 0) : NULL;
  *x = tpu_ku_tensor(call, a);
  *t = tpu_ku_tensor(call, a + 1);
  *w = op == LS_BCE ? ls_opt_tensor(call, a + 2) : NULL;
  const int ri = a + (op == LS_BCE ? 3 : 2);
  if (!*x || !*t || (c->backward && !*g) || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected %sself and target", c->backward ? "grad_output, " : "");
  c->dt = (*x)->dtype;
  if (!ls_float_dt(c->dt)) return tpu_ku_unsupported_dtype(call, c->dt);
  const tpu_tensor_t* others[4] = {*t, *g, *w, &call->outputs[0]};
  for (int k = 0; k < 4; ++k)
    if (others[k] && others[k]->dtype != c->dt) return tpu_ku_unsupported_dtype(call, others[k]->dtype);
  TPU_RETURN_IF_ERROR(ls_reduction(call, ri, &c->red));
  c->has_weight = *w != NULL;
  const int dt = c->dt;
  if (op == LS_SMOOTH_L1 || op == LS_HUBER) {
    double p = tpu_ku_double(call, ri + 1, 1.0);
    if (op == LS_HUBER && !(p > 0))
      return TPU_KU_INVALID(call, "huber_loss does not support non-positive values for delta (got %g)", p);
    if (op == LS_SMOOTH_L1 && p < 0)
      return TPU_KU_INVALID(call, "smooth_l1_loss does not support negative values for beta (got %g)", p);
    /* in float, as measured against PyTorch 2.10: smooth_l1 for bf16 and its
     * f16 backward, huber's f16 forward; otherwise dtype arithmetic */
    const bool half = dt == TPU_DTYPE_F16;
    c->fl = op == LS_SMOOTH_L1 ? (dt == TPU_DTYPE_BF16 || (half && c->backward)) : (half && !c->backward);
    c->param = c->fl ? (double)(float)p : ls_r(p, dt);
  }
  return TPU_OK;
}

static tpu_status_t ls_pw_check_op(const tpu_k_call_t* call, int op) {
  ls_pw_t c;
  const tpu_tensor_t *x, *t, *g, *w;
  return ls_pw_setup(call, op, &c, &x, &t, &g, &w);
}

static tpu_status_t ls_pw_run_op(const tpu_k_call_t* call, int op) {
  ls_pw_t c;
  const tpu_tensor_t *x, *t, *g, *w;
  TPU_RETURN_IF_ERROR(ls_pw_setup(call, op, &c, &x, &t, &g, &w));
  const tpu_tensor_t* out = &call->outputs[0];
  tpu_ku_iter_t it;
  if (c.backward) {
    /* mean: PyTorch scales by norm.to<scalar_t>() (bce divides at the end) */
    double numel = (double)tpu_tensor_numel(x);
    double base = op == LS_MSE ? 2.0 : 1.0;
    if (op == LS_BCE) c.norm = numel;
    else c.norm = c.fl ? (double)(float)(c.red == LS_MEAN ? base / numel : base)
                       : ls_r(c.red == LS_MEAN ? base / numel : base, c.dt);
    const tpu_tensor_t* ops[5] = {out, x, t, g, w};
    TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, w ? 5 : 4, ops, call->op));
    tpu_ku_iter_parallel(&it, call->pool, 16384, ls_pw_inner, &c);
    return TPU_OK;
  }
  if (c.red == LS_NONE) {
    const tpu_tensor_t* ops[4] = {out, x, t, w};
    TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, w ? 4 : 3, ops, call->op));
    tpu_ku_iter_parallel(&it, call->pool, 16384, ls_pw_inner, &c);
  } else {
    /* iterate the broadcast shape of the operands through a stride-0 dummy */
    tpu_tensor_t shape;
    memset(&shape, 0, sizeof(shape));
    shape.dtype = c.dt;
    shape.data = out->data;
    const tpu_tensor_t* srcs[3] = {x, t, w};
    for (int k = 0; k < 3; ++k) {
      const tpu_tensor_t* s = srcs[k];
      if (!s) continue;
      if (s->ndim > shape.ndim) {
        int32_t grow = s->ndim - shape.ndim;
        for (int32_t d = shape.ndim - 1; d >= 0; --d) shape.sizes[d + grow] = shape.sizes[d];
        for (int32_t d = 0; d < grow; ++d) shape.sizes[d] = 1;
        shape.ndim = s->ndim;
      }
      for (int32_t d = 0; d < s->ndim; ++d) {
        int64_t* sz = &shape.sizes[shape.ndim - s->ndim + d];
        if (*sz == 1) *sz = s->sizes[d];
        else if (s->sizes[d] != 1 && s->sizes[d] != *sz)
          return TPU_KU_INVALID(call, "the sizes of input and target do not broadcast");
      }
    }
    const tpu_tensor_t* ops[4] = {&shape, x, t, w};
    TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, w ? 4 : 3, ops, call->op));
    ls_sum_t s;
    memset(&s, 0, sizeof(s));
    s.it = &it;
    s.c = &c;
    int64_t nparts = it.numel / 16384;
    nparts = nparts < 1 ? 1 : nparts > LS_PARTS ? LS_PARTS : nparts;
    s.chunk = (it.numel + nparts - 1) / nparts;
    if (it.numel > 0) tpu_parallel_for(call->pool, nparts, 1, ls_sum_body, &s);
    double sum = 0.0;
    for (int64_t k = 0; k < nparts; ++k) {
      sum += s.part[k];
      c.bad |= s.bad[k];
    }
    if (c.red == LS_MEAN) sum = it.numel ? sum / (double)it.numel : NAN;
    tpu_ku_store_f64(out->data, c.dt, ls_r(sum, c.dt));
  }
  if (c.bad)
    return TPU_KU_INVALID(call, "all elements of %s should be between 0 and 1", (c.bad & 1) ? "input" : "target");
  return TPU_OK;
}

#define LS_WRAPPERS(name, OP)                                                                       \
  static tpu_status_t ls_run_##name(const tpu_k_call_t* c) { return ls_pw_run_op(c, OP); }       \
  static tpu_status_t ls_check_##name(const tpu_k_call_t* c) { return ls_pw_check_op(c, OP); }
LS_WRAPPERS(mse, LS_MSE)
LS_WRAPPERS(smooth_l1, LS_SMOOTH_L1)
LS_WRAPPERS(huber, LS_HUBER)
LS_WRAPPERS(bce, LS_BCE)
#undef LS_WRAPPERS

#define LS_E(name, fn) {name, ls_run_##fn, ls_check_##fn, 0, NULL},

const tpu_k_entry_t tpu_k_loss_entries[] = {
    {"aten::nll_loss_forward", ls_nll_fwd_run, ls_nll_fwd_check, 0, NULL},
    {"aten::nll_loss_forward.output", ls_nll_fwd_run, ls_nll_fwd_check, 0, NULL},
    {"aten::nll_loss2d_forward", ls_nll_fwd_run, ls_nll_fwd_check, 0, NULL},
    {"aten::nll_loss2d_forward.output", ls_nll_fwd_run, ls_nll_fwd_check, 0, NULL},
    {"aten::nll_loss_backward", ls_nll_bwd_run, ls_nll_bwd_check, 0, NULL},
    {"aten::nll_loss_backward.grad_input", ls_nll_bwd_run, ls_nll_bwd_check, 0, NULL},
    {"aten::nll_loss2d_backward", ls_nll_bwd_run, ls_nll_bwd_check, 0, NULL},
    {"aten::nll_loss2d_backward.grad_input", ls_nll_bwd_run, ls_nll_bwd_check, 0, NULL},
    LS_E("aten::mse_loss", mse) LS_E("aten::mse_loss.out", mse)
    LS_E("aten::mse_loss_backward", mse) LS_E("aten::mse_loss_backward.grad_input", mse)
    LS_E("aten::smooth_l1_loss", smooth_l1) LS_E("aten::smooth_l1_loss.out", smooth_l1)
    LS_E("aten::smooth_l1_loss_backward", smooth_l1)
    LS_E("aten::smooth_l1_loss_backward.grad_input", smooth_l1)
    LS_E("aten::huber_loss", huber) LS_E("aten::huber_loss.out", huber)
    LS_E("aten::huber_loss_backward", huber) LS_E("aten::huber_loss_backward.out", huber)
    LS_E("aten::binary_cross_entropy", bce) LS_E("aten::binary_cross_entropy.out", bce)
    LS_E("aten::binary_cross_entropy_backward", bce)
    LS_E("aten::binary_cross_entropy_backward.grad_input", bce)
};
const size_t tpu_k_loss_count = sizeof(tpu_k_loss_entries) / sizeof(tpu_k_loss_entries[0]);
