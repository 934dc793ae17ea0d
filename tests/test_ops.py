"""Native kernels against PyTorch's CPU results, with the CPU fallback
forbidden (TORCH_TPU_FALLBACK=error), so every op here runs in C."""
import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16]


def tpu(t):
    return t.to("tpu")


def check(fn, *args, dtype_tol=None, **kw):
    ref = fn(*args, **kw)
    got = fn(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    if isinstance(ref, (tuple, list)):
        for r, g in zip(ref, got):
            assert g.device.type == "tpu"
            torch.testing.assert_close(g.cpu(), r, equal_nan=True)
    else:
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)


@pytest.fixture(autouse=True)
def _native_only(no_fallback):
    yield


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum,
                                torch.eq, torch.lt, torch.ge])
def test_binary_broadcast(op, dtype):
    check(op, rand(4, 1, 5, dtype=dtype), rand(3, 1, dtype=dtype))
    check(op, rand(6, 5, dtype=dtype).t(), rand(5, 6, dtype=dtype))  # non-contiguous


def test_binary_mixed_dtypes_and_scalars():
    check(torch.add, rand(3, 4), torch.arange(4))
    check(lambda a: a * 2.5 + 1, rand(3, 4))
    check(lambda a: a / 3, torch.arange(12).reshape(3, 4))
    check(lambda a, b: torch.div(a, b, rounding_mode="floor"), torch.arange(-6, 6), torch.full((12,), 4))
    check(lambda a: a + torch.tensor(2.0), rand(5))  # cpu 0-dim tensor operand


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [torch.neg, torch.exp, torch.tanh, torch.sigmoid, torch.abs, torch.sqrt,
                                torch.rsqrt, torch.log, torch.sin, torch.cos,
                                torch.nn.functional.silu, torch.nn.functional.relu,
                                torch.nn.functional.gelu])
def test_unary(op, dtype):
    x = rand(7, 9, dtype=dtype)
    if op in (torch.sqrt, torch.rsqrt, torch.log):
        x = x.abs() + 0.1
    check(op, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions(dtype):
    x = rand(5, 6, 7, dtype=dtype)
    check(lambda a: a.sum(), x)
    check(lambda a: a.sum(dim=(0, 2), keepdim=True), x)
    check(lambda a: a.mean(-1), x)
    check(lambda a: a.amax(1), x)
    check(lambda a: a.argmax(-1), x)
    check(lambda a: torch.softmax(a, -1), x)
    check(lambda a: torch.log_softmax(a, 1), x)


def test_matmul_family():
    check(torch.mm, rand(7, 13), rand(13, 5))
    check(torch.bmm, rand(3, 7, 13), rand(3, 13, 5))
    check(torch.addmm, rand(5), rand(7, 13), rand(13, 5))
    check(lambda a, b: a @ b.t(), rand(1, 64), rand(96, 64))  # decode-shaped GEMV
    check(torch.nn.functional.linear, rand(4, 16, dtype=torch.bfloat16), rand(8, 16, dtype=torch.bfloat16))


def test_indexing_and_data_movement():
    x = rand(6, 4)
    idx = torch.tensor([5, 0, 2])
    check(torch.index_select, x, 0, idx)
    check(lambda a: torch.cat([a, a * 2], dim=1), x)
    check(lambda a: torch.gather(a, 1, torch.tensor([[0, 1], [3, 2]] * 3).to(a.device)), x)
    check(lambda a: a.tril(), x)
    check(lambda e, i: torch.nn.functional.embedding(i, e), x, torch.tensor([[1, 5], [0, 0]]))
    check(lambda a: a.to(torch.bfloat16), x)
    check(lambda a: a.t().contiguous(), x)


def test_fill_and_factories():
    assert torch.zeros(3, 4, device="tpu").sum().item() == 0.0
    assert torch.full((2, 2), 3.5, device="tpu").sum().item() == 14.0
    assert torch.equal(torch.arange(10, device="tpu").cpu(), torch.arange(10))


def test_empty_and_zero_dim_tensors():
    e = torch.empty(0, 3, device="tpu")
    assert (e + 1).shape == (0, 3)
    assert e.sum().item() == 0.0
    s = torch.tensor(2.0, device="tpu")
    assert (s * 3).item() == 6.0


def test_random_ops_native_and_reproducible():
    torch.manual_seed(0)
    p = torch.randperm(500, device="tpu").cpu()
    assert sorted(p.tolist()) == list(range(500))
    torch.manual_seed(0)
    assert torch.equal(torch.randperm(500, device="tpu").cpu(), p)
    w = torch.tensor([[0.1, 0.2, 0.7], [1.0, 0.0, 0.0]], device="tpu")
    s = torch.multinomial(w, 4000, replacement=True).cpu()
    assert abs((s[0] == 2).float().mean().item() - 0.7) < 0.05 and bool((s[1] == 0).all())
    assert sorted(torch.multinomial(w[:1], 3).cpu()[0].tolist()) == [0, 1, 2]
    x = torch.ones(20000, device="tpu", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.25, True)
    kept = y.detach().cpu() > 0
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    torch.testing.assert_close(y.detach().cpu()[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    y.sum().backward()
    assert torch.equal(x.grad.cpu() > 0, kept)


def test_multinomial_bad_probabilities_raise():
    with pytest.raises(ValueError, match="multinomial"):
        torch.multinomial(torch.tensor([-1.0, 1.0], device="tpu"), 1)
        torch.tpu.synchronize()
    assert torch.ones(2, device="tpu").sum().item() == 2.0
