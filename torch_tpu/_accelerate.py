"""Makes Hugging Face Accelerate see the "tpu" device.

Accelerate 1.x picks its device from a fixed list of backends (mps, mlu, sdaa,
musa, npu, hpu, cuda, xpu, neuron) and knows nothing of PyTorch's generic
accelerator API, so with only torch_tpu present it falls back to the CPU:

  * `PartialState().device` is "cpu", so `Trainer` (whose TrainingArguments
    already pick "tpu:0") has its model moved back to the CPU by
    `Accelerator.prepare()`;
  * `get_max_memory()` lists no tpu memory, so `device_map="auto"` puts the
    whole model on the CPU.

Both are fixed when (and only if) Accelerate is imported: the two functions
are wrapped right after their module executes, before any other module binds
them. The wrappers change nothing when the current accelerator is not "tpu",
when the CPU was asked for (`PartialState(cpu=True)`, `use_cpu=True`), or when
the caller passes `max_memory` itself.
"""
import importlib.abc
import importlib.machinery
import sys

import torch

_TARGETS = ("accelerate.state", "accelerate.utils.modeling")


def _tpu_is_current() -> bool:
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "tpu" and torch.tpu.device_count() > 0


def _patch_state(module) -> None:
    cls = module.PartialState
    original = cls.default_device
    if getattr(original.fget, "__torch_tpu__", False):
        return

    def default_device(self) -> torch.device:
        device = original.fget(self)
        if device.type == "cpu" and _tpu_is_current():
            return torch.device("tpu")
        return device

    default_device.__torch_tpu__ = True
    default_device.__doc__ = original.__doc__
    cls.default_device = property(default_device)


def _patch_modeling(module) -> None:
    original = module.get_max_memory
    if getattr(original, "__torch_tpu__", False):
        return

    def get_max_memory(max_memory=None):
        """Accelerate's get_max_memory, with "tpu" chips under integer keys
        (accelerator indices: torch.device(0) is tpu:0). Nothing passed: each
        chip's free memory is listed. Passed: integer keys are checked against
        the tpu chip count instead of CUDA's (which warned that device 0 does
        not exist)."""
        if not _tpu_is_current():
            return original(max_memory)
        if max_memory is None:
            result = original(None)
            if not any(isinstance(k, int) for k in result):
                chips = {i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}
                result = {**chips, **result}
            return result
        for key, value in max_memory.items():  # in place, as Accelerate does; callers rely on it
            if isinstance(value, str):
                max_memory[key] = module.convert_file_size_to_int(value)
        chips = sorted(k for k in max_memory if isinstance(k, int))
        count = torch.tpu.device_count()
        for k in chips:
            if not 0 <= k < count:
                module.logger.warning(f"Device {k} is not available, available devices are {list(range(count))}")
        others = original({k: v for k, v in max_memory.items() if not isinstance(k, int)})
        return {**{k: max_memory[k] for k in chips}, **others}

    get_max_memory.__torch_tpu__ = True
    module.get_max_memory = get_max_memory


_PATCHES = {"accelerate.state": _patch_state, "accelerate.utils.modeling": _patch_modeling}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, _PATCHES[fullname])
        return spec


def install() -> None:
    """Patches Accelerate now if it is loaded, else when it gets imported."""
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if "accelerate.utils" in sys.modules:  # re-export bound before the patch
        sys.modules["accelerate.utils"].get_max_memory = sys.modules["accelerate.utils.modeling"].get_max_memory
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
