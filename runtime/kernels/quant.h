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
 * A weight matrix [N, K] is N rows, each K / 32 consecutive blocks. */
#ifndef TPU_KERNELS_QUANT_H_
#define TPU_KERNELS_QUANT_H_

#include <stdint.h>

enum {
  TPU_QU_Q4_0 = 2,
  TPU_QU_Q4_1 = 3,
  TPU_QU_Q8_0 = 8,
};

#define TPU_QU_BLOCK 32 /* weights per block (all formats above) */

typedef struct {
  int qtype;
  int64_t M, N, K;      /* x [M, K] (rows of x), W [N, K], y [M, N] */
  int64_t block_bytes;  /* bytes per block */
  int64_t row_bytes;    /* bytes per row of W: K / 32 * block_bytes */
  const float* x;       /* contiguous [M, K] */
  const uint8_t* w;     /* contiguous [N, row_bytes] */
  float* y;             /* contiguous [M, N] */
} tpu_qu_ctx_t;

/* Row engines: compute y[:, n] for n in [n0, n1). Portable ones live in
 * quant.c; the AVX2 + FMA + F16C ones in arch/x86_64/quant_avx2.c. */
void tpu_k_avx2_qu_gemv(void* vctx, int64_t n0, int64_t n1);
void tpu_k_avx2_qu_gemm(void* vctx, int64_t n0, int64_t n1);

#endif /* TPU_KERNELS_QUANT_H_ */
