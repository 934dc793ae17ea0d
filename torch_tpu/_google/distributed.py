"""torch.tpu.distributed: Google's launch and mesh helpers, with this project's
meaning.

- topology_aware_mesh(mesh_shape): the global ranks laid out as mesh_shape.
  Chips here have no physical interconnect topology to follow (host chips share
  one machine; tpu_dist moves data through shared memory or TCP), so the layout
  is rank order; one slice (dcn_mesh_shape, if given, must be all ones).
- set_tpu_launch_env(nnodes=, nproc_per_node=): checks its arguments and sets
  nothing: each rank finds its chip from torchrun's LOCAL_RANK and
  LOCAL_WORLD_SIZE (torch_tpu/distributed.py), with no TPU variables to derive.
- spmd_safe(fn): returns a wrapper that calls fn. Google uses it to let eager
  collectives fuse with neighbouring ops; tpu_dist never fuses them, so there
  is nothing to switch.
- window_num_stripes, window_stripe_chunk_mb: tuning of TPU peer DMA
  transfers, which do not exist here; stored (positive integers) and unused.
"""
import functools
import math
import types

import torch

__all__ = ["set_tpu_launch_env", "spmd_safe", "topology_aware_mesh", "window_num_stripes", "window_stripe_chunk_mb"]


def _world_size():
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def topology_aware_mesh(mesh_shape, *, dcn_mesh_shape=None, allow_split_physical_axes=False,
                        contiguous_submeshes=False) -> torch.Tensor:
    """An int64 tensor of the global ranks with shape mesh_shape (product: the
    world size), in rank order (see the module docstring)."""
    shape = tuple(int(s) for s in mesh_shape)
    world = _world_size()
    if any(s <= 0 for s in shape) or math.prod(shape) != world:
        raise ValueError(f"topology_aware_mesh: mesh_shape {shape} must be positive sizes whose product is the "
                         f"world size {world}")
    if dcn_mesh_shape is not None:
        dcn = tuple(int(s) for s in dcn_mesh_shape)
        if len(dcn) != len(shape) or any(s != 1 for s in dcn):
            raise ValueError(f"topology_aware_mesh: dcn_mesh_shape {dcn} must be {(1,) * len(shape)} (one slice: "
                             "there is no data-center network split here)")
    return torch.arange(world, dtype=torch.int64).reshape(shape)


def set_tpu_launch_env(*, nnodes: int | None = None, nproc_per_node: int | None = None) -> None:
    """Checks nnodes and nproc_per_node (positive integers or None); sets no
    variable (see the module docstring)."""
    for name, v in (("nnodes", nnodes), ("nproc_per_node", nproc_per_node)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"set_tpu_launch_env: {name} must be a positive integer, got {v!r}")


def spmd_safe(func):
    """Marks `func` as run identically on every rank; calls it unchanged."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    wrapper.spmd_safe = True
    return wrapper


def _positive(name):
    key = "_" + name

    def get(self):
        return self.__dict__.get(key, 1 if name == "window_num_stripes" else 0)

    def put(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"torch.tpu.distributed.{name} must be a positive integer, got {value!r}")
        self.__dict__[key] = value

    return property(get, put, doc=f"{name}: stored, unused (no TPU peer DMA here).")


class _Module(types.ModuleType):
    window_num_stripes = _positive("window_num_stripes")
    window_stripe_chunk_mb = _positive("window_stripe_chunk_mb")
