/* Eager ops as StableHLO text over byte storages (see pjrt_lower.h). */
#define _GNU_SOURCE
#include "drivers/pjrt/pjrt_lower.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ops ---- */
typedef enum {
  L_ADD, L_SUB, L_MUL, L_DIV, L_MAX, L_MIN,           /* binary arithmetic */
  L_NEG, L_EXP, L_LOG, L_SQRT, L_RSQRT, L_SIN, L_COS, /* unary */
  L_TANH, L_ABS, L_SIGMOID, L_RELU,
  L_MM,
  L_EQ, L_NE, L_LT, L_LE, L_GT, L_GE, /* comparisons */
  L_WHERE, L_POW, L_SUM, L_MEAN,
} lop_t;

typedef enum {
  F_ARITH,  /* self, other (Tensor or Scalar)[, alpha] */
  F_UNARY,  /* self */
  F_MM,     /* self, mat2 */
  F_CMP,    /* self, other (Tensor or Scalar): computed in the inputs' type */
  F_WHERE,  /* condition, self, other */
  F_POW,    /* self, exponent Scalar */
  F_REDUCE, /* self, dim[], keepdim, dtype */
} lfamily_t;

typedef struct {
  const char* base; /* "add" */
  lop_t op;
  lfamily_t family;
  const char* overloads; /* accepted suffixes after base, '|'-separated */
} lspec_t;

#define ARITH_T "|.Tensor|.out|_.Tensor"
#define ARITH_TS ARITH_T "|.Scalar|_.Scalar|.Scalar_out"
#define UNARY_O "||.out|_"
#define CMP_O "|.Tensor|.Scalar|.Tensor_out|.Scalar_out|_.Tensor|_.Scalar"

static const lspec_t kSpecs[] = {
    {"add", L_ADD, F_ARITH, ARITH_TS},     {"sub", L_SUB, F_ARITH, ARITH_TS},
    {"mul", L_MUL, F_ARITH, ARITH_TS},     {"div", L_DIV, F_ARITH, ARITH_TS},
    {"maximum", L_MAX, F_ARITH, "||.out"}, {"minimum", L_MIN, F_ARITH, "||.out"},
    {"neg", L_NEG, F_UNARY, UNARY_O},      {"exp", L_EXP, F_UNARY, UNARY_O},
    {"log", L_LOG, F_UNARY, UNARY_O},      {"sqrt", L_SQRT, F_UNARY, UNARY_O},
    {"rsqrt", L_RSQRT, F_UNARY, UNARY_O},  {"sin", L_SIN, F_UNARY, UNARY_O},
    {"cos", L_COS, F_UNARY, UNARY_O},      {"tanh", L_TANH, F_UNARY, UNARY_O},
    {"abs", L_ABS, F_UNARY, UNARY_O},      {"sigmoid", L_SIGMOID, F_UNARY, UNARY_O},
    {"relu", L_RELU, F_UNARY, UNARY_O},    {"mm", L_MM, F_MM, "||.out"},
    {"eq", L_EQ, F_CMP, CMP_O},            {"ne", L_NE, F_CMP, CMP_O},
    {"lt", L_LT, F_CMP, CMP_O},            {"le", L_LE, F_CMP, CMP_O},
    {"gt", L_GT, F_CMP, CMP_O},            {"ge", L_GE, F_CMP, CMP_O},
    {"where", L_WHERE, F_WHERE, "|.self|.self_out"},
    {"pow", L_POW, F_POW, "|.Tensor_Scalar|.Tensor_Scalar_out|_.Scalar"},
    {"sum", L_SUM, F_REDUCE, "|.dim_IntList"}, {"mean", L_MEAN, F_REDUCE, "|.dim"},
};

static bool overload_in(const char* list, const char* rest) {
  size_t n = strlen(rest);
  for (const char* p = list; p;) {
    const char* bar = strchr(p + 1, '|');
    size_t len = bar ? (size_t)(bar - p - 1) : strlen(p + 1);
    if (*p == '|' && len == n && strncmp(p + 1, rest, n) == 0) return true;
    p = bar;
  }
  return false;
}

static const lspec_t* spec_of(const char* op) {
  if (strncmp(op, "aten::", 6) != 0) return NULL;
  const char* name = op + 6;
  for (size_t i = 0; i < sizeof(kSpecs) / sizeof(kSpecs[0]); i++) {
    const lspec_t* s = &kSpecs[i];
    size_t n = strlen(s->base);
    if (strncmp(name, s->base, n) == 0 && overload_in(s->overloads, name + n)) return s;
  }
  return NULL;
}

