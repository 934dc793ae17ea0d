/* test_k_invtrig.c - asin, acos, atan, asinh, acosh, atanh, atan2, angle,
 * fmax, fmin (kernels/elementwise.c) and _cummax_helper / _cummin_helper
 * (kernels/reduce.c) against PyTorch CPU results (torch 2.15, values printed
 * with repr). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* x = kX; k_<op>_<dtype> = torch.<op>(torch.tensor(kX, dtype=<dtype>)) on the CPU;
 * k_atan2_<dtype> = torch.atan2(x[:, None], torch.tensor(kY)[None, :]).flatten() */
static const double kX[15] = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.999, 1.5, -2.0, 10.0, 10000000000.0, INFINITY, -INFINITY, NAN, 1e-08};
static const double k_asin_f64[15] = {0.0, -0.0, 1.5707963267948966, -1.5707963267948966, 0.5235987755982989, -0.5235987755982989, 1.526071239626163, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 1e-08};
static const double k_asin_f32[15] = {0.0, -0.0, 1.5707963705062866, -1.5707963705062866, 0.5235987901687622, -0.5235987901687622, 1.526071548461914, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 9.99999993922529e-09};
static const double k_acos_f64[15] = {1.5707963267948966, 1.5707963267948966, 0.0, 3.141592653589793, 1.0471975511965976, 2.0943951023931957, 0.04472508716873345, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 1.5707963167948966};
static const double k_acos_f32[15] = {1.5707963705062866, 1.5707963705062866, 0.0, 3.1415927410125732, 1.0471975803375244, 2.094395160675049, 0.04472479969263077, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 1.5707963705062866};
static const double k_atan_f64[15] = {0.0, -0.0, 0.7853981633974483, -0.7853981633974483, 0.4636476090008061, -0.4636476090008061, 0.784897913314115, 0.982793723247329, -1.1071487177940904, 1.4711276743037347, 1.5707963266948965, 1.5707963267948966, -1.5707963267948966, NAN, 1e-08};
static const double k_atan_f32[15] = {0.0, -0.0, 0.7853981852531433, -0.7853981852531433, 0.46364760398864746, -0.46364760398864746, 0.7848979234695435, 0.9827936887741089, -1.1071487665176392, 1.4711276292800903, 1.5707963705062866, 1.5707963705062866, -1.5707963705062866, NAN, 9.99999993922529e-09};
static const double k_asinh_f64[15] = {0.0, -0.0, 0.881373587019543, -0.881373587019543, 0.48121182505960347, -0.48121182505960347, 0.8806663034322094, 1.1947632172871094, -1.4436354751788103, 2.99822295029797, 23.7189981105004, INFINITY, -INFINITY, NAN, 9.999999999999999e-09};
static const double k_asinh_f32[15] = {0.0, -0.0, 0.8813735842704773, -0.8813735842704773, 0.4812118411064148, -0.4812118411064148, 0.8806663155555725, 1.19476318359375, -1.4436354637145996, 2.998222827911377, 23.718997955322266, INFINITY, -INFINITY, NAN, 9.99999993922529e-09};
static const double k_acosh_f64[15] = {NAN, NAN, 0.0, NAN, NAN, NAN, NAN, 0.9624236501192069, NAN, 2.993222846126381, 23.7189981105004, INFINITY, NAN, NAN, NAN};
static const double k_acosh_f32[15] = {NAN, NAN, 0.0, NAN, NAN, NAN, NAN, 0.9624236822128296, NAN, 2.993222951889038, 23.718997955322266, INFINITY, NAN, NAN, NAN};
static const double k_atanh_f64[15] = {0.0, -0.0, INFINITY, -INFINITY, 0.5493061443340548, -0.5493061443340548, 3.8002011672501994, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 1.0000000000000002e-08};
static const double k_atanh_f32[15] = {0.0, -0.0, INFINITY, -INFINITY, 0.5493061542510986, -0.5493061542510986, 3.8002076148986816, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 9.99999993922529e-09};
static const double k_atan2_f64[75] = {0.0, 3.141592653589793, 0.0, 3.141592653589793, 0.0, -0.0, -3.141592653589793, -0.0, -3.141592653589793, -0.0, 0.7853981633974483, 2.356194490192345, 1.5707963267948966, 1.5707963267948966, 0.4636476090008061, -0.7853981633974483, -2.356194490192345, -1.5707963267948966, -1.5707963267948966, -0.4636476090008061, 0.4636476090008061, 2.677945044588987, 1.5707963267948966, 1.5707963267948966, 0.24497866312686414, -0.4636476090008061, -2.677945044588987, -1.5707963267948966, -1.5707963267948966, -0.24497866312686414, 0.784897913314115, 2.356694740275678, 1.5707963267948966, 1.5707963267948966, 0.4632475290061491, 0.982793723247329, 2.158798930342464, 1.5707963267948966, 1.5707963267948966, 0.6435011087932844, -1.1071487177940904, -2.0344439357957027, -1.5707963267948966, -1.5707963267948966, -0.7853981633974483, 1.4711276743037347, 1.6704649792860586, 1.5707963267948966, 1.5707963267948966, 1.373400766945016, 1.5707963266948965, 1.5707963268948966, 1.5707963267948966, 1.5707963267948966, 1.5707963265948965, 1.5707963267948966, 1.5707963267948966, 1.5707963267948966, 1.5707963267948966, 1.5707963267948966, -1.5707963267948966, -1.5707963267948966, -1.5707963267948966, -1.5707963267948966, -1.5707963267948966, NAN, NAN, NAN, NAN, NAN, 1e-08, 3.141592643589793, 1.5707963267948966, 1.5707963267948966, 5e-09};
static const double k_atan2_f32[75] = {0.0, 3.1415927410125732, 0.0, 3.1415927410125732, 0.0, -0.0, -3.1415927410125732, -0.0, -3.1415927410125732, -0.0, 0.7853981852531433, 2.356194496154785, 1.5707963705062866, 1.5707963705062866, 0.46364760398864746, -0.7853981852531433, -2.356194496154785, -1.5707963705062866, -1.5707963705062866, -0.46364760398864746, 0.46364760398864746, 2.677945137023926, 1.5707963705062866, 1.5707963705062866, 0.244978666305542, -0.46364760398864746, -2.677945137023926, -1.5707963705062866, -1.5707963705062866, -0.244978666305542, 0.7848979234695435, 2.3566946983337402, 1.5707963705062866, 1.5707963705062866, 0.46324753761291504, 0.9827937483787537, 2.158798933029175, 1.5707963705062866, 1.5707963705062866, 0.6435011029243469, -1.1071487665176392, -2.0344438552856445, -1.5707963705062866, -1.5707963705062866, -0.7853981852531433, 1.4711276292800903, 1.6704649925231934, 1.5707963705062866, 1.5707963705062866, 1.3734008073806763, 1.5707963705062866, 1.570796251296997, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, 1.5707963705062866, -1.5707963705062866, -1.5707963705062866, -1.5707963705062866, -1.5707963705062866, -1.5707963705062866, NAN, NAN, NAN, NAN, NAN, 9.99999993922529e-09, 3.1415927410125732, 1.5707963705062866, 1.5707963705062866, 4.999999969612645e-09};
static const double kY[5] = {1.0, -1.0, 0.0, -0.0, 2.0};
#define NX ((int64_t)(sizeof(kX) / sizeof(kX[0])))
#define NY ((int64_t)(sizeof(kY) / sizeof(kY[0])))

