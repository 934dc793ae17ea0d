/* test_k_linalg.c - mm/bmm/addmm/baddbmm/addbmm/addmv/mv/dot against naive loops. */
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

/* perm = {1,0} makes a transposed view. */
static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  return tku_alloc(dtype, ndim, sizes, perm, 1, 16);
}
static void fill(tt_t* x, double scale, bool ints) { tku_fill(x, &g_rng, scale, ints); }

/* A tensor over its own malloc'd storage. `perm` (optional) gives the memory
 * order of the dims, outermost first: perm = {1,0} makes a transposed view. */

/* Reference: out[b,m,n] = beta*bias + alpha*sum_k a*b (in double). Compares. */
static double max_err_vs_ref(const tpu_tensor_t* a, const tpu_tensor_t* b, const tpu_tensor_t* bias,
                             double alpha, double beta, const tpu_tensor_t* c, int nd) {
  int o = nd - 2;
  int64_t B = nd == 3 ? a->sizes[0] : 1, M = a->sizes[o], K = a->sizes[o + 1], N = b->sizes[o + 1];
  double worst = 0.0;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          int64_t ia[3], ib[3];
          if (nd == 3) { ia[0] = bi; ia[1] = m; ia[2] = k; ib[0] = bi; ib[1] = k; ib[2] = n; }
          else { ia[0] = m; ia[1] = k; ib[0] = k; ib[1] = n; }
          double p = get(a, ia) * get(b, ib);
          s += p;
          mag += fabs(p);
        }
        double ref = alpha * s;
        if (bias && beta != 0.0) {
          int64_t ix[3] = {0, 0, 0};
          int off = nd - bias->ndim;
          int64_t full[3];
          if (nd == 3) { full[0] = bi; full[1] = m; full[2] = n; } else { full[0] = m; full[1] = n; }
          for (int d = 0; d < bias->ndim; ++d) ix[d] = bias->sizes[d] == 1 ? 0 : full[off + d];
          ref += beta * get(bias, ix);
          mag += fabs(beta * get(bias, ix));
        }
        int64_t ic[3];
        if (nd == 3) { ic[0] = bi; ic[1] = m; ic[2] = n; } else { ic[0] = m; ic[1] = n; }
        double got = get(c, ic);
        double err = fabs(got - ref) / (1.0 + fabs(alpha) * mag);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      }
  return worst;
}

static void test_mm(int dt, int64_t M, int64_t K, int64_t N, bool ta, bool tb, bool tc, double tol) {
  int tp[2] = {1, 0};
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  tt_t a = mk(dt, 2, sa, ta ? tp : NULL), b = mk(dt, 2, sb, tb ? tp : NULL);
  tt_t c = mk(dt, 2, sc, tc ? tp : NULL);
  bool ints = !tpu_dtype_is_floating(dt);
  fill(&a, 1.0, ints);
  fill(&b, 1.0, ints);
  tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
  bool s = ok(call_op("aten::mm", 2, args, 1, &c.t));
  double err = max_err_vs_ref(&a.t, &b.t, NULL, 1, 0, &c.t, 2);
  CHECKF(s && err < tol, "mm %s M=%lld K=%lld N=%lld ta=%d tb=%d tc=%d err=%g", tpu_dtype_name(dt),
        (long long)M, (long long)K, (long long)N, ta, tb, tc, err);
  fr(&a); fr(&b); fr(&c);
}

/* dst[i, j] = src[i, j] rounded to bf16 (2-D, same sizes). */
static void round_to_bf16(const tpu_tensor_t* src, const tpu_tensor_t* dst) {
  for (int64_t i = 0; i < src->sizes[0]; ++i)
    for (int64_t j = 0; j < src->sizes[1]; ++j) {
      int64_t ix[2] = {i, j};
      set(dst, ix, tpu_ku_bf16_to_f32(tpu_ku_f32_to_bf16((float)get(src, ix))));
    }
}

/* TPU_K_CALL_BF16_PRODUCTS on f32 x f32 (addmm with a row bias): with AVX512_BF16 and M, N >= 64
 * the result is the product of the operands rounded to bf16 (f32 accumulation, exact bias),
 * measurably away from the f32 product; otherwise the f32 product. */
