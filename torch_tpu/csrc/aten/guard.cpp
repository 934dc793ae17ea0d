// guard.cpp - DeviceGuardImpl for "tpu": current device, streams, events.
//
// Every chip has one in-order queue; all streams of a device map onto it
// (stream id 0), which is a valid, stricter ordering than separate streams.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "bridge.h"

namespace torch_tpu {
namespace {

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    ensure_runtime();
    check(tpu_runtime_set_current_device(d.index()));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    tpu_status_free(tpu_runtime_set_current_device(d.index()));
  }

  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }

  c10::DeviceIndex deviceCount() const noexcept override {
    if (!tpu_runtime_is_initialized()) {
      tpu_status_t st = tpu_runtime_initialize();
      if (st != TPU_OK) {
        tpu_status_free(st);
        return 0;
      }
    }
    return static_cast<c10::DeviceIndex>(tpu_runtime_device_count());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag flag) const override {
    c10::DeviceIndex di = index >= 0 ? index : stream.device_index();
    tpu_hal_device_t* d = device(di);
    if (*event == nullptr) {
      tpu_hal_event_t* e = nullptr;
      check(tpu_hal_device_vt(d)->create_event(d, flag == c10::EventFlag::BACKEND_DEFAULT, &e));
      *event = e;
    }
    check(tpu_hal_device_vt(d)->record_event(d, static_cast<tpu_hal_event_t*>(*event)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    tpu_hal_device_t* d = device(stream.device_index());
    check(tpu_hal_device_vt(d)->wait_event(d, static_cast<tpu_hal_event_t*>(event)));
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    auto* e = static_cast<tpu_hal_event_t*>(event);
    return tpu_hal_event_vt(e)->query(e);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) tpu_object_release(&static_cast<tpu_hal_event_t*>(event)->base);
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    auto* e = static_cast<tpu_hal_event_t*>(event);
    check(tpu_hal_event_vt(e)->synchronize(e));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "elapsed_time: both events must be recorded first");
    auto* a = static_cast<tpu_hal_event_t*>(start);
    auto* b = static_cast<tpu_hal_event_t*>(end);
    double ms = 0;
    check(tpu_hal_event_vt(a)->elapsed_ms(a, b, &ms));
    return ms;
  }

  bool queryStream(const c10::Stream& stream) const override {
    tpu_hal_device_t* d = device(stream.device_index());
    return tpu_hal_device_vt(d)->query_idle(d);
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronizeDevice(stream.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    tpu_hal_device_t* d = device(index >= 0 ? index : current_device());
    check(tpu_hal_device_vt(d)->synchronize(d));
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu
