/* test_k_special2.c - log10, hypot, nextafter, gcd, lcm (kernels/elementwise.c)
 * and frexp, igamma, igammac, special_ndtri, special_zeta, the modified and
 * spherical Bessel functions, the Bessel functions J0, J1, Y0, Y1, Airy's Ai
 * and the orthogonal polynomials (kernels/special.c) against PyTorch CPU
 * results (torch 2.15, values printed with repr); J, Y and Ai also against
 * their integral representations and series, computed here. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* k_<op>_<dtype> = torch.<op>(torch.tensor(kA, dtype), torch.tensor(kB, dtype)) for the
 * binary ops, (kPX, kPN) for the polynomials, (kX) for log10 and ndtri; kF for frexp;
 * kG* for gcd and lcm. */
static const double kA[16] = {0.0, -0.0, 0.5, 1.0, -1.0, 2.5, 3.0, 10.0, 30.0, 0.999, -0.5, 0.001, INFINITY, NAN, 100.0, 7.0};
static const double kB[16] = {0.0, 1.0, 2.0, 0.0, 3.0, 2.0, -1.0, 5.0, 25.0, 12.0, 2.0, 0.5, 3.0, 1.0, 120.0, INFINITY};
static const double k_hypot_f64[16] = {0.0, 1.0, 2.0615528128088303, 1.0, 3.1622776601683795, 3.2015621187164243, 3.1622776601683795, 11.180339887498949, 39.05124837953327, 12.041511574549101, 2.0615528128088303, 0.500000999999, INFINITY, NAN, 156.20499351813308, INFINITY};
static const double k_hypot_f32[16] = {0.0, 1.0, 2.0615527629852295, 1.0, 3.1622776985168457, 3.2015621662139893, 3.1622776985168457, 11.180339813232422, 39.051246643066406, 12.041511535644531, 2.0615527629852295, 0.5000010132789612, INFINITY, NAN, 156.20498657226562, INFINITY};
static const double k_nextafter_f64[16] = {0.0, 5e-324, 0.5000000000000001, 0.9999999999999999, -0.9999999999999999, 2.4999999999999996, 2.9999999999999996, 9.999999999999998, 29.999999999999996, 0.9990000000000001, -0.49999999999999994, 0.0010000000000000002, 1.7976931348623157e+308, NAN, 100.00000000000001, 7.000000000000001};
static const double k_nextafter_f32[16] = {0.0, 1.401298464324817e-45, 0.5000000596046448, 0.9999999403953552, -0.9999999403953552, 2.499999761581421, 2.999999761581421, 9.999999046325684, 29.999998092651367, 0.999000072479248, -0.4999999701976776, 0.0010000001639127731, 3.4028234663852886e+38, NAN, 100.00000762939453, 7.000000476837158};
static const double k_igamma_f64[16] = {NAN, 1.0, 0.9544997361036415, 0.0, NAN, 0.4505840486472197, NAN, 0.031828057306204756, 0.18210391575658647, 0.9999938750518612, NAN, 0.9994399333435291, 0.0, NAN, 0.9721362600793289, 1.0};
static const double k_igamma_f32[16] = {NAN, 1.0, 0.9544997215270996, 0.0, NAN, 0.4505840241909027, NAN, 0.03182806819677353, 0.18210388720035553, 0.9999938607215881, NAN, 0.9994398355484009, 0.0, NAN, 0.9721361994743347, 1.0};
static const double k_igammac_f64[16] = {NAN, 0.0, 0.045500263896358445, 1.0, NAN, 0.5494159513527803, NAN, 0.9681719426937953, 0.8178960842434135, 6.124948138782076e-06, NAN, 0.0005600666564708134, 1.0, NAN, 0.027863739920671086, 0.0};
static const double k_igammac_f32[16] = {NAN, 0.0, 0.0455002635717392, 1.0, NAN, 0.5494158864021301, NAN, 0.9681719541549683, 0.8178961277008057, 6.124948868091451e-06, NAN, 0.0005600396543741226, 1.0, NAN, 0.027863750234246254, 0.0};
static const double k_zeta_f64[16] = {NAN, NAN, NAN, INFINITY, NAN, 0.34148725725091705, INFINITY, 1.2386569324880047e-07, 1.6827250307301748e-42, NAN, NAN, NAN, NAN, NAN, 2.1501999128536025e-208, NAN};
static const double k_zeta_f32[16] = {NAN, NAN, NAN, INFINITY, NAN, 0.34148725867271423, INFINITY, 1.2386568926103791e-07, 1.6829594556541053e-42, NAN, NAN, NAN, NAN, NAN, 0.0, NAN};
static const double kPX[16] = {-1.0, 1.0, 0.0, 0.5, -0.5, 0.25, 0.999, 1.5, -2.0, 0.3, 0.7, NAN, 0.5, 0.5, 0.5, -0.75};
static const double kPN[16] = {3.0, 4.0, 5.0, 2.0, 7.0, 9.0, 12.0, 6.0, 5.0, 0.0, 1.0, 3.0, -1.0, NAN, 2.5, 30.0};
static const double k_chebyshev_polynomial_t_f64[16] = {-1.0, 1.0, 0.0, -0.5, -0.5000000000000006, 0.7626953125000004, 0.859400122001495, 161.0, -362.0, 1.0, 0.7, NAN, 0.0, 0.0, -0.5, -0.9526013056747613};
static const double k_chebyshev_polynomial_t_f32[16] = {-1.0, 1.0, 0.0, -0.5, -0.5000007748603821, 0.7626953721046448, 0.8594018816947937, 161.0, -362.0, 1.0, 0.699999988079071, NAN, 0.0, 0.0, -0.5, -0.9525995850563049};
static const double k_chebyshev_polynomial_u_f64[16] = {-4.0, 5.0, 0.0, 0.0, -1.0, 0.5957031249999996, 12.283920867943365, 377.0, -780.0, 1.0, 1.4, NAN, 0.0, 0.0, 0.0, -0.6076464904472241};
static const double k_chebyshev_polynomial_u_f32[16] = {-4.0, 5.0, 0.0, 0.0, -1.0, 0.5957033038139343, 12.283929824829102, 377.0, -780.0, 1.0, 1.399999976158142, NAN, 0.0, 0.0, 0.0, -0.6076452732086182};
static const double k_chebyshev_polynomial_v_f64[16] = {-7.0, 1.0, -1.0, -1.0, -2.0, 1.263671875, 0.8479641652988504, 233.0, -989.0, 1.0, 0.3999999999999999, NAN, 0.0, 0.0, -1.0, -0.1477067368105053};
static const double k_chebyshev_polynomial_v_f32[16] = {-7.0, 1.0, -1.0, -1.0, -2.0, 1.263671875, 0.8479660749435425, 233.0, -989.0, 1.0, 0.3999999761581421, NAN, 0.0, 0.0, -1.0, -0.1476975679397583};
static const double k_chebyshev_polynomial_w_f64[16] = {-1.0, 9.0, 1.0, 1.0, 0.0, -0.07226562499999982, 23.71987757058788, 521.0, -571.0, 1.0, 2.4, NAN, 0.0, 0.0, 1.0, -1.067586244083941};
static const double k_chebyshev_polynomial_w_f32[16] = {-1.0, 9.0, 1.0, 1.0, 0.0, -0.07226614654064178, 23.719894409179688, 521.0, -571.0, 1.0, 2.4000000953674316, NAN, 0.0, 0.0, 1.0, -1.0675864219665527};
static const double k_shifted_chebyshev_polynomial_t_f64[16] = {-99.0, 1.0, -1.0, -1.0, -5042.0, 1.0, 0.7254742010330997, 1351.0, -47525.0, 1.0, 0.3999999999999999, NAN, 0.0, 0.0, -1.0, 1.295799745631574e+20};
static const double k_shifted_chebyshev_polynomial_t_f32[16] = {-99.0, 1.0, -1.0, -1.0, -5042.0, 1.0, 0.7254775762557983, 1351.0, -47525.0, 1.0, 0.3999999761581421, NAN, 0.0, 0.0, -1.0, 1.2957996981209897e+20};
static const double k_shifted_chebyshev_polynomial_u_f64[16] = {-204.0, 5.0, -6.0, -1.0, -10864.0, 0.999999999999998, 11.5913220308831, 2911.0, -96030.0, 1.0, 0.7999999999999998, NAN, 0.0, 0.0, -1.0, 2.7096331789318622e+20};
static const double k_shifted_chebyshev_polynomial_u_f32[16] = {-204.0, 5.0, -6.0, -1.0, -10864.0, 1.000000238418579, 11.591340065002441, 2911.0, -96030.0, 1.0, 0.7999999523162842, NAN, 0.0, 0.0, -1.0, 2.7096332888976864e+20};
static const double k_shifted_chebyshev_polynomial_v_f64[16] = {-239.0, 1.0, -11.0, -1.0, -13775.0, 0.9999999999999974, 0.7036989548810957, 2131.0, -105731.0, 1.0, -0.20000000000000018, NAN, 0.0, 0.0, -1.0, 3.2751665522519776e+20};
static const double k_shifted_chebyshev_polynomial_v_f32[16] = {-239.0, 1.0, -11.0, -1.0, -13775.0, 1.0000003576278687, 0.7037026286125183, 2131.0, -105731.0, 1.0, -0.20000004768371582, NAN, 0.0, 0.0, -1.0, 3.2751661270740396e+20};
static const double k_shifted_chebyshev_polynomial_w_f64[16] = {-169.0, 9.0, -1.0, -1.0, -7953.0, 1.0000000000000009, 22.47894510688511, 3691.0, -86329.0, 1.0, 1.7999999999999998, NAN, 0.0, 0.0, -1.0, 2.1440998056117466e+20};
static const double k_shifted_chebyshev_polynomial_w_f32[16] = {-169.0, 9.0, -1.0, -1.0, -7953.0, 0.9999998807907104, 22.47897720336914, 3691.0, -86329.0, 1.0, 1.7999999523162842, NAN, 0.0, 0.0, -1.0, 2.1440993951901706e+20};
static const double k_hermite_polynomial_h_f64[16] = {4.0, -20.0, 0.0, -1.0, 461.0, 6346.689453125, 275229.83799013606, -201.0, 16.0, 1.0, 1.4, NAN, 0.0, 0.0, -1.0, -2.4436244793338623e+20};
static const double k_hermite_polynomial_h_f32[16] = {4.0, -20.0, 0.0, -1.0, 461.0, 6346.689453125, 275230.0, -201.0, 16.0, 1.0, 1.399999976158142, NAN, 0.0, 0.0, -1.0, -2.4436243066261183e+20};
static const double k_hermite_polynomial_he_f64[16] = {2.0, -2.0, 0.0, -0.75, 40.0234375, 216.92944717407227, -12451.151750225323, 21.703125, 18.0, 1.0, 0.7, NAN, 0.0, 0.0, -0.75, 3869005800950147.0};
static const double k_hermite_polynomial_he_f32[16] = {2.0, -2.0, 0.0, -0.75, 40.0234375, 216.929443359375, -12451.15234375, 21.703125, 18.0, 1.0, 0.699999988079071, NAN, 0.0, 0.0, -0.75, 3869004787613696.0};
static const double k_laguerre_polynomial_l_f64[16] = {5.666666666666667, -0.625, 1.0, 0.125, 7.950934709821428, -0.3242395276220177, 0.49601630906535704, 0.42519531250000003, 47.93333333333333, 1.0, 0.30000000000000004, NAN, 0.0, 0.0, 0.125, 1293.1378557749276};
static const double k_laguerre_polynomial_l_f32[16] = {5.666666507720947, -0.625, 1.0, 0.125, 7.950932502746582, -0.32423949241638184, 0.49601614475250244, 0.4251953065395355, 47.93333435058594, 1.0, 0.30000001192092896, NAN, 0.0, 0.0, 0.125, 1293.1370849609375};
static const double k_legendre_polynomial_p_f64[16] = {-1.0, 1.0, 0.0, -0.125, -0.22314453125, 0.1768244206905365, 0.923489043653365, 79.2373046875, -185.75, 1.0, 0.7, NAN, 0.0, 0.0, -0.125, -0.13142691593944328};
static const double k_legendre_polynomial_p_f32[16] = {-1.0, 1.0, 0.0, -0.125, -0.22314453125, 0.1768244206905365, 0.9234905242919922, 79.2373046875, -185.75, 1.0, 0.699999988079071, NAN, 0.0, 0.0, -0.125, -0.13142690062522888};
static const double kX[15] = {0.0, -0.0, 1.0, 10.0, 0.5, 0.25, 0.975, 1e-10, 1e-300, -1.0, 2.0, INFINITY, NAN, 1000.0, 0.999999};
static const double k_log10_f64[15] = {-INFINITY, -INFINITY, 0.0, 1.0, -0.3010299956639812, -0.6020599913279624, -0.010995384301463193, -10.0, -300.0, NAN, 0.3010299956639812, INFINITY, NAN, 3.0, -4.34294699063126e-07};
static const double k_log10_f32[15] = {-INFINITY, -INFINITY, 0.0, 1.0, -0.3010300099849701, -0.6020600199699402, -0.01099537406116724, -10.0, -INFINITY, NAN, 0.3010300099849701, INFINITY, NAN, 3.0, -4.400616830935178e-07};
static const double k_ndtri_f64[15] = {-INFINITY, -INFINITY, INFINITY, NAN, 0.0, -0.6744897501960817, 1.959963984540054, -6.361340902404056, -37.0470962993612, NAN, NAN, NAN, NAN, NAN, 4.753424308817087};
static const double k_ndtri_f32[15] = {-INFINITY, -INFINITY, INFINITY, NAN, 0.0, -0.6744897961616516, 1.959964394569397, -6.3613409996032715, -INFINITY, NAN, NAN, NAN, NAN, NAN, 4.750757694244385};
static const int64_t kGA[12] = {0, 4, -4, 6, 12, INT64_MIN, INT64_MIN, -9223372036854775807, 100000, -100000, 7, -128};
static const int64_t kGB[12] = {0, 6, 6, -4, 0, 6, INT64_MIN, INT64_MIN, 99999, 99999, -1, -128};
static const int64_t k_gcd_i64[12] = {0, 2, 2, 2, 12, -2, INT64_MIN, -1, 1, 1, 1, 128};
static const int64_t k_lcm_i64[12] = {0, 12, 12, 12, 0, INT64_MIN, INT64_MIN, INT64_MIN, 9999900000, 9999900000, 7, 128};
static const int64_t kGA32[10] = {0, 4, -4, 6, 12, 100000, -100000, 7, -128, -2147483648};
static const int64_t kGB32[10] = {0, 6, 6, -4, 0, 99999, 99999, -1, -128, 6};
static const int64_t k_gcd_i32[10] = {0, 2, 2, 2, 12, 1, 1, 1, 128, -2};
static const int64_t k_lcm_i32[10] = {0, 12, 12, 12, 0, 1409965408, 1409965408, 7, 128, -2147483648};
static const int64_t kGA8[6] = {-128, -128, 100, -6, 127, 0};
static const int64_t kGB8[6] = {-128, 6, 77, 4, 126, 5};
static const int64_t k_gcd_i8[6] = {-128, -2, 1, 2, 1, 5};
static const int64_t k_lcm_i8[6] = {-128, -128, 20, 12, -126, 0};
static const double kF[10] = {0.0, -0.0, 1.0, -3.0, 0.5, 1e-40, 1e+300, INFINITY, NAN, -7.25};
static const double k_frexp_m_f64[10] = {0.0, -0.0, 0.5, -0.75, 0.5, 0.5444517870735015, 0.7466108948025751, INFINITY, NAN, -0.90625};
static const int32_t k_frexp_e_f64[10] = {0, 0, 1, 2, 0, -132, 997, 0, 0, 3};
static const double k_frexp_m_f32[10] = {0.0, -0.0, 0.5, -0.75, 0.5, 0.5444488525390625, INFINITY, INFINITY, NAN, -0.90625};
static const int32_t k_frexp_e_f32[10] = {0, 0, 1, 2, 0, -132, 0, 0, 0, 3};
static const double k_next_bf16[5] = {-9.183549615799121e-41, 1.0078125, 0.99609375, -1.0078125, 3.0};
static const double k_next_f16[5] = {-5.960464477539063e-08, 1.0009765625, 0.99951171875, -1.0009765625, 3.0};
static const double k_modified_bessel_i0_f64[15] = {1.0, 1.0, 1.2660658777520082, 2815.716628466254, 1.0634833707413236, 1.015686141223608, 1.2521548240686364, 0.9999999999999998, 1.0, 1.2660658777520082, 2.279585302336067, NAN, NAN, INFINITY, 1.2660653125932548};
static const double k_modified_bessel_i0_f32[15] = {0.9999999403953552, 0.9999999403953552, 1.2660659551620483, 2815.71630859375, 1.063483476638794, 1.015686273574829, 1.252155065536499, 0.9999999403953552, 0.9999999403953552, 1.2660659551620483, 2.279585123062134, NAN, NAN, INFINITY, 1.2660653591156006};
static const double k_modified_bessel_i1_f64[15] = {0.0, 0.0, 0.5651591039924851, 2670.988303701255, 0.25789430539089636, 0.12597910894546793, 0.5477692175082809, 5e-11, 5.000000000000001e-301, -0.5651591039924851, 1.5906368546373295, NAN, NAN, INFINITY, 0.565158403085926};
static const double k_modified_bessel_i1_f32[15] = {0.0, 0.0, 0.5651590824127197, 2670.988037109375, 0.2578943073749542, 0.12597911059856415, 0.54776930809021, 5.00000076064655e-11, 0.0, -0.5651590824127197, 1.5906368494033813, NAN, NAN, INFINITY, 0.5651584267616272};
static const double k_modified_bessel_k0_f64[15] = {INFINITY, INFINITY, 0.4210244382407082, 1.778006231616765e-05, 0.924419071227666, 1.5415067512483027, 0.4363976918337417, 23.141782445598864, 690.8914594138721, NAN, 0.1138938727495334, 0.0, NAN, 0.0, 0.42102504014845005};
static const double k_modified_bessel_k0_f32[15] = {INFINITY, INFINITY, 0.42102447152137756, 1.778006298991386e-05, 0.9244191646575928, 1.5415070056915283, 0.43639785051345825, 23.141780853271484, INFINITY, NAN, 0.11389388144016266, 0.0, NAN, 0.0, 0.4210250973701477};
static const double k_modified_bessel_k1_f64[15] = {INFINITY, INFINITY, 0.6019072301972346, 1.8648773453825585e-05, 1.6564411200033007, 3.747025974440712, 0.6281937252032022, 10000000000.0, 9.999999999999999e+299, NAN, 0.13986588181652246, 0.0, NAN, 0.0, 0.6019082531300163};
static const double k_modified_bessel_k1_f32[15] = {INFINITY, INFINITY, 0.6019073128700256, 1.8648774130269885e-05, 1.6564409732818604, 3.747025966644287, 0.6281936764717102, 10000000000.0, INFINITY, NAN, 0.13986589014530182, 0.0, NAN, 0.0, 0.6019083261489868};
static const double k_scaled_modified_bessel_k0_f64[15] = {INFINITY, INFINITY, 1.1444630798068944, 0.39163193443659866, 1.5241093857739099, 1.9793338485985683, 1.156963251538108, 23.14178244791304, 690.8914594138721, NAN, 0.8415682150707712, 0.0, NAN, 0.03962832160075422, 1.144463571497628};
static const double k_scaled_modified_bessel_k0_f32[15] = {INFINITY, INFINITY, 1.1444631814956665, 0.39163196086883545, 1.5241094827651978, 1.9793342351913452, 1.15696382522583, 23.141780853271484, INFINITY, NAN, 0.8415682911872864, 0.0, NAN, 0.039628323167562485, 1.1444637775421143};
static const double k_scaled_modified_bessel_k1_f64[15] = {INFINITY, INFINITY, 1.636153486263258, 0.4107665705957887, 2.7310097082117855, 4.811276588171025, 1.6654466064037474, 10000000001.0, 9.999999999999999e+299, NAN, 1.0334768470686888, 0.0, NAN, 0.03964813081296021, 1.6361546307274017};
static const double k_scaled_modified_bessel_k1_f32[15] = {INFINITY, INFINITY, 1.6361536979675293, 0.4107665717601776, 2.7310094833374023, 4.811276435852051, 1.6654466390609741, 10000000000.0, INFINITY, NAN, 1.0334769487380981, 0.0, NAN, 0.03964813053607941, 1.6361548900604248};
static const double k_spherical_bessel_j0_f64[15] = {1.0, 1.0, 0.8414709848078965, -0.05440211108893698, 0.958851077208406, 0.9896158370180917, 0.8489250135048797, 1.0, 1.0, 0.8414709848078965, 0.45464871341284085, 0.0, NAN, 0.0008268795405320025, 0.8414712859764558};
static const double k_spherical_bessel_j0_f32[15] = {1.0, 1.0, 0.8414709568023682, -0.05440211296081543, 0.9588510990142822, 0.9896158576011658, 0.8489250540733337, 1.0, 1.0, 0.8414709568023682, 0.4546487033367157, 0.0, NAN, 0.0008268795791082084, 0.841471254825592};
static const double k_bessel_j0_f64[15] = {1.0, 1.0, 0.7651976865579665, -0.24593576441958856, 0.938469807240813, 0.9844359292958528, 0.7760964997575145, 1.0, 1.0, 0.7651976865579665, 0.22389077914124356, NAN, NAN, 0.024786686152420034, 0.7651981266083897};
static const double k_bessel_j0_f32[15] = {1.0, 1.0, 0.7651976346969604, -0.24593576788902283, 0.9384698271751404, 0.9844359755516052, 0.7760964035987854, 1.0, 1.0, 0.7651976346969604, 0.2238907665014267, NAN, NAN, 0.02478669583797455, 0.7651981115341187};
static const double k_bessel_j1_f64[15] = {0.0, -0.0, 0.44005058574493355, 0.043472745839915526, 0.24226845767487387, 0.12402597732272692, 0.43182090257323635, 5.000000000000001e-11, 5.000000000000001e-301, -0.44005058574493355, 0.5767248077568801, NAN, NAN, 0.00472831190708902, 0.4400502605976702};
static const double k_bessel_j1_f32[15] = {0.0, -0.0, 0.4400506317615509, 0.04347275197505951, 0.24226844310760498, 0.12402597814798355, 0.4318208396434784, 4.9999997198124646e-11, 0.0, -0.4400506317615509, 0.5767247080802917, NAN, NAN, 0.0047281463630497456, 0.44005024433135986};
static const double k_bessel_y0_f64[15] = {-INFINITY, -INFINITY, 0.08825696421567697, 0.05567116743247819, -0.4445187335067066, -0.9315730249300588, 0.06845261515567141, -14.732516272697243, -439.8351636227653, NAN, 0.5103756726497742, NAN, NAN, 0.004715917977623586, 0.08825618300242093};
static const double k_bessel_y0_f32[15] = {-INFINITY, -INFINITY, 0.08825694769620895, 0.05567124858498573, -0.4445187449455261, -0.9315730333328247, 0.06845264136791229, -14.732515335083008, -INFINITY, NAN, 0.5103756189346313, NAN, NAN, 0.004715862683951855, 0.08825616538524628};
static const double k_bessel_y1_f64[15] = {-INFINITY, -INFINITY, -0.7812128213002888, 0.24901542427712678, -1.4714723926702433, -2.7041052293152825, -0.8032301220391971, -6366197723.675814, -6.366197723675813e+299, NAN, -0.10703243154093531, NAN, NAN, -0.024784331292351868, -0.7812136907705091};
static const double k_bessel_y1_f32[15] = {-INFINITY, -INFINITY, -0.7812128067016602, 0.2490154355764389, -1.4714723825454712, -2.7041051387786865, -0.8032301068305969, -6366197248.0, -INFINITY, NAN, -0.10703249275684357, NAN, NAN, -0.024784361943602562, -0.7812137603759766};
static const double k_airy_ai_f64[15] = {0.3550280538878172, 0.3550280538878172, 0.13529241631288144, 1.1047532552898654e-10, 0.23169360648083345, 0.2911639543485452, 0.13931344033812132, 0.35502805386193526, 0.3550280538878172, 0.5355608832923521, 0.03492413042327433, NAN, NAN, 0.0, 0.13529257546039036};
static const double k_airy_ai_f32[15] = {0.35502806305885315, 0.35502806305885315, 0.13529238104820251, 1.1047546211173653e-10, 0.23169362545013428, 0.29116392135620117, 0.13931339979171753, 0.35502806305885315, 0.35502806305885315, 0.5355609059333801, 0.03492411598563194, NAN, NAN, 0.0, 0.13529258966445923};
#define LEN(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static tt_t mk(int dtype, int64_t n, int64_t stride) { return tku_alloc(dtype, 1, &n, NULL, stride, 16); }

