// ops.cpp - the ATen kernels every PrivateUse1 backend must provide
// (allocation, views, resize, copies, scalar read, set_), and the boxed
// fallback that routes every other op to the C kernel table or, when the
// table has no entry, to PyTorch's CPU fallback (counted).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/NativeFunctions.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bridge.h"
#include "tpu/trace.h"

namespace torch_tpu {

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

namespace {

c10::DeviceIndex index_of(std::optional<c10::Device> d) {
  if (d.has_value() && d->has_index()) return d->index();
  return current_device();
}

const c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

// ---- kernel submission -------------------------------------------------------

// A call to a C kernel, owned by the device queue until it has run.
// Inline storage covers the common op (<= 8 arguments, <= 4 tensors), so a
// call costs one allocation; the Work never moves once made.
struct Work {
  virtual ~Work() = default;
  const tpu_k_entry_t* entry = nullptr;
  tpu_k_call_t call{};
  c10::SmallVector<tpu_k_value_t, 8> values;
  c10::SmallVector<tpu_tensor_t, 4> tensors;  // reserved up front: pointers stay valid
  std::vector<std::vector<int64_t>> ints;     // inner buffers survive outer growth
  std::vector<std::vector<double>> doubles;
  std::list<std::string> strings;             // c_str() of a list element never moves
  bool on_host = false;                       // tensors are host copies (see run_staged)
};

tpu_status_t run_work(void* ctx) {
  auto* w = static_cast<Work*>(ctx);
  return w->entry->run(&w->call);
}
void free_work(void* ctx) { delete static_cast<Work*>(ctx); }

// A list op's work (torch._foreach_*) is made of pieces the device queue
// may interleave with those of the next list ops (tpu_hal_work_t.parts):
// piece p is piece p - starts[i] of element i, starts[i] <= p < starts[i+1].
struct ListWork : Work {
  tpu_k_list_op_t op{};
  std::vector<int64_t> starts;

  void locate(int64_t part, int64_t* element, int64_t* piece) const {
    auto it = std::upper_bound(starts.begin(), starts.end(), part);
    *element = static_cast<int64_t>(it - starts.begin()) - 1;
    *piece = part - starts[*element];
  }
};

tpu_status_t run_list_part(void* ctx, int64_t part) {
  auto* w = static_cast<ListWork*>(ctx);
  int64_t element, piece;
  w->locate(part, &element, &piece);
  return tpu_k_list_run_piece(&w->op, &w->call, element, piece);
}

void list_part_footprint(void* ctx, int64_t part, tpu_hal_range_fn_t visit, void* vctx) {
  auto* w = static_cast<ListWork*>(ctx);
  int64_t element, piece;
  w->locate(part, &element, &piece);
  tpu_k_list_footprint(&w->call, element, piece, visit, vctx);
}

// Throws `st` prefixed with the op's name, unless the kernel named it already.
[[noreturn]] void throw_for_op(tpu_status_t st, const char* op) {
  const char* msg = tpu_status_message(st);
  size_t n = std::strlen(op);
  if (!(std::strncmp(msg, op, n) == 0 && msg[n] == ':')) st = tpu_status_annotate(st, "%s", op);
  throw_status(st);
}

// A driver without host kernels that has no lowering of this particular call
// (its dtypes, arguments or number of outputs): the caller runs the op on
// the CPU fallback instead, its stack still intact.
struct DriverDeclined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

thread_local int tls_bf16_products = -1;  // -1: torch.get_float32_matmul_precision() decides

}  // namespace

uint32_t matmul_call_flags() {
  bool bf16 = tls_bf16_products >= 0
                  ? tls_bf16_products != 0
                  : at::globalContext().float32MatmulPrecision() == at::Float32MatmulPrecision::MEDIUM;
  return bf16 ? TPU_K_CALL_BF16_PRODUCTS : 0u;
}

namespace {

// The permissions of a call to `entry`, captured when it is issued
// (tpu_k_call_t.flags); only matrix products read any, so no other op pays
// for reading torch's setting.
uint32_t issue_flags(const tpu_k_entry_t* entry) {
  return (entry->flags & TPU_K_FLAG_MATMUL) ? matmul_call_flags() : 0u;
}

// Validates synchronously, then queues the kernel on `index`'s device.
void submit(std::unique_ptr<Work> w, const char* op, c10::DeviceIndex index) {
  w->call.op = op;
  w->call.args = w->values.data();
  w->call.num_args = static_cast<int32_t>(w->values.size());
  w->call.pool = tpu_runtime_threadpool();
  w->call.flags = issue_flags(w->entry);
  if (w->entry->check) {
    tpu_status_t st = w->entry->check(&w->call);
    if (st != TPU_OK) throw_for_op(st, op);
  }
  tpu_hal_device_t* d = device(index);
  if (!host_kernels()) {
    // The driver lowers and queues the call itself; the Work dies here.
    tpu_status_t st = tpu_hal_device_vt(d)->execute_op(d, &w->call);
    if (tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED) {
      DriverDeclined declined(tpu_status_message(st));
      tpu_status_free(st);
      throw declined;
    }
    if (st != TPU_OK) throw_for_op(st, op);
    tpu_stats_record_native();
    return;
  }
  tpu_hal_work_t hw{};
  hw.name = op;
  hw.run = &run_work;
  hw.cleanup = &free_work;
  if ((w->entry->flags & TPU_K_FLAG_LIST) != 0) {
    auto* lw = static_cast<ListWork*>(w.get());
    if (tpu_k_list_op(w->entry->name, &lw->op)) {
      const int64_t n = tpu_k_list_length(&w->call);
      lw->starts.resize(static_cast<size_t>(n) + 1);
      lw->starts[0] = 0;
      for (int64_t i = 0; i < n; ++i) lw->starts[i + 1] = lw->starts[i] + tpu_k_list_pieces(&w->call, i);
      hw.parts = lw->starts[n];
      hw.run_part = &run_list_part;
      hw.footprint = &list_part_footprint;
    }
  }
  hw.single_use = (w->entry->flags & TPU_K_FLAG_RANDOM) != 0;   // a replay would repeat its draws
  if (tpu_trace_enabled()) hw.bytes = tpu_k_call_bytes(&w->call);  // for the device-queue trace
  hw.ctx = w.release();
  check(tpu_hal_device_vt(d)->submit(d, &hw));
  tpu_stats_record_native();
}

// A Work for `entry`: list ops get the piece bookkeeping.
std::unique_ptr<Work> new_work(const tpu_k_entry_t* entry) {
  std::unique_ptr<Work> w;
  if ((entry->flags & TPU_K_FLAG_LIST) != 0) {
    w = std::make_unique<ListWork>();
  } else {
    w = std::make_unique<Work>();
  }
  w->entry = entry;
  return w;
}

at::Tensor empty_like_contiguous(const at::Tensor& t, c10::ScalarType dtype, c10::DeviceIndex index) {
  return empty_strided_tpu(t.sizes(), c10::contiguous_strides(t.sizes()), dtype, index);
}

bool fallback_is_error() {
  bool forbidden = false;
  check(tpu_runtime_fallback_forbidden(&forbidden));
  return forbidden;
}

// "float32, int64": the dtypes of an op call's tensor arguments (error messages).
std::string argument_dtypes(const c10::OperatorHandle& op, const torch::jit::Stack* stack) {
  std::string out;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (!out.empty()) out += ", ";
    tpu_dtype_t d = to_tpu_dtype(t.scalar_type());
    out += d != TPU_DTYPE_INVALID ? tpu_dtype_name(d) : c10::toString(t.scalar_type());
  };
  for (const c10::IValue& v : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (v.isTensor()) {
      add(v.toTensor());
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) add(e.toTensor());
    }
  }
  return out.empty() ? "no tensors" : out;
}

// The op whose CPU fallback is running on this thread (for error messages).
thread_local const char* t_fallback_op = nullptr;

// Every dtype may live on tpu except the quantized ones (they need a
// quantizer the device does not have). Dtypes the C kernel ABI has no code
// for (complex, float8, uint16/32/64) are storage the bridge can copy;
// ops on them decompose (torch_tpu/_complex.py for complex) or take the
// counted CPU fallback (see foreign_call).
void check_dtype_allowed(c10::ScalarType dtype, const char* op = nullptr) {
  if (op == nullptr) op = t_fallback_op;
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isQIntType(dtype), "tpu: quantized dtypes are not supported: ",
                              op ? op : "an op", " would put a ", dtype, " tensor on tpu");
}

}  // namespace

void set_bf16_products(int mode) { tls_bf16_products = mode < 0 ? -1 : mode != 0; }
int bf16_products() { return tls_bf16_products; }

