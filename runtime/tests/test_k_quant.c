/* test_k_quant.c - tpu::q_linear (GGUF Q4_0, Q4_1, Q8_0, Q4_K, Q6_K weights) against a
 * float reference: the blocks dequantized here, independently of the
 * kernel, then x @ W^T in double. Tolerance: |y - ref| <= 1e-5 * sum_k
 * |x_k * w_k| + 1e-6 (the kernel sums in float32 in a different order).
 *
 * act_bits = 8 (int8 activations per block of 32): against (a) the same sum
 * in double over x quantized here as quant.c defines it (d = max|x| / 127,
 * q = nearest-even(x * (1 / d))), which it must match to float rounding, and
 * (b) the exact float reference within the bound sum over blocks of
 * d_x / 2 * sum_j |w_j - c| (c: Q4_1's min, else 0) plus the same rounding. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 987654321ull;

static int64_t block_bytes(int qtype) {
  return qtype == 2 ? 18 : qtype == 3 ? 20 : qtype == 8 ? 34 : qtype == 12 ? 144 : 210;
}
static int64_t block_size(int qtype) { return qtype == 12 || qtype == 14 ? 256 : 32; }

static void put_f16(uint8_t* p, float v) {
  uint16_t h = tpu_ku_f32_to_f16(v);
  p[0] = (uint8_t)(h & 0xff);
  p[1] = (uint8_t)(h >> 8);
}
static double get_f16(const uint8_t* p) { return tpu_ku_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* Random blocks: scales in +-0.05, mins in +-0.5, any nibble / int8. */
static void fill_blocks(int qtype, uint8_t* w, int64_t nblocks) {
  int64_t bb = block_bytes(qtype);
  for (int64_t b = 0; b < nblocks; ++b) {
    uint8_t* p = w + b * bb;
    for (int64_t j = 0; j < bb; ++j) p[j] = (uint8_t)(tku_xorshift(&g_rng) >> 24);
    put_f16(p + (qtype == 14 ? 208 : 0), (float)(tku_urand(&g_rng) * (qtype >= 12 ? 0.005 : 0.05)));
    if (qtype == 3) put_f16(p + 2, (float)(tku_urand(&g_rng) * 0.5));
    if (qtype == 12) put_f16(p + 2, (float)(tku_urand(&g_rng) * 0.01));
  }
}

/* Weight k (0..block_size - 1) of one block, dequantized as the GGUF format defines it. */
static double ref_weight(int qtype, const uint8_t* p, int k) {
  if (qtype == 12) { /* Q4_K */
    const uint8_t* s = p + 4;
    int i = k / 64, r = k % 64, j = 2 * i + (r >= 32);
    uint8_t byte = p[16 + 32 * i + r % 32];
    int q = r < 32 ? (byte & 15) : (byte >> 4);
    int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    int mn = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    return get_f16(p) * sc * q - get_f16(p + 2) * mn;
  }
  if (qtype == 14) { /* Q6_K */
    int h = k / 128, r = k % 128, t = r / 32, l = r % 32;
    uint8_t lo = p[64 * h + l + (t & 1) * 32];
    int q = ((t < 2 ? (lo & 15) : (lo >> 4)) | (((p[128 + 32 * h + l] >> (2 * t)) & 3) << 4)) - 32;
    int sc = (int8_t)p[192 + 8 * h + l / 16 + 2 * t];
    return get_f16(p + 208) * sc * q;
  }
  double d = get_f16(p);
  if (qtype == 8) return d * (double)(int8_t)p[2 + k];
  const uint8_t* qs = p + (qtype == 3 ? 4 : 2);
  int q = k < 16 ? (qs[k] & 15) : (qs[k - 16] >> 4);
  if (qtype == 2) return d * (q - 8);
  return d * q + get_f16(p + 2);
}

