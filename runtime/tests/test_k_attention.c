/* test_k_attention.c - tpu::sdpa_fwd / tpu::sdpa_bwd against a naive
 * double-precision reference: causal (L < S and L > S), bool and additive
 * masks with broadcasting and fully masked rows, GQA, decode (L = 1, and a
 * few rows per kv head when no backward reads lse),
 * E != Ev, non-contiguous inputs, float32/bfloat16/float16, the AVX2 and
 * the portable paths, and argument errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { return tku_urand(&g_rng); } /* [-1, 1) */

static tt_t mk(int dtype, int ndim, const int64_t* sizes, const int* perm) {
  return tku_alloc(dtype, ndim, sizes, perm, 1, 64);
}


static char* ep4(const tpu_tensor_t* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t idx[4] = {a, b, c, d}, off = 0;
  int lead = 4 - t->ndim;
  for (int k = 0; k < t->ndim; ++k) off += (t->sizes[k] == 1 ? 0 : idx[k + lead]) * t->strides[k];
  return (char*)t->data + off * (int64_t)tpu_dtype_size(t->dtype);
}
static double g4(const tpu_tensor_t* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return tpu_ku_load_f64(ep4(t, a, b, c, d), t->dtype);
}
static void fill(tt_t* x) {
  int64_t* s = x->t.sizes;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) tpu_ku_store_f64(ep4(&x->t, a, b, c, d), x->t.dtype, urand() * 1.5);
}

/* ---- reference -------------------------------------------------------------------- */

typedef struct {
  const char* name;
  int dt;
  int64_t B, Hq, Hkv, L, S, E, Ev;
  bool causal;
  int mask;         /* 0 none, 1 bool [L, S], 2 float [B, 1, L, S], 3 bool [B, Hq, 1, S] */
  bool dead_rows;   /* mask out every key of some rows */
  bool permute_q;   /* q stored as [B, L, H, E] */
  double scale;     /* 0: default */
  bool bwd;
  bool inference;   /* for_backward = false: few rows per kv head take the decode kernel */
} case_t;

/* Scores with mask for (b, h, i) into s[0..S); returns the row's max. */
static double ref_scores(const case_t* c, const tt_t* q, const tt_t* k, const tt_t* m, int64_t b, int64_t h, int64_t i,
                         double scale, double* s) {
  const int64_t kvh = h / (c->Hq / c->Hkv);
  double mx = -INFINITY;
  for (int64_t j = 0; j < c->S; ++j) {
    double acc = 0;
    for (int64_t e = 0; e < c->E; ++e) acc += g4(&q->t, b, h, i, e) * g4(&k->t, b, kvh, j, e);
    acc *= scale;
    if (m) {
      double mv = g4(&m->t, b, h, i, j);
      if (m->t.dtype == TPU_DTYPE_BOOL) {
        if (mv == 0) acc = -INFINITY;
      } else {
        acc += mv;
      }
    }
    if (c->causal && j > i) acc = -INFINITY;
    s[j] = acc;
    if (acc > mx) mx = acc;
  }
  return mx;
}

static double tol_for(int dt) { return dt == TPU_DTYPE_F32 ? 2e-4 : dt == TPU_DTYPE_F16 ? 4e-3 : 2.5e-2; }