static void test_bf16_products(int64_t M, int64_t K, int64_t N, bool ta, bool tb) {
  int tp[2] = {1, 0};
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N}, sbias[1] = {N};
  tt_t a = mk(TPU_DTYPE_F32, 2, sa, ta ? tp : NULL), b = mk(TPU_DTYPE_F32, 2, sb, tb ? tp : NULL);
  tt_t ra = mk(TPU_DTYPE_F32, 2, sa, NULL), rb = mk(TPU_DTYPE_F32, 2, sb, NULL);
  tt_t c = mk(TPU_DTYPE_F32, 2, sc, NULL), bias = mk(TPU_DTYPE_F32, 1, sbias, NULL);
  fill(&a, 1.0, false);
  fill(&b, 1.0, false);
  fill(&bias, 1.0, false);
  round_to_bf16(&a.t, &ra.t);
  round_to_bf16(&b.t, &rb.t);
  tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&b.t), vd(1.0), vd(1.0)};
  const tpu_k_entry_t* e = tpu_k_lookup("aten::addmm");
  tpu_k_call_t call = mkcall("aten::addmm", 5, args, 1, &c.t);
  call.flags = TPU_K_CALL_BF16_PRODUCTS;
  bool s = ok(e->check(&call)) && ok(e->run(&call));
  bool rounds = tpu_ku_use_avx512bf16() && M >= 64 && N >= 64;
  double to_rounded = max_err_vs_ref(&ra.t, &rb.t, &bias.t, 1, 1, &c.t, 2);
  double to_exact = max_err_vs_ref(&a.t, &b.t, &bias.t, 1, 1, &c.t, 2);
  CHECKF(s && (rounds ? to_rounded < 1e-6 && to_exact > 1e-4 : to_exact < 1e-6),
         "bf16 products M=%lld K=%lld N=%lld ta=%d tb=%d rounds=%d: err vs rounded %g, vs exact %g",
         (long long)M, (long long)K, (long long)N, ta, tb, rounds, to_rounded, to_exact);
  fr(&a); fr(&b); fr(&ra); fr(&rb); fr(&c); fr(&bias);
}

static void test_addmm(int dt, int64_t M, int64_t K, int64_t N, int bias_nd, double alpha, double beta,
                       bool nan_bias, bool tb) {
  int tp[2] = {1, 0};
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  int64_t sbias[2];
  if (bias_nd == 1) sbias[0] = N; else { sbias[0] = M; sbias[1] = N; }
  tt_t a = mk(dt, 2, sa, NULL), b = mk(dt, 2, sb, tb ? tp : NULL), c = mk(dt, 2, sc, NULL);
  tt_t bias = mk(dt, bias_nd, sbias, NULL);
  fill(&a, 1.0, false);
  fill(&b, 1.0, false);
  fill(&bias, 1.0, false);
  if (nan_bias) {
    int64_t z[2] = {0, 0};
    set(&bias.t, z, NAN);
  }
  tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&b.t), vd(beta), vd(alpha)};
  bool s = ok(call_op("aten::addmm", 5, args, 1, &c.t));
  double err = max_err_vs_ref(&a.t, &b.t, &bias.t, alpha, beta, &c.t, 2);
  CHECKF(s && err < (dt == TPU_DTYPE_F32 ? 1e-5 : 1e-2), "addmm %s %lldx%lldx%lld bias%dD a=%g b=%g nan=%d err=%g",
        tpu_dtype_name(dt), (long long)M, (long long)K, (long long)N, bias_nd, alpha, beta, nan_bias, err);
  fr(&a); fr(&b); fr(&c); fr(&bias);
}

/* A rows x cols f32 view into a larger buffer: row-major with row stride
 * cols + pad (or column-major with column stride rows + pad when `trans`),
 * starting 3 elements in. Every element outside the view holds `gapv`. */
