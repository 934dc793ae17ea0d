"""Grouped GEMMs for Mixture-of-Experts on tpu: torch.ops.tpu.ragged_dot (and
its autograd), the native aten::_grouped_mm, and Transformers' MoE layers
(whose default experts implementation, "grouped_mm", reaches the native
kernel), against PyTorch CPU references, with the CPU fallback forbidden."""
import copy

import pytest
import torch

import torch_tpu
from oplog import OpLog

TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
       torch.float16: dict(atol=2e-3, rtol=2e-3)}


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    yield


def _ref_ragged_dot(lhs, rhs, group_sizes):
    """CPU reference: a loop of torch.mm over the groups (float32 accumulation,
    rounded to the input dtype once, like the kernel)."""
    out = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=torch.float32)
    start = 0
    for g, n in enumerate(group_sizes.tolist()):
        out[start:start + n] = lhs[start:start + n].float() @ rhs[g].float()
        start += n
    return out.to(lhs.dtype)


def _rand(*shape, dtype, gen):
    return torch.randn(*shape, generator=gen).to(dtype)


CASES = {
    # name: (group sizes, K, N)
    "decode-like": ([1, 0, 2, 3, 0, 1, 4, 1], 64, 96),
    "empty-groups": ([0, 0, 5, 0, 0, 7, 0, 0], 32, 48),
    "all-empty-but-one": ([0, 9, 0], 16, 16),
    "one-group": ([37], 40, 24),
    "odd-K-N": ([3, 5, 1, 6], 37, 45),
    "big-groups": ([70, 1, 130, 9], 130, 300),  # pieces larger than a row block, packed path
    "small-K": ([2, 3], 1, 7),
}


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES)
def test_ragged_dot_matches_cpu_loop(case, dtype, layout):
    sizes, K, N = CASES[case]
    gen = torch.Generator().manual_seed(0)
    gs = torch.tensor(sizes)
    M, G = int(gs.sum()), len(sizes)
    lhs = _rand(M, K, dtype=dtype, gen=gen)
    rhs = _rand(G, K, N, dtype=dtype, gen=gen)
    # "nk": rhs is a transposed view of [G, N, K] weights (the nn.Linear layout
    # Transformers stores experts in), which takes the streaming path
    rhs_dev = rhs.to("tpu") if layout == "kn" else rhs.transpose(1, 2).contiguous().to("tpu").transpose(1, 2)
    out = torch.ops.tpu.ragged_dot(lhs.to("tpu"), rhs_dev, gs.to("tpu"))
    assert out.device.type == "tpu" and out.dtype == dtype and out.shape == (M, N)
    torch.testing.assert_close(out.cpu(), _ref_ragged_dot(lhs, rhs, gs), **TOL[dtype])


def test_ragged_dot_int32_sizes_strided_lhs_and_cpu_group_sizes():
    gen = torch.Generator().manual_seed(1)
    gs = torch.tensor([4, 0, 6], dtype=torch.int32)
    lhs = _rand(10, 48, dtype=torch.float32, gen=gen)[:, ::2]  # column stride 2
    rhs = _rand(3, 24, 20, dtype=torch.float32, gen=gen)
    ref = _ref_ragged_dot(lhs, rhs, gs)
    lhs_t = _rand(10, 48, dtype=torch.float32, gen=torch.Generator().manual_seed(1)).to("tpu")[:, ::2]
    out = torch.ops.tpu.ragged_dot(lhs_t, rhs.to("tpu"), gs)  # group_sizes may stay on the cpu
    torch.testing.assert_close(out.cpu(), ref, **TOL[torch.float32])


def test_ragged_dot_generic_isa_matches(monkeypatch):
    """The portable C path (no AVX2) gives the same results."""
    monkeypatch.setenv("TORCH_TPU_KERNEL_ISA", "generic")
    gen = torch.Generator().manual_seed(2)
    gs = torch.tensor([2, 0, 5, 1])
    lhs, rhs = _rand(8, 33, dtype=torch.bfloat16, gen=gen), _rand(4, 33, 17, dtype=torch.bfloat16, gen=gen)
    out = torch.ops.tpu.ragged_dot(lhs.to("tpu"), rhs.to("tpu").transpose(1, 2).contiguous().transpose(1, 2),
                                   gs.to("tpu"))
    torch.testing.assert_close(out.cpu(), _ref_ragged_dot(lhs, rhs, gs), **TOL[torch.bfloat16])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_ragged_dot_backward_matches_cpu(dtype):
    gen = torch.Generator().manual_seed(3)
    gs = torch.tensor([3, 0, 4, 2])
    lhs, rhs = _rand(9, 12, dtype=dtype, gen=gen), _rand(4, 12, 10, dtype=dtype, gen=gen)
    gout = _rand(9, 10, dtype=dtype, gen=gen)
    lr, rr = lhs.clone().requires_grad_(), rhs.clone().requires_grad_()
    (_ref_ragged_dot(lr, rr, gs) * gout).sum().backward()
    lt, rt = lhs.to("tpu").requires_grad_(), rhs.to("tpu").requires_grad_()
    with OpLog() as log:
        (torch_tpu.moe.ragged_dot(lt, rt, gs.to("tpu")) * gout.to("tpu")).sum().backward()
    assert "tpu.ragged_dot_rhs_grad.default" in log.ops
    torch.testing.assert_close(lt.grad.cpu(), lr.grad, **TOL[dtype])
    torch.testing.assert_close(rt.grad.cpu(), rr.grad, **TOL[dtype])  # empty group 1: zeros


