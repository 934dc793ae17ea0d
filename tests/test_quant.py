"""Quantized linear layers (torch_tpu.quant, tpu::q_linear over GGUF blocks)
against the float reference: the same blocks dequantized, then F.linear.

Tolerance: |y - ref| <= 1e-5 * (|x| @ |W|^T) + 1e-6 elementwise (the kernel
multiplies exactly dequantized weights with float32 activations; only the
order of the float32 sums differs). On the real model (SmolLM2-135M Q4_1)
the quantized path must give the dequantized path's greedy tokens.
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_tpu  # noqa: F401
from torch_tpu import quant


def _f16_bytes(v):
    a = np.asarray(v, dtype=np.float16)
    return torch.from_numpy(a.reshape(-1).view(np.uint8).reshape(*a.shape, 2).copy())


def random_blocks(qtype, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    bb, qk = quant.QTYPES[qtype][1], quant.block_size(qtype)
    raw = torch.randint(0, 256, (n, k // qk, bb), dtype=torch.uint8, generator=g)
    rng = np.random.default_rng(seed)
    at = 208 if qtype == 14 else 0
    raw[..., at:at + 2] = _f16_bytes(rng.uniform(-0.05, 0.05, (n, k // qk)) / (10 if qk == 256 else 1))
    if qtype in (3, 12):
        raw[..., 2:4] = _f16_bytes(rng.uniform(-0.5, 0.5, (n, k // qk)) / (50 if qk == 256 else 1))
    return raw.reshape(n, -1)


@pytest.mark.parametrize("qtype", sorted(quant.QTYPES))
def test_dequantize_matches_gguf_package(qtype):
    gq = pytest.importorskip("gguf.quants")
    raw = random_blocks(qtype, 6, 512, seed=qtype)
    ref = gq.dequantize(raw.numpy(), qtype).reshape(6, 512)
    np.testing.assert_allclose(quant.dequantize(raw, qtype, 512).numpy(), ref, rtol=1e-6, atol=1e-7)


def check_close(y, x, w):
    ref = x.double() @ w.double().T
    tol = 1e-5 * (x.double().abs() @ w.double().abs().T) + 1e-6
    err = (y.double() - ref).abs()
    assert bool((err <= tol).all()), f"max err {err.max().item():.3g}, max tol {tol.max().item():.3g}"


def test_dequantize_reference_formats():
    # one block of each format, decoded by hand
    q = torch.zeros(1, 18, dtype=torch.uint8)
    q[0, 0:2] = _f16_bytes(0.5)
    q[0, 2] = 0x3A  # weight 0: low nibble 10, weight 16: high nibble 3
    w = quant.dequantize(q, 2, 32)
    assert w[0, 0].item() == 0.5 * (10 - 8) and w[0, 16].item() == 0.5 * (3 - 8) and w[0, 1].item() == -4.0
    q = torch.zeros(1, 20, dtype=torch.uint8)
    q[0, 0:2], q[0, 2:4] = _f16_bytes(0.25), _f16_bytes(-1.0)
    q[0, 4] = 0xF1
    w = quant.dequantize(q, 3, 32)
    assert w[0, 0].item() == 0.25 - 1.0 and w[0, 16].item() == 0.25 * 15 - 1.0 and w[0, 5].item() == -1.0
    q = torch.zeros(1, 34, dtype=torch.uint8)
    q[0, 0:2] = _f16_bytes(2.0)
    q[0, 2], q[0, 33] = 0xFF, 5  # int8 -1 and 5
    w = quant.dequantize(q, 8, 32)
    assert w[0, 0].item() == -2.0 and w[0, 31].item() == 10.0


@pytest.mark.parametrize("qtype", sorted(quant.QTYPES))
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_q_linear_matches_float(qtype, rows):
    n, k = 70, 576 if quant.block_size(qtype) == 32 else 768
    raw = random_blocks(qtype, n, k, seed=qtype * 100 + rows)
    w = quant.dequantize(raw, qtype, k)
    x = torch.randn(rows, k)
    y = torch.ops.tpu.q_linear(x.to("tpu"), raw.to("tpu"), qtype, n).cpu()
    check_close(y, x, w)
    check_close(torch.ops.tpu.q_linear(x, raw, qtype, n), x, w)  # the CPU kernel


def test_quant_linear_module_shapes_and_dtypes():
    n, k = 24, 64
    raw = random_blocks(3, n, k)
    w = quant.dequantize(raw, 3, k)
    bias = torch.randn(n)
    m = quant.QuantLinear(raw.to("tpu"), 3, k, n, bias=bias.to("tpu"))
    x = torch.randn(2, 5, k)
    y = m(x.to("tpu"))
    assert y.shape == (2, 5, n) and y.dtype == torch.float32
    check_close((y.cpu() - bias).reshape(10, n), x.reshape(10, k), w)
    yb = m(x.to("tpu", torch.bfloat16))
    assert yb.dtype == torch.bfloat16
    ref = (F.linear(x.to(torch.bfloat16).float(), w) + bias).to(torch.bfloat16)  # float32 math, one rounding
    torch.testing.assert_close(yb.cpu(), ref, rtol=1e-2, atol=1e-2)
    xt = torch.randn(k, 3).to("tpu").t()  # non-contiguous input
    check_close(m(xt).cpu() - bias, xt.cpu(), w)
    with pytest.raises(ValueError):
        quant.QuantLinear(raw, 3, k, n + 1)
    with pytest.raises(RuntimeError, match="quantization type 13"):
        torch.ops.tpu.q_linear(x.reshape(10, k).to("tpu"), raw.to("tpu"), 13, n).cpu()


def test_smollm2_quantized_path_matches_dequantized(smollm2_gguf):
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    d, gguf_file = smollm2_gguf
    tok = AutoTokenizer.from_pretrained(d, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=gguf_file, device_map="tpu",
                                                 dtype=torch.float32).eval()
    inputs = tok("The future of AI is", return_tensors="pt").to("tpu")
    layers = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
              "model.layers.3.mlp.down_proj", "lm_head"}
    floats = {n: m.weight.detach().cpu().clone() for n, m in model.named_modules() if n in layers}
    with torch.no_grad():
        ref = model.generate(**inputs, max_new_tokens=12, do_sample=False).cpu()
        ref_logits = model(**inputs).logits[0, -1].cpu()

    report = quant.quantize_from_gguf(model, os.path.join(d, gguf_file))
    assert report["swapped"] == {"Q4_1": 210, "Q8_0": 1} and not report["kept"]
    assert report["bytes"] < report["float_bytes"] / 5
    mods = dict(model.named_modules())
    for name, w in floats.items():  # the swapped layers are the float layers, rows in the same order
        assert isinstance(mods[name], quant.QuantLinear), name
        x = torch.randn(3, w.shape[1])
        check_close(mods[name](x.to("tpu")).cpu(), x, w)
    with torch.no_grad():
        got = model.generate(**inputs, max_new_tokens=12, do_sample=False).cpu()
        logits = model(**inputs).logits[0, -1].cpu()
    assert got.tolist() == ref.tolist()
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-3)
    assert torch_tpu.fallback_report() == {} or "tpu::q_linear" not in torch_tpu.fallback_report()


def test_smollm2_gguf_loader_matches_transformers_path(smollm2_gguf):
    """torch_tpu.gguf_load (the main job's loader) gives the model Transformers' load plus
    quantize_from_gguf gives: same config, modules, tensors, logits and greedy tokens."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from torch_tpu import gguf_load

    transformers.logging.set_verbosity_error()
    d, gguf_file = smollm2_gguf
    ref_tok = AutoTokenizer.from_pretrained(d, gguf_file=gguf_file)
    ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=gguf_file, device_map="tpu",
                                               dtype=torch.float32).eval()
    ref_report = quant.quantize_from_gguf(ref, os.path.join(d, gguf_file))
    tok, model, report = gguf_load.load_gguf(d, gguf_file, "tpu", torch.float32)

    assert report["swapped"] == ref_report["swapped"] == {"Q4_1": 210, "Q8_0": 1} and not report["kept"]
    assert report["bytes"] == ref_report["bytes"] and report["float_bytes"] == ref_report["float_bytes"]
    assert type(tok) is type(ref_tok)
    assert tok.backend_tokenizer.to_str() == ref_tok.backend_tokenizer.to_str()
    assert tok.init_kwargs == ref_tok.init_kwargs and tok.special_tokens_map == ref_tok.special_tokens_map
    assert tok.chat_template == ref_tok.chat_template
    # Transformers records the GGUF file as a quantization config (its quantizer dequantized
    # it); the fast loader sets no quantizer
    want = ref.config.to_dict()
    assert want.pop("quantization_config")["gguf_file"] == gguf_file
    assert model.config.to_dict() == want
    assert model.generation_config.to_dict() == ref.generation_config.to_dict()
    assert not model.training
    assert {n: type(m) for n, m in model.named_modules()} == {n: type(m) for n, m in ref.named_modules()}

    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    ref_tensors = dict(ref.named_parameters()) | dict(ref.named_buffers())
    assert tensors.keys() == ref_tensors.keys()
    for name, t in tensors.items():  # every tensor on the device, none left on meta, equal to the reference's
        assert t.device.type == "tpu", (name, t.device)
        r = ref_tensors[name]
        assert t.dtype == r.dtype and t.requires_grad == r.requires_grad, name
        assert torch.equal(t.cpu(), r.cpu()), name

    inputs = tok("The future of AI is", return_tensors="pt").to("tpu")
    with torch.no_grad():
        logits = model(**inputs).logits.cpu()
        ref_logits = ref(**inputs).logits.cpu()
        got = model.generate(**inputs, max_new_tokens=12, do_sample=False).cpu()
        want = ref.generate(**inputs, max_new_tokens=12, do_sample=False).cpu()
    torch.testing.assert_close(logits, ref_logits, rtol=1e-6, atol=1e-6)
    assert got.tolist() == want.tolist()
    # each layer's q/k/v blocks are consecutive rows of one tensor (gate/up, 2 x 0.55 MB, are
    # not: see gguf_load._read), so fuse_projections joins them without a copy, to the same tokens
    at = model.model.layers[3].self_attn
    assert at.k_proj.qweight.data_ptr() == at.q_proj.qweight.data_ptr() + at.q_proj.qweight.numel()
    assert at.v_proj.qweight.data_ptr() == at.k_proj.qweight.data_ptr() + at.k_proj.qweight.numel()
    assert quant.fuse_projections(model) == model.config.num_hidden_layers
    with torch.no_grad():
        assert model.generate(**inputs, max_new_tokens=12, do_sample=False).cpu().tolist() == want.tolist()


