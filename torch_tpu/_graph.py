"""Lowers an ATen FX graph (from aot_autograd) to the C graph compiler.

Python only walks the graph: for every node it hands C the op's schema name,
its arguments in schema order, and each output's dtype, sizes and strides
read from the fake tensors PyTorch attached while tracing. C
(runtime/graph/graph.c) builds the IR, fuses pointwise chains into tiles,
plans one arena per graph and runs the whole graph with one submission.

Nodes C cannot run become eager steps between C segments: ops without a
native kernel or with data-dependent output shapes, random ops, tensors on
other devices, dtypes the runtime lacks. `graph_stats()` counts them.
"""
import math
import operator
import time
import weakref

import torch
import torch.fx

from torch_tpu import _bridge

_DTYPE = {
    torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4, torch.int64: 5,
    torch.int32: 6, torch.int16: 7, torch.int8: 8, torch.uint8: 9, torch.bool: 10,
}
K_NONE, K_TENSOR, K_INT, K_DOUBLE, K_BOOL, K_INTS, K_TENSORS, K_STRING, K_DTYPE, K_DOUBLES = range(10)
_MEMORY_FORMAT = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
                  torch.channels_last_3d: 3}
POINTWISE = 1
REDUCTION = 2
GEMM = 4  # may head a fused group whose pointwise epilogue runs on its tiles
CHANNELS = 8  # a convolution or group norm that may head a fused group tiled by output channels
# options["gemm_epilogue"] False (TORCH_TPU_GEMM_EPILOGUE=0) leaves them out of fused groups (comparisons)
_GEMMS = ("aten::mm", "aten::addmm")

_STATS = {"compiles": 0, "hits": 0, "compile_seconds": 0.0, "segments": 0, "c_nodes": 0,
          "eager_nodes": 0, "fused_groups": 0, "fused_nodes": 0, "gemm_epilogues": 0, "conv_epilogues": 0,
          "norm_epilogues": 0, "gemv_batches": 0,
          "gemv_batched": 0, "arena_bytes": 0,
          "reinplaced": 0, "gqa_rewrites": 0, "gather_bmm_rewrites": 0, "codegen_groups": 0, "codegen_functions": 0,
          "codegen_cache_hits": 0,
          "codegen_compiles": 0, "codegen_compile_seconds": 0.0, "codegen_unavailable": 0, "driver_segments": 0}
# per-segment figures summed into _STATS
_SEGMENT_STATS = ("segments", "c_nodes", "eager_nodes", "fused_groups", "fused_nodes", "gemm_epilogues",
                  "conv_epilogues", "norm_epilogues",
                  "gemv_batches", "gemv_batched",
                  "arena_bytes", "codegen_groups", "codegen_functions", "codegen_cache_hits", "codegen_compiles",
                  "codegen_compile_seconds", "codegen_unavailable", "driver_segments")
_LIVE = weakref.WeakSet()
_EAGER_OPS = {}  # op name -> count of nodes left to eager execution


def graph_stats():
    """Compile-cache and lowering statistics of torch.compile(backend="tpu")."""
    out = dict(_STATS)
    out["misses"] = out["compiles"]
    out["graphs_held"] = len(_LIVE)
    out["eager_ops"] = dict(_EAGER_OPS)
    return out


def graph_profile():
    """{step label: seconds} summed over live compiled graphs, when they were
    compiled with TORCH_TPU_GRAPH_PROFILE=1 (each step timed on the device
    queue; a fused group is labelled by its ops: generated[...] when it runs
    generated code, fused[...] on the tile interpreter). Drains the queue."""
    totals = {}
    for runner in list(_LIVE):
        for s in runner.tpu_steps:
            if not isinstance(s, _Segment):
                continue
            groups, generated = {}, set()
            rows = s.graph.profile()
            for op, sec, group, gen in rows:
                if group >= 0:
                    groups.setdefault(group, []).append((op, sec))
                    if gen:
                        generated.add(group)
                else:
                    totals[op] = totals.get(op, 0.0) + sec
            for group, members in groups.items():
                kind = "generated" if group in generated else "fused"
                label = kind + "[" + "+".join(op.split("::")[-1] for op, _ in members) + "]"
                totals[label] = totals.get(label, 0.0) + sum(sec for _, sec in members)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


class _NotLowerable(Exception):
    pass


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _is_tpu_tensor(v):
    """A tpu tensor of a runtime dtype whose sizes, strides and offset are
    static (data-dependent sizes are symbolic: such nodes run eagerly)."""
    if not (isinstance(v, torch.Tensor) and v.device.type == "tpu" and v.dtype in _DTYPE):
        return False
    return (all(type(d) is int for d in v.shape) and all(type(d) is int for d in v.stride())
            and type(v.storage_offset()) is int)


def _meta(v):
    return (_DTYPE[v.dtype], list(v.shape), list(v.stride()))


def _schema_name(op):
    s = op._schema
    return s.name + ("." + s.overload_name if s.overload_name else "")


def _view_base(op):
    """Index of the argument a view op's outputs alias (read-only alias), or None."""
    s = op._schema
    rets = s.returns
    if not rets or any(r.alias_info is None or r.alias_info.is_write for r in rets):
        return None
    for i, a in enumerate(s.arguments):
        if a.alias_info is not None and not a.alias_info.is_write:
            return i
    return None


def _out_alias(op):
    s = op._schema
    out = []
    for r in s.returns:
        j = -1
        if r.alias_info is not None and r.alias_info.is_write:
            for i, a in enumerate(s.arguments):
                if a.alias_info is not None and a.alias_info.is_write and a.alias_info.before_set == r.alias_info.before_set:
                    j = i
        out.append(j)
    return out


def _schema_args(node):
    s = node.target._schema
    vals = []
    for i, a in enumerate(s.arguments):
        if i < len(node.args) and not a.kwarg_only:
            vals.append(node.args[i])
        elif a.name in node.kwargs:
            vals.append(node.kwargs[a.name])
        elif a.has_default_value():
            vals.append(a.default_value)
        else:
            raise _NotLowerable(f"argument {a.name} missing")
    return s, vals


