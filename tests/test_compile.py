"""torch.compile(backend="tpu"): graph capture, caching per shape, lowering
to the C graph compiler (runtime/graph: fusion, arena, one submission per
graph), and compiled == eager (forward, a training step, Transformers models,
a Diffusers-style block)."""
import pytest
import torch

from torch_tpu import _graph
from torch_tpu._dynamo_backend import compile_stats


def test_backend_is_registered():
    import torch._dynamo

    assert "tpu" in torch._dynamo.list_backends(exclude_tags=())


def test_compile_once_hit_same_shape_recompile_new_shape(no_fallback):
    torch._dynamo.reset()

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1)

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    w = torch.randn(16, 16, device="tpu")
    x = torch.randn(4, 16, device="tpu")
    before = compile_stats()["graphs"]
    out = cf(x, w)
    assert compile_stats()["graphs"] == before + 1
    torch.testing.assert_close(out.cpu(), f(x, w).cpu())
    cf(torch.randn(4, 16, device="tpu"), w)  # same shapes: cache hit
    assert compile_stats()["graphs"] == before + 1
    cf(torch.randn(8, 16, device="tpu"), w)  # new shape: new graph
    assert compile_stats()["graphs"] == before + 2


def test_compiled_training_step_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    ref.to("tpu")
    model.to("tpu")
    cmodel = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8, device="tpu")
    y = torch.randn(5, 4, device="tpu")
    for _ in range(2):
        for m, o in ((ref, opt_ref), (cmodel, opt)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-5, atol=1e-5)


def test_stats_hits_misses_and_graphs_held(no_fallback):
    torch._dynamo.reset()

    def f(x):
        return (x * 2).sin() + 1

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(32, 8, device="tpu")
    s0 = compile_stats()
    cf(x)
    cf(x)
    cf(x)
    s1 = compile_stats()
    assert s1["misses"] == s0["misses"] + 1
    assert s1["hits"] == s0["hits"] + 2
    assert s1["graphs_held"] >= 1
    assert s1["compile_seconds"] > s0["compile_seconds"]


def test_pointwise_chain_is_fused_and_exact(no_fallback):
    """A chain of pointwise ops around a GEMM becomes fused tile groups in C,
    with every intermediate in tile scratch; results equal eager."""
    torch._dynamo.reset()

    def f(x, w, b):
        h = x @ w
        y = torch.relu(h + b) * 0.5 - torch.tanh(h)
        return torch.exp(-y * y) / (1 + y.abs())

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(300, 64, device="tpu")
    w = torch.randn(64, 96, device="tpu")
    b = torch.randn(96, device="tpu")
    s0 = compile_stats()
    out = cf(x, w, b)
    s1 = compile_stats()
    assert s1["segments"] == s0["segments"] + 1 and s1["eager_nodes"] == s0["eager_nodes"]
    assert s1["fused_groups"] > s0["fused_groups"]
    assert s1["fused_nodes"] - s0["fused_nodes"] >= 6
    torch.testing.assert_close(out.cpu(), f(x.cpu(), w.cpu(), b.cpu()))


def test_views_and_multiple_outputs(no_fallback):
    """Outputs that are views of graph intermediates and of inputs, a
    transposed result, split outputs and an unused output."""
    torch._dynamo.reset()

    def f(x):
        y = x.exp()
        a, b = y.split([3, 5], dim=1)
        return a.t(), b * 2, x[1:, ::2], y.sum(0, keepdim=True)

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(6, 8, device="tpu")
    for got, want in zip(cf(x), f(x.cpu())):
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)


def test_unlowerable_nodes_run_eagerly_between_segments():
    """nonzero has a data-dependent size: it runs eagerly between two C
    segments and the result is still right."""
    torch._dynamo.reset()
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    try:
        def f(x):
            idx = (x > 0).nonzero()
            return (x * 3).sum() + idx.sum()

        cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
        x = torch.randn(7, 5, device="tpu")
        torch.testing.assert_close(cf(x).cpu(), f(x.cpu()))
        assert "aten::nonzero" in compile_stats()["eager_ops"]
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False