static void run_case(const case_t* c) {
  const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, L = c->L, S = c->S, E = c->E, Ev = c->Ev;
  int64_t qs[4] = {B, Hq, L, E}, ks[4] = {B, Hkv, S, E}, vs[4] = {B, Hkv, S, Ev}, os[4] = {B, Hq, L, Ev}, ls[3] = {B, Hq, L};
  int qperm[4] = {0, 2, 1, 3}, vperm[4] = {0, 2, 1, 3};
  tt_t q = mk(c->dt, 4, qs, c->permute_q ? qperm : NULL), k = mk(c->dt, 4, ks, NULL), v = mk(c->dt, 4, vs, vperm);
  fill(&q);
  fill(&k);
  fill(&v);
  tt_t m;
  bool has_m = c->mask != 0;
  if (c->mask == 1) {
    int64_t s[2] = {L, S};
    m = mk(TPU_DTYPE_BOOL, 2, s, NULL);
    for (int64_t i = 0; i < L * S; ++i) ((uint8_t*)m.buf)[i] = urand() > -0.6;
    if (c->dead_rows)
      for (int64_t j = 0; j < S; ++j) ((uint8_t*)m.buf)[(L / 2) * S + j] = 0;
  } else if (c->mask == 2) {
    int64_t s[4] = {B, 1, L, S};
    m = mk(TPU_DTYPE_F32, 4, s, NULL);
    for (int64_t i = 0; i < B * L * S; ++i) ((float*)m.buf)[i] = urand() > 0.8 ? -INFINITY : (float)urand();
    if (c->dead_rows)
      for (int64_t j = 0; j < S; ++j) ((float*)m.buf)[(L - 1) * S + j] = -INFINITY;
  } else if (c->mask == 3) {
    int64_t s[4] = {B, Hq, 1, S};
    m = mk(TPU_DTYPE_BOOL, 4, s, NULL);
    for (int64_t i = 0; i < B * Hq * S; ++i) ((uint8_t*)m.buf)[i] = urand() > -0.5;
  }
  const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)E);
  tt_t o = mk(c->dt, 4, os, NULL), lse = mk(TPU_DTYPE_F32, 3, ls, NULL);
  tpu_k_value_t a[7] = {vt(&q.t),     vt(&k.t),     vt(&v.t), has_m ? vt(&m.t) : vn(),
                        vb(c->causal), vd(scale), vb(!c->inference)};
  tpu_tensor_t outs[2] = {o.t, lse.t};
  bool st = ok(call_op("tpu::sdpa_fwd", c->inference ? 7 : 6, a, 2, outs));
  /* reference forward (and backward) */
  double* s = (double*)malloc(sizeof(double) * (size_t)(S + 1));
  double* p = (double*)malloc(sizeof(double) * (size_t)(S + 1));
  double* dp = (double*)malloc(sizeof(double) * (size_t)(S + 1));
  double *rdq = NULL, *rdk = NULL, *rdv = NULL, *rdb = NULL;
  tt_t go, dq, dk, dv, db;
  if (c->bwd) {
    go = mk(c->dt, 4, os, NULL);
    fill(&go);
    rdq = (double*)calloc((size_t)(B * Hq * L * E + 1), sizeof(double));
    rdk = (double*)calloc((size_t)(B * Hkv * S * E + 1), sizeof(double));
    rdv = (double*)calloc((size_t)(B * Hkv * S * Ev + 1), sizeof(double));
    rdb = (double*)calloc((size_t)(B * Hq * L * S + 1), sizeof(double));
  }
  double err_o = 0, err_l = 0;
  const double tol = tol_for(c->dt);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t kvh = h / (Hq / Hkv);
        double mx = ref_scores(c, &q, &k, has_m ? &m : NULL, b, h, i, scale, s);
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          p[j] = mx == -INFINITY ? 0.0 : exp(s[j] - mx);
          sum += p[j];
        }
        for (int64_t j = 0; j < S; ++j) p[j] = sum > 0 ? p[j] / sum : 0.0;
        double rl = sum > 0 ? mx + log(sum) : -INFINITY;
        double gl = ((float*)lse.buf)[(b * Hq + h) * L + i];
        if (!(rl == -INFINITY && gl == -INFINITY)) {
          double d = fabs(gl - rl);
          if (!(d <= err_l)) err_l = d;
        }
        for (int64_t e = 0; e < Ev; ++e) {
          double ro = 0;
          for (int64_t j = 0; j < S; ++j) ro += p[j] * g4(&v.t, b, kvh, j, e);
          double d = fabs(g4(&o.t, b, h, i, e) - ro) / (1.0 + fabs(ro));
          if (!(d <= err_o)) err_o = d;
        }
        if (!c->bwd) continue;
        /* dP = dO V^T, dS = P (dP - sum(P dP)) */
        double dsum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < Ev; ++e) acc += g4(&go.t, b, h, i, e) * g4(&v.t, b, kvh, j, e);
          dp[j] = acc;
          dsum += p[j] * acc;
        }
        for (int64_t j = 0; j < S; ++j) {
          double ds = p[j] * (dp[j] - dsum);
          rdb[((b * Hq + h) * L + i) * S + j] = ds;
          for (int64_t e = 0; e < E; ++e) {
            rdq[((b * Hq + h) * L + i) * E + e] += scale * ds * g4(&k.t, b, kvh, j, e);
            rdk[((b * Hkv + kvh) * S + j) * E + e] += scale * ds * g4(&q.t, b, h, i, e);
          }
          for (int64_t e = 0; e < Ev; ++e) rdv[((b * Hkv + kvh) * S + j) * Ev + e] += p[j] * g4(&go.t, b, h, i, e);
        }
      }
  CHECKF(st && err_o < tol && err_l < tol * 4, "%s: forward err out %.3g lse %.3g (tol %.3g)", c->name, err_o, err_l, tol);
  if (c->bwd) {
    dq = mk(c->dt, 4, qs, NULL);
    dk = mk(c->dt, 4, ks, NULL);
    dv = mk(c->dt, 4, vs, NULL);
    int64_t fs[4] = {B, Hq, L, S};
    db = mk(TPU_DTYPE_F32, 4, fs, NULL);
    for (int64_t i = 0; i < B * Hq * L * S; ++i) ((float*)db.buf)[i] = 12345.0f; /* must be overwritten */
    tpu_k_value_t ba[9] = {vt(&go.t), vt(&q.t), vt(&k.t), vt(&v.t), has_m ? vt(&m.t) : vn(),
                           vt(&o.t),  vt(&lse.t), vb(c->causal), vd(scale)};
    tpu_tensor_t bo[4] = {dq.t, dk.t, dv.t, db.t};
    if (!has_m) bo[3].dtype = TPU_DTYPE_INVALID;
    st = ok(call_op("tpu::sdpa_bwd", 9, ba, 4, bo));
    double eq = 0, ek = 0, ev = 0, eb = 0;
    /* gradient magnitudes vary; compare relative to the largest reference */
    double mq = 1e-3, mk_ = 1e-3, mv = 1e-3, mb = 1e-3;
    for (int64_t i = 0; i < B * Hq * L * E; ++i) mq = fmax(mq, fabs(rdq[i]));
    for (int64_t i = 0; i < B * Hkv * S * E; ++i) mk_ = fmax(mk_, fabs(rdk[i]));
    for (int64_t i = 0; i < B * Hkv * S * Ev; ++i) mv = fmax(mv, fabs(rdv[i]));
    for (int64_t i = 0; i < B * Hq * L * S; ++i) mb = fmax(mb, fabs(rdb[i]));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < L; ++i) {
          for (int64_t e = 0; e < E; ++e) eq = fmax(eq, fabs(g4(&dq.t, b, h, i, e) - rdq[((b * Hq + h) * L + i) * E + e]) / mq);
          if (has_m)
            for (int64_t j = 0; j < S; ++j)
              eb = fmax(eb, fabs(g4(&db.t, b, h, i, j) - rdb[((b * Hq + h) * L + i) * S + j]) / mb);
        }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t e = 0; e < E; ++e) ek = fmax(ek, fabs(g4(&dk.t, b, h, j, e) - rdk[((b * Hkv + h) * S + j) * E + e]) / mk_);
          for (int64_t e = 0; e < Ev; ++e) ev = fmax(ev, fabs(g4(&dv.t, b, h, j, e) - rdv[((b * Hkv + h) * S + j) * Ev + e]) / mv);
        }
    bool finite = true;
    for (int64_t i = 0; i < B * Hq * L * E; ++i) finite &= isfinite(tpu_ku_load_f64((char*)dq.buf + i * tpu_dtype_size(c->dt), c->dt)) != 0;
    CHECKF(st && finite && eq < tol && ek < tol && ev < tol && eb < tol,
           "%s: backward rel err dq %.3g dk %.3g dv %.3g dbias %.3g (tol %.3g)", c->name, eq, ek, ev, eb, tol);
    fr(&go); fr(&dq); fr(&dk); fr(&dv); fr(&db);
    free(rdq); free(rdk); free(rdv); free(rdb);
  }
  free(s); free(p); free(dp);
  fr(&q); fr(&k); fr(&v); fr(&o); fr(&lse);
  if (has_m) fr(&m);
}

