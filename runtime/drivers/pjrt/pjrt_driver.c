/* PJRT driver: chips of any PJRT plugin behind the HAL.
 *
 * Storage model: an allocation is a range of addresses reserved with no
 * access (PROT_NONE), so pointer arithmetic above the HAL works and any host
 * dereference faults at once; its bytes live in one PJRT buffer u8[size] on
 * the chip. PJRT buffers are never written in place: a write makes a new
 * buffer (a whole-range upload, or a compiled StableHLO dynamic_update_slice
 * for a part), which replaces the allocation's buffer. Buffers are counted
 * references, so a whole-allocation device copy shares its source's buffer.
 *
 * Ordering: every call is issued in program order on the calling thread
 * under the device's lock; PJRT orders work through each buffer's
 * definition events. The events of issued work (uploads, executions) are
 * kept until they complete; synchronize() awaits them and returns the first
 * error. Host works (tpu_hal_work_t) run on the calling thread once earlier
 * device work has completed.
 *
 * Device-queue trace (tpu/trace.h): while it records, each HAL call that
 * issues device work (an op's program, a graph's program, a copy) is one
 * event, named as on the host driver. Its PJRT events get an OnReady
 * callback that notes when the plugin signalled completion. The event is
 * recorded once the driver has completed the call's PJRT events (in issue
 * order), with
 *   end   = the latest completion noted for the call (the moment the driver
 *           saw it complete if a callback has not run yet), for a call that
 *           ran a program no later than the earliest completion noted for a
 *           program issued after it (a chip runs its programs in issue
 *           order; a callback may run late on a busy host);
 *   start = the later of the issue of the call's first PJRT work (after any
 *           compile) and the end of the previous work recorded on the chip
 *           (the issue itself if that work ended after this one: the plugin
 *           ran them at once).
 * Host works and reads to the host run on the calling thread and are timed
 * there. Off, it costs one atomic load per call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "drivers/pjrt/pjrt_abi.h"
#include "drivers/pjrt/pjrt_lower.h"
#include "tpu/drivers.h"
#include "tpu/trace.h"

#define TPU_PJRT_MAX_DEVICES 1024
#define TPU_PJRT_MAX_OPTIONS 16

typedef struct tpu_pjrt_driver_t tpu_pjrt_driver_t;

/* A PJRT buffer shared by the allocations that hold it. */
typedef struct tpu_pjrt_buf_t {
  int64_t refs;
  PJRT_Buffer* buffer;
} tpu_pjrt_buf_t;

typedef struct tpu_pjrt_alloc_t {
  uintptr_t base;
  size_t size;         /* bytes asked */
  size_t reserved;     /* bytes of address space (page multiple) */
  tpu_pjrt_buf_t* buf; /* NULL until first written */
} tpu_pjrt_alloc_t;

/* The trace of one HAL call (see the top of this file). Shared by the
 * driver and the OnReady callbacks of the call's PJRT events; freed by the
 * last of them to let go. */
typedef struct tpu_pjrt_trace_t {
  int64_t end_ns;      /* atomic: latest completion a callback noted (0: none) */
  int64_t prog_end_ns; /* atomic: earliest completion noted for one of its programs (0: none) */
  int32_t refs;        /* atomic: the driver's, one per pending entry and per registered callback */
  int32_t fired;       /* atomic: callbacks that ran */
  /* under the device lock: */
  int32_t joined;   /* PJRT events of the call */
  int32_t left;     /* of those, not yet completed */
  bool closed;      /* the call has returned: no more events join */
  bool program;     /* it executed a program */
  int64_t issue_ns; /* when its first PJRT work was issued (0: none yet) */
  int64_t bound;    /* trace_flush: the earliest program completion after it */
  const PJRT_Api* api;
  tpu_trace_event_t e; /* name, device, cpu_tid, queued_ns, bytes */
} tpu_pjrt_trace_t;

typedef struct tpu_pjrt_pending_t {
  PJRT_Event* event;
  tpu_pjrt_trace_t* trace; /* the traced call it belongs to, or NULL */
  void* staging; /* host bytes to free once the event is ready */
  uint64_t seq;
  char what[48];
} tpu_pjrt_pending_t;

/* The check output of an issued program (pjrt_lower.h: the index checks of
 * its nodes), read back when the device synchronizes or bytes come back to
 * the host: an index out of range becomes the device's asynchronous error. */
typedef struct tpu_pjrt_guard_t {
  PJRT_Buffer* buffer;      /* s64[num_checks, 2] */
  tpu_pjrt_check_t* checks; /* owned */
  int32_t num_checks;
  uint64_t seq; /* the work computing it */
} tpu_pjrt_guard_t;

typedef struct tpu_pjrt_device_t {
  tpu_hal_device_t base;
  tpu_pjrt_driver_t* driver;
  int32_t index;
  PJRT_Device* device;
  char kind[64];
  pthread_mutex_t mu;
  tpu_pjrt_alloc_t* allocs; /* sorted by base */
  size_t num_allocs, cap_allocs;
  tpu_pjrt_pending_t* pending; /* issue order */
  size_t num_pending, cap_pending;
  tpu_pjrt_guard_t* guards; /* issue order */
  size_t num_guards, cap_guards;
  uint64_t seq; /* work items issued */
  tpu_status_t error; /* first asynchronous error since the last take */
  tpu_hal_memory_stats_t stats;
  uint64_t works;
  uint64_t programs; /* executions */
  tpu_pjrt_trace_t* trace;        /* the traced HAL call in progress (under mu), or NULL */
  tpu_pjrt_trace_t** trace_ready; /* traced calls complete, to record (issue order) */
  size_t num_trace_ready, cap_trace_ready;
  int64_t trace_last_end; /* end of the last traced work recorded (under mu) */
} tpu_pjrt_device_t;

typedef struct tpu_pjrt_exe_t {
  uint64_t hash; /* FNV-1a of key */
  char* key;
  PJRT_LoadedExecutable* exe;
} tpu_pjrt_exe_t;

struct tpu_pjrt_driver_t {
  tpu_hal_driver_t base;
  void* library;
  const PJRT_Api* api;
  PJRT_Client* client;
  char platform[32];
  char platform_version[64];
  int32_t device_count;
  tpu_pjrt_device_t** devices;
  pthread_mutex_t exe_mu;
  tpu_pjrt_exe_t* exes;
  size_t num_exes, cap_exes;
  uint64_t compiles, disk_hits; /* programs compiled, loaded from disk */
  char cache_dir[4096];         /* executables on disk ("" none) */
  char plugin_ident[4200];      /* path, size, mtime, API version: part of the disk key */
};

static const tpu_hal_device_vtable_t tpu_pjrt_device_vtable;
static const tpu_hal_driver_vtable_t tpu_pjrt_driver_vtable;
static const tpu_hal_event_vtable_t tpu_pjrt_event_vtable;

static tpu_pjrt_device_t* dev(tpu_hal_device_t* d) {
  return d && d->base.vtable == (const void*)&tpu_pjrt_device_vtable ? (tpu_pjrt_device_t*)d
                                                                    : NULL;
}

/* ---- errors ---- */
static tpu_status_code_t code_of(PJRT_Error_Code c) {
  switch (c) {
    case PJRT_Error_Code_INVALID_ARGUMENT: return TPU_STATUS_INVALID_ARGUMENT;
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return TPU_STATUS_OUT_OF_MEMORY;
    case PJRT_Error_Code_UNIMPLEMENTED: return TPU_STATUS_UNIMPLEMENTED;
    case PJRT_Error_Code_FAILED_PRECONDITION: return TPU_STATUS_FAILED_PRECONDITION;
    case PJRT_Error_Code_UNAVAILABLE: return TPU_STATUS_UNAVAILABLE;
    case PJRT_Error_Code_NOT_FOUND: return TPU_STATUS_FAILED_PRECONDITION;
    default: return TPU_STATUS_INTERNAL;
  }
}

/* Converts (and destroys) a PJRT error; TPU_OK for NULL. */
static tpu_status_t take(const PJRT_Api* api, PJRT_Error* e, const char* what) {
  if (!e) return TPU_OK;
  PJRT_Error_Message_Args m = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Message_Args, message_size),
                               .error = e};
  api->PJRT_Error_Message(&m);
  PJRT_Error_GetCode_Args g = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_GetCode_Args, code),
                               .error = e};
  PJRT_Error* ge = api->PJRT_Error_GetCode(&g);
  tpu_status_code_t code = ge ? TPU_STATUS_INTERNAL : code_of(g.code);
  tpu_status_t st = TPU_ERROR(code, "%s: PJRT: %.*s", what, (int)m.message_size,
                              m.message ? m.message : "");
  PJRT_Error_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error),
                               .error = e};
  api->PJRT_Error_Destroy(&d);
  if (ge) {
    d.error = ge;
    api->PJRT_Error_Destroy(&d);
  }
  return st;
}

#define EVARGS(ev) {.struct_size = TPU_PJRT_SIZE(PJRT_Event_Args, event), .event = (ev)}

static void event_destroy(const PJRT_Api* api, PJRT_Event* ev) {
  if (!ev) return;
  PJRT_Event_Args a = EVARGS(ev);
  tpu_status_free(take(api, api->PJRT_Event_Destroy(&a), "event"));
}

/* Waits for `ev`, returns its error, destroys it. */
static tpu_status_t event_finish(const PJRT_Api* api, PJRT_Event* ev, const char* what) {
  if (!ev) return TPU_OK;
  PJRT_Event_Args a = EVARGS(ev);
  tpu_status_t st = take(api, api->PJRT_Event_Await(&a), what);
  event_destroy(api, ev);
  return st;
}

static bool event_ready(const PJRT_Api* api, PJRT_Event* ev) {
  PJRT_Event_IsReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_IsReady_Args, is_ready),
                               .event = ev};
  PJRT_Error* e = api->PJRT_Event_IsReady(&a);
  if (e) {
    tpu_status_free(take(api, e, "event"));
    return true; /* Await will report it */
  }
  return a.is_ready;
}

/* ---- buffers ---- */
static void buf_release(const PJRT_Api* api, tpu_pjrt_buf_t* b) {
  if (!b || --b->refs > 0) return;
  PJRT_Buffer_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer),
                                .buffer = b->buffer};
  tpu_status_free(take(api, api->PJRT_Buffer_Destroy(&a), "buffer"));
  free(b);
}

static tpu_status_t buf_wrap(const PJRT_Api* api, PJRT_Buffer* buffer, tpu_pjrt_buf_t** out) {
  tpu_pjrt_buf_t* b = malloc(sizeof(*b));
  if (!b) {
    PJRT_Buffer_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer),
                                  .buffer = buffer};
    tpu_status_free(take(api, api->PJRT_Buffer_Destroy(&a), "buffer"));
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate a buffer record");
  }
  *b = (tpu_pjrt_buf_t){.refs = 1, .buffer = buffer};
  *out = b;
  return TPU_OK;
}

static void buffer_destroy(const PJRT_Api* api, PJRT_Buffer* b) {
  if (!b) return;
  PJRT_Buffer_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer),
                                .buffer = b};
  tpu_status_free(take(api, api->PJRT_Buffer_Destroy(&a), "buffer"));
}

/* ---- device-queue trace (tpu/trace.h) ---- */
static void trace_unref(tpu_pjrt_trace_t* t) {
  if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) free(t);
}

