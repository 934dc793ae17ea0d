"""Dynamo's device interface for "tpu" (torch._dynamo.device_interface).

PyTorch 2.15 registers an interface of its own for the device type "tpu",
written for Google's TorchTPU: it declares float64, float16 and complex
unsupported and reports the device available only when JAX sees a TPU. This
module replaces it with one describing this device: every real dtype is
supported (complex has no kernels), devices, streams and properties come from
torch.tpu. It is not a GPU-class device for Inductor (`is_gpu()` False):
torch.compile sends tpu graphs to the "tpu" backend, never to Inductor's code
generators (see _compile_setup.py).

Imported when torch._dynamo is (importing it here would double the time of
`import torch`); register() must run after PyTorch's own registrations.
"""
from typing import Any

import torch
from torch._dynamo import device_interface as _di

from torch_tpu import tpu as _tpu


class TpuInterface(_di.DeviceInterface):
    device = _tpu.device  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            _tpu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return _tpu.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return _tpu.get_device_properties(device)

    current_device = staticmethod(_tpu.current_device)
    set_device = staticmethod(_tpu.set_device)
    device_count = staticmethod(_tpu.device_count)
    is_available = staticmethod(_tpu.is_available)
    synchronize = staticmethod(_tpu.synchronize)
    stream = staticmethod(_tpu.stream)
    current_stream = staticmethod(_tpu.current_stream)
    set_stream = staticmethod(_tpu.set_stream)
    memory_allocated = staticmethod(_tpu.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return TpuInterface.exchange_device(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        prev = _tpu.current_device()
        if device >= 0 and device != prev:
            _tpu.set_device(device)
        return prev

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0  # one in-order queue per chip

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @classmethod
    def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
        return not dtype.is_complex


def register() -> None:
    """Makes TpuInterface dynamo's interface for "tpu". PyTorch registers its
    in-tree interfaces lazily, on the first lookup, and would then overwrite
    this one: the lookup below runs that first."""
    _di.get_registered_device_interfaces()
    _di.register_interface_for_device("tpu", TpuInterface)
