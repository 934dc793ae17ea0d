"""torch.tpu.ops: Google's TorchTPU custom-op names on this project's kernels.

- ragged_dot / ragged_dot_weight_grad: the grouped GEMM torch.ops.tpu.ragged_dot
  and its rhs gradient (runtime/kernels/moe.c; autograd in torch_tpu/moe.py).
- splash_sdpa: torch.nn.functional.scaled_dot_product_attention, i.e. the fused
  flash attention kernels tpu::sdpa_fwd/bwd; the block sizes and layouts are
  tiling hints of Google's Pallas kernel and change nothing here.
- max_pool{1,2,3}d and their backward: torch.nn.functional.max_pool*d without
  indices; the backward recomputes the maxima from the input.
- optimization_barrier: identity; under torch.compile it is the op
  tpu::optimization_barrier, which the graph compiler does not lower, so the
  graph is cut there and nothing is fused across it.
- all_gather_dim, reduce_scatter_dim, send, recv, ragged_all_to_all: on
  torch.distributed (the tpu_dist backend); see _google/collectives.py.
- align_jagged_to_multiple / strip_jagged_padding: plain tensor ops on jagged
  nested tensors.
- The SparseCore embedding ops (sparse_*) need a TPU's SparseCore: they raise
  NotImplementedError.
"""
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .collectives import all_gather_dim, ragged_all_to_all, recv, reduce_scatter_dim, send

__all__ = [
    "align_jagged_to_multiple", "all_gather_dim", "max_pool1d", "max_pool1d_backward", "max_pool2d",
    "max_pool2d_backward", "max_pool3d", "max_pool3d_backward", "optimization_barrier", "ragged_all_to_all",
    "ragged_dot", "ragged_dot_weight_grad", "recv", "reduce_scatter_dim", "send", "sparse_dense_matmul",
    "sparse_dense_matmul_activation_unstack", "sparse_dense_matmul_grad_with_adagrad",
    "sparse_dense_matmul_grad_with_adam", "sparse_dense_matmul_grad_with_sgd",
    "sparse_dense_matmul_gradient_stack", "sparse_gather", "sparse_gather_backward", "sparse_iota",
    "sparse_map_row", "splash_sdpa", "strip_jagged_padding",
]


# ---- grouped GEMM -------------------------------------------------------------


