"""Native fused Adam/AdamW (runtime/kernels/optim.c): torch.optim's fused=True
path (Transformers' default optimizer, "adamw_torch_fused") against the same
optimizer on the CPU, several steps, every option."""
import pytest
import torch

import torch_tpu


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 5), (300,), (4, 3, 2), (1,)]
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def _run(device, opt_cls, dtype, steps=3, **kw):
    params = [p.to(device).requires_grad_() for p in _params(dtype)]
    opt = opt_cls(params, **{"lr": 1e-2, "fused": True, **kw})
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(dtype).to(device)
        opt.step()
    state = [opt.state[p] for p in params]
    return params, state


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"amsgrad": True, "weight_decay": 0.05},
                                {"maximize": True}, {"lr": torch.tensor(3e-3)}])
def test_fused_adam_matches_cpu(opt_cls, kw, no_fallback):
    kw_tpu = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    pt, st = _run("tpu", opt_cls, torch.float32, **kw_tpu)
    pc, sc = _run("cpu", opt_cls, torch.float32, **kw)
    for a, b in zip(pt, pc):
        torch.testing.assert_close(a.detach().cpu(), b.detach())
    for a, b in zip(st, sc):
        for k in b:
            torch.testing.assert_close(a[k].cpu(), b[k])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_adamw_half_params(dtype, no_fallback):
    pt, _ = _run("tpu", torch.optim.AdamW, dtype, weight_decay=0.01)
    pc, _ = _run("cpu", torch.optim.AdamW, dtype, weight_decay=0.01)
    for a, b in zip(pt, pc):
        torch.testing.assert_close(a.detach().cpu(), b.detach())


def test_grad_scale_and_found_inf(no_fallback):
    """The AMP arguments: gradients divided by grad_scale; found_inf == 1 skips the step."""
    def call(device, found):
        ps = [p.to(device) for p in _params(torch.float32)]
        gs = [torch.ones_like(p) * 4 for p in ps]
        ms = [torch.zeros_like(p) for p in ps]
        vs = [torch.zeros_like(p) for p in ps]
        steps = [torch.tensor(1.0, device=device) for _ in ps]
        torch._fused_adamw_(ps, gs, ms, vs, [], steps, lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0,
                            eps=1e-8, amsgrad=False, maximize=False,
                            grad_scale=torch.tensor(2.0, device=device),
                            found_inf=torch.tensor(found, device=device))
        return ps, ms

    for found in (0.0, 1.0):
        (pt, mt), (pc, mc) = call("tpu", found), call("cpu", found)
        for a, b in zip(pt + mt, pc + mc):
            torch.testing.assert_close(a.cpu(), b)
    assert torch.equal(call("tpu", 1.0)[0][0].cpu(), _params(torch.float32)[0])  # skipped: unchanged


def test_bad_lists_name_the_op():
    p = [torch.zeros(3, device="tpu")]
    with pytest.raises(Exception, match="_fused_adamw_.*exp_avgs"):
        torch._fused_adamw_(p, [torch.zeros(3, device="tpu")], [torch.zeros(4, device="tpu")],
                            [torch.zeros(3, device="tpu")], [], [torch.tensor(1.0, device="tpu")], lr=0.1,
                            beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # the device stays usable
    assert torch_tpu.fallback_report().get("aten::_fused_adamw_") is None
