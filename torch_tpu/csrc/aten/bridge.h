// bridge.h - shared declarations of the PyTorch bridge (C++17).
//
// The bridge translates between PyTorch's C++ registration ABI and the C
// runtime (runtime/include/tpu/*.h). It holds no math and no policy: memory,
// queues, kernels and counters live in the runtime.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/CachingDeviceAllocator.h>

extern "C" {
#include "tpu/hal.h"
#include "tpu/kernels.h"
#include "tpu/runtime.h"
#include "tpu/status.h"
}

namespace torch_tpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// Throws the C++ exception matching the status code (and frees the status):
// OUT_OF_MEMORY -> c10::OutOfMemoryError (torch.OutOfMemoryError),
// INVALID_ARGUMENT -> c10::ValueError, UNIMPLEMENTED -> NotImplementedError,
// OUT_OF_RANGE -> c10::IndexError, others -> c10::Error (RuntimeError).
[[noreturn]] void throw_status(tpu_status_t status);
inline void check(tpu_status_t status) {
  if (status != TPU_OK) throw_status(status);
}

// Initialises the runtime on first use (idempotent).
void ensure_runtime();
// Borrowed device `index` (throws on a bad index).
tpu_hal_device_t* device(c10::DeviceIndex index);
c10::DeviceIndex current_device();
// True if the driver's device memory is host-addressable, so the C kernel
// table and the graph compiler can run on it (the host driver). False
// (pjrt): ops without a lowering of that driver run by their decomposition
// (run_decomposition) or else PyTorch's CPU fallback, ops with data-dependent
// output sizes and the copies the kernels would do stage through the host.
bool host_kernels();
// True if the driver runs `op` (a full schema name) itself (HAL supports_op).
bool driver_runs_op(const char* op);

// The device allocator (registered for PrivateUse1).
c10::DeviceAllocator* allocator();
// Pinned host allocator (for pin_memory()).
c10::Allocator* pinned_allocator();

// The default generator of a device, and the Philox (seed, offset) reserve.
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator make_generator(c10::DeviceIndex index);
// Reserves `counters` Philox counters from `gen` (or the device's default
// generator when it is undefined); returns the seed and first counter.
void reserve_random(std::optional<at::Generator> gen, c10::DeviceIndex index,
                    uint64_t counters, uint64_t* out_seed, uint64_t* out_offset);

// Converts a tpu (or any) tensor to the kernel ABI view. Throws if the rank
// exceeds TPU_MAX_DIMS or the dtype has no tpu equivalent.
tpu_tensor_t to_kernel_tensor(const at::Tensor& t);
tpu_dtype_t to_tpu_dtype(c10::ScalarType type);  // TPU_DTYPE_INVALID if none
c10::ScalarType from_tpu_dtype(tpu_dtype_t type);  // throws on INVALID

// Whether the C kernel ABI has t's dtype (undefined tensors: yes). Complex,
// float8 and uint16/32/64 tensors may live on tpu; kernels never see them.
bool kernel_dtype(const at::Tensor& t);
// The real view ([re, im] pairs) of a complex tensor's bytes as stored,
// ignoring its conjugate bit.
at::Tensor physical_real(const at::Tensor& t);

// Queues a tpu -> tpu copy (with cast and broadcast) on dst's device. Copies
// bytes: the conjugate/negative bits are tpu_copy_from's business. Complex
// data moves as real views; other dtypes without kernels stage through the
// host.
void native_copy(const at::Tensor& dst, const at::Tensor& src);

// Queues the C kernel `name` (a tpu/kernels.h table entry) on device `index`
// with `args` in the kernel's argument order and preallocated `outputs`
// (undefined = not wanted; the kernel sees dtype INVALID). For bridge files
// that implement ATen ops whose outputs PyTorch cannot describe by a meta
// function (e.g. attention). Checks synchronously; throws on error.
void submit_kernel(const char* name, c10::ArrayRef<c10::IValue> args, const std::vector<at::Tensor>& outputs,
                   c10::DeviceIndex index, std::optional<at::Generator> gen = std::nullopt);

// On a driver without host kernels: runs the boxed `op` by PyTorch's
// decomposition table (torch_tpu/_decomp.py), each smaller op dispatched to
// tpu again. False (stack untouched) when the op has no decomposition or is
// already being decomposed on this thread. decompose.cpp.
bool run_decomposition(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// float32 matrix products of the ops this thread issues: 1 may use bfloat16
// operands, 0 stay float32, -1 (default) as torch.get_float32_matmul_precision()
// says ("medium": bfloat16). torch.tpu.precision() sets it for its block.
void set_bf16_products(int mode);
int bf16_products();
// The TPU_K_CALL_* flags a matrix product issued now gets from those settings
// (eager calls and compiled graph runs alike).
uint32_t matmul_call_flags();

// Lazy gathers (gather.cpp), on drivers with host kernels: called by the
// boxed dispatch for aten::index.Tensor and aten::bmm before their kernels.
// True when the call was handled (the stack then holds its result); false
// leaves the stack untouched for the ordinary kernel.
bool lazy_gather_index(torch::jit::Stack* stack);
bool lazy_gather_bmm(torch::jit::Stack* stack);

// Allocates a new tpu tensor.
at::Tensor empty_strided_tpu(c10::IntArrayRef size, c10::IntArrayRef stride,
                             c10::ScalarType dtype, c10::DeviceIndex index);

}  // namespace torch_tpu
