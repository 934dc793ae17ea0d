/* test_k_fused.c - tpu::rms_norm, tpu::rope, tpu::swiglu and their backward
 * kernels against double-precision references: non-contiguous inputs, rows
 * longer than one stack chunk, partial rotary, float32/bfloat16, the AVX2
 * and the portable paths, and argument errors. rope_backward is checked as
 * the adjoint of rope (<rope(x), g> = <x, rope_backward(g)>). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static double tol(int dt) { return dt == TPU_DTYPE_F32 ? 2e-5 : 2e-2; }

/* ---- rms_norm ---- */

static void rms_case(int dt, int64_t R, int64_t H, bool transposed, bool unit_offset) {
  int64_t xs[2] = {R, H}, ws[1] = {H};
  int perm[2] = {1, 0};
  tt_t x = tku_alloc(dt, 2, xs, transposed ? perm : NULL, 1, 64);
  tt_t w = tku_alloc(dt, 1, ws, NULL, 2, 64); /* strided weight */
  tt_t y = tku_alloc(dt, 2, xs, NULL, 1, 64);
  tt_t g = tku_alloc(dt, 2, xs, NULL, 1, 64), dx = tku_alloc(dt, 2, xs, NULL, 1, 64);
  int64_t ps[2] = {3, H};
  tt_t dwp = tku_alloc(TPU_DTYPE_F32, 2, ps, NULL, 1, 64);
  tku_fill(&x, &g_rng, 2.0, false);
  tku_fill(&w, &g_rng, 1.0, false);
  tku_fill(&g, &g_rng, 1.0, false);
  const double eps = 1e-5;
  tpu_k_value_t a[4] = {vt(&x.t), vt(&w.t), vd(eps), vb(unit_offset)};
  CHECK_OK(call_op("tpu::rms_norm", 4, a, 1, &y.t));
  tpu_k_value_t b[6] = {vt(&g.t), vt(&x.t), vt(&w.t), vd(eps), vb(unit_offset), vi(3)};
  tpu_tensor_t outs[2] = {dx.t, dwp.t};
  CHECK_OK(call_op("tpu::rms_norm_backward", 6, b, 2, outs));
  double* dw = calloc((size_t)H, sizeof(double));
  int bad = 0;
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0, dot = 0;
    for (int64_t i = 0; i < H; ++i) ss += getf(&x.t, r * H + i) * getf(&x.t, r * H + i);
    const double rs = 1.0 / sqrt(ss / (double)H + eps);
    for (int64_t i = 0; i < H; ++i) {
      const double wi = getf(&w.t, i) + (unit_offset ? 1.0 : 0.0);
      dot += getf(&g.t, r * H + i) * wi * getf(&x.t, r * H + i) * rs;
    }
    for (int64_t i = 0; i < H; ++i) {
      const double xi = getf(&x.t, r * H + i), gi = getf(&g.t, r * H + i);
      const double wi = getf(&w.t, i) + (unit_offset ? 1.0 : 0.0);
      const double want = wi * xi * rs, dwant = rs * (gi * wi - xi * rs * dot / (double)H);
      dw[i] += gi * xi * rs;
      if (!close_f(getf(&y.t, r * H + i), want, tol(dt), tol(dt)) ||
          !close_f(getf(&dx.t, r * H + i), dwant, tol(dt), tol(dt))) {
        if (bad++ < 3)
          CHECKF(false, "rms %s R=%lld H=%lld [%lld,%lld]: y %g want %g, dx %g want %g", tpu_dtype_name(dt),
                 (long long)R, (long long)H, (long long)r, (long long)i, getf(&y.t, r * H + i), want,
                 getf(&dx.t, r * H + i), dwant);
      }
    }
  }
  for (int64_t i = 0; i < H; ++i) {
    double s = 0;
    for (int64_t p = 0; p < 3; ++p) s += getf(&dwp.t, p * H + i);
    if (!close_f(s, dw[i], tol(dt) * 4, tol(dt) * 4) && bad++ < 3)
      CHECKF(false, "rms dweight[%lld] %g want %g", (long long)i, s, dw[i]);
  }
  CHECKF(bad == 0, "rms %s R=%lld H=%lld: %d mismatches", tpu_dtype_name(dt), (long long)R, (long long)H, bad);
  free(dw);
  fr(&x); fr(&w); fr(&y); fr(&g); fr(&dx); fr(&dwp);
}

/* ---- rope ---- */

