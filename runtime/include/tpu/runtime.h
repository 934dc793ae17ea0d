/* tpu/runtime.h - the process-wide runtime: one driver chosen at
 * initialisation, the calling thread's current device, pinned host memory,
 * and counters shared by the bridge and the Python module.
 *
 * tpu_runtime_initialize() must be called before anything else here (the
 * Python package does it at import; C programs call it themselves). It is
 * idempotent and thread-safe. Configuration comes from the environment:
 *   TORCH_TPU_HOST_DEVICES  number of virtual chips (default 1, max 64)
 *   TORCH_TPU_HOST_MEMORY   budget per chip, e.g. "8G" (default: 90% of the
 *                           memory available at initialisation divided by
 *                           the chip count, at least 256 MiB; see
 *                           tpu_host_default_memory in tpu/drivers.h)
 *   TORCH_TPU_NUM_THREADS   kernel threads (default: number of cores)
 *   TORCH_TPU_SPIN_US, TORCH_TPU_LIST_FUSION, TORCH_TPU_FALLBACK (see below)
 * Bad values make initialize() fail with INVALID_ARGUMENT naming the
 * variable and the value (the message starts with them).
 */
#ifndef TPU_RUNTIME_H_
#define TPU_RUNTIME_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/base.h"
#include "tpu/hal.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

tpu_status_t tpu_runtime_initialize(void);
bool tpu_runtime_is_initialized(void);
/* Drains all queues, releases the driver and the pool. Safe to call twice;
 * initialize() may be called again afterwards (C tests do). */
void tpu_runtime_shutdown(void);

/* Driver in use (borrowed); NULL before initialize. */
tpu_hal_driver_t* tpu_runtime_driver(void);
/* Number of devices; 0 before initialize. */
int32_t tpu_runtime_device_count(void);
/* Borrowed device. INVALID_ARGUMENT naming "tpu:<index>" and the count when
 * out of range, FAILED_PRECONDITION before initialize. */
tpu_status_t tpu_runtime_device(int32_t index, tpu_hal_device_t** out_device);

/* Calling thread's current device index (default 0). */
int32_t tpu_runtime_current_device(void);
tpu_status_t tpu_runtime_set_current_device(int32_t index);

/* Kernel thread pool (borrowed; NULL before initialize). */
tpu_threadpool_t* tpu_runtime_threadpool(void);

/* Waits for every device's queue; returns the first pending error. */
tpu_status_t tpu_runtime_synchronize_all(void);

/* Copies between devices: waits for `src_device`'s pending work, then queues
 * the copy on `dst_device` and waits for it. */
tpu_status_t tpu_runtime_copy_peer(int32_t dst_device, void* dst,
                                   int32_t src_device, const void* src,
                                   size_t size);

/* Pinned (page-locked in spirit) host memory: page-aligned host buffers the
 * runtime tracks so that is_pinned() can answer. free accepts NULL. */
tpu_status_t tpu_runtime_host_alloc_pinned(size_t size, void** out_ptr);
void tpu_runtime_host_free_pinned(void* ptr);
bool tpu_runtime_host_is_pinned(const void* ptr);

/* Fallback counters: the bridge records every op it had to run on the CPU.
 * Thread-safe. Names are copied. */
void tpu_stats_record_fallback(const char* op_name);
/* Calls `fn(ctx, name, count)` for each op, in name order. */
void tpu_stats_fallback_foreach(void (*fn)(void* ctx, const char* name,
                                           uint64_t count),
                                void* ctx);
void tpu_stats_fallback_reset(void);
/* TORCH_TPU_FALLBACK, read at each call: *out_forbidden is true for "error"
 * (an op without a native kernel must raise instead of running on the CPU),
 * false when unset. INVALID_ARGUMENT naming the variable and its value for
 * anything else. */
tpu_status_t tpu_runtime_fallback_forbidden(bool* out_forbidden);

/* Native dispatch counters (how many ops ran on C kernels). */
void tpu_stats_record_native(void);
uint64_t tpu_stats_native_count(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_RUNTIME_H_ */
