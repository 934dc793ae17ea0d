/* tpu/status.h - error values carried by every fallible runtime call.
 *
 * A tpu_status_t is a pointer: NULL (TPU_OK) means success, anything else is a
 * heap-allocated error owned by whoever receives it. The receiver must either
 * return it further up or release it with tpu_status_free(). An error carries a
 * code, the file:line where it was made and a formatted message that names the
 * operation, the dtype, sizes or device involved.
 *
 * Creating a status never fails: if the message cannot be allocated a static
 * "out of memory while reporting an error" status with the requested code is
 * returned (tpu_status_free() on it is a no-op).
 */
#ifndef TPU_STATUS_H_
#define TPU_STATUS_H_

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_status_code_e {
  TPU_STATUS_OK = 0,
  TPU_STATUS_INVALID_ARGUMENT = 1,  /* bad sizes, strides, values: ValueError */
  TPU_STATUS_OUT_OF_MEMORY = 2,     /* device budget exhausted: torch.OutOfMemoryError */
  TPU_STATUS_UNIMPLEMENTED = 3,     /* op/dtype not supported: NotImplementedError */
  TPU_STATUS_OUT_OF_RANGE = 4,      /* index out of bounds: IndexError */
  TPU_STATUS_FAILED_PRECONDITION = 5, /* wrong state (e.g. no such device) */
  TPU_STATUS_INTERNAL = 6,          /* a bug or an OS failure */
  TPU_STATUS_UNAVAILABLE = 7,       /* resource temporarily unavailable */
  TPU_STATUS_LINALG = 8,            /* a singular or not positive-definite matrix where the
                                       caller asked for errors: torch.linalg.LinAlgError */
} tpu_status_code_t;

typedef struct tpu_status_s* tpu_status_t;

#define TPU_OK ((tpu_status_t)0)

/* Makes an error status. `fmt` is printf-style. Never returns TPU_OK for a
 * non-OK code. Ownership of the result passes to the caller. */
tpu_status_t tpu_status_make(tpu_status_code_t code, const char* file, int line,
                             const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* file,
                              int line, const char* fmt, va_list ap);

/* Code of a status; TPU_STATUS_OK for TPU_OK. */
tpu_status_code_t tpu_status_code(tpu_status_t status);
/* Message without the location; "" for TPU_OK. Borrowed: valid until free. */
const char* tpu_status_message(tpu_status_t status);
/* "file:line" where the status was made; "" for TPU_OK. Borrowed. */
const char* tpu_status_location(tpu_status_t status);
/* Short name of a code, e.g. "OUT_OF_MEMORY". Static string. */
const char* tpu_status_code_name(tpu_status_code_t code);
/* Releases a status; accepts TPU_OK and the static fallback statuses. */
void tpu_status_free(tpu_status_t status);

/* Prepends "<prefix>: " to the message of `status` (which it consumes) and
 * returns the new status. TPU_OK passes through unchanged. */
tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define TPU_ERROR(code, ...) \
  tpu_status_make((code), __FILE__, __LINE__, __VA_ARGS__)

#define TPU_RETURN_IF_ERROR(expr)          \
  do {                                     \
    tpu_status_t tpu_status_tmp_ = (expr); \
    if (tpu_status_tmp_ != TPU_OK) {       \
      return tpu_status_tmp_;              \
    }                                      \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPU_STATUS_H_ */