def test_gguf_loader_declines_what_it_does_not_handle(tmp_path):
    gguf = pytest.importorskip("gguf")
    from torch_tpu import gguf_load

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(gguf_load.Unsupported, match="architecture 'gpt2'"):
        gguf_load.load_gguf(str(tmp_path), "tiny.gguf", "tpu")


# ---- weight-only quantization of float weights (quantize_blocks / quantize_weights / WeightOnlyConfig)

@pytest.mark.parametrize("qtype", sorted(quant.QTYPES))
def test_dequantize_on_the_device_equals_the_cpu(qtype):
    raw = random_blocks(qtype, 5, 512, seed=qtype + 7)
    got = quant.dequantize(raw.to("tpu"), qtype, 512)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), quant.dequantize(raw, qtype, 512))


@pytest.mark.parametrize("qtype,levels", [(8, 127), (3, 15), (2, 8)])
def test_quantize_blocks_error_bound(qtype, levels):
    """Each weight is within d / 2 of its dequantized value (Q4_0: within d, the side
    opposite the largest magnitude has 7 levels, not 8), where d is the group's step
    (max|w| / 127, (max - min) / 15, max|w| / 8); a zero group stays zero; the blocks
    are the same bytes on the device and on the CPU."""
    g = torch.Generator().manual_seed(qtype)
    w = torch.randn(48, 160, generator=g) * torch.logspace(-3, 1, 48).unsqueeze(1)
    w[5, 32:64] = 0
    w[6, :32] = 3.0  # a constant group
    q = quant.quantize_blocks(w, qtype)
    assert q.dtype == torch.uint8 and q.shape == (48, 160 // 32 * quant.QTYPES[qtype][1])
    assert torch.equal(quant.quantize_blocks(w.to("tpu"), qtype).cpu(), q)
    deq = quant.dequantize(q, qtype, 160).reshape(48, 5, 32)
    grp = w.reshape(48, 5, 32)
    span = grp.amax(-1) - grp.amin(-1) if qtype == 3 else grp.abs().amax(-1)
    d = (span / levels).unsqueeze(-1)
    bound = (d if qtype == 2 else d / 2) * (1 + 2e-3) + grp.abs() * 2 ** -11  # float16 scale and minimum
    assert bool(((deq - grp).abs() <= bound).all()), ((deq - grp).abs() - bound).max()
    assert bool((deq[5, 1] == 0).all()) and torch.allclose(deq[6, 0], torch.full((32,), 3.0), rtol=1e-3)


def test_quantize_blocks_rejects_bad_input():
    with pytest.raises(ValueError, match=r"K a multiple of 32, got torch.float32 \[4, 40\]"):
        quant.quantize_blocks(torch.randn(4, 40), 8)
    with pytest.raises(ValueError, match="inf or nan"):
        quant.quantize_blocks(torch.full((2, 32), float("nan")), 3)
    with pytest.raises(ValueError, match="overflows float16"):
        quant.quantize_blocks(torch.full((2, 32), 1e9), 8)
    with pytest.raises(ValueError, match="GGML type 12"):
        quant.quantize_blocks(torch.randn(2, 256), 12)
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        quant.quantize_weights(torch.nn.Linear(32, 2), bits=3)


def _tiny_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_weights_layers_and_gradients(bits):
    """quantize_weights swaps every eligible nn.Linear; the output equals the float model
    with the dequantized weights, and gradients reach the input and bias, never the blocks."""
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 40),
                            torch.nn.Linear(40, 8))  # in_features 40: not a multiple of 32, kept
    ref = [torch.nn.Linear(64, 96), torch.nn.Linear(96, 40)]
    mt = m.to("tpu")
    rep = quant.quantize_weights(mt, bits)
    name = "Q8_0" if bits == 8 else "Q4_1"
    assert rep["swapped"] == {name: 2} and rep["kept"] == ["3"]
    assert rep["float_bytes"] == 4 * (64 * 96 + 96 * 40)
    assert rep["bytes"] == (64 * 96 + 96 * 40) // 32 * (34 if bits == 8 else 20)
    for r, layer in zip(ref, (mt[0], mt[2])):
        assert isinstance(layer, quant.QuantLinear) and layer.qtype == (8 if bits == 8 else 3)
        r.weight.data = quant.dequantize(layer.qweight.cpu(), layer.qtype, layer.in_features)
        r.bias.data = layer.bias.detach().cpu()
    ref_model = torch.nn.Sequential(ref[0], torch.nn.GELU(), ref[1], torch.nn.Linear(40, 8))
    ref_model[3].load_state_dict({k: v.cpu() for k, v in mt[3].state_dict().items()})
    x = torch.randn(6, 64, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    y, yt = ref_model(x), mt(xt)
    torch.testing.assert_close(yt.detach().cpu(), y.detach(), rtol=1e-4, atol=1e-5)
    y.square().sum().backward()
    yt.square().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mt[0].bias.grad.cpu(), ref[0].bias.grad, rtol=1e-4, atol=1e-5)
    assert mt[0].qweight.grad is None and not mt[0].qweight.requires_grad


