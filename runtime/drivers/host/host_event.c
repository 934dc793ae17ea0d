/* Events: a generation counter. record() bumps `recorded` and queues a marker
 * that raises `completed` to that generation; the event is complete when
 * completed >= recorded. wait_event() queues a work that blocks the queue
 * until the generation recorded at call time has completed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "host_internal.h"

typedef struct tpu_host_event_t {
  tpu_hal_event_t base;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool enable_timing;
  uint64_t recorded;
  uint64_t completed;
  uint64_t timestamp_ns; /* when `completed` last advanced */
} tpu_host_event_t;

typedef struct {
  tpu_host_event_t* event;
  uint64_t generation;
} tpu_host_event_work_t;

static const tpu_hal_event_vtable_t tpu_host_event_vtable;

static tpu_host_event_t* cast(tpu_hal_event_t* e) { return (tpu_host_event_t*)e; }

bool tpu_host_event_is_host(const tpu_hal_event_t* event) {
  return event && event->base.vtable == &tpu_host_event_vtable;
}

static void event_destroy(tpu_object_t* object) {
  tpu_host_event_t* e = (tpu_host_event_t*)object;
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

static bool event_query(tpu_hal_event_t* event) {
  if (!tpu_host_event_is_host(event)) return true;
  tpu_host_event_t* e = cast(event);
  pthread_mutex_lock(&e->mu);
  bool done = e->completed >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done;
}

static void wait_generation(tpu_host_event_t* e, uint64_t generation) {
  pthread_mutex_lock(&e->mu);
  while (e->completed < generation) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

static tpu_status_t event_synchronize(tpu_hal_event_t* event) {
  if (!tpu_host_event_is_host(event))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "event synchronize: not a host-driver event");
  tpu_host_event_t* e = cast(event);
  pthread_mutex_lock(&e->mu);
  uint64_t target = e->recorded;
  pthread_mutex_unlock(&e->mu);
  wait_generation(e, target);
  return TPU_OK;
}

static tpu_status_t event_elapsed_ms(tpu_hal_event_t* start, tpu_hal_event_t* end,
                                     double* out_ms) {
  if (!out_ms) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "elapsed_ms: out_ms is NULL");
  if (!tpu_host_event_is_host(start) || !tpu_host_event_is_host(end))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "elapsed_ms: not host-driver events");
  uint64_t t[2];
  tpu_host_event_t* ev[2] = {cast(start), cast(end)};
  for (int i = 0; i < 2; i++) {
    tpu_host_event_t* e = ev[i];
    const char* which = i == 0 ? "start" : "end";
    pthread_mutex_lock(&e->mu);
    bool timing = e->enable_timing, recorded = e->recorded > 0,
         done = e->completed >= e->recorded;
    t[i] = e->timestamp_ns;
    pthread_mutex_unlock(&e->mu);
    if (!timing)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "elapsed_ms: the %s event was created without timing (enable_timing=False)",
                       which);
    if (!recorded)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "elapsed_ms: the %s event has not been recorded", which);
    if (!done)
      return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                       "elapsed_ms: the %s event has not completed yet", which);
  }
  *out_ms = ((double)t[1] - (double)t[0]) / 1e6;
  return TPU_OK;
}

static const tpu_hal_event_vtable_t tpu_host_event_vtable = {
    .destroy = event_destroy,
    .query = event_query,
    .synchronize = event_synchronize,
    .elapsed_ms = event_elapsed_ms,
};

tpu_status_t tpu_host_event_create(bool enable_timing, tpu_hal_event_t** out_event) {
  if (!out_event) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "create_event: out_event is NULL");
  *out_event = NULL;
  tpu_host_event_t* e = calloc(1, sizeof(*e));
  if (!e) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate an event");
  tpu_object_init(&e->base.base, &tpu_host_event_vtable);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->enable_timing = enable_timing;
  *out_event = &e->base;
  return TPU_OK;
}

static void event_work_cleanup(void* ctx) {
  tpu_host_event_work_t* w = ctx;
  tpu_object_release(&w->event->base.base);
  free(w);
}

static tpu_status_t marker_run(void* ctx) {
  tpu_host_event_work_t* w = ctx;
  tpu_host_event_t* e = w->event;
  uint64_t now = tpu_now_ns();
  pthread_mutex_lock(&e->mu);
  if (w->generation > e->completed) {
    e->completed = w->generation;
    e->timestamp_ns = now;
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return TPU_OK;
}

static tpu_status_t waiter_run(void* ctx) {
  tpu_host_event_work_t* w = ctx;
  wait_generation(w->event, w->generation);
  return TPU_OK;
}

/* Allocates everything first so that nothing can fail after the generation
 * is taken (a recorded generation without a marker would never complete). */
static tpu_status_t enqueue(tpu_host_queue_t* q, tpu_hal_event_t* event, bool record) {
  if (!tpu_host_event_is_host(event))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: %s: not a host-driver event",
                     q->device_index, record ? "record_event" : "wait_event");
  tpu_host_event_t* e = cast(event);
  tpu_host_event_work_t* w = malloc(sizeof(*w));
  tpu_hal_work_t work = {
      .name = record ? "record_event" : "wait_event",
      .run = record ? marker_run : waiter_run,
      .cleanup = event_work_cleanup,
      .ctx = w,
  };
  tpu_host_work_node_t* node = w ? tpu_host_work_node_new(&work) : NULL;
  if (!node) {
    free(w);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot allocate an event work",
                     q->device_index);
  }
  tpu_object_retain(&e->base.base);
  w->event = e;
  pthread_mutex_lock(&e->mu);
  if (record) {
    w->generation = ++e->recorded;
    tpu_host_queue_push(q, node); /* under e->mu: generations reach a queue in order */
  } else {
    w->generation = e->recorded;
  }
  pthread_mutex_unlock(&e->mu);
  if (!record) tpu_host_queue_push(q, node);
  return TPU_OK;
}

tpu_status_t tpu_host_event_record(tpu_host_queue_t* q, tpu_hal_event_t* event) {
  return enqueue(q, event, true);
}

tpu_status_t tpu_host_event_wait(tpu_host_queue_t* q, tpu_hal_event_t* event) {
  return enqueue(q, event, false);
}
