"""Weight-only quantized linear layers whose weights stay in GGUF blocks.

    tok, model = ... AutoModelForCausalLM.from_pretrained(dir, gguf_file=f, device_map="tpu")
    report = torch_tpu.quant.quantize_from_gguf(model, os.path.join(dir, f))

Transformers' GGUF loader dequantizes every tensor to float. This module
swaps a loaded model's ``nn.Linear`` layers for :class:`QuantLinear` layers
that hold the GGUF file's raw blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) as a uint8 tensor on
the device and run ``torch.ops.tpu.q_linear`` (runtime/kernels/quant.c):
y = x @ W^T with the weights dequantized inside the kernel, activations in
float32 (bfloat16/float16 inputs are computed in float32 and cast back), or,
with ``act_bits=8`` (QuantLinear.act_bits, :func:`set_activation_bits`), for
Q4_0/Q4_1/Q8_0 weights and decode-sized inputs, activations quantized to
int8 per block of 32 and integer dot products (an error bound in quant.c).

Float checkpoints (safetensors) get the same layers by quantizing their weights:
:func:`quantize_weights` (int8 -> Q8_0 blocks, int4 -> Q4_1 blocks, groups of 32
weights with float16 scales) on a loaded model, or at load time through
Transformers' ``quantization_config=torch_tpu.quant.WeightOnlyConfig(bits=4)``.

The ops (schemas, Meta and Autograd kernels) are defined in C++
(torch_tpu/csrc/aten/quant.cpp); their tpu kernels are found by the bridge's
boxed path under the names "tpu::q_linear" and "tpu::q_dequantize". CPU
kernels (dequantize, then ``F.linear``), registered here, let a quantized
layer run off the device.
"""
import types

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["QuantLinear", "set_activation_bits", "fuse_projections", "unfuse_projections", "quantize_activations", "dequantize", "quantize_from_gguf", "quantize_weights", "quantize_blocks",
           "WeightOnlyConfig", "QTYPES"]

# GGML type id -> (name, bytes per block); blocks of 32 weights, super-blocks of 256 for *_K
QTYPES = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 8: ("Q8_0", 34), 12: ("Q4_K", 144), 14: ("Q6_K", 210)}
_BLOCK = 32


def block_size(qtype):
    return 256 if qtype in (12, 14) else 32

# The ops tpu::q_linear and tpu::q_dequantize, their Meta kernels and q_linear's
# Autograd kernel are defined in C++ (torch_tpu/csrc/aten/quant.cpp), so an eager call
# on the device does not go through Python; only the CPU kernels are registered here.
_lib = torch.library.Library("tpu", "IMPL")


def _q_linear_cpu(x, qweight, qtype, out_features, act_bits=32):
    # act_bits = 8 quantizes x per block of 32 on the CPU too (the same quantity as the kernel)
    if act_bits not in (8, 32):
        raise RuntimeError(f"tpu::q_linear: act_bits must be 32 (float32 activations) or 8 "
                           f"(int8 activations), got {act_bits}")
    k = x.shape[-1]
    w = _dequantize_py(qweight, qtype, k)
    if act_bits == 8 and qtype in (2, 3, 8) and x.numel() // max(k, 1) <= ACT8_MAX_ROWS:
        xh = quantize_activations(x)
        if qtype == 3:  # Q4_1: d * nib on the quantized x, the min term on the exact x
            n, nb = qweight.shape[0], k // _BLOCK
            qz = qweight.reshape(n, nb, 20).clone()
            m = _f16(qz, 2).reshape(n, nb)
            qz[..., 2:4] = 0  # min 0: d * nib exactly
            wd = _dequantize_py(qz.reshape(n, -1), qtype, k)
            return F.linear(xh, wd) + x.reshape(*x.shape[:-1], nb, _BLOCK).sum(-1) @ m.T
        return F.linear(xh, w)
    return F.linear(x, w)


