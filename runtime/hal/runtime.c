/* Process-wide runtime: the driver, the kernel pool, per-thread current
 * device, pinned host buffers and dispatch counters. */
#define _GNU_SOURCE
#include "tpu/runtime.h"

#include "tpu/drivers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TPU_RUNTIME_MAX_THREADS 1024

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_initialized;               /* atomic loads outside g_mu */
static tpu_hal_driver_t* g_driver;       /* atomic loads outside g_mu */
static tpu_threadpool_t* g_pool;

static _Thread_local int32_t t_current_device;

/* ---- initialisation ---- */

tpu_status_t tpu_runtime_initialize(void) {
  if (__atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE)) return TPU_OK;
  pthread_mutex_lock(&g_mu);
  tpu_status_t st = TPU_OK;
  tpu_threadpool_t* pool = NULL;
  tpu_hal_driver_t* driver = NULL;
  if (g_initialized) goto done;

  const char* driver_name = NULL;
  st = tpu_drivers_selected(&driver_name);
  if (st) goto done;
  int64_t threads = tpu_host_cpu_count();
  const char* v = tpu_env_value("TORCH_TPU_NUM_THREADS");
  if (v) {
    st = tpu_parse_int("TORCH_TPU_NUM_THREADS", v, 1, TPU_RUNTIME_MAX_THREADS, &threads);
    if (st) goto done;
  }

  int64_t spin_us = TPU_SPIN_DEFAULT_NS / 1000;
  v = tpu_env_value("TORCH_TPU_SPIN_US");
  if (v) {
    st = tpu_parse_int("TORCH_TPU_SPIN_US", v, 0, 100000, &spin_us);
    if (st) goto done;
  }
  tpu_spin_set_budget_ns(spin_us * 1000);

  st = tpu_threadpool_create((int)threads, &pool);
  if (st) goto done;
  st = tpu_drivers_create(driver_name, pool, &driver);
  if (st) {
    tpu_threadpool_destroy(pool);
    goto done;
  }
  g_pool = pool;
  __atomic_store_n(&g_driver, driver, __ATOMIC_RELEASE);
  __atomic_store_n(&g_initialized, true, __ATOMIC_RELEASE);
done:
  pthread_mutex_unlock(&g_mu);
  return st ? tpu_status_annotate(st, "torch-tpu runtime initialisation failed") : TPU_OK;
}

bool tpu_runtime_is_initialized(void) { return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE); }

static void pinned_release_all(void);
static void fallback_release_all(void);
static uint64_t g_native_count;

void tpu_runtime_shutdown(void) {
  pthread_mutex_lock(&g_mu);
  if (g_initialized) {
    __atomic_store_n(&g_initialized, false, __ATOMIC_RELEASE);
    tpu_hal_driver_t* driver = g_driver;
    __atomic_store_n(&g_driver, NULL, __ATOMIC_RELEASE);
    tpu_object_release(&driver->base); /* drains every queue */
    tpu_threadpool_destroy(g_pool);
    g_pool = NULL;
  }
  pinned_release_all();
  fallback_release_all();
  __atomic_store_n(&g_native_count, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&g_mu);
}

tpu_hal_driver_t* tpu_runtime_driver(void) { return __atomic_load_n(&g_driver, __ATOMIC_ACQUIRE); }

int32_t tpu_runtime_device_count(void) {
  tpu_hal_driver_t* d = tpu_runtime_driver();
  return d ? tpu_hal_driver_vt(d)->device_count(d) : 0;
}

tpu_threadpool_t* tpu_runtime_threadpool(void) {
  return tpu_runtime_is_initialized() ? g_pool : NULL;
}

tpu_status_t tpu_runtime_device(int32_t index, tpu_hal_device_t** out_device) {
  if (!out_device) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_device is NULL");
  *out_device = NULL;
  tpu_hal_driver_t* d = tpu_runtime_driver();
  if (!d)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION,
                     "the torch-tpu runtime is not initialized (call tpu_runtime_initialize)");
  int32_t count = tpu_hal_driver_vt(d)->device_count(d);
  if (index < 0 || index >= count)
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                     "invalid device tpu:%d: only %d tpu device(s) available (%s driver)", index,
                     count, tpu_hal_driver_vt(d)->name(d));
  *out_device = tpu_hal_driver_vt(d)->device(d, index);
  return TPU_OK;
}

int32_t tpu_runtime_current_device(void) { return t_current_device; }

