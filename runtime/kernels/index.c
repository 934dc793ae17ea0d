/* index.c - kernel family "index" (see tpu/kernels.h for the ABI):
 * index_select, gather, scatter(_add), advanced indexing (index.Tensor,
 * index_put_, put_, index_reduce), embedding backward, cat/stack, flip/roll, triu/tril,
 * arange/linspace, repeat_interleave, sort, topk, searchsorted/bucketize.
 *
 * Index tensors are validated in a first pass (nothing is read out of bounds;
 * an out-of-range index returns OUT_OF_RANGE naming the op, the index and the
 * size), then data moves through kutil's strided iterator. */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

static size_t ix_es(const tpu_tensor_t* t) { return tpu_dtype_size((tpu_dtype_t)t->dtype); }
static bool ix_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }
static bool ix_is_index_dt(int dt) { return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32; }
/* gather/scatter index dtype check: int64/int32, or any dtype when empty
 * (PyTorch checks the dtype of non-empty indices only). */
static bool ix_index_ok(const tpu_tensor_t* t) {
  return ix_is_index_dt(t->dtype) || (tpu_tensor_numel(t) == 0 && ix_dtype_ok(t->dtype));
}
static bool ix_is_int_dt(int dt) { return !tpu_dtype_is_floating((tpu_dtype_t)dt); }

static inline int64_t ix_ld_index(const char* p, int dt) {
  return dt == TPU_DTYPE_I64 ? *(const int64_t*)p : (int64_t)*(const int32_t*)p;
}

static tpu_status_t ix_oob(const tpu_k_call_t* call, int64_t idx, int dim, int64_t size) {
  return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: index %lld is out of bounds for dimension %d with size %lld",
                   call->op, (long long)idx, dim, (long long)size);
}

static bool ix_same_shape(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

static bool ix_same_view(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->data != b->data || !ix_same_shape(a, b)) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] > 1 && a->strides[d] != b->strides[d]) return false;
  return true;
}

/* t with dim `dim` removed (data unchanged). */
static tpu_tensor_t ix_drop_dim(const tpu_tensor_t* t, int32_t dim) {
  tpu_tensor_t v = *t;
  if (t->ndim == 0) return v;
  for (int32_t d = dim; d + 1 < t->ndim; ++d) {
    v.sizes[d] = t->sizes[d + 1];
    v.strides[d] = t->strides[d + 1];
  }
  v.ndim = t->ndim - 1;
  return v;
}

/* Lines of `t` along dim: fn(ctx, byte offset of the line start in each
 * operand). Operands share the iteration shape (all but dim). */
typedef struct {
  int nops;
  const tpu_tensor_t* ops[3];
  int32_t dim;
  int64_t lines;
} ix_lines_t;

static void ix_line_offsets(const ix_lines_t* l, int64_t line, int64_t* off) {
  const tpu_tensor_t* t0 = l->ops[0];
  for (int k = 0; k < l->nops; ++k) off[k] = 0;
  for (int32_t d = t0->ndim - 1; d >= 0; --d) {
    if (d == l->dim) continue;
    int64_t i = line % t0->sizes[d];
    line /= t0->sizes[d];
    for (int k = 0; k < l->nops; ++k) off[k] += i * l->ops[k]->strides[d] * (int64_t)ix_es(l->ops[k]);
  }
}

/* ---- strided copy with conversion ------------------------------------------- */

typedef struct {
  int ddt, sdt;
  int64_t es;
  bool add; /* dst += src */
} ix_cp_t;

static void ix_copy_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const ix_cp_t* c = (const ix_cp_t*)ctx;
  char* d = p[0];
  const char* s = p[1];
  int64_t ds = st[0], ss = st[1];
  if (c->add) {
    if (ix_is_int_dt(c->ddt) && ix_is_int_dt(c->sdt)) {
      for (int64_t i = 0; i < n; ++i) {
        uint64_t v = (uint64_t)tpu_ku_load_i64(d + i * ds, c->ddt) + (uint64_t)tpu_ku_load_i64(s + i * ss, c->sdt);
        tpu_ku_store_i64(d + i * ds, c->ddt, (int64_t)v);
      }
    } else if (c->ddt == TPU_DTYPE_F32 && c->sdt == TPU_DTYPE_F32) {
      for (int64_t i = 0; i < n; ++i) *(float*)(d + i * ds) += *(const float*)(s + i * ss);
    } else {
      for (int64_t i = 0; i < n; ++i)
        tpu_ku_store_f64(d + i * ds, c->ddt, tpu_ku_load_f64(d + i * ds, c->ddt) + tpu_ku_load_f64(s + i * ss, c->sdt));
    }
    return;
  }
  if (c->ddt == c->sdt) {
    int64_t es = c->es;
    if (ds == es && ss == es) {
      memcpy(d, s, (size_t)(n * es));
      return;
    }
    switch (es) {
      case 1: for (int64_t i = 0; i < n; ++i) *(uint8_t*)(d + i * ds) = *(const uint8_t*)(s + i * ss); break;
      case 2: for (int64_t i = 0; i < n; ++i) *(uint16_t*)(d + i * ds) = *(const uint16_t*)(s + i * ss); break;
      case 4: for (int64_t i = 0; i < n; ++i) *(uint32_t*)(d + i * ds) = *(const uint32_t*)(s + i * ss); break;
      default: for (int64_t i = 0; i < n; ++i) *(uint64_t*)(d + i * ds) = *(const uint64_t*)(s + i * ss); break;
    }
    return;
  }
  if (ix_is_int_dt(c->sdt)) {
    for (int64_t i = 0; i < n; ++i) tpu_ku_store_i64(d + i * ds, c->ddt, tpu_ku_load_i64(s + i * ss, c->sdt));
  } else {
    for (int64_t i = 0; i < n; ++i) tpu_ku_store_f64(d + i * ds, c->ddt, tpu_ku_load_f64(s + i * ss, c->sdt));
  }
}

/* One element. */
static inline void ix_copy1(const ix_cp_t* c, char* d, const char* s) {
  if (!c->add && c->ddt == c->sdt) {
    switch (c->es) {
      case 1: *(uint8_t*)d = *(const uint8_t*)s; return;
      case 2: *(uint16_t*)d = *(const uint16_t*)s; return;
      case 4: *(uint32_t*)d = *(const uint32_t*)s; return;
      default: *(uint64_t*)d = *(const uint64_t*)s; return;
    }
  }
  char* p[2] = {d, (char*)s};
  int64_t z[2] = {0, 0};
  ix_copy_inner((void*)c, p, z, 1);
}

static ix_cp_t ix_cp(const tpu_tensor_t* dst, const tpu_tensor_t* src, bool add) {
  ix_cp_t c = {dst->dtype, src->dtype, (int64_t)ix_es(dst), add};
  return c;
}

/* dst <- src (src broadcast to dst's shape). */
static tpu_status_t ix_copy(const tpu_tensor_t* dst, const tpu_tensor_t* src, tpu_threadpool_t* pool,
                            const char* op) {
  if (tpu_tensor_numel(dst) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  const tpu_tensor_t* ops[2] = {dst, src};
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, op));
  ix_cp_t c = ix_cp(dst, src, false);
  tpu_ku_iter_parallel(&it, pool, 32768, ix_copy_inner, &c);
  return TPU_OK;
}

/* Validates every element of an index tensor against [-size, size) (wrap)
 * or [0, size). */
typedef struct {
  int dt;
  int64_t size;
  bool wrap, bad;
  int64_t bad_value;
} ix_val_t;

static void ix_validate_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  ix_val_t* v = (ix_val_t*)ctx;
  if (v->bad) return;
  int64_t lo = v->wrap ? -v->size : 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = ix_ld_index(p[0] + i * st[0], v->dt);
    if (x < lo || x >= v->size) {
      v->bad = true;
      v->bad_value = x;
      return;
    }
  }
}

static tpu_status_t ix_validate(const tpu_k_call_t* call, const tpu_tensor_t* index, int64_t size, int dim,
                                bool wrap) {
  if (tpu_tensor_numel(index) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 1, &index, call->op));
  ix_val_t v = {index->dtype, size, wrap, false, 0};
  tpu_ku_iter_run(&it, 0, it.numel, ix_validate_inner, &v);
  if (v.bad) return ix_oob(call, v.bad_value, dim, size);
  return TPU_OK;
}

/* ---- index_select ----------------------------------------------------------- */

static tpu_status_t ix_dim_arg(const tpu_k_call_t* call, int ai, int32_t ndim, int32_t* out) {
  if (ai >= call->num_args || call->args[ai].kind != TPU_K_INT)
    return TPU_KU_INVALID(call, "expected an int dim (argument %d)", ai);
  return tpu_ku_wrap_dim(call, call->args[ai].v.i, ndim, out);
}

static tpu_status_t ix_select_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  if (!self || !index || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, dim, index");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_is_index_dt(index->dtype)) return tpu_ku_unsupported_dtype(call, index->dtype);
  if (index->ndim > 1) return TPU_KU_INVALID(call, "index_select(): Index is supposed to be a vector");
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != self->dtype) return TPU_KU_INVALID(call, "output dtype differs from self");
  int64_t n = tpu_tensor_numel(index);
  if (self->ndim == 0) {
    if (out->ndim > 1 || tpu_tensor_numel(out) != n) return TPU_KU_INVALID(call, "bad output shape");
    return TPU_OK;
  }
  if (out->ndim != self->ndim) return TPU_KU_INVALID(call, "bad output rank");
  for (int32_t d = 0; d < self->ndim; ++d)
    if (out->sizes[d] != (d == dim ? n : self->sizes[d])) return TPU_KU_INVALID(call, "bad output shape");
  return TPU_OK;
}

typedef struct {
  tpu_ku_iter_t it; /* slice copy, bases replaced per item */
  ix_cp_t cp;
  const char* out;
  const char* src;
  int64_t ostride, sstride; /* bytes along dim */
  const char* index;
  int64_t istride;
  int idt;
  int64_t size;
} ix_sel_t;

static void ix_select_body(void* ctx, int64_t b, int64_t e) {
  const ix_sel_t* c = (const ix_sel_t*)ctx;
  tpu_ku_iter_t it = c->it;
  for (int64_t i = b; i < e; ++i) {
    int64_t x = ix_ld_index(c->index + i * c->istride, c->idt);
    if (x < 0) x += c->size;
    it.base[0] = (char*)c->out + i * c->ostride;
    it.base[1] = (char*)c->src + x * c->sstride;
    tpu_ku_iter_run(&it, 0, it.numel, ix_copy_inner, (void*)&c->cp);
  }
}

static tpu_status_t ix_select_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_select_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  int64_t n = tpu_tensor_numel(index);
  int64_t size = self->ndim ? self->sizes[dim] : 1;
  TPU_RETURN_IF_ERROR(ix_validate(call, index, size, dim, false));
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  ix_sel_t c;
  tpu_tensor_t ov = ix_drop_dim(out, self->ndim ? dim : 0), sv = ix_drop_dim(self, dim);
  if (self->ndim == 0) {
    ov.ndim = 0;
    sv.ndim = 0;
  }
  const tpu_tensor_t* ops[2] = {&ov, &sv};
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&c.it, 2, ops, call->op));
  c.cp = ix_cp(out, self, false);
  c.out = (const char*)out->data;
  c.src = (const char*)self->data;
  c.ostride = out->ndim ? out->strides[self->ndim ? dim : 0] * (int64_t)ix_es(out) : 0;
  c.sstride = self->ndim ? self->strides[dim] * (int64_t)ix_es(self) : 0;
  c.index = (const char*)index->data;
  c.istride = index->ndim ? index->strides[0] * (int64_t)ix_es(index) : 0;
  c.idt = index->dtype;
  c.size = size;
  int64_t grain = 16384 / (c.it.numel + 1) + 1;
  tpu_parallel_for(call->pool, n, grain, ix_select_body, &c);
  return TPU_OK;
}

/* ---- gather / scatter ---------------------------------------------------------- */

/* self viewed with index's sizes, stride along dim zeroed (the index picks). */
static tpu_tensor_t ix_along_view(const tpu_tensor_t* t, const tpu_tensor_t* index, int32_t dim) {
  tpu_tensor_t v = *t;
  for (int32_t d = 0; d < index->ndim; ++d) v.sizes[d] = index->sizes[d];
  v.ndim = index->ndim;
  if (v.ndim > 0) v.strides[dim] = 0;
  return v;
}

static tpu_status_t ix_gs_shapes(const tpu_k_call_t* call, const tpu_tensor_t* self, const tpu_tensor_t* index,
                                 const tpu_tensor_t* src, int32_t dim) {
  int32_t sn = self->ndim ? self->ndim : 1, in = index->ndim ? index->ndim : 1;
  if (tpu_tensor_numel(index) == 0) return TPU_OK;
  if (sn != in) return TPU_KU_INVALID(call, "Index tensor must have the same number of dimensions as input tensor");
  for (int32_t d = 0; d < index->ndim && self->ndim; ++d) {
    if (d != dim && index->sizes[d] > self->sizes[d])
      return TPU_KU_INVALID(call, "Size does not match at dimension %d expected index [%lld] to be smaller than self [%lld] apart from dimension %d",
                            (int)d, (long long)index->sizes[d], (long long)self->sizes[d], (int)dim);
    if (src && src->ndim == index->ndim && index->sizes[d] > src->sizes[d])
      return TPU_KU_INVALID(call, "Size does not match at dimension %d expected index [%lld] to be smaller than src [%lld]",
                            (int)d, (long long)index->sizes[d], (long long)src->sizes[d]);
  }
  if (src && src->ndim != index->ndim && !(src->ndim <= 1 && index->ndim <= 1))
    return TPU_KU_INVALID(call, "Index tensor must have the same number of dimensions as src tensor");
  return TPU_OK;
}

static tpu_status_t ix_gather_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  if (!self || !index || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, dim, index");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_index_ok(index)) return tpu_ku_unsupported_dtype(call, index->dtype);
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  TPU_RETURN_IF_ERROR(ix_gs_shapes(call, self, index, NULL, dim));
  const tpu_tensor_t* out = &call->outputs[0];
  if (tpu_tensor_numel(out) != tpu_tensor_numel(index) || (out->ndim != index->ndim && tpu_tensor_numel(out) > 1))
    return TPU_KU_INVALID(call, "output must have the index's shape");
  return TPU_OK;
}

typedef struct {
  int idt;
  int64_t dstride; /* bytes per index step in the data operand */
  ix_cp_t cp;
  bool scatter;    /* else gather */
  bool value;      /* scatter a scalar */
  double vd;
  int64_t vi;
  bool vint;
} ix_gs_t;

/* gather: p0 out, p1 index, p2 self-view; scatter: p0 index, p1 out-view, p2 src */
static void ix_gs_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const ix_gs_t* c = (const ix_gs_t*)ctx;
  for (int64_t i = 0; i < n; ++i) {
    if (!c->scatter) {
      int64_t x = ix_ld_index(p[1] + i * st[1], c->idt);
      ix_copy1(&c->cp, p[0] + i * st[0], p[2] + i * st[2] + x * c->dstride);
    } else {
      int64_t x = ix_ld_index(p[0] + i * st[0], c->idt);
      char* d = p[1] + i * st[1] + x * c->dstride;
      if (c->value) {
        if (c->vint) {
          tpu_ku_store_i64(d, c->cp.ddt, c->vi);
        } else {
          tpu_ku_store_f64(d, c->cp.ddt, c->vd);
        }
      } else {
        ix_copy1(&c->cp, d, p[2] + i * st[2]);
      }
    }
  }
}

static tpu_status_t ix_gather_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_gather_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  if (tpu_tensor_numel(index) == 0) return TPU_OK;
  int64_t size = self->ndim ? self->sizes[dim] : 1;
  TPU_RETURN_IF_ERROR(ix_validate(call, index, size, dim, false));
  tpu_tensor_t sv = ix_along_view(self, index, dim), ov = *out;
  if (ov.ndim != index->ndim) { /* 0-dim vs 1-element */
    ov = *index;
    ov.data = out->data;
    ov.dtype = out->dtype;
    for (int32_t d = 0; d < ov.ndim; ++d) ov.strides[d] = 0;
  }
  const tpu_tensor_t* ops[3] = {&ov, index, &sv};
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 3, ops, call->op));
  ix_gs_t c;
  memset(&c, 0, sizeof(c));
  c.idt = index->dtype;
  c.dstride = self->ndim ? self->strides[dim] * (int64_t)ix_es(self) : 0;
  c.cp = ix_cp(out, self, false);
  tpu_ku_iter_parallel(&it, call->pool, 16384, ix_gs_inner, &c);
  return TPU_OK;
}

/* scatter family: (self, dim, index, src|value[, out]) */

