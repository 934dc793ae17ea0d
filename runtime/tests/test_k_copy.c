/* Tests for kutil (conversions, iterator) and the copy kernel family
 * (copy_, fill_, zero_). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/kernels.h"

/* ---- kutil ------------------------------------------------------------------- */

static void test_dtype_basics(void) {
  CHECK(tpu_dtype_size(TPU_DTYPE_F32) == 4 && tpu_dtype_size(TPU_DTYPE_BF16) == 2 &&
        tpu_dtype_size(TPU_DTYPE_I64) == 8 && tpu_dtype_size(TPU_DTYPE_BOOL) == 1 &&
        tpu_dtype_size(TPU_DTYPE_INVALID) == 0);
  CHECK_STREQ(tpu_dtype_name(TPU_DTYPE_BF16), "bfloat16");
  CHECK_STREQ(tpu_dtype_name(TPU_DTYPE_U8), "uint8");
  CHECK_STREQ(tpu_dtype_name(TPU_DTYPE_BOOL), "bool");
  CHECK(tpu_dtype_is_floating(TPU_DTYPE_F16) && !tpu_dtype_is_floating(TPU_DTYPE_I32));
  int64_t sz[] = {2, 1, 3}, st[] = {3, 99, 1}, stt[] = {1, 1, 2};
  tpu_tensor_t a = T_(NULL, TPU_DTYPE_F32, 3, sz, st), b = T_(NULL, TPU_DTYPE_F32, 3, sz, stt);
  CHECK(tpu_tensor_numel(&a) == 6);
  CHECK(tpu_tensor_is_contiguous(&a));
  CHECK(!tpu_tensor_is_contiguous(&b));
  tpu_tensor_t s = T_(NULL, TPU_DTYPE_F32, 0, NULL, NULL);
  CHECK(tpu_tensor_numel(&s) == 1 && tpu_tensor_is_contiguous(&s));
}