/* Runs on the plugin's thread: never takes a driver lock. */
static void trace_noted(tpu_pjrt_trace_t* t, PJRT_Error* error, bool program) {
  int64_t now = (int64_t)tpu_now_ns();
  if (error) {
    PJRT_Error_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error), .error = error};
    t->api->PJRT_Error_Destroy(&a);
  }
  int64_t cur = __atomic_load_n(&t->end_ns, __ATOMIC_RELAXED);
  while (cur < now && !__atomic_compare_exchange_n(&t->end_ns, &cur, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  cur = __atomic_load_n(&t->prog_end_ns, __ATOMIC_RELAXED);
  while (program && (cur == 0 || now < cur) &&
         !__atomic_compare_exchange_n(&t->prog_end_ns, &cur, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  __atomic_add_fetch(&t->fired, 1, __ATOMIC_RELEASE);
  trace_unref(t);
}

static void trace_on_ready(PJRT_Error* error, void* arg) { trace_noted(arg, error, false); }
static void trace_on_program_ready(PJRT_Error* error, void* arg) { trace_noted(arg, error, true); }

/* Records one work that ended at `end` on `d` (under d->mu). `measured`:
 * it ran on the calling thread from `start`; else `start` is when it was
 * issued, and the work starts no earlier than the previous one's end (see
 * the top of this file). */
static void trace_put(tpu_pjrt_device_t* d, tpu_trace_event_t* e, int64_t start, int64_t end, bool measured) {
  if (!measured && start < d->trace_last_end && d->trace_last_end <= end) start = d->trace_last_end;
  if (start > end) start = end;
  e->start_ns = start;
  e->end_ns = end;
  if (end > d->trace_last_end) d->trace_last_end = end;
  tpu_trace_record(e);
}

/* Records a complete call: see the top of this file for its times. */
static void trace_emit(tpu_pjrt_device_t* d, tpu_pjrt_trace_t* t, int64_t bound) {
  int64_t end = __atomic_load_n(&t->end_ns, __ATOMIC_RELAXED);
  /* every event of the call is complete: a callback yet to run would note a
   * time no earlier than now */
  if (__atomic_load_n(&t->fired, __ATOMIC_ACQUIRE) < t->joined || end == 0) end = (int64_t)tpu_now_ns();
  if (t->program && bound < end) end = bound; /* a later program completed: so had this one */
  int64_t issue = t->issue_ns ? t->issue_ns : t->e.queued_ns;
  trace_put(d, &t->e, issue, end < issue ? issue : end, false);
}

/* Records the complete calls in issue order, each program's end bounded by
 * the earliest completion noted for a program issued after it. */
static void trace_flush(tpu_pjrt_device_t* d) {
  size_t n = d->num_trace_ready;
  if (!n) return;
  int64_t bound = INT64_MAX;
  for (size_t i = 0; i < d->num_pending; i++) {
    tpu_pjrt_trace_t* t = d->pending[i].trace;
    int64_t pe = t ? __atomic_load_n(&t->prog_end_ns, __ATOMIC_RELAXED) : 0;
    if (pe && pe < bound) bound = pe;
  }
  for (size_t k = n; k-- > 0;) {
    tpu_pjrt_trace_t* t = d->trace_ready[k];
    t->bound = bound;
    int64_t pe = __atomic_load_n(&t->prog_end_ns, __ATOMIC_RELAXED);
    if (pe && pe < bound) bound = pe;
  }
  for (size_t k = 0; k < n; k++) {
    trace_emit(d, d->trace_ready[k], d->trace_ready[k]->bound);
    trace_unref(d->trace_ready[k]);
  }
  d->num_trace_ready = 0;
}

/* Once the call has returned and its events have completed: queued for
 * trace_flush. */
static void trace_done(tpu_pjrt_device_t* d, tpu_pjrt_trace_t* t) {
  if (!t->closed || t->left > 0 || t->joined == 0) return;
  if (d->num_trace_ready == d->cap_trace_ready) {
    size_t cap = d->cap_trace_ready ? 2 * d->cap_trace_ready : 64;
    void* p = realloc(d->trace_ready, cap * sizeof(*d->trace_ready));
    if (!p) { /* recorded now, unbounded */
      trace_flush(d);
      trace_emit(d, t, INT64_MAX);
      return;
    }
    d->trace_ready = p;
    d->cap_trace_ready = cap;
  }
  __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
  d->trace_ready[d->num_trace_ready++] = t;
}

/* Starts the trace of a HAL call (under d->mu): NULL when not recording, the
 * one atomic load this costs then. Every call to it is paired with trace_end. */
static tpu_pjrt_trace_t* trace_begin(tpu_pjrt_device_t* d, const char* name) {
  if (!tpu_trace_enabled()) return NULL;
  tpu_pjrt_trace_t* t = calloc(1, sizeof(*t));
  if (!t) return NULL; /* the event is lost, the work is not */
  t->refs = 1;
  t->api = d->driver->api;
  t->e.kind = TPU_TRACE_WORK;
  t->e.device = d->index;
  t->e.cpu_tid = tpu_trace_thread_id();
  t->e.queued_ns = (int64_t)tpu_now_ns();
  snprintf(t->e.name, sizeof(t->e.name), "%s", name);
  d->trace = t;
  return t;
}

static void trace_end(tpu_pjrt_device_t* d) {
  tpu_pjrt_trace_t* t = d->trace;
  if (!t) return;
  d->trace = NULL;
  t->closed = true;
  trace_done(d, t);
  trace_flush(d);
  trace_unref(t);
}

/* Before each PJRT call that issues device work: the traced call's device
 * work starts no earlier than its first such call (a compile before it is
 * host work). */
static void trace_issue(tpu_pjrt_device_t* d, bool program) {
  if (!d->trace) return;
  if (!d->trace->issue_ns) d->trace->issue_ns = (int64_t)tpu_now_ns();
  d->trace->program |= program;
}

/* The PJRT event of pending entry `p`, issued by the traced call in
 * progress (a program's completion when `program`). */
static void trace_join(tpu_pjrt_device_t* d, tpu_pjrt_pending_t* p, bool program) {
  tpu_pjrt_trace_t* t = d->trace;
  const PJRT_Api* api = d->driver->api;
  p->trace = t;
  t->joined++;
  t->left++;
  __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED); /* the pending entry's */
  if (!api->PJRT_Event_OnReady) return;              /* end: when the driver sees it */
  __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED); /* the callback's */
  PJRT_Event_OnReady_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg),
                               .event = p->event,
                               .callback = program ? trace_on_program_ready : trace_on_ready,
                               .user_arg = t};
  PJRT_Error* e = api->PJRT_Event_OnReady(&a);
  if (e) {
    tpu_status_free(take(api, e, "event"));
    trace_unref(t); /* no callback will run */
  }
}

/* ---- pending device work (under d->mu) ---- */
static tpu_status_t keep_error(tpu_pjrt_device_t* d, tpu_status_t st) {
  if (st) {
    if (!d->error) {
      d->error = tpu_status_annotate(st, "tpu:%d", d->index);
    } else {
      tpu_status_free(st);
    }
  }
  return TPU_OK;
}

static void pending_finish(tpu_pjrt_device_t* d, tpu_pjrt_pending_t* p) {
  keep_error(d, event_finish(d->driver->api, p->event, p->what));
  free(p->staging);
  tpu_pjrt_trace_t* t = p->trace;
  if (t) {
    p->trace = NULL;
    t->left--;
    trace_done(d, t);
    trace_unref(t);
  }
}

/* Completes the ready prefix of the pending list (and every entry when
 * `all`); later entries that are ready stay until those before them are. */
static void pending_reap(tpu_pjrt_device_t* d, bool all) {
  size_t k = 0;
  while (k < d->num_pending && (all || event_ready(d->driver->api, d->pending[k].event))) {
    pending_finish(d, &d->pending[k]);
    k++;
  }
  if (k) {
    memmove(d->pending, d->pending + k, (d->num_pending - k) * sizeof(*d->pending));
    d->num_pending -= k;
  }
  trace_flush(d);
}

/* Adds work completing at `ev`; on failure to record it, waits for it. */
static tpu_status_t pending_add(tpu_pjrt_device_t* d, PJRT_Event* ev, void* staging,
                                const char* what, bool program) {
  d->seq++;
  if (!ev) {
    free(staging);
    return TPU_OK;
  }
  if (d->num_pending == d->cap_pending) {
    size_t cap = d->cap_pending ? d->cap_pending * 2 : 64;
    void* p = realloc(d->pending, cap * sizeof(*d->pending));
    if (!p) {
      tpu_pjrt_pending_t tmp = {.event = ev, .staging = staging};
      snprintf(tmp.what, sizeof(tmp.what), "%s", what);
      pending_finish(d, &tmp);
      return TPU_OK;
    }
    d->pending = p;
    d->cap_pending = cap;
  }
  tpu_pjrt_pending_t* p = &d->pending[d->num_pending++];
  *p = (tpu_pjrt_pending_t){.event = ev, .staging = staging, .seq = d->seq};
  snprintf(p->what, sizeof(p->what), "%s", what);
  if (d->trace) trace_join(d, p, program);
  if (d->num_pending > 256) pending_reap(d, false);
  return TPU_OK;
}

/* ---- index checks (under d->mu) ---- */
static void guard_free(const PJRT_Api* api, tpu_pjrt_guard_t* g) {
  buffer_destroy(api, g->buffer);
  free(g->checks);
  *g = (tpu_pjrt_guard_t){0};
}

/* Reads a guard back (waiting for its work) and keeps its first hit, or
 * the failure to read it, as the device's error; frees it. */
static void guard_read(tpu_pjrt_device_t* d, tpu_pjrt_guard_t* g) {
  const PJRT_Api* api = d->driver->api;
  size_t bytes = sizeof(int64_t) * 2 * (size_t)g->num_checks;
  int64_t* rows = malloc(bytes);
  tpu_status_t st = rows ? TPU_OK : TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot stage %zu bytes", bytes);
  if (!st) {
    PJRT_Buffer_ToHostBuffer_Args t = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event),
                                       .src = g->buffer,
                                       .dst = rows,
                                       .dst_size = bytes};
    st = take(api, api->PJRT_Buffer_ToHostBuffer(&t), "index check");
    if (!st) st = event_finish(api, t.event, "index check");
  }
  for (int32_t i = 0; i < g->num_checks && !st; i++) st = tpu_pjrt_check_status(&g->checks[i], rows + 2 * i);
  keep_error(d, st);
  free(rows);
  guard_free(api, g);
}

/* Reads the guards of work issued up to `seq`, in issue order. */
static void guards_read(tpu_pjrt_device_t* d, uint64_t seq) {
  size_t k = 0;
  while (k < d->num_guards && d->guards[k].seq <= seq) guard_read(d, &d->guards[k++]);
  if (k) {
    memmove(d->guards, d->guards + k, (d->num_guards - k) * sizeof(*d->guards));
    d->num_guards -= k;
  }
}

/* Keeps the check output `buffer` of the work just issued with `prog`'s
 * checks (taken from it). Past 256 guards those of completed work are read
 * (no wait); past 4096 all are. */
static void guard_add(tpu_pjrt_device_t* d, PJRT_Buffer* buffer, tpu_pjrt_program_t* prog) {
  tpu_pjrt_guard_t g = {.buffer = buffer, .checks = prog->checks, .num_checks = prog->num_checks, .seq = d->seq};
  prog->checks = NULL;
  prog->num_checks = 0;
  if (d->num_guards == d->cap_guards) {
    size_t cap = d->cap_guards ? d->cap_guards * 2 : 16;
    void* p = realloc(d->guards, cap * sizeof(*d->guards));
    if (!p) {
      guard_read(d, &g);
      return;
    }
    d->guards = p;
    d->cap_guards = cap;
  }
  d->guards[d->num_guards++] = g;
  if (d->num_guards > 256) {
    pending_reap(d, false);
    guards_read(d, d->num_pending ? d->pending[0].seq - 1 : UINT64_MAX);
  }
  if (d->num_guards > 4096) guards_read(d, UINT64_MAX);
}

