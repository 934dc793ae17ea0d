"""The tpu device on the pjrt driver, run on XLA's CPU PJRT plugin (PyPI
`xla-cpu-pjrt`, installed by scripts/setup.sh). Each test runs in a fresh
process: the driver is chosen once, at runtime initialisation.

On pjrt the device's memory is opaque (PJRT buffers behind reserved address
ranges). A first set of ops (elementwise arithmetic and math, mm) runs as
StableHLO programs on the device; the others take PyTorch's CPU fallback, and
strided copies stage through the host. Under torch.compile each segment of
lowerable nodes is one StableHLO module, one PJRT execution per run. These tests check that PyTorch's
semantics hold on both paths and that failures are clear errors."""
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
        # cummax's helper returns nothing: a host kernel only, never staged here: the CPU fallback
        want = torch.cummax(a @ b + 1, dim=-1).values
        got = torch.cummax(a.to("tpu") @ b.to("tpu") + 1, dim=-1).values
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), want)
        x = torch.randn(3, 4, requires_grad=True)
        xt = x.detach().to("tpu").requires_grad_()
        (x.sin() * 2).sum().backward()
        (xt.sin() * 2).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), x.grad)
        rep = torch_tpu.fallback_report()
        assert any("cummax" in k for k in rep), rep
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