static tpu_status_t ix_scatter_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  bool value = strstr(call->op, ".value") != NULL;
  if (!self || !index || (!value && !src) || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected self, dim, index, src");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_index_ok(index)) return tpu_ku_unsupported_dtype(call, index->dtype);
  if (src && !ix_dtype_ok(src->dtype)) return tpu_ku_unsupported_dtype(call, src->dtype);
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  TPU_RETURN_IF_ERROR(ix_gs_shapes(call, self, index, value ? NULL : src, dim));
  if (!ix_same_shape(&call->outputs[0], self)) return TPU_KU_INVALID(call, "output shape differs from self");
  return TPU_OK;
}

static tpu_status_t ix_scatter_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_scatter_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  bool value = strstr(call->op, ".value") != NULL;
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  int64_t size = self->ndim ? self->sizes[dim] : 1;
  TPU_RETURN_IF_ERROR(ix_validate(call, index, size, dim, false));
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  if (tpu_tensor_numel(index) == 0) return TPU_OK;
  tpu_tensor_t ov = ix_along_view(out, index, dim);
  if (self->ndim == 0) ov.ndim = 0;
  ix_gs_t c;
  memset(&c, 0, sizeof(c));
  c.idt = index->dtype;
  c.scatter = true;
  c.dstride = out->ndim ? out->strides[dim] * (int64_t)ix_es(out) : 0;
  tpu_tensor_t sv;
  if (value) {
    c.value = true;
    c.vd = tpu_ku_double(call, 3, 0.0);
    c.vi = tpu_ku_int(call, 3, 0);
    c.vint = call->args[3].kind != TPU_K_DOUBLE;
    c.cp = ix_cp(out, out, false);
    sv = *index; /* placeholder operand, never read */
  } else {
    const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
    sv = *src;
    for (int32_t d = 0; d < index->ndim && d < sv.ndim; ++d) sv.sizes[d] = index->sizes[d];
    if (sv.ndim != index->ndim) { /* 0-dim/1-element mix */
      sv = *index;
      sv.data = src->data;
      sv.dtype = src->dtype;
      for (int32_t d = 0; d < sv.ndim; ++d) sv.strides[d] = 0;
    }
    c.cp = ix_cp(out, src, false);
  }
  const tpu_tensor_t* ops[3] = {index, &ov, &sv};
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 3, ops, call->op));
  tpu_ku_iter_run(&it, 0, it.numel, ix_gs_inner, &c); /* serial: duplicates */
  return TPU_OK;
}

/* ---- scatter with a reduction ------------------------------------------------------
 * scatter_add, scatter.reduce / .value_reduce ("add", "multiply") and
 * scatter_reduce.two ("sum", "prod", "mean", "amax", "amin"; include_self),
 * and index_add's alpha == 1 path. Work goes by lines along dim (every other
 * index coordinate fixed): one line's destinations are one line of out,
 * disjoint from every other line's, so lines run in parallel and each line
 * follows index order, as PyTorch's CPU kernel does. f16/bf16 accumulate in
 * float (PyTorch's opmath buffer: one rounding at the end) in a window of
 * IX_SR_WINDOW destinations held on the stack; "mean" counts contributions in
 * the same window. Other dtypes update out in place in their own arithmetic
 * (double math rounded to float is exactly float math for + * max min). */

enum { IX_R_SUM, IX_R_PROD, IX_R_MEAN, IX_R_AMAX, IX_R_AMIN };
#define IX_SR_WINDOW 4096 /* 2 x 32 KiB of stack */

typedef struct {
  const tpu_tensor_t* out;
  const tpu_tensor_t* index;
  const tpu_tensor_t* src; /* NULL: the scalar value */
  ix_lines_t l;            /* ops: index, out, src (index again for a value) */
  int red;
  bool include_self, fp, windowed;
  bool step_round; /* every step rounded to out's dtype (index_reduce's f16/bf16 arithmetic) */
  double vd; /* the value, already rounded to out's dtype */
  int64_t vi;
  int64_t li, ls;     /* index / out line lengths */
  int64_t is, os, ss; /* byte strides along dim */
} ix_sr_t;

static double ix_round_dt(double v, int dt) {
  char tmp[8];
  tpu_ku_store_f64(tmp, dt, v);
  return tpu_ku_load_f64(tmp, dt);
}

static int64_t ix_wrap_dt(int64_t v, int dt) {
  char tmp[8];
  tpu_ku_store_i64(tmp, dt, v);
  return tpu_ku_load_i64(tmp, dt);
}

static inline double ix_sr_f(int red, double a, double v) {
  switch (red) {
    case IX_R_PROD: return a * v;
    case IX_R_AMAX: return v != v ? v : (a < v ? v : a);
    case IX_R_AMIN: return v != v ? v : (v < a ? v : a);
    default: return a + v;
  }
}

static inline int64_t ix_sr_i(int red, int64_t a, int64_t v) {
  switch (red) {
    case IX_R_PROD: return (int64_t)((uint64_t)a * (uint64_t)v);
    case IX_R_AMAX: return a < v ? v : a;
    case IX_R_AMIN: return v < a ? v : a;
    default: return (int64_t)((uint64_t)a + (uint64_t)v);
  }
}

static double ix_sr_ident_f(int red) {
  return red == IX_R_PROD ? 1.0 : red == IX_R_AMAX ? -INFINITY : red == IX_R_AMIN ? INFINITY : 0.0;
}

static int64_t ix_sr_ident_i(int red, int dt) {
  if (red == IX_R_PROD) return 1;
  if (red != IX_R_AMAX && red != IX_R_AMIN) return 0;
  bool mx = red == IX_R_AMAX; /* identity of max is the lowest value */
  switch (dt) {
    case TPU_DTYPE_I32: return mx ? INT32_MIN : INT32_MAX;
    case TPU_DTYPE_I16: return mx ? INT16_MIN : INT16_MAX;
    case TPU_DTYPE_I8: return mx ? INT8_MIN : INT8_MAX;
    case TPU_DTYPE_U8: return mx ? 0 : UINT8_MAX;
    case TPU_DTYPE_BOOL: return mx ? 0 : 1;
    default: return mx ? INT64_MIN : INT64_MAX;
  }
}

static void ix_sr_line_direct(const ix_sr_t* c, const char* ip, char* op, const char* sp) {
  const int odt = c->out->dtype, idt = c->index->dtype, sdt = c->src ? c->src->dtype : odt;
  if (!c->include_self) {
    for (int64_t i = 0; i < c->li; ++i) {
      char* d = op + ix_ld_index(ip + i * c->is, idt) * c->os;
      if (c->fp) tpu_ku_store_f64(d, odt, ix_sr_ident_f(c->red));
      else tpu_ku_store_i64(d, odt, ix_sr_ident_i(c->red, odt));
    }
  }
  for (int64_t i = 0; i < c->li; ++i) {
    char* d = op + ix_ld_index(ip + i * c->is, idt) * c->os;
    if (c->fp) {
      double v = c->src ? tpu_ku_load_f64(sp + i * c->ss, sdt) : c->vd;
      tpu_ku_store_f64(d, odt, ix_sr_f(c->red, tpu_ku_load_f64(d, odt), v));
    } else {
      int64_t v = c->src ? tpu_ku_load_i64(sp + i * c->ss, sdt) : c->vi;
      tpu_ku_store_i64(d, odt, ix_sr_i(c->red, tpu_ku_load_i64(d, odt), v));
    }
  }
}

static inline int64_t ix_floor_div(int64_t a, int64_t b) {
  if (b == -1) return (int64_t)(0 - (uint64_t)a);
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

static void ix_sr_line_window(const ix_sr_t* c, const char* ip, char* op, const char* sp) {
  const int odt = c->out->dtype, idt = c->index->dtype, sdt = c->src ? c->src->dtype : odt;
  const bool opf = c->fp && odt != TPU_DTYPE_F64; /* opmath float */
  const bool mean = c->red == IX_R_MEAN;
  union {
    double d[IX_SR_WINDOW];
    int64_t i[IX_SR_WINDOW];
  } acc;
  int64_t cnt[IX_SR_WINDOW];
  for (int64_t w0 = 0; w0 < c->ls; w0 += IX_SR_WINDOW) {
    int64_t wn = c->ls - w0 < IX_SR_WINDOW ? c->ls - w0 : IX_SR_WINDOW;
    for (int64_t k = 0; k < wn; ++k) {
      const char* d = op + (w0 + k) * c->os;
      if (c->fp) acc.d[k] = tpu_ku_load_f64(d, odt);
      else acc.i[k] = tpu_ku_load_i64(d, odt);
      cnt[k] = c->include_self;
    }
    if (!c->include_self) {
      for (int64_t i = 0; i < c->li; ++i) {
        int64_t x = ix_ld_index(ip + i * c->is, idt) - w0;
        if (x < 0 || x >= wn) continue;
        if (c->fp) acc.d[x] = ix_sr_ident_f(c->red);
        else acc.i[x] = ix_sr_ident_i(c->red, odt);
      }
    }
    for (int64_t i = 0; i < c->li; ++i) {
      int64_t x = ix_ld_index(ip + i * c->is, idt) - w0;
      if (x < 0 || x >= wn) continue;
      cnt[x]++;
      if (c->fp) {
        double r = ix_sr_f(c->red, acc.d[x], c->src ? tpu_ku_load_f64(sp + i * c->ss, sdt) : c->vd);
        acc.d[x] = c->step_round ? ix_round_dt(r, odt) : opf ? (double)(float)r : r;
      } else {
        acc.i[x] = ix_sr_i(c->red, acc.i[x], c->src ? tpu_ku_load_i64(sp + i * c->ss, sdt) : c->vi);
      }
    }
    for (int64_t k = 0; k < wn; ++k) {
      char* d = op + (w0 + k) * c->os;
      if (!mean) {
        if (c->fp) tpu_ku_store_f64(d, odt, acc.d[k]);
        else tpu_ku_store_i64(d, odt, acc.i[k]);
        continue;
      }
      /* PyTorch: the sum lands in out, the count (out's dtype) is clamped to
       * >= 1, then out.div_(count) (floor division for integers). */
      if (c->fp) {
        double n = ix_round_dt((double)cnt[k], odt);
        double q = ix_round_dt(acc.d[k], odt) / (n == 0 ? 1.0 : n);
        tpu_ku_store_f64(d, odt, opf ? (double)(float)q : q);
      } else {
        int64_t n = ix_wrap_dt(cnt[k], odt);
        tpu_ku_store_i64(d, odt, ix_floor_div(ix_wrap_dt(acc.i[k], odt), n == 0 ? 1 : n));
      }
    }
  }
}

static void ix_sr_body(void* ctx, int64_t b, int64_t e) {
  const ix_sr_t* c = (const ix_sr_t*)ctx;
  for (int64_t line = b; line < e; ++line) {
    int64_t off[3];
    ix_line_offsets(&c->l, line, off);
    const char* ip = (const char*)c->index->data + off[0];
    char* op = (char*)c->out->data + off[1];
    const char* sp = c->src ? (const char*)c->src->data + off[2] : NULL;
    if (c->windowed) ix_sr_line_window(c, ip, op, sp);
    else ix_sr_line_direct(c, ip, op, sp);
  }
}

/* out (already holding self) op= src (or the Scalar argument `value`) along
 * dim at index; indices validated by the caller. */
static void ix_sr_exec(const tpu_k_call_t* call, const tpu_tensor_t* out, const tpu_tensor_t* index,
                       const tpu_tensor_t* src, const tpu_k_value_t* value, int32_t dim, int red,
                       bool include_self, bool step_round) {
  int64_t n = tpu_tensor_numel(index);
  if (n == 0) return;
  ix_sr_t c;
  memset(&c, 0, sizeof(c));
  c.out = out;
  c.index = index;
  c.src = src;
  c.red = red;
  c.include_self = include_self;
  c.step_round = step_round;
  c.fp = tpu_dtype_is_floating((tpu_dtype_t)out->dtype);
  c.windowed = out->dtype == TPU_DTYPE_F16 || out->dtype == TPU_DTYPE_BF16 || red == IX_R_MEAN;
  if (!src) { /* value.to<scalar_t>() */
    int64_t iv = value->kind == TPU_K_INT ? value->v.i : value->kind == TPU_K_BOOL ? value->v.b : 0;
    c.vd = ix_round_dt(value->kind == TPU_K_DOUBLE ? value->v.d : (double)iv, out->dtype);
    c.vi = value->kind == TPU_K_DOUBLE ? (int64_t)c.vd : ix_wrap_dt(iv, out->dtype);
  }
  const int32_t nd = index->ndim;
  c.li = nd ? index->sizes[dim] : 1;
  c.ls = out->ndim ? out->sizes[dim] : 1;
  c.is = nd ? index->strides[dim] * (int64_t)ix_es(index) : 0;
  c.os = out->ndim ? out->strides[dim] * (int64_t)ix_es(out) : 0;
  c.ss = src && src->ndim && src->ndim == nd ? src->strides[dim] * (int64_t)ix_es(src) : 0;
  c.l.nops = 3;
  c.l.ops[0] = index;
  c.l.ops[1] = out;
  c.l.ops[2] = src && src->ndim == nd ? src : index;
  c.l.dim = nd ? dim : -1;
  c.l.lines = n / c.li;
  int64_t grain = 32768 / (c.li + 1) + 1;
  tpu_parallel_for(call->pool, c.l.lines, grain, ix_sr_body, &c);
}

/* (self, dim, index, src|value[, reduce[, include_self]]) -> reduction, include_self */
static tpu_status_t ix_sr_parse(const tpu_k_call_t* call, int* red, bool* include_self) {
  *red = IX_R_SUM;
  *include_self = true;
  if (strstr(call->op, "scatter_add")) return TPU_OK;
  const char* r = tpu_ku_string(call, 4, NULL);
  if (!r) return TPU_KU_INVALID(call, "expected a reduce argument");
  if (strstr(call->op, "index_reduce")) {
    *include_self = tpu_ku_bool(call, 5, true);
    if (strcmp(r, "prod") == 0) *red = IX_R_PROD;
    else if (strcmp(r, "mean") == 0) *red = IX_R_MEAN;
    else if (strcmp(r, "amax") == 0) *red = IX_R_AMAX;
    else if (strcmp(r, "amin") == 0) *red = IX_R_AMIN;
    else
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "%s: index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s.",
                       call->op, r);
    return TPU_OK;
  }
  if (strstr(call->op, "scatter_reduce")) {
    *include_self = tpu_ku_bool(call, 5, true);
    if (strcmp(r, "sum") == 0) *red = IX_R_SUM;
    else if (strcmp(r, "prod") == 0) *red = IX_R_PROD;
    else if (strcmp(r, "mean") == 0) *red = IX_R_MEAN;
    else if (strcmp(r, "amax") == 0) *red = IX_R_AMAX;
    else if (strcmp(r, "amin") == 0) *red = IX_R_AMIN;
    else return TPU_KU_INVALID(call, "reduce argument must be either sum, prod, mean, amax or amin, got %s", r);
    return TPU_OK;
  }
  if (strcmp(r, "add") == 0) *red = IX_R_SUM;
  else if (strcmp(r, "multiply") == 0) *red = IX_R_PROD;
  else return TPU_KU_INVALID(call, "reduce argument must be either add or multiply.");
  return TPU_OK;
}

static tpu_status_t ix_sr_check(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_scatter_check(call));
  int red;
  bool include_self;
  TPU_RETURN_IF_ERROR(ix_sr_parse(call, &red, &include_self));
  const tpu_tensor_t* out = &call->outputs[0];
  if (red == IX_R_MEAN && out->dtype == TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, out->dtype);
  return TPU_OK;
}

static tpu_status_t ix_sr_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_sr_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  int red;
  bool include_self;
  TPU_RETURN_IF_ERROR(ix_sr_parse(call, &red, &include_self));
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  TPU_RETURN_IF_ERROR(ix_validate(call, index, self->ndim ? self->sizes[dim] : 1, dim, false));
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  ix_sr_exec(call, out, index, tpu_ku_tensor(call, 3), &call->args[3], dim, red, include_self, false);
  return TPU_OK;
}

/* ---- index_add / index_copy / index_fill ------------------------------------------ */

static void ix_fill(const tpu_tensor_t* t, const char* val, tpu_threadpool_t* pool, const char* op);

/* t.select(dim, i); a 0-dim t is its own slice. */
static tpu_tensor_t ix_select_view(const tpu_tensor_t* t, int32_t dim, int64_t i) {
  if (t->ndim == 0) return *t;
  tpu_tensor_t v = ix_drop_dim(t, dim);
  v.data = (char*)t->data + i * t->strides[dim] * (int64_t)ix_es(t);
  return v;
}

static int64_t ix_index_at(const tpu_tensor_t* index, int64_t i) {
  int64_t st = index->ndim ? index->strides[0] * (int64_t)ix_es(index) : 0;
  return ix_ld_index((const char*)index->data + i * st, index->dtype);
}

