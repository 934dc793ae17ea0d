"""What importing torch_tpu changes in torch.compile, without importing
torch._dynamo (that would double the time of `import torch`):

- `torch.compile(model)` (default backend "inductor", with or without a
  mode or Inductor options) compiles graphs whose inputs are on tpu with
  backend "tpu", as Google's TorchTPU does. PyTorch 2.15 would send them to
  Inductor's Pallas code generator, which needs JAX and a TPU. Graphs on any
  other device still go to Inductor. `torch.compile` hands its default backend
  to dynamo as a `torch._TorchCompileInductorWrapper` (the backend registry is
  not consulted for "inductor"), so that class's `__call__` is what chooses.
- Dynamo's device interface for "tpu" becomes this project's
  (_device_interface.py), registered as soon as torch._dynamo is imported.
"""
import functools
import importlib.abc
import importlib.util
import sys

import torch


def on_tpu(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether a dynamo graph computes on tpu: an example input on tpu, or,
    for graphs without tensor inputs, a tpu value inside."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
    for n in gm.graph.nodes:
        v = n.meta.get("example_value")
        if isinstance(v, torch.Tensor) and v.device.type == "tpu":
            return True
    return False


def _route_inductor_wrapper() -> None:
    cls = torch._TorchCompileInductorWrapper
    inductor_call = cls.__call__
    if getattr(inductor_call, "_torch_tpu_routed", False):
        return

    @functools.wraps(inductor_call)
    def __call__(self, model_, inputs_, **kwargs):
        if on_tpu(model_, inputs_):
            # Inductor's mode and options have no meaning for the tpu backend
            from torch_tpu._dynamo_backend import tpu_backend

            return tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, **kwargs)

    __call__._torch_tpu_routed = True
    cls.__call__ = __call__


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `then()` once, right after module `name` has executed (a one-shot
    post-import hook: it leaves sys.meta_path when it first sees the name)."""

    def __init__(self, name, then):
        self.name = name
        self.then = then
        self.loader = None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.then()


def _register_device_interface() -> None:
    from torch_tpu import _device_interface

    _device_interface.register()


def install() -> None:
    _route_inductor_wrapper()
    if "torch._dynamo" in sys.modules:
        _register_device_interface()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", _register_device_interface))