bool tpu_pjrt_lowerable(const char* op) { return op && spec_of(op) != NULL; }

/* ---- types ---- */
typedef struct {
  const char* ty;  /* StableHLO element type */
  size_t size;
  bool is_float;
} ltype_t;

static bool type_of(int32_t dtype, ltype_t* out) {
  switch (dtype) {
    case TPU_DTYPE_F32: *out = (ltype_t){"f32", 4, true}; return true;
    case TPU_DTYPE_F64: *out = (ltype_t){"f64", 8, true}; return true;
    case TPU_DTYPE_F16: *out = (ltype_t){"f16", 2, true}; return true;
    case TPU_DTYPE_BF16: *out = (ltype_t){"bf16", 2, true}; return true;
    case TPU_DTYPE_I64: *out = (ltype_t){"i64", 8, false}; return true;
    case TPU_DTYPE_I32: *out = (ltype_t){"i32", 4, false}; return true;
    case TPU_DTYPE_I16: *out = (ltype_t){"i16", 2, false}; return true;
    case TPU_DTYPE_I8: *out = (ltype_t){"i8", 1, false}; return true;
    case TPU_DTYPE_U8: *out = (ltype_t){"ui8", 1, false}; return true;
    case TPU_DTYPE_BOOL: *out = (ltype_t){"i1", 1, false}; return true;
    default: return false;
  }
}

/* ---- text building ---- */
typedef struct {
  char* s;
  size_t n, cap;
  bool oom;
  int next; /* SSA counter */
  const tpu_pjrt_storage_t* st;
  int* cur; /* per storage: the SSA id of its current value */
} sb_t;

static void emit(sb_t* b, const char* fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)w < b->cap - b->n) {
      b->n += (size_t)w;
      return;
    }
    size_t cap = (b->cap + (size_t)w + 1) * 2;
    char* s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* "AxBx" + elem, or just elem for rank 0, as a tensor type. */
static void shape_str(char* buf, size_t cap, int32_t ndim, const int64_t* sizes, const char* ty) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "tensor<");
  for (int32_t d = 0; d < ndim && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%" PRId64 "x", sizes[d]);
  if (n < cap) snprintf(buf + n, cap - n, "%s>", ty);
}

typedef struct {
  int id;                 /* SSA value %v<id> */
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  const char* ty;
} val_t;

static int fresh(sb_t* b) { return b->next++; }

static val_t reshaped(sb_t* b, val_t v, int32_t ndim, const int64_t* sizes) {
  char from[256], to[256];
  shape_str(from, sizeof(from), v.ndim, v.sizes, v.ty);
  shape_str(to, sizeof(to), ndim, sizes, v.ty);
  val_t r = {.id = fresh(b), .ndim = ndim, .ty = v.ty};
  memcpy(r.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d : (%s) -> %s\n", r.id, v.id, from, to);
  return r;
}

static val_t converted(sb_t* b, val_t v, const char* ty) {
  if (!strcmp(v.ty, ty)) return v;
  char from[256], to[256];
  shape_str(from, sizeof(from), v.ndim, v.sizes, v.ty);
  shape_str(to, sizeof(to), v.ndim, v.sizes, ty);
  val_t r = v;
  r.id = fresh(b);
  r.ty = ty;
  emit(b, "  %%v%d = stablehlo.convert %%v%d : (%s) -> %s\n", r.id, v.id, from, to);
  return r;
}

/* A constant of type `ty` broadcast to `like`'s shape. */
static val_t splat(sb_t* b, const val_t* like, const char* ty, double x) {
  char t[256], lit[64];
  shape_str(t, sizeof(t), like->ndim, like->sizes, ty);
  if (!strcmp(ty, "i1")) {
    snprintf(lit, sizeof(lit), "%s", x != 0 ? "true" : "false");
  } else if (ty[0] == 'f' || ty[0] == 'b') {
    if (isnan(x)) {
      snprintf(lit, sizeof(lit), "0x7FF8000000000000");
    } else if (isinf(x)) {
      snprintf(lit, sizeof(lit), "%s", x > 0 ? "0x7FF0000000000000" : "0xFFF0000000000000");
    } else {
      snprintf(lit, sizeof(lit), "%.17e", x);
    }
  } else {
    snprintf(lit, sizeof(lit), "%lld", (long long)x);
  }
  /* Hex literals are read as the type's bits: give NaN/Inf in f64 and convert. */
  bool hex = lit[0] == '0' && lit[1] == 'x';
  val_t r = *like;
  r.id = fresh(b);
  r.ty = ty;
  if (hex && strcmp(ty, "f64") != 0) {
    char t64[256];
    shape_str(t64, sizeof(t64), like->ndim, like->sizes, "f64");
    int c = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<%s> : %s\n", c, lit, t64);
    emit(b, "  %%v%d = stablehlo.convert %%v%d : (%s) -> %s\n", r.id, c, t64, t);
  } else {
    emit(b, "  %%v%d = stablehlo.constant dense<%s> : %s\n", r.id, lit, t);
  }
  return r;
}

/* Row-major dense (size-1 dims may have any stride). */
static bool is_dense(const tpu_tensor_t* t) {
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->sizes[d] == 0) return true;
    if (t->sizes[d] != 1 && t->strides[d] != expected) return false;
    expected *= t->sizes[d];
  }
  return true;
}