tpu_status_t tpu_runtime_set_current_device(int32_t index) {
  tpu_hal_device_t* device;
  TPU_RETURN_IF_ERROR(tpu_runtime_device(index, &device));
  t_current_device = index;
  return TPU_OK;
}

tpu_status_t tpu_runtime_synchronize_all(void) {
  tpu_hal_driver_t* d = tpu_runtime_driver();
  if (!d) return TPU_OK;
  tpu_status_t first = TPU_OK;
  int32_t count = tpu_hal_driver_vt(d)->device_count(d);
  for (int32_t i = 0; i < count; i++) {
    tpu_hal_device_t* dev = tpu_hal_driver_vt(d)->device(d, i);
    tpu_status_t st = tpu_hal_device_vt(dev)->synchronize(dev);
    if (st && !first) {
      first = st;
    } else {
      tpu_status_free(st);
    }
  }
  return first;
}

tpu_status_t tpu_runtime_copy_peer(int32_t dst_device, void* dst, int32_t src_device,
                                   const void* src, size_t size) {
  tpu_hal_device_t* dst_dev;
  tpu_hal_device_t* src_dev;
  TPU_RETURN_IF_ERROR(tpu_runtime_device(dst_device, &dst_dev));
  TPU_RETURN_IF_ERROR(tpu_runtime_device(src_device, &src_dev));
  if (size == 0) return TPU_OK;
  if (src_dev != dst_dev) TPU_RETURN_IF_ERROR(tpu_hal_device_vt(src_dev)->synchronize(src_dev));
  TPU_RETURN_IF_ERROR(tpu_status_annotate(
      tpu_hal_device_vt(dst_dev)->copy_d2d(dst_dev, dst, src, size), "copy tpu:%d -> tpu:%d",
      src_device, dst_device));
  return tpu_hal_device_vt(dst_dev)->synchronize(dst_dev);
}

/* ---- pinned host memory: sorted array of (ptr, size) ---- */
typedef struct {
  char* ptr;
  size_t size;
} tpu_pinned_t;

static pthread_mutex_t g_pinned_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_pinned_t* g_pinned;
static size_t g_pinned_n, g_pinned_cap;

/* First index whose ptr > p. Caller holds g_pinned_mu. */
static size_t pinned_upper(const void* p) {
  size_t lo = 0, hi = g_pinned_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)g_pinned[mid].ptr <= (uintptr_t)p) lo = mid + 1; else hi = mid;
  }
  return lo;
}

tpu_status_t tpu_runtime_host_alloc_pinned(size_t size, void** out_ptr) {
  if (!out_ptr) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "out_ptr is NULL");
  *out_ptr = NULL;
  if (size == 0) return TPU_OK;
  long page = sysconf(_SC_PAGESIZE);
  void* p = NULL;
  if (posix_memalign(&p, page > 0 ? (size_t)page : 4096, size) != 0 || !p)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes of pinned host memory",
                     size);
  pthread_mutex_lock(&g_pinned_mu);
  if (g_pinned_n == g_pinned_cap) {
    size_t cap = g_pinned_cap ? g_pinned_cap * 2 : 16;
    tpu_pinned_t* grown = realloc(g_pinned, cap * sizeof(*grown));
    if (!grown) {
      pthread_mutex_unlock(&g_pinned_mu);
      free(p);
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "cannot track pinned host memory");
    }
    g_pinned = grown;
    g_pinned_cap = cap;
  }
  size_t at = pinned_upper(p);
  memmove(g_pinned + at + 1, g_pinned + at, (g_pinned_n - at) * sizeof(*g_pinned));
  g_pinned[at] = (tpu_pinned_t){.ptr = p, .size = size};
  g_pinned_n++;
  pthread_mutex_unlock(&g_pinned_mu);
  *out_ptr = p;
  return TPU_OK;
}

void tpu_runtime_host_free_pinned(void* ptr) {
  if (!ptr) return;
  pthread_mutex_lock(&g_pinned_mu);
  size_t i = pinned_upper(ptr);
  bool found = i > 0 && g_pinned[i - 1].ptr == (char*)ptr;
  if (found) {
    memmove(g_pinned + i - 1, g_pinned + i, (g_pinned_n - i) * sizeof(*g_pinned));
    g_pinned_n--;
  }
  pthread_mutex_unlock(&g_pinned_mu);
  if (found) free(ptr); /* unknown pointers are ignored, never freed */
}

