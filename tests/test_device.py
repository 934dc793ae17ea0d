"""The tpu device in stock PyTorch (issue 2): allocation, copies, the
torch.tpu module, errors, and what users expect of any device."""
import io
import os
import subprocess
import sys

import pytest
from conftest import DRIVER
import torch
import torch_tpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_py(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


# ---- the done-when checks ----------------------------------------------------


def test_matmul_sum_item_matches_cpu():
    x = torch.randn(1000, 1000, device="tpu")
    assert x.device.type == "tpu"
    got = (x @ x).sum().item()
    xc = x.cpu()
    ref = (xc @ xc).sum().item()
    scale = (xc @ xc).abs().sum().item()
    assert abs(got - ref) <= 1e-5 * scale, (got, ref)
    torch.testing.assert_close((x @ x).cpu(), xc @ xc, rtol=1e-4, atol=1e-3)


def test_out_of_memory_is_recoverable():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    ooms = torch.tpu.memory_stats()["num_ooms"]
    budget = torch.tpu.get_device_properties().total_memory
    with pytest.raises(torch.OutOfMemoryError) as ei:
        torch.empty(budget + (1 << 20), dtype=torch.uint8, device="tpu")
    msg = str(ei.value)
    assert "tpu:0" in msg and str(budget + (1 << 20)) in msg and "free" in msg
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    assert torch.tpu.memory_allocated() == base  # nothing leaked
    y = torch.ones(1 << 20, device="tpu")  # a smaller allocation works
    assert y.sum().item() == float(1 << 20)
    del y
    assert torch.tpu.memory_allocated() == base


def test_fallback_is_counted_and_can_be_forbidden(monkeypatch):
    torch_tpu.reset_fallback_report()
    a = torch.randn(4, 4)
    a = a @ a.T + torch.eye(4)
    x = a.to("tpu")
    # The LDL factorisation (aten::linalg_ldl_factor_ex, LAPACK's Bunch-Kaufman pivoting) has no
    # kernel and no decomposition on the device: it runs on the CPU and is counted.
    ld, piv = torch.linalg.ldl_factor(x)
    want_ld, want_piv = torch.linalg.ldl_factor(a)
    torch.testing.assert_close(ld.cpu(), want_ld)
    assert torch.equal(piv.cpu(), want_piv)
    assert ld.device.type == "tpu" and piv.device.type == "tpu"
    assert torch_tpu.fallback_report().get("aten::linalg_ldl_factor_ex.out", 0) == 1
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match="linalg_ldl_factor_ex"):
        torch.linalg.ldl_factor(x)
    monkeypatch.delenv("TORCH_TPU_FALLBACK")
    assert torch.linalg.ldl_factor(x)[0].device.type == "tpu"  # process still usable


def test_two_virtual_chips_and_peer_copies():
    assert torch.tpu.device_count() == 2  # conftest sets TORCH_TPU_HOST_DEVICES=2
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu:0")
    b = a.to("tpu:1")
    assert b.device == torch.device("tpu:1")
    torch.testing.assert_close(b.cpu(), a.cpu())
    c = b.t().to("tpu:0")  # non-contiguous source across chips
    torch.testing.assert_close(c.cpu(), a.cpu().t())
    d = a.to("tpu:1", dtype=torch.float16)  # cast on the way
    assert d.dtype == torch.float16
    torch.testing.assert_close(d.cpu(), a.cpu().half())
    with pytest.raises(RuntimeError, match="same device"):
        a + b


def test_device_out_of_range_is_clear():
    with pytest.raises(Exception, match=r"tpu:7") as ei:
        torch.empty(1, device="tpu:7")
    assert "2" in str(ei.value)  # names how many chips exist
    with pytest.raises(Exception, match=r"tpu:7"):
        torch.tpu.set_device(7)
    assert torch.ones(1, device="tpu").item() == 1.0


def test_dtype_without_kernels_falls_back_and_names_op_and_dtype(monkeypatch):
    # uint16 has no C kernels: the op runs on the counted CPU fallback ...
    x = torch.empty(4, dtype=torch.uint16, device="tpu")
    torch_tpu.reset_fallback_report()
    x.fill_(7)
    assert torch.equal(x.cpu(), torch.full((4,), 7, dtype=torch.uint16))
    assert torch_tpu.fallback_report().get("aten::fill_.Scalar") == 1, torch_tpu.fallback_report()
    # ... and where the fallback is forbidden, the error names the op and the dtype
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match=r"aten::fill_\.Scalar \(tensor arguments: UInt16\)"):
        x.fill_(1)
    assert torch.zeros(2, device="tpu").sum().item() == 0.0