typedef struct {
  tpu_tensor_t t;
  float* buf;
  int64_t n;
} pv_t;
static pv_t mk_padded(int64_t rows, int64_t cols, bool trans, int64_t pad, float gapv) {
  pv_t v;
  int64_t outer = trans ? cols : rows, inner = (trans ? rows : cols) + pad;
  v.n = outer * inner + 3 + pad;
  v.buf = malloc((size_t)v.n * sizeof(float));
  for (int64_t i = 0; i < v.n; ++i) v.buf[i] = gapv;
  int64_t sz[2] = {rows, cols};
  int64_t st[2] = {trans ? 1 : inner, trans ? inner : 1};
  v.t = T_(v.buf + 3, TPU_DTYPE_F32, 2, sz, st);
  return v;
}
static bool pv_inside(const pv_t* v, int64_t i) {
  int64_t off = i - 3;
  if (off < 0) return false;
  int64_t r, c;
  if (v->t.strides[1] == 1) { r = off / v->t.strides[0]; c = off % v->t.strides[0]; }
  else { c = off / v->t.strides[1]; r = off % v->t.strides[1]; }
  return r < v->t.sizes[0] && c < v->t.sizes[1];
}

/* f32 products through the packed path's edges: M, N, K not multiples of
 * the register tile (6x16) or of the cache blocks (K 128, N 256, M 96),
 * operands with padded rows or columns (NaN in the gaps, so a read outside
 * the view shows), either layout of A, B and C, and a check that nothing
 * outside C's view is written. Optionally through addmm with alpha, beta
 * and a row bias. */
static void test_mm_padded(int64_t M, int64_t K, int64_t N, int layout, bool addmm) {
  bool ta = layout & 1, tb = layout & 2, tc = layout & 4;
  pv_t a = mk_padded(M, K, ta, 5, NAN), b = mk_padded(K, N, tb, 3, NAN);
  pv_t c = mk_padded(M, N, tc, 7, 7.0f);
  int64_t nb = N;
  tt_t bias = mk(TPU_DTYPE_F32, 1, &nb, NULL);
  for (int64_t i = 0; i < M * K; ++i) setf(&a.t, i, tku_urand(&g_rng));
  for (int64_t i = 0; i < K * N; ++i) setf(&b.t, i, tku_urand(&g_rng));
  fill(&bias, 1.0, false);
  bool s;
  double err;
  if (addmm) {
    tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&b.t), vd(0.5), vd(-1.5)};
    s = ok(call_op("aten::addmm", 5, args, 1, &c.t));
    err = max_err_vs_ref(&a.t, &b.t, &bias.t, -1.5, 0.5, &c.t, 2);
  } else {
    tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
    s = ok(call_op("aten::mm", 2, args, 1, &c.t));
    err = max_err_vs_ref(&a.t, &b.t, NULL, 1, 0, &c.t, 2);
  }
  int64_t stray = 0;
  for (int64_t i = 0; i < c.n; ++i)
    if (!pv_inside(&c, i) && c.buf[i] != 7.0f) ++stray;
  CHECKF(s && err < 1e-5 && stray == 0, "%s padded %lldx%lldx%lld ta=%d tb=%d tc=%d err=%g stray=%lld isa=%s",
         addmm ? "addmm" : "mm", (long long)M, (long long)K, (long long)N, ta, tb, tc, err, (long long)stray,
         getenv("TORCH_TPU_KERNEL_ISA") ? getenv("TORCH_TPU_KERNEL_ISA") : "auto");
  free(a.buf); free(b.buf); free(c.buf); fr(&bias);
}

static void run_padded(void) {
  static const int64_t sizes[][3] = {{13, 300, 37}, {200, 129, 300}, {97, 257, 17}, {2, 40, 600}};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i)
    for (int t = 0; t < 8; ++t) test_mm_padded(sizes[i][0], sizes[i][1], sizes[i][2], t, (t & 3) == 1);
}