/* Runs `op` on x (strided by 2) and, if y, y (strided by 3) in `dt`, n
 * elements, and compares with `want` within rtol + atol. */
static void check_op(const char* op, int dt, const double* x, const double* y, const double* want, int64_t n,
                     double rtol, double atol) {
  tt_t a = mk(dt, n, 2), b = mk(dt, n, 3), o = mk(dt, n, 1);
  for (int64_t i = 0; i < n; ++i) {
    setf(&a.t, i, x[i]);
    if (y) setf(&b.t, i, y[i]);
  }
  tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
  CHECK_OK(call_op(op, y ? 2 : 1, args, 1, &o.t));
  for (int64_t i = 0; i < n; ++i)
    CHECKF(close_f(getf(&o.t, i), want[i], rtol, atol), "%s %s [%lld] x=%g y=%g: got %.17g want %.17g", op,
           tpu_dtype_name(dt), (long long)i, x[i], y ? y[i] : 0.0, getf(&o.t, i), want[i]);
  fr(&a);
  fr(&b);
  fr(&o);
}

/* Tolerances: float32 results within 2 ulps of the CPU's and float64 ones
 * 1e-13, unless the case says otherwise: igamma (the CPU's own error is up to
 * 1.2e-9 in float64 and 5e-5 relative, 3e-8 absolute, in float32; these
 * results agree with mpmath to 1e-15), and the float32 Bessel functions
 * (computed in double here, in float on the CPU: up to 1e-6 apart). The
 * Bessel J/Y and Airy Ai follow the CPU's method in the dtype's own precision:
 * the defaults. */