at::Tensor empty_strided_tpu(c10::IntArrayRef size, c10::IntArrayRef stride, c10::ScalarType dtype,
                             c10::DeviceIndex index) {
  check_dtype_allowed(dtype);
  c10::DeviceGuard guard(c10::Device(kTpu, index));
  return at::detail::empty_strided_generic(size, stride, allocator(), kTpuKeys, dtype);
}

namespace {

// The bytes of tensor `t` (on tpu) from its first to its last element, read
// into a CPU buffer; returns that buffer and, in *view, a CPU view of it
// with t's sizes and strides.
at::Tensor read_span(const at::Tensor& t, at::Tensor* view) {
  int64_t span = 1;
  for (int64_t i = 0; i < t.dim(); ++i) span += (t.size(i) - 1) * t.stride(i);
  at::Tensor buf = at::empty({span}, t.options().device(c10::DeviceType::CPU));
  tpu_hal_device_t* d = device(t.device().index());
  check(tpu_hal_device_vt(d)->copy_d2h(d, buf.data_ptr(), t.data_ptr(), span * t.element_size()));
  *view = buf.as_strided(t.sizes(), t.strides(), 0);
  return buf;
}

// native_copy on a driver without host kernels: both spans stage through the
// host, the CPU does the strided, casting, broadcasting copy, and dst's span
// is written back whole (its gaps with the bytes just read).
void staged_copy(const at::Tensor& dst, const at::Tensor& src) {
  at::Tensor s, d;
  read_span(src, &s);
  at::Tensor dbuf = read_span(dst, &d);
  d.copy_(s);
  tpu_hal_device_t* dev = device(dst.device().index());
  check(tpu_hal_device_vt(dev)->copy_h2d(dev, dst.data_ptr(), dbuf.data_ptr(), dbuf.numel() * dbuf.element_size()));
}

}  // namespace

bool kernel_dtype(const at::Tensor& t) {
  return !t.defined() || to_tpu_dtype(t.scalar_type()) != TPU_DTYPE_INVALID;
}

at::Tensor physical_real(const at::Tensor& t) { return at::view_as_real(t.is_conj() ? t._conj() : t); }

void native_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  if (!host_kernels()) {
    staged_copy(dst, src);
    return;
  }
  if (dst.is_complex() || src.is_complex()) {
    // Complex data moves as its real view ([re, im] pairs): the copy kernel
    // casts the parts; a real source fills the real parts, zero imaginary.
    const at::Tensor s = src.expand(dst.sizes());
    if (dst.is_complex() && src.is_complex()) {
      native_copy(physical_real(dst), physical_real(s));
      return;
    }
    if (dst.is_complex() && kernel_dtype(s)) {
      const at::Tensor d = physical_real(dst);
      native_copy(d.select(-1, 0), s);
      d.select(-1, 1).zero_();
      return;
    }
    if (kernel_dtype(dst)) {
      native_copy(dst, physical_real(s).select(-1, 0));
      return;
    }
  }
  if (!kernel_dtype(dst) || !kernel_dtype(src)) {
    staged_copy(dst, src);  // float8, uint16/32/64: the CPU converts
    return;
  }
  submit_kernel("aten::copy_", {dst, src, false}, {dst}, dst.device().index());
}

namespace {

// ---- required kernels ----------------------------------------------------------

at::Tensor tpu_empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                   std::optional<c10::Layout> layout, std::optional<c10::Device> dev,
                                   std::optional<bool> pin, std::optional<c10::MemoryFormat> mf) {
  const c10::ScalarType dt = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype_allowed(dt);
  c10::DeviceGuard guard(c10::Device(kTpu, index_of(dev)));
  return at::detail::empty_generic(size, allocator(), kTpuKeys, dt, mf);
}

at::Tensor tpu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                             std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                             std::optional<c10::Device> dev, std::optional<bool> pin) {
  return empty_strided_tpu(size, stride, dtype.value_or(c10::get_default_dtype_as_scalartype()),
                           index_of(dev));
}

at::Tensor tpu_as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                          std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Tensor tpu_view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor tpu_reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Makes sure the storage of `self` holds its current sizes/strides/offset.
void ensure_storage_fits(const at::Tensor& self) {
  if (self.numel() == 0) return;
  size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                 static_cast<size_t>(self.storage_offset()));
  if (need > self.storage().nbytes()) resize_storage_bytes(self.storage(), need);
}

const at::Tensor& tpu_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> mf) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (mf.has_value() && *mf != c10::MemoryFormat::Preserve && *mf != c10::MemoryFormat::Contiguous) {
    impl->empty_tensor_restride(*mf);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& tpu_set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset,
                                   c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& tpu_set_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return tpu_set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& tpu_set_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return tpu_set_storage_offset(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& tpu_set_tensor_offset(at::Tensor& self, const at::Tensor& src, int64_t offset,
                                  c10::IntArrayRef size, c10::IntArrayRef stride) {
  return tpu_set_storage_offset(self, src.storage(), offset, size, stride);
}

at::Tensor& tpu_set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  return tpu_set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// Bytes of a contiguous tensor.
size_t nbytes_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

void h2d(const at::Tensor& dst, const at::Tensor& src_cpu_contig) {
  tpu_hal_device_t* d = device(dst.device().index());
  check(tpu_hal_device_vt(d)->copy_h2d(d, dst.data_ptr(), src_cpu_contig.data_ptr(), nbytes_of(dst)));
}

void d2h(const at::Tensor& dst_cpu_contig, const at::Tensor& src) {
  tpu_hal_device_t* d = device(src.device().index());
  check(tpu_hal_device_vt(d)->copy_d2h(d, dst_cpu_contig.data_ptr(), src.data_ptr(), nbytes_of(src)));
}

// A view of `t` without its conjugate and negative bits: its bytes as stored.
at::Tensor without_bits(const at::Tensor& t) {
  at::Tensor out = t.is_conj() ? t._conj() : t;
  return out.is_neg() ? at::_neg_view(out) : out;
}

at::Tensor tpu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& src = self;
  if (dst.numel() == 0) return dst;
  if (src.is_complex() && !dst.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");  // as copy_ on the CPU
  }
  if (src.is_conj() || src.is_neg() || dst.is_conj() || dst.is_neg()) {
    // copy_ leaves the lazy conjugate/negative bits to _copy_from on this
    // device: copy the bytes, then conjugate or negate dst's bytes where the
    // bits of the two tensors differ.
    const at::Tensor d = without_bits(dst);
    tpu_copy_from(without_bits(src), d, non_blocking);
    if (src.is_conj() != dst.is_conj() && d.is_complex()) physical_real(d).select(-1, 1).neg_();
    if (src.is_neg() != dst.is_neg()) (d.is_complex() ? physical_real(d) : d).neg_();
    return dst;
  }
  const bool src_tpu = src.device().type() == kTpu;
  const bool dst_tpu = dst.device().type() == kTpu;
  if (dst_tpu) at::assert_no_internal_overlap(dst);
  if (src_tpu && dst_tpu) {
    if (src.device() == dst.device()) {
      native_copy(dst, src);
      return dst;
    }
    // Peer copy: stage as dense dst-dtype bytes on the source chip.
    at::Tensor s = src.expand(dst.sizes());
    at::Tensor packed = empty_like_contiguous(s, dst.scalar_type(), src.device().index());
    native_copy(packed, s);
    at::Tensor landing = dst.is_contiguous() ? dst
                                             : empty_like_contiguous(dst, dst.scalar_type(), dst.device().index());
    check(tpu_runtime_copy_peer(dst.device().index(), landing.data_ptr(), src.device().index(),
                                packed.data_ptr(), nbytes_of(landing)));
    if (!landing.is_same(dst)) native_copy(dst, landing);
    return dst;
  }
  if (!src_tpu && dst_tpu) {
    TORCH_CHECK(src.device().type() == c10::DeviceType::CPU, "tpu: cannot copy from ", src.device());
    at::Tensor s = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (dst.is_contiguous()) {
      h2d(dst, s);
    } else {
      at::Tensor tmp = empty_like_contiguous(dst, dst.scalar_type(), dst.device().index());
      h2d(tmp, s);
      native_copy(dst, tmp);
    }
    return dst;
  }
  TORCH_CHECK(src_tpu && dst.device().type() == c10::DeviceType::CPU, "tpu: cannot copy from ",
              src.device(), " to ", dst.device());
  at::Tensor s = src;
  if (!s.is_contiguous()) {
    at::Tensor packed = empty_like_contiguous(s, s.scalar_type(), s.device().index());
    native_copy(packed, s);
    s = packed;
  }
  if (dst.is_contiguous() && dst.scalar_type() == s.scalar_type() && dst.sizes() == s.sizes()) {
    d2h(dst, s);
  } else {
    at::Tensor tmp = at::empty(s.sizes(), s.options().device(c10::DeviceType::CPU));
    d2h(tmp, s);
    dst.copy_(tmp);
  }
  return dst;
}

// Lets `param.data = param.to("tpu")` keep the Parameter object (and so tied
// weights) in nn.Module._apply, as for CUDA: dense cpu and tpu tensors can
// share TensorImpl type.
bool tpu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().type() == kTpu || t.device().type() == c10::DeviceType::CPU);
  };
  return dense(self) && dense(from);
}

