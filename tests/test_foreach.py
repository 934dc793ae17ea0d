"""List ops (torch._foreach_*) run natively on tpu, and the device queue runs
consecutive list ops piece by piece (runtime/kernels/foreach.c,
runtime/drivers/host/host_queue.c). Results are checked against PyTorch's CPU
foreach ops; optimizers against their CPU runs."""
import os
import subprocess
import sys

import pytest
import torch
import torch_tpu  # noqa: F401

SHAPES = [(3, 5), (70001,), (7,), (300, 129), (), (0,)]


def _lists(n, dtype=torch.float32, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lst = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
        out.append([t.abs() + 0.5 if positive else t for t in lst])
    return out


def _tpu(lst):
    return [t.to("tpu") for t in lst]


def _close(tpu_list, cpu_list, **kw):
    assert len(tpu_list) == len(cpu_list)
    for a, b in zip(tpu_list, cpu_list):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.cpu(), b, **kw)


# (name, number of tensor lists, extra args, needs positive inputs)
CASES = [
    ("_foreach_add_", 2, {"alpha": 0.5}, False),
    ("_foreach_add_", 1, (1.25,), False),
    ("_foreach_add_", 1, ([0.5, -1.0, 2.0, 3.0, 1.5, 2.5],), False),
    ("_foreach_add", 2, {"alpha": -2.0}, False),
    ("_foreach_add", 1, (3.0,), False),
    ("_foreach_sub_", 2, {"alpha": 2.0}, False),
    ("_foreach_sub", 1, ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0],), False),
    ("_foreach_mul_", 2, (), False),
    ("_foreach_mul_", 1, (0.999,), False),
    ("_foreach_mul", 1, ([2.0, 3.0, 0.5, 1.0, -1.0, 4.0],), False),
    ("_foreach_div_", 2, (), True),
    ("_foreach_div_", 1, ([1.5, 2.0, 3.0, 0.5, 0.25, 8.0],), False),
    ("_foreach_div", 1, (3.0,), False),
    ("_foreach_lerp_", 2, (0.1,), False),
    ("_foreach_lerp_", 2, (0.9,), False),
    ("_foreach_lerp", 3, (), False),
    ("_foreach_addcmul_", 3, (0.001,), False),
    ("_foreach_addcmul_", 3, ([0.5, 1.0, 2.0, 3.0, 4.0, 5.0],), False),
    ("_foreach_addcdiv_", 3, (-0.01,), True),
    ("_foreach_addcdiv", 3, ([0.5, 1.0, 2.0, 3.0, 4.0, 5.0],), True),
    ("_foreach_maximum_", 2, (), False),
    ("_foreach_minimum", 2, (), False),
    ("_foreach_clamp_min_", 1, (0.1,), False),
    ("_foreach_clamp_max", 1, ([0.0, 0.5, 1.0, -1.0, 2.0, 0.1],), False),
    ("_foreach_pow", 1, (2.0,), True),
    ("_foreach_pow_", 2, (), True),
    ("_foreach_sqrt", 1, (), True),
    ("_foreach_sqrt_", 1, (), True),
    ("_foreach_neg_", 1, (), False),
    ("_foreach_exp", 1, (), False),
    ("_foreach_reciprocal_", 1, (), True),
    ("_foreach_sigmoid", 1, (), False),
    ("_foreach_abs", 1, (), False),
    ("_foreach_copy_", 2, (), False),
    ("_foreach_zero_", 1, (), False),
]


def _call(name, lists, extra):
    fn = getattr(torch, name)
    if isinstance(extra, dict):
        return fn(*lists, **extra)
    return fn(*lists, *extra)


