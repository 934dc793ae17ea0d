/* ew_vecmath.h - float32 transcendental loops written so that GCC
 * auto-vectorises them (no libm calls, branch-free selects, integer bit
 * tricks through unions). Internal to the elementwise family.
 *
 * Included twice: by elementwise.c (portable build: SSE2 on x86-64, NEON on
 * aarch64) and by arch/x86_64/elementwise_avx2.c (compiled with
 * -mavx2 -mfma; EW_VM_FMA then fuses the polynomial steps). Each includer
 * gets its own static copies; the AVX2 file exports wrappers that
 * elementwise.c selects at run time with __builtin_cpu_supports.
 *
 * Accuracy (float32, measured against double libm): exp < 1 ulp over its
 * range, with overflow to inf, gradual underflow and NaN passthrough; tanh
 * < 1.5 ulp; erf < 2.5 ulp; sigmoid/silu/gelu a few ulp. Exceptions, all
 * where results are tiny next to the inputs: sigmoid(x) for x < -87 (results
 * below FLT_MIN flush towards 0, as 1/(1+exp(-x)) does in PyTorch) and the
 * far lower tail of Phi / gelu (relative error ~1e-6, absolute < 1e-30).
 *
 * All loops: `o` and `a` may not partially overlap; o == a is not allowed
 * either (the caller passes a separate output buffer in that case). */
#ifndef TPU_KERNELS_EW_VECMATH_H_
#define TPU_KERNELS_EW_VECMATH_H_

#include <stdbool.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

typedef union {
  float f;
  int32_t i;
  uint32_t u;
} ew_vm_bits_t;

/* ---- conversions (plain integer code: no special options needed) ------- */

/* f16 <-> f32 without branches (Giesen's conversions; f32 -> f16 rounds to
 * nearest even, keeps NaN quiet and saturates to inf). Bit-identical to
 * tpu_ku_f16_to_f32 / tpu_ku_f32_to_f16 except for NaN payloads. */
static inline float ew_vm_h2f(uint16_t h) {
  ew_vm_bits_t o, den, magic;
  magic.u = 113u << 23;
  o.u = (uint32_t)(h & 0x7fffu) << 13;
  uint32_t e = o.u & (0x7c00u << 13);
  o.u += (127u - 15u) << 23;
  uint32_t infnan = o.u + ((128u - 16u) << 23);
  den.u = o.u + (1u << 23);
  den.f -= magic.f;
  uint32_t r = e == (0x7c00u << 13) ? infnan : (e == 0 ? den.u : o.u);
  o.u = r | ((uint32_t)(h & 0x8000u) << 16);
  return o.f;
}

static inline uint16_t ew_vm_f2h(float f) {
  ew_vm_bits_t in, den;
  in.f = f;
  uint32_t sign = (in.u >> 16) & 0x8000u;
  uint32_t a = in.u & 0x7fffffffu;
  uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  den.u = a;
  den.f += 0.5f;
  uint32_t sub = den.u - 0x3f000000u;
  uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  uint32_t r = a >= 0x47800000u ? big : (a < 0x38800000u ? sub : norm);
  return (uint16_t)(r | sign);
}

/* f32 -> bf16, round to nearest even, NaN kept quiet (as tpu_ku_f32_to_bf16,
 * without the branch). */
