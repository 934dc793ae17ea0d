/* select.c - kernel family "select" (see tpu/kernels.h for the ABI): ops
 * whose output size depends on the data, and their static-size relatives.
 *
 *   nonzero, masked_select, _unique2/_unique, unique_dim, unique_consecutive,
 *   unique_dim_consecutive, bincount: shape() reads the inputs and reports
 *   the exact output sizes; run() fills the outputs the bridge allocated.
 *   nonzero_static, masked_scatter(_): sizes known up front (no shape()).
 *
 * run() never trusts that the outputs match what shape() reported (a direct
 * C caller or an out= tensor may disagree): every write is bounds-checked
 * against the output's sizes and a mismatch is INVALID_ARGUMENT.
 *
 * Unique without scratch memory. Kernels allocate nothing, and shape()
 * must count the distinct values before any output exists, while the input
 * is read-only: a sort or a hash set would need O(n) scratch. Instead the
 * classes (sets of equal items) are enumerated in ascending order in
 * batches of at most SL_CAP, using a bounded stack buffer of 2*SL_CAP
 * (index, offset) pairs (64 KiB):
 *   batch(after): one pass over the items; an item strictly greater than
 *   `after` and not beyond the current cut-off is appended to the buffer
 *   unless a binary search finds its class in the buffer's sorted prefix;
 *   when the buffer fills, it is sorted, deduplicated (keeping each class's
 *   first item) and cut to the SL_CAP smallest classes (the cut-off).
 * With K classes this costs ceil((K+1)/SL_CAP) passes of O(n log SL_CAP):
 * one pass when K < SL_CAP, the common case (labels, token ids of a
 * batch). For K ~ n it degrades to O(n^2 / SL_CAP) - the time/space
 * trade-off of element distinctness on read-only input with comparisons
 * (T*S about n^2). A bridge-provided scratch buffer would make it
 * O(n log n).
 * run() repeats the enumeration to write the values, and per batch one more
 * pass assigns inverse indices and counts by binary search.
 * Integer and bool elements whose values span at most 16 * 2^19 (8M)
 * consecutive values take a faster exact path instead: a 64 KiB bitmap per
 * window of 2^19 values, one pass per window (one for bool/8/16-bit
 * dtypes, token ids, labels), then inverse/counts by binary search in the
 * sorted values.
 *
 * Ordering (as PyTorch's CPU kernels): ascending; NaN after every number;
 * every NaN is its own class (NaN != NaN). Where PyTorch's unstable sort
 * leaves it unspecified, this file defines it: NaN classes in index order,
 * a class represented by its first item in logical (row-major) order (so
 * of -0.0 and 0.0 the earlier one is kept). unique_dim compares
 * slices lexicographically in row-major order of the remaining dims; a
 * slice holding a NaN is equal to no other slice. sorted=False still
 * returns sorted values (PyTorch's CPU kernel does the same). */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

static size_t sl_es(const tpu_tensor_t* t) { return tpu_dtype_size((tpu_dtype_t)t->dtype); }
static bool sl_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }
static bool sl_is_int_dt(int dt) {
  return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32 || dt == TPU_DTYPE_I16 || dt == TPU_DTYPE_I8 ||
         dt == TPU_DTYPE_U8;
}
static bool sl_has_out(const tpu_k_call_t* call, int i) {
  return call->outputs && i < call->num_outputs && call->outputs[i].dtype != TPU_DTYPE_INVALID;
}

/* Is the element at p nonzero? (-0.0 is zero, NaN is not.) */
static inline bool sl_nz(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return *(const float*)p != 0.0f;
    case TPU_DTYPE_F64: return *(const double*)p != 0.0;
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: return (*(const uint16_t*)p & 0x7fffu) != 0;
    case TPU_DTYPE_I64: return *(const int64_t*)p != 0;
    case TPU_DTYPE_I32: return *(const int32_t*)p != 0;
    case TPU_DTYPE_I16: return *(const int16_t*)p != 0;
    default: return *(const uint8_t*)p != 0;
  }
}

static void sl_shape1(tpu_tensor_t* s, int dt, int64_t n) {
  memset(s, 0, sizeof(*s));
  s->dtype = dt;
  s->ndim = 1;
  s->sizes[0] = n;
  s->strides[0] = 1;
}

static void sl_shape_like(tpu_tensor_t* s, int dt, const tpu_tensor_t* t) {
  memset(s, 0, sizeof(*s));
  s->dtype = dt;
  s->ndim = t->ndim;
  for (int32_t d = 0; d < t->ndim; ++d) s->sizes[d] = t->sizes[d];
}

/* ---- logical (row-major) walk over a shape, up to 4 operands ----------------- */

#define SL_WALK_OPS 4
typedef struct {
  int32_t nd;
  int n;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t st[SL_WALK_OPS][TPU_MAX_DIMS]; /* bytes; 0 where broadcast */
  int64_t idx[TPU_MAX_DIMS];
  int64_t off[SL_WALK_OPS];
  int64_t numel;
} sl_walk_t;

/* Byte strides of `t` broadcast (right-aligned) to `sizes`; false if it
 * cannot broadcast. */
static bool sl_bcast(const tpu_tensor_t* t, int32_t nd, const int64_t* sizes, int64_t* st) {
  int32_t lead = nd - t->ndim;
  int64_t es = (int64_t)sl_es(t);
  for (int32_t j = 0; j < -lead; ++j)
    if (t->sizes[j] != 1) return false;
  for (int32_t d = 0; d < nd; ++d) {
    int32_t j = d - lead;
    if (j < 0 || t->sizes[j] == 1) {
      st[d] = 0;
    } else if (t->sizes[j] == sizes[d]) {
      st[d] = t->strides[j] * es;
    } else {
      return false;
    }
  }
  return true;
}

/* Broadcast shape of a and b into sizes/nd; false if incompatible. */
static bool sl_bshape(const tpu_tensor_t* a, const tpu_tensor_t* b, int32_t* nd, int64_t* sizes) {
  int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int32_t d = 0; d < n; ++d) {
    int32_t ja = d - (n - a->ndim), jb = d - (n - b->ndim);
    int64_t sa = ja >= 0 ? a->sizes[ja] : 1, sb = jb >= 0 ? b->sizes[jb] : 1;
    if (sa != sb && sa != 1 && sb != 1) return false;
    sizes[d] = sa == 1 ? sb : sa;
  }
  *nd = n;
  return true;
}