@pytest.mark.parametrize("bits", [8, 4])
def test_from_pretrained_with_weight_only_config(tmp_path, bits):
    """Transformers' quantization_config path on a float safetensors checkpoint: the decoder's
    linear layers become QuantLinear, lm_head stays float (Transformers' own rule), logits are
    close to the float model's, greedy decoding and torch.compile(backend="tpu") run, and saving
    raises Transformers' "not serializable" error."""
    from transformers import AutoModelForCausalLM

    ref = _tiny_llama(tmp_path)
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref(ids).logits
    q = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu",
                                             quantization_config=quant.WeightOnlyConfig(bits=bits))
    name = "Q8_0" if bits == 8 else "Q4_1"
    assert q.torch_tpu_quant_report["swapped"] == {name: 14} and q.torch_tpu_quant_report["kept"] == ["lm_head"]
    assert isinstance(q.model.layers[1].mlp.down_proj, quant.QuantLinear) and type(q.lm_head) is torch.nn.Linear
    with torch.no_grad():
        got = q(ids.to("tpu")).logits.cpu()
        # the weights' quantization error, not the kernel's: int8 about 1e-2, int4 about 0.1 of logits near 0.6
        assert (got - want).abs().max() < (0.02 if bits == 8 else 0.2), (got - want).abs().max()
        # the same model on the CPU with the dequantized weights gives the same logits
        for layer in [m for m in q.modules() if isinstance(m, quant.QuantLinear)]:
            path = next(n for n, mm in q.named_modules() if mm is layer)
            ref.get_submodule(path).weight.data = quant.dequantize(layer.qweight.cpu(), layer.qtype,
                                                                   layer.in_features)
        torch.testing.assert_close(got, ref(ids).logits, rtol=1e-4, atol=1e-4)
        cm = torch.compile(q, backend="tpu")
        torch.testing.assert_close(cm(ids.to("tpu")).logits.cpu(), got, rtol=1e-5, atol=1e-5)
        out = q.generate(ids[:1].to("tpu"), max_new_tokens=4, do_sample=False)
        assert torch.equal(out.cpu(), ref.generate(ids[:1], max_new_tokens=4, do_sample=False))
    with pytest.raises(ValueError, match="not serializable"):
        q.save_pretrained(tmp_path / "out")
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        quant.WeightOnlyConfig(bits=2)