static void rope_case(int dt, int64_t B, int64_t Hq, int64_t Hk, int64_t L, int64_t D, int64_t R) {
  int64_t qs[4] = {B, Hq, L, D}, ks[4] = {B, Hk, L, D}, cs[3] = {B, L, R};
  int perm[4] = {0, 2, 1, 3}; /* stored [B, L, H, D], as Transformers' q/k views */
  tt_t q = tku_alloc(dt, 4, qs, perm, 1, 64), k = tku_alloc(dt, 4, ks, perm, 1, 64);
  tt_t c = tku_alloc(dt, 3, cs, NULL, 1, 64), s = tku_alloc(dt, 3, cs, NULL, 1, 64);
  tt_t qo = tku_alloc(dt, 4, qs, NULL, 1, 64), ko = tku_alloc(dt, 4, ks, NULL, 1, 64);
  tt_t gq = tku_alloc(dt, 4, qs, NULL, 1, 64), gk = tku_alloc(dt, 4, ks, NULL, 1, 64);
  tt_t dq = tku_alloc(dt, 4, qs, NULL, 1, 64), dk = tku_alloc(dt, 4, ks, NULL, 1, 64);
  tku_fill(&q, &g_rng, 1.0, false);
  tku_fill(&k, &g_rng, 1.0, false);
  tku_fill(&c, &g_rng, 1.0, false);
  tku_fill(&s, &g_rng, 1.0, false);
  tku_fill(&gq, &g_rng, 1.0, false);
  tku_fill(&gk, &g_rng, 1.0, false);
  tpu_k_value_t a[4] = {vt(&q.t), vt(&k.t), vt(&c.t), vt(&s.t)};
  tpu_tensor_t outs[2] = {qo.t, ko.t};
  CHECK_OK(call_op("tpu::rope", 4, a, 2, outs));
  tpu_k_value_t b[4] = {vt(&gq.t), vt(&gk.t), vt(&c.t), vt(&s.t)};
  tpu_tensor_t bouts[2] = {dq.t, dk.t};
  CHECK_OK(call_op("tpu::rope_backward", 4, b, 2, bouts));
  int bad = 0;
  double fwd_dot = 0, bwd_dot = 0;
  const int64_t h2 = R / 2;
  for (int which = 0; which < 2; ++which) {
    const tt_t* x = which ? &k : &q;
    const tt_t* o = which ? &ko : &qo;
    const tt_t* g = which ? &gk : &gq;
    const tt_t* d = which ? &dk : &dq;
    const int64_t H = which ? Hk : Hq;
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t i = 0; i < D; ++i) {
            int64_t idx[4] = {bb, h, l, i}, ci[3] = {bb, l, i};
            double want = get(&x->t, idx);
            if (i < R) {
              int64_t j[4] = {bb, h, l, i < h2 ? i + h2 : i - h2};
              const double rot = i < h2 ? -get(&x->t, j) : get(&x->t, j);
              want = get(&x->t, idx) * get(&c.t, ci) + rot * get(&s.t, ci);
            }
            if (!close_f(get(&o->t, idx), want, tol(dt), tol(dt)) && bad++ < 3)
              CHECKF(false, "rope %s [%lld,%lld,%lld,%lld]: %g want %g", tpu_dtype_name(dt), (long long)bb,
                     (long long)h, (long long)l, (long long)i, get(&o->t, idx), want);
            fwd_dot += want * get(&g->t, idx);
            bwd_dot += get(&x->t, idx) * get(&d->t, idx);
          }
  }
  CHECKF(bad == 0, "rope %s: %d mismatches", tpu_dtype_name(dt), bad);
  CHECKF(close_f(bwd_dot, fwd_dot, tol(dt) * 10, tol(dt) * 10), "rope adjoint: %g vs %g", bwd_dot, fwd_dot);
  fr(&q); fr(&k); fr(&c); fr(&s); fr(&qo); fr(&ko); fr(&gq); fr(&gk); fr(&dq); fr(&dk);
}

/* ---- swiglu ---- */

static double act_ref(double x, bool gelu, double* deriv) {
  if (!gelu) {
    const double sg = 1.0 / (1.0 + exp(-x));
    *deriv = sg * (1.0 + x * (1.0 - sg));
    return x * sg;
  }
  const double k0 = 0.7978845608028654, k1 = 0.044715;
  const double u = k0 * (x + k1 * x * x * x), t = tanh(u);
  *deriv = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k0 * (1.0 + 3.0 * k1 * x * x);
  return 0.5 * x * (1.0 + t);
}

