/* Host driver: options, allocator (alloc/free/reuse/stats/peak/OOM/
 * empty_cache), queue ordering and asynchrony, async errors, copies, events
 * across two chips, teardown with pending work, list works run piece-major. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tpu/hal.h"
#include "tpu/trace.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static tpu_hal_driver_t* make_driver(int32_t count, uint64_t budget) {
  tpu_host_driver_options_t o = {.struct_size = sizeof(o), .device_count = count,
                                 .memory_per_device = budget, .compute_units = 2};
  tpu_hal_driver_t* drv = NULL;
  CHECK_OK(tpu_host_driver_create(&o, &drv));
  return drv;
}

static tpu_hal_device_t* device_of(tpu_hal_driver_t* drv, int32_t i) {
  return tpu_hal_driver_vt(drv)->device(drv, i);
}

#define DVT(d) tpu_hal_device_vt(d)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A gate: a work that blocks the queue until opened. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
} gate_t;

static void gate_init(gate_t* g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = false;
}
static void gate_destroy(gate_t* g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}
static void gate_open(gate_t* g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}
static tpu_status_t gate_run(void* ctx) {
  gate_t* g = ctx;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return TPU_OK;
}
static void submit_gate(tpu_hal_device_t* d, gate_t* g) {
  tpu_hal_work_t w = {.name = "gate", .run = gate_run, .ctx = g};
  CHECK_OK(DVT(d)->submit(d, &w));
}

/* ---- options and driver ---- */
static void test_driver_create(void) {
  tpu_hal_driver_t* drv = (tpu_hal_driver_t*)0x1;
  CHECK_STATUS(tpu_host_driver_create(NULL, &drv), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK(drv == NULL);
  tpu_host_driver_options_t o = {.struct_size = sizeof(o), .device_count = 1,
                                 .memory_per_device = MiB, .compute_units = 1};
  CHECK_STATUS(tpu_host_driver_create(&o, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  o.struct_size = 4;
  CHECK_STATUS(tpu_host_driver_create(&o, &drv), TPU_STATUS_INVALID_ARGUMENT, "struct_size");
  o.struct_size = sizeof(o);
  o.device_count = 0;
  CHECK_STATUS(tpu_host_driver_create(&o, &drv), TPU_STATUS_INVALID_ARGUMENT, "device_count");
  o.device_count = -2;
  CHECK_STATUS(tpu_host_driver_create(&o, &drv), TPU_STATUS_INVALID_ARGUMENT, "device_count");
  o.device_count = 1;
  o.memory_per_device = 0;
  CHECK_STATUS(tpu_host_driver_create(&o, &drv), TPU_STATUS_INVALID_ARGUMENT, "memory");

  drv = make_driver(3, 32 * MiB);
  CHECK_STREQ(tpu_hal_driver_vt(drv)->name(drv), "host");
  CHECK(tpu_hal_driver_vt(drv)->device_count(drv) == 3);
  CHECK(device_of(drv, -1) == NULL);
  CHECK(device_of(drv, 3) == NULL);
  for (int i = 0; i < 3; i++) {
    tpu_hal_device_t* d = device_of(drv, i);
    CHECK(d != NULL);
    tpu_hal_device_properties_t p;
    DVT(d)->query_properties(d, &p);
    CHECK_STREQ(p.driver, "host");
    CHECK(strlen(p.name) > 0);
    CHECK(p.index == i);
    CHECK(p.compute_units == 2);
    CHECK(p.total_memory == 32 * MiB);
    CHECK(DVT(d)->query_idle(d));
  }
  tpu_object_release(&drv->base);
}

/* ---- allocator ---- */
static void test_alloc_basic(void) {
  tpu_hal_driver_t* drv = make_driver(1, 64 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  void* p = (void*)0x1;
  CHECK_OK(DVT(d)->allocate(d, 0, &p));
  CHECK(p == NULL);

  CHECK_OK(DVT(d)->allocate(d, 1000, &p));
  CHECK(p != NULL);
  CHECK(((uintptr_t)p % 64) == 0);
  memset(p, 0xab, 1000); /* dereferenceable host memory */
  CHECK(DVT(d)->owns_pointer(d, p));
  CHECK(DVT(d)->owns_pointer(d, (char*)p + 999));
  int local;
  CHECK(!DVT(d)->owns_pointer(d, &local));
  CHECK(!DVT(d)->owns_pointer(d, NULL));

  tpu_hal_memory_stats_t s;
  DVT(d)->memory_stats(d, &s);
  CHECK(s.allocated_bytes == 1024); /* rounded to 512 B */
  CHECK(s.requested_bytes == 1000);
  CHECK(s.reserved_bytes == 1024);
  CHECK(s.num_allocs == 1);
  CHECK(s.num_segments == 1);
  CHECK(s.num_device_allocs == 1);
  CHECK(s.num_cache_hits == 0);
  CHECK(s.budget_bytes == 64 * MiB);

  DVT(d)->deallocate(d, p);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.requested_bytes == 0);
  CHECK(s.reserved_bytes == 1024); /* kept in the cache */
  CHECK(s.num_frees == 1);
  CHECK(s.num_segments == 1);
  CHECK(!DVT(d)->owns_pointer(d, p));
  uint64_t free_b = 0, total = 0;
  DVT(d)->memory_info(d, &free_b, &total);
  CHECK(total == 64 * MiB);
  CHECK(free_b == 64 * MiB); /* cached memory counts as free */

  /* Reuse: a fitting request gets the cached block back. */
  void* q = NULL;
  CHECK_OK(DVT(d)->allocate(d, 900, &q));
  CHECK(q == p);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_cache_hits == 1);
  CHECK(s.num_device_allocs == 1);
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.requested_bytes == 900);

  /* A much larger request does not take a small cached block. */
  DVT(d)->deallocate(d, q);
  void* big = NULL;
  CHECK_OK(DVT(d)->allocate(d, 3 * MiB, &big));
  CHECK(big != q);
  CHECK(((uintptr_t)big % 4096) == 0);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.allocated_bytes == 4 * MiB); /* rounded to 2 MiB */
  CHECK(s.reserved_bytes == 4 * MiB + 1024);
  CHECK(s.num_segments == 2);
  DVT(d)->memory_info(d, &free_b, &total);
  CHECK(free_b == 60 * MiB);

  /* Freeing an unknown pointer or twice is ignored. */
  DVT(d)->deallocate(d, &local);
  DVT(d)->deallocate(d, (char*)big + 64);
  DVT(d)->deallocate(d, q);
  DVT(d)->deallocate(d, NULL);
  tpu_hal_memory_stats_t s2;
  DVT(d)->memory_stats(d, &s2);
  CHECK(memcmp(&s, &s2, sizeof(s)) == 0);

  /* Many blocks: all distinct, all owned, all reused after free. */
  enum { N = 200 };
  void* ptrs[N];
  for (int i = 0; i < N; i++) {
    CHECK_OK(DVT(d)->allocate(d, 100 + (size_t)i * 37, &ptrs[i]));
    memset(ptrs[i], i, 100 + (size_t)i * 37);
  }
  bool all_owned = true, distinct = true;
  for (int i = 0; i < N; i++) {
    all_owned = all_owned && DVT(d)->owns_pointer(d, ptrs[i]);
    for (int j = 0; j < i; j++) distinct = distinct && ptrs[i] != ptrs[j];
  }
  CHECK(all_owned);
  CHECK(distinct);
  DVT(d)->memory_stats(d, &s);
  uint64_t device_allocs = s.num_device_allocs;
  for (int i = 0; i < N; i++) DVT(d)->deallocate(d, ptrs[i]);
  for (int i = 0; i < N; i++) CHECK_OK(DVT(d)->allocate(d, 100 + (size_t)i * 37, &ptrs[i]));
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_device_allocs == device_allocs); /* every one came from the cache */
  for (int i = 0; i < N; i++) DVT(d)->deallocate(d, ptrs[i]);
  DVT(d)->deallocate(d, big);

  /* empty_cache returns everything. */
  DVT(d)->empty_cache(d);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.reserved_bytes == 0);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.num_segments == 0);
  CHECK(s.num_device_frees == s.num_device_allocs);
  tpu_object_release(&drv->base);
}

