"""torch_tpu.optimize(model): opt-in fused kernels for Transformers models.

    model = AutoModelForCausalLM.from_pretrained(path, device_map="tpu")
    torch_tpu.optimize(model)        # returns the model

Swaps, on this model instance only (never on its class, never in the
modeling module, never by editing user code), three chains of small ATen ops
for one custom op each (runtime/kernels/fused.c):

* RMSNorm modules -> ``torch.ops.tpu.rms_norm``: modules whose ``forward``
  is, byte code for byte code, Transformers' LlamaRMSNorm.forward (weight *
  normalised.to(input dtype); Qwen2/3, Mistral, SmolLM3, Phi3, Granite,
  OLMo2... share it) or GemmaRMSNorm.forward ((1 + weight) in float32;
  Gemma, Gemma 2/3). Other norms are left alone.
* gated MLPs -> ``torch.ops.tpu.swiglu``: modules with gate_proj, up_proj,
  down_proj and LlamaMLP's forward, whose act_fn is SiLU or gelu with the
  tanh approximation.
* rotary embeddings -> ``torch.ops.tpu.rope``: attention modules whose
  forward calls a module-level ``apply_rotary_pos_emb`` that is Llama's (full
  rotary) or Phi3's (partial rotary). The module gets its own copy of its
  class's forward whose globals are a snapshot of the modeling module's
  globals with that one name replaced (names rebound in the modeling module
  after optimize() are not seen by optimised modules). With the ``kernels``
  package (>= 0.18.2) installed, Transformers makes apply_rotary_pos_emb a
  `kernels` function layer and gives each attention module a private copy of
  it (``use_kernelized_func``); then that copy's forward is swapped instead.

Each swapped forward runs the fused op only for tpu tensors of float32,
bfloat16 or float16 and shapes the op supports, and otherwise calls the
original code, so an optimised model still runs on the CPU or any other
device. Gradients flow through the fused ops (autograd kernels in
torch_tpu/csrc/aten/fused.cpp), except into rope's cos/sin.

With the ``kernels`` package installed, Transformers' own hooks
(``use_kernel_forward_from_hub``) reach the same forwards through
``kernelize(model, device="tpu")`` and the local kernel repository in
torch_tpu/hub_kernels (see its docstring).
"""
import functools
import types

import torch

__all__ = ["optimize", "restore"]

_FLOAT = (torch.float32, torch.bfloat16, torch.float16)
_rms_op = None
_rope_op = None
_glu_op = None


def _ops():
    global _rms_op, _rope_op, _glu_op
    if _rms_op is None:
        _rms_op = torch.ops.tpu.rms_norm.default
        _rope_op = torch.ops.tpu.rope.default
        _glu_op = torch.ops.tpu.swiglu.default


# ---- recognising Transformers' code ---------------------------------------------------


def _code_key(code):
    """What a function does, without where it was written."""
    consts = tuple(_code_key(c) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts if not (isinstance(c, str) and "\n" in c))  # docstrings
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_argcount,
            code.co_kwonlyargcount, code.co_flags & 0xFF)


def _plain(fn):
    """The function behind a `kernels` function layer: with the ``kernels``
    package installed, Transformers' ``@use_kernel_forward_from_hub`` turns a
    module-level function (apply_rotary_pos_emb) into an instance of an
    nn.Module class whose forward calls it (its closure's ``func``)."""
    cls = fn if isinstance(fn, type) else type(fn)
    if isinstance(fn, torch.nn.Module) or (isinstance(fn, type) and issubclass(fn, torch.nn.Module)):
        fwd = getattr(cls, "forward", None)
        code = getattr(fwd, "__code__", None)
        if hasattr(cls, "kernel_layer_name") and code is not None and "func" in code.co_freevars:
            inner = fwd.__closure__[code.co_freevars.index("func")].cell_contents
            if isinstance(inner, types.FunctionType):
                return inner
    return fn


def _same(fn, ref):
    fn = getattr(_plain(fn), "__func__", _plain(fn))
    ref = getattr(_plain(ref), "__func__", _plain(ref))
    if not isinstance(fn, types.FunctionType) or not isinstance(ref, types.FunctionType):
        return False
    if hasattr(fn, "__wrapped__"):
        return False
    return _code_key(fn.__code__) == _code_key(ref.__code__)


@functools.lru_cache(maxsize=1)
def _refs():
    """Reference implementations from the installed Transformers (None if absent)."""
    try:
        from transformers.models.gemma import modeling_gemma as gm
        from transformers.models.llama import modeling_llama as lm
        from transformers.models.phi3 import modeling_phi3 as pm
    except Exception:  # pragma: no cover - transformers missing or reorganised
        return None
    return {
        "rms_llama": lm.LlamaRMSNorm.forward,
        "rms_gemma": gm.GemmaRMSNorm.forward,
        "rms_gemma_norm": gm.GemmaRMSNorm._norm,
        "mlp": lm.LlamaMLP.forward,
        "rope_full": lm.apply_rotary_pos_emb,
        "rope_partial": pm.apply_rotary_pos_emb,
        "rotate_half": lm.rotate_half,
    }


