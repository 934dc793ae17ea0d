"""One run of the whole benchmark: machine limits, GEMM, per-op overhead, models, compile.

    python -m bench            # full run (< 15 min on a 2-core machine), writes
                               # bench/results/<date>.json and docs/bench.md
    python -m bench --quick    # ~2-minute subset, writes bench/results/<date>-quick.json
                               # (docs/bench.md only with --docs)

Environment variables must be set before torch is imported (bench/__main__.py does it):
TORCH_TPU_NUM_THREADS defaults to the core count, TORCH_TPU_HOST_MEMORY to 12G.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("machine", "gemm", "overhead", "fft", "mainjob", "models", "compile", "diffusion", "pjrt", "profiler",
            "dist")
MODELS = ("smollm2", "qwen3", "moe", "moe-generate")


def setup_env():
    from .machine import cpu_info

    cores = cpu_info()["cores"]
    os.environ.setdefault("TORCH_TPU_NUM_THREADS", str(cores))
    os.environ.setdefault("TORCH_TPU_HOST_MEMORY", "12G")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # GGUF de-quantisation progress bar
    return cores


def _commit():
    try:
        h = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return h + (" + uncommitted changes" if dirty else "") if h else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="~2-minute subset")
    p.add_argument("--skip", default="", help=f"comma-separated sections to skip: {','.join(SECTIONS)}")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--optimize", action="store_true",
                   help="also measure torch_tpu.optimize()'d models (rows 'tpu+optimize')")
    p.add_argument("--docs", action="store_true", help="write docs/bench.md (default for full runs)")
    p.add_argument("--no-write", action="store_true", help="print only; write no files")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/<date>[-quick].json)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    t_start = time.perf_counter()
    cores = setup_env()

    from .machine import cpu_info, load_average

    load_before = load_average()
    info = cpu_info()

    def log(msg):
        print(msg, flush=True)

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    bad = skip - set(SECTIONS)
    if bad:
        raise SystemExit(f"--skip: unknown section(s) {sorted(bad)}; choose from {SECTIONS}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = set(models) - set(MODELS)
    if bad:
        raise SystemExit(f"--models: unknown model(s) {sorted(bad)}; choose from {MODELS}")

    from .machine import Contention

    res = {"notes": [], "contention": {}}
    total = Contention(cores)
    sect = Contention(cores)

    def done(name):
        c = sect.stop()
        res["contention"][name] = c
        if c["others_pct"] is not None:
            log(f"  [{name}: other processes used {c['others_pct']:.0f}% of the {cores} cores]")
        sect.start()

    peak = bw_all = None
    if "machine" not in skip:
        log("[bench] machine limits (C microbenchmarks)")
        from . import machine

        vals = machine.measure(cores, quick=args.quick, log=log)
        passes = [vals]
        peak, bw_all = vals.get("fma_gflops_all"), vals.get("bw_gbs_all")
        done("machine")

    import torch
    import transformers

    import torch_tpu  # noqa: F401  (registers the device)

    torch.set_num_threads(cores)
    tpu_threads = os.environ["TORCH_TPU_NUM_THREADS"]
    log(f"[bench] torch {torch.__version__}, {cores} cores, torch threads {torch.get_num_threads()}, "
        f"TORCH_TPU_NUM_THREADS={tpu_threads}")

    if "gemm" not in skip:
        log("[bench] GEMM (F.linear) at LLM shapes")
        from . import ops

        res["gemm"] = ops.gemm(peak, quick=args.quick, log=log)
        done("gemm")
    if "overhead" not in skip:
        log("[bench] per-op eager overhead")
        from . import ops

        res["overhead"] = ops.overhead(quick=args.quick, log=log)
        done("overhead")
    if "fft" not in skip:
        log("[bench] FFT kernels (torch.ops.tpu.fft_*) vs torch.fft on the CPU")
        from . import ops

        res["fft"] = ops.fft(quick=args.quick, log=log)
        done("fft")
    if "mainjob" not in skip:
        log("[bench] the main job (SmolLM2-135M Q4_1 GGUF, greedy) vs llama.cpp and torch CPU, one process each")
        from . import mainjob

        res["mainjob"] = mainjob.measure(args.quick, log=log, notes=res["notes"])
        done("mainjob")
    if "models" not in skip and models:
        res["models"] = run_models(models, args.quick, bw_all, res["notes"], log, done, args.optimize)
    if "compile" not in skip:
        log("[bench] torch.compile: backend tpu vs tpu eager vs CPU eager vs inductor on CPU")
        from . import compile as C

        res["compile"] = C.measure(args.quick, bw_all, log=log)
        done("compile")
    if "diffusion" not in skip:
        log("[bench] one denoiser step (Diffusers UNet, Flux): tpu eager and compiled vs CPU eager and inductor")
        from . import diffusion

        res["diffusion"] = diffusion.measure(args.quick, log=log)
        done("diffusion")

    if "pjrt" not in skip:
        log("[bench] pjrt driver (XLA's CPU plugin) vs host driver, per op, for information")
        from . import pjrt

        res["pjrt"] = pjrt.measure(args.quick, log=log)
        done("pjrt")

    if "profiler" not in skip:
        log("[bench] device profiler cost: no profiler vs profile(CPU) vs profile(CPU, PrivateUse1), both drivers")
        from . import profiler

        res["profiler"] = profiler.measure(args.quick, log=log)
        done("profiler")

    if "dist" not in skip:
        log("[bench] all_reduce between 2 processes: tpu_dist (shared memory, Gloo) vs gloo on CPU")
        from . import dist

        res["dist"] = dist.measure(args.quick, bw_all, log=log)
        log("[bench] send/recv between 2 processes: tpu_dist vs gloo on CPU")
        res["dist_p2p"] = dist.p2p(args.quick, log=log)
        log("[bench] tensor-parallel decode: 1 chip vs tp_plan='auto' on 2 chips (2 processes, tpu_dist)")
        res["dist_tp"] = dist.tp_decode(args.quick, log=log)
        done("dist")

    if "machine" not in skip:
        if not args.quick:
            log("[bench] machine limits again (the best of both passes is kept)")
            passes.append(machine.measure(cores, quick=args.quick, log=log))
            done("machine, 2nd pass")
        vals = machine.merge(passes)
        peak, bw_all, dnotes = machine.denominators(vals, cores)
        rows = machine.table_rows(vals, cores)
        rows.append(("→ fp32 peak used for '% of peak'", peak, "GFLOP/s", ""))
        rows.append(("→ bandwidth used for the roofline", bw_all, "GB/s", ""))
        res["machine"] = {"values": vals, "passes": passes, "rows": rows,
                          "peak_gflops": peak, "bw_gbs": bw_all}
        res["notes"] += [n[:1].upper() + n[1:] + "." for n in dnotes]
        for key, what, unit in (("bw_gbs_1thread", "1-thread read bandwidth", "GB/s"),
                                ("bw_gbs_all", f"{cores}-thread read bandwidth", "GB/s"),
                                ("fma_gflops_all", f"{cores}-core FMA peak", "GFLOP/s")):
            got = [p[key] for p in passes if p.get(key)]
            if len(got) > 1 and max(got) > 1.2 * min(got):
                res["notes"].append(
                    f"The {what} differed between the two passes ({' and '.join(f'{g:.1f}' for g in got)} "
                    f"{unit}); the higher is used. Memory bandwidth of this VM varies from minute to minute "
                    "(the host's memory system is shared), so rooflines are approximate.")
        derive(res, peak, bw_all)
        if "avx512f" in info["isa"]:
            note = ("This CPU has AVX-512F" + (" and AVX512_BF16" if "avx512_bf16" in info["isa"] else "")
                    + ": stock PyTorch (oneDNN) uses them; the tpu host kernels use AVX2+FMA+F16C, and "
                    "AVX512_BF16 (vdpbf16ps) for bf16 x bf16 matrix products.")
            f, z, b = (vals.get(k) for k in ("fma_gflops_all", "fma512_gflops_all", "bf16_gflops_all"))
            if f and z:
                note += f" Measured all-core: fp32 zmm FMA {z:.0f} vs ymm {f:.0f} GFLOP/s"
                note += f", bf16 vdpbf16ps {b:.0f} GFLOP/s." if b else "."
            res["notes"].append(note)

    elapsed = time.perf_counter() - t_start
    res["contention"]["whole run"] = total.stop()
    now = datetime.datetime.now()
    res["meta"] = {
        "date": now.strftime("%Y-%m-%d %H:%M"),
        **info,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__, "python": sys.version.split()[0],
        "commit": _commit(), "tpu_threads": tpu_threads,
        "tpu_host_memory": os.environ.get("TORCH_TPU_HOST_MEMORY"),
        "command": "python -m bench" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else ""),
        "quick": args.quick, "elapsed_s": elapsed,
        "load_before": _load(load_before), "load_after": _load(load_average()),
    }
    busy = [k for k, c in res["contention"].items() if (c.get("others_pct") or 0) > 10]
    if busy:
        res["notes"].append(
            "The machine was shared: other processes used more than 10% of the cores during "
            f"{', '.join(busy)} (see the contention row above). Absolute numbers there are low and "
            "noisy. torch CPU suffers more than tpu from this: its OpenMP kernels split work "
            "statically, so one descheduled thread stalls the whole op (see bench/README.md).")

    from . import report

    print(report.text(res))
    print(f"\n[bench] finished in {elapsed / 60:.1f} min")
    if not args.no_write:
        out = args.out or os.path.join(
            ROOT, "bench", "results", now.strftime("%Y-%m-%d") + ("-quick" if args.quick else "") + ".json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1, default=str)
        print(f"[bench] wrote {os.path.relpath(out, os.getcwd())}")
        if args.docs or not args.quick:
            md = os.path.join(ROOT, "docs", "bench.md")
            os.makedirs(os.path.dirname(md), exist_ok=True)
            with open(md, "w") as f:
                f.write(report.markdown(res))
            print(f"[bench] wrote {os.path.relpath(md, os.getcwd())}")
    return 0


def derive(res, peak, bw_all):
    """(Re)computes % of peak and rooflines from the final machine limits."""
    for r in res.get("gemm", []):
        r["tpu_pct_peak"] = 100 * r["tpu_gflops"] / peak if peak else None
        r["cpu_pct_peak"] = 100 * r["cpu_gflops"] / peak if peak else None
    for r in res.get("models", []):
        if r.get("weight_bytes") and bw_all and r.get("tpu_tok_s"):
            roof = bw_all * 1e9 / r["weight_bytes"]
            r.update(roofline_tok_s=roof, tpu_pct_roofline=100 * r["tpu_tok_s"] / roof,
                     cpu_pct_roofline=100 * r["cpu_tok_s"] / roof)


def _load(la):
    return "unknown" if not la else f"{la[0]:.2f}"


def run_models(models, quick, bw_all, notes, log, done, optimize=False):
    import torch

    from . import models as M

    f32, bf16 = torch.float32, torch.bfloat16
    rows = []
    if quick:
        plans = {
            "smollm2": {"decode": [(1, 12), (64, 3)], "prefill": (512, 1)},
            "qwen3": {"decode": [(1, 6)], "prefill": (512, 1)},
            "moe": {"decode": [(1, 6)], "prefill": (512, 1)},
        }
    else:
        plans = {
            "smollm2": {"decode": [(1, 24), (64, 12)], "prefill": (512, 2)},
            "qwen3": {"decode": [(1, 12), (64, 6)], "prefill": (512, 1)},
            "moe": {"decode": [(1, 15), (64, 6)], "prefill": (512, 1)},
        }
    if "smollm2" in models:
        log("[bench] SmolLM2-135M-Instruct (real weights, GGUF Q4_1 dequantised)")
        rows += M.run_model("SmolLM2-135M", M.smollm2, (f32, bf16), plans["smollm2"], bw_all, log,
                            optimize=optimize, gguf=M.smollm2_gguf_path())
        done("SmolLM2-135M")
        notes.append("SmolLM2-135M is loaded once with from_pretrained(dtype=float32) (GGUF Q4_1 "
                     "dequantised) and cast in place to bfloat16 for the bf16 rows.")
    if "qwen3" in models:
        log("[bench] Qwen3-0.6B config, random weights")
        skip = {}
        if quick:
            skip = {("bfloat16", "decode b1"): "quick", ("bfloat16", "prefill 512"): "quick",
                    ("float32", "prefill 512"): "quick"}
        rows += M.run_model("Qwen3-0.6B", M.qwen3_06b, (f32,) if quick else (f32, bf16),
                            plans["qwen3"], bw_all, log, skip=skip,
                            optimize=optimize, weight_only=(8, 4))
        done("Qwen3-0.6B")
    if "moe" in models:
        log(f"[bench] MoE: Qwen3-30B-A3B geometry, {M.moe_layers()} layer(s), random weights")
        impl, why = M.moe_experts_implementation(log)
        if why:
            notes.append(f"MoE: Transformers' default experts implementation {why}; both devices run "
                         "experts_implementation='eager' (a Python loop over the experts hit, with "
                         "nonzero/where/index_add per expert).")
        else:
            notes.append("MoE: both devices run Transformers' default experts_implementation="
                         "'grouped_mm' (tokens sorted by expert, histc for the group sizes, then "
                         "torch's grouped_mm where Transformers allows it, else its per-expert mm loop); "
                         "on tpu that is the native aten::_grouped_mm kernel (runtime/kernels/moe.c).")
        skip = {("float32", "prefill 512"): "quick"} if quick else {}
        rows += M.run_model(f"Qwen3-MoE-{M.moe_layers()}L", lambda d: M.qwen3_moe(d, impl),
                            (f32,) if quick else (f32, bf16), plans["moe"], bw_all, log, skip=skip,
                            optimize=optimize)
        done("Qwen3-MoE")
    if "moe-generate" in models:
        log("[bench] MoE through generate(): Transformers' decode path (batched_mm experts on tpu), "
            f"Qwen3-30B-A3B geometry, {M.moe_layers()} layer(s)")
        g_rows = M.run_generate(f"Qwen3-MoE-{M.moe_layers()}L", lambda d: M.qwen3_moe(d, "grouped_mm"),
                                (f32,) if quick else (f32, bf16), 64, 4 if quick else 6, log, bw_all)
        rows += g_rows
        done("Qwen3-MoE generate()")
        for r in g_rows:
            notes.append(f"Qwen3-MoE generate() decode b64, {r['dtype']}: model.generate() unchanged (greedy, "
                         f"{r['steps']} new tokens per call, CPU and tpu calls alternating, rate of the decode "
                         "steps of the fastest call); Transformers decodes with experts_implementation="
                         "'batched_mm' on tpu (weight[expert_ids] then bmm: a lazy gather and tpu::gather_bmm "
                         "here, see README) and 'grouped_mm' on the CPU. " + M.generate_summary(r) + ".")
    if "moe" in models or "moe-generate" in models:
        notes.append(f"Qwen3-MoE-{M.moe_layers()}L: hidden 2048, 128 experts, top-8, expert width 768, "
                     f"32/4 heads of 128, {M.moe_layers()} decoder layer(s), vocab 16384 (tied) — "
                     "Qwen3-30B-A3B's layer geometry, not its depth; random weights.")
    return rows


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from bench.run import main as _main  # noqa: E402

    sys.exit(_main())
