"""Architecture sweep: every causal-LM architecture Transformers knows, as a tiny
random model, on CPU and on device "tpu"; logits and greedy tokens compared.

    python tools/arch_sweep.py                        # all, writes docs/arch_sweep.md
    python tools/arch_sweep.py --archs llama,gpt2 --out ''   # a few, no report
    python tools/arch_sweep.py --archs mamba --in-process -v # one, here, with its traceback
    python tools/arch_sweep.py --update-expected      # also refresh KNOWN_FAILURES / EXPECTED_FALLBACK
    python tools/arch_sweep.py --compile [--archs a,b]  # compiled vs eager on tpu, docs/arch_sweep_compile.md

For each architecture in `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` the config class's
defaults are shrunk generically (hidden size, layers, heads, kv heads, head dims,
intermediate sizes, experts, vocabulary, positions, sliding windows, per-layer
lists...; `OVERRIDES` fixes the few that need more), the model is built on the
CPU under a fixed seed, a copy goes to "tpu", and then

  * logits of one forward on fixed input_ids must match (rtol = atol = 1e-3, fp32),
  * a 4-token greedy `generate` must give the CPU's tokens,
  * `torch_tpu.fallback_report()` over the tpu side is recorded.

Status per architecture: ``pass`` (matches, nothing fell back), ``fallback``
(matches, listed ATen ops ran on the CPU fallback), ``fail`` (mismatch or error;
first line of the reason; ``cpu:`` marks a tiny config the CPU itself cannot run,
i.e. a gap in this tool, not in torch-tpu), ``skip`` (`SKIP`: needs extra packages
or non-text inputs).

Compile mode (``--compile``, `run_arch_compile`): every architecture that passes
the eager sweep, compiled with ``torch.compile(model, backend="tpu", dynamic=False)``
(fullgraph=True, else fullgraph=False), logits compared to the eager forward on
"tpu" with the same tolerance; C segments, C nodes and eager nodes recorded.

The whole sweep runs each architecture in a worker process (`Sweeper`): a hang is
cut off after ``--timeout`` seconds and a crash (segfault, abort) only loses that
architecture; the worker is restarted. `run_arch` is the in-process core that the
pytest module `tests/test_arch_sweep.py` shares.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import select
import subprocess
import sys
import time
import traceback
from collections import Counter

# Same environment as the test suite (tests/conftest.py) unless told otherwise.
os.environ.setdefault("TORCH_TPU_HOST_DEVICES", "2")
os.environ.setdefault("TORCH_TPU_HOST_MEMORY", "2G")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "docs", "arch_sweep.md")

RTOL = ATOL = 1e-3
SEED = 0
BATCH, SEQ = 2, 8
NEW_TOKENS = 4

# Well-known architectures the default (non-slow) pytest run covers.
FAST_SUBSET = ["llama", "gpt2", "opt", "gpt_neox", "phi", "falcon"]

# Architectures that cannot run as a text-only tiny model here: reason shown in the report.
SKIP: dict[str, str] = {
    "gemma3n": "needs extra packages: its vision tower is a TimmWrapperModel (timm + Pillow)",
    "gemma4_assistant": "draft model for assisted decoding: consumes the target model's shared KV states",
    "gemma4_unified_assistant": "draft model for assisted decoding: consumes the target model's shared KV states",
}

# Per-architecture config fixes applied after the generic shrink (top-level keys;
# "text_config.x" style keys reach into sub-configs). Mostly defaults that do not
# build as they are, or layer patterns the generic layer choice cannot see.
OVERRIDES: dict[str, dict] = {
    "bamba": {"attn_layer_indices": [1]},  # otherwise all-Mamba: generate needs one attention layer
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # default None is never derived
    "recurrent_gemma": {"num_hidden_layers": 3},  # block_types is a cycle of 3: keep one attention block
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "xlstm": {"qk_dim_factor": 1.0},  # recurrent state is allocated with the v head dim
    "hrm_text": {"num_layers_per_stack": 1, "H_cycles": 2, "L_cycles": 1, "L_bp_cycles": [1],
                 "num_hidden_layers": 4},  # num_hidden_layers = per_stack * H * (L + 1)
    "blt": {"num_hidden_layers": 2},  # its DynamicCache reads config.num_hidden_layers
    "musicgen": {"decoder.num_codebooks": 2},  # input rows are batch * num_codebooks
    "musicgen_melody": {"decoder.num_codebooks": 2},
    "reformer": {"is_decoder": True, "axial_pos_shape": [8, 16], "axial_pos_embds_dim": [16, 48],
                 "max_position_embeddings": 128, "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4,
                 "num_buckets": 2, "num_hashes": 1, "attn_layers": ["local", "lsh"]},
    # sliding layers: head_dim == qk_nope_head_dim + qk_rope_head_dim
    "dots3_note_text": {"qk_rope_head_dim": 8, "head_dim": 24, "qk_head_dim": 24},
    "dots3_note": {"text_config.qk_rope_head_dim": 8, "text_config.head_dim": 24, "text_config.qk_head_dim": 24},
    "dbrx": {"attn_config.rope_theta": 10000.0, "attn_config.clip_qkv": 8.0},  # clamps with clip_qkv unconditionally
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 4,
                       "indexer_compress_ratio": 2, "hc_lowrank": 16, "ngram_vocab_size_base": 1024,
                       "split_ngram_parts": 4},
    "qwen4_exp": {"text_config.indexer_n_heads": 2, "text_config.indexer_kv_heads": 1,
                  "text_config.indexer_head_dim": 16, "text_config.indexer_budget": 4,
                  "text_config.indexer_compress_ratio": 2, "text_config.hc_lowrank": 16,
                  "text_config.ngram_vocab_size_base": 1024, "text_config.split_ngram_parts": 4},
}


def _patch_doge(model):
    # transformers disables flex attention when the accelerator is "tpu", and doge then
    # refers to an unimported BlockMask (NameError even on the CPU): provide the name.
    import sys as _sys

    from torch.nn.attention.flex_attention import BlockMask

    _sys.modules[type(model).__module__].BlockMask = BlockMask


def _patch_xmod(model):
    model.set_default_language(next(iter(model.config.languages)))


# Called with the CPU model right after it is built (before the copy to "tpu").
# Work-arounds for Transformers-side issues, reported in the table's note column.
PATCHES: dict = {
    "doge": (_patch_doge, "patched: transformers' doge needs BlockMask, not imported when flex attention is off"),
    "xmod": (_patch_xmod, "set_default_language() called"),
}

# Expectations from the last full sweep, used by tests/test_arch_sweep.py (see `verdict`):
# KNOWN_FAILURES (arch -> first line of the reason) xfail; EXPECTED_FALLBACK (arch -> ops that
# fell back) xfail while they still fall back, and any op outside the list fails the test.
# Refresh with `python tools/arch_sweep.py --update-expected` (rewrites the block below).
# BEGIN GENERATED EXPECTATIONS
KNOWN_FAILURES: dict[str, str] = {
    'afmoe': 'compare logits: AssertionError: logits differ: max abs diff 0.178',
}
EXPECTED_FALLBACK: dict[str, list] = {
}
# END GENERATED EXPECTATIONS


def verdict(res: dict):
    """(outcome, message) for one result: outcome is "pass", "skip", "xfail" or "fail"."""
    arch, status = res["arch"], res["status"]
    fb = res.get("fallback") or {}
    ops = ", ".join(f"{op} ({n})" for op, n in sorted(fb.items()))
    if status == "skip":
        return "skip", res["reason"]
    if status == "fail":
        if arch in KNOWN_FAILURES:
            return "xfail", f"known failure: {res['reason']}"
        return "fail", f"{arch}: {res['reason']}\n{res.get('traceback', '')}"
    if arch in KNOWN_FAILURES:  # fixed: passes now, whatever still falls back
        return ("xfail", f"no longer fails (drop it from KNOWN_FAILURES); falls back: {ops}") if fb else ("pass", "")
    new = sorted(set(fb) - set(EXPECTED_FALLBACK.get(arch, ())))
    if new:
        return "fail", f"{arch}: ops newly on the CPU fallback: {new} (all: {ops})"
    if fb:
        return "xfail", f"falls back: {ops}"
    return "pass", ""


def update_expected(results, path: str = os.path.abspath(__file__)):
    """Rewrites the generated expectations block of this file from `results`
    (architectures not in `results` keep their entries)."""
    known = dict(KNOWN_FAILURES)
    expected = {k: list(v) for k, v in EXPECTED_FALLBACK.items()}
    for r in results:
        a = r["arch"]
        known.pop(a, None)
        expected.pop(a, None)
        if r["status"] == "fail":
            known[a] = r["reason"][:160]
        elif r["status"] == "fallback":
            expected[a] = sorted(r["fallback"])
    lines = ["# BEGIN GENERATED EXPECTATIONS", "KNOWN_FAILURES: dict[str, str] = {"]
    lines += [f"    {a!r}: {known[a]!r}," for a in sorted(known)]
    lines += ["}", "EXPECTED_FALLBACK: dict[str, list] = {"]
    lines += [f"    {a!r}: {expected[a]!r}," for a in sorted(expected)]
    lines += ["}", "# END GENERATED EXPECTATIONS"]
    with open(path) as f:
        src = f.read()
    a = src.index("# BEGIN GENERATED EXPECTATIONS")
    b = src.index("# END GENERATED EXPECTATIONS") + len("# END GENERATED EXPECTATIONS")
    with open(path, "w") as f:
        f.write(src[:a] + "\n".join(lines) + src[b:])


# --------------------------------------------------------------------------- tiny configs

_HIDDEN = {"hidden_size", "n_embd", "d_model", "n_embed", "model_dim", "embed_dim", "word_embed_proj_dim",
           "embedding_size", "d_embed", "dim", "embedding_dim", "hidden_size_global", "ple_embed_dim"}
_LAYERS = {"num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
           "num_decoder_layers", "num_encoder_layers", "num_blocks"}
_HEADS = {"num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
          "decoder_attention_heads", "linear_num_value_heads", "index_n_heads", "indexer_n_heads"}
_KV_HEADS = {"num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "n_kv_heads",
             "linear_num_key_heads", "num_query_groups", "indexer_kv_heads"}
_HEAD_DIM = {"head_dim", "attention_head_dim", "kv_channels", "head_size", "d_head", "d_kv", "v_head_dim",
             "qk_nope_head_dim", "qk_rope_head_dim", "linear_key_head_dim", "linear_value_head_dim",
             "global_head_dim", "attention_head_size", "index_head_dim", "indexer_head_dim", "rotary_dim",
             "hidden_size_per_layer_input"}
_FFN = {"intermediate_size", "n_inner", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
        "ffn_hidden_size", "inner_hidden_size", "d_inner", "mlp_dim", "intermediate_size_mlp", "dim_ff", "dff",
        "shared_intermediate_size"}
_MOE_FFN = {"moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
            "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "ffn_hidden_size_moe",
            "shared_experts_intermediate_size"}
_EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"}
_TOPK = {"num_experts_per_tok", "moe_topk", "num_selected_experts", "moe_k", "num_experts_per_token",
         "top_k", "moe_top_k", "top_k_experts"}
_POSITIONS = {"max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_length",
              "max_sequence_length"}
_WINDOW = {"sliding_window", "sliding_window_size", "window_size", "attention_window_size",
           "local_attention_window_len"}
_LORA = {"kv_lora_rank", "q_lora_rank", "o_lora_rank"}
_SSM_STATE = {"state_size", "ssm_state_size", "mamba_d_state", "d_state"}
_DT_RANK = {"time_step_rank", "mamba_dt_rank", "dt_rank"}
_VOCABS = {"vocab_size", "vocab_size_per_layer_input", "encoder_hash_byte_group_vocab"}
# (heads, head dim, expand) triples of Mamba-2 style mixers: heads * head_dim == expand * hidden
_MAMBA_HEADS = [("mamba_n_heads", "mamba_d_head", "mamba_expand"), ("n_mamba_heads", "mamba_headdim", "mamba_expand"),
                ("num_heads", "head_dim", "expand")]

VOCAB = 256
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
FFN = 128
MOE_FFN = 32
EXPERTS = 4
POSITIONS = 128
WINDOW = 8


def _layer_count(d: dict):
    for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "num_blocks"):
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _is_per_layer(v, n) -> bool:
    return (isinstance(v, list) and n and len(v) == n and n > 2
            and all(isinstance(x, (str, int, bool, float, type(None))) for x in v))


def _is_index_list(k: str, v, n) -> bool:
    return (isinstance(v, list) and n and 0 < len(v) < n and "layer" in k
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n for x in v))


def _choose_layers(d: dict, n: int) -> list[int]:
    """Indices of the original layers to keep: the first of each distinct kind of
    layer (per-layer lists, layer index lists, per-layer config overrides), at
    least 2, at most 4."""
    per_layer = [k for k, v in d.items() if _is_per_layer(v, n)]
    index_lists = [k for k, v in d.items() if k not in per_layer and _is_index_list(k, v, n)]
    plc = {int(i): json.dumps(c, sort_keys=True) for i, c in (d.get("per_layer_config") or {}).items()}
    sigs, keep = set(), []
    for i in range(n):
        sig = (tuple(str(d[k][i]) for k in per_layer) + tuple(i in d[k] for k in index_lists)
               + (plc.get(i),))
        if sig not in sigs:
            sigs.add(sig)
            keep.append(i)
    keep = keep[:4]
    for i in range(n):
        if len(keep) >= 2:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep)


def _hidden_sizes(d: dict) -> set:
    """Every hidden size in a config tree (sub-configs included)."""
    out = {v for k, v in d.items() if k in ("hidden_size", "n_embd", "d_model") and isinstance(v, int) and v >= 256}
    for v in d.values():
        if isinstance(v, dict):
            out |= _hidden_sizes(v)
    return out


def _shrink(d: dict, parent: dict | None = None, hiddens: set | None = None) -> dict:
    """Shrinks one config dict (and its sub-config dicts) in place; returns it."""
    hiddens = _hidden_sizes(d) if hiddens is None else hiddens
    n = _layer_count(d)
    keep = _choose_layers(d, n) if n else None
    heads0 = next((d[k] for k in ("num_attention_heads", "n_head", "num_heads", "n_heads") if isinstance(d.get(k), int)),
                  None)
    hidden0 = next((d[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(d.get(k), int)), None)
    moe = any(k in d for k in _EXPERTS | _MOE_FFN)
    for k, v in list(d.items()):
        if k == "per_layer_config" and isinstance(v, dict):
            continue
        if isinstance(v, dict) and ("model_type" in v or k.endswith("_config") or k == "decoder"):
            _shrink(v, d, hiddens)
            continue
        if isinstance(v, bool) or k.startswith("_"):
            continue
        if v is None:
            # defaults some configs leave to be derived but never derive
            if k == "head_dim" and heads0:
                d[k] = HEAD_DIM
            elif moe and k in _EXPERTS:
                d[k] = EXPERTS
            elif moe and k in _TOPK:
                d[k] = 2
            elif k in _KV_HEADS and heads0:
                d[k] = KV_HEADS
            elif moe and k in ("n_shared_experts", "num_shared_experts"):
                d[k] = 1
            continue
        if not isinstance(v, int):
            continue
        if k in _HIDDEN and v > HIDDEN:
            d[k] = HIDDEN
        elif k == "attention_hidden_size" and hidden0:
            d[k] = max(HIDDEN, HIDDEN * v // hidden0)  # keeps its ratio to the hidden size
        elif k in _LAYERS and v > 2:
            d[k] = len(keep) if keep and k not in ("encoder_layers", "num_encoder_layers") else 2
        elif k in _HEADS and v > HEADS:
            d[k] = HEADS
        elif k in _KV_HEADS and v > 0:
            d[k] = KV_HEADS if (heads0 and v < heads0) else HEADS
        elif k in _HEAD_DIM and v > HEAD_DIM:
            d[k] = HEAD_DIM
        elif k in _FFN and v > FFN:
            d[k] = FFN
        elif k in _MOE_FFN and v > MOE_FFN:
            d[k] = MOE_FFN
        elif k in _EXPERTS and v > EXPERTS:
            d[k] = EXPERTS
        elif k in _TOPK and v > 2:
            d[k] = 2
        elif k in _POSITIONS and v > POSITIONS:
            d[k] = POSITIONS
        elif k in _WINDOW and v > WINDOW:
            d[k] = WINDOW
        elif k in _LORA and v > 32:
            d[k] = 32
        elif k in _SSM_STATE and v > 16:
            d[k] = 16
        elif k in _DT_RANK and v > 8:
            d[k] = 8
        elif k in _VOCABS and v > VOCAB:
            d[k] = VOCAB
        elif k in ("n_group", "topk_group", "num_expert_group", "topk_groups") and v > 1:
            d[k] = 1
        elif k in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts") and v > 1:
            d[k] = 1
        elif k in ("first_k_dense_replace", "first_k_dense", "num_dense_layers") and v > 1:
            d[k] = 1
        elif k in ("num_kv_shared_layers",) and v > 0:
            d[k] = 0
        elif k.endswith("_period") and v > 2:
            d[k] = 2
        elif k.endswith("_offset") and "layer" in k and v > 1:
            d[k] = 1
        elif k in ("n_groups", "mamba_n_groups", "mamba_ngroups") and v > 1:
            d[k] = 1
        elif k in ("chunk_size", "mamba_chunk_size") and v > 16:
            d[k] = 16
        elif v >= 256 and v in hiddens and ("dim" in k or "size" in k):
            d[k] = HIDDEN  # e.g. adapter widths that must match some (sub-)model's hidden size
    # Mamba-2 mixers: heads * head_dim must equal expand * hidden
    hidden = next((d[k] for k in ("hidden_size", "d_model") if isinstance(d.get(k), int)), None)
    for kh, kd, ke in _MAMBA_HEADS:
        if all(isinstance(d.get(x), int) for x in (kh, kd, ke)) and hidden and (ke != "expand" or "state_size" in d):
            d[kd] = HEAD_DIM
            d[kh] = d[ke] * hidden // HEAD_DIM
            if isinstance(d.get("mamba_d_ssm"), int):
                d["mamba_d_ssm"] = d[kh] * d[kd]
    # per-layer lists, layer index lists and per-layer overrides follow the kept layers
    if keep and n:
        for k, v in list(d.items()):
            if _is_per_layer(v, n):
                d[k] = [v[i] for i in keep]
            elif _is_index_list(k, v, n):
                d[k] = [j for j, i in enumerate(keep) if i in v]
        if isinstance(d.get("per_layer_config"), dict):
            old = {int(i): c for i, c in d["per_layer_config"].items()}
            d["per_layer_config"] = {j: _shrink(dict(old[i]), d, hiddens) for j, i in enumerate(keep) if i in old}
            for c in d["per_layer_config"].values():  # keep per-layer sizes distinct from the defaults
                for k in ("head_dim",):
                    if k in c:
                        c[k] = 2 * HEAD_DIM
    # deepseek-style multi-head latent attention: derived sizes
    if "qk_nope_head_dim" in d and "qk_rope_head_dim" in d and "qk_head_dim" in d:
        d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    # token ids inside the shrunk vocabulary
    vocab = d.get("vocab_size") if isinstance(d.get("vocab_size"), int) else (parent or {}).get("vocab_size")
    if isinstance(vocab, int):
        spare = vocab - 1
        for k, v in list(d.items()):
            if not (k.endswith("_token_id") or k.endswith("_token_index") or k.endswith("_token_ids")):
                continue
            if isinstance(v, int) and not isinstance(v, bool) and v >= vocab:
                d[k] = spare
                spare -= 1
            elif isinstance(v, list):
                d[k] = [x if x < vocab else vocab - 1 for x in v if isinstance(x, int)]
    return d


def _set_path(d: dict, path: str, value):
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def tiny_config(arch: str):
    """The config class's defaults, shrunk to a tiny model, float32."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[arch]
    d = cls().to_dict()
    _shrink(d)
    for k, v in OVERRIDES.get(arch, {}).items():
        _set_path(d, k, v)
    d.pop("transformers_version", None)
    d["dtype"] = "float32"
    cfg = cls.from_dict(d)
    # A causal-LM head of a composite model takes one of its sub-configs (its text config).
    want = getattr(model_class(arch), "config_class", None)
    if want is not None and not isinstance(cfg, want):
        for name in getattr(cfg, "sub_configs", {}) or {}:
            sub = getattr(cfg, name, None)
            if isinstance(sub, want):
                return sub
    return cfg


