"""The pjrt driver on XLA's CPU PJRT plugin against the host driver, per op,
for information only: the CPU plugin is not a TPU, and this measures what an
eager op costs on the PJRT path (a compiled StableHLO program per op and
shape, byte storages gathered and scattered) and what a compiled graph
costs (an MLP step and a tiny Llama's decode step: one StableHLO program per
graph segment on pjrt, the C graph compiler on host).

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

# A compiled decode step of a tiny Llama: one token into a StaticCache, the
# greedy token fed back on the device (the cache is emptied when it is full:
# the cache keeps its own count of written positions).
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
llama = LlamaForCausalLM(cfg).eval().to("tpu")
cache = StaticCache(config=cfg, max_cache_len=256, max_batch_size=1)
cfwd = torch.compile(llama, backend="tpu")
dec = {"tok": torch.tensor([[1]], device="tpu"), "pos": 0}


@torch.no_grad()
def decode(count=None):
    p = torch.tensor([dec["pos"]], device="tpu")
    before = torch_tpu._C.queue_stats(0)["programs"]
    o = cfwd(input_ids=dec["tok"], past_key_values=cache, use_cache=True, cache_position=p, logits_to_keep=1)
    if count is not None:     # device programs the compiled forward ran (the argmax after it is eager)
        count.append(torch_tpu._C.queue_stats(0)["programs"] - before)
    dec["tok"] = o.logits[:, -1:].argmax(-1)
    dec["pos"] = (dec["pos"] + 1) % 256
    if dec["pos"] == 0:
        cache.reset()


for _ in range(3):              # compiles (the first calls may specialise)
    decode()
torch.tpu.synchronize()
programs = []
decode(programs)
torch.tpu.synchronize()
programs = programs[0]
ops = {
    "add, 16 elements (a + a)": lambda: small + small,
    "mul, 256x256": lambda: a * b,
    "mm, 256x256x256": lambda: a @ b,
    "softmax, 256x256": lambda: a.softmax(-1),
    "compiled MLP step, 8x256 -> 512 -> 256 (one program per call on pjrt)": lambda: step(x),
    "compiled decode step, tiny Llama (2 layers, hidden 128, StaticCache 256)": decode,
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
out["programs per compiled forward"] = programs
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
    programs = {}
    for _ in range(chunks):
        for driver in ("host", "pjrt"):
            res = _child(driver, 3)
            programs[driver] = res.pop("programs per compiled forward")
            for op, t in res.items():
                best[driver][op] = min(best[driver].get(op, float("inf")), t)
    log(f"  device programs per compiled decode forward: pjrt {programs['pjrt']} "
        f"(host {programs['host']}: the C graph compiler runs it, no driver program)")
    rows = []
    for op in best["host"]:
        h, p = best["host"][op], best["pjrt"][op]
        rows.append({"op": op, "host_us": h * 1e6, "pjrt_us": p * 1e6, "ratio": p / h})
        log(f"  {op}: host {h * 1e6:.1f} us, pjrt (XLA CPU plugin) {p * 1e6:.1f} us")
    return rows
