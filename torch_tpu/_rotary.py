"""torch.compile(backend="tpu"): Transformers' rotary embedding as one op.

Before aot_autograd, the graph dynamo captured is searched for
apply_rotary_pos_emb as Transformers writes it (Llama and the models that
copy it):

    q_embed = (q * cos.unsqueeze(1)) + (rotate_half(q) * sin.unsqueeze(1))
    k_embed = (k * cos.unsqueeze(1)) + (rotate_half(k) * sin.unsqueeze(1))
    rotate_half(x) = torch.cat((-x[..., h:], x[..., :h]), dim=-1)

and each q/k pair rotated by the same cos and sin becomes one
torch.ops.tpu.rope(q, k, cos, sin) (the fused kernel of torch_tpu.optimize,
runtime/kernels/fused.c). Its autograd formula puts one tpu::rope_backward
in the backward graph, where the unfused ops leave slices, negations,
zero fills and scatters. Only full rotary (cos covers the whole head dim),
tpu tensors of one float dtype, cos/sin that need no gradient; anything else
is left as it is.
"""
import operator

import torch
from torch.fx import Node

_MUL = (operator.mul, torch.mul)
_ADD = (operator.add, torch.add)
_NEG = (operator.neg, torch.neg)


def _call(n, targets):
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def _arg(n, i, name, default=None):
    return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)


def _val(n):
    return n.meta.get("example_value") if isinstance(n, Node) else None


def _half(n):
    """(x, h, upper): n is x[..., :h] (upper False) or x[..., h:] (upper True)."""
    if not _call(n, (operator.getitem,)) or len(n.args) != 2:
        return None
    x, idx = n.args
    if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] is Ellipsis and isinstance(idx[1], slice)
            and idx[1].step in (None, 1)):
        return None
    s = idx[1]
    if s.start in (None, 0) and type(s.stop) is int:
        return x, s.stop, False
    if type(s.start) is int and s.stop is None:
        return x, s.start, True
    return None


def _rotated(n):
    """x when n is torch.cat((-x[..., h:], x[..., :h]), dim=-1) with 2h = x.shape[-1]."""
    if not _call(n, (torch.cat,)):
        return None
    ts, dim = _arg(n, 0, "tensors"), _arg(n, 1, "dim", 0)
    if not isinstance(ts, (list, tuple)) or len(ts) != 2 or not _call(ts[0], _NEG):
        return None
    hi, lo = _half(ts[0].args[0]), _half(ts[1])
    if hi is None or lo is None or hi[0] is not lo[0] or not hi[2] or lo[2] or hi[1] != lo[1]:
        return None
    v = _val(hi[0])
    if not isinstance(v, torch.Tensor) or dim not in (-1, v.dim() - 1) or v.shape[-1] != 2 * hi[1]:
        return None
    return hi[0]


def _unsqueezed(n):
    """t when n is t.unsqueeze(1) (method or function)."""
    if isinstance(n, Node) and ((n.op == "call_method" and n.target == "unsqueeze") or
                                _call(n, (torch.unsqueeze,))):
        if _arg(n, 1, "dim") == 1:
            return n.args[0]
    return None


def _side(add):
    """(x, cos, sin) when add is x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1),
    the operands of each product and of the sum in either order."""
    if not _call(add, _ADD) or len(add.args) != 2 or add.kwargs:
        return None
    for m1, m2 in (add.args, add.args[::-1]):
        if not (_call(m1, _MUL) and _call(m2, _MUL) and len(m1.args) == 2 and len(m2.args) == 2):
            continue
        for x, c in (m1.args, m1.args[::-1]):
            for r, s in (m2.args, m2.args[::-1]):
                if isinstance(x, Node) and _rotated(r) is x:
                    cos, sin = _unsqueezed(c), _unsqueezed(s)
                    if isinstance(cos, Node) and isinstance(sin, Node):
                        return x, cos, sin
    return None


def _fusable(q, k, cos, sin):
    """The conditions of torch_tpu.optimize's rope, full rotary only."""
    qv, kv, cv, sv = _val(q), _val(k), _val(cos), _val(sin)
    if not all(isinstance(t, torch.Tensor) for t in (qv, kv, cv, sv)):
        return False
    if not all(t.device.type == "tpu" and t.dtype == qv.dtype for t in (kv, cv, sv)) or qv.device.type != "tpu":
        return False
    if qv.dtype not in (torch.float32, torch.bfloat16, torch.float16) or qv.dim() != 4 or kv.dim() != 4:
        return False
    if cv.dim() != 3 or cv.shape != sv.shape or cv.requires_grad or sv.requires_grad:
        return False
    return (kv.shape[0] == qv.shape[0] and kv.shape[2:] == qv.shape[2:] and cv.shape[0] in (1, qv.shape[0])
            and cv.shape[1] in (1, qv.shape[2]) and cv.shape[2] == qv.shape[3] and cv.shape[2] % 2 == 0)


def fuse_rotary(gm: torch.fx.GraphModule) -> int:
    """Rewrites gm in place; returns the number of tpu.rope calls made."""
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    pairs = {}
    for n in nodes:
        side = _side(n)
        if side is not None:
            pairs.setdefault((side[1], side[2]), []).append((n, side[0]))
    made = 0
    replaced = []
    # each layer rotates its q and k with the model's one cos/sin: pairs in graph order
    todo = [(cos, sin, adds[i], adds[i + 1]) for (cos, sin), adds in pairs.items() for i in range(0, len(adds) - 1, 2)]
    for cos, sin, (qa, q), (ka, k) in todo:
        if q is k or not _fusable(q, k, cos, sin) or max(order[q], order[k], order[cos], order[sin]) > order[qa]:
            continue
        g = gm.graph
        with g.inserting_before(qa):
            rope = g.call_function(torch.ops.tpu.rope.default, (q, k, cos, sin))
            outs = [g.call_function(operator.getitem, (rope, i)) for i in range(2)]
        rope.meta["example_value"] = (_val(qa), _val(ka))
        for out, old in zip(outs, (qa, ka)):
            out.meta = dict(old.meta)
            old.replace_all_uses_with(out)
        replaced += [qa, ka]
        made += 1
    if made:
        # erase the replaced sums and the pattern nodes under them that
        # nothing reads any more (not other dead code: a dynamo graph's
        # in-place method calls have no users either)
        mine, todo = set(), list(replaced)
        while todo:
            n = todo.pop()
            if n not in mine and _pattern_op(n):
                mine.add(n)
                todo.extend(n.all_input_nodes)
        for n in reversed(nodes):
            if n in mine and not n.users:
                gm.graph.erase_node(n)
        gm.graph.lint()
        gm.recompile()
    return made


def _pattern_op(n):
    return (_call(n, _ADD + _MUL + _NEG + (torch.cat, operator.getitem, torch.unsqueeze)) or
            (isinstance(n, Node) and n.op == "call_method" and n.target == "unsqueeze"))