def _q_dequantize_cpu(qweight, qtype, in_features):
    return _dequantize_py(qweight, qtype, in_features)


_lib.impl("q_linear", _q_linear_cpu, "CPU")
_lib.impl("q_dequantize", _q_dequantize_cpu, "CPU")
_Q_LINEAR = torch.ops.tpu.q_linear.default
_Q_DEQUANTIZE = torch.ops.tpu.q_dequantize.default

ACT8_MAX_ROWS = 4  # TPU_QU_ACT8_MAXM (runtime/kernels/quant.h): more rows of x stay float32


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """x (float32 [..., K], K a multiple of 32) as act_bits=8 sees it: per block of 32,
    d = max|x| / 127 (float32), q = round-half-even(x * (1 / d)), returned as d * q in float32
    (a block of zeros stays zero; a block with inf or nan becomes nan)."""
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // _BLOCK, _BLOCK)
    amax = xb.abs().amax(-1, keepdim=True)
    d = amax / 127
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(xb * inv).clamp(-127, 127)
    bad = ~torch.isfinite(xb).all(-1, keepdim=True)
    out = torch.where(bad, torch.full_like(xb, float("nan")), q * d)
    return out.reshape(x.shape)


def _f16(b, off):
    """The f16 at byte offset `off` of every block (b: [..., nblocks, block_bytes] uint8)."""
    return b[..., off:off + 2].contiguous().view(torch.float16).to(torch.float32)


