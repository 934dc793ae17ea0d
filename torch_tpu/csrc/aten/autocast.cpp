// autocast.cpp - torch.amp.autocast("tpu"): the same cast policy as CUDA's
// (lower-precision matmuls/convs, fp32 for numerically sensitive ops, type
// promotion for mixed-input ops), registered for AutocastPrivateUse1.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {
using namespace at;  // the policy lists name ATen types unqualified

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_AUTOCAST_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_AUTOCAST_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define TPU_AUTOCAST_REDISPATCH(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE,        \
                                                      REDISPATCH_SIGNATURE, POLICY)
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOW)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TPU_AUTOCAST_REDISPATCH)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
}

}  // namespace
