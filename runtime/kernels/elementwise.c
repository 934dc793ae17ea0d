/* elementwise.c - kernel family "elementwise": pointwise binary/ternary/unary
 * math, comparisons, logical/bitwise ops and activations (see tpu/kernels.h
 * for the ABI).
 *
 * Every entry goes through one engine: the op's tensor operands (Scalar
 * operands wrapped as 0-dim tensors) are iterated with tpu_ku_iter over the
 * output's shape; each inner run is processed in tiles of EW_TILE elements
 * that are loaded (converted) into a compute type - float for
 * f32/f16/bf16 outputs, double for f64, int64 for integer/bool outputs
 * (comparisons: the promoted type of the inputs) - computed with one loop per
 * op, and stored (converted) into the output. Operands already in the
 * compute type and contiguous are used in place, so the float32 path runs
 * straight over tensor memory with vectorisable loops.
 *
 * The float compute loops are written once below the "template" marker and
 * instantiated for float and double by including this file into itself.
 * arch/x86_64/elementwise_avx2.c includes this file with EW_ARCH_AVX2 set:
 * it then compiles only the float32 tile engine (with -mavx2 -mfma -mf16c)
 * and exports it as tpu_k_avx2_ew_tiles_f32, which ew_inner selects at run
 * time. */
#ifndef EW_TEMPLATE_PASS

/* Kernels never observe floating-point exception flags; letting GCC assume
 * no traps is what allows it to turn the selects below into vector blends. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <float.h>
#include <tgmath.h>

#include "kernels/ew_vecmath.h"
#include "kernels/kutil.h"
#ifdef EW_ARCH_AVX2
#include <immintrin.h>
#endif

#define EW_TILE 512
#define EW_GRAIN 32768
#define EW_MAX_IN 3

#define EW_SQRT1_2 0.70710678118654752440
#define EW_2_SQRTPI 1.12837916709551257390
#define EW_SQRT2 1.41421356237309504880
#define EW_1_SQRT_2PI 0.39894228040143267794
#define EW_PI 3.14159265358979323846

typedef enum {
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM,
  OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
  OP_WHERE, OP_MASKED_FILL,
  OP_LAND, OP_LOR, OP_LXOR, OP_LNOT,
  OP_BAND, OP_BOR, OP_BXOR, OP_BNOT,
  OP_FMOD, OP_REMAINDER, OP_LERP, OP_ADDCMUL, OP_ADDCDIV,
  OP_CLAMP, OP_CLAMP_MIN, OP_CLAMP_MAX,
  OP_NEG, OP_ABS, OP_SIGN, OP_RECIPROCAL, OP_SQRT, OP_RSQRT, OP_EXP, OP_EXP2, OP_EXPM1,
  OP_LOG, OP_LOG1P, OP_LOG2, OP_SIN, OP_COS, OP_TAN, OP_TANH, OP_SIGMOID, OP_ERF,
  OP_ASIN, OP_ACOS, OP_ATAN, OP_ASINH, OP_ACOSH, OP_ATANH, OP_ATAN2, OP_ANGLE,
  OP_FMAX, OP_FMIN, /* maximum/minimum ignoring NaN (as maximum/minimum for integers) */
  OP_LOG10, OP_HYPOT, OP_NEXTAFTER, OP_GCD, OP_LCM,
  OP_FLOOR, OP_CEIL, OP_ROUND, OP_TRUNC, OP_ISNAN, OP_NAN_TO_NUM,
  OP_RELU, OP_GELU, OP_GELU_BWD, OP_SILU, OP_SILU_BWD, OP_SIGMOID_BWD, OP_TANH_BWD,
  OP_THRESHOLD, OP_THRESHOLD_BWD, OP_SOFTPLUS, OP_SOFTPLUS_BWD, OP_LEAKY_RELU,
  OP_LEAKY_RELU_BWD, OP_HARDTANH, OP_HARDTANH_BWD, OP_MISH, OP_MISH_BWD,
  OP_ISINF, OP_ISPOSINF, OP_ISNEGINF, OP_ISFINITE, OP_SIGNBIT, OP_LSHIFT, OP_RSHIFT,
  OP_FLOOR_DIVIDE, /* div(rounding_mode='floor') without the mode argument */
  /* internal variants chosen at setup */
  OP_DIV_TRUNC, OP_DIV_FLOOR, OP_ROUND_DEC, OP_POW_SCALAR,
  OP_ADD_RTAIL, /* add/sub in f16/bf16 arithmetic: PyTorch's scalar tail loop */
  OP_COUNT_
} ew_op_t;

enum {
  EW_FLOAT = 1u << 0,   /* output must be floating */
  EW_INTONLY = 1u << 1, /* integer/bool operands only (bitwise) */
  EW_CMP = 1u << 2,     /* result 0/1; computes in the inputs' promoted type */
  EW_LOGIC = 1u << 3,   /* result 0/1 from the operands' truth values */
  EW_NOBOOL = 1u << 4,  /* PyTorch has no kernel for a bool result type */
  EW_SAMEOUT = 1u << 5, /* no type promotion: out must have the result type */
};

typedef struct {
  uint8_t nin;   /* tensor-or-Scalar operands: args [0, nin) */
  uint8_t nreq;  /* of which required (the rest are optional: clamp) */
  uint8_t promo; /* bit j: operand j takes part in type promotion */
  uint8_t flags;
} ew_opinfo_t;

#ifndef EW_ARCH_AVX2
static const ew_opinfo_t kOpInfo[OP_COUNT_] = {
    [OP_ADD] = {2, 2, 3, 0},        [OP_SUB] = {2, 2, 3, EW_NOBOOL},
    [OP_MUL] = {2, 2, 3, 0},        [OP_DIV] = {2, 2, 3, 0},
    [OP_FLOOR_DIVIDE] = {2, 2, 3, EW_NOBOOL},
    [OP_POW] = {2, 2, 3, EW_NOBOOL},        [OP_MAXIMUM] = {2, 2, 3, 0},
    [OP_MINIMUM] = {2, 2, 3, 0},    [OP_EQ] = {2, 2, 3, EW_CMP},
    [OP_NE] = {2, 2, 3, EW_CMP},    [OP_LT] = {2, 2, 3, EW_CMP},
    [OP_LE] = {2, 2, 3, EW_CMP},    [OP_GT] = {2, 2, 3, EW_CMP},
    [OP_GE] = {2, 2, 3, EW_CMP},    [OP_WHERE] = {3, 3, 6, 0},
    [OP_MASKED_FILL] = {3, 3, 1, 0}, [OP_LAND] = {2, 2, 3, EW_LOGIC},
    [OP_LOR] = {2, 2, 3, EW_LOGIC}, [OP_LXOR] = {2, 2, 3, EW_LOGIC},
    [OP_LNOT] = {1, 1, 1, EW_LOGIC}, [OP_BAND] = {2, 2, 3, EW_INTONLY},
    [OP_BOR] = {2, 2, 3, EW_INTONLY}, [OP_BXOR] = {2, 2, 3, EW_INTONLY},
    [OP_BNOT] = {1, 1, 1, EW_INTONLY | EW_SAMEOUT}, [OP_FMOD] = {2, 2, 3, EW_NOBOOL},
    [OP_REMAINDER] = {2, 2, 3, EW_NOBOOL},  [OP_LERP] = {3, 3, 7, EW_FLOAT | EW_NOBOOL},
    [OP_ADDCMUL] = {3, 3, 7, 0},    [OP_ADDCDIV] = {3, 3, 7, EW_FLOAT},
    [OP_CLAMP] = {3, 1, 7, EW_SAMEOUT},      [OP_CLAMP_MIN] = {2, 2, 3, EW_SAMEOUT},
    [OP_CLAMP_MAX] = {2, 2, 3, EW_SAMEOUT},  [OP_NEG] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},
    [OP_ABS] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},        [OP_SIGN] = {1, 1, 1, EW_SAMEOUT},
    [OP_RECIPROCAL] = {1, 1, 1, EW_FLOAT}, [OP_SQRT] = {1, 1, 1, EW_FLOAT},
    [OP_RSQRT] = {1, 1, 1, EW_FLOAT}, [OP_EXP] = {1, 1, 1, EW_FLOAT},
    [OP_EXP2] = {1, 1, 1, EW_FLOAT}, [OP_EXPM1] = {1, 1, 1, EW_FLOAT},
    [OP_LOG] = {1, 1, 1, EW_FLOAT}, [OP_LOG1P] = {1, 1, 1, EW_FLOAT},
    [OP_LOG2] = {1, 1, 1, EW_FLOAT}, [OP_SIN] = {1, 1, 1, EW_FLOAT},
    [OP_COS] = {1, 1, 1, EW_FLOAT}, [OP_TAN] = {1, 1, 1, EW_FLOAT},
    [OP_TANH] = {1, 1, 1, EW_FLOAT}, [OP_SIGMOID] = {1, 1, 1, EW_FLOAT},
    [OP_ASIN] = {1, 1, 1, EW_FLOAT}, [OP_ACOS] = {1, 1, 1, EW_FLOAT},
    [OP_ATAN] = {1, 1, 1, EW_FLOAT}, [OP_ASINH] = {1, 1, 1, EW_FLOAT},
    [OP_ACOSH] = {1, 1, 1, EW_FLOAT}, [OP_ATANH] = {1, 1, 1, EW_FLOAT},
    [OP_ATAN2] = {2, 2, 3, EW_FLOAT}, [OP_ANGLE] = {1, 1, 1, EW_FLOAT},
    [OP_FMAX] = {2, 2, 3, 0},       [OP_FMIN] = {2, 2, 3, 0},
    [OP_LOG10] = {1, 1, 1, EW_FLOAT}, [OP_HYPOT] = {2, 2, 3, EW_FLOAT},
    [OP_NEXTAFTER] = {2, 2, 3, EW_FLOAT}, [OP_GCD] = {2, 2, 3, EW_INTONLY | EW_NOBOOL},
    [OP_LCM] = {2, 2, 3, EW_INTONLY | EW_NOBOOL},
    [OP_ERF] = {1, 1, 1, EW_FLOAT}, [OP_FLOOR] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},
    [OP_CEIL] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},       [OP_ROUND] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},
    [OP_TRUNC] = {1, 1, 1, EW_NOBOOL | EW_SAMEOUT},      [OP_ISNAN] = {1, 1, 1, EW_CMP},
    [OP_NAN_TO_NUM] = {1, 1, 1, 0}, [OP_RELU] = {1, 1, 1, EW_NOBOOL},
    [OP_GELU] = {1, 1, 1, EW_FLOAT}, [OP_GELU_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_SILU] = {1, 1, 1, EW_FLOAT}, [OP_SILU_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_SIGMOID_BWD] = {2, 2, 3, EW_FLOAT}, [OP_TANH_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_THRESHOLD] = {1, 1, 1, 0},  [OP_THRESHOLD_BWD] = {2, 2, 3, 0},
    [OP_SOFTPLUS] = {1, 1, 1, EW_FLOAT}, [OP_SOFTPLUS_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_LEAKY_RELU] = {1, 1, 1, EW_FLOAT}, [OP_LEAKY_RELU_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_HARDTANH] = {1, 1, 1, 0},   [OP_HARDTANH_BWD] = {2, 2, 3, 0},
    [OP_MISH] = {1, 1, 1, EW_FLOAT}, [OP_MISH_BWD] = {2, 2, 3, EW_FLOAT},
    [OP_ISINF] = {1, 1, 1, EW_CMP}, [OP_ISPOSINF] = {1, 1, 1, EW_CMP},
    [OP_ISNEGINF] = {1, 1, 1, EW_CMP}, [OP_ISFINITE] = {1, 1, 1, EW_CMP},
    [OP_SIGNBIT] = {1, 1, 1, EW_CMP}, [OP_LSHIFT] = {2, 2, 3, EW_INTONLY},
    [OP_RSHIFT] = {2, 2, 3, EW_INTONLY},
};
#endif

typedef enum { EW_CT_F32, EW_CT_F64, EW_CT_I64 } ew_ct_t;

typedef struct {
  int op;        /* ew_op_t after setup (variants resolved) */
  int ct;        /* ew_ct_t */
  int nin;       /* operands actually iterated (after dropping absent ones) */
  int out_dtype;
  int in_dtype[EW_MAX_IN];
  int in_cast[EW_MAX_IN]; /* dtype to round/wrap the operand through first, or 0 */
  int mode;               /* gelu: 1 = tanh; round: 1 = negative decimals */
  int rdt;                /* f16/bf16: intermediate results round to this dtype, as
                             PyTorch's reduced-float scalar arithmetic does (div
                             trunc/floor; add/sub tails, see vblock) */
  int64_t vblock;         /* add/sub with rdt: elements per PyTorch CPU vector-loop
                             step; a contiguous run's tail past the last whole
                             block takes PyTorch's scalar path */
  double pd[4];           /* op parameters (alpha, value, threshold, ...) */
  int64_t pi[4];
  int err;                /* set (atomically) on integer division by zero */
  int avx2;               /* float32 tiles run in the AVX2 build */
} ew_ctx_t;