#define LOOSE_GAMMA 5e-9, 2e-6, 1e-7
#define LOOSE_F32 1e-13, 1.5e-6, 0.0

static void test_values(void) {
  static const struct {
    const char* op;
    const double *x, *y, *f64, *f32;
    int64_t n;
    double r64, r32, a32; /* 0: the defaults */
  } kCases[] = {
      {"aten::log10", kX, NULL, k_log10_f64, k_log10_f32, LEN(kX)},
      {"aten::special_ndtri", kX, NULL, k_ndtri_f64, k_ndtri_f32, LEN(kX)},
      {"aten::hypot", kA, kB, k_hypot_f64, k_hypot_f32, LEN(kA)},
      {"aten::nextafter", kA, kB, k_nextafter_f64, k_nextafter_f32, LEN(kA)},
      {"aten::igamma", kA, kB, k_igamma_f64, k_igamma_f32, LEN(kA), LOOSE_GAMMA},
      {"aten::igammac", kA, kB, k_igammac_f64, k_igammac_f32, LEN(kA), LOOSE_GAMMA},
#define B(name) {"aten::special_" #name, kX, NULL, k_##name##_f64, k_##name##_f32, LEN(kX), LOOSE_F32},
      B(modified_bessel_i0) B(modified_bessel_i1) B(modified_bessel_k0) B(modified_bessel_k1)
      B(scaled_modified_bessel_k0) B(scaled_modified_bessel_k1) B(spherical_bessel_j0)
#undef B
#define J(name) {"aten::special_" #name, kX, NULL, k_##name##_f64, k_##name##_f32, LEN(kX)},
      J(bessel_j0) J(bessel_j1) J(bessel_y0) J(bessel_y1) J(airy_ai)
#undef J
      {"aten::special_zeta", kA, kB, k_zeta_f64, k_zeta_f32, LEN(kA)},
#define P(name) {"aten::special_" #name, kPX, kPN, k_##name##_f64, k_##name##_f32, LEN(kPX)},
      P(chebyshev_polynomial_t) P(chebyshev_polynomial_u) P(chebyshev_polynomial_v) P(chebyshev_polynomial_w)
      P(shifted_chebyshev_polynomial_t) P(shifted_chebyshev_polynomial_u) P(shifted_chebyshev_polynomial_v)
      P(shifted_chebyshev_polynomial_w) P(hermite_polynomial_h) P(hermite_polynomial_he)
      P(laguerre_polynomial_l) P(legendre_polynomial_p)
#undef P
  };
  for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); ++c) {
    const double r64 = kCases[c].r64 ? kCases[c].r64 : 1e-13, r32 = kCases[c].r32 ? kCases[c].r32 : 2.4e-7;
    check_op(kCases[c].op, TPU_DTYPE_F64, kCases[c].x, kCases[c].y, kCases[c].f64, kCases[c].n, r64, 0.0);
    check_op(kCases[c].op, TPU_DTYPE_F32, kCases[c].x, kCases[c].y, kCases[c].f32, kCases[c].n, r32, kCases[c].a32);
  }
}

