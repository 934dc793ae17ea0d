"""One rank of the multi-process tests in test_dist.py (run by them, or by torchrun).

    python tests/dist_worker.py BACKEND CASE [CASE ...]

Rendezvous through env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). Prints
"PASS <case>" per case; any failure is a traceback and a non-zero exit.
BACKEND "none": the worker creates no process group (Accelerate's or Transformers'
cases create their own); without RANK and WORLD_SIZE it is one process alone.
"""
import datetime
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
import torch_tpu  # noqa: F401

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def dev():
    return torch.device("tpu", torch.tpu.current_device())


def data(shape, dtype=torch.float32, salt=0):
    """Per-rank test data, the same on every run."""
    g = torch.Generator().manual_seed(1000 * RANK + salt)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def against_gloo(name, run, *inputs, expect=None):
    """run(tensors, group) does a collective and returns the tensors to compare.
    Runs it on CPU tensors over gloo and on tpu copies over the default group
    (tpu_dist); the tpu results must equal gloo's exactly (or expect(gloo's))."""
    cpu = run([t.clone() for t in inputs], GLOO)
    tpu = run([t.to(dev()) for t in inputs], None)
    if expect is not None:
        cpu = expect(cpu)
    assert len(cpu) == len(tpu), (name, len(cpu), len(tpu))
    for c, t in zip(cpu, tpu):
        assert t.device.type in ("tpu", "cpu"), (name, t.device)
        t = t.cpu()
        assert c.dtype == t.dtype and c.shape == t.shape, (name, c.dtype, t.dtype, c.shape, t.shape)
        assert torch.equal(c, t), f"{name}: tpu_dist {t} != gloo {c}"


