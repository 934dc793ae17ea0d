/* Host driver: N virtual chips, each an allocator + an in-order queue. */
#define _GNU_SOURCE
#include <stdatomic.h>
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
  /* The capture now recording (tpu/hal.h capture_begin), or NULL. Read
   * without the lock on every submit; changed and appended to under cap_mu. */
  struct tpu_hal_capture_t* _Atomic recording;
  pthread_mutex_t cap_mu;
} tpu_host_device_t;

/* A captured sequence of works and the memory its replays use. */
struct tpu_hal_capture_t {
  tpu_host_work_node_t** nodes;
  size_t num_nodes, cap_nodes;
  tpu_host_pool_t pool;
  tpu_status_t error; /* first reason the capture is spoiled (TPU_OK: none) */
  int32_t device_index;
};

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
  pthread_mutex_destroy(&d->cap_mu);
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
/* ---- capture ------------------------------------------------------------- */

static tpu_status_t copy_status(tpu_status_t st) {
  return TPU_ERROR(tpu_status_code(st), "%s", tpu_status_message(st));
}

/* Records `work` into the capture now recording; false if none is (then the
 * caller queues it). When it returns true the work is the capture's (or was
 * cleaned up on error, in *out). */
static bool capture_work(tpu_host_device_t* d, const tpu_hal_work_t* work, tpu_status_t* out) {
  if (atomic_load_explicit(&d->recording, memory_order_acquire) == NULL) return false;
  pthread_mutex_lock(&d->cap_mu);
  tpu_hal_capture_t* c = atomic_load_explicit(&d->recording, memory_order_relaxed);
  if (!c) {
    pthread_mutex_unlock(&d->cap_mu);
    return false;
  }
  *out = TPU_OK;
  if (work->single_use) {
    if (work->cleanup) work->cleanup(work->ctx);
    *out = TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "tpu:%d: '%s' draws random numbers: a replay would repeat the captured draws, so it cannot be "
                     "captured in a graph (torch.tpu.graph)",
                     d->index, work->name ? work->name : "");
    if (c->error == TPU_OK) c->error = copy_status(*out);
    pthread_mutex_unlock(&d->cap_mu);
    return true;
  }
  tpu_host_work_node_t* node = work->run ? tpu_host_work_node_new(work) : NULL;
  if (node && c->num_nodes == c->cap_nodes) {
    size_t ncap = c->cap_nodes ? 2 * c->cap_nodes : 256;
    tpu_host_work_node_t** grown = realloc(c->nodes, ncap * sizeof(*grown));
    if (grown) {
      c->nodes = grown;
      c->cap_nodes = ncap;
    }
  }
  if (node && c->num_nodes < c->cap_nodes) {
    c->nodes[c->num_nodes++] = node;
  } else {
    free(node);
    if (work->cleanup) work->cleanup(work->ctx);
    *out = TPU_ERROR(work->run ? TPU_STATUS_OUT_OF_MEMORY : TPU_STATUS_INVALID_ARGUMENT,
                     "tpu:%d: cannot record '%s' in the graph being captured", d->index,
                     work->name ? work->name : "");
    if (c->error == TPU_OK) c->error = copy_status(*out);
  }
  pthread_mutex_unlock(&d->cap_mu);
  return true;
}

/* An operation that must wait for the queue, refused while capturing (the
 * recorded works have not run); it spoils the capture. */
static tpu_status_t refuse_while_capturing(tpu_host_device_t* d, const char* what) {
  if (atomic_load_explicit(&d->recording, memory_order_acquire) == NULL) return TPU_OK;
  pthread_mutex_lock(&d->cap_mu);
  tpu_hal_capture_t* c = atomic_load_explicit(&d->recording, memory_order_relaxed);
  tpu_status_t st = TPU_OK;
  if (c) {
    st = TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                   "tpu:%d: %s is not permitted while a graph is being captured on this device (torch.tpu.graph): "
                   "captured work has not run, so nothing can wait for it or read its results (a .cpu(), .item(), "
                   "print, a data-dependent shape or an op that falls back to the CPU does)",
                   d->index, what);
    if (c->error == TPU_OK) c->error = copy_status(st);
  }
  pthread_mutex_unlock(&d->cap_mu);
  return st;
}

static tpu_status_t host_submit(tpu_host_device_t* d, const tpu_hal_work_t* work, uint64_t* ticket) {
  tpu_status_t st;
  if (capture_work(d, work, &st)) {
    if (ticket) *ticket = 0;
    return st;
  }
  return tpu_host_queue_submit(&d->queue, work, ticket);
}

static tpu_status_t device_capture_begin(tpu_hal_device_t* device) {
  tpu_host_device_t* d = dev(device);
  tpu_hal_capture_t* c = calloc(1, sizeof(*c));
  if (!c) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot allocate a graph capture", d->index);
  c->device_index = d->index;
  pthread_mutex_lock(&d->cap_mu);
  tpu_status_t st = atomic_load_explicit(&d->recording, memory_order_relaxed)
                        ? TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                                    "tpu:%d: a graph is already being captured on this device", d->index)
                        : tpu_host_allocator_begin_pool(&d->allocator, &c->pool);
  if (st == TPU_OK) atomic_store_explicit(&d->recording, c, memory_order_release);
  pthread_mutex_unlock(&d->cap_mu);
  if (st != TPU_OK) free(c);
  return st;
}

