/* copy.c - kernel family "copy": copy_ (any dtype to any dtype, src
 * broadcast to self), fill_ and zero_ (see tpu/kernels.h for the ABI).
 *
 * Conversions follow PyTorch's static_cast: floats to integers truncate
 * (out-of-range values saturate to int64 first, then wrap to the narrower
 * type, never UB), anything to bool is `!= 0`, f64 to f16/bf16 goes through
 * f32 as c10::Half/BFloat16 do. */
#include "kernels/ew_vecmath.h"
#include "kernels/kutil.h"

#define CP_GRAIN 65536

#if defined(__x86_64__) && defined(__GNUC__)
/* arch/x86_64/elementwise_avx2.c (AVX2 + F16C) */
void tpu_k_avx2_f16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n);
void tpu_k_avx2_f32_to_f16(uint16_t* restrict o, const float* restrict a, int64_t n);
void tpu_k_avx2_f32_to_bf16(uint16_t* restrict o, const float* restrict a, int64_t n);
void tpu_k_avx2_bf16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n);
#define CP_HAVE_F16C_BUILD 1
#endif

static inline bool cp_f16c(void) {
#ifdef CP_HAVE_F16C_BUILD
  return tpu_ku_use_avx2();
#else
  return false;
#endif
}
#define CP_TILE 256

static bool cp_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }

/* ---- strided conversion of one inner run ---------------------------------- */

typedef struct {
  int dst_dtype;
  int src_dtype;
} cp_ctx_t;

#define CP_LOOP(DST_T, SRC_T, EXPR)                                              \
  do {                                                                           \
    if (ds == (int64_t)sizeof(DST_T) && ss == (int64_t)sizeof(SRC_T)) {          \
      DST_T* d_ = (DST_T*)dst;                                                   \
      const SRC_T* s_ = (const SRC_T*)src;                                       \
      for (int64_t i = 0; i < n; ++i) {                                          \
        SRC_T v = s_[i];                                                         \
        d_[i] = (EXPR);                                                          \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; ++i) {                                          \
        SRC_T v = *(const SRC_T*)(src + i * ss);                                 \
        *(DST_T*)(dst + i * ds) = (EXPR);                                        \
      }                                                                          \
    }                                                                            \
  } while (0)

#define CP_FILL(DST_T)                                                           \
  do {                                                                           \
    DST_T v_ = *(const DST_T*)src;                                               \
    if (ds == (int64_t)sizeof(DST_T)) {                                          \
      DST_T* d_ = (DST_T*)dst;                                                   \
      for (int64_t i = 0; i < n; ++i) d_[i] = v_;                                \
    } else {                                                                     \
      for (int64_t i = 0; i < n; ++i) *(DST_T*)(dst + i * ds) = v_;              \
    }                                                                            \
  } while (0)

static void cp_same(char* dst, int64_t ds, const char* src, int64_t ss, size_t esz, int64_t n) {
  if (ds == (int64_t)esz && ss == (int64_t)esz) {
    if (dst != src) memmove(dst, src, (size_t)n * esz);
    return;
  }
  if (ss == 0) {
    switch (esz) {
      case 1: CP_FILL(uint8_t); break;
      case 2: CP_FILL(uint16_t); break;
      case 4: CP_FILL(uint32_t); break;
      default: CP_FILL(uint64_t); break;
    }
    return;
  }
  switch (esz) {
    case 1: CP_LOOP(uint8_t, uint8_t, v); break;
    case 2: CP_LOOP(uint16_t, uint16_t, v); break;
    case 4: CP_LOOP(uint32_t, uint32_t, v); break;
    default: CP_LOOP(uint64_t, uint64_t, v); break;
  }
}

