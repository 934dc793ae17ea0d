// gather.cpp - lazy gathers: `weight[ids]` on tpu without the copy, and the
// batched product that reads the gathered weights in place.
//
// Transformers decodes MoE models on accelerators with its "batched_mm"
// experts (generate() switches to them on every device but the cpu):
//   w = gate_up_proj[expert_ids]            # [S, 2I, H]: every pair's expert weight
//   y = torch.bmm(w, x.unsqueeze(-1))       # one GEMV per (token, expert) pair
// At Qwen3-30B-A3B's shapes and batch 64 the gather is 3 GiB per layer and
// step. Here:
//
//   aten::index.Tensor of a contiguous 3-D floating tpu tensor by a single
//     1-D integer tpu index (on dim 0) returns a tensor whose storage has no
//     memory yet (its DataPtr is null; its context is a LazyGather: an alias
//     of the source and a private copy of the ids). It costs nothing of the
//     memory budget.
//   aten::bmm with such a tensor as one operand (as returned, or transposed
//     in its last two dims) runs tpu::gather_bmm (runtime/kernels/moe.c),
//     which sorts the pairs by expert and streams each expert's weight once.
//   Anything else materialises the gather first (the index kernel into fresh
//     memory), through PyTorch's storage materializer hook
//     (StorageImpl::set_materializer), which runs on every mutable access to
//     the storage's memory: the bridge takes every device pointer that way
//     (to_kernel_tensor, the copies, .item()), and so do Python's data_ptr(),
//     .cpu() and the CPU fallback.
//   Writes to the source: the source's storage gets a materializer too, which
//     materialises every lazy gather of it before its memory is handed to
//     anyone (the gathers then hold the values the source had at index time,
//     as a copy would). gather.cpp's own reads of the source suspend it.
//
// Invariant (under g_mu): g_by_source has an entry for a storage exactly when
// this file's flush_source materializer is installed on it. A lazy storage
// carries materialize_hook until it is materialised or dies.
//
// Only on drivers with host kernels (the host driver); TORCH_TPU_LAZY_GATHER=0
// turns the lazy index off (read at each index call).
#include <c10/util/intrusive_ptr.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "bridge.h"

namespace torch_tpu {
namespace {

struct LazyGather {
  at::Tensor source;  // an alias of the indexed tensor (own TensorImpl, same storage)
  at::Tensor ids;     // a private copy of the index, [S]
  c10::SmallVector<int64_t, 3> sizes;
  c10::ScalarType dtype;
  c10::DeviceIndex index;
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> storage;  // the lazy storage (set once made)
};

std::mutex g_mu;
std::unordered_map<c10::StorageImpl*, std::vector<LazyGather*>> g_by_source;

void lazy_deleter(void* ctx);
void materialize_hook(c10::StorageImpl* storage);
void flush_source(c10::StorageImpl* source);

// The LazyGather behind a storage, or null when it holds real memory.
LazyGather* lazy_of(c10::StorageImpl* s) {
  const c10::DataPtr& dp = s->_mutable_data_ptr_no_checks();
  return dp.get_deleter() == &lazy_deleter ? static_cast<LazyGather*>(dp.get_context()) : nullptr;
}

LazyGather* lazy_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.device().type() != kTpu) return nullptr;
  return lazy_of(t.storage().unsafeGetStorageImpl());
}

// Drops g from its source's list; the last one takes the source's hook away.
void unregister(LazyGather* g) {
  c10::StorageImpl* src = g->source.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_by_source.find(src);
  if (it == g_by_source.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), g), v.end());
  if (v.empty()) {
    g_by_source.erase(it);
    src->clear_materializer();
  }
}

// The lazy storage died without being materialised.
void lazy_deleter(void* ctx) {
  auto* g = static_cast<LazyGather*>(ctx);
  unregister(g);
  delete g;
}

