"""Convolution (aten::convolution_overrideable / convolution_backward_overrideable,
runtime/kernels/conv.c) and the misc kernels (histc, eye, log_sigmoid, erfinv,
runtime/kernels/misc.c) against PyTorch's CPU results, with the CPU fallback
forbidden (TORCH_TPU_FALLBACK=error)."""
import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _native_only(no_fallback):
    yield


def close(got, ref, dtype):
    assert got.device.type == "tpu"
    got, ref = got.detach().cpu(), ref.detach()
    scale = max(1.0, float(ref.float().abs().max()))
    if dtype in (torch.bfloat16, torch.float16):
        torch.testing.assert_close(got.float(), ref.float(), rtol=2e-2, atol=2e-2 * scale)
    elif dtype == torch.float32:  # f32 sums in another order
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=2e-6 * scale)
    else:
        torch.testing.assert_close(got, ref)


def run_both(fn, inputs, dtype, grad=True):
    """fn(*inputs) on CPU (in float32 for half dtypes, then rounded) and on tpu;
    compares outputs and, with grad, the gradients of sum(out * cotangent)."""
    torch.manual_seed(1)
    ref_dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    cpu_in = [t.detach().to(dtype).to(ref_dtype).requires_grad_(grad and t.is_floating_point()) for t in inputs]
    tpu_in = [t.detach().to(dtype).to("tpu").requires_grad_(grad and t.is_floating_point()) for t in inputs]
    ref = fn(*cpu_in)
    got = fn(*tpu_in)
    close(got, ref.to(dtype), dtype)
    if grad:
        cot = torch.randn(ref.shape).to(dtype)
        (ref * cot.to(ref_dtype)).sum().backward()
        (got * cot.to("tpu")).sum().backward()
        for c, t in zip(cpu_in, tpu_in):
            if c.requires_grad:
                close(t.grad, c.grad.to(dtype), dtype)


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d_depthwise_causal_mamba(dtype):
    # Mamba's causal conv1d: depthwise, padding k-1, then the first L outputs.
    B, C, L, k = 2, 24, 37, 4
    x, w, b = torch.randn(B, C, L), torch.randn(C, 1, k), torch.randn(C)
    run_both(lambda x, w, b: F.conv1d(x, w, b, padding=k - 1, groups=C)[..., :L], [x, w, b], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d_module_transposed_input(dtype):
    # Mamba feeds conv1d with a transposed (B, L, C) -> (B, C, L) view.
    conv = torch.nn.Conv1d(16, 16, 4, groups=16, padding=3)
    x = torch.randn(2, 9, 16)
    ref = conv(x.transpose(1, 2).to(dtype).float()).to(dtype)
    got = conv.to(dtype).to("tpu")(x.to(dtype).to("tpu").transpose(1, 2))
    close(got, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "cin,cout,groups,stride,padding,dilation,k",
    [
        (4, 8, 1, 1, 1, 1, 3),
        (4, 8, 1, 2, 1, 1, 3),
        (6, 12, 3, (2, 1), (1, 2), (1, 2), (3, 2)),
        (16, 16, 16, 1, 1, 1, 3),  # depthwise
        (16, 32, 2, 2, 0, 1, 1),  # grouped pointwise, strided
        (32, 100, 1, 1, 1, 1, 3),  # several gemm tiles
        (3, 16, 1, 4, 0, 1, 4),  # patch embedding
    ],
)
def test_conv2d(dtype, cin, cout, groups, stride, padding, dilation, k):
    x = torch.randn(2, cin, 11, 13)
    w = torch.randn(cout, cin // groups, *((k, k) if isinstance(k, int) else k)) * 0.3
    b = torch.randn(cout)
    run_both(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
             [x, w, b], dtype)


# The blocked path (runtime/kernels/conv.c: no im2col, 4 output channels x 24
# outputs per register tile) on its own (TORCH_TPU_CONV_PATH=blocked) and as
# chosen by default: channels 1..80, 1x1 and 3x3 kernels, padding 0/1,
# stride 1/2, dilation, groups, odd sizes, batch > 1; forward and both
# gradients (grad_input runs the flipped kernel through the same path).
BLOCKED_CASES = [
    # batch, cin, cout, groups, H, W, k, stride, padding, dilation
    (1, 1, 1, 1, 7, 9, 3, 1, 1, 1),
    (2, 3, 4, 1, 9, 11, 3, 1, 0, 1),
    (2, 4, 32, 1, 16, 16, 3, 1, 1, 1),
    (3, 8, 5, 1, 5, 13, 1, 1, 0, 1),
    (1, 13, 17, 1, 12, 23, 3, 2, 1, 1),
    (2, 32, 32, 1, 17, 17, 3, 2, 0, 1),
    (1, 33, 64, 1, 8, 8, 3, 1, 1, 1),
    (2, 64, 7, 1, 10, 9, 1, 2, 0, 1),
    (1, 80, 80, 1, 6, 37, 3, 1, 1, 1),
    (2, 2, 80, 1, 11, 5, 3, 1, 1, 2),
    (2, 12, 16, 2, 9, 14, 3, 1, 1, 1),
    (1, 16, 24, 4, 13, 10, 3, (2, 1), (1, 0), (1, 2)),
    (2, 24, 40, 1, 40, 40, 3, 1, 1, 1),  # several bands per image
]


@pytest.mark.parametrize("path", ["blocked", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", BLOCKED_CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_blocked(monkeypatch, path, dtype, case):
    n, cin, cout, groups, h, w_, k, stride, padding, dilation = case
    if path == "blocked":
        monkeypatch.setenv("TORCH_TPU_CONV_PATH", "blocked")
    else:
        monkeypatch.delenv("TORCH_TPU_CONV_PATH", raising=False)
    torch.manual_seed(0)
    x = torch.randn(n, cin, h, w_)
    w = torch.randn(cout, cin // groups, k, k) / (cin // groups * k * k) ** 0.5
    b = torch.randn(cout)
    run_both(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
             [x, w, b], dtype)


def test_conv1d_blocked(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CONV_PATH", "blocked")
    x, w, b = torch.randn(2, 7, 29), torch.randn(9, 7, 3), torch.randn(9)
    run_both(lambda x, w, b: F.conv1d(x, w, b, padding=1), [x, w, b], torch.float32)
    run_both(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=3), [x, w, b], torch.float32)


def test_conv2d_no_bias_channels_last_and_same_padding():
    x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)
    w = torch.randn(12, 8, 3, 3)
    run_both(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32)
    run_both(lambda x, w: F.conv2d(x, w, padding="same"), [x, w], torch.float32)
    run_both(lambda x, w: F.conv2d(x, w, padding="valid", stride=2), [x, w], torch.float32)


def test_conv2d_only_weight_grad():
    x = torch.randn(1, 4, 8, 8)
    w = torch.randn(6, 4, 3, 3, requires_grad=True)
    ref = torch.autograd.grad(F.conv2d(x, w).sum(), w)[0]
    wt = w.detach().to("tpu").requires_grad_()
    got = torch.autograd.grad(F.conv2d(x.to("tpu"), wt).sum(), wt)[0]
    close(got, ref, torch.float32)


def test_conv3d_and_float64():
    x = torch.randn(1, 3, 5, 6, 7)
    w = torch.randn(4, 3, 2, 3, 2)
    b = torch.randn(4)
    run_both(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1)), [x, w, b],
             torch.float32)
    run_both(lambda x, w, b: F.conv3d(x, w, b, padding=1), [x, w, b], torch.float64)
    x1, w1 = torch.randn(2, 4, 20), torch.randn(4, 1, 3)
    run_both(lambda x, w: F.conv1d(x, w, padding=2, groups=4), [x1, w1], torch.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_transpose(dtype):
    x = torch.randn(2, 6, 7, 5)
    w = torch.randn(6, 4, 3, 3) * 0.3  # (in, out / groups, k, k)
    b = torch.randn(8)
    run_both(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
             [x, w, b], dtype)
    x1, w1 = torch.randn(2, 5, 9), torch.randn(5, 3, 4)
    run_both(lambda x, w: F.conv_transpose1d(x, w, stride=1, padding=2, dilation=2), [x1, w1], dtype)
    run_both(lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1), [x1, w1], dtype)


def test_conv_module_training_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, stride=2, groups=2), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 7 * 7, 4))
    dev = [p.detach().clone() for p in net.parameters()]
    x, y = torch.randn(4, 3, 16, 16), torch.randn(4, 4)
    loss = F.mse_loss(net(x), y)
    loss.backward()
    ref_grads = [p.grad for p in net.parameters()]
    with torch.no_grad():
        for p, d in zip(net.parameters(), dev):
            p.copy_(d)
    net.zero_grad()
    net = net.to("tpu")
    loss_t = F.mse_loss(net(x.to("tpu")), y.to("tpu"))
    loss_t.backward()
    torch.testing.assert_close(loss_t.cpu(), loss.detach())
    for p, g in zip(net.parameters(), ref_grads):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-4, atol=1e-5)


