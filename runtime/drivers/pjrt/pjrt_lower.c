/* Eager ops as StableHLO text over byte storages (see pjrt_lower.h). */
#define _GNU_SOURCE
#include "drivers/pjrt/pjrt_lower.h"

#define TPU_PJRT_LOWER_MAX_TENSORS 64

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ops ---- */
typedef enum {
  L_ADD, L_SUB, L_MUL, L_DIV, L_MAX, L_MIN,           /* binary arithmetic */
  L_BAND, L_BOR, L_BXOR, L_LAND, L_LOR, L_LXOR,
  L_REM, L_FMOD, L_ATAN2, L_FLOORDIV, L_POWT, L_SHL, L_SHR,
  L_DIVMODE, L_DIVTRUNC, /* div with rounding_mode, and its "trunc" */
  L_NEG, L_EXP, L_LOG, L_SQRT, L_RSQRT, L_SIN, L_COS, /* unary */
  L_TANH, L_ABS, L_SIGMOID, L_RELU,
  L_SILU, L_GELU, L_ERF, L_BNOT, L_LNOT, L_FLOOR, L_CEIL, L_ROUND, L_TRUNC, L_SIGN,
  L_RECIP, L_LOG1P, L_EXPM1, L_LOG2, L_EXP2, L_TAN, L_SQUARE,
  L_MM,
  L_EQ, L_NE, L_LT, L_LE, L_GT, L_GE, /* comparisons */
  L_WHERE, L_POW, L_SUM, L_MEAN,
  L_SOFTMAX, L_LOG_SOFTMAX, L_SOFTMAX_BWD, L_LOG_SOFTMAX_BWD,
  L_AMAX, L_AMIN, L_PROD, L_ANY, L_ALL, L_ARGMAX, L_ARGMIN,
  L_INDEX_SELECT, L_GATHER, L_SCATTER, L_SCATTER_ADD,
  L_FILL, L_COPY, L_ARANGE, L_TRIU, L_TRIL, L_CAT, L_CLAMP, L_CLAMP_MIN, L_CLAMP_MAX,
  L_MASKED_FILL, L_INDEX_PUT, L_MASKED_SCATTER, L_EMBEDDING_RENORM, L_BMM, L_ADDMM, L_ROPE, L_ROPE_BWD, L_SDPA_FWD, L_SDPA_BWD, L_CONV_FWD, L_CONV_BWD,
  L_MAX_DIM, L_MIN_DIM, L_SORT, L_TOPK, L_CUMSUM, L_CUMPROD, L_FLIP, L_ROLL, L_SCATTER_REDUCE, L_INDEX,
  L_RMS_NORM, L_SWIGLU, L_LAYER_NORM, L_GROUP_NORM, L_DROPOUT, L_UNIFORM, L_NORMAL, L_BERNOULLI,
} lop_t;