/* ---- helpers -------------------------------------------------------------- */

static inline int64_t ew_f2i(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

static inline bool ew_overlap(const void* a, size_t na, const void* b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

static inline float ew_round_half(float v, int dt) {
  if (dt == TPU_DTYPE_F16) return tpu_ku_f16_to_f32(tpu_ku_f32_to_f16(v));
  if (dt == TPU_DTYPE_BF16) return tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(v));
  return v;
}

/* nextafter in f16/bf16 (dt): x and y hold values of that format; the result
 * is x's neighbour in it, towards y (the CPU steps the 16-bit pattern). */
static inline float ew_nextafter_reduced(float x, float y, int dt) {
  if (x != x || y != y) return x + y;
  if (x == y) return y;
  uint16_t h = dt == TPU_DTYPE_BF16 ? tpu_ku_f32_to_bf16(x) : tpu_ku_f32_to_f16(x);
  if (x == 0.0f) h = (uint16_t)(y < 0.0f ? 0x8001u : 0x0001u);
  else if ((x < y) == (x > 0.0f)) h = (uint16_t)(h + 1u);
  else h = (uint16_t)(h - 1u);
  return dt == TPU_DTYPE_BF16 ? tpu_ku_bf16_to_f32(h) : tpu_ku_f16_to_f32(h);
}

/* PyTorch's div_floor_floating evaluated in f16/bf16 arithmetic (every
 * intermediate rounded to dt), as its scalar_t = Half/BFloat16 loops do. */
static inline float ew_div_floor_reduced(float x, float y, int dt) {
  if (y == 0) return ew_round_half(x / y, dt);
  float mod = fmodf(x, y); /* exact */
  float div = ew_round_half(ew_round_half(x - mod, dt) / y, dt);
  if (mod != 0 && ((y < 0) != (mod < 0))) div = ew_round_half(div - 1.0f, dt);
  if (div == 0) return copysignf(0.0f, ew_round_half(x / y, dt));
  float fd = floorf(div);
  if (ew_round_half(div - fd, dt) > 0.5f) fd = ew_round_half(fd + 1.0f, dt);
  return fd;
}

static inline int64_t ew_wrap_int(int64_t v, int dt) {
  switch (dt) {
    case TPU_DTYPE_I32: return (int32_t)(uint32_t)(uint64_t)v;
    case TPU_DTYPE_I16: return (int16_t)(uint16_t)(uint64_t)v;
    case TPU_DTYPE_I8: return (int8_t)(uint8_t)(uint64_t)v;
    case TPU_DTYPE_U8: return (uint8_t)(uint64_t)v;
    case TPU_DTYPE_BOOL: return v != 0;
    default: return v;
  }
}

/* Elements of an inner run that PyTorch's CPU loop (cpu_kernel_vec) sends
 * through its vector path: whole blocks of c->vblock from the start of a run
 * whose operands are all contiguous (at most one input broadcast with stride
 * 0); none for other runs. The rest takes the scalar path. */
static inline int64_t ew_vector_prefix(const ew_ctx_t* c, const int64_t* st, int64_t count) {
  if (c->vblock <= 0 || st[0] != (int64_t)tpu_dtype_size((tpu_dtype_t)c->out_dtype)) return 0;
  int zeros = 0;
  for (int j = 0; j < c->nin; ++j) {
    if (st[1 + j] == 0) zeros++;
    else if (st[1 + j] != (int64_t)tpu_dtype_size((tpu_dtype_t)c->in_dtype[j])) return 0;
  }
  if (zeros > 1) return 0;
  return count / c->vblock * c->vblock;
}

/* ---- vectorised float32 pieces (ew_vecmath.h) ----------------------------- */

#if defined(EW_ARCH_AVX2)
static inline void ew_h2f_run(float* restrict o, const uint16_t* restrict a, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i))));
  for (; i < n; ++i) o[i] = _cvtsh_ss(a[i]);
}
static inline void ew_f2h_run(uint16_t* restrict o, const float* restrict a, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(o + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(a + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) o[i] = _cvtss_sh(a[i], _MM_FROUND_TO_NEAREST_INT);
}
#else
static inline void ew_h2f_run(float* restrict o, const uint16_t* restrict a, int64_t n) {
  ew_vm_h2f_loop(o, a, n);
}
static inline void ew_f2h_run(uint16_t* restrict o, const float* restrict a, int64_t n) {
  ew_vm_f2h_loop(o, a, n);
}
#endif

/* Runs the vectorised float32 loop of op, if it has one. */
static bool ew_vm_try(const ew_ctx_t* c, float* o, const float* a,
                      const float* b, int64_t n) {
  int which;
  bool binary = false;
  switch (c->op) {
    case OP_EXP: which = EW_VM_EXP; break;
    case OP_SQRT: which = EW_VM_SQRT; break;
    case OP_RSQRT: which = EW_VM_RSQRT; break;
    case OP_POW_SCALAR:
      if (c->pd[0] != 0.5 && c->pd[0] != -0.5) return false;
      which = c->pd[0] == 0.5 ? EW_VM_SQRT : EW_VM_RSQRT;
      break;
    case OP_SIGMOID: which = EW_VM_SIGMOID; break;
    case OP_SILU: which = EW_VM_SILU; break;
    case OP_TANH: which = EW_VM_TANH; break;
    case OP_ERF: which = EW_VM_ERF; break;
    case OP_GELU: which = c->mode ? EW_VM_GELU_TANH : EW_VM_GELU; break;
    case OP_SILU_BWD: which = EW_VM_SILU_BWD; binary = true; break;
    case OP_GELU_BWD:
      if (c->mode) return false;
      which = EW_VM_GELU_BWD;
      binary = true;
      break;
    default: return false;
  }
  if (binary) ew_vm_binary(which, o, a, b, n);
  else ew_vm_unary(which, o, a, n);
  return true;
}

/* Loops over n elements at `src` with byte stride `st` (contiguous, broadcast
 * and strided cases split so the first two vectorise). */
#define EW_LOADLOOP(SRC_T, EXPR)                                   \
  do {                                                             \
    if (st == (int64_t)sizeof(SRC_T)) {                            \
      const SRC_T* s_ = (const SRC_T*)src;                         \
      for (int64_t i = 0; i < n; ++i) {                            \
        SRC_T v = s_[i];                                           \
        d[i] = (EXPR);                                             \
      }                                                            \
    } else if (st == 0) {                                          \
      SRC_T v = *(const SRC_T*)src;                                \
      const __typeof__(d[0]) x_ = (EXPR);                          \
      for (int64_t i = 0; i < n; ++i) d[i] = x_;                   \
    } else {                                                       \
      for (int64_t i = 0; i < n; ++i) {                            \
        SRC_T v = *(const SRC_T*)(src + i * st);                   \
        d[i] = (EXPR);                                             \
      }                                                            \
    }                                                              \
  } while (0)

#define EW_STORELOOP(DST_T, EXPR)                                  \
  do {                                                             \
    if (st == (int64_t)sizeof(DST_T)) {                            \
      DST_T* d_ = (DST_T*)dst;                                     \
      for (int64_t i = 0; i < n; ++i) {                            \
        __typeof__(s[0]) v = s[i];                                 \
        d_[i] = (EXPR);                                            \
      }                                                            \
    } else {                                                       \
      for (int64_t i = 0; i < n; ++i) {                            \
        __typeof__(s[0]) v = s[i];                                 \
        *(DST_T*)(dst + i * st) = (EXPR);                          \
      }                                                            \
    }                                                              \
  } while (0)

/* ---- float / double instantiations --------------------------------------- */
#define EW_TEMPLATE_PASS 1
#define T float
#define EW_FN(name) name##_f32
#define EW_NATIVE TPU_DTYPE_F32
#define EW_IS_F32 1
#include "kernels/elementwise.c"
#undef T
#undef EW_FN
#undef EW_NATIVE
#undef EW_IS_F32
#ifndef EW_ARCH_AVX2
#define T double
#define EW_FN(name) name##_f64
#define EW_NATIVE TPU_DTYPE_F64
#define EW_IS_F32 0
#include "kernels/elementwise.c"
#undef T
#undef EW_FN
#undef EW_NATIVE
#undef EW_IS_F32
#endif
#undef EW_TEMPLATE_PASS

#ifdef EW_ARCH_AVX2
void tpu_k_avx2_ew_tiles_f32(void* ctx, char** ptrs, const int64_t* st, int64_t count);
void tpu_k_avx2_ew_tiles_f32(void* ctx, char** ptrs, const int64_t* st, int64_t count) {
  ew_tiles_f32((ew_ctx_t*)ctx, ptrs, st, count);
}
#else /* the rest is the portable build only */

#if defined(__x86_64__) && defined(__GNUC__)
#define EW_HAVE_AVX2_BUILD 1
/* arch/x86_64/elementwise_avx2.c */
void tpu_k_avx2_ew_tiles_f32(void* ctx, char** ptrs, const int64_t* st, int64_t count);
#endif

static inline bool ew_use_avx2(void) {
#ifdef EW_HAVE_AVX2_BUILD
  return tpu_ku_use_avx2();
#else
  return false;
#endif
}

/* ---- int64 compute ---------------------------------------------------------- */

static void ew_load_i64(int64_t* restrict d, const char* src, int64_t st, int dt, int64_t n) {
  switch (dt) {
    case TPU_DTYPE_F32: EW_LOADLOOP(float, ew_f2i(v)); break;
    case TPU_DTYPE_F64: EW_LOADLOOP(double, ew_f2i(v)); break;
    case TPU_DTYPE_F16: EW_LOADLOOP(uint16_t, ew_f2i(tpu_ku_f16_to_f32(v))); break;
    case TPU_DTYPE_BF16: EW_LOADLOOP(uint16_t, ew_f2i(tpu_ku_bf16_to_f32(v))); break;
    case TPU_DTYPE_I64: EW_LOADLOOP(int64_t, v); break;
    case TPU_DTYPE_I32: EW_LOADLOOP(int32_t, (int64_t)v); break;
    case TPU_DTYPE_I16: EW_LOADLOOP(int16_t, (int64_t)v); break;
    case TPU_DTYPE_I8: EW_LOADLOOP(int8_t, (int64_t)v); break;
    case TPU_DTYPE_U8: EW_LOADLOOP(uint8_t, (int64_t)v); break;
    case TPU_DTYPE_BOOL: EW_LOADLOOP(uint8_t, (int64_t)(v != 0)); break;
    default: for (int64_t i = 0; i < n; ++i) d[i] = 0; break;
  }
}

static void ew_store_i64(char* dst, int64_t st, int dt, const int64_t* restrict s, int64_t n) {
  switch (dt) {
    case TPU_DTYPE_F32: EW_STORELOOP(float, (float)v); break;
    case TPU_DTYPE_F64: EW_STORELOOP(double, (double)v); break;
    case TPU_DTYPE_F16: EW_STORELOOP(uint16_t, tpu_ku_f32_to_f16((float)v)); break;
    case TPU_DTYPE_BF16: EW_STORELOOP(uint16_t, tpu_ku_f32_to_bf16((float)v)); break;
    case TPU_DTYPE_I64: EW_STORELOOP(int64_t, v); break;
    case TPU_DTYPE_I32: EW_STORELOOP(int32_t, (int32_t)(uint32_t)(uint64_t)v); break;
    case TPU_DTYPE_I16: EW_STORELOOP(int16_t, (int16_t)(uint16_t)(uint64_t)v); break;
    case TPU_DTYPE_I8: EW_STORELOOP(int8_t, (int8_t)(uint8_t)(uint64_t)v); break;
    case TPU_DTYPE_U8: EW_STORELOOP(uint8_t, (uint8_t)(uint64_t)v); break;
    case TPU_DTYPE_BOOL: EW_STORELOOP(uint8_t, (uint8_t)(v != 0)); break;
    default: break;
  }
}

#define W_ADD(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define W_SUB(x, y) ((int64_t)((uint64_t)(x) - (uint64_t)(y)))
#define W_MUL(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))

static inline int64_t ew_ipow(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  uint64_t r = 1, b = (uint64_t)base;
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return (int64_t)r;
}

/* gcd as PyTorch's calc_gcd in the operands' type `dt`: |a| and |b| wrap to
 * dt (|INT_MIN| stays negative, so gcd(INT64_MIN, 6) is -2 as on the CPU),
 * then Euclid's remainders. */
static inline int64_t ew_gcd(int64_t a, int64_t b, int dt) {
  a = ew_wrap_int(a < 0 ? W_SUB(0, a) : a, dt);
  b = ew_wrap_int(b < 0 ? W_SUB(0, b) : b, dt);
  while (a != 0) {
    int64_t t = a;
    a = a == -1 ? 0 : b % a;
    b = t;
  }
  return b;
}

/* |a / g * b| of lcm, with the product `p` already formed in int64: int32 and
 * int64 multiply in their own width (the product wraps before abs), narrower
 * types in C's int (abs of the exact product, then the wrap). A gcd of -1
 * (from INT_MIN) divides by negation, wrapping: the CPU traps there (SIGFPE
 * on INT64_MIN / -1). */
static inline int64_t ew_lcm_abs(int64_t p, int dt) {
  if (dt == TPU_DTYPE_I32) p = ew_wrap_int(p, dt);
  return ew_wrap_int(p < 0 ? W_SUB(0, p) : p, dt);
}

static void ew_compute_i64(ew_ctx_t* c, int64_t* restrict o, const int64_t* restrict a,
                           const int64_t* restrict b, const int64_t* restrict d, int64_t n) {
  const int64_t p0 = c->pi[0], p1 = c->pi[1];
  bool zero = false;
  int64_t i;
  switch (c->op) {
    case OP_ADD: for (i = 0; i < n; ++i) o[i] = W_ADD(a[i], W_MUL(p0, b[i])); break;
    case OP_SUB: for (i = 0; i < n; ++i) o[i] = W_SUB(a[i], W_MUL(p0, b[i])); break;
    case OP_MUL: for (i = 0; i < n; ++i) o[i] = W_MUL(a[i], b[i]); break;
    case OP_DIV_TRUNC:
      for (i = 0; i < n; ++i) {
        int64_t x = a[i], y = b[i];
        if (y == 0) { zero = true; o[i] = 0; }
        else if (y == -1) o[i] = W_SUB(0, x);
        else o[i] = x / y;
      }
      break;
    case OP_DIV_FLOOR:
      for (i = 0; i < n; ++i) {
        int64_t x = a[i], y = b[i];
        if (y == 0) { zero = true; o[i] = 0; }
        else if (y == -1) o[i] = W_SUB(0, x);
        else {
          int64_t q = x / y, r = x % y;
          if (r != 0 && ((r < 0) != (y < 0))) q -= 1;
          o[i] = q;
        }
      }
      break;
    case OP_FMOD:
      for (i = 0; i < n; ++i) {
        int64_t x = a[i], y = b[i];
        if (y == 0) { zero = true; o[i] = 0; }
        else o[i] = (y == -1) ? 0 : x % y;
      }
      break;
    case OP_REMAINDER:
      for (i = 0; i < n; ++i) {
        int64_t x = a[i], y = b[i];
        if (y == 0) { zero = true; o[i] = 0; continue; }
        int64_t r = (y == -1) ? 0 : x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        o[i] = r;
      }
      break;
    case OP_POW: case OP_POW_SCALAR:
      for (i = 0; i < n; ++i) o[i] = ew_ipow(a[i], b[i]);
      break;
    case OP_MAXIMUM: case OP_FMAX: for (i = 0; i < n; ++i) o[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case OP_MINIMUM: case OP_FMIN: for (i = 0; i < n; ++i) o[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case OP_GCD: for (i = 0; i < n; ++i) o[i] = ew_gcd(a[i], b[i], (int)p0); break;
    case OP_LCM:
      for (i = 0; i < n; ++i) {
        int64_t g = ew_gcd(a[i], b[i], (int)p0);
        if (g == 0) o[i] = 0;
        else o[i] = ew_lcm_abs(W_MUL(g == -1 ? W_SUB(0, a[i]) : a[i] / g, b[i]), (int)p0);
      }
      break;
    case OP_EQ: for (i = 0; i < n; ++i) o[i] = a[i] == b[i]; break;
    case OP_NE: for (i = 0; i < n; ++i) o[i] = a[i] != b[i]; break;
    case OP_LT: for (i = 0; i < n; ++i) o[i] = a[i] < b[i]; break;
    case OP_LE: for (i = 0; i < n; ++i) o[i] = a[i] <= b[i]; break;
    case OP_GT: for (i = 0; i < n; ++i) o[i] = a[i] > b[i]; break;
    case OP_GE: for (i = 0; i < n; ++i) o[i] = a[i] >= b[i]; break;
    case OP_WHERE: for (i = 0; i < n; ++i) o[i] = a[i] ? b[i] : d[i]; break;
    case OP_MASKED_FILL: for (i = 0; i < n; ++i) o[i] = b[i] ? d[i] : a[i]; break;
    case OP_LAND: for (i = 0; i < n; ++i) o[i] = (a[i] != 0) & (b[i] != 0); break;
    case OP_LOR: for (i = 0; i < n; ++i) o[i] = (a[i] != 0) | (b[i] != 0); break;
    case OP_LXOR: for (i = 0; i < n; ++i) o[i] = (a[i] != 0) ^ (b[i] != 0); break;
    case OP_LNOT: for (i = 0; i < n; ++i) o[i] = a[i] == 0; break;
    case OP_BAND: for (i = 0; i < n; ++i) o[i] = a[i] & b[i]; break;
    case OP_BOR: for (i = 0; i < n; ++i) o[i] = a[i] | b[i]; break;
    case OP_BXOR: for (i = 0; i < n; ++i) o[i] = a[i] ^ b[i]; break;
    case OP_BNOT:
      if (c->out_dtype == TPU_DTYPE_BOOL) {
        for (i = 0; i < n; ++i) o[i] = a[i] == 0;
      } else {
        for (i = 0; i < n; ++i) o[i] = ~a[i];
      }
      break;
    case OP_ADDCMUL:
      for (i = 0; i < n; ++i) o[i] = W_ADD(a[i], W_MUL(W_MUL(p0, b[i]), d[i]));
      break;
    case OP_CLAMP:
      for (i = 0; i < n; ++i) {
        int64_t t = a[i] < b[i] ? b[i] : a[i];
        o[i] = d[i] < t ? d[i] : t;
      }
      break;
    case OP_CLAMP_MIN: for (i = 0; i < n; ++i) o[i] = a[i] < b[i] ? b[i] : a[i]; break;
    case OP_CLAMP_MAX: for (i = 0; i < n; ++i) o[i] = b[i] < a[i] ? b[i] : a[i]; break;
    case OP_HARDTANH:
      for (i = 0; i < n; ++i) {
        int64_t t = a[i] < p0 ? p0 : a[i];
        o[i] = p1 < t ? p1 : t;
      }
      break;
    case OP_HARDTANH_BWD:
      for (i = 0; i < n; ++i) o[i] = (b[i] <= p0 || b[i] >= p1) ? 0 : a[i];
      break;
    case OP_NEG: for (i = 0; i < n; ++i) o[i] = W_SUB(0, a[i]); break;
    case OP_ABS: for (i = 0; i < n; ++i) o[i] = a[i] < 0 ? W_SUB(0, a[i]) : a[i]; break;
    case OP_SIGN: for (i = 0; i < n; ++i) o[i] = (a[i] > 0) - (a[i] < 0); break;
    case OP_FLOOR: case OP_CEIL: case OP_ROUND: case OP_ROUND_DEC: case OP_TRUNC:
    case OP_NAN_TO_NUM:
      for (i = 0; i < n; ++i) o[i] = a[i];
      break;
    case OP_ISNAN: case OP_ISINF: case OP_ISPOSINF: case OP_ISNEGINF:
      for (i = 0; i < n; ++i) o[i] = 0;
      break;
    case OP_ISFINITE: for (i = 0; i < n; ++i) o[i] = 1; break;
    case OP_SIGNBIT: for (i = 0; i < n; ++i) o[i] = a[i] < 0; break;
    case OP_LSHIFT: /* p0: bits of the operand type; out-of-range shifts give 0 */
      for (i = 0; i < n; ++i)
        o[i] = (b[i] < 0 || b[i] >= p0) ? 0 : (int64_t)((uint64_t)a[i] << b[i]);
      break;
    case OP_RSHIFT: /* p1: bits - (signed); out-of-range shifts fill with the sign */
      for (i = 0; i < n; ++i) o[i] = (b[i] < 0 || b[i] >= p1) ? a[i] >> p1 : a[i] >> b[i];
      break;
    case OP_RELU: for (i = 0; i < n; ++i) o[i] = a[i] < 0 ? 0 : a[i]; break;
    case OP_THRESHOLD: for (i = 0; i < n; ++i) o[i] = a[i] <= p0 ? p1 : a[i]; break;
    case OP_THRESHOLD_BWD: for (i = 0; i < n; ++i) o[i] = b[i] <= p0 ? 0 : a[i]; break;
    default: for (i = 0; i < n; ++i) o[i] = 0; break; /* rejected at setup */
  }
  if (zero) __atomic_store_n(&c->err, 1, __ATOMIC_RELAXED);
}

static void ew_tiles_i64(ew_ctx_t* c, char** ptrs, const int64_t* st, int64_t count) {
  _Alignas(64) int64_t buf[EW_MAX_IN + 1][EW_TILE];
  const int64_t* in[EW_MAX_IN] = {buf[1], buf[2], buf[3]};
  for (int64_t off = 0; off < count; off += EW_TILE) {
    int64_t n = count - off < EW_TILE ? count - off : EW_TILE;
    char* dst = ptrs[0] + off * st[0];
    bool direct = c->out_dtype == TPU_DTYPE_I64 && st[0] == 8;
    for (int j = 0; j < c->nin; ++j) {
      const char* src = ptrs[1 + j] + off * st[1 + j];
      if (st[1 + j] == 0 && off > 0) continue; /* broadcast: buffer still holds it */
      if (c->in_dtype[j] == TPU_DTYPE_I64 && st[1 + j] == 8 && !c->in_cast[j]) {
        in[j] = (const int64_t*)src;
        if (direct && ew_overlap(dst, (size_t)n * 8, src, (size_t)n * 8)) direct = false;
      } else {
        ew_load_i64(buf[1 + j], src, st[1 + j], c->in_dtype[j], n);
        if (c->in_cast[j])
          for (int64_t i = 0; i < n; ++i) buf[1 + j][i] = ew_wrap_int(buf[1 + j][i], c->in_cast[j]);
        in[j] = buf[1 + j];
      }
    }
    int64_t* o = direct ? (int64_t*)dst : buf[0];
    ew_compute_i64(c, o, in[0], in[1], in[2], n);
    if (!direct) ew_store_i64(dst, st[0], c->out_dtype, o, n);
  }
}

static void ew_inner(void* vctx, char** ptrs, const int64_t* strides, int64_t count) {
  ew_ctx_t* c = (ew_ctx_t*)vctx;
  switch (c->ct) {
    case EW_CT_F32:
#ifdef EW_HAVE_AVX2_BUILD
      if (c->avx2) {
        tpu_k_avx2_ew_tiles_f32(c, ptrs, strides, count);
        break;
      }
#endif
      ew_tiles_f32(c, ptrs, strides, count);
      break;
    case EW_CT_F64: ew_tiles_f64(c, ptrs, strides, count); break;
    default: ew_tiles_i64(c, ptrs, strides, count); break;
  }
}

/* ---- type promotion (PyTorch's result_type rules) ------------------------- */

static int ew_cat(int dt) {
  if (dt == TPU_DTYPE_BOOL) return 0;
  return tpu_dtype_is_floating((tpu_dtype_t)dt) ? 2 : 1;
}

static int ew_promote(int a, int b) {
  if (a == b || b == TPU_DTYPE_INVALID) return a;
  if (a == TPU_DTYPE_INVALID) return b;
  if (a == TPU_DTYPE_BOOL) return b;
  if (b == TPU_DTYPE_BOOL) return a;
  int ca = ew_cat(a), cb = ew_cat(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == TPU_DTYPE_F64 || b == TPU_DTYPE_F64) return TPU_DTYPE_F64;
    return TPU_DTYPE_F32; /* f32 with anything, or f16 with bf16 */
  }
  if (a == TPU_DTYPE_U8 || b == TPU_DTYPE_U8) {
    int o = a == TPU_DTYPE_U8 ? b : a;
    return o == TPU_DTYPE_I8 ? TPU_DTYPE_I16 : o;
  }
  /* signed: I64 < I32 < I16 < I8 in enum order, so the smaller value wins */
  return a < b ? a : b;
}

static int ew_combine(int higher, int lower) {
  if (higher != TPU_DTYPE_INVALID && ew_cat(higher) == 2) return higher;
  if (higher == TPU_DTYPE_BOOL || (lower != TPU_DTYPE_INVALID && ew_cat(lower) == 2))
    return ew_promote(higher, lower);
  if (higher != TPU_DTYPE_INVALID) return higher;
  return lower;
}

/* ---- setup ------------------------------------------------------------------ */

typedef union {
  double d;
  int64_t i;
  uint8_t b;
} ew_scalar_t;

typedef struct {
  ew_ctx_t ctx;
  tpu_ku_iter_t it;
  tpu_tensor_t wrapped[EW_MAX_IN];
  ew_scalar_t wval[EW_MAX_IN];
} ew_plan_t;

static bool ew_dtype_ok(int dt) { return dt > TPU_DTYPE_INVALID && dt < TPU_DTYPE_COUNT_; }

/* Argument j as an operand: a tensor as it is, a Scalar wrapped as a 0-dim
 * tensor `w` holding its value in `wv`, None as NULL. Tier (for type
 * promotion): 0 = dim tensor, 1 = 0-dim tensor, 2 = wrapped scalar. */
static tpu_status_t ew_operand(const tpu_k_call_t* call, int j, bool required, tpu_tensor_t* w,
                               ew_scalar_t* wv, const tpu_tensor_t** out_op, int* out_tier) {
  const tpu_k_value_t* v = j < call->num_args ? &call->args[j] : NULL;
  int kind = v ? v->kind : TPU_K_NONE;
  *out_op = NULL;
  *out_tier = 0;
  switch (kind) {
    case TPU_K_TENSOR:
      if (!v->v.tensor) return TPU_KU_INVALID(call, "argument %d is a NULL tensor", j);
      if (!ew_dtype_ok(v->v.tensor->dtype)) return tpu_ku_unsupported_dtype(call, v->v.tensor->dtype);
      *out_op = v->v.tensor;
      *out_tier = v->v.tensor->ndim > 0 ? 0 : 1;
      return TPU_OK;
    case TPU_K_INT:
    case TPU_K_DOUBLE:
    case TPU_K_BOOL:
      memset(w, 0, sizeof(*w));
      if (kind == TPU_K_INT) {
        wv->i = v->v.i;
        w->dtype = TPU_DTYPE_I64;
      } else if (kind == TPU_K_DOUBLE) {
        wv->d = v->v.d;
        w->dtype = TPU_DTYPE_F64;
      } else {
        wv->b = v->v.b ? 1 : 0;
        w->dtype = TPU_DTYPE_BOOL;
      }
      w->data = wv;
      *out_op = w;
      *out_tier = 2;
      return TPU_OK;
    case TPU_K_NONE:
      if (required) return TPU_KU_INVALID(call, "argument %d must not be None", j);
      return TPU_OK;
    default:
      return TPU_KU_INVALID(call, "argument %d has an unexpected kind %d", j, kind);
  }
}

/* PyTorch's result_type over the operands selected by `mask` (NULL ones are
 * skipped): dim tensors over 0-dim tensors over wrapped scalars, unless a
 * lower tier is of a higher category. */
static int ew_result_type(int n, const tpu_tensor_t* const* ops, const int* tier, unsigned mask) {
  int res[3] = {TPU_DTYPE_INVALID, TPU_DTYPE_INVALID, TPU_DTYPE_INVALID};
  for (int j = 0; j < n; ++j) {
    if (!ops[j] || !(mask & (1u << j))) continue;
    int dt = ops[j]->dtype;
    if (tier[j] == 2 && dt == TPU_DTYPE_F64) dt = TPU_DTYPE_F32; /* default dtype */
    res[tier[j]] = ew_promote(res[tier[j]], dt);
  }
  return ew_combine(res[0], ew_combine(res[1], res[2]));
}

/* One value broadcast over every element (PyTorch's iter.is_scalar). */
static bool ew_scalar_like(const tpu_tensor_t* t) {
  for (int32_t d = 0; d < t->ndim; ++d)
    if (t->sizes[d] != 1 && t->strides[d] != 0) return false;
  return true;
}

/* f16/bf16 elements per step of PyTorch's CPU vector loop for add/sub:
 * measured 32 with both its AVX2 and AVX512 kernels (PyTorch 2.10). */
#define EW_TORCH_VBLOCK_HALF 32

static double ew_param_d(const tpu_k_call_t* c, int i, double dflt) {
  return tpu_ku_double(c, i, dflt);
}

static tpu_status_t ew_setup(const tpu_k_call_t* call, int op, ew_plan_t* p) {
  memset(&p->ctx, 0, sizeof(p->ctx));
  const ew_opinfo_t* info = &kOpInfo[op];
  if (call->num_outputs < 1 || !call->outputs)
    return TPU_KU_INVALID(call, "expected an output tensor");
  const tpu_tensor_t* out = &call->outputs[0];
  if (!ew_dtype_ok(out->dtype)) return tpu_ku_unsupported_dtype(call, out->dtype);
  if (call->num_args < info->nreq) return TPU_KU_INVALID(call, "expected at least %d arguments, got %d", info->nreq, call->num_args);

  /* Operands: tensors as they are, Scalars wrapped as 0-dim tensors. */
  const tpu_tensor_t* ops[EW_MAX_IN];
  int tier[EW_MAX_IN];
  bool present[EW_MAX_IN];
  for (int j = 0; j < info->nin; ++j) {
    TPU_RETURN_IF_ERROR(
        ew_operand(call, j, j < info->nreq, &p->wrapped[j], &p->wval[j], &ops[j], &tier[j]));
    present[j] = ops[j] != NULL;
  }
  int rt = ew_result_type(info->nin, ops, tier, info->promo);

  ew_ctx_t* c = &p->ctx;
  c->op = op;
  c->avx2 = ew_use_avx2();
  c->out_dtype = out->dtype;
  const bool out_float = tpu_dtype_is_floating((tpu_dtype_t)out->dtype);
  if (info->flags & EW_CMP) {
    c->ct = rt == TPU_DTYPE_F64 ? EW_CT_F64 : ew_cat(rt) == 2 ? EW_CT_F32 : EW_CT_I64;
  } else if (info->flags & EW_LOGIC) {
    c->ct = EW_CT_F32;
    for (int j = 0; j < info->nin; ++j)
      if (present[j] && ops[j]->dtype == TPU_DTYPE_F64) c->ct = EW_CT_F64;
  } else if (out_float) {
    c->ct = (out->dtype == TPU_DTYPE_F64 || rt == TPU_DTYPE_F64) ? EW_CT_F64 : EW_CT_F32;
  } else {
    c->ct = EW_CT_I64;
  }
  if ((info->flags & EW_FLOAT) && !out_float) return tpu_ku_unsupported_dtype(call, out->dtype);
  /* pow by a Scalar 0 or 1 fills ones or copies before PyTorch's dtype dispatch */
  const bool pow_trivial = op == OP_POW && present[1] && tier[1] == 2 &&
                           (tpu_ku_double(call, 1, 2.0) == 0.0 || tpu_ku_double(call, 1, 2.0) == 1.0);
  if ((info->flags & EW_NOBOOL) && rt == TPU_DTYPE_BOOL && !pow_trivial)
    return tpu_ku_unsupported_dtype(call, rt);
  if (op == OP_SUB)
    for (int j = 0; j < info->nin; ++j)
      if (present[j] && ops[j]->dtype == TPU_DTYPE_BOOL)
        return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: Subtraction, the `-` operator, with a bool tensor is not "
                         "supported. If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                         "instead.", call->op);
  if ((info->flags & EW_SAMEOUT) && out->dtype != rt)
    return TPU_KU_INVALID(call, "Found dtype %s but expected %s", tpu_dtype_name((tpu_dtype_t)out->dtype),
                          tpu_dtype_name((tpu_dtype_t)rt));
  if (op == OP_MASKED_FILL) {
    TPU_RETURN_IF_ERROR(tpu_ku_check_scalar_fits(call, 2, out->dtype));
    /* into bool, a value's truth (0.5 is true), as c10::convert<bool> */
    if (out->dtype == TPU_DTYPE_BOOL) c->ct = EW_CT_F64;
  }
  if (info->flags & EW_INTONLY) {
    if (out_float) return tpu_ku_unsupported_dtype(call, out->dtype);
    for (int j = 0; j < info->nin; ++j)
      if (present[j] && ew_cat(ops[j]->dtype) == 2)
        return tpu_ku_unsupported_dtype(call, ops[j]->dtype);
  }

  /* Operands are first converted to the result type, as PyTorch does:
   * integers and wider floats round through f16/bf16, integers wrap to a
   * narrower integer result type. Scalar arguments (wrapped numbers) keep
   * their full precision in float mul/div (PyTorch's CPU-scalar path) and in
   * clamp bounds; add/sub round them to the result type first, as PyTorch's
   * CPU kernels do. For f16/bf16 mul/div, any single-valued divisor/factor
   * (a 0-dim tensor too) keeps its own value (PyTorch: original_scalar_value). */
  const bool keep_scalar =
      ((op == OP_MUL || op == OP_DIV) && c->ct != EW_CT_I64) ||
      op == OP_CLAMP || op == OP_CLAMP_MIN || op == OP_CLAMP_MAX;
  const bool reduced =
      c->ct == EW_CT_F32 && (rt == TPU_DTYPE_F16 || rt == TPU_DTYPE_BF16) && out->dtype == rt;
  const bool other_scalar = info->nin >= 2 && present[1] && ew_scalar_like(ops[1]);
  for (int j = 0; j < info->nin; ++j) {
    if (!present[j] || !(info->promo & (1u << j)) || ops[j]->dtype == rt) continue;
    if (keep_scalar && tier[j] == 2) continue;
    if ((op == OP_MUL || op == OP_DIV) && reduced && j == 1 && other_scalar) continue;
    if (info->flags & EW_LOGIC) continue;
    if (c->ct == EW_CT_F32 && (rt == TPU_DTYPE_F16 || rt == TPU_DTYPE_BF16)) c->in_cast[j] = rt;
    if (c->ct == EW_CT_I64 && ew_cat(rt) == 1 && rt != TPU_DTYPE_I64) c->in_cast[j] = rt;
  }

  /* Parameters and variants. */
  const int np = info->nin;
  const bool ct_int = c->ct == EW_CT_I64;
  switch (op) {
    case OP_ADD:
    case OP_SUB:
      if (ct_int && np < call->num_args && call->args[np].kind == TPU_K_DOUBLE)
        return TPU_KU_INVALID(call, "for integral input tensors, argument alpha must not be a floating point number");
      c->pd[0] = ew_param_d(call, np, 1.0);
      c->pi[0] = tpu_ku_int(call, np, 1);
      if (out->dtype == TPU_DTYPE_BOOL) c->pi[0] = c->pi[0] != 0; /* alpha as bool */
      if (reduced) { /* alpha.to<scalar_t>(), and the tail emulation (ew_tiles) */
        c->rdt = rt;
        c->pd[0] = ew_round_half((float)c->pd[0], rt);
        c->vblock = EW_TORCH_VBLOCK_HALF;
      }
      break;
    case OP_NEXTAFTER:
      if (c->ct == EW_CT_F32 && (rt == TPU_DTYPE_F16 || rt == TPU_DTYPE_BF16)) c->rdt = rt;
      break;
    case OP_GCD:
    case OP_LCM:
      c->pi[0] = rt; /* the width gcd and lcm compute in */
      break;
    case OP_FLOOR_DIVIDE:
      c->op = OP_DIV_FLOOR;
      if (reduced && !other_scalar) c->rdt = rt;
      break;
    case OP_DIV: {
      const char* mode = tpu_ku_string(call, np, NULL);
      if (!mode) {
        if (ct_int) return tpu_ku_unsupported_dtype(call, out->dtype);
      } else if (strcmp(mode, "trunc") == 0) {
        c->op = OP_DIV_TRUNC;
      } else if (strcmp(mode, "floor") == 0) {
        c->op = OP_DIV_FLOOR;
      } else {
        return TPU_KU_INVALID(call, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'", mode);
      }
      /* f16/bf16 by a tensor: PyTorch divides in Half/BFloat16 arithmetic
       * (rounding each step); by a single value, in float. */
      if (mode && reduced && !other_scalar) c->rdt = rt;
      break;
    }
    case OP_POW:
      if (present[1] && tier[1] == 2) {
        const tpu_k_value_t* v = &call->args[1];
        if (ct_int && v->kind == TPU_K_INT && v->v.i < 0 && present[0] && tier[0] != 2)
          return TPU_KU_INVALID(call, "Integers to negative integer powers are not allowed.");
        double e = ct_int ? 0.0 : tpu_ku_double(call, 1, 0.0);
        /* PyTorch: exponent 0 fills ones and 1 copies (any dtype, NaN too);
         * the others as its pow_tensor_scalar_optimized_kernel, not for f16
         * (plain pow there). */
        if (!ct_int && (e == 0.0 || e == 1.0)) {
          c->op = OP_POW_SCALAR;
          c->pd[0] = e;
        } else if (!ct_int && out->dtype != TPU_DTYPE_F16) {
          if (e == 2.0 || e == 3.0 || e == 0.5 || e == -0.5 || e == -1.0 || e == -2.0) {
            c->op = OP_POW_SCALAR;
            c->pd[0] = e;
          }
        }
      }
      break;
    case OP_ADDCMUL:
    case OP_ADDCDIV:
      if (op == OP_ADDCDIV && ew_cat(ops[1]->dtype) != 2 && ew_cat(ops[2]->dtype) != 2)
        return TPU_KU_INVALID(call, "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a true division of tensor1 and tensor2.");
      c->pd[0] = ew_param_d(call, np, 1.0);
      c->pi[0] = tpu_ku_int(call, np, 1);
      break;
    case OP_CLAMP:
      if (!present[1] && !present[2])
        return TPU_KU_INVALID(call, "torch.clamp: At least one of 'min' or 'max' must not be None");
      if (!present[2]) c->op = OP_CLAMP_MIN;
      if (!present[1]) {
        c->op = OP_CLAMP_MAX;
        ops[1] = ops[2];
        c->in_cast[1] = c->in_cast[2];
        present[1] = true;
      }
      break;
    case OP_ROUND: {
      int64_t dec = tpu_ku_int(call, np, 0);
      if (dec != 0 && !ct_int) {
        c->op = OP_ROUND_DEC;
        c->mode = dec < 0;
        if (dec < 0) dec = -dec;
        c->pd[0] = pow(10.0, (double)dec);
      }
      break;
    }
    case OP_NAN_TO_NUM: {
      double big = out->dtype == TPU_DTYPE_F64 ? DBL_MAX
                   : out->dtype == TPU_DTYPE_F16 ? 65504.0
                   : out->dtype == TPU_DTYPE_BF16 ? 3.3895313892515355e38
                                                  : (double)FLT_MAX;
      c->pd[0] = ew_param_d(call, np, 0.0);
      c->pd[1] = ew_param_d(call, np + 1, big);
      c->pd[2] = ew_param_d(call, np + 2, -big);
      break;
    }
    case OP_GELU:
    case OP_GELU_BWD: {
      const char* a = tpu_ku_string(call, np, "none");
      if (strcmp(a, "tanh") == 0) c->mode = 1;
      else if (strcmp(a, "none") != 0)
        return TPU_KU_INVALID(call, "approximate argument must be either none or tanh, got '%s'", a);
      break;
    }
    case OP_LSHIFT:
    case OP_RSHIFT: {
      if (out->dtype == TPU_DTYPE_BOOL || rt == TPU_DTYPE_BOOL)
        return tpu_ku_unsupported_dtype(call, TPU_DTYPE_BOOL);
      int64_t bits = 8 * (int64_t)tpu_dtype_size((tpu_dtype_t)rt);
      c->pi[0] = bits;
      c->pi[1] = bits - (rt != TPU_DTYPE_U8);
      break;
    }
    case OP_THRESHOLD:
      c->pd[0] = ew_param_d(call, np, 0.0);
      c->pd[1] = ew_param_d(call, np + 1, 0.0);
      c->pi[0] = tpu_ku_int(call, np, 0);
      c->pi[1] = tpu_ku_int(call, np + 1, 0);
      break;
    case OP_THRESHOLD_BWD:
      c->pd[0] = ew_param_d(call, np, 0.0);
      c->pi[0] = tpu_ku_int(call, np, 0);
      break;
    case OP_SOFTPLUS:
    case OP_SOFTPLUS_BWD:
      c->pd[0] = ew_param_d(call, np, 1.0);
      c->pd[1] = ew_param_d(call, np + 1, 20.0);
      break;
    case OP_LEAKY_RELU:
    case OP_LEAKY_RELU_BWD:
      c->pd[0] = ew_param_d(call, np, 0.01);
      break;
    case OP_HARDTANH:
    case OP_HARDTANH_BWD:
      c->pd[0] = ew_param_d(call, np, -1.0);
      c->pd[1] = ew_param_d(call, np + 1, 1.0);
      c->pi[0] = tpu_ku_int(call, np, -1);
      c->pi[1] = tpu_ku_int(call, np + 1, 1);
      break;
    default:
      break;
  }

  /* Iterated operands: output first, then the present inputs in order. */
  const tpu_tensor_t* iops[EW_MAX_IN + 1];
  iops[0] = out;
  int k = 0;
  for (int j = 0; j < info->nin; ++j) {
    if (!present[j]) continue;
    if (op == OP_CLAMP && c->op == OP_CLAMP_MAX && j == 2) break; /* moved to slot 1 */
    iops[1 + k] = ops[j];
    c->in_dtype[k] = ops[j]->dtype;
    c->in_cast[k] = c->in_cast[j];
    ++k;
  }
  c->nin = k;
  return tpu_ku_iter_init(&p->it, 1 + k, iops, call->op);
}

static tpu_status_t ew_check(const tpu_k_call_t* call, int op) {
  ew_plan_t p;
  return ew_setup(call, op, &p);
}

static tpu_status_t ew_run(const tpu_k_call_t* call, int op) {
  ew_plan_t p;
  TPU_RETURN_IF_ERROR(ew_setup(call, op, &p));
  const tpu_tensor_t* fill = op == OP_MASKED_FILL ? tpu_ku_tensor(call, 2) : NULL;
  if (fill && tpu_tensor_numel(fill) == 1) { /* a 0-dim value tensor: its data is ready now */
    tpu_k_value_t v;
    v.kind = tpu_dtype_is_floating((tpu_dtype_t)fill->dtype) ? TPU_K_DOUBLE : TPU_K_INT;
    if (v.kind == TPU_K_DOUBLE) v.v.d = tpu_ku_load_f64(fill->data, fill->dtype);
    else v.v.i = tpu_ku_load_i64(fill->data, fill->dtype);
    TPU_RETURN_IF_ERROR(tpu_ku_check_value_fits(call, &v, call->outputs[0].dtype));
  }
  if (p.it.numel == 0) return TPU_OK;
  tpu_ku_iter_parallel(&p.it, call->pool, EW_GRAIN, ew_inner, &p.ctx);
  if (__atomic_load_n(&p.ctx.err, __ATOMIC_RELAXED))
    return TPU_KU_INVALID(call, "ZeroDivisionError: integer division by zero");
  return TPU_OK;
}

/* ---- isin ------------------------------------------------------------------
 * isin(elements, test_elements, *, assume_unique, invert): both sides are
 * converted to their common dtype (result_type, Scalars as wrapped numbers)
 * and compared as order-preserving uint64 keys (NaN matches nothing, -0.0
 * matches 0.0). The test values are taken in chunks of EW_ISIN_CHUNK that
 * are sorted on the stack; every element binary-searches each chunk until it
 * is found: bounded memory, no allocation, O(n log k) per chunk.
 * assume_unique only lets PyTorch choose its algorithm: for inputs that
 * honour it the result is the same. */
#define EW_ISIN_CHUNK 8192 /* 64 KiB of stack */

static bool ew_isin_key(const char* p, int dt, int ct, uint64_t* out) {
  if (tpu_dtype_is_floating((tpu_dtype_t)ct)) {
    double v;
    if (tpu_dtype_is_floating((tpu_dtype_t)dt)) {
      v = tpu_ku_load_f64(p, dt);
    } else {
      int64_t i = tpu_ku_load_i64(p, dt);
      v = ct == TPU_DTYPE_F64 ? (double)i : (double)(float)i;
    }
    if (ct == TPU_DTYPE_F32) v = (float)v;
    else if (ct != TPU_DTYPE_F64) v = ew_round_half((float)v, ct);
    if (v != v) return false;
    if (v == 0) v = 0.0; /* -0.0 -> +0.0 */
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    *out = (u >> 63) ? ~u : u | (1ull << 63);
  } else {
    *out = (uint64_t)ew_wrap_int(tpu_ku_load_i64(p, dt), ct) ^ (1ull << 63);
  }
  return true;
}

static void ew_heapsort_u64(uint64_t* k, int64_t n) {
  for (int64_t end = n, start = n / 2; end > 1;) {
    if (start > 0) {
      --start;
    } else {
      --end;
      uint64_t t = k[0];
      k[0] = k[end];
      k[end] = t;
    }
    for (int64_t r = start; 2 * r + 1 < end;) {
      int64_t ch = 2 * r + 1;
      if (ch + 1 < end && k[ch] < k[ch + 1]) ++ch;
      if (k[r] >= k[ch]) break;
      uint64_t t = k[r];
      k[r] = k[ch];
      k[ch] = t;
      r = ch;
    }
  }
}

typedef struct {
  int dt, ct;
  bool invert, first;
  uint64_t* keys;
  int64_t nkeys;
} ew_isin_t;

static void ew_isin_collect(void* vc, char** p, const int64_t* st, int64_t n) {
  ew_isin_t* c = (ew_isin_t*)vc;
  for (int64_t i = 0; i < n; ++i)
    if (ew_isin_key(p[0] + i * st[0], c->dt, c->ct, &c->keys[c->nkeys])) c->nkeys++;
}

/* p[0]: bool output, p[1]: elements */
static void ew_isin_inner(void* vc, char** p, const int64_t* st, int64_t n) {
  const ew_isin_t* c = (const ew_isin_t*)vc;
  const uint8_t hit = c->invert ? 0 : 1;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* o = (uint8_t*)(p[0] + i * st[0]);
    if (!c->first && *o == hit) continue;
    uint64_t key;
    bool found = false;
    if (c->nkeys > 0 && ew_isin_key(p[1] + i * st[1], c->dt, c->ct, &key)) {
      int64_t lo = 0, hi = c->nkeys;
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->keys[mid] < key) lo = mid + 1;
        else hi = mid;
      }
      found = lo < c->nkeys && c->keys[lo] == key;
    }
    if (found) *o = hit;
    else if (c->first) *o = !hit;
  }
}

