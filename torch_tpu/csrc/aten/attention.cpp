// attention.cpp - torch.nn.functional.scaled_dot_product_attention on tpu.
//
// PyTorch routes SDPA on a PrivateUse1 device through the _fused_sdp_choice
// stub (registered here for PrivateUse1, plus the aten::_fused_sdp_choice
// op) and, when that answers SDPBackend::overrideable, through
// aten::_scaled_dot_product_fused_attention_overrideable, whose autograd
// formula calls ..._overrideable_backward. Both are implemented here by
// queueing the C kernels tpu::sdpa_fwd / tpu::sdpa_bwd
// (runtime/kernels/attention.c) with outputs allocated here, since the op's
// meta function does not describe all of them (the schema's other results
// are returned as PyTorch's meta function and OpenReg do: undefined
// cum_seq tensors, max_q = L, max_k = S, empty 0-dim philox seed/offset,
// no debug mask).
//
// Inputs the kernel does not support get the math backend instead (so
// nothing breaks): dropout_p > 0, non-4-D or nested inputs, dtypes other
// than float32/bfloat16/float16, head dims > 256, mixed batch sizes, an
// attn_mask together with is_causal (the math path raises PyTorch's error),
// Hq != Hkv without enable_gqa (math raises the shape error), or the user
// disabling the overrideable backend (torch.nn.attention.sdpa_kernel).
// Note: enable_gqa only reaches the choice, not the overrideable op; the op
// itself accepts any Hq that is a multiple of Hkv.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bridge.h"

namespace torch_tpu {
namespace {

constexpr int64_t kMaxHeadDim = 256;  // AT_DMAX in runtime/kernels/attention.c

bool on_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

bool is_attn_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// Can `m` (right-aligned) broadcast to [B, H, L, S]?
bool mask_broadcasts(const at::Tensor& m, int64_t B, int64_t H, int64_t L, int64_t S) {
  if (m.dim() > 4) return false;
  const int64_t full[4] = {B, H, L, S};
  for (int64_t d = 0; d < m.dim(); ++d) {
    int64_t want = full[4 - m.dim() + d];
    if (m.size(d) != 1 && m.size(d) != want) return false;
  }
  return true;
}

bool fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                     bool enable_gqa) {
  if (!on_tpu(q) || !on_tpu(k) || !on_tpu(v)) return false;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  if (dropout_p > 0.0) return false;
  const auto dt = q.scalar_type();
  if (!is_attn_dtype(dt) || k.scalar_type() != dt || v.scalar_type() != dt) return false;
  const int64_t B = q.size(0), Hq = q.size(1), L = q.size(2), E = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hkv || v.size(2) != S || k.size(3) != E) return false;
  if (Hq != Hkv && !(enable_gqa && Hkv > 0 && Hq % Hkv == 0)) return false;
  if (E > kMaxHeadDim || v.size(3) > kMaxHeadDim) return false;
  if (attn_mask.has_value() && attn_mask->defined()) {
    const at::Tensor& m = *attn_mask;
    if (is_causal) return false;
    if (!on_tpu(m) || m.is_nested()) return false;
    if (m.scalar_type() != at::kBool && !is_attn_dtype(m.scalar_type()) && m.scalar_type() != at::kDouble) return false;
    if (!mask_broadcasts(m, B, Hq, L, S)) return false;
  }
  return true;
}

int64_t tpu_fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                             const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                             std::optional<double> scale, bool enable_gqa) {
  // PyTorch's CPU attention reads the mask's last two dims: a mask of rank
  // < 2 is an IndexError there, so it is one here.
  TORCH_CHECK_INDEX(!attn_mask.has_value() || !attn_mask->defined() || attn_mask->dim() >= 2,
                    "scaled_dot_product_attention: attn_mask must have at least 2 dimensions, got ",
                    attn_mask.has_value() && attn_mask->defined() ? attn_mask->dim() : 0);
  auto& ctx = at::globalContext();
  // tpu has one fused kernel: sdpa_kernel() with flash, memory-efficient or
  // cuDNN attention (what Diffusers' _native_flash / _native_cudnn set)
  // allows it as OVERRIDEABLE does. A driver without host kernels runs it
  // when it lowers both directions.
  static const bool runs_fused =
      host_kernels() || (driver_runs_op("tpu::sdpa_fwd") && driver_runs_op("tpu::sdpa_bwd"));
  const bool fused_allowed = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP() ||
                             ctx.userEnabledMemEfficientSDP() || ctx.userEnabledCuDNNSDP();
  if (fused_allowed && runs_fused &&
      fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(at::SDPBackend::math);
  return static_cast<int64_t>(at::SDPBackend::error);
}

double softmax_scale(const at::Tensor& q, std::optional<double> scale) {
  if (scale.has_value()) return *scale;
  const int64_t E = q.size(-1);
  return E > 0 ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0;
}

void check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& bias, double dropout_p) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, op, ": dropout_p > 0 is not supported on tpu");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
              ": query, key and value must be 4-D [batch, heads, seq, dim], got ", q.dim(), "-D, ", k.dim(),
              "-D and ", v.dim(), "-D");
  TORCH_CHECK(on_tpu(q) && on_tpu(k) && on_tpu(v), op, ": query, key and value must be tpu tensors");
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(), op,
              ": query, key and value must be on the same device");
  const int64_t Hq = q.size(1), Hkv = k.size(1);
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), op, ": batch sizes differ");
  TORCH_CHECK(v.size(1) == Hkv && v.size(2) == k.size(2), op, ": key and value must have the same heads and length");
  TORCH_CHECK(k.size(3) == q.size(3), op, ": query and key head dims differ");
  TORCH_CHECK(Hkv > 0 ? Hq % Hkv == 0 : Hq == 0, op, ": the number of query heads (", Hq,
              ") must be a multiple of the key/value heads (", Hkv, ")");
  if (bias.defined()) {
    TORCH_CHECK(mask_broadcasts(bias, q.size(0), Hq, q.size(2), k.size(2)), op, ": attn_mask of shape ",
                bias.sizes(), " cannot be broadcast to [", q.size(0), ", ", Hq, ", ", q.size(2), ", ", k.size(2), "]");
  }
}

