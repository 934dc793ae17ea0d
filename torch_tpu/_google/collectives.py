"""The collectives of torch.tpu.ops, written on torch.distributed's own
collectives (for tpu tensors, the tpu_dist backend in torch_tpu/distributed.py):

    all_gather_dim        all_gather_into_tensor along a moved dimension
    reduce_scatter_dim    reduce_scatter_tensor along a moved dimension
    send / recv           isend / irecv of each tensor, one waitable for all
    ragged_all_to_all     all_to_all_single of the row slices, plus one
                          all_to_all_single of the destination offsets

Eager only; autograd for ragged_all_to_all alone (as Google's: its
all_gather_dim and reduce_scatter_dim have none either). ragged_all_to_all
reads the sizes and offsets on the host.
"""
import torch
import torch.distributed as dist

_OPS = {"sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
        "bor": "BOR", "bxor": "BXOR"}


def _group(name, group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"torch.tpu.ops.{name}: no process group; call "
                           "torch.distributed.init_process_group('tpu_dist') first")
    return dist.group.WORLD if group is None else group


def _dim(name, t, dim):
    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        raise ValueError(f"torch.tpu.ops.{name}: input must be a tensor with at least one dimension, got "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if not -t.dim() <= dim < t.dim():
        raise ValueError(f"torch.tpu.ops.{name}: dim {dim} is out of range for a {t.dim()}-D input")
    return dim % t.dim()


def all_gather_dim(input: torch.Tensor, dim: int, group=None) -> torch.Tensor:
    """Every rank's `input` concatenated along `dim`, in rank order."""
    g = _group("all_gather_dim", group)
    d = _dim("all_gather_dim", input, dim)
    n = dist.get_world_size(g)
    x = input.movedim(d, 0).contiguous()
    out = x.new_empty((n * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x, group=g)
    return out.movedim(0, d)


def reduce_scatter_dim(input: torch.Tensor, dim: int, group=None, reduce_op: str = "sum") -> torch.Tensor:
    """`input` reduced over the ranks (reduce_op: sum, avg, product, min, max,
    band, bor, bxor), then cut into group-size chunks along `dim`: this rank's."""
    g = _group("reduce_scatter_dim", group)
    d = _dim("reduce_scatter_dim", input, dim)
    if reduce_op not in _OPS:
        raise ValueError(f"torch.tpu.ops.reduce_scatter_dim: reduce_op must be one of {', '.join(_OPS)}, "
                         f"got {reduce_op!r}")
    n = dist.get_world_size(g)
    if input.shape[d] % n:
        raise ValueError(f"torch.tpu.ops.reduce_scatter_dim: size {input.shape[d]} of dim {d} of input "
                         f"{tuple(input.shape)} is not divisible by the group size {n}")
    x = input.movedim(d, 0).contiguous()
    out = x.new_empty((x.shape[0] // n, *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x, op=getattr(dist.ReduceOp, _OPS[reduce_op]), group=g)
    return out.movedim(0, d)


class _Works:
    """The Works of one send or recv call: wait() waits for all of them."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)


def _tensors(name, tensors):
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError(f"torch.tpu.ops.{name}: tensors must be a non-empty sequence of tensors")
    return tensors


def send(tensors, dst: int, tag: int):
    """Sends each tensor to rank `dst` of the default group; returns an object
    whose wait() returns once every send is done."""
    _group("send", None)
    return _Works([dist.isend(t, dst, tag=tag) for t in _tensors("send", tensors)])


def recv(tensors, src: int, tag: int):
    """Receives into each tensor from rank `src` of the default group (same
    shapes and dtypes as sent); read them after wait()."""
    _group("recv", None)
    return _Works([dist.irecv(t, src, tag=tag) for t in _tensors("recv", tensors)])


def _ragged_exchange(dst, src, send_rows, recv_rows, g, accumulate=False, check=None):
    """Rank i sends src[a:a + c] for each (a, c) = send_rows[j] to rank j, and writes
    the c rows it receives from rank j into dst[a:a + c] for (a, c) = recv_rows[j]
    (added to them when `accumulate`). One all_to_all_single; `check()` runs after it
    (an error raised there leaves the other ranks' collectives done, not waiting)."""
    n = len(send_rows)
    sendbuf = torch.cat([src[a:a + c] for a, c in send_rows])
    recvbuf = src.new_empty((sum(c for _, c in recv_rows), *src.shape[1:]))
    dist.all_to_all_single(recvbuf, sendbuf, output_split_sizes=[c for _, c in recv_rows],
                           input_split_sizes=[c for _, c in send_rows], group=g)
    if check is not None:
        check()
    start = 0
    for j in range(n):
        a, c = recv_rows[j]
        if accumulate:
            dst[a:a + c] += recvbuf[start:start + c]
        else:
            dst[a:a + c] = recvbuf[start:start + c]
        start += c
    return dst


class _RaggedAllToAll(torch.autograd.Function):
    """Autograd of ragged_all_to_all: the gradient of `operand` is the exchange
    backwards (each rank sends back the gradient rows of what it received; rows
    sent twice add up, rows sent nowhere get 0); that of `output` is the result's
    gradient where no rank wrote (rows written by a later rank's block are masked
    from the earlier one's, as the forward's writes in rank order leave them)."""

    @staticmethod
    def forward(ctx, operand, output, g, sends, places, check):
        ctx.g, ctx.sends, ctx.places, ctx.rows = g, sends, places, operand.shape[0]
        return _ragged_exchange(output.clone(), operand, sends, places, g, check=check)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        g_operand = g_output = None
        if ctx.needs_input_grad[0]:
            src, rows = grad, ctx.places
            if _overlapping(ctx.places):  # a row's gradient goes back to the rank whose write survived
                owner = torch.full((grad.shape[0],), -1, dtype=torch.int64)
                for j, (a, c) in enumerate(ctx.places):
                    owner[a:a + c] = j
                shape = (-1, *([1] * (grad.dim() - 1)))
                src = torch.cat([grad[a:a + c] * (owner[a:a + c] == j).to(grad.device).view(shape)
                                 for j, (a, c) in enumerate(ctx.places)])
                rows = [(sum(c for _, c in ctx.places[:j]), c) for j, (_, c) in enumerate(ctx.places)]
            g_operand = _ragged_exchange(grad.new_zeros((ctx.rows, *grad.shape[1:])), src, rows, ctx.sends,
                                         ctx.g, accumulate=True)
        if ctx.needs_input_grad[1]:
            g_output = grad.clone()
            for a, c in ctx.places:
                g_output[a:a + c] = 0
        return g_operand, g_output, None, None, None, None


def _overlapping(rows):
    spans = sorted((a, a + c) for a, c in rows if c > 0)
    return any(spans[k][1] > spans[k + 1][0] for k in range(len(spans) - 1))


def ragged_all_to_all(operand: torch.Tensor, output: torch.Tensor, input_offsets: torch.Tensor,
                      send_sizes: torch.Tensor, output_offsets: torch.Tensor, recv_sizes: torch.Tensor,
                      process_group_name: str, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rank i sends rows input_offsets[j] .. + send_sizes[j] of `operand` to
    rank j, which writes them from row output_offsets[j] (as rank i computed
    it) of its result; recv_sizes[j] rows come from rank j. The result starts
    as a copy of `output` (or is `out`, overwritten the same way).
    Differentiable in `operand` and `output` (not with out=)."""
    name = "torch.tpu.ops.ragged_all_to_all"
    _group("ragged_all_to_all", None)
    from torch.distributed.distributed_c10d import _resolve_process_group

    g = _resolve_process_group(process_group_name)
    n = dist.get_world_size(g)
    grad = torch.is_grad_enabled() and (operand.requires_grad or output.requires_grad)
    if grad and out is not None:
        raise RuntimeError(f"{name}: functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad")
    if operand.dim() == 0 or output.dim() == 0 or operand.shape[1:] != output.shape[1:] or operand.dtype != output.dtype:
        raise ValueError(f"{name}: operand {tuple(operand.shape)} {operand.dtype} and output {tuple(output.shape)} "
                         f"{output.dtype} must be at least 1-D with the same row shape and dtype")
    sizes = {}
    for t, what in ((input_offsets, "input_offsets"), (send_sizes, "send_sizes"),
                    (output_offsets, "output_offsets"), (recv_sizes, "recv_sizes")):
        if not isinstance(t, torch.Tensor) or t.shape != (n,):
            raise ValueError(f"{name}: {what} must be a 1-D tensor of {n} entries (the group size), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        sizes[what] = [int(v) for v in t.tolist()]
    ins, sends, outs, recvs = (sizes[k] for k in ("input_offsets", "send_sizes", "output_offsets", "recv_sizes"))
    for j in range(n):
        if sends[j] < 0 or ins[j] < 0 or ins[j] + sends[j] > operand.shape[0]:
            raise ValueError(f"{name}: rows {ins[j]} .. {ins[j] + sends[j]} for rank {j} are outside operand's "
                             f"{operand.shape[0]} rows")
    if out is not None and (out.shape != output.shape or out.dtype != output.dtype or out.device != output.device):
        raise ValueError(f"{name}: out must be {tuple(output.shape)} {output.dtype} on {output.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    # where rank i asked its rows to go in this rank's result
    where = torch.empty(n, dtype=torch.int64, device=operand.device)
    dist.all_to_all_single(where, torch.tensor(outs, dtype=torch.int64, device=operand.device), group=g)
    where = where.tolist()
    rows = output.shape[0]

    def check():
        for i, at in enumerate(where):
            if at < 0 or at + recvs[i] > rows:
                raise ValueError(f"{name}: rank {i} writes rows {at} .. {at + recvs[i]}, outside the result's "
                                 f"{rows} rows")

    sent, placed = list(zip(ins, sends)), list(zip(where, recvs))
    if grad:
        return _RaggedAllToAll.apply(operand, output, g, sent, placed, check)
    if out is None:
        return _ragged_exchange(output.clone(), operand, sent, placed, g, check=check)
    out.copy_(output)
    return _ragged_exchange(out, operand, sent, placed, g, check=check)
