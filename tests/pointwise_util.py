"""Checks shared by the tests of pointwise ops against the CPU
(test_special.py, test_invtrig.py, test_special2.py): inputs with edge values,
out= and in-place overloads, binary ops over strided and broadcast operands,
and that no overload reached the CPU fallback."""
import pytest
import torch

import torch_tpu


def inputs(dtype, edges, lo, hi, seed=0, n=300):
    """`edges` then n uniform values in [lo, hi) for a float dtype; a range of
    integers (from -6, from 0 for uint8) or a few bools otherwise."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    if dtype == torch.uint8:
        return torch.arange(0, 40, dtype=dtype)
    if not dtype.is_floating_point:
        return torch.arange(-6, 40, dtype=dtype)
    r = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return torch.cat([torch.tensor(edges, dtype=torch.float64), r]).to(dtype)


def check_out_and_inplace(fn, inplace, x, want):
    """fn(x, out=) on tpu gives the CPU's `want`; so does x.<inplace>() for a
    float x, which raises for an integer x as on the CPU (None: no in-place op)."""
    out = torch.empty(x.shape, dtype=want.dtype, device="tpu")
    fn(x.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), want, equal_nan=True)
    if inplace is None:
        return
    if x.dtype.is_floating_point:
        y = x.to("tpu")
        getattr(y, inplace)()
        torch.testing.assert_close(y.cpu(), want, equal_nan=True)
    else:  # the float result cannot be written into an integer tensor
        with pytest.raises(RuntimeError):
            getattr(x.clone(), inplace)()
        with pytest.raises(RuntimeError):
            getattr(x.to("tpu"), inplace)()


def assert_no_fallback(*names):
    """No overload of the ATen ops `names` (functional, .overload, in-place)
    is in torch_tpu.fallback_report()."""
    rep = torch_tpu.fallback_report()
    hits = {k: v for k, v in rep.items() for name in names
            if k == f"aten::{name}" or k.startswith(f"aten::{name}.") or k.startswith(f"aten::{name}_.")
            or k == f"aten::{name}_"}
    assert not hits, f"fell back to the CPU: {hits}"


def check_binary(fn, inplace, a, b, float_only=True):
    """fn(a, b) on tpu gives the CPU's answer: contiguous, strided, a column
    against a row, a 0-dim second operand, out= and (`inplace`, None: no
    in-place op) a.<inplace>(b), which raises for an integer a when the
    result is float only, as on the CPU. Returns the CPU result."""
    want = fn(a, b)
    at, bt = a.to("tpu"), b.to("tpu")
    got = fn(at, bt)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    n = a.numel() // 2 * 2
    torch.testing.assert_close(fn(at[:n:2], bt[1:n:2]).cpu(), fn(a[:n:2], b[1:n:2]), equal_nan=True)
    ca, rb = a[:17].reshape(-1, 1), b[:9].reshape(1, -1)
    torch.testing.assert_close(fn(ca.to("tpu"), rb.to("tpu")).cpu(), fn(ca, rb), equal_nan=True)
    torch.testing.assert_close(fn(at, bt[-1]).cpu(), fn(a, b[-1]), equal_nan=True)
    out = torch.empty(want.shape, dtype=want.dtype, device="tpu")
    fn(at, bt, out=out)
    torch.testing.assert_close(out.cpu(), want, equal_nan=True)
    if inplace is not None:
        if not float_only or a.dtype.is_floating_point:
            y = a.to("tpu")
            getattr(y, inplace)(bt)
            torch.testing.assert_close(y.cpu(), want, equal_nan=True)
        else:
            with pytest.raises(RuntimeError):
                getattr(a.clone(), inplace)(b)
            with pytest.raises(RuntimeError):
                getattr(a.to("tpu"), inplace)(bt)
    return want
