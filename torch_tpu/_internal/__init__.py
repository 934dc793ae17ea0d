"""Google's TorchTPU private paths that other libraries call (Diffusers'
TorchTPU helpers use torch_tpu._internal.sync.synchronize and
torch_tpu._internal.compile.TpuBackend), with this project's meaning."""
from . import compile, sync  # noqa: F401