def case_collectives():
    R = dist.ReduceOp
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
            def ar(ts, g, op=op):
                dist.all_reduce(ts[0], op=op, group=g)
                return ts
            against_gloo(f"all_reduce {op} {dtype}", ar, data((5, 3), dtype))
    against_gloo("all_reduce bool max", lambda ts, g: (dist.all_reduce(ts[0], op=R.MAX, group=g), ts)[1],
                 data((7,), torch.bool))

    def avg(ts, g):  # gloo has no AVG: compare with its SUM / world size
        dist.all_reduce(ts[0], op=R.AVG if g is None else R.SUM, group=g)
        return ts
    against_gloo("all_reduce avg", avg, data((6,)), expect=lambda c: [c[0] / WORLD])

    def ar_async(ts, g):
        # two in flight on one tpu tensor: the second sees the first's result, as
        # gloo's with a wait between them (two in flight on one CPU tensor race in gloo)
        w1 = dist.all_reduce(ts[0], group=g, async_op=True)
        if g is not None:
            w1.wait()
        w2 = dist.all_reduce(ts[0], group=g, async_op=True)
        w2.wait()
        w1.wait()
        return ts
    against_gloo("all_reduce async chained", ar_async, data((4, 4)))

    def ag(ts, g):
        outs = [torch.empty_like(ts[0]) for _ in range(WORLD)]
        dist.all_gather(outs, ts[0], group=g)
        return outs
    against_gloo("all_gather", ag, data((3, 2)))

    def agt(ts, g):
        out = torch.empty((WORLD * 3, 2), device=ts[0].device)
        dist.all_gather_into_tensor(out, ts[0], group=g)
        return [out]
    against_gloo("all_gather_into_tensor", agt, data((3, 2)))

    def rs(ts, g):
        out = torch.empty((2, 2), device=ts[0].device)
        dist.reduce_scatter(out, list(ts[0].chunk(WORLD)), group=g)
        return [out]
    against_gloo("reduce_scatter", rs, data((2 * WORLD, 2)))

    for op in (R.SUM, R.MAX):
        def rst(ts, g, op=op):
            out = torch.empty((3,), device=ts[0].device)
            dist.reduce_scatter_tensor(out, ts[0], op=op, group=g)
            return [out]
        against_gloo(f"reduce_scatter_tensor {op}", rst, data((3 * WORLD,)))

    def rst_avg(ts, g):
        out = torch.empty((3,), device=ts[0].device)
        dist.reduce_scatter_tensor(out, ts[0], op=R.AVG if g is None else R.SUM, group=g)
        return [out]
    against_gloo("reduce_scatter_tensor avg", rst_avg, data((3 * WORLD,)), expect=lambda c: [c[0] / WORLD])

    # uneven: rank r sends r + j + 1 rows to rank j
    def a2a_single(ts, g):
        ins = [RANK + j + 1 for j in range(WORLD)]
        outs = [r + RANK + 1 for r in range(WORLD)]
        out = torch.empty((sum(outs), 2), device=ts[0].device)
        dist.all_to_all_single(out, ts[0][: sum(ins)], outs, ins, group=g)
        return [out]
    against_gloo("all_to_all_single uneven", a2a_single, data((4 * WORLD, 2)))

    def a2a_even(ts, g):
        out = torch.empty_like(ts[0])
        dist.all_to_all_single(out, ts[0], group=g)
        return [out]
    against_gloo("all_to_all_single", a2a_even, data((2 * WORLD, 3)))

    def a2a(ts, g):  # gloo's list all_to_all needs equal sizes: compare with its all_to_all_single
        ins = [ts[0][: RANK + j + 1] for j in range(WORLD)]
        outs = [torch.empty((r + RANK + 1, 2), device=ts[0].device) for r in range(WORLD)]
        if g is None:
            dist.all_to_all(outs, ins, group=g)
            return outs
        flat = torch.empty((sum(o.shape[0] for o in outs), 2))
        dist.all_to_all_single(flat, torch.cat(ins), [o.shape[0] for o in outs], [i.shape[0] for i in ins], group=g)
        return list(flat.split([o.shape[0] for o in outs]))
    against_gloo("all_to_all uneven", a2a, data((2 * WORLD + 1, 2)))

    def a2a_list(ts, g):
        outs = [torch.empty_like(t) for t in ts[0].chunk(WORLD)]
        dist.all_to_all(outs, list(ts[0].chunk(WORLD)), group=g)
        return outs
    against_gloo("all_to_all", a2a_list, data((2 * WORLD, 3)))

    def bc(ts, g):
        dist.broadcast(ts[0], src=WORLD - 1, group=g)
        return ts
    against_gloo("broadcast", bc, data((4,), torch.int32))

    def rd(ts, g):
        dist.reduce(ts[0], dst=0, op=R.MAX, group=g)
        return ts if RANK == 0 else []
    against_gloo("reduce", rd, data((5,)))

    def ga(ts, g):
        outs = [torch.empty_like(ts[0]) for _ in range(WORLD)] if RANK == 0 else None
        dist.gather(ts[0], outs, dst=0, group=g)
        return outs or []
    against_gloo("gather", ga, data((2, 3)))

    def sc(ts, g):
        out = torch.empty((2,), device=ts[0].device)
        dist.scatter(out, list(ts[0].chunk(WORLD)) if RANK == 1 else None, src=1, group=g)
        return [out]
    against_gloo("scatter", sc, data((2 * WORLD,)))

    def p2p(ts, g):
        peer = (RANK + 1) % WORLD, (RANK - 1) % WORLD
        got = torch.empty_like(ts[0])
        if RANK % 2 == 0:
            dist.send(ts[0], peer[0], group=g)
            dist.recv(got, peer[1], group=g)
        else:
            dist.recv(got, peer[1], group=g)
            dist.send(ts[0], peer[0], group=g)
        return [got]
    against_gloo("send/recv", p2p, data((3, 3)))

    def batch(ts, g):
        got = torch.empty_like(ts[0])
        ops = [dist.P2POp(dist.isend, ts[0], (RANK + 1) % WORLD, group=g),
               dist.P2POp(dist.irecv, got, (RANK - 1) % WORLD, group=g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [got]
    against_gloo("batch_isend_irecv", batch, data((6,)))

    def coalesced(ts, g):
        a, b = ts
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            dist.all_reduce(a, group=g)
            dist.all_reduce(b, group=g)
        cm.wait()
        return [a, b]
    against_gloo("all_reduce coalesced", coalesced, data((3,)), data((5,), salt=1))

    def coalesced_dev(ts, g):  # the per-op style, through start/end coalescing (which gloo lacks)
        a, b = ts
        if g is not None:
            dist.all_reduce(a, group=g)
            dist.all_reduce(b, group=g)
            return [a, b]
        with dist._coalescing_manager(group=g, device=a.device, async_ops=True) as cm:
            dist.all_reduce(a, group=g)
            dist.all_reduce(b, group=g)
        cm.wait()
        return [a, b]
    against_gloo("all_reduce coalesced (device)", coalesced_dev, data((3,)), data((2, 2), salt=1))

    def ag_coalesced(ts, g):
        outs = [torch.empty((WORLD * t.shape[0],) + t.shape[1:], device=t.device) for t in ts]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, t in zip(outs, ts):
                dist.all_gather_into_tensor(o, t, group=g)
        cm.wait()
        return outs
    against_gloo("all_gather_into_tensor coalesced", ag_coalesced, data((2,)), data((3, 2), salt=1))

    def rs_coalesced(ts, g):
        outs = [torch.empty((t.shape[0] // WORLD,) + t.shape[1:], device=t.device) for t in ts]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, t in zip(outs, ts):
                dist.reduce_scatter_tensor(o, t, group=g)
        cm.wait()
        return outs
    against_gloo("reduce_scatter_tensor coalesced", rs_coalesced, data((2 * WORLD,)), data((WORLD, 3), salt=1))

    def leaves(ts, g):
        # c10d ops are not autograd ops: Gloo and NCCL write into leaves that require grad, and
        # into non-leaves without touching their grad_fn or version counter
        x, out = ts[0].clone().requires_grad_(), torch.zeros(ts[0].shape, device=ts[0].device, requires_grad=True)
        dist.all_reduce(x, group=g)
        dist.all_to_all_single(out, ts[0], group=g)
        assert x.requires_grad and x.is_leaf and out.requires_grad and out.is_leaf
        a = torch.ones(ts[0].shape, device=ts[0].device, requires_grad=True)
        y, z = a * 2, a * 3
        dist.all_reduce(y, group=g)
        dist.all_to_all_single(z, ts[0], group=g)
        for t in (x, out, y, z):
            assert t._version == 0, (t._version, g)
        assert type(y.grad_fn).__name__ == type(z.grad_fn).__name__ == "MulBackward0", (y.grad_fn, z.grad_fn)
        (y + z).sum().backward()
        assert torch.equal(a.grad.cpu(), torch.full(a.shape, 5.0)), a.grad
        return [x.detach(), out.detach(), y.detach(), z.detach()]
    against_gloo("collectives into leaves that require grad", leaves, data((4 * WORLD, 3)))

    def a2a_autograd(ts, g):  # the form Transformers' expert parallelism differentiates through
        import torch.distributed._functional_collectives as fc
        x = ts[0].clone().requires_grad_()
        y = fc.wait_tensor(fc.all_to_all_single_autograd(x, [2] * WORLD, [2] * WORLD, g or dist.group.WORLD))
        (y * (RANK + 1)).sum().backward()
        return [y.detach(), x.grad]
    against_gloo("all_to_all_single_autograd forward and backward", a2a_autograd, data((2 * WORLD, 5)))

    def fut(ts, g):
        w = dist.all_reduce(ts[0], group=g, async_op=True)
        return w.get_future().wait()
    against_gloo("Work.get_future", fut, data((4,)))

    dist.barrier(device_ids=[torch.tpu.current_device()])
    dist.barrier()
    objs = [{"rank": RANK}] if RANK == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    assert objs == [{"rank": 0}], objs
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, ("r", RANK))
    assert gathered == [("r", r) for r in range(WORLD)], gathered


def case_shm():
    """Larger collectives between ranks on one host through shared memory: equal to
    gloo's, growing regions, reduce ops, dtypes, AVG, several tensors; none of them
    (nor the agreement checks) goes through tpu_dist's Gloo."""
    from torch_tpu.distributed import transport_stats
    R = dist.ReduceOp
    before, gloo_before = transport_stats()["shared_memory"], transport_stats()["gloo"]
    for shape in ((128, 160), (300, 301)):  # the second grows the regions
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for op in (R.SUM, R.MIN, R.MAX):
                def ar(ts, g, op=op):
                    dist.all_reduce(ts[0], op=op, group=g)
                    return ts
                against_gloo(f"shm all_reduce {op} {dtype} {shape}", ar, data(shape, dtype))
    against_gloo("shm all_reduce product", lambda ts, g: (dist.all_reduce(ts[0], op=R.PRODUCT, group=g), ts)[1],
                 data((200, 100)) * 0.5 + 1)
    against_gloo("shm all_reduce bool max", lambda ts, g: (dist.all_reduce(ts[0], op=R.MAX, group=g), ts)[1],
                 data((300, 300), torch.bool))

    def avg(ts, g):
        dist.all_reduce(ts[0], op=R.AVG if g is None else R.SUM, group=g)
        return ts
    against_gloo("shm all_reduce avg", avg, data((256, 64)), expect=lambda c: [c[0] / WORLD])

    def bc(ts, g):
        dist.broadcast(ts[0], src=1, group=g)
        return ts
    against_gloo("shm broadcast", bc, data((100, 200)))

    def agt(ts, g):
        out = torch.empty((WORLD * 128, 130), device=ts[0].device)
        dist.all_gather_into_tensor(out, ts[0], group=g)
        return [out]
    against_gloo("shm all_gather_into_tensor", agt, data((128, 130)))

    for op in (R.SUM, R.MAX):
        def rst(ts, g, op=op):
            out = torch.empty((64, 200), device=ts[0].device)
            dist.reduce_scatter_tensor(out, ts[0], op=op, group=g)
            return [out]
        against_gloo(f"shm reduce_scatter_tensor {op}", rst, data((64 * WORLD, 200)))

    def coalesced(ts, g):
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=g)
        cm.wait()
        return ts
    against_gloo("shm all_reduce coalesced", coalesced, data((100, 100)), data((50, 300), salt=1))
    def a2a(ts, g):  # uneven: rank r sends 100 (r + j + 1) rows to rank j
        sent = [100 * (RANK + j + 1) for j in range(WORLD)]
        got = [100 * (j + RANK + 1) for j in range(WORLD)]
        out = torch.empty((sum(got), 50), device=ts[0].device)
        dist.all_to_all_single(out, ts[0][:sum(sent)], got, sent, group=g)
        return [out]
    against_gloo("shm all_to_all_single uneven", a2a, data((100 * (2 * WORLD + WORLD * WORLD), 50)))

    def a2a_list(ts, g):  # uneven list form (gloo's needs equal sizes: compare with its single form)
        ins = [ts[0][: 10 * (RANK + j + 1)] for j in range(WORLD)]
        outs = [torch.empty((10 * (r + RANK + 1), 40), device=ts[0].device) for r in range(WORLD)]
        if g is None:
            dist.all_to_all(outs, ins, group=g)
            return outs
        flat = torch.empty((sum(o.shape[0] for o in outs), 40))
        dist.all_to_all_single(flat, torch.cat(ins), [o.shape[0] for o in outs], [i.shape[0] for i in ins], group=g)
        return list(flat.split([o.shape[0] for o in outs]))
    against_gloo("shm all_to_all uneven", a2a_list, data((10 * (2 * WORLD + 1), 40)))

    def rs_list(ts, g):
        out = torch.empty((70, 33), device=ts[0].device)
        dist.reduce_scatter(out, list(ts[0].chunk(WORLD)), op=R.MAX, group=g)
        return [out]
    against_gloo("shm reduce_scatter (list)", rs_list, data((70 * WORLD, 33)))

    def ag_rs_coalesced(ts, g):  # the forms FSDP2 and DTensor issue
        gathered = [torch.empty((WORLD * t.shape[0],) + t.shape[1:], device=t.device) for t in ts]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, t in zip(gathered, ts):
                dist.all_gather_into_tensor(o, t, group=g)
        cm.wait()
        scattered = [torch.empty_like(t) for t in ts]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, t in zip(scattered, gathered):
                dist.reduce_scatter_tensor(o, t, group=g)
        cm.wait()
        return gathered + scattered
    against_gloo("shm all_gather/reduce_scatter coalesced", ag_rs_coalesced, data((100, 70)), data((33,), salt=1))
    used = transport_stats()["shared_memory"] - before
    assert used >= 28, transport_stats()
    if os.environ.get("TORCH_TPU_DIST_SHM", "1") != "0":
        assert transport_stats()["gloo"] == gloo_before, transport_stats()


def expect_error(fn, *words):
    t0 = time.time()
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        assert all(w in msg for w in words), (words, msg)
        assert time.time() - t0 < 30, "the error took too long"
        print(f"rank {RANK} raised: {msg}", flush=True)
        return msg
    raise AssertionError(f"no error (expected one naming {words})")


def case_errors():
    x = dev()
    expect_error(lambda: dist.all_reduce(torch.ones(4 + RANK, device=x)), "all_reduce", "sizes", "[4]", "[5]")
    dtype = torch.float32 if RANK == 0 else torch.float64
    expect_error(lambda: dist.all_reduce(torch.ones(4, device=x, dtype=dtype)), "dtype", "float64")
    if RANK == 0:
        expect_error(lambda: dist.all_reduce(torch.ones(4, device=x)), "collective", "broadcast")
    else:
        expect_error(lambda: dist.broadcast(torch.ones(4, device=x), src=0), "collective", "all_reduce")
    bad = 3 if RANK == 0 else 2 * WORLD  # rank 0's output is the wrong size
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(bad, device=x), torch.ones(2, device=x)),
                 "all_gather_into_tensor", "rank" if RANK else "(3,)")
    ins = [1] * WORLD
    outs = [1] * WORLD if RANK == 0 else [2] + [1] * (WORLD - 1)  # rank 1 expects 2 rows from rank 0
    expect_error(lambda: dist.all_to_all_single(torch.empty(sum(outs), device=x), torch.ones(WORLD, device=x),
                                                outs, ins), "all_to_all_single", "expects")
    # send/recv of mismatched sizes or dtypes (Gloo alone aborts the receiver for a larger message and
    # accepts a smaller one silently): the receiver's recv raises, its tensor keeps its contents, the
    # sender's send completes
    for n, dtype in ((6, torch.float32), (4, torch.float32), (5, torch.int32)):
        if RANK == 0:
            dist.send(torch.ones(n, device=x, dtype=dtype), 1)
        elif RANK == 1:
            got = torch.full((5,), 7.0, device=x)
            expect_error(lambda: dist.recv(got, 0), "recv", "rank 0 sent", f"{n} elements of {dtype}",
                         "receives 5 elements of torch.float32")
            assert got.cpu().tolist() == [7.0] * 5, got
    if RANK < 2:  # and a matching one still arrives
        if RANK == 0:
            dist.send(torch.arange(5.0, device=x), 1)
        else:
            got = torch.empty(5, device=x)
            dist.recv(got, 0)
            assert got.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], got
        # several in flight on one tag keep their order; another tag received first does not wait for it
        if RANK == 0:
            works = [dist.isend(torch.full((n,), float(n), device=x), 1, tag=tag) for n, tag in ((2, 1), (3, 1), (4, 2))]
        else:
            got = {n: torch.empty(n, device=x) for n in (2, 3, 4)}
            works = [dist.irecv(got[4], 0, tag=2), dist.irecv(got[2], 0, tag=1), dist.irecv(got[3], 0, tag=1)]
        for w in works:
            w.wait()
        if RANK == 1:
            assert all(got[n].cpu().tolist() == [float(n)] * n for n in got), got
    t = torch.full((3,), float(RANK + 1), device=x)
    dist.all_reduce(t)  # the group still works
    assert t.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 3, t


