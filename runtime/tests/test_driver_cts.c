/* Driver conformance suite: the same cases, through the public HAL only, on
 * every driver that can run here. The host driver always runs; the pjrt
 * driver runs when TORCH_TPU_PJRT_PLUGIN names a plugin (scripts/test.sh
 * points it at XLA's CPU plugin and sets TORCH_TPU_CTS_REQUIRE_PJRT=1, so a
 * missing plugin fails instead of skipping). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tpu/drivers.h"
#include "tpu/kernels.h"
#include "tpu/trace.h"

#define DVT(d) tpu_hal_device_vt(d)

static tpu_hal_driver_t* g_drv;
static const char* g_name;

static tpu_hal_device_t* device(int32_t i) { return tpu_hal_driver_vt(g_drv)->device(g_drv, i); }

static void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7u);
}

static void test_properties(void) {
  int32_t n = tpu_hal_driver_vt(g_drv)->device_count(g_drv);
  CHECK(n >= 1);
  CHECK_STREQ(tpu_hal_driver_vt(g_drv)->name(g_drv), g_name);
  CHECK(tpu_hal_driver_vt(g_drv)->device(g_drv, n) == NULL);
  for (int32_t i = 0; i < n; i++) {
    tpu_hal_device_properties_t p;
    DVT(device(i))->query_properties(device(i), &p);
    CHECK(p.index == i);
    CHECK(p.name[0] != '\0');
    CHECK(p.platform[0] != '\0');
    CHECK_STREQ(p.driver, g_name);
    CHECK(p.total_memory > 0);
    CHECK(p.host_addressable == (strcmp(g_name, "host") == 0));
  }
}

/* memory_blocks: the requested bytes of the allocated block at `p` (0: none),
 * checking the listing is in address order and the count is the same with or
 * without room for the blocks. */
static uint64_t allocated_block_size(tpu_hal_device_t* d, void* p) {
  CHECK(DVT(d)->memory_blocks != NULL);
  if (!DVT(d)->memory_blocks) return 0;
  size_t n = DVT(d)->memory_blocks(d, NULL, 0);
  tpu_hal_memory_block_t* blk = calloc(n + 4, sizeof(*blk));
  CHECK(blk != NULL);
  if (!blk) return 0;
  size_t m = DVT(d)->memory_blocks(d, blk, n + 4);
  CHECK(m == n);
  uint64_t found = 0;
  for (size_t i = 0; i < m && i < n + 4; i++) {
    if (i > 0) CHECK(blk[i - 1].address < blk[i].address);
    CHECK(blk[i].size >= blk[i].requested);
    if (blk[i].address == (uint64_t)(uintptr_t)p && blk[i].allocated) found = blk[i].requested;
  }
  free(blk);
  return found;
}

static void test_alloc(void) {
  tpu_hal_device_t* d = device(0);
  void* z = (void*)1;
  CHECK_OK(DVT(d)->allocate(d, 0, &z));
  CHECK(z == NULL);
  tpu_hal_memory_stats_t before, after;
  DVT(d)->memory_stats(d, &before);
  void* p = NULL;
  CHECK_OK(DVT(d)->allocate(d, 1000, &p));
  CHECK(p != NULL);
  CHECK(DVT(d)->owns_pointer(d, p));
  CHECK(DVT(d)->owns_pointer(d, (char*)p + 999));
  DVT(d)->memory_stats(d, &after);
  CHECK(after.allocated_bytes >= before.allocated_bytes + 1000);
  CHECK(after.num_allocs == before.num_allocs + 1);
  CHECK(allocated_block_size(d, p) == 1000); /* listed while live */
  DVT(d)->deallocate(d, p);
  DVT(d)->deallocate(d, NULL);
  DVT(d)->memory_stats(d, &after);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(allocated_block_size(d, p) == 0); /* gone, or cached (host) */
}

static void test_oom(void) {
  tpu_hal_device_t* d = device(0);
  uint64_t free_b = 0, total = 0;
  DVT(d)->memory_info(d, &free_b, &total);
  CHECK(total > 0 && free_b <= total);
  void* p = NULL;
  CHECK_STATUS(DVT(d)->allocate(d, (size_t)total + 4096, &p), TPU_STATUS_OUT_OF_MEMORY, "tpu:0");
  CHECK(p == NULL);
  CHECK_OK(DVT(d)->allocate(d, 64, &p)); /* still usable */
  DVT(d)->deallocate(d, p);
}

