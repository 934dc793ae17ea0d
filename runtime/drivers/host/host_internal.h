/* Private to the host driver: the pieces a virtual chip is made of.
 *
 * A device = an allocator (budget + block cache) + a queue (one worker
 * thread running tpu_hal_work_t in FIFO order). The allocator consults the
 * queue's completion counter so that it only returns a cached block to the
 * system once every work queued before the block was freed has finished.
 * Nothing here is visible outside runtime/drivers/host. */
#ifndef TPU_DRIVERS_HOST_INTERNAL_H_
#define TPU_DRIVERS_HOST_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/hal.h"

#define TPU_HOST_WORK_NAME_MAX 128 /* including the NUL */
#define TPU_HOST_SMALL_MAX (1u << 20)    /* requests up to this round to 512 B */
#define TPU_HOST_SMALL_ROUND 512u
#define TPU_HOST_LARGE_ROUND (2u << 20)  /* larger ones round to 2 MiB */
#define TPU_HOST_SMALL_ALIGN 64u
#define TPU_HOST_LARGE_ALIGN (2u << 20) /* huge-page aligned (see new_block) */
/* h2d copies up to this size are staged and returned at once; larger ones
 * are queued reading the caller's buffer and waited for. */
#define TPU_HOST_STAGING_MAX ((size_t)8 << 20)

/* ---- Queue -------------------------------------------------------------- */
typedef struct tpu_host_work_node_t {
  struct tpu_host_work_node_t* next;
  tpu_hal_work_fn_t run;
  void (*cleanup)(void* ctx);
  void* ctx;
  int64_t parts; /* list works: see tpu_hal_work_t */
  tpu_status_t (*run_part)(void* ctx, int64_t part);
  void (*footprint)(void* ctx, int64_t part, tpu_hal_range_fn_t visit, void* vctx);
  char name[TPU_HOST_WORK_NAME_MAX];
  /* Device-queue trace (tpu/trace.h): set at submit while it records. */
  bool traced;
  uint64_t cpu_tid;
  int64_t queued_ns, bytes;
} tpu_host_work_node_t;

/* At most this many consecutive list works run as one group. */
#define TPU_HOST_LIST_GROUP_MAX 32
/* A list work with nothing queued behind it waits this long for the next
 * list op of its sequence (the host submits an optimizer step's list ops
 * 20-200 us apart), unless someone waits for the queue. The device is ahead
 * of the host then, so holding costs no throughput. */
#define TPU_HOST_LIST_HOLD_NS 500000

typedef struct tpu_host_queue_t {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* worker waits for work */
  pthread_cond_t done_cv; /* waiters for completion */
  tpu_host_work_node_t* head;
  tpu_host_work_node_t* tail;
  uint64_t submitted; /* tickets handed out (under mu) */
  uint64_t completed; /* works finished; written under mu, read atomically */
  int waiters;
  int hurry;   /* threads waiting for the queue: a held list work runs now */
  bool flush;  /* one-shot hurry (is_idle asked) */
  bool stop;
  bool started;
  tpu_status_t error; /* first error since the last take, annotated */
  pthread_t thread;
  int32_t device_index;
  tpu_threadpool_t* pool; /* borrowed, may be NULL: runs grouped pieces */
  bool group_lists;       /* run consecutive list works piece-major */
  tpu_hal_queue_stats_t stats; /* under mu */
} tpu_host_queue_t;

/* Starts the worker thread. On failure nothing needs deinit. */
tpu_status_t tpu_host_queue_init(tpu_host_queue_t* q, int32_t device_index,
                                 tpu_threadpool_t* pool, bool group_lists);
void tpu_host_queue_stats(tpu_host_queue_t* q, tpu_hal_queue_stats_t* out);
/* Drains, stops and joins the worker, drops any pending error. */
void tpu_host_queue_deinit(tpu_host_queue_t* q);
/* Allocates a node for `work` (name copied); NULL if out of memory. */
tpu_host_work_node_t* tpu_host_work_node_new(const tpu_hal_work_t* work);
/* Appends a node (never fails); returns its ticket (1-based sequence). */
uint64_t tpu_host_queue_push(tpu_host_queue_t* q, tpu_host_work_node_t* node);
/* Validates and queues `work`; its cleanup runs even when this fails. */
tpu_status_t tpu_host_queue_submit(tpu_host_queue_t* q, const tpu_hal_work_t* work,
                                   uint64_t* out_ticket);
