/* In-order asynchronous queue: one worker thread per virtual chip. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_internal.h"
#include "tpu/trace.h"

static void record_error(tpu_host_queue_t* q, tpu_status_t st, const char* name) {
  if (q->error) {
    tpu_status_free(st);
    return;
  }
  /* Kernels often prefix their own op name already; don't repeat it. */
  size_t n = strlen(name);
  const char* msg = tpu_status_message(st);
  if (n && !(strncmp(msg, name, n) == 0 && msg[n] == ':')) st = tpu_status_annotate(st, "%s", name);
  q->error = st;
}

/* ---- List works run piece-major ----------------------------------------------
 * Consecutive list works (torch._foreach_* ops) with the same number of
 * pieces run as one group: each piece of every work in turn, pieces in
 * parallel, so an optimizer step's parameter, gradient and state chunks stay
 * in cache across its list ops instead of streaming every list from memory
 * once per op. Safe when no piece writes memory another piece touches: the
 * works' footprints are checked first, and works whose pieces meet run in
 * order as usual. */

typedef struct {
  uintptr_t begin, end;
  int64_t part;
  bool write;
} range_t;

typedef struct {
  range_t* items;
  size_t n, cap;
  int64_t part; /* piece being visited */
  bool failed;  /* out of memory: treat as meeting */
} range_list_t;

static void collect_range(void* vctx, uintptr_t begin, uintptr_t end, bool write) {
  range_list_t* l = vctx;
  if (end <= begin || l->failed) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 1024;
    range_t* items = realloc(l->items, cap * sizeof(*items));
    if (!items) {
      l->failed = true;
      return;
    }
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = (range_t){begin, end, l->part, write};
}

static int range_cmp(const void* a, const void* b) {
  uintptr_t x = ((const range_t*)a)->begin, y = ((const range_t*)b)->begin;
  return x < y ? -1 : x > y;
}

/* The highest range end seen per piece, kept for the two pieces with the
 * highest ends: enough to answer "does a range of a piece other than p end
 * past x" during a sweep by begin. */
typedef struct {
  uintptr_t end[2];
  int64_t part[2];
} top2_t;

static void top2_add(top2_t* t, uintptr_t end, int64_t part) {
  if (part == t->part[0]) {
    if (end > t->end[0]) t->end[0] = end;
  } else if (end > t->end[0]) {
    t->end[1] = t->end[0];
    t->part[1] = t->part[0];
    t->end[0] = end;
    t->part[0] = part;
  } else if (part == t->part[1]) {
    if (end > t->end[1]) t->end[1] = end;
  } else if (end > t->end[1]) {
    t->end[1] = end;
    t->part[1] = part;
  }
}

static uintptr_t top2_other(const top2_t* t, int64_t part) {
  return t->part[0] != part ? t->end[0] : t->end[1];
}

/* True when, over nodes[0..n), a range some piece writes overlaps a range of
 * another piece (or the footprints could not be gathered). */
static bool pieces_meet(tpu_host_work_node_t** nodes, int n, range_list_t* l) {
  l->n = 0;
  l->failed = false;
  for (int i = 0; i < n; i++) {
    for (int64_t p = 0; p < nodes[i]->parts; p++) {
      l->part = p;
      nodes[i]->footprint(nodes[i]->ctx, p, collect_range, l);
    }
  }
  if (l->failed) return true;
  qsort(l->items, l->n, sizeof(range_t), range_cmp);
  top2_t all = {{0, 0}, {-1, -1}}, written = {{0, 0}, {-1, -1}};
  for (size_t k = 0; k < l->n; k++) {
    const range_t* r = &l->items[k];
    if (top2_other(&written, r->part) > r->begin) return true;
    if (r->write && top2_other(&all, r->part) > r->begin) return true;
    top2_add(&all, r->end, r->part);
    if (r->write) top2_add(&written, r->end, r->part);
  }
  return false;
}

typedef struct {
  tpu_host_work_node_t** nodes;
  int n;
  tpu_status_t status[TPU_HOST_LIST_GROUP_MAX]; /* first error per work */
} group_t;