// The mask on the query's device (a cpu mask is copied over).
at::Tensor bias_on(const at::Tensor& bias, const at::Tensor& q) {
  if (!bias.defined() || bias.device() == q.device()) return bias;
  return bias.to(q.device());
}

at::Tensor empty_contig(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex index) {
  return empty_strided_tpu(sizes, c10::contiguous_strides(sizes), dtype, index);
}

// A result laid out in `like`'s dimension order, as PyTorch's meta functions
// for these ops allocate it (empty_like / alloc_with_matching_layout): so the
// strides seen while tracing (torch.compile) are the strides produced here.
at::Tensor empty_matching(const at::Tensor& like, c10::IntArrayRef sizes, c10::DeviceIndex index) {
  if (like.sizes() == sizes) {  // empty_like: like's strides when dense, else contiguous
    return like.is_non_overlapping_and_dense() ? empty_strided_tpu(sizes, like.strides(), like.scalar_type(), index)
                                               : empty_contig(sizes, like.scalar_type(), index);
  }
  std::vector<int64_t> order(like.dim());
  for (int64_t d = 0; d < like.dim(); ++d) order[d] = d;
  auto key = [&](int64_t d) {
    int64_t s = like.stride(d);
    return s != 0 ? s : std::numeric_limits<int64_t>::max();
  };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  std::vector<int64_t> strides(like.dim());
  int64_t acc = 1;
  for (int64_t d : order) {
    strides[d] = acc;
    acc *= sizes[d];
  }
  return empty_strided_tpu(sizes, strides, like.scalar_type(), index);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor,
           at::Tensor>
tpu_sdpa_overrideable(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                      const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                      bool return_debug_mask, std::optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable";
  at::Tensor bias = attn_bias.has_value() ? *attn_bias : at::Tensor();
  check_inputs(op, query, key, value, bias, dropout_p);
  bias = bias_on(bias, query);
  const c10::DeviceIndex index = query.device().index();
  const int64_t B = query.size(0), H = query.size(1), L = query.size(2), S = key.size(2), Ev = value.size(3);
  at::Tensor out = empty_matching(query, {B, H, L, Ev}, index);
  at::Tensor lse = empty_contig({B, H, L}, at::kFloat, index);
  // Whether a backward may read this lse (autograd records the op); if not, the
  // kernel may take its decode path for few query rows (see attention.c).
  const bool for_backward =
      at::GradMode::is_enabled() && (query.requires_grad() || key.requires_grad() || value.requires_grad() ||
                                     (attn_bias.has_value() && attn_bias->defined() && attn_bias->requires_grad()));
  submit_kernel("tpu::sdpa_fwd",
                {query, key, value, bias.defined() ? c10::IValue(bias) : c10::IValue(), is_causal,
                 softmax_scale(query, scale), for_backward},
                {out, lse}, index);
  at::Tensor seed = empty_contig({}, at::kLong, index);
  at::Tensor offset = empty_contig({}, at::kLong, index);
  return std::make_tuple(out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(S), seed, offset,
                         at::Tensor());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> tpu_sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, int64_t max_q,
    int64_t max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable_backward";
  if (!grad_out.defined()) return {};
  check_inputs(op, query, key, value, attn_bias, dropout_p);
  at::Tensor bias = bias_on(attn_bias, query);
  const c10::DeviceIndex index = query.device().index();
  const int64_t B = query.size(0), H = query.size(1), L = query.size(2), S = key.size(2);
  at::Tensor dq, dk, dv, dbias_full;
  if (grad_input_mask[0]) dq = empty_matching(query, query.sizes(), index);
  if (grad_input_mask[1]) dk = empty_matching(key, key.sizes(), index);
  if (grad_input_mask[2]) dv = empty_matching(value, value.sizes(), index);
  if (grad_input_mask[3] && bias.defined() && bias.scalar_type() != at::kBool) {
    dbias_full = empty_contig({B, H, L, S}, at::kFloat, index);
  }
  if (dq.defined() || dk.defined() || dv.defined() || dbias_full.defined()) {
    submit_kernel("tpu::sdpa_bwd",
                  {grad_out, query, key, value, bias.defined() ? c10::IValue(bias) : c10::IValue(), out, logsumexp,
                   is_causal, softmax_scale(query, scale)},
                  {dq, dk, dv, dbias_full}, index);
  }
  at::Tensor dbias;
  if (dbias_full.defined()) {
    // The bias was broadcast to [B, H, L, S]: sum its gradient back (tpu ops).
    dbias = dbias_full.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
    if (attn_bias.device() != dbias.device()) dbias = dbias.to(attn_bias.device());
  }
  return std::make_tuple(dq, dk, dv, dbias);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(tpu_fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(tpu_sdpa_overrideable));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(tpu_sdpa_overrideable_backward));
}

}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::tpu_fused_sdp_choice)
}  // namespace at::native
