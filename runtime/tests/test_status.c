/* Status values and reference-counted objects (runtime/base). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tpu/base.h"
#include "tpu/status.h"

static void test_make_and_accessors(void) {
  int line = __LINE__ + 1;
  tpu_status_t st = TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "index %d out of range for size %zu", 7, (size_t)5);
  CHECK(st != TPU_OK);
  CHECK(tpu_status_code(st) == TPU_STATUS_OUT_OF_RANGE);
  CHECK_STREQ(tpu_status_message(st), "index 7 out of range for size 5");
  char loc[64];
  snprintf(loc, sizeof(loc), "test_status.c:%d", line);
  CHECK_STREQ(tpu_status_location(st), loc);
  tpu_status_free(st);
}

static void test_ok(void) {
  CHECK(TPU_OK == NULL);
  CHECK(tpu_status_code(TPU_OK) == TPU_STATUS_OK);
  CHECK_STREQ(tpu_status_message(TPU_OK), "");
  CHECK_STREQ(tpu_status_location(TPU_OK), "");
  tpu_status_free(TPU_OK); /* no-op */
  CHECK(tpu_status_annotate(TPU_OK, "ignored %d", 1) == TPU_OK);
}

static void test_codes(void) {
  struct {
    tpu_status_code_t code;
    const char* name;
  } cases[] = {
      {TPU_STATUS_OK, "OK"},
      {TPU_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {TPU_STATUS_OUT_OF_MEMORY, "OUT_OF_MEMORY"},
      {TPU_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED"},
      {TPU_STATUS_OUT_OF_RANGE, "OUT_OF_RANGE"},
      {TPU_STATUS_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {TPU_STATUS_INTERNAL, "INTERNAL"},
      {TPU_STATUS_UNAVAILABLE, "UNAVAILABLE"},
      {TPU_STATUS_LINALG, "LINALG"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    CHECK_STREQ(tpu_status_code_name(cases[i].code), cases[i].name);
    if (cases[i].code == TPU_STATUS_OK) continue;
    tpu_status_t st = TPU_ERROR(cases[i].code, "x");
    CHECK(tpu_status_code(st) == cases[i].code);
    tpu_status_free(st);
  }
  CHECK_STREQ(tpu_status_code_name((tpu_status_code_t)99), "UNKNOWN");
  /* A bogus code still makes an error, never TPU_OK. */
  tpu_status_t st = TPU_ERROR((tpu_status_code_t)99, "bogus");
  CHECK(st != TPU_OK);
  CHECK(tpu_status_code(st) != TPU_STATUS_OK);
  tpu_status_free(st);
}

static void test_annotate(void) {
  tpu_status_t st = TPU_ERROR(TPU_STATUS_INVALID_ARGUMENT, "bad stride %d", -3);
  char loc[128];
  snprintf(loc, sizeof(loc), "%s", tpu_status_location(st));
  st = tpu_status_annotate(st, "aten::%s", "add");
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STREQ(tpu_status_message(st), "aten::add: bad stride -3");
  CHECK_STREQ(tpu_status_location(st), loc); /* location of the origin kept */
  st = tpu_status_annotate(st, "tpu:%d", 1);
  CHECK_STREQ(tpu_status_message(st), "tpu:1: aten::add: bad stride -3");
  tpu_status_free(st);
}

static tpu_status_t fails(int* reached) {
  return TPU_ERROR(TPU_STATUS_UNIMPLEMENTED, "dtype %s is not supported", "float16");
}
static tpu_status_t succeeds(int* reached) {
  (*reached)++;
  return TPU_OK;
}
static tpu_status_t chain(bool fail, int* reached) {
  TPU_RETURN_IF_ERROR(succeeds(reached));
  if (fail) TPU_RETURN_IF_ERROR(fails(reached));
  (*reached) += 10;
  return TPU_OK;
}

static void test_return_if_error(void) {
  int reached = 0;
  CHECK_OK(chain(false, &reached));
  CHECK(reached == 11);
  reached = 0;
  CHECK_STATUS(chain(true, &reached), TPU_STATUS_UNIMPLEMENTED, "dtype float16 is not supported");
  CHECK(reached == 1);
}

static void test_long_message(void) {
  char* big = malloc(20001);
  memset(big, 'x', 20000);
  big[20000] = '\0';
  tpu_status_t st = TPU_ERROR(TPU_STATUS_INTERNAL, "%s|end", big);
  CHECK(strlen(tpu_status_message(st)) == 20004);
  CHECK(strcmp(tpu_status_message(st) + 20000, "|end") == 0);
  st = tpu_status_annotate(st, "%s", "pre");
  CHECK(strlen(tpu_status_message(st)) == 20009);
  CHECK(strncmp(tpu_status_message(st), "pre: xxx", 8) == 0);
  tpu_status_free(st);
  free(big);
}

static tpu_status_t makev_wrapper(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t st = tpu_status_makev(TPU_STATUS_UNAVAILABLE, "/some/dir/file.c", 42, fmt, ap);
  va_end(ap);
  return st;
}

static void test_makev(void) {
  tpu_status_t st = makev_wrapper("%s=%d", "a", 3);
  CHECK(tpu_status_code(st) == TPU_STATUS_UNAVAILABLE);
  CHECK_STREQ(tpu_status_message(st), "a=3");
  CHECK(strstr(tpu_status_location(st), "file.c:42") != NULL);
  tpu_status_free(st);
  CHECK(tpu_status_make(TPU_STATUS_OK, __FILE__, __LINE__, "fine") == TPU_OK);
}

/* ---- objects ---- */
typedef struct {
  tpu_object_t base;
  int* destroyed;
} test_obj_t;

static void test_obj_destroy(tpu_object_t* o) {
  test_obj_t* t = (test_obj_t*)o;
  (*t->destroyed)++;
  free(t);
}
static const tpu_object_vtable_t test_obj_vtable = {.destroy = test_obj_destroy};

static void* retain_release_many(void* arg) {
  tpu_object_t* o = arg;
  for (int i = 0; i < 100000; i++) {
    tpu_object_retain(o);
    tpu_object_release(o);
  }
  return NULL;
}

static void test_objects(void) {
  int destroyed = 0;
  test_obj_t* t = malloc(sizeof(*t));
  tpu_object_init(&t->base, &test_obj_vtable);
  t->destroyed = &destroyed;
  CHECK(t->base.refcount == 1);
  CHECK(t->base.vtable == &test_obj_vtable);
  tpu_object_retain(&t->base);
  CHECK(__atomic_load_n(&t->base.refcount, __ATOMIC_RELAXED) == 2);
  tpu_object_release(&t->base);
  CHECK(destroyed == 0);

  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, retain_release_many, &t->base);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK(destroyed == 0);
  CHECK(__atomic_load_n(&t->base.refcount, __ATOMIC_RELAXED) == 1);
  tpu_object_release(&t->base);
  CHECK(destroyed == 1);

  tpu_object_retain(NULL);
  tpu_object_release(NULL);
}

int main(void) {
  RUN_TEST(test_make_and_accessors);
  RUN_TEST(test_ok);
  RUN_TEST(test_codes);
  RUN_TEST(test_annotate);
  RUN_TEST(test_return_if_error);
  RUN_TEST(test_long_message);
  RUN_TEST(test_makev);
  RUN_TEST(test_objects);
  return TEST_REPORT();
}