def model_class(arch: str):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[arch])


def all_archs() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# --------------------------------------------------------------------------- one architecture

def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _logits(out):
    if hasattr(out, "logits") and out.logits is not None:
        return out.logits
    return out[0]


def _inputs(vocab: int):
    import torch

    g = torch.Generator().manual_seed(1234)
    lo = 3 if vocab > 16 else 0
    ids = torch.randint(lo, vocab, (BATCH, SEQ), generator=g)
    return ids, torch.ones_like(ids)


def _vocab_of(cfg) -> int:
    for c in (cfg, getattr(cfg, "text_config", None), getattr(cfg, "decoder", None)):
        v = getattr(c, "vocab_size", None) if c is not None else None
        if isinstance(v, int):
            return v
    return VOCAB


def _gen_kwargs(model):
    return dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                pad_token_id=0, eos_token_id=None, use_cache=True)


def _build(arch, cls, cfg, res):
    """The seeded tiny float32 model in eval mode, with the architecture's patch
    applied (noted in `res`)."""
    import torch

    torch.manual_seed(SEED)
    model = cls(cfg).float().eval()
    if arch in PATCHES:
        fn, note = PATCHES[arch]
        fn(model)
        res["note"] = note
    return model


def run_arch(arch: str, device: str = "tpu") -> dict:
    """Runs one architecture; never raises. Returns a dict with keys
    arch, status (pass|fallback|fail|skip), reason, fallback {op: count}, seconds."""
    t0 = time.perf_counter()
    res = {"arch": arch, "status": "fail", "reason": "", "fallback": {}, "seconds": 0.0}
    if arch in SKIP:
        res.update(status="skip", reason=SKIP[arch])
        return res
    import torch
    import torch_tpu

    stage = "cpu: config"
    try:
        cfg = tiny_config(arch)
        cls = model_class(arch)
        stage = "cpu: build"
        cpu = _build(arch, cls, cfg, res)
        ids, mask = _inputs(_vocab_of(cfg))
        stage = "cpu: forward"
        with torch.no_grad():
            ref = _logits(cpu(input_ids=ids, attention_mask=mask)).float()
        stage = "cpu: generate"
        ref_gen = None
        try:
            torch.manual_seed(SEED)
            ref_gen = cpu.generate(input_ids=ids, attention_mask=mask, **_gen_kwargs(cpu))
        except Exception as e:  # some heads cannot generate at all; compare logits only
            res["note"] = "; ".join(filter(None, [res.get("note"), f"generate unsupported on CPU: {_first_line(e)}"]))

        stage = "tpu: copy"
        torch_tpu.reset_fallback_report()
        try:
            dev_model = copy.deepcopy(cpu)
        except Exception:
            torch.manual_seed(SEED)
            dev_model = cls(cfg).float().eval()
        dev_model = dev_model.to(device)
        stage = "tpu: forward"
        with torch.no_grad():
            got = _logits(dev_model(input_ids=ids.to(device), attention_mask=mask.to(device))).float().cpu()
        stage = "tpu: compare logits"
        if got.shape != ref.shape:
            raise AssertionError(f"logits shape {tuple(got.shape)} != cpu {tuple(ref.shape)}")
        if not torch.allclose(got, ref, rtol=RTOL, atol=ATOL, equal_nan=True):
            diff = (got - ref).abs()
            raise AssertionError(f"logits differ: max abs diff {diff.nan_to_num(float('inf')).max().item():.3g}")
        if ref_gen is not None:
            stage = "tpu: generate"
            torch.manual_seed(SEED)
            gen = dev_model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                     **_gen_kwargs(dev_model)).cpu()
            if gen.tolist() != ref_gen.tolist():
                raise AssertionError(f"greedy tokens differ: {gen[:, SEQ:].tolist()} != cpu {ref_gen[:, SEQ:].tolist()}")
        stage = "tpu: sync"
        torch.tpu.synchronize()
        fb = dict(torch_tpu.fallback_report())
        res["fallback"] = fb
        res["status"] = "fallback" if fb else "pass"
    except BaseException as e:  # noqa: BLE001 - the sweep must go on
        if isinstance(e, KeyboardInterrupt):
            raise
        res["fallback"] = dict(torch_tpu.fallback_report()) if stage.startswith("tpu") else {}
        prefix = "cpu: " if stage.startswith("cpu") else ""
        where = stage.split(": ", 1)[1]
        res["reason"] = f"{prefix}{where}: {_first_line(e)}"
        res["traceback"] = traceback.format_exc(limit=-14)
        try:
            torch.tpu.synchronize()
        except Exception:
            pass
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


