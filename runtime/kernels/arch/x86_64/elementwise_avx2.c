/* elementwise_avx2.c - the elementwise family's float32 tile engine (loads
 * with dtype conversion, every op's float loop, the ew_vecmath.h
 * transcendentals, stores) compiled 8-wide with -mavx2 -mfma -mf16c, plus
 * f16 <-> f32 run conversions for copy.c. Only called after
 * __builtin_cpu_supports says so; prototypes are repeated in the callers. */
#define EW_ARCH_AVX2 1
#include "kernels/elementwise.c"

void tpu_k_avx2_f16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n);
void tpu_k_avx2_f32_to_f16(uint16_t* restrict o, const float* restrict a, int64_t n);

void tpu_k_avx2_f16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n) {
  ew_h2f_run(o, a, n);
}

void tpu_k_avx2_f32_to_f16(uint16_t* restrict o, const float* restrict a, int64_t n) {
  ew_f2h_run(o, a, n);
}

void tpu_k_avx2_f32_to_bf16(uint16_t* restrict o, const float* restrict a, int64_t n);
void tpu_k_avx2_bf16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n);

void tpu_k_avx2_f32_to_bf16(uint16_t* restrict o, const float* restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_f2bf(a[i]);
}

void tpu_k_avx2_bf16_to_f32(float* restrict o, const uint16_t* restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = ew_vm_bf2f(a[i]);
}
