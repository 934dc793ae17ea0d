/* Tests of the graph compiler (tpu/graph.h): building, fusion of pointwise
 * chains into tiles, liveness planning, one-submission runs, outputs that
 * are views, and errors that leave the graph usable. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_kernel_util.h"
#include "tpu/graph.h"
#include "tpu/hal.h"
#include "tpu/runtime.h"
#include "tpu/trace.h"

/* Code generation mode of the graphs the fusion tests build (codegen.h:
 * 0 tile interpreter, 2 generated C). */
static int32_t g_codegen;

static tpu_hal_device_t* dev0(void) {
  tpu_hal_device_t* d = NULL;
  tpu_runtime_device(0, &d);
  return d;
}

static float* dalloc(size_t n) {
  void* p = NULL;
  tpu_status_t st = tpu_hal_device_vt(dev0())->allocate(dev0(), n * sizeof(float), &p);
  CHECK(st == TPU_OK);
  tpu_status_free(st);
  return p;
}
static void dfree(void* p) { tpu_hal_device_vt(dev0())->deallocate(dev0(), p); }
static void sync0(void) { CHECK_OK(tpu_hal_device_vt(dev0())->synchronize(dev0())); }

static tpu_graph_arg_t A_T(int32_t v) { return (tpu_graph_arg_t){.kind = TPU_K_TENSOR, .i = v}; }
static tpu_graph_arg_t A_D(double d) { return (tpu_graph_arg_t){.kind = TPU_K_DOUBLE, .d = d}; }
static tpu_graph_arg_t A_B(bool b) { return (tpu_graph_arg_t){.kind = TPU_K_BOOL, .i = b}; }
static tpu_graph_arg_t A_I(const int64_t* v, int64_t n) {
  return (tpu_graph_arg_t){.kind = TPU_K_INTS, .ints = v, .len = n};
}
static tpu_graph_arg_t A_N(void) { return (tpu_graph_arg_t){.kind = TPU_K_NONE}; }

static int32_t node1(tpu_graph_t* g, const char* op, uint32_t flags, int32_t nargs, const tpu_graph_arg_t* args,
                     tpu_tensor_t meta) {
  int32_t out = -1;
  CHECK_OK(tpu_graph_node(g, op, flags, nargs, args, 1, &meta, NULL, &out));
  return out;
}

/* y = exp((a + b) * (a + b)) * 0.5 with a [R, C], b [C] broadcast; s = sum(y, 1);
 * plus h = a @ w, then relu(h) + 1: pointwise chains around a GEMM. */
