"""Mixture-of-Experts on tpu.

``torch.ops.tpu.ragged_dot(lhs, rhs, group_sizes)`` is the grouped GEMM of MoE
layers (C kernel in runtime/kernels/moe.c, bridge in
torch_tpu/csrc/aten/moe.cpp): lhs [M, K] with rows sorted by group, rhs
[G, K, N], group_sizes [G] (int32/int64, summing to M) -> [M, N]. This module
registers its autograd formula.

Transformers' MoE layers need no hook: its default experts implementation,
``"grouped_mm"``, calls ``torch.nn.functional.grouped_mm`` on tpu (Transformers
routes tpu there for every dtype), i.e. ``aten::_grouped_mm``, which has a
native tpu kernel built on the same C core (no Python loop over experts, no
host synchronisation on the offsets).

``generate()`` decodes with ``"batched_mm"`` instead on every device but the
cpu: ``gate_up_proj[expert_ids]`` then ``torch.bmm``. On tpu that gather is
lazy (torch_tpu/csrc/aten/gather.cpp): it takes no memory, and the bmm runs
``torch.ops.tpu.gather_bmm(a, b, ids, gathered)``, which reads each expert's
weights in place; any other use of the gathered tensor materialises it.
"""
import torch

__all__ = ["ragged_dot"]


def ragged_dot(lhs, rhs, group_sizes):
    """Grouped matmul: the rows of ``lhs`` belonging to group g (the next
    ``group_sizes[g]`` rows) times ``rhs[g]``. Differentiable in lhs and rhs."""
    return torch.ops.tpu.ragged_dot(lhs, rhs, group_sizes)


def _setup_context(ctx, inputs, output):
    lhs, rhs, group_sizes = inputs
    ctx.save_for_backward(lhs, rhs, group_sizes)


def _backward(ctx, grad):
    lhs, rhs, group_sizes = ctx.saved_tensors
    d_lhs = d_rhs = None
    if ctx.needs_input_grad[0]:
        d_lhs = torch.ops.tpu.ragged_dot(grad, rhs.transpose(1, 2), group_sizes)
    if ctx.needs_input_grad[1]:
        d_rhs = torch.ops.tpu.ragged_dot_rhs_grad(lhs, grad, group_sizes)
    return d_lhs, d_rhs, None


torch.library.register_autograd("tpu::ragged_dot", _backward, setup_context=_setup_context)
