"""torch.compile(backend="tpu") against tpu eager, torch CPU eager and torch.compile's
default backend (inductor) on the CPU, in one process.

- decode bN: SmolLM2-135M (real weights), StaticCache, greedy steps fed back on the
  device; the compiled rows compile the model's forward with fullgraph=True,
  dynamic=False (what Transformers' static-cache generate() does); eager and compiled
  decode run side by side (two caches), their timed chunks alternating so that the
  machine's drift during the run falls on both; tokens/s of each one's fastest chunk,
  after warm-up steps (the first compiled call compiles).
- training step: a small Llama (4 layers, hidden 256), batch 8 x 64 tokens,
  forward + backward + AdamW step; the four variants (tpu/CPU, eager/compiled) built
  first, then their timed chunks of 5 steps taking turns; steps/s of each one's fastest
  of CHUNKS chunks.
- fused chain: y = |sigmoid(2x + 1) * x - 0.5| on 16M float32 elements (64 MiB in,
  64 MiB out); GB/s = 128 MiB / time, compared with the machine's read bandwidth.
"""
import os
import time

import torch

from .models import CHUNKS, PROMPT, WARM_STEPS, _sync


def _best(fn, device, per, chunks=CHUNKS):
    best = None
    for _ in range(chunks):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        _sync(device)
        dt = (time.perf_counter() - t0) / per
        best = dt if best is None else min(best, dt)
    return best


def _decode_stream(model, fwd, device, batch, steps):
    """Prefills a random prompt into a StaticCache, then returns (step, warm):
    step() runs `fwd` on the last greedy token (fed back on the device) and
    warm is the time of the warm-up steps (the first compiled call compiles)."""
    from transformers import StaticCache

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, PROMPT), generator=gen).to(device)
    total = PROMPT + WARM_STEPS + 2 + steps + 2
    cache = StaticCache(config=model.config, max_cache_len=total, max_batch_size=batch)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True,
                cache_position=torch.arange(PROMPT, device=device), logits_to_keep=1)
    state = {"tok": out.logits[:, -1:].argmax(-1), "pos": PROMPT}

    def step():
        p = torch.tensor([state["pos"]], device=device)
        o = fwd(input_ids=state["tok"], past_key_values=cache, use_cache=True, cache_position=p,
                logits_to_keep=1)
        state["tok"] = o.logits[:, -1:].argmax(-1)
        state["pos"] += 1

    t0 = time.perf_counter()
    for _ in range(WARM_STEPS + 2):
        step()
    _sync(device)
    return step, time.perf_counter() - t0


@torch.no_grad()
def _decode_pair(model, cfwd, device, batch, steps, chunks=CHUNKS + 1):
    """Eager and compiled decode of `model` with their timed chunks
    alternating (eager, compiled, eager, ...), so that the machine's drift
    during the run falls on both: (eager tok/s, compiled tok/s, compiled
    warm-up seconds), each from its fastest chunk."""
    eager, _ = _decode_stream(model, model, device, batch, steps)
    compiled, warm = _decode_stream(model, cfwd, device, batch, steps)
    per = max(1, steps // chunks)
    best = {"e": None, "c": None}
    for _ in range(chunks):
        for key, fn in (("e", eager), ("c", compiled)):
            dt = _best(fn, device, per, chunks=1)
            best[key] = dt if best[key] is None else min(best[key], dt)
    return batch / best["e"], batch / best["c"], warm


def _train_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).train()