/* Generic: tiles through int64 (integer/bool sources, exact) or double. */
static void cp_generic(char* dst, int64_t ds, int dt, const char* src, int64_t ss, int st,
                       int64_t n) {
  const bool int_src = !tpu_dtype_is_floating((tpu_dtype_t)st);
  if (int_src) {
    int64_t buf[CP_TILE];
    for (int64_t off = 0; off < n; off += CP_TILE) {
      int64_t m = n - off < CP_TILE ? n - off : CP_TILE;
      const char* s = src + off * ss;
      char* d = dst + off * ds;
      for (int64_t i = 0; i < m; ++i) buf[i] = tpu_ku_load_i64(s + i * ss, st);
      for (int64_t i = 0; i < m; ++i) tpu_ku_store_i64(d + i * ds, dt, buf[i]);
    }
  } else {
    double buf[CP_TILE];
    for (int64_t off = 0; off < n; off += CP_TILE) {
      int64_t m = n - off < CP_TILE ? n - off : CP_TILE;
      const char* s = src + off * ss;
      char* d = dst + off * ds;
      for (int64_t i = 0; i < m; ++i) buf[i] = tpu_ku_load_f64(s + i * ss, st);
      for (int64_t i = 0; i < m; ++i) tpu_ku_store_f64(d + i * ds, dt, buf[i]);
    }
  }
}

static void cp_inner(void* vctx, char** ptrs, const int64_t* strides, int64_t n) {
  const cp_ctx_t* c = (const cp_ctx_t*)vctx;
  char* dst = ptrs[0];
  const char* src = ptrs[1];
  const int64_t ds = strides[0], ss = strides[1];
  const int dt = c->dst_dtype, st = c->src_dtype;
  if (dt == st) {
    cp_same(dst, ds, src, ss, tpu_dtype_size((tpu_dtype_t)dt), n);
    return;
  }
  switch (dt * 16 + st) {
    case TPU_DTYPE_BF16 * 16 + TPU_DTYPE_F32:
      if (ds == 2 && ss == 4 && cp_f16c()) {
#ifdef CP_HAVE_F16C_BUILD
        tpu_k_avx2_f32_to_bf16((uint16_t*)dst, (const float*)src, n);
        return;
#endif
      }
      CP_LOOP(uint16_t, float, ew_vm_f2bf(v));
      return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_BF16:
      if (ds == 4 && ss == 2 && cp_f16c()) {
#ifdef CP_HAVE_F16C_BUILD
        tpu_k_avx2_bf16_to_f32((float*)dst, (const uint16_t*)src, n);
        return;
#endif
      }
      CP_LOOP(float, uint16_t, ew_vm_bf2f(v));
      return;
    case TPU_DTYPE_F16 * 16 + TPU_DTYPE_F32:
      if (ds == 2 && ss == 4 && cp_f16c()) {
#ifdef CP_HAVE_F16C_BUILD
        tpu_k_avx2_f32_to_f16((uint16_t*)dst, (const float*)src, n);
        return;
#endif
      }
      CP_LOOP(uint16_t, float, ew_vm_f2h(v));
      return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_F16:
      if (ds == 4 && ss == 2 && cp_f16c()) {
#ifdef CP_HAVE_F16C_BUILD
        tpu_k_avx2_f16_to_f32((float*)dst, (const uint16_t*)src, n);
        return;
#endif
      }
      CP_LOOP(float, uint16_t, ew_vm_h2f(v));
      return;
    case TPU_DTYPE_BF16 * 16 + TPU_DTYPE_F16: CP_LOOP(uint16_t, uint16_t, ew_vm_f2bf(ew_vm_h2f(v))); return;
    case TPU_DTYPE_F16 * 16 + TPU_DTYPE_BF16: CP_LOOP(uint16_t, uint16_t, ew_vm_f2h(ew_vm_bf2f(v))); return;
    case TPU_DTYPE_BF16 * 16 + TPU_DTYPE_F64: CP_LOOP(uint16_t, double, ew_vm_f2bf((float)v)); return;
    case TPU_DTYPE_F64 * 16 + TPU_DTYPE_BF16: CP_LOOP(double, uint16_t, (double)ew_vm_bf2f(v)); return;
    case TPU_DTYPE_F64 * 16 + TPU_DTYPE_F32: CP_LOOP(double, float, (double)v); return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_F64: CP_LOOP(float, double, (float)v); return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_I64: CP_LOOP(float, int64_t, (float)v); return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_I32: CP_LOOP(float, int32_t, (float)v); return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_U8: CP_LOOP(float, uint8_t, (float)v); return;
    case TPU_DTYPE_F32 * 16 + TPU_DTYPE_BOOL: CP_LOOP(float, uint8_t, v ? 1.0f : 0.0f); return;
    case TPU_DTYPE_I64 * 16 + TPU_DTYPE_I32: CP_LOOP(int64_t, int32_t, (int64_t)v); return;
    case TPU_DTYPE_I32 * 16 + TPU_DTYPE_I64:
      CP_LOOP(int32_t, int64_t, (int32_t)(uint32_t)(uint64_t)v);
      return;
    case TPU_DTYPE_I64 * 16 + TPU_DTYPE_BOOL: CP_LOOP(int64_t, uint8_t, v ? 1 : 0); return;
    case TPU_DTYPE_BOOL * 16 + TPU_DTYPE_F32: CP_LOOP(uint8_t, float, v != 0.0f); return;
    default: cp_generic(dst, ds, dt, src, ss, st, n); return;
  }
}

