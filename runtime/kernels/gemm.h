/* gemm.h - the packed f32 GEMM core of linalg.c, for other kernel families
 * (internal to runtime/kernels; conv.c uses it on im2col tiles).
 *
 * One call computes one tile on the calling thread: no threads, no heap.
 * It uses about 180 KB of stack (packed A and B blocks); callers add their
 * own tiles on top, so call it only from threads with ordinary (>= 1 MB)
 * stacks, as the runtime's pool and queue threads have. */
#ifndef TPU_KERNELS_GEMM_H_
#define TPU_KERNELS_GEMM_H_

#include <stdbool.h>
#include <stdint.h>

/* A strided matrix operand: element (r, c) is at
 * (char*)data + (r * rs + c * cs) * sizeof(dtype). Strides are in elements
 * and may be anything (0, negative, transposed). dtype: f32, bf16 or f16
 * (others are read through the slow generic path). Borrowed. */
typedef struct tpu_k_gemm_mat_t {
  const void* data;
  int32_t dtype; /* tpu_dtype_t */
  int64_t rs, cs;
} tpu_k_gemm_mat_t;

/* True when the AVX2+FMA+F16C micro-kernels may be used on this CPU (and
 * TORCH_TPU_KERNEL_ISA is not "generic"). Query once per kernel call and pass
 * the answer to tpu_k_sgemm_tile. */
bool tpu_k_gemm_use_avx2(void);

/* C = (accumulate ? C : 0) + A @ B, with A M x K, B K x N, and C an f32
 * M x N block at `c` with row stride `ldc` elements and unit column stride
 * (written, never read when !accumulate). Inputs are converted to f32 while
 * packing; accumulation is f32. K == 0 leaves C as it was (accumulate) or
 * zeroes it. M, N <= 0: nothing. */
void tpu_k_sgemm_tile(int64_t M, int64_t N, int64_t K, const tpu_k_gemm_mat_t* a,
                      const tpu_k_gemm_mat_t* b, float* c, int64_t ldc, bool accumulate,
                      bool avx2);

#endif /* TPU_KERNELS_GEMM_H_ */
