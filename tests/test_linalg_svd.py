"""Jacobi SVD (aten::_linalg_svd) and symmetric eigensolver (aten::_linalg_eigh)
of runtime/kernels/factor.c against PyTorch's CPU (LAPACK): singular values and
eigenvalues within PyTorch's tolerances, U S Vh = A and A V = V diag(w),
orthonormal factors, batched, strided, empty and rank-deficient inputs, out=
variants, the ops built on them (svdvals, pinv, matrix_rank, matrix_norm,
cond, eigvalsh), gradients and the CPU's errors. The signs of singular vectors
and eigenvectors are Jacobi's, not LAPACK's: they are compared through
sign-invariant quantities only. Vh's strides are those of PyTorch's Python
meta function (row-major, as it assumes for a device that is not the CPU),
not the CPU's column-major ones. TORCH_TPU_FALLBACK=error: a call reaching the
CPU fallback fails the test."""
import pytest
import torch

import torch_tpu  # noqa: F401

DTYPES = [torch.float32, torch.float64]
LA = torch.linalg


pytestmark = pytest.mark.usefixtures("no_fallback")  # conftest.py: the CPU fallback raises


def _tol(dtype):
    return dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)


def _rand(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _close(got, want, dtype=None, **kw):
    assert got.device.type == "tpu"
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **(kw or _tol(dtype or want.dtype)))


def _eye_like(x, n):
    return torch.eye(n, dtype=x.dtype).expand(*x.shape[:-2], n, n)