static void group_body(void* ctx, int64_t begin, int64_t end) {
  group_t* g = ctx;
  for (int64_t p = begin; p < end; p++) {
    for (int i = 0; i < g->n; i++) {
      tpu_status_t st = g->nodes[i]->run_part(g->nodes[i]->ctx, p);
      if (st == TPU_OK) continue;
      tpu_status_t none = TPU_OK;
      if (!__atomic_compare_exchange_n(&g->status[i], &none, st, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE))
        tpu_status_free(st);
    }
  }
}

/* One trace event for a work that ran from start_ns to now (tpu/trace.h). */
static void trace_node(const tpu_host_queue_t* q, const tpu_host_work_node_t* node, int64_t start_ns) {
  if (!node->traced) return;
  tpu_trace_event_t e = {.kind = TPU_TRACE_WORK, .device = q->device_index, .cpu_tid = node->cpu_tid,
                         .queued_ns = node->queued_ns, .start_ns = start_ns,
                         .end_ns = (int64_t)tpu_now_ns(), .bytes = node->bytes};
  size_t n = strnlen(node->name, sizeof(e.name) - 1);
  memcpy(e.name, node->name, n);
  e.name[n] = '\0';
  tpu_trace_record(&e);
}

static void finish_node(tpu_host_queue_t* q, tpu_host_work_node_t* node, tpu_status_t st) {
  if (node->cleanup) node->cleanup(node->ctx);
  if (st == TPU_OK) return;
  pthread_mutex_lock(&q->mu);
  record_error(q, st, node->name);
  pthread_mutex_unlock(&q->mu);
}

/* Runs nodes[0..n) (list works with equal piece counts) in order of effect:
 * the longest prefix whose pieces do not meet as one group, and so on; a
 * work whose own pieces meet runs alone through run(). */
static void run_list_works(tpu_host_queue_t* q, tpu_host_work_node_t** nodes, int n) {
  range_list_t ranges = {0};
  while (n > 0) {
    int good = 0; /* largest prefix known not to meet */
    if (!pieces_meet(nodes, n, &ranges)) {
      good = n;
    } else {
      int lo = 0, hi = n; /* prefix lo is fine, prefix hi meets */
      while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (pieces_meet(nodes, mid, &ranges)) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
      good = lo;
    }
    if (good == 0) {
      int64_t t0 = nodes[0]->traced ? (int64_t)tpu_now_ns() : 0;
      tpu_status_t st = nodes[0]->run(nodes[0]->ctx);
      trace_node(q, nodes[0], t0);
      finish_node(q, nodes[0], st);
      pthread_mutex_lock(&q->mu);
      q->stats.list_conflicts++;
      pthread_mutex_unlock(&q->mu);
      nodes++;
      n--;
      continue;
    }
    group_t g = {.nodes = nodes, .n = good};
    int64_t t0 = (int64_t)tpu_now_ns();
    tpu_parallel_for(q->pool, nodes[0]->parts, 1, group_body, &g);
    /* Run piece-major, the works of a group share one span on the device. */
    for (int i = 0; i < good; i++) trace_node(q, nodes[i], t0);
    for (int i = 0; i < good; i++) finish_node(q, nodes[i], g.status[i]);
    pthread_mutex_lock(&q->mu);
    q->stats.list_groups++;
    q->stats.list_works += (uint64_t)good;
    pthread_mutex_unlock(&q->mu);
    nodes += good;
    n -= good;
  }
  free(ranges.items);
}

static tpu_host_work_node_t* pop_head(tpu_host_queue_t* q) {
  tpu_host_work_node_t* node = q->head;
  q->head = node->next;
  if (!q->head) q->tail = NULL;
  return node;
}

/* With mu held and the queue empty behind a list work: waits for more work
 * (see TPU_HOST_LIST_HOLD_NS). True if work arrived. */
static bool hold_for_more(tpu_host_queue_t* q) {
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_nsec += TPU_HOST_LIST_HOLD_NS;
  deadline.tv_sec += deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  while (!q->head && !q->stop && q->hurry == 0 && !q->flush) {
    if (pthread_cond_timedwait(&q->work_cv, &q->mu, &deadline) != 0) break;
  }
  q->flush = false;
  return q->head != NULL;
}