@pytest.mark.parametrize("name,nlists,extra,positive", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_foreach_matches_cpu(name, nlists, extra, positive):
    cpu = _lists(nlists, positive=positive)
    dev = [_tpu(lst) for lst in cpu]
    before = torch_tpu.fallback_report()
    want = _call(name, cpu, extra)
    got = _call(name, dev, extra)
    if name.endswith("_"):
        _close(dev[0], cpu[0])
    else:
        _close(got, want)
        _close(dev[0], cpu[0])  # inputs untouched
    assert torch_tpu.fallback_report() == before, "a foreach op fell back to the CPU"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_foreach_half_dtypes(dtype):
    cpu = _lists(3, dtype=dtype, positive=True)
    dev = [_tpu(lst) for lst in cpu]
    for lists in (cpu, dev):
        torch._foreach_mul_(lists[0], 0.5)
        torch._foreach_addcdiv_(lists[0], lists[1], lists[2], -0.25)
        s = torch._foreach_sqrt(lists[1])
        torch._foreach_add_(lists[0], s, alpha=0.5)
    _close(dev[0], cpu[0])


def test_foreach_integer_scalar_list():
    cpu = [torch.arange(10, dtype=torch.int64) * k for k in range(1, 4)]
    dev = _tpu(cpu)
    torch._foreach_add_(cpu, [1, 2, 3])
    torch._foreach_add_(dev, [1, 2, 3])
    torch._foreach_mul_(cpu, [3, 2, 1])
    torch._foreach_mul_(dev, [3, 2, 1])
    for a, b in zip(dev, cpu):
        assert a.dtype == torch.int64
        assert torch.equal(a.cpu(), b)


def test_foreach_non_contiguous_and_broadcast_scalar_tensor():
    base = torch.randn(64, 48)
    cpu = [base.t(), torch.randn(40000)[::2], torch.randn(5, 6)]
    other = [torch.randn(48, 64), torch.randn(20000), torch.randn(5, 6)]
    dev, dev_other = _tpu([t.contiguous() for t in cpu]), _tpu(other)
    dev[0] = base.to("tpu").t()
    dev[1] = torch.randn(40000).to("tpu")[::2].copy_(cpu[1].to("tpu"))
    torch._foreach_add_(cpu, other, alpha=0.5)
    torch._foreach_add_(dev, dev_other, alpha=0.5)
    _close(dev, cpu)
    scale = torch.tensor(0.25)
    torch._foreach_mul_(cpu, scale)
    torch._foreach_mul_(dev, scale.to("tpu"))
    _close(dev, cpu)


def test_foreach_aliasing_lists_keep_sequential_semantics():
    # element 1 reads what element 0 writes (and the reverse): the queue must
    # not interleave these pieces.
    x, y = torch.randn(70000), torch.randn(70000)
    tx, ty = x.to("tpu"), y.to("tpu")
    torch._foreach_add_([x, y], [y, x])
    torch._foreach_add_([tx, ty], [ty, tx])
    _close([tx, ty], [x, y])
    # overlapping views of one buffer across elements and ops
    buf = torch.randn(100000)
    tbuf = buf.to("tpu")
    a, b = [buf[:60000], buf[40000:]], [tbuf[:60000], tbuf[40000:]]
    torch._foreach_mul_(a, 2.0)
    torch._foreach_add_(a, 1.0)
    torch._foreach_mul_(b, 2.0)
    torch._foreach_add_(b, 1.0)
    torch.testing.assert_close(tbuf.cpu(), buf)


def _busy(n=1024):
    """Queues a long matmul so the list ops that follow are all queued
    before the device reaches them."""
    a = torch.randn(n, n, device="tpu")
    return a @ a


@pytest.mark.host_driver  # list grouping is the host queue's
def test_adamw_step_runs_as_one_group():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in [(256, 300), (300,), (100000,), (7, 7)]]
    dparams = [torch.nn.Parameter(p.detach().to("tpu")) for p in params]
    for p, d in zip(params, dparams):
        p.grad = torch.randn_like(p)
        d.grad = p.grad.to("tpu")
    opt = torch.optim.AdamW(params, lr=1e-2)
    dopt = torch.optim.AdamW(dparams, lr=1e-2)
    assert dopt.defaults["foreach"] is None  # the default: foreach on tpu
    for step in range(3):
        opt.step()
        torch.tpu.synchronize()
        s0 = torch.tpu.queue_stats()
        _busy()
        dopt.step()
        torch.tpu.synchronize()
        s1 = torch.tpu.queue_stats()
        if step > 0:  # the first step also creates the state
            assert s1["list_groups"] - s0["list_groups"] == 1
            assert s1["list_works"] - s0["list_works"] >= 7
        _close([p.detach() for p in dparams], [p.detach() for p in params])


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, maximize=True),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True),
    lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda ps: torch.optim.SGD(ps, lr=1e-2),
    lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
], ids=["adam-wd", "adam-amsgrad-max", "adamw-amsgrad", "sgd-nesterov", "sgd", "rmsprop"])
def test_default_optimizers_match_cpu(make):
    # the same gradients on both sides, so only the optimizer step is compared
    g = torch.Generator().manual_seed(1)
    shapes = [(300, 64), (300,), (10, 300), (70000,)]
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    dparams = [torch.nn.Parameter(p.detach().to("tpu")) for p in params]
    # the CPU reference runs the same (foreach) formulation as tpu's default
    opt, dopt = make(params), make(dparams)
    for group in opt.param_groups:
        group["foreach"] = True
    assert all(group["foreach"] is None for group in dopt.param_groups)
    before = torch_tpu.fallback_report()
    for _ in range(3):
        for p, d in zip(params, dparams):
            p.grad = torch.randn(p.shape, generator=g)
            d.grad = p.grad.to("tpu")
        opt.step()
        dopt.step()
    _close([d.detach() for d in dparams], [p.detach() for p in params])
    after = torch_tpu.fallback_report()
    assert not {k for k in after if "_foreach" in k and after[k] != before.get(k)}


