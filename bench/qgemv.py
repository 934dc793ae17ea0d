"""Decode GEMV of tpu::q_linear at SmolLM2-135M's shapes, act_bits 32 against 8, and the host
cost of one eager QuantLinear call (for information; not part of ``python -m bench``).

    python -m bench.qgemv [--rounds 5] [--threads 1,2] [--rows 1,6] [--root OTHER_CHECKOUT]

Kernel: csrc/qgemv.c, compiled at run time against torch_tpu/libtpu_runtime.so, calls the
kernel table's entry directly (no bridge, no queue) with M rows of x (``--rows``, 1 by default), the two modes taking
turns batch by batch (best batch kept), the weights cycling through 64 MiB of copies so they
come from memory as in a decode step (``--cache``: one copy, in cache when it fits). G weights/s = M * N * K / time.

Host cost: torch.ops.tpu.q_linear, a QuantLinear module (32x32 and 576x576 Q4_1: kernels
shorter and longer than a call's host time) and, for comparison,
torch.add on a [1, 576] tpu tensor (one kernel thread), each called 2000 times under no_grad,
best of 7 batches: the time of the loop of calls per call (the kernels run behind it on the
device queue). `--root` measures the same in a child process on another checkout's
build too (the host cost before a change), the two taking turns.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPES = [("q_proj/o_proj 576x576", 3, 576, 576), ("k_proj/v_proj 192x576", 3, 192, 576),
          ("gate/up 1536x576", 3, 1536, 576), ("down 576x1536", 3, 576, 1536),
          ("lm_head 49152x576 Q8_0", 8, 49152, 576)]

HOST_SNIPPET = r"""
import time, torch, torch_tpu
from torch_tpu import quant


def submit(fn, n=2000):
    best = 1e9
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.tpu.synchronize()
        best = min(best, (t1 - t0) / n)
    return best * 1e6


out = []
g = torch.Generator().manual_seed(0)
for n in (32, 576):
    raw = torch.randint(0, 256, (n, n // 32, 20), dtype=torch.uint8, generator=g)
    raw[..., 0:2] = torch.tensor([0.01], dtype=torch.float16).view(torch.uint8)
    raw[..., 2:4] = torch.tensor([-0.05], dtype=torch.float16).view(torch.uint8)
    raw = raw.reshape(n, -1).to("tpu")
    m = quant.QuantLinear(raw, 3, n, n)
    x = torch.randn(1, n).to("tpu")
    op = torch.ops.tpu.q_linear.default
    with torch.no_grad():
        for _ in range(200):
            m(x)
        torch.tpu.synchronize()
        out += [submit(lambda: op(x, raw, 3, n)), submit(lambda: m(x)), submit(lambda: torch.add(x, x))]
print("HOST", *out)
"""


def compile_qgemv(tmp):
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc) or shutil.which("gcc") or shutil.which("clang")
    if path is None:
        raise SystemExit("bench.qgemv: no C compiler found ($CC, cc, gcc or clang)")
    exe = os.path.join(tmp, "qgemv")
    lib = os.path.join(ROOT, "torch_tpu")
    cmd = [path, "-O2", "-pthread", "-I", os.path.join(ROOT, "runtime", "include"), "-o", exe,
           os.path.join(HERE, "csrc", "qgemv.c"), "-L", lib, "-ltpu_runtime", f"-Wl,-rpath,{lib}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench.qgemv: compiling failed ({' '.join(cmd)}):\n{r.stderr}")
    return exe


def gemv_rows(exe, threads, rounds, cache=False, log=print, m=1):
    rows = []
    for name, qtype, n, k in SHAPES:
        for t in threads:
            r = subprocess.run([exe, str(qtype), str(n), str(k), str(t), str(rounds), str(m)]
                               + (["cache"] if cache else []),
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"qgemv {name}: {r.stderr.strip()}")
            sec = {int(p[1]): float(p[2]) for p in (ln.split() for ln in r.stdout.splitlines())
                   if p and p[0] == "RESULT"}
            row = {"shape": name, "threads": t, "rows": m, "us32": sec[32] * 1e6, "us8": sec[8] * 1e6,
                   "gw32": m * n * k / sec[32] / 1e9, "gw8": m * n * k / sec[8] / 1e9}
            rows.append(row)
            log(f"{name:26s} M={m} {t} thr  act32 {row['us32']:8.1f} us {row['gw32']:6.2f} Gw/s   "
                f"act8 {row['us8']:8.1f} us {row['gw8']:6.2f} Gw/s   x{sec[32] / sec[8]:.2f}")
    return rows


def host_cost(root):
    env = dict(os.environ, PYTHONPATH=root, TORCH_TPU_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", HOST_SNIPPET], env=env, cwd=root, capture_output=True, text=True,
                       timeout=600)
    for ln in r.stdout.splitlines():
        if ln.startswith("HOST "):
            return tuple(float(v) for v in ln.split()[1:])
    raise RuntimeError(f"host cost on {root} failed: {r.stderr[-2000:]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--root", help="another checkout whose host cost per call to measure too")
    ap.add_argument("--skip-gemv", action="store_true")
    ap.add_argument("--cache", action="store_true", help="reuse one weight copy (in cache when it fits)")
    ap.add_argument("--rows", default="1", help="rows of x (M), comma-separated: 1 decodes, more prefill")
    a = ap.parse_args(argv)
    if not a.skip_gemv:
        tmp = tempfile.mkdtemp(prefix="torch_tpu_qgemv_")
        try:
            exe = compile_qgemv(tmp)
            for m in (int(v) for v in a.rows.split(",")):
                gemv_rows(exe, [int(t) for t in a.threads.split(",")], a.rounds, a.cache, m=m)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    roots = [ROOT] + ([os.path.abspath(a.root)] if a.root else [])
    best = {r: (1e9,) * 6 for r in roots}
    for _ in range(3):  # the checkouts take turns
        for r in roots:
            best[r] = tuple(min(u, v) for u, v in zip(best[r], host_cost(r)))
    for r in roots:
        for i, n in enumerate((32, 576)):
            b = best[r][3 * i:3 * i + 3]
            print(f"host us/call {n}x{n} ({r}): q_linear op {b[0]:.1f}, QuantLinear module {b[1]:.1f}, "
                  f"torch.add {b[2]:.1f}")

if __name__ == "__main__":
    main()