static inline uint16_t ew_vm_f2bf(float f) {
  ew_vm_bits_t b;
  b.f = f;
  uint32_t r = (b.u + 0x7fffu + ((b.u >> 16) & 1u)) >> 16;
  uint32_t q = (b.u >> 16) | 0x40u;
  return (uint16_t)((b.u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float ew_vm_bf2f(uint16_t h) {
  ew_vm_bits_t b;
  b.u = (uint32_t)h << 16;
  return b.f;
}

static inline void ew_vm_h2f_loop(float* restrict o, const uint16_t* restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_h2f(a[i]);
}
static inline void ew_vm_f2h_loop(uint16_t* restrict o, const float* restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_f2h(a[i]);
}

/* Selects below must become vector blends: GCC only if-converts them when
 * floating-point operations may be speculated (exception flags are never
 * observed by kernels), and without PRE, which otherwise splits a clamp into
 * per-arm copies of the whole computation that follows it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "no-tree-pre")
#endif

#if defined(__FMA__)
#define EW_VM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define EW_VM_FMA(a, b, c) ((a) * (b) + (c))
#endif


/* exp(x): Cody-Waite reduction x = n ln2 + r, degree-6 polynomial (Cephes
 * expf coefficients), 2^n applied in two halves so that results between
 * FLT_MIN and 0 are subnormal rather than flushed. */
static inline float ew_vm_exp(float x) {
  float xc = x > -104.0f ? x : -104.0f; /* NaN -> -104 here, restored below */
  xc = xc < 89.0f ? xc : 89.0f;
  float r = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round */
  float t = EW_VM_FMA(r, -0.693359375f, xc);
  t = EW_VM_FMA(r, 2.12194440e-4f, t);
  float p = 1.9875691500e-4f;
  p = EW_VM_FMA(p, t, 1.3981999507e-3f);
  p = EW_VM_FMA(p, t, 8.3334519073e-3f);
  p = EW_VM_FMA(p, t, 4.1665795894e-2f);
  p = EW_VM_FMA(p, t, 1.6666665459e-1f);
  p = EW_VM_FMA(p, t, 5.0000001201e-1f);
  float y = EW_VM_FMA(p, t * t, t) + 1.0f;
  int32_t n = (int32_t)r; /* r is an integer in [-150, 129] */
  int32_t n1 = n >> 1, n2 = n - n1; /* arithmetic shift (GCC, Clang) */
  ew_vm_bits_t s1, s2;
  s1.i = (n1 + 127) << 23;
  s2.i = (n2 + 127) << 23;
  y = y * s1.f * s2.f;
  return x != x ? x : y;
}

/* 1 / (1 + exp(-x)) */
static inline float ew_vm_sigmoid(float x) { return 1.0f / (1.0f + ew_vm_exp(-x)); }

/* tanh: odd polynomial (Cephes tanhf) below 0.625, 1 - 2/(e^2|x| + 1) above. */
static inline float ew_vm_tanh(float x) {
  float ax = x < 0 ? -x : x;
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = EW_VM_FMA(p, z, 2.06390887954e-2f);
  p = EW_VM_FMA(p, z, -5.37397155531e-2f);
  p = EW_VM_FMA(p, z, 1.33314422036e-1f);
  p = EW_VM_FMA(p, z, -3.33332819422e-1f);
  float small = EW_VM_FMA(p * z, x, x);
  float e = ew_vm_exp(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  float r = ax < 0.625f ? small : big;
  r = __builtin_copysignf(r, x); /* odd: keeps tanh(-0) = -0 */
  return x != x ? x : r;
}

/* erfc(|x|) * exp(x^2) for |x| in [0.921875, 10], as a polynomial in
 * t = 1 / (1 + |x|) (least-squares fit, relative error 2e-8 in exact
 * arithmetic, about 2e-7 evaluated in float). */
static inline float ew_vm_erfcx_tail(float ax) {
  float t = 1.0f / (1.0f + ax);
  float q = 0.844134676905639f;
  q = EW_VM_FMA(q, t, -1.5310502449467103f);
  q = EW_VM_FMA(q, t, -0.1006695425235466f);
  q = EW_VM_FMA(q, t, 2.2296254747275652f);
  q = EW_VM_FMA(q, t, -1.774657399739905f);
  q = EW_VM_FMA(q, t, -0.011879069897883662f);
  q = EW_VM_FMA(q, t, 0.24033405334638192f);
  q = EW_VM_FMA(q, t, 0.568101337973421f);
  q = EW_VM_FMA(q, t, 0.563986031687522f);
  q = EW_VM_FMA(q, t, 4.5016112985413535e-06f);
  return q;
}

/* erf(x)/x for |x| < 0.921875, as a polynomial in x^2 (relative error < 2e-8). */
static inline float ew_vm_erf_small(float x) {
  float z = x * x;
  float p = -0.0006047106698371543f;
  p = EW_VM_FMA(p, z, 0.005005616919738292f);
  p = EW_VM_FMA(p, z, -0.026776396987360215f);
  p = EW_VM_FMA(p, z, 0.11282139694680414f);
  p = EW_VM_FMA(p, z, -0.37612533838185797f);
  p = EW_VM_FMA(p, z, 1.1283791602585362f);
  return p * x;
}

static inline float ew_vm_erf(float x) {
  float ax = x < 0 ? -x : x;
  float axc = ax > 4.0f ? 4.0f : ax;
  float tail = ew_vm_exp(-axc * axc) * ew_vm_erfcx_tail(axc < 0.921875f ? 0.921875f : axc);
  float big = 1.0f - tail;
  big = ax > 4.0f ? 1.0f : big;
  big = x < 0 ? -big : big;
  float r = ax < 0.921875f ? ew_vm_erf_small(x) : big;
  return x != x ? x : r;
}

/* exp(-x^2 / 2) for |x| <= 15, with the rounding error of x^2 compensated
 * (FMA, or Dekker's product without it): in the tails that error would
 * otherwise dominate (x^2 = 100 carries an absolute error of 4e-6). */
static inline float ew_vm_exp_neg_half_sq(float x) {
  float sq = x * x;
#if defined(__FMA__)
  float lo = __builtin_fmaf(x, x, -sq);
#else
  float c = 4097.0f * x;
  float xh = c - (c - x), xl = x - xh;
  float lo = ((xh * xh - sq) + 2.0f * xh * xl) + xl * xl;
#endif
  float e = ew_vm_exp(-0.5f * sq);
  return e - e * (0.5f * lo);
}

/* Phi(x) = 0.5 (1 + erf(x / sqrt 2)), computed without cancellation in the
 * lower tail (where 1 + erf would lose every digit). */
static inline float ew_vm_phi(float x) {
  float ax = x < 0 ? -x : x;
  float axc = ax > 13.5f ? 13.5f : ax; /* Phi(-13.5) is below FLT_TRUE_MIN */
  float az = axc * 0.70710678118654752f;
  float tail = 0.5f * ew_vm_exp_neg_half_sq(axc) *
               ew_vm_erfcx_tail(az < 0.921875f ? 0.921875f : az);
  tail = ax > 13.5f ? 0.0f : tail;
  float big = x < 0 ? tail : 1.0f - tail;
  float small = 0.5f + 0.5f * ew_vm_erf_small(x * 0.70710678118654752f);
  float r = az < 0.921875f ? small : big;
  return x != x ? x : r;
}

/* ---- loops ------------------------------------------------------------------ */

static inline void ew_vm_exp_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_exp(a[i]);
}
static inline void ew_vm_sigmoid_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_sigmoid(a[i]);
}
static inline void ew_vm_silu_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] / (1.0f + ew_vm_exp(-a[i]));
}
static inline void ew_vm_tanh_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_tanh(a[i]);
}
static inline void ew_vm_erf_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_erf(a[i]);
}
/* gelu(x) = x Phi(x) (so gelu(-inf) = -inf * 0 = NaN, as in PyTorch's
 * scalar path). */
