"""Property-based differential fuzz: random calls on tpu against the same calls on the CPU.

Each case is drawn from its own generator, seeded by "<seed>:<index>", so any case can be
rerun alone. A case picks an op (elementwise unary/binary, reductions with dtype=, scans,
masked_fill, topk, sort, mm, layer_norm, softmax, where, clamp, attention, copies), a
variant (functional, in-place, out=), dtypes (float32, bfloat16, float16, float64, int8/16/32/64,
uint8, bool) and operands with random shapes (0-size and size-1 dims, 0-dim tensors) and
layouts (contiguous, transposed, sliced, expanded), plus Python scalars. The CPU's answer is the
reference: when the CPU returns, tpu must return the same dtype, shape and values
(torch.testing.assert_close defaults, NaNs equal) and leave the written tensors as the CPU does;
when the CPU raises, tpu must raise too.

Default run: seed TORCH_TPU_FUZZ_SEED (0), TORCH_TPU_FUZZ_CASES cases (400), stopped after
TORCH_TPU_FUZZ_SECONDS (10). `-m slow`: 4 more seeds of 3000 cases each.
Rerun one case, printing the call: `python tests/test_fuzz.py 0:123`.
"""
import math
import os
import random
import sys
import time
import warnings

import pytest
import torch

if __name__ == "__main__":  # standalone repro: the same session setup as pytest's
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import conftest  # noqa: F401

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I8, I16, I32, I64, U8, BOOL = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool
DTYPES = [F32, BF16, F16, F64, I8, I16, I32, I64, U8, BOOL]
FLOATS = [F32, BF16, F16, F64]
SHORT = {F32: "f32", BF16: "bf16", F16: "f16", F64: "f64", I8: "i8", I16: "i16", I32: "i32", I64: "i64",
         U8: "u8", BOOL: "bool"}


# ---- operands ------------------------------------------------------------------------------

class Operand:
    """A tensor built the same way on both devices: random values in a base tensor, then one
    view of it (contiguous, transposed, sliced, expanded)."""

    def __init__(self, rng, shape, dtype, layout=None):
        self.shape, self.dtype = tuple(shape), dtype
        if layout is None:
            layout = rng.choice(["contig", "contig", "transposed", "sliced", "expanded"])
        if layout == "transposed" and len(shape) < 2:
            layout = "contig"
        if layout == "expanded" and not any(s > 1 for s in shape):
            layout = "contig"
        self.layout = layout
        n = len(shape)
        if layout == "transposed":
            self.perm = list(range(n))
            rng.shuffle(self.perm)
            if self.perm == sorted(self.perm):
                self.perm[-1], self.perm[-2] = self.perm[-2], self.perm[-1]
            inv = [self.perm.index(d) for d in range(n)]
            # base.permute(perm) has sizes base_shape[perm[d]] == shape[inv[perm[d]]] == shape[d]
            self.base_shape = tuple(shape[inv[d]] for d in range(n))
        elif layout == "sliced":
            self.starts = [rng.randrange(2) for _ in shape]
            self.base_shape = tuple(2 * s + st for s, st in zip(shape, self.starts))
        elif layout == "expanded":
            big = [d for d, s in enumerate(shape) if s > 1]
            self.ones = set(rng.sample(big, rng.randrange(1, len(big) + 1)))
            self.base_shape = tuple(1 if d in self.ones else s for d, s in enumerate(shape))
        else:
            self.base_shape = self.shape
        self.values = random_values(rng, self.base_shape, dtype)

    def view(self, base):
        if self.layout == "transposed":
            return base.permute(self.perm)
        if self.layout == "sliced":
            return base[tuple(slice(st, st + 2 * s, 2) for s, st in zip(self.shape, self.starts))]
        if self.layout == "expanded":
            return base.expand(self.shape)
        return base

    def make(self, device):
        base = self.values.clone().to(device)
        return base, self.view(base)

    def __repr__(self):
        return f"{SHORT[self.dtype]}{list(self.shape)}{'' if self.layout == 'contig' else ' ' + self.layout}"