/* Completes every issued work and reads every guard. */
static void drain(tpu_pjrt_device_t* d) {
  pending_reap(d, true);
  guards_read(d, UINT64_MAX);
}

static tpu_status_t take_error(tpu_pjrt_device_t* d) {
  tpu_status_t st = d->error;
  d->error = TPU_OK;
  return st;
}

/* ---- allocations (under d->mu) ---- */
static size_t alloc_find(tpu_pjrt_device_t* d, uintptr_t p) {
  size_t lo = 0, hi = d->num_allocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (d->allocs[mid].base <= p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo; /* first with base > p */
}

/* The allocation holding [p, p + size), or NULL. */
static tpu_pjrt_alloc_t* alloc_lookup(tpu_pjrt_device_t* d, const void* ptr, size_t size) {
  uintptr_t p = (uintptr_t)ptr;
  size_t i = alloc_find(d, p);
  if (i == 0) return NULL;
  tpu_pjrt_alloc_t* a = &d->allocs[i - 1];
  if (p - a->base > a->size || size > a->size - (p - a->base)) return NULL;
  if (size == 0 && p - a->base == a->size && a->size > 0) return NULL;
  return a;
}

static tpu_status_t range_of(tpu_pjrt_device_t* d, const char* op, const char* what,
                             const void* ptr, size_t size, tpu_pjrt_alloc_t** out) {
  *out = alloc_lookup(d, ptr, size);
  if (*out) return TPU_OK;
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                   "tpu:%d: %s: %s [%p, +%zu bytes) is not inside a live allocation of this "
                   "device",
                   d->index, op, what, ptr, size);
}

/* ---- executables (the driver's cache, keyed by program text) ---- */
/* Serialized xla.CompileOptionsProto: executable_build_options { num_replicas: 1
 * num_partitions: 1 }, compile_portable_executable: true (the executable
 * runs on the device given at execution). The CPU plugins abort on options
 * without replica and partition counts. */
static const char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};

static uint64_t fnv1a(const char* s) { return tpu_fnv1a(TPU_FNV1A_INIT, s, strlen(s)); }

/* ---- executables on disk ----
 * <cache dir>/pjrt-<platform>-<hash>.exe: a header line, the program text
 * (a hit must match it exactly) and the plugin's serialization of the
 * executable. The hash covers the plugin (platform name and version, file,
 * size, modification time, API version) and the text; a file the plugin no
 * longer loads is a miss and is replaced. */
static const char kDiskMagic[] = "torch-tpu pjrt executable 1\n";

static void disk_path(const tpu_pjrt_driver_t* drv, const char* text, char* out, size_t n) {
  uint64_t h = tpu_fnv1a(TPU_FNV1A_INIT, drv->platform, strlen(drv->platform) + 1);
  h = tpu_fnv1a(h, drv->platform_version, strlen(drv->platform_version) + 1);
  h = tpu_fnv1a(h, drv->plugin_ident, strlen(drv->plugin_ident) + 1);
  uint64_t h2 = tpu_fnv1a(h ^ 0x9e3779b97f4a7c15ull, text, strlen(text));
  h = tpu_fnv1a(h, text, strlen(text));
  snprintf(out, n, "%s/pjrt-%s-%016llx%016llx.exe", drv->cache_dir, drv->platform, (unsigned long long)h,
           (unsigned long long)h2);
}

static bool disk_usable(const tpu_pjrt_driver_t* drv) {
  const PJRT_Api* api = drv->api;
  return drv->cache_dir[0] && api->PJRT_LoadedExecutable_GetExecutable && api->PJRT_Executable_Serialize &&
         api->PJRT_Executable_Destroy && api->PJRT_Executable_DeserializeAndLoad;
}

static PJRT_LoadedExecutable* disk_load(tpu_pjrt_driver_t* drv, const char* text) {
  char path[4300];
  disk_path(drv, text, path, sizeof(path));
  struct stat sb;
  if (stat(path, &sb) != 0) return NULL;
  size_t n = 0;
  char* data = tpu_read_file(path, (size_t)sb.st_size, &n);
  size_t ml = strlen(kDiskMagic), tl = strlen(text);
  PJRT_LoadedExecutable* exe = NULL;
  if (data && n > ml + tl + 1 && memcmp(data, kDiskMagic, ml) == 0 && memcmp(data + ml, text, tl) == 0 &&
      data[ml + tl] == 0) {
    PJRT_Executable_DeserializeAndLoad_Args a = {
        .struct_size = TPU_PJRT_SIZE(PJRT_Executable_DeserializeAndLoad_Args,
                                     overridden_serialized_compile_options_size),
        .client = drv->client,
        .serialized_executable = data + ml + tl + 1,
        .serialized_executable_size = n - ml - tl - 1};
    tpu_status_t st = take(drv->api, drv->api->PJRT_Executable_DeserializeAndLoad(&a), "load executable");
    if (st == TPU_OK) exe = a.loaded_executable;
    tpu_status_free(st);
  }
  free(data);
  if (!exe) unlink(path); /* stale or foreign: compile again */
  return exe;
}

/* Best effort: a cache that cannot be written only costs compiles. */
static void disk_store(tpu_pjrt_driver_t* drv, const char* text, PJRT_LoadedExecutable* loaded) {
  const PJRT_Api* api = drv->api;
  PJRT_LoadedExecutable_GetExecutable_Args g = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable),
      .loaded_executable = loaded};
  tpu_status_t st = take(api, api->PJRT_LoadedExecutable_GetExecutable(&g), "executable");
  PJRT_Executable_Serialize_Args ser = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter),
      .executable = g.executable};
  if (st == TPU_OK) st = take(api, api->PJRT_Executable_Serialize(&ser), "serialize executable");
  if (st == TPU_OK && tpu_make_dirs(drv->cache_dir) == TPU_OK) {
    char path[4300], tmp[4400];
    disk_path(drv, text, path, sizeof(path));
    static int64_t counter;
    snprintf(tmp, sizeof(tmp), "%s.%ld.%ld", path, (long)getpid(),
             (long)__atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    FILE* f = fopen(tmp, "wb");
    bool ok = f != NULL;
    if (f) {
      size_t ml = strlen(kDiskMagic), tl = strlen(text) + 1;
      ok = fwrite(kDiskMagic, 1, ml, f) == ml && fwrite(text, 1, tl, f) == tl &&
           fwrite(ser.serialized_bytes, 1, ser.serialized_bytes_size, f) == ser.serialized_bytes_size;
      ok = fclose(f) == 0 && ok;
    }
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
  }
  tpu_status_free(st);
  if (ser.serialized_executable && ser.serialized_executable_deleter)
    ser.serialized_executable_deleter(ser.serialized_executable);
  if (g.executable) {
    PJRT_Executable_Destroy_Args d = {.struct_size = TPU_PJRT_SIZE(PJRT_Executable_Destroy_Args, executable),
                                      .executable = g.executable};
    tpu_status_free(take(api, api->PJRT_Executable_Destroy(&d), "executable"));
  }
}

static tpu_status_t executable(tpu_pjrt_driver_t* drv, const char* text,
                               PJRT_LoadedExecutable** out) {
  uint64_t hash = fnv1a(text);
  pthread_mutex_lock(&drv->exe_mu);
  for (size_t i = 0; i < drv->num_exes; i++) {
    if (drv->exes[i].hash == hash && strcmp(drv->exes[i].key, text) == 0) {
      *out = drv->exes[i].exe;
      pthread_mutex_unlock(&drv->exe_mu);
      return TPU_OK;
    }
  }
  if (drv->num_exes == drv->cap_exes) {
    size_t cap = drv->cap_exes ? 2 * drv->cap_exes : 16;
    void* n = realloc(drv->exes, cap * sizeof(*drv->exes));
    if (n) {
      drv->exes = n;
      drv->cap_exes = cap;
    }
  }
  char* key = drv->num_exes < drv->cap_exes ? strdup(text) : NULL;
  if (!key) {
    pthread_mutex_unlock(&drv->exe_mu);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot grow the executable cache");
  }
  if (disk_usable(drv)) {
    PJRT_LoadedExecutable* exe = disk_load(drv, key);
    if (exe) {
      drv->exes[drv->num_exes++] = (tpu_pjrt_exe_t){.hash = hash, .key = key, .exe = exe};
      drv->disk_hits++;
      *out = exe;
      pthread_mutex_unlock(&drv->exe_mu);
      return TPU_OK;
    }
  }
  PJRT_Program prog = {.struct_size = TPU_PJRT_SIZE(PJRT_Program, format_size),
                       .code = key,
                       .code_size = strlen(key),
                       .format = "mlir",
                       .format_size = 4};
  PJRT_Client_Compile_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Compile_Args, executable),
                                .client = drv->client,
                                .program = &prog,
                                .compile_options = kCompileOptions,
                                .compile_options_size = sizeof(kCompileOptions)};
  tpu_status_t st = take(drv->api, drv->api->PJRT_Client_Compile(&a), "compile");
  if (st) {
    free(key);
  } else {
    drv->exes[drv->num_exes++] = (tpu_pjrt_exe_t){.hash = hash, .key = key, .exe = a.executable};
    drv->compiles++;
    if (disk_usable(drv)) disk_store(drv, key, a.executable);
    *out = a.executable;
  }
  pthread_mutex_unlock(&drv->exe_mu);
  return st;
}

/* Runs an executable of `num_outs` results on `d` (outs[0..num_outs)). */
static tpu_status_t execute_n(tpu_pjrt_device_t* d, PJRT_LoadedExecutable* exe, PJRT_Buffer* const* args,
                              size_t num_args, const char* what, PJRT_Buffer** outs, size_t num_outs) {
  const PJRT_Api* api = d->driver->api;
  PJRT_ExecuteOptions opts = {.struct_size = TPU_PJRT_SIZE(PJRT_ExecuteOptions, incarnation_ids)};
  for (size_t i = 0; i < num_outs; i++) outs[i] = NULL;
  PJRT_Buffer** output_list[1] = {outs};
  PJRT_Buffer* const* arg_list[1] = {args};
  PJRT_Event* done[1] = {NULL};
  PJRT_LoadedExecutable_Execute_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device),
      .executable = exe,
      .options = &opts,
      .argument_lists = arg_list,
      .num_devices = 1,
      .num_args = num_args,
      .output_lists = output_list,
      .device_complete_events = done,
      .execute_device = d->device};
  trace_issue(d, true);
  TPU_RETURN_IF_ERROR(take(api, api->PJRT_LoadedExecutable_Execute(&a), what));
  d->programs++;
  pending_add(d, done[0], NULL, what, true);
  return TPU_OK;
}

static tpu_status_t execute(tpu_pjrt_device_t* d, PJRT_LoadedExecutable* exe, PJRT_Buffer* const* args,
                            size_t num_args, const char* what, PJRT_Buffer** out) {
  return execute_n(d, exe, args, num_args, what, out, 1);
}

/* Uploads `size` host bytes as a new u8[size] buffer (or an s64 scalar when
 * `scalar`); the bytes are staged, so `src` may be reused at return. */
