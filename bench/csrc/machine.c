/* Machine-limit microbenchmarks for bench/ (compiled at bench time with the system cc).
 *
 *   machine fma  THREADS SECONDS            fp32 FMA peak: 8 independent ymm FMA chains
 *   machine fma512 THREADS SECONDS          same with 12 zmm chains (AVX-512F, if present)
 *   machine bf16 THREADS SECONDS            vdpbf16ps, 12 zmm chains (AVX512_BF16, if present)
 *   machine bw   THREADS MIB REPEATS        read bandwidth: sum a MIB-sized float array
 *                                           (2 MiB aligned, madvise(MADV_HUGEPAGE))
 *
 * Prints one line "RESULT <value>" (GFLOP/s or GB/s, best of the repeats) on stdout.
 * Peaks: 5 runs of about SECONDS/5 each (short runs, best kept: on a shared machine the
 * best run is the one least disturbed by other processes).
 * Threads are pthreads; each runs the same kernel on its own data (FMA) or its own
 * contiguous slice of the shared array (bandwidth); wall time spans the whole team.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- compute peak */

#define CHAIN8(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7)
#define CHAIN12(OP) CHAIN8(OP) OP(8) OP(9) OP(10) OP(11)

__attribute__((target("avx2,fma"))) static float k_fma256(long iters) {
  __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + (i) * 1e-3f);
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, b, c);
  CHAIN8(DECL)
  for (long it = 0; it < iters; it++) { CHAIN8(STEP) __asm__ volatile("" ::: "memory"); }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  float out[8];
  _mm256_storeu_ps(out, s);
#undef DECL
#undef STEP
  return out[0] + out[7];
}

__attribute__((target("avx512f"))) static float k_fma512(long iters) {
  __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + (i) * 1e-3f);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, b, c);
  CHAIN12(DECL)
  for (long it = 0; it < iters; it++) { CHAIN12(STEP) __asm__ volatile("" ::: "memory"); }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
#undef DECL
#undef STEP
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static float k_bf16(long iters) {
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
  __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380); /* bf16 ~6e-8 */
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
  CHAIN12(DECL)
  for (long it = 0; it < iters; it++) { CHAIN12(STEP) __asm__ volatile("" ::: "memory"); }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
#undef DECL
#undef STEP
  return _mm512_reduce_add_ps(s);
}

typedef float (*kern_fn)(long);
/* Each thread times itself (start after the barrier, end after its work); a run spans
   min(start)..max(end). Timing in the main thread would be wrong when there are as many
   workers as cores: main may not run again until the workers are done. */
typedef struct {
  kern_fn fn;
  long iters;
  pthread_barrier_t *bar;
  float sink;
  double t0, t1;
} fma_arg_t;

static void *fma_thread(void *p) {
  fma_arg_t *a = p;
  pthread_barrier_wait(a->bar);
  a->t0 = now();
  a->sink = a->fn(a->iters);
  a->t1 = now();
  return NULL;
}

static double run_fma(kern_fn fn, double flop_per_iter, int nthreads, long iters) {
  pthread_t th[256];
  fma_arg_t args[256];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
  for (int t = 0; t < nthreads; t++) {
    args[t] = (fma_arg_t){fn, iters, &bar, 0, 0, 0};
    pthread_create(&th[t], NULL, fma_thread, &args[t]);
  }
  float sink = 0;
  double t0 = 1e300, t1 = 0;
  for (int t = 0; t < nthreads; t++) {
    pthread_join(th[t], NULL);
    sink += args[t].sink;
    if (args[t].t0 < t0) t0 = args[t].t0;
    if (args[t].t1 > t1) t1 = args[t].t1;
  }
  double dt = t1 - t0;
  pthread_barrier_destroy(&bar);
  if (sink == 12345.0f) fprintf(stderr, "!");
  return flop_per_iter * (double)iters * nthreads / dt * 1e-9;
}

static int cmd_peak(kern_fn fn, double flop_per_iter, int nthreads, double seconds) {
  long iters = 1000000;
  for (;;) { /* calibrate on one thread to ~seconds/5 */
    double t0 = now();
    fn(iters);
    double dt = now() - t0;
    if (dt > 0.02) { iters = (long)(iters * (seconds / 5) / dt) + 1; break; }
    iters *= 4;
  }
  double best = 0;
  for (int r = 0; r < 5; r++) {
    double g = run_fma(fn, flop_per_iter, nthreads, iters);
    if (g > best) best = g;
  }
  printf("RESULT %.3f\n", best);
  return 0;
}