static void test_q_linear(int qtype, int64_t M, int64_t N, int64_t K) {
  int64_t QK = block_size(qtype), nbk = K / QK, bb = block_bytes(qtype);
  uint8_t* w = malloc((size_t)(N * nbk * bb) + 1);
  fill_blocks(qtype, w, N * nbk);
  int64_t sx[2] = {M, K}, sw[2] = {N, nbk * bb}, sy[2] = {M, N};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, sx, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0);
  tku_fill(&x, &g_rng, 2.0, false);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t args[4] = {vt(&x.t), vt(&wt), vi(qtype), vi(N)};
  bool s = ok(call_op("tpu::q_linear", 4, args, 1, &y.t));
  double worst = 0.0;
  const float* xf = (const float*)x.t.data;
  const float* yf = (const float*)y.t.data;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        double p = ref_weight(qtype, w + (n * nbk + k / QK) * bb, (int)(k % QK)) * xf[m * K + k];
        ref += p;
        mag += fabs(p);
      }
      double err = fabs(yf[m * N + n] - ref) / (1e-5 * mag + 1e-6);
      if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
  CHECKF(s && worst <= 1.0, "q_linear qtype=%d M=%lld N=%lld K=%lld err/tol=%g", qtype, (long long)M,
         (long long)N, (long long)K, worst);
  fr(&x);
  fr(&y);
  free(w);
}

/* A few rows of x in one call (the AVX2 path unpacks each weight block once for
 * up to 4 of them) give each row the bits a one-row call gives. */
static void test_rows_match_single_row(int qtype, int64_t M, int64_t N, int64_t K) {
  int64_t nbk = K / block_size(qtype), bb = block_bytes(qtype);
  uint8_t* w = malloc((size_t)(N * nbk * bb));
  fill_blocks(qtype, w, N * nbk);
  int64_t sx[2] = {M, K}, sw[2] = {N, nbk * bb}, sy[2] = {M, N}, s1[2] = {1, N};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, sx, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0);
  tt_t y1 = tku_alloc(TPU_DTYPE_F32, 2, s1, NULL, 1, 0);
  tku_fill(&x, &g_rng, 2.0, false);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t args[4] = {vt(&x.t), vt(&wt), vi(qtype), vi(N)};
  bool s = ok(call_op("tpu::q_linear", 4, args, 1, &y.t));
  int64_t differ = 0;
  for (int64_t m = 0; m < M; ++m) {
    int64_t one[2] = {1, K};
    tpu_tensor_t xm = T_((float*)x.t.data + m * K, TPU_DTYPE_F32, 2, one, NULL);
    tpu_k_value_t a1[4] = {vt(&xm), vt(&wt), vi(qtype), vi(N)};
    s &= ok(call_op("tpu::q_linear", 4, a1, 1, &y1.t));
    differ += memcmp((const float*)y.t.data + m * N, y1.t.data, sizeof(float) * (size_t)N) != 0;
  }
  CHECKF(s && differ == 0, "q_linear qtype=%d M=%lld N=%lld K=%lld: %lld rows differ from one-row calls", qtype,
         (long long)M, (long long)N, (long long)K, (long long)differ);
  fr(&x);
  fr(&y);
  fr(&y1);
  free(w);
}

/* Leading dims of x are rows: x [2, 3, K] -> y [2, 3, N]. */
static void test_batched_shape(void) {
  int64_t K = 64, N = 3;
  uint8_t w[3 * 2 * 34];
  fill_blocks(8, w, 6);
  int64_t sx[3] = {2, 3, K}, sy[3] = {2, 3, N}, sw[2] = {N, 68};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 3, sx, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 3, sy, NULL, 1, 0);
  tku_fill(&x, &g_rng, 1.0, false);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t args[4] = {vt(&x.t), vt(&wt), vi(8), vi(N)};
  CHECK(ok(call_op("tpu::q_linear", 4, args, 1, &y.t)));
  const float* xf = (const float*)x.t.data;
  const float* yf = (const float*)y.t.data;
  double worst = 0.0;
  for (int64_t m = 0; m < 6; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0;
      for (int64_t k = 0; k < K; ++k) ref += ref_weight(8, w + (n * 2 + k / 32) * 34, (int)(k % 32)) * xf[m * K + k];
      double e = fabs(yf[m * N + n] - ref);
      if (e > worst) worst = e;
    }
  CHECKF(worst < 1e-4, "batched err %g", worst);
  fr(&x);
  fr(&y);
}


