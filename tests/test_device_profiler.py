"""torch.profiler with ProfilerActivity.PrivateUse1 on tpu (device-queue events
in the exported Chrome trace) and torch.tpu.memory._snapshot().

Runs on both drivers (scripts/test.sh runs it again with TORCH_TPU_DRIVER=pjrt):
the host driver's queue records each work on its worker; the pjrt driver
records each PJRT execution or transfer (a lowered op, a graph segment, a
copy), ops staged through the host, and host works. Tests marked host_driver
check what only the host driver has (graph steps, list-op grouping, the
caching allocator)."""
import json
import pickle

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu._device_trace import DEVICE_PID_BASE

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
DRIVER = torch_tpu._C.selected_driver()
pjrt_only = pytest.mark.skipif(DRIVER != "pjrt", reason="what the pjrt driver records (host: see the other tests)")


def _export(p, tmp_path, name="trace.json"):
    path = tmp_path / name
    p.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)


def _device_works(trace, device=0):
    return [e for e in trace["traceEvents"] if e.get("cat") == "tpu_queue" and e["pid"] == DEVICE_PID_BASE + device]


def test_device_lane_ops_bytes_and_correlation(tmp_path):
    x = torch.randn(128, 128, device="tpu")
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        y = torch.mm(x, x).relu_()
        y.cpu()
    trace = _export(p, tmp_path)
    evs = trace["traceEvents"]
    meta = [e for e in evs if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] == DEVICE_PID_BASE]
    assert meta and meta[0]["args"]["name"] == "tpu:0 device queue"
    works = _device_works(trace)
    names = [e["name"] for e in works]
    assert "aten::mm" in names and "aten::relu_" in names and "copy_d2h" in names, names
    mm = works[names.index("aten::mm")]
    assert mm["args"]["bytes"] == 3 * 128 * 128 * 4  # two inputs, one output
    assert works[names.index("copy_d2h")]["args"]["bytes"] == 128 * 128 * 4
    assert mm["dur"] > 0
    # joined with the CPU op that queued it: same External id, a flow from one to the other
    cpu = {e["args"]["External id"]: e for e in evs if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    owner = cpu[mm["args"]["External id"]]
    assert owner["name"] == "aten::mm" == mm["args"]["cpu_op"]
    corr = mm["args"]["correlation"]
    assert corr in owner["args"]["tpu_correlations"]
    flows = {(e["ph"], e["id"]): e for e in evs if e.get("cat") == "ac2g"}
    s, f = flows[("s", corr)], flows[("f", corr)]
    assert (s["pid"], s["tid"]) == (owner["pid"], owner["tid"])
    assert f["pid"] == DEVICE_PID_BASE and f["ts"] == mm["ts"]
    # queued inside the CPU op's span, run after it was queued
    assert owner["ts"] - 1 <= mm["args"]["queued_us"] <= owner["ts"] + owner["dur"] + 1
    assert mm["ts"] >= mm["args"]["queued_us"] - 1
    # counters and the summary
    counters = {e["name"] for e in evs if e.get("ph") == "C"}
    assert {"tpu CPU fallbacks", "tpu compile cache"} <= counters
    assert trace["tpu"]["device_events"] >= 3 and trace["tpu"]["dropped_events"] == 0


def test_device_times_come_from_the_queue(tmp_path):
    """The queue is asynchronous: queued ops finish on the device after their
    CPU ops returned, one after another (in order, never overlapping)."""
    x = torch.randn(384, 384, device="tpu")
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        for _ in range(12):
            x = torch.mm(x, x).tanh_()
        torch.tpu.synchronize()
    trace = _export(p, tmp_path)
    works = sorted(_device_works(trace), key=lambda e: e["ts"])
    assert len([e for e in works if e["name"] == "aten::mm"]) == 12
    for a, b in zip(works, works[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - 1.0  # microseconds; in-order queue
    cpu = {e["args"]["External id"]: e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"
           and "External id" in e.get("args", {})}
    last = [e for e in works if e["name"] == "aten::mm"][-1]
    owner = cpu[last["args"]["External id"]]
    assert last["ts"] + last["dur"] > owner["ts"] + owner["dur"]  # ran after its CPU op returned


def _cpu_ops(trace):
    """External id -> CPU op event."""
    return {e["args"]["External id"]: e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"
            and "External id" in e.get("args", {})}


def _check_joined(trace, work):
    """`work` is joined to the CPU op that queued it (External id, correlation and a
    flow arrow), and was queued inside that op's span. Returns the op."""
    owner = _cpu_ops(trace)[work["args"]["External id"]]
    corr = work["args"]["correlation"]
    assert owner["name"] == work["args"]["cpu_op"] and corr in owner["args"]["tpu_correlations"]
    flows = {(e["ph"], e["id"]): e for e in trace["traceEvents"] if e.get("cat") == "ac2g"}
    assert (flows[("s", corr)]["pid"], flows[("s", corr)]["tid"]) == (owner["pid"], owner["tid"])
    assert flows[("f", corr)]["pid"] == work["pid"] and flows[("f", corr)]["ts"] == work["ts"]
    assert owner["ts"] - 1 <= work["args"]["queued_us"] <= owner["ts"] + owner["dur"] + 1
    assert work["ts"] >= work["args"]["queued_us"] - 1 and work["dur"] >= 0
    return owner


@pytest.mark.host_driver  # list works, and their grouping, are the host queue's (pjrt: test_pjrt_list_ops)
def test_list_ops(tmp_path):
    """torch._foreach_* ops (which the queue may run piece-major as a group) are works too."""
    ts = [torch.randn(1000, device="tpu") for _ in range(3)]
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        torch._foreach_mul_(ts, 2.0)
        torch._foreach_add_(ts, 1.0)
        torch.tpu.synchronize()
    works = {e["name"]: e for e in _device_works(_export(p, tmp_path))}
    for name in ("aten::_foreach_mul_.Scalar", "aten::_foreach_add_.Scalar"):
        assert works[name]["args"]["bytes"] >= 3 * 1000 * 4, works[name]
        assert works[name]["args"]["cpu_op"].startswith("aten::_foreach_")


@pytest.mark.host_driver  # graph steps: the host graph executor's (pjrt: test_compiled_graph_runs)
def test_compiled_graph_steps_and_compile_counters(tmp_path):
    torch._dynamo.reset()

    def f(a, b):
        return (torch.sigmoid(a * 2 + 1) * b - 0.5).abs() @ b

    g = torch.compile(f, backend="tpu")
    a, b = torch.randn(64, 64, device="tpu"), torch.randn(64, 64, device="tpu")
    with profile(activities=ACTS) as p:
        g(a, b)
        g(a, b).cpu()
    trace = _export(p, tmp_path)
    evs = trace["traceEvents"]
    runs = [e for e in _device_works(trace) if e["name"] == "tpu::graph"]
    assert len(runs) == 2
    steps = [e for e in evs if e.get("cat") == "tpu_graph_step"]
    assert steps and all(e["args"]["graph_run_correlation"] in {r["args"]["correlation"] for r in runs}
                         for e in steps)
    assert any(e["name"].startswith("fused(") for e in steps), [e["name"] for e in steps]
    assert all(e["args"]["bytes"] > 0 for e in steps)
    cache = [e for e in evs if e.get("ph") == "C" and e["name"] == "tpu compile cache"]
    end = max(cache, key=lambda e: e["ts"])["args"]
    assert end["misses"] >= 1 and end["hits"] >= 1
    assert trace["tpu"]["compile"]["misses"] >= 1


def test_compiled_graph_runs(tmp_path):
    """Each run of a torch.compile graph is one tpu::graph work (on pjrt: one PJRT
    execution of its StableHLO program), joined to the compiled region that ran it."""
    torch._dynamo.reset()

    def f(a, b):
        return (torch.sigmoid(a * 2 + 1) * b - 0.5).abs() @ b

    g = torch.compile(f, backend="tpu")
    a, b = torch.randn(64, 64, device="tpu"), torch.randn(64, 64, device="tpu")
    g(a, b)  # compiled outside the profile
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        g(a, b)
        out = g(a, b).cpu()
    torch.testing.assert_close(out, f(a.cpu(), b.cpu()))
    trace = _export(p, tmp_path)
    runs = [e for e in _device_works(trace) if e["name"] == "tpu::graph"]
    assert len(runs) == 2, [e["name"] for e in _device_works(trace)]
    for r in runs:
        _check_joined(trace, r)
    assert runs[1]["ts"] >= runs[0]["ts"] + runs[0]["dur"] - 1.0
    d2h = [e for e in _device_works(trace) if e["name"] == "copy_d2h"]
    assert d2h and d2h[-1]["ts"] >= runs[1]["ts"] + runs[1]["dur"] - 1.0  # read after the run
    if DRIVER == "pjrt":  # one program: no steps; bytes of its inputs and output
        assert not [e for e in trace["traceEvents"] if e.get("cat") == "tpu_graph_step"]
        assert all(r["args"]["bytes"] >= 3 * 64 * 64 * 4 for r in runs), runs


def test_copies(tmp_path):
    """Copies to, between and from chips are works of the chip that runs them."""
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two chips")
    c = torch.arange(1000.0)
    with profile(activities=ACTS) as p:
        x = c.to("tpu")
        y = x.to("tpu:1")
        back = y.cpu()
    assert torch.equal(back, c)
    trace = _export(p, tmp_path)
    h2d = [e for e in _device_works(trace, 0) if e["name"] == "copy_h2d"]
    d2d = [e for e in _device_works(trace, 1) if e["name"] == "copy_d2d"]
    d2h = [e for e in _device_works(trace, 1) if e["name"] == "copy_d2h"]
    assert h2d and d2d and d2h, [(e["name"], e["args"]["device"]) for e in trace["traceEvents"]
                                 if e.get("cat") == "tpu_queue"]
    assert h2d[0]["args"]["bytes"] == d2d[-1]["args"]["bytes"] == d2h[-1]["args"]["bytes"] == 4000
    copy_ops = {"aten::_copy_from", "aten::copy_", "aten::_to_copy", "aten::to"}
    for w in (h2d[0], d2d[-1], d2h[-1]):
        assert _check_joined(trace, w)["name"] in copy_ops
    assert d2h[-1]["ts"] >= d2d[-1]["ts"] + d2d[-1]["dur"] - 1.0


@pjrt_only
def test_pjrt_list_ops(tmp_path):
    """On pjrt a torch._foreach_* op decomposes into one op per tensor: one program
    each, joined to the per-tensor op inside the list op."""
    ts = [torch.randn(1000, device="tpu") for _ in range(3)]
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        torch._foreach_mul_(ts, 2.0)
        torch.tpu.synchronize()
    trace = _export(p, tmp_path)
    works = [e for e in _device_works(trace) if e["name"].startswith("aten::mul_")]
    assert len(works) == 3, [e["name"] for e in _device_works(trace)]
    for w in works:
        assert w["args"]["bytes"] >= 2 * 1000 * 4
        assert _check_joined(trace, w)["name"] == "aten::mul_"


@pjrt_only
def test_pjrt_host_staged_op(tmp_path):
    """An op whose output size depends on the data (nonzero) is staged through the
    host on pjrt: its inputs read back, the C kernel run on the host, its output
    written to the chip; the three are works of the chip, in that order."""
    x = torch.tensor([0.0, 1.0, 0.0, 2.0, 3.0], device="tpu")
    torch.tpu.synchronize()
    with profile(activities=ACTS) as p:
        nz = torch.nonzero(x)
        torch.tpu.synchronize()
    assert torch.equal(nz.cpu(), torch.tensor([[1], [3], [4]]))
    trace = _export(p, tmp_path)
    works = sorted(_device_works(trace), key=lambda e: e["args"]["seq"])
    names = [e["name"] for e in works]
    assert "aten::nonzero (host)" in names, names
    i = names.index("aten::nonzero (host)")
    staged = works[i]
    assert _check_joined(trace, staged)["name"] == "aten::nonzero"
    assert staged["args"]["bytes"] > 0
    assert "copy_d2h" in names[:i] and "copy_h2d" in names[i + 1:], names
    read = works[max(j for j in range(i) if names[j] == "copy_d2h")]
    write = works[min(j for j in range(i + 1, len(works)) if names[j] == "copy_h2d")]
    assert read["ts"] + read["dur"] <= staged["ts"] + 1.0 and write["ts"] >= staged["ts"] + staged["dur"] - 1.0
    # the copies are queued by ops nested inside nonzero
    cpu = _cpu_ops(trace)
    owner = cpu[staged["args"]["External id"]]
    for w in (read, write):
        op = _check_joined(trace, w)
        assert owner["ts"] <= op["ts"] and op["ts"] + op["dur"] <= owner["ts"] + owner["dur"], (op, owner)


def test_fallback_counter(tmp_path):
    x = torch.randn(6, 6, device="tpu")
    with profile(activities=ACTS) as p:
        torch.linalg.ldl_factor(x @ x.T)  # no native kernel: the CPU fallback
    trace = _export(p, tmp_path)
    fb = trace["tpu"]["fallbacks"]
    assert fb and all(n > 0 for n in fb.values())
    series = [e for e in trace["traceEvents"] if e.get("ph") == "C" and e["name"] == "tpu CPU fallbacks"]
    assert max(e["args"]["ops run on the CPU fallback"] for e in series) == sum(fb.values())


def test_cpu_only_profile_untouched(tmp_path):
    x = torch.randn(8, device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as p:
        (x + 1).cpu()
    trace = _export(p, tmp_path)
    assert "tpu" not in trace and not _device_works(trace)


def test_one_device_profile_at_a_time():
    with profile(activities=ACTS):
        with pytest.raises(ValueError, match="already recording"):
            with profile(activities=ACTS):
                pass


@pytest.mark.host_driver  # the caching allocator (pjrt: tests/test_pjrt.py::test_memory_snapshot)
def test_memory_snapshot():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    x = torch.empty(1000, device="tpu")
    big = torch.empty(3 << 20, dtype=torch.uint8, device="tpu")
    snap = torch.tpu.memory._snapshot()
    assert set(snap) >= {"segments", "device_traces", "allocator_settings"}
    by_addr = {s["address"]: s for s in snap["segments"]}
    for t, kind in ((x, "small"), (big, "large")):
        seg = by_addr[t.data_ptr()]
        blk = seg["blocks"][0]
        assert blk["state"] == "active_allocated" and blk["requested_size"] == t.nbytes
        assert blk["size"] >= t.nbytes and seg["segment_type"] == kind and seg["device"] == 0
    active = sum(s["allocated_size"] for s in snap["segments"])
    assert active == torch.tpu.memory_allocated()
    assert sum(s["total_size"] for s in snap["segments"]) == torch.tpu.memory_reserved()
    addr = big.data_ptr()
    del big, t, blk, seg
    seg = {s["address"]: s for s in torch.tpu.memory._snapshot()["segments"]}[addr]
    assert seg["blocks"][0]["state"] == "inactive" and seg["allocated_size"] == 0  # cached
    torch.tpu.empty_cache()
    assert addr not in {s["address"] for s in torch.tpu.memory._snapshot(0)["segments"]}
    with pytest.raises(ValueError, match="no device tpu:99"):
        torch.tpu.memory._snapshot(99)
    with pytest.raises(ValueError, match="not a tpu device"):
        torch.tpu.memory._snapshot("cpu")


def test_memory_snapshot_dump(tmp_path):
    x = torch.ones(10, device="tpu")  # noqa: F841
    path = tmp_path / "snap.pickle"
    torch.tpu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert any(s["address"] == x.data_ptr() for s in snap["segments"])
    from torch.cuda import _memory_viz

    text = _memory_viz.segsum(snap)  # PyTorch's CUDA snapshot tool reads it (and checks each segment's sizes add up)
    assert f"segments: {len(snap['segments'])}" in text