static void test_copies(void) {
  tpu_hal_device_t* d = device(0);
  enum { N = 4096 };
  uint8_t src[N], back[N], expect[N];
  void *a = NULL, *b = NULL;
  CHECK_OK(DVT(d)->allocate(d, N, &a));
  CHECK_OK(DVT(d)->allocate(d, N, &b));
  fill(src, N, 3);
  CHECK_OK(DVT(d)->copy_h2d(d, a, src, N));
  memset(src, 0, N); /* h2d returned: the source may be reused */
  fill(expect, N, 3);
  memset(back, 0, N);
  CHECK_OK(DVT(d)->copy_d2h(d, back, a, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* A part at an offset, then a part read at another. */
  uint8_t part[100];
  fill(part, sizeof(part), 200);
  CHECK_OK(DVT(d)->copy_h2d(d, (char*)a + 1001, part, sizeof(part)));
  memcpy(expect + 1001, part, sizeof(part));
  CHECK_OK(DVT(d)->copy_d2h(d, back, (char*)a + 990, 200));
  CHECK(memcmp(back, expect + 990, 200) == 0);

  /* Device copies: whole, then a part; later writes to the source do not
   * reach the copy (in-order semantics). */
  CHECK_OK(DVT(d)->copy_d2d(d, b, a, N));
  uint8_t other[N];
  fill(other, N, 77);
  CHECK_OK(DVT(d)->copy_h2d(d, a, other, N));
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);
  CHECK_OK(DVT(d)->copy_d2d(d, (char*)b + 17, (char*)a + 300, 500));
  memcpy(expect + 17, other + 300, 500);
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* Overlapping device copy inside one allocation (memmove semantics). */
  CHECK_OK(DVT(d)->copy_d2d(d, (char*)b + 10, b, 100));
  memmove(expect + 10, expect, 100);
  CHECK_OK(DVT(d)->copy_d2h(d, back, b, N));
  CHECK(memcmp(back, expect, N) == 0);

  /* Zero bytes, out-of-range ranges. */
  CHECK_OK(DVT(d)->copy_h2d(d, a, src, 0));
  CHECK_STATUS(DVT(d)->copy_h2d(d, (char*)a + N - 10, src, 20), TPU_STATUS_INVALID_ARGUMENT,
               "not inside a live allocation");
  CHECK_STATUS(DVT(d)->copy_d2h(d, back, (char*)a + N, 1), TPU_STATUS_INVALID_ARGUMENT,
               "not inside");
  CHECK_STATUS(DVT(d)->copy_d2d(d, b, src, 10), TPU_STATUS_INVALID_ARGUMENT, "not inside");
  CHECK_OK(DVT(d)->synchronize(d));
  DVT(d)->deallocate(d, a);
  DVT(d)->deallocate(d, b);
}

static void test_peer_copy(void) {
  if (tpu_hal_driver_vt(g_drv)->device_count(g_drv) < 2) {
    fprintf(stderr, "  (one device: peer copies not exercised)\n");
    return;
  }
  tpu_hal_device_t* d0 = device(0);
  tpu_hal_device_t* d1 = device(1);
  enum { N = 1000 };
  uint8_t src[N], back[N];
  void *a = NULL, *b = NULL;
  CHECK_OK(DVT(d0)->allocate(d0, N, &a));
  CHECK_OK(DVT(d1)->allocate(d1, N, &b));
  CHECK(!DVT(d1)->owns_pointer(d1, a));
  fill(src, N, 9);
  CHECK_OK(DVT(d0)->copy_h2d(d0, a, src, N));
  CHECK_OK(DVT(d0)->synchronize(d0));
  CHECK_OK(DVT(d1)->copy_d2d(d1, b, a, N));
  CHECK_OK(DVT(d1)->copy_d2h(d1, back, b, N));
  CHECK(memcmp(back, src, N) == 0);
  CHECK_OK(DVT(d1)->copy_d2d(d1, (char*)b + 1, (char*)a + 500, 10));
  CHECK_OK(DVT(d1)->copy_d2h(d1, back, b, 11));
  CHECK(back[0] == src[0] && memcmp(back + 1, src + 500, 10) == 0);
  DVT(d0)->deallocate(d0, a);
  DVT(d1)->deallocate(d1, b);
}

typedef struct {
  int* log;
  int* n;
  int id;
  bool fail;
} work_t;

static tpu_status_t work_run(void* ctx) {
  work_t* w = ctx;
  w->log[(*w->n)++] = w->id;
  return w->fail ? TPU_ERROR(TPU_STATUS_OUT_OF_RANGE, "index 9 is out of bounds") : TPU_OK;
}

static void test_works_and_errors(void) {
  tpu_hal_device_t* d = device(0);
  int log[8], n = 0;
  work_t w[3] = {{log, &n, 1, false}, {log, &n, 2, true}, {log, &n, 3, false}};
  for (int i = 0; i < 3; i++) {
    tpu_hal_work_t hw = {.name = i == 1 ? "aten::index_select" : "w", .run = work_run, .ctx = &w[i]};
    CHECK_OK(DVT(d)->submit(d, &hw));
  }
  CHECK_STATUS(DVT(d)->synchronize(d), TPU_STATUS_OUT_OF_RANGE, "aten::index_select");
  CHECK(n == 3 && log[0] == 1 && log[1] == 2 && log[2] == 3);
  CHECK_OK(DVT(d)->synchronize(d)); /* the error was taken */
  CHECK(DVT(d)->query_idle(d));
}

static void test_events(void) {
  tpu_hal_device_t* d = device(0);
  tpu_hal_event_t *e0 = NULL, *e1 = NULL;
  CHECK_OK(DVT(d)->create_event(d, true, &e0));
  CHECK_OK(DVT(d)->create_event(d, true, &e1));
  CHECK(tpu_hal_event_vt(e0)->query(e0)); /* never recorded: complete */
  double ms = -1;
  CHECK_STATUS(tpu_hal_event_vt(e0)->elapsed_ms(e0, e1, &ms), TPU_STATUS_FAILED_PRECONDITION,
               NULL);
  void* a = NULL;
  enum { N = 1 << 16 };
  uint8_t* buf = malloc(N);
  fill(buf, N, 1);
  CHECK_OK(DVT(d)->allocate(d, N, &a));
  CHECK_OK(DVT(d)->record_event(d, e0));
  CHECK_OK(DVT(d)->copy_h2d(d, a, buf, N));
  CHECK_OK(DVT(d)->record_event(d, e1));
  CHECK_OK(tpu_hal_event_vt(e1)->synchronize(e1));
  CHECK(tpu_hal_event_vt(e1)->query(e1));
  CHECK(tpu_hal_event_vt(e0)->query(e0));
  CHECK_OK(tpu_hal_event_vt(e0)->elapsed_ms(e0, e1, &ms));
  CHECK(ms >= 0);
  CHECK_OK(DVT(d)->wait_event(d, e1));
  CHECK_OK(DVT(d)->synchronize(d));
  DVT(d)->deallocate(d, a);
  free(buf);
  tpu_object_release(&e0->base);
  tpu_object_release(&e1->base);
}


/* ---- op-level suite: every op a driver runs itself equals the C kernel ----
 * A case: op name, one output, up to two tensor inputs (with sizes, strides
 * and a storage offset in elements) and scalars. Inputs are float32-valued
 * patterns converted to each dtype; the C kernel runs on host memory, the
 * driver on its own. */
typedef struct {
  int32_t dtype, ndim;
  int64_t sizes[3], strides[3], offset, storage; /* elements */
} tdesc_t;

typedef struct {
  const char* op;
  int nin;
  tdesc_t in[2];
  tdesc_t out;
  int nscal;
  double scal[2];
  bool inplace; /* outputs[0] is in[0] */
  bool out_arg; /* the .out overload: outputs[0] is the last argument */
  int nin_extra; /* a third tensor input (where's other), in in[1]'s place after it */
  tdesc_t in3;
  int ndims;     /* reductions: the dim list (ndims < 0: None) and keepdim */
  int64_t dims[2];
  bool keepdim;
  bool int_scal; /* scalars are ints whatever the dtype (dim, diagonal) */
} opcase_t;

static size_t dsize(int32_t dt) { return tpu_dtype_size((tpu_dtype_t)dt); }

static void put(void* p, int32_t dt, int64_t i, double v) {
  switch (dt) {
    case TPU_DTYPE_F32: ((float*)p)[i] = (float)v; break;
    case TPU_DTYPE_F64: ((double*)p)[i] = v; break;
    case TPU_DTYPE_I64: ((int64_t*)p)[i] = (int64_t)v; break;
    case TPU_DTYPE_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case TPU_DTYPE_BOOL: ((uint8_t*)p)[i] = v != 0; break;
    case TPU_DTYPE_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case TPU_DTYPE_BF16: {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t*)p)[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      break;
    }
    default: break;
  }
}