def _own_forward(m):
    """True if `m` runs its class's forward: none set on the instance, or the class's own
    forward bound to it (what kernels.kernelize leaves on a layer it has no kernel for)."""
    f = vars(m).get("forward")
    return f is None or (getattr(f, "__func__", None) is type(m).forward and getattr(f, "__self__", None) is m)


def _glu_act(act):
    """'silu' / 'gelu_tanh' if `act` is one of those activations, else None."""
    if not _own_forward(act):  # replaced on the instance: unknown behaviour
        return None
    if type(act) is torch.nn.SiLU:
        return "silu"
    if type(act) is torch.nn.GELU and act.approximate == "tanh":
        return "gelu_tanh"
    try:
        from transformers import activations as ta
    except Exception:  # pragma: no cover
        return None
    if type(act) is getattr(ta, "SiLUActivation", None) and type(act).forward is ta.SiLUActivation.forward:
        return "silu"
    if type(act) is getattr(ta, "GELUTanh", None):
        f = getattr(act, "act", None)
        if isinstance(f, functools.partial) and f.func is torch.nn.functional.gelu and not f.args and \
                f.keywords == {"approximate": "tanh"}:
            return "gelu_tanh"
    return None


# ---- the replacement forwards -------------------------------------------------------------


def _on_tpu(*ts):
    return all(t.device.type == "tpu" and t.dtype in _FLOAT for t in ts)


def _rms_forward(self, hidden_states):
    w = self.weight
    if _on_tpu(hidden_states, w) and hidden_states.dim() >= 1 and w.dim() == 1 and \
            w.shape[0] == hidden_states.shape[-1]:
        return _rms_op(hidden_states, w, float(self.variance_epsilon), False)
    return type(self).forward(self, hidden_states)


def _rms_forward_unit_offset(self, x):
    w = self.weight
    if _on_tpu(x, w) and x.dim() >= 1 and w.dim() == 1 and w.shape[0] == x.shape[-1]:
        return _rms_op(x, w, float(self.eps), True)
    return type(self).forward(self, x)


def _glu_mlp(self, x, act):
    """down_proj(act(gate_proj(x)) * up_proj(x)), the product fused on tpu."""
    gate = self.gate_proj(x)
    up = self.up_proj(x)
    if act is not None and _on_tpu(gate, up) and gate.dtype == up.dtype and gate.shape == up.shape:
        return self.down_proj(_glu_op(gate, up, act))
    return self.down_proj(self.act_fn(gate) * up)


def _mlp_forward(self, x):
    if x.device.type == "tpu":
        return _glu_mlp(self, x, self._tpu_glu_act)
    return type(self).forward(self, x)


def _rope_fusable(q, k, cos, sin, unsqueeze_dim, partial):
    """Whether tpu.rope computes apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
    (partial: the formula rotates the first cos.shape[-1] dims and passes the rest)."""
    return (unsqueeze_dim == 1 and q.dim() == 4 and k.dim() == 4 and cos.dim() == 3 and
            _on_tpu(q, k, cos, sin) and q.dtype == k.dtype == cos.dtype == sin.dtype and
            cos.shape == sin.shape and k.shape[0] == q.shape[0] and k.shape[2:] == q.shape[2:] and
            cos.shape[0] in (1, q.shape[0]) and cos.shape[1] in (1, q.shape[2]) and
            cos.shape[2] % 2 == 0 and (cos.shape[2] == q.shape[3] or (partial and cos.shape[2] < q.shape[3])) and
            not (torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)))


def _rope_style(fn, refs):
    """'full' / 'partial' when fn is Transformers' Llama / Phi3 apply_rotary_pos_emb
    (with Llama's rotate_half), else None."""
    fn = _plain(fn)
    if _same(fn, refs["rope_full"]):
        style = "full"
    elif _same(fn, refs["rope_partial"]):
        style = "partial"
    else:
        return None
    rh = getattr(fn, "__globals__", {}).get("rotate_half")
    return style if rh is not None and _same(rh, refs["rotate_half"]) else None


def _rms_style(cls, refs):
    """'llama' / 'gemma' when cls's forward is Transformers' LlamaRMSNorm (weight *
    x.to(dtype), eps in `variance_epsilon`) / GemmaRMSNorm ((1 + weight), eps in `eps`)."""
    fwd = getattr(cls, "forward", None)
    if _same(fwd, refs["rms_llama"]):
        return "llama"
    if _same(fwd, refs["rms_gemma"]) and _same(getattr(cls, "_norm", None), refs["rms_gemma_norm"]):
        return "gemma"
    return None


