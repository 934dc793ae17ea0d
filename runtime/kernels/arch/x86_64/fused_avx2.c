/* fused_avx2.c - the row engines of fused.c (rms_norm, rope, swiglu and
 * their backward passes) compiled with -mavx2 -mfma -mf16c, exported as
 * tpu_k_avx2_fu_*. Only called after tpu_ku_use_avx2() says so; prototypes
 * are repeated in fused.c. */
#define FU_ARCH_AVX2 1
#include "kernels/fused.c"
