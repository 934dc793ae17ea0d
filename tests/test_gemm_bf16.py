"""bfloat16 matrix products (mm, addmm, bmm, baddbmm, linear, mv) against
PyTorch CPU, under every kernel ISA: the default (AVX512_BF16 vdpbf16ps
kernels where the CPU has them), TORCH_TPU_KERNEL_ISA=avx2 and =generic.

Two kinds of inputs:
- small integers: every product and partial sum is exact in f32, so the
  result does not depend on the order of summation and must equal torch's
  bit for bit (assert_close then checks layout, packing and tails exactly);
- randn: PyTorch's default bf16 tolerances (rtol 1.6e-2, atol 1e-5)."""
import pytest
import torch
import torch.nn.functional as F

ISAS = ["default", "avx2", "generic"]
BF = torch.bfloat16


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    if request.param == "default":
        monkeypatch.delenv("TORCH_TPU_KERNEL_ISA", raising=False)
    else:
        monkeypatch.setenv("TORCH_TPU_KERNEL_ISA", request.param)
    yield request.param


def ints(*shape, gen, lo=-3, hi=4):
    return torch.randint(lo, hi, shape, generator=gen).to(BF)


def randn(*shape, gen):
    return torch.randn(shape, generator=gen).to(BF)


def on_tpu(fn, *args):
    out = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])
    torch.tpu.synchronize()
    return out.cpu()


MS = [1, 2, 3, 7, 16, 64, 512]
KNS = [(576, 1536), (33, 17), (1, 40), (129, 31), (2050, 70)]


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("K,N", KNS)
def test_linear_exact(isa, M, K, N):
    if M == 512 and K * N > 200000 and isa != "default":
        pytest.skip("large shapes only on the default ISA (speed)")
    g = torch.Generator().manual_seed(M * 131 + K * 7 + N)
    x, w, b = ints(M, K, gen=g), ints(N, K, gen=g), ints(N, gen=g)
    torch.testing.assert_close(on_tpu(F.linear, x, w), F.linear(x, w), rtol=0, atol=0)
    torch.testing.assert_close(on_tpu(F.linear, x, w, b), F.linear(x, w, b), rtol=0, atol=0)


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("K,N", [(576, 1536), (33, 17), (1024, 3072), (2048, 768)])
def test_mm_randn(isa, M, K, N):
    if K * N > 1000000 and (isa != "default" or M > 64):
        pytest.skip("large shapes only on the default ISA, M <= 64 (speed)")
    g = torch.Generator().manual_seed(M + K + N)
    a, b = randn(M, K, gen=g), randn(K, N, gen=g) * K ** -0.5
    torch.testing.assert_close(on_tpu(torch.mm, a, b), torch.mm(a, b))
    bt = randn(N, K, gen=g) * K ** -0.5  # linear layout: B = W^T
    torch.testing.assert_close(on_tpu(F.linear, a, bt), F.linear(a, bt))