/* gcd and lcm exactly, in the operands' width (INT_MIN's gcds included). */
static void check_int(const char* op, int dt, const int64_t* x, const int64_t* y, const int64_t* want, int64_t n) {
  tt_t a = mk(dt, n, 1), b = mk(dt, n, 2), o = mk(dt, n, 1);
  for (int64_t i = 0; i < n; ++i) {
    tpu_ku_store_i64((char*)a.t.data + i * tpu_dtype_size(dt), dt, x[i]);
    tpu_ku_store_i64((char*)b.t.data + 2 * i * tpu_dtype_size(dt), dt, y[i]);
  }
  tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
  CHECK_OK(call_op(op, 2, args, 1, &o.t));
  for (int64_t i = 0; i < n; ++i)
    CHECKF(geti(&o.t, i) == want[i], "%s %s [%lld] %lld, %lld: got %lld want %lld", op, tpu_dtype_name(dt),
           (long long)i, (long long)x[i], (long long)y[i], (long long)geti(&o.t, i), (long long)want[i]);
  fr(&a);
  fr(&b);
  fr(&o);
}

static void test_gcd_lcm(void) {
  check_int("aten::gcd", TPU_DTYPE_I64, kGA, kGB, k_gcd_i64, LEN(kGA));
  check_int("aten::lcm", TPU_DTYPE_I64, kGA, kGB, k_lcm_i64, LEN(kGA));
  check_int("aten::gcd", TPU_DTYPE_I32, kGA32, kGB32, k_gcd_i32, LEN(kGA32));
  check_int("aten::lcm", TPU_DTYPE_I32, kGA32, kGB32, k_lcm_i32, LEN(kGA32));
  check_int("aten::gcd", TPU_DTYPE_I8, kGA8, kGB8, k_gcd_i8, LEN(kGA8));
  check_int("aten::lcm", TPU_DTYPE_I8, kGA8, kGB8, k_lcm_i8, LEN(kGA8));
  /* lcm(INT64_MIN, INT64_MAX): gcd -1, where the CPU traps; here the wrapped product */
  int64_t mn[1] = {INT64_MIN}, mx[1] = {INT64_MAX}, w[1] = {INT64_MIN};
  check_int("aten::lcm", TPU_DTYPE_I64, mn, mx, w, 1);
  /* floating operands have no gcd */
  tt_t f = mk(TPU_DTYPE_F32, 2, 1);
  tpu_k_value_t args[2] = {vt(&f.t), vt(&f.t)};
  CHECK_STATUS(call_op("aten::gcd", 2, args, 1, &f.t), TPU_STATUS_UNIMPLEMENTED, "float32");
  fr(&f);
}

