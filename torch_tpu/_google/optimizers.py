"""torch.tpu.optimizers: Google's functional (stateless) optimizers.

An optimizer holds only its hyperparameters; init_param_group(params or
module) makes a ParamGroup (parameters and optimizer state, a pytree), and
step(param_group, grads) (or calling the optimizer) updates it in place and
returns it, so a whole training step can be one traced function. The updates
are PyTorch's own functional ones (torch.optim.adamw.adamw, sgd.sgd,
_muon.muon), which on tpu run as native (foreach/list) kernels.

SingleTraceTrainer traces a whole training step (forward, loss, backward,
optimizer update) into one graph and hands it to a compile function.
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
        # aten::_fused_sgd_ has no Meta kernel in PyTorch: traced steps use the list (foreach) ops
        from torch._subclasses.fake_tensor import is_fake

        fused = self._fused and not torch.compiler.is_compiling() and not any(is_fake(p) for p in ps)
        sgd(ps, gs, bufs, has_sparse_grad=self._has_sparse_grad, foreach=self._foreach or (self._fused and not fused),
            fused=fused,
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


def _default_loss(out, targets):
    """The loss Google's trainer takes when no compute_loss_fn is given: MSE
    against targets, else the output's .loss / ["loss"], else the mean of its
    .logits / .sample, else the mean of the output tensor."""
    if targets is not None:
        return torch.nn.functional.mse_loss(out, targets)
    for attr in ("loss", "logits", "sample"):
        v = out.get(attr) if isinstance(out, dict) else getattr(out, attr, None)
        if v is not None:
            return v if attr == "loss" else v.mean()
    if isinstance(out, torch.Tensor):
        return out.mean()
    raise ValueError(f"SingleTraceTrainer: cannot derive a loss from a {type(out).__name__}; pass targets or "
                     "compute_loss_fn")


def _call_compile_fn(compile_fn, gm, flat_inputs):
    import inspect

    try:
        positional = [p for p in inspect.signature(compile_fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        positional = [None, None]
    return compile_fn(gm) if len(positional) == 1 and positional[0].kind != positional[0].VAR_POSITIONAL \
        else compile_fn(gm, flat_inputs)


class SingleTraceTrainer:
    """One traced training step: forward, loss, backward and the optimizer
    update of `model` as one functional graph (make_fx over torch.func), handed
    to compile_fn(graph_module, flat_inputs) (e.g. TpuBackend(), or any dynamo
    backend) once by make_compiled_train_step. The step updates the trainer's
    param_group (and the model's buffers); without an optimizer it only
    computes gradients and stores them in param.grad."""

    def __init__(self, model: torch.nn.Module, optimizer: Optimizer | None = None, compile_fn=None,
                 compute_loss_fn=None):
        if callable(getattr(model, "tie_weights", None)):
            model.tie_weights()
        self._model, self._optimizer = model, optimizer
        self._compile_fn, self._compute_loss_fn = compile_fn, compute_loss_fn
        self._names = {}  # safe name (no dots) -> module attribute path
        params, self._buffers = {}, {}
        for name, p in model.named_parameters():
            self._names[name.replace(".", "_")] = name
            params[name.replace(".", "_")] = p.detach()
        for name, b in model.named_buffers():
            self._names[name.replace(".", "_")] = name
            self._buffers[name.replace(".", "_")] = b.detach()
        self._param_group = optimizer.init_param_group(params) if optimizer is not None else params

    @property
    def param_group(self):
        """The parameters and optimizer state the step updates (the optimizer's
        ParamGroup, or the dict of parameters without an optimizer)."""
        return self._param_group

    @property
    def params(self) -> dict:
        """The parameters under their module names."""
        p = getattr(self._param_group, "params", self._param_group)
        return {self._names[k]: v for k, v in p.items()}

    def _loss(self, params, buffers, inputs, targets):
        from torch.func import functional_call

        if isinstance(inputs, dict):
            args, kwargs = (), inputs
        elif isinstance(inputs, (tuple, list)):
            args, kwargs = tuple(inputs), {}
        else:
            args, kwargs = (inputs,), {}
        state = {self._names[k]: v for k, v in {**params, **buffers}.items()}
        if self._compute_loss_fn is not None:
            from torch.nn.utils import stateless

            with stateless._reparametrize_module(self._model, state, tie_weights=True):
                return self._compute_loss_fn(self._model, args, kwargs)
        return _default_loss(functional_call(self._model, state, args, kwargs, tie_weights=True), targets)

    def make_compiled_train_step(self, example_inputs, example_targets=None, compile_fn=None):
        """Traces the step on the example inputs (and targets) and compiles it;
        returns train_step(inputs, targets=None) -> loss."""
        from torch.func import grad_and_value
        from torch.fx.experimental.proxy_tensor import make_fx

        compile_fn = compile_fn or self._compile_fn
        if compile_fn is None:
            raise ValueError("SingleTraceTrainer.make_compiled_train_step: no compile_fn (give one here or to "
                             "the constructor; e.g. torch_tpu._internal.compile.TpuBackend())")
        with_targets = example_targets is not None
        example = (self._param_group, self._buffers, example_inputs) + ((example_targets,) if with_targets else ())
        flat, spec = _pytree.tree_flatten(example)
        out_spec = []

        def step(*flat_args):
            group, buffers, inputs, *rest = _pytree.tree_unflatten(list(flat_args), spec)
            params = getattr(group, "params", group)
            grads, loss = grad_and_value(lambda p: self._loss(p, buffers, inputs, rest[0] if rest else None))(params)
            result = (loss, self._optimizer(group, grads) if self._optimizer is not None else grads, buffers)
            leaves, s = _pytree.tree_flatten(result)
            out_spec[:] = [s]
            return tuple(leaves)

        compiled = _call_compile_fn(compile_fn, make_fx(step, tracing_mode="fake")(*flat), flat)

        def train_step(inputs, targets=None):
            if (targets is None) == with_targets:
                raise ValueError("SingleTraceTrainer train step: pass targets exactly when example_targets were "
                                 "given to make_compiled_train_step")
            args = (self._param_group, self._buffers, inputs) + ((targets,) if with_targets else ())
            flat_args = _pytree.tree_leaves(args)
            loss, second, buffers = _pytree.tree_unflatten(list(compiled(*flat_args)), out_spec[0])
            for k, b in buffers.items():  # buffers the step changed (running statistics)
                if b is not self._buffers[k]:
                    self._buffers[k].copy_(b)
            if self._optimizer is not None:
                self._param_group = second
            else:
                for name, p in self._model.named_parameters():
                    p.grad = second.get(name.replace(".", "_"))
            return loss

        return train_step