/* ---- copy_ ------------------------------------------------------------------- */

/* src_arg: the argument holding the source (copy_(self, src): 1;
 * tpu::convert(src): 0). */
static tpu_status_t cp_setup(const tpu_k_call_t* call, int src_arg, tpu_ku_iter_t* it, cp_ctx_t* ctx) {
  if (call->num_outputs < 1 || !call->outputs)
    return TPU_KU_INVALID(call, "expected an output tensor");
  const tpu_tensor_t* out = &call->outputs[0];
  const tpu_tensor_t* src = tpu_ku_tensor(call, src_arg);
  if (!src) return TPU_KU_INVALID(call, "argument %d (src) must be a tensor", src_arg);
  if (!cp_dtype_ok(out->dtype)) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (!cp_dtype_ok(src->dtype)) return tpu_ku_unsupported_dtype(call, src->dtype);
  ctx->dst_dtype = out->dtype;
  ctx->src_dtype = src->dtype;
  const tpu_tensor_t* ops[2] = {out, src};
  return tpu_ku_iter_init(it, 2, ops, call->op);
}

static tpu_status_t cp_copy_common(const tpu_k_call_t* call, int src_arg, bool run) {
  tpu_ku_iter_t it;
  cp_ctx_t ctx;
  TPU_RETURN_IF_ERROR(cp_setup(call, src_arg, &it, &ctx));
  if (!run || it.numel == 0) return TPU_OK;
  tpu_ku_iter_parallel(&it, call->pool, CP_GRAIN, cp_inner, &ctx);
  return TPU_OK;
}

static tpu_status_t cp_copy_check(const tpu_k_call_t* call) { return cp_copy_common(call, 1, false); }
static tpu_status_t cp_copy_run(const tpu_k_call_t* call) { return cp_copy_common(call, 1, true); }
/* tpu::convert(Tensor src) -> Tensor: src converted to the output's dtype
 * (the graph compiler's pointwise form of _to_copy / clone). */
static tpu_status_t cp_convert_check(const tpu_k_call_t* call) { return cp_copy_common(call, 0, false); }
static tpu_status_t cp_convert_run(const tpu_k_call_t* call) { return cp_copy_common(call, 0, true); }

/* ---- fill_ / zero_ ------------------------------------------------------------ */

typedef struct {
  size_t esz;
  union {
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    unsigned char bytes[8];
  } v;
} cp_fill_t;

static void cp_fill_inner(void* vctx, char** ptrs, const int64_t* strides, int64_t n) {
  const cp_fill_t* f = (const cp_fill_t*)vctx;
  char* dst = ptrs[0];
  const int64_t ds = strides[0];
  const char* src = (const char*)f->v.bytes;
  if (ds == (int64_t)f->esz) {
    bool same = true;
    for (size_t i = 1; i < f->esz; ++i)
      if (f->v.bytes[i] != f->v.bytes[0]) same = false;
    if (same) { /* every byte equal: memset */
      memset(dst, f->v.bytes[0], (size_t)n * f->esz);
      return;
    }
  }
  switch (f->esz) {
    case 1: CP_FILL(uint8_t); break;
    case 2: CP_FILL(uint16_t); break;
    case 4: CP_FILL(uint32_t); break;
    default: CP_FILL(uint64_t); break;
  }
}

