"""The c10d backend "tpu_dist" (also registered as "tpu"): collectives on tpu tensors.

    dist.init_process_group("tpu_dist")                     # tpu tensors
    dist.init_process_group("cpu:gloo,tpu:tpu_dist")        # cpu and tpu tensors

Transport: every collective stages its tpu tensors through host memory and runs
c10d's own Gloo (a ProcessGroupGloo over the same store, TCP between processes
and hosts). Nothing here is a protocol of its own: reductions, ordering and
timeouts are Gloo's. ReduceOp.AVG (which Gloo lacks) is a Gloo SUM divided by
the group size on the host, as the device backends that support AVG define it.

Asynchrony: a call returns a Work at once. Two threads per backend do the rest
in call order: the issuing thread copies the inputs to the host (which waits
for the device queue to produce them), checks that every rank called the same
collective with agreeing sizes and dtypes, and starts the Gloo operation; the
finishing thread waits for Gloo and copies the results into the tpu tensors.
`wait()` returns once those copies are on the device queue, so later device
work sees the results. A collective that reads a tensor an earlier, unfinished
one writes waits for it first.

Errors: the agreement check is one small Gloo all-gather of a fixed-size
descriptor per collective (TORCH_TPU_DIST_CHECK=0 turns it off), so a rank that
passes other sizes or dtypes, or calls another collective, makes every rank
raise ValueError naming the op, ranks, dtypes and sizes instead of hanging.
A rank that dies closes its sockets: Gloo raises on the others, and a rank that
stops calling collectives makes the others time out after the group's timeout.
Point-to-point send/recv are not checked (a check would cost the sender a reply).
"""

import datetime
import math
import os
import queue
import threading
import zlib

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

__all__ = ["ProcessGroupTPU", "register"]

NAMES = ("tpu_dist", "tpu")
_ReduceOp = dist.ReduceOp

# Every collective's descriptor has this many ints before the split columns.
_HEAD = 13
_FIELDS = ("collective", "dtype", "reduce op", "root", "sizes")  # descriptor columns 0-4; 5 is "bad arguments"
_KINDS = (
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
    "all_gather_coalesced", "all_gather_into_tensor_coalesced", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
)


def _dtype_code(dtype):
    return zlib.crc32(str(dtype).encode()) if dtype is not None else -1


_DTYPE_NAMES = {_dtype_code(d): str(d) for d in vars(torch).values() if isinstance(d, torch.dtype)}


def _sig(numels):
    """An order-sensitive fingerprint of element counts, equal on every rank for equal lists."""
    h = len(numels)
    for n in numels:
        h = (h * 1000003 + int(n)) % (1 << 61)
    return h


class _HostPool:
    """Host staging buffers reused across collectives. A fresh large CPU tensor costs
    a page fault per page on first touch (64 MiB: about 70 ms here, five times the
    copy itself). Keeps at most `limit` bytes of free buffers, by exact size."""

    def __init__(self, limit=1 << 30):
        self._free = {}
        self._bytes = 0
        self._limit = limit
        self._lock = threading.Lock()

    def take(self, shape, dtype):
        """(raw byte buffer to give back, a view of it with `shape` and `dtype`)."""
        n = math.prod(shape) * dtype.itemsize
        with self._lock:
            free = self._free.get(n)
            raw = free.pop() if free else None
            if raw is not None:
                self._bytes -= n
        if raw is None:
            raw = torch.empty(n, dtype=torch.uint8)
        return raw, raw.view(dtype).view(shape)

    def give(self, raws):
        with self._lock:
            for raw in raws:
                n = raw.numel()
                if self._bytes + n <= self._limit:
                    self._free.setdefault(n, []).append(raw)
                    self._bytes += n


def _key(t):
    return (t.device.type, t.device.index, t.untyped_storage().data_ptr())


