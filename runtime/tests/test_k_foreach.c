/* Kernel family "foreach" (list ops): every entry resolves its base kernel,
 * pieces and footprints of contiguous / non-contiguous elements, piece runs
 * equal the whole run, and check() names bad lists. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kutil.h"
#include "test_kernel_util.h"
#include "test_util.h"

static void test_every_list_entry_has_a_base(void) {
  int lists = 0;
  for (size_t i = 0; i < tpu_k_entry_count(); ++i) {
    const tpu_k_entry_t* e = tpu_k_entry_at(i);
    if (!(e->flags & TPU_K_FLAG_LIST)) continue;
    lists++;
    tpu_k_list_op_t op;
    CHECKF(tpu_k_list_op(e->name, &op) && op.base != NULL && !(op.base->flags & TPU_K_FLAG_LIST),
           "%s has no elementwise base kernel", e->name);
  }
  CHECK(lists > 50);
  tpu_k_list_op_t op;
  CHECK(!tpu_k_list_op("aten::mul_.Scalar", &op));
  CHECK(!tpu_k_list_op(NULL, &op));
}

typedef struct {
  int n;
  uintptr_t begin[8], end[8];
  bool write[8];
} ranges_t;

static void note_range(void* vctx, uintptr_t begin, uintptr_t end, bool write) {
  ranges_t* r = vctx;
  if (r->n < 8) {
    r->begin[r->n] = begin;
    r->end[r->n] = end;
    r->write[r->n] = write;
  }
  r->n++;
}

/* _foreach_addcmul_.ScalarList over [x0 (70000, contiguous), x1 (3x4 transposed)]. */
static void test_pieces_footprint_and_run(void) {
  const int64_t n0 = 70000;
  const int64_t s1[2] = {4, 3};
  const int perm[2] = {1, 0}; /* strides {1, 4}: a transposed 3x4 buffer */
  tt_t a0 = tku_alloc(TPU_DTYPE_F32, 1, &n0, NULL, 1, 0);
  tt_t b0 = tku_alloc(TPU_DTYPE_F32, 1, &n0, NULL, 1, 0);
  tt_t a1 = tku_alloc(TPU_DTYPE_F32, 2, s1, perm, 1, 0);
  tt_t b1 = tku_alloc(TPU_DTYPE_F32, 2, s1, perm, 1, 0);
  uint64_t rng = 7;
  tku_fill(&a0, &rng, 1.0, false);
  tku_fill(&b0, &rng, 1.0, false);
  tku_fill(&a1, &rng, 1.0, false);
  tku_fill(&b1, &rng, 1.0, false);
  tpu_tensor_t self[2] = {a0.t, a1.t}, other[2] = {b0.t, b1.t};
  double want0[3], want1[12];
  double scal[2] = {0.5, -2.0};
  for (int i = 0; i < 3; ++i) {
    int64_t k = i * 30000;
    want0[i] = getf(&a0.t, k) + 0.5 * getf(&b0.t, k) * getf(&b0.t, k);
  }
  for (int i = 0; i < 12; ++i) want1[i] = getf(&a1.t, i) - 2.0 * getf(&b1.t, i) * getf(&b1.t, i);
  tpu_k_value_t args[4] = {vts(self, 2), vts(other, 2), vts(other, 2), tku_value(TPU_K_DOUBLES)};
  args[3].v.doubles.data = scal;
  args[3].v.doubles.len = 2;
  tpu_k_call_t c = mkcall("aten::_foreach_addcmul_.ScalarList", 4, args, 0, NULL);
  const tpu_k_entry_t* e = tpu_k_lookup(c.op);
  CHECK(e && (e->flags & TPU_K_FLAG_LIST));
  CHECK_OK(e->check(&c));
  CHECK(tpu_k_list_length(&c) == 2);
  CHECK(tpu_k_list_pieces(&c, 0) == (n0 + TPU_K_LIST_CHUNK - 1) / TPU_K_LIST_CHUNK);
  CHECK(tpu_k_list_pieces(&c, 1) == 1); /* not contiguous: one piece */

  ranges_t r = {0};
  tpu_k_list_footprint(&c, 0, 1, note_range, &r);
  uintptr_t base0 = (uintptr_t)a0.t.data + TPU_K_LIST_CHUNK * 4;
  CHECK(r.n == 3 && r.begin[0] == base0 && r.end[0] == base0 + TPU_K_LIST_CHUNK * 4 && r.write[0]);
  CHECK(!r.write[1] && !r.write[2]);
  memset(&r, 0, sizeof(r));
  tpu_k_list_footprint(&c, 1, 0, note_range, &r);
  CHECK(r.n == 3 && r.begin[0] == (uintptr_t)a1.t.data && r.end[0] == (uintptr_t)a1.t.data + 12 * 4);

  tpu_k_list_op_t op;
  CHECK(tpu_k_list_op(c.op, &op));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = tpu_k_list_pieces(&c, i) - 1; k >= 0; --k) CHECK_OK(tpu_k_list_run_piece(&op, &c, i, k));
  bool good = true;
  for (int i = 0; i < 3; ++i) good = good && close_f(getf(&a0.t, i * 30000), want0[i], 1e-6, 1e-6);
  for (int i = 0; i < 12; ++i) good = good && close_f(getf(&a1.t, i), want1[i], 1e-6, 1e-6);
  CHECK(good);

  /* check(): list lengths must agree, and the base's checks apply per element. */
  args[3].v.doubles.len = 1;
  CHECK_STATUS(e->check(&c), TPU_STATUS_INVALID_ARGUMENT, "expected 2");
  args[3].v.doubles.len = 2;
  args[1] = vts(other, 1);
  CHECK_STATUS(e->check(&c), TPU_STATUS_INVALID_ARGUMENT, "argument 1");
  fr(&a0); fr(&b0); fr(&a1); fr(&b1);
}

/* Out of place: one output per element; a whole run equals CPU math. */
static void test_out_of_place_run(void) {
  const int64_t n = 40000;
  tt_t x = tku_alloc(TPU_DTYPE_F32, 1, &n, NULL, 1, 0);
  tt_t y = tku_alloc(TPU_DTYPE_F32, 1, &n, NULL, 1, 0);
  for (int64_t i = 0; i < n; ++i) setf(&x.t, i, (double)(i % 97) + 0.25);
  tpu_tensor_t in[1] = {x.t}, out[1] = {y.t};
  tpu_k_value_t args[1] = {vts(in, 1)};
  CHECK_OK(call_op("aten::_foreach_sqrt", 1, args, 1, out));
  bool good = true;
  for (int64_t i = 0; i < n; i += 997) good = good && close_f(getf(&y.t, i), sqrt((double)(i % 97) + 0.25), 1e-6, 0);
  CHECK(good);
  fr(&x); fr(&y);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_every_list_entry_has_a_base);
  RUN_TEST(test_pieces_footprint_and_run);
  RUN_TEST(test_out_of_place_run);
  return tku_finish();
}
