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


# ---- tpu::gather_bmm and lazy gathers (Transformers' batched_mm experts) ------------------

def _ref_gather_bmm(a, b, ids, gathered):
    """float32 CPU reference of bmm(a[ids], b) / bmm(a, b[ids]), rounded once."""
    a32, b32 = a.float(), b.float()
    out = torch.bmm(a32[ids], b32) if gathered == 0 else torch.bmm(a32, b32[ids])
    return out.to(a.dtype)


def _queue_names(fn):
    """(fn's result, names of the works the device queue ran while fn ran)."""
    torch.tpu.synchronize()
    torch_tpu._C.trace_start(0)
    try:
        out = fn()
        torch.tpu.synchronize()
    finally:
        torch_tpu._C.trace_stop()
    events, dropped = torch_tpu._C.trace_take()
    assert dropped == 0
    return out, [e[0] for e in events if e[1] == 0]


GB_CASES = {
    # name: (E, M, K, N, ids): out[s] = a[ids[s]] @ b[s] with a [E, M, K], b [S, K, N]
    "decode": (8, 48, 64, 1, [3, 1, 3, 7, 0, 3, 5, 1]),
    "many-per-expert": (3, 40, 36, 1, [1] * 19 + [0, 2, 1]),  # more pairs than one piece
    "columns": (5, 24, 33, 3, [4, 4, 0, 2]),
    "negative-ids": (6, 16, 20, 2, [-1, 0, -6, 5]),
    "long-K": (4, 20, 2100, 1, [2, 0, 2]),  # more than one K chunk
}