def test_conv_errors():
    x = torch.randn(1, 4, 8, device="tpu")
    with pytest.raises(RuntimeError):
        F.conv1d(x, torch.randn(6, 3, 3, device="tpu"))  # channel mismatch (ATen's check)
    with pytest.raises(NotImplementedError, match="conv_fwd"):
        torch.ops.aten.convolution_overrideable(x.bool(), torch.ones(2, 4, 3, dtype=torch.bool, device="tpu"),
                                                None, [1], [0], [1], False, [0], 1)


def test_conv_int64():
    x, w, b = torch.randint(-9, 9, (2, 4, 11)), torch.randint(-9, 9, (6, 2, 3)), torch.randint(-9, 9, (6,))
    ref = F.conv1d(x, w, b, stride=2, padding=1, groups=2)
    assert torch.equal(F.conv1d(x.to("tpu"), w.to("tpu"), b.to("tpu"), stride=2, padding=1, groups=2).cpu(), ref)


# ---- misc -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_histc_float(dtype):
    x = (torch.randn(1000) * 3).to(dtype)
    for bins, lo, hi in [(10, -2.0, 2.0), (7, 0.0, 0.0), (100, -5.0, 1.0)]:
        ref = torch.histc(x, bins=bins, min=lo, max=hi)
        got = torch.histc(x.to("tpu"), bins=bins, min=lo, max=hi)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), ref)
    edges = torch.tensor([0.0, 1.0, 2.0, 2.5, 3.0, 4.0, 5.0, -1.0, 9.0], dtype=dtype)
    torch.testing.assert_close(torch.histc(edges.to("tpu"), bins=4, min=0, max=4).cpu(),
                               torch.histc(edges, bins=4, min=0, max=4))
    out = torch.empty(5, dtype=dtype, device="tpu")
    torch.histc(x.to("tpu"), bins=5, min=-1, max=1, out=out)
    torch.testing.assert_close(out.cpu(), torch.histc(x, bins=5, min=-1, max=1))


