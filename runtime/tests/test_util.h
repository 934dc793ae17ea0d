/* Minimal test harness for the C unit tests: CHECK macros that count passes
 * and failures, and a report line "N passed, N failed". Each test program
 * includes this once. */
#ifndef TPU_TESTS_TEST_UTIL_H_
#define TPU_TESTS_TEST_UTIL_H_

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tpu/base.h"
#include "tpu/status.h"

static int tpu_test_passed_;
static int tpu_test_failed_;

static inline void tpu_test_result_(bool ok, const char* file, int line, const char* what,
                                    const char* detail) {
  if (ok) {
    tpu_test_passed_++;
    return;
  }
  tpu_test_failed_++;
  fprintf(stderr, "%s:%d: CHECK failed: %s%s%s\n", file, line, what, detail ? " -- " : "",
          detail ? detail : "");
}

#define CHECK(cond) tpu_test_result_((cond) ? true : false, __FILE__, __LINE__, #cond, NULL)

/* CHECK with a printf-style detail line. */
#define CHECKF(cond, ...)                                                     \
  do {                                                                        \
    char chkf_[512];                                                          \
    snprintf(chkf_, sizeof(chkf_), __VA_ARGS__);                              \
    tpu_test_result_((cond) ? true : false, __FILE__, __LINE__, #cond, chkf_); \
  } while (0)

/* Expects TPU_OK; frees (and prints) an unexpected error. */
#define CHECK_OK(expr)                                                                   \
  do {                                                                                   \
    tpu_status_t chk_st_ = (expr);                                                       \
    char chk_buf_[1024];                                                                 \
    snprintf(chk_buf_, sizeof(chk_buf_), "%s: %s", tpu_status_code_name(tpu_status_code(chk_st_)), \
             tpu_status_message(chk_st_));                                               \
    tpu_test_result_(chk_st_ == TPU_OK, __FILE__, __LINE__, #expr, chk_st_ ? chk_buf_ : NULL); \
    tpu_status_free(chk_st_);                                                            \
  } while (0)

/* Expects an error with `code` whose message contains `substr` (may be NULL);
 * frees it. */
#define CHECK_STATUS(expr, code, substr)                                                 \
  do {                                                                                   \
    tpu_status_t chk_st_ = (expr);                                                       \
    const char* chk_sub_ = (substr);                                                     \
    const char* chk_msg_ = tpu_status_message(chk_st_);                                  \
    bool chk_ok_ = tpu_status_code(chk_st_) == (code) &&                                 \
                   (chk_sub_ == NULL || strstr(chk_msg_, chk_sub_) != NULL);             \
    char chk_buf_[1024];                                                                 \
    snprintf(chk_buf_, sizeof(chk_buf_), "got %s: '%s', expected %s containing '%s'",    \
             tpu_status_code_name(tpu_status_code(chk_st_)), chk_msg_,                   \
             tpu_status_code_name(code), chk_sub_ ? chk_sub_ : "");                      \
    tpu_test_result_(chk_ok_, __FILE__, __LINE__, #expr, chk_ok_ ? NULL : chk_buf_);     \
    tpu_status_free(chk_st_);                                                            \
  } while (0)

#define CHECK_STREQ(a, b)                                                          \
  do {                                                                             \
    const char* chk_a_ = (a);                                                      \
    const char* chk_b_ = (b);                                                      \
    bool chk_ok_ = chk_a_ && chk_b_ && strcmp(chk_a_, chk_b_) == 0;                \
    char chk_buf_[1024];                                                           \
    snprintf(chk_buf_, sizeof(chk_buf_), "'%s' != '%s'", chk_a_ ? chk_a_ : "(null)", \
             chk_b_ ? chk_b_ : "(null)");                                          \
    tpu_test_result_(chk_ok_, __FILE__, __LINE__, #a " == " #b, chk_ok_ ? NULL : chk_buf_); \
  } while (0)

#define RUN_TEST(fn)                     \
  do {                                   \
    fprintf(stderr, "[ RUN ] %s\n", #fn); \
    fn();                                \
  } while (0)

/* Prints the summary; evaluates to main()'s exit code. */
#define TEST_REPORT() \
  (printf("%d passed, %d failed\n", tpu_test_passed_, tpu_test_failed_), tpu_test_failed_ != 0)

/* The main() of a kernel test: run_all() with a 2-thread pool in `pool`, then
 * single-threaded (`pool` NULL), then on the portable kernels
 * (TORCH_TPU_KERNEL_ISA=generic). A macro: setenv needs the test file's
 * feature macros. */
#define TPU_TEST_KERNEL_MAIN(run_all, pool)                          \
  int main(void) {                                                   \
    tpu_status_t s_ = tpu_threadpool_create(2, &(pool));             \
    if (s_) {                                                        \
      printf("pool: %s\n", tpu_status_message(s_));                 \
      tpu_status_free(s_);                                           \
      return 1;                                                      \
    }                                                                \
    run_all();                                                       \
    tpu_threadpool_destroy(pool);                                    \
    (pool) = NULL;                                                   \
    run_all();                                                       \
    setenv("TORCH_TPU_KERNEL_ISA", "generic", 1);                    \
    run_all();                                                       \
    unsetenv("TORCH_TPU_KERNEL_ISA");                                \
    return TEST_REPORT();                                            \
  }

#endif /* TPU_TESTS_TEST_UTIL_H_ */