static void test_fused_chain(int64_t R, int64_t C) {
  const int64_t K = 8;
  int64_t rc[2] = {R, C}, c1[1] = {C}, r1[1] = {R}, ck[2] = {C, K}, rk[2] = {R, K};
  float* a = dalloc((size_t)(R * C));
  float* b = dalloc((size_t)C);
  float* w = dalloc((size_t)(C * K));
  uint64_t seed = 42;
  for (int64_t i = 0; i < R * C; ++i) a[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < C; ++i) b[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < C * K; ++i) w[i] = (float)tku_urand(&seed);

  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(0, &g));
  tpu_graph_set_codegen(g, g_codegen);
  tpu_tensor_t m_rc = T_(NULL, TPU_DTYPE_F32, 2, rc, NULL), m_c = T_(NULL, TPU_DTYPE_F32, 1, c1, NULL);
  tpu_tensor_t m_ck = T_(NULL, TPU_DTYPE_F32, 2, ck, NULL), m_rk = T_(NULL, TPU_DTYPE_F32, 2, rk, NULL);
  tpu_tensor_t m_r = T_(NULL, TPU_DTYPE_F32, 1, r1, NULL);
  int32_t va, vb, vw;
  CHECK_OK(tpu_graph_input(g, &m_rc, &va));
  CHECK_OK(tpu_graph_input(g, &m_c, &vb));
  CHECK_OK(tpu_graph_input(g, &m_ck, &vw));
  const uint32_t PW = TPU_GRAPH_NODE_POINTWISE;
  tpu_graph_arg_t add_args[3] = {A_T(va), A_T(vb), A_D(1.0)};
  int32_t t1 = node1(g, "aten::add.Tensor", PW, 3, add_args, m_rc);
  tpu_graph_arg_t mul_args[2] = {A_T(t1), A_T(t1)};
  int32_t t2 = node1(g, "aten::mul.Tensor", PW, 2, mul_args, m_rc);
  tpu_graph_arg_t exp_args[1] = {A_T(t2)};
  int32_t t3 = node1(g, "aten::exp", PW, 1, exp_args, m_rc);
  tpu_graph_arg_t half_args[2] = {A_T(t3), A_D(0.5)};
  int32_t y = node1(g, "aten::mul.Scalar", PW, 2, half_args, m_rc);
  int64_t dim1[1] = {1};
  tpu_graph_arg_t sum_args[4] = {A_T(y), A_I(dim1, 1), A_B(false), A_N()};
  int32_t s = node1(g, "aten::sum.dim_IntList", 0, 4, sum_args, m_r);
  tpu_graph_arg_t mm_args[2] = {A_T(va), A_T(vw)};
  int32_t h = node1(g, "aten::mm", 0, 2, mm_args, m_rk);
  tpu_graph_arg_t relu_args[1] = {A_T(h)};
  int32_t hr = node1(g, "aten::relu", PW, 1, relu_args, m_rk);
  tpu_graph_arg_t p1_args[3] = {A_T(hr), A_D(1.0), A_D(1.0)};
  int32_t hp = node1(g, "aten::add.Scalar", PW, 3, p1_args, m_rk);
  /* a transposed view of y as an output too */
  int64_t cr[2] = {C, R}, tstr[2] = {1, C};
  tpu_tensor_t m_cr = T_(NULL, TPU_DTYPE_F32, 2, cr, tstr);
  int32_t yt;
  CHECK_OK(tpu_graph_view(g, y, &m_cr, 0, &yt));
  CHECK_OK(tpu_graph_mark_output(g, s));
  CHECK_OK(tpu_graph_mark_output(g, hp));
  CHECK_OK(tpu_graph_mark_output(g, yt));
  CHECK_OK(tpu_graph_compile(g));

  tpu_graph_stats_t st;
  tpu_graph_get_stats(g, &st);
  CHECKF(st.nodes == 8, "nodes %lld", (long long)st.nodes);
  /* add,mul,exp,mul.Scalar fuse (y is materialised: viewed and read by sum);
   * relu,add.Scalar fuse; sum and mm stand alone. */
  CHECKF(st.fused_groups == 2 && st.fused_nodes == 6, "groups %lld nodes %lld", (long long)st.fused_groups,
         (long long)st.fused_nodes);
  CHECKF(st.scratch_values == 4, "scratch %lld", (long long)st.scratch_values); /* t1 t2 t3 hr */
  CHECKF(st.steps == 4, "steps %lld", (long long)st.steps);
  /* both groups are pointwise over their whole shape: both generated */
  CHECKF(st.codegen_groups == (g_codegen ? 2 : 0), "codegen groups %lld", (long long)st.codegen_groups);
  CHECK(st.codegen_unavailable == 0);
  CHECK(tpu_graph_num_inputs(g) == 3);
  CHECK(tpu_graph_num_output_buffers(g) == 3);

  int32_t kind, idx_s, idx_h, idx_y;
  int64_t off;
  CHECK_OK(tpu_graph_locate(g, s, &kind, &idx_s, &off));
  CHECK(kind == TPU_GRAPH_BUF_OUTPUT && off == 0);
  CHECK_OK(tpu_graph_locate(g, hp, &kind, &idx_h, &off));
  CHECK_OK(tpu_graph_locate(g, yt, &kind, &idx_y, &off));
  CHECK(kind == TPU_GRAPH_BUF_OUTPUT);
  CHECK(tpu_graph_output_buffer_bytes(g, idx_y) == (size_t)(R * C) * sizeof(float));
  CHECK_STATUS(tpu_graph_locate(g, t2, &kind, &idx_y, &off), TPU_STATUS_FAILED_PRECONDITION, "not marked");

  float* outs[3];
  outs[idx_s] = dalloc((size_t)R);
  outs[idx_h] = dalloc((size_t)(R * K));
  outs[idx_y] = dalloc((size_t)(R * C));
  void* ins[3] = {a, b, w};
  for (int rep = 0; rep < 2; ++rep) { /* the arena is reused by the second run */
    memset(outs[idx_s], 0, (size_t)R * sizeof(float));
    bool traced = rep == 0 && R == 3; /* the device-queue trace of one run (tpu/trace.h) */
    if (traced) CHECK_OK(tpu_trace_start(0));
    CHECK_OK(tpu_graph_run(g, ins, (void* const*)outs, 0));
    sync0();
    if (traced) {
      tpu_trace_stop();
      tpu_trace_event_t* ev = NULL;
      uint64_t dropped = 1;
      size_t n = tpu_trace_take(&ev, &dropped);
      CHECKF(n == 5 && dropped == 0, "%zu events", n); /* 4 steps, then the run */
      if (n == 5) {
        CHECK_STREQ(ev[4].name, "tpu::graph");
        CHECK(ev[4].kind == TPU_TRACE_WORK && ev[4].cpu_tid != 0 && ev[4].queued_ns <= ev[4].start_ns);
        int fused_chain = 0, fused_relu = 0, mm = 0, sum = 0;
        for (int i = 0; i < 4; ++i) {
          CHECK(ev[i].kind == TPU_TRACE_STEP && ev[i].bytes > 0);
          CHECK(ev[i].start_ns >= ev[4].start_ns && ev[i].end_ns <= ev[4].end_ns);
          fused_chain += strcmp(ev[i].name, "fused(add.Tensor+mul.Tensor+exp+mul.Scalar)") == 0;
          fused_relu += strcmp(ev[i].name, "fused(relu+add.Scalar)") == 0;
          mm += strcmp(ev[i].name, "aten::mm") == 0;
          sum += strcmp(ev[i].name, "aten::sum.dim_IntList") == 0;
          if (strcmp(ev[i].name, "aten::mm") == 0) /* a [R,C], w [C,K] -> [R,K] */
            CHECK(ev[i].bytes == (R * C + C * K + R * K) * (int64_t)sizeof(float));
        }
        CHECKF(fused_chain == 1 && fused_relu == 1 && mm == 1 && sum == 1, "%s | %s | %s | %s", ev[0].name,
               ev[1].name, ev[2].name, ev[3].name);
      }
      free(ev);
    }
    double max_err = 0;
    for (int64_t i = 0; i < R; ++i) {
      double rs = 0;
      for (int64_t j = 0; j < C; ++j) {
        double x = (double)a[i * C + j] + b[j];
        double yy = exp(x * x) * 0.5;
        rs += yy;
        max_err = fmax(max_err, fabs(yy - outs[idx_y][i * C + j]) / (1 + fabs(yy)));
      }
      max_err = fmax(max_err, fabs(rs - outs[idx_s][i]) / (1 + fabs(rs)));
      for (int64_t k = 0; k < K; ++k) {
        double hh = 0;
        for (int64_t j = 0; j < C; ++j) hh += (double)a[i * C + j] * w[j * K + k];
        double e = (hh > 0 ? hh : 0) + 1;
        max_err = fmax(max_err, fabs(e - outs[idx_h][i * K + k]) / (1 + fabs(e)));
      }
    }
    CHECKF(max_err < 1e-4, "R=%lld C=%lld rep %d max rel err %g", (long long)R, (long long)C, rep, max_err);
  }
  tpu_graph_release(g); /* after the runs: the queue kept its reference */
  dfree(a);
  dfree(b);
  dfree(w);
  for (int i = 0; i < 3; ++i) dfree(outs[i]);
}

/* RMSNorm as core ATen writes it: y = w * (x * rsqrt(mean(x^2, -1, keepdim) + eps)).
 * The keepdim reduction joins the pointwise chain: one group, tiled along
 * rows (the reduced last dim is never split), or one tile when rows == 1. */