static void sl_walk_init(sl_walk_t* w, int32_t nd, const int64_t* sizes) {
  memset(w, 0, sizeof(*w));
  w->nd = nd;
  w->numel = 1;
  for (int32_t d = 0; d < nd; ++d) {
    w->sizes[d] = sizes[d];
    w->numel *= sizes[d];
  }
}
/* Adds operand `t` (broadcast to the walk's shape); false if it cannot. */
static bool sl_walk_add(sl_walk_t* w, const tpu_tensor_t* t) {
  if (!sl_bcast(t, w->nd, w->sizes, w->st[w->n])) return false;
  w->n++;
  return true;
}
/* Adds an operand by explicit byte strides per dim. */
static void sl_walk_add_strides(sl_walk_t* w, const int64_t* st) {
  for (int32_t d = 0; d < w->nd; ++d) w->st[w->n][d] = st[d];
  w->n++;
}
static inline void sl_walk_next(sl_walk_t* w) {
  for (int32_t d = w->nd - 1; d >= 0; --d) {
    for (int k = 0; k < w->n; ++k) w->off[k] += w->st[k][d];
    if (++w->idx[d] < w->sizes[d]) return;
    for (int k = 0; k < w->n; ++k) w->off[k] -= w->idx[d] * w->st[k][d];
    w->idx[d] = 0;
  }
}
static void sl_walk_reset(sl_walk_t* w) {
  memset(w->idx, 0, sizeof(w->idx));
  memset(w->off, 0, sizeof(w->off));
}

/* Logical walk over one tensor's elements (offsets in bytes). */
static void sl_walk_tensor(sl_walk_t* w, const tpu_tensor_t* t) {
  sl_walk_init(w, t->ndim, t->sizes);
  sl_walk_add(w, t);
}

/* ---- nonzero / nonzero_static ---------------------------------------------------- */

static int64_t sl_count_nz(const tpu_tensor_t* t) {
  int64_t n = tpu_tensor_numel(t), c = 0;
  if (n == 0) return 0;
  const char* p = (const char*)t->data;
  int dt = t->dtype;
  if (tpu_tensor_is_contiguous(t)) {
    int64_t es = (int64_t)sl_es(t);
    for (int64_t i = 0; i < n; ++i) c += sl_nz(p + i * es, dt);
    return c;
  }
  sl_walk_t w;
  sl_walk_tensor(&w, t);
  for (int64_t i = 0; i < n; ++i, sl_walk_next(&w)) c += sl_nz(p + w.off[0], dt);
  return c;
}

static bool sl_is_static(const tpu_k_call_t* call) { return strstr(call->op, "nonzero_static") != NULL; }

static tpu_status_t sl_nonzero_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (!self || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and one output");
  if (!sl_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (sl_is_static(call) && tpu_ku_int(call, 1, 0) < 0)
    return TPU_KU_INVALID(call, "nonzero_static: 'size' must be an non-negative integer");
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != TPU_DTYPE_I64)
    return TPU_KU_INVALID(call, "nonzero: Expected out tensor to have scalar type Long but got scalar type %s",
                          tpu_dtype_name((tpu_dtype_t)out->dtype));
  if (out->ndim != 2 || out->sizes[1] != self->ndim)
    return TPU_KU_INVALID(call, "output must have shape [n, %d]", (int)self->ndim);
  return TPU_OK;
}

static tpu_status_t sl_nonzero_shape(const tpu_k_call_t* call, tpu_tensor_t* out_shapes) {
  TPU_RETURN_IF_ERROR(sl_nonzero_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  memset(&out_shapes[0], 0, sizeof(out_shapes[0]));
  out_shapes[0].dtype = TPU_DTYPE_I64;
  out_shapes[0].ndim = 2;
  out_shapes[0].sizes[0] = sl_count_nz(self);
  out_shapes[0].sizes[1] = self->ndim;
  return TPU_OK;
}

static tpu_status_t sl_nonzero_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(sl_nonzero_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* out = &call->outputs[0];
  const bool stat = sl_is_static(call);
  const int64_t rows = out->sizes[0], nd = self->ndim;
  if (stat && rows != tpu_ku_int(call, 1, 0)) return TPU_KU_INVALID(call, "output rows differ from size");
  char* o = (char*)out->data;
  const int64_t rs = out->strides[0] * 8, cs = out->strides[1] * 8;
  int64_t n = tpu_tensor_numel(self), r = 0, found = 0;
  if (n > 0) {
    sl_walk_t w;
    sl_walk_tensor(&w, self);
    const char* p = (const char*)self->data;
    for (int64_t i = 0; i < n; ++i, sl_walk_next(&w)) {
      if (!sl_nz(p + w.off[0], self->dtype)) continue;
      ++found;
      if (r >= rows) {
        if (stat) break;
        continue;
      }
      for (int64_t d = 0; d < nd; ++d) *(int64_t*)(o + r * rs + d * cs) = w.idx[d];
      ++r;
    }
  }
  if (stat) {
    int64_t fill = tpu_ku_int(call, 2, -1);
    for (; r < rows; ++r)
      for (int64_t d = 0; d < nd; ++d) *(int64_t*)(o + r * rs + d * cs) = fill;
    return TPU_OK;
  }
  if (found != rows)
    return TPU_KU_INVALID(call, "the output has %lld rows but self has %lld nonzero elements", (long long)rows,
                          (long long)found);
  return TPU_OK;
}

/* ---- masked_select ------------------------------------------------------------------ */

static bool sl_mask_dt(int dt) { return dt == TPU_DTYPE_BOOL || dt == TPU_DTYPE_U8; }

static tpu_status_t sl_msel_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* mask = tpu_ku_tensor(call, 1);
  if (!self || !mask || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self, mask and an output");
  if (!sl_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!sl_mask_dt(mask->dtype)) return TPU_KU_INVALID(call, "masked_select: expected BoolTensor for mask");
  int32_t nd = 0;
  int64_t sizes[TPU_MAX_DIMS];
  if (!sl_bshape(self, mask, &nd, sizes))
    return TPU_KU_INVALID(call, "shape mismatch: mask and self cannot be broadcast together");
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != self->dtype) return TPU_KU_INVALID(call, "output dtype differs from self");
  if (out->ndim != 1) return TPU_KU_INVALID(call, "output must be 1-D");
  return TPU_OK;
}