# ---- act_bits=8: int8 activations per block of 32 (decode) --------------------------------

def _a8_reference(x, raw, qtype):
    """(y computed in double on x quantized as act_bits=8 defines it, the error bound against the
    exact x): sum over blocks of d_x / 2 * sum_j |w_j - c| (c: Q4_1's min, else 0)."""
    k = x.shape[-1]
    n, nb = raw.shape[0], k // 32
    w = quant.dequantize(raw, qtype, k).double().reshape(n, nb, 32)
    c = torch.zeros(n, nb, 1, dtype=torch.float64)
    if qtype == 3:
        c = quant._f16(raw.reshape(n, nb, 20), 2).double()
    xb = x.double().reshape(-1, nb, 32)
    xh = quant.quantize_activations(x).double().reshape(-1, nb, 32)
    ref_q = torch.einsum("mbj,nbj->mn", xh, w - c) + torch.einsum("mb,nb->mn", xb.sum(-1), c[..., 0])
    dx = xb.abs().amax(-1) / 127  # [m, nb]
    bound = 0.5 * (1 + 1e-4) * dx @ (w - c).abs().sum(-1).T
    mag = torch.einsum("mbj,nbj->mn", xb.abs(), w.abs()) + torch.einsum("mbj,nbj->mn", xh.abs(), (w - c).abs() + 16)
    return ref_q, bound, 1e-5 * mag + 1e-6