def case_die():
    """Rank 1 dies; rank 0's next collective must fail within the group timeout."""
    t = torch.ones(4, device=dev())
    dist.all_reduce(t)
    if RANK == 1:
        os._exit(3)
    t0 = time.time()
    try:
        for _ in range(3):
            dist.all_reduce(t)
    except RuntimeError as e:
        print(f"rank 0 failed after {time.time() - t0:.1f} s: {str(e).splitlines()[0][:200]}", flush=True)
    else:
        raise AssertionError("collectives with a dead rank succeeded")
    assert time.time() - t0 < TIMEOUT + 30
    print("PASS die", flush=True)
    sys.stdout.flush()
    os._exit(0)  # the group cannot shut down cleanly without its peer


def case_hang():
    """Rank 1 stops calling collectives (alive); rank 0's fails after the group timeout."""
    t = torch.ones(4, device=dev())
    dist.all_reduce(t)
    if RANK == 1:
        time.sleep(TIMEOUT + 5)
        os._exit(3)
    t0 = time.time()
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        took = time.time() - t0
        print(f"rank 0 failed after {took:.1f} s: {str(e).splitlines()[0][:200]}", flush=True)
    else:
        raise AssertionError("a collective without its peer succeeded")
    assert TIMEOUT - 1 < took < TIMEOUT + 30, took
    print("PASS hang", flush=True)
    os._exit(0)