static tpu_status_t cp_fill_common(const tpu_k_call_t* call, bool run, int mode) {
  /* mode 0: Scalar value (arg 1); 1: 0-dim tensor value (arg 1); 2: zero */
  if (call->num_outputs < 1 || !call->outputs)
    return TPU_KU_INVALID(call, "expected an output tensor");
  const tpu_tensor_t* out = &call->outputs[0];
  if (!cp_dtype_ok(out->dtype)) return tpu_ku_unsupported_dtype(call, out->dtype);
  cp_fill_t f;
  memset(&f, 0, sizeof(f));
  f.esz = tpu_dtype_size((tpu_dtype_t)out->dtype);
  if (mode == 0) {
    if (call->num_args < 2) return TPU_KU_INVALID(call, "expected a fill value");
    int kind = call->args[1].kind;
    TPU_RETURN_IF_ERROR(tpu_ku_check_scalar_fits(call, 1, out->dtype));
    if (kind == TPU_K_INT || kind == TPU_K_BOOL)
      tpu_ku_store_i64(f.v.bytes, out->dtype, tpu_ku_int(call, 1, 0));
    else if (kind == TPU_K_DOUBLE)
      tpu_ku_store_f64(f.v.bytes, out->dtype, call->args[1].v.d);
    else
      return TPU_KU_INVALID(call, "fill value must be a number");
  } else if (mode == 1) {
    const tpu_tensor_t* v = tpu_ku_tensor(call, 1);
    if (!v) return TPU_KU_INVALID(call, "argument 1 (value) must be a tensor");
    if (v->ndim != 0)
      return TPU_KU_INVALID(call,
                            "fill_ only supports 0-dimension value tensor but got tensor with %d dimensions.",
                            (int)v->ndim);
    if (!cp_dtype_ok(v->dtype)) return tpu_ku_unsupported_dtype(call, v->dtype);
    if (run) {
      if (tpu_dtype_is_floating((tpu_dtype_t)v->dtype))
        tpu_ku_store_f64(f.v.bytes, out->dtype, tpu_ku_load_f64(v->data, v->dtype));
      else
        tpu_ku_store_i64(f.v.bytes, out->dtype, tpu_ku_load_i64(v->data, v->dtype));
    }
  }
  tpu_ku_iter_t it;
  const tpu_tensor_t* ops[1] = {out};
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 1, ops, call->op));
  if (!run || it.numel == 0) return TPU_OK;
  tpu_ku_iter_parallel(&it, call->pool, CP_GRAIN, cp_fill_inner, &f);
  return TPU_OK;
}

static tpu_status_t cp_fill_scalar_run(const tpu_k_call_t* c) { return cp_fill_common(c, true, 0); }
static tpu_status_t cp_fill_scalar_check(const tpu_k_call_t* c) { return cp_fill_common(c, false, 0); }
static tpu_status_t cp_fill_tensor_run(const tpu_k_call_t* c) { return cp_fill_common(c, true, 1); }
static tpu_status_t cp_fill_tensor_check(const tpu_k_call_t* c) { return cp_fill_common(c, false, 1); }
static tpu_status_t cp_zero_run(const tpu_k_call_t* c) { return cp_fill_common(c, true, 2); }
static tpu_status_t cp_zero_check(const tpu_k_call_t* c) { return cp_fill_common(c, false, 2); }

const tpu_k_entry_t tpu_k_copy_entries[] = {
    {"aten::copy_", cp_copy_run, cp_copy_check, 0},
    {"aten::copy", cp_copy_run, cp_copy_check, 0},
    {"aten::copy.out", cp_copy_run, cp_copy_check, 0},
    {"tpu::convert", cp_convert_run, cp_convert_check, 0},
    {"aten::fill_.Scalar", cp_fill_scalar_run, cp_fill_scalar_check, 0},
    {"aten::fill.Scalar", cp_fill_scalar_run, cp_fill_scalar_check, 0},
    {"aten::fill.Scalar_out", cp_fill_scalar_run, cp_fill_scalar_check, 0},
    {"aten::fill_.Tensor", cp_fill_tensor_run, cp_fill_tensor_check, 0},
    {"aten::fill.Tensor", cp_fill_tensor_run, cp_fill_tensor_check, 0},
    {"aten::fill.Tensor_out", cp_fill_tensor_run, cp_fill_tensor_check, 0},
    {"aten::zero_", cp_zero_run, cp_zero_check, 0},
    {"aten::zero", cp_zero_run, cp_zero_check, 0},
    {"aten::zero.out", cp_zero_run, cp_zero_check, 0},
};
const size_t tpu_k_copy_count = sizeof(tpu_k_copy_entries) / sizeof(tpu_k_copy_entries[0]);
