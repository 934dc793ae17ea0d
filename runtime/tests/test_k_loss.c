/* test_k_loss.c - the loss family: nll_loss(2d) forward/backward with
 * weights, ignore_index and every reduction, the pointwise losses and their
 * backward, against naive loops; the out-of-range target and bad-dtype
 * paths. Values are multiples of 1/8 so float sums are exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* Contiguous descriptor over `data`. */
static tpu_tensor_t tn(void* data, int dtype, int ndim, const int64_t* sizes) { return T_(data, dtype, ndim, sizes, NULL); }

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static int64_t irand(int64_t n) { return (int64_t)(tku_xorshift(&g_rng) % (uint64_t)n); }
static float eighths(void) { return (float)(irand(65) - 32) / 8.0f; }

/* ---- nll_loss ------------------------------------------------------------------ */

static void test_nll_forward_backward(void) {
  enum { N = 7, C = 5 };
  float x[N * C], w[C];
  int64_t t[N] = {0, 4, 2, -100, 1, 2, 3};
  for (int i = 0; i < N * C; ++i) x[i] = eighths();
  for (int c = 0; c < C; ++c) w[c] = (float)(c + 1) / 4.0f;
  int64_t xs[2] = {N, C}, ts[1] = {N}, ws[1] = {C};
  tpu_tensor_t tx = tn(x, TPU_DTYPE_F32, 2, xs), tt = tn(t, TPU_DTYPE_I64, 1, ts), tw = tn(w, TPU_DTYPE_F32, 1, ws);
  for (int weighted = 0; weighted < 2; ++weighted) {
    for (int red = 0; red < 3; ++red) {
      float out[N], total = -1;
      int64_t os[1] = {N};
      tpu_tensor_t outs[2] = {tn(out, TPU_DTYPE_F32, red == 0 ? 1 : 0, os), tn(&total, TPU_DTYPE_F32, 0, NULL)};
      tpu_k_value_t a[5] = {vt(&tx), vt(&tt), weighted ? vt(&tw) : vn(), vi(red), vi(-100)};
      bool st = ok(call_op("aten::nll_loss_forward", 5, a, 2, outs));
      double sum = 0, wsum = 0;
      int bad = 0;
      for (int i = 0; i < N; ++i) {
        double l = 0, wi = 0;
        if (t[i] != -100) {
          wi = weighted ? w[t[i]] : 1.0;
          l = -x[i * C + t[i]] * wi;
        }
        sum += l;
        wsum += wi;
        if (red == 0) bad += out[i] != (float)l;
      }
      if (red == 1) bad += out[0] != (float)(sum / wsum);
      if (red == 2) bad += out[0] != (float)sum;
      if (red != 0) bad += total != (float)wsum;
      CHECKF(st && bad == 0, "nll_loss_forward weighted %d reduction %d bad=%d", weighted, red, bad);
      /* backward */
      float g[N], gi[N * C];
      for (int i = 0; i < N; ++i) g[i] = (float)(i + 1) / 2.0f;
      tpu_tensor_t tg = tn(g, TPU_DTYPE_F32, red == 0 ? 1 : 0, os), tgi = tn(gi, TPU_DTYPE_F32, 2, xs);
      float tot = red == 0 ? 0.0f : total;
      tpu_tensor_t ttot = tn(&tot, TPU_DTYPE_F32, 0, NULL);
      tpu_k_value_t b[8] = {vt(&tg), vt(&tx), vt(&tt), weighted ? vt(&tw) : vn(), vi(red), vi(-100), vt(&ttot), vt(&tgi)};
      st = ok(call_op("aten::nll_loss_backward.grad_input", 8, b, 1, &tgi));
      bad = 0;
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
          float want = 0;
          if (c == t[i]) {
            float wi = weighted ? w[c] : 1.0f;
            if (red == 0) want = -wi * g[i];
            else want = wi * -(red == 1 ? g[0] / tot : g[0]);
          }
          bad += gi[i * C + c] != want;
        }
      CHECKF(st && bad == 0, "nll_loss_backward weighted %d reduction %d bad=%d", weighted, red, bad);
    }
  }
  /* 1-D input with a 0-dim target, reduction none: a 0-dim loss */
  float l0 = 0, tw0 = 0;
  int64_t t0 = 3, cs[1] = {C};
  tpu_tensor_t tx1 = tn(x, TPU_DTYPE_F32, 1, cs), tt0 = tn(&t0, TPU_DTYPE_I64, 0, NULL);
  tpu_tensor_t o1[2] = {tn(&l0, TPU_DTYPE_F32, 0, NULL), tn(&tw0, TPU_DTYPE_F32, 0, NULL)};
  tpu_k_value_t a1[5] = {vt(&tx1), vt(&tt0), vn(), vi(0), vi(-100)};
  CHECK(ok(call_op("aten::nll_loss_forward", 5, a1, 2, o1)) && l0 == -x[3]);
  /* empty batch: mean is 0/0 */
  int64_t es[2] = {0, C}, e1[1] = {0};
  tpu_tensor_t tex = tn(NULL, TPU_DTYPE_F32, 2, es), tet = tn(NULL, TPU_DTYPE_I64, 1, e1);
  tpu_k_value_t ae[5] = {vt(&tex), vt(&tet), vn(), vi(1), vi(-100)};
  CHECK(ok(call_op("aten::nll_loss_forward", 5, ae, 2, o1)) && isnan(l0) && tw0 == 0);
  /* out-of-range target, and targets equal to ignore_index are fine */
  t[2] = 7;
  float lo, two;
  tpu_tensor_t o2[2] = {tn(&lo, TPU_DTYPE_F32, 0, NULL), tn(&two, TPU_DTYPE_F32, 0, NULL)};
  tpu_k_value_t a2[5] = {vt(&tx), vt(&tt), vn(), vi(1), vi(-100)};
  CHECK_STATUS(call_op("aten::nll_loss_forward", 5, a2, 2, o2), TPU_STATUS_OUT_OF_RANGE,
               "aten::nll_loss_forward: target 7 is out of bounds (n_classes 5)");
  tpu_k_value_t a3[5] = {vt(&tx), vt(&tt), vn(), vi(1), vi(7)};
  CHECK_STATUS(call_op("aten::nll_loss_forward", 5, a3, 2, o2), TPU_STATUS_OUT_OF_RANGE, "target -100");
  t[3] = 7;
  CHECK(ok(call_op("aten::nll_loss_forward", 5, a3, 2, o2)));
  /* integer input is rejected */
  int32_t xi[N * C];
  tpu_tensor_t txi = tn(xi, TPU_DTYPE_I32, 2, xs);
  tpu_k_value_t a4[5] = {vt(&txi), vt(&tt), vn(), vi(1), vi(-100)};
  CHECK_STATUS(call_op("aten::nll_loss_forward", 5, a4, 2, o2), TPU_STATUS_UNIMPLEMENTED, "int32");
}

