/* test_k_conv.c - tpu::conv_fwd / tpu::conv_bwd against a double-precision
 * reference: 1-d/2-d/3-d/4-d, stride, padding, dilation, groups (depthwise),
 * bias, transposed, strided layouts; direct, gemm and blocked paths (and a
 * shape sweep for the blocked one); f32/bf16/f16/f64/int64. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 88172645463325252ull;
static double urand(void) { return tku_urand(&g_rng); } /* [-1, 1) */

/* `gap` > 1 spreads the innermost memory dim. */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm, int64_t gap) {
  return tku_alloc(dtype, ndim, sizes, perm, gap, 16);
}

/* A tensor over its own storage; `perm` (optional) is the memory order of
 * the dims, outermost first. `gap` > 1 spreads the innermost memory dim. */

static void unravel_n(int64_t r, const int64_t* sizes, int n, int64_t* idx) {
  for (int j = n - 1; j >= 0; --j) {
    idx[j] = r % sizes[j];
    r /= sizes[j];
  }
}
static int64_t numel(const tpu_tensor_t* t) { return tpu_tensor_numel(t); }

static void fill(tt_t* x) {
  int64_t idx[TPU_MAX_DIMS];
  for (int64_t i = 0; i < numel(&x->t); ++i) {
    unravel_n(i, x->t.sizes, x->t.ndim, idx);
    double v = urand();
    set(&x->t, idx, tpu_dtype_is_floating(x->t.dtype) ? v : floor(v * 5.0));
  }
}
static void fill_nan(tt_t* x) {
  int64_t idx[TPU_MAX_DIMS];
  for (int64_t i = 0; i < numel(&x->t); ++i) {
    unravel_n(i, x->t.sizes, x->t.ndim, idx);
    set(&x->t, idx, NAN);
  }
}

/* Dense double copy (row-major) of a tensor. */
static double* dense(const tpu_tensor_t* t) {
  int64_t n = numel(t);
  double* d = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  int64_t idx[TPU_MAX_DIMS];
  for (int64_t i = 0; i < n; ++i) {
    unravel_n(i, t->sizes, t->ndim, idx);
    d[i] = get(t, idx);
  }
  return d;
}

