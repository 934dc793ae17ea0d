/* Per-chip caching allocator. Blocks come from posix_memalign and are kept
 * in two sorted arrays: every reserved block by address (owns_pointer,
 * deallocate) and the cached ones by size (best fit). Requests round up to
 * 512 B (<= 1 MiB) or 2 MiB; a cached block is reused when it is not much
 * larger than the request. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host_internal.h"

void tpu_host_format_bytes(char* buf, size_t cap, uint64_t bytes, int decimals) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  if (u == 0) {
    snprintf(buf, cap, "%llu bytes", (unsigned long long)bytes);
  } else {
    snprintf(buf, cap, "%.*f %s", decimals, v, units[u]);
  }
}

static size_t round_size(size_t size) {
  if (size <= TPU_HOST_SMALL_MAX)
    return (size + TPU_HOST_SMALL_ROUND - 1) & ~(size_t)(TPU_HOST_SMALL_ROUND - 1);
  return (size + TPU_HOST_LARGE_ROUND - 1) & ~(size_t)(TPU_HOST_LARGE_ROUND - 1);
}

/* Largest cached block size that may serve a request of `rsize` bytes. */
static size_t max_fit(size_t rsize) {
  if (rsize <= TPU_HOST_SMALL_MAX) return 2 * rsize;
  size_t slack = rsize / 8 > TPU_HOST_LARGE_ROUND ? rsize / 8 : TPU_HOST_LARGE_ROUND;
  return rsize + slack;
}

/* ---- sorted arrays ---- */
static bool array_insert(tpu_host_block_t*** arr, size_t* n, size_t* cap, size_t at,
                         tpu_host_block_t* b) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 64;
    tpu_host_block_t** grown = realloc(*arr, ncap * sizeof(**arr));
    if (!grown) return false;
    *arr = grown;
    *cap = ncap;
  }
  memmove(*arr + at + 1, *arr + at, (*n - at) * sizeof(**arr));
  (*arr)[at] = b;
  (*n)++;
  return true;
}

static void array_remove(tpu_host_block_t** arr, size_t* n, size_t at) {
  memmove(arr + at, arr + at + 1, (*n - at - 1) * sizeof(*arr));
  (*n)--;
}

/* First index whose block starts after `p`. */
static size_t addr_upper(const tpu_host_allocator_t* a, const char* p) {
  size_t lo = 0, hi = a->num_blocks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)a->by_addr[mid]->ptr <= (uintptr_t)p) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/* Block containing address `p` (live or cached), or NULL; *out_index set. */
static tpu_host_block_t* find_block(const tpu_host_allocator_t* a, const void* p,
                                    size_t* out_index) {
  size_t i = addr_upper(a, p);
  if (i == 0) return NULL;
  tpu_host_block_t* b = a->by_addr[i - 1];
  if ((uintptr_t)p - (uintptr_t)b->ptr >= b->size) return NULL;
  if (out_index) *out_index = i - 1;
  return b;
}

static bool cache_less(const tpu_host_block_t* x, size_t size, const char* ptr) {
  return x->size < size || (x->size == size && (uintptr_t)x->ptr < (uintptr_t)ptr);
}