def test_input_update_is_done_in_place(no_fallback):
    """A static-cache style update of a graph input (index_put_) is written in
    place, not copied and copied back."""
    torch._dynamo.reset()

    def f(cache, pos, v):
        cache.index_put_((pos,), v)
        return cache.sum(0) * 2

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    c = torch.zeros(8, 4, device="tpu")
    ref = torch.zeros(8, 4)
    s0 = compile_stats()
    for i in range(3):
        v = torch.full((1, 4), float(i + 1))
        p = torch.tensor([i])
        with torch.no_grad():
            out = cf(c, p.to("tpu"), v.to("tpu"))
        want = f(ref, p, v)
        torch.testing.assert_close(out.cpu(), want)
    torch.testing.assert_close(c.cpu(), ref)
    assert compile_stats()["reinplaced"] == s0["reinplaced"] + 1


def test_graph_input_with_other_strides_is_restrided():
    g = _graph._bridge.Graph(0)
    v = g.input(1, [2, 3], [3, 1])
    (y,) = g.node("aten::mul.Scalar", 1, [(_graph.K_TENSOR, v), (_graph.K_DOUBLE, 2.0)], [(1, [2, 3], [3, 1])], [-1])
    g.output(y)
    g.compile()
    x = torch.arange(6.0).reshape(3, 2).t()  # [2, 3] with strides [1, 2]
    (out,) = g.run([x.to("tpu").t().contiguous().t()])
    torch.testing.assert_close(out.cpu(), x * 2)
    assert g.stats()["input_restrides"] == 1
    with pytest.raises(ValueError, match="compiled for float32 sizes \\[2, 3\\]"):
        g.run([torch.zeros(3, 3, device="tpu")])
    with pytest.raises(ValueError, match="expected 1 inputs"):
        g.run([])
    with pytest.raises(RuntimeError, match="already compiled"):
        g.input(1, [1], [1])
    g2 = _graph._bridge.Graph(0)
    with pytest.raises(NotImplementedError, match="no kernel named aten::nope"):
        g2.node("aten::nope", 0, [], [(1, [1], [1])], [-1])
    with pytest.raises(ValueError, match="no value 5"):
        g2.node("aten::neg", 1, [(_graph.K_TENSOR, 5)], [(1, [1], [1])], [-1])


def _tiny_llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, **kw)
    return LlamaForCausalLM(cfg).eval()


def test_compiled_llama_forward_equals_eager(no_fallback):
    torch._dynamo.reset()
    m = _tiny_llama().to("tpu")
    ids = torch.randint(0, 256, (2, 12), device="tpu")
    s0 = compile_stats()
    with torch.no_grad():
        ref = m(ids).logits
        cm = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)
        out = cm(ids).logits
        out2 = cm(ids).logits
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out2.cpu(), ref.cpu(), rtol=1e-4, atol=1e-4)
    s1 = compile_stats()
    assert s1["c_nodes"] - s0["c_nodes"] > 50
    assert s1["segments"] - s0["segments"] <= 2  # whole graph in C (bar constant set-up)


def test_compiled_static_cache_generate_equals_eager(no_fallback):
    """Transformers' own compile path: generate() with cache_implementation="static"
    compiles the forward with backend "tpu" on this device."""
    torch._dynamo.reset()
    m = _tiny_llama().to("tpu")
    ids = torch.randint(0, 256, (1, 6), device="tpu")
    eager = m.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static",
                       disable_compile=True)
    s0 = compile_stats()
    got = m.generate(ids, max_new_tokens=8, do_sample=False, cache_implementation="static")
    s1 = compile_stats()
    assert s1["misses"] > s0["misses"]
    assert s1["reinplaced"] > s0["reinplaced"]  # the cache update is written in place
    assert s1["gqa_rewrites"] > s0["gqa_rewrites"]  # SDPA reads the 2 kv heads, no repeat_kv copy
    assert got.tolist() == eager.tolist()


