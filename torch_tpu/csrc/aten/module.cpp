// module.cpp - torch_tpu._bridge: importing it registers the kernels, the
// allocator, the guard and the hooks; it exposes the few entry points that
// need PyTorch's C++ types (generators).
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "bridge.h"

namespace torch_tpu {
void register_hooks();
std::vector<std::string> register_native_kernels();
void register_graph(py::module& m);
}

PYBIND11_MODULE(_bridge, m) {
  torch_tpu::register_hooks();
  torch_tpu::register_native_kernels();
  torch_tpu::register_graph(m);
  m.def("unknown_native_ops", [] { return torch_tpu::register_native_kernels(); },
        "C kernel table entries whose schema this torch does not have (should be empty)");
  m.def("set_bf16_products", &torch_tpu::set_bf16_products,
        "float32 matrix products of this thread's ops: 1 bfloat16 operands, 0 float32, -1 as "
        "torch.get_float32_matmul_precision() says");
  m.def("bf16_products", &torch_tpu::bf16_products);
  m.def("default_generator", [](int index) {
    const at::Generator& g = torch_tpu::default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
}
