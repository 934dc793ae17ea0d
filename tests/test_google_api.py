"""Google's TorchTPU API (PyPI torch-tpu 0.2.0) on this package: every public
name of its torch.tpu module and submodules exists, the typical calls run
against CPU references, and the ones that need TPU hardware or JAX raise
NotImplementedError saying so. The README's "Google's TorchTPU API" table says
what each name does here. The collectives are also tested on two ranks in
tests/test_dist.py (test_google_ops_collectives)."""
import copy
import importlib
import importlib.metadata
import math
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

# The exports of Google's torch.tpu modules, read from its wheel
# (torch_tpu/_internal/public_api.py, _PUBLIC_MODULES): 71 names.
GOOGLE_API = {
    "torch.tpu": [
        "EagerMode", "Event", "Precision", "Stream", "allow_excess_precision", "current_device", "current_stream",
        "default_generators", "default_stream", "device", "device_count", "device_of", "eager_mode",
        "get_amp_supported_dtype", "get_device_name", "get_device_properties", "get_rng_state", "initial_seed",
        "is_available", "is_initialized", "manual_seed", "manual_seed_all", "precision", "set_device",
        "set_eager_mode", "set_rng_state", "set_stream", "stream", "synchronize", "topology_aware_mesh"],
    "torch.tpu.compiler": ["custom_compiler_options"],
    "torch.tpu.distributed": ["set_tpu_launch_env", "spmd_safe", "topology_aware_mesh", "window_num_stripes",
                              "window_stripe_chunk_mb"],
    "torch.tpu.ops": [
        "align_jagged_to_multiple", "all_gather_dim", "max_pool1d", "max_pool1d_backward", "max_pool2d",
        "max_pool2d_backward", "max_pool3d", "max_pool3d_backward", "optimization_barrier", "ragged_all_to_all",
        "ragged_dot", "ragged_dot_weight_grad", "recv", "reduce_scatter_dim", "send", "sparse_dense_matmul",
        "sparse_dense_matmul_activation_unstack", "sparse_dense_matmul_grad_with_adagrad",
        "sparse_dense_matmul_grad_with_adam", "sparse_dense_matmul_grad_with_sgd",
        "sparse_dense_matmul_gradient_stack", "sparse_gather", "sparse_gather_backward", "sparse_iota",
        "sparse_map_row", "splash_sdpa", "strip_jagged_padding"],
    "torch.tpu.optimizers": ["AdamW", "Muon", "Optimizer", "Sgd", "SingleTraceTrainer"],
    "torch.tpu.pallas": ["get_pallas_mesh", "jax_op"],
    "torch.tpu.profiler": ["TpuProfilerConfig"],
}

# Names that raise NotImplementedError here, and a word their message must contain.
RAISES = {
    **{("torch.tpu.ops", n): "TPU hardware" for n in GOOGLE_API["torch.tpu.ops"] if n.startswith("sparse_")},
    ("torch.tpu.pallas", "jax_op"): "JAX",
    ("torch.tpu.pallas", "get_pallas_mesh"): "JAX",
}

DEV = torch.device("tpu", 0)


def test_every_name_exists():
    assert sum(len(v) for v in GOOGLE_API.values()) == 71
    missing = []
    for mod_name, names in GOOGLE_API.items():
        mod = importlib.import_module(mod_name)
        assert sys.modules[mod_name] is mod
        missing += [f"{mod_name}.{n}" for n in names if not hasattr(mod, n)]
    assert not missing, missing


def test_torch_tpu_is_a_package():
    assert hasattr(torch.tpu, "__path__")
    import torch.tpu.ops as tpu_ops
    from torch.tpu.ops import ragged_dot
    from torch.tpu.optimizers import AdamW  # noqa: F401

    assert ragged_dot is tpu_ops.ragged_dot is torch.tpu.ops.ragged_dot
    for sub in ("ops", "optimizers", "profiler", "compiler", "distributed", "pallas"):
        assert getattr(torch.tpu, sub) is sys.modules[f"torch.tpu.{sub}"]
    from torch_tpu._internal.compile import TpuBackend  # noqa: F401
    from torch_tpu._internal.sync import synchronize  # noqa: F401


