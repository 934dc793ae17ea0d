/* quant.c - kernel family "quant": weight-only quantized linear layers whose
 * weights stay in GGUF block formats on the device (see tpu/kernels.h for
 * the ABI, kernels/quant.h for the formats).
 *
 *   tpu::q_linear(Tensor x, Tensor qweight, int qtype, int out_features,
 *                 int act_bits=32) -> y
 *   tpu::q_dequantize(Tensor qweight, int qtype, int in_features) -> W
 *
 * y = x @ W^T with W [N = out_features, K] stored as `qweight`, a contiguous
 * uint8 tensor [N, K / block * block_bytes] of raw blocks (Q4_0, Q4_1, Q8_0:
 * blocks of 32; Q4_K, Q6_K: super-blocks of 256); x [..., K] float32,
 * contiguous, K a multiple of the block; y [..., N] float32, contiguous.
 *
 * act_bits = 32 (the default): activations stay float32: each weight is
 * dequantized exactly (the scale's f16 value times the integer, plus the min
 * for Q4_1) and multiplied in float32, so y differs from x @ dequantize(W)^T
 * only by the order of float32 sums.
 *
 * act_bits = 8: for Q4_0, Q4_1 and Q8_0 weights and at most TPU_QU_ACT8_MAXM
 * rows of x (decode), x is quantized once per call, per block of 32 values:
 * d_x = max|x_j| / 127 (float32), q_j = round-to-nearest-even(x_j / d_x) in
 * [-127, 127] (d_x = 0, q = 0 for a block of zeros; a block holding an inf
 * or NaN gets d_x = NaN, so the rows it reaches are NaN). Each block's dot
 * product is then an integer one, sum_j nib_j * q_j (Q8_0: int8 * int8),
 * scaled by d_w * d_x in float32. Q4_0 subtracts 8 * d_w * d_x * sum_j q_j;
 * Q4_1 adds m * sum_j x_j with the exact float32 sum of x (not of q). So y
 * is x_hat @ W^T up to float32 rounding, x_hat_j = d_x * q_j (Q4_1: with the
 * min term on the exact x), and |y - x @ W^T| <= sum over blocks of
 * d_x / 2 * sum_j |w_j - c| (c = m for Q4_1, else 0) plus float32 rounding.
 * Q4_K, Q6_K and more rows of x take the exact float path (act_bits is then
 * accepted and has no effect). Other values of act_bits are an error.
 *
 * q_dequantize: W float32 [N, in_features], each weight as the
 * exact path multiplies it (tpu_k_qu_dequant_block), rows split over the
 * thread pool; the backward of q_linear (grad_x = grad @ W) uses it.
 *
 * One row of x (decode) runs a fused dequantize-and-dot per output row; more
 * rows (prefill) dequantize 256 weights of a row at a time into a stack
 * buffer and dot every row of x with them. Both split the output rows over
 * the thread pool. The engines come in a portable version (here) and an
 * AVX2 + FMA + F16C one (arch/x86_64/quant_avx2.c), chosen at run time.
 * Q4_K and Q6_K take a simpler path for now: each super-block is
 * dequantized by the portable code into a buffer, then dotted (AVX2). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "kernels/quant.h"

#define QU_CHUNK 256     /* weights dequantized at a time by the GEMM engine */
#define QU_GRAIN 32768   /* weights per parallel task, at least */

static int64_t qu_block_bytes(int qtype) {
  switch (qtype) {
    case TPU_QU_Q4_0: return 18;
    case TPU_QU_Q4_1: return 20;
    case TPU_QU_Q8_0: return 34;
    case TPU_QU_Q4_K: return 144;
    case TPU_QU_Q6_K: return 210;
    default: return 0;
  }
}

static int64_t qu_block(int qtype) {
  return qtype == TPU_QU_Q4_K || qtype == TPU_QU_Q6_K ? TPU_QU_KBLOCK : TPU_QU_BLOCK;
}

static const char* qu_name(int qtype) {
  switch (qtype) {
    case TPU_QU_Q4_0: return "Q4_0";
    case TPU_QU_Q4_1: return "Q4_1";
    case TPU_QU_Q8_0: return "Q8_0";
    case TPU_QU_Q4_K: return "Q4_K";
    case TPU_QU_Q6_K: return "Q6_K";
    default: return "?";
  }
}