static void test_addmm_inplace(void) {
  int64_t M = 37, K = 150, N = 41;
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  tt_t a = mk(TPU_DTYPE_F32, 2, sa, NULL), b = mk(TPU_DTYPE_F32, 2, sb, NULL);
  tt_t c = mk(TPU_DTYPE_F32, 2, sc, NULL), c0 = mk(TPU_DTYPE_F32, 2, sc, NULL);
  fill(&a, 1, false); fill(&b, 1, false); fill(&c, 1, false);
  for (double beta = 1.0; beta >= 0.0; beta -= 0.5) {
    memcpy(c0.buf, c.buf, (size_t)(M * N * 4));
    tpu_k_value_t args[5] = {vt(&c.t), vt(&a.t), vt(&b.t), vd(beta), vd(2.0)};
    bool s = ok(call_op("aten::addmm_", 5, args, 1, &c.t));
    double err = max_err_vs_ref(&a.t, &b.t, &c0.t, 2.0, beta, &c.t, 2);
    CHECKF(s && err < 1e-5, "addmm_ beta=%g err=%g", beta, err);
  }
  fr(&a); fr(&b); fr(&c); fr(&c0);
}

static void test_bmm(int dt, int64_t B, int64_t M, int64_t K, int64_t N, bool tb, bool with_bias) {
  int tp[3] = {0, 2, 1};
  int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N}, sc[3] = {B, M, N}, sbias[2] = {1, N};
  tt_t a = mk(dt, 3, sa, NULL), b = mk(dt, 3, sb, tb ? tp : NULL), c = mk(dt, 3, sc, NULL);
  tt_t bias = mk(dt, 2, sbias, NULL);
  fill(&a, 1, dt == TPU_DTYPE_I64); fill(&b, 1, dt == TPU_DTYPE_I64); fill(&bias, 1, dt == TPU_DTYPE_I64);
  bool s;
  double err;
  bool is_int = dt == TPU_DTYPE_I64;
  if (with_bias) {
    tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&b.t), is_int ? vi(2) : vd(0.5), is_int ? vi(3) : vd(-1.5)};
    s = ok(call_op("aten::baddbmm", 5, args, 1, &c.t));
    err = max_err_vs_ref(&a.t, &b.t, &bias.t, is_int ? 3 : -1.5, is_int ? 2 : 0.5, &c.t, 3);
  } else {
    tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
    s = ok(call_op("aten::bmm", 2, args, 1, &c.t));
    err = max_err_vs_ref(&a.t, &b.t, NULL, 1, 0, &c.t, 3);
  }
  double tol = dt == TPU_DTYPE_BF16 ? 1e-2 : dt == TPU_DTYPE_I64 ? 0 : 1e-5;
  CHECKF(s && err <= tol, "%s %s B=%lld %lldx%lldx%lld tb=%d err=%g", with_bias ? "baddbmm" : "bmm",
        tpu_dtype_name(dt), (long long)B, (long long)M, (long long)K, (long long)N, tb, err);
  fr(&a); fr(&b); fr(&c); fr(&bias);
}

static void test_mv(int dt, int64_t M, int64_t K, bool ta, bool with_bias) {
  int tp[2] = {1, 0};
  int64_t sa[2] = {M, K}, sv[1] = {K}, so[1] = {M};
  tt_t a = mk(dt, 2, sa, ta ? tp : NULL), v = mk(dt, 1, sv, NULL), o = mk(dt, 1, so, NULL);
  tt_t bias = mk(dt, 1, so, NULL);
  fill(&a, 1, false); fill(&v, 1, false); fill(&bias, 1, false);
  bool s;
  if (with_bias) {
    tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&v.t), vd(0.25), vd(2.0)};
    s = ok(call_op("aten::addmv", 5, args, 1, &o.t));
  } else {
    tpu_k_value_t args[2] = {vt(&a.t), vt(&v.t)};
    s = ok(call_op("aten::mv", 2, args, 1, &o.t));
  }
  double worst = 0;
  for (int64_t m = 0; m < M; ++m) {
    double r = 0, mag = 0;
    for (int64_t k = 0; k < K; ++k) {
      int64_t ia[2] = {m, k}, iv[1] = {k};
      r += get(&a.t, ia) * get(&v.t, iv);
      mag += fabs(get(&a.t, ia) * get(&v.t, iv));
    }
    int64_t im[1] = {m};
    if (with_bias) { r = 2.0 * r + 0.25 * get(&bias.t, im); mag = 2 * mag + 1; }
    double e = fabs(get(&o.t, im) - r) / (1 + mag);
    if (e > worst) worst = e;
  }
  CHECKF(s && worst < (dt == TPU_DTYPE_F32 ? 1e-5 : 1e-2), "%s %s %lldx%lld ta=%d err=%g",
        with_bias ? "addmv" : "mv", tpu_dtype_name(dt), (long long)M, (long long)K, ta, worst);
  fr(&a); fr(&v); fr(&o); fr(&bias);
}

