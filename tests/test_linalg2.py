"""Matrix factorisations that ran on the CPU fallback and have native kernels
now (runtime/kernels/factor.c): LU with partial pivoting and what is built on
it (lu_factor(_ex), lu_solve, solve(_ex), inv(_ex), det, slogdet, logdet,
lu_unpack, linalg.lu), Cholesky (cholesky(_ex), cholesky_solve,
cholesky_inverse) and Householder QR (geqrf, qr, householder_product, ormqr).
Each is compared with PyTorch's CPU result: values, shapes, strides (LAPACK's
column-major layouts), dtypes, pivots and info exactly; batched, strided,
empty and singular inputs, out= variants, gradients, and the CPU's errors.
TORCH_TPU_FALLBACK=error: a call reaching the CPU fallback fails the test."""
import pytest
import torch

import torch_tpu  # noqa: F401

DTYPES = [torch.float32, torch.float64]
LA = torch.linalg


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    yield


def _tpu(x):
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def _same(got, want):
    """got (tpu) equals want (cpu): every tensor's shape, strides and dtype,
    integer tensors exactly, floating ones within PyTorch's tolerances."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "tpu"
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.numel() > 1:
            assert g.stride() == w.stride(), (g.stride(), w.stride())
        gc = g.cpu()
        if w.dtype.is_floating_point:
            torch.testing.assert_close(gc, w, equal_nan=True, atol=1e-4 if w.dtype == torch.float32 else 1e-10,
                                       rtol=1e-4 if w.dtype == torch.float32 else 1e-10)
        else:
            assert torch.equal(gc, w), (gc, w)


def check(fn, *args, **kwargs):
    want = fn(*args, **kwargs)
    got = fn(*[_tpu(a) for a in args], **kwargs)
    _same(got, want)
    return want


def _rand(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _spd(*shape, dtype=torch.float64, seed=0):
    x = _rand(*shape, dtype=dtype, seed=seed)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


SHAPES = [(4, 4), (2, 3, 5, 5), (3, 5, 2), (2, 2, 6), (0, 3, 3), (2, 0, 0), (1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_lu_factor_matches_cpu(dtype, shape):
    A = _rand(*shape, dtype=dtype)
    check(LA.lu_factor_ex, A)
    check(LA.lu_factor_ex, A.mT)  # strided input
    check(LA.lu, A)
    LU, piv = LA.lu_factor(A)
    check(torch.lu_unpack, LU, piv)
    check(torch.lu_unpack, LU, piv, unpack_data=False)
    check(torch.lu_unpack, LU, piv, unpack_pivots=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_singular_and_ties(dtype):
    zeros = torch.zeros(3, 3, dtype=dtype)
    # rank 1 with power-of-two multipliers: the elimination is exact
    rank1 = torch.outer(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 3.0, 5.0])).to(dtype)
    ties = torch.tensor([[1.0, 2.0], [-1.0, 3.0]], dtype=dtype)
    batch = torch.stack([zeros, rank1, torch.eye(3, dtype=dtype)])
    for A in (zeros, rank1, ties, batch):
        LU, piv, info = check(LA.lu_factor_ex, A)
        check(LA.det, A)
        check(LA.slogdet, A)
    assert LA.lu_factor_ex(_tpu(ties))[1].cpu().tolist() == [1, 2]  # first row on a tie
    info = LA.lu_factor_ex(_tpu(batch))[2].cpu().tolist()
    assert info == [1, 2, 0], info
    assert LA.det(_tpu(rank1)).item() == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(dtype, left, adjoint):
    A = _rand(2, 4, 4, dtype=dtype) + 3 * torch.eye(4, dtype=dtype)
    LU, piv = LA.lu_factor(A)
    B = _rand(2, 4, 3, dtype=dtype, seed=1)
    B = B if left else B.mT
    check(LA.lu_solve, LU, piv, B, left=left, adjoint=adjoint)
    # LU broadcast over B's batch, B strided
    B3 = _rand(3, 1, 4, 5, dtype=dtype, seed=2)
    if not left:
        B3 = B3.mT
    check(LA.lu_solve, LU[0], piv[0], B3, left=left, adjoint=adjoint)
    check(torch.lu_solve, B if left else B.mT, LU, piv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(dtype):
    A = _rand(2, 3, 4, 4, dtype=dtype)
    B = _rand(2, 3, 4, 2, dtype=dtype, seed=1)
    check(LA.solve, A, B)
    check(LA.solve, A, B.mT, left=False)
    check(LA.solve, A, _rand(4, dtype=dtype))  # a vector right-hand side
    check(LA.solve, A[0, 0], B)  # A broadcast
    check(LA.solve_ex, A.mT, B)
    check(torch.ops.aten._linalg_solve_ex, A, B)
    check(LA.inv, A)
    check(LA.inv_ex, A.mT)
    check(LA.det, A)
    check(LA.slogdet, A)
    check(torch.logdet, A @ A.mT)
    check(torch.ops.aten._linalg_det, A)
    check(torch.ops.aten._linalg_slogdet, A[0, 0].mT)
    check(LA.inv, torch.zeros(0, 3, 3, dtype=dtype))
    check(LA.det, torch.zeros(2, 0, 0, dtype=dtype))


def test_out_variants():
    A = _rand(3, 4, 4)
    At = _tpu(A)
    LU, piv = torch.empty(0, device="tpu", dtype=A.dtype), torch.empty(0, device="tpu", dtype=torch.int32)
    LA.lu_factor(At, out=(LU, piv))
    _same((LU, piv), LA.lu_factor(A))
    inv = torch.empty(0, device="tpu", dtype=A.dtype)
    LA.inv(At, out=inv)
    _same(inv, LA.inv(A))
    q, r = torch.empty(0, device="tpu", dtype=A.dtype), torch.empty(0, device="tpu", dtype=A.dtype)
    LA.qr(At, out=(q, r))
    want = LA.qr(A)
    torch.testing.assert_close(q.cpu(), want[0])
    torch.testing.assert_close(r.cpu(), want[1])
    L = torch.empty(0, device="tpu", dtype=A.dtype)
    LA.cholesky(_tpu(_spd(2, 4, 4)), out=L)
    torch.testing.assert_close(L.cpu(), LA.cholesky(_spd(2, 4, 4)))
    P, Lo, U = (torch.empty(0, device="tpu", dtype=A.dtype) for _ in range(3))
    LA.lu(At, out=(P, Lo, U))
    for g, w in zip((P, Lo, U), LA.lu(A)):
        torch.testing.assert_close(g.cpu(), w)


def test_errors_like_cpu():
    def both(fn, *args, match=None, **kwargs):
        with pytest.raises(RuntimeError, match=match):
            fn(*args, **kwargs)
        with pytest.raises(RuntimeError, match=match):
            r = fn(*[_tpu(a) for a in args], **kwargs)
            (r[0] if isinstance(r, tuple) else r).cpu()

    both(LA.lu_factor, torch.ones(3, 3, dtype=torch.int64))
    both(LA.inv, torch.ones(2, 3))
    both(LA.cholesky, torch.ones(3, 2))
    both(LA.qr, torch.ones(3, 2, dtype=torch.int32))
    both(LA.inv, torch.zeros(3, 3), match="singular")
    both(LA.solve, torch.zeros(2, 3, 3), torch.ones(2, 3, 1), match="singular")
    both(LA.cholesky, -torch.eye(3), match="positive-definite")
    both(LA.lu_factor, torch.zeros(2, 2), match="is zero")
    both(LA.qr, torch.ones(3, 3), mode="full")
    both(LA.lu_factor, _rand(3, 3), pivot=False)
    # check_errors=True in the _ex ops: the kernel reports it (at the next synchronisation)
    both(LA.lu_factor_ex, torch.zeros(2, 3, 3), check_errors=True, match="Batch element 0.*U\\[1,1\\] is zero")
    both(LA.cholesky_ex, -torch.eye(3), check_errors=True, match="leading minor of order 1")
    both(LA.inv_ex, torch.zeros(3, 3), check_errors=True, match="diagonal element 1 is zero")
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):  # the CPU's type
        LA.cholesky_ex(_tpu(-torch.eye(2)), check_errors=True)[0].cpu()
    LU, piv = LA.lu_factor(_rand(3, 3))
    with pytest.raises(RuntimeError, match="pivots"):
        torch.lu_unpack(_tpu(LU), _tpu(piv) * 0)[0].cpu()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, upper):
    A = _spd(2, 3, 4, 4, dtype=dtype)
    L = check(LA.cholesky_ex, A, upper=upper)[0]
    check(LA.cholesky, A.mT, upper=upper)
    check(torch.cholesky_solve, _rand(2, 3, 4, 2, dtype=dtype), L, upper=upper)
    check(torch.cholesky_solve, _rand(4, 2, dtype=dtype), L, upper=upper)  # broadcast
    check(torch.cholesky_inverse, L, upper=upper)
    check(torch.cholesky_inverse, L[0, 0], upper=upper)
    check(LA.cholesky_ex, torch.zeros(0, 2, 2, dtype=dtype), upper=upper)
    check(LA.cholesky_ex, torch.zeros(2, 0, 0, dtype=dtype), upper=upper)
    check(LA.inv_ex, torch.zeros(2, 0, 0, dtype=dtype))
    # not positive-definite: info is the order of the first failing minor
    bad = A.clone()
    bad[0, 1, 2, 2] = -100.0
    bad[1, 0] = -torch.eye(4, dtype=dtype)
    got = LA.cholesky_ex(_tpu(bad), upper=upper)[1].cpu()
    assert torch.equal(got, LA.cholesky_ex(bad, upper=upper)[1])
    assert got[0, 1].item() == 3 and got[1, 0].item() == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 5), (2, 4, 4), (0, 3, 2), (3, 0)])
def test_qr(dtype, shape):
    A = _rand(*shape, dtype=dtype)
    for mode in ("reduced", "complete", "r"):
        check(LA.qr, A, mode=mode)
        check(LA.qr, A.mT, mode=mode)
    a, tau = check(torch.geqrf, A)
    if shape[-2] >= shape[-1]:
        check(LA.householder_product, a, tau)
        check(LA.householder_product, a[..., :, : max(shape[-1] - 1, 0)], tau[..., : max(shape[-1] - 1, 0)])
    for left in (True, False):
        for transpose in (False, True):
            m = shape[-2]
            C = _rand(*shape[:-2], m, 3, dtype=dtype, seed=3) if left else _rand(*shape[:-2], 3, m, dtype=dtype, seed=3)
            check(torch.ormqr, a, tau, C, left=left, transpose=transpose)


@pytest.mark.parametrize("fn", [
    lambda A: LA.det(A),
    lambda A: LA.slogdet(A)[1],
    lambda A: LA.inv(A),
    lambda A: LA.solve(A, A[..., :2]),
    lambda A: LA.lu_factor(A)[0],
    lambda A: LA.lu(A)[1],
    lambda A: LA.cholesky(A @ A.mT + 4 * torch.eye(4, dtype=A.dtype, device=A.device)),
    lambda A: torch.cholesky_inverse(LA.cholesky(A @ A.mT + 4 * torch.eye(4, dtype=A.dtype, device=A.device))),
    lambda A: LA.qr(A)[0] + LA.qr(A)[1],
    lambda A: LA.householder_product(A, A[..., 0, :3]),
], ids=["det", "slogdet", "inv", "solve", "lu_factor", "lu", "cholesky", "cholesky_inverse", "qr", "hh_product"])
def test_gradients(fn):
    A = _rand(2, 4, 4) + 2 * torch.eye(4, dtype=torch.float64)
    Ac = A.clone().requires_grad_()
    At = _tpu(A).requires_grad_()
    w = fn(Ac)
    g = fn(At)
    torch.testing.assert_close(g.cpu().detach(), w.detach())
    seed = _rand(*w.shape, seed=5)
    (w * seed).sum().backward()
    (g * _tpu(seed)).sum().backward()
    torch.testing.assert_close(At.grad.cpu(), Ac.grad)


def _normwise(got, want):
    """Largest error per matrix over its largest entry (matrix functions are
    accurate normwise, not entrywise)."""
    scale = want.abs().amax((-2, -1), keepdim=True).clamp(min=1.0)
    return ((got.double() - want.double()).abs() / scale).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,spread", [((5, 5), 3.0), ((3, 4, 4), 0.1), ((2, 6, 6), 8.0), ((1, 1), 2.0)])
def test_matrix_exp(dtype, shape, spread):
    # scaling and squaring on device matmuls: each matrix of a batch scaled by its
    # own power of two (spread makes norms from below 1 to about 2^6)
    g = torch.Generator().manual_seed(11)
    a = torch.randn(shape, generator=g, dtype=torch.float64) * spread
    if a.dim() == 3:
        a[0] *= 0.01
    a = a.to(dtype)
    got = LA.matrix_exp(_tpu(a))
    assert got.device.type == "tpu" and got.dtype == dtype and got.shape == a.shape
    exact = LA.matrix_exp(a.double())
    bound = 1e-13 if dtype == torch.float64 else 1e-5
    assert _normwise(got.cpu(), exact) < bound
    assert _normwise(got.cpu(), LA.matrix_exp(a)) < 2 * bound
    t = _tpu(a).requires_grad_()
    c = a.clone().requires_grad_()
    w = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    (LA.matrix_exp(t) * _tpu(w)).sum().backward()
    (LA.matrix_exp(c) * w).sum().backward()
    assert _normwise(t.grad.cpu(), c.grad) < 4 * bound


def test_matrix_exp_edges():
    a = torch.zeros(0, 3, 3)
    assert LA.matrix_exp(_tpu(a)).shape == (0, 3, 3)
    assert torch.equal(LA.matrix_exp(_tpu(torch.zeros(2, 2))).cpu(), torch.eye(2))
    for dtype in (torch.bfloat16, torch.float16):
        # the CPU's half-precision matrix_exp returns NaN here (PyTorch 2.15); tpu
        # accumulates in float32 and rounds once
        a = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(2)).to(dtype)
        got = LA.matrix_exp(_tpu(a)).cpu()
        assert got.dtype == dtype and _normwise(got, LA.matrix_exp(a.double())) < 1e-2
    with pytest.raises(RuntimeError, match="square matrix"):
        LA.matrix_exp(_tpu(torch.zeros(2, 3)))
    with pytest.raises(RuntimeError, match="square matrix"):
        LA.matrix_exp(_tpu(torch.zeros(3)))
