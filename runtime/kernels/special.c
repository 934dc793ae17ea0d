/* special.c - kernel family "special" (see tpu/kernels.h for the ABI): the
 * gamma-function family (lgamma, digamma, polygamma), erfc, erfcx, cosh and
 * sinh, as unary elementwise ops.
 *
 * Numerics follow PyTorch's CPU kernels: float32, float16 and bfloat16
 * compute in float (the result rounded once to the output dtype; float16 and
 * bfloat16 polygamma(n >= 2) round its zeta factor first, as the CPU does),
 * float64 in double; erfcx of x >= 0 and the zeta sum always run in double
 * (the CPU's accumulation type for float); integer and bool inputs are read as values of the output's dtype
 * (PyTorch's meta functions give them a float32 output). digamma, trigamma
 * and the Hurwitz zeta behind polygamma use the methods of the Cephes Math
 * Library, as PyTorch's ATen/native/Math.h does (3-clause BSD, Stephen L.
 * Moshier), so poles, infinities and NaNs come out as on the CPU. */
#define _GNU_SOURCE /* lgammaf_r / lgamma_r: lgamma itself writes the global signgam */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define SP_PI 3.14159265358979323846

/* ---- digamma, trigamma, zeta --------------------------------------------- */

/* psi(10) = H_9 - Euler's gamma */
#define SP_PSI10 2.25175258906672110764

/* Asymptotic series of digamma in z = 1/x^2, highest power first:
 * B_2k / (2k) for k = 7 .. 1. */
static const double sp_psi_series[7] = {1.0 / 12, -691.0 / 32760, 1.0 / 132, -1.0 / 240,
                                        1.0 / 252, -1.0 / 120, 1.0 / 12};

static float sp_digammaf(float x) {
  if (x == 0.0f) return copysignf(INFINITY, -x);
  if (x < 0.0f) {
    if (x == truncf(x)) return NAN;
    /* reflection; tan of pi times the fractional part (in double, as the CPU) */
    double ip;
    double fr = modf((double)x, &ip);
    float refl = (float)(SP_PI / tan(SP_PI * fr));
    return sp_digammaf(1.0f - x) - refl;
  }
  float acc = 0.0f;
  for (; x < 10.0f; x += 1.0f) acc -= 1.0f / x;
  if (x == 10.0f) return acc + (float)SP_PSI10;
  float tail = 0.0f;
  if (x < 1.0e17f) {
    float z = 1.0f / (x * x), p = 0.0f;
    for (int i = 0; i < 7; ++i) p = p * z + (float)sp_psi_series[i];
    tail = z * p;
  }
  return acc + logf(x) - 0.5f / x - tail;
}

static double sp_digamma(double x) {
  if (x == 0.0) return copysign(INFINITY, -x);
  if (x < 0.0) {
    if (x == trunc(x)) return NAN;
    double ip;
    double fr = modf(x, &ip);
    return sp_digamma(1.0 - x) - SP_PI / tan(SP_PI * fr);
  }
  double acc = 0.0;
  for (; x < 10.0; x += 1.0) acc -= 1.0 / x;
  if (x == 10.0) return acc + SP_PSI10;
  double tail = 0.0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x), p = 0.0;
    for (int i = 0; i < 7; ++i) p = p * z + sp_psi_series[i];
    tail = z * p;
  }
  return acc + log(x) - 0.5 / x - tail;
}

/* trigamma: reflection below 1/2, six recurrence steps, then the asymptotic
 * series 1/x + 1/(2x^2) + 1/(6x^3) - 1/(30x^5) + 1/(42x^7). */
static float sp_trigammaf(float x) {
  float sign = 1.0f, acc = 0.0f;
  if (x < 0.5f) {
    sign = -1.0f;
    float s = sinf((float)SP_PI * x);
    acc -= ((float)SP_PI * (float)SP_PI) / (s * s);
    x = 1.0f - x;
  }
  for (int i = 0; i < 6; ++i, x += 1.0f) acc += 1.0f / (x * x);
  float w = 1.0f / (x * x);
  acc += (1.0f + 1.0f / (2.0f * x) + w * (1.0f / 6 - w * (1.0f / 30 - w * (1.0f / 42)))) / x;
  return sign * acc;
}

