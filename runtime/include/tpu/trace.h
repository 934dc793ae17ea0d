/* tpu/trace.h - device-queue trace: what ran on each chip's queue, when.
 *
 * A process-wide recorder, off by default. While it is on (between
 * tpu_trace_start and tpu_trace_stop), drivers record one event per work they
 * run on a device queue (an eager op, a copy, a graph run) and graph
 * executors one event per step inside a graph run (a kernel or a fused
 * group). `queued_ns` and `cpu_tid` are read on the thread that submitted
 * the work, at submit. `start_ns`/`end_ns` come from the device side: the
 * host driver reads them on the queue's worker around the work itself; the
 * pjrt driver, whose work runs inside its plugin, takes `end_ns` from the
 * plugin's completion callback (PJRT_Event_OnReady) and `start_ns` as the
 * later of the submit and the previous work's end on that chip (see
 * runtime/drivers/pjrt/pjrt_driver.c). All times are tpu_now_ns()
 * (CLOCK_MONOTONIC, nanoseconds).
 *
 * Cost when off: one relaxed atomic load per submit and per work.
 * Thread-safe. Events past the capacity are dropped and counted. */
#ifndef TPU_TRACE_H_
#define TPU_TRACE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_TRACE_NAME_MAX 96

enum {
  TPU_TRACE_WORK = 0,  /* a work of the device queue (op, copy, graph run) */
  TPU_TRACE_STEP = 1,  /* a step inside a graph run (kernel or fused group) */
};

typedef struct tpu_trace_event_t {
  char name[TPU_TRACE_NAME_MAX]; /* op schema name, "tpu::copy_h2d", a fused group's ops */
  int32_t kind;                  /* TPU_TRACE_* */
  int32_t device;                /* chip index */
  uint64_t seq;                  /* order of recording, from 1 */
  uint64_t cpu_tid;              /* OS thread id of the submitter (0: unknown) */
  int64_t queued_ns;             /* when submitted (0: unknown, e.g. steps) */
  int64_t start_ns, end_ns;      /* when it ran on the device */
  int64_t bytes;                 /* bytes of the tensors it reads and writes (0: unknown) */
} tpu_trace_event_t;

/* Clears the buffer and starts recording, keeping at most `capacity` events
 * (0: a default of 1M). INVALID_ARGUMENT if already recording, OUT_OF_MEMORY
 * if the buffer cannot be allocated. */
tpu_status_t tpu_trace_start(size_t capacity);
/* Stops recording (events stay until taken or the next start). No-op if off. */
void tpu_trace_stop(void);
bool tpu_trace_enabled(void);
/* Appends a copy of `e` (its seq is assigned here). Dropped (and counted)
 * when off or full. */
void tpu_trace_record(const tpu_trace_event_t* e);
/* Hands the recorded events to the caller, who frees *out_events with
 * free(); the buffer is empty afterwards. *out_dropped: events lost to the
 * capacity since the last start. Returns the count (may be 0, *out_events
 * then NULL). */
size_t tpu_trace_take(tpu_trace_event_t** out_events, uint64_t* out_dropped);
/* OS thread id of the calling thread. */
uint64_t tpu_trace_thread_id(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_TRACE_H_ */
