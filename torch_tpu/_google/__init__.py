"""Google's TorchTPU API (PyPI torch-tpu 0.2.0) on this project: the names of its
`torch.tpu` module and submodules, with this project's semantics, so code
written for it runs here. The README's "Google's TorchTPU API" table lists
every name, what it does here, and which ones raise (they need TPU hardware
or JAX).

install(module) turns the torch.tpu device module (torch_tpu/tpu.py) into a
package: it gets a __path__, the submodules ops, optimizers, profiler,
compiler, distributed and pallas (registered in sys.modules as torch.tpu.ops,
..., so `import torch.tpu.ops` and `from torch.tpu.ops import ragged_dot`
work), the properties eager_mode and allow_excess_precision, and the
functions and classes below. It also imports torch_tpu._internal (Google's
private paths that Diffusers calls).
"""
import contextlib
import importlib
import sys
import types

import torch

from . import modes

__all__ = ["install", "device_of", "SUBMODULES"]

SUBMODULES = ("compiler", "distributed", "ops", "optimizers", "pallas", "profiler")


@contextlib.contextmanager
def device_of(obj):
    """Makes the tpu chip of `obj` (a tensor or storage) current in the block;
    for anything not on tpu it changes nothing."""
    dev = getattr(obj, "device", None)
    if isinstance(dev, torch.device) and dev.type == "tpu":
        with torch.tpu.device(dev.index or 0):
            yield
    else:
        yield


def _module_class(base):
    """The device module's class with Google's two module properties."""
    return type("_TpuDeviceModule", (base,), {
        "eager_mode": property(lambda self: modes.get_eager_mode(), lambda self, v: modes.put_eager_mode(v),
                               doc="The eager mode of this thread (a torch.tpu.EagerMode)."),
        "allow_excess_precision": property(
            lambda self: modes.get_allow_excess_precision(),
            lambda self, v: modes.put_allow_excess_precision(v),
            doc="Whether bf16/f16 intermediates may keep extra precision (stored; see _google/modes.py)."),
    })


def install(module: types.ModuleType) -> None:
    if type(module) is types.ModuleType:
        module.__class__ = _module_class(types.ModuleType)
    module.__path__ = []  # a package: torch.tpu.<submodule> imports resolve through sys.modules
    for name in SUBMODULES:
        sub = importlib.import_module(f"{__name__}.{name}")
        sys.modules[f"torch.tpu.{name}"] = sub
        setattr(module, name, sub)
    distributed = sys.modules["torch.tpu.distributed"]
    distributed.__class__ = distributed._Module  # its two properties
    for name in ("EagerMode", "set_eager_mode", "Precision", "precision"):
        setattr(module, name, getattr(modes, name))
    module.device_of = device_of
    module.topology_aware_mesh = distributed.topology_aware_mesh
    from .. import _internal  # noqa: F401
