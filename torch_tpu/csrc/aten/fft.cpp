// fft.cpp - the custom ops of the fft kernel family (runtime/kernels/fft.c):
//
//   tpu::fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor
//   tpu::fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor
//   tpu::fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor
//
// ATen's _fft_c2c, _fft_r2c and _fft_c2r on real views: a complex tensor of
// shape S is passed and returned as torch.view_as_real's (*S, 2). dim: dims
// of S (non-negative, distinct); normalization: ATen's fft_norm_mode (0
// none, 1 1/sqrt(n), 2 1/n). float32 and float64; outputs contiguous, of the
// input's dtype. Semantics are documented in fft.c.
//
// Here: the schemas and Meta kernels (output sizes and argument checks, used
// by the eager path to allocate outputs and by FakeTensor under
// torch.compile). The tpu (PrivateUse1) implementation is the bridge's boxed
// path, which finds the C kernel by the op's name. No autograd kernels: the
// ops are meant to sit below ATen's own _fft_* autograd formulas.
#include <torch/library.h>

#include <vector>

#include "bridge.h"

namespace torch_tpu {
namespace {

std::string dtype_name(c10::ScalarType t) {
  const tpu_dtype_t d = to_tpu_dtype(t);
  return d != TPU_DTYPE_INVALID ? std::string(tpu_dtype_name(d)) : std::string(c10::toString(t));
}

void check_dtype(const char* op, const at::Tensor& self) {
  const auto t = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(t), op, ": dtype ", dtype_name(t),
                              " is not supported on tpu (pass the real view, torch.view_as_real)");
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kDouble, op, ": dtype ", dtype_name(t),
                              " is not supported on tpu (float32 or float64)");
}

// k: the signal's rank. Checks dims (in range, distinct, at least one unless
// `allow_none`) and the normalization; returns the last dim (0 if none).
int64_t check_dims(const char* op, at::IntArrayRef dim, int64_t k, int64_t normalization, bool allow_none) {
  TORCH_CHECK(allow_none || !dim.empty(), op, ": expects at least one dim to transform");
  TORCH_CHECK(static_cast<int64_t>(dim.size()) <= k, op, ": got ", dim.size(), " dims for a signal of ", k,
              " dims");
  for (size_t i = 0; i < dim.size(); ++i) {
    TORCH_CHECK_INDEX(dim[i] >= 0 && dim[i] < k, op, ": Dimension out of range (expected to be in range of [0, ",
                      k - 1, "], but got ", dim[i], ")");
    for (size_t j = 0; j < i; ++j) {
      TORCH_CHECK(dim[j] != dim[i], op, ": dim ", dim[i], " appears more than once in dim");
    }
  }
  TORCH_CHECK(normalization >= 0 && normalization <= 2, op,
              ": normalization must be 0 (none), 1 (1/sqrt(n)) or 2 (1/n), got ", normalization);
  return dim.empty() ? 0 : dim.back();
}

// self must be a real view (*S, 2); returns S.
std::vector<int64_t> signal_of_view(const char* op, const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 1 && self.size(-1) == 2, op,
              ": expected the real view of a complex tensor (a last dim of size 2), got shape ", self.sizes());
  return std::vector<int64_t>(self.sizes().begin(), self.sizes().end() - 1);
}

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

at::Tensor fft_c2c_meta(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool forward) {
  const char* op = "tpu::fft_c2c";
  check_dtype(op, self);
  const auto S = signal_of_view(op, self);
  check_dims(op, dim, static_cast<int64_t>(S.size()), normalization, true);
  return at::empty(self.sizes(), self.options());
}

at::Tensor fft_r2c_meta(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool onesided) {
  const char* op = "tpu::fft_r2c";
  check_dtype(op, self);
  std::vector<int64_t> out(self.sizes().begin(), self.sizes().end());
  const int64_t last = check_dims(op, dim, self.dim(), normalization, false);
  if (onesided) out[last] = self.size(last) / 2 + 1;
  TORCH_CHECK(numel_of(out) == 0 || self.size(last) > 0, op, ": Invalid number of data points (0) specified");
  out.push_back(2);
  return at::empty(out, self.options());
}

at::Tensor fft_c2r_meta(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, int64_t last_dim_size) {
  const char* op = "tpu::fft_c2r";
  check_dtype(op, self);
  auto out = signal_of_view(op, self);
  const int64_t last = check_dims(op, dim, static_cast<int64_t>(out.size()), normalization, false);
  TORCH_CHECK(last_dim_size >= 0, op, ": last_dim_size must be non-negative, got ", last_dim_size);
  const int64_t have = out[last];
  out[last] = last_dim_size;
  TORCH_CHECK(numel_of(out) == 0 || have >= last_dim_size / 2 + 1, op, ": input of shape ", self.sizes(), " has ",
              have, " entries along dim ", last, ", fewer than the ", last_dim_size / 2 + 1,
              " (last_dim_size // 2 + 1) that a last_dim_size of ", last_dim_size, " reads");
  return at::empty(out, self.options());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor");
  m.def("fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor");
  m.def("fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("fft_c2c", TORCH_FN(fft_c2c_meta));
  m.impl("fft_r2c", TORCH_FN(fft_r2c_meta));
  m.impl("fft_c2r", TORCH_FN(fft_c2r_meta));
}

}  // namespace torch_tpu
