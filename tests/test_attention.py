"""Fused scaled_dot_product_attention on tpu (aten::_scaled_dot_product_fused_
attention_overrideable + backward, C kernels tpu::sdpa_fwd / tpu::sdpa_bwd)
against PyTorch's CPU results, with the CPU fallback forbidden."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_tpu  # noqa: F401
from oplog import OpLog

FWD = "aten._scaled_dot_product_fused_attention_overrideable.default"
BWD = "aten._scaled_dot_product_fused_attention_overrideable_backward.default"


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    yield


TOL = {torch.float32: (2e-5, 2e-4), torch.bfloat16: (2e-2, 3e-2), torch.float16: (2e-3, 3e-3)}


def _rand(*shape, dtype=torch.float32, seed=None):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


def _compare(q, k, v, dtype=torch.float32, grad=True, mask_grad=False, **kw):
    """Runs SDPA on tpu and cpu (math reference), forward and backward;
    returns the ops the tpu run dispatched."""
    ref_in = [t.clone().requires_grad_(grad) for t in (q, k, v)]
    tpu_in = [t.to("tpu").detach().requires_grad_(grad) for t in (q, k, v)]
    mask = kw.pop("attn_mask", None)
    ref_kw, tpu_kw = dict(kw), dict(kw)
    if mask is not None:
        ref_mask = mask.clone().requires_grad_(mask_grad)
        tpu_mask = mask.to("tpu").detach().requires_grad_(mask_grad)
        ref_kw["attn_mask"], tpu_kw["attn_mask"] = ref_mask, tpu_mask
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(*ref_in, **ref_kw)
    with OpLog() as log:
        out = F.scaled_dot_product_attention(*tpu_in, **tpu_kw)
        gout = torch.randn(out.shape, dtype=torch.float32).to(dtype)
        if grad:
            out.backward(gout.to("tpu"))
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=atol, rtol=rtol)
    if grad:
        ref.backward(gout)
        for a, b, name in zip(tpu_in, ref_in, "qkv"):
            scale = max(1.0, b.grad.float().abs().max().item())
            torch.testing.assert_close(a.grad.cpu().float() / scale, b.grad.float() / scale, atol=atol * 2,
                                       rtol=rtol, msg=lambda m: f"grad {name}: {m}")
        if mask_grad:
            torch.testing.assert_close(tpu_kw["attn_mask"].grad.cpu().float(), ref_kw["attn_mask"].grad.float(),
                                       atol=atol * 2, rtol=rtol)
    assert FWD in log.ops, log.ops
    if grad:
        assert BWD in log.ops, log.ops
    # the fused path, not the math decomposition
    assert not any(op.startswith(("aten.bmm", "aten._softmax", "aten.matmul", "aten._safe_softmax"))
                   for op in log.ops), log.ops
    return log.ops


def test_registered_for_tpu():
    for name in ("aten::_fused_sdp_choice", "aten::_scaled_dot_product_fused_attention_overrideable",
                 "aten::_scaled_dot_product_fused_attention_overrideable_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name
    q = torch.randn(1, 2, 8, 16, device="tpu")
    assert torch._fused_sdp_choice(q, q, q) == SDPBackend.OVERRIDEABLE.value


def test_plain():
    _compare(_rand(2, 3, 37, 40), _rand(2, 3, 45, 40), _rand(2, 3, 45, 24))


@pytest.mark.parametrize("L,S", [(64, 64), (33, 90), (90, 33), (1, 70)])
def test_causal(L, S):
    _compare(_rand(1, 4, L, 32), _rand(1, 4, S, 32), _rand(1, 4, S, 32), is_causal=True)


def test_bool_mask_with_fully_masked_row():
    mask = torch.rand(40, 70) > 0.3
    mask[5] = False  # a row that sees nothing: output and grads 0, as PyTorch's math path
    ops = _compare(_rand(2, 2, 40, 16), _rand(2, 2, 70, 16), _rand(2, 2, 70, 16), attn_mask=mask)
    assert FWD in ops


def test_bool_mask_per_batch_and_head():
    mask = torch.rand(2, 3, 1, 50) > 0.4
    _compare(_rand(2, 3, 20, 16), _rand(2, 3, 50, 16), _rand(2, 3, 50, 16), attn_mask=mask)


def test_additive_mask():
    mask = torch.randn(2, 1, 30, 48)
    mask[0, 0, 3] = float("-inf")  # fully masked row
    mask[1, 0, :, 7] = float("-inf")
    _compare(_rand(2, 4, 30, 32), _rand(2, 4, 48, 32), _rand(2, 4, 48, 32), attn_mask=mask)


def test_additive_mask_grad():
    mask = torch.randn(1, 2, 24, 40) * 0.5
    _compare(_rand(1, 2, 24, 16), _rand(1, 2, 40, 16), _rand(1, 2, 40, 16), attn_mask=mask, mask_grad=True)


def test_gqa_enable_gqa():
    q, k, v = _rand(2, 8, 33, 32), _rand(2, 2, 50, 32), _rand(2, 2, 50, 32)
    _compare(q, k, v, enable_gqa=True)
    _compare(q, k, v, enable_gqa=True, is_causal=True)


def test_gqa_matches_repeated_kv():
    q, k, v = _rand(1, 6, 20, 16), _rand(1, 3, 20, 16), _rand(1, 3, 20, 16)
    qt, kt, vt = q.to("tpu"), k.to("tpu"), v.to("tpu")
    a = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    b = F.scaled_dot_product_attention(qt, kt.repeat_interleave(2, 1), vt.repeat_interleave(2, 1))
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=1e-6, rtol=1e-5)


def test_gqa_without_enable_gqa_raises_like_cpu():
    q, k = _rand(1, 4, 8, 16), _rand(1, 2, 8, 16)
    assert torch._fused_sdp_choice(q.to("tpu"), k.to("tpu"), k.to("tpu")) == SDPBackend.MATH.value


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3])
def test_scale(scale):
    _compare(_rand(1, 2, 16, 32), _rand(1, 2, 24, 32), _rand(1, 2, 24, 32), scale=scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_dtypes(dtype):
    q, k, v = (_rand(1, 4, 70, 64, dtype=dtype) for _ in range(3))
    _compare(q, k, v, dtype=dtype, is_causal=True)
    mask = (torch.rand(70, 70) > 0.2).to(torch.bool)
    _compare(q, k, v, dtype=dtype, attn_mask=mask)


def test_non_contiguous_inputs():
    # [B, L, H, E] projections viewed as [B, H, L, E], as transformers does
    q = _rand(2, 19, 4, 32).transpose(1, 2)
    k = _rand(2, 23, 4, 32).transpose(1, 2)
    v = _rand(2, 23, 4, 32).transpose(1, 2)
    _compare(q, k, v)


def test_no_grad_inference_and_decode():
    q, k, v = _rand(3, 8, 1, 64), _rand(3, 2, 100, 64), _rand(3, 2, 100, 64)
    with torch.no_grad():
        _compare(q, k, v, grad=False, enable_gqa=True)


@pytest.mark.parametrize("kind", ["tail", "tail_additive", "per_head_holes", "one_key", "none_live", "all_live"])
def test_decode_over_a_masked_static_cache(kind):
    # One query row against a cache whose unwritten tail is masked (a StaticCache decode step):
    # the kernel skips keys past the last live one; results equal the CPU's in every case.
    torch.manual_seed(3)
    S = 300
    q, k, v = _rand(2, 6, 1, 64), _rand(2, 2, S, 64), _rand(2, 2, S, 64)
    live = torch.zeros(2, 1, 1, S, dtype=torch.bool)
    live[0, ..., :37] = True
    live[1, ..., :150] = True
    if kind == "per_head_holes":
        live = (torch.rand(2, 6, 1, S) > 0.6) & (torch.arange(S) < 200)
    elif kind == "one_key":
        live = torch.zeros(1, 1, 1, S, dtype=torch.bool)
        live[..., 0] = True
    elif kind == "none_live":
        live = torch.zeros(1, 1, 1, S, dtype=torch.bool)
        live[..., 0] = True
        live = live.expand(2, 6, 1, S).clone()
        live[1, 2] = False  # one row sees no key: 0 out on both (the math path's rule)
    elif kind == "all_live":
        live = torch.ones(2, 1, 1, S, dtype=torch.bool)
    mask = live if kind != "tail_additive" else torch.zeros(live.shape).masked_fill(~live, float("-inf"))
    with torch.no_grad():
        if kind == "none_live":
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), attn_mask=mask.to("tpu"),
                                                 enable_gqa=True).cpu()
            torch.testing.assert_close(got[0], ref[0], atol=2e-5, rtol=2e-4)
            assert torch.equal(got[1, 2], torch.zeros_like(got[1, 2]))
            return
        _compare(q, k, v, grad=False, enable_gqa=True, attn_mask=mask)


@pytest.mark.parametrize("case", ["gqa_folded", "gqa_folded_bf16", "causal_rows", "causal_rows_gqa",
                                  "prefill_tail", "prefill_dead_rows"])
def test_few_rows_and_prefill_over_a_masked_cache(case):
    # Transformers folds a GQA decode's query heads into rows ([B, Hkv, G, E] against
    # [B, Hkv, S, E], one broadcast additive mask row); every forward skips keys past the
    # last one the mask leaves live (that decode, a prefill into a static cache); few
    # causal rows; equal to the CPU's math path, gradients included (the backward reads
    # every key).
    torch.manual_seed(5)
    dtype = torch.bfloat16 if case.endswith("bf16") else torch.float32
    S = 300
    if case.startswith("gqa_folded"):
        q, k, v = _rand(2, 3, 3, 64, dtype=dtype), _rand(2, 3, S, 64, dtype=dtype), _rand(2, 3, S, 64, dtype=dtype)
        live = torch.arange(S) < torch.tensor([41, 133]).view(2, 1, 1, 1)
        kw = {"attn_mask": torch.zeros(live.shape).masked_fill(~live, float("-inf")).to(dtype)}
        grad = False
    elif case.startswith("causal_rows"):
        hq = 4 if case.endswith("gqa") else 2
        q, k, v = _rand(1, hq, 4, 32), _rand(1, 2, 4, 32), _rand(1, 2, 4, 32)
        kw = {"is_causal": True, "enable_gqa": True}
        grad = False
    else:
        n = 20
        q, k, v = _rand(1, 4, n, 64), _rand(1, 2, S, 64), _rand(1, 2, S, 64)
        live = torch.ones(n, n, dtype=torch.bool).tril()
        live = torch.cat([live, torch.zeros(n, S - n, dtype=torch.bool)], 1).expand(1, 1, n, S).clone()
        if case == "prefill_dead_rows":
            live[..., 7, :] = False
        kw = {"attn_mask": live, "enable_gqa": True}
        grad = case == "prefill_tail"
    if grad:
        ops = _compare(q, k, v, **kw)
    else:
        with torch.no_grad():
            ops = _compare(q, k, v, dtype=dtype, grad=False, **kw)
    assert FWD in ops


def test_unsupported_cases_use_math():
    q = torch.randn(1, 2, 8, 16, device="tpu")
    mask = torch.ones(8, 8, dtype=torch.bool, device="tpu")
    math = SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q, q, q, dropout_p=0.1) == math
    assert torch._fused_sdp_choice(q, q, q, attn_mask=mask, is_causal=True) == math
    assert torch._fused_sdp_choice(q.double(), q.double(), q.double()) == math
    big = torch.randn(1, 1, 4, 512, device="tpu")
    assert torch._fused_sdp_choice(big, big, big) == math
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch._fused_sdp_choice(q, q, q) == math


def test_direct_op_outputs():
    q, k, v = (torch.randn(2, 3, 5, 8, device="tpu") for _ in range(3))
    res = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.0, True)
    out, lse = res[0], res[1]
    assert out.shape == (2, 3, 5, 8) and lse.shape == (2, 3, 5) and lse.dtype == torch.float32
    assert res[4] == 5 and res[5] == 5
    s = (q.cpu() @ k.cpu().transpose(-1, -2)) / math.sqrt(8)
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


def test_sum_backward_expanded_grad_and_expanded_mask():
    # out.sum().backward() hands the kernel a stride-0 grad_out; the mask is
    # an expanded (stride-0) view too
    q, k, v = _rand(2, 4, 12, 16), _rand(2, 4, 20, 16), _rand(2, 4, 20, 16)
    small = torch.rand(1, 1, 1, 20) > 0.3
    mask = small.expand(2, 4, 12, 20)
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    tpu_in = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    with sdpa_kernel([SDPBackend.MATH]):
        F.scaled_dot_product_attention(*ref_in, attn_mask=mask).sum().backward()
    with OpLog() as log:
        F.scaled_dot_product_attention(*tpu_in, attn_mask=small.to("tpu").expand(2, 4, 12, 20)).sum().backward()
    assert FWD in log.ops and BWD in log.ops
    for a, b in zip(tpu_in, ref_in):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=4e-5, rtol=2e-4)


@pytest.mark.parametrize("case", ["transposed", "expanded", "contiguous"])
def test_output_layout_matches_cpu(case):
    """The output's strides are those CPU (and the meta function) give: query's
    dimension order when query is dense, contiguous when it is not (an
    expanded query, as in block-attention residuals)."""
    torch.manual_seed(0)
    if case == "transposed":
        q = torch.randn(2, 6, 4, 16).transpose(1, 2)
    elif case == "expanded":
        q = torch.randn(1, 1, 1, 16).expand(2, 4, 1, 16)
    else:
        q = torch.randn(2, 4, 6, 16)
    k = torch.randn(2, 4, 5, 16)
    v = torch.randn(2, 4, 5, 16)
    want = F.scaled_dot_product_attention(q, k, v)
    got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"))
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)


# ---------------------------------------------------------- the flash and cuDNN ops, called directly
# (Diffusers' `_native_flash`/`_native_cudnn` backends and their ring attention call them; on tpu
# they are the overrideable op, torch_tpu/_attention.py)

FLASH = torch.ops.aten._scaled_dot_product_flash_attention
CUDNN = torch.ops.aten._scaled_dot_product_cudnn_attention


def _lse_ref(q, k, causal=False, mask=None):
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        s = s + mask.float()
    return torch.logsumexp(s, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_op_forward_backward(dtype, causal):
    q, k, v = _rand(2, 3, 5, 8, dtype=dtype), _rand(2, 3, 7, 8, dtype=dtype), _rand(2, 3, 7, 16, dtype=dtype)
    ref_in = [t.float().clone().requires_grad_() for t in (q, k, v)]
    tpu_in = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    with OpLog() as log:
        res = FLASH(*tpu_in, is_causal=causal)
        gout = _rand(*res[0].shape, dtype=dtype)
        res[0].backward(gout.to("tpu"))
    assert {"aten._scaled_dot_product_flash_attention.default",
            "aten._scaled_dot_product_flash_attention_backward.default"} <= set(log.ops), log.ops
    out, lse = res[0], res[1]
    assert out.shape == (2, 3, 5, 16) and out.dtype == dtype and out.device.type == "tpu"
    assert lse.shape == (2, 3, 5) and lse.dtype == torch.float32
    assert res[2] is None and res[3] is None and (res[4], res[5]) == (5, 7)
    assert res[8].numel() == 0 and type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionBackward0"
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(*ref_in, is_causal=causal)
    ref.backward(gout.float())
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=atol, rtol=rtol)
    torch.testing.assert_close(lse.cpu(), _lse_ref(q, k, causal), atol=1e-5, rtol=1e-5)
    for a, b, name in zip(tpu_in, ref_in, "qkv"):
        torch.testing.assert_close(a.grad.cpu().float(), b.grad, atol=atol * 2, rtol=rtol,
                                   msg=lambda m: f"grad {name}: {m}")


def test_flash_op_matches_cpu_flash_kernel():
    """Same results as the CPU's own flash kernel (..._flash_attention_for_cpu) in float32."""
    q, k, v = _rand(1, 2, 9, 16), _rand(1, 2, 9, 16), _rand(1, 2, 9, 16)
    got = FLASH(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True, scale=0.3)
    want = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True, scale=0.3)
    torch.testing.assert_close(got[0].cpu(), want[0])
    torch.testing.assert_close(got[1].cpu(), want[1])


@pytest.mark.parametrize("mask", [None, "additive", "bool"])
def test_cudnn_op_forward_backward(mask):
    q, k, v = _rand(2, 2, 6, 8), _rand(2, 2, 4, 8), _rand(2, 2, 4, 8)
    m = None
    if mask == "additive":
        m = _rand(2, 1, 6, 4)
    elif mask == "bool":
        m = torch.rand(1, 1, 6, 4) > 0.3
        m[..., 0] = True
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    tpu_in = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    res = CUDNN(*tpu_in, None if m is None else m.to("tpu"), True)
    out, lse = res[0], res[1]
    assert lse.shape == (2, 2, 6, 1) and lse.dtype == torch.float32 and res[8] is None
    out.sum().backward()
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(*ref_in, attn_mask=m)
    ref.sum().backward()
    torch.testing.assert_close(out.cpu(), ref)
    bias = None if m is None else (m.float().log() if m.dtype == torch.bool else m)  # True -> 0, False -> -inf
    torch.testing.assert_close(lse.cpu().squeeze(-1), _lse_ref(q, k, mask=bias), atol=1e-5, rtol=1e-5)
    for a, b in zip(tpu_in, ref_in):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=4e-5, rtol=2e-4)


def test_flash_op_unsupported_arguments_raise():
    q = torch.randn(1, 2, 4, 8, device="tpu")
    with pytest.raises(NotImplementedError, match="dropout_p > 0"):
        FLASH(q, q, q, dropout_p=0.5)
    with pytest.raises(NotImplementedError, match="return_debug_mask"):
        FLASH(q, q, q, return_debug_mask=True)
    with pytest.raises(RuntimeError, match="4-D"):
        FLASH(q[0], q[0], q[0])


