/* Driver conformance suite: the same cases, through the public HAL only, on
 * every driver that can run here. The host driver always runs; the pjrt
 * driver runs when TORCH_TPU_PJRT_PLUGIN names a plugin (scripts/test.sh
 * points it at XLA's CPU plugin and sets TORCH_TPU_CTS_REQUIRE_PJRT=1, so a
 * missing plugin fails instead of skipping). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tpu/drivers.h"

#define DVT(d) tpu_hal_device_vt(d)

static tpu_hal_driver_t* g_drv;
static const char* g_name;

static tpu_hal_device_t* device(int32_t i) { return tpu_hal_driver_vt(g_drv)->device(g_drv, i); }

static void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7u);
}

static void test_properties(void) {
  int32_t n = tpu_hal_driver_vt(g_drv)->device_count(g_drv);
  CHECK(n >= 1);
  CHECK_STREQ(tpu_hal_driver_vt(g_drv)->name(g_drv), g_name);
  CHECK(tpu_hal_driver_vt(g_drv)->device(g_drv, n) == NULL);
  for (int32_t i = 0; i < n; i++) {
    tpu_hal_device_properties_t p;
    DVT(device(i))->query_properties(device(i), &p);
    CHECK(p.index == i);
    CHECK(p.name[0] != '\0');
    CHECK(p.platform[0] != '\0');
    CHECK_STREQ(p.driver, g_name);
    CHECK(p.total_memory > 0);
    CHECK(p.host_addressable == (strcmp(g_name, "host") == 0));
  }
}

static void test_alloc(void) {
  tpu_hal_device_t* d = device(0);
  void* z = (void*)1;
  CHECK_OK(DVT(d)->allocate(d, 0, &z));
  CHECK(z == NULL);
  tpu_hal_memory_stats_t before, after;
  DVT(d)->memory_stats(d, &before);
  void* p = NULL;
  CHECK_OK(DVT(d)->allocate(d, 1000, &p));
  CHECK(p != NULL);
  CHECK(DVT(d)->owns_pointer(d, p));
  CHECK(DVT(d)->owns_pointer(d, (char*)p + 999));
  DVT(d)->memory_stats(d, &after);
  CHECK(after.allocated_bytes >= before.allocated_bytes + 1000);
  CHECK(after.num_allocs == before.num_allocs + 1);
  DVT(d)->deallocate(d, p);
  DVT(d)->deallocate(d, NULL);
  DVT(d)->memory_stats(d, &after);
  CHECK(after.allocated_bytes == before.allocated_bytes);
}

static void test_oom(void) {
  tpu_hal_device_t* d = device(0);
  uint64_t free_b = 0, total = 0;
  DVT(d)->memory_info(d, &free_b, &total);
  CHECK(total > 0 && free_b <= total);
  void* p = NULL;
  CHECK_STATUS(DVT(d)->allocate(d, (size_t)total + 4096, &p), TPU_STATUS_OUT_OF_MEMORY, "tpu:0");
  CHECK(p == NULL);
  CHECK_OK(DVT(d)->allocate(d, 64, &p)); /* still usable */
  DVT(d)->deallocate(d, p);
}

