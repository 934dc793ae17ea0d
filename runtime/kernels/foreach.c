/* foreach.c - kernel family "foreach": PyTorch's list ops (torch._foreach_*),
 * which torch.optim's default (foreach) optimizers, clip_grad_norm_ and
 * Trainer's gradient clipping call on a device that is not the CPU.
 *
 * Each entry applies an elementwise base kernel of the elementwise/copy
 * families to element i of its lists (see "List ops" in tpu/kernels.h), so
 * the arithmetic, dtype rules and checks are the base kernel's. What this
 * file adds is the split of a call into pieces (chunks of an element) and
 * their footprints, which let the device queue run a sequence of list ops
 * piece-major: an AdamW step's lerp_, mul_, addcmul_, sqrt, div_, add_ and
 * addcdiv_ then read each chunk of the parameter, gradient and state once
 * from memory instead of once per op. */
#include <string.h>

#include "kutil.h"

typedef struct {
  const char* name;
  const char* base;
  int8_t extra_ones;
} fe_map_t;

/* X-macro: (list op, base, trailing base arguments passed as 1). An in-place
 * list op may have an out-of-place base (maximum_): the base writes self. */
#define FE_BINARY(X, op)                                          \
  X("aten::_foreach_" op ".List", "aten::" op ".Tensor", 0) \
  X("aten::_foreach_" op ".Scalar", "aten::" op ".Scalar", 0) \
  X("aten::_foreach_" op ".ScalarList", "aten::" op ".Scalar", 0) \
  X("aten::_foreach_" op "_.List", "aten::" op "_.Tensor", 0) \
  X("aten::_foreach_" op "_.Scalar", "aten::" op "_.Scalar", 0) \
  X("aten::_foreach_" op "_.ScalarList", "aten::" op "_.Scalar", 0)
#define FE_ALPHA(X, op)                                           \
  X("aten::_foreach_" op ".List", "aten::" op ".Tensor", 0) \
  X("aten::_foreach_" op ".Scalar", "aten::" op ".Scalar", 1) \
  X("aten::_foreach_" op ".ScalarList", "aten::" op ".Scalar", 1) \
  X("aten::_foreach_" op "_.List", "aten::" op "_.Tensor", 0) \
  X("aten::_foreach_" op "_.Scalar", "aten::" op "_.Scalar", 1) \
  X("aten::_foreach_" op "_.ScalarList", "aten::" op "_.Scalar", 1)
#define FE_TENSOR(X, op)                                            \
  X("aten::_foreach_" op ".Tensor", "aten::" op ".Tensor", 0) \
  X("aten::_foreach_" op "_.Tensor", "aten::" op "_.Tensor", 0)
#define FE_CLAMP(X, op)                                               \
  X("aten::_foreach_" op ".List", "aten::" op ".Tensor", 0)    \
  X("aten::_foreach_" op ".Scalar", "aten::" op, 0)            \
  X("aten::_foreach_" op ".ScalarList", "aten::" op, 0)        \
  X("aten::_foreach_" op "_.List", "aten::" op "_.Tensor", 0)  \
  X("aten::_foreach_" op "_.Scalar", "aten::" op "_", 0)       \
  X("aten::_foreach_" op "_.ScalarList", "aten::" op "_", 0)
#define FE_POINTWISE(X, op)                                         \
  X("aten::_foreach_" op ".Scalar", "aten::" op, 0)          \
  X("aten::_foreach_" op ".ScalarList", "aten::" op, 0)      \
  X("aten::_foreach_" op "_.Scalar", "aten::" op "_", 0)     \
  X("aten::_foreach_" op "_.ScalarList", "aten::" op "_", 0)
#define FE_UNARY(X, op)                                \
  X("aten::_foreach_" op, "aten::" op, 0)       \
  X("aten::_foreach_" op "_", "aten::" op "_", 0)

