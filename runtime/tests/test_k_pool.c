/* test_k_pool.c - avg_pool2d, avg_pool3d, max_pool2d_with_indices and their backwards
 * against PyTorch's CPU results (float32, float64, bfloat16, int), with
 * contiguous and channels_last inputs; argument and dtype errors; adaptive
 * average pooling against its window definition; adaptive max pooling (2-d
 * and 3-d) and its backward against the CPU. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

/* Reference values: torch 2.15 CPU, inputs from pl_in() below:
 *   x = ((i * 37) % 23 - 11) * 0.25 in row-major order,
 *   avg: x (2, 2, 5, 6), kernel (3, 2), stride (2, 1), padding (1, 1),
 *        ceil_mode, count_include_pad True / False / divisor_override 5;
 *        grad_output = pl_in(numel) * 0.5 + 0.125.
 *   max: x (1, 2, 7, 8) with x[0, 0, 3, 5] = NaN, kernel 3, stride 2,
 *        padding 1, dilation 2, ceil_mode; grad_output as above.
 *   int32 max: (pl_in * 4) truncated, (1, 4, 5), kernel 2, stride 1.
 *   int64 avg: the same values, kernel 3, stride 1, padding 1.
 *   avg_pool3d: x (2, 4, 3, 3) as (C, D, H, W), kernel (2, 3, 2), stride
 *        (1, 2, 2), padding (1, 1, 0), ceil_mode, count_include_pad False. */
