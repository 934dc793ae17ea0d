/* Fork/join thread pool. Workers sleep on a condvar between loops; a loop
 * wakes only as many workers as it has extra chunks. Chunks are handed out
 * through an atomic counter; the caller takes part and, when it runs out of
 * chunks, withdraws the remaining wake-up slots so late workers stay asleep,
 * then waits for the helpers that joined (spinning first, see tpu/base.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tpu/base.h"

#define TPU_THREADPOOL_MAX_THREADS 1024
#define TPU_THREADPOOL_CHUNKS_PER_THREAD 4

struct tpu_threadpool_t {
  int size;
  int num_workers;
  pthread_t* threads;
  pthread_mutex_t call_mu; /* serialises parallel_for */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t done_cv;
  bool stop;
  uint64_t generation;
  int slots;  /* workers still allowed to join the current loop */
  int active; /* workers that joined and have not finished */
  /* Current loop; written under mu before generation is bumped. */
  tpu_parallel_fn_t fn;
  void* ctx;
  int64_t n, chunk, rem, num_chunks; /* chunk = n / num_chunks, rem = n % num_chunks */
  int64_t next_chunk; /* atomic */
};

static _Thread_local tpu_threadpool_t* t_inside_pool;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t g_spin_ns = TPU_SPIN_DEFAULT_NS;

int64_t tpu_spin_budget_ns(void) { return __atomic_load_n(&g_spin_ns, __ATOMIC_RELAXED); }
void tpu_spin_set_budget_ns(int64_t ns) { __atomic_store_n(&g_spin_ns, ns < 0 ? 0 : ns, __ATOMIC_RELAXED); }

/* Spins (with a CPU pause) until ready(word, arg), for at most max_ns. */
static bool spin_until(bool (*ready)(const void*, uint64_t), const void* word, uint64_t arg, int64_t max_ns) {
  if (ready(word, arg)) return true;
  if (max_ns <= 0) return false;
  int64_t deadline = mono_ns() + max_ns;
  for (unsigned i = 1;; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (ready(word, arg)) return true;
    if ((i & 63u) == 0 && mono_ns() >= deadline) return false;
  }
}

static bool u64_at_least(const void* word, uint64_t target) {
  return __atomic_load_n((const uint64_t*)word, __ATOMIC_ACQUIRE) >= target;
}

static bool int_is_zero(const void* word, uint64_t unused) {
  (void)unused;
  return __atomic_load_n((const int*)word, __ATOMIC_ACQUIRE) == 0;
}

bool tpu_spin_until_at_least(const uint64_t* word, uint64_t target, int64_t max_ns) {
  return spin_until(u64_at_least, word, target, max_ns);
}

static void run_chunks(tpu_threadpool_t* pool) {
  for (;;) {
    int64_t c = __atomic_fetch_add(&pool->next_chunk, 1, __ATOMIC_RELAXED);
    if (c >= pool->num_chunks) break;
    /* The first `rem` chunks get one extra item: every chunk is >= grain. */
    int64_t begin = c * pool->chunk + (c < pool->rem ? c : pool->rem);
    int64_t end = begin + pool->chunk + (c < pool->rem ? 1 : 0);
    pool->fn(pool->ctx, begin, end);
  }
}