static double get(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case TPU_DTYPE_F32: return ((const float*)p)[i];
    case TPU_DTYPE_F64: return ((const double*)p)[i];
    case TPU_DTYPE_I64: return (double)((const int64_t*)p)[i];
    case TPU_DTYPE_I32: return ((const int32_t*)p)[i];
    case TPU_DTYPE_BOOL:
    case TPU_DTYPE_U8: return ((const uint8_t*)p)[i];
    case TPU_DTYPE_BF16: {
      uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    default: return 0;
  }
}

static tpu_tensor_t tview(const tdesc_t* t, void* storage) {
  tpu_tensor_t v = {.data = (char*)storage + t->offset * (int64_t)dsize(t->dtype), .dtype = t->dtype,
                    .ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++) {
    v.sizes[d] = t->sizes[d];
    v.strides[d] = t->strides[d];
  }
  return v;
}

/* Runs the case with storages `st[k]` (in0, in1, out) of either side. */
static tpu_status_t run_case(const opcase_t* c, void* const st[4], tpu_hal_device_t* dev,
                             const tpu_k_entry_t* e) {
  tpu_tensor_t t[3];
  tpu_k_value_t args[6];
  int na = 0;
  tpu_tensor_t t3;
  for (int k = 0; k < c->nin; k++) {
    t[k] = tview(&c->in[k], st[k]);
    args[na++] = (tpu_k_value_t){.kind = TPU_K_TENSOR, .v.tensor = &t[k]};
  }
  if (c->nin_extra) {
    t3 = tview(&c->in3, st[3]);
    args[na++] = (tpu_k_value_t){.kind = TPU_K_TENSOR, .v.tensor = &t3};
  }
  if (c->ndims != 0) {
    args[na++] = c->ndims < 0 ? (tpu_k_value_t){.kind = TPU_K_NONE}
                              : (tpu_k_value_t){.kind = TPU_K_INTS, .v.ints = {c->dims, c->ndims}};
    args[na++] = (tpu_k_value_t){.kind = TPU_K_BOOL, .v.b = c->keepdim};
    args[na++] = (tpu_k_value_t){.kind = TPU_K_NONE};
  }
  bool integral = c->int_scal || !tpu_dtype_is_floating((tpu_dtype_t)c->in[0].dtype);
  for (int k = 0; k < c->nscal; k++) {
    args[na++] = integral ? (tpu_k_value_t){.kind = TPU_K_INT, .v.i = (int64_t)c->scal[k]}
                          : (tpu_k_value_t){.kind = TPU_K_DOUBLE, .v.d = c->scal[k]};
  }
  t[2] = c->inplace ? t[0] : tview(&c->out, st[2]);
  if (c->out_arg) args[na++] = (tpu_k_value_t){.kind = TPU_K_TENSOR, .v.tensor = &t[2]};
  tpu_k_call_t call = {.op = c->op, .num_args = na, .args = args, .num_outputs = 1, .outputs = &t[2]};
  if (e->check) TPU_RETURN_IF_ERROR(e->check(&call));
  if (!dev) return e->run(&call);
  return DVT(dev)->execute_op(dev, &call);
}

static void check_case(const opcase_t* c) {
  tpu_hal_device_t* d = device(0);
  const tpu_k_entry_t* e = tpu_k_lookup(c->op);
  CHECK(e != NULL);
  if (!e || !DVT(d)->supports_op || !DVT(d)->supports_op(d, c->op)) {
    if (strcmp(g_name, "pjrt") == 0) CHECK(!"pjrt lowers every op of the suite");
    return;
  }
  const tdesc_t* descs[4] = {&c->in[0], &c->in[1], &c->out, &c->in3};
  void* host[4] = {NULL, NULL, NULL, NULL};
  void* devp[4] = {NULL, NULL, NULL, NULL};
  size_t bytes[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; k++) {
    if ((k < 2 && k >= c->nin) || (k == 2 && c->inplace) || (k == 3 && !c->nin_extra)) continue;
    bytes[k] = (size_t)descs[k]->storage * dsize(descs[k]->dtype);
    host[k] = calloc(1, bytes[k]);
    for (int64_t i = 0; i < descs[k]->storage; i++)
      put(host[k], descs[k]->dtype, i, (double)((i * 37 + k * 11) % 23) / 4.0 - 2.0);
    CHECK_OK(DVT(d)->allocate(d, bytes[k], &devp[k]));
    CHECK_OK(DVT(d)->copy_h2d(d, devp[k], host[k], bytes[k]));
  }
  if (c->inplace) {
    host[2] = host[0];
    devp[2] = devp[0];
    bytes[2] = bytes[0];
  }
  CHECK_OK(run_case(c, devp, d, e));
  CHECK_OK(run_case(c, host, NULL, e));
  void* back = calloc(1, bytes[2]);
  CHECK_OK(DVT(d)->copy_d2h(d, back, devp[2], bytes[2]));
  int32_t dt = c->inplace ? c->in[0].dtype : c->out.dtype;
  int64_t n = (int64_t)(bytes[2] / dsize(dt));
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = get(back, dt, i), b = get(host[2], dt, i);
    double tol = dt == TPU_DTYPE_BF16 ? 1e-2 * (1 + fabs(b)) : 1e-5 * (1 + fabs(b));
    if (!(fabs(a - b) <= tol) && !(isnan(a) && isnan(b))) {
      if (bad++ < 3) fprintf(stderr, "  %s: element %lld: driver %g, kernel %g\n", c->op, (long long)i, a, b);
    }
  }
  CHECK(bad == 0);
  free(back);
  for (int k = 0; k < 4; k++) {
    if (k == 2 && c->inplace) continue;
    free(host[k]);
    DVT(d)->deallocate(d, devp[k]);
  }
}

#define T2(dt, a, b, sa, sb, off, n) {dt, 2, {a, b}, {sa, sb}, off, n}
#define T1(dt, a, off, n) {dt, 1, {a}, {1}, off, n}