/* kAvgInc (2, 2, 3, 7) */
static const double kAvgInc[84] = {-0.291666657, -0.375, 0.0416666679, 0.458333343, -0.0833333358, -0.625, -0.208333328, 0.458333343, 0.75, 0.416666657, 0.0833333358, -0.25, -0.583333313, -0.375, 0.583333313, 0.416666657, -0.125, 0.291666657, -0.25, -0.791666687, -0.291666657, 0.208333328, 0.625, 0.0833333358, -0.458333343, -0.0416666679, 0.375, 0.291666657, 0.25, 0.333333343, 0, -0.333333343, -0.666666687, -0.0416666679, 0.375, 0.125, 0.458333343, -0.0833333358, -0.625, -0.208333328, 0.208333328, 0.208333328, -0.25, -0.291666657, 0.125, -0.416666657, 0, 0.416666657, -0.166666672, 0.0416666679, -0.0833333358, -0.416666657, -0.75, -0.125, 0.5, 0.166666672, -0.333333343, -0.458333343, -0.0416666679, 0.375, 0.791666687, 0.25, -0.25, 0.25, -0.25, -0.791666687, -0.375, 0.0416666679, 0.458333343, 0.333333343, -0.166666672, -0.5, 0.125, 0.75, 0.416666657, 0.0833333358, -0.0416666679, 0.166666672, -0.416666657, 0, 0.416666657, -0.125, 0.291666657, 0.25};
static const double kAvgIncBwd[120] = {-0.124999993, -0.0208333284, 0.0833333358, 0.1875, -0.1875, -0.0833333358, 0, 0.208333328, -0.0625, 0.145833328, -0.125, 0.0833333284, 0.124999993, 0.229166657, -0.145833343, -0.0416666716, 0.0625, 0.166666672, 0.0208333284, 0.229166657, -0.0416666828, 0.166666657, 0.375, 0.104166672, -0.104166657, 0, 0.104166657, 0.208333328, 0.3125, -0.0625, 0.145833343, -0.229166657, -0.124999993, -0.0208333284, 0.0833333358, 0.1875, 0.0625000075, -0.208333328, 0, 0.208333328, -0.0625, 0.145833328, -0.0833333358, 0.0208333284, 0.124999993, 0.229166657, -0.145833343, -0.0416666716, 0.0833333284, 0.291666657, 0.0208333284, 0.229166657, -0.0416666828, 0.166666657, 0.166666672, 0.270833343, -0.104166657, 0, 0.104166657, 0.208333328, -0.0625, 0.0416666716, 0.145833343, -0.229166657, -0.124999993, -0.0208333284, 0.125, -0.145833328, 0.0625000075, -0.208333328, 0, 0.208333328, 0.1875, -0.1875, -0.0833333358, 0.0208333284, 0.124999993, 0.229166657, 0.145833328, -0.125, 0.0833333284, 0.291666657, 0.0208333284, 0.229166657, -0.0416666716, 0.0625, 0.166666672, 0.270833343, -0.104166657, 0, 0.208333328, 0.3125, -0.0625, 0.0416666716, 0.145833343, -0.229166657, 0.1875, 0.395833343, 0.125, -0.145833328, 0.0625000075, -0.208333328, -0.0208333284, 0.0833333358, 0.1875, -0.1875, -0.0833333358, 0.0208333284, 0.208333328, -0.0625, 0.145833328, -0.125, 0.0833333284, 0.291666657, 0.229166657, -0.145833343, -0.0416666716, 0.0625, 0.166666672, 0.270833343};
/* kAvgExc (2, 2, 3, 7) */
static const double kAvgExc[84] = {-0.875, -0.5625, 0.0625, 0.6875, -0.125, -0.9375, -0.625, 0.916666687, 0.75, 0.416666657, 0.0833333358, -0.25, -0.583333313, -0.75, 1.75, 0.625, -0.1875, 0.4375, -0.375, -1.1875, -0.875, 0.625, 0.9375, 0.125, -0.6875, -0.0625, 0.5625, 0.875, 0.5, 0.333333343, 0, -0.333333343, -0.666666687, -0.0416666679, 0.75, 0.375, 0.6875, -0.125, -0.9375, -0.3125, 0.3125, 0.625, -0.75, -0.4375, 0.1875, -0.625, 0, 0.625, -0.5, 0.0833333358, -0.0833333358, -0.416666657, -0.75, -0.125, 0.5, 0.333333343, -1, -0.6875, -0.0625, 0.5625, 1.1875, 0.375, -0.75, 0.75, -0.375, -1.1875, -0.5625, 0.0625, 0.6875, 1, -0.333333343, -0.5, 0.125, 0.75, 0.416666657, 0.0833333358, -0.0833333358, 0.5, -0.625, 0, 0.625, -0.1875, 0.4375, 0.75};
static const double kAvgExcBwd[120] = {-0.5, -0.03125, 0.125, 0.28125, -0.28125, 0.03125, -0.458333373, 0.197916657, -0.0208333433, 0.239583328, -0.21875, 0.427083343, 0.0416666567, 0.229166657, -0.145833343, -0.0416666716, 0.0625, 0.395833343, -0.0520833433, 0.229166657, 0.0104166567, 0.270833313, 0.53125, 0.114583343, -0.09375, 0, 0.15625, 0.3125, 0.46875, -0.28125, 0.46875, -0.34375, -0.1875, -0.03125, 0.125, 0.28125, 0.197916657, -0.322916687, -0.0625000149, 0.197916657, -0.0208333433, 0.364583313, -0.270833343, 0.0208333284, 0.124999993, 0.229166657, -0.145833343, 0.0833333284, -0.114583343, 0.427083313, -0.03125, 0.229166657, 0.0104166567, 0.770833313, 0.15625, 0.40625, -0.15625, 0, 0.15625, 0.6875, 0, 0.0625, 0.21875, -0.34375, -0.1875, -0.1875, 0.375, -0.125, 0.135416657, -0.322916687, -0.0625000149, 0.0624999963, 0.375, -0.1875, -0.0833333358, 0.0208333284, 0.124999993, 0.25, 0.0625, -0.09375, 0.166666657, 0.427083313, -0.03125, 0.46875, -0.3125, 0.09375, 0.25, 0.40625, -0.15625, 0.21875, 0.25, 0.46875, -0.09375, 0.0625, 0.21875, -0.65625, 0.31250003, 0.552083373, 0.09375, -0.125, 0.135416657, -0.71875, 0.0625000075, 0.0833333358, 0.1875, -0.1875, -0.0833333358, -0.0625000075, 0.71875, -0.135416657, 0.125, -0.09375, 0.166666657, 0.40625, 0.65625, -0.21875, -0.0625, 0.09375, 0.25, 0.46875};
/* kAvgDiv (2, 2, 3, 7) */
static const double kAvgDiv[84] = {-0.349999994, -0.449999988, 0.0500000007, 0.550000012, -0.100000001, -0.75, -0.25, 0.550000012, 0.899999976, 0.5, 0.100000001, -0.300000012, -0.699999988, -0.449999988, 0.699999988, 0.5, -0.150000006, 0.349999994, -0.300000012, -0.949999988, -0.349999994, 0.25, 0.75, 0.100000001, -0.550000012, -0.0500000007, 0.449999988, 0.349999994, 0.300000012, 0.400000006, 0, -0.400000006, -0.800000012, -0.0500000007, 0.449999988, 0.150000006, 0.550000012, -0.100000001, -0.75, -0.25, 0.25, 0.25, -0.300000012, -0.349999994, 0.150000006, -0.5, 0, 0.5, -0.200000003, 0.0500000007, -0.100000001, -0.5, -0.899999976, -0.150000006, 0.600000024, 0.200000003, -0.400000006, -0.550000012, -0.0500000007, 0.449999988, 0.949999988, 0.300000012, -0.300000012, 0.300000012, -0.300000012, -0.949999988, -0.449999988, 0.0500000007, 0.550000012, 0.400000006, -0.200000003, -0.600000024, 0.150000006, 0.899999976, 0.5, 0.100000001, -0.0500000007, 0.200000003, -0.5, 0, 0.5, -0.150000006, 0.349999994, 0.300000012};
static const double kAvgDivBwd[120] = {-0.150000006, -0.0249999985, 0.099999994, 0.224999994, -0.224999994, -0.099999994, 0, 0.25, -0.0750000104, 0.174999997, -0.149999991, 0.100000009, 0.150000006, 0.275000006, -0.174999997, -0.049999997, 0.075000003, 0.200000003, 0.025000006, 0.275000006, -0.0500000007, 0.200000018, 0.449999988, 0.125, -0.125, 0, 0.125, 0.25, 0.375, -0.075000003, 0.174999997, -0.275000006, -0.150000006, -0.0249999985, 0.099999994, 0.224999994, 0.075000003, -0.25, 0, 0.25, -0.0750000104, 0.174999997, -0.099999994, 0.0249999985, 0.150000006, 0.275000006, -0.174999997, -0.049999997, 0.100000009, 0.350000024, 0.025000006, 0.275000006, -0.0500000007, 0.200000018, 0.200000003, 0.325000018, -0.125, 0, 0.125, 0.25, -0.075000003, 0.049999997, 0.174999997, -0.275000006, -0.150000006, -0.0249999985, 0.149999991, -0.174999997, 0.075000003, -0.25, 0, 0.25, 0.224999994, -0.224999994, -0.099999994, 0.0249999985, 0.150000006, 0.275000006, 0.174999997, -0.149999991, 0.100000009, 0.350000024, 0.025000006, 0.275000006, -0.049999997, 0.075000003, 0.200000003, 0.325000018, -0.125, 0, 0.25, 0.375, -0.075000003, 0.049999997, 0.174999997, -0.275000006, 0.224999994, 0.474999994, 0.149999991, -0.174999997, 0.075000003, -0.25, -0.0249999985, 0.099999994, 0.224999994, -0.224999994, -0.099999994, 0.0249999985, 0.25, -0.0750000104, 0.174999997, -0.149999991, 0.100000009, 0.350000024, 0.275000006, -0.174999997, -0.049999997, 0.075000003, 0.200000003, 0.325000018};
/* kMax (1, 2, 3, 4) */
static const double kMax[24] = {1.25, NAN, NAN, NAN, 2.75, NAN, NAN, NAN, 2.75, NAN, NAN, NAN, 1.75, 1.75, 2.75, 2.75, 1.75, 1.75, 2.75, 2.75, 0.25, 1.5, 2.75, 2.75};
static const int64_t kMaxIdx[24] = {11, 29, 29, 29, 41, 29, 29, 29, 41, 29, 29, 29, 11, 11, 31, 31, 11, 11, 31, 31, 27, 29, 31, 31};
static const double kMaxBwd[112] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.125, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.625, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.75, 0, 1, 0, -0.125, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
/* kMaxI32 (1, 3, 4) */
static const double kMaxI32[12] = {4, 4, 9, 9, 5, 5, 10, 10, 6, 6, 11, 11};
static const int64_t kMaxI32Idx[12] = {6, 6, 8, 8, 11, 11, 13, 13, 16, 16, 18, 18};
/* kAvgI64 (1, 4, 5) */
static const double kAvgI64[20] = {-1, -2, 1, 0, 1, -2, -3, 2, 1, 3, -1, -2, 3, 2, 3, 0, -1, 2, 1, 2};

