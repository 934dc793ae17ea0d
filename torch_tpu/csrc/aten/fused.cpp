// fused.cpp - the custom ops of the fused kernel family (runtime/kernels/fused.c):
//
//   tpu::rms_norm(Tensor x, Tensor? weight, float eps, bool unit_offset=False) -> Tensor
//   tpu::rope(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)
//   tpu::swiglu(Tensor gate, Tensor up, str act="silu") -> Tensor
//   and their *_backward ops (used by the autograd kernels below).
//
// Semantics are documented in fused.c. Here: the schemas; Meta kernels
// (output sizes/dtypes and argument checks, used by the eager path to
// allocate outputs and by FakeTensor under torch.compile); and Autograd
// kernels. The tpu (PrivateUse1) implementation is the bridge's boxed path,
// which finds the C kernel by the op's name, so no PrivateUse1 kernel is
// registered here. Ops are defined with TORCH_LIBRARY_FRAGMENT so that other
// bridge files may add tpu:: ops too.
//
// Autograd: gradients for x and weight (rms_norm), q and k (rope), gate and
// up (swiglu). rope raises if cos or sin require grad. The backward ops have
// no autograd formula themselves (no double backward).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>

#include "bridge.h"

namespace torch_tpu {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool is_float(c10::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

void check_float(const char* op, const char* what, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(is_float(t.scalar_type()), op, ": ", what, " of dtype ", t.scalar_type(),
                              " is not supported (float32, bfloat16 or float16)");
}

// ---- rms_norm ---------------------------------------------------------------------

c10::ScalarType rms_out_dtype(const at::Tensor& x, const std::optional<at::Tensor>& w, bool unit_offset) {
  if (!w.has_value() || !w->defined() || unit_offset) return x.scalar_type();
  return at::promote_types(w->scalar_type(), x.scalar_type());
}

void check_rms(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& w) {
  check_float(op, "input", x);
  TORCH_CHECK(x.dim() >= 1, op, ": input must have at least 1 dimension, got a 0-dim tensor");
  if (w.has_value() && w->defined()) {
    check_float(op, "weight", *w);
    TORCH_CHECK(w->dim() == 1 && w->size(0) == x.size(-1), op, ": weight of shape ", w->sizes(),
                " does not match the last dim of input ", x.sizes(), " (expected [", x.size(-1), "])");
  }
}

at::Tensor rms_norm_meta(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps, bool unit_offset) {
  check_rms("tpu::rms_norm", x, weight);
  return at::empty(x.sizes(), x.options().dtype(rms_out_dtype(x, weight, unit_offset)));
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                                          const std::optional<at::Tensor>& weight, double eps,
                                                          bool unit_offset, int64_t chunks) {
  const char* op = "tpu::rms_norm_backward";
  check_rms(op, x, weight);
  TORCH_CHECK(grad.sizes() == x.sizes(), op, ": grad of shape ", grad.sizes(), " does not match input ", x.sizes());
  const auto ydt = rms_out_dtype(x, weight, unit_offset);
  TORCH_CHECK(grad.scalar_type() == ydt, op, ": grad must be ", ydt, ", got ", grad.scalar_type());
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor dwp;
  if (weight.has_value() && weight->defined() && chunks > 0) {
    dwp = at::empty({chunks, x.size(-1)}, x.options().dtype(at::kFloat));
  }
  return {dx, dwp};
}

const auto& rms_norm_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::rms_norm", "")
                       .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double, bool)>();
  return op;
}

const auto& rms_norm_backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::rms_norm_backward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                 const std::optional<at::Tensor>&, double, bool,
                                                                 int64_t)>();
  return op;
}

std::optional<at::Tensor> opt(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// dx and dweight of rms_norm (either may be skipped).
std::pair<at::Tensor, at::Tensor> rms_grads(const at::Tensor& g, const at::Tensor& x, const at::Tensor& w,
                                            double eps, bool unit_offset, bool need_x, bool need_w) {
  if (!g.defined()) return {};
  need_w = need_w && w.defined();
  const int64_t H = x.size(-1);
  const int64_t rows = H > 0 ? x.numel() / H : 0;
  // Fixed number of row ranges for the weight's partial sums: results do
  // not depend on the thread count.
  const int64_t chunks = need_w ? std::clamp<int64_t>(rows, 1, 64) : 0;
  auto [dx, dwp] = rms_norm_backward_op().call(g, x, opt(w), eps, unit_offset, chunks);
  at::Tensor dw;
  if (need_w) dw = dwp.sum(0).to(w.scalar_type());
  return {need_x ? dx : at::Tensor(), dw};
}

// Autograd's custom Function does not take undefined tensors: one Function
// with a weight, one without.
struct RmsNormFn : public torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps,
                            bool unit_offset) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor y = rms_norm_op().call(x, w, eps, unit_offset);
    ctx->save_for_backward({x, w});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["unit_offset"] = unit_offset;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dx, dw] = rms_grads(grads[0], saved[0], saved[1], ctx->saved_data["eps"].toDouble(),
                              ctx->saved_data["unit_offset"].toBool(), ctx->needs_input_grad(0),
                              ctx->needs_input_grad(1));
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