static void test_dot(void) {
  int64_t n = 1001, s2[1] = {2 * n}, s1[1] = {n};
  tt_t a = mk(TPU_DTYPE_F32, 1, s2, NULL), b = mk(TPU_DTYPE_F32, 1, s1, NULL);
  tt_t o = mk(TPU_DTYPE_F32, 0, NULL, NULL);
  fill(&a, 1, false); fill(&b, 1, false);
  a.t.sizes[0] = n;
  a.t.strides[0] = 2;
  tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
  bool s = ok(call_op("aten::dot", 2, args, 1, &o.t));
  double r = 0;
  for (int64_t i = 0; i < n; ++i) r += (double)((float*)a.buf)[2 * i] * ((float*)b.buf)[i];
  CHECKF(s && fabs(*(float*)o.buf - r) < 1e-4, "dot %g vs %g", *(float*)o.buf, r);
  /* integer dot */
  tt_t ia = mk(TPU_DTYPE_I32, 1, s1, NULL), ib = mk(TPU_DTYPE_I32, 1, s1, NULL);
  tt_t io = mk(TPU_DTYPE_I32, 0, NULL, NULL);
  int64_t ri = 0;
  for (int64_t i = 0; i < n; ++i) {
    ((int32_t*)ia.buf)[i] = (int32_t)(i % 7) - 3;
    ((int32_t*)ib.buf)[i] = (int32_t)(i % 5);
    ri += ((int32_t*)ia.buf)[i] * ((int32_t*)ib.buf)[i];
  }
  tpu_k_value_t iargs[2] = {vt(&ia.t), vt(&ib.t)};
  s = ok(call_op("aten::dot", 2, iargs, 1, &io.t));
  CHECKF(s && *(int32_t*)io.buf == ri, "int dot %d vs %lld", *(int32_t*)io.buf, (long long)ri);
  fr(&a); fr(&b); fr(&o); fr(&ia); fr(&ib); fr(&io);
}

static void test_errors(void) {
  int64_t s[2] = {3, 4}, s2[2] = {5, 2}, so[2] = {3, 2};
  tt_t a = mk(TPU_DTYPE_BOOL, 2, s, NULL), b = mk(TPU_DTYPE_BOOL, 2, s2, NULL), c = mk(TPU_DTYPE_BOOL, 2, so, NULL);
  tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
  tpu_status_t st = call_op("aten::mm", 2, args, 1, &c.t);
  CHECKF(tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED && strstr(tpu_status_message(st), "aten::mm") &&
            strstr(tpu_status_message(st), "bool"),
        "bool mm should be UNIMPLEMENTED: %s", tpu_status_message(st));
  tpu_status_free(st);
  a.t.dtype = b.t.dtype = c.t.dtype = TPU_DTYPE_F32;
  st = call_op("aten::mm", 2, args, 1, &c.t);
  CHECKF(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT, "shape mismatch should be INVALID_ARGUMENT: %s",
        tpu_status_message(st));
  tpu_status_free(st);
  fr(&a); fr(&b); fr(&c);
}