typedef enum {
  F_ARITH,  /* self, other (Tensor or Scalar)[, alpha] */
  F_UNARY,  /* self */
  F_MM,     /* self, mat2 */
  F_CMP,    /* self, other (Tensor or Scalar): computed in the inputs' type */
  F_WHERE,  /* condition, self, other */
  F_POW,    /* self, exponent Scalar */
  F_REDUCE, /* self, dim[], keepdim, dtype */
  F_SOFTMAX, /* self, dim, half_to_float (backward: grad, output, dim, dtype) */
  F_REDUCE2, /* max/min/prod/any/all, arg{max,min}, max.dim/min.dim (values, indices) */
  F_INDEX,   /* index_select, gather, scatter (reduce), index_put, index.Tensor, masked_scatter, embedding_renorm */
  F_MISC,    /* fill, copy, arange, triu/tril, cat, clamp, flip, roll */
  F_MM2,     /* bmm, addmm */
  F_ROPE,    /* tpu::rope(_backward): two outputs */
  F_SDPA,    /* tpu::sdpa_fwd / sdpa_bwd: several outputs */
  F_CONV,    /* tpu::conv_fwd / conv_bwd */
  F_SORT,    /* sort, topk: values and indices */
  F_SCAN,    /* cumsum, cumprod */
  F_FUSED,   /* tpu::rms_norm, tpu::swiglu (forward), native_layer_norm */
  F_RANDOM,  /* native_dropout, uniform_, normal_, bernoulli_.float: Philox from the node's (seed, offset) */
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

#define RED_O "||.out"
#define SHIFT_O "|.Tensor|.Tensor_Scalar|.Scalar_Tensor|.Tensor_out|.Tensor_Scalar_out|.Scalar_Tensor_out|_.Tensor|_.Tensor_Scalar"
#define TRI_O "||.out|_"

static const lspec_t kSpecs[] = {
    {"add", L_ADD, F_ARITH, ARITH_TS},     {"sub", L_SUB, F_ARITH, ARITH_TS},
    {"mul", L_MUL, F_ARITH, ARITH_TS},     {"div", L_DIV, F_ARITH, ARITH_TS},
    {"maximum", L_MAX, F_ARITH, "||.out"}, {"minimum", L_MIN, F_ARITH, "||.out"},
    {"bitwise_and", L_BAND, F_ARITH, ARITH_TS "|.Tensor_out"},
    {"bitwise_or", L_BOR, F_ARITH, ARITH_TS "|.Tensor_out"},
    {"bitwise_xor", L_BXOR, F_ARITH, ARITH_TS "|.Tensor_out"},
    {"logical_and", L_LAND, F_ARITH, UNARY_O}, {"logical_or", L_LOR, F_ARITH, UNARY_O},
    {"logical_xor", L_LXOR, F_ARITH, UNARY_O},
    {"remainder", L_REM, F_ARITH, "|.Tensor|.Scalar|.Tensor_out|.Scalar_out|_.Tensor|_.Scalar"},
    {"fmod", L_FMOD, F_ARITH, "|.Tensor|.Scalar|.Tensor_out|.Scalar_out|_.Tensor|_.Scalar"},
    {"atan2", L_ATAN2, F_ARITH, "||.out|_"},
    {"floor_divide", L_FLOORDIV, F_ARITH, "||.Scalar|.out|.Scalar_out|_.Tensor|_.Scalar"},
    {"pow", L_POWT, F_ARITH, "|.Tensor_Tensor|.Tensor_Tensor_out|_.Tensor|.Scalar|.Scalar_out"},
    {"div", L_DIVMODE, F_ARITH, "|.Tensor_mode|.Scalar_mode|.out_mode|.Scalar_mode_out|_.Tensor_mode|_.Scalar_mode"},
    {"bitwise_left_shift", L_SHL, F_ARITH, SHIFT_O}, {"bitwise_right_shift", L_SHR, F_ARITH, SHIFT_O},
    {"__lshift__", L_SHL, F_ARITH, "|.Tensor|.Scalar|.Tensor_out|.Scalar_out"},
    {"__rshift__", L_SHR, F_ARITH, "|.Tensor|.Scalar|.Tensor_out|.Scalar_out"},
    {"__ilshift__", L_SHL, F_ARITH, "|.Tensor|.Scalar"}, {"__irshift__", L_SHR, F_ARITH, "|.Tensor|.Scalar"},
    {"neg", L_NEG, F_UNARY, UNARY_O},      {"exp", L_EXP, F_UNARY, UNARY_O},
    {"log", L_LOG, F_UNARY, UNARY_O},      {"sqrt", L_SQRT, F_UNARY, UNARY_O},
    {"rsqrt", L_RSQRT, F_UNARY, UNARY_O},  {"sin", L_SIN, F_UNARY, UNARY_O},
    {"cos", L_COS, F_UNARY, UNARY_O},      {"tanh", L_TANH, F_UNARY, UNARY_O},
    {"abs", L_ABS, F_UNARY, UNARY_O},      {"sigmoid", L_SIGMOID, F_UNARY, UNARY_O},
    {"relu", L_RELU, F_UNARY, UNARY_O},    {"silu", L_SILU, F_UNARY, UNARY_O},
    {"gelu", L_GELU, F_UNARY, UNARY_O},    {"erf", L_ERF, F_UNARY, UNARY_O},
    {"bitwise_not", L_BNOT, F_UNARY, UNARY_O}, {"logical_not", L_LNOT, F_UNARY, UNARY_O},
    {"floor", L_FLOOR, F_UNARY, UNARY_O},  {"ceil", L_CEIL, F_UNARY, UNARY_O},
    {"round", L_ROUND, F_UNARY, UNARY_O},  {"trunc", L_TRUNC, F_UNARY, UNARY_O},
    {"sign", L_SIGN, F_UNARY, UNARY_O},    {"reciprocal", L_RECIP, F_UNARY, UNARY_O},
    {"log1p", L_LOG1P, F_UNARY, UNARY_O},  {"expm1", L_EXPM1, F_UNARY, UNARY_O},
    {"log2", L_LOG2, F_UNARY, UNARY_O},    {"exp2", L_EXP2, F_UNARY, UNARY_O},
    {"tan", L_TAN, F_UNARY, UNARY_O},      {"square", L_SQUARE, F_UNARY, UNARY_O},
    {"mm", L_MM, F_MM, "||.out"},
    {"eq", L_EQ, F_CMP, CMP_O},            {"ne", L_NE, F_CMP, CMP_O},
    {"lt", L_LT, F_CMP, CMP_O},            {"le", L_LE, F_CMP, CMP_O},
    {"gt", L_GT, F_CMP, CMP_O},            {"ge", L_GE, F_CMP, CMP_O},
    {"where", L_WHERE, F_WHERE, "|.self|.self_out"},
    {"pow", L_POW, F_POW, "|.Tensor_Scalar|.Tensor_Scalar_out|_.Scalar"},
    {"sum", L_SUM, F_REDUCE, "||.dim_IntList|.IntList_out|.out"}, {"mean", L_MEAN, F_REDUCE, "||.dim|.out"},
    {"_softmax", L_SOFTMAX, F_SOFTMAX, RED_O}, {"_log_softmax", L_LOG_SOFTMAX, F_SOFTMAX, RED_O},
    {"_softmax_backward_data", L_SOFTMAX_BWD, F_SOFTMAX, RED_O},
    {"_log_softmax_backward_data", L_LOG_SOFTMAX_BWD, F_SOFTMAX, RED_O},
    {"amax", L_AMAX, F_REDUCE2, RED_O},    {"amin", L_AMIN, F_REDUCE2, RED_O},
    {"max", L_AMAX, F_REDUCE2, "||.unary_out"}, {"min", L_AMIN, F_REDUCE2, "||.unary_out"},
    {"prod", L_PROD, F_REDUCE2, "||.out|.dim_int|.int_out"},
    {"any", L_ANY, F_REDUCE2, "||.dim|.dims|.out|.dims_out"},
    {"all", L_ALL, F_REDUCE2, "||.dim|.dims|.out|.dims_out"},
    {"argmax", L_ARGMAX, F_REDUCE2, RED_O}, {"argmin", L_ARGMIN, F_REDUCE2, RED_O},
    {"index_select", L_INDEX_SELECT, F_INDEX, RED_O}, {"gather", L_GATHER, F_INDEX, RED_O},
    {"scatter", L_SCATTER, F_INDEX, "|.value|.src|.value_out|.src_out|_.value|_.src"},
    {"scatter_add", L_SCATTER_ADD, F_INDEX, "||.out|_"},
    {"scatter", L_SCATTER_REDUCE, F_INDEX, "|.reduce|.value_reduce|.reduce_out|.value_reduce_out|_.reduce|_.value_reduce"},
    {"scatter_reduce", L_SCATTER_REDUCE, F_INDEX, "|.two|.two_out|_.two"},
    {"index", L_INDEX, F_INDEX, "|.Tensor|.Tensor_out"},
    {"max", L_MAX_DIM, F_REDUCE2, "|.dim|.dim_max"}, {"min", L_MIN_DIM, F_REDUCE2, "|.dim|.dim_min"},
    {"sort", L_SORT, F_SORT, "||.values|.stable|.values_stable"}, {"topk", L_TOPK, F_SORT, "||.values"},
    {"cumsum", L_CUMSUM, F_SCAN, "||.out"}, {"cumprod", L_CUMPROD, F_SCAN, "||.out"},
    {"flip", L_FLIP, F_MISC, "||.out"}, {"roll", L_ROLL, F_MISC, "||.out"},
    {"fill_", L_FILL, F_MISC, "|.Scalar|.Tensor"}, {"zero_", L_FILL, F_MISC, "|"},
    {"copy_", L_COPY, F_MISC, "|"},
    {"arange", L_ARANGE, F_MISC, "|.start_out"},
    {"triu", L_TRIU, F_MISC, TRI_O},       {"tril", L_TRIL, F_MISC, TRI_O},
    {"cat", L_CAT, F_MISC, "||.out"},
    {"clamp", L_CLAMP, F_MISC, "||.Tensor|.out|.Tensor_out|_|_.Tensor"},
    {"clamp_min", L_CLAMP_MIN, F_MISC, "||.Tensor|.out|.Tensor_out|_|_.Tensor"},
    {"clamp_max", L_CLAMP_MAX, F_MISC, "||.Tensor|.out|.Tensor_out|_|_.Tensor"},
    {"masked_fill", L_MASKED_FILL, F_MISC, "|.Scalar|.Tensor|.Scalar_out|.Tensor_out|_.Scalar|_.Tensor"},
    {"index_put", L_INDEX_PUT, F_INDEX, "||.out|_"},
    {"masked_scatter", L_MASKED_SCATTER, F_INDEX, "||.out|_"},
    {"embedding_renorm", L_EMBEDDING_RENORM, F_INDEX, "||.out|_"},
    {"bmm", L_BMM, F_MM2, "||.out"},       {"addmm", L_ADDMM, F_MM2, "||.out|_"},
    {"tpu::convert", L_COPY, F_MISC, "|"},
    {"tpu::rope", L_ROPE, F_ROPE, "|"}, {"tpu::rope_backward", L_ROPE_BWD, F_ROPE, "|"},
    {"tpu::sdpa_fwd", L_SDPA_FWD, F_SDPA, "|"}, {"tpu::sdpa_bwd", L_SDPA_BWD, F_SDPA, "|"},
    {"tpu::conv_fwd", L_CONV_FWD, F_CONV, "|"}, {"tpu::conv_bwd", L_CONV_BWD, F_CONV, "|"},
    {"tpu::rms_norm", L_RMS_NORM, F_FUSED, "|"}, {"tpu::swiglu", L_SWIGLU, F_FUSED, "|"},
    {"native_layer_norm", L_LAYER_NORM, F_FUSED, "|"},
    {"tpu::group_norm", L_GROUP_NORM, F_FUSED, "|"},
    {"native_dropout", L_DROPOUT, F_RANDOM, "|"},
    {"uniform", L_UNIFORM, F_RANDOM, "|_"},      {"normal", L_NORMAL, F_RANDOM, "|_"},
    {"bernoulli", L_BERNOULLI, F_RANDOM, "|_.float"},
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
  bool aten = strncmp(op, "aten::", 6) == 0;
  const char* name = aten ? op + 6 : op;
  for (size_t i = 0; i < sizeof(kSpecs) / sizeof(kSpecs[0]); i++) {
    const lspec_t* s = &kSpecs[i];
    if (aten == (strchr(s->base, ':') != NULL)) continue; /* other ops: their full name */
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
  tpu_pjrt_check_t* checks; /* the program's index checks (check_index) */
  int* check_rows;          /* per check: the SSA id of its tensor<1x2xi64> row */
  int32_t num_checks, cap_checks;
  const tpu_pjrt_loc_t* rng; /* the current node's (seed, offset) bytes, or NULL */
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
    /* wrapped into the type's range, as a C cast (and PyTorch's) would: -1 as
     * uint8 is 255 (StableHLO refuses negative unsigned literals) */
    long long v = (long long)x;
    if (!strcmp(ty, "ui8")) v = (uint8_t)v;
    else if (!strcmp(ty, "i8")) v = (int8_t)v;
    else if (!strcmp(ty, "i16")) v = (int16_t)v;
    else if (!strcmp(ty, "i32")) v = (int32_t)v;
    snprintf(lit, sizeof(lit), "%lld", v);
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

/* Row-major dense (size-1 dims may have any stride; an empty view is). */
static bool is_dense(const tpu_tensor_t* t) {
  for (int32_t d = 0; d < t->ndim; d++)
    if (t->sizes[d] == 0) return true;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
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

/* `v` as element type `ty`; to bool as v != 0 (NaN is true). */
static val_t cast(sb_t* b, val_t v, const char* ty) {
  if (!strcmp(v.ty, ty)) return v;
  if (!strcmp(ty, "i1")) return binary_to(b, "compare NE,", v, splat(b, &v, v.ty, 0.0), "i1");
  return converted(b, v, ty);
}

static bool is_half(const char* ty) { return !strcmp(ty, "f16") || !strcmp(ty, "bf16"); }
static bool is_fty(const char* ty) { return ty[0] == 'f' || ty[0] == 'b'; }

/* PyTorch's opmath: half types compute in float32. */
static const char* opmath(const char* ty) { return is_half(ty) ? "f32" : ty; }

/* A value of `like`'s sizes with element type `ty` and shape ndim/sizes. */
static val_t shaped(sb_t* b, int32_t ndim, const int64_t* sizes, const char* ty) {
  val_t r = {.id = fresh(b), .ndim = ndim, .ty = ty};
  memcpy(r.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
  return r;
}

static val_t iota(sb_t* b, int32_t ndim, const int64_t* sizes, int32_t dim, const char* ty) {
  char t[256];
  shape_str(t, sizeof(t), ndim, sizes, ty);
  val_t r = shaped(b, ndim, sizes, ty);
  emit(b, "  %%v%d = stablehlo.iota dim = %d : %s\n", r.id, dim, t);
  return r;
}

static val_t select3(sb_t* b, val_t c, val_t x, val_t y) {
  char tc[256], tv[256];
  shape_str(tc, sizeof(tc), x.ndim, x.sizes, "i1");
  shape_str(tv, sizeof(tv), x.ndim, x.sizes, x.ty);
  val_t r = x;
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.select %%v%d, %%v%d, %%v%d : (%s, %s, %s) -> %s\n", r.id, c.id, x.id, y.id, tc, tv,
       tv, tv);
  return r;
}

/* Rounds a float32 value to `ty` and back (the unfused ops' intermediate roundings). */
static val_t rounded(sb_t* b, val_t v, const char* ty) {
  if (!is_half(ty) || !strcmp(v.ty, ty)) return v;
  const char* back = v.ty;
  return converted(b, converted(b, v, ty), back);
}

/* The lowest / highest value of `ty` (reduction inits), as a literal. */
static void extreme(const char* ty, bool highest, char* lit, size_t cap) {
  if (is_fty(ty)) {
    snprintf(lit, cap, "%s", highest ? "0x7FF0000000000000" : "0xFFF0000000000000");
  } else if (!strcmp(ty, "i1")) {
    snprintf(lit, cap, "%s", highest ? "true" : "false");
  } else if (!strcmp(ty, "ui8")) {
    snprintf(lit, cap, "%s", highest ? "255" : "0");
  } else {
    int bits = atoi(ty + 1);
    long long hi = bits == 64 ? INT64_MAX : (1LL << (bits - 1)) - 1;
    snprintf(lit, cap, "%lld", highest ? hi : -hi - 1);
  }
}

/* A 0-d constant for reduction inits (NaN/inf literals through f64). */
static int scalar_const(sb_t* b, const char* ty, const char* lit) {
  int c = fresh(b);
  if (lit[0] == '0' && lit[1] == 'x' && strcmp(ty, "f64") != 0) {
    int c64 = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<%s> : tensor<f64>\n", c64, lit);
    emit(b, "  %%v%d = stablehlo.convert %%v%d : (tensor<f64>) -> tensor<%s>\n", c, c64, ty);
  } else {
    emit(b, "  %%v%d = stablehlo.constant dense<%s> : tensor<%s>\n", c, lit, ty);
  }
  return c;
}

/* Reduces `x` over the dims flagged in `dims` with `op` ("add", "maximum",
 * ...), starting from literal `init`. */
static val_t reduce_dims(sb_t* b, val_t x, const bool* dims, const char* op, const char* init) {
  char list[128] = "";
  size_t n = 0;
  val_t r = {.ndim = 0, .ty = x.ty};
  for (int32_t d = 0; d < x.ndim; d++) {
    if (dims[d]) {
      n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "", d);
    } else {
      r.sizes[r.ndim++] = x.sizes[d];
    }
  }
  char tx[256], tr[256];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(tr, sizeof(tr), r.ndim, r.sizes, x.ty);
  int z = scalar_const(b, x.ty, init);
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.reduce(%%v%d init: %%v%d) applies stablehlo.%s across dimensions = [%s] : "
          "(%s, tensor<%s>) -> %s\n",
       r.id, x.id, z, op, list, tx, x.ty, tr);
  return r;
}

/* `x` (reduced over `dims`) with those dims back as size 1 and broadcast to
 * `like`'s sizes. */
static val_t unreduce(sb_t* b, val_t r, const bool* dims, const val_t* like) {
  int64_t ks[TPU_MAX_DIMS];
  for (int32_t d = 0; d < like->ndim; d++) ks[d] = dims[d] ? 1 : like->sizes[d];
  val_t k = reshaped(b, r, like->ndim, ks);
  char from[256], to[256], list[256];
  shape_str(from, sizeof(from), k.ndim, k.sizes, k.ty);
  shape_str(to, sizeof(to), like->ndim, like->sizes, k.ty);
  size_t n = 0;
  list[0] = '\0';
  for (int32_t d = 0; d < like->ndim; d++) n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", d ? ", " : "", d);
  val_t o = shaped(b, like->ndim, like->sizes, k.ty);
  emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [%s] : (%s) -> %s\n", o.id, k.id, list, from, to);
  return o;
}

static int32_t wrap_dim(int64_t d, int32_t ndim) {
  int32_t n = ndim > 0 ? ndim : 1;
  if (d < 0) d += n;
  return (int32_t)d;
}

/* Dims of a reduction: the int[] or int argument at `arg` (absent, None or
 * empty: all). */
static void reduce_flags(const tpu_k_call_t* call, int arg, int32_t ndim, bool* dims) {
  const tpu_k_value_t* dv = arg < call->num_args ? &call->args[arg] : NULL;
  bool all = !dv || (dv->kind != TPU_K_INTS && dv->kind != TPU_K_INT) ||
             (dv->kind == TPU_K_INTS && dv->v.ints.len == 0);
  for (int32_t d = 0; d < ndim; d++) dims[d] = all;
  if (all) return;
  int64_t n = dv->kind == TPU_K_INTS ? dv->v.ints.len : 1;
  for (int64_t i = 0; i < n; i++) {
    int32_t d = wrap_dim(dv->kind == TPU_K_INTS ? dv->v.ints.data[i] : dv->v.i, ndim);
    if (d >= 0 && d < ndim) dims[d] = true;
  }
}

static val_t dot(sb_t* b, val_t x, val_t y, const char* dims, int32_t ndim, const int64_t* sizes) {
  char ta[256], tb[256], tr[256];
  shape_str(ta, sizeof(ta), x.ndim, x.sizes, x.ty);
  shape_str(tb, sizeof(tb), y.ndim, y.sizes, y.ty);
  shape_str(tr, sizeof(tr), ndim, sizes, x.ty);
  val_t r = shaped(b, ndim, sizes, x.ty);
  emit(b, "  %%v%d = stablehlo.dot_general %%v%d, %%v%d, %s : (%s, %s) -> %s\n", r.id, x.id, y.id, dims, ta, tb, tr);
  return r;
}

static val_t concat(sb_t* b, const val_t* parts, int n, int32_t dim) {
  val_t r = parts[0];
  r.sizes[dim] = 0;
  char types[2048] = "", t[256];
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    r.sizes[dim] += parts[i].sizes[dim];
    shape_str(t, sizeof(t), parts[i].ndim, parts[i].sizes, parts[i].ty);
    len += (size_t)snprintf(types + len, sizeof(types) - len, "%s%s", i ? ", " : "", t);
  }
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.concatenate", r.id);
  for (int i = 0; i < n; i++) emit(b, "%s %%v%d", i ? "," : "", parts[i].id);
  shape_str(t, sizeof(t), r.ndim, r.sizes, r.ty);
  emit(b, ", dim = %d : (%s) -> %s\n", dim, types, t);
  return r;
}

static val_t slice_dim(sb_t* b, val_t x, int32_t dim, int64_t lo, int64_t hi) {
  char from[256], to[256], spec[512] = "";
  size_t n = 0;
  val_t r = x;
  r.sizes[dim] = hi - lo;
  for (int32_t d = 0; d < x.ndim; d++)
    n += (size_t)snprintf(spec + n, sizeof(spec) - n, "%s%" PRId64 ":%" PRId64, d ? ", " : "", d == dim ? lo : 0,
                          d == dim ? hi : x.sizes[d]);
  shape_str(from, sizeof(from), x.ndim, x.sizes, x.ty);
  shape_str(to, sizeof(to), r.ndim, r.sizes, r.ty);
  r.id = fresh(b);
  emit(b, "  %%v%d = stablehlo.slice %%v%d [%s] : (%s) -> %s\n", r.id, x.id, spec, from, to);
  return r;
}

/* Index tuples [sizes..., ndim] for an element-wise gather/scatter along
 * `dim` of a tensor of rank `ndim`: component d is the position's own
 * coordinate, `index` (i64, the position's sizes) at `dim`. */
static val_t index_tuples(sb_t* b, val_t index, int32_t dim) {
  int32_t nd = index.ndim;
  int64_t s1[TPU_MAX_DIMS + 1];
  memcpy(s1, index.sizes, sizeof(int64_t) * (size_t)nd);
  s1[nd] = 1;
  val_t parts[TPU_MAX_DIMS];
  for (int32_t d = 0; d < nd; d++) {
    val_t c = d == dim ? index : iota(b, nd, index.sizes, d, "i64");
    parts[d] = reshaped(b, c, nd + 1, s1);
  }
  if (nd == 0) {
    val_t z = reshaped(b, index, 1, (int64_t[]){1});
    return z;
  }
  return concat(b, parts, nd, nd);
}

/* The asynchronous bounds check of index values (see tpu_pjrt_check_t):
 * `idx` (integer, any shape, as the user gave it) must lie in [0, size), or
 * in [-size, size) when `negative` (indices counting from the end, as
 * index_put and index.Tensor take them; index_select, gather and scatter do
 * not), for dimension `dim` of `call`'s indexed tensor. Adds a row [position
 * of the first index outside, its value] to the program's check output;
 * nothing for an empty `idx`. Every lowering that reads indices calls it once
 * per index tensor, before wrapping them. */
static void check_index(sb_t* b, const tpu_k_call_t* call, val_t idx, int32_t dim, int64_t size, bool negative) {
  int64_t n = 1;
  for (int32_t d = 0; d < idx.ndim; d++) n *= idx.sizes[d];
  if (n == 0 || b->oom) return;
  if (b->num_checks == b->cap_checks) {
    int32_t cap = b->cap_checks ? b->cap_checks * 2 : 8;
    tpu_pjrt_check_t* c = realloc(b->checks, sizeof(*c) * (size_t)cap);
    if (c) b->checks = c;
    int* r = c ? realloc(b->check_rows, sizeof(*r) * (size_t)cap) : NULL;
    if (!r) {
      b->oom = true;
      return;
    }
    b->check_rows = r;
    b->cap_checks = cap;
  }
  val_t f = reshaped(b, converted(b, idx, "i64"), 1, &n);
  val_t lo = binary_to(b, "compare LT,", f, splat(b, &f, "i64", negative ? (double)-size : 0.0), "i1");
  val_t hi = binary_to(b, "compare GE,", f, splat(b, &f, "i64", (double)size), "i1");
  char none[32];
  snprintf(none, sizeof(none), "%lld", (long long)TPU_PJRT_CHECK_NONE);
  int nk = scalar_const(b, "i64", none), z = scalar_const(b, "i64", "0");
  val_t bad = binary(b, "or", lo, hi);
  val_t nonev = {.id = nk, .ndim = 0, .ty = "i64"};
  val_t keys = select3(b, bad, iota(b, 1, &n, 0, "i64"), broadcast(b, nonev, 1, &n));
  int red = fresh(b), u = red, k1 = fresh(b), v1 = fresh(b), row = fresh(b);
  emit(b, "  %%v%d:2 = \"stablehlo.reduce\"(%%v%d, %%v%d, %%v%d, %%v%d) ({\n", red, keys.id, f.id, nk, z);
  emit(b, "  ^bb0(%%ka%d: tensor<i64>, %%va%d: tensor<i64>, %%kb%d: tensor<i64>, %%vb%d: tensor<i64>):\n", u, u, u, u);
  emit(b, "    %%le%d = stablehlo.compare LE, %%ka%d, %%kb%d : (tensor<i64>, tensor<i64>) -> tensor<i1>\n", u, u, u);
  emit(b, "    %%rk%d = stablehlo.select %%le%d, %%ka%d, %%kb%d : tensor<i1>, tensor<i64>\n", u, u, u, u);
  emit(b, "    %%rv%d = stablehlo.select %%le%d, %%va%d, %%vb%d : tensor<i1>, tensor<i64>\n", u, u, u, u);
  emit(b, "    stablehlo.return %%rk%d, %%rv%d : tensor<i64>, tensor<i64>\n", u, u);
  emit(b, "  }) {dimensions = array<i64: 0>} : (tensor<%" PRId64 "xi64>, tensor<%" PRId64 "xi64>, tensor<i64>, "
          "tensor<i64>) -> (tensor<i64>, tensor<i64>)\n", n, n);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#0 : (tensor<i64>) -> tensor<1x1xi64>\n", k1, red);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#1 : (tensor<i64>) -> tensor<1x1xi64>\n", v1, red);
  emit(b, "  %%v%d = stablehlo.concatenate %%v%d, %%v%d, dim = 1 : (tensor<1x1xi64>, tensor<1x1xi64>) -> "
          "tensor<1x2xi64>\n", row, k1, v1);
  tpu_pjrt_check_t* c = &b->checks[b->num_checks];
  snprintf(c->op, sizeof(c->op), "%s", call->op);
  c->dim = dim;
  c->size = size;
  b->check_rows[b->num_checks++] = row;
}

/* Tensors of a call in schema order (list entries included, absent ones
 * skipped), each with its loc, then the outputs' locs. */
typedef struct {
  const tpu_tensor_t* t[TPU_PJRT_LOWER_MAX_TENSORS];
  const tpu_pjrt_loc_t* loc[TPU_PJRT_LOWER_MAX_TENSORS];
  int arg[TPU_PJRT_LOWER_MAX_TENSORS]; /* argument index */
  int n;
  const tpu_pjrt_loc_t* oloc; /* outputs' locs */
} targs_t;

static tpu_status_t in_val(sb_t* b, const tpu_k_call_t* call, const tpu_tensor_t* t, const tpu_pjrt_loc_t* loc,
                           val_t* out) {
  ltype_t lt;
  if (!type_of(t->dtype, &lt))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input dtype %d has no StableHLO type", call->op, t->dtype);
  *out = read_view(b, t, loc, &lt);
  return TPU_OK;
}

/* Writes `r` to output `k` (cast to its dtype). An absent output (dtype
 * INVALID) is skipped. */
static tpu_status_t out_val(sb_t* b, const tpu_k_call_t* call, int k, const targs_t* ta, val_t r) {
  const tpu_tensor_t* o = &call->outputs[k];
  if (o->dtype == TPU_DTYPE_INVALID || ta->oloc[k].storage < 0) return TPU_OK; /* absent or without bytes */
  ltype_t ot;
  if (!type_of(o->dtype, &ot))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %d has no StableHLO type", call->op, o->dtype);
  r = cast(b, r, ot.ty);
  if (r.ndim != o->ndim) r = reshaped(b, r, o->ndim, o->sizes);
  write_out(b, r, o, &ta->oloc[k], &ot);
  return TPU_OK;
}

/* ---- lowerings of the op families beyond the pointwise core ---- */

static val_t arith(sb_t* b, lop_t op, val_t x, val_t y);
static const char* string_at(const tpu_k_call_t* call, int i, const char* dflt);
static val_t unary_more(sb_t* b, const tpu_k_call_t* call, lop_t op, val_t x);
static val_t gelu_tanh(sb_t* b, val_t x);

static const tpu_k_value_t* arg_at(const tpu_k_call_t* call, int i) {
  return i < call->num_args ? &call->args[i] : NULL;
}

static bool is_number(const tpu_k_value_t* v) {
  return v && (v->kind == TPU_K_INT || v->kind == TPU_K_DOUBLE || v->kind == TPU_K_BOOL);
}

static int64_t int_at(const tpu_k_call_t* call, int i, int64_t dflt) {
  const tpu_k_value_t* v = arg_at(call, i);
  if (!v) return dflt;
  if (v->kind == TPU_K_INT) return v->v.i;
  if (v->kind == TPU_K_BOOL) return v->v.b;
  if (v->kind == TPU_K_DOUBLE) return (int64_t)v->v.d;
  return dflt;
}

static double num_at(const tpu_k_call_t* call, int i, double dflt) {
  const tpu_k_value_t* v = arg_at(call, i);
  return is_number(v) ? scalar_of(v) : dflt;
}

/* erf in float32 (Eigen's rational approximation, as XLA's CPU backend). */
static val_t erf32(sb_t* b, val_t x) {
  static const double kA[] = {-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                              -1.60960333262415e-02};
  static const double kB[] = {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                              -7.37332916720468e-03, -1.42647390514189e-02};
  x = binary(b, "maximum", binary(b, "minimum", x, splat(b, &x, x.ty, 4.0)), splat(b, &x, x.ty, -4.0));
  val_t x2 = binary(b, "multiply", x, x);
  val_t p = splat(b, &x, x.ty, kA[0]);
  for (int i = 1; i < 7; i++) p = binary(b, "add", binary(b, "multiply", p, x2), splat(b, &x, x.ty, kA[i]));
  p = binary(b, "multiply", p, x);
  val_t q = splat(b, &x, x.ty, kB[0]);
  for (int i = 1; i < 5; i++) q = binary(b, "add", binary(b, "multiply", q, x2), splat(b, &x, x.ty, kB[i]));
  return binary(b, "divide", p, q);
}

/* erf: float32 through the rational form; float64 through erfc's
 * continued-fraction-free series: erf(x) = 1 - erfc(x), with the
 * Abramowitz-Stegun-free form used by XLA (chlo.erf) when available. */
static val_t erf_of(sb_t* b, val_t x) {
  if (!strcmp(x.ty, "f32")) return erf32(b, x);
  char t[256];
  shape_str(t, sizeof(t), x.ndim, x.sizes, x.ty);
  val_t r = x;
  r.id = fresh(b);
  emit(b, "  %%v%d = chlo.erf %%v%d : %s -> %s\n", r.id, x.id, t, t);
  return r;
}

/* Softmax / log-softmax (and their backward) over one dim, in opmath. */
static tpu_status_t lower_softmax(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  bool logsm = spec->op == L_LOG_SOFTMAX || spec->op == L_LOG_SOFTMAX_BWD;
  bool bwd = spec->op == L_SOFTMAX_BWD || spec->op == L_LOG_SOFTMAX_BWD;
  val_t x, y;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  if (bwd) TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &y));
  ltype_t ot;
  type_of(call->outputs[0].dtype, &ot);
  const char* ct = opmath(is_half(x.ty) && !is_half(ot.ty) ? ot.ty : x.ty);
  ct = opmath(ct);
  x = cast(b, x, ct);
  bool dims[TPU_MAX_DIMS] = {false};
  int32_t d = wrap_dim(int_at(call, bwd ? 2 : 1, -1), x.ndim);
  if (x.ndim > 0) dims[d] = true;
  val_t r;
  if (x.ndim == 0) {
    /* one element: softmax 1, log_softmax 0; backward: grad - ... */
    if (!bwd) {
      r = splat(b, &x, ct, logsm ? 0.0 : 1.0);
    } else {
      y = cast(b, y, ct);
      r = logsm ? binary(b, "subtract", x, unary(b, "exponential", y))
                : binary(b, "multiply", y, binary(b, "subtract", x, x));
    }
    return out_val(b, call, 0, ta, r);
  }
  char lo[64];
  if (!bwd) {
    extreme(ct, false, lo, sizeof(lo));
    val_t m = unreduce(b, reduce_dims(b, x, dims, "maximum", lo), dims, &x);
    val_t sh = binary(b, "subtract", x, m);
    val_t e = unary(b, "exponential", sh);
    val_t s = unreduce(b, reduce_dims(b, e, dims, "add", "0.0"), dims, &x);
    r = logsm ? binary(b, "subtract", sh, unary(b, "log", s)) : binary(b, "divide", e, s);
  } else {
    /* x = grad_output, y = output */
    y = cast(b, y, ct);
    if (logsm) {
      val_t s = unreduce(b, reduce_dims(b, x, dims, "add", "0.0"), dims, &x);
      r = binary(b, "subtract", x, binary(b, "multiply", unary(b, "exponential", y), s));
    } else {
      val_t gy = binary(b, "multiply", x, y);
      val_t s = unreduce(b, reduce_dims(b, gy, dims, "add", "0.0"), dims, &x);
      r = binary(b, "multiply", y, binary(b, "subtract", x, s));
    }
  }
  return out_val(b, call, 0, ta, r);
}

