"""The main job side by side with the peers that run the same GGUF file.

Each engine runs in a fresh child process of its own (`python -m bench.mainjob ENGINE`),
the engines taking turns round by round (the order reversed every other round, so the
machine's drift falls on all of them), and each child prints one JSON line:

- `tpu`: the main job's default path (`torch_tpu.generate.load`, `fuse`, `decode`): the
  file's Q4_1/Q8_0 blocks on the device, fused kernels, the greedy decode step captured
  once and replayed (`torch.tpu.graph`);
- `tpu --act-bits 8`: the same with int8 activations in the quantized products;
- `tpu --dequantize`: the same on Transformers' dequantized float32 weights;
- `llama.cpp`: `llama_cpp.Llama` (PyPI `llama-cpp-python`, when installed; skipped
  with a note otherwise), the same file, the same number of threads, greedy;
- `torch CPU`: stock PyTorch eager, Transformers' dequantized float32 model.

Every engine is timed the same way: load = from before the engine's imports until the
model is ready; time to first token = a one-token generation from the prompt;
tok/s = new tokens / time of a whole greedy generation of N tokens from the prompt
(prefill included), as the main job reports it.
"""
import json
import os
import subprocess
import sys
import time

ENGINES = ("tpu", "tpu --act-bits 8", "tpu --dequantize", "llama.cpp", "torch CPU")
PROMPT = "The future of AI is"


def _gguf():
    from torch_tpu.generate import DEFAULT_GGUF_FILE, _default_model

    d, f = _default_model()
    return d, f, os.path.join(d, f)


def have_llama_cpp():
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def _torch_engine(engine, tokens, t_start):
    import torch

    from torch_tpu.generate import decode, fuse, fuse_supported, load

    d, f, _ = _gguf()
    device = "cpu" if engine == "torch CPU" else "tpu"
    torch.set_num_threads(os.cpu_count() or 1)
    tok, mdl, rep = load(d, f, device, torch.float32, quantized=device == "tpu" and "--dequantize" not in engine)
    load_s = time.perf_counter() - t_start
    if "--act-bits 8" in engine:
        from torch_tpu.quant import set_activation_bits

        set_activation_bits(mdl, 8)
    if fuse_supported(device):  # what the main job does by default: fused kernels, the captured decode step
        fuse(mdl)
    ids, ttft, tps = decode(tok, mdl, PROMPT, tokens, device, False, log=lambda *a, **k: None)
    n_in = tok(PROMPT, return_tensors="pt")["input_ids"].shape[1]
    return {"load_s": load_s, "ttft_s": ttft, "tok_s": tps, "new_ids": ids[n_in:].tolist(),
            "path": (rep or {}).get("path", "transformers")}


def _llama_engine(tokens, t_start, path):
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_threads=os.cpu_count() or 1, n_ctx=512, seed=0, verbose=False)
    load_s = time.perf_counter() - t_start
    prompt = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    eos = llm.token_eos()

    def gen(n):
        # reset(): generate() would otherwise reuse the cached prompt of the previous call (its
        # prefix match) and leave the prefill out of the timing, which every other engine includes
        llm.reset()
        out = []
        for t in llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
            if t == eos:
                break
            out.append(t)
            if len(out) == n:
                break
        return out

    t0 = time.perf_counter()
    gen(1)
    ttft = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = gen(tokens)
    elapsed = time.perf_counter() - t0
    import llama_cpp

    return {"load_s": load_s, "ttft_s": ttft, "tok_s": len(out) / elapsed, "new_ids": out,
            "path": f"llama-cpp-python {llama_cpp.__version__}"}


def child(engine, tokens, gguf):
    t_start = time.perf_counter()
    if engine == "llama.cpp":  # without torch in the process (its OpenMP and llama.cpp's clash)
        r = _llama_engine(tokens, t_start, gguf)
    else:
        r = _torch_engine(engine, tokens, t_start)
    r["engine"] = engine
    print("RESULT " + json.dumps(r), flush=True)


def _spawn(engine, tokens, timeout):
    from .run import ROOT

    cmd = [sys.executable, "-m", "bench.mainjob", engine, "--tokens", str(tokens), "--gguf", _gguf()[2]]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    import signal

    how = (f"was killed by {signal.Signals(-p.returncode).name}" if p.returncode < 0
           else f"exited with {p.returncode}")
    raise RuntimeError(f"bench.mainjob {engine!r} {how}: {p.stderr.strip()[-800:] or 'no output'}")


def measure(quick=False, log=print, notes=None):
    """Rows {engine, load_s, ttft_s, tok_s, vs_llama_cpp, same_tokens} with each engine's
    best round (highest tok/s; load and first token: their best over the rounds)."""
    rounds, tokens = (1, 32) if quick else (3, 64)
    engines = list(ENGINES)
    if not have_llama_cpp():
        engines.remove("llama.cpp")
        msg = ("llama.cpp: skipped, llama-cpp-python is not installed (`bash scripts/bench_peers.sh` "
               "installs the pinned version, built from source by pip)")
        log("  " + msg)
        if notes is not None:
            notes.append(msg[:1].upper() + msg[1:] + ".")
    got = {e: [] for e in engines}
    for i in range(rounds):
        for e in (engines if i % 2 == 0 else engines[::-1]):
            if e not in got:
                continue
            try:
                r = _spawn(e, tokens, timeout=600)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:  # one engine's failure ends only its row
                msg = f"{e}: failed in round {i + 1}, left out: {str(exc).splitlines()[0][:300]}"
                log("  " + msg)
                if notes is not None:
                    notes.append(msg + ".")
                del got[e]
                continue
            got[e].append(r)
            log(f"  round {i + 1} {e}: load {r['load_s']:.2f} s, first token {r['ttft_s'] * 1000:.0f} ms, "
                f"{r['tok_s']:.1f} tok/s")
    if "tpu" not in got:
        return []
    engines = [e for e in engines if e in got]
    ref = max(got["llama.cpp"], key=lambda r: r["tok_s"]) if "llama.cpp" in got else None
    tpu_ids = got["tpu"][0]["new_ids"]
    rows = []
    for e in engines:
        best = max(got[e], key=lambda r: r["tok_s"])
        same = 0
        for a, b in zip(best["new_ids"], tpu_ids):
            if a != b:
                break
            same += 1
        rows.append({"engine": e, "path": best["path"], "tokens": tokens, "rounds": rounds,
                     "tok_s": best["tok_s"], "tok_s_all": [r["tok_s"] for r in got[e]],
                     "load_s": min(r["load_s"] for r in got[e]), "ttft_s": min(r["ttft_s"] for r in got[e]),
                     "vs_llama_cpp": best["tok_s"] / ref["tok_s"] if ref else None,
                     "same_prefix_as_tpu": same, "new_tokens": len(best["new_ids"])})
    return rows


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", choices=ENGINES)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--gguf", default=None, help="llama.cpp: the GGUF file (the parent finds it)")
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    child(a.engine, a.tokens, a.gguf)


if __name__ == "__main__":
    main()