static void glu_case(int dt, int64_t R, int64_t C, bool gelu) {
  int64_t sz[2] = {R, C};
  int perm[2] = {1, 0};
  tt_t gate = tku_alloc(dt, 2, sz, perm, 1, 64), up = tku_alloc(dt, 2, sz, NULL, 3, 64);
  tt_t y = tku_alloc(dt, 2, sz, NULL, 1, 64), gr = tku_alloc(dt, 2, sz, NULL, 1, 64);
  tt_t dg = tku_alloc(dt, 2, sz, NULL, 1, 64), du = tku_alloc(dt, 2, sz, NULL, 1, 64);
  tku_fill(&gate, &g_rng, 6.0, false);
  tku_fill(&up, &g_rng, 1.0, false);
  tku_fill(&gr, &g_rng, 1.0, false);
  const char* act = gelu ? "gelu_tanh" : "silu";
  tpu_k_value_t a[3] = {vt(&gate.t), vt(&up.t), vs(act)};
  CHECK_OK(call_op("tpu::swiglu", 3, a, 1, &y.t));
  tpu_k_value_t b[4] = {vt(&gr.t), vt(&gate.t), vt(&up.t), vs(act)};
  tpu_tensor_t outs[2] = {dg.t, du.t};
  CHECK_OK(call_op("tpu::swiglu_backward", 4, b, 2, outs));
  int bad = 0;
  for (int64_t i = 0; i < R * C; ++i) {
    double d;
    const double x = getf(&gate.t, i), u = getf(&up.t, i), g = getf(&gr.t, i);
    const double av = act_ref(x, gelu, &d);
    if (!close_f(getf(&y.t, i), av * u, tol(dt), tol(dt)) || !close_f(getf(&du.t, i), g * av, tol(dt), tol(dt)) ||
        !close_f(getf(&dg.t, i), g * u * d, tol(dt), tol(dt))) {
      if (bad++ < 3)
        CHECKF(false, "%s %s [%lld]: y %g want %g, dgate %g want %g", act, tpu_dtype_name(dt), (long long)i,
               getf(&y.t, i), av * u, getf(&dg.t, i), g * u * d);
    }
  }
  CHECKF(bad == 0, "%s %s: %d mismatches", act, tpu_dtype_name(dt), bad);
  fr(&gate); fr(&up); fr(&y); fr(&gr); fr(&dg); fr(&du);
}

static void test_cases(void) {
  for (int pass = 0; pass < 2; ++pass) {
    if (pass) setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);
    rms_case(TPU_DTYPE_F32, 7, 300, true, false);
    rms_case(TPU_DTYPE_F32, 2, 576, false, true);
    rms_case(TPU_DTYPE_BF16, 5, 64, false, false);
    rope_case(TPU_DTYPE_F32, 2, 4, 2, 3, 16, 16);
    rope_case(TPU_DTYPE_F32, 1, 2, 1, 2, 600, 520); /* partial, more than one chunk */
    rope_case(TPU_DTYPE_BF16, 1, 3, 1, 1, 64, 64);
    glu_case(TPU_DTYPE_F32, 3, 301, false);
    glu_case(TPU_DTYPE_F32, 4, 67, true);
    glu_case(TPU_DTYPE_BF16, 2, 100, false);
  }
  unsetenv("TORCH_TPU_KERNEL_ISA");
}

static void test_errors(void) {
  int64_t xs[2] = {2, 8}, ws[1] = {7}, q4[4] = {1, 2, 3, 8}, c3[3] = {1, 3, 7};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, xs, NULL, 1, 0), w = tku_alloc(TPU_DTYPE_F32, 1, ws, NULL, 1, 0);
  tt_t xb = tku_alloc(TPU_DTYPE_BF16, 2, xs, NULL, 1, 0), xi = tku_alloc(TPU_DTYPE_I32, 2, xs, NULL, 1, 0);
  tt_t q = tku_alloc(TPU_DTYPE_F32, 4, q4, NULL, 1, 0), c = tku_alloc(TPU_DTYPE_F32, 3, c3, NULL, 1, 0);
  tpu_k_value_t a[4] = {vt(&x.t), vt(&w.t), vd(1e-6), vb(false)};
  CHECK_STATUS(call_op("tpu::rms_norm", 4, a, 1, &x.t), TPU_STATUS_INVALID_ARGUMENT, "does not match the last dim");
  a[0] = vt(&xi.t);
  a[1] = vn();
  CHECK_STATUS(call_op("tpu::rms_norm", 4, a, 1, &x.t), TPU_STATUS_UNIMPLEMENTED, "int32");
  tpu_k_value_t r[4] = {vt(&q.t), vt(&q.t), vt(&c.t), vt(&c.t)};
  tpu_tensor_t ro[2] = {q.t, q.t};
  CHECK_STATUS(call_op("tpu::rope", 4, r, 2, ro), TPU_STATUS_INVALID_ARGUMENT, "even rotary_dim");
  tpu_k_value_t g[3] = {vt(&x.t), vt(&xb.t), vs("silu")};
  CHECK_STATUS(call_op("tpu::swiglu", 3, g, 1, &x.t), TPU_STATUS_INVALID_ARGUMENT, "same dtype");
  g[1] = vt(&x.t);
  g[2] = vs("relu");
  CHECK_STATUS(call_op("tpu::swiglu", 3, g, 1, &x.t), TPU_STATUS_INVALID_ARGUMENT, "'silu' or 'gelu_tanh'");
  fr(&x); fr(&w); fr(&xb); fr(&xi); fr(&q); fr(&c);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_cases);
  RUN_TEST(test_errors);
  return tku_finish();
}