static tpu_status_t upload(tpu_pjrt_device_t* d, const void* src, size_t size, bool scalar,
                           PJRT_Buffer** out) {
  const PJRT_Api* api = d->driver->api;
  void* staging = malloc(size ? size : 1);
  if (!staging)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot stage %zu bytes", d->index, size);
  if (src) {
    memcpy(staging, src, size);
  } else {
    memset(staging, 0, size);
  }
  int64_t dims[1] = {(int64_t)size};
  PJRT_Client_BufferFromHostBuffer_Args a = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer),
      .client = d->driver->client,
      .data = staging,
      .type = scalar ? PJRT_Buffer_Type_S64 : PJRT_Buffer_Type_U8,
      .dims = dims,
      .num_dims = scalar ? 0 : 1,
      .host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
      .device = d->device};
  trace_issue(d, false);
  tpu_status_t st = take(api, api->PJRT_Client_BufferFromHostBuffer(&a), "copy_h2d");
  if (st) {
    free(staging);
    return st;
  }
  pending_add(d, a.done_with_host_buffer, staging, "copy_h2d", false);
  *out = a.buffer;
  return TPU_OK;
}

/* The allocation's buffer, made (zero-filled) when it was never written. */
static tpu_status_t alloc_buffer(tpu_pjrt_device_t* d, tpu_pjrt_alloc_t* a, tpu_pjrt_buf_t** out) {
  if (!a->buf) {
    PJRT_Buffer* b = NULL;
    TPU_RETURN_IF_ERROR(upload(d, NULL, a->size, false, &b));
    TPU_RETURN_IF_ERROR(buf_wrap(d->driver->api, b, &a->buf));
  }
  *out = a->buf;
  return TPU_OK;
}

static void alloc_set(tpu_pjrt_device_t* d, tpu_pjrt_alloc_t* a, tpu_pjrt_buf_t* b) {
  buf_release(d->driver->api, a->buf);
  a->buf = b;
}

/* dst[doff, doff+n) = src[soff, soff+n) as one executed program; `src` lives
 * on `d`. The result replaces the destination allocation's buffer. */
static tpu_status_t write_range(tpu_pjrt_device_t* d, tpu_pjrt_alloc_t* dst, size_t doff,
                                PJRT_Buffer* src, size_t src_size, size_t soff, size_t n,
                                const char* what) {
  char text[1024];
  snprintf(text, sizeof(text),
           "func.func public @main(%%d: tensor<%zuxui8>, %%s: tensor<%zuxui8>, %%so: tensor<i64>, "
           "%%do: tensor<i64>) -> tensor<%zuxui8> {\n"
           "  %%p = stablehlo.dynamic_slice %%s, %%so, sizes = [%zu] : (tensor<%zuxui8>, "
           "tensor<i64>) -> tensor<%zuxui8>\n"
           "  %%r = stablehlo.dynamic_update_slice %%d, %%p, %%do : (tensor<%zuxui8>, "
           "tensor<%zuxui8>, tensor<i64>) -> tensor<%zuxui8>\n"
           "  return %%r : tensor<%zuxui8>\n}\n",
           dst->size, src_size, dst->size, n, src_size, n, dst->size, n, dst->size, dst->size);
  PJRT_LoadedExecutable* exe = NULL;
  TPU_RETURN_IF_ERROR(tpu_status_annotate(executable(d->driver, text, &exe), "tpu:%d: %s", d->index, what));
  tpu_pjrt_buf_t* cur = NULL;
  TPU_RETURN_IF_ERROR(alloc_buffer(d, dst, &cur));
  int64_t so = (int64_t)soff, dof = (int64_t)doff;
  PJRT_Buffer* offs[2] = {NULL, NULL};
  tpu_status_t st = upload(d, &so, sizeof(so), true, &offs[0]);
  if (!st) st = upload(d, &dof, sizeof(dof), true, &offs[1]);
  PJRT_Buffer* out = NULL;
  if (!st) {
    PJRT_Buffer* args[4] = {cur->buffer, src, offs[0], offs[1]};
    st = execute(d, exe, args, 4, what, &out);
  }
  buffer_destroy(d->driver->api, offs[0]);
  buffer_destroy(d->driver->api, offs[1]);
  if (st) return st;
  tpu_pjrt_buf_t* b = NULL;
  TPU_RETURN_IF_ERROR(buf_wrap(d->driver->api, out, &b));
  alloc_set(d, dst, b);
  return TPU_OK;
}

/* ---- device: properties and memory ---- */
static void device_destroy(tpu_object_t* object) {
  tpu_pjrt_device_t* d = (tpu_pjrt_device_t*)object;
  const PJRT_Api* api = d->driver->api;
  pending_reap(d, true);
  for (size_t i = 0; i < d->num_guards; i++) guard_free(api, &d->guards[i]); /* nobody is left to see them */
  free(d->guards);
  for (size_t i = 0; i < d->num_allocs; i++) {
    buf_release(api, d->allocs[i].buf);
    munmap((void*)d->allocs[i].base, d->allocs[i].reserved);
  }
  tpu_status_free(d->error);
  free(d->allocs);
  free(d->pending);
  free(d->trace_ready); /* empty: pending_reap flushed it */
  pthread_mutex_destroy(&d->mu);
  free(d);
}

static void device_query_properties(tpu_hal_device_t* device, tpu_hal_device_properties_t* out) {
  tpu_pjrt_device_t* d = dev(device);
  memset(out, 0, sizeof(*out));
  /* A TPU's kind names it ("TPU v5 lite"); another plugin's device serves as a tpu. */
  if (strcasestr(d->kind, "tpu"))
    snprintf(out->name, sizeof(out->name), "%s", d->kind);
  else
    snprintf(out->name, sizeof(out->name), "tpu on PJRT %.20s (%.20s)", d->driver->platform, d->kind);
  snprintf(out->driver, sizeof(out->driver), "pjrt");
  snprintf(out->platform, sizeof(out->platform), "%s", d->driver->platform);
  out->index = d->index;
  out->compute_units = 1;
  out->total_memory = d->stats.budget_bytes;
  out->host_addressable = false;
}

static tpu_status_t device_allocate(tpu_hal_device_t* device, size_t size, void** out_ptr) {
  tpu_pjrt_device_t* d = dev(device);
  *out_ptr = NULL;
  if (size == 0) return TPU_OK;
  pthread_mutex_lock(&d->mu);
  tpu_status_t st = TPU_OK;
  uint64_t budget = d->stats.budget_bytes;
  if (d->stats.allocated_bytes > budget || size > budget - d->stats.allocated_bytes) {
    d->stats.num_ooms++;
    st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY,
                   "tpu:%d out of memory: tried to allocate %zu bytes with %" PRIu64
                   " bytes free of %" PRIu64 " (%s)",
                   d->index, size, budget - d->stats.allocated_bytes, budget, d->driver->platform);
    goto done;
  }
  size_t page = 4096, reserved = (size + page - 1) / page * page;
  void* p = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot reserve %zu bytes of addresses",
                   d->index, reserved);
    goto done;
  }
  if (d->num_allocs == d->cap_allocs) {
    size_t cap = d->cap_allocs ? 2 * d->cap_allocs : 256;
    void* n = realloc(d->allocs, cap * sizeof(*d->allocs));
    if (!n) {
      munmap(p, reserved);
      st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot grow the allocation table",
                     d->index);
      goto done;
    }
    d->allocs = n;
    d->cap_allocs = cap;
  }
  size_t i = alloc_find(d, (uintptr_t)p);
  memmove(d->allocs + i + 1, d->allocs + i, (d->num_allocs - i) * sizeof(*d->allocs));
  d->allocs[i] = (tpu_pjrt_alloc_t){.base = (uintptr_t)p, .size = size, .reserved = reserved};
  d->num_allocs++;
  d->stats.allocated_bytes += size;
  d->stats.reserved_bytes = d->stats.allocated_bytes;
  d->stats.requested_bytes += size;
  d->stats.num_allocs++;
  d->stats.num_device_allocs++;
  d->stats.num_segments = d->num_allocs;
  if (d->stats.allocated_bytes > d->stats.peak_allocated_bytes)
    d->stats.peak_allocated_bytes = d->stats.allocated_bytes;
  d->stats.peak_reserved_bytes = d->stats.peak_allocated_bytes;
  *out_ptr = p;
done:
  pthread_mutex_unlock(&d->mu);
  return st;
}

static void device_deallocate(tpu_hal_device_t* device, void* ptr) {
  tpu_pjrt_device_t* d = dev(device);
  if (!ptr) return;
  pthread_mutex_lock(&d->mu);
  size_t i = alloc_find(d, (uintptr_t)ptr);
  if (i > 0 && d->allocs[i - 1].base == (uintptr_t)ptr) {
    tpu_pjrt_alloc_t a = d->allocs[i - 1];
    memmove(d->allocs + i - 1, d->allocs + i, (d->num_allocs - i) * sizeof(*d->allocs));
    d->num_allocs--;
    buf_release(d->driver->api, a.buf);
    munmap((void*)a.base, a.reserved);
    d->stats.allocated_bytes -= a.size;
    d->stats.reserved_bytes = d->stats.allocated_bytes;
    d->stats.num_frees++;
    d->stats.num_device_frees++;
    d->stats.num_segments = d->num_allocs;
  }
  pthread_mutex_unlock(&d->mu);
}

static void device_empty_cache(tpu_hal_device_t* device) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  pending_reap(d, true);
  pthread_mutex_unlock(&d->mu);
}

static void device_memory_stats(tpu_hal_device_t* device, tpu_hal_memory_stats_t* out) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  *out = d->stats;
  pthread_mutex_unlock(&d->mu);
}

static void device_reset_peak(tpu_hal_device_t* device) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  d->stats.peak_allocated_bytes = d->stats.peak_reserved_bytes = d->stats.allocated_bytes;
  pthread_mutex_unlock(&d->mu);
}

static void device_reset_accumulated(tpu_hal_device_t* device) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  d->stats.num_allocs = d->stats.num_frees = d->stats.num_device_allocs = 0;
  d->stats.num_device_frees = d->stats.num_ooms = d->stats.requested_bytes = 0;
  pthread_mutex_unlock(&d->mu);
}

static void device_memory_info(tpu_hal_device_t* device, uint64_t* out_free, uint64_t* out_total) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  *out_total = d->stats.budget_bytes;
  *out_free = d->stats.budget_bytes - d->stats.allocated_bytes;
  pthread_mutex_unlock(&d->mu);
}

/* The live allocations in address order: the driver caches nothing, so every
 * block is allocated, one per allocation, its size the bytes asked (what
 * memory_stats counts; the reserved address range is a page multiple). */
static size_t device_memory_blocks(tpu_hal_device_t* device, tpu_hal_memory_block_t* out, size_t cap) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  size_t n = d->num_allocs;
  for (size_t i = 0; i < n && i < cap && out; i++) {
    const tpu_pjrt_alloc_t* a = &d->allocs[i];
    out[i] = (tpu_hal_memory_block_t){.address = (uint64_t)a->base, .size = a->size, .requested = a->size,
                                      .allocated = true};
  }
  pthread_mutex_unlock(&d->mu);
  return n;
}

static bool device_owns_pointer(tpu_hal_device_t* device, const void* ptr) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  bool r = alloc_lookup(d, ptr, 0) != NULL;
  pthread_mutex_unlock(&d->mu);
  return r;
}

