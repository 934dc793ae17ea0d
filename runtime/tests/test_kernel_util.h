/* Shared helpers for the kernel tests (test_k_*.c): tensor descriptors over
 * malloc'd or caller-owned buffers, element access, kernel argument values,
 * running an entry through check() + run(), a xorshift generator and a
 * formatted CHECK. Builds on test_util.h; each test includes this once. */
#ifndef TPU_TESTS_TEST_KERNEL_UTIL_H_
#define TPU_TESTS_TEST_KERNEL_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* ---- random numbers ---------------------------------------------------------- */

/* xorshift64: advances *s and returns the new state. */
static inline uint64_t tku_xorshift(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
/* Uniform in [-1, 1). */
static inline double tku_urand(uint64_t* s) {
  return (double)(tku_xorshift(s) >> 11) / 4503599627370496.0 - 1.0;
}

/* ---- tensor descriptors -------------------------------------------------------- */

/* A descriptor over caller-owned `data`; `strides` NULL means contiguous. */
static inline tpu_tensor_t T_(void* data, int dtype, int ndim, const int64_t* sizes,
                              const int64_t* strides) {
  tpu_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = strides ? strides[d] : s;
    s *= sizes[d];
  }
  return t;
}
static inline tpu_tensor_t T1(void* data, int dtype, int64_t n) { return T_(data, dtype, 1, &n, NULL); }
static inline tpu_tensor_t T0(void* data, int dtype) { return T_(data, dtype, 0, NULL, NULL); }

/* A tensor over its own zeroed storage. */
typedef struct {
  tpu_tensor_t t;
  void* buf;
} tt_t;

/* `perm` (optional) is the memory order of the dims, outermost first (perm =
 * {1,0} makes a transposed view); `gap` > 1 spreads the innermost memory dim;
 * `pad` extra bytes follow the storage. */
static inline tt_t tku_alloc(int dtype, int ndim, const int64_t* sizes, const int* perm, int64_t gap,
                             size_t pad) {
  tt_t r;
  memset(&r, 0, sizeof(r));
  r.t.dtype = dtype;
  r.t.ndim = ndim;
  int64_t st = gap;
  for (int i = ndim - 1; i >= 0; --i) {
    int d = perm ? perm[i] : i;
    r.t.strides[d] = st;
    st *= sizes[d] > 0 ? sizes[d] : 1;
  }
  for (int d = 0; d < ndim; ++d) r.t.sizes[d] = sizes[d];
  r.buf = calloc(1, (size_t)st * tpu_dtype_size(dtype) + pad);
  r.t.data = r.buf;
  return r;
}
static inline void fr(tt_t* t) {
  free(t->buf);
  t->buf = NULL;
}

/* ---- element access ------------------------------------------------------------ */

static inline void unravel(const tpu_tensor_t* t, int64_t i, int64_t* idx) {
  for (int d = t->ndim - 1; d >= 0; --d) {
    idx[d] = i % t->sizes[d];
    i /= t->sizes[d];
  }
}
static inline char* ep(const tpu_tensor_t* t, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; ++d) off += idx[d] * t->strides[d];
  return (char*)t->data + off * (int64_t)tpu_dtype_size(t->dtype);
}
static inline double get(const tpu_tensor_t* t, const int64_t* idx) { return tpu_ku_load_f64(ep(t, idx), t->dtype); }
static inline void set(const tpu_tensor_t* t, const int64_t* idx, double v) { tpu_ku_store_f64(ep(t, idx), t->dtype, v); }
/* By row-major flat index. */
static inline double getf(const tpu_tensor_t* t, int64_t i) {
  int64_t idx[TPU_MAX_DIMS];
  unravel(t, i, idx);
  return get(t, idx);
}
static inline void setf(const tpu_tensor_t* t, int64_t i, double v) {
  int64_t idx[TPU_MAX_DIMS];
  unravel(t, i, idx);
  set(t, idx, v);
}
static inline int64_t geti(const tpu_tensor_t* t, int64_t i) {
  int64_t idx[TPU_MAX_DIMS];
  unravel(t, i, idx);
  return tpu_ku_load_i64(ep(t, idx), t->dtype);
}

/* Fills with urand() * scale from `rng` (rounded as floor(v * 5) if `ints`),
 * in row-major order. */
static inline void tku_fill(tt_t* x, uint64_t* rng, double scale, bool ints) {
  int64_t n = tpu_tensor_numel(&x->t);
  for (int64_t i = 0; i < n; ++i) {
    double v = tku_urand(rng) * scale;
    if (ints) v = floor(v * 5.0);
    setf(&x->t, i, v);
  }
}