def case_dtensor():
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    import torch.distributed._functional_collectives as funcol

    mesh = init_device_mesh("tpu", (WORLD,))
    full = torch.arange(4.0 * WORLD * 3).reshape(2 * WORLD, 6)
    d = distribute_tensor(full.to("tpu"), mesh, [Shard(0)])
    assert d.to_local().device.type == "tpu"
    assert torch.equal(d.to_local().cpu(), full.chunk(WORLD)[RANK])
    assert torch.equal(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full)
    assert torch.equal(d.redistribute(mesh, [Shard(1)]).to_local().cpu(), full.chunk(WORLD, 1)[RANK])
    assert torch.equal(d.full_tensor().cpu(), full)
    assert torch.equal((d * 2).sum().full_tensor().cpu(), (full * 2).sum())

    y = funcol.all_reduce(torch.full((3,), RANK + 1.0, device="tpu"), "sum", mesh)
    assert y.device.type == "tpu" and y.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 3, y
    z = funcol.all_gather_tensor(torch.full((2,), float(RANK), device="tpu"), 0, mesh)
    assert z.cpu().tolist() == [float(r) for r in range(WORLD) for _ in range(2)], z
    z = funcol.reduce_scatter_tensor(torch.ones(2 * WORLD, device="tpu"), "sum", 0, mesh)
    assert z.cpu().tolist() == [float(WORLD)] * 2, z

    mesh2 = init_device_mesh("tpu", (WORLD, 1), mesh_dim_names=("dp", "tp"))
    d2 = distribute_tensor(full.to("tpu"), mesh2, [Shard(0), Replicate()])
    assert torch.equal(d2.full_tensor().cpu(), full)
    assert mesh2["tp"].size() == 1 and mesh2["dp"].size() == WORLD

    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    x = torch.randn(4, 8)
    model = parallelize_module(
        nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to("tpu"),
        mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.no_grad():
        for (_, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            p.copy_(distribute_tensor(q.detach().to("tpu"), mesh, p.placements))
    out = model(x.to("tpu"))
    expect = ref(x)
    torch.testing.assert_close(out.cpu(), expect, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expect.sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, rtol=1e-5, atol=1e-5, msg=n)


def case_mesh2d():
    """4 ranks: a 2x2 DeviceMesh ("dp", "tp"), its sub-groups, a 2-D sharded DTensor
    redistributed over both dimensions, a group made by new_group([0, 3]), and a
    Colwise/Rowwise MLP over "tp" whose gradients are averaged over "dp": equal
    to one process on the whole batch."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    import torch.distributed._functional_collectives as funcol

    assert WORLD == 4
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, tp_rank = divmod(RANK, 2)
    tp_peers, dp_peers = [2 * dp_rank, 2 * dp_rank + 1], [tp_rank, 2 + tp_rank]
    assert mesh["tp"].size() == 2 and mesh["dp"].size() == 2
    assert mesh.get_local_rank("tp") == tp_rank and mesh.get_local_rank("dp") == dp_rank
    x = torch.full((3,), float(RANK), device="tpu")
    assert funcol.all_reduce(x, "sum", (mesh, 1)).cpu().tolist() == [float(sum(tp_peers))] * 3
    assert funcol.all_reduce(x, "sum", (mesh, 0)).cpu().tolist() == [float(sum(dp_peers))] * 3
    g = funcol.all_gather_tensor(x[:1], 0, (mesh, 0)).cpu().tolist()
    assert g == [float(r) for r in dp_peers], g
    y = x.clone()
    dist.all_reduce(y, group=mesh.get_group("tp"), op=dist.ReduceOp.MAX)
    assert y.cpu().tolist() == [float(max(tp_peers))] * 3

    full = torch.arange(8.0 * 6).reshape(8, 6)
    d = distribute_tensor(full.to("tpu"), mesh, [Shard(0), Shard(1)])
    assert torch.equal(d.to_local().cpu(), full.chunk(2, 0)[dp_rank].chunk(2, 1)[tp_rank])
    r = d.redistribute(mesh, [Replicate(), Shard(0)])
    assert torch.equal(r.to_local().cpu(), full.chunk(2, 0)[tp_rank])
    assert torch.equal(d.full_tensor().cpu(), full)

    corner = dist.new_group([0, 3])
    if RANK in (0, 3):
        z = torch.full((2,), RANK + 1.0, device="tpu")
        dist.all_reduce(z, group=corner)
        assert z.cpu().tolist() == [5.0, 5.0], z

    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    xs = torch.randn(4, 8)
    model = parallelize_module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to("tpu"),
                               mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.no_grad():
        for (_, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            p.copy_(distribute_tensor(q.detach().to("tpu"), mesh["tp"], p.placements))
    model(xs.chunk(2)[dp_rank].to("tpu")).pow(2).sum().backward()
    ref(xs).pow(2).sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh.get_group("dp"))  # the data-parallel sum of the batch halves
        want = q.grad.chunk(2, 0)[tp_rank] if p.grad.placements[0] == Shard(0) else (
            q.grad.chunk(2, 1)[tp_rank] if p.grad.placements[0] == Shard(1) else q.grad)
        torch.testing.assert_close(grad.cpu(), want, rtol=1e-5, atol=1e-5, msg=n)
    dist.barrier()


def case_train():
    """DDP and FSDP2 (fully_shard) SGD steps on per-rank halves of each batch end
    with the weights of one process training on the whole batches."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    xs = torch.randn(3, 2 * WORLD, 8, generator=torch.Generator().manual_seed(1))

    def train(model, params):
        opt = torch.optim.SGD(params, lr=0.1)
        for x in xs:
            x = x.chunk(WORLD)[RANK].to("tpu") if next(model.parameters()).device.type == "tpu" else x
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()

    for wrap in ("ddp", "fsdp2"):
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        model.load_state_dict(ref.state_dict())
        model.to("tpu")
        if wrap == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
            inner = model.module
        else:
            mesh = init_device_mesh("tpu", (WORLD,))
            for layer in (model[0], model[2]):
                fully_shard(layer, mesh=mesh)
            inner = fully_shard(model, mesh=mesh)
        train(model, model.parameters())
        train(ref, ref.parameters())
        for (n, p), q in zip(inner.named_parameters(), ref.parameters()):
            p = p.full_tensor() if wrap == "fsdp2" else p
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=f"{wrap} {n}")


def case_launch():
    """Under torchrun: the chip this process uses, and a collective on it and on the CPU."""
    local = int(os.environ["LOCAL_RANK"])
    want = local if torch.tpu.device_count() > local else 0
    assert torch.tpu.current_device() == want, (torch.tpu.current_device(), want, torch.tpu.device_count())
    t = torch.full((2,), RANK + 1.0, device="tpu")
    assert t.device.index == want
    dist.all_reduce(t)
    assert t.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 2, t
    if "cpu:" in BACKEND:  # a cpu backend too: cpu tensors take it
        c = torch.full((2,), RANK + 1.0)
        dist.all_reduce(c)
        assert c.tolist() == [WORLD * (WORLD + 1) / 2] * 2, c
    print(f"rank {RANK} local {local} on tpu:{want} of {torch.tpu.device_count()}", flush=True)
    print(f"rank {RANK} driver {torch_tpu._C.selected_driver()}", flush=True)


def case_tp_plan():
    """Transformers tensor parallelism: a tiny Llama loaded with tp_plan="auto"
    gives the logits and greedy tokens of the whole model on the CPU."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    path = os.environ["DIST_TEST_DIR"]
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    ref = LlamaForCausalLM(cfg).eval()
    if RANK == 0:
        ref.save_pretrained(path)
    dist.barrier()
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto").eval()
    assert model.device.type == "tpu", model.device
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to(model.device)).logits.cpu(), ref(ids).logits, rtol=1e-5, atol=1e-5)
        got = model.generate(ids.to(model.device), max_new_tokens=6, do_sample=False).cpu()
        want = ref.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(got, want), (got, want)
    whole = sum(p.numel() * p.element_size() for p in ref.parameters())
    print(f"rank {RANK}: tp_plan peak {torch.tpu.max_memory_allocated()} bytes, whole model {whole}", flush=True)


def case_google_ops():
    """Google's torch.tpu.ops collectives on tpu_dist, against what every rank's
    inputs (known to all: data() is seeded by rank) say the result must be."""
    ops = torch.tpu.ops
    mine = data((2, 3, 4), salt=7)
    allx = [torch.randn((2, 3, 4), generator=torch.Generator().manual_seed(1000 * r + 7)) for r in range(WORLD)]
    assert torch.equal(allx[RANK], mine)
    got = ops.all_gather_dim(mine.to(dev()), 1).cpu()
    assert torch.equal(got, torch.cat(allx, 1)), "all_gather_dim"
    big = [torch.randn((2, 4 * WORLD), generator=torch.Generator().manual_seed(1000 * r + 8)) for r in range(WORLD)]
    for op, ref in (("sum", lambda t: t.sum(0)), ("max", lambda t: t.amax(0))):
        got = ops.reduce_scatter_dim(big[RANK].to(dev()), -1, reduce_op=op).cpu()
        want = ref(torch.stack(big)).chunk(WORLD, -1)[RANK]
        torch.testing.assert_close(got, want, msg=f"reduce_scatter_dim {op}")
    # send/recv around the ring
    t = torch.full((3,), float(RANK), device=dev())
    r = torch.empty(3, device=dev())
    if RANK % 2 == 0:
        ops.send([t], (RANK + 1) % WORLD, 3).wait()
        ops.recv([r], (RANK - 1) % WORLD, 3).wait()
    else:
        ops.recv([r], (RANK - 1) % WORLD, 3).wait()
        ops.send([t], (RANK + 1) % WORLD, 3).wait()
    assert torch.equal(r.cpu(), torch.full((3,), float((RANK - 1) % WORLD))), "send/recv"
    # ragged_all_to_all: rank i sends i + j + 1 rows to rank j, rows tagged 100 * i + j
    send = [RANK + j + 1 for j in range(WORLD)]
    recv = [i + RANK + 1 for i in range(WORLD)]
    operand = torch.cat([torch.full((n, 2), 100. * RANK + j) for j, n in enumerate(send)])
    in_off = [sum(send[:j]) for j in range(WORLD)]
    # where rank j puts rank i's rows: after those of ranks < i, which send it k + j + 1 rows, plus a gap of 1
    out_off = [1 + sum(k + j + 1 for k in range(RANK)) for j in range(WORLD)]
    rows = 1 + sum(recv) + 1
    res = ops.ragged_all_to_all(operand.to(dev()), torch.full((rows, 2), -1., device=dev()),
                                *(torch.tensor(v, device=dev()) for v in (in_off, send, out_off, recv)),
                                dist.group.WORLD.group_name).cpu()
    want = torch.full((rows, 2), -1.)
    at = 1
    for i in range(WORLD):
        want[at:at + recv[i]] = 100. * i + RANK
        at += recv[i]
    assert torch.equal(res, want), f"ragged_all_to_all {res} != {want}"
    # its gradients (operand's and output's) equal those of the same exchange written with plain
    # indexing over every rank's data in one process; blocks that overlap (everyone writes from row 0,
    # later ranks' rows win) route each row's gradient to the rank whose write survived
    for overlap in (False, True):
        def ragged_data(r):
            gen = torch.Generator().manual_seed(10 * r + overlap)
            sends = [r + j + 1 for j in range(WORLD)]
            offs = ([0] * WORLD if overlap else
                    [1 + sum(k + j + 1 for k in range(r)) for j in range(WORLD)])
            rows_r = (WORLD + r if overlap else 2 + sum(i + r + 1 for i in range(WORLD)))
            return (sends, offs, torch.randn(sum(sends), 2, generator=gen), torch.randn(rows_r, 2, generator=gen),
                    torch.randn(rows_r, 2, generator=gen))
        every = [ragged_data(r) for r in range(WORLD)]
        sends, offs, a, base, weight = every[RANK]
        op_t, out_t = a.to(dev()).requires_grad_(), base.to(dev()).requires_grad_()
        res = ops.ragged_all_to_all(op_t, out_t, *(torch.tensor(v, device=dev()) for v in
                                                   ([sum(sends[:j]) for j in range(WORLD)], sends, offs,
                                                    [i + RANK + 1 for i in range(WORLD)])),
                                    dist.group.WORLD.group_name)
        (res * weight.to(dev())).sum().backward()
        leaves = [(e[2].clone().requires_grad_(), e[3].clone().requires_grad_()) for e in every]
        total = 0
        for k in range(WORLD):
            got_k = leaves[k][1].clone()
            for i in range(WORLD):
                s_i, o_i = every[i][0], every[i][1]
                start = sum(s_i[:k])
                got_k[o_i[k]:o_i[k] + s_i[k]] = leaves[i][0][start:start + s_i[k]]
            if k == RANK:
                torch.testing.assert_close(res.detach().cpu(), got_k.detach(), rtol=0, atol=0,
                                           msg=f"ragged_all_to_all overlap={overlap}")
            total = total + (got_k * every[k][4]).sum()
        total.backward()
        torch.testing.assert_close(op_t.grad.cpu(), leaves[RANK][0].grad, msg=f"operand grad overlap={overlap}")
        torch.testing.assert_close(out_t.grad.cpu(), leaves[RANK][1].grad, msg=f"output grad overlap={overlap}")
    try:
        ops.ragged_all_to_all(op_t, out_t, *(torch.tensor(v, device=dev()) for v in
                                             ([0] * WORLD, [1] * WORLD, [0] * WORLD, [1] * WORLD)),
                              dist.group.WORLD.group_name, out=torch.empty_like(base, device=dev()))
        raise AssertionError("out= with grad accepted")
    except RuntimeError as e:
        assert "ragged_all_to_all" in str(e) and "automatic differentiation" in str(e), e


def case_accelerate():
    """Under `accelerate launch`: Accelerate's state is a tpu_dist process group with
    this process's ranks on tpu:LOCAL_RANK; gather, reduce, broadcast, gather_object
    and wait_for_everyone give what every rank's inputs say; prepare() wraps the
    model in DDP and splits each batch between the ranks, and SGD steps with
    accelerator.backward end with the weights of one process on the whole batches;
    a shuffled loader's order is the same on every rank (seed broadcast)."""
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import DistributedType, broadcast, gather_object
    from torch import nn

    local = int(os.environ["LOCAL_RANK"])
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))
    s = acc.state
    assert s.distributed_type == DistributedType.MULTI_GPU, s.distributed_type
    assert s.backend == "tpu_dist" and dist.get_backend() == "tpu_dist", (s.backend, dist.get_backend())
    got = (s.num_processes, s.process_index, s.local_process_index, dist.get_world_size(), dist.get_rank())
    assert got == (WORLD, RANK, local, WORLD, RANK), got
    assert acc.device == torch.device("tpu", local) and torch.tpu.current_device() == local, acc.device
    assert acc.use_distributed and acc.multi_device and acc.is_main_process == (RANK == 0)

    mine = torch.arange(3.0) + 10 * RANK
    every = [torch.arange(3.0) + 10 * r for r in range(WORLD)]
    g = acc.gather(mine.to(acc.device))
    assert g.device == acc.device and torch.equal(g.cpu(), torch.cat(every)), g
    for how, want in (("sum", sum(every)), ("mean", sum(every) / WORLD)):
        r = acc.reduce(mine.to(acc.device), how)
        assert torch.equal(r.cpu(), want), (how, r, want)
    b = broadcast(mine.to(acc.device), from_process=WORLD - 1)
    assert torch.equal(b.cpu(), every[-1]), b
    assert gather_object([f"r{RANK}"]) == [f"r{r}" for r in range(WORLD)]
    store = dist.distributed_c10d._get_default_store()
    if RANK == WORLD - 1:  # the last to arrive: no rank leaves wait_for_everyone before its key exists
        time.sleep(0.5)
        store.set("accelerate_late", "1")
    acc.wait_for_everyone()
    assert store.check(["accelerate_late"]), "wait_for_everyone returned before the last rank arrived"

    steps, per_rank = 3, 2
    xs = torch.randn(steps * per_rank * WORLD, 8, generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs), batch_size=per_rank * WORLD)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = acc.prepare(model, opt, loader)
    assert isinstance(model, nn.parallel.DistributedDataParallel), type(model)
    assert next(model.parameters()).device == acc.device
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    seen = 0
    for (x,), whole in zip(loader, xs.split(per_rank * WORLD)):
        assert x.device == acc.device and torch.equal(x.cpu(), whole.chunk(WORLD)[RANK]), (seen, x)
        acc.backward(model(x).pow(2).mean())
        opt.step()
        opt.zero_grad()
        ref(whole).pow(2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
        seen += 1
    assert seen == steps, seen
    for (n, p), q in zip(acc.unwrap_model(model).named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=n)

    # shuffled: the ranks seed differently, Accelerate broadcasts rank 0's sampler
    # generator state, so the ranks' halves make up one permutation of the data
    torch.manual_seed(100 + RANK)
    shuffled = acc.prepare(torch.utils.data.DataLoader(torch.arange(16), batch_size=4, shuffle=True))
    order = torch.cat([acc.gather(x).cpu() for x in shuffled])
    assert sorted(order.tolist()) == list(range(16)) and not torch.equal(order, torch.arange(16)), order
    print(f"rank {RANK}: accelerate {s.distributed_type.value} {s.backend} on {acc.device}", flush=True)


def case_trainer():
    """Transformers Trainer fine-tuning a tiny random Llama (built from a config),
    as one process or one of torchrun's: the same global batch of 4 either way
    (per_device_train_batch_size 4 / WORLD) in dataset order ("sequential"
    sampling; Accelerate gives each rank every WORLD-th per-device batch).
    Rank 0 writes the per-step logs and final weights to DIST_TEST_DIR for
    test_dist.py to compare."""
    import json

    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    steps, batch, seq, vocab = 4, 4, 12, 128
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(steps * batch):
        ids = torch.randint(3, vocab, (seq,), generator=g)
        mask = torch.ones(seq, dtype=torch.long)
        pad = int(torch.randint(0, 5, (), generator=g))  # rows differ in token count: per-rank token
        if pad:                                          # counts differ, so the loss must average over all
            ids[-pad:] = 0
            mask[-pad:] = 0
        labels = ids.clone()
        labels[mask == 0] = -100
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    out = os.environ["DIST_TEST_DIR"]
    args = TrainingArguments(
        output_dir=os.path.join(out, f"run{WORLD}"), max_steps=steps, per_device_train_batch_size=batch // WORLD,
        train_sampling_strategy="sequential", learning_rate=3e-3, weight_decay=0.01, max_grad_norm=1.0,
        optim="adamw_torch", logging_steps=1, save_strategy="no", report_to=[], seed=0, disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    assert args.world_size == WORLD and trainer.accelerator.num_processes == WORLD, (args.world_size, WORLD)
    assert args.process_index == RANK and args.device == torch.device("tpu", local), (args.process_index, args.device)
    assert args.parallel_mode.value == ("distributed" if WORLD > 1 else "not_parallel"), args.parallel_mode
    trainer.train()
    if WORLD > 1:
        assert isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel), type(trainer.model_wrapped)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == steps, trainer.state.log_history
    if RANK == 0:
        with open(os.path.join(out, f"trainer{WORLD}.json"), "w") as f:
            json.dump({"loss": [h["loss"] for h in logs], "grad_norm": [h["grad_norm"] for h in logs],
                       "world_size": args.world_size, "num_processes": trainer.accelerator.num_processes,
                       "distributed_type": trainer.accelerator.distributed_type.value}, f)
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()},
                   os.path.join(out, f"trainer{WORLD}.pt"))
    print(f"rank {RANK}: trainer world {args.world_size}, losses {[h['loss'] for h in logs]}", flush=True)