static void test_ops(void) {
  const tpu_hal_device_vtable_t* vt = DVT(device(0));
  if (!vt->supports_op) {
    fprintf(stderr, "  (this driver runs no ops itself)\n");
    return;
  }
  const opcase_t cases[] = {
      /* contiguous, broadcast, offsets, alpha, scalars */
      {"aten::add.Tensor", 2, {T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), T1(TPU_DTYPE_F32, 4, 2, 9)},
       T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), 1, {2.5}},
      {"aten::sub.Tensor", 2, {T2(TPU_DTYPE_F32, 3, 4, 1, 3, 1, 13), T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12)},
       T2(TPU_DTYPE_F32, 3, 4, 4, 1, 5, 20), 1, {1.0}},
      {"aten::add.Scalar", 1, {T2(TPU_DTYPE_I64, 2, 5, 5, 1, 0, 10)}, T2(TPU_DTYPE_I64, 2, 5, 5, 1, 0, 10),
       2, {3, 2}},
      /* a .Tensor overload whose other is a number (a wrapped scalar) */
      {"aten::mul.Tensor", 1, {T1(TPU_DTYPE_F32, 6, 0, 6)}, T1(TPU_DTYPE_F32, 6, 0, 6), 1, {-1.5}},
      {"aten::mul.Tensor", 2, {T2(TPU_DTYPE_BF16, 4, 3, 3, 1, 0, 12), T2(TPU_DTYPE_BF16, 4, 3, 0, 1, 0, 3)},
       T2(TPU_DTYPE_BF16, 4, 3, 3, 1, 0, 12), 0, {0}},
      {"aten::div.Tensor", 2, {T1(TPU_DTYPE_F64, 7, 0, 7), T1(TPU_DTYPE_F64, 7, 0, 7)}, T1(TPU_DTYPE_F64, 7, 0, 7),
       0, {0}},
      {"aten::maximum", 2, {T1(TPU_DTYPE_I32, 6, 0, 6), T1(TPU_DTYPE_I32, 6, 3, 9)}, T1(TPU_DTYPE_I32, 6, 0, 6),
       0, {0}},
      /* strided reads (gather) and writes (scatter) */
      {"aten::exp", 1, {T2(TPU_DTYPE_F32, 4, 3, 1, 4, 0, 12)}, T2(TPU_DTYPE_F32, 4, 3, 3, 1, 0, 12), 0, {0}},
      {"aten::neg_", 1, {T2(TPU_DTYPE_F32, 3, 2, 4, 2, 1, 12)}, {0}, 0, {0}, true},
      {"aten::tanh.out", 1, {T1(TPU_DTYPE_F32, 5, 0, 5)}, {TPU_DTYPE_F32, 1, {5}, {2}, 1, 10}, 0, {0},
       false, true},
      {"aten::sigmoid", 1, {T1(TPU_DTYPE_BF16, 9, 0, 9)}, T1(TPU_DTYPE_BF16, 9, 0, 9), 0, {0}},
      {"aten::abs", 1, {T1(TPU_DTYPE_I64, 8, 0, 8)}, T1(TPU_DTYPE_I64, 8, 0, 8), 0, {0}},
      {"aten::mm", 2, {T2(TPU_DTYPE_F32, 5, 7, 7, 1, 0, 35), T2(TPU_DTYPE_F32, 7, 3, 1, 7, 0, 21)},
       T2(TPU_DTYPE_F32, 5, 3, 3, 1, 0, 15), 0, {0}},
      /* comparisons (inputs' promoted type), where, pow, reductions */
      {"aten::lt.Tensor", 2, {T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), T1(TPU_DTYPE_F32, 4, 0, 4)},
       T2(TPU_DTYPE_BOOL, 3, 4, 4, 1, 0, 12), 0, {0}},
      {"aten::eq.Tensor", 2, {T1(TPU_DTYPE_I64, 8, 0, 8), T1(TPU_DTYPE_I32, 8, 1, 9)}, T1(TPU_DTYPE_BOOL, 8, 0, 8),
       0, {0}},
      {"aten::ge.Scalar", 1, {T1(TPU_DTYPE_F32, 8, 0, 8)}, T1(TPU_DTYPE_BOOL, 8, 0, 8), 1, {0.25}},
      {"aten::where.self", 2, {T2(TPU_DTYPE_BOOL, 3, 4, 4, 1, 0, 12), T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12)},
       T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), 0, {0}, false, false, 1, T1(TPU_DTYPE_F32, 4, 0, 4)},
      {"aten::pow.Tensor_Scalar", 1, {T1(TPU_DTYPE_F32, 9, 0, 9)}, T1(TPU_DTYPE_F32, 9, 0, 9), 1, {2}},
      {"aten::sum.dim_IntList", 1, {T2(TPU_DTYPE_F32, 4, 5, 5, 1, 0, 20)}, T2(TPU_DTYPE_F32, 4, 1, 1, 1, 0, 4),
       0, {0}, false, false, 0, {0}, 1, {-1}, true},
      {"aten::mean.dim", 1, {T2(TPU_DTYPE_BF16, 4, 5, 1, 4, 0, 20)}, T1(TPU_DTYPE_BF16, 5, 0, 5), 0, {0},
       false, false, 0, {0}, 1, {0}, false},
      {"aten::sum.dim_IntList", 1, {T2(TPU_DTYPE_F64, 3, 3, 3, 1, 0, 9)}, {TPU_DTYPE_F64, 0, {0}, {0}, 0, 1},
       0, {0}, false, false, 0, {0}, -1, {0}, false},
      /* more unary and binary ops */
      {"aten::silu", 1, {T2(TPU_DTYPE_F32, 3, 4, 1, 3, 0, 12)}, T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), 0, {0}},
      {"aten::erf", 1, {T1(TPU_DTYPE_F32, 9, 0, 9)}, T1(TPU_DTYPE_F32, 9, 0, 9), 0, {0}},
      {"aten::floor", 1, {T1(TPU_DTYPE_BF16, 9, 0, 9)}, T1(TPU_DTYPE_BF16, 9, 0, 9), 0, {0}},
      {"aten::bitwise_not", 1, {T1(TPU_DTYPE_I64, 8, 0, 8)}, T1(TPU_DTYPE_I64, 8, 0, 8), 0, {0}},
      {"aten::logical_not", 1, {T1(TPU_DTYPE_F32, 8, 0, 8)}, T1(TPU_DTYPE_BOOL, 8, 0, 8), 0, {0}},
      {"aten::bitwise_and.Tensor", 2, {T1(TPU_DTYPE_I64, 8, 0, 8), T1(TPU_DTYPE_I64, 8, 1, 9)},
       T1(TPU_DTYPE_I64, 8, 0, 8), 0, {0}},
      {"aten::remainder.Scalar", 1, {T1(TPU_DTYPE_F32, 9, 0, 9)}, T1(TPU_DTYPE_F32, 9, 0, 9), 1, {-0.75}},
      {"aten::clamp", 1, {T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12)}, T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), 2,
       {-1.0, 0.5}},
      {"tpu::convert", 1, {T2(TPU_DTYPE_F32, 3, 4, 1, 3, 0, 12)}, T2(TPU_DTYPE_BF16, 3, 4, 4, 1, 0, 12), 0, {0}},
      /* matmuls, softmax, triangles, fills, copies, masks */
      {"aten::addmm", 2, {T1(TPU_DTYPE_F32, 3, 0, 3), T2(TPU_DTYPE_F32, 4, 5, 5, 1, 0, 20)},
       T2(TPU_DTYPE_F32, 4, 3, 3, 1, 0, 12), 2, {0.5, 2.0}, false, false, 1, T2(TPU_DTYPE_F32, 5, 3, 1, 5, 0, 15)},
      {"aten::_softmax", 1, {T2(TPU_DTYPE_F32, 3, 5, 5, 1, 0, 15)}, T2(TPU_DTYPE_F32, 3, 5, 5, 1, 0, 15), 2,
       {-1, 0}, false, false, 0, {0}, 0, {0}, false, true},
      {"aten::_log_softmax", 1, {T2(TPU_DTYPE_BF16, 4, 3, 1, 4, 0, 12)}, T2(TPU_DTYPE_BF16, 4, 3, 3, 1, 0, 12), 2,
       {0, 0}, false, false, 0, {0}, 0, {0}, false, true},
      {"aten::triu", 1, {T2(TPU_DTYPE_F32, 4, 4, 4, 1, 0, 16)}, T2(TPU_DTYPE_F32, 4, 4, 4, 1, 0, 16), 1, {1},
       false, false, 0, {0}, 0, {0}, false, true},
      {"aten::fill_.Scalar", 1, {T2(TPU_DTYPE_I64, 3, 2, 4, 2, 1, 12)}, {0}, 1, {7}, true},
      {"aten::copy_", 2, {T2(TPU_DTYPE_BF16, 3, 4, 4, 1, 0, 12), T2(TPU_DTYPE_F32, 3, 4, 1, 3, 0, 12)}, {0}, 1,
       {0}, true, false, 0, {0}, 0, {0}, false, true},
      {"aten::masked_fill.Scalar", 2, {T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), T1(TPU_DTYPE_BOOL, 4, 0, 4)},
       T2(TPU_DTYPE_F32, 3, 4, 4, 1, 0, 12), 1, {-2.5}},
      {"aten::amax", 1, {T2(TPU_DTYPE_F32, 4, 5, 5, 1, 0, 20)}, T1(TPU_DTYPE_F32, 4, 0, 4), 0, {0}, false, false,
       0, {0}, 1, {1}, false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_case(&cases[i]);
  CHECK(!vt->supports_op(device(0), "aten::nonzero"));
}

