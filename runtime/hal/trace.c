/* Device-queue trace recorder (tpu/trace.h). */
#define _GNU_SOURCE
#include "tpu/trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TPU_TRACE_DEFAULT_CAPACITY ((size_t)1 << 20)
#define TPU_TRACE_FIRST_CHUNK ((size_t)4096)

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_on; /* written under g_mu, read atomically */
static tpu_trace_event_t* g_events;
static size_t g_n, g_cap, g_limit;
static uint64_t g_seq, g_dropped;

tpu_status_t tpu_trace_start(size_t capacity) {
  if (capacity == 0) capacity = TPU_TRACE_DEFAULT_CAPACITY;
  if (capacity > SIZE_MAX / sizeof(tpu_trace_event_t))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "trace: capacity %zu is too large", capacity);
  /* Grown on demand up to `capacity`: a short profile costs little memory. */
  size_t first = capacity < TPU_TRACE_FIRST_CHUNK ? capacity : TPU_TRACE_FIRST_CHUNK;
  tpu_trace_event_t* events = malloc(first * sizeof(*events));
  if (!events) return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "trace: cannot allocate %zu events", first);
  pthread_mutex_lock(&g_mu);
  if (g_on) {
    pthread_mutex_unlock(&g_mu);
    free(events);
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "trace: the device-queue trace is already recording (one profiler at a time)");
  }
  free(g_events);
  g_events = events;
  g_n = 0;
  g_cap = first;
  g_limit = capacity;
  g_seq = g_dropped = 0;
  __atomic_store_n(&g_on, true, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_mu);
  return TPU_OK;
}

void tpu_trace_stop(void) {
  pthread_mutex_lock(&g_mu);
  __atomic_store_n(&g_on, false, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_mu);
}

bool tpu_trace_enabled(void) { return __atomic_load_n(&g_on, __ATOMIC_RELAXED); }

void tpu_trace_record(const tpu_trace_event_t* e) {
  if (!e || !tpu_trace_enabled()) return;
  pthread_mutex_lock(&g_mu);
  if (!g_on) {
    pthread_mutex_unlock(&g_mu);
    return;
  }
  if (g_n == g_cap && g_cap < g_limit) {
    size_t cap = g_cap * 2 < g_limit ? g_cap * 2 : g_limit;
    tpu_trace_event_t* grown = realloc(g_events, cap * sizeof(*grown));
    if (grown) {
      g_events = grown;
      g_cap = cap;
    }
  }
  if (g_n == g_cap) {
    g_dropped++;
  } else {
    tpu_trace_event_t* d = &g_events[g_n++];
    *d = *e;
    d->name[TPU_TRACE_NAME_MAX - 1] = '\0';
    d->seq = ++g_seq;
  }
  pthread_mutex_unlock(&g_mu);
}

size_t tpu_trace_take(tpu_trace_event_t** out_events, uint64_t* out_dropped) {
  pthread_mutex_lock(&g_mu);
  size_t n = g_n;
  tpu_trace_event_t* events = n ? g_events : NULL;
  if (out_dropped) *out_dropped = g_dropped;
  if (!n) free(g_events);
  g_events = NULL;
  g_n = g_cap = 0;
  if (g_on) { /* still recording: continue into a fresh buffer */
    g_events = malloc(TPU_TRACE_FIRST_CHUNK * sizeof(*g_events));
    g_cap = g_events ? (g_limit < TPU_TRACE_FIRST_CHUNK ? g_limit : TPU_TRACE_FIRST_CHUNK) : 0;
  }
  pthread_mutex_unlock(&g_mu);
  if (out_events) {
    *out_events = events;
  } else {
    free(events);
  }
  return n;
}

uint64_t tpu_trace_thread_id(void) {
#ifdef SYS_gettid
  static _Thread_local uint64_t tid; /* one system call per thread */
  if (!tid) tid = (uint64_t)syscall(SYS_gettid);
  return tid;
#else
  return 0;
#endif
}