class _Block(torch.nn.Module):
    """A Diffusers-style transformer block over image patches."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.ff = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(approximate="tanh"),
                                      torch.nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, C))
        return x + self.ff(self.norm2(x))


def test_diffusers_style_block_reuses_graph_per_image_size(no_fallback):
    torch._dynamo.reset()
    torch.manual_seed(0)
    blk = _Block().eval()
    tb = _Block().eval()
    tb.load_state_dict(blk.state_dict())
    tb.to("tpu").compile(backend="tpu", fullgraph=True, dynamic=False)
    s0 = compile_stats()
    with torch.no_grad():
        for n in (16, 16, 16, 64, 64):  # two "image sizes" (patch counts)
            x = torch.randn(2, n, 32)
            torch.testing.assert_close(tb(x.to("tpu")).cpu(), blk(x), rtol=1e-4, atol=1e-4)
    s1 = compile_stats()
    assert s1["misses"] - s0["misses"] == 2
    assert s1["hits"] - s0["hits"] == 3


def test_compiled_training_step_llama_matches_eager():
    """forward + backward + AdamW step, compiled, equals eager on tpu."""
    torch._dynamo.reset()
    ref = _tiny_llama().to("tpu").train()
    model = _tiny_llama().to("tpu").train()
    cmodel = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 256, (2, 10), device="tpu")
    s0 = compile_stats()
    for _ in range(3):
        losses = []
        for m, o in ((ref, opt_ref), (cmodel, opt)):
            o.zero_grad()
            loss = m(ids, labels=ids).loss
            loss.backward()
            o.step()
            losses.append(loss.detach().cpu())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-4)
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=1e-4, atol=1e-4)
    # forward and backward graphs (SDPA backward included) run entirely in C
    assert compile_stats()["eager_nodes"] == s0["eager_nodes"], compile_stats()["eager_ops"]


@pytest.mark.parametrize("rows", [1, 300])
def test_rmsnorm_reduction_fuses_with_its_pointwise_chain(rows, no_fallback):
    """Llama's RMSNorm after decomposition: pow, mean(keepdim), add, rsqrt, mul,
    mul: one fused group (the reduced last dim is never split across tiles)."""
    torch._dynamo.reset()

    def rms(x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + 1e-6))

    cf = torch.compile(rms, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(1, rows, 576, device="tpu")
    w = torch.randn(576, device="tpu")
    s0 = compile_stats()
    out = cf(x, w)
    s1 = compile_stats()
    assert s1["fused_groups"] - s0["fused_groups"] == 1
    assert s1["fused_nodes"] - s0["fused_nodes"] == 6
    assert s1["arena_bytes"] == s0["arena_bytes"]  # every intermediate lives in tiles
    torch.testing.assert_close(out.cpu(), rms(x.cpu(), w.cpu()))


def test_lowered_allocation_and_scatter_ops(no_fallback):
    """slice_scatter, constant_pad_nd, full_like, empty_like run in C (no eager
    nodes) and equal eager."""
    torch._dynamo.reset()

    def f(x, y):
        a = x.clone()
        a[:, 1:7:2] = y * 2  # slice_scatter
        b = torch.nn.functional.pad(x, (1, 2, 0, 3), value=0.5)  # constant_pad_nd
        c = torch.full_like(x, 3.0) + torch.empty_like(x).fill_(1.0)
        return a, b, c

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(4, 9, device="tpu")
    y = torch.randn(4, 3, device="tpu")
    s0 = compile_stats()
    got = cf(x, y)
    s1 = compile_stats()
    assert s1["eager_nodes"] == s0["eager_nodes"], s1["eager_ops"]
    for g_, w in zip(got, f(x.cpu(), y.cpu())):
        torch.testing.assert_close(g_.cpu(), w)


@pytest.mark.parametrize("rows", [1, 40, 600])
def test_gemm_epilogue_is_fused(rows, no_fallback):
    """silu(x @ w + b) + r: with few rows the matrix multiply heads one fused
    group that runs bias add, activation and residual add on each column tile
    of the product, and nothing reaches the arena; with many rows (600 >= 128
    per pool thread) the product is computed whole and the epilogue is one
    fused group after it (tiling rows would pack w again per tile)."""
    torch._dynamo.reset()

    def f(x, w, b, r):
        return torch.nn.functional.silu(x @ w + b) + r

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    x = torch.randn(rows, 64, device="tpu")
    w = torch.randn(64, 96, device="tpu")
    b = torch.randn(96, device="tpu")
    r = torch.randn(rows, 96, device="tpu")
    s0 = compile_stats()
    out = cf(x, w, b, r)
    s1 = compile_stats()
    many = rows >= 128 * torch.tpu.get_device_properties(0).multi_processor_count  # kernel threads
    assert s1["gemm_epilogues"] - s0["gemm_epilogues"] == (0 if many else 1)
    assert s1["fused_groups"] - s0["fused_groups"] == 1
    if not many:
        assert s1["arena_bytes"] == s0["arena_bytes"]
    torch.testing.assert_close(out.cpu(), f(x.cpu(), w.cpu(), b.cpu(), r.cpu()))


_CONV_OPS = ("aten::convolution", "aten::convolution_backward", "aten::native_group_norm")


def _conv_case_stats(f, args, options=None):
    """(compiled result, eager tpu result, compile_stats before, after) of f on tpu copies of args."""
    torch._dynamo.reset()
    targs = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]
    eager = f(*targs)
    s0 = compile_stats()
    out = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False, options=options)(*targs)
    return out, eager, s0, compile_stats()


# (input sizes, weight sizes, stride, padding, dilation, groups, bias)
_CONVS = [
    ((2, 8, 12, 10), (16, 8, 3, 3), 1, 1, 1, 1, True),
    ((2, 8, 13, 9), (16, 8, 3, 3), 2, 1, 1, 1, True),
    ((1, 8, 12, 10), (16, 8, 3, 3), 1, 2, 2, 1, False),
    ((2, 8, 12, 10), (16, 8, 1, 1), 1, 0, 1, 1, True),
    ((2, 8, 12, 10), (8, 1, 3, 3), 1, 1, 1, 8, True),
    ((2, 4, 6, 5, 4), (8, 4, 3, 3, 3), 1, 1, 1, 1, True),
    ((2, 4, 20), (8, 4, 5), 2, 2, 1, 1, True),
    ((2, 8, 16, 16), (16, 8, 4, 4), 2, 1, 1, 1, False),
]


@pytest.mark.parametrize("codegen", ["auto", False])
@pytest.mark.parametrize("case", _CONVS, ids=lambda c: "x".join(map(str, c[1])) + f"-s{c[2]}p{c[3]}d{c[4]}g{c[5]}")
def test_conv_epilogue_is_fused(case, codegen, no_fallback):
    """silu(conv(x) + t) + r: the convolution is a C node (tpu::conv_fwd) that heads one fused
    group: each tile computes a band of output rows (reading the input rows it needs, padding
    adjusted) and runs the time-embedding add, SiLU and residual add on it, by generated code or
    the tile interpreter. Equals the CPU (fp32: rtol 1e-4, atol 1e-5, the tolerance of the
    compiled Diffusers block tests here; the differences seen are ~1e-6, from the summation order
    of the convolution's tiles)."""
    xs, ws, stride, pad, dil, groups, bias = case
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[len(xs)]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(xs, generator=g), torch.randn(ws, generator=g) * 0.3
    b = torch.randn(ws[0], generator=g) if bias else None
    y = conv(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    t = torch.randn((y.shape[0], y.shape[1]) + (1,) * (y.dim() - 2), generator=g)
    r = torch.randn(y.shape, generator=g)

    def f(x, w, b, t, r):
        return torch.nn.functional.silu(conv(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups) + t) + r

    out, eager, s0, s1 = _conv_case_stats(f, (x, w, b, t, r), {"codegen": codegen})
    assert s1["conv_epilogues"] - s0["conv_epilogues"] == 1
    assert s1["fused_groups"] - s0["fused_groups"] == 1 and s1["segments"] - s0["segments"] == 1
    assert s1["eager_ops"] == s0["eager_ops"]
    if codegen == "auto" and not s1["codegen_unavailable"]:
        assert s1["codegen_groups"] - s0["codegen_groups"] == 1
    torch.testing.assert_close(out.cpu(), f(x, w, b, t, r), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape, groups", [((2, 32, 8, 8), 8), ((3, 12, 5, 7), 3), ((2, 16, 4, 4, 4), 16),
                                           ((2, 64, 32, 32), 32)])
def test_group_norm_silu_is_fused(shape, groups, dtype, no_fallback):
    """silu(group_norm(x)) * 2: native_group_norm is a C node (tpu::group_norm) heading one
    fused group tiled by whole groups of channels, SiLU and the product as its epilogue. Equals
    eager tpu and the CPU (fp32: rtol 1e-4, atol 1e-5, differences seen ~2e-6: statistics in
    double here, in float on the CPU; bf16/f16: within two units in the last place (rtol = atol
    = 2 eps): a statistic summed in another order moves a result by one unit now and then, and
    eager tpu itself differs from the CPU so in 41 of the 131072 float16 elements of the
    largest shape; float64: PyTorch's default tolerances)."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(shape[1], generator=g).to(dtype), torch.randn(shape[1], generator=g).to(dtype)

    def f(x, w, b):
        return torch.nn.functional.silu(torch.nn.functional.group_norm(x, groups, w, b)) * 2

    out, eager, s0, s1 = _conv_case_stats(f, (x, w, b))
    assert s1["norm_epilogues"] - s0["norm_epilogues"] == 1 and s1["eager_ops"] == s0["eager_ops"]
    eps = torch.finfo(dtype).eps
    tol = (dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else
           dict(rtol=2 * eps, atol=2 * eps) if dtype in (torch.bfloat16, torch.float16) else {})
    torch.testing.assert_close(out.cpu(), f(x, w, b), **tol)
    torch.testing.assert_close(out.cpu(), eager.cpu(), **tol)


def test_conv_and_group_norm_without_epilogue_option(no_fallback):
    """options={"conv_epilogue": False} (TORCH_TPU_CONV_EPILOGUE=0): convolution and group norm
    are still C nodes, their consumers a fused group of their own."""
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(2, 8, 12, 10, generator=g), torch.randn(16, 8, 3, 3, generator=g), torch.randn(16, generator=g)

    def f(x, w, b):
        return torch.nn.functional.silu(torch.nn.functional.group_norm(torch.nn.functional.conv2d(x, w, b, padding=1), 4))

    out, _, s0, s1 = _conv_case_stats(f, (x, w, b), {"conv_epilogue": False})
    assert s1["conv_epilogues"] == s0["conv_epilogues"] and s1["norm_epilogues"] == s0["norm_epilogues"]
    assert s1["eager_ops"] == s0["eager_ops"] and s1["c_nodes"] - s0["c_nodes"] >= 3
    torch.testing.assert_close(out.cpu(), f(x, w, b), rtol=1e-4, atol=1e-5)


def test_conv_group_norm_training_step_matches_cpu(no_fallback):
    """Forward and backward of conv -> group norm -> SiLU -> strided conv, compiled: convolution,
    its backward (tpu::conv_bwd, the first one without an input gradient) and group norm are C
    nodes, nothing runs eagerly; output and gradients equal the CPU's (rtol 1e-4, atol 1e-5)."""
    def run(device):
        torch.manual_seed(1)
        m = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.GroupNorm(4, 16), torch.nn.SiLU(),
                                torch.nn.Conv2d(16, 8, 3, padding=1, stride=2)).to(device)
        if device == "tpu":
            m = torch.compile(m, backend="tpu", dynamic=False)
        x = torch.randn(2, 8, 12, 10, generator=torch.Generator().manual_seed(3)).to(device)
        y = m(x)
        y.square().sum().backward()
        return [y.detach().cpu()] + [p.grad.cpu() for p in m.parameters()]

    torch._dynamo.reset()
    s0 = compile_stats()
    got = run("tpu")
    s1 = compile_stats()
    assert s1["eager_ops"] == s0["eager_ops"], s1["eager_ops"]
    assert s1["segments"] - s0["segments"] == 2 and s1["norm_epilogues"] - s0["norm_epilogues"] == 1
    for a, b in zip(got, run("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _eager_and_compiled_logits(m, ids):
    """(eager logits, compiled logits, compile_stats before, after)."""
    s0 = compile_stats()
    with torch.no_grad():
        ref = m(ids).logits
        out = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)(ids).logits
    return ref, out, s0, compile_stats()


@pytest.mark.parametrize("shape", [(1, 12), (2, 12), (1, 300)])
def test_llama_gemm_epilogues_are_fused(shape, no_fallback):
    """In a compiled Llama the o_proj and down_proj products are fused with
    their residual adds, gate_proj with SiLU and up_proj with the SwiGLU
    product (through linear()'s [B, S, N] views): 4 per layer while the
    products have few rows (decode, short prompts), none for 300 tokens on
    2+ threads (see test_gemm_epilogue_is_fused); logits equal eager."""
    torch._dynamo.reset()
    m = _tiny_llama().to("tpu")
    ref, out, s0, s1 = _eager_and_compiled_logits(m, torch.randint(0, 256, shape, device="tpu"))
    many = shape[0] * shape[1] >= 128 * torch.tpu.get_device_properties(0).multi_processor_count
    assert s1["gemm_epilogues"] - s0["gemm_epilogues"] == (0 if many else 4 * m.config.num_hidden_layers)
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_qkv_products_run_as_one_step(dtype, no_fallback):
    """Decoding one token, a Llama layer's q, k and v projections (three
    one-row products of the same normed row) run as one batched step, one
    per layer; a 5-token prompt batches none; logits equal eager."""
    torch._dynamo.reset()
    m = _tiny_llama().to("tpu", dtype)
    for shape, batched in (((1, 1), 3), ((1, 5), 0)):
        ref, out, s0, s1 = _eager_and_compiled_logits(m, torch.randint(0, 256, shape, device="tpu"))
        layers = m.config.num_hidden_layers
        assert s1["gemv_batches"] - s0["gemv_batches"] == (layers if batched else 0)
        assert s1["gemv_batched"] - s0["gemv_batched"] == batched * layers
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), rtol=tol, atol=tol)