/* An op with two outputs (values and int64 indices) through execute_op:
 * max.dim with NaN and ties, keepdim, equal to the host kernel. */
static void test_ops_two_outputs(void) {
  tpu_hal_device_t* d = device(0);
  const tpu_hal_device_vtable_t* vt = DVT(d);
  const char* op = "aten::max.dim";
  if (!vt->supports_op || !vt->supports_op(d, op)) {
    if (strcmp(g_name, "pjrt") == 0) CHECK(!"pjrt lowers aten::max.dim");
    return;
  }
  const tpu_k_entry_t* e = tpu_k_lookup(op);
  CHECK(e != NULL);
  if (!e) return;
  float x[12] = {1, 3, 3, -1, NAN, 2, NAN, 0, -4, -5, -4, -6};
  void *dx = NULL, *dv = NULL, *di = NULL;
  CHECK_OK(vt->allocate(d, sizeof(x), &dx));
  CHECK_OK(vt->allocate(d, 3 * sizeof(float), &dv));
  CHECK_OK(vt->allocate(d, 3 * sizeof(int64_t), &di));
  CHECK_OK(vt->copy_h2d(d, dx, x, sizeof(x)));
  float hv[3], gv[3];
  int64_t hi[3], gi[3];
  for (int side = 0; side < 2; side++) {
    tpu_tensor_t in = {.data = side ? (void*)x : dx, .dtype = TPU_DTYPE_F32, .ndim = 2, .sizes = {3, 4}, .strides = {4, 1}};
    tpu_tensor_t outs[2] = {
        {.data = side ? (void*)hv : dv, .dtype = TPU_DTYPE_F32, .ndim = 2, .sizes = {3, 1}, .strides = {1, 1}},
        {.data = side ? (void*)hi : di, .dtype = TPU_DTYPE_I64, .ndim = 2, .sizes = {3, 1}, .strides = {1, 1}}};
    tpu_k_value_t args[3] = {{.kind = TPU_K_TENSOR, .v.tensor = &in},
                             {.kind = TPU_K_INT, .v.i = 1},
                             {.kind = TPU_K_BOOL, .v.b = true}};
    tpu_k_call_t call = {.op = op, .num_args = 3, .args = args, .num_outputs = 2, .outputs = outs};
    if (e->check) CHECK_OK(e->check(&call));
    CHECK_OK(side ? e->run(&call) : vt->execute_op(d, &call));
  }
  CHECK_OK(vt->copy_d2h(d, gv, dv, sizeof(gv)));
  CHECK_OK(vt->copy_d2h(d, gi, di, sizeof(gi)));
  for (int r = 0; r < 3; r++) {
    CHECK(gi[r] == hi[r]);
    CHECK(gv[r] == hv[r] || (isnan(gv[r]) && isnan(hv[r])));
  }
  CHECK(gi[0] == 1 && isnan(gv[1]) && gi[1] == 0 && gi[2] == 0);
  vt->deallocate(d, dx);
  vt->deallocate(d, dv);
  vt->deallocate(d, di);
}

/* An index out of range in an op the driver runs is the device's
 * asynchronous error (at synchronize or at the next copy to the host),
 * naming the op, the index, the dimension and its size (index_select takes
 * [0, size), as PyTorch); the device works after the error. */
