/* Tests for the random kernel family: Philox known answer, reproducibility,
 * independence from threading, distributions roughly right, argument checks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/kernels.h"

static tpu_status_t rcall(const char* name, const tpu_k_value_t* args, int nargs,
                          const tpu_tensor_t* out, uint64_t seed, uint64_t offset,
                          tpu_threadpool_t* pool) {
  return tku_call(name, nargs, args, 1, out, pool, seed, offset);
}

static void moments(const float* x, int n, double* mean, double* var) {
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) s += x[i];
  *mean = s / n;
  for (int i = 0; i < n; ++i) s2 += (x[i] - *mean) * (x[i] - *mean);
  *var = s2 / (n - 1);
}

static void test_entries_flagged(void) {
  const char* names[] = {"aten::uniform_", "aten::normal_", "aten::bernoulli_.float",
                         "aten::bernoulli_.Tensor", "aten::random_", "aten::random_.from",
                         "aten::random_.to", "aten::exponential_"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    const tpu_k_entry_t* e = tpu_k_lookup(names[i]);
    CHECK(e != NULL);
    if (e) CHECK((e->flags & TPU_K_FLAG_RANDOM) != 0);
  }
  float buf[6];
  int64_t sz[] = {2, 3};
  tpu_tensor_t t = T_(buf, TPU_DTYPE_F32, 2, sz, NULL);
  tpu_k_call_t c;
  memset(&c, 0, sizeof(c));
  c.num_outputs = 1;
  c.outputs = &t;
  CHECK(tpu_k_random_counters(&c) == 24);
}

static void test_philox_known_answer(void) {
  /* Random123 KAT: philox4x32-10, counter 0, key 0 ->
   * 6627e8d5 e169c58d bc57ac4c 9b00dbd8. random_.from(INT64_MIN, None) on
   * int64 returns INT64_MIN + (draw1 << 32 | draw0) for element 0. */
  int64_t v[2];
  tpu_tensor_t t = T1(v, TPU_DTYPE_I64, 2);
  tpu_k_value_t args[] = {vt(&t), vi(INT64_MIN), vn(), vn()};
  CHECK_OK(rcall("aten::random_.from", args, 4, &t, 0, 0, NULL));
  CHECK((uint64_t)v[0] - (uint64_t)INT64_MIN == 0xe169c58d6627e8d5ull);
}

static void test_reproducible(void) {
  enum { N = 100003 };
  float* a = malloc(N * 4);
  float* b = malloc(N * 4);
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, N), tb = T1(b, TPU_DTYPE_F32, N);
  tpu_k_value_t ua[] = {vt(&ta), vd(0.0), vd(1.0), vn()};
  tpu_k_value_t ub[] = {vt(&tb), vd(0.0), vd(1.0), vn()};
  CHECK_OK(rcall("aten::uniform_", ua, 4, &ta, 42, 1000, NULL));
  CHECK_OK(rcall("aten::uniform_", ub, 4, &tb, 42, 1000, g_pool));
  CHECK(memcmp(a, b, N * 4) == 0); /* same seed/offset, threads or not */
  CHECK_OK(rcall("aten::uniform_", ub, 4, &tb, 42, 1000 + 4 * N, g_pool));
  int same = 0;
  for (int i = 0; i < N; ++i) same += a[i] == b[i];
  CHECK(same < N / 1000); /* different offset: different numbers */
  CHECK_OK(rcall("aten::uniform_", ub, 4, &tb, 43, 1000, g_pool));
  same = 0;
  for (int i = 0; i < N; ++i) same += a[i] == b[i];
  CHECK(same < N / 1000); /* different seed */
  /* counter-based: offset + 5 shifts the sequence by 5 elements */
  CHECK_OK(rcall("aten::uniform_", ub, 4, &tb, 42, 1005, g_pool));
  CHECK(memcmp(a + 5, b, (N - 5) * 4) == 0);
  /* normal_ with a pool equals without */
  tpu_k_value_t na[] = {vt(&ta), vd(0.0), vd(1.0), vn()};
  tpu_k_value_t nb[] = {vt(&tb), vd(0.0), vd(1.0), vn()};
  CHECK_OK(rcall("aten::normal_", na, 4, &ta, 7, 0, NULL));
  CHECK_OK(rcall("aten::normal_", nb, 4, &tb, 7, 0, g_pool));
  CHECK(memcmp(a, b, N * 4) == 0);
  free(a);
  free(b);
}

