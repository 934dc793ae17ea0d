"""``torch.backends.tpu``: the backend module, like torch.backends.cuda/mps.

Libraries detect TorchTPU by its presence: the Hugging Face ``kernels``
library 0.17 selected its "tpu" kernel builds when ``hasattr(torch.backends,
"tpu")``; 0.18 asks ``torch.accelerator.current_accelerator()`` (also "tpu"
here) instead.
"""
import sys
import types

import torch

_DOC = __doc__


def install():
    """Makes ``torch.backends.tpu`` (and ``import torch.backends.tpu``) exist."""
    if isinstance(getattr(torch.backends, "tpu", None), types.ModuleType):
        return
    from . import _C

    mod = types.ModuleType("torch.backends.tpu", _DOC)

    def is_built() -> bool:
        """True: this torch process has the tpu backend (torch_tpu) loaded."""
        return True

    def is_available() -> bool:
        """Whether at least one tpu device can be used (as torch.tpu.is_available())."""
        return _C.device_count() > 0

    mod.is_built = is_built
    mod.is_available = is_available
    mod.__all__ = ["is_built", "is_available"]
    sys.modules["torch.backends.tpu"] = mod
    torch.backends.tpu = mod
