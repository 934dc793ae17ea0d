/* Tests for the elementwise kernel family: hand-built tpu_k_call_t over
 * malloc'd buffers, compared with scalar reference math. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/ew_vecmath.h"
#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/kernels.h"

/* ---- helpers ---------------------------------------------------------------- */

static uint32_t g_rng = 12345u;
static float frand(float lo, float hi) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)((g_rng >> 8) * (1.0 / 16777216.0));
}

/* ---- arithmetic --------------------------------------------------------------- */

static void test_add_contiguous_alpha(void) {
  enum { N = 1000 };
  float* a = malloc(N * 4);
  float* b = malloc(N * 4);
  float* o = malloc(N * 4);
  for (int i = 0; i < N; ++i) {
    a[i] = frand(-10, 10);
    b[i] = frand(-10, 10);
  }
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, N), tb = T1(b, TPU_DTYPE_F32, N), to = T1(o, TPU_DTYPE_F32, N);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb), vd(2.5)};
  /* alpha != 1: one fused multiply-add, like PyTorch's vec::fmadd */
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  int bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != fmaf(b[i], 2.5f, a[i])) bad++;
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::sub.Tensor", args, 3, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != fmaf(b[i], -2.5f, a[i])) bad++;
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::mul.Tensor", args, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != a[i] * b[i]) bad++;
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::div.Tensor", args, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != a[i] / b[i]) bad++;
  CHECK(bad == 0);
  /* .out overload: out tensor is also the last argument */
  tpu_k_value_t oargs[] = {vt(&ta), vt(&tb), vi(1), vt(&to)};
  CHECK_OK(call_op1("aten::add.out", oargs, 4, &to));
  CHECK(o[7] == a[7] + b[7]);
  free(a);
  free(b);
  free(o);
}

static void test_broadcast(void) {
  /* [4,5] + [5] and [4,1] * [1,5] -> [4,5] */
  float a[20], row[5], col[4], o[20];
  for (int i = 0; i < 20; ++i) a[i] = (float)i;
  for (int i = 0; i < 5; ++i) row[i] = 100.0f * (float)i;
  for (int i = 0; i < 4; ++i) col[i] = (float)(i + 1);
  int64_t s45[] = {4, 5}, s5[] = {5}, s41[] = {4, 1}, s15[] = {1, 5};
  tpu_tensor_t ta = T_(a, TPU_DTYPE_F32, 2, s45, NULL), tr = T_(row, TPU_DTYPE_F32, 1, s5, NULL);
  tpu_tensor_t to = T_(o, TPU_DTYPE_F32, 2, s45, NULL);
  tpu_k_value_t args[] = {vt(&ta), vt(&tr), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  int bad = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      if (o[i * 5 + j] != a[i * 5 + j] + row[j]) bad++;
  CHECK(bad == 0);
  tpu_tensor_t tc = T_(col, TPU_DTYPE_F32, 2, s41, NULL), tr2 = T_(row, TPU_DTYPE_F32, 2, s15, NULL);
  tpu_k_value_t args2[] = {vt(&tc), vt(&tr2)};
  CHECK_OK(call_op1("aten::mul.Tensor", args2, 2, &to));
  bad = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      if (o[i * 5 + j] != col[i] * row[j]) bad++;
  CHECK(bad == 0);
  /* not broadcastable: [4,5] + [4] */
  int64_t s4[] = {4};
  tpu_tensor_t tbad = T_(col, TPU_DTYPE_F32, 1, s4, NULL);
  tpu_k_value_t args3[] = {vt(&ta), vt(&tbad), vi(1)};
  CHECK_STATUS(call_op1("aten::add.Tensor", args3, 3, &to), TPU_STATUS_INVALID_ARGUMENT, "broadcast");
}

static void test_transposed_and_strided(void) {
  /* a is the transpose of a 5x4 buffer (shape [4,5], strides [1,4]); the
   * output is itself transposed in a second case. */
  float buf[20], b[20], o[20];
  for (int i = 0; i < 20; ++i) {
    buf[i] = (float)(i * 3 + 1);
    b[i] = (float)(i % 7) - 3.0f;
  }
  int64_t sz[] = {4, 5}, tst[] = {1, 4};
  tpu_tensor_t ta = T_(buf, TPU_DTYPE_F32, 2, sz, tst);
  tpu_tensor_t tb = T_(b, TPU_DTYPE_F32, 2, sz, NULL);
  tpu_tensor_t to = T_(o, TPU_DTYPE_F32, 2, sz, NULL);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op1("aten::mul.Tensor", args, 2, &to));
  int bad = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      if (o[i * 5 + j] != buf[j * 4 + i] * b[i * 5 + j]) bad++;
  CHECK(bad == 0);
  /* transposed output */
  tpu_tensor_t tot = T_(o, TPU_DTYPE_F32, 2, sz, tst);
  CHECK_OK(call_op1("aten::mul.Tensor", args, 2, &tot));
  bad = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      if (o[j * 4 + i] != buf[j * 4 + i] * b[i * 5 + j]) bad++;
  CHECK(bad == 0);
  /* every other element (stride 2) */
  float src[10], dst[5];
  for (int i = 0; i < 10; ++i) src[i] = (float)i;
  int64_t s5[] = {5}, st2[] = {2};
  tpu_tensor_t ts = T_(src, TPU_DTYPE_F32, 1, s5, st2), td = T1(dst, TPU_DTYPE_F32, 5);
  tpu_k_value_t a1[] = {vt(&ts)};
  CHECK_OK(call_op1("aten::neg", a1, 1, &td));
  CHECK(dst[0] == -0.0f && dst[1] == -2.0f && dst[4] == -8.0f);
}

static void test_zero_dim_and_scalars(void) {
  float a[3] = {1, 2, 3}, o[3];
  double s = 0.5;
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, 3), ts = T0(&s, TPU_DTYPE_F64), to = T1(o, TPU_DTYPE_F32, 3);
  tpu_k_value_t args[] = {vt(&ta), vt(&ts), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  CHECK(o[0] == 1.5f && o[2] == 3.5f);
  tpu_k_value_t args2[] = {vt(&ta), vi(4), vi(2)};
  CHECK_OK(call_op1("aten::add.Scalar", args2, 3, &to));
  CHECK(o[0] == 9.0f && o[1] == 10.0f);
  tpu_k_value_t args3[] = {vt(&ta), vd(0.25)};
  CHECK_OK(call_op1("aten::mul.Scalar", args3, 2, &to));
  CHECK(o[0] == 0.25f && o[2] == 0.75f);
  /* 0-dim output */
  float x = 3.0f, y;
  tpu_tensor_t tx = T0(&x, TPU_DTYPE_F32), ty = T0(&y, TPU_DTYPE_F32);
  tpu_k_value_t a4[] = {vt(&tx), vt(&tx)};
  CHECK_OK(call_op1("aten::mul.Tensor", a4, 2, &ty));
  CHECK(y == 9.0f);
  /* pow.Scalar: Scalar self, Tensor exponent */
  tpu_k_value_t a5[] = {vd(2.0), vt(&ta)};
  CHECK_OK(call_op1("aten::pow.Scalar", a5, 2, &to));
  CHECK(o[0] == 2.0f && o[1] == 4.0f && o[2] == 8.0f);
  /* integer tensor + float scalar -> float output */
  int64_t ia[3] = {1, 2, 3};
  tpu_tensor_t tia = T1(ia, TPU_DTYPE_I64, 3);
  tpu_k_value_t a6[] = {vt(&tia), vd(0.5), vi(1)};
  CHECK_OK(call_op1("aten::add.Scalar", a6, 3, &to));
  CHECK(o[0] == 1.5f && o[2] == 3.5f);
}

static void test_zero_size(void) {
  int64_t sz[] = {0, 5}, s5[] = {5};
  float b[5] = {0};
  tpu_tensor_t ta = T_(NULL, TPU_DTYPE_F32, 2, sz, NULL), tb = T_(b, TPU_DTYPE_F32, 1, s5, NULL);
  tpu_tensor_t to = T_(NULL, TPU_DTYPE_F32, 2, sz, NULL);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  tpu_k_value_t a1[] = {vt(&ta)};
  CHECK_OK(call_op1("aten::exp", a1, 1, &to));
  CHECK_OK(call_op1("aten::gelu", a1, 1, &to));
  tpu_tensor_t tob = T_(NULL, TPU_DTYPE_BOOL, 2, sz, NULL);
  CHECK_OK(call_op1("aten::eq.Tensor", args, 2, &tob));
}

