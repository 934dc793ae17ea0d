"""torch.tpu.optimizers: Google's functional (stateless) optimizers.

An optimizer holds only its hyperparameters; init_param_group(params or
module) makes a ParamGroup (parameters and optimizer state, a pytree), and
step(param_group, grads) (or calling the optimizer) updates it in place and
returns it, so a whole training step can be one traced function. The updates
are PyTorch's own functional ones (torch.optim.adamw.adamw, sgd.sgd,
_muon.muon), which on tpu run as native (foreach/list) kernels.

SingleTraceTrainer (Google's make_fx-traced train step) is not implemented:
it raises NotImplementedError; torch.compile(backend="tpu") of a step that
calls one of these optimizers is the way to get one compiled step here.
"""
import abc
import dataclasses
import types
from typing import Any, ClassVar

import torch
from torch.utils import _pytree

__all__ = ["AdamW", "Muon", "Optimizer", "Sgd", "SingleTraceTrainer"]


def _named(params):
    if isinstance(params, torch.nn.Module):
        return {name.replace(".", "_"): p.detach() for name, p in params.named_parameters()}
    if not isinstance(params, dict) or not all(isinstance(p, torch.Tensor) for p in params.values()):
        raise TypeError("init_param_group: expected an nn.Module or a dict of name -> tensor, got "
                        f"{type(params).__name__}")
    return dict(params)


def _register_pytree(cls, fields):
    _pytree.register_pytree_node(
        cls, lambda g: (tuple(getattr(g, f) for f in fields), None),
        lambda children, _: cls(**dict(zip(fields, children))))


class Optimizer(abc.ABC):
    """Base of the functional optimizers: hyperparameters fixed at
    construction (read them through `defaults`), state in a ParamGroup."""

    ParamGroup: ClassVar[Any]
    _HYPERPARAMETERS: ClassVar[tuple[str, ...]] = ("lr", "weight_decay")

    def __init__(self, lr: float = 1e-3, weight_decay: float = 0.0):
        self._lr = lr
        self._weight_decay = weight_decay

    @property
    def defaults(self):
        """A read-only mapping of the hyperparameters."""
        return types.MappingProxyType({k: getattr(self, "_" + k) for k in self._HYPERPARAMETERS})

    @abc.abstractmethod
    def init_param_group(self, params):
        """A fresh ParamGroup for a module's parameters or a dict of tensors."""

    @abc.abstractmethod
    def step(self, param_group, grads):
        """Updates param_group with grads (a dict keyed like its params); returns it."""

    def __call__(self, param_group, grads):
        return self.step(param_group, grads)

    def _lists(self, group, grads, *states):
        keys = list(group.params)
        missing = [k for k in keys if k not in grads]
        if missing:
            raise KeyError(f"{type(self).__name__}.step: no gradient for {', '.join(missing)}")
        return ([group.params[k] for k in keys], [grads[k] for k in keys],
                *([getattr(group, s)[k] for k in keys] for s in states))


@dataclasses.dataclass
class _MomentsGroup:
    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_state_v: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _MomentumGroup:
    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


_register_pytree(_MomentsGroup, ("params", "opt_state_m", "opt_state_v", "opt_steps"))
_register_pytree(_MomentumGroup, ("params", "opt_state_m", "opt_steps"))


def _zeros(params, dtype=None):
    return {k: torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format) for k, p in params.items()}


def _as(states, like):
    """`states` in the dtypes of `like` (fp32 copies of bf16 moments: PyTorch's
    updates want the state in the parameter's dtype), and a function that
    writes the copies back (rounding them to the stored dtype)."""
    work = [s if s.dtype == p.dtype else s.to(p.dtype) for s, p in zip(states, like)]

    def store():
        pairs = [(s, w) for s, w in zip(states, work) if s is not w]
        if pairs:
            torch._foreach_copy_([s for s, _ in pairs], [w for _, w in pairs])

    return work, store


def _steps(params, start):
    return {k: torch.tensor(float(start), dtype=torch.float32, device=p.device) for k, p in params.items()}