@pytest.mark.parametrize("qtype", [2, 3, 8])
@pytest.mark.parametrize("rows", [1, 4])
def test_q_linear_act8_error_bound(qtype, rows):
    """act_bits=8 equals the float sum over the quantized x up to float32 rounding, and is within
    the quantization bound of the exact float result; the CPU kernel computes the same."""
    n, k = 67, 1536 + 32
    raw = random_blocks(qtype, n, k, seed=qtype * 7 + rows)
    x = torch.randn(rows, k)
    x[0, 64:96] = 0  # a block of zeros (d_x = 0)
    x[-1, 128:160] *= 1e4  # a large block
    ref_q, bound, tol = _a8_reference(x, raw, qtype)
    ref = x.double() @ quant.dequantize(raw, qtype, k).double().T
    for dev in ("tpu", "cpu"):
        y = torch.ops.tpu.q_linear(x.to(dev), raw.to(dev), qtype, n, 8).cpu().double()
        assert bool(((y - ref_q).abs() <= tol).all()), (dev, ((y - ref_q).abs() - tol).max())
        assert bool(((y - ref).abs() <= bound + tol).all()), (dev, ((y - ref).abs() - bound - tol).max())
    # act_bits=8 is not the float path: with this x the two differ
    y32 = torch.ops.tpu.q_linear(x.to("tpu"), raw.to("tpu"), qtype, n).cpu().double()
    assert (y32 - ref).abs().max() < (ref_q - ref).abs().max()


