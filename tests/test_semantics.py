"""PyTorch's semantics on tpu: one regression test per class of mismatch the differential fuzz
(tests/test_fuzz.py) found. Each runs the call on the CPU and on tpu: same result, or both raise."""
import math
import warnings

import pytest
import torch

F = torch.nn.functional


def same(fn, *args):
    """fn(*args) on the CPU and with tensors on tpu: equal results (dtypes included), or both raise."""
    def run(device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            moved = [a.clone().to(device) if isinstance(a, torch.Tensor) else a for a in args]
            r = fn(*moved)
            if device == "tpu":
                torch.tpu.synchronize()
            return r

    try:
        ref = run("cpu")
    except Exception as e:
        with pytest.raises(Exception):
            run("tpu")
        return type(e)
    got = run("tpu")
    ref = ref if isinstance(ref, (tuple, list)) else [ref]
    got = got if isinstance(got, (tuple, list)) else [got]
    for g, r in zip(got, ref):
        assert g.device.type == "tpu"
        assert g.dtype == r.dtype
        torch.testing.assert_close(g.cpu(), r, equal_nan=True)
    return None


def test_reduction_dtype_casts_first():
    x = torch.tensor([[1.7, -2.6, 3.5], [0.6, 0.6, 0.9]])
    for fn in (lambda t: t.sum(dtype=torch.int64), lambda t: t.sum(1, dtype=torch.int64),
               lambda t: t.prod(1, dtype=torch.int64), lambda t: t.cumsum(1, dtype=torch.int64),
               lambda t: t.cumprod(1, dtype=torch.int16), lambda t: t.nansum(dtype=torch.int8),
               lambda t: torch.sum(t, 1, out=torch.empty(2, dtype=torch.int64, device=t.device))):
        assert same(fn, x) is None


def test_out_of_wider_dtype_keeps_computation_dtype():
    b = torch.tensor([1.5, 2.25, -3.1], dtype=torch.bfloat16)
    assert same(lambda t: torch.exp(t, out=torch.empty(3, device=t.device)), b) is None
    i = torch.tensor([3, 7, -5], dtype=torch.int32)
    assert same(lambda t: torch.pow(t, 12, out=torch.empty(3, dtype=torch.int64, device=t.device)), i) is None
    bb = torch.tensor([True, True, False])
    r = torch.add(bb.to("tpu"), bb.to("tpu"), out=torch.empty(3, device="tpu"))
    assert r.cpu().tolist() == [1.0, 1.0, 0.0]
    h = torch.tensor([1.0, 2.0], dtype=torch.float16)
    assert same(lambda t: torch.pow(t, torch.tensor([3], dtype=torch.int16, device=t.device),
                                    out=torch.empty(2, dtype=torch.bfloat16, device=t.device)), h) is None


def test_inplace_result_type_must_cast():
    assert same(lambda t: t.mul_(1.5), torch.tensor([1, 2])) is RuntimeError
    assert same(lambda t: t.div_(2), torch.tensor([1, 2])) is RuntimeError
    assert same(lambda t: torch.exp(t, out=torch.empty(3, dtype=torch.int64, device=t.device)),
                torch.randn(3)) is RuntimeError


def test_masked_fill_converts_like_pytorch():
    m = torch.tensor([True, False, True])
    assert same(lambda t: t.masked_fill(m.to(t.device), 0.5), torch.tensor([False, False, True])) is None
    assert same(lambda t: t.masked_fill(m.to(t.device), math.nan), torch.tensor([False, False, False])) is None
    assert same(lambda t: t.masked_fill(m.to(t.device), 1.5), torch.tensor([1, 2, 3])) is None
    assert same(lambda t: t.masked_fill_(m.to(t.device), math.nan), torch.tensor([1, 2, 3])) is RuntimeError
    assert same(lambda t: t.masked_fill_(m.to(t.device), 300), torch.tensor([1, 2, 3], dtype=torch.int8)) \
        is RuntimeError
    assert same(lambda t: t.masked_fill(m.to(t.device), -1), torch.tensor([1, 2, 3], dtype=torch.uint8)) is None
    assert same(lambda t: t.masked_fill(m.to(t.device), 1e5), torch.tensor([1.0, 2, 3], dtype=torch.float16)) \
        is RuntimeError
    assert same(lambda t: t.fill_(math.nan), torch.tensor([1, 2, 3])) is RuntimeError
    empty = torch.zeros(1, 0, dtype=torch.uint8)  # the value is checked even when nothing is written
    assert same(lambda t, v: t.masked_fill(torch.zeros(1, 0, dtype=torch.bool, device=t.device), v),
                empty, torch.tensor(-1.5, dtype=torch.float64)) is RuntimeError
    assert same(lambda t: torch.pow(t, 1), torch.tensor([True, False])) is None  # pow by 1 copies, any dtype


def test_topk_of_0dim_tensor():
    for k in (0, 1):
        assert same(lambda t: torch.topk(t, k), torch.tensor(3.5)) is None


def test_written_tensor_may_not_overlap_itself():
    def expanded(t):
        return torch.zeros(3, 1, device=t.device, dtype=t.dtype).expand(3, 4)
    x = torch.randn(3, 4)
    assert same(lambda t: expanded(t).add_(1), x) is RuntimeError
    assert same(lambda t: torch.exp(t, out=expanded(t)), x) is RuntimeError
    assert same(lambda t: torch.cumsum(t, 1, out=expanded(t)), x) is RuntimeError
    assert same(lambda t: expanded(t).copy_(t), x) is RuntimeError
    assert same(lambda t: expanded(t).abs_(), x) is RuntimeError  # in-place ops lacking the pointwise tag
    assert same(lambda t: expanded(t).ge_(0), x) is RuntimeError
    assert same(lambda t: expanded(t).fill_(1), x) is None  # allowed on the CPU too
    assert same(lambda t: torch.add(t[:-1], 1, out=t[1:]), torch.randn(5)) is RuntimeError


def test_errors_the_cpu_raises():
    assert same(lambda t: torch.mm(t, t.double()), torch.randn(2, 2)) is not None
    assert same(lambda t: torch.abs(t), torch.tensor([True])) is not None
    assert same(lambda t: t.sub_(False), torch.tensor([True])) is not None
    assert same(lambda t: torch.bitwise_not(t, out=torch.empty(1, dtype=torch.int64, device=t.device)),
                torch.tensor([3], dtype=torch.int32)) is not None
    assert same(lambda t: torch.round(t, out=torch.empty(2, dtype=torch.bfloat16, device=t.device)),
                torch.randn(2, dtype=torch.float64)) is not None
    q = torch.randn(1, 2, 3, 4)
    for mask in (torch.ones(4, dtype=torch.bool), torch.tensor(0.5), torch.zeros(4)):
        assert same(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), q, mask) is IndexError
    assert same(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), q, torch.zeros(3, 3)) is None