static inline float qu_f16(const uint8_t* p) { return tpu_ku_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* Q4_K's 6-bit scale and min of sub-block j (see quant.h). */
static void qu_k4_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void tpu_k_qu_dequant_block(int qtype, const uint8_t* b, float* out) {
  switch (qtype) {
    case TPU_QU_Q4_K: {
      float d = qu_f16(b), dmin = qu_f16(b + 2);
      const uint8_t* qs = b + 16;
      for (int i = 0; i < 4; ++i, qs += 32, out += 64) {
        int sc0, mn0, sc1, mn1;
        qu_k4_scale_min(b + 4, 2 * i, &sc0, &mn0);
        qu_k4_scale_min(b + 4, 2 * i + 1, &sc1, &mn1);
        float d0 = d * (float)sc0, m0 = dmin * (float)mn0, d1 = d * (float)sc1, m1 = dmin * (float)mn1;
        for (int l = 0; l < 32; ++l) {
          out[l] = d0 * (float)(qs[l] & 15) - m0;
          out[l + 32] = d1 * (float)(qs[l] >> 4) - m1;
        }
      }
      return;
    }
    case TPU_QU_Q6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = (const int8_t*)(b + 192);
      float d = qu_f16(b + 208);
      for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, out += 128) {
        for (int l = 0; l < 32; ++l) {
          int is = l / 16;
          int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
          int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
          int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          out[l] = d * (float)sc[is] * (float)q1;
          out[l + 32] = d * (float)sc[is + 2] * (float)q2;
          out[l + 64] = d * (float)sc[is + 4] * (float)q3;
          out[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
      }
      return;
    }
    default: break;
  }
  switch (qtype) {
    case TPU_QU_Q4_0: {
      float d = qu_f16(b);
      for (int j = 0; j < 16; ++j) {
        out[j] = d * (float)((b[2 + j] & 15) - 8);
        out[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
      }
      break;
    }
    case TPU_QU_Q4_1: {
      float d = qu_f16(b), m = qu_f16(b + 2);
      for (int j = 0; j < 16; ++j) {
        out[j] = d * (float)(b[4 + j] & 15) + m;
        out[j + 16] = d * (float)(b[4 + j] >> 4) + m;
      }
      break;
    }
    case TPU_QU_Q8_0: {
      float d = qu_f16(b);
      for (int j = 0; j < 32; ++j) out[j] = d * (float)(int8_t)b[2 + j];
      break;
    }
    default: memset(out, 0, 32 * sizeof(float));
  }
}

/* Portable engines: both dequantize a chunk of a row, then dot. */
static void qu_gemm_portable(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  float buf[QU_CHUNK];
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = c->w + n * c->row_bytes;
    for (int64_t m = 0; m < c->M; ++m) c->y[m * c->N + n] = 0.0f;
    for (int64_t k0 = 0; k0 < c->K; k0 += QU_CHUNK) {
      int64_t len = c->K - k0 < QU_CHUNK ? c->K - k0 : QU_CHUNK;
      for (int64_t j = 0; j < len; j += c->block)
        tpu_k_qu_dequant_block(c->qtype, row + (k0 + j) / c->block * c->block_bytes, buf + j);
      for (int64_t m = 0; m < c->M; ++m) {
        const float* x = c->x + m * c->K + k0;
        float s = 0.0f;
        for (int64_t j = 0; j < len; ++j) s += buf[j] * x[j];
        c->y[m * c->N + n] += s;
      }
    }
  }
}

/* act_bits = 8: the nb blocks of 32 floats at x -> int8 q, scale d and the
 * per-block term s of tpu_qu_ctx_t (xs). */
static void qu_quantize_x(int qtype, const float* x, int64_t nb, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < nb; ++b, x += 32, q += 32) {
    float amax = 0.0f, sum = 0.0f;
    bool finite = true;
    for (int j = 0; j < 32; ++j) {
      float a = fabsf(x[j]);
      if (!(a <= FLT_MAX)) finite = false;
      if (a > amax) amax = a;
      sum += x[j];
    }
    if (!finite) {
      memset(q, 0, 32);
      d[b] = NAN;
      s[b] = NAN;
      continue;
    }
    float db = amax / 127.0f;
    float id = db != 0.0f ? 1.0f / db : 0.0f;
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j) {
      float r = nearbyintf(x[j] * id);
      int32_t v = r > 127.0f ? 127 : r < -127.0f ? -127 : (int32_t)r;
      q[j] = (int8_t)v;
      isum += v;
    }
    d[b] = db;
    s[b] = qtype == TPU_QU_Q4_1 ? sum : 8.0f * db * (float)isum;
  }
}

