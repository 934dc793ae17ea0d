/* Host driver: N virtual chips, each an allocator + an in-order queue. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_internal.h"
#include "tpu/trace.h"

#define TPU_HOST_MAX_DEVICES 1024

typedef struct tpu_host_driver_t tpu_host_driver_t;

typedef struct tpu_host_device_t {
  tpu_hal_device_t base;
  tpu_host_driver_t* driver; /* borrowed: devices live as long as the driver */
  int32_t index;
  int32_t compute_units;
  tpu_host_queue_t queue;
  tpu_host_allocator_t allocator;
} tpu_host_device_t;

struct tpu_host_driver_t {
  tpu_hal_driver_t base;
  int32_t device_count;
  tpu_host_device_t** devices;
};

static const tpu_hal_device_vtable_t tpu_host_device_vtable;
static const tpu_hal_driver_vtable_t tpu_host_driver_vtable;

static tpu_host_device_t* dev(tpu_hal_device_t* d) { return (tpu_host_device_t*)d; }

/* ---- device: properties and memory ---- */
static void device_destroy(tpu_object_t* object) {
  tpu_host_device_t* d = (tpu_host_device_t*)object;
  tpu_host_queue_deinit(&d->queue);
  tpu_host_allocator_deinit(&d->allocator);
  free(d);
}

static void device_query_properties(tpu_hal_device_t* device, tpu_hal_device_properties_t* out) {
  tpu_host_device_t* d = dev(device);
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "TPU host virtual chip");
  snprintf(out->driver, sizeof(out->driver), "host");
  snprintf(out->platform, sizeof(out->platform), "host");
  out->host_addressable = true;
  out->index = d->index;
  out->compute_units = d->compute_units;
  out->total_memory = d->allocator.stats.budget_bytes;
}

static tpu_status_t device_allocate(tpu_hal_device_t* device, size_t size, void** out_ptr) {
  return tpu_host_allocator_allocate(&dev(device)->allocator, size, out_ptr);
}
static void device_deallocate(tpu_hal_device_t* device, void* ptr) {
  tpu_host_allocator_deallocate(&dev(device)->allocator, ptr);
}
static void device_empty_cache(tpu_hal_device_t* device) {
  tpu_host_allocator_empty_cache(&dev(device)->allocator);
}
static void device_memory_stats(tpu_hal_device_t* device, tpu_hal_memory_stats_t* out) {
  tpu_host_allocator_stats(&dev(device)->allocator, out);
}
static void device_reset_peak(tpu_hal_device_t* device) {
  tpu_host_allocator_reset_peak(&dev(device)->allocator);
}
static void device_reset_accumulated(tpu_hal_device_t* device) {
  tpu_host_allocator_reset_accumulated(&dev(device)->allocator);
}
static void device_memory_info(tpu_hal_device_t* device, uint64_t* out_free, uint64_t* out_total) {
  tpu_host_allocator_info(&dev(device)->allocator, out_free, out_total);
}
static bool device_owns_pointer(tpu_hal_device_t* device, const void* ptr) {
  return tpu_host_allocator_contains(&dev(device)->allocator, ptr, 0);
}

/* ---- device: queue ---- */
static tpu_status_t device_submit(tpu_hal_device_t* device, const tpu_hal_work_t* work) {
  return tpu_host_queue_submit(&dev(device)->queue, work, NULL);
}

static tpu_status_t device_synchronize(tpu_hal_device_t* device) {
  tpu_host_device_t* d = dev(device);
  if (tpu_host_queue_on_worker(&d->queue))
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "tpu:%d: synchronize called from work running on the same queue", d->index);
  tpu_host_queue_wait_idle(&d->queue);
  return tpu_host_queue_take_error(&d->queue);
}

static bool device_query_idle(tpu_hal_device_t* device) {
  return tpu_host_queue_is_idle(&dev(device)->queue);
}

static void device_queue_stats(tpu_hal_device_t* device, tpu_hal_queue_stats_t* out) {
  tpu_host_queue_stats(&dev(device)->queue, out);
}

static size_t device_memory_blocks(tpu_hal_device_t* device, tpu_hal_memory_block_t* out, size_t cap) {
  return tpu_host_allocator_blocks(&dev(device)->allocator, out, cap);
}

/* ---- device: copies ---- */
typedef struct {
  void* dst;
  const void* src;
  size_t size;
  void* owned; /* staging buffer freed by cleanup */
} tpu_host_copy_t;

static tpu_status_t copy_run(void* ctx) {
  tpu_host_copy_t* c = ctx;
  memmove(c->dst, c->src, c->size);
  return TPU_OK;
}

