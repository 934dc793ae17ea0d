"""torch_tpu: a native PyTorch device named "tpu", backed by a C11 runtime.

`import torch` alone loads it (entry point group `torch.backends`; set
TORCH_DEVICE_BACKEND_AUTOLOAD=0 to disable). Then::

    x = torch.randn(4, 4, device="tpu")
    torch.tpu.synchronize()

See README.md for the environment variables and the status of each feature.
"""


def _autoload():
    """Entry point of the `torch.backends` group; importing this package does
    the registration. Defined before `import torch` because torch calls it
    while this module may still be initialising (`import torch_tpu` first
    imports torch, which autoloads this entry point)."""


import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from . import _metadata  # noqa: E402

_metadata.install()  # importlib.metadata.version("torch_tpu") finds the torch-tpu-c distribution

from . import distributed  # noqa: E402  (c10d backend "tpu_dist"; the torchrun chip default below)

distributed.local_chips_default()  # before the runtime reads TORCH_TPU_HOST_DEVICES

from . import _C  # noqa: E402  (the C runtime binding)
from . import _bridge  # registers allocator, guard, hooks and ATen kernels

__all__ = ["fallback_report", "reset_fallback_report", "native_ops", "optimize"]

if torch._C._get_privateuse1_backend_name() != "tpu":
    torch.utils.rename_privateuse1_backend("tpu")

from . import tpu as _tpu_module  # noqa: E402

if not hasattr(torch, "tpu"):
    torch._register_device_module("tpu", _tpu_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)



def _init_runtime():
    """Starts the runtime after checking the environment variables. A bad value
    raises ValueError whose message starts with the variable and its value.
    When `import torch` autoloads this package, torch re-raises any error as
    "Failed to load the backend extension" with ours only as its cause, so the
    message is also written first, as the first line the user sees."""
    from . import _compile_options, _pjrt

    try:
        _compile_options.check_environment()
        derived = _pjrt.configure()  # the PJRT plugin for TORCH_TPU_DRIVER=pjrt (see _pjrt.py)
        _C.init()
        for name in derived:  # read at the start only; not inherited by child processes
            os.environ.pop(name, None)
    except (ValueError, RuntimeError) as e:
        if getattr(torch.__spec__, "_initializing", False):  # inside torch's autoload
            print(f"torch_tpu: {e}", file=sys.stderr)
        raise


_init_runtime()
distributed.select_local_chip(_C.set_device, _C.device_count())  # torchrun: process LOCAL_RANK on tpu:LOCAL_RANK
distributed.register()

from . import _compile_setup  # noqa: E402

_compile_setup.install()  # torch.compile(model) on tpu: backend "tpu"; dynamo's device interface

from . import _backends  # noqa: E402

_backends.install()  # torch.backends.tpu (how the `kernels` library detects the device)

from . import _device_trace, _memory  # noqa: E402

_device_trace.install()  # torch.profiler with ProfilerActivity.PrivateUse1: the device queues in the trace
if not hasattr(_tpu_module, "memory"):
    _tpu_module.memory = _memory  # torch.tpu.memory._snapshot(), as torch.cuda.memory._snapshot()

from . import _accelerate  # noqa: E402

_accelerate.install()  # Accelerate's device pick and get_max_memory see "tpu" (see _accelerate.py)

from . import moe  # noqa: E402  (autograd of torch.ops.tpu.ragged_dot)
from . import _google  # noqa: E402

_google.install(_tpu_module)  # Google's TorchTPU names: torch.tpu.ops, .optimizers, ..., torch_tpu._internal
from . import quant  # noqa: E402  (torch.ops.tpu.q_linear: GGUF-block linear layers)
from . import _attention  # noqa: E402
from . import _linalg_meta  # noqa: E402  (a meta function for aten::geqrf)

_attention.install()  # aten::_scaled_dot_product_flash/cudnn_attention(_backward) on the fused kernels
from . import _meta  # noqa: E402

_meta.install()  # Meta kernels for the ATen ops PyTorch has none for (_logcumsumexp)
from . import _decomp  # noqa: E402

_decomp.install()  # aten::native_group_norm with the CPU kernel's rounding in bfloat16/float16


def fallback_report():
    """{ATen op name: number of times it ran on the CPU fallback}."""
    return _C.fallback_report()


def reset_fallback_report():
    """Clears the counters behind fallback_report()."""
    _C.fallback_reset()


def native_ops():
    """Names of the ATen ops that have a native C kernel."""
    return list(_C.native_ops())


# Opt-in fused kernels for Transformers models: torch_tpu.optimize(model).
# (Binds the function over the submodule of the same name.)
from .optimize import optimize  # noqa: E402