static void test_fused_reduction(int64_t R, int64_t C) {
  int64_t rc[2] = {R, C}, r1[2] = {R, 1}, c1[1] = {C};
  float* x = dalloc((size_t)(R * C));
  float* w = dalloc((size_t)C);
  float* y = dalloc((size_t)(R * C));
  uint64_t seed = 7;
  for (int64_t i = 0; i < R * C; ++i) x[i] = (float)tku_urand(&seed) * 3;
  for (int64_t i = 0; i < C; ++i) w[i] = (float)tku_urand(&seed);
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(0, &g));
  tpu_graph_set_codegen(g, g_codegen);
  tpu_tensor_t m_rc = T_(NULL, TPU_DTYPE_F32, 2, rc, NULL), m_r1 = T_(NULL, TPU_DTYPE_F32, 2, r1, NULL);
  tpu_tensor_t m_c = T_(NULL, TPU_DTYPE_F32, 1, c1, NULL);
  int32_t vx, vw;
  CHECK_OK(tpu_graph_input(g, &m_rc, &vx));
  CHECK_OK(tpu_graph_input(g, &m_c, &vw));
  const uint32_t PW = TPU_GRAPH_NODE_POINTWISE, RD = TPU_GRAPH_NODE_REDUCTION;
  tpu_graph_arg_t pow_args[2] = {A_T(vx), A_D(2.0)};
  int32_t sq = node1(g, "aten::pow.Tensor_Scalar", PW, 2, pow_args, m_rc);
  int64_t last[1] = {-1};
  tpu_graph_arg_t mean_args[4] = {A_T(sq), A_I(last, 1), A_B(true), A_N()};
  int32_t ms = node1(g, "aten::mean.dim", RD, 4, mean_args, m_r1);
  tpu_graph_arg_t eps_args[3] = {A_T(ms), A_D(1e-6), A_D(1.0)};
  int32_t me = node1(g, "aten::add.Scalar", PW, 3, eps_args, m_r1);
  tpu_graph_arg_t rs_args[1] = {A_T(me)};
  int32_t rs = node1(g, "aten::rsqrt", PW, 1, rs_args, m_r1);
  tpu_graph_arg_t n_args[2] = {A_T(vx), A_T(rs)};
  int32_t nx = node1(g, "aten::mul.Tensor", PW, 2, n_args, m_rc);
  tpu_graph_arg_t w_args[2] = {A_T(vw), A_T(nx)};
  int32_t vy = node1(g, "aten::mul.Tensor", PW, 2, w_args, m_rc);
  CHECK_OK(tpu_graph_mark_output(g, vy));
  CHECK_OK(tpu_graph_compile(g));
  tpu_graph_stats_t st;
  tpu_graph_get_stats(g, &st);
  CHECKF(st.fused_groups == 1 && st.fused_nodes == 6 && st.steps == 1, "groups %lld nodes %lld steps %lld",
         (long long)st.fused_groups, (long long)st.fused_nodes, (long long)st.steps);
  CHECKF(st.scratch_values == 5 && st.arena_bytes == 0, "scratch %lld arena %lld", (long long)st.scratch_values,
         (long long)st.arena_bytes);
  /* generated: one pass over each row for the mean, one for the output */
  CHECKF(st.codegen_groups == (g_codegen ? 1 : 0), "codegen groups %lld", (long long)st.codegen_groups);
  void* ins[2] = {x, w};
  void* outs[1] = {y};
  CHECK_OK(tpu_graph_run(g, ins, outs, 0));
  sync0();
  double max_err = 0;
  for (int64_t i = 0; i < R; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < C; ++j) ss += (double)x[i * C + j] * x[i * C + j];
    double r = 1.0 / sqrt(ss / (double)C + 1e-6);
    for (int64_t j = 0; j < C; ++j) {
      double e = w[j] * (x[i * C + j] * r);
      max_err = fmax(max_err, fabs(e - y[i * C + j]) / (1 + fabs(e)));
    }
  }
  CHECKF(max_err < 1e-5, "R=%lld C=%lld max rel err %g", (long long)R, (long long)C, max_err);
  tpu_graph_release(g);
  dfree(x);
  dfree(w);
  dfree(y);
}

/* A chain of GEMMs: liveness lets the arena reuse dead buffers. */
static void test_planning(void) {
  const int64_t N = 32;
  int64_t nn[2] = {N, N};
  tpu_tensor_t m = T_(NULL, TPU_DTYPE_F32, 2, nn, NULL);
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(0, &g));
  int32_t x, w;
  CHECK_OK(tpu_graph_input(g, &m, &x));
  CHECK_OK(tpu_graph_input(g, &m, &w));
  int32_t cur = x;
  for (int i = 0; i < 10; ++i) {
    tpu_graph_arg_t args[2] = {A_T(cur), A_T(w)};
    cur = node1(g, "aten::mm", 0, 2, args, m);
  }
  CHECK_OK(tpu_graph_mark_output(g, cur));
  CHECK_OK(tpu_graph_compile(g));
  tpu_graph_stats_t st;
  tpu_graph_get_stats(g, &st);
  CHECKF(st.unplanned_bytes == 9 * N * N * 4, "unplanned %lld", (long long)st.unplanned_bytes);
  CHECKF(st.arena_bytes == 2 * N * N * 4, "arena %lld", (long long)st.arena_bytes); /* ping-pong */
  float* xs = dalloc((size_t)(N * N));
  float* ws = dalloc((size_t)(N * N));
  float* out = dalloc((size_t)(N * N));
  for (int64_t i = 0; i < N * N; ++i) {
    xs[i] = (float)(i % 7) - 3;
    ws[i] = (i / N == i % N) ? 1.0f : 0.0f; /* identity */
  }
  void* ins[2] = {xs, ws};
  void* outs[1] = {out};
  CHECK_OK(tpu_graph_run(g, ins, outs, 0));
  sync0();
  CHECK(memcmp(out, xs, (size_t)(N * N) * sizeof(float)) == 0);
  tpu_graph_release(g);
  dfree(xs);
  dfree(ws);
  dfree(out);
}

