"""Tables: plain text for the terminal and Markdown for docs/bench.md (same content)."""
from .dist import _size
from .ops import fallback_summary


def _f(v, nd=1):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{nd}f}"


def _fb(report, limit=4):
    s = fallback_summary(report)
    parts = s.split(", ")
    if len(parts) > limit:
        s = ", ".join(parts[:limit]) + f", +{len(parts) - limit} more"
    return s


def sections(res):
    """[(title, note, header, rows)] with every cell already a string."""
    out = []
    m = res.get("machine")
    if m:
        out.append(("Machine limits", "measured by bench/csrc/machine.c, compiled at bench time with "
                    f"{m['values'].get('cc', 'cc')} -O2; best of several runs, at the start and the end of a full run",
                    ["measurement", "value", "unit", "note"],
                    [[r[0], _f(r[1]), r[2], r[3]] for r in m["rows"]]))
    g = res.get("gemm")
    if g:
        out.append(("GEMM: torch.nn.functional.linear(x[M,K], W[N,K])",
                    "GFLOP/s = 2·M·N·K / time; tpu timing includes torch.tpu.synchronize(); "
                    "% of peak = of the fp32 FMA peak in the machine table (also for bf16; where the CPU has "
                    "AVX512_BF16 the tpu bf16 kernels use vdpbf16ps, whose peak is in the machine table); weight GB/s = N·K·bytes / time (compare M=1 rows with the "
                    "bandwidth; small weights stay in cache)",
                    ["model", "layer", "M", "K×N", "dtype", "tpu GFLOP/s", "CPU GFLOP/s", "tpu/CPU",
                     "tpu % peak", "CPU % peak", "tpu weight GB/s (M=1)", "CPU weight GB/s (M=1)",
                     "tpu fallbacks"],
                    [[r["model"], r["layer"], str(r["M"]), f"{r['K']}×{r['N']}", r["dtype"],
                      _f(r["tpu_gflops"]), _f(r["cpu_gflops"]), _f(r["ratio"], 2),
                      _f(r["tpu_pct_peak"]), _f(r["cpu_pct_peak"]),
                      _f(r["tpu_weight_gbs"]) if r["M"] == 1 else "—",
                      _f(r["cpu_weight_gbs"]) if r["M"] == 1 else "—", _fb(r["fallbacks"])]
                     for r in g]))
    o = res.get("overhead")
    if o:
        out.append(("Per-op eager overhead", "microseconds per op, lower is better; tpu: ops queued, "
                    "one torch.tpu.synchronize() at the end of the loop (except the last row)",
                    ["op", "tpu µs/op", "CPU µs/op", "tpu/CPU", "tpu fallbacks"],
                    [[r["op"], _f(r["tpu_us"], 2), _f(r["cpu_us"], 2), _f(r["ratio"], 2),
                      _fb(r["fallbacks"])] for r in o]))
    ff = res.get("fft")
    if ff:
        out.append(("FFT", "milliseconds per call, lower is better; tpu: torch.ops.tpu.fft_c2c / fft_r2c on the real "
                    "view (runtime/kernels/fft.c), torch.tpu.synchronize() at the end of each batch; CPU: torch.fft; "
                    "tpu/CPU = CPU time / tpu time (> 1: tpu faster)",
                    ["op", "tpu ms", "CPU ms", "tpu/CPU"],
                    [[r["op"], _f(r["tpu_ms"], 2), _f(r["cpu_ms"], 2), _f(r["ratio"], 2)] for r in ff]))
    pj = res.get("pjrt")
    if pj:
        out.append(("pjrt driver vs host driver (for information)",
                    "microseconds per eager op or compiled call, lower is better; pjrt runs on XLA's CPU PJRT "
                    "plugin, not a TPU: each eager op is a compiled StableHLO program over byte storages, "
                    "each compiled call one program per graph segment; best of the chunks, the drivers' "
                    "child processes taking turns",
                    ["op", "host µs/op", "pjrt µs/op", "pjrt/host"],
                    [[r["op"], _f(r["host_us"], 1), _f(r["pjrt_us"], 1), _f(r["ratio"], 1)] for r in pj]))
    pf = res.get("profiler")
    if pf:
        out.append(("Device profiler cost (for information)",
                    "microseconds per eager op or compiled call, ops queued and one torch.tpu.synchronize() per "
                    "timing; 'CPU' = inside torch.profiler.profile(activities=[CPU]) (Kineto's own cost), "
                    "'CPU + tpu' = with ProfilerActivity.PrivateUse1 too (the device-queue trace); trace µs = "
                    "the difference; pjrt runs on XLA's CPU PJRT plugin; best of the chunks, modes taking turns",
                    ["driver", "op", "off µs", "CPU µs", "CPU + tpu µs", "trace µs"],
                    [[r["driver"], r["op"], _f(r["off_us"], 1), _f(r["cpu_us"], 1), _f(r["cpu+tpu_us"], 1),
                      _f(r["trace_us"], 1)] for r in pf]))
    ds = res.get("dist")
    if ds:
        out.append(("all_reduce between 2 processes on this host",
                    "float32, best of the timed calls; bus bandwidth = 2(n-1)/n x bytes / time; 'x gloo' is "
                    "stock Gloo on CPU tensors' time over this row's (higher is better); the configurations' "
                    "process pairs take turns",
                    ["size", "transport", "ms", "bus GB/s", "x gloo (CPU)", "of read bandwidth"],
                    [[_size(r["bytes"]), r["config"], _f(r["ms"], 2), _f(r["bus_gbs"], 2),
                      _f(r["vs_gloo_cpu"], 2), f"{r['of_memory_bw']:.0%}" if r.get("of_memory_bw") else "-"]
                     for r in ds]))
    pp = res.get("dist_p2p")
    if pp:
        out.append(("send/recv between 2 processes on this host",
                    "float32, one way = half of the best ping-pong round trip; 'x gloo' is stock Gloo on CPU "
                    "tensors' time over this row's (higher is better); the configurations' process pairs take turns",
                    ["size", "transport", "ms", "GB/s", "x gloo (CPU)"],
                    [[_size(r["bytes"]), r["config"], _f(r["ms"], 3), _f(r["gbs"], 2), _f(r["vs_gloo_cpu"], 2)]
                     for r in pp]))
    tp = res.get("dist_tp")
    if tp:
        out.append(("Tensor-parallel decode (Transformers tp_plan='auto' over tpu_dist)",
                    "Qwen3-0.6B's architecture, random float32 weights, batch 1, greedy steps, fastest chunk; "
                    "1 chip: one process with every core's kernel threads; 2 chips: two processes, one chip and "
                    "cores/2 threads each; the two take turns; peak = rank 0's max_memory_allocated()",
                    ["chips", "tok/s", "x one chip", "rank 0 peak MiB", "model MiB"],
                    [[str(r["chips"]), _f(r["tok_s"], 2), _f(r["vs_one_chip"], 2), _f(r["peak_bytes_rank0"] / 2**20),
                      _f(r["model_bytes"] / 2**20)] for r in tp]))
    mj = res.get("mainjob")
    if mj:
        out.append(("The main job vs llama.cpp (same GGUF file, SmolLM2-135M Q4_1 + Q8_0)",
                    "one fresh process per engine and round, the engines taking turns; tok/s = new tokens / "
                    "time of a whole greedy generation from the prompt (prefill included), best round; load = "
                    "from before the engine's imports to the model ready; first token = a 1-token generation; "
                    "same tokens = leading greedy tokens equal to the tpu default's",
                    ["engine", "path", "tok/s", "x llama.cpp", "load s", "first token ms", "same tokens"],
                    [[r["engine"], r["path"], _f(r["tok_s"]), _f(r["vs_llama_cpp"], 2), _f(r["load_s"], 2),
                      _f(r["ttft_s"] * 1000, 0), f"{r['same_prefix_as_tpu']}/{r['new_tokens']}"] for r in mj]))
    md = res.get("models")
    if md:
        out.append(("Models: eager tokens/s",
                    "higher is better; decode bN = N sequences, one new token each per step (KV "
                    "cache), fastest of 3 timed chunks of steps; prefill 512 = one 512-token prompt; roofline (batch-1 decode) = all-core "
                    "read bandwidth / weight bytes per token; generate() decode b64 = model.generate() itself, "
                    "rate of its decode steps (see bench/README.md), roofline = 64 x bandwidth / weight bytes "
                    "per step (the experts' weights times the share of experts the batch hits); fallbacks = ops run on the CPU during "
                    "the whole tpu run (prefill + warm-up + timed steps)",
                    ["model", "dtype", "run", "tpu tok/s", "CPU tok/s", "tpu/CPU", "roofline tok/s",
                     "tpu % roofline", "CPU % roofline", "tpu fallbacks (calls)"],
                    [[r["model"], r["dtype"], r["kind"],
                      _f(r["tpu_tok_s"]) if not r.get("skipped") else "skipped",
                      _f(r["cpu_tok_s"]) if not r.get("skipped") else "skipped",
                      _f(r["ratio"], 2), _f(r.get("roofline_tok_s")),
                      _f(r.get("tpu_pct_roofline")), _f(r.get("cpu_pct_roofline")),
                      _fb(r["fallbacks"]) if not r.get("skipped") else r["skipped"]]
                     for r in md]))
    c = res.get("compile")
    if c:
        st = c["stats"]
        out.append(("torch.compile: backend \"tpu\" (C graph compiler) vs eager vs inductor",
                    "higher is better; tpu compiled = torch.compile(backend='tpu', fullgraph=True, dynamic=False); "
                    "CPU inductor = torch.compile's default backend on the CPU; first call = seconds of the first "
                    "compiled calls (tracing + compiling); the AdamW rows are ms per synchronised step (lower is "
                    "better) with columns tpu eager = default AdamW on tpu (foreach; the queue runs the step's list "
                    "ops piece by piece; second row: TORCH_TPU_LIST_FUSION=0), tpu compiled = fused=True on tpu, "
                    "CPU eager = default on CPU, CPU inductor = fused=True on CPU, and their ratios are speed-ups "
                    "of tpu fused; "
                    f"lowering over the run: {st['c_nodes']} nodes in C in {st['segments']} segments, "
                    f"{st['eager_nodes']} eager, {st['fused_nodes']} nodes in {st['fused_groups']} fused groups",
                    ["workload", "unit", "tpu eager", "tpu compiled", "CPU eager", "CPU inductor",
                     "compiled/tpu eager", "compiled/inductor", "% bandwidth", "first call s"],
                    [[r["workload"], r["unit"], _f(r["tpu_eager"]), _f(r["tpu_compiled"]), _f(r["cpu_eager"]),
                      _f(r["cpu_inductor"]), _f(r["compiled_vs_eager"], 2), _f(r["compiled_vs_inductor"], 2),
                      _f(r.get("pct_bandwidth")), r["first_call_s"]] for r in c["rows"]]))
        if c.get("cache"):
            out.append(("torch.compile: on-disk cache of generated code (TORCH_TPU_CACHE_DIR)",
                        "SmolLM2-135M static-cache decode compiled in two fresh processes sharing one empty cache "
                        "directory; first calls = prompt + warm-up decode steps, tracing and compiling included; "
                        "lowering = our FX walk + C graph build; C compiler = time in cc (0 when the cache hit)",
                        ["process", "first calls s", "lowering s", "C compiler s", "generated functions",
                         "cache hits"],
                        [[name, _f(p["first_calls_s"]), _f(p["lowering_s"], 2), _f(p["cc_s"], 2),
                          str(p["functions"]), str(p["cache_hits"])]
                         for name, p in zip(("first (cold cache)", "second (warm cache)"), c["cache"])]))
    d = res.get("diffusion")
    if d:
        out.append(("torch.compile: one denoiser step (Diffusers)",
                    "steps/s, higher is better; tiny-but-not-trivial models built from configs (random weights), "
                    "see bench/diffusion.py; tpu compiled = torch.compile(backend='tpu', dynamic=False), CPU "
                    "inductor = torch.compile(backend='inductor') on the CPU; best of the chunks, the variants' "
                    "chunks taking turns; first call = seconds of the first compiled call (tracing + compiling)",
                    ["workload", "tpu eager", "tpu compiled", "CPU eager", "CPU inductor", "compiled/tpu eager",
                     "compiled/CPU eager", "compiled/inductor", "first call s"],
                    [[r["workload"], _f(r["tpu_eager"]), _f(r["tpu_compiled"]), _f(r["cpu_eager"]),
                      _f(r["cpu_inductor"]), _f(r["compiled_vs_eager"], 2), _f(r["compiled_vs_cpu_eager"], 2),
                      _f(r["compiled_vs_inductor"], 2), r["first_call_s"]] for r in d["rows"]]))
    return out