/* (self, dim, index, source, ...): index_add and index_copy */
static tpu_status_t ix_ia_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  if (!self || !index || !src || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, dim, index, source");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_dtype_ok(src->dtype)) return tpu_ku_unsupported_dtype(call, src->dtype);
  if (!ix_is_index_dt(index->dtype)) return tpu_ku_unsupported_dtype(call, index->dtype);
  if (index->ndim > 1) return TPU_KU_INVALID(call, "Index is supposed to be a vector");
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  if (src->ndim != self->ndim && (src->ndim > 1 || self->ndim > 1))
    return TPU_KU_INVALID(call, "source has %d dims but self has %d", (int)src->ndim, (int)self->ndim);
  int64_t n = tpu_tensor_numel(index), len = src->ndim ? src->sizes[dim] : 1;
  if (len != n)
    return TPU_KU_INVALID(call, "Number of indices (%lld) should be equal to source.size(dim) (%lld)", (long long)n,
                          (long long)len);
  if (src->ndim == self->ndim)
    for (int32_t d = 0; d < self->ndim; ++d)
      if (d != dim && src->sizes[d] != self->sizes[d])
        return TPU_KU_INVALID(call, "source size %lld at dim %d differs from self's %lld", (long long)src->sizes[d], (int)d,
                              (long long)self->sizes[d]);
  if (!ix_same_shape(&call->outputs[0], self)) return TPU_KU_INVALID(call, "output shape differs from self");
  return TPU_OK;
}

/* Shared start of index_add / index_copy / index_fill runs: dim, the size
 * along it, indices validated, out holding self. */
static tpu_status_t ix_ia_begin(const tpu_k_call_t* call, bool wrap, int32_t* dim, int64_t* size) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, dim));
  *size = self->ndim ? self->sizes[*dim] : 1;
  TPU_RETURN_IF_ERROR(ix_validate(call, tpu_ku_tensor(call, 2), *size, *dim, wrap));
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  return TPU_OK;
}

static bool ix_is_one(const tpu_k_value_t* v) {
  return (v->kind == TPU_K_INT && v->v.i == 1) || (v->kind == TPU_K_DOUBLE && v->v.d == 1.0) ||
         (v->kind == TPU_K_BOOL && v->v.b);
}

/* index_add(self, dim, index, source, *, alpha). PyTorch's CPU paths: 0/1-d
 * self adds element by element in the dtype's arithmetic (src * alpha
 * rounded, then the sum); otherwise an int64 index with alpha == 1 along the
 * first or last dim is a scatter_add (f16/bf16 accumulate in float), and
 * the rest is add_(source slice, alpha) per index, which here runs the
 * elementwise family's add_ kernel. */
static tpu_status_t ix_index_add_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_ia_check(call));
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  const tpu_tensor_t* out = &call->outputs[0];
  tpu_k_value_t one;
  memset(&one, 0, sizeof(one));
  one.kind = TPU_K_INT;
  one.v.i = 1;
  const tpu_k_value_t* alpha = call->num_args > 4 && call->args[4].kind != TPU_K_NONE ? &call->args[4] : &one;
  int32_t dim;
  int64_t size;
  TPU_RETURN_IF_ERROR(ix_ia_begin(call, false, &dim, &size));
  int64_t n = tpu_tensor_numel(index);
  if (n == 0 || tpu_tensor_numel(out) == 0) return TPU_OK;
  const int odt = out->dtype;
  if (out->ndim <= 1) {
    int64_t os = out->ndim ? out->strides[0] * (int64_t)ix_es(out) : 0;
    int64_t ss = src->ndim ? src->strides[0] * (int64_t)ix_es(src) : 0;
    bool fp = tpu_dtype_is_floating((tpu_dtype_t)odt);
    double ad = ix_round_dt(alpha->kind == TPU_K_DOUBLE ? alpha->v.d : (double)tpu_ku_int(call, 4, 1), odt);
    int64_t ai = ix_wrap_dt(tpu_ku_int(call, 4, 1), odt);
    for (int64_t i = 0; i < n; ++i) {
      char* d = (char*)out->data + ix_index_at(index, i) * os;
      const char* sp = (const char*)src->data + i * ss;
      if (fp)
        tpu_ku_store_f64(d, odt, tpu_ku_load_f64(d, odt) + ix_round_dt(tpu_ku_load_f64(sp, src->dtype) * ad, odt));
      else
        tpu_ku_store_i64(d, odt, (int64_t)((uint64_t)tpu_ku_load_i64(d, odt) +
                                           (uint64_t)tpu_ku_load_i64(sp, src->dtype) * (uint64_t)ai));
    }
    return TPU_OK;
  }
  if (ix_is_one(alpha) && index->dtype == TPU_DTYPE_I64 && (dim == 0 || dim == out->ndim - 1)) {
    /* index expanded to source's shape */
    tpu_tensor_t iv = *src;
    iv.data = index->data;
    iv.dtype = index->dtype;
    for (int32_t d = 0; d < iv.ndim; ++d) iv.strides[d] = 0;
    iv.strides[dim] = index->ndim ? index->strides[0] : 0;
    ix_sr_exec(call, out, &iv, src, NULL, dim, IX_R_SUM, true, false);
    return TPU_OK;
  }
  const tpu_k_entry_t* add = tpu_k_lookup("aten::add_.Tensor");
  if (!add) return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: the add_ kernel is missing", call->op);
  tpu_tensor_t ov = ix_select_view(out, dim, 0), sv = ix_select_view(src, dim, 0);
  tpu_k_value_t args[3];
  memset(args, 0, sizeof(args));
  args[0].kind = args[1].kind = TPU_K_TENSOR;
  args[0].v.tensor = &ov;
  args[1].v.tensor = &sv;
  args[2] = *alpha;
  tpu_k_call_t sub = *call;
  sub.op = add->name;
  sub.num_args = 3;
  sub.args = args;
  sub.num_outputs = 1;
  sub.outputs = &ov;
  for (int64_t i = 0; i < n; ++i) {
    ov = ix_select_view(out, dim, ix_index_at(index, i));
    sv = ix_select_view(src, dim, i);
    if (add->check) TPU_RETURN_IF_ERROR(add->check(&sub));
    TPU_RETURN_IF_ERROR(add->run(&sub));
  }
  return TPU_OK;
}

/* index_copy(self, dim, index, source): slices in index order (a repeated
 * index keeps the last source slice). */
static tpu_status_t ix_index_copy_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_ia_check(call));
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  int64_t size;
  TPU_RETURN_IF_ERROR(ix_ia_begin(call, false, &dim, &size));
  int64_t n = tpu_tensor_numel(index);
  for (int64_t i = 0; i < n; ++i) {
    tpu_tensor_t dv = ix_select_view(out, dim, ix_index_at(index, i)), sv = ix_select_view(src, dim, i);
    TPU_RETURN_IF_ERROR(ix_copy(&dv, &sv, call->pool, call->op));
  }
  return TPU_OK;
}

/* index_fill(self, dim, index, value): value a Scalar or a 0-dim tensor;
 * negative indices count from the end. */
static tpu_status_t ix_index_fill_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  if (!self || !index || call->num_args < 4 || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected self, dim, index, value");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_is_index_dt(index->dtype)) return tpu_ku_unsupported_dtype(call, index->dtype);
  if (index->ndim > 1) return TPU_KU_INVALID(call, "Index has to be a vector/scalar");
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  const tpu_k_value_t* v = &call->args[3];
  if (v->kind == TPU_K_TENSOR) {
    if (!ix_dtype_ok(v->v.tensor->dtype)) return tpu_ku_unsupported_dtype(call, v->v.tensor->dtype);
    if (v->v.tensor->ndim != 0)
      return TPU_KU_INVALID(call, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).",
                            (int)v->v.tensor->ndim);
  } else if (v->kind != TPU_K_INT && v->kind != TPU_K_DOUBLE && v->kind != TPU_K_BOOL) {
    return TPU_KU_INVALID(call, "expected a Scalar or 0-dim tensor value");
  }
  if (!ix_same_shape(&call->outputs[0], self)) return TPU_KU_INVALID(call, "output shape differs from self");
  return TPU_OK;
}

static tpu_status_t ix_index_fill_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_index_fill_check(call));
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  int64_t size;
  TPU_RETURN_IF_ERROR(ix_ia_begin(call, true, &dim, &size));
  const tpu_k_value_t* v = &call->args[3];
  char val[8];
  if (v->kind == TPU_K_TENSOR) {
    const tpu_tensor_t* t = v->v.tensor;
    if (tpu_dtype_is_floating((tpu_dtype_t)t->dtype)) tpu_ku_store_f64(val, out->dtype, tpu_ku_load_f64(t->data, t->dtype));
    else tpu_ku_store_i64(val, out->dtype, tpu_ku_load_i64(t->data, t->dtype));
  } else if (v->kind == TPU_K_DOUBLE) {
    tpu_ku_store_f64(val, out->dtype, v->v.d);
  } else {
    tpu_ku_store_i64(val, out->dtype, tpu_ku_int(call, 3, 0));
  }
  int64_t n = tpu_tensor_numel(index);
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = ix_index_at(index, i);
    tpu_tensor_t sv = ix_select_view(out, dim, x < 0 ? x + size : x);
    ix_fill(&sv, val, call->pool, call->op);
  }
  return TPU_OK;
}

/* ---- embedding_renorm_ ---------------------------------------------------------------
 * embedding_renorm_(self, indices, max_norm, norm_type): every row of self
 * named by indices, once, is scaled by max_norm / (norm + 1e-7) when its
 * norm exceeds max_norm. Rows are deduplicated with a bitmap over windows of
 * IX_RENORM_WINDOW rows (on the stack), one pass over indices per window. */
#define IX_RENORM_WINDOW 65536

typedef struct {
  const tpu_tensor_t* w;
  int idt;
  double max_norm, p;
  int64_t r0, rows; /* window [r0, r0 + IX_RENORM_WINDOW), rows of w */
  uint64_t* seen;   /* bitmap of the window */
} ix_renorm_t;

static void ix_renorm_row(const ix_renorm_t* c, int64_t r) {
  const tpu_tensor_t* w = c->w;
  const int dt = w->dtype;
  const int64_t es = (int64_t)ix_es(w), cs = w->strides[1] * es, n = w->sizes[1];
  char* row = (char*)w->data + r * w->strides[0] * es;
  const double p = c->p;
  double acc = p == -INFINITY ? INFINITY : 0.0;
  for (int64_t k = 0; k < n; ++k) {
    double a = fabs(tpu_ku_load_f64(row + k * cs, dt));
    if (p == INFINITY) acc = a > acc ? a : acc;
    else if (p == -INFINITY) acc = a < acc ? a : acc;
    else if (p == 0) acc += a != 0;
    else if (p == 1) acc += a;
    else if (p == 2) acc += a * a;
    else acc += pow(a, p);
  }
  double norm = (p == 2) ? sqrt(acc) : (p == 1 || p == 0 || isinf(p)) ? acc : pow(acc, 1.0 / p);
  norm = ix_round_dt(norm, dt); /* PyTorch: row.norm(p) is a tensor of the row's dtype */
  if (!(norm > c->max_norm)) return;
  double scale = ix_round_dt(c->max_norm / (norm + 1e-7), dt); /* row *= scale: scale as the dtype */
  for (int64_t k = 0; k < n; ++k) {
    double v = tpu_ku_load_f64(row + k * cs, dt);
    tpu_ku_store_f64(row + k * cs, dt, dt == TPU_DTYPE_F64 ? v * scale : (double)((float)v * (float)scale));
  }
}

static void ix_renorm_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const ix_renorm_t* c = (const ix_renorm_t*)ctx;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = ix_ld_index(p[0] + i * st[0], c->idt);
    if (r < 0) r += c->rows;
    r -= c->r0;
    if (r < 0 || r >= IX_RENORM_WINDOW || (c->seen[r >> 6] >> (r & 63)) & 1u) continue;
    c->seen[r >> 6] |= 1ull << (r & 63);
    ix_renorm_row(c, r + c->r0);
  }
}

static tpu_status_t ix_renorm_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* idx = tpu_ku_tensor(call, 1);
  if (!self || !idx || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and indices");
  if (!tpu_dtype_is_floating((tpu_dtype_t)self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_is_index_dt(idx->dtype)) return tpu_ku_unsupported_dtype(call, idx->dtype);
  if (self->ndim != 2) return TPU_KU_INVALID(call, "Expected 2-dimensional tensor, but got %d-dimensional tensor", (int)self->ndim);
  if (!ix_same_shape(&call->outputs[0], self) || call->outputs[0].dtype != self->dtype)
    return TPU_KU_INVALID(call, "output differs from self");
  return TPU_OK;
}

static tpu_status_t ix_renorm_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_renorm_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* idx = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* out = &call->outputs[0];
  TPU_RETURN_IF_ERROR(ix_validate(call, idx, out->sizes[0], 0, true));
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  if (tpu_tensor_numel(idx) == 0 || tpu_tensor_numel(out) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 1, &idx, call->op));
  uint64_t seen[IX_RENORM_WINDOW / 64];
  ix_renorm_t c = {out, idx->dtype, tpu_ku_double(call, 2, 0.0), tpu_ku_double(call, 3, 2.0), 0, out->sizes[0], seen};
  for (c.r0 = 0; c.r0 < c.rows; c.r0 += IX_RENORM_WINDOW) {
    memset(seen, 0, sizeof(seen));
    tpu_ku_iter_run(&it, 0, it.numel, ix_renorm_inner, &c);
  }
  return TPU_OK;
}

/* ---- advanced indexing ----------------------------------------------------------- */

typedef struct {
  int32_t nidx;
  const tpu_tensor_t* idx[TPU_MAX_DIMS]; /* NULL: None */
  int32_t first, last, ndef;
  bool adjacent, mask;
  int32_t nb; /* broadcast index rank (mask: 1) */
  int64_t bsz[TPU_MAX_DIMS];
  int64_t bnumel;
  int32_t res_nd, posb;
  int64_t res_sz[TPU_MAX_DIMS];
  int32_t kept[TPU_MAX_DIMS], nkept; /* non-indexed self dims, in order */
} ix_adv_t;

static tpu_status_t ix_adv_setup(const tpu_k_call_t* call, const tpu_tensor_t* self, int ai, ix_adv_t* a) {
  memset(a, 0, sizeof(*a));
  if (ai >= call->num_args || call->args[ai].kind != TPU_K_TENSORS)
    return TPU_KU_INVALID(call, "expected indices as Tensor?[]");
  const tpu_tensor_t* list = call->args[ai].v.tensors.data;
  int64_t len = call->args[ai].v.tensors.len;
  if (len > self->ndim)
    return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: too many indices for tensor of dimension %d (got %lld)", call->op,
                     (int)self->ndim, (long long)len);
  a->nidx = (int32_t)len;
  a->first = -1;
  for (int32_t j = 0; j < a->nidx; ++j) {
    const tpu_tensor_t* t = &list[j];
    if (t->dtype == TPU_DTYPE_INVALID) continue;
    a->idx[j] = t;
    if (a->first < 0) a->first = j;
    a->last = j;
    a->ndef++;
    if (t->dtype == TPU_DTYPE_BOOL || t->dtype == TPU_DTYPE_U8) a->mask = true;
    else if (!ix_is_index_dt(t->dtype))
      return TPU_KU_INVALID(call, "tensors used as indices must be long, int, byte or bool tensors (got %s)",
                            tpu_dtype_name((tpu_dtype_t)t->dtype));
  }
  if (a->ndef == 0) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: indexing without index tensors", call->op);
  a->adjacent = true;
  for (int32_t j = a->first; j <= a->last; ++j)
    if (!a->idx[j]) a->adjacent = false;
  if (a->mask) {
    if (a->ndef != 1)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: a bool/byte mask index combined with other indices is not supported on tpu",
                       call->op);
    const tpu_tensor_t* m = a->idx[a->first];
    if (m->ndim < 1 || a->first + m->ndim > self->ndim)
      return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: too many indices for tensor of dimension %d", call->op, (int)self->ndim);
    for (int32_t j = 0; j < m->ndim; ++j)
      if (m->sizes[j] != self->sizes[a->first + j])
        return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE,
                         "%s: The shape of the mask [%lld] at index %d does not match the shape of the indexed tensor [%lld] at index %d",
                         call->op, (long long)m->sizes[j], (int)j, (long long)self->sizes[a->first + j],
                         (int)(a->first + j));
    a->last = a->first + m->ndim - 1;
    a->nb = 1;
    a->bsz[0] = -1; /* count of true values, known from the output or a scan */
    for (int32_t d = 0; d < self->ndim; ++d)
      if (d < a->first || d > a->last) a->kept[a->nkept++] = d;
    a->posb = a->first;
  } else {
    for (int32_t j = a->first; j <= a->last; ++j) {
      const tpu_tensor_t* t = a->idx[j];
      if (!t) continue;
      if (t->ndim > a->nb) {
        int32_t grow = t->ndim - a->nb;
        for (int32_t d = a->nb - 1; d >= 0; --d) a->bsz[d + grow] = a->bsz[d];
        for (int32_t d = 0; d < grow; ++d) a->bsz[d] = 1;
        a->nb = t->ndim;
      }
      int32_t off = a->nb - t->ndim;
      for (int32_t d = 0; d < t->ndim; ++d) {
        int64_t s = t->sizes[d], *b = &a->bsz[off + d];
        if (*b == 1) *b = s;
        else if (s != 1 && s != *b)
          return TPU_KU_INVALID(call, "shape mismatch: indexing tensors could not be broadcast together");
      }
    }
    a->bnumel = 1;
    for (int32_t d = 0; d < a->nb; ++d) a->bnumel *= a->bsz[d];
    for (int32_t d = 0; d < self->ndim; ++d)
      if (d >= a->nidx || !a->idx[d]) a->kept[a->nkept++] = d;
    a->posb = a->adjacent ? a->first : 0;
  }
  /* result shape */
  int32_t k = 0, r = 0;
  for (; k < a->nkept && a->kept[k] < a->posb && a->adjacent; ++k) a->res_sz[r++] = self->sizes[a->kept[k]];
  for (int32_t d = 0; d < a->nb; ++d) a->res_sz[r++] = a->bsz[d];
  for (; k < a->nkept; ++k) a->res_sz[r++] = self->sizes[a->kept[k]];
  a->res_nd = r;
  if (!a->adjacent) a->posb = 0;
  else {
    /* posb in result coordinates = number of kept dims before first */
    int32_t before = 0;
    for (int32_t q = 0; q < a->nkept; ++q)
      if (a->kept[q] < a->first) before++;
    a->posb = before;
  }
  return TPU_OK;
}