static const double kAvg3[72] = {-0.875, 0.375, -0.125, -0.5, 0.75, 0.25, -0.25, 1, 0.5, -0.375, -0.5625, 0.375, 0, -0.1875, 0.75, 0.25, 0.0625, 1, -0.09375, -1, 1.375, -0.4375, -0.625, 1.75, -0.1875, -0.375, 2, -0.3125, -0.5, 1.875, -1.375, -0.125, 2.25, -1.125, 0.125, 2.5, -0.75, 0.5, 0, -0.375, 0.875, -2.5, -0.125, 1.125, -2.25, -0.25, 1, -0.9375, 0.125, 0.416666657, -2, 0.375, 0.1875, -1.75, 0.75, 0.5625, -1.375, 0.645833313, -0.020833334, -1, -0.0625, -0.25, -0.75, 1.25, -0.375, -0.875, 0.666666687, 0, -0.5, -1, 0.25, -0.25};
static const double kAvg3Bwd[120] = {-0.296875, -0.296875, 0, 0, -0.125, -0.140625, -0.140625, 0.114583336, 0.114583336, -0.458333343, 0.15625, 0.15625, 0.114583336, 0.114583336, -0.333333343, 0.25, 0.25, 0.0833333433, 0.0833333433, 0.791666687, 0.203125, 0.203125, -0.078125, -0.078125, 0, 0.255208343, 0.255208343, 0.0260416679, 0.0260416679, -0.166666657, 0.0520833358, 0.0520833358, 0.104166672, 0.104166672, -0.166666657, -0.0416666567, -0.0416666567, 0.166666687, 0.166666687, 0.270833343, 0.1875, 0.1875, -0.234375, -0.234375, 0.125, 0.1875, 0.1875, -0.0364583433, -0.0364583433, -0.0416666456, 0, 0, 0.197916657, 0.197916657, -0.166666657, -0.375, -0.375, 0.416666657, 0.416666657, 0.0208333433, 0.328125, 0.328125, -0.09375, -0.09375, -0.3125, 0.42187497, 0.42187497, -0.0416666716, -0.0416666716, 0.1875, 0.09375, 0.09375, 0.0520833321, 0.0520833321, 0.5, -2.98023224e-08, -2.98023224e-08, -0.166666657, -0.166666657, 1.25, 0.140625, 0.140625, -0.140625, -0.140625, -0.125, 0.151041672, 0.151041672, -0.078125, -0.078125, 0.104166672, 0.0104166679, 0.0104166679, 0.0625, 0.0625, 0.229166672, -0.208333343, -0.208333343, 0, 0, 0.416666687, 0.09375, 0.09375, 0.390625, 0.390625, -0.0625, 0.03125, 0.03125, 0.526041687, 0.526041687, 0.125, -0.0625, -0.0625, 0.135416672, 0.135416672, 0.1875, -0.625, -0.625, 0.166666672, 0.166666672, 0};

/* Adaptive max pooling (torch 2.15 CPU, float64; float32, bfloat16 and float16 give
 * the same): x = pl_in (1, 2, 5, 7) with x[0, 0, 3, 5] = NaN into (3, 4);
 * 3-d: pl_in (2, 3, 4, 5) as (C, D, H, W) into (2, 3, 2); grad_output =
 * pl_in(numel) * 0.5 + 0.125. Windows overlap: ties, NaN, and several outputs
 * on one input in the backward. */
static const double kAMax[24] = {2.25, 2.25, 2.0, 2.5, 2.25, 2.25, NAN, NAN, 1.75, 2.25, NAN, NAN, 2.5, 2.5, 1.5, 2.75, 2.0, 2.5, 2.5, 2.25, 2.75, 2.75, 2.5, 1.5};
static const int64_t kAMaxIdx[24] = {8, 8, 3, 13, 8, 8, 26, 26, 21, 31, 26, 26, 1, 1, 4, 6, 14, 24, 24, 19, 29, 29, 24, 27};
static const double kAMaxBwd[70] = {0.0, 0.0, 0.0, -0.625, 0.0, 0.0, 0.0, 0.0, -1.875, 0.0, 0.0, 0.0, 0.0, 1.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.25, 0.0, 0.0, 0.0, 0.0, -0.125, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.25, 0.0, -0.875, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.875, 0.0, 0.0, 0.0, 0.0, 0.375, 0.0, 0.0, 0.0, 0.0, 1.125, 0.0, 0.0, -1.25, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0};
static const double kAMax3[24] = {2.0, 2.25, 2.25, 2.5, 2.5, 2.75, 2.75, 2.0, 2.25, 2.25, 2.5, 2.5, 2.75, 2.75, 2.75, 2.75, 2.25, 2.25, 2.75, 2.75, 2.75, 2.75, 2.75, 2.0};
static const int64_t kAMax3Idx[24] = {26, 8, 31, 13, 36, 18, 41, 49, 31, 54, 36, 59, 27, 4, 27, 27, 17, 17, 27, 27, 27, 27, 50, 58};
static const double kAMax3Bwd[120] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 1.125, 0.0, 0.0, 0.0, 0.0, -1.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.25, 0.0, 0.0, 0.0, 0.0, 0.625, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.625, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0, 0.0, 0.0, 1.375, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.625, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.25, 0.0};

static double pl_in(int64_t i) { return (double)(((i * 37) % 23) - 11) * 0.25; }

