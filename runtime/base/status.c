/* Error statuses: one heap block per status holding code, location and
 * message. If that block cannot be allocated a static per-code fallback is
 * returned instead; freeing it is a no-op. */
#include "tpu/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status_s {
  tpu_status_code_t code;
  bool is_static;
  const char* location; /* points into the same block (or a literal) */
  const char* message;
};

#define TPU_STATUS_NUM_CODES 9
#define TPU_STATUS_FALLBACK_MSG "out of memory while reporting an error"

static struct tpu_status_s g_fallback[TPU_STATUS_NUM_CODES] = {
#define FB(c) [c] = {.code = c, .is_static = true, .location = "", .message = TPU_STATUS_FALLBACK_MSG}
    FB(TPU_STATUS_OK), FB(TPU_STATUS_INVALID_ARGUMENT), FB(TPU_STATUS_OUT_OF_MEMORY),
    FB(TPU_STATUS_UNIMPLEMENTED), FB(TPU_STATUS_OUT_OF_RANGE),
    FB(TPU_STATUS_FAILED_PRECONDITION), FB(TPU_STATUS_INTERNAL), FB(TPU_STATUS_UNAVAILABLE),
    FB(TPU_STATUS_LINALG),
#undef FB
};

static tpu_status_code_t normalize_code(tpu_status_code_t code) {
  if ((int)code <= 0 || (int)code >= TPU_STATUS_NUM_CODES) return TPU_STATUS_INTERNAL;
  return code;
}

static tpu_status_t fallback(tpu_status_code_t code) { return &g_fallback[normalize_code(code)]; }

static const char* basename_of(const char* file) {
  if (!file) return "";
  const char* slash = strrchr(file, '/');
  return slash ? slash + 1 : file;
}

/* Builds a status from a location string and an already formatted message. */
static tpu_status_t status_new(tpu_status_code_t code, const char* location, const char* prefix,
                               const char* message) {
  size_t loc_len = strlen(location);
  size_t pre_len = prefix ? strlen(prefix) + 2 : 0;
  size_t msg_len = strlen(message);
  struct tpu_status_s* s = malloc(sizeof(*s) + loc_len + 1 + pre_len + msg_len + 1);
  if (!s) return fallback(code);
  char* loc = (char*)(s + 1);
  char* msg = loc + loc_len + 1;
  memcpy(loc, location, loc_len + 1);
  if (prefix) {
    memcpy(msg, prefix, pre_len - 2);
    memcpy(msg + pre_len - 2, ": ", 2);
  }
  memcpy(msg + pre_len, message, msg_len + 1);
  s->code = code;
  s->is_static = false;
  s->location = loc;
  s->message = msg;
  return s;
}

/* vasprintf-like helper; returns NULL on failure. */
static char* format_v(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt ? fmt : "", ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char* buf = malloc((size_t)n + 1);
  if (!buf) return NULL;
  vsnprintf(buf, (size_t)n + 1, fmt ? fmt : "", ap);
  return buf;
}

tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* file, int line,
                              const char* fmt, va_list ap) {
  if (code == TPU_STATUS_OK) return TPU_OK;
  code = normalize_code(code);
  char location[256];
  snprintf(location, sizeof(location), "%s:%d", basename_of(file), line);
  char* message = format_v(fmt, ap);
  if (!message) return fallback(code);
  tpu_status_t s = status_new(code, location, NULL, message);
  free(message);
  return s;
}

tpu_status_t tpu_status_make(tpu_status_code_t code, const char* file, int line,
                             const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t s = tpu_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return s;
}

tpu_status_code_t tpu_status_code(tpu_status_t status) {
  return status ? status->code : TPU_STATUS_OK;
}

const char* tpu_status_message(tpu_status_t status) { return status ? status->message : ""; }

const char* tpu_status_location(tpu_status_t status) { return status ? status->location : ""; }

const char* tpu_status_code_name(tpu_status_code_t code) {
  switch (code) {
    case TPU_STATUS_OK: return "OK";
    case TPU_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case TPU_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case TPU_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case TPU_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case TPU_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case TPU_STATUS_INTERNAL: return "INTERNAL";
    case TPU_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case TPU_STATUS_LINALG: return "LINALG";
  }
  return "UNKNOWN";
}

void tpu_status_free(tpu_status_t status) {
  if (status && !status->is_static) free(status);
}

tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...) {
  if (status == TPU_OK) return TPU_OK;
  va_list ap;
  va_start(ap, fmt);
  char* prefix = format_v(fmt, ap);
  va_end(ap);
  if (!prefix) return status;
  tpu_status_t s = status_new(status->code, status->location, prefix, status->message);
  free(prefix);
  if (s->is_static) return status; /* keep the original message rather than lose it */
  tpu_status_free(status);
  return s;
}