static tpu_status_t sl_msel_shape(const tpu_k_call_t* call, tpu_tensor_t* out_shapes) {
  TPU_RETURN_IF_ERROR(sl_msel_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* mask = tpu_ku_tensor(call, 1);
  int32_t nd = 0;
  int64_t sizes[TPU_MAX_DIMS];
  sl_bshape(self, mask, &nd, sizes);
  sl_walk_t w;
  sl_walk_init(&w, nd, sizes);
  sl_walk_add(&w, mask);
  int64_t c = 0;
  const char* m = (const char*)mask->data;
  for (int64_t i = 0; i < w.numel; ++i, sl_walk_next(&w)) c += *(const uint8_t*)(m + w.off[0]) != 0;
  sl_shape1(&out_shapes[0], self->dtype, c);
  return TPU_OK;
}

static tpu_status_t sl_msel_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(sl_msel_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* mask = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* out = &call->outputs[0];
  int32_t nd = 0;
  int64_t sizes[TPU_MAX_DIMS];
  sl_bshape(self, mask, &nd, sizes);
  sl_walk_t w;
  sl_walk_init(&w, nd, sizes);
  sl_walk_add(&w, self);
  sl_walk_add(&w, mask);
  const size_t es = sl_es(self);
  const int64_t os = out->strides[0] * (int64_t)es, cap = out->sizes[0];
  const char* s = (const char*)self->data;
  const char* m = (const char*)mask->data;
  char* o = (char*)out->data;
  int64_t c = 0;
  for (int64_t i = 0; i < w.numel; ++i, sl_walk_next(&w)) {
    if (!*(const uint8_t*)(m + w.off[1])) continue;
    if (c < cap) memcpy(o + c * os, s + w.off[0], es);
    ++c;
  }
  if (c != cap)
    return TPU_KU_INVALID(call, "the output has %lld elements but the mask selects %lld", (long long)cap,
                          (long long)c);
  return TPU_OK;
}

/* ---- masked_scatter(_) ----------------------------------------------------------------- */

/* (self, mask, source[, out]) -> outputs[0] (self for the in-place form). */
static tpu_status_t sl_mscat_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* mask = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 2);
  if (!self || !mask || !src || call->num_outputs < 1)
    return TPU_KU_INVALID(call, "expected self, mask, source and an output");
  if (!sl_dtype_ok(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (!sl_mask_dt(mask->dtype))
    return TPU_KU_INVALID(call, "masked_scatter_ only supports boolean masks, but got mask with dtype %s",
                          tpu_dtype_name((tpu_dtype_t)mask->dtype));
  if (src->dtype != self->dtype)
    return TPU_KU_INVALID(call, "masked_scatter: expected self and source to have same dtypes but got %s and %s",
                          tpu_dtype_name((tpu_dtype_t)self->dtype), tpu_dtype_name((tpu_dtype_t)src->dtype));
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != self->dtype) return TPU_KU_INVALID(call, "output dtype differs from self");
  int64_t st[TPU_MAX_DIMS];
  if (!sl_bcast(self, out->ndim, out->sizes, st) || !sl_bcast(mask, out->ndim, out->sizes, st))
    return TPU_KU_INVALID(call, "self and mask cannot be broadcast to the output's shape");
  return TPU_OK;
}

static tpu_status_t sl_mscat_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(sl_mscat_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* mask = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* src = tpu_ku_tensor(call, 2);
  const tpu_tensor_t* out = &call->outputs[0];
  sl_walk_t w;
  sl_walk_init(&w, out->ndim, out->sizes);
  sl_walk_add(&w, out);
  sl_walk_add(&w, self);
  sl_walk_add(&w, mask);
  if (w.numel == 0) return TPU_OK;
  const char* m = (const char*)mask->data;
  int64_t need = 0;
  for (int64_t i = 0; i < w.numel; ++i, sl_walk_next(&w)) need += *(const uint8_t*)(m + w.off[2]) != 0;
  if (need > tpu_tensor_numel(src))
    return TPU_KU_INVALID(call, "Number of elements of source < number of ones in mask");
  /* Unmasked elements are copied unless the output is self itself. */
  bool same = out->data == self->data && out->ndim == self->ndim;
  for (int32_t d = 0; same && d < out->ndim; ++d)
    if (out->sizes[d] != self->sizes[d] || (out->sizes[d] > 1 && out->strides[d] != self->strides[d])) same = false;
  sl_walk_reset(&w);
  sl_walk_t sw;
  sl_walk_tensor(&sw, src);
  const size_t es = sl_es(self);
  char* o = (char*)out->data;
  const char* s = (const char*)self->data;
  const char* sp = (const char*)src->data;
  for (int64_t i = 0; i < w.numel; ++i, sl_walk_next(&w)) {
    if (*(const uint8_t*)(m + w.off[2])) {
      memcpy(o + w.off[0], sp + sw.off[0], es);
      sl_walk_next(&sw);
    } else if (!same) {
      memcpy(o + w.off[0], s + w.off[1], es);
    }
  }
  return TPU_OK;
}

/* ---- bincount -------------------------------------------------------------------------- */

/* (self, weights?, minlength[, out]) */
static tpu_status_t sl_binc_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* wt = tpu_ku_tensor(call, 1);
  if (!self || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected self and an output");
  if (!sl_is_int_dt(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  if (self->ndim != 1) return TPU_KU_INVALID(call, "bincount only supports 1-d non-negative integral inputs.");
  if (tpu_ku_int(call, 2, 0) < 0) return TPU_KU_INVALID(call, "minlength should be >= 0");
  if (wt) {
    if (!sl_dtype_ok(wt->dtype) || wt->dtype == TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, wt->dtype);
    if (wt->ndim != 1 || wt->sizes[0] != self->sizes[0])
      return TPU_KU_INVALID(call, "weights should be 1-d and have the same length as input");
  }
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->ndim != 1 || !sl_dtype_ok(out->dtype)) return TPU_KU_INVALID(call, "output must be 1-D");
  return TPU_OK;
}

static tpu_status_t sl_binc_max(const tpu_k_call_t* call, const tpu_tensor_t* self, int64_t* out_max) {
  int64_t n = self->sizes[0], st = self->strides[0] * (int64_t)sl_es(self), mx = -1;
  const char* p = (const char*)self->data;
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = tpu_ku_load_i64(p + i * st, self->dtype);
    if (v < 0) return TPU_KU_INVALID(call, "bincount only supports 1-d non-negative integral inputs.");
    if (v > mx) mx = v;
  }
  *out_max = mx;
  return TPU_OK;
}