def test_rotary_embedding_becomes_one_rope_per_layer(no_fallback):
    """Transformers' apply_rotary_pos_emb (q and k, one cos/sin for the
    model) becomes one tpu.rope per layer before aot_autograd, so the
    forward graph has tpu::rope and the backward tpu::rope_backward, both in
    C; the loss and every gradient equal eager's."""
    torch._dynamo.reset()
    m = _tiny_llama().to("tpu").train()
    ids = torch.randint(0, 256, (2, 12), device="tpu")
    ref = m(ids, labels=ids).loss
    ref.backward()
    grads = [p.grad.cpu() for p in m.parameters()]
    m.zero_grad()
    s0 = compile_stats()
    out = torch.compile(m, backend="tpu", fullgraph=True, dynamic=False)(ids, labels=ids).loss
    out.backward()
    s1 = compile_stats()
    assert s1["rope_fusions"] - s0["rope_fusions"] == m.config.num_hidden_layers
    assert s1["eager_ops"] == s0["eager_ops"]
    torch.testing.assert_close(out.detach().cpu(), ref.detach().cpu(), rtol=1e-4, atol=1e-5)
    for p, g in zip(m.parameters(), grads):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-3, atol=1e-5)


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def _apply_rotary(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)


def _apply_partial_rotary(q, k, cos, sin):
    r = cos.shape[-1]
    qr, kr = _apply_rotary(q[..., :r], k[..., :r], cos, sin)
    return torch.cat((qr, q[..., r:]), -1), torch.cat((kr, k[..., r:]), -1)