@pytest.mark.parametrize("key", sorted(RAISES), ids=lambda k: f"{k[0]}.{k[1]}")
def test_hardware_only_names_raise(key):
    mod, name = key
    with pytest.raises(NotImplementedError, match=RAISES[key]):
        getattr(importlib.import_module(mod), name)(None)


# ---- ops ----------------------------------------------------------------------------


def _ref_ragged(lhs, rhs, sizes):
    out, start = [], 0
    for g, n in enumerate(sizes):
        out.append(lhs[start:start + n].double() @ rhs[g].double())
        start += n
    return torch.cat(out).to(lhs.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ragged_dot(dtype, no_fallback):
    gen = torch.Generator().manual_seed(0)
    sizes = [3, 0, 5, 1]
    lhs = torch.randn(9, 16, generator=gen).to(dtype)
    rhs = torch.randn(4, 16, 8, generator=gen).to(dtype)
    gs = torch.tensor(sizes)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    ref = _ref_ragged(lhs, rhs, sizes)
    got = torch.tpu.ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), gs.to(DEV))
    torch.testing.assert_close(got.cpu(), ref, **tol)
    out = torch.empty(9, 8, dtype=dtype, device=DEV)
    assert torch.tpu.ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), gs.to(DEV), out=out) is out
    torch.testing.assert_close(out.cpu(), ref, **tol)
    # weight gradient: autograd of ragged_dot in rhs == ragged_dot_weight_grad
    grad = torch.randn(9, 8, generator=gen).to(dtype)
    r = rhs.to(DEV).requires_grad_()
    torch.tpu.ops.ragged_dot(lhs.to(DEV), r, gs.to(DEV)).backward(grad.to(DEV))
    wg = torch.tpu.ops.ragged_dot_weight_grad(lhs.to(DEV), grad.to(DEV), gs.to(DEV))
    ref_wg = torch.stack([lhs[s:s + n].double().T @ grad[s:s + n].double()
                          for s, n in zip([0, 3, 3, 8], sizes)]).to(dtype)
    torch.testing.assert_close(wg.cpu(), ref_wg, **tol)
    torch.testing.assert_close(r.grad.cpu(), ref_wg, **tol)


def test_ragged_dot_bad_out():
    lhs, rhs, gs = torch.randn(4, 3, device=DEV), torch.randn(2, 3, 5, device=DEV), torch.tensor([1, 3], device=DEV)
    with pytest.raises(ValueError, match=r"ragged_dot: out must be \(4, 5\) torch.float32"):
        torch.tpu.ops.ragged_dot(lhs, rhs, gs, out=torch.empty(4, 4, device=DEV))


def test_splash_sdpa():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 12, 8, generator=gen)
    k = torch.randn(2, 2, 12, 8, generator=gen)
    v = torch.randn(2, 2, 12, 8, generator=gen)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    got = torch.tpu.ops.splash_sdpa(q.to(DEV), k.to(DEV), v.to(DEV), enable_gqa=True)
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, kk, vv, is_causal=True), atol=1e-5, rtol=1e-5)
    i, j = torch.arange(12).unsqueeze(1), torch.arange(12).unsqueeze(0)
    window = (j <= i) & (i - j <= 3)
    got = torch.tpu.ops.splash_sdpa(q.to(DEV), k.to(DEV), v.to(DEV), enable_gqa=True, local_window_size=3,
                                    scale=0.5, block_q=128)
    ref = F.scaled_dot_product_attention(q, kk, vv, attn_mask=window, scale=0.5)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="enable_gqa=False but q has 4 heads and k 2"):
        torch.tpu.ops.splash_sdpa(q.to(DEV), k.to(DEV), v.to(DEV))
    with pytest.raises(ValueError, match="q_layout must be one of"):
        torch.tpu.ops.splash_sdpa(q.to(DEV), q.to(DEV), q.to(DEV), q_layout="ROW")


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool(nd):
    gen = torch.Generator().manual_seed(nd)
    x = torch.randn(2, 3, *([7] * nd), generator=gen)
    ks, st, pd, dl = [3] * nd, [2] * nd, [1] * nd, [1] * nd
    pool = getattr(torch.tpu.ops, f"max_pool{nd}d")
    back = getattr(torch.tpu.ops, f"max_pool{nd}d_backward")
    for ceil in (False, True):
        ref = getattr(F, f"max_pool{nd}d")(x, ks, st, pd, dl, ceil_mode=ceil)
        got = pool(x.to(DEV), ks, st, pd, dl, ceil)
        torch.testing.assert_close(got.cpu(), ref)
        g = torch.randn(ref.shape, generator=gen)
        xr = x.clone().requires_grad_()
        getattr(F, f"max_pool{nd}d")(xr, ks, st, pd, dl, ceil_mode=ceil).backward(g)
        torch.testing.assert_close(back(g.to(DEV), x.to(DEV), ks, st, pd, dl, ceil).cpu(), xr.grad)
    with pytest.raises(ValueError, match=f"max_pool{nd}d: kernel_size must be a sequence of {nd} integers"):
        pool(x.to(DEV), [3] * (nd + 1), st, pd, dl, False)