bool tpu_runtime_host_is_pinned(const void* ptr) {
  if (!ptr) return false;
  pthread_mutex_lock(&g_pinned_mu);
  size_t i = pinned_upper(ptr);
  bool inside = i > 0 && (uintptr_t)ptr - (uintptr_t)g_pinned[i - 1].ptr < g_pinned[i - 1].size;
  pthread_mutex_unlock(&g_pinned_mu);
  return inside;
}

static void pinned_release_all(void) {
  pthread_mutex_lock(&g_pinned_mu);
  for (size_t i = 0; i < g_pinned_n; i++) free(g_pinned[i].ptr);
  free(g_pinned);
  g_pinned = NULL;
  g_pinned_n = g_pinned_cap = 0;
  pthread_mutex_unlock(&g_pinned_mu);
}

/* ---- counters: fallback ops in a name-sorted array ---- */
typedef struct {
  char* name;
  uint64_t count;
} tpu_fallback_entry_t;

static pthread_mutex_t g_fb_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_fallback_entry_t* g_fb;
static size_t g_fb_n, g_fb_cap;

/* Index of `name` or where it would go; *found set. Caller holds g_fb_mu. */
static size_t fallback_find(const char* name, bool* found) {
  size_t lo = 0, hi = g_fb_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(g_fb[mid].name, name);
    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0) lo = mid + 1; else hi = mid;
  }
  *found = false;
  return lo;
}

void tpu_stats_record_fallback(const char* op_name) {
  if (!op_name) op_name = "(unknown)";
  pthread_mutex_lock(&g_fb_mu);
  bool found;
  size_t at = fallback_find(op_name, &found);
  if (found) {
    g_fb[at].count++;
  } else {
    char* copy = strdup(op_name);
    if (copy && g_fb_n == g_fb_cap) {
      size_t cap = g_fb_cap ? g_fb_cap * 2 : 32;
      tpu_fallback_entry_t* grown = realloc(g_fb, cap * sizeof(*grown));
      if (grown) {
        g_fb = grown;
        g_fb_cap = cap;
      }
    }
    if (copy && g_fb_n < g_fb_cap) {
      memmove(g_fb + at + 1, g_fb + at, (g_fb_n - at) * sizeof(*g_fb));
      g_fb[at] = (tpu_fallback_entry_t){.name = copy, .count = 1};
      g_fb_n++;
    } else {
      free(copy); /* out of memory: the count is dropped, never a crash */
    }
  }
  pthread_mutex_unlock(&g_fb_mu);
}

void tpu_stats_fallback_foreach(void (*fn)(void* ctx, const char* name, uint64_t count),
                                void* ctx) {
  if (!fn) return;
  /* Snapshot first so that `fn` may call back into the counters. */
  pthread_mutex_lock(&g_fb_mu);
  size_t n = g_fb_n, bytes = 0;
  if (n == 0) {
    pthread_mutex_unlock(&g_fb_mu);
    return;
  }
  for (size_t i = 0; i < n; i++) bytes += strlen(g_fb[i].name) + 1;
  tpu_fallback_entry_t* snap = malloc(n * sizeof(*snap) + bytes);
  if (!snap) {
    for (size_t i = 0; i < n; i++) fn(ctx, g_fb[i].name, g_fb[i].count);
    pthread_mutex_unlock(&g_fb_mu);
    return;
  }
  char* names = (char*)(snap + n);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(g_fb[i].name) + 1;
    memcpy(names, g_fb[i].name, len);
    snap[i] = (tpu_fallback_entry_t){.name = names, .count = g_fb[i].count};
    names += len;
  }
  pthread_mutex_unlock(&g_fb_mu);
  for (size_t i = 0; i < n; i++) fn(ctx, snap[i].name, snap[i].count);
  free(snap);
}

static void fallback_release_all(void) {
  pthread_mutex_lock(&g_fb_mu);
  for (size_t i = 0; i < g_fb_n; i++) free(g_fb[i].name);
  free(g_fb);
  g_fb = NULL;
  g_fb_n = g_fb_cap = 0;
  pthread_mutex_unlock(&g_fb_mu);
}

void tpu_stats_fallback_reset(void) { fallback_release_all(); }

void tpu_stats_record_native(void) { __atomic_fetch_add(&g_native_count, 1, __ATOMIC_RELAXED); }

uint64_t tpu_stats_native_count(void) { return __atomic_load_n(&g_native_count, __ATOMIC_RELAXED); }
