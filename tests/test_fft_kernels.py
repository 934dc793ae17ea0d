"""The FFT kernels (runtime/kernels/fft.c) as torch.ops.tpu.fft_c2c / fft_r2c /
fft_c2r on real views (torch.view_as_real's (*S, 2) layout), against
torch.fft's CPU results: fft, ifft, fftn over several dims in any order, rfft,
irfft, rfftn, irfftn, hfft (a c2r of the conjugate) with odd and even
lengths, the three norms, non-contiguous and broadcast inputs, float32 and
float64, lengths with a large prime factor (Bluestein), empty tensors and
argument errors. Tolerances: the fft OpInfos' (atol 1e-4 for float32, the
default 1e-7 for float64; default rtol), atol relative to the result's largest
magnitude above 1."""
import pytest
import torch

import torch_tpu  # noqa: F401

OPS = torch.ops.tpu
TOL = {torch.float32: dict(atol=1e-4, rtol=1.3e-6), torch.float64: dict(atol=1e-7, rtol=1e-7)}
CPLX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
NORMS = ["backward", "ortho", "forward"]


def mode(norm, forward):
    """ATen's fft_norm_mode for a torch.fft norm string and direction."""
    if norm == "ortho":
        return 1
    return 0 if (norm == "backward") == forward else 2


def crandn(*shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=CPLX[dtype], generator=g)