def random_values(rng, shape, dtype):
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    if dtype == BOOL:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point:
        v = torch.randn(shape, generator=g, dtype=F64) * 2
        if rng.random() < 0.15 and v.numel() > 0:
            flat = v.view(-1)
            for _ in range(rng.randrange(1, 3)):
                flat[rng.randrange(flat.numel())] = rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0])
        return v.to(dtype)
    lo = 0 if dtype == U8 else -9
    return torch.randint(lo, 10, shape, generator=g, dtype=I64).to(dtype)


def random_shape(rng, ndim=None, allow_empty=True):
    if ndim is None:
        ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 3])
    sizes = [1, 1, 2, 3, 4, 5]
    if allow_empty:
        sizes.append(0)
    return tuple(rng.choice(sizes) for _ in range(ndim))


def broadcast_shape_of(rng, shape):
    """A shape that broadcasts to `shape`: leading dims dropped, some dims set to 1."""
    drop = rng.randrange(len(shape) + 1) if rng.random() < 0.3 else 0
    return tuple(1 if rng.random() < 0.25 else s for s in shape[drop:])


def random_dtype(rng, pool=DTYPES):
    return rng.choice(pool)


def random_scalar(rng, kinds="ifb"):
    kind = rng.choice(kinds)
    if kind == "i":
        return rng.choice([0, 1, 2, -3, 7])
    if kind == "b":
        return rng.choice([True, False])
    return rng.choice([0.5, -1.25, 2.0, 3.7, math.nan, math.inf, 1e-3])


# ---- ops -------------------------------------------------------------------------------------
# A case is (description, build) where build(device) returns (result, written): the call's result
# and the tensors it may have written (bases included), compared after the call.

class Case:
    def __init__(self, text, operands, call, variant="functional", out=None):
        self.text, self.operands, self.call, self.variant, self.out = text, operands, call, variant, out

    def run(self, device):
        made = {}
        written = []
        for name, op in self.operands.items():
            if isinstance(op, Operand):
                base, view = op.make(device)
                made[name] = view
                written.append(base)
            else:
                made[name] = op
        if self.out is not None:
            base, view = self.out.make(device)
            made["out"] = view
            written.append(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = self.call(**made)
        return result, written

    def describe(self):
        ops = ", ".join(f"{k}={v!r}" for k, v in self.operands.items())
        out = f", out={self.out!r}" if self.out is not None else ""
        return f"{self.text} [{self.variant}] {ops}{out}"


UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "floor": torch.floor,
    "round": torch.round, "sign": torch.sign, "reciprocal": torch.reciprocal, "relu": torch.relu,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "isnan": torch.isnan,
    "erf": torch.erf, "trunc": torch.trunc, "rsqrt": torch.rsqrt, "expm1": torch.expm1,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "lt": torch.lt, "ge": torch.ge,
    "fmod": torch.fmod, "remainder": torch.remainder, "logical_and": torch.logical_and,
    "bitwise_and": torch.bitwise_and, "floor_divide": torch.floor_divide,
}
NO_INPLACE = {"relu", "isnan", "maximum", "minimum"}  # no Tensor method with a trailing _ (or none)


def out_operand(rng, shape, natural):
    """An out= tensor: usually the natural dtype, sometimes another; sometimes empty (resized)."""
    dtype = natural if rng.random() < 0.5 else random_dtype(rng)
    if rng.random() < 0.15:
        out = Operand(rng, (0,), dtype, "contig")
    else:
        out = Operand(rng, shape, dtype, rng.choice(["contig", "contig", "transposed", "sliced", "expanded"]))
    out.natural = natural
    return out