/* Result-shaped views of the slice (non-indexed dims) of `t` (a tensor of the
 * result shape, or self when from_self). */
static tpu_tensor_t ix_adv_slice(const ix_adv_t* a, const tpu_tensor_t* t, bool from_self) {
  tpu_tensor_t v = *t;
  v.ndim = a->nkept;
  for (int32_t q = 0; q < a->nkept; ++q) {
    int32_t d;
    if (from_self) {
      d = a->kept[q];
    } else {
      d = q < a->posb ? q : q + a->nb;
    }
    v.sizes[q] = t->sizes[d];
    v.strides[q] = t->strides[d];
  }
  return v;
}

static tpu_status_t ix_adv_validate(const tpu_k_call_t* call, const tpu_tensor_t* self, const ix_adv_t* a) {
  if (a->mask) return TPU_OK;
  for (int32_t j = 0; j < a->nidx; ++j)
    if (a->idx[j]) TPU_RETURN_IF_ERROR(ix_validate(call, a->idx[j], self->sizes[j], j, true));
  return TPU_OK;
}

/* Offset (bytes) into self chosen by broadcast position b. */
static int64_t ix_adv_src_offset(const ix_adv_t* a, const tpu_tensor_t* self, int64_t b) {
  int64_t bidx[TPU_MAX_DIMS];
  for (int32_t d = a->nb - 1; d >= 0; --d) {
    bidx[d] = b % a->bsz[d];
    b /= a->bsz[d];
  }
  int64_t off = 0;
  for (int32_t j = a->first; j <= a->last; ++j) {
    const tpu_tensor_t* t = a->idx[j];
    if (!t) continue;
    int32_t o = a->nb - t->ndim;
    int64_t io = 0;
    for (int32_t d = 0; d < t->ndim; ++d)
      if (t->sizes[d] != 1) io += bidx[o + d] * t->strides[d];
    int64_t x = ix_ld_index((const char*)t->data + io * (int64_t)ix_es(t), t->dtype);
    if (x < 0) x += self->sizes[j];
    off += x * self->strides[j];
  }
  return off * (int64_t)ix_es(self);
}

/* Offset (bytes) of broadcast position b in a result-shaped tensor. */
static int64_t ix_adv_res_offset(const ix_adv_t* a, const tpu_tensor_t* r, int64_t b) {
  int64_t off = 0;
  for (int32_t d = a->nb - 1; d >= 0; --d) {
    int64_t bi = b % a->bsz[d];
    b /= a->bsz[d];
    off += bi * r->strides[a->posb + d];
  }
  return off * (int64_t)ix_es(r);
}

/* Mask mode: offset into self of the mask position with flat index m. */
static int64_t ix_mask_src_offset(const ix_adv_t* a, const tpu_tensor_t* self, int64_t m) {
  const tpu_tensor_t* mk = a->idx[a->first];
  int64_t off = 0;
  for (int32_t d = mk->ndim - 1; d >= 0; --d) {
    off += (m % mk->sizes[d]) * self->strides[a->first + d];
    m /= mk->sizes[d];
  }
  return off * (int64_t)ix_es(self);
}

static bool ix_mask_at(const tpu_tensor_t* mk, int64_t m) {
  int64_t off = 0;
  for (int32_t d = mk->ndim - 1; d >= 0; --d) {
    off += (m % mk->sizes[d]) * mk->strides[d];
    m /= mk->sizes[d];
  }
  return ((const uint8_t*)mk->data)[off] != 0;
}

static int64_t ix_mask_count(const tpu_tensor_t* mk) {
  int64_t n = tpu_tensor_numel(mk), c = 0;
  for (int64_t m = 0; m < n; ++m) c += ix_mask_at(mk, m);
  return c;
}

static tpu_status_t ix_index_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (!self || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and indices");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  ix_adv_t a;
  TPU_RETURN_IF_ERROR(ix_adv_setup(call, self, 1, &a));
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != self->dtype) return TPU_KU_INVALID(call, "output dtype differs from self");
  if (out->ndim != a.res_nd) return TPU_KU_INVALID(call, "output has %d dims, expected %d", (int)out->ndim, (int)a.res_nd);
  for (int32_t d = 0; d < a.res_nd; ++d)
    if (a.res_sz[d] >= 0 && out->sizes[d] != a.res_sz[d])
      return TPU_KU_INVALID(call, "output size %lld at dim %d, expected %lld", (long long)out->sizes[d], (int)d,
                            (long long)a.res_sz[d]);
  return TPU_OK;
}

typedef struct {
  const ix_adv_t* a;
  const tpu_tensor_t* self;
  const tpu_tensor_t* res;
  tpu_ku_iter_t it;
  ix_cp_t cp;
} ix_idx_t;

static void ix_index_body(void* ctx, int64_t b0, int64_t b1) {
  const ix_idx_t* c = (const ix_idx_t*)ctx;
  tpu_ku_iter_t it = c->it;
  for (int64_t b = b0; b < b1; ++b) {
    it.base[0] = (char*)c->res->data + ix_adv_res_offset(c->a, c->res, b);
    it.base[1] = (char*)c->self->data + ix_adv_src_offset(c->a, c->self, b);
    tpu_ku_iter_run(&it, 0, it.numel, ix_copy_inner, (void*)&c->cp);
  }
}

static tpu_status_t ix_index_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_index_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  ix_adv_t a;
  TPU_RETURN_IF_ERROR(ix_adv_setup(call, self, 1, &a));
  TPU_RETURN_IF_ERROR(ix_adv_validate(call, self, &a));
  if (a.mask) {
    const tpu_tensor_t* mk = a.idx[a.first];
    int64_t nnz = ix_mask_count(mk);
    if (nnz != out->sizes[a.posb])
      return TPU_KU_INVALID(call, "mask selects %lld elements but the output has %lld", (long long)nnz,
                            (long long)out->sizes[a.posb]);
    a.bsz[0] = nnz;
  }
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  ix_idx_t c;
  c.a = &a;
  c.self = self;
  c.res = out;
  tpu_tensor_t dv = ix_adv_slice(&a, out, false), sv = ix_adv_slice(&a, self, true);
  const tpu_tensor_t* ops[2] = {&dv, &sv};
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&c.it, 2, ops, call->op));
  c.cp = ix_cp(out, self, false);
  if (a.mask) {
    const tpu_tensor_t* mk = a.idx[a.first];
    int64_t n = tpu_tensor_numel(mk), k = 0;
    for (int64_t m = 0; m < n; ++m) {
      if (!ix_mask_at(mk, m)) continue;
      c.it.base[0] = (char*)out->data + k * out->strides[a.posb] * (int64_t)ix_es(out);
      c.it.base[1] = (char*)self->data + ix_mask_src_offset(&a, self, m);
      tpu_ku_iter_run(&c.it, 0, c.it.numel, ix_copy_inner, &c.cp);
      ++k;
    }
    return TPU_OK;
  }
  int64_t grain = 16384 / (c.it.numel + 1) + 1;
  tpu_parallel_for(call->pool, a.bnumel, grain, ix_index_body, &c);
  return TPU_OK;
}

/* index_put_(self, indices, values, accumulate) / index_put / _index_put_impl_ */
static tpu_status_t ix_put_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* values = tpu_ku_tensor(call, 2);
  if (!self || !values || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, indices, values");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_dtype_ok(values->dtype)) return tpu_ku_unsupported_dtype(call, values->dtype);
  ix_adv_t a;
  TPU_RETURN_IF_ERROR(ix_adv_setup(call, self, 1, &a));
  if (!ix_same_shape(&call->outputs[0], self)) return TPU_KU_INVALID(call, "output shape differs from self");
  if (values->ndim > a.res_nd && tpu_tensor_numel(values) != 1)
    return TPU_KU_INVALID(call, "values of %d dims cannot be broadcast to the indexing result of %d dims",
                          (int)values->ndim, (int)a.res_nd);
  return TPU_OK;
}

static tpu_status_t ix_put_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_put_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* values = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  bool acc = tpu_ku_bool(call, 3, false);
  ix_adv_t a;
  TPU_RETURN_IF_ERROR(ix_adv_setup(call, self, 1, &a));
  TPU_RETURN_IF_ERROR(ix_adv_validate(call, self, &a));
  if (a.mask) {
    a.bsz[0] = ix_mask_count(a.idx[a.first]);
    a.res_sz[a.posb] = a.bsz[0];
    a.bnumel = a.bsz[0];
  }
  /* values broadcast to the result shape */
  tpu_tensor_t rv;
  memset(&rv, 0, sizeof(rv));
  rv.data = values->data;
  rv.dtype = values->dtype;
  rv.ndim = a.res_nd;
  if (tpu_tensor_numel(values) == 1 && values->ndim > a.res_nd) {
    for (int32_t d = 0; d < a.res_nd; ++d) rv.sizes[d] = a.res_sz[d];
  } else {
    int32_t off = a.res_nd - values->ndim;
    for (int32_t d = 0; d < a.res_nd; ++d) {
      rv.sizes[d] = a.res_sz[d];
      int32_t j = d - off;
      if (j < 0) continue;
      if (values->sizes[j] == a.res_sz[d]) rv.strides[d] = values->strides[j];
      else if (values->sizes[j] != 1)
        return TPU_KU_INVALID(call, "shape mismatch: value tensor of size %lld at dim %d cannot be broadcast to indexing result of size %lld",
                              (long long)values->sizes[j], (int)j, (long long)a.res_sz[d]);
    }
  }
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  if (a.bnumel == 0) return TPU_OK;
  for (int32_t d = 0; d < a.res_nd; ++d)
    if (a.res_sz[d] == 0) return TPU_OK;
  tpu_tensor_t dv = ix_adv_slice(&a, out, true), sv = ix_adv_slice(&a, &rv, false);
  const tpu_tensor_t* ops[2] = {&dv, &sv};
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, call->op));
  ix_cp_t cp = ix_cp(out, values, acc);
  if (a.mask) {
    const tpu_tensor_t* mk = a.idx[a.first];
    int64_t n = tpu_tensor_numel(mk), k = 0;
    for (int64_t m = 0; m < n; ++m) {
      if (!ix_mask_at(mk, m)) continue;
      it.base[0] = (char*)out->data + ix_mask_src_offset(&a, out, m);
      it.base[1] = (char*)rv.data + k * rv.strides[a.posb] * (int64_t)ix_es(&rv);
      tpu_ku_iter_run(&it, 0, it.numel, ix_copy_inner, &cp);
      ++k;
    }
    return TPU_OK;
  }
  for (int64_t b = 0; b < a.bnumel; ++b) {
    it.base[0] = (char*)out->data + ix_adv_src_offset(&a, out, b);
    it.base[1] = (char*)rv.data + ix_adv_res_offset(&a, &rv, b);
    tpu_ku_iter_run(&it, 0, it.numel, ix_copy_inner, &cp);
  }
  return TPU_OK;
}

/* ---- embedding_dense_backward ------------------------------------------------- */

typedef struct {
  const tpu_tensor_t* grad;
  const tpu_tensor_t* idx;
  const tpu_tensor_t* out;
  int64_t n, d, padding;
  bool scale;
} ix_emb_t;

static int64_t ix_emb_index(const tpu_tensor_t* idx, int64_t i) {
  int64_t off = 0;
  for (int32_t d = idx->ndim - 1; d >= 0; --d) {
    off += (i % idx->sizes[d]) * idx->strides[d];
    i /= idx->sizes[d];
  }
  return ix_ld_index((const char*)idx->data + off * (int64_t)ix_es(idx), idx->dtype);
}

static void ix_emb_body(void* ctx, int64_t c0, int64_t c1) {
  const ix_emb_t* c = (const ix_emb_t*)ctx;
  const tpu_tensor_t* g = c->grad;
  const tpu_tensor_t* o = c->out;
  int64_t ges = (int64_t)ix_es(g), oes = (int64_t)ix_es(o);
  int32_t gl = g->ndim - 1;
  for (int64_t i = 0; i < c->n; ++i) {
    int64_t w = ix_emb_index(c->idx, i);
    if (w == c->padding) continue;
    double scale = 1.0;
    if (c->scale) {
      int64_t cnt = 0;
      for (int64_t j = 0; j < c->n; ++j) cnt += ix_emb_index(c->idx, j) == w;
      scale = 1.0 / (double)cnt;
    }
    /* grad row i: grad viewed as [n, d] over its leading dims */
    int64_t off = 0, r = i;
    for (int32_t d = gl - 1; d >= 0; --d) {
      off += (r % g->sizes[d]) * g->strides[d];
      r /= g->sizes[d];
    }
    const char* gr = (const char*)g->data + off * ges;
    char* orow = (char*)o->data + w * o->strides[0] * oes;
    for (int64_t k = c0; k < c1; ++k) {
      const char* gp = gr + k * g->strides[gl] * ges;
      char* op = orow + k * o->strides[1] * oes;
      if (o->dtype == TPU_DTYPE_F32 && g->dtype == TPU_DTYPE_F32)
        *(float*)op += (float)(*(const float*)gp * scale);
      else
        tpu_ku_store_f64(op, o->dtype, tpu_ku_load_f64(op, o->dtype) + tpu_ku_load_f64(gp, g->dtype) * scale);
    }
  }
}

static tpu_status_t ix_emb_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* g = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* idx = tpu_ku_tensor(call, 1);
  if (!g || !idx || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected grad_output and indices");
  if (!tpu_dtype_is_floating((tpu_dtype_t)g->dtype)) return tpu_ku_unsupported_dtype(call, g->dtype);
  if (!ix_is_index_dt(idx->dtype)) return tpu_ku_unsupported_dtype(call, idx->dtype);
  const tpu_tensor_t* o = &call->outputs[0];
  if (!tpu_dtype_is_floating((tpu_dtype_t)o->dtype)) return tpu_ku_unsupported_dtype(call, o->dtype);
  int64_t nw = tpu_ku_int(call, 2, -1);
  if (g->ndim != idx->ndim + 1) return TPU_KU_INVALID(call, "grad_output must have indices.dim() + 1 dims");
  for (int32_t d = 0; d < idx->ndim; ++d)
    if (g->sizes[d] != idx->sizes[d]) return TPU_KU_INVALID(call, "grad_output and indices shapes differ");
  if (o->ndim != 2 || o->sizes[0] != nw || o->sizes[1] != g->sizes[g->ndim - 1])
    return TPU_KU_INVALID(call, "output must be [num_weights, embedding_dim]");
  return TPU_OK;
}

static void ix_zero(const tpu_tensor_t* t, tpu_threadpool_t* pool, const char* op);

