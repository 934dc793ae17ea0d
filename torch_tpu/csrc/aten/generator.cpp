// generator.cpp - per-device Philox generator state (seed, offset) and the
// PrivateUse1 hooks (availability, generators, pinned memory, device count).
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/CallOnce.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "bridge.h"

namespace torch_tpu {
namespace {

// Philox key + counter. Kernels draw value i of a call from counter
// offset + i, so results do not depend on threading.
class TpuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit TpuGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  // State: 16 bytes, seed then offset (little-endian uint64 each).
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK_VALUE(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
                      "tpu generator state must be a uint8 tensor of 16 bytes, got ", state.numel(),
                      " elements of ", state.dtype());
    const auto* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::kByte);
    auto* p = t.data_ptr<uint8_t>();
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  void reserve(uint64_t counters, uint64_t* out_seed, uint64_t* out_offset) {
    *out_seed = seed_;
    *out_offset = offset_;
    offset_ += (counters + 3) & ~uint64_t(3);
  }
  static c10::DeviceType device_type() { return kTpu; }

 private:
  TpuGeneratorImpl* clone_impl() const override {
    auto* g = new TpuGeneratorImpl(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

std::mutex g_gen_mu;
std::deque<at::Generator> g_default_generators;  // index = device

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  ensure_runtime();
  if (index < 0) index = current_device();
  device(index);  // validates the index
  std::lock_guard<std::mutex> lock(g_gen_mu);
  while (static_cast<int64_t>(g_default_generators.size()) <= index) {
    auto idx = static_cast<c10::DeviceIndex>(g_default_generators.size());
    g_default_generators.push_back(at::make_generator<TpuGeneratorImpl>(idx));
  }
  return g_default_generators[index];
}

at::Generator make_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  device(index);
  return at::make_generator<TpuGeneratorImpl>(index);
}

void reserve_random(std::optional<at::Generator> gen, c10::DeviceIndex index, uint64_t counters,
                    uint64_t* out_seed, uint64_t* out_offset) {
  at::Generator g = (gen.has_value() && gen->defined()) ? *gen : default_generator(index);
  auto* impl = at::check_generator<TpuGeneratorImpl>(g);
  std::lock_guard<std::mutex> lock(g.mutex());
  impl->reserve(counters, out_seed, out_offset);
}

namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    ensure_runtime();
    return tpu_runtime_device_count() > 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    ensure_runtime();
    for (int32_t i = 0; i < tpu_runtime_device_count(); ++i) {
      tpu_hal_device_t* d = device(static_cast<c10::DeviceIndex>(i));
      if (tpu_hal_device_vt(d)->owns_pointer(d, data)) return at::Device(kTpu, i);
    }
    TORCH_CHECK(false, "pointer ", data, " does not belong to any tpu device");
  }
  bool isPinnedPtr(const void* data) const override {
    return tpu_runtime_is_initialized() && tpu_runtime_host_is_pinned(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    ensure_runtime();
    return static_cast<c10::DeviceIndex>(tpu_runtime_device_count());
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    ensure_runtime();
    check(tpu_runtime_set_current_device(index));
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex old = current_device();
    setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  void init() const override { ensure_runtime(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

void TpuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage, newsize);
}

void register_hooks() {
  static c10::once_flag once;
  c10::call_once(once, [] { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); });
}

}  // namespace torch_tpu