/* Blocks until work `ticket` has finished. No-op on the worker thread. */
void tpu_host_queue_wait_ticket(tpu_host_queue_t* q, uint64_t ticket);
/* Blocks until everything submitted so far has finished (see above). */
void tpu_host_queue_wait_idle(tpu_host_queue_t* q);
/* Returns and clears the pending error (TPU_OK if none). */
tpu_status_t tpu_host_queue_take_error(tpu_host_queue_t* q);
bool tpu_host_queue_is_idle(tpu_host_queue_t* q);
bool tpu_host_queue_on_worker(const tpu_host_queue_t* q);
uint64_t tpu_host_queue_submitted(tpu_host_queue_t* q);
uint64_t tpu_host_queue_completed(const tpu_host_queue_t* q);

/* ---- Allocator ------------------------------------------------------------ */
typedef struct tpu_host_pool_t tpu_host_pool_t;

typedef struct tpu_host_block_t {
  char* ptr;
  size_t size;        /* rounded; counted in the budget */
  size_t requested;   /* size asked by the user (live blocks) */
  uint64_t free_ticket; /* queue submitted-count when it was freed */
  bool live;
  bool held;          /* freed, but kept for `pool` (neither live nor cached) */
  tpu_host_pool_t* pool; /* allocated while that capture was recording (or NULL) */
} tpu_host_block_t;

/* The memory of one capture (see capture_begin in tpu/hal.h): blocks freed
 * while it records, and blocks allocated while it records whenever they are
 * freed, are held here instead of cached until the pool is released. */
struct tpu_host_pool_t {
  tpu_host_block_t** held;
  size_t num_held, cap_held;
};

typedef struct tpu_host_allocator_t {
  pthread_mutex_t mu;
  int32_t device_index;
  tpu_host_queue_t* queue; /* borrowed: the same device's queue */
  tpu_host_block_t** by_addr; /* every reserved block, sorted by ptr */
  size_t num_blocks, cap_blocks;
  tpu_host_block_t** cache;   /* cached blocks, sorted by (size, ptr) */
  size_t num_cached, cap_cached;
  uint64_t cached_bytes;
  tpu_host_pool_t* recording; /* the pool of the capture now recording, or NULL */
  tpu_hal_memory_stats_t stats; /* budget_bytes is the budget */
} tpu_host_allocator_t;

void tpu_host_allocator_init(tpu_host_allocator_t* a, int32_t device_index, uint64_t budget,
                             tpu_host_queue_t* queue);
/* Frees every block, live or cached. The queue must be idle. */
void tpu_host_allocator_deinit(tpu_host_allocator_t* a);
tpu_status_t tpu_host_allocator_allocate(tpu_host_allocator_t* a, size_t size, void** out_ptr);
void tpu_host_allocator_deallocate(tpu_host_allocator_t* a, void* ptr);
void tpu_host_allocator_empty_cache(tpu_host_allocator_t* a);
void tpu_host_allocator_stats(tpu_host_allocator_t* a, tpu_hal_memory_stats_t* out);
void tpu_host_allocator_reset_peak(tpu_host_allocator_t* a);
void tpu_host_allocator_reset_accumulated(tpu_host_allocator_t* a);
void tpu_host_allocator_info(tpu_host_allocator_t* a, uint64_t* out_free, uint64_t* out_total);
/* True if [ptr, ptr+size) lies inside one live block (size 0: ptr inside). */
size_t tpu_host_allocator_blocks(tpu_host_allocator_t* a, tpu_hal_memory_block_t* out, size_t cap);
bool tpu_host_allocator_contains(tpu_host_allocator_t* a, const void* ptr, size_t size);
/* Capture memory: from begin_pool to end_pool, allocations and frees are
 * the pool's (see tpu_host_pool_t); release_pool (queue idle) caches every
 * block it holds and forgets it. begin_pool fails if a pool is recording. */
tpu_status_t tpu_host_allocator_begin_pool(tpu_host_allocator_t* a, tpu_host_pool_t* pool);
void tpu_host_allocator_end_pool(tpu_host_allocator_t* a);
void tpu_host_allocator_release_pool(tpu_host_allocator_t* a, tpu_host_pool_t* pool);

/* ---- Events ------------------------------------------------------------------ */
tpu_status_t tpu_host_event_create(bool enable_timing, tpu_hal_event_t** out_event);
bool tpu_host_event_is_host(const tpu_hal_event_t* event);
tpu_status_t tpu_host_event_record(tpu_host_queue_t* q, tpu_hal_event_t* event);
tpu_status_t tpu_host_event_wait(tpu_host_queue_t* q, tpu_hal_event_t* event);

/* "1.50 GiB" style; `decimals` digits after the point. */
void tpu_host_format_bytes(char* buf, size_t cap, uint64_t bytes, int decimals);

#endif /* TPU_DRIVERS_HOST_INTERNAL_H_ */
