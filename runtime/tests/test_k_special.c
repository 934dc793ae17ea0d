/* test_k_special.c - lgamma, digamma, polygamma, erfc, erfcx, cosh, sinh,
 * i0, i0e, i1, i1e
 * against PyTorch CPU results (torch 2.15, values printed with repr). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* x = kX; k_<op>_<dtype> = torch.<op>(torch.tensor(kX, dtype=<dtype>)) on the CPU */
static const double kX[15] = {0.0, -1.0, -2.5, -0.5, 0.5, 1.5, 3.0, 7.25, 12.0, 30.0, 0.001, INFINITY, NAN, -30.0, 40.0};
static const double k_lgamma_f64[15] = {INFINITY, INFINITY, -0.05624371649767405, 1.2655121234846454, 0.5723649429247001, -0.12078223763524522, 0.6931471805599453, 7.0521854507385395, 17.502307845873887, 71.25703896716801, 6.907178885383853, INFINITY, NAN, INFINITY, 106.63176026064346};
static const double k_lgamma_f32[15] = {INFINITY, INFINITY, -0.056243717670440674, 1.2655121088027954, 0.5723649263381958, -0.12078223377466202, 0.6931471824645996, 7.052185535430908, 17.502307891845703, 71.25704193115234, 6.90717887878418, INFINITY, NAN, INFINITY, 106.63175964355469};
static const double k_digamma_f64[15] = {-INFINITY, NAN, 1.1031566406452433, 0.03648997397857639, -1.9635100260214229, 0.036489973978576194, 0.922784335098467, 1.910453526883736, 2.4426616799758123, 3.384438132685525, -1000.5755719318104, INFINITY, NAN, NAN, 3.6763273740348428};
static const double k_digamma_f32[15] = {-INFINITY, NAN, 1.1031566858291626, 0.03648991510272026, -1.9635108709335327, 0.03648991510272026, 0.9227842092514038, 1.9104535579681396, 2.4426615238189697, 3.3844382762908936, -1000.5755615234375, INFINITY, NAN, NAN, 3.6763274669647217};
static const double k_erfc_f64[15] = {1.0, 1.8427007929497148, 1.999593047982555, 1.5204998778130465, 0.4795001221869535, 0.033894853524689274, 2.209049699858544e-05, 1.1466900814815012e-24, 1.3562611692059042e-64, 0.0, 0.9988716212090307, 0.0, NAN, 2.0, 0.0};
static const double k_erfc_f32[15] = {1.0, 1.8427008390426636, 1.9995930194854736, 1.5204999446868896, 0.4795001149177551, 0.0338948518037796, 2.2090496713644825e-05, 1.1466900853739127e-24, 0.0, 0.0, 0.9988716244697571, 0.0, NAN, 2.0, 0.0};
static const double k_erfcx_f64[15] = {1.0, 5.008980080762283, 1035.8148429726227, 1.952360489182557, 0.6156903441929258, 0.3215854164543176, 0.17900115118138998, 0.0770991803512599, 0.04685422101489376, 0.018795888861416754, 0.9988726200811509, 0.0, NAN, INFINITY, 0.014100335983377815};
static const double k_erfcx_f32[15] = {1.0, 5.0089802742004395, 1035.8148193359375, 1.9523606300354004, 0.6156902313232422, 0.32158541679382324, 0.17900115251541138, 0.07709918916225433, 0.04685422033071518, 0.018795888870954514, 0.9988726377487183, 0.0, NAN, INFINITY, 0.014100335538387299};
static const double k_cosh_f64[15] = {1.0, 1.5430806348152437, 6.132289479663686, 1.1276259652063807, 1.1276259652063807, 2.352409615243247, 10.067661995777765, 704.0527791895422, 81377.39571257407, 5343237290762.231, 1.0000005000000416, INFINITY, NAN, 5343237290762.231, 1.1769263341851e+17};
static const double k_cosh_f32[15] = {1.0, 1.5430805683135986, 6.132289409637451, 1.1276259422302246, 1.1276259422302246, 2.352409601211548, 10.067662239074707, 704.0527954101562, 81377.3984375, 5343237111808.0, 1.0000004768371582, INFINITY, NAN, 5343237111808.0, 1.176926351702098e+17};
static const double k_sinh_f64[15] = {0.0, -1.1752011936438014, -6.0502044810397875, -0.5210953054937474, 0.5210953054937474, 2.1292794550948173, 10.017874927409903, 704.0520690151534, 81377.39570642984, 5343237290762.231, 0.001000000166666675, INFINITY, NAN, -5343237290762.231, 1.1769263341851e+17};
static const double k_sinh_f32[15] = {0.0, -1.175201177597046, -6.050204753875732, -0.5210952758789062, 0.5210952758789062, 2.129279375076294, 10.017874717712402, 704.0520629882812, 81377.3984375, 5343237111808.0, 0.0010000001639127731, INFINITY, NAN, -5343237111808.0, 1.176926351702098e+17};
static const double k_poly1_f64[15] = {INFINITY, 6.580790147320947e+32, 9.53924664493752, 8.934802200117687, 4.934802202073678, 0.9348022009716718, 0.39493406693194577, 0.14787923316154666, 0.08690187287193527, 0.03389506035774027, 1000001.6425331949, 0.0, NAN, 8.494017819538807e+28, 0.025315103841291063};
static const double k_poly1_f32[15] = {INFINITY, 1291369695936512.0, 9.539247512817383, 8.934802055358887, 4.934802055358887, 0.934802234172821, 0.3949340581893921, 0.1478792428970337, 0.08690187335014343, 0.033895060420036316, 1000001.5625, 0.0, NAN, 173512853553152.0, 0.02531510591506958};
static const double k_poly2_f64[15] = {-INFINITY, -INFINITY, -0.1082040516417282, -0.82879664423432, -16.828796644234316, -0.8287966442343201, -0.15411380631918856, -0.021828952295197733, -0.007547205368998914, -0.0011487652037285997, -2000000002.3976321, NAN, NAN, -INFINITY, -0.0006408202718352985};
static const double k_poly2_f32[15] = {-INFINITY, -INFINITY, -0.10820404440164566, -0.8287966251373291, -16.82879638671875, -0.8287966251373291, -0.15411381423473358, -0.02182895317673683, -0.007547205314040184, -0.0011487652081996202, -1999999744.0, NAN, NAN, -INFINITY, -0.0006408202461898327};
static const double k_poly3_f64[15] = {INFINITY, INFINITY, 194.74787621918756, 193.40909103400242, 97.40909103400242, 1.4090910340024367, 0.11893940226682916, 0.006433037597940158, 0.001310093231070826, 7.786003664736127e-05, 6000000000006.467, NAN, NAN, INFINITY, 3.24414001515635e-05};
static const double k_poly3_f32[15] = {INFINITY, INFINITY, 194.74789428710938, 193.40908813476562, 97.40908813476562, 1.4090911149978638, 0.11893940716981888, 0.006433037109673023, 0.001310093211941421, 7.786003698129207e-05, 5999999057920.0, NAN, NAN, INFINITY, 3.244139952585101e-05};
static const double k_i0_f64[15] = {1.0, 1.2660658777520082, 3.289839144050123, 1.0634833707413236, 1.0634833707413236, 1.6467231897728907, 4.880792585865024, 212.55834116279757, 18948.92534929631, 781672297823.9775, 1.0000002500000158, NAN, NAN, 781672297823.9775, 1.48947747934199e+16};
static const double k_i0_f32[15] = {0.9999999403953552, 1.2660659551620483, 3.289839506149292, 1.063483476638794, 1.063483476638794, 1.6467232704162598, 4.880792617797852, 212.55836486816406, 18948.92578125, 781672185856.0, 1.000000238418579, NAN, NAN, 781672185856.0, 1.4894775857577984e+16};
static const double k_i0e_f64[15] = {1.0, 0.46575960759364043, 0.27004644161220276, 0.6450352704491501, 0.6450352704491501, 0.36743360905415834, 0.24300035416182536, 0.1509534900286758, 0.11642622121344044, 0.0731459464822373, 0.9990007495835156, 0.0, NAN, 0.0731459464822373, 0.06327827987523532};
static const double k_i0e_f32[15] = {0.9999999403953552, 0.46575963497161865, 0.2700464725494385, 0.6450353264808655, 0.6450353264808655, 0.3674336373806, 0.2430003583431244, 0.1509535014629364, 0.11642621457576752, 0.07314594089984894, 0.9990006685256958, 0.0, NAN, 0.07314594089984894, 0.06327828019857407};
static const double k_i1_f64[15] = {0.0, -0.5651591039924851, -2.5167162452886984, -0.25789430539089636, 0.25789430539089636, 0.9816664285779075, 3.9533702174026093, 197.3015658656382, 18141.348781638833, 768532038938.9569, 0.0005000000625000028, NAN, NAN, -768532038938.9569, 1.4707396163259354e+16};
static const double k_i1_f32[15] = {0.0, -0.5651590824127197, -2.5167160034179688, -0.25789427757263184, 0.25789427757263184, 0.9816664457321167, 3.9533705711364746, 197.30160522460938, 18141.349609375, 768532021248.0, 0.0005000000819563866, NAN, NAN, -768532021248.0, 1.4707397171871744e+16};
static const double k_i1e_f64[15] = {0.0, -0.2079104153497085, -0.20658464953126654, -0.15642080318487173, 0.15642080318487173, 0.21903938742092566, 0.19682671329730084, 0.14011851895630753, 0.111464299290181, 0.07191633059864755, 0.0004995003123542215, 0.0, NAN, -0.07191633059864755, 0.06248222907444206};
static const double k_i1e_f32[15] = {0.0, -0.207910418510437, -0.206584632396698, -0.15642079710960388, 0.15642079710960388, 0.2190394103527069, 0.1968267261981964, 0.1401185542345047, 0.11146429926156998, 0.07191632688045502, 0.0004995003691874444, 0.0, NAN, -0.07191632688045502, 0.06248223036527634};
#define NX ((int64_t)(sizeof(kX) / sizeof(kX[0])))