# --------------------------------------------------------------------------- compile mode

DEFAULT_COMPILE_OUT = os.path.join(ROOT, "docs", "arch_sweep_compile.md")

# Representative architectures the default pytest run compiles (dense, MoE, sliding
# window + soft-capping, learned positions).
COMPILE_SUBSET = ["llama", "qwen3_moe", "gemma2", "gpt2"]

_STAT_KEYS = ("graphs", "segments", "c_nodes", "eager_nodes")


def _stats_delta(s0: dict, s1: dict) -> dict:
    out = {k: s1[k] - s0[k] for k in _STAT_KEYS}
    ops = {op: n - s0["eager_ops"].get(op, 0) for op, n in s1["eager_ops"].items()}
    out["eager_ops"] = {op: n for op, n in sorted(ops.items()) if n > 0}
    return out


def run_arch_compile(arch: str, device: str = "tpu") -> dict:
    """Compiled vs eager on `device` for one architecture; never raises.

    The tiny model (same config, seed and input as `run_arch`) runs one eager
    forward on `device`, then the same forward twice (compile, then cache hit)
    through `torch.compile(model, backend="tpu", dynamic=False)`: first with
    fullgraph=True and, if that fails, with fullgraph=False. Logits of both
    calls must match the eager ones with rtol = atol = RTOL. Architectures that fail (or skip) the eager sweep
    (KNOWN_FAILURES, SKIP) are skipped. Returns a dict with keys arch, status
    (pass|fail|skip), reason, fullgraph (True, False or None when it never
    compiled), fullgraph_error, graphs, segments, c_nodes, eager_nodes,
    eager_ops {ATen op: nodes} (from compile_stats() of the successful
    attempt), max_diff (largest abs logit difference seen), seconds."""
    t0 = time.perf_counter()
    res = {"arch": arch, "status": "fail", "reason": "", "fullgraph": None, "fullgraph_error": "",
           "graphs": 0, "segments": 0, "c_nodes": 0, "eager_nodes": 0, "eager_ops": {}, "max_diff": 0.0,
           "seconds": 0.0}
    if arch in SKIP or arch in KNOWN_FAILURES:
        why = SKIP.get(arch) or KNOWN_FAILURES[arch]
        res.update(status="skip", reason=f"not in the eager sweep: {why}")
        return res
    import torch
    import torch._dynamo

    import torch_tpu  # noqa: F401
    from torch_tpu._dynamo_backend import compile_stats

    stage = "config"
    try:
        cfg = tiny_config(arch)
        cls = model_class(arch)
        stage = "build"
        model = _build(arch, cls, cfg, res).to(device)
        ids, mask = _inputs(_vocab_of(cfg))
        ids, mask = ids.to(device), mask.to(device)
        stage = "eager forward"
        with torch.no_grad():
            ref = _logits(model(input_ids=ids, attention_mask=mask)).float().cpu()
        for fullgraph in (True, False):
            torch._dynamo.reset()
            stage = "compiled forward" + (" (fullgraph)" if fullgraph else "")
            s0 = compile_stats()
            try:
                cm = torch.compile(model, backend="tpu", fullgraph=fullgraph, dynamic=False)
                with torch.no_grad():
                    got = _logits(cm(input_ids=ids, attention_mask=mask)).float().cpu()
                break
            except Exception as e:  # noqa: BLE001
                if not fullgraph:
                    raise
                res["fullgraph_error"] = _first_line(e)
        res["fullgraph"] = fullgraph
        stage = "compiled forward, second call"  # the compiled graphs again (cache hits)
        with torch.no_grad():
            got2 = _logits(cm(input_ids=ids, attention_mask=mask)).float().cpu()
        res.update(_stats_delta(s0, compile_stats()))
        for stage, out in (("compare logits", got), ("compare logits, second call", got2)):
            if out.shape != ref.shape:
                raise AssertionError(f"logits shape {tuple(out.shape)} != eager {tuple(ref.shape)}")
            diff = torch.where(out.isnan() & ref.isnan(), 0.0, (out - ref).abs()).nan_to_num(float("inf"))
            res["max_diff"] = max(res["max_diff"], diff.max().item() if diff.numel() else 0.0)
            if not torch.allclose(out, ref, rtol=RTOL, atol=ATOL, equal_nan=True):
                raise AssertionError(f"logits differ: max abs diff {res['max_diff']:.3g}")
        stage = "sync"
        torch.tpu.synchronize()
        res["status"] = "pass"
    except BaseException as e:  # noqa: BLE001 - the sweep must go on
        if isinstance(e, KeyboardInterrupt):
            raise
        res["reason"] = f"{stage}: {_first_line(e)}"
        res["traceback"] = traceback.format_exc(limit=-14)
        try:
            torch.tpu.synchronize()
        except Exception:
            pass
    finally:
        torch._dynamo.reset()
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