/* The extreme of `x` along `d` and its first index (NaN is the extreme of
 * both directions, as in PyTorch): (values, i64 indices), `d` removed. */
static void arg_reduce(sb_t* b, val_t x, int32_t d, bool lowest, val_t* out_vals, val_t* out_idx) {
  if (!strcmp(x.ty, "i1")) x = converted(b, x, "ui8"); /* ordered as false < true */
  const char* ct = x.ty;
  val_t idx = iota(b, x.ndim, x.sizes, d, "i64");
  val_t rr = {.ndim = 0, .ty = ct};
  for (int32_t k = 0; k < x.ndim; k++)
    if (k != d) rr.sizes[rr.ndim++] = x.sizes[k];
  char tx[256], ti[256], trx[256], tri[256], lit[64];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, ct);
  shape_str(ti, sizeof(ti), x.ndim, x.sizes, "i64");
  shape_str(trx, sizeof(trx), rr.ndim, rr.sizes, ct);
  shape_str(tri, sizeof(tri), rr.ndim, rr.sizes, "i64");
  extreme(ct, lowest, lit, sizeof(lit));
  int iv = scalar_const(b, ct, lit), zi = scalar_const(b, "i64", "0");
  int res = fresh(b), u = res;
  const char* cmp = lowest ? "LT" : "GT";
  emit(b, "  %%v%d:2 = \"stablehlo.reduce\"(%%v%d, %%v%d, %%v%d, %%v%d) ({\n", res, x.id, idx.id, iv, zi);
  emit(b, "  ^bb0(%%a%d: tensor<%s>, %%ai%d: tensor<i64>, %%c%d: tensor<%s>, %%ci%d: tensor<i64>):\n", u, ct, u, u,
       ct, u);
  emit(b, "    %%gt%d = stablehlo.compare %s, %%a%d, %%c%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, cmp, u, u,
       ct, ct);
  emit(b, "    %%eq%d = stablehlo.compare EQ, %%a%d, %%c%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, u, u, ct,
       ct);
  emit(b, "    %%an%d = stablehlo.compare NE, %%a%d, %%a%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, u, u, ct,
       ct);
  emit(b, "    %%cn%d = stablehlo.compare NE, %%c%d, %%c%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, u, u, ct,
       ct);
  emit(b, "    %%nc%d = stablehlo.not %%cn%d : tensor<i1>\n", u, u);
  emit(b, "    %%b1%d = stablehlo.and %%an%d, %%nc%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%b2%d = stablehlo.or %%gt%d, %%b1%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%bn%d = stablehlo.and %%an%d, %%cn%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%e2%d = stablehlo.or %%eq%d, %%bn%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%li%d = stablehlo.compare LT, %%ai%d, %%ci%d : (tensor<i64>, tensor<i64>) -> tensor<i1>\n", u, u, u);
  emit(b, "    %%e3%d = stablehlo.and %%e2%d, %%li%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%pa%d = stablehlo.or %%b2%d, %%e3%d : tensor<i1>\n", u, u, u);
  emit(b, "    %%rv%d = stablehlo.select %%pa%d, %%a%d, %%c%d : tensor<i1>, tensor<%s>\n", u, u, u, u, ct);
  emit(b, "    %%ri%d = stablehlo.select %%pa%d, %%ai%d, %%ci%d : tensor<i1>, tensor<i64>\n", u, u, u, u);
  emit(b, "    stablehlo.return %%rv%d, %%ri%d : tensor<%s>, tensor<i64>\n", u, u, ct);
  emit(b, "  }) {dimensions = array<i64: %d>} : (%s, %s, tensor<%s>, tensor<i64>) -> (%s, %s)\n", d, tx, ti, ct, trx,
       tri);
  *out_vals = shaped(b, rr.ndim, rr.sizes, ct);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#0 : (%s) -> %s\n", out_vals->id, res, trx, trx);
  *out_idx = shaped(b, rr.ndim, rr.sizes, "i64");
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#1 : (%s) -> %s\n", out_idx->id, res, tri, tri);
}

/* max/min/prod/amax/amin/any/all, arg{max,min} and max.dim/min.dim. */
static tpu_status_t lower_reduce2(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  ltype_t ot;
  type_of(call->outputs[0].dtype, &ot);
  bool arg = spec->op == L_ARGMAX || spec->op == L_ARGMIN;
  bool vdim = spec->op == L_MAX_DIM || spec->op == L_MIN_DIM; /* values and indices */
  const char* ct = arg || vdim ? opmath(x.ty) : opmath(ot.ty);
  if (spec->op == L_ANY || spec->op == L_ALL) ct = "i1";
  x = cast(b, x, ct);
  bool dims[TPU_MAX_DIMS] = {false};
  bool has_dim = strstr(call->op, ".dim") || strstr(call->op, "amax") || strstr(call->op, "amin") ||
                 strstr(call->op, ".int_out") || arg;
  reduce_flags(call, has_dim ? 1 : 99, x.ndim, dims);
  char lit[64];
  val_t r;
  if (!arg && !vdim) {
    const char* op = "maximum";
    switch (spec->op) {
      case L_AMAX: extreme(ct, false, lit, sizeof(lit)); break;
      case L_AMIN: op = "minimum"; extreme(ct, true, lit, sizeof(lit)); break;
      case L_PROD: op = "multiply"; snprintf(lit, sizeof(lit), "%s", is_fty(ct) ? "1.0" : !strcmp(ct, "i1") ? "true" : "1"); break;
      case L_ANY: op = "or"; snprintf(lit, sizeof(lit), "false"); break;
      default: op = "and"; snprintf(lit, sizeof(lit), "true"); break; /* all */
    }
    if (!strcmp(ct, "i1") && spec->op == L_PROD) op = "and";
    r = reduce_dims(b, x, dims, op, lit);
    /* NaN propagates through max/min as in PyTorch */
    if (is_fty(ct) && (spec->op == L_AMAX || spec->op == L_AMIN)) {
      val_t nan = binary_to(b, "compare NE,", x, x, "i1");
      val_t any = reduce_dims(b, nan, dims, "or", "false");
      r = select3(b, any, splat(b, &r, ct, NAN), r);
    }
    return out_val(b, call, 0, ta, r);
  }
  /* arg{max,min}: dim None flattens */
  const tpu_k_value_t* dv = arg_at(call, 1);
  bool flat = !dv || dv->kind != TPU_K_INT;
  if (flat) {
    int64_t n = 1;
    for (int32_t d = 0; d < x.ndim; d++) n *= x.sizes[d];
    x = reshaped(b, x, 1, &n);
    dims[0] = true;
  } else if (x.ndim == 0) {
    x = reshaped(b, x, 1, (int64_t[]){1});
    dims[0] = true;
  }
  int32_t d = 0;
  while (!dims[d]) d++;
  bool lowest = spec->op == L_ARGMIN || spec->op == L_MIN_DIM;
  val_t vals, idx;
  arg_reduce(b, x, d, lowest, &vals, &idx);
  if (arg) return out_val(b, call, 0, ta, idx);
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, vals));
  return call->num_outputs > 1 ? out_val(b, call, 1, ta, idx) : TPU_OK;
}

static void dims_list(char* buf, size_t cap, int32_t from, int32_t to, int32_t skip) {
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t d = from; d < to; d++)
    if (d != skip) n += (size_t)snprintf(buf + n, cap - n, "%s%d", n ? ", " : "", d);
}

/* Integer index tensors idx[0..k) of `call` (i64 after conversion) broadcast
 * together (PyTorch's trailing alignment), checked against and negative
 * entries wrapped by the size of the dim pos[j] of `x` each indexes, as
 * tuples [B..., k]; B (rank *out_ni) goes to out_is. */
static val_t index_tuple_list(sb_t* b, const tpu_k_call_t* call, val_t* idx, int k, const int32_t* pos, const val_t* x,
                              int32_t* out_ni, int64_t* out_is) {
  int32_t ni = 0;
  int64_t* is = out_is;
  for (int j = 0; j < k; j++) {
    idx[j] = converted(b, idx[j], "i64");
    if (idx[j].ndim > ni) {
      for (int32_t d = ni - 1; d >= 0; d--) is[d + idx[j].ndim - ni] = is[d];
      for (int32_t d = 0; d < idx[j].ndim - ni; d++) is[d] = 1;
      ni = idx[j].ndim;
    }
    for (int32_t d = 0; d < idx[j].ndim; d++) {
      int64_t sz = idx[j].sizes[d];
      int32_t e = ni - idx[j].ndim + d;
      if (sz != 1) is[e] = sz;
    }
  }
  int64_t s1[TPU_MAX_DIMS + 1];
  memcpy(s1, is, sizeof(int64_t) * (size_t)ni);
  s1[ni] = 1;
  val_t parts[TPU_MAX_DIMS];
  for (int j = 0; j < k; j++) {
    val_t t = broadcast(b, idx[j], ni, is);
    check_index(b, call, t, pos[j], x->sizes[pos[j]], true);
    val_t neg = binary_to(b, "compare LT,", t, splat(b, &t, "i64", 0), "i1");
    t = select3(b, neg, binary(b, "add", t, splat(b, &t, "i64", (double)x->sizes[pos[j]])), t);
    parts[j] = reshaped(b, t, ni + 1, s1);
  }
  *out_ni = ni;
  return k == 1 ? parts[0] : concat(b, parts, k, ni);
}

/* A scatter region combining old and new with `comb` ("add", "maximum",
 * ...; NULL: the new value replaces the old), then the attributes. */
static void scatter_head(sb_t* b, val_t res, val_t x, val_t tup, val_t upd, const char* comb) {
  char sc[64];
  snprintf(sc, sizeof(sc), "tensor<%s>", x.ty);
  int u = fresh(b);
  emit(b, "  %%v%d = \"stablehlo.scatter\"(%%v%d, %%v%d, %%v%d) ({\n  ^bb0(%%o%d: %s, %%n%d: %s):\n", res.id, x.id,
       tup.id, upd.id, u, sc, u, sc);
  if (comb && is_fty(x.ty) && (!strcmp(comb, "maximum") || !strcmp(comb, "minimum"))) {
    /* NaN wins, whichever side it is on (XLA's CPU max/min may drop it) */
    emit(b, "    %%m%d = stablehlo.%s %%o%d, %%n%d : %s\n", u, comb, u, u, sc);
    emit(b, "    %%no%d = stablehlo.compare NE, %%o%d, %%o%d : (%s, %s) -> tensor<i1>\n", u, u, u, sc, sc);
    emit(b, "    %%nn%d = stablehlo.compare NE, %%n%d, %%n%d : (%s, %s) -> tensor<i1>\n", u, u, u, sc, sc);
    emit(b, "    %%a%d = stablehlo.select %%nn%d, %%n%d, %%m%d : tensor<i1>, %s\n", u, u, u, u, sc);
    emit(b, "    %%s%d = stablehlo.select %%no%d, %%o%d, %%a%d : tensor<i1>, %s\n", u, u, u, u, sc);
    emit(b, "    stablehlo.return %%s%d : %s\n", u, sc);
  } else if (comb) {
    emit(b, "    %%s%d = stablehlo.%s %%o%d, %%n%d : %s\n    stablehlo.return %%s%d : %s\n", u, comb, u, u, sc, u, sc);
  } else {
    emit(b, "    stablehlo.return %%n%d : %s\n", u, sc);
  }
}

/* `x` with `upd` (the index's shape) combined in at the element positions
 * `tup` ([index sizes..., x.ndim], from index_tuples). */
static val_t scatter_elems(sb_t* b, val_t x, val_t tup, val_t upd, const char* comb) {
  char all[128], tx[256], ti[256], tu[256];
  dims_list(all, sizeof(all), 0, x.ndim, -1);
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(ti, sizeof(ti), tup.ndim, tup.sizes, "i64");
  shape_str(tu, sizeof(tu), upd.ndim, upd.sizes, upd.ty);
  val_t res = x;
  res.id = fresh(b);
  scatter_head(b, res, x, tup, upd, comb);
  emit(b,
       "  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [%s], "
       "scatter_dims_to_operand_dims = [%s], index_vector_dim = %d>, indices_are_sorted = false, unique_indices = "
       "false} : (%s, %s, %s) -> %s\n",
       all, all, tup.ndim - 1, tx, ti, tu, tx);
  return res;
}

/* A broadcast 0-d literal (extreme values that a double cannot carry). */
static val_t splat_lit(sb_t* b, const val_t* like, const char* ty, const char* lit) {
  val_t c = {.id = scalar_const(b, ty, lit), .ndim = 0, .ty = ty};
  return broadcast(b, c, like->ndim, like->sizes);
}

/* The integer index tensors of an advanced-indexing call (argument 1, a
 * list; absent entries are dims taken whole) read into idx[], the dims they
 * index into pos[]; *k their count. Masks are expanded to indices before the
 * driver sees them (the bridge's expand_masks). */
static tpu_status_t index_args(sb_t* b, const tpu_k_call_t* call, const targs_t* ta, int32_t r, val_t* idx,
                               int32_t* pos, int* k) {
  const tpu_k_value_t* lv = arg_at(call, 1);
  if (!lv || lv->kind != TPU_K_TENSORS)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected a list of indices", call->op);
  *k = 0;
  for (int64_t j = 0; j < lv->v.tensors.len; j++) {
    const tpu_tensor_t* t = &lv->v.tensors.data[j];
    if (t->dtype == TPU_DTYPE_INVALID) continue;
    if (t->dtype == TPU_DTYPE_BOOL || t->dtype == TPU_DTYPE_U8)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: masks as indices are not lowered", call->op);
    if (j >= r || 1 + *k >= ta->n) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: too many indices", call->op);
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1 + *k], ta->loc[1 + *k], &idx[*k]));
    pos[(*k)++] = (int32_t)j;
  }
  return TPU_OK;
}

/* Where advanced indexing puts its dims (PyTorch's rule): the index dims
 * (sizes is[0..ni)) replace the indexed dims pos[0..k) of `x` where those
 * are adjacent, else lead. `sizes` is the result's shape
 * (index.Tensor's output, index_put's values), `win` the result dims holding
 * the kept dims, in order (gather's offset_dims, scatter's
 * update_window_dims). */
typedef struct {
  int32_t ndim, nwin;
  int64_t sizes[TPU_MAX_DIMS * 2];
  int32_t win[TPU_MAX_DIMS];
} index_layout_t;

static tpu_status_t index_layout(const tpu_k_call_t* call, const val_t* x, const int32_t* pos, int k, int32_t ni,
                                 const int64_t* is, index_layout_t* L) {
  const int32_t r = x->ndim;
  const int64_t* xs = x->sizes;
  bool adjacent = true;
  for (int j = 1; j < k; j++) adjacent &= pos[j] == pos[0] + j;
  const int32_t at = adjacent ? pos[0] : 0; /* kept dims before the index dims */
  bool placed = false;
  L->ndim = L->nwin = 0;
  for (int32_t d = 0, j = 0, kept = 0; d < r; d++) {
    if (j < k && pos[j] == d) {
      j++;
      continue;
    }
    if (!placed && kept == at) {
      memcpy(L->sizes + L->ndim, is, sizeof(int64_t) * (size_t)ni);
      L->ndim += ni;
      placed = true;
    }
    L->win[L->nwin++] = L->ndim;
    L->sizes[L->ndim++] = xs[d];
    kept++;
  }
  if (!placed) {
    memcpy(L->sizes + L->ndim, is, sizeof(int64_t) * (size_t)ni);
    L->ndim += ni;
  }
  if (L->ndim > TPU_MAX_DIMS)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: the indexed result has %d dims (at most %d)", call->op, L->ndim,
                     TPU_MAX_DIMS);
  return TPU_OK;
}

static void int_list(char* buf, size_t cap, const int32_t* v, int n) {
  size_t m = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && m < cap; i++) m += (size_t)snprintf(buf + m, cap - m, "%s%d", i ? ", " : "", v[i]);
}

/* index_put(self, indices, values, accumulate): integer indices of any dims
 * (None: a dim taken whole); values broadcast to the shape index.Tensor of
 * the same indices would return. */
static tpu_status_t lower_index_put(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  if (!type_of(o->dtype, &ot))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %d has no StableHLO type", call->op, o->dtype);
  val_t x, v, idx[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  int32_t pos[TPU_MAX_DIMS];
  int k = 0;
  TPU_RETURN_IF_ERROR(index_args(b, call, ta, x.ndim, idx, pos, &k));
  if (k == 0 || ta->n != k + 2) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  const char* ct = ot.ty; /* accumulates in the tensor's type, one rounding per add, as PyTorch */
  x = cast(b, x, ct);
  int32_t ni = 0;
  int64_t is[TPU_MAX_DIMS];
  val_t tup = index_tuple_list(b, call, idx, k, pos, &x, &ni, is);
  index_layout_t L;
  TPU_RETURN_IF_ERROR(index_layout(call, &x, pos, k, ni, is, &L));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[k + 1], ta->loc[k + 1], &v));
  v = broadcast(b, cast(b, v, ct), L.ndim, L.sizes);
  bool acc = int_at(call, 3, 0) != 0;
  char uw[128], ins[128], tx[256], ti[256], tu[256];
  int_list(uw, sizeof(uw), L.win, L.nwin);
  int_list(ins, sizeof(ins), pos, k);
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, ct);
  shape_str(ti, sizeof(ti), tup.ndim, tup.sizes, "i64");
  shape_str(tu, sizeof(tu), L.ndim, L.sizes, ct);
  val_t res = x;
  res.id = fresh(b);
  scatter_head(b, res, x, tup, v, acc ? (!strcmp(ct, "i1") ? "or" : "add") : NULL);
  emit(b,
       "  }) {scatter_dimension_numbers = #stablehlo.scatter<%s%s%sinserted_window_dims = [%s], "
       "scatter_dims_to_operand_dims = [%s], index_vector_dim = %d>, indices_are_sorted = false, unique_indices = "
       "false} : (%s, %s, %s) -> %s\n",
       uw[0] ? "update_window_dims = [" : "", uw, uw[0] ? "], " : "", ins, ins, ni, tx, ti, tu, tx);
  return out_val(b, call, 0, ta, res);
}