typedef struct {
  tpu_tensor_t wrapped[2];
  ew_scalar_t wval[2];
  const tpu_tensor_t* ops[2]; /* elements, test_elements */
  int ct;
  bool invert;
} ew_isin_plan_t;

static tpu_status_t ew_isin_setup(const tpu_k_call_t* call, ew_isin_plan_t* p) {
  if (call->num_outputs < 1 || !call->outputs) return TPU_KU_INVALID(call, "expected an output tensor");
  const tpu_tensor_t* out = &call->outputs[0];
  if (out->dtype != TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, out->dtype);
  int tier[2];
  for (int j = 0; j < 2; ++j) {
    TPU_RETURN_IF_ERROR(ew_operand(call, j, true, &p->wrapped[j], &p->wval[j], &p->ops[j], &tier[j]));
    if (p->ops[j]->dtype == TPU_DTYPE_BOOL) return tpu_ku_unsupported_dtype(call, TPU_DTYPE_BOOL);
  }
  p->ct = ew_result_type(2, p->ops, tier, 3u);
  p->invert = tpu_ku_bool(call, 3, false);
  return TPU_OK;
}

static tpu_status_t ew_isin_check(const tpu_k_call_t* call) {
  ew_isin_plan_t p;
  return ew_isin_setup(call, &p);
}

