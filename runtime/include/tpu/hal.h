/* tpu/hal.h - hardware abstraction layer: driver, device (memory + queue),
 * event. Everything above the HAL (runtime, bridge, graph executor) talks to
 * devices only through these vtables, so a second driver (PJRT) plugs in
 * without changes above this line.
 *
 * Model
 * - A driver owns N devices ("chips"). Devices are borrowed from the driver
 *   and live as long as it does.
 * - Device memory is addressed by `void*` device pointers; pointer
 *   arithmetic inside an allocation is valid on every driver. Where
 *   properties.host_addressable is true (the host driver) they are host
 *   addresses; elsewhere (pjrt) they are opaque and only HAL calls may touch
 *   them.
 * - Each device has ONE in-order asynchronous queue. submit() returns before
 *   the work runs; works run one after another on the device's worker. Errors
 *   returned by a work are kept (the first one, with the work's name) and
 *   returned by the next synchronize()/copy_d2h() on that device, after which
 *   the device is usable again.
 * - Memory is cached per device: deallocate() returns a block to the cache;
 *   because the queue is in order, a cached block can be handed out again at
 *   once (work that used it was queued before any work using the new owner).
 */
#ifndef TPU_HAL_H_
#define TPU_HAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/base.h"
#include "tpu/kernels.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_hal_driver_t tpu_hal_driver_t;
typedef struct tpu_hal_device_t tpu_hal_device_t;
typedef struct tpu_hal_event_t tpu_hal_event_t;
typedef struct tpu_hal_capture_t tpu_hal_capture_t; /* opaque, driver-owned */

/* ---- Work submitted to a queue -------------------------------------------
 * run(ctx) executes on the device's worker thread; cleanup(ctx), if not NULL,
 * is called exactly once afterwards. Works queued after a failing one still
 * run (kernels must not crash on garbage data, only report). `name` is
 * copied at submit. */
typedef tpu_status_t (*tpu_hal_work_fn_t)(void* ctx);
/* Reports one byte range [begin, end) a piece of a list work touches. */
typedef void (*tpu_hal_range_fn_t)(void* vctx, uintptr_t begin, uintptr_t end, bool write);
typedef struct tpu_hal_work_t {
  const char* name;            /* e.g. "aten::index_select"; may be NULL */
  tpu_hal_work_fn_t run;       /* required */
  void (*cleanup)(void* ctx);  /* optional; frees ctx */
  void* ctx;                   /* owned by the queue after a successful OR
                                  failed submit (cleanup is always called) */
  /* Optional: a list work (torch._foreach_* ops) made of `parts` pieces
   * (0: not one). run_part(ctx, i) runs piece i alone; footprint(ctx, i,
   * visit, vctx) calls visit for every byte range piece i reads or writes.
   * A driver may run consecutive list works with the same number of pieces
   * piece-major (piece 0 of each work, then piece 1, ...), pieces in
   * parallel, when no range a piece writes meets a range of another piece:
   * the result is the one of running them in order, and each piece's data
   * stays in cache from one work to the next. run() must still do it all. */
  int64_t parts;
  tpu_status_t (*run_part)(void* ctx, int64_t part);
  void (*footprint)(void* ctx, int64_t part, tpu_hal_range_fn_t visit, void* vctx);
  /* Optional, for the device-queue trace (tpu/trace.h): bytes the work reads
   * and writes (0: unknown). Callers fill it only while tpu_trace_enabled(). */
  int64_t bytes;
  /* Optional: the work must not run again with the same ctx (it consumed a
   * random stream, say): a capture refuses it (capture_begin below). */
  bool single_use;
} tpu_hal_work_t;

/* Counters of a device queue (since creation). */
typedef struct tpu_hal_queue_stats_t {
  uint64_t works;            /* works run */
  uint64_t list_groups;      /* groups of list works run piece-major */
  uint64_t list_works;       /* list works run inside those groups */
  uint64_t list_conflicts;   /* list works run alone because pieces met */
  uint64_t programs;         /* compiled device programs executed (drivers that compile ops) */
  uint64_t program_compiles; /* programs compiled by the driver (all its devices) */
  uint64_t program_loads;    /* programs loaded from the driver's on-disk cache instead */
} tpu_hal_queue_stats_t;

