// runtime_glue.cpp - status -> exception translation, runtime access.
#include <mutex>
#include <string>

#include "bridge.h"

namespace torch_tpu {

void throw_status(tpu_status_t status) {
  std::string msg = tpu_status_message(status);
  tpu_status_code_t code = tpu_status_code(status);
  tpu_status_free(status);
  switch (code) {
    case TPU_STATUS_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_STATUS_INVALID_ARGUMENT:
      TORCH_CHECK_VALUE(false, msg);
    case TPU_STATUS_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPU_STATUS_OUT_OF_RANGE:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_STATUS_LINALG:
      TORCH_CHECK_LINALG(false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

void ensure_runtime() {
  if (tpu_runtime_is_initialized()) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!tpu_runtime_is_initialized()) check(tpu_runtime_initialize());
}

tpu_hal_device_t* device(c10::DeviceIndex index) {
  ensure_runtime();
  tpu_hal_device_t* d = nullptr;
  check(tpu_runtime_device(index, &d));
  return d;
}

bool host_kernels() {
  static const bool value = [] {
    tpu_hal_device_t* d = device(0);
    tpu_hal_device_properties_t p;
    tpu_hal_device_vt(d)->query_properties(d, &p);
    return p.host_addressable;
  }();
  return value;
}

bool driver_runs_op(const char* op) {
  tpu_hal_device_t* d = device(0);
  const tpu_hal_device_vtable_t* vt = tpu_hal_device_vt(d);
  return vt->supports_op != nullptr && vt->execute_op != nullptr && vt->supports_op(d, op);
}

c10::DeviceIndex current_device() {
  ensure_runtime();
  return static_cast<c10::DeviceIndex>(tpu_runtime_current_device());
}

tpu_dtype_t to_tpu_dtype(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return TPU_DTYPE_F32;
    case at::kDouble: return TPU_DTYPE_F64;
    case at::kHalf: return TPU_DTYPE_F16;
    case at::kBFloat16: return TPU_DTYPE_BF16;
    case at::kLong: return TPU_DTYPE_I64;
    case at::kInt: return TPU_DTYPE_I32;
    case at::kShort: return TPU_DTYPE_I16;
    case at::kChar: return TPU_DTYPE_I8;
    case at::kByte: return TPU_DTYPE_U8;
    case at::kBool: return TPU_DTYPE_BOOL;
    default: return TPU_DTYPE_INVALID;
  }
}

c10::ScalarType from_tpu_dtype(tpu_dtype_t type) {
  switch (type) {
    case TPU_DTYPE_F32: return at::kFloat;
    case TPU_DTYPE_F64: return at::kDouble;
    case TPU_DTYPE_F16: return at::kHalf;
    case TPU_DTYPE_BF16: return at::kBFloat16;
    case TPU_DTYPE_I64: return at::kLong;
    case TPU_DTYPE_I32: return at::kInt;
    case TPU_DTYPE_I16: return at::kShort;
    case TPU_DTYPE_I8: return at::kChar;
    case TPU_DTYPE_U8: return at::kByte;
    case TPU_DTYPE_BOOL: return at::kBool;
    default: TORCH_CHECK(false, "tpu: kernel reported an invalid dtype ", static_cast<int>(type));
  }
}

tpu_tensor_t to_kernel_tensor(const at::Tensor& t) {
  tpu_tensor_t out{};
  TORCH_CHECK_NOT_IMPLEMENTED(t.dim() <= TPU_MAX_DIMS, "tpu: tensors of rank ", t.dim(),
                              " are not supported (at most ", TPU_MAX_DIMS, ")");
  out.dtype = to_tpu_dtype(t.scalar_type());
  out.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    out.sizes[i] = t.size(i);
    out.strides[i] = t.stride(i);
  }
  out.data = t.numel() == 0 ? nullptr
                            : static_cast<char*>(t.storage().mutable_data()) +
                                  t.storage_offset() * static_cast<int64_t>(t.element_size());
  return out;
}

}  // namespace torch_tpu
