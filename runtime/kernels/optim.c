/* optim.c - kernel family "optim": PyTorch's fused optimizer steps, what
 * torch.optim.Adam/AdamW(fused=True) call (and Transformers' Trainer by
 * default: optim="adamw_torch_fused").
 *
 *   aten::_fused_adam_ / aten::_fused_adamw_ (and their .tensor_lr forms):
 *     (Tensor[] self, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs,
 *      Tensor[] max_exp_avg_sqs, Tensor[] state_steps, *, float|Tensor lr,
 *      float beta1, float beta2, float weight_decay, float eps, bool amsgrad,
 *      bool maximize, Tensor? grad_scale, Tensor? found_inf) -> ()
 *
 * One pass over each parameter and its state (the foreach formulation reads
 * and writes every state list once per op). Per element, in float32 for
 * float32 tensors (double for the others' math is not needed: they load and
 * store through float):
 *   g = grad / grad_scale (if given), negated when maximize
 *   adamw: p -= lr * weight_decay * p;   adam: g += weight_decay * p
 *   m = m + (1 - beta1) * (g - m)        (lerp)
 *   v = beta2 * v + (1 - beta2) * g * g
 *   amsgrad: vmax = max(vmax, v), and vmax replaces v below
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 * with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step in double, step read from
 * the (already incremented) state_steps tensor. found_inf == 1 skips the
 * whole update, as PyTorch's kernels do. Tensors of one parameter must have
 * equal sizes and be contiguous. */
#include <math.h>
#include <string.h>

#include "ew_vecmath.h"
#include "kutil.h"

#define OP_GRAIN 16384

typedef struct {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;
  float lr, beta1, beta2, wd, eps, step_size, bc2_sqrt, inv_scale;
  bool adamw, amsgrad, maximize;
} op_f32_t;

/* In chunks that stay in L1: the moments and the denominator's argument in
 * one loop, its square root in the shared vector loop (ew_vecmath.h: with
 * errno semantics GCC would call libm per element), the parameter in a
 * third. Loop-invariant choices are arithmetic, so the loops vectorise. */
static void op_adam_f32(void* ctx, int64_t begin, int64_t end) {
  const op_f32_t* a = ctx;
  enum { CHUNK = 512 };
  float d[CHUNK], r[CHUNK];
  const float gmul = a->maximize ? -a->inv_scale : a->inv_scale;
  const float keep = a->adamw ? 1.0f - a->lr * a->wd : 1.0f; /* adamw: decoupled decay */
  const float l2 = a->adamw ? 0.0f : a->wd;                     /* adam: decay in the gradient */
  const float b1 = 1.0f - a->beta1, b2 = 1.0f - a->beta2;
  for (int64_t c0 = begin; c0 < end; c0 += CHUNK) {
    const int64_t n = end - c0 < CHUNK ? end - c0 : CHUNK;
    float* restrict p = a->p + c0;
    const float* restrict g = a->g + c0;
    float* restrict m = a->m + c0;
    float* restrict v = a->v + c0;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] * gmul + l2 * p[i];
      m[i] = m[i] + b1 * (gi - m[i]);
      v[i] = a->beta2 * v[i] + b2 * gi * gi;
      d[i] = v[i];
    }
    if (a->amsgrad) {
      float* restrict vmax = a->vmax + c0;
      for (int64_t i = 0; i < n; ++i) {
        vmax[i] = vmax[i] > d[i] ? vmax[i] : d[i];
        d[i] = vmax[i];
      }
    }
    ew_vm_sqrt_loop(r, d, n, false);
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * keep - a->step_size * m[i] / (r[i] / a->bc2_sqrt + a->eps);
  }
}

/* Other float dtypes: the same math on float32 copies of a chunk. */
typedef struct {
  const tpu_tensor_t *p, *g, *m, *v, *vmax;
  op_f32_t f;
} op_any_t;

static void op_adam_any(void* ctx, int64_t begin, int64_t end) {
  const op_any_t* a = ctx;
  enum { CHUNK = 256 };
  float p[CHUNK], g[CHUNK], m[CHUNK], v[CHUNK], vmax[CHUNK];
  for (int64_t c0 = begin; c0 < end; c0 += CHUNK) {
    int64_t n = end - c0 < CHUNK ? end - c0 : CHUNK;
    const tpu_tensor_t* ts[5] = {a->p, a->g, a->m, a->v, a->vmax};
    float* bufs[5] = {p, g, m, v, vmax};
    for (int k = 0; k < 5; ++k) {
      if (!ts[k]) continue;
      size_t es = tpu_dtype_size((tpu_dtype_t)ts[k]->dtype);
      for (int64_t i = 0; i < n; ++i) bufs[k][i] = (float)tpu_ku_load_f64((char*)ts[k]->data + (c0 + i) * es, ts[k]->dtype);
    }
    op_f32_t f = a->f;
    f.p = p;
    f.g = g;
    f.m = m;
    f.v = v;
    f.vmax = vmax;
    op_adam_f32(&f, 0, n);
    const tpu_tensor_t* outs[4] = {a->p, a->m, a->v, a->vmax};
    float* obufs[4] = {p, m, v, vmax};
    for (int k = 0; k < 4; ++k) {
      if (!outs[k]) continue;
      size_t es = tpu_dtype_size((tpu_dtype_t)outs[k]->dtype);
      for (int64_t i = 0; i < n; ++i) tpu_ku_store_f64((char*)outs[k]->data + (c0 + i) * es, outs[k]->dtype, obufs[k][i]);
    }
  }
}