static size_t cache_lower(const tpu_host_allocator_t* a, size_t size, const char* ptr) {
  size_t lo = 0, hi = a->num_cached;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cache_less(a->cache[mid], size, ptr)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static void update_peaks(tpu_hal_memory_stats_t* s) {
  if (s->allocated_bytes > s->peak_allocated_bytes) s->peak_allocated_bytes = s->allocated_bytes;
  if (s->reserved_bytes > s->peak_reserved_bytes) s->peak_reserved_bytes = s->reserved_bytes;
}

static void mark_live(tpu_host_allocator_t* a, tpu_host_block_t* b, size_t requested) {
  b->live = true;
  b->pool = a->recording;
  b->requested = requested;
  a->stats.allocated_bytes += b->size;
  a->stats.requested_bytes += requested;
  a->stats.num_allocs++;
  update_peaks(&a->stats);
}

/* Returns cached blocks whose last users have finished to the system. */
static void release_cached(tpu_host_allocator_t* a) {
  uint64_t done = tpu_host_queue_completed(a->queue);
  size_t kept = 0;
  for (size_t i = 0; i < a->num_cached; i++) {
    tpu_host_block_t* b = a->cache[i];
    if (b->free_ticket > done) {
      a->cache[kept++] = b;
      continue;
    }
    size_t at;
    if (find_block(a, b->ptr, &at) == b) array_remove(a->by_addr, &a->num_blocks, at);
    a->cached_bytes -= b->size;
    a->stats.reserved_bytes -= b->size;
    a->stats.num_segments--;
    a->stats.num_device_frees++;
    free(b->ptr);
    free(b);
  }
  a->num_cached = kept;
}

void tpu_host_allocator_init(tpu_host_allocator_t* a, int32_t device_index, uint64_t budget,
                             tpu_host_queue_t* queue) {
  memset(a, 0, sizeof(*a));
  pthread_mutex_init(&a->mu, NULL);
  a->device_index = device_index;
  a->queue = queue;
  a->stats.budget_bytes = budget;
}

void tpu_host_allocator_deinit(tpu_host_allocator_t* a) {
  for (size_t i = 0; i < a->num_blocks; i++) {
    free(a->by_addr[i]->ptr);
    free(a->by_addr[i]);
  }
  free(a->by_addr);
  free(a->cache);
  pthread_mutex_destroy(&a->mu);
  memset(a, 0, sizeof(*a));
}

/* Reserves a new block of `rsize` bytes; NULL if the host has no memory. */
static tpu_host_block_t* new_block(tpu_host_allocator_t* a, size_t rsize) {
  tpu_host_block_t* b = calloc(1, sizeof(*b));
  if (!b) return NULL;
  size_t align = rsize <= TPU_HOST_SMALL_MAX ? TPU_HOST_SMALL_ALIGN : TPU_HOST_LARGE_ALIGN;
  void* p = NULL;
  if (posix_memalign(&p, align, rsize) != 0 || !p) {
    free(b);
    return NULL;
  }
#ifdef MADV_HUGEPAGE
  /* Large blocks (whole 2 MiB units, 2 MiB aligned) ask for transparent huge
   * pages: weights and activations are streamed, and with 4 KiB pages a
   * decode step's weight reads miss the TLB every page. Advice only; failure
   * is harmless. */
  if (rsize > TPU_HOST_SMALL_MAX) (void)madvise(p, rsize, MADV_HUGEPAGE);
#endif
  b->ptr = p;
  b->size = rsize;
  if (!array_insert(&a->by_addr, &a->num_blocks, &a->cap_blocks, addr_upper(a, b->ptr), b)) {
    free(p);
    free(b);
    return NULL;
  }
  a->stats.reserved_bytes += rsize;
  a->stats.num_segments++;
  a->stats.num_device_allocs++;
  return b;
}

tpu_status_t tpu_host_allocator_allocate(tpu_host_allocator_t* a, size_t size, void** out_ptr) {
  if (!out_ptr) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu:%d: allocate: out_ptr is NULL",
                                 a->device_index);
  *out_ptr = NULL;
  if (size == 0) return TPU_OK;
  bool host_failed = false, released = false;
  pthread_mutex_lock(&a->mu);
  uint64_t budget = a->stats.budget_bytes;
  if (size <= budget && size <= SIZE_MAX - TPU_HOST_LARGE_ROUND) {
    size_t rsize = round_size(size);
    for (;;) {
      size_t i = cache_lower(a, rsize, NULL);
      if (i < a->num_cached && a->cache[i]->size <= max_fit(rsize)) {
        tpu_host_block_t* b = a->cache[i];
        array_remove(a->cache, &a->num_cached, i);
        a->cached_bytes -= b->size;
        mark_live(a, b, size);
        a->stats.num_cache_hits++;
        pthread_mutex_unlock(&a->mu);
        *out_ptr = b->ptr;
        return TPU_OK;
      }
      if (a->stats.reserved_bytes + rsize <= budget) {
        tpu_host_block_t* b = new_block(a, rsize);
        if (b) {
          mark_live(a, b, size);
          pthread_mutex_unlock(&a->mu);
          *out_ptr = b->ptr;
          return TPU_OK;
        }
        host_failed = true;
      }
      /* Retry once after returning the cache, if that could make room. */
      bool could_help = a->num_cached > 0 &&
                        (host_failed || budget - (a->stats.reserved_bytes - a->cached_bytes) >= rsize);
      if (released || !could_help) break;
      released = true;
      pthread_mutex_unlock(&a->mu);
      tpu_host_queue_wait_idle(a->queue);
      pthread_mutex_lock(&a->mu);
      release_cached(a);
    }
  }
  a->stats.num_ooms++;
  uint64_t free_bytes = budget - a->stats.reserved_bytes + a->cached_bytes;
  uint64_t allocated = a->stats.allocated_bytes;
  pthread_mutex_unlock(&a->mu);
  char req[32], fre[32], tot[32], alc[32];
  tpu_host_format_bytes(req, sizeof(req), size, 2);
  tpu_host_format_bytes(fre, sizeof(fre), free_bytes, 1);
  tpu_host_format_bytes(tot, sizeof(tot), budget, 1);
  tpu_host_format_bytes(alc, sizeof(alc), allocated, 1);
  return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY,
                   "tpu:%d out of memory: tried to allocate %s (%llu bytes); %s free of %s "
                   "budget, %s allocated%s",
                   a->device_index, req, (unsigned long long)size, fre, tot, alc,
                   host_failed ? " (the host itself is out of memory)" : "");
}