static int64_t span_of(const tpu_tensor_t* t) {
  int64_t span = 1;
  for (int32_t d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 0) return 0;
    span += (t->sizes[d] - 1) * t->strides[d];
  }
  return span;
}

/* i64 indices (into a flat array) of every element of view `t`, shape
 * sizes x 1. */
static int indices(sb_t* b, const tpu_tensor_t* t) {
  char ti[256], ti1[256];
  shape_str(ti, sizeof(ti), t->ndim, t->sizes, "i64");
  int64_t s1[TPU_MAX_DIMS + 1];
  memcpy(s1, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  s1[t->ndim] = 1;
  shape_str(ti1, sizeof(ti1), t->ndim + 1, s1, "i64");
  int acc = -1;
  for (int32_t d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 1 || t->strides[d] == 0) continue;
    int io = fresh(b), st = fresh(b), m = fresh(b);
    emit(b, "  %%v%d = stablehlo.iota dim = %d : %s\n", io, d, ti);
    emit(b, "  %%v%d = stablehlo.constant dense<%" PRId64 "> : %s\n", st, t->strides[d], ti);
    emit(b, "  %%v%d = stablehlo.multiply %%v%d, %%v%d : %s\n", m, io, st, ti);
    if (acc >= 0) {
      int s = fresh(b);
      emit(b, "  %%v%d = stablehlo.add %%v%d, %%v%d : %s\n", s, acc, m, ti);
      acc = s;
    } else {
      acc = m;
    }
  }
  if (acc < 0) {
    acc = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<0> : %s\n", acc, ti);
  }
  int r = fresh(b);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d : (%s) -> %s\n", r, acc, ti, ti1);
  return r;
}

/* What a gather from, or a scatter into, the flat span of a strided view
 * needs: the indices' SSA id and the types of span, indices and view. */
typedef struct {
  int idx;
  char flat[256], index[256], view[256];
} strided_t;