static void test_peak_and_reset(void) {
  tpu_hal_driver_t* drv = make_driver(1, 64 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  void *a, *b, *c;
  CHECK_OK(DVT(d)->allocate(d, 4 * MiB, &a));
  CHECK_OK(DVT(d)->allocate(d, 8 * MiB, &b));
  DVT(d)->deallocate(d, b);
  CHECK_OK(DVT(d)->allocate(d, 2 * MiB, &c));
  tpu_hal_memory_stats_t s;
  DVT(d)->memory_stats(d, &s);
  CHECK(s.peak_allocated_bytes == 12 * MiB);
  CHECK(s.peak_reserved_bytes == 14 * MiB); /* the cached 8 MiB block is too big for 2 MiB */
  CHECK(s.allocated_bytes == 6 * MiB);
  CHECK(s.reserved_bytes == 14 * MiB);
  DVT(d)->deallocate(d, c);
  CHECK_OK(DVT(d)->allocate(d, 2 * MiB, &c));
  DVT(d)->reset_peak_stats(d);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.peak_allocated_bytes == 6 * MiB);
  CHECK(s.peak_reserved_bytes == 14 * MiB);
  CHECK(s.num_allocs == 4);
  CHECK(s.num_frees == 2);
  CHECK(s.num_cache_hits == 1);
  DVT(d)->reset_accumulated_stats(d);
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_allocs == 0 && s.num_frees == 0 && s.num_cache_hits == 0);
  CHECK(s.num_device_allocs == 0 && s.num_device_frees == 0 && s.num_ooms == 0);
  CHECK(s.allocated_bytes == 6 * MiB); /* current values untouched */
  CHECK(s.num_segments == 3);
  DVT(d)->deallocate(d, a);
  DVT(d)->deallocate(d, c);
  tpu_object_release(&drv->base);
}

static void test_oom(void) {
  tpu_hal_driver_t* drv = make_driver(1, 64 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  void* p = (void*)0x1;
  CHECK_STATUS(DVT(d)->allocate(d, 4 * GiB, &p), TPU_STATUS_OUT_OF_MEMORY,
               "tpu:0 out of memory: tried to allocate 4.00 GiB (4294967296 bytes); 64.0 MiB "
               "free of 64.0 MiB budget, 0 bytes allocated");
  CHECK(p == NULL);
  tpu_hal_memory_stats_t s;
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_ooms == 1);
  CHECK(s.reserved_bytes == 0);

  /* A smaller allocation still succeeds afterwards. */
  void* a = NULL;
  CHECK_OK(DVT(d)->allocate(d, 40 * MiB, &a));
  CHECK_STATUS(DVT(d)->allocate(d, 30 * MiB, &p), TPU_STATUS_OUT_OF_MEMORY,
               "24.0 MiB free of 64.0 MiB budget, 40.0 MiB allocated");
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_ooms == 2);
  void* b = NULL;
  CHECK_OK(DVT(d)->allocate(d, 20 * MiB, &b));

  /* Cached blocks are released to make room: 40 MiB cached + 48 MiB > 64 MiB. */
  DVT(d)->deallocate(d, a);
  DVT(d)->deallocate(d, b);
  void* c = NULL;
  CHECK_OK(DVT(d)->allocate(d, 48 * MiB, &c));
  DVT(d)->memory_stats(d, &s);
  CHECK(s.num_ooms == 2);
  CHECK(s.reserved_bytes == 48 * MiB);
  CHECK(s.num_device_frees == 2);
  CHECK(s.num_segments == 1);
  memset(c, 1, 48 * MiB);
  DVT(d)->deallocate(d, c);

  /* A request equal to the whole budget fits once nothing else is held. */
  CHECK_OK(DVT(d)->allocate(d, 64 * MiB, &c));
  DVT(d)->deallocate(d, c);
  /* One byte over the budget does not. */
  CHECK_STATUS(DVT(d)->allocate(d, 64 * MiB + 1, &c), TPU_STATUS_OUT_OF_MEMORY, "tpu:0");
  CHECK_STATUS(DVT(d)->allocate(d, SIZE_MAX, &c), TPU_STATUS_OUT_OF_MEMORY, "out of memory");
  tpu_object_release(&drv->base);
}