def test_async_kernel_error_surfaces_at_synchronize():
    x = torch.arange(5.0, device="tpu")
    idx = torch.tensor([0, 7], device="tpu")
    try:
        y = torch.index_select(x, 0, idx)  # queued; the bad index is seen by the kernel
    except IndexError as e:  # a runtime that detects it early is fine too
        assert "index_select" in str(e)
        return
    with pytest.raises(IndexError, match=r"index_select.*7|7.*index_select"):
        torch.tpu.synchronize()
    # the device is usable afterwards
    assert torch.index_select(x, 0, torch.tensor([4], device="tpu")).item() == 4.0
    del y


# ---- torch.tpu ---------------------------------------------------------------


def test_torch_tpu_module_basics():
    assert torch.tpu.is_available()
    assert torch.tpu.current_device() == 0
    assert "tpu" in torch.tpu.get_device_name().lower()
    props = torch.tpu.get_device_properties(0)
    if DRIVER == "host":  # conftest's TORCH_TPU_HOST_MEMORY; pjrt reports the plugin's memory
        assert props.total_memory == 2 * 1024**3
    free, total = torch.tpu.mem_get_info()
    assert total == props.total_memory and 0 < free <= total
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        assert torch.empty(2, device="tpu").device == torch.device("tpu:1")
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:1")
    assert torch.tpu.current_device() == 1
    torch.tpu.set_device(0)
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_memory_statistics():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.float32, device="tpu")
    assert torch.tpu.memory_allocated() >= base + 4 * (1 << 20)
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    stats = torch.tpu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "num_ooms", "allocation.all.allocated"):
        assert key in stats
    del x
    assert torch.tpu.memory_allocated() == base
    if DRIVER == "host":  # the host driver caches freed blocks; pjrt destroys the PJRT buffer
        assert torch.tpu.memory_reserved() > 0  # cached
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() <= base + (4 << 20)
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()


def test_manual_seed_and_rng_state():
    torch.manual_seed(1234)
    a = torch.randn(100, device="tpu").cpu()
    torch.manual_seed(1234)
    b = torch.randn(100, device="tpu").cpu()
    assert torch.equal(a, b)
    c = torch.randn(100, device="tpu").cpu()
    assert not torch.equal(b, c)
    assert abs(a.mean().item()) < 0.5 and 0.6 < a.std().item() < 1.4
    state = torch.tpu.get_rng_state()
    d = torch.rand(10, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    e = torch.rand(10, device="tpu").cpu()
    assert torch.equal(d, e)
    torch.tpu.manual_seed(7)
    assert torch.tpu.initial_seed() == 7
    g = torch.Generator(device="tpu")
    g.manual_seed(99)
    f1 = torch.rand(5, device="tpu", generator=g).cpu()
    g.manual_seed(99)
    f2 = torch.rand(5, device="tpu", generator=g).cpu()
    assert torch.equal(f1, f2)


def test_streams_and_events():
    s = torch.tpu.current_stream()
    assert s.device == torch.device("tpu:0")
    with torch.tpu.stream(torch.tpu.Stream()):
        x = torch.ones(256, 256, device="tpu")
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    start.record()
    y = x @ x
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0.0
    s.synchronize()
    assert y[0, 0].item() == 256.0


def test_record_stream_runs_on_the_device(no_fallback):
    # Diffusers' group offloading with use_stream=True uploads weights on a side stream, then
    # calls record_stream(current stream) on them: it took the CPU fallback, which cannot run it
    torch_tpu.reset_fallback_report()
    x = torch.randn(64, 64)
    side = torch.tpu.Stream()
    with torch.tpu.stream(side):
        t = x.to("tpu", non_blocking=True)
    t.record_stream(torch.tpu.current_stream())
    y = t @ t
    del t
    w = torch.full((64, 64), 3.0, device="tpu")  # may reuse the freed block, queued behind the matmul
    torch.testing.assert_close(y.cpu(), x @ x)
    assert w.sum().item() == 3.0 * 64 * 64
    assert "record_stream" not in str(torch_tpu.fallback_report())
    with pytest.raises(RuntimeError, match="record_stream: the stream is on tpu:1"):
        torch.ones(2, device="tpu:0").record_stream(torch.tpu.Stream(1))
    with pytest.raises(RuntimeError, match="record_stream: the stream is on cpu"):
        torch.ones(2, device="tpu:0").record_stream(torch.Stream(device="cpu"))


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.synchronize()
    assert torch.accelerator.current_device_index() == 0


def test_autocast_bfloat16():
    a = torch.randn(8, 8, device="tpu")
    with torch.amp.autocast("tpu", dtype=torch.bfloat16):
        c = a @ a
    assert c.dtype == torch.bfloat16
    torch.testing.assert_close(c.float().cpu(), (a.cpu() @ a.cpu()), rtol=2e-2, atol=5e-2)


# ---- what users expect of a device -----------------------------------------------


def test_to_and_from_device_and_helpers():
    c = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = c.to("tpu")
    assert t.is_tpu and not c.is_tpu
    assert torch.equal(t.cpu(), c)
    assert torch.equal(c.tpu().cpu(), c)
    assert torch.equal(t.to("cpu", dtype=torch.int64), c.long())
    assert torch.equal(c.to("tpu", non_blocking=True).cpu(), c)
    t2 = t.t().contiguous()
    assert torch.equal(t2.cpu(), c.t())
    assert torch.device("tpu:1").index == 1
    assert "device='tpu:0'" in repr(t)


def test_module_to_tpu_and_autograd():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(lin.state_dict())
    lin.to("tpu")
    assert lin.weight.device.type == "tpu"
    x = torch.randn(5, 4)
    out = lin(x.to("tpu"))
    out.sum().backward()
    rout = ref(x)
    rout.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), rout.detach())
    torch.testing.assert_close(lin.weight.grad.cpu(), ref.weight.grad)
    torch.testing.assert_close(lin.bias.grad.cpu(), ref.bias.grad)