at::Tensor tpu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) tpu_resize_(dst, self.sizes(), std::nullopt);
  return tpu_copy_from(self, dst, false);
}

c10::Scalar tpu_local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: tensor is empty");
  at::Tensor tmp = at::empty({}, self.options().device(c10::DeviceType::CPU));
  tpu_hal_device_t* d = device(self.device().index());
  check(tpu_hal_device_vt(d)->copy_d2h(d, tmp.data_ptr(), self.data_ptr(), self.element_size()));
  return at::_local_scalar_dense(tmp);
}

// ---- boxed dispatch to C kernels ---------------------------------------------

struct OpPlan {
  std::string name;                     // "aten::add.Tensor"
  const tpu_k_entry_t* entry = nullptr;  // null: CPU fallback
  std::vector<int> out_alias;           // per return: aliased argument or -1
  bool expand_masks = false;            // advanced indexing: bool masks -> indices
  bool list_return = false;             // a list op returning Tensor[] (one per element)
  bool staged = false;                  // data-dependent sizes on a driver without host kernels
  int lazy_gather = 0;                  // 1: aten::index.Tensor, 2: aten::bmm (see gather.cpp)
  // A driver without host kernels and without a lowering of a kernel-table
  // op: the plan that stages it through the host, taken when PyTorch's
  // decomposition table has no entry for it either (tpu_boxed_fallback).
  std::shared_ptr<const OpPlan> staged_plan;
  // A kernel-table op that returns nothing (in-place list ops such as
  // _fused_adamw_, _foreach_add_) decomposed on such a driver: its kernel's
  // check() still validates the arguments first, so both drivers raise the
  // same errors.
  const tpu_k_entry_t* checked = nullptr;
  // PyTorch's semantic rules the bridge applies before a native kernel runs
  // (see apply_dtype_arg and run_mutating_pointwise):
  int self_arg = -1;   // `Tensor self`, when not written by the op
  int dtype_arg = -1;  // `ScalarType? dtype` of a computation (not a factory's)
  int out_arg = -1;    // the first out= argument
  std::vector<int> no_self_overlap;  // written arguments that may not overlap themselves
  bool pointwise = false;                         // PyTorch's `pointwise` tag
  bool stats_in_input_dtype = false;              // see run_native
  std::optional<c10::OperatorHandle> functional;  // the op without in-place/out= writes
  std::optional<c10::OperatorHandle> out_functional;  // an out= op's functional overload (see resize_out)
};

std::mutex g_plans_mu;
std::unordered_map<const c10::FunctionSchema*, OpPlan> g_plans;

bool same_alias(const c10::AliasInfo* a, const c10::AliasInfo* b) {
  return a && b && a->isWrite() && b->isWrite() && a->beforeSets() == b->beforeSets();
}

bool writes(const c10::Argument& a) { return a.alias_info() != nullptr && a.alias_info()->isWrite(); }

bool is_optional_dtype(const c10::Argument& a) {
  const auto& t = a.real_type();
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
}

// The overload of the same op that writes nothing and takes the same other
// arguments: add.Tensor for add_.Tensor and add.out, exp for exp.out.
std::optional<c10::OperatorHandle> functional_of(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  const auto& args = schema.arguments();
  std::vector<const c10::Argument*> kept;
  bool inplace = !name.empty() && name.back() == '_';
  for (const auto& a : args) {
    if (!(writes(a) && a.kwarg_only())) kept.push_back(&a);
  }
  if (inplace) {
    name.pop_back();
  } else if (kept.size() == args.size()) {
    return std::nullopt;
  }
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& cand : dispatcher.getAllOpNames()) {
    if (cand.name != name) continue;
    auto h = dispatcher.findSchema(cand);
    if (!h.has_value()) continue;
    const auto& cargs = h->schema().arguments();
    bool same = cargs.size() == kept.size();
    for (size_t i = 0; same && i < cargs.size(); ++i) {
      same = !writes(cargs[i]) && cargs[i].name() == kept[i]->name() &&
             cargs[i].type()->str() == kept[i]->type()->str();
    }
    if (same) return h;
  }
  return std::nullopt;
}

// Finds the arguments PyTorch's dtype rules refer to (see OpPlan).
void find_semantic_args(const c10::OperatorHandle& op, OpPlan& plan) {
  const auto& args = op.schema().arguments();
  bool factory = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a.name() == "self" && a.type()->kind() == c10::TypeKind::TensorType && !writes(a)) {
      plan.self_arg = static_cast<int>(i);
    }
    if (a.name() == "dtype" && is_optional_dtype(a)) plan.dtype_arg = static_cast<int>(i);
    if (a.name() == "layout") factory = true;
    if (plan.out_arg < 0 && writes(a) && a.kwarg_only()) plan.out_arg = static_cast<int>(i);
  }
  if (factory || plan.self_arg < 0) plan.dtype_arg = -1;
  // In-place variants often lack the tag their functional op carries (abs_, ge_).
  auto functional = functional_of(op.schema());
  plan.pointwise = op.hasTag(at::Tag::pointwise) || (functional && functional->hasTag(at::Tag::pointwise));
  if (plan.pointwise) plan.functional = functional;
  if (plan.out_arg >= 0) plan.out_functional = functional;
  plan.stats_in_input_dtype = op.schema().name() == "aten::native_layer_norm" && op.schema().overload_name().empty();
  // As on the CPU: every out= tensor but a reduction's, and whatever a
  // pointwise op writes, must not have two elements at one address.
  const bool reduction = op.hasTag(at::Tag::reduction);
  for (size_t i = 0; i < args.size(); ++i) {
    if (writes(args[i]) && ((args[i].kwarg_only() && !reduction) || plan.pointwise)) {
      plan.no_self_overlap.push_back(static_cast<int>(i));
    }
  }
}

const OpPlan& plan_for(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(&schema);
  if (it != g_plans.end()) return it->second;
  OpPlan plan;
  plan.name = schema.name();
  if (!schema.overload_name().empty()) plan.name += "." + schema.overload_name();
  // The kernel table describes the op (check(), flags) on every driver; a
  // driver without host kernels runs it only if it has its own lowering.
  plan.entry = tpu_k_lookup(plan.name.c_str());
  // Ops whose output sizes depend on the data (a shape() function: nonzero,
  // unique, masked_select, ...) and random ops the driver does not lower
  // stage through the host there (run_staged): the same C kernels, so the
  // same Philox streams as on the host driver.
  bool stage_unless_decomposed = false;
  if (plan.entry != nullptr && !host_kernels() && !driver_runs_op(plan.name.c_str())) {
    plan.staged = true;
    stage_unless_decomposed = plan.entry->shape == nullptr && (plan.entry->flags & TPU_K_FLAG_RANDOM) == 0;
    // An op returning nothing (in-place list ops) is never staged: it is
    // decomposed, its kernel's check() run first (OpPlan::checked).
    if (stage_unless_decomposed && schema.returns().empty() && plan.entry->check != nullptr) {
      plan.checked = plan.entry;
    }
  }
  if (plan.entry != nullptr && host_kernels()) {
    if (plan.name == "aten::index.Tensor") plan.lazy_gather = 1;
    if (plan.name == "aten::bmm") plan.lazy_gather = 2;
  }
  plan.expand_masks = schema.name() == "aten::index" || schema.name() == "aten::index_put" ||
                      schema.name() == "aten::index_put_" || schema.name() == "aten::_index_put_impl_";
  if (stage_unless_decomposed && plan.entry != nullptr && (plan.entry->flags & TPU_K_FLAG_LIST) != 0) {
    plan.entry = nullptr;  // list ops decompose per element (torch_tpu/_decomp.py), else the CPU fallback
    plan.staged = false;
  }
  // List ops (torch._foreach_*) may return one Tensor[].
  if (plan.entry != nullptr && (plan.entry->flags & TPU_K_FLAG_LIST) != 0 && schema.returns().size() == 1 &&
      schema.returns()[0].type()->kind() == c10::TypeKind::ListType) {
    plan.list_return = true;
    plan.out_alias.push_back(-1);
    return g_plans.emplace(&schema, std::move(plan)).first->second;
  }
  find_semantic_args(op, plan);
  // Native only when every return is a plain tensor.
  for (const auto& ret : schema.returns()) {
    if (ret.type()->kind() != c10::TypeKind::TensorType) {
      plan.entry = nullptr;
      break;
    }
    int alias = -1;
    const auto& args = schema.arguments();
    for (size_t j = 0; j < args.size(); ++j) {
      if (same_alias(ret.alias_info(), args[j].alias_info())) alias = static_cast<int>(j);
    }
    plan.out_alias.push_back(alias);
  }
  if (stage_unless_decomposed) {
    // run_staged writes back only what the op returns: an op that writes an
    // argument it does not return (in-place list ops) is never staged.
    bool returns_writes = plan.entry != nullptr;
    const auto& args = schema.arguments();
    for (size_t j = 0; returns_writes && j < args.size(); ++j) {
      if (writes(args[j])) {
        returns_writes = std::find(plan.out_alias.begin(), plan.out_alias.end(), static_cast<int>(j)) !=
                         plan.out_alias.end();
      }
    }
    if (returns_writes) plan.staged_plan = std::make_shared<const OpPlan>(plan);
    plan.entry = nullptr;
    plan.staged = false;
  }
  return g_plans.emplace(&schema, std::move(plan)).first->second;
}