static tpu_status_t ew_isin_run(const tpu_k_call_t* call) {
  ew_isin_plan_t p;
  TPU_RETURN_IF_ERROR(ew_isin_setup(call, &p));
  const tpu_tensor_t* eops[2] = {&call->outputs[0], p.ops[0]};
  tpu_ku_iter_t it, tit;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, eops, call->op));
  if (it.numel == 0) return TPU_OK;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&tit, 1, &p.ops[1], call->op));
  uint64_t keys[EW_ISIN_CHUNK];
  ew_isin_t c = {p.ops[0]->dtype, p.ct, p.invert, true, keys, 0};
  int64_t nt = tit.numel, c0 = 0;
  do { /* at least one pass, which writes every element */
    int64_t c1 = nt - c0 < EW_ISIN_CHUNK ? nt : c0 + EW_ISIN_CHUNK;
    ew_isin_t tc = {p.ops[1]->dtype, p.ct, false, false, keys, 0};
    if (c1 > c0) tpu_ku_iter_run(&tit, c0, c1, ew_isin_collect, &tc);
    ew_heapsort_u64(keys, tc.nkeys);
    c.nkeys = tc.nkeys;
    tpu_ku_iter_parallel(&it, call->pool, 4096, ew_isin_inner, &c);
    c.first = false;
    c0 = c1;
  } while (c0 < nt);
  return TPU_OK;
}