static tt_t mk(int dtype, int64_t n, int64_t stride) { return tku_alloc(dtype, 1, &n, NULL, stride, 16); }

/* NaN matches NaN, infinities and zeros match with their sign. */
static bool same(double got, double want, double rtol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want) || want == 0) return got == want && signbit(got) == signbit(want);
  return fabs(got - want) <= rtol * fabs(want);
}

/* Runs unary `op` on kX in `dt` (input strided by 2) and compares with `want`. */
static void check_unary(const char* op, int dt, const double* want) {
  tt_t x = mk(dt, NX, 2), o = mk(dt, NX, 1);
  for (int64_t i = 0; i < NX; ++i) setf(&x.t, i, kX[i]);
  tpu_k_value_t a[1] = {vt(&x.t)};
  CHECK_OK(call_op(op, 1, a, 1, &o.t));
  double rtol = dt == TPU_DTYPE_F64 ? 1e-15 : 2.4e-7;
  for (int64_t i = 0; i < NX; ++i)
    CHECKF(same(getf(&o.t, i), want[i], rtol), "%s %s x=%g: got %.17g want %.17g", op, tpu_dtype_name(dt), kX[i],
           getf(&o.t, i), want[i]);
  fr(&x);
  fr(&o);
}

static void test_unary_values(void) {
  static const struct {
    const char* op;
    const double *f64, *f32;
  } kCases[] = {
      {"aten::asin", k_asin_f64, k_asin_f32},   {"aten::acos", k_acos_f64, k_acos_f32},
      {"aten::atan", k_atan_f64, k_atan_f32},   {"aten::asinh", k_asinh_f64, k_asinh_f32},
      {"aten::acosh", k_acosh_f64, k_acosh_f32}, {"aten::atanh", k_atanh_f64, k_atanh_f32},
  };
  for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); ++c) {
    check_unary(kCases[c].op, TPU_DTYPE_F64, kCases[c].f64);
    check_unary(kCases[c].op, TPU_DTYPE_F32, kCases[c].f32);
  }
}