@pytest.mark.parametrize("qtype,rows", [(12, 1), (14, 1), (3, 5), (8, 17)])
def test_q_linear_act8_falls_back_to_float(qtype, rows):
    """Q4_K/Q6_K, or more rows of x than ACT8_MAX_ROWS: act_bits=8 runs the exact float path."""
    n, k = 19, 512
    raw = random_blocks(qtype, n, k, seed=rows).to("tpu")
    x = torch.randn(rows, k).to("tpu")
    assert torch.equal(torch.ops.tpu.q_linear(x, raw, qtype, n, 8).cpu(), torch.ops.tpu.q_linear(x, raw, qtype, n).cpu())


def test_q_linear_act_bits_errors_and_module_attribute():
    n, k = 32, 64
    raw = random_blocks(3, n, k)
    x = torch.randn(1, k)
    for dev in ("tpu", "cpu"):
        with pytest.raises(RuntimeError, match=r"tpu::q_linear: act_bits must be 32 .* or 8 .*, got 16"):
            torch.ops.tpu.q_linear(x.to(dev), raw.to(dev), 3, n, 16).cpu()
    with pytest.raises(ValueError, match="act_bits must be 32 or 8"):
        quant.QuantLinear(raw, 3, k, n, act_bits=4)
    m = torch.nn.Sequential(quant.QuantLinear(raw.to("tpu"), 3, k, n), torch.nn.ReLU(),
                            quant.QuantLinear(random_blocks(8, k, n).to("tpu"), 8, n, k, act_bits=8))
    assert m[0].act_bits == 32 and m[2].act_bits == 8 and "act_bits=8" in repr(m[2])
    y_mixed = m(x.to("tpu")).cpu()
    assert quant.set_activation_bits(m, 32) == 2 and m[2].act_bits == 32
    y32 = m(x.to("tpu")).cpu()
    assert not torch.equal(y_mixed, y32)
    assert quant.set_activation_bits(m, 8) == 2 and m[0].act_bits == 8
    y8 = m(x.to("tpu")).cpu()
    h = torch.ops.tpu.q_linear(x, raw, 3, n, 8).relu()  # the same chain on the CPU kernel
    torch.testing.assert_close(y8, torch.ops.tpu.q_linear(h, random_blocks(8, k, n), 8, k, 8), rtol=1e-5, atol=1e-5)
    assert not torch.equal(y8, y32)
    assert quant.set_activation_bits(m, 32) == 2
    assert torch.equal(m(x.to("tpu")).cpu(), y32)
    with pytest.raises(ValueError, match="bits must be 32 or 8"):
        quant.set_activation_bits(m, 16)


def test_q_linear_registered_in_cpp():
    """Schema, Meta and Autograd kernels come from the C++ bridge (no Python wrapper on the
    eager tpu path); only the CPU kernel is Python."""
    op = torch.ops.tpu.q_linear.default
    assert "int act_bits=32" in str(op._schema)
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key("tpu::q_linear", "AutogradPrivateUse1")
    dump = torch._C._dispatch_dump("tpu::q_linear")
    lines = {ln.split(":")[0]: ln for ln in dump.splitlines()}
    for key in ("debug", "Meta", "Autograd[alias]"):
        assert "csrc/aten/quant.cpp" in lines[key], lines[key]
    assert "quant.py" in lines["CPU"]
    assert "python" not in dump.lower().replace("quant.py", "")
    # an eager call on tpu runs no Python function but OpOverload.__call__ (before the move to
    # C++: torch.library's autograd wrapper and the Python Meta kernel ran on every call)
    import sys

    x = torch.randn(1, 64).to("tpu").requires_grad_()
    raw = random_blocks(3, 32, 64).to("tpu")
    op(x, raw, 3, 32)
    frames = []
    sys.setprofile(lambda f, e, a: frames.append((f.f_code.co_filename, f.f_code.co_name)) if e == "call" else None)
    try:
        y = op(x, raw, 3, 32, 8)
    finally:
        sys.setprofile(None)
    assert y.requires_grad and all(name == "__call__" and fn.endswith("_ops.py") for fn, name in frames), frames
    dq = torch._C._dispatch_dump("tpu::q_dequantize")
    assert "csrc/aten/quant.cpp" in dq and "Meta" in dq


