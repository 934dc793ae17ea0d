"""Runs Transformers' own multi-process test mixins (tests/test_*_mixin.py of its
source distribution) on device "tpu".

Transformers' PyPI source distribution ships the mixins that hold its tensor-,
expert- and FSDP-parallel tests, but not the helper module they import their
process launcher from (`tests/distributed_testing_utils.py`) nor the per-model
test files. This module is that launcher, written here from how the mixins call
it, plus the two set-up steps:

    python tests/hf_distributed_testing_utils.py fetch   # scripts/test.sh runs it

downloads the source distribution of the installed Transformers version from
PyPI (pip's cache is reused) and keeps its tests/*.py under
build/transformers-tests/<version>/; `install_package()` makes that directory
importable as the package `transformers_tests`, with this module as its
`distributed_testing_utils`, in the pytest process and in every rank.

`run_distributed(world_size)(func)(*args)` (the tensor- and expert-parallel
mixins' launcher) runs func(rank, *args) in world_size
fresh processes (tests/hf_rank.py) rendezvousing on 127.0.0.1 as torchrun's
ranks do (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT: each
process then has LOCAL_WORLD_SIZE chips and uses tpu:LOCAL_RANK), each in a
process group of the backend Transformers maps the test device to ("tpu" ->
"tpu_dist", "cpu" -> "gloo"; init_process_group below). Any rank failing, or
the ranks running past LIMIT seconds (all are then killed), fails the caller
with every rank's output. The FSDP mixin's launcher, `_start_rank_processes(fn,
args, nprocs)`, is the same without the process group (its wrapper joins the
caller's TCPStore and makes its own), with `_get_distributed_device_type`,
`_get_distributed_backend`, `_get_rank_device` and `_set_rank_device`.
"""
import glob
import importlib.util
import os
import pickle
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGE = "transformers_tests"
LIMIT = 300  # seconds for one multi-process run (a loaded 2-core machine starts processes slowly)


def tests_dir(version=None):
    if version is None:
        import transformers

        version = transformers.__version__
    return os.path.join(ROOT, "build", "transformers-tests", version, "tests")


def fetch(version=None):
    """Transformers' source distribution from PyPI -> its tests/*.py in tests_dir()."""
    if version is None:
        import transformers

        version = transformers.__version__
    dest = tests_dir(version)
    if os.path.exists(os.path.join(dest, "test_tensor_parallel_mixin.py")):
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-binary", ":all:", f"transformers=={version}", "-d", tmp], check=True)
        (sdist,) = glob.glob(os.path.join(tmp, "*.tar.gz"))
        os.makedirs(dest + ".part", exist_ok=True)
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                parts = m.name.split("/")
                if m.isfile() and len(parts) == 3 and parts[1] == "tests" and parts[2].endswith(".py"):
                    with tar.extractfile(m) as src, open(os.path.join(dest + ".part", parts[2]), "wb") as out:
                        out.write(src.read())
        os.replace(dest + ".part", dest)
    return dest


def install_package(path=None):
    """Makes Transformers' test files importable as `transformers_tests.<file>`,
    with this module standing in for their missing `distributed_testing_utils`."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    path = path or tests_dir()
    if not os.path.exists(os.path.join(path, "test_tensor_parallel_mixin.py")):
        raise FileNotFoundError(f"Transformers' test mixins are not in {path}: run "
                                f"`python tests/hf_distributed_testing_utils.py fetch` (scripts/test.sh does)")
    pkg = types.ModuleType(PACKAGE)
    pkg.__path__ = [path]
    pkg.__package__ = PACKAGE
    sys.modules[PACKAGE] = pkg
    sys.modules[PACKAGE + ".distributed_testing_utils"] = sys.modules[__name__]
    return pkg


def init_process_group(timeout_s=LIMIT):
    """This rank's default group: Transformers' backend for TRANSFORMERS_TEST_DEVICE
    (else the current accelerator), LOCAL_RANK's device current."""
    import datetime

    import torch
    import torch.distributed as dist
    from transformers.distributed.utils import get_distributed_backend

    device_type = os.environ.get("TRANSFORMERS_TEST_DEVICE") or torch.accelerator.current_accelerator().type
    device_type = torch.device(device_type).type
    if device_type != "cpu":
        torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(get_distributed_backend(device_type), timeout=datetime.timedelta(seconds=timeout_s))


def _get_distributed_device_type():
    """The device the distributed tests run on: TRANSFORMERS_TEST_DEVICE, else the
    current accelerator, else the CPU."""
    import torch

    name = os.environ.get("TRANSFORMERS_TEST_DEVICE")
    if not name:
        acc = torch.accelerator.current_accelerator()
        name = acc.type if acc is not None else "cpu"
    return torch.device(name).type


def _get_distributed_backend():
    from transformers.distributed.utils import get_distributed_backend

    return get_distributed_backend(_get_distributed_device_type())


def _get_rank_device(rank):
    import torch

    kind = _get_distributed_device_type()
    return torch.device("cpu") if kind == "cpu" else torch.device(kind, rank)


def _set_rank_device(rank):
    import torch

    if _get_distributed_device_type() != "cpu":
        torch.accelerator.set_device_index(rank)


def _start_rank_processes(fn, args=(), nprocs=1, limit=LIMIT):
    """torch.multiprocessing.spawn's contract for the FSDP mixin: fn(rank, *args) in
    nprocs fresh processes, which create their process group themselves (fn's
    wrapper joins the caller's TCPStore). The environment of the ranks is the one
    run_distributed gives."""
    _run_ranks(nprocs, fn, args, limit, init_group=False)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_distributed(world_size, limit=LIMIT):
    def wrap(func):
        def launch(*args):
            _run_ranks(world_size, func, args, limit)

        return launch

    return wrap


def _run_ranks(world_size, func, args, limit, init_group=True):
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        payload = os.path.join(tmp, "call.pkl")
        with open(payload, "wb") as f:
            pickle.dump((tests_dir(), init_group), f)
            pickle.dump((func, args), f)
        procs = []
        for rank in range(world_size):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       TORCH_TPU_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
            env.pop("TORCH_TPU_HOST_DEVICES", None)
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "hf_rank.py"), payload], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.time() + limit
        outs, timed_out = [], False
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1, deadline - time.time()))[0])
            except subprocess.TimeoutExpired:
                timed_out = True
                for q in procs:  # every thread's stack first (hf_rank.py), then kill
                    if q.poll() is None:
                        q.send_signal(signal.SIGUSR1)
                time.sleep(3)
                for q in procs:
                    q.kill()
                outs = [q.communicate()[0] for q in procs]
                break
    name = getattr(func, "__qualname__", repr(func))
    logs = "\n".join(f"---- rank {r} (exit {p.returncode}):\n{o[-(12000 if timed_out else 6000):]}" for r, (p, o) in enumerate(zip(procs, outs)))
    if timed_out:
        raise AssertionError(f"{name}: ranks still running after {limit} s (killed)\n{logs}")
    if any(p.returncode for p in procs):
        raise AssertionError(f"{name} failed on {world_size} ranks\n{logs}")
    for o in outs:  # each rank's summary lines (hf_rank.py), shown by pytest -rA
        print("\n".join(ln for ln in o.splitlines() if ln.startswith("rank ")))


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        print(fetch())
    else:
        sys.exit("usage: python tests/hf_distributed_testing_utils.py fetch")
