/* Environment parsing and host facts. */
#define _GNU_SOURCE
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpu/base.h"

static const char* skip_space(const char* s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

static bool rest_is_space(const char* s) { return *skip_space(s) == '\0'; }

tpu_status_t tpu_parse_bytes(const char* name, const char* text, uint64_t* out_bytes) {
  if (!name) name = "value";
  if (!out_bytes) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: out_bytes is NULL", name);
  if (!text) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: no value given", name);
  const char* p = skip_space(text);
  if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) goto bad;
  uint64_t whole = 0;
  while (isdigit((unsigned char)*p)) {
    if (__builtin_mul_overflow(whole, 10, &whole) ||
        __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
      goto overflow;
    p++;
  }
  uint64_t frac_num = 0, frac_den = 1;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p) && !isdigit((unsigned char)p[-2])) goto bad;
    for (; isdigit((unsigned char)*p); p++) {
      if (frac_den < 1000000000000000ull) { /* ignore digits beyond 1e-15 */
        frac_num = frac_num * 10 + (uint64_t)(*p - '0');
        frac_den *= 10;
      }
    }
  }
  p = skip_space(p);
  uint64_t mult = 1;
  switch (toupper((unsigned char)*p)) {
    case 'K': mult = 1ull << 10; p++; break;
    case 'M': mult = 1ull << 20; p++; break;
    case 'G': mult = 1ull << 30; p++; break;
    case 'T': mult = 1ull << 40; p++; break;
    default: break;
  }
  if (mult != 1 && (*p == 'i' || *p == 'I')) {
    p++;
    if (toupper((unsigned char)*p) != 'B') goto bad;
  }
  if (toupper((unsigned char)*p) == 'B') p++;
  if (!rest_is_space(p)) goto bad;
  uint64_t bytes;
  if (__builtin_mul_overflow(whole, mult, &bytes)) goto overflow;
  if (frac_num) {
    /* frac_num / frac_den < 1 and mult <= 2^40, frac_den <= 1e15: use long double. */
    long double extra = (long double)frac_num * (long double)mult / (long double)frac_den;
    if (__builtin_add_overflow(bytes, (uint64_t)extra, &bytes)) goto overflow;
  }
  *out_bytes = bytes;
  return TPU_OK;
bad:
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                   "invalid byte size for %s: '%s' (expected e.g. '8G', '512M', '1.5GiB' or "
                   "a number of bytes)",
                   name, text);
overflow:
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "byte size for %s is too large: '%s'", name,
                   text);
}

tpu_status_t tpu_parse_int(const char* name, const char* text, int64_t min, int64_t max,
                           int64_t* out_value) {
  if (!name) name = "value";
  if (!out_value) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: out_value is NULL", name);
  if (!text) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "%s: no value given", name);
  const char* p = skip_space(text);
  bool negative = false;
  if (*p == '+' || *p == '-') negative = *p++ == '-';
  if (!isdigit((unsigned char)*p)) goto bad;
  uint64_t mag = 0;
  bool overflow = false;
  for (; isdigit((unsigned char)*p); p++) {
    if (__builtin_mul_overflow(mag, 10, &mag) ||
        __builtin_add_overflow(mag, (uint64_t)(*p - '0'), &mag))
      overflow = true;
  }
  if (!rest_is_space(p)) goto bad;
  int64_t value;
  if (overflow || mag > (uint64_t)INT64_MAX + (negative ? 1u : 0u)) goto range;
  value = negative ? (int64_t)(0 - mag) : (int64_t)mag;
  if (value < min || value > max) goto range;
  *out_value = value;
  return TPU_OK;
bad:
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                   "invalid value for %s: '%s' (expected an integer in [%lld, %lld])", name, text,
                   (long long)min, (long long)max);
range:
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT,
                   "value for %s is out of range: '%s' (expected an integer in [%lld, %lld])",
                   name, text, (long long)min, (long long)max);
}

const char* tpu_env_value(const char* name) {
  const char* v = getenv(name);
  return v && !rest_is_space(v) ? v : NULL;
}

tpu_status_t tpu_env_choice(const char* name, const char* const* choices, int32_t n,
                            int32_t* out_index) {
  if (!name || !out_index || (n > 0 && !choices))
    return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "tpu_env_choice: NULL argument");
  *out_index = -1;
  const char* v = getenv(name);
  if (!v) return TPU_OK;
  const char* p = skip_space(v);
  size_t len = strlen(p);
  while (len > 0 && isspace((unsigned char)p[len - 1])) len--;
  if (len == 0) return TPU_OK;
  char expected[256];
  size_t used = 0;
  expected[0] = '\0';
  for (int32_t i = 0; i < n; i++) {
    if (strlen(choices[i]) == len && strncmp(choices[i], p, len) == 0) {
      *out_index = i;
      return TPU_OK;
    }
    int w = snprintf(expected + used, sizeof(expected) - used, "%s'%s'", i ? ", " : "", choices[i]);
    if (w > 0) used = used + (size_t)w < sizeof(expected) ? used + (size_t)w : sizeof(expected) - 1;
  }
  return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "invalid value for %s: '%s' (expected one of %s)", name, v,
                   expected);
}

uint64_t tpu_host_physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return (uint64_t)pages * (uint64_t)page_size;
}

/* First number after `key` in the file (a /proc or cgroup file), or 0. */
static uint64_t read_u64_after(const char* path, const char* key) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  size_t klen = key ? strlen(key) : 0;
  while (fgets(line, sizeof(line), f)) {
    if (klen && strncmp(line, key, klen) != 0) continue;
    char* end = NULL;
    unsigned long long u = strtoull(line + klen, &end, 10);
    if (end != line + klen) v = (uint64_t)u;
    if (v && key && strstr(end, "kB")) v *= 1024;
    break;
  }
  fclose(f);
  return v;
}

uint64_t tpu_host_available_memory(void) {
  uint64_t phys = tpu_host_physical_memory();
  uint64_t avail = read_u64_after("/proc/meminfo", "MemAvailable:");
  if (avail == 0 || (phys && avail > phys)) avail = phys;
  /* A container's memory limit (cgroup v2, then v1): what is left under it. */
  uint64_t limit = read_u64_after("/sys/fs/cgroup/memory.max", NULL);
  uint64_t used = read_u64_after("/sys/fs/cgroup/memory.current", NULL);
  if (limit == 0) {
    limit = read_u64_after("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL);
    used = read_u64_after("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL);
  }
  if (limit > 0 && (phys == 0 || limit < phys)) {
    uint64_t left = limit > used ? limit - used : 0;
    if (left < avail) avail = left;
  }
  return avail;
}

int tpu_host_cpu_count(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? (int)n : 1;
}

uint64_t tpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