static void test_copies(void) {
  tpu_hal_device_t* d = device(0);
  enum { N = 4096 };
  uint8_t src[N], back[N], expect[N];
  void *a = NULL, *b = NULL;
  CHECK_OK(DVT(d)->allocate(d, N, &a));
  CHECK_OK(DVT(d)->allocate(d, N, &b));
  fill(src, N, 3);
  CHECK_OK(DVT(d)->copy_h2d(d, a, src, N));
  memset(src, 0, N); /* h2d returned: the source may be reused */
  fill(expect, N, 3);
  memset(back, 0, N);
  CHECK_OK(DVT(d)->copy_d2h(d, back, a, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* A part at an offset, then a part read at another. */
  uint8_t part[100];
  fill(part, sizeof(part), 200);
  CHECK_OK(DVT(d)->copy_h2d(d, (char*)a + 1001, part, sizeof(part)));
  memcpy(expect + 1001, part, sizeof(part));
  CHECK_OK(DVT(d)->copy_d2h(d, back, (char*)a + 990, 200));
  CHECK(memcmp(back, expect + 990, 200) == 0);

  /* Device copies: whole, then a part; later writes to the source do not
   * reach the copy (in-order semantics). */
  CHECK_OK(DVT(d)->copy_d2d(d, b, a, N));
  uint8_t other[N];
  fill(other, N, 77);
  CHECK_OK(DVT(d)->copy_h2d(d, a, other, N));
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);
  CHECK_OK(DVT(d)->copy_d2d(d, (char*)b + 17, (char*)a + 300, 500));
  memcpy(expect + 17, other + 300, 500);
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* Overlapping device copy inside one allocation (memmove semantics). */
  CHECK_OK(DVT(d)->copy_d2d(d, (char*)b + 10, b, 100));
  memmove(expect + 10, expect, 100);
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* Zero bytes, out-of-range ranges. */
  CHECK_OK(DVT(d)->copy_h2d(d, a, src, 0));
  CHECK_STATUS(DVT(d)->copy_h2d(d, (char*)a + N - 10, src, 20), TPU_STATUS_INVALID_ARGUMENT,
               "not inside a live allocation");
  CHECK_STATUS(DVT(d)->copy_d2h(d, back, (char*)a + N, 1), TPU_STATUS_INVALID_ARGUMENT,
               "not inside");
  CHECK_STATUS(DVT(d)->copy_d2d(d, b, src, 10), TPU_STATUS_INVALID_ARGUMENT, "not inside");
  CHECK_OK(DVT(d)->synchronize(d));
  DVT(d)->deallocate(d, a);
  DVT(d)->deallocate(d, b);
}

static void test_peer_copy(void) {
  if (tpu_hal_driver_vt(g_drv)->device_count(g_drv) < 2) {
    fprintf(stderr, "  (one device: peer copies not exercised)\n");
    return;
  }
  tpu_hal_device_t* d0 = device(0);
  tpu_hal_device_t* d1 = device(1);
  enum { N = 1000 };
  uint8_t src[N], back[N];
  void *a = NULL, *b = NULL;
  CHECK_OK(DVT(d0)->allocate(d0, N, &a));
  CHECK_OK(DVT(d1)->allocate(d1, N, &b));
  CHECK(!DVT(d1)->owns_pointer(d1, a));
  fill(src, N, 9);
  CHECK_OK(DVT(d0)->copy_h2d(d0, a, src, N));
  CHECK_OK(DVT(d0)->synchronize(d0));
  CHECK_OK(DVT(d1)->copy_d2d(d1, b, a, N));
  CHECK_OK(DVT(d1)->copy_d2h(d1, back, b, N));
  CHECK(memcmp(back, src, N) == 0);
  CHECK_OK(DVT(d1)->copy_d2d(d1, (char*)b + 1, (char*)a + 500, 10));
  CHECK_OK(DVT(d1)->copy_d2h(d1, back, b, 11));
  CHECK(back[0] == src[0] && memcmp(back + 1, src + 500, 10) == 0);
  DVT(d0)->deallocate(d0, a);
  DVT(d1)->deallocate(d1, b);
}

typedef struct {
  int* log;
  int* n;
  int id;
  bool fail;
} work_t;

static tpu_status_t work_run(void* ctx) {
  work_t* w = ctx;
  w->log[(*w->n)++] = w->id;
  return w->fail ? TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "index 9 is out of bounds") : TPU_OK;
}

static void test_works_and_errors(void) {
  tpu_hal_device_t* d = device(0);
  int log[8], n = 0;
  work_t w[3] = {{log, &n, 1, false}, {log, &n, 2, true}, {log, &n, 3, false}};
  for (int i = 0; i < 3; i++) {
    tpu_hal_work_t hw = {.name = i == 1 ? "aten::index_select" : "w", .run = work_run, .ctx = &w[i]};
    CHECK_OK(DVT(d)->submit(d, &hw));
  }
  CHECK_STATUS(DVT(d)->synchronize(d), TPU_STATUS_OUT_OF_RANGE, "aten::index_select");
  CHECK(n == 3 && log[0] == 1 && log[1] == 2 && log[2] == 3);
  CHECK_OK(DVT(d)->synchronize(d)); /* the error was taken */
  CHECK(DVT(d)->query_idle(d));
}