static tpu_status_t ix_emb_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_emb_check(call));
  ix_emb_t c;
  c.grad = tpu_ku_tensor(call, 0);
  c.idx = tpu_ku_tensor(call, 1);
  c.out = &call->outputs[0];
  c.n = tpu_tensor_numel(c.idx);
  c.d = c.out->sizes[1];
  c.padding = tpu_ku_int(call, 3, -1);
  c.scale = tpu_ku_bool(call, 4, false);
  TPU_RETURN_IF_ERROR(ix_validate(call, c.idx, c.out->sizes[0], 0, false));
  ix_zero(c.out, call->pool, call->op);
  if (c.n == 0 || c.d == 0) return TPU_OK;
  int64_t grain = 65536 / (c.n + 1) + 1;
  tpu_parallel_for(call->pool, c.d, grain < 8 ? 8 : grain, ix_emb_body, &c);
  return TPU_OK;
}

/* ---- zero fill ------------------------------------------------------------------ */

typedef struct {
  int64_t es;
  bool zero;
  char val[8]; /* one element of t's dtype */
} ix_fill_t;

static void ix_fill_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const ix_fill_t* c = (const ix_fill_t*)ctx;
  if (c->zero && st[0] == c->es) {
    memset(p[0], 0, (size_t)(n * c->es));
    return;
  }
  for (int64_t i = 0; i < n; ++i) memcpy(p[0] + i * st[0], c->val, (size_t)c->es);
}

/* Every element of t <- the element at `val` (t's dtype); NULL: zero. */
static void ix_fill(const tpu_tensor_t* t, const char* val, tpu_threadpool_t* pool, const char* op) {
  if (tpu_tensor_numel(t) == 0) return;
  tpu_ku_iter_t it;
  tpu_status_t s = tpu_ku_iter_init(&it, 1, &t, op);
  if (s) { /* cannot happen for a valid tensor */
    tpu_status_free(s);
    return;
  }
  ix_fill_t c;
  memset(&c, 0, sizeof(c));
  c.es = (int64_t)ix_es(t);
  c.zero = val == NULL;
  if (val) memcpy(c.val, val, (size_t)c.es);
  tpu_ku_iter_parallel(&it, pool, 65536, ix_fill_inner, &c);
}

static void ix_zero(const tpu_tensor_t* t, tpu_threadpool_t* pool, const char* op) { ix_fill(t, NULL, pool, op); }

/* ---- cat / stack ------------------------------------------------------------------ */

static bool ix_cat_skip(const tpu_tensor_t* t) { return t->ndim == 1 && t->sizes[0] == 0; }

static tpu_status_t ix_cat_check(const tpu_k_call_t* call) {
  bool stack = strstr(call->op, "stack") != NULL;
  if (call->num_args < 1 || call->args[0].kind != TPU_K_TENSORS || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected a tensor list");
  const tpu_tensor_t* list = call->args[0].v.tensors.data;
  int64_t n = call->args[0].v.tensors.len;
  const tpu_tensor_t* out = &call->outputs[0];
  if (!ix_dtype_ok(out->dtype)) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (n == 0) return TPU_KU_INVALID(call, "expected a non-empty list of Tensors");
  int32_t dim;
  TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, tpu_ku_int(call, 1, 0), stack ? out->ndim : out->ndim, &dim));
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const tpu_tensor_t* t = &list[i];
    if (!ix_dtype_ok(t->dtype)) return tpu_ku_unsupported_dtype(call, t->dtype);
    if (stack) {
      if (t->ndim + 1 != out->ndim) return TPU_KU_INVALID(call, "stack expects each tensor to be equal size");
      for (int32_t d = 0, j = 0; d < out->ndim; ++d) {
        if (d == dim) continue;
        if (t->sizes[j++] != out->sizes[d]) return TPU_KU_INVALID(call, "stack expects each tensor to be equal size");
      }
      continue;
    }
    if (ix_cat_skip(t) && out->ndim != 1) continue;
    if (t->ndim != out->ndim)
      return TPU_KU_INVALID(call, "Tensors must have same number of dimensions: got %d and %d", (int)out->ndim,
                            (int)t->ndim);
    for (int32_t d = 0; d < out->ndim; ++d)
      if (d != dim && t->sizes[d] != out->sizes[d])
        return TPU_KU_INVALID(call, "Sizes of tensors must match except in dimension %d. Expected size %lld but got size %lld for tensor number %lld in the list.",
                              (int)dim, (long long)out->sizes[d], (long long)t->sizes[d], (long long)i);
    total += out->ndim ? t->sizes[dim] : 1;
  }
  if (stack) {
    if (out->sizes[dim] != n) return TPU_KU_INVALID(call, "output size along dim %d must be %lld", (int)dim, (long long)n);
  } else if (out->ndim == 0 || out->sizes[dim] != total) {
    return TPU_KU_INVALID(call, "output size along dim %d must be %lld", (int)dim, (long long)total);
  }
  return TPU_OK;
}

static tpu_status_t ix_cat_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_cat_check(call));
  bool stack = strstr(call->op, "stack") != NULL;
  const tpu_tensor_t* list = call->args[0].v.tensors.data;
  int64_t n = call->args[0].v.tensors.len;
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, tpu_ku_int(call, 1, 0), out->ndim, &dim));
  int64_t pos = 0, es = (int64_t)ix_es(out);
  for (int64_t i = 0; i < n; ++i) {
    const tpu_tensor_t* t = &list[i];
    tpu_tensor_t dv = *out;
    if (stack) {
      dv = ix_drop_dim(out, dim);
      dv.data = (char*)out->data + i * out->strides[dim] * es;
    } else {
      if (ix_cat_skip(t) && out->ndim != 1) continue;
      dv.sizes[dim] = t->sizes[dim];
      dv.data = (char*)out->data + pos * out->strides[dim] * es;
      pos += t->sizes[dim];
    }
    if (tpu_tensor_numel(&dv) == 0) continue;
    TPU_RETURN_IF_ERROR(ix_copy(&dv, t, call->pool, call->op));
  }
  return TPU_OK;
}

/* ---- flip / roll ------------------------------------------------------------------ */

static tpu_status_t ix_dims_mask(const tpu_k_call_t* call, int ai, int32_t ndim, uint32_t* out_mask) {
  *out_mask = 0;
  if (ai >= call->num_args || call->args[ai].kind != TPU_K_INTS) return TPU_KU_INVALID(call, "expected dims as int[]");
  for (int64_t i = 0; i < call->args[ai].v.ints.len; ++i) {
    int32_t d;
    TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, call->args[ai].v.ints.data[i], ndim, &d));
    if (ndim == 0) continue;
    if ((*out_mask >> d) & 1u) return TPU_KU_INVALID(call, "dim %d appears multiple times in the list of dims", (int)d);
    *out_mask |= 1u << d;
  }
  return TPU_OK;
}

static tpu_status_t ix_unary_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (!self || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!ix_same_shape(self, &call->outputs[0])) return TPU_KU_INVALID(call, "output shape differs from self");
  if (self->ndim > 31) return TPU_KU_INVALID(call, "too many dims");
  return TPU_OK;
}

static tpu_status_t ix_flip_check(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_unary_check(call));
  uint32_t m;
  return ix_dims_mask(call, 1, tpu_ku_tensor(call, 0)->ndim, &m);
}

static tpu_status_t ix_flip_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_flip_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  uint32_t mask;
  TPU_RETURN_IF_ERROR(ix_dims_mask(call, 1, self->ndim, &mask));
  if (tpu_tensor_numel(self) == 0) return TPU_OK;
  tpu_tensor_t v = *self;
  int64_t off = 0;
  for (int32_t d = 0; d < self->ndim; ++d) {
    if (!((mask >> d) & 1u)) continue;
    off += (self->sizes[d] - 1) * self->strides[d];
    v.strides[d] = -self->strides[d];
  }
  v.data = (char*)self->data + off * (int64_t)ix_es(self);
  return ix_copy(&call->outputs[0], &v, call->pool, call->op);
}

static tpu_status_t ix_roll_check(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_unary_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (call->num_args < 2 || call->args[1].kind != TPU_K_INTS) return TPU_KU_INVALID(call, "expected shifts as int[]");
  int64_t ns = call->args[1].v.ints.len;
  int64_t nd = call->num_args > 2 && call->args[2].kind == TPU_K_INTS ? call->args[2].v.ints.len : 0;
  if (nd == 0 && ns != 1) return TPU_KU_INVALID(call, "shifts must have length 1 when dims is empty (got %lld)", (long long)ns);
  if (nd > 0 && nd != ns)
    return TPU_KU_INVALID(call, "shifts and dimensions must align. shifts: %lld, dims:%lld", (long long)ns, (long long)nd);
  for (int64_t i = 0; i < nd; ++i) {
    int32_t d;
    TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, call->args[2].v.ints.data[i], self->ndim, &d));
  }
  return TPU_OK;
}

typedef struct {
  const tpu_tensor_t* self;
  const tpu_tensor_t* out;
  int64_t n, shift;
  ix_cp_t cp;
} ix_roll_flat_t;

static int64_t ix_flat_off(const tpu_tensor_t* t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    off += (i % t->sizes[d]) * t->strides[d];
    i /= t->sizes[d];
  }
  return off * (int64_t)ix_es(t);
}

static void ix_roll_flat_body(void* ctx, int64_t b, int64_t e) {
  const ix_roll_flat_t* c = (const ix_roll_flat_t*)ctx;
  for (int64_t i = b; i < e; ++i) {
    int64_t j = i - c->shift;
    if (j < 0) j += c->n;
    ix_copy1(&c->cp, (char*)c->out->data + ix_flat_off(c->out, i), (char*)c->self->data + ix_flat_off(c->self, j));
  }
}

static tpu_status_t ix_roll_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_roll_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  int64_t numel = tpu_tensor_numel(self);
  if (numel == 0) return TPU_OK;
  int64_t nd = call->num_args > 2 && call->args[2].kind == TPU_K_INTS ? call->args[2].v.ints.len : 0;
  if (nd == 0) {
    ix_roll_flat_t c = {self, out, numel, 0, ix_cp(out, self, false)};
    c.shift = call->args[1].v.ints.data[0] % numel;
    if (c.shift < 0) c.shift += numel;
    tpu_parallel_for(call->pool, numel, 16384, ix_roll_flat_body, &c);
    return TPU_OK;
  }
  int64_t shift[TPU_MAX_DIMS] = {0};
  int32_t dims[TPU_MAX_DIMS];
  int32_t k = 0;
  for (int64_t i = 0; i < nd; ++i) {
    int32_t d;
    TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, call->args[2].v.ints.data[i], self->ndim, &d));
    if (self->ndim == 0) continue;
    shift[d] += call->args[1].v.ints.data[i] % self->sizes[d];
  }
  for (int32_t d = 0; d < self->ndim; ++d) {
    shift[d] %= self->sizes[d];
    if (shift[d] < 0) shift[d] += self->sizes[d];
    if (shift[d]) dims[k++] = d;
  }
  if (k > 12) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: rolling more than 12 dims", call->op);
  int64_t oes = (int64_t)ix_es(out), ses = (int64_t)ix_es(self);
  for (uint32_t combo = 0; combo < (1u << k); ++combo) {
    tpu_tensor_t dv = *out, sv = *self;
    int64_t doff = 0, soff = 0;
    bool empty = false;
    for (int32_t q = 0; q < k; ++q) {
      int32_t d = dims[q];
      int64_t n = self->sizes[d], s = shift[d];
      if ((combo >> q) & 1u) { /* out[0:s] <- self[n-s:n] */
        dv.sizes[d] = sv.sizes[d] = s;
        soff += (n - s) * self->strides[d];
      } else { /* out[s:n] <- self[0:n-s] */
        dv.sizes[d] = sv.sizes[d] = n - s;
        doff += s * out->strides[d];
      }
      if (dv.sizes[d] == 0) empty = true;
    }
    if (empty) continue;
    dv.data = (char*)out->data + doff * oes;
    sv.data = (char*)self->data + soff * ses;
    TPU_RETURN_IF_ERROR(ix_copy(&dv, &sv, call->pool, call->op));
  }
  return TPU_OK;
}

/* ---- triu / tril ----------------------------------------------------------------- */

typedef struct {
  const tpu_tensor_t* self;
  const tpu_tensor_t* out;
  int64_t diag, rows, cols;
  bool upper, inplace;
  ix_cp_t cp;
} ix_tri_t;

static void ix_tri_body(void* ctx, int64_t r0, int64_t r1) {
  const ix_tri_t* c = (const ix_tri_t*)ctx;
  const tpu_tensor_t* s = c->self;
  const tpu_tensor_t* o = c->out;
  int32_t nd = o->ndim;
  int64_t ses = (int64_t)ix_es(s), oes = (int64_t)ix_es(o);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i = r % c->rows, b = r / c->rows;
    int64_t so = 0, oo = 0;
    for (int32_t d = nd - 3; d >= 0; --d) {
      int64_t bi = b % o->sizes[d];
      b /= o->sizes[d];
      so += bi * s->strides[d];
      oo += bi * o->strides[d];
    }
    so += i * s->strides[nd - 2];
    oo += i * o->strides[nd - 2];
    for (int64_t j = 0; j < c->cols; ++j) {
      bool keep = c->upper ? j - i >= c->diag : j - i <= c->diag;
      char* op = (char*)o->data + (oo + j * o->strides[nd - 1]) * oes;
      if (!keep) {
        memset(op, 0, (size_t)oes);
      } else if (!c->inplace) {
        ix_copy1(&c->cp, op, (char*)s->data + (so + j * s->strides[nd - 1]) * ses);
      }
    }
  }
}

static tpu_status_t ix_tri_check(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_unary_check(call));
  if (tpu_ku_tensor(call, 0)->ndim < 2)
    return TPU_KU_INVALID(call, "input tensor must have at least 2 dimensions");
  return TPU_OK;
}

static tpu_status_t ix_tri_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_tri_check(call));
  ix_tri_t c;
  c.self = tpu_ku_tensor(call, 0);
  c.out = &call->outputs[0];
  c.diag = tpu_ku_int(call, 1, 0);
  c.upper = strstr(call->op, "triu") != NULL;
  c.inplace = ix_same_view(c.self, c.out);
  c.rows = c.out->sizes[c.out->ndim - 2];
  c.cols = c.out->sizes[c.out->ndim - 1];
  c.cp = ix_cp(c.out, c.self, false);
  int64_t nrows = c.cols ? tpu_tensor_numel(c.out) / c.cols : 0;
  if (nrows == 0 || c.cols == 0) return TPU_OK;
  int64_t grain = 16384 / c.cols + 1;
  tpu_parallel_for(call->pool, nrows, grain, ix_tri_body, &c);
  return TPU_OK;
}

/* ---- arange / linspace ---------------------------------------------------------- */

static double ix_round_to(int dt, double v) {
  switch (dt) {
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16((float)v));
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)v));
    case TPU_DTYPE_F32: return (float)v;
    default: return v;
  }
}

static tpu_status_t ix_range_check(const tpu_k_call_t* call) {
  if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected an output");
  const tpu_tensor_t* out = &call->outputs[0];
  if (!ix_dtype_ok(out->dtype) || out->dtype == TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (out->ndim != 1) return TPU_KU_INVALID(call, "output must be 1-D (got %d-D)", (int)out->ndim);
  bool lin = strstr(call->op, "linspace") != NULL;
  if (lin) {
    int64_t steps = tpu_ku_int(call, 2, -1);
    if (steps < 0) return TPU_KU_INVALID(call, "number of steps must be non-negative");
    if (out->sizes[0] != steps) return TPU_KU_INVALID(call, "output has %lld elements, expected %lld",
                                                      (long long)out->sizes[0], (long long)steps);
  } else {
    double step = tpu_ku_double(call, 2, 1.0);
    if (step == 0.0) return TPU_KU_INVALID(call, "step must be nonzero");
  }
  return TPU_OK;
}

static tpu_status_t ix_range_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_range_check(call));
  const tpu_tensor_t* out = &call->outputs[0];
  int dt = out->dtype;
  int64_t n = out->sizes[0], es = (int64_t)ix_es(out), st = out->strides[0] * es;
  char* p = (char*)out->data;
  bool lin = strstr(call->op, "linspace") != NULL;
  bool intout = ix_is_int_dt(dt);
  if (!lin) {
    bool int_args = call->args[0].kind != TPU_K_DOUBLE && call->args[2].kind != TPU_K_DOUBLE;
    if (intout && int_args) {
      int64_t start = tpu_ku_int(call, 0, 0), step = tpu_ku_int(call, 2, 1);
      for (int64_t i = 0; i < n; ++i) tpu_ku_store_i64(p + i * st, dt, (int64_t)((uint64_t)start + (uint64_t)step * (uint64_t)i));
    } else if (dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16) {
      float start = (float)tpu_ku_double(call, 0, 0), step = (float)tpu_ku_double(call, 2, 1);
      for (int64_t i = 0; i < n; ++i) tpu_ku_store_f64(p + i * st, dt, start + step * (float)i);
    } else {
      double start = tpu_ku_double(call, 0, 0), step = tpu_ku_double(call, 2, 1);
      for (int64_t i = 0; i < n; ++i) tpu_ku_store_f64(p + i * st, dt, start + step * (double)i);
    }
    return TPU_OK;
  }
  if (n == 0) return TPU_OK;
  if (intout) {
    int64_t s = tpu_ku_int(call, 0, 0), e = tpu_ku_int(call, 1, 0);
    /* start/end as the output type first, like PyTorch's scalar_t */
    char tmp[8];
    tpu_ku_store_i64(tmp, dt, s);
    s = tpu_ku_load_i64(tmp, dt);
    tpu_ku_store_i64(tmp, dt, e);
    e = tpu_ku_load_i64(tmp, dt);
    if (n == 1) {
      tpu_ku_store_i64(p, dt, s);
      return TPU_OK;
    }
    double step = ((double)e - (double)s) / (double)(n - 1);
    int64_t half = n / 2;
    for (int64_t i = 0; i < n; ++i) {
      double v = i < half ? (double)s + step * (double)i : (double)e - step * (double)(n - i - 1);
      tpu_ku_store_f64(p + i * st, dt, v);
    }
    return TPU_OK;
  }
  double s = ix_round_to(dt, tpu_ku_double(call, 0, 0)), e = ix_round_to(dt, tpu_ku_double(call, 1, 0));
  if (n == 1) {
    tpu_ku_store_f64(p, dt, s);
    return TPU_OK;
  }
  int64_t half = n / 2;
  if (dt == TPU_DTYPE_F64) {
    double step = (e - s) / (double)(n - 1);
    for (int64_t i = 0; i < n; ++i)
      tpu_ku_store_f64(p + i * st, dt, i < half ? s + step * (double)i : e - step * (double)(n - i - 1));
    return TPU_OK;
  }
  /* f32 / f16 / bf16: float math (the half types' vector path), rounded once */
  float fs = (float)s, fe = (float)e, step = (fe - fs) / (float)(n - 1);
  for (int64_t i = 0; i < n; ++i)
    tpu_ku_store_f64(p + i * st, dt, i < half ? fs + step * (float)i : fe - step * (float)(n - i - 1));
  return TPU_OK;
}