def _dequantize_k(q, qtype):
    """Q4_K / Q6_K super-blocks q [..., nblocks, bytes] -> float32 [..., nblocks, 256]."""
    i32 = lambda t: t.to(torch.int32)  # noqa: E731
    if qtype == 12:
        d, dmin = _f16(q, 0), _f16(q, 2)  # [..., nblocks, 1]
        s = i32(q[..., 4:16])
        lo = torch.cat([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
        mn = torch.cat([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
        qs = i32(q[..., 16:144]).reshape(*q.shape[:-1], 4, 32)
        nib = torch.stack([qs & 15, qs >> 4], -2).reshape(*q.shape[:-1], 8, 32)  # sub-blocks in order
        w = (d * lo.float()).unsqueeze(-1) * nib.float() - (dmin * mn.float()).unsqueeze(-1)
        return w.reshape(*q.shape[:-1], 256)
    ql = i32(q[..., 0:128]).reshape(*q.shape[:-1], 2, 64)
    qh = i32(q[..., 128:192]).reshape(*q.shape[:-1], 2, 32)
    sc = q[..., 192:208].contiguous().view(torch.int8).float().reshape(*q.shape[:-1], 2, 8)
    d = _f16(q, 208).reshape(*q.shape[:-1], 1, 1)
    parts = [(ql[..., :32] & 15), (ql[..., 32:] & 15), (ql[..., :32] >> 4), (ql[..., 32:] >> 4)]
    vals = torch.stack([p | (((qh >> (2 * t)) & 3) << 4) for t, p in enumerate(parts)], -2) - 32  # [.., 2, 4, 32]
    scale = sc.reshape(*q.shape[:-1], 2, 4, 2).repeat_interleave(16, -1)  # l // 16 + 2t
    return (d.unsqueeze(-1) * scale * vals.float()).reshape(*q.shape[:-1], 256)


def dequantize(qweight: torch.Tensor, qtype: int, in_features: int) -> torch.Tensor:
    """float32 [N, in_features] from raw blocks [N, in_features / block * block_bytes], on qweight's device
    (the tpu::q_dequantize kernel there; the same values as on the CPU)."""
    if qweight.device.type == "tpu":
        return _Q_DEQUANTIZE(qweight.contiguous(), qtype, in_features)
    return _dequantize_py(qweight, qtype, in_features)


def _dequantize_py(qweight, qtype, in_features):
    name, bb = QTYPES[qtype]
    q = qweight.reshape(qweight.shape[0], in_features // block_size(qtype), bb)
    if qtype in (12, 14):
        return _dequantize_k(q, qtype).reshape(qweight.shape[0], in_features)
    d = _f16(q, 0)
    if qtype == 8:
        w = q[..., 2:].contiguous().view(torch.int8).to(torch.float32) * d
    else:
        qs = q[..., (4 if qtype == 3 else 2):]
        nib = torch.cat([qs & 15, qs >> 4], dim=-1).to(torch.float32)
        w = (nib - 8) * d if qtype == 2 else nib * d + _f16(q, 2)
    return w.reshape(qweight.shape[0], in_features)


class QuantLinear(torch.nn.Module):
    """``nn.Linear`` with GGUF-block weights: ``qweight`` uint8 [out, in / block * block_bytes]
    (block: 32 weights, 256 for Q4_K/Q6_K). The blocks are frozen: gradients reach x (and bias),
    as for a frozen base layer under LoRA, never qweight.

    ``act_bits`` (32 or 8) is passed to ``tpu::q_linear``: 8 quantizes the activations to int8
    per block of 32 for Q4_0/Q4_1/Q8_0 weights and at most ACT8_MAX_ROWS rows of x (decode),
    with integer dot products; see :func:`set_activation_bits`."""

    def __init__(self, qweight: torch.Tensor, qtype: int, in_features: int, out_features: int, bias=None,
                 act_bits: int = 32):
        super().__init__()
        if qtype not in QTYPES:
            raise ValueError(f"unsupported GGUF quantization type {qtype}")
        if act_bits not in (8, 32):
            raise ValueError(f"QuantLinear: act_bits must be 32 or 8, got {act_bits!r}")
        bb, qk = QTYPES[qtype][1], block_size(qtype)
        if in_features % qk or tuple(qweight.shape) != (out_features, in_features // qk * bb):
            raise ValueError(f"qweight {tuple(qweight.shape)} does not hold [{out_features}, {in_features}] "
                             f"{QTYPES[qtype][0]} weights")
        self.in_features, self.out_features, self.qtype = in_features, out_features, qtype
        self.act_bits = act_bits
        self.register_buffer("qweight", qweight.contiguous())
        self.bias = bias

    def forward(self, x):
        xf = x if x.dtype == torch.float32 else x.float()
        if not xf.is_contiguous():
            xf = xf.contiguous()
        y = _Q_LINEAR(xf, self.qweight, self.qtype, self.out_features, self.act_bits)
        if self.bias is not None:
            y = y + self.bias.float()
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self):
        r = f"in_features={self.in_features}, out_features={self.out_features}, qtype={QTYPES[self.qtype][0]}"
        return r if self.act_bits == 32 else r + f", act_bits={self.act_bits}"


# ---- sibling layers on one input: one product ----------------------------------------------
# An attention's q/k/v projections and a gated MLP's gate/up read the same input, one after the
# other. fuse_projections() joins such a set when its weights already are consecutive rows of one
# device tensor (the GGUF loader places them so): the first member called on a one-row input
# (decoding) computes every member's rows in one tpu::q_linear, the others get theirs from it
# while the input is the same tensor, unmodified. (Sets in separate tensors are left alone: a
# copy would double their memory while it runs and, on the host driver, cost more than it saves.)

SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Siblings:
    __slots__ = ("mods", "qweight", "sizes", "x", "version", "outs")

    def __init__(self, mods, qweight):
        self.mods, self.qweight = mods, qweight
        self.sizes = [m.out_features for m in mods]
        self.x = self.version = None
        self.outs = [None] * len(mods)


def _sibling_forward(self, x):
    g = self._tpu_siblings
    i = g.mods.index(self)
    out = g.outs[i]
    if out is not None and g.x is x and g.version == x._version:
        g.outs[i] = None
        if all(o is None for o in g.outs):
            g.x = None
        return out
    g.x, g.outs = None, [None] * len(g.mods)
    if not (x.device == g.qweight.device and x.dtype == torch.float32 and x.is_contiguous()
            and x.numel() == self.in_features and not (torch.is_grad_enabled() and x.requires_grad)
            and _siblings_intact(g)):
        return QuantLinear.forward(self, x)
    y = _Q_LINEAR(x, g.qweight, self.qtype, sum(g.sizes), self.act_bits)
    g.outs = list(y.split(g.sizes, -1))
    g.x, g.version = x, x._version
    out, g.outs[i] = g.outs[i], None
    return out


def _joined_rows(ws):
    """One [sum of rows, row bytes] view of the blocks ws when they are consecutive rows of one
    storage (the GGUF loader places siblings so), else None."""
    w0, rows = ws[0], sum(w.shape[0] for w in ws)
    rb = w0.shape[1]
    at = w0.data_ptr()
    adjacent = w0.is_contiguous() and w0.storage_offset() + rows * rb <= w0.untyped_storage().nbytes()
    for w in ws:
        adjacent = adjacent and w.is_contiguous() and w.shape[1] == rb and w.data_ptr() == at and \
            w.untyped_storage().data_ptr() == w0.untyped_storage().data_ptr()
        at += w.shape[0] * rb
    return w0.as_strided((rows, rb), (rb, 1), w0.storage_offset()) if adjacent else None


def _siblings_intact(g):
    """The members still read g.qweight's rows (not moved, reloaded elsewhere, given a bias or
    other activation bits since fuse_projections)."""
    row, off, m0 = g.qweight.stride(0), 0, g.mods[0]
    for m in g.mods:
        if (m.bias is not None or m.act_bits != m0.act_bits or m.qweight.device != g.qweight.device
                or m.qweight.data_ptr() != g.qweight.data_ptr() + off * row):
            return False
        off += m.out_features
    return True


def fuse_projections(model: torch.nn.Module) -> int:
    """Gives each set of sibling QuantLinear layers that read one input (q_proj/k_proj/v_proj,
    gate_proj/up_proj of one module: same qtype, in_features and act_bits, no bias, weights in
    consecutive rows of one tpu tensor) one product per decoding step (see above); returns how
    many sets it joined. Undo with unfuse_projections()."""
    n = 0
    for parent in model.modules():
        for names in SIBLINGS:
            mods = [getattr(parent, k, None) for k in names]
            if not all(type(m) is QuantLinear and "forward" not in vars(m) for m in mods):
                continue
            m0 = mods[0]
            if any(m.bias is not None or m.qtype != m0.qtype or m.in_features != m0.in_features
                   or m.act_bits != m0.act_bits or m.qweight.device != m0.qweight.device for m in mods):
                continue
            if m0.qweight.device.type != "tpu":
                continue
            qweight = _joined_rows([m.qweight for m in mods])
            if qweight is None:
                continue
            g = _Siblings(mods, qweight)
            for m in mods:
                m._tpu_siblings = g
                m.forward = types.MethodType(_sibling_forward, m)
            n += 1
    return n


def unfuse_projections(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes fuse_projections(model): each layer computes its own product again. Returns `model`."""
    for m in model.modules():
        if getattr(vars(m).get("forward"), "__func__", None) is _sibling_forward:
            del m.forward
            del m._tpu_siblings
    return model


def set_activation_bits(model: torch.nn.Module, bits: int) -> int:
    """Sets ``act_bits`` (32: float32 activations; 8: int8 activations per block of 32, see
    QuantLinear) on every QuantLinear of `model`; returns how many layers it set."""
    if bits not in (8, 32):
        raise ValueError(f"set_activation_bits: bits must be 32 or 8, got {bits!r}")
    n = 0
    for m in model.modules():
        if isinstance(m, QuantLinear):
            m.act_bits = bits
            n += 1
    return n


# ---- a minimal GGUF reader: metadata scalars and tensor infos, data as a memmap ----------
# (gguf.GGUFReader builds numpy views of every metadata array, the 49K-entry
# vocabulary included, which takes seconds; only the tensor table is needed here.)

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUFTensor:
    __slots__ = ("name", "dims", "qtype", "offset", "data")


# GGML float type id -> numpy dtype of its values (bfloat16 as its uint16 bits)
GGUF_FLOATS = {0: np.float32, 1: np.float16, 30: np.uint16}


def read_gguf(path):
    """(metadata {key: scalar or string; arrays skipped}, [GGUFTensor]) with
    tensor.data a read-only memmap of the tensor: uint8 [rows, row bytes] for
    the block formats of QTYPES, the values in torch's dimension order for
    F32/F16/BF16 (GGUF_FLOATS; bfloat16 as uint16), None for other types."""
    import mmap
    import struct

    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, mm, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        v = bytes(mm[pos:pos + n])
        pos += n
        return v.decode("utf-8", "replace")

    def value(t):
        nonlocal pos
        if t in _GGUF_SCALARS:
            return take(_GGUF_SCALARS[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            if et in _GGUF_SCALARS:
                pos += n * struct.calcsize(_GGUF_SCALARS[et])
            else:
                for _ in range(n):
                    value(et)
            return None
        raise ValueError(f"{path}: unknown GGUF metadata type {t}")

    if mm[:4] != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    pos = 4
    version = take("<I")
    if version < 2:
        raise ValueError(f"{path}: GGUF version {version} is not supported")
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    tensors = []
    for _ in range(n_tensors):
        t = GGUFTensor()
        t.name = string()
        t.dims = [take("<Q") for _ in range(take("<I"))]
        t.qtype, t.offset = take("<I"), take("<Q")
        tensors.append(t)
    align = int(meta.get("general.alignment") or 32)
    start = (pos + align - 1) // align * align
    for t in tensors:
        t.data = None
        if t.qtype in QTYPES and len(t.dims) == 2 and t.dims[0] % block_size(t.qtype) == 0:
            row = t.dims[0] // block_size(t.qtype) * QTYPES[t.qtype][1]
            t.data = np.frombuffer(mm, dtype=np.uint8, count=row * t.dims[1],
                                   offset=start + t.offset).reshape(t.dims[1], row)
        elif t.qtype in GGUF_FLOATS:
            t.data = np.frombuffer(mm, dtype=GGUF_FLOATS[t.qtype], count=int(np.prod(t.dims)),
                                   offset=start + t.offset).reshape(t.dims[::-1])
    return meta, tensors


# GGUF tensor names of Llama-style models -> Transformers parameter names
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
_BLOCK_NAMES = {**{k: v + ".weight" for k, v in _LAYER_NAMES.items()},
                "attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight"}


def _hf_name(gguf_name):
    """The Transformers parameter a GGUF tensor is, or None (as for Transformers: rope_freqs)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{parts[1]}.{_BLOCK_NAMES[parts[2]]}"
    return None


def _is_linear(hf_name):
    """Whether a parameter named by _hf_name is an nn.Linear weight."""
    return hf_name == "lm_head.weight" or hf_name[:-len(".weight")].endswith(tuple(_LAYER_NAMES.values()))


def _module_path(gguf_name, tied):
    if tied and gguf_name == "token_embd.weight":
        return "lm_head"
    name = _hf_name(gguf_name)
    return name[:-len(".weight")] if name is not None and _is_linear(name) else None


def _reverse_permute(raw, n_head):
    """Transformers' LlamaTensorProcessor row order for attn_q / attn_k (rows are whole block rows)."""
    dim = raw.shape[0] // n_head // 2
    return raw.reshape(n_head, dim, 2, raw.shape[1]).swapaxes(2, 1).reshape(raw.shape)


def _llama_rows(gguf_name, raw, n_head, n_kv):
    """A Llama GGUF tensor's rows in Transformers' order (attn_q and attn_k are permuted)."""
    if ".attn_q." in gguf_name:
        return _reverse_permute(raw, n_head)
    if ".attn_k." in gguf_name:
        return _reverse_permute(raw, n_kv)
    return raw


def quantize_from_gguf(model: torch.nn.Module, path: str, device=None):
    """Swaps the model's linear layers for QuantLinear over the GGUF file's blocks.

    Only layers whose GGUF tensor is Q4_0, Q4_1, Q8_0, Q4_K or Q6_K and whose float copy
    (the one Transformers made) equals the dequantized blocks on sampled rows
    are swapped; the others keep their float weights. Returns a dict: swapped
    {qtype name: count}, kept (names left in float), bytes (quantized weight
    bytes now held), float_bytes (what the swapped layers held before)."""
    meta, tensors = read_gguf(path)
    names = {t.name for t in tensors}
    cfg = getattr(model, "config", None)
    tied = "output.weight" not in names
    arch = meta.get("general.architecture")
    n_head = getattr(cfg, "num_attention_heads", None)
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_head
    report = {"swapped": {}, "kept": [], "bytes": 0, "float_bytes": 0}
    modules = dict(model.named_modules())
    for t in tensors:
        path_ = _module_path(t.name, tied)
        if path_ is None or path_ not in modules:
            continue
        lin = modules[path_]
        qtype = t.qtype
        if not isinstance(lin, torch.nn.Linear) or qtype not in QTYPES or t.data is None:
            report["kept"].append(t.name)
            continue
        raw = t.data
        if arch in ("llama", None) and n_head:
            raw = _llama_rows(t.name, raw, n_head, n_kv)
        q = torch.from_numpy(np.array(raw))  # a copy: the reader maps the file read-only
        N, K = lin.out_features, lin.in_features
        if tuple(q.shape) != (N, K // block_size(qtype) * QTYPES[qtype][1]):
            report["kept"].append(t.name)
            continue
        rows = sorted({0, 1, N // 2 + 1, N - 1} & set(range(N)))
        idx = torch.tensor(rows)
        want = lin.weight.detach()[idx.to(lin.weight.device)].float().cpu()
        got = dequantize(q[idx], qtype, K)
        if not torch.equal(got.to(lin.weight.dtype).float(), want):
            report["kept"].append(t.name)
            continue
        dev = device if device is not None else lin.weight.device
        _swap(model, path_, lin, QuantLinear(q.to(dev), qtype, K, N, bias=lin.bias), report)
    return report


def _swap(model, path, lin, new, report):
    """Puts `new` (a QuantLinear) where the nn.Linear `lin` was, counting it in `report`."""
    parent_name, _, child = path.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    report["float_bytes"] += lin.weight.numel() * lin.weight.element_size()
    setattr(parent, child, new)
    report["bytes"] += new.qweight.numel()
    name = QTYPES[new.qtype][0]
    report["swapped"][name] = report["swapped"].get(name, 0) + 1


# ---- weight-only quantization of float weights (safetensors checkpoints) ----------------
_BITS = {8: 8, 4: 3}  # bits -> GGML type: Q8_0 (symmetric int8), Q4_1 (int4 with a per-group minimum)


def _f16_bytes(v):
    """float32 [..., 1] -> its float16 bits as uint8 [..., 2]."""
    return v.to(torch.float16).view(torch.uint8)


def quantize_blocks(weight: torch.Tensor, qtype: int) -> torch.Tensor:
    """GGUF blocks (uint8 [N, K / 32 * block bytes], on weight's device) of a float [N, K]
    weight, K a multiple of 32. Q8_0: d = max|w| / 127, q = round(w / d) in [-127, 127].
    Q4_1: d = (max - min) / 15, m = min, q = round((w - m) / d) in [0, 15]. d and m are
    stored as float16 and q is computed from the stored values, so each weight is within
    d / 2 of its dequantized value (plus float16's rounding of m for Q4_1)."""
    if qtype not in (2, 3, 8):
        raise ValueError(f"quantize_blocks: GGML type {qtype} is not one of Q4_0 (2), Q4_1 (3), Q8_0 (8)")
    if weight.dim() != 2 or weight.shape[1] % _BLOCK or not weight.is_floating_point():
        raise ValueError(f"quantize_blocks: weight must be a float [N, K] matrix with K a multiple of {_BLOCK}, "
                         f"got {weight.dtype} {list(weight.shape)}")
    N, K = weight.shape
    w = weight.detach().float().reshape(N, K // _BLOCK, _BLOCK)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"quantize_blocks: weight {list(weight.shape)} has inf or nan values")

    def scale(span, levels):
        d = (span / levels).to(torch.float16).float()
        if not bool(torch.isfinite(d).all()):
            raise ValueError(f"quantize_blocks: weight {list(weight.shape)} has groups whose scale "
                             "overflows float16 (values over 8e6)")
        return d, torch.where(d != 0, 1.0 / d, torch.zeros_like(d))

    if qtype == 8:
        d, inv = scale(w.abs().amax(-1, keepdim=True), 127)
        q = (w * inv).round().clamp(-127, 127).to(torch.int8).view(torch.uint8)
        out = torch.cat([_f16_bytes(d), q], -1)
    elif qtype == 3:
        m = w.amin(-1, keepdim=True).to(torch.float16).float()
        d, inv = scale(w.amax(-1, keepdim=True) - m, 15)
        q = ((w - m) * inv).round().clamp(0, 15).to(torch.uint8)
        out = torch.cat([_f16_bytes(d), _f16_bytes(m), q[..., :16] | (q[..., 16:] << 4)], -1)
    else:
        # Q4_0: d = -max / 8 where max is the value of largest magnitude (as ggml), q = round(w / d) + 8
        idx = w.abs().argmax(-1, keepdim=True)
        d, inv = scale(-w.gather(-1, idx), 8)
        q = (w * inv + 8).round().clamp(0, 15).to(torch.uint8)
        out = torch.cat([_f16_bytes(d), q[..., :16] | (q[..., 16:] << 4)], -1)
    return out.reshape(N, -1).contiguous()


def quantize_weights(model: torch.nn.Module, bits: int = 8, modules_to_not_convert=None):
    """Swaps the model's ``nn.Linear`` layers for QuantLinear layers holding their weights
    as int8 (``bits=8``: Q8_0) or int4 (``bits=4``: Q4_1) groups of 32, quantized on the
    weights' device. Layers named (or inside modules named) in `modules_to_not_convert`,
    and layers whose in_features is not a multiple of 32, keep their float weights.
    Inference only. Returns the report of :func:`quantize_from_gguf`."""
    if bits not in _BITS:
        raise ValueError(f"quantize_weights: bits must be 8 or 4, got {bits!r}")
    qtype = _BITS[bits]
    skip = tuple(modules_to_not_convert or ())
    report = {"swapped": {}, "kept": [], "bytes": 0, "float_bytes": 0}
    for path, lin in list(model.named_modules()):
        if type(lin) is not torch.nn.Linear:
            continue
        if any(path == s or path.startswith(s + ".") or path.endswith("." + s) for s in skip) \
                or lin.in_features % _BLOCK:
            report["kept"].append(path)
            continue
        q = quantize_blocks(lin.weight, qtype)
        _swap(model, path, lin, QuantLinear(q, qtype, lin.in_features, lin.out_features, bias=lin.bias), report)
    return report


def __getattr__(name):
    # Transformers' quantization_config classes, made on first use (importing Transformers is slow).
    if name in ("WeightOnlyConfig", "WeightOnlyQuantizer"):
        from . import _hf_quant

        return getattr(_hf_quant, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
