/* Thread pool: coverage of every index exactly once, chunk sizes >= grain,
 * inline paths, nesting, serialisation of concurrent callers, real
 * parallelism, and many tiny loops. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tpu/base.h"

typedef struct {
  int32_t* hits;
  int64_t min_chunk;  /* atomic min */
  int64_t num_chunks; /* atomic */
  int64_t last_end;   /* for inline order checks */
  int64_t grain;
} cover_ctx_t;

static void cover_body(void* arg, int64_t begin, int64_t end) {
  cover_ctx_t* c = arg;
  for (int64_t i = begin; i < end; i++) __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
  int64_t len = end - begin, cur = __atomic_load_n(&c->min_chunk, __ATOMIC_RELAXED);
  while (len < cur && !__atomic_compare_exchange_n(&c->min_chunk, &cur, len, false,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  __atomic_fetch_add(&c->num_chunks, 1, __ATOMIC_RELAXED);
}

static bool run_cover(tpu_threadpool_t* pool, int64_t n, int64_t grain, int64_t* out_chunks,
                      int64_t* out_min) {
  cover_ctx_t c = {.hits = calloc(n > 0 ? (size_t)n : 1, sizeof(int32_t)), .min_chunk = INT64_MAX,
                   .grain = grain};
  tpu_parallel_for(pool, n, grain, cover_body, &c);
  bool ok = true;
  for (int64_t i = 0; i < n; i++) ok = ok && c.hits[i] == 1;
  free(c.hits);
  if (out_chunks) *out_chunks = c.num_chunks;
  if (out_min) *out_min = c.min_chunk;
  return ok;
}

static void test_create_invalid(void) {
  tpu_threadpool_t* pool = (tpu_threadpool_t*)0x1;
  CHECK_STATUS(tpu_threadpool_create(0, &pool), TPU_STATUS_INVALID_ARGUMENT, "0");
  CHECK(pool == NULL);
  CHECK_STATUS(tpu_threadpool_create(-4, &pool), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_threadpool_create(1000000, &pool), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_threadpool_create(2, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK(tpu_threadpool_size(NULL) == 1);
  tpu_threadpool_destroy(NULL);
}

static void test_coverage(void) {
  int sizes[] = {1, 2, 4};
  int64_t ns[] = {0, 1, 7, 63, 64, 65, 1000, 4097, 100003};
  int64_t grains[] = {1, 3, 64, 1000, 1 << 20};
  for (size_t s = 0; s < 3; s++) {
    tpu_threadpool_t* pool = NULL;
    CHECK_OK(tpu_threadpool_create(sizes[s], &pool));
    CHECK(tpu_threadpool_size(pool) == sizes[s]);
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
      for (size_t g = 0; g < sizeof(grains) / sizeof(grains[0]); g++) {
        int64_t chunks = 0, min_chunk = 0;
        bool ok = run_cover(pool, ns[i], grains[g], &chunks, &min_chunk);
        if (!ok) fprintf(stderr, "pool %d n %lld grain %lld\n", sizes[s], (long long)ns[i],
                         (long long)grains[g]);
        CHECK(ok);
        if (ns[i] == 0) {
          CHECK(chunks == 0);
          continue;
        }
        /* Every chunk holds at least `grain` items unless the whole loop is smaller. */
        int64_t want = grains[g] < ns[i] ? grains[g] : ns[i];
        CHECK(min_chunk >= want);
        if (sizes[s] == 1 || ns[i] < 2 * grains[g]) CHECK(chunks == 1);
        if (sizes[s] > 1 && ns[i] >= 2 * grains[g]) CHECK(chunks >= 2);
      }
    }
    tpu_threadpool_destroy(pool);
  }
}

static void test_null_pool_inline(void) {
  int64_t chunks = 0, min_chunk = 0;
  CHECK(run_cover(NULL, 5000, 1, &chunks, &min_chunk));
  CHECK(chunks == 1);
  CHECK(min_chunk == 5000);
  /* grain <= 0 is treated as 1; NULL fn is ignored. */
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(2, &pool));
  CHECK(run_cover(pool, 100, 0, NULL, NULL));
  CHECK(run_cover(pool, 100, -5, NULL, NULL));
  tpu_parallel_for(pool, 100, 1, NULL, NULL);
  tpu_parallel_for(pool, -3, 1, cover_body, NULL);
  tpu_threadpool_destroy(pool);
}

/* ---- nesting ---- */
typedef struct {
  tpu_threadpool_t* pool;
  int64_t total; /* atomic */
} nest_ctx_t;

static void nest_inner(void* arg, int64_t begin, int64_t end) {
  __atomic_fetch_add(&((nest_ctx_t*)arg)->total, end - begin, __ATOMIC_RELAXED);
}
static void nest_outer(void* arg, int64_t begin, int64_t end) {
  nest_ctx_t* c = arg;
  for (int64_t i = begin; i < end; i++) tpu_parallel_for(c->pool, 100, 10, nest_inner, c);
}

static void test_nested(void) {
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(3, &pool));
  nest_ctx_t c = {.pool = pool};
  tpu_parallel_for(pool, 64, 4, nest_outer, &c);
  CHECK(c.total == 64 * 100);
  tpu_threadpool_destroy(pool);
}

/* ---- serialisation of concurrent callers ---- */
typedef struct {
  tpu_threadpool_t* pool;
  int id;
  int64_t sum;
} caller_ctx_t;

static int g_active[2];
static int g_overlap;

static void serial_body(void* arg, int64_t begin, int64_t end) {
  caller_ctx_t* c = arg;
  __atomic_fetch_add(&g_active[c->id], 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&g_active[1 - c->id], __ATOMIC_SEQ_CST) != 0)
    __atomic_fetch_add(&g_overlap, 1, __ATOMIC_SEQ_CST);
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) s += i;
  struct timespec ts = {0, 20000}; /* widen the window in which an overlap would show */
  nanosleep(&ts, NULL);
  if (__atomic_load_n(&g_active[1 - c->id], __ATOMIC_SEQ_CST) != 0)
    __atomic_fetch_add(&g_overlap, 1, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&c->sum, s, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&g_active[c->id], 1, __ATOMIC_SEQ_CST);
}

