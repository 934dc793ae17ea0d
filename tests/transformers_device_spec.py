"""Device spec for Transformers' test utilities (transformers.testing_utils), so that
Transformers' own test suite runs its device tests on "tpu":

    cd tests    # Transformers imports the spec by bare module name: give the file name, run from here
    TRANSFORMERS_TEST_BACKEND=torch_tpu TRANSFORMERS_TEST_DEVICE=tpu \\
    TRANSFORMERS_TEST_DEVICE_SPEC=transformers_device_spec.py \\
        python -m pytest <transformers checkout>/tests/models/llama -k "not slow"

testing_utils imports TRANSFORMERS_TEST_BACKEND (torch_tpu registers the device),
checks TRANSFORMERS_TEST_DEVICE against DEVICE_NAME, and puts the *_FN callables
below into its backend_manual_seed / backend_empty_cache / backend_device_count
tables for DEVICE_NAME. The names are exactly those it reads.
"""
import torch
import torch_tpu  # noqa: F401  (registers the "tpu" device and torch.tpu)

DEVICE_NAME = "tpu"

# backend_manual_seed(device, seed): seeds the current chip's generator
MANUAL_SEED_FN = torch.tpu.manual_seed
# backend_empty_cache(device): returns cached blocks of the caching allocator to the chips
EMPTY_CACHE_FN = torch.tpu.empty_cache
# backend_device_count(device): number of chips (TORCH_TPU_HOST_DEVICES virtual chips on the host driver)
DEVICE_COUNT_FN = torch.tpu.device_count

# Whether each chip is locked to the process that opens it (Transformers then runs the tests that
# would fork a subprocess per test in-process, and skips its multi-process tests: "Distributed tests
# spawn one process per device"). Google's runtime locks a TPU chip to one process, and Transformers
# 5.23 lists "tpu" so by default. This device locks nothing on the host driver or on the pjrt
# driver with XLA's CPU plugin (every process has its own runtime and chips; torchrun's ranks each
# use tpu:LOCAL_RANK), so there the spec takes "tpu" back out of that list; on real TPU chips (pjrt
# with libtpu) it keeps it.
SINGLE_PROCESS_DEVICE = (torch_tpu._C.selected_driver() == "pjrt"
                         and not torch.tpu.get_device_name(0).startswith("tpu on PJRT cpu"))
if not SINGLE_PROCESS_DEVICE:
    # This file is imported by transformers.testing_utils while it initialises, after it defined the list.
    import sys

    _tu = sys.modules.get("transformers.testing_utils")
    if _tu is not None:
        _tu.SINGLE_PROCESS_DEVICES.discard(DEVICE_NAME)
