// moe.cpp - torch.ops.tpu.ragged_dot, the grouped GEMM of Mixture-of-Experts
// layers (the C kernel is tpu::ragged_dot in runtime/kernels/moe.c).
//
//   tpu::ragged_dot(Tensor lhs, Tensor rhs, Tensor group_sizes) -> Tensor
//     lhs [M, K], rows sorted by group; rhs [G, K, N]; group_sizes [G] int32
//     or int64 with sum(group_sizes) == M. out[M, N]: the rows of group g are
//     lhs rows @ rhs[g]. float32, bfloat16, float16 (lhs and rhs alike),
//     float32 accumulation. A "tpu" kernel and a Meta kernel (torch.compile);
//     the autograd formula is registered from Python (torch_tpu/moe.py):
//     d lhs = ragged_dot(grad, rhs^T), d rhs = ragged_dot_rhs_grad(lhs, grad).
//   tpu::ragged_dot_rhs_grad(Tensor lhs, Tensor grad, Tensor group_sizes) -> Tensor
//     [G, K, N]: out[g] = lhs_g^T @ grad_g over the rows of group g (zeros for
//     an empty group).
//   tpu::gather_bmm(Tensor a, Tensor b, Tensor ids, int gathered) -> Tensor
//     torch.bmm(a[ids], b) (gathered 0: a [E, M, K], b [S, K, N]) or
//     torch.bmm(a, b[ids]) (gathered 1: a [S, M, K], b [E, K, N]) -> [S, M, N],
//     without materialising the gathered operand: each expert's matrix is
//     read once per group of pairs that use it. ids [S] int32/int64 (negative
//     ids count from the end; out of range: IndexError at the next
//     synchronisation). Not differentiable. aten::bmm reaches it with no
//     user change when an operand is a lazy gather (gather.cpp). On other
//     devices, and on drivers without host kernels, it is the gather and
//     torch.bmm.
//
// group_sizes is read by the kernel on the device queue, so nothing waits:
// a negative size or a sum other than M is reported (ValueError) at the next
// synchronisation. Shapes and dtypes are checked here (RuntimeError).
//
// aten::_grouped_mm needs no code here: the C table has it, so it is
// registered for PrivateUse1 with the other native kernels (ops.cpp).
#include <torch/library.h>

#include "bridge.h"