void tpu_host_allocator_deallocate(tpu_host_allocator_t* a, void* ptr) {
  if (!ptr) return;
  uint64_t ticket = tpu_host_queue_submitted(a->queue);
  pthread_mutex_lock(&a->mu);
  tpu_host_block_t* b = find_block(a, ptr, NULL);
  tpu_host_pool_t* pool = b ? (b->pool ? b->pool : a->recording) : NULL;
  if (b && b->live && b->ptr == (char*)ptr && pool &&
      array_insert(&pool->held, &pool->num_held, &pool->cap_held, pool->num_held, b)) {
    /* A capture's replays may still use it: held, not cached. */
    b->live = false;
    b->held = true;
    b->pool = pool;
    a->stats.allocated_bytes -= b->size;
    a->stats.requested_bytes -= b->requested;
    a->stats.num_frees++;
  } else if (b && b->live && b->ptr == (char*)ptr && pool) {
    /* No room to hold it: it stays live (reserved) until the process ends. */
  } else if (b && b->live && b->ptr == (char*)ptr) {
    size_t at = cache_lower(a, b->size, b->ptr);
    if (array_insert(&a->cache, &a->num_cached, &a->cap_cached, at, b)) {
      b->live = false;
      b->free_ticket = ticket;
      a->cached_bytes += b->size;
      a->stats.allocated_bytes -= b->size;
      a->stats.requested_bytes -= b->requested;
      a->stats.num_frees++;
    } else {
      /* No room to cache it: wait for its users, then return it at once. */
      pthread_mutex_unlock(&a->mu);
      tpu_host_queue_wait_ticket(a->queue, ticket);
      pthread_mutex_lock(&a->mu);
      size_t i;
      if (find_block(a, ptr, &i) == b && b->live) {
        array_remove(a->by_addr, &a->num_blocks, i);
        a->stats.allocated_bytes -= b->size;
        a->stats.requested_bytes -= b->requested;
        a->stats.reserved_bytes -= b->size;
        a->stats.num_segments--;
        a->stats.num_device_frees++;
        a->stats.num_frees++;
        free(b->ptr);
        free(b);
      }
    }
  }
  pthread_mutex_unlock(&a->mu);
}

tpu_status_t tpu_host_allocator_begin_pool(tpu_host_allocator_t* a, tpu_host_pool_t* pool) {
  pthread_mutex_lock(&a->mu);
  bool busy = a->recording != NULL;
  if (!busy) a->recording = pool;
  pthread_mutex_unlock(&a->mu);
  if (busy)
    return TPU_ERROR(TPU_STATUS_FAILED_PRECONDITION, "tpu:%d: a graph is already being captured on this device",
                     a->device_index);
  return TPU_OK;
}

void tpu_host_allocator_end_pool(tpu_host_allocator_t* a) {
  pthread_mutex_lock(&a->mu);
  a->recording = NULL;
  pthread_mutex_unlock(&a->mu);
}