/* Live allocations the user forgot are freed with the driver (LeakSanitizer). */
static void test_leaked_allocations_freed(void) {
  tpu_hal_driver_t* drv = make_driver(2, 16 * MiB);
  void* p;
  for (int i = 0; i < 10; i++) CHECK_OK(DVT(device_of(drv, i % 2))->allocate(device_of(drv, i % 2), 1 << 16, &p));
  tpu_object_release(&drv->base);
}

/* ---- queue ---- */
typedef struct {
  int* log;
  int* log_len;
  int value;
  int* cleanups;
} order_ctx_t;

static tpu_status_t order_run(void* ctx) {
  order_ctx_t* c = ctx;
  c->log[(*c->log_len)++] = c->value;
  return TPU_OK;
}
static void order_cleanup(void* ctx) {
  order_ctx_t* c = ctx;
  __atomic_fetch_add(c->cleanups, 1, __ATOMIC_RELAXED);
  free(c);
}

static void test_queue_order(void) {
  tpu_hal_driver_t* drv = make_driver(1, 16 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  enum { N = 3000 };
  int* log = calloc(N, sizeof(int));
  int log_len = 0, cleanups = 0;
  gate_t g;
  gate_init(&g);
  submit_gate(d, &g);
  for (int i = 0; i < N; i++) {
    order_ctx_t* c = malloc(sizeof(*c));
    *c = (order_ctx_t){.log = log, .log_len = &log_len, .value = i, .cleanups = &cleanups};
    tpu_hal_work_t w = {.name = "order", .run = order_run, .cleanup = order_cleanup, .ctx = c};
    CHECK_OK(DVT(d)->submit(d, &w));
  }
  /* Submit returned before anything ran: the gate still holds the queue. */
  CHECK(!DVT(d)->query_idle(d));
  CHECK(__atomic_load_n(&log_len, __ATOMIC_RELAXED) == 0);
  gate_open(&g);
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK(DVT(d)->query_idle(d));
  CHECK(log_len == N);
  bool in_order = true;
  for (int i = 0; i < N; i++) in_order = in_order && log[i] == i;
  CHECK(in_order);
  CHECK(cleanups == N);

  /* Invalid submits: NULL work, NULL run (cleanup still called). */
  CHECK_STATUS(DVT(d)->submit(d, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  order_ctx_t* c = malloc(sizeof(*c));
  *c = (order_ctx_t){.cleanups = &cleanups};
  tpu_hal_work_t bad = {.name = "bad", .run = NULL, .cleanup = order_cleanup, .ctx = c};
  CHECK_STATUS(DVT(d)->submit(d, &bad), TPU_STATUS_INVALID_ARGUMENT, "run");
  CHECK(cleanups == N + 1);
  free(log);
  gate_destroy(&g);
  tpu_object_release(&drv->base);
}

/* ---- async errors ---- */
typedef struct {
  tpu_status_code_t code;
  const char* msg;
  int* ran;
} err_ctx_t;

static tpu_status_t err_run(void* ctx) {
  err_ctx_t* e = ctx;
  (*e->ran)++;
  if (e->code == TPU_STATUS_OK) return TPU_OK;
  return TPU_ERROR(e->code, "%s", e->msg);
}

static void submit_err(tpu_hal_device_t* d, const char* name, err_ctx_t* e) {
  tpu_hal_work_t w = {.name = name, .run = err_run, .ctx = e};
  CHECK_OK(DVT(d)->submit(d, &w));
}

static void test_async_error(void) {
  tpu_hal_driver_t* drv = make_driver(2, 16 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  int ran = 0;
  err_ctx_t e1 = {TPU_STATUS_OUT_OF_RANGE, "index 7 out of range for dimension 0 with size 5", &ran};
  err_ctx_t e2 = {TPU_STATUS_INVALID_ARGUMENT, "second error", &ran};
  err_ctx_t ok = {TPU_STATUS_OK, NULL, &ran};
  submit_err(d, "aten::index_select", &e1);
  submit_err(d, "aten::add.Tensor", &e2);
  submit_err(d, "aten::mul.Tensor", &ok);
  /* The error surfaces at synchronize, with the work's name; later works ran. */
  CHECK_STATUS(DVT(d)->synchronize(d), TPU_STATUS_OUT_OF_RANGE,
               "aten::index_select: index 7 out of range for dimension 0 with size 5");
  CHECK(ran == 3);
  /* Cleared: the device is usable again. */
  CHECK_OK(DVT(d)->synchronize(d));
  void* p = NULL;
  CHECK_OK(DVT(d)->allocate(d, 256, &p));
  char in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = (char)i;
  CHECK_OK(DVT(d)->copy_h2d(d, p, in, sizeof(in)));
  CHECK_OK(DVT(d)->copy_d2h(d, out, p, sizeof(out)));
  CHECK(memcmp(in, out, sizeof(in)) == 0);

  /* copy_d2h also returns a pending error (and still copies). */
  memset(out, 0, sizeof(out));
  submit_err(d, "aten::gather", &e2);
  CHECK_STATUS(DVT(d)->copy_d2h(d, out, p, sizeof(out)), TPU_STATUS_INVALID_ARGUMENT,
               "aten::gather: second error");
  CHECK(memcmp(in, out, sizeof(in)) == 0);
  CHECK_OK(DVT(d)->synchronize(d));

  /* Errors are per device. */
  tpu_hal_device_t* d1 = device_of(drv, 1);
  submit_err(d1, "aten::index_select", &e1);
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK_STATUS(DVT(d1)->synchronize(d1), TPU_STATUS_OUT_OF_RANGE, "index 7");

  /* A kernel that already prefixed its op name is not prefixed twice. */
  err_ctx_t e3 = {TPU_STATUS_INVALID_ARGUMENT, "aten::cat: tensors must have the same dtype", &ran};
  submit_err(d, "aten::cat", &e3);
  tpu_status_t st = DVT(d)->synchronize(d);
  CHECK_STREQ(tpu_status_message(st), "aten::cat: tensors must have the same dtype");
  tpu_status_free(st);

  /* NULL and very long names. */
  submit_err(d, NULL, &e2);
  st = DVT(d)->synchronize(d);
  CHECK_STREQ(tpu_status_message(st), "second error");
  tpu_status_free(st);
  char longname[300];
  memset(longname, 'n', sizeof(longname) - 1);
  longname[299] = '\0';
  submit_err(d, longname, &e2);
  st = DVT(d)->synchronize(d);
  const char* msg = tpu_status_message(st);
  CHECK(strspn(msg, "n") == 127);
  CHECK(strcmp(msg + 127, ": second error") == 0);
  tpu_status_free(st);

  DVT(d)->deallocate(d, p);
  /* An error left pending at teardown is freed with the driver. */
  submit_err(d, "aten::leftover", &e2);
  tpu_object_release(&drv->base);
}

/* ---- copies ---- */
static void test_copies(void) {
  tpu_hal_driver_t* drv = make_driver(2, 64 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  tpu_hal_device_t* d1 = device_of(drv, 1);
  enum { N = 100000 };
  unsigned char* host = malloc(N);
  unsigned char* back = malloc(N);
  for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7);
  void *a, *b, *c;
  CHECK_OK(DVT(d)->allocate(d, N, &a));
  CHECK_OK(DVT(d)->allocate(d, N, &b));
  CHECK_OK(DVT(d1)->allocate(d1, N, &c));

  /* h2d stages: the source may be reused at once. */
  gate_t g;
  gate_init(&g);
  submit_gate(d, &g);
  CHECK_OK(DVT(d)->copy_h2d(d, a, host, N));
  memset(host, 0, N); /* the queued copy must not see this */
  CHECK_OK(DVT(d)->copy_d2d(d, b, a, N));
  gate_open(&g);
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  bool same = true;
  for (int i = 0; i < N; i++) same = same && back[i] == (unsigned char)(i * 7);
  CHECK(same);

  /* Partial copies at offsets, d2d with a source on another chip. */
  CHECK_OK(DVT(d)->copy_d2h(d, back, (char*)b + 1000, 10));
  CHECK(back[0] == (unsigned char)(1000 * 7));
  CHECK_OK(DVT(d1)->copy_d2d(d1, c, a, N));
  memset(back, 0, N);
  CHECK_OK(DVT(d1)->copy_d2h(d1, back, c, N));
  same = true;
  for (int i = 0; i < N; i++) same = same && back[i] == (unsigned char)(i * 7);
  CHECK(same);

  /* Large h2d (above the staging limit) is correct too. */
  size_t big_n = 24 * MiB;
  unsigned char* big_host = malloc(big_n);
  unsigned char* big_back = malloc(big_n);
  for (size_t i = 0; i < big_n; i++) big_host[i] = (unsigned char)(i ^ (i >> 8));
  void* big;
  CHECK_OK(DVT(d)->allocate(d, big_n, &big));
  CHECK_OK(DVT(d)->copy_h2d(d, big, big_host, big_n));
  memset(big_host, 0, big_n);
  CHECK_OK(DVT(d)->copy_d2h(d, big_back, big, big_n));
  same = true;
  for (size_t i = 0; i < big_n; i++) same = same && big_back[i] == (unsigned char)(i ^ (i >> 8));
  CHECK(same);
  DVT(d)->deallocate(d, big);
  free(big_host);
  free(big_back);

  /* Size 0 is a no-op, whatever the pointers. */
  CHECK_OK(DVT(d)->copy_h2d(d, NULL, NULL, 0));
  CHECK_OK(DVT(d)->copy_d2h(d, NULL, NULL, 0));
  CHECK_OK(DVT(d)->copy_d2d(d, NULL, NULL, 0));

  /* Bad pointers are rejected, not dereferenced. */
  int local[4];
  CHECK_STATUS(DVT(d)->copy_h2d(d, local, host, sizeof(local)), TPU_STATUS_INVALID_ARGUMENT,
               "copy_h2d");
  CHECK_STATUS(DVT(d)->copy_h2d(d, a, NULL, 16), TPU_STATUS_INVALID_ARGUMENT, "src is NULL");
  CHECK_STATUS(DVT(d)->copy_d2h(d, back, (char*)a + N - 10, 1 << 20), TPU_STATUS_INVALID_ARGUMENT,
               "copy_d2h");
  CHECK_STATUS(DVT(d)->copy_d2h(d, back, c, 16), TPU_STATUS_INVALID_ARGUMENT, "tpu:0");
  CHECK_STATUS(DVT(d)->copy_d2d(d, local, a, 16), TPU_STATUS_INVALID_ARGUMENT, "copy_d2d");
  CHECK_STATUS(DVT(d)->copy_d2d(d, b, local, 16), TPU_STATUS_INVALID_ARGUMENT, "copy_d2d");
  CHECK_OK(DVT(d)->synchronize(d));

  DVT(d)->deallocate(d, a);
  DVT(d)->deallocate(d, b);
  DVT(d1)->deallocate(d1, c);
  gate_destroy(&g);
  free(host);
  free(back);
  tpu_object_release(&drv->base);
}

/* ---- events ---- */
static tpu_status_t sleep_run(void* ctx) {
  sleep_ms((int)(intptr_t)ctx);
  return TPU_OK;
}

typedef struct {
  volatile int* cell;
  int value;
  int* observed;
} cell_ctx_t;

static tpu_status_t cell_write(void* ctx) {
  cell_ctx_t* c = ctx;
  *c->cell = c->value;
  return TPU_OK;
}
static tpu_status_t cell_read(void* ctx) {
  cell_ctx_t* c = ctx;
  *c->observed = *c->cell;
  return TPU_OK;
}

static void test_events(void) {
  tpu_hal_driver_t* drv = make_driver(2, 16 * MiB);
  tpu_hal_device_t* d0 = device_of(drv, 0);
  tpu_hal_device_t* d1 = device_of(drv, 1);
  tpu_hal_event_t *e, *start, *end, *untimed;
  CHECK_OK(DVT(d0)->create_event(d0, true, &e));
  CHECK_OK(DVT(d0)->create_event(d0, true, &start));
  CHECK_OK(DVT(d0)->create_event(d0, true, &end));
  CHECK_OK(DVT(d0)->create_event(d0, false, &untimed));
  CHECK(e->base.refcount == 1);

  /* Never recorded: complete, but no timing. */
  CHECK(tpu_hal_event_vt(e)->query(e));
  CHECK_OK(tpu_hal_event_vt(e)->synchronize(e));
  double ms = -1;
  CHECK_STATUS(tpu_hal_event_vt(e)->elapsed_ms(start, end, &ms), TPU_STATUS_FAILED_PRECONDITION,
               "not been recorded");

  /* Recorded behind a gate: pending until the gate opens. */
  gate_t g;
  gate_init(&g);
  submit_gate(d0, &g);
  CHECK_OK(DVT(d0)->record_event(d0, e));
  CHECK(!tpu_hal_event_vt(e)->query(e));
  CHECK_STATUS(tpu_hal_event_vt(e)->elapsed_ms(e, e, &ms), TPU_STATUS_FAILED_PRECONDITION,
               "not completed");
  gate_open(&g);
  CHECK_OK(tpu_hal_event_vt(e)->synchronize(e));
  CHECK(tpu_hal_event_vt(e)->query(e));
  CHECK_OK(DVT(d0)->synchronize(d0));

  /* Elapsed time around a 30 ms work. */
  CHECK_OK(DVT(d0)->record_event(d0, start));
  tpu_hal_work_t w = {.name = "sleep", .run = sleep_run, .ctx = (void*)(intptr_t)30};
  CHECK_OK(DVT(d0)->submit(d0, &w));
  CHECK_OK(DVT(d0)->record_event(d0, end));
  CHECK_OK(tpu_hal_event_vt(end)->synchronize(end));
  CHECK(tpu_hal_event_vt(start)->query(start));
  CHECK_OK(tpu_hal_event_vt(start)->elapsed_ms(start, end, &ms));
  CHECK(ms >= 25.0 && ms < 5000.0);
  CHECK_OK(tpu_hal_event_vt(start)->elapsed_ms(end, start, &ms));
  CHECK(ms < 0);
  CHECK_OK(DVT(d0)->record_event(d0, untimed));
  CHECK_OK(tpu_hal_event_vt(untimed)->synchronize(untimed));
  CHECK_STATUS(tpu_hal_event_vt(start)->elapsed_ms(start, untimed, &ms),
               TPU_STATUS_FAILED_PRECONDITION, "timing");

  /* Cross-device: d1 waits for an event recorded on d0. */
  volatile int cell = 0;
  int observed = -1;
  gate_t g2;
  gate_init(&g2);
  submit_gate(d0, &g2);
  cell_ctx_t wc = {.cell = &cell, .value = 42};
  tpu_hal_work_t write = {.name = "write", .run = cell_write, .ctx = &wc};
  CHECK_OK(DVT(d0)->submit(d0, &write));
  CHECK_OK(DVT(d0)->record_event(d0, e));
  CHECK_OK(DVT(d1)->wait_event(d1, e));
  cell_ctx_t rc = {.cell = &cell, .observed = &observed};
  tpu_hal_work_t read = {.name = "read", .run = cell_read, .ctx = &rc};
  CHECK_OK(DVT(d1)->submit(d1, &read));
  sleep_ms(20);
  CHECK(!DVT(d1)->query_idle(d1)); /* blocked on the event */
  CHECK(observed == -1);
  gate_open(&g2);
  CHECK_OK(DVT(d1)->synchronize(d1));
  CHECK(observed == 42);
  CHECK(tpu_hal_event_vt(e)->query(e));

  /* Waiting on a never-recorded or completed event does not block. */
  tpu_hal_event_t* fresh;
  CHECK_OK(DVT(d1)->create_event(d1, false, &fresh));
  CHECK_OK(DVT(d1)->wait_event(d1, fresh));
  CHECK_OK(DVT(d1)->wait_event(d1, e));
  CHECK_OK(DVT(d1)->synchronize(d1));

  /* Releasing an event while works still reference it is safe. */
  gate_t g3;
  gate_init(&g3);
  submit_gate(d0, &g3);
  CHECK_OK(DVT(d0)->record_event(d0, fresh));
  CHECK_OK(DVT(d1)->wait_event(d1, fresh));
  tpu_object_release(&fresh->base);
  gate_open(&g3);
  CHECK_OK(DVT(d1)->synchronize(d1));
  CHECK_OK(DVT(d0)->synchronize(d0));

  /* Re-recording moves the marker. */
  gate_t g4;
  gate_init(&g4);
  submit_gate(d1, &g4);
  CHECK_OK(DVT(d1)->record_event(d1, e));
  CHECK(!tpu_hal_event_vt(e)->query(e));
  gate_open(&g4);
  CHECK_OK(tpu_hal_event_vt(e)->synchronize(e));
  CHECK(tpu_hal_event_vt(e)->query(e));

  CHECK_STATUS(DVT(d0)->record_event(d0, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(DVT(d0)->create_event(d0, false, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);

  tpu_object_release(&e->base);
  tpu_object_release(&start->base);
  tpu_object_release(&end->base);
  tpu_object_release(&untimed->base);
  gate_destroy(&g);
  gate_destroy(&g2);
  gate_destroy(&g3);
  gate_destroy(&g4);
  tpu_object_release(&drv->base);
}

/* ---- teardown drains pending work ---- */
static tpu_status_t count_run(void* ctx) {
  sleep_ms(1);
  __atomic_fetch_add((int*)ctx, 1, __ATOMIC_RELAXED);
  return TPU_OK;
}

static void test_destroy_drains(void) {
  tpu_hal_driver_t* drv = make_driver(2, 16 * MiB);
  int counts[2] = {0, 0};
  tpu_hal_event_t* e;
  tpu_hal_device_t* d0 = device_of(drv, 0);
  tpu_hal_device_t* d1 = device_of(drv, 1);
  CHECK_OK(DVT(d0)->create_event(d0, false, &e));
  /* d0 waits for an event recorded on d1 after some work: destroying must not hang. */
  for (int i = 0; i < 20; i++) {
    tpu_hal_work_t w = {.name = "count", .run = count_run, .ctx = &counts[1]};
    CHECK_OK(DVT(d1)->submit(d1, &w));
  }
  CHECK_OK(DVT(d1)->record_event(d1, e));
  CHECK_OK(DVT(d0)->wait_event(d0, e));
  for (int i = 0; i < 20; i++) {
    tpu_hal_work_t w = {.name = "count", .run = count_run, .ctx = &counts[0]};
    CHECK_OK(DVT(d0)->submit(d0, &w));
  }
  tpu_object_release(&e->base);
  tpu_object_release(&drv->base);
  CHECK(counts[0] == 20);
  CHECK(counts[1] == 20);
}

/* ---- concurrent use from several threads ---- */
typedef struct {
  tpu_hal_device_t* d;
  int failures;
} stress_ctx_t;

static void* stress_main(void* arg) {
  stress_ctx_t* s = arg;
  unsigned char buf[4096], back[4096];
  for (int i = 0; i < 300; i++) {
    size_t n = 64 + (size_t)(i * 131) % 4000;
    void* p = NULL;
    tpu_status_t st = DVT(s->d)->allocate(s->d, n, &p);
    if (st) {
      tpu_status_free(st);
      s->failures++;
      continue;
    }
    memset(buf, i & 0xff, n);
    st = DVT(s->d)->copy_h2d(s->d, p, buf, n);
    if (!st) st = DVT(s->d)->copy_d2h(s->d, back, p, n);
    if (st || memcmp(buf, back, n) != 0) s->failures++;
    tpu_status_free(st);
    DVT(s->d)->deallocate(s->d, p);
  }
  return NULL;
}

static void test_threads(void) {
  tpu_hal_driver_t* drv = make_driver(1, 16 * MiB);
  stress_ctx_t s[3] = {{device_of(drv, 0), 0}, {device_of(drv, 0), 0}, {device_of(drv, 0), 0}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, stress_main, &s[i]);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  CHECK(s[0].failures == 0 && s[1].failures == 0 && s[2].failures == 0);
  tpu_hal_memory_stats_t st;
  DVT(device_of(drv, 0))->memory_stats(device_of(drv, 0), &st);
  CHECK(st.allocated_bytes == 0);
  CHECK(st.num_allocs == 900);
  CHECK(st.num_frees == 900);
  tpu_object_release(&drv->base);
}


/* ---- list works (piece-major groups) ---- */
#define LW_PARTS 4
#define LW_LOG 64

typedef struct {
  pthread_mutex_t mu;
  int n;
  int who[LW_LOG], part[LW_LOG]; /* piece runs in order; part -1: whole run */
} lw_log_t;

/* A fake list work: piece p touches bytes [base + p*16, base + p*16 + 16) of
 * `mem` (written when `write`) and, if read_shift != 0, reads the bytes of
 * piece p + read_shift too. */
typedef struct {
  lw_log_t* log;
  int id;
  uintptr_t base;
  bool write;
  int read_shift;
  bool fail_part2;
} lw_t;

static void lw_note(lw_t* w, int part) {
  pthread_mutex_lock(&w->log->mu);
  if (w->log->n < LW_LOG) {
    w->log->who[w->log->n] = w->id;
    w->log->part[w->log->n] = part;
    w->log->n++;
  }
  pthread_mutex_unlock(&w->log->mu);
}
static tpu_status_t lw_run(void* ctx) {
  lw_note(ctx, -1);
  return TPU_OK;
}
static tpu_status_t lw_run_part(void* ctx, int64_t part) {
  lw_t* w = ctx;
  lw_note(w, (int)part);
  if (w->fail_part2 && part == 2) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "piece two failed");
  return TPU_OK;
}
static void lw_footprint(void* ctx, int64_t part, tpu_hal_range_fn_t visit, void* vctx) {
  lw_t* w = ctx;
  uintptr_t b = w->base + (uintptr_t)part * 16;
  visit(vctx, b, b + 16, w->write);
  if (w->read_shift) {
    int64_t q = (part + w->read_shift + LW_PARTS) % LW_PARTS;
    visit(vctx, w->base + (uintptr_t)q * 16, w->base + (uintptr_t)q * 16 + 16, false);
  }
}
static void submit_lw(tpu_hal_device_t* d, lw_t* w) {
  tpu_hal_work_t hw = {.name = w->id == 2 ? "list two" : "list", .run = lw_run, .ctx = w,
                       .parts = LW_PARTS, .run_part = lw_run_part, .footprint = lw_footprint};
  CHECK_OK(DVT(d)->submit(d, &hw));
}

/* Index in the log of (who, part), -1 if absent. */
static int lw_find(const lw_log_t* l, int who, int part) {
  for (int i = 0; i < l->n; i++)
    if (l->who[i] == who && l->part[i] == part) return i;
  return -1;
}

static void test_list_works(void) {
  tpu_threadpool_t* pool = NULL;
  CHECK_OK(tpu_threadpool_create(2, &pool));
  tpu_host_driver_options_t o = {.struct_size = sizeof(o), .device_count = 1, .memory_per_device = MiB,
                                 .compute_units = 2, .pool = pool, .group_list_works = true};
  tpu_hal_driver_t* drv = NULL;
  CHECK_OK(tpu_host_driver_create(&o, &drv));
  tpu_hal_device_t* d = device_of(drv, 0);
  static char mem[4][LW_PARTS * 16];
  tpu_hal_queue_stats_t st;

  /* Disjoint pieces: one group, each piece of work 0 before work 1's. */
  lw_log_t log = {.n = 0};
  pthread_mutex_init(&log.mu, NULL);
  gate_t g;
  gate_init(&g);
  submit_gate(d, &g);
  lw_t a = {&log, 0, (uintptr_t)mem[0], true, 0, false};
  lw_t b = {&log, 1, (uintptr_t)mem[1], true, 0, false};
  submit_lw(d, &a);
  submit_lw(d, &b);
  gate_open(&g);
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK(log.n == 2 * LW_PARTS);
  for (int p = 0; p < LW_PARTS; p++) CHECK(lw_find(&log, 0, p) >= 0 && lw_find(&log, 0, p) < lw_find(&log, 1, p));
  DVT(d)->queue_stats(d, &st);
  CHECK(st.list_groups == 1 && st.list_works == 2 && st.list_conflicts == 0);

  /* Work 1's piece p writes what work 0's piece p-1 reads: pieces meet, so
   * work 1 runs after all of work 0 (reads shared between pieces are fine). */
  log.n = 0;
  gate_destroy(&g);
  gate_init(&g);
  submit_gate(d, &g);
  lw_t c = {&log, 0, (uintptr_t)mem[2], false, 1, false};
  lw_t e = {&log, 1, (uintptr_t)mem[2], true, 0, false};
  submit_lw(d, &c);
  submit_lw(d, &e);
  gate_open(&g);
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK(log.n == 2 * LW_PARTS);
  int last0 = 0, first1 = LW_LOG;
  for (int i = 0; i < log.n; i++) {
    if (log.who[i] == 0 && i > last0) last0 = i;
    if (log.who[i] == 1 && i < first1) first1 = i;
  }
  CHECK(last0 < first1);
  DVT(d)->queue_stats(d, &st);
  CHECK(st.list_groups == 3 && st.list_works == 4 && st.list_conflicts == 0);

  /* A work whose own pieces meet runs whole, through run(). */
  log.n = 0;
  lw_t f = {&log, 0, (uintptr_t)mem[3], true, 1, false};
  submit_lw(d, &f);
  CHECK_OK(DVT(d)->synchronize(d)); /* also: a held list work does not hang a sync */
  CHECK(log.n == 1 && log.part[0] == -1);
  DVT(d)->queue_stats(d, &st);
  CHECK(st.list_conflicts == 1);

  /* A piece's error reaches synchronize with the work's name; the rest ran. */
  log.n = 0;
  gate_destroy(&g);
  gate_init(&g);
  submit_gate(d, &g);
  lw_t h = {&log, 2, (uintptr_t)mem[0], true, 0, true};
  lw_t k = {&log, 1, (uintptr_t)mem[1], true, 0, false};
  submit_lw(d, &h);
  submit_lw(d, &k);
  gate_open(&g);
  CHECK_STATUS(DVT(d)->synchronize(d), TPU_STATUS_INVALID_ARGUMENT, "list two");
  CHECK(log.n == 2 * LW_PARTS);
  CHECK_OK(DVT(d)->synchronize(d));
  gate_destroy(&g);
  pthread_mutex_destroy(&log.mu);
  tpu_object_release(&drv->base);
  tpu_threadpool_destroy(pool);
}

/* Capture and replay: recorded works do not run; each replay runs them all in
 * order; waiting for the queue and single-use works spoil a capture; memory
 * freed while capturing is held (not handed out again) until release. */
static tpu_status_t add_one(void* ctx) {
  int* v = ctx;
  *v += 1;
  return TPU_OK;
}
static tpu_status_t times_two(void* ctx) {
  int* v = ctx;
  *v *= 2;
  return TPU_OK;
}
static int g_cleanups;
static void count_cleanup(void* ctx) { g_cleanups++; }

static void test_capture_replay(void) {
  tpu_hal_driver_t* drv = make_driver(1, 16 * MiB);
  tpu_hal_device_t* d = device_of(drv, 0);
  int v = 1;
  g_cleanups = 0;
  CHECK_OK(DVT(d)->capture_begin(d));
  CHECK_STATUS(DVT(d)->capture_begin(d), TPU_STATUS_FAILED_PRECONDITION, "already being captured");
  tpu_hal_work_t w1 = {.name = "add", .run = add_one, .cleanup = count_cleanup, .ctx = &v};
  tpu_hal_work_t w2 = {.name = "double", .run = times_two, .cleanup = count_cleanup, .ctx = &v};
  CHECK_OK(DVT(d)->submit(d, &w1));
  CHECK_OK(DVT(d)->submit(d, &w2));
  void* p = NULL;
  CHECK_OK(DVT(d)->allocate(d, 4096, &p)); /* allocated and freed while capturing: held */
  DVT(d)->deallocate(d, p);
  tpu_hal_capture_t* c = NULL;
  CHECK_OK(DVT(d)->capture_end(d, &c));
  CHECK(c != NULL && DVT(d)->capture_works(c) == 2);
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK(v == 1 && g_cleanups == 0); /* recorded, not run */
  for (int i = 0; i < 8; i++) { /* the held block is never handed out again */
    void* q = NULL;
    CHECK_OK(DVT(d)->allocate(d, 4096, &q));
    CHECK(q != p);
    DVT(d)->deallocate(d, q);
  }
  CHECK_OK(DVT(d)->capture_replay(d, c));
  CHECK_OK(DVT(d)->synchronize(d)); /* the first replay's steps are not in the trace */
  CHECK_OK(tpu_trace_start(0)); /* the second replay traced: its work, and a step per recorded work */
  CHECK_OK(DVT(d)->capture_replay(d, c));
  CHECK_OK(DVT(d)->synchronize(d));
  tpu_trace_stop();
  CHECK(v == 10); /* ((1 + 1) * 2 + 1) * 2 */
  tpu_trace_event_t* ev = NULL;
  uint64_t dropped = 1;
  size_t nev = tpu_trace_take(&ev, &dropped);
  CHECKF(nev == 3 && dropped == 0, "%zu events", nev);
  if (nev == 3) {
    CHECK(ev[0].kind == TPU_TRACE_STEP && ev[1].kind == TPU_TRACE_STEP && ev[2].kind == TPU_TRACE_WORK);
    CHECK_STREQ(ev[0].name, "add");
    CHECK_STREQ(ev[1].name, "double");
    CHECK_STREQ(ev[2].name, "graph replay");
    CHECK(ev[0].end_ns <= ev[1].start_ns && ev[2].start_ns <= ev[0].start_ns && ev[1].end_ns <= ev[2].end_ns);
  }
  free(ev);
  tpu_hal_memory_stats_t st;
  DVT(d)->memory_stats(d, &st);
  uint64_t reserved = st.reserved_bytes;
  DVT(d)->capture_release(d, c);
  CHECK(g_cleanups == 2);
  DVT(d)->empty_cache(d); /* the held block went to the cache: now returned */
  DVT(d)->memory_stats(d, &st);
  CHECK(st.reserved_bytes < reserved && st.allocated_bytes == 0);

  /* Waiting for the queue spoils the capture; the device stays usable. */
  CHECK_OK(DVT(d)->capture_begin(d));
  tpu_hal_work_t w3 = {.name = "add", .run = add_one, .ctx = &v};
  CHECK_OK(DVT(d)->submit(d, &w3));
  CHECK_STATUS(DVT(d)->synchronize(d), TPU_STATUS_FAILED_PRECONDITION, "while a graph is being captured");
  char host[8];
  CHECK_STATUS(DVT(d)->copy_d2h(d, host, NULL, 0), TPU_STATUS_FAILED_PRECONDITION, "copy to the host");
  CHECK_STATUS(DVT(d)->capture_end(d, &c), TPU_STATUS_FAILED_PRECONDITION, "synchronize");
  CHECK(c == NULL);
  CHECK_STATUS(DVT(d)->capture_end(d, &c), TPU_STATUS_FAILED_PRECONDITION, "no graph");
  CHECK_OK(DVT(d)->submit(d, &w3));
  CHECK_OK(DVT(d)->synchronize(d));
  CHECK(v == 11);

  /* A single-use work is refused (and cleaned up); so is the capture. */
  CHECK_OK(DVT(d)->capture_begin(d));
  g_cleanups = 0;
  tpu_hal_work_t w4 = {.name = "draw", .run = add_one, .cleanup = count_cleanup, .ctx = &v, .single_use = true};
  CHECK_STATUS(DVT(d)->submit(d, &w4), TPU_STATUS_FAILED_PRECONDITION, "random");
  CHECK(g_cleanups == 1);
  CHECK_STATUS(DVT(d)->capture_end(d, &c), TPU_STATUS_FAILED_PRECONDITION, "draw");

  /* h2d while capturing snapshots its source. */
  void* buf = NULL;
  CHECK_OK(DVT(d)->allocate(d, sizeof(int), &buf));
  int src = 5;
  CHECK_OK(DVT(d)->capture_begin(d));
  CHECK_OK(DVT(d)->copy_h2d(d, buf, &src, sizeof(int)));
  CHECK_OK(DVT(d)->capture_end(d, &c));
  src = 6;
  CHECK_OK(DVT(d)->capture_replay(d, c));
  int back = 0;
  CHECK_OK(DVT(d)->copy_d2h(d, &back, buf, sizeof(int)));
  CHECK(back == 5);
  DVT(d)->capture_release(d, c);
  DVT(d)->deallocate(d, buf);
  tpu_object_release(&drv->base);
}

int main(void) {
  RUN_TEST(test_driver_create);
  RUN_TEST(test_capture_replay);
  RUN_TEST(test_alloc_basic);
  RUN_TEST(test_peak_and_reset);
  RUN_TEST(test_oom);
  RUN_TEST(test_leaked_allocations_freed);
  RUN_TEST(test_queue_order);
  RUN_TEST(test_async_error);
  RUN_TEST(test_copies);
  RUN_TEST(test_events);
  RUN_TEST(test_destroy_drains);
  RUN_TEST(test_threads);
  RUN_TEST(test_list_works);
  return TEST_REPORT();
}