SHAPES = [(4, 4), (5, 3), (3, 5), (2, 3, 6, 4), (2, 4, 6), (0, 3, 3), (2, 0, 4), (2, 4, 0), (1, 1), (7, 1)]


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_matches_cpu(shape, dtype, full):
    A = _rand(*shape, dtype=dtype)
    for X in (A, A.mT.contiguous().mT, A[..., ::1, :]):  # contiguous, column-major, a view
        U, S, Vh = LA.svd(X.to("tpu"), full_matrices=full)
        Uc, Sc, Vhc = LA.svd(X, full_matrices=full)
        assert U.shape == Uc.shape and Vh.shape == Vhc.shape
        assert U.stride() == Uc.stride() or Uc.numel() <= 1
        _close(S, Sc)
        U, S, Vh = U.cpu(), S.cpu(), Vh.cpu()
        k = S.shape[-1]
        tol = _tol(dtype)
        torch.testing.assert_close(U[..., :k] @ torch.diag_embed(S) @ Vh[..., :k, :], X, **tol)
        torch.testing.assert_close(U.mH @ U, _eye_like(U, U.shape[-1]), **tol)
        torch.testing.assert_close(Vh @ Vh.mH, _eye_like(Vh, Vh.shape[-2]), **tol)
        # singular vectors up to sign (the values are distinct for random inputs)
        torch.testing.assert_close(U[..., :k].abs(), Uc[..., :k].abs(), **tol)
        torch.testing.assert_close(Vh[..., :k, :].abs(), Vhc[..., :k, :].abs(), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_rank_deficient_and_special(dtype):
    tol = _tol(dtype)
    x = _rand(6, 1, dtype=dtype)
    for A in (x @ _rand(1, 4, dtype=dtype, seed=1), torch.zeros(4, 3, dtype=dtype), torch.eye(3, dtype=dtype),
              torch.diag(torch.tensor([1.0, 3.0, 2.0], dtype=dtype))):
        for full in (False, True):
            U, S, Vh = (t.cpu() for t in LA.svd(A.to("tpu"), full_matrices=full))
            _, Sc, _ = LA.svd(A, full_matrices=full)
            torch.testing.assert_close(S, Sc, rtol=tol["rtol"], atol=1e-5 if dtype == torch.float32 else 1e-12)
            k = S.shape[-1]
            torch.testing.assert_close(U[..., :k] @ torch.diag(S) @ Vh[:k], A, **tol)
            torch.testing.assert_close(U.mT @ U, torch.eye(U.shape[-1], dtype=dtype), **tol)
            torch.testing.assert_close(Vh @ Vh.mT, torch.eye(Vh.shape[-2], dtype=dtype), **tol)


def test_svd_empty_full_matrices_identity():
    for shape in ((3, 0), (0, 3), (2, 3, 0)):
        A = torch.zeros(shape)
        got = LA.svd(A.to("tpu"))
        for g, w in zip(got, LA.svd(A)):
            assert g.shape == w.shape
            assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_compute_uv_false_and_out(dtype):
    A = _rand(3, 5, 4, dtype=dtype)
    _close(LA.svdvals(A.to("tpu")), LA.svdvals(A))
    U, S, Vh = (torch.empty(0, device="tpu", dtype=dtype) for _ in range(3))
    LA.svd(A.to("tpu"), full_matrices=False, out=(U, S, Vh))
    _close(S, LA.svdvals(A))
    torch.testing.assert_close((U @ torch.diag_embed(S) @ Vh).cpu(), A, **_tol(dtype))
    Sv = torch.empty(0, device="tpu", dtype=dtype)
    LA.svdvals(A.to("tpu"), out=Sv)
    _close(Sv, LA.svdvals(A))
    # torch.svd (V, not Vh; some=True)
    u, s, v = (t.cpu() for t in torch.svd(A.to("tpu")))
    torch.testing.assert_close(u @ torch.diag_embed(s) @ v.mT, A, **_tol(dtype))


def test_svd_errors_like_cpu():
    A = torch.eye(3, dtype=torch.float64)
    A[1, 2] = float("nan")
    with pytest.raises(torch.linalg.LinAlgError, match="non-finite"):
        LA.svd(A.to("tpu"))[1].cpu()
    with pytest.raises(torch.linalg.LinAlgError, match="non-finite"):
        LA.svd(A)
    for dt in (torch.bfloat16, torch.float16):
        with pytest.raises((RuntimeError, NotImplementedError)):
            LA.svd(torch.eye(3, dtype=dt))
        with pytest.raises((RuntimeError, NotImplementedError)):
            LA.svd(torch.eye(3, dtype=dt, device="tpu"))[1].cpu()
        with pytest.raises((RuntimeError, NotImplementedError)):
            LA.eigh(torch.eye(3, dtype=dt, device="tpu"))[0].cpu()


def _sym(*shape, dtype=torch.float64, seed=0):
    x = _rand(*shape, dtype=dtype, seed=seed)
    return x + x.mT


EIGH_SHAPES = [(4, 4), (2, 3, 5, 5), (1, 1), (0, 3, 3), (2, 0, 0), (9, 9)]


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", EIGH_SHAPES)
def test_eigh_matches_cpu(shape, dtype, uplo):
    A = _sym(*shape, dtype=dtype)
    # only the UPLO triangle counts: garbage in the other one
    junk = A.tril() if uplo == "L" else A.triu()
    junk = junk + (torch.triu(_rand(*shape, dtype=dtype, seed=3), 1) if uplo == "L"
                   else torch.tril(_rand(*shape, dtype=dtype, seed=3), -1))
    for X in (junk, junk.mT.contiguous().mT):
        w, V = LA.eigh(X.to("tpu"), UPLO=uplo)
        wc, Vc = LA.eigh(X, UPLO=uplo)
        _close(w, wc)
        assert V.shape == Vc.shape and (V.stride() == Vc.stride() or Vc.numel() <= 1)
        V, w = V.cpu(), w.cpu()
        tol = _tol(dtype)
        torch.testing.assert_close(A @ V, V * w.unsqueeze(-2), **tol)
        torch.testing.assert_close(V.mT @ V, _eye_like(V, V.shape[-1]), **tol)
        torch.testing.assert_close(V.abs(), Vc.abs(), **tol)
        _close(LA.eigvalsh(X.to("tpu"), UPLO=uplo), LA.eigvalsh(X, UPLO=uplo))


def test_eigh_repeated_eigenvalues_and_out():
    Q, _ = LA.qr(_rand(5, 5))
    A = Q @ torch.diag(torch.tensor([2.0, 2.0, 2.0, -1.0, 5.0], dtype=torch.float64)) @ Q.mT
    w, V = (t.cpu() for t in LA.eigh(A.to("tpu")))
    torch.testing.assert_close(w, LA.eigvalsh(A))
    torch.testing.assert_close(A @ V, V * w, atol=1e-12, rtol=0)
    torch.testing.assert_close(V.mT @ V, torch.eye(5, dtype=torch.float64), atol=1e-12, rtol=0)
    wo, Vo = torch.empty(0, device="tpu", dtype=torch.float64), torch.empty(0, device="tpu", dtype=torch.float64)
    LA.eigh(A.to("tpu"), out=(wo, Vo))
    torch.testing.assert_close(wo.cpu(), w)
    wv = torch.empty(0, device="tpu", dtype=torch.float64)
    LA.eigvalsh(A.to("tpu"), out=wv)
    torch.testing.assert_close(wv.cpu(), w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_built_on_svd_and_eigh(dtype):
    A = _rand(2, 5, 3, dtype=dtype)
    sq = _rand(4, 4, dtype=dtype, seed=1)
    low = _rand(5, 2, dtype=dtype) @ _rand(2, 4, dtype=dtype, seed=2)
    cases = [
        (LA.pinv, (A,), {}), (LA.pinv, (low,), {}), (LA.pinv, (_sym(4, 4, dtype=dtype),), {"hermitian": True}),
        (LA.matrix_rank, (low,), {}), (LA.matrix_rank, (A,), {}),
        (LA.matrix_rank, (_sym(4, 4, dtype=dtype),), {"hermitian": True}),
        (LA.matrix_norm, (A,), {"ord": "nuc"}), (LA.matrix_norm, (A,), {"ord": 2}),
        (LA.matrix_norm, (A,), {"ord": -2}), (LA.norm, (sq,), {"ord": 2}),
        (LA.cond, (sq,), {}), (LA.cond, (sq,), {"p": -2}), (LA.svdvals, (low,), {}),
        (LA.eigvalsh, (_sym(3, 4, 4, dtype=dtype),), {}),
    ]
    for fn, args, kw in cases:
        want = fn(*args, **kw)
        got = fn(*[a.to("tpu") for a in args], **kw)
        if want.dtype.is_floating_point:
            _close(got, want, atol=1e-4 if dtype == torch.float32 else 1e-9, rtol=1e-4 if dtype == torch.float32 else 1e-9)
        else:
            assert torch.equal(got.cpu(), want), (fn, got, want)


def test_svd_and_eigh_gradients():
    A = _rand(4, 3)
    S_sum = lambda X: LA.svdvals(X).sum()  # noqa: E731
    rec = lambda X: (lambda U, S, Vh: (U @ torch.diag_embed(S) @ Vh).pow(2).sum() + (U[..., :1].abs()).sum())(  # noqa: E731
        *LA.svd(X, full_matrices=False))
    eig = lambda X: (lambda w, V: w.sum() + (w * w).sum() + V.abs().sum())(*LA.eigh(X))  # noqa: E731
    for fn, X in ((S_sum, A), (rec, A), (rec, A.mT), (eig, _sym(4, 4)), (lambda X: LA.pinv(X).sum(), A),
                  (lambda X: LA.matrix_norm(X, "nuc"), A)):
        Xc = X.clone().requires_grad_(True)
        fn(Xc).backward()
        Xd = X.to("tpu").requires_grad_(True)
        fn(Xd).backward()
        torch.testing.assert_close(Xd.grad.cpu(), Xc.grad, atol=1e-8, rtol=1e-8)


def test_svd_and_eigh_under_compile():
    # fake tensors carry the device: Vh is column-major there, as on the CPU
    A = _rand(5, 3)
    f = torch.compile(lambda x: LA.svd(x, full_matrices=False), backend="tpu", fullgraph=True)
    U, S, Vh = f(A.to("tpu"))
    assert Vh.stride() == LA.svd(A, full_matrices=False)[2].stride()
    torch.testing.assert_close((U @ torch.diag(S) @ Vh).cpu(), A)
    g = torch.compile(lambda x: LA.eigh(x)[0], backend="tpu", fullgraph=True)
    torch.testing.assert_close(g((A.mT @ A).to("tpu")).cpu(), LA.eigvalsh(A.mT @ A))


def test_float32_gradients_at_least_as_accurate_as_cpu():
    # float32 inputs are factored in double: where the CPU's float32 LAPACK
    # gradients are off by more than assert_close's float32 tolerance (OpInfo
    # samples of cond, eigh, svd, pinv(hermitian)), ours are nearer the float64 truth
    def grad(fn, X):
        X = X.detach().clone().requires_grad_(True)
        fn(X).backward()
        return X.grad.cpu().double()

    fns = [lambda X: LA.cond(X), lambda X: (lambda w, V: w.sum() + V.abs().sum())(*LA.eigh(X)),
           lambda X: (lambda U, S, Vh: U.abs().sum() + S.sum() + Vh.abs().sum())(*LA.svd(X)),
           lambda X: LA.pinv(X, hermitian=True).sum()]
    for seed in range(3):
        X = _sym(5, 5, seed=seed) + 0.1 * _rand(5, 5, seed=seed + 10)
        for fn in fns:
            ref = grad(fn, X)
            err_cpu = (grad(fn, X.float()) - ref).abs().max().item()
            err_tpu = (grad(fn, X.float().to("tpu")) - ref).abs().max().item()
            assert err_tpu <= 2 * err_cpu + 1e-6 * ref.abs().max().item(), (seed, err_tpu, err_cpu)