static double sp_trigamma(double x) {
  double sign = 1.0, acc = 0.0;
  if (x < 0.5) {
    sign = -1.0;
    double s = sin(SP_PI * x);
    acc -= (SP_PI * SP_PI) / (s * s);
    x = 1.0 - x;
  }
  for (int i = 0; i < 6; ++i, x += 1.0) acc += 1.0 / (x * x);
  double w = 1.0 / (x * x);
  acc += (1.0 + 1.0 / (2.0 * x) + w * (1.0 / 6 - w * (1.0 / 30 - w * (1.0 / 42)))) / x;
  return sign * acc;
}

/* (2k)! / B_2k, k = 1 .. 12: the Euler-Maclaurin correction terms. */
static const double sp_zeta_em[12] = {
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
};

/* Hurwitz zeta(s, q) = sum_{k >= 0} (k + q)^-s for s > 1, in double (the
 * CPU's accumulation type for float too): direct terms until q + k > 9 and at
 * least nine of them, then the Euler-Maclaurin tail. */
static double sp_zeta(double s, double q) {
  const double eps = 1.11022302462515654042e-16;
  if (s == 1.0) return INFINITY;
  if (s < 1.0) return NAN;
  if (q <= 0.0) {
    if (q == floor(q)) return INFINITY;
    if (s != floor(s)) return NAN;
  }
  double sum = pow(q, -s), a = q, b = 0.0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    ++i;
    a += 1.0;
    b = pow(a, -s);
    sum += b;
    if (-eps * sum < b && b < eps * sum) return sum;
  }
  const double w = a;
  sum += b * w / (s - 1.0);
  sum -= 0.5 * b;
  double fac = 1.0, k = 0.0;
  for (i = 0; i < 12; ++i) {
    fac *= s + k;
    b /= w;
    double t = fac * b / sp_zeta_em[i];
    sum += t;
    if (fabs(t / sum) < eps) return sum;
    k += 1.0;
    fac *= s + k;
    b /= w;
    k += 1.0;
  }
  return sum;
}

/* polygamma(n, x) for n >= 2: (-1)^(n+1) n! zeta(n + 1, x). */
static float sp_polygammaf(int64_t n, float x) {
  if (n == 0) return sp_digammaf(x);
  if (n == 1) return sp_trigammaf(x);
  float sign = (n % 2) ? 1.0f : -1.0f;
  float fact = expf(lgammaf_r((float)n + 1.0f, &(int){0}));
  return sign * fact * (float)sp_zeta((double)(n + 1), (double)x);
}

static double sp_polygamma(int64_t n, double x) {
  if (n == 0) return sp_digamma(x);
  if (n == 1) return sp_trigamma(x);
  double sign = (n % 2) ? 1.0 : -1.0;
  double fact = exp(lgamma_r((double)n + 1.0, &(int){0}));
  return sign * fact * sp_zeta((double)(n + 1), x);
}

/* float16/bfloat16 polygamma for n >= 2, as the CPU evaluates it: the zeta
 * value rounded to the dtype before it is multiplied by n! (in float). */
static float sp_round(int dt, float v) {
  return dt == TPU_DTYPE_BF16 ? tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(v)) : tpu_ku_f16_to_f32(tpu_ku_f32_to_f16(v));
}

static float sp_polygamma_reduced(int dt, int64_t n, float x) {
  float np1 = sp_round(dt, sp_round(dt, (float)n) + 1.0f);
  float fact = expf(lgammaf_r(np1, &(int){0}));
  float z = sp_round(dt, (float)sp_zeta((double)sp_round(dt, (float)(n + 1)), (double)x));
  return ((n % 2) ? 1.0f : -1.0f) * fact * z;
}

/* ---- erfcx ----------------------------------------------------------------
 * erfcx(x) = exp(x^2) erfc(x). Below 26, exp(x^2) erfc(x) directly, with the
 * rounding error of x^2 put back (exp(x2 + e) ~ exp(x2) (1 + e), e from an
 * fma); from 26 on (where erfc nears underflow) the asymptotic series
 * 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2x^2)^k, whose terms at x >= 26
 * fall below double precision by k = 7. */