# torch.testing.assert_close's defaults, by dtype
TOLERANCE = {F16: (1e-3, 1e-5), BF16: (1.6e-2, 1e-5), F32: (1.3e-6, 1e-5), F64: (1e-7, 1e-7)}


def tolerance(case, dtype):
    """assert_close's tolerance of `dtype`, or of the computation's dtype when an out= tensor is
    more precise than the result it receives (exp(bfloat16, out=float16) is bfloat16-accurate)."""
    natural = getattr(case.out, "natural", None)
    if dtype in TOLERANCE and natural in TOLERANCE and TOLERANCE[natural][0] > TOLERANCE[dtype][0]:
        return TOLERANCE[natural]
    return None


def variant_of(rng, inplace_ok=True, out_ok=True):
    choices = ["functional", "functional"]
    if inplace_ok:
        choices.append("inplace")
    if out_ok:
        choices.append("out")
    return rng.choice(choices)


def natural_dtype(fn, *args, **kw):
    """The dtype the functional call returns on the CPU (float32 if it raises)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn(*[a.values if isinstance(a, Operand) else a for a in args], **kw)
        return (r[0] if isinstance(r, tuple) else r).dtype
    except Exception:
        return F32


def case_unary(rng):
    name = rng.choice(sorted(UNARY))
    fn = UNARY[name]
    x = Operand(rng, random_shape(rng), random_dtype(rng))
    v = variant_of(rng, inplace_ok=name not in NO_INPLACE)
    if v == "inplace":
        return Case(f"x.{name}_()", {"x": x}, lambda x: getattr(x, name + "_")(), v)
    if v == "out":
        out = out_operand(rng, x.shape, natural_dtype(fn, x))
        return Case(f"torch.{name}(x, out=out)", {"x": x}, lambda x, out: fn(x, out=out), v, out)
    return Case(f"torch.{name}(x)", {"x": x}, lambda x: fn(x), v)


def case_binary(rng):
    name = rng.choice(sorted(BINARY))
    fn = BINARY[name]
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng))
    if rng.random() < 0.3 and name not in ("maximum", "minimum"):
        y = random_scalar(rng)
    else:
        y = Operand(rng, broadcast_shape_of(rng, shape), random_dtype(rng))
    v = variant_of(rng, inplace_ok=name not in NO_INPLACE)
    if v == "inplace":
        return Case(f"x.{name}_(y)", {"x": x, "y": y}, lambda x, y: getattr(x, name + "_")(y), v)
    if v == "out":
        out = out_operand(rng, shape, natural_dtype(fn, x, y))
        return Case(f"torch.{name}(x, y, out=out)", {"x": x, "y": y}, lambda x, y, out: fn(x, y, out=out), v, out)
    return Case(f"torch.{name}(x, y)", {"x": x, "y": y}, lambda x, y: fn(x, y), v)


REDUCTIONS = {"sum": torch.sum, "prod": torch.prod, "mean": torch.mean, "amax": torch.amax,
              "amin": torch.amin, "argmax": torch.argmax, "any": torch.any, "all": torch.all,
              "nansum": torch.nansum}
WITH_DTYPE = {"sum", "prod", "mean", "nansum"}


def case_reduction(rng):
    name = rng.choice(sorted(REDUCTIONS))
    fn = REDUCTIONS[name]
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng))
    kw = {}
    nd = max(len(shape), 1)
    if name in ("prod", "argmax", "any", "all"):
        if rng.random() < 0.7:
            kw["dim"] = rng.randrange(-nd, nd)
    elif rng.random() < 0.7:
        kw["dim"] = rng.randrange(-nd, nd) if rng.random() < 0.5 else \
            tuple(sorted(set(rng.randrange(nd) for _ in range(rng.randrange(1, 3)))))
    if "dim" in kw and rng.random() < 0.5:
        kw["keepdim"] = True
    if name in WITH_DTYPE and rng.random() < 0.5:
        kw["dtype"] = random_dtype(rng)
    text = f"torch.{name}(x, {', '.join(f'{k}={v}' for k, v in kw.items())})"
    if "dim" in kw and rng.random() < 0.3:
        try:
            ref = fn(x.values, **kw)
            shape_out = tuple(ref.shape)
        except Exception:
            shape_out = ()
        out = out_operand(rng, shape_out, natural_dtype(fn, x, **kw))
        return Case(text + " out=", {"x": x}, lambda x, out: fn(x, **kw, out=out), "out", out)
    return Case(text, {"x": x}, lambda x: fn(x, **kw))


def case_scan(rng):
    name = rng.choice(["cumsum", "cumprod"])
    fn = getattr(torch, name)
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng))
    nd = max(len(shape), 1)
    dim = rng.randrange(-nd, nd)
    kw = {"dtype": random_dtype(rng)} if rng.random() < 0.5 else {}
    text = f"torch.{name}(x, {dim}, {kw})"
    v = variant_of(rng)
    if v == "inplace":
        return Case(f"x.{name}_({dim}, {kw})", {"x": x}, lambda x: getattr(x, name + "_")(dim, **kw), v)
    if v == "out":
        out = out_operand(rng, shape, natural_dtype(fn, x, dim, **kw))
        return Case(text + " out=", {"x": x}, lambda x, out: fn(x, dim, **kw, out=out), v, out)
    return Case(text, {"x": x}, lambda x: fn(x, dim, **kw))


def case_masked_fill(rng):
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng))
    mask = Operand(rng, broadcast_shape_of(rng, shape), BOOL)
    value = random_scalar(rng) if rng.random() < 0.8 else Operand(rng, (), random_dtype(rng), "contig")
    if rng.random() < 0.5:
        return Case("x.masked_fill_(mask, value)", {"x": x, "mask": mask, "value": value},
                    lambda x, mask, value: x.masked_fill_(mask, value), "inplace")
    return Case("x.masked_fill(mask, value)", {"x": x, "mask": mask, "value": value},
                lambda x, mask, value: x.masked_fill(mask, value))


def case_fill(rng):
    x = Operand(rng, random_shape(rng), random_dtype(rng))
    value = random_scalar(rng)
    if rng.random() < 0.5:
        return Case("x.fill_(value)", {"x": x, "value": value}, lambda x, value: x.fill_(value), "inplace")
    y = Operand(rng, broadcast_shape_of(rng, x.shape), random_dtype(rng))
    return Case("x.copy_(y)", {"x": x, "y": y}, lambda x, y: x.copy_(y), "inplace")


def case_topk(rng):
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng, [F32, BF16, F16, F64, I8, I32, I64, U8]))
    nd = max(len(shape), 1)
    dim = rng.randrange(-nd, nd)
    n = shape[dim] if shape else 1
    if rng.random() < 0.5:
        k = rng.randrange(n + 2)  # n + 1: out of range
        largest = rng.random() < 0.7
        return Case(f"torch.topk(x, {k}, dim={dim}, largest={largest})", {"x": x},
                    lambda x: torch.topk(x, k, dim=dim, largest=largest))
    desc = rng.random() < 0.5
    return Case(f"torch.sort(x, dim={dim}, descending={desc}, stable=True)", {"x": x},
                lambda x: torch.sort(x, dim=dim, descending=desc, stable=True))


def case_mm(rng):
    n, k, m = rng.choice([0, 1, 2, 3, 5]), rng.choice([0, 1, 3, 4]), rng.choice([0, 1, 2, 5])
    dt = random_dtype(rng, FLOATS + [I32, I64])
    dt2 = dt if rng.random() < 0.8 else random_dtype(rng, FLOATS + [I64])
    a = Operand(rng, (n, k), dt)
    b = Operand(rng, (k, m), dt2)
    if rng.random() < 0.3:
        out = out_operand(rng, (n, m), dt)
        return Case("torch.mm(a, b, out=out)", {"a": a, "b": b}, lambda a, b, out: torch.mm(a, b, out=out),
                    "out", out)
    return Case("torch.mm(a, b)", {"a": a, "b": b}, lambda a, b: torch.mm(a, b))


def case_layer_norm(rng):
    shape = random_shape(rng, rng.choice([1, 2, 3]), allow_empty=rng.random() < 0.2)
    dt = random_dtype(rng, FLOATS)
    x = Operand(rng, shape, dt)
    nshape = list(shape[rng.randrange(len(shape)):]) or list(shape[-1:])
    wdt = dt if rng.random() < 0.8 else random_dtype(rng, FLOATS)
    w = Operand(rng, nshape, wdt, "contig") if rng.random() < 0.7 else None
    b = Operand(rng, nshape, wdt, "contig") if rng.random() < 0.7 else None
    case = Case(f"torch.native_layer_norm(x, {nshape}, w, b, 1e-5)", {"x": x, "w": w, "b": b},
                lambda x, w, b: torch.native_layer_norm(x, nshape, w, b, 1e-5))
    case.normalized = math.prod(nshape)
    return case


def case_softmax(rng):
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng, FLOATS + [I64]))
    nd = max(len(shape), 1)
    dim = rng.randrange(-nd, nd)
    kw = {"dtype": random_dtype(rng, FLOATS)} if rng.random() < 0.4 else {}
    fn = rng.choice([torch.softmax, torch.log_softmax])
    return Case(f"torch.{fn.__name__}(x, {dim}, {kw})", {"x": x}, lambda x: fn(x, dim, **kw))


def case_where_clamp(rng):
    shape = random_shape(rng)
    x = Operand(rng, shape, random_dtype(rng))
    if rng.random() < 0.5:
        cond = Operand(rng, broadcast_shape_of(rng, shape), BOOL)
        y = Operand(rng, broadcast_shape_of(rng, shape), random_dtype(rng)) if rng.random() < 0.7 \
            else random_scalar(rng)
        return Case("torch.where(cond, x, y)", {"cond": cond, "x": x, "y": y},
                    lambda cond, x, y: torch.where(cond, x, y))
    lo, hi = random_scalar(rng, "if"), random_scalar(rng, "if")
    if rng.random() < 0.4:
        return Case(f"x.clamp_({lo}, {hi})", {"x": x}, lambda x: x.clamp_(lo, hi), "inplace")
    return Case(f"torch.clamp(x, {lo}, {hi})", {"x": x}, lambda x: torch.clamp(x, lo, hi))


def case_attention(rng):
    dt = random_dtype(rng, [F32, BF16, F64])
    b, h, l, s, e = rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([1, 3]), rng.choice([1, 4]), 4
    q = Operand(rng, (b, h, l, e), dt, "contig")
    k = Operand(rng, (b, h, s, e), dt, "contig")
    v = Operand(rng, (b, h, s, e), dt, "contig")
    rank = rng.choice([0, 1, 2, 4])
    mshape = (b, h, l, s)[4 - rank:]
    mdt = BOOL if rng.random() < 0.5 else dt
    mask = Operand(rng, tuple(1 if rng.random() < 0.3 else d for d in mshape), mdt, "contig")
    return Case("F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
                {"q": q, "k": k, "v": v, "mask": mask},
                lambda q, k, v, mask: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def case_convert(rng):
    x = Operand(rng, random_shape(rng), random_dtype(rng))
    dt = random_dtype(rng)
    return Case(f"x.to({SHORT[dt]})", {"x": x}, lambda x: x.to(dt))


GENERATORS = [
    (case_unary, 4), (case_binary, 5), (case_reduction, 3), (case_scan, 2), (case_masked_fill, 2),
    (case_fill, 1), (case_topk, 2), (case_mm, 2), (case_layer_norm, 1), (case_softmax, 1),
    (case_where_clamp, 2), (case_attention, 1), (case_convert, 1),
]


def make_case(seed, index):
    rng = random.Random(f"{seed}:{index}")
    gens, weights = zip(*GENERATORS)
    return rng.choices(gens, weights)[0](rng)


# ---- comparison ------------------------------------------------------------------------------

def flatten(r):
    if isinstance(r, torch.Tensor):
        return [r]
    if isinstance(r, (tuple, list)):
        return [t for x in r for t in flatten(x)]
    return [r]


def run_cpu(case):
    try:
        result, written = case.run("cpu")
        return flatten(result), written, None
    except Exception as e:  # the reference raises: tpu must raise too
        return None, None, e


def run_tpu(case):
    result, written = case.run("tpu")
    torch.tpu.synchronize()
    return [r.cpu() if isinstance(r, torch.Tensor) else r for r in flatten(result)], [w.cpu() for w in written]


def compare(label, got, ref, values=True, tol=None):
    if isinstance(ref, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{label}: expected a tensor, got {type(got).__name__}"
        assert got.dtype == ref.dtype, f"{label}: dtype {got.dtype}, CPU {ref.dtype}"
        assert got.shape == ref.shape, f"{label}: shape {tuple(got.shape)}, CPU {tuple(ref.shape)}"
        if values:
            rtol, atol = tol or (None, None)
            torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{label}: {m}")
    else:
        assert got == ref or (got != got and ref != ref), f"{label}: {got!r}, CPU {ref!r}"


def nonfinite_to_integer(case, ref):
    """A float operand holding NaN/inf and an integer result: converting those is undefined
    behaviour in C++, and PyTorch's CPU answer depends on its instruction (x86 cvtt* give the
    lowest integer, then truncated). Values are not compared; dtype and shape are."""
    special = any(isinstance(o, Operand) and o.dtype.is_floating_point and not torch.isfinite(o.values).all()
                  for o in case.operands.values())
    return special and any(isinstance(r, torch.Tensor) and not r.dtype.is_floating_point and r.dtype != BOOL
                           for r in ref)


# Differences accepted on purpose, each with its reason: (predicate on the case, reason).
ACCEPTED = [
    (lambda c: c.text.startswith("torch.mm") and c.out is not None and c.out.layout == "expanded"
     and 0 in c.operands["a"].shape + c.operands["b"].shape,
     "PyTorch's CPU mm fills an empty product before its overlap check; tpu checks first"),
    (lambda c: "layer_norm" in c.text and any(isinstance(o, Operand) and not torch.isfinite(o.values.double()).all()
                                              for o in c.operands.values()),
     "layer_norm with inf among its inputs: the CPU's Welford update gives a NaN mean, tpu the inf"),
    (lambda c: "layer_norm" in c.text and (c.operands["x"].layout == "expanded" or c.normalized == 1),
     "layer_norm of constant rows: the CPU's normalised values are rounding noise around 0 "
     "(up to ~2e-5 in bfloat16, past assert_close's atol), tpu's are 0"),
    (lambda c: c.text.startswith("x.masked_fill_") and c.operands["x"].layout == "expanded",
     "masked_fill_ into an expanded tensor (allowed, deprecated): several writes to one element, "
     "whose last one depends on the order of the loop"),
]


def empty_result_dtype_error(ref, error):
    """The CPU returns an empty result before its dtype checks (softmax of an empty int64
    tensor, pow of empty bool tensors into bool); tpu checks dtypes first and raises."""
    return ("dtype" in str(error) or "can't be cast" in str(error)) and all(
        not isinstance(r, torch.Tensor) or r.numel() == 0 for r in ref)


def check_case(seed, index):
    """None when tpu agrees with the CPU, else a one-line failure with its repro."""
    case = make_case(seed, index)
    if any(pred(case) for pred, _ in ACCEPTED):
        return None
    ref, ref_written, err = run_cpu(case)
    where = f"case {seed}:{index} {case.describe()}"
    repro = f"(repro: python tests/test_fuzz.py {seed}:{index})"
    try:
        got, got_written = run_tpu(case)
    except Exception as e:
        if err is not None or empty_result_dtype_error(ref, e):
            return None
        return f"{where}: tpu raised {type(e).__name__}: {str(e).splitlines()[0][:200]} {repro}"
    if err is not None:
        return f"{where}: CPU raised {type(err).__name__}: {str(err).splitlines()[0][:160]}, tpu returned {repro}"
    values = not nonfinite_to_integer(case, ref)
    try:
        if "topk" in case.text and len(ref) == 2:  # ties: compare values, indices must select them
            compare("values", got[0], ref[0])
            x = next(o for o in case.operands.values() if isinstance(o, Operand))
            if got[1].numel() and x.values.dim():
                dim = int(case.text.split("dim=")[1].split(",")[0])
                picked = x.view(x.values).gather(dim, got[1])
                compare("indices", picked, ref[0])
        else:
            assert len(got) == len(ref), f"{len(got)} results, CPU {len(ref)}"
            for i, (g, r) in enumerate(zip(got, ref)):
                compare(f"result {i}", g, r, values, tolerance(case, getattr(r, "dtype", None)))
        for i, (g, r) in enumerate(zip(got_written, ref_written)):
            compare(f"written tensor {i}", g, r, values, tolerance(case, r.dtype))
    except AssertionError as e:
        return f"{where}: {str(e).splitlines()[0][:300]} {repro}"
    return None


def fuzz(seed, cases, seconds):
    failures, ran = [], 0
    deadline = time.monotonic() + seconds
    for i in range(cases):
        if time.monotonic() > deadline:
            break
        f = check_case(seed, i)
        ran += 1
        if f:
            failures.append(f)
    return failures, ran


def _report(failures, ran):
    if failures:
        pytest.fail(f"{len(failures)} of {ran} fuzz cases differ from the CPU:\n" + "\n".join(failures[:40]),
                    pytrace=False)


def test_fuzz_default():
    seed = int(os.environ.get("TORCH_TPU_FUZZ_SEED", "0"))
    cases = int(os.environ.get("TORCH_TPU_FUZZ_CASES", "400"))
    seconds = float(os.environ.get("TORCH_TPU_FUZZ_SECONDS", "10"))
    _report(*fuzz(seed, cases, seconds))


# Each of these seeds still finds 2-7 of 3000 cases from mismatch classes not fixed
# yet (issue 15): log_softmax f16/bf16 1-2 ulp past the tolerance, bf16 SDPA with a
# mask, floor_divide_ (no pointwise tag) into an overlapping tensor, mean.out into an
# expanded tensor, any(out=uint8), pow(bool, True)'s dtype, floor_divide by a False
# scalar, cumsum(f32, out=f16). The failures print their one-line repros.
@pytest.mark.slow
@pytest.mark.xfail(reason="known open mismatch classes (see the comment above)", strict=False)
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_fuzz_slow(seed):
    _report(*fuzz(seed, 3000, 300))


def test_operand_views_have_their_shape():
    rng = random.Random(5)
    for layout in ("contig", "transposed", "sliced", "expanded"):
        for shape in [(2, 3, 4), (0, 5), (1, 1), (3,), ()]:
            op = Operand(rng, shape, F32, layout)
            assert tuple(op.view(op.values).shape) == shape, (layout, shape)


def test_cases_are_reproducible():
    a, b = make_case(7, 11), make_case(7, 11)
    assert a.describe() == b.describe()
    torch.testing.assert_close(flatten(a.run("cpu")[0]), flatten(b.run("cpu")[0]), equal_nan=True)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        s, i = arg.split(":")
        c = make_case(int(s), int(i))
        print(c.describe())
        print(check_case(int(s), int(i)) or "tpu agrees with the CPU")
