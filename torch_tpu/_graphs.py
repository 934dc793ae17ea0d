"""torch.tpu.TPUGraph and torch.tpu.graph: capture a sequence of device work
once, replay it with one call (the tpu counterpart of torch.cuda.CUDAGraph /
torch.cuda.graph, same usage):

    g = torch.tpu.TPUGraph()
    static_x = torch.zeros(..., device="tpu")
    model(static_x)                      # warm up eagerly first
    with torch.tpu.graph(g):
        static_y = model(static_x)       # recorded, not run
    static_x.copy_(x); g.replay()        # runs the recorded work; static_y holds the result

While capturing, the ops queue their work into the graph instead of running
it (the host driver, runtime/drivers/host: capture_begin in tpu/hal.h). A
replay is one queued work, so the Python, dispatch and per-op queueing cost
of the captured code is paid once, at capture. As with CUDA graphs:

* replays read and write the same memory as the capture: inputs are the
  tensors the captured code read (copy new values into them), outputs the
  tensors it returned (their contents change at each replay);
* anything that waits for the device or reads a result on the host during
  capture (``.cpu()``, ``.item()``, printing a tensor, data-dependent shapes,
  an op that falls back to the CPU, ``torch.tpu.synchronize()``) raises
  RuntimeError and spoils the capture; so do ops that draw random numbers
  (a replay would repeat the draws), and optimizers with capturable=False
  (Adam, AdamW, ...: their step count stays on the host), as for CUDA;
* memory the captured code allocated, and memory freed while capturing, is
  held for the graph until ``reset()`` (or the graph is garbage collected);
  tensors created before the capture and used by it must stay alive.

Only the host driver captures; on pjrt ``capture_begin`` raises
NotImplementedError.
"""
import torch

from . import _C

__all__ = ["TPUGraph", "graph", "is_current_stream_capturing"]

_capturing = set()  # device indices with a capture recording (this process)


def _device_index(device) -> int:
    if device is None:
        return torch.tpu.current_device()
    d = torch.device(device) if not isinstance(device, int) else torch.device("tpu", device)
    if d.type != "tpu":
        raise ValueError(f"torch.tpu.TPUGraph: expected a tpu device, got {d}")
    return torch.tpu.current_device() if d.index is None else d.index


def is_current_stream_capturing() -> bool:
    """True while a graph is being captured on the current tpu device."""
    return torch.tpu.current_device() in _capturing


def _optimizer_capture_check(optimizer, args, kwargs):
    """Optimizer step pre-hook: PyTorch's own check that an optimizer is
    `capturable` while a graph is being captured only looks at CUDA. Adam,
    AdamW, ... with capturable=False keep their step count on the host and bake
    the bias corrections into the captured work, so replays would silently
    repeat the captured step's constants."""
    if not _capturing:
        return
    for group in optimizer.param_groups:
        if group.get("capturable", True):
            continue
        if any(p.device.type == "tpu" and p.device.index in _capturing for p in group["params"]):
            raise RuntimeError(
                f"torch.tpu.graph: {type(optimizer).__name__}.step() is being captured with capturable=False: its "
                "step count and bias corrections stay on the host, so replays would reuse the captured ones; "
                f"create it with capturable=True")


_hook = None


class TPUGraph:
    """A captured sequence of tpu work (see the module docstring)."""

    def __init__(self):
        self._capture = None
        self._device = None

    def capture_begin(self, pool=None, capture_error_mode="global", device=None):
        if pool is not None:
            raise NotImplementedError("torch.tpu.TPUGraph: memory pools shared between graphs are not supported; "
                                      "each graph holds its own memory")
        if capture_error_mode != "global":
            raise NotImplementedError(f"torch.tpu.TPUGraph: capture_error_mode={capture_error_mode!r}: only "
                                      "'global' (every thread's work on the device is captured)")
        if self._capture is not None:
            raise RuntimeError("torch.tpu.TPUGraph: this graph already holds a capture; reset() it first")
        index = _device_index(device)
        global _hook
        if _hook is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            _hook = register_optimizer_step_pre_hook(_optimizer_capture_check)
        _C.capture_begin(index)
        _capturing.add(index)
        self._device = index

    def capture_end(self):
        if self._device is None:
            raise RuntimeError("torch.tpu.TPUGraph.capture_end: capture_begin was not called")
        index, self._device = self._device, None
        _capturing.discard(index)
        self._capture = _C.capture_end(index)
        self._device = index

    def _abort(self):
        """Ends a capture spoiled by an exception; its own error is dropped."""
        if self._device is not None and self._capture is None:
            _capturing.discard(self._device)
            try:
                _C.capture_end(self._device)
            except RuntimeError:
                pass
            self._device = None

    def replay(self):
        if self._capture is None:
            raise RuntimeError("torch.tpu.TPUGraph.replay: nothing captured (use torch.tpu.graph(g) first)")
        _C.capture_replay(self._capture)

    def num_works(self) -> int:
        """Works recorded (kernels, copies, compiled-graph runs)."""
        return 0 if self._capture is None else _C.capture_works(self._capture)

    def reset(self):
        """Frees the capture and the memory it holds (waits for running replays)."""
        if self._capture is not None:
            c, self._capture = self._capture, None
            _C.capture_release(c)
        self._device = None

    def pool(self):
        raise NotImplementedError("torch.tpu.TPUGraph.pool: memory pools shared between graphs are not supported")

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass


class graph:
    """Context manager capturing the tpu work of its body into `tpu_graph`
    (torch.cuda.graph's signature; `pool` and `stream` must be None: one
    queue per chip, one memory pool per graph)."""

    def __init__(self, tpu_graph: TPUGraph, pool=None, stream=None, capture_error_mode: str = "global"):
        if stream is not None:
            raise NotImplementedError("torch.tpu.graph: stream= is not supported (each chip has one queue)")
        self.graph, self.pool, self.mode = tpu_graph, pool, capture_error_mode

    def __enter__(self):
        torch.tpu.synchronize()  # earlier work's errors surface here, not in the capture
        self.graph.capture_begin(pool=self.pool, capture_error_mode=self.mode)
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.graph._abort()
            return False
        self.graph.capture_end()
        return False