static void test_unary_overloads(void) {
  /* in place and out= */
  tt_t x = mk(TPU_DTYPE_F32, NX, 1), o = mk(TPU_DTYPE_F32, NX, 1);
  for (int64_t i = 0; i < NX; ++i) setf(&x.t, i, kX[i]);
  tpu_k_value_t b[2] = {vt(&x.t), vt(&o.t)};
  CHECK_OK(call_op("aten::atanh.out", 2, b, 1, &o.t));
  for (int64_t i = 0; i < NX; ++i) CHECK(same(getf(&o.t, i), k_atanh_f32[i], 2.4e-7));
  tpu_k_value_t a[1] = {vt(&x.t)};
  CHECK_OK(call_op("aten::acos_", 1, a, 1, &x.t));
  for (int64_t i = 0; i < NX; ++i) CHECK(same(getf(&x.t, i), k_acos_f32[i], 2.4e-7));
  /* int64 input, float32 output (PyTorch's meta): asin(1) = 1.5707963705062866 on the CPU */
  tt_t xi = mk(TPU_DTYPE_I64, 2, 1), of = mk(TPU_DTYPE_F32, 2, 1);
  setf(&xi.t, 0, 1);
  setf(&xi.t, 1, 2);
  tpu_k_value_t d[1] = {vt(&xi.t)};
  CHECK_OK(call_op("aten::asin", 1, d, 1, &of.t));
  CHECK(getf(&of.t, 0) == 1.5707963705062866 && isnan(getf(&of.t, 1)));
  /* a float result into an integer tensor is refused */
  CHECK_STATUS(call_op("aten::asin_", 1, d, 1, &xi.t), TPU_STATUS_UNIMPLEMENTED, "int64");
  /* bfloat16/float16: computed in float, rounded once. CPU: torch.atan(torch.tensor([0.5, 10.0],
   * dtype=torch.bfloat16)) -> [0.462890625, 1.46875]; float16 acosh([1.5, 10.0]) -> [0.9624, 2.9941] */
  static const double kb_in[2] = {0.5, 10.0}, kb_atan[2] = {0.462890625, 1.46875};
  static const double kh_in[2] = {1.5, 10.0}, kh_acosh[2] = {0.96240234375, 2.994140625};
  CHECK(tku_unary_exact("aten::atan", 0, NULL, TPU_DTYPE_BF16, kb_in, kb_atan, 2));
  CHECK(tku_unary_exact("aten::acosh", 0, NULL, TPU_DTYPE_F16, kh_in, kh_acosh, 2));
  fr(&x);
  fr(&o);
  fr(&xi);
  fr(&of);
}