/* ---- entries -------------------------------------------------------------- */

#define EW_OPS(X)                                                                     \
  X(ADD) X(SUB) X(MUL) X(DIV) X(POW) X(MAXIMUM) X(MINIMUM) X(EQ) X(NE) X(LT) X(LE)    \
  X(GT) X(GE) X(WHERE) X(MASKED_FILL) X(LAND) X(LOR) X(LXOR) X(LNOT) X(BAND) X(BOR)   \
  X(BXOR) X(BNOT) X(FMOD) X(REMAINDER) X(LERP) X(ADDCMUL) X(ADDCDIV) X(CLAMP)         \
  X(CLAMP_MIN) X(CLAMP_MAX) X(NEG) X(ABS) X(SIGN) X(RECIPROCAL) X(SQRT) X(RSQRT)      \
  X(EXP) X(EXP2) X(EXPM1) X(LOG) X(LOG1P) X(LOG2) X(SIN) X(COS) X(TAN) X(TANH)        \
  X(SIGMOID) X(ERF) X(ASIN) X(ACOS) X(ATAN) X(ASINH) X(ACOSH) X(ATANH) X(ATAN2)       \
  X(ANGLE) X(FMAX) X(FMIN) X(LOG10) X(HYPOT) X(NEXTAFTER) X(GCD) X(LCM) X(FLOOR) X(CEIL) X(ROUND) X(TRUNC) X(ISNAN) X(NAN_TO_NUM)  \
  X(RELU)                                                                             \
  X(GELU) X(GELU_BWD) X(SILU) X(SILU_BWD) X(SIGMOID_BWD) X(TANH_BWD) X(THRESHOLD)     \
  X(THRESHOLD_BWD) X(SOFTPLUS) X(SOFTPLUS_BWD) X(LEAKY_RELU) X(LEAKY_RELU_BWD)        \
  X(HARDTANH) X(HARDTANH_BWD) X(MISH) X(MISH_BWD) X(ISINF) X(ISPOSINF) X(ISNEGINF)    \
  X(ISFINITE) X(SIGNBIT) X(LSHIFT) X(RSHIFT) X(FLOOR_DIVIDE)

