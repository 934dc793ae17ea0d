/* The driver registry: each driver's factory reads that driver's own
 * environment (see tpu/drivers.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/drivers.h"

#define TPU_HOST_MAX_CHIPS 64
#define TPU_HOST_MIN_DEFAULT_MEMORY ((uint64_t)256 << 20)

uint64_t tpu_host_default_memory(uint64_t available, int32_t devices) {
  if (devices < 1) devices = 1;
  uint64_t memory = available / 10 * 9 / (uint64_t)devices;
  return memory < TPU_HOST_MIN_DEFAULT_MEMORY ? TPU_HOST_MIN_DEFAULT_MEMORY : memory;
}

static tpu_status_t host_from_env(tpu_threadpool_t* pool, tpu_hal_driver_t** out) {
  int64_t devices = 1;
  const char* v = tpu_env_value("TORCH_TPU_HOST_DEVICES");
  if (v) TPU_RETURN_IF_ERROR(tpu_parse_int("TORCH_TPU_HOST_DEVICES", v, 1, TPU_HOST_MAX_CHIPS, &devices));
  uint64_t memory = 0;
  v = tpu_env_value("TORCH_TPU_HOST_MEMORY");
  if (v) {
    TPU_RETURN_IF_ERROR(tpu_parse_bytes("TORCH_TPU_HOST_MEMORY", v, &memory));
    if (memory == 0)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                       "invalid byte size for TORCH_TPU_HOST_MEMORY: '%s' (must be > 0)", v);
  } else {
    memory = tpu_host_default_memory(tpu_host_available_memory(), (int32_t)devices);
  }
  int64_t group_lists = 1;
  v = tpu_env_value("TORCH_TPU_LIST_FUSION");
  if (v) TPU_RETURN_IF_ERROR(tpu_parse_int("TORCH_TPU_LIST_FUSION", v, 0, 1, &group_lists));
  tpu_host_driver_options_t options = {
      .struct_size = sizeof(options),
      .device_count = (int32_t)devices,
      .memory_per_device = memory,
      .compute_units = tpu_threadpool_size(pool),
      .pool = pool,
      .group_list_works = group_lists != 0,
  };
  return tpu_host_driver_create(&options, out);
}

static tpu_status_t pjrt_from_env(tpu_threadpool_t* pool, tpu_hal_driver_t** out) {
  const char* plugin = tpu_env_value("TORCH_TPU_PJRT_PLUGIN");
  if (!plugin) plugin = tpu_env_value("TPU_LIBRARY_PATH");
  if (!plugin)
    return TPU_ERROR(TPU_STATUS_UNAVAILABLE,
                     "TORCH_TPU_DRIVER=pjrt: no PJRT plugin found: set TORCH_TPU_PJRT_PLUGIN to a "
                     "plugin's .so, or install one (pip install libtpu on a TPU VM, or "
                     "xla-cpu-pjrt for XLA's CPU plugin)");
  uint64_t memory = 0;
  const char* v = tpu_env_value("TORCH_TPU_PJRT_MEMORY");
  if (v) {
    TPU_RETURN_IF_ERROR(tpu_parse_bytes("TORCH_TPU_PJRT_MEMORY", v, &memory));
    if (memory == 0)
      return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                       "invalid byte size for TORCH_TPU_PJRT_MEMORY: '%s' (must be > 0)", v);
  }
  /* Compiled programs on disk (TORCH_TPU_PJRT_CACHE=0: in memory only). */
  static const char* const kOnOff[] = {"1", "0"};
  int32_t off = 0;
  TPU_RETURN_IF_ERROR(tpu_env_choice("TORCH_TPU_PJRT_CACHE", kOnOff, 2, &off));
  char dir[4096];
  tpu_cache_dir(dir, sizeof(dir));
  tpu_pjrt_driver_options_t options = {
      .struct_size = sizeof(options),
      .plugin_path = plugin,
      .create_options = tpu_env_value("TORCH_TPU_PJRT_OPTIONS"),
      .memory_per_device = memory,
      .cache_dir = off == 1 ? NULL : dir,
  };
  return tpu_pjrt_driver_create(&options, out);
}

typedef struct {
  const char* name;
  tpu_status_t (*create)(tpu_threadpool_t* pool, tpu_hal_driver_t** out);
} tpu_driver_factory_t;

static const tpu_driver_factory_t kFactories[] = {
    {"host", host_from_env},
    {"pjrt", pjrt_from_env},
};

bool tpu_drivers_tpu_present(void) {
  DIR* dir = opendir("/sys/bus/pci/devices");
  if (!dir) return false;
  bool found = false;
  for (struct dirent* e; !found && (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    char path[512], text[16] = {0};
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(text, sizeof(text), f)) found = strtol(text, NULL, 16) == 0x1ae0;
    fclose(f);
  }
  closedir(dir);
  return found;
}

tpu_status_t tpu_drivers_selected(const char** out_name) {
  static const char* const kNames[] = {"host", "pjrt"};
  int32_t index = -1;
  TPU_RETURN_IF_ERROR(tpu_env_choice("TORCH_TPU_DRIVER", kNames, 2, &index));
  if (index < 0) {
    *out_name = tpu_drivers_tpu_present() ? "pjrt" : "host";
  } else {
    *out_name = kNames[index];
  }
  return TPU_OK;
}

tpu_status_t tpu_drivers_create(const char* name, tpu_threadpool_t* pool,
                                tpu_hal_driver_t** out_driver) {
  if (!out_driver) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_driver is NULL");
  *out_driver = NULL;
  for (size_t i = 0; name && i < sizeof(kFactories) / sizeof(kFactories[0]); i++) {
    if (strcmp(name, kFactories[i].name) == 0) return kFactories[i].create(pool, out_driver);
  }
  return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "unknown tpu driver '%s' (known: host, pjrt)",
                   name ? name : "(null)");
}