static void test_half_rounding(void) {
  /* bf16: 1 + 2^-8 is a tie -> even (1.0); (1 + 2^-7) + 2^-8 -> 1 + 2^-6 */
  uint16_t a[2] = {0x3F80, 0x3F81}, b[2] = {0x3B80, 0x3B80}, o[2];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_BF16, 2), tb = T1(b, TPU_DTYPE_BF16, 2), to = T1(o, TPU_DTYPE_BF16, 2);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  CHECK(o[0] == 0x3F80);
  CHECK(o[1] == 0x3F82);
  /* f16: 1 + 2^-11 tie -> 1.0; (1 + 2^-10) + 2^-11 -> 1 + 2^-9 */
  uint16_t ha[2] = {0x3C00, 0x3C01}, hb[2] = {0x1000, 0x1000}, ho[2];
  tpu_tensor_t tha = T1(ha, TPU_DTYPE_F16, 2), thb = T1(hb, TPU_DTYPE_F16, 2), tho = T1(ho, TPU_DTYPE_F16, 2);
  tpu_k_value_t hargs[] = {vt(&tha), vt(&thb), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", hargs, 3, &tho));
  CHECK(ho[0] == 0x3C00);
  CHECK(ho[1] == 0x3C02);
  /* f16 overflow -> inf, and mixed f16 + f32 -> f32 output */
  uint16_t big[1] = {0x7BFF}; /* 65504 */
  tpu_tensor_t tbig = T1(big, TPU_DTYPE_F16, 1), tho1 = T1(ho, TPU_DTYPE_F16, 1);
  tpu_k_value_t bargs[] = {vt(&tbig), vt(&tbig), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", bargs, 3, &tho1));
  CHECK(ho[0] == 0x7C00);
  float f[1] = {0.25f}, fo[1];
  tpu_tensor_t tf = T1(f, TPU_DTYPE_F32, 1), tfo = T1(fo, TPU_DTYPE_F32, 1);
  tpu_k_value_t margs[] = {vt(&tbig), vt(&tf), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", margs, 3, &tfo));
  CHECK(fo[0] == 65504.25f);
  /* bf16 exp vs float reference rounded to bf16 */
  uint16_t xe[4], oe[4];
  float xs[4] = {-1.5f, 0.0f, 0.75f, 3.0f};
  for (int i = 0; i < 4; ++i) xe[i] = tpu_ku_f32_to_bf16(xs[i]);
  tpu_tensor_t txe = T1(xe, TPU_DTYPE_BF16, 4), toe = T1(oe, TPU_DTYPE_BF16, 4);
  tpu_k_value_t eargs[] = {vt(&txe)};
  CHECK_OK(call_op1("aten::exp", eargs, 1, &toe));
  int bad = 0;
  for (int i = 0; i < 4; ++i) {
    uint16_t want = tpu_ku_f32_to_bf16(expf(tpu_ku_bf16_to_f32(xe[i])));
    if (oe[i] != want) bad++;
  }
  CHECK(bad == 0);
}

static void test_inplace_aliasing(void) {
  enum { N = 777 };
  float* x = malloc(N * 4);
  float* y = malloc(N * 4);
  float* ref = malloc(N * 4);
  for (int i = 0; i < N; ++i) {
    x[i] = frand(-2, 2);
    y[i] = frand(-2, 2);
    ref[i] = fmaf(y[i], 3.0f, x[i]);
  }
  tpu_tensor_t tx = T1(x, TPU_DTYPE_F32, N), ty = T1(y, TPU_DTYPE_F32, N);
  tpu_k_value_t args[] = {vt(&tx), vt(&ty), vi(3)};
  CHECK_OK(call_op1("aten::add_.Tensor", args, 3, &tx));
  int bad = 0;
  for (int i = 0; i < N; ++i)
    if (x[i] != ref[i]) bad++;
  CHECK(bad == 0);
  /* x.mul_(x): both inputs alias the output */
  for (int i = 0; i < N; ++i) ref[i] = x[i] * x[i];
  tpu_k_value_t a2[] = {vt(&tx), vt(&tx)};
  CHECK_OK(call_op1("aten::mul_.Tensor", a2, 2, &tx));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (x[i] != ref[i]) bad++;
  CHECK(bad == 0);
  /* in-place unary and in-place with a dtype change on load (bf16 self) */
  for (int i = 0; i < N; ++i) ref[i] = expf(x[i] * 0.1f);
  tpu_k_value_t a3[] = {vt(&tx), vd(0.1)};
  CHECK_OK(call_op1("aten::mul_.Scalar", a3, 2, &tx));
  tpu_k_value_t a4[] = {vt(&tx)};
  CHECK_OK(call_op1("aten::exp_", a4, 1, &tx));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (!close_f(x[i], ref[i], 1e-6, 0)) bad++;
  CHECK(bad == 0);
  /* addcmul_ / addcdiv_ / lerp_ in place */
  float s[4] = {1, 2, 3, 4}, t1[4] = {1, 1, 2, 2}, t2[4] = {2, 4, 8, 16};
  tpu_tensor_t ts = T1(s, TPU_DTYPE_F32, 4), tt1 = T1(t1, TPU_DTYPE_F32, 4), tt2 = T1(t2, TPU_DTYPE_F32, 4);
  tpu_k_value_t a5[] = {vt(&ts), vt(&tt1), vt(&tt2), vd(0.5)};
  CHECK_OK(call_op1("aten::addcmul_", a5, 4, &ts));
  CHECK(s[0] == 2.0f && s[1] == 4.0f && s[2] == 11.0f && s[3] == 20.0f);
  CHECK_OK(call_op1("aten::addcdiv_", a5, 4, &ts));
  CHECK(s[0] == 2.25f && s[1] == 4.125f && s[2] == 11.125f && s[3] == 20.0625f);
  float e[4] = {10, 10, 10, 10};
  tpu_tensor_t te = T1(e, TPU_DTYPE_F32, 4);
  tpu_k_value_t a6[] = {vt(&ts), vt(&te), vd(0.25)};
  float before = s[0];
  CHECK_OK(call_op1("aten::lerp_.Scalar", a6, 3, &ts));
  CHECK(s[0] == before + 0.25f * (10.0f - before));
  free(x);
  free(y);
  free(ref);
}

static void test_rejected_dtypes(void) {
  int64_t i[2] = {1, 2}, o[2];
  tpu_tensor_t ti = T1(i, TPU_DTYPE_I64, 2), to = T1(o, TPU_DTYPE_I64, 2);
  tpu_k_value_t a1[] = {vt(&ti)};
  CHECK_STATUS(call_op1("aten::exp", a1, 1, &to), TPU_STATUS_UNIMPLEMENTED, "aten::exp");
  CHECK_STATUS(call_op1("aten::exp", a1, 1, &to), TPU_STATUS_UNIMPLEMENTED, "int64");
  float f[2] = {1, 2}, fo[2];
  tpu_tensor_t tf = T1(f, TPU_DTYPE_F32, 2), tfo = T1(fo, TPU_DTYPE_F32, 2);
  tpu_k_value_t a2[] = {vt(&tf), vt(&tf)};
  CHECK_STATUS(call_op1("aten::bitwise_and.Tensor", a2, 2, &tfo), TPU_STATUS_UNIMPLEMENTED,
               "aten::bitwise_and.Tensor: dtype float32");
  tpu_tensor_t tbad = T1(f, 99, 2);
  tpu_k_value_t a3[] = {vt(&tbad), vt(&tf), vi(1)};
  CHECK_STATUS(call_op1("aten::add.Tensor", a3, 3, &tfo), TPU_STATUS_UNIMPLEMENTED, "aten::add.Tensor");
  /* a bad rounding mode / approximate string */
  tpu_k_value_t a4[] = {vt(&tf), vt(&tf), vs("round")};
  CHECK_STATUS(call_op1("aten::div.Tensor_mode", a4, 3, &tfo), TPU_STATUS_INVALID_ARGUMENT, "rounding_mode");
  tpu_k_value_t a5[] = {vt(&tf), vs("fast")};
  CHECK_STATUS(call_op1("aten::gelu", a5, 2, &tfo), TPU_STATUS_INVALID_ARGUMENT, "approximate");
  /* integer pow with a negative Scalar exponent */
  tpu_k_value_t a6[] = {vt(&ti), vi(-2)};
  CHECK_STATUS(call_op1("aten::pow.Tensor_Scalar", a6, 2, &to), TPU_STATUS_INVALID_ARGUMENT, "negative");
}

/* ---- integers ----------------------------------------------------------------- */

static void test_integer_ops(void) {
  int64_t a[6] = {-7, 7, -7, 7, INT64_MIN, INT64_MAX}, b[6] = {2, 2, -2, -2, -1, 1}, o[6];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_I64, 6), tb = T1(b, TPU_DTYPE_I64, 6), to = T1(o, TPU_DTYPE_I64, 6);
  tpu_k_value_t tr[] = {vt(&ta), vt(&tb), vs("trunc")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", tr, 3, &to));
  CHECK(o[0] == -3 && o[1] == 3 && o[2] == 3 && o[3] == -3 && o[4] == INT64_MIN && o[5] == INT64_MAX);
  tpu_k_value_t fl[] = {vt(&ta), vt(&tb), vs("floor")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", fl, 3, &to));
  CHECK(o[0] == -4 && o[1] == 3 && o[2] == 3 && o[3] == -4 && o[4] == INT64_MIN);
  tpu_k_value_t ab[] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op1("aten::remainder.Tensor", ab, 2, &to));
  CHECK(o[0] == 1 && o[1] == 1 && o[2] == -1 && o[3] == -1 && o[4] == 0 && o[5] == 0);
  CHECK_OK(call_op1("aten::fmod.Tensor", ab, 2, &to));
  CHECK(o[0] == -1 && o[1] == 1 && o[2] == -1 && o[3] == 1 && o[4] == 0);
  /* wrap-around, no UB */
  tpu_k_value_t ad[] = {vt(&ta), vt(&tb), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", ad, 3, &to));
  CHECK(o[5] == INT64_MIN && o[4] == INT64_MAX);
  CHECK_OK(call_op1("aten::mul.Tensor", ab, 2, &to));
  CHECK(o[4] == INT64_MIN && o[0] == -14);
  tpu_k_value_t ng[] = {vt(&ta)};
  CHECK_OK(call_op1("aten::neg", ng, 1, &to));
  CHECK(o[4] == INT64_MIN && o[0] == 7);
  CHECK_OK(call_op1("aten::abs", ng, 1, &to));
  CHECK(o[0] == 7 && o[4] == INT64_MIN);
  /* division by zero */
  int64_t z[6] = {1, 0, 1, 1, 1, 1};
  tpu_tensor_t tz = T1(z, TPU_DTYPE_I64, 6);
  tpu_k_value_t dz[] = {vt(&ta), vt(&tz), vs("trunc")};
  CHECK_STATUS(call_op1("aten::div.Tensor_mode", dz, 3, &to), TPU_STATUS_INVALID_ARGUMENT, "ZeroDivisionError");
  tpu_k_value_t rz[] = {vt(&ta), vi(0)};
  CHECK_STATUS(call_op1("aten::remainder.Scalar", rz, 2, &to), TPU_STATUS_INVALID_ARGUMENT, "ZeroDivisionError");
  /* uint8 wraps, int32 pow */
  uint8_t u[3] = {1, 2, 250}, uo[3];
  tpu_tensor_t tu = T1(u, TPU_DTYPE_U8, 3), tuo = T1(uo, TPU_DTYPE_U8, 3);
  tpu_k_value_t us[] = {vt(&tu), vi(10), vi(1)};
  CHECK_OK(call_op1("aten::add.Scalar", us, 3, &tuo));
  CHECK(uo[0] == 11 && uo[2] == 4);
  tpu_k_value_t us2[] = {vt(&tu), vi(3), vi(1)};
  CHECK_OK(call_op1("aten::sub.Scalar", us2, 3, &tuo));
  CHECK(uo[0] == 254 && uo[2] == 247);
  int32_t p[4] = {2, -1, 1, 3}, e[4] = {10, -3, -2, 2}, po[4];
  tpu_tensor_t tp = T1(p, TPU_DTYPE_I32, 4), te = T1(e, TPU_DTYPE_I32, 4), tpo = T1(po, TPU_DTYPE_I32, 4);
  tpu_k_value_t pw[] = {vt(&tp), vt(&te)};
  CHECK_OK(call_op1("aten::pow.Tensor_Tensor", pw, 2, &tpo));
  CHECK(po[0] == 1024 && po[1] == -1 && po[2] == 1 && po[3] == 9);
  /* bitwise */
  tpu_k_value_t bw[] = {vt(&tp), vi(6)};
  CHECK_OK(call_op1("aten::bitwise_and.Scalar", bw, 2, &tpo));
  CHECK(po[0] == 2 && po[1] == 6 && po[3] == 2);
  CHECK_OK(call_op1("aten::bitwise_xor.Scalar", bw, 2, &tpo));
  CHECK(po[0] == 4 && po[1] == ~6);
  tpu_k_value_t bn[] = {vt(&tp)};
  CHECK_OK(call_op1("aten::bitwise_not", bn, 1, &tpo));
  CHECK(po[0] == ~2 && po[1] == 0);
  uint8_t bb[2] = {1, 0}, bo[2];
  tpu_tensor_t tbb = T1(bb, TPU_DTYPE_BOOL, 2), tbo = T1(bo, TPU_DTYPE_BOOL, 2);
  tpu_k_value_t bn2[] = {vt(&tbb)};
  CHECK_OK(call_op1("aten::bitwise_not", bn2, 1, &tbo));
  CHECK(bo[0] == 0 && bo[1] == 1);
  /* clamp on ints, with min None */
  tpu_k_value_t cl[] = {vt(&tp), vn(), vi(2)};
  CHECK_OK(call_op1("aten::clamp", cl, 3, &tpo));
  CHECK(po[0] == 2 && po[1] == -1 && po[3] == 2);
  tpu_k_value_t cl2[] = {vt(&tp), vi(0), vi(2)};
  CHECK_OK(call_op1("aten::clamp", cl2, 3, &tpo));
  CHECK(po[0] == 2 && po[1] == 0 && po[2] == 1 && po[3] == 2);
  tpu_k_value_t cl3[] = {vt(&tp), vn(), vn()};
  CHECK_STATUS(call_op1("aten::clamp", cl3, 3, &tpo), TPU_STATUS_INVALID_ARGUMENT, "min");
}

/* ---- comparisons, selection, logical -------------------------------------- */

static void test_comparisons(void) {
  float a[4] = {1, 2, NAN, 4};
  int64_t b[4] = {1, 3, 0, 16777217};
  uint8_t o[4];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, 4), tb = T1(b, TPU_DTYPE_I64, 4), to = T1(o, TPU_DTYPE_BOOL, 4);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op1("aten::eq.Tensor", args, 2, &to));
  CHECK(o[0] == 1 && o[1] == 0 && o[2] == 0 && o[3] == 0);
  CHECK_OK(call_op1("aten::lt.Tensor", args, 2, &to));
  CHECK(o[0] == 0 && o[1] == 1 && o[2] == 0 && o[3] == 1);
  CHECK_OK(call_op1("aten::ne.Tensor", args, 2, &to));
  CHECK(o[2] == 1);
  /* compared in float32 (promoted type): 16777217 rounds to 16777216 */
  float big[1] = {16777216.0f};
  int64_t bi[1] = {16777217};
  tpu_tensor_t tbig = T1(big, TPU_DTYPE_F32, 1), tbi = T1(bi, TPU_DTYPE_I64, 1), to1 = T1(o, TPU_DTYPE_BOOL, 1);
  tpu_k_value_t a2[] = {vt(&tbig), vt(&tbi)};
  CHECK_OK(call_op1("aten::eq.Tensor", a2, 2, &to1));
  CHECK(o[0] == 1);
  /* int64 vs int64 compares exactly */
  int64_t bj[1] = {16777216};
  tpu_tensor_t tbj = T1(bj, TPU_DTYPE_I64, 1);
  tpu_k_value_t a3[] = {vt(&tbi), vt(&tbj)};
  CHECK_OK(call_op1("aten::eq.Tensor", a3, 2, &to1));
  CHECK(o[0] == 0);
  /* f16 tensor == 0.1 compares in f16 (the scalar is cast first) */
  uint16_t h[1] = {tpu_ku_f32_to_f16(0.1f)};
  tpu_tensor_t th = T1(h, TPU_DTYPE_F16, 1);
  tpu_k_value_t a4[] = {vt(&th), vd(0.1)};
  CHECK_OK(call_op1("aten::eq.Scalar", a4, 2, &to1));
  CHECK(o[0] == 1);
  /* uint8 == 261 wraps to 5, as PyTorch does */
  uint8_t u[1] = {5};
  tpu_tensor_t tu = T1(u, TPU_DTYPE_U8, 1);
  tpu_k_value_t a5[] = {vt(&tu), vi(261)};
  CHECK_OK(call_op1("aten::eq.Scalar", a5, 2, &to1));
  CHECK(o[0] == 1);
  /* in-place comparison keeps self's dtype */
  float s[3] = {1, 5, 9};
  tpu_tensor_t ts = T1(s, TPU_DTYPE_F32, 3);
  tpu_k_value_t a6[] = {vt(&ts), vd(5.0)};
  CHECK_OK(call_op1("aten::ge_.Scalar", a6, 2, &ts));
  CHECK(s[0] == 0.0f && s[1] == 1.0f && s[2] == 1.0f);
  /* isnan */
  tpu_k_value_t a7[] = {vt(&ta)};
  CHECK_OK(call_op1("aten::isnan", a7, 1, &to));
  CHECK(o[0] == 0 && o[2] == 1);
}

static void test_where_masked_logical(void) {
  uint8_t cond[4] = {1, 0, 1, 0};
  float x[4] = {1, 2, 3, 4}, y[4] = {-1, -2, -3, -4}, o[4];
  tpu_tensor_t tc = T1(cond, TPU_DTYPE_BOOL, 4), tx = T1(x, TPU_DTYPE_F32, 4), ty = T1(y, TPU_DTYPE_F32, 4);
  tpu_tensor_t to = T1(o, TPU_DTYPE_F32, 4);
  tpu_k_value_t w[] = {vt(&tc), vt(&tx), vt(&ty)};
  CHECK_OK(call_op1("aten::where.self", w, 3, &to));
  CHECK(o[0] == 1 && o[1] == -2 && o[2] == 3 && o[3] == -4);
  tpu_k_value_t w2[] = {vt(&tc), vt(&tx), vd(7.0)};
  CHECK_OK(call_op1("aten::where.ScalarOther", w2, 3, &to));
  CHECK(o[1] == 7 && o[2] == 3);
  /* masked_fill with a broadcast mask [2,1] over [2,2] */
  int64_t s22[] = {2, 2}, s21[] = {2, 1};
  uint8_t m[2] = {0, 1};
  tpu_tensor_t tx2 = T_(x, TPU_DTYPE_F32, 2, s22, NULL), tm = T_(m, TPU_DTYPE_BOOL, 2, s21, NULL);
  tpu_k_value_t mf[] = {vt(&tx2), vt(&tm), vd(-9.5)};
  CHECK_OK(call_op1("aten::masked_fill_.Scalar", mf, 3, &tx2));
  CHECK(x[0] == 1 && x[1] == 2 && x[2] == -9.5f && x[3] == -9.5f);
  /* masked_fill.Tensor with a 0-dim int value into an int tensor */
  int32_t iv[4] = {1, 2, 3, 4}, io[4];
  int64_t val = 42;
  uint8_t m4[4] = {1, 0, 0, 1};
  tpu_tensor_t tiv = T1(iv, TPU_DTYPE_I32, 4), tio = T1(io, TPU_DTYPE_I32, 4);
  tpu_tensor_t tm4 = T1(m4, TPU_DTYPE_BOOL, 4), tval = T0(&val, TPU_DTYPE_I64);
  tpu_k_value_t mf2[] = {vt(&tiv), vt(&tm4), vt(&tval)};
  CHECK_OK(call_op1("aten::masked_fill.Tensor", mf2, 3, &tio));
  CHECK(io[0] == 42 && io[1] == 2 && io[3] == 42);
  /* logical ops: float inputs, bool output; logical_not on ints */
  float la[4] = {0, 1, NAN, 0}, lb[4] = {0, 0, 2, 3};
  uint8_t lo[4];
  tpu_tensor_t tla = T1(la, TPU_DTYPE_F32, 4), tlb = T1(lb, TPU_DTYPE_F32, 4), tlo = T1(lo, TPU_DTYPE_BOOL, 4);
  tpu_k_value_t l2[] = {vt(&tla), vt(&tlb)};
  CHECK_OK(call_op1("aten::logical_and", l2, 2, &tlo));
  CHECK(lo[0] == 0 && lo[1] == 0 && lo[2] == 1 && lo[3] == 0);
  CHECK_OK(call_op1("aten::logical_or", l2, 2, &tlo));
  CHECK(lo[0] == 0 && lo[1] == 1 && lo[2] == 1 && lo[3] == 1);
  CHECK_OK(call_op1("aten::logical_xor", l2, 2, &tlo));
  CHECK(lo[0] == 0 && lo[1] == 1 && lo[2] == 0 && lo[3] == 1);
  double tiny[1] = {1e-300};
  tpu_tensor_t ttiny = T1(tiny, TPU_DTYPE_F64, 1), tlo1 = T1(lo, TPU_DTYPE_BOOL, 1);
  tpu_k_value_t l1[] = {vt(&ttiny)};
  CHECK_OK(call_op1("aten::logical_not", l1, 1, &tlo1));
  CHECK(lo[0] == 0);
}

/* ---- unary math and activations vs libm ----------------------------------- */

typedef double (*ref1_fn)(double);
static double r_neg(double x) { return -x; }
static double r_recip(double x) { return 1.0 / x; }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_relu(double x) { return x < 0 ? 0 : x; }
static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
static double r_silu(double x) { return x / (1.0 + exp(-x)); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_leaky(double x) { return x > 0 ? x : 0.01 * x; }
static double r_hardtanh(double x) { return x < -1 ? -1 : x > 1 ? 1 : x; }
static double r_sign(double x) { return (x > 0) - (x < 0); }

static void test_unary_float(void) {
  struct {
    const char* name;
    ref1_fn fn;
    float lo, hi;
    tpu_k_value_t extra;
  } cases[] = {
      {"aten::neg", r_neg, -5, 5, {0}},        {"aten::abs", fabs, -5, 5, {0}},
      {"aten::sign", r_sign, -5, 5, {0}},      {"aten::reciprocal", r_recip, 0.5f, 5, {0}},
      {"aten::sqrt", sqrt, 0, 100, {0}},       {"aten::rsqrt", r_rsqrt, 0.01f, 100, {0}},
      {"aten::exp", exp, -20, 20, {0}},        {"aten::exp2", exp2, -20, 20, {0}},
      {"aten::expm1", expm1, -3, 3, {0}},      {"aten::log", log, 0.001f, 100, {0}},
      {"aten::log1p", log1p, -0.9f, 100, {0}}, {"aten::log2", log2, 0.001f, 100, {0}},
      {"aten::sin", sin, -6, 6, {0}},          {"aten::cos", cos, -6, 6, {0}},
      {"aten::tan", tan, -1.5f, 1.5f, {0}},    {"aten::tanh", tanh, -8, 8, {0}},
      {"aten::sigmoid", r_sigmoid, -20, 20, {0}}, {"aten::erf", erf, -3, 3, {0}},
      {"aten::floor", floor, -9, 9, {0}},      {"aten::ceil", ceil, -9, 9, {0}},
      {"aten::trunc", trunc, -9, 9, {0}},      {"aten::round", nearbyint, -9, 9, {0}},
      {"aten::relu", r_relu, -5, 5, {0}},      {"aten::gelu", r_gelu, -6, 6, {0}},
      {"aten::silu", r_silu, -20, 20, {0}},    {"aten::mish", r_mish, -10, 10, {0}},
      {"aten::softplus", r_softplus, -30, 30, {0}}, {"aten::leaky_relu", r_leaky, -5, 5, {0}},
      {"aten::hardtanh", r_hardtanh, -3, 3, {0}},
  };
  enum { N = 513 };
  float* x = malloc(N * 4);
  float* o = malloc(N * 4);
  double* xd = malloc(N * 8);
  double* od = malloc(N * 8);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    for (int i = 0; i < N; ++i) {
      x[i] = frand(cases[c].lo, cases[c].hi);
      if (i == 0) x[i] = 0.5f; /* round-half-even and a tie case */
      if (i == 1) x[i] = cases[c].lo < -2.5f ? -2.5f : x[i];
      xd[i] = x[i];
    }
    tpu_tensor_t tx = T1(x, TPU_DTYPE_F32, N), to = T1(o, TPU_DTYPE_F32, N);
    tpu_k_value_t args[] = {vt(&tx)};
    tpu_status_t st = call_op1(cases[c].name, args, 1, &to);
    CHECK(st == TPU_OK);
    if (st) {
      fprintf(stderr, "  %s: %s\n", cases[c].name, tpu_status_message(st));
      tpu_status_free(st);
      continue;
    }
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = cases[c].fn((double)x[i]);
      if (!close_f(o[i], want, 4e-6, 1e-6)) {
        if (bad < 3) fprintf(stderr, "  %s(%.9g) = %.9g, want %.9g\n", cases[c].name, x[i], o[i], want);
        bad++;
      }
    }
    CHECK(bad == 0);
    /* float64 */
    tpu_tensor_t txd = T1(xd, TPU_DTYPE_F64, N), tod = T1(od, TPU_DTYPE_F64, N);
    tpu_k_value_t dargs[] = {vt(&txd)};
    CHECK_OK(call_op1(cases[c].name, dargs, 1, &tod));
    bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = cases[c].fn(xd[i]);
      if (!close_f(od[i], want, 1e-12, 1e-14)) {
        if (bad < 3) fprintf(stderr, "  f64 %s(%.17g) = %.17g, want %.17g\n", cases[c].name, xd[i], od[i], want);
        bad++;
      }
    }
    CHECK(bad == 0);
  }
  /* gelu tanh approximation */
  for (int i = 0; i < N; ++i) x[i] = frand(-6, 6);
  tpu_tensor_t tx = T1(x, TPU_DTYPE_F32, N), to = T1(o, TPU_DTYPE_F32, N);
  tpu_k_value_t ga[] = {vt(&tx), vs("tanh")};
  CHECK_OK(call_op1("aten::gelu", ga, 2, &to));
  int bad = 0;
  for (int i = 0; i < N; ++i)
    if (!close_f(o[i], r_gelu_tanh(x[i]), 4e-6, 1e-6)) bad++;
  CHECK(bad == 0);
  /* integer input to a float op (PyTorch gives a float output) */
  int64_t iv[3] = {1, 4, 9};
  float fo[3];
  tpu_tensor_t tiv = T1(iv, TPU_DTYPE_I64, 3), tfo = T1(fo, TPU_DTYPE_F32, 3);
  tpu_k_value_t sa[] = {vt(&tiv)};
  CHECK_OK(call_op1("aten::sqrt", sa, 1, &tfo));
  CHECK(fo[0] == 1.0f && fo[1] == 2.0f && fo[2] == 3.0f);
  free(x);
  free(o);
  free(xd);
  free(od);
}