#define EW_WRAPPERS(NAME)                                                               \
  static tpu_status_t ew_run_##NAME(const tpu_k_call_t* c) { return ew_run(c, OP_##NAME); } \
  static tpu_status_t ew_check_##NAME(const tpu_k_call_t* c) { return ew_check(c, OP_##NAME); }
EW_OPS(EW_WRAPPERS)
#undef EW_WRAPPERS

#define E(name, NAME) {name, ew_run_##NAME, ew_check_##NAME, 0},
/* functional, .out and in-place overloads of a unary op "aten::<n>" */
#define E_UNARY(n, NAME) E("aten::" n, NAME) E("aten::" n ".out", NAME) E("aten::" n "_", NAME)
/* comparisons: .Tensor/.Scalar, their .out and in-place forms */
#define E_CMP(n, NAME)                                                          \
  E("aten::" n ".Tensor", NAME) E("aten::" n ".Scalar", NAME)                   \
  E("aten::" n ".Tensor_out", NAME) E("aten::" n ".Scalar_out", NAME)           \
  E("aten::" n "_.Tensor", NAME) E("aten::" n "_.Scalar", NAME)
/* bitwise binaries: also the Scalar_Tensor forms */
#define E_BITWISE(n, NAME)                                                      \
  E_CMP(n, NAME) E("aten::" n ".Scalar_Tensor", NAME) E("aten::" n ".Scalar_Tensor_out", NAME)

/* shifts: bitwise_*_shift overloads and the Python operator forms */
#define E_SHIFT(n, op, iop, NAME)                                                  \
  E("aten::" n ".Tensor", NAME) E("aten::" n ".Tensor_Scalar", NAME)               \
  E("aten::" n ".Scalar_Tensor", NAME) E("aten::" n ".Tensor_out", NAME)           \
  E("aten::" n ".Tensor_Scalar_out", NAME) E("aten::" n ".Scalar_Tensor_out", NAME) \
  E("aten::" n "_.Tensor", NAME) E("aten::" n "_.Tensor_Scalar", NAME)             \
  E("aten::" op ".Tensor", NAME) E("aten::" op ".Scalar", NAME)                    \
  E("aten::" op ".Tensor_out", NAME) E("aten::" op ".Scalar_out", NAME)            \
  E("aten::" iop ".Tensor", NAME) E("aten::" iop ".Scalar", NAME)

const tpu_k_entry_t tpu_k_elementwise_entries[] = {
    /* arithmetic */
    E("aten::add.Tensor", ADD) E("aten::add.Scalar", ADD) E("aten::add.out", ADD)
    E("aten::add.Scalar_out", ADD) E("aten::add_.Tensor", ADD) E("aten::add_.Scalar", ADD)
    E("aten::sub.Tensor", SUB) E("aten::sub.Scalar", SUB) E("aten::sub.out", SUB)
    E("aten::sub.Scalar_out", SUB) E("aten::sub_.Tensor", SUB) E("aten::sub_.Scalar", SUB)
    E("aten::mul.Tensor", MUL) E("aten::mul.Scalar", MUL) E("aten::mul.out", MUL)
    E("aten::mul.Scalar_out", MUL) E("aten::mul_.Tensor", MUL) E("aten::mul_.Scalar", MUL)
    E("aten::div.Tensor", DIV) E("aten::div.Scalar", DIV) E("aten::div.Tensor_mode", DIV)
    E("aten::div.Scalar_mode", DIV) E("aten::div.out", DIV) E("aten::div.out_mode", DIV)
    E("aten::div.Scalar_out", DIV) E("aten::div.Scalar_mode_out", DIV)
    E("aten::div_.Tensor", DIV) E("aten::div_.Scalar", DIV) E("aten::div_.Tensor_mode", DIV)
    E("aten::div_.Scalar_mode", DIV)
    E("aten::floor_divide", FLOOR_DIVIDE) E("aten::floor_divide.Scalar", FLOOR_DIVIDE)
    E("aten::floor_divide.out", FLOOR_DIVIDE) E("aten::floor_divide.Scalar_out", FLOOR_DIVIDE)
    E("aten::floor_divide_.Tensor", FLOOR_DIVIDE) E("aten::floor_divide_.Scalar", FLOOR_DIVIDE)
    E("aten::pow.Tensor_Tensor", POW) E("aten::pow.Tensor_Scalar", POW)
    E("aten::pow.Scalar", POW) E("aten::pow.Tensor_Tensor_out", POW)
    E("aten::pow.Tensor_Scalar_out", POW) E("aten::pow.Scalar_out", POW)
    E("aten::pow_.Tensor", POW) E("aten::pow_.Scalar", POW)
    E("aten::maximum", MAXIMUM) E("aten::maximum.out", MAXIMUM)
    E("aten::minimum", MINIMUM) E("aten::minimum.out", MINIMUM)
    E("aten::fmax", FMAX) E("aten::fmax.out", FMAX) E("aten::fmin", FMIN) E("aten::fmin.out", FMIN)
    E_UNARY("atan2", ATAN2) /* binary, but the same three overloads */
    E_UNARY("hypot", HYPOT) E_UNARY("nextafter", NEXTAFTER) E_UNARY("gcd", GCD) E_UNARY("lcm", LCM)
    E("aten::fmod.Tensor", FMOD) E("aten::fmod.Scalar", FMOD) E("aten::fmod.Tensor_out", FMOD)
    E("aten::fmod.Scalar_out", FMOD) E("aten::fmod_.Tensor", FMOD) E("aten::fmod_.Scalar", FMOD)
    E("aten::remainder.Tensor", REMAINDER) E("aten::remainder.Scalar", REMAINDER)
    E("aten::remainder.Scalar_Tensor", REMAINDER) E("aten::remainder.Tensor_out", REMAINDER)
    E("aten::remainder.Scalar_out", REMAINDER) E("aten::remainder.Scalar_Tensor_out", REMAINDER)
    E("aten::remainder_.Tensor", REMAINDER) E("aten::remainder_.Scalar", REMAINDER)
    E("aten::lerp.Scalar", LERP) E("aten::lerp.Tensor", LERP) E("aten::lerp.Scalar_out", LERP)
    E("aten::lerp.Tensor_out", LERP) E("aten::lerp_.Scalar", LERP) E("aten::lerp_.Tensor", LERP)
    E("aten::addcmul", ADDCMUL) E("aten::addcmul.out", ADDCMUL) E("aten::addcmul_", ADDCMUL)
    E("aten::addcdiv", ADDCDIV) E("aten::addcdiv.out", ADDCDIV) E("aten::addcdiv_", ADDCDIV)
    /* comparisons */
    E_CMP("eq", EQ) E_CMP("ne", NE) E_CMP("lt", LT) E_CMP("le", LE) E_CMP("gt", GT) E_CMP("ge", GE)
    /* selection */
    E("aten::where.self", WHERE) E("aten::where.ScalarOther", WHERE)
    E("aten::where.ScalarSelf", WHERE) E("aten::where.Scalar", WHERE)
    E("aten::where.self_out", WHERE)
    E("aten::masked_fill.Scalar", MASKED_FILL) E("aten::masked_fill.Tensor", MASKED_FILL)
    E("aten::masked_fill.Scalar_out", MASKED_FILL) E("aten::masked_fill.Tensor_out", MASKED_FILL)
    E("aten::masked_fill_.Scalar", MASKED_FILL) E("aten::masked_fill_.Tensor", MASKED_FILL)
    /* logical / bitwise */
    E("aten::logical_and", LAND) E("aten::logical_and.out", LAND) E("aten::logical_and_", LAND)
    E("aten::logical_or", LOR) E("aten::logical_or.out", LOR) E("aten::logical_or_", LOR)
    E("aten::logical_xor", LXOR) E("aten::logical_xor.out", LXOR) E("aten::logical_xor_", LXOR)
    E_UNARY("logical_not", LNOT)
    E_BITWISE("bitwise_and", BAND) E_BITWISE("bitwise_or", BOR) E_BITWISE("bitwise_xor", BXOR)
    E_UNARY("bitwise_not", BNOT)
    E_SHIFT("bitwise_left_shift", "__lshift__", "__ilshift__", LSHIFT)
    E_SHIFT("bitwise_right_shift", "__rshift__", "__irshift__", RSHIFT)
    /* clamp */
    E("aten::clamp", CLAMP) E("aten::clamp.Tensor", CLAMP) E("aten::clamp.out", CLAMP)
    E("aten::clamp.Tensor_out", CLAMP) E("aten::clamp_", CLAMP) E("aten::clamp_.Tensor", CLAMP)
    E("aten::clamp_min", CLAMP_MIN) E("aten::clamp_min.Tensor", CLAMP_MIN)
    E("aten::clamp_min.out", CLAMP_MIN) E("aten::clamp_min.Tensor_out", CLAMP_MIN)
    E("aten::clamp_min_", CLAMP_MIN) E("aten::clamp_min_.Tensor", CLAMP_MIN)
    E("aten::clamp_max", CLAMP_MAX) E("aten::clamp_max.Tensor", CLAMP_MAX)
    E("aten::clamp_max.out", CLAMP_MAX) E("aten::clamp_max.Tensor_out", CLAMP_MAX)
    E("aten::clamp_max_", CLAMP_MAX) E("aten::clamp_max_.Tensor", CLAMP_MAX)
    /* unary math */
    E_UNARY("neg", NEG) E_UNARY("abs", ABS) E_UNARY("sign", SIGN) E_UNARY("sgn", SIGN)
    E_UNARY("reciprocal", RECIPROCAL) E_UNARY("sqrt", SQRT) E_UNARY("rsqrt", RSQRT)
    E_UNARY("exp", EXP) E_UNARY("exp2", EXP2) E_UNARY("expm1", EXPM1) E_UNARY("log", LOG)
    E_UNARY("log1p", LOG1P) E_UNARY("log2", LOG2) E_UNARY("log10", LOG10) E_UNARY("sin", SIN) E_UNARY("cos", COS)
    E_UNARY("tan", TAN) E_UNARY("tanh", TANH) E_UNARY("sigmoid", SIGMOID) E_UNARY("erf", ERF)
    E_UNARY("asin", ASIN) E_UNARY("acos", ACOS) E_UNARY("atan", ATAN) E_UNARY("asinh", ASINH)
    E_UNARY("acosh", ACOSH) E_UNARY("atanh", ATANH)
    E("aten::angle", ANGLE) E("aten::angle.out", ANGLE)
    E_UNARY("floor", FLOOR) E_UNARY("ceil", CEIL) E_UNARY("round", ROUND)
    E("aten::round.decimals", ROUND) E("aten::round.decimals_out", ROUND)
    E("aten::round_.decimals", ROUND)
    E_UNARY("trunc", TRUNC)
    E("aten::isnan", ISNAN) E("aten::isnan.out", ISNAN)
    E("aten::isinf", ISINF) E("aten::isinf.out", ISINF)
    E("aten::isposinf", ISPOSINF) E("aten::isposinf.out", ISPOSINF)
    E("aten::isneginf", ISNEGINF) E("aten::isneginf.out", ISNEGINF)
    E("aten::isfinite", ISFINITE)
    E("aten::signbit", SIGNBIT) E("aten::signbit.out", SIGNBIT)
    {"aten::isin.Tensor_Tensor", ew_isin_run, ew_isin_check, 0, NULL},
    {"aten::isin.Tensor_Tensor_out", ew_isin_run, ew_isin_check, 0, NULL},
    {"aten::isin.Tensor_Scalar", ew_isin_run, ew_isin_check, 0, NULL},
    {"aten::isin.Tensor_Scalar_out", ew_isin_run, ew_isin_check, 0, NULL},
    {"aten::isin.Scalar_Tensor", ew_isin_run, ew_isin_check, 0, NULL},
    {"aten::isin.Scalar_Tensor_out", ew_isin_run, ew_isin_check, 0, NULL},
    E_UNARY("nan_to_num", NAN_TO_NUM)
    /* activations */
    E_UNARY("relu", RELU) E_UNARY("gelu", GELU) E_UNARY("silu", SILU) E_UNARY("mish", MISH)
    E_UNARY("hardtanh", HARDTANH) E_UNARY("leaky_relu", LEAKY_RELU)
    E_UNARY("threshold", THRESHOLD)
    E("aten::softplus", SOFTPLUS) E("aten::softplus.out", SOFTPLUS)
    E("aten::gelu_backward", GELU_BWD) E("aten::gelu_backward.grad_input", GELU_BWD)
    E("aten::silu_backward", SILU_BWD) E("aten::silu_backward.grad_input", SILU_BWD)
    E("aten::sigmoid_backward", SIGMOID_BWD) E("aten::sigmoid_backward.grad_input", SIGMOID_BWD)
    E("aten::tanh_backward", TANH_BWD) E("aten::tanh_backward.grad_input", TANH_BWD)
    E("aten::threshold_backward", THRESHOLD_BWD)
    E("aten::threshold_backward.grad_input", THRESHOLD_BWD)
    E("aten::softplus_backward", SOFTPLUS_BWD)
    E("aten::softplus_backward.grad_input", SOFTPLUS_BWD)
    E("aten::leaky_relu_backward", LEAKY_RELU_BWD)
    E("aten::leaky_relu_backward.grad_input", LEAKY_RELU_BWD)
    E("aten::hardtanh_backward", HARDTANH_BWD)
    E("aten::hardtanh_backward.grad_input", HARDTANH_BWD)
    E("aten::mish_backward", MISH_BWD)
};
const size_t tpu_k_elementwise_count =
    sizeof(tpu_k_elementwise_entries) / sizeof(tpu_k_elementwise_entries[0]);

