"""Transformers' and Accelerate's own device-dependent code paths on "tpu"
(README: "Transformers' own TPU code paths"): Accelerate's device pick,
get_max_memory and device_map="auto", caching_allocator_warmup, and
Transformers' "tpu" detection."""
import logging

import pytest
import torch
import torch_tpu

import transformers
from transformers import LlamaConfig, LlamaForCausalLM

transformers.logging.set_verbosity_error()


def _tiny_config(**kw):
    base = dict(vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaConfig(**{**base, **kw})


@pytest.fixture
def fresh_state():
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_transformers_detects_tpu():
    from transformers.utils import is_torch_tpu_available
    from transformers.utils.import_utils import get_device_type
    assert is_torch_tpu_available()
    assert get_device_type() == "tpu"


def test_accelerate_device_is_tpu(fresh_state):
    from accelerate import Accelerator, PartialState
    assert PartialState().device == torch.device("tpu")
    assert Accelerator().device.type == "tpu"
    model = Accelerator().prepare(torch.nn.Linear(3, 3))
    assert model.weight.device.type == "tpu"


def test_accelerate_cpu_request_stays_cpu(fresh_state):
    from accelerate import PartialState
    assert PartialState(cpu=True).device == torch.device("cpu")


def test_get_max_memory_lists_chips(caplog):
    from accelerate.utils import get_max_memory
    mem = get_max_memory()
    n = torch.tpu.device_count()
    assert [k for k in mem if isinstance(k, int)] == list(range(n))
    assert "cpu" in mem
    for i in range(n):
        free, total = torch.tpu.mem_get_info(i)
        assert mem[i] == free and 0 < free <= total
    # a user's max_memory: sizes converted, integer keys checked against the tpu chips (no warning)
    with caplog.at_level(logging.WARNING):
        user = {0: "1MiB", "cpu": "1GiB"}
        assert get_max_memory(user) == {0: 1024 ** 2, "cpu": 1024 ** 3}
        assert user == {0: 1024 ** 2, "cpu": 1024 ** 3}  # converted in place, as Accelerate does
    assert "not available" not in caplog.text
    with caplog.at_level(logging.WARNING):
        get_max_memory({n: "1MiB"})
    assert f"Device {n} is not available" in caplog.text


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    torch.manual_seed(0)
    model = LlamaForCausalLM(_tiny_config()).eval()
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    return model, path


def _check_matches_cpu(cpu_model, model):
    x = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = cpu_model(x).logits
        got = model(x.to("tpu")).logits
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4)
    want = cpu_model.generate(x, max_new_tokens=5, do_sample=False)
    out = model.generate(x.to("tpu"), max_new_tokens=5, do_sample=False)
    assert torch.equal(out.cpu(), want)


def test_device_map_auto_uses_tpu(saved_model, no_fallback):
    cpu_model, path = saved_model
    model = LlamaForCausalLM.from_pretrained(path, device_map="auto").eval()
    # all on the tpu chips (with several chips, "auto" balances the layers across them)
    assert {p.device.type for p in model.parameters()} == {"tpu"}
    _check_matches_cpu(cpu_model, model)


def test_device_map_auto_offloads_to_cpu(saved_model):
    cpu_model, path = saved_model
    layer_bytes = sum(p.numel() * 4 for p in cpu_model.model.layers[0].parameters())
    embed_bytes = cpu_model.model.embed_tokens.weight.numel() * 4
    model = LlamaForCausalLM.from_pretrained(path, device_map="auto",
                                             max_memory={0: embed_bytes + 2 * layer_bytes, "cpu": "1GiB"}).eval()
    placed = set(model.hf_device_map.values())
    assert 0 in placed and "cpu" in placed, model.hf_device_map
    _check_matches_cpu(cpu_model, model)