def _encode(arg, v, vid):
    """(kind, payload) for one schema argument, like the eager bridge's fill_value."""
    t = str(arg.type)
    if isinstance(v, torch.fx.Node):
        if not _is_tpu_tensor(_val(v)):
            raise _NotLowerable("non-tpu or non-tensor value")
        return (K_TENSOR, vid[v])
    if v is None or isinstance(v, torch.device):
        return (K_NONE, 0)
    if isinstance(v, bool):
        return (K_BOOL, int(v))
    if isinstance(v, torch.dtype):
        return (K_DTYPE, _DTYPE.get(v, 0))
    if isinstance(v, torch.layout):
        return (K_INT, 0)
    if isinstance(v, torch.memory_format):
        return (K_INT, _MEMORY_FORMAT[v])
    if isinstance(v, int):
        return (K_DOUBLE, float(v)) if t in ("float", "Optional[float]") else (K_INT, v)
    if isinstance(v, float):
        return (K_DOUBLE, v)
    if isinstance(v, str):
        return (K_STRING, v)
    if isinstance(v, (list, tuple)):
        if "Tensor" in t:
            ids = []
            for x in v:
                if x is None:
                    ids.append(-1)
                elif isinstance(x, torch.fx.Node) and _is_tpu_tensor(_val(x)):
                    ids.append(vid[x])
                else:
                    raise _NotLowerable("tensor list entry")
            return (K_TENSORS, ids)
        if "float" in t:
            return (K_DOUBLES, [float(x) for x in v])
        if all(isinstance(x, (bool, int)) for x in v):
            return (K_INTS, [int(x) for x in v])
    raise _NotLowerable(f"argument {arg.name} of type {t}: {type(v).__name__}")