@pytest.mark.parametrize("qtype", [3, 8, 12])
@pytest.mark.parametrize("act_bits", [32, 8])
def test_q_linear_gradient_to_x(qtype, act_bits):
    """grad_x = grad @ dequantize(W) (the C++ backward, W from tpu::q_dequantize), as on the CPU."""
    n, k = 40, 256
    raw = random_blocks(qtype, n, k, seed=5)
    w = quant.dequantize(raw, qtype, k)
    x = torch.randn(2, 3, k)
    g = torch.randn(2, 3, n)
    xt = x.to("tpu").requires_grad_()
    y = torch.ops.tpu.q_linear(xt, raw.to("tpu"), qtype, n, act_bits)
    assert y.requires_grad and y.grad_fn is not None
    y.backward(g.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), g @ w, rtol=1e-5, atol=1e-5)
    xc = x.clone().requires_grad_()
    torch.ops.tpu.q_linear(xc, raw, qtype, n, act_bits).backward(g)  # the CPU path: same C++ autograd
    torch.testing.assert_close(xc.grad, g @ w, rtol=1e-5, atol=1e-5)
    # gradcheck-style: the directional derivative of the float path matches in double
    if act_bits == 32:
        v = torch.randn_like(x)
        eps = 1e-2
        fd = (torch.ops.tpu.q_linear((x + eps * v).to("tpu"), raw.to("tpu"), qtype, n).cpu()
              - torch.ops.tpu.q_linear((x - eps * v).to("tpu"), raw.to("tpu"), qtype, n).cpu()) / (2 * eps)
        torch.testing.assert_close((fd * g).sum(), (xt.grad.cpu() * v).sum(), rtol=2e-3, atol=2e-3)


def test_q_linear_act8_under_compile():
    """torch.compile (FakeTensor through the C++ Meta kernel) keeps act_bits."""
    n, k = 32, 96
    raw = random_blocks(2, n, k).to("tpu")
    layer = quant.QuantLinear(raw, 2, k, n, act_bits=8)
    x = torch.randn(1, k).to("tpu")
    eager = layer(x).cpu()
    compiled = torch.compile(layer, backend="tpu")(x).cpu()
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    assert not torch.equal(eager, quant.QuantLinear(raw, 2, k, n)(x).cpu())


def _decode_logits(model, ids, steps):
    """Greedy decode on tpu: prefill, then `steps` one-token forwards; the logits of each."""
    from transformers import DynamicCache

    out, cache, got = None, DynamicCache(), []
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        got.append(out.logits[:, -1].cpu())
        nxt = out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            got.append(out.logits[:, -1].cpu())
            nxt = out.logits[:, -1:].argmax(-1)
    return torch.cat(got)


def _adjacent_siblings(model):
    """Places each q/k/v and gate/up set's blocks in consecutive rows of one tensor (as the GGUF
    loader does)."""
    for parent in model.modules():
        for names in quant.SIBLINGS:
            mods = [getattr(parent, n, None) for n in names]
            if all(isinstance(m, quant.QuantLinear) for m in mods):
                joined, off = torch.cat([m.qweight for m in mods]), 0
                for m in mods:
                    m.qweight = joined[off:off + m.out_features]
                    off += m.out_features


