/* test_k_moe.c - tpu::ragged_dot, tpu::ragged_dot_rhs_grad, aten::_grouped_mm
 * and tpu::gather_bmm against naive loops, and their data-dependent errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 1234567ull;

/* Relative error of out[m, n] against sum_k lhs[m, k] * rhs[g(m), k, n]
 * (in double), g(m) the group of row m; rows past sum(sizes) must be 0. */
static double ragged_err(const tpu_tensor_t* a, const tpu_tensor_t* b, const int64_t* sizes, int64_t G,
                         const tpu_tensor_t* c) {
  int64_t M = a->sizes[0], K = a->sizes[1], N = b->sizes[2];
  double worst = 0.0;
  int64_t row = 0;
  for (int64_t g = 0; g <= G; ++g) {
    int64_t end = g < G ? row + sizes[g] : M;
    for (; row < end; ++row)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K && g < G; ++k) {
          int64_t ia[2] = {row, k}, ib[3] = {g, k, n};
          double p = get(a, ia) * get(b, ib);
          s += p;
          mag += fabs(p);
        }
        int64_t ic[2] = {row, n};
        double err = fabs(get(c, ic) - s) / (1.0 + mag);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      }
  }
  return worst;
}

/* `nk`: rhs stored as [G, N, K] (the nn.Linear layout), viewed as [G, K, N]. */
static void test_ragged(int dt, const int64_t* sizes, int64_t G, int64_t K, int64_t N, bool nk, bool i32,
                        double tol) {
  int64_t M = 0;
  for (int64_t g = 0; g < G; ++g) M += sizes[g];
  int perm[3] = {0, 2, 1};
  int64_t sa[2] = {M, K}, sb[3] = {G, K, N}, sc[2] = {M, N};
  tt_t a = tku_alloc(dt, 2, sa, NULL, 1, 16), b = tku_alloc(dt, 3, sb, nk ? perm : NULL, 1, 16);
  tt_t c = tku_alloc(dt, 2, sc, NULL, 1, 16);
  tku_fill(&a, &g_rng, 1.0, false);
  tku_fill(&b, &g_rng, 1.0, false);
  int32_t s32[64];
  for (int64_t g = 0; g < G; ++g) s32[g] = (int32_t)sizes[g];
  tpu_tensor_t gs = i32 ? T1(s32, TPU_DTYPE_I32, G) : T1((void*)sizes, TPU_DTYPE_I64, G);
  tpu_k_value_t args[3] = {vt(&a.t), vt(&b.t), vt(&gs)};
  bool s = ok(call_op("tpu::ragged_dot", 3, args, 1, &c.t));
  double err = ragged_err(&a.t, &b.t, sizes, G, &c.t);
  CHECKF(s && err < tol, "ragged_dot %s G=%lld M=%lld K=%lld N=%lld nk=%d err=%g", tpu_dtype_name(dt),
         (long long)G, (long long)M, (long long)K, (long long)N, nk, err);
  fr(&a); fr(&b); fr(&c);
}

/* _grouped_mm 2-D x 3-D with offs: rows past offs[-1] are zeroed. */
static void test_grouped_mm_rows(void) {
  int64_t sizes[3] = {2, 0, 5}, M = 9, K = 16, N = 12, G = 3;
  int32_t offs[3] = {2, 2, 7};
  int64_t sa[2] = {M, K}, sb[3] = {G, K, N}, sc[2] = {M, N};
  tt_t a = tku_alloc(TPU_DTYPE_F32, 2, sa, NULL, 1, 16), b = tku_alloc(TPU_DTYPE_F32, 3, sb, NULL, 1, 16);
  tt_t c = tku_alloc(TPU_DTYPE_F32, 2, sc, NULL, 1, 16);
  tku_fill(&a, &g_rng, 1.0, false);
  tku_fill(&b, &g_rng, 1.0, false);
  for (int64_t i = 0; i < M * N; ++i) ((float*)c.t.data)[i] = NAN;
  tpu_tensor_t o = T1(offs, TPU_DTYPE_I32, G);
  tpu_k_value_t args[5] = {vt(&a.t), vt(&b.t), vt(&o), vn(), vn()};
  bool s = ok(call_op("aten::_grouped_mm", 5, args, 1, &c.t));
  double err = ragged_err(&a.t, &b.t, sizes, G, &c.t);
  CHECKF(s && err < 1e-5, "_grouped_mm rows err=%g", err);
  fr(&a); fr(&b); fr(&c);
}