def _classify(node, native):
    """'view', 'kernel', 'getitem' (of a lowerable node) or 'eager'."""
    if node.op != "call_function":
        return None
    tgt = node.target
    if tgt is operator.getitem:
        return "getitem"
    if not isinstance(tgt, torch._ops.OpOverload):
        return "eager"
    for a in node.all_input_nodes:
        if not _is_tpu_tensor(_val(a)):
            return "eager"
    name = _schema_name(tgt)
    rule = _LOWERINGS.get(name)
    if name in _DECOMPOSE and _DECOMPOSE[name][0](node):
        return "kernel"
    if name not in native and rule is not None:
        return "kernel" if rule[0](node) else "eager"
    out = _val(node)
    outs = out if isinstance(out, (list, tuple)) else [out]
    if not outs or not all(_is_tpu_tensor(o) for o in outs):
        return "eager"
    if _view_base(tgt) is not None:
        return "view"
    if name not in native:
        if _out_variant(tgt, native) is not None:
            return "kernel"
        return "eager"
    if name in ("aten::index.Tensor", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"):
        # bool masks need nonzero() first (a data-dependent size)
        for a in node.all_input_nodes:
            if _val(a).dtype in (torch.bool, torch.uint8) and a is not node.args[0]:
                return "eager"
    return "kernel"


_NATIVE = {}  # device index -> the kernel ops its graphs may contain
_OUT_VARIANTS = {}


def _out_variant(op, native):
    """The .out overload of a functional op whose kernel exists, or None."""
    key = (op, id(native))
    if key in _OUT_VARIANTS:
        return _OUT_VARIANTS[key]
    found = None
    s = op._schema
    if s.returns and all(r.alias_info is None for r in s.returns) and not s.is_mutable:
        names = [a.name for a in s.arguments]
        packet = getattr(torch.ops.aten, s.name.split("::", 1)[1], None)
        for ovl in (packet.overloads() if packet is not None else []):
            cand = getattr(packet, ovl)
            cs = cand._schema
            outs = [a for a in cs.arguments if a.is_out]
            if (outs and len(outs) == len(s.returns) and [a.name for a in cs.arguments if not a.is_out] == names
                    and _schema_name(cand) in native):
                found = cand
                break
    _OUT_VARIANTS[key] = found
    return found


def _contiguous_strides(sizes):
    out, acc = [], 1
    for d in reversed(sizes):
        out.append(acc)
        acc *= max(d, 1)
    return list(reversed(out))


def _to_copy_ok(n):
    # tpu -> tpu dtype conversion only (device moves run eagerly)
    return _is_tpu_tensor(_val(n)) and n.kwargs.get("layout") in (None, torch.strided)


def _embedding_ok(n):
    w, idx = n.args[0], n.args[1]
    iv = _val(idx)
    return _val(w).dim() == 2 and iv.is_contiguous() and _val(n).is_contiguous()


def _lower_embedding(g, n, vid, vals, outs):
    w, idx = n.args[0], n.args[1]
    iv, wv = _val(idx), _val(w)
    flat = g.view(vid[idx], _DTYPE[iv.dtype], [iv.numel()], [1], 0)
    rows = [iv.numel(), wv.shape[1]]
    sel = g.node("aten::index_select", 0, [(K_TENSOR, vid[w]), (K_INT, 0), (K_TENSOR, flat)],
                 [(_DTYPE[wv.dtype], rows, _contiguous_strides(rows))], [-1])
    return [g.view(sel[0], *_meta(outs[0]), 0)]


def _sdpa_ok(n):
    s, vals = _schema_args(n)
    q, k, v, bias, dropout_p, is_causal, debug = vals[:7]
    if dropout_p != 0.0 or debug or _val(q).dim() != 4:
        return False
    # only out, logsumexp and the (uninitialised) philox tensors may be used
    return all(u.target is operator.getitem and u.args[1] in (0, 1, 6, 7) for u in n.users)


def _lower_sdpa(g, n, vid, vals, outs):
    q, k, v, bias, dropout_p, is_causal, debug, scale = vals[:8]
    qv = _val(q)
    if scale is None:
        scale = 1.0 / math.sqrt(qv.shape[3]) if qv.shape[3] > 0 else 1.0
    # an lse nothing reads (an inference graph) lets the kernel take its decode path for few rows
    lse_read = any(u.target is operator.getitem and u.args[1] == 1 for u in n.users)
    # outputs in the meta function's layout (downstream views rely on it); the kernel writes any strides
    o, lse = g.node("tpu::sdpa_fwd", 0,
                    [(K_TENSOR, vid[q]), (K_TENSOR, vid[k]), (K_TENSOR, vid[v]),
                     (K_TENSOR, vid[bias]) if bias is not None else (K_NONE, 0), (K_BOOL, int(is_causal)),
                     (K_DOUBLE, float(scale)), (K_BOOL, int(lse_read))],
                    [_meta(outs[0]), _meta(outs[1])], [-1, -1])
    ids = []
    for j, fake in enumerate(outs):
        if j in (0, 1):
            ids.append(o if j == 0 else lse)
        elif j in (6, 7):
            ids.append(g.empty(*_meta(fake)))
        else:
            ids.append(-1)
    return ids


def _fresh_ok(n):
    return _is_tpu_tensor(_val(n))


def _lower_copy(g, n, vid, vals, outs):
    """clone / lift_fresh_copy / _to_copy: a fresh buffer in the traced layout, then copy_;
    to a contiguous result of the same shape, a pointwise tpu::convert that fuses with
    its neighbours (the .float() / .to(dtype) around a bf16 RMSNorm)."""
    src, out = _val(n.args[0]), outs[0]
    if src.shape == out.shape and out.is_contiguous() and src.dtype in _DTYPE and out.dtype in _DTYPE:
        return g.node("tpu::convert", POINTWISE, [(K_TENSOR, vid[n.args[0]])], [_meta(out)], [-1])
    return [_copy_into(g, g.empty(*_meta(outs[0])), vid[n.args[0]], _meta(outs[0]))]


def _fill(g, outs, value, meta=None):
    meta = meta or _meta(outs[0])
    dst = g.empty(*meta)
    return g.node("aten::fill_.Scalar", 0, [(K_TENSOR, dst), _scalar(value)], [meta], [0])


def _lower_full(value_index):
    """full / full_like / scalar_tensor: a filled buffer, or a 0-dim one when
    every reader is a pointwise op that broadcasts it anyway (see
    _mark_scalar_fills): then nothing large is written and the fill does
    not sit between the pointwise ops it feeds."""
    def lower(g, n, vid, vals, outs):
        meta = (_DTYPE[outs[0].dtype], [], []) if n.meta.get("tpu_scalar_fill") else None
        return _fill(g, outs, vals[value_index], meta)
    return lower


def _scalar(v):
    if isinstance(v, bool):
        return (K_BOOL, int(v))
    if isinstance(v, int):
        return (K_INT, v)
    if isinstance(v, float):
        return (K_DOUBLE, v)
    raise _NotLowerable(f"scalar {v!r}")


def _lower_arange(g, n, vid, vals, outs):
    if n.target is torch.ops.aten.arange.default:
        start, end, step = 0, vals[0], 1
    else:
        start, end, step = vals[0], vals[1], vals[2]
    dst = g.empty(*_meta(outs[0]))
    return g.node("aten::arange.start_out", 0, [_scalar(start), _scalar(end), _scalar(step), (K_TENSOR, dst)],
                  [_meta(outs[0])], [3])


def _scalars_ok(*idx):
    def ok(n):
        return _fresh_ok(n) and all(isinstance(n.args[i], (int, float, bool)) for i in idx if i < len(n.args))
    return ok


def _lower_empty(g, n, vid, vals, outs):
    return [g.empty(*_meta(outs[0]))]


def _sub_view(g, base_id, base_fake, sizes, dim_offsets, strides=None):
    """A view of value `base_id` (fake tensor `base_fake`) with `sizes`, starting at
    index dim_offsets[d] in each dim, with `strides` (default: the base's)."""
    st = list(base_fake.stride())
    delta = sum(o * st[d] for d, o in enumerate(dim_offsets)) * base_fake.element_size()
    return g.view(base_id, _DTYPE[base_fake.dtype], list(sizes), list(strides or st), delta)


def _copy_into(g, dst, src, meta):
    return g.node("aten::copy_", 0, [(K_TENSOR, dst), (K_TENSOR, src), (K_BOOL, 0)], [meta], [0])[0]


def _slice_scatter_ok(n):
    s, vals = _schema_args(n)
    step = vals[5]
    return _fresh_ok(n) and isinstance(step, int) and step >= 1 and _is_tpu_tensor(_val(vals[1]))


def _lower_slice_scatter(g, n, vid, vals, outs):
    x, src, dim, start, end, step = vals[:6]
    out = outs[0]
    dst = g.empty(*_meta(out))
    dst = _copy_into(g, dst, vid[x], _meta(out))
    dim = dim % out.dim()
    size = out.shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    start = min(max(start, 0), size)
    sv = _val(src)
    st = list(out.stride())
    st[dim] *= step
    offsets = [0] * out.dim()
    offsets[dim] = start
    view = _sub_view(g, dst, out, sv.shape, offsets, st)
    _copy_into(g, view, vid[src], (_DTYPE[out.dtype], list(sv.shape), st))
    return [dst]


def _pad_ok(n):
    s, vals = _schema_args(n)
    pad, value = vals[1], vals[2]
    return (_fresh_ok(n) and all(isinstance(p, int) and p >= 0 for p in pad)
            and isinstance(value, (int, float, bool)) and _val(n).is_contiguous())


def _lower_pad(g, n, vid, vals, outs):
    x, pad, value = vals[:3]
    out, xv = outs[0], _val(x)
    dst = _fill(g, outs, value)[0]
    offsets = [0] * out.dim()
    for i in range(len(pad) // 2):  # pad lists (before, after) from the last dim backwards
        offsets[out.dim() - 1 - i] = pad[2 * i]
    view = _sub_view(g, dst, out, xv.shape, offsets)
    _copy_into(g, view, vid[x], (_DTYPE[out.dtype], list(xv.shape), list(out.stride())))
    return [dst]


def _sdpa_bwd_ok(n):
    s, vals = _schema_args(n)
    bias, mask, dropout_p = vals[4], vals[5], vals[12]
    if dropout_p != 0.0 or not all(mask[:3]) or _val(vals[1]).dim() != 4:
        return False
    if bias is not None and (mask[3] or _val(bias).dtype != torch.bool and any(
            u.target is operator.getitem and u.args[1] == 3 for u in n.users)):
        return False  # a bias gradient is summed back to the bias's shape in the bridge
    return all(u.target is operator.getitem and u.args[1] in (0, 1, 2) for u in n.users)


def _lower_sdpa_bwd(g, n, vid, vals, outs):
    grad, q, k, v, bias = vals[:5]
    out, lse, is_causal = vals[6], vals[7], vals[13]
    scale = vals[16] if len(vals) > 16 else None
    if scale is None:
        e = _val(q).shape[3]
        scale = 1.0 / math.sqrt(e) if e > 0 else 1.0
    ids = g.node("tpu::sdpa_bwd", 0,
                 [(K_TENSOR, vid[grad]), (K_TENSOR, vid[q]), (K_TENSOR, vid[k]), (K_TENSOR, vid[v]),
                  (K_TENSOR, vid[bias]) if bias is not None else (K_NONE, 0), (K_TENSOR, vid[out]),
                  (K_TENSOR, vid[lse]), (K_BOOL, int(is_causal)), (K_DOUBLE, float(scale))],
                 [_meta(outs[0]), _meta(outs[1]), _meta(outs[2]), (0, [], [])], [-1, -1, -1, -1])
    return ids[:3] + [-1]


def _native_here(n, op):
    """Whether graphs on node n's device may contain kernel `op`."""
    v = _val(n)
    if isinstance(v, (list, tuple)):
        v = next((t for t in v if isinstance(t, torch.Tensor)), None)
    return isinstance(v, torch.Tensor) and op in _native_ops(v.device.index or 0)


def _spatial(v, nd):
    """A convolution's stride/padding/dilation list for nd spatial dims (ATen repeats a 1-list)."""
    v = [int(x) for x in v]
    return v * nd if len(v) == 1 else v


def _conv_ok(n):
    s, vals = _schema_args(n)
    x, w = _val(vals[0]), _val(vals[1])
    return (_native_here(n, "tpu::conv_fwd") and _fresh_ok(n) and x.dim() >= 3 and w.dim() == x.dim()
            and all(isinstance(v, (list, tuple)) and all(type(i) is int for i in v) for v in vals[3:6] + [vals[7]])
            and type(vals[8]) is int)


def _lower_conv(g, n, vid, vals, outs, opts):
    """aten::convolution -> tpu::conv_fwd (the kernel eager convolution_overrideable queues); a
    convolution that is not transposed may head a fused group of its pointwise consumers (CHANNELS:
    tiles of output rows)."""
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = vals[:9]
    nd = _val(w).dim() - 2
    flags = CHANNELS if opts.conv_epilogue and not transposed else 0
    args = [(K_TENSOR, vid[x]), (K_TENSOR, vid[w]), (K_TENSOR, vid[b]) if b is not None else (K_NONE, 0),
            (K_INTS, _spatial(stride, nd)), (K_INTS, _spatial(padding, nd)), (K_INTS, _spatial(dilation, nd)),
            (K_BOOL, int(bool(transposed))), (K_INTS, _spatial(output_padding, nd)), (K_INT, groups)]
    return g.node("tpu::conv_fwd", flags, args, [_meta(outs[0])], [-1])


def _conv_bwd_ok(n):
    s, vals = _schema_args(n)
    outs = _val(n)
    return (_native_here(n, "tpu::conv_bwd") and all(o is None or _is_tpu_tensor(o) for o in outs)
            and all(isinstance(v, (list, tuple)) and all(type(i) is int for i in v) for v in vals[4:7] + [vals[8]])
            and type(vals[9]) is int)


def _lower_conv_bwd(g, n, vid, vals, outs, opts):
    """aten::convolution_backward -> tpu::conv_bwd; outputs output_mask leaves out are not computed."""
    go, x, w, _, stride, padding, dilation, transposed, output_padding, groups, mask = vals[:11]
    nd = _val(w).dim() - 2
    metas = [_meta(o) if m and o is not None else (0, [], []) for o, m in zip(outs, mask)]
    args = [(K_TENSOR, vid[go]), (K_TENSOR, vid[x]), (K_TENSOR, vid[w]), (K_INTS, _spatial(stride, nd)),
            (K_INTS, _spatial(padding, nd)), (K_INTS, _spatial(dilation, nd)), (K_BOOL, int(bool(transposed))),
            (K_INTS, _spatial(output_padding, nd)), (K_INT, groups), (K_INTS, [int(bool(m)) for m in mask])]
    return g.node("tpu::conv_bwd", 0, args, metas, [-1, -1, -1])


_GN_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _group_norm_ok(n):
    s, vals = _schema_args(n)
    x = _val(vals[0])
    outs = _val(n)
    return (_native_here(n, "tpu::group_norm") and x.dtype in _GN_DTYPES and x.dim() >= 2
            and all(_is_tpu_tensor(o) for o in outs) and type(vals[6]) is int and isinstance(vals[7], (int, float)))


def _lower_group_norm(g, n, vid, vals, outs, opts):
    """aten::native_group_norm -> tpu::group_norm; mean and rstd only where read (training); it may
    head a fused group of its pointwise consumers (CHANNELS: SiLU)."""
    x, w, b, _, _, _, group, eps = vals[:8]
    used = {u.args[1] for u in n.users if u.target is operator.getitem}
    metas = [_meta(outs[0])] + [_meta(outs[j]) if j in used else (0, [], []) for j in (1, 2)]
    args = [(K_TENSOR, vid[x]), (K_TENSOR, vid[w]) if w is not None else (K_NONE, 0),
            (K_TENSOR, vid[b]) if b is not None else (K_NONE, 0), (K_INT, group), (K_DOUBLE, float(eps))]
    return g.node("tpu::group_norm", CHANNELS if opts.conv_epilogue else 0, args, metas, [-1, -1, -1])


# lowerings that take the compile options as a sixth argument
_WITH_OPTS = ("aten::convolution", "aten::convolution_backward", "aten::native_group_norm")

# schema name -> (accepts(node), lower(graph, node, vid, args, fake outputs) -> value ids)
_LOWERINGS = {
    "aten::convolution": (_conv_ok, _lower_conv),
    "aten::convolution_backward": (_conv_bwd_ok, _lower_conv_bwd),
    "aten::native_group_norm": (_group_norm_ok, _lower_group_norm),
    "aten::empty.memory_format": (_fresh_ok, _lower_empty),
    "aten::empty_permuted": (_fresh_ok, _lower_empty),
    "aten::empty_strided": (_fresh_ok, _lower_empty),
    "aten::full_like": (_scalars_ok(1), _lower_full(1)),
    "aten::slice_scatter": (_slice_scatter_ok, _lower_slice_scatter),
    "aten::constant_pad_nd": (_pad_ok, _lower_pad),
    "aten::clone": (_fresh_ok, _lower_copy),
    "aten::lift_fresh_copy": (_fresh_ok, _lower_copy),
    "aten::scalar_tensor": (_scalars_ok(0), _lower_full(0)),
    "aten::full": (_scalars_ok(1), _lower_full(1)),
    "aten::arange.start_step": (_scalars_ok(0, 1, 2), _lower_arange),
    "aten::arange": (_scalars_ok(0), _lower_arange),
    "aten::_to_copy": (_to_copy_ok, _lower_copy),
    "aten::embedding": (_embedding_ok, _lower_embedding),
    "aten::_scaled_dot_product_fused_attention_overrideable": (_sdpa_ok, _lower_sdpa),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": (_sdpa_bwd_ok, _lower_sdpa_bwd),
}


def _log_softmax_ok(n):
    x, dim, half_to_float = n.args[:3]
    xv, out = _val(x), _val(n)
    return (not half_to_float and xv.dtype == torch.float32 and out.dtype == torch.float32 and xv.dim() >= 1
            and isinstance(dim, int) and dim % xv.dim() == xv.dim() - 1 and xv.numel() > 0
            and out.is_contiguous())


def _lower_log_softmax(g, n, vid, vals, outs):
    """log_softmax over the last dim as amax, sub, exp, sum, log, sub: one
    fused row group (generated code: a max pass, a sum pass and a store
    pass per row) instead of the standalone kernel."""
    x, out = vid[n.args[0]], outs[0]
    d = out.dim() - 1
    dt = _DTYPE[out.dtype]
    full = (dt, list(out.shape), _contiguous_strides(list(out.shape)))
    rshape = list(out.shape[:-1]) + [1]
    row = (dt, rshape, _contiguous_strides(rshape))
    red = [(K_INTS, [d]), (K_BOOL, 1)]
    m = g.node("aten::amax", REDUCTION, [(K_TENSOR, x)] + red, [row], [-1])[0]
    sh = g.node("aten::sub.Tensor", POINTWISE, [(K_TENSOR, x), (K_TENSOR, m), (K_INT, 1)], [full], [-1])[0]
    e = g.node("aten::exp", POINTWISE, [(K_TENSOR, sh)], [full], [-1])[0]
    z = g.node("aten::sum.dim_IntList", REDUCTION, [(K_TENSOR, e)] + red + [(K_NONE, 0)], [row], [-1])[0]
    lz = g.node("aten::log", POINTWISE, [(K_TENSOR, z)], [row], [-1])[0]
    return g.node("aten::sub.Tensor", POINTWISE, [(K_TENSOR, sh), (K_TENSOR, lz), (K_INT, 1)], [_meta(out)], [-1])


# native ops lowered as several graph nodes instead when accepts(node) holds
_DECOMPOSE = {
    "aten::_log_softmax": (_log_softmax_ok, _lower_log_softmax),
}

_FILLS = ("aten::full", "aten::full_like", "aten::scalar_tensor")
_SOURCES = _FILLS + ("aten::empty.memory_format", "aten::empty_permuted", "aten::empty_strided", "aten::arange",
                     "aten::arange.start_step")


def _target_name(n):
    return _schema_name(n.target) if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) else None


def _mark_scalar_fills(nodes, seg_of):
    """Marks full/full_like nodes whose every reader is a lowered pointwise op
    that broadcasts them anyway (another tensor argument has the output's
    shape, all of one dtype): they are lowered as 0-dim fills."""
    for n in nodes:
        n.meta["tpu_scalar_fill"] = False
        if n.meta.get("tpu_kind") != "kernel" or _target_name(n) not in _FILLS[:2] or not n.users:
            continue
        v = _val(n)
        ok = True
        for u in n.users:
            if seg_of.get(u) is not seg_of.get(n) or u.meta.get("tpu_kind") != "kernel" or \
                    not isinstance(u.target, torch._ops.OpOverload) or \
                    torch.Tag.pointwise not in u.target.tags or _target_name(u) in _LOWERINGS:
                ok = False
                break
            uv = _val(u)
            args = u.all_input_nodes
            if not isinstance(uv, torch.Tensor) or uv.dtype != v.dtype or \
                    any(_val(a).dtype != v.dtype for a in args) or \
                    not any(a is not n and tuple(_val(a).shape) == tuple(uv.shape) for a in args):
                ok = False
                break
        n.meta["tpu_scalar_fill"] = ok


_EARLY_BYTES = 1 << 16


def _mark_cat_copies(nodes, seg_of):
    """cat() of one non-empty tensor (the others empty, as a cache of length 0
    gives) is a copy of it in the cat's layout: when that tensor comes from a
    kernel node of the same segment read by nothing else, that node writes
    the cat's layout itself and the cat is the same value."""
    for n in nodes:
        n.meta.pop("tpu_out_meta", None)
        n.meta.pop("tpu_cat_of", None)
    for n in nodes:
        if _target_name(n) != "aten::cat" or n.meta.get("tpu_kind") != "kernel" or not isinstance(n.args[0], (list, tuple)):
            continue
        parts = [a for a in n.args[0] if isinstance(a, torch.fx.Node) and _val(a).numel() > 0]
        v = _val(n)
        if len(parts) != 1 or not v.is_contiguous():
            continue
        p = parts[0]
        pv = _val(p)
        if (p.meta.get("tpu_kind") != "kernel" or seg_of.get(p) is not seg_of.get(n) or len(p.users) != 1
                or not isinstance(pv, torch.Tensor) or pv.shape != v.shape or pv.dtype != v.dtype
                or _target_name(p) in _LOWERINGS or _target_name(p) in _DECOMPOSE
                or any(a.is_write for r in p.target._schema.returns for a in [r.alias_info] if a is not None)):
            continue
        p.meta["tpu_out_meta"] = _meta(v)
        n.meta["tpu_cat_of"] = p


def _schedule(seg_nodes):
    """The segment's nodes in build order: small buffers made from nothing
    (0-dim fills, aranges) first, so that they do not split the pointwise
    chains reading them into separate fused groups (large ones stay where
    they are: built first they would hold arena memory longer)."""
    members = set(seg_nodes)
    early, placed = [], set()
    for n in seg_nodes:
        name, v = _target_name(n), _val(n)
        if n.meta.get("tpu_kind") != "kernel" or name not in _SOURCES or not isinstance(v, torch.Tensor):
            continue
        small = n.meta.get("tpu_scalar_fill") or v.numel() * v.element_size() <= _EARLY_BYTES
        if small and (name in _FILLS or all(a in placed or a not in members for a in n.all_input_nodes)):
            early.append(n)
            placed.add(n)
    return early + [n for n in seg_nodes if n not in placed]


def reinplace_fill_scatter(gm):
    """scatter(full(...), dim, index, value) whose filled input nothing else
    reads becomes scatter_ into that buffer (cross-entropy's backward): one
    fill and a scatter instead of a fill, a copy and a scatter. Returns the
    number of rewrites."""
    aten = torch.ops.aten
    done = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in (aten.scatter.value, aten.scatter.src):
            continue
        src = n.args[0]
        if not isinstance(src, torch.fx.Node) or _target_name(src) not in _FILLS or len(src.users) != 1:
            continue
        n.target = aten.scatter_.value if n.target is aten.scatter.value else aten.scatter_.src
        done += 1
    if done:
        gm.recompile()
    return done


class _Segment:
    """A run of lowerable nodes compiled into one C graph."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.inputs = []   # fx nodes from outside, in order
        self.outputs = []  # fx nodes needed outside
        self.graph = None


def _flags(op, opts):
    tags = op.tags
    return ((POINTWISE if torch.Tag.pointwise in tags else 0) | (REDUCTION if torch.Tag.reduction in tags else 0)
            | (GEMM if opts.gemm_epilogue and _schema_name(op) in _GEMMS else 0))


def _storage_delta(out, base):
    return out.storage_offset() * out.element_size() - base.storage_offset() * base.element_size()


def _build_segment(seg, device, users_outside, opts, native):
    g = _bridge.Graph(device)
    g.set_codegen(opts.codegen_mode)
    vid = {}
    members = set(seg.nodes)
    for n in seg.nodes:
        for a in n.all_input_nodes:
            if a not in members and a not in vid:
                v = _val(a)
                vid[a] = g.input(*_meta(v))
                seg.inputs.append(a)
    multi = {}
    for n in _schedule(seg.nodes):
        try:
            _build_node(g, n, vid, multi, opts, native)
        except (NotImplementedError, _NotLowerable, ValueError) as e:
            raise _Retry(n) from e
    for n in seg.nodes:
        if n in users_outside and n in vid:
            g.output(vid[n])
            seg.outputs.append(n)
    g.compile()
    if opts.profile:
        g.set_profiling(True)
    seg.graph = g
    return g.stats()


def _build_node(g, n, vid, multi, opts, native):
    kind = n.meta["tpu_kind"]
    out = _val(n)
    if kind == "getitem":
        src, idx = n.args
        vid[n] = multi[src][idx]
        return
    if kind == "view":
        bi = _view_base(n.target)
        s, vals = _schema_args(n)
        base = vals[bi]
        bv = _val(base)
        outs = out if isinstance(out, (list, tuple)) else [out]
        ids = [g.view(vid[base], *_meta(o), _storage_delta(o, bv)) for o in outs]
    elif n.meta.get("tpu_cat_of") is not None:  # see _mark_cat_copies
        vid[n] = vid[n.meta["tpu_cat_of"]]
        return
    else:
        s, vals = _schema_args(n)
        name = _schema_name(n.target)
        # a fill's tensor argument gives only its shape (it may be built before that tensor)
        args = None if name in _FILLS and name not in native else [_encode(a, v, vid) for a, v in zip(s.arguments, vals)]
        outs = out if isinstance(out, (list, tuple)) else [out]
        flags = _flags(n.target, opts)
        override = n.meta.get("tpu_out_meta")
        metas = (lambda: [override]) if override else (lambda: [_meta(o) for o in outs])
        if name in _DECOMPOSE and _DECOMPOSE[name][0](n):
            ids = _DECOMPOSE[name][1](g, n, vid, vals, outs)
        elif name in native:
            ids = g.node(name, flags, args, metas(), _out_alias(n.target))
        elif name in _LOWERINGS:
            extra = (opts,) if name in _WITH_OPTS else ()
            ids = _LOWERINGS[name][1](g, n, vid, vals, outs, *extra)
        else:  # functional op -> its out= variant writing fresh buffers
            ov = _out_variant(n.target, native)
            dsts = [g.empty(*m) for m in metas()]
            nargs = len(args)
            args = args + [(K_TENSOR, d) for d in dsts]
            ids = g.node(_schema_name(ov), flags, args, metas(),
                         list(range(nargs, nargs + len(dsts))))
    if isinstance(out, (list, tuple)):
        multi[n] = ids
    else:
        vid[n] = ids[0]


def _inplace_variant(op):
    s = op._schema
    packet = getattr(torch.ops.aten, s.name.split("::", 1)[1] + "_", None)
    if packet is None:
        return None
    return getattr(packet, s.overload_name or "default", None)


def reinplace_input_updates(gm):
    """`y = f(x, ...)` ... `copy_(x, y)` with x a graph input (aot_autograd's
    kept input mutation, e.g. a static KV cache update) becomes `f_(x, ...)`
    when nothing reads the old x after f: the update is written in place
    instead of copying the whole input and copying it back. Returns the
    number of rewrites."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    done = 0
    for c in list(gm.graph.nodes):
        if c.op != "call_function" or c.target is not torch.ops.aten.copy_.default or c.users:
            continue
        x, y = c.args[0], c.args[1]
        if x.op != "placeholder" or not isinstance(y, torch.fx.Node) or y.op != "call_function":
            continue
        if not isinstance(y.target, torch._ops.OpOverload) or not y.args or y.args[0] is not x:
            continue
        f_ = _inplace_variant(y.target)
        if f_ is None or any(order[u] > order[y] and u is not c for u in x.users):
            continue
        if any(not (a.alias_info and a.alias_info.is_write) for a in f_._schema.arguments[:1]):
            continue
        with gm.graph.inserting_before(y):
            new = gm.graph.call_function(f_, y.args, y.kwargs)
        new.meta = dict(y.meta)
        y.replace_all_uses_with(new)
        gm.graph.erase_node(y)
        gm.graph.erase_node(c)
        done += 1
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def _repeat_kv_source(n):
    """x when n is Transformers' repeat_kv(x) as core ATen writes it:
    view(clone(expand(unsqueeze(x, 2), [B, H, r, S, D])), [B, H*r, S, D])."""
    aten = torch.ops.aten
    if not (isinstance(n, torch.fx.Node) and n.target is aten.view.default and len(n.users) == 1):
        return None
    c = n.args[0]
    if not (isinstance(c, torch.fx.Node) and c.target is aten.clone.default and len(c.users) == 1):
        return None
    e = c.args[0]
    if not (isinstance(e, torch.fx.Node) and e.target is aten.expand.default and len(e.users) == 1):
        return None
    u = e.args[0]
    if not (isinstance(u, torch.fx.Node) and u.target is aten.unsqueeze.default and u.args[1] == 2):
        return None
    x = u.args[0]
    xv, nv = _val(x), _val(n)
    if not (_is_tpu_tensor(xv) and _is_tpu_tensor(nv) and xv.dim() == 4 and nv.dim() == 4):
        return None
    B, H, S, D = xv.shape
    if list(nv.shape) != [B, nv.shape[1], S, D] or nv.shape[1] % H or list(e.args[1])[3:] != [S, D]:
        return None
    return x


def use_gqa_in_attention(gm):
    """The fused SDPA kernel reads grouped key/value heads (query head h uses
    kv head h // r) itself: feed it the kv cache instead of repeat_kv's
    expanded copy. Returns the number of rewrites."""
    done = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default:
            continue
        args = list(n.args)
        for i in (1, 2):
            x = _repeat_kv_source(args[i]) if i < len(args) else None
            if x is not None:
                args[i] = x
                done += 1
        n.args = tuple(args)
    if done:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return done


def _gathered_operand(n):
    """(w, ids, transposed) when n is index(w, [ids]) of a 3-D floating tpu
    tensor by one 1-D integer index, or that seen transposed in its last two
    dims (permute [0, 2, 1] / transpose(1, 2) as core ATen writes it)."""
    aten = torch.ops.aten
    if not isinstance(n, torch.fx.Node):
        return None
    transposed = False
    if n.target is aten.permute.default and list(n.args[1]) == [0, 2, 1]:
        n, transposed = n.args[0], True
    elif n.target is aten.transpose.int and sorted(d % 3 for d in n.args[1:3]) == [1, 2]:
        n, transposed = n.args[0], True
    if not (isinstance(n, torch.fx.Node) and n.target is aten.index.Tensor):
        return None
    w, idx = n.args[0], n.args[1]
    if len(idx) != 1 or not isinstance(idx[0], torch.fx.Node):
        return None
    wv, iv = _val(w), _val(idx[0])
    if not (_is_tpu_tensor(wv) and _is_tpu_tensor(iv) and wv.dim() == 3 and iv.dim() == 1
            and wv.dtype in (torch.float32, torch.bfloat16, torch.float16) and iv.dtype in (torch.int64, torch.int32)):
        return None
    return w, idx[0], transposed


def gather_into_bmm(gm, native):
    """bmm(index(w, [ids]), x), bmm(x, index(w, [ids])) and the same with the
    gathered operand transposed become tpu.gather_bmm, which reads w in place:
    the arena holds no [len(ids), ...] copy of the gathered weights
    (Transformers' batched_mm experts; eager gets the same from lazy gathers,
    csrc/aten/gather.cpp). The index node goes when nothing else reads it.
    Returns the number of rewrites."""
    if "tpu::gather_bmm" not in native:
        return 0
    aten = torch.ops.aten
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.bmm.default:
            continue
        a, b = n.args[0], n.args[1]
        for pos in (0, 1):
            g = _gathered_operand(n.args[pos])
            if g is None:
                continue
            w, ids, transposed = g
            other = b if pos == 0 else a
            ov, outv = _val(other), _val(n)
            if not (_is_tpu_tensor(ov) and ov.dtype == _val(w).dtype and _is_tpu_tensor(outv)):
                break
            with gm.graph.inserting_before(n):
                wt = w
                if transposed:
                    wt = gm.graph.call_function(aten.permute.default, (w, [0, 2, 1]))
                    with _val(w).fake_mode:
                        wt.meta["val"] = _val(w).permute(0, 2, 1)
                args = (wt, other, ids, 0) if pos == 0 else (other, wt, ids, 1)
                new = gm.graph.call_function(torch.ops.tpu.gather_bmm.default, args)
            new.meta["val"] = outv
            n.replace_all_uses_with(new)
            gm.graph.erase_node(n)
            done += 1
            break
    if done:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return done


def lower(gm: torch.fx.GraphModule, example_inputs, opts):
    """Returns a boxed callable running `gm` through the C graph compiler
    (`opts`: a torch_tpu._compile_options.CompileOptions)."""
    t0 = time.perf_counter()
    _STATS["reinplaced"] += reinplace_input_updates(gm)
    _STATS["gqa_rewrites"] += use_gqa_in_attention(gm)
    reinplace_fill_scatter(gm)
    native = _native_ops(_device_of(list(gm.graph.nodes)))
    _STATS["gather_bmm_rewrites"] += gather_into_bmm(gm, native)
    nodes = list(gm.graph.nodes)
    forced_eager = set()
    while True:
        try:
            runner, stats = _lower_once(gm, nodes, native, forced_eager, opts)
            break
        except _Retry as r:  # a node C refused at build time: run it eagerly
            forced_eager.add(r.node)
    dt = time.perf_counter() - t0
    _STATS["compiles"] += 1
    _STATS["compile_seconds"] += dt
    for k in _SEGMENT_STATS:
        _STATS[k] += stats[k]
    for name, count in stats["eager_ops"].items():
        _EAGER_OPS[name] = _EAGER_OPS.get(name, 0) + count
    _LIVE.add(runner)
    return runner


class _Retry(Exception):
    def __init__(self, node):
        self.node = node


def _device_of(nodes):
    for n in nodes:
        v = _val(n)
        if isinstance(v, torch.Tensor) and v.device.type == "tpu":
            return v.device.index or 0
    return 0


def _lower_once(gm, nodes, native, forced_eager, opts):
    device = _device_of(nodes)
    for n in nodes:
        k = _classify(n, native)
        if n in forced_eager and k is not None:
            k = "eager"
        if k == "getitem":
            src = n.args[0]
            k = "getitem" if src.meta.get("tpu_kind") in ("kernel", "view") and isinstance(n.args[1], int) else "eager"
        n.meta["tpu_kind"] = k
    # segments: maximal runs of lowerable nodes; a run without any kernel stays eager
    steps, cur = [], []
    for n in nodes:
        k = n.meta["tpu_kind"]
        if k is None:
            continue
        if k == "eager":
            if cur:
                steps.append(_Segment(cur))
                cur = []
            steps.append(n)
        else:
            cur.append(n)
    if cur:
        steps.append(_Segment(cur))
    final = []
    for s in steps:
        if isinstance(s, _Segment) and not any(n.meta["tpu_kind"] == "kernel" for n in s.nodes):
            for n in s.nodes:
                n.meta["tpu_kind"] = "eager"
                final.append(n)
        else:
            final.append(s)
    steps = final
    seg_of = {}
    for s in steps:
        if isinstance(s, _Segment):
            for n in s.nodes:
                seg_of[n] = s
    _mark_scalar_fills(nodes, seg_of)
    _mark_cat_copies(nodes, seg_of)
    stats = dict.fromkeys(_SEGMENT_STATS, 0)
    eager_ops = stats["eager_ops"] = {}  # counted once the whole lowering succeeded (a _Retry redoes it)
    for s in steps:
        if not isinstance(s, _Segment):
            stats["eager_nodes"] += 1
            if isinstance(s.target, torch._ops.OpOverload):
                name = _schema_name(s.target)
                eager_ops[name] = eager_ops.get(name, 0) + 1
            continue
        outside = set()
        for n in s.nodes:
            if any(seg_of.get(u) is not s for u in n.users):
                outside.add(n)
        st = _build_segment(s, device, outside, opts, native)
        stats["segments"] += 1
        stats["c_nodes"] += st["nodes"]
        for k in ("fused_groups", "fused_nodes", "gemv_batches", "gemv_batched", "arena_bytes", "codegen_groups",
                  "codegen_functions",
                  "codegen_cache_hits", "codegen_compile_seconds", "codegen_unavailable"):
            stats[k] += st[k]
        stats["gemm_epilogues"] += st["gemm_groups"]
        stats["conv_epilogues"] += st["conv_groups"]
        stats["norm_epilogues"] += st["norm_groups"]
        # segments the device's driver runs whole, one compiled program per run (pjrt)
        stats["driver_segments"] += st["driver_graph"]
        # a segment with generated code either found it on disk or compiled it
        stats["codegen_compiles"] += 1 if st["codegen_functions"] and not st["codegen_cache_hits"] else 0
    return _make_runner(gm, nodes, steps), stats


def _native_ops(device):
    """The kernel ops a graph on tpu:`device` may contain: all of them on
    the host driver; on a driver that runs graphs itself (pjrt), those it
    lowers (the others run eagerly between segments)."""
    import torch_tpu

    ops = _NATIVE.get(device)
    if ops is None:
        torch_tpu._C.init()
        ops = _NATIVE[device] = frozenset(torch_tpu._C.graph_ops(device))
    return ops


def _make_runner(gm, nodes, steps):
    index = {n: i for i, n in enumerate(nodes)}
    placeholders = [index[n] for n in nodes if n.op == "placeholder"]
    consts = {index[n]: _fetch_attr(gm, n.target) for n in nodes if n.op == "get_attr"}
    out_node = next(n for n in nodes if n.op == "output")
    # steps as closures over slot indices; slots freed after their last use
    last_use = {}
    for si, s in enumerate(steps):
        users = s.inputs if isinstance(s, _Segment) else s.all_input_nodes
        for a in users:
            last_use[index[a]] = si
    keep = {index[a] for a in out_node.all_input_nodes}
    frees = [[] for _ in steps]
    for slot, si in last_use.items():
        if slot not in keep and slot not in consts:
            frees[si].append(slot)
    plan = []
    for si, s in enumerate(steps):
        if isinstance(s, _Segment):
            plan.append((0, s.graph, [index[a] for a in s.inputs], [index[o] for o in s.outputs], frees[si]))
        else:
            args = torch.fx.node.map_arg(s.args, lambda a: _Slot(index[a]))
            kwargs = torch.fx.node.map_arg(s.kwargs, lambda a: _Slot(index[a]))
            plan.append((1, s.target, args, kwargs, index[s], frees[si]))
    result = torch.fx.node.map_arg(out_node.args[0], lambda a: _Slot(index[a]))
    nslots = len(nodes)
    state = {"calls": 0}

    def run(args):
        env = [None] * nslots
        for i, slot in enumerate(placeholders):
            env[slot] = args[i]
        args.clear()
        for slot, c in consts.items():
            env[slot] = c
        for step in plan:
            if step[0] == 0:
                _, g, ins, outs, free = step
                res = g.run([env[i] for i in ins])
                for slot, r in zip(outs, res):
                    env[slot] = r
            else:
                _, fn, a, kw, slot, free = step
                env[slot] = fn(*_resolve(a, env), **_resolve(kw, env))
            for f in free:
                env[f] = None
        state["calls"] += 1
        if state["calls"] > 1:
            _STATS["hits"] += 1
        return _resolve(result, env)

    run._boxed_call = True
    run.tpu_steps = steps
    return run


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _resolve(x, env):
    if isinstance(x, _Slot):
        return env[x.i]
    if isinstance(x, (list, tuple)):
        r = [_resolve(y, env) for y in x]
        return r if isinstance(x, list) else tuple(r)
    if isinstance(x, dict):
        return {k: _resolve(v, env) for k, v in x.items()}
    return x


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