def _train_stream(model, device):
    """(step, warm): step() is one forward + backward + AdamW step of `model`
    on a fixed batch; warm is the time of two warm-up steps (the first
    compiled call compiles)."""
    ids = torch.randint(0, 4096, (8, 64), generator=torch.Generator().manual_seed(3)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()

    t0 = time.perf_counter()
    step()
    step()
    _sync(device)
    return step, time.perf_counter() - t0


def _train_all(steps):
    """The training step on tpu and CPU, eager and compiled, with the timed
    chunks of the four taking turns so that the machine's drift during the
    run falls on all of them: ({(device, mode): steps/s of the fastest
    chunk}, {(device, mode): warm-up seconds})."""
    torch._dynamo.reset()
    fns, warm = {}, {}
    for device in ("cpu", "tpu"):
        for mode in ("eager", "compiled"):
            m = _train_model().to(device)
            if mode == "compiled":
                m = torch.compile(m, backend="tpu" if device == "tpu" else "inductor", fullgraph=True,
                                  dynamic=False)
            fns[(device, mode)], warm[(device, mode)] = _train_stream(m, device)
    best = {}
    for _ in range(CHUNKS):
        for key, fn in fns.items():
            dt = _best(fn, key[0], max(1, steps // CHUNKS), chunks=1)
            best[key] = min(dt, best.get(key, dt))
    return {k: 1.0 / v for k, v in best.items()}, warm


def _chain(x):
    return (torch.sigmoid(x * 2 + 1) * x - 0.5).abs()


_CHILD = """
import json, sys, time, torch, torch_tpu
sys.path.insert(0, %r)
from bench.models import smollm2
from bench.compile import _decode_stream
m = smollm2(torch.float32).to("tpu")
t0 = time.perf_counter()
with torch.no_grad():  # prefill and the first decode steps (the first compiled call compiles)
    _decode_stream(m, torch.compile(m, backend="tpu", fullgraph=True, dynamic=False), "tpu", 1, 1)
dt = time.perf_counter() - t0
s = torch.tpu.compile_stats()
print(json.dumps({"first_calls_s": dt, "lowering_s": s["compile_seconds"],
                  "cc_s": s["codegen_compile_seconds"], "functions": s["codegen_functions"],
                  "cache_hits": s["codegen_cache_hits"]}))
"""


def _second_process(log):
    """SmolLM2's compiled decode in two fresh processes sharing one empty
    TORCH_TPU_CACHE_DIR: what the on-disk cache saves the second one."""
    import json
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    with tempfile.TemporaryDirectory(prefix="torch_tpu_bench_cache_") as d:
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", _CHILD % root], capture_output=True, text=True,
                               env={**os.environ, "TORCH_TPU_CACHE_DIR": d}, timeout=900)
            if r.returncode != 0:
                log("  second-process measurement failed: " + r.stderr[-500:])
                return None
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    log(f"  compile cache: first process {out[0]['first_calls_s']:.1f} s (C compiler {out[0]['cc_s']:.2f} s), "
        f"second {out[1]['first_calls_s']:.1f} s (C compiler {out[1]['cc_s']:.2f} s, cache hits "
        f"{out[1]['cache_hits']})")
    return out


_OPT_CHILD = """
import json, sys
sys.path.insert(0, %r)
from bench.compile import _optimizer_ms
print(json.dumps(_optimizer_ms("tpu", False, %d)))
"""


def _optimizer_ms(device, fused, per):
    """ms per AdamW step over the small Llama's parameters with random
    gradients; each timed step ends with a sync, so the device runs one
    step's list ops at a time, as between a training step's backward and the
    next forward."""
    model = _train_model().to(device)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(5)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if fused else None)
    opt.step()

    def step():
        opt.step()
        _sync(device)

    return 1e3 * _best(step, device, per)


def _optimizer_row(quick, log):
    """The training step's optimizer alone, ms per step. Columns reuse the
    table's: tpu eager = default AdamW (foreach on tpu: list ops grouped by
    the queue), tpu compiled = fused=True (native _fused_adamw_), CPU eager =
    default (single-tensor on CPU), CPU inductor = fused=True on the CPU. A
    second row gives tpu's default with TORCH_TPU_LIST_FUSION=0 (a fresh
    process), i.e. each list op streaming all its lists."""
    import json
    import subprocess
    import sys

    per = 3 if quick else 6
    vals = {(device, fused): _optimizer_ms(device, fused, per) for device in ("cpu", "tpu") for fused in (False, True)}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _OPT_CHILD % (root, per)], capture_output=True, text=True,
                       env={**os.environ, "TORCH_TPU_LIST_FUSION": "0"}, timeout=900)
    off = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    if off is None:
        log("  list-fusion-off measurement failed: " + r.stderr[-500:])
    log(f"  AdamW step: tpu default {vals[('tpu', False)]:.1f} ms (list fusion off: "
        f"{off if off is None else round(off, 1)} ms), fused {vals[('tpu', True)]:.1f} ms; "
        f"CPU default {vals[('cpu', False)]:.1f} ms, fused {vals[('cpu', True)]:.1f} ms")
    rows = []
    for label, te in (("AdamW step alone, 5.2M params (default | fused=True)", vals[("tpu", False)]),
                      ("  same, TORCH_TPU_LIST_FUSION=0 (default only)", off)):
        row = _row(label, "ms (lower is better)", te, vals[("tpu", True)], vals[("cpu", False)],
                   vals[("cpu", True)], "—")
        # lower is better here: ratios as speed-ups of tpu fused
        row["compiled_vs_eager"] = te / vals[("tpu", True)] if te else None
        row["compiled_vs_inductor"] = vals[("cpu", True)] / vals[("tpu", True)]
        rows.append(row)
    return rows