/* ---- repeat_interleave.Tensor --------------------------------------------------- */

/* check() also runs before shape(), with outputs NULL. */
static tpu_status_t ix_repeat_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* r = tpu_ku_tensor(call, 0);
  if (!r || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected repeats");
  if (!ix_is_index_dt(r->dtype)) return tpu_ku_unsupported_dtype(call, r->dtype);
  if (r->ndim > 1) return TPU_KU_INVALID(call, "repeats must be 0-dim or 1-dim tensor");
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->ndim != 1 || !ix_is_index_dt(out->dtype)) return TPU_KU_INVALID(call, "output must be a 1-D integer tensor");
  return TPU_OK;
}

/* Sum of repeats (validated non-negative). */
static tpu_status_t ix_repeat_total(const tpu_k_call_t* call, const tpu_tensor_t* r, int64_t* out_total) {
  int64_t n = tpu_tensor_numel(r), rs = r->ndim ? r->strides[0] * (int64_t)ix_es(r) : 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = ix_ld_index((const char*)r->data + i * rs, r->dtype);
    if (c < 0) return TPU_KU_INVALID(call, "repeats can not be negative");
    total += c;
  }
  *out_total = total;
  return TPU_OK;
}

static tpu_status_t ix_repeat_shape(const tpu_k_call_t* call, tpu_tensor_t* out_shapes) {
  TPU_RETURN_IF_ERROR(ix_repeat_check(call));
  const tpu_tensor_t* r = tpu_ku_tensor(call, 0);
  int64_t total;
  TPU_RETURN_IF_ERROR(ix_repeat_total(call, r, &total));
  memset(&out_shapes[0], 0, sizeof(out_shapes[0]));
  out_shapes[0].dtype = r->dtype;
  out_shapes[0].ndim = 1;
  out_shapes[0].sizes[0] = total;
  out_shapes[0].strides[0] = 1;
  return TPU_OK;
}

static tpu_status_t ix_repeat_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_repeat_check(call));
  const tpu_tensor_t* r = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  int64_t n = tpu_tensor_numel(r), rs = r->ndim ? r->strides[0] * (int64_t)ix_es(r) : 0, total;
  TPU_RETURN_IF_ERROR(ix_repeat_total(call, r, &total));
  if (total != out->sizes[0])
    return TPU_KU_INVALID(call, "the output has %lld elements but the repeats sum to %lld", (long long)out->sizes[0],
                          (long long)total);
  int64_t pos = 0, os = out->strides[0] * (int64_t)ix_es(out);
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = ix_ld_index((const char*)r->data + i * rs, r->dtype);
    for (int64_t j = 0; j < c; ++j, ++pos) tpu_ku_store_i64((char*)out->data + pos * os, out->dtype, i);
  }
  return TPU_OK;
}

/* ---- sort / topk ---------------------------------------------------------------- */

/* Ordering key: a before b. Floats: NaN is largest; `desc` reverses the
 * value order; ties go by index (ascending), which makes every sort stable. */
#define IX_SORT_IMPL(NAME, T, KT, KEY, ISNAN)                                              \
  static inline bool NAME##_before(KT a, int64_t ia, KT b, int64_t ib, bool desc) {      \
    bool na = ISNAN(a), nb = ISNAN(b);                                                   \
    if (na || nb) {                                                                      \
      if (na && nb) return ia < ib;                                                      \
      return desc ? na : nb;                                                             \
    }                                                                                    \
    if (a != b) return desc ? a > b : a < b;                                             \
    return ia < ib;                                                                      \
  }                                                                                      \
  static void NAME##_sift(char* v, int64_t vs, char* x, int64_t xs, int64_t root, int64_t n, \
                          bool desc, bool maxheap) {                                     \
    T rv = *(T*)(v + root * vs);                                                         \
    int64_t ri = *(int64_t*)(x + root * xs);                                             \
    KT rk = KEY(rv);                                                                     \
    for (;;) {                                                                           \
      int64_t c = 2 * root + 1;                                                          \
      if (c >= n) break;                                                                 \
      KT ck = KEY(*(T*)(v + c * vs));                                                    \
      int64_t ci = *(int64_t*)(x + c * xs);                                              \
      if (c + 1 < n) {                                                                   \
        KT dk = KEY(*(T*)(v + (c + 1) * vs));                                            \
        int64_t di = *(int64_t*)(x + (c + 1) * xs);                                      \
        bool pick = maxheap ? NAME##_before(ck, ci, dk, di, desc) : NAME##_before(dk, di, ck, ci, desc); \
        if (pick) { c++; ck = dk; ci = di; }                                             \
      }                                                                                  \
      bool down = maxheap ? NAME##_before(rk, ri, ck, ci, desc) : NAME##_before(ck, ci, rk, ri, desc); \
      if (!down) break;                                                                  \
      *(T*)(v + root * vs) = *(T*)(v + c * vs);                                          \
      *(int64_t*)(x + root * xs) = ci;                                                   \
      root = c;                                                                          \
    }                                                                                    \
    *(T*)(v + root * vs) = rv;                                                           \
    *(int64_t*)(x + root * xs) = ri;                                                     \
  }                                                                                      \
  /* heap sort of (v, x) pairs in place */                                               \
  static void NAME##_hsort(char* v, int64_t vs, char* x, int64_t xs, int64_t n, bool desc) { \
    for (int64_t i = n / 2 - 1; i >= 0; --i) NAME##_sift(v, vs, x, xs, i, n, desc, true); \
    for (int64_t e = n - 1; e > 0; --e) {                                                \
      T tv = *(T*)v;                                                                     \
      int64_t ti = *(int64_t*)x;                                                         \
      *(T*)v = *(T*)(v + e * vs);                                                        \
      *(int64_t*)x = *(int64_t*)(x + e * xs);                                            \
      *(T*)(v + e * vs) = tv;                                                            \
      *(int64_t*)(x + e * xs) = ti;                                                      \
      NAME##_sift(v, vs, x, xs, 0, e, desc, true);                                       \
    }                                                                                    \
  }                                                                                      \
  static inline void NAME##_swap(char* v, int64_t vs, char* x, int64_t xs, int64_t i, int64_t j) { \
    T tv = *(T*)(v + i * vs);                                                            \
    *(T*)(v + i * vs) = *(T*)(v + j * vs);                                               \
    *(T*)(v + j * vs) = tv;                                                              \
    int64_t ti = *(int64_t*)(x + i * xs);                                                \
    *(int64_t*)(x + i * xs) = *(int64_t*)(x + j * xs);                                   \
    *(int64_t*)(x + j * xs) = ti;                                                        \
  }                                                                                      \
  /* introsort: quicksort (Hoare, middle pivot), heap sort past the depth     \
   * limit, insertion sort for short ranges. (key, index) pairs are distinct. */ \
  static void NAME##_sort(char* v, int64_t vs, char* x, int64_t xs, int64_t n, bool desc) { \
    int depth = 0;                                                                       \
    for (int64_t m = n; m > 1; m >>= 1) depth += 2;                                      \
    while (n > 16) {                                                                     \
      if (depth-- <= 0) {                                                                \
        NAME##_hsort(v, vs, x, xs, n, desc);                                             \
        return;                                                                          \
      }                                                                                  \
      int64_t mid = (n - 1) / 2;                                                         \
      KT pk = KEY(*(T*)(v + mid * vs));                                                  \
      int64_t pi = *(int64_t*)(x + mid * xs);                                            \
      int64_t i = -1, j = n;                                                             \
      for (;;) {                                                                         \
        do ++i; while (NAME##_before(KEY(*(T*)(v + i * vs)), *(int64_t*)(x + i * xs), pk, pi, desc)); \
        do --j; while (NAME##_before(pk, pi, KEY(*(T*)(v + j * vs)), *(int64_t*)(x + j * xs), desc)); \
        if (i >= j) break;                                                               \
        NAME##_swap(v, vs, x, xs, i, j);                                                 \
      }                                                                                  \
      int64_t nl = j + 1, nr = n - nl;                                                   \
      if (nl < nr) {                                                                     \
        NAME##_sort(v, vs, x, xs, nl, desc);                                             \
        v += nl * vs;                                                                    \
        x += nl * xs;                                                                    \
        n = nr;                                                                          \
      } else {                                                                           \
        NAME##_sort(v + nl * vs, vs, x + nl * xs, xs, nr, desc);                         \
        n = nl;                                                                          \
      }                                                                                  \
    }                                                                                    \
    for (int64_t a = 1; a < n; ++a) {                                                    \
      T av = *(T*)(v + a * vs);                                                          \
      int64_t ai = *(int64_t*)(x + a * xs);                                              \
      KT ak = KEY(av);                                                                   \
      int64_t b = a;                                                                     \
      while (b > 0 && NAME##_before(ak, ai, KEY(*(T*)(v + (b - 1) * vs)), *(int64_t*)(x + (b - 1) * xs), desc)) { \
        *(T*)(v + b * vs) = *(T*)(v + (b - 1) * vs);                                     \
        *(int64_t*)(x + b * xs) = *(int64_t*)(x + (b - 1) * xs);                         \
        --b;                                                                             \
      }                                                                                  \
      *(T*)(v + b * vs) = av;                                                            \
      *(int64_t*)(x + b * xs) = ai;                                                      \
    }                                                                                    \
  }                                                                                      \
  /* top k of src (n values, stride ss) into (v, x): a heap whose root is the   \
   * worst kept element, then sorted best-first. */                                      \
  static void NAME##_topk(const char* src, int64_t ss, int64_t n, char* v, int64_t vs, char* x, \
                          int64_t xs, int64_t k, bool largest) {                         \
    bool desc = largest;                                                                 \
    for (int64_t i = 0; i < n; ++i) {                                                    \
      T sv = *(const T*)(src + i * ss);                                                  \
      if (i < k) {                                                                       \
        *(T*)(v + i * vs) = sv;                                                          \
        *(int64_t*)(x + i * xs) = i;                                                     \
        if (i == k - 1)                                                                  \
          for (int64_t r = k / 2 - 1; r >= 0; --r) NAME##_sift(v, vs, x, xs, r, k, desc, true); \
        continue;                                                                        \
      }                                                                                  \
      if (NAME##_before(KEY(sv), i, KEY(*(T*)v), *(int64_t*)x, desc)) {                  \
        *(T*)v = sv;                                                                     \
        *(int64_t*)x = i;                                                                \
        NAME##_sift(v, vs, x, xs, 0, k, desc, true);                                     \
      }                                                                                  \
    }                                                                                    \
    NAME##_sort(v, vs, x, xs, k, desc);                                                  \
  }

#define IX_NONAN(x) false
#define IX_ISNAN(x) ((x) != (x))
#define IX_ID(x) (x)
#define IX_BF16(x) tpu_ku_bf16_to_f32(x)
#define IX_F16(x) tpu_ku_f16_to_f32(x)
IX_SORT_IMPL(ix_s_f32, float, float, IX_ID, IX_ISNAN)
IX_SORT_IMPL(ix_s_f64, double, double, IX_ID, IX_ISNAN)
IX_SORT_IMPL(ix_s_bf16, uint16_t, float, IX_BF16, IX_ISNAN)
IX_SORT_IMPL(ix_s_f16, uint16_t, float, IX_F16, IX_ISNAN)
IX_SORT_IMPL(ix_s_i64, int64_t, int64_t, IX_ID, IX_NONAN)
IX_SORT_IMPL(ix_s_i32, int32_t, int32_t, IX_ID, IX_NONAN)
IX_SORT_IMPL(ix_s_i16, int16_t, int16_t, IX_ID, IX_NONAN)
IX_SORT_IMPL(ix_s_i8, int8_t, int8_t, IX_ID, IX_NONAN)
IX_SORT_IMPL(ix_s_u8, uint8_t, uint8_t, IX_ID, IX_NONAN)

typedef void (*ix_sort_fn)(char*, int64_t, char*, int64_t, int64_t, bool);
typedef void (*ix_topk_fn)(const char*, int64_t, int64_t, char*, int64_t, char*, int64_t, int64_t, bool);

static bool ix_sort_fns(int dt, ix_sort_fn* s, ix_topk_fn* t) {
  switch (dt) {
    case TPU_DTYPE_F32: *s = ix_s_f32_sort; *t = ix_s_f32_topk; return true;
    case TPU_DTYPE_F64: *s = ix_s_f64_sort; *t = ix_s_f64_topk; return true;
    case TPU_DTYPE_BF16: *s = ix_s_bf16_sort; *t = ix_s_bf16_topk; return true;
    case TPU_DTYPE_F16: *s = ix_s_f16_sort; *t = ix_s_f16_topk; return true;
    case TPU_DTYPE_I64: *s = ix_s_i64_sort; *t = ix_s_i64_topk; return true;
    case TPU_DTYPE_I32: *s = ix_s_i32_sort; *t = ix_s_i32_topk; return true;
    case TPU_DTYPE_I16: *s = ix_s_i16_sort; *t = ix_s_i16_topk; return true;
    case TPU_DTYPE_I8: *s = ix_s_i8_sort; *t = ix_s_i8_topk; return true;
    case TPU_DTYPE_U8: case TPU_DTYPE_BOOL: *s = ix_s_u8_sort; *t = ix_s_u8_topk; return true;
    default: return false;
  }
}

/* sort: (self, dim, desc) | .stable: (self, stable, dim, desc); outputs values, indices */
static void ix_sort_args(const tpu_k_call_t* call, int64_t* dim, bool* desc) {
  bool stable = strstr(call->op, "stable") != NULL;
  *dim = tpu_ku_int(call, stable ? 2 : 1, -1);
  *desc = tpu_ku_bool(call, stable ? 3 : 2, false);
}

static tpu_status_t ix_sort_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (!self || call->num_outputs < 2) return TPU_KU_INVALID(call, "expected self and two outputs");
  ix_sort_fn s;
  ix_topk_fn t;
  if (!ix_sort_fns(self->dtype, &s, &t)) return tpu_ku_unsupported_dtype(call, self->dtype);
  const tpu_tensor_t* v = &call->outputs[0];
  const tpu_tensor_t* x = &call->outputs[1];
  if (v->dtype != self->dtype) return TPU_KU_INVALID(call, "values dtype differs from self");
  if (x->dtype != TPU_DTYPE_I64) return tpu_ku_unsupported_dtype(call, x->dtype);
  bool topk = strstr(call->op, "topk") != NULL;
  int64_t dimv;
  bool desc;
  if (topk) {
    dimv = tpu_ku_int(call, 2, -1);
  } else {
    ix_sort_args(call, &dimv, &desc);
  }
  int32_t dim;
  TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, dimv, self->ndim, &dim));
  if (v->ndim != self->ndim || x->ndim != self->ndim) return TPU_KU_INVALID(call, "outputs must have self's rank");
  int64_t n = self->ndim ? self->sizes[dim] : 1;
  int64_t k = topk ? tpu_ku_int(call, 1, -1) : n;
  if (topk && (k < 0 || k > n)) return TPU_KU_INVALID(call, "selected index k out of range");
  for (int32_t d = 0; d < self->ndim; ++d) {
    int64_t want = d == dim ? k : self->sizes[d];
    if (v->sizes[d] != want || x->sizes[d] != want) return TPU_KU_INVALID(call, "output shape mismatch at dim %d", (int)d);
  }
  return TPU_OK;
}