static void test_errors(void) {
  int64_t s4[1] = {4}, s5[1] = {5};
  tpu_tensor_t m4 = T_(NULL, TPU_DTYPE_F32, 1, s4, NULL), m5 = T_(NULL, TPU_DTYPE_F32, 1, s5, NULL);
  tpu_graph_t* g = NULL;
  CHECK_STATUS(tpu_graph_create(7, &g), TPU_STATUS_INVALID_ARGUMENT, "tpu:7");
  CHECK_OK(tpu_graph_create(0, &g));
  int32_t x, out;
  CHECK_OK(tpu_graph_input(g, &m4, &x));
  tpu_graph_arg_t args[2] = {A_T(x), A_T(x)};
  CHECK_STATUS(tpu_graph_node(g, "aten::no_such_op", 0, 2, args, 1, &m4, NULL, &out), TPU_STATUS_UNIMPLEMENTED,
               "no_such_op");
  tpu_graph_arg_t bad[2] = {A_T(x), A_T(99)};
  CHECK_STATUS(tpu_graph_node(g, "aten::mul.Tensor", 0, 2, bad, 1, &m4, NULL, &out), TPU_STATUS_INVALID_ARGUMENT,
               "no value 99");
  /* a failed node leaves the graph as it was */
  out = node1(g, "aten::mul.Tensor", TPU_GRAPH_NODE_POINTWISE, 2, args, m4);
  CHECK(out == 1);
  int32_t v;
  CHECK_STATUS(tpu_graph_view(g, x, &m5, -8, &v), TPU_STATUS_OK, NULL); /* inputs may be viewed backwards */
  int32_t same = -1, shifted = -1;
  CHECK_OK(tpu_graph_view(g, out, &m4, 0, &same)); /* an identity view is the value itself */
  CHECK(same == out);
  CHECK_OK(tpu_graph_view(g, x, &m4, 4, &shifted));
  CHECK(shifted != x);
  CHECK_OK(tpu_graph_mark_output(g, out));
  CHECK_STATUS(tpu_graph_run(g, NULL, NULL, 0), TPU_STATUS_FAILED_PRECONDITION, "before compile");
  CHECK_OK(tpu_graph_compile(g));
  CHECK_STATUS(tpu_graph_input(g, &m4, &x), TPU_STATUS_FAILED_PRECONDITION, "already compiled");
  CHECK_STATUS(tpu_graph_run(g, NULL, NULL, 0), TPU_STATUS_INVALID_ARGUMENT, "missing");
  tpu_graph_release(g);
}

/* GEMM epilogue: z = y * mean(y*y, -1, keepdim) with y = silu(h) + r and
 * h = x @ w (+ bias) (w a transposed weight, as linear() passes it), h seen
 * as [B, S, N] when B > 0 (linear() on 3-D input). Fused, the GEMM heads the
 * group: row tiles (B whole) when M >= 128 rows per pool thread, and then the
 * keepdim reduction joins too; else column tiles, where the reduction over
 * the tiled dim cannot join. Results equal the same graph run node by node. */
static int32_t build_epilogue(tpu_graph_t* g, bool fused, bool keep_h, int64_t B, int64_t M, int64_t K, int64_t N,
                              bool bias, int32_t* out_h) {
  int64_t mk[2] = {M, K}, kn[2] = {K, N}, knst[2] = {1, K}, mn[2] = {M, N}, n1[1] = {N};
  int64_t bsn[3] = {B, B ? M / B : 0, N}, bs1[3] = {B, B ? M / B : 0, 1}, m1[2] = {M, 1};
  tpu_tensor_t m_mk = T_(NULL, TPU_DTYPE_F32, 2, mk, NULL), m_kn = T_(NULL, TPU_DTYPE_F32, 2, kn, knst);
  tpu_tensor_t m_mn = T_(NULL, TPU_DTYPE_F32, 2, mn, NULL), m_n = T_(NULL, TPU_DTYPE_F32, 1, n1, NULL);
  tpu_tensor_t m_y = B ? T_(NULL, TPU_DTYPE_F32, 3, bsn, NULL) : m_mn;
  tpu_tensor_t m_r = B ? T_(NULL, TPU_DTYPE_F32, 3, bs1, NULL) : T_(NULL, TPU_DTYPE_F32, 2, m1, NULL);
  int32_t vx, vw, vb, vr;
  CHECK_OK(tpu_graph_input(g, &m_mk, &vx));
  CHECK_OK(tpu_graph_input(g, &m_kn, &vw));
  CHECK_OK(tpu_graph_input(g, &m_n, &vb));
  CHECK_OK(tpu_graph_input(g, &m_y, &vr));
  const uint32_t PW = fused ? TPU_GRAPH_NODE_POINTWISE : 0, RD = fused ? TPU_GRAPH_NODE_REDUCTION : 0;
  const uint32_t GM = fused ? TPU_GRAPH_NODE_GEMM : 0;
  int32_t h;
  if (bias) {
    tpu_graph_arg_t args[5] = {A_T(vb), A_T(vx), A_T(vw), A_D(1.0), A_D(1.0)};
    h = node1(g, "aten::addmm", GM, 5, args, m_mn);
  } else {
    tpu_graph_arg_t args[2] = {A_T(vx), A_T(vw)};
    h = node1(g, "aten::mm", GM, 2, args, m_mn);
  }
  int32_t hv = h;
  if (B) CHECK_OK(tpu_graph_view(g, h, &m_y, 0, &hv));
  tpu_graph_arg_t sg_args[1] = {A_T(hv)};
  int32_t sg = node1(g, "aten::sigmoid", PW, 1, sg_args, m_y);
  tpu_graph_arg_t si_args[2] = {A_T(hv), A_T(sg)};
  int32_t si = node1(g, "aten::mul.Tensor", PW, 2, si_args, m_y);
  tpu_graph_arg_t y_args[3] = {A_T(si), A_T(vr), A_D(1.0)};
  int32_t y = node1(g, "aten::add.Tensor", PW, 3, y_args, m_y);
  tpu_graph_arg_t q_args[2] = {A_T(y), A_T(y)};
  int32_t q = node1(g, "aten::mul.Tensor", PW, 2, q_args, m_y);
  int64_t last[1] = {-1};
  tpu_graph_arg_t ms_args[4] = {A_T(q), A_I(last, 1), A_B(true), A_N()};
  int32_t ms = node1(g, "aten::mean.dim", RD, 4, ms_args, m_r);
  tpu_graph_arg_t z_args[2] = {A_T(y), A_T(ms)};
  int32_t z = node1(g, "aten::mul.Tensor", PW, 2, z_args, m_y);
  CHECK_OK(tpu_graph_mark_output(g, z));
  *out_h = -1;
  if (keep_h) {
    CHECK_OK(tpu_graph_mark_output(g, hv));
    *out_h = hv;
  }
  CHECK_OK(tpu_graph_compile(g));
  return z;
}