def _row(workload, unit, te, tc, ce, ci, warm):
    r = {"workload": workload, "unit": unit, "tpu_eager": te, "tpu_compiled": tc, "cpu_eager": ce,
         "cpu_inductor": ci, "first_call_s": warm}
    r["compiled_vs_eager"] = tc / te if tc and te else None
    r["compiled_vs_inductor"] = tc / ci if tc and ci else None
    return r


def measure(quick, bw_all, log=print):
    import torch._dynamo

    from torch_tpu._dynamo_backend import compile_stats

    from .models import smollm2

    rows = []
    base = smollm2(torch.float32)
    models = {"cpu": base, "tpu": None}
    import copy

    models["tpu"] = copy.deepcopy(base).to("tpu")
    plans = [(1, 6 if quick else 24)] + ([] if quick else [(64, 6)])
    for batch, steps in plans:
        vals, warm = {}, {}
        for device in ("cpu", "tpu"):
            m = models[device]
            torch._dynamo.reset()
            backend = "tpu" if device == "tpu" else "inductor"
            cm = torch.compile(m, backend=backend, fullgraph=True, dynamic=False)
            vals[device + " eager"], vals[device + " compiled"], warm[device] = _decode_pair(
                m, cm, device, batch, steps)
            log(f"  decode b{batch} {device}: eager {vals[device + ' eager']:.1f}, compiled "
                f"{vals[device + ' compiled']:.1f} tok/s (first compiled steps {warm[device]:.1f} s)")
        rows.append(_row(f"SmolLM2-135M decode b{batch} (static cache)", "tok/s", vals["tpu eager"],
                         vals["tpu compiled"], vals["cpu eager"], vals["cpu compiled"],
                         f"tpu {warm['tpu']:.1f}, inductor {warm['cpu']:.1f}"))
    del models, base

    vals, warm = _train_all(3 if quick else 15)
    for (device, mode), v in vals.items():
        log(f"  training step {device} {mode}: {v:.2f} steps/s")
    rows.append(_row("Llama 4L h256 training step (8x64, AdamW)", "steps/s", vals[("tpu", "eager")],
                     vals[("tpu", "compiled")], vals[("cpu", "eager")], vals[("cpu", "compiled")],
                     f"tpu {warm[('tpu', 'compiled')]:.1f}, inductor {warm[('cpu', 'compiled')]:.1f}"))

    rows.extend(_optimizer_row(quick, log))

    n = 1 << 24
    moved = 2 * n * 4 / 1e9
    vals = {}
    for device in ("cpu", "tpu"):
        x = torch.randn(n, generator=torch.Generator().manual_seed(4)).to(device)
        for mode in ("eager", "compiled"):
            torch._dynamo.reset()
            fn = _chain if mode == "eager" else torch.compile(
                _chain, backend="tpu" if device == "tpu" else "inductor", fullgraph=True, dynamic=False)
            fn(x)
            vals[(device, mode)] = moved / _best(lambda: fn(x), device, 3 if quick else 5)
        if device == "tpu":  # the same graph on the tile interpreter instead of generated code
            torch._dynamo.reset()
            os.environ["TORCH_TPU_CODEGEN"] = "0"
            try:
                fn = torch.compile(_chain, backend="tpu", fullgraph=True, dynamic=False)
                fn(x)
            finally:
                del os.environ["TORCH_TPU_CODEGEN"]
            vals[("tpu", "interpreter")] = moved / _best(lambda: fn(x), device, 3 if quick else 5)
    r = _row("fused chain |sigmoid(2x+1)*x-0.5|, 16M fp32", "GB/s", vals[("tpu", "eager")],
             vals[("tpu", "compiled")], vals[("cpu", "eager")], vals[("cpu", "compiled")], "—")
    r["pct_bandwidth"] = 100 * r["tpu_compiled"] / bw_all if bw_all else None
    rows.append(r)
    ri = _row("  same, TORCH_TPU_CODEGEN=0 (tile interpreter)", "GB/s", vals[("tpu", "eager")],
              vals[("tpu", "interpreter")], vals[("cpu", "eager")], vals[("cpu", "compiled")], "—")
    ri["pct_bandwidth"] = 100 * ri["tpu_compiled"] / bw_all if bw_all else None
    rows.append(ri)
    log(f"  fused chain tpu compiled {r['tpu_compiled']:.1f} GB/s (interpreter {ri['tpu_compiled']:.1f}), "
        f"eager {r['tpu_eager']:.1f}")
    cache = _second_process(log)
    s = compile_stats()
    return {"rows": rows, "cache": cache, "stats": {k: s[k] for k in ("misses", "hits", "compile_seconds", "segments", "c_nodes",
                                                       "eager_nodes", "fused_groups", "fused_nodes")},
            "eager_ops": s["eager_ops"]}