#endif /* !EW_ARCH_AVX2 */

#else /* EW_TEMPLATE_PASS: float compute, instantiated with T = float, double */

static void EW_FN(ew_load)(T* restrict d, const char* src, int64_t st, int dt, int64_t n) {
  switch (dt) {
    case TPU_DTYPE_F32: EW_LOADLOOP(float, (T)v); break;
    case TPU_DTYPE_F64: EW_LOADLOOP(double, (T)v); break;
    case TPU_DTYPE_F16:
#if EW_IS_F32
      if (st == 2) {
        ew_h2f_run(d, (const uint16_t*)src, n);
        break;
      }
#endif
      EW_LOADLOOP(uint16_t, (T)ew_vm_h2f(v));
      break;
    case TPU_DTYPE_BF16: EW_LOADLOOP(uint16_t, (T)ew_vm_bf2f(v)); break;
    case TPU_DTYPE_I64: EW_LOADLOOP(int64_t, (T)v); break;
    case TPU_DTYPE_I32: EW_LOADLOOP(int32_t, (T)v); break;
    case TPU_DTYPE_I16: EW_LOADLOOP(int16_t, (T)v); break;
    case TPU_DTYPE_I8: EW_LOADLOOP(int8_t, (T)v); break;
    case TPU_DTYPE_U8: EW_LOADLOOP(uint8_t, (T)v); break;
    case TPU_DTYPE_BOOL: EW_LOADLOOP(uint8_t, (T)(v != 0)); break;
    default: for (int64_t i = 0; i < n; ++i) d[i] = 0; break;
  }
}

static void EW_FN(ew_store)(char* dst, int64_t st, int dt, const T* restrict s, int64_t n) {
  switch (dt) {
    case TPU_DTYPE_F32: EW_STORELOOP(float, (float)v); break;
    case TPU_DTYPE_F64: EW_STORELOOP(double, (double)v); break;
    case TPU_DTYPE_F16:
#if EW_IS_F32
      if (st == 2) {
        ew_f2h_run((uint16_t*)dst, s, n);
        break;
      }
#endif
      EW_STORELOOP(uint16_t, ew_vm_f2h((float)v));
      break;
    case TPU_DTYPE_BF16: EW_STORELOOP(uint16_t, ew_vm_f2bf((float)v)); break;
    case TPU_DTYPE_I64: EW_STORELOOP(int64_t, ew_f2i(v)); break;
    case TPU_DTYPE_I32: EW_STORELOOP(int32_t, (int32_t)(uint32_t)(uint64_t)ew_f2i(v)); break;
    case TPU_DTYPE_I16: EW_STORELOOP(int16_t, (int16_t)(uint16_t)(uint64_t)ew_f2i(v)); break;
    case TPU_DTYPE_I8: EW_STORELOOP(int8_t, (int8_t)(uint8_t)(uint64_t)ew_f2i(v)); break;
    case TPU_DTYPE_U8: EW_STORELOOP(uint8_t, (uint8_t)(uint64_t)ew_f2i(v)); break;
    case TPU_DTYPE_BOOL: EW_STORELOOP(uint8_t, (uint8_t)(v != 0)); break;
    default: break;
  }
}

/* o may be one of the inputs (an in-place op): every loop computes o[i] from
 * element i of the inputs in one pass, so no pointer here is restrict. */
