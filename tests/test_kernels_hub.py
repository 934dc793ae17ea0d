"""The Hugging Face `kernels` library on tpu: torch.backends.tpu, and
kernelize(model, device="tpu") with torch_tpu's local kernel repository
(torch_tpu/hub_kernels), offline, for inference, training and torch.compile.
Every kernelized model is compared with the same model un-kernelized."""
import copy
import json

import pytest
import torch

kernels = pytest.importorskip("kernels", reason="the `kernels` package (pip install kernels==0.17.2) is not installed")
transformers = pytest.importorskip("transformers")

import torch_tpu  # noqa: E402,F401
import torch_tpu.hub_kernels as hk  # noqa: E402
from torch_tpu.hub_kernels import layers  # noqa: E402
from kernels import Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping, use_kernelized_func  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers.models.llama import modeling_llama as lm  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe as qm  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def mapped(monkeypatch):
    """Transformers 5.23 hooks its layers only with kernels >= 0.18.2; with
    0.17.2 the classes are made extensible here (restored afterwards)."""
    for cls, name in ((lm.LlamaRMSNorm, "RMSNorm"), (lm.LlamaMLP, "SwiGLUMLP"),
                      (qm.Qwen3MoeRMSNorm, "RMSNorm"), (qm.Qwen3MoeExperts, "MoEExperts")):
        monkeypatch.setattr(cls, "kernel_layer_name", name, raising=False)
        monkeypatch.setattr(cls, "kernel_condition", staticmethod(lambda m: True), raising=False)
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


def test_backends_tpu_detected_by_kernels():
    assert hasattr(torch.backends, "tpu")
    import torch.backends.tpu as bt

    assert bt.is_built() and bt.is_available() == torch.tpu.is_available()
    from kernels.backends import _backend

    assert _backend().name == "tpu"  # not "cuda": the tpu build variant is selected
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
                                         (_qwen3_moe, {"tpu::rms_norm", "tpu::ragged_dot", "tpu::swiglu"})])
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
                                         (_qwen3_moe, {"tpu::rms_norm", "tpu::ragged_dot"})])
def test_torch_compile(mapped, build, fused, tmp_path):
    torch._dynamo.reset()
    ref = build().train().to("tpu")
    model = kernelize(copy.deepcopy(ref), mode=Mode.TRAINING | Mode.TORCH_COMPILE, device="tpu")
    assert _replaced(model, layers.RMSNorm) > 0
    compiled = torch.compile(model, backend="tpu")
    ids = torch.randint(0, 97, (2, 9)).to("tpu")
    loss_ref = ref(ids, labels=ids).loss
    loss_ref.backward()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        loss = compiled(ids, labels=ids).loss
        loss.backward()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    steps = " ".join(e["name"] for e in json.loads(trace.read_text())["traceEvents"]
                     if e.get("cat") == "tpu_graph_step")
    for op in fused:  # the kernel layers' ops are in the compiled graphs
        assert op.split("::")[1] in steps, (op, steps)
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


# rotary: Transformers (with kernels >= 0.18.2) turns apply_rotary_pos_emb into
# a kernels function layer named "rotary_pos_emb"; the same, done here
rotary = use_kernel_forward_from_hub("rotary_pos_emb")(lm.apply_rotary_pos_emb)


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