def test_ragged_dot_meta_and_compile():
    lhs = torch.empty(6, 8, device="meta")
    out = torch.ops.tpu.ragged_dot(lhs, torch.empty(3, 8, 5, device="meta"), torch.empty(3, dtype=torch.long,
                                                                                          device="meta"))
    assert out.shape == (6, 5) and out.device.type == "meta"

    def f(a, b, g):
        return torch.ops.tpu.ragged_dot(a, b, g) * 2

    gen = torch.Generator().manual_seed(4)
    a, b, g = _rand(6, 8, dtype=torch.float32, gen=gen), _rand(3, 8, 5, dtype=torch.float32, gen=gen), torch.tensor(
        [1, 2, 3])
    got = torch.compile(f, backend="tpu", fullgraph=True)(a.to("tpu"), b.to("tpu"), g.to("tpu"))
    torch.testing.assert_close(got.cpu(), _ref_ragged_dot(a, b, g) * 2, **TOL[torch.float32])


def _dev(*ts):
    return [t.to("tpu") for t in ts]


@pytest.mark.parametrize("lhs, rhs, sizes, match", [
    ((6, 8), (3, 9, 5), [1, 2, 3], "differ in K"),
    ((6, 8), (3, 8, 5), [1, 2, 3, 0], "group_sizes has 4 entries but rhs has 3 groups"),
    ((6, 8, 1), (3, 8, 5), [1, 2, 3], "lhs must be 2-D"),
    ((6, 8), (8, 5), [6], "rhs must be 3-D"),
])
def test_ragged_dot_bad_shapes_raise(lhs, rhs, sizes, match):
    with pytest.raises(RuntimeError, match=f"tpu::ragged_dot: .*{match}"):
        torch.ops.tpu.ragged_dot(*_dev(torch.randn(*lhs), torch.randn(*rhs), torch.tensor(sizes)))


def test_ragged_dot_bad_dtypes_raise():
    a, b, g = _dev(torch.randn(6, 8), torch.randn(3, 8, 5), torch.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match="tpu::ragged_dot: group_sizes must be int32 or int64, got Float"):
        torch.ops.tpu.ragged_dot(a, b, g.float())
    with pytest.raises(RuntimeError, match="tpu::ragged_dot: lhs and rhs must have the same dtype"):
        torch.ops.tpu.ragged_dot(a, b.to(torch.bfloat16), g)
    with pytest.raises(RuntimeError, match="tpu::ragged_dot: lhs dtype Long is not supported"):
        torch.ops.tpu.ragged_dot(a.long(), b.long(), g)


@pytest.mark.parametrize("sizes, match", [
    ([1, 2, 2], r"group_sizes must sum to the rows of lhs \(6\), got a sum of 5"),
    ([4, 2, 3], r"group_sizes must sum to the rows of lhs \(6\), got a larger sum"),
    ([4, -1, 3], r"group_sizes\[1\] = -1 is negative"),
])
def test_ragged_dot_bad_group_sizes_raise_at_sync(sizes, match):
    """group_sizes is read on the device queue (no host sync), so the error
    surfaces at the next synchronisation, naming the op."""
    a, b, g = _dev(torch.randn(6, 8), torch.randn(3, 8, 5), torch.tensor(sizes))
    out = torch.ops.tpu.ragged_dot(a, b, g)
    with pytest.raises(ValueError, match=f"tpu::ragged_dot: {match}"):
        out.cpu()


# ---- aten::_grouped_mm -------------------------------------------------------------