@pytest.mark.parametrize("case", ["full", "partial", "cos_grad", "dtypes"])
def test_rotary_rewrite_only_where_rope_applies(case, no_fallback):
    """The rewrite needs q/k and cos/sin of one float dtype, cos/sin without
    gradient, and cos covering the rotated slice (partial rotary, as Phi3
    writes it, rotates q[..., :r]); otherwise the ops stay as written.
    Results equal eager."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    r = 4 if case == "partial" else 8
    cos, sin = torch.randn(1, 5, r, generator=g), torch.randn(1, 5, r, generator=g)
    if case == "dtypes":
        k = k.double()
    args = [t.to("tpu") for t in (q, k, cos, sin)]
    if case == "cos_grad":
        args[2].requires_grad_(True)
    fn = _apply_partial_rotary if case == "partial" else _apply_rotary
    s0 = compile_stats()
    out = torch.compile(fn, backend="tpu", fullgraph=True, dynamic=False)(*args)
    s1 = compile_stats()
    assert s1["rope_fusions"] - s0["rope_fusions"] == (1 if case in ("full", "partial") else 0)
    ref = fn(*[a.detach().cpu() for a in args])
    for o, r in zip(out, ref):
        torch.testing.assert_close(o.detach().cpu(), r)


@pytest.mark.parametrize("ignore", [-100, 3])
def test_cross_entropy_backward_scatters_in_place(ignore, no_fallback):
    """cross_entropy's backward (a zero fill and a scatter of -1) writes the
    scatter into the filled buffer; gradients equal eager's, with ignored
    targets."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(33, 97, generator=g)
    target = torch.randint(0, 97, (33,), generator=g)
    target[::4] = ignore

    def f(z, t):
        return torch.nn.functional.cross_entropy(z * 2.0, t, ignore_index=ignore)

    grads = []
    for dev, fn in (("cpu", f), ("tpu", torch.compile(f, backend="tpu", fullgraph=True, dynamic=False))):
        z = logits.clone().to(dev).requires_grad_(True)
        loss = fn(z, target.to(dev))
        loss.backward()
        grads.append((loss.detach().cpu(), z.grad.cpu()))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    torch.testing.assert_close(grads[1][1], grads[0][1])


