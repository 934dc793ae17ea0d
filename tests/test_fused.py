"""Fused kernels (tpu::rms_norm, tpu::rope, tpu::swiglu; runtime/kernels/fused.c) against
the unfused ops on the CPU, and torch_tpu.optimize(model) on tiny Transformers models.

References are the Transformers formulas written with plain torch ops, run on the CPU
in the same dtype: float32 within PyTorch's float32 tolerances, bfloat16/float16 within
theirs (assert_close defaults by dtype).
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import DRIVER
from oplog import OpLog

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _t(x):
    return x.to("tpu")


# ---- references (Transformers' semantics) --------------------------------------------------


def ref_rms(x, w, eps, unit_offset=False):
    dt = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if unit_offset:  # Gemma
        return (h * (1.0 + w.float())).type_as(x)
    return h.to(dt) if w is None else w * h.to(dt)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def ref_rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    r = cos.shape[-1]

    def one(x):
        xr, xp = x[..., :r], x[..., r:]
        return torch.cat([xr * cos + _rotate_half(xr) * sin, xp], dim=-1)

    return one(q), one(k)


def ref_glu(gate, up, act):
    a = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh")
    return a * up


def _cos_sin(b, l, r, dtype, gen):
    pos = torch.arange(l, dtype=torch.float32)[None, :].expand(b, l) + torch.randint(0, 50, (b, 1), generator=gen)
    inv = 1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
    emb = torch.cat([pos[..., None] * inv] * 2, dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


# ---- rms_norm --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 576), (3, 5, 64), (2, 3, 1000), (4, 7)])
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.1])
def test_rms_norm(dtype, shape, eps):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    w = torch.randn(shape[-1], generator=g).to(dtype)
    got = torch.ops.tpu.rms_norm(_t(x), _t(w), eps)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got.cpu(), ref_rms(x, w, eps))


@pytest.mark.parametrize("xdt,wdt", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                     (torch.float32, torch.bfloat16), (torch.bfloat16, torch.float16)])
def test_rms_norm_mixed_dtypes(xdt, wdt):
    x = torch.randn(3, 96).to(xdt)
    w = torch.randn(96).to(wdt)
    got = torch.ops.tpu.rms_norm(_t(x), _t(w), 1e-6)
    ref = ref_rms(x, w, 1e-6)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_no_weight_and_unit_offset(dtype):
    x = torch.randn(4, 3, 80).to(dtype)
    w = (torch.randn(80) * 0.1).to(dtype)
    torch.testing.assert_close(torch.ops.tpu.rms_norm(_t(x), None, 1e-6).cpu(), ref_rms(x, None, 1e-6))
    got = torch.ops.tpu.rms_norm(_t(x), _t(w), 1e-6, True)
    torch.testing.assert_close(got.cpu(), ref_rms(x, w, 1e-6, unit_offset=True))


def test_rms_norm_non_contiguous():
    base = torch.randn(6, 64, 5)
    x = base.transpose(1, 2)  # last dim strided
    wb = torch.randn(128)
    w = wb[::2]  # strided weight
    got = torch.ops.tpu.rms_norm(_t(base).transpose(1, 2), _t(wb)[::2], 1e-6)
    torch.testing.assert_close(got.cpu(), ref_rms(x, w, 1e-6))
    x2 = torch.randn(8, 10, 64)[:, ::3]  # strided rows
    torch.testing.assert_close(torch.ops.tpu.rms_norm(_t(x2), _t(wb[:64]), 1e-6).cpu(), ref_rms(x2, wb[:64], 1e-6))


def test_rms_norm_empty():
    x = torch.randn(0, 16)
    assert torch.ops.tpu.rms_norm(_t(x), _t(torch.ones(16)), 1e-6).cpu().shape == (0, 16)


# ---- rope --------------------------------------------------------------------------------------

ROPE_SHAPES = [  # B, Hq, Hk, L, D, R
    (1, 9, 3, 1, 64, 64),  # SmolLM2 decode
    (2, 4, 2, 7, 16, 16),
    (2, 4, 4, 5, 16, 8),  # partial rotary
    (1, 2, 1, 3, 600, 600),  # more than one chunk of pairs
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROPE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rope(dtype, shape):
    B, Hq, Hk, L, D, R = shape
    g = torch.Generator().manual_seed(0)
    # as Transformers makes them: [B, L, H, D] viewed as [B, H, L, D] (non-contiguous)
    q = torch.randn(B, L, Hq, D, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(B, L, Hk, D, generator=g).to(dtype).transpose(1, 2)
    cos, sin = _cos_sin(B, L, R, dtype, g)
    qo, ko = torch.ops.tpu.rope(_t(q), _t(k), _t(cos), _t(sin))
    rq, rk = ref_rope(q, k, cos, sin)
    for got, want in ((qo, rq), (ko, rk)):
        if DRIVER == "pjrt" and dtype == torch.float16:
            # The pjrt lowering rounds each product to float16 as the unfused ops do, but
            # XLA's CPU plugin on hosts with AVX512-FP16 drops the first product's
            # rounding and contracts it into an FMA: within one float16 ulp of the largest
            # value (bfloat16 and float32 are exact).
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=want.abs().max().item() * 2**-10)
        else:
            torch.testing.assert_close(got.cpu(), want)


def test_rope_broadcast_cos():
    q, k = torch.randn(3, 2, 5, 8), torch.randn(3, 1, 5, 8)
    cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 8)  # batch broadcast
    for c, s in ((cos, sin), (cos[0], sin[0])):  # 3-D and 2-D
        qo, ko = torch.ops.tpu.rope(_t(q), _t(k), _t(c), _t(s))
        c3, s3 = c.expand(3, 5, 8), s.expand(3, 5, 8)
        rq, rk = ref_rope(q, k, c3, s3)
        torch.testing.assert_close(qo.cpu(), rq)
        torch.testing.assert_close(ko.cpu(), rk)


# ---- swiglu ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(1, 1536), (3, 7, 100), (5,)])
def test_swiglu(dtype, act, shape):
    g = torch.Generator().manual_seed(0)
    gate = (torch.randn(shape, generator=g) * 4).to(dtype)
    up = torch.randn(shape, generator=g).to(dtype)
    got = torch.ops.tpu.swiglu(_t(gate), _t(up), act)
    torch.testing.assert_close(got.cpu(), ref_glu(gate, up, act))


def test_swiglu_non_contiguous_and_extremes():
    gate = torch.randn(40, 6).t()
    gate[0, :4] = torch.tensor([float("inf"), -float("inf"), 100.0, -100.0])
    up = torch.randn(6, 80)[:, ::2]
    got = torch.ops.tpu.swiglu(_t(gate), _t(up))
    torch.testing.assert_close(got.cpu(), ref_glu(gate, up, "silu"), equal_nan=True)


# ---- gradients -------------------------------------------------------------------------------------


def _grads(fn, inputs, gouts, device):
    ins = [x.detach().to(device).requires_grad_(rg) if x is not None else None for x, rg in inputs]
    outs = fn(*ins)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    pairs = [(o, go.to(device)) for o, go in zip(outs, gouts) if go is not None]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    # an input that did not reach the outputs gets zeros (autograd leaves its .grad None)
    return [None if x is None or not x.requires_grad else
            (x.grad if x.grad is not None else torch.zeros_like(x)).cpu() for x in ins]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["weight", "none", "unit_offset"])
def test_rms_norm_grad(dtype, mode):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 70, 300, generator=g).to(dtype)  # 210 rows: partial sums over 64 chunks
    w = torch.randn(300, generator=g).to(dtype)
    gy = torch.randn(3, 70, 300, generator=g).to(dtype)
    uo = mode == "unit_offset"
    wt = None if mode == "none" else w
    got = _grads(lambda a, b: torch.ops.tpu.rms_norm(a, b, 1e-5, uo), [(x, True), (wt, True)], [gy], "tpu")
    ref = _grads(lambda a, b: ref_rms(a, b, 1e-5, uo), [(x.float(), True), (None if wt is None else wt.float(), True)],
                 [gy.float()], "cpu")
    for a, b in zip(got, ref):
        if b is None:
            assert a is None
            continue
        assert a.dtype == dtype
        tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2 * b.abs().max().item())
        torch.testing.assert_close(a.float(), b, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("R", [16, 8])
def test_rope_grad(dtype, R):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 16, generator=g).to(dtype)
    k = torch.randn(2, 2, 5, 16, generator=g).to(dtype)
    cos, sin = torch.randn(2, 5, R, generator=g).to(dtype), torch.randn(2, 5, R, generator=g).to(dtype)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    for gouts in ([gq, gk], [gq, None], [None, gk]):
        got = _grads(lambda a, b: torch.ops.tpu.rope(a, b, _t(cos), _t(sin)), [(q, True), (k, True)], gouts, "tpu")
        ref = _grads(lambda a, b: ref_rope(a, b, cos.float(), sin.float()), [(q.float(), True), (k.float(), True)],
                     [None if x is None else x.float() for x in gouts], "cpu")
        for a, b in zip(got, ref):
            if b is None:
                b = torch.zeros_like(a, dtype=torch.float32)
            torch.testing.assert_close(a.float(), b, **({} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_swiglu_grad(dtype, act):
    g = torch.Generator().manual_seed(0)
    gate = (torch.randn(4, 300, generator=g) * 3).to(dtype)
    up = torch.randn(4, 300, generator=g).to(dtype)
    gy = torch.randn(4, 300, generator=g).to(dtype)
    got = _grads(lambda a, b: torch.ops.tpu.swiglu(a, b, act), [(gate, True), (up, True)], [gy], "tpu")
    ref = _grads(lambda a, b: ref_glu(a, b, act), [(gate.float(), True), (up.float(), True)], [gy.float()], "cpu")
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.float(), b, **({} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)))


def test_rope_cos_grad_is_an_error():
    q = _t(torch.randn(1, 2, 3, 8)).requires_grad_()
    cos = _t(torch.randn(1, 3, 8)).requires_grad_()
    with pytest.raises(RuntimeError, match="tpu::rope: gradients with respect to cos"):
        torch.ops.tpu.rope(q, q, cos, cos)


# ---- errors -------------------------------------------------------------------------------------------


def test_errors_name_the_op():
    x, w = _t(torch.randn(2, 8)), _t(torch.randn(8))
    with pytest.raises(RuntimeError, match=r"tpu::rms_norm: weight of shape \[7\] does not match"):
        torch.ops.tpu.rms_norm(x, _t(torch.randn(7)), 1e-6)
    with pytest.raises(RuntimeError, match="tpu::rms_norm: input of dtype Long is not supported"):
        torch.ops.tpu.rms_norm(_t(torch.ones(2, 8, dtype=torch.long)), w, 1e-6)
    q = _t(torch.randn(1, 2, 3, 8))
    with pytest.raises(RuntimeError, match="tpu::rope: q, k, cos and sin must have the same dtype"):
        torch.ops.tpu.rope(q, q, _t(torch.randn(1, 3, 8, dtype=torch.bfloat16)), _t(torch.randn(1, 3, 8)))
    with pytest.raises(RuntimeError, match="tpu::rope: q and k must be 4-D"):
        torch.ops.tpu.rope(x, x, x, x)
    with pytest.raises(RuntimeError, match="tpu::rope: cos/sin of shape"):
        torch.ops.tpu.rope(q, q, _t(torch.randn(1, 3, 7)), _t(torch.randn(1, 3, 7)))
    with pytest.raises(RuntimeError, match=r"tpu::swiglu: gate \[2, 8\] and up \[8\] must have the same shape"):
        torch.ops.tpu.swiglu(x, w)
    with pytest.raises(RuntimeError, match="tpu::swiglu: gate and up must have the same dtype"):
        torch.ops.tpu.swiglu(x, x.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="tpu::swiglu: act must be 'silu' or 'gelu_tanh', got 'relu'"):
        torch.ops.tpu.swiglu(x, x, "relu")


def test_meta_and_compile():
    x = torch.randn(2, 3, 16, device="meta", dtype=torch.bfloat16)
    y = torch.ops.tpu.rms_norm(x, torch.randn(16, device="meta"), 1e-6)
    assert y.device.type == "meta" and y.shape == x.shape and y.dtype == torch.float32

    def f(h, w, cos, sin, up):
        n = torch.ops.tpu.rms_norm(h, w, 1e-6)
        q = n.view(2, 3, 2, 8).transpose(1, 2)
        qo, ko = torch.ops.tpu.rope(q, q, cos, sin)
        return torch.ops.tpu.swiglu(qo, ko * up, "silu").sum()

    g = torch.Generator().manual_seed(0)
    h, w, up = torch.randn(2, 3, 16, generator=g), torch.randn(16, generator=g), torch.randn(2, 2, 3, 8, generator=g)
    cos, sin = _cos_sin(2, 3, 8, torch.float32, g)
    hc = h.clone().requires_grad_()
    ref = f.__wrapped__ if hasattr(f, "__wrapped__") else None
    del ref
    # reference: the same function with the unfused formulas on the CPU
    n = ref_rms(hc, w, 1e-6)
    q = n.view(2, 3, 2, 8).transpose(1, 2)
    qo, ko = ref_rope(q, q, cos, sin)
    r = ref_glu(qo, ko * up, "silu").sum()
    r.backward()
    ht = _t(h).requires_grad_()
    cf = torch.compile(f, backend="tpu", fullgraph=True)
    got = cf(ht, _t(w), _t(cos), _t(sin), _t(up))
    got.backward()
    torch.testing.assert_close(got.cpu(), r.detach())
    torch.testing.assert_close(ht.grad.cpu(), hc.grad)


# ---- torch_tpu.optimize on tiny models ----------------------------------------------------------------

_DEC = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _model(name):
    import transformers
    from transformers import (GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                              MistralForCausalLM, Qwen3Config, Qwen3ForCausalLM)
    transformers.logging.set_verbosity_error()
    make = {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**_DEC)),
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**_DEC, head_dim=16)),
        "mistral": lambda: MistralForCausalLM(MistralConfig(**_DEC, sliding_window=6)),
        "gemma": lambda: GemmaForCausalLM(GemmaConfig(**_DEC, head_dim=16)),
    }[name]
    torch.manual_seed(0)
    m = make().float().eval()
    # weights of norms away from their init (ones / zeros), so the fused weighting is tested
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


# name -> expected swaps with 2 layers (qwen3 also has q_norm/k_norm per layer)
MODELS = {"llama": dict(rms_norm=5, swiglu=2, rope=2), "qwen3": dict(rms_norm=9, swiglu=2, rope=2),
          "mistral": dict(rms_norm=5, swiglu=2, rope=2), "gemma": dict(rms_norm=5, swiglu=2, rope=2)}


def decode_step_ops(model, device):
    """ATen (and tpu::) ops one decode step issues after a 5-token prefill."""
    ids = torch.randint(3, 256, (1, 5), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        with OpLog() as c:
            model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return c.counts()


@pytest.mark.parametrize("name", list(MODELS))
def test_optimize_model(name, no_fallback):
    cpu = _model(name)
    dev = copy.deepcopy(cpu).to("tpu")
    before = sum(decode_step_ops(dev, "tpu").values())
    assert torch_tpu.optimize(dev) is dev
    assert dev._tpu_optimized == MODELS[name]
    torch_tpu.optimize(dev)  # idempotent
    assert dev._tpu_optimized == MODELS[name]
    torch_tpu.reset_fallback_report()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 256, (2, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    with torch.no_grad():
        ref = cpu(input_ids=ids, attention_mask=mask).logits
        got = dev(input_ids=_t(ids), attention_mask=_t(mask)).logits
    keep = mask.bool()
    torch.testing.assert_close(got.cpu()[keep], ref[keep], rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        ref_ids = cpu.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        got_ids = dev.generate(input_ids=_t(ids), attention_mask=_t(mask), max_new_tokens=8, do_sample=False)
    assert torch.equal(got_ids.cpu(), ref_ids)
    ops = decode_step_ops(dev, "tpu")
    assert {"tpu.rms_norm", "tpu.rope", "tpu.swiglu"} <= set(ops)
    assert sum(ops.values()) < before
    assert torch_tpu.fallback_report() == {}


@pytest.mark.parametrize("name", ["llama", "gemma"])
def test_optimize_model_trains(name):
    cpu = _model(name)
    dev = torch_tpu.optimize(copy.deepcopy(cpu).to("tpu"))
    dev.tie_weights()
    ids = torch.randint(3, 256, (2, 10), generator=torch.Generator().manual_seed(2))
    losses, grads = [], []
    for m, d in ((cpu, "cpu"), (dev, "tpu")):
        loss = m(input_ids=ids.to(d), labels=ids.to(d)).loss
        loss.backward()
        losses.append(loss.detach().cpu())
        grads.append({n: p.grad.cpu() for n, p in m.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-4)
    assert set(grads[1]) == set(grads[0]) and len(grads[0]) > 10
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-4, msg=lambda s: f"{n}: {s}")


def test_optimize_off_tpu_and_restore():
    """On the CPU the swapped forwards take the original path (same logits, bit for bit);
    restore() puts the class forwards back; other instances are untouched."""
    from torch_tpu.optimize import restore
    a = _model("llama")
    b = copy.deepcopy(a)
    ids = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = a(input_ids=ids).logits
        torch_tpu.optimize(a)
        assert "forward" not in vars(b.model.layers[0].self_attn)
        assert torch.equal(a(input_ids=ids).logits, ref)
    restore(a)
    assert not any("forward" in vars(m) for m in a.modules())
