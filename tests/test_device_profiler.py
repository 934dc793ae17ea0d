"""torch.profiler with ProfilerActivity.PrivateUse1 on tpu (device-queue events
in the exported Chrome trace) and torch.tpu.memory._snapshot()."""
import json
import pickle

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu  # noqa: F401
from torch_tpu._device_trace import DEVICE_PID_BASE

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


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
