"""torch.compile(backend="tpu") — first stage.

Dynamo captures the graph; aot_autograd functionalises it and decomposes it
to core ATen (forward and backward graphs); the resulting ATen graph then
runs op by op on the tpu device's native kernels. This gives correct
compiled execution (what Transformers' static-cache path and Diffusers'
`compile(backend="tpu")` need) but none of the graph compiler's gains yet:
fusion, memory planning and one-submission-per-graph are future work in
runtime/graph/ (see README).

Registered through the `torch_dynamo_backends` entry point, so importing
torch_tpu does not import torch._dynamo.
"""
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

_STATS = {"graphs": 0}


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    _STATS["graphs"] += 1
    return make_boxed_func(gm.forward)


def _decompositions():
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


tpu_backend = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                           decompositions=_decompositions())


def compile_stats():
    """{'graphs': number of ATen graphs compiled by the tpu backend}."""
    return dict(_STATS)
