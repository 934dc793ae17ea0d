"""One rank of hf_distributed_testing_utils.run_distributed:

    python tests/hf_rank.py CALL.pkl

CALL.pkl holds two pickles: (the Transformers tests directory, whether to create
the process group), then (func, args). The test package is made importable before
the second is read (func is pickled by reference to a module in it); func(RANK,
*args) runs, then the process group is destroyed. For the tensor- and expert-
parallel mixins the process group is created first, as they expect: the backend
Transformers maps the test device to (TRANSFORMERS_TEST_DEVICE: "tpu" -> "tpu_dist"),
with LOCAL_RANK's chip current; the FSDP mixin's func creates (and destroys) its
own. Exit 0 on return, 1 with the traceback on an exception.
"""
import faulthandler
import os
import pickle
import signal
import sys
import traceback

import hf_distributed_testing_utils as hdu

if __name__ == "__main__":
    # The launcher sends SIGUSR1 to ranks that ran past its limit before it kills them:
    # every thread's Python stack then shows where each rank waits.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with open(sys.argv[1], "rb") as f:
        tests, init_group = pickle.load(f)
        hdu.install_package(tests)
        func, args = pickle.load(f)
    rank = int(os.environ["RANK"])
    import torch.distributed as dist

    made = []  # the backend of every default group this rank creates, read once it exists
    _init = dist.init_process_group

    def _recording_init(*a, **k):
        _init(*a, **k)
        made.append(dist.get_backend())

    dist.init_process_group = _recording_init
    try:
        if init_group:
            hdu.init_process_group()
        func(rank, *args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    import torch

    if os.environ.get("TRANSFORMERS_TEST_DEVICE") == "tpu":
        # The test really ran on the device: its process group is tpu_dist, which carried
        # collectives, and the models took chip memory.
        import torch_tpu

        moved = sum(torch_tpu.distributed.transport_stats().values())
        peak = torch.tpu.max_memory_allocated()
        backend = ",".join(made) or None
        print(f"rank {rank}: backend {backend}, {moved} tpu_dist collectives "
              f"{torch_tpu.distributed.transport_stats()}, chip peak {peak} bytes", flush=True)
        if backend != "tpu_dist" or moved == 0 or peak == 0:
            print(f"rank {rank}: {func.__qualname__} did not run on tpu over tpu_dist", flush=True)
            os._exit(1)
    if dist.is_initialized():
        dist.destroy_process_group()
    print(f"rank {rank}: {func.__qualname__} passed", flush=True)