/* index.Tensor(self, indices): integer index tensors (None: a dim taken
 * whole) broadcast together, laid out as index_layout says. */
static tpu_status_t lower_index_tensor(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  val_t x, idx[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  int32_t r = x.ndim, pos[TPU_MAX_DIMS];
  int k = 0;
  TPU_RETURN_IF_ERROR(index_args(b, call, ta, r, idx, pos, &k));
  if (k == 0) return out_val(b, call, 0, ta, x);
  int32_t ni = 0;
  int64_t is[TPU_MAX_DIMS];
  val_t tup = index_tuple_list(b, call, idx, k, pos, &x, &ni, is);
  index_layout_t L;
  TPU_RETURN_IF_ERROR(index_layout(call, &x, pos, k, ni, is, &L));
  char offs[128], coll[128], ss[256] = "";
  int_list(offs, sizeof(offs), L.win, L.nwin);
  int_list(coll, sizeof(coll), pos, k);
  size_t ns = 0;
  for (int32_t d = 0, j = 0; d < r; d++) {
    bool indexed = j < k && pos[j] == d;
    if (indexed) j++;
    ns += (size_t)snprintf(ss + ns, sizeof(ss) - ns, "%s%" PRId64, d ? ", " : "", indexed ? 1 : x.sizes[d]);
  }
  val_t res = {.ndim = L.ndim, .ty = x.ty};
  memcpy(res.sizes, L.sizes, sizeof(int64_t) * (size_t)L.ndim);
  char tx[256], ti[256], tr[256];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(ti, sizeof(ti), tup.ndim, tup.sizes, "i64");
  shape_str(tr, sizeof(tr), res.ndim, res.sizes, x.ty);
  res.id = fresh(b);
  emit(b,
       "  %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<%s%s%scollapsed_slice_dims = "
       "[%s], start_index_map = [%s], index_vector_dim = %d>, slice_sizes = array<i64: %s>, indices_are_sorted = "
       "false} : (%s, %s) -> %s\n",
       res.id, x.id, tup.id, offs[0] ? "offset_dims = [" : "", offs, offs[0] ? "], " : "", coll, coll, ni, ss, tx, ti,
       tr);
  return out_val(b, call, 0, ta, res);
}

/* The inclusive scan of x along d with `op` (identity `ident`): log2(n)
 * steps of x op= x shifted by 1, 2, 4, ... (reduce_window would be O(n^2)
 * on XLA's CPU). */
static val_t scan_along(sb_t* b, val_t x, int32_t d, const char* op, double ident) {
  int64_t n = x.sizes[d];
  for (int64_t sh = 1; sh < n; sh *= 2) {
    val_t pad = x;
    pad.sizes[d] = sh;
    val_t parts[2] = {splat(b, &pad, x.ty, ident), slice_dim(b, x, d, 0, n - sh)};
    x = binary(b, op, x, concat(b, parts, 2, d));
  }
  return x;
}

/* masked_scatter(self, mask, source): where the mask (broadcast to self) is
 * set, the next element of the flattened source, in order: the position is
 * the running count of set mask elements, checked against source's size. */
static tpu_status_t lower_masked_scatter(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  if (!type_of(o->dtype, &ot) || ta->n < 3)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  val_t x, m, src;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &m));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[2], ta->loc[2], &src));
  int64_t n = 1, ns = 1;
  for (int32_t d = 0; d < o->ndim; d++) n *= o->sizes[d];
  for (int32_t d = 0; d < src.ndim; d++) ns *= src.sizes[d];
  if (n == 0) return TPU_OK; /* nothing to write */
  if (ns == 0) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: an empty source is not lowered", call->op);
  x = reshaped(b, broadcast(b, cast(b, x, ot.ty), o->ndim, o->sizes), 1, &n);
  m = reshaped(b, broadcast(b, cast(b, m, "i1"), o->ndim, o->sizes), 1, &n);
  val_t cnt = scan_along(b, converted(b, m, "i64"), 0, "add", 0.0);
  val_t at = select3(b, m, binary(b, "subtract", cnt, splat(b, &cnt, "i64", 1.0)), splat(b, &cnt, "i64", 0.0));
  check_index(b, call, at, TPU_PJRT_CHECK_SOURCE, ns, false);
  src = reshaped(b, cast(b, src, ot.ty), 1, &ns);
  int64_t s2[2] = {n, 1};
  val_t tup = reshaped(b, at, 2, s2);
  val_t g = shaped(b, 1, &n, ot.ty);
  char ts[128], ti[128], tg[128];
  shape_str(ts, sizeof(ts), 1, &ns, ot.ty);
  shape_str(ti, sizeof(ti), 2, s2, "i64");
  shape_str(tg, sizeof(tg), 1, &n, ot.ty);
  emit(b,
       "  %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], "
       "start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1>, indices_are_sorted = true} : "
       "(%s, %s) -> %s\n",
       g.id, src.id, tup.id, ts, ti, tg);
  return out_val(b, call, 0, ta, reshaped(b, select3(b, m, g, x), o->ndim, o->sizes));
}

/* embedding_renorm_(self, indices, max_norm, norm_type), as the host kernel
 * (kernels/index.c): each row of self that indices name and whose norm
 * (rounded to self's dtype) exceeds max_norm is scaled by
 * max_norm / (norm + 1e-7), the scale rounded to the dtype. Every row's norm
 * is computed; the named rows are a scattered mask. */
static tpu_status_t lower_embedding_renorm(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  val_t x, idx;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &idx));
  if (x.ndim != 2 || !is_fty(x.ty))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected a 2-d floating tensor", call->op);
  const int64_t V = x.sizes[0], D = x.sizes[1];
  int64_t n = 1;
  for (int32_t d = 0; d < idx.ndim; d++) n *= idx.sizes[d];
  if (V * D == 0 || n == 0) return out_val(b, call, 0, ta, x);
  const double max_norm = num_at(call, 2, 0.0), p = num_at(call, 3, 2.0);
  const char* ct = opmath(x.ty);
  val_t xf = cast(b, x, ct), a = unary(b, "abs", xf);
  const bool row[2] = {false, true};
  val_t norm;
  char lit[32];
  if (isinf(p)) {
    extreme(ct, p < 0, lit, sizeof(lit));
    norm = reduce_dims(b, a, row, p > 0 ? "maximum" : "minimum", p > 0 ? "0.0" : lit);
  } else if (p == 0) {
    norm = reduce_dims(b, converted(b, binary_to(b, "compare NE,", a, splat(b, &a, ct, 0.0), "i1"), ct), row, "add", "0.0");
  } else if (p == 1) {
    norm = reduce_dims(b, a, row, "add", "0.0");
  } else if (p == 2) {
    norm = unary(b, "sqrt", reduce_dims(b, binary(b, "multiply", a, a), row, "add", "0.0"));
  } else {
    val_t s = reduce_dims(b, binary(b, "power", a, splat(b, &a, ct, p)), row, "add", "0.0");
    norm = binary(b, "power", s, splat(b, &s, ct, 1.0 / p));
  }
  norm = rounded(b, norm, x.ty);
  val_t scale = rounded(b, binary(b, "divide", splat(b, &norm, ct, max_norm),
                                  binary(b, "add", norm, splat(b, &norm, ct, 1e-7))), x.ty);
  idx = reshaped(b, converted(b, idx, "i64"), 1, &n);
  check_index(b, call, idx, 0, V, true);
  idx = select3(b, binary_to(b, "compare LT,", idx, splat(b, &idx, "i64", 0.0), "i1"),
                binary(b, "add", idx, splat(b, &idx, "i64", (double)V)), idx);
  val_t named = scatter_elems(b, splat(b, &norm, "i1", 0.0), reshaped(b, idx, 2, (int64_t[]){n, 1}),
                              splat(b, &idx, "i1", 1.0), NULL);
  val_t sel = binary(b, "and", named, binary_to(b, "compare GT,", norm, splat(b, &norm, ct, max_norm), "i1"));
  const int64_t v1[2] = {V, 1}, vd[2] = {V, D};
  sel = broadcast(b, reshaped(b, sel, 2, v1), 2, vd);
  val_t scaled = binary(b, "multiply", xf, broadcast(b, reshaped(b, scale, 2, v1), 2, vd));
  return out_val(b, call, 0, ta, select3(b, sel, cast(b, scaled, x.ty), x));
}

static tpu_status_t lower_index(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  if (spec->op == L_EMBEDDING_RENORM) return lower_embedding_renorm(b, call, ta);
  if (spec->op == L_MASKED_SCATTER) return lower_masked_scatter(b, call, ta);
  if (spec->op == L_INDEX_PUT) return lower_index_put(b, call, ta);
  if (spec->op == L_INDEX) return lower_index_tensor(b, call, ta);
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  type_of(o->dtype, &ot);
  val_t x, idx;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &idx));
  idx = converted(b, idx, "i64");
  int32_t r = x.ndim;
  int32_t dim = wrap_dim(int_at(call, 1, 0), r);
  check_index(b, call, idx, dim, r ? x.sizes[dim] : 1, false);
  if (spec->op == L_INDEX_SELECT) {
    if (r == 0) return out_val(b, call, 0, ta, x);
    int64_t n = 1;
    for (int32_t d = 0; d < idx.ndim; d++) n *= idx.sizes[d];
    int64_t s2[2] = {n, 1};
    idx = reshaped(b, idx, 2, s2); /* a negative index is out of range (check_index), as in PyTorch */
    val_t res = shaped(b, r, x.sizes, x.ty);
    res.sizes[dim] = n;
    char offs[128], ss[256], tx[256], ti[256], tr[256];
    dims_list(offs, sizeof(offs), 0, r, dim);
    size_t k = 0;
    for (int32_t d = 0; d < r; d++)
      k += (size_t)snprintf(ss + k, sizeof(ss) - k, "%s%" PRId64, d ? ", " : "", d == dim ? 1 : x.sizes[d]);
    shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
    shape_str(ti, sizeof(ti), 2, s2, "i64");
    shape_str(tr, sizeof(tr), res.ndim, res.sizes, x.ty);
    emit(b,
         "  %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<%s%s%scollapsed_slice_dims "
         "= [%d], start_index_map = [%d], index_vector_dim = 1>, slice_sizes = array<i64: %s>, indices_are_sorted = "
         "false} : (%s, %s) -> %s\n",
         res.id, x.id, idx.id, offs[0] ? "offset_dims = [" : "", offs, offs[0] ? "], " : "", dim, dim, ss, tx, ti, tr);
    return out_val(b, call, 0, ta, res);
  }
  /* gather / scatter: element-wise along dim */
  int64_t nidx = 1;
  for (int32_t d = 0; d < idx.ndim; d++) nidx *= idx.sizes[d];
  if (spec->op == L_GATHER && nidx == 0) return TPU_OK; /* an empty result */
  if (r == 0 || idx.ndim == 0) {
    if (spec->op == L_GATHER) return out_val(b, call, 0, ta, reshaped(b, x, o->ndim, o->sizes));
  }
  /* scatter(self, dim, index, src | value[, reduce[, include_self]]): in the
   * tensor's type, as PyTorch */
  const char* ct = ot.ty;
  if (spec->op != L_GATHER) {
    x = cast(b, x, ct);
    if (nidx == 0) return out_val(b, call, 0, ta, x); /* an empty index writes nothing */
  }
  if (r == 0) {
    x = reshaped(b, x, 1, (int64_t[]){1});
    r = 1;
  }
  if (idx.ndim == 0) idx = reshaped(b, idx, 1, (int64_t[]){1});
  val_t tup = index_tuples(b, idx, dim);
  if (spec->op == L_GATHER) {
    char all[128], tx[256], ti[256], tr[256], ss[128];
    dims_list(all, sizeof(all), 0, r, -1);
    shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
    shape_str(ti, sizeof(ti), tup.ndim, tup.sizes, "i64");
    size_t k = 0;
    for (int32_t d = 0; d < r; d++) k += (size_t)snprintf(ss + k, sizeof(ss) - k, "%s1", d ? ", " : "");
    val_t res = shaped(b, idx.ndim, idx.sizes, x.ty);
    shape_str(tr, sizeof(tr), res.ndim, res.sizes, x.ty);
    emit(b,
         "  %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<collapsed_slice_dims = "
         "[%s], start_index_map = [%s], index_vector_dim = %d>, slice_sizes = array<i64: %s>, indices_are_sorted = "
         "false} : (%s, %s) -> %s\n",
         res.id, x.id, tup.id, all, all, idx.ndim, ss, tx, ti, tr);
    return out_val(b, call, 0, ta, res);
  }
  val_t upd;
  const tpu_k_value_t* sv = arg_at(call, 3);
  if (sv && sv->kind == TPU_K_TENSOR && ta->n > 2) {
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[2], ta->loc[2], &upd));
    upd = cast(b, upd, ct);
    for (int32_t d = 0; d < upd.ndim && d < idx.ndim; d++)
      if (upd.sizes[d] != idx.sizes[d]) upd = slice_dim(b, upd, d, 0, idx.sizes[d]);
    if (upd.ndim == 0) upd = reshaped(b, upd, 1, (int64_t[]){1});
  } else {
    val_t like = {.ndim = idx.ndim, .ty = ct};
    memcpy(like.sizes, idx.sizes, sizeof(int64_t) * (size_t)idx.ndim);
    upd = splat(b, &like, ct, num_at(call, 3, 0.0));
  }
  bool boolean = !strcmp(ct, "i1");
  if (spec->op == L_SCATTER) return out_val(b, call, 0, ta, scatter_elems(b, x, tup, upd, NULL));
  if (spec->op == L_SCATTER_ADD) return out_val(b, call, 0, ta, scatter_elems(b, x, tup, upd, boolean ? "or" : "add"));
  /* scatter.reduce ("add", "multiply"), scatter_reduce.two (sum, prod, mean,
   * amax, amin; include_self) */
  const char* rs = string_at(call, 4, "");
  bool two = strstr(call->op, "scatter_reduce") != NULL;
  bool include_self = !two || int_at(call, 5, 1) != 0;
  bool sum = !strcmp(rs, "sum") || (!two && !strcmp(rs, "add")), mean = two && !strcmp(rs, "mean");
  bool prod = !strcmp(rs, "prod") || (!two && !strcmp(rs, "multiply"));
  bool amax = two && !strcmp(rs, "amax"), amin = two && !strcmp(rs, "amin");
  if (!sum && !mean && !prod && !amax && !amin)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: reduce '%s' is not lowered", call->op, rs);
  if (mean && boolean) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: mean of bool", call->op);
  const char* comb = sum || mean ? (boolean ? "or" : "add")
                     : prod      ? (boolean ? "and" : "multiply")
                     : amax      ? (boolean ? "or" : "maximum")
                                 : (boolean ? "and" : "minimum");
  if (!include_self) { /* the positions written start from the identity */
    char lit[64];
    if (amax || amin) {
      extreme(ct, amin, lit, sizeof(lit));
    } else {
      snprintf(lit, sizeof(lit), "%s", boolean ? (prod ? "true" : "false") : is_fty(ct) ? (prod ? "1.0" : "0.0") : prod ? "1" : "0");
    }
    x = scatter_elems(b, x, tup, splat_lit(b, &upd, ct, lit), NULL);
  }
  val_t res = scatter_elems(b, x, tup, upd, comb);
  if (mean) { /* the sum over the count (at least 1; floor division for integers) */
    val_t cnt = scatter_elems(b, splat(b, &x, ct, include_self ? 1.0 : 0.0), tup, splat(b, &upd, ct, 1.0), "add");
    cnt = binary(b, "maximum", cnt, splat(b, &cnt, ct, 1.0));
    res = arith(b, is_fty(ct) ? L_DIV : L_FLOORDIV, res, cnt);
  }
  return out_val(b, call, 0, ta, res);
}