def test_clip_grad_norm_foreach():
    torch.manual_seed(2)
    grads = [torch.randn(s) * 3 for s in [(100, 50), (50,), (70000,)]]
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    dparams = [torch.nn.Parameter(torch.zeros_like(g, device="tpu")) for g in grads]
    for p, d, g in zip(params, dparams, grads):
        p.grad, d.grad = g.clone(), g.to("tpu")
    n = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    dn = torch.nn.utils.clip_grad_norm_(dparams, 1.0, foreach=True)
    torch.testing.assert_close(dn.cpu(), n)
    _close([d.grad for d in dparams], [p.grad for p in params])


def test_foreach_errors_name_the_op():
    a = _tpu([torch.randn(3), torch.randn(4)])
    with pytest.raises((RuntimeError, ValueError), match="_foreach_add_.*1 elements, expected 2"):
        torch._foreach_add_(a, [1.0])
    with pytest.raises((RuntimeError, ValueError), match="_foreach_add_.*element 1.*broadcast"):
        torch._foreach_add_(a, _tpu([torch.randn(3), torch.randn(5)]))
    torch._foreach_add_(a, 1.0)  # the process stays usable
    torch.tpu.synchronize()


@pytest.mark.host_driver  # list grouping is the host queue's
def test_list_fusion_off_gives_same_results():
    code = (
        "import torch, torch_tpu\n"
        "torch.manual_seed(0)\n"
        "ps=[torch.nn.Parameter(torch.randn(s, device='tpu')) for s in [(300,200),(70000,),(5,)]]\n"
        "for p in ps: p.grad=torch.randn_like(p)\n"
        "o=torch.optim.AdamW(ps, lr=1e-2)\n"
        "for _ in range(3): o.step()\n"
        "torch.tpu.synchronize()\n"
        "print(torch.tpu.queue_stats()['list_groups'])\n"
        "torch.save([p.detach().cpu() for p in ps], __import__('sys').argv[1])\n"
    )
    outs = {}
    for flag in ("0", "1"):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tpu_list_fusion_{os.getpid()}_{flag}.pt")
        env = dict(os.environ, TORCH_TPU_LIST_FUSION=flag)
        r = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        outs[flag] = (int(r.stdout.strip().splitlines()[-1]), torch.load(path))
        os.remove(path)
    assert outs["0"][0] == 0 and outs["1"][0] > 0
    for a, b in zip(outs["0"][1], outs["1"][1]):
        assert torch.equal(a, b)
    bad = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; torch.ones(1, device='tpu')"],
                         env=dict(os.environ, TORCH_TPU_LIST_FUSION="maybe"), capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0 and "TORCH_TPU_LIST_FUSION" in bad.stderr


@pytest.mark.parametrize("dtype,call", [
    (torch.int32, lambda l: torch._foreach_add_(l, 1.5)),
    (torch.int32, lambda l: torch._foreach_sqrt_(l)),
    (torch.int64, lambda l: torch._foreach_div_(l, 2)),
    (torch.bool, lambda l: torch._foreach_add_(l, 1)),
    (torch.int32, lambda l: torch._foreach_mul_(l, [1.0, 2.5])),
])
def test_inplace_result_type_must_cast_like_cpu(dtype, call):
    """No meta function runs for list ops that return nothing, so the kernel
    applies PyTorch's in-place rule itself: int32 += 1.5 raises as on the CPU,
    and the list is left untouched."""
    cpu = [torch.ones(4, dtype=dtype), torch.ones(3, dtype=dtype)]
    dev = _tpu(cpu)
    with pytest.raises(RuntimeError, match="can't be cast") as want:
        call(cpu)
    with pytest.raises(RuntimeError, match="can't be cast"):
        call(dev)
    for a, b in zip(dev, cpu):
        assert torch.equal(a.cpu(), b)
    assert "can't be cast" in str(want.value)
    ok = _tpu([torch.ones(4, dtype=torch.int64)])
    torch._foreach_add_(ok, 2)  # integers stay allowed
    assert ok[0].cpu().tolist() == [3, 3, 3, 3]