/* NCHW (perm NULL) or channels_last (perm {0, 2, 3, 1}) for 4-d tensors. */
static const int kCL[4] = {0, 2, 3, 1};

static bool same(const tpu_tensor_t* t, const double* want, int64_t n, double tol, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    double got = getf(t, i);
    if (!close_f(got, want[i], tol, tol)) {
      printf("  %s[%lld]: got %.9g want %.9g\n", what, (long long)i, got, want[i]);
      return false;
    }
  }
  return true;
}

static void fill_in(tt_t* t, double scale, double shift) {
  int64_t n = tpu_tensor_numel(&t->t);
  for (int64_t i = 0; i < n; ++i) setf(&t->t, i, pl_in(i) * scale + shift);
}

static void test_avg(void) {
  int64_t xs[4] = {2, 2, 5, 6}, ys[4] = {2, 2, 3, 7};
  int64_t k[2] = {3, 2}, s[2] = {2, 1}, p[2] = {1, 1};
  const double* fwd[3] = {kAvgInc, kAvgExc, kAvgDiv};
  const double* bwd[3] = {kAvgIncBwd, kAvgExcBwd, kAvgDivBwd};
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int di = 0; di < 3; ++di) {
    int dt = dts[di];
    double tol = dt == TPU_DTYPE_BF16 ? 1e-2 : 1e-6;
    for (int cl = 0; cl < 2; ++cl) {
      const int* perm = cl ? kCL : NULL;
      tt_t x = tku_alloc(dt, 4, xs, perm, 1, 0), y = tku_alloc(dt, 4, ys, perm, 1, 0);
      tt_t g = tku_alloc(dt, 4, ys, perm, 1, 0), gi = tku_alloc(dt, 4, xs, perm, 1, 0);
      fill_in(&x, 1.0, 0.0);
      fill_in(&g, 0.5, 0.125);
      for (int m = 0; m < 3; ++m) {
        tpu_k_value_t a[7] = {vt(&x.t), vints(k, 2), vints(s, 2), vints(p, 2), vb(true), vb(m != 1),
                              m == 2 ? vi(5) : vn()};
        CHECK_OK(call_op(m == 2 ? "aten::avg_pool2d.out" : "aten::avg_pool2d", 7, a, 1, &y.t));
        CHECKF(same(&y.t, fwd[m], 84, tol, "avg"), "avg_pool2d %s mode %d cl %d", tpu_dtype_name(dt), m, cl);
        tpu_k_value_t b[8] = {vt(&g.t), vt(&x.t), vints(k, 2), vints(s, 2), vints(p, 2), vb(true), vb(m != 1),
                              m == 2 ? vi(5) : vn()};
        CHECK_OK(call_op(m == 2 ? "aten::avg_pool2d_backward.grad_input" : "aten::avg_pool2d_backward", 8, b, 1,
                         &gi.t));
        CHECKF(same(&gi.t, bwd[m], 120, tol, "avg bwd"), "avg_pool2d_backward %s mode %d cl %d",
               tpu_dtype_name(dt), m, cl);
      }
      fr(&x); fr(&y); fr(&g); fr(&gi);
    }
  }
}

static void test_avg_3d_int(void) {
  /* a 3-d (C, H, W) int64 input; one kernel size for both dims */
  int64_t xs[3] = {1, 4, 5};
  int64_t k[1] = {3}, s[1] = {1}, p[1] = {1};
  tt_t x = tku_alloc(TPU_DTYPE_I64, 3, xs, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_I64, 3, xs, NULL, 1, 0);
  int64_t n = tpu_tensor_numel(&x.t);
  for (int64_t i = 0; i < n; ++i) setf(&x.t, i, trunc(pl_in(i) * 4));
  tpu_k_value_t a[7] = {vt(&x.t), vints(k, 1), vints(s, 1), vints(p, 1), vb(false), vb(true), vn()};
  CHECK_OK(call_op("aten::avg_pool2d", 7, a, 1, &y.t));
  CHECK(same(&y.t, kAvgI64, 20, 0, "avg i64"));
  /* stride [] is the kernel size: a 2x2 kernel over a 2x2 plane, one output */
  int64_t xs2[3] = {1, 2, 2}, ys2[3] = {1, 1, 1}, k2[1] = {2};
  tt_t x2 = tku_alloc(TPU_DTYPE_F32, 3, xs2, NULL, 1, 0), y2 = tku_alloc(TPU_DTYPE_F32, 3, ys2, NULL, 1, 0);
  for (int i = 0; i < 4; ++i) setf(&x2.t, i, i + 1);
  tpu_k_value_t b[7] = {vt(&x2.t), vints(k2, 1), vints(NULL, 0), vints(p, 0), vb(false), vb(true), vn()};
  /* padding [] is rejected (int[2] needs one or two values) */
  CHECK_STATUS(call_op("aten::avg_pool2d", 7, b, 1, &y2.t), TPU_STATUS_INVALID_ARGUMENT, "padding");
  int64_t p0[1] = {0};
  b[3] = vints(p0, 1);
  CHECK_OK(call_op("aten::avg_pool2d", 7, b, 1, &y2.t));
  CHECK(getf(&y2.t, 0) == 2.5);
  /* errors: int32 (the CPU has no int32 avg_pool2d), divisor 0, padding > kernel / 2 */
  tt_t xi = tku_alloc(TPU_DTYPE_I32, 3, xs, NULL, 1, 0), yi = tku_alloc(TPU_DTYPE_I32, 3, xs, NULL, 1, 0);
  tpu_k_value_t c[7] = {vt(&xi.t), vints(k, 1), vints(s, 1), vints(p, 1), vb(false), vb(true), vn()};
  CHECK_STATUS(call_op("aten::avg_pool2d", 7, c, 1, &yi.t), TPU_STATUS_UNIMPLEMENTED, "int32");
  tpu_k_value_t d[7] = {vt(&x.t), vints(k, 1), vints(s, 1), vints(p, 1), vb(false), vb(true), vi(0)};
  CHECK_STATUS(call_op("aten::avg_pool2d", 7, d, 1, &y.t), TPU_STATUS_INVALID_ARGUMENT, "divisor");
  int64_t p2[1] = {2};
  tpu_k_value_t e[7] = {vt(&x.t), vints(k, 1), vints(s, 1), vints(p2, 1), vb(false), vb(true), vn()};
  CHECK_STATUS(call_op("aten::avg_pool2d", 7, e, 1, &y.t), TPU_STATUS_INVALID_ARGUMENT, "pad");
  fr(&x); fr(&y); fr(&x2); fr(&y2); fr(&xi); fr(&yi);
}