static tpu_status_t sl_binc_shape(const tpu_k_call_t* call, tpu_tensor_t* out_shapes) {
  TPU_RETURN_IF_ERROR(sl_binc_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* wt = tpu_ku_tensor(call, 1);
  int64_t mx = -1;
  TPU_RETURN_IF_ERROR(sl_binc_max(call, self, &mx));
  int64_t minlength = tpu_ku_int(call, 2, 0);
  int64_t len = mx + 1 > minlength ? mx + 1 : minlength;
  int dt = !wt ? TPU_DTYPE_I64 : wt->dtype == TPU_DTYPE_F32 ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
  sl_shape1(&out_shapes[0], dt, len);
  return TPU_OK;
}

static tpu_status_t sl_binc_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(sl_binc_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* wt = tpu_ku_tensor(call, 1);
  const tpu_tensor_t* out = &call->outputs[0];
  int64_t mx = -1;
  TPU_RETURN_IF_ERROR(sl_binc_max(call, self, &mx));
  const int64_t len = out->sizes[0];
  if (mx >= len) return TPU_KU_INVALID(call, "the output has %lld bins but the largest value is %lld", (long long)len,
                                       (long long)mx);
  char* o = (char*)out->data;
  const int odt = out->dtype;
  const int64_t os = out->strides[0] * (int64_t)sl_es(out);
  for (int64_t b = 0; b < len; ++b) memset(o + b * os, 0, sl_es(out));
  const int64_t n = self->sizes[0], ss = self->strides[0] * (int64_t)sl_es(self);
  const char* p = (const char*)self->data;
  if (!wt) {
    for (int64_t i = 0; i < n; ++i) {
      char* q = o + tpu_ku_load_i64(p + i * ss, self->dtype) * os;
      if (odt == TPU_DTYPE_I64) {
        *(int64_t*)q += 1;
      } else {
        tpu_ku_store_f64(q, odt, tpu_ku_load_f64(q, odt) + 1.0);
      }
    }
    return TPU_OK;
  }
  const int64_t ws = wt->strides[0] * (int64_t)sl_es(wt);
  const char* wp = (const char*)wt->data;
  for (int64_t i = 0; i < n; ++i) {
    char* q = o + tpu_ku_load_i64(p + i * ss, self->dtype) * os;
    double v = tpu_ku_load_f64(wp + i * ws, wt->dtype);
    if (odt == TPU_DTYPE_F32) {
      *(float*)q += (float)v; /* float weights accumulate in float, as on CPU */
    } else if (odt == TPU_DTYPE_F64) {
      *(double*)q += v;
    } else {
      tpu_ku_store_f64(q, odt, tpu_ku_load_f64(q, odt) + v);
    }
  }
  return TPU_OK;
}

/* ---- unique family ------------------------------------------------------------------------
 * An "item" is one element of self in logical order (flat modes) or one
 * slice self[..., i, ...] along `dim` (dim modes). Items are addressed by
 * (logical index, byte offset from self->data). */

#define SL_CAP 2048

typedef struct {
  int64_t idx, off;
} sl_rep_t;

typedef struct sl_u_t sl_u_t;
/* Compares two element runs of the item layout; sets *nan when equal so far
 * only because both sides hold NaN at some position. */
typedef int (*sl_elem_cmp_fn)(const char* a, const char* b, int* nan);

struct sl_u_t {
  const tpu_tensor_t* self;
  const char* base;
  int64_t n; /* items */
  /* item grid (walk order): flat modes: self's dims; dim modes: [n] */
  int32_t gnd;
  int64_t gsizes[TPU_MAX_DIMS];
  int64_t gst[TPU_MAX_DIMS];
  /* slice layout (dim modes; sn == 0: an item is one element) */
  int32_t sn;
  int64_t ssz[TPU_MAX_DIMS];
  int64_t sst[TPU_MAX_DIMS];
  sl_elem_cmp_fn ecmp;
};

#define SL_NO_NAN(x) 0
#define SL_IS_NAN(x) ((x) != (x))
#define SL_ID(x) (x)
#define SL_BF16(x) tpu_ku_bf16_to_f32(x)
#define SL_F16(x) tpu_ku_f16_to_f32(x)
#define SL_ECMP(NAME, T, KT, KEY, ISNAN)                       \
  static int NAME(const char* a, const char* b, int* nan) {    \
    KT x = KEY(*(const T*)a), y = KEY(*(const T*)b);          \
    if (ISNAN(x) || ISNAN(y)) {                                \
      if (ISNAN(x) && ISNAN(y)) {                              \
        *nan = 1;                                              \
        return 0;                                              \
      }                                                        \
      return ISNAN(x) ? 1 : -1;                                \
    }                                                          \
    return (x > y) - (x < y);                                  \
  }
SL_ECMP(sl_ecmp_f32, float, float, SL_ID, SL_IS_NAN)
SL_ECMP(sl_ecmp_f64, double, double, SL_ID, SL_IS_NAN)
SL_ECMP(sl_ecmp_bf16, uint16_t, float, SL_BF16, SL_IS_NAN)
SL_ECMP(sl_ecmp_f16, uint16_t, float, SL_F16, SL_IS_NAN)
SL_ECMP(sl_ecmp_i64, int64_t, int64_t, SL_ID, SL_NO_NAN)
SL_ECMP(sl_ecmp_i32, int32_t, int32_t, SL_ID, SL_NO_NAN)
SL_ECMP(sl_ecmp_i16, int16_t, int16_t, SL_ID, SL_NO_NAN)
SL_ECMP(sl_ecmp_i8, int8_t, int8_t, SL_ID, SL_NO_NAN)
SL_ECMP(sl_ecmp_u8, uint8_t, uint8_t, SL_ID, SL_NO_NAN)

static sl_elem_cmp_fn sl_ecmp_for(int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return sl_ecmp_f32;
    case TPU_DTYPE_F64: return sl_ecmp_f64;
    case TPU_DTYPE_BF16: return sl_ecmp_bf16;
    case TPU_DTYPE_F16: return sl_ecmp_f16;
    case TPU_DTYPE_I64: return sl_ecmp_i64;
    case TPU_DTYPE_I32: return sl_ecmp_i32;
    case TPU_DTYPE_I16: return sl_ecmp_i16;
    case TPU_DTYPE_I8: return sl_ecmp_i8;
    case TPU_DTYPE_U8:
    case TPU_DTYPE_BOOL: return sl_ecmp_u8;
    default: return NULL;
  }
}