@pytest.mark.parametrize("M,K,N", [(1, 77, 300), (3, 77, 300), (37, 300, 77), (100, 2049, 65)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_mm_layouts_exact(isa, M, K, N, layout):
    """Transposed operands and (for the output) transposed/strided results."""
    g = torch.Generator().manual_seed(M * K + N)
    a = ints(K, M, gen=g).t() if layout[0] == "t" else ints(M, K, gen=g)
    b = ints(N, K, gen=g).t() if layout[1] == "t" else ints(K, N, gen=g)
    torch.testing.assert_close(on_tpu(torch.mm, a, b), torch.mm(a, b), rtol=0, atol=0)
    # strided: every other column of a wider matrix
    a2 = ints(M, 2 * K, gen=g)[:, ::2]
    b2 = ints(K, 2 * N + 3, gen=g)[:, 1::2]
    torch.testing.assert_close(on_tpu(torch.mm, a2, b2), torch.mm(a2, b2), rtol=0, atol=0)
    # transposed output: mm(b^T, a^T)^T, and an out= into a transposed buffer
    out = torch.empty(N, M, dtype=BF).t()

    def mm_out(x, y, o):
        torch.mm(x, y, out=o)
        return o

    torch.testing.assert_close(on_tpu(mm_out, a, b, out), torch.mm(a, b), rtol=0, atol=0)


@pytest.mark.parametrize("M,K,N", [(1, 65, 130), (2, 64, 100), (16, 576, 1536), (70, 129, 33)])
@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0), (1.0, -0.25)])
@pytest.mark.parametrize("bias_shape", ["row", "full", "col", "scalar"])
def test_addmm(isa, M, K, N, beta, alpha, bias_shape):
    g = torch.Generator().manual_seed(M + 3 * K + N)
    a, b = randn(M, K, gen=g), randn(N, K, gen=g).t() * K ** -0.5
    bias = {"row": lambda: randn(N, gen=g), "full": lambda: randn(M, N, gen=g),
            "col": lambda: randn(M, 1, gen=g), "scalar": lambda: randn(1, gen=g)}[bias_shape]()
    got = on_tpu(lambda s, x, y: torch.addmm(s, x, y, beta=beta, alpha=alpha), bias, a, b)
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    # exact variant (integer inputs, beta/alpha powers of two)
    ai, bi, si = ints(M, K, gen=g), ints(K, N, gen=g), ints(M, N, gen=g)
    got = on_tpu(lambda s, x, y: torch.addmm(s, x, y, beta=beta, alpha=alpha), si, ai, bi)
    torch.testing.assert_close(got, torch.addmm(si, ai, bi, beta=beta, alpha=alpha), rtol=0, atol=0)


@pytest.mark.parametrize("B,M,K,N", [(3, 1, 64, 100), (4, 7, 33, 65), (2, 64, 64, 64), (5, 17, 128, 3)])
def test_bmm_baddbmm(isa, B, M, K, N):
    g = torch.Generator().manual_seed(B * M + K * N)
    a, b = ints(B, M, K, gen=g), ints(B, K, N, gen=g)
    torch.testing.assert_close(on_tpu(torch.bmm, a, b), torch.bmm(a, b), rtol=0, atol=0)
    # attention-like strides: q @ k^T with k transposed, and a permuted a
    kt = ints(B, N, K, gen=g).transpose(1, 2)
    ap = ints(M, B, K, gen=g).transpose(0, 1)
    torch.testing.assert_close(on_tpu(torch.bmm, ap, kt), torch.bmm(ap, kt), rtol=0, atol=0)
    s = randn(B, M, N, gen=g)
    ar, br = randn(B, M, K, gen=g), randn(B, K, N, gen=g) * K ** -0.5
    got = on_tpu(lambda s_, x, y: torch.baddbmm(s_, x, y, beta=0.5, alpha=1.5), s, ar, br)
    torch.testing.assert_close(got, torch.baddbmm(s, ar, br, beta=0.5, alpha=1.5))


@pytest.mark.parametrize("M,K", [(300, 5000), (64, 33), (1, 7)])
def test_mv(isa, M, K):
    g = torch.Generator().manual_seed(M + K)
    a, v = ints(M, K, gen=g), ints(K, gen=g)
    torch.testing.assert_close(on_tpu(torch.mv, a, v), torch.mv(a, v), rtol=0, atol=0)
    torch.testing.assert_close(on_tpu(torch.mv, a.t().contiguous().t(), v[:]),
                               torch.mv(a, v), rtol=0, atol=0)