def test_memory_snapshot():
    """torch.tpu.memory._snapshot() on pjrt: one active block per live allocation (the driver
    caches nothing), sizes adding up to memory_allocated/memory_reserved on each chip, a freed
    allocation gone at once; PyTorch's CUDA snapshot tool reads it."""
    check_ok("""
        import torch, torch_tpu
        from torch.cuda import _memory_viz
        x = torch.empty(1000, device="tpu")
        big = torch.empty(3 << 20, dtype=torch.uint8, device="tpu")
        y = torch.ones(10, device="tpu:1")
        snap = torch.tpu.memory._snapshot()
        assert snap["allocator_settings"]["driver"] == "pjrt"
        segs = {(s["device"], s["address"]): s for s in snap["segments"]}
        for t, kind in ((x, "small"), (big, "large"), (y, "small")):
            seg = segs[(t.device.index, t.data_ptr())]
            (blk,) = seg["blocks"]
            assert blk["state"] == "active_allocated" and blk["requested_size"] == blk["size"] == t.nbytes, seg
            assert seg["segment_type"] == kind and seg["allocated_size"] == t.nbytes, seg
        assert all(s["blocks"][0]["state"] == "active_allocated" for s in snap["segments"])
        for d in (0, 1):
            on = [s for s in snap["segments"] if s["device"] == d]
            assert [s["address"] for s in on] == sorted(s["address"] for s in on)
            assert sum(s["allocated_size"] for s in on) == torch.tpu.memory_allocated(d)
            assert sum(s["total_size"] for s in on) == torch.tpu.memory_reserved(d)
        assert [s["device"] for s in torch.tpu.memory._snapshot("tpu:1")["segments"]] == \
            [s["device"] for s in snap["segments"] if s["device"] == 1]
        addr = big.data_ptr()
        del big
        torch.tpu.synchronize()
        assert addr not in {s["address"] for s in torch.tpu.memory._snapshot(0)["segments"]}
        assert f"segments: {len(snap['segments'])}" in _memory_viz.segsum(snap)
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


def test_compiled_graph_is_one_program_per_run():
    check_ok("""
        import torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        def f(x, y, b):
            h = torch.relu(x.t() @ y) * 2 + b   # a transposed input, a broadcast bias
            return h, (h - 1).exp().sum(dim=1)
        torch.manual_seed(0)  # XLA's and the CPU's exp differ by ulps; unseeded, their sums sometimes exceed rtol
        x, y, b = torch.randn(8, 4), torch.randn(8, 3), torch.randn(3)
        args = [a.to("tpu") for a in (x, y, b)]
        cf = torch.compile(f, backend="tpu")
        got = cf(*args)
        for g, w in zip(got, f(x, y, b)):
            torch.testing.assert_close(g.cpu(), w)
        st = compile_stats()
        assert st["driver_segments"] == 1 and st["eager_nodes"] == 0 and st["eager_graphs"] == 0, st
        for _ in range(2):   # each later call: one device program, inputs given again
            before = torch_tpu._C.queue_stats(0)["programs"]
            got = cf(*args)
            assert torch_tpu._C.queue_stats(0)["programs"] == before + 1
        for g, w in zip(got, f(x, y, b)):
            torch.testing.assert_close(g.cpu(), w)
    """)


def test_norms_and_swiglu_are_lowered():
    # tpu::rms_norm and tpu::swiglu (torch_tpu.optimize's ops) and layer norm are StableHLO on
    # pjrt: a compiled block of them is one program per call, no op run eagerly or through the
    # host kernels.
    check_ok("""
        import torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        def f(x, w, g, u):
            h = torch.ops.tpu.rms_norm(x, w, 1e-6, False) + torch.ops.tpu.rms_norm(x, w, 1e-5, True)
            h = h + torch.nn.functional.layer_norm(x, (64,), w, w)
            return torch.ops.tpu.swiglu(g, u, "silu") + torch.ops.tpu.swiglu(g, u, "gelu_tanh"), h
        def ref(x, w, g, u):
            h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
            h2 = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
            h = w * h.to(x.dtype) + (h2 * (1.0 + w.float())).to(x.dtype)
            h = h + torch.nn.functional.layer_norm(x, (64,), w, w)
            gelu = torch.nn.functional.gelu(g, approximate="tanh")
            return torch.nn.functional.silu(g) * u + gelu * u, h
        torch.manual_seed(0)
        for dt in (torch.float32, torch.bfloat16):
            x, w, g, u = (torch.randn(3, 5, 64).to(dt), torch.randn(64).to(dt), torch.randn(4, 96).to(dt),
                          torch.randn(4, 96).to(dt))
            args = [a.to("tpu") for a in (x, w, g, u)]
            torch._dynamo.reset()
            cf = torch.compile(f, backend="tpu")
            st0 = compile_stats()
            for got, want in zip(cf(*args), ref(x, w, g, u)):
                torch.testing.assert_close(got.cpu(), want)
            st = compile_stats()
            assert st["driver_segments"] - st0["driver_segments"] == 1, st
            assert st["eager_nodes"] == st0["eager_nodes"] == 0, st
            before = torch_tpu._C.queue_stats(0)["programs"]
            cf(*args)
            assert torch_tpu._C.queue_stats(0)["programs"] == before + 1
    """)


def test_group_norm_is_lowered():
    # tpu::group_norm (the graph compiler's node for native_group_norm) is StableHLO on pjrt:
    # a compiled group norm, with or without weight and bias, 3-D to 5-D, forward and training
    # (mean and rstd read by the backward), is one program per call with nothing eager, and
    # equals the CPU (float32: rtol 1e-4, atol 1e-5; half types: two units in the last place,
    # statistics summed in another order; float64: PyTorch's defaults).
    check_ok("""
        import torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        F = torch.nn.functional
        def fwd(x, w, b, groups):
            return F.silu(F.group_norm(x, groups, w, b, eps=1e-3)) * 2
        g = torch.Generator().manual_seed(0)
        cases = [((2, 32, 8, 8), 8, True), ((3, 12, 5, 7), 3, False), ((2, 16, 4, 4, 4), 16, True),
                 ((4, 6, 10), 2, True)]
        for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            eps = torch.finfo(dt).eps
            tol = (dict(rtol=1e-4, atol=1e-5) if dt == torch.float32 else
                   dict(rtol=2 * eps, atol=2 * eps) if dt in (torch.bfloat16, torch.float16) else {})
            for shape, groups, affine in cases:
                x = (torch.randn(shape, generator=g) * 3 + 1).to(dt)
                w = torch.randn(shape[1], generator=g).to(dt) if affine else None
                b = torch.randn(shape[1], generator=g).to(dt) if affine else None
                torch._dynamo.reset()
                st0 = compile_stats()
                cf = torch.compile(fwd, backend="tpu", fullgraph=True, dynamic=False)
                tw = None if w is None else w.to("tpu")
                tb = None if b is None else b.to("tpu")
                got = cf(x.to("tpu"), tw, tb, groups)
                torch.testing.assert_close(got.cpu(), fwd(x, w, b, groups), **tol)
                st = compile_stats()
                assert st["driver_segments"] - st0["driver_segments"] == 1, (dt, shape, st)
                assert st["eager_nodes"] == st0["eager_nodes"] == 0, (dt, shape, st)
        # training: forward and backward programs, mean and rstd flow to the backward
        torch.manual_seed(1)
        def run(device):
            torch.manual_seed(1)
            m = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(4, 8),
                                    torch.nn.SiLU()).to(device)
            if device == "tpu":
                m = torch.compile(m, backend="tpu", dynamic=False)
            x = torch.randn(2, 4, 6, 5, generator=torch.Generator().manual_seed(3)).to(device)
            y = m(x)
            y.square().sum().backward()
            return [y.detach().cpu()] + [p.grad.cpu() for p in m.parameters()]
        torch._dynamo.reset()
        st0 = compile_stats()
        got = run("tpu")
        st = compile_stats()
        assert st["eager_nodes"] == st0["eager_nodes"] == 0 and st["driver_segments"] - st0["driver_segments"] == 2, st
        for a, b in zip(got, run("cpu")):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    """)


def _on_both_drivers(code, tmp_path):
    """Runs `code` (which torch.saves a list of tensors to sys.argv[1]) on the host driver and
    on pjrt, each in a fresh process; returns (host's list, pjrt's list)."""
    import torch

    host = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "host.pt")],
                          env=dict(os.environ, TORCH_TPU_DRIVER="host", PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=240)
    assert host.returncode == 0, host.stderr[-3000:]
    p = run_pjrt(code.replace("sys.argv[1]", repr(str(tmp_path / "pjrt.pt"))))
    assert p.returncode == 0, p.stderr[-4000:]
    return torch.load(tmp_path / "host.pt"), torch.load(tmp_path / "pjrt.pt")


def test_dropout_is_a_program_with_the_host_drivers_streams(tmp_path):
    # native_dropout (nn.Dropout in training) is StableHLO on pjrt: Philox4x32-10 from the call's
    # (seed, offset), given to the program as a 16-byte argument, so one executable serves every
    # call. Same Philox counters as runtime/kernels/random.c: outputs and masks equal the host
    # driver's bit for bit, for every float dtype, p from 0 to 1 and a transposed input.
    code = """
        import sys, torch, torch_tpu
        g = torch.Generator().manual_seed(0)
        torch.manual_seed(11)
        outs = []
        for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            for p in (0.0, 0.1, 0.5, 1 / 3, 0.9, 1.0):
                x = (torch.randn(5, 3, 17, generator=g) * 10).to(dt)
                y, m = torch.native_dropout(x.to("tpu").transpose(0, 2), p, True)
                outs += [y.cpu(), m.cpu()]
        y, m = torch.native_dropout(torch.ones(64, device="tpu"), 0.5, False)
        outs += [y.cpu(), m.cpu()]
        if torch_tpu._C.selected_driver() == "pjrt":
            x = torch.ones(4096, device="tpu")
            torch.tpu.synchronize()
            s0 = torch_tpu._C.queue_stats(0)
            for _ in range(3):
                torch.nn.functional.dropout(x, 0.25, training=True)
            torch.tpu.synchronize()
            s1 = torch_tpu._C.queue_stats(0)
            assert s1["programs"] - s0["programs"] == 3, (s0, s1)       # one program per call, nothing staged
            assert s1["program_compiles"] + s1["program_loads"] - s0["program_compiles"] - s0["program_loads"] <= 1
        torch.save(outs, sys.argv[1])
    """
    want, got = _on_both_drivers(code, tmp_path)
    import torch

    assert len(want) == len(got) == 50
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.dtype == w.dtype and torch.equal(g, w), i
    assert want[-1].all() and torch.equal(want[-2], torch.ones(64))  # eval: the input, mask all ones


def test_random_fills_are_programs_with_the_host_drivers_streams(tmp_path):
    # uniform_, normal_ and bernoulli_(p) (rand, randn, nn.init) are StableHLO on pjrt: Philox as
    # the host kernels draw it, each element's counter its rank in the output's memory order (the
    # kernels' iteration: transposed and strided outputs included). Equal to the host driver bit
    # for bit, but float64 outputs with from/to or mean/std, where XLA contracts x * s + a into an
    # FMA: within 2 units in the last place of the range there (values up to 4: atol 1e-14).
    code = """
        import sys, torch, torch_tpu
        torch.manual_seed(7)
        outs = []
        for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            a = torch.empty(6, 5, 7, device="tpu", dtype=dt)
            outs += [a.uniform_().cpu(), a.uniform_(-3, 2).cpu()]
            outs.append(torch.empty(7, 6, device="tpu", dtype=dt).t().uniform_().cpu())
            outs.append(torch.empty(5, 9, 4, device="tpu", dtype=dt)[:, ::2].transpose(0, 2).uniform_(1, 4).cpu())
            outs.append(torch.empty(100, device="tpu", dtype=dt).normal_(2, 3).cpu())
            outs.append(torch.empty(7, 6, device="tpu", dtype=dt).t().normal_().cpu())
        for dt in (torch.float32, torch.bool, torch.int64, torch.uint8, torch.bfloat16):
            for p in (0.0, 0.3, 1.0):
                outs.append(torch.empty(9, 11, device="tpu", dtype=dt).t().bernoulli_(p).cpu())
        outs += [torch.rand(4, 4, device="tpu").cpu(), torch.randn(4, 4, device="tpu").cpu(),
                 torch.nn.init.kaiming_uniform_(torch.empty(8, 8, device="tpu")).cpu()]
        if torch_tpu._C.selected_driver() == "pjrt":
            x = torch.empty(4096, device="tpu")
            torch.tpu.synchronize()
            s0 = torch_tpu._C.queue_stats(0)
            x.uniform_(); x.normal_(); x.bernoulli_(0.5)
            torch.tpu.synchronize()
            assert torch_tpu._C.queue_stats(0)["programs"] - s0["programs"] == 3   # nothing staged
        torch.save(outs, sys.argv[1])
    """
    want, got = _on_both_drivers(code, tmp_path)
    import torch

    assert len(want) == len(got) == 42
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.dtype == w.dtype, i
        if w.dtype == torch.float64:
            torch.testing.assert_close(g, w, rtol=2 * torch.finfo(w.dtype).eps, atol=1e-14, msg=str(i))
        else:
            assert torch.equal(g, w), i
    assert 0.2 < want[-14].float().mean() < 0.4  # bernoulli_(0.3) of a float tensor


def test_programs_are_kept_on_disk(tmp_path):
    code = """
        import torch, torch_tpu
        x = torch.arange(12.).reshape(3, 4).to("tpu")
        y = torch.compile(lambda a: (a.t() @ a).relu() * 2 + 1, backend="tpu")(x)
        z = (x * 3).exp()
        c = x.cpu()
        torch.testing.assert_close(y.cpu(), (c.t() @ c).relu() * 2 + 1)
        torch.testing.assert_close(z.cpu(), (c * 3).exp())
        s = torch_tpu._C.queue_stats(0)
        print("compiles", s["program_compiles"], "loads", s["program_loads"])
    """
    first = check_ok(code, TORCH_TPU_CACHE_DIR=tmp_path)
    assert "loads 0" in first and "compiles 0" not in first, first
    files = [f for f in os.listdir(tmp_path) if f.startswith("pjrt-cpu-") and f.endswith(".exe")]
    assert files, os.listdir(tmp_path)
    second = check_ok(code, TORCH_TPU_CACHE_DIR=tmp_path)   # a new process: every program from disk
    assert "compiles 0" in second and "loads 0" not in second, second
    off = check_ok(code, TORCH_TPU_CACHE_DIR=tmp_path, TORCH_TPU_PJRT_CACHE="0")
    assert "loads 0" in off, off
    # a file that no longer loads (another plugin build, a truncated write) is compiled again
    for f in files:
        with open(os.path.join(tmp_path, f), "r+b") as fh:
            fh.truncate(os.path.getsize(os.path.join(tmp_path, f)) - 100)
    again = check_ok(code, TORCH_TPU_CACHE_DIR=tmp_path)
    assert "compiles 0" not in again, again


def test_compiled_graph_with_ops_the_driver_cannot_lower():
    check_ok("""
        import torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        def f(x):
            a = torch.tanh(x) * 3
            s = torch.cummax(a, dim=1).values   # no StableHLO lowering: runs eagerly
            return (s + x).relu()
        x = torch.randn(5, 6)
        got = torch.compile(f, backend="tpu")(x.to("tpu"))
        torch.testing.assert_close(got.cpu(), f(x))
        st = compile_stats()
        assert st["driver_segments"] == 2 and st["eager_nodes"] >= 1, st
        assert any("cummax" in op for op in st["eager_ops"]), st["eager_ops"]
    """)


def test_compiled_graph_updates_inputs_in_place():
    check_ok("""
        import torch, torch_tpu
        def f(cache, x):
            cache.mul_(2)           # an input updated in place (copy_ back into it)
            cache[1:3] += x          # through a view
            return cache.sum(dim=0) * x[0]
        c0, x = torch.randn(4, 3), torch.randn(2, 3)
        ct = c0.to("tpu")
        cf = torch.compile(f, backend="tpu")
        for _ in range(2):
            want = f(c0, x)
            got = cf(ct, x.to("tpu"))
            torch.testing.assert_close(got.cpu(), want)
            torch.testing.assert_close(ct.cpu(), c0)
    """)


def _libtpu():
    import importlib.util

    try:
        spec = importlib.util.find_spec("libtpu")
    except ImportError:
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "libtpu.so")
        if os.path.isfile(path):
            return path
    return None


@pytest.mark.skipif(_libtpu() is None and os.environ.get("CI") != "true",
                    reason="libtpu is not installed; scripts/test.sh installs it")
def test_libtpu_without_a_tpu_is_a_clear_error():
    # In a network namespace of its own (no cloud metadata server to ask);
    # TPU_SKIP_MDS_QUERY is left to the driver, which sets it without a TPU.
    path = _libtpu()
    assert path, "libtpu is not installed"
    code = "import torch_tpu"
    e = dict(os.environ)
    for k in ("TORCH_TPU_PJRT_OPTIONS", "TPU_SKIP_MDS_QUERY", "TPU_LIBRARY_PATH"):
        e.pop(k, None)
    e.update({"TORCH_TPU_DRIVER": "pjrt", "TORCH_TPU_PJRT_PLUGIN": path, "PYTHONPATH": ROOT})
    cmd = [sys.executable, "-c", code]
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        cmd = ["unshare", "-n"] + cmd
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=180)
    assert p.returncode == 1, (p.returncode, p.stderr[-3000:])
    assert "no TPU found on this machine" in p.stderr, p.stderr[-3000:]
    assert "TORCH_TPU_DRIVER=host" in p.stderr


def test_missing_or_broken_plugin_is_a_clear_error():
    p = run_pjrt("import torch_tpu", TORCH_TPU_PJRT_PLUGIN="/nonexistent/plugin.so")
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "cannot load the PJRT plugin '/nonexistent/plugin.so'" in p.stderr
    p = run_pjrt("import torch_tpu", TORCH_TPU_PJRT_PLUGIN="libm.so.6")
    assert p.returncode == 1 and "is not a PJRT plugin: it has no GetPjrtApi" in p.stderr, p.stderr[-2000:]
    p = run_pjrt("import torch_tpu", TORCH_TPU_DRIVER="tpu9")
    assert p.returncode == 1 and "TORCH_TPU_DRIVER" in p.stderr, p.stderr[-2000:]


def test_lowered_ops_run_on_the_device():
    check_ok("""
        import torch, torch_tpu
        torch.manual_seed(0)
        torch_tpu.reset_fallback_report()
        a, b = torch.randn(6, 5), torch.randn(5)
        A, B = a.to("tpu"), b.to("tpu")
        cases = [
            (A + B, a + b), (A - 2 * B, a - 2 * b), (torch.sub(A, B, alpha=3), torch.sub(a, b, alpha=3)),
            (A * B, a * b), (A / (B.abs() + 1), a / (b.abs() + 1)), (A.exp(), a.exp()), (A.t().tanh(), a.t().tanh()),
            (A.sigmoid(), a.sigmoid()), (torch.maximum(A, B), torch.maximum(a, b)), (-A, -a),
            (A @ A.t(), a @ a.t()), (A.bfloat16() * 3, a.bfloat16() * 3),
            (A.to(torch.int64) + 7, a.to(torch.int64) + 7),
            (A < B, a < b), (A.to(torch.int32) == B.to(torch.int64), a.to(torch.int32) == b.to(torch.int64)),
            (A >= 0.25, a >= 0.25), (torch.where(A > 0, A, B), torch.where(a > 0, a, b)),
            (A.pow(2), a.pow(2)), (A.sum(1, keepdim=True), a.sum(1, keepdim=True)), (A.sum(), a.sum()),
            (A.bfloat16().mean(0), a.bfloat16().mean(0)), (A.t().mean(), a.t().mean()),
            (A.to(torch.int64).sum(0), a.to(torch.int64).sum(0)),
            (1 - A, 1 - a), (torch.rsub(A, 2.5, alpha=2), torch.rsub(a, 2.5, alpha=2)), (0.5 < A, 0.5 < a),
            (3 / (A.abs() + 1), 3 / (a.abs() + 1)),
        ]
        for got, want in cases:
            assert got.device.type == "tpu"
            torch.testing.assert_close(got.cpu(), want)
        # in place through a strided view, out=
        c = a.clone(); C = A.clone()
        c[:, 1::2].mul_(-1.5); C[:, 1::2].mul_(-1.5)
        torch.testing.assert_close(C.cpu(), c)
        o = torch.empty(6, 5, device="tpu")
        torch.exp(A, out=o)
        torch.testing.assert_close(o.cpu(), a.exp())
        rep = torch_tpu.fallback_report()
        for op in ("aten::add.Tensor", "aten::mul.Tensor", "aten::exp", "aten::mm", "aten::tanh", "aten::mul_.Tensor",
                   "aten::lt.Tensor", "aten::eq.Tensor", "aten::where.self", "aten::sum.dim_IntList", "aten::mean.dim"):
            assert op not in rep, (op, rep)
    """)


def test_out_of_range_indices_raise_index_error_at_synchronize():
    """StableHLO's gather clamps and its scatter drops out-of-range indices; the lowerings check
    them on the device and the driver raises IndexError, naming the op and the index, at the next
    synchronize or copy to the host (as CUDA's device-side asserts do). Ranges are PyTorch's:
    [0, size) for index_select, gather and scatter, [-size, size) for index_put. The process
    stays usable."""
    check_ok("""
        import re, torch, torch_tpu
        torch_tpu.reset_fallback_report()
        x = torch.arange(20.).reshape(4, 5)
        X = x.to("tpu")
        I = lambda v: torch.tensor(v, device="tpu")
        def raises(fn, pattern):
            try:
                fn()
                torch.tpu.synchronize()
            except IndexError as e:
                assert re.search(pattern, str(e)), (pattern, str(e))
            else:
                raise AssertionError("no IndexError: " + pattern)
        raises(lambda: torch.index_select(X, 1, I([0, 5])),
               r"index_select.*index 5 is out of bounds for dimension 1 with size 5")
        raises(lambda: torch.index_select(X, 0, I([-1])), r"index_select.*index -1 is out of bounds")
        raises(lambda: torch.gather(X, 1, I([[0, 1], [-1, 0], [0, 9], [0, 0]])),
               r"gather.*index -1 is out of bounds for dimension 1 with size 5")   # the first one
        raises(lambda: X.clone().scatter_(0, I([[0, 4]]), 1.0), r"scatter.*index 4 is out of bounds for dimension 0 with size 4")
        raises(lambda: X.clone().scatter_add_(1, I([[0, 9]]), torch.ones(1, 2, device="tpu")),
               r"scatter_add.*index 9 is out of bounds for dimension 1 with size 5")
        raises(lambda: X.clone().index_put_((I([1, 4]),), torch.tensor(0., device="tpu")),
               r"index_put.*index 4 is out of bounds for dimension 0 with size 4")
        raises(lambda: X.clone().index_put_((I([0]), I([-7])), torch.tensor(1., device="tpu"), accumulate=True),
               r"index_put.*index -7 is out of bounds for dimension 1 with size 5")
        raises(lambda: X[I([0, -5])], r"index.*index -5 is out of bounds for dimension 0 with size 4")
        raises(lambda: X[:, I([[1], [5]])], r"index.*index 5 is out of bounds for dimension 1 with size 5")
        raises(lambda: X.scatter_reduce(1, I([[0, 5]]), torch.ones(1, 2, device="tpu"), "amax"),
               r"scatter_reduce.*index 5 is out of bounds for dimension 1 with size 5")
        # the first error of several is raised, once
        torch.index_select(X, 0, I([9])); torch.index_select(X, 0, I([8]))
        raises(lambda: None, r"index 9 is")
        torch.tpu.synchronize()
        # a copy to the host raises it too
        try:
            torch.index_select(X, 0, I([7])).cpu()
        except IndexError as e:
            assert "index_select" in str(e) and "index 7" in str(e), str(e)
        else:
            raise AssertionError("no IndexError at .cpu()")
        # indices in range (negative ones for index_put), and the device after the errors
        i, j = torch.tensor([4, 0, 2]), torch.tensor([[4, 0], [1, 3], [0, 0], [2, 4]])
        torch.testing.assert_close(torch.index_select(X, 1, i.to("tpu")).cpu(), torch.index_select(x, 1, i))
        torch.testing.assert_close(torch.gather(X, 1, j.to("tpu")).cpu(), torch.gather(x, 1, j))
        torch.testing.assert_close(X.clone().scatter_(1, j.to("tpu"), -1.0).cpu(), x.clone().scatter_(1, j, -1.0))
        k = torch.tensor([-1, 0, -4])
        torch.testing.assert_close(X.clone().index_put_((k.to("tpu"),), torch.tensor(7., device="tpu")).cpu(),
                                   x.clone().index_put_((k,), torch.tensor(7.)))
        torch.testing.assert_close(X[k.to("tpu"), -5].cpu(), x[k, -5])
        torch.tpu.synchronize()
        rep = torch_tpu.fallback_report()
        for op in ("aten::index_select", "aten::gather", "aten::scatter_.value", "aten::scatter_add_", "aten::index_put_",
                   "aten::index.Tensor", "aten::scatter_reduce.two"):
            assert op not in rep, (op, rep)
    """)


def test_compiled_graph_checks_indices():
    """A compiled graph's program returns its nodes' checks too: the first failing one is raised."""
    check_ok("""
        import re, torch, torch_tpu
        from torch_tpu._dynamo_backend import compile_stats
        def f(x, i, j):
            return torch.gather(x * 2, 1, j) + torch.index_select(x, 0, i)
        x = torch.randn(5, 3)
        X = x.to("tpu")
        i, j = torch.tensor([4, 3, 0, 1, 2]), torch.randint(0, 3, (5, 3))
        cf = torch.compile(f, backend="tpu")
        torch.testing.assert_close(cf(X, i.to("tpu"), j.to("tpu")).cpu(), f(x, i, j))
        st = compile_stats()
        assert st["driver_segments"] >= 1 and st["eager_nodes"] == 0, st
        for bad_i, bad_j, want in (([0, 1, 5, 0, 0], j, "index_select"), (i, [[0, 0, 0]] * 4 + [[0, 3, 0]], "gather"),
                                       (i, [[0, -1, 0]] * 5, "gather")):
            try:
                cf(X, torch.tensor(bad_i, device="tpu"), torch.tensor(bad_j, device="tpu"))
                torch.tpu.synchronize()
            except IndexError as e:
                assert re.search(want + r".*index (5|3|-1) is out of bounds", str(e)), str(e)
            else:
                raise AssertionError("no IndexError from the compiled " + want)
        torch.testing.assert_close(cf(X, i.to("tpu"), j.to("tpu")).cpu(), f(x, i, j))
    """)


@pytest.mark.slow
def test_tiny_llama_forward_backward_generate_equal_cpu():
    check_ok("""
        import torch, torch_tpu
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        cpu = LlamaForCausalLM(cfg).eval()
        dev = LlamaForCausalLM(cfg).eval()
        dev.load_state_dict(cpu.state_dict())
        dev.to("tpu")
        ids = torch.randint(0, 97, (2, 7))
        with torch.no_grad():
            want = cpu(ids).logits
            got = dev(ids.to("tpu")).logits
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
        loss_c = cpu(ids, labels=ids).loss
        loss_c.backward()
        loss_t = dev(ids.to("tpu"), labels=ids.to("tpu")).loss
        loss_t.backward()
        torch.testing.assert_close(loss_t.cpu(), loss_c, rtol=1e-4, atol=1e-4)
        g_c = cpu.model.layers[0].mlp.down_proj.weight.grad
        g_t = dev.model.layers[0].mlp.down_proj.weight.grad
        torch.testing.assert_close(g_t.cpu(), g_c, rtol=1e-3, atol=1e-4)
        with torch.no_grad():
            a = cpu.generate(ids[:1], max_new_tokens=5, do_sample=False)
            b = dev.generate(ids[:1].to("tpu"), max_new_tokens=5, do_sample=False)
        assert torch.equal(a, b.cpu()), (a, b)
        print("on device", torch_tpu._C.native_count(), "fallback", sum(torch_tpu.fallback_report().values()))
    """)


@pytest.mark.slow
def test_compiled_tiny_llama_equals_cpu_with_one_program_per_segment():
    out = check_ok("""
        import torch, torch_tpu
        from transformers import LlamaConfig, LlamaForCausalLM
        from torch_tpu._dynamo_backend import compile_stats
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        cpu = LlamaForCausalLM(cfg).eval()
        dev = LlamaForCausalLM(cfg).eval()
        dev.load_state_dict(cpu.state_dict())
        dev.to("tpu")
        ids = torch.randint(0, 128, (2, 9))
        cf = torch.compile(dev, backend="tpu")
        with torch.no_grad():
            want = cpu(ids).logits
            torch.testing.assert_close(cf(ids.to("tpu")).logits.cpu(), want, rtol=1e-4, atol=1e-4)
            before = torch_tpu._C.queue_stats(0)["programs"]
            got = cf(ids.to("tpu")).logits
            programs = torch_tpu._C.queue_stats(0)["programs"] - before
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
        st = compile_stats()
        eager = sum(st["eager_ops"].values())
        # the whole forward is one segment, one StableHLO program per call
        assert st["driver_segments"] == 1 and eager == 0 and programs == 1, (programs, st)
        print("PROGRAMS", programs, "SEGMENTS", st["driver_segments"], "EAGER", eager, st["eager_ops"])
    """, timeout=900)
    print(out)


@pytest.mark.slow
def test_main_job_greedy_tokens_equal_cpu():
    # the README's main job on the pjrt driver (SmolLM2-135M from its GGUF), few tokens:
    # most of a decode step still takes the CPU fallback there (about 0.3 tokens/s)
    e = dict(os.environ)
    for k in ("TORCH_TPU_PJRT_PLUGIN", "TORCH_TPU_PJRT_OPTIONS", "TORCH_TPU_PJRT_MEMORY"):
        e.pop(k, None)
    e.update({"TORCH_TPU_DRIVER": "pjrt", "PYTHONPATH": ROOT})
    p = subprocess.run([sys.executable, "-m", "torch_tpu.generate", "The future of AI is", "--max-new-tokens", "6",
                        "--compare-cpu"], env=e, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "greedy tokens identical on tpu and cpu: True" in p.stdout, p.stdout[-3000:]


def test_graph_capture_is_refused_clearly():
    # torch.tpu.graph needs the host driver's capture; on pjrt it says so and nothing changes.
    check_ok("""
        import torch, torch_tpu
        g = torch.tpu.TPUGraph()
        try:
            with torch.tpu.graph(g):
                pass
        except NotImplementedError as e:
            assert "pjrt driver" in str(e) and "cannot capture" in str(e), e
        else:
            raise AssertionError("no error")
        assert not torch.tpu.is_current_stream_capturing()
        x = torch.ones(3, device="tpu")
        assert (x + 1).cpu().tolist() == [2.0] * 3
    """)