static void test_empty(void) {
  /* K == 0: addmm gives beta*bias; M == 0: nothing. */
  int64_t sa[2] = {3, 0}, sb[2] = {0, 4}, sc[2] = {3, 4}, sbias[1] = {4};
  tt_t a = mk(TPU_DTYPE_F32, 2, sa, NULL), b = mk(TPU_DTYPE_F32, 2, sb, NULL), c = mk(TPU_DTYPE_F32, 2, sc, NULL);
  tt_t bias = mk(TPU_DTYPE_F32, 1, sbias, NULL);
  fill(&bias, 1, false);
  a.t.data = NULL;
  b.t.data = NULL;
  tpu_k_value_t args[5] = {vt(&bias.t), vt(&a.t), vt(&b.t), vd(2.0), vd(1.0)};
  bool s = ok(call_op("aten::addmm", 5, args, 1, &c.t));
  double err = 0;
  for (int i = 0; i < 12; ++i) err += fabs(((float*)c.buf)[i] - 2.0 * ((float*)bias.buf)[i % 4]);
  CHECKF(s && err < 1e-6, "addmm K=0 err=%g", err);
  int64_t s0[2] = {0, 5}, s5[2] = {5, 4}, so[2] = {0, 4};
  tt_t e = mk(TPU_DTYPE_F32, 2, s0, NULL), f = mk(TPU_DTYPE_F32, 2, s5, NULL), g = mk(TPU_DTYPE_F32, 2, so, NULL);
  e.t.data = NULL;
  g.t.data = NULL;
  tpu_k_value_t args2[2] = {vt(&e.t), vt(&f.t)};
  CHECKF(ok(call_op("aten::mm", 2, args2, 1, &g.t)), "mm M=0");
  fr(&a); fr(&b); fr(&c); fr(&bias); fr(&e); fr(&f); fr(&g);
}

/* bf16 x bf16: the AVX512_BF16 kernels where the CPU has them (dot products
 * for few rows, packed pairs otherwise, GEMV along either B layout), their
 * tails (odd K, N % 32, M % 8) and the epilogue (alpha, beta, bias). */
static void run_bf16(void) {
  static const int64_t ms[] = {1, 2, 3, 7, 16, 64};
  static const int64_t kn[][2] = {{33, 17}, {129, 70}, {2050, 40}, {64, 96}};
  for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); ++i)
    for (size_t j = 0; j < sizeof(kn) / sizeof(kn[0]); ++j)
      for (int t = 0; t < 4; ++t)
        test_mm(TPU_DTYPE_BF16, ms[i], kn[j][0], kn[j][1], t & 1, t & 2, false, 1e-2);
  test_mm(TPU_DTYPE_BF16, 19, 45, 50, false, true, true, 1e-2);
  test_mm(TPU_DTYPE_BF16, 1, 45, 50, false, false, true, 1e-2);
  test_addmm(TPU_DTYPE_BF16, 3, 77, 40, 1, 0.5, 2.0, false, true);
  test_addmm(TPU_DTYPE_BF16, 37, 77, 40, 2, -1.0, 0.5, false, true);
  test_addmm(TPU_DTYPE_BF16, 37, 77, 40, 2, 1.0, 1.0, false, false);
  test_bmm(TPU_DTYPE_BF16, 3, 1, 70, 33, false, true);
  test_bmm(TPU_DTYPE_BF16, 3, 9, 70, 33, true, true);
  /* GEMV (M = 1) K tails: the 16/32-element loops of the bf16 kernels and
   * their 2048-element K blocks */
  static const int64_t ks[] = {2, 15, 16, 17, 31, 32, 47, 2047, 2049};
  for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); ++i)
    for (int t = 0; t < 2; ++t) test_mm(TPU_DTYPE_BF16, 1, ks[i], 9, false, t, false, 1e-2);
}