def test_optimization_barrier():
    x = torch.randn(64, device=DEV)
    assert torch.tpu.ops.optimization_barrier([x])[0] is x  # eager: the tensors themselves

    def chain(x, barrier):
        a = (x * 2 + 1).sigmoid()
        if barrier:
            (a,) = torch.tpu.ops.optimization_barrier([a])
        return (a * 3 - 1).relu()

    seg = []
    for barrier in (False, True):
        torch._dynamo.reset()
        before = torch.tpu.compile_stats()["segments"]
        got = torch.compile(lambda t: chain(t, barrier), backend="tpu", fullgraph=True)(x)
        seg.append(torch.tpu.compile_stats()["segments"] - before)
        torch.testing.assert_close(got.cpu(), chain(x.cpu(), False))
    assert seg == [1, 2], seg  # the barrier cuts the fused chain in two


def test_jagged_padding():
    nt = torch.nested.nested_tensor([torch.randn(3, 4), torch.randn(2, 4)], layout=torch.jagged, device=DEV)
    padded = torch.tpu.ops.align_jagged_to_multiple(nt, 8, padding_value=-1.0)
    assert padded.values().shape == (8, 4) and torch.equal(padded.offsets().cpu(), nt.offsets().cpu())
    assert torch.equal(padded.values()[5:].cpu(), torch.full((3, 4), -1.0))
    stripped = torch.tpu.ops.strip_jagged_padding(padded, valid_tokens=5)
    assert torch.equal(stripped.values().cpu(), nt.values().cpu())


def test_collectives_need_a_process_group():
    if torch.distributed.is_initialized():
        pytest.skip("a process group is initialized")
    with pytest.raises(RuntimeError, match="all_gather_dim: no process group"):
        torch.tpu.ops.all_gather_dim(torch.ones(2, device=DEV), 0)


# ---- optimizers -------------------------------------------------------------------------


def _params(dev, shapes=((6, 4), (4,)), seed=0):
    gen = torch.Generator().manual_seed(seed)
    return ({f"p{i}": torch.randn(s, generator=gen).to(dev) for i, s in enumerate(shapes)},
            [{f"p{i}": torch.randn(s, generator=gen).to(dev) for i, s in enumerate(shapes)} for _ in range(3)])


def _torch_steps(opt_cls, params, grads, **kw):
    ps = [p.clone().requires_grad_() for p in params.values()]
    opt = opt_cls(ps, **kw)
    for g in grads:
        for p, gv in zip(ps, g.values()):
            p.grad = gv.clone()
        opt.step()
    return [p.detach() for p in ps]


def test_adamw_and_sgd_match_torch_optim():
    params, grads = _params("cpu")
    cases = [
        (torch.tpu.optimizers.AdamW(lr=1e-2, weight_decay=0.1, use_bfloat16_moments=False),
         torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), 1e-5),
        (torch.tpu.optimizers.AdamW(lr=1e-2, weight_decay=0.1),  # bfloat16 moments: rounded each step
         torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), 2e-3),
        (torch.tpu.optimizers.Sgd(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
         torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), 1e-5),
    ]
    for opt, ref_cls, kw, tol in cases:
        want = _torch_steps(ref_cls, params, grads, **kw)
        group = opt.init_param_group({k: v.to(DEV) for k, v in params.items()})
        for g in grads:
            group = opt(group, {k: v.to(DEV) for k, v in g.items()})
        for (name, got), w in zip(group.params.items(), want):
            torch.testing.assert_close(got.cpu(), w, atol=tol, rtol=tol, msg=f"{type(opt).__name__} {name}")
        assert all(float(s) > 0 for s in group.opt_steps.values())
    assert torch.tpu.optimizers.AdamW().defaults["beta2"] == 0.999
    leaves = torch.utils._pytree.tree_leaves(group)  # a ParamGroup is a pytree
    assert all(isinstance(t, torch.Tensor) for t in leaves) and len(leaves) == 6