void note_device(std::optional<c10::Device>& dev, const at::Tensor& t, const std::string& op) {
  if (!t.defined()) return;
  if (t.device().type() == kTpu) {
    TORCH_CHECK(!dev.has_value() || *dev == t.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", *dev,
                " and ", t.device(), "! (in ", op, ")");
    dev = t.device();
  } else {
    TORCH_CHECK(t.device().type() == c10::DeviceType::CPU && t.dim() == 0,
                "Expected all tensors to be on the same device, but got a ", t.device(), " tensor of sizes ",
                t.sizes(), " in ", op, " (only 0-dim cpu tensors may be mixed with tpu tensors)");
  }
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kTpu) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta));
}

c10::IValue meta_ivalue(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(to_meta(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& t : v.toOptionalTensorList()) {
      std::optional<at::Tensor> ot = t;
      out.push_back(ot.has_value() ? std::optional<at::Tensor>(to_meta(*ot)) : std::nullopt);
    }
    return out;
  }
  if (v.isDevice()) return c10::Device(c10::DeviceType::Meta);
  return v;
}

// ---- output metadata -----------------------------------------------------------
// Output sizes/strides/dtype come from PyTorch's meta function for the op.
// Many meta functions are Python (torch._meta_registrations / _refs), far
// slower than the kernel, so results are memoised per op, keyed by
// everything a meta function can see: each argument's kind, dtype, sizes,
// strides, wrapped-number flag and scalar values. Errors are never cached.

struct OutMeta {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  c10::ScalarType dtype;
  bool defined = true;  // false: the op returns an undefined tensor here
};

constexpr size_t kMetaMemoLimit = 4096;  // entries per op before a reset
std::mutex g_meta_mu;
std::unordered_map<const OpPlan*, std::unordered_map<std::string, std::vector<OutMeta>>> g_meta_memo;

template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_tensor(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back('U');
    return;
  }
  key.push_back(t.device().type() == kTpu ? 'T' : 'C');
  key.push_back(static_cast<char>(t.scalar_type()));
  key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 'w' : '-');
  put(key, static_cast<int32_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) {
    put(key, t.size(d));
    put(key, t.stride(d));
  }
}

// False when an argument kind is not understood (then: no memo).
bool meta_key(std::string& key, c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      put_tensor(key, v.toTensor());
    } else if (v.isTensorList()) {
      key.push_back('L');
      for (const auto& t : v.toTensorVector()) put_tensor(key, t);
      key.push_back(';');
    } else if (v.isOptionalTensorList()) {
      key.push_back('O');
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> ot = t;
        put_tensor(key, ot.has_value() ? *ot : at::Tensor());
      }
      key.push_back(';');
    } else if (v.isNone()) {
      key.push_back('n');
    } else if (v.isBool()) {
      key.push_back(v.toBool() ? 'B' : 'b');
    } else if (v.isInt()) {
      key.push_back('i');
      put(key, v.toInt());
    } else if (v.isDouble()) {
      key.push_back('d');
      put(key, v.toDouble());
    } else if (v.isIntList()) {
      key.push_back('I');
      for (int64_t x : v.toIntVector()) put(key, x);
      key.push_back(';');
    } else if (v.isBoolList()) {
      key.push_back('Z');
      for (bool x : v.toBoolList()) key.push_back(x ? '1' : '0');
      key.push_back(';');
    } else if (v.isDoubleList()) {
      key.push_back('D');
      for (double x : v.toDoubleVector()) put(key, x);
      key.push_back(';');
    } else if (v.isString()) {
      key.push_back('s');
      key.append(v.toStringRef());
      key.push_back('\0');
    } else if (v.isDevice()) {
      key.push_back('v');
      put(key, v.toDevice().index());
    } else if (v.isGenerator()) {
      key.push_back('g');
    } else {
      return false;
    }
  }
  return true;
}

std::vector<OutMeta> run_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              c10::DeviceIndex index) {
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const c10::IValue& v : args) meta.push_back(meta_ivalue(v));
  {
    c10::DeviceGuard guard(c10::Device(kTpu, index));
    op.callBoxed(&meta);
  }
  std::vector<at::Tensor> results;
  for (const c10::IValue& r : meta) {
    if (r.isTensorList()) {
      for (const at::Tensor& m : r.toTensorVector()) results.push_back(m);
    } else {
      results.push_back(r.toTensor());
    }
  }
  std::vector<OutMeta> out;
  for (const at::Tensor& m : results) {
    if (!m.defined()) {
      out.push_back(OutMeta{{}, {}, at::kFloat, false});
    } else {
      out.push_back(OutMeta{c10::SmallVector<int64_t, 6>(m.sizes().begin(), m.sizes().end()),
                            c10::SmallVector<int64_t, 6>(m.strides().begin(), m.strides().end()),
                            m.scalar_type()});
    }
  }
  return out;
}

std::vector<OutMeta> output_meta(const c10::OperatorHandle& op, const OpPlan& plan,
                                 c10::ArrayRef<c10::IValue> args, c10::DeviceIndex index) {
  thread_local std::string key;
  key.clear();
  if (!meta_key(key, args)) return run_meta(op, args, index);
  {
    std::lock_guard<std::mutex> lock(g_meta_mu);
    auto& memo = g_meta_memo[&plan];
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
  }
  std::vector<OutMeta> fresh = run_meta(op, args, index);  // may throw: not cached
  std::lock_guard<std::mutex> lock(g_meta_mu);
  auto& memo = g_meta_memo[&plan];
  if (memo.size() >= kMetaMemoLimit) memo.clear();
  memo.emplace(key, fresh);
  return fresh;
}

// Adds the tensor to the work's kernel view; cpu 0-dim tensors are uploaded.
const tpu_tensor_t* add_tensor(Work& w, const at::Tensor& t, c10::DeviceIndex index,
                               std::vector<at::Tensor>& keep) {
  at::Tensor dt = t;
  if (w.on_host) {
    if (t.device().type() == kTpu) {
      dt = t.cpu();
      keep.push_back(dt);
    }
  } else if (t.device().type() != kTpu) {
    dt = empty_strided_tpu({}, {}, t.scalar_type(), index);
    h2d(dt, t.contiguous());
    keep.push_back(dt);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(dt.scalar_type()) != TPU_DTYPE_INVALID, w.call.op ? w.call.op : "",
                              ": dtype ", dt.scalar_type(), " is not supported on tpu");
  w.tensors.push_back(to_kernel_tensor(dt));
  return &w.tensors.back();
}

size_t count_tensors(const c10::IValue& v) {
  if (v.isTensor()) return 1;
  if (v.isTensorList()) return v.toTensorVector().size();
  if (v.isOptionalTensorList()) return v.toOptionalTensorList().size();
  return 0;
}