/* Lexicographic comparison of two items (same slice layout). */
static int sl_slice_cmp(const sl_u_t* u, const char* a, const char* b, int* nan) {
  if (u->sn == 0) return u->ecmp(a, b, nan);
  int64_t idx[TPU_MAX_DIMS];
  memset(idx, 0, sizeof(idx));
  int64_t off = 0;
  const int32_t in = u->sn - 1;
  const int64_t n0 = u->ssz[in], s0 = u->sst[in];
  for (;;) {
    for (int64_t j = 0; j < n0; ++j) {
      int c = u->ecmp(a + off + j * s0, b + off + j * s0, nan);
      if (c) return c;
    }
    int32_t d = in - 1;
    for (; d >= 0; --d) {
      off += u->sst[d];
      if (++idx[d] < u->ssz[d]) break;
      off -= idx[d] * u->sst[d];
      idx[d] = 0;
    }
    if (d < 0) return 0;
  }
}

/* Total order of items by class; 0 iff same class. */
static inline int sl_cmp(const sl_u_t* u, const sl_rep_t* a, const sl_rep_t* b) {
  int nan = 0;
  int c = sl_slice_cmp(u, u->base + a->off, u->base + b->off, &nan);
  if (c) return c;
  if (nan) return (a->idx > b->idx) - (a->idx < b->idx);
  return 0;
}
/* Sort key: class, then index (so a class's first item comes first). */
static inline bool sl_before(const sl_u_t* u, const sl_rep_t* a, const sl_rep_t* b) {
  int c = sl_cmp(u, a, b);
  return c ? c < 0 : a->idx < b->idx;
}

static void sl_sift(const sl_u_t* u, sl_rep_t* r, int64_t root, int64_t n) {
  sl_rep_t v = r[root];
  for (;;) {
    int64_t c = 2 * root + 1;
    if (c >= n) break;
    if (c + 1 < n && sl_before(u, &r[c], &r[c + 1])) c++;
    if (!sl_before(u, &v, &r[c])) break;
    r[root] = r[c];
    root = c;
  }
  r[root] = v;
}
static void sl_heapsort(const sl_u_t* u, sl_rep_t* r, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; --i) sl_sift(u, r, i, n);
  for (int64_t e = n - 1; e > 0; --e) {
    sl_rep_t t = r[0];
    r[0] = r[e];
    r[e] = t;
    sl_sift(u, r, 0, e);
  }
}
/* Sorts and keeps each class's first item; returns the new length. */
static int64_t sl_sort_dedup(const sl_u_t* u, sl_rep_t* r, int64_t n) {
  if (n < 2) return n;
  sl_heapsort(u, r, n);
  int64_t m = 1;
  for (int64_t i = 1; i < n; ++i)
    if (sl_cmp(u, &r[m - 1], &r[i]) != 0) r[m++] = r[i];
  return m;
}
/* Position of x's class in sorted distinct r[0..n), or -1. */
static int64_t sl_find(const sl_u_t* u, const sl_rep_t* r, int64_t n, const sl_rep_t* x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = sl_cmp(u, &r[mid], x);
    if (c == 0) return mid;
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return -1;
}

/* Walk over the items, optionally with a second operand of the same grid
 * (byte strides `st2`, may be NULL). */
static void sl_items_walk(const sl_u_t* u, sl_walk_t* w, const int64_t* st2) {
  sl_walk_init(w, u->gnd, u->gsizes);
  sl_walk_add_strides(w, u->gst);
  if (st2) sl_walk_add_strides(w, st2);
}

/* The up-to-SL_CAP smallest classes strictly greater than *after (all when
 * NULL), ascending, each by its first item, into r[0..ret). r holds
 * 2*SL_CAP entries. */
static int64_t sl_batch(const sl_u_t* u, const sl_rep_t* after, sl_rep_t* r) {
  int64_t m = 0, sorted = 0;
  bool full = false;
  sl_walk_t w;
  sl_items_walk(u, &w, NULL);
  for (int64_t i = 0; i < u->n; ++i, sl_walk_next(&w)) {
    sl_rep_t x = {i, w.off[0]};
    if (after && sl_cmp(u, &x, after) <= 0) continue;
    if (full && sl_cmp(u, &x, &r[SL_CAP - 1]) >= 0) continue;
    if (sorted && sl_find(u, r, sorted, &x) >= 0) continue;
    r[m++] = x;
    if (m == 2 * SL_CAP) {
      m = sl_sort_dedup(u, r, m);
      if (m >= SL_CAP) {
        m = SL_CAP;
        full = true;
      }
      sorted = m;
    }
  }
  m = sl_sort_dedup(u, r, m);
  return m > SL_CAP ? SL_CAP : m;
}

/* Number of classes. */
static __attribute__((noinline)) int64_t sl_count_classes(const sl_u_t* u) {
  sl_rep_t r[2 * SL_CAP];
  int64_t k = 0;
  sl_rep_t after;
  bool have = false;
  for (;;) {
    int64_t m = sl_batch(u, have ? &after : NULL, r);
    k += m;
    if (m < SL_CAP) return k;
    after = r[m - 1];
    have = true;
  }
}

/* Number of runs of equal consecutive items. */
static int64_t sl_count_runs(const sl_u_t* u) {
  if (u->n == 0) return 0;
  sl_walk_t w;
  sl_items_walk(u, &w, NULL);
  sl_rep_t prev = {0, 0};
  int64_t k = 1;
  sl_walk_next(&w);
  for (int64_t i = 1; i < u->n; ++i, sl_walk_next(&w)) {
    sl_rep_t x = {i, w.off[0]};
    if (sl_cmp(u, &prev, &x) != 0) ++k;
    prev = x;
  }
  return k;
}

/* ---- integer items: bitmap windows ------------------------------------------------
 * Items that are single integer (or bool) elements whose values span at
 * most SL_WINDOWS windows of SL_WBITS consecutive values are classified
 * with a bitmap of one window on the stack (64 KiB): one pass per window,
 * values come out sorted, inverse/counts by binary search in the values. */
#define SL_WBITS ((int64_t)1 << 19)
#define SL_WINDOWS 16