/* x for the act_bits = 8 tests: kind 0 normal, 1 with all-zero blocks and a
 * lone value, 2 with blocks of very different magnitudes (up to 1e20). */
static void fill_x(float* x, int64_t n, int kind) {
  for (int64_t i = 0; i < n; ++i) x[i] = (float)(tku_urand(&g_rng) * 2.0);
  if (kind == 1)
    for (int64_t b = 0; b < n / 32; b += 2) {
      memset(x + 32 * b, 0, 32 * sizeof(float));
      if (b % 6 == 4) x[32 * b + 7] = -3.0f; /* q = -127 there, the rest 0 */
    }
  if (kind == 2)
    for (int64_t b = 0; b < n / 32; ++b) {
      float scale = (float)pow(10.0, (double)((b * 7) % 41 - 20));
      for (int j = 0; j < 32; ++j) x[32 * b + j] *= scale;
    }
}

/* The act_bits = 8 quantization of one block, as quant.c documents it. */
static void quantize_block(const float* x, int8_t* q, float* d) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
  *d = amax / 127.0f;
  float id = *d != 0.0f ? 1.0f / *d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    float r = nearbyintf(x[j] * id);
    q[j] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
  }
}

static double worst_a8_q, worst_a8_x; /* largest err / tol seen, for the report */

static void test_q_linear_a8(int qtype, int64_t M, int64_t N, int64_t K, int kind) {
  int64_t nbk = K / 32, bb = block_bytes(qtype);
  uint8_t* w = malloc((size_t)(N * nbk * bb) + 1);
  fill_blocks(qtype, w, N * nbk);
  int64_t sx[2] = {M, K}, sw[2] = {N, nbk * bb}, sy[2] = {M, N};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, sx, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0);
  float* xf = (float*)x.t.data;
  fill_x(xf, M * K, kind);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t args[5] = {vt(&x.t), vt(&wt), vi(qtype), vi(N), vi(8)};
  bool s = ok(call_op("tpu::q_linear", 5, args, 1, &y.t));
  const float* yf = (const float*)y.t.data;
  int8_t* q = malloc((size_t)K);
  float* dx = malloc(sizeof(float) * (size_t)nbk);
  double wq = 0.0, wx = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nbk; ++b) quantize_block(xf + m * K + 32 * b, q + 32 * b, dx + b);
    for (int64_t n = 0; n < N; ++n) {
      double ref_q = 0.0, ref_x = 0.0, mag = 0.0, bound = 0.0;
      for (int64_t b = 0; b < nbk; ++b) {
        const uint8_t* p = w + (n * nbk + b) * bb;
        double c = qtype == 3 ? get_f16(p + 2) : 0.0, dw = fabs(get_f16(p)), sw_abs = 0.0;
        for (int j = 0; j < 32; ++j) {
          double wj = ref_weight(qtype, p, j), xj = xf[m * K + 32 * b + j], xh = (double)dx[b] * q[32 * b + j];
          ref_q += (wj - c) * xh + c * xj;
          ref_x += wj * xj;
          mag += fabs((wj - c) * xh) + fabs(c * xj) + fabs(wj * xj);
          if (qtype == 2) mag += 16.0 * dw * fabs(xh); /* the nibbles' -8 is applied as one sum */
          sw_abs += fabs(wj - c);
        }
        bound += 0.5 * (1.0 + 1e-4) * dx[b] * sw_abs;
      }
      double tol = 1e-5 * mag + 1e-30;
      double eq = fabs(yf[m * N + n] - ref_q) / tol, ex = fabs(yf[m * N + n] - ref_x) / (bound + tol);
      if (!(eq <= wq)) wq = isnan(eq) ? INFINITY : eq;
      if (!(ex <= wx)) wx = isnan(ex) ? INFINITY : ex;
    }
  }
  if (wq > worst_a8_q) worst_a8_q = wq;
  if (wx > worst_a8_x) worst_a8_x = wx;
  CHECKF(s && wq <= 1.0 && wx <= 1.0,
         "q_linear act_bits=8 qtype=%d M=%lld N=%lld K=%lld x kind %d: err/tol vs quantized x %g, vs exact x %g",
         qtype, (long long)M, (long long)N, (long long)K, kind, wq, wx);
  free(q);
  free(dx);
  fr(&x);
  fr(&y);
  free(w);
}