namespace torch_tpu {
namespace {

constexpr const char* kOp = "tpu::ragged_dot";

bool is_mm_dtype(c10::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

// group_sizes on lhs's device (a cpu tensor is copied over), contiguous.
at::Tensor group_sizes_on(const char* op, const at::Tensor& group_sizes, const at::Tensor& lhs) {
  at::Tensor gs = group_sizes;
  if (gs.device() != lhs.device()) {
    TORCH_CHECK(gs.device().type() == c10::DeviceType::CPU || gs.device().type() == kTpu, op,
                ": group_sizes must be on ", lhs.device(), " or the cpu, got ", gs.device());
    gs = gs.to(lhs.device());
  }
  return gs.contiguous();
}

void check_ragged_dot(const at::Tensor& lhs, const at::Tensor& rhs, const at::Tensor& group_sizes) {
  TORCH_CHECK(lhs.dim() == 2, kOp, ": lhs must be 2-D [M, K], got sizes ", lhs.sizes());
  TORCH_CHECK(rhs.dim() == 3, kOp, ": rhs must be 3-D [G, K, N], got sizes ", rhs.sizes());
  TORCH_CHECK(group_sizes.dim() == 1, kOp, ": group_sizes must be 1-D [G], got sizes ", group_sizes.sizes());
  TORCH_CHECK(lhs.size(1) == rhs.size(1), kOp, ": lhs ", lhs.sizes(), " and rhs ", rhs.sizes(),
              " differ in K (lhs.size(1) = ", lhs.size(1), ", rhs.size(1) = ", rhs.size(1), ")");
  TORCH_CHECK(group_sizes.size(0) == rhs.size(0), kOp, ": group_sizes has ", group_sizes.size(0),
              " entries but rhs has ", rhs.size(0), " groups");
  TORCH_CHECK(is_mm_dtype(lhs.scalar_type()), kOp, ": lhs dtype ", lhs.scalar_type(),
              " is not supported (float32, bfloat16, float16)");
  TORCH_CHECK(rhs.scalar_type() == lhs.scalar_type(), kOp, ": lhs and rhs must have the same dtype, got ",
              lhs.scalar_type(), " and ", rhs.scalar_type());
  TORCH_CHECK(group_sizes.scalar_type() == at::kInt || group_sizes.scalar_type() == at::kLong, kOp,
              ": group_sizes must be int32 or int64, got ", group_sizes.scalar_type());
}

at::Tensor ragged_dot_meta(const at::Tensor& lhs, const at::Tensor& rhs, const at::Tensor& group_sizes) {
  check_ragged_dot(lhs, rhs, group_sizes);
  return at::empty({lhs.size(0), rhs.size(2)}, lhs.options());
}

at::Tensor ragged_dot_tpu(const at::Tensor& lhs, const at::Tensor& rhs, const at::Tensor& group_sizes) {
  check_ragged_dot(lhs, rhs, group_sizes);
  TORCH_CHECK(lhs.device().type() == kTpu && rhs.device() == lhs.device(), kOp,
              ": lhs and rhs must be on the same tpu device, got ", lhs.device(), " and ", rhs.device());
  at::Tensor gs = group_sizes_on(kOp, group_sizes, lhs);
  const c10::DeviceIndex index = lhs.device().index();
  const int64_t M = lhs.size(0), N = rhs.size(2);
  at::Tensor out = empty_strided_tpu({M, N}, {N, 1}, lhs.scalar_type(), index);
  submit_kernel(kOp, {lhs, rhs, gs}, {out}, index);
  return out;
}

void check_rhs_grad(const at::Tensor& lhs, const at::Tensor& grad, const at::Tensor& group_sizes) {
  constexpr const char* op = "tpu::ragged_dot_rhs_grad";
  TORCH_CHECK(lhs.dim() == 2 && grad.dim() == 2 && lhs.size(0) == grad.size(0), op,
              ": expected lhs [M, K] and grad [M, N], got ", lhs.sizes(), " and ", grad.sizes());
  TORCH_CHECK(group_sizes.dim() == 1, op, ": group_sizes must be 1-D [G], got sizes ", group_sizes.sizes());
  TORCH_CHECK(is_mm_dtype(lhs.scalar_type()) && grad.scalar_type() == lhs.scalar_type(), op,
              ": lhs and grad must have the same dtype among float32, bfloat16, float16, got ", lhs.scalar_type(),
              " and ", grad.scalar_type());
  TORCH_CHECK(group_sizes.scalar_type() == at::kInt || group_sizes.scalar_type() == at::kLong, op,
              ": group_sizes must be int32 or int64, got ", group_sizes.scalar_type());
}

at::Tensor rhs_grad_meta(const at::Tensor& lhs, const at::Tensor& grad, const at::Tensor& group_sizes) {
  check_rhs_grad(lhs, grad, group_sizes);
  return at::empty({group_sizes.size(0), lhs.size(1), grad.size(1)}, lhs.options());
}

at::Tensor rhs_grad_tpu(const at::Tensor& lhs, const at::Tensor& grad, const at::Tensor& group_sizes) {
  constexpr const char* op = "tpu::ragged_dot_rhs_grad";
  check_rhs_grad(lhs, grad, group_sizes);
  TORCH_CHECK(lhs.device().type() == kTpu && grad.device() == lhs.device(), op,
              ": lhs and grad must be on the same tpu device, got ", lhs.device(), " and ", grad.device());
  at::Tensor gs = group_sizes_on(op, group_sizes, lhs);
  const c10::DeviceIndex index = lhs.device().index();
  const int64_t G = gs.size(0), K = lhs.size(1), N = grad.size(1);
  at::Tensor out = empty_strided_tpu({G, K, N}, {K * N, N, 1}, lhs.scalar_type(), index);
  submit_kernel(op, {lhs, grad, gs}, {out}, index);
  return out;
}

void check_gather_bmm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ids, int64_t gathered) {
  constexpr const char* op = "tpu::gather_bmm";
  TORCH_CHECK(gathered == 0 || gathered == 1, op, ": gathered must be 0 (a is gathered) or 1 (b is), got ", gathered);
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && ids.dim() == 1, op, ": expected a and b 3-D and ids 1-D, got sizes ",
              a.sizes(), ", ", b.sizes(), " and ", ids.sizes());
  TORCH_CHECK(is_mm_dtype(a.scalar_type()) && b.scalar_type() == a.scalar_type(), op,
              ": a and b must have the same dtype among float32, bfloat16, float16, got ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(ids.scalar_type() == at::kInt || ids.scalar_type() == at::kLong, op, ": ids must be int32 or int64, got ",
              ids.scalar_type());
  const at::Tensor& pairs = gathered == 0 ? b : a;
  TORCH_CHECK(a.size(2) == b.size(1) && pairs.size(0) == ids.size(0), op, ": sizes do not match: a ", a.sizes(), ", b ",
              b.sizes(), ", ids ", ids.sizes());
}

at::Tensor gather_bmm_meta(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ids, int64_t gathered) {
  check_gather_bmm(a, b, ids, gathered);
  return at::empty({ids.size(0), a.size(1), b.size(2)}, a.options());
}

// Any device: the gather, then the product (what the tpu kernel avoids).
at::Tensor gather_bmm_composite(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ids, int64_t gathered) {
  check_gather_bmm(a, b, ids, gathered);
  c10::List<std::optional<at::Tensor>> index;
  index.push_back(ids);
  return gathered == 0 ? at::bmm(at::index(a, index), b) : at::bmm(a, at::index(b, index));
}

at::Tensor gather_bmm_tpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& ids, int64_t gathered) {
  constexpr const char* op = "tpu::gather_bmm";
  if (!host_kernels()) return gather_bmm_composite(a, b, ids, gathered);  // no lowering on this driver
  check_gather_bmm(a, b, ids, gathered);
  TORCH_CHECK(a.device().type() == kTpu && b.device() == a.device() && ids.device() == a.device(), op,
              ": a, b and ids must be on the same tpu device, got ", a.device(), ", ", b.device(), " and ", ids.device());
  const c10::DeviceIndex index = a.device().index();
  std::vector<int64_t> sizes = {ids.size(0), a.size(1), b.size(2)};
  at::Tensor out = empty_strided_tpu(sizes, c10::contiguous_strides(sizes), a.scalar_type(), index);
  submit_kernel(op, {a, b, ids, gathered}, {out}, index);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("ragged_dot(Tensor lhs, Tensor rhs, Tensor group_sizes) -> Tensor");
  m.def("ragged_dot_rhs_grad(Tensor lhs, Tensor grad, Tensor group_sizes) -> Tensor");
  m.def("gather_bmm(Tensor a, Tensor b, Tensor ids, int gathered) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("ragged_dot", TORCH_FN(ragged_dot_meta));
  m.impl("ragged_dot_rhs_grad", TORCH_FN(rhs_grad_meta));
  m.impl("gather_bmm", TORCH_FN(gather_bmm_meta));
}

TORCH_LIBRARY_IMPL(tpu, CompositeExplicitAutograd, m) {
  m.impl("gather_bmm", TORCH_FN(gather_bmm_composite));
}

TORCH_LIBRARY_IMPL(tpu, PrivateUse1, m) {
  m.impl("ragged_dot", TORCH_FN(ragged_dot_tpu));
  m.impl("ragged_dot_rhs_grad", TORCH_FN(rhs_grad_tpu));
  m.impl("gather_bmm", TORCH_FN(gather_bmm_tpu));
}

}  // namespace torch_tpu