static void capture_free(tpu_host_device_t* d, tpu_hal_capture_t* c) {
  tpu_host_queue_wait_idle(&d->queue); /* no replay may still be running */
  for (size_t i = 0; i < c->num_nodes; i++) {
    if (c->nodes[i]->cleanup) c->nodes[i]->cleanup(c->nodes[i]->ctx);
    free(c->nodes[i]);
  }
  free(c->nodes);
  tpu_host_allocator_release_pool(&d->allocator, &c->pool);
  tpu_status_free(c->error);
  free(c);
}

static tpu_status_t device_capture_end(tpu_hal_device_t* device, tpu_hal_capture_t** out) {
  tpu_host_device_t* d = dev(device);
  if (out) *out = NULL;
  pthread_mutex_lock(&d->cap_mu);
  tpu_hal_capture_t* c = atomic_load_explicit(&d->recording, memory_order_relaxed);
  atomic_store_explicit(&d->recording, NULL, memory_order_release);
  if (c) tpu_host_allocator_end_pool(&d->allocator);
  pthread_mutex_unlock(&d->cap_mu);
  if (!c) return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "tpu:%d: no graph is being captured", d->index);
  if (c->error != TPU_OK || !out) {
    tpu_status_t st = c->error != TPU_OK ? c->error
                                         : TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: capture_end: out is NULL",
                                                     d->index);
    c->error = TPU_OK;
    capture_free(d, c);
    return st;
  }
  *out = c;
  return TPU_OK;
}

/* Runs the recorded works in order. With the trace on, each is one step event
 * (tpu/trace.h) inside the replay's work, named as it was submitted. */
static tpu_status_t replay_run(void* ctx) {
  const tpu_hal_capture_t* c = ctx;
  tpu_status_t first = TPU_OK;
  const bool traced = tpu_trace_enabled();
  for (size_t i = 0; i < c->num_nodes; i++) {
    int64_t t0 = traced ? (int64_t)tpu_now_ns() : 0;
    tpu_status_t st = c->nodes[i]->run(c->nodes[i]->ctx);
    if (traced) {
      tpu_trace_event_t e = {.kind = TPU_TRACE_STEP, .device = c->device_index, .start_ns = t0,
                             .end_ns = (int64_t)tpu_now_ns()};
      snprintf(e.name, sizeof(e.name), "%.*s", (int)sizeof(e.name) - 1, c->nodes[i]->name);
      tpu_trace_record(&e);
    }
    if (st == TPU_OK) continue;
    if (first == TPU_OK) {
      first = tpu_status_annotate(st, "%s (work %zu of a graph replay)", c->nodes[i]->name, i);
    } else {
      tpu_status_free(st);
    }
  }
  return first;
}

static tpu_status_t device_capture_replay(tpu_hal_device_t* device, tpu_hal_capture_t* c) {
  tpu_host_device_t* d = dev(device);
  if (!c || c->device_index != d->index)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: replay of a graph captured on another device", d->index);
  tpu_hal_work_t work = {.name = "graph replay", .run = replay_run, .ctx = c};
  return host_submit(d, &work, NULL);
}

static void device_capture_release(tpu_hal_device_t* device, tpu_hal_capture_t* c) {
  if (c) capture_free(dev(device), c);
}

static int64_t device_capture_works(tpu_hal_capture_t* c) { return c ? (int64_t)c->num_nodes : 0; }

static tpu_status_t device_submit(tpu_hal_device_t* device, const tpu_hal_work_t* work) {
  return host_submit(dev(device), work, NULL);
}

static tpu_status_t device_synchronize(tpu_hal_device_t* device) {
  tpu_host_device_t* d = dev(device);
  TPU_RETURN_IF_ERROR(refuse_while_capturing(d, "synchronize"));
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
  return host_submit(d, &work, ticket);
}

static tpu_status_t device_copy_h2d(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_host_device_t* d = dev(device);
  if (size == 0) return TPU_OK;
  if (!src) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: copy_h2d: src is NULL",
                             d->index);
  TPU_RETURN_IF_ERROR(check_range(d, "copy_h2d", "destination", dst, size));
  /* While capturing, always a snapshot: the recorded copy runs at replays. */
  bool recording = atomic_load_explicit(&d->recording, memory_order_acquire) != NULL;
  void* staging = size <= TPU_HOST_STAGING_MAX || recording ? malloc(size) : NULL;
  if (!staging && recording)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: copy_h2d: cannot snapshot %zu bytes for the graph "
                     "being captured", d->index, size);
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
  TPU_RETURN_IF_ERROR(refuse_while_capturing(d, "a copy to the host"));
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
  TPU_RETURN_IF_ERROR(refuse_while_capturing(dev(device), "recording an event"));
  return tpu_host_event_record(&dev(device)->queue, event);
}
static tpu_status_t device_wait_event(tpu_hal_device_t* device, tpu_hal_event_t* event) {
  TPU_RETURN_IF_ERROR(refuse_while_capturing(dev(device), "waiting for an event"));
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
    .capture_begin = device_capture_begin,
    .capture_end = device_capture_end,
    .capture_replay = device_capture_replay,
    .capture_release = device_capture_release,
    .capture_works = device_capture_works,
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
    pthread_mutex_init(&d->cap_mu, NULL);
    drv->devices[i] = d;
    drv->device_count = i + 1;
  }
  *out_driver = &drv->base;
  return TPU_OK;
}