static void test_half_conversions(void) {
  /* f16 */
  CHECK(tpu_ku_f32_to_f16(1.0f) == 0x3C00);
  CHECK(tpu_ku_f32_to_f16(-2.0f) == 0xC000);
  CHECK(tpu_ku_f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(tpu_ku_f32_to_f16(65519.0f) == 0x7BFF); /* below the halfway point */
  CHECK(tpu_ku_f32_to_f16(65520.0f) == 0x7C00); /* ties to even -> inf */
  CHECK(tpu_ku_f32_to_f16(INFINITY) == 0x7C00 && tpu_ku_f32_to_f16(-INFINITY) == 0xFC00);
  uint16_t hn = tpu_ku_f32_to_f16(NAN);
  CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
  CHECK(tpu_ku_f32_to_f16(5.9604644775390625e-8f) == 0x0001); /* smallest subnormal */
  CHECK(tpu_ku_f32_to_f16(2.98023223876953125e-8f) == 0x0000); /* half of it: tie -> even (0) */
  CHECK(tpu_ku_f32_to_f16(8.94069671630859375e-8f) == 0x0002); /* 1.5 ulp: tie -> even (2) */
  CHECK(tpu_ku_f32_to_f16(-0.0f) == 0x8000);
  CHECK(tpu_ku_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00);           /* tie -> even */
  CHECK(tpu_ku_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02);           /* tie -> even (up) */
  CHECK(tpu_ku_f32_to_f16(1.0f + 1.0f / 2048 + 1e-7f) == 0x3C01);   /* above tie */
  CHECK(tpu_ku_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
  CHECK(tpu_ku_f16_to_f32(0x03FF) == 6.097555160522461e-05f);
  CHECK(tpu_ku_f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(isinf(tpu_ku_f16_to_f32(0xFC00)) && tpu_ku_f16_to_f32(0xFC00) < 0);
  CHECK(isnan(tpu_ku_f16_to_f32(0x7E00)));
  CHECK(signbit(tpu_ku_f16_to_f32(0x8000)));
  /* every finite half round-trips */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
    if (tpu_ku_f32_to_f16(tpu_ku_f16_to_f32((uint16_t)h)) != h) bad++;
  }
  CHECK(bad == 0);
  /* bf16 */
  CHECK(tpu_ku_f32_to_bf16(1.0f) == 0x3F80);
  CHECK(tpu_ku_f32_to_bf16(1.0f + 1.0f / 256) == 0x3F80);      /* tie -> even */
  CHECK(tpu_ku_f32_to_bf16(1.0f + 3.0f / 256) == 0x3F82);      /* tie -> even (up) */
  CHECK(tpu_ku_f32_to_bf16(3.4e38f) == 0x7F80);                /* rounds to inf */
  CHECK((tpu_ku_f32_to_bf16(NAN) & 0x7F80) == 0x7F80 && (tpu_ku_f32_to_bf16(NAN) & 0x7F));
}

static void test_store_conversions(void) {
  int32_t i32;
  uint8_t u8;
  int8_t i8;
  int64_t i64;
  tpu_ku_store_f64(&i32, TPU_DTYPE_I32, -2.7);
  CHECK(i32 == -2);
  tpu_ku_store_f64(&i32, TPU_DTYPE_I32, NAN);
  CHECK(i32 == 0);
  tpu_ku_store_f64(&i64, TPU_DTYPE_I64, 1e300);
  CHECK(i64 == INT64_MAX);
  tpu_ku_store_f64(&i64, TPU_DTYPE_I64, -INFINITY);
  CHECK(i64 == INT64_MIN);
  tpu_ku_store_f64(&u8, TPU_DTYPE_U8, -1.5);
  CHECK(u8 == 255);
  tpu_ku_store_f64(&u8, TPU_DTYPE_U8, 300.9);
  CHECK(u8 == 44);
  tpu_ku_store_f64(&i8, TPU_DTYPE_I8, 200.0);
  CHECK(i8 == -56);
  tpu_ku_store_f64(&u8, TPU_DTYPE_BOOL, NAN);
  CHECK(u8 == 1);
  tpu_ku_store_f64(&u8, TPU_DTYPE_BOOL, -0.0);
  CHECK(u8 == 0);
  tpu_ku_store_i64(&i32, TPU_DTYPE_I32, ((int64_t)1 << 32) + 5);
  CHECK(i32 == 5);
  uint16_t h;
  tpu_ku_store_f64(&h, TPU_DTYPE_F16, 0.1);
  CHECK(h == tpu_ku_f32_to_f16(0.1f));
  CHECK(tpu_ku_load_i64(&(double){-3.9}, TPU_DTYPE_F64) == -3);
  CHECK(tpu_ku_load_f64(&(uint8_t){7}, TPU_DTYPE_BOOL) == 1.0);
}

static void test_args_and_errors(void) {
  tpu_k_value_t args[] = {vi(3), vd(-2.9), vb(true), {.kind = TPU_K_STRING, .v.s = "floor"},
                          {.kind = TPU_K_NONE}};
  tpu_k_call_t c;
  memset(&c, 0, sizeof(c));
  c.op = "aten::test";
  c.num_args = 5;
  c.args = args;
  CHECK(tpu_ku_double(&c, 0, 0) == 3.0 && tpu_ku_double(&c, 1, 0) == -2.9 &&
        tpu_ku_double(&c, 2, 0) == 1.0 && tpu_ku_double(&c, 4, 7.5) == 7.5 &&
        tpu_ku_double(&c, 9, 1.5) == 1.5);
  CHECK(tpu_ku_int(&c, 1, 0) == -2 && tpu_ku_int(&c, 2, 0) == 1 && tpu_ku_int(&c, 4, 11) == 11);
  CHECK(tpu_ku_bool(&c, 0, false) && tpu_ku_bool(&c, 4, true));
  CHECK_STREQ(tpu_ku_string(&c, 3, NULL), "floor");
  CHECK_STREQ(tpu_ku_string(&c, 4, "none"), "none");
  CHECK(tpu_ku_is_none(&c, 4) && tpu_ku_is_none(&c, 7) && !tpu_ku_is_none(&c, 0));
  CHECK(tpu_ku_tensor(&c, 0) == NULL);
  int32_t d = -1;
  CHECK_OK(tpu_ku_wrap_dim(&c, -1, 3, &d));
  CHECK(d == 2);
  CHECK_OK(tpu_ku_wrap_dim(&c, 0, 0, &d));
  CHECK(d == 0);
  CHECK_OK(tpu_ku_wrap_dim(&c, -1, 0, &d));
  CHECK(d == 0);
  CHECK_STATUS(tpu_ku_wrap_dim(&c, 3, 3, &d), TPU_STATUS_OUT_OF_RANGE, "aten::test");
  CHECK_STATUS(tpu_ku_unsupported_dtype(&c, TPU_DTYPE_BF16), TPU_STATUS_UNIMPLEMENTED,
               "aten::test: dtype bfloat16 is not supported");
  CHECK_STATUS(TPU_KU_INVALID(&c, "bad %d", 5), TPU_STATUS_INVALID_ARGUMENT, "aten::test: bad 5");
}

/* Iterator: records every element's pointers in iteration order. */
typedef struct {
  int n;
  int count;
  char* seen[3][4096];
} rec_t;

static void rec_fn(void* vctx, char** ptrs, const int64_t* strides, int64_t count) {
  rec_t* r = (rec_t*)vctx;
  for (int64_t i = 0; i < count; ++i) {
    for (int k = 0; k < r->n; ++k) r->seen[k][r->count] = ptrs[k] + i * strides[k];
    r->count++;
  }
}

static void test_iterator(void) {
  static rec_t r1, r2;
  /* [3,4,5] output, [4,1] broadcast input, transposed [3,4,5] input. */
  float out[60], a[4], b[60];
  int64_t s345[] = {3, 4, 5}, s41[] = {4, 1}, bst[] = {1, 3, 12};
  tpu_tensor_t to = T_(out, TPU_DTYPE_F32, 3, s345, NULL);
  tpu_tensor_t ta = T_(a, TPU_DTYPE_F32, 2, s41, NULL);
  tpu_tensor_t tb = T_(b, TPU_DTYPE_F32, 3, s345, bst);
  const tpu_tensor_t* ops[] = {&to, &ta, &tb};
  tpu_ku_iter_t it;
  CHECK_OK(tpu_ku_iter_init(&it, 3, ops, "test"));
  CHECK(it.numel == 60);
  memset(&r1, 0, sizeof(r1));
  r1.n = 3;
  tpu_ku_iter_run(&it, 0, 60, rec_fn, &r1);
  CHECK(r1.count == 60);
  /* every output element exactly once, with the matching input elements */
  int seen[60] = {0}, bad = 0;
  for (int e = 0; e < 60; ++e) {
    int64_t off = (r1.seen[0][e] - (char*)out) / 4;
    if (off < 0 || off >= 60) {
      bad++;
      continue;
    }
    seen[off]++;
    int i = (int)(off / 20), j = (int)(off / 5 % 4), k = (int)(off % 5);
    if (r1.seen[1][e] != (char*)&a[j]) bad++;
    if (r1.seen[2][e] != (char*)&b[i * 1 + j * 3 + k * 12]) bad++;
  }
  for (int e = 0; e < 60; ++e)
    if (seen[e] != 1) bad++;
  CHECK(bad == 0);
  /* any split of the range gives the same sequence (mid-row starts) */
  memset(&r2, 0, sizeof(r2));
  r2.n = 3;
  int64_t cuts[] = {0, 1, 7, 13, 14, 33, 59, 60};
  for (int c = 0; c + 1 < 8; ++c) tpu_ku_iter_run(&it, cuts[c], cuts[c + 1], rec_fn, &r2);
  CHECK(r2.count == 60);
  CHECK(memcmp(r1.seen, r2.seen, sizeof(r1.seen)) == 0);
  /* contiguous operands coalesce into one dim */
  int64_t s2345[] = {2, 3, 4, 5};
  float x[120], y[120];
  tpu_tensor_t tx = T_(x, TPU_DTYPE_F32, 4, s2345, NULL), ty = T_(y, TPU_DTYPE_F32, 4, s2345, NULL);
  const tpu_tensor_t* ops2[] = {&tx, &ty};
  CHECK_OK(tpu_ku_iter_init(&it, 2, ops2, "test"));
  CHECK(it.ndim == 1 && it.sizes[0] == 120 && it.strides[0][0] == 4 && it.strides[1][0] == 4);
  /* a transposed output is walked in memory order */
  int64_t s23[] = {2, 3}, st23[] = {1, 2};
  tpu_tensor_t tt = T_(x, TPU_DTYPE_F32, 2, s23, st23);
  const tpu_tensor_t* ops3[] = {&tt};
  CHECK_OK(tpu_ku_iter_init(&it, 1, ops3, "test"));
  CHECK(it.ndim == 1 && it.sizes[0] == 6 && it.strides[0][0] == 4);
  /* broadcast errors name the op and the shapes */
  int64_t s3[] = {3};
  tpu_tensor_t bad3 = T_(a, TPU_DTYPE_F32, 1, s3, NULL);
  const tpu_tensor_t* ops4[] = {&to, &bad3};
  CHECK_STATUS(tpu_ku_iter_init(&it, 2, ops4, "myop"), TPU_STATUS_INVALID_ARGUMENT,
               "myop: operand 1 of shape [3] cannot be broadcast to shape [3, 4, 5]");
  /* zero-size and 0-dim */
  int64_t s0[] = {4, 0};
  tpu_tensor_t tz = T_(NULL, TPU_DTYPE_F32, 2, s0, NULL);
  const tpu_tensor_t* ops5[] = {&tz};
  CHECK_OK(tpu_ku_iter_init(&it, 1, ops5, "test"));
  CHECK(it.numel == 0);
  memset(&r1, 0, sizeof(r1));
  r1.n = 1;
  tpu_ku_iter_run(&it, 0, 10, rec_fn, &r1);
  tpu_ku_iter_parallel(&it, g_pool, 1, rec_fn, &r1);
  CHECK(r1.count == 0);
  tpu_tensor_t t0 = T_(x, TPU_DTYPE_F32, 0, NULL, NULL);
  const tpu_tensor_t* ops6[] = {&t0, &t0};
  CHECK_OK(tpu_ku_iter_init(&it, 2, ops6, "test"));
  CHECK(it.numel == 1 && it.ndim == 1 && it.sizes[0] == 1);
}

static void count_fn(void* vctx, char** ptrs, const int64_t* strides, int64_t count) {
  (void)vctx;
  for (int64_t i = 0; i < count; ++i) __atomic_fetch_add((int32_t*)(ptrs[0] + i * strides[0]), 1, __ATOMIC_RELAXED);
}

/* iter_parallel over a pool visits every element exactly once, whatever the
 * chunking (grain 1 .. larger than the tensor), including strided layouts. */
static void test_iter_parallel(void) {
  enum { R = 37, C = 1001 };
  int32_t* cnt = calloc((size_t)R * C * 2, 4);
  int64_t sz[] = {R, C}, st[] = {1, 2 * R}; /* transposed with gaps */
  tpu_tensor_t t = T_(cnt, TPU_DTYPE_I32, 2, sz, st);
  const tpu_tensor_t* ops[] = {&t};
  tpu_ku_iter_t it;
  CHECK_OK(tpu_ku_iter_init(&it, 1, ops, "test"));
  const int64_t grains[] = {1, 7, 1000, 5000, 100000};
  for (int g = 0; g < 5; ++g) {
    memset(cnt, 0, (size_t)R * C * 2 * 4);
    tpu_ku_iter_parallel(&it, g_pool, grains[g], count_fn, NULL);
    int bad = 0;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) {
        if (cnt[i + j * 2 * R] != 1) bad++;
        if (cnt[i + j * 2 * R + R] != 0) bad++; /* the gaps stay untouched */
      }
    CHECK(bad == 0);
  }
  free(cnt);
}

/* ---- copy_ ------------------------------------------------------------------- */

static void test_copy_same_dtype(void) {
  enum { N = 100000 };
  float* a = malloc(N * 4);
  float* b = malloc(N * 4);
  for (int i = 0; i < N; ++i) a[i] = (float)i * 0.5f;
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, N), tb = T1(b, TPU_DTYPE_F32, N);
  tpu_k_value_t args[] = {vt(&tb), vt(&ta), vb(false)};
  CHECK_OK(call_op_pool("aten::copy_", args, 3, &tb, g_pool));
  CHECK(memcmp(a, b, N * 4) == 0);
  /* self-copy is a no-op */
  tpu_k_value_t self[] = {vt(&ta), vt(&ta), vb(false)};
  CHECK_OK(call_op1("aten::copy_", self, 3, &ta));
  CHECK(a[123] == 61.5f);
  /* transposed source [300, 333] (strides [1, 300]) into contiguous */
  int64_t sz[] = {300, 333}, st[] = {1, 300};
  tpu_tensor_t src = T_(a, TPU_DTYPE_F32, 2, sz, st), dst = T_(b, TPU_DTYPE_F32, 2, sz, NULL);
  tpu_k_value_t t2[] = {vt(&dst), vt(&src), vb(false)};
  CHECK_OK(call_op_pool("aten::copy_", t2, 3, &dst, g_pool));
  int bad = 0;
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 333; ++j)
      if (b[i * 333 + j] != a[j * 300 + i]) bad++;
  CHECK(bad == 0);
  /* broadcast a row into a matrix, int16 */
  int16_t row[7] = {1, -2, 3, -4, 5, -6, 7}, mat[5 * 7];
  int64_t s57[] = {5, 7}, s7[] = {7};
  tpu_tensor_t tr = T_(row, TPU_DTYPE_I16, 1, s7, NULL), tm = T_(mat, TPU_DTYPE_I16, 2, s57, NULL);
  tpu_k_value_t t3[] = {vt(&tm), vt(&tr), vb(false)};
  CHECK_OK(call_op1("aten::copy_", t3, 3, &tm));
  bad = 0;
  for (int i = 0; i < 35; ++i)
    if (mat[i] != row[i % 7]) bad++;
  CHECK(bad == 0);
  /* non-broadcastable */
  int64_t s6[] = {6};
  tpu_tensor_t t6 = T_(row, TPU_DTYPE_I16, 1, s6, NULL);
  tpu_k_value_t t4[] = {vt(&tm), vt(&t6), vb(false)};
  CHECK_STATUS(call_op1("aten::copy_", t4, 3, &tm), TPU_STATUS_INVALID_ARGUMENT, "aten::copy_");
  free(a);
  free(b);
}

