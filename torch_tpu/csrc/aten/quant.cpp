// quant.cpp - the custom ops of the quant kernel family (runtime/kernels/quant.c):
//
//   tpu::q_linear(Tensor x, Tensor qweight, int qtype, int out_features, int act_bits=32) -> Tensor
//   tpu::q_dequantize(Tensor qweight, int qtype, int in_features) -> Tensor
//
// Semantics are documented in quant.c. Here, as in fused.cpp: the schemas;
// Meta kernels (output sizes and argument checks, for the eager path's
// output allocation and FakeTensor under torch.compile); and the Autograd
// kernel of q_linear, all in C++ so that an eager call does not go through
// Python. The tpu implementation is the bridge's boxed path, which finds the
// C kernels by the ops' names. The CPU kernels (dequantize, then F.linear)
// are registered from Python (torch_tpu/quant.py).
//
// Autograd: q_linear's gradient reaches x only (grad_x = grad @ W, W from
// q_dequantize on the weights' device); the blocks get none. No double
// backward.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "bridge.h"

namespace torch_tpu {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// GGML type id -> (name, weights per block, bytes per block); 0 if unsupported.
struct QType {
  const char* name;
  int64_t block, bytes;
};

QType qtype_info(int64_t qtype) {
  switch (qtype) {
    case 2: return {"Q4_0", 32, 18};
    case 3: return {"Q4_1", 32, 20};
    case 8: return {"Q8_0", 32, 34};
    case 12: return {"Q4_K", 256, 144};
    case 14: return {"Q6_K", 256, 210};
    default: return {nullptr, 0, 0};
  }
}

QType check_qtype(const char* op, int64_t qtype) {
  QType q = qtype_info(qtype);
  TORCH_CHECK_NOT_IMPLEMENTED(q.name != nullptr, op, ": quantization type ", qtype,
                              " is not supported (Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q6_K = 14)");
  return q;
}

void check_act_bits(int64_t act_bits) {
  TORCH_CHECK(act_bits == 32 || act_bits == 8,
              "tpu::q_linear: act_bits must be 32 (float32 activations) or 8 (int8 activations), got ", act_bits);
}

at::Tensor q_linear_meta(const at::Tensor& x, const at::Tensor& qweight, int64_t qtype, int64_t out_features,
                         int64_t act_bits) {
  const char* op = "tpu::q_linear";
  QType q = check_qtype(op, qtype);
  check_act_bits(act_bits);
  TORCH_CHECK_NOT_IMPLEMENTED(x.scalar_type() == at::kFloat, op, ": x must be float32, got ", x.scalar_type());
  TORCH_CHECK(qweight.scalar_type() == at::kByte, op, ": qweight must be uint8 (raw ", q.name, " blocks), got ",
              qweight.scalar_type());
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least 1 dimension");
  const int64_t K = x.size(-1);
  TORCH_CHECK(K % q.block == 0, op, ": in_features ", K, " is not a multiple of the ", q.name, " block size ",
              q.block);
  const int64_t row_bytes = K / q.block * q.bytes;
  TORCH_CHECK(qweight.dim() == 2 && qweight.size(0) == out_features && qweight.size(1) == row_bytes, op,
              ": qweight of shape ", qweight.sizes(), " does not hold ", out_features, " rows of ", K, " ", q.name,
              " weights (expected [", out_features, ", ", row_bytes, "])");
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - 1);
  sizes.push_back(out_features);
  return at::empty(sizes, x.options());
}

at::Tensor q_dequantize_meta(const at::Tensor& qweight, int64_t qtype, int64_t in_features) {
  const char* op = "tpu::q_dequantize";
  QType q = check_qtype(op, qtype);
  TORCH_CHECK(qweight.scalar_type() == at::kByte, op, ": qweight must be uint8 (raw ", q.name, " blocks), got ",
              qweight.scalar_type());
  TORCH_CHECK(in_features >= 0 && in_features % q.block == 0, op, ": in_features ", in_features,
              " is not a multiple of the ", q.name, " block size ", q.block);
  const int64_t row_bytes = in_features / q.block * q.bytes;
  TORCH_CHECK(qweight.dim() == 2 && qweight.size(1) == row_bytes, op, ": qweight of shape ", qweight.sizes(),
              " does not hold rows of ", in_features, " ", q.name, " weights (expected [N, ", row_bytes, "])");
  return at::empty({qweight.size(0), in_features}, qweight.options().dtype(at::kFloat));
}

using QLinearSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, int64_t, int64_t);

const auto& q_linear_op() {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tpu::q_linear", "").typed<QLinearSig>();
  return op;
}
const auto& q_dequantize_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::q_dequantize", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
  return op;
}

struct QLinearFn : public torch::autograd::Function<QLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& qweight, int64_t qtype,
                            int64_t out_features, int64_t act_bits) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor y = q_linear_op().call(x, qweight, qtype, out_features, act_bits);
    ctx->save_for_backward({qweight});
    ctx->saved_data["qtype"] = qtype;
    ctx->saved_data["in_features"] = x.size(-1);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    auto saved = ctx->get_saved_variables();
    // The blocks are constants: grad_x = grad @ W, W dequantized where the blocks are.
    at::Tensor w = q_dequantize_op().call(saved[0], ctx->saved_data["qtype"].toInt(),
                                          ctx->saved_data["in_features"].toInt());
    return {at::matmul(grads[0], w), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor q_linear_autograd(const at::Tensor& x, const at::Tensor& qweight, int64_t qtype, int64_t out_features,
                             int64_t act_bits) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return q_linear_op().call(x, qweight, qtype, out_features, act_bits);
  }
  return QLinearFn::apply(x, qweight, qtype, out_features, act_bits);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("q_linear(Tensor x, Tensor qweight, int qtype, int out_features, int act_bits=32) -> Tensor");
  m.def("q_dequantize(Tensor qweight, int qtype, int in_features) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("q_linear", TORCH_FN(q_linear_meta));
  m.impl("q_dequantize", TORCH_FN(q_dequantize_meta));
}

TORCH_LIBRARY_IMPL(tpu, Autograd, m) { m.impl("q_linear", TORCH_FN(q_linear_autograd)); }

}  // namespace torch_tpu