typedef struct {
  ix_lines_t l;
  ix_sort_fn sort;
  ix_topk_fn topk;
  bool topk_mode, desc;
  int64_t n, k;
  int64_t ss, vs, xs;
  ix_cp_t cp;
} ix_sortc_t;

static void ix_sort_body(void* ctx, int64_t b, int64_t e) {
  const ix_sortc_t* c = (const ix_sortc_t*)ctx;
  for (int64_t line = b; line < e; ++line) {
    int64_t off[3];
    ix_line_offsets(&c->l, line, off);
    const char* src = (const char*)c->l.ops[0]->data + off[0];
    char* v = (char*)c->l.ops[1]->data + off[1];
    char* x = (char*)c->l.ops[2]->data + off[2];
    if (c->topk_mode) {
      if (c->k > 0) c->topk(src, c->ss, c->n, v, c->vs, x, c->xs, c->k, c->desc);
      continue;
    }
    for (int64_t i = 0; i < c->n; ++i) {
      ix_copy1(&c->cp, v + i * c->vs, src + i * c->ss);
      *(int64_t*)(x + i * c->xs) = i;
    }
    c->sort(v, c->vs, x, c->xs, c->n, c->desc);
  }
}

static tpu_status_t ix_sort_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_sort_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  ix_sortc_t c;
  memset(&c, 0, sizeof(c));
  c.topk_mode = strstr(call->op, "topk") != NULL;
  int64_t dimv;
  if (c.topk_mode) {
    dimv = tpu_ku_int(call, 2, -1);
    c.desc = tpu_ku_bool(call, 3, true);
  } else {
    ix_sort_args(call, &dimv, &c.desc);
  }
  int32_t dim;
  TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, dimv, self->ndim, &dim));
  ix_sort_fns(self->dtype, &c.sort, &c.topk);
  c.n = self->ndim ? self->sizes[dim] : 1;
  c.k = c.topk_mode ? tpu_ku_int(call, 1, 0) : c.n;
  if (self->ndim == 0) c.k = 1; /* PyTorch: a 0-dim tensor is its own top-k for k = 0 or 1 */
  c.l.nops = 3;
  c.l.ops[0] = self;
  c.l.ops[1] = &call->outputs[0];
  c.l.ops[2] = &call->outputs[1];
  c.l.dim = self->ndim ? dim : -1;
  if (tpu_tensor_numel(self) == 0 || c.k == 0) return TPU_OK;
  c.l.lines = tpu_tensor_numel(self) / c.n;
  int64_t es = (int64_t)ix_es(self);
  c.ss = self->ndim ? self->strides[dim] * es : 0;
  c.vs = self->ndim ? call->outputs[0].strides[dim] * es : 0;
  c.xs = self->ndim ? call->outputs[1].strides[dim] * 8 : 0;
  c.cp = ix_cp(&call->outputs[0], self, false);
  tpu_parallel_for(call->pool, c.l.lines, 65536 / (c.n * 8 + 1) + 1, ix_sort_body, &c);
  return TPU_OK;
}

/* index_reduce(self, dim, index, source, reduce, *, include_self) (.out, _):
 * PyTorch's CPU loop, self.select(dim, index[i]) op= source.select(dim, i) in
 * index order in the dtype's own arithmetic (f16/bf16 rounded every step),
 * excluded positions first filled with the reduction's identity, mean
 * divided by 1 + (or, without self, the) number of contributions (floor
 * division for integers). prod/amax/amin run slice by slice (ix_ir_inner);
 * mean is scatter_reduce along dim with the index expanded to source's
 * shape, whose kernel counts the contributions without scratch memory. */
static tpu_status_t ix_ir_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  if (!self || !index || !src) return TPU_KU_INVALID(call, "expected self, dim, index, source");
  /* the CPU's errors (index_func_meta_impl) before the shared checks */
  if (index->ndim > 1)
    return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: index_reduce_(): Index is supposed to be a vector, but got dim: %d",
                     call->op, (int)index->ndim);
  if (!ix_is_index_dt(index->dtype))
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: index_reduce_(): Expected dtype int32/int64 for index but got: %s",
                     call->op, tpu_dtype_name((tpu_dtype_t)index->dtype));
  int32_t dim;
  TPU_RETURN_IF_ERROR(ix_dim_arg(call, 1, self->ndim, &dim));
  const int64_t len = src->ndim ? src->sizes[src->ndim > dim ? dim : 0] : 1;
  if (tpu_tensor_numel(index) != len)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: index_reduce_(): Number of indices (%lld) should be equal to source.size(dim): (%lld), for "
                     "dim: %d", call->op, (long long)tpu_tensor_numel(index), (long long)len, (int)dim);
  bool shapes = src->ndim == self->ndim || (src->ndim <= 1 && self->ndim <= 1);
  for (int32_t d = 0; shapes && d < self->ndim && src->ndim == self->ndim; ++d)
    shapes = d == dim || src->sizes[d] == self->sizes[d];
  if (!shapes)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: source tensor shape must match self tensor shape, excluding the specified dimension", call->op);
  TPU_RETURN_IF_ERROR(ix_ia_check(call));
  if (self->dtype != src->dtype || call->outputs[0].dtype != self->dtype)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: index_reduce_(): self (%s) and source (%s) must have the same scalar type", call->op,
                     tpu_dtype_name((tpu_dtype_t)self->dtype), tpu_dtype_name((tpu_dtype_t)src->dtype));
  int red;
  bool include_self;
  TPU_RETURN_IF_ERROR(ix_sr_parse(call, &red, &include_self));
  /* the CPU has no bool mean, no bool identity for include_self=False, and
   * takes bool only on its path for self of 2 or more dims */
  if (self->dtype == TPU_DTYPE_BOOL && (red == IX_R_MEAN || !include_self || self->ndim <= 1))
    return tpu_ku_unsupported_dtype(call, self->dtype);
  return TPU_OK;
}

/* prod/amax/amin slice by slice, as the CPU: for each run of elements of a
 * slice, every index in order (identities first without self); the store
 * rounds each step to the dtype. */
typedef struct {
  const tpu_tensor_t* index;
  int64_t n, osd, ssd; /* indices; byte strides along dim of out and source */
  int red, dt;
  bool fp, include_self;
} ix_ir_t;

static void ix_ir_inner(void* ctx, char** p, const int64_t* st, int64_t count) {
  const ix_ir_t* c = (const ix_ir_t*)ctx;
  if (!c->include_self) {
    for (int64_t i = 0; i < c->n; ++i) {
      char* d = p[0] + ix_index_at(c->index, i) * c->osd;
      for (int64_t k = 0; k < count; ++k) {
        if (c->fp) tpu_ku_store_f64(d + k * st[0], c->dt, ix_sr_ident_f(c->red));
        else tpu_ku_store_i64(d + k * st[0], c->dt, ix_sr_ident_i(c->red, c->dt));
      }
    }
  }
  for (int64_t i = 0; i < c->n; ++i) {
    char* d = p[0] + ix_index_at(c->index, i) * c->osd;
    const char* sp = p[1] + i * c->ssd;
    if (c->dt == TPU_DTYPE_F32) { /* the same steps in float, without the dtype switch per element */
      for (int64_t k = 0; k < count; ++k) {
        float* dk = (float*)(d + k * st[0]);
        const float v = *(const float*)(sp + k * st[1]);
        *dk = c->red == IX_R_PROD ? *dk * v : (float)ix_sr_f(c->red, *dk, v);
      }
      continue;
    }
    for (int64_t k = 0; k < count; ++k) {
      char* dk = d + k * st[0];
      const char* sk = sp + k * st[1];
      if (c->fp)
        tpu_ku_store_f64(dk, c->dt, ix_sr_f(c->red, tpu_ku_load_f64(dk, c->dt), tpu_ku_load_f64(sk, c->dt)));
      else
        tpu_ku_store_i64(dk, c->dt, ix_sr_i(c->red, tpu_ku_load_i64(dk, c->dt), tpu_ku_load_i64(sk, c->dt)));
    }
  }
}

static tpu_status_t ix_ir_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_ir_check(call));
  const tpu_tensor_t* index = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 3);
  const tpu_tensor_t* out = &call->outputs[0];
  int red;
  bool include_self;
  TPU_RETURN_IF_ERROR(ix_sr_parse(call, &red, &include_self));
  int32_t dim;
  int64_t size;
  TPU_RETURN_IF_ERROR(ix_ia_begin(call, false, &dim, &size));
  if (tpu_tensor_numel(index) == 0 || tpu_tensor_numel(src) == 0) return TPU_OK;
  if (red != IX_R_MEAN) {
    tpu_tensor_t os = ix_select_view(out, dim, 0), ss = ix_select_view(src, dim, 0);
    const tpu_tensor_t* ops[2] = {&os, &ss};
    tpu_ku_iter_t it;
    TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, call->op));
    ix_ir_t c = {index, tpu_tensor_numel(index), out->ndim ? out->strides[dim] * (int64_t)ix_es(out) : 0,
                 src->ndim ? src->strides[dim] * (int64_t)ix_es(src) : 0, red, out->dtype,
                 tpu_dtype_is_floating((tpu_dtype_t)out->dtype), include_self};
    tpu_ku_iter_parallel(&it, call->pool, 32768 / (c.n + 1) + 1, ix_ir_inner, &c);
    return TPU_OK;
  }
  tpu_tensor_t iv = *src; /* index expanded to source's shape (the mean's counts) */
  iv.data = index->data;
  iv.dtype = index->dtype;
  for (int32_t d = 0; d < iv.ndim; ++d) iv.strides[d] = 0;
  if (iv.ndim) iv.strides[dim] = index->ndim ? index->strides[0] : 0;
  ix_sr_exec(call, out, &iv, src, NULL, dim, red, include_self, true);
  return TPU_OK;
}

/* put_(self, index, source, accumulate) and put: self viewed as flat in
 * row-major order, self.flat[index[i]] = source.flat[i] (or +=) serially in
 * index order, as the CPU: a repeated index keeps its last value, sums
 * round to the dtype at every step. Negative indices count from the end. */
typedef struct {
  const tpu_tensor_t* t;
  int64_t es;
} ix_flat_t;

static inline char* ix_flat_at(const ix_flat_t* f, int64_t i) {
  const tpu_tensor_t* t = f->t;
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    off += (i % t->sizes[d]) * t->strides[d];
    i /= t->sizes[d];
  }
  return (char*)t->data + off * f->es;
}

static tpu_status_t ix_take_put_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 2);
  if (!self || !index || !src || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, index, source");
  if (!ix_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (index->dtype != TPU_DTYPE_I64)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: put_(): Expected a long tensor for index, but got %s",
                     call->op, tpu_dtype_name((tpu_dtype_t)index->dtype));
  if (src->dtype != self->dtype)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: put_(): self and source expected to have the same dtype, but got self.dtype = %s and "
                     "source.dtype = %s", call->op, tpu_dtype_name((tpu_dtype_t)self->dtype),
                     tpu_dtype_name((tpu_dtype_t)src->dtype));
  if (tpu_tensor_numel(src) != tpu_tensor_numel(index))
    return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE,
                     "%s: put_(): Expected source and index to have the same number of elements, but got "
                     "source.numel() = %lld, index.numel() = %lld", call->op, (long long)tpu_tensor_numel(src),
                     (long long)tpu_tensor_numel(index));
  if (tpu_tensor_numel(self) == 0 && tpu_tensor_numel(index) > 0)
    return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: put_(): Tried to put elements into an empty tensor", call->op);
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != self->dtype || !ix_same_shape(out, self)) return TPU_KU_INVALID(call, "output differs from self");
  for (int32_t d = 0; d < out->ndim; ++d)
    if (out->strides[d] == 0 && out->sizes[d] > 1)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "%s: unsupported operation: more than one element of the written-to tensor refers to a "
                       "single memory location. Please clone() the tensor before performing the operation.",
                       call->op);
  return TPU_OK;
}

static tpu_status_t ix_take_put_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(ix_take_put_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* index = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  const bool acc = tpu_ku_bool(call, 3, false);
  const int64_t numel = tpu_tensor_numel(out), n = tpu_tensor_numel(index);
  ix_flat_t fi = {index, 8}, fs = {src, (int64_t)ix_es(src)}, fo = {out, (int64_t)ix_es(out)};
  for (int64_t i = 0; i < n; ++i) { /* every index checked before anything is written */
    int64_t k = *(const int64_t*)ix_flat_at(&fi, i);
    if (k < -numel || k >= numel)
      return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: out of range: tried to access index %lld on a tensor of %lld elements.",
                       call->op, (long long)k, (long long)numel);
  }
  if (!ix_same_view(out, self)) TPU_RETURN_IF_ERROR(ix_copy(out, self, call->pool, call->op));
  const int dt = out->dtype;
  const bool fp = tpu_dtype_is_floating((tpu_dtype_t)dt);
  const size_t es = ix_es(out);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = *(const int64_t*)ix_flat_at(&fi, i);
    char* d = ix_flat_at(&fo, k < 0 ? k + numel : k);
    const char* v = ix_flat_at(&fs, i);
    if (!acc) memcpy(d, v, es);
    else if (dt == TPU_DTYPE_BOOL) *(uint8_t*)d = *(const uint8_t*)d || *(const uint8_t*)v;
    else if (fp) tpu_ku_store_f64(d, dt, tpu_ku_load_f64(d, dt) + tpu_ku_load_f64(v, dt));
    else tpu_ku_store_i64(d, dt, (int64_t)((uint64_t)tpu_ku_load_i64(d, dt) + (uint64_t)tpu_ku_load_i64(v, dt)));
  }
  return TPU_OK;
}

/* ---- searchsorted / bucketize ---------------------------------------------------- */

/* searchsorted.Tensor(_out) / .Scalar(_out): (sorted_sequence, self, out_int32, right, side, sorter);
 * bucketize.Tensor(_out) / .Scalar(_out): (self, boundaries, out_int32, right).
 * As PyTorch's CPU kernel: both sides are cast to torch.result_type(boundaries,
 * values) (a 0-dim tensor or a Scalar joins by category only), then
 * lower_bound (`!(b >= v)` moves right) or upper_bound (`!(b > v)`) over each
 * row of boundaries (the 1-D boundaries, or the row sharing the value's leading
 * indices), read through sorter when given; NaN sorts after every number. */
static int ix_cat(int dt) { return dt == TPU_DTYPE_BOOL ? 0 : tpu_dtype_is_floating((tpu_dtype_t)dt) ? 2 : 1; }

/* torch.promote_types over the dtypes kernels take */
static int ix_promote(int a, int b) {
  if (a == b) return a;
  int ca = ix_cat(a), cb = ix_cat(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) {
    if ((a == TPU_DTYPE_U8 && b == TPU_DTYPE_I8) || (a == TPU_DTYPE_I8 && b == TPU_DTYPE_U8)) return TPU_DTYPE_I16;
    if (a == TPU_DTYPE_U8) return b;
    if (b == TPU_DTYPE_U8) return a;
    return tpu_dtype_size((tpu_dtype_t)a) > tpu_dtype_size((tpu_dtype_t)b) ? a : b;
  }
  if ((a == TPU_DTYPE_F16 && b == TPU_DTYPE_BF16) || (a == TPU_DTYPE_BF16 && b == TPU_DTYPE_F16)) return TPU_DTYPE_F32;
  return tpu_dtype_size((tpu_dtype_t)a) > tpu_dtype_size((tpu_dtype_t)b) ? a : b;
}

typedef struct {
  const tpu_tensor_t *bnd, *val, *out, *sorter;
  const tpu_k_value_t* scalar; /* the .Scalar value, else NULL */
  int cdt;                     /* common dtype */
  bool right, ints;
  int64_t m, nb, lines;        /* values per row, boundaries per row, rows */
} ix_ss_t;

/* Element x of dtype sdt as the common dtype holds it: exact int64 for an
 * integer common type, else a double holding the rounded value (integers
 * convert through float for the 32/16-bit float types, as static_cast does). */
static inline double ix_ss_f(const ix_ss_t* c, double d, bool from_int, int64_t i) {
  switch (c->cdt) {
    case TPU_DTYPE_F64: return from_int ? (double)i : d;
    case TPU_DTYPE_F32: return from_int ? (double)(float)i : (double)(float)d;
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16(from_int ? (float)i : (float)d));
    default: return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(from_int ? (float)i : (float)d));
  }
}

