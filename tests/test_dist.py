"""Multi-process tests of the c10d backend "tpu_dist" on 127.0.0.1.

Each test starts processes running tests/dist_worker.py (directly with env://,
or through torchrun) and fails loudly, killing them, when they run past a time
limit. Tests are skipped only where a loopback port cannot be bound.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch_tpu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "dist_worker.py")
LIMIT = 180  # seconds per multi-process run; processes start slowly on a loaded 2-core machine


def free_port():
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as e:
        pytest.skip(f"cannot bind a loopback port: {e}")


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e["TORCH_TPU_NUM_THREADS"] = "1"  # two processes share the machine's cores
    for k in ("TORCH_TPU_HOST_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        e.pop(k, None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def run_all(cmds, limit=LIMIT):
    """Starts every (argv, env) at once; returns their (returncode, output) after all
    exit. Past `limit` seconds all are killed and the test fails with their output."""
    procs = [subprocess.Popen(a, env=e, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for a, e in cmds]
    deadline = time.time() + limit
    outs = []
    try:
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1, deadline - time.time()))[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                logs = [q.communicate()[0] for q in procs]
                pytest.fail(f"processes still running after {limit} s (killed):\n" + "\n----\n".join(logs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, o) for p, o in zip(procs, outs)]


def ranks(backend, cases, world=2, worker=WORKER, **extra):
    port = free_port()
    cmds = [([sys.executable, worker, backend, *cases],
             env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=r, WORLD_SIZE=world, LOCAL_RANK=r,
                 LOCAL_WORLD_SIZE=world, **extra)) for r in range(world)]
    return run_all(cmds)


def check_passed(results, cases):
    for r, (code, out) in enumerate(results):
        assert code == 0, f"rank {r} exited with {code}:\n{out}"
        for c in cases:
            assert f"PASS {c}" in out, f"rank {r} did not pass {c}:\n{out}"


def test_registered():
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]
    assert dist.Backend.backend_capability["tpu"] == ["tpu"]
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"


def test_collectives_dtensor_errors():
    """init_process_group("tpu_dist"), LOCAL_WORLD_SIZE=2: LOCAL_RANK's chip is
    current; every collective on tpu tensors equals gloo's on the same CPU data;
    DeviceMesh (1-D and 2x1), distribute_tensor/redistribute, functional
    collectives, a Colwise/Rowwise MLP's forward and gradients equal one
    process's; DDP and FSDP2 SGD steps equal one process's; mismatched sizes,
    dtypes, collectives and arguments raise ValueError on both ranks, and the
    group still works after."""
    cases = ["launch", "collectives", "shm", "dtensor", "train", "errors"]
    results = ranks("tpu_dist", cases)
    check_passed(results, cases)
    assert "rank 1 local 1 on tpu:1 of 2" in results[1][1], results[1][1]
    # the ranks run on this process's driver (scripts/test.sh runs this file again on pjrt)
    driver = torch_tpu._C.selected_driver()
    assert all(f"rank {r} driver {driver}" in out for r, (_, out) in enumerate(results)), results


def test_mesh_2x2_four_processes():
    """4 processes (one chip each): 2-D DeviceMesh, sub-groups, new_group, 2-D DTensor
    redistribution, TP over one mesh dimension with DP over the other."""
    results = ranks("tpu_dist", ["mesh2d"], world=4, TORCH_TPU_HOST_DEVICES=1)
    check_passed(results, ["mesh2d"])


def test_collectives_through_gloo():
    """TORCH_TPU_DIST_SHM=0: the path groups spanning hosts take (tpu tensors staged
    through host memory over Gloo's TCP), every collective and error case again."""
    cases = ["collectives", "errors"]
    results = ranks("tpu_dist", cases, TORCH_TPU_DIST_SHM=0)
    check_passed(results, cases)
    assert "transport {'shared_memory': 0," in results[0][1], results[0][1]


def test_collectives_unchecked():
    """TORCH_TPU_DIST_CHECK=0 on every rank: no descriptor exchange before collectives and no
    header before send/recv messages; the collectives (send/recv and batch_isend_irecv rings
    among them) still equal gloo's."""
    results = ranks("tpu_dist", ["collectives"], TORCH_TPU_DIST_CHECK=0)
    check_passed(results, ["collectives"])


def test_dead_rank_fails_within_timeout():
    t0 = time.time()
    results = ranks("tpu_dist", ["die"], DIST_TEST_TIMEOUT=10)
    code, out = results[0]
    assert code == 0 and "PASS die" in out, out
    assert results[1][0] == 3, results[1]
    assert time.time() - t0 < LIMIT


@pytest.mark.slow
def test_silent_rank_times_out():
    """A live rank that stops calling collectives: the other's fails after the 5 s group timeout."""
    results = ranks("tpu_dist", ["hang"], DIST_TEST_TIMEOUT=5)
    code, out = results[0]
    assert code == 0 and "PASS hang" in out, out


def torchrun(nproc, nnodes=1, node_rank=0, port=None, worker_args=("cpu:gloo,tpu:tpu_dist", "launch"), **extra):
    exe = shutil.which("torchrun")
    argv = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    argv += [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--node-rank={node_rank}",
             "--master-addr=127.0.0.1", f"--master-port={port}", WORKER, *worker_args]
    return argv, env(**extra)


@pytest.mark.slow
def test_torchrun_one_node():
    """torchrun --nproc-per-node 2: each process has 2 chips by default and uses
    tpu:LOCAL_RANK; with TORCH_TPU_HOST_DEVICES=1 each uses its one chip."""
    port = free_port()
    results = run_all([torchrun(2, port=port)])
    check_passed(results, ["launch"])
    assert "local 1 on tpu:1 of 2" in results[0][1], results[0][1]
    results = run_all([torchrun(2, port=free_port(), TORCH_TPU_HOST_DEVICES=1)])
    check_passed(results, ["launch"])
    assert "local 1 on tpu:0 of 1" in results[0][1], results[0][1]


def test_torchrun_two_nodes_on_loopback():
    """Two torchrun invocations (--nnodes 2, --node-rank 0/1) on 127.0.0.1, one
    process each, init_process_group("cpu:gloo,tpu:tpu_dist"): tpu and cpu
    collectives cross "hosts" over Gloo's TCP."""
    port = free_port()
    results = run_all([torchrun(1, nnodes=2, node_rank=n, port=port) for n in (0, 1)])
    check_passed(results, ["launch"])
    assert "rank 1 local 0 on tpu:0" in results[1][1], results[1][1]


def test_google_ops_collectives():
    """torch.tpu.ops.all_gather_dim, reduce_scatter_dim, send/recv and
    ragged_all_to_all (Google's names) on two tpu_dist ranks."""
    check_passed(ranks("tpu_dist", ["google_ops"]), ["google_ops"])


@pytest.mark.slow
def test_transformers_tp_plan(tmp_path):
    pytest.importorskip("transformers")
    check_passed(ranks("tpu_dist", ["tp_plan"], DIST_TEST_DIR=tmp_path), ["tp_plan"])


def test_device_helpers():
    from torch_tpu import distributed as td

    e = {"LOCAL_WORLD_SIZE": "2"}
    td.local_chips_default(e)
    assert e["TORCH_TPU_HOST_DEVICES"] == "2"
    e = {"LOCAL_WORLD_SIZE": "2", "TORCH_TPU_HOST_DEVICES": "1"}
    td.local_chips_default(e)
    assert e["TORCH_TPU_HOST_DEVICES"] == "1"
    picked = []
    td.select_local_chip(picked.append, 2, {"LOCAL_RANK": "1"})
    td.select_local_chip(picked.append, 1, {"LOCAL_RANK": "1"})
    assert picked == [1]
    assert torch.tpu.device_count() >= 1


def test_accelerate_launch(tmp_path):
    """`accelerate launch --num_processes 2` (the `accelerate` command, run by this
    Python; no config file: HF_HOME is empty): Accelerate's state on each rank
    (MULTI_GPU over tpu_dist, ranks, tpu:LOCAL_RANK), gather/reduce/broadcast/
    gather_object/wait_for_everyone, a DDP-wrapped model trained with
    accelerator.backward on half of each batch per rank ends with one process's
    weights on the whole batches."""
    pytest.importorskip("accelerate")
    argv = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--num_processes=2",
            "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={free_port()}",
            WORKER, "none", "accelerate"]
    results = run_all([(argv, env(HF_HOME=tmp_path, HF_HUB_OFFLINE=1))])
    code, out = results[0]
    assert code == 0, out
    for r in range(2):
        assert f"rank {r}: accelerate MULTI_GPU tpu_dist on tpu:{r}" in out, out
    assert out.count("PASS accelerate") == 2, out