/* atan2(x[:, None], y[None, :]): broadcasting, a transposed output */
static void test_atan2(void) {
  for (int pass = 0; pass < 2; ++pass) {
    int dt = pass ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
    const double* want = pass ? k_atan2_f32 : k_atan2_f64;
    int64_t sx[2] = {NX, 1}, sy[2] = {1, NY}, so[2] = {NX, NY};
    int perm[2] = {1, 0};
    tt_t x = tku_alloc(dt, 2, sx, NULL, 1, 0), y = tku_alloc(dt, 2, sy, NULL, 1, 0);
    tt_t o = tku_alloc(dt, 2, so, perm, 1, 0);
    for (int64_t i = 0; i < NX; ++i) setf(&x.t, i, kX[i]);
    for (int64_t j = 0; j < NY; ++j) setf(&y.t, j, kY[j]);
    x.t.sizes[1] = NY; /* expanded */
    x.t.strides[1] = 0;
    y.t.sizes[0] = NX;
    y.t.strides[0] = 0;
    tpu_k_value_t a[2] = {vt(&x.t), vt(&y.t)};
    CHECK_OK(call_op("aten::atan2", 2, a, 1, &o.t));
    double rtol = pass ? 2.4e-7 : 1e-15;
    for (int64_t i = 0; i < NX * NY; ++i)
      CHECKF(same(getf(&o.t, i), want[i], rtol), "atan2 %s (%g, %g): got %.17g want %.17g", tpu_dtype_name(dt),
             kX[i / NY], kY[i % NY], getf(&o.t, i), want[i]);
    fr(&x);
    fr(&y);
    fr(&o);
  }
  /* int32 operands: a float32 result; atan2(1, 2) = 0.46364760398864746 on the CPU */
  int32_t xi[2] = {1, -3}, yi[2] = {2, 0};
  float of[2];
  tpu_tensor_t tx = T1(xi, TPU_DTYPE_I32, 2), ty = T1(yi, TPU_DTYPE_I32, 2), to = T1(of, TPU_DTYPE_F32, 2);
  tpu_k_value_t a[2] = {vt(&tx), vt(&ty)};
  CHECK_OK(call_op("aten::atan2", 2, a, 1, &to));
  CHECK(of[0] == 0.46364760398864746f && of[1] == -1.5707963705062866f);
  tpu_tensor_t ti = T1(xi, TPU_DTYPE_I32, 2);
  CHECK_STATUS(call_op("aten::atan2.out", 2, a, 1, &ti), TPU_STATUS_UNIMPLEMENTED, "int32");
}

/* fmax/fmin: NaN only where both are NaN; integers as maximum/minimum; angle */
static void test_fmax_fmin_angle(void) {
  static const double ka[6] = {1.0, NAN, NAN, -0.0, -3.0, INFINITY};
  static const double kb[6] = {NAN, 2.0, NAN, 0.0, -INFINITY, 5.0};
  /* CPU: torch.fmax / torch.fmin of these */
  static const double kmax[6] = {1.0, 2.0, NAN, -0.0, -3.0, INFINITY};
  static const double kmin[6] = {1.0, 2.0, NAN, -0.0, -INFINITY, 5.0};
  int dts[4] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_F16, TPU_DTYPE_BF16};
  for (int k = 0; k < 4; ++k) {
    tt_t a = mk(dts[k], 6, 3), b = mk(dts[k], 6, 1), o = mk(dts[k], 6, 1);
    for (int64_t i = 0; i < 6; ++i) {
      setf(&a.t, i, ka[i]);
      setf(&b.t, i, kb[i]);
    }
    tpu_k_value_t args[3] = {vt(&a.t), vt(&b.t), vt(&o.t)};
    CHECK_OK(call_op("aten::fmax.out", 3, args, 1, &o.t));
    for (int64_t i = 0; i < 6; ++i)
      CHECKF(same(getf(&o.t, i), kmax[i], 0), "fmax %s [%lld]: %g", tpu_dtype_name(dts[k]), (long long)i,
             getf(&o.t, i));
    CHECK_OK(call_op("aten::fmin", 2, args, 1, &o.t));
    for (int64_t i = 0; i < 6; ++i)
      CHECKF(same(getf(&o.t, i), kmin[i], 0), "fmin %s [%lld]: %g", tpu_dtype_name(dts[k]), (long long)i,
             getf(&o.t, i));
    fr(&a);
    fr(&b);
    fr(&o);
  }
  int64_t ia[3] = {INT64_MAX, -5, 7}, ib[3] = {INT64_MAX - 1, 3, 7}, io[3];
  tpu_tensor_t ta = T1(ia, TPU_DTYPE_I64, 3), tb = T1(ib, TPU_DTYPE_I64, 3), tio = T1(io, TPU_DTYPE_I64, 3);
  tpu_k_value_t iargs[2] = {vt(&ta), vt(&tb)};
  CHECK_OK(call_op("aten::fmax", 2, iargs, 1, &tio));
  CHECK(io[0] == INT64_MAX && io[1] == 3 && io[2] == 7);
  CHECK_OK(call_op("aten::fmin", 2, iargs, 1, &tio));
  CHECK(io[0] == INT64_MAX - 1 && io[1] == -5 && io[2] == 7);
  /* angle of real inputs: pi below zero, else 0 (-0.0 too), NaN stays NaN;
   * integers give float32 (PyTorch's meta) */
  static const double kang_in[6] = {-2.0, -0.0, 0.0, 3.0, NAN, -INFINITY};
  static const double kang_f64[6] = {3.141592653589793, 0.0, 0.0, 0.0, NAN, 3.141592653589793};
  static const double kang_f32[6] = {3.1415927410125732, 0.0, 0.0, 0.0, NAN, 3.1415927410125732};
  for (int k = 0; k < 2; ++k) {
    int dt = k ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
    tt_t x = mk(dt, 6, 2), o = mk(dt, 6, 1);
    for (int64_t i = 0; i < 6; ++i) setf(&x.t, i, kang_in[i]);
    tpu_k_value_t a[2] = {vt(&x.t), vt(&o.t)};
    CHECK_OK(call_op(k ? "aten::angle" : "aten::angle.out", k ? 1 : 2, a, 1, &o.t));
    for (int64_t i = 0; i < 6; ++i)
      CHECKF(same(getf(&o.t, i), (k ? kang_f32 : kang_f64)[i], 0), "angle %s [%lld]: %g", tpu_dtype_name(dt),
             (long long)i, getf(&o.t, i));
    fr(&x);
    fr(&o);
  }
  int16_t ai[3] = {-1, 0, 5};
  uint16_t ah[3];
  tpu_tensor_t tai = T1(ai, TPU_DTYPE_I16, 3), tah = T1(ah, TPU_DTYPE_F16, 3);
  tpu_k_value_t aa[1] = {vt(&tai)};
  CHECK_OK(call_op("aten::angle", 1, aa, 1, &tah));
  /* pi in float16 is 3.140625 */
  CHECK(tpu_ku_f16_to_f32(ah[0]) == 3.140625f && tpu_ku_f16_to_f32(ah[1]) == 0.0f && tpu_ku_f16_to_f32(ah[2]) == 0.0f);
}