def test_fuse_projections_one_product_same_bits(tmp_path):
    """q/k/v and gate/up of each layer joined (one q_linear per set when decoding): every
    step's logits have the bits of the separate products, the state_dict is unchanged, and
    layers that no longer match (other act_bits, moved weights) compute alone."""
    model = _tiny_llama(tmp_path).to("tpu")
    quant.quantize_weights(model, 4)
    ids = torch.tensor([[3, 17, 90, 5, 64]], device="tpu")
    ref = _decode_logits(model, ids, 6)
    assert quant.fuse_projections(model) == 0  # each layer's blocks in a tensor of its own: left alone
    _adjacent_siblings(model)
    sd = {k: v.cpu().clone() for k, v in model.state_dict().items()}
    assert quant.fuse_projections(model) == 4  # 2 layers x (q/k/v, gate/up)
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.qweight.data_ptr() == attn.q_proj.qweight.data_ptr() + attn.q_proj.qweight.numel()
    sd2 = model.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k].cpu()) for k in sd)
    calls = []
    real = quant._Q_LINEAR

    def counting(x, w, *a):
        calls.append(tuple(w.shape))
        return real(x, w, *a)

    quant._Q_LINEAR = counting
    try:
        got = _decode_logits(model, ids, 6)
    finally:
        quant._Q_LINEAR = real
    assert torch.equal(got, ref)
    # prefill (5 rows): 7 products per layer and the lm_head; each one-row step: q/k/v, o,
    # gate/up, down per layer and the lm_head
    assert len(calls) == (2 * 7 + 1) + 6 * (2 * 4 + 1), len(calls)
    assert (attn.q_proj.out_features + 2 * attn.k_proj.out_features, attn.q_proj.qweight.shape[1]) in calls
    # one member with other activation bits: the set computes member by member
    attn.v_proj.act_bits = 8
    g = attn.q_proj._tpu_siblings
    assert not quant._siblings_intact(g)
    attn.v_proj.act_bits = 32
    # moved away and back: new buffers, no longer rows of the joined tensor
    model.to("cpu").to("tpu")
    assert not quant._siblings_intact(attn.q_proj._tpu_siblings)
    assert torch.equal(_decode_logits(model, ids, 6), ref)
    quant.unfuse_projections(model)
    assert "forward" not in vars(attn.q_proj) and not hasattr(attn.q_proj, "_tpu_siblings")
    assert torch.equal(_decode_logits(model, ids, 6), ref)


def test_fuse_projections_under_graph_capture(tmp_path):
    """A captured decode step with joined projections replays to the eager step's logits."""
    from transformers import StaticCache

    model = _tiny_llama(tmp_path).to("tpu")
    quant.quantize_weights(model, 4)
    ids = torch.tensor([[3, 17, 90, 5, 64]], device="tpu")
    ref = _decode_logits(model, ids, 4)
    _adjacent_siblings(model)
    assert quant.fuse_projections(model) == 4
    with torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=16)
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(5, device="tpu"))
        got = [out.logits[:, -1].cpu()]
        nxt = out.logits[:, -1:].argmax(-1)
        pos = torch.full((1,), 5, dtype=torch.long, device="tpu")
        logits = torch.empty(1, model.config.vocab_size, device="tpu")

        def step():
            o = model(input_ids=nxt, past_key_values=cache, use_cache=True, cache_position=pos)
            logits.copy_(o.logits[:, -1])
            nxt.copy_(o.logits[:, -1:].argmax(-1))
            pos.add_(1)

        g = torch.tpu.TPUGraph()
        with torch.tpu.graph(g):
            step()
        for _ in range(4):
            g.replay()
            got.append(logits.cpu())
    torch.testing.assert_close(torch.cat(got), ref, rtol=1e-5, atol=1e-5)


def test_fuse_projections_input_changed_in_place():
    """A member called on an input modified in place since the set's product computes it anew."""
    mods = torch.nn.Module()
    for n, o in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32)):
        setattr(mods, n, quant.QuantLinear(random_blocks(3, o, 64, seed=o).to("tpu"), 3, 64, o))
    _adjacent_siblings(mods)
    assert quant.fuse_projections(mods) == 1
    x = torch.randn(1, 64, device="tpu")
    with torch.no_grad():
        q = mods.q_proj(x)
        k_before = quant.QuantLinear.forward(mods.k_proj, x)
        x.mul_(2)
        k = mods.k_proj(x)
        v = mods.v_proj(x)
        assert torch.equal(q.cpu(), quant.QuantLinear.forward(mods.q_proj, x / 2).cpu())
        assert torch.equal(k.cpu(), quant.QuantLinear.forward(mods.k_proj, x).cpu())
        assert not torch.equal(k.cpu(), k_before.cpu())
        assert torch.equal(v.cpu(), quant.QuantLinear.forward(mods.v_proj, x).cpu())