/* ---- device: queue ---- */
static tpu_status_t device_submit(tpu_hal_device_t* device, const tpu_hal_work_t* work) {
  tpu_pjrt_device_t* d = dev(device);
  if (!work || !work->run) {
    if (work && work->cleanup) work->cleanup(work->ctx);
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: submit: work has no run function",
                     d->index);
  }
  bool traced = tpu_trace_enabled();
  int64_t queued = traced ? (int64_t)tpu_now_ns() : 0;
  pthread_mutex_lock(&d->mu);
  drain(d);
  d->seq++;
  d->works++;
  pthread_mutex_unlock(&d->mu);
  /* Runs unlocked: a work may call HAL functions of this device. */
  int64_t start = traced ? (int64_t)tpu_now_ns() : 0;
  tpu_status_t st = work->run(work->ctx);
  if (traced) { /* ran on this thread, once earlier device work was done */
    tpu_trace_event_t e = {.kind = TPU_TRACE_WORK, .device = d->index, .cpu_tid = tpu_trace_thread_id(),
                           .queued_ns = queued, .bytes = work->bytes};
    snprintf(e.name, sizeof(e.name), "%s", work->name ? work->name : "");
    int64_t end = (int64_t)tpu_now_ns();
    pthread_mutex_lock(&d->mu);
    trace_put(d, &e, start, end, true);
    pthread_mutex_unlock(&d->mu);
  }
  if (work->cleanup) work->cleanup(work->ctx);
  if (st) {
    pthread_mutex_lock(&d->mu);
    keep_error(d, tpu_status_annotate(st, "%s", work->name ? work->name : "work"));
    pthread_mutex_unlock(&d->mu);
  }
  return TPU_OK;
}

static tpu_status_t device_synchronize(tpu_hal_device_t* device) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  drain(d);
  tpu_status_t st = take_error(d);
  pthread_mutex_unlock(&d->mu);
  return st;
}

static bool device_query_idle(tpu_hal_device_t* device) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  pending_reap(d, false);
  bool idle = d->num_pending == 0;
  pthread_mutex_unlock(&d->mu);
  return idle;
}

static void device_queue_stats(tpu_hal_device_t* device, tpu_hal_queue_stats_t* out) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  *out = (tpu_hal_queue_stats_t){.works = d->works, .programs = d->programs};
  pthread_mutex_unlock(&d->mu);
  pthread_mutex_lock(&d->driver->exe_mu);
  out->program_compiles = d->driver->compiles;
  out->program_loads = d->driver->disk_hits;
  pthread_mutex_unlock(&d->driver->exe_mu);
  pthread_mutex_lock(&d->mu);
  pthread_mutex_unlock(&d->mu);
}

/* ---- device: copies ---- */
static tpu_status_t device_copy_h2d(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_pjrt_device_t* d = dev(device);
  if (size == 0) return TPU_OK;
  if (!src) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: copy_h2d: src is NULL", d->index);
  pthread_mutex_lock(&d->mu);
  tpu_pjrt_trace_t* tr = trace_begin(d, "copy_h2d");
  if (tr) tr->e.bytes = (int64_t)size;
  tpu_pjrt_alloc_t* a = NULL;
  tpu_status_t st = range_of(d, "copy_h2d", "destination", dst, size, &a);
  PJRT_Buffer* b = NULL;
  if (!st) st = upload(d, src, size, false, &b);
  if (!st) {
    size_t off = (uintptr_t)dst - a->base;
    if (off == 0 && size == a->size) {
      tpu_pjrt_buf_t* w = NULL;
      st = buf_wrap(d->driver->api, b, &w);
      if (!st) alloc_set(d, a, w);
    } else {
      st = write_range(d, a, off, b, size, 0, size, "copy_h2d");
      buffer_destroy(d->driver->api, b);
    }
  }
  trace_end(d);
  pthread_mutex_unlock(&d->mu);
  return st;
}

/* Copies the allocation's bytes [off, off+size) to host `dst`. */
static tpu_status_t read_range(tpu_pjrt_device_t* d, tpu_pjrt_alloc_t* a, size_t off, void* dst,
                               size_t size) {
  if (!a->buf) {
    memset(dst, 0, size); /* never written: any contents are valid */
    return TPU_OK;
  }
  const PJRT_Api* api = d->driver->api;
  bool whole = off == 0 && size == a->size;
  void* host = whole ? dst : malloc(a->size);
  if (!host) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot stage %zu bytes", d->index, a->size);
  PJRT_Buffer_ToHostBuffer_Args t = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event),
                                     .src = a->buf->buffer,
                                     .dst = host,
                                     .dst_size = a->size};
  tpu_status_t st = take(api, api->PJRT_Buffer_ToHostBuffer(&t), "copy_d2h");
  if (!st) st = event_finish(api, t.event, "copy_d2h");
  if (!st && !whole) memcpy(dst, (char*)host + off, size);
  if (!whole) free(host);
  return st;
}

static tpu_status_t device_copy_d2h(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_pjrt_device_t* d = dev(device);
  bool traced = size > 0 && tpu_trace_enabled();
  int64_t queued = traced ? (int64_t)tpu_now_ns() : 0;
  pthread_mutex_lock(&d->mu);
  tpu_status_t st = TPU_OK;
  tpu_pjrt_alloc_t* a = NULL;
  if (size > 0) {
    if (!dst) st = TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: copy_d2h: dst is NULL", d->index);
    if (!st) st = range_of(d, "copy_d2h", "source", src, size, &a);
  }
  if (!st) {
    drain(d);
    st = take_error(d);
  }
  if (!st && size > 0) {
    /* Read on this thread once earlier work is done: timed here. A never
     * written allocation reads as zeros without device work. */
    traced = traced && a->buf;
    int64_t start = traced ? (int64_t)tpu_now_ns() : 0;
    st = read_range(d, a, (uintptr_t)src - a->base, dst, size);
    if (traced && !st) {
      tpu_trace_event_t e = {.name = "copy_d2h", .kind = TPU_TRACE_WORK, .device = d->index,
                             .cpu_tid = tpu_trace_thread_id(), .queued_ns = queued, .bytes = (int64_t)size};
      trace_put(d, &e, start, (int64_t)tpu_now_ns(), true);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return st;
}

static tpu_status_t device_copy_d2d(tpu_hal_device_t* device, void* dst, const void* src,
                                    size_t size) {
  tpu_pjrt_device_t* d = dev(device);
  if (size == 0) return TPU_OK;
  tpu_pjrt_driver_t* drv = d->driver;
  /* The source may live on any chip of this driver (peer copies). Its buffer
   * is taken under its own device's lock, then used under ours. */
  tpu_pjrt_device_t* sd = NULL;
  tpu_pjrt_buf_t* sbuf = NULL;
  size_t soff = 0, ssize = 0;
  tpu_status_t st = TPU_OK;
  for (int32_t i = 0; i < drv->device_count && !sd; i++) {
    tpu_pjrt_device_t* c = drv->devices[i];
    pthread_mutex_lock(&c->mu);
    tpu_pjrt_alloc_t* a = alloc_lookup(c, src, size);
    if (a) {
      sd = c;
      st = alloc_buffer(c, a, &sbuf);
      if (!st) sbuf->refs++;
      soff = (uintptr_t)src - a->base;
      ssize = a->size;
    }
    pthread_mutex_unlock(&c->mu);
  }
  if (!sd)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "tpu:%d: copy_d2d: source [%p, +%zu bytes) is not inside a live allocation "
                     "of any tpu device",
                     d->index, src, size);
  if (st) return st;
  pthread_mutex_lock(&d->mu);
  tpu_pjrt_trace_t* tr = trace_begin(d, "copy_d2d");
  if (tr) tr->e.bytes = (int64_t)size;
  tpu_pjrt_alloc_t* a = NULL;
  st = range_of(d, "copy_d2d", "destination", dst, size, &a);
  tpu_pjrt_buf_t* local = NULL;
  if (!st && sd != d) {
    /* Brings the whole source buffer to this chip first. */
    PJRT_Buffer_CopyToDevice_Args c = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_CopyToDevice_Args, dst_buffer),
                                       .buffer = sbuf->buffer,
                                       .dst_device = d->device};
    trace_issue(d, false);
    st = take(drv->api, drv->api->PJRT_Buffer_CopyToDevice(&c), "copy_d2d");
    if (!st) st = buf_wrap(drv->api, c.dst_buffer, &local);
    if (!st && tr && drv->api->PJRT_Buffer_ReadyEvent) {
      /* traced: the transfer's completion is the new buffer's readiness */
      PJRT_Buffer_ReadyEvent_Args r = {.struct_size = TPU_PJRT_SIZE(PJRT_Buffer_ReadyEvent_Args, event),
                                       .buffer = local->buffer};
      tpu_status_t rst = take(drv->api, drv->api->PJRT_Buffer_ReadyEvent(&r), "copy_d2d");
      if (!rst) pending_add(d, r.event, NULL, "copy_d2d", false);
      tpu_status_free(rst); /* only the trace loses it */
    }
  } else if (!st) {
    local = sbuf;
    local->refs++;
  }
  size_t doff = a ? (uintptr_t)dst - a->base : 0;
  if (!st) {
    if (doff == 0 && soff == 0 && size == a->size && size == ssize) {
      local->refs++;
      alloc_set(d, a, local);
    } else {
      st = write_range(d, a, doff, local->buffer, ssize, soff, size, "copy_d2d");
    }
  }
  buf_release(drv->api, local);
  trace_end(d);
  pthread_mutex_unlock(&d->mu);
  /* The source's reference was taken under the source device's lock. */
  pthread_mutex_lock(&sd->mu);
  buf_release(drv->api, sbuf);
  pthread_mutex_unlock(&sd->mu);
  return st;
}

/* ---- device: ops (StableHLO lowerings, pjrt_lower.c) ---- */
static bool device_supports_op(tpu_hal_device_t* device, const char* op) {
  return tpu_pjrt_lowerable(op);
}