static void copy_cleanup(void* ctx) {
  tpu_host_copy_t* c = ctx;
  free(c->owned);
  free(c);
}

static tpu_status_t check_range(tpu_host_device_t* d, const char* op, const char* what,
                                const void* ptr, size_t size) {
  if (tpu_host_allocator_contains(&d->allocator, ptr, size)) return TPU_OK;
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                   "tpu:%d: %s: %s [%p, +%zu bytes) is not inside a live allocation of this "
                   "device",
                   d->index, op, what, ptr, size);
}

static tpu_status_t enqueue_copy(tpu_host_device_t* d, const char* name, void* dst,
                                 const void* src, size_t size, void* owned, uint64_t* ticket) {
  tpu_host_copy_t* c = malloc(sizeof(*c));
  if (!c) {
    free(owned);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: %s: cannot allocate a queue entry",
                     d->index, name);
  }
  *c = (tpu_host_copy_t){.dst = dst, .src = src, .size = size, .owned = owned};
  tpu_hal_work_t work = {.name = name, .run = copy_run, .cleanup = copy_cleanup, .ctx = c,
                         .bytes = (int64_t)size};
  return tpu_host_queue_submit(&d->queue, &work, ticket);
}

static tpu_status_t device_copy_h2d(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_host_device_t* d = dev(device);
  if (size == 0) return TPU_OK;
  if (!src) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: copy_h2d: src is NULL",
                             d->index);
  TPU_RETURN_IF_ERROR(check_range(d, "copy_h2d", "destination", dst, size));
  void* staging = size <= TPU_HOST_STAGING_MAX ? malloc(size) : NULL;
  if (staging) {
    memcpy(staging, src, size);
    return enqueue_copy(d, "copy_h2d", dst, staging, size, staging, NULL);
  }
  /* On the worker itself every earlier work is done: copy in place. */
  if (tpu_host_queue_on_worker(&d->queue)) {
    memmove(dst, src, size);
    return TPU_OK;
  }
  /* Large (or staging failed): queue a copy reading `src` and wait for it. */
  uint64_t ticket = 0;
  TPU_RETURN_IF_ERROR(enqueue_copy(d, "copy_h2d", dst, src, size, NULL, &ticket));
  tpu_host_queue_wait_ticket(&d->queue, ticket);
  return TPU_OK;
}

static tpu_status_t device_copy_d2h(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_host_device_t* d = dev(device);
  if (size > 0) {
    if (!dst) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: copy_d2h: dst is NULL",
                               d->index);
    TPU_RETURN_IF_ERROR(check_range(d, "copy_d2h", "source", src, size));
  }
  tpu_host_queue_wait_idle(&d->queue);
  if (size > 0) {
    /* Runs on the caller once the queue is drained: traced as device work. */
    bool traced = tpu_trace_enabled();
    int64_t t0 = traced ? (int64_t)tpu_now_ns() : 0;
    memcpy(dst, src, size);
    if (traced) {
      tpu_trace_event_t e = {.name = "copy_d2h", .kind = TPU_TRACE_WORK, .device = d->index,
                             .cpu_tid = tpu_trace_thread_id(), .queued_ns = t0, .start_ns = t0,
                             .end_ns = (int64_t)tpu_now_ns(), .bytes = (int64_t)size};
      tpu_trace_record(&e);
    }
  }
  return tpu_host_queue_take_error(&d->queue);
}

static tpu_status_t device_copy_d2d(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_host_device_t* d = dev(device);
  if (size == 0) return TPU_OK;
  TPU_RETURN_IF_ERROR(check_range(d, "copy_d2d", "destination", dst, size));
  /* The source may live on any chip of this driver (peer copies). */
  bool found = false;
  for (int32_t i = 0; i < d->driver->device_count && !found; i++)
    found = tpu_host_allocator_contains(&d->driver->devices[i]->allocator, src, size);
  if (!found)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "tpu:%d: copy_d2d: source [%p, +%zu bytes) is not inside a live allocation "
                     "of any tpu device",
                     d->index, src, size);
  return enqueue_copy(d, "copy_d2d", dst, src, size, NULL, NULL);
}

/* ---- device: events ---- */
static tpu_status_t device_create_event(tpu_hal_device_t* device, bool enable_timing,
                                        tpu_hal_event_t** out_event) {
  return tpu_host_event_create(enable_timing, out_event);
}
static tpu_status_t device_record_event(tpu_hal_device_t* device, tpu_hal_event_t* event) {
  return tpu_host_event_record(&dev(device)->queue, event);
}
static tpu_status_t device_wait_event(tpu_hal_device_t* device, tpu_hal_event_t* event) {
  return tpu_host_event_wait(&dev(device)->queue, event);
}