static tpu_status_t index_select(tpu_hal_device_t* d, void* x, void* idx, void* out) {
  tpu_tensor_t tx = {.data = x, .dtype = TPU_DTYPE_F32, .ndim = 1, .sizes = {5}, .strides = {1}};
  tpu_tensor_t ti = {.data = idx, .dtype = TPU_DTYPE_I64, .ndim = 1, .sizes = {2}, .strides = {1}};
  tpu_tensor_t to = {.data = out, .dtype = TPU_DTYPE_F32, .ndim = 1, .sizes = {2}, .strides = {1}};
  tpu_k_value_t args[3] = {{.kind = TPU_K_TENSOR, .v.tensor = &tx},
                           {.kind = TPU_K_INT, .v.i = 0},
                           {.kind = TPU_K_TENSOR, .v.tensor = &ti}};
  tpu_k_call_t call = {.op = "aten::index_select", .num_args = 3, .args = args, .num_outputs = 1, .outputs = &to};
  return DVT(d)->execute_op(d, &call);
}

static void test_index_checks(void) {
  tpu_hal_device_t* d = device(0);
  const tpu_hal_device_vtable_t* vt = DVT(d);
  if (!vt->supports_op || !vt->supports_op(d, "aten::index_select")) {
    fprintf(stderr, "  (this driver runs no ops itself)\n");
    return;
  }
  const float xs[5] = {0, 1, 2, 3, 4};
  void *x = NULL, *idx = NULL, *out = NULL;
  CHECK_OK(vt->allocate(d, sizeof(xs), &x));
  CHECK_OK(vt->allocate(d, 16, &idx));
  CHECK_OK(vt->allocate(d, 8, &out));
  CHECK_OK(vt->copy_h2d(d, x, xs, sizeof(xs)));
  int64_t bad[2] = {0, 7}, good[2] = {4, 0}, neg[2] = {2, -1};
  CHECK_OK(vt->copy_h2d(d, idx, bad, sizeof(bad)));
  CHECK_OK(index_select(d, x, idx, out));
  CHECK_STATUS(vt->synchronize(d), TPU_STATUS_OUT_OF_RANGE,
               "aten::index_select: index 7 is out of bounds for dimension 0 with size 5");
  CHECK_OK(vt->synchronize(d)); /* taken */
  float back[2] = {-1, -1};
  CHECK_OK(vt->copy_h2d(d, idx, good, sizeof(good)));
  CHECK_OK(index_select(d, x, idx, out));
  CHECK_OK(vt->copy_d2h(d, back, out, sizeof(back)));
  CHECK(back[0] == 4 && back[1] == 0);
  CHECK_OK(vt->copy_h2d(d, idx, neg, sizeof(neg)));
  CHECK_OK(index_select(d, x, idx, out));
  CHECK_STATUS(vt->copy_d2h(d, back, out, sizeof(back)), TPU_STATUS_OUT_OF_RANGE, "index -1 is out of bounds");
  CHECK_OK(vt->synchronize(d));
  vt->deallocate(d, x);
  vt->deallocate(d, idx);
  vt->deallocate(d, out);
}

/* A whole graph run by the driver (run_graph): an intermediate buffer, a
 * strided read, an in-place update of an input view seen by the nodes after
 * it and by the next run, two outputs; one device program per run. */
static void test_graphs(void) {
  tpu_hal_device_t* d = device(0);
  const tpu_hal_device_vtable_t* vt = DVT(d);
  if (!vt->run_graph) {
    fprintf(stderr, "  (this driver runs no graphs itself)\n");
    return;
  }
  const float xs[6] = {1, -2, 3, 0.5f, -1, 2};
  void *x = NULL, *o0 = NULL, *o1 = NULL;
  CHECK_OK(vt->allocate(d, 24, &x));
  CHECK_OK(vt->allocate(d, 24, &o0));
  CHECK_OK(vt->allocate(d, 24, &o1));
  CHECK_OK(vt->copy_h2d(d, x, xs, sizeof(xs)));
  const tpu_tensor_t v6 = {NULL, TPU_DTYPE_F32, 1, {6}, {1}};
  const tpu_tensor_t v3 = {NULL, TPU_DTYPE_F32, 1, {3}, {1}};
  const tpu_tensor_t vt32 = {NULL, TPU_DTYPE_F32, 2, {3, 2}, {1, 3}}; /* x viewed [2,3] then transposed */
  const tpu_tensor_t v32 = {NULL, TPU_DTYPE_F32, 2, {3, 2}, {2, 1}};
  /* buffers: 0 x (input), 1 t (internal), 2 and 3 the outputs */
  const tpu_hal_graph_buffer_t bufs[4] = {{TPU_HAL_GRAPH_INPUT, 0, 24}, {TPU_HAL_GRAPH_INTERNAL, -1, 24},
                                          {TPU_HAL_GRAPH_OUTPUT, 0, 24}, {TPU_HAL_GRAPH_OUTPUT, 1, 24}};
  /* t = x * x; o0 = t + 2 x; x[3:] = -x[3:]; o1 = exp(x viewed [3,2] by columns) */
  tpu_k_value_t a_mul[2] = {{.kind = TPU_K_TENSOR, .v.tensor = &v6}, {.kind = TPU_K_TENSOR, .v.tensor = &v6}};
  tpu_k_value_t a_add[3] = {{.kind = TPU_K_TENSOR, .v.tensor = &v6}, {.kind = TPU_K_TENSOR, .v.tensor = &v6},
                            {.kind = TPU_K_INT, .v.i = 2}};
  tpu_k_value_t a_neg[1] = {{.kind = TPU_K_TENSOR, .v.tensor = &v3}};
  tpu_k_value_t a_exp[1] = {{.kind = TPU_K_TENSOR, .v.tensor = &vt32}};
  const tpu_k_call_t calls[4] = {{"aten::mul.Tensor", 2, a_mul, 1, &v6, NULL},
                                 {"aten::add.Tensor", 3, a_add, 1, &v6, NULL},
                                 {"aten::neg_", 1, a_neg, 1, &v3, NULL},
                                 {"aten::exp", 1, a_exp, 1, &v32, NULL}};
  const int32_t b_mul[3] = {0, 0, 1}, b_add[3] = {1, 0, 2}, b_neg[2] = {0, 0}, b_exp[2] = {0, 3};
  const int64_t o_mul[3] = {0, 0, 0}, o_add[3] = {0, 0, 0}, o_neg[2] = {12, 12}, o_exp[2] = {0, 0};
  const tpu_hal_graph_node_t nodes[4] = {
      {&calls[0], b_mul, o_mul}, {&calls[1], b_add, o_add}, {&calls[2], b_neg, o_neg}, {&calls[3], b_exp, o_exp}};
  const tpu_hal_graph_t g = {4, bufs, 4, nodes, 1, 2};
  for (int i = 0; i < 4; i++) CHECK_OK(vt->check_graph_node(d, &calls[i]));
  const tpu_k_call_t lists = {"aten::nonzero", 1, a_neg, 1, &v3, NULL};
  CHECK_STATUS(vt->check_graph_node(d, &lists), TPU_STATUS_UNIMPLEMENTED, "aten::nonzero");
  float cur[6];
  memcpy(cur, xs, sizeof(cur));
  for (int run = 0; run < 2; run++) {
    tpu_hal_queue_stats_t before, after;
    vt->queue_stats(d, &before);
    void* ins[1] = {x};
    void* outs[2] = {o0, o1};
    CHECK_OK(vt->run_graph(d, &g, ins, outs));
    CHECK_OK(vt->synchronize(d));
    vt->queue_stats(d, &after);
    CHECK(after.programs == before.programs + 1);
    float r0[6], r1[6], rx[6], want0[6], want1[6];
    for (int i = 0; i < 6; i++) want0[i] = cur[i] * cur[i] + 2 * cur[i];
    for (int i = 3; i < 6; i++) cur[i] = -cur[i];
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 2; c++) want1[r * 2 + c] = expf(cur[r + 3 * c]);
    CHECK_OK(vt->copy_d2h(d, r0, o0, 24));
    CHECK_OK(vt->copy_d2h(d, r1, o1, 24));
    CHECK_OK(vt->copy_d2h(d, rx, x, 24));
    for (int i = 0; i < 6; i++) {
      CHECK(fabsf(r0[i] - want0[i]) <= 1e-6f * (1 + fabsf(want0[i])));
      CHECK(fabsf(r1[i] - want1[i]) <= 1e-6f * (1 + fabsf(want1[i])));
      CHECK(rx[i] == cur[i]);
    }
  }
  /* an input pointer outside the device's memory: a clear error */
  float host[6];
  void* bad_in[1] = {host};
  void* outs[2] = {o0, o1};
  CHECK_STATUS(vt->run_graph(d, &g, bad_in, outs), TPU_STATUS_INVALID_ARGUMENT, "not inside a live allocation");
  vt->deallocate(d, x);
  vt->deallocate(d, o0);
  vt->deallocate(d, o1);
}