// While alive, reads of `source` by this file do not flush its lazy gathers.
class SuspendSourceHook {
 public:
  explicit SuspendSourceHook(const at::Tensor& source) : s_(source.storage().unsafeGetStorageImpl()) {
    std::lock_guard<std::mutex> lock(g_mu);
    had_ = g_by_source.count(s_) > 0;
    if (had_) s_->clear_materializer();
  }
  ~SuspendSourceHook() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (had_ && g_by_source.count(s_) > 0 && !s_->has_materializer()) s_->set_materializer(&flush_source);
  }
  SuspendSourceHook(const SuspendSourceHook&) = delete;
  SuspendSourceHook& operator=(const SuspendSourceHook&) = delete;

 private:
  c10::StorageImpl* s_;
  bool had_ = false;
};

// Runs the gather into fresh memory and gives that memory to `s` (whose
// LazyGather is freed on the way). Leaves s without a materializer.
void materialize(c10::StorageImpl* s) {
  LazyGather* g = lazy_of(s);
  if (g == nullptr) {
    s->clear_materializer();
    return;
  }
  unregister(g);  // flush_source must not find it again
  const at::Tensor source = g->source, ids = g->ids;
  const c10::DeviceIndex index = g->index;
  at::Tensor fresh = empty_strided_tpu(g->sizes, c10::contiguous_strides(g->sizes), g->dtype, index);
  {
    SuspendSourceHook suspend(source);
    c10::List<std::optional<at::Tensor>> indices;
    indices.push_back(ids);
    submit_kernel("aten::index.Tensor", {source, indices}, {fresh}, index);
  }
  c10::DataPtr real = std::move(fresh.storage().unsafeGetStorageImpl()->_mutable_data_ptr_no_checks());
  s->clear_materializer();
  s->set_data_ptr_noswap(std::move(real));  // the old DataPtr's deleter frees g
}

void materialize_hook(c10::StorageImpl* storage) { materialize(storage); }

// Something is about to get the source's memory (to read or to write it):
// every lazy gather of it becomes a real copy first.
void flush_source(c10::StorageImpl* source) {
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> alive;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_by_source.find(source);
    if (it != g_by_source.end()) {
      for (LazyGather* g : it->second) {
        auto strong = g->storage->lock();  // null: that storage is being destroyed
        if (strong) alive.push_back(std::move(strong));
      }
      g_by_source.erase(it);
    }
    source->clear_materializer();
  }
  for (auto& s : alive) materialize(s.get());
}

bool lazy_index_enabled() {
  const char* v = std::getenv("TORCH_TPU_LAZY_GATHER");
  if (v == nullptr || v[0] == '\0') return true;
  TORCH_CHECK_VALUE(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0,
                    "TORCH_TPU_LAZY_GATHER must be 0 or 1, got '", v, "'");
  return v[0] == '1';
}

bool is_float_mm(c10::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

// `t` is the lazy gather g ([S, R, C], contiguous) or its transpose in the
// last two dims: the view of g's source [E, R, C] whose rows ids select.
bool source_view(const LazyGather& g, const at::Tensor& t, at::Tensor* out) {
  const int64_t S = g.sizes[0], R = g.sizes[1], C = g.sizes[2];
  if (t.dim() != 3 || t.storage_offset() != 0 || t.size(0) != S) return false;
  if (S > 1 && t.stride(0) != R * C) return false;
  auto dim_is = [&](int d, int64_t size, int64_t stride) { return t.size(d) == size && (size == 1 || t.stride(d) == stride); };
  if (dim_is(1, R, C) && dim_is(2, C, 1)) {
    *out = g.source;
    return true;
  }
  if (dim_is(1, C, 1) && dim_is(2, R, C)) {
    *out = g.source.transpose(1, 2);
    return true;
  }
  return false;
}

}  // namespace

