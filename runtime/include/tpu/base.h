/* tpu/base.h - base layer: reference-counted objects, environment options,
 * a fork/join thread pool for kernels. No PyTorch or Python here. */
#ifndef TPU_BASE_H_
#define TPU_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Objects --------------------------------------------------------------
 * Every HAL object starts with this header at offset 0. `vtable` points at a
 * `static const` table of function pointers whose first entry is `destroy`.
 * retain/release are thread-safe; the object is destroyed when the count
 * reaches zero. */
typedef struct tpu_object_t {
  int32_t refcount; /* accessed with __atomic builtins only */
  const void* vtable;
} tpu_object_t;

typedef struct tpu_object_vtable_t {
  void (*destroy)(tpu_object_t* object);
} tpu_object_vtable_t;

void tpu_object_init(tpu_object_t* object, const void* vtable);
void tpu_object_retain(tpu_object_t* object);   /* NULL-safe */
void tpu_object_release(tpu_object_t* object);  /* NULL-safe */

/* ---- Environment ----------------------------------------------------------
 * Parses a byte size such as "16G", "512M", "1048576", "1.5GiB". Suffixes
 * K/M/G/T (powers of 1024), optional "B"/"iB". Returns INVALID_ARGUMENT naming
 * the variable and the text on a malformed value. */
tpu_status_t tpu_parse_bytes(const char* name, const char* text,
                             uint64_t* out_bytes);
/* Parses a non-negative integer in [min, max]; INVALID_ARGUMENT otherwise. */
tpu_status_t tpu_parse_int(const char* name, const char* text, int64_t min,
                           int64_t max, int64_t* out_value);
/* Reads environment variable `name` whose value must be one of `choices[0..n)`
 * (exact text, surrounding blanks ignored): *out_index is the matching index,
 * or -1 when the variable is unset or blank. INVALID_ARGUMENT naming the
 * variable, its value and the choices otherwise. */
tpu_status_t tpu_env_choice(const char* name, const char* const* choices, int32_t n,
                            int32_t* out_index);

/* Value of environment variable `name`, or NULL when unset or blank. */
const char* tpu_env_value(const char* name);

/* Total physical memory of the host in bytes (0 if unknown). */
uint64_t tpu_host_physical_memory(void);
/* Memory the host can still hand out now, in bytes: the kernel's
 * MemAvailable (/proc/meminfo), lowered to what is left under a cgroup
 * memory limit when one is set (cgroup v2 memory.max, or v1
 * memory.limit_in_bytes); the physical memory when neither is readable. */
uint64_t tpu_host_available_memory(void);
/* Number of online CPU cores (>= 1). */
int tpu_host_cpu_count(void);
/* Monotonic clock in nanoseconds. */
uint64_t tpu_now_ns(void);

/* ---- Files (runtime/base/files.c) ------------------------------------------ */
/* The on-disk cache's directory: TORCH_TPU_CACHE_DIR, else
 * $XDG_CACHE_HOME/torch_tpu, else ~/.cache/torch_tpu (generated code, device
 * executables). */
void tpu_cache_dir(char* out, size_t n);
/* mkdir -p. */
tpu_status_t tpu_make_dirs(const char* dir);
/* Up to `max` bytes of a file, NUL-terminated, malloc'ed (NULL if it cannot
 * be read); *out_len (may be NULL) gets the byte count. */
char* tpu_read_file(const char* path, size_t max, size_t* out_len);
tpu_status_t tpu_write_file(const char* path, const void* data, size_t n);
/* 64-bit FNV-1a of `n` bytes continuing hash `h` (start: TPU_FNV1A_INIT). */
#define TPU_FNV1A_INIT 0xcbf29ce484222325ull
uint64_t tpu_fnv1a(uint64_t h, const void* data, size_t n);

/* ---- Thread pool -----------------------------------------------------------
 * A fixed set of worker threads for data-parallel kernels. One parallel_for
 * runs at a time per pool (calls from several threads are serialised); the
 * calling thread takes part in the work. Kernels receive the pool through
 * their call context and never create threads themselves. */
typedef struct tpu_threadpool_t tpu_threadpool_t;

/* Body of a parallel loop: processes [begin, end). Must not fail; kernels
 * validate before launching. `ctx` is the caller's closure. */
typedef void (*tpu_parallel_fn_t)(void* ctx, int64_t begin, int64_t end);

/* Creates a pool with `num_threads` total participants (including the
 * caller), >= 1. Caller owns the pool; free with tpu_threadpool_destroy. */
tpu_status_t tpu_threadpool_create(int num_threads,
                                   tpu_threadpool_t** out_pool);
void tpu_threadpool_destroy(tpu_threadpool_t* pool); /* NULL-safe, joins */
int tpu_threadpool_size(const tpu_threadpool_t* pool); /* 1 for NULL */

/* Splits [0, n) into chunks of at least `grain` items and runs `fn` on them,
 * in parallel when n > grain and the pool has more than one thread. `pool`
 * may be NULL (runs inline). Returns when every chunk is done. */
void tpu_parallel_for(tpu_threadpool_t* pool, int64_t n, int64_t grain,
                      tpu_parallel_fn_t fn, void* ctx);

/* ---- Short spin waits --------------------------------------------------------
 * Work arrives in bursts a few microseconds apart (eager ops, the kernels of a
 * graph); sleeping on a condition variable between them costs a futex wake
 * and a context switch. Threads that would sleep (the queue worker, pool
 * workers, a loop's caller waiting for its helpers, a thread waiting for the
 * queue) first spin on a counter, with a
 * CPU pause, for at most the process-wide budget (TORCH_TPU_SPIN_US, set at
 * runtime initialisation; 0 turns spinning off).
 * Returns true when `*word` became >= `target` in time (acquire order). */
bool tpu_spin_until_at_least(const uint64_t* word, uint64_t target, int64_t max_ns);
#define TPU_SPIN_DEFAULT_NS 30000
int64_t tpu_spin_budget_ns(void);
void tpu_spin_set_budget_ns(int64_t ns);

#ifdef __cplusplus
}
#endif
#endif /* TPU_BASE_H_ */
