/* kutil.h - helpers shared by every kernel file (internal to runtime/kernels).
 *
 * - element conversion: bf16/f16 <-> f32, load/store of any dtype as double
 *   or int64 (the slow generic path; fast paths are per kernel),
 * - argument accessors for tpu_k_call_t,
 * - a strided N-d iterator over up to TPU_KU_MAX_OPERANDS tensors broadcast
 *   to a common shape, with dimension coalescing,
 * - error helpers that name the op and dtype.
 */
#ifndef TPU_KERNELS_KUTIL_H_
#define TPU_KERNELS_KUTIL_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tpu/kernels.h"
#include "tpu/status.h"

/* ---- half types --------------------------------------------------------- */
static inline float tpu_ku_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t tpu_ku_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
float tpu_ku_f16_to_f32(uint16_t h);
uint16_t tpu_ku_f32_to_f16(float f);

/* Generic element access. `p` points at the element. */
static inline double tpu_ku_load_f64(const void* p, int dtype) {
  switch (dtype) {
    case TPU_DTYPE_F32: return *(const float*)p;
    case TPU_DTYPE_F64: return *(const double*)p;
    case TPU_DTYPE_F16: return tpu_ku_f16_to_f32(*(const uint16_t*)p);
    case TPU_DTYPE_BF16: return tpu_ku_bf16_to_f32(*(const uint16_t*)p);
    case TPU_DTYPE_I64: return (double)*(const int64_t*)p;
    case TPU_DTYPE_I32: return *(const int32_t*)p;
    case TPU_DTYPE_I16: return *(const int16_t*)p;
    case TPU_DTYPE_I8: return *(const int8_t*)p;
    case TPU_DTYPE_U8: return *(const uint8_t*)p;
    case TPU_DTYPE_BOOL: return *(const uint8_t*)p ? 1.0 : 0.0;
    default: return 0.0;
  }
}
static inline int64_t tpu_ku_load_i64(const void* p, int dtype) {
  switch (dtype) {
    case TPU_DTYPE_I64: return *(const int64_t*)p;
    case TPU_DTYPE_I32: return *(const int32_t*)p;
    case TPU_DTYPE_I16: return *(const int16_t*)p;
    case TPU_DTYPE_I8: return *(const int8_t*)p;
    case TPU_DTYPE_U8: return *(const uint8_t*)p;
    case TPU_DTYPE_BOOL: return *(const uint8_t*)p ? 1 : 0;
    default: {
      double d = tpu_ku_load_f64(p, dtype);
      /* float -> int conversion like C casts, but never UB */
      if (!(d == d)) return 0;
      if (d >= 9.2233720368547758e18) return INT64_MAX;
      if (d <= -9.2233720368547758e18) return INT64_MIN;
      return (int64_t)d;
    }
  }
}
/* Stores `v` converted like PyTorch's static_cast (floats to ints truncate;
 * out-of-range values wrap through int64 without UB; bool is v != 0). */
void tpu_ku_store_f64(void* p, int dtype, double v);
void tpu_ku_store_i64(void* p, int dtype, int64_t v);

/* ---- environment -------------------------------------------------------------
 * The kernels' environment variables, each with a fixed list of values:
 * tpu_ku_env(TPU_KU_ENV_x) is the index of the variable's value in its list
 * (TORCH_TPU_KERNEL_ISA: 0 "generic", 1 "avx2"; TORCH_TPU_CONV_PATH: 0
 * "direct", 1 "gemm", 2 "blocked"), or -1 when it is unset or (after tpu_k_check_environment
 * reported it) invalid. */
typedef enum tpu_ku_env_e { TPU_KU_ENV_KERNEL_ISA = 0, TPU_KU_ENV_CONV_PATH = 1 } tpu_ku_env_t;
int32_t tpu_ku_env(tpu_ku_env_t var);

/* ---- ISA selection ----------------------------------------------------------
 * True when the AVX2 + FMA + F16C variants under arch/x86_64 may run: the CPU
 * has them and TORCH_TPU_KERNEL_ISA is not "generic" (which forces the
 * portable C paths, for tests and comparisons). False on other ISAs. */
bool tpu_ku_use_avx2(void);
/* True when the AVX512_BF16 variants (arch/x86_64/gemm_avx512bf16.c: bf16
 * GEMM with vdpbf16ps) may run: the CPU has AVX-512F/BW/VL and AVX512_BF16,
 * the compiler could build them, and TORCH_TPU_KERNEL_ISA is neither
 * "generic" nor "avx2" (which force the portable or the AVX2 paths). */
bool tpu_ku_use_avx512bf16(void);

