"""torch.tpu: the device module, modelled on torch.cuda."""
import contextlib
from typing import Any, Optional, Union

import torch

from . import _C, _bridge
from ._graphs import TPUGraph, graph, is_current_stream_capturing  # noqa: F401

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return _C.current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"invalid device {device!r}")


def is_available() -> bool:
    return _C.device_count() > 0


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    _C.init()


def init() -> None:
    _C.init()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def set_device(device: _DeviceLike) -> None:
    idx = _index(device)
    if idx >= 0:
        _C.set_device(idx)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        self.prev = _C.current_device()
        if self.idx >= 0:
            _C.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _C.set_device(self.prev)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for the device's queue; raises any error an async kernel hit."""
    _C.synchronize(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    return _C.device_properties(_index(device))["name"]


class _DeviceProperties:
    def __init__(self, props: dict):
        self.name = props["name"]
        self.total_memory = props["total_memory"]
        self.multi_processor_count = props["compute_units"]
        self.driver = props["driver"]
        self.platform = props["platform"]  # the PJRT platform ("tpu", "cpu"), "host" on the host driver
        self.index = props["index"]
        self.type = "tpu"

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, driver='{self.driver}', "
                f"platform='{self.platform}')")


def get_device_properties(device: _DeviceLike = None) -> _DeviceProperties:
    return _DeviceProperties(_C.device_properties(_index(device)))


def get_device_capability(device: _DeviceLike = None):
    return (0, 0)


def mem_get_info(device: _DeviceLike = None):
    return _C.mem_get_info(_index(device))


def memory_stats(device: _DeviceLike = None) -> dict:
    """Allocator statistics in torch.cuda.memory_stats()' key format."""
    s = _C.memory_stats(_index(device))
    out = {
        "allocated_bytes.all.current": s["allocated_bytes"],
        "allocated_bytes.all.peak": s["peak_allocated_bytes"],
        "reserved_bytes.all.current": s["reserved_bytes"],
        "reserved_bytes.all.peak": s["peak_reserved_bytes"],
        "active_bytes.all.current": s["allocated_bytes"],
        "active_bytes.all.peak": s["peak_allocated_bytes"],
        "requested_bytes.all.current": s["requested_bytes"],
        "allocation.all.allocated": s["num_allocs"],
        "allocation.all.freed": s["num_frees"],
        "allocation.all.current": s["num_allocs"] - s["num_frees"],
        "segment.all.current": s["num_segments"],
        "segment.all.allocated": s["num_device_allocs"],
        "segment.all.freed": s["num_device_frees"],
        "num_alloc_cache_hits": s["num_cache_hits"],
        "num_device_alloc": s["num_device_allocs"],
        "num_device_free": s["num_device_frees"],
        "num_ooms": s["num_ooms"],
        "budget_bytes": s["budget_bytes"],
    }
    return dict(sorted(out.items()))


def memory_allocated(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["allocated_bytes"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["peak_allocated_bytes"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["reserved_bytes"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["peak_reserved_bytes"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    _C.empty_cache()


# ---- random ---------------------------------------------------------------


def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _bridge.default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "tpu") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "tpu") -> None:
    _generator(device).set_state(new_state.clone())


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


def _default_generators():
    return tuple(_generator(i) for i in range(device_count()))


class _DefaultGenerators:
    def __getitem__(self, i):
        return _generator(i)

    def __len__(self):
        return device_count()


default_generators = _DefaultGenerators()

# ---- streams and events ------------------------------------------------------
# Each chip has one in-order queue; every Stream of a device is that queue.


def Stream(device: _DeviceLike = None, priority: int = 0) -> torch.Stream:
    """A stream of a tpu device (a torch.Stream)."""
    return torch.Stream(device=torch.device("tpu", _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """An event of the current tpu device (a torch.Event)."""
    return torch.Event(device=torch.device("tpu", current_device()), enable_timing=enable_timing,
                       blocking=blocking, interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return Stream(device)


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return Stream(device)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        set_device(stream.device_index)


@contextlib.contextmanager
def stream(stream: Optional[torch.Stream]):
    """Runs the block with `stream` current (all streams of a chip share its queue)."""
    if stream is None:
        yield
        return
    with device(stream.device_index):
        yield


# ---- autocast --------------------------------------------------------------


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("tpu")


def _get_autocast_dtype():
    return torch.get_autocast_dtype("tpu")


def queue_stats(device: _DeviceLike = None) -> dict:
    """Counters of a device's queue since start: 'works' run, and for list ops
    (torch._foreach_*, e.g. a foreach optimizer step) 'list_groups' (runs of
    consecutive list ops executed piece by piece, so each chunk of the lists
    stays in cache across the ops), 'list_works' (list ops inside such groups)
    and 'list_conflicts' (list ops run alone because their lists alias).
    Drains nothing: counts only finished work."""
    return _C.queue_stats(_index(device))


def compile_stats() -> dict:
    """Statistics of torch.compile(backend="tpu") in this process: graphs compiled
    ('misses'), runs of an already compiled graph ('hits'), 'compile_seconds' spent
    lowering, live compiled graphs ('graphs_held'), and what the lowering to the C
    graph compiler produced (segments, nodes in C, eager nodes and their ops, fused
    groups, arena bytes, in-place input updates)."""
    from ._dynamo_backend import compile_stats as _stats

    return _stats()


def graph_profile() -> dict:
    """{step: seconds} on the device queue, summed over live compiled graphs built
    with TORCH_TPU_GRAPH_PROFILE=1 (fused groups are labelled by their ops)."""
    from ._graph import graph_profile as _profile

    return _profile()