/* act_bits = 8 where it does not apply (Q4_K/Q6_K, more rows than
 * TPU_QU_ACT8_MAXM): the float path, bit for bit. */
static void test_a8_falls_back(int qtype, int64_t M) {
  int64_t N = 9, K = 512, QK = block_size(qtype), nbk = K / QK, bb = block_bytes(qtype);
  uint8_t* w = malloc((size_t)(N * nbk * bb));
  fill_blocks(qtype, w, N * nbk);
  int64_t sx[2] = {M, K}, sw[2] = {N, nbk * bb}, sy[2] = {M, N};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, sx, NULL, 1, 0), y8 = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0),
       y32 = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0);
  tku_fill(&x, &g_rng, 2.0, false);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t a8[5] = {vt(&x.t), vt(&wt), vi(qtype), vi(N), vi(8)};
  tpu_k_value_t a32[4] = {vt(&x.t), vt(&wt), vi(qtype), vi(N)};
  bool s = ok(call_op("tpu::q_linear", 5, a8, 1, &y8.t)) && ok(call_op("tpu::q_linear", 4, a32, 1, &y32.t));
  CHECKF(s && memcmp(y8.t.data, y32.t.data, (size_t)(M * N) * sizeof(float)) == 0,
         "act_bits=8 qtype=%d M=%lld is not the float path", qtype, (long long)M);
  fr(&x);
  fr(&y8);
  fr(&y32);
  free(w);
}

/* A block of x holding an inf or a NaN makes its row of y NaN (not a
 * garbage integer); the other rows are unaffected. */
static void test_a8_non_finite(void) {
  for (int t = 0; t < 3; ++t) {
    int qtype = t == 0 ? 2 : t == 1 ? 3 : 8;
    int64_t M = 3, N = 5, K = 96, bb = block_bytes(qtype);
    uint8_t w[5 * 3 * 34];
    fill_blocks(qtype, w, N * 3);
    float xb[3 * 96];
    for (int i = 0; i < 3 * 96; ++i) xb[i] = (float)tku_urand(&g_rng);
    xb[40] = INFINITY;
    xb[2 * 96 + 70] = NAN;
    int64_t sx[2] = {M, K}, sw[2] = {N, 3 * bb}, sy[2] = {M, N};
    float yb[15];
    tpu_tensor_t x = T_(xb, TPU_DTYPE_F32, 2, sx, NULL), wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL),
                 y = T_(yb, TPU_DTYPE_F32, 2, sy, NULL);
    tpu_k_value_t a[5] = {vt(&x), vt(&wt), vi(qtype), vi(N), vi(8)};
    CHECK(ok(call_op("tpu::q_linear", 5, a, 1, &y)));
    for (int n = 0; n < N; ++n) {
      CHECKF(isnan(yb[n]) && isfinite(yb[N + n]) && isnan(yb[2 * N + n]), "qtype %d n %d: %g %g %g", qtype, n,
             yb[n], yb[N + n], yb[2 * N + n]);
    }
  }
}