static void* worker_main(void* arg) {
  tpu_host_queue_t* q = arg;
  tpu_host_work_node_t* batch[TPU_HOST_LIST_GROUP_MAX];
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (!q->head && !q->stop) {
      /* Eager ops arrive microseconds apart: spin a little before sleeping. */
      uint64_t seen = q->submitted;
      pthread_mutex_unlock(&q->mu);
      tpu_spin_until_at_least(&q->submitted, seen + 1, tpu_spin_budget_ns());
      pthread_mutex_lock(&q->mu);
    }
    while (!q->head && !q->stop) pthread_cond_wait(&q->work_cv, &q->mu);
    if (!q->head) break; /* stop requested and drained */
    /* Take the head, and with a list work every list work queued right
     * behind it with the same number of pieces. */
    int n = 0;
    batch[n++] = pop_head(q);
    while (q->group_lists && batch[0]->parts > 0 && n < TPU_HOST_LIST_GROUP_MAX) {
      if (q->head && q->head->parts == batch[0]->parts) {
        batch[n++] = pop_head(q);
      } else if (q->head || !hold_for_more(q)) {
        break;
      }
    }
    pthread_mutex_unlock(&q->mu);

    if (q->group_lists && batch[0]->parts > 0) {
      run_list_works(q, batch, n);
    } else {
      int64_t t0 = batch[0]->traced ? (int64_t)tpu_now_ns() : 0;
      tpu_status_t st = batch[0]->run(batch[0]->ctx);
      trace_node(q, batch[0], t0);
      finish_node(q, batch[0], st);
    }

    pthread_mutex_lock(&q->mu);
    __atomic_store_n(&q->completed, q->completed + (uint64_t)n, __ATOMIC_RELEASE);
    q->stats.works += (uint64_t)n;
    if (q->waiters > 0) pthread_cond_broadcast(&q->done_cv);
    for (int i = 0; i < n; i++) free(batch[i]);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

tpu_status_t tpu_host_queue_init(tpu_host_queue_t* q, int32_t device_index,
                                 tpu_threadpool_t* pool, bool group_lists) {
  memset(q, 0, sizeof(*q));
  q->device_index = device_index;
  q->pool = pool;
  q->group_lists = group_lists;
  pthread_mutex_init(&q->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* hold_for_more's deadline */
  pthread_cond_init(&q->work_cv, &attr);
  pthread_condattr_destroy(&attr);
  pthread_cond_init(&q->done_cv, NULL);
  int rc = pthread_create(&q->thread, NULL, worker_main, q);
  if (rc != 0) {
    pthread_cond_destroy(&q->done_cv);
    pthread_cond_destroy(&q->work_cv);
    pthread_mutex_destroy(&q->mu);
    return TPU_ERROR(TPU_STATUS_INTERNAL, "tpu:%d: cannot start the queue thread (error %d)",
                     device_index, rc);
  }
  q->started = true;
  char name[32];
  snprintf(name, sizeof(name), "tpu:%d queue", device_index);
  name[15] = '\0'; /* the kernel's limit */
  pthread_setname_np(q->thread, name);
  return TPU_OK;
}

void tpu_host_queue_deinit(tpu_host_queue_t* q) {
  if (!q->started) return;
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL); /* the worker drains the FIFO before leaving */
  q->started = false;
  tpu_status_free(q->error);
  q->error = TPU_OK;
  pthread_cond_destroy(&q->done_cv);
  pthread_cond_destroy(&q->work_cv);
  pthread_mutex_destroy(&q->mu);
}

tpu_host_work_node_t* tpu_host_work_node_new(const tpu_hal_work_t* work) {
  tpu_host_work_node_t* node = malloc(sizeof(*node));
  if (!node) return NULL;
  node->next = NULL;
  node->run = work->run;
  node->cleanup = work->cleanup;
  node->ctx = work->ctx;
  bool list = work->parts > 0 && work->run_part && work->footprint;
  node->parts = list ? work->parts : 0;
  node->run_part = list ? work->run_part : NULL;
  node->footprint = list ? work->footprint : NULL;
  const char* name = work->name ? work->name : "";
  size_t n = strnlen(name, TPU_HOST_WORK_NAME_MAX - 1);
  memcpy(node->name, name, n);
  node->name[n] = '\0';
  node->traced = tpu_trace_enabled();
  node->cpu_tid = node->traced ? tpu_trace_thread_id() : 0;
  node->queued_ns = node->traced ? (int64_t)tpu_now_ns() : 0;
  node->bytes = node->traced ? work->bytes : 0;
  return node;
}

uint64_t tpu_host_queue_push(tpu_host_queue_t* q, tpu_host_work_node_t* node) {
  pthread_mutex_lock(&q->mu);
  if (q->tail) {
    q->tail->next = node;
  } else {
    q->head = node;
  }
  q->tail = node;
  uint64_t ticket = q->submitted + 1;
  __atomic_store_n(&q->submitted, ticket, __ATOMIC_RELEASE);
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  return ticket;
}

tpu_status_t tpu_host_queue_submit(tpu_host_queue_t* q, const tpu_hal_work_t* work,
                                   uint64_t* out_ticket) {
  if (!work) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: submit: work is NULL",
                              q->device_index);
  if (!work->run) {
    if (work->cleanup) work->cleanup(work->ctx);
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: submit of '%s': run is NULL",
                     q->device_index, work->name ? work->name : "");
  }
  tpu_host_work_node_t* node = tpu_host_work_node_new(work);
  if (!node) {
    if (work->cleanup) work->cleanup(work->ctx);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "tpu:%d: cannot allocate a queue entry for '%s'",
                     q->device_index, work->name ? work->name : "");
  }
  uint64_t ticket = tpu_host_queue_push(q, node);
  if (out_ticket) *out_ticket = ticket;
  return TPU_OK;
}