#define FE_ALL(X)                                                                   \
  FE_ALPHA(X, "add") FE_TENSOR(X, "add") FE_ALPHA(X, "sub")                         \
  FE_BINARY(X, "mul") FE_TENSOR(X, "mul") FE_BINARY(X, "div") FE_TENSOR(X, "div")   \
  FE_CLAMP(X, "clamp_min") FE_CLAMP(X, "clamp_max")                                 \
  X("aten::_foreach_maximum.List", "aten::maximum", 0)                       \
  X("aten::_foreach_maximum_.List", "aten::maximum", 0)                       \
  X("aten::_foreach_minimum.List", "aten::minimum", 0)                       \
  X("aten::_foreach_minimum_.List", "aten::minimum", 0)                       \
  X("aten::_foreach_lerp.List", "aten::lerp.Tensor", 0)                      \
  X("aten::_foreach_lerp.Scalar", "aten::lerp.Scalar", 0)                    \
  X("aten::_foreach_lerp.ScalarList", "aten::lerp.Scalar", 0)                \
  X("aten::_foreach_lerp_.List", "aten::lerp_.Tensor", 0)                    \
  X("aten::_foreach_lerp_.Scalar", "aten::lerp_.Scalar", 0)                  \
  X("aten::_foreach_lerp_.ScalarList", "aten::lerp_.Scalar", 0)              \
  FE_POINTWISE(X, "addcmul") FE_POINTWISE(X, "addcdiv")                             \
  X("aten::_foreach_pow.List", "aten::pow.Tensor_Tensor", 0)                 \
  X("aten::_foreach_pow.Scalar", "aten::pow.Tensor_Scalar", 0)               \
  X("aten::_foreach_pow.ScalarList", "aten::pow.Tensor_Scalar", 0)           \
  X("aten::_foreach_pow_.List", "aten::pow_.Tensor", 0)                      \
  X("aten::_foreach_pow_.Scalar", "aten::pow_.Scalar", 0)                    \
  X("aten::_foreach_pow_.ScalarList", "aten::pow_.Scalar", 0)                \
  X("aten::_foreach_copy_", "aten::copy_", 0)                                \
  X("aten::_foreach_zero_", "aten::zero_", 0)                                \
  FE_UNARY(X, "abs") FE_UNARY(X, "neg") FE_UNARY(X, "sqrt") FE_UNARY(X, "rsqrt")    \
  FE_UNARY(X, "reciprocal") FE_UNARY(X, "sign") FE_UNARY(X, "exp")                  \
  FE_UNARY(X, "expm1") FE_UNARY(X, "log") FE_UNARY(X, "log1p") FE_UNARY(X, "log2")  \
  FE_UNARY(X, "sin") FE_UNARY(X, "cos") FE_UNARY(X, "tan") FE_UNARY(X, "tanh")      \
  FE_UNARY(X, "sigmoid") FE_UNARY(X, "erf") FE_UNARY(X, "floor") FE_UNARY(X, "ceil") \
  FE_UNARY(X, "round") FE_UNARY(X, "trunc")

#define FE_MAP_ROW(name, base, extra) {name, base, extra},
static const fe_map_t kMap[] = {FE_ALL(FE_MAP_ROW)};
#define FE_MAP_COUNT (sizeof(kMap) / sizeof(kMap[0]))

enum { FE_MAX_ARGS = 8 };

bool tpu_k_list_op(const char* name, tpu_k_list_op_t* out) {
  if (!name) return false;
  for (size_t i = 0; i < FE_MAP_COUNT; ++i) {
    if (strcmp(kMap[i].name, name) != 0) continue;
    const tpu_k_entry_t* base = tpu_k_lookup(kMap[i].base);
    if (!base) return false;
    out->base = base;
    out->extra_ones = kMap[i].extra_ones;
    return true;
  }
  return false;
}

/* The first Tensor[] argument (self). */
static const tpu_k_value_t* fe_self(const tpu_k_call_t* c) {
  for (int32_t a = 0; a < c->num_args; ++a) {
    if (c->args[a].kind == TPU_K_TENSORS) return &c->args[a];
  }
  return NULL;
}

int64_t tpu_k_list_length(const tpu_k_call_t* c) {
  const tpu_k_value_t* self = fe_self(c);
  return self ? self->v.tensors.len : 0;
}

static bool fe_same_sizes(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d) {
    if (a->sizes[d] != b->sizes[d]) return false;
  }
  return true;
}

