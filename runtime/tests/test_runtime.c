/* Runtime: environment parsing, initialisation from the environment,
 * device lookup errors, per-thread current device, peer copies, pinned host
 * memory, dispatch counters, shutdown and re-initialisation. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "tpu/drivers.h"
#include "tpu/runtime.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* ---- env parsing ---- */
static void check_bytes(const char* text, uint64_t want) {
  uint64_t got = 12345;
  tpu_status_t st = tpu_parse_bytes("TEST_VAR", text, &got);
  CHECK(st == TPU_OK);
  if (st || got != want)
    fprintf(stderr, "  parse_bytes('%s') = %llu (%s), want %llu\n", text, (unsigned long long)got,
            tpu_status_message(st), (unsigned long long)want);
  CHECK(got == want);
  tpu_status_free(st);
}

static void check_bytes_bad(const char* text) {
  uint64_t got = 12345;
  tpu_status_t st = tpu_parse_bytes("TEST_VAR", text, &got);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(tpu_status_message(st), "TEST_VAR") != NULL);
  CHECK(strstr(tpu_status_message(st), text) != NULL);
  if (!st) fprintf(stderr, "  parse_bytes('%s') unexpectedly gave %llu\n", text,
                   (unsigned long long)got);
  CHECK(got == 12345); /* untouched on error */
  tpu_status_free(st);
}