@pytest.mark.parametrize("gathered", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", GB_CASES)
def test_gather_bmm_matches_cpu(case, dtype, gathered):
    E, M, K, N, ids = GB_CASES[case]
    gen = torch.Generator().manual_seed(8)
    ids = torch.tensor(ids)
    S = ids.numel()
    if gathered == 0:
        a, b = _rand(E, M, K, dtype=dtype, gen=gen), _rand(S, K, N, dtype=dtype, gen=gen)
    else:  # a [S, N, K] @ b[ids] with b [E, K, M]
        a, b = _rand(S, N, K, dtype=dtype, gen=gen), _rand(E, K, M, dtype=dtype, gen=gen)
    ref = _ref_gather_bmm(a, b, ids, gathered)
    out = torch.ops.tpu.gather_bmm(*_dev(a, b, ids), gathered)
    assert out.shape == ref.shape and out.dtype == dtype
    torch.testing.assert_close(out.cpu(), ref, **TOL[dtype])
    # the weight in nn.Linear layout seen transposed (Transformers' is_transposed=False down/up layout
    # for gathered=1), and int32 ids
    if gathered == 0:
        wt = a.transpose(1, 2).contiguous().to("tpu").transpose(1, 2)
        out = torch.ops.tpu.gather_bmm(wt, b.to("tpu"), ids.int().to("tpu"), 0)
    else:
        wt = b.transpose(1, 2).contiguous().to("tpu").transpose(1, 2)
        out = torch.ops.tpu.gather_bmm(a.to("tpu"), wt, ids.int().to("tpu"), 1)
    torch.testing.assert_close(out.cpu(), ref, **TOL[dtype])


@pytest.mark.host_driver
def test_gather_bmm_generic_isa_matches(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_KERNEL_ISA", "generic")
    gen = torch.Generator().manual_seed(9)
    a, b, ids = _rand(5, 30, 40, dtype=torch.bfloat16, gen=gen), _rand(6, 40, 2, dtype=torch.bfloat16, gen=gen), \
        torch.tensor([4, 0, 4, 4, 1, 2])
    out = torch.ops.tpu.gather_bmm(*_dev(a, b, ids), 0)
    torch.testing.assert_close(out.cpu(), _ref_gather_bmm(a, b, ids, 0), **TOL[torch.bfloat16])


def test_gather_bmm_bad_arguments_raise():
    a, b, ids = _dev(torch.randn(4, 6, 8), torch.randn(3, 8, 1), torch.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match="tpu::gather_bmm: sizes do not match"):
        torch.ops.tpu.gather_bmm(a, b[:, :5], ids, 0)
    with pytest.raises(RuntimeError, match="tpu::gather_bmm: ids must be int32 or int64, got Float"):
        torch.ops.tpu.gather_bmm(a, b, ids.float(), 0)
    with pytest.raises(RuntimeError, match="tpu::gather_bmm: gathered must be 0"):
        torch.ops.tpu.gather_bmm(a, b, ids, 2)
    out = torch.ops.tpu.gather_bmm(a, b, torch.tensor([0, 4, 1], device="tpu"), 0)
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        out.cpu()


def _moe_weights(E=6, R=40, C=24, S=10, dtype=torch.float32, seed=10):
    gen = torch.Generator().manual_seed(seed)
    w = _rand(E, R, C, dtype=dtype, gen=gen)
    ids = torch.randint(0, E, (S,), generator=gen)
    x = _rand(S, C, dtype=dtype, gen=gen)
    return w, ids, x


@pytest.mark.host_driver
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_lazy_gather_then_bmm_reads_weights_in_place(dtype):
    """weight[ids] takes no device memory and bmm with it runs tpu::gather_bmm:
    the gathered copy never exists. Both layouts Transformers uses."""
    w, ids, x = _moe_weights(dtype=dtype)
    wt, idt, xt = _dev(w, ids, x)
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    sel = wt[idt]
    assert sel.shape == (10, 40, 24) and sel.stride() == w[ids].stride()
    assert torch.tpu.memory_allocated() - before < 10 * 40 * 24 * w.element_size() // 4  # the ids copy only

    def run():
        y1 = torch.bmm(sel, xt.unsqueeze(-1)).squeeze(-1)  # is_transposed=False: weight first
        y2 = torch.bmm(torch.randn(10, 1, 40, dtype=dtype).to("tpu"), sel).squeeze(1)  # weight second
        y3 = torch.bmm(xt.unsqueeze(1), sel.transpose(1, 2)).squeeze(1)  # transposed view
        return y1, y2, y3

    torch.manual_seed(0)
    (y1, y2, y3), names = _queue_names(run)
    assert names.count("tpu::gather_bmm") == 3 and "aten::index.Tensor" not in names and "aten::bmm" not in names
    ref = w[ids]
    torch.manual_seed(0)
    r1 = torch.bmm(ref.float(), x.float().unsqueeze(-1)).squeeze(-1)
    r2 = torch.bmm(torch.randn(10, 1, 40, dtype=dtype).float(), ref.float()).squeeze(1)
    r3 = torch.bmm(x.float().unsqueeze(1), ref.float().transpose(1, 2)).squeeze(1)
    for got, want in ((y1, r1), (y2, r2), (y3, r3)):
        torch.testing.assert_close(got.cpu(), want.to(dtype), **TOL[dtype])
    assert torch.tpu.memory_allocated() - before < 10 * 40 * 24 * w.element_size()


@pytest.mark.host_driver
def test_lazy_gather_materialises_for_every_other_use():
    w, ids, x = _moe_weights()
    ref = w[ids]
    wt, idt = _dev(w, ids)
    torch.testing.assert_close(wt[idt].cpu(), ref, rtol=0, atol=0)  # a copy to the host
    torch.testing.assert_close((wt[idt] * 2).cpu(), ref * 2, rtol=0, atol=0)  # any other kernel
    sel = wt[idt]
    sel.add_(1)  # written in place
    torch.testing.assert_close(sel.cpu(), ref + 1, rtol=0, atol=0)
    sel = wt[idt]
    torch.testing.assert_close(sel[2:5].sum(0).cpu(), ref[2:5].sum(0))  # a view the product cannot use
    got = torch.bmm(wt[idt][1:], x[1:].unsqueeze(-1).to("tpu"))  # bmm with a view it cannot use: materialised
    torch.testing.assert_close(got.cpu(), torch.bmm(ref[1:], x[1:].unsqueeze(-1)))
    assert wt[idt][3, 4, 5].item() == ref[3, 4, 5].item()
    sel = wt[idt]
    assert sel.data_ptr() != 0  # Python's data_ptr() materialises
    torch.testing.assert_close(sel.cpu(), ref, rtol=0, atol=0)
    sel = wt[idt]
    sel.resize_(20, 40, 24)  # growing keeps the gathered values
    torch.testing.assert_close(sel[:10].cpu(), ref, rtol=0, atol=0)


@pytest.mark.host_driver
def test_lazy_gather_keeps_values_of_index_time():
    """Writes to the weight or the ids after weight[ids] do not reach the gathered tensor."""
    w, ids, x = _moe_weights()
    ref = w[ids]
    wt, idt = _dev(w, ids)
    a, b = wt[idt], wt[idt]  # two lazy gathers of one weight
    c = wt[idt].transpose(1, 2)
    idt.fill_(0)  # the ids were copied
    wt.mul_(3)  # the weight's gathers become copies first
    torch.testing.assert_close(a.cpu(), ref, rtol=0, atol=0)
    torch.testing.assert_close(torch.bmm(b, x.unsqueeze(-1).to("tpu")).cpu(), torch.bmm(ref, x.unsqueeze(-1)))
    torch.testing.assert_close(c.cpu(), ref.transpose(1, 2), rtol=0, atol=0)
    wt.copy_(torch.zeros_like(w))
    d = wt[torch.tensor([1, 1], device="tpu")]
    wt.copy_(w)
    assert (d.cpu() == 0).all()
    e = wt[ids.to("tpu")]
    del wt  # the gather keeps the weight alive
    torch.testing.assert_close(e.cpu(), ref, rtol=0, atol=0)


@pytest.mark.host_driver
def test_lazy_gather_out_of_range_raises_when_used():
    wt = torch.randn(4, 6, 8, device="tpu")
    sel = wt[torch.tensor([0, 4], device="tpu")]
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        sel.cpu()
    sel = wt[torch.tensor([0, -5], device="tpu")]
    with pytest.raises(IndexError, match="index -5 is out of bounds"):
        torch.bmm(sel, torch.randn(2, 8, 1, device="tpu")).cpu()


@pytest.mark.host_driver
def test_lazy_gather_can_be_turned_off(monkeypatch):
    w, ids, x = _moe_weights()
    wt, idt = _dev(w, ids)
    monkeypatch.setenv("TORCH_TPU_LAZY_GATHER", "0")
    _, names = _queue_names(lambda: torch.bmm(wt[idt], x.unsqueeze(-1).to("tpu")))
    assert "aten::index.Tensor" in names and "tpu::gather_bmm" not in names
    monkeypatch.setenv("TORCH_TPU_LAZY_GATHER", "yes")
    with pytest.raises(ValueError, match="TORCH_TPU_LAZY_GATHER must be 0 or 1, got 'yes'"):
        wt[idt]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_batched_mm_pattern_backward_matches_cpu(mode):
    """Training through the batched_mm pattern: bmm's backward reads the lazy
    gather transposed (tpu::gather_bmm again), index's backward scatters;
    compiled, the forward's bmm becomes tpu::gather_bmm and the gather is kept
    for the backward."""
    w, ids, x = _moe_weights(S=7)
    gy = torch.randn(7, 40)

    def f(w_, x_, ids_, gy_):
        return (torch.bmm(w_[ids_], x_.unsqueeze(-1)).squeeze(-1) * gy_).sum()

    wr, xr = w.clone().requires_grad_(), x.clone().requires_grad_()
    f(wr, xr, ids, gy).backward()
    wt, xt = w.to("tpu").requires_grad_(), x.to("tpu").requires_grad_()
    (f if mode == "eager" else torch.compile(f, backend="tpu"))(wt, xt, ids.to("tpu"), gy.to("tpu")).backward()
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, **TOL[torch.float32])
    torch.testing.assert_close(wt.grad.cpu(), wr.grad, **TOL[torch.float32])


def _generate_batched_mm(name, batch, new_tokens=5):
    torch.manual_seed(0)
    cpu = _moe_models()[name]().eval()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.randint(3, 128, (batch, 7), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        ref = cpu.generate(input_ids=ids, **kw)
        torch_tpu.reset_fallback_report()
        out, names = _queue_names(lambda: dev.generate(input_ids=ids.to("tpu"), **kw))
    return ref, out.cpu(), names, cpu.config


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral"])
def test_generate_decodes_with_batched_mm_without_gathering(name):
    """generate() switches the experts to batched_mm for decoding on tpu (as on
    every accelerator): its weight[expert_ids] gathers stay lazy and each bmm
    runs tpu::gather_bmm. Greedy tokens equal the CPU's (which keeps grouped_mm)."""
    ref, out, names, cfg = _generate_batched_mm(name, batch=4)
    assert torch.equal(out, ref)
    assert torch_tpu.fallback_report() == {}
    if torch_tpu._C.selected_driver() == "host":
        # 4 decode steps x 2 layers x (up, down); the prefill runs grouped_mm
        assert names.count("tpu::gather_bmm") == 4 * cfg.num_hidden_layers * 2
        assert names.count("aten::_grouped_mm") == cfg.num_hidden_layers * 2
        # the prefill's grouped_mm indexes activations 3 times a layer; the decode steps gather nothing
        assert names.count("aten::index.Tensor") == 3 * cfg.num_hidden_layers and "aten::bmm" not in names


@pytest.mark.host_driver
def test_generate_batched_mm_peak_memory_has_no_gathered_weights():
    """The decode steps' peak device memory stays below what one layer's gathered
    gate_up weights would take (batch 16, top-2: 32 x [2I, H] per step)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=128, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=64, num_experts=16, num_experts_per_tok=2,
                         moe_intermediate_size=256, intermediate_size=512, max_position_embeddings=64)
    torch.manual_seed(0)
    dev = Qwen3MoeForCausalLM(cfg).eval().to("tpu")
    ids = torch.randint(3, 128, (16, 4), generator=torch.Generator().manual_seed(3)).to("tpu")
    gathered = 16 * 2 * (2 * 256 * 256) * 4  # bytes of one gate_up gather, float32
    with torch.no_grad():
        dev.generate(input_ids=ids, max_new_tokens=1, do_sample=False)  # warm-up
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        dev.generate(input_ids=ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, eos_token_id=None)
        torch.tpu.synchronize()
    assert torch.tpu.max_memory_allocated() - base < gathered // 2


@pytest.mark.slow
@pytest.mark.host_driver
def test_generate_qwen3_30b_a3b_layer_shapes_batch_64_fits_the_test_budget():
    """Qwen3-30B-A3B's expert shapes (hidden 2048, expert width 768, top-8; 32 of its
    128 experts, float32) at batch 64 through generate(): the decode steps' gathers
    would take 9.6 GB per layer and step, the test budget is 2 GiB per chip
    (conftest); the greedy tokens equal the CPU's."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=4,
                         head_dim=128, num_experts=32, num_experts_per_tok=8, moe_intermediate_size=768,
                         intermediate_size=6144, vocab_size=1024, tie_word_embeddings=True, norm_topk_prob=True)
    torch.manual_seed(0)
    cpu = Qwen3MoeForCausalLM(cfg).eval()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.randint(3, 1024, (64, 8), generator=torch.Generator().manual_seed(4))
    kw = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False, eos_token_id=None, pad_token_id=0)
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    with torch.no_grad():
        out, names = _queue_names(lambda: dev.generate(input_ids=ids.to("tpu"), **kw))
        ref = cpu.generate(input_ids=ids, **kw)
    assert torch.equal(out.cpu(), ref)
    assert names.count("tpu::gather_bmm") == 2 * 2  # 2 decode steps x (up, down)
    assert torch.tpu.max_memory_allocated() - base < 256 * 2**20


