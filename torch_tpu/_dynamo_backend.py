"""torch.compile(backend="tpu").

Dynamo captures the graph; aot_autograd functionalises it and decomposes it
to core ATen (forward and backward graphs); torch_tpu._graph lowers each ATen
graph to the C graph compiler (runtime/graph): pointwise chains fused into
tiles, one planned arena per graph, one device submission per graph run.
Nodes C cannot run execute eagerly between C segments (graph_stats()).

Options (torch.compile(..., options={...}), defaults from environment
variables): _compile_options.py. TORCH_TPU_GRAPH=eager or options={"graph":
"eager"} runs the ATen graphs op by op instead (for comparison and as a
fallback).

Registered through the `torch_dynamo_backends` entry point, so importing
torch_tpu does not import torch._dynamo.
"""
import functools
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from torch_tpu import _graph
from torch_tpu._compile_options import MODES, CompileOptions, compile_options
from torch_tpu._rotary import fuse_rotary

_STATS = {"graphs": 0, "rope_fusions": 0, "eager_graphs": 0}


def _compile_graph(gm: torch.fx.GraphModule, example_inputs, opts: CompileOptions):
    _STATS["graphs"] += 1
    if opts.graph == "eager":
        _STATS["eager_graphs"] += 1
        return make_boxed_func(gm.forward)
    before = _graph.graph_stats()["codegen_unavailable"]
    runner = _graph.lower(gm, example_inputs, opts)
    if before == 0 and _graph.graph_stats()["codegen_unavailable"]:
        warnings.warn("torch.compile(backend='tpu'): no working C compiler, fused groups run on the tile "
                      "interpreter (slower); TORCH_TPU_CODEGEN=1 shows the compiler's error, TORCH_TPU_CC "
                      "names another compiler", RuntimeWarning, stacklevel=2)
    return runner


def _device_runs(example_inputs, kernel):
    """Whether graphs on the inputs' tpu device may contain `kernel` (the
    fused kernels are host C code: a driver that lowers graphs itself, such
    as pjrt, has none)."""
    index = next((t.device.index or 0 for t in example_inputs
                  if isinstance(t, torch.Tensor) and t.device.type == "tpu"), 0)
    return kernel in _graph._native_ops(index)


@functools.cache
def _decompositions():
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None, name=None):
    """The dynamo backend: rewrites done on dynamo's graph (Transformers'
    rotary embedding -> torch.ops.tpu.rope, torch_tpu/_rotary.py), then
    aot_autograd with the C graph compiler for the forward and backward.

    `options` (torch.compile(..., options={...})): see _compile_options.py and
    the README; unknown keys or values raise ValueError. `mode` may be one of
    Inductor's mode names, which change nothing here; `name` is ignored."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"torch.compile(backend='tpu'): unknown mode {mode!r}; valid modes: {', '.join(MODES)} "
                         "(none changes what this backend does)")
    opts = compile_options(options)
    if opts.graph == "c" and opts.fuse_rotary and _device_runs(example_inputs, "tpu::rope"):
        _STATS["rope_fusions"] += fuse_rotary(gm)
    compiler = functools.partial(_compile_graph, opts=opts)
    # keep_inference_input_mutations: input updates (a static KV cache) stay in
    # the graph as copy_ nodes, which the lowering turns into in-place updates.
    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, decompositions=_decompositions(),
                        keep_inference_input_mutations=True)(gm, example_inputs)


def compile_stats():
    """Statistics of the tpu backend: ATen graphs compiled ('graphs', also
    'compiles'/'misses'), runs of an already compiled graph ('hits'),
    'compile_seconds', live compiled graphs ('graphs_held'), and what the
    lowering did (C segments, C nodes, eager nodes and their ops, fused
    groups, 'gemm_epilogues': fused groups headed by a matrix multiply,
    'conv_epilogues' / 'norm_epilogues': fused groups headed by a convolution
    (tiles of output rows) / a group norm (tiles of whole groups of channels),
    'gemv_batches'/'gemv_batched': steps running several one-row products of
    the same row as one parallel loop and the products in them,
    'rope_fusions': q/k rotary embeddings made one tpu.rope call,
    'gather_bmm_rewrites': bmm of a gathered weight made tpu.gather_bmm, arena
    bytes, 'eager_graphs': graphs run op by op (TORCH_TPU_GRAPH=eager),
    'driver_segments': C segments the device's driver runs whole as one
    compiled program per run (pjrt: one StableHLO module; nodes it cannot
    lower run eagerly between segments, listed in 'eager_ops')."""
    out = _graph.graph_stats()
    out["graphs"] = _STATS["graphs"]
    out["rope_fusions"] = _STATS["rope_fusions"]
    out["eager_graphs"] = _STATS["eager_graphs"]
    return out