static void test_copy_conversions(void) {
  /* f32 -> bf16 / f16 round to nearest even; back is exact */
  float f[6] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65520.0f, -0.0f, 1e-8f, NAN};
  uint16_t h[6];
  float back[6];
  tpu_tensor_t tf = T1(f, TPU_DTYPE_F32, 6), th = T1(h, TPU_DTYPE_BF16, 6), tback = T1(back, TPU_DTYPE_F32, 6);
  tpu_k_value_t a1[] = {vt(&th), vt(&tf), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a1, 3, &th));
  CHECK(h[0] == 0x3F80 && h[1] == 0x3F82 && h[3] == 0x8000);
  tpu_k_value_t a2[] = {vt(&tback), vt(&th), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a2, 3, &tback));
  CHECK(back[0] == 1.0f && back[1] == 1.0f + 2.0f / 128 && isnan(back[5]));
  tpu_tensor_t th16 = T1(h, TPU_DTYPE_F16, 6);
  tpu_k_value_t a3[] = {vt(&th16), vt(&tf), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a3, 3, &th16));
  CHECK(h[0] == 0x3C04 && h[2] == 0x7C00 && h[3] == 0x8000 && h[4] == 0x0000);
  CHECK((h[5] & 0x7C00) == 0x7C00 && (h[5] & 0x3FF));
  /* float -> int truncates; out of range saturates then wraps; NaN -> 0 */
  double d[6] = {-2.9, 2.9, 1e30, -1e30, NAN, 255.5};
  int32_t i32[6];
  uint8_t u8[6];
  tpu_tensor_t td = T1(d, TPU_DTYPE_F64, 6), ti = T1(i32, TPU_DTYPE_I32, 6), tu = T1(u8, TPU_DTYPE_U8, 6);
  tpu_k_value_t a4[] = {vt(&ti), vt(&td), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a4, 3, &ti));
  CHECK(i32[0] == -2 && i32[1] == 2 && i32[2] == -1 && i32[3] == 0 && i32[4] == 0 && i32[5] == 255);
  tpu_k_value_t a5[] = {vt(&tu), vt(&td), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a5, 3, &tu));
  CHECK(u8[0] == 254 && u8[1] == 2 && u8[5] == 255);
  /* to bool: != 0, NaN is true */
  uint8_t bo[6];
  tpu_tensor_t tb = T1(bo, TPU_DTYPE_BOOL, 6);
  tpu_k_value_t a6[] = {vt(&tb), vt(&td), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a6, 3, &tb));
  CHECK(bo[0] == 1 && bo[4] == 1);
  double z[2] = {0.0, -0.0};
  tpu_tensor_t tz = T1(z, TPU_DTYPE_F64, 2), tb2 = T1(bo, TPU_DTYPE_BOOL, 2);
  tpu_k_value_t a7[] = {vt(&tb2), vt(&tz), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a7, 3, &tb2));
  CHECK(bo[0] == 0 && bo[1] == 0);
  /* int64 -> int8 wraps; int64 -> f64 exact for 2^53; int -> f16 */
  int64_t big[3] = {300, -129, ((int64_t)1 << 53)};
  int8_t i8[3];
  double bd[3];
  tpu_tensor_t tbig = T1(big, TPU_DTYPE_I64, 3), ti8 = T1(i8, TPU_DTYPE_I8, 3), tbd = T1(bd, TPU_DTYPE_F64, 3);
  tpu_k_value_t a8[] = {vt(&ti8), vt(&tbig), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a8, 3, &ti8));
  CHECK(i8[0] == 44 && i8[1] == 127);
  tpu_k_value_t a9[] = {vt(&tbd), vt(&tbig), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a9, 3, &tbd));
  CHECK(bd[2] == 9007199254740992.0);
  /* every dtype pair on a value all can hold (0..3, strided source) */
  const int dts[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_F16, TPU_DTYPE_BF16, TPU_DTYPE_I64,
                     TPU_DTYPE_I32, TPU_DTYPE_I16, TPU_DTYPE_I8, TPU_DTYPE_U8, TPU_DTYPE_BOOL};
  int bad = 0;
  for (int s = 0; s < 10; ++s)
    for (int t = 0; t < 10; ++t) {
      _Alignas(8) unsigned char sbuf[8 * 8], dbuf[4 * 8];
      int64_t n4[] = {4}, st2[] = {2};
      for (int i = 0; i < 8; ++i)
        tpu_ku_store_i64(sbuf + i * tpu_dtype_size(dts[s]), dts[s], dts[s] == TPU_DTYPE_BOOL ? (i / 2) % 2 : i / 2);
      tpu_tensor_t ts = T_(sbuf, dts[s], 1, n4, st2), tt = T_(dbuf, dts[t], 1, n4, NULL);
      tpu_k_value_t aa[] = {vt(&tt), vt(&ts), vb(false)};
      tpu_status_t st = call_op1("aten::copy_", aa, 3, &tt);
      if (st) {
        bad++;
        tpu_status_free(st);
        continue;
      }
      for (int i = 0; i < 4; ++i) {
        int64_t want = dts[s] == TPU_DTYPE_BOOL ? i % 2 : i;
        if (dts[t] == TPU_DTYPE_BOOL) want = want != 0;
        if (tpu_ku_load_f64(dbuf + i * tpu_dtype_size(dts[t]), dts[t]) != (double)want) bad++;
      }
    }
  CHECK(bad == 0);
  /* zero-size and 0-dim copies */
  int64_t s0[] = {0};
  tpu_tensor_t e1 = T_(NULL, TPU_DTYPE_F32, 1, s0, NULL), e2 = T_(NULL, TPU_DTYPE_F16, 1, s0, NULL);
  tpu_k_value_t a10[] = {vt(&e1), vt(&e2), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a10, 3, &e1));
  double sc = 2.5;
  float out3[3];
  tpu_tensor_t tsc = T_(&sc, TPU_DTYPE_F64, 0, NULL, NULL), to3 = T1(out3, TPU_DTYPE_F32, 3);
  tpu_k_value_t a11[] = {vt(&to3), vt(&tsc), vb(false)};
  CHECK_OK(call_op1("aten::copy_", a11, 3, &to3));
  CHECK(out3[0] == 2.5f && out3[2] == 2.5f);
}