static tpu_status_t lower_misc(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  type_of(o->dtype, &ot);
  val_t like = {.ndim = o->ndim, .ty = ot.ty};
  memcpy(like.sizes, o->sizes, sizeof(int64_t) * (size_t)o->ndim);
  switch (spec->op) {
    case L_FILL: {
      if (ta->n > 1) { /* fill_.Tensor: a 0-dim value */
        val_t v;
        TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &v));
        return out_val(b, call, 0, ta, broadcast(b, cast(b, v, ot.ty), o->ndim, o->sizes));
      }
      return out_val(b, call, 0, ta, splat(b, &like, ot.ty, num_at(call, 1, 0.0)));
    }
    case L_COPY: {
      val_t v;
      int k = ta->n > 1 && !strcmp(call->op, "aten::copy_") ? 1 : 0;
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[k], ta->loc[k], &v));
      return out_val(b, call, 0, ta, broadcast(b, cast(b, v, ot.ty), o->ndim, o->sizes));
    }
    case L_ARANGE: {
      bool ints = !is_fty(ot.ty) && arg_at(call, 0)->kind != TPU_K_DOUBLE && arg_at(call, 2)->kind != TPU_K_DOUBLE;
      const char* ct = ints ? "i64" : is_half(ot.ty) ? "f32" : "f64";
      val_t i = converted(b, iota(b, o->ndim, o->sizes, 0, "i64"), ct);
      val_t r = binary(b, "add", binary(b, "multiply", i, splat(b, &i, ct, num_at(call, 2, 1.0))),
                       splat(b, &i, ct, num_at(call, 0, 0.0)));
      return out_val(b, call, 0, ta, r);
    }
    case L_TRIU:
    case L_TRIL: {
      val_t x;
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
      x = cast(b, x, ot.ty);
      int32_t r = x.ndim;
      val_t row = iota(b, r, x.sizes, r - 2, "i64"), col = iota(b, r, x.sizes, r - 1, "i64");
      val_t diff = binary(b, "subtract", col, row);
      val_t k = splat(b, &diff, "i64", (double)int_at(call, 1, 0));
      val_t keep = binary_to(b, spec->op == L_TRIU ? "compare GE," : "compare LE,", diff, k, "i1");
      return out_val(b, call, 0, ta, select3(b, keep, x, splat(b, &x, x.ty, 0.0)));
    }
    case L_CAT: {
      int32_t dim = wrap_dim(int_at(call, 1, 0), o->ndim);
      val_t parts[TPU_PJRT_LOWER_MAX_TENSORS];
      int np = 0;
      for (int i = 0; i < ta->n; i++) {
        if (ta->arg[i] != 0) continue;
        const tpu_tensor_t* t = ta->t[i];
        if (t->ndim == 1 && t->sizes[0] == 0 && o->ndim != 1) continue; /* legacy empty */
        bool empty = false;
        for (int32_t d = 0; d < t->ndim; d++) empty |= t->sizes[d] == 0;
        if (empty) continue;
        TPU_RETURN_IF_ERROR(in_val(b, call, t, ta->loc[i], &parts[np]));
        parts[np] = cast(b, parts[np], ot.ty);
        np++;
      }
      if (np == 0) return TPU_OK;
      return out_val(b, call, 0, ta, np == 1 ? parts[0] : concat(b, parts, np, dim));
    }
    case L_MASKED_FILL: {
      val_t x, m, v;
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &m));
      x = broadcast(b, cast(b, x, ot.ty), o->ndim, o->sizes);
      m = broadcast(b, cast(b, m, "i1"), o->ndim, o->sizes);
      if (ta->n > 2 && ta->arg[2] == 2) {
        TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[2], ta->loc[2], &v));
        v = broadcast(b, cast(b, v, ot.ty), o->ndim, o->sizes);
      } else {
        v = splat(b, &x, ot.ty, num_at(call, 2, 0.0));
      }
      return out_val(b, call, 0, ta, select3(b, m, v, x));
    }
    case L_FLIP:
    case L_ROLL: {
      val_t x;
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
      const tpu_k_value_t* dv = arg_at(call, spec->op == L_FLIP ? 1 : 2);
      int64_t nd = dv && dv->kind == TPU_K_INTS ? dv->v.ints.len : 0;
      if (x.ndim == 0) return out_val(b, call, 0, ta, x);
      if (spec->op == L_FLIP) {
        char list[128] = "", t[256];
        size_t n = 0;
        for (int64_t i = 0; i < nd; i++)
          n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", i ? ", " : "", wrap_dim(dv->v.ints.data[i], x.ndim));
        if (nd == 0) return out_val(b, call, 0, ta, x);
        shape_str(t, sizeof(t), x.ndim, x.sizes, x.ty);
        val_t r = x;
        r.id = fresh(b);
        emit(b, "  %%v%d = stablehlo.reverse %%v%d, dims = [%s] : %s\n", r.id, x.id, list, t);
        return out_val(b, call, 0, ta, r);
      }
      /* roll: each dim's last `shift` entries move to its front; no dims:
       * the flattened tensor rolls */
      const tpu_k_value_t* sv = arg_at(call, 1);
      if (!sv || sv->kind != TPU_K_INTS || sv->v.ints.len < (nd ? nd : 1))
        return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected shifts and dims", call->op);
      int64_t numel = 1;
      for (int32_t d = 0; d < x.ndim; d++) numel *= x.sizes[d];
      val_t v = nd ? x : reshaped(b, x, 1, &numel);
      for (int64_t i = 0; i < (nd ? nd : 1); i++) {
        int32_t d = nd ? wrap_dim(dv->v.ints.data[i], v.ndim) : 0;
        int64_t n = v.sizes[d];
        if (n == 0) continue;
        int64_t sh = ((sv->v.ints.data[i] % n) + n) % n;
        if (sh == 0) continue;
        val_t parts[2] = {slice_dim(b, v, d, n - sh, n), slice_dim(b, v, d, 0, n - sh)};
        v = concat(b, parts, 2, d);
      }
      return out_val(b, call, 0, ta, nd ? v : reshaped(b, v, x.ndim, x.sizes));
    }
    default: { /* clamp family: self, min?, max? (numbers or tensors) */
      val_t x;
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
      const char* ct = opmath(ot.ty);
      x = broadcast(b, cast(b, x, ct), o->ndim, o->sizes);
      int ti = 1;
      for (int side = 0; side < 2; side++) {
        int ai = side + 1;
        if (spec->op == L_CLAMP_MAX && side == 0) continue;
        if (spec->op == L_CLAMP_MIN && side == 1) break;
        if (spec->op == L_CLAMP_MAX) ai = 1;
        const tpu_k_value_t* v = arg_at(call, ai);
        val_t bound;
        if (v && v->kind == TPU_K_TENSOR) {
          TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[ti], ta->loc[ti], &bound));
          ti++;
          bound = broadcast(b, cast(b, bound, ct), o->ndim, o->sizes);
        } else if (is_number(v)) {
          bound = splat(b, &x, ct, scalar_of(v));
        } else {
          continue;
        }
        val_t nan = is_fty(ct) ? binary_to(b, "compare NE,", x, x, "i1") : x;
        val_t y = binary(b, side == 0 ? "maximum" : "minimum", x, bound);
        x = is_fty(ct) ? select3(b, nan, x, y) : y;
      }
      return out_val(b, call, 0, ta, x);
    }
  }
}

/* bmm(self, mat2), addmm(self, mat1, mat2, beta, alpha). */
static tpu_status_t lower_mm2(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  const tpu_tensor_t* o = &call->outputs[0];
  ltype_t ot;
  type_of(o->dtype, &ot);
  const char* ct = opmath(ot.ty);
  bool add = spec->op == L_ADDMM;
  val_t x, y, c;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[add ? 1 : 0], ta->loc[add ? 1 : 0], &x));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[add ? 2 : 1], ta->loc[add ? 2 : 1], &y));
  x = cast(b, x, ct);
  y = cast(b, y, ct);
  val_t r = dot(b, x, y,
                add ? "contracting_dims = [1] x [0]" : "batching_dims = [0] x [0], contracting_dims = [2] x [1]",
                o->ndim, o->sizes);
  if (add) {
    double beta = num_at(call, 3, 1.0), alpha = num_at(call, 4, 1.0);
    if (alpha != 1.0) r = binary(b, "multiply", r, splat(b, &r, ct, alpha));
    if (beta != 0.0) {
      TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &c));
      c = broadcast(b, cast(b, c, ct), o->ndim, o->sizes);
      if (beta != 1.0) c = binary(b, "multiply", c, splat(b, &c, ct, beta));
      r = binary(b, "add", c, r);
    }
  }
  return out_val(b, call, 0, ta, r);
}

/* `x` sorted along `d` with its i64 positions: (values, indices). Stable;
 * NaN is above every number (last ascending, first descending). */
static void sort_along(sb_t* b, val_t x, int32_t d, bool desc, val_t* out_vals, val_t* out_idx) {
  if (!strcmp(x.ty, "i1")) x = converted(b, x, "ui8"); /* ordered as false < true */
  const char* ct = x.ty;
  val_t idx = iota(b, x.ndim, x.sizes, d, "i64");
  char tx[256], ti[256];
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, ct);
  shape_str(ti, sizeof(ti), x.ndim, x.sizes, "i64");
  int res = fresh(b), u = res;
  emit(b, "  %%v%d:2 = \"stablehlo.sort\"(%%v%d, %%v%d) ({\n", res, x.id, idx.id);
  emit(b, "  ^bb0(%%a%d: tensor<%s>, %%c%d: tensor<%s>, %%ai%d: tensor<i64>, %%ci%d: tensor<i64>):\n", u, ct, u, ct,
       u, u);
  emit(b, "    %%lt%d = stablehlo.compare %s, %%a%d, %%c%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u,
       desc ? "GT" : "LT", u, u, ct, ct);
  if (is_fty(ct)) {
    emit(b, "    %%an%d = stablehlo.compare NE, %%a%d, %%a%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, u, u, ct,
         ct);
    emit(b, "    %%cn%d = stablehlo.compare NE, %%c%d, %%c%d : (tensor<%s>, tensor<%s>) -> tensor<i1>\n", u, u, u, ct,
         ct);
    /* ascending: a number before a NaN; descending: a NaN before a number */
    emit(b, "    %%nn%d = stablehlo.not %%%s%d : tensor<i1>\n", u, desc ? "cn" : "an", u);
    emit(b, "    %%nb%d = stablehlo.and %%nn%d, %%%s%d : tensor<i1>\n", u, u, desc ? "an" : "cn", u);
    emit(b, "    %%p%d = stablehlo.or %%lt%d, %%nb%d : tensor<i1>\n", u, u, u);
    emit(b, "    stablehlo.return %%p%d : tensor<i1>\n", u);
  } else {
    emit(b, "    stablehlo.return %%lt%d : tensor<i1>\n", u);
  }
  emit(b, "  }) {dimension = %d : i64, is_stable = true} : (%s, %s) -> (%s, %s)\n", d, tx, ti, tx, ti);
  *out_vals = shaped(b, x.ndim, x.sizes, ct);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#0 : (%s) -> %s\n", out_vals->id, res, tx, tx);
  *out_idx = shaped(b, x.ndim, x.sizes, "i64");
  emit(b, "  %%v%d = stablehlo.reshape %%v%d#1 : (%s) -> %s\n", out_idx->id, res, ti, ti);
}

/* sort(self, dim, descending) | .stable(self, stable, dim, descending) |
 * topk(self, k, dim, largest, sorted): values and int64 indices (topk's
 * are sorted, ties in index order). */
static tpu_status_t lower_sort(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  if (call->num_outputs < 2)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected values and indices", call->op);
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  bool topk = spec->op == L_TOPK, stable = strstr(call->op, "stable") != NULL;
  int64_t dimv = int_at(call, topk || stable ? 2 : 1, -1);
  bool desc = topk ? int_at(call, 3, 1) != 0 : int_at(call, stable ? 3 : 2, 0) != 0;
  if (x.ndim == 0) x = reshaped(b, x, 1, (int64_t[]){1});
  int32_t d = wrap_dim(dimv, x.ndim);
  if (d < 0 || d >= x.ndim) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: dim %" PRId64 " out of range", call->op, dimv);
  val_t vals, idx;
  sort_along(b, x, d, desc, &vals, &idx);
  const tpu_tensor_t* o = &call->outputs[0];
  int64_t k = o->ndim ? o->sizes[d] : 1;
  if (k < x.sizes[d]) {
    vals = slice_dim(b, vals, d, 0, k);
    idx = slice_dim(b, idx, d, 0, k);
  }
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, vals));
  return out_val(b, call, 1, ta, idx);
}

/* cumsum / cumprod(self, dim, dtype) in the output's type (half types in
 * float32). */
static tpu_status_t lower_scan(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  ltype_t ot;
  if (!type_of(call->outputs[0].dtype, &ot))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype has no StableHLO type", call->op);
  const char* ct = opmath(ot.ty);
  x = cast(b, x, ct);
  if (x.ndim == 0) return out_val(b, call, 0, ta, x);
  int32_t d = wrap_dim(int_at(call, 1, 0), x.ndim);
  bool prod = spec->op == L_CUMPROD, boolean = !strcmp(ct, "i1");
  const char* op = prod ? (boolean ? "and" : "multiply") : (boolean ? "or" : "add");
  return out_val(b, call, 0, ta, scan_along(b, x, d, op, prod ? 1.0 : 0.0));
}

/* x [B, H, L, D] with cos/sin broadcast over heads: the rotate_half rope
 * on its first R channels (bwd: the transposed rotation). */
static val_t rope_one(sb_t* b, val_t x, val_t cs, val_t sn, int64_t R, bool bwd, const char* dt) {
  int64_t D = x.sizes[3];
  val_t xr = R < D ? slice_dim(b, x, 3, 0, R) : x;
  int64_t s4[4] = {x.sizes[0], x.sizes[1], x.sizes[2], R};
  char from[256], to[256];
  val_t cb[2];
  for (int i = 0; i < 2; i++) {
    val_t t = i ? sn : cs;
    shape_str(from, sizeof(from), t.ndim, t.sizes, t.ty);
    shape_str(to, sizeof(to), 4, s4, t.ty);
    cb[i] = shaped(b, 4, s4, t.ty);
    emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [%s] : (%s) -> %s\n", cb[i].id, t.id,
         t.ndim == 3 ? "0, 2, 3" : "2, 3", from, to);
  }
  val_t r;
  if (!bwd) {
    val_t x1 = slice_dim(b, xr, 3, 0, R / 2), x2 = slice_dim(b, xr, 3, R / 2, R);
    val_t parts[2] = {unary(b, "negate", x2), x1};
    val_t rot = concat(b, parts, 2, 3);
    r = rounded(b, binary(b, "add", rounded(b, binary(b, "multiply", xr, cb[0]), dt),
                          rounded(b, binary(b, "multiply", rot, cb[1]), dt)),
                dt);
  } else {
    val_t gs = rounded(b, binary(b, "multiply", xr, cb[1]), dt);
    val_t g1 = slice_dim(b, gs, 3, 0, R / 2), g2 = slice_dim(b, gs, 3, R / 2, R);
    val_t parts[2] = {g2, unary(b, "negate", g1)};
    val_t rot = concat(b, parts, 2, 3);
    r = rounded(b, binary(b, "add", rounded(b, binary(b, "multiply", xr, cb[0]), dt), rot), dt);
  }
  if (R < D) {
    val_t parts[2] = {r, slice_dim(b, x, 3, R, D)};
    r = concat(b, parts, 2, 3);
  }
  return r;
}

static tpu_status_t lower_rope(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  if (ta->n < 4 || call->num_outputs < 2)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected q, k, cos, sin and two outputs", call->op);
  val_t v[4];
  for (int i = 0; i < 4; i++) {
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[i], ta->loc[i], &v[i]));
    if (v[i].ndim != (i < 2 ? 4 : v[i].ndim) || (i >= 2 && v[i].ndim != 2 && v[i].ndim != 3))
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected ranks", call->op);
  }
  const char* dt = v[0].ty;
  for (int i = 0; i < 4; i++) v[i] = cast(b, v[i], "f32");
  int64_t R = v[2].sizes[v[2].ndim - 1];
  bool bwd = spec->op == L_ROPE_BWD;
  val_t q = rope_one(b, v[0], v[2], v[3], R, bwd, dt);
  val_t k = rope_one(b, v[1], v[2], v[3], R, bwd, dt);
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, q));
  return out_val(b, call, 1, ta, k);
}

/* tpu::rms_norm(x, weight?, eps, unit_offset) and tpu::swiglu(gate, up, act)
 * as runtime/kernels/fused.c computes them: float32 math, the unfused ops'
 * roundings to the input dtype (rms_norm: n = x * rsqrt(mean(x^2) + eps)
 * rounded before the weight unless unit_offset; swiglu: act(gate) rounded
 * before the product). */
/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out,
 * mean, rstd) over the trailing normalized dims, in float32 for half inputs
 * (float64 for float64): mean, the biased variance of x - mean, rstd =
 * rsqrt(var + eps), out = (x - mean) * rstd [* weight] [+ bias]; mean and
 * rstd keep the normalized dims as size 1 (their dtype: PyTorch's meta). */
static tpu_status_t lower_layer_norm(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  const tpu_k_value_t* ns = arg_at(call, 1);
  if (!ns || ns->kind != TPU_K_INTS || call->num_outputs < 3)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  const char* ct = opmath(x.ty);
  if (!is_fty(x.ty)) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input dtype %s", call->op, x.ty);
  int32_t axis = x.ndim - (int32_t)ns->v.ints.len;
  int64_t m = 1;
  bool dims[TPU_MAX_DIMS] = {false};
  for (int32_t d = axis < 0 ? 0 : axis; d < x.ndim; d++) {
    dims[d] = true;
    m *= x.sizes[d];
  }
  if (axis < 0 || m == 0) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no elements to normalise", call->op);
  x = cast(b, x, ct);
  val_t mean = reduce_dims(b, x, dims, "add", "0.0");
  mean = binary(b, "divide", mean, splat(b, &mean, ct, (double)m));
  val_t xc = binary(b, "subtract", x, unreduce(b, mean, dims, &x));
  val_t var = reduce_dims(b, binary(b, "multiply", xc, xc), dims, "add", "0.0");
  var = binary(b, "divide", var, splat(b, &var, ct, (double)m));
  val_t rstd = unary(b, "rsqrt", binary(b, "add", var, splat(b, &var, ct, num_at(call, 4, 1e-5))));
  val_t y = binary(b, "multiply", xc, unreduce(b, rstd, dims, &x));
  for (int i = 1; i < ta->n; i++) { /* weight (argument 2), bias (argument 3) */
    val_t p;
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[i], ta->loc[i], &p));
    p = broadcast(b, cast(b, p, ct), x.ndim, x.sizes);
    y = binary(b, ta->arg[i] == 2 ? "multiply" : "add", y, p);
  }
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, y));
  TPU_RETURN_IF_ERROR(out_val(b, call, 1, ta, mean));
  return out_val(b, call, 2, ta, rstd);
}

/* tpu::group_norm(input, weight?, bias?, group, eps) -> (out, mean?, rstd?)
 * as runtime/kernels/norm.c computes it, in float32 for half inputs (float64
 * for float64): x [N, C, spatial...] viewed as [N, G, C/G, S]; mean and the
 * biased variance of x - mean over (C/G, S); rstd = rsqrt(var + eps); per
 * channel scale = rstd * weight[c], shift = bias[c] - mean * scale and
 * out = x * scale + shift, rounded once; mean and rstd [N, G]. */
static tpu_status_t lower_group_norm(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  const tpu_k_value_t* gv = arg_at(call, 3);
  if (!gv || gv->kind != TPU_K_INT || call->num_outputs < 3 || ta->n < 1 || ta->arg[0] != 0)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  if (!is_fty(x.ty) || x.ndim < 2) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input %s of rank %d",
                                                    call->op, x.ty, (int)x.ndim);
  int64_t N = x.sizes[0], C = x.sizes[1], G = gv->v.i, S = 1;
  for (int32_t d = 2; d < x.ndim; d++) S *= x.sizes[d];
  if (G <= 0 || C % G != 0 || N * C * S == 0)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: %" PRId64 " channels in %" PRId64 " groups, %" PRId64
                     " positions", call->op, C, G, S);
  const char* ct = opmath(x.ty);
  int64_t s4[4] = {N, G, C / G, S}, sg[2] = {N, G};
  val_t xr = reshaped(b, cast(b, x, ct), 4, s4);
  bool dims[4] = {false, false, true, true};
  double m = (double)(C / G) * (double)S;
  val_t mean = reduce_dims(b, xr, dims, "add", "0.0");
  mean = binary(b, "divide", mean, splat(b, &mean, ct, m));
  val_t xc = binary(b, "subtract", xr, unreduce(b, mean, dims, &xr));
  val_t var = reduce_dims(b, binary(b, "multiply", xc, xc), dims, "add", "0.0");
  var = binary(b, "divide", var, splat(b, &var, ct, m));
  val_t rstd = unary(b, "rsqrt", binary(b, "add", var, splat(b, &var, ct, num_at(call, 4, 1e-5))));
  val_t scale = unreduce(b, rstd, dims, &xr), bias = {.id = -1};
  int64_t sc[4] = {1, G, C / G, 1};
  for (int i = 1; i < ta->n; i++) { /* weight (argument 1), bias (argument 2) */
    val_t p;
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[i], ta->loc[i], &p));
    p = broadcast(b, reshaped(b, cast(b, p, ct), 4, sc), 4, s4);
    if (ta->arg[i] == 1) scale = binary(b, "multiply", scale, p);
    else bias = p;
  }
  val_t shift = unary(b, "negate", binary(b, "multiply", unreduce(b, mean, dims, &xr), scale));
  if (bias.id >= 0) shift = binary(b, "add", bias, shift);
  val_t y = reshaped(b, binary(b, "add", binary(b, "multiply", xr, scale), shift), x.ndim, x.sizes);
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, y));
  TPU_RETURN_IF_ERROR(out_val(b, call, 1, ta, reshaped(b, mean, 2, sg)));
  return out_val(b, call, 2, ta, reshaped(b, rstd, 2, sg));
}

