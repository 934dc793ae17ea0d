"""Kernel paths a compiled training step leans on, against PyTorch's CPU
results: GEMM operand packing for every A/B layout (the weight gradient is
dY^T @ X), the one-pass SDPA backward (short key ranges), vectorised
sqrt/rsqrt and pow's special exponents, log_softmax and row sums read in
place."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    yield


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,K,N", [(7, 13, 5), (37, 130, 45), (128, 512, 256), (6, 8, 16), (13, 300, 33),
                                   (100, 1, 50), (512, 256, 128)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mm_layouts_and_alpha(dtype, M, K, N, ta, tb):
    g = _gen()
    a = (torch.randn(K, M, generator=g).t() if ta else torch.randn(M, K, generator=g)).to(dtype)
    b = (torch.randn(N, K, generator=g).t() if tb else torch.randn(K, N, generator=g)).to(dtype)
    # float32 sums of K products in another order: allow for K roundings
    tol = dict(rtol=1e-5 * max(1, K / 64), atol=1e-5 * max(1, K / 64)) if dtype == torch.float32 else {}
    torch.testing.assert_close(torch.mm(a.to("tpu"), b.to("tpu")).cpu(), torch.mm(a, b), **tol)
    bias = torch.randn(M, N, generator=g).to(dtype)
    got = torch.addmm(bias.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5, alpha=0.25).cpu()
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=0.5, alpha=0.25), **tol)


def test_linear_weight_gradient_matches_cpu():
    g = _gen(1)
    x = torch.randn(64, 48, generator=g)
    w = torch.randn(40, 48, generator=g)
    dy = torch.randn(64, 40, generator=g)
    grads = []
    for dev in ("cpu", "tpu"):
        xw = w.detach().to(dev).requires_grad_()
        xx = x.detach().to(dev).requires_grad_()
        F.linear(xx, xw).backward(dy.to(dev))
        grads.append((xw.grad.cpu(), xx.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


def _sdpa_grads(dev, q, k, v, go, **kw):
    ins = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        kw["attn_mask"] = mask.to(dev)
    out = F.scaled_dot_product_attention(*ins, **kw)
    out.backward(go.to(dev))
    return [out.detach().cpu()] + [t.grad.cpu() for t in ins]


# B * Hkv >= 4: the one-pass backward (S <= 64); S > 64 or one kv head: the two-pass one.
@pytest.mark.parametrize("B,Hq,Hkv,L,S,E", [(8, 8, 4, 64, 64, 32), (2, 4, 2, 40, 50, 16), (4, 2, 2, 70, 33, 24),
                                            (2, 6, 3, 9, 64, 128), (1, 2, 1, 64, 64, 32), (2, 4, 2, 30, 100, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_matches_cpu(B, Hq, Hkv, L, S, E, causal):
    g = _gen(2)
    q = torch.randn(B, Hq, L, E, generator=g)
    k = torch.randn(B, Hkv, S, E, generator=g)
    v = torch.randn(B, Hkv, S, E, generator=g)
    go = torch.randn(B, Hq, L, E, generator=g)
    kw = dict(is_causal=causal, enable_gqa=Hq != Hkv)
    ref = _sdpa_grads("cpu", q, k, v, go, **kw)
    got = _sdpa_grads("tpu", q, k, v, go, **kw)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_backward_one_pass_with_bias_and_half(dtype):
    g = _gen(3)
    q, k, v, go = (torch.randn(4, 4, 48, 32, generator=g).to(dtype) for _ in range(4))
    bias = torch.randn(48, 48, generator=g).to(dtype)
    ref = _sdpa_grads("cpu", q, k, v, go, attn_mask=bias)
    got = _sdpa_grads("tpu", q, k, v, go, attn_mask=bias)
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_sqrt_rsqrt_pow_special_exponents(dtype):
    x = torch.cat([torch.tensor([1.5, -2.0, float("nan"), float("inf"), 0.0, -0.0, 1e-30]),
                   torch.rand(1000, generator=_gen(4)) * 100]).to(dtype)
    for e in (0, 1, 0.0, 1.0, 2, 3, 0.5, -0.5, -1, -2):
        torch.testing.assert_close(torch.pow(x.to("tpu"), e).cpu(), torch.pow(x, e), equal_nan=True)
    for f in (torch.sqrt, torch.rsqrt):
        torch.testing.assert_close(f(x.to("tpu")).cpu(), f(x), equal_nan=True)
    y = x.clone().to("tpu")
    y.sqrt_()
    torch.testing.assert_close(y.cpu(), x.sqrt(), equal_nan=True)


@pytest.mark.parametrize("shape,dim", [((512, 4096), -1), ((7, 300), -1), ((5, 6, 7), 1), ((3, 1000), 0),
                                       ((4, 33), -1)])
def test_log_softmax_softmax_and_row_sums(shape, dim):
    x = torch.randn(*shape, generator=_gen(5)) * 5
    x.view(-1)[3] = float("-inf")
    for f in (torch.log_softmax, torch.softmax):
        torch.testing.assert_close(f(x.to("tpu"), dim).cpu(), f(x, dim))
    t = x.t() if x.dim() == 2 else x.transpose(0, 2)  # strided rows
    torch.testing.assert_close(torch.log_softmax(t.to("tpu"), -1).cpu(), torch.log_softmax(t, -1))
    y = torch.randn(*shape, generator=_gen(6))
    torch.testing.assert_close(y.to("tpu").sum(dim).cpu(), y.sum(dim), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(y.to("tpu").mean(-1, keepdim=True).cpu(), y.mean(-1, keepdim=True))


@pytest.mark.parametrize("shape,dims", [((8, 64, 256), (0, 1)), ((7, 300), (0,)), ((3, 5, 70), (0,)),
                                        ((513, 9), (0,)), ((4, 6, 300), (0, 1))])
def test_column_sums(shape, dims):
    y = torch.randn(*shape, generator=_gen(7))
    torch.testing.assert_close(y.to("tpu").sum(dims).cpu(), y.sum(dims), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y.to("tpu").mean(dims).cpu(), y.mean(dims))
    yt = y.transpose(0, -1)  # lanes not contiguous: the generic path
    torch.testing.assert_close(yt.to("tpu").sum(-1).cpu(), yt.sum(-1), rtol=1e-5, atol=1e-5)
    big = (y * 1e4 + 1e6).to("tpu")  # double accumulators between the float partials
    torch.testing.assert_close(big.sum(dims).cpu(), (y * 1e4 + 1e6).double().sum(dims).float())