def _make_rope(orig, partial):
    """apply_rotary_pos_emb with the fused op for tpu tensors."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if _rope_fusable(q, k, cos, sin, unsqueeze_dim, partial):
            return _rope_op(q, k, cos, sin)
        return orig(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.__wrapped__ = orig
    apply_rotary_pos_emb._tpu_fused = True
    return apply_rotary_pos_emb


def _rope_layer(module, refs):
    """(layer, forward) for the `kernels` function layer of apply_rotary_pos_emb that
    Transformers attaches to `module` (``use_kernelized_func``, with the ``kernels`` package
    installed: the module's forward then routes the modeling module's apply_rotary_pos_emb
    calls to its own private layer): a forward for that layer with the fused op, or None."""
    funcs = vars(module).get("_kernel_funcs")
    if not isinstance(funcs, dict):
        return None
    for layer in funcs.values():
        if not isinstance(layer, torch.nn.Module) or not _own_forward(layer):
            continue
        orig = _plain(type(layer))
        if orig is type(layer):
            continue
        style = _rope_style(orig, refs)
        if style is None:
            continue
        fused = _make_rope(orig, style == "partial")

        def forward(self, q, k, cos, sin, unsqueeze_dim=1):
            return fused(q, k, cos, sin, unsqueeze_dim)

        forward._tpu_fused = True
        return layer, forward
    return None


def _rope_forward(module, refs):
    """A copy of the module's forward whose apply_rotary_pos_emb is fused, or None."""
    fwd = type(module).forward
    if not isinstance(fwd, types.FunctionType) or hasattr(fwd, "__wrapped__"):
        return None
    if "apply_rotary_pos_emb" not in fwd.__code__.co_names:
        return None
    g = fwd.__globals__
    orig = g.get("apply_rotary_pos_emb")
    if orig is None or getattr(orig, "_tpu_fused", False):
        return None
    style = _rope_style(orig, refs)
    if style is None:
        return None
    partial = style == "partial"
    new_globals = dict(g)
    new_globals["apply_rotary_pos_emb"] = _make_rope(orig, partial)
    f = types.FunctionType(fwd.__code__, new_globals, fwd.__name__, fwd.__defaults__, fwd.__closure__)
    f.__kwdefaults__ = fwd.__kwdefaults__
    f.__qualname__ = fwd.__qualname__
    f.__doc__ = fwd.__doc__
    f.__module__ = fwd.__module__
    return f


# ---- public ---------------------------------------------------------------------------------


def optimize(model: torch.nn.Module, *, rms_norm: bool = True, rope: bool = True, swiglu: bool = True):
    """Swaps fused tpu kernels into `model`'s RMSNorm, MLP and rotary code (see
    the module docstring). Returns `model`. Idempotent; undo with restore().
    The counts of swapped modules are in ``model._tpu_optimized``."""
    refs = _refs()
    if refs is None:
        raise RuntimeError("torch_tpu.optimize: needs Transformers (its Llama, Gemma and Phi3 modeling code "
                           "is the reference the model's modules are compared with)")
    _ops()
    counts = {"rms_norm": 0, "swiglu": 0, "rope": 0}
    for m in model.modules():
        if not _own_forward(m):  # already swapped (by us or by someone else)
            continue
        fwd = type(m).forward
        w = getattr(m, "weight", None)
        if rms_norm and isinstance(w, torch.Tensor) and w.dim() == 1:
            style = _rms_style(type(m), refs)
            if style == "llama" and hasattr(m, "variance_epsilon"):
                m.forward = types.MethodType(_rms_forward, m)
                counts["rms_norm"] += 1
                continue
            if style == "gemma" and hasattr(m, "eps"):
                m.forward = types.MethodType(_rms_forward_unit_offset, m)
                counts["rms_norm"] += 1
                continue
        if swiglu and all(isinstance(getattr(m, n, None), torch.nn.Module)  # nn.Linear, QuantLinear, ...
                          for n in ("gate_proj", "up_proj", "down_proj")) and \
                isinstance(getattr(m, "act_fn", None), torch.nn.Module) and _same(fwd, refs["mlp"]):
            act = _glu_act(m.act_fn)
            if act is not None:
                m._tpu_glu_act = act
                m.forward = types.MethodType(_mlp_forward, m)
                counts["swiglu"] += 1
                continue
        if rope:
            f = _rope_forward(m, refs)
            if f is not None:
                m.forward = types.MethodType(f, m)
                counts["rope"] += 1
                continue
            lf = _rope_layer(m, refs)
            if lf is not None:
                layer, f = lf
                layer.forward = types.MethodType(f, layer)
                counts["rope"] += 1
    prev = getattr(model, "_tpu_optimized", None) or {}
    model._tpu_optimized = {k: counts[k] + prev.get(k, 0) for k in counts}
    return model


def restore(model: torch.nn.Module):
    """Undoes optimize(model): the modules get their class's forward back. Returns `model`."""
    for m in model.modules():
        for layer in (vars(m).get("_kernel_funcs") or {}).values():
            if getattr(getattr(vars(layer).get("forward"), "__func__", None), "_tpu_fused", False):
                del layer.forward
        f = vars(m).get("forward")
        if f is None:
            continue
        fn = getattr(f, "__func__", None)
        if fn in (_rms_forward, _rms_forward_unit_offset, _mlp_forward) or (
                fn is not None and getattr(fn.__globals__.get("apply_rotary_pos_emb"), "_tpu_fused", False)):
            del m.forward
            m.__dict__.pop("_tpu_glu_act", None)
    model.__dict__.pop("_tpu_optimized", None)
    return model