#define GEMM_MIN_ROWS 128 /* graph.c: no GEMM-headed group when every pool thread gets this many rows */
static void test_gemm_epilogue(int64_t B, int64_t M, int64_t K, int64_t N, bool bias, bool keep_h) {
  float* x = dalloc((size_t)(M * K));
  float* w = dalloc((size_t)(N * K));
  float* b = dalloc((size_t)N);
  float* r = dalloc((size_t)(M * N));
  uint64_t seed = 11;
  for (int64_t i = 0; i < M * K; ++i) x[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < N * K; ++i) w[i] = (float)tku_urand(&seed) * 0.3f;
  for (int64_t i = 0; i < N; ++i) b[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < M * N; ++i) r[i] = (float)tku_urand(&seed);
  float* res[2][2];
  tpu_graph_stats_t st[2];
  for (int fused = 0; fused < 2; ++fused) {
    tpu_graph_t* g = NULL;
    CHECK_OK(tpu_graph_create(0, &g));
    int32_t h, z = build_epilogue(g, fused, keep_h, B, M, K, N, bias, &h);
    tpu_graph_get_stats(g, &st[fused]);
    res[fused][0] = dalloc((size_t)(M * N));
    res[fused][1] = dalloc((size_t)(M * N));
    void* outs[2];
    int32_t kind, idx;
    int64_t off;
    CHECK_OK(tpu_graph_locate(g, z, &kind, &idx, &off));
    outs[idx] = res[fused][0];
    if (keep_h) {
      CHECK_OK(tpu_graph_locate(g, h, &kind, &idx, &off));
      outs[idx] = res[fused][1];
    }
    void* ins[4] = {x, w, b, r};
    CHECK_OK(tpu_graph_run(g, ins, outs, 0));
    sync0();
    tpu_graph_release(g);
  }
  bool rows = M >= GEMM_MIN_ROWS * tpu_threadpool_size(tpu_runtime_threadpool());
  CHECKF(st[0].fused_groups == 0 && st[0].steps == 7, "unfused: groups %lld", (long long)st[0].fused_groups);
  /* many rows: the GEMM alone, then one group of 6 (sg si y q ms in tiles);
   * columns: gemm..q in column tiles, then mean+mul */
  int64_t want_groups = rows ? 1 : 2, want_scratch = rows ? 5 : 4 - (keep_h ? 1 : 0);
  CHECKF(st[1].fused_groups == want_groups && st[1].gemm_groups == (rows ? 0 : 1) && st[1].steps == 2 &&
             st[1].fused_nodes == (rows ? 6 : 7) && st[1].scratch_values == want_scratch,
         "B=%lld M=%lld N=%lld: groups %lld gemm %lld steps %lld nodes %lld scratch %lld", (long long)B,
         (long long)M, (long long)N, (long long)st[1].fused_groups, (long long)st[1].gemm_groups,
         (long long)st[1].steps, (long long)st[1].fused_nodes, (long long)st[1].scratch_values);
  double max_err = 0;
  for (int j = 0; j < (keep_h ? 2 : 1); ++j) {
    for (int64_t i = 0; i < M * N; ++i) {
      double e = res[0][j][i];
      max_err = fmax(max_err, fabs(e - res[1][j][i]) / (1 + fabs(e)));
    }
  }
  CHECKF(max_err < 1e-5, "B=%lld M=%lld K=%lld N=%lld max rel err %g", (long long)B, (long long)M, (long long)K,
         (long long)N, max_err);
  for (int f = 0; f < 2; ++f) {
    dfree(res[f][0]);
    dfree(res[f][1]);
  }
  dfree(x);
  dfree(w);
  dfree(b);
  dfree(r);
}

/* Products of one row x [1, K] by W_j^T (q, k and v while decoding), each
 * through its own view of x, then one product of another row: the first
 * `n` run as one batched step (graph.c batch_gemvs), the last apart; every
 * result equals a double-precision reference. */
static void test_gemv_batch(int64_t K, const int64_t* Ns, int n) {
  int64_t xk[2] = {1, K};
  float* x = dalloc((size_t)K);
  float* x2 = dalloc((size_t)K);
  float* w[5];
  float* out[5];
  uint64_t seed = 5;
  for (int64_t i = 0; i < K; ++i) x[i] = (float)tku_urand(&seed), x2[i] = (float)tku_urand(&seed);
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(0, &g));
  tpu_tensor_t m_x = T_(NULL, TPU_DTYPE_F32, 2, xk, NULL);
  int32_t vx, vx2, vw[5], prod[5];
  CHECK_OK(tpu_graph_input(g, &m_x, &vx));
  CHECK_OK(tpu_graph_input(g, &m_x, &vx2));
  for (int j = 0; j <= n; ++j) {
    int64_t N = Ns[j], kn[2] = {K, N}, knst[2] = {1, K}, on[2] = {1, N};
    w[j] = dalloc((size_t)(N * K));
    out[j] = dalloc((size_t)N);
    for (int64_t i = 0; i < N * K; ++i) w[j][i] = (float)tku_urand(&seed) * 0.3f;
    tpu_tensor_t m_w = T_(NULL, TPU_DTYPE_F32, 2, kn, knst), m_o = T_(NULL, TPU_DTYPE_F32, 2, on, NULL);
    CHECK_OK(tpu_graph_input(g, &m_w, &vw[j]));
    int32_t xv;
    CHECK_OK(tpu_graph_view(g, j < n ? vx : vx2, &m_x, 0, &xv));
    tpu_graph_arg_t args[2] = {A_T(xv), A_T(vw[j])};
    prod[j] = node1(g, "aten::mm", 0, 2, args, m_o);
    CHECK_OK(tpu_graph_mark_output(g, prod[j]));
  }
  CHECK_OK(tpu_graph_compile(g));
  tpu_graph_stats_t st;
  tpu_graph_get_stats(g, &st);
  CHECKF(st.gemv_batches == 1 && st.gemv_batched == n && st.steps == 2, "batches %lld batched %lld steps %lld",
         (long long)st.gemv_batches, (long long)st.gemv_batched, (long long)st.steps);
  void* ins[7] = {x, x2};
  void* outs[5];
  for (int j = 0; j <= n; ++j) {
    int32_t kind, idx;
    int64_t off;
    ins[2 + j] = w[j];
    CHECK_OK(tpu_graph_locate(g, prod[j], &kind, &idx, &off));
    outs[idx] = out[j];
  }
  CHECK_OK(tpu_graph_run(g, ins, outs, 0));
  sync0();
  tpu_graph_release(g);
  double max_err = 0;
  for (int j = 0; j <= n; ++j) {
    const float* xr = j < n ? x : x2;
    for (int64_t c = 0; c < Ns[j]; ++c) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += (double)xr[k] * w[j][c * K + k];
      max_err = fmax(max_err, fabs(ref - out[j][c]) / (1 + fabs(ref)));
    }
    dfree(w[j]);
    dfree(out[j]);
  }
  CHECKF(max_err < 1e-5, "K=%lld max rel err %g", (long long)K, max_err);
  dfree(x);
  dfree(x2);
}

/* ---- convolution and group norm heads ------------------------------------------ */

static tpu_graph_arg_t A_INT(int64_t v) { return (tpu_graph_arg_t){.kind = TPU_K_INT, .i = v}; }