static void test_parse_bytes(void) {
  check_bytes("0", 0);
  check_bytes("1048576", 1048576);
  check_bytes("16G", 16 * GiB);
  check_bytes("512M", 512 * MiB);
  check_bytes("512m", 512 * MiB);
  check_bytes("1.5GiB", 3 * GiB / 2);
  check_bytes("1.5gib", 3 * GiB / 2);
  check_bytes("2K", 2048);
  check_bytes("2KB", 2048);
  check_bytes("2KiB", 2048);
  check_bytes("1T", (uint64_t)1 << 40);
  check_bytes("100B", 100);
  check_bytes("  8G  ", 8 * GiB);
  check_bytes("8 G", 8 * GiB);
  check_bytes("0.5M", 512 * 1024);
  check_bytes(".5K", 512);
  check_bytes("16777215T", ((uint64_t)1 << 40) * 16777215);
  check_bytes_bad("");
  check_bytes_bad("   ");
  check_bytes_bad("abc");
  check_bytes_bad("-1");
  check_bytes_bad("-1G");
  check_bytes_bad("12Q");
  check_bytes_bad("1.5.5G");
  check_bytes_bad("G");
  check_bytes_bad("1GiBx");
  check_bytes_bad("1 2G");
  check_bytes_bad("1iB");
  check_bytes_bad("1Gi");
  check_bytes_bad("4P");
  check_bytes_bad("0x100");
  check_bytes_bad("99999999999999999999");
  check_bytes_bad("16777216T");
  uint64_t v;
  CHECK_STATUS(tpu_parse_bytes("X", NULL, &v), TPU_STATUS_INVALID_ARGUMENT, "X");
  CHECK_STATUS(tpu_parse_bytes("X", "1", NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
}

static void test_parse_int(void) {
  int64_t v = 0;
  CHECK_OK(tpu_parse_int("N", "4", 1, 64, &v));
  CHECK(v == 4);
  CHECK_OK(tpu_parse_int("N", " 64 ", 1, 64, &v));
  CHECK(v == 64);
  CHECK_OK(tpu_parse_int("N", "+7", 1, 64, &v));
  CHECK(v == 7);
  CHECK_OK(tpu_parse_int("N", "-5", -10, 10, &v));
  CHECK(v == -5);
  CHECK_OK(tpu_parse_int("N", "9223372036854775807", 0, INT64_MAX, &v));
  CHECK(v == INT64_MAX);
  v = 99;
  CHECK_STATUS(tpu_parse_int("TORCH_TPU_HOST_DEVICES", "0", 1, 64, &v),
               TPU_STATUS_INVALID_ARGUMENT, "TORCH_TPU_HOST_DEVICES");
  CHECK(v == 99);
  CHECK_STATUS(tpu_parse_int("N", "65", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, "[1, 64]");
  CHECK_STATUS(tpu_parse_int("N", "-1", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, "'-1'");
  CHECK_STATUS(tpu_parse_int("N", "x", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, "'x'");
  CHECK_STATUS(tpu_parse_int("N", "", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_parse_int("N", "1.5", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_parse_int("N", "4x", 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_parse_int("N", "99999999999999999999999", 1, 64, &v),
               TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_parse_int("N", NULL, 1, 64, &v), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK(v == 99);
}

static void test_env_choice(void) {
  static const char* const kValues[] = {"generic", "avx2"};
  int32_t i = 99;
  unsetenv("TPU_TEST_CHOICE");
  CHECK_OK(tpu_env_choice("TPU_TEST_CHOICE", kValues, 2, &i));
  CHECK(i == -1);
  setenv("TPU_TEST_CHOICE", "  ", 1);
  CHECK_OK(tpu_env_choice("TPU_TEST_CHOICE", kValues, 2, &i));
  CHECK(i == -1);
  setenv("TPU_TEST_CHOICE", " avx2 ", 1);
  CHECK_OK(tpu_env_choice("TPU_TEST_CHOICE", kValues, 2, &i));
  CHECK(i == 1);
  setenv("TPU_TEST_CHOICE", "avx9000", 1);
  CHECK_STATUS(tpu_env_choice("TPU_TEST_CHOICE", kValues, 2, &i), TPU_STATUS_INVALID_ARGUMENT,
               "invalid value for TPU_TEST_CHOICE: 'avx9000' (expected one of 'generic', 'avx2')");
  setenv("TPU_TEST_CHOICE", "avx", 1); /* a prefix is not a match */
  CHECK_STATUS(tpu_env_choice("TPU_TEST_CHOICE", kValues, 2, &i), TPU_STATUS_INVALID_ARGUMENT, "'avx'");
  unsetenv("TPU_TEST_CHOICE");
  CHECK_STATUS(tpu_env_choice(NULL, kValues, 2, &i), TPU_STATUS_INVALID_ARGUMENT, NULL);
  bool forbidden = true;
  unsetenv("TORCH_TPU_FALLBACK");
  CHECK_OK(tpu_runtime_fallback_forbidden(&forbidden));
  CHECK(!forbidden);
  setenv("TORCH_TPU_FALLBACK", "error", 1);
  CHECK_OK(tpu_runtime_fallback_forbidden(&forbidden));
  CHECK(forbidden);
  setenv("TORCH_TPU_FALLBACK", "maybe", 1);
  CHECK_STATUS(tpu_runtime_fallback_forbidden(&forbidden), TPU_STATUS_INVALID_ARGUMENT,
               "invalid value for TORCH_TPU_FALLBACK: 'maybe'");
  unsetenv("TORCH_TPU_FALLBACK");
}

static void test_host_facts(void) {
  CHECK(tpu_host_physical_memory() > 64 * MiB);
  CHECK(tpu_host_available_memory() > 0);
  CHECK(tpu_host_available_memory() <= tpu_host_physical_memory());
  /* the default budget: 90% of the available memory, split across chips */
  CHECK(tpu_host_default_memory(10240 * MiB, 1) == 9216 * MiB);
  CHECK(tpu_host_default_memory(10240 * MiB, 4) == 2304 * MiB);
  CHECK(tpu_host_default_memory(100 * MiB, 1) == 256 * MiB);
  CHECK(tpu_host_default_memory(100 * MiB, 0) == 256 * MiB);
  CHECK(tpu_host_cpu_count() >= 1);
  uint64_t a = tpu_now_ns();
  usleep(2000);
  uint64_t b = tpu_now_ns();
  CHECK(b > a);
  CHECK(b - a >= 1000000);
}

/* ---- initialisation ---- */
static void clear_env(void) {
  unsetenv("TORCH_TPU_HOST_DEVICES");
  unsetenv("TORCH_TPU_HOST_MEMORY");
  unsetenv("TORCH_TPU_NUM_THREADS");
  unsetenv("TORCH_TPU_FALLBACK");
}

static void test_before_init(void) {
  CHECK(!tpu_runtime_is_initialized());
  CHECK(tpu_runtime_driver() == NULL);
  CHECK(tpu_runtime_device_count() == 0);
  CHECK(tpu_runtime_threadpool() == NULL);
  tpu_hal_device_t* d = (tpu_hal_device_t*)0x1;
  CHECK_STATUS(tpu_runtime_device(0, &d), TPU_STATUS_FAILED_PRECONDITION, "not initialized");
  CHECK(d == NULL);
  CHECK_STATUS(tpu_runtime_set_current_device(0), TPU_STATUS_FAILED_PRECONDITION, NULL);
  CHECK(tpu_runtime_current_device() == 0);
  CHECK_OK(tpu_runtime_synchronize_all());
  tpu_runtime_shutdown(); /* harmless */
}

static void expect_init_error(const char* var, const char* value) {
  clear_env();
  setenv(var, value, 1);
  tpu_status_t st = tpu_runtime_initialize();
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(tpu_status_message(st), var) != NULL);
  char quoted[64];
  snprintf(quoted, sizeof(quoted), "'%s'", value);
  CHECK(strstr(tpu_status_message(st), quoted) != NULL); /* the value, and no prefix before them: */
  CHECK(strstr(tpu_status_message(st), "initialisation failed") == NULL);
  if (tpu_status_code(st) != TPU_STATUS_INVALID_ARGUMENT)
    fprintf(stderr, "  %s=%s gave '%s'\n", var, value, tpu_status_message(st));
  tpu_status_free(st);
  CHECK(!tpu_runtime_is_initialized());
  CHECK(tpu_runtime_driver() == NULL);
}

static void test_init_bad_env(void) {
  expect_init_error("TORCH_TPU_HOST_DEVICES", "abc");
  expect_init_error("TORCH_TPU_HOST_DEVICES", "0");
  expect_init_error("TORCH_TPU_HOST_DEVICES", "65");
  expect_init_error("TORCH_TPU_HOST_DEVICES", "2x");
  expect_init_error("TORCH_TPU_HOST_MEMORY", "12Q");
  expect_init_error("TORCH_TPU_HOST_MEMORY", "0");
  expect_init_error("TORCH_TPU_HOST_MEMORY", "-8G");
  expect_init_error("TORCH_TPU_NUM_THREADS", "0");
  expect_init_error("TORCH_TPU_NUM_THREADS", "many");
  expect_init_error("TORCH_TPU_FALLBACK", "maybe");
  clear_env();
}

static void test_init_defaults(void) {
  clear_env();
  setenv("TORCH_TPU_HOST_DEVICES", "", 1); /* blank counts as unset */
  uint64_t avail0 = tpu_host_available_memory();
  CHECK_OK(tpu_runtime_initialize());
  uint64_t avail1 = tpu_host_available_memory();
  CHECK_OK(tpu_runtime_initialize()); /* idempotent */
  CHECK(tpu_runtime_is_initialized());
  CHECK(tpu_runtime_driver() != NULL);
  CHECK_STREQ(tpu_hal_driver_vt(tpu_runtime_driver())->name(tpu_runtime_driver()), "host");
  CHECK(tpu_runtime_device_count() == 1);
  CHECK(tpu_threadpool_size(tpu_runtime_threadpool()) == tpu_host_cpu_count());
  tpu_hal_device_t* d = NULL;
  CHECK_OK(tpu_runtime_device(0, &d));
  CHECK(d != NULL);
  tpu_hal_device_properties_t p;
  tpu_hal_device_vt(d)->query_properties(d, &p);
  /* The default budget: 90% of what was available at initialisation. */
  uint64_t lo = tpu_host_default_memory(avail0 < avail1 ? avail0 : avail1, 1);
  uint64_t hi = tpu_host_default_memory(avail0 < avail1 ? avail1 : avail0, 1);
  CHECK(p.total_memory + 64 * MiB >= lo && p.total_memory <= hi + 64 * MiB);
  CHECK(p.total_memory <= tpu_host_physical_memory());
  CHECK(p.compute_units == tpu_host_cpu_count());

  tpu_hal_device_t* bad = (tpu_hal_device_t*)0x1;
  tpu_status_t st = tpu_runtime_device(7, &bad);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STREQ(tpu_status_message(st),
              "invalid device tpu:7: only 1 tpu device(s) available (host driver)");
  tpu_status_free(st);
  CHECK(bad == NULL);
  CHECK_STATUS(tpu_runtime_device(-1, &bad), TPU_STATUS_INVALID_ARGUMENT, "tpu:-1");
  CHECK_STATUS(tpu_runtime_device(0, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(tpu_runtime_set_current_device(1), TPU_STATUS_INVALID_ARGUMENT, "tpu:1");
  tpu_runtime_shutdown();
  CHECK(!tpu_runtime_is_initialized());
  CHECK(tpu_runtime_driver() == NULL);
  CHECK(tpu_runtime_device_count() == 0);
  tpu_runtime_shutdown();
  clear_env();
}

/* ---- current device per thread ---- */
typedef struct {
  int32_t initial;
  int32_t after;
  tpu_status_code_t set_code;
} thread_dev_t;

static void* thread_device_main(void* arg) {
  thread_dev_t* t = arg;
  t->initial = tpu_runtime_current_device();
  tpu_status_t st = tpu_runtime_set_current_device(2);
  t->set_code = tpu_status_code(st);
  tpu_status_free(st);
  t->after = tpu_runtime_current_device();
  return NULL;
}

static void test_current_device(void) {
  CHECK(tpu_runtime_current_device() == 0);
  CHECK_OK(tpu_runtime_set_current_device(1));
  CHECK(tpu_runtime_current_device() == 1);
  thread_dev_t t = {-1, -1, TPU_STATUS_INTERNAL};
  pthread_t th;
  pthread_create(&th, NULL, thread_device_main, &t);
  pthread_join(th, NULL);
  CHECK(t.initial == 0); /* a new thread starts on device 0 */
  CHECK(t.set_code == TPU_STATUS_OK);
  CHECK(t.after == 2);
  CHECK(tpu_runtime_current_device() == 1); /* unaffected by the other thread */
  CHECK_STATUS(tpu_runtime_set_current_device(3), TPU_STATUS_INVALID_ARGUMENT,
               "only 3 tpu device(s)");
  CHECK(tpu_runtime_current_device() == 1);
  CHECK_OK(tpu_runtime_set_current_device(0));
}

/* ---- peer copies and synchronize_all ---- */
static tpu_status_t failing_work(void* ctx) {
  return TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "index %d out of range", 9);
}

static void test_peer_copy(void) {
  tpu_hal_device_t *d0, *d1;
  CHECK_OK(tpu_runtime_device(0, &d0));
  CHECK_OK(tpu_runtime_device(1, &d1));
  CHECK(d0 != d1);
  enum { N = 50000 };
  unsigned char* host = malloc(N);
  unsigned char* back = malloc(N);
  for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 13 + 1);
  void *a, *b, *c;
  CHECK_OK(tpu_hal_device_vt(d0)->allocate(d0, N, &a));
  CHECK_OK(tpu_hal_device_vt(d1)->allocate(d1, N, &b));
  CHECK_OK(tpu_hal_device_vt(d1)->allocate(d1, N, &c));
  CHECK_OK(tpu_hal_device_vt(d0)->copy_h2d(d0, a, host, N));
  CHECK_OK(tpu_runtime_copy_peer(1, b, 0, a, N));
  CHECK_OK(tpu_runtime_copy_peer(1, c, 1, b, N)); /* same device */
  CHECK_OK(tpu_hal_device_vt(d1)->copy_d2h(d1, back, c, N));
  CHECK(memcmp(host, back, N) == 0);
  CHECK_OK(tpu_runtime_copy_peer(0, a, 1, b, 0));
  CHECK_STATUS(tpu_runtime_copy_peer(2, a, 0, a, N), TPU_STATUS_INVALID_ARGUMENT, "tpu:2");
  CHECK_STATUS(tpu_runtime_copy_peer(0, a, -1, b, N), TPU_STATUS_INVALID_ARGUMENT, "tpu:-1");
  CHECK_STATUS(tpu_runtime_copy_peer(0, host, 1, b, N), TPU_STATUS_INVALID_ARGUMENT,
               "copy tpu:1 -> tpu:0");

  /* synchronize_all surfaces a pending error from any device. */
  tpu_hal_work_t w = {.name = "aten::take", .run = failing_work};
  CHECK_OK(tpu_hal_device_vt(d1)->submit(d1, &w));
  CHECK_STATUS(tpu_runtime_synchronize_all(), TPU_STATUS_OUT_OF_RANGE, "aten::take: index 9");
  CHECK_OK(tpu_runtime_synchronize_all());

  tpu_hal_device_vt(d0)->deallocate(d0, a);
  tpu_hal_device_vt(d1)->deallocate(d1, b);
  tpu_hal_device_vt(d1)->deallocate(d1, c);
  free(host);
  free(back);
}

/* ---- pinned memory ---- */
static void test_pinned(void) {
  long page = sysconf(_SC_PAGESIZE);
  void* p = NULL;
  CHECK_OK(tpu_runtime_host_alloc_pinned(10000, &p));
  CHECK(p != NULL);
  CHECK(((uintptr_t)p % (uintptr_t)page) == 0);
  memset(p, 1, 10000);
  CHECK(tpu_runtime_host_is_pinned(p));
  CHECK(tpu_runtime_host_is_pinned((char*)p + 9999));
  int local;
  CHECK(!tpu_runtime_host_is_pinned(&local));
  CHECK(!tpu_runtime_host_is_pinned(NULL));
  void* q = NULL;
  CHECK_OK(tpu_runtime_host_alloc_pinned(1, &q));
  CHECK(tpu_runtime_host_is_pinned(q));
  CHECK(tpu_runtime_host_is_pinned(p));
  tpu_runtime_host_free_pinned(p);
  CHECK(!tpu_runtime_host_is_pinned(p));
  CHECK(tpu_runtime_host_is_pinned(q));
  tpu_runtime_host_free_pinned(NULL);
  void* not_pinned = malloc(64);
  tpu_runtime_host_free_pinned(not_pinned); /* ignored, not freed */
  free(not_pinned);
  void* z = (void*)0x1;
  CHECK_OK(tpu_runtime_host_alloc_pinned(0, &z));
  CHECK(z == NULL);
  CHECK_STATUS(tpu_runtime_host_alloc_pinned(16, NULL), TPU_STATUS_INVALID_ARGUMENT, NULL);
  /* Many buffers, freed in a scrambled order. */
  void* many[64];
  for (int i = 0; i < 64; i++) CHECK_OK(tpu_runtime_host_alloc_pinned(100 + i, &many[i]));
  for (int i = 0; i < 64; i++) CHECK(tpu_runtime_host_is_pinned(many[i]));
  for (int i = 0; i < 64; i++) tpu_runtime_host_free_pinned(many[(i * 37) % 64]);
  for (int i = 0; i < 64; i++) CHECK(!tpu_runtime_host_is_pinned(many[i]));
  /* `q` is left for shutdown to release (checked by LeakSanitizer). */
}

/* ---- counters ---- */
typedef struct {
  char names[16][32];
  uint64_t counts[16];
  int n;
  bool reenter;
} collect_t;

static void collect(void* ctx, const char* name, uint64_t count) {
  collect_t* c = ctx;
  if (c->n < 16) {
    snprintf(c->names[c->n], sizeof(c->names[0]), "%s", name);
    c->counts[c->n] = count;
    c->n++;
  }
  if (c->reenter) tpu_stats_record_fallback("aten::zzz"); /* must not deadlock */
}

static void* record_many(void* arg) {
  for (int i = 0; i < 2000; i++) {
    tpu_stats_record_fallback((i % 2) ? "aten::sort" : "aten::unique");
    tpu_stats_record_native();
  }
  return NULL;
}

static void test_counters(void) {
  tpu_stats_fallback_reset();
  collect_t c = {.n = 0};
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 0);
  tpu_stats_record_fallback("aten::nonzero");
  tpu_stats_record_fallback("aten::cumsum");
  tpu_stats_record_fallback("aten::nonzero");
  char name[32];
  snprintf(name, sizeof(name), "aten::median");
  tpu_stats_record_fallback(name);
  strcpy(name, "garbage"); /* names are copied */
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 3);
  CHECK_STREQ(c.names[0], "aten::cumsum");
  CHECK_STREQ(c.names[1], "aten::median");
  CHECK_STREQ(c.names[2], "aten::nonzero");
  CHECK(c.counts[0] == 1 && c.counts[1] == 1 && c.counts[2] == 2);

  c = (collect_t){.n = 0, .reenter = true};
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 3);
  c = (collect_t){.n = 0};
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 4);
  CHECK_STREQ(c.names[3], "aten::zzz");
  CHECK(c.counts[3] == 3);

  tpu_stats_fallback_reset();
  uint64_t native0 = tpu_stats_native_count();
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, record_many, NULL);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  c = (collect_t){.n = 0};
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 2);
  CHECK_STREQ(c.names[0], "aten::sort");
  CHECK_STREQ(c.names[1], "aten::unique");
  CHECK(c.counts[0] == 2000 && c.counts[1] == 2000);
  CHECK(tpu_stats_native_count() - native0 == 4000);
  tpu_stats_fallback_foreach(NULL, NULL);
  tpu_stats_record_fallback("aten::left_for_shutdown");
}

static void test_two_devices(void) {
  clear_env();
  setenv("TORCH_TPU_HOST_DEVICES", "3", 1);
  setenv("TORCH_TPU_HOST_MEMORY", "64M", 1);
  setenv("TORCH_TPU_NUM_THREADS", "2", 1);
  CHECK_OK(tpu_runtime_initialize());
  CHECK(tpu_runtime_device_count() == 3);
  CHECK(tpu_threadpool_size(tpu_runtime_threadpool()) == 2);
  for (int i = 0; i < 3; i++) {
    tpu_hal_device_t* d;
    CHECK_OK(tpu_runtime_device(i, &d));
    tpu_hal_device_properties_t p;
    tpu_hal_device_vt(d)->query_properties(d, &p);
    CHECK(p.index == i);
    CHECK(p.total_memory == 64 * MiB);
    CHECK(p.compute_units == 2);
  }
  CHECK_STATUS(tpu_runtime_device(3, &(tpu_hal_device_t*){NULL}), TPU_STATUS_INVALID_ARGUMENT,
               "invalid device tpu:3: only 3 tpu device(s) available");
  RUN_TEST(test_current_device);
  RUN_TEST(test_peer_copy);
  RUN_TEST(test_pinned);
  RUN_TEST(test_counters);

  /* Leave an allocation and a pending error behind: shutdown releases all. */
  tpu_hal_device_t* d;
  CHECK_OK(tpu_runtime_device(2, &d));
  void* p;
  CHECK_OK(tpu_hal_device_vt(d)->allocate(d, 1000, &p));
  tpu_hal_work_t w = {.name = "aten::take", .run = failing_work};
  CHECK_OK(tpu_hal_device_vt(d)->submit(d, &w));
  tpu_runtime_shutdown();
  CHECK(!tpu_runtime_is_initialized());
  CHECK(tpu_stats_native_count() == 0);
  collect_t c = {.n = 0};
  tpu_stats_fallback_foreach(collect, &c);
  CHECK(c.n == 0);

  /* ... and initialize works again with a new configuration. */
  setenv("TORCH_TPU_HOST_DEVICES", "1", 1);
  setenv("TORCH_TPU_HOST_MEMORY", "300MiB", 1);
  CHECK_OK(tpu_runtime_initialize());
  CHECK(tpu_runtime_device_count() == 1);
  CHECK_OK(tpu_runtime_device(0, &d));
  tpu_hal_device_properties_t props;
  tpu_hal_device_vt(d)->query_properties(d, &props);
  CHECK(props.total_memory == 300 * MiB);
  tpu_runtime_shutdown();
  clear_env();
}

/* ---- concurrent initialize ---- */
static void* init_main(void* arg) {
  *(tpu_status_code_t*)arg = tpu_status_code(tpu_runtime_initialize());
  return NULL;
}

static void test_concurrent_init(void) {
  clear_env();
  setenv("TORCH_TPU_HOST_MEMORY", "256M", 1);
  tpu_status_code_t codes[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, init_main, &codes[i]);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) CHECK(codes[i] == TPU_STATUS_OK);
  CHECK(tpu_runtime_device_count() == 1);
  tpu_runtime_shutdown();
  clear_env();
}

int main(void) {
  RUN_TEST(test_parse_bytes);
  RUN_TEST(test_parse_int);
  RUN_TEST(test_env_choice);
  RUN_TEST(test_host_facts);
  RUN_TEST(test_before_init);
  RUN_TEST(test_init_bad_env);
  RUN_TEST(test_init_defaults);
  RUN_TEST(test_two_devices);
  RUN_TEST(test_concurrent_init);
  return TEST_REPORT();
}
