// allocator.cpp - c10::DeviceAllocator over the HAL's per-chip caching
// allocator, and a pinned host allocator over the runtime's pinned memory.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include "bridge.h"

namespace torch_tpu {
namespace {

struct BlockContext {
  void* ptr;
  c10::DeviceIndex device;
};

void free_block(void* ctx) {
  auto* block = static_cast<BlockContext*>(ctx);
  tpu_hal_device_t* d = nullptr;
  tpu_status_t st = tpu_runtime_device(block->device, &d);
  if (st == TPU_OK) {
    tpu_hal_device_vt(d)->deallocate(d, block->ptr);
  } else {
    tpu_status_free(st);  // runtime already shut down: memory went with it
  }
  delete block;
}

void fill_stat(c10::CachingAllocator::StatArray& arr, int64_t current, int64_t peak,
               int64_t allocated, int64_t freed) {
  auto& s = arr[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.current = current;
  s.peak = peak;
  s.allocated = allocated;
  s.freed = freed;
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = current_device();
    tpu_hal_device_t* d = device(index);
    void* ptr = nullptr;
    if (nbytes > 0) check(tpu_hal_device_vt(d)->allocate(d, nbytes, &ptr));
    if (ptr == nullptr) return {nullptr, nullptr, &noop_delete, c10::Device(kTpu, index)};
    auto* ctx = new BlockContext{ptr, index};
    return {ptr, ctx, &free_block, c10::Device(kTpu, index)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    tpu_hal_device_t* d = device(current_device());
    check(tpu_hal_device_vt(d)->copy_d2d(d, dest, src, count));
  }

  bool initialized() override { return tpu_runtime_is_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    if (!tpu_runtime_is_initialized()) return;
    for (int32_t i = 0; i < tpu_runtime_device_count(); ++i) {
      tpu_hal_device_t* d = device(static_cast<c10::DeviceIndex>(i));
      tpu_hal_device_vt(d)->empty_cache(d);
    }
  }

  // One in-order queue per chip: every stream of a device is that queue, so
  // stream-ordered reuse needs no extra tracking.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    tpu_hal_device_t* d = device(index);
    tpu_hal_memory_stats_t s{};
    tpu_hal_device_vt(d)->memory_stats(d, &s);
    c10::CachingDeviceAllocator::DeviceStats out;
    fill_stat(out.allocated_bytes, s.allocated_bytes, s.peak_allocated_bytes, 0, 0);
    fill_stat(out.reserved_bytes, s.reserved_bytes, s.peak_reserved_bytes, 0, 0);
    fill_stat(out.active_bytes, s.allocated_bytes, s.peak_allocated_bytes, 0, 0);
    fill_stat(out.requested_bytes, s.requested_bytes, s.requested_bytes, 0, 0);
    fill_stat(out.allocation, s.num_allocs - s.num_frees, s.num_allocs - s.num_frees,
              s.num_allocs, s.num_frees);
    fill_stat(out.segment, s.num_segments, s.num_segments, s.num_device_allocs,
              s.num_device_frees);
    out.num_ooms = static_cast<int64_t>(s.num_ooms);
    out.num_device_alloc = static_cast<int64_t>(s.num_device_allocs);
    out.num_device_free = static_cast<int64_t>(s.num_device_frees);
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    tpu_hal_device_t* d = device(index);
    tpu_hal_device_vt(d)->reset_accumulated_stats(d);
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    tpu_hal_device_t* d = device(index);
    tpu_hal_device_vt(d)->reset_peak_stats(d);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    tpu_hal_device_t* d = device(index);
    uint64_t free_b = 0, total = 0;
    tpu_hal_device_vt(d)->memory_info(d, &free_b, &total);
    return {static_cast<size_t>(free_b), static_cast<size_t>(total)};
  }

 private:
  static void noop_delete(void*) {}
};

void free_pinned(void* ptr) { tpu_runtime_host_free_pinned(ptr); }

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    ensure_runtime();
    void* ptr = nullptr;
    if (nbytes > 0) check(tpu_runtime_host_alloc_pinned(nbytes, &ptr));
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

TpuAllocator g_allocator;
PinnedAllocator g_pinned;

}  // namespace

c10::DeviceAllocator* allocator() { return &g_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_tpu