/* ---- arguments ------------------------------------------------------------ */
static inline const tpu_tensor_t* tpu_ku_tensor(const tpu_k_call_t* c, int i) {
  return (i < c->num_args && c->args[i].kind == TPU_K_TENSOR) ? c->args[i].v.tensor : NULL;
}
static inline bool tpu_ku_is_none(const tpu_k_call_t* c, int i) {
  return i >= c->num_args || c->args[i].kind == TPU_K_NONE;
}
/* Scalar argument as double (INT/DOUBLE/BOOL); `dflt` if absent/None. */
double tpu_ku_double(const tpu_k_call_t* c, int i, double dflt);
/* Scalar argument as int64 (INT/BOOL/DOUBLE truncated); `dflt` if absent. */
int64_t tpu_ku_int(const tpu_k_call_t* c, int i, int64_t dflt);
bool tpu_ku_bool(const tpu_k_call_t* c, int i, bool dflt);
/* String argument or `dflt`. */
const char* tpu_ku_string(const tpu_k_call_t* c, int i, const char* dflt);
/* Wraps a possibly-negative dim into [0, ndim) (ndim 0 treated as 1). */
tpu_status_t tpu_ku_wrap_dim(const tpu_k_call_t* c, int64_t dim, int32_t ndim,
                             int32_t* out_dim);

/* PyTorch's checked conversion of Scalar argument `i` into `dtype`, as
 * fill_ and masked_fill do (c10::checked_convert): INVALID_ARGUMENT "value
 * cannot be converted to type <dtype> without overflow" for NaN, infinity or
 * an out-of-range value into an integer dtype (an integer Scalar wraps into
 * uint8 from -255 up), or a finite value out of a floating dtype's range.
 * bool takes any value (non-zero is true). OK when `i` is not a Scalar. */
tpu_status_t tpu_ku_check_scalar_fits(const tpu_k_call_t* c, int i, int dtype);
/* The same for a value `v` (TPU_K_DOUBLE / INT / BOOL; other kinds pass). */
tpu_status_t tpu_ku_check_value_fits(const tpu_k_call_t* c, const tpu_k_value_t* v, int dtype);

/* Byte strides of t's batch dims (all but its last `core` dims) broadcast onto
 * `nb` batch dims of sizes `bsizes` (right-aligned; a missing or size-1 dim
 * gets stride 0), written to out[0..nb). INVALID_ARGUMENT naming the op when
 * t has more batch dims or they do not broadcast. */
tpu_status_t tpu_ku_batch_strides(const tpu_k_call_t* c, const tpu_tensor_t* t, int core,
                                  const int64_t* bsizes, int nb, int64_t* out);
/* Pointer to batch element `bi` (row-major over bsizes[0..nb)) of `base`
 * with byte strides bst[0..nb). */
static inline char* tpu_ku_batch_at(const char* base, const int64_t* bsizes, const int64_t* bst,
                                    int nb, int64_t bi) {
  for (int d = nb - 1; d >= 0; --d) {
    base += (bi % bsizes[d]) * bst[d];
    bi /= bsizes[d];
  }
  return (char*)base;
}

/* ---- errors --------------------------------------------------------------- */
/* UNIMPLEMENTED: "<op>: dtype <name> is not supported on tpu". */
tpu_status_t tpu_ku_unsupported_dtype(const tpu_k_call_t* c, int dtype);
/* INVALID_ARGUMENT with the op name prefixed. */
#define TPU_KU_INVALID(call, ...) \
  tpu_status_annotate(TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, __VA_ARGS__), "%s", (call)->op)

/* ---- strided iteration ----------------------------------------------------
 * Prepares a loop over `shape` (the output's) for `n` operands, each viewed
 * with its own strides broadcast to `shape` (operands with fewer dims are
 * right-aligned; size-1 dims get stride 0). Dimensions that are contiguous
 * for every operand are merged, so the innermost loop is as long as
 * possible. Offsets are in BYTES after setup. */
#define TPU_KU_MAX_OPERANDS 8
typedef struct tpu_ku_iter_t {
  int32_t ndim;                        /* after coalescing, >= 1 */
  int32_t n;                           /* operands */
  int64_t sizes[TPU_MAX_DIMS];         /* sizes[0] is the innermost dim */
  int64_t strides[TPU_KU_MAX_OPERANDS][TPU_MAX_DIMS]; /* bytes, innermost first */
  char* base[TPU_KU_MAX_OPERANDS];
  int64_t numel;
} tpu_ku_iter_t;

/* `ops[0]` is usually the output and defines the shape. Returns
 * INVALID_ARGUMENT if an operand cannot broadcast to the shape. */
tpu_status_t tpu_ku_iter_init(tpu_ku_iter_t* it, int n, const tpu_tensor_t* const* ops,
                              const char* op_name);

/* Calls `fn(ctx, ptrs, strides, count)` for every innermost run in the linear
 * range [begin, end) of the iteration space (so it can be split across
 * threads): ptrs[k] is operand k's first element, strides[k] its inner byte
 * stride, `count` the run length. */
typedef void (*tpu_ku_inner_fn_t)(void* ctx, char** ptrs, const int64_t* strides,
                                  int64_t count);
void tpu_ku_iter_run(const tpu_ku_iter_t* it, int64_t begin, int64_t end,
                     tpu_ku_inner_fn_t fn, void* ctx);
/* Runs the whole iteration split over `pool` in chunks of >= grain elements. */
void tpu_ku_iter_parallel(const tpu_ku_iter_t* it, tpu_threadpool_t* pool, int64_t grain,
                          tpu_ku_inner_fn_t fn, void* ctx);

#endif /* TPU_KERNELS_KUTIL_H_ */