/* ---------------------------------------------------------------- bandwidth */

#define MAX_REPS 64
typedef struct {
  const float *p;
  size_t n;
  pthread_barrier_t *bar;
  int init, reps;
  double sink;
  double t0[MAX_REPS], t1[MAX_REPS]; /* this thread's start and end of each pass */
} bw_arg_t;

__attribute__((target("avx2,fma"))) static double sum_avx2(const float *p, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  s0 = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  float o[8];
  _mm256_storeu_ps(o, s0);
  double r = 0;
  for (int k = 0; k < 8; k++) r += o[k];
  for (; i < n; i++) r += p[i];
  return r;
}

static void *bw_thread(void *v) {
  bw_arg_t *a = v;
  if (a->init) { /* first touch by the thread that will read it */
    float *w = (float *)a->p;
    for (size_t i = 0; i < a->n; i++) w[i] = (float)(i & 1023) * 1e-3f;
  }
  for (int r = 0; r < a->reps; r++) {
    pthread_barrier_wait(a->bar);
    a->t0[r] = now();
    a->sink += sum_avx2(a->p, a->n);
    a->t1[r] = now();
  }
  return NULL;
}

static int cmd_bw(int nthreads, size_t mib, int reps) {
  size_t bytes = mib << 20, n = bytes / sizeof(float);
  float *buf = aligned_alloc((size_t)2 << 20, bytes);
  if (!buf) { fprintf(stderr, "cannot allocate %zu MiB\n", mib); return 2; }
#ifdef MADV_HUGEPAGE
  /* Transparent huge pages (fewer TLB misses: ~10% more bandwidth on 2 threads here);
     best effort, as is the PyTorch CPU allocator's for large buffers. */
  (void)madvise(buf, bytes, MADV_HUGEPAGE);
#endif
  pthread_t th[256];
  bw_arg_t args[256];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
  size_t chunk = (n / nthreads) & ~(size_t)31;
  for (int t = 0; t < nthreads; t++) {
    size_t lo = t * chunk, hi = (t == nthreads - 1) ? n : lo + chunk;
    args[t] = (bw_arg_t){.p = buf + lo, .n = hi - lo, .bar = &bar, .init = 1, .reps = reps};
    pthread_create(&th[t], NULL, bw_thread, &args[t]);
  }
  double sink = 0;
  for (int t = 0; t < nthreads; t++) { pthread_join(th[t], NULL); sink += args[t].sink; }
  double best = 0;
  for (int r = 1; r < reps; r++) { /* pass 0 is a warm-up */
    double t0 = 1e300, t1 = 0;
    for (int t = 0; t < nthreads; t++) {
      if (args[t].t0[r] < t0) t0 = args[t].t0[r];
      if (args[t].t1[r] > t1) t1 = args[t].t1[r];
    }
    double g = (double)bytes / (t1 - t0) * 1e-9;
    if (g > best) best = g;
  }
  if (sink == 12345.0) fprintf(stderr, "!");
  pthread_barrier_destroy(&bar);
  free(buf);
  printf("RESULT %.3f\n", best);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s fma|fma512|bf16 THREADS SECONDS | bw THREADS MIB REPEATS\n", argv[0]);
    return 2;
  }
  int nthreads = atoi(argv[2]);
  if (nthreads < 1 || nthreads > 256) { fprintf(stderr, "THREADS must be 1..256\n"); return 2; }
  if (!strcmp(argv[1], "fma")) return cmd_peak(k_fma256, 8 * 8 * 2, nthreads, atof(argv[3]));
  if (!strcmp(argv[1], "fma512")) return cmd_peak(k_fma512, 12 * 16 * 2, nthreads, atof(argv[3]));
  if (!strcmp(argv[1], "bf16")) return cmd_peak(k_bf16, 12 * 16 * 2 * 2, nthreads, atof(argv[3]));
  if (!strcmp(argv[1], "bw")) {
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    return cmd_bw(nthreads, (size_t)atol(argv[3]), reps < 2 ? 2 : reps > MAX_REPS ? MAX_REPS : reps);
  }
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