static void test_special_values(void) {
  float a[6] = {NAN, 1, -INFINITY, INFINITY, 0.5f, -2.5f}, o[6];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_F32, 6), to = T1(o, TPU_DTYPE_F32, 6);
  /* maximum / minimum propagate NaN */
  float b[6] = {0, NAN, 0, 0, 1, -3};
  tpu_tensor_t tb = T1(b, TPU_DTYPE_F32, 6);
  tpu_k_value_t mm[] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op1("aten::maximum", mm, 2, &to));
  CHECK(isnan(o[0]) && isnan(o[1]) && o[2] == 0 && o[3] == INFINITY && o[4] == 1 && o[5] == -2.5f);
  CHECK_OK(call_op1("aten::minimum", mm, 2, &to));
  CHECK(isnan(o[0]) && isnan(o[1]) && o[2] == -INFINITY && o[5] == -3);
  /* clamp: NaN input stays NaN, NaN bound -> NaN, min > max -> max */
  tpu_k_value_t cl[] = {vt(&ta), vd(0.0), vd(0.75)};
  CHECK_OK(call_op1("aten::clamp", cl, 3, &to));
  CHECK(isnan(o[0]) && o[1] == 0.75f && o[2] == 0 && o[3] == 0.75f && o[4] == 0.5f && o[5] == 0);
  tpu_k_value_t cl2[] = {vt(&ta), vd(2.0), vd(1.0)};
  CHECK_OK(call_op1("aten::clamp", cl2, 3, &to));
  CHECK(o[1] == 1.0f && o[4] == 1.0f);
  float nanb[1] = {NAN};
  tpu_tensor_t tnan = T0(nanb, TPU_DTYPE_F32);
  tpu_k_value_t cl3[] = {vt(&ta), vt(&tnan), vn()};
  CHECK_OK(call_op1("aten::clamp.Tensor", cl3, 3, &to));
  CHECK(isnan(o[1]) && isnan(o[4]));
  /* nan_to_num defaults (f32) and explicit values */
  tpu_k_value_t nn[] = {vt(&ta), vn(), vn(), vn()};
  CHECK_OK(call_op1("aten::nan_to_num", nn, 4, &to));
  CHECK(o[0] == 0 && o[2] == -FLT_MAX && o[3] == FLT_MAX && o[4] == 0.5f);
  tpu_k_value_t nn2[] = {vt(&ta), vd(1.0), vd(2.0), vd(-3.0)};
  CHECK_OK(call_op1("aten::nan_to_num", nn2, 4, &to));
  CHECK(o[0] == 1 && o[2] == -3 && o[3] == 2);
  /* f16 nan_to_num defaults to the f16 range */
  uint16_t h[2] = {0x7C00, 0xFC00}, ho[2];
  tpu_tensor_t th = T1(h, TPU_DTYPE_F16, 2), tho = T1(ho, TPU_DTYPE_F16, 2);
  tpu_k_value_t nn3[] = {vt(&th)};
  CHECK_OK(call_op1("aten::nan_to_num", nn3, 1, &tho));
  CHECK(ho[0] == 0x7BFF && ho[1] == 0xFBFF);
  /* round: half to even; decimals */
  float r[4] = {0.5f, 1.5f, 2.5f, -0.5f};
  tpu_tensor_t tr = T1(r, TPU_DTYPE_F32, 4), tro = T1(o, TPU_DTYPE_F32, 4);
  tpu_k_value_t ra[] = {vt(&tr)};
  CHECK_OK(call_op1("aten::round", ra, 1, &tro));
  CHECK(o[0] == 0 && o[1] == 2 && o[2] == 2 && o[3] == 0 && signbit(o[3]));
  float r2[2] = {1.2345f, 1234.5f};
  tpu_tensor_t tr2 = T1(r2, TPU_DTYPE_F32, 2), tro2 = T1(o, TPU_DTYPE_F32, 2);
  tpu_k_value_t rd[] = {vt(&tr2), vi(2)};
  CHECK_OK(call_op1("aten::round.decimals", rd, 2, &tro2));
  CHECK(o[0] == nearbyintf(1.2345f * 100.0f) / 100.0f && o[1] == 1234.5f);
  tpu_k_value_t rd2[] = {vt(&tr2), vi(-2)};
  CHECK_OK(call_op1("aten::round.decimals", rd2, 2, &tro2));
  CHECK(o[0] == 0 && o[1] == 1200);
  /* float floor division and remainder follow Python semantics */
  float fa[4] = {-7, 7, -7, 5}, fb[4] = {2, -2, 0, 0.5f};
  tpu_tensor_t tfa = T1(fa, TPU_DTYPE_F32, 4), tfb = T1(fb, TPU_DTYPE_F32, 4), tfo = T1(o, TPU_DTYPE_F32, 4);
  tpu_k_value_t fd[] = {vt(&tfa), vt(&tfb), vs("floor")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", fd, 3, &tfo));
  CHECK(o[0] == -4 && o[1] == -4 && o[2] == -INFINITY && o[3] == 10);
  tpu_k_value_t td[] = {vt(&tfa), vt(&tfb), vs("trunc")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", td, 3, &tfo));
  CHECK(o[0] == -3 && o[1] == -3);
  tpu_k_value_t nd[] = {vt(&tfa), vt(&tfb), vn()};
  CHECK_OK(call_op1("aten::div.Tensor_mode", nd, 3, &tfo));
  CHECK(o[0] == -3.5f);
  tpu_k_value_t rm[] = {vt(&tfa), vt(&tfb)};
  CHECK_OK(call_op1("aten::remainder.Tensor", rm, 2, &tfo));
  CHECK(o[0] == 1 && o[1] == -1 && isnan(o[2]) && o[3] == 0);
  CHECK_OK(call_op1("aten::fmod.Tensor", rm, 2, &tfo));
  CHECK(o[0] == -1 && o[1] == 1);
  /* pow special exponents and general */
  float pb[3] = {4, 9, 2};
  tpu_tensor_t tpb = T1(pb, TPU_DTYPE_F32, 3), tpo = T1(o, TPU_DTYPE_F32, 3);
  tpu_k_value_t p1[] = {vt(&tpb), vd(0.5)};
  CHECK_OK(call_op1("aten::pow.Tensor_Scalar", p1, 2, &tpo));
  CHECK(o[0] == 2 && o[1] == 3);
  tpu_k_value_t p2[] = {vt(&tpb), vi(-2)};
  CHECK_OK(call_op1("aten::pow.Tensor_Scalar", p2, 2, &tpo));
  CHECK(o[0] == 1.0f / 16 && o[2] == 0.25f);
  tpu_k_value_t p3[] = {vt(&tpb), vd(1.5)};
  CHECK_OK(call_op1("aten::pow.Tensor_Scalar", p3, 2, &tpo));
  CHECK(o[0] == 8 && o[1] == 27);
}

static void test_backward_ops(void) {
  enum { N = 301 };
  float g[N], x[N], o[N];
  for (int i = 0; i < N; ++i) {
    g[i] = frand(-2, 2);
    x[i] = frand(-6, 6);
  }
  x[0] = 0.5f; /* threshold tie */
  tpu_tensor_t tg = T1(g, TPU_DTYPE_F32, N), tx = T1(x, TPU_DTYPE_F32, N), to = T1(o, TPU_DTYPE_F32, N);
  int bad;
  tpu_k_value_t a2[] = {vt(&tg), vt(&tx)};
  CHECK_OK(call_op1("aten::silu_backward", a2, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double s = 1.0 / (1.0 + exp(-(double)x[i]));
    if (!close_f(o[i], g[i] * s * (1 + x[i] * (1 - s)), 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::sigmoid_backward", a2, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (!close_f(o[i], (double)g[i] * (1 - (double)x[i]) * x[i], 1e-5, 1e-6)) bad++;
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::tanh_backward", a2, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (!close_f(o[i], (double)g[i] * (1 - (double)x[i] * x[i]), 1e-5, 1e-5)) bad++;
  CHECK(bad == 0);
  CHECK_OK(call_op1("aten::mish_backward", a2, 2, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double xd = x[i], sg = 1 / (1 + exp(-xd)), ts = tanh(log1p(exp(xd)));
    if (!close_f(o[i], g[i] * (ts + xd * sg * (1 - ts * ts)), 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  tpu_k_value_t gb[] = {vt(&tg), vt(&tx), vs("none")};
  CHECK_OK(call_op1("aten::gelu_backward", gb, 3, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double xd = x[i];
    double cdf = 0.5 * (1 + erf(xd / sqrt(2.0))), pdf = exp(-0.5 * xd * xd) / sqrt(2 * 3.14159265358979323846);
    if (!close_f(o[i], g[i] * (cdf + xd * pdf), 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  tpu_k_value_t gt[] = {vt(&tg), vt(&tx), vs("tanh")};
  CHECK_OK(call_op1("aten::gelu_backward", gt, 3, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double xd = x[i], kb = sqrt(2.0) * (2.0 / sqrt(3.14159265358979323846)) * 0.5, kk = 0.044715;
    double th = tanh(kb * (xd + kk * xd * xd * xd));
    double d = 0.5 * (1 + th) + 0.5 * xd * (1 - th * th) * kb * (1 + 3 * kk * xd * xd);
    if (!close_f(o[i], g[i] * d, 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  tpu_k_value_t tb[] = {vt(&tg), vt(&tx), vd(0.5)};
  CHECK_OK(call_op1("aten::threshold_backward", tb, 3, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != (x[i] <= 0.5f ? 0.0f : g[i])) bad++;
  CHECK(bad == 0);
  CHECK(o[0] == 0.0f);
  tpu_k_value_t sb[] = {vt(&tg), vt(&tx), vi(2), vi(5)};
  CHECK_OK(call_op1("aten::softplus_backward", sb, 4, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double z = exp(2.0 * x[i]);
    double want = 2.0 * x[i] > 5 ? g[i] : g[i] * z / (z + 1);
    if (!close_f(o[i], want, 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  tpu_k_value_t hb[] = {vt(&tg), vt(&tx), vd(-1.0), vd(1.0)};
  CHECK_OK(call_op1("aten::hardtanh_backward", hb, 4, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != ((x[i] <= -1 || x[i] >= 1) ? 0.0f : g[i])) bad++;
  CHECK(bad == 0);
  tpu_k_value_t lb[] = {vt(&tg), vt(&tx), vd(0.2), vb(false)};
  CHECK_OK(call_op1("aten::leaky_relu_backward", lb, 4, &to));
  bad = 0;
  for (int i = 0; i < N; ++i)
    if (o[i] != (x[i] > 0 ? g[i] : g[i] * 0.2f)) bad++;
  CHECK(bad == 0);
  /* softplus with beta/threshold and threshold() */
  tpu_k_value_t sp[] = {vt(&tx), vi(2), vi(5)};
  CHECK_OK(call_op1("aten::softplus", sp, 3, &to));
  bad = 0;
  for (int i = 0; i < N; ++i) {
    double want = 2.0 * x[i] > 5 ? x[i] : log1p(exp(2.0 * x[i])) / 2.0;
    if (!close_f(o[i], want, 1e-5, 1e-6)) bad++;
  }
  CHECK(bad == 0);
  tpu_k_value_t th[] = {vt(&tx), vd(0.5), vd(-7.0)};
  CHECK_OK(call_op1("aten::threshold", th, 3, &to));
  CHECK(o[0] == -7.0f);
}

/* ---- threads and large tensors ------------------------------------------- */

static void test_parallel_matches_serial(void) {
  if (!g_pool) return;
  /* [300, 257] with a transposed input and broadcast row: crosses chunk
   * boundaries mid-row. */
  enum { R = 300, C = 257 };
  float* a = malloc((size_t)R * C * 4);
  float* row = malloc(C * 4);
  float* o1 = malloc((size_t)R * C * 4);
  float* o2 = malloc((size_t)R * C * 4);
  for (int i = 0; i < R * C; ++i) a[i] = frand(-3, 3);
  for (int i = 0; i < C; ++i) row[i] = frand(-3, 3);
  int64_t sz[] = {R, C}, tst[] = {1, R}, s1[] = {C};
  tpu_tensor_t ta = T_(a, TPU_DTYPE_F32, 2, sz, tst), tr = T_(row, TPU_DTYPE_F32, 1, s1, NULL);
  tpu_tensor_t t1 = T_(o1, TPU_DTYPE_F32, 2, sz, NULL), t2 = T_(o2, TPU_DTYPE_F32, 2, sz, NULL);
  const char* ops[] = {"aten::add.Tensor", "aten::mul.Tensor", "aten::maximum", "aten::lerp.Tensor"};
  for (int k = 0; k < 4; ++k) {
    tpu_k_value_t args[] = {vt(&ta), vt(&tr), k == 3 ? vt(&tr) : vi(1)};
    int nargs = k == 0 || k == 3 ? 3 : 2;
    memset(o1, 0, (size_t)R * C * 4);
    memset(o2, 0xff, (size_t)R * C * 4);
    CHECK_OK(call_op_pool(ops[k], args, nargs, &t1, NULL));
    CHECK_OK(call_op_pool(ops[k], args, nargs, &t2, g_pool));
    CHECK(memcmp(o1, o2, (size_t)R * C * 4) == 0);
  }
  tpu_k_value_t sargs[] = {vt(&ta)};
  CHECK_OK(call_op_pool("aten::silu", sargs, 1, &t1, NULL));
  CHECK_OK(call_op_pool("aten::silu", sargs, 1, &t2, g_pool));
  CHECK(memcmp(o1, o2, (size_t)R * C * 4) == 0);
  int bad = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      double x = a[j * R + i];
      if (!close_f(o2[i * C + j], x / (1 + exp(-x)), 4e-6, 1e-6)) bad++;
    }
  CHECK(bad == 0);
  /* integer division by zero detected from a worker thread */
  int64_t* ia = calloc((size_t)R * C, 8);
  int64_t* io = malloc((size_t)R * C * 8);
  for (int i = 0; i < R * C; ++i) ia[i] = i + 1;
  ia[R * C - 3] = 0;
  int64_t n = (int64_t)R * C;
  tpu_tensor_t tia = T1(ia, TPU_DTYPE_I64, n), tio = T1(io, TPU_DTYPE_I64, n);
  tpu_k_value_t dz[] = {vi(5), vt(&tia)};
  CHECK_STATUS(call_op_pool("aten::remainder.Scalar_Tensor", dz, 2, &tio, g_pool),
               TPU_STATUS_INVALID_ARGUMENT, "ZeroDivisionError");
  free(ia);
  free(io);
  free(a);
  free(row);
  free(o1);
  free(o2);
}

static void test_mixed_dtypes(void) {
  int32_t a[3] = {1, 2, 3};
  uint16_t b[3];
  float fb[3] = {0.5f, 1.25f, -2.0f};
  for (int i = 0; i < 3; ++i) b[i] = tpu_ku_f32_to_bf16(fb[i]);
  float o[3];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_I32, 3), tb = T1(b, TPU_DTYPE_BF16, 3), to = T1(o, TPU_DTYPE_F32, 3);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", args, 3, &to));
  CHECK(o[0] == 1.5f && o[1] == 3.25f && o[2] == 1.0f);
  /* f64 output from f32 + f64 */
  double d[3] = {0.1, 0.2, 0.3}, od[3];
  tpu_tensor_t td = T1(d, TPU_DTYPE_F64, 3), tod = T1(od, TPU_DTYPE_F64, 3), tf = T1(fb, TPU_DTYPE_F32, 3);
  tpu_k_value_t a2[] = {vt(&tf), vt(&td), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", a2, 3, &tod));
  CHECK(od[0] == 0.5 + 0.1 && od[2] == -2.0 + 0.3);
  /* bool + bool -> bool (logical or), bool * bool */
  uint8_t x[2] = {1, 0}, y[2] = {1, 1}, bo[2];
  tpu_tensor_t tx = T1(x, TPU_DTYPE_BOOL, 2), ty = T1(y, TPU_DTYPE_BOOL, 2), tbo = T1(bo, TPU_DTYPE_BOOL, 2);
  tpu_k_value_t a3[] = {vt(&tx), vt(&ty), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", a3, 3, &tbo));
  CHECK(bo[0] == 1 && bo[1] == 1);
  CHECK_OK(call_op1("aten::mul.Tensor", a3, 2, &tbo));
  CHECK(bo[0] == 1 && bo[1] == 0);
  /* int8 output from int8 + int8 wraps */
  int8_t i8[2] = {100, -100}, i8o[2];
  tpu_tensor_t ti8 = T1(i8, TPU_DTYPE_I8, 2), ti8o = T1(i8o, TPU_DTYPE_I8, 2);
  tpu_k_value_t a4[] = {vt(&ti8), vt(&ti8), vi(1)};
  CHECK_OK(call_op1("aten::add.Tensor", a4, 3, &ti8o));
  CHECK(i8o[0] == -56 && i8o[1] == 56);
  /* integer alpha must not be a float */
  tpu_k_value_t a5[] = {vt(&ti8), vt(&ti8), vd(1.5)};
  CHECK_STATUS(call_op1("aten::add.Tensor", a5, 3, &ti8o), TPU_STATUS_INVALID_ARGUMENT, "alpha");
}

/* ---- vectorised float32 math ---------------------------------------------- */

static double ulps(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : 1e9;
  if (isinf(want)) return got == want ? 0 : 1e9;
  double w = fabs(want);
  if (w < 1e-37) return fabs(got - want) < 1e-37 ? 0 : 1e9;
  float fw = (float)w;
  double u = (double)nextafterf(fw, INFINITY) - fw;
  return fabs(got - want) / u;
}

/* The header compiled here (test flags: no AVX2) is the portable build. */
static void test_vecmath_portable(void) {
  double me = 0, mt = 0, mr = 0, mp = 0, ms = 0;
  for (double x = -103.0; x <= 88.5; x += 0.00317) {
    float f = (float)x;
    double e = ulps(ew_vm_exp(f), exp((double)f));
    if (e > me) me = e;
    if (fabs(x) < 12) {
      e = ulps(ew_vm_tanh(f), tanh((double)f));
      if (e > mt) mt = e;
      e = ulps(ew_vm_erf(f), erf((double)f));
      if (e > mr) mr = e;
      e = ulps(ew_vm_phi(f), 0.5 * erfc(-(double)f / sqrt(2.0)));
      if (f > -8 && e > mp) mp = e;
    }
    if (x > -80) {
      e = ulps(ew_vm_sigmoid(f), 1.0 / (1.0 + exp(-(double)f)));
      if (e > ms) ms = e;
    }
  }
  for (double x = -1e-3; x <= 1e-3; x += 1.3e-7) {
    float f = (float)x;
    double e = ulps(ew_vm_tanh(f), tanh((double)f));
    if (e > mt) mt = e;
    e = ulps(ew_vm_erf(f), erf((double)f));
    if (e > mr) mr = e;
  }
  CHECK(me <= 2.0);
  CHECK(mt <= 3.0);
  CHECK(mr <= 4.0);
  CHECK(ms <= 4.0);
  CHECK(mp <= 8.0);
  if (me > 2 || mt > 3 || mr > 4 || ms > 4 || mp > 8)
    fprintf(stderr, "  max ulp: exp %.2f tanh %.2f erf %.2f sigmoid %.2f phi %.2f\n", me, mt, mr, ms, mp);
  /* special values */
  CHECK(ew_vm_exp(INFINITY) == INFINITY && ew_vm_exp(-INFINITY) == 0.0f && isnan(ew_vm_exp(NAN)));
  CHECK(ew_vm_exp(89.0f) == INFINITY && ew_vm_exp(-200.0f) == 0.0f);
  CHECK(ew_vm_exp(-100.0f) > 0.0f && ew_vm_exp(-100.0f) < 1e-43f); /* subnormal */
  CHECK(ew_vm_exp(0.0f) == 1.0f);
  CHECK(signbit(ew_vm_tanh(-0.0f)) && ew_vm_tanh(INFINITY) == 1.0f && ew_vm_tanh(-INFINITY) == -1.0f);
  CHECK(isnan(ew_vm_tanh(NAN)) && isnan(ew_vm_erf(NAN)) && isnan(ew_vm_phi(NAN)));
  CHECK(ew_vm_erf(INFINITY) == 1.0f && ew_vm_erf(-INFINITY) == -1.0f && ew_vm_erf(5.0f) == 1.0f);
  CHECK(ew_vm_phi(-INFINITY) == 0.0f && ew_vm_phi(INFINITY) == 1.0f);
  CHECK(ew_vm_sigmoid(INFINITY) == 1.0f && ew_vm_sigmoid(-INFINITY) == 0.0f);
  /* conversions match kutil bit for bit (NaN payloads aside) */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float a = tpu_ku_f16_to_f32((uint16_t)h), b = ew_vm_h2f((uint16_t)h);
    if (memcmp(&a, &b, 4) != 0 && !(isnan(a) && isnan(b))) bad++;
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 65537) {
    uint32_t x = (uint32_t)u;
    float f;
    memcpy(&f, &x, 4);
    if (isnan(f)) continue;
    if (tpu_ku_f32_to_f16(f) != ew_vm_f2h(f)) bad++;
    if (tpu_ku_f32_to_bf16(f) != ew_vm_f2bf(f)) bad++;
  }
  CHECK(bad == 0);
}

/* Special values and every layout through the kernels (AVX2 build where
 * the CPU has it). */
static void test_vector_ops_through_kernels(void) {
  const char* ops[] = {"aten::exp", "aten::sigmoid", "aten::silu", "aten::tanh", "aten::erf", "aten::gelu"};
  double (*refs[])(double) = {exp, r_sigmoid, r_silu, tanh, erf, r_gelu};
  enum { N = 1029 };
  float* x = malloc(N * 4);
  float* o = malloc(N * 4);
  float* o2 = malloc(2 * N * 4);
  uint16_t* h = malloc(N * 2);
  uint16_t* ho = malloc(N * 2);
  for (int i = 0; i < N; ++i) x[i] = frand(-12, 12);
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = -0.0f, x[4] = 1e-40f, x[5] = -95.0f;
  for (int i = 0; i < N; ++i) h[i] = tpu_ku_f32_to_f16(x[i]);
  for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); ++k) {
    tpu_tensor_t tx = T1(x, TPU_DTYPE_F32, N), to = T1(o, TPU_DTYPE_F32, N);
    tpu_k_value_t args[] = {vt(&tx)};
    CHECK_OK(call_op1(ops[k], args, 1, &to));
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = refs[k](x[i]);
      if (i == 1 && k >= 5) want = NAN; /* gelu(-inf) = -inf * 0 */
      if (i == 1 && k == 2) want = NAN; /* silu(-inf) = -inf / inf */
      if (!close_f(o[i], want, 8e-6, 1e-7)) {
        if (bad < 3) fprintf(stderr, "  %s(%g) = %g want %g\n", ops[k], x[i], o[i], want);
        bad++;
      }
    }
    CHECK(bad == 0);
    CHECK(!!signbit(o[3]) == !!signbit(refs[k](-0.0)));
    /* a strided output (generic store path) gives the same values */
    int64_t n = N, st2 = 2;
    tpu_tensor_t tso = T_(o2, TPU_DTYPE_F32, 1, &n, &st2);
    CHECK_OK(call_op1(ops[k], args, 1, &tso));
    bad = 0;
    for (int i = 0; i < N; ++i)
      if (memcmp(&o2[2 * i], &o[i], 4) != 0 && !(isnan(o[i]) && isnan(o2[2 * i]))) bad++;
    CHECK(bad == 0);
    /* f16 in/out (F16C or portable conversions) vs float math rounded */
    tpu_tensor_t th = T1(h, TPU_DTYPE_F16, N), tho = T1(ho, TPU_DTYPE_F16, N);
    tpu_k_value_t hargs[] = {vt(&th)};
    CHECK_OK(call_op1(ops[k], hargs, 1, &tho));
    bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = refs[k](tpu_ku_f16_to_f32(h[i]));
      if (i == 1 && (k >= 5 || k == 2)) want = NAN;
      want = tpu_ku_f16_to_f32(tpu_ku_f32_to_f16((float)want)); /* overflow -> inf */
      if (!close_f(tpu_ku_f16_to_f32(ho[i]), want, 1e-3, 1e-7)) {
        if (bad < 3) fprintf(stderr, "  f16 %s(%g) = %g want %g\n", ops[k], tpu_ku_f16_to_f32(h[i]), tpu_ku_f16_to_f32(ho[i]), want);
        bad++;
      }
    }
    CHECK(bad == 0);
  }
  free(x);
  free(o);
  free(o2);
  free(h);
  free(ho);
}

/* ---- predicates, sgn, shifts, isin, f16/bf16 rounding emulation ------------------ */

static uint16_t bf(float f) { return tpu_ku_f32_to_bf16(f); }
static float fb(uint16_t h) { return tpu_ku_bf16_to_f32(h); }
static float rbf(float f) { return fb(bf(f)); }

static void test_float_predicates(void) {
  float x[8] = {-1.0f, -0.0f, 0.0f, NAN, -NAN, -INFINITY, INFINITY, 3.5f};
  const char* ops[5] = {"aten::isinf", "aten::isposinf.out", "aten::isneginf", "aten::isfinite", "aten::signbit.out"};
  const uint8_t want[5][8] = {{0, 0, 0, 0, 0, 1, 1, 0},
                              {0, 0, 0, 0, 0, 0, 1, 0},
                              {0, 0, 0, 0, 0, 1, 0, 0},
                              {1, 1, 1, 0, 0, 0, 0, 1},
                              {1, 1, 0, 0, 1, 1, 0, 0}};
  uint16_t xb[8];
  double xd[8];
  for (int i = 0; i < 8; ++i) {
    xb[i] = bf(x[i]);
    xd[i] = x[i];
  }
  void* datas[3] = {x, xb, xd};
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_F64};
  for (int k = 0; k < 5; ++k) {
    for (int d = 0; d < 3; ++d) {
      uint8_t o[8];
      tpu_tensor_t tx = T1(datas[d], dts[d], 8), to = T1(o, TPU_DTYPE_BOOL, 8);
      tpu_k_value_t args[] = {vt(&tx), vt(&to)};
      CHECK_OK(call_op1(ops[k], args, strstr(ops[k], ".out") ? 2 : 1, &to));
      CHECK(memcmp(o, want[k], 8) == 0);
    }
    /* strided view: every other element */
    uint8_t o4[4];
    int64_t n4 = 4, st2 = 2;
    tpu_tensor_t tx = T_(x, TPU_DTYPE_F32, 1, &n4, &st2), to = T1(o4, TPU_DTYPE_BOOL, 4);
    tpu_k_value_t args[] = {vt(&tx)};
    CHECK_OK(call_op1(ops[k], args, 1, &to));
    CHECK(o4[0] == want[k][0] && o4[1] == want[k][2] && o4[2] == want[k][4] && o4[3] == want[k][6]);
  }
  /* integers: never inf, always finite, signbit = negative */
  int8_t xi[4] = {-3, 0, 5, -128};
  uint8_t o[4];
  tpu_tensor_t ti = T1(xi, TPU_DTYPE_I8, 4), to = T1(o, TPU_DTYPE_BOOL, 4);
  tpu_k_value_t ai[] = {vt(&ti)};
  CHECK_OK(call_op1("aten::isinf", ai, 1, &to));
  CHECK(o[0] == 0 && o[1] == 0 && o[2] == 0 && o[3] == 0);
  CHECK_OK(call_op1("aten::isfinite", ai, 1, &to));
  CHECK(o[0] == 1 && o[1] == 1 && o[2] == 1 && o[3] == 1);
  CHECK_OK(call_op1("aten::signbit", ai, 1, &to));
  CHECK(o[0] == 1 && o[1] == 0 && o[2] == 0 && o[3] == 1);
  /* 0-dim and empty */
  float z = -2.0f;
  uint8_t oz = 0;
  tpu_tensor_t tz = T0(&z, TPU_DTYPE_F32), toz = T0(&oz, TPU_DTYPE_BOOL);
  tpu_k_value_t az[] = {vt(&tz)};
  CHECK_OK(call_op1("aten::signbit", az, 1, &toz));
  CHECK(oz == 1);
  int64_t e0[2] = {0, 3};
  tpu_tensor_t te = T_(NULL, TPU_DTYPE_F32, 2, e0, NULL), toe = T_(NULL, TPU_DTYPE_BOOL, 2, e0, NULL);
  tpu_k_value_t ae[] = {vt(&te)};
  CHECK_OK(call_op1("aten::isneginf", ae, 1, &toe));
  /* sgn on reals is sign (NaN -> 0) */
  float so[8];
  tpu_tensor_t tx = T1(x, TPU_DTYPE_F32, 8), tso = T1(so, TPU_DTYPE_F32, 8);
  tpu_k_value_t as[] = {vt(&tx), vt(&tso)};
  CHECK_OK(call_op1("aten::sgn.out", as, 2, &tso));
  CHECK(so[0] == -1 && so[1] == 0 && so[3] == 0 && so[5] == -1 && so[6] == 1 && so[7] == 1);
}

static void test_shifts(void) {
  /* int8: negative or >= 8 shifts give 0 (left) or the sign fill (right) */
  int8_t a[5] = {1, -1, 64, -128, 3}, b[5] = {-1, 7, 8, 1, 2}, o[5];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_I8, 5), tb = T1(b, TPU_DTYPE_I8, 5), to = T1(o, TPU_DTYPE_I8, 5);
  tpu_k_value_t args[] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op1("aten::bitwise_left_shift.Tensor", args, 2, &to));
  CHECK(o[0] == 0 && o[1] == -128 && o[2] == 0 && o[3] == 0 && o[4] == 12);
  CHECK_OK(call_op1("aten::__rshift__.Tensor", args, 2, &to));
  CHECK(o[0] == 0 && o[1] == -1 && o[2] == 0 && o[3] == -64 && o[4] == 0);
  /* uint8: right shifts by >= 8 give 0 */
  uint8_t ua[3] = {255, 255, 255}, ub[3] = {7, 8, 200}, uo[3];
  tpu_tensor_t tua = T1(ua, TPU_DTYPE_U8, 3), tub = T1(ub, TPU_DTYPE_U8, 3), tuo = T1(uo, TPU_DTYPE_U8, 3);
  tpu_k_value_t uargs[] = {vt(&tua), vt(&tub)};
  CHECK_OK(call_op1("aten::bitwise_right_shift.Tensor", uargs, 2, &tuo));
  CHECK(uo[0] == 1 && uo[1] == 0 && uo[2] == 0);
  CHECK_OK(call_op1("aten::__lshift__.Tensor", uargs, 2, &tuo));
  CHECK(uo[0] == 128 && uo[1] == 0 && uo[2] == 0);
  /* int64 edge shifts, Scalar forms, in place */
  int64_t la[3] = {1, -5, 5}, lo[3];
  tpu_tensor_t tla = T1(la, TPU_DTYPE_I64, 3), tlo = T1(lo, TPU_DTYPE_I64, 3);
  tpu_k_value_t s63[] = {vt(&tla), vi(63)};
  CHECK_OK(call_op1("aten::bitwise_left_shift.Tensor_Scalar", s63, 2, &tlo));
  CHECK(lo[0] == INT64_MIN && lo[2] == INT64_MIN);
  CHECK_OK(call_op1("aten::__rshift__.Scalar", s63, 2, &tlo));
  CHECK(lo[0] == 0 && lo[1] == -1 && lo[2] == 0);
  int64_t sh[3] = {1, 2, 70};
  tpu_tensor_t tsh = T1(sh, TPU_DTYPE_I64, 3);
  tpu_k_value_t st[] = {vi(3), vt(&tsh)};
  CHECK_OK(call_op1("aten::bitwise_left_shift.Scalar_Tensor", st, 2, &tlo));
  CHECK(lo[0] == 6 && lo[1] == 12 && lo[2] == 0);
  tpu_k_value_t ip[] = {vt(&tla), vi(2)};
  CHECK_OK(call_op1("aten::__ilshift__.Scalar", ip, 2, &tla));
  CHECK(la[0] == 4 && la[1] == -20 && la[2] == 20);
  /* float and bool are rejected */
  float f[1] = {1};
  uint8_t bo[1] = {1};
  tpu_tensor_t tf = T1(f, TPU_DTYPE_F32, 1), tbo = T1(bo, TPU_DTYPE_BOOL, 1);
  tpu_k_value_t fa[] = {vt(&tf), vi(1)};
  CHECK_STATUS(call_op1("aten::bitwise_left_shift.Tensor_Scalar", fa, 2, &tf), TPU_STATUS_UNIMPLEMENTED, "float32");
  tpu_k_value_t ba[] = {vt(&tbo), vt(&tbo)};
  CHECK_STATUS(call_op1("aten::bitwise_right_shift.Tensor", ba, 2, &tbo), TPU_STATUS_UNIMPLEMENTED, "bool");
}

static void test_isin(void) {
  /* int64 elements, small test set, invert, .out */
  int64_t e[6] = {1, 2, 3, 4, 5, 2}, t[3] = {2, 5, 9};
  uint8_t o[6];
  tpu_tensor_t te = T1(e, TPU_DTYPE_I64, 6), tt = T1(t, TPU_DTYPE_I64, 3), to = T1(o, TPU_DTYPE_BOOL, 6);
  tpu_k_value_t args[] = {vt(&te), vt(&tt), vb(false), vb(false)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor", args, 4, &to));
  CHECK(o[0] == 0 && o[1] == 1 && o[2] == 0 && o[3] == 0 && o[4] == 1 && o[5] == 1);
  tpu_k_value_t iargs[] = {vt(&te), vt(&tt), vb(false), vb(true), vt(&to)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor_out", iargs, 5, &to));
  CHECK(o[0] == 1 && o[1] == 0 && o[5] == 0);
  /* large test set (several sorted chunks), strided elements */
  enum { NT = 20000, NE = 300 };
  int32_t* tb = malloc(NT * 4);
  int64_t* eb = malloc(NE * 2 * 8);
  uint8_t* ob = malloc(NE);
  for (int i = 0; i < NT; ++i) tb[i] = (i * 7919) % 40009; /* distinct, scattered */
  for (int i = 0; i < 2 * NE; ++i) eb[i] = (i * 104729) % 40009;
  int64_t ne = NE, st2 = 2;
  tpu_tensor_t tte = T_(eb, TPU_DTYPE_I64, 1, &ne, &st2), ttb = T1(tb, TPU_DTYPE_I32, NT),
               tob = T1(ob, TPU_DTYPE_BOOL, NE);
  tpu_k_value_t bargs[] = {vt(&tte), vt(&ttb)};
  for (int inv = 0; inv < 2; ++inv) {
    tpu_k_value_t a4[] = {vt(&tte), vt(&ttb), vb(false), vb(inv)};
    CHECK_OK(call_op_pool("aten::isin.Tensor_Tensor", inv ? a4 : bargs, inv ? 4 : 2, &tob, g_pool));
    int bad = 0;
    for (int i = 0; i < NE; ++i) {
      bool in = false;
      for (int j = 0; j < NT && !in; ++j) in = tb[j] == eb[2 * i];
      if (ob[i] != (uint8_t)(in != (bool)inv)) bad++;
    }
    CHECK(bad == 0);
  }
  free(tb);
  free(eb);
  free(ob);
  /* floats: NaN never matches, -0 matches 0; compared in the common dtype */
  float fe[4] = {NAN, -0.0f, 1.5f, 2.0f};
  double ft[3] = {0.0, NAN, 2.0};
  tpu_tensor_t tfe = T1(fe, TPU_DTYPE_F32, 4), tft = T1(ft, TPU_DTYPE_F64, 3), tfo = T1(o, TPU_DTYPE_BOOL, 4);
  tpu_k_value_t fargs[] = {vt(&tfe), vt(&tft)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor", fargs, 2, &tfo));
  CHECK(o[0] == 0 && o[1] == 1 && o[2] == 0 && o[3] == 1);
  /* uint8 255 vs int8 -1: compared as int16, no match */
  uint8_t u = 255;
  int8_t m1 = -1;
  tpu_tensor_t tu = T1(&u, TPU_DTYPE_U8, 1), tm = T1(&m1, TPU_DTYPE_I8, 1), to1 = T1(o, TPU_DTYPE_BOOL, 1);
  tpu_k_value_t uargs[] = {vt(&tu), vt(&tm)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor", uargs, 2, &to1));
  CHECK(o[0] == 0);
  /* Scalar forms; empty test set (invert -> all true); empty elements */
  tpu_k_value_t sargs[] = {vt(&te), vi(4)};
  CHECK_OK(call_op1("aten::isin.Tensor_Scalar", sargs, 2, &to));
  CHECK(o[3] == 1 && o[0] == 0);
  uint8_t o0 = 0;
  tpu_tensor_t to0 = T0(&o0, TPU_DTYPE_BOOL);
  tpu_k_value_t s2[] = {vd(9.0), vt(&tt)};
  CHECK_OK(call_op1("aten::isin.Scalar_Tensor", s2, 2, &to0));
  CHECK(o0 == 1);
  tpu_tensor_t tempty = T1(NULL, TPU_DTYPE_I64, 0);
  tpu_k_value_t eargs[] = {vt(&te), vt(&tempty), vb(false), vb(true)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor", eargs, 4, &to));
  CHECK(o[0] == 1 && o[5] == 1);
  tpu_tensor_t toe = T1(NULL, TPU_DTYPE_BOOL, 0);
  tpu_k_value_t e2[] = {vt(&tempty), vt(&tt)};
  CHECK_OK(call_op1("aten::isin.Tensor_Tensor", e2, 2, &toe));
  /* bool inputs are rejected, like PyTorch */
  tpu_tensor_t tbool = T1(o, TPU_DTYPE_BOOL, 6);
  tpu_k_value_t b2[] = {vt(&tbool), vt(&tbool)};
  CHECK_STATUS(call_op1("aten::isin.Tensor_Tensor", b2, 2, &to), TPU_STATUS_UNIMPLEMENTED, "bool");
}

static void test_reduced_float_emulation(void) {
  /* div trunc by a tensor: the bf16 quotient (17.95 -> 18) is truncated */
  uint16_t a[1] = {bf(-3.890625f)}, b[1] = {bf(-0.216796875f)}, o[1];
  tpu_tensor_t ta = T1(a, TPU_DTYPE_BF16, 1), tb = T1(b, TPU_DTYPE_BF16, 1), to = T1(o, TPU_DTYPE_BF16, 1);
  uint16_t a2[2] = {a[0], a[0]}, b2[2] = {b[0], b[0]}, o2[2];
  tpu_tensor_t ta2 = T1(a2, TPU_DTYPE_BF16, 2), tb2 = T1(b2, TPU_DTYPE_BF16, 2), to2 = T1(o2, TPU_DTYPE_BF16, 2);
  tpu_k_value_t args[] = {vt(&ta2), vt(&tb2), vs("trunc")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", args, 3, &to2));
  CHECK(fb(o2[0]) == 18.0f && fb(o2[1]) == 18.0f);
  /* by a single value: float quotient, 17 */
  tpu_k_value_t sargs[] = {vt(&ta), vt(&tb), vs("trunc")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", sargs, 3, &to));
  CHECK(fb(o[0]) == 17.0f);
  tpu_k_value_t dargs[] = {vt(&ta2), vd(-0.216796875), vs("trunc")};
  CHECK_OK(call_op1("aten::div.Scalar_mode", dargs, 3, &to2));
  CHECK(fb(o2[0]) == 17.0f);
  /* floor by a tensor follows bf16 arithmetic step by step */
  enum { N = 64 };
  uint16_t fa[N], fbv[N], fo[N];
  for (int i = 0; i < N; ++i) {
    fa[i] = bf(frand(-50, 50));
    fbv[i] = bf(frand(0.1f, 3) * (i & 1 ? -1 : 1));
  }
  tpu_tensor_t tfa = T1(fa, TPU_DTYPE_BF16, N), tfb = T1(fbv, TPU_DTYPE_BF16, N), tfo = T1(fo, TPU_DTYPE_BF16, N);
  tpu_k_value_t fargs[] = {vt(&tfa), vt(&tfb), vs("floor")};
  CHECK_OK(call_op1("aten::div.Tensor_mode", fargs, 3, &tfo));
  int bad = 0;
  for (int i = 0; i < N; ++i) {
    float x = fb(fa[i]), y = fb(fbv[i]);
    float mod = fmodf(x, y);
    float div = rbf(rbf(x - mod) / y);
    if (mod != 0 && ((y < 0) != (mod < 0))) div = rbf(div - 1);
    float want = div == 0 ? copysignf(0, x / y) : floorf(div);
    if (div != 0 && rbf(div - floorf(div)) > 0.5f) want = rbf(want + 1);
    if (fo[i] != bf(want)) bad++;
  }
  CHECK(bad == 0);
  /* add with alpha: alpha rounds to bf16; whole blocks of 32 fuse (one
   * rounding), the tail of a run rounds alpha * other, then the sum */
  enum { M = 40 };
  uint16_t xa[M], xb[M], xo[M];
  for (int i = 0; i < M; ++i) {
    xa[i] = bf(frand(-10, 10));
    xb[i] = bf(frand(-10, 10));
  }
  tpu_tensor_t txa = T1(xa, TPU_DTYPE_BF16, M), txb = T1(xb, TPU_DTYPE_BF16, M), txo = T1(xo, TPU_DTYPE_BF16, M);
  tpu_k_value_t aargs[] = {vt(&txa), vt(&txb), vd(1.3)};
  CHECK_OK(call_op1("aten::add.Tensor", aargs, 3, &txo));
  float al = rbf(1.3f);
  bad = 0;
  for (int i = 0; i < M; ++i) {
    float want = i < 32 ? fmaf(fb(xb[i]), al, fb(xa[i])) : fb(xa[i]) + rbf(al * fb(xb[i]));
    if (xo[i] != bf(want)) bad++;
  }
  CHECK(bad == 0);
  /* f64: alpha fuses too */
  double da[3] = {0.1, 1e16, -3}, db[3] = {0.7, 3, 1.0 / 3}, dout[3];
  tpu_tensor_t tda = T1(da, TPU_DTYPE_F64, 3), tdb = T1(db, TPU_DTYPE_F64, 3), tdo = T1(dout, TPU_DTYPE_F64, 3);
  tpu_k_value_t d64[] = {vt(&tda), vt(&tdb), vd(0.3)};
  CHECK_OK(call_op1("aten::add.Tensor", d64, 3, &tdo));
  CHECK(dout[0] == fma(0.7, 0.3, 0.1) && dout[1] == fma(3, 0.3, 1e16) && dout[2] == fma(1.0 / 3, 0.3, -3));
}

int main(void) {
  if (!tku_start(4)) return 1;
  RUN_TEST(test_add_contiguous_alpha);
  RUN_TEST(test_broadcast);
  RUN_TEST(test_transposed_and_strided);
  RUN_TEST(test_zero_dim_and_scalars);
  RUN_TEST(test_zero_size);
  RUN_TEST(test_half_rounding);
  RUN_TEST(test_inplace_aliasing);
  RUN_TEST(test_rejected_dtypes);
  RUN_TEST(test_integer_ops);
  RUN_TEST(test_comparisons);
  RUN_TEST(test_where_masked_logical);
  RUN_TEST(test_unary_float);
  RUN_TEST(test_special_values);
  RUN_TEST(test_backward_ops);
  RUN_TEST(test_parallel_matches_serial);
  RUN_TEST(test_mixed_dtypes);
  RUN_TEST(test_vecmath_portable);
  RUN_TEST(test_vector_ops_through_kernels);
  RUN_TEST(test_float_predicates);
  RUN_TEST(test_shifts);
  RUN_TEST(test_isin);
  RUN_TEST(test_reduced_float_emulation);
  return tku_finish();
}
