"""torch.profiler with ``ProfilerActivity.PrivateUse1``: what ran on the tpu
device queues, in the exported Chrome/Perfetto trace.

PyTorch's Kineto has no collector for a PrivateUse1 device unless the
backend ships a Kineto plugin; this one feeds the trace from the runtime's
own recorder (runtime/include/tpu/trace.h) instead:

* ``profile.start_trace`` (with PrivateUse1 among the activities) starts the
  device-queue recorder. From then on each work a chip runs (an eager op, a
  copy, a torch.compile graph run) is recorded with its name, the bytes of
  its tensors, when and on which OS thread it was queued, and its start and
  end. The host driver reads them on the device's worker thread and also
  records each step of a compiled graph (a kernel or a fused group) inside
  its run; the pjrt driver records one event per PJRT execution or transfer,
  its end when the plugin signalled completion and its start the later of
  the submit and the previous work's end (no steps: a graph is one program).
* ``profile.stop_trace`` waits for the queues to drain, stops the recorder
  and keeps the events.
* ``profile.export_chrome_trace(path)`` writes Kineto's trace, then adds one
  process per chip ("tpu:N device queue": thread "queue" for works, "graph
  steps" for the steps of compiled graphs), a flow event ("ac2g", as Kineto
  links CUDA launches to kernels) from each CPU op to the work it queued,
  "correlation" / "External id" args on both ends, and counter tracks for
  the CPU-fallback and torch.compile counters over the profiled span.

The CPU op that queued a work is the innermost op Kineto recorded on the
queuing thread whose span contains the moment of queueing; times are
converted from the runtime's CLOCK_MONOTONIC to the trace's clock with an
offset measured at start (error: a few microseconds). ``key_averages()`` and
the profiler's table know nothing of device events: only the exported trace
has them.
"""
import gzip
import json
import os
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity

from . import _C

__all__ = ["install", "DEVICE_PID_BASE"]

#: Trace process id of chip N's device queue: DEVICE_PID_BASE + N.
DEVICE_PID_BASE = 1 << 30
_QUEUE_TID, _STEP_TID = 1, 2
_KIND_WORK, _KIND_STEP = 0, 1


def _clock_offset_ns():
    """time.time_ns() - runtime clock, from the closest of a few paired reads."""
    best = None
    for _ in range(8):
        a = _C.now_ns()
        wall = time.time_ns()
        b = _C.now_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    return best[1]


def _numeric(d):
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _counters():
    from ._dynamo_backend import compile_stats

    return {"fallbacks": dict(_C.fallback_report()), "compile": _numeric(compile_stats())}


class _Recording:
    """The device-queue events of one profiling cycle."""

    def __init__(self):
        self.events = None
        self.dropped = 0
        self.active = False

    def begin(self):
        _C.trace_start(0)
        self.active = True
        self.offset_ns = _clock_offset_ns()
        self.t0_wall_ns = time.time_ns()
        self.counters0 = _counters()

    def end(self):
        if not self.active:
            return
        try:
            for i in range(_C.device_count()):
                _C.synchronize(i)
        finally:
            _C.trace_stop()
            self.active = False
            self.events, self.dropped = _C.trace_take()
            self.t1_wall_ns = time.time_ns()
            self.counters1 = _counters()


def _load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _dump(trace, path):
    opener = gzip.open if path.endswith(".gz") else open
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    os.close(fd)
    try:
        with opener(tmp, "wt") as f:
            json.dump(trace, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# Microseconds of tolerance when a queue time is placed inside a CPU op: the two come
# from different clocks (the runtime's, and the profiler's, joined by a measured offset),
# and a work queued as its op ends can land a few microseconds past the op's end.
_SLACK_US = 5.0


def _innermost_ops(cpu_ops, queries):
    """For each (tid, ts) query, the innermost CPU op event on thread tid whose
    [ts, ts + dur] contains ts; failing that, the innermost whose
    [ts, ts + dur + _SLACK_US] does (None if none). Ops of a thread nest: a
    work queued just after a nested op returned (an output's allocation, a
    view) belongs to the op around it, not to the one that just ended."""
    by_tid = {}
    for e in cpu_ops:
        by_tid.setdefault(e["tid"], []).append(e)
    answers = [None] * len(queries)
    qs_by_tid = {}
    for i, (tid, ts) in enumerate(queries):
        qs_by_tid.setdefault(tid, []).append((ts, i))
    for tid, qs in qs_by_tid.items():
        ops = sorted(by_tid.get(tid, ()), key=lambda e: (e["ts"], -e.get("dur", 0)))
        qs.sort()
        stack, j = [], 0
        for ts, i in qs:
            while j < len(ops) and ops[j]["ts"] <= ts:
                op = ops[j]
                while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < op["ts"]:
                    stack.pop()
                stack.append(op)
                j += 1
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) + _SLACK_US < ts:
                stack.pop()
            containing = [op for op in stack if op["ts"] + op.get("dur", 0) >= ts]
            answers[i] = containing[-1] if containing else (stack[-1] if stack else None)
    return answers