static const tpu_k_value_t* op_list(const tpu_k_call_t* c, int i) {
  return i < c->num_args && c->args[i].kind == TPU_K_TENSORS ? &c->args[i] : NULL;
}

static bool op_same(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  return a->ndim == b->ndim && memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) == 0 &&
         a->dtype == b->dtype && tpu_tensor_is_contiguous(b);
}

static tpu_status_t op_adam(const tpu_k_call_t* c, bool adamw, bool run) {
  const tpu_k_value_t* lists[6];
  static const char* const names[6] = {"self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps"};
  for (int k = 0; k < 6; ++k) {
    lists[k] = op_list(c, k);
    if (!lists[k]) return TPU_KU_INVALID(c, "argument %d (%s) must be a tensor list", k, names[k]);
  }
  const int64_t n = lists[0]->v.tensors.len;
  const bool amsgrad = tpu_ku_bool(c, 11, false);
  for (int k = 1; k < 6; ++k) {
    int64_t len = lists[k]->v.tensors.len;
    if (len != n && !(k == 4 && !amsgrad && len == 0)) {
      return TPU_KU_INVALID(c, "%s has %lld tensors, self has %lld", names[k], (long long)len, (long long)n);
    }
  }
  double lr;
  const tpu_tensor_t* lr_t = tpu_ku_tensor(c, 6);
  if (lr_t) {
    if (tpu_tensor_numel(lr_t) != 1) return TPU_KU_INVALID(c, "lr must be a one-element tensor");
    lr = run ? tpu_ku_load_f64(lr_t->data, lr_t->dtype) : 0.0;
  } else {
    lr = tpu_ku_double(c, 6, 0.0);
  }
  const double beta1 = tpu_ku_double(c, 7, 0.9), beta2 = tpu_ku_double(c, 8, 0.999);
  const double wd = tpu_ku_double(c, 9, 0.0), eps = tpu_ku_double(c, 10, 1e-8);
  const bool maximize = tpu_ku_bool(c, 12, false);
  const tpu_tensor_t* scale = tpu_ku_tensor(c, 13);
  const tpu_tensor_t* found = tpu_ku_tensor(c, 14);
  if (run && found && tpu_ku_load_f64(found->data, found->dtype) == 1.0) return TPU_OK;
  const double inv_scale = run && scale ? 1.0 / tpu_ku_load_f64(scale->data, scale->dtype) : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const tpu_tensor_t* t[6];
    for (int k = 0; k < 6; ++k) {
      t[k] = k == 4 && !amsgrad ? NULL : &lists[k]->v.tensors.data[i];
    }
    const tpu_tensor_t* p = t[0];
    if (p->dtype != TPU_DTYPE_F32 && p->dtype != TPU_DTYPE_BF16 && p->dtype != TPU_DTYPE_F16 &&
        p->dtype != TPU_DTYPE_F64) {
      return tpu_ku_unsupported_dtype(c, p->dtype);
    }
    if (!tpu_tensor_is_contiguous(p)) return TPU_KU_INVALID(c, "self[%lld] must be contiguous", (long long)i);
    for (int k = 1; k < 5; ++k) {
      if (t[k] && !op_same(p, t[k])) {
        return TPU_KU_INVALID(c, "%s[%lld] must be contiguous with the sizes and dtype (%s) of self[%lld]", names[k],
                              (long long)i, tpu_dtype_name((tpu_dtype_t)p->dtype), (long long)i);
      }
    }
    if (tpu_tensor_numel(t[5]) != 1) {
      return TPU_KU_INVALID(c, "state_steps[%lld] must be a one-element tensor", (long long)i);
    }
    if (!run) continue;
    const int64_t numel = tpu_tensor_numel(p);
    if (numel == 0) continue;
    const double step = tpu_ku_load_f64(t[5]->data, t[5]->dtype);
    const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    op_f32_t f = {NULL, NULL, NULL, NULL, NULL, (float)lr, (float)beta1, (float)beta2, (float)wd, (float)eps,
                  (float)(lr / bc1), (float)sqrt(bc2), (float)inv_scale, adamw, amsgrad, maximize};
    if (p->dtype == TPU_DTYPE_F32) {
      f.p = p->data;
      f.g = t[1]->data;
      f.m = t[2]->data;
      f.v = t[3]->data;
      f.vmax = amsgrad ? t[4]->data : NULL;
      tpu_parallel_for(c->pool, numel, OP_GRAIN, op_adam_f32, &f);
    } else {
      op_any_t a = {p, t[1], t[2], t[3], t[4], f};
      tpu_parallel_for(c->pool, numel, OP_GRAIN, op_adam_any, &a);
    }
  }
  return TPU_OK;
}

static tpu_status_t op_adam_run(const tpu_k_call_t* c) { return op_adam(c, false, true); }
static tpu_status_t op_adam_check(const tpu_k_call_t* c) { return op_adam(c, false, false); }
static tpu_status_t op_adamw_run(const tpu_k_call_t* c) { return op_adam(c, true, true); }
static tpu_status_t op_adamw_check(const tpu_k_call_t* c) { return op_adam(c, true, false); }

const tpu_k_entry_t tpu_k_optim_entries[] = {
    {"aten::_fused_adam_", op_adam_run, op_adam_check, 0, NULL},
    {"aten::_fused_adam_.tensor_lr", op_adam_run, op_adam_check, 0, NULL},
    {"aten::_fused_adamw_", op_adamw_run, op_adamw_check, 0, NULL},
    {"aten::_fused_adamw_.tensor_lr", op_adamw_run, op_adamw_check, 0, NULL},
};
const size_t tpu_k_optim_count = sizeof(tpu_k_optim_entries) / sizeof(tpu_k_optim_entries[0]);
