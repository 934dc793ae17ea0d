"""OpLog: records the ATen (and tpu::) ops that reach the backends, after
autograd and composite decompositions, as `str(op)` in call order."""
import collections

from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))

    def counts(self):
        """{op packet name ("aten.mul"): calls}."""
        return dict(collections.Counter(op.rsplit(".", 1)[0] for op in self.ops))
