"""Shared machinery of the OpInfo conformance suite (tests/test_opinfo.py) and
its report (tools/opinfo_report.py): the one copy of the logic that picks ops
from PyTorch's OpInfo database, runs each sample on "tpu" and on the CPU, and
classifies the outcome.

Outcomes, per (op, dtype, mode) where mode is "forward" or "grad":
  pass      every sample that ran matched the CPU result
  fallback  some sample reached PyTorch's CPU fallback (TORCH_TPU_FALLBACK=error
            turned it into NotImplementedError); `fallback_ops` names the ATen ops
  fail      some sample gave a wrong result or an error the CPU did not give;
            `error` is a one-line description of the first one
  skip      nothing ran: no sample, or every sample skipped; `reason` says why

Import this module only after the tpu device is set up (the test conftest or
opinfo_report.py does that); it imports torch_tpu itself.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re
import sys
import time
from typing import Any, Callable

import torch
import torch_tpu  # noqa: F401  (registers the device)
from torch_tpu import _decomp
from torch.utils import _pytree as pytree

try:
    import expecttest  # noqa: F401  (torch.testing._internal.common_utils imports it)
except ImportError:  # pragma: no cover - only where the test extra is not installed
    # common_utils only subclasses expecttest.TestCase; nothing here uses it.
    import sys
    import types
    import unittest

    _stub = types.ModuleType("expecttest")
    _stub.TestCase = unittest.TestCase
    sys.modules["expecttest"] = _stub

from torch.testing._internal.common_device_type import toleranceOverride  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

DEVICE = "tpu"

# The LLM op set: OpInfo names (every variant of each, less EXCLUDED_VARIANTS).
OP_NAMES = [
    "add", "sub", "mul", "div", "neg", "abs", "sign", "reciprocal", "sqrt", "rsqrt",
    "exp", "exp2", "expm1", "log", "log1p", "log2", "sin", "cos", "tan", "tanh",
    "sigmoid", "erf", "pow", "clamp", "clamp_min", "clamp_max", "floor", "ceil",
    "round", "trunc", "fmod", "remainder", "maximum", "minimum", "where",
    "masked_fill", "lerp", "addcmul", "addcdiv",
    "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "bitwise_left_shift", "bitwise_right_shift",
    "isnan", "isinf", "isfinite", "nan_to_num",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.softplus", "nn.functional.leaky_relu", "nn.functional.hardtanh",
    "nn.functional.mish",
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "any",
    "all", "var", "std", "var_mean", "norm", "linalg.vector_norm", "logsumexp",
    "cumsum", "cumprod", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.rms_norm",
    "cat", "stack", "index_select", "gather", "scatter", "scatter_add", "index_put",
    "masked_select", "nonzero", "nn.functional.embedding", "repeat",
    "repeat_interleave", "flip", "roll", "triu", "tril", "sort", "argsort", "topk",
    "unique", "isin", "bincount",
    "median", "nanmedian", "kthvalue", "mode", "searchsorted", "bucketize", "put", "index_reduce", "histc",
    "mm", "bmm", "addmm", "baddbmm", "addmv", "dot", "matmul", "nn.functional.linear",
    "nn.functional.scaled_dot_product_attention",
    "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
]

# OpInfo variants of the ops above that are left out, and why.
EXCLUDED_VARIANTS = {
    "max.binary": "binary form of max is torch.maximum, tested as 'maximum'",
    "min.binary": "binary form of min is torch.minimum, tested as 'minimum'",
    "norm.nuc": "nuclear norm needs an SVD; outside the LLM op set",
    "bmm.triton_optimized": "CUDA-only Triton DSL override of bmm",
    "nn.functional.silu.complex": "complex dtypes only",
}

# dtypes the suite covers, in this order (each op: those its OpInfo declares for CPU).
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.bool, torch.uint8]

# Samples whose result is not a deterministic function of the inputs.
# {op test name: (predicate(sample) -> bool, reason)}.
SAMPLE_SKIPS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "nn.functional.scaled_dot_product_attention": (
        lambda s: s.kwargs.get("dropout_p", 0.0) > 0.0,
        "dropout_p > 0 draws random numbers: not comparable with the CPU",
    ),
}

LOW_PRECISION_TOL = dict(rtol=1.6e-2, atol=1e-2)  # as PyTorch's OpInfo tests use for bf16/f16

_FALLBACK_RE = re.compile(r"(\S+)(?: \(tensor arguments:[^)]*\))? has no native tpu kernel and TORCH_TPU_FALLBACK=error")


def driver() -> str:
    """The tpu device's driver in this process ("host" or "pjrt")."""
    return torch_tpu._C.selected_driver()


def known_gaps_name() -> str:
    """Name of the KNOWN_GAPS block of tests/test_opinfo.py for this driver."""
    d = driver()
    return "KNOWN_GAPS" if d == "host" else f"KNOWN_GAPS_{d.upper()}"


def test_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def selected_ops():
    """[(test name, OpInfo)] of the op set, in OP_NAMES order."""
    by_name: dict[str, list] = {}
    for op in op_db:
        by_name.setdefault(op.name, []).append(op)
    out = []
    for name in OP_NAMES:
        if name not in by_name:
            raise LookupError(f"OpInfo database has no op named {name!r}")
        for op in by_name[name]:
            if test_name(op) not in EXCLUDED_VARIANTS:
                out.append((test_name(op), op))
    return out