def test_save_and_load_with_map_location(tmp_path):
    t = torch.arange(10, dtype=torch.float32, device="tpu")
    path = tmp_path / "t.pt"
    torch.save({"t": t}, path)
    cpu = torch.load(path, map_location="cpu")["t"]
    assert cpu.device.type == "cpu" and torch.equal(cpu, t.cpu())
    back = torch.load(path, map_location="tpu")["t"]
    assert back.device.type == "tpu" and torch.equal(back.cpu(), t.cpu())
    buf = io.BytesIO()
    torch.save(torch.ones(3), buf)
    buf.seek(0)
    assert torch.load(buf, map_location="tpu:1").device == torch.device("tpu:1")


def test_pin_memory():
    p = torch.arange(8.0).pin_memory()
    assert p.is_pinned()
    assert torch.equal(p.to("tpu", non_blocking=True).cpu(), torch.arange(8.0))


def test_views_and_inplace_on_device():
    x = torch.arange(12.0, device="tpu").reshape(3, 4)
    v = x[1:, ::2]
    assert v.shape == (2, 2) and torch.equal(v.cpu(), torch.arange(12.0).reshape(3, 4)[1:, ::2])
    x.resize_(2, 2)
    assert x.shape == (2, 2)
    y = torch.empty(0, device="tpu")
    y.resize_(100)
    assert y.numel() == 100


# ---- packaging / environment ------------------------------------------------------


def test_autoload_and_opt_out():
    code = "import torch; print(torch.ones(2, device='tpu').sum().item())"
    r = run_py(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("2.0")
    r = run_py(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode != 0


def _mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


@pytest.mark.host_driver
@pytest.mark.parametrize("chips", [1, 2])
def test_default_memory_budget_is_most_of_available_memory(chips):
    # 90% of the memory available at initialisation, divided by the chip count
    # (no container limit here, or MemAvailable would not be the bound).
    avail = _mem_available()
    if avail is None or os.path.exists("/sys/fs/cgroup/memory.max") and \
            open("/sys/fs/cgroup/memory.max").read().strip() != "max":
        pytest.skip("needs /proc/meminfo and no cgroup v2 memory limit")
    env = dict(os.environ, TORCH_TPU_HOST_DEVICES=str(chips))
    env.pop("TORCH_TPU_HOST_MEMORY", None)
    code = ("import torch, torch_tpu; "
            "print(*[torch.tpu.get_device_properties(i).total_memory for i in range(torch.tpu.device_count())])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    budgets = [int(v) for v in r.stdout.split()[-chips:]]
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for b in budgets:
        assert 0.9 * avail / chips * 0.8 <= b <= phys / chips, (b, avail, phys)
    assert len(set(budgets)) == 1


def test_default_is_one_chip_and_bad_env_is_reported():
    env = dict(os.environ)
    env.pop("TORCH_TPU_HOST_DEVICES", None)
    env.pop("TORCH_TPU_HOST_MEMORY", None)
    r = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; print(torch.tpu.device_count())"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("1")
    if DRIVER == "host":  # a variable of the host driver: the pjrt driver does not read it
        r = run_py("import torch_tpu", TORCH_TPU_HOST_MEMORY="lots")
        assert r.returncode != 0 and "TORCH_TPU_HOST_MEMORY" in r.stderr