/* |got - want| <= atol + rtol * |want|; NaN matches NaN, inf matches itself. */
static inline bool close_f(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- argument values ----------------------------------------------------------- */

static inline tpu_k_value_t tku_value(int kind) {
  tpu_k_value_t v;
  memset(&v, 0, sizeof(v));
  v.kind = kind;
  return v;
}
static inline tpu_k_value_t vt(const tpu_tensor_t* t) { tpu_k_value_t v = tku_value(TPU_K_TENSOR); v.v.tensor = t; return v; }
static inline tpu_k_value_t vi(int64_t i) { tpu_k_value_t v = tku_value(TPU_K_INT); v.v.i = i; return v; }
static inline tpu_k_value_t vd(double d) { tpu_k_value_t v = tku_value(TPU_K_DOUBLE); v.v.d = d; return v; }
static inline tpu_k_value_t vb(bool b) { tpu_k_value_t v = tku_value(TPU_K_BOOL); v.v.b = b; return v; }
static inline tpu_k_value_t vs(const char* s) { tpu_k_value_t v = tku_value(TPU_K_STRING); v.v.s = s; return v; }
static inline tpu_k_value_t vn(void) { return tku_value(TPU_K_NONE); }
static inline tpu_k_value_t vdt(int dt) { tpu_k_value_t v = tku_value(TPU_K_DTYPE); v.v.dtype = dt; return v; }
static inline tpu_k_value_t vints(const int64_t* d, int64_t n) {
  tpu_k_value_t v = tku_value(TPU_K_INTS);
  v.v.ints.data = d;
  v.v.ints.len = n;
  return v;
}
static inline tpu_k_value_t vts(const tpu_tensor_t* d, int64_t n) {
  tpu_k_value_t v = tku_value(TPU_K_TENSORS);
  v.v.tensors.data = d;
  v.v.tensors.len = n;
  return v;
}

/* ---- running an entry ------------------------------------------------------------ */

/* The pool call_op() and mkcall() use; NULL runs single-threaded. */
static tpu_threadpool_t* g_pool;

static inline tpu_k_call_t tku_mkcall(const char* name, int nargs, const tpu_k_value_t* args, int nout,
                                      const tpu_tensor_t* outs, tpu_threadpool_t* pool) {
  tpu_k_call_t c;
  memset(&c, 0, sizeof(c));
  c.op = name;
  c.num_args = nargs;
  c.args = args;
  c.num_outputs = nout;
  c.outputs = outs;
  c.pool = pool;
  return c;
}
static inline tpu_k_call_t mkcall(const char* name, int nargs, const tpu_k_value_t* args, int nout,
                                  const tpu_tensor_t* outs) {
  return tku_mkcall(name, nargs, args, nout, outs, g_pool);
}

/* A kernel test's main() starts with tku_start(threads): g_pool with that
 * many workers (false, after saying why, if it cannot be made), and ends
 * with `return tku_finish();`: the pool destroyed, the report's exit code. */
static inline bool tku_start(int threads) {
  tpu_status_t s = tpu_threadpool_create(threads, &g_pool);
  if (s == TPU_OK) return true;
  printf("pool: %s\n", tpu_status_message(s));
  tpu_status_free(s);
  return false;
}
static inline int tku_finish(void) {
  tpu_threadpool_destroy(g_pool);
  g_pool = NULL;
  return TEST_REPORT();
}

/* Looks the op up, runs check() then run(); `seed`/`offset` feed random ops. */
static inline tpu_status_t tku_call(const char* name, int nargs, const tpu_k_value_t* args, int nout,
                                    const tpu_tensor_t* outs, tpu_threadpool_t* pool, uint64_t seed,
                                    uint64_t offset) {
  const tpu_k_entry_t* e = tpu_k_lookup(name);
  if (!e) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "no entry %s", name);
  tpu_k_call_t c = tku_mkcall(name, nargs, args, nout, outs, pool);
  c.rng_seed = seed;
  c.rng_offset = offset;
  if (e->check) TPU_RETURN_IF_ERROR(e->check(&c));
  return e->run(&c);
}
static inline tpu_status_t call_op(const char* name, int nargs, const tpu_k_value_t* args, int nout,
                                   const tpu_tensor_t* outs) {
  return tku_call(name, nargs, args, nout, outs, g_pool, 0, 0);
}
/* One output, an explicit pool. */
static inline tpu_status_t call_op_pool(const char* name, const tpu_k_value_t* args, int nargs,
                                        const tpu_tensor_t* out, tpu_threadpool_t* pool) {
  return tku_call(name, nargs, args, 1, out, pool, 0, 0);
}
static inline tpu_status_t call_op1(const char* name, const tpu_k_value_t* args, int nargs,
                                    const tpu_tensor_t* out) {
  return call_op_pool(name, args, nargs, out, NULL);
}

/* True on TPU_OK; otherwise prints and frees the status. */
static inline bool ok(tpu_status_t s) {
  if (s == TPU_OK) return true;
  printf("  status: %s\n", tpu_status_message(s));
  tpu_status_free(s);
  return false;
}

/* Runs `op` on `nlead` leading arguments `lead` (polygamma's n; none: 0,
 * NULL) and a 1-d tensor of dtype `dt` holding in[0..n), n <= 8, into an
 * output of that dtype. True when result i is want[i] exactly (NaN matches
 * NaN); otherwise prints what came out. */
static inline bool tku_unary_exact(const char* op, int nlead, const tpu_k_value_t* lead, int dt,
                                   const double* in, const double* want, int64_t n) {
  if (n > 8 || nlead > 3) return false;
  tt_t x = tku_alloc(dt, 1, &n, NULL, 1, 0), o = tku_alloc(dt, 1, &n, NULL, 1, 0);
  for (int64_t i = 0; i < n; ++i) setf(&x.t, i, in[i]);
  tpu_k_value_t args[4];
  for (int j = 0; j < nlead; ++j) args[j] = lead[j];
  args[nlead] = vt(&x.t);
  bool good = ok(call_op(op, nlead + 1, args, 1, &o.t));
  for (int64_t i = 0; good && i < n; ++i) {
    double got = getf(&o.t, i);
    if (!(got == want[i] || (isnan(got) && isnan(want[i])))) {
      printf("  %s %s [%lld]: got %.17g, want %.17g\n", op, tpu_dtype_name(dt), (long long)i, got, want[i]);
      good = false;
    }
  }
  fr(&x);
  fr(&o);
  return good;
}

#endif /* TPU_TESTS_TEST_KERNEL_UTIL_H_ */