static void* caller_main(void* arg) {
  caller_ctx_t* c = arg;
  for (int r = 0; r < 100; r++) tpu_parallel_for(c->pool, 2000, 100, serial_body, c);
  return NULL;
}

static void test_concurrent_callers(void) {
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(3, &pool));
  caller_ctx_t c[2] = {{.pool = pool, .id = 0}, {.pool = pool, .id = 1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, caller_main, &c[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  int64_t expect = 100LL * (1999LL * 2000 / 2);
  CHECK(c[0].sum == expect);
  CHECK(c[1].sum == expect);
  CHECK(g_overlap == 0);
  tpu_threadpool_destroy(pool);
}

/* ---- real parallelism: several threads take chunks ---- */
typedef struct {
  pthread_t seen[64];
  int num_seen;
  pthread_mutex_t mu;
} threads_ctx_t;

static void threads_body(void* arg, int64_t begin, int64_t end) {
  threads_ctx_t* c = arg;
  struct timespec ts = {0, 5000000}; /* 5 ms: long enough for workers to wake */
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&c->mu);
  bool known = false;
  for (int i = 0; i < c->num_seen; i++) known = known || pthread_equal(c->seen[i], pthread_self());
  if (!known && c->num_seen < 64) c->seen[c->num_seen++] = pthread_self();
  pthread_mutex_unlock(&c->mu);
}

static void test_uses_workers(void) {
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(4, &pool));
  threads_ctx_t c = {.num_seen = 0};
  pthread_mutex_init(&c.mu, NULL);
  tpu_parallel_for(pool, 16, 1, threads_body, &c);
  CHECK(c.num_seen >= 2);
  CHECK(c.num_seen <= 4);
  pthread_mutex_destroy(&c.mu);
  tpu_threadpool_destroy(pool);
}

/* ---- many tiny loops: must not stall (workers sleep/wake correctly) ---- */
static void sum_body(void* arg, int64_t begin, int64_t end) {
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) s += i;
  __atomic_fetch_add((int64_t*)arg, s, __ATOMIC_RELAXED);
}

static void test_many_small_loops(void) {
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(2, &pool));
  int64_t total = 0;
  uint64_t t0 = tpu_now_ns();
  const int rounds = 20000;
  for (int r = 0; r < rounds; r++) tpu_parallel_for(pool, 64, 16, sum_body, &total);
  uint64_t t1 = tpu_now_ns();
  CHECK(total == (int64_t)rounds * (63 * 64 / 2));
  fprintf(stderr, "  %d small parallel_for: %.2f us each\n", rounds,
          (double)(t1 - t0) / 1e3 / rounds);
  tpu_threadpool_destroy(pool);
}

static void test_create_destroy_repeatedly(void) {
  for (int i = 0; i < 50; i++) {
    tpu_threadpool_t* pool = NULL;
    CHECK_OK(tpu_threadpool_create(1 + i % 4, &pool));
    if (i % 2) CHECK(run_cover(pool, 1000, 10, NULL, NULL));
    tpu_threadpool_destroy(pool);
  }
}

int main(void) {
  RUN_TEST(test_create_invalid);
  RUN_TEST(test_coverage);
  RUN_TEST(test_null_pool_inline);
  RUN_TEST(test_nested);
  RUN_TEST(test_concurrent_callers);
  RUN_TEST(test_uses_workers);
  RUN_TEST(test_many_small_loops);
  RUN_TEST(test_create_destroy_repeatedly);
  return TEST_REPORT();
}