# --------------------------------------------------------------------------- isolated sweep

_MARK = "@@ARCH_SWEEP@@ "


def _worker_main(compile: bool = False):
    """Reads architecture names on stdin, answers one marked JSON line each
    (`run_arch`, or `run_arch_compile` with `compile`)."""
    import warnings

    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # models' own prints must not interleave with answers
    out.write(_MARK + json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        arch = line.strip()
        if not arch:
            continue
        if arch == "__exit__":  # lets the tests check crash recovery
            os._exit(70)
        res = run_arch_compile(arch) if compile else run_arch(arch)
        out.write(_MARK + json.dumps(res) + "\n")


class Sweeper:
    """Runs architectures in a worker process, one at a time, with a per-architecture
    time limit. A crashed or hung worker is replaced; only that architecture is lost."""

    def __init__(self, timeout: float = 120.0, start_timeout: float = 180.0, compile: bool = False):
        self.timeout, self.start_timeout = timeout, start_timeout
        self.compile = compile
        self.proc = None

    def _start(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"] + (["--compile"] if self.compile else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, cwd=ROOT)
        msg = self._read(self.start_timeout)
        if msg is None or not msg.get("ready"):
            self.close()
            raise RuntimeError("arch sweep worker did not start")

    def _read(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                return None
            line = self.proc.stdout.readline()
            if not line:
                return {"__eof__": True}  # worker died
            if line.startswith(_MARK):
                return json.loads(line[len(_MARK):])

    def run(self, arch: str) -> dict:
        if self.compile and (arch in SKIP or arch in KNOWN_FAILURES):
            return run_arch_compile(arch)  # a skip, without the worker
        if arch in SKIP:
            return {"arch": arch, "status": "skip", "reason": SKIP[arch], "fallback": {}, "seconds": 0.0}
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        self.proc.stdin.write(arch + "\n")
        self.proc.stdin.flush()
        res = self._read(self.timeout)
        if res is None or res.get("__eof__"):
            rc = None
            if res is not None:
                try:
                    rc = self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            self.close()
            why = f"timeout after {self.timeout:.0f} s" if res is None else f"worker crashed (exit status {rc})"
            res = {"arch": arch, "status": "fail", "reason": why, "fallback": {},
                   "seconds": round(time.perf_counter() - t0, 2)}
            if self.compile:
                res.update(fullgraph=None, fullgraph_error="", graphs=0, segments=0, c_nodes=0, eager_nodes=0,
                           eager_ops={}, max_diff=0.0)
        return res

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except Exception:
                pass
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sweep(archs=None, timeout: float = 120.0, progress=None, compile: bool = False) -> list[dict]:
    archs = all_archs() if archs is None else list(archs)
    results = []
    with Sweeper(timeout=timeout, compile=compile) as sw:
        for a in archs:
            r = sw.run(a)
            results.append(r)
            if progress:
                progress(r)
    return results


# --------------------------------------------------------------------------- report

def totals(results) -> Counter:
    return Counter(r["status"] for r in results)


def fallback_totals(results) -> Counter:
    c = Counter()
    for r in results:
        c.update(r.get("fallback") or {})
    return c


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def write_report(results, path: str = DEFAULT_OUT):
    import torch
    import transformers

    t = totals(results)
    fbt = fallback_totals(results)
    n_fb_archs = Counter()
    for r in results:
        for op in r.get("fallback") or {}:
            n_fb_archs[op] += 1
    lines = [
        "# Architecture sweep",
        "",
        "Generated by `python tools/arch_sweep.py` (do not edit by hand). Every architecture in",
        "Transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, as a tiny random float32 model: logits of one",
        f"forward (input {BATCH}x{SEQ}) compared to the CPU with rtol = atol = {RTOL:g}, then a {NEW_TOKENS}-token greedy",
        "`generate` compared token for token.",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- transformers {transformers.__version__}, torch {torch.__version__}",
        f"- **total {len(results)}: pass {t['pass']}, fallback {t['fallback']}, fail {t['fail']}, skip {t['skip']}**",
        "",
        "`pass`: matches and nothing fell back. `fallback`: matches, but the listed ATen ops ran on the CPU",
        "fallback (calls in parentheses). `fail`: first line of the error; `cpu:` means the tiny config does",
        "not run on the CPU either (a gap in the sweep tool, not in torch-tpu). `skip`: needs extra packages",
        "or non-text inputs.",
        "",
        "## Ops that fell back (calls summed over the sweep; architectures)",
        "",
    ]
    if fbt:
        lines += ["| ATen op | calls | architectures |", "|---|---:|---:|"]
        lines += [f"| `{op}` | {c} | {n_fb_archs[op]} |" for op, c in fbt.most_common()]
    else:
        lines.append("none")
    fails = Counter(r["reason"].split(": ", 1)[-1][:160] for r in results if r["status"] == "fail")
    if fails:
        lines += ["", "## Failures by reason (stage prefix dropped)", "", "| reason | architectures |", "|---|---:|"]
        lines += [f"| {_cell(why)} | {n} |" for why, n in fails.most_common()]
    lines += ["", "## Per architecture", "", "| architecture | status | fallback ops / reason | s |", "|---|---|---|---:|"]
    for r in sorted(results, key=lambda r: r["arch"]):
        if r["status"] == "fallback":
            detail = ", ".join(f"`{op}` ({c})" for op, c in sorted(r["fallback"].items()))
        else:
            detail = r.get("reason", "")
            if r.get("fallback") and r["status"] == "fail":
                detail += "; fell back: " + ", ".join(sorted(r["fallback"]))
        if r.get("note"):
            detail = (detail + "; " if detail else "") + r["note"]
        lines.append(f"| {r['arch']} | {r['status']} | {_cell(detail)} | {r.get('seconds', 0):.1f} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def compile_totals(results) -> dict:
    t = Counter(r["status"] for r in results)
    out = {"total": len(results), "pass": t["pass"], "fail": t["fail"], "skip": t["skip"],
           "fullgraph": sum(1 for r in results if r["status"] == "pass" and r.get("fullgraph")),
           "graph_breaks": sum(1 for r in results if r["status"] == "pass" and r.get("fullgraph") is False)}
    for k in _STAT_KEYS:
        out[k] = sum(r.get(k, 0) for r in results if r["status"] == "pass")
    return out


def eager_op_totals(results):
    """(Counter op -> eager nodes, Counter op -> architectures) over passing architectures."""
    nodes, archs = Counter(), Counter()
    for r in results:
        if r["status"] == "pass":
            nodes.update(r.get("eager_ops") or {})
            archs.update(set(r.get("eager_ops") or {}))
    return nodes, archs


def write_compile_report(results, path: str = DEFAULT_COMPILE_OUT, seconds: float | None = None):
    import torch
    import transformers

    t = compile_totals(results)
    nodes, n_archs = eager_op_totals(results)
    lines = [
        "# Architecture sweep: torch.compile(backend=\"tpu\")",
        "",
        "Generated by `python tools/arch_sweep.py --compile` (do not edit by hand). Every architecture that",
        "passes the eager sweep (docs/arch_sweep.md), as the same tiny random float32 model on \"tpu\": logits of",
        f"one forward (input {BATCH}x{SEQ}) through `torch.compile(model, backend=\"tpu\", dynamic=False)` compared",
        f"to the eager forward on \"tpu\" with rtol = atol = {RTOL:g}, for the compiling call and for a second",
        "call (cache hit). Compiled with `fullgraph=True` first and, if that fails, with `fullgraph=False`",
        "(column fullgraph: no). Graphs, C segments, C nodes and eager nodes come from",
        "`torch_tpu._dynamo_backend.compile_stats()` (ATen graphs of the forward; eager nodes run op by op",
        "between C segments).",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- transformers {transformers.__version__}, torch {torch.__version__}",
    ]
    if seconds is not None:
        lines.append(f"- sweep time: {seconds:.0f} s (shared 2-core machine, rough)")
    lines += [
        f"- **total {t['total']}: pass {t['pass']} (fullgraph {t['fullgraph']}, with graph breaks "
        f"{t['graph_breaks']}), fail {t['fail']}, skip {t['skip']}**",
        f"- over the passing architectures: {t['graphs']} ATen graphs, {t['segments']} C segments, "
        f"{t['c_nodes']} C nodes, {t['eager_nodes']} eager nodes",
        "",
        "## Ops run eagerly between C segments (nodes summed; architectures)",
        "",
    ]
    if nodes:
        lines += ["| ATen op | nodes | architectures |", "|---|---:|---:|"]
        lines += [f"| `{op}` | {c} | {n_archs[op]} |" for op, c in nodes.most_common()]
    else:
        lines.append("none")
    fails = Counter(r["reason"][:160] for r in results if r["status"] == "fail")
    if fails:
        lines += ["", "## Failures by reason", "", "| reason | architectures |", "|---|---:|"]
        lines += [f"| {_cell(why)} | {n} |" for why, n in fails.most_common()]
    breaks = Counter(r["fullgraph_error"][:160] for r in results if r.get("fullgraph_error"))
    if breaks:
        lines += ["", "## Why fullgraph=True failed", "", "| error | architectures |", "|---|---:|"]
        lines += [f"| {_cell(why)} | {n} |" for why, n in breaks.most_common()]
    lines += ["", "## Per architecture", "",
              "| architecture | status | fullgraph | graphs | C segments | C nodes | eager nodes | max abs diff "
              "| eager ops / reason | s |",
              "|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in sorted(results, key=lambda r: r["arch"]):
        fg = {True: "yes", False: "no", None: ""}[r.get("fullgraph")]
        if r["status"] == "pass":
            detail = ", ".join(f"`{op}` ({c})" for op, c in sorted((r.get("eager_ops") or {}).items()))
        else:
            detail = r.get("reason", "")
        if r.get("note"):
            detail = (detail + "; " if detail else "") + r["note"]
        nums = [str(r.get(k, 0)) for k in _STAT_KEYS] + [f"{r.get('max_diff', 0.0):.1e}"]
        if r["status"] == "skip":
            nums = [""] * len(nums)
        lines.append(f"| {r['arch']} | {r['status']} | {fg} | " + " | ".join(nums)
                     + f" | {_cell(detail)} | {r.get('seconds', 0):.1f} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", default=None, help="comma-separated model types (default: all)")
    p.add_argument("--out", default=None,
                   help="markdown report path ('' for none; default docs/arch_sweep.md, "
                        "docs/arch_sweep_compile.md with --compile)")
    p.add_argument("--compile", action="store_true",
                   help="compile mode: torch.compile(backend='tpu') vs eager on tpu (see run_arch_compile)")
    p.add_argument("--json", default=None, help="also write the raw results as JSON")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per architecture (default 120, 300 with --compile)")
    p.add_argument("--in-process", action="store_true", help="no worker process (no crash isolation)")
    p.add_argument("--update-expected", action="store_true",
                   help="rewrite KNOWN_FAILURES / EXPECTED_FALLBACK in this file from the results")
    p.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failures")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        _worker_main(compile=a.compile)
        return 0
    archs = a.archs.split(",") if a.archs else None
    if a.out is None:
        a.out = DEFAULT_COMPILE_OUT if a.compile else DEFAULT_OUT
    if a.compile:
        return _compile_main(a, archs)

    def progress(r):
        extra = r.get("reason") or ", ".join(sorted(r.get("fallback") or {}))
        print(f"{r['arch']:28s} {r['status']:8s} {r.get('seconds', 0):6.1f}s  {extra}"[:240], flush=True)
        if a.verbose and r.get("traceback"):
            print(r["traceback"], flush=True)

    t0 = time.perf_counter()
    results = _run_all(a, archs, progress, compile=False)
    t = totals(results)
    print(f"\ntotal {len(results)}: pass {t['pass']}, fallback {t['fallback']}, fail {t['fail']}, "
          f"skip {t['skip']}  ({time.perf_counter() - t0:.0f} s)")
    fbt = fallback_totals(results)
    if fbt:
        print("fell back: " + ", ".join(f"{op} ({c})" for op, c in fbt.most_common()))
    if a.out:
        write_report(results, a.out)
        print(f"wrote {a.out}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.update_expected:
        update_expected(results)
        print(f"updated the expectations in {os.path.abspath(__file__)}")
    return 0


def _run_all(a, archs, progress, compile):
    """Runs every architecture (in this process with --in-process, else in
    worker processes with a per-model timeout), reporting each result."""
    if not a.in_process:
        return sweep(archs, timeout=a.timeout or (300.0 if compile else 120.0), progress=progress,
                     compile=compile)
    import warnings

    warnings.filterwarnings("ignore")
    run_one = run_arch_compile if compile else run_arch
    results = []
    for arch in (archs or all_archs()):
        results.append(run_one(arch))
        progress(results[-1])
    return results


def _compile_main(a, archs):
    def progress(r):
        fg = {True: "fullgraph", False: "breaks", None: ""}[r.get("fullgraph")]
        extra = r.get("reason") or (f"graphs {r['graphs']} segs {r['segments']} c {r['c_nodes']} "
                                    f"eager {r['eager_nodes']} " + ",".join(sorted(r.get("eager_ops") or {})))
        print(f"{r['arch']:28s} {r['status']:5s} {fg:9s} {r.get('seconds', 0):6.1f}s  {extra}"[:240], flush=True)
        if a.verbose and r.get("traceback"):
            print(r["traceback"], flush=True)

    t0 = time.perf_counter()
    results = _run_all(a, archs, progress, compile=True)
    dt = time.perf_counter() - t0
    t = compile_totals(results)
    print(f"\ntotal {t['total']}: pass {t['pass']} (fullgraph {t['fullgraph']}, graph breaks {t['graph_breaks']}), "
          f"fail {t['fail']}, skip {t['skip']}  ({dt:.0f} s)")
    print(f"graphs {t['graphs']}, C segments {t['segments']}, C nodes {t['c_nodes']}, eager nodes {t['eager_nodes']}")
    nodes, n_archs = eager_op_totals(results)
    if nodes:
        print("eager ops: " + ", ".join(f"{op} ({c} nodes, {n_archs[op]} archs)" for op, c in nodes.most_common()))
    if a.out:
        write_compile_report(results, a.out, seconds=dt)
        print(f"wrote {a.out}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