static void EW_FN(ew_compute)(const ew_ctx_t* c, T* o, const T* a,
                              const T* b, const T* d, int64_t n) {
  const T p0 = (T)c->pd[0], p1 = (T)c->pd[1], p2 = (T)c->pd[2];
  const T one = (T)1, zero = (T)0, half = (T)0.5;
  const T nan_v = (T)NAN;
  int64_t i;
#if EW_IS_F32
  if (ew_vm_try(c, o, a, b, n)) return;
#endif
  switch (c->op) {
    /* alpha != 1: one fused multiply-add, like PyTorch's vec::fmadd */
    case OP_ADD:
      if (p0 == one) for (i = 0; i < n; ++i) o[i] = a[i] + b[i];
      else for (i = 0; i < n; ++i) o[i] = fma(b[i], p0, a[i]);
      break;
    case OP_SUB:
      if (p0 == one) for (i = 0; i < n; ++i) o[i] = a[i] - b[i];
      else for (i = 0; i < n; ++i) o[i] = fma(b[i], -p0, a[i]);
      break;
    case OP_ADD_RTAIL: /* p0 carries sub's sign */
      for (i = 0; i < n; ++i)
        o[i] = (T)ew_round_half((float)a[i] + ew_round_half((float)(p0 * b[i]), c->rdt), c->rdt);
      break;
    case OP_MUL: for (i = 0; i < n; ++i) o[i] = a[i] * b[i]; break;
    case OP_DIV: for (i = 0; i < n; ++i) o[i] = a[i] / b[i]; break;
    case OP_DIV_TRUNC:
      if (c->rdt) /* the quotient rounds to f16/bf16 before it is truncated */
        for (i = 0; i < n; ++i) o[i] = trunc((T)ew_round_half((float)(a[i] / b[i]), c->rdt));
      else
        for (i = 0; i < n; ++i) o[i] = trunc(a[i] / b[i]);
      break;
    case OP_DIV_FLOOR:
      if (c->rdt) {
        for (i = 0; i < n; ++i) o[i] = (T)ew_div_floor_reduced((float)a[i], (float)b[i], c->rdt);
        break;
      }
      for (i = 0; i < n; ++i) {
        T x = a[i], y = b[i];
        if (y == 0) {
          o[i] = x / y;
          continue;
        }
        T mod = fmod(x, y);
        T div = (x - mod) / y;
        if (mod != 0 && ((y < 0) != (mod < 0))) div -= one;
        T fd;
        if (div != 0) {
          fd = floor(div);
          if (div - fd > half) fd += one;
        } else {
          fd = copysign(zero, x / y);
        }
        o[i] = fd;
      }
      break;
    case OP_POW: for (i = 0; i < n; ++i) o[i] = pow(a[i], b[i]); break;
    case OP_POW_SCALAR:
      if (p0 == (T)1) for (i = 0; i < n; ++i) o[i] = a[i];
      else if (p0 == (T)0) for (i = 0; i < n; ++i) o[i] = one;
      else if (p0 == (T)2) for (i = 0; i < n; ++i) o[i] = a[i] * a[i];
      else if (p0 == (T)3) for (i = 0; i < n; ++i) o[i] = a[i] * a[i] * a[i];
      else if (p0 == (T)0.5) for (i = 0; i < n; ++i) o[i] = sqrt(a[i]);
      else if (p0 == (T)-0.5) for (i = 0; i < n; ++i) o[i] = one / sqrt(a[i]);
      else if (p0 == (T)-1) for (i = 0; i < n; ++i) o[i] = one / a[i];
      else for (i = 0; i < n; ++i) o[i] = one / (a[i] * a[i]);
      break;
    case OP_MAXIMUM:
      for (i = 0; i < n; ++i) {
        T x = a[i], y = b[i];
        o[i] = (x != x || y != y) ? nan_v : (x > y ? x : y);
      }
      break;
    case OP_MINIMUM:
      for (i = 0; i < n; ++i) {
        T x = a[i], y = b[i];
        o[i] = (x != x || y != y) ? nan_v : (x < y ? x : y);
      }
      break;
    case OP_EQ: for (i = 0; i < n; ++i) o[i] = a[i] == b[i] ? one : zero; break;
    case OP_NE: for (i = 0; i < n; ++i) o[i] = a[i] != b[i] ? one : zero; break;
    case OP_LT: for (i = 0; i < n; ++i) o[i] = a[i] < b[i] ? one : zero; break;
    case OP_LE: for (i = 0; i < n; ++i) o[i] = a[i] <= b[i] ? one : zero; break;
    case OP_GT: for (i = 0; i < n; ++i) o[i] = a[i] > b[i] ? one : zero; break;
    case OP_GE: for (i = 0; i < n; ++i) o[i] = a[i] >= b[i] ? one : zero; break;
    case OP_WHERE: for (i = 0; i < n; ++i) o[i] = a[i] != 0 ? b[i] : d[i]; break;
    case OP_MASKED_FILL: for (i = 0; i < n; ++i) o[i] = b[i] != 0 ? d[i] : a[i]; break;
    case OP_LAND: for (i = 0; i < n; ++i) o[i] = (a[i] != 0 && b[i] != 0) ? one : zero; break;
    case OP_LOR: for (i = 0; i < n; ++i) o[i] = (a[i] != 0 || b[i] != 0) ? one : zero; break;
    case OP_LXOR: for (i = 0; i < n; ++i) o[i] = ((a[i] != 0) != (b[i] != 0)) ? one : zero; break;
    case OP_LNOT: for (i = 0; i < n; ++i) o[i] = a[i] == 0 ? one : zero; break;
    case OP_FMOD: for (i = 0; i < n; ++i) o[i] = fmod(a[i], b[i]); break;
    case OP_REMAINDER:
      for (i = 0; i < n; ++i) {
        T y = b[i];
        T m = fmod(a[i], y);
        if (m != 0 && ((y < 0) != (m < 0))) m += y;
        o[i] = m;
      }
      break;
    case OP_LERP:
      for (i = 0; i < n; ++i) {
        T s = a[i], e = b[i], w = d[i];
        o[i] = fabs(w) < half ? s + w * (e - s) : e - (e - s) * (one - w);
      }
      break;
    case OP_ADDCMUL: for (i = 0; i < n; ++i) o[i] = a[i] + p0 * b[i] * d[i]; break;
    case OP_ADDCDIV: for (i = 0; i < n; ++i) o[i] = a[i] + p0 * b[i] / d[i]; break;
    case OP_CLAMP:
      for (i = 0; i < n; ++i) {
        T x = a[i], lo = b[i], hi = d[i];
        T t = x < lo ? lo : x;
        t = hi < t ? hi : t;
        o[i] = (lo != lo || hi != hi) ? nan_v : t;
      }
      break;
    case OP_CLAMP_MIN:
      for (i = 0; i < n; ++i) {
        T x = a[i], lo = b[i];
        o[i] = lo != lo ? lo : (x < lo ? lo : x);
      }
      break;
    case OP_CLAMP_MAX:
      for (i = 0; i < n; ++i) {
        T x = a[i], hi = b[i];
        o[i] = hi != hi ? hi : (hi < x ? hi : x);
      }
      break;
    case OP_HARDTANH:
      for (i = 0; i < n; ++i) {
        T x = a[i];
        T t = x < p0 ? p0 : x;
        o[i] = p1 < t ? p1 : t;
      }
      break;
    case OP_HARDTANH_BWD: /* NaN input -> 0, like PyTorch's vectorised path */
      for (i = 0; i < n; ++i) o[i] = (b[i] > p0 && b[i] < p1) ? a[i] : zero;
      break;
    case OP_NEG: for (i = 0; i < n; ++i) o[i] = -a[i]; break;
    case OP_ABS: for (i = 0; i < n; ++i) o[i] = fabs(a[i]); break;
    case OP_SIGN:
      for (i = 0; i < n; ++i) o[i] = (T)((zero < a[i]) - (a[i] < zero));
      break;
    case OP_RECIPROCAL: for (i = 0; i < n; ++i) o[i] = one / a[i]; break;
    case OP_SQRT: for (i = 0; i < n; ++i) o[i] = sqrt(a[i]); break;
    case OP_RSQRT: for (i = 0; i < n; ++i) o[i] = one / sqrt(a[i]); break;
    case OP_EXP: for (i = 0; i < n; ++i) o[i] = exp(a[i]); break;
    case OP_EXP2: for (i = 0; i < n; ++i) o[i] = exp2(a[i]); break;
    case OP_EXPM1: for (i = 0; i < n; ++i) o[i] = expm1(a[i]); break;
    case OP_LOG: for (i = 0; i < n; ++i) o[i] = log(a[i]); break;
    case OP_LOG1P: for (i = 0; i < n; ++i) o[i] = log1p(a[i]); break;
    case OP_LOG2: for (i = 0; i < n; ++i) o[i] = log2(a[i]); break;
    case OP_SIN: for (i = 0; i < n; ++i) o[i] = sin(a[i]); break;
    case OP_COS: for (i = 0; i < n; ++i) o[i] = cos(a[i]); break;
    case OP_TAN: for (i = 0; i < n; ++i) o[i] = tan(a[i]); break;
    case OP_TANH: for (i = 0; i < n; ++i) o[i] = tanh(a[i]); break;
    case OP_SIGMOID: for (i = 0; i < n; ++i) o[i] = one / (one + exp(-a[i])); break;
    case OP_ERF: for (i = 0; i < n; ++i) o[i] = erf(a[i]); break;
    case OP_ASIN: for (i = 0; i < n; ++i) o[i] = asin(a[i]); break;
    case OP_ACOS: for (i = 0; i < n; ++i) o[i] = acos(a[i]); break;
    case OP_ATAN: for (i = 0; i < n; ++i) o[i] = atan(a[i]); break;
    case OP_ASINH: for (i = 0; i < n; ++i) o[i] = asinh(a[i]); break;
    case OP_ACOSH: for (i = 0; i < n; ++i) o[i] = acosh(a[i]); break;
    case OP_ATANH: for (i = 0; i < n; ++i) o[i] = atanh(a[i]); break;
    case OP_ATAN2: for (i = 0; i < n; ++i) o[i] = atan2(a[i], b[i]); break;
    case OP_ANGLE: /* real input: pi below zero, else 0; NaN stays */
      for (i = 0; i < n; ++i) o[i] = a[i] != a[i] ? a[i] : (a[i] < zero ? (T)EW_PI : zero);
      break;
    case OP_FMAX: for (i = 0; i < n; ++i) o[i] = fmax(a[i], b[i]); break;
    case OP_LOG10: for (i = 0; i < n; ++i) o[i] = log10(a[i]); break;
    case OP_HYPOT: for (i = 0; i < n; ++i) o[i] = hypot(a[i], b[i]); break;
    case OP_NEXTAFTER: /* f16/bf16: the neighbour in that format */
      if (c->rdt) for (i = 0; i < n; ++i) o[i] = (T)ew_nextafter_reduced((float)a[i], (float)b[i], c->rdt);
      else for (i = 0; i < n; ++i) o[i] = nextafter(a[i], b[i]);
      break;
    case OP_FMIN: for (i = 0; i < n; ++i) o[i] = fmin(a[i], b[i]); break;
    case OP_FLOOR: for (i = 0; i < n; ++i) o[i] = floor(a[i]); break;
    case OP_CEIL: for (i = 0; i < n; ++i) o[i] = ceil(a[i]); break;
    case OP_ROUND: for (i = 0; i < n; ++i) o[i] = nearbyint(a[i]); break;
    case OP_ROUND_DEC:
      if (c->mode) for (i = 0; i < n; ++i) o[i] = nearbyint(a[i] / p0) * p0;
      else for (i = 0; i < n; ++i) o[i] = nearbyint(a[i] * p0) / p0;
      break;
    case OP_TRUNC: for (i = 0; i < n; ++i) o[i] = trunc(a[i]); break;
    case OP_ISNAN: for (i = 0; i < n; ++i) o[i] = a[i] != a[i] ? one : zero; break;
    case OP_ISINF: for (i = 0; i < n; ++i) o[i] = fabs(a[i]) == (T)INFINITY ? one : zero; break;
    case OP_ISPOSINF: for (i = 0; i < n; ++i) o[i] = a[i] == (T)INFINITY ? one : zero; break;
    case OP_ISNEGINF: for (i = 0; i < n; ++i) o[i] = a[i] == -(T)INFINITY ? one : zero; break;
    case OP_ISFINITE: for (i = 0; i < n; ++i) o[i] = fabs(a[i]) < (T)INFINITY ? one : zero; break;
    case OP_SIGNBIT: for (i = 0; i < n; ++i) o[i] = signbit(a[i]) ? one : zero; break;
    case OP_NAN_TO_NUM:
      for (i = 0; i < n; ++i) {
        T x = a[i];
        o[i] = x != x ? p0 : (x == (T)INFINITY ? p1 : (x == -(T)INFINITY ? p2 : x));
      }
      break;
    case OP_RELU: for (i = 0; i < n; ++i) o[i] = a[i] < zero ? zero : a[i]; break;
    case OP_GELU:
      if (c->mode) {
        const T kb = (T)(EW_SQRT2 * EW_2_SQRTPI * 0.5), kk = (T)0.044715;
        for (i = 0; i < n; ++i) {
          T x = a[i];
          T inner = kb * (x + kk * x * x * x);
          o[i] = half * x * (one + tanh(inner));
        }
      } else {
        const T ka = (T)EW_SQRT1_2;
        for (i = 0; i < n; ++i) o[i] = a[i] * half * (one + erf(a[i] * ka));
      }
      break;
    case OP_GELU_BWD:
      if (c->mode) {
        const T kb = (T)(EW_SQRT2 * EW_2_SQRTPI * 0.5), kk = (T)0.044715;
        for (i = 0; i < n; ++i) {
          T x = b[i];
          T x2 = x * x;
          T inner = kb * (x + kk * x2 * x);
          T th = tanh(inner);
          T left = half * x, right = one + th;
          T left_d = half * right;
          T right_d = left * (one - th * th) * kb * (one + (T)3 * kk * x2);
          o[i] = a[i] * (left_d + right_d);
        }
      } else {
        const T ka = (T)EW_SQRT1_2, kp = (T)EW_1_SQRT_2PI;
        for (i = 0; i < n; ++i) {
          T x = b[i];
          T cdf = half * (one + erf(x * ka));
          T pdf = exp(-half * x * x) * kp;
          o[i] = a[i] * (cdf + x * pdf);
        }
      }
      break;
    case OP_SILU: for (i = 0; i < n; ++i) o[i] = a[i] / (one + exp(-a[i])); break;
    case OP_SILU_BWD:
      for (i = 0; i < n; ++i) {
        T x = b[i];
        T s = one / (one + exp(-x));
        o[i] = a[i] * s * (one + x * (one - s));
      }
      break;
    case OP_SIGMOID_BWD: for (i = 0; i < n; ++i) o[i] = a[i] * (one - b[i]) * b[i]; break;
    case OP_TANH_BWD: for (i = 0; i < n; ++i) o[i] = a[i] * (one - b[i] * b[i]); break;
    case OP_THRESHOLD: for (i = 0; i < n; ++i) o[i] = a[i] <= p0 ? p1 : a[i]; break;
    case OP_THRESHOLD_BWD: for (i = 0; i < n; ++i) o[i] = b[i] <= p0 ? zero : a[i]; break;
    case OP_SOFTPLUS:
      for (i = 0; i < n; ++i) {
        T xb = a[i] * p0;
        o[i] = xb > p1 ? a[i] : log1p(exp(xb)) / p0;
      }
      break;
    case OP_SOFTPLUS_BWD:
      for (i = 0; i < n; ++i) {
        T xb = b[i] * p0;
        T z = exp(xb);
        o[i] = xb > p1 ? a[i] : a[i] * z / (z + one);
      }
      break;
    case OP_LEAKY_RELU: for (i = 0; i < n; ++i) o[i] = a[i] > zero ? a[i] : a[i] * p0; break;
    case OP_LEAKY_RELU_BWD:
      for (i = 0; i < n; ++i) o[i] = b[i] > zero ? a[i] : a[i] * p0;
      break;
    case OP_MISH:
      for (i = 0; i < n; ++i) o[i] = a[i] * tanh(log1p(exp(a[i])));
      break;
    case OP_MISH_BWD:
      for (i = 0; i < n; ++i) {
        T x = b[i];
        T sg = one / (one + exp(-x));
        T ts = tanh(log1p(exp(x)));
        o[i] = a[i] * (ts + x * sg * (one - ts * ts));
      }
      break;
    default: for (i = 0; i < n; ++i) o[i] = zero; break; /* rejected at setup */
  }
}

static void EW_FN(ew_tiles)(ew_ctx_t* c, char** ptrs, const int64_t* st, int64_t count) {
  _Alignas(64) T buf[EW_MAX_IN + 1][EW_TILE];
  const T* in[EW_MAX_IN] = {buf[1], buf[2], buf[3]};
  /* f16/bf16 add/sub: PyTorch's vector path fuses (one rounding), its scalar
   * tail rounds each step to the dtype; elements [nvec, count) are the tail. */
  int64_t nvec = count;
  ew_ctx_t tail;
  if (c->rdt && (c->op == OP_ADD || c->op == OP_SUB)) {
    nvec = ew_vector_prefix(c, st, count);
    tail = *c;
    tail.op = OP_ADD_RTAIL;
    if (c->op == OP_SUB) tail.pd[0] = -c->pd[0];
  }
  for (int64_t off = 0; off < count; off += EW_TILE) {
    int64_t n = count - off < EW_TILE ? count - off : EW_TILE;
    char* dst = ptrs[0] + off * st[0];
    bool direct = c->out_dtype == EW_NATIVE && st[0] == (int64_t)sizeof(T);
    for (int j = 0; j < c->nin; ++j) {
      const char* src = ptrs[1 + j] + off * st[1 + j];
      if (st[1 + j] == 0 && off > 0) continue; /* broadcast: buffer still holds it */
      if (c->in_dtype[j] == EW_NATIVE && st[1 + j] == (int64_t)sizeof(T) && !c->in_cast[j]) {
        in[j] = (const T*)src;
        /* in place (the same elements) is fine: every loop computes o[i]
         * from the inputs' element i in one pass; other overlaps are not */
        if (direct && src != dst && ew_overlap(dst, (size_t)n * sizeof(T), src, (size_t)n * sizeof(T)))
          direct = false;
      } else {
        EW_FN(ew_load)(buf[1 + j], src, st[1 + j], c->in_dtype[j], n);
        if (c->in_cast[j])
          for (int64_t i = 0; i < n; ++i)
            buf[1 + j][i] = (T)ew_round_half((float)buf[1 + j][i], c->in_cast[j]);
        in[j] = buf[1 + j];
      }
    }
    T* o = direct ? (T*)dst : buf[0];
    int64_t k = nvec - off < 0 ? 0 : (nvec - off < n ? nvec - off : n);
    if (k > 0) EW_FN(ew_compute)(c, o, in[0], in[1], in[2], k);
    if (k < n) EW_FN(ew_compute)(&tail, o + k, in[0] + k, in[1] + k, in[2] + k, n - k);
    if (!direct) EW_FN(ew_store)(dst, st[0], c->out_dtype, o, n);
  }
}

#endif /* EW_TEMPLATE_PASS */