static double sp_erfcx(double x) {
  if (isnan(x)) return x;
  if (x < 26.0) {
    double x2 = x * x, e = fma(x, x, -x2);
    double ex = exp(x2);
    if (isinf(ex)) return INFINITY; /* x < -26.6: 2 exp(x^2) overflows */
    return ex * erfc(x) * (1.0 + e);
  }
  if (isinf(x)) return 0.0;
  double u = 1.0 / (2.0 * x * x), term = 1.0, sum = 1.0;
  for (int k = 1; k <= 8; ++k) {
    term *= -(2.0 * k - 1.0) * u;
    sum += term;
  }
  return sum / (x * 1.7724538509055160273); /* sqrt(pi) */
}

/* float: the CPU evaluates negative arguments as 2 exp(x^2) - erfcx(-x) in
 * float arithmetic (x^2 rounded to float: 1e-6 off at x = -8), which this
 * follows; positive arguments through double. */
static float sp_erfcxf(float x) {
  if (!(x < 0.0f)) return (float)sp_erfcx((double)x);
  if (x < -26.7f) return INFINITY;
  float e2 = 2.0f * expf(x * x);
  if (x < -6.1f) return e2;
  return e2 - (float)sp_erfcx(-(double)x);
}

/* ---- the unary driver ----------------------------------------------------- */

typedef enum { SP_LGAMMA, SP_DIGAMMA, SP_POLYGAMMA, SP_ERFC, SP_ERFCX, SP_COSH, SP_SINH } sp_op_t;

typedef struct {
  sp_op_t op;
  int64_t n; /* polygamma's order */
  int dt_out, dt_in;
  bool f64;
} sp_un_t;

static double sp_eval_f64(const sp_un_t* u, double x) {
  switch (u->op) {
    case SP_LGAMMA: return lgamma_r(x, &(int){0});
    case SP_DIGAMMA: return sp_digamma(x);
    case SP_POLYGAMMA: return sp_polygamma(u->n, x);
    case SP_ERFC: return erfc(x);
    case SP_ERFCX: return sp_erfcx(x);
    case SP_COSH: return cosh(x);
    case SP_SINH: return sinh(x);
  }
  return NAN;
}

static float sp_eval_f32(const sp_un_t* u, float x) {
  switch (u->op) {
    case SP_LGAMMA: return lgammaf_r(x, &(int){0});
    case SP_DIGAMMA: return sp_digammaf(x);
    case SP_POLYGAMMA: return sp_polygammaf(u->n, x);
    case SP_ERFC: return erfcf(x);
    case SP_ERFCX: return sp_erfcxf(x);
    case SP_COSH: return coshf(x);
    case SP_SINH: return sinhf(x);
  }
  return NAN;
}

static void sp_un_inner(void* ctx, char** p, const int64_t* st, int64_t n) {
  const sp_un_t* u = (const sp_un_t*)ctx;
  char* o = p[0];
  const char* a = p[1];
  if (u->f64) {
    for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1])
      tpu_ku_store_f64(o, u->dt_out, sp_eval_f64(u, tpu_ku_load_f64(a, u->dt_in)));
  } else if (u->op == SP_POLYGAMMA && u->n >= 2 && u->dt_out != TPU_DTYPE_F32) {
    for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1]) {
      float x = (float)tpu_ku_load_f64(a, u->dt_in);
      tpu_ku_store_f64(o, u->dt_out, (double)sp_polygamma_reduced(u->dt_out, u->n, x));
    }
  } else {
    for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1]) {
      float x = (float)tpu_ku_load_f64(a, u->dt_in);
      tpu_ku_store_f64(o, u->dt_out, (double)sp_eval_f32(u, x));
    }
  }
}

static const struct {
  const char* prefix; /* the op's base name; overloads follow a '.' or '_' */
  sp_op_t op;
} kSpOps[] = {
    {"aten::lgamma", SP_LGAMMA},       {"aten::digamma", SP_DIGAMMA}, {"aten::polygamma", SP_POLYGAMMA},
    {"aten::special_erfcx", SP_ERFCX}, {"aten::erfc", SP_ERFC},       {"aten::cosh", SP_COSH},
    {"aten::sinh", SP_SINH},
};