static void test_max(void) {
  int64_t xs[4] = {1, 2, 7, 8}, ys[4] = {1, 2, 3, 4};
  int64_t k[1] = {3}, s[1] = {2}, p[1] = {1}, d[1] = {2};
  int dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16};
  for (int di = 0; di < 3; ++di) {
    int dt = dts[di];
    for (int cl = 0; cl < 2; ++cl) {
      const int* perm = cl ? kCL : NULL;
      tt_t x = tku_alloc(dt, 4, xs, perm, 1, 0), y = tku_alloc(dt, 4, ys, perm, 1, 0);
      tt_t ix = tku_alloc(TPU_DTYPE_I64, 4, ys, perm, 1, 0);
      tt_t g = tku_alloc(dt, 4, ys, perm, 1, 0), gi = tku_alloc(dt, 4, xs, perm, 1, 0);
      fill_in(&x, 1.0, 0.0);
      int64_t nan_at[4] = {0, 0, 3, 5};
      set(&x.t, nan_at, NAN);
      fill_in(&g, 0.5, 0.125);
      tpu_tensor_t outs[2] = {y.t, ix.t};
      tpu_k_value_t a[6] = {vt(&x.t), vints(k, 1), vints(s, 1), vints(p, 1), vints(d, 1), vb(true)};
      CHECK_OK(call_op(cl ? "aten::max_pool2d_with_indices.out" : "aten::max_pool2d_with_indices", 6, a, 2, outs));
      CHECKF(same(&y.t, kMax, 24, 0, "max"), "max_pool2d %s cl %d", tpu_dtype_name(dt), cl);
      bool idx_ok = true;
      for (int i = 0; i < 24; ++i) idx_ok = idx_ok && geti(&ix.t, i) == kMaxIdx[i];
      CHECKF(idx_ok, "max_pool2d indices %s cl %d", tpu_dtype_name(dt), cl);
      tpu_k_value_t b[8] = {vt(&g.t), vt(&x.t), vints(k, 1), vints(s, 1), vints(p, 1), vints(d, 1), vb(true),
                            vt(&ix.t)};
      CHECK_OK(call_op(cl ? "aten::max_pool2d_with_indices_backward.grad_input"
                          : "aten::max_pool2d_with_indices_backward", 8, b, 1, &gi.t));
      CHECKF(same(&gi.t, kMaxBwd, 112, 0, "max bwd"), "max_pool2d backward %s cl %d", tpu_dtype_name(dt), cl);
      /* an index outside the plane is a data error from run() */
      int64_t at[4] = {0, 1, 0, 0};
      set(&ix.t, at, 56);
      CHECK_STATUS(call_op("aten::max_pool2d_with_indices_backward", 8, b, 1, &gi.t), TPU_STATUS_INVALID_ARGUMENT,
                   "out of range");
      fr(&x); fr(&y); fr(&ix); fr(&g); fr(&gi);
    }
  }
}

static void test_max_int(void) {
  int64_t xs[3] = {1, 4, 5}, ys[3] = {1, 3, 4}, k[2] = {2, 2}, s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
  tt_t x = tku_alloc(TPU_DTYPE_I32, 3, xs, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_I32, 3, ys, NULL, 1, 0);
  tt_t ix = tku_alloc(TPU_DTYPE_I64, 3, ys, NULL, 1, 0);
  for (int64_t i = 0; i < 20; ++i) setf(&x.t, i, trunc(pl_in(i) * 4));
  tpu_tensor_t outs[2] = {y.t, ix.t};
  tpu_k_value_t a[6] = {vt(&x.t), vints(k, 2), vints(s, 2), vints(p, 2), vints(d, 2), vb(false)};
  CHECK_OK(call_op("aten::max_pool2d_with_indices", 6, a, 2, outs));
  CHECK(same(&y.t, kMaxI32, 12, 0, "max i32"));
  bool idx_ok = true;
  for (int i = 0; i < 12; ++i) idx_ok = idx_ok && geti(&ix.t, i) == kMaxI32Idx[i];
  CHECK(idx_ok);
  /* the backward has no integer kernel (nor has the CPU); indices must be int64 */
  tpu_k_value_t b[8] = {vt(&y.t), vt(&x.t), vints(k, 2), vints(s, 2), vints(p, 2), vints(d, 2), vb(false),
                        vt(&ix.t)};
  tt_t gi = tku_alloc(TPU_DTYPE_I32, 3, xs, NULL, 1, 0);
  CHECK_STATUS(call_op("aten::max_pool2d_with_indices_backward", 8, b, 1, &gi.t), TPU_STATUS_UNIMPLEMENTED, "int32");
  tpu_tensor_t bad[2] = {y.t, y.t};
  CHECK_STATUS(call_op("aten::max_pool2d_with_indices", 6, a, 2, bad), TPU_STATUS_INVALID_ARGUMENT, "int64");
  CHECK_STATUS(call_op("aten::max_pool2d_with_indices", 6, a, 1, outs), TPU_STATUS_INVALID_ARGUMENT, "two outputs");
  fr(&x); fr(&y); fr(&ix); fr(&gi);
}