/* ---- device-queue trace (tpu/trace.h) ----
 * While it records, every work a driver runs is one event named as the host
 * driver names it (a host work by its name, copy_h2d / copy_d2d / copy_d2h,
 * an op's program by its schema name, a graph's program "tpu::graph"), with
 * the submitting thread, the bytes, and times queued <= start <= end; on one
 * chip the works of a dependent chain follow one another. Nothing is
 * recorded while it is off. */
static tpu_status_t trace_sleep_run(void* ctx) {
  struct timespec ts = {0, 2000000L}; /* 2 ms */
  nanosleep(&ts, NULL);
  return TPU_OK;
}

static void test_trace(void) {
  tpu_hal_device_t* d = device(0);
  const tpu_hal_device_vtable_t* vt = DVT(d);
  enum { N = 4096 };
  static float host[N / 4];
  for (int i = 0; i < N / 4; i++) host[i] = (float)i / 64;
  void *a = NULL, *b = NULL;
  CHECK_OK(vt->allocate(d, N, &a));
  CHECK_OK(vt->allocate(d, N, &b));
  CHECK(!tpu_trace_enabled());
  CHECK_OK(vt->copy_h2d(d, a, host, N)); /* while off: not recorded */
  CHECK_OK(vt->synchronize(d));
  const char* want[10];
  int64_t want_bytes[10];
  int nw = 0;
#define WANT(name, bytes) (want[nw] = (name), want_bytes[nw++] = (bytes))
  int64_t t0 = (int64_t)tpu_now_ns();
  CHECK_OK(tpu_trace_start(0));
  tpu_hal_work_t w = {.name = "host work", .run = trace_sleep_run, .bytes = 77};
  CHECK_OK(vt->submit(d, &w));
  WANT("host work", 77);
  CHECK_OK(vt->copy_h2d(d, a, host, N));
  WANT("copy_h2d", N);
  CHECK_OK(vt->copy_h2d(d, (char*)a + 100, host, 50)); /* a part: a program on pjrt */
  WANT("copy_h2d", 50);
  CHECK_OK(vt->copy_d2d(d, b, (char*)a + 8, 1000));
  WANT("copy_d2d", 1000);
  const tpu_tensor_t v = {NULL, TPU_DTYPE_F32, 1, {N / 4}, {1}};
  tpu_tensor_t ta = v, tb = v;
  ta.data = a;
  tb.data = b;
  if (vt->supports_op && vt->execute_op) {
    tpu_k_value_t args[3] = {{.kind = TPU_K_TENSOR, .v.tensor = &ta}, {.kind = TPU_K_TENSOR, .v.tensor = &ta},
                             {.kind = TPU_K_INT, .v.i = 1}};
    const tpu_k_call_t call = {"aten::add.Tensor", 3, args, 1, &tb, NULL};
    CHECK_OK(vt->execute_op(d, &call)); /* b = a + a */
    WANT("aten::add.Tensor", 3 * N);
  }
  if (vt->run_graph) {
    const tpu_hal_graph_buffer_t bufs[2] = {{TPU_HAL_GRAPH_INPUT, 0, N}, {TPU_HAL_GRAPH_OUTPUT, 0, N}};
    tpu_k_value_t args[1] = {{.kind = TPU_K_TENSOR, .v.tensor = &v}};
    const tpu_k_call_t call = {"aten::exp", 1, args, 1, &v, NULL};
    const int32_t bi[2] = {0, 1};
    const int64_t off[2] = {0, 0};
    const tpu_hal_graph_node_t node = {&call, bi, off};
    const tpu_hal_graph_t g = {2, bufs, 1, &node, 1, 1};
    void* ins[1] = {b};
    void* outs[1] = {a};
    CHECK_OK(vt->run_graph(d, &g, ins, outs)); /* a = exp(b) */
    WANT("tpu::graph", 2 * N);
  }
  static float back[N / 4];
  CHECK_OK(vt->copy_d2h(d, back, a, N));
  WANT("copy_d2h", N);
  /* a peer copy is a work of the chip it lands on */
  tpu_hal_device_t* d1 = tpu_hal_driver_vt(g_drv)->device_count(g_drv) > 1 ? device(1) : NULL;
  void* c = NULL;
  if (d1) {
    CHECK_OK(DVT(d1)->allocate(d1, N, &c));
    CHECK_OK(DVT(d1)->copy_d2d(d1, c, a, N));
    CHECK_OK(DVT(d1)->synchronize(d1));
    WANT("copy_d2d", N);
  }
#undef WANT
  CHECK_OK(vt->synchronize(d));
  tpu_trace_stop();
  CHECK_OK(vt->copy_h2d(d, a, host, N)); /* off again: not recorded */
  CHECK_OK(vt->synchronize(d));
  tpu_trace_event_t* ev = NULL;
  uint64_t dropped = 1;
  size_t n = tpu_trace_take(&ev, &dropped);
  CHECK(dropped == 0);
  CHECK(n == (size_t)nw);
  if (n != (size_t)nw) {
    for (size_t i = 0; i < n; i++) fprintf(stderr, "  event %zu: %s\n", i, ev[i].name);
    n = n < (size_t)nw ? n : (size_t)nw;
  }
  uint64_t tid = tpu_trace_thread_id();
  for (size_t i = 0; i < n; i++) {
    CHECK_STREQ(ev[i].name, want[i]);
    CHECK(ev[i].bytes == want_bytes[i]);
    bool peer = d1 && i + 1 == (size_t)nw;
    CHECK(ev[i].kind == TPU_TRACE_WORK && ev[i].device == (peer ? 1 : 0) && ev[i].cpu_tid == tid);
    CHECK(ev[i].queued_ns >= t0 && ev[i].start_ns >= ev[i].queued_ns && ev[i].end_ns >= ev[i].start_ns);
    if (i && !peer) CHECK(ev[i].start_ns >= ev[i - 1].end_ns); /* a dependent chain: one after another */
    if (i) CHECK(ev[i].seq > ev[i - 1].seq);
  }
  if (n) CHECK(ev[0].end_ns - ev[0].start_ns >= 2000000); /* the host work's 2 ms */
  /* and the works did what they do while traced: a = host with bytes
   * [100, 150) from host's first 50, then (op and graph) a = exp(a + a) */
  static float expect[N / 4];
  memcpy(expect, host, N);
  memcpy((char*)expect + 100, host, 50);
  bool op_and_graph = vt->supports_op && vt->execute_op && vt->run_graph;
  for (int i = 0; op_and_graph && i < N / 4; i++) expect[i] = expf(expect[i] + expect[i]);
  for (int i = 0; i < N / 4; i++) {
    if (!(fabsf(back[i] - expect[i]) <= 1e-5f * (1 + fabsf(expect[i])))) {
      CHECK(fabsf(back[i] - expect[i]) <= 1e-5f * (1 + fabsf(expect[i])));
      break;
    }
  }
  if (d1) {
    static float peer_back[N / 4];
    CHECK_OK(DVT(d1)->copy_d2h(d1, peer_back, c, N));
    CHECK(memcmp(peer_back, back, N) == 0);
    DVT(d1)->deallocate(d1, c);
  }
  free(ev);
  vt->deallocate(d, a);
  vt->deallocate(d, b);
}