class AdamW(Optimizer):
    """AdamW (decoupled weight decay). Moments in bfloat16 unless
    use_bfloat16_moments=False; the step counts are float32 tensors."""

    ParamGroup = _MomentsGroup
    _HYPERPARAMETERS = ("lr", "weight_decay", "beta1", "beta2", "eps", "use_bfloat16_moments", "amsgrad",
                        "maximize", "foreach", "capturable", "differentiable", "fused", "grad_scale", "found_inf")

    def __init__(self, lr=1e-3, weight_decay=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, use_bfloat16_moments=True,
                 amsgrad=False, maximize=False, foreach=False, capturable=True, differentiable=False, fused=False,
                 grad_scale=None, found_inf=None):
        super().__init__(lr, weight_decay)
        if amsgrad:
            raise ValueError("torch.tpu.optimizers.AdamW: amsgrad=True needs a max-of-squares state that the "
                             "ParamGroup does not hold")
        self._beta1, self._beta2, self._eps = beta1, beta2, eps
        self._use_bfloat16_moments, self._amsgrad, self._maximize = use_bfloat16_moments, amsgrad, maximize
        self._foreach, self._capturable, self._differentiable, self._fused = foreach, capturable, differentiable, fused
        self._grad_scale, self._found_inf = grad_scale, found_inf

    def init_param_group(self, params):
        params = _named(params)
        dtype = torch.bfloat16 if self._use_bfloat16_moments else None
        return _MomentsGroup(params, _zeros(params, dtype), _zeros(params, dtype), _steps(params, 0))

    def step(self, param_group, grads):
        from torch.optim.adamw import adamw

        ps, gs, ms, vs, steps = self._lists(param_group, grads, "opt_state_m", "opt_state_v", "opt_steps")
        (ms, store_m), (vs, store_v) = _as(ms, ps), _as(vs, ps)
        # capturable (step counts read on the device) is refused by PyTorch for CPU tensors
        capturable = self._capturable and all(p.device.type != "cpu" for p in ps)
        adamw(ps, gs, ms, vs, [], steps, foreach=self._foreach, capturable=capturable,
              differentiable=self._differentiable, fused=self._fused, grad_scale=self._grad_scale,
              found_inf=self._found_inf, amsgrad=False, beta1=self._beta1, beta2=self._beta2, lr=self._lr,
              weight_decay=self._weight_decay, eps=self._eps, maximize=self._maximize)
        store_m()
        store_v()
        return param_group


class Sgd(Optimizer):
    """SGD with optional momentum, dampening, Nesterov and weight decay."""

    ParamGroup = _MomentumGroup
    _HYPERPARAMETERS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach", "fused",
                        "grad_scale", "found_inf", "has_sparse_grad")

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
                 foreach=False, fused=True, grad_scale=None, found_inf=None, has_sparse_grad=False):
        super().__init__(lr, weight_decay)
        self._momentum, self._dampening, self._nesterov, self._maximize = momentum, dampening, nesterov, maximize
        self._foreach, self._fused = foreach, fused
        self._grad_scale, self._found_inf, self._has_sparse_grad = grad_scale, found_inf, has_sparse_grad

    def init_param_group(self, params):
        params = _named(params)
        return _MomentumGroup(params, _zeros(params) if self._momentum != 0.0 else {}, _steps(params, 1))

    def step(self, param_group, grads):
        from torch.optim.sgd import sgd

        ps, gs, steps = self._lists(param_group, grads, "opt_steps")
        bufs = [param_group.opt_state_m[k] for k in param_group.params] if self._momentum != 0.0 else []
        sgd(ps, gs, bufs, has_sparse_grad=self._has_sparse_grad, foreach=self._foreach, fused=self._fused,
            grad_scale=self._grad_scale, found_inf=self._found_inf, weight_decay=self._weight_decay,
            momentum=self._momentum, lr=self._lr, dampening=self._dampening, nesterov=self._nesterov,
            maximize=self._maximize)
        torch._foreach_add_(steps, 1.0)
        return param_group


class Muon(Optimizer):
    """Muon: SGD momentum (Nesterov by default) whose update is orthogonalised
    by a quintic Newton-Schulz iteration (ns_steps, ns_coefficients, in
    bfloat16), scaled by adjust_lr_fn (default sqrt(max(1, rows/cols))), with
    decoupled weight decay. 2-D parameters only."""

    ParamGroup = _MomentumGroup
    _HYPERPARAMETERS = ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients", "eps", "ns_steps",
                        "adjust_lr_fn", "use_bfloat16_moments", "foreach", "has_complex")

    def __init__(self, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None,
                 use_bfloat16_moments=False, foreach=False, has_complex=False):
        super().__init__(lr, weight_decay)
        self._momentum, self._nesterov, self._ns_coefficients = momentum, nesterov, tuple(ns_coefficients)
        self._eps, self._ns_steps, self._adjust_lr_fn = eps, ns_steps, adjust_lr_fn
        self._use_bfloat16_moments, self._foreach, self._has_complex = use_bfloat16_moments, foreach, has_complex

    def init_param_group(self, params):
        params = _named(params)
        bad = {k: tuple(p.shape) for k, p in params.items() if p.dim() != 2}
        if bad:
            raise ValueError(f"torch.tpu.optimizers.Muon: parameters must be 2-D matrices, got {bad}")
        dtype = torch.bfloat16 if self._use_bfloat16_moments else None
        return _MomentumGroup(params, _zeros(params, dtype), _steps(params, 1))

    def step(self, param_group, grads):
        from torch.optim._muon import muon

        ps, gs, ms, steps = self._lists(param_group, grads, "opt_state_m", "opt_steps")
        ms, store_m = _as(ms, ps)
        muon(ps, gs, ms, foreach=self._foreach, lr=self._lr, weight_decay=self._weight_decay,
             momentum=self._momentum, nesterov=self._nesterov, ns_coefficients=self._ns_coefficients,
             ns_steps=self._ns_steps, eps=self._eps, adjust_lr_fn=self._adjust_lr_fn, has_complex=self._has_complex)
        store_m()
        torch._foreach_add_(steps, 1.0)
        return param_group


class SingleTraceTrainer:
    """Google's make_fx-traced training step: not implemented here."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "torch.tpu.optimizers.SingleTraceTrainer is not implemented in this project; compile a train step "
            "that calls a torch.tpu.optimizers optimizer with torch.compile(step, backend='tpu') instead")