/* Bytes from a view's first element to its last (0: empty or absent). */
static int64_t span_bytes(const tpu_tensor_t* t) {
  return tpu_tensor_span(t) * (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
}

#define TPU_PJRT_MAX_OP_TENSORS 16

/* One program per call: every allocation a tensor lies in is an argument;
 * those an output lies in are results, in argument order. */
static tpu_status_t device_execute_op(tpu_hal_device_t* device, const tpu_k_call_t* call) {
  tpu_pjrt_device_t* d = dev(device);
  if (call->num_outputs < 1 || !call->outputs)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: the pjrt driver lowers ops with outputs only", call->op);
  bool writes = false;
  for (int32_t j = 0; j < call->num_outputs; j++) writes |= span_bytes(&call->outputs[j]) > 0;
  if (!writes) return TPU_OK; /* nothing to write */
  const tpu_tensor_t* tens[TPU_PJRT_MAX_OP_TENSORS];
  int nt = 0;
  for (int32_t i = 0; i < call->num_args; i++) {
    const tpu_k_value_t* v = &call->args[i];
    int64_t n = v->kind == TPU_K_TENSOR ? 1 : v->kind == TPU_K_TENSORS ? v->v.tensors.len : 0;
    if (nt + n > TPU_PJRT_MAX_OP_TENSORS - call->num_outputs)
      return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: more than %d tensors", call->op, TPU_PJRT_MAX_OP_TENSORS);
    if (v->kind == TPU_K_TENSOR) tens[nt++] = v->v.tensor;
    for (int64_t j = 0; v->kind == TPU_K_TENSORS && j < n; j++) tens[nt++] = &v->v.tensors.data[j];
  }
  if (nt + call->num_outputs > TPU_PJRT_MAX_OP_TENSORS)
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: more than %d tensors", call->op, TPU_PJRT_MAX_OP_TENSORS);
  int nin = nt;
  for (int32_t j = 0; j < call->num_outputs; j++) tens[nt++] = &call->outputs[j];
  pthread_mutex_lock(&d->mu);
  tpu_pjrt_trace_t* tr = trace_begin(d, call->op);
  if (tr) tr->e.bytes = tpu_k_call_bytes(call);
  tpu_status_t st = TPU_OK;
  tpu_pjrt_loc_t locs[TPU_PJRT_MAX_OP_TENSORS];
  tpu_pjrt_alloc_t* allocs[TPU_PJRT_MAX_OP_TENSORS];
  tpu_pjrt_storage_t storages[TPU_PJRT_MAX_OP_TENSORS + 1]; /* + the rng argument */
  int32_t nargs = 0, nres = 0;
  for (int k = 0; k < nt && !st; k++) {
    int64_t n = span_bytes(tens[k]);
    /* absent, or no bytes to read or write (an empty view may point just
     * past its allocation, or nowhere) */
    if (tens[k]->dtype == TPU_DTYPE_INVALID || n == 0) {
      locs[k] = (tpu_pjrt_loc_t){.storage = -1, .offset = 0};
      continue;
    }
    tpu_pjrt_alloc_t* a = alloc_lookup(d, tens[k]->data, (size_t)n);
    if (!a) {
      st = TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "tpu:%d: %s: tensor %d [%p, +%" PRId64 " bytes) is not inside a live allocation of "
                     "this device",
                     d->index, call->op, k, tens[k]->data, n);
      break;
    }
    int32_t arg = 0;
    while (arg < nargs && allocs[arg] != a) arg++;
    if (arg == nargs) {
      allocs[nargs] = a;
      storages[nargs] = (tpu_pjrt_storage_t){.bytes = a->size, .arg = nargs, .result = false};
      nargs++;
    }
    if (k >= nin && !storages[arg].result) {
      storages[arg].result = true;
      nres++;
    }
    locs[k] = (tpu_pjrt_loc_t){.storage = arg, .offset = (uintptr_t)tens[k]->data - a->base};
  }
  /* A random op draws from (rng_seed, rng_offset): one more argument, its
   * 16 bytes uploaded for this call (the program text stays the same). */
  const tpu_k_entry_t* entry = tpu_k_lookup(call->op);
  bool random = entry && (entry->flags & TPU_K_FLAG_RANDOM);
  tpu_pjrt_loc_t rng_loc = {.storage = nargs, .offset = 0};
  PJRT_Buffer* rng_buf = NULL;
  if (!st && random) {
    uint64_t words[2] = {call->rng_seed, call->rng_offset};
    storages[nargs] = (tpu_pjrt_storage_t){.bytes = sizeof(words), .arg = nargs, .result = false};
    st = upload(d, words, sizeof(words), false, &rng_buf);
  }
  int32_t nargs_all = nargs + (random ? 1 : 0);
  tpu_pjrt_node_t node = {call, locs, random ? &rng_loc : NULL};
  tpu_pjrt_program_t prog = {0};
  if (!st) st = tpu_pjrt_lower(storages, nargs_all, &node, 1, &prog);
  PJRT_LoadedExecutable* exe = NULL;
  if (!st) st = executable(d->driver, prog.text, &exe);
  PJRT_Buffer* args[TPU_PJRT_MAX_OP_TENSORS + 1];
  for (int32_t a = 0; a < nargs && !st; a++) {
    tpu_pjrt_buf_t* b = NULL;
    st = alloc_buffer(d, allocs[a], &b);
    if (!st) args[a] = b->buffer;
  }
  if (random) args[nargs] = rng_buf;
  PJRT_Buffer* outs[TPU_PJRT_MAX_OP_TENSORS + 1] = {NULL}; /* the results, then the check output */
  int32_t nouts = nres + (prog.num_checks > 0);
  if (!st) st = execute_n(d, exe, args, (size_t)nargs_all, call->op, outs, (size_t)nouts);
  buffer_destroy(d->driver->api, rng_buf);
  if (!st && nouts > nres) {
    guard_add(d, outs[nres], &prog);
    outs[nres] = NULL;
  }
  tpu_pjrt_program_free(&prog);
  for (int32_t a = 0, r = 0; a < nargs && !st; a++) {
    if (!storages[a].result) continue;
    tpu_pjrt_buf_t* nb = NULL;
    st = buf_wrap(d->driver->api, outs[r], &nb);
    outs[r++] = NULL;
    if (!st) alloc_set(d, allocs[a], nb);
  }
  for (int32_t r = 0; r < nouts; r++) buffer_destroy(d->driver->api, outs[r]);
  trace_end(d);
  pthread_mutex_unlock(&d->mu);
  return st ? tpu_status_annotate(st, "tpu:%d: %s", d->index, call->op) : TPU_OK;
}

/* ---- device: whole graphs (one program per run) ---- */
#define TPU_PJRT_NODE_TENSORS 64

/* A node's tensors in the lowering's order (tensor arguments, list members
 * included, then outputs); returns their count or -1 above `cap`. */
static int node_tensors(const tpu_k_call_t* call, const tpu_tensor_t** out, int cap) {
  int nt = 0;
  for (int32_t i = 0; i < call->num_args; i++) {
    const tpu_k_value_t* v = &call->args[i];
    if (v->kind == TPU_K_TENSOR) {
      if (nt == cap) return -1;
      out[nt++] = v->v.tensor;
    }
    for (int64_t j = 0; v->kind == TPU_K_TENSORS && j < v->v.tensors.len; j++) {
      if (nt == cap) return -1;
      out[nt++] = &v->v.tensors.data[j];
    }
  }
  for (int32_t j = 0; j < call->num_outputs; j++) {
    if (nt == cap) return -1;
    out[nt++] = &call->outputs[j];
  }
  return nt;
}

/* Whether `call` lowers: a program of that one node over storages holding
 * exactly its tensors' spans is built (not compiled). */
static tpu_status_t device_check_graph_node(tpu_hal_device_t* device, const tpu_k_call_t* call) {
  (void)device;
  if (!tpu_pjrt_lowerable(call->op))
    return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: no StableHLO lowering", call->op);
  const tpu_tensor_t* tens[TPU_PJRT_NODE_TENSORS];
  int nt = node_tensors(call, tens, TPU_PJRT_NODE_TENSORS);
  if (nt < 0) return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: too many tensors", call->op);
  tpu_pjrt_storage_t storages[TPU_PJRT_NODE_TENSORS];
  tpu_pjrt_loc_t locs[TPU_PJRT_NODE_TENSORS];
  int32_t nargs = 0;
  for (int k = 0; k < nt; k++) {
    int64_t n = span_bytes(tens[k]);
    locs[k] = (tpu_pjrt_loc_t){.storage = n > 0 ? nargs : -1, .offset = 0};
    if (n > 0) {
      storages[nargs] = (tpu_pjrt_storage_t){.bytes = (size_t)n, .arg = nargs, .result = false};
      nargs++;
    }
  }
  if (nargs == 0 || locs[nt - 1].storage < 0) return TPU_OK; /* writes nothing */
  storages[locs[nt - 1].storage].result = true;
  tpu_pjrt_node_t node = {call, locs};
  tpu_pjrt_program_t prog = {0};
  tpu_status_t st = tpu_pjrt_lower(storages, nargs, &node, 1, &prog);
  tpu_pjrt_program_free(&prog);
  return st;
}

typedef struct {
  tpu_pjrt_alloc_t* alloc; /* NULL: a fresh storage (internal, or an output written whole) */
  size_t base;             /* the graph buffer's first byte in the storage */
  int32_t storage;
} gbuf_t;

static tpu_status_t run_graph_locked(tpu_pjrt_device_t* d, const tpu_hal_graph_t* g, void* const* inputs,
                                     void* const* outputs) {
  int32_t nb = g->num_buffers;
  gbuf_t* gb = calloc((size_t)(nb ? nb : 1), sizeof(*gb));
  tpu_pjrt_storage_t* stg = calloc((size_t)(nb ? nb : 1), sizeof(*stg));
  tpu_pjrt_alloc_t** salloc = calloc((size_t)(nb ? nb : 1), sizeof(*salloc));
  tpu_pjrt_node_t* nodes = calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof(*nodes));
  tpu_pjrt_loc_t* locs = NULL;
  tpu_pjrt_program_t prog = {0};
  PJRT_Buffer** args = NULL;
  PJRT_Buffer** outs = NULL;
  tpu_status_t st = TPU_OK;
  if (!gb || !stg || !salloc || !nodes) {
    st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: graph: out of host memory", d->index);
    goto done;
  }
  /* Storages: the allocations holding input and output buffers (one per
   * allocation, several buffers may share it), then fresh ones. An output
   * buffer that is a whole allocation of its own starts fresh: its old
   * bytes are never read. */
  int32_t ns = 0, nargs = 0;
  for (int32_t b = 0; b < nb && !st; b++) {
    const tpu_hal_graph_buffer_t* hb = &g->buffers[b];
    gb[b].storage = -1;
    if (hb->kind == TPU_HAL_GRAPH_INTERNAL || hb->bytes == 0) continue;
    void* p = hb->kind == TPU_HAL_GRAPH_INPUT ? inputs[hb->index] : outputs[hb->index];
    st = range_of(d, "graph", hb->kind == TPU_HAL_GRAPH_INPUT ? "input" : "output", p, (size_t)hb->bytes,
                  &gb[b].alloc);
    if (!st) gb[b].base = (uintptr_t)p - gb[b].alloc->base;
  }
  for (int32_t b = 0; b < nb && !st; b++) {
    const tpu_hal_graph_buffer_t* hb = &g->buffers[b];
    if (!gb[b].alloc) continue;
    bool shared = false;
    for (int32_t c = 0; c < nb; c++) shared |= c != b && gb[c].alloc == gb[b].alloc;
    if (hb->kind == TPU_HAL_GRAPH_OUTPUT && !shared && gb[b].base == 0 &&
        gb[b].alloc->size == (size_t)hb->bytes) {
      stg[ns] = (tpu_pjrt_storage_t){.bytes = (size_t)hb->bytes, .arg = -1, .result = true};
      salloc[ns] = gb[b].alloc;
      gb[b].storage = ns++;
      continue;
    }
    int32_t s = 0;
    while (s < ns && !(salloc[s] == gb[b].alloc && stg[s].arg >= 0)) s++;
    if (s == ns) {
      stg[ns] = (tpu_pjrt_storage_t){.bytes = gb[b].alloc->size, .arg = nargs++,
                                     .result = hb->kind == TPU_HAL_GRAPH_OUTPUT};
      salloc[ns++] = gb[b].alloc;
    } else if (hb->kind == TPU_HAL_GRAPH_OUTPUT) {
      stg[s].result = true;
    }
    gb[b].storage = s;
  }
  for (int32_t b = 0; b < nb && !st; b++) {
    if (gb[b].storage >= 0 || g->buffers[b].bytes == 0) continue;
    stg[ns] = (tpu_pjrt_storage_t){.bytes = (size_t)g->buffers[b].bytes, .arg = -1, .result = false};
    salloc[ns] = NULL;
    gb[b].storage = ns++;
  }
  /* Nodes: each tensor slot at its storage; a node writing an input's
   * allocation makes that allocation a result. */
  int64_t total = 0;
  for (int32_t i = 0; i < g->num_nodes; i++) {
    const tpu_tensor_t* tens[TPU_PJRT_NODE_TENSORS];
    int nt = node_tensors(g->nodes[i].call, tens, TPU_PJRT_NODE_TENSORS);
    total += nt < 0 ? 0 : nt;
  }
  locs = calloc((size_t)(total ? total : 1), sizeof(*locs));
  if (!st && !locs) st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: graph: out of host memory", d->index);
  int32_t nn = 0;
  int64_t at = 0;
  for (int32_t i = 0; i < g->num_nodes && !st; i++) {
    const tpu_hal_graph_node_t* hn = &g->nodes[i];
    const tpu_tensor_t* tens[TPU_PJRT_NODE_TENSORS];
    int nt = node_tensors(hn->call, tens, TPU_PJRT_NODE_TENSORS);
    if (nt < 0) {
      st = TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "%s: too many tensors", hn->call->op);
      break;
    }
    bool writes = false;
    int nin = nt - hn->call->num_outputs;
    for (int k = 0; k < nt; k++) {
      int32_t b = hn->buffer[k];
      int64_t bytes = b < 0 ? 0 : span_bytes(tens[k]);
      if (b < 0 || gb[b].storage < 0 || bytes == 0) {
        locs[at + k] = (tpu_pjrt_loc_t){.storage = -1, .offset = 0};
        continue;
      }
      locs[at + k] = (tpu_pjrt_loc_t){.storage = gb[b].storage, .offset = gb[b].base + (size_t)hn->offset[k]};
      if (k >= nin) {
        writes = true;
        if (stg[gb[b].storage].arg >= 0) stg[gb[b].storage].result = true;
      }
    }
    if (!writes) continue; /* its outputs are empty */
    nodes[nn++] = (tpu_pjrt_node_t){hn->call, locs + at};
    at += nt;
  }
  int32_t nres = 0;
  for (int32_t s = 0; s < ns; s++) nres += stg[s].result;
  if (!st && nres == 0) goto done; /* nothing to write */
  if (!st) st = tpu_pjrt_lower(stg, ns, nodes, nn, &prog);
  PJRT_LoadedExecutable* exe = NULL;
  if (!st) st = executable(d->driver, prog.text, &exe);
  int32_t nouts = nres + (prog.num_checks > 0); /* the results, then the check output */
  args = calloc((size_t)(nargs ? nargs : 1), sizeof(*args));
  outs = calloc((size_t)nouts, sizeof(*outs));
  if (!st && (!args || !outs)) st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: graph: out of host memory", d->index);
  for (int32_t s = 0; s < ns && !st; s++) {
    if (stg[s].arg < 0) continue;
    tpu_pjrt_buf_t* b = NULL;
    st = alloc_buffer(d, salloc[s], &b);
    if (!st) args[stg[s].arg] = b->buffer;
  }
  if (!st) st = execute_n(d, exe, args, (size_t)nargs, "graph", outs, (size_t)nouts);
  if (!st && nouts > nres) {
    guard_add(d, outs[nres], &prog);
    outs[nres] = NULL;
  }
  for (int32_t s = 0, r = 0; s < ns && !st; s++) {
    if (!stg[s].result) continue;
    tpu_pjrt_buf_t* nbuf = NULL;
    st = buf_wrap(d->driver->api, outs[r], &nbuf);
    outs[r++] = NULL;
    if (!st) alloc_set(d, salloc[s], nbuf);
  }
  for (int32_t r = 0; r < nouts && outs; r++) buffer_destroy(d->driver->api, outs[r]);