struct RmsNormNoWeightFn : public torch::autograd::Function<RmsNormNoWeightFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor y = rms_norm_op().call(x, std::nullopt, eps, false);
    ctx->save_for_backward({x});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dx, dw] = rms_grads(grads[0], saved[0], at::Tensor(), ctx->saved_data["eps"].toDouble(), false, true, false);
    return {dx, at::Tensor()};
  }
};

at::Tensor rms_norm_autograd(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                             bool unit_offset) {
  const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
  if (!at::GradMode::is_enabled() || !(x.requires_grad() || (w.defined() && w.requires_grad()))) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rms_norm_op().call(x, weight, eps, unit_offset);
  }
  // unit_offset without a weight is the plain normalisation
  if (!w.defined()) return RmsNormNoWeightFn::apply(x, eps);
  return RmsNormFn::apply(x, w, eps, unit_offset);
}

// ---- rope ---------------------------------------------------------------------------

// Can cos/sin (sizes `c`) broadcast to [B, L, R] (2-D or 3-D)?
bool rope_cs_ok(c10::IntArrayRef c, int64_t B, int64_t L) {
  if (c.size() == 2) return c[0] == 1 || c[0] == L;
  if (c.size() == 3) return (c[0] == 1 || c[0] == B) && (c[1] == 1 || c[1] == L);
  return false;
}

void check_rope(const char* op, const char* qn, const char* kn, const at::Tensor& q, const at::Tensor& k,
                const at::Tensor& cos, const at::Tensor& sin) {
  check_float(op, qn, q);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && cos.scalar_type() == q.scalar_type() &&
                  sin.scalar_type() == q.scalar_type(),
              op, ": ", qn, ", ", kn, ", cos and sin must have the same dtype, got ", q.scalar_type(), ", ",
              k.scalar_type(), ", ", cos.scalar_type(), " and ", sin.scalar_type());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4, op, ": ", qn, " and ", kn,
              " must be 4-D [batch, heads, seq, head_dim], got shapes ", q.sizes(), " and ", k.sizes());
  const int64_t B = q.size(0), L = q.size(2), D = q.size(3);
  TORCH_CHECK(k.size(0) == B && k.size(2) == L && k.size(3) == D, op, ": ", qn, " ", q.sizes(), " and ", kn, " ",
              k.sizes(), " must agree in batch, seq and head_dim");
  TORCH_CHECK(cos.sizes() == sin.sizes(), op, ": cos ", cos.sizes(), " and sin ", sin.sizes(),
              " must have the same shape");
  const int64_t R = cos.dim() >= 1 ? cos.size(-1) : -1;
  TORCH_CHECK(R >= 0 && R % 2 == 0 && R <= D && rope_cs_ok(cos.sizes(), B, L), op, ": cos/sin of shape ",
              cos.sizes(),
              " must be [batch or 1, seq or 1, rotary_dim] or [seq or 1, rotary_dim] with an even rotary_dim <= "
              "head_dim, for ",
              qn, " of shape ", q.sizes());
}

std::tuple<at::Tensor, at::Tensor> rope_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                             const at::Tensor& sin) {
  check_rope("tpu::rope", "q", "k", q, k, cos, sin);
  return {at::empty(q.sizes(), q.options()), at::empty(k.sizes(), k.options())};
}

std::tuple<at::Tensor, at::Tensor> rope_backward_meta(const at::Tensor& gq, const at::Tensor& gk,
                                                      const at::Tensor& cos, const at::Tensor& sin) {
  check_rope("tpu::rope_backward", "grad_q", "grad_k", gq, gk, cos, sin);
  return {at::empty(gq.sizes(), gq.options()), at::empty(gk.sizes(), gk.options())};
}

using RopeSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                   const at::Tensor&);