/* tpu::q_dequantize: every weight as the format defines it. */
static void test_dequantize(int qtype, int64_t N, int64_t K) {
  int64_t QK = block_size(qtype), nbk = K / QK, bb = block_bytes(qtype);
  uint8_t* w = malloc((size_t)(N * nbk * bb) + 1);
  fill_blocks(qtype, w, N * nbk);
  int64_t sw[2] = {N, nbk * bb}, sy[2] = {N, K};
  tt_t y = tku_alloc(TPU_DTYPE_F32, 2, sy, NULL, 1, 0);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t args[3] = {vt(&wt), vi(qtype), vi(K)};
  bool s = ok(call_op("tpu::q_dequantize", 3, args, 1, &y.t));
  const float* yf = (const float*)y.t.data;
  double worst = 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double ref = ref_weight(qtype, w + (n * nbk + k / QK) * bb, (int)(k % QK));
      double e = fabs(yf[n * K + k] - ref) / (1e-6 * (fabs(ref) + 1.0));
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
  CHECKF(s && worst <= 1.0, "q_dequantize qtype=%d N=%lld K=%lld err/tol=%g", qtype, (long long)N, (long long)K,
         worst);
  fr(&y);
  free(w);
}

static void test_dequantize_errors(void) {
  uint8_t w[2 * 40] = {0};
  float yb[128];
  int64_t sw[2] = {2, 40}, sy[2] = {2, 64};
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL), y = T_(yb, TPU_DTYPE_F32, 2, sy, NULL);
  tpu_k_value_t a[3] = {vt(&wt), vi(3), vi(64)};
  CHECK(ok(call_op("tpu::q_dequantize", 3, a, 1, &y)));
  tpu_k_value_t bad_type[3] = {vt(&wt), vi(13), vi(64)};
  CHECK_STATUS(call_op("tpu::q_dequantize", 3, bad_type, 1, &y), TPU_STATUS_UNIMPLEMENTED, "quantization type 13");
  tpu_k_value_t bad_k[3] = {vt(&wt), vi(3), vi(48)};
  CHECK_STATUS(call_op("tpu::q_dequantize", 3, bad_k, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "multiple of");
  tpu_k_value_t bad_rows[3] = {vt(&wt), vi(8), vi(64)};
  CHECK_STATUS(call_op("tpu::q_dequantize", 3, bad_rows, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "[N, 68]");
}

static void test_errors(void) {
  float xb[64] = {0}, yb[4] = {0};
  uint8_t w[4 * 40] = {0};
  int64_t sx[2] = {1, 64}, sy[2] = {1, 2}, sw[2] = {2, 40}, sx2[2] = {1, 48};
  tpu_tensor_t x = T_(xb, TPU_DTYPE_F32, 2, sx, NULL), y = T_(yb, TPU_DTYPE_F32, 2, sy, NULL);
  tpu_tensor_t wt = T_(w, TPU_DTYPE_U8, 2, sw, NULL);
  tpu_k_value_t a[4] = {vt(&x), vt(&wt), vi(3), vi(2)};
  CHECK(ok(call_op("tpu::q_linear", 4, a, 1, &y))); /* Q4_1: 2 blocks of 20 bytes per row */
  tpu_k_value_t bad_type[4] = {vt(&x), vt(&wt), vi(13), vi(2)}; /* Q5_K */
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_type, 1, &y), TPU_STATUS_UNIMPLEMENTED, "quantization type 13");
  tpu_k_value_t bad_kblock[4] = {vt(&x), vt(&wt), vi(12), vi(2)}; /* K = 64 < 256 */
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_kblock, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "block size 256");
  tpu_k_value_t bad_shape[4] = {vt(&x), vt(&wt), vi(8), vi(2)}; /* Q8_0 rows would be 68 bytes */
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_shape, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "expected [2, 68]");
  tpu_tensor_t x48 = T_(xb, TPU_DTYPE_F32, 2, sx2, NULL);
  tpu_k_value_t bad_k[4] = {vt(&x48), vt(&wt), vi(3), vi(2)};
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_k, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "multiple of");
  tpu_tensor_t xh = T_(xb, TPU_DTYPE_BF16, 2, sx, NULL);
  tpu_k_value_t bad_dt[4] = {vt(&xh), vt(&wt), vi(3), vi(2)};
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_dt, 1, &y), TPU_STATUS_UNIMPLEMENTED, "bfloat16");
  tpu_tensor_t wf = T_(w, TPU_DTYPE_I8, 2, sw, NULL);
  tpu_k_value_t bad_w[4] = {vt(&x), vt(&wf), vi(3), vi(2)};
  CHECK_STATUS(call_op("tpu::q_linear", 4, bad_w, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "uint8");
  tpu_k_value_t bad_bits[5] = {vt(&x), vt(&wt), vi(3), vi(2), vi(16)};
  CHECK_STATUS(call_op("tpu::q_linear", 5, bad_bits, 1, &y), TPU_STATUS_INVALID_ARGUMENT, "act_bits must be 32");
  tpu_k_value_t bits8[5] = {vt(&x), vt(&wt), vi(3), vi(2), vi(8)};
  CHECK(ok(call_op("tpu::q_linear", 5, bits8, 1, &y)));
}