done:
  tpu_pjrt_program_free(&prog);
  free(args);
  free(outs);
  free(locs);
  free(nodes);
  free(salloc);
  free(stg);
  free(gb);
  return st;
}

static tpu_status_t device_run_graph(tpu_hal_device_t* device, const tpu_hal_graph_t* graph, void* const* inputs,
                                     void* const* outputs) {
  tpu_pjrt_device_t* d = dev(device);
  pthread_mutex_lock(&d->mu);
  pending_reap(d, false);
  d->works++;
  tpu_pjrt_trace_t* tr = trace_begin(d, "tpu::graph");
  for (int32_t b = 0; tr && b < graph->num_buffers; b++) /* the bytes of its inputs and outputs */
    tr->e.bytes += graph->buffers[b].kind == TPU_HAL_GRAPH_INTERNAL ? 0 : graph->buffers[b].bytes;
  tpu_status_t st = run_graph_locked(d, graph, inputs, outputs);
  trace_end(d);
  pthread_mutex_unlock(&d->mu);
  return st ? tpu_status_annotate(st, "tpu:%d: graph", d->index) : TPU_OK;
}

/* ---- events ----
 * An event marks the device's work count at record time; it is complete
 * once every pending work issued up to then has completed. The completion
 * time is the moment this driver observed it (query or synchronize); work
 * completes in order, so an event observed after a later one completed no
 * later than that one. */
typedef struct tpu_pjrt_event_t {
  tpu_hal_event_t base;
  tpu_pjrt_device_t* device; /* NULL: never recorded */
  uint64_t seq;
  bool timing;
  bool done;
  double done_ms;
} tpu_pjrt_event_t;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void event_obj_destroy(tpu_object_t* o) { free(o); }

/* Under the device lock: true if everything issued up to ev->seq is done. */
static bool event_check(tpu_pjrt_event_t* ev, bool wait) {
  tpu_pjrt_device_t* d = ev->device;
  pending_reap(d, false);
  while (wait && d->num_pending > 0 && d->pending[0].seq <= ev->seq) {
    pending_finish(d, &d->pending[0]);
    memmove(d->pending, d->pending + 1, (d->num_pending - 1) * sizeof(*d->pending));
    d->num_pending--;
  }
  trace_flush(d);
  if (wait) guards_read(d, ev->seq);
  return d->num_pending == 0 || d->pending[0].seq > ev->seq;
}

static bool event_query(tpu_hal_event_t* event) {
  tpu_pjrt_event_t* ev = (tpu_pjrt_event_t*)event;
  if (!ev->device || ev->done) return true;
  pthread_mutex_lock(&ev->device->mu);
  if (event_check(ev, false)) {
    ev->done = true;
    ev->done_ms = now_ms();
  }
  pthread_mutex_unlock(&ev->device->mu);
  return ev->done;
}

static tpu_status_t event_synchronize(tpu_hal_event_t* event) {
  tpu_pjrt_event_t* ev = (tpu_pjrt_event_t*)event;
  if (!ev->device || ev->done) return TPU_OK;
  pthread_mutex_lock(&ev->device->mu);
  event_check(ev, true);
  ev->done = true;
  ev->done_ms = now_ms();
  pthread_mutex_unlock(&ev->device->mu);
  return TPU_OK;
}

static tpu_status_t event_elapsed(tpu_hal_event_t* start, tpu_hal_event_t* end, double* out_ms) {
  tpu_pjrt_event_t* a = (tpu_pjrt_event_t*)start;
  tpu_pjrt_event_t* b = (tpu_pjrt_event_t*)end;
  if (!a->timing || !b->timing)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "events were created without timing");
  if (!a->device || !b->device || !event_query(start) || !event_query(end))
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "both events must be recorded and complete");
  double a_ms = a->done_ms;
  if (a->device == b->device && a->seq <= b->seq && b->done_ms < a_ms) a_ms = b->done_ms;
  *out_ms = b->done_ms - a_ms;
  return TPU_OK;
}

static const tpu_hal_event_vtable_t tpu_pjrt_event_vtable = {
    .destroy = event_obj_destroy,
    .query = event_query,
    .synchronize = event_synchronize,
    .elapsed_ms = event_elapsed,
};

static tpu_pjrt_event_t* pjrt_event(tpu_hal_event_t* e) {
  return e && e->base.vtable == (const void*)&tpu_pjrt_event_vtable ? (tpu_pjrt_event_t*)e : NULL;
}

static tpu_status_t device_create_event(tpu_hal_device_t* device, bool enable_timing,
                                        tpu_hal_event_t** out_event) {
  tpu_pjrt_event_t* ev = calloc(1, sizeof(*ev));
  if (!ev) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate an event");
  tpu_object_init(&ev->base.base, &tpu_pjrt_event_vtable);
  ev->timing = enable_timing;
  *out_event = &ev->base;
  return TPU_OK;
}

static tpu_status_t device_record_event(tpu_hal_device_t* device, tpu_hal_event_t* event) {
  tpu_pjrt_device_t* d = dev(device);
  tpu_pjrt_event_t* ev = pjrt_event(event);
  if (!ev) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: record_event: not an event of the pjrt driver", d->index);
  pthread_mutex_lock(&d->mu);
  ev->device = d;
  ev->seq = d->seq;
  ev->done = false;
  if (event_check(ev, false)) {
    ev->done = true;
    ev->done_ms = now_ms();
  }
  pthread_mutex_unlock(&d->mu);
  return TPU_OK;
}

/* Later work waits for the event: PJRT orders work on buffers, not queues,
 * so this waits on the host. */
static tpu_status_t device_wait_event(tpu_hal_device_t* device, tpu_hal_event_t* event) {
  if (!pjrt_event(event))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "wait_event: not an event of the pjrt driver");
  return event_synchronize(event);
}

static const tpu_hal_device_vtable_t tpu_pjrt_device_vtable = {
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
    .supports_op = device_supports_op,
    .execute_op = device_execute_op,
    .check_graph_node = device_check_graph_node,
    .run_graph = device_run_graph,
};

/* ---- driver ---- */
static void driver_destroy(tpu_object_t* object) {
  tpu_pjrt_driver_t* drv = (tpu_pjrt_driver_t*)object;
  const PJRT_Api* api = drv->api;
  for (int32_t i = 0; i < drv->device_count; i++) {
    if (drv->devices[i]) tpu_object_release(&drv->devices[i]->base.base);
  }
  for (size_t i = 0; i < drv->num_exes; i++) {
    PJRT_LoadedExecutable_Destroy_Args a = {
        .struct_size = TPU_PJRT_SIZE(PJRT_LoadedExecutable_Destroy_Args, executable),
        .executable = drv->exes[i].exe};
    tpu_status_free(take(api, api->PJRT_LoadedExecutable_Destroy(&a), "executable"));
    free(drv->exes[i].key);
  }
  free(drv->exes);
  if (drv->client) {
    PJRT_Client_Destroy_Args a = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Destroy_Args, client),
                                  .client = drv->client};
    tpu_status_free(take(api, api->PJRT_Client_Destroy(&a), "client"));
  }
  /* The plugin stays loaded: plugins keep threads and atexit handlers that
   * must not outlive their code. */
  free(drv->devices);
  pthread_mutex_destroy(&drv->exe_mu);
  free(drv);
}

static const char* driver_name(tpu_hal_driver_t* driver) { return "pjrt"; }

static int32_t driver_device_count(tpu_hal_driver_t* driver) {
  return ((tpu_pjrt_driver_t*)driver)->device_count;
}

static tpu_hal_device_t* driver_device(tpu_hal_driver_t* driver, int32_t index) {
  tpu_pjrt_driver_t* drv = (tpu_pjrt_driver_t*)driver;
  if (index < 0 || index >= drv->device_count) return NULL;
  return &drv->devices[index]->base;
}

static const tpu_hal_driver_vtable_t tpu_pjrt_driver_vtable = {
    .destroy = driver_destroy,
    .name = driver_name,
    .device_count = driver_device_count,
    .device = driver_device,
};