static tpu_status_t sp_un_setup(const tpu_k_call_t* call, sp_un_t* u, const tpu_tensor_t** ops) {
  memset(u, 0, sizeof(*u));
  bool found = false;
  for (size_t i = 0; i < sizeof(kSpOps) / sizeof(kSpOps[0]) && !found; ++i) {
    size_t len = strlen(kSpOps[i].prefix);
    if (strncmp(call->op, kSpOps[i].prefix, len) == 0 &&
        (call->op[len] == '\0' || call->op[len] == '.' || call->op[len] == '_')) {
      u->op = kSpOps[i].op;
      found = true;
    }
  }
  if (!found) return TPU_KU_INVALID(call, "not a special-function op");
  /* polygamma(int n, Tensor self), polygamma.out(int n, Tensor self, *, out),
   * polygamma_(Tensor self, int n): the first tensor and the int argument. */
  const tpu_tensor_t* a = NULL;
  bool have_n = false;
  for (int i = 0; i < call->num_args; ++i) {
    if (!a && call->args[i].kind == TPU_K_TENSOR) a = call->args[i].v.tensor;
    else if (!have_n && call->args[i].kind == TPU_K_INT) {
      u->n = call->args[i].v.i;
      have_n = true;
    }
  }
  if (!a || call->num_outputs < 1) return TPU_KU_INVALID(call, "expected tensor arguments");
  if (u->op == SP_POLYGAMMA) {
    if (!have_n) return TPU_KU_INVALID(call, "expected the order n");
    if (u->n < 0) return TPU_KU_INVALID(call, "polygamma(n, x) does not support negative n.");
  }
  const tpu_tensor_t* o = &call->outputs[0];
  if (!tpu_dtype_is_floating((tpu_dtype_t)o->dtype)) return tpu_ku_unsupported_dtype(call, o->dtype);
  if (tpu_dtype_size((tpu_dtype_t)a->dtype) <= 0) return tpu_ku_unsupported_dtype(call, a->dtype);
  /* the CPU's erfcx has no float16/bfloat16 kernel */
  if (u->op == SP_ERFCX && o->dtype != TPU_DTYPE_F32 && o->dtype != TPU_DTYPE_F64)
    return tpu_ku_unsupported_dtype(call, o->dtype);
  u->dt_out = o->dtype;
  u->dt_in = a->dtype;
  u->f64 = o->dtype == TPU_DTYPE_F64;
  ops[0] = o;
  ops[1] = a;
  return TPU_OK;
}

static tpu_status_t sp_un_check(const tpu_k_call_t* call) {
  sp_un_t u;
  const tpu_tensor_t* ops[2];
  TPU_RETURN_IF_ERROR(sp_un_setup(call, &u, ops));
  tpu_ku_iter_t it;
  return tpu_ku_iter_init(&it, 2, ops, call->op);
}

static tpu_status_t sp_un_run(const tpu_k_call_t* call) {
  sp_un_t u;
  const tpu_tensor_t* ops[2];
  TPU_RETURN_IF_ERROR(sp_un_setup(call, &u, ops));
  if (tpu_tensor_numel(ops[0]) == 0) return TPU_OK;
  tpu_ku_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, call->op));
  tpu_ku_iter_parallel(&it, call->pool, u.op == SP_POLYGAMMA ? 1024 : 4096, sp_un_inner, &u);
  return TPU_OK;
}

#define SP_E(name) {name, sp_un_run, sp_un_check, 0, NULL},
#define SP_UNARY(n) SP_E("aten::" n) SP_E("aten::" n ".out") SP_E("aten::" n "_")

const tpu_k_entry_t tpu_k_special_entries[] = {
    SP_UNARY("lgamma") SP_UNARY("digamma") SP_UNARY("polygamma") SP_UNARY("erfc")
    SP_UNARY("cosh") SP_UNARY("sinh")
    SP_E("aten::special_erfcx") SP_E("aten::special_erfcx.out")
};
const size_t tpu_k_special_count = sizeof(tpu_k_special_entries) / sizeof(tpu_k_special_entries[0]);