static void test_frexp(void) {
  static const int dts[2] = {TPU_DTYPE_F64, TPU_DTYPE_F32};
  const double* wm[2] = {k_frexp_m_f64, k_frexp_m_f32};
  const int32_t* we[2] = {k_frexp_e_f64, k_frexp_e_f32};
  const int64_t n = LEN(kF);
  for (int d = 0; d < 2; ++d) {
    tt_t x = mk(dts[d], n, 2), m = mk(dts[d], n, 1), e = mk(TPU_DTYPE_I32, n, 3);
    for (int64_t i = 0; i < n; ++i) setf(&x.t, i, kF[i]);
    tpu_tensor_t outs[2] = {m.t, e.t};
    tpu_k_value_t args[3] = {vt(&x.t), vt(&m.t), vt(&e.t)};
    CHECK_OK(call_op("aten::frexp.Tensor_out", 3, args, 2, outs));
    for (int64_t i = 0; i < n; ++i) {
      double gm = getf(&m.t, i);
      CHECKF(gm == wm[d][i] || (isnan(gm) && isnan(wm[d][i])), "frexp %s [%lld]: %.17g want %.17g",
             tpu_dtype_name(dts[d]), (long long)i, gm, wm[d][i]);
      CHECKF(geti(&e.t, i) == we[d][i], "frexp %s [%lld]: exponent %lld want %d", tpu_dtype_name(dts[d]),
             (long long)i, (long long)geti(&e.t, i), we[d][i]);
    }
    /* the exponent must be int32, the mantissa the input's dtype */
    tt_t e64 = mk(TPU_DTYPE_I64, n, 1);
    tpu_tensor_t bad[2] = {m.t, e64.t};
    CHECK_STATUS(call_op("aten::frexp.Tensor_out", 3, args, 2, bad), TPU_STATUS_INVALID_ARGUMENT, "exponent");
    tpu_tensor_t bad2[2] = {x.t, e.t};
    bad2[0].dtype = dts[1 - d];
    CHECK_STATUS(call_op("aten::frexp.Tensor_out", 3, args, 2, bad2), TPU_STATUS_INVALID_ARGUMENT, "mantissa");
    fr(&x);
    fr(&m);
    fr(&e);
    fr(&e64);
  }
}

