"""The tpu device on the pjrt driver, run on XLA's CPU PJRT plugin (PyPI
`xla-cpu-pjrt`, installed by scripts/setup.sh). Each test runs in a fresh
process: the driver is chosen once, at runtime initialisation.

On pjrt the device's memory is opaque (PJRT buffers behind reserved address
ranges). Ops have no StableHLO lowering yet: they take PyTorch's CPU fallback,
and strided copies stage through the host. These tests check that PyTorch's
semantics hold on that path and that failures are clear errors."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plugin_installed():
    import importlib.util

    try:
        return importlib.util.find_spec("xla_plugins.xla_cpu_pjrt") is not None
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(
    not _plugin_installed() and os.environ.get("CI") != "true",
    reason="XLA's CPU PJRT plugin (xla-cpu-pjrt) is not installed; scripts/setup.sh installs it")


def run_pjrt(code, timeout=240, **env):
    """Runs `code` in a new interpreter with TORCH_TPU_DRIVER=pjrt; returns
    the completed process (stdout, stderr, returncode)."""
    e = dict(os.environ)
    for k in ("TORCH_TPU_PJRT_PLUGIN", "TORCH_TPU_PJRT_OPTIONS", "TORCH_TPU_PJRT_MEMORY"):
        e.pop(k, None)
    e.update({"TORCH_TPU_DRIVER": "pjrt", "TORCH_TPU_HOST_DEVICES": "2", "PYTHONPATH": ROOT})
    e.update({k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                          text=True, timeout=timeout)


def check_ok(code, **env):
    p = run_pjrt(code, **env)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}"
    return p.stdout


def test_chips_and_properties():
    out = check_ok("""
        import torch, torch_tpu
        assert torch.tpu.device_count() == 2, torch.tpu.device_count()
        p = torch.tpu.get_device_properties(1)
        assert p.driver == "pjrt" and p.platform == "cpu" and p.index == 1, p
        assert p.total_memory > 0
        print(p)
    """)
    assert "driver='pjrt'" in out and "platform='cpu'" in out


def test_round_trips_views_and_inplace():
    check_ok("""
        import torch, torch_tpu
        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
                      torch.int32, torch.int8, torch.uint8, torch.bool):
            c = (torch.randn(5, 7) * 10).to(dtype)
            t = c.to("tpu")
            assert t.device.type == "tpu"
            assert torch.equal(t.cpu(), c), dtype
            assert torch.equal(t.t().cpu(), c.t()), dtype          # strided read
            assert torch.equal(t[1:4, ::2].cpu(), c[1:4, ::2]), dtype
            assert torch.equal(t.t().contiguous().cpu(), c.t().contiguous()), dtype
            assert torch.equal(c.t().to("tpu").cpu(), c.t()), dtype  # strided write
        # writes through views reach the base, PyTorch's aliasing holds
        c = torch.arange(20.).reshape(4, 5)
        t = c.to("tpu")
        v = t[:, 1]
        v.add_(100)                 # CPU fallback, result copied back into the view
        c[:, 1].add_(100)
        assert torch.equal(t.cpu(), c)
        t[2:, 3:] = torch.tensor([[-1., -2.], [-3., -4.]])
        c[2:, 3:] = torch.tensor([[-1., -2.], [-3., -4.]])
        assert torch.equal(t.cpu(), c)
        t.fill_(7)
        assert torch.equal(t.cpu(), torch.full((4, 5), 7.))
        assert t[1, 2].item() == 7.0
        # 0-size and 0-dim
        assert torch.empty(0, 3, device="tpu").cpu().shape == (0, 3)
        assert torch.tensor(3.5, device="tpu").item() == 3.5
        # resize keeps the old bytes
        r = torch.arange(6., device="tpu")
        r.resize_(10)
        assert torch.equal(r[:6].cpu(), torch.arange(6.))
    """)


def test_ops_match_cpu_through_the_fallback():
    out = check_ok("""
        import torch, torch_tpu
        torch.manual_seed(0)
        a, b = torch.randn(8, 16), torch.randn(16, 4)
        want = (a @ b + 1).softmax(-1)
        got = (a.to("tpu") @ b.to("tpu") + 1).softmax(-1)
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), want)
        x = torch.randn(3, 4, requires_grad=True)
        xt = x.detach().to("tpu").requires_grad_()
        (x.sin() * 2).sum().backward()
        (xt.sin() * 2).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), x.grad)
        rep = torch_tpu.fallback_report()
        assert any("mm" in k for k in rep), rep
        print("fallbacks", len(rep))
    """)
    assert "fallbacks" in out


def test_peer_copy_and_memory_stats():
    check_ok("""
        import torch, torch_tpu
        c = torch.randn(64, 33)
        a = c.to("tpu:0")
        before = torch.tpu.memory_allocated(1)
        b = a.to("tpu:1")
        assert b.device == torch.device("tpu", 1)
        assert torch.tpu.memory_allocated(1) >= before + c.numel() * 4
        assert torch.equal(b.cpu(), c)
        assert torch.equal(a.t().to("tpu:1").cpu(), c.t())
        del b
        torch.tpu.synchronize()
        assert torch.tpu.memory_allocated(1) == before
    """)


def test_out_of_memory_is_recoverable():
    check_ok("""
        import torch, torch_tpu
        try:
            torch.empty(200 * 2**20, dtype=torch.uint8, device="tpu")
        except torch.OutOfMemoryError as e:
            assert "tpu:0 out of memory" in str(e), e
        else:
            raise AssertionError("no OutOfMemoryError")
        x = torch.ones(1000, device="tpu")
        assert x.sum().item() == 1000
    """, TORCH_TPU_PJRT_MEMORY="64M")


def test_compile_runs_graphs_op_by_op():
    check_ok("""
        import torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        def f(x, y):
            return torch.relu(x @ y) * 2 + 1
        x, y = torch.randn(4, 8), torch.randn(8, 3)
        got = torch.compile(f, backend="tpu")(x.to("tpu"), y.to("tpu"))
        torch.testing.assert_close(got.cpu(), f(x, y))
        assert compile_stats()["eager_graphs"] >= 1
    """)


def test_missing_or_broken_plugin_is_a_clear_error():
    p = run_pjrt("import torch_tpu", TORCH_TPU_PJRT_PLUGIN="/nonexistent/plugin.so")
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "cannot load the PJRT plugin '/nonexistent/plugin.so'" in p.stderr
    p = run_pjrt("import torch_tpu", TORCH_TPU_PJRT_PLUGIN="libm.so.6")
    assert p.returncode == 1 and "is not a PJRT plugin: it has no GetPjrtApi" in p.stderr, p.stderr[-2000:]
    p = run_pjrt("import torch_tpu", TORCH_TPU_DRIVER="tpu9")
    assert p.returncode == 1 and "TORCH_TPU_DRIVER" in p.stderr, p.stderr[-2000:]