/* Element i is cut into chunks: every tensor of it contiguous with one size. */
static bool fe_chunked(const tpu_k_call_t* c, int64_t i) {
  const tpu_tensor_t* ref = NULL;
  for (int32_t a = 0; a < c->num_args; ++a) {
    const tpu_k_value_t* v = &c->args[a];
    if (v->kind == TPU_K_TENSOR && v->v.tensor->ndim != 0) return false;
    if (v->kind != TPU_K_TENSORS) continue;
    const tpu_tensor_t* t = &v->v.tensors.data[i];
    if (!tpu_tensor_is_contiguous(t) || (ref && !fe_same_sizes(ref, t))) return false;
    ref = t;
  }
  if (c->num_outputs > 0) {
    const tpu_tensor_t* t = &c->outputs[i];
    if (!tpu_tensor_is_contiguous(t) || (ref && !fe_same_sizes(ref, t))) return false;
  }
  return ref != NULL;
}

int64_t tpu_k_list_pieces(const tpu_k_call_t* c, int64_t i) {
  if (!fe_chunked(c, i)) return 1;
  int64_t n = tpu_tensor_numel(&fe_self(c)->v.tensors.data[i]);
  return n <= TPU_K_LIST_CHUNK ? 1 : (n + TPU_K_LIST_CHUNK - 1) / TPU_K_LIST_CHUNK;
}

/* Piece k of t: a 1-D chunk when chunked, else t itself. */
static tpu_tensor_t fe_view(const tpu_tensor_t* t, bool chunked, int64_t k) {
  if (!chunked) return *t;
  int64_t n = tpu_tensor_numel(t), off = k * TPU_K_LIST_CHUNK;
  int64_t len = n - off < TPU_K_LIST_CHUNK ? n - off : TPU_K_LIST_CHUNK;
  tpu_tensor_t v;
  memset(&v, 0, sizeof(v));
  v.data = len > 0 ? (char*)t->data + off * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype) : t->data;
  v.dtype = t->dtype;
  v.ndim = 1;
  v.sizes[0] = len > 0 ? len : 0;
  v.strides[0] = 1;
  return v;
}

/* The base kernel's call for piece k of element i. */
typedef struct {
  tpu_k_value_t args[FE_MAX_ARGS];
  tpu_tensor_t views[FE_MAX_ARGS];
  tpu_tensor_t out;
  tpu_k_call_t call;
} fe_piece_t;

static tpu_status_t fe_piece(const tpu_k_list_op_t* op, const tpu_k_call_t* c, int64_t i, int64_t k,
                             bool chunked, fe_piece_t* p) {
  if (c->num_args + op->extra_ones > FE_MAX_ARGS)
    return TPU_KU_INVALID(c, "%d arguments are more than a list op takes", (int)c->num_args);
  int32_t na = 0, nv = 0;
  const tpu_tensor_t* self = NULL;
  for (int32_t a = 0; a < c->num_args; ++a) {
    const tpu_k_value_t* v = &c->args[a];
    tpu_k_value_t* out = &p->args[na++];
    if (v->kind == TPU_K_TENSORS) {
      p->views[nv] = fe_view(&v->v.tensors.data[i], chunked, k);
      if (!self) self = &p->views[nv];
      out->kind = TPU_K_TENSOR;
      out->v.tensor = &p->views[nv++];
    } else if (v->kind == TPU_K_DOUBLES) {
      out->kind = TPU_K_DOUBLE;
      out->v.d = v->v.doubles.data[i];
    } else if (v->kind == TPU_K_INTS) {
      out->kind = TPU_K_INT;
      out->v.i = v->v.ints.data[i];
    } else {
      *out = *v;
    }
  }
  for (int32_t e = 0; e < op->extra_ones; ++e) {
    p->args[na].kind = TPU_K_INT;
    p->args[na++].v.i = 1;
  }
  if (c->num_outputs > 0) {
    p->out = fe_view(&c->outputs[i], chunked, k);
  } else {
    p->out = *self; /* in place: the base writes self */
  }
  memset(&p->call, 0, sizeof(p->call));
  p->call.op = op->base->name;
  p->call.num_args = na;
  p->call.args = p->args;
  p->call.num_outputs = 1;
  p->call.outputs = &p->out;
  p->call.pool = c->pool;
  p->call.flags = c->flags;
  return TPU_OK;
}

