"""torch.compile(backend="tpu").

Dynamo captures the graph; aot_autograd functionalises it and decomposes it
to core ATen (forward and backward graphs); torch_tpu._graph lowers each ATen
graph to the C graph compiler (runtime/graph): pointwise chains fused into
tiles, one planned arena per graph, one device submission per graph run.
Nodes C cannot run execute eagerly between C segments (graph_stats()).

TORCH_TPU_GRAPH=eager runs the ATen graphs op by op instead (for comparison
and as a fallback).

Registered through the `torch_dynamo_backends` entry point, so importing
torch_tpu does not import torch._dynamo.
"""
import os
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

import torch_tpu
from torch_tpu import _graph
from torch_tpu._rotary import fuse_rotary

_STATS = {"graphs": 0, "rope_fusions": 0, "eager_graphs": 0}


def _host_addressable():
    return torch_tpu._C.device_properties(0)["host_addressable"]


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    _STATS["graphs"] += 1
    mode = os.environ.get("TORCH_TPU_GRAPH", "c")
    if mode not in ("c", "eager"):
        raise ValueError(f"TORCH_TPU_GRAPH must be 'c' or 'eager', got {mode!r}")
    if mode == "eager" or not _host_addressable():
        # The C graph compiler runs on host-addressable memory only; other
        # drivers run the ATen graph op by op (no whole-graph lowering yet).
        _STATS["eager_graphs"] += 1
        return make_boxed_func(gm.forward)
    codegen = os.environ.get("TORCH_TPU_CODEGEN", "auto")
    if codegen not in ("auto", "0", "1"):
        raise ValueError(f"TORCH_TPU_CODEGEN must be 'auto', '0' or '1', got {codegen!r}")
    before = _graph.graph_stats()["codegen_unavailable"]
    runner = _graph.lower(gm, example_inputs)
    if before == 0 and _graph.graph_stats()["codegen_unavailable"]:
        warnings.warn("torch.compile(backend='tpu'): no working C compiler, fused groups run on the tile "
                      "interpreter (slower); TORCH_TPU_CODEGEN=1 shows the compiler's error, TORCH_TPU_CC "
                      "names another compiler", RuntimeWarning, stacklevel=2)
    return runner


def _decompositions():
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


# keep_inference_input_mutations: input updates (a static KV cache) stay in
# the graph as copy_ nodes, which the lowering turns into in-place updates.
_aot_backend = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                            decompositions=_decompositions(), keep_inference_input_mutations=True)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs):
    """The dynamo backend: rewrites done on dynamo's graph (Transformers'
    rotary embedding -> torch.ops.tpu.rope, torch_tpu/_rotary.py), then
    aot_autograd with the C graph compiler for the forward and backward."""
    if os.environ.get("TORCH_TPU_GRAPH", "c") == "c":
        _STATS["rope_fusions"] += fuse_rotary(gm)
    return _aot_backend(gm, example_inputs)


def compile_stats():
    """Statistics of the tpu backend: ATen graphs compiled ('graphs', also
    'compiles'/'misses'), runs of an already compiled graph ('hits'),
    'compile_seconds', live compiled graphs ('graphs_held'), and what the
    lowering did (C segments, C nodes, eager nodes and their ops, fused
    groups, 'gemm_epilogues': fused groups headed by a matrix multiply,
    'gemv_batches'/'gemv_batched': steps running several one-row products of
    the same row as one parallel loop and the products in them,
    'rope_fusions': q/k rotary embeddings made one tpu.rope call, arena
    bytes, 'eager_graphs': graphs run op by op, by TORCH_TPU_GRAPH=eager or
    because the device's memory is not host-addressable)."""
    out = _graph.graph_stats()
    out["graphs"] = _STATS["graphs"]
    out["rope_fusions"] = _STATS["rope_fusions"]
    out["eager_graphs"] = _STATS["eager_graphs"]
    return out