/* ---- J0, J1, Y0, Y1, Ai against references computed independently ----------
 * J_n(x) = (1/pi) int_0^pi cos(n t - x sin t) dt (the trapezoid rule, exact to
 * rounding for this periodic integrand); Y_n(x) = (1/pi) int_0^pi sin(x sin t
 * - n t) dt - (1/pi) int_0^inf (e^(nt) + (-1)^n e^(-nt)) e^(-x sinh t) dt
 * (Simpson's rule); Ai(x) = sqrt(x/3) K_(1/3)(zeta) / pi for x > 0, with
 * K_nu(z) = int_0^inf e^(-z cosh t) cosh(nu t) dt (trapezoid), the Maclaurin
 * series in long double on [-2, 0], sqrt(-x)/3 (J_(1/3) + J_(-1/3))(zeta) below,
 * J_nu by Schlaefli's integral (Simpson's rule). Tolerance: the CPU's
 * approximations (which the kernels follow) are up to 8.5e-7 off the true J, Y
 * (just above x = 5, where their asymptotic form starts) and 2.9e-6 off Ai
 * (just below x = -2.09), 1.2e-13 relative for x >= 2.09: 1e-6 and 3e-6
 * absolute, with 1e-12 relative for Ai(x > 0). */
#define PI_D 3.14159265358979323846