bool lazy_gather_index(torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  if (!args[0].isTensor() || !(args[1].isOptionalTensorList() || args[1].isTensorList())) return false;
  const at::Tensor self = args[0].toTensor();
  std::vector<std::optional<at::Tensor>> indices;
  if (args[1].isTensorList()) {
    for (const auto& t : args[1].toTensorVector()) indices.emplace_back(t);
  } else {
    for (const auto& t : args[1].toOptionalTensorList()) indices.push_back(t);
  }
  if (indices.size() != 1 || !indices[0].has_value() || !indices[0]->defined()) return false;
  const at::Tensor ids = *indices[0];
  if (self.dim() != 3 || !is_float_mm(self.scalar_type()) || !self.is_contiguous() || self.numel() == 0) return false;
  if (ids.dim() != 1 || ids.numel() == 0 || ids.device() != self.device() ||
      (ids.scalar_type() != at::kLong && ids.scalar_type() != at::kInt)) {
    return false;
  }
  if (lazy_of(self) != nullptr || !lazy_index_enabled()) return false;
  c10::StorageImpl* src = self.storage().unsafeGetStorageImpl();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (src->has_materializer() && g_by_source.count(src) == 0) return false;  // someone else's hook
  }
  const c10::DeviceIndex index = self.device().index();
  const int64_t S = ids.size(0);
  auto* g = new LazyGather();
  g->source = at::native::alias(self);
  g->ids = empty_strided_tpu({S}, {1}, ids.scalar_type(), index);
  native_copy(g->ids, ids);
  g->sizes = {S, self.size(1), self.size(2)};
  g->dtype = self.scalar_type();
  g->index = index;
  const size_t nbytes = static_cast<size_t>(S * self.size(1) * self.size(2)) * self.element_size();
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, c10::DataPtr(nullptr, g, &lazy_deleter, c10::Device(kTpu, index)),
      allocator(), /*resizable=*/true);
  storage->set_materializer(&materialize_hook);
  g->storage.emplace(storage);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_by_source.find(src);
    if (it == g_by_source.end()) {
      if (src->has_materializer()) return false;  // installed meanwhile; `storage` dies, freeing g
      src->set_materializer(&flush_source);
      it = g_by_source.emplace(src, std::vector<LazyGather*>()).first;
    }
    it->second.push_back(g);
  }
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(storage)),
                                                            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                            c10::scalarTypeToTypeMeta(g->dtype));
  out.unsafeGetTensorImpl()->set_sizes_contiguous(g->sizes);
  torch::jit::drop(*stack, 2);
  stack->emplace_back(std::move(out));
  return true;
}

bool lazy_gather_bmm(torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  if (!args[0].isTensor() || !args[1].isTensor()) return false;
  const at::Tensor a = args[0].toTensor(), b = args[1].toTensor();
  LazyGather* ga = lazy_of(a);
  LazyGather* gb = lazy_of(b);
  if ((ga == nullptr) == (gb == nullptr)) return false;  // neither, or both (then both materialise)
  if (a.dim() != 3 || b.dim() != 3 || a.scalar_type() != b.scalar_type() || !is_float_mm(a.scalar_type()) ||
      a.size(0) != b.size(0) || a.size(2) != b.size(1) || a.device() != b.device()) {
    return false;
  }
  LazyGather* g = ga != nullptr ? ga : gb;
  at::Tensor weight;
  if (!source_view(*g, ga != nullptr ? a : b, &weight)) return false;
  const c10::DeviceIndex index = a.device().index();
  std::vector<int64_t> sizes = {a.size(0), a.size(1), b.size(2)};
  at::Tensor out = empty_strided_tpu(sizes, c10::contiguous_strides(sizes), a.scalar_type(), index);
  {
    SuspendSourceHook suspend(g->source);
    const at::Tensor ids = g->ids;
    if (ga != nullptr) {
      submit_kernel("tpu::gather_bmm", {weight, b, ids, int64_t{0}}, {out}, index);
    } else {
      submit_kernel("tpu::gather_bmm", {a, weight, ids, int64_t{1}}, {out}, index);
    }
  }
  torch::jit::drop(*stack, 2);
  stack->emplace_back(std::move(out));
  return true;
}

}  // namespace torch_tpu