static void run_suite(const char* name) {
  g_name = name;
  tpu_status_t st = tpu_drivers_create(name, NULL, &g_drv);
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", tpu_status_message(st));
  CHECK_OK(st);
  if (!g_drv) {
    fprintf(stderr, "driver %s: %s\n", name, msg);
    return;
  }
  fprintf(stderr, "== driver %s\n", name);
  RUN_TEST(test_properties);
  RUN_TEST(test_alloc);
  RUN_TEST(test_oom);
  RUN_TEST(test_copies);
  RUN_TEST(test_peer_copy);
  RUN_TEST(test_works_and_errors);
  RUN_TEST(test_events);
  RUN_TEST(test_ops);
  RUN_TEST(test_ops_two_outputs);
  RUN_TEST(test_index_checks);
  RUN_TEST(test_graphs);
  RUN_TEST(test_trace);
  tpu_object_release(&g_drv->base);
  g_drv = NULL;
}

/* Loading failures are clear errors, never a crash. */
static void test_pjrt_load_errors(void) {
  tpu_hal_driver_t* drv = NULL;
  tpu_pjrt_driver_options_t o = {.struct_size = sizeof(o), .plugin_path = "/nonexistent/plugin.so"};
  CHECK_STATUS(tpu_pjrt_driver_create(&o, &drv), TPU_STATUS_UNAVAILABLE, "cannot load the PJRT plugin");
  o.plugin_path = "libm.so.6";
  CHECK_STATUS(tpu_pjrt_driver_create(&o, &drv), TPU_STATUS_UNAVAILABLE, "no GetPjrtApi");
  CHECK(drv == NULL);
  setenv("TORCH_TPU_DRIVER", "tpu9", 1);
  const char* name = NULL;
  CHECK_STATUS(tpu_drivers_selected(&name), TPU_STATUS_INVALID_ARGUMENT, "TORCH_TPU_DRIVER");
  unsetenv("TORCH_TPU_DRIVER");
  CHECK_OK(tpu_drivers_selected(&name));
  CHECK_STREQ(name, tpu_drivers_tpu_present() ? "pjrt" : "host");
}

int main(void) {
  setenv("TORCH_TPU_HOST_DEVICES", "2", 1);
  setenv("TORCH_TPU_HOST_MEMORY", "64M", 1);
  run_suite("host");
  const char* plugin = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (plugin && *plugin) {
    if (!getenv("TORCH_TPU_PJRT_OPTIONS")) setenv("TORCH_TPU_PJRT_OPTIONS", "cpu_device_count=2", 1);
    setenv("TORCH_TPU_PJRT_MEMORY", "64M", 1);
    run_suite("pjrt");
  } else {
    const char* req = getenv("TORCH_TPU_CTS_REQUIRE_PJRT");
    CHECK(!(req && strcmp(req, "1") == 0)); /* required but no plugin given */
    fprintf(stderr, "== driver pjrt: skipped (TORCH_TPU_PJRT_PLUGIN is not set)\n");
  }
  RUN_TEST(test_pjrt_load_errors);
  return TEST_REPORT();
}
