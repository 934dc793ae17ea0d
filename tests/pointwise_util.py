"""Checks shared by the tests of pointwise ops against the CPU
(test_special.py, test_invtrig.py): inputs with edge values, out= and in-place
overloads, and that no overload reached the CPU fallback."""
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