def test_histc_int_like_cuda():
    # Transformers' MoE code: torch.histc(expert_ids, bins=E, min=0, max=E - 1) on the device.
    E = 8
    ids = torch.randint(0, E, (64, 2))
    for dtype in (torch.int64, torch.int32):
        got = torch.histc(ids.to(dtype).to("tpu"), bins=E, min=0, max=E - 1)
        assert got.dtype == dtype
        assert got.cpu().tolist() == torch.bincount(ids.flatten(), minlength=E).tolist()
        # min == max == 0: the data's range, CUDA's integer binning
        vals = ids.flatten()[1:-3] + 2
        mn, mx = int(vals.min()), int(vals.max())
        want = [0] * 5
        for v in vals.tolist():
            want[min((v - mn) * 5 // (mx - mn), 4)] += 1
        assert torch.histc(vals.to(dtype).to("tpu"), bins=5).cpu().tolist() == want
    with pytest.raises((RuntimeError, ValueError), match="max must be larger than min"):
        torch.histc(torch.randn(4, device="tpu"), bins=3, min=2, max=1)
    with pytest.raises((RuntimeError, ValueError), match="not finite"):
        torch.histc(torch.tensor([1.0, float("nan")], device="tpu"), bins=3).cpu()


def test_eye():
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        torch.testing.assert_close(torch.eye(5, dtype=dtype, device="tpu").cpu(), torch.eye(5, dtype=dtype))
        torch.testing.assert_close(torch.eye(3, 6, dtype=dtype, device="tpu").cpu(), torch.eye(3, 6, dtype=dtype))
    out = torch.empty(4, 3, device="tpu")
    torch.eye(4, 3, out=out)
    torch.testing.assert_close(out.cpu(), torch.eye(4, 3))
    assert torch.eye(0, device="tpu").shape == (0, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_logsigmoid(dtype):
    x = torch.cat([torch.randn(200) * 5, torch.tensor([-40.0, -0.0, 0.0, 40.0])]).to(dtype)
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    ref, got = F.logsigmoid(xc), F.logsigmoid(xt)
    torch.testing.assert_close(got.cpu(), ref.detach())
    g = torch.randn(x.shape).to(dtype)
    ref.backward(g)
    got.backward(g.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    m = torch.nn.LogSigmoid()
    torch.testing.assert_close(m(x.reshape(4, -1).t().to("tpu")).cpu(), m(x.reshape(4, -1).t()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_erfinv(dtype):
    x = (torch.rand(300) * 1.98 - 0.99).to(dtype)
    x = torch.cat([x, torch.tensor([0.0, 1.0, -1.0, 1.5], dtype=dtype)])
    torch.testing.assert_close(torch.erfinv(x.to("tpu")).cpu(), torch.erfinv(x), equal_nan=True)
    y = x.to("tpu")
    y.erfinv_()
    torch.testing.assert_close(y.cpu(), torch.erfinv(x), equal_nan=True)
    out = torch.empty_like(x, device="tpu")
    torch.erfinv(x.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.erfinv(x), equal_nan=True)
    if dtype == torch.float32:
        ints = torch.tensor([0, 1, -1, 2])
        torch.testing.assert_close(torch.erfinv(ints.to("tpu")).cpu(), torch.erfinv(ints), equal_nan=True)
