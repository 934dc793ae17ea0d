/* Device-queue trace (tpu/trace.h) on the host driver: events for works and
 * copies with device-side times, submitter thread, bytes; off by default;
 * capacity and dropped events; one recording at a time; block listing of the
 * caching allocator (memory_blocks). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tpu/hal.h"
#include "tpu/trace.h"

#define MiB ((uint64_t)1 << 20)

static tpu_hal_driver_t* make_driver(void) {
  tpu_host_driver_options_t o = {.struct_size = sizeof(o), .device_count = 1, .memory_per_device = 64 * MiB,
                                 .compute_units = 1};
  tpu_hal_driver_t* drv = NULL;
  CHECK_OK(tpu_host_driver_create(&o, &drv));
  return drv;
}

static tpu_status_t sleep_run(void* ctx) {
  struct timespec ts = {0, (long)(intptr_t)ctx * 1000000L};
  nanosleep(&ts, NULL);
  return TPU_OK;
}

static void submit_sleep(tpu_hal_device_t* d, const char* name, int ms, int64_t bytes) {
  tpu_hal_work_t w = {.name = name, .run = sleep_run, .ctx = (void*)(intptr_t)ms, .bytes = bytes};
  CHECK_OK(tpu_hal_device_vt(d)->submit(d, &w));
}

static void test_trace_works_and_copies(void) {
  tpu_hal_driver_t* drv = make_driver();
  tpu_hal_device_t* d = tpu_hal_driver_vt(drv)->device(drv, 0);
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(d);
  CHECK(!tpu_trace_enabled());
  submit_sleep(d, "before", 1, 7); /* not recorded: queued while off */
  CHECK_OK(vt->synchronize(d));
  CHECK_OK(tpu_trace_start(0));
  CHECK(tpu_trace_enabled());
  CHECK_STATUS(tpu_trace_start(0), TPU_STATUS_INVALID_ARGUMENT, "already recording");
  int64_t t_submit = (int64_t)tpu_now_ns();
  submit_sleep(d, "aten::first", 5, 123);
  submit_sleep(d, "aten::second", 2, 0);
  void* p = NULL;
  CHECK_OK(vt->allocate(d, 4096, &p));
  char host[4096] = {1};
  CHECK_OK(vt->copy_h2d(d, p, host, sizeof(host)));
  CHECK_OK(vt->copy_d2h(d, host, p, sizeof(host)));
  tpu_trace_stop();
  CHECK(!tpu_trace_enabled());
  submit_sleep(d, "after", 1, 0); /* not recorded */
  CHECK_OK(vt->synchronize(d));
  tpu_trace_event_t* ev = NULL;
  uint64_t dropped = 99;
  size_t n = tpu_trace_take(&ev, &dropped);
  CHECK(n == 4);
  CHECK(dropped == 0);
  if (n == 4) {
    CHECK_STREQ(ev[0].name, "aten::first");
    CHECK_STREQ(ev[1].name, "aten::second");
    CHECK_STREQ(ev[2].name, "copy_h2d");
    CHECK_STREQ(ev[3].name, "copy_d2h");
    CHECK(ev[0].bytes == 123 && ev[1].bytes == 0 && ev[2].bytes == 4096 && ev[3].bytes == 4096);
    uint64_t tid = tpu_trace_thread_id();
    for (size_t i = 0; i < n; i++) {
      CHECK(ev[i].seq == i + 1);
      CHECK(ev[i].kind == TPU_TRACE_WORK && ev[i].device == 0);
      CHECK(ev[i].cpu_tid == tid);
      CHECK(ev[i].queued_ns >= t_submit && ev[i].start_ns >= ev[i].queued_ns && ev[i].end_ns >= ev[i].start_ns);
      if (i) CHECK(ev[i].start_ns >= ev[i - 1].end_ns); /* in order on one queue */
    }
    /* device-side times: the 5 ms work took 5 ms on the worker while its
     * submit returned at once (the second was queued before it finished) */
    CHECK(ev[0].end_ns - ev[0].start_ns >= 5000000);
    CHECK(ev[1].queued_ns < ev[0].end_ns);
  }
  free(ev);
  CHECK(tpu_trace_take(&ev, &dropped) == 0 && ev == NULL);
  vt->deallocate(d, p);
  tpu_object_release(&drv->base);
}

static void test_trace_capacity(void) {
  tpu_hal_driver_t* drv = make_driver();
  tpu_hal_device_t* d = tpu_hal_driver_vt(drv)->device(drv, 0);
  CHECK_OK(tpu_trace_start(2));
  for (int i = 0; i < 5; i++) submit_sleep(d, "w", 0, 0);
  CHECK_OK(tpu_hal_device_vt(d)->synchronize(d));
  tpu_trace_stop();
  tpu_trace_event_t* ev = NULL;
  uint64_t dropped = 0;
  CHECK(tpu_trace_take(&ev, &dropped) == 2);
  CHECK(dropped == 3);
  free(ev);
  tpu_object_release(&drv->base);
}

static void test_memory_blocks(void) {
  tpu_hal_driver_t* drv = make_driver();
  tpu_hal_device_t* d = tpu_hal_driver_vt(drv)->device(drv, 0);
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(d);
  CHECK(vt->memory_blocks != NULL);
  void *a = NULL, *b = NULL;
  CHECK_OK(vt->allocate(d, 1000, &a));
  CHECK_OK(vt->allocate(d, 3 * MiB, &b));
  vt->deallocate(d, b); /* cached */
  CHECK(vt->memory_blocks(d, NULL, 0) == 2);
  tpu_hal_memory_block_t blk[4];
  size_t n = vt->memory_blocks(d, blk, 1); /* fewer than there are: count still 2 */
  CHECK(n == 2);
  n = vt->memory_blocks(d, blk, 4);
  CHECK(n == 2);
  int seen = 0;
  for (size_t i = 0; i < n && n == 2; i++) {
    if (i) CHECK(blk[i].address > blk[i - 1].address);
    if (blk[i].address == (uint64_t)(uintptr_t)a) {
      CHECK(blk[i].allocated && blk[i].requested == 1000 && blk[i].size >= 1000);
      seen++;
    } else if (blk[i].address == (uint64_t)(uintptr_t)b) {
      CHECK(!blk[i].allocated && blk[i].requested == 0 && blk[i].size >= 3 * MiB);
      seen++;
    }
  }
  CHECK(seen == 2);
  vt->empty_cache(d);
  CHECK(vt->memory_blocks(d, NULL, 0) == 1);
  vt->deallocate(d, a);
  tpu_object_release(&drv->base);
}

int main(void) {
  RUN_TEST(test_trace_works_and_copies);
  RUN_TEST(test_trace_capacity);
  RUN_TEST(test_memory_blocks);
  return TEST_REPORT();
}