/* ---- random ops: Philox4x32-10 as runtime/kernels/random.c draws it ----
 * Element i (row-major) takes counter offset + i (low 64 bits; the high
 * words 0) under key seed; (seed, offset) are the 16 bytes of the node's rng
 * storage, uploaded per call, so the program text does not change with them. */

/* A ui32 tensor<N> constant or scalar splat. */
static int u32_splat(sb_t* b, int64_t n, uint32_t v) {
  int r = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<%u> : tensor<%" PRId64 "xui32>\n", r, v, n);
  return r;
}

static int u_binary(sb_t* b, const char* op, int x, int y, int64_t n, const char* ty) {
  int r = fresh(b);
  emit(b, "  %%v%d = stablehlo.%s %%v%d, %%v%d : tensor<%" PRId64 "x%s>\n", r, op, x, y, n, ty);
  return r;
}

static int u_convert(sb_t* b, int x, int64_t n, const char* from, const char* to) {
  int r = fresh(b);
  emit(b, "  %%v%d = stablehlo.convert %%v%d : (tensor<%" PRId64 "x%s>) -> tensor<%" PRId64 "x%s>\n", r, x, n, from,
       n, to);
  return r;
}

/* word k (0: seed, 1: offset) of the rng storage, broadcast to tensor<N x ui64>. */
static int rng_word(sb_t* b, int k, int64_t n) {
  int sl = fresh(b), rs = fresh(b), bc = fresh(b), r = fresh(b);
  emit(b, "  %%v%d = stablehlo.slice %%v%d [%zu:%zu] : (tensor<%zuxui8>) -> tensor<8xui8>\n", sl,
       b->cur[b->rng->storage], b->rng->offset + 8 * (size_t)k, b->rng->offset + 8 * (size_t)k + 8,
       b->st[b->rng->storage].bytes);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d : (tensor<8xui8>) -> tensor<1x8xui8>\n", rs, sl);
  emit(b, "  %%v%d = stablehlo.bitcast_convert %%v%d : (tensor<1x8xui8>) -> tensor<1xui64>\n", bc, rs);
  emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [0] : (tensor<1xui64>) -> tensor<%" PRId64 "xui64>\n",
       r, bc, n);
  return r;
}

/* The four Philox4x32-10 words of counters ctr (tensor<N x ui64>, offset
 * already added) under the node's seed, as rk_philox: w[0..3] tensor<N x ui32>. */
static void philox(sb_t* b, int ctr, int64_t n, int w[4]) {
  const char* u64 = "ui64";
  int seed = rng_word(b, 0, n);
  int c32 = fresh(b), m32 = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<32> : tensor<%" PRId64 "xui64>\n", c32, n);
  emit(b, "  %%v%d = stablehlo.constant dense<4294967295> : tensor<%" PRId64 "xui64>\n", m32, n);
  int c0 = u_convert(b, u_binary(b, "and", ctr, m32, n, u64), n, u64, "ui32");
  int c1 = u_convert(b, u_binary(b, "shift_right_logical", ctr, c32, n, u64), n, u64, "ui32");
  int c2 = u32_splat(b, n, 0), c3 = u32_splat(b, n, 0);
  int k0 = u_convert(b, u_binary(b, "and", seed, m32, n, u64), n, u64, "ui32");
  int k1 = u_convert(b, u_binary(b, "shift_right_logical", seed, c32, n, u64), n, u64, "ui32");
  int ma = fresh(b), mb = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<3528531795> : tensor<%" PRId64 "xui64>\n", ma, n); /* 0xD2511F53 */
  emit(b, "  %%v%d = stablehlo.constant dense<3449720151> : tensor<%" PRId64 "xui64>\n", mb, n); /* 0xCD9E8D57 */
  int w0 = u32_splat(b, n, 0x9E3779B9u), w1 = u32_splat(b, n, 0xBB67AE85u);
  for (int r = 0; r < 10; ++r) {
    int p0 = u_binary(b, "multiply", u_convert(b, c0, n, "ui32", u64), ma, n, u64);
    int p1 = u_binary(b, "multiply", u_convert(b, c2, n, "ui32", u64), mb, n, u64);
    int p1h = u_convert(b, u_binary(b, "shift_right_logical", p1, c32, n, u64), n, u64, "ui32");
    int p0h = u_convert(b, u_binary(b, "shift_right_logical", p0, c32, n, u64), n, u64, "ui32");
    int n0 = u_binary(b, "xor", u_binary(b, "xor", p1h, c1, n, "ui32"), k0, n, "ui32");
    int n1 = u_convert(b, u_binary(b, "and", p1, m32, n, u64), n, u64, "ui32");
    int n2 = u_binary(b, "xor", u_binary(b, "xor", p0h, c3, n, "ui32"), k1, n, "ui32");
    int n3 = u_convert(b, u_binary(b, "and", p0, m32, n, u64), n, u64, "ui32");
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 = u_binary(b, "add", k0, w0, n, "ui32");
    k1 = u_binary(b, "add", k1, w1, n, "ui32");
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

/* Counters offset + i, i = 0..n-1 (the row-major index), tensor<N x ui64>. */
static int row_major_counters(sb_t* b, int64_t n) {
  int io = fresh(b);
  emit(b, "  %%v%d = stablehlo.iota dim = 0 : tensor<%" PRId64 "xui64>\n", io, n);
  return u_binary(b, "add", rng_word(b, 1, n), io, n, "ui64");
}

/* 53 random bits (words hi:lo, then >> 11: rk_u53's integer), tensor<N x ui64>. */
static int bits53(sb_t* b, int lo, int hi, int64_t n) {
  int c32 = fresh(b), c11 = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<32> : tensor<%" PRId64 "xui64>\n", c32, n);
  emit(b, "  %%v%d = stablehlo.constant dense<11> : tensor<%" PRId64 "xui64>\n", c11, n);
  int h = u_binary(b, "shift_left", u_convert(b, hi, n, "ui32", "ui64"), c32, n, "ui64");
  int x = u_binary(b, "or", h, u_convert(b, lo, n, "ui32", "ui64"), n, "ui64");
  return u_binary(b, "shift_right_logical", x, c11, n, "ui64");
}

/* 53 random bits per element (x >> 11 of Philox words 1:0, as rk_u53), tensor<N x ui64>. */
static int philox_u53(sb_t* b, int64_t n) {
  int w[4];
  philox(b, row_major_counters(b, n), n, w);
  return bits53(b, w[0], w[1], n);
}

/* native_dropout(input, p, train) -> (out, mask) as rk_dropout_run: keep
 * element i when its 53-bit uniform u >= p, i.e. k >= ceil(p 2^53) for its
 * integer k (exact, no float compare); out = x * (1 / (1 - p)) in float64,
 * rounded once to out's dtype (x itself when not training); mask 0/1. */
static tpu_status_t lower_dropout(sb_t* b, const tpu_k_call_t* call, const targs_t* ta) {
  if (ta->n < 1 || ta->arg[0] != 0 || call->num_outputs < 2)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected (input, p, train) and two outputs", call->op);
  double p = num_at(call, 1, 0.5);
  const tpu_k_value_t* tv = arg_at(call, 2);
  bool train = !tv || tv->kind != TPU_K_BOOL || tv->v.b;
  if (!(p >= 0.0 && p <= 1.0))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: dropout probability has to be between 0 and 1, but got %g",
                     call->op, p);
  val_t x;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  if (!is_fty(x.ty)) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input dtype %s", call->op, x.ty);
  int64_t n = 1;
  for (int32_t d = 0; d < x.ndim; d++) n *= x.sizes[d];
  val_t keep;
  if (train) {
    if (!b->rng) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no random state for this node", call->op);
    int k = philox_u53(b, n);
    double t = ceil(p * 9007199254740992.0); /* 2^53 */
    int th = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<%llu> : tensor<%" PRId64 "xui64>\n", th, (unsigned long long)t, n);
    val_t kv = {.id = fresh(b), .ndim = 1, .sizes = {n}, .ty = "i1"};
    emit(b, "  %%v%d = stablehlo.compare GE, %%v%d, %%v%d, UNSIGNED : (tensor<%" PRId64 "xui64>, tensor<%" PRId64
            "xui64>) -> tensor<%" PRId64 "xi1>\n", kv.id, k, th, n, n, n);
    keep = reshaped(b, kv, x.ndim, x.sizes);
  } else {
    keep = splat(b, &x, "i1", 1.0);
  }
  val_t y = cast(b, x, "f64");
  if (train) y = binary(b, "multiply", y, splat(b, &y, "f64", p < 1.0 ? 1.0 / (1.0 - p) : 0.0));
  y = select3(b, keep, y, splat(b, &y, "f64", 0.0));
  TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, y));
  return out_val(b, call, 1, ta, keep);
}

/* An integer tensor<N x ui64> as float64 times 2^-e (exact: under 2^53). */
static val_t scaled_f64(sb_t* b, int k, int64_t n, int e) {
  val_t r = {.id = u_convert(b, k, n, "ui64", "f64"), .ndim = 1, .sizes = {n}, .ty = "f64"};
  return binary(b, "multiply", r, splat(b, &r, "f64", ldexp(1.0, -e)));
}

/* uniform_(self, from, to), normal_(self, mean, std), bernoulli_.float(self, p)
 * as rk_inner draws them: element i of the output walked in memory order
 * (tpu_ku_iter: innermost first, size-1 dims dropped, a stable sort on
 * |stride| when no stride is 0) takes counter offset + i. Values in float64,
 * rounded once to the output's dtype. */
static tpu_status_t lower_random_fill(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  const tpu_tensor_t* o = &call->outputs[0];
  if (!b->rng) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no random state for this node", call->op);
  ltype_t ot;
  if (!type_of(o->dtype, &ot)) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %d", call->op, o->dtype);
  int64_t n = 1;
  for (int32_t d = 0; d < o->ndim; d++) n *= o->sizes[d];
  /* the memory-order rank of every element, tensor<sizes x ui64> */
  int32_t order[TPU_MAX_DIMS], m = 0;
  bool zero = false;
  for (int32_t d = o->ndim - 1; d >= 0; --d) {
    if (o->sizes[d] == 1) continue;
    zero |= o->strides[d] == 0;
    order[m++] = d;
  }
  for (int32_t i = 1; i < m && !zero; i++) { /* stable insertion sort on |stride| */
    for (int32_t j = i; j > 0; --j) {
      int64_t sa = llabs((long long)o->strides[order[j - 1]]), sb = llabs((long long)o->strides[order[j]]);
      if (sa <= sb) break;
      int32_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  }
  char tu[256];
  shape_str(tu, sizeof(tu), o->ndim, o->sizes, "ui64");
  int rank = fresh(b);
  emit(b, "  %%v%d = stablehlo.constant dense<0> : %s\n", rank, tu);
  int64_t mult = 1;
  for (int32_t i = 0; i < m; i++) {
    int io = fresh(b), c = fresh(b), pr = fresh(b), sum = fresh(b);
    emit(b, "  %%v%d = stablehlo.iota dim = %d : %s\n", io, order[i], tu);
    emit(b, "  %%v%d = stablehlo.constant dense<%" PRId64 "> : %s\n", c, mult, tu);
    emit(b, "  %%v%d = stablehlo.multiply %%v%d, %%v%d : %s\n", pr, io, c, tu);
    emit(b, "  %%v%d = stablehlo.add %%v%d, %%v%d : %s\n", sum, rank, pr, tu);
    rank = sum;
    mult *= o->sizes[order[i]];
  }
  int flat = fresh(b);
  emit(b, "  %%v%d = stablehlo.reshape %%v%d : (%s) -> tensor<%" PRId64 "xui64>\n", flat, rank, tu, n);
  int w[4];
  philox(b, u_binary(b, "add", rng_word(b, 1, n), flat, n, "ui64"), n, w);
  val_t v;
  if (spec->op == L_BERNOULLI) {
    double p = num_at(call, 1, 0.5);
    if (!(p >= 0.0 && p <= 1.0))
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: bernoulli_ expects p to be in [0, 1], but got p=%g", call->op, p);
    int th = fresh(b);
    emit(b, "  %%v%d = stablehlo.constant dense<%llu> : tensor<%" PRId64 "xui64>\n", th,
         (unsigned long long)ceil(p * 9007199254740992.0), n);
    val_t lt = {.id = fresh(b), .ndim = 1, .sizes = {n}, .ty = "i1"};
    emit(b, "  %%v%d = stablehlo.compare LT, %%v%d, %%v%d, UNSIGNED : (tensor<%" PRId64 "xui64>, tensor<%" PRId64
            "xui64>) -> tensor<%" PRId64 "xi1>\n", lt.id, bits53(b, w[0], w[1], n), th, n, n, n);
    v = lt;
  } else {
    if (!is_fty(ot.ty)) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %s", call->op, ot.ty);
    double a = num_at(call, 1, 0.0), c = num_at(call, 2, 1.0);
    if (spec->op == L_UNIFORM) {
      if (!(a <= c))
        return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                         "%s: uniform_ expects to return a [from, to) range, but found from=%g > to=%g", call->op, a, c);
      int digits = !strcmp(ot.ty, "f64") ? 53 : !strcmp(ot.ty, "f32") ? 24 : !strcmp(ot.ty, "f16") ? 11 : 8;
      val_t u;
      if (digits == 53) {
        u = scaled_f64(b, bits53(b, w[0], w[1], n), n, 53);
      } else {
        int sh = u32_splat(b, n, (uint32_t)(32 - digits));
        int k = u_convert(b, u_binary(b, "shift_right_logical", w[0], sh, n, "ui32"), n, "ui32", "ui64");
        u = scaled_f64(b, k, n, digits);
      }
      v = binary(b, "add", binary(b, "multiply", u, splat(b, &u, "f64", c - a)), splat(b, &u, "f64", a));
    } else {
      if (!(c >= 0.0))
        return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: normal expects std >= 0.0, but found std %g", call->op, c);
      val_t u1 = scaled_f64(b, bits53(b, w[0], w[1], n), n, 53);
      u1 = binary(b, "subtract", splat(b, &u1, "f64", 1.0), u1); /* (0, 1] */
      val_t u2 = scaled_f64(b, bits53(b, w[2], w[3], n), n, 53);
      val_t r = unary(b, "sqrt", binary(b, "multiply", splat(b, &u1, "f64", -2.0), unary(b, "log", u1)));
      val_t z = binary(b, "multiply", r,
                       unary(b, "cosine", binary(b, "multiply", splat(b, &u2, "f64", 6.28318530717958647692), u2)));
      v = binary(b, "add", splat(b, &z, "f64", a), binary(b, "multiply", splat(b, &z, "f64", c), z));
    }
  }
  return out_val(b, call, 0, ta, reshaped(b, v, o->ndim, o->sizes));
}

static tpu_status_t lower_random(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  return spec->op == L_DROPOUT ? lower_dropout(b, call, ta) : lower_random_fill(b, call, spec, ta);
}

static tpu_status_t lower_fused(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  if (spec->op == L_LAYER_NORM) return lower_layer_norm(b, call, ta);
  if (spec->op == L_GROUP_NORM) return lower_group_norm(b, call, ta);
  val_t v[2] = {{0}};
  int nt = ta->n < 2 ? ta->n : 2;
  if (nt < 1) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected a tensor argument", call->op);
  for (int i = 0; i < nt; i++) TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[i], ta->loc[i], &v[i]));
  const char* dt = v[0].ty;
  if (!is_half(dt) && strcmp(dt, "f32") != 0)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: input dtype %s is not lowered", call->op, dt);
  for (int i = 0; i < nt; i++) v[i] = cast(b, v[i], "f32");
  if (spec->op == L_SWIGLU) {
    if (nt != 2) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected gate and up", call->op);
    const char* act = string_at(call, 2, "silu");
    val_t a;
    if (!strcmp(act, "silu")) {
      a = binary(b, "multiply", v[0], unary(b, "logistic", v[0]));
    } else if (!strcmp(act, "gelu_tanh")) {
      a = gelu_tanh(b, v[0]);
    } else {
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: activation %s is not lowered", call->op, act);
    }
    return out_val(b, call, 0, ta, binary(b, "multiply", rounded(b, a, dt), v[1]));
  }
  val_t x = v[0];
  if (x.ndim < 1) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: a 0-dim input", call->op);
  bool dims[TPU_MAX_DIMS] = {false};
  dims[x.ndim - 1] = true;
  val_t ms = reduce_dims(b, binary(b, "multiply", x, x), dims, "add", "0.0");
  ms = binary(b, "divide", ms, splat(b, &ms, "f32", (double)x.sizes[x.ndim - 1]));
  val_t r = unary(b, "rsqrt", binary(b, "add", ms, splat(b, &ms, "f32", num_at(call, 2, 1e-6))));
  val_t n = binary(b, "multiply", x, unreduce(b, r, dims, &x));
  if (nt < 2) return out_val(b, call, 0, ta, n);
  val_t w = broadcast(b, v[1], x.ndim, x.sizes);
  if (int_at(call, 3, 0)) {
    return out_val(b, call, 0, ta, binary(b, "multiply", n, binary(b, "add", splat(b, &w, "f32", 1.0), w)));
  }
  return out_val(b, call, 0, ta, binary(b, "multiply", w, rounded(b, n, dt)));
}