static void test_empty_and_threads(void) {
  /* zero batch: nothing is touched */
  int64_t xs[4] = {0, 3, 4, 4}, ys[4] = {0, 3, 2, 2}, k[1] = {2};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 4, xs, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 4, ys, NULL, 1, 0);
  tpu_k_value_t a[7] = {vt(&x.t), vints(k, 1), vints(NULL, 0), vints(NULL, 0), vb(false), vb(true), vn()};
  int64_t zero[1] = {0};
  a[3] = vints(zero, 1);
  CHECK_OK(call_op("aten::avg_pool2d", 7, a, 1, &y.t));
  fr(&x); fr(&y);
  /* many planes split over the pool match the single-threaded result */
  int64_t xb[4] = {8, 64, 9, 9}, yb[4] = {8, 64, 3, 3}, k3[1] = {3};
  tt_t X = tku_alloc(TPU_DTYPE_F32, 4, xb, kCL, 1, 0);
  tt_t Y1 = tku_alloc(TPU_DTYPE_F32, 4, yb, NULL, 1, 0), Y2 = tku_alloc(TPU_DTYPE_F32, 4, yb, NULL, 1, 0);
  uint64_t rng = 7;
  tku_fill(&X, &rng, 1.0, false);
  tpu_k_value_t b[7] = {vt(&X.t), vints(k3, 1), vints(NULL, 0), vints(zero, 1), vb(false), vb(true), vn()};
  CHECK_OK(tku_call("aten::avg_pool2d", 7, b, 1, &Y1.t, NULL, 0, 0));
  CHECK_OK(tku_call("aten::avg_pool2d", 7, b, 1, &Y2.t, g_pool, 0, 0));
  CHECK(memcmp(Y1.buf, Y2.buf, 8 * 64 * 9 * sizeof(float)) == 0);
  fr(&X); fr(&Y1); fr(&Y2);
}

static void test_avg3d(void) {
  int64_t xs[4] = {2, 3, 4, 5}, ys[4] = {2, 4, 3, 3};
  int64_t k[3] = {2, 3, 2}, s[3] = {1, 2, 2}, p[3] = {1, 1, 0};
  int dts[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  static const int kLast[4] = {1, 2, 3, 0}; /* channels last: C innermost */
  for (int di = 0; di < 2; ++di) {
    for (int cl = 0; cl < 2; ++cl) {
      int dt = dts[di];
      const int* perm = cl ? kLast : NULL;
      tt_t x = tku_alloc(dt, 4, xs, perm, 1, 0), y = tku_alloc(dt, 4, ys, perm, 1, 0);
      tt_t g = tku_alloc(dt, 4, ys, perm, 1, 0), gi = tku_alloc(dt, 4, xs, perm, 1, 0);
      fill_in(&x, 1.0, 0.0);
      fill_in(&g, 0.5, 0.125);
      tpu_k_value_t a[7] = {vt(&x.t), vints(k, 3), vints(s, 3), vints(p, 3), vb(true), vb(false), vn()};
      CHECK_OK(call_op(cl ? "aten::avg_pool3d.out" : "aten::avg_pool3d", 7, a, 1, &y.t));
      CHECKF(same(&y.t, kAvg3, 72, 1e-6, "avg3d"), "avg_pool3d %s cl %d", tpu_dtype_name(dt), cl);
      tpu_k_value_t b[8] = {vt(&g.t), vt(&x.t), vints(k, 3), vints(s, 3), vints(p, 3), vb(true), vb(false), vn()};
      CHECK_OK(call_op(cl ? "aten::avg_pool3d_backward.grad_input" : "aten::avg_pool3d_backward", 8, b, 1, &gi.t));
      CHECKF(same(&gi.t, kAvg3Bwd, 120, 1e-6, "avg3d bwd"), "avg_pool3d_backward %s cl %d", tpu_dtype_name(dt), cl);
      /* two kernel sizes for three spatial dims */
      a[1] = vints(k, 2);
      CHECK_STATUS(call_op("aten::avg_pool3d", 7, a, 1, &y.t), TPU_STATUS_INVALID_ARGUMENT, "kernel_size");
      fr(&x); fr(&y); fr(&g); fr(&gi);
    }
  }
  /* bfloat16: the CPU has no avg_pool3d for it, nor has tpu */
  tt_t xb = tku_alloc(TPU_DTYPE_BF16, 4, xs, NULL, 1, 0), yb = tku_alloc(TPU_DTYPE_BF16, 4, ys, NULL, 1, 0);
  tpu_k_value_t c[7] = {vt(&xb.t), vints(k, 3), vints(s, 3), vints(p, 3), vb(true), vb(false), vn()};
  CHECK_STATUS(call_op("aten::avg_pool3d", 7, c, 1, &yb.t), TPU_STATUS_UNIMPLEMENTED, "bfloat16");
  fr(&xb); fr(&yb);
}

/* Adaptive average pooling: _adaptive_avg_pool3d of (2, 3, 4, 5) as (C, D, H, W)
 * into (2, 3, 2) (overlapping windows [floor(o L / n), ceil((o + 1) L / n)))
 * and the 2-d backward of (1, 2, 5, 7) from (3, 4), both in float64 against
 * the window definition; float32 input with a float64 output is an error. */
static void test_adaptive(void) {
  int64_t sx[4] = {2, 3, 4, 5}, sy[4] = {2, 2, 3, 2};
  tt_t x = tku_alloc(TPU_DTYPE_F64, 4, sx, NULL, 2, 16), y = tku_alloc(TPU_DTYPE_F64, 4, sy, NULL, 1, 16);
  int64_t id[4];
  for (int64_t i = 0; i < 120; ++i) {
    unravel(&x.t, i, id);
    set(&x.t, id, (double)((i * 37) % 23) - 11.0);
  }
  int64_t osz[3] = {2, 3, 2};
  tpu_k_value_t a[2] = {vt(&x.t), vints(osz, 3)};
  CHECK_OK(call_op("aten::_adaptive_avg_pool3d", 2, a, 1, &y.t));
  for (int64_t i = 0; i < 24; ++i) {
    unravel(&y.t, i, id);
    const int64_t c = id[0], o[3] = {id[1], id[2], id[3]}, L[3] = {3, 4, 5}, n[3] = {2, 3, 2};
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = o[d] * L[d] / n[d];
      hi[d] = ((o[d] + 1) * L[d] + n[d] - 1) / n[d];
    }
    double s = 0.0, cnt = 0.0;
    for (int64_t p = lo[0]; p < hi[0]; ++p)
      for (int64_t q = lo[1]; q < hi[1]; ++q)
        for (int64_t r = lo[2]; r < hi[2]; ++r) {
          int64_t ix[4] = {c, p, q, r};
          s += get(&x.t, ix);
          cnt += 1.0;
        }
    CHECKF(close_f(get(&y.t, id), s / cnt, 1e-15, 1e-15), "adaptive 3d [%lld]: %.17g want %.17g", (long long)i,
           get(&y.t, id), s / cnt);
  }
  tpu_tensor_t y32 = y.t;
  y32.dtype = TPU_DTYPE_F32;
  CHECK_STATUS(call_op("aten::_adaptive_avg_pool3d", 2, a, 1, &y32), TPU_STATUS_INVALID_ARGUMENT, "expected");
  /* backward 2-d: grad_input = sum over covering outputs of g / window size */
  int64_t si[4] = {1, 2, 5, 7}, sg[4] = {1, 2, 3, 4};
  tt_t in = tku_alloc(TPU_DTYPE_F64, 4, si, NULL, 1, 16), g = tku_alloc(TPU_DTYPE_F64, 4, sg, NULL, 3, 16);
  tt_t gi = tku_alloc(TPU_DTYPE_F64, 4, si, NULL, 1, 16);
  for (int64_t i = 0; i < 24; ++i) {
    unravel(&g.t, i, id);
    set(&g.t, id, 0.5 * (double)i - 3.0);
  }
  tpu_k_value_t b[2] = {vt(&g.t), vt(&in.t)};
  CHECK_OK(call_op("aten::_adaptive_avg_pool2d_backward", 2, b, 1, &gi.t));
  for (int64_t i = 0; i < 70; ++i) {
    unravel(&gi.t, i, id);
    double want = 0.0;
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 4; ++ow) {
        const int64_t h0 = oh * 5 / 3, h1 = ((oh + 1) * 5 + 2) / 3, w0 = ow * 7 / 4, w1 = ((ow + 1) * 7 + 3) / 4;
        if (id[2] < h0 || id[2] >= h1 || id[3] < w0 || id[3] >= w1) continue;
        int64_t ig[4] = {0, id[1], oh, ow};
        want += get(&g.t, ig) / (double)(h1 - h0) / (double)(w1 - w0);
      }
    CHECKF(close_f(get(&gi.t, id), want, 1e-14, 1e-15), "adaptive 2d backward [%lld]: %.17g want %.17g",
           (long long)i, get(&gi.t, id), want);
  }
  fr(&x);
  fr(&y);
  fr(&in);
  fr(&g);
  fr(&gi);
}