/* A convolution problem: x [N, Cin, sp...] * w [Cout, Cin/G, k...] (+ b) with
 * the same stride, padding and dilation in every spatial dim. */
typedef struct {
  int nd;
  int64_t N, Cin, Cout, G, sp[3], k, s, p, d;
  bool bias;
} conv_case_t;

static int64_t conv_out(const conv_case_t* c, int j) { return (c->sp[j] + 2 * c->p - c->d * (c->k - 1) - 1) / c->s + 1; }

/* double-precision reference of y = conv(x, w) + b, y contiguous */
static void conv_ref(const conv_case_t* c, const float* x, const float* w, const float* b, double* y) {
  int64_t os[3] = {1, 1, 1}, is[3] = {1, 1, 1}, ks[3] = {1, 1, 1};
  for (int j = 0; j < c->nd; ++j) os[j] = conv_out(c, j), is[j] = c->sp[j], ks[j] = c->k;
  int64_t cg = c->Cin / c->G, mg = c->Cout / c->G, P = os[0] * os[1] * os[2], I = is[0] * is[1] * is[2];
  int64_t KK = ks[0] * ks[1] * ks[2];
  for (int64_t n = 0; n < c->N; ++n)
    for (int64_t o = 0; o < c->Cout; ++o)
      for (int64_t q = 0; q < P; ++q) {
        int64_t oi[3] = {q / (os[1] * os[2]), q / os[2] % os[1], q % os[2]};
        double acc = c->bias ? b[o] : 0.0;
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t kk = 0; kk < KK; ++kk) {
            int64_t ki[3] = {kk / (ks[1] * ks[2]), kk / ks[2] % ks[1], kk % ks[2]}, off = 0;
            bool in = true;
            for (int j = 0; j < 3; ++j) {
              int64_t pos = j < c->nd ? oi[j] * c->s - c->p + ki[j] * c->d : 0;
              in = in && pos >= 0 && pos < is[j];
              off = off * is[j] + pos;
            }
            if (!in) continue;
            int64_t cin = (o / mg) * cg + ci;
            acc += (double)x[(n * c->Cin + cin) * I + off] * w[(o * cg + ci) * KK + kk];
          }
        y[(n * c->Cout + o) * P + q] = acc;
      }
}

/* z = sigmoid(y + t) * (y + t) + r with y = conv(x, w, b), t [N, Cout, 1...]
 * a per-channel add (a time embedding), r a residual: fused (the conv heads
 * a group of 4, tiled by output rows) and not, the interpreter and generated
 * code; `keep_y`: y is an output too (then it cannot live in tile scratch).
 * Every result equals the double reference. */
static void test_conv_epilogue(conv_case_t c, bool keep_y) {
  int nd = c.nd, ndim = nd + 2;
  int64_t xs[5] = {c.N, c.Cin}, ws[5] = {c.Cout, c.Cin / c.G}, ys[5] = {c.N, c.Cout}, ts[5] = {c.N, c.Cout};
  int64_t nx = c.N * c.Cin, nw = c.Cout * (c.Cin / c.G), ny = c.N * c.Cout;
  for (int j = 0; j < nd; ++j) {
    xs[2 + j] = c.sp[j], ws[2 + j] = c.k, ys[2 + j] = conv_out(&c, j), ts[2 + j] = 1;
    nx *= c.sp[j], nw *= c.k, ny *= ys[2 + j];
  }
  float* x = dalloc((size_t)nx);
  float* w = dalloc((size_t)nw);
  float* b = dalloc((size_t)c.Cout);
  float* t = dalloc((size_t)(c.N * c.Cout));
  float* r = dalloc((size_t)ny);
  uint64_t seed = 17;
  for (int64_t i = 0; i < nx; ++i) x[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < nw; ++i) w[i] = (float)tku_urand(&seed) * 0.3f;
  for (int64_t i = 0; i < c.Cout; ++i) b[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < c.N * c.Cout; ++i) t[i] = (float)tku_urand(&seed);
  for (int64_t i = 0; i < ny; ++i) r[i] = (float)tku_urand(&seed);
  double* yref = malloc(sizeof(double) * (size_t)ny);
  CHECK(yref != NULL);
  conv_ref(&c, x, w, b, yref);
  int64_t P = ny / (c.N * c.Cout);
  int64_t st[3] = {c.s, c.s, c.s}, pd[3] = {c.p, c.p, c.p}, dl[3] = {c.d, c.d, c.d}, op[3] = {0, 0, 0};
  for (int mode = 0; mode < 3; ++mode) { /* unfused; fused on the interpreter; fused, generated */
    tpu_graph_t* g = NULL;
    CHECK_OK(tpu_graph_create(0, &g));
    tpu_graph_set_codegen(g, mode == 2 ? 2 : 0);
    tpu_tensor_t m_x = T_(NULL, TPU_DTYPE_F32, ndim, xs, NULL), m_w = T_(NULL, TPU_DTYPE_F32, ndim, ws, NULL);
    tpu_tensor_t m_b = T1(NULL, TPU_DTYPE_F32, c.Cout), m_t = T_(NULL, TPU_DTYPE_F32, ndim, ts, NULL);
    tpu_tensor_t m_y = T_(NULL, TPU_DTYPE_F32, ndim, ys, NULL);
    int32_t vx, vw, vb, vt, vr;
    CHECK_OK(tpu_graph_input(g, &m_x, &vx));
    CHECK_OK(tpu_graph_input(g, &m_w, &vw));
    CHECK_OK(tpu_graph_input(g, &m_b, &vb));
    CHECK_OK(tpu_graph_input(g, &m_t, &vt));
    CHECK_OK(tpu_graph_input(g, &m_y, &vr));
    const uint32_t PW = mode ? TPU_GRAPH_NODE_POINTWISE : 0, CH = mode ? TPU_GRAPH_NODE_CHANNELS : 0;
    tpu_graph_arg_t cargs[9] = {A_T(vx), A_T(vw), c.bias ? A_T(vb) : A_N(), A_I(st, nd), A_I(pd, nd),
                                A_I(dl, nd), A_B(false), A_I(op, nd), A_INT(c.G)};
    int32_t y = node1(g, "tpu::conv_fwd", CH, 9, cargs, m_y);
    tpu_graph_arg_t a1[3] = {A_T(y), A_T(vt), A_D(1.0)};
    int32_t u = node1(g, "aten::add.Tensor", PW, 3, a1, m_y);
    tpu_graph_arg_t a2[1] = {A_T(u)};
    int32_t sg = node1(g, "aten::sigmoid", PW, 1, a2, m_y);
    tpu_graph_arg_t a3[2] = {A_T(sg), A_T(u)};
    int32_t si = node1(g, "aten::mul.Tensor", PW, 2, a3, m_y);
    tpu_graph_arg_t a4[3] = {A_T(si), A_T(vr), A_D(1.0)};
    int32_t z = node1(g, "aten::add.Tensor", PW, 3, a4, m_y);
    CHECK_OK(tpu_graph_mark_output(g, z));
    if (keep_y) CHECK_OK(tpu_graph_mark_output(g, y));
    CHECK_OK(tpu_graph_compile(g));
    tpu_graph_stats_t gs;
    tpu_graph_get_stats(g, &gs);
    CHECKF(gs.conv_groups == (mode ? 1 : 0) && gs.fused_nodes == (mode ? 5 : 0) && gs.steps == (mode ? 1 : 5) &&
               gs.codegen_groups == (mode == 2 ? 1 : 0),
           "conv nd=%d mode %d: conv groups %lld nodes %lld steps %lld generated %lld", nd, mode,
           (long long)gs.conv_groups, (long long)gs.fused_nodes, (long long)gs.steps, (long long)gs.codegen_groups);
    float* outz = dalloc((size_t)ny);
    float* outy = dalloc((size_t)ny);
    void* outs[2];
    int32_t kind, idx;
    int64_t off;
    CHECK_OK(tpu_graph_locate(g, z, &kind, &idx, &off));
    outs[idx] = outz;
    if (keep_y) {
      CHECK_OK(tpu_graph_locate(g, y, &kind, &idx, &off));
      outs[idx] = outy;
    }
    void* ins[5] = {x, w, b, t, r};
    CHECK_OK(tpu_graph_run(g, ins, outs, 0));
    sync0();
    double ey = 0, ez = 0;
    for (int64_t i = 0; i < ny; ++i) {
      double yv = yref[i], uv = yv + t[i / P], zv = uv / (1 + exp(-uv)) + r[i];
      ez = fmax(ez, fabs(zv - outz[i]) / (1 + fabs(zv)));
      if (keep_y) ey = fmax(ey, fabs(yv - outy[i]) / (1 + fabs(yv)));
    }
    CHECKF(ez < 1e-5 && ey < 1e-5, "conv nd=%d k=%lld s=%lld p=%lld d=%lld G=%lld mode %d: max rel err %g (y %g)", nd,
           (long long)c.k, (long long)c.s, (long long)c.p, (long long)c.d, (long long)c.G, mode, ez, ey);
    dfree(outz);
    dfree(outy);
    tpu_graph_release(g);
  }
  free(yref);
  dfree(x);
  dfree(w);
  dfree(b);
  dfree(t);
  dfree(r);
}