def text(res):
    lines = []
    for title, note, header, rows in sections(res):
        lines += ["", f"== {title} ==", f"   ({note})"]
        widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
        num = _numeric_columns(rows, len(header))
        fmt = lambda cells: "  ".join(c.rjust(w) if num[i] else c.ljust(w)  # noqa: E731
                                      for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        lines.append(fmt(header))
        lines.append("  ".join("-" * w for w in widths))
        lines += [fmt(r) for r in rows]
    cont = res.get("contention") or {}
    parts = [f"{k} {v['others_pct']:.0f}%" for k, v in cont.items() if v.get("others_pct") is not None]
    if parts:
        lines.append("")
        lines.append(f"CPU used by other processes: {', '.join(parts)}")
    for n in res.get("notes", []):
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _num(s):
    return bool(s) and (s[:1].isdigit() or s[:1] in "—-")


def _numeric_columns(rows, n):
    """Columns whose cells are all numbers (or '—'), with at least one number."""
    out = []
    for i in range(n):
        cells = [r[i] for r in rows if r[i] not in ("—", "", "skipped")]
        out.append(bool(cells) and all(c[:1].isdigit() or c[:1] == "-" for c in cells))
    return out


def markdown(res):
    meta = res["meta"]
    lines = [
        "# torch-tpu benchmark",
        "",
        "Generated by `python -m bench` (see `bench/README.md`); do not edit by hand.",
        "",
        "| | |", "|---|---|",
        f"| date | {meta['date']} |",
        f"| machine | {meta['cpu_model']}, {meta['cores']} cores, {', '.join(meta['isa'])}, "
        f"{meta['mem_gib']:.0f} GiB RAM |",
        f"| torch | {meta['torch']} (CPU threads: {meta['torch_threads']}) |",
        f"| transformers | {meta['transformers']} |",
        f"| torch_tpu | commit {meta['commit']}; TORCH_TPU_NUM_THREADS={meta['tpu_threads']} |",
        f"| run | `{meta['command']}`, {meta['elapsed_s'] / 60:.1f} min |",
        f"| load average (1 min) | {meta['load_before']} before, {meta['load_after']} after |",
    ]
    cont = res.get("contention") or {}
    parts = [f"{k} {v['others_pct']:.0f}%" for k, v in cont.items() if v.get("others_pct") is not None]
    if parts:
        lines.append(f"| CPU used by other processes | {', '.join(parts)} of {meta['cores']} cores |")
    for title, note, header, rows in sections(res):
        lines += ["", f"## {title}", "", note[:1].upper() + note[1:] + ".", ""]
        lines.append("| " + " | ".join(header) + " |")
        num = _numeric_columns(rows, len(header))
        lines.append("|" + "|".join("--:" if num[i] else "---" for i in range(len(header))) + "|")
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"