static bool same_idx(const tpu_tensor_t* t, const int64_t* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (geti(t, i) != want[i]) {
      printf("  index[%lld]: got %lld want %lld\n", (long long)i, (long long)geti(t, i), (long long)want[i]);
      return false;
    }
  return true;
}

static void test_adaptive_max(void) {
  int dts[4] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_F16};
  static const int kLast[4] = {1, 2, 3, 0}; /* (C, D, H, W) with C innermost */
  for (int di = 0; di < 4; ++di) {
    int dt = dts[di];
    for (int cl = 0; cl < 3; ++cl) { /* contiguous, channels_last, spread (gap 2) */
      const int* perm = cl == 1 ? kCL : NULL;
      int64_t gap = cl == 2 ? 2 : 1;
      int64_t xs[4] = {1, 2, 5, 7}, ys[4] = {1, 2, 3, 4}, osz[2] = {3, 4};
      tt_t x = tku_alloc(dt, 4, xs, perm, gap, 0), y = tku_alloc(dt, 4, ys, perm, gap, 0);
      tt_t ix = tku_alloc(TPU_DTYPE_I64, 4, ys, perm, gap, 0);
      tt_t g = tku_alloc(dt, 4, ys, perm, gap, 0), gi = tku_alloc(dt, 4, xs, perm, gap, 0);
      fill_in(&x, 1.0, 0.0);
      int64_t nan_at[4] = {0, 0, 3, 5};
      set(&x.t, nan_at, NAN);
      fill_in(&g, 0.5, 0.125);
      for (int64_t i = 0; i < 70; ++i) setf(&gi.t, i, 7.0); /* overwritten */
      tpu_tensor_t outs[2] = {y.t, ix.t};
      tpu_k_value_t a[2] = {vt(&x.t), vints(osz, 2)};
      CHECK_OK(call_op(cl ? "aten::adaptive_max_pool2d.out" : "aten::adaptive_max_pool2d", 2, a, 2, outs));
      CHECKF(same(&y.t, kAMax, 24, 0, "amax"), "adaptive_max_pool2d %s layout %d", tpu_dtype_name(dt), cl);
      CHECKF(same_idx(&ix.t, kAMaxIdx, 24), "adaptive_max_pool2d indices %s layout %d", tpu_dtype_name(dt), cl);
      tpu_k_value_t b[3] = {vt(&g.t), vt(&x.t), vt(&ix.t)};
      CHECK_OK(call_op(cl ? "aten::adaptive_max_pool2d_backward.grad_input" : "aten::adaptive_max_pool2d_backward",
                       3, b, 1, &gi.t));
      CHECKF(same(&gi.t, kAMaxBwd, 70, 0, "amax bwd"), "adaptive_max_pool2d_backward %s layout %d",
             tpu_dtype_name(dt), cl);
      /* an index outside the plane is a data error from run() */
      int64_t at[4] = {0, 1, 2, 0};
      set(&ix.t, at, 35);
      CHECK_STATUS(call_op("aten::adaptive_max_pool2d_backward", 3, b, 1, &gi.t), TPU_STATUS_INVALID_ARGUMENT,
                   "out of range");
      set(&ix.t, at, -1);
      CHECK_STATUS(call_op("aten::adaptive_max_pool2d_backward", 3, b, 1, &gi.t), TPU_STATUS_INVALID_ARGUMENT,
                   "out of range");
      fr(&x); fr(&y); fr(&ix); fr(&g); fr(&gi);

      /* 3-d over (C, D, H, W) */
      int64_t xs3[4] = {2, 3, 4, 5}, ys3[4] = {2, 2, 3, 2}, osz3[3] = {2, 3, 2};
      const int* perm3 = cl == 1 ? kLast : NULL;
      tt_t x3 = tku_alloc(dt, 4, xs3, perm3, gap, 0), y3 = tku_alloc(dt, 4, ys3, perm3, gap, 0);
      tt_t ix3 = tku_alloc(TPU_DTYPE_I64, 4, ys3, perm3, gap, 0);
      tt_t g3 = tku_alloc(dt, 4, ys3, perm3, gap, 0), gi3 = tku_alloc(dt, 4, xs3, perm3, gap, 0);
      fill_in(&x3, 1.0, 0.0);
      fill_in(&g3, 0.5, 0.125);
      tpu_tensor_t outs3[2] = {y3.t, ix3.t};
      tpu_k_value_t c[2] = {vt(&x3.t), vints(osz3, 3)};
      CHECK_OK(call_op(cl ? "aten::adaptive_max_pool3d.out" : "aten::adaptive_max_pool3d", 2, c, 2, outs3));
      CHECKF(same(&y3.t, kAMax3, 24, 0, "amax3"), "adaptive_max_pool3d %s layout %d", tpu_dtype_name(dt), cl);
      CHECKF(same_idx(&ix3.t, kAMax3Idx, 24), "adaptive_max_pool3d indices %s layout %d", tpu_dtype_name(dt), cl);
      tpu_k_value_t d[3] = {vt(&g3.t), vt(&x3.t), vt(&ix3.t)};
      CHECK_OK(call_op(cl ? "aten::adaptive_max_pool3d_backward.grad_input" : "aten::adaptive_max_pool3d_backward",
                       3, d, 1, &gi3.t));
      CHECKF(same(&gi3.t, kAMax3Bwd, 120, 0, "amax3 bwd"), "adaptive_max_pool3d_backward %s layout %d",
             tpu_dtype_name(dt), cl);
      fr(&x3); fr(&y3); fr(&ix3); fr(&g3); fr(&gi3);
    }
  }
}