static bool sl_int_windows(const sl_u_t* u, int64_t* out_min, int64_t* out_windows) {
  const int dt = u->self->dtype;
  if (u->sn != 0 || u->n == 0 || !(sl_is_int_dt(dt) || dt == TPU_DTYPE_BOOL)) return false;
  sl_walk_t w;
  sl_items_walk(u, &w, NULL);
  int64_t mn = INT64_MAX, mx = INT64_MIN;
  for (int64_t i = 0; i < u->n; ++i, sl_walk_next(&w)) {
    int64_t v = tpu_ku_load_i64(u->base + w.off[0], dt);
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  uint64_t span = (uint64_t)mx - (uint64_t)mn;
  if (span / (uint64_t)SL_WBITS >= SL_WINDOWS) return false;
  *out_min = mn;
  *out_windows = (int64_t)(span / (uint64_t)SL_WBITS) + 1;
  return true;
}

static inline int64_t sl_window_lo(int64_t mn, int64_t w) {
  return (int64_t)((uint64_t)mn + (uint64_t)w * (uint64_t)SL_WBITS);
}

/* Marks the values in [lo, lo + SL_WBITS); returns how many distinct. */
static int64_t sl_int_fill(const sl_u_t* u, int64_t lo, uint64_t* bits) {
  memset(bits, 0, (size_t)(SL_WBITS / 8));
  sl_walk_t w;
  sl_items_walk(u, &w, NULL);
  const int dt = u->self->dtype;
  for (int64_t i = 0; i < u->n; ++i, sl_walk_next(&w)) {
    uint64_t d = (uint64_t)tpu_ku_load_i64(u->base + w.off[0], dt) - (uint64_t)lo;
    if (d < (uint64_t)SL_WBITS) bits[d >> 6] |= (uint64_t)1 << (d & 63);
  }
  int64_t k = 0;
  for (int64_t i = 0; i < SL_WBITS / 64; ++i) k += __builtin_popcountll(bits[i]);
  return k;
}

static __attribute__((noinline)) int64_t sl_int_count(const sl_u_t* u, int64_t mn, int64_t windows) {
  uint64_t bits[SL_WBITS / 64];
  int64_t k = 0;
  for (int64_t w = 0; w < windows; ++w) k += sl_int_fill(u, sl_window_lo(mn, w), bits);
  return k;
}

/* Op variants and their argument positions. */
typedef enum { SL_U2, SL_U1, SL_UDIM, SL_UCONS, SL_UDIMCONS } sl_ukind_t;
typedef struct {
  sl_ukind_t kind;
  bool by_dim;      /* dim modes */
  bool consecutive;
  int32_t dim;
  bool inverse, counts; /* requested (always filled in dim modes) */
} sl_uargs_t;

static tpu_status_t sl_uargs(const tpu_k_call_t* call, sl_uargs_t* a) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  memset(a, 0, sizeof(*a));
  const char* op = call->op;
  int64_t dim = 0;
  if (strncmp(op, "aten::unique_dim_consecutive", 28) == 0) {
    a->kind = SL_UDIMCONS;
    dim = tpu_ku_int(call, 1, 0);
    a->by_dim = a->consecutive = true;
    a->inverse = tpu_ku_bool(call, 2, false);
    a->counts = tpu_ku_bool(call, 3, false);
  } else if (strncmp(op, "aten::unique_dim", 16) == 0) {
    a->kind = SL_UDIM;
    dim = tpu_ku_int(call, 1, 0);
    a->by_dim = true;
    a->inverse = tpu_ku_bool(call, 3, false);
    a->counts = tpu_ku_bool(call, 4, false);
  } else if (strncmp(op, "aten::unique_consecutive", 24) == 0) {
    a->kind = SL_UCONS;
    a->consecutive = true;
    a->inverse = tpu_ku_bool(call, 1, false);
    a->counts = tpu_ku_bool(call, 2, false);
    if (!tpu_ku_is_none(call, 3)) {
      a->by_dim = true;
      dim = tpu_ku_int(call, 3, 0);
    }
  } else if (strncmp(op, "aten::_unique2", 14) == 0) {
    a->kind = SL_U2;
    a->inverse = tpu_ku_bool(call, 2, false);
    a->counts = tpu_ku_bool(call, 3, false);
  } else {
    a->kind = SL_U1;
    a->inverse = tpu_ku_bool(call, 2, false);
  }
  if (a->by_dim) {
    if (self->ndim == 0)
      return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: Dimension specified as %lld but tensor has no dimensions", op,
                       (long long)dim);
    TPU_RETURN_IF_ERROR(tpu_ku_wrap_dim(call, dim, self->ndim, &a->dim));
  }
  return TPU_OK;
}

static int sl_num_outs(sl_ukind_t k) { return k == SL_U1 ? 2 : 3; }