/* ---- fill_ / zero_ ------------------------------------------------------------- */

static void test_fill_zero(void) {
  float f[10];
  int64_t s25[] = {2, 5}, st[] = {1, 2};
  tpu_tensor_t tf = T_(f, TPU_DTYPE_F32, 2, s25, st);
  tpu_k_value_t a1[] = {vt(&tf), vd(1.25)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a1, 2, &tf));
  int bad = 0;
  for (int i = 0; i < 10; ++i)
    if (f[i] != 1.25f) bad++;
  CHECK(bad == 0);
  uint16_t h[4];
  tpu_tensor_t th = T1(h, TPU_DTYPE_BF16, 4);
  tpu_k_value_t a2[] = {vt(&th), vd(1.0 + 1.0 / 256)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a2, 2, &th));
  CHECK(h[0] == 0x3F80 && h[3] == 0x3F80);
  int64_t i64[3];
  tpu_tensor_t ti = T1(i64, TPU_DTYPE_I64, 3);
  tpu_k_value_t a3[] = {vt(&ti), vi(INT64_MAX)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a3, 2, &ti));
  CHECK(i64[0] == INT64_MAX && i64[2] == INT64_MAX);
  tpu_k_value_t a4[] = {vt(&ti), vd(-7.9)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a4, 2, &ti));
  CHECK(i64[1] == -7);
  uint8_t b[5];
  tpu_tensor_t tb = T1(b, TPU_DTYPE_BOOL, 5);
  tpu_k_value_t a5[] = {vt(&tb), vb(true)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a5, 2, &tb));
  CHECK(b[0] == 1 && b[4] == 1);
  /* fill_.Tensor with a 0-dim value of another dtype */
  double v = -3.5;
  tpu_tensor_t tv = T_(&v, TPU_DTYPE_F64, 0, NULL, NULL);
  tpu_k_value_t a6[] = {vt(&tf), vt(&tv)};
  CHECK_OK(call_op1("aten::fill_.Tensor", a6, 2, &tf));
  CHECK(f[0] == -3.5f && f[9] == -3.5f);
  tpu_k_value_t a7[] = {vt(&ti), vt(&tv)};
  CHECK_OK(call_op1("aten::fill_.Tensor", a7, 2, &ti));
  CHECK(i64[0] == -3);
  tpu_k_value_t a8[] = {vt(&tf), vt(&tf)};
  CHECK_STATUS(call_op1("aten::fill_.Tensor", a8, 2, &tf), TPU_STATUS_INVALID_ARGUMENT, "0-dimension");
  /* zero_, large and parallel */
  enum { N = 200003 };
  double* big = malloc(N * 8);
  for (int i = 0; i < N; ++i) big[i] = 1.0;
  tpu_tensor_t tbig = T1(big, TPU_DTYPE_F64, N);
  tpu_k_value_t a9[] = {vt(&tbig)};
  CHECK_OK(call_op_pool("aten::zero_", a9, 1, &tbig, g_pool));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (big[i] != 0.0 || signbit(big[i])) bad++;
  CHECK(bad == 0);
  tpu_k_value_t a10[] = {vt(&tbig), vd(-0.0)};
  CHECK_OK(call_op_pool("aten::fill_.Scalar", a10, 2, &tbig, g_pool));
  CHECK(signbit(big[N - 1]) && big[N - 1] == 0.0);
  free(big);
  /* zero-size: data NULL must not be touched */
  int64_t s0[] = {3, 0};
  tpu_tensor_t tz = T_(NULL, TPU_DTYPE_F32, 2, s0, NULL);
  tpu_k_value_t a11[] = {vt(&tz), vd(1.0)};
  CHECK_OK(call_op1("aten::fill_.Scalar", a11, 2, &tz));
  tpu_k_value_t a12[] = {vt(&tz)};
  CHECK_OK(call_op1("aten::zero_", a12, 1, &tz));
  /* rejected dtype names the op */
  tpu_tensor_t tbad = T1(f, 42, 2);
  tpu_k_value_t a13[] = {vt(&tbad)};
  CHECK_STATUS(call_op1("aten::zero_", a13, 1, &tbad), TPU_STATUS_UNIMPLEMENTED, "aten::zero_");
}

int main(void) {
  if (!tku_start(3)) return 1;
  RUN_TEST(test_dtype_basics);
  RUN_TEST(test_half_conversions);
  RUN_TEST(test_store_conversions);
  RUN_TEST(test_args_and_errors);
  RUN_TEST(test_iterator);
  RUN_TEST(test_iter_parallel);
  RUN_TEST(test_copy_same_dtype);
  RUN_TEST(test_copy_conversions);
  RUN_TEST(test_fill_zero);
  return tku_finish();
}
