"""The pjrt driver on XLA's CPU PJRT plugin against the host driver, per op,
for information only: the CPU plugin is not a TPU, and this measures what an
eager op costs on the PJRT path (a compiled StableHLO program per op and
shape, byte storages gathered and scattered, or the CPU fallback) and what a
compiled graph costs (one StableHLO module per call on pjrt, the C graph
compiler on host).

The driver is chosen once per process, so each driver runs in a child
process of its own; the children take turns, chunk by chunk, so that the
machine's drift falls on both."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, time, torch, torch_tpu
chunk = int(sys.argv[1])
a, b = torch.randn(256, 256).to("tpu"), torch.randn(256, 256).to("tpu")
small = torch.randn(16).to("tpu")
w1, w2 = (torch.randn(256, 512) / 16).to("tpu"), (torch.randn(512, 256) / 16).to("tpu")
x = torch.randn(8, 256).to("tpu")
step = torch.compile(lambda x: torch.relu(x @ w1) @ w2 + x, backend="tpu")
ops = {
    "add, 16 elements (a + a)": lambda: small + small,
    "mul, 256x256": lambda: a * b,
    "mm, 256x256x256": lambda: a @ b,
    "softmax, 256x256 (CPU fallback on pjrt)": lambda: a.softmax(-1),
    "compiled MLP step, 8x256 -> 512 -> 256 (one program per call on pjrt)": lambda: step(x),
}
for fn in ops.values():          # first call compiles on pjrt
    fn(); torch.tpu.synchronize()
out = {}
for name, fn in ops.items():
    best = float("inf")
    for _ in range(chunk):
        t = time.perf_counter(); n = 0
        while n < 5 or time.perf_counter() - t < 0.05:
            fn(); n += 1
        torch.tpu.synchronize()
        best = min(best, (time.perf_counter() - t) / n)
    out[name] = best
print("RESULT " + json.dumps(out))
"""


def _child(driver, chunk):
    env = dict(os.environ, TORCH_TPU_DRIVER=driver, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", _CHILD, str(chunk)], env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"bench child ({driver}) failed:\n{p.stderr[-2000:]}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def measure(quick=False, log=print):
    chunks = 1 if quick else 2
    best = {"host": {}, "pjrt": {}}
    for _ in range(chunks):
        for driver in ("host", "pjrt"):
            for op, t in _child(driver, 3).items():
                best[driver][op] = min(best[driver].get(op, float("inf")), t)
    rows = []
    for op in best["host"]:
        h, p = best["host"][op], best["pjrt"][op]
        rows.append({"op": op, "host_us": h * 1e6, "pjrt_us": p * 1e6, "ratio": p / h})
        log(f"  {op}: host {h * 1e6:.1f} us, pjrt (XLA CPU plugin) {p * 1e6:.1f} us")
    return rows