static void run_all(void) {
  static const int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {130, 257, 67}, {1, 300, 513}, {300, 200, 1},
                                     {2, 3, 40}, {64, 64, 64}, {97, 130, 300}, {1, 4100, 70}};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    int64_t M = sizes[i][0], K = sizes[i][1], N = sizes[i][2];
    for (int t = 0; t < 8; ++t) test_mm(TPU_DTYPE_F32, M, K, N, t & 1, t & 2, t & 4, 1e-5);
    test_mm(TPU_DTYPE_BF16, M, K, N, false, false, false, 1e-2);
    test_mm(TPU_DTYPE_BF16, M, K, N, true, true, false, 1e-2);
    test_mm(TPU_DTYPE_F16, M, K, N, false, true, false, 2e-3);
    test_mm(TPU_DTYPE_F64, M, K, N, true, false, true, 1e-12);
    test_mm(TPU_DTYPE_I32, M < 40 ? M : 40, K, N < 40 ? N : 40, false, false, false, 1e-9);
  }
  test_addmm(TPU_DTYPE_F32, 33, 70, 19, 1, 1.0, 1.0, false, true);
  test_addmm(TPU_DTYPE_F32, 130, 257, 67, 1, 0.5, 2.0, false, true);
  test_addmm(TPU_DTYPE_F32, 130, 257, 67, 2, -1.0, 0.5, false, false);
  test_addmm(TPU_DTYPE_F32, 130, 257, 67, 1, 1.0, 0.0, true, true);
  test_addmm(TPU_DTYPE_F32, 1, 257, 67, 1, 1.0, 0.0, true, true);
  test_addmm(TPU_DTYPE_F32, 3, 4, 5, 2, 1.0, 0.0, true, false);
  test_addmm(TPU_DTYPE_BF16, 50, 300, 70, 1, 1.0, 1.0, false, true);
  test_addmm(TPU_DTYPE_BF16, 1, 300, 70, 1, 1.0, 1.0, false, true);
  test_addmm_inplace();
  run_padded();
  run_bf16();
  setenv("TORCH_TPU_KERNEL_ISA", "avx2", 1);
  run_bf16();
  unsetenv("TORCH_TPU_KERNEL_ISA");
  test_bmm(TPU_DTYPE_F32, 3, 17, 33, 29, false, false);
  test_bmm(TPU_DTYPE_F32, 5, 64, 64, 64, true, false);
  test_bmm(TPU_DTYPE_F32, 4, 1, 64, 100, true, true);
  test_bmm(TPU_DTYPE_BF16, 2, 40, 50, 60, true, true);
  test_bmm(TPU_DTYPE_F32, 2, 40, 50, 60, false, true);
  test_bmm(TPU_DTYPE_I64, 2, 9, 11, 7, false, true);
  test_mv(TPU_DTYPE_F32, 70, 1030, false, false);
  test_mv(TPU_DTYPE_F32, 70, 1030, true, false);
  test_mv(TPU_DTYPE_BF16, 300, 5000, false, true);
  test_mv(TPU_DTYPE_F16, 33, 100, true, true);
  test_mv(TPU_DTYPE_F32, 5, 3, false, true);
  test_dot();
  test_errors();
  test_empty();
  test_bf16_products(96, 200, 80, false, false);
  test_bf16_products(64, 130, 70, true, true);
  test_bf16_products(130, 64, 100, false, true);
  test_bf16_products(32, 300, 128, false, false); /* too few rows: f32 */
}

/* addbmm: beta * self (broadcast) + alpha * sum_b A[b] @ B[b] against a double
 * reference; no batches: beta * self, and zeros (not NaN) for beta 0. */
