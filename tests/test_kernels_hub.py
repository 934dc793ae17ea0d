"""The Hugging Face `kernels` library on tpu: kernelize(model, device="tpu")
with torch_tpu's local kernel repository (torch_tpu/hub_kernels), and
Transformers' own from_pretrained(..., use_kernels=True, kernel_config=...),
offline (no socket may connect), for inference, training and torch.compile.
Every kernelized model is compared with the same model un-kernelized."""
import copy
import json
import socket

import pytest
import torch

kernels = pytest.importorskip("kernels", reason="the `kernels` package (pip install kernels==0.18.3) is not installed")
transformers = pytest.importorskip("transformers")

import torch_tpu  # noqa: E402,F401
import torch_tpu.hub_kernels as hk  # noqa: E402
from torch_tpu.hub_kernels import layers  # noqa: E402
from kernels import Mode, kernelize, use_kernel_mapping, use_kernelized_func  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers.models.llama import modeling_llama as lm  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe as qm  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)

    def connect(sock, address):
        raise AssertionError(f"network access to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def extensible(monkeypatch):
    """Transformers names its RMSNorm layers and apply_rotary_pos_emb for
    `kernels` but not its MLPs and experts: the user maps those with
    kernels.replace_kernel_forward_from_hub (class attributes, restored here
    afterwards)."""
    for cls in (lm.LlamaMLP, qm.Qwen3MoeExperts):
        for attr in ("kernel_layer_name", "kernel_condition"):
            monkeypatch.setattr(cls, attr, None, raising=False)
            monkeypatch.delattr(cls, attr)
    kernels.replace_kernel_forward_from_hub(lm.LlamaMLP, "SwiGLUMLP")
    kernels.replace_kernel_forward_from_hub(qm.Qwen3MoeExperts, "MoEExperts")


@pytest.fixture
def mapped(extensible):
    with use_kernel_mapping(hk.kernel_mapping()):
        yield


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def _ops_of(fn):
    with _Ops() as rec:
        out = fn()
    return out, rec.names


# The experts layer's ops (ragged_dot, and swiglu between its two grouped GEMMs) where the
# driver runs ragged_dot; elsewhere (pjrt: no lowering yet) the layer runs the module's own forward
_MOE = {"tpu::ragged_dot", "tpu::swiglu"} if "tpu::ragged_dot" in torch_tpu._C.graph_ops(0) else set()


def _compile(model):
    """torch.compile(model) with the "tpu" backend, through a wrapper that records the ops of
    the graphs dynamo hands it."""
    tpu = torch._dynamo.lookup_backend("tpu")
    ops = set()

    def backend(gm, example_inputs):
        ops.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return tpu(gm, example_inputs)

    return torch.compile(model, backend=backend), ops


def _run_compiled(compiled, ids, tmp_path):
    """One training step of the compiled model; the names of the graph steps that ran on
    the device queue (host driver: the profiler's tpu_graph_step events; pjrt runs a
    graph as one program and records none)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        loss = compiled(ids, labels=ids).loss
        loss.backward()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    steps = " ".join(e["name"] for e in json.loads(trace.read_text())["traceEvents"]
                     if e.get("cat") == "tpu_graph_step")
    return loss, steps


def _check_compiled_ops(fused, graph_ops, steps):
    for op in fused:  # the kernel layers' ops are in the compiled graphs, and ran there
        name = op.replace("::", ".")
        assert any(t == name or t.startswith(name + ".") for t in graph_ops), (op, graph_ops)
        if torch_tpu._C.selected_driver() == "host":
            assert op.split("::")[1] in steps, (op, steps)


def test_backends_tpu_detected_by_kernels():
    assert hasattr(torch.backends, "tpu")
    import torch.backends.tpu as bt

    assert bt.is_built() and bt.is_available() == torch.tpu.is_available()
    from kernels.backends import _backend

    assert torch.accelerator.current_accelerator().type == "tpu"  # what kernels 0.18 asks
    assert _backend().name == "tpu"  # not "cuda": the tpu build variant is selected
    # the variant's metadata records its files' digest (kernels warns on every load without one)
    from kernels._rust import Metadata
    from kernels.digest import DigestVerificationResult, verify_digest

    variant = hk.REPO_PATH / "build" / "torch-tpu"
    res = verify_digest(variant, metadata=Metadata.read_from_file(variant / "metadata.json"), location=None,
                        cache=False)
    assert isinstance(res, DigestVerificationResult.Success), str(res)
    mod = kernels.get_local_kernel(hk.REPO_PATH)
    assert mod.layers is layers
    for name in hk.LAYERS:
        assert isinstance(getattr(mod.layers, name), type)


def test_kernel_mapping_errors():
    with pytest.raises(ValueError, match="no layer 'Nope'"):
        hk.kernel_mapping("Nope")
    m = hk.kernel_mapping("RMSNorm")
    assert list(m) == ["RMSNorm"] and list(m["RMSNorm"]) == ["tpu"]


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _qwen3_moe():
    cfg = transformers.Qwen3MoeConfig(vocab_size=97, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      num_experts=4, num_experts_per_tok=2, head_dim=16,
                                      max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(cfg).eval()


def _replaced(model, layer_cls):
    return sum(1 for m in model.modules()
               if getattr(vars(m).get("forward"), "__func__", None) is layer_cls.forward)


@pytest.mark.parametrize("build,fused", [(_llama, {"tpu::rms_norm", "tpu::swiglu"}),
                                         (_qwen3_moe, {"tpu::rms_norm"} | _MOE)])
def test_inference(mapped, build, fused):
    ref = build().to("tpu")
    model = kernelize(copy.deepcopy(ref), mode=Mode.INFERENCE, device="tpu")
    assert _replaced(model, layers.RMSNorm) > 0
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    with torch.no_grad():
        want = ref(ids).logits.cpu()
        got, names = _ops_of(lambda: model(ids).logits.cpu())
    assert fused <= names, names
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("build", [_llama, _qwen3_moe])
def test_training(mapped, build):
    ref = build().train().to("tpu")
    model = kernelize(copy.deepcopy(ref), mode=Mode.TRAINING, device="tpu")
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    loss_ref = ref(ids, labels=ids).loss
    loss_ref.backward()
    loss, names = _ops_of(lambda: model(ids, labels=ids).loss)
    loss.backward()
    assert "tpu::rms_norm" in names
    torch.testing.assert_close(loss.cpu(), loss_ref.cpu(), rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("build,fused", [(_llama, {"tpu::rms_norm", "tpu::swiglu"}),
                                         (_qwen3_moe, {"tpu::rms_norm"} | _MOE)])
def test_torch_compile(mapped, build, fused, tmp_path):
    torch._dynamo.reset()
    ref = build().train().to("tpu")
    model = kernelize(copy.deepcopy(ref), mode=Mode.TRAINING | Mode.TORCH_COMPILE, device="tpu")
    assert _replaced(model, layers.RMSNorm) > 0
    compiled, graph_ops = _compile(model)
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    loss_ref = ref(ids, labels=ids).loss
    loss_ref.backward()
    loss, steps = _run_compiled(compiled, ids, tmp_path)
    _check_compiled_ops(fused, graph_ops, steps)
    torch.testing.assert_close(loss.cpu(), loss_ref.cpu(), rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-3, atol=1e-5, msg=name)


def test_moe_experts_layer(mapped):
    """The experts layer alone: the "no expert" index, gradients into tokens and weights."""
    cfg = transformers.Qwen3MoeConfig(hidden_size=32, moe_intermediate_size=16, num_experts=5)
    torch.manual_seed(1)
    ref = qm.Qwen3MoeExperts(cfg)
    with torch.no_grad():
        ref.gate_up_proj.normal_(0, 0.2)
        ref.down_proj.normal_(0, 0.2)
    ref = ref.to("tpu")
    model = kernelize(copy.deepcopy(ref), mode=Mode.TRAINING, device="tpu")
    assert _replaced(model, layers.MoEExperts) == 1
    x = torch.randn(7, 32)
    idx = torch.randint(0, 5, (7, 2))
    idx[3, 1] = 5  # no expert
    w = torch.rand(7, 2)
    outs = []
    for m in (ref, model):
        xt = x.to("tpu").requires_grad_()
        y = m(xt, idx.to("tpu"), w.to("tpu"))
        y.square().sum().backward()
        outs.append((y.cpu(), xt.grad.cpu(), m.gate_up_proj.grad.cpu(), m.down_proj.grad.cpu()))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # non-tpu tensors take the module's own forward
    cpu = kernelize(copy.deepcopy(ref).to("cpu"), mode=Mode.INFERENCE, device="tpu")
    torch.testing.assert_close(cpu(x, idx, w), ref.to("cpu")(x, idx, w))


# rotary: Transformers turns apply_rotary_pos_emb into a kernels function
# layer named "rotary_pos_emb"
rotary = lm.apply_rotary_pos_emb
assert rotary.kernel_layer_name == "rotary_pos_emb"


@use_kernelized_func(rotary)
class _Rotate(torch.nn.Module):
    def forward(self, q, k, cos, sin):
        return rotary(q, k, cos, sin)


def test_rotary_func_layer():
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16)
    ang = torch.randn(2, 5, 8)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    args = [t.to("tpu") for t in (q, k, cos, sin)]
    want = lm.apply_rotary_pos_emb(*args)
    with use_kernel_mapping(hk.kernel_mapping("rotary_pos_emb")):
        m = kernelize(_Rotate(), mode=Mode.INFERENCE, device="tpu")
    try:
        got, names = _ops_of(lambda: m(*args))
        assert "tpu::rope" in names
        for a, b in zip(got, want):
            torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-5, atol=1e-5)
        # cos/sin narrower than the heads (partial rotary) are left to Llama's
        # formula, which rejects them, rather than rotated partially
        with pytest.raises(RuntimeError, match="broadcast|size of tensor"):
            m(args[0], args[1], args[2][..., :8], args[3][..., :8])
    finally:
        kernelize(_Rotate(), mode=Mode.INFERENCE, device="tpu")  # unmapped: the original forward again


# ---- Transformers' own path: from_pretrained(..., use_kernels=True) ----------------------------

_FUSED = {"llama": {"tpu::rms_norm", "tpu::rope", "tpu::swiglu"},
          "qwen3_moe": {"tpu::rms_norm", "tpu::rope"} | _MOE}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny models as checkpoints on disk (random weights, no download)."""
    out = {}
    for name, build in (("llama", _llama), ("qwen3_moe", _qwen3_moe)):
        out[name] = tmp_path_factory.mktemp(name)
        build().save_pretrained(out[name])
    return out


def _load(path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(path, device_map="tpu", **kw)


def _kernel_layers(model):
    """The modules and function layers whose forward is one of torch_tpu.hub_kernels'."""
    found = []
    for m in model.modules():
        for obj in (m, *(vars(m).get("_kernel_funcs") or {}).values()):
            fn = getattr(vars(obj).get("forward"), "__func__", None)
            if fn is not None and getattr(fn, "__module__", None) == layers.__name__:
                found.append(fn.__qualname__.split(".")[0])
    return found


def _train_step(model, ids):
    loss = model(ids, labels=ids).loss
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters()}


def _check_same(got, want):
    (loss, grads), (loss_ref, grads_ref) = got, want
    torch.testing.assert_close(loss, loss_ref, rtol=1e-4, atol=1e-5)
    assert set(grads) == set(grads_ref)
    for name in grads_ref:
        torch.testing.assert_close(grads[name], grads_ref[name], rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("name", ["llama", "qwen3_moe"])
def test_transformers_use_kernels(extensible, saved, name):
    """from_pretrained(..., device_map="tpu", use_kernels=True, kernel_config=hk.kernel_config()):
    the fused layers run, in eval and (after model.train()) in training, and logits, loss
    and every gradient equal the model loaded without kernels."""
    ref = _load(saved[name])
    model = _load(saved[name], use_kernels=True, kernel_config=hk.kernel_config())
    assert model.use_kernels and not ref.use_kernels
    found = set(_kernel_layers(model))
    assert found == ({"RMSNorm", "rotary_pos_emb", "SwiGLUMLP"} if name == "llama" else
                     {"RMSNorm", "rotary_pos_emb", "MoEExperts"}), found
    assert _kernel_layers(ref) == []
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    with torch.no_grad():
        want, ref_names = _ops_of(lambda: ref(ids).logits.cpu())
        got, names = _ops_of(lambda: model(ids).logits.cpu())
    assert _FUSED[name] <= names, names
    assert not (_FUSED[name] - {"tpu::ragged_dot"}) & ref_names  # the reference does not fuse
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # model.train(): Transformers kernelizes again for training; the layers stay
    model.train()
    ref.train()
    assert set(_kernel_layers(model)) == found
    want = _train_step(ref, ids)
    got, names = _ops_of(lambda: _train_step(model, ids))
    assert _FUSED[name] <= names, names
    _check_same(got, want)


@pytest.mark.parametrize("name", ["llama", "qwen3_moe"])
def test_transformers_use_kernels_compiled(extensible, saved, name, tmp_path):
    """The same model under torch.compile(backend="tpu"): the fused ops are inside the
    compiled graphs; loss and gradients equal the un-kernelized model's (eager)."""
    torch._dynamo.reset()
    ref = _load(saved[name]).train()
    model = _load(saved[name], use_kernels=True, kernel_config=hk.kernel_config()).train()
    compiled, graph_ops = _compile(model)
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    want = _train_step(ref, ids)
    loss, steps = _run_compiled(compiled, ids, tmp_path)
    got = loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters()}
    _check_compiled_ops(_FUSED[name], graph_ops, steps)
    _check_same(got, want)


def test_transformers_use_kernels_with_registered_mapping(saved):
    """use_kernels=True alone, with the repository registered in kernels' mapping (here for
    the duration of a use_kernel_mapping context; kernels.register_kernel_mapping for the
    process): Transformers adds its own mapping, which has no "tpu" entries, to it."""
    ref = _load(saved["llama"])
    with use_kernel_mapping(hk.kernel_mapping()):
        model = _load(saved["llama"], use_kernels=True)
    assert sorted(set(_kernel_layers(model))) == ["RMSNorm", "rotary_pos_emb"]  # LlamaMLP is not named
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    with torch.no_grad():
        want = ref(ids).logits.cpu()
        got, names = _ops_of(lambda: model(ids).logits.cpu())
    assert {"tpu::rms_norm", "tpu::rope"} <= names, names
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_transformers_use_kernels_without_tpu_kernels(saved, monkeypatch):
    """use_kernels=True with nothing mapped for tpu: as on CUDA for a layer with no kernel,
    the layers keep their own forward; nothing is loaded or downloaded, no error."""
    loads = []
    for cls in (kernels.LayerRepository, kernels.LocalLayerRepository):
        orig = cls.load
        monkeypatch.setattr(cls, "load", lambda self, orig=orig: loads.append(self) or orig(self))
    ref = _load(saved["llama"])
    model = _load(saved["llama"], use_kernels=True)
    assert model.use_kernels and _kernel_layers(model) == [] and loads == []
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    with torch.no_grad():
        got, names = _ops_of(lambda: model(ids).logits.cpu())
        want = ref(ids).logits.cpu()
    assert not {"tpu::rms_norm", "tpu::rope", "tpu::swiglu"} & names
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_kernel_config_layers():
    cfg = hk.kernel_config("RMSNorm")
    assert isinstance(cfg, transformers.KernelConfig) and cfg.use_local_kernel
    assert cfg.kernel_mapping == {"RMSNorm": f"{hk.REPO_PATH}:RMSNorm"}
    with pytest.raises(ValueError, match="no layer 'Nope'"):
        hk.kernel_config(["RMSNorm", "Nope"])