static tpu_status_t sl_uniq_check(const tpu_k_call_t* call) {
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  if (!self) return TPU_KU_INVALID(call, "expected self");
  if (!sl_ecmp_for(self->dtype)) return tpu_ku_unsupported_dtype(call, self->dtype);
  sl_uargs_t a;
  TPU_RETURN_IF_ERROR(sl_uargs(call, &a));
  if (call->num_outputs < sl_num_outs(a.kind)) return TPU_KU_INVALID(call, "expected %d outputs", sl_num_outs(a.kind));
  if (a.by_dim && tpu_tensor_numel(self) == 0) {
    int zeros = 0;
    for (int32_t d = 0; d < self->ndim; ++d) zeros += self->sizes[d] == 0;
    if (zeros > 1) return TPU_KU_INVALID(call, "Number of zero sized dimensions is more than one, so unique cannot be applied");
    if (self->sizes[a.dim] != 0)
      return TPU_KU_INVALID(call, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  }
  if (!call->outputs) return TPU_OK;
  const tpu_tensor_t* vals = &call->outputs[0];
  if (vals->dtype != self->dtype) return TPU_KU_INVALID(call, "values output dtype differs from self");
  for (int i = 1; i < sl_num_outs(a.kind); ++i)
    if (sl_has_out(call, i) && call->outputs[i].dtype != TPU_DTYPE_I64)
      return TPU_KU_INVALID(call, "output %d must be int64", i);
  if (a.by_dim) {
    if (vals->ndim != self->ndim) return TPU_KU_INVALID(call, "values output must have self's rank");
    for (int32_t d = 0; d < self->ndim; ++d)
      if (d != a.dim && vals->sizes[d] != self->sizes[d]) return TPU_KU_INVALID(call, "values output shape mismatch");
  } else if (vals->ndim != 1) {
    return TPU_KU_INVALID(call, "values output must be 1-D");
  }
  return TPU_OK;
}

static void sl_uinit(sl_u_t* u, const tpu_tensor_t* self, const sl_uargs_t* a) {
  memset(u, 0, sizeof(*u));
  u->self = self;
  u->base = (const char*)self->data;
  u->ecmp = sl_ecmp_for(self->dtype);
  const int64_t es = (int64_t)sl_es(self);
  if (!a->by_dim) {
    u->n = tpu_tensor_numel(self);
    u->gnd = self->ndim;
    for (int32_t d = 0; d < self->ndim; ++d) {
      u->gsizes[d] = self->sizes[d];
      u->gst[d] = self->strides[d] * es;
    }
    return;
  }
  u->n = self->sizes[a->dim];
  u->gnd = 1;
  u->gsizes[0] = u->n;
  u->gst[0] = self->strides[a->dim] * es;
  for (int32_t d = 0; d < self->ndim; ++d) {
    if (d == a->dim || self->sizes[d] == 1) continue;
    u->ssz[u->sn] = self->sizes[d];
    u->sst[u->sn] = self->strides[d] * es;
    u->sn++;
  }
}

static int64_t sl_uclasses(const sl_u_t* u, const sl_uargs_t* a) {
  if (a->consecutive) return sl_count_runs(u);
  int64_t mn, windows;
  if (sl_int_windows(u, &mn, &windows)) return sl_int_count(u, mn, windows);
  return sl_count_classes(u);
}

static tpu_status_t sl_uniq_shape(const tpu_k_call_t* call, tpu_tensor_t* out_shapes) {
  TPU_RETURN_IF_ERROR(sl_uniq_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  sl_uargs_t a;
  TPU_RETURN_IF_ERROR(sl_uargs(call, &a));
  sl_u_t u;
  sl_uinit(&u, self, &a);
  int64_t k = sl_uclasses(&u, &a);
  if (a.by_dim) {
    sl_shape_like(&out_shapes[0], self->dtype, self);
    out_shapes[0].sizes[a.dim] = k;
    sl_shape1(&out_shapes[1], TPU_DTYPE_I64, u.n);
    sl_shape1(&out_shapes[2], TPU_DTYPE_I64, k);
    return TPU_OK;
  }
  sl_shape1(&out_shapes[0], self->dtype, k);
  if (a.inverse) {
    sl_shape_like(&out_shapes[1], TPU_DTYPE_I64, self);
  } else {
    sl_shape1(&out_shapes[1], TPU_DTYPE_I64, 0);
  }
  if (sl_num_outs(a.kind) > 2) sl_shape1(&out_shapes[2], TPU_DTYPE_I64, a.counts ? k : 0);
  return TPU_OK;
}

typedef struct {
  const sl_u_t* u;
  const tpu_tensor_t* vals;
  int64_t vstride; /* bytes per class along the values' class dim */
  int64_t ssz[TPU_MAX_DIMS], vst[TPU_MAX_DIMS]; /* values' slice layout */
  int32_t vn;
  char* inv;       /* NULL: not wanted */
  int64_t inv_st[TPU_MAX_DIMS]; /* bytes, per item-grid dim */
  char* cnt;       /* NULL: not wanted */
  int64_t cnt_st;
} sl_uout_t;

/* values[k] <- item at byte offset `off` */
static void sl_put_value(const sl_uout_t* o, int64_t k, int64_t off) {
  const sl_u_t* u = o->u;
  const size_t es = sl_es(u->self);
  const char* src = u->base + off;
  char* dst = (char*)o->vals->data + k * o->vstride;
  if (u->sn == 0) {
    memcpy(dst, src, es);
    return;
  }
  int64_t idx[TPU_MAX_DIMS];
  memset(idx, 0, sizeof(idx));
  int64_t so = 0, dof = 0;
  const int32_t in = u->sn - 1;
  for (;;) {
    for (int64_t j = 0; j < u->ssz[in]; ++j) memcpy(dst + dof + j * o->vst[in], src + so + j * u->sst[in], es);
    int32_t d = in - 1;
    for (; d >= 0; --d) {
      so += u->sst[d];
      dof += o->vst[d];
      if (++idx[d] < u->ssz[d]) break;
      so -= idx[d] * u->sst[d];
      dof -= idx[d] * o->vst[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

/* Integer items by bitmap windows: values ascending, then inverse/counts by
 * binary search in the values output. */
static __attribute__((noinline)) tpu_status_t sl_int_emit(const tpu_k_call_t* call, const sl_u_t* u,
                                                         const sl_uout_t* o, int64_t K, int64_t mn, int64_t windows) {
  uint64_t bits[SL_WBITS / 64];
  const int dt = u->self->dtype;
  char* vals = (char*)o->vals->data;
  int64_t g = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t lo = sl_window_lo(mn, w);
    sl_int_fill(u, lo, bits);
    for (int64_t i = 0; i < SL_WBITS / 64; ++i) {
      uint64_t word = bits[i];
      while (word) {
        int b = __builtin_ctzll(word);
        word &= word - 1;
        if (g >= K) return TPU_KU_INVALID(call, "values output has %lld classes, too few", (long long)K);
        tpu_ku_store_i64(vals + g * o->vstride, dt, (int64_t)((uint64_t)lo + (uint64_t)(i * 64 + b)));
        ++g;
      }
    }
  }
  if (g != K) return TPU_KU_INVALID(call, "values output has %lld classes, expected %lld", (long long)K, (long long)g);
  if (!o->inv && !o->cnt) return TPU_OK;
  sl_walk_t w;
  sl_items_walk(u, &w, o->inv ? o->inv_st : NULL);
  for (int64_t i = 0; i < u->n; ++i, sl_walk_next(&w)) {
    const int64_t v = tpu_ku_load_i64(u->base + w.off[0], dt);
    int64_t lo = 0, hi = K;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (tpu_ku_load_i64(vals + mid * o->vstride, dt) < v) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (o->inv) *(int64_t*)(o->inv + w.off[1]) = lo;
    if (o->cnt) *(int64_t*)(o->cnt + lo * o->cnt_st) += 1;
  }
  return TPU_OK;
}

/* Sorted classes by batches (see the file comment): values, then per batch
 * inverse/counts by binary search among the batch's representatives. */
static __attribute__((noinline)) tpu_status_t sl_sorted_emit(const tpu_k_call_t* call, const sl_u_t* up,
                                                            const sl_uout_t* op, int64_t K) {
  const sl_u_t u = *up;
  const sl_uout_t o = *op;
  sl_rep_t r[2 * SL_CAP];
  sl_rep_t after;
  bool have = false;
  int64_t g0 = 0;
  for (;;) {
    int64_t m = sl_batch(&u, have ? &after : NULL, r);
    if (g0 + m > K) return TPU_KU_INVALID(call, "values output has %lld classes, too few", (long long)K);
    for (int64_t j = 0; j < m; ++j) sl_put_value(&o, g0 + j, r[j].off);
    if ((o.inv || o.cnt) && m > 0) {
      const bool last = m < SL_CAP;
      sl_walk_t w;
      sl_items_walk(&u, &w, o.inv ? o.inv_st : NULL);
      for (int64_t i = 0; i < u.n; ++i, sl_walk_next(&w)) {
        sl_rep_t x = {i, w.off[0]};
        if (have && sl_cmp(&u, &x, &after) <= 0) continue;
        if (!last && sl_cmp(&u, &x, &r[m - 1]) > 0) continue;
        int64_t pos = sl_find(&u, r, m, &x);
        if (pos < 0) return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: item %lld has no class", call->op, (long long)i);
        if (o.inv) *(int64_t*)(o.inv + w.off[1]) = g0 + pos;
        if (o.cnt) *(int64_t*)(o.cnt + (g0 + pos) * o.cnt_st) += 1;
      }
    }
    g0 += m;
    if (m < SL_CAP) break;
    after = r[m - 1];
    have = true;
  }
  if (g0 != K) return TPU_KU_INVALID(call, "values output has %lld classes, expected %lld", (long long)K, (long long)g0);
  return TPU_OK;
}

static tpu_status_t sl_uniq_run(const tpu_k_call_t* call) {
  TPU_RETURN_IF_ERROR(sl_uniq_check(call));
  const tpu_tensor_t* self = tpu_ku_tensor(call, 0);
  sl_uargs_t a;
  TPU_RETURN_IF_ERROR(sl_uargs(call, &a));
  sl_u_t u;
  sl_uinit(&u, self, &a);
  const tpu_tensor_t* vals = &call->outputs[0];
  const int64_t es = (int64_t)sl_es(self);
  sl_uout_t o;
  memset(&o, 0, sizeof(o));
  o.u = &u;
  o.vals = vals;
  int64_t K;
  if (a.by_dim) {
    K = vals->sizes[a.dim];
    o.vstride = vals->strides[a.dim] * es;
    for (int32_t d = 0; d < self->ndim; ++d) {
      if (d == a.dim || self->sizes[d] == 1) continue;
      o.vst[o.vn++] = vals->strides[d] * es;
    }
  } else {
    K = vals->sizes[0];
    o.vstride = vals->strides[0] * es;
  }
  /* inverse: item-grid shaped; counts: [K] */
  const bool want_inv = a.by_dim || a.inverse, want_cnt = a.by_dim || a.counts;
  if (want_inv && sl_has_out(call, 1)) {
    const tpu_tensor_t* inv = &call->outputs[1];
    if (tpu_tensor_numel(inv) != u.n || (a.by_dim ? inv->ndim != 1 : inv->ndim != self->ndim))
      return TPU_KU_INVALID(call, "inverse output shape mismatch");
    for (int32_t d = 0; d < inv->ndim; ++d)
      if (inv->sizes[d] != u.gsizes[d]) return TPU_KU_INVALID(call, "inverse output shape mismatch");
    o.inv = (char*)inv->data;
    for (int32_t d = 0; d < inv->ndim; ++d) o.inv_st[d] = inv->strides[d] * 8;
  }
  if (want_cnt && sl_num_outs(a.kind) > 2 && sl_has_out(call, 2)) {
    const tpu_tensor_t* cnt = &call->outputs[2];
    if (cnt->ndim != 1 || cnt->sizes[0] != K) return TPU_KU_INVALID(call, "counts output shape mismatch");
    o.cnt = (char*)cnt->data;
    o.cnt_st = cnt->strides[0] * 8;
    for (int64_t k = 0; k < K; ++k) *(int64_t*)(o.cnt + k * o.cnt_st) = 0;
  }
  if (a.consecutive) {
    if (u.n == 0) return K == 0 ? TPU_OK : TPU_KU_INVALID(call, "values output has %lld classes, expected 0", (long long)K);
    sl_walk_t w;
    sl_items_walk(&u, &w, o.inv ? o.inv_st : NULL);
    sl_rep_t prev = {0, 0};
    int64_t k = -1;
    for (int64_t i = 0; i < u.n; ++i, sl_walk_next(&w)) {
      sl_rep_t x = {i, w.off[0]};
      if (i == 0 || sl_cmp(&u, &prev, &x) != 0) {
        if (++k >= K) return TPU_KU_INVALID(call, "values output has %lld classes, too few", (long long)K);
        sl_put_value(&o, k, x.off);
      }
      if (o.inv) *(int64_t*)(o.inv + w.off[1]) = k;
      if (o.cnt) *(int64_t*)(o.cnt + k * o.cnt_st) += 1;
      prev = x;
    }
    if (k + 1 != K) return TPU_KU_INVALID(call, "values output has %lld classes, expected %lld", (long long)K, (long long)(k + 1));
    return TPU_OK;
  }

  int64_t mn, windows;
  if (sl_int_windows(&u, &mn, &windows)) return sl_int_emit(call, &u, &o, K, mn, windows);
  return sl_sorted_emit(call, &u, &o, K);
}

const tpu_k_entry_t tpu_k_select_entries[] = {
    {"aten::nonzero", sl_nonzero_run, sl_nonzero_check, 0, sl_nonzero_shape},
    {"aten::nonzero.out", sl_nonzero_run, sl_nonzero_check, 0, sl_nonzero_shape},
    {"aten::nonzero_static", sl_nonzero_run, sl_nonzero_check, 0, NULL},
    {"aten::nonzero_static.out", sl_nonzero_run, sl_nonzero_check, 0, NULL},
    {"aten::masked_select", sl_msel_run, sl_msel_check, 0, sl_msel_shape},
    {"aten::masked_select.out", sl_msel_run, sl_msel_check, 0, sl_msel_shape},
    {"aten::masked_scatter_", sl_mscat_run, sl_mscat_check, 0, NULL},
    {"aten::masked_scatter", sl_mscat_run, sl_mscat_check, 0, NULL},
    {"aten::masked_scatter.out", sl_mscat_run, sl_mscat_check, 0, NULL},
    {"aten::bincount", sl_binc_run, sl_binc_check, 0, sl_binc_shape},
    {"aten::bincount.out", sl_binc_run, sl_binc_check, 0, sl_binc_shape},
    {"aten::_unique2", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::_unique2.out", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::_unique", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::_unique.out", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_dim", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_dim.out", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_consecutive", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_consecutive.out", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_dim_consecutive", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
    {"aten::unique_dim_consecutive.out", sl_uniq_run, sl_uniq_check, 0, sl_uniq_shape},
};
const size_t tpu_k_select_count = sizeof(tpu_k_select_entries) / sizeof(tpu_k_select_entries[0]);