def rrandn(*shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def tpu_view(x):
    """The real view of complex x on tpu."""
    return torch.view_as_real(x).to("tpu")


def back(y):
    """A tpu real view back to a complex cpu tensor."""
    assert y.is_contiguous()
    return torch.view_as_complex(y.cpu())


def close(got, want, dtype):
    """assert_close with the fft OpInfos' tolerances; atol scaled by the
    result's largest magnitude when that exceeds 1 (unnormalised long
    transforms reach |X| ~ n, where float32 rounding alone exceeds 1e-4)."""
    tol = dict(TOL[dtype])
    if want.numel():
        tol["atol"] *= max(1.0, float(want.abs().max()))
    torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 16, 45, 61, 97, 1000])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_ifft(dtype, n, norm):
    x = crandn(3, n, dtype=dtype, seed=n)
    xt = tpu_view(x)
    close(back(OPS.fft_c2c(xt, [1], mode(norm, True), True)), torch.fft.fft(x, norm=norm), dtype)
    close(back(OPS.fft_c2c(xt, [1], mode(norm, False), False)), torch.fft.ifft(x, norm=norm), dtype)
    # along dim 0 of the transposed (non-contiguous) view
    xT = xt.transpose(0, 1)
    close(back(OPS.fft_c2c(xT, [0], mode(norm, True), True)), torch.fft.fft(x.T, dim=0, norm=norm), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dims", [(0, 2), (2, 0, 1), (1,), (2, 1)])
@pytest.mark.parametrize("norm", NORMS)
def test_fftn(dtype, dims, norm):
    x = crandn(6, 10, 67, dtype=dtype)
    xt = tpu_view(x)
    want = torch.fft.fftn(x, dim=dims, norm=norm)
    close(back(OPS.fft_c2c(xt, list(dims), mode(norm, True), True)), want, dtype)
    want = torch.fft.ifftn(x, dim=dims, norm=norm)
    close(back(OPS.fft_c2c(xt, list(dims), mode(norm, False), False)), want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_strided_and_broadcast(dtype):
    x = crandn(8, 12, dtype=dtype)
    xt = tpu_view(x)
    # every other row and column (strides 2 and 4 on the real view)
    close(back(OPS.fft_c2c(xt[::2, ::3], [0, 1], 1, True)), torch.fft.fft2(x[::2, ::3], norm="ortho"), dtype)
    # a broadcast dim (stride 0)
    xb = tpu_view(x[:1]).expand(5, 12, 2)
    close(back(OPS.fft_c2c(xb, [0, 1], 0, True)), torch.fft.fft2(x[:1].expand(5, 12)), dtype)
    # a real view whose [re, im] pair is not adjacent: a permuted copy
    perm = torch.view_as_real(x).permute(2, 0, 1).contiguous().to("tpu").permute(1, 2, 0)
    close(back(OPS.fft_c2c(perm, [1], 2, False)), torch.fft.ifft(x, norm="backward"), dtype)
    # no dims: a copy
    got = OPS.fft_c2c(xt.transpose(0, 1), [], 0, True)
    assert got.is_contiguous()
    torch.testing.assert_close(back(got), x.T, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 9, 16, 61, 101])
@pytest.mark.parametrize("norm", NORMS)
def test_rfft_irfft(dtype, n, norm):
    r = rrandn(4, n, dtype=dtype, seed=n)
    rt = r.to("tpu")
    close(back(OPS.fft_r2c(rt, [1], mode(norm, True), True)), torch.fft.rfft(r, norm=norm), dtype)
    close(back(OPS.fft_r2c(rt, [1], mode(norm, True), False)), torch.fft.fft(r, norm=norm), dtype)
    close(back(OPS.fft_r2c(rt.T, [0], mode(norm, True), True)), torch.fft.rfft(r.T, dim=0, norm=norm), dtype)
    h = torch.fft.rfft(r)
    for m in {n, 2 * n - 1, 2 * n - 2} - {0}:
        want = torch.fft.irfft(h, n=m, norm=norm)
        # irfft crops or zero-pads to m//2+1 entries; the op reads exactly those
        hin = torch.nn.functional.pad(h, (0, max(0, m // 2 + 1 - h.shape[1])))[:, : m // 2 + 1]
        close(OPS.fft_c2r(tpu_view(hin), [1], mode(norm, False), m).cpu(), want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 6, 7, 128, 97])
@pytest.mark.parametrize("norm", NORMS)
def test_hfft_non_hermitian(dtype, n, norm):
    """hfft is a c2r of the conjugate; random input is not Hermitian (the
    imaginary parts of entries 0 and n/2 are ignored, as on the CPU)."""
    x = crandn(5, n // 2 + 1, dtype=dtype, seed=n)
    want = torch.fft.hfft(x, n=n, norm=norm)
    got = OPS.fft_c2r(tpu_view(x.conj().resolve_conj()), [1], mode(norm, True), n).cpu()
    close(got, want, dtype)
    # the CPU's own _fft_c2r on the same input
    want = torch.ops.aten._fft_c2r(x, [1], mode(norm, False), n)
    close(OPS.fft_c2r(tpu_view(x), [1], mode(norm, False), n).cpu(), want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("s,dims", [((6, 10, 9), (0, 1, 2)), ((6, 8), (2, 0)), ((11,), (1,)), ((4, 7), (1, 0))])
@pytest.mark.parametrize("norm", NORMS)
def test_rfftn_irfftn(dtype, s, dims, norm):
    shape = [6, 11, 10]
    for d, n in zip(dims, s):
        shape[d] = n
    r = rrandn(*shape, dtype=dtype)
    want = torch.fft.rfftn(r, dim=dims, norm=norm)
    close(back(OPS.fft_r2c(r.to("tpu"), list(dims), mode(norm, True), True)), want, dtype)
    rT = r.transpose(0, 2).contiguous().to("tpu").transpose(0, 2)
    close(back(OPS.fft_r2c(rT, list(dims), mode(norm, True), True)), want, dtype)
    # irfftn of a random (non-Hermitian) half spectrum, with its output sizes s
    spec_shape = list(shape)
    spec_shape[dims[-1]] = s[-1] // 2 + 1
    x = crandn(*spec_shape, dtype=dtype, seed=1)
    want = torch.fft.irfftn(x, s=s, dim=dims, norm=norm)
    close(OPS.fft_c2r(tpu_view(x), list(dims), mode(norm, False), s[-1]).cpu(), want, dtype)
    # and a transposed input
    xt = tpu_view(x.transpose(0, 2).contiguous()).transpose(0, 2)
    close(OPS.fft_c2r(xt, list(dims), mode(norm, False), s[-1]).cpu(), want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_lines(dtype):
    """Lines of 32768 entries and more go by four steps of ~sqrt(n) each."""
    x = crandn(2, 1 << 16, dtype=dtype)
    xt = tpu_view(x)
    close(back(OPS.fft_c2c(xt, [1], 1, False)), torch.fft.ifft(x, norm="ortho"), dtype)
    r = x.real[:, :40000].contiguous()
    close(back(OPS.fft_r2c(r.to("tpu"), [1], 0, True)), torch.fft.rfft(r), dtype)
    h = x[:, :20001]
    close(OPS.fft_c2r(tpu_view(h), [1], 2, 40000).cpu(), torch.fft.irfft(h, n=40000), dtype)
    # a long dim among others: first pass (input -> output), later pass (in place), c2r's workspace
    y = x.T[:40000].contiguous()  # (40000, 2)
    for dims in ([0, 1], [1, 0]):
        close(back(OPS.fft_c2c(tpu_view(y), dims, 0, True)), torch.fft.fftn(y, dim=dims), dtype)
        close(back(OPS.fft_r2c(r.T.contiguous().to("tpu"), dims, 1, True)),
              torch.fft.rfftn(r.T, dim=dims, norm="ortho"), dtype)
    close(OPS.fft_c2r(tpu_view(y), [0, 1], 2, 3).cpu(), torch.fft.irfftn(y, s=(40000, 3), dim=(0, 1)), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_apart(dtype):
    """Real transforms pair rows; a NaN row or a much larger row leaves its
    neighbour as the CPU computes it."""
    r = rrandn(6, 18, dtype=dtype)
    r[0, 3] = float("nan")
    r[3] *= 1e6
    r[4] = 0
    got = back(OPS.fft_r2c(r.to("tpu"), [1], 0, True))
    want = torch.fft.rfft(r)
    for i in (1, 2, 3, 4, 5):
        close(got[i], want[i], dtype)
    assert got[0].isnan().all() and (got[0, 0].imag == 0)  # bin 0 of real data is exactly real
    h = torch.fft.rfft(r.nan_to_num())
    h[1, 2] = complex(float("nan"), 0)
    got = OPS.fft_c2r(tpu_view(h), [1], 2, 18).cpu()
    want = torch.fft.irfft(h, n=18)
    assert got[1].isnan().all()
    for i in (0, 2, 3, 4, 5):
        close(got[i], want[i], dtype)


def test_empty():
    x = torch.zeros(0, 4, 2).to("tpu")
    assert OPS.fft_c2c(x, [1], 0, True).shape == (0, 4, 2)
    assert OPS.fft_c2c(x, [0], 0, True).shape == (0, 4, 2)
    assert OPS.fft_c2r(torch.zeros(3, 2).to("tpu"), [0], 0, 0).shape == (0,)
    assert OPS.fft_r2c(torch.zeros(3, 0).to("tpu"), [1], 0, False).shape == (3, 0, 2)
    with pytest.raises(RuntimeError, match=r"Invalid number of data points \(0\)"):
        OPS.fft_r2c(torch.zeros(3, 0).to("tpu"), [1], 0, True)


def test_errors():
    h = torch.zeros(8, 2, dtype=torch.float16).to("tpu")
    with pytest.raises(NotImplementedError, match="tpu::fft_c2c: dtype float16"):
        OPS.fft_c2c(h, [0], 0, True)
    with pytest.raises(NotImplementedError, match="tpu::fft_r2c: dtype float16"):
        OPS.fft_r2c(h, [0], 0, True)
    with pytest.raises(NotImplementedError, match="tpu::fft_c2r: dtype bfloat16"):
        OPS.fft_c2r(h.to(torch.bfloat16), [0], 0, 8)
    x = torch.zeros(8, 2).to("tpu")
    with pytest.raises(IndexError, match="Dimension out of range"):
        OPS.fft_c2c(x, [1], 0, True)  # dim 1 is the [re, im] pair, not a signal dim
    with pytest.raises(IndexError, match="Dimension out of range"):
        OPS.fft_r2c(torch.zeros(8).to("tpu"), [-1], 0, True)
    with pytest.raises(RuntimeError, match="more than once"):
        OPS.fft_c2c(torch.zeros(4, 4, 2).to("tpu"), [0, 0], 0, True)
    with pytest.raises(RuntimeError, match="last dim of size 2"):
        OPS.fft_c2c(torch.zeros(8, 3).to("tpu"), [0], 0, True)
    with pytest.raises(RuntimeError, match="normalization"):
        OPS.fft_c2c(x, [0], 3, True)
    with pytest.raises(RuntimeError, match="fewer than the 6"):
        OPS.fft_c2r(torch.zeros(5, 2).to("tpu"), [0], 0, 10)
    with pytest.raises(RuntimeError, match="at least one dim"):
        OPS.fft_r2c(torch.zeros(8).to("tpu"), [], 0, True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sweep_lengths(dtype):
    ns = list(range(1, 131)) + [251, 1009, 2 * 1009, 4096, 4096 * 3, 1 << 15, 40000, 45045, 1 << 17, 79999]
    for n in ns:
        x = crandn(2, n, dtype=dtype, seed=n)
        xt = tpu_view(x)
        close(back(OPS.fft_c2c(xt, [1], 0, True)), torch.fft.fft(x), dtype)
        close(back(OPS.fft_c2c(xt, [1], 1, False)), torch.fft.ifft(x, norm="ortho"), dtype)
        r = x.real.contiguous()
        close(back(OPS.fft_r2c(r.to("tpu"), [1], 2, True)), torch.fft.rfft(r, norm="forward"), dtype)
        h = x[:, : n // 2 + 1]
        close(OPS.fft_c2r(tpu_view(h), [1], 2, n).cpu(), torch.fft.irfft(h, n=n), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sweep_nd(dtype):
    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        nd = int(torch.randint(1, 5, (1,), generator=g))
        shape = [int(v) for v in torch.randint(1, 14, (nd,), generator=g)]
        k = int(torch.randint(1, nd + 1, (1,), generator=g))
        dims = [int(d) for d in torch.randperm(nd, generator=g)[:k]]
        x = crandn(*shape, dtype=dtype, seed=trial)
        norm = NORMS[trial % 3]
        close(back(OPS.fft_c2c(tpu_view(x), dims, mode(norm, True), True)), torch.fft.fftn(x, dim=dims, norm=norm),
              dtype)
        r = x.real.contiguous()
        close(back(OPS.fft_r2c(r.to("tpu"), dims, mode(norm, True), True)), torch.fft.rfftn(r, dim=dims, norm=norm),
              dtype)
        n = shape[dims[-1]]
        h = x.narrow(dims[-1], 0, n // 2 + 1)
        s = [shape[d] for d in dims]
        close(OPS.fft_c2r(tpu_view(h), dims, mode(norm, False), n).cpu(),
              torch.fft.irfftn(h, s=s, dim=dims, norm=norm), dtype)