def test_linear_3d_and_special_values(isa):
    """[batch, seq, K] activations, and inf/NaN propagation like torch."""
    g = torch.Generator().manual_seed(7)
    x, w, b = randn(2, 5, 96, gen=g), randn(40, 96, gen=g) * 0.1, randn(40, gen=g)
    torch.testing.assert_close(on_tpu(F.linear, x, w, b), F.linear(x, w, b))
    x = ints(9, 70, gen=g)
    w = ints(50, 70, gen=g)
    x[1, 3] = float("inf")
    x[4, 0] = float("nan")
    w[7, 69] = float("-inf")
    torch.testing.assert_close(on_tpu(F.linear, x, w), F.linear(x, w), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(on_tpu(F.linear, x[:1], w), F.linear(x[:1], w), rtol=0, atol=0,
                               equal_nan=True)


def fp32_ref(fn, *args):
    """torch CPU's float32 product of the same bf16 inputs, rounded to bf16 once."""
    return fn(*[a.float() if isinstance(a, torch.Tensor) else a for a in args]).to(BF)


GEMV_KS = [1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 1000, 2047, 2048, 2049, 4097]


@pytest.mark.parametrize("K", GEMV_KS)
@pytest.mark.parametrize("N", [1, 7, 65])
def test_gemv_tails(isa, K, N):
    """M = 1 (decode) against nn.Linear weights: every K tail of the 16/32-element
    loops and of the 2048-element K blocks, exact (integers) and randn against the
    float32 product."""
    g = torch.Generator().manual_seed(K * 10 + N)
    x, w = ints(1, K, gen=g), ints(N, K, gen=g)
    torch.testing.assert_close(on_tpu(F.linear, x, w), F.linear(x, w), rtol=0, atol=0)
    x, w = randn(1, K, gen=g), randn(N, K, gen=g) * K ** -0.5
    torch.testing.assert_close(on_tpu(F.linear, x, w), fp32_ref(F.linear, x, w))
    torch.testing.assert_close(on_tpu(F.linear, x[0], w), fp32_ref(F.linear, x[0], w))


@pytest.mark.parametrize("K,N", [(33, 40), (576, 96), (2049, 17)])
def test_gemv_strided(isa, K, N):
    """M = 1 with a weight whose rows are longer than K (a column slice), a
    transposed weight, a strided x, and batched M = 1 products (bmm)."""
    g = torch.Generator().manual_seed(K + N)
    wide = ints(N, K + 5, gen=g)
    w = wide[:, 2:K + 2]  # row stride K + 5
    x = ints(1, 2 * K, gen=g)[:, ::2]
    torch.testing.assert_close(on_tpu(F.linear, x, w), F.linear(x, w), rtol=0, atol=0)
    wt = ints(K, N, gen=g).t()  # column-major weight: unit stride along N
    torch.testing.assert_close(on_tpu(F.linear, x, wt), F.linear(x, wt), rtol=0, atol=0)
    a, b = randn(3, 1, K, gen=g), randn(3, N, K, gen=g).transpose(1, 2) * K ** -0.5
    torch.testing.assert_close(on_tpu(torch.bmm, a, b), fp32_ref(torch.bmm, a, b))
    a3 = randn(2, 1, K, gen=g)
    torch.testing.assert_close(on_tpu(F.linear, a3, w.float().to(BF)), fp32_ref(F.linear, a3, w.float().to(BF)))


@pytest.mark.parametrize("M", [64, 65, 128, 200])
@pytest.mark.parametrize("K,N", [(576, 576), (31, 100), (1537, 67)])
def test_gemm_randn_vs_fp32(isa, M, K, N):
    """The M >= 64 GEMM against torch's float32 product of the same bf16 inputs:
    odd K (no pair partner for the last element), N not a multiple of a panel."""
    if isa == "generic" and M * K * N > 5_000_000:
        pytest.skip("generic loops: small shapes only (speed)")
    g = torch.Generator().manual_seed(M * 3 + K + N)
    x, w = randn(M, K, gen=g), randn(N, K, gen=g) * K ** -0.5
    torch.testing.assert_close(on_tpu(F.linear, x, w), fp32_ref(F.linear, x, w))
    b = randn(K, N, gen=g) * K ** -0.5
    torch.testing.assert_close(on_tpu(torch.mm, x, b), fp32_ref(torch.mm, x, b))