/* y = silu(group_norm(x, w, b)) * 2 (silu as x * sigmoid(x)), with the
 * statistics wanted (outputs) or not: fused (the norm heads the group, tiled
 * by whole groups of channels) and not, interpreter and generated code;
 * results and statistics equal a double reference. */
static void test_group_norm(int64_t N, int64_t C, int64_t H, int64_t W, int64_t G, bool stats) {
  int64_t xs[4] = {N, C, H, W}, ns[2] = {N, G}, HW = H * W, n = N * C * HW;
  float* x = dalloc((size_t)n);
  float* w = dalloc((size_t)C);
  float* b = dalloc((size_t)C);
  uint64_t seed = 23;
  for (int64_t i = 0; i < n; ++i) x[i] = (float)tku_urand(&seed) * 3.0f + 0.5f;
  for (int64_t i = 0; i < C; ++i) w[i] = (float)tku_urand(&seed), b[i] = (float)tku_urand(&seed);
  double* ref = malloc(sizeof(double) * (size_t)n);
  double* rmean = malloc(sizeof(double) * (size_t)(N * G));
  double* rrstd = malloc(sizeof(double) * (size_t)(N * G));
  CHECK(ref && rmean && rrstd);
  int64_t cg = C / G;
  for (int64_t i = 0; i < N * G; ++i) {
    const float* xg = x + i * cg * HW;
    double s = 0, v = 0;
    for (int64_t j = 0; j < cg * HW; ++j) s += xg[j];
    double m = s / (double)(cg * HW);
    for (int64_t j = 0; j < cg * HW; ++j) v += (xg[j] - m) * (xg[j] - m);
    double rs = 1.0 / sqrt(v / (double)(cg * HW) + 1e-5);
    rmean[i] = m, rrstd[i] = rs;
    for (int64_t j = 0; j < cg * HW; ++j) {
      int64_t ch = (i % G) * cg + j / HW;
      double yv = (xg[j] - m) * rs * w[ch] + b[ch];
      ref[i * cg * HW + j] = 2.0 * yv / (1 + exp(-yv));
    }
  }
  for (int mode = 0; mode < 3; ++mode) {
    tpu_graph_t* g = NULL;
    CHECK_OK(tpu_graph_create(0, &g));
    tpu_graph_set_codegen(g, mode == 2 ? 2 : 0);
    tpu_tensor_t m_x = T_(NULL, TPU_DTYPE_F32, 4, xs, NULL), m_c = T1(NULL, TPU_DTYPE_F32, C);
    tpu_tensor_t m_s = T_(NULL, TPU_DTYPE_F32, 2, ns, NULL), none = {0};
    int32_t vx, vw, vb;
    CHECK_OK(tpu_graph_input(g, &m_x, &vx));
    CHECK_OK(tpu_graph_input(g, &m_c, &vw));
    CHECK_OK(tpu_graph_input(g, &m_c, &vb));
    const uint32_t PW = mode ? TPU_GRAPH_NODE_POINTWISE : 0, CH = mode ? TPU_GRAPH_NODE_CHANNELS : 0;
    tpu_graph_arg_t gargs[5] = {A_T(vx), A_T(vw), A_T(vb), A_INT(G), A_D(1e-5)};
    tpu_tensor_t metas[3] = {m_x, stats ? m_s : none, stats ? m_s : none};
    int32_t gv[3];
    CHECK_OK(tpu_graph_node(g, "tpu::group_norm", CH, 5, gargs, 3, metas, NULL, gv));
    tpu_graph_arg_t a1[1] = {A_T(gv[0])};
    int32_t sg = node1(g, "aten::sigmoid", PW, 1, a1, m_x);
    tpu_graph_arg_t a2[2] = {A_T(gv[0]), A_T(sg)};
    int32_t si = node1(g, "aten::mul.Tensor", PW, 2, a2, m_x);
    tpu_graph_arg_t a3[2] = {A_T(si), A_D(2.0)};
    int32_t z = node1(g, "aten::mul.Scalar", PW, 2, a3, m_x);
    CHECK_OK(tpu_graph_mark_output(g, z));
    if (stats) {
      CHECK_OK(tpu_graph_mark_output(g, gv[1]));
      CHECK_OK(tpu_graph_mark_output(g, gv[2]));
    }
    CHECK_OK(tpu_graph_compile(g));
    tpu_graph_stats_t gs;
    tpu_graph_get_stats(g, &gs);
    CHECKF(gs.norm_groups == (mode ? 1 : 0) && gs.steps == (mode ? 1 : 4) && gs.codegen_groups == (mode == 2 ? 1 : 0),
           "group norm mode %d: norm groups %lld steps %lld generated %lld", mode, (long long)gs.norm_groups,
           (long long)gs.steps, (long long)gs.codegen_groups);
    float* outs_[3] = {dalloc((size_t)n), dalloc((size_t)(N * G)), dalloc((size_t)(N * G))};
    int32_t want[3] = {z, stats ? gv[1] : -1, stats ? gv[2] : -1};
    void* outs[3];
    for (int j = 0; j < 3; ++j) {
      if (want[j] < 0) continue;
      int32_t kind, idx;
      int64_t off;
      CHECK_OK(tpu_graph_locate(g, want[j], &kind, &idx, &off));
      outs[idx] = outs_[j];
    }
    void* ins[3] = {x, w, b};
    CHECK_OK(tpu_graph_run(g, ins, outs, 0));
    sync0();
    double e = 0, es = 0;
    for (int64_t i = 0; i < n; ++i) e = fmax(e, fabs(ref[i] - outs_[0][i]) / (1 + fabs(ref[i])));
    for (int64_t i = 0; stats && i < N * G; ++i) {
      es = fmax(es, fabs(rmean[i] - outs_[1][i]) / (1 + fabs(rmean[i])));
      es = fmax(es, fabs(rrstd[i] - outs_[2][i]) / (1 + fabs(rrstd[i])));
    }
    CHECKF(e < 1e-5 && es < 1e-6, "group norm [%lld, %lld, %lld, %lld] G=%lld mode %d: max rel err %g (stats %g)",
           (long long)N, (long long)C, (long long)H, (long long)W, (long long)G, mode, e, es);
    for (int j = 0; j < 3; ++j) dfree(outs_[j]);
    tpu_graph_release(g);
  }
  free(ref);
  free(rmean);
  free(rrstd);
  dfree(x);
  dfree(w);
  dfree(b);
}