static void test_uniform(void) {
  enum { N = 200000 };
  float* x = malloc(N * 4);
  tpu_tensor_t t = T1(x, TPU_DTYPE_F32, N);
  tpu_k_value_t args[] = {vt(&t), vd(-2.0), vd(3.0), vn()};
  CHECK_OK(rcall("aten::uniform_", args, 4, &t, 1, 0, g_pool));
  float lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < N; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  CHECK(lo >= -2.0f && hi < 3.0f && lo < -1.99f && hi > 2.99f);
  double m, v;
  moments(x, N, &m, &v);
  CHECK(fabs(m - 0.5) < 0.02);
  CHECK(fabs(v - 25.0 / 12.0) < 0.05);
  /* half types and f64 stay in [from, to) */
  const int dts[] = {TPU_DTYPE_F64, TPU_DTYPE_F16, TPU_DTYPE_BF16};
  for (int k = 0; k < 3; ++k) {
    _Alignas(8) unsigned char buf[4096 * 8];
    tpu_tensor_t th = T1(buf, dts[k], 4096);
    tpu_k_value_t ha[] = {vt(&th), vd(0.0), vd(1.0), vn()};
    CHECK_OK(rcall("aten::uniform_", ha, 4, &th, 3, 0, NULL));
    int bad = 0;
    double s = 0;
    for (int i = 0; i < 4096; ++i) {
      double y = tpu_ku_load_f64(buf + i * tpu_dtype_size(dts[k]), dts[k]);
      if (!(y >= 0.0 && y < 1.0)) bad++;
      s += y;
    }
    CHECK(bad == 0);
    CHECK(fabs(s / 4096 - 0.5) < 0.03);
  }
  /* from > to and integer self are rejected */
  tpu_k_value_t bad[] = {vt(&t), vd(1.0), vd(0.0), vn()};
  CHECK_STATUS(rcall("aten::uniform_", bad, 4, &t, 1, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "from");
  int64_t iv[4];
  tpu_tensor_t ti = T1(iv, TPU_DTYPE_I64, 4);
  tpu_k_value_t ia[] = {vt(&ti), vd(0.0), vd(1.0), vn()};
  CHECK_STATUS(rcall("aten::uniform_", ia, 4, &ti, 1, 0, NULL), TPU_STATUS_UNIMPLEMENTED, "aten::uniform_");
  CHECK_STATUS(rcall("aten::uniform_", ia, 4, &ti, 1, 0, NULL), TPU_STATUS_UNIMPLEMENTED, "int64");
  free(x);
}

static void test_normal_exponential(void) {
  enum { N = 200000 };
  float* x = malloc(N * 4);
  tpu_tensor_t t = T1(x, TPU_DTYPE_F32, N);
  tpu_k_value_t args[] = {vt(&t), vd(1.5), vd(2.0), vn()};
  CHECK_OK(rcall("aten::normal_", args, 4, &t, 11, 0, g_pool));
  double m, v;
  moments(x, N, &m, &v);
  CHECK(fabs(m - 1.5) < 0.03);
  CHECK(fabs(sqrt(v) - 2.0) < 0.03);
  int finite = 0, within = 0;
  for (int i = 0; i < N; ++i) {
    finite += isfinite(x[i]) != 0;
    within += fabs(x[i] - 1.5) < 2.0;
  }
  CHECK(finite == N);
  CHECK(fabs((double)within / N - 0.6827) < 0.01); /* one-sigma mass */
  tpu_k_value_t neg[] = {vt(&t), vd(0.0), vd(-1.0), vn()};
  CHECK_STATUS(rcall("aten::normal_", neg, 4, &t, 1, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "std");
  tpu_k_value_t ex[] = {vt(&t), vd(4.0), vn()};
  CHECK_OK(rcall("aten::exponential_", ex, 3, &t, 12, 0, g_pool));
  moments(x, N, &m, &v);
  int neg_count = 0;
  for (int i = 0; i < N; ++i) neg_count += !(x[i] >= 0.0f && isfinite(x[i]));
  CHECK(neg_count == 0);
  CHECK(fabs(m - 0.25) < 0.01);
  tpu_k_value_t ex0[] = {vt(&t), vd(0.0), vn()};
  CHECK_STATUS(rcall("aten::exponential_", ex0, 3, &t, 1, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "lambda");
  /* normal.Tensor_float: mean tensor, std float */
  float mean[1000], o[1000];
  for (int i = 0; i < 1000; ++i) mean[i] = (float)i;
  tpu_tensor_t tm = T1(mean, TPU_DTYPE_F32, 1000), to = T1(o, TPU_DTYPE_F32, 1000);
  tpu_k_value_t tf[] = {vt(&tm), vd(0.001), vn()};
  CHECK_OK(rcall("aten::normal.Tensor_float", tf, 3, &to, 5, 0, NULL));
  int bad = 0;
  for (int i = 0; i < 1000; ++i) bad += fabsf(o[i] - mean[i]) > 0.01f;
  CHECK(bad == 0);
  free(x);
}

static void test_bernoulli(void) {
  enum { N = 100000 };
  uint8_t* b = malloc(N);
  tpu_tensor_t tb = T1(b, TPU_DTYPE_BOOL, N);
  tpu_k_value_t args[] = {vt(&tb), vd(0.3), vn()};
  CHECK_OK(rcall("aten::bernoulli_.float", args, 3, &tb, 21, 0, g_pool));
  int ones = 0, other = 0;
  for (int i = 0; i < N; ++i) {
    ones += b[i] == 1;
    other += b[i] > 1;
  }
  CHECK(other == 0);
  CHECK(fabs((double)ones / N - 0.3) < 0.01);
  tpu_k_value_t bad[] = {vt(&tb), vd(1.5), vn()};
  CHECK_STATUS(rcall("aten::bernoulli_.float", bad, 3, &tb, 1, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "p");
  /* tensor p broadcast over rows: p = {0, 1, 0.5} */
  float p[3] = {0.0f, 1.0f, 0.5f};
  float o[3000];
  int64_t s3[] = {3}, s10003[] = {1000, 3};
  tpu_tensor_t tp = T_(p, TPU_DTYPE_F32, 1, s3, NULL), to = T_(o, TPU_DTYPE_F32, 2, s10003, NULL);
  tpu_k_value_t targs[] = {vt(&to), vt(&tp), vn()};
  CHECK_OK(rcall("aten::bernoulli_.Tensor", targs, 3, &to, 22, 0, NULL));
  int c0 = 0, c1 = 0, c2 = 0;
  for (int i = 0; i < 1000; ++i) {
    c0 += o[i * 3] != 0.0f;
    c1 += o[i * 3 + 1] == 1.0f;
    c2 += o[i * 3 + 2] == 1.0f;
  }
  CHECK(c0 == 0 && c1 == 1000 && c2 > 430 && c2 < 570);
  p[2] = -0.1f;
  CHECK_STATUS(rcall("aten::bernoulli_.Tensor", targs, 3, &to, 22, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "p_in");
  free(b);
}

static void test_random_ints(void) {
  enum { N = 50000 };
  int64_t* v = malloc(N * 8);
  tpu_tensor_t t = T1(v, TPU_DTYPE_I64, N);
  tpu_k_value_t to[] = {vt(&t), vi(10), vn()};
  CHECK_OK(rcall("aten::random_.to", to, 3, &t, 31, 0, g_pool));
  int counts[10] = {0}, bad = 0;
  for (int i = 0; i < N; ++i) {
    if (v[i] < 0 || v[i] >= 10) bad++;
    else counts[v[i]]++;
  }
  CHECK(bad == 0);
  for (int k = 0; k < 10; ++k) CHECK(counts[k] > 4500 && counts[k] < 5500);
  tpu_k_value_t fr[] = {vt(&t), vi(-5), vi(5), vn()};
  CHECK_OK(rcall("aten::random_.from", fr, 4, &t, 32, 0, g_pool));
  int64_t lo = 100, hi = -100;
  for (int i = 0; i < N; ++i) {
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
  }
  CHECK(lo == -5 && hi == 4);
  tpu_k_value_t inv[] = {vt(&t), vi(5), vi(5), vn()};
  CHECK_STATUS(rcall("aten::random_.from", inv, 4, &t, 1, 0, NULL), TPU_STATUS_INVALID_ARGUMENT, "from");
  /* default range: uint8 covers [0, 255]; float32 is [0, 2^24] integers */
  uint8_t* u = malloc(N);
  tpu_tensor_t tu = T1(u, TPU_DTYPE_U8, N);
  tpu_k_value_t ud[] = {vt(&tu), vn()};
  CHECK_OK(rcall("aten::random_", ud, 2, &tu, 33, 0, NULL));
  int umax = 0, umin = 255;
  for (int i = 0; i < N; ++i) {
    if (u[i] > umax) umax = u[i];
    if (u[i] < umin) umin = u[i];
  }
  CHECK(umax == 255 && umin == 0);
  float* f = malloc(N * 4);
  tpu_tensor_t tf = T1(f, TPU_DTYPE_F32, N);
  tpu_k_value_t fd[] = {vt(&tf), vn()};
  CHECK_OK(rcall("aten::random_", fd, 2, &tf, 34, 0, NULL));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (f[i] < 0 || f[i] > 16777216.0f || f[i] != floorf(f[i])) bad++;
  CHECK(bad == 0);
  free(u);
  free(f);
  free(v);
}

static void test_layouts_and_empty(void) {
  /* a transposed self is fully written */
  float buf[12];
  for (int i = 0; i < 12; ++i) buf[i] = NAN;
  int64_t sz[] = {3, 4}, st[] = {1, 3};
  tpu_tensor_t t = T_(buf, TPU_DTYPE_F32, 2, sz, st);
  tpu_k_value_t args[] = {vt(&t), vd(5.0), vd(6.0), vn()};
  CHECK_OK(rcall("aten::uniform_", args, 4, &t, 1, 0, NULL));
  int bad = 0;
  for (int i = 0; i < 12; ++i) bad += !(buf[i] >= 5.0f && buf[i] < 6.0f);
  CHECK(bad == 0);
  /* zero-size: no data touched */
  int64_t s0[] = {0, 4};
  tpu_tensor_t tz = T_(NULL, TPU_DTYPE_F32, 2, s0, NULL);
  tpu_k_value_t za[] = {vt(&tz), vd(0.0), vd(1.0), vn()};
  CHECK_OK(rcall("aten::normal_", za, 4, &tz, 1, 0, g_pool));
  tpu_k_value_t zb[] = {vt(&tz), vd(0.5), vn()};
  CHECK_OK(rcall("aten::bernoulli_.float", zb, 3, &tz, 1, 0, g_pool));
  /* 0-dim */
  double d = -1;
  tpu_tensor_t t0 = T_(&d, TPU_DTYPE_F64, 0, NULL, NULL);
  tpu_k_value_t da[] = {vt(&t0), vd(0.0), vd(1.0), vn()};
  CHECK_OK(rcall("aten::uniform_", da, 4, &t0, 9, 0, NULL));
  CHECK(d >= 0.0 && d < 1.0);
}

int main(void) {
  if (!tku_start(4)) return 1;
  RUN_TEST(test_entries_flagged);
  RUN_TEST(test_philox_known_answer);
  RUN_TEST(test_reproducible);
  RUN_TEST(test_uniform);
  RUN_TEST(test_normal_exponential);
  RUN_TEST(test_bernoulli);
  RUN_TEST(test_random_ints);
  RUN_TEST(test_layouts_and_empty);
  return tku_finish();
}