class _Job:
    """One collective: `launch(job)` runs on the issuing thread, makes the host tensors
    with job.read/write/inout and returns (gloo work, host post-processing or None)."""

    def __init__(self, backend, name, desc, launch, results, local_error):
        self.backend = backend
        self.name = name
        self.desc = desc
        self.launch = launch
        self.results = results
        self.local_error = local_error
        self.back = []  # (device tensor, host tensor) copied after Gloo finishes
        self.host = []  # pool buffers this job took
        self.writes = set()
        self.gloo_work = None
        self.post = None
        self.error = None
        self.done = threading.Event()
        self.future = torch.futures.Future()

    # Staging, called by `launch` on the issuing thread.
    def read(self, t):
        """A host tensor holding t's data (t itself when t is on the CPU)."""
        if t.device.type == "cpu":
            return t
        self.backend._wait_writers(_key(t))
        h = self._host(t)
        h.copy_(t)
        return h

    def _host(self, t):
        raw, h = self.backend._pool.take(t.shape, t.dtype)
        self.host.append(raw)
        return h

    def write(self, t, h=None):
        """A host tensor Gloo fills; its data is copied into t when Gloo is done."""
        if t.device.type == "cpu":
            return t
        if h is None:
            h = self._host(t)
        self.back.append((t, h))
        self.writes.add(_key(t))
        return h

    def inout(self, t):
        return self.write(t, self.read(t))

    def finish(self, error=None):
        self.error = error
        if error is None:
            self.backend._pool.give(self.host)  # after a failure Gloo may still touch them: dropped
            self.future.set_result(self.results)
        else:
            self.future.set_exception(error)
        self.host = []
        self.done.set()


class _Work(dist.Work):
    """c10d Work over one or more jobs (several for a coalesced group)."""

    def __init__(self, jobs, timeout, future=None):
        super().__init__()
        self._jobs = jobs
        self._timeout = timeout
        self._future = future if future is not None else jobs[-1].future

    def wait(self, timeout=None):
        limit = timeout if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0 else None
        limit = limit or self._timeout
        for job in self._jobs:
            # Gloo enforces the group's timeout itself; the margin covers staging.
            if not job.done.wait(limit.total_seconds() + 30):
                raise RuntimeError(f"tpu_dist {job.name}: not finished after {limit} (the group's timeout)")
            if job.error is not None:
                raise job.error
        return True

    def is_completed(self):
        return all(j.done.is_set() for j in self._jobs)

    def is_success(self):
        return self.is_completed() and all(j.error is None for j in self._jobs)

    def exception(self):
        return next((j.error for j in self._jobs if j.error is not None), None)

    def get_future(self):
        return self._future

    def result(self):
        self.wait()
        return [t for j in self._jobs for t in j.results]


