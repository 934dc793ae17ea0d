/* tpu/drivers.h - the drivers this runtime can create, and how one is chosen.
 *
 * Drivers register by name in a static table (runtime/drivers/registry.c).
 * Each driver reads its own environment when created from it:
 *   host  TORCH_TPU_HOST_DEVICES, TORCH_TPU_HOST_MEMORY, TORCH_TPU_LIST_FUSION
 *   pjrt  TORCH_TPU_PJRT_PLUGIN (path of a PJRT plugin .so, else
 *         TPU_LIBRARY_PATH), TORCH_TPU_PJRT_OPTIONS ("name=value,..." client
 *         create options: integers, true/false, else strings),
 *         TORCH_TPU_PJRT_MEMORY (budget per chip; default: the plugin's
 *         bytes_limit, else physical memory divided by the chip count)
 * TORCH_TPU_DRIVER=host|pjrt selects one; unset: pjrt when a TPU is on the
 * PCI bus (vendor 0x1ae0), else host.
 */
#ifndef TPU_DRIVERS_H_
#define TPU_DRIVERS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/base.h"
#include "tpu/hal.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The driver name TORCH_TPU_DRIVER asks for, or the default (see above).
 * INVALID_ARGUMENT naming the variable and the known names for an unknown
 * value. Static string. */
tpu_status_t tpu_drivers_selected(const char** out_name);

/* The host driver's default budget per chip when TORCH_TPU_HOST_MEMORY is
 * unset: 90% of `available` bytes (tpu_host_available_memory() at
 * initialisation; the rest is left to the process itself and the OS),
 * divided by `devices`, at least 256 MiB. The budget is a ceiling, not a
 * reservation: memory is taken from the host as tensors are allocated. */
uint64_t tpu_host_default_memory(uint64_t available, int32_t devices);

/* True if a PCI device of Google's vendor id (0x1ae0: TPU chips) exists. */
bool tpu_drivers_tpu_present(void);

/* Creates driver `name` configured from the environment. `pool` (borrowed,
 * may be NULL) is the kernel thread pool a driver that runs host code may
 * use. FAILED_PRECONDITION for an unknown name; a driver that cannot run (no
 * plugin, no chip) returns UNAVAILABLE with a message
 * saying what is missing. The caller owns the result. */
tpu_status_t tpu_drivers_create(const char* name, tpu_threadpool_t* pool,
                                tpu_hal_driver_t** out_driver);

/* ---- PJRT driver (runtime/drivers/pjrt) ----------------------------------
 * Any PJRT plugin: libtpu on TPU VMs, XLA's CPU plugin in tests. Device
 * memory is opaque (properties.host_addressable is false): a device pointer
 * names a byte offset inside an allocation and only HAL calls reach it. */
typedef struct tpu_pjrt_driver_options_t {
  size_t struct_size;          /* sizeof(tpu_pjrt_driver_options_t) */
  const char* plugin_path;     /* required; borrowed for the call */
  const char* create_options;  /* "name=value,..." or NULL; borrowed */
  uint64_t memory_per_device;  /* 0: plugin's bytes_limit, else RAM/chips */
  const char* cache_dir;       /* compiled programs kept on disk here (NULL: in memory only) */
} tpu_pjrt_driver_options_t;

tpu_status_t tpu_pjrt_driver_create(const tpu_pjrt_driver_options_t* options,
                                    tpu_hal_driver_t** out_driver);

#ifdef __cplusplus
}
#endif
#endif /* TPU_DRIVERS_H_ */
