/* conv_avx2.c - AVX2/FMA micro-kernel of conv.c's blocked path: 4 output
 * channels x 3 vectors of 8 output positions, accumulated in 12 registers
 * over every input channel and kernel tap, from a zero-padded f32 input band
 * (no im2col). Compiled with -mavx2 -mfma -mf16c; only called after
 * tpu_k_gemm_use_avx2() said so. The prototype is repeated in conv.c. */
#include <immintrin.h>
#include <stdint.h>

/* acc[(m * 3 + v) * 8 + i] = sum over c < C, t < K of
 *   w[m][c * K + t] * x[v][c * cs + toff[t] + i]      (m < 4, v < 3, i < 8).
 * Every x[v] + c * cs + toff[t] + [0, 8) must be readable. */
static inline __attribute__((always_inline)) void conv_4x3(const float* const x[3], int64_t C, int64_t cs,
                                                            const int64_t* toff, int64_t K, int64_t rl,
                                                            const float* const w[4], float* acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  const float *x0 = x[0], *x1 = x[1], *x2 = x[2];
  const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t t = 0; t < K; ++t) {
      int64_t o = toff ? toff[t] : (t / 3) * rl + t % 3;
      __m256 a0 = _mm256_loadu_ps(x0 + o), a1 = _mm256_loadu_ps(x1 + o), a2 = _mm256_loadu_ps(x2 + o);
      __m256 b = _mm256_broadcast_ss(w0 + t);
      c00 = _mm256_fmadd_ps(b, a0, c00);
      c01 = _mm256_fmadd_ps(b, a1, c01);
      c02 = _mm256_fmadd_ps(b, a2, c02);
      b = _mm256_broadcast_ss(w1 + t);
      c10 = _mm256_fmadd_ps(b, a0, c10);
      c11 = _mm256_fmadd_ps(b, a1, c11);
      c12 = _mm256_fmadd_ps(b, a2, c12);
      b = _mm256_broadcast_ss(w2 + t);
      c20 = _mm256_fmadd_ps(b, a0, c20);
      c21 = _mm256_fmadd_ps(b, a1, c21);
      c22 = _mm256_fmadd_ps(b, a2, c22);
      b = _mm256_broadcast_ss(w3 + t);
      c30 = _mm256_fmadd_ps(b, a0, c30);
      c31 = _mm256_fmadd_ps(b, a1, c31);
      c32 = _mm256_fmadd_ps(b, a2, c32);
    }
    x0 += cs;
    x1 += cs;
    x2 += cs;
    w0 += K;
    w1 += K;
    w2 += K;
    w3 += K;
  }
  _mm256_storeu_ps(acc + 0, c00);
  _mm256_storeu_ps(acc + 8, c01);
  _mm256_storeu_ps(acc + 16, c02);
  _mm256_storeu_ps(acc + 24, c10);
  _mm256_storeu_ps(acc + 32, c11);
  _mm256_storeu_ps(acc + 40, c12);
  _mm256_storeu_ps(acc + 48, c20);
  _mm256_storeu_ps(acc + 56, c21);
  _mm256_storeu_ps(acc + 64, c22);
  _mm256_storeu_ps(acc + 72, c30);
  _mm256_storeu_ps(acc + 80, c31);
  _mm256_storeu_ps(acc + 88, c32);
}

void tpu_k_avx2_conv_4x3(const float* const x[3], int64_t C, int64_t cs, const int64_t* toff,
                         int64_t K, const float* const w[4], float* acc) {
  conv_4x3(x, C, cs, toff, K, 0, w, acc);
}

/* tpu_k_avx2_conv_4x3 for a 3x3 kernel of unit stride and dilation over
 * padded rows of `rl` floats (toff[kh * 3 + kw] = kh * rl + kw): the taps
 * unrolled, their offsets in the addressing. */
void tpu_k_avx2_conv3x3_4x3(const float* const x[3], int64_t C, int64_t cs, int64_t rl,
                            const float* const w[4], float* acc) {
  conv_4x3(x, C, cs, 0, 9, rl, w, acc);
}