static void test_nll2d(void) {
  enum { N = 2, C = 3, H = 4, W = 5 };
  float x[N * C * H * W];
  int64_t t[N * H * W];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = eighths();
  for (int i = 0; i < N * H * W; ++i) t[i] = irand(C + 1) == C ? -100 : irand(C);
  int64_t xs[4] = {N, C, H, W}, ts[3] = {N, H, W};
  tpu_tensor_t tx = tn(x, TPU_DTYPE_F32, 4, xs), tt = tn(t, TPU_DTYPE_I64, 3, ts);
  float out[N * H * W], total;
  tpu_tensor_t outs[2] = {tn(out, TPU_DTYPE_F32, 3, ts), tn(&total, TPU_DTYPE_F32, 0, NULL)};
  tpu_k_value_t a[5] = {vt(&tx), vt(&tt), vn(), vi(0), vi(-100)};
  bool st = ok(call_op("aten::nll_loss2d_forward", 5, a, 2, outs));
  int bad = 0, cnt = 0;
  double sum = 0;
  for (int n = 0; n < N; ++n)
    for (int p = 0; p < H * W; ++p) {
      int64_t c = t[n * H * W + p];
      float want = c == -100 ? 0.0f : -x[(n * C + c) * H * W + p];
      bad += out[n * H * W + p] != want;
      sum += want;
      cnt += c != -100;
    }
  CHECKF(st && bad == 0, "nll_loss2d_forward none bad=%d", bad);
  float mean;
  outs[0] = tn(&mean, TPU_DTYPE_F32, 0, NULL);
  a[3] = vi(1);
  CHECK(ok(call_op("aten::nll_loss2d_forward", 5, a, 2, outs)) && mean == (float)(sum / cnt) && total == cnt);
  float g = 2.0f, gi[N * C * H * W];
  tpu_tensor_t tg = tn(&g, TPU_DTYPE_F32, 0, NULL), ttot = tn(&total, TPU_DTYPE_F32, 0, NULL), tgi = tn(gi, TPU_DTYPE_F32, 4, xs);
  tpu_k_value_t b[7] = {vt(&tg), vt(&tx), vt(&tt), vn(), vi(1), vi(-100), vt(&ttot)};
  st = ok(call_op("aten::nll_loss2d_backward", 7, b, 1, &tgi));
  bad = 0;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < H * W; ++p) {
        float want = t[n * H * W + p] == c ? -(g / total) : 0.0f;
        bad += gi[(n * C + c) * H * W + p] != want;
      }
  CHECKF(st && bad == 0, "nll_loss2d_backward mean bad=%d", bad);
}

