/* files.c - the on-disk cache's directory and small file helpers (base.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpu/base.h"

void tpu_cache_dir(char* out, size_t n) {
  const char* d = tpu_env_value("TORCH_TPU_CACHE_DIR");
  const char* x = tpu_env_value("XDG_CACHE_HOME");
  const char* h = tpu_env_value("HOME");
  if (d) {
    snprintf(out, n, "%s", d);
  } else if (x) {
    snprintf(out, n, "%s/torch_tpu", x);
  } else if (h) {
    snprintf(out, n, "%s/.cache/torch_tpu", h);
  } else {
    snprintf(out, n, "/tmp/torch_tpu-%ld", (long)getuid());
  }
}

tpu_status_t tpu_make_dirs(const char* dir) {
  char path[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof(path)) return TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "bad directory name '%s'", dir);
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (path[i] != '/' && path[i] != 0) continue;
    char c = path[i];
    path[i] = 0;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      return TPU_ERROR(TPU_STATUS_INTERNAL, "cannot create directory %s: %s", path, strerror(errno));
    }
    path[i] = c;
  }
  return TPU_OK;
}

char* tpu_read_file(const char* path, size_t max, size_t* out_len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  char* s = malloc(max + 1);
  size_t n = s ? fread(s, 1, max, f) : 0;
  fclose(f);
  if (!s) return NULL;
  s[n] = 0;
  if (out_len) *out_len = n;
  return s;
}

tpu_status_t tpu_write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) return TPU_ERROR(TPU_STATUS_INTERNAL, "cannot write %s: %s", path, strerror(errno));
  size_t w = fwrite(data, 1, n, f);
  int c = fclose(f);
  if (w != n || c != 0) return TPU_ERROR(TPU_STATUS_INTERNAL, "cannot write %s: %s", path, strerror(errno));
  return TPU_OK;
}

uint64_t tpu_fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = data;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