void fill_value(Work& w, tpu_k_value_t& out, const c10::Argument* arg, const c10::IValue& v,
                c10::DeviceIndex index, std::vector<at::Tensor>& keep, const std::string& op) {
  out.kind = TPU_K_NONE;
  if (v.isNone() || v.isGenerator() || v.isDevice()) return;
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return;
    if (t.device().type() == c10::DeviceType::CPU && t.unsafeGetTensorImpl()->is_wrapped_number()) {
      // A Python scalar PyTorch wrapped into a tensor: passed as a scalar.
      c10::Scalar sc = t.item();
      if (sc.isBoolean()) {
        out.kind = TPU_K_BOOL;
        out.v.b = sc.toBool();
      } else if (sc.isIntegral(false)) {
        out.kind = TPU_K_INT;
        out.v.i = sc.toLong();
      } else {
        out.kind = TPU_K_DOUBLE;
        out.v.d = sc.toDouble();
      }
      return;
    }
    out.kind = TPU_K_TENSOR;
    out.v.tensor = add_tensor(w, t, index, keep);
  } else if (v.isTensorList() || v.isOptionalTensorList()) {
    std::vector<std::optional<at::Tensor>> ts;
    if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) ts.emplace_back(t);
    } else {
      for (const auto& t : v.toOptionalTensorList()) ts.push_back(t);
    }
    const tpu_tensor_t* first = w.tensors.data() + w.tensors.size();
    for (const auto& t : ts) {
      if (t.has_value() && t->defined()) {
        add_tensor(w, *t, index, keep);
      } else {
        w.tensors.push_back(tpu_tensor_t{});
      }
    }
    out.kind = TPU_K_TENSORS;
    out.v.tensors.data = first;
    out.v.tensors.len = static_cast<int64_t>(ts.size());
  } else if (v.isBool()) {
    out.kind = TPU_K_BOOL;
    out.v.b = v.toBool();
  } else if (v.isInt()) {
    auto kind = arg ? arg->real_type()->kind() : c10::TypeKind::IntType;
    if (kind == c10::TypeKind::ScalarTypeType ||
        (kind == c10::TypeKind::OptionalType &&
         arg->real_type()->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::ScalarTypeType)) {
      out.kind = TPU_K_DTYPE;
      out.v.dtype = to_tpu_dtype(static_cast<c10::ScalarType>(v.toInt()));
    } else {
      out.kind = TPU_K_INT;
      out.v.i = v.toInt();
    }
  } else if (v.isSymInt()) {
    out.kind = TPU_K_INT;
    out.v.i = v.toSymInt().guard_int(__FILE__, __LINE__);
  } else if (v.isDouble()) {
    out.kind = TPU_K_DOUBLE;
    out.v.d = v.toDouble();
  } else if (v.isBoolList()) {
    std::vector<int64_t> ints;
    for (bool b : v.toBoolList()) ints.push_back(b ? 1 : 0);
    w.ints.push_back(std::move(ints));
    out.kind = TPU_K_INTS;
    out.v.ints.data = w.ints.back().data();
    out.v.ints.len = static_cast<int64_t>(w.ints.back().size());
  } else if (v.isIntList() || v.isSymIntList()) {
    std::vector<int64_t> ints;
    if (v.isIntList()) {
      ints = v.toIntVector();
    } else {
      for (const c10::SymInt& s : v.toSymIntList()) ints.push_back(s.guard_int(__FILE__, __LINE__));
    }
    w.ints.push_back(std::move(ints));
    out.kind = TPU_K_INTS;
    out.v.ints.data = w.ints.back().data();
    out.v.ints.len = static_cast<int64_t>(w.ints.back().size());
  } else if (v.isDoubleList()) {
    w.doubles.push_back(v.toDoubleVector());
    out.kind = TPU_K_DOUBLES;
    out.v.doubles.data = w.doubles.back().data();
    out.v.doubles.len = static_cast<int64_t>(w.doubles.back().size());
  } else if (v.isList() && !v.isTensorList()) {
    // Scalar[] (list ops' per-element scalars): ints stay ints.
    bool ints = true;
    std::vector<double> doubles;
    std::vector<int64_t> integers;
    for (const c10::IValue& e : v.toListRef()) {
      TORCH_CHECK_NOT_IMPLEMENTED(e.isInt() || e.isDouble() || e.isBool(), op, ": argument '",
                                  arg ? arg->name() : "?", "' holds a ", e.tagKind(),
                                  ", which the tpu kernel ABI does not support");
      ints = ints && !e.isDouble();
      integers.push_back(e.isDouble() ? 0 : (e.isBool() ? e.toBool() : e.toInt()));
      doubles.push_back(e.isDouble() ? e.toDouble() : static_cast<double>(integers.back()));
    }
    if (ints) {
      w.ints.push_back(std::move(integers));
      out.kind = TPU_K_INTS;
      out.v.ints.data = w.ints.back().data();
      out.v.ints.len = static_cast<int64_t>(w.ints.back().size());
    } else {
      w.doubles.push_back(std::move(doubles));
      out.kind = TPU_K_DOUBLES;
      out.v.doubles.data = w.doubles.back().data();
      out.v.doubles.len = static_cast<int64_t>(w.doubles.back().size());
    }
  } else if (v.isString()) {
    w.strings.push_back(v.toStringRef());
    out.kind = TPU_K_STRING;
    out.v.s = w.strings.back().c_str();
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(false, op, ": argument '", arg ? arg->name() : "?", "' of type ", v.tagKind(),
                                " is not supported by the tpu kernel ABI");
  }
}

// Output metadata of a data-dependent op: drain the queue (inputs must be
// final), then let the kernel's shape() read the data. Outputs are contiguous.
std::vector<OutMeta> dynamic_output_meta(Work& w, size_t nouts, c10::DeviceIndex index) {
  tpu_hal_device_t* d = device(index);
  check(tpu_hal_device_vt(d)->synchronize(d));
  w.call.op = w.call.op ? w.call.op : "";
  w.call.args = w.values.data();
  w.call.num_args = static_cast<int32_t>(w.values.size());
  w.call.outputs = nullptr;
  w.call.num_outputs = static_cast<int32_t>(nouts);
  w.call.pool = tpu_runtime_threadpool();
  if (w.entry->check) {
    tpu_status_t st = w.entry->check(&w.call);
    if (st != TPU_OK) throw_for_op(st, w.call.op);
  }
  std::vector<tpu_tensor_t> shapes(nouts);
  tpu_status_t st = w.entry->shape(&w.call, shapes.data());
  if (st != TPU_OK) throw_for_op(st, w.call.op);
  std::vector<OutMeta> out;
  for (const tpu_tensor_t& t : shapes) {
    TORCH_CHECK(t.ndim >= 0 && t.ndim <= TPU_MAX_DIMS, w.call.op, ": kernel returned rank ", t.ndim);
    std::vector<int64_t> sizes(t.sizes, t.sizes + t.ndim);
    c10::ScalarType dtype = from_tpu_dtype(static_cast<tpu_dtype_t>(t.dtype));
    auto strides = c10::contiguous_strides(sizes);
    out.push_back(OutMeta{c10::SmallVector<int64_t, 6>(sizes.begin(), sizes.end()),
                          c10::SmallVector<int64_t, 6>(strides.begin(), strides.end()), dtype});
  }
  return out;
}

// Advanced indexing (x[idx], x[idx] = v) with index tensors on the CPU: they
// go to self's chip first, as CUDA moves them (Transformers' assisted
// decoding indexes with a CPU torch.arange). Other arguments must be on the
// device as for every op.
void indices_to_device(torch::jit::Stack& stack, size_t nargs) {
  const c10::IValue& self = stack[stack.size() - nargs];
  c10::IValue& iv = stack[stack.size() - nargs + 1];  // the `indices` argument
  if (!self.isTensor() || self.toTensor().device().type() != kTpu || !iv.isOptionalTensorList()) return;
  const c10::Device dev = self.toTensor().device();
  c10::List<std::optional<at::Tensor>> in = iv.toOptionalTensorList();
  bool moved = false;
  for (size_t i = 0; i < in.size(); ++i) {
    std::optional<at::Tensor> t = in.get(i);
    if (t.has_value() && t->defined() && t->device().type() == c10::DeviceType::CPU) {
      in.set(i, t->to(dev));
      moved = true;
    }
  }
  if (moved) iv = in;
}

// Advanced indexing with boolean masks (x[mask], x[mask] = v): like ATen's
// expandTensors, each bool/uint8 index becomes its nonzero() coordinates, one
// int64 index per masked dimension, so output sizes no longer depend on data
// and the kernel sees integer indices only. nonzero is itself a native op.
void expand_bool_indices(torch::jit::Stack& stack, size_t nargs) {
  c10::IValue& iv = stack[stack.size() - nargs + 1];  // the `indices` argument
  if (!iv.isOptionalTensorList() && !iv.isTensorList()) return;
  std::vector<std::optional<at::Tensor>> in;
  if (iv.isTensorList()) {
    for (const auto& t : iv.toTensorVector()) in.emplace_back(t);
  } else {
    for (const auto& t : iv.toOptionalTensorList()) in.push_back(t);
  }
  auto is_mask = [](const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
  };
  if (std::none_of(in.begin(), in.end(), is_mask)) return;
  c10::List<std::optional<at::Tensor>> out;
  for (const auto& t : in) {
    if (is_mask(t)) {
      at::Tensor nz = t->nonzero();
      for (int64_t d = 0; d < t->dim(); ++d) out.push_back(nz.select(1, d));
    } else {
      out.push_back(t);
    }
  }
  iv = out;
}