static tt_t mk(int dtype, int64_t n, int64_t stride) { return tku_alloc(dtype, 1, &n, NULL, stride, 16); }
static double get1(const tpu_tensor_t* t, int64_t i) {
  return tpu_ku_load_f64((char*)t->data + i * t->strides[0] * (int64_t)tpu_dtype_size(t->dtype), t->dtype);
}
static void set1(const tpu_tensor_t* t, int64_t i, double v) {
  tpu_ku_store_f64((char*)t->data + i * t->strides[0] * (int64_t)tpu_dtype_size(t->dtype), t->dtype, v);
}

static bool same(double got, double want, double rtol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= rtol * fabs(want) + 1e-300;
}

/* Runs `op` (args: the input, then `n` if n >= 0 for polygamma) on kX in
 * `dt` (input strided by 2) and compares with `want`. */
static void check_op(const char* op, int64_t n, int dt, const double* want) {
  tt_t x = mk(dt, NX, 2), o = mk(dt, NX, 1);
  for (int64_t i = 0; i < NX; ++i) set1(&x.t, i, kX[i]);
  tpu_k_value_t a[2] = {vi(n), vt(&x.t)};
  if (n >= 0) CHECK_OK(call_op(op, 2, a, 1, &o.t));
  else CHECK_OK(call_op(op, 1, a + 1, 1, &o.t));
  double rtol = dt == TPU_DTYPE_F64 ? 1e-12 : 2e-6;
  for (int64_t i = 0; i < NX; ++i)
    CHECKF(same(get1(&o.t, i), want[i], rtol), "%s(n=%lld) %s x=%g: got %.17g want %.17g", op, (long long)n,
           tpu_dtype_name(dt), kX[i], get1(&o.t, i), want[i]);
  fr(&x);
  fr(&o);
}