tpu_status_t tpu_k_list_run_piece(const tpu_k_list_op_t* op, const tpu_k_call_t* c, int64_t i,
                                  int64_t k) {
  fe_piece_t p;
  tpu_status_t st = fe_piece(op, c, i, k, fe_chunked(c, i), &p);
  return st != TPU_OK ? st : op->base->run(&p.call);
}

/* Every byte a strided view reaches lies in [begin, end). */
static void fe_visit(const tpu_tensor_t* t, bool write, tpu_k_range_fn_t visit, void* vctx) {
  if (tpu_tensor_numel(t) == 0) return;
  int64_t lo = 0, hi = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    int64_t span = (t->sizes[d] - 1) * t->strides[d];
    if (span < 0) {
      lo += span;
    } else {
      hi += span;
    }
  }
  int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  uintptr_t base = (uintptr_t)t->data;
  visit(vctx, base + (uintptr_t)(lo * es), base + (uintptr_t)((hi + 1) * es), write);
}

void tpu_k_list_footprint(const tpu_k_call_t* c, int64_t i, int64_t k, tpu_k_range_fn_t visit,
                          void* vctx) {
  const bool chunked = fe_chunked(c, i);
  bool first = true;
  for (int32_t a = 0; a < c->num_args; ++a) {
    const tpu_k_value_t* v = &c->args[a];
    if (v->kind == TPU_K_TENSOR) {
      fe_visit(v->v.tensor, false, visit, vctx);
    } else if (v->kind == TPU_K_TENSORS) {
      tpu_tensor_t view = fe_view(&v->v.tensors.data[i], chunked, k);
      fe_visit(&view, first && c->num_outputs == 0, visit, vctx); /* in place: self is written */
      first = false;
    }
  }
  if (c->num_outputs > 0) {
    tpu_tensor_t view = fe_view(&c->outputs[i], chunked, k);
    fe_visit(&view, true, visit, vctx);
  }
}

/* ---- entries ------------------------------------------------------------ */

static tpu_status_t fe_resolve(const tpu_k_call_t* c, tpu_k_list_op_t* op) {
  if (!tpu_k_list_op(c->op, op))
    return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: not a list op with a native base kernel",
                     c->op ? c->op : "?");
  return TPU_OK;
}

/* PyTorch's rule for in-place ops (no meta function runs for list ops that
 * return nothing): the op's result may not be of a higher kind than self
 * (bool < integer < floating), e.g. int32 += 1.5 is an error, not a
 * truncation. copy_/zero_ convert freely. */
static int fe_kind(int dt) { return dt == TPU_DTYPE_BOOL ? 0 : tpu_dtype_is_floating((tpu_dtype_t)dt) ? 2 : 1; }

static bool fe_float_result(const char* base) {
  static const char* const kFloat[] = {"aten::div", "aten::sqrt", "aten::rsqrt", "aten::exp", "aten::expm1",
                                       "aten::log", "aten::sin", "aten::cos", "aten::tan", "aten::tanh",
                                       "aten::sigmoid", "aten::erf", "aten::reciprocal", "aten::addcdiv",
                                       "aten::lerp"};
  for (size_t i = 0; i < sizeof(kFloat) / sizeof(kFloat[0]); ++i) {
    if (strncmp(base, kFloat[i], strlen(kFloat[i])) == 0) return true;
  }
  return false;
}

static tpu_status_t fe_check_cast(const tpu_k_list_op_t* op, const tpu_k_call_t* c, int64_t i) {
  if (c->num_outputs != 0 || strncmp(op->base->name, "aten::copy", 10) == 0 ||
      strncmp(op->base->name, "aten::zero", 10) == 0)
    return TPU_OK;
  const tpu_tensor_t* self = &fe_self(c)->v.tensors.data[i];
  int kind = fe_float_result(op->base->name) ? 2 : fe_kind(self->dtype);
  for (int32_t a = 0; a < c->num_args; ++a) {
    const tpu_k_value_t* v = &c->args[a];
    int k = v->kind == TPU_K_TENSORS                          ? fe_kind(v->v.tensors.data[i].dtype)
            : v->kind == TPU_K_TENSOR                         ? fe_kind(v->v.tensor->dtype)
            : v->kind == TPU_K_DOUBLE || v->kind == TPU_K_DOUBLES ? 2
            : v->kind == TPU_K_INT || v->kind == TPU_K_INTS   ? 1
                                                              : 0;
    if (k > kind) kind = k;
  }
  if (kind <= fe_kind(self->dtype)) return TPU_OK;
  return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                   "%s: element %lld: result type %s can't be cast to the desired output type %s", c->op,
                   (long long)i, kind == 2 ? "Float" : "Long", tpu_dtype_name((tpu_dtype_t)self->dtype));
}