// PyTorch casts the input of a reduction or scan to its dtype= before
// computing: sum(float, dtype=int64) truncates every element first; so does
// sum(float, out=int64), whose out= tensor sets the dtype. A widening between
// floating types is left to the kernel, which reads the narrower type exactly.
void apply_dtype_arg(const OpPlan& plan, torch::jit::Stack& stack, size_t nargs) {
  const size_t base = stack.size() - nargs;
  c10::IValue& self_v = stack[base + plan.self_arg];
  if (!self_v.isTensor() || !self_v.toTensor().defined()) return;
  const c10::IValue& d = stack[base + plan.dtype_arg];
  std::optional<c10::ScalarType> dtype;
  if (d.isInt()) {
    dtype = static_cast<c10::ScalarType>(d.toInt());
  } else if (plan.out_arg >= 0 && stack[base + plan.out_arg].isTensor()) {
    const at::Tensor& out = stack[base + plan.out_arg].toTensor();
    if (out.defined() && at::isFloatingType(self_v.toTensor().scalar_type()) && !at::isFloatingType(out.scalar_type())) {
      dtype = out.scalar_type();
    }
  }
  const at::Tensor self = self_v.toTensor();
  const c10::ScalarType from = self.scalar_type();
  if (!dtype.has_value() || *dtype == from || to_tpu_dtype(*dtype) == TPU_DTYPE_INVALID) return;
  if (at::isFloatingType(from) && at::isFloatingType(*dtype) && c10::elementSize(*dtype) > c10::elementSize(from)) {
    return;
  }
  self_v = self.to(*dtype);
}

// Runs `entry`'s synchronous check() on `args` with output `out` (none when
// undefined). A kernel that cannot handle this dtype itself is no error here:
// the caller computes another way (in another dtype, or decomposed).
void check_args(const tpu_k_entry_t* entry, const std::string& name, const c10::FunctionSchema& schema,
                c10::ArrayRef<c10::IValue> args, const at::Tensor& out, c10::DeviceIndex index) {
  if (entry->check == nullptr) return;
  auto w = new_work(entry);
  w->call.op = name.c_str();
  size_t ntensors = 1;
  for (const c10::IValue& v : args) ntensors += count_tensors(v);
  w->tensors.reserve(ntensors);
  w->values.resize(args.size());
  std::vector<at::Tensor> keep;
  for (size_t i = 0; i < args.size(); ++i) {
    fill_value(*w, w->values[i], &schema.arguments()[i], args[i], index, keep, name);
  }
  if (out.defined()) {
    w->tensors.push_back(to_kernel_tensor(out));
    w->call.outputs = &w->tensors.back();
    w->call.num_outputs = 1;
  }
  w->call.args = w->values.data();
  w->call.num_args = static_cast<int32_t>(w->values.size());
  tpu_status_t st = entry->check(&w->call);
  if (st != TPU_OK && tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED) {
    tpu_status_free(st);
    return;
  }
  if (st != TPU_OK) throw_for_op(st, name.c_str());
}

// In-place and out= pointwise ops follow PyTorch's TensorIterator: the written
// tensor may not overlap itself or partially overlap an input, and the result
// is computed in the result type of the inputs (the dtype of the functional
// op), which must be castable to the written tensor's dtype and is then cast
// into it: exp(bf16, out=f32) rounds to bf16 first, add(bool, bool, out=float)
// is 1. Returns false when the kernel writes the tensor directly: same dtype,
// or a float32/float64 result narrowed into a no wider floating type (one
// rounding either way).
bool run_mutating_pointwise(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                            c10::DeviceIndex index) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  if (plan.out_alias.size() != 1 || plan.out_alias[0] < 0) return false;
  auto args = torch::jit::last(*stack, nargs);
  const int wi = plan.out_alias[0];
  const at::Tensor dst = args[wi].toTensor();
  torch::jit::Stack fargs;
  // Floating tensors of one dtype (the common x.add_(y)): the result type is
  // that dtype, or bool for a comparison, whose 0/1 the kernel writes as the
  // cast would. No meta call needed.
  bool one_float_dtype = at::isFloatingType(dst.scalar_type());
  for (size_t i = 0; i < nargs; ++i) {
    const auto& a = schema.arguments()[i];
    if (args[i].isTensor()) {
      const at::Tensor& t = args[i].toTensor();
      if (t.defined()) one_float_dtype = one_float_dtype && t.scalar_type() == dst.scalar_type();
      if (static_cast<int>(i) != wi && t.defined() && t.device() == dst.device()) {
        at::assert_no_partial_overlap(dst, t);
      }
    }
    if (!(writes(a) && a.kwarg_only())) fargs.push_back(args[i]);
  }
  if (one_float_dtype) return false;
  const c10::ScalarType natural = output_meta(*plan.functional, plan_for(*plan.functional), fargs, index)[0].dtype;
  const c10::ScalarType want = dst.scalar_type();
  TORCH_CHECK(c10::canCast(natural, want), "result type ", natural, " can't be cast to the desired output type ",
              want);
  if (natural == want) return false;
  if (at::isFloatingType(want) && (natural == at::kFloat || natural == at::kDouble) &&
      c10::elementSize(want) <= c10::elementSize(natural)) {
    return false;
  }
  const OutMeta m = output_meta(op, plan, args, index)[0];  // the op's own checks (shapes)
  if (dst.sizes() != c10::IntArrayRef(m.sizes)) tpu_resize_(dst, m.sizes, std::nullopt);
  check_args(plan.entry, plan.name, schema, args, dst, index);  // and the kernel's (dtypes PyTorch refuses)
  plan.functional->callBoxed(&fargs);
  native_copy(dst, fargs[0].toTensor());
  torch::jit::drop(*stack, nargs);
  stack->emplace_back(dst);
  return true;
}

void run_cpu_fallback(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                      const char* declined = nullptr);

// What the C kernel ABI cannot describe in a call: a tensor (argument, list
// member, 0-dim CPU scalar, or output) of a dtype without kernels, or a
// complex Scalar. Such calls decompose (complex ones by torch_tpu/_complex.py)
// or take the CPU fallback; kernels never see them.
enum class Foreign { kNone, kComplex, kOther };

Foreign foreign_dtype(c10::ScalarType t) {
  if (to_tpu_dtype(t) != TPU_DTYPE_INVALID) return Foreign::kNone;
  return c10::isComplexType(t) ? Foreign::kComplex : Foreign::kOther;
}

void note_foreign(Foreign& f, const at::Tensor& t) {
  if (!t.defined()) return;
  Foreign g = foreign_dtype(t.scalar_type());
  if (g > f) f = g;
}

Foreign foreign_call(c10::ArrayRef<c10::IValue> args) {
  Foreign f = Foreign::kNone;
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      note_foreign(f, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) note_foreign(f, t);
    } else if (v.isOptionalTensorList()) {
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> ot = t;
        if (ot.has_value()) note_foreign(f, *ot);
      }
    } else if (v.isComplexDouble()) {
      if (f == Foreign::kNone) f = Foreign::kComplex;
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isComplexDouble() && f == Foreign::kNone) f = Foreign::kComplex;
      }
    }
  }
  return f;
}

// Thrown by run_native before anything is queued when an output's dtype has
// no kernels (x.to(torch.complex64), torch.polar): the call goes the foreign way.
struct ForeignOutput {
  Foreign kind;
};

void check_output_dtypes(const std::vector<OutMeta>& metas) {
  for (const OutMeta& m : metas) {
    if (m.defined && foreign_dtype(m.dtype) != Foreign::kNone) throw ForeignOutput{foreign_dtype(m.dtype)};
  }
}