def test_scatter_into_a_fill_read_elsewhere_is_not_in_place(no_fallback):
    torch._dynamo.reset()

    def f(i):
        z = torch.zeros(4, 6, device=i.device)
        return z.scatter(1, i, 2.5), z + 1

    i = torch.tensor([[0], [5], [2], [2]])
    out = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)(i.to("tpu"))
    for a, b in zip(out, f(i)):
        torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_with_empty_parts_is_its_producer_in_the_cat_layout(dtype, no_fallback):
    """cat([empty, y]) (a KV cache of length 0): y's producer writes the cat's
    (contiguous) layout itself, whatever layout y had; the results and
    strides equal eager's, also when y is read elsewhere (then a real cat)."""
    torch._dynamo.reset()
    empty = torch.empty(0)

    def f(x, e):
        y = x.permute(0, 2, 1, 3) * 2.0 + 1.0
        z = x.permute(0, 2, 1, 3).sigmoid()
        return torch.cat([e, y], -2), torch.cat([z, e], -2), z.sum()

    x = torch.randn(2, 7, 3, 5, generator=torch.Generator().manual_seed(4)).to(dtype)
    out = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)(x.to("tpu"), empty.to(dtype).to("tpu"))
    for a, b in zip(out, f(x, empty.to(dtype))):
        assert a.stride() == b.stride()
        torch.testing.assert_close(a.cpu(), b)