@pytest.mark.host_driver
@pytest.mark.parametrize("variant", ["weight-first", "weight-second", "transposed"])
def test_compiled_gather_then_bmm_reads_weights_in_place(variant):
    """torch.compile(backend="tpu"): bmm of index(w, [ids]) becomes tpu::gather_bmm in
    the graph, so the planned arena holds no gathered copy."""
    from torch_tpu._dynamo_backend import compile_stats

    fns = {"weight-first": lambda w, ids, x, z: torch.bmm(w[ids], x),
           "weight-second": lambda w, ids, x, z: torch.bmm(z, w[ids]),
           "transposed": lambda w, ids, x, z: torch.bmm(x.transpose(1, 2), w[ids].transpose(1, 2))}
    fn = fns[variant]
    gen = torch.Generator().manual_seed(11)
    w, ids = torch.randn(16, 64, 48, generator=gen), torch.randint(0, 16, (40,), generator=gen)
    x, z = torch.randn(40, 48, 1, generator=gen), torch.randn(40, 2, 64, generator=gen)
    args = _dev(w, ids, x, z)
    before = compile_stats()["gather_bmm_rewrites"]
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    got = torch.compile(fn, backend="tpu", fullgraph=True, dynamic=False)(*args)
    torch.tpu.synchronize()
    assert compile_stats()["gather_bmm_rewrites"] == before + 1
    assert torch.tpu.max_memory_allocated() - base < 40 * 64 * 48 * 4  # less than the gathered copy
    torch.testing.assert_close(got.cpu(), fn(w, ids, x, z), **TOL[torch.float32])


@pytest.mark.slow
def test_generate_static_cache_compiled_batched_mm_matches_cpu():
    """generate() with a static cache compiles the decode step (backend "tpu"): its
    batched_mm experts become tpu::gather_bmm in the graph; tokens equal the CPU's."""
    from torch_tpu._dynamo_backend import compile_stats

    torch.manual_seed(0)
    cpu = _moe_models()["qwen3_moe"]().eval()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.randint(3, 128, (4, 7), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, eos_token_id=None, pad_token_id=0,
              cache_implementation="static")
    before = compile_stats()["gather_bmm_rewrites"]
    with torch.no_grad():
        ref = cpu.generate(input_ids=ids, **kw)
        out = dev.generate(input_ids=ids.to("tpu"), **kw)
    assert torch.equal(out.cpu(), ref)
    if torch_tpu._C.selected_driver() == "host":
        assert compile_stats()["gather_bmm_rewrites"] - before == 2 * 2  # 2 layers x (up, down)
