/* In-order asynchronous queue: one worker thread per virtual chip. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_internal.h"

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

static void* worker_main(void* arg) {
  tpu_host_queue_t* q = arg;
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
    tpu_host_work_node_t* node = q->head;
    if (!node) break; /* stop requested and drained */
    q->head = node->next;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->mu);

    tpu_status_t st = node->run(node->ctx);
    if (node->cleanup) node->cleanup(node->ctx);

    pthread_mutex_lock(&q->mu);
    if (st != TPU_OK) record_error(q, st, node->name);
    __atomic_store_n(&q->completed, q->completed + 1, __ATOMIC_RELEASE);
    if (q->waiters > 0) pthread_cond_broadcast(&q->done_cv);
    free(node);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

tpu_status_t tpu_host_queue_init(tpu_host_queue_t* q, int32_t device_index) {
  memset(q, 0, sizeof(*q));
  q->device_index = device_index;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->work_cv, NULL);
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
  const char* name = work->name ? work->name : "";
  size_t n = strnlen(name, TPU_HOST_WORK_NAME_MAX - 1);
  memcpy(node->name, name, n);
  node->name[n] = '\0';
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
  if (tpu_spin_until_at_least(&q->completed, ticket, tpu_spin_budget_ns())) return;
  pthread_mutex_lock(&q->mu);
  q->waiters++;
  while (q->completed < ticket) pthread_cond_wait(&q->done_cv, &q->mu);
  q->waiters--;
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