def test_layer_norm_stats_dtype_and_param_dtypes():
    for dt in (torch.bfloat16, torch.float16):
        x = torch.randn(2, 4, dtype=dt)
        assert same(lambda t: torch.native_layer_norm(t, [4], None, None, 1e-5), x) is None
        assert same(lambda t, w: torch.native_layer_norm(t, [4], w, w, 1e-5), x, torch.randn(4)) is None
    assert same(lambda t, w: torch.native_layer_norm(t, [4], w, None, 1e-5), torch.randn(2, 4),
                torch.randn(4, dtype=torch.bfloat16)) is not None


def test_cpu_index_tensors_in_advanced_indexing(no_fallback):
    """As on CUDA, index tensors (and masks) on the CPU index tpu tensors:
    Transformers' assisted decoding does q[:, torch.arange(n), ids]."""
    q = torch.randn(2, 5, 7)
    t = q.to("tpu")
    ar, ids = torch.arange(3), torch.tensor([1, 2, 3])
    mask = torch.tensor([True, False, True, True, False])
    assert torch.equal(t[:, ar, ids].cpu(), q[:, ar, ids])
    assert torch.equal(t[:, mask].cpu(), q[:, mask])
    t[:, ar, ids] = 5.0
    q[:, ar, ids] = 5.0
    t.index_put_((torch.tensor([0]), ar), torch.ones(3, 7, device="tpu"), accumulate=True)
    q.index_put_((torch.tensor([0]), ar), torch.ones(3, 7), accumulate=True)
    assert torch.equal(t.cpu(), q)
    # other arguments must still be on the device
    with pytest.raises(RuntimeError, match="same device"):
        t.index_put_((ar,), torch.ones(3, 5, 7))