// An op with data-dependent output sizes, or a random op, on a driver whose
// memory the host cannot address: the tensor arguments come to the host, the
// C kernel runs there on the calling thread (after its shape(), if any, has
// read the data), and the outputs go to the device (or into the tensors the
// op writes, resized).
void run_staged(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                c10::DeviceIndex index, std::optional<at::Generator> gen) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t nouts = schema.returns().size();
  auto args = torch::jit::last(*stack, nargs);
  auto w = new_work(plan.entry);
  w->on_host = true;
  w->call.op = plan.name.c_str();
  size_t ntensors = nouts;
  for (const c10::IValue& v : args) ntensors += count_tensors(v);
  w->tensors.reserve(ntensors);
  w->values.resize(nargs);
  std::vector<at::Tensor> keep;
  for (size_t i = 0; i < nargs; ++i) {
    fill_value(*w, w->values[i], &schema.arguments()[i], args[i], index, keep, plan.name);
  }
  const std::vector<OutMeta> metas =
      plan.entry->shape != nullptr ? dynamic_output_meta(*w, nouts, index) : output_meta(op, plan, args, index);
  check_output_dtypes(metas);
  std::vector<at::Tensor> host;
  const tpu_tensor_t* first_out = w->tensors.data() + w->tensors.size();
  for (const OutMeta& m : metas) {
    host.push_back(m.defined ? at::empty_strided(m.sizes, m.strides, at::TensorOptions().dtype(m.dtype))
                             : at::Tensor());
    w->tensors.push_back(m.defined ? to_kernel_tensor(host.back()) : tpu_tensor_t{});
  }
  w->call.outputs = first_out;
  w->call.num_outputs = static_cast<int32_t>(metas.size());
  w->call.args = w->values.data();
  w->call.num_args = static_cast<int32_t>(w->values.size());
  w->call.pool = tpu_runtime_threadpool();
  w->call.flags = issue_flags(w->entry);
  if (plan.entry->flags & TPU_K_FLAG_RANDOM) {
    reserve_random(gen, index, tpu_k_random_counters(&w->call), &w->call.rng_seed, &w->call.rng_offset);
  }
  if (w->entry->check) {
    tpu_status_t cst = w->entry->check(&w->call);
    if (cst != TPU_OK) throw_for_op(cst, plan.name.c_str());
  }
  // For the device-queue trace: the kernel runs here, on the host, between
  // the reads of its inputs and the writes of its outputs (both traced copies).
  const bool traced = tpu_trace_enabled();
  const int64_t t0 = traced ? static_cast<int64_t>(tpu_now_ns()) : 0;
  tpu_status_t st = w->entry->run(&w->call);
  if (st != TPU_OK) throw_for_op(st, plan.name.c_str());
  if (traced) {
    tpu_trace_event_t e{};
    snprintf(e.name, sizeof(e.name), "%s (host)", plan.name.c_str());
    e.kind = TPU_TRACE_WORK;
    e.device = index;
    e.cpu_tid = tpu_trace_thread_id();
    e.queued_ns = e.start_ns = t0;
    e.end_ns = static_cast<int64_t>(tpu_now_ns());
    e.bytes = tpu_k_call_bytes(&w->call);
    tpu_trace_record(&e);
  }
  tpu_stats_record_native();
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < host.size(); ++i) {
    const int alias = i < plan.out_alias.size() ? plan.out_alias[i] : -1;
    if (!host[i].defined()) {
      outputs.emplace_back();
    } else if (alias >= 0) {
      at::Tensor out = args[alias].toTensor();
      if (out.sizes() != host[i].sizes()) tpu_resize_(out, host[i].sizes(), std::nullopt);
      out.copy_(host[i]);
      outputs.push_back(out);
    } else {
      outputs.push_back(host[i].to(c10::Device(kTpu, index)));
    }
  }
  torch::jit::drop(*stack, nargs);
  for (auto& o : outputs) stack->emplace_back(std::move(o));
}

// An out= tensor of other sizes is resized, then takes the strides the op's
// functional overload returns when they are dense, as PyTorch's structured
// kernels' resize_out does (LAPACK's column-major factors, for one); the
// out= overload's own meta function may not say (Python meta functions
// resize out= tensors contiguously).
void resize_out(const at::Tensor& out, const OutMeta& m, const OutMeta* functional) {
  tpu_resize_(out, m.sizes, std::nullopt);
  if (functional == nullptr || !functional->defined || functional->sizes != m.sizes ||
      out.strides() == c10::IntArrayRef(functional->strides)) {
    return;
  }
  if (at::empty_strided(functional->sizes, functional->strides, out.options().device(c10::DeviceType::Meta))
          .is_non_overlapping_and_dense()) {
    out.as_strided_(functional->sizes, functional->strides);
  }
}

// The functional overload's output metadata for an out= call's arguments.
std::vector<OutMeta> functional_meta(const OpPlan& plan, const c10::FunctionSchema& schema,
                                     c10::ArrayRef<c10::IValue> args, c10::DeviceIndex index) {
  torch::jit::Stack fargs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!(writes(schema.arguments()[i]) && schema.arguments()[i].kwarg_only())) fargs.push_back(args[i]);
  }
  try {
    return output_meta(*plan.out_functional, plan_for(*plan.out_functional), fargs, index);
  } catch (const c10::Error&) {
    return {};  // no functional meta function for these arguments: the out= overload's strides
  }
}

void run_native(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);

  if (plan.expand_masks) indices_to_device(*stack, nargs);
  std::optional<c10::Device> dev;
  std::optional<at::Generator> gen;
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      note_device(dev, v.toTensor(), plan.name);
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) note_device(dev, t, plan.name);
    } else if (v.isOptionalTensorList()) {
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> ot = t;
        if (ot.has_value()) note_device(dev, *ot, plan.name);
      }
    } else if (v.isGenerator()) {
      gen = v.toGenerator();
    }
  }
  c10::DeviceIndex index = dev.has_value() ? dev->index() : current_device();
  for (int i : plan.no_self_overlap) {
    if (args[i].isTensor()) at::assert_no_internal_overlap(args[i].toTensor());
  }
  if (plan.dtype_arg >= 0) apply_dtype_arg(plan, *stack, nargs);
  if (plan.staged) {
    run_staged(op, plan, stack, index, gen);
    return;
  }
  if (plan.functional.has_value() && run_mutating_pointwise(op, plan, stack, index)) return;
  if (plan.expand_masks) expand_bool_indices(*stack, nargs);

  size_t ntensors = 0;
  size_t list_len = 0;
  for (const c10::IValue& v : args) {
    ntensors += count_tensors(v);
    if (list_len == 0 && v.isTensorList()) list_len = count_tensors(v);
  }
  const size_t nouts = schema.returns().size();

  auto w = new_work(plan.entry);
  w->call.op = plan.name.c_str();
  w->tensors.reserve(ntensors + (plan.list_return ? list_len : nouts));
  w->values.resize(nargs);
  std::vector<at::Tensor> keep;
  for (size_t i = 0; i < nargs; ++i) {
    fill_value(*w, w->values[i], &schema.arguments()[i], args[i], index, keep, plan.name);
  }

  std::vector<OutMeta> metas;
  if (nouts == 0) {
    // nothing returned (in-place list ops such as _fused_adamw_): no meta
    // function to run, the kernel's check() validates the arguments
  } else if (plan.entry->shape != nullptr) {
    metas = dynamic_output_meta(*w, nouts, index);
  } else {
    metas = output_meta(op, plan, args, index);
  }
  check_output_dtypes(metas);
  // native_layer_norm's meta function follows CUDA (float32 mean and rstd for
  // a bfloat16/float16 input); the CPU, which tpu matches, returns them in the
  // parameters' dtype (weight, else bias, else the input's).
  if (plan.stats_in_input_dtype && metas.size() == 3) {
    c10::ScalarType dt = metas[0].dtype;
    for (int i : {2, 3}) {
      if (args[i].isTensor() && args[i].toTensor().defined()) {
        dt = args[i].toTensor().scalar_type();
        break;
      }
    }
    metas[1].dtype = metas[2].dtype = dt;
  }
  std::vector<at::Tensor> outputs;
  std::vector<OutMeta> fmetas;  // the functional overload's, when an out= tensor is resized
  for (size_t i = 0; i < metas.size(); ++i) {
    const OutMeta& m = metas[i];
    int alias = plan.list_return ? -1 : plan.out_alias[i];
    if (!m.defined) {
      outputs.emplace_back();
    } else if (alias >= 0) {
      at::Tensor out = args[alias].toTensor();
      if (out.sizes() != c10::IntArrayRef(m.sizes)) {
        if (plan.out_functional.has_value() && fmetas.empty()) fmetas = functional_meta(plan, schema, args, index);
        resize_out(out, m, i < fmetas.size() ? &fmetas[i] : nullptr);
      }
      outputs.push_back(out);
    } else {
      outputs.push_back(empty_strided_tpu(m.sizes, m.strides, m.dtype, index));
    }
  }
  const tpu_tensor_t* first_out = w->tensors.data() + w->tensors.size();
  for (const at::Tensor& o : outputs) {
    if (!o.defined()) {  // kernels skip outputs with dtype INVALID
      w->tensors.push_back(tpu_tensor_t{});
      continue;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(o.scalar_type()) != TPU_DTYPE_INVALID, plan.name, ": dtype ",
                                o.scalar_type(), " is not supported on tpu");
    w->tensors.push_back(to_kernel_tensor(o));
  }
  w->call.outputs = first_out;
  w->call.num_outputs = static_cast<int32_t>(outputs.size());
  if (plan.entry->flags & TPU_K_FLAG_RANDOM) {
    reserve_random(gen, index, tpu_k_random_counters(&w->call), &w->call.rng_seed, &w->call.rng_offset);
  }
  try {
    submit(std::move(w), plan.name.c_str(), index);
  } catch (const DriverDeclined& e) {
    if (!run_decomposition(op, stack)) run_cpu_fallback(op, plan, stack, e.what());
    return;
  }

  torch::jit::drop(*stack, nargs);
  if (plan.list_return) {
    stack->emplace_back(c10::List<at::Tensor>(outputs));
    return;
  }
  for (auto& o : outputs) stack->emplace_back(std::move(o));
}

