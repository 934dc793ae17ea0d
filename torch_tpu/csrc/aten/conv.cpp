// conv.cpp - convolution on tpu.
//
// On a PrivateUse1 device, at::_convolution selects ConvBackend::Overrideable
// and calls aten::convolution_overrideable; aten::convolution_backward routes
// to aten::convolution_backward_overrideable (output_mask says which of
// grad_input, grad_weight, grad_bias are wanted). ATen has already validated
// the shapes, expanded the stride/padding/dilation lists and (for 1-d) may
// have viewed the problem as 2-d. Both ops are implemented here: output
// sizes come from ATen's own helpers (conv_output_size, conv_input_size),
// the outputs are allocated here and the C kernels tpu::conv_fwd /
// tpu::conv_bwd (runtime/kernels/conv.c) are queued with them. Regular and
// transposed convolutions, any number of spatial dims, groups, bias;
// float32/bfloat16/float16/float64 (other dtypes: NotImplementedError from
// the kernel's check, naming the op).
#include <ATen/native/ConvUtils.h>
#include <torch/library.h>

#include <array>
#include <vector>

#include "bridge.h"

namespace torch_tpu {
namespace {

at::Tensor tpu_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                        c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                        c10::IntArrayRef output_padding, int64_t groups) {
  TORCH_CHECK(input.dim() >= 3 && weight.dim() == input.dim(),
              "convolution_overrideable: expected input and weight of the same rank >= 3, got ", input.dim(),
              "-D and ", weight.dim(), "-D");
  std::vector<int64_t> out_sizes =
      transposed ? at::native::conv_input_size(input.sizes(), weight.sizes(), padding, output_padding, stride,
                                               dilation, groups)
                 : at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
  at::Tensor out = at::empty(out_sizes, input.options());
  const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
  submit_kernel("tpu::conv_fwd",
                {input, weight, b.defined() ? c10::IValue(b) : c10::IValue(), stride, padding, dilation, transposed,
                 output_padding, groups},
                {out}, input.device().index());
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> tpu_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = at::empty(input.sizes(), input.options());
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), weight.options());
  if (output_mask[2]) grad_bias = at::empty({grad_output.size(1)}, grad_output.options());
  if (grad_input.defined() || grad_weight.defined() || grad_bias.defined()) {
    c10::List<bool> mask;
    for (bool b : output_mask) mask.push_back(b);
    submit_kernel("tpu::conv_bwd",
                  {grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                   mask},
                  {grad_input, grad_weight, grad_bias}, grad_output.device().index());
  }
  return std::make_tuple(grad_input, grad_weight, grad_bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(tpu_convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(tpu_convolution_backward_overrideable));
}

}  // namespace torch_tpu