const auto& rope_op() {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tpu::rope", "").typed<RopeSig>();
  return op;
}
const auto& rope_backward_op() {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tpu::rope_backward", "").typed<RopeSig>();
  return op;
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [qo, ko] = rope_op().call(q, k, cos, sin);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["q_sizes"] = q.sizes().vec();
    ctx->saved_data["k_sizes"] = k.sizes().vec();
    return {qo, ko};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor gq = grads[0], gk = grads[1];
    if (!gq.defined() && !gk.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    // An output that did not reach the loss has no gradient: use zeros.
    if (!gq.defined()) gq = at::zeros(ctx->saved_data["q_sizes"].toIntVector(), gk.options());
    if (!gk.defined()) gk = at::zeros(ctx->saved_data["k_sizes"].toIntVector(), gq.options());
    auto [dq, dk] = rope_backward_op().call(gq, gk, saved[0], saved[1]);
    return {dq, dk, at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> rope_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                 const at::Tensor& sin) {
  const bool grad = at::GradMode::is_enabled();
  TORCH_CHECK(!grad || (!cos.requires_grad() && !sin.requires_grad()), "tpu::rope: gradients with respect to cos "
              "and sin are not supported (compute them under torch.no_grad(), as Transformers' rotary embeddings do)");
  if (!grad || !(q.requires_grad() || k.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rope_op().call(q, k, cos, sin);
  }
  auto out = RopeFn::apply(q, k, cos, sin);
  return {out[0], out[1]};
}

// ---- swiglu ---------------------------------------------------------------------------

void check_glu(const char* op, const at::Tensor& gate, const at::Tensor& up, c10::string_view act) {
  check_float(op, "gate", gate);
  TORCH_CHECK(up.scalar_type() == gate.scalar_type(), op, ": gate and up must have the same dtype, got ",
              gate.scalar_type(), " and ", up.scalar_type());
  TORCH_CHECK(gate.sizes() == up.sizes(), op, ": gate ", gate.sizes(), " and up ", up.sizes(),
              " must have the same shape");
  TORCH_CHECK(act == "silu" || act == "gelu_tanh", op, ": act must be 'silu' or 'gelu_tanh', got '", act, "'");
}

at::Tensor swiglu_meta(const at::Tensor& gate, const at::Tensor& up, c10::string_view act) {
  check_glu("tpu::swiglu", gate, up, act);
  return at::empty(gate.sizes(), gate.options());
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward_meta(const at::Tensor& grad, const at::Tensor& gate,
                                                        const at::Tensor& up, c10::string_view act) {
  const char* op = "tpu::swiglu_backward";
  check_glu(op, gate, up, act);
  TORCH_CHECK(grad.sizes() == gate.sizes() && grad.scalar_type() == gate.scalar_type(), op,
              ": grad must match gate in shape and dtype");
  return {at::empty(gate.sizes(), gate.options()), at::empty(up.sizes(), up.options())};
}

const auto& swiglu_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::swiglu", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view)>();
  return op;
}
const auto& swiglu_backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::swiglu_backward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                 const at::Tensor&, c10::string_view)>();
  return op;
}

struct SwigluFn : public torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            const std::string& act) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor y = swiglu_op().call(gate, up, act);
    ctx->save_for_backward({gate, up});
    ctx->saved_data["act"] = act;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const std::string act = ctx->saved_data["act"].toStringRef();
    auto [dg, du] = swiglu_backward_op().call(grads[0], saved[0], saved[1], act);
    return {dg, du, at::Tensor()};
  }
};

at::Tensor swiglu_autograd(const at::Tensor& gate, const at::Tensor& up, c10::string_view act) {
  if (!at::GradMode::is_enabled() || !(gate.requires_grad() || up.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return swiglu_op().call(gate, up, act);
  }
  return SwigluFn::apply(gate, up, std::string(act));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, float eps, bool unit_offset=False) -> Tensor");
  m.def(
      "rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, float eps, bool unit_offset, int chunks) -> "
      "(Tensor, Tensor)");
  m.def("rope(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("rope_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("swiglu(Tensor gate, Tensor up, str act=\"silu\") -> Tensor");
  m.def("swiglu_backward(Tensor grad, Tensor gate, Tensor up, str act) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("rms_norm", TORCH_FN(rms_norm_meta));
  m.impl("rms_norm_backward", TORCH_FN(rms_norm_backward_meta));
  m.impl("rope", TORCH_FN(rope_meta));
  m.impl("rope_backward", TORCH_FN(rope_backward_meta));
  m.impl("swiglu", TORCH_FN(swiglu_meta));
  m.impl("swiglu_backward", TORCH_FN(swiglu_backward_meta));
}

TORCH_LIBRARY_IMPL(tpu, Autograd, m) {
  m.impl("rms_norm", TORCH_FN(rms_norm_autograd));
  m.impl("rope", TORCH_FN(rope_autograd));
  m.impl("swiglu", TORCH_FN(swiglu_autograd));
}

}  // namespace torch_tpu
