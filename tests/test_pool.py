"""Pooling (runtime/kernels/pool.c): avg_pool2d, avg_pool3d, max_pool2d_with_indices
and their backwards against PyTorch's CPU results in the same dtype, over kernel,
stride, padding, dilation, ceil_mode, count_include_pad and divisor_override,
3-d and 4-d inputs, channels_last and sliced inputs; with the CPU fallback
forbidden (TORCH_TPU_FALLBACK=error)."""
import pytest
import torch
import torch.nn.functional as F
import torch_tpu

DRIVER = torch_tpu._C.selected_driver()

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
LAYOUTS = ["nchw", "chw", "channels_last", "sliced"]


@pytest.fixture(autouse=True)
def _native_only(no_fallback):
    yield


def make(layout, shape=(2, 3, 9, 10), dtype=torch.float32, seed=0):
    """A CPU tensor of `dtype` in `layout`, and its copy on tpu with the same strides."""
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = shape
    if layout == "sliced":  # a non-contiguous view: every other column of a wider tensor
        base = torch.randn(n, c, h + 1, 2 * w, generator=g).to(dtype)
        return base[:, :, 1:, ::2], base.to("tpu")[:, :, 1:, ::2]
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    if layout == "chw":
        x = x[0]
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    t = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="tpu")
    t.copy_(x)
    return x, t


def close(got, ref):
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), ref, equal_nan=True)


def run_both(fn, x_cpu, x_tpu, grad):
    """fn on both devices; with grad, compares d(sum(out * w))/dx too."""
    xc = x_cpu.detach().requires_grad_(grad)
    xt = x_tpu.detach().requires_grad_(grad)
    ref, got = fn(xc), fn(xt)
    refs = ref if isinstance(ref, tuple) else (ref,)
    gots = got if isinstance(got, tuple) else (got,)
    for r, o in zip(refs, gots):
        close(o, r)
    if grad:
        w = torch.randn(refs[0].shape, generator=torch.Generator().manual_seed(3)).to(x_cpu.dtype)
        (refs[0] * w).sum().backward()
        (gots[0] * w.to("tpu")).sum().backward()
        close(xt.grad, xc.grad)