# ---- torch.compile with no backend, options, the device interface ------------------------------


def test_default_backend_compiles_tpu_graphs_with_tpu(no_fallback):
    """torch.compile(model) (backend "inductor") on tpu inputs runs backend
    "tpu", forward and backward; Inductor's mode is accepted and ignored."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4)).to("tpu")
    x = torch.randn(5, 8, device="tpu")
    want = model(x)
    want.sum().backward()
    want_grad = model[0].weight.grad.cpu()
    model.zero_grad()
    before = compile_stats()["graphs"]
    got = torch.compile(model)(x)
    got.sum().backward()
    assert compile_stats()["graphs"] == before + 2  # forward and backward graphs
    torch.testing.assert_close(got.cpu(), want.cpu())
    torch.testing.assert_close(model[0].weight.grad.cpu(), want_grad)
    before = compile_stats()["graphs"]
    out = torch.compile(lambda a: (a * 2).sin(), mode="reduce-overhead")(x)
    assert compile_stats()["graphs"] == before + 1
    torch.testing.assert_close(out.cpu(), (x.cpu() * 2).sin())


def test_default_backend_keeps_other_devices_on_inductor(monkeypatch):
    """Graphs without tpu values still reach Inductor (its compile_fx,
    replaced here by a stub to keep the test fast)."""
    import torch._inductor.compile_fx as cfx

    from torch_tpu._compile_setup import on_tpu

    seen = []

    def stub(gm, example_inputs, **kwargs):
        seen.append([t.device.type for t in example_inputs])
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", stub)
    torch._dynamo.reset()
    before = compile_stats()["graphs"]
    out = torch.compile(lambda a: a * 3 + 1)(torch.ones(4))
    torch.testing.assert_close(out, torch.full((4,), 4.0))
    assert seen == [["cpu"]] and compile_stats()["graphs"] == before
    gm = torch.fx.symbolic_trace(lambda a: a + 1)
    assert not on_tpu(gm, [torch.ones(1)]) and on_tpu(gm, [torch.ones(1, device="tpu")])


def test_options_are_applied(no_fallback):
    from torch_tpu._compile_options import compile_options

    torch._dynamo.reset()
    x = torch.randn(64, 32, device="tpu")

    def f(a):
        return torch.tanh(a * 3) + a

    s0 = compile_stats()
    out = torch.compile(f, backend="tpu", options={"graph": "eager"})(x)
    s1 = compile_stats()
    assert s1["graphs"] == s0["graphs"] + 1 and s1["compiles"] == s0["compiles"]  # nothing lowered to C
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    torch._dynamo.reset()
    out = torch.compile(f, backend="tpu", options={"codegen": False, "profile": True})(x)
    s2 = compile_stats()
    assert s2["compiles"] == s1["compiles"] + 1 and s2["codegen_groups"] == s1["codegen_groups"]
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    o = compile_options({"gemm_epilogue": False, "fuse_rotary": False})
    assert o.gemm_epilogue is False and o.fuse_rotary is False and o.graph == "c" and o.codegen_mode == 1


@pytest.mark.parametrize("options, message", [
    ({"xla_flags": 1}, r"unknown option 'xla_flags'; valid options: codegen, conv_epilogue, fuse_rotary, "
                       r"gemm_epilogue, graph, profile"),
    ({"codegen": "yes"}, r"option 'codegen' must be one of 'auto', True, False, got 'yes'"),
    ({"profile": 1}, r"option 'profile' must be one of True, False, got 1"),
])
def test_bad_options_are_named(options, message):
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):
        torch.compile(lambda a: a + 1, backend="tpu", options=options)(torch.ones(2, device="tpu"))
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(lambda a: a + 2, backend="tpu", mode="fastest")(torch.ones(2, device="tpu"))


def test_device_interface_is_this_projects():
    from torch._dynamo.device_interface import get_interface_for_device

    from torch_tpu._device_interface import TpuInterface

    di = get_interface_for_device("tpu")
    assert di is TpuInterface
    assert all(di.is_dtype_supported(d) for d in (torch.float64, torch.float16, torch.bfloat16, torch.int8))
    assert not di.is_dtype_supported(torch.complex64)
    assert di.device_count() == torch.tpu.device_count() and di.is_available() and not di.is_gpu()
    assert di.Worker.get_device_properties(0).multi_processor_count >= 1
    with di.device(1):
        assert di.current_device() == 1
    assert di.current_device() == 0


def test_import_leaves_dynamo_alone_and_registers_when_it_loads():
    """`import torch` does not import torch._dynamo; importing it later
    registers this project's device interface, replacing PyTorch's."""
    import subprocess
    import sys

    code = ("import sys, torch, torch_tpu; assert 'torch._dynamo' not in sys.modules, 'dynamo imported'; "
            "from torch._dynamo.device_interface import get_interface_for_device as g; "
            "print(g('tpu').__module__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "torch_tpu._device_interface"