static inline void ew_vm_gelu_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] * ew_vm_phi(a[i]);
}
/* tanh-approximate gelu: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline void ew_vm_gelu_tanh_loop(float* o, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    float u = 0.7978845608028654f * EW_VM_FMA(0.044715f * x, x * x, x);
    o[i] = x / (1.0f + ew_vm_exp(-2.0f * u));
  }
}
/* silu'(x) * grad: s (1 + x (1 - s)), s = sigmoid(x) */
static inline void ew_vm_silu_bwd_loop(float* o, const float* g,
                                       const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    float s = ew_vm_sigmoid(x);
    o[i] = g[i] * s * (1.0f + x * (1.0f - s));
  }
}
/* gelu_tanh'(x) * grad, y = x / (1 + exp(-2u)) = x s, s = sigmoid(2u),
 * u = sqrt(2/pi) (x + 0.044715 x^3): y' = s + x s (1 - s) 2 u'(x). */
static inline void ew_vm_gelu_tanh_bwd_loop(float* o, const float* g,
                                            const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    float x2 = x * x;
    float u = 0.7978845608028654f * EW_VM_FMA(0.044715f * x, x2, x);
    float du = 0.7978845608028654f * EW_VM_FMA(3.0f * 0.044715f, x2, 1.0f);
    float s = 1.0f / (1.0f + ew_vm_exp(-2.0f * u));
    o[i] = g[i] * EW_VM_FMA(x * s * (1.0f - s), 2.0f * du, s);
  }
}
/* gelu'(x) * grad = grad (Phi(x) + x phi(x)) */
static inline void ew_vm_gelu_bwd_loop(float* o, const float* g,
                                       const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    float xc = x > 15.0f ? 15.0f : (x < -15.0f ? -15.0f : x); /* pdf(15) = 0 */
    float pdf = ew_vm_exp_neg_half_sq(xc) * 0.3989422804014327f;
    o[i] = g[i] * (ew_vm_phi(x) + x * pdf); /* x = +-inf: inf * 0 = NaN, as PyTorch */
  }
}