/* k/v [B, Hkv, S, E] repeated to [B, Hq, S, E] (q head h reads kv head h / G). */
static val_t gqa_expand(sb_t* b, val_t x, int64_t hq) {
  int64_t g = hq / x.sizes[1];
  if (g == 1) return x;
  int64_t s5[5] = {x.sizes[0], x.sizes[1], g, x.sizes[2], x.sizes[3]};
  int64_t s4[4] = {x.sizes[0], hq, x.sizes[2], x.sizes[3]};
  char from[256], to[256];
  shape_str(from, sizeof(from), 4, x.sizes, x.ty);
  shape_str(to, sizeof(to), 5, s5, x.ty);
  val_t e = shaped(b, 5, s5, x.ty);
  emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [0, 1, 3, 4] : (%s) -> %s\n", e.id, x.id, from, to);
  return reshaped(b, e, 4, s4);
}

/* [B, Hq, S, E] summed back to [B, Hkv, S, E]. */
static val_t gqa_reduce(sb_t* b, val_t x, int64_t hkv) {
  int64_t g = x.sizes[1] / hkv;
  if (g == 1) return x;
  int64_t s5[5] = {x.sizes[0], hkv, g, x.sizes[2], x.sizes[3]};
  val_t e = reshaped(b, x, 5, s5);
  bool dims[5] = {false, false, true, false, false};
  return reduce_dims(b, e, dims, "add", "0.0");
}

/* Scaled scores [B, Hq, L, S] with bias and the causal mask applied. */
static tpu_status_t sdpa_scores(sb_t* b, const tpu_k_call_t* call, val_t q, val_t k, const tpu_tensor_t* bias,
                                const tpu_pjrt_loc_t* bloc, bool causal, double scale, val_t* out) {
  int64_t sz[4] = {q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2]};
  val_t s = dot(b, q, k, "batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3]", 4, sz);
  s = binary(b, "multiply", s, splat(b, &s, "f32", scale));
  val_t ninf = splat(b, &s, "f32", -INFINITY);
  if (bias) {
    val_t bv;
    TPU_RETURN_IF_ERROR(in_val(b, call, bias, bloc, &bv));
    if (!strcmp(bv.ty, "i1")) {
      s = select3(b, broadcast(b, bv, 4, sz), s, ninf);
    } else {
      s = binary(b, "add", s, broadcast(b, cast(b, bv, "f32"), 4, sz));
    }
  }
  if (causal) {
    val_t row = iota(b, 4, sz, 2, "i64"), col = iota(b, 4, sz, 3, "i64");
    s = select3(b, binary_to(b, "compare LE,", col, row, "i1"), s, ninf);
  }
  *out = s;
  return TPU_OK;
}

static tpu_status_t lower_sdpa(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  bool bwd = spec->op == L_SDPA_BWD;
  /* tensors by argument position */
  const tpu_tensor_t* at[8] = {NULL};
  const tpu_pjrt_loc_t* al[8] = {NULL};
  for (int i = 0; i < ta->n; i++) {
    if (ta->arg[i] < 8) {
      at[ta->arg[i]] = ta->t[i];
      al[ta->arg[i]] = ta->loc[i];
    }
  }
  int o = bwd ? 1 : 0; /* q's argument */
  if (!at[o] || !at[o + 1] || !at[o + 2] || (bwd && (!at[0] || !at[5] || !at[6])))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: missing tensors", call->op);
  val_t q, k, v;
  TPU_RETURN_IF_ERROR(in_val(b, call, at[o], al[o], &q));
  TPU_RETURN_IF_ERROR(in_val(b, call, at[o + 1], al[o + 1], &k));
  TPU_RETURN_IF_ERROR(in_val(b, call, at[o + 2], al[o + 2], &v));
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4 || k.sizes[1] == 0 || q.sizes[1] % k.sizes[1] != 0)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: expected 4-d q, k, v", call->op);
  int64_t hq = q.sizes[1], hkv = k.sizes[1];
  q = cast(b, q, "f32");
  val_t ke = gqa_expand(b, cast(b, k, "f32"), hq), ve = gqa_expand(b, cast(b, v, "f32"), hq);
  bool causal = int_at(call, bwd ? 7 : 4, 0) != 0;
  double scale = num_at(call, bwd ? 8 : 5, 1.0);
  val_t s;
  TPU_RETURN_IF_ERROR(sdpa_scores(b, call, q, ke, at[o + 3], al[o + 3], causal, scale, &s));
  bool d3[4] = {false, false, false, true};
  int64_t osz[4] = {q.sizes[0], hq, q.sizes[2], v.sizes[3]};
  if (!bwd) {
    val_t m = reduce_dims(b, s, d3, "maximum", "0xFFF0000000000000");
    val_t isinf = binary_to(b, "compare EQ,", m, splat(b, &m, "f32", -INFINITY), "i1");
    val_t ms = select3(b, isinf, splat(b, &m, "f32", 0.0), m);
    val_t p = unary(b, "exponential", binary(b, "subtract", s, unreduce(b, ms, d3, &s)));
    val_t l = reduce_dims(b, p, d3, "add", "0.0");
    val_t pv = dot(b, p, ve, "batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]", 4, osz);
    val_t lb = unreduce(b, l, d3, &pv);
    val_t zero = binary_to(b, "compare EQ,", lb, splat(b, &lb, "f32", 0.0), "i1");
    val_t out = select3(b, zero, splat(b, &pv, "f32", 0.0), binary(b, "divide", pv, lb));
    val_t lse = binary(b, "add", ms, unary(b, "log", l));
    TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, out));
    if (call->num_outputs > 1) TPU_RETURN_IF_ERROR(out_val(b, call, 1, ta, lse));
    return TPU_OK;
  }
  val_t g, out, lse;
  TPU_RETURN_IF_ERROR(in_val(b, call, at[0], al[0], &g));
  TPU_RETURN_IF_ERROR(in_val(b, call, at[5], al[5], &out));
  TPU_RETURN_IF_ERROR(in_val(b, call, at[6], al[6], &lse));
  g = cast(b, g, "f32");
  out = cast(b, out, "f32");
  lse = cast(b, lse, "f32");
  int64_t l3[3] = {q.sizes[0], hq, q.sizes[2]};
  if (lse.ndim != 3) lse = reshaped(b, lse, 3, l3);
  val_t lb = unreduce(b, lse, d3, &s);
  val_t dead = binary_to(b, "compare EQ,", lb, splat(b, &lb, "f32", -INFINITY), "i1");
  val_t p = select3(b, dead, splat(b, &s, "f32", 0.0), unary(b, "exponential", binary(b, "subtract", s, lb)));
  int64_t vsz[4] = {q.sizes[0], hq, k.sizes[2], v.sizes[3]};
  int64_t ksz[4] = {q.sizes[0], hq, k.sizes[2], k.sizes[3]};
  int64_t qsz[4] = {q.sizes[0], hq, q.sizes[2], q.sizes[3]};
  int64_t ssz[4] = {q.sizes[0], hq, q.sizes[2], k.sizes[2]};
  val_t dv = dot(b, p, g, "batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2]", 4, vsz);
  val_t dp = dot(b, g, ve, "batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3]", 4, ssz);
  val_t dd = reduce_dims(b, binary(b, "multiply", g, out), d3, "add", "0.0");
  val_t ds = binary(b, "multiply", p, binary(b, "subtract", dp, unreduce(b, dd, d3, &dp)));
  val_t dq = dot(b, ds, ke, "batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]", 4, qsz);
  dq = binary(b, "multiply", dq, splat(b, &dq, "f32", scale));
  val_t dk = dot(b, ds, q, "batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2]", 4, ksz);
  dk = binary(b, "multiply", dk, splat(b, &dk, "f32", scale));
  val_t outs[4] = {dq, gqa_reduce(b, dk, hkv), gqa_reduce(b, dv, hkv), ds};
  for (int i = 0; i < 4 && i < call->num_outputs; i++) TPU_RETURN_IF_ERROR(out_val(b, call, i, ta, outs[i]));
  return TPU_OK;
}

/* The binary arithmetic ops in compute type x.ty (PyTorch's semantics). */
static val_t arith(sb_t* b, lop_t op, val_t x, val_t y) {
  bool fl = is_fty(x.ty);
  switch (op) {
    case L_ADD: return binary(b, "add", x, y);
    case L_SUB: return binary(b, "subtract", x, y);
    case L_MUL: return !strcmp(x.ty, "i1") ? binary(b, "and", x, y) : binary(b, "multiply", x, y);
    case L_DIV: return binary(b, "divide", x, y);
    case L_MAX: return !strcmp(x.ty, "i1") ? binary(b, "or", x, y) : binary(b, "maximum", x, y);
    case L_MIN: return !strcmp(x.ty, "i1") ? binary(b, "and", x, y) : binary(b, "minimum", x, y);
    case L_BAND: case L_LAND: return binary(b, "and", x, y);
    case L_BOR: case L_LOR: return binary(b, "or", x, y);
    case L_BXOR: case L_LXOR: return binary(b, "xor", x, y);
    case L_ATAN2: return binary(b, "atan2", x, y);
    case L_POWT: return binary(b, "power", x, y);
    /* out-of-range amounts (negative, or at least the width): 0, or the sign for >> */
    case L_SHL: return binary(b, "shift_left", x, y);
    case L_SHR: return binary(b, x.ty[0] == 'u' ? "shift_right_logical" : "shift_right_arithmetic", x, y);
    case L_DIVTRUNC: /* integer division truncates */
      return fl ? unary_more(b, NULL, L_TRUNC, binary(b, "divide", x, y)) : binary(b, "divide", x, y);
    case L_FMOD: return binary(b, "remainder", x, y);
    case L_REM: {
      val_t r = binary(b, "remainder", x, y);
      val_t z = splat(b, &r, r.ty, 0.0);
      val_t nz = binary_to(b, "compare NE,", r, z, "i1");
      val_t rn = binary_to(b, "compare LT,", r, z, "i1"), yn = binary_to(b, "compare LT,", y, z, "i1");
      val_t fix = binary(b, "and", nz, binary(b, "xor", rn, yn));
      return select3(b, fix, binary(b, "add", r, y), r);
    }
    default: { /* floor_divide */
      if (fl) return unary(b, "floor", binary(b, "divide", x, y));
      val_t q = binary(b, "divide", x, y);
      val_t r = binary(b, "remainder", x, y);
      val_t z = splat(b, &r, r.ty, 0.0);
      val_t nz = binary_to(b, "compare NE,", r, z, "i1");
      val_t rn = binary_to(b, "compare LT,", r, z, "i1"), yn = binary_to(b, "compare LT,", y, z, "i1");
      val_t fix = binary(b, "and", nz, binary(b, "xor", rn, yn));
      return select3(b, fix, binary(b, "subtract", q, splat(b, &q, q.ty, 1.0)), q);
    }
  }
}

static const char* string_at(const tpu_k_call_t* call, int i, const char* dflt) {
  return i < call->num_args && call->args[i].kind == TPU_K_STRING && call->args[i].v.s ? call->args[i].v.s : dflt;
}

/* gelu with the tanh approximation. */
static val_t gelu_tanh(sb_t* b, val_t x) {
  val_t half = splat(b, &x, x.ty, 0.5), one = splat(b, &x, x.ty, 1.0);
  val_t x3 = binary(b, "multiply", binary(b, "multiply", x, x), x);
  val_t in = binary(b, "multiply", splat(b, &x, x.ty, 0.7978845608028654),
                    binary(b, "add", x, binary(b, "multiply", splat(b, &x, x.ty, 0.044715), x3)));
  return binary(b, "multiply", binary(b, "multiply", half, x), binary(b, "add", one, unary(b, "tanh", in)));
}

static val_t unary_more(sb_t* b, const tpu_k_call_t* call, lop_t op, val_t x) {
  bool fl = is_fty(x.ty);
  switch (op) {
    case L_SILU: return binary(b, "multiply", x, unary(b, "logistic", x));
    case L_ERF: return erf_of(b, x);
    case L_GELU: {
      if (!strcmp(string_at(call, 1, "none"), "tanh")) return gelu_tanh(b, x);
      val_t half = splat(b, &x, x.ty, 0.5), one = splat(b, &x, x.ty, 1.0);
      val_t e = erf_of(b, binary(b, "multiply", x, splat(b, &x, x.ty, 0.7071067811865476)));
      return binary(b, "multiply", binary(b, "multiply", x, half), binary(b, "add", one, e));
    }
    case L_BNOT: case L_LNOT: return unary(b, "not", x);
    case L_FLOOR: return fl ? unary(b, "floor", x) : x;
    case L_CEIL: return fl ? unary(b, "ceil", x) : x;
    case L_ROUND: return fl ? unary(b, "round_nearest_even", x) : x;
    case L_TRUNC: {
      if (!fl) return x;
      val_t neg = binary_to(b, "compare LT,", x, splat(b, &x, x.ty, 0.0), "i1");
      return select3(b, neg, unary(b, "ceil", x), unary(b, "floor", x));
    }
    case L_SIGN:
      if (!strcmp(x.ty, "i1")) return x;
      if (x.ty[0] == 'u') return converted(b, binary_to(b, "compare NE,", x, splat(b, &x, x.ty, 0.0), "i1"), x.ty);
      return unary(b, "sign", x);
    case L_RECIP: return binary(b, "divide", splat(b, &x, x.ty, 1.0), x);
    case L_LOG1P: return unary(b, "log_plus_one", x);
    case L_EXPM1: return unary(b, "exponential_minus_one", x);
    case L_LOG2: return binary(b, "divide", unary(b, "log", x), splat(b, &x, x.ty, 0.6931471805599453));
    case L_EXP2: return binary(b, "power", splat(b, &x, x.ty, 2.0), x);
    case L_TAN: return unary(b, "tan", x);
    default: return !strcmp(x.ty, "i1") ? binary(b, "and", x, x) : binary(b, "multiply", x, x); /* square */
  }
}

/* The int list argument i (its n values into v; an int broadcasts). */
static bool ints_at(const tpu_k_call_t* call, int i, int32_t n, int64_t* v) {
  const tpu_k_value_t* a = arg_at(call, i);
  if (!a) return false;
  for (int32_t k = 0; k < n; k++) {
    if (a->kind == TPU_K_INTS && a->v.ints.len == n) v[k] = a->v.ints.data[k];
    else if (a->kind == TPU_K_INTS && a->v.ints.len == 1) v[k] = a->v.ints.data[0];
    else if (a->kind == TPU_K_INT) v[k] = a->v.i;
    else return false;
  }
  return true;
}

/* A convolution's geometry: sd spatial dims, stride, padding, dilation,
 * output_padding (transposed only), groups. */
typedef struct {
  int32_t sd;
  int64_t st[TPU_MAX_DIMS], pad[TPU_MAX_DIMS], dil[TPU_MAX_DIMS], opad[TPU_MAX_DIMS], groups;
  bool transposed;
} conv_geom_t;

/* Arguments 3.. of tpu::conv_fwd / conv_bwd after the tensors (first at
 * `at`): stride, padding, dilation, transposed, output_padding, groups. */
static tpu_status_t conv_geom(const tpu_k_call_t* call, int at, int32_t sd, conv_geom_t* c) {
  c->sd = sd;
  c->transposed = int_at(call, at + 3, 0) != 0;
  c->groups = int_at(call, at + 5, 1);
  for (int32_t d = 0; d < sd; d++) c->opad[d] = 0;
  if (sd < 1 || !ints_at(call, at, sd, c->st) || !ints_at(call, at + 1, sd, c->pad) ||
      !ints_at(call, at + 2, sd, c->dil) || (c->transposed && !ints_at(call, at + 4, sd, c->opad)) || c->groups < 1)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
  return TPU_OK;
}

/* One stablehlo.convolution with the lhs/rhs/out layouts given as labels
 * (e.g. "b, f, 0, 1"). lo/hi: padding; ws: window strides; ld/rd: lhs/rhs
 * dilation. */
static val_t convolution(sb_t* b, val_t x, const char* xl, val_t w, const char* wl, const char* yl, int32_t sd,
                         const int64_t* lo, const int64_t* hi, const int64_t* ws, const int64_t* ld,
                         const int64_t* rd, int64_t fgc, int64_t bgc, int32_t ndim, const int64_t* ysizes) {
  char win[512], tx[256], tw[256], tr[256];
  size_t nw = 0;
  const char* keys[4] = {"stride", "pad", "lhs_dilate", "rhs_dilate"};
  const int64_t* vals[4] = {ws, NULL, ld, rd};
  for (int k = 0; k < 4; k++) {
    nw += (size_t)snprintf(win + nw, sizeof(win) - nw, "%s%s = [", k ? ", " : "", keys[k]);
    for (int32_t d = 0; d < sd; d++) {
      if (k == 1) {
        nw += (size_t)snprintf(win + nw, sizeof(win) - nw, "%s[%" PRId64 ", %" PRId64 "]", d ? ", " : "", lo[d], hi[d]);
      } else {
        nw += (size_t)snprintf(win + nw, sizeof(win) - nw, "%s%" PRId64, d ? ", " : "", vals[k][d]);
      }
    }
    nw += (size_t)snprintf(win + nw, sizeof(win) - nw, "]");
  }
  val_t y = shaped(b, ndim, ysizes, x.ty);
  shape_str(tx, sizeof(tx), x.ndim, x.sizes, x.ty);
  shape_str(tw, sizeof(tw), w.ndim, w.sizes, w.ty);
  shape_str(tr, sizeof(tr), y.ndim, y.sizes, y.ty);
  emit(b,
       "  %%v%d = stablehlo.convolution(%%v%d, %%v%d) dim_numbers = [%s]x[%s]->[%s], window = {%s} "
       "{batch_group_count = %" PRId64 " : i64, feature_group_count = %" PRId64 " : i64} : (%s, %s) -> %s\n",
       y.id, x.id, w.id, xl, wl, yl, win, bgc, fgc, tx, tw, tr);
  return y;
}

static void conv_labels(char* buf, size_t cap, const char* a, const char* c, int32_t sd) {
  size_t n = (size_t)snprintf(buf, cap, "%s, %s", a, c);
  for (int32_t d = 0; d < sd; d++) n += (size_t)snprintf(buf + n, cap - n, ", %d", d);
}

