/* quant.c - kernel family "quant": weight-only quantized linear layers whose
 * weights stay in GGUF block formats on the device (see tpu/kernels.h for
 * the ABI, kernels/quant.h for the formats).
 *
 *   tpu::q_linear(Tensor x, Tensor qweight, int qtype, int out_features) -> y
 *
 * y = x @ W^T with W [N = out_features, K] stored as `qweight`, a contiguous
 * uint8 tensor [N, K / block * block_bytes] of raw blocks (Q4_0, Q4_1, Q8_0:
 * blocks of 32; Q4_K, Q6_K: super-blocks of 256); x [..., K] float32,
 * contiguous, K a multiple of the block; y [..., N] float32, contiguous. Activations
 * stay float32: each weight is dequantized exactly (the scale's f16 value
 * times the integer, plus the min for Q4_1) and multiplied in float32, so y
 * differs from x @ dequantize(W)^T only by the order of float32 sums.
 *
 * One row of x (decode) runs a fused dequantize-and-dot per output row; more
 * rows (prefill) dequantize 256 weights of a row at a time into a stack
 * buffer and dot every row of x with them. Both split the output rows over
 * the thread pool. The engines come in a portable version (here) and an
 * AVX2 + FMA + F16C one (arch/x86_64/quant_avx2.c), chosen at run time.
 * Q4_K and Q6_K take a simpler path for now: each super-block is
 * dequantized by the portable code into a buffer, then dotted (AVX2). */
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

#if defined(__x86_64__) && defined(__GNUC__)
#define QU_X86 1
#else
#define QU_X86 0
#endif

/* Validates the call; fills `c` (may be NULL) with the layout. */
static tpu_status_t qu_parse(const tpu_k_call_t* call, tpu_qu_ctx_t* c) {
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  const tpu_tensor_t* w = tpu_ku_tensor(call, 1);
  if (!x || !w) return TPU_KU_INVALID(call, "expected tensors x and qweight");
  int qtype = (int)tpu_ku_int(call, 2, -1);
  int64_t N = tpu_ku_int(call, 3, -1);
  int64_t bb = qu_block_bytes(qtype);
  if (bb == 0)
    return tpu_status_annotate(
        TPU_ERROR(TPU_STATUS_UNIMPLEMENTED,
                  "quantization type %d is not supported (Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q6_K = 14)", qtype),
        "%s", call->op);
  const int64_t QK = qu_block(qtype);
  if (x->dtype != TPU_DTYPE_F32) return tpu_ku_unsupported_dtype(call, x->dtype);
  if (w->dtype != TPU_DTYPE_U8)
    return TPU_KU_INVALID(call, "qweight must be uint8 (raw %s blocks), got %s", qu_name(qtype),
                          tpu_dtype_name((tpu_dtype_t)w->dtype));
  if (x->ndim < 1) return TPU_KU_INVALID(call, "x must have at least 1 dimension");
  int64_t K = x->sizes[x->ndim - 1];
  if (K % QK != 0)
    return TPU_KU_INVALID(call, "in_features %lld is not a multiple of the %s block size %lld", (long long)K,
                          qu_name(qtype), (long long)QK);
  int64_t row_bytes = K / QK * bb;
  if (w->ndim != 2 || w->sizes[0] != N || w->sizes[1] != row_bytes)
    return TPU_KU_INVALID(call,
                          "qweight of %d dims [%lld, %lld] does not hold %lld rows of %lld %s weights (expected "
                          "[%lld, %lld])",
                          (int)w->ndim, (long long)(w->ndim > 0 ? w->sizes[0] : 0),
                          (long long)(w->ndim > 1 ? w->sizes[1] : 0), (long long)N, (long long)K, qu_name(qtype),
                          (long long)N, (long long)row_bytes);
  if (!tpu_tensor_is_contiguous(x) || !tpu_tensor_is_contiguous(w))
    return TPU_KU_INVALID(call, "x and qweight must be contiguous");
  int64_t M = K > 0 ? tpu_tensor_numel(x) / K : 0;
  if (call->outputs && call->num_outputs >= 1) {
    const tpu_tensor_t* y = &call->outputs[0];
    if (y->dtype != TPU_DTYPE_F32 || !tpu_tensor_is_contiguous(y) || tpu_tensor_numel(y) != M * N ||
        (y->ndim > 0 && y->sizes[y->ndim - 1] != N))
      return TPU_KU_INVALID(call, "output must be a contiguous float32 [..., %lld] tensor", (long long)N);
    if (c) c->y = (float*)y->data;
  }
  if (c) {
    c->qtype = qtype;
    c->M = M;
    c->N = N;
    c->K = K;
    c->block = QK;
    c->block_bytes = bb;
    c->row_bytes = row_bytes;
    c->x = (const float*)x->data;
    c->w = (const uint8_t*)w->data;
  }
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
  tpu_parallel_fn_t fn = qu_gemm_portable;
#if QU_X86
  if (tpu_ku_use_avx2()) fn = c.M == 1 ? tpu_k_avx2_qu_gemv : tpu_k_avx2_qu_gemm;
#endif
  int64_t per_row = c.K * (c.M < 8 ? c.M : 8);
  int64_t grain = per_row >= QU_GRAIN ? 1 : QU_GRAIN / per_row;
  tpu_parallel_for(call->pool, c.N, grain, fn, &c);
  return TPU_OK;
}

const tpu_k_entry_t tpu_k_quant_entries[] = {
    {"tpu::q_linear", qu_run, qu_check, 0, NULL},
};
const size_t tpu_k_quant_count = sizeof(tpu_k_quant_entries) / sizeof(tpu_k_quant_entries[0]);
