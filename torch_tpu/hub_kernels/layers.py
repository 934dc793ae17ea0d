"""The layers of torch_tpu's local kernel repository (see torch_tpu/hub_kernels).

`kernels.kernelize` replaces a module's forward by the forward of the layer
class of the same name here, bound to the module: `self` is the user's
module, with its own parameters. The classes are stateless, as `kernels`
requires. Every forward runs the fused tpu op only where it computes what
the module's own forward computes (tpu tensors of float32/bfloat16/float16,
shapes the op supports, and for RMSNorm and rotary a module whose code is
Transformers' reference code, compared as torch_tpu.optimize does); otherwise
it calls the module's class forward, so a kernelized model still runs
anywhere. All of them have autograd formulas and Meta kernels
(``has_backward``, ``can_torch_compile``).

* ``RMSNorm`` (Transformers' layer name): Llama-style and Gemma-style RMSNorm
  -> ``torch.ops.tpu.rms_norm``.
* ``rotary_pos_emb`` (Transformers' layer name for ``apply_rotary_pos_emb``):
  full rotary with Llama's formula -> ``torch.ops.tpu.rope``.
* ``SwiGLUMLP``: a module with gate_proj, up_proj, down_proj (nn.Linear) and
  an ``act_fn`` (SiLU or gelu-tanh) computing
  ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` (LlamaMLP's contract)
  -> ``torch.ops.tpu.swiglu``. Transformers does not name its MLPs; map a
  class with ``kernels.replace_kernel_forward_from_hub(LlamaMLP, "SwiGLUMLP")``.
* ``MoEExperts``: a module with Transformers' experts layout (Qwen3-MoE,
  Mixtral, ...: ``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I],
  ``act_fn``; forward(hidden_states [T, H], top_k_index [T, K],
  top_k_weights [T, K]), an index equal to E meaning "no expert") ->
  two ``torch.ops.tpu.ragged_dot`` grouped GEMMs over the tokens sorted by
  expert, with no host synchronisation (group sizes stay on the device).
  Where the device's driver cannot run ragged_dot (pjrt: no lowering yet)
  the module's own forward runs.
"""
import importlib

import torch
from torch import nn

_opt = importlib.import_module("torch_tpu.optimize")  # the module (torch_tpu.optimize is also the function)

__all__ = ["RMSNorm", "rotary_pos_emb", "SwiGLUMLP", "MoEExperts"]

_UNKNOWN = object()
_STYLE = {}  # (what, class) -> style; a class's code does not change


@torch.compiler.assume_constant_result  # dynamo: evaluated once at trace time, not traced
def _style(what, cls):
    key = (what, cls)
    style = _STYLE.get(key, _UNKNOWN)
    if style is _UNKNOWN:
        refs = _opt._refs()
        if refs is None:
            style = None
        elif what == "rms":
            style = _opt._rms_style(cls, refs)
        else:
            style = _opt._rope_style(cls, refs)
        _STYLE[key] = style
    return style


def _ops():
    _opt._ops()


_RUNS = {}  # (op, device index) -> whether the device's driver runs the op


@torch.compiler.assume_constant_result
def _driver_runs(op, index):
    key = (op, index)
    if key not in _RUNS:
        from torch_tpu import _C

        _RUNS[key] = op in _C.graph_ops(index)
    return _RUNS[key]


class RMSNorm(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states):
        _ops()
        style = _style("rms", type(self))
        if style == "llama" and hasattr(self, "variance_epsilon"):
            return _opt._rms_forward(self, hidden_states)
        if style == "gemma" and hasattr(self, "eps"):
            return _opt._rms_forward_unit_offset(self, hidden_states)
        return type(self).forward(self, hidden_states)


class rotary_pos_emb(nn.Module):  # noqa: N801  (Transformers' layer name)
    can_torch_compile = True
    has_backward = True

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        _ops()
        # full rotary only: where Llama's and Phi3's formulas agree
        if _style("rope", type(self)) is not None and _opt._rope_fusable(q, k, cos, sin, unsqueeze_dim, False):
            return _opt._rope_op(q, k, cos, sin)
        # a function layer: the function behind it, not type(self).forward (under torch.compile
        # kernels' function layer calls this forward again from its own)
        fn = _opt._plain(type(self))
        if fn is type(self):
            return type(self).forward(self, q, k, cos, sin, unsqueeze_dim)
        return fn(q, k, cos, sin, unsqueeze_dim)


class SwiGLUMLP(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        _ops()
        if x.device.type == "tpu" and all(isinstance(getattr(self, n, None), nn.Linear)
                                          for n in ("gate_proj", "up_proj", "down_proj")):
            act = getattr(self, "act_fn", None)
            act = _opt._glu_act(act) if isinstance(act, nn.Module) else None
            if act is not None:
                return _opt._glu_mlp(self, x, act)
        return type(self).forward(self, x)


class MoEExperts(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states, top_k_index, top_k_weights):
        w1 = getattr(self, "gate_up_proj", None)
        w2 = getattr(self, "down_proj", None)
        if not (isinstance(w1, torch.Tensor) and isinstance(w2, torch.Tensor) and
                hidden_states.device.type == "tpu" and hidden_states.dim() == 2 and
                top_k_index.dim() == 2 and top_k_index.shape == top_k_weights.shape and
                top_k_index.shape[0] == hidden_states.shape[0] and
                w1.dim() == 3 and w2.dim() == 3 and w1.shape[2] == hidden_states.shape[1] and
                w1.shape[1] == 2 * w2.shape[2] and w2.shape[:2] == (w1.shape[0], w1.shape[2]) and
                w1.dtype == w2.dtype == hidden_states.dtype and w1.dtype in _opt._FLOAT and
                not top_k_index.dtype.is_floating_point and
                _driver_runs("tpu::ragged_dot", hidden_states.device.index)):
            return type(self).forward(self, hidden_states, top_k_index, top_k_weights)
        num_experts = w1.shape[0]
        tokens, top_k = top_k_index.shape
        # "no expert" (index E) becomes expert 0 with weight 0: no data-dependent shapes
        valid = top_k_index < num_experts
        expert = torch.where(valid, top_k_index, torch.zeros_like(top_k_index)).reshape(-1).long()
        weight = torch.where(valid, top_k_weights, torch.zeros_like(top_k_weights)).reshape(-1)
        order = torch.argsort(expert, stable=True)
        token = order // top_k
        group_sizes = torch.zeros(num_experts, dtype=torch.long, device=expert.device)
        group_sizes = group_sizes.scatter_add(0, expert, torch.ones_like(expert))
        x = hidden_states.index_select(0, token)
        h = torch.ops.tpu.ragged_dot(x, w1.transpose(1, 2), group_sizes)  # [T*K, 2I]
        gate, up = h.chunk(2, dim=-1)
        act = getattr(self, "act_fn", None)
        kind = _opt._glu_act(act) if isinstance(act, nn.Module) else None
        if kind is not None:
            _ops()
            h = _opt._glu_op(gate.contiguous(), up.contiguous(), kind)
        else:
            h = act(gate) * up
        y = torch.ops.tpu.ragged_dot(h, w2.transpose(1, 2), group_sizes)  # [T*K, H]
        y = y * weight.index_select(0, order).unsqueeze(-1).to(y.dtype)
        out = torch.zeros_like(hidden_states)
        return out.index_add(0, token, y.to(out.dtype))