static void test_events(void) {
  tpu_hal_device_t* d = device(0);
  tpu_hal_event_t *e0 = NULL, *e1 = NULL;
  CHECK_OK(DVT(d)->create_event(d, true, &e0));
  CHECK_OK(DVT(d)->create_event(d, true, &e1));
  CHECK(tpu_hal_event_vt(e0)->query(e0)); /* never recorded: complete */
  double ms = -1;
  CHECK_STATUS(tpu_hal_event_vt(e0)->elapsed_ms(e0, e1, &ms), TPU_STATUS_FAILED_PRECONDITION,
               NULL);
  void* a = NULL;
  enum { N = 1 << 16 };
  uint8_t* buf = malloc(N);
  fill(buf, N, 1);
  CHECK_OK(DVT(d)->allocate(d, N, &a));
  CHECK_OK(DVT(d)->record_event(d, e0));
  CHECK_OK(DVT(d)->copy_h2d(d, a, buf, N));
  CHECK_OK(DVT(d)->record_event(d, e1));
  CHECK_OK(tpu_hal_event_vt(e1)->synchronize(e1));
  CHECK(tpu_hal_event_vt(e1)->query(e1));
  CHECK(tpu_hal_event_vt(e0)->query(e0));
  CHECK_OK(tpu_hal_event_vt(e0)->elapsed_ms(e0, e1, &ms));
  CHECK(ms >= 0);
  CHECK_OK(DVT(d)->wait_event(d, e1));
  CHECK_OK(DVT(d)->synchronize(d));
  DVT(d)->deallocate(d, a);
  free(buf);
  tpu_object_release(&e0->base);
  tpu_object_release(&e1->base);
}

static void run_suite(const char* name) {
  g_name = name;
  tpu_status_t st = tpu_drivers_create(name, NULL, &g_drv);
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", tpu_status_message(st));
  CHECK_OK(st);
  if (!g_drv) {
    fprintf(stderr, "driver %s: %s\n", name, msg);
    return;
  }
  fprintf(stderr, "== driver %s\n", name);
  RUN_TEST(test_properties);
  RUN_TEST(test_alloc);
  RUN_TEST(test_oom);
  RUN_TEST(test_copies);
  RUN_TEST(test_peer_copy);
  RUN_TEST(test_works_and_errors);
  RUN_TEST(test_events);
  tpu_object_release(&g_drv->base);
  g_drv = NULL;
}

/* Loading failures are clear errors, never a crash. */
static void test_pjrt_load_errors(void) {
  tpu_hal_driver_t* drv = NULL;
  tpu_pjrt_driver_options_t o = {.struct_size = sizeof(o), .plugin_path = "/nonexistent/plugin.so"};
  CHECK_STATUS(tpu_pjrt_driver_create(&o, &drv), TPU_STATUS_UNAVAILABLE, "cannot load the PJRT plugin");
  o.plugin_path = "libm.so.6";
  CHECK_STATUS(tpu_pjrt_driver_create(&o, &drv), TPU_STATUS_UNAVAILABLE, "no GetPjrtApi");
  CHECK(drv == NULL);
  setenv("TORCH_TPU_DRIVER", "tpu9", 1);
  const char* name = NULL;
  CHECK_STATUS(tpu_drivers_selected(&name), TPU_STATUS_INVALID_ARGUMENT, "TORCH_TPU_DRIVER");
  unsetenv("TORCH_TPU_DRIVER");
  CHECK_OK(tpu_drivers_selected(&name));
  CHECK_STREQ(name, tpu_drivers_tpu_present() ? "pjrt" : "host");
}

int main(void) {
  setenv("TORCH_TPU_HOST_DEVICES", "2", 1);
  setenv("TORCH_TPU_HOST_MEMORY", "64M", 1);
  run_suite("host");
  const char* plugin = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (plugin && *plugin) {
    if (!getenv("TORCH_TPU_PJRT_OPTIONS")) setenv("TORCH_TPU_PJRT_OPTIONS", "cpu_device_count=2", 1);
    setenv("TORCH_TPU_PJRT_MEMORY", "64M", 1);
    run_suite("pjrt");
  } else {
    const char* req = getenv("TORCH_TPU_CTS_REQUIRE_PJRT");
    CHECK(!(req && strcmp(req, "1") == 0)); /* required but no plugin given */
    fprintf(stderr, "== driver pjrt: skipped (TORCH_TPU_PJRT_PLUGIN is not set)\n");
  }
  RUN_TEST(test_pjrt_load_errors);
  return TEST_REPORT();
}
