"""Loading a GGUF model straight onto the device, its linear layers in the file's blocks.

    tok, model, report = torch_tpu.gguf_load.load_gguf(directory, file, device="tpu")

``AutoModelForCausalLM.from_pretrained(gguf_file=...)`` dequantizes every
tensor in Python (gguf.GGUFReader, then numpy) before
:func:`torch_tpu.quant.quantize_from_gguf` reads the file again and swaps
the linear layers for their blocks. This loader does it in one pass over the
file: the model is built from the GGUF metadata with its parameters on the
meta device (buffers, such as the rotary frequencies, are computed by the
model's own constructor), then every parameter comes from
:func:`torch_tpu.quant.read_gguf`'s memory map: linear layers become
:class:`~torch_tpu.quant.QuantLinear` over the file's Q4_0/Q4_1/Q8_0/Q4_K/Q6_K
blocks, the other tensors (norms, the embedding table) are converted or
dequantized by torch in one vectorised pass and moved to the device once.

It gives the model the Transformers load followed by ``quantize_from_gguf``
gives (same config, same tensors, the same permutation of the attention
q/k rows; tests/test_quant.py checks logits and greedy tokens), for the
architectures in ``SUPPORTED``. Anything else raises :class:`Unsupported`
before any weight is read; the caller falls back to that slower path.
"""
import contextlib
import os
import time

import numpy as np
import torch

from . import quant

__all__ = ["SUPPORTED", "Unsupported", "gguf_config", "load_gguf"]

# GGUF architectures whose tensors this loader maps (Transformers' LlamaTensorProcessor:
# only the q/k row permutation, no other reshaping of the file's tensors)
SUPPORTED = ("llama",)


class Unsupported(Exception):
    """The fast loader does not handle this file; the message says why."""


def _check_architecture(meta):
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED:
        raise Unsupported(f"architecture {arch!r} (the fast GGUF loader handles {', '.join(SUPPORTED)})")
    if "mistral" in str(meta.get("general.name") or "").lower():  # Transformers may load it as "mistral"
        raise Unsupported(f"a Mistral model stored as {arch!r}")
    return arch


def gguf_config(meta, tensors):
    """The config dict Transformers' ``load_gguf_checkpoint(path)["config"]`` builds,
    from read_gguf's metadata and tensor list (architectures in SUPPORTED only)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING

    _check_architecture(meta)
    renames = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    cfg = {"tie_word_embeddings": all(t.name != "output.weight" for t in tensors)}
    for key, value in meta.items():
        prefix, _, rest = key.partition(".")
        target = renames.get(prefix, {}).get(rest)
        if target is None or target == -1:
            continue
        if value is None:  # an array: read_gguf skips them, no config key of SUPPORTED needs one
            raise Unsupported(f"metadata array {key}")
        cfg[target] = value
    if "vocab_size" not in cfg:
        emb = next((t for t in tensors if t.name == "token_embd.weight"), None)
        if emb is None:
            raise Unsupported("no vocab_size and no token_embd.weight")
        cfg["vocab_size"] = emb.dims[1]
    return cfg


@contextlib.contextmanager
def _parameters_on_meta():
    """Modules built inside get their parameters on the meta device (no memory, no
    initialisation); buffers are made as the constructor makes them."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = type(param)(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def _float_tensor(t):
    """A GGUF tensor that is not kept in blocks, as a float32 CPU tensor in torch order."""
    if t.qtype in quant.GGUF_FLOATS:
        x = torch.from_numpy(np.array(t.data))
        return x.view(torch.bfloat16).float() if t.qtype == 30 else x.float()
    return quant.dequantize(torch.from_numpy(np.array(t.data)), t.qtype, t.dims[0])


def _plan(tensors, tied):
    """[(module name, parameter name or None for a QuantLinear over the blocks, GGUF tensor)]"""
    steps = []
    for t in tensors:
        name = quant._hf_name(t.name)
        if name is None:
            continue
        if t.qtype not in quant.QTYPES and t.qtype not in quant.GGUF_FLOATS or (
                t.qtype in quant.QTYPES and t.data is None):
            raise Unsupported(f"tensor {t.name} has GGML type {t.qtype}")
        mod_name, _, leaf = name.rpartition(".")
        blocks = t.qtype in quant.QTYPES
        steps.append((mod_name, None if blocks and quant._is_linear(name) else leaf, t))
        if tied and t.name == "token_embd.weight" and blocks:
            steps.append(("lm_head", None, t))  # a float embedding's lm_head is tied to it instead
    return steps


_JOIN_SMALL = 1 << 20  # the host allocator's small blocks (runtime/drivers/host/host_internal.h)