static void test_addbmm(int dt, int64_t NB, int64_t M, int64_t K, int64_t N, int self_nd) {
  const bool is_int = dt == TPU_DTYPE_I64;
  int64_t sa[3] = {NB, M, K}, sb[3] = {NB, K, N}, sc[2] = {M, N}, ss[2] = {self_nd == 2 ? M : N, N};
  int tp[3] = {0, 2, 1};
  tt_t a = mk(dt, 3, sa, NULL), b = mk(dt, 3, sb, tp), c = mk(dt, 2, sc, NULL);
  tt_t self = mk(dt, self_nd, self_nd == 2 ? ss : ss + 1, NULL);
  fill(&a, 1, is_int); fill(&b, 1, is_int); fill(&self, 1, is_int);
  const double alpha = is_int ? 3 : -1.5, beta = is_int ? 2 : 0.5;
  tpu_k_value_t args[5] = {vt(&self.t), vt(&a.t), vt(&b.t), is_int ? vi(2) : vd(beta), is_int ? vi(3) : vd(alpha)};
  bool s = ok(call_op("aten::addbmm", 5, args, 1, &c.t));
  double worst = 0.0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t is[2] = {self_nd == 2 ? m : n, n}, ic[2] = {m, n};
      double r = 0.0, mag = 0.0;
      for (int64_t bi = 0; bi < NB; ++bi)
        for (int64_t k = 0; k < K; ++k) {
          int64_t ia[3] = {bi, m, k}, ib[3] = {bi, k, n};
          r += get(&a.t, ia) * get(&b.t, ib);
          mag += fabs(get(&a.t, ia) * get(&b.t, ib));
        }
      const double sv = get(&self.t, self_nd == 2 ? is : is + 1);
      const double want = alpha * r + beta * sv, err = fabs(get(&c.t, ic) - want) / (1.0 + fabs(alpha) * mag);
      if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
  const double tol = is_int ? 0.0 : dt == TPU_DTYPE_F64 ? 1e-14 : 1e-6;
  CHECKF(s && worst <= tol, "addbmm %s %lldx%lldx%lldx%lld err %g", tpu_dtype_name(dt), (long long)NB, (long long)M,
         (long long)K, (long long)N, worst);
  /* no batches */
  tpu_tensor_t a0 = a.t, b0 = b.t;
  a0.sizes[0] = b0.sizes[0] = 0;
  tpu_k_value_t z[5] = {vt(&self.t), vt(&a0), vt(&b0), is_int ? vi(2) : vd(2.0), is_int ? vi(3) : vd(NAN)};
  CHECK_OK(call_op("aten::addbmm", 5, z, 1, &c.t));
  int64_t i0[2] = {0, 0}, s0[2] = {0, 0};
  CHECK(get(&c.t, i0) == 2 * get(&self.t, self_nd == 2 ? s0 : s0 + 1));
  z[3] = is_int ? vi(0) : vd(0.0);
  CHECK_OK(call_op("aten::addbmm", 5, z, 1, &c.t));
  CHECK(get(&c.t, i0) == 0.0);
  /* mismatched batch counts */
  tpu_tensor_t b1 = b.t;
  b1.sizes[0] = NB + 1;
  tpu_k_value_t bad[5] = {vt(&self.t), vt(&a.t), vt(&b1), vd(1.0), vd(1.0)};
  CHECK_STATUS(call_op("aten::addbmm", 5, bad, 1, &c.t), TPU_STATUS_INVALID_ARGUMENT, "batches");
  fr(&a); fr(&b); fr(&c); fr(&self);
}

static void run_addbmm(void) {
  test_addbmm(TPU_DTYPE_F32, 5, 5, 5, 10, 2);   /* plain loops */
  test_addbmm(TPU_DTYPE_F32, 3, 40, 50, 60, 1); /* packed GEMM */
  test_addbmm(TPU_DTYPE_F64, 4, 7, 9, 6, 2);
  test_addbmm(TPU_DTYPE_I64, 3, 4, 5, 6, 1);
}

int main(void) {
  if (!tku_start(2)) return 1;
  run_all();
  run_addbmm();
  tpu_threadpool_destroy(g_pool);
  g_pool = NULL;
  /* Single-threaded and portable paths. */
  test_mm(TPU_DTYPE_F32, 130, 257, 67, true, false, false, 1e-5);
  run_padded();
  setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);
  run_padded();
  test_mm(TPU_DTYPE_F32, 130, 257, 67, false, false, false, 1e-5);
  test_mm(TPU_DTYPE_F32, 130, 257, 67, true, true, true, 1e-5);
  test_mm(TPU_DTYPE_BF16, 70, 300, 50, false, true, false, 1e-2);
  test_mm(TPU_DTYPE_F16, 1, 300, 50, false, true, false, 2e-3);
  test_mv(TPU_DTYPE_BF16, 300, 5000, false, true);
  test_addmm(TPU_DTYPE_F32, 130, 257, 67, 1, 0.5, 2.0, false, true);
  run_addbmm();
  unsetenv("TORCH_TPU_KERNEL_ISA");
  return TEST_REPORT();
}
