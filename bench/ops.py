"""Operator-level measurements: GEMM at LLM shapes and per-op eager overhead."""
import time

import torch
import torch.nn.functional as F

import torch_tpu

# (model, layer, K, N): y[M, N] = x[M, K] @ W[N, K]^T, as nn.Linear stores W.
GEMM_SHAPES = [
    ("SmolLM2-135M", "q/o_proj", 576, 576),
    ("SmolLM2-135M", "gate/up_proj", 576, 1536),
    ("SmolLM2-135M", "down_proj", 1536, 576),
    ("Qwen3-0.6B", "q_proj", 1024, 2048),
    ("Qwen3-0.6B", "gate/up_proj", 1024, 3072),
    ("Qwen3-0.6B", "down_proj", 3072, 1024),
    ("Qwen3-0.6B", "lm_head", 1024, 151936),
]
GEMM_M = (1, 16, 64, 512)
LM_HEAD_M = (1, 16)
QUICK_SHAPES = {("SmolLM2-135M", "gate/up_proj"), ("Qwen3-0.6B", "down_proj"), ("Qwen3-0.6B", "lm_head")}


def tpu_sync():
    torch.tpu.synchronize()


def no_sync():
    pass


def time_per_call(fn, sync, min_time=0.1, repeats=3, max_calls=100000):
    """Seconds per call: warm up once, size a batch of calls to last >= min_time, then the
    fastest of `repeats` batches (the machine may be shared; the fastest batch is the one
    least disturbed). `sync` ends each batch (torch.tpu.synchronize for tpu)."""
    n = _batch_size(fn, sync, min_time, max_calls)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _batch_size(fn, sync, min_time, max_calls):
    """Calls per batch so that one batch lasts >= min_time (after one warm-up call)."""
    fn()
    sync()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        dt = time.perf_counter() - t0
        if dt >= min_time or n >= max_calls:
            return n
        n = min(max_calls, max(n * 2, int(n * min_time / max(dt, 1e-9) * 1.2)))