def _read(steps, n_head, n_kv, device, dtype):
    """The tensors of `steps`, on the device: blocks (q/k rows in Transformers' order) or float values.
    Sibling projections of one module (q/k/v, gate/up: quant.SIBLINGS) of one block format are row
    slices of one device tensor, which quant.fuse_projections then joins without a copy; except
    where joining would turn small blocks into one past _JOIN_SMALL (SmolLM2's gate/up: 2 x 0.55
    MB): the host allocator gives such a block whole 2 MiB huge pages, and the model's first
    forward waited 73 ms longer for those copies (gate/up then stay two products)."""
    out = [None] * len(steps)
    blocks = {target: i for i, (target, leaf, _) in enumerate(steps) if leaf is None}
    for i, (target, leaf, t) in enumerate(steps):
        if out[i] is not None:
            continue
        if leaf is not None:
            out[i] = _float_tensor(t).to(device=device, dtype=dtype)
            continue
        parent, _, child = target.rpartition(".")
        group = [i]
        for names in (n for n in quant.SIBLINGS if n[0] == child):
            js = [blocks.get(f"{parent}.{n}") for n in names]
            if None in js or len({(steps[j][2].qtype, steps[j][2].data.shape[1]) for j in js}) != 1:
                continue
            sizes = [steps[j][2].data.nbytes for j in js]
            if sum(sizes) <= _JOIN_SMALL or min(sizes) > _JOIN_SMALL:
                group = js
        raws = [quant._llama_rows(steps[j][2].name, steps[j][2].data, n_head, n_kv) for j in group]
        joined = torch.from_numpy(np.concatenate(raws)).to(device)  # a copy: the file is mapped read-only
        off = 0
        for j, raw in zip(group, raws):
            out[j] = joined[off:off + raw.shape[0]]
            off += raw.shape[0]
    return out


def load_gguf(directory, gguf_file, device="tpu", dtype=torch.float32):
    """(tokenizer, model in eval mode on `device`, report). The report: swapped
    {qtype name: linear layers in blocks}, kept (linear layers left in float), bytes
    (block bytes held), float_bytes (what those layers would hold in `dtype`),
    seconds {stage: seconds}. Raises Unsupported for files it does not handle, before
    any weight is read."""
    seconds = {}
    t0 = time.perf_counter()

    def lap(stage):
        nonlocal t0
        now = time.perf_counter()
        seconds[stage] = now - t0
        t0 = now

    path = os.path.join(directory, gguf_file)
    meta, tensors = quant.read_gguf(path)
    arch = _check_architecture(meta)
    tied = all(t.name != "output.weight" for t in tensors)
    steps = _plan(tensors, tied)
    n_head = meta.get(f"{arch}.attention.head_count")
    n_kv = meta.get(f"{arch}.attention.head_count_kv") or n_head
    if not isinstance(n_head, int) or not isinstance(n_kv, int):
        raise Unsupported("no attention head counts in the metadata")
    lap("metadata")

    # Transformers' modules (the model's among them: its config class pulls in
    # torch._dynamo and torch.distributed.tensor) are most of the time of a load
    from transformers import AutoConfig, AutoModelForCausalLM, TokenizersBackend
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    cfg = gguf_config(meta, tensors)
    MODEL_FOR_CAUSAL_LM_MAPPING[CONFIG_MAPPING[cfg["model_type"]]]  # imports the model's modules
    lap("imports")

    # AutoTokenizer picks TokenizersBackend for these files, after building the config
    # with gguf.GGUFReader (seconds); the tokenizer itself needs the file alone
    tok = TokenizersBackend.from_pretrained(directory, gguf_file=gguf_file)
    lap("tokenizer")

    config = AutoConfig.for_model(**cfg)
    config._name_or_path = directory
    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    modules = dict(model.named_modules())
    for target, leaf, t in steps:  # the file's tensors against the model's parameters
        mod = modules.get(target)
        param = mod._parameters.get(leaf or "weight") if mod is not None else None
        if not isinstance(param, torch.nn.Parameter):
            raise Unsupported(f"{t.name}: the model has no parameter {target}.{leaf or 'weight'}")
        if tuple(t.dims[::-1]) != tuple(param.shape):
            raise Unsupported(f"{t.name}: shape {tuple(t.dims[::-1])}, the model wants {tuple(param.shape)}")
        if leaf is None and (not isinstance(mod, torch.nn.Linear) or mod.bias is not None):
            raise Unsupported(f"{target} is not a linear layer without bias")
    covered = {f"{target}.{leaf or 'weight'}" for target, leaf, _ in steps}
    missing = [n for n, _ in model.named_parameters() if n not in covered]  # tied ones are listed once
    if missing:
        raise Unsupported(f"no tensor in the file for {', '.join(missing[:4])}"
                          + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
    lap("skeleton")

    values = _read(steps, n_head, n_kv, device, dtype)
    lap("weights")

    report = {"swapped": {}, "kept": [], "bytes": 0, "float_bytes": 0}
    for (target, leaf, t), value in zip(steps, values):
        mod = modules[target]
        if leaf is None:
            parent_name, _, child = target.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child,
                    quant.QuantLinear(value, t.qtype, mod.in_features, mod.out_features))
            kind = quant.QTYPES[t.qtype][0]
            report["swapped"][kind] = report["swapped"].get(kind, 0) + 1
            report["bytes"] += value.numel()
            report["float_bytes"] += mod.weight.numel() * mod.weight.element_size()
            continue
        old = mod._parameters[leaf]
        mod._parameters[leaf] = torch.nn.Parameter(value.to(old.dtype), requires_grad=old.requires_grad)
        if isinstance(mod, torch.nn.Linear):
            report["kept"].append(t.name)
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if tied and isinstance(out, torch.nn.Linear) and out.weight.is_meta:
        out.weight = inp.weight  # a float embedding: lm_head tied to it, as Transformers ties it
    for mod in model.modules():
        for key, buf in mod._buffers.items():
            if buf is not None:
                mod._buffers[key] = buf.to(device)
    left = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.is_meta]
    if left:
        raise RuntimeError(f"{os.path.basename(path)}: left on the meta device: {', '.join(left)}")
    model.eval()
    lap("assembly")
    report["seconds"] = seconds
    return tok, model, report
