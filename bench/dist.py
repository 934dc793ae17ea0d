"""all_reduce between two processes on this host: tpu_dist through shared memory,
tpu_dist through Gloo (TORCH_TPU_DIST_SHM=0), and stock Gloo on CPU tensors.

Each configuration runs two worker processes (ranks 0 and 1 on 127.0.0.1);
configurations take turns, chunk by chunk, so that the machine's drift falls on
all of them. Bus bandwidth follows the usual all-reduce definition:
2 (n - 1) / n x bytes / time."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_WORKER = r"""
import datetime, json, sys, time, torch, torch.distributed as dist
import torch_tpu
backend, device, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sizes = [int(s) for s in sys.argv[4].split(",")]
op = sys.argv[5]
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()


def step(x):
    if op == "all_reduce":
        dist.all_reduce(x)
    elif rank == 0:  # ping-pong: rank 0 times the round trip
        dist.send(x, 1); dist.recv(x, 1)
    else:
        dist.recv(x, 0); dist.send(x, 0)


out = {}
for nbytes in sizes:
    x = torch.ones(nbytes // 4, device=device)
    step(x); dist.barrier()                       # warm: connections, staging buffers
    best = float("inf")
    for _ in range(reps if nbytes >= 1 << 20 else 20 * reps):   # small ones are quick and noisy
        dist.barrier()
        if device == "tpu":
            torch.tpu.synchronize()
        t = time.perf_counter()
        step(x)
        if device == "tpu":
            torch.tpu.synchronize()
        best = min(best, time.perf_counter() - t)
    out[nbytes] = best if op == "all_reduce" else best / 2   # send/recv: one way
if dist.get_rank() == 0:
    print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""

CONFIGS = {
    "tpu_dist, shared memory": ("tpu_dist", "tpu", {}),
    "tpu_dist, Gloo (TORCH_TPU_DIST_SHM=0)": ("tpu_dist", "tpu", {"TORCH_TPU_DIST_SHM": "0"}),
    "gloo, CPU tensors": ("gloo", "cpu", {}),
}


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(code, args, world, what, env_extra, timeout):
    """Runs `code` in `world` processes (ranks on 127.0.0.1 when world > 1); rank 0's
    "RESULT <json>" line, parsed."""
    port = _port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
        env.pop("TORCH_TPU_HOST_DEVICES", None)
        if world > 1:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"bench {what}: timed out")
    if any(p.returncode for p in procs):
        raise RuntimeError(f"bench {what} failed:\n" + "\n".join(e[-2000:] for _, e in outs))
    line = [ln for ln in outs[0][0].splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _run(backend, device, extra, reps, sizes, op="all_reduce"):
    res = _launch(_WORKER, [backend, device, str(reps), ",".join(map(str, sizes)), op], 2, f"dist {op} ({backend})",
                  dict(extra, TORCH_TPU_NUM_THREADS="1"), 600)
    return {int(k): v for k, v in res.items()}


def _size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _best(configs, sizes, quick, op):
    """{config: {bytes: best seconds}}, the configurations' process pairs taking turns."""
    chunks, reps = (1, 3) if quick else (2, 5)
    best = {name: {} for name in configs}
    for _ in range(chunks):
        for name, (backend, device, extra) in configs.items():
            for n, t in _run(backend, device, extra, reps, sizes, op).items():
                best[name][n] = min(best[name].get(n, float("inf")), t)
    return best


def measure(quick=False, bw_gbs=None, log=print):
    sizes = [4 << 10, 1 << 20, 64 << 20] if not quick else [4 << 10, 1 << 20, 16 << 20]
    best = _best(CONFIGS, sizes, quick, "all_reduce")
    rows = []
    for n in sizes:
        ref = best["gloo, CPU tensors"][n]
        for name in CONFIGS:
            t = best[name][n]
            bus = 2 * (2 - 1) / 2 * n / t / 1e9
            rows.append({"bytes": n, "config": name, "ms": t * 1e3, "bus_gbs": bus, "vs_gloo_cpu": ref / t,
                         "of_memory_bw": bus / bw_gbs if bw_gbs else None})
            log(f"  all_reduce {_size(n)}, {name}: {t * 1e3:.2f} ms, bus {bus:.2f} GB/s"
                + (f" ({bus / bw_gbs:.0%} of the read bandwidth)" if bw_gbs else ""))
    return rows


P2P_CONFIGS = {  # send/recv always go through Gloo
    "tpu_dist": ("tpu_dist", "tpu", {}),
    "tpu_dist, TORCH_TPU_DIST_CHECK=0 (no header)": ("tpu_dist", "tpu", {"TORCH_TPU_DIST_CHECK": "0"}),
    "gloo, CPU tensors": ("gloo", "cpu", {}),
}


def p2p(quick=False, log=print):
    """send/recv between two processes: one way = half the ping-pong's round trip (rank 0
    sends then receives the same tensor back), tpu_dist against stock Gloo on CPU tensors,
    the configurations taking turns. tpu_dist stages the tensors through host memory and
    sends a 24-byte header before each message (checked by the receiver) unless the
    agreement check is off."""
    sizes = [4 << 10, 1 << 20] if quick else [4 << 10, 1 << 20, 16 << 20]
    best = _best(P2P_CONFIGS, sizes, quick, "send_recv")
    rows = []
    for n in sizes:
        ref = best["gloo, CPU tensors"][n]
        for name in P2P_CONFIGS:
            t = best[name][n]
            rows.append({"bytes": n, "config": name, "ms": t * 1e3, "gbs": n / t / 1e9, "vs_gloo_cpu": ref / t})
            log(f"  send/recv {_size(n)}, {name}: {t * 1e3:.3f} ms one way, {n / t / 1e9:.2f} GB/s")
    return rows


# ---------------------------------------------------------------- tensor-parallel decode

_TP_WORKER = r"""
import datetime, json, os, sys, torch, torch.distributed as dist
import torch_tpu
from transformers import AutoModelForCausalLM
from bench.models import decode
path, steps = sys.argv[1], int(sys.argv[2])
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=300))
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")
else:
    model = AutoModelForCausalLM.from_pretrained(path, device_map="tpu")
model.eval()
assert next(model.parameters()).device.type == "tpu"
best, mean = decode(model, "tpu", 1, steps, model.config.vocab_size)
out = {"tok_s": best, "tok_s_mean": mean, "peak_bytes": torch.tpu.max_memory_allocated(),
       "transport": torch_tpu.distributed.transport_stats() if world > 1 else None}
if world == 1 or dist.get_rank() == 0:
    print("RESULT " + json.dumps(out), flush=True)
if world > 1:
    dist.destroy_process_group()
"""


def _tp_run(path, world, steps, threads):
    return _launch(_TP_WORKER, [path, str(steps)], world, f"tensor-parallel decode ({world} chips)",
                   {"TORCH_TPU_NUM_THREADS": str(threads)}, 900)


def tp_decode(quick=False, log=print):
    """Greedy decode at batch 1 (bench.models.decode) of Qwen3-0.6B's architecture
    (random weights, float32): one process on one chip with every core's threads,
    against 2 processes loaded with `tp_plan="auto"` over tpu_dist (one chip and one
    kernel thread each: the same cores in all), taking turns. Each step all-reduces
    two 4 KiB activations per layer (attention and MLP row-wise projections)."""
    import tempfile

    import torch

    from bench.models import qwen3_06b

    cores = os.cpu_count() or 1
    steps, chunks = (6, 1) if quick else (12, 2)
    with tempfile.TemporaryDirectory() as tmp:
        m = qwen3_06b(torch.float32)
        m.save_pretrained(tmp)
        whole = sum(p.numel() * p.element_size() for p in m.parameters())
        del m
        res = {1: [], 2: []}
        for _ in range(chunks):
            res[1].append(_tp_run(tmp, 1, steps, cores))
            res[2].append(_tp_run(tmp, 2, steps, max(1, cores // 2)))
    rows = []
    one = max(r["tok_s"] for r in res[1])
    for world in (1, 2):
        best = max(res[world], key=lambda r: r["tok_s"])
        rows.append({"chips": world, "tok_s": best["tok_s"], "vs_one_chip": best["tok_s"] / one,
                     "peak_bytes_rank0": best["peak_bytes"], "model_bytes": whole, "transport": best["transport"]})
        log(f"  tensor-parallel decode b1, Qwen3-0.6B arch f32, {world} chip(s): {best['tok_s']:.2f} tok/s "
            f"({best['tok_s'] / one:.2f}x one chip), rank 0 peak {best['peak_bytes'] / 2**20:.0f} MiB "
            f"of a {whole / 2**20:.0f} MiB model")
    return rows