/* act_bits = 8, portable: an integer dot product per block. */
static void qu_gemv_a8_portable(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  const int64_t nb = c->K / TPU_QU_BLOCK;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < c->M; ++m) {
      const uint8_t* p = c->w + n * c->row_bytes;
      const int8_t* q = c->xq + m * c->K;
      const float* xd = c->xd + m * nb;
      const float* xs = c->xs + m * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b, p += c->block_bytes, q += 32) {
        int32_t dot = 0;
        float dw = qu_f16(p);
        if (c->qtype == TPU_QU_Q8_0) {
          for (int j = 0; j < 32; ++j) dot += (int32_t)(int8_t)p[2 + j] * q[j];
        } else {
          const uint8_t* qs = p + (c->qtype == TPU_QU_Q4_1 ? 4 : 2);
          for (int j = 0; j < 16; ++j) dot += (int32_t)(qs[j] & 15) * q[j] + (int32_t)(qs[j] >> 4) * q[j + 16];
        }
        acc += dw * xd[b] * (float)dot;
        if (c->qtype == TPU_QU_Q4_1) acc += qu_f16(p + 2) * xs[b];
        if (c->qtype == TPU_QU_Q4_0) acc -= dw * xs[b];
      }
      c->y[m * c->N + n] = acc;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define QU_X86 1
#else
#define QU_X86 0
#endif

/* Validates the call; fills `c` (may be NULL) with the layout. */
/* The weight format both entries take: a supported qtype, qweight uint8, in_features K a
 * whole number of blocks; fills c's qtype, K, block, block_bytes, row_bytes and w. */
static tpu_status_t qu_format(const tpu_k_call_t* call, int qtype, const tpu_tensor_t* w, int64_t K,
                              tpu_qu_ctx_t* c) {
  const int64_t bb = qu_block_bytes(qtype);
  if (bb == 0)
    return tpu_status_annotate(
        TPU_ERROR(TPU_STATUS_UNIMPLEMENTED,
                  "quantization type %d is not supported (Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q6_K = 14)", qtype),
        "%s", call->op);
  if (w->dtype != TPU_DTYPE_U8)
    return TPU_KU_INVALID(call, "qweight must be uint8 (raw %s blocks), got %s", qu_name(qtype),
                          tpu_dtype_name((tpu_dtype_t)w->dtype));
  const int64_t QK = qu_block(qtype);
  if (K < 0 || K % QK != 0)
    return TPU_KU_INVALID(call, "in_features %lld is not a multiple of the %s block size %lld", (long long)K,
                          qu_name(qtype), (long long)QK);
  c->qtype = qtype;
  c->K = K;
  c->block = QK;
  c->block_bytes = bb;
  c->row_bytes = K / QK * bb;
  c->w = (const uint8_t*)w->data;
  return TPU_OK;
}