static double simpson(double (*f)(double, double, double), double x, double nu, double a, double b, int steps) {
  const double h = (b - a) / steps;
  double s = f(a, x, nu) + f(b, x, nu);
  for (int i = 1; i < steps; ++i) s += (i & 1 ? 4.0 : 2.0) * f(a + i * h, x, nu);
  return s * h / 3.0;
}

static double y_osc(double t, double x, double n) { return sin(x * sin(t) - n * t); }
static double y_decay(double t, double x, double n) {
  return (exp(n * t) + (n == 1.0 ? -1.0 : 1.0) * exp(-n * t)) * exp(-x * sinh(t));
}
static double jnu_osc(double t, double z, double nu) { return cos(nu * t - z * sin(t)); }
static double jnu_decay(double t, double z, double nu) { return exp(-z * sinh(t) - nu * t); }

static double ref_j(int n, double x) {
  const int steps = 512;
  double s = 0.0;
  for (int i = 0; i <= steps; ++i) {
    const double t = PI_D * i / steps, w = (i == 0 || i == steps) ? 0.5 : 1.0;
    s += w * cos(n * t - x * sin(t));
  }
  return s / steps;
}

static double ref_y(int n, double x) {
  const double tmax = asinh(60.0 / x) + 1.0;
  return (simpson(y_osc, x, n, 0.0, PI_D, 20000) - simpson(y_decay, x, n, 0.0, tmax, 40000)) / PI_D;
}

/* J_nu(z), z > 0, any real nu (Schlaefli's integral) */
static double ref_jnu(double nu, double z) {
  const double tmax = asinh(60.0 / z) + 1.0;
  return (simpson(jnu_osc, z, nu, 0.0, PI_D, 20000) - sin(nu * PI_D) * simpson(jnu_decay, z, nu, 0.0, tmax, 40000)) /
         PI_D;
}

static double ref_ai(double x) {
  const double z = 2.0 / 3.0 * fabs(x) * sqrt(fabs(x));
  if (x > 0) {
    const double h = 1.0 / 64;
    double s = 0.5 * exp(-z);
    for (int i = 1;; ++i) {
      const double t = i * h, v = exp(-z * cosh(t)) * cosh(t / 3.0);
      s += v;
      if (v < 1e-30 * s) break;
    }
    return sqrt(x / 3.0) * s * h / PI_D;
  }
  if (x < -2.0) return sqrt(-x) / 3.0 * (ref_jnu(1.0 / 3.0, z) + ref_jnu(-1.0 / 3.0, z));
  /* Ai(0) f(x) + Ai'(0) g(x), f = sum x^3k / (3k)! prod (3j - 2), g likewise */
  long double f = 1.0L, g = x, a = 1.0L, b = x, zz = (long double)x * x * x;
  for (int k = 1; k < 200; ++k) {
    a *= zz / ((3.0L * k - 1) * (3.0L * k));
    b *= zz / ((3.0L * k) * (3.0L * k + 1));
    f += a;
    g += b;
    if (fabsl(a) + fabsl(b) < 1e-22L * (fabsl(f) + fabsl(g))) break;
  }
  return (double)(0.355028053887817239260L * f - 0.258819403792806798405L * g);
}