static const case_t kCases[] = {
    /* name                 dt              B  Hq Hkv L    S    E   Ev  causal mask dead perm scale bwd */
    {"f32 plain",          TPU_DTYPE_F32,  2, 3, 3,  70,  90,  40, 24, false, 0, false, true, 0, true},
    {"f32 causal L<S gqa", TPU_DTYPE_F32,  1, 6, 2,  67,  130, 32, 32, true,  0, false, false, 0, true},
    {"f32 causal L>S",     TPU_DTYPE_F32,  1, 2, 2,  130, 67,  16, 16, true,  0, false, true, 0, true},
    {"f32 bool mask dead", TPU_DTYPE_F32,  2, 2, 1,  33,  70,  24, 24, false, 1, true,  false, 0, true},
    {"f32 add mask dead",  TPU_DTYPE_F32,  2, 2, 2,  65,  65,  8,  8,  false, 2, true,  false, 0.3, true},
    {"f32 head mask",      TPU_DTYPE_F32,  2, 4, 2,  5,   77,  20, 12, false, 3, false, false, 0, true},
    {"bf16 gqa",           TPU_DTYPE_BF16, 1, 4, 2,  69,  69,  64, 64, false, 0, false, true, 0, true},
    {"bf16 causal mask",   TPU_DTYPE_BF16, 1, 2, 2,  40,  40,  32, 32, true,  1, false, false, 0, true},
    {"f16 plain",          TPU_DTYPE_F16,  1, 2, 1,  20,  150, 16, 8,  false, 0, false, false, 0, true},
    {"f32 decode gqa",     TPU_DTYPE_F32,  2, 8, 2,  1,   200, 64, 64, false, 0, false, false, 0, true},
    {"f32 empty keys",     TPU_DTYPE_F32,  1, 2, 2,  3,   0,   8,  8,  false, 0, false, false, 0, true},
    {"f32 wide head",      TPU_DTYPE_F32,  1, 1, 1,  9,   17,  256, 200, true, 0, false, false, 0, true},
    /* decoding (one query row, <= 8 query heads per kv head): row-major scores; keys split over tasks when kv heads are few */
    {"f32 decode split",   TPU_DTYPE_F32,  1, 3, 1,  1,   1100, 64, 64, false, 2, false, false, 0, true},
    {"bf16 decode causal", TPU_DTYPE_BF16, 1, 2, 1,  1,   700, 32, 32, true,  0, false, false, 0, true},
    {"f16 decode dead",    TPU_DTYPE_F16,  1, 3, 1,  1,   600, 20, 12, false, 1, true,  true, 0, true},
    {"f32 decode tiny",    TPU_DTYPE_F32,  1, 9, 3,  1,   46,  64, 64, false, 2, false, true, 0, true},
    {"f32 decode head mask", TPU_DTYPE_F32, 2, 4, 2, 1,   531, 24, 40, false, 3, false, false, 0, false},
    /* inference (for_backward = false): a few rows per kv head on the decode kernel; the backward still
     * accepts its lse */
    {"f32 rows folded",    TPU_DTYPE_F32,  2, 3, 3,  3,   262, 64, 64, false, 2, true,  false, 0, true, true},
    {"f32 rows causal gqa", TPU_DTYPE_F32, 1, 4, 2,  4,   300, 32, 32, true,  0, false, true, 0, true, true},
    {"bf16 rows split",    TPU_DTYPE_BF16, 1, 2, 1,  3,   1100, 32, 16, false, 1, false, false, 0, true, true},
    {"f32 rows causal L>S", TPU_DTYPE_F32, 1, 1, 1,  8,   5,   16, 16, true,  1, true,  false, 0, false, true},
};