def _offs(sizes):
    return torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grouped_mm_2d_3d_native_and_matches_cpu(dtype):
    gen = torch.Generator().manual_seed(5)
    sizes = [3, 0, 8, 5]
    a = _rand(20, 32, dtype=dtype, gen=gen)  # rows past offs[-1] = 16 are ignored
    w = _rand(4, 24, 32, dtype=dtype, gen=gen)  # nn.Linear layout, passed transposed (as Transformers does)
    offs = _offs(sizes)
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    at, wt, ot = _dev(a, w, offs)
    wt = wt.transpose(-2, -1)
    with OpLog() as log:
        out = torch._grouped_mm(at, wt, offs=ot)
    assert log.ops == ["aten._grouped_mm.default"]  # no per-group mm, no offs.cpu()
    torch.testing.assert_close(out.cpu()[:16], ref[:16], **TOL[dtype])
    assert (out.cpu()[16:] == 0).all()  # the kernel zeroes unowned rows (CPU leaves them undefined)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grouped_mm_other_layouts_match_cpu(dtype):
    gen = torch.Generator().manual_seed(6)
    offs = _offs([8, 0, 16, 8])
    # 3-D x 2-D: groups of output columns
    a, b = _rand(4, 16, 24, dtype=dtype, gen=gen), _rand(40, 24, dtype=dtype, gen=gen).t()
    ref = torch._grouped_mm(a, b, offs=offs)
    out = torch._grouped_mm(*_dev(a, b), offs=offs.to("tpu")).cpu()
    torch.testing.assert_close(out[:, :32], ref[:, :32], **TOL[dtype])
    # 2-D x 2-D: groups of K (an empty group gives zeros)
    a, b = _rand(32, 24, dtype=dtype, gen=gen).t(), _rand(32, 16, dtype=dtype, gen=gen)
    torch.testing.assert_close(torch._grouped_mm(*_dev(a, b), offs=offs.to("tpu")).cpu(),
                               torch._grouped_mm(a, b, offs=offs), **TOL[dtype])
    # 3-D x 3-D: batched
    a, b = _rand(3, 16, 24, dtype=dtype, gen=gen), _rand(3, 24, 8, dtype=dtype, gen=gen)
    torch.testing.assert_close(torch._grouped_mm(*_dev(a, b)).cpu(), torch._grouped_mm(a, b), **TOL[dtype])


def test_grouped_mm_backward_matches_cpu():
    gen = torch.Generator().manual_seed(7)
    offs = _offs([3, 0, 9, 4])
    x, w = _rand(16, 32, dtype=torch.float32, gen=gen), _rand(4, 24, 32, dtype=torch.float32, gen=gen)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch._grouped_mm(xr, wr.transpose(-2, -1), offs=offs).square().sum().backward()
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    torch._grouped_mm(xt, wt.transpose(-2, -1), offs=offs.to("tpu")).square().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, **TOL[torch.float32])
    torch.testing.assert_close(wt.grad.cpu(), wr.grad, **TOL[torch.float32])


def test_grouped_mm_bad_offs_raise_at_sync():
    a, w = _dev(torch.randn(8, 16), torch.randn(2, 16, 8))
    out = torch._grouped_mm(a, w, offs=torch.tensor([5, 3], dtype=torch.int32, device="tpu"))
    with pytest.raises(ValueError, match="_grouped_mm: offs must be non-decreasing"):
        out.cpu()
    out = torch._grouped_mm(a, w, offs=torch.tensor([5, 9], dtype=torch.int32, device="tpu"))
    with pytest.raises(ValueError, match=r"_grouped_mm: offs must be .* at most 8"):
        out.cpu()


# ---- Transformers' MoE layers --------------------------------------------------------

def _moe_models():
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return {
        "qwen3_moe": lambda: Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, head_dim=16, num_experts=8,
                                                                num_experts_per_tok=2, moe_intermediate_size=32,
                                                                intermediate_size=128, decoder_sparse_step=1)),
        "mixtral": lambda: MixtralForCausalLM(MixtralConfig(**common, intermediate_size=48, num_local_experts=8,
                                                            num_experts_per_tok=2)),
    }


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral"])
def test_transformers_moe_uses_native_grouped_mm(name):
    torch.manual_seed(0)
    cpu = _moe_models()[name]().eval()
    assert cpu.config._experts_implementation == "grouped_mm"  # Transformers' default: no user change
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.randint(3, 128, (3, 9), generator=torch.Generator().manual_seed(1))
    torch_tpu.reset_fallback_report()
    ids_t = ids.to("tpu")
    with torch.no_grad(), OpLog() as log:
        got = dev(input_ids=ids_t).logits
    with torch.no_grad():
        ref = cpu(input_ids=ids).logits
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-4)
    assert log.ops.count("aten._grouped_mm.default") == 2 * 2  # up and down, 2 layers
    assert "aten._local_scalar_dense.default" not in log.ops  # no .item() / .tolist(): no queue drain
    with torch.no_grad():
        out_ref = cpu.generate(input_ids=ids, max_new_tokens=6, do_sample=False, eos_token_id=None)
        out = dev.generate(input_ids=ids.to("tpu"), max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert torch.equal(out.cpu(), out_ref)
    assert torch_tpu.fallback_report() == {}