def thread_names():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


TIMEOUT = float(os.environ.get("DIST_TEST_TIMEOUT", "60"))
GLOO = None
BACKEND = sys.argv[1] if len(sys.argv) > 1 else ""

if __name__ == "__main__":
    cases = sys.argv[2:]
    if BACKEND != "none":
        dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=TIMEOUT))
    if "collectives" in cases:
        GLOO = dist.new_group(backend="gloo")
    for name in cases:
        globals()["case_" + name]()
        print(f"PASS {name}", flush=True)
    if BACKEND == "tpu_dist":
        from torch_tpu.distributed import transport_stats

        print(f"rank {RANK}: transport {transport_stats()}", flush=True)
    if dist.is_initialized():
        GLOO = None
        dist.destroy_process_group()
        gc.collect()  # the Gloo group made above: frames of caught errors may still refer to it
    if BACKEND == "tpu_dist":
        # No Gloo worker thread may outlive the groups: one left to the interpreter's
        # finalization can abort the process at exit (see ProcessGroupTPU._release_gloo).
        left = [n for n in thread_names() if n == "pt_gloo_runloop"]
        assert not left, f"rank {RANK}: {len(left)} Gloo worker threads after destroy_process_group"
        print(f"rank {RANK}: no Gloo worker thread left", flush=True)