/* _cummax_helper / _cummin_helper(self, values, indices, dim) */
static void cumext(const char* op, const tpu_tensor_t* x, const tpu_tensor_t* v, const tpu_tensor_t* ix, int64_t dim) {
  tpu_k_value_t a[4] = {vt(x), vt(v), vt(ix), vi(dim)};
  CHECK_OK(call_op(op, 4, a, 0, NULL));
}

static void test_cummax_cummin(void) {
  /* CPU: torch.cummax / torch.cummin of kc (float32 and float64, input strided) */
  static const double kc[7] = {1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0};
  static const double kcmax[7] = {1.0, 3.0, 3.0, NAN, NAN, NAN, NAN};
  static const int64_t kcmax_i[7] = {0, 1, 2, 3, 3, 5, 5};
  static const double kcmin[7] = {1.0, 1.0, 1.0, NAN, NAN, NAN, NAN};
  static const int64_t kcmin_i[7] = {0, 0, 0, 3, 3, 5, 5};
  /* ties take the later index; -0.0 and 0.0 tie: cummin keeps the later one's sign */
  static const double kd[7] = {2.0, -0.0, 0.0, 1.0, -1.0, -1.0, 4.0};
  static const double kdmax[7] = {2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 4.0};
  static const int64_t kdmax_i[7] = {0, 0, 0, 0, 0, 0, 6};
  static const double kdmin[7] = {2.0, -0.0, 0.0, 0.0, -1.0, -1.0, -1.0};
  static const int64_t kdmin_i[7] = {0, 1, 2, 2, 4, 5, 5};
  int dts[4] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_F16};
  for (int k = 0; k < 4; ++k) {
    tt_t x = mk(dts[k], 7, 2), v = mk(dts[k], 7, 1), ix = mk(TPU_DTYPE_I64, 7, 1);
    for (int pass = 0; pass < 4; ++pass) {
      const double* in = pass < 2 ? kc : kd;
      const double* wv = pass == 0 ? kcmax : pass == 1 ? kcmin : pass == 2 ? kdmax : kdmin;
      const int64_t* wi = pass == 0 ? kcmax_i : pass == 1 ? kcmin_i : pass == 2 ? kdmax_i : kdmin_i;
      for (int64_t i = 0; i < 7; ++i) setf(&x.t, i, in[i]);
      cumext(pass % 2 ? "aten::_cummin_helper" : "aten::_cummax_helper", &x.t, &v.t, &ix.t, -1);
      for (int64_t i = 0; i < 7; ++i)
        CHECKF(same(getf(&v.t, i), wv[i], 0) && geti(&ix.t, i) == wi[i], "%s pass %d [%lld]: %g at %lld",
               tpu_dtype_name(dts[k]), pass, (long long)i, getf(&v.t, i), (long long)geti(&ix.t, i));
    }
    fr(&x);
    fr(&v);
    fr(&ix);
  }
  /* int64 along dim 0 and int64 cummin along dim 1 of a transposed input;
   * values beyond float's precision must still compare exactly */
  static const int64_t kz[9] = {3, 1, 2, 1, 5, 2, 3, 0, 2};
  static const int64_t kzmax0[9] = {3, 1, 2, 3, 5, 2, 3, 5, 2}, kzmax0_i[9] = {0, 0, 0, 0, 1, 1, 2, 1, 2};
  static const int64_t kzmin1[9] = {3, 1, 1, 1, 1, 1, 3, 0, 0}, kzmin1_i[9] = {0, 1, 1, 0, 0, 0, 0, 1, 1};
  int64_t s2[2] = {3, 3};
  int perm[2] = {1, 0};
  tt_t z = tku_alloc(TPU_DTYPE_I64, 2, s2, perm, 1, 0), zv = tku_alloc(TPU_DTYPE_I64, 2, s2, NULL, 1, 0);
  tt_t zi = tku_alloc(TPU_DTYPE_I64, 2, s2, perm, 1, 0);
  const int64_t big = (int64_t)1 << 60;
  for (int64_t i = 0; i < 9; ++i) {
    int64_t idx[2] = {i / 3, i % 3};
    *(int64_t*)ep(&z.t, idx) = big + kz[i];
  }
  cumext("aten::_cummax_helper", &z.t, &zv.t, &zi.t, 0);
  for (int64_t i = 0; i < 9; ++i)
    CHECKF(geti(&zv.t, i) == big + kzmax0[i] && geti(&zi.t, i) == kzmax0_i[i], "int64 cummax [%lld]", (long long)i);
  cumext("aten::_cummin_helper", &z.t, &zv.t, &zi.t, 1);
  for (int64_t i = 0; i < 9; ++i)
    CHECKF(geti(&zv.t, i) == big + kzmin1[i] && geti(&zi.t, i) == kzmin1_i[i], "int64 cummin [%lld]", (long long)i);
  /* bool: CPU cummax([F, T, F, T]) = [F, T, T, T] at [0, 1, 1, 3]; cummin = all F at [0, 0, 2, 2] */
  uint8_t bx[4] = {0, 1, 0, 1}, bv[4];
  int64_t bi[4];
  tpu_tensor_t tbx = T1(bx, TPU_DTYPE_BOOL, 4), tbv = T1(bv, TPU_DTYPE_BOOL, 4), tbi = T1(bi, TPU_DTYPE_I64, 4);
  cumext("aten::_cummax_helper", &tbx, &tbv, &tbi, 0);
  CHECK(bv[0] == 0 && bv[1] == 1 && bv[2] == 1 && bv[3] == 1 && bi[0] == 0 && bi[1] == 1 && bi[2] == 1 && bi[3] == 3);
  cumext("aten::_cummin_helper", &tbx, &tbv, &tbi, 0);
  CHECK(bv[0] == 0 && bv[1] == 0 && bv[2] == 0 && bv[3] == 0 && bi[0] == 0 && bi[1] == 0 && bi[2] == 2 && bi[3] == 2);
  /* wrong dtypes and dims are refused */
  tpu_k_value_t bad[4] = {vt(&z.t), vt(&zv.t), vt(&zv.t), vi(0)};
  tpu_tensor_t zf = z.t;
  zf.dtype = TPU_DTYPE_F64;
  bad[1] = vt(&zf);
  CHECK_STATUS(call_op("aten::_cummax_helper", 4, bad, 0, NULL), TPU_STATUS_FAILED_PRECONDITION, "values");
  bad[1] = vt(&zv.t);
  bad[3] = vi(2);
  CHECK_STATUS(call_op("aten::_cummax_helper", 4, bad, 0, NULL), TPU_STATUS_OUT_OF_RANGE, "Dimension");
  fr(&z);
  fr(&zv);
  fr(&zi);
}

int main(void) {
  if (!tku_start(3)) return 1;
  RUN_TEST(test_unary_values);
  RUN_TEST(test_unary_overloads);
  RUN_TEST(test_atan2);
  RUN_TEST(test_fmax_fmin_angle);
  RUN_TEST(test_cummax_cummin);
  return tku_finish();
}