static void test_bessel_reference(void) {
  enum { N = 121 };
  double x[N];
  for (int i = 0; i < N; ++i) x[i] = -18.0 + 0.3 * i + 0.0137; /* through -18 .. 18, not on a branch point */
  static const char* const kOps[5] = {"aten::special_bessel_j0", "aten::special_bessel_j1", "aten::special_bessel_y0",
                                      "aten::special_bessel_y1", "aten::special_airy_ai"};
  tt_t a = mk(TPU_DTYPE_F64, N, 1), o = mk(TPU_DTYPE_F64, N, 1);
  for (int i = 0; i < N; ++i) setf(&a.t, i, x[i]);
  tpu_k_value_t args[1] = {vt(&a.t)};
  for (int k = 0; k < 5; ++k) {
    CHECK_OK(call_op(kOps[k], 1, args, 1, &o.t));
    for (int i = 0; i < N; ++i) {
      const double got = getf(&o.t, i);
      double want, atol = 1e-6, rtol = 0.0;
      if (k < 2) {
        want = ref_j(k, x[i]);
      } else if (k < 4) {
        if (x[i] <= 0) {
          CHECKF(isnan(got), "%s(%g) = %.17g, want NaN", kOps[k], x[i], got);
          continue;
        }
        want = ref_y(k - 2, x[i]);
      } else {
        want = ref_ai(x[i]);
        atol = x[i] > 0 ? 0.0 : 3e-6;
        rtol = x[i] > 0 ? 1e-12 : 0.0;
        if (x[i] > 0 && x[i] < 2.09) atol = 1e-15; /* the series on both sides */
      }
      CHECKF(close_f(got, want, rtol, atol), "%s(%.17g): got %.17g want %.17g", kOps[k], x[i], got, want);
    }
  }
  fr(&a);
  fr(&o);
}

static void test_reduced_and_dtypes(void) {
  /* nextafter steps the bfloat16/float16 pattern:
   * torch.nextafter(tensor([0, 1, 1, -1, 3]), tensor([-1, 2, 0, -5, 3])) */
  static const double x[5] = {0.0, 1.0, 1.0, -1.0, 3.0}, y[5] = {-1.0, 2.0, 0.0, -5.0, 3.0};
  for (int d = 0; d < 2; ++d) {
    int dt = d ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
    const double* want = d ? k_next_f16 : k_next_bf16;
    tt_t a = mk(dt, 5, 1), b = mk(dt, 5, 1), o = mk(dt, 5, 1);
    for (int64_t i = 0; i < 5; ++i) {
      setf(&a.t, i, x[i]);
      setf(&b.t, i, y[i]);
    }
    tpu_k_value_t args[2] = {vt(&a.t), vt(&b.t)};
    CHECK_OK(call_op("aten::nextafter", 2, args, 1, &o.t));
    for (int64_t i = 0; i < 5; ++i)
      CHECKF(getf(&o.t, i) == want[i], "nextafter %s [%lld]: %.17g want %.17g", tpu_dtype_name(dt), (long long)i,
             getf(&o.t, i), want[i]);
    /* no float16/bfloat16 kernel for zeta and the polynomials; none for integer igamma */
    CHECK_STATUS(call_op("aten::special_zeta", 2, args, 1, &o.t), TPU_STATUS_UNIMPLEMENTED, "float");
    CHECK_STATUS(call_op("aten::special_legendre_polynomial_p", 2, args, 1, &o.t), TPU_STATUS_UNIMPLEMENTED,
                 "float");
    CHECK_STATUS(call_op("aten::special_bessel_y1", 1, args, 1, &o.t), TPU_STATUS_UNIMPLEMENTED, "float");
    CHECK_STATUS(call_op("aten::special_airy_ai.out", 1, args, 1, &o.t), TPU_STATUS_UNIMPLEMENTED, "float");
    fr(&a);
    fr(&b);
    fr(&o);
  }
  tt_t ia = mk(TPU_DTYPE_I64, 3, 1), of = mk(TPU_DTYPE_F32, 3, 1);
  tpu_k_value_t iargs[2] = {vt(&ia.t), vt(&ia.t)};
  CHECK_STATUS(call_op("aten::igamma", 2, iargs, 1, &of.t), TPU_STATUS_UNIMPLEMENTED, "int64");
  /* a Scalar operand (x_scalar): T_n(0.5) for n = 0, 1, 2 -> 1, 0.5, -0.5 */
  static const double n3[3] = {0.0, 1.0, 2.0}, t3[3] = {1.0, 0.5, -0.5};
  tt_t nf = mk(TPU_DTYPE_F32, 3, 1);
  for (int64_t i = 0; i < 3; ++i) setf(&nf.t, i, n3[i]);
  tpu_k_value_t sargs[2] = {vd(0.5), vt(&nf.t)};
  CHECK_OK(call_op("aten::special_chebyshev_polynomial_t", 2, sargs, 1, &of.t));
  for (int64_t i = 0; i < 3; ++i) CHECK(getf(&of.t, i) == t3[i]);
  fr(&ia);
  fr(&of);
  fr(&nf);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_values);
  RUN_TEST(test_gcd_lcm);
  RUN_TEST(test_frexp);
  RUN_TEST(test_bessel_reference);
  RUN_TEST(test_reduced_and_dtypes);
  return tku_finish();
}