def _merge(path, rec):
    """Adds rec's device events, flows and counters to the trace at path."""
    trace = _load(path)
    events = trace.setdefault("traceEvents", [])
    base_ns = int(trace.get("baseTimeNanoseconds", 0))

    def us(runtime_ns):  # runtime clock -> the trace's microseconds
        return (runtime_ns + rec.offset_ns - base_ns) / 1000.0

    def wall_us(wall_ns):
        return (wall_ns - base_ns) / 1000.0

    cpu_ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    cpu_pid = cpu_ops[0]["pid"] if cpu_ops else os.getpid()
    works = [e for e in rec.events if e[1] == _KIND_WORK]
    owners = _innermost_ops(cpu_ops, [(e[4], us(e[5])) for e in works])
    owner_of = {e[3]: op for e, op in zip(works, owners)}

    devices = sorted({e[2] for e in rec.events})
    for d in devices:
        pid = DEVICE_PID_BASE + d
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"tpu:{d} device queue"}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "TPU"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": _QUEUE_TID, "args": {"name": "queue"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": _STEP_TID, "args": {"name": "graph steps"}},
        ]
    # each step of a compiled graph belongs to the graph run recorded next on
    # its device (the worker records a run's steps, then the run)
    run_of, pending = {}, {}
    for e in sorted(rec.events, key=lambda e: e[3]):
        if e[1] == _KIND_STEP:
            pending.setdefault(e[2], []).append(e[3])
        elif e[0] == "tpu::graph":
            for step_seq in pending.pop(e[2], ()):
                run_of[step_seq] = e[3]
    for name, kind, dev, seq, tid, queued, start, end, nbytes in rec.events:
        pid = DEVICE_PID_BASE + dev
        args = {"device": dev, "bytes": nbytes, "seq": seq}
        ev = {"ph": "X", "cat": "tpu_queue" if kind == _KIND_WORK else "tpu_graph_step", "name": name,
              "pid": pid, "tid": _QUEUE_TID if kind == _KIND_WORK else _STEP_TID,
              "ts": us(start), "dur": max(end - start, 0) / 1000.0, "args": args}
        if kind == _KIND_WORK:
            corr = seq
            args["correlation"] = corr
            args["queued_us"] = us(queued)
            op = owner_of.get(seq)
            if op is not None:
                ext = op.get("args", {}).get("External id")
                args["cpu_op"] = op["name"]
                if ext is not None:
                    args["External id"] = ext
                op.setdefault("args", {}).setdefault("tpu_correlations", []).append(corr)
                events.append({"ph": "s", "id": corr, "pid": op["pid"], "tid": op["tid"], "ts": us(queued),
                               "cat": "ac2g", "name": "ac2g"})
                events.append({"ph": "f", "id": corr, "pid": pid, "tid": _QUEUE_TID, "ts": us(start),
                               "cat": "ac2g", "name": "ac2g", "bp": "e"})
        elif seq in run_of:
            args["graph_run_correlation"] = run_of[seq]
        events.append(ev)

    # counters: the profiled span's CPU fallbacks and torch.compile activity
    t0, t1 = wall_us(rec.t0_wall_ns), wall_us(rec.t1_wall_ns)
    fb0, fb1 = rec.counters0["fallbacks"], rec.counters1["fallbacks"]
    fallbacks = {op: n - fb0.get(op, 0) for op, n in fb1.items() if n - fb0.get(op, 0) > 0}
    c0, c1 = rec.counters0["compile"], rec.counters1["compile"]
    compile_delta = {k: c1[k] - c0.get(k, 0) for k in c1}
    counter_pid = DEVICE_PID_BASE + (devices[0] if devices else 0)
    if not devices:
        events.append({"ph": "M", "name": "process_name", "pid": counter_pid, "tid": 0,
                       "args": {"name": "tpu:0 device queue"}})
    total_fb = sum(fallbacks.values())
    for ts, n in ((t0, 0), (t1, total_fb)):
        events.append({"ph": "C", "name": "tpu CPU fallbacks", "pid": counter_pid, "tid": 0, "ts": ts,
                       "args": {"ops run on the CPU fallback": n}})
    cache = {k: compile_delta.get(k, 0) for k in ("hits", "misses", "codegen_cache_hits", "codegen_compiles")}
    for ts, vals in ((t0, {k: 0 for k in cache}), (t1, cache)):
        events.append({"ph": "C", "name": "tpu compile cache", "pid": counter_pid, "tid": 0, "ts": ts,
                       "args": vals})
    trace["tpu"] = {
        "device_events": len(rec.events),
        "dropped_events": rec.dropped,
        "fallbacks": fallbacks,
        "compile": compile_delta,
        "clock": "runtime CLOCK_MONOTONIC + offset to the trace's wall clock, measured at start",
    }
    _dump(trace, path)


def install():
    """Wraps torch.profiler's start_trace/stop_trace/export_chrome_trace
    (idempotent). Profiles without ProfilerActivity.PrivateUse1 are untouched."""
    from torch.profiler import profiler as tp

    cls = tp._KinetoProfile
    if getattr(cls, "_tpu_device_trace", False):
        return
    orig_start, orig_stop, orig_export = cls.start_trace, cls.stop_trace, cls.export_chrome_trace

    def start_trace(self):
        rec = None
        if ProfilerActivity.PrivateUse1 in (self.activities or ()):
            rec = _Recording()
            rec.begin()  # raises (ValueError) before anything started if another profile records
        try:
            orig_start(self)
        except BaseException:
            if rec is not None:
                rec.end()
            raise
        self._tpu_recording = rec

    def stop_trace(self):
        rec = getattr(self, "_tpu_recording", None)
        try:
            if rec is not None:
                rec.end()
        finally:
            orig_stop(self)

    def export_chrome_trace(self, path, *args, **kwargs):
        out = orig_export(self, path, *args, **kwargs)
        rec = getattr(self, "_tpu_recording", None)
        if rec is not None and rec.events is not None:
            _merge(path, rec)
        return out

    start_trace.__doc__ = orig_start.__doc__
    stop_trace.__doc__ = orig_stop.__doc__
    export_chrome_trace.__doc__ = orig_export.__doc__
    cls.start_trace, cls.stop_trace, cls.export_chrome_trace = start_trace, stop_trace, export_chrome_trace
    cls._tpu_device_trace = True
