"""Makes Hugging Face Accelerate see the "tpu" device, alone and under torchrun.

Accelerate 1.x picks its device, its distributed type and its c10d backend
from fixed lists (mps, mlu, sdaa, musa, npu, hpu, cuda, xpu, neuron) and knows
nothing of PyTorch's generic accelerator API. With only torch_tpu present:

  * `PartialState().device` is "cpu", so `Trainer` (whose TrainingArguments
    already pick "tpu:0") has its model moved back to the CPU by
    `Accelerator.prepare()`;
  * under torchrun / `accelerate launch` every process gets
    `DistributedType.NO`, no process group and no DDP: each trains alone on
    its shard of the data, silently;
  * `accelerate launch --num_processes N` (no config file, no `--multi_gpu`)
    finds no GPU and starts one process instead of N;
  * `get_max_memory()` lists no tpu memory, so `device_map="auto"` puts the
    whole model on the CPU.

What changes (only when the current accelerator is "tpu", and never when the
CPU was asked for: `PartialState(cpu=True)`, `use_cpu=True`, `--cpu`):

  * `PartialState.default_device`: "tpu" where Accelerate says "cpu".
  * `PartialState._prepare_backend`, where Accelerate answered NO although
    torchrun set LOCAL_RANK: backend "tpu_dist" (or the one passed, if it
    handles tpu tensors; else ValueError) and `DistributedType.MULTI_GPU`,
    with `tpu:LOCAL_RANK` as the process's device and current chip
    (ValueError if the process has no such chip). Accelerate's __init__ then
    creates the process group and reads ranks and world size from
    torch.distributed, as for CUDA.
    Why MULTI_GPU: it is Accelerate's generic DDP mode. What it selects is
    plain torch.distributed on `state.device`: DDP with
    device_ids=[local_process_index], all_gather / all_reduce / broadcast in
    gather / reduce / broadcast, barrier(device_ids=...) in
    wait_for_everyone, the sampler seed broadcast, "on_device" optimizer
    state in load_state. Its one CUDA call, `torch.cuda.set_device` in
    `set_device()`, is not reached: the device is set here, and set_device
    keeps a device already set (its other CUDA-only path is Transformer
    Engine's fp8). MULTI_XPU and MULTI_NPU select the same paths but make
    set_device call torch.xpu / torch.npu, and MULTI_XPU also loads optimizer
    state on the CPU and excludes Megatron-LM. The name shows in
    `repr(state)` ("MULTI_GPU  Backend: tpu_dist").
  * `accelerate.commands.launch._validate_launch_command`: N > 1 processes,
    no config file and no launcher flag take the torchrun launcher (as
    `--multi_gpu` does), as Accelerate does by itself when it counts more than
    one GPU. This needs torch_tpu loaded in the `accelerate` process, which
    autoload does (not with TORCH_DEVICE_BACKEND_AUTOLOAD=0).
  * `get_max_memory`: each chip under its integer index (accelerator indices:
    torch.device(0) is tpu:0).

Why an import hook: Accelerate has no extension point for a device (no
registry, no entry point; the lists above are if/elif chains), and torch_tpu
is imported before it (`import torch` autoloads torch_tpu, and Accelerate
imports torch). So the patches are applied by a meta-path finder right after
each of three Accelerate modules executes and before any other module binds
their names; when Accelerate is already loaded, `install()` patches it at
once. The finder answers for those three module names only and then defers to
the normal path finder. Alternatives considered: ACCELERATE_TORCH_DEVICE=tpu
(an environment variable Accelerate reads) would also override
`PartialState(cpu=True)` and leak into child processes, and gives no process
group; importing Accelerate eagerly from torch_tpu costs every user the import
and is circular (Accelerate imports torch, which autoloads torch_tpu).
"""
import importlib.abc
import importlib.machinery
import os
import sys

import torch

TPU_BACKEND = "tpu_dist"


def _tpu_is_current() -> bool:
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "tpu" and torch.tpu.device_count() > 0