static val_t transposed_dims(sb_t* b, val_t v, const int32_t* perm) {
  int64_t ts[TPU_MAX_DIMS + 1];
  char list[128], tf[256], tt[256];
  size_t n = 0;
  for (int32_t d = 0; d < v.ndim; d++) {
    ts[d] = v.sizes[perm[d]];
    n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", d ? ", " : "", perm[d]);
  }
  val_t r = shaped(b, v.ndim, ts, v.ty);
  shape_str(tf, sizeof(tf), v.ndim, v.sizes, v.ty);
  shape_str(tt, sizeof(tt), r.ndim, r.sizes, r.ty);
  emit(b, "  %%v%d = stablehlo.transpose %%v%d, dims = [%s] : (%s) -> %s\n", r.id, v.id, list, tf, tt);
  return r;
}

/* y [N, *, out...] = the convolution of x [N, C, ...] with w as PyTorch
 * lays it out (regular: [O, C/g, k...]; transposed: [C, O/g, k...]). A
 * transposed convolution is the regular one over x dilated by the stride,
 * padded by dilation * (k - 1) - padding (plus output_padding after), with
 * each group's kernel transposed and flipped. */
static tpu_status_t conv_forward(sb_t* b, const tpu_k_call_t* call, val_t x, val_t w, const conv_geom_t* c,
                                 const int64_t* ysizes, val_t* out) {
  const int32_t sd = c->sd, r = sd + 2;
  const int64_t g = c->groups;
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, ld[TPU_MAX_DIMS] = {0}, ws[TPU_MAX_DIMS] = {0};
  for (int32_t d = 0; d < sd; d++) {
    if (!c->transposed) {
      lo[d] = hi[d] = c->pad[d];
      ld[d] = 1;
      ws[d] = c->st[d];
    } else {
      const int64_t e = c->dil[d] * (w.sizes[2 + d] - 1) - c->pad[d];
      lo[d] = e;
      hi[d] = e + c->opad[d];
      ld[d] = c->st[d];
      ws[d] = 1;
    }
    if (lo[d] < 0 || hi[d] < 0)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: padding beyond the kernel's extent is not lowered", call->op);
  }
  if (c->transposed) { /* [G*Cin_g, Cout_g, k...] -> [G*Cout_g, Cin_g, k...], flipped */
    const int64_t cin_g = w.sizes[0] / g, cout_g = w.sizes[1];
    int64_t s5[TPU_MAX_DIMS + 1] = {g, cin_g, cout_g};
    int32_t perm[TPU_MAX_DIMS + 1] = {0, 2, 1};
    for (int32_t d = 0; d < sd; d++) {
      s5[3 + d] = w.sizes[2 + d];
      perm[3 + d] = 3 + d;
    }
    val_t wt = transposed_dims(b, reshaped(b, w, r + 1, s5), perm);
    int64_t s4[TPU_MAX_DIMS] = {g * cout_g, cin_g};
    for (int32_t d = 0; d < sd; d++) s4[2 + d] = s5[3 + d];
    w = reshaped(b, wt, r, s4);
    char sp[64], tw[256];
    dims_list(sp, sizeof(sp), 2, r, -1);
    shape_str(tw, sizeof(tw), w.ndim, w.sizes, w.ty);
    val_t rev = w;
    rev.id = fresh(b);
    emit(b, "  %%v%d = stablehlo.reverse %%v%d, dims = [%s] : %s\n", rev.id, w.id, sp, tw);
    w = rev;
  }
  char xl[64], wl[64];
  conv_labels(xl, sizeof(xl), "b", "f", sd);
  conv_labels(wl, sizeof(wl), "o", "i", sd);
  *out = convolution(b, x, xl, w, wl, xl, sd, lo, hi, ws, ld, c->dil, g, 1, r, ysizes);
  return TPU_OK;
}

/* dW [O, C/g, k...] of the regular convolution y = conv(x, W): the
 * correlation of x (its channels as the batch, split in g groups; its batch
 * contracted) with dy (its batch as input features), window strides the
 * dilation, the kernel dilated by the stride. */
static val_t conv_grad_weight(sb_t* b, val_t x, val_t dy, const conv_geom_t* c, const int64_t* ksizes) {
  const int32_t sd = c->sd, r = sd + 2;
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, one[TPU_MAX_DIMS] = {0};
  for (int32_t d = 0; d < sd; d++) {
    one[d] = 1;
    lo[d] = c->pad[d];
    /* padded extent the window needs: (k - 1) * d + (Y - 1) * s + 1 */
    hi[d] = (ksizes[d] - 1) * c->dil[d] + (dy.sizes[2 + d] - 1) * c->st[d] + 1 - x.sizes[2 + d] - c->pad[d];
  }
  int64_t os[TPU_MAX_DIMS] = {x.sizes[1] / c->groups, dy.sizes[1]};
  for (int32_t d = 0; d < sd; d++) os[2 + d] = ksizes[d];
  char xl[64], wl[64], yl[64];
  conv_labels(xl, sizeof(xl), "f", "b", sd);
  conv_labels(wl, sizeof(wl), "i", "o", sd);
  conv_labels(yl, sizeof(yl), "b", "f", sd);
  val_t cw = convolution(b, x, xl, dy, wl, yl, sd, lo, hi, c->dil, one, c->st, 1, c->groups, r, os);
  int32_t perm[TPU_MAX_DIMS] = {1, 0};
  for (int32_t d = 0; d < sd; d++) perm[2 + d] = 2 + d;
  return transposed_dims(b, cw, perm);
}

/* tpu::conv_fwd(input, weight, bias?, stride, padding, dilation,
 * transposed, output_padding, groups), in float32 for half types (the host
 * kernels accumulate in float32 and round once). */
static tpu_status_t lower_conv(sb_t* b, const tpu_k_call_t* call, const lspec_t* spec, const targs_t* ta) {
  /* conv_bwd: the first wanted gradient (grad_input is not wanted for a first layer's input) */
  const tpu_tensor_t* o = &call->outputs[0];
  for (int32_t j = 1; j < call->num_outputs && o->dtype == TPU_DTYPE_INVALID; ++j) o = &call->outputs[j];
  ltype_t ot;
  if (!type_of(o->dtype, &ot) || !is_fty(ot.ty) || ta->n < 2)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: only floating convolutions are lowered", call->op);
  const char* ct = opmath(ot.ty);
  if (spec->op == L_CONV_BWD) {
    /* (grad_output, input, weight, stride, padding, dilation, transposed,
     * output_padding, groups, output_mask) -> (grad_input?, grad_weight?, grad_bias?) */
    if (ta->n < 3) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
    val_t dy, x, w;
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &dy));
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &x));
    TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[2], ta->loc[2], &w));
    conv_geom_t c;
    TPU_RETURN_IF_ERROR(conv_geom(call, 3, x.ndim - 2, &c));
    dy = cast(b, dy, ct);
    x = cast(b, x, ct);
    w = cast(b, w, ct);
    if (call->num_outputs > 0 && call->outputs[0].dtype != TPU_DTYPE_INVALID) {
      /* the input's gradient: the convolution of the other kind, output
       * padding making up the positions the forward's floor dropped */
      conv_geom_t gi = c;
      gi.transposed = !c.transposed;
      for (int32_t d = 0; d < c.sd; d++) {
        const int64_t k = w.sizes[2 + d];
        gi.opad[d] = c.transposed ? 0
                                  : x.sizes[2 + d] - ((dy.sizes[2 + d] - 1) * c.st[d] - 2 * c.pad[d] +
                                                      c.dil[d] * (k - 1) + 1);
      }
      val_t dx;
      TPU_RETURN_IF_ERROR(conv_forward(b, call, dy, w, &gi, x.sizes, &dx));
      TPU_RETURN_IF_ERROR(out_val(b, call, 0, ta, dx));
    }
    if (call->num_outputs > 1 && call->outputs[1].dtype != TPU_DTYPE_INVALID) {
      /* a transposed convolution's weight gradient is the regular one's
       * with the roles of input and output gradient exchanged */
      val_t dw = c.transposed ? conv_grad_weight(b, dy, x, &c, w.sizes + 2) : conv_grad_weight(b, x, dy, &c, w.sizes + 2);
      TPU_RETURN_IF_ERROR(out_val(b, call, 1, ta, dw));
    }
    if (call->num_outputs > 2 && call->outputs[2].dtype != TPU_DTYPE_INVALID) {
      bool dims[TPU_MAX_DIMS];
      for (int32_t d = 0; d < dy.ndim; d++) dims[d] = d != 1;
      TPU_RETURN_IF_ERROR(out_val(b, call, 2, ta, reduce_dims(b, dy, dims, "add", "0.0")));
    }
    return TPU_OK;
  }
  val_t x, w, bias;
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[0], ta->loc[0], &x));
  TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[1], ta->loc[1], &w));
  const bool has_bias = ta->n > 2 && ta->arg[2] == 2;
  if (has_bias) TPU_RETURN_IF_ERROR(in_val(b, call, ta->t[2], ta->loc[2], &bias));
  const int32_t r = x.ndim;
  if (r < 3 || w.ndim != r || o->ndim != r) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected ranks", call->op);
  conv_geom_t c;
  TPU_RETURN_IF_ERROR(conv_geom(call, 3, r - 2, &c));
  val_t y;
  TPU_RETURN_IF_ERROR(conv_forward(b, call, cast(b, x, ct), cast(b, w, ct), &c, o->sizes, &y));
  if (has_bias) {
    val_t bc = cast(b, bias, ct);
    char from[128], tr[256];
    shape_str(from, sizeof(from), bc.ndim, bc.sizes, ct);
    shape_str(tr, sizeof(tr), y.ndim, y.sizes, ct);
    val_t bb = shaped(b, r, o->sizes, ct);
    emit(b, "  %%v%d = stablehlo.broadcast_in_dim %%v%d, dims = [1] : (%s) -> %s\n", bb.id, bc.id, from, tr);
    y = binary(b, "add", y, bb);
  }
  return out_val(b, call, 0, ta, y);
}

static tpu_status_t lower_node(sb_t* b, const tpu_k_call_t* call, const tpu_pjrt_loc_t* locs) {
  const lspec_t* spec = spec_of(call->op);
  if (!spec || call->num_outputs < 1 || !call->outputs)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no StableHLO lowering", call->op);
  if (spec->family > F_REDUCE) {
    targs_t ta = {.n = 0};
    int li = 0;
    for (int32_t i = 0; i < call->num_args; i++) {
      const tpu_k_value_t* v = &call->args[i];
      int64_t n = v->kind == TPU_K_TENSOR ? 1 : v->kind == TPU_K_TENSORS ? v->v.tensors.len : 0;
      for (int64_t j = 0; j < n; j++) {
        const tpu_tensor_t* t = v->kind == TPU_K_TENSOR ? v->v.tensor : &v->v.tensors.data[j];
        if (v->kind == TPU_K_TENSORS && t->dtype == TPU_DTYPE_INVALID) { /* absent: a loc of storage -1 */
          li++;
          continue;
        }
        if (ta.n == TPU_PJRT_LOWER_MAX_TENSORS)
          return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: more than %d tensors", call->op, TPU_PJRT_LOWER_MAX_TENSORS);
        ta.t[ta.n] = t;
        ta.arg[ta.n] = i;
        ta.loc[ta.n++] = &locs[li++];
      }
    }
    ta.oloc = &locs[li];
    bool writes = false; /* a node whose outputs have no bytes lowers to nothing */
    for (int32_t k = 0; k < call->num_outputs; k++) writes |= ta.oloc[k].storage >= 0;
    if (!writes) return TPU_OK;
    if (ta.n < 1 && spec->op != L_ARANGE)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: unexpected arguments", call->op);
    for (int32_t k = 0; k < call->num_outputs; k++) {
      ltype_t t;
      if (call->outputs[k].dtype != TPU_DTYPE_INVALID && !type_of(call->outputs[k].dtype, &t))
        return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: output dtype %d has no StableHLO type", call->op,
                         call->outputs[k].dtype);
    }
    switch (spec->family) {
      case F_SOFTMAX: return lower_softmax(b, call, spec, &ta);
      case F_REDUCE2: return lower_reduce2(b, call, spec, &ta);
      case F_INDEX: return lower_index(b, call, spec, &ta);
      case F_MM2: return lower_mm2(b, call, spec, &ta);
      case F_ROPE: return lower_rope(b, call, spec, &ta);
      case F_SDPA: return lower_sdpa(b, call, spec, &ta);
      case F_CONV: return lower_conv(b, call, spec, &ta);
      case F_SORT: return lower_sort(b, call, spec, &ta);
      case F_SCAN: return lower_scan(b, call, spec, &ta);
      case F_FUSED: return lower_fused(b, call, spec, &ta);
      case F_RANDOM: return lower_random(b, call, spec, &ta);
      default: return lower_misc(b, call, spec, &ta);
    }
  }
  if (call->num_outputs != 1)
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
  bool logical = spec->op == L_LAND || spec->op == L_LOR || spec->op == L_LXOR || spec->op == L_LNOT;
  if (logical) ct = "i1";
  /* integer inputs of float-only unary ops compute in the output's type;
   * rounding ops on integers are the identity */
  val_t in[3];
  for (int k = 0; k < nin; k++) {
    const char* want = spec->family == F_WHERE && k == 0 ? "i1" : ct;
    in[k] = read_view(b, tens[k], tlocs[k], &it[k]);
    if (!strcmp(want, "i1") && strcmp(in[k].ty, "i1") != 0) {
      in[k] = binary_to(b, "compare NE,", in[k], splat(b, &in[k], in[k].ty, 0.0), "i1");
    } else {
      in[k] = cast(b, in[k], want);
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
      lop_t aop = spec->op;
      if (aop == L_DIVMODE) { /* div(..., rounding_mode=None|"trunc"|"floor"): checked by the kernel table */
        const char* mode = string_at(call, 2, NULL);
        aop = !mode ? L_DIV : !strcmp(mode, "floor") ? L_FLOORDIV : L_DIVTRUNC;
      }
      if (aop == L_DIVTRUNC && is_half(ot.ty)) /* as PyTorch's CPU: the quotient rounded to the half type, then truncated */
        r = unary_more(b, NULL, L_TRUNC, cast(b, cast(b, binary(b, "divide", x, y), ot.ty), ct));
      else
        r = arith(b, aop, x, y);
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
        case L_ABS: r = x.ty[0] == 'u' ? x : unary(b, "abs", x); break;
        case L_SIGMOID: r = unary(b, "logistic", x); break;
        case L_RELU: r = binary(b, "maximum", x, splat(b, &x, ct, 0.0)); break;
        default: r = unary_more(b, call, spec->op, x); break;
      }
    }
  }
  r = converted(b, r, ot.ty);
  write_out(b, r, o, oloc, &ot);
  return TPU_OK;
}

void tpu_pjrt_program_free(tpu_pjrt_program_t* p) {
  if (!p) return;
  free(p->text);
  free(p->checks);
  *p = (tpu_pjrt_program_t){0};
}

tpu_status_t tpu_pjrt_check_status(const tpu_pjrt_check_t* c, const int64_t row[2]) {
  if (row[0] == TPU_PJRT_CHECK_NONE) return TPU_OK;
  if (c->dim == TPU_PJRT_CHECK_SOURCE) /* as the host kernel says it */
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: Number of elements of source < number of ones in mask", c->op);
  return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "%s: index %lld is out of bounds for dimension %d with size %lld", c->op,
                   (long long)row[1], (int)c->dim, (long long)c->size);
}

/* The check output: the rows of every check, tensor<Gx2xi64>. */
static int check_output(sb_t* b) {
  if (b->num_checks == 1) return b->check_rows[0];
  int r = fresh(b);
  emit(b, "  %%v%d = stablehlo.concatenate", r);
  for (int32_t i = 0; i < b->num_checks; i++) emit(b, "%s %%v%d", i ? "," : "", b->check_rows[i]);
  emit(b, ", dim = 0 : (");
  for (int32_t i = 0; i < b->num_checks; i++) emit(b, "%stensor<1x2xi64>", i ? ", " : "");
  emit(b, ") -> tensor<%dx2xi64>\n", (int)b->num_checks);
  return r;
}

/* The program's result types: the result storages, then the check output. */
static void result_types(sb_t* b, const tpu_pjrt_storage_t* storages, int32_t num_storages, int32_t num_checks) {
  int nres = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].result) emit(b, "%stensor<%zuxui8>", nres++ ? ", " : "", storages[s].bytes);
  }
  if (num_checks > 0) emit(b, "%stensor<%dx2xi64>", nres ? ", " : "", (int)num_checks);
}

tpu_status_t tpu_pjrt_lower(const tpu_pjrt_storage_t* storages, int32_t num_storages,
                            const tpu_pjrt_node_t* nodes, int32_t num_nodes, tpu_pjrt_program_t* out) {
  *out = (tpu_pjrt_program_t){0};
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
  /* The body first: the header's result types depend on the checks found. */
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].arg < 0) {
      cur[s] = fresh(&b);
      emit(&b, "  %%v%d = stablehlo.constant dense<0> : tensor<%zuxui8>\n", cur[s], storages[s].bytes);
    }
  }
  tpu_status_t st = TPU_OK;
  for (int32_t i = 0; i < num_nodes && !st; i++) {
    b.rng = nodes[i].rng;
    st = lower_node(&b, nodes[i].call, nodes[i].locs);
  }
  int checks = st || b.num_checks == 0 ? -1 : check_output(&b);
  emit(&b, "  return");
  int nres = 0;
  for (int32_t s = 0; s < num_storages; s++) {
    if (storages[s].result) emit(&b, "%s %%v%d", nres++ ? "," : "", cur[s]);
  }
  if (checks >= 0) emit(&b, "%s %%v%d", nres ? "," : "", checks);
  emit(&b, " : ");
  result_types(&b, storages, num_storages, b.num_checks);
  emit(&b, "\n}\n");
  sb_t h = {0};
  emit(&h, "func.func public @main(");
  for (int32_t a = 0; a < nargs; a++) {
    for (int32_t s = 0; s < num_storages; s++) {
      if (storages[s].arg == a) emit(&h, "%s%%v%d: tensor<%zuxui8>", a ? ", " : "", a, storages[s].bytes);
    }
  }
  emit(&h, ") -> (");
  result_types(&h, storages, num_storages, b.num_checks);
  emit(&h, ") {\n");
  if (b.s) emit(&h, "%s", b.s);
  free(cur);
  free(b.s);
  free(b.check_rows);
  out->checks = b.checks;
  out->num_checks = b.num_checks;
  out->text = h.s;
  if (!st && (b.oom || h.oom)) st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "pjrt: cannot build the StableHLO program");
  if (st) tpu_pjrt_program_free(out);
  return st;
}