/* Parses "name=value,..." into PJRT named values; strings point into `buf`. */
static tpu_status_t parse_options(char* buf, PJRT_NamedValue* out, size_t* out_count) {
  size_t n = 0;
  for (char* save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ') item++;
    if (!*item) continue;
    char* eq = strchr(item, '=');
    if (!eq || eq == item)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                       "TORCH_TPU_PJRT_OPTIONS: '%s' is not name=value", item);
    if (n == TPU_PJRT_MAX_OPTIONS)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "TORCH_TPU_PJRT_OPTIONS: more than %d options",
                       TPU_PJRT_MAX_OPTIONS);
    *eq = '\0';
    const char* v = eq + 1;
    PJRT_NamedValue* nv = &out[n++];
    *nv = (PJRT_NamedValue){.struct_size = TPU_PJRT_SIZE(PJRT_NamedValue, value_size),
                            .name = item, .name_size = strlen(item), .value_size = 1};
    char* end = NULL;
    long long iv = strtoll(v, &end, 10);
    if (*v && end && *end == '\0') {
      nv->type = PJRT_NamedValue_kInt64;
      nv->int64_value = iv;
    } else if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
      nv->type = PJRT_NamedValue_kBool;
      nv->bool_value = v[0] == 't';
    } else {
      nv->type = PJRT_NamedValue_kString;
      nv->string_value = v;
      nv->value_size = strlen(v);
    }
  }
  *out_count = n;
  return TPU_OK;
}

/* Loads the plugin and checks its API table. */
static tpu_status_t load_plugin(const char* path, void** out_lib, const PJRT_Api** out_api) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE, "cannot load the PJRT plugin '%s': %s", path, dlerror());
  tpu_pjrt_get_api_fn_t get = NULL;
  *(void**)&get = dlsym(lib, "GetPjrtApi");
  if (!get)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE, "'%s' is not a PJRT plugin: it has no GetPjrtApi", path);
  const PJRT_Api* api = get();
  if (!api) return TPU_ERROR(TPU_STATUS_UNAVAILABLE, "PJRT plugin '%s': GetPjrtApi returned NULL", path);
  int major = api->pjrt_api_version.major_version, minor = api->pjrt_api_version.minor_version;
  if (major != TPU_PJRT_ABI_MAJOR || minor < TPU_PJRT_ABI_MINOR)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE,
                     "PJRT plugin '%s' has API version %d.%d; this driver needs %d.x with x >= %d",
                     path, major, minor, TPU_PJRT_ABI_MAJOR, TPU_PJRT_ABI_MINOR);
  if (api->struct_size < TPU_PJRT_API_USED_SIZE)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE,
                     "PJRT plugin '%s' (API %d.%d): its function table has %zu bytes, fewer than "
                     "the %zu this driver (API %d.%d) reads",
                     path, major, minor, api->struct_size, (size_t)TPU_PJRT_API_USED_SIZE,
                     TPU_PJRT_ABI_MAJOR, TPU_PJRT_ABI_MINOR);
  const void* used[] = {
      (void*)api->PJRT_Error_Destroy, (void*)api->PJRT_Error_Message, (void*)api->PJRT_Error_GetCode,
      (void*)api->PJRT_Plugin_Initialize, (void*)api->PJRT_Event_Destroy,
      (void*)api->PJRT_Event_IsReady, (void*)api->PJRT_Event_Await, (void*)api->PJRT_Client_Create,
      (void*)api->PJRT_Client_Destroy, (void*)api->PJRT_Client_PlatformName,
      (void*)api->PJRT_Client_PlatformVersion, (void*)api->PJRT_Client_AddressableDevices,
      (void*)api->PJRT_Client_Compile, (void*)api->PJRT_Client_BufferFromHostBuffer,
      (void*)api->PJRT_DeviceDescription_Kind, (void*)api->PJRT_Device_GetDescription,
      (void*)api->PJRT_LoadedExecutable_Destroy, (void*)api->PJRT_LoadedExecutable_Execute,
      (void*)api->PJRT_Buffer_Destroy, (void*)api->PJRT_Buffer_CopyToDevice,
      (void*)api->PJRT_Buffer_ToHostBuffer};
  for (size_t i = 0; i < sizeof(used) / sizeof(used[0]); i++) {
    if (!used[i])
      return TPU_ERROR(TPU_STATUS_UNAVAILABLE,
                       "PJRT plugin '%s' (API %d.%d) lacks entry point %zu used by this driver",
                       path, major, minor, i);
  }
  *out_lib = lib;
  *out_api = api;
  return TPU_OK;
}

static void copy_text(char* dst, size_t cap, const char* src, size_t n) {
  if (n >= cap) n = cap - 1;
  memcpy(dst, src ? src : "", src ? n : 0);
  dst[src ? n : 0] = '\0';
}

tpu_status_t tpu_pjrt_driver_create(const tpu_pjrt_driver_options_t* options,
                                    tpu_hal_driver_t** out_driver) {
  if (!out_driver) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_driver is NULL");
  *out_driver = NULL;
  if (!options || options->struct_size < TPU_PJRT_SIZE(tpu_pjrt_driver_options_t, memory_per_device))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "pjrt driver options are NULL or too small");
  if (!options->plugin_path || !*options->plugin_path)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE, "no PJRT plugin given");
  const char* path = options->plugin_path;
  void* lib = NULL;
  const PJRT_Api* api = NULL;
  /* libtpu on a machine without a TPU would retry the cloud metadata server
   * for minutes before failing; without a TPU on the PCI bus it is told not
   * to ask (a value the user set wins). */
  if (!tpu_drivers_tpu_present()) setenv("TPU_SKIP_MDS_QUERY", "1", 0);
  TPU_RETURN_IF_ERROR(load_plugin(path, &lib, &api));

  tpu_pjrt_driver_t* drv = calloc(1, sizeof(*drv));
  if (!drv) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate the pjrt driver");
  tpu_object_init(&drv->base.base, &tpu_pjrt_driver_vtable);
  pthread_mutex_init(&drv->exe_mu, NULL);
  drv->library = lib;
  drv->api = api;
  if (options->struct_size >= TPU_PJRT_SIZE(tpu_pjrt_driver_options_t, cache_dir) && options->cache_dir)
    snprintf(drv->cache_dir, sizeof(drv->cache_dir), "%s", options->cache_dir);
  {
    struct stat sb;
    bool known = stat(path, &sb) == 0;
    snprintf(drv->plugin_ident, sizeof(drv->plugin_ident), "%s|%lld|%lld|%d.%d", path,
             known ? (long long)sb.st_size : -1LL, known ? (long long)sb.st_mtime : -1LL,
             api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version);
  }
  tpu_status_t st = TPU_OK;
  char* optbuf = strdup(options->create_options ? options->create_options : "");
  PJRT_NamedValue named[TPU_PJRT_MAX_OPTIONS];
  size_t num_named = 0;
  if (!optbuf) st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot copy the PJRT options");
  if (!st) st = parse_options(optbuf, named, &num_named);
  if (!st) {
    PJRT_Plugin_Initialize_Args ia = {.struct_size = TPU_PJRT_SIZE(PJRT_Plugin_Initialize_Args, extension_start)};
    st = take(api, api->PJRT_Plugin_Initialize(&ia), "PJRT plugin initialisation");
  }
  if (!st) {
    PJRT_Client_Create_Args ca = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg),
                                  .create_options = named,
                                  .num_options = num_named};
    st = take(api, api->PJRT_Client_Create(&ca), "PJRT client creation");
    drv->client = ca.client;
    /* libtpu without a TPU chip: say so, and what to do instead */
    if (st && (strstr(tpu_status_message(st), "No jellyfish device found") ||
               strstr(tpu_status_message(st), "TPU initialization failed"))) {
      tpu_status_t why = st;
      st = TPU_ERROR(TPU_STATUS_UNAVAILABLE,
                     "no TPU found on this machine (%s); without a TPU use TORCH_TPU_DRIVER=host, or name "
                     "another PJRT plugin in TORCH_TPU_PJRT_PLUGIN",
                     tpu_status_message(why));
      tpu_status_free(why);
    }
  }
  free(optbuf);
  if (st) goto fail;
  PJRT_Client_Text_Args ta = {.struct_size = TPU_PJRT_SIZE(PJRT_Client_Text_Args, text_size),
                              .client = drv->client};
  if (!(st = take(api, api->PJRT_Client_PlatformName(&ta), "platform name")))
    copy_text(drv->platform, sizeof(drv->platform), ta.text, ta.text_size);
  if (!st && !(st = take(api, api->PJRT_Client_PlatformVersion(&ta), "platform version")))
    copy_text(drv->platform_version, sizeof(drv->platform_version), ta.text, ta.text_size);
  PJRT_Client_AddressableDevices_Args da = {
      .struct_size = TPU_PJRT_SIZE(PJRT_Client_AddressableDevices_Args, num_addressable_devices),
      .client = drv->client};
  if (!st) st = take(api, api->PJRT_Client_AddressableDevices(&da), "device list");
  if (st) goto fail;
  if (da.num_addressable_devices == 0 || da.num_addressable_devices > TPU_PJRT_MAX_DEVICES) {
    st = TPU_ERROR(TPU_STATUS_UNAVAILABLE, "PJRT plugin '%s' (%s) has %zu addressable devices",
                   path, drv->platform, da.num_addressable_devices);
    goto fail;
  }
  drv->devices = calloc(da.num_addressable_devices, sizeof(*drv->devices));
  if (!drv->devices) {
    st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate the device list");
    goto fail;
  }
  uint64_t per_chip = tpu_host_physical_memory() / da.num_addressable_devices;
  for (size_t i = 0; i < da.num_addressable_devices; i++) {
    tpu_pjrt_device_t* d = calloc(1, sizeof(*d));
    if (!d) {
      st = TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate device %zu", i);
      goto fail;
    }
    tpu_object_init(&d->base.base, &tpu_pjrt_device_vtable);
    pthread_mutex_init(&d->mu, NULL);
    d->driver = drv;
    d->index = (int32_t)i;
    d->device = da.addressable_devices[i];
    drv->devices[i] = d;
    drv->device_count = (int32_t)i + 1;
    PJRT_Device_GetDescription_Args ga = {
        .struct_size = TPU_PJRT_SIZE(PJRT_Device_GetDescription_Args, device_description),
        .device = d->device};
    PJRT_DeviceDescription_Text_Args ka = {
        .struct_size = TPU_PJRT_SIZE(PJRT_DeviceDescription_Text_Args, text_size)};
    if (!(st = take(api, api->PJRT_Device_GetDescription(&ga), "device description"))) {
      ka.device_description = ga.device_description;
      st = take(api, api->PJRT_DeviceDescription_Kind(&ka), "device kind");
    }
    if (st) goto fail;
    copy_text(d->kind, sizeof(d->kind), ka.text, ka.text_size);
    uint64_t budget = options->memory_per_device;
    if (budget == 0 && api->PJRT_Device_MemoryStats) {
      PJRT_Device_MemoryStats_Args ma = {
          .struct_size = TPU_PJRT_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set),
          .device = d->device};
      tpu_status_t ms = take(api, api->PJRT_Device_MemoryStats(&ma), "memory stats");
      if (!ms && ma.bytes_limit_is_set && ma.bytes_limit > 0) budget = (uint64_t)ma.bytes_limit;
      tpu_status_free(ms); /* plugins without statistics: use the default */
    }
    d->stats.budget_bytes = budget ? budget : per_chip;
  }
  *out_driver = &drv->base;
  return TPU_OK;
fail:
  tpu_object_release(&drv->base.base);
  return tpu_status_annotate(st, "PJRT plugin '%s'", path);
}