void tpu_boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_for(op);
  const size_t nargs = op.schema().arguments().size();
  Foreign foreign = foreign_call(torch::jit::last(*stack, nargs));
  if (foreign == Foreign::kNone) {
    try {
      if (plan.entry != nullptr) {
        if (plan.lazy_gather != 0 && (plan.lazy_gather == 1 ? lazy_gather_index(stack) : lazy_gather_bmm(stack))) {
          return;
        }
        run_native(op, plan, stack);
        return;
      }
      if (plan.checked != nullptr) {
        check_args(plan.checked, plan.name, op.schema(), torch::jit::last(*stack, nargs), at::Tensor(),
                   current_device());
      }
    } catch (const ForeignOutput& e) {
      foreign = e.kind;
    }
  }
  // Calls with complex data decompose into ops on real views
  // (torch_tpu/_complex.py); for other dtypes without kernels (uint64:
  // hash_tensor's result) a decomposition's smaller ops reach the CPU
  // fallback themselves if they must.
  if (run_decomposition(op, stack)) return;
  if (plan.staged_plan && foreign == Foreign::kNone) {
    try {
      run_native(op, *plan.staged_plan, stack);
      return;
    } catch (const ForeignOutput&) {
    }
  }
  run_cpu_fallback(op, plan, stack);
}

void run_cpu_fallback(const c10::OperatorHandle& op, const OpPlan& plan, torch::jit::Stack* stack,
                      const char* declined) {
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), plan.name, " (tensor arguments: ", argument_dtypes(op, stack),
                              ") has no native tpu kernel and TORCH_TPU_FALLBACK=error forbids the CPU fallback",
                              declined ? " (the driver declined: " : "", declined ? declined : "",
                              declined ? ")" : "");
  tpu_stats_record_fallback(plan.name.c_str());
  struct Scope {
    const char* saved = t_fallback_op;
    ~Scope() { t_fallback_op = saved; }
  } scope;
  t_fallback_op = plan.name.c_str();
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

void submit_kernel(const char* name, c10::ArrayRef<c10::IValue> args, const std::vector<at::Tensor>& outputs,
                   c10::DeviceIndex index, std::optional<at::Generator> gen) {
  TORCH_CHECK_NOT_IMPLEMENTED(host_kernels() || driver_runs_op(name), name, " is not supported yet on the tpu device's ",
                              "driver (its memory is not host-addressable and it has no lowering of this op)");
  const tpu_k_entry_t* entry = tpu_k_lookup(name);
  TORCH_CHECK_NOT_IMPLEMENTED(entry != nullptr, "torch_tpu: the runtime has no kernel named ", name);
  auto w = new_work(entry);
  w->call.op = entry->name;
  size_t ntensors = outputs.size();
  for (const c10::IValue& v : args) ntensors += count_tensors(v);
  w->tensors.reserve(ntensors);
  w->values.resize(args.size());
  std::vector<at::Tensor> keep;
  for (size_t i = 0; i < args.size(); ++i) fill_value(*w, w->values[i], nullptr, args[i], index, keep, name);
  const tpu_tensor_t* first_out = w->tensors.data() + w->tensors.size();
  for (const at::Tensor& o : outputs) {
    if (!o.defined()) {
      w->tensors.push_back(tpu_tensor_t{});
      continue;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(o.scalar_type()) != TPU_DTYPE_INVALID, name, ": dtype ",
                                o.scalar_type(), " is not supported on tpu");
    w->tensors.push_back(to_kernel_tensor(o));
  }
  w->call.outputs = first_out;
  w->call.num_outputs = static_cast<int32_t>(outputs.size());
  if (entry->flags & TPU_K_FLAG_RANDOM) {
    reserve_random(gen, index, tpu_k_random_counters(&w->call), &w->call.rng_seed, &w->call.rng_offset);
  }
  try {
    submit(std::move(w), entry->name, index);
  } catch (const DriverDeclined& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, name, " is not supported on the tpu device's driver: ", e.what());
  }
}

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  c10::DeviceIndex index = storage.device().type() == kTpu ? storage.device().index() : current_device();
  c10::DeviceGuard guard(c10::Device(kTpu, index));
  size_t keep = std::min(newsize, storage.nbytes());
  if (keep > 0) storage.mutable_data();  // a lazy gather materialises (gather.cpp), a source flushes its gathers
  c10::DataPtr fresh = allocator()->allocate(newsize);
  if (keep > 0 && storage.data() != nullptr) {
    tpu_hal_device_t* d = device(index);
    check(tpu_hal_device_vt(d)->copy_d2d(d, fresh.get(), storage.data(), keep));
  }
  auto* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(newsize);
}

// Tensor.record_stream(stream): every stream of a chip is its one in-order queue
// (guard.cpp), so a block freed after work queued on any stream of it is reused
// only by work queued behind that work: there is nothing to record (as the
// guard's recordDataPtrOnStream). A stream of another device is an error.
static void tpu_record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: the stream is on ", stream.device(), ", the tensor (", self.scalar_type(), ", sizes ",
              self.sizes(), ") on ", self.device(), "; a tpu tensor takes a tpu stream");
  TORCH_CHECK(stream.device_index() == self.device().index(), "record_stream: the stream is on ", stream.device(),
              ", the tensor (", self.scalar_type(), ", sizes ", self.sizes(), ") on ", self.device());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(tpu_record_stream));
  m.impl("empty.memory_format", TORCH_FN(tpu_empty_memory_format));
  m.impl("empty_strided", TORCH_FN(tpu_empty_strided));
  m.impl("as_strided", TORCH_FN(tpu_as_strided));
  m.impl("view", TORCH_FN(tpu_view));
  m.impl("_reshape_alias", TORCH_FN(tpu_reshape_alias));
  // Views ATen implements per backend (metadata only, no data touched).
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(tpu_resize_));
  m.impl("_copy_from", TORCH_FN(tpu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(tpu_copy_from_and_resize));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(tpu_has_compatible_shallow_copy_type));
  m.impl("_local_scalar_dense", TORCH_FN(tpu_local_scalar_dense));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpu_set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(tpu_set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(tpu_set_tensor));
  m.impl("set_.source_Tensor_storage_offset", TORCH_FN(tpu_set_tensor_offset));
  m.impl("set_", TORCH_FN(tpu_set_empty));
}

// tpu_copy_from applies the conjugate and negative bits itself (copy_
// leaves them to _copy_from on this device). PyTorch's fallbacks for those
// keys would resolve the source by clone(), whose copy_ comes back here:
// let the calls through with their bits.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_fallback>());
}

// Registers every op of the C kernel table explicitly for PrivateUse1, so a
// native kernel wins over ATen's CompositeExplicitAutograd implementations
// (which would otherwise run first and decompose, e.g. native_layer_norm).
// Skipped: ops with a CompositeImplicitAutograd kernel (they decompose before
// reaching any backend and have no autograd formula of their own) and
// aten::copy_ (its composite kernel routes through _copy_from, which handles
// cross-device copies). Returns the table entries PyTorch does not know.
std::vector<std::string> register_native_kernels() {
  static torch::Library* lib = nullptr;
  static std::vector<std::string> unknown;
  if (lib != nullptr) return unknown;
  lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (size_t i = 0; i < tpu_k_entry_count(); ++i) {
    std::string full = tpu_k_entry_at(i)->name;
    if (full.rfind("aten::", 0) != 0 || full == "aten::copy_") continue;
    std::string name = full.substr(6);
    auto dot = name.find('.');
    std::string base = dot == std::string::npos ? name : name.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    auto op = c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
    if (!op.has_value()) {
      unknown.push_back(full);
      continue;
    }
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_fallback>());
  }
  return unknown;
}

}  // namespace torch_tpu
