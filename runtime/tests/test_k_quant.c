/* test_k_quant.c - tpu::q_linear (GGUF Q4_0, Q4_1, Q8_0, Q4_K, Q6_K weights) against a
 * float reference: the blocks dequantized here, independently of the
 * kernel, then x @ W^T in double. Tolerance: |y - ref| <= 1e-5 * sum_k
 * |x_k * w_k| + 1e-6 (the kernel sums in float32 in a different order). */
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
  RUN_TEST(test_batched_shape);
  RUN_TEST(test_errors);
}

TPU_TEST_KERNEL_MAIN(run_all, g_pool)
