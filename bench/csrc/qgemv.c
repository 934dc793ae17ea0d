/* qgemv.c - tpu::q_linear's decode GEMV (M rows of x, 1 when decoding) timed
 * directly through the runtime's kernel table (no bridge, no queue), act_bits
 * 32 and 8 taking turns. Compiled and run by bench/qgemv.py against
 * torch_tpu/libtpu_runtime.so.
 *
 *   qgemv QTYPE N K THREADS ROUNDS M [cache]
 *
 * prints "RESULT <act_bits> <best seconds per call>" for 32 and 8: each round
 * times a batch of calls (about 50 ms) of one mode, then of the other; the
 * best batch per mode is kept. Weights: random blocks (scales 0.01), a
 * different weight matrix copy per call cycling through 64 MiB, so the
 * weights come from memory as in a model's decode step, not from cache
 * ("cache": one copy, reused, so the weights stay in cache when they fit). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu/base.h"
#include "tpu/kernels.h"

uint16_t tpu_ku_f32_to_f16(float v); /* runtime/kernels/kutil.h (exported by the runtime library) */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static tpu_tensor_t tensor(void* data, int dtype, int64_t rows, int64_t cols) {
  tpu_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.sizes[0] = rows;
  t.sizes[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

int main(int argc, char** argv) {
  if (argc != 7 && !(argc == 8 && strcmp(argv[7], "cache") == 0)) {
    fprintf(stderr, "usage: qgemv QTYPE N K THREADS ROUNDS M [cache]\n");
    return 2;
  }
  int qtype = atoi(argv[1]), threads = atoi(argv[4]), rounds = atoi(argv[5]);
  int64_t N = atoll(argv[2]), K = atoll(argv[3]), M = atoll(argv[6]);
  int64_t bb = qtype == 2 ? 18 : qtype == 3 ? 20 : qtype == 8 ? 34 : 0;
  if (bb == 0 || K % 32 || M < 1) {
    fprintf(stderr, "qgemv: QTYPE must be 2, 3 or 8, K a multiple of 32 and M at least 1\n");
    return 2;
  }
  int64_t row = K / 32 * bb, bytes = N * row;
  int64_t copies = argc == 8 ? 1 : (64ll << 20) / bytes + 1;
  uint8_t* w = malloc((size_t)(bytes * copies));
  float* x = malloc(sizeof(float) * (size_t)(M * K));
  float* y = malloc(sizeof(float) * (size_t)(M * N));
  if (!w || !x || !y) return 1;
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < bytes * copies; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    w[i] = (uint8_t)(s >> 32);
  }
  uint16_t h = tpu_ku_f32_to_f16(0.01f);
  for (int64_t b = 0; b < N * (K / 32) * copies; ++b) memcpy(w + b * bb, &h, 2);
  for (int64_t k = 0; k < M * K; ++k) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[k] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  tpu_threadpool_t* pool = NULL;
  if (tpu_threadpool_create(threads, &pool) != TPU_OK) return 1;
  const tpu_k_entry_t* e = tpu_k_lookup("tpu::q_linear");
  if (!e) return 1;
  tpu_tensor_t xt = tensor(x, TPU_DTYPE_F32, M, K), yt = tensor(y, TPU_DTYPE_F32, M, N);
  double best[2] = {1e9, 1e9};
  const int bits[2] = {32, 8};
  int64_t calls = 0;
  for (int r = 0; r < rounds + 1; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      int64_t n = 0;
      double t0 = now(), t = t0;
      do {
        tpu_tensor_t wt = tensor(w + (calls++ % copies) * bytes, TPU_DTYPE_U8, N, row);
        tpu_k_value_t a[5];
        memset(a, 0, sizeof(a));
        a[0].kind = TPU_K_TENSOR, a[0].v.tensor = &xt;
        a[1].kind = TPU_K_TENSOR, a[1].v.tensor = &wt;
        a[2].kind = TPU_K_INT, a[2].v.i = qtype;
        a[3].kind = TPU_K_INT, a[3].v.i = N;
        a[4].kind = TPU_K_INT, a[4].v.i = bits[mode];
        tpu_k_call_t c;
        memset(&c, 0, sizeof(c));
        c.op = "tpu::q_linear";
        c.num_args = 5;
        c.args = a;
        c.num_outputs = 1;
        c.outputs = &yt;
        c.pool = pool;
        tpu_status_t st = e->run(&c);
        if (st != TPU_OK) {
          fprintf(stderr, "qgemv: %s\n", tpu_status_message(st));
          return 1;
        }
        ++n;
        t = now();
      } while (t - t0 < 0.05);
      if (r > 0 && (t - t0) / (double)n < best[mode]) best[mode] = (t - t0) / (double)n; /* round 0 warms up */
    }
  }
  for (int mode = 0; mode < 2; ++mode) printf("RESULT %d %.9f\n", bits[mode], best[mode]);
  tpu_threadpool_destroy(pool);
  free(w);
  free(x);
  free(y);
  return 0;
}