static void test_values(void) {
  static const struct {
    const char* op;
    int64_t n;
    const double *f64, *f32;
  } kCases[] = {
      {"aten::lgamma", -1, k_lgamma_f64, k_lgamma_f32},   {"aten::digamma", -1, k_digamma_f64, k_digamma_f32},
      {"aten::erfc", -1, k_erfc_f64, k_erfc_f32},         {"aten::special_erfcx", -1, k_erfcx_f64, k_erfcx_f32},
      {"aten::cosh", -1, k_cosh_f64, k_cosh_f32},         {"aten::sinh", -1, k_sinh_f64, k_sinh_f32},
      {"aten::polygamma", 0, k_digamma_f64, k_digamma_f32}, {"aten::polygamma", 1, k_poly1_f64, k_poly1_f32},
      {"aten::polygamma", 2, k_poly2_f64, k_poly2_f32},   {"aten::polygamma", 3, k_poly3_f64, k_poly3_f32},
      {"aten::i0", -1, k_i0_f64, k_i0_f32},               {"aten::special_i0e", -1, k_i0e_f64, k_i0e_f32},
      {"aten::special_i1", -1, k_i1_f64, k_i1_f32},       {"aten::special_i1e", -1, k_i1e_f64, k_i1e_f32},
  };
  for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); ++c) {
    check_op(kCases[c].op, kCases[c].n, TPU_DTYPE_F64, kCases[c].f64);
    check_op(kCases[c].op, kCases[c].n, TPU_DTYPE_F32, kCases[c].f32);
  }
}