static void* worker_main(void* arg) {
  tpu_threadpool_t* pool = arg;
  t_inside_pool = pool;
  uint64_t seen = 0; /* the generation at creation, even if this thread starts late */
  pthread_mutex_lock(&pool->mu);
  for (;;) {
    if (!pool->stop && pool->generation == seen) {
      /* Loops come in bursts: spin a little before sleeping. */
      pthread_mutex_unlock(&pool->mu);
      tpu_spin_until_at_least(&pool->generation, seen + 1, tpu_spin_budget_ns());
      pthread_mutex_lock(&pool->mu);
    }
    while (!pool->stop && (pool->generation == seen || pool->slots == 0)) {
      if (pool->generation != seen) seen = pool->generation; /* loop already fully served */
      pthread_cond_wait(&pool->work_cv, &pool->mu);
    }
    if (pool->stop) break;
    seen = pool->generation;
    pool->slots--;
    __atomic_add_fetch(&pool->active, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool->mu);
    run_chunks(pool);
    pthread_mutex_lock(&pool->mu);
    /* release: the loop's outputs are visible to a caller that sees 0 without the lock */
    if (__atomic_sub_fetch(&pool->active, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&pool->done_cv);
  }
  pthread_mutex_unlock(&pool->mu);
  return NULL;
}

tpu_status_t tpu_threadpool_create(int num_threads, tpu_threadpool_t** out_pool) {
  if (!out_pool) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_pool is NULL");
  *out_pool = NULL;
  if (num_threads < 1 || num_threads > TPU_THREADPOOL_MAX_THREADS)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "thread pool size %d is out of range [1, %d]", num_threads,
                     TPU_THREADPOOL_MAX_THREADS);
  tpu_threadpool_t* pool = calloc(1, sizeof(*pool));
  if (!pool) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate a thread pool");
  pool->size = num_threads;
  if (num_threads > 1) {
    pool->threads = calloc((size_t)num_threads - 1, sizeof(pthread_t));
    if (!pool->threads) {
      free(pool);
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate %d thread handles",
                       num_threads - 1);
    }
  }
  pthread_mutex_init(&pool->call_mu, NULL);
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->work_cv, NULL);
  pthread_cond_init(&pool->done_cv, NULL);
  for (int i = 0; i < num_threads - 1; i++) {
    int rc = pthread_create(&pool->threads[i], NULL, worker_main, pool);
    if (rc != 0) {
      tpu_threadpool_destroy(pool);
      return TPU_ERROR(TPU_STATUS_INTERNAL, "cannot start thread pool worker %d of %d (error %d)",
                       i + 1, num_threads - 1, rc);
    }
    pool->num_workers = i + 1;
    char name[32];
    snprintf(name, sizeof(name), "tpu-pool-%d", i + 1);
    name[15] = '\0'; /* the kernel's limit */
    pthread_setname_np(pool->threads[i], name);
  }
  *out_pool = pool;
  return TPU_OK;
}

void tpu_threadpool_destroy(tpu_threadpool_t* pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mu);
  pool->stop = true;
  pthread_cond_broadcast(&pool->work_cv);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 0; i < pool->num_workers; i++) pthread_join(pool->threads[i], NULL);
  pthread_cond_destroy(&pool->done_cv);
  pthread_cond_destroy(&pool->work_cv);
  pthread_mutex_destroy(&pool->mu);
  pthread_mutex_destroy(&pool->call_mu);
  free(pool->threads);
  free(pool);
}

int tpu_threadpool_size(const tpu_threadpool_t* pool) { return pool ? pool->size : 1; }

void tpu_parallel_for(tpu_threadpool_t* pool, int64_t n, int64_t grain, tpu_parallel_fn_t fn,
                      void* ctx) {
  if (n <= 0 || !fn) return;
  if (grain < 1) grain = 1;
  /* Inline: no pool, one thread, small loop, or nested inside this pool. */
  if (!pool || pool->num_workers == 0 || n <= grain || t_inside_pool == pool) {
    fn(ctx, 0, n);
    return;
  }
  int64_t max_chunks = (int64_t)pool->size * TPU_THREADPOOL_CHUNKS_PER_THREAD;
  int64_t num_chunks = n / grain;
  if (num_chunks > max_chunks) num_chunks = max_chunks;
  if (num_chunks < 2) {
    fn(ctx, 0, n);
    return;
  }
  int helpers = num_chunks - 1 < pool->num_workers ? (int)(num_chunks - 1) : pool->num_workers;

  pthread_mutex_lock(&pool->call_mu);
  tpu_threadpool_t* outer = t_inside_pool;
  t_inside_pool = pool;
  pthread_mutex_lock(&pool->mu);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n = n;
  pool->chunk = n / num_chunks;
  pool->rem = n % num_chunks;
  pool->num_chunks = num_chunks;
  __atomic_store_n(&pool->next_chunk, 0, __ATOMIC_RELAXED);
  pool->slots = helpers;
  pool->active = 0;
  __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
  if (helpers == pool->num_workers) {
    pthread_cond_broadcast(&pool->work_cv);
  } else {
    for (int i = 0; i < helpers; i++) pthread_cond_signal(&pool->work_cv);
  }
  pthread_mutex_unlock(&pool->mu);

  run_chunks(pool);

  pthread_mutex_lock(&pool->mu);
  pool->slots = 0;
  if (pool->active > 0) {
    /* The helpers are finishing their last chunks: spin before sleeping on done_cv.
     * Waking this thread through the futex took longer than many whole kernels
     * (a decode step of 700 short loops: 85-90 -> 110-130 tokens/s). */
    pthread_mutex_unlock(&pool->mu);
    spin_until(int_is_zero, &pool->active, 0, tpu_spin_budget_ns());
    pthread_mutex_lock(&pool->mu);
  }
  while (pool->active > 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
  t_inside_pool = outer;
  pthread_mutex_unlock(&pool->call_mu);
}
