/* quant.h - shared between quant.c and arch/x86_64/quant_avx2.c (internal to
 * runtime/kernels): the GGUF block formats and the context of one
 * tpu::q_linear call.
 *
 * Block formats (GGML type ids, which cross the bridge as the op's `qtype`;
 * the layouts are the public GGUF ones, little-endian, no padding):
 *   Q4_0 (2): 32 weights in 18 bytes: f16 scale d, 16 bytes of nibbles;
 *             weight j (j < 16) is the low nibble of byte j, weight j + 16
 *             its high nibble; value = d * (nibble - 8).
 *   Q4_1 (3): 32 weights in 20 bytes: f16 d, f16 m, 16 bytes of nibbles
 *             (same order); value = d * nibble + m.
 *   Q8_0 (8): 32 weights in 34 bytes: f16 d, 32 int8 q; value = d * q.
 *   Q4_K (12): 256 weights in 144 bytes: f16 d, f16 dmin, 12 bytes packing
 *             eight 6-bit scales sc[j] and mins mn[j] (j < 4: low 6 bits of
 *             bytes j and j + 4; j >= 4: low nibble / high nibble of byte
 *             j + 4, with the top 2 bits from bits 6-7 of bytes j - 4 / j),
 *             128 bytes of nibbles: for each 64 weights, 32 bytes whose low
 *             nibbles are sub-block 2i and high nibbles sub-block 2i + 1;
 *             value = d * sc[j] * nibble - dmin * mn[j].
 *   Q6_K (14): 256 weights in 210 bytes: 128 bytes ql (low 4 bits), 64 bytes
 *             qh (high 2 bits), 16 int8 scales (one per 16 weights), f16 d;
 *             for each half h (128 weights; ql += 64, qh += 32 per half) and
 *             l < 32: weights l, l + 32, l + 64, l + 96 take ql[l] low,
 *             ql[l + 32] low, ql[l] high, ql[l + 32] high nibbles with bits
 *             0-1, 2-3, 4-5, 6-7 of qh[l] above them; value = d * scale *
 *             (q - 32).
 * A weight matrix [N, K] is N rows, each K / block_size consecutive blocks. */
#ifndef TPU_KERNELS_QUANT_H_
#define TPU_KERNELS_QUANT_H_

#include <stdint.h>

enum {
  TPU_QU_Q4_0 = 2,
  TPU_QU_Q4_1 = 3,
  TPU_QU_Q8_0 = 8,
  TPU_QU_Q4_K = 12,
  TPU_QU_Q6_K = 14,
};

#define TPU_QU_BLOCK 32  /* weights per block of Q4_0, Q4_1, Q8_0 */
#define TPU_QU_KBLOCK 256 /* weights per super-block of Q4_K, Q6_K */

typedef struct {
  int qtype;
  int64_t M, N, K;      /* x [M, K] (rows of x), W [N, K], y [M, N] */
  int64_t block;        /* weights per block: 32 or 256 */
  int64_t block_bytes;  /* bytes per block */
  int64_t row_bytes;    /* bytes per row of W: K / block * block_bytes */
  const float* x;       /* contiguous [M, K] */
  const uint8_t* w;     /* contiguous [N, row_bytes] */
  float* y;             /* contiguous [M, N] */
  /* act_bits = 8 (Q4_0, Q4_1, Q8_0, M <= TPU_QU_ACT8_MAXM): x quantized once
   * per call, per block of 32 (see quant.c): */
  int act_bits;         /* 32 (x in float32) or 8 */
  const int8_t* xq;     /* [M, K] int8 values q, x ~= xd * q */
  const float* xd;      /* [M, K / 32] the block's scale d_x = max|x| / 127 */
  const float* xs;      /* [M, K / 32] Q4_1: the exact float sum of the block's x;
                         * Q4_0: 8 * d_x * sum(q) (the -8 offset of the nibbles) */
  /* the AVX2 float GEMV (M <= TPU_QU_GEMV_MAXM, K <= TPU_QU_GEMV_MAXK, blocks of
   * 32): x laid out once per call by tpu_k_avx2_qu_layout_x, not once per task */
  const float* xl;      /* [M, K] */
  const float* xls;     /* [M, K / 32] the blocks' sums */
} tpu_qu_ctx_t;

/* The most rows of x that act_bits = 8 serves; more rows take the float path. */
#define TPU_QU_ACT8_MAXM 4

/* The most rows of x the AVX2 float path takes on the GEMV engine (each weight
 * block unpacked once per 4 rows); more take the panel-dequantizing GEMM.
 * Measured (bench.qgemv --rows, gate 1536x576 Q4_1, two threads, weights
 * streamed): M = 2, 4, 6, 8 took 58, 88, 146, 175 us against the GEMM's 88,
 * 125, 164, 200; M = 16 the same on both (346 us). */
#define TPU_QU_GEMV_MAXM 8
/* The largest K the AVX2 GEMV engine takes with x laid out (larger: plain dots). */
#define TPU_QU_GEMV_MAXK 8192

/* Row engines: compute y[:, n] for n in [n0, n1). Portable ones live in
 * quant.c; the AVX2 + FMA + F16C ones in arch/x86_64/quant_avx2.c. */
/* The `block` weights of one block -> out (portable, in quant.c). */
void tpu_k_qu_dequant_block(int qtype, const uint8_t* b, float* out);

void tpu_k_avx2_qu_gemv(void* vctx, int64_t n0, int64_t n1);
/* One row of x (nb blocks of 32) -> xl, xls as tpu_k_avx2_qu_gemv reads them. */
void tpu_k_avx2_qu_layout_x(int qtype, const float* x, int64_t nb, float* xl, float* xls);
/* act_bits = 8: y[:, n0..n1) from c->xq, xd, xs (AVX2 integer dot products). */
void tpu_k_avx2_qu_gemv_a8(void* vctx, int64_t n0, int64_t n1);
/* act_bits = 8: the nb blocks of 32 floats at x -> q, d, s (see tpu_qu_ctx_t;
 * the same values as quant.c's portable quantizer, s up to float rounding). */
void tpu_k_avx2_qu_quantize_x(int qtype, const float* x, int64_t nb, int8_t* q, float* d, float* s);
void tpu_k_avx2_qu_gemm(void* vctx, int64_t n0, int64_t n1);

#endif /* TPU_KERNELS_QUANT_H_ */