def ragged_dot(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, *,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Grouped matrix product: the next group_sizes[g] rows of lhs [M, K] times
    rhs[g] ([G, K, N]) -> [M, N]. Differentiable in lhs and rhs without `out`;
    with `out` ([M, N], lhs's dtype) the result is written there and returned."""
    result = torch.ops.tpu.ragged_dot(lhs, rhs, group_sizes)
    if out is None:
        return result
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"torch.tpu.ops.ragged_dot: out must be a tensor, got {type(out).__name__}")
    if out.shape != result.shape or out.dtype != result.dtype or out.device != result.device:
        raise ValueError(f"torch.tpu.ops.ragged_dot: out must be {tuple(result.shape)} {result.dtype} on "
                         f"{result.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    if torch.is_grad_enabled() and (lhs.requires_grad or rhs.requires_grad):
        raise RuntimeError("torch.tpu.ops.ragged_dot: out= is not differentiable; call it without out= "
                           "to get gradients")
    return out.copy_(result)


def ragged_dot_weight_grad(lhs: torch.Tensor, grad_output: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Gradient of ragged_dot in rhs: for each group g, lhs_g^T @ grad_output_g
    -> [G, K, N] (zeros for empty groups)."""
    return torch.ops.tpu.ragged_dot_rhs_grad(lhs, grad_output, group_sizes)


# ---- attention ----------------------------------------------------------------

_LAYOUTS = ("HEAD_DIM_MINOR", "SEQ_MINOR")


def splash_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                is_causal: bool = True, local_window_size: int | None = None, enable_gqa: bool = False,
                block_q: int = 512, block_kv: int = 512, block_dkv: int = 512, block_kv_compute: int = 512,
                block_q_dkv: int = 512, block_kv_dkv: int = 512, block_kv_dkv_compute: int = 512,
                block_q_dq: int | None = None, block_kv_dq: int | None = None, use_fused_bwd_kernel: bool = True,
                use_vmap_bwd: bool = True, q_layout: str = "HEAD_DIM_MINOR", k_layout: str = "HEAD_DIM_MINOR",
                v_layout: str = "HEAD_DIM_MINOR") -> torch.Tensor:
    """Attention of q [B, H, S, D] over k, v [B, Hkv, S, D] (Hkv divides H, and
    enable_gqa must say whether Hkv != H): causal by default; with
    local_window_size w, query i sees keys i-w .. i. Differentiable in q, k, v.
    The block_* sizes, use_* flags and *_layout names are accepted and checked
    (Google's Pallas kernel tiles by them); they do not change the result."""
    name = "torch.tpu.ops.splash_sdpa"
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: {what} must be a 4-D tensor [batch, heads, seq, head_dim], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    n_heads, n_kv = q.shape[1], k.shape[1]
    if enable_gqa != (n_heads != n_kv):
        raise ValueError(f"{name}: enable_gqa={enable_gqa} but q has {n_heads} heads and k {n_kv}")
    if n_kv == 0 or n_heads % n_kv:
        raise ValueError(f"{name}: the {n_kv} key/value heads must divide the {n_heads} query heads")
    for block, bname in ((block_q, "block_q"), (block_kv, "block_kv"), (block_dkv, "block_dkv"),
                         (block_kv_compute, "block_kv_compute"), (block_q_dkv, "block_q_dkv"),
                         (block_kv_dkv, "block_kv_dkv"), (block_kv_dkv_compute, "block_kv_dkv_compute"),
                         (block_q_dq, "block_q_dq"), (block_kv_dq, "block_kv_dq")):
        if block is not None and (not isinstance(block, int) or block <= 0):
            raise ValueError(f"{name}: {bname} must be a positive integer, got {block!r}")
    for layout, lname in ((q_layout, "q_layout"), (k_layout, "k_layout"), (v_layout, "v_layout")):
        if layout not in _LAYOUTS:
            raise ValueError(f"{name}: {lname} must be one of {', '.join(_LAYOUTS)}, got {layout!r}")
    if local_window_size is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if not isinstance(local_window_size, int) or local_window_size < 0:
        raise ValueError(f"{name}: local_window_size must be a non-negative integer, got {local_window_size!r}")
    sq, skv = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device).unsqueeze(1)
    j = torch.arange(skv, device=q.device).unsqueeze(0)
    mask = (j <= i) & (i - j <= local_window_size)  # a sliding causal window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)


# ---- max pooling without indices -------------------------------------------------

_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _pool_args(nd, input, kernel_size, stride, padding, dilation):
    name = f"torch.tpu.ops.max_pool{nd}d"
    if not isinstance(input, torch.Tensor) or input.dim() not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: input must have {nd + 1} or {nd + 2} dimensions, got "
                         f"{tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__}")
    out = []
    for seq, what in ((kernel_size, "kernel_size"), (stride, "stride"), (padding, "padding"), (dilation, "dilation")):
        if not isinstance(seq, Sequence) or len(seq) != nd:
            raise ValueError(f"{name}: {what} must be a sequence of {nd} integers (one per spatial dimension), "
                             f"got {seq!r}")
        out.append(tuple(int(x) for x in seq))
    return out


def _max_pool(nd, input, kernel_size, stride, padding, dilation, ceil_mode):
    ks, st, pd, dl = _pool_args(nd, input, kernel_size, stride, padding, dilation)
    return _POOL[nd](input, ks, st, pd, dl, ceil_mode=bool(ceil_mode))


def _max_pool_backward(nd, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    ks, st, pd, dl = _pool_args(nd, input, kernel_size, stride, padding, dilation)
    with torch.enable_grad():
        x = input.detach().requires_grad_(True)
        y = _POOL[nd](x, ks, st, pd, dl, ceil_mode=bool(ceil_mode))
        if grad_output.shape != y.shape:
            raise ValueError(f"torch.tpu.ops.max_pool{nd}d_backward: grad_output must be {tuple(y.shape)} "
                             f"(max_pool{nd}d's output), got {tuple(grad_output.shape)}")
        (g,) = torch.autograd.grad(y, x, grad_output)
    return g


def max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """1-D max pooling of (N, C, L) or (C, L), values only; every argument is
    required and each sequence has one entry. Not differentiable: see
    max_pool1d_backward."""
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of max_pool1d in its input (the maxima found again from input)."""
    return _max_pool_backward(1, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """2-D max pooling of (N, C, H, W) or (C, H, W), values only."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of max_pool2d in its input."""
    return _max_pool_backward(2, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """3-D max pooling of (N, C, D, H, W) or (C, D, H, W), values only."""
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of max_pool3d in its input."""
    return _max_pool_backward(3, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


# ---- optimization barrier ---------------------------------------------------------

torch.library.define("tpu::optimization_barrier", "(Tensor[] inputs) -> Tensor[]")


@torch.library.impl("tpu::optimization_barrier", "CompositeExplicitAutograd")
def _barrier_impl(inputs):
    return [t.clone() for t in inputs]


@torch.library.register_fake("tpu::optimization_barrier")
def _barrier_fake(inputs):
    return [torch.empty_like(t) for t in inputs]


def _barrier_backward(ctx, grads):
    return list(grads)


torch.library.register_autograd("tpu::optimization_barrier", _barrier_backward)


def optimization_barrier(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Identity on a list of tensors that torch.compile(backend="tpu") does not
    fuse across: every computation producing `inputs` happens before it, every
    computation on the returned tensors after it. Use the returned tensors.
    Eagerly (each op runs on its own anyway) it returns the inputs themselves."""
    inputs = list(inputs)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("torch.tpu.ops.optimization_barrier: inputs must be a sequence of tensors, got "
                        + ", ".join(type(t).__name__ for t in inputs))
    if torch.compiler.is_compiling():
        return list(torch.ops.tpu.optimization_barrier(inputs))
    return inputs


# ---- jagged tensors -----------------------------------------------------------------


def align_jagged_to_multiple(nt: torch.Tensor, multiple: int = 128, padding_value=0.0) -> torch.Tensor:
    """Pads the values buffer of a torch.jagged nested tensor with trailing rows
    of `padding_value` to a multiple of `multiple` rows; the offsets (and so the
    sequences) are unchanged."""
    if not isinstance(multiple, int) or multiple <= 0:
        raise ValueError(f"torch.tpu.ops.align_jagged_to_multiple: multiple must be a positive integer, got {multiple!r}")
    from torch.nested._internal.nested_tensor import nested_view_from_values_offsets

    values = nt.values()
    extra = -values.shape[0] % multiple
    if extra == 0:
        return nt
    pad = values.new_full((extra, *values.shape[1:]), padding_value)
    return nested_view_from_values_offsets(torch.cat([values, pad]), nt.offsets())


def strip_jagged_padding(nt: torch.Tensor, valid_tokens: int | None = None) -> torch.Tensor:
    """Drops the values rows past the last offset (align_jagged_to_multiple's
    padding) as a view; `valid_tokens` (the last offset) saves reading it
    from the device."""
    from torch.nested._internal.nested_tensor import nested_view_from_values_offsets

    offsets = nt.offsets()
    if valid_tokens is None:
        valid_tokens = int(offsets[-1]) if offsets.numel() else 0
    if nt.values().shape[0] == valid_tokens:
        return nt
    return nested_view_from_values_offsets(nt.values()[:valid_tokens], offsets)


# ---- SparseCore (TPU hardware) ------------------------------------------------------


def _sparsecore(name):
    def op(*args, **kwargs):
        raise NotImplementedError(
            f"torch.tpu.ops.{name} needs TPU hardware: it runs on a TPU's SparseCore (the embedding-lookup "
            "units), which neither driver of this project (host, pjrt) can drive")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"SparseCore op {name}: raises NotImplementedError here (needs TPU hardware)."
    return op


sparse_dense_matmul = _sparsecore("sparse_dense_matmul")
sparse_dense_matmul_grad_with_sgd = _sparsecore("sparse_dense_matmul_grad_with_sgd")
sparse_dense_matmul_grad_with_adagrad = _sparsecore("sparse_dense_matmul_grad_with_adagrad")
sparse_dense_matmul_grad_with_adam = _sparsecore("sparse_dense_matmul_grad_with_adam")
sparse_dense_matmul_activation_unstack = _sparsecore("sparse_dense_matmul_activation_unstack")
sparse_dense_matmul_gradient_stack = _sparsecore("sparse_dense_matmul_gradient_stack")
sparse_gather = _sparsecore("sparse_gather")
sparse_gather_backward = _sparsecore("sparse_gather_backward")
sparse_iota = _sparsecore("sparse_iota")
sparse_map_row = _sparsecore("sparse_map_row")