def _muon_reference(params, grads, lr, momentum, weight_decay, steps=5, coeffs=(3.4445, -4.7750, 2.0315)):
    """Muon as Keller Jordan describes it, in float32: Nesterov momentum, the
    update orthogonalised by the quintic Newton-Schulz iteration
    X <- aX + (bA + cA^2)X with A = XX^T (X normalised by its Frobenius norm
    first, iterated on the wide orientation of the matrix), scaled by
    sqrt(max(1, rows/cols)), with decoupled weight decay."""
    out = {}
    for name, p in params.items():
        p = p.clone()
        buf = torch.zeros_like(p)
        for g in grads:
            g = g[name]
            buf = momentum * buf + (1 - momentum) * g
            x = (1 - momentum) * g + momentum * buf  # Nesterov
            tall = x.shape[0] > x.shape[1]
            if tall:
                x = x.T
            x = x / max(float(x.norm()), 1e-7)
            a, b, c = coeffs
            for _ in range(steps):
                A = x @ x.T
                x = a * x + (b * A + c * (A @ A)) @ x
            if tall:
                x = x.T
            p = p * (1 - lr * weight_decay) - lr * math.sqrt(max(1, p.shape[0] / p.shape[1])) * x
        out[name] = p
    return out


def test_muon_matches_reference():
    params, grads = _params("cpu", shapes=((8, 4), (3, 6)), seed=3)
    lr = 0.02
    opt = torch.tpu.optimizers.Muon(lr=lr, momentum=0.9, weight_decay=0.05)
    want = _muon_reference(params, grads, lr, 0.9, 0.05)
    group = opt.init_param_group({k: v.to(DEV) for k, v in params.items()})
    for g in grads:
        opt.step(group, {k: v.to(DEV) for k, v in g.items()})
    for name, got in group.params.items():
        # the iteration runs in bfloat16 (as PyTorch's and Google's Muon do): its entries differ from
        # float32's by up to ~0.03, i.e. lr * sqrt(2) * 0.03 per step, against a total change of ~0.05
        moved = (want[name] - params[name]).abs().max()
        assert moved > 0.03
        torch.testing.assert_close(got.cpu(), want[name], atol=len(grads) * lr * 1.5 * 0.03, rtol=0, msg=name)
    with pytest.raises(ValueError, match="Muon: parameters must be 2-D"):
        opt.init_param_group({"b": torch.zeros(3, device=DEV)})


def test_optimizer_from_module_and_missing_grad():
    lin = torch.nn.Linear(3, 2).to(DEV)
    opt = torch.tpu.optimizers.Sgd(lr=0.5)
    group = opt.init_param_group(lin)
    assert set(group.params) == {"weight", "bias"}
    with pytest.raises(KeyError, match="Sgd.step: no gradient for bias"):
        opt(group, {"weight": torch.zeros(2, 3, device=DEV)})


def test_single_trace_trainer():
    """One traced step (forward, MSE loss, backward, SGD with momentum) compiled
    by TpuBackend equals torch.optim.SGD on the CPU; without an optimizer the
    step leaves the gradients in param.grad."""
    from torch_tpu._internal.compile import TpuBackend

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = copy.deepcopy(ref).to(DEV)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    trainer = torch.tpu.optimizers.SingleTraceTrainer(model, torch.tpu.optimizers.Sgd(lr=0.1, momentum=0.9),
                                                      compile_fn=TpuBackend())
    step = trainer.make_compiled_train_step(x.to(DEV), y.to(DEV))
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        loss = step(x.to(DEV), y.to(DEV))
        opt.zero_grad()
        want = F.mse_loss(ref(x), y)
        want.backward()
        opt.step()
        torch.testing.assert_close(loss.cpu(), want.detach())
    for (name, p), q in zip(trainer.params.items(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), msg=name)
    torch.testing.assert_close(model[0].weight.cpu(), ref[0].weight.detach())  # the model's own tensors
    plain = torch.tpu.optimizers.SingleTraceTrainer(model, compile_fn=lambda gm, inputs: gm)
    loss = plain.make_compiled_train_step(x.to(DEV))(x.to(DEV))  # no targets: the output's mean
    ref.zero_grad()
    ref(x).mean().backward()
    torch.testing.assert_close(model[2].weight.grad.cpu(), ref[2].weight.grad)
    with pytest.raises(ValueError, match="no compile_fn"):
        torch.tpu.optimizers.SingleTraceTrainer(model).make_compiled_train_step(x.to(DEV))