/* A wider 0-dim value or a Scalar wraps into an integer common type, as .to() does. */
static inline int64_t ix_ss_wrap(const ix_ss_t* c, int64_t i) {
  char tmp[8];
  tpu_ku_store_i64(tmp, c->cdt, i);
  return tpu_ku_load_i64(tmp, c->cdt);
}

static inline void ix_ss_load(const ix_ss_t* c, const char* p, int dt, double* f, int64_t* i) {
  if (!tpu_dtype_is_floating((tpu_dtype_t)dt)) {
    *i = tpu_ku_load_i64(p, dt);
    if (!c->ints) {
      *f = ix_ss_f(c, 0, true, *i);
    } else if (dt != c->cdt) {
      *i = ix_ss_wrap(c, *i);
    }
  } else {
    *f = ix_ss_f(c, tpu_ku_load_f64(p, dt), false, 0);
  }
}

/* The search in the boundaries' own type when it is the common one (v is
 * already in it): the same comparisons without a conversion per probe. */
#define IX_SS_TYPED(T, v)                                                      \
  do {                                                                         \
    const T tv = (T)(v);                                                       \
    int64_t lo = 0, hi = c->nb;                                                \
    while (lo < hi) {                                                          \
      const int64_t mid = lo + ((hi - lo) >> 1);                               \
      const int64_t at = so ? *(const int64_t*)(so + mid * sos) : mid;         \
      const T bv = *(const T*)(b + at * bs);                                   \
      if (c->right ? !(bv > tv) : !(bv >= tv)) lo = mid + 1;                   \
      else hi = mid;                                                           \
    }                                                                          \
    return lo;                                                                 \
  } while (0)

static int64_t ix_ss_find(const ix_ss_t* c, const char* b, int64_t bs, const char* so, int64_t sos, double vf,
                          int64_t vi) {
  if (c->bnd->dtype == c->cdt) {
    switch (c->cdt) {
      case TPU_DTYPE_F32: IX_SS_TYPED(float, vf);
      case TPU_DTYPE_F64: IX_SS_TYPED(double, vf);
      case TPU_DTYPE_I64: IX_SS_TYPED(int64_t, vi);
      case TPU_DTYPE_I32: IX_SS_TYPED(int32_t, vi);
      default: break;
    }
  }
  int64_t lo = 0, hi = c->nb;
  const int bdt = c->bnd->dtype;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    const int64_t at = so ? *(const int64_t*)(so + mid * sos) : mid;
    double bf = 0;
    int64_t bi = 0;
    ix_ss_load(c, b + at * bs, bdt, &bf, &bi);
    bool go_right = c->ints ? (c->right ? !(bi > vi) : !(bi >= vi)) : (c->right ? !(bf > vf) : !(bf >= vf));
    if (go_right) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Elements [e0, e1) of the values in row-major order (rows of m). */
static void ix_ss_body(void* ctx, int64_t e0, int64_t e1) {
  const ix_ss_t* c = (const ix_ss_t*)ctx;
  const tpu_tensor_t* v = c->val;
  const int32_t vnd = v ? v->ndim : 0;
  const bool nd_bnd = c->bnd->ndim > 1;
  const int64_t bes = (int64_t)ix_es(c->bnd), ves = v ? (int64_t)ix_es(v) : 0, oes = (int64_t)ix_es(c->out);
  const int64_t bs = c->bnd->strides[c->bnd->ndim - 1] * bes;
  const int64_t sos = c->sorter ? c->sorter->strides[c->sorter->ndim - 1] * 8 : 0;
  const int64_t vs = vnd ? v->strides[vnd - 1] * ves : 0, os = vnd ? c->out->strides[vnd - 1] * oes : 0;
  for (int64_t e = e0; e < e1;) {
    const int64_t r = e / c->m, k0 = e % c->m, k1 = k0 + (e1 - e) < c->m ? k0 + (e1 - e) : c->m;
    e += k1 - k0;
    int64_t vo = 0, oo = 0, bo = 0, so = 0, rem = r;
    for (int32_t d = vnd - 2; d >= 0; --d) {
      int64_t i = rem % v->sizes[d];
      rem /= v->sizes[d];
      vo += i * v->strides[d] * ves;
      oo += i * c->out->strides[d] * oes;
      if (nd_bnd) {
        bo += i * c->bnd->strides[d] * bes;
        if (c->sorter) so += i * c->sorter->strides[d] * 8;
      }
    }
    const char* b = (const char*)c->bnd->data + bo;
    const char* sp = c->sorter ? (const char*)c->sorter->data + so : NULL;
    for (int64_t k = k0; k < k1; ++k) {
      double vf = 0;
      int64_t vi = 0;
      if (c->scalar) {
        const tpu_k_value_t* sv = c->scalar;
        if (sv->kind == TPU_K_DOUBLE) vf = ix_ss_f(c, sv->v.d, false, 0);
        else if (c->ints) vi = ix_ss_wrap(c, sv->kind == TPU_K_BOOL ? sv->v.b : sv->v.i);
        else vf = ix_ss_f(c, 0, true, sv->kind == TPU_K_BOOL ? sv->v.b : sv->v.i);
      } else {
        ix_ss_load(c, (const char*)v->data + vo + k * vs, v->dtype, &vf, &vi);
      }
      int64_t pos = ix_ss_find(c, b, bs, sp, sos, vf, vi);
      char* o = (char*)c->out->data + oo + k * os;
      if (c->out->dtype == TPU_DTYPE_I32) *(int32_t*)o = (int32_t)pos;
      else *(int64_t*)o = pos;
    }
  }
}

/* Scalar values: the dtype a Scalar of this kind joins result_type with */
static int ix_scalar_dt(const tpu_k_value_t* sv, int other) {
  int sdt = sv->kind == TPU_K_DOUBLE ? TPU_DTYPE_F32 : sv->kind == TPU_K_BOOL ? TPU_DTYPE_BOOL : TPU_DTYPE_I64;
  return ix_cat(sdt) > ix_cat(other) ? sdt : other;
}

static tpu_status_t ix_ss_setup(const tpu_k_call_t* call, ix_ss_t* c) {
  memset(c, 0, sizeof(*c));
  const bool bucketize = strstr(call->op, "bucketize") != NULL;
  const int bi = bucketize ? 1 : 0, vi = bucketize ? 0 : 1;
  c->bnd = tpu_ku_tensor(call, bi);
  c->val = tpu_ku_tensor(call, vi);
  if (!c->val) c->scalar = &call->args[vi];
  if (!c->bnd || (!c->val && c->scalar->kind != TPU_K_INT && c->scalar->kind != TPU_K_DOUBLE &&
                  c->scalar->kind != TPU_K_BOOL) || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected boundaries, values and an output");
  c->out = &call->outputs[0];
  const bool out_int32 = tpu_ku_bool(call, 2, false);
  bool right = tpu_ku_bool(call, 3, false);
  const char* side = bucketize ? NULL : tpu_ku_string(call, 4, NULL);
  c->sorter = bucketize || tpu_ku_is_none(call, 5) ? NULL : tpu_ku_tensor(call, 5);
  const char* fn = bucketize ? "torch.bucketize()" : "torch.searchsorted()";
  if (c->bnd->ndim == 0)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     bucketize ? "%s: boundaries tensor must be 1 dimension, but got dim(0)"
                               : "%s: torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension",
                     call->op);
  if (bucketize && c->bnd->ndim != 1)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: boundaries tensor must be 1 dimension, but got dim(%d)",
                     call->op, (int)c->bnd->ndim);
  if (side && strcmp(side, "left") != 0 && strcmp(side, "right") != 0)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: %s: side can only be 'left' or 'right' but got %s", call->op,
                     fn, side);
  if (side && strcmp(side, "left") == 0 && right)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: %s: side and right can't be set to opposites, got side of left while right was True",
                     call->op, fn);
  if (side) right = strcmp(side, "right") == 0;
  c->right = right;
  if (c->out->dtype != (out_int32 ? TPU_DTYPE_I32 : TPU_DTYPE_I64))
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "%s: %s: output tensor's dtype is wrong, it can only be Int(int32) or Long(int64) depending on "
                     "whether out_int32 flag is True, but we got output tensor's dtype %s and out_int32 flag is %s",
                     call->op, fn, tpu_dtype_name((tpu_dtype_t)c->out->dtype), out_int32 ? "True" : "False");
  const int32_t vnd = c->val ? c->val->ndim : 0;
  if (c->bnd->ndim > 1) {
    bool ok = c->bnd->ndim == vnd;
    for (int32_t d = 0; ok && d + 1 < vnd; ++d) ok = c->bnd->sizes[d] == c->val->sizes[d];
    if (!ok)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "%s: %s: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries "
                       "tensor and input value tensor must match", call->op, fn);
  }
  if (c->out->ndim != vnd) return TPU_KU_INVALID(call, "the output must have the values' shape");
  for (int32_t d = 0; d < vnd; ++d)
    if (c->out->sizes[d] != c->val->sizes[d]) return TPU_KU_INVALID(call, "the output must have the values' shape");
  c->nb = c->bnd->sizes[c->bnd->ndim - 1];
  if (c->sorter) {
    if (c->sorter->dtype != TPU_DTYPE_I64)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "%s: %s: sorter must be a tensor of long dtype but got dtype %s", call->op, fn,
                       tpu_dtype_name((tpu_dtype_t)c->sorter->dtype));
    bool same = c->sorter->ndim == c->bnd->ndim;
    for (int32_t d = 0; same && d < c->bnd->ndim; ++d) same = c->sorter->sizes[d] == c->bnd->sizes[d];
    if (!same)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: %s: boundary and sorter must have the same size", call->op,
                       fn);
  }
  int cdt;
  if (c->scalar) cdt = ix_scalar_dt(c->scalar, c->bnd->dtype);
  else if (vnd == 0) cdt = ix_cat(c->val->dtype) > ix_cat(c->bnd->dtype) ? ix_promote(c->bnd->dtype, c->val->dtype)
                                                                           : c->bnd->dtype;
  else cdt = ix_promote(c->bnd->dtype, c->val->dtype);
  if (cdt == TPU_DTYPE_BOOL || !ix_dtype_ok(cdt) || !ix_dtype_ok(c->bnd->dtype) ||
      (c->val && !ix_dtype_ok(c->val->dtype)))
    return tpu_ku_unsupported_dtype(call, cdt);
  if (c->scalar) TPU_RETURN_IF_ERROR(tpu_ku_check_scalar_fits(call, vi, cdt));
  c->cdt = cdt;
  c->ints = ix_cat(cdt) == 1;
  c->m = vnd ? c->val->sizes[vnd - 1] : 1;
  int64_t nv = c->val ? tpu_tensor_numel(c->val) : 1;
  c->lines = c->m ? nv / c->m : 0;
  return TPU_OK;
}

static tpu_status_t ix_ss_check(const tpu_k_call_t* call) {
  ix_ss_t c;
  return ix_ss_setup(call, &c);
}

static tpu_status_t ix_ss_run(const tpu_k_call_t* call) {
  ix_ss_t c;
  TPU_RETURN_IF_ERROR(ix_ss_setup(call, &c));
  if (c.sorter) { /* the CPU checks every sorter index, even with no values */
    const tpu_tensor_t* so = c.sorter;
    int64_t n = tpu_tensor_numel(so), idx[TPU_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; ++e) {
      int64_t off = 0;
      for (int32_t d = 0; d < so->ndim; ++d) off += idx[d] * so->strides[d];
      int64_t s = ((const int64_t*)so->data)[off];
      if (s < 0 || s >= c.nb)
        return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "%s: torch.searchsorted(): sorter index out of range",
                         call->op);
      for (int32_t d = so->ndim - 1; d >= 0 && ++idx[d] == so->sizes[d]; --d) idx[d] = 0;
    }
  }
  if (c.lines == 0 || c.m == 0) return TPU_OK;
  tpu_parallel_for(call->pool, c.lines * c.m, 2048, ix_ss_body, &c);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_index_entries[] = {
    {"aten::index_select", ix_select_run, ix_select_check, 0, NULL},
    {"aten::index_select.out", ix_select_run, ix_select_check, 0, NULL},
    {"aten::gather", ix_gather_run, ix_gather_check, 0, NULL},
    {"aten::gather.out", ix_gather_run, ix_gather_check, 0, NULL},
    {"aten::scatter.src", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter.value", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter_.src", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter_.value", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter.src_out", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter.value_out", ix_scatter_run, ix_scatter_check, 0, NULL},
    {"aten::scatter_add", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_add_", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_add.out", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter.reduce", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter.value_reduce", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_.reduce", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_.value_reduce", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter.reduce_out", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter.value_reduce_out", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_reduce.two", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_reduce_.two", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::scatter_reduce.two_out", ix_sr_run, ix_sr_check, 0, NULL},
    {"aten::index.Tensor", ix_index_run, ix_index_check, 0, NULL},
    {"aten::index.Tensor_out", ix_index_run, ix_index_check, 0, NULL},
    {"aten::index_put_", ix_put_run, ix_put_check, 0, NULL},
    {"aten::index_put", ix_put_run, ix_put_check, 0, NULL},
    {"aten::_index_put_impl_", ix_put_run, ix_put_check, 0, NULL},
    {"aten::index_add", ix_index_add_run, ix_ia_check, 0, NULL},
    {"aten::index_add_", ix_index_add_run, ix_ia_check, 0, NULL},
    {"aten::index_add.out", ix_index_add_run, ix_ia_check, 0, NULL},
    {"aten::index_copy", ix_index_copy_run, ix_ia_check, 0, NULL},
    {"aten::index_copy_", ix_index_copy_run, ix_ia_check, 0, NULL},
    {"aten::index_copy.out", ix_index_copy_run, ix_ia_check, 0, NULL},
    {"aten::index_fill.int_Scalar", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::index_fill.int_Tensor", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::index_fill_.int_Scalar", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::index_fill_.int_Tensor", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::index_fill.int_Scalar_out", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::index_fill.int_Tensor_out", ix_index_fill_run, ix_index_fill_check, 0, NULL},
    {"aten::embedding_renorm_", ix_renorm_run, ix_renorm_check, 0, NULL},
    {"aten::embedding_renorm", ix_renorm_run, ix_renorm_check, 0, NULL},
    {"aten::embedding_renorm.out", ix_renorm_run, ix_renorm_check, 0, NULL},
    {"aten::embedding_dense_backward", ix_emb_run, ix_emb_check, 0, NULL},
    {"aten::embedding_dense_backward.out", ix_emb_run, ix_emb_check, 0, NULL},
    {"aten::cat", ix_cat_run, ix_cat_check, 0, NULL},
    {"aten::cat.out", ix_cat_run, ix_cat_check, 0, NULL},
    {"aten::stack", ix_cat_run, ix_cat_check, 0, NULL},
    {"aten::stack.out", ix_cat_run, ix_cat_check, 0, NULL},
    {"aten::flip", ix_flip_run, ix_flip_check, 0, NULL},
    {"aten::flip.out", ix_flip_run, ix_flip_check, 0, NULL},
    {"aten::roll", ix_roll_run, ix_roll_check, 0, NULL},
    {"aten::roll.out", ix_roll_run, ix_roll_check, 0, NULL},
    {"aten::triu", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::tril", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::triu_", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::tril_", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::triu.out", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::tril.out", ix_tri_run, ix_tri_check, 0, NULL},
    {"aten::arange.start_out", ix_range_run, ix_range_check, 0, NULL},
    {"aten::linspace.out", ix_range_run, ix_range_check, 0, NULL},
    {"aten::repeat_interleave.Tensor", ix_repeat_run, ix_repeat_check, 0, ix_repeat_shape},
    {"aten::sort", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::sort.values", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::sort.stable", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::sort.values_stable", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::topk", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::topk.values", ix_sort_run, ix_sort_check, 0, NULL},
    {"aten::index_reduce", ix_ir_run, ix_ir_check, 0, NULL},
    {"aten::index_reduce_", ix_ir_run, ix_ir_check, 0, NULL},
    {"aten::index_reduce.out", ix_ir_run, ix_ir_check, 0, NULL},
    {"aten::put_", ix_take_put_run, ix_take_put_check, 0, NULL},
    {"aten::put", ix_take_put_run, ix_take_put_check, 0, NULL},
    {"aten::searchsorted.Tensor", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::searchsorted.Tensor_out", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::searchsorted.Scalar", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::searchsorted.Scalar_out", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::bucketize.Tensor", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::bucketize.Tensor_out", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::bucketize.Scalar", ix_ss_run, ix_ss_check, 0, NULL},
    {"aten::bucketize.Scalar_out", ix_ss_run, ix_ss_check, 0, NULL},
};
const size_t tpu_k_index_count = sizeof(tpu_k_index_entries) / sizeof(tpu_k_index_entries[0]);