static const tpu_hal_device_vtable_t tpu_host_device_vtable = {
    .destroy = device_destroy,
    .query_properties = device_query_properties,
    .allocate = device_allocate,
    .deallocate = device_deallocate,
    .empty_cache = device_empty_cache,
    .memory_stats = device_memory_stats,
    .reset_peak_stats = device_reset_peak,
    .reset_accumulated_stats = device_reset_accumulated,
    .memory_info = device_memory_info,
    .memory_blocks = device_memory_blocks,
    .owns_pointer = device_owns_pointer,
    .submit = device_submit,
    .synchronize = device_synchronize,
    .copy_h2d = device_copy_h2d,
    .copy_d2h = device_copy_d2h,
    .copy_d2d = device_copy_d2d,
    .create_event = device_create_event,
    .record_event = device_record_event,
    .wait_event = device_wait_event,
    .query_idle = device_query_idle,
    .queue_stats = device_queue_stats,
};

/* ---- driver ---- */
static void driver_destroy(tpu_object_t* object) {
  tpu_host_driver_t* drv = (tpu_host_driver_t*)object;
  /* Drain every queue before stopping any: a queue may wait on another's event. */
  for (int32_t i = 0; i < drv->device_count; i++) {
    if (drv->devices[i]) tpu_host_queue_wait_idle(&drv->devices[i]->queue);
  }
  for (int32_t i = 0; i < drv->device_count; i++) {
    if (drv->devices[i]) tpu_object_release(&drv->devices[i]->base.base);
  }
  free(drv->devices);
  free(drv);
}

static const char* driver_name(tpu_hal_driver_t* driver) { return "host"; }

static int32_t driver_device_count(tpu_hal_driver_t* driver) {
  return ((tpu_host_driver_t*)driver)->device_count;
}

static tpu_hal_device_t* driver_device(tpu_hal_driver_t* driver, int32_t index) {
  tpu_host_driver_t* drv = (tpu_host_driver_t*)driver;
  if (index < 0 || index >= drv->device_count) return NULL;
  return &drv->devices[index]->base;
}

static const tpu_hal_driver_vtable_t tpu_host_driver_vtable = {
    .destroy = driver_destroy,
    .name = driver_name,
    .device_count = driver_device_count,
    .device = driver_device,
};

tpu_status_t tpu_host_driver_create(const tpu_host_driver_options_t* options,
                                    tpu_hal_driver_t** out_driver) {
  if (!out_driver) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_driver is NULL");
  *out_driver = NULL;
  if (!options) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "host driver options are NULL");
  size_t need = offsetof(tpu_host_driver_options_t, compute_units) + sizeof(options->compute_units);
  if (options->struct_size < need)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "host driver options: struct_size %zu is smaller than %zu", options->struct_size,
                     need);
  if (options->device_count < 1 || options->device_count > TPU_HOST_MAX_DEVICES)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "host driver options: device_count %d is out of range [1, %d]",
                     options->device_count, TPU_HOST_MAX_DEVICES);
  if (options->memory_per_device == 0)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "host driver options: memory_per_device must be > 0");
  int32_t units = options->compute_units > 0 ? options->compute_units : tpu_host_cpu_count();
  /* Fields added later are read only when the caller's struct has them. */
  bool has_lists = options->struct_size >= offsetof(tpu_host_driver_options_t, group_list_works) +
                                               sizeof(options->group_list_works);
  tpu_threadpool_t* pool = has_lists ? options->pool : NULL;
  bool group_lists = has_lists && options->group_list_works;

  tpu_host_driver_t* drv = calloc(1, sizeof(*drv));
  tpu_host_device_t** devices = calloc((size_t)options->device_count, sizeof(*devices));
  if (!drv || !devices) {
    free(drv);
    free(devices);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate the host driver");
  }
  tpu_object_init(&drv->base.base, &tpu_host_driver_vtable);
  drv->devices = devices;
  for (int32_t i = 0; i < options->device_count; i++) {
    tpu_host_device_t* d = calloc(1, sizeof(*d));
    if (!d) {
      tpu_object_release(&drv->base.base);
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate host device %d", i);
    }
    tpu_status_t st = tpu_host_queue_init(&d->queue, i, pool, group_lists);
    if (st != TPU_OK) {
      free(d);
      tpu_object_release(&drv->base.base);
      return st;
    }
    tpu_object_init(&d->base.base, &tpu_host_device_vtable);
    d->driver = drv;
    d->index = i;
    d->compute_units = units;
    tpu_host_allocator_init(&d->allocator, i, options->memory_per_device, &d->queue);
    drv->devices[i] = d;
    drv->device_count = i + 1;
  }
  *out_driver = &drv->base;
  return TPU_OK;
}