static tpu_status_t qu_parse(const tpu_k_call_t* call, tpu_qu_ctx_t* out) {
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* w = tpu_ku_tensor(call, 1);
  if (!x || !w) return TPU_KU_INVALID(call, "expected tensors x and qweight");
  int qtype = (int)tpu_ku_int(call, 2, -1);
  int64_t N = tpu_ku_int(call, 3, -1);
  int64_t act_bits = tpu_ku_int(call, 4, 32);
  if (act_bits != 32 && act_bits != 8)
    return TPU_KU_INVALID(call, "act_bits must be 32 (float32 activations) or 8 (int8 activations), got %lld",
                          (long long)act_bits);
  if (x->dtype != TPU_DTYPE_F32) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (x->ndim < 1) return TPU_KU_INVALID(call, "x must have at least 1 dimension");
  tpu_qu_ctx_t f;
  memset(&f, 0, sizeof(f));
  TPU_RETURN_IF_ERROR(qu_format(call, qtype, w, x->sizes[x->ndim - 1], &f));
  const int64_t K = f.K, row_bytes = f.row_bytes;
  if (w->ndim != 2 || w->sizes[0] != N || w->sizes[1] != row_bytes)
    return TPU_KU_INVALID(call,
                          "qweight of %d dims [%lld, %lld] does not hold %lld rows of %lld %s weights (expected "
                          "[%lld, %lld])",
                          (int)w->ndim, (long long)(w->ndim > 0 ? w->sizes[0] : 0),
                          (long long)(w->ndim > 1 ? w->sizes[1] : 0), (long long)N, (long long)K, qu_name(qtype),
                          (long long)N, (long long)row_bytes);
  if (!tpu_tensor_is_contiguous(x) || !tpu_tensor_is_contiguous(w))
    return TPU_KU_INVALID(call, "x and qweight must be contiguous");
  f.M = K > 0 ? tpu_tensor_numel(x) / K : 0;
  f.N = N;
  if (call->outputs && call->num_outputs >= 1) {
    const tpu_tensor_t* y = &call->outputs[0];
    if (y->dtype != TPU_DTYPE_F32 || !tpu_tensor_is_contiguous(y) || tpu_tensor_numel(y) != f.M * N ||
        (y->ndim > 0 && y->sizes[y->ndim - 1] != N))
      return TPU_KU_INVALID(call, "output must be a contiguous float32 [..., %lld] tensor", (long long)N);
    f.y = (float*)y->data;
  }
  f.act_bits = (int)act_bits;
  f.x = (const float*)x->data;
  if (out) *out = f;
  return TPU_OK;
}

static tpu_status_t qu_check(const tpu_k_call_t* call) { return qu_parse(call, NULL); }


static tpu_status_t qu_run(const tpu_k_call_t* call) {
  tpu_qu_ctx_t c;
  memset(&c, 0, sizeof(c));
  TPU_RETURN_IF_ERROR(qu_parse(call, &c));
  if (c.M == 0 || c.N == 0) return TPU_OK;
  if (!c.y) return TPU_KU_INVALID(call, "missing output");
  if (c.K == 0) {
    memset(c.y, 0, (size_t)(c.M * c.N) * sizeof(float));
    return TPU_OK;
  }
  int64_t per_row = c.K * (c.M < 8 ? c.M : 8);
  int64_t grain = per_row >= QU_GRAIN ? 1 : QU_GRAIN / per_row;
  if (c.act_bits == 8 && c.block == TPU_QU_BLOCK && c.M <= TPU_QU_ACT8_MAXM) {
    const int64_t nb = c.K / TPU_QU_BLOCK;
    void* scratch = malloc((size_t)(c.M * c.K) + 2 * sizeof(float) * (size_t)(c.M * nb));
    if (!scratch)
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for the int8 activations [%lld, %lld]",
                       call->op, (long long)c.M, (long long)c.K);
    float* xd = (float*)scratch;
    float* xs = xd + c.M * nb;
    int8_t* xq = (int8_t*)(xs + c.M * nb);
    tpu_parallel_fn_t fn = qu_gemv_a8_portable;
    void (*quantize)(int, const float*, int64_t, int8_t*, float*, float*) = qu_quantize_x;
#if QU_X86
    if (tpu_ku_use_avx2()) {
      fn = tpu_k_avx2_qu_gemv_a8;
      quantize = tpu_k_avx2_qu_quantize_x;
    }
#endif
    for (int64_t m = 0; m < c.M; ++m) quantize(c.qtype, c.x + m * c.K, nb, xq + m * c.K, xd + m * nb, xs + m * nb);
    c.xq = xq;
    c.xd = xd;
    c.xs = xs;
    tpu_parallel_for(call->pool, c.N, grain, fn, &c);
    free(scratch);
    return TPU_OK;
  }
  tpu_parallel_fn_t fn = qu_gemm_portable;
  float* scratch = NULL;