AVG_ARGS = [  # kernel_size, stride, padding
    (2, None, 0),
    (3, 2, 1),
    ((3, 2), (2, 1), (1, 1)),
    (3, 1, 1),
    ((2, 4), (3, 2), (1, 2)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel,stride,padding", AVG_ARGS)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad,divisor", [(True, None), (False, None), (True, 5)])
def test_avg_pool2d(dtype, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    x, t = make("nchw", dtype=dtype)
    fn = lambda v: F.avg_pool2d(v, kernel, stride, padding, ceil_mode, count_include_pad, divisor)  # noqa: E731
    run_both(fn, x, t, grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_avg_pool2d_layouts(dtype, layout, ceil_mode):
    x, t = make(layout, dtype=dtype)
    fn = lambda v: F.avg_pool2d(v, 3, 2, 1, ceil_mode, False)  # noqa: E731
    run_both(fn, x, t, grad=True)
    if layout == "channels_last":  # the output keeps the input's memory format, as on the CPU
        assert fn(t).stride() == fn(x).stride()


def test_avg_pool2d_gemma3_shape():
    # Gemma 3's vision tower pools (B, C, 64, 64) patch grids 4x4 in bfloat16.
    x, t = make("nchw", shape=(1, 16, 64, 64), dtype=torch.bfloat16)
    run_both(lambda v: F.avg_pool2d(v, 4, 4), x, t, grad=True)


def test_avg_pool2d_int64_and_out():
    x = torch.randint(-50, 50, (2, 3, 7, 7))
    t = x.to("tpu")
    close(F.avg_pool2d(t, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1))
    close(F.avg_pool2d(t, 3, 1, 1, divisor_override=-4), F.avg_pool2d(x, 3, 1, 1, divisor_override=-4))
    xf, tf = make("nchw")
    out = torch.empty(0, device="tpu")
    torch.ops.aten.avg_pool2d.out(tf, [3, 3], [2, 2], [1, 1], True, True, None, out=out)
    close(out, F.avg_pool2d(xf, 3, 2, 1, True))
    gi = torch.empty(0, device="tpu")
    g = torch.randn(out.shape)
    torch.ops.aten.avg_pool2d_backward.grad_input(g.to("tpu"), tf, [3, 3], [2, 2], [1, 1], True, True, None,
                                                   grad_input=gi)
    close(gi, torch.ops.aten.avg_pool2d_backward(g, xf, [3, 3], [2, 2], [1, 1], True, True, None))


MAX_ARGS = [  # kernel_size, stride, padding, dilation
    (2, None, 0, 1),
    (3, 2, 1, 1),
    (3, 1, 1, 2),
    ((3, 2), (2, 1), (1, 1), (1, 2)),
    (2, 3, 1, 3),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel,stride,padding,dilation", MAX_ARGS)
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool2d(dtype, kernel, stride, padding, dilation, ceil_mode):
    x, t = make("nchw", dtype=dtype)
    fn = lambda v: F.max_pool2d(v, kernel, stride, padding, dilation, ceil_mode, return_indices=True)  # noqa: E731
    run_both(fn, x, t, grad=True)
    # without return_indices (what most models call)
    run_both(lambda v: F.max_pool2d(v, kernel, stride, padding, dilation, ceil_mode), x, t, grad=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_max_pool2d_layouts(dtype, layout):
    x, t = make(layout, dtype=dtype)
    run_both(lambda v: F.max_pool2d(v, 3, 2, 1, 2, True, return_indices=True), x, t, grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool2d_nan_and_ties(dtype):
    x = torch.zeros(1, 2, 6, 6, dtype=dtype)  # all ties: the first index wins
    x[0, 1, 1, 1] = float("nan")
    x[0, 1, 4, 4] = float("nan")
    x[0, 1, 2, 2] = float("inf")
    run_both(lambda v: F.max_pool2d(v, 3, 1, 1, return_indices=True), x, x.to("tpu"), grad=True)
    y = torch.full((1, 1, 4, 4), float("-inf"), dtype=dtype)  # all -inf: -inf at the window's first element
    run_both(lambda v: F.max_pool2d(v, 2, 1, return_indices=True), y, y.to("tpu"), grad=False)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_max_pool2d_int(dtype):
    x = torch.randint(0 if dtype == torch.uint8 else -100, 100, (2, 3, 7, 8)).to(dtype)
    run_both(lambda v: F.max_pool2d(v, 3, 2, 1, return_indices=True), x, x.to("tpu"), grad=False)


def test_max_pool2d_out_overloads():
    x, t = make("nchw")
    v, i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.max_pool2d_with_indices.out(t, [3, 3], [2, 2], [1, 1], [1, 1], False, out=v, indices=i)
    rv, ri = torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1], [1, 1], False)
    close(v, rv)
    close(i, ri)
    g = torch.randn(rv.shape)
    gi = torch.empty(0, device="tpu")
    torch.ops.aten.max_pool2d_with_indices_backward.grad_input(g.to("tpu"), t, [3, 3], [2, 2], [1, 1], [1, 1], False,
                                                                i, grad_input=gi)
    close(gi, torch.ops.aten.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, ri))


def test_modules_and_1d():
    x, t = make("nchw")
    for m in [torch.nn.AvgPool2d(3, 2, 1), torch.nn.MaxPool2d(2), torch.nn.AvgPool1d(3, 2, 1), torch.nn.MaxPool1d(3)]:
        xi, ti = (x, t) if "2d" in type(m).__name__ else (x[0], t[0])
        run_both(m, xi, ti, grad=True)


def test_errors_match_cpu():
    x, t = make("nchw")
    cases = [
        lambda v: F.avg_pool2d(v, 2, padding=2),  # padding > kernel / 2
        lambda v: F.max_pool2d(v, 2, padding=2),
        lambda v: F.avg_pool2d(v, 2, divisor_override=0),
        lambda v: F.avg_pool2d(v.to(torch.int32), 2),  # no int32 avg_pool2d on the CPU
        lambda v: F.avg_pool2d(v, 20),  # output would be empty
        # 2-d input: on the host driver PyTorch's Python meta function (which
        # sizes the tpu output) raises IndexError where the CPU raises RuntimeError
        lambda v: F.max_pool2d(v[0, 0], 2),
    ]
    for i, fn in enumerate(cases):
        with pytest.raises(RuntimeError):
            fn(x)
        with pytest.raises((RuntimeError, IndexError) if i == len(cases) - 1 else RuntimeError):
            fn(t)
            torch.tpu.synchronize()


def test_no_fallback_for_pooling():
    from torch_tpu import _decomp

    torch_tpu.reset_fallback_report()
    _decomp.reset_decomposition_report()
    x, t = make("channels_last", dtype=torch.bfloat16)
    t.requires_grad_(True)
    (F.avg_pool2d(t, 3, 2, 1).sum() + F.max_pool2d(t, 3, 2, 1).sum()).backward()
    F.max_pool2d(t.detach(), 2, return_indices=True)
    torch.tpu.synchronize()
    assert not [k for k in torch_tpu.fallback_report() if "pool" in k]
    decomposed = [k for k in _decomp.decomposition_report() if "pool" in str(k)]
    if DRIVER == "host":
        assert not decomposed  # native, not decomposed
    else:  # pjrt: the forward max pool runs PyTorch's decomposition (equal to the CPU), the rest the C kernels
        assert set(decomposed) <= {"aten.max_pool2d_with_indices.default"}
    native = set(torch_tpu.native_ops())
    for op in ["avg_pool2d", "avg_pool2d.out", "avg_pool2d_backward", "avg_pool2d_backward.grad_input",
               "max_pool2d_with_indices", "max_pool2d_with_indices.out", "max_pool2d_with_indices_backward",
               "max_pool2d_with_indices_backward.grad_input", "avg_pool3d", "avg_pool3d.out", "avg_pool3d_backward",
               "avg_pool3d_backward.grad_input"]:
        assert "aten::" + op in native


AVG3_ARGS = [  # kernel_size, stride, padding
    (2, None, 0),
    (3, 2, 1),
    ((2, 3, 2), (1, 2, 2), (1, 1, 0)),
]


def make3(layout, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 7, generator=g).to(dtype)
    if layout == "cdhw":
        x = x[0]
    if layout == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    if layout == "sliced":
        x = x[:, :, 1:, :, ::2]
    t = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="tpu")
    t.copy_(x)
    return x, t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["ncdhw", "cdhw", "channels_last_3d", "sliced"])
@pytest.mark.parametrize("kernel,stride,padding", AVG3_ARGS)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad,divisor", [(True, None), (False, None), (True, 5)])
def test_avg_pool3d(dtype, layout, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    x, t = make3(layout, dtype)
    fn = lambda v: F.avg_pool3d(v, kernel, stride, padding, ceil_mode, count_include_pad, divisor)  # noqa: E731
    run_both(fn, x, t, grad=True)


def test_avg_pool3d_int64_and_errors():
    x = torch.randint(-50, 50, (2, 3, 5, 6, 7))
    close(F.avg_pool3d(x.to("tpu"), 3, 2, 1), F.avg_pool3d(x, 3, 2, 1))
    xb, tb = make3("ncdhw", torch.bfloat16)  # the CPU has no bfloat16 avg_pool3d: neither has tpu
    with pytest.raises(NotImplementedError):
        F.avg_pool3d(xb, 2)
    with pytest.raises(NotImplementedError):
        F.avg_pool3d(tb, 2)
        torch.tpu.synchronize()
    xf, tf = make3("ncdhw", torch.float32)
    for fn in [lambda v: F.avg_pool3d(v, 2, padding=2), lambda v: F.avg_pool3d(v, 2, divisor_override=0)]:
        with pytest.raises(RuntimeError):
            fn(xf)
        with pytest.raises(RuntimeError):
            fn(tf)
            torch.tpu.synchronize()
    torch_tpu.reset_fallback_report()
    tf.requires_grad_(True)
    F.avg_pool3d(tf, 3, 2, 1).sum().backward()
    torch.tpu.synchronize()
    assert not [k for k in torch_tpu.fallback_report() if "pool" in k]


# ---- adaptive max pooling -------------------------------------------------------
# Values, indices and gradients equal to the CPU's bit for bit: a max picks an
# input element, and the backward adds the gradients at each index in output
# order, rounding each sum to the dtype as the CPU does.


def exact(got, ref):
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0, equal_nan=True)


def run_exact(fn, x_cpu, x_tpu):
    """fn (returning values, indices) on both devices; the gradient of sum(values * w) too."""
    xc = x_cpu.detach().requires_grad_(True)
    xt = x_tpu.detach().requires_grad_(True)
    (rv, ri), (gv, gi) = fn(xc), fn(xt)
    exact(gv, rv.detach())
    exact(gi, ri)
    w = torch.randn(rv.shape, generator=torch.Generator().manual_seed(3)).to(x_cpu.dtype)
    (rv * w).sum().backward()
    (gv * w.to("tpu")).sum().backward()
    exact(xt.grad, xc.grad)


AMAX_SIZES = [(3, 4), (3, 5), (1, 1), (9, 10), (4, 7), (12, 13), (None, 2)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("size", AMAX_SIZES)
def test_adaptive_max_pool2d(dtype, layout, size):
    x, t = make(layout, dtype=dtype)
    run_exact(lambda v: F.adaptive_max_pool2d(v, size, return_indices=True), x, t)
    # the kernel's output keeps the input's memory format, as on the CPU (on pjrt, sizes
    # that divide evenly run PyTorch's decomposition, whose output is contiguous)
    if layout == "channels_last" and DRIVER == "host":
        assert F.adaptive_max_pool2d(t, size).stride() == F.adaptive_max_pool2d(x, size).stride()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_adaptive_max_pool2d_nan_and_ties(dtype):
    x = torch.zeros(1, 2, 7, 9, dtype=dtype)  # all ties: the first index of each window wins
    x[0, 1, 1, 1] = float("nan")
    x[0, 1, 1, 2] = float("nan")  # the last NaN of a window wins
    x[0, 1, 5, 6] = float("inf")
    x[0, 0, 3:, 4:] = float("-inf")
    run_exact(lambda v: F.adaptive_max_pool2d(v, (3, 4), return_indices=True), x, x.to("tpu"))
    y = torch.full((2, 5, 5), float("-inf"), dtype=dtype)  # all -inf: -inf at the window's first element
    run_exact(lambda v: F.adaptive_max_pool2d(v, 3, return_indices=True), y, y.to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adaptive_max_pool1d(dtype):
    g = torch.Generator().manual_seed(1)
    for shape, n in [((3, 11), 4), ((2, 3, 11), 5), ((2, 3, 7), 7), ((1, 2, 5), 9)]:
        x = torch.randn(shape, generator=g).to(dtype)
        run_exact(lambda v: F.adaptive_max_pool1d(v, n, return_indices=True), x, x.to("tpu"))
        exact(F.adaptive_max_pool1d(x.to("tpu"), n), F.adaptive_max_pool1d(x, n))
    base = torch.randn(2, 3, 12, generator=g)  # non-contiguous: every other element
    run_exact(lambda v: F.adaptive_max_pool1d(v, 4, return_indices=True), base[:, :, ::2], base.to("tpu")[:, :, ::2])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["ncdhw", "cdhw", "channels_last_3d", "sliced"])
@pytest.mark.parametrize("size", [(2, 3, 4), (5, 6, 7), (1, 1, 1), (3, None, 9)])
def test_adaptive_max_pool3d(dtype, layout, size):
    x, t = make3(layout, dtype)
    run_exact(lambda v: F.adaptive_max_pool3d(v, size, return_indices=True), x, t)


def test_adaptive_max_pool_modules_and_empty_batch():
    x, t = make("nchw")
    for m in [torch.nn.AdaptiveMaxPool2d((4, 3)), torch.nn.AdaptiveMaxPool1d(4)]:
        xi, ti = (x, t) if "2d" in type(m).__name__ else (x[0], t[0])
        run_both(m, xi, ti, grad=True)
    for fn, shape in [(lambda v: F.adaptive_max_pool2d(v, (2, 3), True), (0, 3, 5, 6)),
                      (lambda v: F.adaptive_max_pool3d(v, (2, 3, 2), True), (0, 3, 4, 5, 6))]:
        x = torch.randn(shape)
        run_exact(fn, x, x.to("tpu"))


def test_adaptive_max_pool_out_overloads():
    x, t = make("channels_last")
    v, i = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.adaptive_max_pool2d.out(t, [4, 3], out=v, indices=i)
    rv, ri = torch.ops.aten.adaptive_max_pool2d(x, [4, 3])
    exact(v, rv)
    exact(i, ri)
    g = torch.randn(rv.shape)
    gi = torch.empty(0, device="tpu")
    torch.ops.aten.adaptive_max_pool2d_backward.grad_input(g.to("tpu"), t, i, grad_input=gi)
    exact(gi, torch.ops.aten.adaptive_max_pool2d_backward(g, x, ri))
    x3, t3 = make3("ncdhw", torch.float32)
    v3, i3 = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.ops.aten.adaptive_max_pool3d.out(t3, [2, 4, 3], out=v3, indices=i3)
    rv3, ri3 = torch.ops.aten.adaptive_max_pool3d(x3, [2, 4, 3])
    exact(v3, rv3)
    exact(i3, ri3)
    g3 = torch.randn(rv3.shape)
    gi3 = torch.empty(0, device="tpu")
    torch.ops.aten.adaptive_max_pool3d_backward.grad_input(g3.to("tpu"), t3, i3, grad_input=gi3)
    exact(gi3, torch.ops.aten.adaptive_max_pool3d_backward(g3, x3, ri3))


def test_adaptive_max_pool_errors_match_cpu():
    x, t = make("nchw")
    cases = [
        (lambda v: F.adaptive_max_pool2d(v.to(torch.int64), 2), NotImplementedError),  # floats only on the CPU
        (lambda v: F.adaptive_max_pool3d(v.to(torch.int32), 2), NotImplementedError),
        (lambda v: F.adaptive_max_pool2d(v[0, 0], 2), RuntimeError),  # 2-d input
        (lambda v: F.adaptive_max_pool3d(v, (1, 2)), (RuntimeError, ValueError)),  # two sizes for three dims
        (lambda v: F.adaptive_max_pool2d(v[:, :, :0], 2), RuntimeError),  # an empty non-batch dim
        (lambda v: F.adaptive_max_pool3d(v[:, :0], 2), RuntimeError),
        (lambda v: torch.ops.aten.adaptive_max_pool2d_backward(v[:, :, :2, :2].double(), v,
                                                               v[:, :, :2, :2].long()), RuntimeError),
    ]
    for fn, exc in cases:
        with pytest.raises(exc):
            fn(x)
        with pytest.raises(exc):
            fn(t)
            torch.tpu.synchronize()


def test_no_fallback_for_adaptive_max_pooling():
    from torch_tpu import _decomp

    torch_tpu.reset_fallback_report()
    _decomp.reset_decomposition_report()
    x, t = make("channels_last", dtype=torch.bfloat16)
    t.requires_grad_(True)
    (F.adaptive_max_pool2d(t, (4, 3)).sum() + F.adaptive_max_pool1d(t[0], 4).sum()).backward()
    x3, t3 = make3("ncdhw", torch.float32)
    t3.requires_grad_(True)
    F.adaptive_max_pool3d(t3, (2, 4, 3)).sum().backward()
    torch.tpu.synchronize()
    assert not [k for k in torch_tpu.fallback_report() if "pool" in k]
    if DRIVER == "host":  # native, not decomposed
        assert not [k for k in _decomp.decomposition_report() if "pool" in str(k)]
    native = set(torch_tpu.native_ops())
    for op in ["adaptive_max_pool2d", "adaptive_max_pool2d.out", "adaptive_max_pool2d_backward",
               "adaptive_max_pool2d_backward.grad_input", "adaptive_max_pool3d", "adaptive_max_pool3d.out",
               "adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"]:
        assert "aten::" + op in native