FOR_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _f64_attention(q, k, v, mask=None, causal=False):
    q, k, v = q.double(), k.double(), v.double()
    if k.size(1) != q.size(1):
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), 1) for t in (k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s + mask.double()
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not(), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("case", ["plain", "causal", "mask", "gqa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_cpu_flash_op_on_tpu(case, dtype):
    """The CPU's attention op called by name on tpu tensors: its results (output
    in the input dtype, log-sum-exp [B, H, L] in float32, float64 for float64)
    and its gradients, against the CPU's kernel and a float64 reference.
    PyTorch's decomposition of this op returns the probabilities instead."""
    torch.manual_seed(3)
    hk = 2 if case == "gqa" else 4
    q, k, v = _rand(2, 4, 5, 8, dtype=dtype), _rand(2, hk, 7, 8, dtype=dtype), _rand(2, hk, 7, 8, dtype=dtype)
    mask = _rand(5, 7, dtype=dtype) if case == "mask" else None
    causal = case == "causal"
    cpu_in = [t.clone().requires_grad_() for t in (q, k, v)]
    tpu_in = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    want = FOR_CPU(*cpu_in, is_causal=causal, attn_mask=mask)
    got = FOR_CPU(*tpu_in, is_causal=causal, attn_mask=None if mask is None else mask.to("tpu"))
    assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]
    ref_out, ref_lse = _f64_attention(q, k, v, mask, causal)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[0].cpu().double(), ref_out, **tol)
    torch.testing.assert_close(got[1].cpu().double(), ref_lse, **tol)
    torch.testing.assert_close(got[0].cpu(), want[0], **tol)
    g = torch.randn(want[0].shape).to(dtype)
    want[0].backward(g)
    got[0].backward(g.to("tpu"))
    ref_in = [t.double().requires_grad_() for t in (q, k, v)]
    _f64_attention(*ref_in, mask, causal)[0].backward(g.double())
    gtol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=2e-5)
    for a, b, r, name in zip(tpu_in, cpu_in, ref_in, "qkv"):
        assert a.grad.dtype == dtype and a.grad.shape == b.grad.shape, name
        torch.testing.assert_close(a.grad.cpu().double(), r.grad, **gtol, msg=lambda m: f"grad {name}: {m}")