static tpu_status_t fe_check(const tpu_k_call_t* c) {
  tpu_k_list_op_t op;
  tpu_status_t st = fe_resolve(c, &op);
  if (st != TPU_OK) return st;
  const int64_t n = tpu_k_list_length(c);
  for (int32_t a = 0; a < c->num_args; ++a) {
    const tpu_k_value_t* v = &c->args[a];
    int64_t len = v->kind == TPU_K_TENSORS   ? v->v.tensors.len
                  : v->kind == TPU_K_DOUBLES ? v->v.doubles.len
                  : v->kind == TPU_K_INTS    ? v->v.ints.len
                                             : n;
    if (len != n)
      return TPU_KU_INVALID(c, "argument %d has %lld elements, expected %lld (the length of self)",
                            (int)a, (long long)len, (long long)n);
  }
  if (c->num_outputs != 0 && c->num_outputs != n)
    return TPU_KU_INVALID(c, "%d outputs for %lld elements", (int)c->num_outputs, (long long)n);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t a = 0; a < c->num_args; ++a) {
      const tpu_k_value_t* v = &c->args[a];
      if (v->kind == TPU_K_TENSORS && v->v.tensors.data[i].dtype == TPU_DTYPE_INVALID)
        return TPU_KU_INVALID(c, "element %lld of argument %d is undefined", (long long)i, (int)a);
    }
    st = fe_check_cast(&op, c, i);
    if (st != TPU_OK) return st;
    if (!op.base->check) continue;
    fe_piece_t p;
    st = fe_piece(&op, c, i, 0, false, &p);
    if (st == TPU_OK) st = op.base->check(&p.call);
    if (st != TPU_OK) return tpu_status_annotate(st, "%s: element %lld", c->op, (long long)i);
  }
  return TPU_OK;
}

typedef struct {
  const tpu_k_list_op_t* op;
  const tpu_k_call_t* call;
  int64_t element;
  tpu_status_t status; /* first error */
} fe_run_t;

static void fe_run_pieces(void* ctx, int64_t begin, int64_t end) {
  fe_run_t* r = ctx;
  for (int64_t k = begin; k < end; ++k) {
    tpu_status_t st = tpu_k_list_run_piece(r->op, r->call, r->element, k);
    if (st == TPU_OK) continue;
    tpu_status_t none = TPU_OK;
    if (!__atomic_compare_exchange_n(&r->status, &none, st, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      tpu_status_free(st);
  }
}

/* The whole call, element by element (the device queue may instead run the
 * pieces of several calls interleaved). */
static tpu_status_t fe_run(const tpu_k_call_t* c) {
  tpu_k_list_op_t op;
  tpu_status_t st = fe_resolve(c, &op);
  if (st != TPU_OK) return st;
  const int64_t n = tpu_k_list_length(c);
  for (int64_t i = 0; i < n; ++i) {
    fe_run_t r = {&op, c, i, TPU_OK};
    tpu_parallel_for(c->pool, tpu_k_list_pieces(c, i), 1, fe_run_pieces, &r);
    if (r.status != TPU_OK) return r.status;
  }
  return TPU_OK;
}

#define FE_ENTRY_ROW(name, base, extra) {name, fe_run, fe_check, TPU_K_FLAG_LIST, NULL},
const tpu_k_entry_t tpu_k_foreach_entries[] = {FE_ALL(FE_ENTRY_ROW)};
const size_t tpu_k_foreach_count = sizeof(tpu_k_foreach_entries) / sizeof(tpu_k_foreach_entries[0]);