def test_caching_allocator_warmup_respects_budget():
    """Transformers warms the allocator with one model-sized block on "tpu"
    (no budget clamp there, unlike cuda/xpu). The host allocator does not
    split cached blocks, so the block is not reused by the weights, but it is
    released when the budget needs the room: a model of 60% of the budget still
    loads after a 60% warm-up, and a model over the budget fails with OOM."""
    from transformers.modeling_utils import caching_allocator_warmup
    dev = torch.device("tpu", 0)
    torch.tpu.synchronize(dev)
    torch.tpu.empty_cache()
    budget = torch.tpu.get_device_properties(dev).total_memory

    def meta_model(fraction):
        hidden = 256
        vocab = int(fraction * budget / (2 * hidden * 4))  # embeddings + lm_head, float32
        with torch.device("meta"):
            return LlamaForCausalLM(_tiny_config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=1,
                                                 intermediate_size=256))

    model = meta_model(0.6)
    nbytes = sum(p.numel() * 4 for p in model.parameters())
    allocated = torch.tpu.memory_allocated(dev)
    reserved = torch.tpu.memory_reserved(dev)
    caching_allocator_warmup(model, {n: dev for n, _ in model.named_parameters()}, None)
    assert torch.tpu.memory_allocated(dev) == allocated
    assert torch.tpu.memory_reserved(dev) >= reserved + nbytes  # the warm-up block, now cached
    # the weights themselves (one block of the same size here) still fit: the cache gives its room back
    weights = torch.empty(nbytes // 4, device=dev)
    assert torch.tpu.memory_reserved(dev) <= budget
    del weights
    torch.tpu.empty_cache()

    too_big = meta_model(1.1)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        caching_allocator_warmup(too_big, {n: dev for n, _ in too_big.named_parameters()}, None)


# -- Accelerate under torchrun: the decision of PartialState._prepare_backend (the
#    multi-process runs themselves are in tests/test_dist.py)

def _prepare(monkeypatch, local_rank, **kw):
    from types import SimpleNamespace

    from accelerate import PartialState
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    stub = SimpleNamespace(device=None)  # what PartialState.__init__ has set when it calls _prepare_backend
    return (*PartialState._prepare_backend(stub, **kw), stub.device)


def test_accelerate_backend_under_torchrun(monkeypatch):
    from accelerate.utils import DistributedType
    before = torch.tpu.current_device()
    try:
        assert _prepare(monkeypatch, 1) == ("tpu_dist", DistributedType.MULTI_GPU, torch.device("tpu", 1))
        assert torch.tpu.current_device() == 1
        assert _prepare(monkeypatch, 0, backend="cpu:gloo,tpu:tpu_dist")[:2] == ("cpu:gloo,tpu:tpu_dist",
                                                                                 DistributedType.MULTI_GPU)
        assert _prepare(monkeypatch, 0, backend="tpu")[0] == "tpu"
    finally:
        torch.tpu.set_device(before)
    # the CPU asked for, or no torchrun: Accelerate's own answers
    backend, kind, device = _prepare(monkeypatch, 0, cpu=True)
    assert kind == DistributedType.MULTI_CPU and backend in ("gloo", "mpi") and device is None
    assert _prepare(monkeypatch, None) == (None, DistributedType.NO, None)


def test_accelerate_backend_bad_input(monkeypatch):
    n = torch.tpu.device_count()
    with pytest.raises(ValueError, match=f"LOCAL_RANK={n} uses chip tpu:{n}.*has {n} tpu chip"):
        _prepare(monkeypatch, n)
    with pytest.raises(ValueError, match="backend 'gloo' has no collectives for tpu tensors"):
        _prepare(monkeypatch, 0, backend="gloo")


def test_accelerate_launch_takes_torchrun(monkeypatch, tmp_path):
    """`accelerate launch --num_processes 2` without a config file: Accelerate counts
    no GPU and would start one process; on tpu it takes the torchrun launcher."""
    from accelerate.commands import launch
    monkeypatch.setattr(launch, "default_config_file", str(tmp_path / "none.yaml"))

    def validated(*argv):
        return launch._validate_launch_command(launch.launch_command_parser().parse_args([*argv, "x.py"]))[0]

    assert validated("--num_processes", "2").multi_gpu
    assert not validated("--num_processes", "1").multi_gpu
    assert not validated("--num_processes", "2", "--cpu").multi_gpu