static void strided(sb_t* b, const tpu_tensor_t* t, const ltype_t* lt, int64_t span, strided_t* out) {
  out->idx = indices(b, t);
  int64_t s1[TPU_MAX_DIMS + 1];
  memcpy(s1, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  s1[t->ndim] = 1;
  shape_str(out->flat, sizeof(out->flat), 1, &span, lt->ty);
  shape_str(out->index, sizeof(out->index), t->ndim + 1, s1, "i64");
  shape_str(out->view, sizeof(out->view), t->ndim, t->sizes, lt->ty);
}

/* The span of `t` in its storage argument, as a flat typed array. */
static val_t read_span(sb_t* b, const tpu_tensor_t* t, const tpu_pjrt_loc_t* loc, const ltype_t* lt,
                       int64_t span) {
  int64_t nbytes = span * (int64_t)lt->size;
  if (span == 0 || loc->storage < 0) { /* no bytes (an empty view) */
    val_t r = {.id = fresh(b), .ndim = 1, .sizes = {0}, .ty = lt->ty};
    emit(b, "  %%v%d = stablehlo.constant dense<> : tensor<0x%s>\n", r.id, lt->ty);
    return r;
  }
  int sl = fresh(b);
  emit(b, "  %%v%d = stablehlo.slice %%v%d [%zu:%" PRId64 "] : (tensor<%zuxui8>) -> tensor<%" PRId64 "xui8>\n",
       sl, b->cur[loc->storage], loc->offset, (int64_t)loc->offset + nbytes, b->st[loc->storage].bytes, nbytes);
  val_t r = {.id = fresh(b), .ndim = 1, .sizes = {span}, .ty = lt->ty};
  if (!strcmp(lt->ty, "i1")) {
    int z = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<0> : tensor<%" PRId64 "xui8>\n", z, span);
    emit(b, "  %%v%d = stablehlo.compare NE, %%v%d, %%v%d : (tensor<%" PRId64 "xui8>, tensor<%" PRId64
            "xui8>) -> tensor<%" PRId64 "xi1>\n",
         r.id, sl, z, span, span, span);
  } else if (lt->size == 1) {
    emit(b, "  %%v%d = stablehlo.bitcast_convert %%v%d : (tensor<%" PRId64 "xui8>) -> tensor<%" PRId64 "x%s>\n",
         r.id, sl, span, span, lt->ty);
  } else {
    int rs = fresh(b);
    emit(b, "  %%v%d = stablehlo.reshape %%v%d : (tensor<%" PRId64 "xui8>) -> tensor<%" PRId64 "x%zuxui8>\n",
         rs, sl, nbytes, span, lt->size);
    emit(b, "  %%v%d = stablehlo.bitcast_convert %%v%d : (tensor<%" PRId64 "x%zuxui8>) -> tensor<%" PRId64 "x%s>\n",
         r.id, rs, span, lt->size, span, lt->ty);
  }
  return r;
}

/* The value of view `t` with its own sizes. */
static val_t read_view(sb_t* b, const tpu_tensor_t* t, const tpu_pjrt_loc_t* loc, const ltype_t* lt) {
  int64_t span = span_of(t);
  val_t flat = read_span(b, t, loc, lt, span);
  if (is_dense(t)) return reshaped(b, flat, t->ndim, t->sizes);
  strided_t g;
  strided(b, t, lt, span, &g);
  val_t r = {.id = fresh(b), .ndim = t->ndim, .ty = lt->ty};
  memcpy(r.sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  emit(b,
       "  %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<"
       "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = %d>, slice_sizes = "
       "array<i64: 1>, indices_are_sorted = false} : (%s, %s) -> %s\n",
       r.id, flat.id, g.idx, t->ndim, g.flat, g.index, g.view);
  return r;
}

/* `v` broadcast to `ndim`/`sizes` (PyTorch's trailing alignment). */
static val_t broadcast(sb_t* b, val_t v, int32_t ndim, const int64_t* sizes) {
  bool same = v.ndim == ndim;
  for (int32_t d = 0; same && d < ndim; d++) same = v.sizes[d] == sizes[d];
  if (same) return v;
  char from[256], to[256], dims[256];
  shape_str(from, sizeof(from), v.ndim, v.sizes, v.ty);
  shape_str(to, sizeof(to), ndim, sizes, v.ty);
  size_t n = 0;
  dims[0] = '\0';
  for (int32_t d = 0; d < v.ndim; d++)
    n += (size_t)snprintf(dims + n, sizeof(dims) - n, "%s%d", d ? ", " : "", ndim - v.ndim + d);
  val_t r = {.id = fresh(b), .ndim = ndim, .ty = v.ty};
  memcpy(r.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [%s] : (%s) -> %s\n", r.id, v.id, dims,
       from, to);
  return r;
}

static val_t binary(sb_t* b, const char* op, val_t x, val_t y) {
  char t[256];
  shape_str(t, sizeof(t), x.ndim, x.sizes, x.ty);
  val_t r = x;
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.%s %%v%d, %%v%d : %s\n", r.id, op, x.id, y.id, t);
  return r;
}

/* `x op y` with a result of element type `ty` ("compare LT," and the like). */
static val_t binary_to(sb_t* b, const char* op, val_t x, val_t y, const char* ty) {
  char tx[256], tr[256];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(tr, sizeof(tr), x.ndim, x.sizes, ty);
  val_t r = x;
  r.id = fresh(b);
  r.ty = ty;
  emit(b, "  %%v%d = stablehlo.%s %%v%d, %%v%d : (%s, %s) -> %s\n", r.id, op, x.id, y.id, tx, tx, tr);
  return r;
}

/* PyTorch's result type of two tensors (categories bool < integer < float;
 * within a category a 0-dim tensor does not widen a dimensioned one). */
static int category(int32_t dt) {
  if (dt == TPU_DTYPE_BOOL) return 0;
  return (dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) ? 2 : 1;
}

static int32_t wider(int32_t a, int32_t c) {
  if (a == c) return a;
  ltype_t ta, tc;
  type_of(a, &ta);
  type_of(c, &tc);
  if (category(a) == 2) {
    if (ta.size == tc.size) return TPU_DTYPE_F32; /* f16 with bf16 */
    return ta.size > tc.size ? a : c;
  }
  bool au = a == TPU_DTYPE_U8, cu = c == TPU_DTYPE_U8;
  if (au != cu) { /* uint8 with a signed type */
    int32_t other = au ? c : a;
    return other == TPU_DTYPE_I8 ? TPU_DTYPE_I16 : other;
  }
  return ta.size > tc.size ? a : c;
}

static const char* promote(const tpu_tensor_t* x, const tpu_tensor_t* y) {
  int32_t a = x->dtype, c = y->dtype, r;
  int ka = category(a), kc = category(c);
  if (ka != kc) {
    r = ka > kc ? a : c;
  } else if ((x->ndim == 0) != (y->ndim == 0)) {
    r = x->ndim == 0 ? c : a;
  } else {
    r = wider(a, c);
  }
  ltype_t t;
  type_of(r, &t);
  return t.ty;
}

/* Compute type of a tensor compared with a Python scalar. */
static const char* scalar_compute_type(const tpu_tensor_t* x, const tpu_k_value_t* s) {
  ltype_t t;
  type_of(x->dtype, &t);
  int k = category(x->dtype);
  int ks = s->kind == TPU_K_DOUBLE ? 2 : s->kind == TPU_K_INT ? 1 : 0;
  if (ks <= k) return t.ty;
  return ks == 2 ? "f32" : "i64";
}

/* Sum (or mean) of `x` over the call's dim list (none or empty: all dims). */
static val_t reduce_sum(sb_t* b, const tpu_k_call_t* call, val_t x, bool mean) {
  bool dims[TPU_MAX_DIMS] = {false};
  const tpu_k_value_t* dv = call->num_args > 1 ? &call->args[1] : NULL;
  bool all = !dv || dv->kind != TPU_K_INTS || dv->v.ints.len == 0;
  for (int64_t i = 0; !all && i < dv->v.ints.len; i++) {
    int64_t d = dv->v.ints.data[i];
    if (x.ndim == 0) continue;
    if (d < 0) d += x.ndim;
    if (d >= 0 && d < x.ndim) dims[d] = true;
  }
  char list[128] = "";
  size_t n = 0;
  int64_t count = 1;
  val_t r = {.id = fresh(b), .ndim = 0, .ty = x.ty};
  for (int32_t d = 0; d < x.ndim; d++) {
    if (all || dims[d]) {
      n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "", d);
      count *= x.sizes[d];
    } else {
      r.sizes[r.ndim++] = x.sizes[d];
    }
  }
  char tx[256], tr[256];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(tr, sizeof(tr), r.ndim, r.sizes, x.ty);
  int z = fresh(b);
  const char* zero = !strcmp(x.ty, "i1") ? "false" : (x.ty[0] == 'f' || x.ty[0] == 'b') ? "0.0" : "0";
  emit(b, "  %%v%d = stablehlo.constant dense<%s> : tensor<%s>\n", z, zero, x.ty);
  emit(b, "  %%v%d = stablehlo.reduce(%%v%d init: %%v%d) applies stablehlo.add across dimensions = [%s] : "
          "(%s, tensor<%s>) -> %s\n",
       r.id, x.id, z, list, tx, x.ty, tr);
  if (mean) r = binary(b, "divide", r, splat(b, &r, r.ty, (double)count));
  return r;
}

static val_t unary(sb_t* b, const char* op, val_t x) {
  char t[256];
  shape_str(t, sizeof(t), x.ndim, x.sizes, x.ty);
  val_t r = x;
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.%s %%v%d : %s\n", r.id, op, x.id, t);
  return r;
}

static double scalar_of(const tpu_k_value_t* v) {
  switch (v->kind) {
    case TPU_K_INT: return (double)v->v.i;
    case TPU_K_DOUBLE: return v->v.d;
    case TPU_K_BOOL: return v->v.b ? 1.0 : 0.0;
    default: return 1.0;
  }
}

/* Writes `res` (the output's value, output dtype) into the output storage,
 * which gets a new current value. */
static void write_out(sb_t* b, val_t res, const tpu_tensor_t* o, const tpu_pjrt_loc_t* loc,
                     const ltype_t* lt) {
  int64_t numel = 1;
  for (int32_t d = 0; d < o->ndim; d++) numel *= o->sizes[d];
  val_t flat;
  int64_t base_off = (int64_t)loc->offset;
  if (is_dense(o)) {
    flat = reshaped(b, res, 1, &numel);
  } else {
    /* Scatter into the output's span, read back first. */
    int64_t span = span_of(o);
    val_t cur = read_span(b, o, loc, lt, span);
    strided_t g;
    strided(b, o, lt, span, &g);
    char scal[64];
    snprintf(scal, sizeof(scal), "tensor<%s>", lt->ty);
    flat = cur;
    flat.id = fresh(b);
    emit(b,
         "  %%v%d = \"stablehlo.scatter\"(%%v%d, %%v%d, %%v%d) ({\n"
         "  ^bb0(%%old: %s, %%new: %s):\n"
         "    stablehlo.return %%new : %s\n"
         "  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
         "scatter_dims_to_operand_dims = [0], index_vector_dim = %d>, indices_are_sorted = false, "
         "unique_indices = false} : (%s, %s, %s) -> %s\n",
         flat.id, cur.id, g.idx, res.id, scal, scal, scal, o->ndim, g.flat, g.index, g.view, g.flat);
    numel = span;
  }
  /* Back to bytes. */
  int64_t nbytes = numel * (int64_t)lt->size;
  int bytes = fresh(b);
  if (!strcmp(lt->ty, "i1")) {
    emit(b, "  %%v%d = stablehlo.convert %%v%d : (tensor<%" PRId64 "xi1>) -> tensor<%" PRId64 "xui8>\n",
         bytes, flat.id, numel, numel);
  } else if (lt->size == 1) {
    emit(b, "  %%v%d = stablehlo.bitcast_convert %%v%d : (tensor<%" PRId64 "x%s>) -> tensor<%" PRId64 "xui8>\n",
         bytes, flat.id, numel, lt->ty, numel);
  } else {
    int bc = fresh(b);
    emit(b, "  %%v%d = stablehlo.bitcast_convert %%v%d : (tensor<%" PRId64 "x%s>) -> tensor<%" PRId64 "x%zuxui8>\n",
         bc, flat.id, numel, lt->ty, numel, lt->size);
    emit(b, "  %%v%d = stablehlo.reshape %%v%d : (tensor<%" PRId64 "x%zuxui8>) -> tensor<%" PRId64 "xui8>\n",
         bytes, bc, numel, lt->size, nbytes);
  }
  int off = fresh(b), out = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<%" PRId64 "> : tensor<i64>\n", off, base_off);
  size_t sbytes = b->st[loc->storage].bytes;
  emit(b, "  %%v%d = stablehlo.dynamic_update_slice %%v%d, %%v%d, %%v%d : (tensor<%zuxui8>, tensor<%" PRId64
          "xui8>, tensor<i64>) -> tensor<%zuxui8>\n",
       out, b->cur[loc->storage], bytes, off, sbytes, nbytes, sbytes);
  b->cur[loc->storage] = out;
}

static tpu_status_t lower_node(sb_t* b, const tpu_k_call_t* call, const tpu_pjrt_loc_t* locs) {
  const lspec_t* spec = spec_of(call->op);
  if (!spec || call->num_outputs != 1 || !call->outputs)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no StableHLO lowering", call->op);
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  if (!type_of(o->dtype, &ot))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %d has no StableHLO type", call->op, o->dtype);
  /* Tensor arguments in schema order, each with its location. */
  const tpu_tensor_t* tens[4];
  const tpu_pjrt_loc_t* tlocs[4];
  const tpu_k_value_t* scalars[4];
  int nt = 0, ns = 0, li = 0;
  for (int32_t i = 0; i < call->num_args; i++) {
    const tpu_k_value_t* v = &call->args[i];
    if (v->kind == TPU_K_TENSOR) {
      if (nt == 4) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: too many tensors", call->op);
      tens[nt] = v->v.tensor;
      tlocs[nt++] = &locs[li++];
    } else if (v->kind == TPU_K_TENSORS) {
      li += (int)v->v.tensors.len; /* no op below takes a list */
    } else if (v->kind == TPU_K_INT || v->kind == TPU_K_DOUBLE || v->kind == TPU_K_BOOL) {
      if (ns < 4) scalars[ns++] = v;
    }
  }
  const tpu_pjrt_loc_t* oloc = &locs[li];
  if (oloc->storage < 0) return TPU_OK; /* an empty output: nothing to write */
  /* Inputs are the first tensors (out= overloads list the output last). For
   * arithmetic and comparisons either operand may be a number: the .Scalar
   * overloads, and .Tensor ones given a wrapped number (the bridge passes
   * those as scalars), `self` included (rsub, 1 - x). */
  bool two_operands = spec->family == F_ARITH || spec->family == F_CMP;
  bool self_scalar = two_operands && call->num_args > 0 && call->args[0].kind != TPU_K_TENSOR;
  bool other_scalar = two_operands && call->num_args > 1 && call->args[1].kind != TPU_K_TENSOR;
  if (self_scalar && other_scalar)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no tensor operand", call->op);
  int nin = 1;
  if (spec->family == F_MM || (two_operands && !self_scalar && !other_scalar)) nin = 2;
  if (spec->family == F_WHERE) nin = 3;
  if (nt < nin) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  const tpu_k_value_t* number = self_scalar ? &call->args[0] : other_scalar ? &call->args[1] : NULL;
  ltype_t it[3];
  for (int k = 0; k < nin; k++) {
    if (!type_of(tens[k]->dtype, &it[k]))
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input dtype %d has no StableHLO type", call->op,
                       tens[k]->dtype);
  }


  /* Compute type: the output's (comparisons: the inputs' promoted type),
   * half types in float32 (PyTorch's opmath). */
  const char* ct = ot.ty;
  if (spec->family == F_CMP) {
    ct = number ? scalar_compute_type(tens[0], number) : promote(tens[0], tens[1]);
  }
  if (!strcmp(ct, "f16") || !strcmp(ct, "bf16")) ct = "f32";
  val_t in[3];
  for (int k = 0; k < nin; k++) {
    const char* want = spec->family == F_WHERE && k == 0 ? "i1" : ct;
    in[k] = read_view(b, tens[k], tlocs[k], &it[k]);
    if (!strcmp(want, "i1") && strcmp(in[k].ty, "i1") != 0) {
      in[k] = binary_to(b, "compare NE,", in[k], splat(b, &in[k], in[k].ty, 0.0), "i1");
    } else {
      in[k] = converted(b, in[k], want);
    }
    if (spec->family != F_MM && spec->family != F_REDUCE) in[k] = broadcast(b, in[k], o->ndim, o->sizes);
  }
  val_t r;
  switch (spec->family) {
    case F_MM: {
      char ta[256], tb[256], tr[256];
      shape_str(ta, sizeof(ta), in[0].ndim, in[0].sizes, ct);
      shape_str(tb, sizeof(tb), in[1].ndim, in[1].sizes, ct);
      shape_str(tr, sizeof(tr), o->ndim, o->sizes, ct);
      r = (val_t){.id = fresh(b), .ndim = o->ndim, .ty = ct};
      memcpy(r.sizes, o->sizes, sizeof(int64_t) * (size_t)o->ndim);
      emit(b, "  %%v%d = stablehlo.dot_general %%v%d, %%v%d, contracting_dims = [1] x [0] : (%s, %s) -> %s\n",
           r.id, in[0].id, in[1].id, ta, tb, tr);
      break;
    }
    case F_ARITH:
    case F_CMP: {
      val_t x = self_scalar ? splat(b, &in[0], ct, scalar_of(number)) : in[0];
      val_t y = other_scalar ? splat(b, &in[0], ct, scalar_of(number)) : self_scalar ? in[0] : in[1];
      if (spec->family == F_CMP) {
        static const char* kDir[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
        char op[32];
        snprintf(op, sizeof(op), "compare %s,", kDir[spec->op - L_EQ]);
        r = binary_to(b, op, x, y, "i1");
        break;
      }
      /* alpha: add/sub's third argument (self, other, alpha[, out]) */
      const tpu_k_value_t* av = call->num_args > 2 ? &call->args[2] : NULL;
      bool has_alpha = (spec->op == L_ADD || spec->op == L_SUB) && av &&
                       (av->kind == TPU_K_INT || av->kind == TPU_K_DOUBLE || av->kind == TPU_K_BOOL);
      double alpha = has_alpha ? scalar_of(av) : 1.0;
      if (alpha != 1.0) y = binary(b, "multiply", y, splat(b, &y, ct, alpha));
      static const char* kOps[] = {"add", "subtract", "multiply", "divide", "maximum", "minimum"};
      r = binary(b, kOps[spec->op], x, y);
      break;
    }
    case F_WHERE: {
      char tc[256], tv[256];
      shape_str(tc, sizeof(tc), o->ndim, o->sizes, "i1");
      shape_str(tv, sizeof(tv), o->ndim, o->sizes, ct);
      r = in[1];
      r.id = fresh(b);
      emit(b, "  %%v%d = stablehlo.select %%v%d, %%v%d, %%v%d : (%s, %s, %s) -> %s\n", r.id, in[0].id,
           in[1].id, in[2].id, tc, tv, tv, tv);
      break;
    }
    case F_POW:
      r = binary(b, "power", in[0], splat(b, &in[0], ct, ns > 0 ? scalar_of(scalars[0]) : 1.0));
      break;
    case F_REDUCE:
      r = reduce_sum(b, call, in[0], spec->op == L_MEAN);
      r = reshaped(b, r, o->ndim, o->sizes);
      break;
    default: {
      val_t x = in[0];
      switch (spec->op) {
        case L_NEG: r = unary(b, "negate", x); break;
        case L_EXP: r = unary(b, "exponential", x); break;
        case L_LOG: r = unary(b, "log", x); break;
        case L_SQRT: r = unary(b, "sqrt", x); break;
        case L_RSQRT: r = unary(b, "rsqrt", x); break;
        case L_SIN: r = unary(b, "sine", x); break;
        case L_COS: r = unary(b, "cosine", x); break;
        case L_TANH: r = unary(b, "tanh", x); break;
        case L_ABS: r = unary(b, "abs", x); break;
        case L_SIGMOID: r = unary(b, "logistic", x); break;
        default: r = binary(b, "maximum", x, splat(b, &x, ct, 0.0)); break; /* relu */
      }
    }
  }
  r = converted(b, r, ot.ty);
  write_out(b, r, o, oloc, &ot);
  return TPU_OK;
}

tpu_status_t tpu_pjrt_lower(const tpu_pjrt_storage_t* storages, int32_t num_storages,
                            const tpu_pjrt_node_t* nodes, int32_t num_nodes, char** out_text) {
  *out_text = NULL;
  int* cur = calloc((size_t)(num_storages > 0 ? num_storages : 1), sizeof(int));
  if (!cur) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "pjrt: cannot lower a program of %d storages", num_storages);
  sb_t b = {.st = storages, .cur = cur};
  int32_t nargs = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].arg >= 0) {
      cur[s] = storages[s].arg;
      nargs++;
    }
  }
  b.next = nargs;
  emit(&b, "func.func public @main(");
  for (int32_t a = 0; a < nargs; a++) {
    for (int32_t s = 0; s < num_storages; s++) {
      if (storages[s].arg == a) emit(&b, "%s%%v%d: tensor<%zuxui8>", a ? ", " : "", a, storages[s].bytes);
    }
  }
  emit(&b, ") -> (");
  int nres = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].result) emit(&b, "%stensor<%zuxui8>", nres++ ? ", " : "", storages[s].bytes);
  }
  emit(&b, ") {\n");
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].arg < 0) {
      cur[s] = fresh(&b);
      emit(&b, "  %%v%d = stablehlo.constant dense<0> : tensor<%zuxui8>\n", cur[s], storages[s].bytes);
    }
  }
  tpu_status_t st = TPU_OK;
  for (int32_t i = 0; i < num_nodes && !st; i++) st = lower_node(&b, nodes[i].call, nodes[i].locs);
  if (st) {
    free(cur);
    free(b.s);
    return st;
  }
  emit(&b, "  return");
  nres = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].result) emit(&b, "%s %%v%d", nres++ ? "," : "", cur[s]);
  }
  emit(&b, " :");
  nres = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].result) emit(&b, "%s tensor<%zuxui8>", nres++ ? "," : "", storages[s].bytes);
  }
  emit(&b, "\n}\n");
  free(cur);
  if (b.oom) {
    free(b.s);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "pjrt: cannot build the StableHLO program");
  }
  *out_text = b.s;
  return TPU_OK;
}