static void run_all(void) {
  static const int types[3] = {2, 3, 8};
  static const int64_t Ms[3] = {1, 2, 7}, Ns[3] = {1, 5, 67}, Ks[4] = {32, 96, 288, 576};
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) test_q_linear(types[t], Ms[i], Ns[j], Ks[k]);
  static const int64_t Kk[2] = {256, 768};
  for (int t = 12; t <= 14; t += 2)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 2; ++k) test_q_linear(t, Ms[i], Ns[j], Kk[k]);
  test_q_linear(3, 1, 300, 1536); /* many tasks */
  test_q_linear(3, 9, 130, 1536);
  for (int t = 0; t < 3; ++t) {
    test_rows_match_single_row(types[t], 6, 45, 576);
    test_rows_match_single_row(types[t], 3, 37, 2560); /* K past the grouped rows' buffer: one row at a time */
    test_rows_match_single_row(types[t], 8, 150, 1536);
  }
  RUN_TEST(test_batched_shape);
  RUN_TEST(test_errors);
  static const int64_t Ka[6] = {32, 64, 96, 576, 1536, 4096 + 32}, Na[4] = {1, 2, 7, 40}, Ma[3] = {1, 2, 4};
  for (int t = 0; t < 3; ++t)
    for (int k = 0; k < 6; ++k)
      for (int j = 0; j < 4; ++j)
        for (int kind = 0; kind < 3; ++kind) test_q_linear_a8(types[t], Ma[(k + j + kind) % 3], Na[j], Ka[k], kind);
  test_q_linear_a8(3, 1, 301, 1536, 0); /* many tasks */
  test_q_linear_a8(8, 1, 300, 576, 1);
  test_q_linear_a8(2, 3, 129, 1536, 2);
  printf("  act_bits=8: worst err/tol %.3g against the quantized x, %.3g against the exact x bound\n", worst_a8_q,
         worst_a8_x);
  test_a8_falls_back(12, 1);
  test_a8_falls_back(14, 2);
  test_a8_falls_back(3, 5);
  test_a8_falls_back(8, 17);
  RUN_TEST(test_a8_non_finite);
  for (int t = 0; t < 5; ++t) test_dequantize(t < 3 ? types[t] : 12 + 2 * (t - 3), 7, t < 3 ? 96 : 512);
  test_dequantize(3, 300, 576);
  RUN_TEST(test_dequantize_errors);
}

TPU_TEST_KERNEL_MAIN(run_all, g_pool)