#if QU_X86
  if (tpu_ku_use_avx2()) fn = c.M <= TPU_QU_GEMV_MAXM ? tpu_k_avx2_qu_gemv : tpu_k_avx2_qu_gemm;
  if (fn == tpu_k_avx2_qu_gemv && c.block == TPU_QU_BLOCK && c.K <= TPU_QU_GEMV_MAXK) {
    const int64_t nb = c.K / TPU_QU_BLOCK;
    const size_t bytes = (sizeof(float) * (size_t)(c.M * (c.K + nb)) + 31) / 32 * 32;
    scratch = aligned_alloc(32, bytes); /* the engine's aligned loads */
    if (!scratch)
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for the activations [%lld, %lld]", call->op,
                       (long long)c.M, (long long)c.K);
    for (int64_t m = 0; m < c.M; ++m)
      tpu_k_avx2_qu_layout_x(c.qtype, c.x + m * c.K, nb, scratch + m * c.K, scratch + c.M * c.K + m * nb);
    c.xl = scratch;
    c.xls = scratch + c.M * c.K;
  }
#endif
  tpu_parallel_for(call->pool, c.N, grain, fn, &c);
  free(scratch);
  return TPU_OK;
}

/* ---- tpu::q_dequantize ------------------------------------------------------------ */

static void qu_deq_rows(void* vctx, int64_t n0, int64_t n1) {
  const tpu_qu_ctx_t* c = (const tpu_qu_ctx_t*)vctx;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t b = 0; b < c->K / c->block; ++b)
      tpu_k_qu_dequant_block(c->qtype, c->w + n * c->row_bytes + b * c->block_bytes, c->y + n * c->K + b * c->block);
}

static tpu_status_t qu_deq_parse(const tpu_k_call_t* call, tpu_qu_ctx_t* out) {
  const tpu_tensor_t* w = tpu_ku_tensor(call, 0);
  if (!w) return TPU_KU_INVALID(call, "expected a tensor qweight");
  tpu_qu_ctx_t f;
  memset(&f, 0, sizeof(f));
  TPU_RETURN_IF_ERROR(qu_format(call, (int)tpu_ku_int(call, 1, -1), w, tpu_ku_int(call, 2, -1), &f));
  if (w->ndim != 2 || w->sizes[1] != f.row_bytes || !tpu_tensor_is_contiguous(w))
    return TPU_KU_INVALID(call, "qweight must be a contiguous [N, %lld] tensor of %lld %s weights per row",
                          (long long)f.row_bytes, (long long)f.K, qu_name(f.qtype));
  f.N = w->sizes[0];
  if (call->outputs && call->num_outputs >= 1) {
    const tpu_tensor_t* y = &call->outputs[0];
    if (y->dtype != TPU_DTYPE_F32 || !tpu_tensor_is_contiguous(y) || y->ndim != 2 || y->sizes[0] != f.N ||
        y->sizes[1] != f.K)
      return TPU_KU_INVALID(call, "output must be a contiguous float32 [%lld, %lld] tensor", (long long)f.N,
                            (long long)f.K);
    f.y = (float*)y->data;
  }
  if (out) *out = f;
  return TPU_OK;
}

static tpu_status_t qu_deq_check(const tpu_k_call_t* call) { return qu_deq_parse(call, NULL); }

static tpu_status_t qu_deq_run(const tpu_k_call_t* call) {
  tpu_qu_ctx_t c;
  TPU_RETURN_IF_ERROR(qu_deq_parse(call, &c));
  if (c.N == 0 || c.K == 0) return TPU_OK;
  if (!c.y) return TPU_KU_INVALID(call, "missing output");
  tpu_parallel_for(call->pool, c.N, c.K >= QU_GRAIN ? 1 : QU_GRAIN / c.K, qu_deq_rows, &c);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_quant_entries[] = {
    {"tpu::q_linear", qu_run, qu_check, 0, NULL},
    {"tpu::q_dequantize", qu_deq_run, qu_deq_check, 0, NULL},
};
const size_t tpu_k_quant_count = sizeof(tpu_k_quant_entries) / sizeof(tpu_k_quant_entries[0]);