static void test_overloads_and_dtypes(void) {
  /* in place: polygamma_(Tensor self, int n) */
  tt_t x = mk(TPU_DTYPE_F32, NX, 1);
  for (int64_t i = 0; i < NX; ++i) set1(&x.t, i, kX[i]);
  tpu_k_value_t a[2] = {vt(&x.t), vi(2)};
  CHECK_OK(call_op("aten::polygamma_", 2, a, 1, &x.t));
  for (int64_t i = 0; i < NX; ++i) CHECK(same(get1(&x.t, i), k_poly2_f32[i], 2e-6));
  /* out=: lgamma.out, the out tensor is the last argument */
  for (int64_t i = 0; i < NX; ++i) set1(&x.t, i, kX[i]);
  tt_t o = mk(TPU_DTYPE_F32, NX, 1);
  tpu_k_value_t b[2] = {vt(&x.t), vt(&o.t)};
  CHECK_OK(call_op("aten::lgamma.out", 2, b, 1, &o.t));
  for (int64_t i = 0; i < NX; ++i) CHECK(same(get1(&o.t, i), k_lgamma_f32[i], 2e-6));
  /* negative order */
  tpu_k_value_t c[2] = {vi(-1), vt(&x.t)};
  CHECK_STATUS(call_op("aten::polygamma", 2, c, 1, &o.t), TPU_STATUS_INVALID_ARGUMENT, "negative n");
  /* int64 input, float32 output: digamma(3) = 0.9227842092514038 on the CPU */
  tt_t xi = mk(TPU_DTYPE_I64, 2, 1), of = mk(TPU_DTYPE_F32, 2, 1);
  set1(&xi.t, 0, 3);
  set1(&xi.t, 1, 0);
  tpu_k_value_t d[1] = {vt(&xi.t)};
  CHECK_OK(call_op("aten::digamma", 1, d, 1, &of.t));
  CHECK(get1(&of.t, 0) == 0.9227842092514038 && isinf(get1(&of.t, 1)) && get1(&of.t, 1) < 0);
  /* bfloat16: computed in float, rounded once. CPU: torch.lgamma(torch.tensor([2.5, 7.25],
   * dtype=torch.bfloat16)) -> [0.28515625, 7.0625] */
  static const double kb_in[2] = {2.5, 7.25}, kb_lgamma[2] = {0.28515625, 7.0625};
  CHECK(tku_unary_exact("aten::lgamma", 0, NULL, TPU_DTYPE_BF16, kb_in, kb_lgamma, 2));
  /* float16 polygamma, n >= 2: zeta rounded to float16 before the product, as the CPU.
   * CPU: torch.polygamma(5, torch.tensor([1., -0.5], dtype=torch.half)) -> [122.125, 15376.0] */
  static const double kh_in[2] = {1.0, -0.5}, kh_poly5[2] = {122.125, 15376.0};
  tpu_k_value_t five = vi(5);
  CHECK(tku_unary_exact("aten::polygamma", 1, &five, TPU_DTYPE_F16, kh_in, kh_poly5, 2));
  /* float erfcx of a negative argument: 2 exp(x^2) in float, as the CPU (-8 -> 1.2470297683507698e+28) */
  tt_t xn = mk(TPU_DTYPE_F32, 1, 1), on = mk(TPU_DTYPE_F32, 1, 1);
  set1(&xn.t, 0, -8.0);
  tpu_k_value_t g[1] = {vt(&xn.t)};
  CHECK_OK(call_op("aten::special_erfcx", 1, g, 1, &on.t));
  CHECKF(get1(&on.t, 0) == 1.2470297683507698e+28, "erfcx(-8) %.17g", get1(&on.t, 0));
  fr(&xn);
  fr(&on);
  /* erfcx has no float16/bfloat16 kernel on the CPU: neither here; integer outputs never */
  tt_t xb = mk(TPU_DTYPE_BF16, 2, 1), ob = mk(TPU_DTYPE_BF16, 2, 1);
  tpu_k_value_t e[1] = {vt(&xb.t)};
  CHECK_STATUS(call_op("aten::special_erfcx", 1, e, 1, &ob.t), TPU_STATUS_UNIMPLEMENTED, "bfloat16");
  tpu_k_value_t f[1] = {vt(&x.t)};
  CHECK_STATUS(call_op("aten::cosh", 1, f, 1, &xi.t), TPU_STATUS_UNIMPLEMENTED, "int64");
  fr(&x); fr(&o); fr(&xi); fr(&of); fr(&xb); fr(&ob);
}

static void test_large(void) {
  /* parallel split over the pool, matches the serial value */
  int64_t n = 50000;
  tt_t x = mk(TPU_DTYPE_F64, n, 1), o = mk(TPU_DTYPE_F64, n, 1);
  for (int64_t i = 0; i < n; ++i) set1(&x.t, i, 0.25 + (double)(i % 100));
  tpu_k_value_t a[2] = {vi(4), vt(&x.t)};
  CHECK_OK(call_op("aten::polygamma", 2, a, 1, &o.t));
  bool good = true;
  for (int64_t i = 100; i < n; ++i) good = good && get1(&o.t, i) == get1(&o.t, i % 100);
  CHECK(good);
  fr(&x);
  fr(&o);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_values);
  RUN_TEST(test_overloads_and_dtypes);
  RUN_TEST(test_large);
  return tku_finish();
}