/* A whole graph handed to a driver that runs graphs itself (run_graph).
 * Its buffers are the graph compiler's (tpu/graph.h): INPUTs bound at run
 * time, OUTPUTs the caller allocates per run, INTERNAL ones the driver's
 * business. A node is a kernel call whose tensors' data pointers are not
 * read: tensor `k` (every tensor argument in schema order, members of
 * tensor lists included, then every output) lives in buffer buffer[k]
 * (-1: an absent optional tensor or an output nobody wants) at byte
 * offset[k]. Nodes run in order; a node writing a buffer another reads
 * later (in-place and out= ops, copies into views) is seen by it. */
enum { TPU_HAL_GRAPH_INPUT = 0, TPU_HAL_GRAPH_OUTPUT = 1, TPU_HAL_GRAPH_INTERNAL = 2 };

typedef struct tpu_hal_graph_buffer_t {
  int32_t kind;  /* TPU_HAL_GRAPH_* */
  int32_t index; /* input number, output buffer number; -1 for INTERNAL */
  int64_t bytes;
} tpu_hal_graph_buffer_t;

typedef struct tpu_hal_graph_node_t {
  const tpu_k_call_t* call;
  const int32_t* buffer;
  const int64_t* offset;
} tpu_hal_graph_node_t;

typedef struct tpu_hal_graph_t {
  int32_t num_buffers;
  const tpu_hal_graph_buffer_t* buffers;
  int32_t num_nodes;
  const tpu_hal_graph_node_t* nodes;
  int32_t num_inputs, num_outputs;
} tpu_hal_graph_t;

/* ---- Statistics ----------------------------------------------------------- */
typedef struct tpu_hal_memory_stats_t {
  uint64_t allocated_bytes;       /* bytes in blocks handed to users now */
  uint64_t reserved_bytes;        /* allocated + cached, counted in budget */
  uint64_t peak_allocated_bytes;  /* since creation or reset_peak */
  uint64_t peak_reserved_bytes;
  uint64_t requested_bytes;       /* sum of sizes asked (before rounding) */
  uint64_t num_allocs;            /* allocate() calls that succeeded */
  uint64_t num_frees;             /* deallocate() calls */
  uint64_t num_cache_hits;        /* allocations served from the cache */
  uint64_t num_segments;          /* blocks currently reserved */
  uint64_t num_device_allocs;     /* blocks taken from the budget, ever */
  uint64_t num_device_frees;      /* blocks returned to the budget, ever */
  uint64_t num_ooms;              /* allocations that failed with OOM */
  uint64_t budget_bytes;          /* the chip's memory size */
} tpu_hal_memory_stats_t;

/* One block of a device's allocator (memory_blocks). */
typedef struct tpu_hal_memory_block_t {
  uint64_t address;   /* device pointer as an integer */
  uint64_t size;      /* bytes reserved for it (rounded) */
  uint64_t requested; /* bytes the user asked for (0 when cached) */
  bool allocated;     /* handed to a user now; false: in the cache */
} tpu_hal_memory_block_t;

typedef struct tpu_hal_device_properties_t {
  char name[64];           /* e.g. "TPU host virtual chip" */
  char driver[16];         /* "host" or "pjrt" */
  char platform[32];       /* PJRT platform name ("tpu", "cpu"); "host" */
  int32_t index;           /* ordinal within its driver */
  int32_t compute_units;   /* threads kernels may use */
  uint64_t total_memory;   /* budget in bytes */
  /* True if device pointers are host addresses that host code (the C
   * kernels, the graph compiler) may dereference. False: memory is opaque,
   * only HAL calls reach it, and ops must run where the driver runs them. */
  bool host_addressable;
} tpu_hal_device_properties_t;

/* ---- Event ---------------------------------------------------------------
 * Marks a point in a device queue. An event that was never recorded counts
 * as complete. Re-recording moves the marker. */
typedef struct tpu_hal_event_vtable_t {
  void (*destroy)(tpu_object_t* object);
  bool (*query)(tpu_hal_event_t* event); /* true if complete */
  /* Blocks until complete. */
  tpu_status_t (*synchronize)(tpu_hal_event_t* event);
  /* Milliseconds between two completed events' completion times;
   * FAILED_PRECONDITION if either is not recorded+complete or timing off. */
  tpu_status_t (*elapsed_ms)(tpu_hal_event_t* start, tpu_hal_event_t* end,
                             double* out_ms);
} tpu_hal_event_vtable_t;

struct tpu_hal_event_t {
  tpu_object_t base;
};