# ---- modes, precision, compiler, sync, device_of, profiler, distributed ----------------------


def test_eager_mode():
    E = torch.tpu.EagerMode
    assert torch.tpu.eager_mode == E.DEFER_NEVER
    with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
        x = torch.randn(4, device=DEV)
        torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)
    assert torch.tpu.eager_mode == E.DEFER_NEVER
    x = torch.randn(5, 3, device=DEV)
    bad = torch.tensor([0, 7], device=DEV)
    with torch.tpu.set_eager_mode(E.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        with pytest.raises(IndexError, match="index 7 is out of bounds"):
            torch.index_select(x, 0, bad)  # raised by the op itself, not at a later sync
    torch.tpu.eager_mode = E.DEFER_NEVER_AND_LAUNCH_BLOCKING
    try:
        assert torch.tpu.eager_mode == E.DEFER_NEVER_AND_LAUNCH_BLOCKING
        torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)
    finally:
        torch.tpu.eager_mode = E.DEFER_NEVER
    with pytest.raises(TypeError, match="expected a torch.tpu.EagerMode"):
        torch.tpu.eager_mode = "fast"


def test_precision():
    P = torch.tpu.Precision
    assert {p.name for p in P} == {"DEFAULT", "HIGH", "HIGHEST"}
    from torch_tpu._google.modes import current_precision

    from torch_tpu import _bridge

    # what each mode does to the products: tests/test_matmul_precision.py
    with torch.tpu.precision(P.DEFAULT):
        assert current_precision() is P.DEFAULT and _bridge.bf16_products() == 1
        with torch.tpu.precision(P.HIGHEST):
            assert current_precision() is P.HIGHEST and _bridge.bf16_products() == 0
        assert current_precision() is P.DEFAULT and _bridge.bf16_products() == 1
    assert current_precision() is None and _bridge.bf16_products() == -1
    with pytest.raises(ValueError, match="expected torch.tpu.Precision"):
        with torch.tpu.precision("HIGH"):
            pass
    assert torch.tpu.allow_excess_precision is False
    torch.tpu.allow_excess_precision = True
    assert torch.tpu.allow_excess_precision is True
    torch.tpu.allow_excess_precision = False
    with pytest.raises(TypeError, match="must be a bool"):
        torch.tpu.allow_excess_precision = 1


def _fn(x):
    return (x @ x.T).relu().sum(-1)


def test_custom_compiler_options():
    x = torch.randn(8, 8, device=DEV)
    torch._dynamo.reset()
    before = torch.tpu.compile_stats()["eager_graphs"]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.tpu.compiler.custom_compiler_options({"graph": "eager", "xla_tpu_flag_for_test": "1"}):
            with torch.tpu.compiler.custom_compiler_options({"gemm_epilogue": "0"}):  # env-variable text
                got = torch.compile(_fn, backend="tpu")(x)
    assert torch.tpu.compile_stats()["eager_graphs"] - before == 1
    assert any("xla_tpu_flag_for_test are ignored" in str(m.message) for m in w)
    torch.testing.assert_close(got.cpu(), _fn(x.cpu()))
    with pytest.raises(ValueError, match="custom_compiler_options: unknown option 'graf'"):
        with torch.tpu.compiler.custom_compiler_options({"graf": "c"}):
            pass
    with pytest.raises(ValueError, match="option 'codegen' must be one of"):
        with torch.tpu.compiler.custom_compiler_options({"codegen": "sometimes"}):
            pass