def time_pair(fn_a, sync_a, fn_b, sync_b, min_time=0.1, repeats=3, max_calls=100000):
    """(seconds per call of fn_a, of fn_b), their batches taking turns: each side's batch
    is sized as in time_per_call, then `repeats` rounds of one batch of a and one of b,
    the fastest batch of each kept. Load from other processes then falls on both sides
    within the same second or so, rather than on whichever side ran while it lasted."""
    na = _batch_size(fn_a, sync_a, min_time, max_calls)
    nb = _batch_size(fn_b, sync_b, min_time, max_calls)
    best_a = best_b = float("inf")
    for _ in range(repeats):
        for fn, sync, n, side in ((fn_a, sync_a, na, 0), (fn_b, sync_b, nb, 1)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            dt = (time.perf_counter() - t0) / n
            if side == 0:
                best_a = min(best_a, dt)
            else:
                best_b = min(best_b, dt)
    return best_a, best_b


def fallback_summary(report):
    """'op×count, ...' for a torch_tpu.fallback_report() dict ('—' when empty)."""
    if not report:
        return "—"
    items = sorted(report.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k.replace('aten::', '')}×{v}" for k, v in items)


# (dtype, torch.set_float32_matmul_precision value) per GEMM row; "medium" lets float32
# products use bfloat16 operands, on tpu (runtime/kernels/linalg.c) and in stock torch.
GEMM_VARIANTS = ((torch.float32, "highest"), (torch.float32, "medium"), (torch.bfloat16, "highest"))


def gemm(peak_gflops, quick=False, log=print):
    rows = []
    min_time, repeats = (0.04, 3) if quick else (0.06, 5)
    gen = torch.Generator().manual_seed(0)
    for model, layer, K, N in GEMM_SHAPES:
        if quick and (model, layer) not in QUICK_SHAPES:
            continue
        ms = LM_HEAD_M if layer == "lm_head" else GEMM_M
        if quick:
            ms = tuple(m for m in ms if m in (1, 64))
        for dtype, precision in GEMM_VARIANTS:
            w = torch.randn(N, K, generator=gen).to(dtype) * K ** -0.5
            wt = w.to("tpu")
            name = str(dtype).replace("torch.", "") + ("/medium" if precision == "medium" else "")
            torch.set_float32_matmul_precision(precision)
            for M in ms:
                x = torch.randn(M, K, generator=gen).to(dtype)
                xt = x.to("tpu")
                flop = 2.0 * M * N * K
                torch_tpu.reset_fallback_report()
                # tpu and CPU batches take turns (time_pair), so that load from other
                # processes affects both alike.
                t_tpu, t_cpu = time_pair(lambda: F.linear(xt, wt), tpu_sync, lambda: F.linear(x, w), no_sync,
                                         min_time, repeats)
                fb = torch_tpu.fallback_report()
                g_tpu, g_cpu = flop / t_tpu * 1e-9, flop / t_cpu * 1e-9
                wbytes = N * K * w.element_size()
                row = {
                    "model": model, "layer": layer, "M": M, "K": K, "N": N,
                    "dtype": name,
                    "tpu_gflops": g_tpu, "cpu_gflops": g_cpu, "ratio": g_tpu / g_cpu,
                    "tpu_pct_peak": 100 * g_tpu / peak_gflops if peak_gflops else None,
                    "cpu_pct_peak": 100 * g_cpu / peak_gflops if peak_gflops else None,
                    "tpu_weight_gbs": wbytes / t_tpu * 1e-9, "cpu_weight_gbs": wbytes / t_cpu * 1e-9,
                    "tpu_ms": t_tpu * 1e3, "cpu_ms": t_cpu * 1e3,
                    "fallbacks": fb,
                }
                rows.append(row)
                log(f"  {model:12s} {layer:12s} M={M:<4d} K={K:<5d} N={N:<6d} {row['dtype']:8s} "
                    f"tpu {g_tpu:7.1f}  cpu {g_cpu:7.1f} GFLOP/s  ratio {row['ratio']:.2f}"
                    + (f"  fallbacks: {fallback_summary(fb)}" if fb else ""))
            del w, wt
            torch.set_float32_matmul_precision("highest")
    return rows


def overhead(quick=False, log=print):
    """Round trip of a tiny add (two 16-element float32 tensors), microseconds per op."""
    rows = []
    a, b = torch.randn(16), torch.randn(16)
    at, bt = a.to("tpu"), b.to("tpu")
    min_time = 0.1 if quick else 0.2
    for name, fa, fb_, in (("add, 16 elements (a + b)", lambda: a + b, lambda: at + bt),
                           ("add_, 16 elements (a.add_(b), in place)", lambda: a.add_(b), lambda: at.add_(bt))):
        torch_tpu.reset_fallback_report()
        t_tpu = time_per_call(fb_, tpu_sync, min_time, repeats=5)
        fb = torch_tpu.fallback_report()
        t_cpu = time_per_call(fa, no_sync, min_time, repeats=5)
        rows.append({"op": name, "tpu_us": t_tpu * 1e6, "cpu_us": t_cpu * 1e6,
                     "ratio": t_tpu / t_cpu, "fallbacks": fb})
        log(f"  {name}: tpu {t_tpu * 1e6:.2f} us, cpu {t_cpu * 1e6:.2f} us per op")
    # Same op with a synchronisation after every op: what a data-dependent host
    # decision (.item(), .cpu(), nonzero) costs on the tpu queue.
    t_sync = time_per_call(lambda: (at + bt, tpu_sync()), no_sync, min_time, repeats=5)
    t_cpu = time_per_call(lambda: a + b, no_sync, min_time, repeats=5)
    rows.append({"op": "add, 16 elements, synchronize() after each op", "tpu_us": t_sync * 1e6,
                 "cpu_us": t_cpu * 1e6, "ratio": t_sync / t_cpu, "fallbacks": {}})
    log(f"  add + synchronize each: tpu {t_sync * 1e6:.2f} us")
    return rows


def fft(quick=False, log=print):
    """The FFT kernels (runtime/kernels/fft.c) on the real views of complex tensors, through
    torch.ops.tpu.fft_c2c / fft_r2c, against torch.fft on the CPU: milliseconds per call."""
    ops = torch.ops.tpu
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 20, dtype=torch.complex64, generator=gen)
    xt = torch.view_as_real(x).to("tpu")
    r = torch.randn(4096, 4096, generator=gen)
    rt = r.to("tpu")
    cases = (
        ("torch.fft.fft of 2^20 complex64", lambda: torch.fft.fft(x), lambda: ops.fft_c2c(xt, [0], 0, True)),
        ("torch.fft.rfft of 4096x4096 float32 (last dim)", lambda: torch.fft.rfft(r),
         lambda: ops.fft_r2c(rt, [1], 0, True)),
    )
    min_time = 0.2 if quick else 0.5
    rows = []
    for name, f_cpu, f_tpu in cases:
        t_tpu = time_per_call(f_tpu, tpu_sync, min_time, repeats=3)
        t_cpu = time_per_call(f_cpu, no_sync, min_time, repeats=3)
        rows.append({"op": name, "tpu_ms": t_tpu * 1e3, "cpu_ms": t_cpu * 1e3, "ratio": t_cpu / t_tpu})
        log(f"  {name}: tpu {t_tpu * 1e3:.2f} ms, cpu {t_cpu * 1e3:.2f} ms, tpu/cpu speed {t_cpu / t_tpu:.2f}")
    return rows