bool tpu_host_queue_on_worker(const tpu_host_queue_t* q) {
  return q->started && pthread_equal(pthread_self(), q->thread);
}

void tpu_host_queue_wait_ticket(tpu_host_queue_t* q, uint64_t ticket) {
  if (tpu_host_queue_on_worker(q)) return;
  if (__atomic_load_n(&q->completed, __ATOMIC_ACQUIRE) >= ticket) return;
  pthread_mutex_lock(&q->mu);
  q->hurry++; /* a held list work must not wait for company now */
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  if (!tpu_spin_until_at_least(&q->completed, ticket, tpu_spin_budget_ns())) {
    pthread_mutex_lock(&q->mu);
    q->waiters++;
    while (q->completed < ticket) pthread_cond_wait(&q->done_cv, &q->mu);
    q->waiters--;
    pthread_mutex_unlock(&q->mu);
  }
  pthread_mutex_lock(&q->mu);
  q->hurry--;
  pthread_mutex_unlock(&q->mu);
}

uint64_t tpu_host_queue_submitted(tpu_host_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  uint64_t n = q->submitted;
  pthread_mutex_unlock(&q->mu);
  return n;
}

uint64_t tpu_host_queue_completed(const tpu_host_queue_t* q) {
  return __atomic_load_n(&q->completed, __ATOMIC_ACQUIRE);
}

void tpu_host_queue_wait_idle(tpu_host_queue_t* q) {
  tpu_host_queue_wait_ticket(q, tpu_host_queue_submitted(q));
}

bool tpu_host_queue_is_idle(tpu_host_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  bool idle = q->completed == q->submitted;
  if (!idle) {
    q->flush = true; /* whoever polls should not wait out a held list work */
    pthread_cond_signal(&q->work_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return idle;
}

tpu_status_t tpu_host_queue_take_error(tpu_host_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  tpu_status_t st = q->error;
  q->error = TPU_OK;
  pthread_mutex_unlock(&q->mu);
  return st;
}

void tpu_host_queue_stats(tpu_host_queue_t* q, tpu_hal_queue_stats_t* out) {
  pthread_mutex_lock(&q->mu);
  *out = q->stats;
  pthread_mutex_unlock(&q->mu);
}