def test_tpu_backend_object():
    from torch_tpu._internal.compile import TpuBackend

    x = torch.randn(8, 8, device=DEV)
    torch._dynamo.reset()
    before = torch.tpu.compile_stats()["graphs"]
    got = torch.compile(_fn, backend=TpuBackend(), options={"codegen": False})(x)
    assert torch.tpu.compile_stats()["graphs"] > before
    torch.testing.assert_close(got.cpu(), _fn(x.cpu()))
    with pytest.raises(NotImplementedError, match="debug=True"):
        TpuBackend(debug=True)


def test_synchronize_and_device_of():
    from torch_tpu._internal.sync import synchronize

    x = torch.randn(16, device=DEV) * 2
    synchronize([x, {"y": x + 1}])
    synchronize(x, wait=False)
    synchronize()
    if torch.tpu.device_count() > 1:
        t = torch.ones(2, device="tpu:1")
        with torch.tpu.device_of(t):
            assert torch.tpu.current_device() == 1
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(2)):  # not on tpu: nothing changes
        assert torch.tpu.current_device() == 0


def test_profiler_config(tmp_path):
    cfg = torch.tpu.profiler.TpuProfilerConfig(run_dir=tmp_path, worker_rank="3",
                                               experimental_options={"flag": True, "name": 'a"b'})
    assert isinstance(cfg, torch.profiler._ExperimentalConfig)
    assert cfg.run_dir == str(tmp_path) and cfg.device_tracer_level == 1
    assert cfg.config_string == (f'host_tracer_level:2,device_tracer_level:1,python_tracer_level:0,run_dir:{tmp_path},'
                                 'worker_rank:"3",flag:true,name:"a\\"b",check_experimental_options:true')
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=cfg):
        (torch.ones(4, device=DEV) + 1).cpu()
    with pytest.raises(ValueError, match="worker_rank may not contain"):
        torch.tpu.profiler.TpuProfilerConfig(worker_rank="a:b")
    with pytest.raises(ValueError, match="host_tracer_level must be an integer in"):
        torch.tpu.profiler.TpuProfilerConfig(host_tracer_level=9)
    with pytest.raises(ValueError, match="bad experimental option name 'run_dir'"):
        torch.tpu.profiler.TpuProfilerConfig(experimental_options={"run_dir": "x"})


def test_distributed_helpers():
    d = torch.tpu.distributed
    if not torch.distributed.is_initialized():
        assert torch.equal(d.topology_aware_mesh((1, 1)), torch.zeros(1, 1, dtype=torch.int64))
        assert torch.equal(torch.tpu.topology_aware_mesh((1,)), torch.zeros(1, dtype=torch.int64))
        with pytest.raises(ValueError, match="product is the world size 1"):
            d.topology_aware_mesh((2, 2))
    d.set_tpu_launch_env(nnodes=1, nproc_per_node=2)
    with pytest.raises(ValueError, match="nproc_per_node must be a positive integer"):
        d.set_tpu_launch_env(nproc_per_node=0)

    @d.spmd_safe
    def twice(t):
        return t * 2

    assert twice(3) == 6 and twice.__name__ == "twice"
    d.window_num_stripes = 8
    assert d.window_num_stripes == 8
    with pytest.raises(ValueError, match="window_stripe_chunk_mb must be a positive integer"):
        d.window_stripe_chunk_mb = -1


# ---- the distribution name (README, "Package name") ----------------------------------------


def test_metadata_alias(tmp_path, monkeypatch):
    """Lookups of the import name torch_tpu find the torch-tpu-c distribution
    when no distribution of that name exists (here: a fake one on sys.path,
    found through a finder told to look for it)."""
    from torch_tpu import _metadata

    info = tmp_path / "fake_torch_tpu_alias-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-torch-tpu-alias\nVersion: 9.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = _metadata._AliasFinder()
    finder.distribution = "fake-torch-tpu-alias"
    ctx = importlib.metadata.DistributionFinder.Context
    (dist,) = list(finder.find_distributions(ctx(name="torch_tpu")))
    assert dist.version == "9.9"
    assert list(finder.find_distributions(ctx(name="torch-tpu"))) != []
    assert list(finder.find_distributions(ctx(name="numpy"))) == []
    assert list(finder.find_distributions(ctx())) == []  # listing all distributions: nothing added
    assert any(isinstance(f, _metadata._AliasFinder) for f in sys.meta_path)
    # what Diffusers reads; the installed distribution (whatever its name) answers
    assert importlib.metadata.version("torch_tpu")