def test_cpu_flash_op_on_tpu_edges():
    q, k = _rand(1, 1, 2, 4), _rand(1, 1, 3, 4)
    mask = torch.zeros(2, 3)
    mask[1] = float("-inf")  # row 1 sees no key: the CPU kernel answers 0 and 0
    want = FOR_CPU(q, k, k, attn_mask=mask)
    got = FOR_CPU(q.to("tpu"), k.to("tpu"), k.to("tpu"), attn_mask=mask.to("tpu"))
    torch.testing.assert_close([t.cpu() for t in got], list(want))
    assert got[0][0, 0, 1].abs().sum().item() == 0 and got[1][0, 0, 1].item() == 0
    t = q.to("tpu")
    with pytest.raises(RuntimeError, match="dropout probability must be zero"):
        FOR_CPU(t, t, t, dropout_p=0.5)
    with pytest.raises(RuntimeError, match="the query's dtype"):
        FOR_CPU(t, t, t, attn_mask=torch.ones(2, 2, dtype=torch.bool, device="tpu"))
    with pytest.raises(RuntimeError, match="2 or 4 dimensions"):
        FOR_CPU(t, t, t, attn_mask=torch.zeros(2, device="tpu"))
    with pytest.raises(RuntimeError, match="one floating dtype"):
        FOR_CPU(t, t.double(), t)
