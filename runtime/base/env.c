/* Environment parsing and host facts. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdlib.h>
#include <sched.h>
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

uint64_t tpu_host_physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return (uint64_t)pages * (uint64_t)page_size;
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