/* ---- Device ---------------------------------------------------------------- */
typedef struct tpu_hal_device_vtable_t {
  void (*destroy)(tpu_object_t* object);
  void (*query_properties)(tpu_hal_device_t* device,
                           tpu_hal_device_properties_t* out_properties);

  /* Memory. allocate(0) returns a NULL pointer and TPU_OK. On exhaustion of
   * the budget (after releasing cached blocks) returns OUT_OF_MEMORY whose
   * message names the device, requested bytes, free bytes and budget. */
  tpu_status_t (*allocate)(tpu_hal_device_t* device, size_t size,
                           void** out_ptr);
  void (*deallocate)(tpu_hal_device_t* device, void* ptr); /* NULL-safe */
  /* Waits for the queue to drain, then returns every cached block. */
  void (*empty_cache)(tpu_hal_device_t* device);
  void (*memory_stats)(tpu_hal_device_t* device,
                       tpu_hal_memory_stats_t* out_stats);
  void (*reset_peak_stats)(tpu_hal_device_t* device);
  void (*reset_accumulated_stats)(tpu_hal_device_t* device);
  /* Free = budget - reserved + cached-unused; total = budget. */
  void (*memory_info)(tpu_hal_device_t* device, uint64_t* out_free,
                      uint64_t* out_total);
  /* Optional (NULL: the driver cannot list its memory). Writes up to `cap`
   * blocks of the device's allocator in address order into out_blocks (may
   * be NULL when cap is 0) and returns how many there are in all; a snapshot
   * taken under the allocator's lock. The host driver lists its cached
   * blocks too; pjrt caches nothing, so all its blocks are allocated. */
  size_t (*memory_blocks)(tpu_hal_device_t* device, tpu_hal_memory_block_t* out_blocks, size_t cap);
  /* True if `ptr` lies inside a live allocation of this device. */
  bool (*owns_pointer)(tpu_hal_device_t* device, const void* ptr);

  /* Queue. */
  tpu_status_t (*submit)(tpu_hal_device_t* device, const tpu_hal_work_t* work);
  /* Waits for all submitted work; returns (and clears) the first error a
   * work reported since the last synchronize, annotated with its name. */
  tpu_status_t (*synchronize)(tpu_hal_device_t* device);

  /* Copies. h2d returns once `src` may be reused (the host driver stages the
   * bytes); the write is ordered after earlier work. d2h waits for earlier
   * work, copies, and returns any pending queue error. d2d is queued. */
  tpu_status_t (*copy_h2d)(tpu_hal_device_t* device, void* dst,
                           const void* src, size_t size);
  tpu_status_t (*copy_d2h)(tpu_hal_device_t* device, void* dst,
                           const void* src, size_t size);
  tpu_status_t (*copy_d2d)(tpu_hal_device_t* device, void* dst,
                           const void* src, size_t size);

  /* Events. create returns a new event with refcount 1 (caller releases). */
  tpu_status_t (*create_event)(tpu_hal_device_t* device, bool enable_timing,
                               tpu_hal_event_t** out_event);
  tpu_status_t (*record_event)(tpu_hal_device_t* device,
                               tpu_hal_event_t* event);
  /* Later work on `device` waits until `event` (possibly recorded on another
   * device of the same driver) completes. */
  tpu_status_t (*wait_event)(tpu_hal_device_t* device, tpu_hal_event_t* event);
  /* True if every submitted work has finished. */
  bool (*query_idle)(tpu_hal_device_t* device);
  void (*queue_stats)(tpu_hal_device_t* device, tpu_hal_queue_stats_t* out_stats);

  /* Ops the driver runs itself. Optional (NULL: none). A caller whose
   * device is not host-addressable cannot run the C kernels on it; it asks
   * supports_op(op) (a full schema name, tpu/kernels.h) and, if true, hands
   * the described call (outputs allocated, check() passed) to execute_op,
   * which queues it in order with the device's other work. Errors found
   * while building the call return at once; errors while it runs surface at
   * the next synchronize. */
  bool (*supports_op)(tpu_hal_device_t* device, const char* op);
  tpu_status_t (*execute_op)(tpu_hal_device_t* device, const tpu_k_call_t* call);

  /* Whole graphs the driver runs itself (torch.compile). Optional (NULL:
   * none; the graph compiler then runs the C kernels, which needs
   * host-addressable memory). check_graph_node returns TPU_OK if the driver
   * can run `call` (data pointers not read) inside a graph, else
   * UNIMPLEMENTED saying why (the caller runs that op eagerly instead).
   * run_graph queues one run of `graph` (tpu_hal_graph_t; it stays valid
   * until the caller's last run) with input k's buffer at inputs[k] and
   * output buffer k at outputs[k], in order with the device's other work;
   * errors follow execute_op's rules. */
  tpu_status_t (*check_graph_node)(tpu_hal_device_t* device, const tpu_k_call_t* call);
  tpu_status_t (*run_graph)(tpu_hal_device_t* device, const tpu_hal_graph_t* graph,
                            void* const* inputs, void* const* outputs);

  /* Work capture and replay (torch.tpu.graph, as CUDA graphs). Optional
   * (NULL: the driver cannot capture). Between capture_begin and
   * capture_end, works submitted to the device (from any thread) are
   * recorded instead of run; copy_h2d snapshots its source. Waiting for the
   * queue (synchronize, copy_d2h, events) is refused with
   * FAILED_PRECONDITION and spoils the capture: capture_end then returns
   * that error and nothing. Memory freed while capturing, and memory
   * allocated while capturing whenever it is freed, is held for the
   * capture (never handed out again) until capture_release, so replays may
   * keep reading and writing it; memory allocated before the capture and
   * still used by it must be kept alive by the caller. capture_replay queues
   * one run of every recorded work, in order, as one work. capture_release
   * waits for the queue, frees the recorded works and returns the held
   * memory to the cache. */
  tpu_status_t (*capture_begin)(tpu_hal_device_t* device);
  tpu_status_t (*capture_end)(tpu_hal_device_t* device, tpu_hal_capture_t** out_capture);
  tpu_status_t (*capture_replay)(tpu_hal_device_t* device, tpu_hal_capture_t* capture);
  void (*capture_release)(tpu_hal_device_t* device, tpu_hal_capture_t* capture);
  /* Number of works recorded in a capture. */
  int64_t (*capture_works)(tpu_hal_capture_t* capture);
} tpu_hal_device_vtable_t;