@pytest.mark.slow
def test_trainer_two_processes(tmp_path):
    """Transformers' Trainer under torchrun --nproc-per-node 2 (per-device batch 2)
    and alone (per-device batch 4), both in dataset order: the same global batches,
    so the per-step losses, gradient norms and final weights agree."""
    pytest.importorskip("transformers")
    import json

    two = torchrun(2, port=free_port(), worker_args=("none", "trainer"), DIST_TEST_DIR=tmp_path, HF_HUB_OFFLINE=1)
    one = ([sys.executable, WORKER, "none", "trainer"], env(DIST_TEST_DIR=tmp_path, HF_HUB_OFFLINE=1))
    results = run_all([two, one])
    for code, out in results:
        assert code == 0, out
    assert results[0][1].count("PASS trainer") == 2 and "PASS trainer" in results[1][1], results
    runs = {w: json.loads((tmp_path / f"trainer{w}.json").read_text()) for w in (1, 2)}
    assert (runs[2]["world_size"], runs[2]["num_processes"], runs[2]["distributed_type"]) == (2, 2, "MULTI_GPU")
    assert (runs[1]["world_size"], runs[1]["num_processes"], runs[1]["distributed_type"]) == (1, 1, "NO")
    for key in ("loss", "grad_norm"):
        torch.testing.assert_close(torch.tensor(runs[2][key]), torch.tensor(runs[1][key]), rtol=1e-4, atol=1e-5,
                                   msg=key)
    w1, w2 = (torch.load(tmp_path / f"trainer{w}.pt") for w in (1, 2))
    assert w1.keys() == w2.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)
