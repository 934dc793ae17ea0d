// decompose.cpp - ops the device cannot run as one call (no C kernel on the
// host driver; no lowering on a driver without host kernels): PyTorch's own
// decomposition table (torch._decomp), run eagerly on tpu tensors, so each
// smaller op reaches the device (its kernel or lowering, or again this path)
// and the CPU fallback stays the exception. The table is Python; this file converts the boxed stack to Python
// arguments by the schema and the results back.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "bridge.h"

namespace torch_tpu {
namespace {

// Ops being decomposed on this thread: a decomposition that calls its own op
// again (directly or through others) takes the CPU fallback instead.
thread_local std::vector<const c10::FunctionSchema*> t_active;

bool is_type(const c10::TypePtr& t, c10::TypeKind kind) {
  if (t->kind() == kind) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == kind;
}

// An argument as Python sees it: ScalarType, Layout and MemoryFormat travel
// in the stack as integers.
py::object to_python(const c10::Argument& a, const c10::IValue& v) {
  if (v.isInt()) {
    const c10::TypePtr& t = a.real_type();
    if (is_type(t, c10::TypeKind::ScalarTypeType)) {
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
    }
    if (is_type(t, c10::TypeKind::LayoutType)) {
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
    }
    if (is_type(t, c10::TypeKind::MemoryFormatType)) {
      return py::reinterpret_borrow<py::object>(
          torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt())));
    }
  }
  return torch::jit::toPyObject(v);
}

}  // namespace

bool run_decomposition(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  for (const c10::FunctionSchema* s : t_active) {
    if (s == &schema) return false;
  }
  const size_t nargs = schema.arguments().size();
  py::gil_scoped_acquire gil;
  // Leaked on purpose: it must outlive the interpreter's shutdown.
  static py::object* hook = new py::object(py::module_::import("torch_tpu._decomp").attr("run"));
  py::tuple args(0);
  py::dict kwargs;
  {
    std::vector<py::object> pos;
    auto in = torch::jit::last(*stack, nargs);
    for (size_t i = 0; i < nargs; ++i) {
      const c10::Argument& a = schema.arguments()[i];
      py::object v = to_python(a, in[i]);
      if (a.kwarg_only()) {
        kwargs[py::str(a.name())] = v;
      } else {
        pos.push_back(std::move(v));
      }
    }
    args = py::tuple(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) args[i] = pos[i];
  }
  t_active.push_back(&schema);
  struct Pop {
    ~Pop() { t_active.pop_back(); }
  } pop;
  py::object out = (*hook)(schema.name(), schema.overload_name(), args, kwargs);
  if (out.ptr() == Py_NotImplemented) return false;
  const auto& rets = schema.returns();
  torch::jit::drop(*stack, nargs);
  if (rets.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, rets[0].real_type()));
  } else if (rets.size() > 1) {
    py::tuple t = out.cast<py::tuple>();
    TORCH_CHECK(t.size() == rets.size(), schema.name(), ": its decomposition returned ", t.size(),
                " values, the schema has ", rets.size());
    for (size_t i = 0; i < rets.size(); ++i) stack->push_back(torch::jit::toIValue(t[i], rets[i].real_type()));
  }
  return true;
}

}  // namespace torch_tpu