class ProcessGroupTPU(_c10d.Backend):
    """c10d Backend for tpu tensors, staging through the host over c10d's Gloo."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank_, self._size_ = rank, size
        self._timeout = timeout
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("tpu_dist_gloo/", store), rank, size, timeout)
        self._check = os.environ.get("TORCH_TPU_DIST_CHECK", "1") != "0"
        self._pool = _HostPool()
        self._issue_q = queue.SimpleQueue()
        self._finish_q = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._inflight = []  # jobs staged but not finished, in order
        self._coalesced = None
        self._closed = False
        self._threads = [
            threading.Thread(target=self._issue_loop, name="tpu_dist-issue", daemon=True),
            threading.Thread(target=self._finish_loop, name="tpu_dist-finish", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- properties c10d reads (the base ones recurse when a Python class does not override them)
    @property
    def supports_coalescing(self):
        return True

    @property
    def supports_splitting(self):
        return False

    @property
    def supports_shrinking(self):
        return False

    @property
    def supports_reconfigure(self):
        return False

    @property
    def supports_window(self):
        return False

    @property
    def _supports_time_estimate(self):
        return False

    def getBackendName(self):
        return "tpu_dist"

    def shutdown(self):
        """Finishes the queued collectives (each within the group's timeout), then
        releases the inner Gloo group now rather than at interpreter exit."""
        if self._closed:
            return
        self._closed = True
        self._issue_q.put(None)
        for t in self._threads:
            t.join(self._timeout.total_seconds() + 30)
        if not any(t.is_alive() for t in self._threads):
            with self._lock:
                self._inflight = []
            self._gloo = None

    def abort(self):
        gloo = self._gloo
        if gloo is not None:
            gloo.abort()
        self.shutdown()

    # -- machinery
    def _wait_writers(self, key):
        with self._lock:
            self._inflight = [j for j in self._inflight if not j.done.is_set()]
            pending = [j for j in self._inflight if key in j.writes]
        for j in pending:
            j.done.wait()

    def _issue_loop(self):
        while True:
            job = self._issue_q.get()
            if job is None:
                self._finish_q.put(None)
                return
            try:
                if self._check and job.desc is not None:
                    self._agree(job)
                job.gloo_work, job.post = job.launch(job)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's wait()
                job.finish(e)
                continue
            with self._lock:
                self._inflight.append(job)
            self._finish_q.put(job)

    def _finish_loop(self):
        while True:
            job = self._finish_q.get()
            if job is None:
                return
            try:
                if job.gloo_work is not None:
                    job.gloo_work.wait()
                if job.post is not None:
                    job.post()
                for t, h in job.back:
                    t.copy_(h)
            except BaseException as e:  # noqa: BLE001
                job.finish(e)
                continue
            job.finish()

    def _agree(self, job):
        """All ranks exchange descriptors; any disagreement raises on every rank."""
        mine = torch.tensor(job.desc, dtype=torch.int64)
        table = torch.empty(self._size_ * mine.numel(), dtype=torch.int64)
        self._gloo.all_gather_single(table, mine, _c10d.AllgatherOptions()).wait()
        rows = table.view(self._size_, -1).tolist()
        bad = [r for r, row in enumerate(rows) if row[5]]
        if bad:
            if job.local_error is not None:
                raise job.local_error
            raise ValueError(f"tpu_dist {job.name}: rank(s) {bad} passed invalid arguments (see their errors)")

        def show(r):
            row = rows[r]
            ndim = row[6]
            shape = list(row[7:7 + min(ndim, 6)]) + (["..."] if ndim > 6 else [])
            kind = _KINDS[row[0]] if 0 <= row[0] < len(_KINDS) else f"op {row[0]}"
            return f"rank {r}: {kind} {_DTYPE_NAMES.get(row[1], row[1])} {shape if ndim >= 0 else ''}"

        for f, field in enumerate(_FIELDS):
            if len({row[f] for row in rows}) > 1:
                detail = "; ".join(show(r) for r in range(self._size_))
                raise ValueError(f"tpu_dist {job.name}: ranks disagree on the {field} ({detail})")
        w = self._size_
        for r in range(w):
            for j in range(w):
                sent, got = rows[r][_HEAD + j], rows[j][_HEAD + w + r]
                if sent != got:
                    raise ValueError(
                        f"tpu_dist {job.name}: rank {r} sends {sent} elements to rank {j}, which expects {got}")

    def _submit(self, name, launch, results, *, dtype=None, counts=(), op=None, root=-1, shape=None,
                splits=None, local_error=None):
        """Queues one collective; returns its Work. `counts` are the element counts
        every rank must agree on; `splits` (all_to_all) is (sent, received) per peer."""
        if self._closed:
            raise RuntimeError(f"tpu_dist {name}: the process group was shut down")
        w = self._size_
        desc = None
        if name != "send/recv":
            dims = list(shape) if shape is not None else []
            desc = [_KINDS.index(name), _dtype_code(dtype), -1 if op is None else int(op.op), root, _sig(counts),
                    1 if local_error is not None else 0, len(dims) if shape is not None else -1]
            desc += (dims + [-1] * 6)[:6]
            sent, got = splits if splits is not None else ([0] * w, [0] * w)
            desc += list(sent) + list(got)
        job = _Job(self, name, desc, launch, results, local_error)
        if local_error is not None:
            if self._check:
                self._issue_q.put(job)  # the others learn of it through the descriptor exchange
            raise local_error
        self._issue_q.put(job)
        if self._coalesced is not None:
            self._coalesced.append(job)
        return _Work([job], self._timeout)

    def _reduce_op(self, name, op, dtype):
        """(op for Gloo, divisor or None): AVG is SUM then a division."""
        if op == _ReduceOp.AVG:
            if not (dtype.is_floating_point or dtype.is_complex):
                raise TypeError(f"tpu_dist {name}: ReduceOp.AVG needs a floating dtype, got {dtype}")
            return _ReduceOp.SUM, self._size_
        if op == _ReduceOp.PREMUL_SUM:
            raise NotImplementedError(f"tpu_dist {name}: ReduceOp.PREMUL_SUM is not supported")
        return op, None

    @staticmethod
    def _divide(hosts, divisor):
        if divisor is None:
            return None
        return lambda: [h.div_(divisor) for h in hosts]

    def _bad(self, name, cond, what):
        return ValueError(f"tpu_dist {name}: {what}") if cond else None

    # -- collectives (c10d's Backend interface; argument names follow Backend.hpp)
    def allreduce(self, tensors, opts):
        return self._allreduce("all_reduce", tensors, opts, coalesced=False)

    def allreduce_coalesced(self, tensors, opts):
        return self._allreduce("all_reduce_coalesced", tensors, opts, coalesced=True)

    def _allreduce(self, name, tensors, opts, coalesced):
        gop, divisor = self._reduce_op(name, opts.reduceOp, tensors[0].dtype)
        gopts = (_c10d.AllreduceCoalescedOptions if coalesced else _c10d.AllreduceOptions)()
        gopts.reduceOp, gopts.timeout = gop, opts.timeout
        run = self._gloo.allreduce_coalesced if coalesced else self._gloo.allreduce

        def launch(job):
            hs = [job.inout(t) for t in tensors]
            return run(hs, gopts), self._divide(hs, divisor)

        return self._submit(name, launch, tensors, dtype=tensors[0].dtype, counts=[t.numel() for t in tensors],
                            op=opts.reduceOp, shape=tensors[0].shape,
                            local_error=self._bad(name, len({t.dtype for t in tensors}) > 1,
                                                  f"tensors of several dtypes {[t.dtype for t in tensors]}"))

    def broadcast(self, tensors, opts):
        def launch(job):
            return self._gloo.broadcast([job.inout(t) for t in tensors], opts), None

        return self._submit("broadcast", launch, tensors, dtype=tensors[0].dtype,
                            counts=[t.numel() for t in tensors], root=opts.rootRank, shape=tensors[0].shape)

    def reduce(self, tensors, opts):
        gop, divisor = self._reduce_op("reduce", opts.reduceOp, tensors[0].dtype)
        gopts = _c10d.ReduceOptions()
        gopts.reduceOp, gopts.rootRank, gopts.rootTensor, gopts.timeout = gop, opts.rootRank, opts.rootTensor, opts.timeout
        is_root = self._rank_ == opts.rootRank

        def launch(job):
            hs = [job.inout(t) for t in tensors]
            return self._gloo.reduce(hs, gopts), self._divide(hs, divisor if is_root else None)

        return self._submit("reduce", launch, tensors, dtype=tensors[0].dtype, counts=[t.numel() for t in tensors],
                            op=opts.reduceOp, root=opts.rootRank, shape=tensors[0].shape)

    def _check_parts(self, name, parts, whole, dtype):
        """A local error when `parts` is not one tensor of `whole`'s size per rank."""
        if len(parts) != self._size_:
            return ValueError(f"tpu_dist {name}: {len(parts)} tensors for a group of {self._size_}")
        wrong = [(tuple(p.shape), p.dtype) for p in parts if p.numel() != whole.numel() or p.dtype != dtype]
        return self._bad(name, bool(wrong), f"tensors {wrong} do not match {tuple(whole.shape)} {dtype}")

    def allgather(self, output_tensors, input_tensors, opts):
        inp, outs = input_tensors[0], output_tensors[0]

        def launch(job):
            return self._gloo.allgather([[job.write(o) for o in outs]], [job.read(inp)], opts), None

        return self._submit("all_gather", launch, outs, dtype=inp.dtype, counts=[inp.numel()], shape=inp.shape,
                            local_error=self._check_parts("all_gather", outs, inp, inp.dtype))

    def allgather_coalesced(self, output_lists, input_tensors, opts):
        def launch(job):
            return self._gloo.allgather_coalesced([[job.write(o) for o in outs] for outs in output_lists],
                                                  [job.read(t) for t in input_tensors], opts), None

        err = next((e for outs, t in zip(output_lists, input_tensors)
                    if (e := self._check_parts("all_gather_coalesced", outs, t, t.dtype))), None)
        return self._submit("all_gather_coalesced", launch, [o for outs in output_lists for o in outs],
                            dtype=input_tensors[0].dtype, counts=[t.numel() for t in input_tensors],
                            shape=input_tensors[0].shape, local_error=err)

    def _check_whole(self, name, whole, part):
        """A local error when `whole` is not group-size copies of `part`."""
        return self._bad(name, whole.numel() != part.numel() * self._size_ or whole.dtype != part.dtype,
                         f"{tuple(whole.shape)} {whole.dtype} is not {self._size_} x {tuple(part.shape)} {part.dtype}")

    def all_gather_single(self, output, input, opts):
        def launch(job):
            return self._gloo.all_gather_single(job.write(output), job.read(input), opts), None

        return self._submit("all_gather_into_tensor", launch, [output], dtype=input.dtype, counts=[input.numel()],
                            shape=input.shape, local_error=self._check_whole("all_gather_into_tensor", output, input))

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        def launch(job):
            return self._gloo.all_gather_single_coalesced([job.write(o) for o in outputs],
                                                          [job.read(i) for i in inputs], opts), None

        name = "all_gather_into_tensor_coalesced"
        err = next((e for o, i in zip(outputs, inputs) if (e := self._check_whole(name, o, i))), None)
        return self._submit(name, launch, outputs, dtype=inputs[0].dtype, counts=[i.numel() for i in inputs],
                            shape=inputs[0].shape, local_error=err)

    def _reduce_scatter(self, name, run, outputs, inputs, opts, errors):
        gop, divisor = self._reduce_op(name, opts.reduceOp, outputs[0].dtype)
        gopts = _c10d.ReduceScatterOptions()
        gopts.reduceOp, gopts.timeout = gop, opts.timeout

        def launch(job):
            hs = [job.write(o) for o in outputs]
            return run(hs, inputs(job), gopts), self._divide(hs, divisor)

        return self._submit(name, launch, outputs, dtype=outputs[0].dtype, counts=[o.numel() for o in outputs],
                            op=opts.reduceOp, shape=outputs[0].shape, local_error=next(filter(None, errors), None))

    def reduce_scatter(self, output_tensors, input_lists, opts):
        return self._reduce_scatter(
            "reduce_scatter", lambda hs, ins, o: self._gloo.reduce_scatter(hs, ins, o), output_tensors,
            lambda job: [[job.read(t) for t in ts] for ts in input_lists], opts,
            [self._check_parts("reduce_scatter", ts, o, o.dtype) for o, ts in zip(output_tensors, input_lists)])

    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter(
            "reduce_scatter_tensor", lambda hs, ins, o: self._gloo.reduce_scatter_single(hs[0], ins, o), [output],
            lambda job: job.read(input), opts, [self._check_whole("reduce_scatter_tensor", input, output)])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        name = "reduce_scatter_tensor_coalesced"
        return self._reduce_scatter(
            name, self._gloo.reduce_scatter_single_coalesced, outputs, lambda job: [job.read(i) for i in inputs], opts,
            [self._check_whole(name, i, o) for o, i in zip(outputs, inputs)])

    def alltoall(self, output_tensors, input_tensors, opts):
        """Any per-peer sizes (Gloo's own list all_to_all needs equal ones): one
        all_to_all_single over the flattened, concatenated host tensors."""
        sent, got = [t.numel() for t in input_tensors], [t.numel() for t in output_tensors]

        def launch(job):
            flat_in = torch.cat([job.read(t).reshape(-1) for t in input_tensors])
            flat_out = torch.empty(sum(got), dtype=flat_in.dtype)
            hs = [job.write(o) for o in output_tensors]
            work = self._gloo.all_to_all_single(flat_out, flat_in, got, sent, opts)
            return work, lambda: [h.view(-1).copy_(piece) for h, piece in zip(hs, flat_out.split(got))]

        err = self._bad("all_to_all", len(output_tensors) != self._size_ or len(input_tensors) != self._size_,
                        f"{len(input_tensors)} inputs and {len(output_tensors)} outputs for a group of {self._size_}")
        dtypes = {t.dtype for t in list(output_tensors) + list(input_tensors)}
        err = err or self._bad("all_to_all", len(dtypes) > 1, f"tensors of several dtypes {sorted(map(str, dtypes))}")
        return self._submit("all_to_all", launch, output_tensors, dtype=input_tensors[0].dtype,
                            splits=(sent, got) if err is None else None, local_error=err)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        name, w = "all_to_all_single", self._size_

        def rows(t, given):
            return list(given) if len(given) else [t.shape[0] // w if t.dim() else 0] * w

        in_rows, out_rows = rows(input, input_split_sizes), rows(output, output_split_sizes)
        row = lambda t: math.prod(t.shape[1:])  # noqa: E731
        err = None
        for t, r, what in ((input, in_rows, "input"), (output, out_rows, "output")):
            if len(r) != w or sum(r) != (t.shape[0] if t.dim() else 0):
                err = err or ValueError(f"tpu_dist {name}: {what} of shape {tuple(t.shape)} cannot be split as {r} "
                                        f"over a group of {w}")
        err = err or self._bad(name, input.dtype != output.dtype or input.shape[1:] != output.shape[1:],
                               f"input {tuple(input.shape)} {input.dtype} and output {tuple(output.shape)} "
                               f"{output.dtype} differ beyond the first dimension")
        splits = None
        if err is None:
            splits = ([n * row(input) for n in in_rows], [n * row(output) for n in out_rows])

        def launch(job):
            return self._gloo.all_to_all_single(job.write(output), job.read(input), list(output_split_sizes),
                                                list(input_split_sizes), opts), None

        return self._submit(name, launch, [output], dtype=input.dtype, counts=[row(input)], splits=splits,
                            local_error=err)

    def gather(self, output_lists, input_tensors, opts):
        inp = input_tensors[0]
        is_root = self._rank_ == opts.rootRank
        outs = output_lists[0] if is_root and output_lists else []

        def launch(job):
            return self._gloo.gather([[job.write(o) for o in outs]] if is_root else [], [job.read(inp)], opts), None

        return self._submit("gather", launch, outs, dtype=inp.dtype, counts=[inp.numel()], root=opts.rootRank,
                            shape=inp.shape, local_error=self._check_parts("gather", outs, inp, inp.dtype) if is_root
                            else None)

    def scatter(self, output_tensors, input_lists, opts):
        out = output_tensors[0]
        is_root = self._rank_ == opts.rootRank
        ins = input_lists[0] if is_root and input_lists else []

        def launch(job):
            return self._gloo.scatter([job.write(out)], [[job.read(t) for t in ins]] if is_root else [], opts), None

        return self._submit("scatter", launch, [out], dtype=out.dtype, counts=[out.numel()], root=opts.rootRank,
                            shape=out.shape, local_error=self._check_parts("scatter", ins, out, out.dtype) if is_root
                            else None)

    def send(self, tensors, dst, tag):
        def launch(job):
            return self._gloo.send([job.read(t) for t in tensors], dst, tag), None

        return self._submit("send/recv", launch, tensors)

    def recv(self, tensors, src, tag):
        def launch(job):
            return self._gloo.recv([job.write(t) for t in tensors], src, tag), None

        return self._submit("send/recv", launch, tensors)

    def barrier(self, opts):
        def launch(job):
            gopts = _c10d.BarrierOptions()
            gopts.timeout = opts.timeout
            return self._gloo.barrier(gopts), None

        return self._submit("barrier", launch, [])

    # -- coalescing (`_coalescing_manager(device=...)`, batch_isend_irecv): one Work for the group
    def start_coalescing(self):
        self._coalesced = []

    def end_coalescing(self):
        jobs, self._coalesced = self._coalesced or [], None
        if not jobs:
            return None
        fut = torch.futures.collect_all([j.future for j in jobs]).then(
            lambda f: [t for x in f.value() for t in x.value()])
        return _Work(jobs, self._timeout, future=fut)


def _create(store, rank, size, timeout):
    return ProcessGroupTPU(store, rank, size, timeout)


def register():
    """Registers "tpu_dist" and "tpu" for tpu tensors (idempotent)."""
    if not dist.is_available():
        return
    for name in NAMES:
        if name.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(name, _create, devices=["tpu"])


def local_chips_default(environ=os.environ):
    """Before the runtime starts: under torchrun (LOCAL_WORLD_SIZE set) and without
    TORCH_TPU_HOST_DEVICES, each process gets LOCAL_WORLD_SIZE virtual chips so
    that tpu:LOCAL_RANK exists, as on a host with one chip per local process."""
    n = environ.get("LOCAL_WORLD_SIZE")
    if "TORCH_TPU_HOST_DEVICES" not in environ and n and n.isdigit() and int(n) > 1:
        environ["TORCH_TPU_HOST_DEVICES"] = n


def select_local_chip(set_device, device_count, environ=os.environ):
    """Under torchrun: process LOCAL_RANK uses tpu:LOCAL_RANK when the process has
    that many chips, else its chip 0 (one chip per process)."""
    r = environ.get("LOCAL_RANK")
    if r is not None and r.isdigit() and int(r) < device_count:
        set_device(int(r))