def op_dtypes(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


def cases(dtypes=None):
    """[(test name, OpInfo, dtype)] for every op of the set and every dtype of
    DTYPES (or of `dtypes`) that its OpInfo supports on CPU."""
    out = []
    for name, op in selected_ops():
        for d in op_dtypes(op):
            if dtypes is None or d in dtypes:
                out.append((name, op, d))
    return out


def grad_cases():
    """[(test name, OpInfo)] for the ops whose OpInfo supports autograd in float32."""
    return [(n, op) for n, op in selected_ops()
            if op.supports_autograd and torch.float32 in op_dtypes(op)]


# Widened float32 tolerances, each with its measured reason. Kept explicit and
# small: everything else uses PyTorch's defaults.
WIDENED_TOL = {
    # Fused flash attention sums in another order than CPU's math path; over
    # random inputs its max error vs a float64 reference is 2.7e-6 (CPU's:
    # 2.1e-6), but samples with large logits differ from CPU by up to 1.5e-5.
    ("nn.functional.scaled_dot_product_attention", torch.float32): dict(rtol=1e-4, atol=3e-5),
    # Normalised size 1: the exact weight gradient is 0; PyTorch's CPU kernel
    # returns rounding noise of 2.4e-5 where tpu returns 0.
    ("nn.functional.layer_norm", torch.float32): dict(rtol=1.3e-6, atol=3e-5),
    # Sample 12, [5, 5, 10, 10] @ [10] with outputs up to ~300: the CPU's BLAS on an
    # Intel Xeon with AVX-512 is 1.77e-5 off the float64 product, tpu 2.25e-5 (both about
    # one float32 ulp there), 3.05e-5 apart; the default atol 1e-5 is below that ulp.
    ("matmul", torch.float32): dict(rtol=1.3e-6, atol=4e-5),
    # The CPU's own attention op: its float32 flash kernel is up to 2.3e-5 off
    # the float64 result and 1.2e-4 off the float64 gradients (sample 1,
    # gradients up to 42); tpu computes float32 inputs in float64 (4.5e-7, 9.3e-7).
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", torch.float32): dict(rtol=1e-4, atol=1.5e-4),
    # Antialiased bilinear, sample 2 (scale factors 1.7, 0.9; outputs up to 8.6): the CPU's
    # float32 weights put it 2.1e-5 off the float64 result, tpu's float64 weights 9e-7.
    ("_upsample_bilinear2d_aa", torch.float32): dict(rtol=1.3e-6, atol=3e-5),
}


def tolerance(op, dtype) -> dict:
    """rtol/atol for assert_close: PyTorch's per-dtype defaults (bf16/f16: the
    OpInfo tests' 1.6e-2/1e-2), widened by any toleranceOverride the OpInfo
    declares for all of its tests on CPU (not those aimed at one test class)."""
    if dtype in (torch.bfloat16, torch.float16):
        rtol, atol = LOW_PRECISION_TOL["rtol"], LOW_PRECISION_TOL["atol"]
    else:
        rtol = atol = None
    for di in op.decorators:
        decs = getattr(di, "decorators", None)
        if decs is None or di.cls_name is not None or di.test_name is not None:
            continue
        if di.device_type not in (None, "cpu") and not (
                isinstance(di.device_type, (list, tuple)) and "cpu" in di.device_type):
            continue
        if di.dtypes is not None and dtype not in di.dtypes:
            continue
        for d in decs if isinstance(decs, (list, tuple)) else [decs]:
            if isinstance(d, toleranceOverride) and dtype in d.d:
                t = d.d[dtype]
                rtol = t.rtol if rtol is None else max(rtol, t.rtol)
                atol = t.atol if atol is None else max(atol, t.atol)
    wide = WIDENED_TOL.get((op.name + ("." + op.variant_test_name if op.variant_test_name else ""), dtype))
    if wide is not None:
        rtol = wide["rtol"] if rtol is None else max(rtol, wide["rtol"])
        atol = wide["atol"] if atol is None else max(atol, wide["atol"])
    if rtol is None:
        return {}
    return dict(rtol=rtol, atol=atol)


# ---- one sample ---------------------------------------------------------------


@dataclasses.dataclass
class SampleOutcome:
    kind: str  # "pass" | "fallback" | "fail" | "skip"
    detail: str = ""  # fallback: the ATen op; fail: one-line error; skip: reason
    raised: bool = False  # fail: the device raised (else: a wrong result)


def fallback_op(exc: BaseException) -> str | None:
    """The ATen op named by a TORCH_TPU_FALLBACK=error NotImplementedError, else None."""
    if not isinstance(exc, NotImplementedError):
        return None
    m = _FALLBACK_RE.search(str(exc))
    return m.group(1) if m else None


def describe_error(exc: BaseException) -> str:
    """One line: the exception type and first message line; for assert_close
    mismatches also the mismatch count and greatest differences."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    head = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if isinstance(exc, AssertionError):
        extra = [ln for ln in lines[1:] if ln.startswith(("Mismatched elements", "Greatest", "The failure"))
                 or "do not match" in ln]
        if extra:
            head += " " + "; ".join(extra)
    return head[:400]


def _storage_layout_matters(x: torch.Tensor) -> bool:
    """The tensor is a view whose storage holds more than its elements (an
    offset, or room before or after them): `.to(device)` would copy only the
    elements, and an op that addresses the storage (as_strided and its family)
    would read other memory on the device than on the CPU."""
    if x.layout != torch.strided or x.is_sparse or x.numel() == 0:
        return False
    span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))
    return x.storage_offset() != 0 or x.untyped_storage().nbytes() != span * x.element_size()


def _to_device(x, requires_grad=False):
    if isinstance(x, torch.Tensor):
        x0 = x.detach()
        if _storage_layout_matters(x0):
            # the whole storage to the device, then the same view of it
            whole = torch.empty(0, dtype=x0.dtype).set_(x0.untyped_storage())
            t = whole.to(DEVICE).as_strided(x0.shape, x0.stride(), x0.storage_offset()).detach()
        else:
            t = x0.to(DEVICE)
        return t.requires_grad_(x.requires_grad) if requires_grad else t
    return x


def _cpu_leaf(x):
    if isinstance(x, torch.Tensor):
        return x.detach().requires_grad_(x.requires_grad)
    return x


def _tensors(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _sync_quietly():
    for i in range(torch.tpu.device_count()):
        try:
            torch.tpu.synchronize(i)
        except Exception:
            pass


def _named_devices(args, kwargs) -> set:
    """Device types a sample names as a positional argument (`x.to("cpu", ...)`):
    the op is asked to put its result there, so an output on that device is
    right. (A `device=` keyword is rewritten to the device under test.)"""
    found = set()
    for a in pytree.tree_leaves((args, kwargs)):
        if isinstance(a, torch.device):
            found.add(a.type)
        elif isinstance(a, str):
            try:
                found.add(torch.device(a).type)
            except (RuntimeError, ValueError):
                pass
    return found


def _check_on_device(result, allowed=frozenset()):
    for t in _tensors(result):
        if t.device.type != DEVICE and t.device.type not in allowed:
            raise AssertionError(f"output on {t.device}, expected the {DEVICE} device")


# Arguments an op requires on the CPU whatever the device of its other inputs
# (CUDA raises for them on the GPU as we do): (OpInfo name -> positional index
# into args). The sample keeps them on the CPU.
_CPU_ARGS = {
    "tensor_split": 0,  # tensor_indices_or_sections: "expected ... to be on cpu"
}


def _device_sample(name, sample, requires_grad=False):
    """The sample's input, args and kwargs on the device (see _to_device),
    with the arguments of _CPU_ARGS left on the CPU."""
    move = (lambda x: _to_device(x, requires_grad=True)) if requires_grad else _to_device
    dev_in, dev_args, dev_kwargs = pytree.tree_map(move, (sample.input, sample.args, sample.kwargs))
    i = _CPU_ARGS.get(name)
    if i is not None and i < len(sample.args) and isinstance(sample.args[i], torch.Tensor):
        dev_args = tuple(dev_args[:i]) + (sample.args[i],) + tuple(dev_args[i + 1:])
    return dev_in, dev_args, dev_kwargs


def _cpu_is_random(op, sample) -> bool:
    """The op draws random numbers: its OpInfo wraps it in PyTorch's
    wrapper_set_seed (randn, randint, normal.number_mean: reseeded before each
    call, so the CPU's values are fixed; the device has its own generator and
    stream, as CUDA has), or its CPU run moves the CPU generator. Values cannot
    be compared across devices, shapes and dtypes can. Only asked after a value
    mismatch, so an op whose device values equal the CPU's is still compared by
    value."""
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return True
    saved = torch.random.get_rng_state()
    try:
        torch.manual_seed(1234)
        before = torch.random.get_rng_state()
        _call(op, sample.input, sample.args, sample.kwargs)
        return not torch.equal(before, torch.random.get_rng_state())
    except Exception:
        return False
    finally:
        torch.random.set_rng_state(saved)


def _to_cpu(result):
    return pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, result)


def _call(op, sample_input, args, kwargs):
    return op(sample_input, *args, **kwargs)


def _arg(sample, pos, name, default):
    """An argument of the op's call: positional index `pos` of sample.args
    (after the input), else keyword `name`, else `default`."""
    if len(sample.args) > pos:
        return sample.args[pos]
    return sample.kwargs.get(name, default)


def _exact(got, expected):
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def _distinct_along(idx, dim, permutation):
    """The indices along `dim` are distinct (and, for a permutation, cover 0..n-1)."""
    if idx.numel() == 0:
        return
    srt = idx.sort(dim).values
    if permutation:
        n = idx.shape[dim]
        shape = [1] * idx.dim()
        shape[dim] = n
        ok = bool((srt == torch.arange(n).reshape(shape)).all())
    else:
        ok = bool((srt.diff(dim=dim) != 0).all()) if idx.shape[dim] > 1 else True
    if not ok:
        raise AssertionError(f"indices along dim {dim} are not {'a permutation' if permutation else 'distinct'}")


def _compare_sort(sample, got, expected, tol):
    # sort(input, dim=-1, descending=False, *, stable=False): with ties and
    # stable=False the order of the tied indices is unspecified, so the values
    # must match and the indices must point at them.
    torch.testing.assert_close(got[0], expected[0], equal_nan=True, **tol)
    if sample.kwargs.get("stable", False) or sample.input.dim() == 0:
        _exact(got[1], expected[1])
    else:
        dim = _arg(sample, 0, "dim", -1)
        _distinct_along(got[1], dim, permutation=True)
        _exact(sample.input.gather(dim, got[1]), got[0])


def _compare_argsort(sample, got, expected, tol):
    # argsort(input, dim=-1, descending=False, stable=False): see _compare_sort.
    if sample.kwargs.get("stable", False) or sample.input.dim() == 0:
        _exact(got, expected)
    else:
        dim = _arg(sample, 0, "dim", -1)
        _distinct_along(got, dim, permutation=True)
        _exact(sample.input.gather(dim, got), sample.input.gather(dim, expected))


def _compare_topk(sample, got, expected, tol):
    # topk(input, k, dim=-1, largest=True, sorted=True): tied indices are
    # unspecified, and with sorted=False so is the order of the k results.
    dim = _arg(sample, 1, "dim", -1)
    values, exp_values = got[0], expected[0]
    if not _arg(sample, 3, "sorted", True) and values.dim() > 0:
        values, exp_values = values.sort(dim).values, exp_values.sort(dim).values
    torch.testing.assert_close(values, exp_values, equal_nan=True, **tol)
    if sample.input.dim() == 0:
        _exact(got[1], expected[1])
    else:
        _distinct_along(got[1], dim, permutation=False)
        _exact(sample.input.gather(dim, got[1]), got[0])


# Ops whose result is not unique, and how to check it instead of comparing
# with the CPU's element by element. {op test name: fn(sample, got, expected, tol)}
# with got, expected on the CPU; raises AssertionError on a mismatch.
def _compare_batch_norm_as_on_cuda(sample, got, expected, tol):
    """native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update: an
    accelerator's saved statistics differ from the CPU's by design. PyTorch
    marks these OpInfos' own device-vs-CPU test (test_compare_cpu) an expected
    failure, and its decomposition (native_batch_norm_helper) spells the rule out
    for devices other than the CPU: the statistics are in the accumulation type
    (float32 for bfloat16/float16 inputs, as CUDA's kernel keeps them), and in
    evaluation they are the running mean and 1/sqrt(running_var + eps), where
    the CPU returns empty tensors. The normalised output (and
    _batch_norm_with_update's reserve) is compared with the CPU's by value; the
    statistics against that rule, computed from the CPU's values."""
    # (weight, bias[, running_mean, running_var][, training], momentum, eps):
    # _batch_norm_with_update has no training flag (always training), the
    # no-stats overload of _native_batch_norm_legit no running statistics
    x, args = sample.input, sample.args
    flags = [a for a in args if isinstance(a, bool)]
    training = flags[0] if flags else True
    eps = args[-1]
    acc = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    torch.testing.assert_close(got[0], expected[0], equal_nan=True, **tol)
    if training:
        want_mean, want_rstd = expected[1], expected[2]
    else:
        mean, var = (args[2], args[3]) if len(args) >= 6 else (None, None)
        if mean is None or var is None:  # no running statistics: nothing to compare beyond the output
            return
        want_mean, want_rstd = mean, torch.rsqrt(var.to(acc) + eps)
    for g, w in ((got[1], want_mean), (got[2], want_rstd)):
        if g.dtype != acc:
            raise AssertionError(f"saved statistic {g.dtype}, expected the accumulation type {acc}")
        torch.testing.assert_close(g, w.to(acc), equal_nan=True, **tol)
    if len(got) > 3:
        if got[3].shape != expected[3].shape or got[3].dtype != expected[3].dtype:
            raise AssertionError(f"reserve {tuple(got[3].shape)} {got[3].dtype}, "
                                 f"expected {tuple(expected[3].shape)} {expected[3].dtype}")


def _compare_normwise(sample, got, expected, tol):
    """Matrix functions (matrix_exp): the error is measured per matrix against
    its largest entry, as such results are accurate (an entry of 0.1 next to one
    of 9e4 carries the rounding of the large ones: on OpInfo's float32 samples
    the CPU is 3.2e-6 of the largest entry off the float64 result, tpu 2.1e-6,
    and elementwise they differ by 1e-3 relative at small entries). Shapes and
    dtypes exactly; the bound is the dtype's rtol, at least 1e-5."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise AssertionError(f"output {tuple(got.shape)} {got.dtype}, "
                             f"expected {tuple(expected.shape)} {expected.dtype}")
    if got.numel() == 0:
        return
    g, e = got.double(), expected.double()
    if not torch.equal(g.isnan(), e.isnan()):
        raise AssertionError(f"NaN at {int(g.isnan().sum())} entries, expected at {int(e.isnan().sum())}")
    scale = e.abs().amax((-2, -1), keepdim=True).clamp(min=1.0)
    err = ((g - e).abs() / scale).nan_to_num(nan=0.0)
    bound = max(tol.get("rtol") or 0.0, 1e-5 if got.dtype != torch.float64 else 1e-12)
    if err.max().item() > bound:
        raise AssertionError(f"normwise error {err.max().item():.3g} of the largest entry, more than {bound:g}")


COMPARATORS: dict[str, Callable] = {
    "matrix_exp": _compare_normwise,
    "native_batch_norm": _compare_batch_norm_as_on_cuda,
    "_native_batch_norm_legit": _compare_batch_norm_as_on_cuda,
    "_batch_norm_with_update": _compare_batch_norm_as_on_cuda,
    "sort": _compare_sort,
    "argsort": _compare_argsort,
    "topk": _compare_topk,
}


# Ops whose input gradients are checked by a comparator of one tensor pair.
GRAD_COMPARATORS: dict[str, Callable] = {
    "matrix_exp": _compare_normwise,  # the gradient is a matrix exponential's block
}


_RANDOM_RE = re.compile(r"random|nondetermin|non-determin", re.I)
_random_ops = None
_UNINITIALISED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}


def random_ops() -> set:
    """Test names of the OpInfos outside OP_NAMES whose result is random:
    those that PyTorch's own device-vs-CPU test (test_compare_cpu) skips with a
    reason about randomness or nondeterminism, and the empty family (their
    outputs are uninitialised memory; PyTorch skips empty_strided's comparison
    with a bare "Skipped!"). Their results are checked by _compare_meta (shape,
    dtype) instead of by value."""
    global _random_ops
    if _random_ops is None:
        _random_ops = {test_name(op) for op in op_db if op.name in _UNINITIALISED and op.name not in OP_NAMES}
        for op in op_db:
            if op.name in OP_NAMES:
                continue
            for di in op.decorators:
                if getattr(di, "test_name", None) != "test_compare_cpu":
                    continue
                decs = di.decorators if isinstance(di.decorators, (list, tuple)) else [di.decorators]
                for d in decs:
                    cells = [c.cell_contents for c in (getattr(d, "__closure__", None) or ())]
                    if any(isinstance(c, str) and _RANDOM_RE.search(c) for c in cells):
                        _random_ops.add(test_name(op))
    return _random_ops


def _compare_meta(sample, got, expected, tol):
    # a random op: same structure, shapes and dtypes; values not comparable
    g, e = pytree.tree_flatten(got), pytree.tree_flatten(expected)
    if g[1] != e[1]:
        raise AssertionError(f"output structure differs: {g[1]} vs {e[1]}")
    for a, b in zip(g[0], e[0]):
        if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            raise AssertionError(f"output {tuple(a.shape)} {a.dtype}, expected {tuple(b.shape)} {b.dtype}")


def _compare(name, sample, got, expected, tol):
    cmp = COMPARATORS.get(name) or (_compare_meta if name in random_ops() else None)
    if cmp is None:
        torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    else:
        cmp(sample, got, expected, tol)


def run_forward_sample(name, op, sample, tol: dict) -> SampleOutcome:
    """Runs one sample on the device and on the CPU and compares."""
    dev_in, dev_args, dev_kwargs = _device_sample(name, sample)
    if "device" in dev_kwargs:  # factory functions (arange, full, ...) make their result there
        dev_kwargs = dict(dev_kwargs, device=DEVICE)
    cpu_exc = expected = None
    try:
        expected = sample.output_process_fn_grad(_call(op, sample.input, sample.args, sample.kwargs))
    except Exception as e:  # the device must fail the same way
        cpu_exc = e
    try:
        got = sample.output_process_fn_grad(_call(op, dev_in, dev_args, dev_kwargs))
        _check_on_device(got, _named_devices(dev_args, dev_kwargs))
        got = _to_cpu(got)  # waits for the queue: surfaces asynchronous errors
    except Exception as e:
        _sync_quietly()
        fb = fallback_op(e)
        if fb is not None:
            return SampleOutcome("fallback", fb)
        if cpu_exc is not None:
            return SampleOutcome("pass", "raised like the CPU")
        return SampleOutcome("fail", describe_error(e), raised=True)
    if cpu_exc is not None:
        return SampleOutcome("fail", f"CPU raised ({describe_error(cpu_exc)}) but {DEVICE} returned a result")
    try:
        _compare(name, sample, got, expected, tol)
    except Exception as e:
        if not _cpu_is_random(op, sample):
            return SampleOutcome("fail", describe_error(e))
        try:
            _compare_meta(sample, got, expected, tol)
        except Exception as e2:
            return SampleOutcome("fail", describe_error(e2))
    return SampleOutcome("pass")


def _grads_of(op, sample_input, args, kwargs, process):
    """Forward, sum of the differentiable float outputs, backward; the leaves'
    grads in flattening order. None when no output is differentiable."""
    leaves = [t for t in _tensors((sample_input, args, kwargs)) if t.requires_grad]
    out = process(_call(op, sample_input, args, kwargs))
    outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
    if not outs or not leaves:
        return None
    loss = outs[0].sum()
    for o in outs[1:]:
        loss = loss + o.sum()
    loss.backward()
    return [t.grad for t in leaves]


def run_grad_sample(name, op, sample, tol: dict) -> SampleOutcome:
    """Backward of sum(outputs) on both devices; compares the input grads."""
    cpu_tree = pytree.tree_map(_cpu_leaf, (sample.input, sample.args, sample.kwargs))
    dev_tree = _device_sample(name, sample, requires_grad=True)
    cpu_exc = expected = None
    try:
        expected = _grads_of(op, *cpu_tree, sample.output_process_fn_grad)
    except Exception as e:
        cpu_exc = e
    if cpu_exc is None and expected is None:
        return SampleOutcome("skip", "no differentiable float output or no input requiring grad")
    try:
        got = _grads_of(op, *dev_tree, sample.output_process_fn_grad)
        _check_on_device([g for g in (got or []) if g is not None])
        got = _to_cpu(got)
    except Exception as e:
        _sync_quietly()
        fb = fallback_op(e)
        if fb is not None:
            return SampleOutcome("fallback", fb)
        if cpu_exc is not None:
            return SampleOutcome("pass", "raised like the CPU")
        return SampleOutcome("fail", describe_error(e), raised=True)
    if cpu_exc is not None:
        return SampleOutcome("fail", f"CPU raised ({describe_error(cpu_exc)}) but {DEVICE} returned grads")
    try:
        if name in random_ops():
            _compare_meta(sample, got, expected, tol)
        elif name in GRAD_COMPARATORS:
            if len(got) != len(expected):
                raise AssertionError(f"{len(got)} grads, expected {len(expected)}")
            for g, e in zip(got, expected):
                if (g is None) != (e is None):
                    raise AssertionError("a grad is None on one device only")
                if g is not None:
                    GRAD_COMPARATORS[name](sample, g, e, tol)
        else:
            torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    except Exception as e:
        return SampleOutcome("fail", "grad: " + describe_error(e))
    return SampleOutcome("pass")


# ---- one (op, dtype, mode) ------------------------------------------------------


@dataclasses.dataclass
class CaseResult:
    name: str
    dtype: str
    mode: str  # "forward" | "grad"
    status: str = "skip"  # "pass" | "fallback" | "fail" | "skip"
    samples: int = 0  # samples run (not skipped)
    passed: int = 0
    fallback_ops: dict = dataclasses.field(default_factory=dict)  # ATen op -> samples
    error: str = ""  # first failure, "sample N (summary): message"
    error_raised: bool = False  # the first failure: the device raised (else a wrong result)
    failures: int = 0
    skipped: dict = dataclasses.field(default_factory=dict)  # reason -> samples
    reason: str = ""  # for status "skip"


class fallback_forbidden:
    """Context manager: TORCH_TPU_FALLBACK=error for its duration (the runtime
    reads the variable on every fallback)."""

    def __enter__(self):
        self._old = os.environ.get("TORCH_TPU_FALLBACK")
        os.environ["TORCH_TPU_FALLBACK"] = "error"
        return self

    def __exit__(self, *exc):
        if self._old is None:
            os.environ.pop("TORCH_TPU_FALLBACK", None)
        else:
            os.environ["TORCH_TPU_FALLBACK"] = self._old
        return False


def _summary(sample) -> str:
    try:
        s = sample.summary()
    except Exception:
        s = repr(sample.name)
    s = re.sub(r', device="[^"]*"', "", s)
    s = s.replace("dtype=torch.", "").replace(", broadcasts_input=False", "").replace(", name=''", "")
    return s if len(s) <= 300 else s[:297] + "..."


def _samples(name, op, dtype, mode, max_samples):
    """[(index, sample, skip reason or None)]; raises what sample generation raises."""
    samples = op.sample_inputs("cpu", dtype, requires_grad=(mode == "grad"))
    if max_samples is not None:
        samples = itertools.islice(samples, max_samples)
    pred, why = SAMPLE_SKIPS.get(name, (None, None))
    return [(i, s, why if pred is not None and pred(s) else None) for i, s in enumerate(samples)]


def run_case(name: str, op, dtype: torch.dtype, mode: str = "forward",
             max_samples: int | None = None) -> CaseResult:
    """Runs the first `max_samples` samples (all when None) of one op/dtype.
    The caller forbids the fallback (fallback_forbidden or monkeypatch)."""
    res = CaseResult(name, dtype_name(dtype), mode)
    tol = tolerance(op, dtype)
    run = run_grad_sample if mode == "grad" else run_forward_sample
    try:
        samples = _samples(name, op, dtype, mode, max_samples)
    except Exception as e:
        res.reason = f"OpInfo sample generation failed: {describe_error(e)}"
        return res
    if not samples:
        res.reason = "the OpInfo yields no samples for this dtype"
        return res
    for i, sample, skip in samples:
        out = SampleOutcome("skip", skip) if skip else run(name, op, sample, tol)
        if out.kind == "skip":
            res.skipped[out.detail] = res.skipped.get(out.detail, 0) + 1
            continue
        res.samples += 1
        if out.kind == "pass":
            res.passed += 1
        elif out.kind == "fallback":
            res.fallback_ops[out.detail] = res.fallback_ops.get(out.detail, 0) + 1
        else:
            res.failures += 1
            if not res.error:
                res.error = f"sample {i} {_summary(sample)}: {out.detail}"
                res.error_raised = out.raised
    if res.failures:
        res.status = "fail"
    elif res.fallback_ops:
        res.status = "fallback"
    elif res.samples:
        res.status = "pass"
    else:
        res.reason = "; ".join(f"{n} sample(s): {r}" for r, n in res.skipped.items())
    return res


def fallback_ops_allowed(name: str, op, dtype: torch.dtype, mode: str,
                         max_samples: int | None = None) -> dict:
    """With the fallback allowed, every ATen op that reaches it (not only the
    first one per sample, which is all that TORCH_TPU_FALLBACK=error shows):
    {ATen op: calls}, from torch_tpu.fallback_report()."""
    old = os.environ.pop("TORCH_TPU_FALLBACK", None)
    try:
        torch_tpu.reset_fallback_report()
        run = run_grad_sample if mode == "grad" else run_forward_sample
        tol = tolerance(op, dtype)
        for _, sample, skip in _samples(name, op, dtype, mode, max_samples):
            if not skip:
                try:
                    run(name, op, sample, tol)
                except Exception:
                    pass
        _sync_quietly()
        return dict(torch_tpu.fallback_report())
    finally:
        if old is not None:
            os.environ["TORCH_TPU_FALLBACK"] = old
        torch_tpu.reset_fallback_report()


# ---- the whole OpInfo database (tools/opinfo_report.py --all) -----------------
#
# Every OpInfo of op_db (all variants), every dtype of ALL_DTYPES that it
# declares for CPU, forward; float32 grad where it supports autograd; and
# complex64 forward where it declares complex64 (reported apart: the share
# of real-dtype cases does not count them). Each case gets one CATEGORY:
#   native      passed; no decomposition ran, no fallback
#   decomposed  passed; some op ran by its torch._decomp decomposition on the device
#   fallback    some sample reached the CPU fallback (fallback_ops names the ATen ops)
#   mismatch    some sample gave a result that differs from the CPU's (`error`: the first)
#   error       the device raised where the CPU did not (`error`: the first)
#   crash       the process running the case died (the case is named; the rest go on)
#   timeout     no result in the time limit (the child was killed)
#   skipped     nothing ran (`reason` says why)
# Cases run in child processes, a chunk each, so that a crash loses one case.

ALL_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.int16,
              torch.int32, torch.int64, torch.uint8, torch.bool]
CATEGORIES = ["native", "decomposed", "fallback", "mismatch", "error", "crash", "timeout",
              "skipped"]
COMPLEX_DTYPES = [torch.complex64]  # complex cases of the database, reported apart


def all_ops():
    """[(test name, OpInfo)] of every OpInfo in op_db, in op_db order."""
    return [(test_name(op), op) for op in op_db]


def all_cases(grad: bool = True):
    """[(test name, dtype name, mode)] of the whole database: forward for every
    dtype of ALL_DTYPES and COMPLEX_DTYPES the OpInfo declares for CPU, and
    float32 grad where it supports autograd. A plain, picklable list: the
    children rebuild the same one and run slices of it."""
    out = []
    for name, op in all_ops():
        supported = op.supported_dtypes("cpu")
        out += [(name, dtype_name(d), "forward") for d in ALL_DTYPES + COMPLEX_DTYPES if d in supported]
        if grad and op.supports_autograd and torch.float32 in supported:
            out.append((name, "float32", "grad"))
    return out


def categorize(res: CaseResult, decomposed: dict) -> str:
    if res.status == "skip":
        return "skipped"
    if res.status == "fallback":
        return "fallback"
    if res.status == "fail":
        return "error" if res.error_raised else "mismatch"
    return "decomposed" if decomposed else "native"


def run_db_case(name: str, dtype: str, mode: str, max_samples: int | None, ops_by_name=None) -> dict:
    """One case of all_cases(), with the fallback forbidden; a JSON-able dict:
    name, dtype, mode, category, samples, passed, fallback_ops (every ATen op,
    from a second run with the fallback allowed), decomposed ({ATen op:
    calls}), error, reason, seconds."""
    t0 = time.perf_counter()
    op = (ops_by_name or dict(all_ops()))[name]
    out = dict(name=name, dtype=dtype, mode=mode, samples=0, passed=0, fallback_ops={}, decomposed={},
               error="", reason="")
    d = getattr(torch, dtype)
    _decomp.reset_decomposition_report()
    with fallback_forbidden():
        res = run_case(name, op, d, mode, max_samples=max_samples)
    decomposed = _decomp.decomposition_report()
    _decomp.reset_decomposition_report()
    out.update(category=categorize(res, decomposed), samples=res.samples, passed=res.passed,
               decomposed=decomposed, error=res.error, reason=res.reason)
    if res.fallback_ops:
        try:
            full = fallback_ops_allowed(name, op, d, mode, max_samples=max_samples)
        except Exception:
            full = {}
        out["fallback_ops"] = full or dict(res.fallback_ops)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


_MARK = "@@opinfo-db "  # prefix of the child's protocol lines on stdout


def _worker_main(argv):
    """Child: runs all_cases()[start:end]; before each case prints
    `@@opinfo-db start <i>`, after it `@@opinfo-db result <json>`."""
    import json
    start, end, max_samples = int(argv[0]), int(argv[1]), argv[2]
    max_samples = None if max_samples == "all" else int(max_samples)
    cases = all_cases()
    ops = dict(all_ops())
    out = sys.stdout
    for i in range(start, min(end, len(cases))):
        name, dtype, mode = cases[i]
        out.write(f"{_MARK}start {i}\n")
        out.flush()
        try:
            r = run_db_case(name, dtype, mode, max_samples, ops)
        except Exception as e:  # outside a sample (the harness itself): say so
            r = dict(name=name, dtype=dtype, mode=mode, category="error", samples=0, passed=0, fallback_ops={},
                     decomposed={}, error=f"outside the samples: {describe_error(e)}", reason="", seconds=0.0)
        r["index"] = i
        _sync_quietly()
        out.write(f"{_MARK}result {json.dumps(r)}\n")
        out.flush()


def run_db_chunked(indices, max_samples, n_cases, chunk=400, case_timeout=120.0, progress=None):
    """Runs the cases all_cases()[i] for i in `indices` (sorted) in child
    processes, `chunk` consecutive cases each. A child that dies marks the case
    it had started "crash" (with its exit status and last stderr line) and a
    new child goes on from the next case; a case with no result in
    `case_timeout` seconds is killed and marked "timeout". Returns the result
    dicts in index order. `progress(result)` is called per case if given."""
    import json
    import selectors
    import subprocess
    import tempfile

    cases = all_cases()
    assert len(cases) == n_cases, "the case list changed under the caller"
    env = dict(os.environ)
    env.setdefault("TORCH_TPU_HOST_DEVICES", "2")
    env.setdefault("TORCH_TPU_HOST_MEMORY", "2G")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    me = os.path.abspath(__file__)
    todo = sorted(indices)
    results = {}

    def record(r):
        results[r["index"]] = r
        if progress:
            progress(r)

    def lost(i, category, why):
        name, dtype, mode = cases[i]
        record(dict(index=i, name=name, dtype=dtype, mode=mode, category=category, samples=0, passed=0,
                    fallback_ops={}, decomposed={}, error=why, reason="", seconds=0.0))

    pos = 0
    while pos < len(todo):
        # a run of consecutive indices, at most `chunk` long
        first = todo[pos]
        end = pos
        while end < len(todo) and todo[end] - first < chunk and todo[end] == first + (end - pos):
            end += 1
        last = todo[end - 1]
        with tempfile.TemporaryFile(mode="w+") as err:
            proc = subprocess.Popen([sys.executable, me, "--worker", str(first), str(last + 1),
                                     "all" if max_samples is None else str(max_samples)],
                                    stdout=subprocess.PIPE, stderr=err, env=env, text=True, bufsize=1)
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            started = None
            deadline = time.monotonic() + case_timeout + 60  # the child's imports
            timed_out = False
            while True:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    timed_out = True
                    proc.kill()
                    break
                line = proc.stdout.readline()
                if not line:
                    break
                if not line.startswith(_MARK):
                    continue
                kind, _, rest = line[len(_MARK):].rstrip("\n").partition(" ")
                if kind == "start":
                    started = int(rest)
                    deadline = time.monotonic() + case_timeout
                elif kind == "result":
                    record(json.loads(rest))
                    started = None
            proc.wait()
            sel.close()
            err.seek(0)
            tail = [ln.strip() for ln in err.read().splitlines() if ln.strip()]
        done_to = max([i for i in results if first <= i <= last], default=first - 1)
        if started is not None:
            if timed_out:
                lost(started, "timeout", f"no result in {case_timeout:.0f} s: killed")
            else:
                lost(started, "crash", f"process died (exit status {proc.returncode})"
                     + (f"; last stderr line: {tail[-1][:300]}" if tail else ""))
            done_to = started
        elif done_to < last:  # died or hung before starting a case: give up on the rest of the chunk
            why = f"child exited with status {proc.returncode} before the case started" + \
                (f"; last stderr line: {tail[-1][:300]}" if tail else "")
            for i in range(done_to + 1, last + 1):
                lost(i, "crash", why)
            done_to = last
        pos = todo.index(done_to) + 1 if done_to in todo else end
    return [results[i] for i in sorted(results)]


def db_totals(results) -> dict:
    """{mode: {category: cases, "total": cases}} for the real-dtype cases
    ("forward", "grad") and the complex ones ("complex"), and the
    native+decomposed share of the real-dtype cases that ran (all but skipped
    ones): "share"/"share_cases", and of the complex ones:
    "complex_share"/"complex_cases"."""
    complex_names = {dtype_name(d) for d in COMPLEX_DTYPES}
    t = {}
    groups = {"forward": lambda r: r["mode"] == "forward" and r["dtype"] not in complex_names,
              "grad": lambda r: r["mode"] == "grad" and r["dtype"] not in complex_names,
              "complex": lambda r: r["dtype"] in complex_names}
    for key, pick in groups.items():
        rs = [r for r in results if pick(r)]
        t[key] = {c: sum(r["category"] == c for r in rs) for c in CATEGORIES}
        t[key]["total"] = len(rs)
    for key, pick in (("", lambda r: r["dtype"] not in complex_names),
                      ("complex_", lambda r: r["dtype"] in complex_names)):
        ran = [r for r in results if r["category"] != "skipped" and pick(r)]
        good = sum(r["category"] in ("native", "decomposed") for r in ran)
        t[key + "share"] = good / len(ran) if ran else 0.0
        t[key + ("share_cases" if not key else "cases")] = (good, len(ran))
    return t


def db_fallback_index(results) -> dict:
    """{ATen op: cases it blocks}, most first."""
    n: dict = {}
    for r in results:
        for aten in r["fallback_ops"]:
            n[aten] = n.get(aten, 0) + 1
    return dict(sorted(n.items(), key=lambda kv: (-kv[1], kv[0])))


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--worker":
    _worker_main(sys.argv[2:])