/* ---- pointwise losses ------------------------------------------------------------ */

static void test_pointwise_losses(void) {
  enum { N = 37 };
  float x[N], y[N], g[N], out[N], gi[N];
  for (int i = 0; i < N; ++i) {
    x[i] = eighths();
    y[i] = eighths();
    g[i] = (float)(i % 5) / 4.0f;
  }
  int64_t ns[1] = {N};
  tpu_tensor_t tx = tn(x, TPU_DTYPE_F32, 1, ns), ty = tn(y, TPU_DTYPE_F32, 1, ns), tout = tn(out, TPU_DTYPE_F32, 1, ns);
  tpu_tensor_t tg = tn(g, TPU_DTYPE_F32, 1, ns), tgi = tn(gi, TPU_DTYPE_F32, 1, ns);
  /* mse */
  tpu_k_value_t a[3] = {vt(&tx), vt(&ty), vi(0)};
  bool st = ok(call_op("aten::mse_loss", 3, a, 1, &tout));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < N; ++i) {
    float d = x[i] - y[i];
    bad += out[i] != d * d;
    sum += (double)(d * d);
  }
  CHECKF(st && bad == 0, "mse none bad=%d", bad);
  float r;
  tpu_tensor_t tr = tn(&r, TPU_DTYPE_F32, 0, NULL);
  tpu_k_value_t am[4] = {vt(&tx), vt(&ty), vi(1), vt(&tr)};
  CHECK(ok(call_op("aten::mse_loss.out", 4, am, 1, &tr)) && r == (float)(sum / N));
  tpu_k_value_t as[3] = {vt(&tx), vt(&ty), vi(2)};
  CHECK(ok(call_op("aten::mse_loss", 3, as, 1, &tr)) && r == (float)sum);
  tpu_k_value_t ab[4] = {vt(&tg), vt(&tx), vt(&ty), vi(0)};
  st = ok(call_op("aten::mse_loss_backward", 4, ab, 1, &tgi));
  bad = 0;
  for (int i = 0; i < N; ++i) bad += gi[i] != 2.0f * (x[i] - y[i]) * g[i];
  CHECKF(st && bad == 0, "mse backward bad=%d", bad);
  /* smooth_l1 (beta 0.5) and huber (delta 0.5) */
  tpu_k_value_t sl[4] = {vt(&tx), vt(&ty), vi(0), vd(0.5)};
  CHECK(ok(call_op("aten::smooth_l1_loss", 4, sl, 1, &tout)));
  int bad_s = 0;
  for (int i = 0; i < N; ++i) {
    float z = fabsf(x[i] - y[i]);
    bad_s += out[i] != (z < 0.5f ? 0.5f * z * z / 0.5f : z - 0.25f);
  }
  CHECK(bad_s == 0);
  CHECK(ok(call_op("aten::huber_loss", 4, sl, 1, &tout)));
  int bad_h = 0;
  for (int i = 0; i < N; ++i) {
    float z = fabsf(x[i] - y[i]);
    bad_h += out[i] != (z < 0.5f ? 0.5f * z * z : 0.5f * (z - 0.25f));
  }
  CHECK(bad_h == 0);
  tpu_k_value_t hb[5] = {vt(&tg), vt(&tx), vt(&ty), vi(2), vd(0.5)};
  CHECK(ok(call_op("aten::huber_loss_backward", 5, hb, 1, &tgi)));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    float d = x[i] - y[i], o = d >= 0.5f ? 0.5f : d <= -0.5f ? -0.5f : d;
    bad += gi[i] != o * g[i];
  }
  CHECK(bad == 0);
  /* binary_cross_entropy: values in [0, 1]; out of range is an error */
  float p[4] = {0.25f, 0.5f, 1.0f, 0.0f}, q[4] = {0.0f, 1.0f, 1.0f, 0.5f}, l[4];
  int64_t s4[1] = {4};
  tpu_tensor_t tp = tn(p, TPU_DTYPE_F32, 1, s4), tq = tn(q, TPU_DTYPE_F32, 1, s4), tl = tn(l, TPU_DTYPE_F32, 1, s4);
  tpu_k_value_t bce[4] = {vt(&tp), vt(&tq), vn(), vi(0)};
  CHECK(ok(call_op("aten::binary_cross_entropy", 4, bce, 1, &tl)));
  volatile float quarter = 0.25f, half = 0.5f; /* libm at run time, as PyTorch calls it */
  CHECK(l[0] == -log1pf(-quarter) && l[1] == -logf(half) && l[2] == 0.0f && l[3] == 50.0f);
  p[1] = 1.5f;
  CHECK_STATUS(call_op("aten::binary_cross_entropy", 4, bce, 1, &tl), TPU_STATUS_INVALID_ARGUMENT,
               "all elements of input should be between 0 and 1");
  /* empty input: mean is NaN, sum 0 */
  int64_t z1[1] = {0};
  tpu_tensor_t te = tn(NULL, TPU_DTYPE_F32, 1, z1);
  tpu_k_value_t ae[3] = {vt(&te), vt(&te), vi(1)};
  CHECK(ok(call_op("aten::mse_loss", 3, ae, 1, &tr)) && isnan(r));
  ae[2] = vi(2);
  CHECK(ok(call_op("aten::mse_loss", 3, ae, 1, &tr)) && r == 0.0f);
  /* broadcast target, bf16 rounding of each step, rejected dtypes */
  uint16_t bx[N], by[1], bo;
  for (int i = 0; i < N; ++i) bx[i] = tpu_ku_f32_to_bf16(x[i] * 3.3f);
  by[0] = tpu_ku_f32_to_bf16(0.7f);
  int64_t one[1] = {1};
  tpu_tensor_t tbx = tn(bx, TPU_DTYPE_BF16, 1, ns), tby = tn(by, TPU_DTYPE_BF16, 1, one), tbo = tn(&bo, TPU_DTYPE_BF16, 0, NULL);
  tpu_k_value_t bs[3] = {vt(&tbx), vt(&tby), vi(2)};
  CHECK(ok(call_op("aten::mse_loss", 3, bs, 1, &tbo)));
  double bsum = 0;
  for (int i = 0; i < N; ++i) {
    float d = tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(tpu_ku_bf16_to_f32(bx[i]) - tpu_ku_bf16_to_f32(by[0])));
    bsum += tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16(d * d));
  }
  CHECK(bo == tpu_ku_f32_to_bf16((float)bsum));
  int64_t iv[N];
  tpu_tensor_t ti = tn(iv, TPU_DTYPE_I64, 1, ns);
  tpu_k_value_t ai[3] = {vt(&ti), vt(&ti), vi(0)};
  CHECK_STATUS(call_op("aten::mse_loss", 3, ai, 1, &ti), TPU_STATUS_UNIMPLEMENTED, "int64");
}

int main(void) {
  if (!tku_start(2)) return 1;
  for (int round = 0; round < 2; ++round) { /* with a pool, then without */
    RUN_TEST(test_nll_forward_backward);
    RUN_TEST(test_nll2d);
    RUN_TEST(test_pointwise_losses);
    tpu_threadpool_destroy(g_pool);
    g_pool = NULL;
  }
  return TEST_REPORT();
}