int main(void) {
  CHECK_OK(tpu_runtime_initialize());
  /* generated code goes to a fresh cache directory */
  char cache[] = "/tmp/tpu_test_graph_XXXXXX";
  CHECK(mkdtemp(cache) != NULL);
  setenv("TORCH_TPU_CACHE_DIR", cache, 1);
  for (g_codegen = 0; g_codegen <= 2; g_codegen += 2) {
    test_fused_chain(3, 5);      /* one tile */
    test_fused_chain(300, 257);  /* many tiles over two threads */
    test_fused_chain(1, 20000);  /* tiled along the inner dim */
    test_fused_reduction(1, 576);    /* decode: one tile */
    test_fused_reduction(513, 576);  /* prefill: rows over tiles and threads */
  }
  test_gemm_epilogue(0, 300, 70, 96, true, false);  /* many rows, 2-D, addmm: no GEMM group */
  test_gemm_epilogue(3, 300, 70, 96, false, false); /* many rows, a [3, 100, N] view */
  test_gemm_epilogue(1, 260, 64, 80, true, true);   /* many rows; the raw product is an output too */
  test_gemm_epilogue(1, 200, 64, 80, true, true);   /* columns; the raw product is an output too */
  test_gemm_epilogue(1, 40, 64, 200, false, false); /* columns: too few rows for the threads */
  test_gemm_epilogue(1, 1, 300, 1000, true, false); /* decode: one row, columns */
  test_gemm_epilogue(0, 3, 5, 8, false, true);      /* one tile */
  const int64_t qkv[4] = {576, 192, 192, 64}, odd[5] = {200, 72, 13, 9, 33};
  test_gemv_batch(576, qkv, 3); /* SmolLM2's q, k, v */
  test_gemv_batch(70, odd, 4);  /* column counts that are no multiple of the blocks */
  /* convolutions: 2-D with padding, stride 2, dilation, 1x1, depthwise, no bias; 1-D; 3-D */
  test_conv_epilogue((conv_case_t){2, 2, 8, 16, 1, {12, 10}, 3, 1, 1, 1, true}, false);
  test_conv_epilogue((conv_case_t){2, 2, 8, 16, 1, {13, 9}, 3, 2, 1, 1, true}, true);
  test_conv_epilogue((conv_case_t){2, 1, 8, 16, 1, {12, 10}, 3, 1, 2, 2, false}, false);
  test_conv_epilogue((conv_case_t){2, 2, 8, 16, 1, {12, 10}, 1, 1, 0, 1, true}, false);
  test_conv_epilogue((conv_case_t){2, 2, 8, 8, 8, {12, 10}, 3, 1, 1, 1, true}, true);
  test_conv_epilogue((conv_case_t){2, 1, 16, 24, 1, {64, 48}, 3, 1, 1, 1, true}, false); /* many bands */
  test_conv_epilogue((conv_case_t){1, 2, 4, 8, 1, {20}, 5, 2, 2, 1, true}, false);
  test_conv_epilogue((conv_case_t){3, 2, 4, 8, 1, {6, 5, 4}, 3, 1, 1, 1, true}, false);
  test_conv_epilogue((conv_case_t){2, 1, 4, 8, 1, {1, 7}, 3, 1, 1, 1, true}, false); /* one output row */
  test_group_norm(2, 32, 8, 8, 8, true);
  test_group_norm(2, 32, 8, 8, 32, false);
  test_group_norm(3, 12, 5, 7, 3, true);
  test_group_norm(2, 64, 32, 32, 16, false); /* several tiles of whole groups */
  test_planning();
  test_errors();
  tpu_runtime_shutdown();
  char rm[64];
  snprintf(rm, sizeof(rm), "rm -rf %s", cache);
  CHECK(system(rm) == 0);
  return TEST_REPORT();
}
