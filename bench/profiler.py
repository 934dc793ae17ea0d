"""What the device profiler costs: time per eager op or compiled call with no
profiler, under torch.profiler with ProfilerActivity.CPU only (Kineto's own
cost), and with CPU + PrivateUse1 (the device-queue trace on top), on the host
driver and on the pjrt driver (XLA's CPU PJRT plugin).

Each driver runs in a child process of its own (the driver is chosen once per
process); inside it the three modes take turns, chunk by chunk, and the best
chunk of each is kept.

    python -m bench.profiler                      # both drivers, this checkout
    python -m bench.profiler --root /other/tree   # the same workloads on another checkout's build
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, time, torch, torch_tpu
from torch.profiler import profile, ProfilerActivity
chunks, modes = int(sys.argv[1]), sys.argv[2].split(",")
small = torch.randn(16).to("tpu")
a, b = torch.randn(256, 256).to("tpu"), torch.randn(256, 256).to("tpu")
w1, w2 = (torch.randn(256, 512) / 16).to("tpu"), (torch.randn(512, 256) / 16).to("tpu")
x = torch.randn(8, 256).to("tpu")
step = torch.compile(lambda x: torch.relu(x @ w1) @ w2 + x, backend="tpu")
ops = {
    "add, 16 elements (a + a)": lambda: small + small,
    "mm, 256x256x256": lambda: a @ b,
    "compiled MLP step, 8x256 -> 512 -> 256": lambda: step(x),
}
for fn in ops.values():  # compiles (and, on pjrt, builds the programs) outside the timing
    fn(); fn()
torch.tpu.synchronize()
acts = {"cpu": [ProfilerActivity.CPU], "cpu+tpu": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]}


def timed(fn, n):
    torch.tpu.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.tpu.synchronize()
    return (time.perf_counter() - t) / n


best = {}
for _ in range(chunks):
    for name, fn in ops.items():
        n = max(20, int(0.05 / max(timed(fn, 5), 1e-7)))  # about 50 ms per timing
        for mode in modes:
            if mode == "off":
                t = timed(fn, n)
            else:
                with profile(activities=acts[mode]):
                    t = timed(fn, n)
            key = f"{name}|{mode}"
            best[key] = min(best.get(key, float("inf")), t)
print("RESULT " + json.dumps(best))
"""

MODES = ("off", "cpu", "cpu+tpu")


def _child(driver, chunks, root=ROOT, modes=MODES):
    env = dict(os.environ, TORCH_TPU_DRIVER=driver, PYTHONPATH=root)
    p = subprocess.run([sys.executable, "-c", _CHILD, str(chunks), ",".join(modes)], env=env,
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"bench child ({driver}) failed:\n{p.stderr[-2000:]}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def measure(quick=False, log=print, root=ROOT, chunks=None):
    """Rows: driver, workload, µs per call in each mode."""
    rows = []
    for driver in ("host", "pjrt"):
        res = _child(driver, chunks or (2 if quick else 6), root)
        for op in dict.fromkeys(k.split("|")[0] for k in res):
            us = {m: res[f"{op}|{m}"] * 1e6 for m in MODES}
            rows.append({"driver": driver, "op": op, **{f"{m}_us": us[m] for m in MODES},
                         "trace_us": us["cpu+tpu"] - us["cpu"]})
            log(f"  {driver}: {op}: off {us['off']:.1f} us, profile(CPU) {us['cpu']:.1f} us, "
                f"profile(CPU, PrivateUse1) {us['cpu+tpu']:.1f} us")
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m bench.profiler", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=ROOT, help="checkout whose torch_tpu build runs the workloads")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chunks", type=int, default=None, help="turns of the three modes (default 6, quick 2)")
    args = ap.parse_args()
    measure(args.quick, root=os.path.abspath(args.root), chunks=args.chunks)
