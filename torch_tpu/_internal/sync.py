"""torch_tpu._internal.sync.synchronize(tensors=None, wait=True).

Eager ops here are never deferred: each is on its chip's queue as soon as it is
called, so every tensor is already "materialized". synchronize waits (wait=True)
for the queues of the chips holding the given tpu tensors (any pytree of them;
None: the current chip) and raises an error a kernel hit there; wait=False has
nothing left to do.
"""
import torch
from torch.utils import _pytree

__all__ = ["synchronize"]


def synchronize(tensors=None, wait: bool = True) -> None:
    if not wait:
        return
    if tensors is None:
        torch.tpu.synchronize()
        return
    chips = {t.device.index or 0 for t in _pytree.tree_leaves(tensors)
             if isinstance(t, torch.Tensor) and t.device.type == "tpu"}
    for c in sorted(chips):
        torch.tpu.synchronize(c)
