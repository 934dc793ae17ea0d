"""Execution and precision controls under Google's names: torch.tpu.EagerMode,
set_eager_mode, eager_mode, Precision, precision, allow_excess_precision.

What they mean here (see the README, "Google's TorchTPU API"):

- Eager ops are never deferred: each op is queued on its chip's in-order queue
  when it is called (DEFER_NEVER, the default). DEFER_NEVER_AND_LAUNCH_BLOCKING
  also waits for every op on tpu to finish before returning (like
  CUDA_LAUNCH_BLOCKING=1), so an error a kernel hits is raised by the op that
  caused it; it goes through a Python dispatch mode, so it is slow. DEFER_AND_FUSE
  is accepted and runs like DEFER_NEVER (eager ops are not fused here; fusion is
  torch.compile(backend="tpu")'s job); results are the same.
- Precision: float32 matrix products (mm, addmm, bmm, baddbmm and the ops
  built on them, as issued eagerly) round their operands to bfloat16 and
  accumulate in float32 where torch.set_float32_matmul_precision("medium") or a
  precision(Precision.DEFAULT) block allows it, as a TPU's default precision
  does; "high"/"highest" and Precision.HIGH/HIGHEST compute in float32 (TF32
  does not exist here and bf16x3 is slower than float32 on these kernels, so
  float32 is the faster way to meet HIGH's contract). A precision() block wins
  over the global setting on its thread. bfloat16 products are used only where
  they pay (both sides of the product at least 64, a CPU with AVX512_BF16);
  other products stay float32, which each setting permits. Graphs compiled by
  torch.compile(backend="tpu") compute in float32 whatever the setting.
- allow_excess_precision: stored, default False. bf16/f16 chains here, fused or
  not, round every intermediate to its dtype, which is what False gives; True
  permits extra precision without requiring it.
"""
import contextlib
import enum
import threading

import torch

__all__ = ["EagerMode", "set_eager_mode", "get_eager_mode", "put_eager_mode", "Precision", "precision",
           "current_precision", "get_allow_excess_precision", "put_allow_excess_precision"]


class EagerMode(enum.Enum):
    """How eager ops on tpu are dispatched (see the module docstring)."""

    DEFER_AND_FUSE = "defer_and_fuse"
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"


class _LaunchBlocking(torch.utils._python_dispatch.TorchDispatchMode):
    """Runs each op, then waits for the tpu chips its results live on."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        seen = set()
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "tpu" and t.device.index not in seen:
                seen.add(t.device.index)
                torch.tpu.synchronize(t.device.index)
        return out


_STATE = threading.local()


def _stack():
    if not hasattr(_STATE, "modes"):
        _STATE.modes = []  # [(EagerMode, dispatch mode or None)]
    return _STATE.modes


def _check_mode(mode):
    if not isinstance(mode, EagerMode):
        raise TypeError(f"torch.tpu eager mode: expected a torch.tpu.EagerMode, got {mode!r}")
    return mode


def _enter(mode):
    dm = _LaunchBlocking() if mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING else None
    if dm is not None:
        dm.__enter__()
    _stack().append((mode, dm))


def _leave():
    _, dm = _stack().pop()
    if dm is not None:
        dm.__exit__(None, None, None)


def get_eager_mode() -> EagerMode:
    s = _stack()
    return s[-1][0] if s else _STATE.__dict__.get("base", EagerMode.DEFER_NEVER)


def put_eager_mode(mode) -> None:
    """torch.tpu.eager_mode = mode: the mode of this thread from now on
    (inside a set_eager_mode block, it replaces that block's mode until the
    block ends)."""
    mode = _check_mode(mode)
    s = _stack()
    if s:
        _leave()
        _enter(mode)
    else:
        if getattr(_STATE, "base_dm", None) is not None:
            _STATE.base_dm.__exit__(None, None, None)
            _STATE.base_dm = None
        _STATE.base = mode
        if mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING:
            _STATE.base_dm = _LaunchBlocking()
            _STATE.base_dm.__enter__()


@contextlib.contextmanager
def set_eager_mode(mode):
    """Runs the block with eager mode `mode` (a torch.tpu.EagerMode)."""
    if torch.compiler.is_compiling():
        raise RuntimeError("torch.tpu.set_eager_mode cannot be used inside torch.compile: "
                           "a compiled graph does not dispatch eager ops")
    _enter(_check_mode(mode))
    try:
        yield
    finally:
        _leave()


class Precision(enum.Enum):
    """StableHLO's dot_general precision names (see the module docstring)."""

    DEFAULT = "DEFAULT"
    HIGH = "HIGH"
    HIGHEST = "HIGHEST"


_PRECISION = threading.local()


def current_precision():
    """The Precision of the innermost precision() block of this thread, or
    None outside any."""
    s = getattr(_PRECISION, "stack", None)
    return s[-1] if s else None


@contextlib.contextmanager
def precision(mode):
    """Runs the block with matrix-product precision `mode` (a
    torch.tpu.Precision) on this thread: DEFAULT lets float32 products use
    bfloat16 operands, HIGH and HIGHEST keep them float32 (module docstring)."""
    if not isinstance(mode, Precision):
        raise ValueError(f"torch.tpu.precision: expected torch.tpu.Precision.DEFAULT, HIGH or HIGHEST, got {mode!r}")
    from torch_tpu import _bridge

    if not hasattr(_PRECISION, "stack"):
        _PRECISION.stack = []
    before = _bridge.bf16_products()
    _PRECISION.stack.append(mode)
    _bridge.set_bf16_products(1 if mode is Precision.DEFAULT else 0)
    try:
        yield
    finally:
        _PRECISION.stack.pop()
        _bridge.set_bf16_products(before)


_EXCESS = {"value": False}


def get_allow_excess_precision() -> bool:
    return _EXCESS["value"]


def put_allow_excess_precision(value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"torch.tpu.allow_excess_precision must be a bool, got {value!r}")
    _EXCESS["value"] = value