struct tpu_hal_device_t {
  tpu_object_t base;
};

/* ---- Driver ----------------------------------------------------------------- */
typedef struct tpu_hal_driver_vtable_t {
  void (*destroy)(tpu_object_t* object);
  const char* (*name)(tpu_hal_driver_t* driver); /* static string */
  int32_t (*device_count)(tpu_hal_driver_t* driver);
  /* Borrowed pointer, valid while the driver lives; NULL if out of range. */
  tpu_hal_device_t* (*device)(tpu_hal_driver_t* driver, int32_t index);
} tpu_hal_driver_vtable_t;

struct tpu_hal_driver_t {
  tpu_object_t base;
};

/* ---- Convenience dispatchers (inline, no logic) ---------------------------- */
#define TPU_HAL_VT(obj, type) ((const type*)((obj)->base.vtable))
#define tpu_hal_device_vt(d) TPU_HAL_VT(d, tpu_hal_device_vtable_t)
#define tpu_hal_driver_vt(d) TPU_HAL_VT(d, tpu_hal_driver_vtable_t)
#define tpu_hal_event_vt(e) TPU_HAL_VT(e, tpu_hal_event_vtable_t)

/* ---- Host driver (runtime/drivers/host) ------------------------------------
 * The embedded default driver: virtual chips backed by host memory, each with
 * its own budget, its own worker thread (the queue) and a block cache. */
typedef struct tpu_host_driver_options_t {
  size_t struct_size;          /* sizeof(tpu_host_driver_options_t) */
  int32_t device_count;        /* >= 1 */
  uint64_t memory_per_device;  /* budget in bytes per chip, > 0 */
  int32_t compute_units;       /* reported in properties */
  /* Borrowed; may be NULL. Runs the pieces of grouped list works (see
   * tpu_hal_work_t.parts) in parallel. */
  tpu_threadpool_t* pool;
  bool group_list_works;       /* false: list works run one by one */
} tpu_host_driver_options_t;

/* Creates the host driver. The caller owns the result (release it). */
tpu_status_t tpu_host_driver_create(const tpu_host_driver_options_t* options,
                                    tpu_hal_driver_t** out_driver);

#ifdef __cplusplus
}
#endif
#endif /* TPU_HAL_H_ */
