"""Ops lowered to StableHLO on the pjrt driver (runtime/drivers/pjrt/
pjrt_lower.c), compared with PyTorch on the CPU: dtypes, strided and
transposed inputs, out= and in-place forms, broadcasting, 0-dim and empty
tensors. Every case must also run natively: no CPU fallback for the op.

All cases run in one fresh process with TORCH_TPU_DRIVER=pjrt (the driver
is chosen once per process); each op group is reported as its own test."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plugin_installed():
    import importlib.util

    try:
        return importlib.util.find_spec("xla_plugins.xla_cpu_pjrt") is not None
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(
    not _plugin_installed() and os.environ.get("CI") != "true",
    reason="XLA's CPU PJRT plugin (xla-cpu-pjrt) is not installed; scripts/setup.sh installs it")



# ---- the cases: group -> [(label, fn(*tensors) -> tensor, inputs())] ----
# Inputs are made on the CPU; the same fn runs on their tpu copies (views
# of them where a label says so). Run as a script, this file runs every
# case on the current driver and prints {group: {failed, staged}} as JSON.

F = ("float32", "bfloat16", "float16")
FI = F + ("int64",)
ALL = FI + ("int32", "bool")


def _t(shape, dtype, lo=-3, hi=3, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed + len(shape) * 7 + sum(shape))
    dt = getattr(torch, dtype)
    if dtype == "bool":
        return torch.rand(shape, generator=g) > 0.5
    if dt.is_floating_point:
        return (torch.rand(shape, generator=g) * (hi - lo) + lo).to(dt)
    return torch.randint(lo, hi + 1, shape, generator=g).to(dt)


def _unary(name, dtypes, lo=-3, hi=3, **kw):
    import torch
    f = getattr(torch, name, None)
    has_out = f is not None
    f = f or getattr(torch.nn.functional, name)
    out = []
    for dt in dtypes:
        out.append((f"{name} {dt}", lambda x, f=f: f(x, **kw), lambda dt=dt: [_t((3, 5), dt, lo, hi)]))
        out.append((f"{name} {dt} transposed", lambda x, f=f: f(x.t(), **kw), lambda dt=dt: [_t((5, 3), dt, lo, hi)]))
    out.append((f"{name} 0-dim", lambda x, f=f: f(x, **kw), lambda: [_t((), dtypes[0], lo, hi)]))
    out.append((f"{name} empty", lambda x, f=f: f(x, **kw), lambda: [_t((0, 4), dtypes[0], lo, hi)]))
    if hasattr(torch.Tensor, name + "_") and dtypes[0] != "bool":
        out.append((f"{name}_ in place on a view", lambda x, n=name: (getattr(x[:, 1:], n + "_")(**kw), x)[1],
                    lambda: [_t((3, 5), dtypes[0], lo, hi)]))
    if has_out:
        out.append((f"{name} out=", lambda x, f=f: f(x, **kw, out=torch.empty_like(f(x, **kw))),
                    lambda: [_t((4, 2), dtypes[0], lo, hi)]))
    return out


def _binary(name, dtypes, scalar=None, lo=-3, hi=3):
    import torch
    f = getattr(torch, name)
    out = []
    for dt in dtypes:
        out.append((f"{name} {dt}", f, lambda dt=dt: [_t((3, 4), dt, lo, hi), _t((3, 4), dt, lo, hi, seed=1)]))
        out.append((f"{name} {dt} broadcast", f, lambda dt=dt: [_t((3, 1), dt, lo, hi), _t((4,), dt, lo, hi, seed=1)]))
    out.append((f"{name} transposed", lambda x, y: f(x.t(), y), lambda: [_t((4, 3), dtypes[0], lo, hi),
                                                                        _t((3, 4), dtypes[0], lo, hi, seed=1)]))
    if scalar is not None:
        out.append((f"{name} scalar", lambda x: f(x, scalar), lambda: [_t((5,), dtypes[0], lo, hi)]))
    out.append((f"{name} out=", lambda x, y: f(x, y, out=torch.empty_like(f(x, y))),
                lambda: [_t((2, 3), dtypes[0], lo, hi), _t((2, 3), dtypes[0], lo, hi, seed=1)]))
    return out


def _groups():
    import torch
    G = {}
    for n in ("silu", "erf", "floor", "ceil", "round", "trunc", "sign", "reciprocal", "log1p", "expm1",
              "log2", "exp2", "tan"):
        G[n] = _unary(n, F if n not in ("sign", "floor", "ceil", "round", "trunc") else FI, lo=-2, hi=2)
    G["gelu"] = []
    for approx in ("none", "tanh"):
        for dt in F:
            G["gelu"].append((f"gelu {approx} {dt}",
                              lambda x, a=approx: torch.nn.functional.gelu(x, approximate=a),
                              lambda dt=dt: [_t((4, 6), dt)]))
    G["bitwise_not"] = _unary("bitwise_not", ("int64", "int32", "bool"))
    G["logical_not"] = _unary("logical_not", ALL)
    for n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        G[n] = _binary(n, ("int64", "int32", "bool"), scalar=3)
    for n in ("logical_and", "logical_or", "logical_xor"):
        G[n] = _binary(n, ALL)
    G["remainder"] = _binary("remainder", ("float32", "bfloat16"), scalar=2, lo=-7, hi=7)
    G["fmod"] = _binary("fmod", ("float32", "bfloat16"), scalar=2, lo=-7, hi=7)
    for dt in ("float32", "int64"):
        G["fmod"].append((f"fmod nonzero divisor {dt}", torch.fmod,
                          lambda dt=dt: [_t((6,), dt, -9, 9), _t((6,), dt, 1, 4, seed=3) * -1]))
        G["remainder"].append((f"remainder nonzero divisor {dt}", torch.remainder,
                               lambda dt=dt: [_t((6,), dt, -9, 9), _t((6,), dt, 1, 4, seed=3) * -1]))
    G["pow"] = _binary("pow", ("float32", "bfloat16"), lo=1, hi=3)
    G["floor_divide"] = [(f"floor_divide {dt}", torch.floor_divide,
                          lambda dt=dt: [_t((8,), dt, -9, 9), _t((8,), dt, 1, 4, seed=3)
                                         * torch.tensor([1, -1] * 4).to(getattr(torch, dt))])
                         for dt in ("float32", "int64")]
    G["clamp"] = []
    for dt in FI:
        G["clamp"].append((f"clamp {dt}", lambda x: torch.clamp(x, -1, 2), lambda dt=dt: [_t((3, 5), dt)]))
        G["clamp"].append((f"clamp_min {dt}", lambda x: torch.clamp_min(x, 0), lambda dt=dt: [_t((3, 5), dt)]))
        G["clamp"].append((f"clamp_max {dt}", lambda x: torch.clamp_max(x, 1), lambda dt=dt: [_t((3, 5), dt)]))
    G["clamp"] += [
        ("clamp tensors", lambda x, lo, hi: torch.clamp(x, lo, hi),
         lambda: [_t((3, 4), "float32"), _t((4,), "float32", -2, 0), _t((3, 1), "float32", 0, 2)]),
        ("clamp min only", lambda x: torch.clamp(x, min=0.5), lambda: [_t((7,), "float32")]),
        ("clamp nan", lambda x: torch.clamp(x, 0, 1), lambda: [torch.tensor([float("nan"), -1.0, 2.0])]),
        ("clamp_ on a transposed view", lambda x: (x.t().clamp_(-1, 1), x)[1], lambda: [_t((4, 3), "float32")]),
    ]
    G["softmax"] = []
    for dt in F:
        for d in (-1, 0):
            G["softmax"].append((f"softmax {dt} dim {d}", lambda x, d=d: torch.softmax(x, d), lambda dt=dt: [_t((4, 7), dt)]))
            # half log_softmax: float32 math rounded once, as the host driver does (PyTorch's CPU
            # kernel keeps max + log(sum) in the half type)
            G["softmax"].append((f"log_softmax {dt} dim {d}", lambda x, d=d: torch.log_softmax(x, d),
                                 lambda dt=dt: [_t((4, 7), dt)],
                                 lambda x, d=d: torch.log_softmax(x.float(), d).to(x.dtype)))
    G["softmax"] += [
        ("softmax transposed", lambda x: torch.softmax(x.t(), -1), lambda: [_t((5, 3), "float32")]),
        ("softmax -inf", lambda x: torch.softmax(x.masked_fill(x > 1, float("-inf")), -1), lambda: [_t((3, 5), "float32")]),
        ("softmax to float", lambda x: torch.softmax(x, -1, dtype=torch.float32), lambda: [_t((3, 5), "bfloat16")]),
        ("softmax 0-dim", lambda x: torch.softmax(x, 0), lambda: [_t((), "float32")]),
    ]
    G["reductions"] = []
    for dt in FI:
        G["reductions"] += [
            (f"amax {dt}", lambda x: torch.amax(x, 1), lambda dt=dt: [_t((3, 5), dt)]),
            (f"amin {dt} keepdim", lambda x: torch.amin(x, 0, keepdim=True), lambda dt=dt: [_t((3, 5), dt)]),
            (f"max {dt}", lambda x: torch.max(x), lambda dt=dt: [_t((3, 5), dt)]),
            (f"min {dt}", lambda x: torch.min(x), lambda dt=dt: [_t((3, 5), dt)]),
            (f"argmax {dt}", lambda x: torch.argmax(x, 1), lambda dt=dt: [_t((3, 5), dt)]),
            (f"argmin {dt} flat", lambda x: torch.argmin(x), lambda dt=dt: [_t((3, 5), dt)]),
            (f"prod {dt}", lambda x: torch.prod(x, 1), lambda dt=dt: [_t((3, 4), dt, -2, 2)]),
        ]
    G["reductions"] += [
        ("amax transposed", lambda x: torch.amax(x.t(), 0), lambda: [_t((4, 6), "float32")]),
        ("amax nan", lambda x: torch.amax(x, 0), lambda: [torch.tensor([1.0, float("nan"), 3.0])]),
        ("argmax ties", lambda x: torch.argmax(x, 0), lambda: [torch.tensor([1.0, 3.0, 3.0, 2.0])]),
        ("argmax keepdim", lambda x: torch.argmax(x, 0, keepdim=True), lambda: [_t((3, 4), "float32")]),
        ("prod all", lambda x: torch.prod(x), lambda: [_t((2, 3), "float32", 1, 2)]),
        ("prod bool", lambda x: torch.prod(x, 0), lambda: [_t((3, 4), "bool")]),
        ("amax bool", lambda x: torch.amax(x, 0), lambda: [_t((3, 4), "bool")]),
        ("any", lambda x: torch.any(x, 1), lambda: [_t((3, 4), "bool")]),
        ("all", lambda x: torch.all(x, 0), lambda: [_t((3, 4), "bool")]),
        ("sum int to int64", lambda x: torch.sum(x, 0), lambda: [_t((3, 4), "int32")]),
        ("sum bool", lambda x: torch.sum(x, 1), lambda: [_t((3, 4), "bool")]),
        ("mean bf16 dim", lambda x: torch.mean(x, (0, 1)), lambda: [_t((5, 6), "bfloat16")]),
        ("sum all", lambda x: x.sum(), lambda: [_t((5, 6), "float32")]),
        ("sum all transposed bf16", lambda x: x.t().sum(), lambda: [_t((5, 6), "bfloat16")]),
        ("sum all int to int64", lambda x: x.sum(), lambda: [_t((3, 4), "int32")]),
        ("sum all dtype", lambda x: x.sum(dtype=torch.float64), lambda: [_t((3, 4), "float32")]),
        ("mean all", lambda x: x.mean(), lambda: [_t((5, 6), "float32")]),
        ("sum out", lambda x: torch.sum(x, 0, out=torch.empty(6, device=x.device)), lambda: [_t((5, 6), "float32")]),
    ]
    G["index"] = []
    for dt in ALL:
        G["index"] += [
            (f"index_select {dt}", lambda x, i: torch.index_select(x, 0, i),
             lambda dt=dt: [_t((5, 3), dt), torch.tensor([4, 0, 2, 2])]),
            (f"gather {dt}", lambda x, i: torch.gather(x, 1, i),
             lambda dt=dt: [_t((3, 5), dt), torch.tensor([[0, 4], [1, 1], [3, 2]])]),
            (f"scatter value {dt}", lambda x, i: torch.scatter(x, 1, i, 1),
             lambda dt=dt: [_t((3, 5), dt), torch.tensor([[0, 4], [1, 2], [3, 2]])]),
        ]
    G["index"] += [
        ("index_select dim 1 int32 index", lambda x, i: torch.index_select(x, 1, i),
         lambda: [_t((3, 6), "float32"), torch.tensor([5, 0], dtype=torch.int32)]),
        ("index_select transposed", lambda x, i: torch.index_select(x.t(), 0, i),
         lambda: [_t((4, 5), "float32"), torch.tensor([1, 3])]),
        ("index_select 0-dim index", lambda x, i: torch.index_select(x, 0, i), lambda: [_t((4, 2), "float32"),
                                                                                      torch.tensor(2)]),
        ("embedding", lambda w, i: torch.nn.functional.embedding(i, w), lambda: [_t((10, 4), "float32"),
                                                                               torch.tensor([[1, 9], [0, 0]])]),
        ("gather dim 0", lambda x, i: torch.gather(x, 0, i), lambda: [_t((4, 3), "float32"),
                                                                    torch.tensor([[3, 0, 1]])]),
        ("scatter src", lambda x, i, s: torch.scatter(x, 0, i, s),
         lambda: [_t((4, 3), "float32"), torch.tensor([[3, 0, 1], [2, 1, 0]]), _t((3, 3), "float32")]),
        ("scatter_ value in place", lambda x, i: (x.scatter_(1, i, -1.0), x)[1],
         lambda: [_t((3, 4), "float32"), torch.tensor([[0], [3], [1]])]),
        ("scatter_add", lambda x, i, s: torch.scatter_add(x, 1, i, s),
         lambda: [_t((2, 4), "float32"), torch.tensor([[0, 0, 3], [1, 2, 1]]), _t((2, 3), "float32")]),
    ]
    G["fill_copy"] = []
    for dt in ALL:
        G["fill_copy"] += [
            (f"fill_ {dt}", lambda x: (x.fill_(1), x)[1], lambda dt=dt: [_t((3, 4), dt)]),
            (f"zero_ view {dt}", lambda x: (x[:, ::2].zero_(), x)[1], lambda dt=dt: [_t((3, 4), dt)]),
            (f"to float32 from {dt}", lambda x: x.t().to(torch.float32), lambda dt=dt: [_t((3, 4), dt)]),
            (f"to bfloat16 from {dt}", lambda x: x.t().to(torch.bfloat16), lambda dt=dt: [_t((3, 4), dt)]),
            (f"to int64 from {dt}", lambda x: x.t().to(torch.int64), lambda dt=dt: [_t((3, 4), dt)]),
            (f"to bool from {dt}", lambda x: x.t().to(torch.bool), lambda dt=dt: [_t((3, 4), dt)]),
        ]
    G["fill_copy"] += [
        ("fill_ 0-dim", lambda x: (x.fill_(2.5), x)[1], lambda: [_t((), "float32")]),
        ("copy_ broadcast into a view", lambda x, y: (x[1:].copy_(y), x)[1],
         lambda: [_t((3, 4), "float32"), _t((4,), "bfloat16")]),
        ("copy_ transposed", lambda x, y: (x.copy_(y.t()), x)[1], lambda: [_t((3, 4), "float32"), _t((4, 3), "float32")]),
        ("masked_fill", lambda x, m: x.masked_fill(m, -1.5), lambda: [_t((3, 4), "float32"), _t((4,), "bool")]),
        ("masked_fill_ bf16 0-dim value", lambda x, m, v: (x.masked_fill_(m, v), x)[1],
         lambda: [_t((3, 4), "bfloat16"), _t((3, 4), "bool"), torch.tensor(2.0)]),
        ("masked_fill int64", lambda x, m: x.masked_fill(m, 7), lambda: [_t((3, 4), "int64"), _t((3, 1), "bool")]),
        ("masked_fill uint8 -1 (wraps)", lambda x, m: x.masked_fill(m, -1),
         lambda: [_t((3, 4), "int64").abs().to(torch.uint8), _t((3, 1), "bool")]),
        ("fill_ tensor", lambda x, v: (x.fill_(v), x)[1], lambda: [_t((2, 3), "float32"), torch.tensor(1.5)]),
        ("full", lambda x: torch.full((2, 3), 7, device=x.device) + x, lambda: [_t((2, 3), "int64")]),
    ]
    G["arange_tri"] = []
    for dt in ("float32", "int64", "bfloat16", "int32"):
        G["arange_tri"].append((f"arange {dt}", lambda x, dt=dt: torch.arange(1, 11, 3, dtype=getattr(torch, dt),
                                                                              device=x.device),
                                lambda: [_t((1,), "float32")]))
    G["arange_tri"] += [
        ("arange float step", lambda x: torch.arange(0.5, 3.0, 0.25, device=x.device), lambda: [_t((1,), "float32")]),
        ("arange end", lambda x: torch.arange(7, device=x.device), lambda: [_t((1,), "float32")]),
    ]
    G["cat_index_put"] = []
    for dt in ALL:
        G["cat_index_put"] += [
            (f"cat {dt}", lambda x, y: torch.cat([x, y.t()], 1), lambda dt=dt: [_t((3, 2), dt), _t((4, 3), dt)]),
            (f"index_put accumulate {dt}", lambda x, i, v: x.index_put((i,), v, accumulate=dt != "bool"),
             lambda dt=dt: [_t((6, 3), dt), torch.tensor([0, 5, 2, 2, -1]), _t((5, 3), dt)]),
        ]
    G["cat_index_put"] += [
        ("cat dim 0 mixed dtypes", lambda x, y: torch.cat([x, y]), lambda: [_t((1, 4), "bfloat16"), _t((2, 4), "float32")]),
        ("cat with an empty", lambda x, y: torch.cat([x, y], 1), lambda: [_t((2, 0), "float32"), _t((2, 3), "float32")]),
        ("cat out=", lambda x, y: torch.cat([x, y], out=torch.empty(0, device=x.device)),
         lambda: [_t((2, 3), "float32"), _t((1, 3), "float32")]),
        ("index_put two indices broadcast", lambda x, i, j, v: x.index_put((i, j), v),
         lambda: [_t((4, 5, 2), "float32"), torch.tensor([[0], [3]]), torch.tensor([1, 4, 2]), _t((2,), "float32")]),
        ("index_put_ in place", lambda x, i, v: (x.index_put_((i,), v), x)[1],
         lambda: [_t((5, 2), "float32"), torch.tensor([4, 1]), _t((2, 2), "float32")]),
        ("out= resized", lambda x: torch.exp(x, out=torch.empty(0, device=x.device)), lambda: [_t((3, 4), "float32")]),
    ]
    for dt in ALL:
        G["arange_tri"] += [
            (f"triu {dt}", lambda x: torch.triu(x, 1), lambda dt=dt: [_t((2, 4, 5), dt)]),
            (f"tril {dt}", lambda x: torch.tril(x, -1), lambda dt=dt: [_t((4, 5), dt)]),
        ]
    G["arange_tri"].append(("tril_ in place transposed", lambda x: (x.t().tril_(), x)[1], lambda: [_t((4, 4), "float32")]))
    G["matmul"] = []
    for dt in F:
        G["matmul"] += [
            (f"bmm {dt}", torch.bmm, lambda dt=dt: [_t((2, 3, 4), dt), _t((2, 4, 5), dt, seed=1)]),
            (f"addmm {dt}", torch.addmm, lambda dt=dt: [_t((5,), dt), _t((3, 4), dt), _t((4, 5), dt, seed=1)]),
            (f"linear {dt}", torch.nn.functional.linear, lambda dt=dt: [_t((3, 4), dt), _t((6, 4), dt), _t((6,), dt)]),
        ]
    G["matmul"] += [
        ("bmm transposed", lambda x, y: torch.bmm(x, y.transpose(1, 2)),
         lambda: [_t((2, 3, 4), "float32"), _t((2, 5, 4), "float32", seed=1)]),
        ("addmm beta alpha", lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0),
         lambda: [_t((3, 5), "float32"), _t((3, 4), "float32"), _t((4, 5), "float32", seed=1)]),
        ("addmm beta 0 ignores nan", lambda c, x, y: torch.addmm(c * float("nan"), x, y, beta=0),
         lambda: [_t((3, 5), "float32"), _t((3, 4), "float32"), _t((4, 5), "float32", seed=1)]),
        ("addmm int64", torch.addmm, lambda: [_t((5,), "int64"), _t((3, 4), "int64"), _t((4, 5), "int64", seed=1)]),
    ]
    G.update(_groups_more())
    return G


def _perm(shape, dtype, seed=0):
    """Distinct values (no ties) of `dtype`, for topk (PyTorch's tie order is unspecified)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g) - n // 2).reshape(shape).to(getattr(torch, dtype))


def _groups_more():
    import torch
    G = {}
    ALLU = ALL + ("uint8",)
    nan = lambda: [torch.tensor([[1.0, float("nan"), 3.0, -1.0], [float("nan"), 2.0, float("nan"), 2.0]])]
    G["max_min_dim"] = []
    for dt in ALLU:
        G["max_min_dim"] += [
            (f"max.dim {dt}", lambda x: torch.max(x, 1), lambda dt=dt: [_t((3, 5), dt)]),
            (f"min.dim {dt} keepdim", lambda x: torch.min(x, 0, keepdim=True), lambda dt=dt: [_t((3, 5), dt)]),
        ]
    G["max_min_dim"] += [
        ("max.dim nan", lambda x: torch.max(x, 1), nan),
        ("min.dim nan", lambda x: torch.min(x, 0), nan),
        ("max.dim ties", lambda x: torch.max(x, 0), lambda: [torch.tensor([1.0, 3.0, 3.0, 2.0])]),
        ("max.dim transposed", lambda x: torch.max(x.t(), 1), lambda: [_t((4, 6), "float32")]),
        ("min.dim 0-dim", lambda x: torch.min(x, 0), lambda: [_t((), "float32")]),
        ("max.dim empty", lambda x: torch.max(x, 1), lambda: [_t((0, 4), "float32")]),
        ("max.dim out=", lambda x: torch.max(x, 1, out=(torch.empty(0, device=x.device),
                                                       torch.empty(0, dtype=torch.long, device=x.device))),
         lambda: [_t((3, 5), "float32")]),
    ]
    G["sort_topk"] = []
    for dt in ALLU:
        G["sort_topk"] += [
            (f"sort {dt}", lambda x: torch.sort(x, dim=1, stable=True), lambda dt=dt: [_t((3, 6), dt)]),
            (f"sort {dt} descending dim 0", lambda x: torch.sort(x, dim=0, descending=True, stable=True),
             lambda dt=dt: [_t((5, 3), dt)]),
            (f"argsort {dt}", lambda x: torch.argsort(x, dim=-1, stable=True), lambda dt=dt: [_t((2, 7), dt)]),
        ]
    for dt in ("float32", "bfloat16", "float16", "int64", "int32"):
        G["sort_topk"] += [
            (f"topk {dt}", lambda x: torch.topk(x, 3, 1), lambda dt=dt: [_perm((3, 8), dt)]),
            (f"topk {dt} smallest dim 0", lambda x: torch.topk(x, 2, 0, largest=False), lambda dt=dt: [_perm((5, 3), dt)]),
        ]
    G["sort_topk"] += [
        ("sort nan", lambda x: torch.sort(x, 1), nan),
        ("sort nan descending", lambda x: torch.sort(x, 1, descending=True), nan),
        ("sort ties unstable overload", lambda x: torch.sort(x, 0), lambda: [torch.tensor([2, 1, 2, 1, 0, 2])]),
        ("sort transposed", lambda x: torch.sort(x.t(), 1), lambda: [_t((6, 4), "float32")]),
        ("sort 0-dim", lambda x: torch.sort(x), lambda: [_t((), "float32")]),
        ("sort empty", lambda x: torch.sort(x, 1), lambda: [_t((0, 4), "float32")]),
        ("sort out=", lambda x: torch.sort(x, 1, out=(torch.empty(0, device=x.device),
                                                     torch.empty(0, dtype=torch.long, device=x.device))),
         lambda: [_t((3, 5), "float32")]),
        ("topk nan", lambda x: torch.topk(x, 2, 1), nan),
        ("topk transposed", lambda x: torch.topk(x.t(), 2, 1), lambda: [_perm((5, 3), "float32")]),
        ("topk k=0", lambda x: torch.topk(x, 0, 1), lambda: [_t((3, 5), "float32")]),
        ("topk out=", lambda x: torch.topk(x, 2, out=(torch.empty(0, device=x.device),
                                                      torch.empty(0, dtype=torch.long, device=x.device))),
         lambda: [_perm((3, 5), "float32")]),
    ]
    G["scan"] = []
    for dt in ALLU:
        G["scan"] += [
            (f"cumsum {dt}", lambda x: torch.cumsum(x, 1), lambda dt=dt: [_t((3, 7), dt)]),
            (f"cumprod {dt} dim 0", lambda x: torch.cumprod(x, 0), lambda dt=dt: [_t((5, 3), dt, -2, 2)]),
        ]
    G["scan"] += [
        ("cumsum dtype", lambda x: torch.cumsum(x, 0, dtype=torch.float32), lambda: [_t((6, 2), "int32")]),
        ("cumsum long", lambda x: torch.cumsum(x, 0), lambda: [_t((100,), "float32")]),
        ("cumsum transposed", lambda x: torch.cumsum(x.t(), 1), lambda: [_t((5, 4), "float32")]),
        ("cumsum 0-dim", lambda x: torch.cumsum(x, 0), lambda: [_t((), "float32")]),
        ("cumsum empty", lambda x: torch.cumsum(x, 1), lambda: [_t((0, 4), "float32")]),
        ("cumsum out=", lambda x: torch.cumsum(x, 1, out=torch.empty(0, device=x.device)), lambda: [_t((3, 4), "float32")]),
        ("cumprod nan", lambda x: torch.cumprod(x, 1), nan),
    ]
    G["flip_roll"] = []
    for dt in ALLU:
        G["flip_roll"] += [
            (f"flip {dt}", lambda x: torch.flip(x, (0, 2)), lambda dt=dt: [_t((2, 3, 4), dt)]),
            (f"roll {dt}", lambda x: torch.roll(x, (1, -2), (0, 1)), lambda dt=dt: [_t((3, 5), dt)]),
        ]
    G["flip_roll"] += [
        ("flip transposed", lambda x: torch.flip(x.t(), (1,)), lambda: [_t((4, 3), "float32")]),
        ("flip 0-dim", lambda x: torch.flip(x, ()), lambda: [_t((), "float32")]),
        ("flip empty", lambda x: torch.flip(x, (0,)), lambda: [_t((0, 3), "float32")]),
        ("roll flat", lambda x: torch.roll(x, 4), lambda: [_t((3, 5), "float32")]),
        ("roll big shift transposed", lambda x: torch.roll(x.t(), 13, 1), lambda: [_t((4, 3), "float32")]),
        ("roll empty", lambda x: torch.roll(x, 1, 0), lambda: [_t((0, 3), "float32")]),
    ]
    i3 = lambda: torch.tensor([[0, 0, 3], [1, 2, 1], [4, 4, 4]])
    G["scatter_reduce"] = []
    for dt in FI + ("int32",):
        G["scatter_reduce"] += [
            (f"scatter add {dt}", lambda x, i, s: torch.scatter(x, 1, i, s, reduce="add"),
             lambda dt=dt: [_t((3, 5), dt), i3(), _t((3, 3), dt, seed=1)]),
            (f"scatter multiply value {dt}", lambda x, i: torch.scatter(x, 1, i, 2, reduce="multiply"),
             lambda dt=dt: [_t((3, 5), dt), i3()]),
        ]
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            for dt in ("float32", "int64", "bfloat16"):
                G["scatter_reduce"].append(
                    (f"scatter_reduce {red} include_self={inc} {dt}",
                     lambda x, i, s, r=red, c=inc: torch.scatter_reduce(x, 1, i, s, r, include_self=c),
                     lambda dt=dt: [_t((3, 5), dt), i3(), _t((3, 3), dt, seed=1)]))
    G["scatter_reduce"] += [
        ("scatter_reduce amax nan first", lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amax"),
         lambda: [torch.tensor([1.0, 2.0]), torch.tensor([0, 0, 1]), torch.tensor([float("nan"), 5.0, 0.0])]),
        ("scatter_reduce amin nan last", lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amin"),
         lambda: [torch.tensor([1.0, 2.0]), torch.tensor([0, 0, 1]), torch.tensor([-5.0, float("nan"), 0.0])]),
        ("scatter_reduce_ in place on a view", lambda x, i, s: (x[1:].scatter_reduce_(1, i, s, "sum"), x)[1],
         lambda: [_t((3, 4), "float32"), torch.tensor([[0, 3], [0, 0]]), _t((2, 2), "float32")]),
        ("scatter_reduce bool amax", lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amax"),
         lambda: [_t((3, 5), "bool"), i3(), _t((3, 3), "bool", seed=1)]),
        ("scatter_add empty index", lambda x, i, s: torch.scatter_add(x, 0, i, s),
         lambda: [_t((5,), "float32"), torch.zeros(2, 0, dtype=torch.long), _t((2, 0), "float32")]),
        ("gather empty index grad", lambda x, i: torch.autograd.grad(
            torch.gather(x.requires_grad_(), 0, i).sum(), x, allow_unused=True, materialize_grads=True)[0],
         lambda: [_t((5,), "float32"), torch.zeros(2, 0, dtype=torch.long)]),
    ]
    G["index_tensor"] = []
    for dt in ALLU:
        G["index_tensor"].append((f"index {dt}", lambda x, i: x[i], lambda dt=dt: [_t((5, 3), dt), torch.tensor([4, 0, -1, 2])]))
    G["index_tensor"] += [
        ("index two broadcast", lambda x, i, j: x[i, j],
         lambda: [_t((4, 5, 2), "float32"), torch.tensor([[0], [3]]), torch.tensor([1, 4, 2])]),
        ("index after a full dim", lambda x, i: x[:, i], lambda: [_t((3, 6), "float32"), torch.tensor([[5, 0], [1, 1]])]),
        ("index non-adjacent", lambda x, i, j: x[i, :, j],
         lambda: [_t((3, 4, 5), "float32"), torch.tensor([0, 2]), torch.tensor([4, -1])]),
        ("index int32 index transposed self", lambda x, i: x.t()[i],
         lambda: [_t((3, 6), "bfloat16"), torch.tensor([5, 0], dtype=torch.int32)]),
        ("index empty index", lambda x, i: x[i], lambda: [_t((4, 3), "float32"), torch.zeros(0, dtype=torch.long)]),
        ("index 0-dim index", lambda x, i: x[i], lambda: [_t((4, 3), "float32"), torch.tensor(2)]),
        ("index_put grad", lambda x, i, v: torch.autograd.grad(x.index_put((i,), v.requires_grad_()).sum(), v)[0],
         lambda: [_t((6, 3), "float32"), torch.tensor([0, 5, 2]), _t((3, 3), "float32")]),
    ]
    A = torch.ops.aten
    G["index_put_masked"] = [
        ("index_put after a full dim", lambda x, i, v: A.index_put(x, [None, i], v),
         lambda: [_t((3, 5, 2), "float32"), torch.tensor([4, 0, -1]), _t((3, 3, 2), "float32", seed=1)]),
        ("index_put accumulate duplicates after a full dim", lambda x, i, v: A.index_put(x, [None, i], v, True),
         lambda: [_t((3, 5), "float32"), torch.tensor([1, 1, 3]), _t((3, 3), "float32", seed=1)]),
        ("index_put non-adjacent", lambda x, i, j, v: A.index_put(x, [i, None, j], v),
         lambda: [_t((4, 3, 5), "bfloat16"), torch.tensor([0, 3]), torch.tensor([1, -1]), _t((2, 3), "bfloat16", seed=1)]),
        ("index_put_ last dim, scalar value", lambda x, i: A.index_put_(x, [None, None, i], torch.tensor(2.0)),
         lambda: [_t((2, 3, 4), "float32"), torch.tensor([[0, 3]])]),
        ("index_select grad along dim 1", lambda x, i: torch.autograd.grad(
            x.requires_grad_().index_select(1, i).sum(), x)[0], lambda: [_t((3, 5), "float32"), torch.tensor([0, 2, 2, 4])]),
    ]
    for dt in ("float32", "bfloat16", "int64", "bool"):
        G["index_put_masked"] += [
            (f"masked_scatter {dt} broadcast mask", lambda x, m, s: x.masked_scatter(m, s),
             lambda dt=dt: [_t((4, 5), dt), _t((5,), "bool", seed=2), _t((30,), dt, seed=3)]),
            (f"masked_scatter_ {dt}", lambda x, m, s: x.masked_scatter_(m, s),
             lambda dt=dt: [_t((2, 3, 4), dt), _t((2, 1, 4), "bool", seed=2), _t((24,), dt, seed=3)]),
        ]
    G["index_put_masked"] += [
        ("masked_select grad", lambda x, m: torch.autograd.grad(x.requires_grad_().masked_select(m).sum(), x)[0],
         lambda: [_t((4, 5), "float32"), _t((4, 5), "bool", seed=2)]),
    ]
    for p_ in (2.0, 1.0, float("inf"), 3.0):
        G["index_put_masked"].append(
            (f"embedding_renorm_ p={p_}", lambda w, i, p_=p_: torch.embedding_renorm_(w, i, 1.5, p_),
             lambda: [_t((10, 6), "float32"), torch.tensor([[1, 3, 3], [9, 0, 0]])]))
    G["index_put_masked"] += [
        ("embedding max_norm bfloat16", lambda w, i: torch.nn.functional.embedding(i, w, max_norm=1.0),
         lambda: [_t((10, 4), "bfloat16"), torch.tensor([1, 2, 2, 7])]),
    ]
    G["conv"] = []
    for dt in ("float32", "bfloat16"):
        G["conv"] += [
            (f"conv2d {dt} bias padding", lambda x, w, b: torch.nn.functional.conv2d(x, w, b, 1, 1),
             lambda dt=dt: [_t((2, 4, 9, 8), dt), _t((6, 4, 3, 3), dt, seed=1), _t((6,), dt, seed=2)]),
            (f"conv2d {dt} stride groups", lambda x, w: torch.nn.functional.conv2d(x, w, None, 2, 0, 1, 2),
             lambda dt=dt: [_t((1, 4, 10, 7), dt), _t((8, 2, 3, 3), dt, seed=1)]),
        ]
    G["conv"] += [
        ("conv2d depthwise dilation", lambda x, w: torch.nn.functional.conv2d(x, w, None, 1, 2, 2, 6),
         lambda: [_t((1, 6, 8, 8), "float32"), _t((6, 1, 3, 3), "float32", seed=1)]),
        ("conv1d strided", lambda x, w: torch.nn.functional.conv1d(x, w, None, 2, 1),
         lambda: [_t((2, 4, 20), "float32"), _t((5, 4, 3), "float32", seed=1)]),
        ("conv3d", lambda x, w: torch.nn.functional.conv3d(x, w, None, 1, 1),
         lambda: [_t((1, 2, 5, 6, 7), "float32"), _t((3, 2, 3, 3, 3), "float32", seed=1)]),
        ("conv_transpose2d stride output_padding groups", lambda x, w, b: torch.nn.functional.conv_transpose2d(
            x, w, b, 2, 1, 1, 2), lambda: [_t((1, 4, 5, 6), "float32"), _t((4, 3, 3, 3), "float32", seed=1), _t((6,), "float32", seed=2)]),
        ("conv_transpose1d dilation", lambda x, w: torch.nn.functional.conv_transpose1d(x, w, None, 1, 0, 0, 1, 2),
         lambda: [_t((2, 3, 7), "float32"), _t((3, 4, 3), "float32", seed=1)]),
        ("conv2d channels_last input", lambda x, w: torch.nn.functional.conv2d(x.to(memory_format=torch.channels_last), w),
         lambda: [_t((2, 3, 6, 6), "float32"), _t((4, 3, 3, 3), "float32", seed=1)]),
    ]

    def _conv_grads(f, *xs):
        xs = [x.requires_grad_() for x in xs]
        y = f(*xs)
        return torch.cat([g.flatten() for g in torch.autograd.grad(y, xs, torch.ones_like(y) * 0.5)])
    F_ = torch.nn.functional
    for dt in ("float32",):  # bfloat16: the CPU rounds its backward's partial sums (1-ulp differences)
        G["conv"].append((f"conv2d grads {dt} stride groups bias", lambda x, w, b: _conv_grads(
            lambda x, w, b: F_.conv2d(x, w, b, 2, 1, 1, 2), x, w, b),
            lambda dt=dt: [_t((2, 4, 9, 8), dt), _t((6, 2, 3, 3), dt, seed=1), _t((6,), dt, seed=2)]))
    G["conv"] += [
        ("conv2d grads stride drops positions", lambda x, w: _conv_grads(lambda x, w: F_.conv2d(x, w, None, 3, 1), x, w),
         lambda: [_t((1, 2, 11, 9), "float32"), _t((4, 2, 3, 3), "float32", seed=1)]),
        ("conv2d grads depthwise dilation", lambda x, w: _conv_grads(lambda x, w: F_.conv2d(x, w, None, 1, 2, 2, 6), x, w),
         lambda: [_t((1, 6, 8, 8), "float32"), _t((6, 1, 3, 3), "float32", seed=1)]),
        ("conv_transpose2d grads", lambda x, w, b: _conv_grads(lambda x, w, b: F_.conv_transpose2d(x, w, b, 2, 1, 1, 2), x, w, b),
         lambda: [_t((1, 4, 5, 6), "float32"), _t((4, 3, 3, 3), "float32", seed=1), _t((6,), "float32", seed=2)]),
        ("conv1d grads", lambda x, w: _conv_grads(lambda x, w: F_.conv1d(x, w, None, 2, 1), x, w),
         lambda: [_t((2, 4, 20), "float32"), _t((5, 4, 3), "float32", seed=1)]),
        # the input needs no gradient (a first layer): convolution_backward without grad_input
        ("conv2d weight and bias grads only", lambda x, w, b: _conv_grads(lambda w, b: F_.conv2d(x, w, b, 1, 1), w, b),
         lambda: [_t((2, 3, 7, 6), "float32"), _t((4, 3, 3, 3), "float32", seed=1), _t((4,), "float32", seed=2)]),
    ]
    G["layer_norm"] = []
    LN = torch.nn.functional.layer_norm
    for dt in ("float32", "bfloat16", "float16"):
        G["layer_norm"] += [
            (f"layer_norm {dt} weight bias", lambda x, w, b: LN(x, (8,), w, b, 1e-5),
             lambda dt=dt: [_t((3, 5, 8), dt), _t((8,), dt, seed=1), _t((8,), dt, seed=2)]),
            (f"native_layer_norm {dt} mean rstd", lambda x: torch.native_layer_norm(x, (4, 6), None, None, 1e-3),
             lambda dt=dt: [_t((2, 4, 6), dt)]),
        ]
    G["layer_norm"] += [
        ("layer_norm transposed input, weight only", lambda x, w: LN(x.transpose(0, 1), (6,), w),
         lambda: [_t((4, 3, 6), "float32"), _t((6,), "float32", seed=1)]),
        ("layer_norm float64", lambda x, b: LN(x, (5,), None, b), lambda: [_t((3, 5), "float64"), _t((5,), "float64")]),
        ("layer_norm grads", lambda x, w, b: torch.cat([g.flatten() for g in torch.autograd.grad(
            LN(x.requires_grad_(), (7,), w.requires_grad_(), b.requires_grad_()).pow(2).sum(), (x, w, b))]),
         lambda: [_t((2, 3, 7), "float32"), _t((7,), "float32", seed=1), _t((7,), "float32", seed=2)]),
    ]
    G["foreach_optim"] = [
        ("_foreach_add_ scalar list", lambda a, b: (torch._foreach_add_([a, b], [1.5, -2.0]), torch.cat([a, b.flatten()]))[1],
         lambda: [_t((3,), "float32"), _t((2, 2), "float32", seed=1)]),
        ("_foreach_addcdiv scalar", lambda a, b, c: torch.cat(torch._foreach_addcdiv([a], [b], [c.abs() + 1], 0.5)),
         lambda: [_t((5,), "float32"), _t((5,), "float32", seed=1), _t((5,), "float32", seed=2)]),
        ("_foreach_maximum_ list", lambda a, b: (torch._foreach_maximum_([a], [b]), a)[1],
         lambda: [_t((5,), "bfloat16"), _t((5,), "bfloat16", seed=1)]),
        ("_foreach_lerp_ scalar", lambda a, b: (torch._foreach_lerp_([a], [b], 0.3), a)[1],
         lambda: [_t((5,), "float32"), _t((5,), "float32", seed=1)]),
    ]

    # Kernel-table ops with neither a lowering nor a decomposition: the host C kernel on host copies.
    G["staged_host_kernels"] = [
        ("histc int32 (the CPU has none)", lambda x: torch.histc(x, bins=8, min=0, max=7),
         lambda: [torch.randint(0, 8, (50,), dtype=torch.int32)],
         lambda x: torch.histc(x.float(), bins=8, min=0, max=7).to(torch.int32)),
        ("histc out=", lambda x: torch.histc(x, bins=5, out=torch.empty(0, device=x.device)),
         lambda: [_t((40,), "float32")]),
        ("linalg_solve_triangular", lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
         lambda: [torch.randn(4, 4).triu() + 4 * torch.eye(4), _t((4, 3), "float32")]),
        ("_grouped_mm and its input gradient", lambda a, b, o: torch.cat([
            torch._grouped_mm(a, b, offs=o).flatten(),
            torch.autograd.grad(torch._grouped_mm(a.requires_grad_(), b, offs=o).float().sum(), a)[0].flatten()]),
         lambda: [_t((6, 16), "bfloat16"), _t((2, 16, 8), "bfloat16", seed=1), torch.tensor([2, 6], dtype=torch.int32)]),
    ]
    G["pow_scalar_base"] = [
        ("pow number ** float tensor (rotary inverse frequencies)", lambda e: torch.pow(10000.0, e),
         lambda: [torch.arange(0, 8, 2, dtype=torch.float32) / 8]),
        ("pow int ** int64 tensor", lambda e: 2 ** e, lambda: [torch.arange(6)]),
        ("pow float ** int tensor promotes", lambda e: 2.5 ** e, lambda: [torch.arange(5, dtype=torch.int32)]),
        ("pow out=", lambda e: torch.pow(0.5, e, out=torch.empty(0, dtype=e.dtype, device=e.device)),
         lambda: [_t((3, 2), "bfloat16")]),
    ]

    def _adam(p, g, fused, amsgrad=False):
        p = torch.nn.Parameter(p)
        opt = torch.optim.AdamW([p], lr=0.1, weight_decay=0.01, fused=fused, foreach=None if fused else True,
                                amsgrad=amsgrad)
        for _ in range(2):
            p.grad = g.clone()
            opt.step()
        return p.detach()
    for fused in (True, False):
        G["foreach_optim"].append((f"AdamW fused={fused}", lambda p, g, f=fused: _adam(p, g, f),
                                   lambda: [_t((4, 3), "float32"), _t((4, 3), "float32", seed=1)]))
    G["foreach_optim"].append(("AdamW fused amsgrad bfloat16", lambda p, g: _adam(p, g, True, True),
                               lambda: [_t((4, 3), "bfloat16"), _t((4, 3), "bfloat16", seed=1)]))

    def _graph(x, i):
        v, idx = torch.sort(x, 1)
        c = torch.cumsum(v, 1)
        m, mi = torch.max(c, 0)
        t = torch.topk(x, 2, 1).values
        return (c.flip(0).roll(1, 1) + x[i].sum(), m, mi, t, torch.scatter_reduce(x, 1, idx[:, :2], t, "amax"))
    G["compiled"] = [("sort, cumsum, max.dim, topk, flip, roll, index, scatter_reduce in one graph",
                      torch.compile(_graph, backend="tpu", fullgraph=True, dynamic=False),
                      lambda: [_t((4, 6), "float32"), torch.tensor([3, 1])], _graph)]
    G["zero_size"] = [
        ("mm with an empty inner dim", lambda a, b: torch.mm(a.t(), b), lambda: [_t((0, 5), "float32"), _t((0, 3), "float32")]),
        ("sum over an empty transposed view", lambda x: torch.sum(x.t(), 1), lambda: [_t((0, 3), "float32")]),
        ("linear grad with an empty batch", lambda x, w: torch.autograd.grad(
            torch.nn.functional.linear(x, w.requires_grad_()).sum(), w)[0],
         lambda: [_t((0, 3), "float32"), _t((4, 3), "float32")]),
    ]
    return G


def _run_all():
    import torch
    import torch_tpu
    res = {}
    for group, cases in GROUPS.items():
        failed, staged = [], []
        for label, fn, make, *ref in cases:
            try:
                xs = make()
                want = (ref[0] if ref else fn)(*[x.clone() for x in xs])
                torch_tpu.reset_fallback_report()
                got = fn(*[x.to("tpu") for x in xs])
                torch.tpu.synchronize()
                fb = {k: v for k, v in torch_tpu.fallback_report().items() if v}
                if isinstance(got, tuple):  # several outputs (values, indices)
                    got, want = tuple(g.cpu() for g in got), tuple(want)
                else:
                    got = got.cpu()
                torch.testing.assert_close(got, want, equal_nan=True)
                if fb:
                    staged.append(f"{label}: {sorted(fb)}")
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failed.append(f"{label}: {type(e).__name__}: {str(e)[:400]}")
        res[group] = {"failed": failed, "staged": staged, "cases": len(cases)}
    print(json.dumps(res))


GROUPS = _groups()

if __name__ == "__main__":
    _run_all()


@pytest.fixture(scope="module")
def results():
    e = dict(os.environ)
    for k in ("TORCH_TPU_PJRT_PLUGIN", "TORCH_TPU_PJRT_OPTIONS", "TORCH_TPU_PJRT_MEMORY"):
        e.pop(k, None)
    e.update({"TORCH_TPU_DRIVER": "pjrt", "TORCH_TPU_HOST_DEVICES": "2", "PYTHONPATH": ROOT})
    try:  # XLA's CPU plugin by path: an installed libtpu would otherwise be chosen first
        import xla_plugins.xla_cpu_pjrt as m
        e["TORCH_TPU_PJRT_PLUGIN"] = os.path.join(os.path.dirname(m.__file__), "xla_cpu_pjrt.so")
    except ImportError:
        pass
    p = subprocess.run([sys.executable, os.path.abspath(__file__)], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_group(results, group):
    r = results[group]
    assert not r["failed"], "\n".join(r["failed"][:20])
    assert not r["staged"], "ran on the CPU fallback: " + ", ".join(r["staged"][:20])