def _local_chip(local_rank: int) -> torch.device:
    """tpu:LOCAL_RANK, made current. Accelerate wraps models in DDP with
    device_ids=[LOCAL_RANK], so that chip must exist in this process."""
    count = torch.tpu.device_count()
    if not 0 <= local_rank < count:
        raise ValueError(
            f"Accelerate under torchrun: process LOCAL_RANK={local_rank} uses chip tpu:{local_rank} (Accelerate "
            f"passes device_ids=[LOCAL_RANK] to DDP), but this process has {count} tpu chip(s) "
            f"(TORCH_TPU_HOST_DEVICES={os.environ.get('TORCH_TPU_HOST_DEVICES', '<unset>')}). Leave "
            "TORCH_TPU_HOST_DEVICES unset under torchrun (each process then gets LOCAL_WORLD_SIZE chips) or set it "
            "to at least LOCAL_WORLD_SIZE")
    torch.tpu.set_device(local_rank)
    return torch.device("tpu", local_rank)


def _check_backend(backend: str) -> str:
    """A backend the caller passed must handle tpu tensors (DDP's gradients are on tpu)."""
    import torch.distributed as dist

    if ":" in backend:  # "cpu:gloo,tpu:tpu_dist"
        ok = any(part.split(":")[0].strip() == "tpu" for part in backend.split(","))
    else:
        ok = "tpu" in dist.Backend.backend_capability.get(backend.lower(), [])
    if not ok:
        raise ValueError(f"Accelerate on tpu: backend {backend!r} has no collectives for tpu tensors; use "
                         f"{TPU_BACKEND!r} (or 'cpu:gloo,tpu:{TPU_BACKEND}'), or leave it unset")
    return backend


def _patch_state(module) -> None:
    cls = module.PartialState
    if getattr(cls, "__torch_tpu__", False):
        return
    original_device = cls.default_device
    original_prepare = cls._prepare_backend

    def default_device(self) -> torch.device:
        device = original_device.fget(self)
        if device.type == "cpu" and _tpu_is_current():
            return torch.device("tpu")
        return device

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        got, distributed_type = original_prepare(self, cpu, sagemaker_dp, backend)
        if (distributed_type != module.DistributedType.NO or cpu or sagemaker_dp
                or int(os.environ.get("LOCAL_RANK", -1)) == -1
                or not _tpu_is_current()):
            return got, distributed_type
        backend = _check_backend(backend) if backend else TPU_BACKEND
        if getattr(self, "device", None) is None:  # else ACCELERATE_TORCH_DEVICE chose it
            self.device = _local_chip(int(os.environ["LOCAL_RANK"]))
        return backend, module.DistributedType.MULTI_GPU

    default_device.__doc__ = original_device.__doc__
    _prepare_backend.__doc__ = original_prepare.__doc__
    cls.default_device = property(default_device)
    cls._prepare_backend = _prepare_backend
    cls.__torch_tpu__ = True


def _patch_launch(module) -> None:
    original = module._validate_launch_command
    if getattr(original, "__torch_tpu__", False):
        return

    def _validate_launch_command(args):
        args, defaults, mp_from_config = original(args)
        chosen = any(getattr(args, a, False) for a in ("cpu", "multi_gpu", "tpu", "use_deepspeed", "use_fsdp",
                                                        "use_megatron_lm"))
        if defaults is None and not chosen and (args.num_processes or 1) > 1 and _tpu_is_current():
            module.logger.warning(f"tpu: {args.num_processes} processes, using the torchrun launcher "
                                  "(as --multi_gpu does); pass --num_processes=1 for one process")
            args.multi_gpu = True
        return args, defaults, mp_from_config

    _validate_launch_command.__torch_tpu__ = True
    module._validate_launch_command = _validate_launch_command


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


_PATCHES = {"accelerate.state": _patch_state, "accelerate.utils.modeling": _patch_modeling,
            "accelerate.commands.launch": _patch_launch}


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
