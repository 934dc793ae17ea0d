"""``torch.tpu.memory._snapshot()``: the caching allocator's state in the dict
shape of ``torch.cuda.memory._snapshot()``, so tools written for CUDA
snapshots (``torch.cuda._memory_viz``, https://pytorch.org/memory_viz after
``_dump_snapshot``) read it.

The host driver's allocator reserves one block per segment (no splitting):
each segment holds exactly one block, "active_allocated" while a tensor
owns it, "inactive" while it waits in the cache. The pjrt driver caches
nothing: one "active_allocated" block per live allocation, its size the
bytes asked (what memory_allocated() counts). Segments are "small" up to
1 MiB (the host driver's small-block class, also CUDA's). There is no
allocation history: ``device_traces`` are empty lists and ``frames`` empty
(CUDA fills them only after ``_record_memory_history``). A driver that
cannot list its memory raises NotImplementedError.
"""
import pickle

from . import _C

__all__ = ["_snapshot", "_dump_snapshot"]

_SMALL_MAX = 1 << 20


def _segments(device):
    out = []
    for address, size, requested, allocated in _C.memory_blocks(device):
        state = "active_allocated" if allocated else "inactive"
        block = {"address": address, "size": size, "requested_size": requested, "state": state, "frames": []}
        out.append({
            "device": device,
            "address": address,
            "total_size": size,
            "allocated_size": size if allocated else 0,
            "active_size": size if allocated else 0,
            "requested_size": requested,
            "stream": 0,
            "segment_type": "small" if size <= _SMALL_MAX else "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "frames": [],
            "blocks": [block],
        })
    return out


def _snapshot(device=None):
    """{'segments': [...], 'device_traces': [[]...], 'allocator_settings': {...}}
    for every tpu device (or only `device`, an index or torch.device)."""
    count = _C.device_count()
    if device is None:
        devices = range(count)
    else:
        if isinstance(device, int):
            index = device
        else:
            import torch

            dev = torch.device(device)
            if dev.type != "tpu":
                raise ValueError(f"torch.tpu.memory._snapshot: not a tpu device: {device!r}")
            index = _C.current_device() if dev.index is None else dev.index
        if not 0 <= index < count:
            raise ValueError(f"torch.tpu.memory._snapshot: no device tpu:{index} ({count} devices)")
        devices = [index]
    segments = []
    for d in devices:
        segments += _segments(d)
    return {"segments": segments, "device_traces": [[] for _ in range(count)],
            "allocator_settings": {"driver": _C.selected_driver(), "expandable_segments": False,
                                   "one_block_per_segment": True}}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickles _snapshot() to `filename`, as torch.cuda.memory._dump_snapshot does."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