/* rhs_grad: out[g] = lhs_g^T @ grad_g. */
static void test_rhs_grad(void) {
  int64_t sizes[4] = {3, 0, 70, 1}, G = 4, M = 74, K = 9, N = 11;
  int64_t sa[2] = {M, K}, sd[2] = {M, N}, sc[3] = {G, K, N};
  tt_t a = tku_alloc(TPU_DTYPE_F32, 2, sa, NULL, 1, 16), d = tku_alloc(TPU_DTYPE_F32, 2, sd, NULL, 1, 16);
  tt_t c = tku_alloc(TPU_DTYPE_F32, 3, sc, NULL, 1, 16);
  tku_fill(&a, &g_rng, 1.0, false);
  tku_fill(&d, &g_rng, 1.0, false);
  tpu_tensor_t gs = T1(sizes, TPU_DTYPE_I64, G);
  tpu_k_value_t args[3] = {vt(&a.t), vt(&d.t), vt(&gs)};
  bool s = ok(call_op("tpu::ragged_dot_rhs_grad", 3, args, 1, &c.t));
  double worst = 0.0;
  int64_t r0 = 0;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0.0, mag = 0.0;
        for (int64_t r = r0; r < r0 + sizes[g]; ++r) {
          int64_t ia[2] = {r, k}, id[2] = {r, n};
          acc += get(&a.t, ia) * get(&d.t, id);
          mag += fabs(get(&a.t, ia) * get(&d.t, id));
        }
        int64_t ic[3] = {g, k, n};
        double err = fabs(get(&c.t, ic) - acc) / (1.0 + mag);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      }
    r0 += sizes[g];
  }
  CHECKF(s && worst < 1e-5, "ragged_dot_rhs_grad err=%g", worst);
  fr(&a); fr(&d); fr(&c);
}

/* A sum other than M, a negative size, or decreasing offs: INVALID_ARGUMENT
 * from run(), naming the op. */
static void test_errors(void) {
  float a[6 * 4] = {0}, b[2 * 4 * 3] = {0}, c[6 * 3];
  int64_t sa[2] = {6, 4}, sb[3] = {2, 4, 3}, sc[2] = {6, 3};
  tpu_tensor_t ta = T_(a, TPU_DTYPE_F32, 2, sa, NULL), tb = T_(b, TPU_DTYPE_F32, 3, sb, NULL);
  tpu_tensor_t tc = T_(c, TPU_DTYPE_F32, 2, sc, NULL);
  int64_t bad[3][2] = {{2, 3}, {7, -1}, {4, 4}};
  for (int i = 0; i < 3; ++i) {
    tpu_tensor_t gs = T1(bad[i], TPU_DTYPE_I64, 2);
    tpu_k_value_t args[3] = {vt(&ta), vt(&tb), vt(&gs)};
    tpu_status_t s = call_op("tpu::ragged_dot", 3, args, 1, &tc);
    CHECKF(tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT &&
               strstr(tpu_status_message(s), "tpu::ragged_dot") != NULL,
           "ragged_dot bad sizes %d: %s", i, s ? tpu_status_message(s) : "OK");
    tpu_status_free(s);
  }
  int32_t offs[2] = {5, 3};
  tpu_tensor_t o = T1(offs, TPU_DTYPE_I32, 2);
  tpu_k_value_t args[5] = {vt(&ta), vt(&tb), vt(&o), vn(), vn()};
  tpu_status_t s = call_op("aten::_grouped_mm", 5, args, 1, &tc);
  CHECKF(tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT, "_grouped_mm decreasing offs: %s",
         s ? tpu_status_message(s) : "OK");
  tpu_status_free(s);
}

/* gather_bmm: out[s] = a[ids[s]] @ b[s] (gathered 0) or a[s] @ b[ids[s]]
 * (gathered 1), against the naive loop; `wt`: the gathered operand is a
 * transposed view (strided along K, the sgemm_tile path). */
static void test_gather_bmm(int dt, int gathered, int64_t E, int64_t M, int64_t K, int64_t N, const int64_t* ids,
                            int64_t S, bool wt, double tol) {
  int perm[3] = {0, 2, 1};
  int64_t sa[3] = {gathered == 0 ? E : S, M, K}, sb[3] = {gathered == 0 ? S : E, K, N}, sc[3] = {S, M, N};
  tt_t a = tku_alloc(dt, 3, sa, gathered == 0 && wt ? perm : NULL, 1, 16);
  tt_t b = tku_alloc(dt, 3, sb, gathered == 1 && wt ? perm : NULL, 1, 16);
  tt_t c = tku_alloc(dt, 3, sc, NULL, 1, 16);
  tku_fill(&a, &g_rng, 1.0, false);
  tku_fill(&b, &g_rng, 1.0, false);
  tpu_tensor_t it = T1((void*)ids, TPU_DTYPE_I64, S);
  tpu_k_value_t args[4] = {vt(&a.t), vt(&b.t), vt(&it), vi(gathered)};
  bool s = ok(call_op("tpu::gather_bmm", 4, args, 1, &c.t));
  double worst = 0.0;
  for (int64_t p = 0; p < S; ++p) {
    int64_t e = ids[p] < 0 ? ids[p] + E : ids[p];
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          int64_t ia[3] = {gathered == 0 ? e : p, m, k}, ib[3] = {gathered == 0 ? p : e, k, n};
          double v = get(&a.t, ia) * get(&b.t, ib);
          acc += v;
          mag += fabs(v);
        }
        int64_t ic[3] = {p, m, n};
        double err = fabs(get(&c.t, ic) - acc) / (1.0 + mag);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      }
  }
  CHECKF(s && worst < tol, "gather_bmm %s gathered=%d E=%lld M=%lld K=%lld N=%lld S=%lld wt=%d err=%g",
         tpu_dtype_name(dt), gathered, (long long)E, (long long)M, (long long)K, (long long)N, (long long)S, wt,
         worst);
  fr(&a); fr(&b); fr(&c);
}