static void test_cases(void) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) run_case(&kCases[i]);
}

static void test_generic_isa(void) {
  setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);
  run_case(&kCases[1]);
  run_case(&kCases[4]);
  run_case(&kCases[6]);
  run_case(&kCases[12]);
  run_case(&kCases[14]);
  unsetenv("TORCH_TPU_KERNEL_ISA");
}

static void test_errors(void) {
  int64_t qs[4] = {1, 3, 4, 8}, ks[4] = {1, 2, 4, 8}, os[4] = {1, 3, 4, 8}, ls[3] = {1, 3, 4};
  tt_t q = mk(TPU_DTYPE_F32, 4, qs, NULL), k = mk(TPU_DTYPE_F32, 4, ks, NULL), o = mk(TPU_DTYPE_F32, 4, os, NULL),
       l = mk(TPU_DTYPE_F32, 3, ls, NULL);
  tpu_tensor_t outs[2] = {o.t, l.t};
  tpu_k_value_t a[6] = {vt(&q.t), vt(&k.t), vt(&k.t), vn(), vb(false), vd(0.5)};
  CHECK_STATUS(call_op("tpu::sdpa_fwd", 6, a, 2, outs), TPU_STATUS_INVALID_ARGUMENT, "multiple of the key/value heads");
  tt_t kb = mk(TPU_DTYPE_BF16, 4, ks, NULL);
  a[1] = vt(&q.t);
  a[2] = vt(&kb.t);
  CHECK_STATUS(call_op("tpu::sdpa_fwd", 6, a, 2, outs), TPU_STATUS_INVALID_ARGUMENT, "same dtype");
  int64_t ms[2] = {3, 4};
  tt_t m = mk(TPU_DTYPE_BOOL, 2, ms, NULL);
  a[2] = vt(&q.t);
  a[3] = vt(&m.t);
  CHECK_STATUS(call_op("tpu::sdpa_fwd", 6, a, 2, outs), TPU_STATUS_INVALID_ARGUMENT, "cannot be broadcast");
  tt_t qi = mk(TPU_DTYPE_I32, 4, qs, NULL);
  a[0] = a[1] = a[2] = vt(&qi.t);
  a[3] = vn();
  CHECK_STATUS(call_op("tpu::sdpa_fwd", 6, a, 2, outs), TPU_STATUS_UNIMPLEMENTED, "int32");
  fr(&q); fr(&k); fr(&o); fr(&l); fr(&kb); fr(&m); fr(&qi);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_cases);
  RUN_TEST(test_generic_isa);
  RUN_TEST(test_errors);
  return tku_finish();
}