/* Worst |got - ref| / (1 + mag). */
static double cmp(const tpu_tensor_t* got, const double* ref, const double* mag) {
  double worst = 0.0;
  int64_t idx[TPU_MAX_DIMS];
  for (int64_t i = 0; i < numel(got); ++i) {
    unravel_n(i, got->sizes, got->ndim, idx);
    double e = fabs(get(got, idx) - ref[i]) / (1.0 + mag[i]);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

typedef struct {
  int nd;
  int64_t N, Cx, Cy, G; /* regular-conv channels: X side (input), Y side (output) */
  int64_t xs[4], k[4], s[4], p[4], d[4], op[4];
  bool transposed, bias;
  int layout; /* 0 contiguous, 1 channels-last input/grad, 2 gapped + permuted weight */
} cfg_t;

static const char* g_path = "auto";

/* Y spatial size (regular-conv output side). */
static int64_t ysize(const cfg_t* c, int j) {
  return (c->xs[j] + 2 * c->p[j] - c->d[j] * (c->k[j] - 1) - 1) / c->s[j] + 1;
}

static void sizes_of(const cfg_t* c, int64_t* xsz, int64_t* ysz, int64_t* wsz) {
  int nd = c->nd;
  xsz[0] = ysz[0] = c->N;
  xsz[1] = c->Cx;
  ysz[1] = c->Cy;
  wsz[0] = c->Cy;
  wsz[1] = c->Cx / c->G;
  for (int j = 0; j < nd; ++j) {
    xsz[2 + j] = c->xs[j];
    ysz[2 + j] = ysize(c, j);
    wsz[2 + j] = c->k[j];
  }
}

/* Reference over every (n, y channel, x channel in group, y position, tap):
 * Y += W*X, gX += W*gY, gW += gY*X (and |terms| for tolerances). */
static void reference(const cfg_t* c, const int64_t* xsz, const int64_t* ysz, const int64_t* wsz,
                      const double* X, const double* W, const double* gY, double* Y, double* Ym,
                      double* gX, double* gXm, double* gW, double* gWm) {
  int nd = c->nd;
  int64_t M = c->Cy / c->G, Cg = c->Cx / c->G;
  int64_t yp = 1, kp = 1, xp = 1;
  for (int j = 0; j < nd; ++j) {
    yp *= ysz[2 + j];
    kp *= wsz[2 + j];
    xp *= xsz[2 + j];
  }
  for (int64_t n = 0; n < c->N; ++n)
    for (int64_t oc = 0; oc < c->Cy; ++oc) {
      int64_t g = oc / M;
      for (int64_t ci = 0; ci < Cg; ++ci) {
        int64_t xc = g * Cg + ci;
        for (int64_t y = 0; y < yp; ++y) {
          int64_t yi[4], ki[4];
          unravel_n(y, ysz + 2, nd, yi);
          for (int64_t kk = 0; kk < kp; ++kk) {
            unravel_n(kk, wsz + 2, nd, ki);
            int64_t xlin = 0;
            bool in = true;
            for (int j = 0; j < nd; ++j) {
              int64_t xv = yi[j] * c->s[j] + ki[j] * c->d[j] - c->p[j];
              if (xv < 0 || xv >= xsz[2 + j]) in = false;
              xlin = xlin * xsz[2 + j] + xv;
            }
            if (!in) continue;
            int64_t xo = (n * c->Cx + xc) * xp + xlin;
            int64_t yo = (n * c->Cy + oc) * yp + y;
            int64_t wo = (oc * Cg + ci) * kp + kk;
            Y[yo] += W[wo] * X[xo];
            Ym[yo] += fabs(W[wo] * X[xo]);
            gX[xo] += W[wo] * gY[yo];
            gXm[xo] += fabs(W[wo] * gY[yo]);
            gW[wo] += gY[yo] * X[xo];
            gWm[wo] += fabs(gY[yo] * X[xo]);
          }
        }
      }
    }
}

static double tol_of(int dt) {
  switch (dt) {
    case TPU_DTYPE_F64: return 1e-12;
    case TPU_DTYPE_I64: case TPU_DTYPE_I32: return 1e-15; /* exact */
    case TPU_DTYPE_F32: return 1e-5;
    default: return 1.2e-2;
  }
}

static void run_cfg(const cfg_t* c, int dt) {
  int nd = c->nd, R = nd + 2;
  int64_t xsz[6], ysz[6], wsz[6];
  sizes_of(c, xsz, ysz, wsz);
  int cl[6], wperm[6];
  cl[0] = 0;
  for (int j = 0; j < nd; ++j) cl[1 + j] = 2 + j;
  cl[R - 1] = 1;
  for (int j = 0; j < R; ++j) wperm[j] = R - 1 - j;
  const int* aperm = c->layout == 1 ? cl : NULL;
  const int* wp = c->layout == 2 ? wperm : NULL;
  int64_t gap = c->layout == 2 ? 2 : 1;
  /* tensors on the regular X / Y sides */
  tt_t X = mk(dt, R, xsz, aperm, gap), Y = mk(dt, R, ysz, NULL, 1), W = mk(dt, R, wsz, wp, gap);
  tt_t gY = mk(dt, R, ysz, aperm, gap), gX = mk(dt, R, xsz, NULL, 1), gW = mk(dt, R, wsz, NULL, 1);
  int64_t bsz[1] = {c->transposed ? c->Cx : c->Cy};
  tt_t B = mk(dt, 1, bsz, NULL, c->layout == 2 ? 3 : 1), gB = mk(dt, 1, bsz, NULL, 1);
  fill(&X);
  fill(&W);
  fill(&gY);
  fill(&B);
  fill_nan(&Y);
  fill_nan(&gX);
  fill_nan(&gW);
  fill_nan(&gB);
  if (c->transposed) { /* transposed: its input lives on the Y side, its output on the X side */
    fill(&Y);
    fill(&gX);
  }
  int64_t nx = numel(&X.t), ny = numel(&Y.t), nw = numel(&W.t);
  double* Xd = dense(&X.t);
  double* Wd = dense(&W.t);
  double* gYd = dense(&gY.t);
  double* Yd0 = dense(&Y.t);
  double* gXd0 = dense(&gX.t);
  double* Bd = dense(&B.t);
  double *r1 = calloc(ny + nx + 1, 8), *m1 = calloc(ny + nx + 1, 8), *r2 = calloc(ny + nx + 1, 8),
         *m2 = calloc(ny + nx + 1, 8), *r3 = calloc(nw + 1, 8), *m3 = calloc(nw + 1, 8);
  int64_t S[4], P[4], D[4], OP[4];
  for (int j = 0; j < nd; ++j) {
    S[j] = c->s[j];
    P[j] = c->p[j];
    D[j] = c->d[j];
    OP[j] = c->op[j];
  }
  char what[256];
  snprintf(what, sizeof(what), "%dd N=%lld Cx=%lld Cy=%lld G=%lld tr=%d bias=%d layout=%d %s path=%s",
           nd, (long long)c->N, (long long)c->Cx, (long long)c->Cy, (long long)c->G, c->transposed,
           c->bias, c->layout, tpu_dtype_name(dt), g_path);
  double tol = tol_of(dt);
  int64_t ysp = ny / (c->N * c->Cy > 0 ? c->N * c->Cy : 1), xsp = nx / (c->N * c->Cx > 0 ? c->N * c->Cx : 1);
  if (!c->transposed) {
    /* forward: Y = conv(X) + b; backward from gY */
    reference(c, xsz, ysz, wsz, Xd, Wd, gYd, r1, m1, r2, m2, r3, m3);
    if (c->bias)
      for (int64_t i = 0; i < ny; ++i) r1[i] += Bd[(i / ysp) % c->Cy];
    tpu_k_value_t a[9] = {vt(&X.t), vt(&W.t), c->bias ? vt(&B.t) : vn(), vints(S, nd), vints(P, nd),
                          vints(D, nd), vb(false), vints(OP, nd), vi(c->G)};
    bool s = ok(call_op("tpu::conv_fwd", 9, a, 1, &Y.t));
    double e = cmp(&Y.t, r1, m1);
    CHECKF(s && e < tol, "fwd %s err=%g", what, e);
    int64_t mask[3] = {1, 1, 1};
    tpu_tensor_t outs[3] = {gX.t, gW.t, gB.t};
    tpu_k_value_t b[10] = {vt(&gY.t), vt(&X.t), vt(&W.t), vints(S, nd), vints(P, nd), vints(D, nd),
                           vb(false), vints(OP, nd), vi(c->G), vints(mask, 3)};
    s = ok(call_op("tpu::conv_bwd", 10, b, 3, outs));
    double e1 = cmp(&gX.t, r2, m2), e2 = cmp(&gW.t, r3, m3);
    double* rb = calloc(c->Cy + 1, 8);
    double* mb = calloc(c->Cy + 1, 8);
    for (int64_t i = 0; i < ny; ++i) {
      rb[(i / ysp) % c->Cy] += gYd[i];
      mb[(i / ysp) % c->Cy] += fabs(gYd[i]);
    }
    double e3 = cmp(&gB.t, rb, mb);
    CHECKF(s && e1 < tol && e2 < tol && e3 < tol, "bwd %s gi=%g gw=%g gb=%g", what, e1, e2, e3);
    free(rb);
    free(mb);
  } else {
    /* transposed: out (X side) = conv^T(in = Y side) + b; backward from gX */
    double* Yd = dense(&Y.t);
    double* gXd = dense(&gX.t);
    /* forward: X_out = sum W * Y_in  (the reference's gX with gY := Y_in) */
    reference(c, xsz, ysz, wsz, gXd, Wd, Yd, r1, m1, r2, m2, r3, m3);
    if (c->bias)
      for (int64_t i = 0; i < nx; ++i) r2[i] += Bd[(i / xsp) % c->Cx];
    tt_t out = mk(dt, R, xsz, NULL, 1);
    fill_nan(&out);
    int64_t tpo[4];
    for (int j = 0; j < nd; ++j) tpo[j] = OP[j];
    tpu_k_value_t a[9] = {vt(&Y.t), vt(&W.t), c->bias ? vt(&B.t) : vn(), vints(S, nd), vints(P, nd),
                          vints(D, nd), vb(true), vints(tpo, nd), vi(c->G)};
    bool s = ok(call_op("tpu::conv_fwd", 9, a, 1, &out.t));
    double e = cmp(&out.t, r2, m2);
    CHECKF(s && e < tol, "fwd %s err=%g", what, e);
    /* backward with grad_out = gX (X side): grad_in (Y side) = conv(gX), gW = corr(Y_in, gX) */
    tt_t gin = mk(dt, R, ysz, NULL, 1);
    fill_nan(&gin);
    int64_t mask[3] = {1, 1, 1};
    tpu_tensor_t outs[3] = {gin.t, gW.t, gB.t};
    tpu_k_value_t b[10] = {vt(&gX.t), vt(&Y.t), vt(&W.t), vints(S, nd), vints(P, nd), vints(D, nd),
                           vb(true), vints(tpo, nd), vi(c->G), vints(mask, 3)};
    s = ok(call_op("tpu::conv_bwd", 10, b, 3, outs));
    /* references: grad_in = r1 (Y from X := gX), gW = r3 (gY := Y_in, X := gX) */
    double e1 = cmp(&gin.t, r1, m1), e2 = cmp(&gW.t, r3, m3);
    double* rb = calloc(c->Cx + 1, 8);
    double* mb = calloc(c->Cx + 1, 8);
    for (int64_t i = 0; i < nx; ++i) {
      rb[(i / xsp) % c->Cx] += gXd[i];
      mb[(i / xsp) % c->Cx] += fabs(gXd[i]);
    }
    double e3 = cmp(&gB.t, rb, mb);
    CHECKF(s && e1 < tol && e2 < tol && e3 < tol, "bwd %s gi=%g gw=%g gb=%g", what, e1, e2, e3);
    free(rb);
    free(mb);
    free(Yd);
    free(gXd);
    fr(&out);
    fr(&gin);
  }
  free(Xd); free(Wd); free(gYd); free(Yd0); free(gXd0); free(Bd);
  free(r1); free(m1); free(r2); free(m2); free(r3); free(m3);
  fr(&X); fr(&Y); fr(&W); fr(&gY); fr(&gX); fr(&gW); fr(&B); fr(&gB);
}

static cfg_t C1(int64_t N, int64_t Cx, int64_t Cy, int64_t G, int64_t L, int64_t k, int64_t s, int64_t p,
                int64_t d) {
  cfg_t c;
  memset(&c, 0, sizeof(c));
  c.nd = 1;
  c.N = N; c.Cx = Cx; c.Cy = Cy; c.G = G;
  c.xs[0] = L; c.k[0] = k; c.s[0] = s; c.p[0] = p; c.d[0] = d;
  c.bias = true;
  return c;
}
static cfg_t C2(int64_t N, int64_t Cx, int64_t Cy, int64_t G, int64_t H, int64_t W, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  cfg_t c;
  memset(&c, 0, sizeof(c));
  c.nd = 2;
  c.N = N; c.Cx = Cx; c.Cy = Cy; c.G = G;
  c.xs[0] = H; c.xs[1] = W; c.k[0] = kh; c.k[1] = kw; c.s[0] = sh; c.s[1] = sw;
  c.p[0] = ph; c.p[1] = pw; c.d[0] = dh; c.d[1] = dw;
  c.bias = true;
  return c;
}

static void run_all_cfgs(const int* dts, int ndt) {
  cfg_t cs[48];
  int n = 0;
  cs[n++] = C1(2, 6, 6, 6, 17, 4, 1, 3, 1);            /* Mamba causal depthwise */
  cs[n++] = C1(1, 4, 8, 4, 13, 3, 2, 1, 2);            /* channel multiplier 2 */
  cs[n++] = C1(2, 5, 7, 1, 1100, 3, 1, 1, 1);          /* long rows: several tiles */
  cs[n++] = C1(1, 3, 3, 3, 30, 4, 1, 6, 2);            /* dilated depthwise k=4 */
  cs[n++] = C1(1, 4, 4, 4, 9, 2, 1, 1, 3);             /* k=2, dilation 3 */
  cs[n++] = C2(2, 4, 8, 1, 9, 11, 3, 2, 2, 1, 1, 2, 1, 2);
  cs[n++] = C2(1, 16, 16, 2, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1);   /* gemm: M = 8 */
  cs[n++] = C2(1, 32, 100, 1, 20, 17, 3, 3, 1, 1, 1, 1, 1, 1); /* 2 m blocks, p blocks */
  cs[n++] = C2(1, 64, 16, 1, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1);    /* K = 576: several k steps */
  cs[n++] = C2(2, 20, 24, 1, 5, 7, 1, 1, 1, 1, 0, 0, 1, 1);    /* pointwise */
  cs[n++] = C2(1, 12, 12, 12, 8, 9, 3, 3, 2, 2, 1, 1, 1, 1);   /* depthwise 2-d, strided */
  cs[n++] = C2(1, 3, 16, 1, 15, 15, 4, 4, 4, 4, 0, 0, 1, 1);   /* patch embedding */
  cs[n++] = C2(1, 4, 6, 2, 10, 9, 3, 2, 2, 3, 1, 0, 2, 2);     /* gcd(d, s) > 1: tapless classes */
  cs[n++] = C1(2, 3, 5, 1, 20, 2, 3, 0, 1);                   /* kernel shorter than stride */
  cs[n++] = C2(1, 16, 24, 1, 13, 12, 3, 3, 2, 2, 1, 1, 1, 1);  /* ResNet-style stride 2, gemm */
  cfg_t c3;
  memset(&c3, 0, sizeof(c3));
  c3.nd = 3; c3.N = 1; c3.Cx = 3; c3.Cy = 9; c3.G = 1; c3.bias = true;
  int64_t x3[3] = {5, 6, 7}, k3[3] = {2, 3, 2}, s3[3] = {1, 2, 1}, p3[3] = {1, 0, 1}, d3[3] = {2, 1, 1};
  for (int j = 0; j < 3; ++j) { c3.xs[j] = x3[j]; c3.k[j] = k3[j]; c3.s[j] = s3[j]; c3.p[j] = p3[j]; c3.d[j] = d3[j]; }
  cs[n++] = c3;
  cfg_t c4;
  memset(&c4, 0, sizeof(c4));
  c4.nd = 4; c4.N = 1; c4.Cx = 2; c4.Cy = 3; c4.G = 1; c4.bias = false;
  for (int j = 0; j < 4; ++j) { c4.xs[j] = 3 + j % 2; c4.k[j] = 2; c4.s[j] = 1 + (j == 1); c4.p[j] = j == 2; c4.d[j] = 1; }
  cs[n++] = c4;
  int base = n;
  /* transposed: X side is the output. (stride 2 + output_padding; unit stride dilated) */
  for (int i = 0; i < base; ++i) {
    cfg_t t = cs[i];
    t.transposed = true;
    for (int j = 0; j < t.nd; ++j) t.op[j] = (t.s[j] > 1 && (t.xs[j] + 2 * t.p[j] - t.d[j] * (t.k[j] - 1) - 1) % t.s[j] != 0) ? 1 : 0;
    /* output_padding must reproduce xs: xs = (ys-1)*s - 2p + d(k-1) + op + 1 */
    for (int j = 0; j < t.nd; ++j) {
      int64_t ys = ysize(&t, j);
      t.op[j] = t.xs[j] - ((ys - 1) * t.s[j] - 2 * t.p[j] + t.d[j] * (t.k[j] - 1) + 1);
    }
    bool okop = true;
    for (int j = 0; j < t.nd; ++j) okop = okop && t.op[j] >= 0 && (t.op[j] < t.s[j] || t.op[j] < t.d[j]);
    if (okop) cs[n++] = t;
  }
  /* layouts */
  cfg_t l1 = cs[3]; l1.layout = 1; cs[n++] = l1;
  cfg_t l2 = cs[5]; l2.layout = 2; cs[n++] = l2;
  cfg_t l3 = cs[0]; l3.layout = 2; cs[n++] = l3;
  for (int di = 0; di < ndt; ++di)
    for (int i = 0; i < n; ++i) run_cfg(&cs[i], dts[di]);
}

static void test_errors(void) {
  int64_t xs[3] = {1, 4, 8}, ws[3] = {6, 3, 3}, ys[3] = {1, 6, 6};
  tt_t x = mk(TPU_DTYPE_F32, 3, xs, NULL, 1), w = mk(TPU_DTYPE_F32, 3, ws, NULL, 1), y = mk(TPU_DTYPE_F32, 3, ys, NULL, 1);
  int64_t one[1] = {1}, zero[1] = {0};
  tpu_k_value_t a[9] = {vt(&x.t), vt(&w.t), vn(), vints(one, 1), vints(zero, 1), vints(one, 1),
                        vb(false), vints(zero, 1), vi(1)};
  CHECK_STATUS(call_op("tpu::conv_fwd", 9, a, 1, &y.t), TPU_STATUS_INVALID_ARGUMENT, "channel");
  tt_t xi = mk(TPU_DTYPE_BOOL, 3, xs, NULL, 1);
  a[0] = vt(&xi.t);
  CHECK_STATUS(call_op("tpu::conv_fwd", 9, a, 1, &y.t), TPU_STATUS_UNIMPLEMENTED, "bool");
  a[0] = vt(&x.t);
  int64_t zs[1] = {0};
  a[3] = vints(zs, 1);
  CHECK_STATUS(call_op("tpu::conv_fwd", 9, a, 1, &y.t), TPU_STATUS_INVALID_ARGUMENT, "stride");
  fr(&x); fr(&w); fr(&y); fr(&xi);
}

/* Only some outputs wanted (others INVALID); empty batch. */
static void test_mask_and_empty(void) {
  cfg_t c = C2(1, 4, 8, 2, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1);
  int64_t xsz[4], ysz[4], wsz[4];
  sizes_of(&c, xsz, ysz, wsz);
  tt_t X = mk(TPU_DTYPE_F32, 4, xsz, NULL, 1), W = mk(TPU_DTYPE_F32, 4, wsz, NULL, 1);
  tt_t gY = mk(TPU_DTYPE_F32, 4, ysz, NULL, 1), gW = mk(TPU_DTYPE_F32, 4, wsz, NULL, 1);
  fill(&X); fill(&W); fill(&gY); fill_nan(&gW);
  int64_t one[2] = {1, 1}, mask[3] = {0, 1, 0};
  tpu_tensor_t outs[3];
  memset(outs, 0, sizeof(outs));
  outs[1] = gW.t;
  tpu_k_value_t b[10] = {vt(&gY.t), vt(&X.t), vt(&W.t), vints(one, 2), vints(one, 2), vints(one, 2),
                         vb(false), vints(one, 2), vi(2), vints(mask, 3)};
  CHECK_OK(call_op("tpu::conv_bwd", 10, b, 3, outs));
  double* r1 = calloc(1000, 8), *m1 = calloc(1000, 8), *r2 = calloc(1000, 8), *m2 = calloc(1000, 8);
  double* r3 = calloc(1000, 8), *m3 = calloc(1000, 8);
  double* Xd = dense(&X.t), *Wd = dense(&W.t), *gYd = dense(&gY.t);
  reference(&c, xsz, ysz, wsz, Xd, Wd, gYd, r1, m1, r2, m2, r3, m3);
  CHECK(cmp(&gW.t, r3, m3) < 1e-5);
  free(r1); free(m1); free(r2); free(m2); free(r3); free(m3); free(Xd); free(Wd); free(gYd);
  /* N = 0 */
  int64_t x0[4] = {0, 4, 6, 6}, y0[4] = {0, 8, 6, 6};
  tt_t X0 = mk(TPU_DTYPE_F32, 4, x0, NULL, 1), Y0 = mk(TPU_DTYPE_F32, 4, y0, NULL, 1);
  tpu_k_value_t a[9] = {vt(&X0.t), vt(&W.t), vn(), vints(one, 2), vints(one, 2), vints(one, 2),
                        vb(false), vints(one, 2), vi(2)};
  CHECK_OK(call_op("tpu::conv_fwd", 9, a, 1, &Y0.t));
  fr(&X); fr(&W); fr(&gY); fr(&gW); fr(&X0); fr(&Y0);
}

/* Shapes for the blocked path (1-D/2-D, 4 output channels x 3 vectors of 8
 * per register tile): channels 1..80 on both sides, 1x1 and 3x3 kernels,
 * padding 0/1, stride 1/2, dilation 2, groups, odd and short rows (partial
 * vectors, fewer than 3 vectors per band), batch > 1, bands split over the
 * pool, and strided layouts. Every case also runs conv_bwd (its grad_input
 * is a flipped-kernel forward) and, transposed, conv^T. */
static void run_blocked_sweep(const int* dts, int ndt) {
  static const int64_t ch[][2] = {{1, 1}, {3, 4}, {4, 32}, {8, 5}, {13, 17}, {32, 32}, {33, 64}, {64, 7}, {80, 80}, {2, 80}};
  static const int64_t sp[][2] = {{1, 0}, {1, 1}, {2, 1}, {2, 0}};
  cfg_t cs[160];
  int n = 0;
  for (int i = 0; i < 10; ++i)
    for (int k = 1; k <= 3; k += 2)
      for (int j = 0; j < 4; ++j) {
        int64_t H = 3 + (i * 3 + j) % 7, W = 5 + (i * 5 + j * 3) % 13;
        if (ch[i][0] * ch[i][1] > 2000 && (i + j) % 2) W = 3; /* keep the reference cheap */
        cs[n++] = C2(1 + (i + j) % 3, ch[i][0], ch[i][1], 1, H, W, k, k, sp[j][0], sp[j][0], sp[j][1], sp[j][1], 1, 1);
      }
  cs[n++] = C2(2, 6, 8, 1, 9, 13, 3, 3, 1, 1, 2, 2, 2, 2);     /* dilation 2 */
  cs[n++] = C2(1, 8, 12, 2, 7, 11, 3, 3, 1, 1, 1, 1, 1, 1);    /* groups 2 */
  cs[n++] = C2(2, 16, 16, 4, 6, 9, 3, 3, 2, 1, 1, 0, 1, 2);    /* groups 4, mixed stride/dilation */
  cs[n++] = C2(3, 5, 9, 1, 11, 37, 3, 3, 1, 1, 1, 1, 1, 1);    /* batch 3, 5 vectors per row */
  cs[n++] = C2(1, 4, 8, 1, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1);    /* several bands per image */
  cs[n++] = C2(1, 3, 5, 1, 6, 8, 3, 5, 1, 1, 0, 2, 1, 1);      /* 3x5 kernel, asymmetric padding */
  cs[n++] = C2(1, 80, 6, 1, 3, 200, 3, 3, 1, 1, 1, 1, 1, 1);   /* band does not fit: other paths */
  cs[n++] = C1(2, 7, 9, 1, 29, 3, 1, 1, 1);                    /* 1-D */
  cs[n++] = C1(1, 4, 4, 1, 23, 3, 2, 1, 3);                    /* 1-D, stride 2, dilation 3 */
  cfg_t l1 = cs[5 * 8 + 1]; l1.layout = 1; cs[n++] = l1;       /* channels-last input */
  cfg_t l2 = cs[3 * 8 + 6]; l2.layout = 2; cs[n++] = l2;       /* gapped input, permuted weight */
  int base = n;
  for (int i = 0; i < base; i += 3) { /* transposed: the backward's own P1/P2 problems */
    cfg_t t = cs[i];
    t.transposed = true;
    bool okop = true;
    for (int j = 0; j < t.nd; ++j) {
      int64_t ys = ysize(&t, j);
      t.op[j] = t.xs[j] - ((ys - 1) * t.s[j] - 2 * t.p[j] + t.d[j] * (t.k[j] - 1) + 1);
      okop = okop && t.op[j] >= 0 && (t.op[j] < t.s[j] || t.op[j] < t.d[j]);
    }
    if (okop) cs[n++] = t;
  }
  for (int di = 0; di < ndt; ++di)
    for (int i = 0; i < n; ++i) run_cfg(&cs[i], dts[di]);
}

int main(void) {
  if (!tku_start(3)) return 1;
  int all[5] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_F16, TPU_DTYPE_I64};
  RUN_TEST(test_errors);
  RUN_TEST(test_mask_and_empty);
  run_all_cfgs(all, 5);
  setenv("TORCH_TPU_CONV_PATH", "direct", 1);
  g_path = "direct";
  run_all_cfgs(all, 1);
  setenv("TORCH_TPU_CONV_PATH", "gemm", 1);
  g_path = "gemm";
  run_all_cfgs(all, 1);
  int halves[3] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_F16};
  setenv("TORCH_TPU_CONV_PATH", "blocked", 1);
  g_path = "blocked";
  run_all_cfgs(halves, 3);
  run_blocked_sweep(halves, 3);
  unsetenv("TORCH_TPU_CONV_PATH");
  g_path = "auto";
  run_blocked_sweep(halves, 1);
  tpu_threadpool_destroy(g_pool);
  g_pool = NULL;
  /* single-threaded, portable micro-kernel */
  setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);
  g_path = "generic-1thread";
  int f32[1] = {TPU_DTYPE_F32};
  run_all_cfgs(f32, 1);
  setenv("TORCH_TPU_CONV_PATH", "blocked", 1); /* the portable 4x3 tile */
  g_path = "blocked-generic-1thread";
  run_blocked_sweep(f32, 1);
  unsetenv("TORCH_TPU_CONV_PATH");
  return TEST_REPORT();
}