/* An id out of [-E, E): OUT_OF_RANGE from run(), nothing written out of bounds. */
static void test_gather_bmm_errors(void) {
  float a[3 * 2 * 4] = {0}, b[2 * 4 * 1] = {0}, c[2 * 2 * 1];
  int64_t sa[3] = {3, 2, 4}, sb[3] = {2, 4, 1}, sc[3] = {2, 2, 1}, ids[2] = {1, 3};
  tpu_tensor_t ta = T_(a, TPU_DTYPE_F32, 3, sa, NULL), tb = T_(b, TPU_DTYPE_F32, 3, sb, NULL);
  tpu_tensor_t tc = T_(c, TPU_DTYPE_F32, 3, sc, NULL), ti = T1(ids, TPU_DTYPE_I64, 2);
  tpu_k_value_t args[4] = {vt(&ta), vt(&tb), vt(&ti), vi(0)};
  tpu_status_t s = call_op("tpu::gather_bmm", 4, args, 1, &tc);
  CHECKF(tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE && strstr(tpu_status_message(s), "index 3 is out of bounds"),
         "gather_bmm id 3 of 3: %s", s ? tpu_status_message(s) : "OK");
  tpu_status_free(s);
}

static void run_all(void) {
  int64_t decode[8] = {1, 0, 2, 3, 0, 1, 4, 1};
  int64_t big[4] = {70, 1, 130, 9};
  int64_t one[1] = {37};
  int64_t empty[3] = {0, 0, 0};
  test_ragged(TPU_DTYPE_F32, decode, 8, 64, 96, true, false, 1e-5);
  test_ragged(TPU_DTYPE_F32, decode, 8, 37, 45, false, true, 1e-5);
  test_ragged(TPU_DTYPE_BF16, decode, 8, 2100, 20, true, false, 1e-2); /* two K chunks */
  test_ragged(TPU_DTYPE_F16, big, 4, 130, 300, true, true, 2e-3);
  test_ragged(TPU_DTYPE_F32, big, 4, 33, 17, false, false, 1e-5);
  test_ragged(TPU_DTYPE_F32, one, 1, 1, 5, true, false, 1e-5);
  test_ragged(TPU_DTYPE_F32, empty, 3, 8, 8, true, false, 1e-5); /* M = 0 */
  test_grouped_mm_rows();
  test_rhs_grad();
  test_errors();
  int64_t ids8[8] = {3, 1, 3, 7, 0, 3, 5, -1};
  int64_t ids20[20] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 2, 1, 1, 1, 1, 1, 1, 1}; /* > MO_SMALL pairs of one */
  test_gather_bmm(TPU_DTYPE_F32, 0, 8, 48, 64, 1, ids8, 8, false, 1e-5);
  test_gather_bmm(TPU_DTYPE_F32, 0, 8, 48, 64, 1, ids8, 8, true, 1e-5);
  test_gather_bmm(TPU_DTYPE_BF16, 0, 3, 40, 4200, 2, ids20, 20, false, 1e-2); /* two K chunks */
  /* bf16, one vector per pair: 1, 3, 4 + 3 and 2 rows per expert (each row count of the
   * dot kernel), K with and without a whole unrolled step before its tail, 37 columns */
  int64_t ids13[13] = {2, 1, 2, 3, 2, 0, 1, 2, 2, 3, 1, 2, 2};
  test_gather_bmm(TPU_DTYPE_BF16, 0, 4, 37, 100, 1, ids13, 13, false, 1e-2);
  test_gather_bmm(TPU_DTYPE_BF16, 0, 4, 37, 300, 1, ids13, 13, false, 1e-2);
  test_gather_bmm(TPU_DTYPE_F16, 1, 8, 3, 37, 300, ids8, 8, true, 2e-3);
  test_gather_bmm(TPU_DTYPE_F32, 1, 3, 1, 33, 17, ids20, 20, false, 1e-5);
  test_gather_bmm_errors();
}

TPU_TEST_KERNEL_MAIN(run_all, g_pool)