static void test_adaptive_max_errors(void) {
  int64_t xs[4] = {2, 2, 5, 7}, ys[4] = {2, 2, 3, 4}, osz[2] = {3, 4};
  tt_t x = tku_alloc(TPU_DTYPE_F32, 4, xs, NULL, 1, 0), y = tku_alloc(TPU_DTYPE_F32, 4, ys, NULL, 1, 0);
  tt_t ix = tku_alloc(TPU_DTYPE_I64, 4, ys, NULL, 1, 0);
  tpu_tensor_t outs[2] = {y.t, ix.t};
  tpu_k_value_t a[2] = {vt(&x.t), vints(osz, 2)};
  /* the CPU has no integer adaptive_max_pool2d */
  tt_t xi = tku_alloc(TPU_DTYPE_I32, 4, xs, NULL, 1, 0), yi = tku_alloc(TPU_DTYPE_I32, 4, ys, NULL, 1, 0);
  tpu_tensor_t outi[2] = {yi.t, ix.t};
  tpu_k_value_t ai[2] = {vt(&xi.t), vints(osz, 2)};
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d", 2, ai, 2, outi), TPU_STATUS_UNIMPLEMENTED, "int32");
  tpu_tensor_t bad[2] = {y.t, y.t};
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d", 2, a, 2, bad), TPU_STATUS_INVALID_ARGUMENT, "int64");
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d", 2, a, 1, outs), TPU_STATUS_INVALID_ARGUMENT, "two outputs");
  /* a 2-d input (the CPU wants 3-d or 4-d) */
  tpu_tensor_t x2 = x.t;
  x2.ndim = 2;
  x2.sizes[0] = 5, x2.sizes[1] = 7, x2.strides[0] = 7, x2.strides[1] = 1;
  a[0] = vt(&x2);
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d", 2, a, 2, outs), TPU_STATUS_INVALID_ARGUMENT, "3-D or 4-D");
  /* an empty non-batch dim */
  tpu_tensor_t xe = x.t;
  xe.sizes[2] = 0;
  a[0] = vt(&xe);
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d", 2, a, 2, outs), TPU_STATUS_INVALID_ARGUMENT, "non-zero size");
  /* backward: grad_output in another dtype than the input */
  tt_t g64 = tku_alloc(TPU_DTYPE_F64, 4, ys, NULL, 1, 0), gi = tku_alloc(TPU_DTYPE_F64, 4, xs, NULL, 1, 0);
  tpu_k_value_t b[3] = {vt(&g64.t), vt(&x.t), vt(&ix.t)};
  CHECK_STATUS(call_op("aten::adaptive_max_pool2d_backward", 3, b, 1, &gi.t), TPU_STATUS_INVALID_ARGUMENT,
               "grad_output");
  /* empty batch: nothing is touched */
  tpu_tensor_t x0 = x.t, y0 = y.t, i0 = ix.t, g0 = g64.t, gi0 = gi.t;
  x0.sizes[0] = y0.sizes[0] = i0.sizes[0] = g0.sizes[0] = gi0.sizes[0] = 0;
  x0.data = y0.data = i0.data = g0.data = gi0.data = NULL;
  tpu_tensor_t outs0[2] = {y0, i0};
  a[0] = vt(&x0);
  CHECK_OK(call_op("aten::adaptive_max_pool2d", 2, a, 2, outs0));
  g0.dtype = gi0.dtype = TPU_DTYPE_F32;
  tpu_k_value_t b0[3] = {vt(&g0), vt(&x0), vt(&i0)};
  CHECK_OK(call_op("aten::adaptive_max_pool2d_backward", 3, b0, 1, &gi0));
  fr(&x); fr(&y); fr(&ix); fr(&xi); fr(&yi); fr(&g64); fr(&gi);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_avg);
  RUN_TEST(test_avg_3d_int);
  RUN_TEST(test_max);
  RUN_TEST(test_max_int);
  RUN_TEST(test_empty_and_threads);
  RUN_TEST(test_avg3d);
  RUN_TEST(test_adaptive);
  RUN_TEST(test_adaptive_max);
  RUN_TEST(test_adaptive_max_errors);
  return tku_finish();
}