/* sqrt(x) and 1 / sqrt(x), correctly rounded (NaN for x < 0, -0 kept). With
 * errno semantics GCC keeps a scalar sqrtss plus a libm call per element, and
 * the optimize pragma cannot lift them, so the vector instruction is
 * spelled out. */
static inline void ew_vm_sqrt_loop(float* o, const float* a, int64_t n,
                                   bool recip) {
  int64_t i = 0;
#if defined(__AVX__)
  const __m256 one8 = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_sqrt_ps(_mm256_loadu_ps(a + i));
    _mm256_storeu_ps(o + i, recip ? _mm256_div_ps(one8, v) : v);
  }
#endif
#if defined(__SSE2__)
  const __m128 one4 = _mm_set1_ps(1.0f);
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_sqrt_ps(_mm_loadu_ps(a + i));
    _mm_storeu_ps(o + i, recip ? _mm_div_ps(one4, v) : v);
  }
#endif
  for (; i < n; ++i) {
    float v = __builtin_sqrtf(a[i]);
    o[i] = recip ? 1.0f / v : v;
  }
}

/* ---- dispatch (the AVX2 file exports these two under its own names) ------ */

enum {
  EW_VM_EXP,
  EW_VM_SIGMOID,
  EW_VM_SILU,
  EW_VM_TANH,
  EW_VM_ERF,
  EW_VM_GELU,
  EW_VM_GELU_TANH,
  EW_VM_SQRT,
  EW_VM_RSQRT,
  /* binary: (grad, x) */
  EW_VM_SILU_BWD,
  EW_VM_GELU_BWD,
};

static inline void ew_vm_unary(int which, float* o, const float* a, int64_t n) {
  switch (which) {
    case EW_VM_EXP: ew_vm_exp_loop(o, a, n); break;
    case EW_VM_SIGMOID: ew_vm_sigmoid_loop(o, a, n); break;
    case EW_VM_SILU: ew_vm_silu_loop(o, a, n); break;
    case EW_VM_TANH: ew_vm_tanh_loop(o, a, n); break;
    case EW_VM_ERF: ew_vm_erf_loop(o, a, n); break;
    case EW_VM_GELU: ew_vm_gelu_loop(o, a, n); break;
    case EW_VM_GELU_TANH: ew_vm_gelu_tanh_loop(o, a, n); break;
    case EW_VM_SQRT: ew_vm_sqrt_loop(o, a, n, false); break;
    case EW_VM_RSQRT: ew_vm_sqrt_loop(o, a, n, true); break;
    default: break;
  }
}

static inline void ew_vm_binary(int which, float* o, const float* g,
                                const float* a, int64_t n) {
  switch (which) {
    case EW_VM_SILU_BWD: ew_vm_silu_bwd_loop(o, g, a, n); break;
    case EW_VM_GELU_BWD: ew_vm_gelu_bwd_loop(o, g, a, n); break;
    default: break;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif /* TPU_KERNELS_EW_VECMATH_H_ */