void tpu_host_allocator_release_pool(tpu_host_allocator_t* a, tpu_host_pool_t* pool) {
  uint64_t ticket = tpu_host_queue_submitted(a->queue);
  pthread_mutex_lock(&a->mu);
  if (a->recording == pool) a->recording = NULL;
  for (size_t i = 0; i < a->num_blocks; i++)
    if (a->by_addr[i]->pool == pool && a->by_addr[i]->live) a->by_addr[i]->pool = NULL;
  for (size_t i = 0; i < pool->num_held; i++) {
    tpu_host_block_t* b = pool->held[i];
    b->held = false;
    b->pool = NULL;
    size_t at = cache_lower(a, b->size, b->ptr);
    if (array_insert(&a->cache, &a->num_cached, &a->cap_cached, at, b)) {
      b->free_ticket = ticket;
      a->cached_bytes += b->size;
    } else { /* no room in the cache: the queue is idle, return it at once */
      size_t j;
      if (find_block(a, b->ptr, &j) == b) array_remove(a->by_addr, &a->num_blocks, j);
      a->stats.reserved_bytes -= b->size;
      a->stats.num_segments--;
      a->stats.num_device_frees++;
      free(b->ptr);
      free(b);
    }
  }
  pthread_mutex_unlock(&a->mu);
  free(pool->held);
  pool->held = NULL;
  pool->num_held = pool->cap_held = 0;
}

void tpu_host_allocator_empty_cache(tpu_host_allocator_t* a) {
  tpu_host_queue_wait_idle(a->queue);
  pthread_mutex_lock(&a->mu);
  release_cached(a);
  pthread_mutex_unlock(&a->mu);
}

void tpu_host_allocator_stats(tpu_host_allocator_t* a, tpu_hal_memory_stats_t* out) {
  pthread_mutex_lock(&a->mu);
  *out = a->stats;
  pthread_mutex_unlock(&a->mu);
}

void tpu_host_allocator_reset_peak(tpu_host_allocator_t* a) {
  pthread_mutex_lock(&a->mu);
  a->stats.peak_allocated_bytes = a->stats.allocated_bytes;
  a->stats.peak_reserved_bytes = a->stats.reserved_bytes;
  pthread_mutex_unlock(&a->mu);
}

void tpu_host_allocator_reset_accumulated(tpu_host_allocator_t* a) {
  pthread_mutex_lock(&a->mu);
  a->stats.num_allocs = 0;
  a->stats.num_frees = 0;
  a->stats.num_cache_hits = 0;
  a->stats.num_device_allocs = 0;
  a->stats.num_device_frees = 0;
  a->stats.num_ooms = 0;
  pthread_mutex_unlock(&a->mu);
}

size_t tpu_host_allocator_blocks(tpu_host_allocator_t* a, tpu_hal_memory_block_t* out, size_t cap) {
  pthread_mutex_lock(&a->mu);
  size_t n = a->num_blocks;
  for (size_t i = 0; i < n && i < cap && out; i++) {
    const tpu_host_block_t* b = a->by_addr[i];
    out[i] = (tpu_hal_memory_block_t){.address = (uint64_t)(uintptr_t)b->ptr, .size = b->size,
                                      .requested = b->live ? b->requested : 0, .allocated = b->live};
  }
  pthread_mutex_unlock(&a->mu);
  return n;
}

void tpu_host_allocator_info(tpu_host_allocator_t* a, uint64_t* out_free, uint64_t* out_total) {
  pthread_mutex_lock(&a->mu);
  uint64_t budget = a->stats.budget_bytes;
  uint64_t free_bytes = budget - a->stats.reserved_bytes + a->cached_bytes;
  pthread_mutex_unlock(&a->mu);
  if (out_free) *out_free = free_bytes;
  if (out_total) *out_total = budget;
}

bool tpu_host_allocator_contains(tpu_host_allocator_t* a, const void* ptr, size_t size) {
  if (!ptr) return false;
  pthread_mutex_lock(&a->mu);
  tpu_host_block_t* b = find_block(a, ptr, NULL);
  bool ok = b && b->live && size <= b->size - ((uintptr_t)ptr - (uintptr_t)b->ptr);
  pthread_mutex_unlock(&a->mu);
  return ok;
}
